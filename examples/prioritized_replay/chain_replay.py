# SPDX-License-Identifier: MIT
"""Prioritized against uniform experience replay, on a sparse-reward chain.

    /usr/bin/python3 chain_replay.py [--actors 2] [--updates 4000] [--json FILE]

A chain of n states (numpy, no downloads): in each state one of two actions
moves on to the next state, the other ends the episode with reward 0, and
leaving the last state by its right action gives reward 1. The actors follow a
fixed noisy policy from state 0 (the right action with probability
--p-right), so the deep states, and the one rewarded transition, are rare in
their data.

Each actor is a process of its own that attaches to the segment by name and
puts its transitions (s, a, r, s2, done) with a schema. One learner fits a
linear Q-function on one-hot features (one weight per state and action) by
Q-learning from batches drawn out of the segment. The job runs twice with the
same actors, the same budget of updates and the same step size:

- uniform: a `reservoir` segment, batches drawn uniformly;
- prioritized: a `prioritized` segment; batches drawn by priority
  (|TD error| + epsilon)^alpha, each sample's loss scaled by its importance
  weight, the new |TD errors| sent back with update_priorities(), beta
  annealed towards 1 with set_beta().

Every --every updates it prints, for both runs, the root-mean-square error of
Q against the true Q* of the chain and the mean return of the greedy policy
over all start states (1 where it walks to the reward, 0 where it falls off),
then a line comparing the two. --json FILE writes the curves.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

import cistern

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# One transition; actions are 0 or 1.
SCHEMA = {"s": ("int32", ()), "a": ("int32", ()), "r": ("float32", ()),
          "s2": ("int32", ()), "done": ("bool", ())}


class Chain:
    """The chain MDP: n states, two actions, reward 1 at the far end only."""

    def __init__(self, n: int, gamma: float, lure: float, seed: int) -> None:
        self.n = n
        self.gamma = gamma
        self.lure = lure
        # right[s]: the action that moves on from state s; the other ends the episode.
        self.right: IntArray = np.random.default_rng(seed).integers(0, 2, n).astype(np.int64)

    def step(self, s: int, a: int) -> tuple[int, float, bool]:
        """(next state, reward, done) for action a in state s."""
        if a != self.right[s]:
            return s, self.lure, True
        if s == self.n - 1:
            return s, 1.0, True
        return s + 1, 0.0, False

    def q_star(self) -> FloatArray:
        """The optimal Q: gamma^(n-1-s) for the right action, the lure for the
        other (below gamma^(n-1): walking on is always better)."""
        q = np.full((self.n, 2), self.lure)
        s = np.arange(self.n)
        q[s, self.right] = self.gamma ** (self.n - 1 - s)
        return q

    def mean_return(self, q: FloatArray) -> float:
        """The greedy policy's return from each start state, averaged: 1 from
        a state where every greedy action from there on is the right one
        (strictly better: a tie counts as the other), else the lure."""
        s = np.arange(self.n)
        good = q[s, self.right] > q[s, 1 - self.right]
        # From state s the walk reaches the reward iff states s..n-1 are all good.
        reaches = np.cumprod(good[::-1])[::-1]
        return float(np.where(reaches, 1.0, self.lure).mean())


@dataclass
class Settings:
    """The job's parameters, the same for both runs."""
    states: int = 16
    gamma: float = 0.9
    lure: float = 0.05        # reward of the action that ends the episode
    p_right: float = 0.75
    actors: int = 2
    transitions: int = 8000   # per actor
    chunk: int = 64           # transitions per put_batch
    capacity: int = 16384     # room for every transition: nothing is evicted
    watermark: int = 256
    updates: int = 4000
    batch: int = 32
    lr: float = 0.5
    alpha: float = 1.0
    beta: float = 0.4         # annealed linearly to 1 over the updates
    epsilon: float = 0.01
    every: int = 500
    seed: int = 1


@dataclass
class Curve:
    """One run's learning curve and what its segment saw."""
    policy: str
    updates: list[int] = field(default_factory=list)
    q_error: list[float] = field(default_factory=list)
    mean_return: list[float] = field(default_factory=list)
    puts: int = 0
    gets: int = 0
    actor_exit_codes: list[int] = field(default_factory=list)
    prio: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def actor(name: str, index: int, st: Settings, attached: Any) -> None:
    """An actor process: attach by name, say so on `attached` (a semaphore),
    put st.transitions transitions of the noisy policy in chunks, stop early
    once reception closes."""
    env = Chain(st.states, st.gamma, st.lure, st.seed)
    rng = np.random.default_rng([st.seed, index])
    seg = cistern.attach(name, producer=True)
    attached.release()
    cols: dict[str, list[Any]] = {k: [] for k in SCHEMA}
    s, put = 0, 0
    try:
        while put < st.transitions:
            right = rng.random() < st.p_right
            a = int(env.right[s]) if right else 1 - int(env.right[s])
            s2, r, done = env.step(s, a)
            for k, v in zip(SCHEMA, (s, a, r, s2, done)):
                cols[k].append(v)
            s = 0 if done else s2
            if len(cols["s"]) == st.chunk or put + len(cols["s"]) == st.transitions:
                batch = {k: np.asarray(v, dtype=SCHEMA[k][0]) for k, v in cols.items()}
                put += len(seg.put_batch(batch, sim_id=index, timeout=60))
                cols = {k: [] for k in SCHEMA}
    except BrokenPipeError:
        pass  # the learner closed reception: its budget is spent
    finally:
        seg.detach()


