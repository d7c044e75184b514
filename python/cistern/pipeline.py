# SPDX-License-Identifier: MIT
"""cistern.pipeline: run a dataset or a generator in worker processes that put
samples, or whole collated batches, into a FIFO segment; iterate the batches.

    from cistern.pipeline import Pipeline
    with Pipeline(dataset, batch_size=256, num_workers=2, shuffle=True) as pipe:
        for epoch in range(3):
            for batch in pipe:          # numpy arrays (or dicts, tuples of them)
                ...

The source is one of:
- a map-style dataset (`__getitem__` and `__len__`: a list, an array, a torch
  Dataset): the consumer cuts each epoch's indices (the sampler's, shuffled, or
  0..len-1) into batches, hands each batch of indices to one worker, and the
  worker fetches the samples, collates them and puts the batch;
- an iterable (`__iter__` without `__getitem__`, e.g. a torch IterableDataset)
  or a callable that returns an iterator (a generator function): each worker
  iterates its own copy, splitting the stream by worker_info() if it wants to,
  and batches what it gets.

How it works (docs/PIPELINE.md has the whole design): one FIFO segment of
max_queue_size slots, each holding one batch, written in place by the workers
(pickle protocol 5: the arrays go straight into the slot, the pickle only
describes them) and copied out once by the consumer. The consumer keeps, for
each worker, the batches (task ids) it handed to it and not yet received; a
worker seen dead has those handed again to the others and to a replacement, and
a batch that arrives twice (its first worker had put it just before dying) is
dropped the second time, so each index is delivered exactly once per epoch.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import io
import itertools
import math
import multiprocessing
import os
import pickle
import random
import signal
import struct
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

import cistern

__all__ = ["Pipeline", "WorkerError", "WorkerDied", "WorkerInfo", "worker_info",
           "default_collate", "PipelineStats", "WorkerState", "shm_check"]

# Record kinds, in the low bits of a record's time_step (the worker's id above them).
_BATCH, _ERROR, _END = 0, 1, 2
_KIND_BITS = 2
# The head of every record: where the pickle's description starts, how many
# out-of-band buffers it has, its length, and a magic number.
_HEAD = struct.Struct("<QQQQ")
_MAGIC = 0x63697374_70697065
_ALIGN = 64
# How long the consumer waits for a record before it looks at the workers.
_POLL_S = 0.05
# How long a worker waits for room or for a task before it looks at its parent.
_PARENT_S = 0.5
# How many times one batch may be handed out again after its worker died.
_MAX_REISSUE = 3


class WorkerError(Exception):
    """The traceback of an exception raised in a worker, as text: the
    exception re-raised in the consumer has this as its __cause__."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


class WorkerDied(RuntimeError):
    """A worker ended without being asked to, and what it had cannot be done
    again: an iterable's stream, or a batch whose workers kept dying."""


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """What a worker knows of itself: worker_info() in a worker, None elsewhere."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker: WorkerInfo | None = None


def worker_info() -> WorkerInfo | None:
    """This worker's WorkerInfo, or None outside a pipeline's worker. An
    iterable or generator splits its stream by it (items i with
    i % num_workers == id, say), as under torch's get_worker_info()."""
    return _worker


@dataclasses.dataclass(frozen=True)
class WorkerState:
    """One worker as the consumer sees it."""

    id: int
    pid: int | None
    #: "starting", "working", "idle", "waiting for room", "done", "dead", "stopped"
    state: str
    #: batches handed to it and not yet received
    outstanding: int
    restarts: int


@dataclasses.dataclass(frozen=True)
class PipelineStats:
    """What a Pipeline does, from the consumer's side: see Pipeline.stats()."""

    name: str | None
    epoch: int
    batches: int
    batches_total: int | None
    batches_per_s: float
    queue_fill: int
    queue_room: int
    #: batches handed out again after their worker died, and their copies
    #: dropped (the dead worker had put them after all)
    redelivered: int
    duplicates_dropped: int
    #: workers started again in place of dead ones, since the pipeline was made
    restarts: int
    workers: tuple[WorkerState, ...]


# --- /dev/shm room ---------------------------------------------------------

