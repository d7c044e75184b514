# SPDX-License-Identifier: MIT
"""cistern.torch under torch.distributed: each rank reads its own segment,
named by a template with "{rank}", and DistributedDataParallel trains as
usual. The ranks are real processes joined in a gloo group on localhost."""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import cistern

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
from cistern.torch import CisternDataset, rank_segment_name  # noqa: E402

if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("this torch has no gloo backend", allow_module_level=True)

RANK_SCRIPT = os.path.join(os.path.dirname(__file__), "ddp_rank.py")
F = 4


def test_rank_field_is_filled_with_the_rank_given():
    assert rank_segment_name("heat.{rank}", 3) == "heat.3"
    ds = CisternDataset("heat-{rank}-x", "float32", (F,), rank=1)
    assert (ds.name, ds.template, ds.rank) == ("heat-1-x", "heat-{rank}-x", 1)


def test_rank_field_without_a_process_group_or_rank_is_refused():
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="init_process_group"):
        CisternDataset("heat.{rank}", "float32", (F,))


def test_rank_given_for_a_name_without_rank_field_is_refused():
    with pytest.raises(ValueError, match="no {rank}"):
        CisternDataset("heat", "float32", (F,), rank=0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fill(name, sim_ids, per_sim):
    """A closed FIFO segment holding per_sim samples of each sim_id: x = the
    sim_id (and the step), y a function of x."""
    seg = cistern.create(name, slots=64, slot_size=(F + 1) * 4)
    for s in sim_ids:
        for t in range(per_sim):
            x = np.array([s, t, 1.0, -1.0], np.float32)
            seg.put(np.append(x, np.float32(0.5 * s - 0.1 * t)), sim_id=s, time_step=t)
    seg.close_reception()
    return seg


def _run_ranks(prefix, tmp_path, world=2):
    port = _free_port()
    # Gloo on loopback, whatever the host name resolves to.
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable, RANK_SCRIPT, str(r), str(world), str(port),
                               prefix, str(tmp_path / f"rank{r}.json")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=180)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("a rank did not finish in 180 s:\n" +
                    "\n".join(f"rank {r}: {p.communicate()[0]}" for r, p in enumerate(procs)))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


def _train_ranks(segname, tmp_path, *fills):
    """Segment segname.r filled by _fill(*fills[r]) for each rank r, the ranks
    run over them, the segments removed; the ranks' records."""
    names = [f"{segname}.{r}" for r in range(len(fills))]
    segs = []
    try:
        for name, (sim_ids, per_sim) in zip(names, fills):
            segs.append(_fill(name, sim_ids, per_sim))
        return _run_ranks(segname, tmp_path, world=len(fills))
    finally:
        for name, s in zip(names, segs):
            s.detach()
            cistern.unlink(name, missing_ok=True)


def test_each_ddp_rank_reads_only_its_own_segment(segname, tmp_path):
    recs = _train_ranks(segname, tmp_path, ([0, 2], 12), ([1, 3], 12))
    for r, rec in enumerate(recs):
        assert rec["name"] == f"{segname}.{r}"
        # Every sample of this rank's segment, once, and none of the other's.
        assert sorted(rec["sim_ids"]) == sorted([r, r + 2] * 12)
        assert sorted(rec["values"]) == sorted(float(s) for s in [r, r + 2] * 12)


def test_ddp_averages_the_gradients_of_ranks_reading_their_own_segments(segname, tmp_path):
    r0, r1 = _train_ranks(segname, tmp_path, ([0, 2], 12), ([1, 3], 12))
    assert len(r0["ddp_grads"]) == len(r1["ddp_grads"]) == 6  # 24 samples, batches of 4
    l0, l1 = np.array(r0["local_grads"]), np.array(r1["local_grads"])
    assert not np.allclose(l0, l1)  # the ranks' data differ, so do their own gradients
    for g in (r0["ddp_grads"], r1["ddp_grads"]):
        np.testing.assert_allclose(g, (l0 + l1) / 2, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(r0["final"], r1["final"], rtol=1e-6)


def test_ddp_ranks_with_uneven_segments_finish_under_join(segname, tmp_path):
    r0, r1 = _train_ranks(segname, tmp_path, ([0, 2], 12), ([1], 8))
    assert (len(r0["ddp_grads"]), len(r1["ddp_grads"])) == (6, 2)
    # While both trained, each step used the average of both gradients.
    l0, l1 = np.array(r0["local_grads"][:2]), np.array(r1["local_grads"])
    np.testing.assert_allclose(r1["ddp_grads"], (l0 + l1) / 2, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(r0["final"], r1["final"], rtol=1e-6)
