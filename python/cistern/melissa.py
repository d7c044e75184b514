# SPDX-License-Identifier: MIT
"""cistern.melissa: the buffer API of the Melissa online-training framework,
on cistern segments.

Melissa's deep-learning server makes its sample buffer with
``make_buffer(buffer_size, buffer_t, per_server_watermark, pseudo_epochs,
sweep_size, nb_time_steps, comm_size, metric_logger, use_legacy)``; this module
offers the same function and the same ``BufferType``, and the buffer it returns
lives in a named shared-memory segment, so that simulations in other processes
put their samples straight into it::

    from cistern.melissa import BufferType, make_buffer

    # the server (the learner), rank 0 of 1
    buf = make_buffer(10_000, BufferType.Reservoir, per_server_watermark=1_000,
                      name="study", dtype="float32", shape=(1030,),
                      expected_producers=12)
    buf.name                    # 'study.rank0': where simulations put
    batch = buf.get_batch(64)   # (64, 1030) float32, drawn as the policy says
    len(buf)                    # the population now

    # a simulation, in its own process
    seg = cistern.melissa.attach("study", rank=0)   # a cistern.Segment
    seg.put(field, sim_id=3, time_step=t)
    seg.producer_done()

Segments and ranks. A server of ``comm_size`` ranks has one segment per rank,
each of ``buffer_size`` slots and its own watermark (``per_server_watermark``),
named ``segment_name(name, rank)``: ``"<name>.rank<r>"``. Each rank's process
calls ``make_buffer(..., comm_size=N, rank=r)`` (``rank`` defaults to the rank
the MPI launcher or torchrun gives the process, see ``make_buffer``), or one
process makes them all with ``make_buffers()``. A simulation attaches to the
rank it sends to with ``attach(name, rank)``.

Parameters each ``BufferType`` needs (``ValueError`` when one is missing):

    FIFO                 -
    FIRO                 per_server_watermark (< buffer_size); pseudo_epochs
                         (default 1)
    Reservoir            per_server_watermark (<= buffer_size)
    FIFOEvictReservoir   per_server_watermark
    SimPairedReservoir   per_server_watermark, sweep_size, nb_time_steps
    BatchReservoir       per_server_watermark, batch_size (<= the watermark)

A parameter the chosen type does not use is ignored, as Melissa's factory
ignores it. ``use_legacy=True`` asks for Melissa's original in-process queues,
which cistern does not have: it raises ``ValueError``.
"""
from __future__ import annotations

import enum
import math
import os
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

import cistern

__all__ = [
    "Buffer", "BufferType", "MetricLogger", "TensorBoardWriter", "attach", "attach_buffer",
    "make_buffer", "make_buffers", "segment_name",
]


class BufferType(enum.IntEnum):
    """Melissa's buffer types, with Melissa's numbers; each maps to the cistern
    policy of the same behaviour (docs/POLICIES.md)."""

    FIFO = 0
    FIRO = 1
    Reservoir = 2
    FIFOEvictReservoir = 3
    SimPairedReservoir = 4
    BatchReservoir = 5

    @property
    def policy(self) -> str:
        """The cistern policy name of this type."""
        return _POLICY[self]


_POLICY = {
    BufferType.FIFO: "fifo",
    BufferType.FIRO: "firo",
    BufferType.Reservoir: "reservoir",
    BufferType.FIFOEvictReservoir: "fifo-evict-reservoir",
    BufferType.SimPairedReservoir: "sim-paired-reservoir",
    BufferType.BatchReservoir: "batch-reservoir",
}
_TYPE_OF = {p: t for t, p in _POLICY.items()}


class MetricLogger(Protocol):
    """What ``metric_logger`` may be: an object with ``log_scalar(tag, value,
    step)``, as Melissa's loggers have ..."""

    def log_scalar(self, tag: str, value: float, step: int) -> None: ...


class TensorBoardWriter(Protocol):
    """... or with ``add_scalar(tag, value, step)``, as
    ``torch.utils.tensorboard.SummaryWriter`` has."""

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None: ...


