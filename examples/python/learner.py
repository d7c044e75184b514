# SPDX-License-Identifier: MIT
"""A learner: create a segment, read every sample the producers put until end
of data, check each, and remove the segment.

    python3 learner.py NAME [--producers K] [--floats N] [--batch B]

Run it first, then K producers (producer.py NAME --sim-id I ...). It creates
a FIFO segment expecting K producers, so reception closes when the last one
says it is done; each sample must be producer.py's vector for its sim_id and
time_step. It prints one line, "learner: read S samples from K producers",
and exits 1 if a sample was wrong.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import cistern


def expected(sim_id: int, time_step: int, floats: int) -> npt.NDArray[np.float32]:
    """The vector producer.py puts for (sim_id, time_step)."""
    return np.arange(floats, dtype=np.float32) + np.float32(sim_id * 1000 + time_step)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the learner; returns the exit status."""
    p = argparse.ArgumentParser(description="Read and check every sample of the producers.")
    p.add_argument("name", help="segment to create")
    p.add_argument("--producers", type=int, default=1, help="producers expected")
    p.add_argument("--floats", type=int, default=256, help="float32 values per sample")
    p.add_argument("--batch", type=int, default=32, help="samples gathered per read")
    p.add_argument("--slots", type=int, default=64, help="segment capacity")
    a = p.parse_args(argv)
    seg = cistern.create(a.name, policy="fifo", slots=a.slots, slot_size=4 * a.floats,
                         expected_producers=a.producers)
    read = bad = 0
    try:
        for batch, metas in _batches(seg, a.batch, a.floats):
            for row, (_, sim_id, step) in zip(batch, metas.tolist()):
                if not np.array_equal(row, expected(sim_id, step, a.floats)):
                    bad += 1
            read += len(batch)
        print(f"learner: read {read} samples from {a.producers} producers", flush=True)
    finally:
        seg.detach()
        cistern.unlink(a.name, missing_ok=True)
    if bad:
        print(f"learner: {bad} samples were not what their producer put", file=sys.stderr)
    return 1 if bad else 0


def _batches(seg: cistern.Segment, n: int,
             floats: int) -> Iterator[tuple[npt.NDArray[Any], npt.NDArray[Any]]]:
    """get_batch() with metadata until end of data."""
    while True:
        try:
            yield seg.get_batch(n, np.float32, (floats,), meta=True)
        except cistern.EndOfData:
            return


if __name__ == "__main__":
    sys.exit(main())
