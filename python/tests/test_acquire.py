# SPDX-License-Identifier: MIT
import numpy as np
import pytest

import cistern


def test_acquire_gives_a_read_only_zero_copy_view(fifo):
    fifo.put(np.arange(16, dtype=np.float32), sim_id=4, time_step=9)
    s = fifo.acquire(dtype=np.float32, shape=(4, 4))
    with s as view:
        assert view.shape == (4, 4) and view.dtype == np.float32
        assert not view.flags.writeable
        assert not view.flags.owndata
        # the view points into the segment, at the payload the library handed out
        assert view.__array_interface__["data"][0] == s._s.address
        np.testing.assert_array_equal(view.ravel(), np.arange(16))
        with pytest.raises(ValueError):
            view[0, 0] = 1.0
        assert s.meta.sim_id == 4 and s.meta.time_step == 9
    assert not s.held


def test_released_sample_raises_instead_of_crashing(fifo):
    fifo.put(b"payload")
    s = fifo.acquire()
    mv = s.view
    assert bytes(mv) == b"payload"
    s.release()
    for access in (lambda: s.array, lambda: s.view, s.tobytes, s.copy,
                   lambda: memoryview(s._s), lambda: mv[0]):
        with pytest.raises(ValueError):
            access()
    s.release()  # idempotent


def test_old_view_stays_mapped_after_release_and_detach(segname):
    seg = cistern.create(segname, slots=4, slot_size=64)
    seg.put(b"abcd")
    with seg.acquire() as view:
        pass
    seg.detach()
    # Undefined contents, but never a fault: the mapping outlives every view.
    assert view.shape == (4,)
    _ = view.sum()
    del view


def test_fifo_sample_held_is_not_handed_to_others(fifo, segname):
    fifo.put(b"one")
    fifo.put(b"two")
    other = cistern.attach(segname)
    try:
        with fifo.acquire() as view:
            assert bytes(view) == b"one"
            assert other.get() == b"two"
            with pytest.raises(TimeoutError):
                other.get(timeout=0)
    finally:
        other.detach()


def test_detach_releases_held_samples(fifo, segname):
    fifo.put(b"x")
    s = fifo.acquire()
    fifo.detach()
    assert not s.held
    with pytest.raises(ValueError):
        s.array


def test_a_misshapen_get_array_leaves_the_fifo_sample_in_place(fifo):
    fifo.put(np.arange(16, dtype=np.float32))
    fifo.put(np.arange(16, 32, dtype=np.float32))
    with pytest.raises(ValueError, match="stays in the segment"):
        fifo.get_array("float32", (32,))
    assert fifo.stats()["population"] == 2
    assert fifo.get_array("float32", (4, 4))[0, 1] == 1.0


def test_a_misshapen_acquire_leaves_the_fifo_sample_in_place(fifo):
    fifo.put(np.arange(6, dtype=np.float64))
    for dtype, shape in (("float64", (4,)), ("float32", (5,)), ("float64", (-1, 4))):
        with pytest.raises(ValueError, match="does not fit"):
            fifo.acquire(dtype=dtype, shape=shape)
        assert fifo.stats()["population"] == 1
    with fifo.acquire(dtype="float64", shape=(-1, 3)) as view:
        assert view.shape == (2, 3) and view[1, 2] == 5.0
    assert fifo.stats()["gets"] == 1


def test_unacquire_hands_the_fifo_sample_out_again_first(fifo):
    for b in (b"a", b"b"):
        fifo.put(b)
    s = fifo.acquire()
    assert s.tobytes() == b"a"
    s.unacquire()
    with pytest.raises(ValueError):
        s.unacquire()
    assert fifo.stats()["gets"] == 0
    assert fifo.get() == b"a" and fifo.get() == b"b"


def test_a_misshapen_batch_is_handed_back_unseen(segname):
    with cistern.create(segname, policy="reservoir", slots=16, slot_size=64,
                        watermark=4) as seg:
        for i in range(8):
            seg.put(np.full(4, i, np.float32))
        with pytest.raises(ValueError, match="stays in the segment"):
            seg.acquire_batch(4, dtype="float32", shape=(8,))
        assert seg.stats()["gets"] == 0
        with seg.acquire_batch(4, dtype="float32", shape=(4,)) as views:
            assert len(views) == 4 and all(v.shape == (4,) for v in views)


def test_a_misshapen_get_batch_after_close_takes_no_sample(segname):
    with cistern.create(segname, policy="reservoir", slots=16, slot_size=64,
                        watermark=4) as seg:
        for i in range(8):
            seg.put(np.full(4, i, np.float32))
        seg.close_reception()  # from now on a batch removes what it returns
        with pytest.raises(ValueError, match="batch stays in the segment"):
            seg.get_batch(4, "float32", (8,))
        assert seg.stats()["population"] == 8 and seg.stats()["gets"] == 0
        rows = seg.get_batch(8, "float32", (4,))
        assert sorted(rows[:, 0]) == list(range(8))
        assert seg.stats()["population"] == 0
