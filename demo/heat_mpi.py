#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""heat_mpi.py - online training from a Fortran simulation run under MPI.

The simulation is examples/heat_mpi.f90: the heat demo's solver (the scheme of
demo/heatsim.py) in Fortran, its grid's rows split among MPI ranks, started
with mpirun. This script makes the segment (with the schema the simulation's
fields are declared against), starts the simulations, trains an MLP surrogate
from the segment as they run, and checks it on held-out simulations solved in
Python.

- --mode parts (default): every rank sends its part of the field each step;
  a sample is (params, t, part, u[rows, grid]) and the surrogate learns
  (params, t, part) -> the part's rows.
- --mode gather: the parts are gathered on rank 0 (cistern_mpi_gather()),
  which sends the whole field; a sample is demo/heatsim.py's (params, t,
  u[grid, grid]).
- --remote: the simulations send to `cistern serve` on a loopback port
  instead of attaching the segment.

Each simulation is one client per sending rank; the segment expects that
many producers, so its reception closes when the last is done.

Run from the repository root after building (see demo/README.md):
    /usr/bin/python3 demo/heat_mpi.py
    /usr/bin/python3 demo/heat_mpi.py --remote --mode gather --sims 8 --steps 40
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import remote  # noqa: E402  (imports cistern from the build tree if needed)
import heatsim  # noqa: E402
import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

