#!/usr/bin/python3
"""prio_peers.py - the sum trees prioritized-replay users write in Python, for
bench/prio.c: one round draws a batch by priority^alpha, computes the
importance weights, and writes new priorities for the batch, as the
cistern round does.

    prio_peers.py HELD BATCH ROUNDS SEED
    prio_peers.py HELD BATCH ROUNDS SEED WINDOW SIMS EP_MIN EP_SPAN

Prints one line per peer: "name median_us" (median time of one round).
With WINDOW and the rest, one round draws BATCH windows of WINDOW
consecutive steps instead, from HELD samples laid out as bench/prio.c puts
them (SIMS simulations of HELD / SIMS steps, in episodes of EP_MIN to
EP_MIN + EP_SPAN - 1 steps), and only the numpy peer runs:

  numpy   the sum tree above over the steps that end a complete window
          (the others have leaf 0), the min tree over every sample: draw
          the last members, slice the windows out of an array, weights,
          then new priorities for the last members

  numpy   an array-based sum tree (and min tree, for the weights) over a
          power-of-two number of leaves: the batch walks down the levels
          at once (vectorised), and an update recomputes the touched
          parents level by level
  loop    the classic per-item sum tree: a Python loop per draw and per
          update, the form most replay-buffer tutorials give (no weights)
"""

import sys
import time

import numpy as np


class NumpySumTree:
    def __init__(self, capacity):
        self.leaves = 1
        while self.leaves < capacity:
            self.leaves *= 2
        self.tree = np.zeros(2 * self.leaves, dtype=np.float64)
        self.mins = np.full(2 * self.leaves, np.inf, dtype=np.float64)
        self.depth = self.leaves.bit_length() - 1

    def set_all(self, values):
        n = len(values)
        self.tree[self.leaves : self.leaves + n] = values
        self.mins[self.leaves : self.leaves + n] = values
        for level in range(self.depth - 1, -1, -1):
            lo, hi = 1 << level, 1 << (level + 1)
            idx = np.arange(lo, hi)
            self.tree[lo:hi] = self.tree[2 * idx] + self.tree[2 * idx + 1]
            self.mins[lo:hi] = np.minimum(self.mins[2 * idx], self.mins[2 * idx + 1])

    def sample(self, rng, batch):
        u = rng.random(batch) * self.tree[1]
        k = np.ones(batch, dtype=np.int64)
        for _ in range(self.depth):
            left = self.tree[2 * k]
            right = u >= left
            u = np.where(right, u - left, u)
            k = 2 * k + right
        return k - self.leaves

    def update(self, idx, values):
        k = idx + self.leaves
        self.tree[k] = values
        self.mins[k] = values
        for _ in range(self.depth):
            k = np.unique(k // 2)
            self.tree[k] = self.tree[2 * k] + self.tree[2 * k + 1]
            self.mins[k] = np.minimum(self.mins[2 * k], self.mins[2 * k + 1])


class LoopSumTree:
    def __init__(self, capacity):
        self.capacity = capacity
        self.tree = np.zeros(2 * capacity - 1, dtype=np.float64)

    def set_all(self, values):
        self.tree[self.capacity - 1 :] = values
        for i in range(self.capacity - 2, -1, -1):
            self.tree[i] = self.tree[2 * i + 1] + self.tree[2 * i + 2]

    def update(self, leaf, value):
        i = leaf + self.capacity - 1
        change = value - self.tree[i]
        self.tree[i] = value
        while i != 0:
            i = (i - 1) // 2
            self.tree[i] += change

    def get(self, s):
        i = 0
        while True:
            left = 2 * i + 1
            if left >= len(self.tree):
                return i - (self.capacity - 1)
            if s <= self.tree[left]:
                i = left
            else:
                s -= self.tree[left]
                i = left + 1


def measure(round_fn, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        round_fn()
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return times[len(times) // 2] / 1000.0


def window_ends(held, sims, window, ep_min, ep_span):
    """Which samples end an episode, and which end a complete window."""
    steps = held // sims
    ends = np.zeros(held, dtype=bool)
    for s in range(sims):
        t, e = 0, 0
        while t < steps:
            t += ep_min + (s * 7 + e * 13) % ep_span
            ends[s * steps + min(t, steps) - 1] = True
            e += 1
    step = np.arange(held) % steps
    # No end of episode among the window's members before its last.
    before = np.zeros(held, dtype=np.int64)
    csum = np.concatenate(([0], np.cumsum(ends)))
    i = np.arange(window - 1, held)
    before[window - 1 :] = csum[i] - csum[i - window + 1]
    return (step >= window - 1) & (before == 0)


def windows_main(held, batch, rounds, seed, window, sims, ep_min, ep_span):
    alpha, beta = 0.6, 0.4
    rng = np.random.default_rng(seed)
    data = np.arange(held, dtype=np.uint64)
    prios = (rng.random(held) * 10 + 0.01) ** alpha
    drawable = window_ends(held, sims, window, ep_min, ep_span)
    t = NumpySumTree(held)
    t.set_all(np.where(drawable, prios, 0.0))
    t.mins[t.leaves : t.leaves + held] = prios
    for level in range(t.depth - 1, -1, -1):
        lo, hi = 1 << level, 1 << (level + 1)
        idx = np.arange(lo, hi)
        t.mins[lo:hi] = np.minimum(t.mins[2 * idx], t.mins[2 * idx + 1])
    offsets = np.arange(1 - window, 1)

    def numpy_round():
        last = t.sample(rng, batch)
        windows = data[last[:, None] + offsets]
        p = t.tree[last + t.leaves] / t.tree[1]
        w = (held * p) ** -beta
        w /= (held * t.mins[1] / t.tree[1]) ** -beta
        t.update(last, (rng.random(batch) * 10 + 0.01) ** alpha)
        return windows, w

    numpy_round()
    print("numpy %.3f" % measure(numpy_round, rounds), flush=True)


def main():
    if len(sys.argv) > 5:
        windows_main(*(int(a) for a in sys.argv[1:9]))
        return
    held, batch, rounds, seed = (int(a) for a in sys.argv[1:5])
    alpha, beta = 0.6, 0.4
    rng = np.random.default_rng(seed)
    prios = rng.random(held) * 10 + 0.01

    t = NumpySumTree(held)
    t.set_all(prios**alpha)

    def numpy_round():
        idx = t.sample(rng, batch)
        p = t.tree[idx + t.leaves] / t.tree[1]
        w = (held * p) ** -beta
        w /= (held * t.mins[1] / t.tree[1]) ** -beta
        t.update(idx, (rng.random(batch) * 10 + 0.01) ** alpha)
        return w

    numpy_round()
    print("numpy %.3f" % measure(numpy_round, rounds), flush=True)

    lt = LoopSumTree(held)
    lt.set_all(prios**alpha)
    lrounds = max(5, rounds // 20)

    def loop_round():
        total = lt.tree[0]
        idx = [lt.get(rng.random() * total) for _ in range(batch)]
        new = rng.random(batch) * 10 + 0.01
        for i, q in zip(idx, new):
            lt.update(i, q**alpha)

    loop_round()
    print("loop %.3f" % measure(loop_round, lrounds), flush=True)


if __name__ == "__main__":
    main()
