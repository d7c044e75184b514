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
