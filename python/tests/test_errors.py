# SPDX-License-Identifier: MIT
import errno
import os
import struct
import time

import numpy as np
import pytest

import cistern


def test_get_timeout_raises_timeout_error(fifo):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        fifo.get(timeout=0.1)
    assert 0.08 <= time.monotonic() - t0 < 2.0


def test_get_timeout_zero_tries_once(fifo):
    with pytest.raises(TimeoutError):
        fifo.get(timeout=0)


def test_long_timeout_spans_several_wait_slices(fifo):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        fifo.acquire(timeout=0.45)  # more than two slices of WAIT_SLICE_MS
    assert 0.4 <= time.monotonic() - t0 < 2.0


def test_put_into_full_fifo_times_out(segname):
    with cistern.create(segname, slots=2, slot_size=16) as seg:
        seg.put(b"a")
        seg.put(b"b")
        with pytest.raises(TimeoutError):
            seg.put(b"c", timeout=0.05)


def test_end_of_data_ends_iteration(fifo):
    for i in range(3):
        fifo.put(bytes([i]))
    fifo.close_reception()
    assert list(fifo) == [b"\x00", b"\x01", b"\x02"]
    with pytest.raises(cistern.EndOfData):
        fifo.get()
    with pytest.raises(cistern.EndOfData):
        fifo.acquire(timeout=0)


def test_last_expected_producer_closes_reception(segname):
    with cistern.create(segname, slots=4, slot_size=16, expected_producers=2) as seg:
        seg.put(b"a")
        assert seg.producer_done() == 1
        assert not seg.stats()["reception_closed"]
        assert seg.producer_done() == 0
        assert seg.stats()["reception_closed"]
        assert list(seg) == [b"a"]


def test_put_after_close_raises_broken_pipe(fifo):
    fifo.close_reception()
    with pytest.raises(BrokenPipeError):
        fifo.put(b"late")


@pytest.mark.parametrize("kwargs", [
    dict(slots=-1),
    dict(slot_size=-5),
    dict(policy="no-such-policy"),
    dict(policy=99),
    dict(watermark="many"),
    dict(mode=0o100000),
    dict(seed=2**64),
])
def test_bad_create_parameters_raise_value_error(segname, kwargs):
    with pytest.raises(ValueError):
        cistern.create(segname, **kwargs)


def test_a_refused_config_says_which_parameter(segname):
    with pytest.raises(ValueError, match="FIRO needs a watermark above 0 and below slots"):
        cistern.create(segname, policy="firo", slots=8)
    with pytest.raises(ValueError, match="needs time_steps of 2 or more"):
        cistern.create(segname, policy="sim-paired-reservoir", watermark=2, sweep_size=1,
                       time_steps=1)
    with pytest.raises(ValueError, match="watermark of at least batch_size"):
        cistern.create(segname, policy="batch-reservoir", slots=8, watermark=2, batch_size=4)


def test_a_missing_or_taken_segment_error_names_the_segment(segname):
    with pytest.raises(FileNotFoundError) as e:
        cistern.attach(segname)
    assert e.value.filename == segname and segname in str(e.value)
    with cistern.create(segname, slots=4):
        with pytest.raises(FileExistsError) as e:
            cistern.create(segname)
        assert e.value.filename == segname


@pytest.mark.parametrize("call", [cistern.create, cistern.attach, cistern.unlink])
def test_a_bad_name_says_what_a_name_may_be(call):
    with pytest.raises(ValueError, match=r"bad segment name 'has/slash'.*\[A-Za-z0-9\._-\]"):
        call("has/slash")


@pytest.mark.parametrize("name", ["", "-starts-with-dash", "has/slash", "x" * 65])
def test_bad_names_raise_value_error(name):
    with pytest.raises(ValueError):
        cistern.create(name)


def test_oversized_sample_raises_value_error(fifo):
    with pytest.raises(ValueError):
        fifo.put(b"x" * 1025)


def test_bad_timeout_raises_value_error(fifo):
    with pytest.raises(ValueError):
        fifo.get(timeout=-1)


def test_existing_name_raises_file_exists(fifo, segname):
    with pytest.raises(FileExistsError) as ei:
        cistern.create(segname)
    assert ei.value.errno == errno.EEXIST


def test_attach_missing_raises_file_not_found(segname):
    with pytest.raises(FileNotFoundError):
        cistern.attach(segname)


