# SPDX-License-Identifier: MIT
"""One rank of the torch.distributed tests in test_torch_distributed.py (not a
test module itself): joins a gloo process group on localhost, reads its own
segment through CisternDataset("<prefix>.{rank}"), trains a tiny linear model
under DistributedDataParallel, and writes what it saw to a JSON file.

    ddp_rank.py RANK WORLD PORT PREFIX OUT_JSON
"""
import datetime
import faulthandler
import json
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from cistern.torch import CisternDataset

F = 4  # features; a sample is float32[F + 1]: x, then the target y


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    # A rank stuck past the test's patience prints where every thread stands.
    faulthandler.dump_traceback_later(150, exit=True)
    prefix, out = sys.argv[4], sys.argv[5]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    ds = CisternDataset(prefix + ".{rank}", "float32", (F + 1,), batch_size=4, with_meta=True,
                        timeout=30)
    torch.manual_seed(0)  # the same initial weights on every rank
    net = torch.nn.Linear(F, 1)
    model = DistributedDataParallel(net)
    # A copy of the weights, stepped with DDP's averaged gradients, that gives
    # this rank's own (local) gradient before each step.
    local = torch.nn.Linear(F, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rec = dict(rank=rank, name=ds.name, sim_ids=[], values=[], local_grads=[], ddp_grads=[])
    with model.join():
        for batch, meta in torch.utils.data.DataLoader(ds, batch_size=None):
            x, y = batch[:, :F], batch[:, F:]
            rec["sim_ids"] += meta[:, 1].tolist()
            rec["values"] += batch[:, 0].tolist()
            local.load_state_dict(net.state_dict())
            local.zero_grad()
            torch.nn.functional.mse_loss(local(x), y).backward()
            rec["local_grads"].append(local.weight.grad.flatten().tolist()
                                      + local.bias.grad.tolist())
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            rec["ddp_grads"].append(net.weight.grad.flatten().tolist() + net.bias.grad.tolist())
            opt.step()
    rec["final"] = net.weight.flatten().tolist() + net.bias.tolist()
    # DDP's reducer uses the process group: free it first, so that nothing of
    # the group is torn down while the interpreter exits.
    del opt, model
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(rec, f)


if __name__ == "__main__":
    main()
