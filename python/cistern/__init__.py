# SPDX-License-Identifier: MIT
"""cistern: ML training samples passed between processes through a named POSIX
shared-memory segment, under one of six sampling policies.

    import cistern
    with cistern.create("demo", policy="fifo", slots=256, slot_size=4096) as seg:
        seg.put(b"hello", sim_id=1, time_step=0)
        seg.close_reception()
        for payload in seg:          # bytes, until end of data
            print(payload)
    cistern.unlink("demo")

Writing:
  put(data)              -> sample id (bytes, a numpy array or any buffer)
  put_batch(array)       -> sample ids of the array's rows, put in one C call
  reserve(dtype, shape)  -> Reservation, a context manager whose value is a
                            writable numpy view of the slot: committed at the
                            end of the with-block, aborted on an exception

Reading:
  get()                  -> bytes (a copy)
  get_array(dtype, shape)-> numpy array (a private copy)
  get_batch(n, dtype, shape) -> numpy array (k, *shape), k <= n, gathered in C
  get_into(out)          -> length: one sample copied into your reused array
  get_batch_into(out)    -> k: up to len(out) samples into your reused array, one call
  acquire()              -> Sample, a context manager whose value is a read-only,
                            zero-copy numpy view valid until release
  acquire_many(n)        -> Group of n samples held until release (or unacquire)

The *_into calls and put_batch are the fast ways to move many samples from
Python: no object made per sample, one C call for many.

Samples that describe themselves: create(..., schema=...) gives a segment a
schema, named fields each of a dtype and a shape, such as an RL transition

    seg = cistern.create("rl", schema={"obs": ("float32", (84, 84)),
                                       "action": ("int64", ()), "reward": "float32"})
    seg.put({"obs": obs, "action": 3, "reward": 0.5})   # checked, written in place
    batch = seg.get_batch(32)      # {"obs": (32, 84, 84), "action": (32,), ...}

Its readers need not restate anything: get(), get_batch() and acquire() give
dicts of numpy arrays (Fields); Segment.schema says what the segment holds.

Watching and managing (as the `cistern` command does): stats(), config(),
occupancy() and procs() of a Segment; list_segments(), inspect(), gc(),
remove(), dump(), restore() and verify_dump() by name. They return typed,
read-only records (which also read like the dicts they replace: st["puts"]).

Errors: a timeout raises TimeoutError, end of data raises cistern.EndOfData (iteration
just stops), bad parameters raise ValueError, anything else OSError (the errno's
subclass: FileExistsError, FileNotFoundError, BrokenPipeError once reception is
closed, ...) with cistern_strerror()'s message; attach() refuses a segment owned by
another user than ours or root with PermissionError unless any_owner=True. Blocking
calls release the GIL and can be interrupted with Ctrl-C.

Timeouts are in seconds: None waits forever, 0 tries once, a positive number waits
at most that long.

A Segment is one attachment (struct cistern): use it from one thread at a time
(a second thread gets RuntimeError), and attach again in a child process.
"""

from __future__ import annotations

import dataclasses
import functools
import errno
import math
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import (TYPE_CHECKING, Any, Callable, Generic, Literal, NamedTuple, TypeVar, Union,
                    cast, overload)

if TYPE_CHECKING:
    import numpy as _np
    import numpy.typing as npt

    from . import _cistern

    Array = npt.NDArray[Any]
    #: A sample of a segment with a schema (or a batch of them, along a first
    #: axis): one numpy array per field, by name.
    Fields = dict[str, Array]
else:
    Fields = dict
    try:  # installed: the extension module lives inside the package
        from . import _cistern
    except ImportError:  # build tree: PYTHONPATH=<builddir>/python:<srcdir>/python
        try:
            import _cistern
        except ImportError:
            # The package's sources without the extension module: most often
            # python/ of the source tree, found first (it is the current
            # directory, or on sys.path), shadowing the installed package.
            raise ImportError(
                f"cistern was imported from {os.path.dirname(os.path.abspath(__file__))}, "
                "which has no built extension module (_cistern): a source tree's "
                "python/ directory shadows the installed package when Python starts "
                "there. Run from another directory, or put the build tree's python/ "
                "first: PYTHONPATH=<builddir>/python:<srcdir>/python",
                name="cistern") from None

    try:
        import numpy as _np
    except ImportError:  # bytes-only use works without numpy
        _np = None

#: A dtype as numpy takes it ("float32", numpy.float32, numpy.dtype(...)).
DTypeLike = Any
#: A shape: an int, a sequence of ints (one may be -1), or None for "flat".
ShapeLike = Union[int, Sequence[int], None]
#: A timeout in seconds: None waits forever, 0 tries once.
Timeout = Union[float, None]
#: A path to a file (dump and restore).
PathLike = Union[str, "os.PathLike[str]"]
#: progress(done, total) of dump() and restore().
Progress = Callable[[int, int], object]
#: What create(schema=...) and Schema.parse() take: the text form
#: ("obs:float32[84,84];action:int64[]"), a dict {name: (dtype, shape)} or
#: {name: dtype} for a scalar, a list of (name, dtype[, shape]), a numpy
#: structured dtype, or a Schema.
SchemaLike = Any

EndOfData = _cistern.EndOfData
_BATCH_POLICIES = ("reservoir", "fifo-evict-reservoir", "batch-reservoir")
# The names POLICIES.md uses, lowercased, accepted as well.
_CAMEL = {"fifoevictreservoir": "fifo-evict-reservoir",
          "simpairedreservoir": "sim-paired-reservoir",
          "batchreservoir": "batch-reservoir"}


class Meta(NamedTuple):
    """The metadata of a sample: its id (given by the segment at commit) and the
    producer's simulation id and time step."""

    sample_id: int
    sim_id: int
    time_step: int


#: The six policies' names, indexed by policy number.
POLICIES: tuple[str, ...] = tuple(_cistern.policy_name(i) for i in range(_cistern.POLICY_COUNT))
#: The slot classes that Occupancy.slots counts, indexed by class number.
SLOT_CLASSES: tuple[str, ...] = tuple(_cistern.slot_class_name(i)
                                      for i in range(_cistern.SLOT_CLASSES))
#: The library's version, (major, minor, patch).
VERSION: tuple[int, int, int] = _cistern.VERSION
#: create()'s slots and slot_size when left out (slot_size with a schema: its sample size).
DEFAULT_SLOT_COUNT: int = _cistern.DEFAULT_SLOT_COUNT
DEFAULT_SLOT_SIZE: int = _cistern.DEFAULT_SLOT_SIZE
#: The package's version, as the build gave it (meson.build's project version).
__version__: str = _cistern.__version__
#: The dtypes a schema's fields may have, by their names in the text form.
DTYPES: tuple[str, ...] = tuple(_cistern.dtype_name(i) for i in range(_cistern.DTYPE_COUNT))

__all__ = [
    "create", "attach", "open_readonly", "unlink", "remove", "strerror", "name_valid",
    "config_problem", "policy_name", "policy_number", "list_segments", "inspect", "gc",
    "dump", "restore", "verify_dump", "connect", "keygen",
    "Segment", "Sample", "Group", "Reservation", "Meta", "Schema", "Field", "Fields",
    "Config", "Stats", "Occupancy", "ProcInfo", "SegmentInfo", "Inspection", "GcReport",
    "DumpInfo", "RemoteProducer", "RemoteInfo",
    "EndOfData", "POLICIES", "SLOT_CLASSES", "DTYPES", "VERSION", "__version__",
    "segment_bytes", "shm_room_problem",
    "DEFAULT_SLOT_COUNT", "DEFAULT_SLOT_SIZE",
]


def strerror(code: int) -> str:
    """A sentence for a result code of the C library: 0 or a negative errno
    (cistern_strerror())."""
    return _cistern.strerror(int(code))


def name_valid(name: str) -> bool:
    """Whether `name` is a valid segment name: 1 to 64 characters from
    [A-Za-z0-9._-], starting with a letter or digit (cistern_name_valid())."""
    return isinstance(name, str) and _cistern.name_valid(name) == 0


def policy_name(number: int) -> str:
    """The name of policy `number` ("fifo", "firo", ...) (cistern_policy_name());
    ValueError if there is none."""
    return _cistern.policy_name(number)


def policy_number(policy: str | int) -> int:
    """The number of a policy given by name (as in POLICIES; underscores and the
    CamelCase names of POLICIES.md work too) or by number (cistern_policy_parse());
    ValueError if there is none."""
    if isinstance(policy, str):
        key = policy.lower().replace("_", "-")
        key = _CAMEL.get(key, key)
        try:
            return _cistern.policy_parse(key)
        except ValueError:
            pass
    if isinstance(policy, int) and not isinstance(policy, bool):
        if 0 <= policy < _cistern.POLICY_COUNT:
            return policy
    raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")


def _timeout_ms(timeout: Timeout) -> int:
    if timeout is None:
        return -1
    try:
        t = float(timeout)
    except (TypeError, ValueError):
        raise TypeError("timeout must be a number of seconds or None") from None
    if not t >= 0:  # also catches NaN
        raise ValueError("timeout must be >= 0 seconds, or None to wait forever")
    if t == 0:
        return 0
    return min(max(1, math.ceil(t * 1000)), 2**31 - 1)


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a non-negative int, not {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, not {value}")
    return value


def _batch_metas(k: int, sim_id: object, time_step: object) -> Array:
    """put_batch()'s metas for k rows: a (k, 3) uint64 array whose columns 1
    and 2 hold each row's sim_id and time_step (one int for all, or k), and
    whose column 0 the call fills with sample ids."""
    np = _need_numpy()
    metas: Array = np.zeros((k, 3), dtype=np.uint64)
    for col, name, given in ((1, "sim_id", sim_id), (2, "time_step", time_step)):
        v = np.asarray(given)
        if v.dtype.kind not in "iu" or (v.size and int(v.min()) < 0):
            raise ValueError(f"put_batch: {name} must be non-negative ints")
        try:
            metas[:, col] = np.broadcast_to(v, (k,))
        except ValueError:
            raise ValueError(f"put_batch: {name} must be one int or {k} of them") from None
    return metas


def _rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a non-negative number, not {value!r}")
    v = float(value)
    if not v >= 0 or math.isinf(v):  # also catches NaN
        raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
    return v


def _need_numpy() -> Any:
    if _np is None:
        raise ImportError("this call needs numpy")
    return _np


def _frombuffer(obj: object, dtype: Any, count: int = -1) -> Array:
    """numpy.frombuffer(obj): the array keeps obj (a Sample or Slot) as its base.
    Type checkers cannot say "has the buffer protocol" before Python 3.12."""
    np = _need_numpy()
    a: Array = np.frombuffer(obj, dtype=dtype, count=count)
    return a


def _shape_tuple(shape: ShapeLike) -> tuple[int, ...] | None:
    if shape is None:
        return None
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(d) for d in shape)


def _misfit(nbytes: int, dtype: DTypeLike, shape: ShapeLike) -> str | None:
    """Why a payload of nbytes cannot be read as dtype and shape; None if it can."""
    if dtype is None and shape is None:
        return None
    np = _need_numpy()
    dt = np.dtype(dtype if dtype is not None else np.uint8)
    shape = _shape_tuple(shape)
    if nbytes % dt.itemsize == 0:
        if shape is None:
            return None
        count = nbytes // dt.itemsize
        known = 1
        for d in shape:
            known *= d if d != -1 else 1
        if (count % known == 0) if (known and shape.count(-1) == 1) else known == count:
            return None
    what = f"dtype {dt}" + ("" if shape is None else f" and shape {shape}")
    return f"a sample of {nbytes} bytes does not fit {what}"


def _deadline(timeout_ms: int) -> float:
    """When a read of timeout_ms that may start over must end (time.monotonic())."""
    return time.monotonic() + timeout_ms / 1000 if timeout_ms > 0 else 0.0


def _left(deadline: float, timeout_ms: int) -> int:
    """The timeout_ms left of a read begun with timeout_ms, ending at deadline."""
    if timeout_ms <= 0:
        return timeout_ms
    return max(0, math.ceil((deadline - time.monotonic()) * 1000)) or 0


def _fixed_size(dtype: DTypeLike, shape: ShapeLike, schema: Schema | None) -> int | None:
    """The one payload length that fits dtype and shape (or the schema), or None
    if more than one does (no shape, or a -1 in it)."""
    if schema is not None:
        return schema.size
    shp = _shape_tuple(shape)
    if shp is None or -1 in shp:
        return None
    np = _need_numpy()
    return int(np.dtype(dtype if dtype is not None else np.uint8).itemsize) * math.prod(shp)