def test_unlink_missing(segname):
    with pytest.raises(FileNotFoundError):
        cistern.unlink(segname)
    cistern.unlink(segname, missing_ok=True)


def test_second_reader_of_a_single_reader_fifo_raises_busy(segname):
    seg = cistern.create(segname, slots=4, slot_size=8, single_reader=True)
    other = cistern.attach(segname)
    try:
        assert seg.config()["single_reader"] is True
        assert seg.config()["single_producer"] is False
        seg.put(b"a")
        other.put(b"b")  # producers are not limited
        assert seg.get() == b"a"
        with pytest.raises(OSError) as e:
            other.get(timeout=0)
        assert e.value.errno == errno.EBUSY
        assert seg.get() == b"b"
    finally:
        other.detach()
        seg.detach()


def test_second_reader_of_a_single_reader_reservoir_raises_busy(segname):
    seg = cistern.create(segname, policy="reservoir", slots=8, slot_size=4, watermark=4,
                         single_reader=True)
    other = cistern.attach(segname)
    try:
        assert seg.config()["single_reader"] is True
        for i in range(8):
            other.put(struct.pack("<i", i))  # producers are not limited
        got = seg.get_batch(4, dtype="int32", timeout=0)
        assert sorted(set(got.tolist())) == sorted(got.tolist())
        assert set(got.tolist()) <= set(range(8))
        with pytest.raises(OSError) as e:
            other.get_batch(4, dtype="int32", timeout=0)
        assert e.value.errno == errno.EBUSY
    finally:
        other.detach()
        seg.detach()
    with pytest.raises(ValueError):
        cistern.create(segname + "x", policy="firo", slots=8, watermark=2, single_reader=True)


def test_a_read_the_policy_does_not_do_says_which_reads_it_does(segname):
    with cistern.create(segname, policy="sim-paired-reservoir", slots=16, slot_size=64,
                        watermark=2, sweep_size=1, time_steps=4) as seg:
        for t in range(4):
            seg.put(np.full(4, t, np.float32), sim_id=0, time_step=t)
        for read in (seg.get, seg.acquire, lambda: seg.get_array("float32"),
                     lambda: seg.get_batch(2, "float32", (4,))):
            with pytest.raises(ValueError, match=r"reads pairs: use get_pair\(\)"):
                read()
        with pytest.raises(ValueError, match="does not fit"):
            seg.get_pair("float32", (8,))
        assert seg.stats()["gets"] == 0
        assert seg.get_pair("float32", (4,)).shape == (2, 4)


def test_a_batch_reservoir_names_its_batch_size(segname):
    with cistern.create(segname, policy="batch-reservoir", slots=16, slot_size=64,
                        watermark=4, batch_size=4) as seg:
        for i in range(4):
            seg.put(bytes([i]) * 8)
        with pytest.raises(ValueError, match=r"exactly its batch_size \(4\), not 2"):
            seg.get_batch(2, "uint8", (8,))
        with pytest.raises(ValueError, match="reads whole batches"):
            seg.get()
        with pytest.raises(ValueError, match="pairs are read from a sim-paired-reservoir"):
            seg.acquire_pair()


def test_a_payload_of_no_whole_number_of_items_stays_in_the_fifo(fifo):
    fifo.put(b"abc")
    with pytest.raises(ValueError, match="stays in the segment"):
        fifo.get_array("float32")
    assert fifo.get() == b"abc"


def _squat(segname, uid=65534):
    """A 0666 segment under the name owned by another user (nobody): a squatter's."""
    seg = cistern.create(segname, slots=4, slot_size=16, mode=0o666)
    seg.put(b"bait")
    seg.detach()
    os.chown(f"/dev/shm/cistern.{segname}", uid, uid)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a segment to another user")
def test_attach_refuses_another_users_segment_with_permission_error(segname):
    _squat(segname)
    with pytest.raises(PermissionError) as e:
        cistern.attach(segname)
    assert e.value.errno == errno.EACCES
    assert e.value.filename == segname
    assert "nobody (uid 65534)" in str(e.value) and "any_owner=True" in str(e.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a segment to another user")
def test_attach_any_owner_shares_another_users_segment(segname):
    _squat(segname)
    with cistern.attach(segname, any_owner=True) as seg:
        assert seg.get(timeout=0) == b"bait"