AnyLogger = Union[MetricLogger, TensorBoardWriter]
DTypeLike = npt.DTypeLike
Shape = Union[int, Sequence[int], None]

# The seen-count histogram's buckets (cistern_stats_get()), as tag suffixes.
_SEEN_BUCKETS = ("0", "1", "2", "3", "4", "5-8", "9-16", "17+")
# The environment variables launchers set to a process's rank, in the order looked at.
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK")


def segment_name(name: str, rank: int = 0) -> str:
    """The segment of server rank `rank` of the buffer called `name`:
    ``"<name>.rank<rank>"``."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a non-negative int, not {rank!r}")
    return f"{name}.rank{rank}"


def attach(name: str, rank: int = 0) -> cistern.Segment:
    """Attach to the segment of server rank `rank` of buffer `name`: what a
    simulation calls before it puts its samples (``seg.put(array, sim_id=...,
    time_step=...)``, then ``seg.producer_done()``). It attaches as a producer
    (``cistern.attach(..., producer=True)``): a simulation that dies before its
    first put counts as dead before done too."""
    seg: cistern.Segment = cistern.attach(segment_name(name, rank), producer=True)
    return seg


def _positive(what: str, value: object, allow_none: bool = False) -> Optional[int]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 1:
        raise ValueError(f"{what} must be a positive int, not {value!r}")
    return int(value)


def _buffer_type(buffer_t: object) -> BufferType:
    if isinstance(buffer_t, BufferType):
        return buffer_t
    if isinstance(buffer_t, str):
        for t in BufferType:
            if buffer_t in (t.name, t.policy) or buffer_t.lower() == t.name.lower():
                return t
    elif isinstance(buffer_t, int) and not isinstance(buffer_t, bool):
        try:
            return BufferType(buffer_t)
        except ValueError:
            pass
    raise ValueError(f"buffer_t must be a BufferType (or its number or name), not {buffer_t!r}")


def _rank_from_env() -> Optional[Tuple[int, str]]:
    """The rank the launcher gave this process and the variable it is in, from
    the first of _RANK_VARS set; None if none is. ValueError, naming the
    variable, when the first one set is not a whole number."""
    for var in _RANK_VARS:
        v = os.environ.get(var)
        if v is None:
            continue
        if not v.strip().isdigit():
            raise ValueError(f"{var}={v!r} is not a rank (a whole number from 0): fix {var} "
                             "or give this server's rank (rank=)")
        return int(v), var
    return None


def _log_function(logger: object) -> Callable[[str, float, int], Any]:
    for method in ("log_scalar", "add_scalar"):
        fn = getattr(logger, method, None)
        if callable(fn):
            return fn  # type: ignore[no-any-return]
    raise TypeError("metric_logger needs a log_scalar(tag, value, step) method (Melissa's "
                    "loggers) or add_scalar(tag, value, step) (a tensorboard SummaryWriter); "
                    f"{type(logger).__name__} has neither")


def _shape(shape: Shape) -> Optional[Tuple[int, ...]]:
    if shape is None:
        return None
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


class Buffer:
    """A Melissa buffer: one server rank's cistern segment, seen as the queue a
    Melissa server puts samples into and gets training samples from.

    Made by make_buffer(), make_buffers() or attach_buffer(). Samples are numpy
    arrays of `dtype` and `shape` (shape None: flat vectors of dtype).

    - ``put(sample, sim_id=0, time_step=0)``: copy one sample in (waits for room
      as the policy says); simulations usually put straight into the segment
      instead (``attach()``).
    - ``get()``: one read as the policy hands it out: a sample (FIFO, FIRO,
      Reservoir, FIFOEvictReservoir), a pair ``(2, *shape)`` (SimPairedReservoir)
      or a batch ``(batch_size, *shape)`` (BatchReservoir). ``get_batch(n)``:
      ``(k, *shape)``, k = n but at the end. Both raise ``cistern.EndOfData``
      once reception is closed and the policy has nothing left; iteration
      (``for x in buf``) just stops there.
    - ``len(buf)``: the population (samples held now).
    - ``close_reception()`` (also ``signal_reception_over()``): no more puts;
      readers drain, then end of data. Or give ``expected_producers`` and let
      each simulation call ``producer_done()``.
    - ``dataset(batch_size)``: a torch IterableDataset over this segment for a
      DataLoader, with workers (see cistern.torch).

    Threads: each thread that uses the buffer gets its own attachment, made on
    its first call (a cistern handle serves one thread at a time), so a thread
    that receives and puts and one that trains and gets can share the buffer.
    Processes: the buffer pickles as its name and read settings, and attaches
    again where it is unpickled, or in a forked child on its first call.
    """

    def __init__(self, seg: cistern.Segment, buffer_t: BufferType, prefix: str, rank: int,
                 comm_size: int, dtype: DTypeLike, shape: Shape,
                 metric_logger: Optional[AnyLogger] = None, log_every: int = 100,
                 owner: bool = False, skip_misfits: bool = False) -> None:
        self.name: str = seg.name
        """The segment's name, where simulations put (segment_name(prefix, rank))."""
        self.prefix = prefix
        self.rank = rank
        self.comm_size = comm_size
        self.buffer_t = buffer_t
        self.dtype: np.dtype[Any] = np.dtype(dtype)
        self.shape: Optional[Tuple[int, ...]] = _shape(shape)
        self.owner = owner
        self.metric_logger = metric_logger
        self._log: Optional[Callable[[str, float, int], Any]] = (
            None if metric_logger is None else _log_function(metric_logger))
        self.log_every = _positive("log_every", log_every) or 100
        self.metric_prefix = "buffer/" if comm_size == 1 else f"buffer/rank{rank}/"
        self.skip_misfits = skip_misfits
        """Whether reads go past a sample of another size than dtype and shape
        say (read and dropped, see cistern.Segment.skip_misfits) instead of
        raising ValueError with the sample left in the segment."""
        self._reads = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._handles: List[cistern.Segment] = []
        self._pid = os.getpid()
        self._owner_pid = self._pid  # a forked child's copy does not own the segment
        self._closed = False
        self._cfg = seg.config()
        self._adopt(seg)

    # -- attachments ------------------------------------------------------

    def _adopt(self, seg: cistern.Segment) -> None:
        self._local.seg = seg
        with self._lock:
            self._handles.append(seg)

    def segment(self) -> cistern.Segment:
        """This thread's attachment to the segment (made on first use)."""
        if self._pid != os.getpid():
            # A forked child: the parent's handles are the parent's.
            self._pid = os.getpid()
            self._local = threading.local()
            self._handles = []
            self._lock = threading.Lock()
        seg: Optional[cistern.Segment] = getattr(self._local, "seg", None)
        if seg is None:
            if self._closed:
                raise ValueError(f"buffer {self.name} is closed")
            seg = cistern.attach(self.name)
            self._adopt(seg)
        return seg

    # -- properties -------------------------------------------------------

    @property
    def policy(self) -> str:
        """The cistern policy (buffer_t.policy)."""
        return self.buffer_t.policy

    @property
    def buffer_size(self) -> int:
        """The capacity in samples (slots)."""
        return int(self._cfg["slots"])

    @property
    def watermark(self) -> int:
        """The watermark of this rank's segment (0 for FIFO)."""
        return int(self._cfg["watermark"])

    @property
    def batch_size(self) -> int:
        """BatchReservoir's batch size (0 for the other types)."""
        return int(self._cfg["batch_size"])

    @property
    def sample_bytes(self) -> int:
        """The largest sample, in bytes (the slot size)."""
        return int(self._cfg["slot_size"])

    def config(self) -> Dict[str, Any]:
        """The segment's parameters as created (a dict)."""
        return dict(self._cfg)

    def stats(self) -> Dict[str, Any]:
        """The segment's statistics (a dict: population, puts, gets, evictions,
        seen_hist, ...), read without disturbing it."""
        return dict(self.segment().stats())

    def __len__(self) -> int:
        return int(self.stats()["population"])

    # -- writing ----------------------------------------------------------

    def _values(self, samples: object, what: str) -> npt.NDArray[Any]:
        """samples as a C-contiguous array of this buffer's dtype, converted by
        the rule of docs/SCHEMA.md (cistern's one rule): whole numbers in range
        into integers, any number into floats rounded (not a finite one beyond
        the range), bools only into bool. ValueError otherwise."""
        return np.ascontiguousarray(cistern.schema._convert(samples, self.dtype, what,
                                                     f"this buffer holds {self.dtype}"))

    def _check_items(self, items: int, what: str) -> None:
        if self.shape is not None and items != math.prod(self.shape):
            raise ValueError(f"{what} of {items} items where this buffer holds shape "
                             f"{self.shape}: nothing was put")

    def _payload(self, sample: object) -> Any:
        """One sample as put() writes it, checked: raw bytes must be one
        sample's bytes; anything else is converted to the buffer's dtype and
        must have its shape's number of items."""
        if isinstance(sample, (bytes, bytearray, memoryview)):
            n = memoryview(sample).nbytes
            item = self.dtype.itemsize
            if self.shape is not None and n != item * math.prod(self.shape):
                raise ValueError(f"raw bytes of {n} bytes where this buffer's samples are "
                                 f"{item * math.prod(self.shape)} ({self.dtype}, shape "
                                 f"{self.shape}): nothing was put")
            if n % item:
                raise ValueError(f"raw bytes of {n} bytes, not a whole number of {self.dtype} "
                                 f"items of {item} bytes: nothing was put")
            return sample
        arr = self._values(sample, "put")
        self._check_items(arr.size, "a sample")
        return arr

    def put(self, sample: object, sim_id: int = 0, time_step: int = 0,
            timeout: Optional[float] = None) -> int:
        """Copy one sample in (a numpy array, anything numpy turns into one of
        this buffer's dtype, or raw bytes); waits for room as the policy says.
        Returns its sample id. Raises BrokenPipeError once reception is closed,
        TimeoutError, ValueError for a sample that does not fit."""
        return int(self.segment().put(self._payload(sample), sim_id, time_step, timeout))

    def put_batch(self, samples: npt.ArrayLike, sim_id: Union[int, Sequence[int]] = 0,
                  time_step: Union[int, Sequence[int]] = 0,
                  timeout: Optional[float] = None) -> npt.NDArray[np.uint64]:
        """Put the rows of `samples` in order, as put() would one by one, in one
        C call while there is room. Returns their sample ids."""
        arr = self._values(samples, "put_batch")
        if arr.ndim == 0 or arr.shape[0] == 0:
            raise ValueError("put_batch: samples must be an array of one or more rows")
        self._check_items(arr[0].size, "put_batch: a row")
        ids: npt.NDArray[np.uint64] = self.segment().put_batch(arr, sim_id, time_step, timeout)
        return ids

    def close_reception(self) -> None:
        """Close reception: puts fail from now on; readers drain, then get end of data."""
        self.segment().close_reception()

    signal_reception_over = close_reception

    def producer_done(self) -> int:
        """Declare one of expected_producers done; returns how many are still expected."""
        return int(self.segment().producer_done())

    # -- reading ----------------------------------------------------------

    def _read_shape(self) -> Tuple[int, ...]:
        if self.shape is None:
            n = self.sample_bytes // self.dtype.itemsize
            return (n,)
        return self.shape

    def get(self, timeout: Optional[float] = None) -> npt.NDArray[Any]:
        """One read, as the policy hands it out (a private numpy copy): a sample
        of `shape`; for SimPairedReservoir a pair (2, *shape), [x_t, x_t+1]; for
        BatchReservoir a batch (batch_size, *shape). Raises cistern.EndOfData
        at end of data, TimeoutError."""
        seg = self.segment()
        seg.skip_misfits = self.skip_misfits
        out: npt.NDArray[Any]
        if self.buffer_t is BufferType.SimPairedReservoir:
            out = seg.get_pair(self.dtype, self._read_shape(), timeout)
            self._count_read(2)
        elif self.buffer_t is BufferType.BatchReservoir:
            out = seg.get_batch(None, self.dtype, self._read_shape(), timeout)
            self._count_read(len(out))
        else:
            out = seg.get_array(self.dtype, self.shape, timeout)
            self._count_read(1)
        return out

    def get_batch(self, n: Optional[int] = None, timeout: Optional[float] = None) -> npt.NDArray[Any]:
        """n reads gathered into one new array (k, *shape), k < n only at the end
        of data: FIFO and FIRO n successive reads (waiting for each), Reservoir and
        FIFOEvictReservoir n distinct samples drawn together, BatchReservoir one
        batch (n None or its batch_size), SimPairedReservoir n pairs
        (k, 2, *shape). Raises cistern.EndOfData when none is left."""
        seg = self.segment()
        seg.skip_misfits = self.skip_misfits
        shape = self._read_shape()
        out: npt.NDArray[Any]
        if self.buffer_t is BufferType.SimPairedReservoir:
            count = _positive("n", n) or 1
            pairs: List[npt.NDArray[Any]] = []
            for _ in range(count):
                try:
                    pairs.append(seg.get_pair(self.dtype, shape, timeout))
                except cistern.EndOfData:
                    if not pairs:
                        raise
                    break
            out = np.stack(pairs)
            self._count_read(2 * len(out))
        else:
            if n is None and self.buffer_t is not BufferType.BatchReservoir:
                raise ValueError("get_batch: give n")
            out = seg.get_batch(n, self.dtype, shape, timeout)
            self._count_read(len(out))
        return out

    def __iter__(self) -> Iterator[npt.NDArray[Any]]:
        """Yield get() until end of data."""
        while True:
            try:
                yield self.get()
            except cistern.EndOfData:
                return

    # -- metrics ----------------------------------------------------------

    def _count_read(self, samples: int) -> None:
        """Count `samples` read (a pair is 2, a batch of k is k) and log the
        metrics each time the count passes a multiple of log_every. Called once
        the samples are taken: a logger that raises is warned of
        (RuntimeWarning), never lets the caller lose them."""
        before = self._reads
        self._reads += samples
        if self._log is None or self._reads // self.log_every == before // self.log_every:
            return
        try:
            self.log_metrics(self._reads)
        except Exception as e:  # the samples read are the caller's all the same
            warnings.warn(f"metric_logger raised {type(e).__name__}: {e} (the samples read "
                          "are returned all the same)", RuntimeWarning, stacklevel=3)

    def metrics(self) -> Dict[str, float]:
        """The metrics this buffer logs, by tag (without metric_prefix):
        population, puts, gets, evictions, evicted_unseen, redeliveries, and
        the histogram of seen counts of the samples that left, one tag per
        bucket: seen_0, seen_1, seen_2, seen_3, seen_4, seen_5-8, seen_9-16,
        seen_17+."""
        st = self.stats()
        m: Dict[str, float] = {k: float(st[k]) for k in (
            "population", "puts", "gets", "evictions", "evicted_unseen", "redeliveries")}
        for label, v in zip(_SEEN_BUCKETS, st["seen_hist"]):
            m["seen_" + label] = float(v)
        return m

    def log_metrics(self, step: Optional[int] = None) -> Dict[str, float]:
        """Send metrics() to the metric_logger now, each as
        log_scalar(metric_prefix + tag, value, step) (or add_scalar), with step
        the number of samples read through this object unless given; returns
        them.
        The buffer calls it by itself each time the samples read through it
        pass a multiple of log_every (a pair counts 2, a batch of k counts k)."""
        m = self.metrics()
        if self._log is not None:
            s = self._reads if step is None else step
            for tag, v in m.items():
                self._log(self.metric_prefix + tag, v, s)
        return m

    # -- torch ------------------------------------------------------------

    def dataset(self, batch_size: Optional[int] = None, timeout: Optional[float] = None,
                with_meta: bool = False,
                transform: Optional[Callable[[Any], Any]] = None) -> Any:
        """A cistern.torch.CisternDataset over this rank's segment, reading this
        buffer's dtype and shape, for a DataLoader with workers: with batch_size
        it yields whole batches (use DataLoader(ds, batch_size=None)), and under
        FIFO a worker killed in the middle of one loses none of its samples (see
        cistern.torch). BatchReservoir: batch_size defaults to the segment's."""
        from cistern.torch import CisternDataset
        if batch_size is None and self.buffer_t is BufferType.BatchReservoir:
            batch_size = self.batch_size
        return CisternDataset(self.name, self.dtype, self._read_shape(), batch_size=batch_size,
                              timeout=timeout, with_meta=with_meta, transform=transform,
                              skip_misfits=self.skip_misfits)

    # -- lifetime ---------------------------------------------------------

    def close(self, unlink: Optional[bool] = None) -> None:
        """Detach every attachment this process made and, if `unlink` (default:
        in the process where make_buffer created the segment), remove the
        segment's name."""
        self._closed = True
        with self._lock:
            handles, self._handles = self._handles, []
        self._local = threading.local()
        for seg in handles:
            seg.detach()
        if (self.owner and self._owner_pid == os.getpid()) if unlink is None else unlink:
            cistern.unlink(self.name, missing_ok=True)

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> Dict[str, Any]:
        return dict(name=self.name, prefix=self.prefix, rank=self.rank,
                    comm_size=self.comm_size, buffer_t=int(self.buffer_t),
                    dtype=self.dtype.str, shape=self.shape, log_every=self.log_every,
                    cfg=self._cfg, skip_misfits=self.skip_misfits)

    def __setstate__(self, st: Dict[str, Any]) -> None:
        self.name = st["name"]
        self.prefix = st["prefix"]
        self.rank = st["rank"]
        self.comm_size = st["comm_size"]
        self.buffer_t = BufferType(st["buffer_t"])
        self.dtype = np.dtype(st["dtype"])
        self.shape = st["shape"]
        self.owner = False
        self.metric_logger = None
        self._log = None
        self.log_every = st["log_every"]
        self.metric_prefix = "buffer/" if self.comm_size == 1 else f"buffer/rank{self.rank}/"
        self.skip_misfits = st.get("skip_misfits", False)
        self._reads = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._handles = []
        self._pid = os.getpid()
        self._owner_pid = -1
        self._closed = False
        self._cfg = st["cfg"]

    def __repr__(self) -> str:
        return (f"<cistern.melissa.Buffer {self.name!r} {self.buffer_t.name} "
                f"rank {self.rank}/{self.comm_size}>")


