# SPDX-License-Identifier: MIT
"""torch DataLoader workers over a segment (CisternDataset with batch_size): made
by fork or spawn, persistent or not. A FIFO hands every sample out exactly once;
FIRO and the reservoirs hand out batches as their policy says; a worker killed
in the middle of a batch loses nothing."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import cistern

torch = pytest.importorskip("torch")
from cistern.torch import CisternDataset  # noqa: E402

F, B = 8, 8


def vec(i):
    return np.full(F, i, dtype=np.float32)


def producer(name, ids):
    """A thread putting sample i (every value i, sim_id i) for i in ids, then
    closing reception; a daemon, each put bounded, so a failed test ends."""
    def run():
        with cistern.attach(name) as seg:
            for i in ids:
                seg.put(vec(i), sim_id=int(i), timeout=30)
            seg.close_reception()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def loader(name, ctx="fork", persistent=False, timeout=15, **kw):
    ds = CisternDataset(name, "float32", (F,), batch_size=B, timeout=timeout, **kw)
    return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                       multiprocessing_context=ctx,
                                       persistent_workers=persistent)


def ids_of(batch):
    return [int(v) for v in batch[:, 0].tolist()]


def wait_attached(seg, n, limit=60):
    """Until n handles are attached (the workers have started), or fail."""
    deadline = time.monotonic() + limit
    while seg.stats()["procs_attached"] < n:
        assert time.monotonic() < deadline, "DataLoader workers did not attach"
        time.sleep(0.02)


def wait_taken(seg, n, limit=20):
    """Until readers were handed n samples (the workers hold what they took)."""
    deadline = time.monotonic() + limit
    while seg.stats()["gets"] < n:
        assert time.monotonic() < deadline, "the workers did not take the samples"
        time.sleep(0.01)


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh", "persistent"])
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_fifo_hands_every_sample_to_exactly_one_worker(segname, ctx, persistent):
    n = 200
    seg = cistern.create(segname, slots=64, slot_size=F * 4)
    dl = loader(segname, ctx, persistent)
    it = iter(dl)  # workers start (and fork) before the producer thread does
    t = producer(segname, range(n))
    got = [i for b in it for i in ids_of(b)]
    t.join()
    assert sorted(got) == list(range(n))
    # Another epoch: reception is closed and the segment drained, so nothing comes.
    assert list(dl) == []
    st = seg.stats()
    assert st["gets"] == n and st["population"] == 0 and st["redeliveries"] == 0
    seg.detach()


def test_firo_hands_every_sample_out_pseudo_epochs_times_across_workers(segname):
    n, epochs = 96, 3
    seg = cistern.create(segname, policy="firo", slots=64, slot_size=F * 4, watermark=8,
                         pseudo_epochs=epochs)
    it = iter(loader(segname))
    t = producer(segname, range(n))
    got = [i for b in it for i in ids_of(b)]
    t.join()
    assert sorted(got) == sorted(list(range(n)) * epochs)
    seg.detach()


@pytest.mark.parametrize("policy", ["reservoir", "batch-reservoir"])
def test_reservoir_batches_are_distinct_draws_then_drain_once_after_close(segname, policy):
    n = 64
    seg = cistern.create(segname, policy=policy, slots=n, slot_size=F * 4, watermark=16,
                         batch_size=B if policy == "batch-reservoir" else 0, seed=5)
    for i in range(n):
        seg.put(vec(i))
    it = iter(loader(segname))
    open_batches = [ids_of(next(it)) for _ in range(20)]
    seg.close_reception()
    rest = [ids_of(b) for b in it]
    for b in open_batches:
        assert len(b) == B and len(set(b)) == B and set(b) <= set(range(n))
    # With replacement while open: 160 reads of 64 samples come back to some.
    flat = [i for b in open_batches for i in b]
    assert len(set(flat)) < len(flat)
    for b in rest:
        assert len(set(b)) == len(b)
    # After the close each read removes what it returns: every sample leaves once,
    # none was evicted (the buffer never overflowed), so every one was handed out.
    st = seg.stats()
    assert st["population"] == 0 and st["evictions"] == 0
    assert set(flat) | {i for b in rest for i in b} == set(range(n))
    assert sum(st["seen_hist"]) == n
    seg.detach()


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_workers_killed_mid_batch_lose_nothing(segname, ctx):
    n = 100
    seg = cistern.create(segname, slots=64, slot_size=F * 4)
    dl = loader(segname, ctx, timeout=20)
    it = iter(dl)
    wait_attached(seg, 3)  # this handle and both workers'
    with cistern.attach(segname) as p:
        # 7 samples: each worker takes some into the batch of 8 it is reading,
        # and neither can finish one.
        for i in range(7):
            p.put(vec(i))
    wait_taken(seg, 7)
    # The DataLoader's SIGCHLD handler raises in whatever this thread runs: set
    # it aside until the iterator is gone; the DataLoader finds its dead workers
    # by itself when it next waits for a batch.
    handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        for w in it._workers:
            os.kill(w.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="worker"):
            next(it)
        del it
    finally:
        signal.signal(signal.SIGCHLD, handler)
    # A new iteration's workers find what the dead ones held and read it again.
    t = producer(segname, range(7, n))
    got = [i for b in dl for i in ids_of(b)]
    t.join()
    assert sorted(got) == list(range(n))  # each exactly once
    st = seg.stats()
    assert st["redeliveries"] == 7 and st["population"] == 0
    seg.detach()
