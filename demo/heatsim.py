# SPDX-License-Identifier: MIT
"""The simulation side of the heat demo: a 2D heat-equation solver that streams
every time step into a cistern segment.

The solver: explicit finite differences (FTCS) on an n x n grid, Dirichlet
boundaries held at four temperatures (top, bottom, left, right), the interior
starting at one initial temperature; all five are the simulation's parameters,
in [0, 1]. It records `steps` snapshots, at t = 0 and then every `substeps`
iterations, chosen so that the last one is close to the steady state.

A sample is float32[6 + n*n]: the 5 parameters, t / (steps - 1), then the field.

Run as a process by heat.py:
    heatsim.py '{"buffer": NAME, "rank": 0, "grid": 32, "steps": 100, "step_cost": 0.04,
                 "sims": [[sim_id, [top, bottom, left, right, init]], ...]}'
It attaches to the segment of that rank of the learner's buffer
(cistern.melissa.attach(NAME, rank)), puts every step of every simulation it is
given, in order, then declares itself done with producer_done() (the last
producer closes reception).

Run by remote.py, it sends to a `cistern serve` server instead:
    heatsim.py '{"connect": "tcp://127.0.0.1:PORT", "grid": 16, ..., "sims": [...]}'
through cistern.connect(), which routes every simulation to learner rank
sim_id mod R; producer_done() waits until the server acknowledged every step.
"""

import json
import math
import sys
import time
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

R = 0.2  # diffusion number alpha*dt/dx^2; FTCS is stable up to 0.25


def substeps(grid: int, steps: int) -> int:
    """Solver iterations between two recorded steps: the slowest mode decays
    about e^-5 over the run, so the last snapshot is near the steady state."""
    decay_per_iter = R * 2 * math.pi ** 2 / (grid - 1) ** 2
    total = 5.0 / decay_per_iter
    return max(1, math.ceil(total / max(1, steps - 1)))


def solve(params: Sequence[float], grid: int,
          steps: int) -> Iterator[Tuple[int, npt.NDArray[np.float32]]]:
    """Yield (t, field) for t = 0 .. steps-1; field is a float32 (grid, grid) array."""
    top, bottom, left, right, init = (float(p) for p in params)
    u = np.full((grid, grid), init, dtype=np.float64)
    u[0, :] = top
    u[-1, :] = bottom
    u[:, 0] = left
    u[:, -1] = right
    sub = substeps(grid, steps)
    for t in range(steps):
        if t > 0:
            for _ in range(sub):
                inner = u[1:-1, 1:-1]
                lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * inner
                u[1:-1, 1:-1] = inner + R * lap
        yield t, u.astype(np.float32)


def sample_vector(params: Sequence[float], t: int, steps: int,
                  field: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The sample layout shared by producer and learner (see the module doc)."""
    head = np.empty(6, dtype=np.float32)
    head[:5] = params
    head[5] = t / max(1, steps - 1)
    return np.concatenate([head, field.ravel()])


def sample_floats(grid: int) -> int:
    return 6 + grid * grid


def put_steps(put: Callable[..., Any], sims: Sequence[Sequence[Any]], grid: int, steps: int,
              step_cost: float) -> None:
    """Solve each simulation and put(sample, sim_id=, time_step=) every step.
    sims: [[sim_id, [top, bottom, left, right, init]], ...], as decoded from JSON."""
    for sim_id, params in sims:
        for t, field in solve(params, grid, steps):
            t0 = time.monotonic()
            put(sample_vector(params, t, steps, field), sim_id=sim_id, time_step=t)
            # step_cost emulates a heavier solver: each step takes at least this long.
            left = step_cost - (time.monotonic() - t0)
            if left > 0:
                time.sleep(left)


def run(buffer: str, rank: int, sims: Sequence[Sequence[Any]], grid: int, steps: int,
        step_cost: float) -> None:
    import cistern.melissa

    seg = cistern.melissa.attach(buffer, rank)
    try:
        put_steps(seg.put, sims, grid, steps, step_cost)
    finally:
        try:
            seg.producer_done()
        finally:
            seg.detach()


def run_remote(endpoint: str, sims: Sequence[Sequence[Any]], grid: int, steps: int,
               step_cost: float, keys: Optional[Dict[str, str]] = None) -> None:
    """run(), sending over the network to the server at `endpoint` (with
    CurveZMQ `keys`, connect()'s server_key, public_key and secret_key, if any)."""
    import cistern

    k = keys or {}
    with cistern.connect(endpoint, server_key=k.get("server_key"), public_key=k.get("public_key"),
                         secret_key=k.get("secret_key")) as out:
        put_steps(out.put, sims, grid, steps, step_cost)
        out.producer_done()


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    if "connect" in job:
        run_remote(job["connect"], job["sims"], job["grid"], job["steps"], job["step_cost"],
                   job.get("keys"))
    else:
        run(job["buffer"], job["rank"], job["sims"], job["grid"], job["steps"],
            job["step_cost"])
