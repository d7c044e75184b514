# SPDX-License-Identifier: MIT
"""cistern.pipeline and cistern.torch.DataLoader: every index delivered exactly
once per epoch (fork, spawn, shuffle, a sampler, a worker killed, persistent
workers), a worker's exception raised again in the consumer, Ctrl-C and an
exception in the loop stopping the workers and removing the segment, memory
bounded by the queue, and a segment /dev/shm cannot hold refused when made."""
import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import cistern
from cistern.pipeline import Pipeline, WorkerError, worker_info

HERE = os.path.dirname(os.path.abspath(__file__))
N = 200


class Rows:
    """A map-style dataset of N rows: row i is (a vector of i, i)."""

    def __init__(self, n=N, width=4, slow=0.0):
        self.n, self.width, self.slow = n, width, slow

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.slow:
            time.sleep(self.slow)
        return np.full(self.width, i, np.float32), i


class Raises(Rows):
    def __getitem__(self, i):
        if i == 37:
            raise KeyError(f"no row {i} here")
        return super().__getitem__(i)


class Big:
    """Samples of 1 MiB, made on demand."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return np.full(1 << 18, i, np.float32)


def stream():
    """A generator each worker runs, keeping every num_workers-th item."""
    w = worker_info()
    for i in range(N):
        if i % w.num_workers == w.id:
            yield np.int64(i)


def indices(p):
    return [int(i) for _, idx in p for i in idx.tolist()]


def seg_path(name):
    return f"/dev/shm/cistern.{name}"


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_for(cond, what, limit=30):
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_each_index_once_shuffled(method):
    with Pipeline(Rows(), 16, num_workers=2, shuffle=True, start_method=method) as p:
        got = indices(p)
    assert sorted(got) == list(range(N))
    assert got != list(range(N))  # shuffled


def test_sampler_order_kept_when_ordered():
    order = list(range(N - 1, -1, -3))
    with Pipeline(Rows(slow=0.0005), 8, num_workers=2, sampler=order, ordered=True) as p:
        got = indices(p)
    assert got == order


def test_batch_sampler_batches_kept_whole_and_in_order():
    batches = [[3, 1, 2], [5], [7, 8, 9, 10]]
    with Pipeline(Rows(), num_workers=2, batch_sampler=batches, ordered=True) as p:
        got = [idx.tolist() for _, idx in p]
    assert got == batches


def test_vectors_match_their_indices():
    with Pipeline(Rows(), 32, num_workers=2) as p:
        for x, idx in p:
            assert x.shape == (len(idx), 4) and (x[:, 0] == idx).all()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_killed_worker_loses_no_index(method):
    p = Pipeline(Rows(slow=0.002), 8, num_workers=2, shuffle=True, start_method=method)
    got, killed = [], None
    for _, idx in p:
        got += idx.tolist()
        if killed is None:
            killed = p.stats().workers[0].pid
            os.kill(killed, signal.SIGKILL)
    st = p.stats()
    p.close()
    assert sorted(got) == list(range(N))
    assert st.restarts == 1 and st.redelivered >= 1


def test_worker_exception_raised_with_traceback():
    p = Pipeline(Raises(), 8, num_workers=2)
    pids = []
    with pytest.raises(KeyError, match="no row 37 here") as e:
        for _ in p:
            pids = pids or [w.pid for w in p.stats().workers]
    assert isinstance(e.value.__cause__, WorkerError)
    assert "__getitem__" in e.value.__cause__.text
    assert not os.path.exists(seg_path(p.name))
    assert all(gone(pid) for pid in pids)
    p.close()


def test_persistent_workers_three_epochs():
    with Pipeline(Rows(), 16, num_workers=2, shuffle=True, persistent_workers=True) as p:
        pids = None
        for _ in range(3):
            assert sorted(indices(p)) == list(range(N))
            now = [w.pid for w in p.stats().workers]
            assert pids is None or now == pids
            pids = now
            assert os.path.exists(seg_path(p.name))
    assert not os.path.exists(seg_path(p.name))


def test_generator_split_by_worker_info():
    with Pipeline(stream, 10, num_workers=2) as p:
        got = [int(i) for b in p for i in b.tolist()]
    assert sorted(got) == list(range(N))


def test_exception_in_loop_stops_workers_and_removes_segment():
    p = Pipeline(Rows(), 8, num_workers=2)
    pids = []

    def train():
        for _ in p:
            pids.extend(w.pid for w in p.stats().workers)
            raise ArithmeticError("loss is nan")

    with pytest.raises(ArithmeticError):
        train()
    assert not os.path.exists(seg_path(p.name))
    assert all(gone(pid) for pid in pids)


CTRL_C = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {here!r})
    from test_pipeline import Rows
    from cistern.pipeline import Pipeline
    p = Pipeline(Rows(), 4, num_workers=2)
    for x in p:
        print(p.name, *[w.pid for w in p.stats().workers], flush=True)
        os.kill(os.getpid(), signal.SIGINT)
""")


