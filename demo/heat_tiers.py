#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""heat_tiers.py - the heat demo at one memory budget, with and without a cold tier.

The simulations of demo/heat.py (demo/heatsim.py) stream many more samples than
the learner's buffer holds in memory. The same job runs twice, each run in a
process of its own, with the same simulations, seeds and training budget:

- memory: a Reservoir buffer of H slots, all in shared memory;
- tiered: a Reservoir buffer of H hot slots in shared memory plus k * H cold
  slots in a file on a local disk (create(..., cold_slots=, cold_dir=)).

The tiered segment's shared memory is a little larger than H slots: it holds
the cold tier's index (64 bytes a cold slot). The memory run gets as many more
slots as make its segment at least as large, so it never has less memory.
Both segments have the library's rate limiter at the same reads per put, so
both learners train the same batches on the same stream.

The simulations run in the order of a parameter sweep (--order sweep): their
mean parameter grows over the run, so the stream drifts. A full reservoir
evicts a random sample that was read already. With H slots a sample stays
about H puts, so the learner trains on the last few simulations and forgets
the earlier ones. With (k + 1) * H slots a sample stays (k + 1) times longer,
and each batch mixes more simulations. The surrogate is validated on held-out
simulations whose parameters are anywhere in the range: the wider mix is
expected to generalize better.