def shm_check(slots: int, slot_size: int, path: str = "/dev/shm") -> None:
    """Raise OSError(ENOSPC) if a queue of `slots` batches of `slot_size`
    bytes does not fit in what `path` has left, naming the size needed, the
    space left and Docker's --shm-size (cistern.shm_room_problem())."""
    problem = cistern.shm_room_problem(slots, slot_size, path)
    if problem is not None:
        raise OSError(errno.ENOSPC, problem.replace("ask for fewer or smaller slots",
                                                    "make max_queue_size or the batches "
                                                    "smaller"))


# --- records: a batch written in place into a slot ----------------------------

def _tensor_from_numpy(a: NDArray[Any]) -> Any:
    import torch
    return torch.from_numpy(a)


class _Pickler(pickle.Pickler):
    """Pickle protocol 5 with torch tensors sent as their numpy arrays, so
    that their data goes out of band (into the slot) like numpy's."""

    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Tensor and obj.device.type == "cpu" \
                and not obj.requires_grad:
            try:
                a = obj.contiguous().numpy()
            except (TypeError, RuntimeError):  # bfloat16 and the like: pickled whole
                return NotImplemented
            return _tensor_from_numpy, (a,)
        return NotImplemented


def _address(a: NDArray[Any]) -> int:
    return int(a.__array_interface__["data"][0])


class _Slot:
    """Space in a reserved slot, handed out from the front, 64-byte aligned."""

    def __init__(self, arr: NDArray[Any]) -> None:
        self.arr = arr
        self.base = _address(arr)
        self.size = arr.nbytes
        self.pos = _HEAD.size

    def take(self, n: int) -> int | None:
        at = -(-self.pos // _ALIGN) * _ALIGN
        if at + n > self.size:
            return None
        self.pos = at + n
        return at

    def alloc(self, shape: tuple[int, ...], dtype: Any) -> NDArray[Any]:
        dt = np.dtype(dtype)
        n = dt.itemsize * math.prod(shape)
        at = self.take(n)
        if at is None or dt.hasobject:
            return np.empty(shape, dt)
        return self.arr[at:at + n].view(dt).reshape(shape)


class _TooBig(ValueError):
    pass


def _encode(obj: Any, slot: _Slot) -> int:
    """Write obj into the slot (arrays already in it stay where they are);
    returns the record's length."""
    bufs: list[pickle.PickleBuffer] = []
    f = io.BytesIO()
    _Pickler(f, protocol=5, buffer_callback=bufs.append).dump(obj)
    meta = f.getbuffer()
    where = np.empty((len(bufs), 2), np.uint64)
    for i, pb in enumerate(bufs):
        raw = np.frombuffer(pb.raw(), np.uint8)
        a = _address(raw) - slot.base if raw.nbytes else 0
        if raw.nbytes and not 0 <= a <= slot.size - raw.nbytes:
            at = slot.take(raw.nbytes)
            if at is None:
                raise _TooBig(slot.pos + raw.nbytes)
            slot.arr[at:at + raw.nbytes] = raw
            a = at
        where[i] = (a, raw.nbytes)
    at = slot.take(where.nbytes + len(meta))
    if at is None:
        raise _TooBig(slot.pos + where.nbytes + len(meta))
    slot.arr[at:at + where.nbytes] = where.view(np.uint8).reshape(-1)
    slot.arr[at + where.nbytes:slot.pos] = np.frombuffer(meta, np.uint8)
    slot.arr[:_HEAD.size] = np.frombuffer(_HEAD.pack(at, len(bufs), len(meta), _MAGIC),
                                          np.uint8)
    return slot.pos


def _decode(buf: NDArray[Any], n: int) -> Any:
    at, nbuf, mlen, magic = _HEAD.unpack_from(buf.data, 0)
    if magic != _MAGIC or at + 16 * nbuf + mlen > n:
        raise ValueError("a record in the pipeline's segment is not one a worker wrote")
    where = buf[at:at + 16 * nbuf].view(np.uint64).reshape(-1, 2)
    views = [buf[o:o + k] for o, k in where.tolist()]
    meta = buf[at + 16 * nbuf:at + 16 * nbuf + mlen]
    return pickle.loads(meta.data, buffers=views)


# --- collation ---------------------------------------------------------------

def default_collate(samples: Sequence[Any], alloc: Callable[..., NDArray[Any]] | None = None
                    ) -> Any:
    """Stack a list of samples into a batch, field by field: numpy arrays
    into one array along a new first axis, numbers into an array (int64,
    float64, bool), dicts by key, tuples and lists by position (named
    tuples stay named), torch tensors with torch.stack, anything else (str,
    bytes) into a list. `alloc(shape, dtype)`, when given, makes the arrays
    stacked into (the pipeline gives one that places them in the slot)."""
    first = samples[0]
    if isinstance(first, np.ndarray) and not first.dtype.hasobject:
        shape = (len(samples),) + first.shape
        out = alloc(shape, first.dtype) if alloc else np.empty(shape, first.dtype)
        try:
            same = len({s.shape for s in samples}) == len({s.dtype for s in samples}) == 1
        except AttributeError:  # not all arrays
            same = False
        if first.ndim and same:
            # One C loop over the samples (several times faster than a row at a time).
            np.concatenate(samples, out=out.reshape((-1,) + first.shape[1:]))
        else:
            for i, s in enumerate(samples):
                out[i] = s
        return out
    if isinstance(first, (bool, np.bool_)):
        return np.array(samples, dtype=np.bool_)
    if isinstance(first, (int, np.integer)):
        return np.array(samples, dtype=np.int64)
    if isinstance(first, (float, np.floating)):
        return np.array(samples, dtype=np.float64)
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in samples], alloc) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(f), alloc) for f in zip(*samples)))
    if isinstance(first, (tuple, list)):
        cols = [default_collate(list(f), alloc) for f in zip(*samples)]
        return tuple(cols) if isinstance(first, tuple) else cols
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(first, torch.Tensor):
        return torch.stack(list(samples))
    return list(samples)


