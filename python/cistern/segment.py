# SPDX-License-Identifier: MIT
"""A Segment (one attachment) and the calls that create, attach, open and
unlink segments by name."""

from __future__ import annotations

import errno
import functools
import math
import os
import re
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Literal, TypeVar, cast, overload

from ._common import (_batch_metas, _check_name_type, _cistern, _count, _deadline, _frombuffer,
                      _left, _misfit, _need_numpy, _np, _rate, _row_bytes, _shape_tuple,
                      _timeout_ms)
from .errors import EndOfData
from .constants import _BATCH_POLICIES, policy_number
from .records import (Config, Meta, Occupancy, PrioInfo, PrioritizedBatch, ProcInfo,
                      Stats)
from .schema import Schema, _batch_rows, _schema_fields, _schema_text
from .samples import Group, Reservation, Sample

if TYPE_CHECKING:
    from ._common import Array, DTypeLike, Fields, SchemaLike, ShapeLike, Timeout

__all__ = [
    "create", "segment_bytes", "shm_room_problem", "config_problem", "attach", "open_readonly",
    "unlink", "Segment",
]


def _priority(priority: object) -> float:
    """A priority as a float; its range is the extension's to judge (ValueError)."""
    if isinstance(priority, bool):
        raise ValueError(f"a priority is a number, not {priority!r}")
    try:
        return float(priority)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"a priority is a number, not {priority!r}") from None


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