def _check(buffer_size: int, t: BufferType, per_server_watermark: Optional[int],
           pseudo_epochs: Optional[int], sweep_size: Optional[int], nb_time_steps: Optional[int],
           batch_size: Optional[int]) -> Dict[str, Any]:
    """The cistern.create() parameters for type t, or ValueError naming what is missing."""
    wm = _positive("per_server_watermark", per_server_watermark, allow_none=True)
    kw: Dict[str, int] = {}
    if t is BufferType.FIFO:
        return kw
    if wm is None:
        raise ValueError(f"BufferType.{t.name} needs per_server_watermark")
    if t is BufferType.FIRO:
        if wm >= buffer_size:
            raise ValueError(f"per_server_watermark ({wm}) must be below buffer_size "
                             f"({buffer_size}) for FIRO")
        kw["pseudo_epochs"] = _positive("pseudo_epochs", pseudo_epochs, allow_none=True) or 1
    elif wm > buffer_size:
        raise ValueError(f"per_server_watermark ({wm}) must not exceed buffer_size ({buffer_size})")
    kw["watermark"] = wm
    if t is BufferType.SimPairedReservoir:
        if sweep_size is None or nb_time_steps is None:
            raise ValueError("BufferType.SimPairedReservoir needs sweep_size and nb_time_steps")
        kw["sweep_size"] = _positive("sweep_size", sweep_size) or 0
        kw["time_steps"] = _positive("nb_time_steps", nb_time_steps) or 0
        if kw["time_steps"] < 2:
            raise ValueError("nb_time_steps must be at least 2 for SimPairedReservoir")
    if t is BufferType.BatchReservoir:
        if batch_size is None:
            raise ValueError("BufferType.BatchReservoir needs batch_size (a keyword of "
                             "cistern.melissa.make_buffer)")
        bs = _positive("batch_size", batch_size) or 0
        if bs > wm:
            raise ValueError(f"batch_size ({bs}) must not exceed per_server_watermark ({wm})")
        kw["batch_size"] = bs
    return kw