def _row_bytes(out: Any) -> int:
    """Bytes of one row of `out`, a C-contiguous array (or 2-D memoryview) whose
    first dimension counts samples."""
    n = len(out)
    if n == 0:
        raise ValueError("the output array has no rows")
    return int(out.nbytes // n)


def _keep_if_misfit(csample: _cistern.Sample, lengths: Sequence[int], dtype: DTypeLike,
                    shape: ShapeLike, schema: Schema | None = None) -> None:
    """Hand the acquired csample back unread, and raise, if a payload does not fit
    (dtype and shape, or the schema's sample size)."""
    for n in lengths:
        if schema is not None:
            why = (None if n == schema.size else
                   f"a sample of {n} bytes where the schema's samples are {schema.size}")
        else:
            why = _misfit(n, dtype, shape)
        if why:
            csample.unacquire()
            raise ValueError(why + " (it stays in the segment)")


# ------------------------------------------------------------------ records

_R = TypeVar("_R", bound="_Record")
_T = TypeVar("_T")
_V = TypeVar("_V")
_F = TypeVar("_F", bound=Callable[..., Any])


def _explains_waits(read: _F) -> _F:
    """A Segment's read, whose TimeoutError says why it waited when the
    watermark held it back ("population 18, watermark 64"), and whose
    KeyboardInterrupt (Ctrl-C in a read that waits forever) carries the same
    note."""
    @functools.wraps(read)
    def explained(self: Segment, *args: Any, **kw: Any) -> Any:
        try:
            return read(self, *args, **kw)
        except (TimeoutError, KeyboardInterrupt) as e:
            raise self._waited(e) from None
    return cast(_F, explained)


class _Record(Mapping[str, Any]):
    """A read-only record that also reads as a mapping of its fields
    (rec["puts"] is rec.puts), for code written against the dicts it replaces."""

    __slots__ = ()

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _from(cls: type[_R], d: Mapping[str, Any]) -> _R:
        """The record of the extension's dict d: lists become tuples; keys this
        record does not know are left out (see tests/test_records.py)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in d.items() if k in cls._names()})


@dataclasses.dataclass(frozen=True, repr=True)
class Config(_Record):
    """A segment's parameters as created, defaults filled in, named as create()'s
    arguments (struct cistern_config)."""

    policy: str
    slots: int
    slot_size: int
    mode: int
    watermark: int
    pseudo_epochs: int
    sweep_size: int
    time_steps: int
    batch_size: int
    seed: int
    max_procs: int
    expected_producers: int
    flags: int
    lossy: bool
    single_producer: bool
    single_reader: bool
    dead_producer_done: bool
    reads_per_put: float
    rate_slack: float
    #: The schema's canonical text, or None for a segment without one (and in
    #: list_segments(), which does not read schemas: see Segment.schema).
    schema: str | None


@dataclasses.dataclass(frozen=True)
class Stats(_Record):
    """A segment's statistics (struct cistern_stats; docs/POLICIES.md says what
    each counts). seen_hist buckets the seen counts of samples that left the
    buffer: 0, 1, 2, 3, 4, 5-8, 9-16, >16."""

    population: int
    puts: int
    gets: int
    evictions: int
    evicted_unseen: int
    redeliveries: int
    reclaimed: int
    producer_waits: int
    producer_wait_ns: int
    reader_waits: int
    reader_wait_ns: int
    seen_hist: tuple[int, ...]
    unpaired: int
    procs_attached: int
    reception_closed: bool
    producers_expected: int
    producers_done: int
    producers_died: int
    #: The cold tier (create(cold_slots=...)), all 0 without one: its slots,
    #: the samples held there (part of population), its file's bytes, and
    #: the samples spilled to it, read back from it and evicted there.
    cold_slots: int = 0
    cold_population: int = 0
    cold_disk_bytes: int = 0
    cold_spilled: int = 0
    cold_reads: int = 0
    cold_evictions: int = 0


@dataclasses.dataclass(frozen=True)
class Occupancy(_Record):
    """Slots counted by class, in one pass over the slot words (a near-instant
    picture under load, not an atomic one) (struct cistern_occupancy).

    slots maps each name of SLOT_CLASSES to its count; held counts the samples
    held now and held_bytes their payload; held_seen_hist buckets their seen
    counts as Stats.seen_hist does."""

    slots: Mapping[str, int]
    pinned: int
    held: int
    held_bytes: int
    held_seen_hist: tuple[int, ...]

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> Occupancy:
        return cls(slots=dict(zip(SLOT_CLASSES, d["slots"])), pinned=d["pinned"],
                   held=d["held"], held_bytes=d["held_bytes"],
                   held_seen_hist=tuple(d["held_seen_hist"]))


@dataclasses.dataclass(frozen=True)
class ProcInfo(_Record):
    """One entry in use of a segment's attachment table (struct cistern_proc_info).

    alive is False for a process that died without detaching; waiting is 0, 1
    (waiting for data) or 2 (waiting for room); role has the bits
    producer (1) and reader (2)."""

    index: int
    pid: int
    uid: int
    role: int
    alive: bool
    waiting: int
    attached_ns: int
    puts: int
    gets: int
    comm: str

    @property
    def producer(self) -> bool:
        """Whether the process has put or reserved through this attachment."""
        return bool(self.role & _cistern.PROC_PRODUCER)

    @property
    def reader(self) -> bool:
        """Whether the process has read through this attachment."""
        return bool(self.role & _cistern.PROC_READER)


@dataclasses.dataclass(frozen=True)
class SegmentInfo(_Record):
    """One segment as list_segments() sees it (struct cistern_segment_info).

    status is 0 if its header checks, else a negative errno saying why not
    (problem gives it in words); config and population mean something only with
    status 0."""

    name: str
    status: int
    config: Config | None
    file_size: int
    created_ns: int
    uid: int
    mode: int
    population: int
    procs_live: int
    procs_dead: int
    closed: bool

    @property
    def problem(self) -> str | None:
        """Why the segment cannot be read (strerror(status)), or None."""
        return strerror(self.status) if self.status else None

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> SegmentInfo:
        cfg = d["config"]
        return cls(**{k: v for k, v in d.items() if k in cls._names() and k != "config"},
                   config=Config._from(cfg) if cfg is not None else None)


@dataclasses.dataclass(frozen=True)
class GcReport(_Record):
    """What gc() found and did for one segment (struct cistern_gc_report).

    removed is 0 if the segment was kept, else why it was removed (or would be,
    in a dry run): 1 every attachment is dead and one at least died without
    detaching, and it held no unread sample; 2 it never finished creation; 3 an
    unfinished restore; 4 stale with unread samples, dumped then removed; 5
    stale with unread samples, discarded. unread counts the samples readers
    would still get; kept is True for a stale segment kept for them."""

    dead_procs: int
    reservations: int
    redelivered: int
    pins: int
    live_procs: int
    removed: int
    unread: int
    dumped: int
    kept: bool


@dataclasses.dataclass(frozen=True)
class DumpInfo(_Record):
    """What a dump file holds (struct cistern_dump_info): the source segment's
    name, config and statistics when the dump started, and its samples."""

    name: str
    config: Config
    stats: Stats
    samples: int
    payload_bytes: int
    skipped: int
    next_id: int
    created_ns: int
    dumped_ns: int
    file_size: int
    format_version: int
    closed: bool

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> DumpInfo:
        rest = {k: v for k, v in d.items()
                if k in cls._names() and k not in ("config", "stats")}
        return cls(config=Config._from(d["config"]), stats=Stats._from(d["stats"]), **rest)


@dataclasses.dataclass(frozen=True)
class Inspection(_Record):
    """Everything inspect() reads of a segment, through a read-only mapping."""

    name: str
    config: Config
    stats: Stats
    occupancy: Occupancy
    procs: tuple[ProcInfo, ...]


# ------------------------------------------------------------------ schemas

@dataclasses.dataclass(frozen=True)
class Field(_Record):
    """One field of a schema (struct cistern_field): its name, the name of its
    dtype (one of DTYPES, as cistern_dtype_name() gives it), its shape (() for a
    scalar), and where it lies in a sample: offset and size in bytes, and
    itemsize, the bytes of one element."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    size: int
    itemsize: int


@dataclasses.dataclass(frozen=True)
class Schema(Mapping[str, Field]):
    """What every sample of a segment holds: named fields, each a dtype and a
    shape (docs/SCHEMA.md). It reads as a mapping of field names to Fields, in
    order; text is its canonical text form and size the bytes of one sample.

    Fields lie in a sample as the members of a C struct do: in order, each at
    an offset that is a multiple of its item size, the sample padded at the end
    to a multiple of the largest. numpy's structured dtype with align=True has
    the same layout, and `dtype` is that dtype: a record array of it is a run of
    samples as they are in the segment.
    """

    text: str
    size: int
    fields: tuple[Field, ...]

    @classmethod
    def parse(cls, spec: SchemaLike) -> Schema:
        """The Schema of `spec`: its text form
        ("obs:float32[84,84];action:int64[]"), a dict {name: (dtype, shape)} (or
        {name: dtype} for a scalar), a list of (name, dtype) or (name, dtype,
        shape), a numpy structured dtype, or a Schema (cistern_schema_parse()).
        dtypes are given by name (DTYPES) or as numpy takes them. ValueError,
        naming the field, if one is wrong."""
        if isinstance(spec, Schema):
            return spec
        return cls._from(_cistern.schema_parse(_schema_text(spec)))

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> Schema:
        return cls(text=d["text"], size=d["size"],
                   fields=tuple(Field._from(f) for f in d["fields"]))

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (f.name for f in self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __str__(self) -> str:
        return self.text

    @property
    def names(self) -> tuple[str, ...]:
        """The field names, in order."""
        return tuple(f.name for f in self.fields)

    @functools.cached_property
    def dtype(self) -> Any:
        """The numpy structured dtype of one sample: the fields at their offsets,
        itemsize the sample size (what numpy.dtype(..., align=True) gives)."""
        np = _need_numpy()
        return np.dtype({"names": list(self.names),
                         "formats": [(f.dtype, f.shape) if f.shape else f.dtype
                                     for f in self.fields],
                         "offsets": [f.offset for f in self.fields],
                         "itemsize": self.size})

    @functools.cached_property
    def _gaps(self) -> tuple[tuple[int, int], ...]:
        """The padding of a sample, (start, end) byte ranges no field covers."""
        gaps, end = [], 0
        for f in self.fields:
            if f.offset > end:
                gaps.append((end, f.offset))
            end = f.offset + f.size
        if self.size > end:
            gaps.append((end, self.size))
        return tuple(gaps)

    def _views(self, buf: Any, n: int | None = None) -> Fields:
        """Zero-copy views of the sample in buf (n None), or of its n samples
        along a first axis, by field name."""
        np = _need_numpy()
        rec = np.frombuffer(buf, dtype=self.dtype, count=1 if n is None else n)
        if n is None:
            return {f.name: rec[f.name].reshape(f.shape) for f in self.fields}
        return {f.name: rec[f.name] for f in self.fields}

    def _values(self, data: Any, rows: int | None = None) -> Fields:
        """The fields of one sample (rows None) or of `rows` samples along a first
        axis, from a dict or a numpy structured record or array, each checked
        against this schema and converted to its dtype. ValueError naming the
        field if one is missing, extra, of another dtype or shape, or out of
        range."""
        given = _structured_fields(data)
        if given is None:
            if not isinstance(data, Mapping):
                raise ValueError("a sample of a segment with a schema is a dict of its fields "
                                 f"({', '.join(self.names)}) or a numpy structured array")
            given = data
        for k in given:
            if k not in self:
                raise ValueError(f"field {k!r} is not in the schema ({self.text})")
        for f in self.fields:
            if f.name not in given:
                raise ValueError(f"field {f.name!r} is missing (the schema is {self.text})")
        lead = () if rows is None else (rows,)
        return {f.name: _field_value(f, given[f.name], lead) for f in self.fields}

    def _rows(self, data: Any) -> int:
        """How many samples a batch of fields (a dict or a structured array) holds."""
        np = _need_numpy()
        given = _structured_fields(data)
        if given is None:
            if not isinstance(data, Mapping) or not data:
                raise ValueError("put_batch: a batch of a segment with a schema is a dict of "
                                 "its fields, each with the samples along a first axis, or a "
                                 "numpy structured array")
            given = data
        first = self.names[0]
        v = given[first] if first in given else next(iter(given.values()))
        shape = np.shape(v)
        if not shape:
            raise ValueError(f"put_batch: field {first!r} has no first axis of samples")
        return int(shape[0])


def _schema_text(spec: SchemaLike) -> str:
    """The text form of a schema given in any of the forms Schema.parse() takes."""
    if isinstance(spec, str):
        return spec
    items: list[tuple[Any, Any, Any]] = []
    if _np is not None and isinstance(spec, _np.dtype):
        if spec.names is None:
            raise ValueError(f"schema: the numpy dtype {spec} has no named fields")
        fields = spec.fields
        assert fields is not None
        items = [(n, fields[n][0], ()) for n in spec.names]
    elif isinstance(spec, Mapping):
        for name, v in spec.items():
            if isinstance(v, tuple) and len(v) == 2:
                items.append((name, v[0], v[1]))
            else:
                items.append((name, v, ()))
    elif isinstance(spec, Sequence):
        for item in spec:
            if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                raise ValueError(f"schema: {item!r} is not (name, dtype) or (name, dtype, shape)")
            items.append((item[0], item[1], item[2] if len(item) == 3 else ()))
    else:
        raise ValueError(f"schema: {spec!r} is not a text, a dict, a list or a numpy dtype")
    return ";".join(_field_text(*item) for item in items)


def _field_text(name: Any, dtype: Any, shape: Any) -> str:
    """One field in the text form: name:dtype[shape]."""
    if not isinstance(name, str):
        raise ValueError(f"schema: a field name is a str, not {name!r}")
    if shape is None:
        dims: tuple[Any, ...] = ()
    elif isinstance(shape, int):
        dims = (shape,)
    else:
        dims = tuple(shape)
    if isinstance(dtype, str) and dtype in DTYPES:
        dname = dtype
    else:
        np = _need_numpy()
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"schema: field {name!r}: {dtype!r} is not a dtype") from None
        if dt.subdtype is not None:
            dt, sub = dt.subdtype
            dims = tuple(sub) + dims
        dname = dt.name
        if dname not in DTYPES or dt.byteorder == ">" or dt.names is not None:
            raise ValueError(f"schema: field {name!r}: dtype {dt} is not one of "
                             f"{', '.join(DTYPES)} (in the host's byte order)")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) and not hasattr(d, "__index__"):
            raise ValueError(f"schema: field {name!r}: shape {shape!r} is not whole numbers")
    return f"{name}:{dname}[{','.join(str(int(d)) for d in dims)}]"


