# SPDX-License-Identifier: MIT
"""cistern.torch: a PyTorch IterableDataset reading a cistern segment.

    from cistern.torch import CisternDataset
    ds = CisternDataset("heat", dtype="float32", shape=(1030,))
    loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2)
    for batch in loader:           # ends at the segment's end of data
        ...

Each iteration (each DataLoader worker, or the main process with num_workers=0)
attaches to the segment on its own, by name, when it starts, and detaches when it
ends; the dataset object itself holds no handle, so it pickles and forks freely.
Under FIFO each sample goes to exactly one worker; under the random policies each
worker draws on its own.

What is copied:
- default (copy=True): each sample is copied once, from the segment into a new
  numpy array that the tensor then shares (torch.from_numpy): one copy, and the
  tensor is yours to keep and write.
- batch_size=B: the dataset yields whole batches, gathered in C straight into one
  (B, *shape) array that the tensor shares: one copy per sample, no collate step.
  Use DataLoader(ds, batch_size=None). The last batch may be short.
- copy=False: zero-copy. The tensor is torch.from_numpy() on the read-only view of
  the sample in the segment; the sample stays acquired until the next item is asked
  for, and is released then. So the tensor is valid only until you advance the
  iterator and must not be written to. Only for loops that use each item before
  taking the next; not with a DataLoader that collates batches (it keeps several
  items at once), not with workers (the tensor would have to be pickled anyway).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.utils.data

import cistern


# torch is taken as untyped by the type check (see pyproject.toml), hence Any.
class CisternDataset(torch.utils.data.IterableDataset):  # type: ignore[misc]
    """Yield tensors from segment `name` until end of data.

    dtype, shape: how to read a payload (shape None: a flat vector of dtype).
    batch_size: yield gathered batches of this many samples instead of samples.
    copy: see the module doc; ignored with batch_size (always one copy).
    timeout: seconds to wait for each item (None: forever); a timeout raises
      TimeoutError out of the iteration.
    with_meta: yield (tensor, meta) where meta is a LongTensor (sample_id, sim_id,
      time_step), or (B, 3) for batches.
    transform: a callable applied to each yielded tensor (or to (tensor, meta)).
    any_owner: attach even to a segment owned by another user (see cistern.attach).
    """

    def __init__(self, name: str, dtype: cistern.DTypeLike = "float32",
                 shape: cistern.ShapeLike = None, batch_size: int | None = None,
                 copy: bool = True, timeout: cistern.Timeout = None, with_meta: bool = False,
                 transform: Callable[[Any], Any] | None = None,
                 any_owner: bool = False) -> None:
        super().__init__()
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = cistern._shape_tuple(shape)
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError("batch_size must be a positive int or None")
        if batch_size is not None and self.shape is None:
            raise ValueError("batch_size needs the sample shape")
        self.batch_size = batch_size
        self.copy = copy
        self.timeout = timeout
        self.with_meta = with_meta
        self.transform = transform
        self.any_owner = any_owner

    def _out(self, tensor: Any, meta: Any) -> Any:
        item = (tensor, meta) if self.with_meta else tensor
        return self.transform(item) if self.transform is not None else item

    def __iter__(self) -> Iterator[Any]:
        """Attach to the segment by name and yield items until end of data
        (see the class doc); detach when the iteration ends."""
        seg = cistern.attach(self.name, any_owner=self.any_owner)
        try:
            if self.batch_size is not None:
                yield from self._batches(seg)
            elif self.copy:
                yield from self._copies(seg)
            else:
                yield from self._views(seg)
        finally:
            seg.detach()

    def _batches(self, seg: cistern.Segment) -> Iterator[Any]:
        while True:
            try:
                arr, metas = seg.get_batch(self.batch_size, self.dtype, self.shape,
                                           self.timeout, meta=True)
            except cistern.EndOfData:
                return
            meta = torch.from_numpy(metas.astype(np.int64)) if self.with_meta else None
            yield self._out(torch.from_numpy(arr), meta)

    def _copies(self, seg: cistern.Segment) -> Iterator[Any]:
        while True:
            try:
                arr, m = seg.get_array(self.dtype, self.shape, self.timeout, meta=True)
            except cistern.EndOfData:
                return
            meta = torch.tensor(m, dtype=torch.int64) if self.with_meta else None
            yield self._out(torch.from_numpy(arr), meta)

    def _views(self, seg: cistern.Segment) -> Iterator[Any]:
        while True:
            try:
                s = seg.acquire(self.timeout, self.dtype, self.shape)
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
