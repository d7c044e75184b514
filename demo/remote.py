#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""remote.py - the heat demo over the network: simulations send their steps to
`cistern serve` over TCP, two learner ranks train one surrogate with
torch.distributed (gloo, DistributedDataParallel), each from its own segment.

What runs, all on this machine, over tcp://127.0.0.1:
- `cistern serve`, bound to a loopback port, with one segment per learner rank
  (`--segment heatr-<pid>.0 --segment heatr-<pid>.1`); it routes the samples of
  simulation s to rank s mod R.
- K simulation processes (demo/heatsim.py, the first demo's 2D heat-equation
  solver), each sending every time step of the simulations it is given with
  cistern.connect(...).put(), then producer_done().
- R learner processes (this script again, --role learner), joined in a gloo
  process group: each reads its own segment through
  cistern.torch.CisternDataset("heatr-<pid>.{rank}") and trains the MLP
  surrogate (parameters, t) -> field under DistributedDataParallel, whose
  all-reduce averages the ranks' gradients. The ranks rarely get the same
  number of batches, so they train under model.join().

Each rank's training budget is --batches batches. Under the reservoir policy
(the default) each segment's rate limiter paces its rank at
(budget * batch_size - capacity) / N_rank reads per put, as the first demo
paces its learner; what is read beyond the budget is drained untrained. The
launcher samples each segment's population while the job runs, then draws the
per-rank population curves and the validation loss on held-out simulations
into a PNG, with a .json summary beside it (per rank: batches, reads, the
sim_ids it saw, its segment's stats; the server's log).

With --netns (root, iproute2) the simulations run in a network namespace of
their own, as on another machine: they reach the server over a veth pair, at
an address that is not loopback, so the server takes CurveZMQ clients only and
the demo makes the keys (`cistern keygen`, cistern.keygen()).

Run from the repository root after building (see demo/README.md):
    /usr/bin/python3 demo/remote.py                 # a minute or two on 2 cores
    bash scripts/demo.sh --remote                   # the same, after setup
    bash scripts/demo.sh --remote --netns           # simulations in their own netns
