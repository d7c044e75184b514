# SPDX-License-Identifier: MIT
"""The prioritized replay example (examples/prioritized_replay) end to end, at
a small scale: actor processes put transitions, the learner learns under both
samplings, and its curves improve."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numpy")

DEMO = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "prioritized_replay",
                    "chain_replay.py")
UPDATES, EVERY, TRANSITIONS = 2000, 250, 4000


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("chain") / "curves.json"
    r = subprocess.run(
        [sys.executable, DEMO, "--updates", str(UPDATES), "--every", str(EVERY),
         "--transitions", str(TRANSITIONS), "--seed", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout, json.loads(out.read_text())


def test_both_runs_get_every_transition_and_draw_the_whole_budget(result):
    _, res = result
    st = res["settings"]
    for run in (res["uniform"], res["prioritized"]):
        assert run["actor_exit_codes"] == [0] * st["actors"]
        assert run["puts"] == st["actors"] * TRANSITIONS
        assert run["gets"] == UPDATES * st["batch"]
        assert run["updates"] == list(range(EVERY, UPDATES + 1, EVERY))


def test_the_learner_sends_a_priority_back_for_every_sample_drawn(result):
    _, res = result
    st, prio = res["settings"], res["prioritized"]["prio"]
    assert prio["updates"] == UPDATES * st["batch"]
    assert prio["stale_updates"] == 0  # the segment holds every transition: none evicted
    assert prio["beta"] == pytest.approx(1.0)  # annealed to 1 over the updates


def test_both_learning_curves_improve(result):
    _, res = result
    for run in (res["uniform"], res["prioritized"]):
        assert run["q_error"][-1] < 0.75 * run["q_error"][0], run["q_error"]
        assert run["mean_return"][-1] > run["mean_return"][0], run["mean_return"]


def test_prioritized_ends_nearer_the_true_q_than_uniform(result):
    out, res = result
    assert res["prioritized"]["q_error"][-1] < res["uniform"]["q_error"][-1]
    assert out.splitlines()[-1].startswith(f"after {UPDATES} updates: Q error ")
