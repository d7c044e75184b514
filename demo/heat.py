#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""heat.py - online training of a heat-equation surrogate from a cistern segment.

K simulation processes (demo/heatsim.py) each run 2D heat-equation simulations
with random parameters (four boundary temperatures and the initial temperature)
and stream every time step into a segment, while a PyTorch learner (an MLP
surrogate: (parameters, t) -> field) trains from that segment and is validated on
held-out simulations. The learner makes its buffer as a Melissa server does,
with cistern.melissa.make_buffer(); the simulations attach to it by name
(cistern.melissa.attach()). The same job runs once per policy (FIFO, FIRO, Reservoir),
with the same simulations and the same training budget, and the script draws the
buffer population over time and the validation loss per policy into a PNG.

The budget is --batches training batches of --batch-size samples:
- FIFO hands out each sample once, so it can only ever train N / batch_size
  batches (N = sims * steps); when training outruns the simulations, that is less
  than the budget and the learner sits waiting for data.
- FIRO reads each sample pseudo_epochs = budget * batch_size / N times: exactly
  the budget. The population is held at the watermark while simulations run.
- Reservoir reads with replacement; the learner paces itself at
  (budget * batch_size - capacity) / N reads per put (a sample-to-insert ratio, as
  Reverb and Melissa rate limiters do) so that the reads taken while simulations
  run plus the final drain (each read removes its sample once reception is
  closed) come to the budget.
Any batch read beyond the budget is drained without training and reported.

Run from the repository root after building (see demo/README.md):
    /usr/bin/python3 demo/heat.py                 # defaults: a few minutes on 2 cores
    /usr/bin/python3 demo/heat.py --sims 24 --steps 200 --grid 48 --batches 4000