def _structured_fields(data: Any) -> Mapping[str, Any] | None:
    """The fields of a numpy structured record or array by name, or None if data
    is not one."""
    if _np is None:
        return None
    if isinstance(data, _np.void) or (isinstance(data, _np.ndarray)
                                      and data.dtype.names is not None):
        a = _np.asarray(data)
        if a.dtype.names is None:
            return None
        return {n: a[n] for n in a.dtype.names}
    return None


def _schema_fields(sch: Schema | None, data: Any) -> Any:
    """What a put into a segment of schema `sch` takes as fields: a dict or a
    structured record as it is; a numpy array or scalar of any dtype but uint8
    (raw bytes) as the value of the schema's only field, checked as a field is,
    since its bytes read as that field would be another value. None for raw
    bytes (bytes, a uint8 array, any other buffer), which are checked for size
    only. ValueError for a typed array where the schema has several fields."""
    if sch is None:
        return None
    if isinstance(data, Mapping) or _structured_fields(data) is not None:
        return data
    if (_np is not None and isinstance(data, (_np.ndarray, _np.generic))
            and data.dtype != _np.uint8):
        if len(sch.fields) == 1:
            return {sch.names[0]: _np.asarray(data)}
        raise ValueError(f"a {data.dtype} array is not a sample of the schema ({sch.text}): "
                         "put a dict of its fields, a numpy structured record, or the "
                         "sample's raw bytes (bytes or a uint8 array)")
    return None


def _convert(v: Any, want: Any, what: str, where: str | None = None) -> Array:
    """v (a number, a list, a numpy scalar or array) as an array of dtype `want`,
    by the conversion rule of docs/SCHEMA.md: a bool dtype takes bools only; an
    integer dtype takes whole numbers in its range (3 and 3.0 fit an int64; 0.5
    does not, nor 300 a uint8); a float dtype takes any number, rounded to its
    precision (0.1 becomes float32's nearest), but not a finite one beyond its
    range (1e39 into float32), while NaN and the infinities pass. ValueError
    naming `what` (and saying `where` wants the dtype) otherwise; v itself is
    never changed."""
    np = _need_numpy()
    try:
        a = np.asarray(v)
    except (ValueError, TypeError):
        raise ValueError(f"{what}: not an array of numbers") from None
    if a.dtype == want:
        return cast("Array", a)
    kind = a.dtype.kind
    if kind not in ({"b": "b"}.get(want.kind, "buif")):
        raise ValueError(f"{what}: {a.dtype} values, where {want} is wanted"
                         if where is None else f"{what}: {a.dtype} values, where {where}")
    with np.errstate(all="ignore"):
        if want.kind in "iu" and a.size:
            if kind == "f" and not bool(np.all(np.isfinite(a) & (np.trunc(a) == a))):
                raise ValueError(f"{what}: a value that is not a whole number, for {want}")
            info = np.iinfo(want)
            lo, hi = a.min(), a.max()
            lo, hi = (float(lo), float(hi)) if kind == "f" else (int(lo), int(hi))
            if lo < info.min or hi > info.max:
                raise ValueError(f"{what}: a value out of range for {want}")
        conv = a.astype(want)
        if want.kind == "f" and not np.array_equal(np.isfinite(conv), np.isfinite(a)):
            raise ValueError(f"{what}: a value out of range for {want}")
    return cast("Array", conv)


def _field_value(f: Field, v: Any, lead: tuple[int, ...]) -> Array:
    """v as an array of field f's dtype and of shape lead + f.shape. A numpy array
    must have the field's dtype; other values (numbers, lists, numpy scalars)
    are converted by _convert()'s rule."""
    np = _need_numpy()
    want = np.dtype(f.dtype)
    shape = lead + f.shape
    if isinstance(v, np.ndarray):
        if v.dtype != want:
            raise ValueError(f"field {f.name!r}: dtype {v.dtype}, where the schema has {f.dtype}")
        a = v
    else:
        a = _convert(v, want, f"field {f.name!r}", f"the schema has {f.dtype}")
    if a.shape != shape:
        raise ValueError(f"field {f.name!r}: shape {a.shape}, where the schema has {shape}")
    return cast("Array", a)


# ------------------------------------------------------------ module calls

_ARG_OF = {"slot_count": "slots", "nb_time_steps": "time_steps", "CISTERN_LOSSY": "lossy",
           "CISTERN_SINGLE_PRODUCER": "single_producer",
           "CISTERN_SINGLE_READER": "single_reader",
           "CISTERN_DEAD_PRODUCER_DONE": "dead_producer_done"}
_CONFIG_WORDS = re.compile(r"\b(" + "|".join(_ARG_OF) + r")\b")


def _in_our_words(message: str) -> str:
    """The library names struct cistern_config's fields; say create()'s arguments
    (but not in a quoted word: a schema's field names are the user's own)."""
    parts = message.split("'")
    return "'".join(_CONFIG_WORDS.sub(lambda m: _ARG_OF[m.group(0)], p) if i % 2 == 0 else p
                    for i, p in enumerate(parts))


def _slot_count(slots: int | None) -> int:
    """create()'s slots as the library's slot_count: None is the library's
    default (0 there); 0 itself is refused, not taken silently as the default."""
    if slots is None:
        return 0
    if _count("slots", slots) == 0:
        raise ValueError(f"slots must be at least 1, not 0 (leave it out for the default, "
                         f"{_cistern.DEFAULT_SLOT_COUNT})")
    return slots


def _config_args(policy: str | int, slots: int | None, slot_size: int, watermark: int,
                 pseudo_epochs: int, sweep_size: int, time_steps: int, batch_size: int,
                 seed: int, mode: int, max_procs: int, expected_producers: int, lossy: bool,
                 single_producer: bool, single_reader: bool, reads_per_put: float,
                 rate_slack: float, schema: SchemaLike | None,
                 dead_producer_done: bool = False, cold_slots: int = 0,
                 cold_dir: str | None = None) -> dict[str, Any]:
    """create()'s arguments, checked, as the extension's keywords."""
    kw: dict[str, Any] = dict(
        policy=policy_number(policy),
        slot_size=_count("slot_size", slot_size),
        slot_count=_slot_count(slots),
        mode=_count("mode", mode),
        watermark=_count("watermark", watermark),
        pseudo_epochs=_count("pseudo_epochs", pseudo_epochs),
        sweep_size=_count("sweep_size", sweep_size),
        nb_time_steps=_count("time_steps", time_steps),
        batch_size=_count("batch_size", batch_size),
        seed=_count("seed", seed),
        max_procs=_count("max_procs", max_procs),
        expected_producers=_count("expected_producers", expected_producers),
        flags=(_cistern.LOSSY if lossy else 0)
        | (_cistern.SINGLE_PRODUCER if single_producer else 0)
        | (_cistern.SINGLE_READER if single_reader else 0)
        | (_cistern.DEAD_PRODUCER_DONE if dead_producer_done else 0),
        reads_per_put=_rate("reads_per_put", reads_per_put),
        rate_slack=_rate("rate_slack", rate_slack),
        schema=None if schema is None else _schema_text(schema),
        cold_slots=_count("cold_slots", cold_slots),
        cold_dir=None if cold_dir is None else os.fspath(cold_dir),
    )
    if mode > 0o7777:
        raise ValueError(f"mode {mode:#o} is not a set of permission bits")
    return kw


def create(name: str, policy: str | int = "fifo", slots: int | None = None, slot_size: int = 0,
           watermark: int = 0, pseudo_epochs: int = 0, sweep_size: int = 0,
           time_steps: int = 0, batch_size: int = 0, seed: int = 0, mode: int = 0o600,
           max_procs: int = 0, expected_producers: int = 0, lossy: bool = False,
           single_producer: bool = False, single_reader: bool = False,
           reads_per_put: float = 0.0, rate_slack: float = 0.0,
           schema: SchemaLike | None = None,
           dead_producer_done: bool = False, cold_slots: int = 0,
           cold_dir: str | None = None) -> Segment:
    """Create segment `name` and attach to it.

    policy: "fifo", "firo", "reservoir", "fifo-evict-reservoir",
    "sim-paired-reservoir", "batch-reservoir" (underscores and the CamelCase
    names of POLICIES.md work too), or its number. slots: the capacity in
    samples (None: 1024, DEFAULT_SLOT_COUNT; 0 raises ValueError); slot_size:
    the largest payload in bytes (0: the schema's sample size with a schema,
    else 4096, DEFAULT_SLOT_SIZE).
    watermark, pseudo_epochs, sweep_size, time_steps (nb_time_steps), batch_size,
    seed (0 = from the clock), mode (permission bits), max_procs,
    expected_producers (reception closes after that many producer_done()), lossy
    (FIFOEvictReservoir), single_producer (FIFO) and single_reader (FIFO and the
    reservoirs, not FIRO): one holder of the role at a time, others get
    OSError(EBUSY); a segment without them is as fast while it has one
    producer (FIFO) and one reader (FIFO and the reservoirs).

    expected_producers: a producer that dies before producer_done() is
    counted (stats().producers_died) and waited for: one started in its
    place that calls producer_done() fills the count. With
    dead_producer_done=True it counts as done instead, so readers (and the
    iterators, and cistern.torch's dataset) reach end of data without it.

    reads_per_put and rate_slack (the reservoir kinds): the rate limiter,
    reads per put after the watermark's fill (0 = off; else at least 1, but
    for a lossy fifo-evict-reservoir, whose puts need no read) and the drift it
    allows, in reads (0 = automatic: every read, a batch of n included,
    starts once the reads before it are paid for; a slack set by hand is
    kept, and a batch it could never admit raises ValueError at once).

    schema: what every sample holds (see Schema.parse() for the forms it takes),
    for example {"obs": ("float32", (84, 84)), "action": ("int64", ())}. Its
    puts are then checked against it, and get(), get_batch() and acquire()
    give dicts of numpy arrays; slot_size 0 means the schema's sample size.

    cold_slots and cold_dir (reservoir and batch-reservoir): a cold tier of
    cold_slots more slots in the file cold_dir/cistern.NAME.cold, on a local
    disk that takes direct I/O; the population is slots plus cold_slots.
    Puts move samples to disk when memory is full, reads draw over both
    (docs/protocol/tiers.md). A disk too small raises OSError(ENOSPC).

    Raises FileExistsError if the name is taken, ValueError for bad parameters
    (config_problem() says the same without creating anything),
    OSError(ENOTSUP) for a policy this build lacks.
    """
    if not isinstance(name, str):
        raise ValueError("segment name must be a str")
    kw = _config_args(policy, slots, slot_size, watermark, pseudo_epochs, sweep_size,
                      time_steps, batch_size, seed, mode, max_procs, expected_producers,
                      lossy, single_producer, single_reader, reads_per_put, rate_slack, schema,
                      dead_producer_done, cold_slots, cold_dir)
    try:
        handle = _cistern.create(name, **kw)
    except ValueError as e:
        raise ValueError(_in_our_words(str(e))) from None
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        if cold_slots:
            raise OSError(errno.ENOSPC, f"the disk of cold_dir {cold_dir} cannot hold "
                          f"{cold_slots} cold slots; nothing was created", name) from None
        problem = shm_room_problem(kw["slot_count"], kw["slot_size"] or 1)
        raise OSError(errno.ENOSPC, problem or str(e.strerror), name) from None
    return Segment(handle, name)