# --- the worker --------------------------------------------------------------

@dataclasses.dataclass
class _Job:
    source: Any
    kind: str  # "map", "iter" or "call"
    batch_size: int | None
    batched: bool  # collate (batch_size or a batch_sampler), or samples one by one
    drop_last: bool
    collate_fn: Callable[[list[Any]], Any] | None
    worker_init_fn: Callable[[int], None] | None
    seed: int


def _name_thread(title: str) -> None:
    """Show the worker as `title` (ps, top, cistern inspect's COMM column)."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(15, title.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _parent_gone(ppid: int) -> bool:
    return os.getppid() != ppid


def _put(seg: cistern.Segment, ppid: int, tid: int, kind: int, wid: int,
         obj: Any = None, samples: list[Any] | None = None,
         collate: Callable[..., Any] | None = None) -> None:
    """One record: obj, or samples collated straight into the slot."""
    ts = kind | (wid << _KIND_BITS)
    while True:
        try:
            r = seg.reserve(None, None, sim_id=tid, time_step=ts, timeout=_PARENT_S)
            break
        except TimeoutError:
            if _parent_gone(ppid):
                cistern.unlink(seg.name, missing_ok=True)  # the consumer died
                raise SystemExit(0) from None
    try:
        slot = _Slot(r.array)
        if samples is not None:
            obj = default_collate(samples, slot.alloc) if collate is None else collate(samples)
        n = _encode(obj, slot)
    except _TooBig as e:
        r.abort()
        raise ValueError(f"a batch needs {int(e.args[0])} bytes, more than a slot's "
                         f"{slot.size}: give the pipeline a larger slot_size") from None
    except BaseException:
        r.abort()
        raise
    r.commit(n)


def _error_record(e: BaseException) -> Any:
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        pickle.loads(pickle.dumps(e))
        return e, text
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}"), text


def _batches(it: Iterator[Any], size: int | None, drop_last: bool) -> Iterator[list[Any]]:
    if size is None:
        for x in it:
            yield [x]
        return
    while True:
        chunk = list(itertools.islice(it, size))
        if not chunk or (drop_last and len(chunk) < size):
            return
        yield chunk


def _worker_main(name: str, wid: int, nworkers: int, job: _Job, conn: Any, ppid: int) -> None:
    global _worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to handle
    _name_thread(f"cistern-w{wid}")
    seed = job.seed + wid
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
        torch.set_num_threads(1)
    _worker = WorkerInfo(wid, nworkers, seed, job.source)
    if torch is not None and job.kind != "map":
        # So that a torch IterableDataset that splits its stream by
        # torch.utils.data.get_worker_info() finds this worker there.
        try:
            from torch.utils.data._utils import worker as tw
            tw._worker_info = tw.WorkerInfo(id=wid, num_workers=nworkers, seed=seed,
                                            dataset=job.source)
        except Exception:
            pass
    seg = cistern.attach(name, producer=True)
    collate = job.collate_fn
    try:
        if job.worker_init_fn is not None:
            job.worker_init_fn(wid)
    except Exception as e:
        _put(seg, ppid, 0, _ERROR, wid, _error_record(e))
        return
    getitems = getattr(job.source, "__getitems__", None)
    while True:
        if not conn.poll(_PARENT_S):
            if _parent_gone(ppid):
                cistern.unlink(name, missing_ok=True)
                return
            continue
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        tid, what = msg
        try:
            if job.kind == "map":
                if not job.batched:
                    _put(seg, ppid, tid, _BATCH, wid, job.source[what[0]])
                    continue
                samples = getitems(what) if getitems else [job.source[i] for i in what]
                _put(seg, ppid, tid, _BATCH, wid, samples=samples, collate=collate)
                continue
            it = iter(job.source() if job.kind == "call" else job.source)
            for chunk in _batches(it, job.batch_size, job.drop_last):
                if job.batch_size is None:
                    _put(seg, ppid, tid, _BATCH, wid, chunk[0])
                else:
                    _put(seg, ppid, tid, _BATCH, wid, samples=chunk, collate=collate)
            _put(seg, ppid, tid, _END, wid)
        except SystemExit:
            return
        except Exception as e:
            _put(seg, ppid, tid, _ERROR, wid, _error_record(e))


# --- the consumer ------------------------------------------------------------

class _Worker:
    def __init__(self, wid: int) -> None:
        self.id = wid
        self.proc: Any = None
        self.conn: Any = None
        self.tasks: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.restarts = 0
        self.ended = False     # an iterable worker that put its end record
        self.stopped = False   # asked to stop
        self.broken = False    # its pipe is closed: it is dying
        self.received = 0      # its records read, to tell its batches in hand from queued


_live: weakref.WeakSet[Pipeline] = weakref.WeakSet()
_counter = itertools.count()


def _close_all() -> None:
    for p in list(_live):
        p.close()


class Pipeline:
    """Batches from `source` made by `num_workers` processes; see the module doc.

    batch_size: samples per batch (None: each sample by itself, uncollated).
    shuffle, sampler, batch_sampler, drop_last: which indices of a map-style
      source make each epoch's batches, as torch's DataLoader takes them
      (sampler: an iterable of indices, read again each epoch; batch_sampler:
      an iterable of lists of indices). seed: the shuffle's and the workers'
      seeds (None: from the clock); epoch e shuffles with seed + e.
    ordered: deliver the batches in the sampler's order (later ones that are
      ready wait in the consumer); False: as they come.
    collate_fn: makes a batch of a list of samples, in the worker (default:
      default_collate(), which stacks straight into the slot).
    worker_init_fn(worker_id): called in each worker when it starts.
    persistent_workers: keep the workers and the segment from one epoch to
      the next (else each epoch starts them and removes them at its end).
    max_queue_size: the segment's slots, each one batch: workers wait while
      it is full (default: 2 per worker). prefetch: batches a worker may hold
      beyond the queue's share (default 1).
    slot_size: a slot's bytes (None: 1.5 times a batch made in this process
      from the first sample, plus 4 KiB; an iterable is started once here
      for it).
    start_method: "fork", "spawn" or "forkserver" (None: fork on Linux).
    timeout: seconds to wait for one batch (None: forever); TimeoutError then.
    convert: applied to each batch in the consumer (cistern.torch makes tensors).
    progress: write a progress line to stderr (a file object: there).
    name: the segment's name (default "pipeline-<pid>-<n>").
    """

    def __init__(self, source: Any, batch_size: int | None = 1, *, num_workers: int = 2,
                 shuffle: bool = False, sampler: Iterable[int] | None = None,
                 batch_sampler: Iterable[Sequence[int]] | None = None, drop_last: bool = False,
                 ordered: bool = False, collate_fn: Callable[[list[Any]], Any] | None = None,
                 worker_init_fn: Callable[[int], None] | None = None,
                 persistent_workers: bool = False, max_queue_size: int | None = None,
                 prefetch: int = 1, slot_size: int | None = None,
                 start_method: str | None = None, timeout: float | None = None,
                 seed: int | None = None, convert: Callable[[Any], Any] | None = None,
                 progress: bool | Any = False, name: str | None = None) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive int, not {num_workers!r}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, not {batch_size!r}")
        if batch_sampler is not None and (sampler is not None or shuffle or drop_last):
            raise ValueError("batch_sampler excludes sampler, shuffle and drop_last")
        if sampler is not None and shuffle:
            raise ValueError("sampler excludes shuffle (the sampler orders the indices)")
        if max_queue_size is not None and max_queue_size < 1:
            raise ValueError(f"max_queue_size must be at least 1, not {max_queue_size!r}")
        if prefetch < 0:
            raise ValueError(f"prefetch must be 0 or more, not {prefetch!r}")
        if callable(source) and not hasattr(source, "__getitem__") \
                and not hasattr(source, "__iter__"):
            kind = "call"
        elif hasattr(source, "__getitem__") and hasattr(source, "__len__") \
                and not _is_torch_iterable(source):
            kind = "map"
        elif hasattr(source, "__iter__"):
            kind = "iter"
        else:
            raise TypeError(f"a pipeline's source is a map-style dataset, an iterable or a "
                            f"callable returning an iterator, not {type(source).__name__}")
        if kind != "map" and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("shuffle, sampler and batch_sampler need a map-style source "
                             "(__getitem__ and __len__)")
        self.source = source
        self.kind = kind
        self.batch_size = None if batch_sampler is not None else batch_size
        self.shuffle, self.sampler, self.batch_sampler = shuffle, sampler, batch_sampler
        self.drop_last, self.ordered = drop_last, ordered
        self.collate_fn, self.worker_init_fn = collate_fn, worker_init_fn
        self.num_workers = num_workers
        self.persistent_workers = persistent_workers
        self.max_queue_size = max_queue_size or 2 * num_workers
        self.prefetch = prefetch
        self.slot_size = slot_size
        self.start_method = start_method or ("fork" if sys.platform == "linux" else "spawn")
        self.timeout = timeout
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
        self.convert = convert
        self.progress = progress
        self.name = name or f"pipeline-{os.getpid()}-{next(_counter)}"
        self._seg: cistern.Segment | None = None
        self._workers: list[_Worker] = []
        self._ctx: Any = multiprocessing.get_context(self.start_method)
        self._epoch = 0
        self._tid = itertools.count(1)
        self._delivered = 0
        self._total: int | None = None
        self._redelivered = 0
        self._dups = 0
        self._restarts = 0
        self._times: collections.deque[float] = collections.deque(maxlen=64)
        self._drawn = 0.0
        self._line = 0
        self._closed = False
        self._iterating = False
        _live.add(self)

    # -- what the user calls --

    def __len__(self) -> int:
        """Batches in an epoch (map-style sources only)."""
        if self.kind != "map":
            raise TypeError("an iterable source's pipeline has no length")
        if self.batch_sampler is not None:
            return len(self.batch_sampler)  # type: ignore[arg-type]
        n = len(self.sampler) if self.sampler is not None else len(self.source)  # type: ignore
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise ValueError("the pipeline is closed")
        if self._iterating:
            raise RuntimeError("a pipeline runs one epoch at a time: finish (or drop) the "
                               "iteration before starting another")
        return self._epoch_iter()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Stop every worker and remove the segment (also done at exit, and when
        an epoch ends without persistent_workers)."""
        self._stop_workers()
        if self._seg is not None:
            try:
                self._seg.detach()
            except Exception:
                pass
            self._seg = None
            cistern.unlink(self.name, missing_ok=True)
        self._closed = True

    def stats(self) -> PipelineStats:
        """What the pipeline does: batches delivered this epoch (of how many),
        batches per second over the last second or so, the queue's fill and
        room (the segment's population and slots), batches delivered twice
        (a dead worker's, dropped) or again, and each worker's state.
        `cistern inspect <name>` shows the same segment from outside."""
        fill, waiting, puts = 0, set(), {}
        if self._seg is not None:
            try:
                fill = len(self._seg)
                procs = self._seg.procs()
                waiting = {p.pid for p in procs if p.waiting == 2 and p.alive}
                puts = {p.pid: p.puts for p in procs}
            except Exception:
                pass
        ws = []
        for w in self._workers:
            pid = w.proc.pid if w.proc is not None else None
            if w.proc is None:
                st = "stopped"
            elif w.proc.exitcode is not None:
                st = "stopped" if w.stopped else "dead"
            elif pid not in puts:
                st = "starting"
            elif w.ended:
                st = "done"
            elif pid in waiting:
                st = "waiting for room"
            elif w.tasks and (self.kind != "map"  # a stream, until its end
                              or len(w.tasks) > puts[pid] - w.received):  # not all queued
                st = "working"
            else:
                st = "idle"
            ws.append(WorkerState(w.id, pid, st, len(w.tasks), w.restarts))
        t = self._times
        rate = (len(t) - 1) / (t[-1] - t[0]) if len(t) > 1 and t[-1] > t[0] else 0.0
        return PipelineStats(self.name if self._seg is not None else None, self._epoch,
                             self._delivered, self._total, rate, fill,
                             self.max_queue_size, self._redelivered, self._dups, self._restarts,
                             tuple(ws))

    # -- the segment and the workers --

    def _probe_slot_size(self) -> int:
        if self.slot_size is not None:
            return self.slot_size
        if self.kind == "map":
            # Sample 0 stands for the others (the sampler is left alone: it
            # may be random, or costly to go through).
            if len(self.source) == 0:
                return 4096
            sample = self.source[0]
            n = self.batch_size or 1
            if self.batch_sampler is not None:
                n = max((len(b) for b in itertools.islice(iter(self.batch_sampler), 1)),
                        default=1)
        else:
            # This process stands for worker 0 while it takes the first sample.
            global _worker
            _worker = WorkerInfo(0, self.num_workers, self.seed, self.source)
            try:
                it = iter(self.source() if self.kind == "call" else self.source)
                sample = next(it, None)
            finally:
                _worker = None
            if sample is None:
                return 4096
            n = self.batch_size or 1
        if self.batch_size is None and self.batch_sampler is None:
            obj = sample
        else:
            obj = (self.collate_fn or default_collate)([sample] * n)
        bufs: list[pickle.PickleBuffer] = []
        f = io.BytesIO()
        _Pickler(f, protocol=5, buffer_callback=bufs.append).dump(obj)
        size = len(f.getbuffer()) + sum(b.raw().nbytes + _ALIGN for b in bufs) + 16 * len(bufs)
        return int(size * 1.5) + 4096

    def _start(self) -> None:
        if self._seg is None:
            slot = self._probe_slot_size()
            self.slot_size = slot
            shm_check(self.max_queue_size, slot)
            self._seg = cistern.create(self.name, "fifo", slots=self.max_queue_size,
                                       slot_size=slot, max_procs=max(64, 4 * self.num_workers))
        if not self._workers:
            self._workers = [_Worker(i) for i in range(self.num_workers)]
        for w in self._workers:
            if w.proc is None or w.proc.exitcode is not None:
                self._spawn(w)

    def _spawn(self, w: _Worker) -> None:
        batched = self.batch_size is not None or self.batch_sampler is not None
        job = _Job(self.source, self.kind, self.batch_size, batched, self.drop_last,
                   self.collate_fn, self.worker_init_fn, self.seed)
        recv, send = self._ctx.Pipe(duplex=False)
        p = self._ctx.Process(target=_worker_main, daemon=True,
                              args=(self.name, w.id, self.num_workers, job, recv, os.getpid()),
                              name=f"cistern-pipeline-{w.id}")
        p.start()
        recv.close()
        w.proc, w.conn, w.ended, w.stopped, w.broken = p, send, False, False, False
        w.received = 0

    def _stop_workers(self, at_once: bool = False) -> None:
        """Ask the workers to end (a None task), or end them at once (SIGTERM:
        after an error, a break or Ctrl-C, when they may be waiting for room
        or in the middle of a batch nobody wants any more); a worker still
        running after a second is killed."""
        for w in self._workers:
            w.stopped = True
            if w.proc is not None and at_once:
                w.proc.terminate()
            elif w.conn is not None:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
        deadline = time.monotonic() + 1.0
        for w in self._workers:
            if w.proc is None:
                continue
            w.proc.join(max(0.0, deadline - time.monotonic()))
            if w.proc.exitcode is None:
                w.proc.kill()  # stuck in the user's code, or waiting for room
                w.proc.join()
            if w.conn is not None:
                w.conn.close()
            w.proc.close()
            w.proc, w.conn = None, None
            w.tasks.clear()
        self._workers = []

    # -- an epoch --

    def _epoch_batches(self, epoch: int) -> Iterable[list[int]]:
        if self.batch_sampler is not None:
            return ([int(i) for i in b] for b in self.batch_sampler)
        if self.sampler is not None:
            order: Iterable[int] = self.sampler
        elif self.shuffle:
            rng = np.random.default_rng(self.seed + epoch)
            order = rng.permutation(len(self.source)).tolist()
        else:
            order = range(len(self.source))
        if self.batch_size is None:
            return ([int(i)] for i in order)
        return (list(map(int, b)) for b in _batches(iter(order), self.batch_size,
                                                   self.drop_last))

    def _epoch_iter(self) -> Iterator[Any]:
        self._iterating = True
        ok = False
        try:
            self._start()
            if self.kind == "map":
                yield from self._map_epoch()
            else:
                yield from self._iter_epoch()
            ok = True
        finally:
            self._iterating = False
            if self.progress:
                self._draw(final=True)
            self._epoch += 1
            self._times.clear()
            if not ok or not self.persistent_workers:
                # Broken off (an error, Ctrl-C, a break) or done: stop them all.
                self._end_epoch(at_once=not ok)

    def _end_epoch(self, at_once: bool = False) -> None:
        self._stop_workers(at_once)
        if self._seg is not None:
            self._seg.detach()
            self._seg = None
            cistern.unlink(self.name, missing_ok=True)

    def _read(self, buf: NDArray[Any], metas: NDArray[Any]) -> int | None:
        assert self._seg is not None
        try:
            return self._seg.get_into(buf, _POLL_S, metas)
        except TimeoutError:
            return None

    def _raise_error(self, buf: NDArray[Any], n: int, wid: int) -> None:
        exc, text = _decode(buf, n)
        exc.__cause__ = WorkerError(f"in worker {wid}:\n{text}")
        raise exc

    def _map_epoch(self) -> Iterator[Any]:
        pending: collections.deque[tuple[int, list[int]]] = collections.deque()
        batches = iter(self._epoch_batches(self._epoch))
        order: collections.deque[int] = collections.deque()  # tids in the sampler's order
        tasks: dict[int, list[int]] = {}      # tid -> indices, until delivered
        reissued: dict[int, int] = {}
        ready: dict[int, Any] = {}            # ordered mode: out-of-order batches
        self._total = len(self) if self.sampler is None or hasattr(self.sampler, "__len__") \
            else None
        self._delivered = 0
        per_worker = -(-self.max_queue_size // self.num_workers) + self.prefetch
        exhausted = False
        buf = np.empty(0, np.uint8)
        metas = np.empty(3, np.uint64)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        last_check = time.monotonic()
        while True:
            # Hand out tasks: the reissued first, then new ones, one at a time to
            # each worker with room in turn, so that consecutive batches are
            # made side by side (in the sampler's order, they come in sooner).
            while not exhausted or pending:
                room = [w for w in self._workers if len(w.tasks) < per_worker
                        and not w.broken and w.proc is not None and w.proc.exitcode is None]
                if not room:
                    break
                for w in room:
                    if pending:
                        tid, idx = pending.popleft()
                    elif not exhausted:
                        nxt = next(batches, None)
                        if nxt is None:
                            exhausted = True
                            break
                        tid, idx = next(self._tid), nxt
                        tasks[tid] = idx
                        if self.ordered:
                            order.append(tid)
                    else:
                        break
                    w.tasks[tid] = None  # handed out again if the worker dies
                    try:
                        w.conn.send((tid, idx))
                    except OSError:  # it died: _check_workers() will see it
                        w.broken = True
            if exhausted and not tasks and not ready:
                return
            if self.ordered and order and order[0] in ready:
                tid = order.popleft()
                yield self._deliver(ready.pop(tid))
                deadline = None if self.timeout is None else time.monotonic() + self.timeout
                continue
            if buf.nbytes < (self.slot_size or 0):
                buf = np.empty(self.slot_size or 0, np.uint8)
            n = self._read(buf, metas)
            now = time.monotonic()
            if n is None or now - last_check > 0.2:
                last_check = now
                self._check_workers(pending, tasks, reissued)
                if n is None:
                    if deadline is not None and now > deadline:
                        raise TimeoutError(f"no batch came from the workers in {self.timeout} s")
                    if self.progress:
                        self._draw()
                    continue
            assert n is not None
            tid, kind, wid = int(metas[1]), int(metas[2]) & 3, int(metas[2]) >> _KIND_BITS
            if wid < len(self._workers):
                self._workers[wid].received += 1
            if kind == _ERROR:
                self._raise_error(buf, n, wid)
            for w in self._workers:
                w.tasks.pop(tid, None)
            if tid not in tasks:
                self._dups += 1  # a dead worker's batch, done again: the first one counted
                continue
            del tasks[tid]
            obj = _decode(buf, n)
            buf = np.empty(0, np.uint8)  # the batch keeps it
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            if self.ordered:
                ready[tid] = obj
                continue
            yield self._deliver(obj)

    def _iter_epoch(self) -> Iterator[Any]:
        tid = next(self._tid)
        for w in self._workers:
            w.tasks[tid] = None
            w.ended = False
            try:
                w.conn.send((tid, None))
            except OSError:
                raise WorkerDied(f"worker {w.id} died before its stream began") from None
        self._total = None
        self._delivered = 0
        buf = np.empty(0, np.uint8)
        metas = np.empty(3, np.uint64)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while not all(w.ended for w in self._workers):
            if buf.nbytes < (self.slot_size or 0):
                buf = np.empty(self.slot_size or 0, np.uint8)
            n = self._read(buf, metas)
            if n is None:
                for w in self._workers:
                    if not w.ended and w.proc.exitcode is not None:
                        raise WorkerDied(f"worker {w.id} (pid {w.proc.pid}) died "
                                         f"({_how(w.proc.exitcode)}); an iterable's stream "
                                         f"cannot be taken up again by another worker")
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"no batch came from the workers in {self.timeout} s")
                if self.progress:
                    self._draw()
                continue
            rtid, kind, wid = int(metas[1]), int(metas[2]) & 3, int(metas[2]) >> _KIND_BITS
            if wid < len(self._workers):
                self._workers[wid].received += 1
            if kind == _ERROR:
                self._raise_error(buf, n, wid)
            if rtid != tid:
                self._dups += 1  # left over from an epoch broken off
                continue
            if kind == _END:
                self._workers[wid].ended = True
                self._workers[wid].tasks.pop(tid, None)
                continue
            obj = _decode(buf, n)
            buf = np.empty(0, np.uint8)
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            yield self._deliver(obj)

    def _deliver(self, obj: Any) -> Any:
        self._delivered += 1
        self._times.append(time.monotonic())
        if self.progress:
            self._draw()
        return self.convert(obj) if self.convert is not None else obj

    def _check_workers(self, pending: collections.deque[tuple[int, list[int]]],
                       tasks: dict[int, list[int]], reissued: dict[int, int]) -> None:
        """A worker that died has its batches handed out again, and a replacement."""
        for w in self._workers:
            if w.proc is None or w.proc.exitcode is None or w.stopped:
                continue
            lost = [t for t in w.tasks if t in tasks]
            for t in lost:
                reissued[t] = reissued.get(t, 0) + 1
                if reissued[t] > _MAX_REISSUE:
                    idx = tasks[t]
                    shown = ", ".join(map(str, idx[:8])) + (", ..." if len(idx) > 8 else "")
                    raise WorkerDied(f"the workers making the batch of indices [{shown}] "
                                     f"died {_MAX_REISSUE + 1} times (the last, worker {w.id}: "
                                     f"{_how(w.proc.exitcode)}); giving up")
            pending.extendleft(reversed([(t, tasks[t]) for t in lost]))
            self._redelivered += len(lost)
            w.tasks.clear()
            w.conn.close()
            w.proc.close()
            w.restarts += 1
            self._restarts += 1
            self._spawn(w)

    # -- progress --

    def _draw(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._drawn < 0.1:
            return
        self._drawn = now
        out: Any = self.progress if hasattr(self.progress, "write") else sys.stderr
        st = self.stats()
        alive = sum(1 for w in st.workers if w.state not in ("dead", "stopped"))
        tot = st.batches_total
        bar = ""
        if tot:
            k = int(20 * min(st.batches, tot) / tot)
            bar = "[" + "#" * k + "." * (20 - k) + f"] {st.batches}/{tot}"
        else:
            bar = f"{st.batches}"
        line = (f"epoch {st.epoch}: {bar} batches, {st.batches_per_s:.1f} batch/s, "
                f"queue {st.queue_fill}/{st.queue_room}, workers {alive}/{len(st.workers)}")
        pad = " " * max(0, self._line - len(line))  # over the end of a longer line
        self._line = 0 if final else len(line)
        out.write("\r" + line + pad + ("\n" if final else ""))
        out.flush()


def _how(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _is_torch_iterable(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.utils.data.IterableDataset)


import atexit  # noqa: E402

atexit.register(_close_all)