"""

import argparse
import errno
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _import_cistern() -> List[str]:
    """Import cistern, from the build tree if it is not on sys.path yet.
    Returns the extra sys.path entries used (children need them too)."""
    try:
        import cistern  # noqa: F401
        return []
    except ImportError:
        pass
    builds = [os.environ.get("CISTERN_BUILD", ""), os.path.join(ROOT, "build-py"),
              os.path.join(ROOT, "build")]
    for b in builds:
        if b and os.path.isdir(os.path.join(b, "python")):
            extra = [os.path.join(b, "python"), os.path.join(ROOT, "python")]
            sys.path[:0] = extra
            try:
                import cistern  # noqa: F401,F811
                return extra
            except ImportError:
                del sys.path[:len(extra)]
    sys.exit("heat.py: cannot import cistern; build it first "
             "(meson setup build-py -Dpython=enabled && ninja -C build-py) "
             "or set PYTHONPATH=<builddir>/python:python")


EXTRA_PATH = _import_cistern()
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

import cistern  # noqa: E402
import heatsim  # noqa: E402
from cistern.melissa import Buffer, BufferType, make_buffer  # noqa: E402


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sims", type=int, default=12, help="training simulations")
    p.add_argument("--val-sims", type=int, default=3, help="held-out validation simulations")
    p.add_argument("--steps", type=int, default=100, help="time steps recorded per simulation")
    p.add_argument("--grid", type=int, default=32, help="grid size (grid x grid)")
    p.add_argument("--batches", type=int, default=600, help="training budget, in batches")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--procs", type=int, default=3, help="simulation processes (K)")
    p.add_argument("--capacity", type=int, default=0,
                   help="buffer slots (0: a third of the training samples)")
    p.add_argument("--watermark", type=int, default=0,
                   help="FIRO watermark (0: half the capacity); Reservoir uses the batch size")
    p.add_argument("--step-cost", type=float, default=0.04,
                   help="seconds each simulation step takes at least (emulates a costly solver)")
    p.add_argument("--policies", default="fifo,firo,reservoir")
    p.add_argument("--hidden", type=int, default=64,
                   help="MLP width (Debian's torch has a slow generic BLAS: keep it lean)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads for the learner")
    p.add_argument("--out", default="heat.png", help="PNG to write (a .json summary beside it)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args(argv)
    for k in ("sims", "val_sims", "steps", "batches", "batch_size", "procs"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be >= 1")
    if a.grid < 4:
        p.error("--grid must be >= 4")
    n = a.sims * a.steps
    a.capacity = a.capacity or max(a.batch_size * 2, n // 3)
    a.watermark = a.watermark or a.capacity // 2
    if a.capacity <= a.batch_size:
        p.error("--capacity must be larger than --batch-size")
    if not 0 < a.watermark < a.capacity:
        p.error("--watermark must be between 0 and --capacity")
    a.policies = [s.strip().lower().replace("_", "-") for s in a.policies.split(",") if s.strip()]
    for pol in a.policies:
        if pol not in RUNNABLE:
            p.error(f"--policies: {pol!r} is not one of {', '.join(RUNNABLE)}")
    return a


# The policies this job can train from, as Melissa's buffer types: each read is
# one sample or a batch of them (SimPairedReservoir hands out pairs, which this
# surrogate does not use).
BUFFER_TYPES = {
    "fifo": BufferType.FIFO,
    "firo": BufferType.FIRO,
    "reservoir": BufferType.Reservoir,
    "fifo-evict-reservoir": BufferType.FIFOEvictReservoir,
    "batch-reservoir": BufferType.BatchReservoir,
}
RUNNABLE = tuple(BUFFER_TYPES)


# ---------------------------------------------------------------- learner


def build_model(torch: Any, grid: int, hidden: int) -> Any:
    nn = torch.nn
    return nn.Sequential(
        nn.Linear(6, hidden), nn.SiLU(),
        nn.Linear(hidden, hidden), nn.SiLU(),
        nn.Linear(hidden, grid * grid),
    )


def validation_set(params: npt.NDArray[np.float32], grid: int,
                   steps: int) -> npt.NDArray[np.float32]:
    rows = [heatsim.sample_vector(p, t, steps, f)
            for p in params for t, f in heatsim.solve(p, grid, steps)]
    return np.stack(rows)


class MetricsRecorder:
    """A metric_logger for make_buffer(): keeps the last value of each metric
    the buffer logs (Melissa's loggers have the same log_scalar())."""

    def __init__(self) -> None:
        self.last: Dict[str, Tuple[int, float]] = {}

    def log_scalar(self, tag: str, value: float, step: int) -> None:
        self.last[tag] = (step, value)


class Monitor(threading.Thread):
    """Samples the buffer's population from its own thread (the buffer gives each
    thread its own attachment), watches the simulation processes, and closes
    reception if they all exit without doing so."""

    def __init__(self, buf: Buffer, procs: Sequence["subprocess.Popen[bytes]"],
                 period: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.buf = buf
        self.procs = procs
        self.period = period
        self.t0 = time.monotonic()
        self.times: List[float] = []
        self.population: List[int] = []
        self.sims_end: Optional[float] = None
        self.stats: Dict[str, Any] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            st = self.buf.stats()
            now = time.monotonic() - self.t0
            self.stats = st
            self.times.append(now)
            self.population.append(st["population"])
            if self.sims_end is None and st["reception_closed"]:
                self.sims_end = now  # the last simulation declared itself done
            if not st["reception_closed"] and all(p.poll() is not None for p in self.procs):
                self.buf.close_reception()  # the simulations exited without closing it
            self.stop.wait(self.period)


def run_policy(policy: str, args: argparse.Namespace, train_params: npt.NDArray[np.float32],
               val_x: npt.NDArray[np.float32],
               log: Callable[[str], None]) -> Optional[Dict[str, Any]]:
    import torch

    n_samples = args.sims * args.steps
    floats = heatsim.sample_floats(args.grid)
    bs = args.batch_size
    reads_budget = args.batches * bs
    pseudo_epochs = max(1, round(reads_budget / n_samples))
    ratio = max(1.0, (reads_budget - args.capacity) / n_samples)  # Reservoir pacing
    name = f"heat-{os.getpid()}-{policy}"
    buffer_t = BUFFER_TYPES[policy]
    # Melissa's make_buffer(): the watermark is FIRO's hold level, the reservoirs'
    # read threshold (one batch); the buffer is rank 0 of a one-rank server.
    watermark = args.watermark if buffer_t is BufferType.FIRO else bs
    metrics = MetricsRecorder()
    try:
        buf = make_buffer(args.capacity, buffer_t, per_server_watermark=watermark,
                          pseudo_epochs=pseudo_epochs, metric_logger=metrics,
                          name=name, dtype=np.float32, shape=(floats,),
                          batch_size=bs if buffer_t is BufferType.BatchReservoir else None,
                          expected_producers=args.procs, seed=args.seed + 17, log_every=10)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            log(f"[{policy}] skipped: this libcistern build does not implement "
                f"the {policy} policy yet ({e.strerror})")
            return None
        raise
    cfg = buf.config()
    log(f"[{policy}] buffer {buffer_t.name}, segment {buf.name}; watch it live with: "
        f"cistern inspect --watch 1 {buf.name}")

    torch.manual_seed(args.seed)
    model = build_model(torch, args.grid, args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    vx = torch.from_numpy(val_x[:, :6])
    vy = torch.from_numpy(val_x[:, 6:])

    def validate() -> float:
        model.eval()
        with torch.no_grad():
            loss: float = torch.nn.functional.mse_loss(model(vx), vy).item()
        model.train()
        return loss

    env = dict(os.environ)
    if EXTRA_PATH:
        env["PYTHONPATH"] = os.pathsep.join(EXTRA_PATH + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    procs: List["subprocess.Popen[bytes]"] = []
    mon: Optional[Monitor] = None
    result: Dict[str, Any] = dict(policy=policy, config=cfg, batches=0, drained_reads=0,
                                  val_curve=[])
    try:
        jobs: List[List[List[Any]]] = [[] for _ in range(args.procs)]  # [[sim_id, params], ...]
        for sim_id, p in enumerate(train_params):
            jobs[sim_id % args.procs].append([sim_id, [float(v) for v in p]])
        mon = Monitor(buf, procs)
        for job in jobs:
            spec = dict(buffer=name, rank=buf.rank, grid=args.grid, steps=args.steps,
                        step_cost=args.step_cost, sims=job)
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "heatsim.py"),
                                           json.dumps(spec)], env=env))
        mon.start()

        eval_every = max(1, args.batches // 40)
        result["val_curve"].append((0, validate()))
        batches = reads = 0
        train_loss = float("nan")
        last_print = 0.0
        while True:
            if policy not in ("fifo", "firo"):
                # Sample-to-insert pacing while reception is open (see the module doc).
                waited = 0.0
                while waited < 0.5:
                    st = buf.stats()
                    if st["reception_closed"] or reads + bs <= ratio * st["puts"]:
                        break
                    time.sleep(0.005)
                    waited += 0.005
            try:
                batch = buf.get_batch(bs)  # (k, floats) float32, read as the policy says
            except cistern.EndOfData:
                break
            reads += len(batch)
            if batches < args.batches:
                x = torch.from_numpy(batch)  # get_batch made a private array: no copy
                loss = torch.nn.functional.mse_loss(model(x[:, :6]), x[:, 6:])
                opt.zero_grad()
                loss.backward()
                opt.step()
                train_loss = loss.item()
                batches += 1
                if batches % eval_every == 0:
                    result["val_curve"].append((batches, validate()))
            else:
                result["drained_reads"] += len(batch)
            now = time.monotonic() - mon.t0
            if now - last_print >= 1.0:
                last_print = now
                st = mon.stats or buf.stats()
                done = sum(p.poll() is not None for p in procs)
                val = result["val_curve"][-1][1]
                log(f"[{policy:>9} {now:6.1f}s] sim procs done {done}/{len(procs)}  "
                    f"puts {st.get('puts', 0):>6}/{n_samples}  "
                    f"population {st.get('population', 0):>5}/{args.capacity}  "
                    f"batches {batches:>5}/{args.batches}  "
                    f"train {train_loss:.5f}  val {val:.5f}")
        for p in procs:
            p.wait()
        if result["val_curve"][-1][0] != batches:
            result["val_curve"].append((batches, validate()))
        time.sleep(3 * mon.period)  # a last population sample after the drain
        mon.stop.set()
        mon.join()
        st = buf.stats()
        buf.log_metrics()  # the final values, to the metric_logger
        result.update(
            batches=batches, reads=reads, final_val=result["val_curve"][-1][1],
            wall=time.monotonic() - mon.t0, sims_end=mon.sims_end,
            times=mon.times, population=mon.population,
            pseudo_epochs=pseudo_epochs if policy == "firo" else None,
            reads_per_put=ratio if policy not in ("fifo", "firo") else None,
            stats={k: v for k, v in st.items()},
            buffer_metrics={tag: v for tag, (_, v) in metrics.last.items()},
            sim_exit_codes=[p.returncode for p in procs])
        log(f"[{policy:>9}] done in {result['wall']:.1f}s: {batches} batches trained "
            f"({reads} reads, {result['drained_reads']} drained untrained), "
            f"final validation MSE {result['final_val']:.5f}; "
            f"evictions {st['evictions']}, seen histogram {st['seen_hist']}")
        return result
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if mon is not None and mon.is_alive():
            mon.stop.set()
            mon.join()
        buf.close()  # detaches every thread's attachment and removes the segment


# ---------------------------------------------------------------- plot


def plot(results: Sequence[Dict[str, Any]], args: argparse.Namespace, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"fifo": "tab:blue", "firo": "tab:orange", "reservoir": "tab:green",
              "fifo-evict-reservoir": "tab:red", "batch-reservoir": "tab:purple"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for r in results:
        c = colors.get(r["policy"])
        ax1.plot(r["times"], r["population"], color=c, label=r["policy"])
        if r["sims_end"] is not None:
            ax1.axvline(r["sims_end"], color=c, ls=":", lw=1)
        xs, ys = zip(*r["val_curve"])
        ax2.plot(xs, ys, color=c, marker=".",
                 label=f"{r['policy']}: {r['batches']} batches, final {r['final_val']:.4g}")
    ax1.axhline(args.capacity, color="gray", ls="--", lw=1, label=f"capacity {args.capacity}")
    if any(r["policy"] == "firo" for r in results):
        ax1.axhline(args.watermark, color=colors["firo"], ls="--", lw=1,
                    label=f"FIRO watermark {args.watermark}")
    ax1.set_xlabel("seconds since the simulations started")
    ax1.set_ylabel("samples in the buffer")
    ax1.set_title("Buffer population (dotted: last simulation done, reception closed)")
    ax1.set_ylim(bottom=0, top=args.capacity * 1.08)
    ax1.legend(loc="upper right", fontsize=8)
    ax2.set_yscale("log")
    ax2.set_xlabel("training batches")
    ax2.set_ylabel("validation MSE (held-out simulations)")
    ax2.set_title(f"Same budget: {args.sims} simulations, up to {args.batches} batches "
                  f"of {args.batch_size}")
    ax2.legend(fontsize=8)
    fig.suptitle(f"Heat-equation surrogate trained online from cistern "
                 f"({args.grid}x{args.grid} grid, {args.steps} steps, {args.procs} sim processes)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)

    def log(msg: str) -> None:
        if not args.quiet or not msg.startswith("[") or "done in" in msg or "skipped" in msg:
            print(msg, flush=True)

    rng = np.random.default_rng(args.seed)
    train_params = rng.uniform(0.0, 1.0, size=(args.sims, 5)).astype(np.float32)
    val_params = rng.uniform(0.0, 1.0, size=(args.val_sims, 5)).astype(np.float32)
    val_x = validation_set(val_params, args.grid, args.steps)
    n = args.sims * args.steps
    print(f"heat demo: {args.sims} simulations x {args.steps} steps = {n} samples "
          f"({args.grid}x{args.grid} grid, {args.procs} processes, >= {args.step_cost}s/step); "
          f"budget {args.batches} batches of {args.batch_size} "
          f"({args.batches * args.batch_size / n:.1f} reads per sample); "
          f"capacity {args.capacity}, FIRO watermark {args.watermark}; "
          f"validation on {args.val_sims} held-out simulations", flush=True)

    results: List[Dict[str, Any]] = []
    for policy in args.policies:
        r = run_policy(policy, args, train_params, val_x, log)
        if r is not None:
            results.append(r)
    if not results:
        sys.exit("heat.py: no policy could run")

    print(f"\n{'policy':<22}{'batches':>8}{'reads':>8}  final validation MSE")
    for r in results:
        print(f"{r['policy']:<22}{r['batches']:>8}{r['reads']:>8}  {r['final_val']:.5f}")
    by = {r["policy"]: r for r in results}
    if "fifo" in by and "reservoir" in by:
        better = by["reservoir"]["final_val"] < by["fifo"]["final_val"]
        print(f"reservoir {'beats' if better else 'does NOT beat'} fifo on validation "
              f"({by['reservoir']['final_val']:.5f} vs {by['fifo']['final_val']:.5f})")

    plot(results, args, args.out)
    summary = os.path.splitext(args.out)[0] + ".json"
    with open(summary, "w") as f:
        json.dump(dict(args=vars(args), results=results), f, indent=1, default=float)
    print(f"wrote {args.out} and {summary}")


if __name__ == "__main__":
    main()