def segment_bytes(slots: int, slot_size: int, max_procs: int = 64) -> int:
    """About how many bytes of shared memory a segment of `slots` slots of
    `slot_size` bytes takes: its slots rounded up to 64 bytes, 64 bytes of
    metadata each, a header and an attachment table of a few KiB."""
    payload = -(-slot_size // 64) * 64
    total = 64 * 1024 + max_procs * 256 + slots * (payload + 64)
    return -(-total // 4096) * 4096


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{int(n)} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def shm_room_problem(slots: int, slot_size: int, path: str = "/dev/shm") -> str | None:
    """Why a segment of `slots` slots of `slot_size` bytes cannot fit in what
    `path` (the shared-memory file system) has left, naming the size needed,
    the space left and Docker's --shm-size; None when it fits (or when path
    cannot be looked at). create() refuses such a segment (ENOSPC) with
    this sentence, before anything could fault for want of memory."""
    need = segment_bytes(slots, slot_size)
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    if need <= free:
        return None
    return (f"the segment needs {_human(need)} of shared memory ({slots} slots of "
            f"{_human(slot_size)}) but {path} has {_human(free)} left of {_human(total)}: "
            f"ask for fewer or smaller slots, or give the container more shared memory "
            f"(docker run --shm-size=1g, say)")


def config_problem(policy: str | int = "fifo", slots: int | None = None, slot_size: int = 0,
                   watermark: int = 0, pseudo_epochs: int = 0, sweep_size: int = 0,
                   time_steps: int = 0, batch_size: int = 0, seed: int = 0, mode: int = 0o600,
                   max_procs: int = 0, expected_producers: int = 0, lossy: bool = False,
                   single_producer: bool = False, single_reader: bool = False,
                   reads_per_put: float = 0.0, rate_slack: float = 0.0,
                   schema: SchemaLike | None = None,
                   dead_producer_done: bool = False, cold_slots: int = 0,
                   cold_dir: str | None = None) -> str | None:
    """Why create() would refuse these parameters, in a sentence naming the
    argument that is wrong, or None if it would take them
    (cistern_config_problem()). Creates nothing; the name is not judged (see
    name_valid()). Arguments that are not even of the right kind raise
    ValueError, as with create()."""
    kw = _config_args(policy, slots, slot_size, watermark, pseudo_epochs, sweep_size,
                      time_steps, batch_size, seed, mode, max_procs, expected_producers,
                      lossy, single_producer, single_reader, reads_per_put, rate_slack, schema,
                      dead_producer_done, cold_slots, cold_dir)
    why = _cistern.config_problem(**kw)
    return _in_our_words(why) if why is not None else None


def _check_name_type(name: object) -> str:
    if not isinstance(name, str):
        raise ValueError("segment name must be a str")
    return name


def attach(name: str, any_owner: bool = False, populate: bool = False,
           producer: bool = False) -> Segment:
    """Attach to the existing segment `name` (FileNotFoundError if there is none).
    Recovers what dead processes left behind.

    A segment owned by another user than this process's (effective) user or root
    is refused with PermissionError: anyone may create a segment's name first, to
    collect what is put into it. any_owner=True allows it, to share a segment
    between users on purpose.

    populate=True maps every page of the segment now (CISTERN_ATTACH_POPULATE):
    attaching takes longer, and the first pass over the slots pays no page fault
    per 4 KiB. For a long-running process that goes through the whole segment.

    producer=True attaches as one of the segment's expected producers
    (CISTERN_ATTACH_PRODUCER): the process counts as a producer from now on,
    not from its first put, so that dying before its first put is dying
    before producer_done() like any other death (dead_producer_done).
    """
    return Segment(_cistern.attach(_check_name_type(name), any_owner=bool(any_owner),
                                   populate=bool(populate), producer=bool(producer)), name)


def open_readonly(name: str) -> Segment:
    """Open segment `name` for watching only (cistern_open_readonly()): a
    Segment that takes no attachment entry and cannot disturb anyone. It maps
    the segment read-only, unless someone else could shrink it (another
    user's, or one others may write): then it reads it into memory of its own
    at each call, which raises OSError(EPROTO) if the segment was found
    shrunk, instead of dying by SIGBUS. config(), stats(), occupancy() and
    procs() work; calls that move samples raise OSError(EBADF)."""
    return Segment(_cistern.open_readonly(_check_name_type(name)), name)


def unlink(name: str, missing_ok: bool = False) -> None:
    """Remove a segment's name (cistern_unlink()); attached processes keep
    working. FileNotFoundError if there is none, unless missing_ok."""
    try:
        _cistern.unlink(name)
    except FileNotFoundError:
        if not missing_ok:
            raise


def remove(name: str, force: bool = False, any_owner: bool = False) -> None:
    """Remove a segment's name as `cistern rm` does (cistern_remove()): refused
    with OSError(EBUSY) while live processes are attached, unless force=True,
    which also removes damaged or foreign objects named cistern.NAME. A segment
    owned by another user than ours or root is refused with PermissionError
    unless any_owner=True."""
    _cistern.remove(_check_name_type(name), force=bool(force), any_owner=bool(any_owner))


def list_segments() -> list[SegmentInfo]:
    """Every cistern segment on the machine, sorted by name, read without
    disturbing any (cistern_list(); `cistern ls`)."""
    return [SegmentInfo._from(d) for d in _cistern.list_segments()]


def inspect(name: str) -> Inspection:
    """Read segment `name`'s config, statistics, occupancy and attached
    processes through a read-only mapping that disturbs nobody (`cistern
    inspect`)."""
    with open_readonly(name) as seg:
        return Inspection(name=name, config=seg.config(), stats=seg.stats(),
                          occupancy=seg.occupancy(), procs=tuple(seg.procs()))


def gc(name: str, dry_run: bool = False, any_owner: bool = False,
       dump_to: PathLike | None = None, discard: bool = False) -> GcReport:
    """Collect segment `name`'s garbage (cistern_gc_dump_to(); `cistern gc NAME`):
    reclaim what its dead processes left (reservations, samples they held,
    pins), and remove it if every process attached to it died. A stale segment
    that still holds unread samples is kept (report.kept, report.unread), unless
    dump_to names a directory (it is dumped to DIR/NAME.dump, then removed) or
    discard=True (removed with its samples). dry_run says what would be done
    and does nothing. A segment owned by another user than ours or root is
    refused with PermissionError unless any_owner=True."""
    return GcReport._from(_cistern.gc(_check_name_type(name), dry_run=bool(dry_run),
                                      any_owner=bool(any_owner),
                                      dump_to=None if dump_to is None else _path(dump_to),
                                      discard=bool(discard)))


def _path(path: PathLike) -> str:
    return os.fspath(path)


def dump(name: str, path: PathLike, progress: Progress | None = None) -> DumpInfo:
    """Write a snapshot of segment `name` (config, statistics and every held
    sample) to the file `path`, replaced atomically, without disturbing the
    segment (cistern_dump(); `cistern dump`). progress(done, total), if given,
    is called now and then with slots scanned; an exception it raises is
    printed as unraisable and the dump goes on. Returns what was written."""
    return DumpInfo._from(_cistern.dump(_check_name_type(name), _path(path), progress))


def restore(path: PathLike, name: str | None = None,
            progress: Progress | None = None) -> DumpInfo:
    """Restore the dump at `path` as segment `name` (None: the name stored in
    the dump), which must not exist (cistern_restore(); `cistern restore`).
    The whole file is checked first: a damaged dump raises OSError(EBADMSG) and
    creates nothing. progress(done, total) gets bytes read. Returns what the
    dump holds."""
    return DumpInfo._from(_cistern.restore(_path(path), name, progress))


def verify_dump(path: PathLike) -> DumpInfo:
    """Check the dump at `path` whole, as restore() would, without restoring it
    (cistern_dump_verify(); `cistern restore --check`). Returns what it holds;
    raises OSError(EBADMSG) for a damaged dump."""
    return DumpInfo._from(_cistern.dump_verify(_path(path)))


# ------------------------------------------------------------------ samples

class Sample(Generic[_V]):
    """An acquired sample (Segment.acquire()).

    As a context manager its value is `array`: a read-only numpy view of the
    payload in the shared segment (no copy), valid until release(), which the
    with-block does on exit; for a segment with a schema (acquired without a
    dtype or shape) it is `fields` instead, a dict of such views, one per field.
    After release, `array`, `fields`, `view`, `tobytes()` and `copy()` raise
    ValueError. A numpy array taken before the release stays
    memory-safe (the mapping lives as long as any view of it) but its contents are
    undefined from then on: the slot may already hold another sample. Copy what
    must outlive the block (`copy()` or `array.copy()`).

    While the sample is held, under FIFO and FIRO it belongs to this reader; under
    the reservoirs it is pinned (not evicted). If the Sample and every view of it
    are dropped without release(), the sample is released when collected.
    """

    __slots__ = ("_s", "_dtype", "_shape", "_schema", "_array", "_fields", "_view",
                 "__weakref__")

    def __init__(self, csample: _cistern.Sample, dtype: DTypeLike = None,
                 shape: ShapeLike = None, schema: Schema | None = None) -> None:
        self._s = csample
        self._dtype = dtype
        self._shape = _shape_tuple(shape)
        self._schema = schema
        self._array: Array | None = None
        self._fields: Fields | None = None
        self._view: memoryview | None = None

    @property
    def meta(self) -> Meta:
        """Meta(sample_id, sim_id, time_step)."""
        m = self._s.meta
        assert isinstance(m, tuple)
        return Meta(*m)

    @property
    def held(self) -> bool:
        """Whether the sample is still acquired (not yet released or handed back)."""
        return self._s.held

    def __len__(self) -> int:
        return len(self._s)

    def _check(self) -> None:
        if not self._s.held:
            raise ValueError("sample already released")

    @property
    def view(self) -> memoryview:
        """A read-only memoryview of the payload; released (raises on use) on release()."""
        self._check()
        if self._view is None:
            self._view = memoryview(self._s)  # type: ignore[arg-type]
        return self._view

    @property
    def array(self) -> Array:
        """The payload as a read-only numpy view with the dtype and shape asked for."""
        self._check()
        if self._array is None:
            np = _need_numpy()
            dtype = np.dtype(self._dtype if self._dtype is not None else np.uint8)
            a = _frombuffer(self._s, dtype)  # base is the Sample: keeps the mapping
            if self._shape is not None:
                a = a.reshape(self._shape)
            self._array = a
        return self._array

    @property
    def fields(self) -> Fields:
        """The payload as read-only, zero-copy numpy views, one per field of the
        segment's schema (ValueError if it has none)."""
        self._check()
        if self._schema is None:
            raise ValueError("this sample was not read by a schema (the segment has none, "
                             "or a dtype or shape was given)")
        if self._fields is None:
            self._fields = self._schema._views(self._s)  # based on the Sample: keeps the mapping
        return self._fields

    def tobytes(self) -> bytes:
        """A copy of the payload as bytes."""
        self._check()
        return bytes(self.view)

    def copy(self) -> Array:
        """A private, writable numpy copy of the payload."""
        return self.array.copy()

    def release(self) -> None:
        """Hand the sample back (idempotent)."""
        self._drop_views()
        self._s.release()

    def unacquire(self) -> None:
        """Hand the sample back unread, as if it had not been acquired: FIFO hands
        it out again first, FIRO and the reservoirs take back the read. Raises
        ValueError if it was released already."""
        self._drop_views()
        self._s.unacquire()

    def _drop_views(self) -> None:
        self._array = None
        self._fields = None
        if self._view is not None:
            try:
                self._view.release()
            except BufferError:  # the user exported it further; the mapping stays valid
                pass
            self._view = None

    def __enter__(self) -> _V:
        return cast(_V, self.fields if self._schema is not None else self.array)

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self._s.held else "released"
        return f"<cistern.Sample {self.meta} {len(self)} bytes {state}>"


class Group(Generic[_V]):
    """An acquired pair (Segment.acquire_pair()), batch (Segment.acquire_batch())
    or run of samples (Segment.acquire_many()).

    As a context manager its value is `arrays`: a tuple of read-only, zero-copy
    numpy views, one per member (for a pair: (x_t, x_t+1)); for a segment with a
    schema (acquired without a dtype or shape) it is `fields`, a tuple of dicts
    of such views, one dict per member. All members are pinned
    together until release(), which the with-block does on exit; the same rules as
    for Sample apply after release (accessors raise, old views are undefined but
    safe).
    """

    __slots__ = ("_g", "_dtype", "_shape", "_schema", "_arrays", "_fields", "__weakref__")

    def __init__(self, cgroup: _cistern.Sample, dtype: DTypeLike = None,
                 shape: ShapeLike = None, schema: Schema | None = None) -> None:
        self._g = cgroup
        self._dtype = dtype
        self._shape = _shape_tuple(shape)
        self._schema = schema
        self._arrays: tuple[Array, ...] | None = None
        self._fields: tuple[Fields, ...] | None = None

    @property
    def metas(self) -> list[Meta]:
        """[Meta(sample_id, sim_id, time_step), ...], one per member."""
        ms = self._g.meta
        assert isinstance(ms, list)
        return [Meta(*m) for m in ms]

    @property
    def held(self) -> bool:
        """Whether the members are still acquired (not yet released or handed back)."""
        return self._g.held

    def __len__(self) -> int:
        return len(self._g)

    @property
    def arrays(self) -> tuple[Array, ...]:
        """One read-only, zero-copy numpy view per member, with the dtype and
        shape asked for."""
        if not self._g.held:
            raise ValueError("sample already released")
        if self._arrays is None:
            np = _need_numpy()
            dtype = np.dtype(self._dtype if self._dtype is not None else np.uint8)
            out = []
            for i in range(len(self._g)):
                a = _frombuffer(self._g.member(i), dtype)
                out.append(a.reshape(self._shape) if self._shape is not None else a)
            self._arrays = tuple(out)
        return self._arrays

    @property
    def fields(self) -> tuple[Fields, ...]:
        """One dict of read-only, zero-copy numpy views per member, by field of the
        segment's schema (ValueError if it has none)."""
        if not self._g.held:
            raise ValueError("sample already released")
        if self._schema is None:
            raise ValueError("these samples were not read by a schema (the segment has none, "
                             "or a dtype or shape was given)")
        if self._fields is None:
            sch = self._schema
            self._fields = tuple(sch._views(self._g.member(i)) for i in range(len(self._g)))
        return self._fields

    def stack(self) -> Array:
        """The members copied into one new array of shape (len, *shape)."""
        a: Array = _need_numpy().stack(self.arrays)
        return a

    def stack_fields(self) -> Fields:
        """The members' fields copied into one new array per field, the members
        along a first axis."""
        np = _need_numpy()
        members = self.fields
        assert self._schema is not None
        return {name: np.stack([m[name] for m in members]) for name in self._schema.names}

    def copy_into(self, out: Any, metas: Any = None) -> int:
        """Copy every member into `out`, an array whose first dimension has room
        for them all (member i goes to out[i]), in one C call; `metas`, a (len, 3)
        uint64 array, receives their (sample_id, sim_id, time_step). Every member
        must be exactly out[0].nbytes long, else ValueError with nothing copied
        (the group stays held). Returns the number of members copied."""
        if len(out) < len(self._g):
            raise ValueError(f"copy_into: out has room for {len(out)} members, "
                             f"not {len(self._g)}")
        return self._g.copy_into(out, _row_bytes(out), metas)

    def release(self) -> None:
        """Hand every member back (idempotent)."""
        self._arrays = None
        self._fields = None
        self._g.release()

    def unacquire(self) -> None:
        """Hand every member back unread, as if the group had not been acquired.
        Raises ValueError if it was released already."""
        self._arrays = None
        self._fields = None
        self._g.unacquire()

    def __enter__(self) -> _V:
        return cast(_V, self.fields if self._schema is not None else self.arrays)

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self._g.held else "released"
        return f"<cistern.Group {self._g.kind} of {len(self)} {state}>"


class Reservation:
    """A slot reserved for writing in place (Segment.reserve()): the zero-copy put.

        with seg.reserve("float32", (32, 32), sim_id=3, time_step=t) as out:
            out[...] = field          # written straight into the shared segment
        sid = seg.last_meta.sample_id

    As a context manager its value is `array`, a writable numpy view of the
    slot with the dtype and shape asked for. Leaving the block normally commits
    the sample (its payload is the array's bytes); leaving it by an exception
    aborts it (the sample never existed) and lets the exception go on. Without
    the with-block, write through `array` or `view` and call commit() or
    abort(); a Reservation dropped while open is aborted.

    Readers see nothing of the slot before the commit. Once the reservation has
    ended, `array` is made read-only and new views are refused; a view taken
    before stays memory-safe, but writing through it would change a published
    sample (or a slot another producer has taken), so keep none past the block.
    """

    __slots__ = {"_seg": "", "_slot": "", "_dtype": "", "_shape": "", "_nbytes": "",
                 "_array": "", "_view": "", "__weakref__": "",
                 "sim_id": "The sim_id the sample gets at commit (may be changed before).",
                 "time_step": "The time_step the sample gets at commit (may be changed before).",
                 "sample_id": "The sample id, once committed; None before."}

    def __init__(self, seg: Segment, cslot: _cistern.Slot, dtype: DTypeLike,
                 shape: tuple[int, ...] | None, nbytes: int, sim_id: int,
                 time_step: int) -> None:
        self._seg = seg
        self._slot = cslot
        self._dtype = dtype
        self._shape = shape
        self._nbytes = nbytes
        self._array: Array | None = None
        self._view: memoryview | None = None
        self.sim_id = sim_id
        self.time_step = time_step
        self.sample_id: int | None = None

    @property
    def live(self) -> bool:
        """Whether the slot is still reserved (not yet committed or aborted)."""
        return self._slot.live

    @property
    def capacity(self) -> int:
        """Bytes the slot can hold: the segment's slot_size."""
        return self._slot.capacity

    @property
    def nbytes(self) -> int:
        """Bytes that commit() publishes by default: those of `array`."""
        return self._nbytes

    def _check(self) -> None:
        if not self._slot.live:
            raise ValueError("reservation already committed or aborted")

    @property
    def array(self) -> Array:
        """A writable numpy view of the slot with the dtype and shape asked for
        (dtype None: bytes, as uint8; shape None: as many items as fit)."""
        self._check()
        if self._array is None:
            np = _need_numpy()
            dtype = np.dtype(self._dtype if self._dtype is not None else np.uint8)
            a = _frombuffer(self._slot, dtype, self._nbytes // dtype.itemsize)
            self._array = a.reshape(self._shape) if self._shape is not None else a
        return self._array

    @property
    def view(self) -> memoryview:
        """A writable memoryview of the whole slot (capacity bytes)."""
        self._check()
        if self._view is None:
            self._view = memoryview(self._slot)  # type: ignore[arg-type]
        return self._view

    def commit(self, nbytes: int | None = None, sim_id: int | None = None,
               time_step: int | None = None) -> int:
        """Publish the slot's first nbytes (default: those of `array`) as a
        sample with this sim_id and time_step (default: those given to
        reserve()); returns its sample id (cistern_commit()). ValueError if
        nbytes exceeds the slot or sim_id/time_step are outside the policy's
        bounds: the slot stays reserved then."""
        n = self._nbytes if nbytes is None else _count("nbytes", nbytes)
        sim = self.sim_id if sim_id is None else sim_id
        ts = self.time_step if time_step is None else time_step
        self._check()
        sid = self._slot.commit(n, _count("sim_id", sim), _count("time_step", ts))
        self._end()
        self.sample_id = sid
        self._seg.last_meta = Meta(sid, sim, ts)
        return sid

    def abort(self) -> None:
        """Give the slot back unpublished (cistern_abort()): that sample never
        existed. Does nothing once the reservation has ended."""
        try:
            self._slot.abort()
        finally:
            self._end()

    def _end(self) -> None:
        if self._array is not None:
            self._array.flags.writeable = False
            self._array = None
        if self._view is not None:
            try:
                self._view.release()
            except BufferError:  # exported further: the mapping stays valid
                pass
            self._view = None

    def __enter__(self) -> Array:
        return self.array

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._slot.live:  # committed or aborted inside the block
            self._end()
            return
        if et is not None:
            self.abort()
            return
        try:
            self.commit()
        except BaseException:
            self.abort()
            raise

    def __repr__(self) -> str:
        state = "live" if self._slot.live else f"ended (sample id {self.sample_id})"
        return f"<cistern.Reservation of {self._nbytes} bytes {state}>"


# ------------------------------------------------------------------ segment

class Segment:
    """One attachment to a segment. Create with cistern.create(), cistern.attach()
    or cistern.open_readonly()."""

    def __init__(self, handle: _cistern.Handle, name: str) -> None:
        self._h = handle
        #: The segment's name.
        self.name = name
        #: Meta of the last sample put through reserve() or read by get(),
        #: get_array() or acquire().
        self.last_meta: Meta | None = None
        self._cfg: Config | None = None
        self._schema: Schema | None | Literal[False] = False  # False: not read yet
        #: What a read given a dtype and shape (or reading by the schema) does
        #: with a sample of another size: False, raise ValueError and leave it
        #: in the segment; True, read it and drop it (counted in
        #: misfits_skipped) and go on to the next.
        self.skip_misfits = False
        self._skipped = 0  # misfits skipped by the reads made in Python

    # -- properties -------------------------------------------------------

    @property
    def schema(self) -> Schema | None:
        """What every sample holds (cistern_schema_get(), cistern_schema_fields()),
        or None for a segment of plain bytes. Read once: a segment's schema never
        changes."""
        if self._schema is False:
            d = self._h.schema()
            self._schema = Schema._from(d) if d is not None else None
        return self._schema

    @property
    def slot_size(self) -> int:
        """The largest payload in bytes."""
        return self._h.slot_size

    @property
    def policy(self) -> str:
        """The policy's name ("fifo", "firo", ...)."""
        return self._conf().policy

    @property
    def detached(self) -> bool:
        """Whether detach() was called."""
        return self._h.detached

    @property
    def misfits_skipped(self) -> int:
        """Samples of another size this handle's reads read and dropped
        (skip_misfits=True)."""
        return self._h.skipped + self._skipped

    def __len__(self) -> int:
        """The population: samples held now (stats().population)."""
        return self.stats().population

    def __bool__(self) -> bool:
        # A segment is a segment even while empty (len() would say otherwise).
        return True

    def _waited(self, e: BaseException) -> BaseException:
        """e, a TimeoutError or KeyboardInterrupt out of a read, saying why the
        read waited when the watermark held it back."""
        why = self._watermark_wait()
        if why is None:
            return e
        if isinstance(e, TimeoutError):
            said = e.strerror if e.errno is not None and e.strerror else str(e)
            return TimeoutError(e.errno, f"{said}: {why}")
        e.add_note(f"the read was waiting: {why}")
        return e

    def _watermark_wait(self) -> str | None:
        """Why a read waits if the watermark holds it back (reception open and
        the population not past the watermark), else None."""
        try:
            cfg, st = self._conf(), self.stats()
        except (OSError, ValueError, RuntimeError):
            return None
        p, w = st.population, cfg.watermark
        if cfg.policy == "fifo" or not w or st.reception_closed:
            return None
        if cfg.policy == "firo":
            if p > w:
                return None
            return (f"population {p}, watermark {w}: FIRO reads wait while the population "
                    "is at most the watermark")
        if p >= w:
            return None
        return (f"population {p}, watermark {w}: reads wait until the population reaches "
                "the watermark")

    def config(self) -> Config:
        """The parameters as created, defaults filled in (cistern_config_get())."""
        return self._conf()

    def stats(self) -> Stats:
        """The segment's statistics, read without disturbing it (cistern_stats_get())."""
        return Stats._from(self._h.stats())

    def occupancy(self) -> Occupancy:
        """Slots counted by class (cistern_occupancy_get()), as `cistern inspect`
        shows them."""
        return Occupancy._from(self._h.occupancy())

    def procs(self) -> list[ProcInfo]:
        """The processes attached, live or dead (cistern_procs_get())."""
        return [ProcInfo._from(d) for d in self._h.procs()]

    # -- writing ----------------------------------------------------------

    def put(self, data: Any, sim_id: int = 0, time_step: int = 0,
            timeout: Timeout = None) -> int:
        """Copy one sample in: bytes, a numpy array (any layout) or any buffer;
        for a segment with a schema, a dict of its fields (or a numpy structured
        record), checked against it and written straight into the slot.

        Waits for room as the policy says. Returns the sample id. Raises
        TimeoutError, ValueError if it does not fit a slot, does not match the
        schema (naming the field that is missing, extra, of another dtype or
        shape: nothing is put) or sim_id/time_step are out of the policy's
        bounds, BrokenPipeError once reception is closed.
        """
        sch = self.schema
        fields = _schema_fields(sch, data)
        if sch is not None and fields is not None:
            return self._put_fields(sch, sch._values(fields), sim_id, time_step, timeout)
        if _np is not None and isinstance(data, _np.ndarray):
            if not data.flags.c_contiguous:
                data = _np.ascontiguousarray(data)
        elif not isinstance(data, (bytes, bytearray)):
            mv = memoryview(data)
            if not mv.c_contiguous:
                data = mv.tobytes()
        if sch is not None:
            self._check_sample_size(sch, memoryview(data).nbytes)
        sid = self._h.put(data, _count("sim_id", sim_id), _count("time_step", time_step),
                          _timeout_ms(timeout))
        return sid

    def _check_sample_size(self, sch: Schema, nbytes: int) -> None:
        if nbytes != sch.size:
            raise ValueError(f"a sample of {nbytes} bytes, where the schema's samples are "
                             f"{sch.size} ({sch.text}): put a dict of its fields")

    def _put_fields(self, sch: Schema, values: Fields, sim_id: int, time_step: int,
                    timeout: Timeout) -> int:
        """Write checked field values straight into a reserved slot and commit it."""
        np = _need_numpy()
        sim, ts = _count("sim_id", sim_id), _count("time_step", time_step)
        cslot = self._h.reserve(_timeout_ms(timeout))
        try:
            rec = _frombuffer(cslot, sch.dtype, 1)
            raw = _frombuffer(cslot, np.uint8, sch.size)
            for a, b in sch._gaps:  # what the slot held before is no one's business
                raw[a:b] = 0
            for name, v in values.items():
                rec[name][0] = v
            del rec, raw
            return cslot.commit(sch.size, sim, ts)
        except BaseException:
            cslot.abort()
            raise

    def put_batch(self, data: Any, sim_id: int | Sequence[int] | Array = 0,
                  time_step: int | Sequence[int] | Array = 0,
                  timeout: Timeout = None) -> Array:
        """Copy the rows of a numpy array in as samples, in order: row i of `data`
        (shape (k, ...)) is one sample, as put() would put it, all with one
        cistern_put_batch() call while there is room. For a segment with a
        schema, `data` is a dict of its fields, each with the k samples along a
        first axis, or a numpy structured array of k records, checked against
        the schema first (ValueError naming the field; nothing is put).

        sim_id and time_step are ints or sequences of k. Waits for room as put()
        does. Returns the sample ids put (a uint64 array): fewer than k only when
        the timeout comes after at least one; with none put, raises TimeoutError.
        Raises ValueError if a row does not fit a slot, BrokenPipeError once
        reception is closed.
        """
        np = _need_numpy()
        sch = self.schema
        fields = _schema_fields(sch, data)
        if sch is not None and fields is not None:
            k = sch._rows(fields)
            values = sch._values(fields, k)
            if k == 0:
                raise ValueError("put_batch: data must be one or more samples")
            data = np.zeros(k, dtype=sch.dtype)  # zeros: the padding between fields too
            for name, v in values.items():
                data[name] = v
        data = np.ascontiguousarray(data)
        if data.ndim == 0 or data.shape[0] == 0:
            raise ValueError("put_batch: data must be an array of one or more rows")
        k = data.shape[0]
        if sch is not None:
            self._check_sample_size(sch, data[0].nbytes)
        if type(sim_id) is int and type(time_step) is int and sim_id >= 0 and time_step >= 0:
            # One sim_id and time_step for every row: put_many() takes them as they are.
            got: Array = np.empty(k, dtype=np.uint64)
            n = self._h.put_many(data, data.nbytes // k, k, sim_id, time_step,
                                 _timeout_ms(timeout), got)
            return got if n == k else got[:n].copy()
        metas = _batch_metas(k, sim_id, time_step)
        n = self._h.put_batch(data, data[0].nbytes, k, metas, _timeout_ms(timeout))
        ids: Array = metas[:n, 0].copy()
        return ids

    def reserve(self, dtype: DTypeLike = None, shape: ShapeLike = None, sim_id: int = 0,
                time_step: int = 0, timeout: Timeout = None) -> Reservation:
        """Reserve a slot to write one sample in place, without a copy
        (cistern_reserve()); waits for room as put() does.

            with seg.reserve("float32", (1024,), sim_id=s, time_step=t) as out:
                out[...] = field      # committed when the block ends

        Returns a Reservation, whose value in a with-block is a writable numpy
        view of the slot (dtype None: uint8; shape None: as many items as the
        slot holds); the sample is committed when the block ends and aborted if
        an exception leaves it. ValueError if dtype and shape ask for more than
        slot_size bytes; the errors of put() otherwise.
        """
        np = _need_numpy()
        dt = np.dtype(dtype if dtype is not None else np.uint8)
        shp = _shape_tuple(shape)
        if shp is None:
            nbytes = self.slot_size - self.slot_size % dt.itemsize
        else:
            if any(d < 0 for d in shp):
                raise ValueError(f"reserve: shape {shp} must be non-negative sizes")
            nbytes = dt.itemsize * math.prod(shp)
        if nbytes > self.slot_size:
            raise ValueError(f"reserve: dtype {dt} and shape {shp} need {nbytes} bytes, "
                             f"more than a slot's {self.slot_size}")
        sim, ts = _count("sim_id", sim_id), _count("time_step", time_step)
        cslot = self._h.reserve(_timeout_ms(timeout))
        return Reservation(self, cslot, dt, shp, nbytes, sim, ts)

    def close_reception(self) -> None:
        """Close reception: puts fail from now on, readers drain then get end of data."""
        self._h.close_reception()

    def producer_done(self) -> int:
        """Declare one of the expected producers (create(expected_producers=...))
        done; returns how many are still expected (with dead_producer_done,
        those that died count as done). The last one closes reception.
        ValueError if the segment expects no producers."""
        return self._h.producer_done()

    # -- reading ----------------------------------------------------------

    @overload
    def get(self, timeout: Timeout = None, meta: Literal[False] = False) -> bytes | Fields: ...
    @overload
    def get(self, timeout: Timeout, meta: Literal[True]) -> tuple[bytes | Fields, Meta]: ...
    @overload
    def get(self, timeout: Timeout = None, *,
            meta: Literal[True]) -> tuple[bytes | Fields, Meta]: ...

    def get(self, timeout: Timeout = None,
            meta: bool = False) -> bytes | Fields | tuple[bytes | Fields, Meta]:
        """Take one sample out as bytes (or (bytes, Meta) with meta=True); for a
        segment with a schema, as a dict of numpy arrays, one per field (views
        of one private copy of the sample).

        Raises EndOfData at end of data and TimeoutError on timeout; ValueError
        for a sample that is not of the schema's size (it stays in the segment).
        """
        sch = self.schema
        if sch is None:
            data, m = self._read(self._h.get, "one", _timeout_ms(timeout))
            self.last_meta = Meta(*m)
            return (data, self.last_meta) if meta else data
        np = _need_numpy()
        buf = np.empty(sch.size, dtype=np.uint8)
        metas = np.empty((1, 3), dtype=np.uint64)
        self._read(self._h.get_many, "one", buf, sch.size, 1, _timeout_ms(timeout), metas,
                   self.skip_misfits)
        self.last_meta = Meta(*(int(v) for v in metas[0]))
        fields = sch._views(buf)
        return (fields, self.last_meta) if meta else fields

    @overload
    def get_array(self, dtype: DTypeLike = "uint8", shape: ShapeLike = None,
                  timeout: Timeout = None, meta: Literal[False] = False) -> Array: ...
    @overload
    def get_array(self, dtype: DTypeLike, shape: ShapeLike, timeout: Timeout,
                  meta: Literal[True]) -> tuple[Array, Meta]: ...
    @overload
    def get_array(self, dtype: DTypeLike = "uint8", shape: ShapeLike = None,
                  timeout: Timeout = None, *, meta: Literal[True]) -> tuple[Array, Meta]: ...

    def get_array(self, dtype: DTypeLike = "uint8", shape: ShapeLike = None,
                  timeout: Timeout = None, meta: bool = False) -> Array | tuple[Array, Meta]:
        """Take one sample out as a private numpy array of `dtype`, reshaped to
        `shape` (or (array, Meta) with meta=True). A sample that does not fit
        raises ValueError and stays in the segment, or with skip_misfits is
        read and dropped and the next one taken."""
        np = _need_numpy()
        dtype = np.dtype(dtype)
        shape = _shape_tuple(shape)
        out: Array
        if shape is not None:
            out = np.empty(shape, dtype=dtype)
            metas = np.empty((1, 3), dtype=np.uint64)
            self._read(self._h.get_many, "one", out, out.nbytes, 1, _timeout_ms(timeout), metas,
                       self.skip_misfits)
            self.last_meta = Meta(*(int(v) for v in metas[0]))
        else:
            s = self._acquire_fitting(timeout, dtype)
            try:
                m = s.meta
                assert isinstance(m, tuple)
                self.last_meta = Meta(*m)
                out = _frombuffer(s, dtype).copy()
            finally:
                s.release()
        return (out, self.last_meta) if meta else out

    # Without dtype and shape, a segment with a schema gives Fields: the first
    # overloads, which take only that call, come before the general ones. mypy
    # calls that overlap unsafe (the general ones take None too); the first
    # match is the intended one (here and for the acquires and get_pair below).
    @overload
    def get_batch(  # type: ignore[misc]
        self, n: int | None = None, dtype: None = None, shape: None = None,
        timeout: Timeout = None, meta: Literal[False] = False) -> Array | Fields: ...
    @overload
    def get_batch(  # type: ignore[misc]
        self, n: int | None, dtype: None, shape: None, timeout: Timeout,
        meta: Literal[True]) -> tuple[Array | Fields, Array]: ...
    @overload
    def get_batch(  # type: ignore[misc]
        self, n: int | None = None, dtype: None = None, shape: None = None,
        timeout: Timeout = None, *,
        meta: Literal[True]) -> tuple[Array | Fields, Array]: ...
    @overload
    def get_batch(self, n: int | None = None, dtype: DTypeLike = None,
                  shape: ShapeLike = None, timeout: Timeout = None,
                  meta: Literal[False] = False) -> Array: ...
    @overload
    def get_batch(self, n: int | None, dtype: DTypeLike, shape: ShapeLike, timeout: Timeout,
                  meta: Literal[True]) -> tuple[Array, Array]: ...
    @overload
    def get_batch(self, n: int | None = None, dtype: DTypeLike = None,
                  shape: ShapeLike = None, timeout: Timeout = None, *,
                  meta: Literal[True]) -> tuple[Array, Array]: ...

    @_explains_waits
    def get_batch(self, n: int | None = None, dtype: DTypeLike = None, shape: ShapeLike = None,
                  timeout: Timeout = None,
                  meta: bool = False) -> Array | Fields | tuple[Array | Fields, Array]:
        """Take up to n samples gathered into one new numpy array of shape (k, *shape).

        Every sample must hold exactly prod(shape) items of dtype (dtype None:
        float32; shape None: ()). For a segment with a schema, without dtype and
        shape, the samples are read by it instead: the result is a dict of
        arrays, one per field, of shape (k, *field shape) (views of one private
        array of the k samples, side by side as in the segment). Under the
        reservoir policies that have batch reads (reservoir,
        fifo_evict_reservoir, batch_reservoir) this is one
        cistern_acquire_batch() call, copied out and released: n distinct
        samples drawn together (n None = the segment's batch_size, which
        BatchReservoir requires); if one does not fit, the batch goes back
        unread. Under FIFO and FIRO it is n successive reads, gathered in C.
        k < n only at the end of data (or, for FIFO/FIRO, when the timeout comes
        after at least one sample); with none at all, EndOfData or TimeoutError is
        raised. A batch that the rate limiter's slack (set by hand at creation)
        could never admit raises ValueError at once. With meta=True, also returns a (k, 3) uint64 array of
        (sample_id, sim_id, time_step). With skip_misfits, a sample of another
        size is read and dropped instead (a reservoir's batch is then the
        members that fit).
        """
        np = _need_numpy()
        sch = self.schema if dtype is None and shape is None else None
        if sch is not None:
            rows, metas = self._get_rows(n, np.uint8, (sch.size,), timeout)
            fields = sch._views(rows, len(rows))
            return (fields, metas) if meta else fields
        out, metas = self._get_rows(n, "float32" if dtype is None else dtype,
                                    _shape_tuple(shape) or (), timeout)
        return (out, metas) if meta else out

    def _get_rows(self, n: int | None, dtype: DTypeLike, shape: tuple[int, ...],
                  timeout: Timeout) -> tuple[Array, Array]:
        """get_batch(): up to n samples as rows of a new (k, *shape) array of dtype,
        and their (k, 3) metadata."""
        np = _need_numpy()
        self._check_read("batch", n)
        if n is None:
            n = self._conf().batch_size
            if not n:
                raise ValueError("get_batch: give n (this segment has no batch_size)")
        n = _count("n", n)
        dt = np.dtype(dtype)
        out = np.empty((n,) + shape, dtype=dt)
        item = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        metas = np.empty((n, 3), dtype=np.uint64)
        if n == 0:
            return out, metas
        if self._batch_reads():
            k = self._h.get_batch(out, item, n, _timeout_ms(timeout), metas, self.skip_misfits)
        else:
            k = self._h.get_many(out, item, n, _timeout_ms(timeout), metas, self.skip_misfits)
        if k < n:
            out = out[:k].copy()
            metas = metas[:k].copy()
        return out, metas

    def get_into(self, out: Any, timeout: Timeout = None, metas: Any = None) -> int:
        """Copy the next sample into `out`, a writable buffer you reuse (a numpy
        array, a bytearray, ...), with no new object made: the fast way to read one
        sample at a time. `metas`, if given, is a writable array of 3 uint64 that
        receives (sample_id, sim_id, time_step). Returns the payload length in bytes.

        Serves the policies that read one sample (not sim-paired- or
        batch-reservoir). A sample longer than `out` raises ValueError and stays in
        the segment. Raises EndOfData, TimeoutError as get() does.
        """
        try:
            return self._h.get_into(out, -1 if timeout is None else _timeout_ms(timeout), metas)
        except ValueError:
            self._check_read("one")
            raise
        except (TimeoutError, KeyboardInterrupt) as e:
            raise self._waited(e) from None

    def get_batch_into(self, out: Any, timeout: Timeout = None, metas: Any = None,
                       lengths: Any = None) -> int:
        """Copy up to len(out) samples into `out` in one C call, sample i into
        out[i]: `out` is a C-contiguous numpy array (or 2-D memoryview) whose rows
        are each at least a sample long, reused from call to call. Returns k, the
        samples copied (rows beyond k are left as they were).

        FIFO and FIRO: the next samples there now, or, if none is, the first one
        waited for (with whatever came with it), so k may be short of len(out)
        while producers are slower than you; the batch reservoirs
        (reservoir, fifo-evict-reservoir, batch-reservoir): len(out) distinct
        samples drawn together (batch-reservoir: its batch_size rows). `metas` (a
        (len(out), 3) uint64 array) and `lengths` (len(out) uint64) receive each
        sample's (sample_id, sim_id, time_step) and payload length. A sample
        longer than a row raises ValueError and stays in the segment. Raises
        EndOfData (with none left) and TimeoutError as get_batch() does.
        """
        n = len(out)
        t = -1 if timeout is None else _timeout_ms(timeout)
        try:
            return self._h.get_batch_into(out, _row_bytes(out), n, t, metas, lengths)
        except ValueError:
            self._check_read("batch", n)
            raise
        except (TimeoutError, KeyboardInterrupt) as e:
            raise self._waited(e) from None

    @overload
    def acquire_many(self, n: int, timeout: Timeout = None,  # type: ignore[misc]
                     dtype: None = None,
                     shape: None = None) -> Group[tuple[Array, ...] | tuple[Fields, ...]]: ...
    @overload
    def acquire_many(self, n: int, timeout: Timeout = None, dtype: DTypeLike = None,
                     shape: ShapeLike = None) -> Group[tuple[Array, ...]]: ...

    @_explains_waits
    def acquire_many(self, n: int, timeout: Timeout = None, dtype: DTypeLike = None,
                     shape: ShapeLike = None) -> Group[Any]:
        """Acquire up to n samples one after the other, waiting for each, and hold
        them all until release() (which consumes them, as get() would) or
        unacquire() (which hands them back unread). Returns a Group whose
        with-block value is a tuple of zero-copy views (for a segment with a
        schema, without dtype and shape: a tuple of dicts of them, by field);
        Group.copy_into() gathers them into an array. Fewer than n only at end
        of data, or when the timeout (for the whole call) comes after the first.
        For a reader that must keep samples in the segment until it has passed
        them on (a crash in between hands them out again under FIFO and FIRO).
        Policies that read one sample. With skip_misfits and one size that fits
        (the schema, or a dtype and a shape without -1), a sample of another
        size is read and dropped instead of held."""
        self._check_read("one")
        sch = self.schema if dtype is None and shape is None else None
        size = _fixed_size(dtype, shape, sch) if self.skip_misfits else None
        cg = self._h.acquire_many(_count("n", n), _timeout_ms(timeout),
                                  -1 if size is None else size)
        _keep_if_misfit(cg, [len(cg.member(i)) for i in range(len(cg))], dtype, shape, sch)
        return Group(cg, dtype, shape, sch)

    @overload
    def acquire(self, timeout: Timeout = None, dtype: None = None,  # type: ignore[misc]
                shape: None = None) -> Sample[Array | Fields]: ...
    @overload
    def acquire(self, timeout: Timeout = None, dtype: DTypeLike = None,
                shape: ShapeLike = None) -> Sample[Array]: ...

    def acquire(self, timeout: Timeout = None, dtype: DTypeLike = None,
                shape: ShapeLike = None) -> Sample[Array] | Sample[Array | Fields]:
        """Acquire one sample to read in place; returns a Sample (a context manager).

            with seg.acquire(dtype="float32", shape=(32, 32)) as view:
                loss = model(torch.from_numpy(view.copy()))

        For a segment with a schema, acquired without dtype and shape, the
        with-block's value is a dict of zero-copy views, one per field:

            with seg.acquire() as t:
                q = model(torch.from_numpy(t["obs"]))

        A sample that does not fit (dtype and shape, or the schema's size) goes
        back unread and raises ValueError.
        """
        cs = self._acquire_one(timeout)
        sch = self.schema if dtype is None and shape is None else None
        _keep_if_misfit(cs, [len(cs)], dtype, shape, sch)
        s: Sample[Any] = Sample(cs, dtype, shape, sch)
        self.last_meta = s.meta
        return s

    def _batch_reads(self) -> bool:
        return (getattr(self._h, "get_batch", None) is not None
                and self._conf().policy in _BATCH_POLICIES)

    def _conf(self) -> Config:
        if self._cfg is None:
            self._cfg = Config._from(self._h.config())
        return self._cfg

    def _read_misuse(self, kind: str, n: int | None = None) -> str | None:
        """Why this segment's policy does not read `kind` ("one", "batch", "pair")
        (with batch size n); None if it does."""
        cfg = self._conf()
        policy, bs = cfg.policy, cfg.batch_size
        if policy == "sim-paired-reservoir" and kind != "pair":
            return "sim-paired-reservoir reads pairs: use get_pair() or acquire_pair()"
        if kind == "pair" and policy != "sim-paired-reservoir":
            return f"pairs are read from a sim-paired-reservoir, not a {policy}"
        if policy == "batch-reservoir" and kind == "one":
            return "batch-reservoir reads whole batches: use get_batch() or acquire_batch()"
        if policy == "batch-reservoir" and n not in (None, 0, bs):
            return f"batch-reservoir reads batches of exactly its batch_size ({bs}), not {n}"
        return None

    def _check_read(self, kind: str, n: int | None = None) -> None:
        why = self._read_misuse(kind, n)
        if why:
            raise ValueError(why)

    def _read(self, call: Callable[..., _T], kind: str, *args: Any) -> _T:
        """call(*args), with a read the policy does not do explained (the library
        only says EINVAL), and a wait the watermark made (_waited())."""
        try:
            return call(*args)
        except ValueError:
            why = self._read_misuse(kind)
            if why:
                raise ValueError(why) from None
            raise
        except (TimeoutError, KeyboardInterrupt) as e:
            raise self._waited(e) from None

    def _acquire_one(self, timeout: Timeout) -> _cistern.Sample:
        return self._read(self._h.acquire, "one", _timeout_ms(timeout))

    def _acquire_fitting(self, timeout: Timeout, dtype: DTypeLike) -> _cistern.Sample:
        """One sample acquired whose length is whole items of dtype: one that is
        not goes back unread with ValueError, or, with skip_misfits, is read and
        dropped, and the next one is acquired (within the same timeout)."""
        t = _timeout_ms(timeout)
        deadline = _deadline(t)
        while True:
            s = self._read(self._h.acquire, "one", t)
            if not self.skip_misfits or _misfit(len(s), dtype, None) is None:
                _keep_if_misfit(s, [len(s)], dtype, None)
                return s
            s.release()
            self._skipped += 1
            t = _left(deadline, t)

    def _acquire_fitting_pair(self, timeout: Timeout, dtype: DTypeLike, shape: ShapeLike,
                              sch: Schema | None) -> _cistern.Sample:
        """A pair acquired whose members fit dtype and shape (or the schema), as
        _acquire_fitting() does for one sample."""
        t = _timeout_ms(timeout)
        deadline = _deadline(t)
        while True:
            cg = self._h.acquire_pair(t)
            lengths = [len(cg.member(i)) for i in range(2)]
            fits = all((n == sch.size) if sch is not None else _misfit(n, dtype, shape) is None
                       for n in lengths)
            if fits or not self.skip_misfits:
                _keep_if_misfit(cg, lengths, dtype, shape, sch)
                return cg
            cg.release()
            self._skipped += sum(1 for n in lengths if (n != sch.size if sch is not None
                                                         else _misfit(n, dtype, shape)))
            t = _left(deadline, t)

    @overload
    def acquire_batch(  # type: ignore[misc]
        self, n: int | None = None, timeout: Timeout = None, dtype: None = None,
        shape: None = None) -> Group[tuple[Array, ...] | tuple[Fields, ...]]: ...
    @overload
    def acquire_batch(self, n: int | None = None, timeout: Timeout = None,
                      dtype: DTypeLike = None,
                      shape: ShapeLike = None) -> Group[tuple[Array, ...]]: ...

    @_explains_waits
    def acquire_batch(self, n: int | None = None, timeout: Timeout = None,
                      dtype: DTypeLike = None, shape: ShapeLike = None) -> Group[Any]:
        """Acquire n distinct samples drawn together, pinned until release (reservoir
        policies; n None = the segment's batch_size). Returns a Group whose value in
        a with-block is a tuple of zero-copy numpy views (for a segment with a
        schema, without dtype and shape: a tuple of dicts of them, by field). The
        last batch after reception closes may be short."""
        self._check_read("batch", n)
        if self._conf().policy not in _BATCH_POLICIES:
            raise ValueError("acquire_batch() draws from reservoir, fifo-evict-reservoir and "
                             f"batch-reservoir segments, not a {self._conf().policy}")
        cg = self._h.acquire_batch(0 if n is None else _count("n", n), _timeout_ms(timeout))
        sch = self.schema if dtype is None and shape is None else None
        _keep_if_misfit(cg, [len(cg.member(i)) for i in range(len(cg))], dtype, shape, sch)
        return Group(cg, dtype, shape, sch)

    @overload
    def acquire_pair(self, timeout: Timeout = None, dtype: None = None,  # type: ignore[misc]
                     shape: None = None) -> Group[tuple[Array, ...] | tuple[Fields, ...]]: ...
    @overload
    def acquire_pair(self, timeout: Timeout = None, dtype: DTypeLike = None,
                     shape: ShapeLike = None) -> Group[tuple[Array, ...]]: ...

    @_explains_waits
    def acquire_pair(self, timeout: Timeout = None, dtype: DTypeLike = None,
                     shape: ShapeLike = None) -> Group[Any]:
        """Acquire a pair (x_t, x_t+1) of one simulation (SimPairedReservoir).
        Returns a Group whose value in a with-block is (view_t, view_t1) (for a
        segment with a schema, without dtype and shape: a pair of dicts of
        views, by field)."""
        self._check_read("pair")
        cg = self._h.acquire_pair(_timeout_ms(timeout))
        sch = self.schema if dtype is None and shape is None else None
        _keep_if_misfit(cg, [len(cg.member(i)) for i in range(len(cg))], dtype, shape, sch)
        return Group(cg, dtype, shape, sch)

    @overload
    def get_pair(  # type: ignore[misc]
        self, dtype: None = None, shape: None = None, timeout: Timeout = None,
        meta: Literal[False] = False) -> Array | Fields: ...
    @overload
    def get_pair(self, dtype: None, shape: None, timeout: Timeout,  # type: ignore[misc]
                 meta: Literal[True]) -> tuple[Array | Fields, list[Meta]]: ...
    @overload
    def get_pair(  # type: ignore[misc]
        self, dtype: None = None, shape: None = None, timeout: Timeout = None, *,
        meta: Literal[True]) -> tuple[Array | Fields, list[Meta]]: ...
    @overload
    def get_pair(self, dtype: DTypeLike = None, shape: ShapeLike = None,
                 timeout: Timeout = None, meta: Literal[False] = False) -> Array: ...
    @overload
    def get_pair(self, dtype: DTypeLike, shape: ShapeLike, timeout: Timeout,
                 meta: Literal[True]) -> tuple[Array, list[Meta]]: ...
    @overload
    def get_pair(self, dtype: DTypeLike = None, shape: ShapeLike = None,
                 timeout: Timeout = None, *,
                 meta: Literal[True]) -> tuple[Array, list[Meta]]: ...

    @_explains_waits
    def get_pair(self, dtype: DTypeLike = None, shape: ShapeLike = None, timeout: Timeout = None,
                 meta: bool = False) -> Any:
        """Take a pair out as one new array of shape (2, *shape): [x_t, x_t+1]
        (SimPairedReservoir; dtype None: float32, shape None: ()); for a segment
        with a schema, without dtype and shape, as a dict of new arrays, one per
        field, of shape (2, *field shape). With meta=True, also returns
        [Meta, Meta]."""
        np = _need_numpy()
        sch = self.schema if dtype is None and shape is None else None
        dt = np.dtype("float32" if dtype is None else dtype)
        shp = _shape_tuple(shape) or ()
        self._check_read("pair")
        # Acquired, checked, copied, released: a pair that does not fit goes back unread.
        cg = self._acquire_fitting_pair(timeout, dt, shp, sch)
        try:
            out: Any
            if sch is not None:
                members = [sch._views(cg.member(i)) for i in range(2)]
                out = {name: np.stack([m[name] for m in members]) for name in sch.names}
            else:
                out = np.stack([_frombuffer(cg.member(i), dt).reshape(shp) for i in range(2)])
            ms = cg.meta
            assert isinstance(ms, list)
            metas = [Meta(*m) for m in ms]
        finally:
            cg.release()
        return (out, metas) if meta else out

    def __iter__(self) -> Iterator[bytes | Fields]:
        """Yield payloads (bytes; for a segment with a schema, dicts of arrays by
        field, as get() gives them) until end of data."""
        while True:
            try:
                yield self.get()
            except EndOfData:
                return

    def iter_arrays(self, dtype: DTypeLike = "uint8", shape: ShapeLike = None,
                    timeout: Timeout = None) -> Iterator[Array]:
        """Yield numpy copies until end of data."""
        while True:
            try:
                yield self.get_array(dtype, shape, timeout)
            except EndOfData:
                return

    @overload
    def iter_batches(self, n: int, dtype: None = None, shape: None = None,  # type: ignore[misc]
                     timeout: Timeout = None) -> Iterator[Array | Fields]: ...
    @overload
    def iter_batches(self, n: int, dtype: DTypeLike = None, shape: ShapeLike = None,
                     timeout: Timeout = None) -> Iterator[Array]: ...

    def iter_batches(self, n: int, dtype: DTypeLike = None, shape: ShapeLike = None,
                     timeout: Timeout = None) -> Iterator[Any]:
        """Yield get_batch() results until end of data (the last one may be short)."""
        while True:
            try:
                yield self.get_batch(n, dtype, shape, timeout)
            except EndOfData:
                return

    # -- lifetime ---------------------------------------------------------

    def unlink(self, missing_ok: bool = True) -> None:
        """Remove this segment's name (attached processes keep working)."""
        unlink(self.name, missing_ok=missing_ok)

    def detach(self) -> None:
        """Detach (idempotent). Samples still held are released and open
        reservations aborted."""
        self._h.detach()

    def __enter__(self) -> Segment:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.detach()

    def __repr__(self) -> str:
        state = "detached" if self._h.detached else self.policy
        return f"<cistern.Segment {self.name!r} {state}>"


# ------------------------------------------------------------ remote producers


@dataclasses.dataclass(frozen=True, repr=True)
class RemoteInfo(_Record):
    """What a remote producer's connection knows of its server, and its counts
    (cistern_remote_info_get()). `acked` samples are in their segment, exactly
    once; `failed` ones were refused by the server (a closed segment, a rank
    out of range); the rest of `sent` are still in flight."""

    slot_size: int
    producer_id: int
    ranks: int
    window: int
    sent: int
    acked: int
    failed: int


class RemoteProducer:
    """A producer on another machine than its learners: a connection to a
    `cistern serve` server, which puts what it receives into its segments, one
    per learner rank (docs/REMOTE.md). Make one with cistern.connect(); use it
    from one thread at a time (connect once per thread).

        with cistern.connect("tcp://learner-node:5555") as out:
            for t, field in enumerate(simulate()):
                out.put(field, sim_id=s, time_step=t)   # rank s mod R gets it
            out.producer_done()                        # waits for every ack

    put() and put_batch() return once the samples are handed to the connection
    under the server's credit, waiting while its window of samples in flight is
    full (a full segment thus slows its producers down). A sample is
    acknowledged once it is in its segment, whole and exactly once; flush()
    and producer_done() wait for the acknowledgements. An error the server met
    with an earlier sample (BrokenPipeError once its segment's reception is
    closed) is raised by the next call, once. A lost server raises
    ConnectionResetError: close and connect again.

    Leaving a with-block normally flushes (every sample acknowledged), then
    closes; leaving it by an exception closes without waiting. Neither
    declares the producer done: call producer_done() for that.
    """

    def __init__(self, remote: _cistern.Remote, endpoint: str) -> None:
        self._r = remote
        #: The server's endpoint, as given to connect().
        self.endpoint = endpoint
        text = remote.schema()
        self._schema = Schema.parse(text) if text is not None else None
        self._slot_size = remote.info()["slot_size"]

    @property
    def schema(self) -> Schema | None:
        """The schema of the server's segments (cistern_remote_schema_get()), or
        None for segments of plain bytes; puts are checked against it as a
        local Segment's are."""
        return self._schema

    @property
    def slot_size(self) -> int:
        """The largest payload the server's segments take, in bytes."""
        return self._slot_size

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._r.closed

    def info(self) -> RemoteInfo:
        """The server's parameters and this connection's counts
        (cistern_remote_info_get())."""
        return RemoteInfo._from(self._r.info())

    def _payload(self, data: Any) -> Any:
        """One sample's bytes: a dict of fields (or a structured record) packed
        by the schema, or any buffer made contiguous; checked for size."""
        sch = self._schema
        fields = _schema_fields(sch, data)
        if sch is not None and fields is not None:
            np = _need_numpy()
            values = sch._values(fields)
            rec = np.zeros(1, dtype=sch.dtype)  # zeros: the padding between fields too
            for name, v in values.items():
                rec[name][0] = v
            return rec
        if _np is not None and isinstance(data, _np.ndarray):
            if not data.flags.c_contiguous:
                data = _np.ascontiguousarray(data)
        elif not isinstance(data, (bytes, bytearray)):
            mv = memoryview(data)
            if not mv.c_contiguous:
                data = mv.tobytes()
        n = memoryview(data).nbytes
        if sch is not None and n != sch.size:
            raise ValueError(f"a sample of {n} bytes, where the schema's samples are "
                             f"{sch.size} ({sch.text}): put a dict of its fields")
        if n > self._slot_size:
            raise ValueError(f"sample of {n} bytes does not fit the server's slots of "
                             f"{self._slot_size} bytes")
        return data

    def put(self, data: Any, sim_id: int = 0, time_step: int = 0,
            timeout: Timeout = None) -> None:
        """Send one sample (cistern_remote_put()): bytes, a numpy array (any
        layout) or any buffer; where the server's segments have a schema, a dict
        of its fields (or a numpy structured record), checked against it first
        (ValueError naming the field; nothing is sent). sim_id picks the rank
        (sim_id mod R unless the server routes otherwise).

        Waits while the window of samples in flight is full: TimeoutError when
        `timeout` passes first. ValueError if it does not fit a slot;
        BrokenPipeError after producer_done() or when the server reported an
        earlier sample refused because its segment's reception closed;
        ConnectionResetError once the server is gone.
        """
        self._r.put(self._payload(data), _count("sim_id", sim_id),
                    _count("time_step", time_step), _timeout_ms(timeout))

    def put_batch(self, data: Any, sim_id: int | Sequence[int] | Array = 0,
                  time_step: int | Sequence[int] | Array = 0,
                  timeout: Timeout = None) -> int:
        """Send the rows of a numpy array as samples, in order
        (cistern_remote_put_batch()): row i of `data` (shape (k, ...)) is one
        sample. Where the segments have a schema, `data` is a dict of its
        fields, each with the k samples along a first axis, or a numpy
        structured array of k records, checked first (nothing is sent if one
        is wrong). sim_id and time_step are ints or sequences of k.

        Returns how many were sent: fewer than k only when the timeout came
        after at least one (with none, TimeoutError). The errors of put().
        """
        np = _need_numpy()
        sch = self._schema
        fields = _schema_fields(sch, data)
        if sch is not None and fields is not None:
            k = sch._rows(fields)
            values = sch._values(fields, k)
            if k == 0:
                raise ValueError("put_batch: data must be one or more samples")
            data = np.zeros(k, dtype=sch.dtype)
            for name, v in values.items():
                data[name] = v
        data = np.ascontiguousarray(data)
        if data.ndim == 0 or data.shape[0] == 0:
            raise ValueError("put_batch: data must be an array of one or more rows")
        k = data.shape[0]
        row = data[0].nbytes
        if sch is not None and row != sch.size:
            raise ValueError(f"a sample of {row} bytes, where the schema's samples are "
                             f"{sch.size} ({sch.text}): put a dict of its fields")
        if row > self._slot_size:
            raise ValueError(f"samples of {row} bytes do not fit the server's slots of "
                             f"{self._slot_size} bytes")
        metas = _batch_metas(k, sim_id, time_step)
        return self._r.put_batch(data, row, k, metas, _timeout_ms(timeout))

    def flush(self, timeout: Timeout = None) -> None:
        """Wait until every sample sent so far is acknowledged (in its segment)
        or failed (cistern_remote_flush()). TimeoutError when `timeout` passes
        first; the first error the server reported since the last one raised."""
        self._r.flush(_timeout_ms(timeout))

    def producer_done(self, timeout: Timeout = None) -> None:
        """Flush, then declare this producer done, as Segment.producer_done()
        does, on every rank it sent a sample to whose segment expects
        producers (cistern_remote_producer_done()). Puts raise BrokenPipeError
        from then on."""
        self._r.producer_done(_timeout_ms(timeout))

    def close(self) -> None:
        """Say goodbye and free the connection (cistern_remote_close()). Samples
        not yet acknowledged are not waited for (flush() first); those already
        sent still reach their segment if the server can put them. Closing
        again does nothing."""
        self._r.close()

    def __enter__(self) -> RemoteProducer:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if et is None and not self._r.closed:
                self.flush()
        finally:
            self.close()

    def __repr__(self) -> str:
        return f"<cistern.RemoteProducer {self.endpoint!r}{' closed' if self.closed else ''}>"


def connect(endpoint: str, *, server_key: str | None = None, public_key: str | None = None,
            secret_key: str | None = None, connect_timeout: float = 5.0,
            heartbeat: float = 1.0, heartbeat_timeout: float | None = None,
            window: int = 0, linger: float | None = None) -> RemoteProducer:
    """Connect a remote producer to a `cistern serve` server at `endpoint`
    ("tcp://host:port" or "ipc://path") and return its RemoteProducer
    (cistern_remote_connect()); returns once the server answered.

    server_key: the server's CurveZMQ public key (Z85 text), needed for a
      server bound to another address than loopback; public_key, secret_key:
      this client's key pair (one the server admits; None: a fresh pair).
    connect_timeout: seconds to wait for the server's answer (TimeoutError:
      no server there, or it refused this client's key).
    heartbeat, heartbeat_timeout: seconds between ZeroMQ heartbeats, and of
      silence after which the server is taken for gone (None: 5 heartbeats).
    window: samples in flight asked for (0: what the server grants).
    linger: seconds a small put may wait to leave in one message with the
      puts after it (None: 0.001); 0 sends every put by itself. A put on a
      connection idle that long leaves at once, so only bursts are gathered.

    ValueError for a bad endpoint or a key that is not Z85.
    """
    if not isinstance(endpoint, str):
        raise TypeError(f"endpoint must be a str, not {type(endpoint).__name__}")

    def ms(what: str, s: float | None) -> int:
        if s is None:
            return 0
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not s > 0:
            raise ValueError(f"{what} must be a positive number of seconds, not {s!r}")
        return min(max(1, math.ceil(s * 1000)), 2**31 - 1)

    if linger is None:
        linger_us = 0
    elif isinstance(linger, bool) or not isinstance(linger, (int, float)) or not 0 <= linger <= 1:
        raise ValueError(f"linger must be a number of seconds from 0 to 1, not {linger!r}")
    else:
        linger_us = -1 if linger == 0 else max(1, round(linger * 1e6))
    r = _cistern.remote_connect(endpoint, server_key, public_key, secret_key,
                                ms("connect_timeout", connect_timeout), ms("heartbeat", heartbeat),
                                ms("heartbeat_timeout", heartbeat_timeout),
                                _count("window", window), linger_us)
    return RemoteProducer(r, endpoint)


def keygen() -> tuple[str, str]:
    """A fresh CurveZMQ key pair, (public, secret), each 40 characters of Z85
    text (cistern_remote_keygen()), as `cistern keygen` writes them."""
    return _cistern.remote_keygen()