def make_buffer(buffer_size: int, buffer_t: Union[BufferType, int, str] = BufferType.FIFO,
                per_server_watermark: Optional[int] = None, pseudo_epochs: Optional[int] = None,
                sweep_size: Optional[int] = None, nb_time_steps: Optional[int] = None,
                comm_size: int = 1, metric_logger: Optional[AnyLogger] = None,
                use_legacy: bool = False, *, name: Optional[str] = None,
                rank: Optional[int] = None, dtype: DTypeLike = "float32", shape: Shape = None,
                sample_bytes: int = 0, batch_size: Optional[int] = None,
                expected_producers: int = 0, seed: int = 0, lossy: bool = False,
                mode: int = 0o600, log_every: int = 100, skip_misfits: bool = False,
                cold_slots: int = 0,
                cold_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
                max_times_sampled: int = 0) -> Buffer:
    """Create this server rank's buffer: a cistern segment of `buffer_size`
    samples under the policy of `buffer_t`, and return it as a Buffer.

    Melissa's parameters, in Melissa's order:
      buffer_size           slots of this rank's segment
      buffer_t              a BufferType (or its number, or its name)
      per_server_watermark  this rank's watermark (FIRO: reads wait while the
                            population is at most this; reservoirs: at least)
      pseudo_epochs         FIRO: reads of each sample (default 1)
      sweep_size, nb_time_steps
                            SimPairedReservoir: bounds of sim_id and time_step
      comm_size             the server's ranks: one segment each
      metric_logger         an object with log_scalar(tag, value, step) (or
                            add_scalar(tag, value, step), a tensorboard
                            SummaryWriter); every `log_every` samples read
                            (a pair counts 2, a batch of k counts k) it
                            receives the buffer's metrics (Buffer.metrics());
                            one that raises is warned of (RuntimeWarning)
                            and the samples read are returned all the same
      use_legacy            must be False (ValueError otherwise: no legacy
                            queues here)
    cistern's, keyword-only:
      name                  the buffer's name (default "melissa-<pid>"); the
                            segment is segment_name(name, rank)
      rank                  this server's rank, < comm_size; default: 0 when
                            comm_size is 1, else taken from the first set of
                            OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK,
                            SLURM_PROCID, RANK; ValueError when none is set,
                            or the one set is not a whole number or not below
                            comm_size (the message names the variable)
      dtype, shape          how samples read (shape None: flat vectors)
      sample_bytes          the slot size when shape is None (0: the library's)
      batch_size            BatchReservoir's batch (required there)
      expected_producers    simulations that will call producer_done(); the
                            last one closes reception (0: close it yourself)
      seed, lossy, mode     as cistern.create() (lossy: FIFOEvictReservoir)
      max_times_sampled     the reservoir types: a sample leaves after that many
                            reads (0, the default: it stays until evicted), as
                            cistern.create()
      log_every             samples read between two metric_logger calls
      skip_misfits          reads go past a sample of another size than
                            dtype and shape say (put by a simulation through
                            a raw attach()), read and dropped, instead of
                            raising ValueError with it left in the segment
      cold_slots, cold_dir  FIFO, Reservoir, BatchReservoir, FIRO and
                            FIFOEvictReservoir: a cold tier of
                            cold_slots more samples in a file in cold_dir,
                            on a local disk, as cistern.create()

    Raises ValueError when a parameter the type needs is missing or out of
    range, FileExistsError when the segment exists already.
    """
    if use_legacy:
        raise ValueError("use_legacy=True asks for Melissa's original in-process queues; "
                         "cistern.melissa has only shared-memory buffers (use_legacy=False)")
    size = _positive("buffer_size", buffer_size) or 0
    t = _buffer_type(buffer_t)
    ranks = _positive("comm_size", comm_size) or 1
    if rank is None and ranks > 1:
        found = _rank_from_env()
        if found is None:
            raise ValueError(f"comm_size={ranks}: give this server's rank (rank=), or run "
                             f"under a launcher that sets one of {', '.join(_RANK_VARS)}")
        rank, var = found
        if rank >= ranks:
            raise ValueError(f"rank {rank}, from {var}={os.environ[var]!r}, is not below "
                             f"comm_size={ranks}")
    elif rank is None:
        rank = 0
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < ranks:
        raise ValueError(f"rank must be an int in [0, comm_size={ranks}), not {rank!r}")
    kw = _check(size, t, per_server_watermark, pseudo_epochs, sweep_size, nb_time_steps,
                batch_size)
    if metric_logger is not None:
        _log_function(metric_logger)
    _positive("log_every", log_every)
    dt = np.dtype(dtype)
    shp = _shape(shape)
    slot = int(np.prod(shp)) * dt.itemsize if shp is not None else int(sample_bytes)
    prefix = name if name is not None else f"melissa-{os.getpid()}"
    seg = cistern.create(segment_name(prefix, rank), policy=t.policy, slots=size, slot_size=slot,
                         expected_producers=expected_producers, seed=seed, lossy=lossy,
                         mode=mode, cold_slots=cold_slots, cold_dir=cold_dir,
                         max_times_sampled=max_times_sampled, **kw)
    try:
        return Buffer(seg, t, prefix, rank, ranks, dt, shp, metric_logger, log_every, owner=True,
                      skip_misfits=skip_misfits)
    except BaseException:
        seg.detach()
        seg.unlink()
        raise