def _sigint_as_a_terminal_gives_it():
    """A child started from a background job inherits SIGINT ignored: undo that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_workers_and_removes_segment():
    r = subprocess.run([sys.executable, "-c", CTRL_C.format(here=HERE)], capture_output=True,
                       text=True, timeout=60, preexec_fn=_sigint_as_a_terminal_gives_it)
    assert "KeyboardInterrupt" in r.stderr
    name, *pids = r.stdout.split()
    assert not os.path.exists(seg_path(name))
    wait_for(lambda: all(gone(int(pid)) for pid in pids), "workers outlived Ctrl-C")


CTRL_C_WAITING = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from test_pipeline import Rows
    from cistern.pipeline import Pipeline
    for x in Pipeline(Rows(slow=30), 4, num_workers=2, name={name!r}, slot_size=4096):
        pass
""")


def test_ctrl_c_while_waiting_for_a_batch_stops_workers_and_removes_segment():
    name = f"pyt-{os.getpid()}-ctrl-c-waiting"
    # In a process group of its own, which gets the SIGINT, as a terminal's
    # foreground group does on Ctrl-C (the workers ignore it).
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_WAITING.format(here=HERE, name=name)],
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_sigint_as_a_terminal_gives_it)
    try:
        wait_for(lambda: os.path.exists(seg_path(name)) and
                 len(cistern.inspect(name).procs) == 3, "the workers did not start")
        pids = [q.pid for q in cistern.inspect(name).procs if q.pid != proc.pid]
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the test failed: end what it started
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        cistern.unlink(name, missing_ok=True)
    assert "KeyboardInterrupt" in err
    assert not os.path.exists(seg_path(name))
    wait_for(lambda: all(gone(pid) for pid in pids), "workers outlived Ctrl-C")


KILLED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {here!r})
    from test_pipeline import Rows
    from cistern.pipeline import Pipeline
    p = Pipeline(Rows(), 4, num_workers=2)
    for x in p:
        print(p.name, *[w.pid for w in p.stats().workers], flush=True)
        time.sleep(60)
""")


def test_killed_consumer_workers_remove_segment_and_exit():
    proc = subprocess.Popen([sys.executable, "-c", KILLED.format(here=HERE)],
                            stdout=subprocess.PIPE, text=True)
    name, *pids = proc.stdout.readline().split()
    proc.kill()
    proc.wait()
    proc.stdout.close()
    wait_for(lambda: not os.path.exists(seg_path(name)), "the segment outlived its consumer")
    wait_for(lambda: all(gone(int(pid)) for pid in pids), "workers outlived their consumer")


def pss(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Pss")


def test_stopped_consumer_holds_memory_to_the_queue():
    p = Pipeline(Big(), 2, num_workers=2, max_queue_size=4, prefetch=1)
    it = iter(p)
    for _ in range(4):
        next(it)
    pids = [w.pid for w in p.stats().workers]
    before = sum(pss(pid) for pid in [os.getpid(), *pids])
    wait_for(lambda: p.stats().queue_fill == 4, "the workers did not fill the queue")
    wait_for(lambda: any(w.state == "waiting for room" for w in p.stats().workers),
             "the workers did not wait for room")
    after = sum(pss(pid) for pid in [os.getpid(), *pids])
    size = os.stat(seg_path(p.name)).st_size
    assert after - before <= size
    rest = sum(1 for _ in it)
    p.close()
    assert rest == 32 - 4


SMALL_SHM = textwrap.dedent("""
    import numpy as np
    import cistern
    from cistern.pipeline import Pipeline
    try:
        Pipeline(lambda: iter([np.zeros(1 << 20, np.uint8)]), 4, num_workers=1,
                 max_queue_size=8).__iter__().__next__()
    except OSError as e:
        print(e)
    try:
        cistern.create("small-shm", slots=16, slot_size=1 << 20)
    except OSError as e:
        print(e)
