# SPDX-License-Identifier: MIT
import cistern


def test_put_get_bytes_round_trip(fifo):
    sid = fifo.put(b"hello cistern", sim_id=7, time_step=3)
    data, meta = fifo.get(meta=True)
    assert data == b"hello cistern"
    assert meta == cistern.Meta(sample_id=sid, sim_id=7, time_step=3)
    assert fifo.last_meta == meta


def test_fifo_order_is_kept(fifo):
    for i in range(10):
        fifo.put(bytes([i]) * (i + 1))
    assert [fifo.get() for _ in range(10)] == [bytes([i]) * (i + 1) for i in range(10)]


def test_put_accepts_any_buffer(fifo):
    fifo.put(bytearray(b"abc"))
    fifo.put(memoryview(b"xyzw")[1:3])
    fifo.put(memoryview(b"0123456789")[::3])  # non-contiguous: copied first
    assert fifo.get() == b"abc"
    assert fifo.get() == b"yz"
    assert fifo.get() == b"0369"


def test_empty_sample_round_trip(fifo):
    fifo.put(b"")
    assert fifo.get() == b""


def test_attach_sees_the_same_segment(fifo, segname):
    other = cistern.attach(segname)
    try:
        other.put(b"from the other handle")
        assert fifo.get() == b"from the other handle"
        assert other.config() == fifo.config()
    finally:
        other.detach()


def test_segment_context_manager_detaches(segname):
    with cistern.create(segname, slots=4, slot_size=64) as seg:
        seg.put(b"x")
    assert seg.detached
    try:
        seg.get()
    except ValueError:
        pass
    else:
        raise AssertionError("a detached segment must refuse calls")