def make_buffers(buffer_size: int, buffer_t: Union[BufferType, int, str] = BufferType.FIFO,
                 per_server_watermark: Optional[int] = None, pseudo_epochs: Optional[int] = None,
                 sweep_size: Optional[int] = None, nb_time_steps: Optional[int] = None,
                 comm_size: int = 1, metric_logger: Optional[AnyLogger] = None,
                 use_legacy: bool = False, **kw: Any) -> List[Buffer]:
    """make_buffer() for every rank 0 .. comm_size-1, in this process: one
    segment per rank, each with per_server_watermark. For a server that is one
    process, or for tests. On an error, the buffers already made are removed."""
    if kw.get("rank") is not None:
        raise ValueError("make_buffers makes every rank: do not give rank")
    kw.pop("rank", None)
    if "name" not in kw or kw["name"] is None:
        kw["name"] = f"melissa-{os.getpid()}"
    out: List[Buffer] = []
    try:
        for r in range(_positive("comm_size", comm_size) or 1):
            out.append(make_buffer(buffer_size, buffer_t, per_server_watermark, pseudo_epochs,
                                   sweep_size, nb_time_steps, comm_size, metric_logger,
                                   use_legacy, rank=r, **kw))
    except BaseException:
        for b in out:
            b.close()
        raise
    return out


def attach_buffer(name: str, rank: int = 0, comm_size: int = 1, dtype: DTypeLike = "float32",
                  shape: Shape = None, metric_logger: Optional[AnyLogger] = None,
                  log_every: int = 100, skip_misfits: bool = False) -> Buffer:
    """A Buffer over the existing segment of rank `rank` of buffer `name`, made
    by another process: its type comes from the segment's policy. Closing it
    detaches and leaves the segment in place."""
    seg = cistern.attach(segment_name(name, rank))
    try:
        t = _TYPE_OF[seg.policy]
        return Buffer(seg, t, name, rank, comm_size, dtype, shape, metric_logger, log_every,
                      skip_misfits=skip_misfits)
    except BaseException:
        seg.detach()
        raise
