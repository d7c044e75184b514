# SPDX-License-Identifier: MIT
"""Zero-copy writes: Segment.reserve() and its Reservation."""
import gc

import numpy as np
import pytest

import cistern


def test_reserve_block_commits_what_was_written_in_place(fifo):
    with fifo.reserve("float32", (4, 8), sim_id=7, time_step=3) as out:
        assert out.shape == (4, 8) and out.flags.writeable
        out[...] = np.arange(32, dtype=np.float32).reshape(4, 8)
    sid = fifo.last_meta.sample_id
    a, m = fifo.get_array("float32", (4, 8), timeout=0, meta=True)
    np.testing.assert_array_equal(a, np.arange(32).reshape(4, 8))
    assert m == cistern.Meta(sid, 7, 3)


def test_reserve_block_left_by_an_exception_aborts_the_sample(fifo):
    with pytest.raises(KeyError):
        with fifo.reserve("uint8", (16,)) as out:
            out[:] = 1
            raise KeyError("simulation failed")
    assert fifo.stats().population == 0
    with pytest.raises(TimeoutError):
        fifo.get(timeout=0)
    fifo.put(b"next")  # the slot went back: the ring moves on
    assert fifo.get(timeout=0) == b"next"


def test_reserve_refuses_a_shape_larger_than_a_slot_and_reserves_nothing(fifo):
    with pytest.raises(ValueError, match="more than a slot"):
        fifo.reserve("float64", (129,))  # 1032 bytes > 1024
    fifo.put(b"x")
    assert fifo.stats().puts == 1 and fifo.get(timeout=0) == b"x"


def test_reserve_array_is_read_only_after_the_block(fifo):
    with fifo.reserve("int32", (2,)) as out:
        out[:] = (5, 6)
    assert not out.flags.writeable
    with pytest.raises(ValueError):
        out[0] = 9


def test_reservation_commit_publishes_the_bytes_asked_with_their_meta(fifo):
    r = fifo.reserve()
    assert r.capacity == 1024 and r.live
    r.view[:5] = b"hello"
    sid = r.commit(5, sim_id=2, time_step=9)
    assert not r.live and r.sample_id == sid
    assert fifo.get(timeout=0, meta=True) == (b"hello", cistern.Meta(sid, 2, 9))


def test_reservation_refuses_a_second_end(fifo):
    r = fifo.reserve("uint8", (1,))
    r.abort()
    r.abort()  # idempotent
    with pytest.raises(ValueError, match="already committed or aborted"):
        r.commit()
    with pytest.raises(ValueError, match="already committed or aborted"):
        r.array


def test_reservation_dropped_open_is_aborted(fifo):
    r = fifo.reserve("uint8", (3,))
    r.array[:] = 1
    del r
    gc.collect()
    fifo.put(b"after")
    assert fifo.get(timeout=0) == b"after"
    assert fifo.stats().puts == 1


def test_detach_aborts_open_reservations(segname):
    seg = cistern.create(segname, slots=4, slot_size=64)
    r = seg.reserve("uint8", (8,))
    view = r.array  # keeps the mapping alive past detach
    seg.detach()
    assert not r.live
    with cistern.attach(segname) as other:
        assert other.stats().population == 0
        other.put(b"y")
        assert other.get(timeout=0) == b"y"
    assert view.shape == (8,)


def test_reserve_waits_for_room_and_times_out(segname):
    with cistern.create(segname, slots=2, slot_size=64) as seg:
        seg.put(b"a")
        seg.put(b"b")
        with pytest.raises(TimeoutError):
            seg.reserve("uint8", (1,), timeout=0.05)


def test_reserve_after_close_raises_broken_pipe(fifo):
    fifo.close_reception()
    with pytest.raises(BrokenPipeError):
        fifo.reserve("uint8", (1,))
