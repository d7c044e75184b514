#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Section 4 peers of cistern-bench: random batches gathered by torch and numpy.

A table of `slots` rows of `slot_size` bytes (uint8) stands for a full segment.
Each contender makes batches of `batch` random rows (with replacement): drawn
per batch, or taken from a pool of index vectors drawn before timing (so only the
gather is timed). One
unmeasured warm-up run first, then `reps` measured runs interleaved across the
contenders. Prints one line per contender for cistern-bench to read:

    ROW<TAB><contender><TAB><k batches/s of each rep, comma-separated>

or `n/a: ...` in place of the numbers when a library is missing.
"""
import argparse
import os
import sys
import time

# Index vectors drawn before timing for the "pre-drawn" variants: enough that the
# rows they pick are spread over the whole table, as fresh random draws would be.
POOL = 1024


def measure(fn, target_s):
    """Run fn() repeatedly for about target_s seconds; return batches per second."""
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + target_s
    while True:
        for _ in range(16):
            fn()
        n += 16
        t = time.perf_counter()
        if t >= deadline:
            return n / (t - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--target-s", type=float, default=0.5)
    ap.add_argument("--slots", type=int, default=100000)
    ap.add_argument("--slot-size", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    # Same CPU as the C readers of this section.
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})

    contenders = []
    try:
        import numpy as np
    except ImportError as e:  # reported in the table, not fatal
        np = None
        print(f"ROW\tnumpy fancy indexing\tn/a: {e}")
    try:
        import torch
    except ImportError as e:
        torch = None
        print(f"ROW\ttorch index_select\tn/a: {e}")

    if np is not None:
        rng = np.random.default_rng(7)
        table = np.empty((a.slots, a.slot_size), dtype=np.uint8)
        table[:] = (np.arange(a.slot_size, dtype=np.uint32) % 251).astype(np.uint8)
        pool = [rng.integers(0, a.slots, a.batch) for _ in range(POOL)]
        it = [0]

        def np_random():
            return table[rng.integers(0, a.slots, a.batch)]

        def np_pool():
            it[0] = (it[0] + 1) % POOL
            return table[pool[it[0]]]

        contenders.append((f"numpy {np.__version__} integers + fancy indexing", np_random))
        contenders.append((f"numpy {np.__version__} fancy indexing (pre-drawn indices)", np_pool))

    if torch is not None:
        torch.manual_seed(7)
        ttable = torch.empty((a.slots, a.slot_size), dtype=torch.uint8)
        ttable[:] = (torch.arange(a.slot_size, dtype=torch.int32) % 251).to(torch.uint8)
        tpool = [torch.randint(0, a.slots, (a.batch,)) for _ in range(POOL)]
        tit = [0]

        def t_random():
            return ttable.index_select(0, torch.randint(0, a.slots, (a.batch,)))

        def t_pool():
            tit[0] = (tit[0] + 1) % POOL
            return ttable.index_select(0, tpool[tit[0]])

        th = torch.get_num_threads()
        contenders.append((f"torch {torch.__version__} randint + index_select ({th} thread(s))", t_random))
        contenders.append((f"torch {torch.__version__} index_select (pre-drawn indices, {th} thread(s))", t_pool))

    results = {name: [] for name, _ in contenders}
    for name, fn in contenders:  # warm-up
        measure(fn, a.target_s / 2)
    for rep in range(a.reps):
        for name, fn in contenders:
            results[name].append(measure(fn, a.target_s) / 1e3)
            print(f"rep {rep + 1}/{a.reps} {name}: {results[name][-1]:.2f} k batches/s", file=sys.stderr)
    for name, _ in contenders:
        print("ROW\t%s\t%s" % (name, ",".join("%.4f" % v for v in results[name])))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
