#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Train a small model with torch's DataLoader or with cistern's, swapped in
by one line, and print the loss and the time of each epoch.

    PYTHONPATH=build/python:python /usr/bin/python3 examples/python/dataloader_swap.py
    ... dataloader_swap.py --loader torch        # the same loop on torch's

The dataset is map-style and in memory (noisy samples of a linear map) with
an augmentation of some cost per sample; the loop is a plain training loop.
With --progress, cistern's loader draws its progress line on stderr.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch
import torch.utils.data

import cistern.torch


class Noisy(torch.utils.data.Dataset):  # type: ignore[misc]
    """Sample i: (x, y) with y = x @ W + noise, x jittered on every read."""

    def __init__(self, n: int, dim: int = 32, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal((n, dim), dtype=np.float32)
        self.w = rng.standard_normal((dim, 1), dtype=np.float32)
        self.y = self.x @ self.w + 0.01 * rng.standard_normal((n, 1), dtype=np.float32)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        jitter = np.random.default_rng(i).standard_normal(self.x.shape[1], dtype=np.float32)
        return self.x[i] + 0.001 * jitter, self.y[i]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loader", choices=("cistern", "torch"), default="cistern")
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--progress", action="store_true", help="cistern's progress line")
    args = ap.parse_args()
    torch.manual_seed(0)
    ds = Noisy(args.samples)
    kw: dict[str, Any] = dict(batch_size=256, shuffle=True, num_workers=args.workers,
                              persistent_workers=True, drop_last=True)
    if args.loader == "cistern":
        # The swap: the same parameters, cistern's DataLoader.
        loader: Any = cistern.torch.DataLoader(ds, progress=args.progress, **kw)
    else:
        loader = torch.utils.data.DataLoader(ds, **kw)
    model = torch.nn.Linear(ds.x.shape[1], 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        t0, total, n = time.perf_counter(), 0.0, 0
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, n = total + float(loss), n + 1
        print(f"{args.loader}: epoch {epoch}: {n} batches, loss {total / n:.5f}, "
              f"{time.perf_counter() - t0:.2f} s", flush=True)
    if args.loader == "cistern":
        loader.close()


if __name__ == "__main__":
    main()
