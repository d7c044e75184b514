# SPDX-License-Identifier: MIT
"""The heat demo (demo/heat.py) end to end, at a toy scale."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

DEMO = os.path.join(os.path.dirname(__file__), "..", "..", "demo", "heat.py")


def test_heat_demo_runs_every_policy_and_writes_its_outputs(tmp_path):
    out = tmp_path / "heat.png"
    r = subprocess.run(
        [sys.executable, DEMO, "--sims", "3", "--val-sims", "1", "--steps", "20", "--grid", "8",
         "--procs", "2", "--batches", "40", "--batch-size", "8", "--step-cost", "0.005",
         "--quiet", "--out", str(out)],
        capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.stat().st_size > 10000
    summary = json.loads((tmp_path / "heat.json").read_text())
    res = {x["policy"]: x for x in summary["results"]}
    assert set(res) == {"fifo", "firo", "reservoir"}
    assert res["fifo"]["reads"] == 60  # each sample exactly once
    assert res["firo"]["reads"] == 60 * res["firo"]["pseudo_epochs"]
    for x in res.values():
        assert x["sim_exit_codes"] == [0, 0]
        assert x["population"][-1] == 0  # drained
        assert x["stats"]["reception_closed"]
        # The buffer came from cistern.melissa.make_buffer(), its metrics through
        # the metric_logger it was given.
        assert x["buffer_metrics"]["buffer/puts"] == 60