Each run reports its validation MSE over training, the distinct samples it
held and trained on, the simulations in its recent batches, and the memory it
used: the segment's shared-memory bytes, the peak RSS of the learner and of the
simulation processes (both count the segment's pages they touched), and the
cold file's disk bytes apart. The script writes a PNG, a CSV and a JSON summary.

Run from the repository root after building (see demo/README.md):
    /usr/bin/python3 demo/heat_tiers.py               # under a minute on 2 cores
    /usr/bin/python3 demo/heat_tiers.py --quick       # a toy scale (the test)
"""

import argparse
import collections
import csv
import json
import os
import resource
import subprocess
import sys
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Sequence, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from heat import EXTRA_PATH, build_model, validation_set  # noqa: E402

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

import cistern  # noqa: E402
import heatsim  # noqa: E402
from cistern.melissa import Buffer, attach_buffer, segment_name  # noqa: E402

VARIANTS = ("memory", "tiered")

# --quick: a toy scale for the test, a few seconds.
QUICK = dict(sims=6, val_sims=1, steps=16, grid=8, hot=16, cold_factor=3, batches=60,
             batch_size=8, procs=2, step_cost=0.002, hidden=32)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sims", type=int, default=24, help="training simulations")
    p.add_argument("--val-sims", type=int, default=4, help="held-out validation simulations")
    p.add_argument("--steps", type=int, default=40, help="time steps recorded per simulation")
    p.add_argument("--grid", type=int, default=16, help="grid size (grid x grid)")
    p.add_argument("--hot", type=int, default=40,
                   help="H: slots in shared memory, the memory budget of both runs")
    p.add_argument("--cold-factor", type=int, default=3,
                   help="k: the tiered run has k * H cold slots on disk")
    p.add_argument("--cold-dir", default="/var/tmp",
                   help="directory of the cold file: a local disk that takes O_DIRECT")
    p.add_argument("--batches", type=int, default=600, help="training budget, in batches")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--order", choices=("sweep", "random"), default="sweep",
                   help="sweep: the simulations run in the order of their mean parameter, "
                   "as in a parameter sweep, so the stream drifts; random: in any order")
    p.add_argument("--procs", type=int, default=2, help="simulation processes")
    p.add_argument("--step-cost", type=float, default=0.02,
                   help="seconds each simulation step takes at least (emulates a costly solver)")
    p.add_argument("--hidden", type=int, default=64, help="MLP width")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads for the learner")
    p.add_argument("--window", type=int, default=20,
                   help="batches over which the simulations trained on are counted")
    p.add_argument("--out", default="heat_tiers.png",
                   help="PNG to write (a .csv and a .json summary beside it)")
    p.add_argument("--quick", action="store_true", help="a toy scale, for the test")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    # A run's own process: the parent starts one per variant.
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--slots", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--tag", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.quick:
        given = {x.split("=")[0].lstrip("-").replace("-", "_") for x in (argv or sys.argv[1:])
                 if x.startswith("--")}
        for k, v in QUICK.items():
            if k not in given:
                setattr(a, k, v)
    for k in ("sims", "val_sims", "steps", "hot", "cold_factor", "batches", "batch_size",
              "procs", "window"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be >= 1")
    if a.grid < 4:
        p.error("--grid must be >= 4")
    if a.hot <= a.batch_size:
        p.error("--hot must be larger than --batch-size")
    n = a.sims * a.steps
    if n <= (a.cold_factor + 1) * a.hot:
        p.error(f"the simulations make {n} samples: make that more than the tiered "
                f"buffer's {(a.cold_factor + 1) * a.hot} (--sims, --steps, --hot)")
    if not os.path.isdir(a.cold_dir):
        p.error(f"--cold-dir {a.cold_dir} is not a directory")
    fs = fs_type(a.cold_dir)
    if fs in MEMORY_FS:
        p.error(f"--cold-dir {a.cold_dir} is on {fs}, which keeps its files in memory: "
                "give a directory on a disk (/var/tmp on most systems)")
    return a


# File systems whose files live in memory: a cold file there saves none.
MEMORY_FS = ("tmpfs", "ramfs")


def fs_type(path: str) -> str:
    """The type of the file system that holds `path`, from /proc/mounts ("" if unknown)."""
    real = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mnt = fields[1].replace("\\040", " ")
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best):
                    best, kind = mnt, fields[2]
    except OSError:
        pass
    return kind


def parameters(args: argparse.Namespace) -> Tuple[npt.NDArray[np.float32],
                                                   npt.NDArray[np.float32]]:
    """The training and validation simulations' parameters: the same in both runs."""
    rng = np.random.default_rng(args.seed)
    train = rng.uniform(0.0, 1.0, size=(args.sims, 5)).astype(np.float32)
    val = rng.uniform(0.0, 1.0, size=(args.val_sims, 5)).astype(np.float32)
    if args.order == "sweep":
        train = train[np.argsort(train.mean(axis=1), kind="stable")]
    return train, val


def buffer_name(tag: int, variant: str) -> str:
    """heatt-<the parent's pid>-<variant>: its segment is <that>.rank0."""
    return f"heatt-{tag}-{variant}"


def reads_per_put(args: argparse.Namespace) -> float:
    """The learner's reads per simulation step: the budget spread over the stream.
    The limiter counts the puts after the first watermark (one batch) ones, so the
    whole budget is read before the last simulation is done."""
    counted: int = args.sims * args.steps - args.batch_size
    ratio: float = args.batches * args.batch_size / counted
    return max(1.0, ratio)


def new_buffer(args: argparse.Namespace, name: str, slots: int, cold_slots: int) -> Buffer:
    """A Reservoir buffer, made as make_buffer() makes one, plus the library's rate
    limiter: the simulations wait when they run ahead of the learner's reads per
    put and the learner when it runs ahead of them, so both runs train the same
    batches on the same stream whatever the speed of their reads."""
    floats = heatsim.sample_floats(args.grid)
    seg = cistern.create(segment_name(name, 0), policy="reservoir", slots=slots,
                         slot_size=floats * 4, watermark=args.batch_size,
                         expected_producers=args.procs, seed=args.seed + 17,
                         reads_per_put=reads_per_put(args), cold_slots=cold_slots,
                         cold_dir=args.cold_dir if cold_slots else None)
    seg.detach()
    try:
        return attach_buffer(name, 0, dtype=np.float32, shape=(floats,))
    except BaseException:
        cistern.unlink(segment_name(name, 0), missing_ok=True)
        raise


def shm_bytes(segment: str) -> int:
    """The size of a segment's shared-memory file (what it can take of memory)."""
    return os.stat(f"/dev/shm/cistern.{segment}").st_size


def memory_slots(args: argparse.Namespace) -> Tuple[int, int]:
    """The memory run's slots: H, or more, so that its segment is at least as large
    as the tiered run's, whose shared memory also holds the cold index. Returns
    (slots, the tiered segment's bytes). Probes by making segments and removing them."""
    def size(slots: int, cold: int) -> int:
        name = buffer_name(os.getpid(), "probe")
        buf = new_buffer(args, name, slots, cold)
        try:
            return shm_bytes(buf.name)
        finally:
            buf.close(unlink=True)

    target = size(args.hot, args.cold_factor * args.hot)
    lo, hi = args.hot, args.hot
    while size(hi, 0) < target:
        lo, hi = hi, hi * 2
    while lo < hi:  # the fewest slots whose segment reaches the target
        mid = (lo + hi) // 2
        if size(mid, 0) >= target:
            hi = mid
        else:
            lo = mid + 1
    return hi, target


# ---------------------------------------------------------------- one run


def rss_kib(pid: int, field: str = "VmHWM") -> int:
    """A process's peak (VmHWM) or current (VmRSS) resident memory, KiB; 0 once gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Monitor(threading.Thread):
    """Samples the buffer's hot and cold population and the simulation processes'
    peak RSS, and closes reception if the simulations all exit without doing so."""

    def __init__(self, buf: Buffer, procs: Sequence["subprocess.Popen[bytes]"],
                 period: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.buf = buf
        self.procs = procs
        self.period = period
        self.t0 = time.monotonic()
        self.times: List[float] = []
        self.population: List[int] = []
        self.cold_population: List[int] = []
        self.producer_hwm: Dict[int, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        seg = self.buf.segment()
        while not self.stop.is_set():
            st = seg.stats()
            self.times.append(time.monotonic() - self.t0)
            self.population.append(st.population)
            self.cold_population.append(st.cold_population)
            for p in self.procs:
                if p.poll() is None:
                    self.producer_hwm[p.pid] = max(self.producer_hwm.get(p.pid, 0),
                                                   rss_kib(p.pid))
            if not st.reception_closed and all(p.poll() is not None for p in self.procs):
                self.buf.close_reception()
            self.stop.wait(self.period)


def run_variant(args: argparse.Namespace) -> Dict[str, Any]:
    import torch

    torch.set_num_threads(args.threads)
    variant = args.variant
    cold_slots = args.cold_factor * args.hot if variant == "tiered" else 0
    slots = args.slots or args.hot
    train_params, val_params = parameters(args)
    val_x = validation_set(val_params, args.grid, args.steps)
    n_samples = args.sims * args.steps
    bs = args.batch_size
    buf = new_buffer(args, buffer_name(args.tag or os.getpid(), variant), slots, cold_slots)
    seg = buf.segment()
    cold_file = os.path.join(args.cold_dir, f"cistern.{buf.name}.cold")

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

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
        env["PYTHONPATH"] = os.pathsep.join(EXTRA_PATH + [env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
    procs: List["subprocess.Popen[bytes]"] = []
    mon = Monitor(buf, procs)
    distinct: Set[bytes] = set()
    window: Deque[Set[bytes]] = collections.deque(maxlen=args.window)
    val_curve: List[Tuple[int, float]] = [(0, validate())]
    sims_curve: List[Tuple[int, int]] = []
    cold_bytes = 0
    try:
        cold_bytes = os.stat(cold_file).st_blocks * 512 if cold_slots else 0
        jobs: List[List[List[Any]]] = [[] for _ in range(args.procs)]
        for sim_id, p in enumerate(train_params):
            jobs[sim_id % args.procs].append([sim_id, [float(v) for v in p]])
        for job in jobs:
            spec = dict(buffer=buf.prefix, rank=buf.rank, grid=args.grid, steps=args.steps,
                        step_cost=args.step_cost, sims=job)
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "heatsim.py"),
                                           json.dumps(spec)], env=env))
        mon.start()
        eval_every = max(1, args.batches // 30)
        batches = reads = drained = 0
        last_print = 0.0
        while True:
            try:
                batch = buf.get_batch(bs)
            except cistern.EndOfData:
                break
            reads += len(batch)
            if batches >= args.batches:
                drained += len(batch)  # the budget is spent: drain so producers finish
                continue
            x = torch.from_numpy(batch)
            loss = torch.nn.functional.mse_loss(model(x[:, :6]), x[:, 6:])
            opt.zero_grad()
            loss.backward()
            opt.step()
            batches += 1
            keys = {row[:6].tobytes() for row in batch}  # (parameters, t): one sample
            distinct |= keys
            window.append({k[:20] for k in keys})  # the 5 parameters: one simulation
            if batches % eval_every == 0 or batches == args.batches:
                val_curve.append((batches, validate()))
                sims_curve.append((batches, len(set().union(*window))))
            now = time.monotonic() - mon.t0
            if now - last_print >= 1.0:
                last_print = now
                st = seg.stats()
                log(f"[{variant} {now:5.1f}s] puts {st.puts:>5}/{n_samples}  population "
                    f"{st.population:>4} (cold {st.cold_population:>4})  batches "
                    f"{batches:>4}/{args.batches}  val {val_curve[-1][1]:.5f}")
        for p in procs:
            p.wait()
        mon.stop.set()
        mon.join()
        st = seg.stats()
        shm = shm_bytes(buf.name)
    finally:
        mon.stop.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        buf.close(unlink=True)
    learner_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return dict(
        variant=variant, hot_slots=slots, cold_slots=cold_slots, slot_size=buf_slot_size(args),
        batches=batches, reads=reads, drained=drained, final_val=val_curve[-1][1],
        val_curve=val_curve, sims_in_window=sims_curve,
        held_max=max(mon.population, default=0), cold_held_max=max(mon.cold_population, default=0),
        distinct_trained=len(distinct), puts=st.puts, evictions=st.evictions,
        evicted_unseen=st.evicted_unseen, cold_spilled=st.cold_spilled, cold_reads=st.cold_reads,
        shm_bytes=shm, learner_rss_bytes=learner_kib * 1024,
        producers_rss_bytes=sum(mon.producer_hwm.values()) * 1024,
        cold_disk_bytes=max(cold_bytes, st.cold_disk_bytes),
        times=mon.times, population=mon.population, cold_population=mon.cold_population,
        wall=time.monotonic() - mon.t0, sim_exit_codes=[p.returncode for p in procs])


def buf_slot_size(args: argparse.Namespace) -> int:
    return heatsim.sample_floats(args.grid) * 4


# ---------------------------------------------------------------- the parent


def child_argv(args: argparse.Namespace, variant: str, slots: int, result: str) -> List[str]:
    argv = [sys.executable, os.path.abspath(__file__), "--variant", variant, "--slots", str(slots),
            "--result", result, "--tag", str(os.getpid())]
    for k in ("sims", "val_sims", "steps", "grid", "hot", "cold_factor", "cold_dir", "order",
              "batches",
              "batch_size", "procs", "step_cost", "hidden", "lr", "seed", "threads", "window"):
        argv += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    if args.quiet:
        argv.append("--quiet")
    return argv


def mib(b: float) -> float:
    return b / (1 << 20)


def write_csv(results: Sequence[Dict[str, Any]], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "batch", "val_mse"])
        for r in results:
            for b, v in r["val_curve"]:
                w.writerow([r["variant"], b, f"{v:.6g}"])


def plot(results: Sequence[Dict[str, Any]], args: argparse.Namespace, out: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("heat_tiers.py: no matplotlib: wrote the CSV and the table only", flush=True)
        return False
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.5),
                                        gridspec_kw=dict(width_ratios=[3, 2, 2]))
    colors = dict(memory="tab:red", tiered="tab:blue")
    for r in results:
        b, v = zip(*r["val_curve"])
        label = f"{r['variant']}: {r['hot_slots']} hot + {r['cold_slots']} cold slots"
        ax1.plot(b, v, color=colors[r["variant"]], label=label)
    ax1.set_yscale("log")
    ax1.set_xlabel("training batches")
    ax1.set_ylabel("validation MSE (held-out simulations)")
    ax1.set_title("Validation loss at the same memory")
    ax1.legend(fontsize=8)
    for r in results:
        c = colors[r["variant"]]
        ax2.plot(r["times"], r["population"], color=c, label=f"{r['variant']}: held")
        if r["cold_slots"]:
            ax2.plot(r["times"], r["cold_population"], color=c, linestyle="--",
                     label=f"{r['variant']}: of which cold")
    ax2.set_xlabel("seconds")
    ax2.set_ylabel("samples")
    ax2.set_title("Distinct samples held")
    ax2.legend(fontsize=8)
    x = np.arange(len(results))
    kib = 1 / 1024
    ax3.bar(x - 0.2, [r["shm_bytes"] * kib for r in results], 0.4, color="tab:green",
            label="segment, shared memory")
    ax3.bar(x + 0.2, [r["cold_disk_bytes"] * kib for r in results], 0.4, color="white",
            edgecolor="tab:blue", hatch="//", label="cold file, disk")
    ax3.set_xticks(x)
    ax3.set_xticklabels([f"{r['variant']}\nlearner {mib(r['learner_rss_bytes']):.0f} MiB"
                         f"\nsims {mib(r['producers_rss_bytes']):.0f} MiB" for r in results],
                        fontsize=8)
    ax3.set_ylabel("KiB")
    ax3.set_title("Memory and disk (peak RSS below)")
    ax3.legend(fontsize=8)
    fig.suptitle(f"{args.sims} simulations x {args.steps} steps = {args.sims * args.steps} "
                 f"samples into H = {args.hot} hot slots; {args.batches} batches of "
                 f"{args.batch_size}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return True


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    if args.variant:
        r = run_variant(args)
        with open(args.result, "w") as f:
            json.dump(r, f)
        return
    n = args.sims * args.steps
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    slots, tiered_shm = memory_slots(args)
    print(f"heat tiers demo: {args.sims} simulations x {args.steps} steps = {n} samples "
          f"({args.grid}x{args.grid} grid, {args.procs} processes); budget {args.batches} "
          f"batches of {args.batch_size}; memory run: {slots} slots in memory; tiered run: "
          f"{args.hot} hot + {args.cold_factor * args.hot} cold slots in {args.cold_dir}; "
          f"validation on {args.val_sims} held-out simulations", flush=True)
    base = os.path.splitext(args.out)[0]
    results: List[Dict[str, Any]] = []
    for variant in VARIANTS:
        part = f"{base}.{variant}.json"
        rc = subprocess.call(child_argv(args, variant, slots if variant == "memory" else args.hot,
                                        part))
        if rc != 0:
            sys.exit(f"heat_tiers.py: the {variant} run failed (exit {rc})")
        with open(part) as f:
            results.append(json.load(f))
        os.unlink(part)

    print(f"\n{'run':<8}{'hot':>6}{'cold':>6}{'held':>6}{'trained':>9}{'sims/win':>9}"
          f"{'shm KiB':>9}{'learner':>9}{'sims':>7}{'disk KiB':>9}  final val MSE")
    for r in results:
        print(f"{r['variant']:<8}{r['hot_slots']:>6}{r['cold_slots']:>6}{r['held_max']:>6}"
              f"{r['distinct_trained']:>9}{r['sims_in_window'][-1][1]:>9}"
              f"{r['shm_bytes'] / 1024:>9.0f}{mib(r['learner_rss_bytes']):>9.1f}"
              f"{mib(r['producers_rss_bytes']):>7.1f}{r['cold_disk_bytes'] / 1024:>9.0f}"
              f"  {r['final_val']:.5f}")
    print("(held: most samples in the buffer at once; trained: distinct samples in the batches; "
          f"sims/win: simulations in the last {args.window} batches; learner and sims: "
          "peak RSS in MiB)")
    by = {r["variant"]: r for r in results}
    better = by["tiered"]["final_val"] < by["memory"]["final_val"]
    print(f"tiered {'beats' if better else 'does NOT beat'} memory on validation "
          f"({by['tiered']['final_val']:.5f} vs {by['memory']['final_val']:.5f})")
    write_csv(results, base + ".csv")
    plotted = plot(results, args, args.out)
    with open(base + ".json", "w") as f:
        json.dump(dict(args={k: v for k, v in vars(args).items()
                             if k not in ("variant", "slots", "result", "tag")},
                       tiered_shm_probe=tiered_shm, results=results), f, indent=1)
    print(f"wrote {(args.out + ', ') if plotted else ''}{base}.csv and {base}.json")


if __name__ == "__main__":
    main()
