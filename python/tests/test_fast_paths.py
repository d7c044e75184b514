# SPDX-License-Identifier: MIT
"""The calls that read into the caller's memory and move many samples a call:
get_into, get_batch_into, put_batch with one sim_id and time_step (put_many),
acquire_many and Group.copy_into. Correctness only: what arrives, in what
order, with what metadata, and that bad input loses nothing."""
import os

import numpy as np
import pytest

import cistern

W = 8  # uint64 words a sample


def rows(start, n):
    a = np.zeros((n, W), dtype=np.uint64)
    a[:, 0] = np.arange(start, start + n, dtype=np.uint64)
    a[:, 1:] = a[:, :1] * 3 + np.arange(1, W, dtype=np.uint64)
    return a


def test_get_into_fills_the_callers_array_and_its_metas(fifo):
    fifo.put(rows(0, 1)[0], sim_id=4, time_step=9)
    out = np.zeros(W, dtype=np.uint64)
    metas = np.zeros(3, dtype=np.uint64)
    assert fifo.get_into(out, metas=metas) == W * 8
    assert out.tolist() == rows(0, 1)[0].tolist()
    assert metas.tolist()[1:] == [4, 9]


def test_get_into_leaves_a_sample_longer_than_the_buffer_in_place(fifo):
    fifo.put(b"x" * 100)
    with pytest.raises(ValueError, match="stays in the segment"):
        fifo.get_into(bytearray(99))
    buf = bytearray(100)
    assert fifo.get_into(buf) == 100 and bytes(buf) == b"x" * 100


def test_get_into_times_out_and_ends(fifo):
    with pytest.raises(TimeoutError):
        fifo.get_into(bytearray(64), timeout=0)
    fifo.close_reception()
    with pytest.raises(cistern.EndOfData):
        fifo.get_into(bytearray(64))


def test_get_into_refuses_a_batch_reservoir_with_the_reads_it_does(segname):
    with cistern.create(segname, policy="batch-reservoir", slots=8, slot_size=64, watermark=2,
                        batch_size=2) as seg:
        seg.put(b"a" * 8)
        with pytest.raises(ValueError, match="whole batches"):
            seg.get_into(bytearray(64), timeout=0)


def test_get_batch_into_takes_the_fifo_in_order_with_metas_and_lengths(fifo):
    fifo.put_batch(rows(0, 10), sim_id=2, time_step=5)
    out = np.zeros((4, W), dtype=np.uint64)
    metas = np.zeros((4, 3), dtype=np.uint64)
    lengths = np.zeros(4, dtype=np.uint64)
    got = []
    while len(got) < 10:
        k = fifo.get_batch_into(out, metas=metas, lengths=lengths)
        assert (out[:k] == rows(len(got), k)).all()
        assert (metas[:k, 1:] == [2, 5]).all() and (lengths[:k] == W * 8).all()
        got.extend(metas[:k, 0].tolist())
    assert got == sorted(got) and len(set(got)) == 10


def test_get_batch_into_returns_what_is_there_rather_than_wait_for_more(fifo):
    fifo.put_batch(rows(0, 3))
    out = np.zeros((8, W), dtype=np.uint64)
    assert fifo.get_batch_into(out, timeout=5) == 3


def test_get_batch_into_serves_firo_each_sample_pseudo_epochs_times(segname):
    with cistern.create(segname, policy="firo", slots=32, slot_size=64, watermark=1,
                        pseudo_epochs=2) as seg:
        seg.put_batch(rows(0, 12))
        seg.close_reception()
        out = np.zeros((5, W), dtype=np.uint64)
        seen = []
        while True:
            try:
                k = seg.get_batch_into(out)
            except cistern.EndOfData:
                break
            seen.extend(out[:k, 0].tolist())
        assert sorted(seen) == sorted(list(range(12)) * 2)


def test_get_batch_into_draws_distinct_samples_from_a_reservoir(segname):
    with cistern.create(segname, policy="reservoir", slots=32, slot_size=64, watermark=8,
                        seed=3) as seg:
        seg.put_batch(rows(0, 20))
        out = np.zeros((8, W), dtype=np.uint64)
        for _ in range(10):
            assert seg.get_batch_into(out) == 8
            ids = out[:, 0].tolist()
            assert len(set(ids)) == 8 and set(ids) <= set(range(20))


