# SPDX-License-Identifier: MIT
"""`cistern inspect --prometheus` on a prioritized segment a Python learner
used: the cistern_priority_* families give what Segment.prio_info() gives,
and a segment of another policy has none of them."""
import subprocess

import numpy as np

import cistern


def _exposition(cli, name):
    r = subprocess.run([cli, "inspect", name, "--prometheus"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _value(text, family, name):
    prefix = f'{family}{{segment="{name}"}} '
    lines = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, (family, text)
    return float(lines[0][len(prefix):])


def test_priority_families_give_what_prio_info_gives(segname, cistern_cli):
    with cistern.create(segname, policy="prioritized", slots=8, slot_size=8, watermark=1,
                        alpha=0.6, beta=0.4, epsilon=0.05) as seg:
        for i in range(8):
            seg.put(np.float64(i), priority=float(i % 4))
        _, old_ids, _ = seg.get_prioritized(8, "float64")
        # The segment is full: this put evicts one of the samples just drawn.
        seg.put(np.float64(8), timeout=10)
        _, ids, _ = seg.get_prioritized(8, "float64")
        seg.update_priorities(ids, np.linspace(0.5, 3.0, len(ids)))
        seg.update_priorities(old_ids, np.ones(len(old_ids)))  # one left the buffer since
        seg.set_beta(0.9)
        info = seg.prio_info()
        text = _exposition(cistern_cli, segname)
    assert info.stale_updates > 0
    want = {"cistern_priority_alpha": info.alpha, "cistern_priority_beta": info.beta,
            "cistern_priority_epsilon": info.epsilon, "cistern_priority_mass": info.total,
            "cistern_priority_least": info.least, "cistern_priority_max": info.max_priority,
            "cistern_priority_updates_total": info.updates,
            "cistern_priority_stale_updates_total": info.stale_updates,
            "cistern_priority_rebuilds_total": info.rebuilds}
    assert {f: _value(text, f, segname) for f in want} == want


def test_a_fifo_segment_has_no_priority_family(fifo, cistern_cli):
    fifo.put(b"x")
    text = _exposition(cistern_cli, fifo.name)
    assert f'cistern_puts_total{{segment="{fifo.name}"}} 1' in text
    assert "cistern_priority_" not in text
