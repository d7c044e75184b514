# SPDX-License-Identifier: MIT
"""Prioritized sampling from Python: draws with ids and weights, priorities
sent back, bad priorities refused, schema segments, torch tensors, and an
actor process putting while the learner draws."""
import math
import os

import numpy as np
import pytest

import cistern

ALPHA, BETA, EPS = 0.7, 0.6, 0.1


def _prio(name, slots=16, **kw):
    args = dict(policy="prioritized", slots=slots, slot_size=8, watermark=1, alpha=ALPHA,
                beta=BETA, epsilon=EPS)
    args.update(kw)
    return cistern.create(name, **args)


@pytest.fixture
def seg(segname):
    s = _prio(segname)
    yield s
    s.detach()


def _fill(seg, priorities):
    """Sample i holds float64 i and has priority priorities[i]."""
    for i, q in enumerate(priorities):
        seg.put(np.float64(i), priority=q)


def test_a_draw_gives_samples_ids_and_weights_of_the_documented_shapes(seg):
    _fill(seg, [1.0] * 8)
    x, ids, w = seg.get_prioritized(5, "float64", (1,))
    assert x.shape == (5, 1) and x.dtype == np.float64
    assert ids.shape == (5,) and ids.dtype == np.uint64
    assert w.shape == (5,) and w.dtype == np.float32
    assert set(x.ravel()) <= set(range(8))


def test_weights_follow_the_formula_from_the_priorities(seg):
    q = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0]
    _fill(seg, q)
    p = [(v + EPS) ** ALPHA for v in q]
    n = len(q)
    x, _, w = seg.get_prioritized(64, "float64")
    expect = [(n * p[int(i)] / sum(p)) ** -BETA / max((n * pj / sum(p)) ** -BETA for pj in p)
              for i in x]
    np.testing.assert_allclose(w, expect, rtol=1e-4)


def test_prio_info_gives_the_totals_the_weights_come_from(seg):
    _fill(seg, [1.0, 3.0])
    info = seg.prio_info()
    p = [(1.0 + EPS) ** ALPHA, (3.0 + EPS) ** ALPHA]
    assert info.total == pytest.approx(sum(p), rel=1e-4)
    assert info.least == pytest.approx(min(p), rel=1e-4)
    assert info.max_priority == 3.0
    x, _, w = seg.get_prioritized(32, "float64")
    for i, wi in zip(x, w):
        assert wi == pytest.approx((info.least / p[int(i)]) ** info.beta, rel=1e-4)


def test_set_beta_changes_the_weights_of_the_next_draws(seg):
    _fill(seg, [1.0, 3.0])
    seg.set_beta(1.0)
    assert seg.prio_info().beta == 1.0
    x, _, w = seg.get_prioritized(32, "float64")
    ratio = ((1.0 + EPS) / (3.0 + EPS)) ** ALPHA
    np.testing.assert_allclose(w, [1.0 if i == 0 else ratio for i in x], rtol=1e-4)


def test_the_config_carries_alpha_beta_and_epsilon(seg):
    cfg = seg.config()
    assert (cfg.policy, cfg.alpha, cfg.beta, cfg.epsilon) == ("prioritized", ALPHA, BETA, EPS)


def test_create_refuses_an_alpha_out_of_range_naming_it(segname):
    with pytest.raises(ValueError, match="alpha"):
        _prio(segname, alpha=9.0)


def test_a_huge_priority_makes_its_sample_dominate_the_draws(seg):
    _fill(seg, [1.0] * 16)
    x, ids, _ = seg.get_prioritized(64, "float64")
    assert np.mean(x == x[0]) < 0.5  # uniform before the update
    assert seg.update_priorities(ids[:1], [1e6]) == 1
    after, _, _ = seg.get_prioritized(256, "float64")
    assert np.mean(after == x[0]) > 0.95


def test_update_priorities_takes_lists_and_counts_what_it_applied(seg):
    _fill(seg, [1.0] * 4)
    _, ids, _ = seg.get_prioritized(3, "float64")
    assert seg.update_priorities([int(i) for i in ids], [2, 3, 4]) == 3
    assert seg.prio_info().updates == 3


