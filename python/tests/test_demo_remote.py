# SPDX-License-Identifier: MIT
"""The remote heat demo (demo/remote.py) end to end, at a toy scale: `cistern
serve` on loopback, simulation processes sending with cistern.connect(), two
DDP learner ranks each reading its own segment."""
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")
dist = pytest.importorskip("torch.distributed")

DEMO = os.path.join(os.path.dirname(__file__), "..", "..", "demo", "remote.py")


def _run(tmp_path, cistern_cli, *extra):
    out = tmp_path / "remote.png"
    r = subprocess.run(
        [sys.executable, DEMO, "--sims", "5", "--val-sims", "1", "--steps", "12", "--grid", "8",
         "--procs", "4", "--batches", "12", "--batch-size", "8", "--step-cost", "0.002",
         "--quiet", "--time-limit", "200", "--cistern", cistern_cli, "--out", str(out), *extra],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.stat().st_size > 10000
    return json.loads((tmp_path / "remote.json").read_text())


def test_remote_demo_routes_every_simulation_to_one_rank_and_trains(tmp_path, cistern_cli):
    s = _run(tmp_path, cistern_cli, "--policy", "fifo")
    assert s["sim_exit_codes"] == [0, 0, 0, 0]
    assert s["serve_exit_code"] == 0
    ranks = {r["rank"]: r for r in s["ranks"]}
    assert set(ranks) == {0, 1}
    for r, x in ranks.items():
        # Sims 0..4 over 2 ranks: rank 0 gets 0, 2, 4 and rank 1 gets 1, 3, each whole.
        assert x["sim_ids"] == [i for i in range(5) if i % 2 == r]
        assert x["samples"] == len(x["sim_ids"]) * 12
        assert x["reads"] == x["samples"]  # FIFO over TCP: every step exactly once
        assert x["stats"]["puts"] == x["samples"]
        assert x["stats"]["reception_closed"]
        assert x["population"][-1] == 0
        assert x["batches"] >= 1
    assert ranks[0]["final_val"] == pytest.approx(ranks[1]["final_val"])  # one DDP model


def test_remote_demo_under_reservoir_drains_every_rank(tmp_path, cistern_cli):
    s = _run(tmp_path, cistern_cli)  # the default policy
    for x in s["ranks"]:
        assert x["stats"]["puts"] == x["samples"]
        assert 1 <= x["batches"] <= 12  # within the budget
        assert x["reads"] >= x["samples"]  # a reservoir evicts only samples already read
        assert x["population"][-1] == 0 and x["stats"]["reception_closed"]


def _netns_problem():
    """Why this machine cannot make a network namespace with a veth pair, or None."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "needs root and the ip command"
    ns, a, b = f"cistern-probe-{os.getpid()}", f"cp{os.getpid()}a", f"cp{os.getpid()}b"
    try:
        for cmd in (["netns", "add", ns], ["link", "add", a, "type", "veth", "peer", "name", b]):
            r = subprocess.run(["ip", *cmd], capture_output=True, text=True)
            if r.returncode != 0:
                return f"ip {' '.join(cmd)}: {r.stderr.strip()}"
        return None
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_remote_demo_runs_its_simulations_in_another_network_namespace(tmp_path, cistern_cli):
    why = _netns_problem()
    if why:
        pytest.skip(f"no network namespace here: {why}")
    s = _run(tmp_path, cistern_cli, "--policy", "fifo", "--netns")
    assert s["sim_exit_codes"] == [0, 0, 0, 0] and s["serve_exit_code"] == 0
    assert s["netns"] and not s["endpoint"].startswith("tcp://127.")
    log = "\n".join(s["serve_log"])
    # a bind that is not loopback: CurveZMQ, and every simulation came from the namespace
    assert "--key" in s["command"] and "(CurveZMQ)" in log, log
    peer = s["endpoint"][len("tcp://"):].rsplit(":", 1)[0].rsplit(".", 1)[0] + ".2"
    assert log.count(f"connected from {peer}") >= 4, log
    for x in s["ranks"]:
        assert x["reads"] == x["samples"] == x["stats"]["puts"]
        assert x["stats"]["reception_closed"]