_T = TypeVar("_T")


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
                 dead_producer_done: bool = False, alpha: float = 0.0, beta: float = 0.0,
                 epsilon: float = 0.0, cold_slots: int = 0,
                 cold_dir: str | os.PathLike[str] | None = None,
                 max_times_sampled: int = 0) -> dict[str, Any]:
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
        alpha=_rate("alpha", alpha),
        beta=_rate("beta", beta),
        epsilon=_rate("epsilon", epsilon),
        cold_slots=_count("cold_slots", cold_slots),
        cold_dir=None if cold_dir is None else os.fspath(cold_dir),
        max_times_sampled=_count("max_times_sampled", max_times_sampled),
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
           dead_producer_done: bool = False, alpha: float = 0.0, beta: float = 0.0,
           epsilon: float = 0.0, cold_slots: int = 0,
           cold_dir: str | os.PathLike[str] | None = None,
           max_times_sampled: int = 0) -> Segment:
    """Create segment `name` and attach to it.

    policy: "fifo", "firo", "reservoir", "fifo-evict-reservoir",
    "sim-paired-reservoir", "batch-reservoir", "prioritized" (underscores and the CamelCase
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

    alpha, beta, epsilon (prioritized only; 0 for the others): a draw picks
    sample i with probability (priority_i + epsilon)^alpha / sum_j
    (priority_j + epsilon)^alpha and weighs it (N P(i))^-beta / max_j
    (N P(j))^-beta; alpha from 0 (uniform) to 8, beta from 0 to 1
    (Segment.set_beta() changes it later), epsilon >= 0. See
    Segment.get_prioritized().

    schema: what every sample holds (see Schema.parse() for the forms it takes),
    for example {"obs": ("float32", (84, 84)), "action": ("int64", ())}. Its
    puts are then checked against it, and get(), get_batch() and acquire()
    give dicts of numpy arrays; slot_size 0 means the schema's sample size.

    cold_slots and cold_dir (reservoir, batch-reservoir, firo and
    fifo-evict-reservoir): a cold tier of cold_slots more slots in the file
    cold_dir/cistern.NAME.cold, on a local disk that takes direct I/O; the
    population is slots plus cold_slots.
    Puts move samples to disk when memory is full, reads draw over both
    (docs/protocol/tiers.md). A disk too small raises OSError(ENOSPC).

    max_times_sampled (the reservoir kinds; 0 = off): a sample leaves after
    that many reads, once the last reader holding it lets go, and its slot
    takes the next put. No sample is read more often; a read handed back
    (unacquire(), or a reader that died holding it) does not count. Refused
    for fifo and firo, with cold_slots, and under a reads_per_put above it.
    With fewer samples left than the watermark, reads wait for puts.

    Raises FileExistsError if the name is taken, ValueError for bad parameters
    (config_problem() says the same without creating anything),
    OSError(ENOTSUP) for a policy this build lacks.
    """
    if not isinstance(name, str):
        raise ValueError("segment name must be a str")
    kw = _config_args(policy, slots, slot_size, watermark, pseudo_epochs, sweep_size,
                      time_steps, batch_size, seed, mode, max_procs, expected_producers,
                      lossy, single_producer, single_reader, reads_per_put, rate_slack, schema,
                      dead_producer_done, alpha, beta, epsilon, cold_slots, cold_dir,
                      max_times_sampled)
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
                   dead_producer_done: bool = False, alpha: float = 0.0, beta: float = 0.0,
                   epsilon: float = 0.0, cold_slots: int = 0,
                   cold_dir: str | os.PathLike[str] | None = None,
                   max_times_sampled: int = 0) -> str | None:
    """Why create() would refuse these parameters, in a sentence naming the
    argument that is wrong, or None if it would take them
    (cistern_config_problem()). Creates nothing; the name is not judged (see
    name_valid()). Arguments that are not even of the right kind raise
    ValueError, as with create()."""
    kw = _config_args(policy, slots, slot_size, watermark, pseudo_epochs, sweep_size,
                      time_steps, batch_size, seed, mode, max_procs, expected_producers,
                      lossy, single_producer, single_reader, reads_per_put, rate_slack, schema,
                      dead_producer_done, alpha, beta, epsilon, cold_slots, cold_dir,
                      max_times_sampled)
    why = _cistern.config_problem(**kw)
    return _in_our_words(why) if why is not None else None


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
            timeout: Timeout = None, priority: float | None = None,
            end_of_episode: bool = False) -> int:
        """Copy one sample in: bytes, a numpy array (any layout) or any buffer;
        for a segment with a schema, a dict of its fields (or a numpy structured
        record), checked against it and written straight into the slot.

        Waits for room as the policy says. Returns the sample id. Raises
        TimeoutError, ValueError if it does not fit a slot, does not match the
        schema (naming the field that is missing, extra, of another dtype or
        shape: nothing is put) or sim_id/time_step are out of the policy's
        bounds, BrokenPipeError once reception is closed.

        priority (prioritized segments only): the sample's priority, a finite
        number >= 0 (cistern_put_prioritized()); None gives it the largest
        priority seen so far. ValueError for NaN, an infinite or a negative
        priority, or a priority on another policy.

        end_of_episode: this sample is the last step of its episode
        (CISTERN_META_END_OF_EPISODE). A sim-paired-reservoir and a
        prioritized segment keep the mark, and no window of get_windows()
        runs past it; the other policies ignore it.
        """
        sch = self.schema
        fields = _schema_fields(sch, data)
        end = bool(end_of_episode)
        if sch is not None and fields is not None:
            if priority is None:
                return self._put_fields(sch, sch._values(fields), sim_id, time_step, timeout,
                                        end)
            data = self._packed(sch, sch._values(fields))
        if _np is not None and isinstance(data, _np.ndarray):
            if not data.flags.c_contiguous:
                data = _np.ascontiguousarray(data)
        elif not isinstance(data, (bytes, bytearray)):
            mv = memoryview(data)
            if not mv.c_contiguous:
                data = mv.tobytes()
        if sch is not None:
            self._check_sample_size(sch, memoryview(data).nbytes)
        if priority is not None:
            return self._h.put_prioritized(data, _priority(priority), _count("sim_id", sim_id),
                                           _count("time_step", time_step),
                                           _timeout_ms(timeout), end)
        sid = self._h.put(data, _count("sim_id", sim_id), _count("time_step", time_step),
                          _timeout_ms(timeout), end)
        return sid

    @staticmethod
    def _packed(sch: Schema, values: Fields) -> Array:
        """Checked field values as the bytes of one sample, padding zeroed."""
        np = _need_numpy()
        raw: Array = np.zeros(sch.size, dtype=np.uint8)
        rec = raw.view(sch.dtype)
        for name, v in values.items():
            rec[name][0] = v
        return raw

    def _check_sample_size(self, sch: Schema, nbytes: int) -> None:
        if nbytes != sch.size:
            raise ValueError(f"a sample of {nbytes} bytes, where the schema's samples are "
                             f"{sch.size} ({sch.text}): put a dict of its fields")

    def _put_fields(self, sch: Schema, values: Fields, sim_id: int, time_step: int,
                    timeout: Timeout, end_of_episode: bool = False) -> int:
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
            return cslot.commit(sch.size, sim, ts, end_of_episode)
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
        data = _batch_rows(sch, data)
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
        unread. A prioritized segment reads the same way, drawing by priority
        with replacement (get_prioritized() also gives ids and weights).
        Under FIFO and FIRO it is n successive reads, gathered in C.
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

    @_explains_waits
    def get_prioritized(self, n: int | None = None, dtype: DTypeLike = None,
                        shape: ShapeLike = None,
                        timeout: Timeout = None) -> PrioritizedBatch:
        """Draw up to n samples by priority (prioritized segments;
        cistern_get_prioritized()), gathered as get_batch() gathers them.

        Returns PrioritizedBatch(samples, ids, weights): samples is a
        (k, *shape) array of dtype (dtype None: float32; shape None: ()), or for
        a segment with a schema, without dtype and shape, a dict of (k, *field
        shape) arrays; ids a (k,) uint64 array to give update_priorities();
        weights a (k,) float32 array of importance weights
        (N P(i))^-beta / max_j (N P(j))^-beta, in (0, 1], ready to scale a
        float32 loss.

        While reception is open the draws are independent and with
        replacement: a batch may hold a sample twice. After it closes, each
        sample drawn is taken out and the last batch may be short; with none
        left, EndOfData. n None = the segment's batch_size. A sample longer
        than dtype and shape say is refused with ValueError and the batch stays
        in the segment; a shorter one raises ValueError after it was read.
        """
        np = _need_numpy()
        if n is None:
            n = self._conf().batch_size
            if not n:
                raise ValueError("get_prioritized: give n (this segment has no batch_size)")
        n = _count("n", n)
        if n == 0:
            raise ValueError("get_prioritized: n must be at least 1")
        sch = self.schema if dtype is None and shape is None else None
        shp: tuple[int, ...]
        if sch is not None:
            dt, shp = np.dtype(np.uint8), (sch.size,)
        else:
            dt, shp = np.dtype("float32" if dtype is None else dtype), _shape_tuple(shape) or ()
        out = np.empty((n,) + shp, dtype=dt)
        item = dt.itemsize * int(np.prod(shp, dtype=np.int64))
        ids = np.empty(n, dtype=np.uint64)
        w = np.empty(n, dtype=np.float64)
        k = self._h.get_prioritized(out, item, n, _timeout_ms(timeout), None, ids, w)
        if k < n:
            out, ids, w = out[:k].copy(), ids[:k].copy(), w[:k]
        samples: Array | Fields = sch._views(out, k) if sch is not None else out
        return PrioritizedBatch(samples, ids, w.astype(np.float32))

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Set the priorities of the samples a prioritized draw gave these ids
        (cistern_update_priorities()), in one call: ids as get_prioritized()
        returned them (or cistern.torch's int64 tensor of them), priorities
        one finite number >= 0 each (numpy arrays, torch tensors on the CPU or
        sequences). Returns how many were applied:
        an id whose sample left the buffer since it was drawn is ignored and
        counted in prio_info().stale_updates. ValueError, naming the first bad
        one, for a priority that is NaN, infinite or negative: then nothing is
        applied."""
        np = _need_numpy()
        ida = np.asarray(ids).reshape(-1)
        if ida.dtype == np.int64:  # cistern.torch's ids: the bits of the uint64 ids
            ida = ida.view(np.uint64)
        ids_a = np.ascontiguousarray(ida, dtype=np.uint64)
        pri = np.ascontiguousarray(np.asarray(priorities, dtype=np.float64).reshape(-1))
        return int(self._h.update_priorities(ids_a, pri))

    def set_beta(self, beta: float) -> None:
        """Change beta, the exponent of the importance weights, for every reader
        of the segment (cistern_set_beta()): from 0 to 1, usually annealed
        towards 1 as training goes."""
        self._h.set_beta(_rate("beta", beta))

    def prio_info(self) -> PrioInfo:
        """A prioritized segment's parameters and totals (cistern_prio_info_get())."""
        return PrioInfo._from(self._h.prio_info())

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
        """Why this segment's policy does not read `kind` ("one", "batch", "pair",
        "window", "prioritized window") (with batch size n); None if it does."""
        cfg = self._conf()
        policy, bs = cfg.policy, cfg.batch_size
        if kind == "prioritized window" and policy != "prioritized":
            return f"windows by priority are read from a prioritized segment, not a {policy}"
        if kind in ("window", "prioritized window") and policy == "prioritized":
            if not cfg.sweep_size:
                return ("windows are read from a prioritized segment created with sweep_size "
                        "and time_steps")
            return None
        if policy == "sim-paired-reservoir" and kind not in ("pair", "window"):
            return "sim-paired-reservoir reads pairs: use get_pair() or acquire_pair()"
        if kind in ("pair", "window") and policy != "sim-paired-reservoir":
            return f"{kind}s are read from a sim-paired-reservoir, not a {policy}"
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
            raise ValueError("acquire_batch() draws from reservoir, fifo-evict-reservoir, "
                             f"batch-reservoir and prioritized segments, not a "
                             f"{self._conf().policy}")
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

    @overload
    def get_windows(  # type: ignore[misc]
        self, n: int, length: int, step: int = 1, dtype: None = None, shape: None = None,
        timeout: Timeout = None, meta: Literal[False] = False) -> Array | Fields: ...
    @overload
    def get_windows(  # type: ignore[misc]
        self, n: int, length: int, step: int = 1, dtype: None = None, shape: None = None,
        timeout: Timeout = None, *, meta: Literal[True]) -> tuple[Array | Fields, Array]: ...
    @overload
    def get_windows(self, n: int, length: int, step: int = 1, dtype: DTypeLike = None,
                    shape: ShapeLike = None, timeout: Timeout = None,
                    meta: Literal[False] = False) -> Array: ...
    @overload
    def get_windows(self, n: int, length: int, step: int = 1, dtype: DTypeLike = None,
                    shape: ShapeLike = None, timeout: Timeout = None, *,
                    meta: Literal[True]) -> tuple[Array, Array]: ...
    @overload
    def get_windows(self, n: int, length: int, step: int = 1, dtype: DTypeLike = None,
                    shape: ShapeLike = None, timeout: Timeout = None,
                    meta: Literal[False] = False, *,
                    prioritized: Literal[True]) -> PrioritizedBatch: ...
    @overload
    def get_windows(self, n: int, length: int, step: int = 1, dtype: DTypeLike = None,
                    shape: ShapeLike = None, timeout: Timeout = None, *,
                    meta: Literal[True],
                    prioritized: Literal[True]) -> tuple[PrioritizedBatch, Array]: ...

    @_explains_waits
    def get_windows(self, n: int, length: int, step: int = 1, dtype: DTypeLike = None,
                    shape: ShapeLike = None, timeout: Timeout = None,
                    meta: bool = False, prioritized: bool = False) -> Any:
        """Take up to n windows of one simulation (sim-paired-reservoir, or a
        prioritized segment created with sweep_size and time_steps;
        cistern_get_windows()) as one new array of shape (k, length, *shape):
        window i holds `length` samples of one sim_id at time steps t, t + step,
        ..., each window drawn uniformly among the complete ones held (every
        step of its span held, none but the last marked end_of_episode). dtype
        None: float32, shape None: (). For a segment with a schema, without
        dtype and shape, a dict of arrays, one per field, of shape (k, length,
        *field shape).

        The first window waits as timeout says; the others are taken if they
        are there at once, so k may be short of n. While reception is open two
        windows may share samples; after it closes each window is taken out.
        With meta=True, also returns a (k, length, 4) uint64 array of
        (sample_id, sim_id, time_step, flags); flags & 1 marks the end of an
        episode. ValueError on another policy, for a bad length or step, or
        if a member is not dtype and shape (a longer one stays in the segment).

        A prioritized segment draws each window by the priority of its last
        member. With prioritized=True (prioritized segments only;
        cistern_get_prioritized_windows()) the windows come as
        PrioritizedBatch(samples, ids, weights): samples as above, ids a (k,)
        uint64 array (each window's last member's id, for update_priorities())
        and weights a (k,) float32 array of importance weights in (0, 1].
        """
        np = _need_numpy()
        self._check_read("prioritized window" if prioritized else "window")
        n, length, step = _count("n", n), _count("length", length), _count("step", step)
        if n == 0 or length == 0 or step == 0:
            raise ValueError("get_windows: n, length and step must be positive")
        steps = self._conf().time_steps
        if (length - 1) * step + 1 > steps:
            raise ValueError(f"get_windows: a window of {length} samples {step} steps apart "
                             f"spans more than the segment's time_steps ({steps})")
        sch = self.schema if dtype is None and shape is None else None
        shp: tuple[int, ...]
        if sch is not None:
            dt, shp = np.dtype(np.uint8), (sch.size,)
        else:
            dt, shp = np.dtype("float32" if dtype is None else dtype), _shape_tuple(shape) or ()
        out = np.empty((n, length) + shp, dtype=dt)
        item = dt.itemsize * int(np.prod(shp, dtype=np.int64))
        metas = np.empty((n, length, 4), dtype=np.uint64)
        ids = np.empty(n, dtype=np.uint64) if prioritized else None
        w = np.empty(n, dtype=np.float64) if prioritized else None
        k = self._read(self._h.get_windows, "prioritized window" if prioritized else "window",
                       out, item, n, length, step, _timeout_ms(timeout), metas, ids, w)
        if k < n:
            out = out[:k].copy()
            metas = metas[:k].copy()
        res: Any = out
        if sch is not None:
            flat = sch._views(out.reshape(k * length, sch.size), k * length)
            res = {name: v.reshape((k, length) + v.shape[1:]) for name, v in flat.items()}
        if ids is not None and w is not None:
            res = PrioritizedBatch(res, ids[:k].copy(), w[:k].astype(np.float32))
        return (res, metas) if meta else res

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