def test_ids_of_samples_taken_out_are_counted_as_stale(seg):
    _fill(seg, [1.0] * 4)
    seg.close_reception()
    _, ids, _ = seg.get_prioritized(4, "float64")  # after close: each draw takes it out
    assert len(ids) == 4
    assert seg.update_priorities(ids, [5.0] * 4) == 0
    assert seg.prio_info().stale_updates == 4


@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf])
def test_a_bad_priority_in_an_update_raises_and_applies_nothing(seg, bad):
    _fill(seg, [1.0] * 4)
    _, ids, _ = seg.get_prioritized(3, "float64")
    with pytest.raises(ValueError, match=r"priorities\[1\] is .*finite and >= 0"):
        seg.update_priorities(ids, [2.0, bad, 3.0])
    assert seg.prio_info().updates == 0


@pytest.mark.parametrize("bad", [math.nan, -0.5])
def test_a_bad_priority_in_a_put_raises_and_puts_nothing(seg, bad):
    with pytest.raises(ValueError, match="finite and >= 0"):
        seg.put(np.float64(1), priority=bad)
    assert seg.stats().puts == 0


def test_ids_and_priorities_of_different_lengths_are_refused(seg):
    _fill(seg, [1.0] * 4)
    _, ids, _ = seg.get_prioritized(2, "float64")
    with pytest.raises(ValueError, match="2 ids but 3 priorities"):
        seg.update_priorities(ids, [1.0, 2.0, 3.0])


def test_prioritized_calls_on_another_policy_say_so(segname):
    with cistern.create(segname, policy="reservoir", slots=4, slot_size=8, watermark=1) as s:
        s.put(np.float64(1))
        with pytest.raises(ValueError, match="not prioritized"):
            s.get_prioritized(1, "float64")
        with pytest.raises(ValueError, match="not prioritized"):
            s.put(np.float64(1), priority=1.0)


def test_get_batch_reads_a_prioritized_segment(seg):
    _fill(seg, [1.0] * 4)
    assert seg.get_batch(3, "float64").shape == (3,)


def test_a_schema_segment_gives_dicts_of_arrays(segname):
    sch = {"obs": ("float32", (2,)), "action": ("int64", ())}
    with _prio(segname, slot_size=0, schema=sch) as s:
        s.put({"obs": [1, 2], "action": 3}, priority=1.0)
        s.put({"obs": [3, 4], "action": 5}, priority=2.0)
        fields, ids, w = s.get_prioritized(6)
        assert set(fields) == {"obs", "action"}
        assert fields["obs"].shape == (6, 2) and fields["action"].shape == (6,)
        for obs, a in zip(fields["obs"], fields["action"]):
            assert [list(obs), a] in ([[1, 2], 3], [[3, 4], 5])
        assert ids.shape == w.shape == (6,)


def test_cistern_torch_gives_tensors_whose_ids_update_priorities_takes(seg):
    torch = pytest.importorskip("torch")
    import cistern.torch as ct
    _fill(seg, [1.0] * 4)
    x, ids, w = ct.get_prioritized(seg, 5, "float64")
    assert isinstance(x, torch.Tensor) and x.shape == (5,)
    assert ids.dtype == torch.int64 and w.dtype == torch.float32 and w.shape == (5,)
    assert seg.update_priorities(ids, torch.ones(5)) == 5


def _actor(name, n):
    """A forked producer: attach by name, put n samples with priority = value."""
    code = 1
    try:
        s = cistern.attach(name, producer=True)
        for i in range(n):
            s.put(np.float64(i), priority=float(i % 7), timeout=30)
        s.producer_done()
        s.detach()
        code = 0
    finally:
        os._exit(code)


def test_a_forked_actor_puts_with_priorities_while_the_learner_draws(segname):
    n = 400
    with _prio(segname, slots=32, expected_producers=1) as s:
        pid = os.fork()
        if pid == 0:
            _actor(segname, n)
        applied = drawn = 0
        while True:
            try:
                x, ids, w = s.get_prioritized(8, "float64", timeout=30)
            except cistern.EndOfData:
                break
            assert ((w > 0) & (w <= 1)).all()
            drawn += len(x)
            applied += s.update_priorities(ids, np.abs(x) + 1.0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert s.stats().puts == n
        assert drawn >= n and applied > 0
        assert s.prio_info().updates == applied
