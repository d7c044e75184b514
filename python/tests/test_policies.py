# SPDX-License-Identifier: MIT
"""The binding over the non-FIFO policies: FIRO, the reservoirs, pairs and batches."""
import errno

import numpy as np
import pytest

import cistern


def _create(name, policy, **kw):
    try:
        return cistern.create(name, policy=policy, **kw)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            pytest.skip(f"{policy} not implemented by this libcistern")
        raise


def _put_range(seg, n, floats=4, **meta):
    for i in range(n):
        seg.put(np.full(floats, i, dtype=np.float32), sim_id=meta.get("sim_id", 0), time_step=i)


def test_firo_hands_out_each_sample_pseudo_epochs_times(segname):
    with _create(segname, "firo", slots=16, slot_size=16, watermark=1, pseudo_epochs=3) as seg:
        _put_range(seg, 10)
        seg.close_reception()
        got = [int(a[0]) for a in seg.iter_arrays(np.float32, (4,))]
        assert sorted(got) == sorted(list(range(10)) * 3)


def test_firo_waits_above_the_watermark_while_open(segname):
    with _create(segname, "firo", slots=16, slot_size=16, watermark=4) as seg:
        _put_range(seg, 4)
        with pytest.raises(TimeoutError):
            seg.get(timeout=0.05)
        _put_range(seg, 1)
        seg.get(timeout=1)


def test_reservoir_reads_with_replacement_then_drains(segname):
    with _create(segname, "reservoir", slots=8, slot_size=16, watermark=2, seed=5) as seg:
        _put_range(seg, 4)
        reads = [int(seg.get_array(np.float32, (4,), timeout=1)[0]) for _ in range(20)]
        assert set(reads) <= {0, 1, 2, 3} and len(reads) == 20
        assert seg.stats()["population"] == 4  # reads keep the samples while open
        seg.close_reception()
        assert sorted(int(a[0]) for a in seg.iter_arrays(np.float32, (4,))) == [0, 1, 2, 3]


def test_reservoir_get_batch_is_one_gather_of_distinct_samples(segname):
    with _create(segname, "reservoir", slots=16, slot_size=16, watermark=4, seed=3) as seg:
        _put_range(seg, 10)
        batch, metas = seg.get_batch(6, np.float32, (4,), timeout=1, meta=True)
        assert batch.shape == (6, 4)
        assert len(set(batch[:, 0].tolist())) == 6  # distinct within a batch
        np.testing.assert_array_equal(batch[:, 0], metas[:, 2])


def test_acquire_batch_gives_zero_copy_views(segname):
    with _create(segname, "reservoir", slots=16, slot_size=16, watermark=4, seed=9) as seg:
        _put_range(seg, 8)
        g = seg.acquire_batch(5, timeout=1, dtype=np.float32, shape=(4,))
        with g as views:
            assert len(views) == 5
            for v, m in zip(views, g.metas):
                assert not v.flags.writeable and not v.flags.owndata
                assert v[0] == m.time_step
            stacked = g.stack()
            assert stacked.shape == (5, 4)
        assert not g.held
        with pytest.raises(ValueError):
            g.arrays


def test_batch_reservoir_batches_of_batch_size(segname):
    with _create(segname, "batch-reservoir", slots=16, slot_size=16, watermark=4,
                 batch_size=4, seed=2) as seg:
        _put_range(seg, 8)
        batch = seg.get_batch(None, np.float32, (4,), timeout=1)
        assert batch.shape == (4, 4)
        with seg.acquire_batch(timeout=1, dtype=np.float32, shape=(4,)) as views:
            assert len(views) == 4


def test_sim_paired_reservoir_pairs_are_consecutive(segname):
    with _create(segname, "sim-paired-reservoir", slots=32, slot_size=16, watermark=2,
                 sweep_size=4, time_steps=10, seed=4) as seg:
        for sim in range(2):
            for t in range(5):
                seg.put(np.full(4, 100 * sim + t, dtype=np.float32), sim_id=sim, time_step=t)
        pair, metas = seg.get_pair(np.float32, (4,), timeout=1, meta=True)
        assert metas[0].sim_id == metas[1].sim_id
        assert metas[1].time_step == metas[0].time_step + 1
        assert pair[1, 0] == pair[0, 0] + 1
        g = seg.acquire_pair(timeout=1, dtype=np.float32, shape=(4,))
        with g as (x0, x1):
            m0, m1 = g.metas
            assert (m0.sim_id, m0.time_step + 1) == (m1.sim_id, m1.time_step)
            assert x1[0] == x0[0] + 1


def test_sim_paired_reservoir_refuses_out_of_bounds_ids(segname):
    with _create(segname, "sim-paired-reservoir", slots=8, slot_size=16, watermark=2,
                 sweep_size=2, time_steps=4) as seg:
        with pytest.raises(ValueError):
            seg.put(b"x", sim_id=2)
        with pytest.raises(ValueError):
            seg.put(b"x", time_step=4)
