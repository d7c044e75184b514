# SPDX-License-Identifier: MIT
import os
import threading

import numpy as np
import pytest

import cistern

torch = pytest.importorskip("torch")
from cistern.torch import CisternDataset  # noqa: E402

N, F = 96, 8


def _fill(segname, slots=N):
    seg = cistern.create(segname, slots=slots, slot_size=F * 4)
    for i in range(N):
        seg.put(np.full(F, i, dtype=np.float32), sim_id=i % 3, time_step=i)
    seg.close_reception()
    return seg


def _values(batches):
    return sorted(int(v) for b in batches for v in b[:, 0].tolist())


def test_dataloader_in_process_reads_every_sample_once(segname):
    seg = _fill(segname)
    ds = CisternDataset(segname, "float32", (F,))
    loader = torch.utils.data.DataLoader(ds, batch_size=10, num_workers=0)
    batches = list(loader)
    assert all(isinstance(b, torch.Tensor) and b.dtype == torch.float32 for b in batches)
    assert [len(b) for b in batches] == [10] * 9 + [6]
    assert _values(batches) == list(range(N))
    seg.detach()


def test_dataloader_workers_attach_on_their_own(segname):
    seg = _fill(segname)
    ds = CisternDataset(segname, "float32", (F,))
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2)
    batches = list(loader)
    assert _values(batches) == list(range(N))  # FIFO: split between workers, none twice
    seg.detach()


def test_dataset_batches_with_meta(segname):
    seg = _fill(segname)
    ds = CisternDataset(segname, "float32", (F,), batch_size=32, with_meta=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    out = list(loader)
    assert [tuple(x.shape) for x, _ in out] == [(32, F)] * 3
    metas = torch.cat([m for _, m in out])
    assert metas[:, 2].tolist() == list(range(N))
    assert metas[:, 1].tolist() == [i % 3 for i in range(N)]
    seg.detach()


def test_zero_copy_dataset_yields_views(segname):
    seg = _fill(segname)
    ds = CisternDataset(segname, "float32", (F,), copy=False)
    seen = [float(t[0]) for t in ds]  # each tensor used before the next is taken
    assert seen == [float(i) for i in range(N)]
    seg.detach()


def test_dataset_streams_while_a_producer_writes(segname):
    seg = cistern.create(segname, slots=4, slot_size=F * 4)

    def produce():
        with cistern.attach(segname) as p:
            for i in range(N):
                p.put(np.full(F, i, dtype=np.float32))
            p.close_reception()

    t = threading.Thread(target=produce)
    t.start()
    got = [int(x[0]) for x in CisternDataset(segname, "float32", (F,), timeout=10)]
    t.join()
    assert got == list(range(N))
    seg.detach()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a segment to another user")
def test_dataset_refuses_another_users_segment_unless_any_owner(segname):
    seg = _fill(segname)
    seg.detach()
    os.chown(f"/dev/shm/cistern.{segname}", 65534, 65534)
    with pytest.raises(PermissionError):
        list(CisternDataset(segname, "float32", (F,)))
    ds = CisternDataset(segname, "float32", (F,), batch_size=32, any_owner=True)
    assert _values(ds) == list(range(N))