def learn(policy: str, st: Settings, quiet: bool) -> Curve:
    """Run the actors and one learner over a segment of this policy."""
    env = Chain(st.states, st.gamma, st.lure, st.seed)
    q_star = env.q_star()
    prioritized = policy == "prioritized"
    name = f"chain-replay-{os.getpid()}-{policy}"
    # alpha, beta and epsilon are the prioritized policy's; the others take 0.
    seg = cistern.create(name, policy=policy, slots=st.capacity, schema=SCHEMA,
                         watermark=st.watermark, seed=st.seed,
                         alpha=st.alpha if prioritized else 0.0,
                         beta=st.beta if prioritized else 0.0,
                         epsilon=st.epsilon if prioritized else 0.0)
    curve = Curve(policy)
    t0 = time.monotonic()
    ctx = mp.get_context("spawn")
    attached = ctx.Semaphore(0)
    procs = [ctx.Process(target=actor, args=(name, i, st, attached))
             for i in range(st.actors)]
    try:
        for p in procs:
            p.start()
        # Learn once every actor is attached, so that a slow start cannot
        # leave one out of the run: both runs get the same transitions.
        for _ in procs:
            if not attached.acquire(timeout=60):
                raise RuntimeError("an actor did not attach within 60 s")
        q: FloatArray = np.zeros((st.states, 2))
        for u in range(1, st.updates + 1):
            if prioritized:
                b, ids, w32 = seg.get_prioritized(st.batch, timeout=60)
                w: FloatArray = w32.astype(np.float64)
            else:
                b = seg.get_batch(st.batch, timeout=60)
                w = np.ones(st.batch)
            assert isinstance(b, dict)
            s, a = b["s"].astype(np.int64), b["a"].astype(np.int64)
            s2 = b["s2"].astype(np.int64)
            target = b["r"] + st.gamma * np.where(b["done"], 0.0, q[s2].max(axis=1))
            td = target - q[s, a]
            # The semi-gradient of the weighted mean squared TD error: one-hot
            # features make each weight the Q of one (state, action).
            np.add.at(q, (s, a), st.lr * w * td / len(td))
            if prioritized:
                seg.update_priorities(ids, np.abs(td))
                seg.set_beta(st.beta + (1.0 - st.beta) * u / st.updates)
            if u % st.every == 0:
                curve.updates.append(u)
                curve.q_error.append(float(np.sqrt(np.mean((q - q_star) ** 2))))
                curve.mean_return.append(env.mean_return(q))
        seg.close_reception()  # actors still putting stop with BrokenPipeError
        for p in procs:
            p.join(60)
        curve.actor_exit_codes = [p.exitcode if p.exitcode is not None else -1 for p in procs]
        stats = seg.stats()
        curve.puts, curve.gets = stats.puts, stats.gets
        if prioritized:
            info = seg.prio_info()
            curve.prio = {"beta": info.beta, "max_priority": info.max_priority,
                          "updates": float(info.updates),
                          "stale_updates": float(info.stale_updates)}
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        seg.detach()
        cistern.unlink(name, missing_ok=True)
    curve.seconds = time.monotonic() - t0
    if not quiet:
        print(f"{policy}: {curve.puts} transitions put, {curve.gets} drawn, "
              f"{curve.seconds:.1f} s", flush=True)
    return curve


def report(st: Settings, uni: Curve, pri: Curve) -> str:
    """The learning curves side by side and a last line comparing them."""
    lines = [f"chain of {st.states} states, gamma {st.gamma}, {st.actors} actors x "
             f"{st.transitions} transitions, {st.updates} updates of {st.batch}",
             f"{'updates':>8} | {'uniform: Q error':>16} {'return':>7} | "
             f"{'prioritized: Q error':>20} {'return':>7}"]
    for i, u in enumerate(uni.updates):
        lines.append(f"{u:>8} | {uni.q_error[i]:>16.4f} {uni.mean_return[i]:>7.2f} | "
                     f"{pri.q_error[i]:>20.4f} {pri.mean_return[i]:>7.2f}")
    area_u, area_p = float(np.mean(uni.q_error)), float(np.mean(pri.q_error))
    lines.append(f"after {st.updates} updates: Q error {pri.q_error[-1]:.4f} prioritized, "
                 f"{uni.q_error[-1]:.4f} uniform; mean return {pri.mean_return[-1]:.2f} "
                 f"prioritized, {uni.mean_return[-1]:.2f} uniform; mean Q error over the "
                 f"curve {area_p:.4f} prioritized, {area_u:.4f} uniform")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run both and print the curves; returns the exit status."""
    d = Settings()
    p = argparse.ArgumentParser(description="Prioritized against uniform replay on a chain.")
    for f_name, f_val in asdict(d).items():
        p.add_argument("--" + f_name.replace("_", "-"), type=type(f_val), default=f_val)
    p.add_argument("--json", help="write both curves to this file")
    p.add_argument("--quiet", action="store_true", help="print the comparison only")
    a = vars(p.parse_args(argv))
    out, quiet = a.pop("json"), a.pop("quiet")
    st = Settings(**a)
    if st.updates < st.every or st.actors < 1 or st.transitions < 1 or st.states < 1:
        p.error("need updates >= every, and at least one actor, transition and state")
    uni = learn("reservoir", st, quiet)
    pri = learn("prioritized", st, quiet)
    text = report(st, uni, pri)
    print(text if not quiet else text.splitlines()[-1])
    if out:
        with open(out, "w") as f:
            json.dump({"settings": asdict(st), "uniform": asdict(uni),
                       "prioritized": asdict(pri)}, f, indent=1)
    return 0 if all(c == 0 for c in uni.actor_exit_codes + pri.actor_exit_codes) else 1


if __name__ == "__main__":
    sys.exit(main())
