# SPDX-License-Identifier: MIT
import numpy as np
import pytest

import cistern


def test_numpy_array_round_trip(fifo):
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    fifo.put(a, sim_id=2, time_step=5)
    b, meta = fifo.get_array(np.float32, (8, 8), meta=True)
    assert b.dtype == np.float32 and b.shape == (8, 8)
    np.testing.assert_array_equal(a, b)
    assert b.flags.writeable and b.flags.owndata  # a private copy
    assert (meta.sim_id, meta.time_step) == (2, 5)


def test_non_contiguous_array_is_put_in_c_order(fifo):
    a = np.arange(36, dtype=np.int32).reshape(6, 6)
    fifo.put(a.T)
    np.testing.assert_array_equal(fifo.get_array(np.int32, (6, 6)), a.T)


def test_get_array_without_shape_is_flat(fifo):
    fifo.put(np.array([1.5, 2.5, 3.5]))
    np.testing.assert_array_equal(fifo.get_array(np.float64), [1.5, 2.5, 3.5])


def test_get_array_with_wrong_size_raises_value_error(fifo):
    fifo.put(np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError):
        fifo.get_array(np.float32, (4,))


def test_get_batch_gathers_into_one_array(fifo):
    for i in range(10):
        fifo.put(np.full(4, i, dtype=np.float32), sim_id=i)
    batch, metas = fifo.get_batch(6, np.float32, (4,), meta=True)
    assert batch.shape == (6, 4)
    np.testing.assert_array_equal(batch[:, 0], np.arange(6))
    np.testing.assert_array_equal(metas[:, 1], np.arange(6))
    fifo.close_reception()
    rest = fifo.get_batch(6, np.float32, (4,))  # short at end of data
    np.testing.assert_array_equal(rest[:, 0], [6, 7, 8, 9])
    with pytest.raises(cistern.EndOfData):
        fifo.get_batch(6, np.float32, (4,))


def test_iter_arrays_until_end_of_data(fifo):
    for i in range(5):
        fifo.put(np.array([i], dtype=np.int64))
    fifo.close_reception()
    assert [int(a[0]) for a in fifo.iter_arrays(np.int64)] == list(range(5))


def test_put_batch_puts_every_row_in_order_with_its_ids(fifo):
    a = np.arange(40, dtype=np.float32).reshape(10, 4)
    ids = fifo.put_batch(a, sim_id=np.arange(10), time_step=3)
    assert ids.dtype == np.uint64 and len(ids) == 10
    np.testing.assert_array_equal(np.diff(ids), np.ones(9))
    batch, metas = fifo.get_batch(10, np.float32, (4,), meta=True)
    np.testing.assert_array_equal(batch, a)
    np.testing.assert_array_equal(metas[:, 0], ids)
    np.testing.assert_array_equal(metas[:, 1], np.arange(10))
    np.testing.assert_array_equal(metas[:, 2], np.full(10, 3))


def test_put_batch_puts_what_fits_before_the_timeout(segname):
    seg = cistern.create(segname, policy="fifo", slots=4, slot_size=64)
    try:
        rows = np.arange(8, dtype=np.int64).reshape(8, 1)
        assert len(seg.put_batch(rows, timeout=0)) == 4
        with pytest.raises(TimeoutError):
            seg.put_batch(rows[4:], timeout=0)
        assert [int(seg.get_array(np.int64)[0]) for _ in range(4)] == [0, 1, 2, 3]
    finally:
        seg.detach()


def test_put_batch_refuses_rows_larger_than_a_slot_and_bad_ids(fifo):
    with pytest.raises(ValueError):
        fifo.put_batch(np.zeros((2, 2048), dtype=np.uint8))
    with pytest.raises(ValueError):
        fifo.put_batch(np.zeros((2, 4), dtype=np.uint8), sim_id=[1, 2, 3])
    with pytest.raises(ValueError):
        fifo.put_batch(np.zeros((2, 4), dtype=np.uint8), time_step=-1)
    assert fifo.stats()["puts"] == 0
