# SPDX-License-Identifier: MIT
"""A producer: attach to a learner's segment and write samples into it in
place, without a copy, then say it is done.

    python3 producer.py NAME [--sim-id I] [--steps T] [--floats N]

It waits (up to --wait seconds) for the segment to appear, then writes T
samples, each a float32 vector of N values for (sim_id, time_step), straight
into a reserved slot (Segment.reserve()), and calls producer_done(); the last
producer's done closes reception, and the learner drains what is left.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np

import cistern


def attach_when_there(name: str, wait: float) -> cistern.Segment:
    """Attach to segment `name`, waiting up to `wait` seconds for it to be created."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return cistern.attach(name)
        except (FileNotFoundError, BlockingIOError):  # not yet, or still being created
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the producer; returns the exit status."""
    p = argparse.ArgumentParser(description="Write samples into a learner's segment.")
    p.add_argument("name", help="segment to attach to")
    p.add_argument("--sim-id", type=int, default=0, help="this producer's simulation id")
    p.add_argument("--steps", type=int, default=1000, help="samples to write")
    p.add_argument("--floats", type=int, default=256, help="float32 values per sample")
    p.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the segment")
    a = p.parse_args(argv)
    with attach_when_there(a.name, a.wait) as seg:
        base = np.arange(a.floats, dtype=np.float32)
        try:
            for t in range(a.steps):
                # The with-block commits the sample; an exception inside it aborts it.
                with seg.reserve(np.float32, (a.floats,), sim_id=a.sim_id, time_step=t) as out:
                    np.add(base, np.float32(a.sim_id * 1000 + t), out=out)
        finally:
            seg.producer_done()
    print(f"producer {a.sim_id}: wrote {a.steps} samples", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
