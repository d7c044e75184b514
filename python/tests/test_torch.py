# SPDX-License-Identifier: MIT
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time

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


def test_dataloader_batches_of_16_under_two_reads_per_put_complete(segname, c_producer):
    # cistern create r --policy reservoir --watermark 32 --reads-per-put 2, two
    # producers, a DataLoader reading batches of 16 with 2 workers: the
    # producers stop two reads ahead of the ratio, so batches that waited for
    # 16 reads of budget would wait for ever (and the producers behind them).
    import subprocess
    exe = c_producer
    count, floats = 300, 8
    seg = cistern.create(segname, policy="reservoir", watermark=32, reads_per_put=2,
                         slot_size=floats * 4, expected_producers=2)
    procs = [subprocess.Popen([exe, segname, str(count), str(floats), str(sim)])
             for sim in (1, 2)]
    try:
        ds = CisternDataset(segname, "float32", (floats,), batch_size=16, timeout=30,
                            with_meta=True)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        rows = 0
        for x, meta in loader:
            t = meta[:, 2].to(torch.float32).unsqueeze(1)
            assert torch.equal(x, t * floats + torch.arange(floats, dtype=torch.float32))
            rows += len(x)
    finally:
        codes = [p.wait(timeout=60) for p in procs]
    assert codes == [0, 0], "the producers put everything and said they were done"
    st = seg.stats()
    assert st["puts"] == 2 * count and st["reception_closed"]
    # While reception was open, two reads per put after the fill (and the
    # drain after it takes each sample left once).
    assert st["gets"] == rows >= 2 * (2 * count - 32) - 2 * 16
    seg.detach()


def test_dataset_batch_the_set_slack_can_never_admit_raises_at_once(segname):
    seg = cistern.create(segname, policy="reservoir", watermark=32, reads_per_put=2,
                         rate_slack=4, slot_size=F * 4)
    for i in range(40):
        try:
            seg.put(np.full(F, i, dtype=np.float32), timeout=0)
        except TimeoutError:
            break
    ds = CisternDataset(segname, "float32", (F,), batch_size=16, timeout=30)
    with pytest.raises(ValueError) as e:
        next(iter(ds))
    for word in ("reads_per_put 2", "rate_slack 4", "16 samples"):
        assert word in str(e.value)
    seg.detach()


# A training process: it holds a sample of its own, then runs a DataLoader whose
# forked workers each take one sample and stop, alive, in `park` (holding nothing:
# the dataset copies a sample out and releases it). It prints what it holds and the
# workers print who they are, then it waits to be killed.
_FORKING_TRAINER = r"""
import os, sys, time
import torch
import cistern
from cistern.torch import CisternDataset

def park(t):
    os.write(1, b"worker %d %d\n" % (os.getpid(), int(t[0])))  # one write: lines stay whole
    time.sleep(600)
    return t

name, f = sys.argv[1], int(sys.argv[2])
seg = cistern.attach(name)
held = seg.acquire(timeout=10, dtype="float32")
os.write(1, b"held %d\n" % int(held.array[0]))
ds = CisternDataset(name, "float32", (f,), transform=park)
loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                     multiprocessing_context="fork")
next(iter(loader))  # never returns: the workers park
"""

_PR_SET_CHILD_SUBREAPER = 36


def _lines_until(stream, want, deadline):
    """Lines read from stream by a thread, until want(lines) or the deadline."""
    lines, q = [], queue.Queue()
    threading.Thread(target=lambda: [q.put(line) for line in stream], daemon=True).start()
    while not want(lines):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            lines.append(q.get(timeout=left).split())
        except queue.Empty:
            break
    return lines


def test_killed_trainer_with_forked_dataloader_workers_hands_its_sample_out_again(segname):
    seg = cistern.create(segname, slots=16, slot_size=F * 4)
    for i in range(10):
        seg.put(np.full(F, i, dtype=np.float32))
    # The workers, orphaned by the kill, become ours to reap.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    proc = subprocess.Popen([sys.executable, "-c", _FORKING_TRAINER, segname, str(F)],
                            stdout=subprocess.PIPE, text=True)
    workers = {}
    try:
        lines = _lines_until(
            proc.stdout,
            lambda ls: sum(w[0] == "worker" for w in ls) == 2 and any(w[0] == "held" for w in ls),
            time.monotonic() + 60)
        held = [int(w[1]) for w in lines if w[0] == "held"]
        workers = {int(w[1]): int(w[2]) for w in lines if w[0] == "worker"}
        assert held == [0] and len(workers) == 2, lines
        proc.kill()
        proc.wait()
        for pid in workers:
            os.kill(pid, 0)  # alive, with the trainer's handle inherited
        # End of data must wait for the dead trainer's sample, and hand it out.
        seg.close_reception()
        t0 = time.monotonic()
        got = []
        while True:
            try:
                got.append(int(seg.get_array("float32", timeout=5)[0]))
            except cistern.EndOfData:
                break
        took = time.monotonic() - t0
        assert sorted(got) == sorted(set(range(10)) - set(workers.values())), got
        assert took < 5, took
        assert seg.stats()["redeliveries"] == 1
    finally:
        proc.kill()
        proc.wait()
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        seg.detach()