"""

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import heat  # noqa: E402  (imports cistern from the build tree if needed)
import heatsim  # noqa: E402
import numpy as np  # noqa: E402

import cistern  # noqa: E402

POLICIES = ("fifo", "firo", "reservoir")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sims", type=int, default=12, help="training simulations")
    p.add_argument("--val-sims", type=int, default=2, help="held-out validation simulations")
    p.add_argument("--steps", type=int, default=60, help="time steps recorded per simulation")
    p.add_argument("--grid", type=int, default=16, help="grid size (grid x grid)")
    p.add_argument("--batches", type=int, default=300,
                   help="training budget of each rank, in batches")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--procs", type=int, default=4, help="simulation processes (K)")
    p.add_argument("--ranks", type=int, default=2, help="learner ranks (R)")
    p.add_argument("--policy", default="reservoir", choices=POLICIES)
    p.add_argument("--step-cost", type=float, default=0.03,
                   help="seconds each simulation step takes at least (emulates a costly solver)")
    p.add_argument("--hidden", type=int, default=64, help="MLP width")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cistern", default=None,
                   help="the cistern command (default: $CISTERN_CLI, the build tree's "
                   "tools/cistern, or cistern on PATH)")
    p.add_argument("--time-limit", type=float, default=600.0,
                   help="seconds after which the job is stopped as failed")
    p.add_argument("--out", default="remote.png", help="PNG to write (a .json summary beside it)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--netns", action="store_true",
                   help="run the simulations in a network namespace of their own, reaching "
                        "the server over a veth pair with CurveZMQ (root, iproute2)")
    # Set by the launcher for the learner processes.
    p.add_argument("--role", default="launcher", choices=("launcher", "learner"),
                   help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--gloo-port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--prefix", default="", help=argparse.SUPPRESS)
    p.add_argument("--result", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    for k in ("sims", "val_sims", "steps", "batches", "batch_size", "procs", "ranks"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be >= 1")
    if a.grid < 4:
        p.error("--grid must be >= 4")
    if a.sims < a.ranks:
        p.error("--sims must be at least --ranks: every rank needs a simulation")
    return a


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def network_namespace() -> Iterator[Tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair; yields (namespace,
    this side's address, its side's address) and removes both afterwards."""
    pid = os.getpid()
    ns, host_if, ns_if = f"cistern-demo-{pid}", f"cd{pid}h", f"cd{pid}n"
    net = f"10.213.{pid % 256}"
    host_ip, ns_ip = f"{net}.1", f"{net}.2"

    def ip(*a: str) -> None:
        r = subprocess.run(["ip", *a], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"ip {' '.join(a)}: {r.stderr.strip() or r.returncode}")

    if shutil.which("ip") is None:
        raise RuntimeError("--netns needs the ip command (Debian's iproute2)")
    ip("netns", "add", ns)
    try:
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", ns)
        ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        ip("netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield ns, host_ip, ns_ip
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def find_cli(given: Optional[str]) -> str:
    """The cistern command: --cistern, $CISTERN_CLI, a build tree's, or PATH's."""
    cands = [given, os.environ.get("CISTERN_CLI")]
    for b in (os.environ.get("CISTERN_BUILD", ""), os.path.join(ROOT, "build-py"),
              os.path.join(ROOT, "build")):
        if b:
            cands.append(os.path.join(b, "tools", "cistern"))
    cands.append(shutil.which("cistern"))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit("remote.py: cannot find the cistern command; build it first or pass --cistern")


def rank_samples(args: argparse.Namespace) -> List[int]:
    """Samples routed to each rank (sim_id mod R)."""
    return [sum(1 for s in range(args.sims) if s % args.ranks == r) * args.steps
            for r in range(args.ranks)]


def capacity(args: argparse.Namespace, n_rank: int) -> int:
    cap: int = max(args.batch_size * 2, n_rank // 3)
    return cap


# ---------------------------------------------------------------- learner


def learner(args: argparse.Namespace) -> None:
    """One rank: read this rank's segment, train under DDP, write the result."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from cistern.torch import CisternDataset

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.gloo_port}",
                            rank=args.rank, world_size=args.ranks,
                            timeout=datetime.timedelta(seconds=args.time_limit))
    rank = dist.get_rank()
    floats = heatsim.sample_floats(args.grid)
    bs = args.batch_size
    # "{rank}": each rank reads its own segment, the one serve routes its sims to.
    ds = CisternDataset(args.prefix + ".{rank}", "float32", (floats,), batch_size=bs,
                        with_meta=True)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    net = heat.build_model(torch, args.grid, args.hidden)
    model = DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    rng = np.random.default_rng(args.seed)
    rng.uniform(0.0, 1.0, size=(args.sims, 5))  # the training parameters come first
    val_params = rng.uniform(0.0, 1.0, size=(args.val_sims, 5)).astype(np.float32)
    val_x = heat.validation_set(val_params, args.grid, args.steps)
    vx, vy = torch.from_numpy(val_x[:, :6]), torch.from_numpy(val_x[:, 6:])

    def validate() -> float:
        net.eval()
        with torch.no_grad():
            loss: float = torch.nn.functional.mse_loss(net(vx), vy).item()
        net.train()
        return loss

    t0 = time.monotonic()
    eval_every = max(1, args.batches // 30)
    val_curve = [(0, validate())]
    batches = reads = drained = 0
    sim_ids: "set[int]" = set()
    it = iter(torch.utils.data.DataLoader(ds, batch_size=None))
    # Every rank must take part in every gradient all-reduce; join() lets the
    # ranks that ran out of data (or budget) shadow the others' until all end.
    with model.join():
        for x, meta in it:
            reads += len(x)
            sim_ids.update(meta[:, 1].tolist())
            loss = torch.nn.functional.mse_loss(model(x[:, :6]), x[:, 6:])
            opt.zero_grad()
            loss.backward()  # the gradients of all ranks, averaged
            opt.step()
            batches += 1
            if batches % eval_every == 0:
                val_curve.append((batches, validate()))
            if batches >= args.batches:
                break
    # Past the budget: drain this rank's segment untrained, outside the join.
    for x, meta in it:
        reads += len(x)
        drained += len(x)
        sim_ids.update(meta[:, 1].tolist())
    final_val = validate()  # join() synced the final weights from the last rank
    # DDP's reducer uses the process group: free it first, so that nothing of
    # the group is torn down while the interpreter exits.
    del opt, model
    dist.barrier()
    dist.destroy_process_group()
    res = dict(rank=rank, segment=ds.name, batches=batches, reads=reads, drained=drained,
               sim_ids=sorted(int(s) for s in sim_ids), val_curve=val_curve,
               final_val=final_val, wall=time.monotonic() - t0)
    with open(args.result, "w") as f:
        json.dump(res, f)


# ---------------------------------------------------------------- launcher


def wait_for_server(endpoint: str, serve: "subprocess.Popen[bytes]", limit: float,
                    keys: Dict[str, str]) -> None:
    """Return once the server answers a connection (which then closes cleanly:
    neither done nor died)."""
    deadline = time.monotonic() + limit
    while True:
        if serve.poll() is not None:
            raise RuntimeError(f"cistern serve exited with status {serve.returncode}")
        try:
            cistern.connect(endpoint, connect_timeout=0.5, server_key=keys.get("server_key"),
                            public_key=keys.get("public_key"),
                            secret_key=keys.get("secret_key")).close()
            return
        except (TimeoutError, ConnectionError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"cistern serve did not answer at {endpoint}") from None
            time.sleep(0.1)


def launch(args: argparse.Namespace) -> Dict[str, Any]:
    cli = find_cli(args.cistern)
    floats = heatsim.sample_floats(args.grid)
    bs = args.batch_size
    n_rank = rank_samples(args)
    rng = np.random.default_rng(args.seed)
    train_params = rng.uniform(0.0, 1.0, size=(args.sims, 5)).astype(np.float32)

    # The simulations, dealt round-robin to the K processes; whom each process
    # sends to decides how many producers each rank's segment expects.
    jobs: List[List[List[Any]]] = [[] for _ in range(args.procs)]
    for sim_id, p in enumerate(train_params):
        jobs[sim_id % args.procs].append([sim_id, [float(v) for v in p]])
    expected = [sum(1 for job in jobs if any(s % args.ranks == r for s, _ in job))
                for r in range(args.ranks)]

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    prefix = f"heatr-{os.getpid()}"
    names = [f"{prefix}.{r}" for r in range(args.ranks)]
    segs: List[cistern.Segment] = []
    procs: List["subprocess.Popen[bytes]"] = []
    learners: List["subprocess.Popen[bytes]"] = []
    serve: Optional["subprocess.Popen[bytes]"] = None
    tmp = tempfile.mkdtemp(prefix="cistern-remote-demo-")
    serve_log = os.path.join(tmp, "serve.log")
    stack = contextlib.ExitStack()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the ranks talk over loopback
    if heat.EXTRA_PATH:
        env["PYTHONPATH"] = os.pathsep.join(heat.EXTRA_PATH + [env.get("PYTHONPATH", "")])
    try:
        for r, name in enumerate(names):
            cap = capacity(args, n_rank[r])
            extra: Dict[str, Any] = {}
            if args.policy == "reservoir":
                # The rate limiter paces this rank as the first demo paces its learner.
                extra["reads_per_put"] = max(1.0, (args.batches * bs - cap) / n_rank[r])
                extra["watermark"] = bs
            elif args.policy == "firo":
                extra["watermark"] = cap // 2
                extra["pseudo_epochs"] = max(1, round(args.batches * bs / n_rank[r]))
            segs.append(cistern.create(name, policy=args.policy, slots=cap,
                                       slot_size=floats * 4, expected_producers=expected[r],
                                       **extra))
        keys: Dict[str, str] = {}
        in_ns: List[str] = []
        where = "127.0.0.1"
        cmd = [cli, "serve"]
        if args.netns:
            ns, where, ns_ip = stack.enter_context(network_namespace())
            in_ns = ["ip", "netns", "exec", ns]
            # Not loopback: the server admits CurveZMQ clients only, here one key pair.
            key_file = os.path.join(tmp, "server.key")
            subprocess.run([cli, "keygen", key_file], check=True, capture_output=True)
            with open(key_file + ".pub") as f:
                server_pub = f.read().split()[1]
            client_pub, client_sec = cistern.keygen()
            keys = dict(server_key=server_pub, public_key=client_pub, secret_key=client_sec)
            cmd += ["--key", key_file, "--client-key", client_pub]
            log(f"simulations in network namespace {ns} ({ns_ip}), "
                f"the server on its veth peer {where}")
        endpoint = f"tcp://{where}:{free_port()}"
        cmd += ["--bind", endpoint] + [a for n in names for a in ("--segment", n)]
        log(f"remote demo: {args.sims} simulations x {args.steps} steps "
            f"({args.grid}x{args.grid} grid) from {args.procs} processes over {endpoint} "
            f"to {args.ranks} learner ranks ({args.policy}; samples per rank {n_rank}); "
            f"budget {args.batches} batches of {bs} per rank")
        log("  " + " ".join(cmd))
        with open(serve_log, "wb") as lf:
            serve = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
        wait_for_server(endpoint, serve, 30.0, keys)

        gloo_port = free_port()
        t0 = time.monotonic()
        results = [os.path.join(tmp, f"rank{r}.json") for r in range(args.ranks)]
        common = [a for a in (argv_of(args)) if a]
        for r in range(args.ranks):
            learners.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--role", "learner", "--rank", str(r),
                 "--gloo-port", str(gloo_port), "--prefix", prefix, "--result", results[r]]
                + common, env=env))
        for job in jobs:
            spec = dict(connect=endpoint, keys=keys, grid=args.grid, steps=args.steps,
                        step_cost=args.step_cost, sims=job)
            procs.append(subprocess.Popen(in_ns + [sys.executable,
                                                   os.path.join(HERE, "heatsim.py"),
                                                   json.dumps(spec)], env=env))

        times: List[float] = []
        population: List[List[int]] = [[] for _ in names]
        closed_at: List[Optional[float]] = [None for _ in names]
        last_print = 0.0
        while any(p.poll() is None for p in learners):
            now = time.monotonic() - t0
            if now > args.time_limit:
                raise RuntimeError(f"the job took more than {args.time_limit} s")
            times.append(now)
            for r, s in enumerate(segs):
                st = s.stats()
                population[r].append(st.population)
                if closed_at[r] is None and st.reception_closed:
                    closed_at[r] = now
            if now - last_print >= 1.0:
                last_print = now
                parts = [f"rank {r}: puts {s.stats().puts:>5}/{n_rank[r]} "
                         f"pop {population[r][-1]:>4}" for r, s in enumerate(segs)]
                done = sum(p.poll() is not None for p in procs)
                log(f"[{now:6.1f}s] sims done {done}/{len(procs)}  " + "  ".join(parts))
            time.sleep(0.05)
        for p in procs:
            p.wait(timeout=60)
        rc = [p.returncode for p in learners]
        if any(rc):
            raise RuntimeError(f"a learner rank failed (exit statuses {rc})")
        serve.send_signal(signal.SIGTERM)
        serve_rc = serve.wait(timeout=60)
        ranks = []
        for r, path in enumerate(results):
            with open(path) as f:
                res = json.load(f)
            st = segs[r].stats()
            res.update(times=times, population=population[r], closed_at=closed_at[r],
                       samples=n_rank[r], stats=dict(st),
                       capacity=segs[r].config().slots)
            ranks.append(res)
        with open(serve_log) as f:
            serve_text = f.read()
        return dict(endpoint=endpoint, command=cmd, ranks=ranks, netns=in_ns[-1:],
                    sim_exit_codes=[p.returncode for p in procs], serve_exit_code=serve_rc,
                    serve_log=serve_text.splitlines()[-40:], wall=time.monotonic() - t0)
    finally:
        for p in procs + learners + ([serve] if serve is not None else []):
            if p.poll() is None:
                p.kill()
                p.wait()
        for s in segs:
            s.detach()
        for name in names:
            cistern.unlink(name, missing_ok=True)
        stack.close()
        shutil.rmtree(tmp, ignore_errors=True)


def argv_of(args: argparse.Namespace) -> List[str]:
    """The options a learner rank needs, as the launcher got them."""
    out = []
    for k in ("sims", "val_sims", "steps", "grid", "batches", "batch_size", "ranks", "hidden",
              "lr", "seed", "time_limit"):
        out += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    return out


# ---------------------------------------------------------------- plot


def plot(summary: Dict[str, Any], args: argparse.Namespace, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for r in summary["ranks"]:
        c = colors[r["rank"] % len(colors)]
        ax1.plot(r["times"], r["population"], color=c,
                 label=f"rank {r['rank']} ({r['segment']}, {r['samples']} samples)")
        ax1.axhline(r["capacity"], color=c, ls="--", lw=1)
        if r["closed_at"] is not None:
            ax1.axvline(r["closed_at"], color=c, ls=":", lw=1)
        if r["rank"] == 0:
            xs, ys = zip(*r["val_curve"])
            ax2.plot(xs, ys, color=c, marker=".",
                     label=f"DDP model: final {r['final_val']:.4g}")
    ax1.set_xlabel("seconds since the learners started")
    ax1.set_ylabel("samples in the rank's segment")
    ax1.set_title("Per-rank population (dashed: capacity; dotted: reception closed)")
    ax1.set_ylim(bottom=0)
    ax1.legend(loc="upper right", fontsize=8)
    ax2.set_yscale("log")
    ax2.set_xlabel("training batches (rank 0)")
    ax2.set_ylabel("validation MSE (held-out simulations)")
    batches = ", ".join(f"rank {r['rank']} {r['batches']}" for r in summary["ranks"])
    ax2.set_title(f"DistributedDataParallel over {len(summary['ranks'])} ranks ({batches} batches)")
    ax2.legend(fontsize=8)
    fig.suptitle(f"Heat-equation surrogate trained online over TCP: {args.procs} simulation "
                 f"processes -> cistern serve -> {args.ranks} ranks ({args.policy})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    if args.role == "learner":
        learner(args)
        return
    summary = launch(args)
    print(f"\n{'rank':<6}{'segment':<22}{'samples':>8}{'batches':>8}{'reads':>8}"
          f"{'drained':>8}  sim_ids")
    for r in summary["ranks"]:
        print(f"{r['rank']:<6}{r['segment']:<22}{r['samples']:>8}{r['batches']:>8}"
              f"{r['reads']:>8}{r['drained']:>8}  {r['sim_ids']}")
    final = summary["ranks"][0]["final_val"]
    print(f"final validation MSE of the DDP model: {final:.5f}; "
          f"wall {summary['wall']:.1f}s; cistern serve exited {summary['serve_exit_code']}")
    plot(summary, args, args.out)
    path = os.path.splitext(args.out)[0] + ".json"
    with open(path, "w") as f:
        json.dump(dict(args=vars(args), **summary), f, indent=1, default=float)
    print(f"wrote {args.out} and {path}")


if __name__ == "__main__":
    main()
