# SPDX-License-Identifier: MIT
"""cistern.torch: a PyTorch IterableDataset reading a cistern segment, and a
DataLoader whose workers pass batches through one (DataLoader below, on
cistern.pipeline; docs/PIPELINE.md).

    from cistern.torch import CisternDataset
    ds = CisternDataset("heat", dtype="float32", shape=(1030,))
    loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2)
    for batch in loader:           # ends at the segment's end of data
        ...

A segment with a schema needs no dtype or shape: each item is then a dict of
tensors, one per field (batched along a first axis with batch_size, or by the
DataLoader's collation, which stacks dicts of tensors field by field):

    ds = CisternDataset("rl", batch_size=32)     # obs:float32[84,84];action:int64[];...
    for batch in torch.utils.data.DataLoader(ds, batch_size=None):
        q = model(batch["obs"])                  # (32, 84, 84)

Each iteration (each DataLoader worker, or the main process with num_workers=0)
attaches to the segment on its own, by name, when it starts, and detaches when it
ends; the dataset object itself holds no handle, so it pickles and forks freely
(DataLoader workers made by fork or spawn, persistent or not). Under FIFO each
sample goes to exactly one worker; under the random policies each worker draws
on its own.

Workers that die (batch_size=B, FIFO): a batch is read by acquiring its
samples one by one (Segment.acquire_many()), holding them in the segment until
the whole batch is copied out, and releasing (consuming) them just before it
is yielded. A worker killed in the middle of a batch therefore loses nothing:
cistern hands the samples it held out again, to the next reader. (A batch
already yielded is the DataLoader's: when a worker dies, the DataLoader stops
with an error and drops the batches waiting in its queues.) A worker that
waits for samples in vain for a moment while a producer waits for room yields
the batch it has begun, short: a FIFO fills its slots in ring order, so the
producer may be waiting for a slot the worker holds (a sample handed out again
after a crash sits in an old slot). The other policies gather each batch as
Segment.get_batch() does, each read released as it is copied: a FIRO sample
must be read again, by any worker, until its pseudo_epochs are done, and a
reservoir sample pinned by one worker cannot be taken by another once
reception is closed, so samples held while waiting for more would leave the
others nothing to read at the end. A reservoir worker killed while reception
is open loses nothing anyway (a read removes nothing, and cistern drops its
pins and its unfinished reads). Without batch_size, under any policy, each
sample is consumed as it is read.

Under torch.distributed (DistributedDataParallel), each rank reads its own
segment: put "{rank}" in the name and every rank fills in its own rank, from
torch.distributed.get_rank() (or from rank= given explicitly):

    torch.distributed.init_process_group("gloo", ...)
    ds = CisternDataset("heat.{rank}", dtype="float32", shape=(1030,), batch_size=32)
    model = torch.nn.parallel.DistributedDataParallel(net)
    with model.join():              # ranks may get different numbers of batches
        for x in torch.utils.data.DataLoader(ds, batch_size=None):
            ...                      # forward, backward (gradients averaged), step

The name is resolved once, when the dataset is made (ds.name is "heat.0" on
rank 0), so DataLoader workers, which are not part of the process group,
read their own rank's segment too. No sample is split between ranks by
cistern: a rank sees exactly what was put into its segment (`cistern serve`
routes simulation s to rank s mod R, for one). A segment's end of data ends
that rank's iteration only; since ranks rarely get the same number of
batches, train under DistributedDataParallel.join() (as above), which lets
the ranks that finished early shadow the others' gradient all-reduces.

What is copied:
- default (copy=True): each sample is copied once, from the segment into a new
  numpy array that the tensor then shares (torch.from_numpy): one copy, and the
  tensor is yours to keep and write.
- batch_size=B: the dataset yields whole batches, gathered in C straight into one
  (B, *shape) array that the tensor shares: one copy per sample, no collate step.
  Use DataLoader(ds, batch_size=None). The last batch may be short.
- copy=False: zero-copy. The tensor is torch.from_numpy() on the read-only view of
  the sample in the segment (for a schema, one tensor per field, each a view of
  its field); the sample stays acquired until the next item is asked for, and
  is released then. So the tensor is valid only until you advance the
  iterator and must not be written to. Only for loops that use each item before
  taking the next; not with a DataLoader that collates batches (it keeps several
  items at once), not with workers (the tensor would have to be pickled anyway).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.utils.data

import cistern

# How long a reader holding part of a batch waits for more before it looks
# whether a producer waits for room (see CisternDataset._acquire()).
_STALL_S = 0.25


#: The field of a segment name that each rank fills with its own rank.
RANK_FIELD = "{rank}"


def _resolve_rank(rank: int | None) -> int:
    if rank is not None:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ValueError(f"rank must be a non-negative int, not {rank!r}")
        return rank
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        r: int = dist.get_rank()
        return r
    raise ValueError(f"the segment name holds {RANK_FIELD} but no rank is known: call "
                     "torch.distributed.init_process_group() first, or pass rank=")


def rank_segment_name(template: str, rank: int | None = None) -> str:
    """The segment `template` names for rank `rank`: every "{rank}" in it
    replaced by the rank (`rank` None: torch.distributed.get_rank() of this
    process, which must have joined a process group). A template without
    "{rank}" is returned as it is, whatever the rank: one segment shared by
    every rank.

        rank_segment_name("heat.{rank}", 1)  ->  "heat.1"
    """
    if RANK_FIELD not in template:
        return template
    return template.replace(RANK_FIELD, str(_resolve_rank(rank)))


# torch is taken as untyped by the type check (see pyproject.toml), hence Any.
class CisternDataset(torch.utils.data.IterableDataset):  # type: ignore[misc]
    """Yield tensors from segment `name` until end of data.

    dtype, shape: how to read a payload (shape None: a flat vector of dtype).
      Both None (the default): by the segment's schema if it has one (each item
      a dict of tensors, by field), else as a flat vector of float32.
    batch_size: yield gathered batches of this many samples instead of samples.
    copy: see the module doc; ignored with batch_size (always one copy).
    timeout: seconds to wait for each item (None: forever); a timeout raises
      TimeoutError out of the iteration.
    with_meta: yield (tensor, meta) where meta is a LongTensor (sample_id, sim_id,
      time_step), or (B, 3) for batches.
    transform: a callable applied to each yielded tensor (or to (tensor, meta)).
    any_owner: attach even to a segment owned by another user (see cistern.attach).
    rank: the rank whose segment to read when `name` holds "{rank}" (see
      rank_segment_name()); None: torch.distributed's rank of this process.
    skip_misfits: go past a sample of another size than dtype and shape (or the
      schema) say, reading and dropping it (Segment.skip_misfits), instead of
      raising ValueError out of the iteration with the sample left in the
      segment. The zero-copy reads (copy=False) and a shape with -1 always
      raise.

    Attributes: name (the segment's name, "{rank}" filled in), template (the
    name as given), rank (the rank filled in, or None without "{rank}").
    """

    def __init__(self, name: str, dtype: cistern.DTypeLike = None,
                 shape: cistern.ShapeLike = None, batch_size: int | None = None,
                 copy: bool = True, timeout: cistern.Timeout = None, with_meta: bool = False,
                 transform: Callable[[Any], Any] | None = None,
                 any_owner: bool = False, rank: int | None = None,
                 skip_misfits: bool = False) -> None:
        super().__init__()
        #: The name as given, "{rank}" and all.
        self.template = name
        #: The rank whose segment this reads (None when the name has no "{rank}").
        self.rank: int | None = None
        if RANK_FIELD in name:
            self.rank = _resolve_rank(rank)
        elif rank is not None:
            raise ValueError(f"rank={rank!r} given but the segment name {name!r} has no "
                             f"{RANK_FIELD} to put it in")
        #: The segment read: the template with this rank filled in.
        self.name = rank_segment_name(name, self.rank) if self.rank is not None else name
        #: None (with shape None): read by the segment's schema, or as float32 without one.
        self.dtype = np.dtype(dtype) if dtype is not None else None
        self.shape = cistern._common._shape_tuple(shape)
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError("batch_size must be a positive int or None")
        if batch_size is not None and self.shape is None and self.dtype is not None:
            raise ValueError("batch_size needs the sample shape")
        self.batch_size = batch_size
        self.copy = copy
        self.timeout = timeout
        self.with_meta = with_meta
        self.transform = transform
        self.any_owner = any_owner
        self.skip_misfits = skip_misfits

    def _out(self, tensor: Any, meta: Any) -> Any:
        item = (tensor, meta) if self.with_meta else tensor
        return self.transform(item) if self.transform is not None else item

    def __iter__(self) -> Iterator[Any]:
        """Attach to the segment by name and yield items until end of data
        (see the class doc); detach when the iteration ends."""
        seg = cistern.attach(self.name, any_owner=self.any_owner)
        seg.skip_misfits = self.skip_misfits
        try:
            if self.dtype is None and self.shape is None and seg.schema is not None:
                if self.batch_size is not None:
                    yield from self._field_batches(seg)
                elif self.copy:
                    yield from self._field_copies(seg)
                else:
                    yield from self._field_views(seg)
                return
            if self.batch_size is not None and self.shape is None:
                raise ValueError(f"batch_size needs the sample shape (segment {self.name!r} "
                                 "has no schema)")
            if self.batch_size is not None:
                yield from self._batches(seg)
            elif self.copy:
                yield from self._copies(seg)
            else:
                yield from self._views(seg)
        finally:
            seg.detach()

    @property
    def _np_dtype(self) -> Any:
        return self.dtype if self.dtype is not None else np.dtype(np.float32)

    def _field_batches(self, seg: cistern.Segment) -> Iterator[Any]:
        sch = seg.schema
        assert sch is not None
        if seg.policy == "fifo":
            # Held until copied out, as _batches() does, then viewed by field.
            for rows, meta in self._held_batches(seg, np.dtype(np.uint8), (sch.size,)):
                views = sch._views(rows, len(rows))
                yield self._out({k: torch.from_numpy(v) for k, v in views.items()}, meta)
            return
        while True:
            try:
                fields, metas = seg.get_batch(self.batch_size, meta=True, timeout=self.timeout)
            except cistern.EndOfData:
                return
            assert isinstance(fields, dict)
            meta = torch.from_numpy(metas.astype(np.int64)) if self.with_meta else None
            # Each tensor views its field in the batch's one private array: no copy.
            yield self._out({k: torch.from_numpy(v) for k, v in fields.items()}, meta)

    def _field_copies(self, seg: cistern.Segment) -> Iterator[Any]:
        while True:
            try:
                fields, m = seg.get(self.timeout, meta=True)
            except cistern.EndOfData:
                return
            assert isinstance(fields, dict)
            meta = torch.tensor(m, dtype=torch.int64) if self.with_meta else None
            yield self._out({k: torch.from_numpy(v) for k, v in fields.items()}, meta)

    def _field_views(self, seg: cistern.Segment) -> Iterator[Any]:
        while True:
            try:
                s = seg.acquire(self.timeout)
            except cistern.EndOfData:
                return
            try:
                with warnings.catch_warnings():
                    # Read-only views, as in _views().
                    warnings.simplefilter("ignore", UserWarning)
                    t = {k: torch.from_numpy(v) for k, v in s.fields.items()}
                meta = torch.tensor(s.meta, dtype=torch.int64) if self.with_meta else None
                yield self._out(t, meta)
            finally:
                s.release()

    def _gathered(self, seg: cistern.Segment) -> Iterator[Any]:
        """Batches of reads each consumed as it is copied (all but FIFO, see the module doc)."""
        while True:
            try:
                arr, metas = seg.get_batch(self.batch_size, self._np_dtype, self.shape,
                                           self.timeout, meta=True)
            except cistern.EndOfData:
                return
            meta = torch.from_numpy(metas.astype(np.int64)) if metas is not None else None
            yield self._out(torch.from_numpy(arr), meta)

    def _batches(self, seg: cistern.Segment) -> Iterator[Any]:
        if seg.policy != "fifo":
            yield from self._gathered(seg)
            return
        for arr, meta in self._held_batches(seg, self._np_dtype, tuple(self.shape or ())):
            yield self._out(torch.from_numpy(arr), meta)

    def _held_batches(self, seg: cistern.Segment, dtype: Any,
                      shape: tuple[int, ...]) -> Iterator[tuple[Any, Any]]:
        """FIFO batches as (rows of `shape` and `dtype`, meta tensor or None), each
        sample held in the segment until the whole batch is copied out."""
        while True:
            parts = self._acquire(seg)
            if not parts:
                return
            try:
                k = sum(len(g) for g in parts)
                arr = np.empty((k,) + shape, dtype=dtype)
                metas = np.empty((k, 3), dtype=np.uint64) if self.with_meta else None
                at = 0
                for g in parts:
                    g.copy_into(arr[at:at + len(g)],
                                None if metas is None else metas[at:at + len(g)])
                    at += len(g)
            except BaseException:
                for g in parts:
                    g.unacquire()
                raise
            # Consumed only now that the whole batch is out: a crash before hands
            # every sample of it out again.
            for g in parts:
                g.release()
            meta = torch.from_numpy(metas.astype(np.int64)) if metas is not None else None
            yield arr, meta

    def _acquire(self, seg: cistern.Segment) -> list[cistern.Group[Any]]:
        """The Groups of the next batch (up to batch_size samples, acquired and
        held); [] at end of data. Waits in slices: when one brings nothing while
        a producer waits for room, the slot it waits for may be one of those
        held (a FIFO fills its slots in ring order), so the batch goes out short.
        On an error, what was acquired is handed back."""
        parts: list[cistern.Group[Any]] = []
        got = 0
        bs = self.batch_size if self.batch_size is not None else 1
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        try:
            while got < bs:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    if got:
                        break
                    raise TimeoutError(f"no sample in {self.timeout} s")
                try:
                    g = seg.acquire_many(bs - got,
                                         _STALL_S if left is None else min(_STALL_S, left),
                                         self._np_dtype, self.shape)
                except cistern.EndOfData:
                    break
                except TimeoutError:
                    if parts and seg._h.waiting_for_room():
                        break
                    continue
                parts.append(g)
                got += len(g)
        except BaseException:
            for g in parts:
                g.unacquire()
            raise
        return parts

    def _copies(self, seg: cistern.Segment) -> Iterator[Any]:
        while True:
            try:
                arr, m = seg.get_array(self._np_dtype, self.shape, self.timeout, meta=True)
            except cistern.EndOfData:
                return
            meta = torch.tensor(m, dtype=torch.int64) if self.with_meta else None
            yield self._out(torch.from_numpy(arr), meta)

    def _views(self, seg: cistern.Segment) -> Iterator[Any]:
        while True:
            try:
                s = seg.acquire(self.timeout, self._np_dtype, self.shape)
            except cistern.EndOfData:
                return
            try:
                with warnings.catch_warnings():
                    # The view is read-only and torch has no read-only tensors: the
                    # contract (documented above) is not to write to it.
                    warnings.simplefilter("ignore", UserWarning)
                    t = torch.from_numpy(s.array)
                meta = torch.tensor(s.meta, dtype=torch.int64) if self.with_meta else None
                yield self._out(t, meta)
            finally:
                s.release()


# --- prioritized sampling ----------------------------------------------------

def get_prioritized(seg: cistern.Segment, n: int | None = None, dtype: Any = None,
                    shape: Any = None, timeout: cistern.Timeout = None,
                    device: Any = None) -> cistern.PrioritizedBatch:
    """Segment.get_prioritized() as tensors: samples a (k, *shape) tensor (a
    dict of them by field for a segment with a schema), ids a (k,) int64 tensor
    holding the bits of the uint64 ids (Segment.update_priorities() takes it
    back as it is), weights a (k,) float32 tensor. The samples and weights
    move to `device` if given; the ids stay on the CPU, where
    update_priorities() reads them.

        x, ids, w = cistern.torch.get_prioritized(seg, 64, "float32", (1030,))
        loss = (w * ((net(x) - y) ** 2).mean(dim=1)).mean()
        seg.update_priorities(ids, td_error.abs().detach().cpu())
    """
    b = seg.get_prioritized(n, dtype, shape, timeout)
    samples = _to_torch(b.samples, False)
    weights = torch.from_numpy(b.weights)
    if device is not None:
        samples = ({k: v.to(device) for k, v in samples.items()}
                   if isinstance(samples, dict) else samples.to(device))
        weights = weights.to(device)
    return cistern.PrioritizedBatch(samples, torch.from_numpy(b.ids.view(np.int64)), weights)


# --- a DataLoader on cistern.pipeline ------------------------------------------

def _to_torch(obj: Any, pin: bool) -> Any:
    """numpy arrays (at any depth of dicts, tuples and lists) as tensors
    sharing their memory, pinned if asked."""
    if isinstance(obj, np.ndarray):
        t = torch.from_numpy(obj) if obj.dtype != np.object_ else obj
        return t.pin_memory() if pin and isinstance(t, torch.Tensor) else t
    if isinstance(obj, torch.Tensor):
        return obj.pin_memory() if pin else obj
    if isinstance(obj, dict):
        return {k: _to_torch(v, pin) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_to_torch(v, pin) for v in obj))
    if isinstance(obj, (tuple, list)):
        seq = [_to_torch(v, pin) for v in obj]
        return tuple(seq) if isinstance(obj, tuple) else seq
    return obj


class DataLoader:
    """torch.utils.data.DataLoader's parameters and iteration, on a cistern
    pipeline (cistern.pipeline.Pipeline): the workers put whole collated
    batches into a FIFO segment, and the loop gets them as tensors.

        loader = cistern.torch.DataLoader(ds, batch_size=256, shuffle=True, num_workers=2)
        for x, y in loader:        # as torch's would give them
            ...

    What differs from torch's: each index is delivered exactly once per
    epoch even when a worker is killed (its batches are made again by
    another); an exception in a worker is raised again here with its
    traceback; the queue is one segment of max_queue_size batches (default
    num_workers * prefetch_factor) checked against /dev/shm's room when it
    is made; ordered=False delivers batches as they are ready. Without
    collate_fn, batches are stacked by cistern.pipeline.default_collate
    (numpy arrays, numbers, tensors, dicts, tuples, as torch's
    default_collate) straight into the segment and given as tensors.
    num_workers=0 loads in this process. timeout 0 waits forever.
    pin_memory pins each batch (when CUDA is there; else it warns once, as
    torch's does). progress=True writes a progress line to stderr; stats()
    reports batches per second, queue fill and worker states.
    """

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool = False,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Callable[[list[Any]], Any] | None = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable[[int], None] | None = None,
                 multiprocessing_context: str | None = None, generator: Any = None, *,
                 prefetch_factor: int = 2, persistent_workers: bool = False,
                 ordered: bool = True, max_queue_size: int | None = None,
                 slot_size: int | None = None, seed: int | None = None,
                 progress: bool | Any = False) -> None:
        from cistern import pipeline
        self.dataset = dataset
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.drop_last = drop_last
        self.pin_memory = pin_memory and self._can_pin()
        if seed is None and generator is not None:
            seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
        if seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_().item()) % 2**31
        pin = self.pin_memory
        self._pipe = pipeline.Pipeline(
            dataset, batch_size, num_workers=max(1, num_workers), shuffle=shuffle,
            sampler=sampler, batch_sampler=batch_sampler, drop_last=drop_last,
            ordered=ordered, collate_fn=collate_fn, worker_init_fn=worker_init_fn,
            persistent_workers=persistent_workers,
            max_queue_size=max_queue_size or max(1, num_workers) * prefetch_factor,
            slot_size=slot_size, start_method=multiprocessing_context,
            timeout=timeout or None, seed=seed, convert=lambda b: _to_torch(b, pin),
            progress=progress)
        self._epoch = 0

    @staticmethod
    def _can_pin() -> bool:
        if torch.cuda.is_available():
            return True
        warnings.warn("pin_memory=True but no CUDA device is there: batches are not pinned",
                      RuntimeWarning, stacklevel=3)
        return False

    def __len__(self) -> int:
        return len(self._pipe)

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers > 0:
            return iter(self._pipe)
        return self._in_process()

    def _in_process(self) -> Iterator[Any]:
        from cistern import pipeline
        p = self._pipe
        collate = p.collate_fn or pipeline.default_collate
        if p.kind != "map":
            it = iter(p.source() if p.kind == "call" else p.source)
            for chunk in pipeline._batches(it, p.batch_size, p.drop_last):
                yield _to_torch(chunk[0] if p.batch_size is None else collate(chunk),
                                self.pin_memory)
            return
        epoch = self._epoch
        self._epoch += 1
        for idx in p._epoch_batches(epoch):
            if p.batch_size is None and p.batch_sampler is None:
                yield _to_torch(p.source[idx[0]], self.pin_memory)
            else:
                yield _to_torch(collate([p.source[i] for i in idx]), self.pin_memory)

    def stats(self) -> Any:
        """The pipeline's PipelineStats (cistern.pipeline.Pipeline.stats())."""
        return self._pipe.stats()

    @property
    def segment_name(self) -> str:
        """The name of the segment the batches go through (cistern inspect NAME)."""
        return self._pipe.name

    def close(self) -> None:
        """Stop the workers and remove the segment."""
        self._pipe.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