import cistern  # noqa: E402


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--mode", choices=("parts", "gather"), default="parts",
                   help="each rank sends its part, or rank 0 sends the gathered field")
    p.add_argument("--remote", action="store_true", help="send through cistern serve")
    p.add_argument("--np", type=int, default=2, help="MPI ranks of each simulation")
    p.add_argument("--sims", type=int, default=6, help="training simulations")
    p.add_argument("--val-sims", type=int, default=2, help="held-out validation simulations")
    p.add_argument("--steps", type=int, default=30, help="time steps recorded per simulation")
    p.add_argument("--grid", type=int, default=16, help="grid size (a multiple of --np)")
    p.add_argument("--batches", type=int, default=300, help="training budget, in batches")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--policy", choices=("fifo", "reservoir"), default="reservoir")
    p.add_argument("--step-cost", type=int, default=5,
                   help="milliseconds each simulation step takes at least")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--mpirun", default="mpirun", help="the MPI launcher")
    p.add_argument("--heat-mpi", default="", help="the simulation program "
                   "(default: $CISTERN_BUILD, build-py or build's examples/heat_mpi)")
    p.add_argument("--cistern", default=None, help="the cistern command, for --remote")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless every step of every part arrived exactly once "
                   "(--policy fifo) and the validation loss went down")
    p.add_argument("--out", default="", help="write a JSON summary here")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    for k in ("np", "sims", "val_sims", "steps", "batches", "batch_size"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be >= 1")
    if a.grid < 4 or a.grid % a.np:
        p.error("--grid must be at least 4 and a multiple of --np")
    return a


def find_program(given: str) -> str:
    cands = [given] if given else [
        os.path.join(b, "examples", "heat_mpi")
        for b in (os.environ.get("CISTERN_BUILD", ""), os.path.join(ROOT, "build-py"),
                  os.path.join(ROOT, "build")) if b]
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit("heat_mpi.py: cannot find examples/heat_mpi; build cistern with gfortran and "
             "MPI present (scripts/setup.sh installs them) or pass --heat-mpi")


def schema(args: argparse.Namespace) -> str:
    if args.mode == "gather":
        return f"params:float32[5];t:float32[];u:float32[{args.grid},{args.grid}]"
    rows = args.grid // args.np
    return f"params:float32[5];t:float32[];part:float32[];u:float32[{rows},{args.grid}]"


def inputs(args: argparse.Namespace, b: Dict[str, Any]) -> npt.NDArray[np.float32]:
    """The surrogate's input rows of a batch read by the schema."""
    cols = [b["params"], b["t"][:, None]]
    if args.mode == "parts":
        cols.append(b["part"][:, None])
    x: npt.NDArray[np.float32] = np.concatenate(cols, axis=1).astype(np.float32)
    return x


def validation_set(args: argparse.Namespace,
                   params: npt.NDArray[np.float32]) -> Tuple[Any, Any]:
    """(x, y) of held-out simulations solved in Python, laid out as the samples."""
    xs, ys = [], []
    parts = args.np if args.mode == "parts" else 1
    rows = args.grid // parts
    for p in params:
        for t, field in heatsim.solve(p, args.grid, args.steps):
            for k in range(parts):
                x = list(p) + [t / max(1, args.steps - 1)]
                if args.mode == "parts":
                    x.append(k / parts)
                xs.append(x)
                ys.append(field[k * rows:(k + 1) * rows].ravel())
    return np.array(xs, dtype=np.float32), np.array(ys, dtype=np.float32)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    import torch


    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    rng = np.random.default_rng(args.seed)
    train = rng.uniform(0.0, 1.0, size=(args.sims, 5)).astype(np.float32)
    val = rng.uniform(0.0, 1.0, size=(args.val_sims, 5)).astype(np.float32)
    vx, vy = (torch.from_numpy(a) for a in validation_set(args, val))
    senders = args.np if args.mode == "parts" else 1
    n_samples = args.sims * args.steps * senders
    name = f"heatmpi-{os.getpid()}"
    slots = n_samples if args.policy == "fifo" else max(4 * args.batch_size, n_samples // 3)
    seg = cistern.create(name, policy=args.policy, slots=slots, schema=schema(args),
                         watermark=args.batch_size if args.policy == "reservoir" else 0,
                         expected_producers=args.sims * senders, seed=args.seed)
    tmp = tempfile.mkdtemp(prefix="cistern-heat-mpi-")
    serve: Optional["subprocess.Popen[bytes]"] = None
    sim: Optional["subprocess.Popen[bytes]"] = None
    try:
        target = name
        if args.remote:
            target = f"tcp://127.0.0.1:{remote.free_port()}"
            with open(os.path.join(tmp, "serve.log"), "wb") as lf:
                serve = subprocess.Popen([remote.find_cli(args.cistern), "serve", "--bind",
                                          target, "--segment", name],
                                         stdout=lf, stderr=subprocess.STDOUT)
            remote.wait_for_server(target, serve, 30.0, {})
        # Ranks that wait for each other yield the CPU instead of spinning: the
        # learner and the server share the cores with them.
        cmd = [args.mpirun, "-np", str(args.np), "--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += [find_program(args.heat_mpi), target, args.mode, str(args.grid),
                str(args.steps), str(args.step_cost)]
        for sim_id, p in enumerate(train):
            cmd += [str(sim_id)] + [f"{v:.6f}" for v in p]
        # The parameters as the simulations parse them, for --check.
        train = np.array([[float(f"{v:.6f}") for v in p] for p in train], dtype=np.float32)
        log(f"heat_mpi: {args.sims} simulations x {args.steps} steps on {args.np} ranks "
            f"({args.mode}) -> {'cistern serve -> ' if args.remote else ''}segment {name} "
            f"({args.policy}, {slots} slots); training up to {args.batches} batches "
            f"of {args.batch_size}")
        t0 = time.monotonic()
        with open(os.path.join(tmp, "mpirun.log"), "wb") as lf:
            sim = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)

        torch.manual_seed(args.seed)
        n_in = vx.shape[1]
        model = torch.nn.Sequential(torch.nn.Linear(n_in, args.hidden), torch.nn.SiLU(),
                                    torch.nn.Linear(args.hidden, args.hidden), torch.nn.SiLU(),
                                    torch.nn.Linear(args.hidden, vy.shape[1]))
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)

        def validate() -> float:
            with torch.no_grad():
                loss: float = torch.nn.functional.mse_loss(model(vx), vy).item()
            return loss

        val0 = validate()
        batches = reads = 0
        seen: Set[Tuple[int, int, int]] = set()
        duplicates = bad = 0
        while True:
            try:
                b, meta = seg.get_batch(args.batch_size, timeout=1.0, meta=True)
                assert isinstance(b, dict)  # read by the schema: a dict of fields
            except cistern.EndOfData:
                break
            except TimeoutError:
                if sim.poll() is not None and sim.returncode != 0:
                    raise RuntimeError(f"mpirun exited with status {sim.returncode}")
                continue
            reads += len(meta)
            for i, (_, sim_id, step) in enumerate(meta):
                part = int(round(float(b["part"][i]) * args.np)) if args.mode == "parts" else 0
                key = (int(sim_id), int(step), part)
                duplicates += key in seen
                seen.add(key)
                if not np.allclose(b["params"][i], train[int(sim_id)], atol=1e-6):
                    bad += 1
            if batches < args.batches:
                x = torch.from_numpy(inputs(args, b))
                y = torch.from_numpy(b["u"].reshape(len(meta), -1))
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                batches += 1
        rc = sim.wait(timeout=60)
        val1 = validate()
        st = seg.stats()
        summary = dict(mode=args.mode, remote=args.remote, policy=args.policy, np=args.np,
                       samples_expected=n_samples, distinct_received=len(seen),
                       duplicates=duplicates, wrong_params=bad, reads=reads, batches=batches,
                       val_before=val0, val_after=val1, mpirun_exit_code=rc,
                       wall=time.monotonic() - t0, stats=st)
        log(f"heat_mpi: {len(seen)}/{n_samples} distinct samples received ({reads} reads), "
            f"{batches} batches trained; validation MSE {val0:.5f} -> {val1:.5f}; "
            f"mpirun exited {rc}")
        return summary
    finally:
        for p in (sim, serve):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for f in ("mpirun.log", "serve.log"):
            path = os.path.join(tmp, f)
            if (args.check or not args.quiet) and os.path.exists(path) and \
                    (sim is None or sim.returncode != 0):
                with open(path) as fh:
                    sys.stderr.write(f"--- {f}\n{fh.read()[-4000:]}")
        shutil.rmtree(tmp, ignore_errors=True)
        seg.detach()
        seg.unlink()


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    s = run(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(s, f, indent=1, default=float)
    if args.check:
        problems: List[str] = []
        if s["mpirun_exit_code"] != 0:
            problems.append(f"mpirun exited with status {s['mpirun_exit_code']}")
        if args.policy == "fifo" and (s["distinct_received"] != s["samples_expected"]
                                      or s["duplicates"]):
            problems.append(f"{s['distinct_received']} of {s['samples_expected']} samples "
                            f"arrived, {s['duplicates']} more than once")
        if s["wrong_params"]:
            problems.append(f"{s['wrong_params']} samples carried another simulation's "
                            "parameters")
        if not s["val_after"] < s["val_before"]:
            problems.append(f"validation MSE did not go down ({s['val_before']:.5f} -> "
                            f"{s['val_after']:.5f})")
        if problems:
            sys.exit("heat_mpi.py: " + "; ".join(problems))


if __name__ == "__main__":
    main()