""")


def in_small_shm(script):
    """Run a Python script where /dev/shm is a 4 MiB tmpfs (a mount namespace of its own)."""
    unshare = shutil.which("unshare")
    assert unshare, "the test needs unshare(1) to mount a small /dev/shm of its own"
    mount = "mount -t tmpfs -o size=4m tmpfs /dev/shm && exec \"$0\" -c \"$1\""
    r = subprocess.run([unshare, "-m", "sh", "-c", mount, sys.executable, script],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.splitlines(), r.stderr


def test_queue_too_large_for_shm_refused_when_made():
    (pipe, _), err = in_small_shm(SMALL_SHM)
    assert "needs 48.1 MiB of shared memory (8 slots of 6.0 MiB)" in pipe, err
    assert "/dev/shm has 4.0 MiB left" in pipe and "--shm-size" in pipe


def test_create_too_large_for_shm_refused_naming_sizes():
    (_, plain), err = in_small_shm(SMALL_SHM)
    assert "needs 16.1 MiB of shared memory (16 slots of 1.0 MiB)" in plain, err
    assert "/dev/shm has 4.0 MiB left" in plain and "--shm-size" in plain


def test_size_beyond_shm_refused():
    free = os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize
    slots = free // (1 << 30) + 2
    p = Pipeline(Rows(), 4, num_workers=1, max_queue_size=slots, slot_size=1 << 30)
    with pytest.raises(OSError, match="--shm-size"):
        next(iter(p))
    assert not os.path.exists(seg_path(p.name))


def test_progress_line():
    out = io.StringIO()
    with Pipeline(Rows(), 16, num_workers=2, progress=out) as p:
        n = sum(1 for _ in p)
    text = out.getvalue()
    assert f"{n}/{n}" in text and "batch/s" in text and "queue" in text
    assert text.endswith("\n")


def test_torch_dataloader_gives_torchs_batches():
    torch = pytest.importorskip("torch")
    import cistern.torch as ct
    ds = Rows(n=50)
    ours = list(ct.DataLoader(ds, batch_size=8, num_workers=2, collate_fn=None))
    theirs = list(torch.utils.data.DataLoader(ds, batch_size=8))
    assert len(ours) == len(theirs)
    for (x, i), (tx, ti) in zip(ours, theirs):
        assert torch.equal(x, tx) and torch.equal(i, ti)


def test_torch_dataloader_sampler_and_drop_last():
    torch = pytest.importorskip("torch")
    import cistern.torch as ct
    ds = Rows(n=50)
    sampler = torch.utils.data.RandomSampler(ds)
    dl = ct.DataLoader(ds, batch_size=8, sampler=sampler, drop_last=True, num_workers=2,
                       multiprocessing_context="spawn", ordered=False)
    got = [int(i) for _, idx in dl for i in idx]
    assert len(got) == 48 and len(set(got)) == 48 and len(dl) == 6


def test_demo_trains_with_the_swapped_loader():
    pytest.importorskip("torch")
    demo = os.path.join(HERE, "..", "..", "examples", "python", "dataloader_swap.py")
    r = subprocess.run([sys.executable, demo, "--samples", "3000", "--epochs", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split(",")[0] for ln in lines] == ["cistern: epoch 0: 11 batches",
                                                  "cistern: epoch 1: 11 batches"]
    first, last = (float(ln.split("loss ")[1].split(",")[0]) for ln in lines)
    assert last < first  # it learns