def test_get_batch_into_leaves_a_sample_longer_than_a_row_in_place(fifo):
    fifo.put(b"y" * 200)
    out = np.zeros((4, 16), dtype=np.uint8)
    with pytest.raises(ValueError, match="stays in the segment"):
        fifo.get_batch_into(out)
    assert fifo.get() == b"y" * 200


def test_get_batch_into_refuses_pairs(segname):
    with cistern.create(segname, policy="sim-paired-reservoir", slots=8, slot_size=64,
                        watermark=2, sweep_size=2, time_steps=4) as seg:
        with pytest.raises(ValueError, match="pairs"):
            seg.get_batch_into(np.zeros((2, W), dtype=np.uint64))


def test_put_batch_with_one_sim_id_keeps_order_ids_and_metas(fifo):
    ids = fifo.put_batch(rows(0, 6), sim_id=7, time_step=1)
    assert ids.dtype == np.uint64 and ids.tolist() == sorted(ids.tolist()) and len(ids) == 6
    for i in range(6):
        arr, meta = fifo.get_array("uint64", (W,), meta=True)
        assert arr.tolist() == rows(i, 1)[0].tolist()
        assert meta == cistern.Meta(int(ids[i]), 7, 1)


def test_put_batch_puts_what_fits_before_its_timeout(segname):
    with cistern.create(segname, slots=4, slot_size=64) as seg:
        ids = seg.put_batch(rows(0, 6), timeout=0.05)
        assert len(ids) == 4
        with pytest.raises(TimeoutError):
            seg.put_batch(rows(6, 2), timeout=0)


def test_acquire_many_holds_until_release_and_copy_into_gathers(fifo):
    fifo.put_batch(rows(0, 5), sim_id=1, time_step=2)
    g = fifo.acquire_many(3)
    assert len(g) == 3 and g.held
    out = np.zeros((3, W), dtype=np.uint64)
    metas = np.zeros((3, 3), dtype=np.uint64)
    assert g.copy_into(out, metas) == 3
    assert (out == rows(0, 3)).all() and (metas[:, 1:] == [1, 2]).all()
    g.release()
    assert not g.held
    assert fifo.get_array("uint64", (W,))[0] == 3


def test_acquire_many_unacquired_hands_the_samples_out_again_first(fifo):
    fifo.put_batch(rows(0, 4))
    fifo.acquire_many(3).unacquire()
    out = np.zeros((4, W), dtype=np.uint64)
    g = fifo.acquire_many(4)
    g.copy_into(out)
    g.release()
    # Handed back ahead of the rest (in no promised order among themselves).
    assert sorted(out[:3, 0].tolist()) == [0, 1, 2] and out[3, 0] == 3


def test_acquire_many_is_short_at_end_of_data(fifo):
    fifo.put_batch(rows(0, 2))
    fifo.close_reception()
    with fifo.acquire_many(5) as views:
        assert len(views) == 2
    with pytest.raises(cistern.EndOfData):
        fifo.acquire_many(5)


def test_copy_into_refuses_a_row_of_another_size_and_keeps_the_group(fifo):
    fifo.put_batch(rows(0, 2))
    g = fifo.acquire_many(2)
    with pytest.raises(ValueError, match="bytes where"):
        g.copy_into(np.zeros((2, W + 1), dtype=np.uint64))
    with pytest.raises(ValueError, match="room"):
        g.copy_into(np.zeros((1, W), dtype=np.uint64))
    assert g.held
    g.unacquire()
    assert sorted(fifo.get_batch(2, "uint64", (W,))[:, 0].tolist()) == [0, 1]


def test_a_forked_child_still_refuses_its_parents_handle(fifo):
    # The handle's process check reads a pid kept by a fork handler, not getpid().
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fifo.get_into(bytearray(64), timeout=0)
        except RuntimeError:
            code = 0
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
