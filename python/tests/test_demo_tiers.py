# SPDX-License-Identifier: MIT
"""The tiered heat demo (demo/heat_tiers.py --quick) end to end: the same job at
one memory budget, in memory only and with a cold tier on disk."""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

import pytest

import cistern

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

DEMO = os.path.join(os.path.dirname(__file__), "..", "..", "demo", "heat_tiers.py")


@pytest.fixture
def cold_dir():
    """A directory on a disk file system that takes O_DIRECT (not /dev/shm)."""
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="cistern-pyt-tiers-") as d:
        yield d


def _leftovers(pid):
    return glob.glob(f"/dev/shm/cistern.heatt-{pid}-*")


def test_heat_tiers_demo_compares_both_runs_at_the_same_memory(tmp_path, cold_dir):
    out = tmp_path / "tiers.png"
    p = subprocess.Popen([sys.executable, DEMO, "--quick", "--quiet", "--cold-dir", cold_dir,
                          "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        log, _ = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        left = _leftovers(p.pid)
        for f in left:
            cistern.unlink(os.path.basename(f)[len("cistern."):], missing_ok=True)
    assert p.returncode == 0, log
    assert left == []  # the demo removed its segments
    assert os.listdir(cold_dir) == []  # and their cold files
    assert out.stat().st_size > 10000
    assert (tmp_path / "tiers.csv").stat().st_size > 0
    summary = json.loads((tmp_path / "tiers.json").read_text())
    hot = summary["args"]["hot"]
    budget = summary["args"]["batches"]
    res = {r["variant"]: r for r in summary["results"]}
    assert set(res) == {"memory", "tiered"}
    mem, tier = res["memory"], res["tiered"]
    for r in (mem, tier):
        assert r["sim_exit_codes"] == [0, 0]
        assert r["batches"] == budget  # the same number of training steps
        assert all(math.isfinite(v) for _, v in r["val_curve"])
        assert r["puts"] == summary["args"]["sims"] * summary["args"]["steps"]
    # The same memory budget: H hot slots in the tiered run, and the memory
    # run's segment at least as large as the tiered one's.
    assert tier["hot_slots"] == hot
    assert (mem["cold_slots"], tier["cold_slots"]) == (0, summary["args"]["cold_factor"] * hot)
    assert mem["shm_bytes"] >= tier["shm_bytes"]
    assert mem["cold_disk_bytes"] == 0 < tier["cold_disk_bytes"]
    # The tiered run held more distinct samples, some of them read from disk.
    assert tier["held_max"] > mem["held_max"]
    assert tier["cold_held_max"] > 0 and tier["cold_reads"] > 0


def test_heat_tiers_demo_refuses_a_cold_dir_in_memory():
    r = subprocess.run([sys.executable, DEMO, "--quick", "--cold-dir", "/dev/shm"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--cold-dir /dev/shm is on tmpfs" in r.stderr
