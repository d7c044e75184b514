#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""torch's DataLoader and cistern.torch.DataLoader side by side, same dataset,
same workers, in one run; prints each one's figures and the ratios.

    PYTHONPATH=build/python:python /usr/bin/python3 bench/pipeline.py [--quick]

1. small samples: 64 float32 each, batch 256, a map-style dataset in memory,
   2 workers: batches per second (cistern / torch, wanted >= 3).
2. large samples: 1 MiB each, batch 8, 2 workers, pin_memory (pinned where
   CUDA is; else both warn and skip it): batches per second, each batch read
   whole by the loop (wanted >= 1.3).
3. overlap: an augmentation of known CPU cost per sample in the workers (a
   batch's worth costing about one training step), a training step of known
   cost (a 30 ms sleep, as a step that waits for a GPU) in the loop: wall
   time of the pipeline, its workers' start-up included, over the
   synchronous loop that does both in turn (wanted <= 0.6; the bound is
   0.5, the step's share).
4. memory: the loop stops for 10 s (2 with --quick); the growth of the whole
   job's memory (the sum of the processes' proportional set sizes, shared
   pages split between them) against the segment's size.
"""

import argparse
import os
import sys
import time
import warnings

import numpy as np
import torch
import torch.utils.data

import cistern.torch as ct


class Small(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int) -> None:
        self.x = np.random.default_rng(1).standard_normal((n, 64), dtype=np.float32)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.x[i]


class Large(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int, distinct: int = 16) -> None:
        self.n = n
        self.x = [np.full(1 << 18, i, np.float32) for i in range(distinct)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return self.x[i % len(self.x)]


def work(rounds: int) -> np.ndarray:
    """A fixed amount of CPU work (an augmentation's arithmetic)."""
    x = np.linspace(0, 1, 64, dtype=np.float32)
    for _ in range(rounds):
        x = np.sin(x) * 1.0001
    return x


def rounds_for(seconds: float) -> int:
    """How many rounds of work() take `seconds` of CPU here (the best of a few tries)."""
    best = min(_time(lambda: work(2000)) for _ in range(5)) / 2000
    return max(1, round(seconds / best))


def _time(f) -> float:
    t = time.process_time()
    f()
    return time.process_time() - t


class Costly(torch.utils.data.Dataset):  # type: ignore[misc]
    """Each sample costs `rounds` of work() (an augmentation of known CPU cost)."""

    def __init__(self, n: int, rounds: int) -> None:
        self.n, self.rounds = n, rounds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return work(self.rounds) + i


def rate(loader, touch=False, epochs=1):
    """Batches per second over the epochs, from the first batch on (the
    workers' start-up left out)."""
    n, t0 = 0, None
    for _ in range(epochs):
        for b in loader:
            if touch:
                float(b.sum())
            if t0 is None:
                t0 = time.perf_counter()
                continue
            n += 1
    return n / (time.perf_counter() - t0)


def pss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    args = ap.parse_args()
    q = args.quick
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    print(f"# pipeline benchmark: {os.cpu_count()} CPUs, torch {torch.__version__}")

    ds = Small(20_000 if q else 100_000)
    kw = dict(batch_size=256, num_workers=2, persistent_workers=True)
    tl = torch.utils.data.DataLoader(ds, **kw)
    cl = ct.DataLoader(ds, **kw)
    t, c = rate(tl, epochs=2), rate(cl, epochs=2)
    cl.close()
    print(f"small  64 x f32, batch 256, 2 workers: torch {t:8.1f} batch/s  cistern {c:8.1f} "
          f"batch/s  ratio {c / t:5.2f} (wanted >= 3)")

    ds = Large(96 if q else 400)
    kw = dict(batch_size=8, num_workers=2, pin_memory=True, persistent_workers=True)
    tl = torch.utils.data.DataLoader(ds, **kw)
    cl = ct.DataLoader(ds, **kw)
    t, c = rate(tl, touch=True, epochs=2), rate(cl, touch=True, epochs=2)
    cl.close()
    print(f"large  1 MiB,     batch 8,   2 workers: torch {t:8.1f} batch/s  cistern {c:8.1f} "
          f"batch/s  ratio {c / t:5.2f} (wanted >= 1.3)")

    step, nb, bs, epochs = 0.03, (20 if q else 100), 16, 2
    for share in (1.0,):  # the augmentation's cost per batch, in training steps
        cost = share * step / bs
        ds = Costly(nb * bs, rounds_for(cost))
        per_batch = _time(lambda: [ds[j] for j in range(bs)])  # the cost as it is here
        t0 = time.perf_counter()
        for _ in range(epochs):
            for i in range(nb):
                np.stack([ds[j] for j in range(i * bs, (i + 1) * bs)])
                time.sleep(step)
        sync = time.perf_counter() - t0
        cl = ct.DataLoader(ds, batch_size=bs, num_workers=2, persistent_workers=True)
        t0 = time.perf_counter()  # the workers' start-up counts
        for _ in range(epochs):
            for b in cl:
                time.sleep(step)
        piped = time.perf_counter() - t0
        cl.close()
        print(f"overlap augmentation {per_batch * 1e3:.0f} ms CPU a batch of {bs}, step "
              f"{step * 1e3:.0f} ms, {epochs} x {nb} batches: synchronous {sync:6.3f} s  "
              f"pipeline {piped:6.3f} s  ratio {piped / sync:5.2f} (wanted <= 0.6)")

    stop = 2 if q else 10
    ds = Large(200)
    cl = ct.DataLoader(ds, batch_size=8, num_workers=2, max_queue_size=4)
    it = iter(cl)
    for _ in range(4):
        next(it)
    pids = [os.getpid()] + [w.pid for w in cl.stats().workers if w.pid]
    before = sum(pss(p) for p in pids)
    time.sleep(stop)
    st = cl.stats()
    after = sum(pss(p) for p in pids)
    size = os.stat(f"/dev/shm/cistern.{cl.segment_name}").st_size
    for _ in it:
        pass
    cl.close()
    print(f"memory  loop stopped {stop} s: queue {st.queue_fill}/{st.queue_room}, workers "
          f"{', '.join(w.state for w in st.workers)}; job grew {(after - before) / 2**20:.1f} "
          f"MiB, segment {size / 2**20:.1f} MiB (wanted: growth <= segment)")


if __name__ == "__main__":
    main()
