# SPDX-License-Identifier: MIT
"""Windows drawn by priority from Python (Segment.get_windows(prioritized=True),
cistern_get_prioritized_windows()): shapes, the law of the draws, weights,
episode ends, updates by a window's id, schemas, tensors, and refusals."""
import numpy as np
import pytest

import cistern

ALPHA, BETA, EPS = 0.8, 0.5, 0.1


def _prio(name, **kw):
    args = dict(policy="prioritized", slots=32, slot_size=16, watermark=1, alpha=ALPHA,
                beta=BETA, epsilon=EPS, sweep_size=4, time_steps=8, seed=11)
    args.update(kw)
    return cistern.create(name, **args)


def _put_episode(seg, sim, steps, q, end_at=None):
    """Step t of sim holds 100 * sim + t and has priority q(t)."""
    for t in steps:
        seg.put(np.full(4, 100 * sim + t, dtype=np.float32), sim_id=sim, time_step=t,
                end_of_episode=(t == end_at), priority=q(t))


def test_a_draw_gives_windows_ids_and_weights_of_the_documented_shapes(segname):
    with _prio(segname) as seg:
        _put_episode(seg, 1, range(8), lambda t: 1.0 + t)
        (x, ids, w), metas = seg.get_windows(6, 3, dtype=np.float32, shape=(4,), timeout=1,
                                             meta=True, prioritized=True)
        assert x.shape == (6, 3, 4) and metas.shape == (6, 3, 4)
        assert ids.shape == (6,) and ids.dtype == np.uint64
        assert w.shape == (6,) and w.dtype == np.float32
        assert ((0 < w) & (w <= 1)).all()
        for win, m in zip(x, metas):
            assert (m[:, 1] == 1).all()
            assert list(m[:, 2]) == [m[0, 2], m[0, 2] + 1, m[0, 2] + 2]
            assert list(win[:, 0]) == [100 + int(t) for t in m[:, 2]]


def test_windows_follow_their_last_members_priority(segname):
    q = {2: 1.0, 3: 4.0, 4: 0.5, 5: 9.0, 6: 2.0, 7: 30.0}
    with _prio(segname) as seg:
        _put_episode(seg, 0, range(8), lambda t: q.get(t, 50.0))
        _, metas = seg.get_windows(4000, 3, dtype=np.float32, shape=(4,), timeout=1,
                                   meta=True, prioritized=True)
        assert len(metas) == 4000
        ends = metas[:, 2, 2].astype(int)
        p = np.array([(q[t] + EPS) ** ALPHA for t in range(2, 8)])
        expected = 4000 * p / p.sum()
        observed = np.array([(ends == t).sum() for t in range(2, 8)])
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        assert chi2 < 38.3, f"chi-square {chi2:.1f} on 5 degrees of freedom (p < 1e-6)"


def test_weights_follow_the_formula_over_the_samples_held(segname):
    q = [3.0, 1.0, 0.2, 5.0, 2.0, 8.0, 0.5, 1.5]
    with _prio(segname) as seg:
        _put_episode(seg, 2, range(8), lambda t: q[t])
        (_, _, w), metas = seg.get_windows(64, 2, step=2, dtype=np.float32, shape=(4,),
                                           timeout=1, meta=True, prioritized=True)
        p = [(v + EPS) ** ALPHA for v in q]
        expect = [(min(p) / p[int(t)]) ** BETA for t in metas[:, 1, 2]]
        np.testing.assert_allclose(w, expect, rtol=1e-4)


def test_a_window_never_crosses_an_end_of_episode(segname):
    with _prio(segname) as seg:
        _put_episode(seg, 0, range(8), lambda t: 1.0, end_at=3)
        _, metas = seg.get_windows(300, 3, dtype=np.float32, shape=(4,), timeout=1,
                                   meta=True, prioritized=True)
        assert {int(t) for t in metas[:, 2, 2]} == {2, 3, 6, 7}
        assert (metas[:, :2, 3] == 0).all(), "no member but the last carries the mark"


def test_an_update_by_a_windows_id_changes_what_is_drawn(segname):
    with _prio(segname) as seg:
        _put_episode(seg, 0, range(8), lambda t: 1.0)
        (_, ids, _), metas = seg.get_windows(200, 3, dtype=np.float32, shape=(4,), timeout=1,
                                             meta=True, prioritized=True)
        at5 = ids[metas[:, 2, 2] == 5]
        assert len(at5) > 0
        assert seg.update_priorities(at5[:1], [1000.0]) == 1
        _, metas = seg.get_windows(256, 3, dtype=np.float32, shape=(4,), timeout=1,
                                   meta=True, prioritized=True)
        # Expected 256 * 1000^0.8 / (1000^0.8 + 5): fewer than 230 has probability below 1e-9.
        assert (metas[:, 2, 2] == 5).sum() >= 230


def test_a_schema_gives_a_dict_of_window_arrays(segname):
    schema = "obs:float32[2];done:bool[]"
    with _prio(segname, slot_size=0, schema=schema) as seg:
        for t in range(4):
            seg.put({"obs": [t, -t], "done": t == 3}, sim_id=0, time_step=t, priority=1.0)
        fields, ids, w = seg.get_windows(5, 2, timeout=1, prioritized=True)
        assert set(fields) == {"obs", "done"}
        assert fields["obs"].shape == (5, 2, 2) and fields["done"].shape == (5, 2)
        assert (fields["obs"][:, 1, 0] == fields["obs"][:, 0, 0] + 1).all()
        assert ids.shape == w.shape == (5,)


def test_plain_get_windows_reads_a_prioritized_segment_too(segname):
    with _prio(segname) as seg:
        _put_episode(seg, 0, range(4), lambda t: 1.0)
        out = seg.get_windows(3, 4, dtype=np.float32, shape=(4,), timeout=1)
        assert out.shape == (3, 4, 4)
        assert (out[:, :, 0] == [0, 1, 2, 3]).all()


def test_windows_are_refused_where_there_are_none(segname):
    with _prio(segname, sweep_size=0, time_steps=0) as seg:
        seg.put(np.zeros(4, dtype=np.float32), priority=1.0)
        with pytest.raises(ValueError, match="sweep_size"):
            seg.get_windows(1, 2, dtype=np.float32, shape=(4,), timeout=0, prioritized=True)
        with pytest.raises(ValueError, match="sweep_size"):
            seg.get_windows(1, 2, dtype=np.float32, shape=(4,), timeout=0)


def test_a_sim_paired_reservoir_has_no_windows_by_priority(segname):
    with cistern.create(segname, policy="sim-paired-reservoir", slots=8, slot_size=16,
                        watermark=1, sweep_size=2, time_steps=4) as seg:
        with pytest.raises(ValueError, match="prioritized"):
            seg.get_windows(1, 2, dtype=np.float32, shape=(4,), timeout=0, prioritized=True)
