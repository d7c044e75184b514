# SPDX-License-Identifier: MIT
"""mpi_kill.py BUILDDIR - kill an MPI rank of a running simulation mid-step and
check that nothing it sent is lost.

examples/heat_mpi runs on 2 ranks in parts-log mode: every rank sends its part
of the field each step, into a FIFO segment, and prints a line once a step is
in. Once rank 1 printed a few steps, it is killed (SIGKILL) wherever it is in
its step, and mpirun takes the job down. Then every step either rank printed
must be in the segment, whole (its parameters and its part as sent), exactly
once; nothing half-written may be there; and the segment must count the killed
producers as died.
Exit 0 on success, 1 with the reason otherwise.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

build = os.path.abspath(sys.argv[1])
sys.path[:0] = [os.path.join(build, "python"),
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")]
import cistern  # noqa: E402
import numpy as np  # noqa: E402

GRID, STEPS, RANKS = 16, 100000, 2
PARAMS = [0.1, 0.2, 0.3, 0.4, 0.5]


def fail(why: str) -> None:
    print(f"mpi kill check: {why}", file=sys.stderr)
    sys.exit(1)


prog = os.path.join(build, "examples", "heat_mpi")
if not os.access(prog, os.X_OK):
    fail(f"{prog} was not built (cistern found no gfortran or MPI at configure time; "
         "scripts/setup.sh installs them)")

name = f"mpikill-{os.getpid()}"
rows = GRID // RANKS
seg = cistern.create(name, policy="fifo", slots=4096, expected_producers=RANKS,
                     schema=f"params:float32[5];t:float32[];part:float32[];u:float32[{rows},{GRID}]")
log = tempfile.NamedTemporaryFile(prefix="cistern-mpi-kill-", suffix=".log", delete=False)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
mpirun = subprocess.Popen(["mpirun", "-np", str(RANKS), "--oversubscribe",
                           "--mca", "mpi_yield_when_idle", "1", prog, name, "parts-log",
                           str(GRID), str(STEPS), "2", "7"] + [str(p) for p in PARAMS],
                          stdout=log, stderr=subprocess.STDOUT, env=env)


def rank_pid(rank: int) -> int:
    """The pid of MPI rank `rank` among mpirun's children, or 0."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun.pid:
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"OMPI_COMM_WORLD_RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(d)
        except (OSError, IndexError, ValueError):
            continue
    return 0


def sent() -> set:
    with open(log.name) as f:
        return {(int(m[1]), int(m[2])) for m in
                re.finditer(r"^rank (\d+) sim 7 step (\d+) sent$", f.read(), re.M)}


try:
    deadline = time.monotonic() + 120
    while sum(1 for r, _ in sent() if r == 1) < 20:
        if mpirun.poll() is not None:
            fail(f"mpirun exited with status {mpirun.returncode} before the kill:\n"
                 + open(log.name).read()[-2000:])
        if time.monotonic() > deadline:
            fail("rank 1 did not send 20 steps in 120 s")
        time.sleep(0.02)
    victim = rank_pid(1)
    if not victim:
        fail("cannot find rank 1 among mpirun's children")
    os.kill(victim, signal.SIGKILL)
    try:
        mpirun.wait(timeout=60)
    except subprocess.TimeoutExpired:
        fail("mpirun did not end within 60 s of its rank 1 being killed")
finally:
    if mpirun.poll() is None:
        mpirun.kill()
        mpirun.wait()

try:
    logged = sent()
    got = {}
    while True:
        try:
            b, meta = seg.get_batch(256, timeout=0, meta=True)
        except (TimeoutError, BlockingIOError, cistern.EndOfData):
            break
        for i, (_, sim_id, step) in enumerate(meta):
            part = int(round(float(b["part"][i]) * RANKS))
            key = (part, int(step))
            if sim_id != 7 or key in got:
                fail(f"sample of sim {sim_id}, rank {part}, step {step} arrived twice or "
                     "from nowhere")
            got[key] = (b["params"][i].copy(), b["u"][i].copy())
    missing = sorted(logged - set(got))
    if missing:
        fail(f"{len(missing)} steps the ranks had sent are missing, the first "
             f"(rank, step) {missing[0]}")
    # Every sample is whole: the parameters and the part the solver computed.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "demo"))
    import heatsim  # noqa: E402
    last = max(step for _, step in got)
    ref = {}
    for t, field in heatsim.solve(PARAMS, GRID, STEPS):
        ref[t] = field
        if t >= last:
            break
    for (part, step), (params, u) in got.items():
        if not np.array_equal(params, np.array(PARAMS, dtype=np.float32)):
            fail(f"rank {part} step {step}: parameters {params} are not those sent")
        want = ref[step][part * rows:(part + 1) * rows]
        if not np.allclose(u, want, atol=1e-5):
            fail(f"rank {part} step {step}: the field is not the one the solver computed")
    cistern.gc(name)
    st = seg.stats()
    if st["producers_died"] != RANKS or st["producers_done"] != 0:
        fail(f"the segment counts {st['producers_died']} producers died and "
             f"{st['producers_done']} done, not {RANKS} and 0")
    print(f"mpi kill check: rank 1 killed after {sum(1 for r, _ in logged if r == 1)} steps; "
          f"all {len(logged)} steps the ranks said were sent are in the segment, whole, once "
          f"({len(got)} samples in all); {RANKS} producers counted died")
finally:
    seg.detach()
    seg.unlink()
    os.unlink(log.name)
