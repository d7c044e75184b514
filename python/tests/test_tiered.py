# SPDX-License-Identifier: MIT
"""A reservoir with a cold tier on disk, from Python (docs/protocol/tiers.md)."""
import errno
import os
import tempfile

import pytest

import cistern


@pytest.fixture
def cold_dir():
    """A directory on a disk file system that takes O_DIRECT (not /dev/shm)."""
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="cistern-pyt-cold-") as d:
        yield d


def test_a_tiered_reservoir_holds_hot_plus_cold_samples_and_reads_them(segname, cold_dir):
    with cistern.create(segname, policy="reservoir", slots=16, slot_size=256, watermark=1,
                        cold_slots=48, cold_dir=cold_dir) as seg:
        for i in range(64):
            seg.put(i.to_bytes(4, "little") * 8)
        st = seg.stats()
        assert (st.population, st.cold_slots, st.cold_population) == (64, 48, 48)
        assert os.path.exists(os.path.join(cold_dir, f"cistern.{segname}.cold"))
        seg.close_reception()
        got = set()
        for data in seg:
            data = bytes(data)
            assert data == data[:4] * 8
            got.add(int.from_bytes(data[:4], "little"))
        assert got == set(range(64))
        st = seg.stats()
        # Each cold sample went out as one 4 KiB slot and came back as one.
        assert st.cold_bytes_written >= st.cold_spilled * 4096 > 0
        assert st.cold_bytes_read >= st.cold_reads * 4096 > 0
        assert st.cold_write_wait_ns > 0 and st.cold_read_wait_ns > 0
    cistern.unlink(segname)
    assert not os.path.exists(os.path.join(cold_dir, f"cistern.{segname}.cold"))


def test_prioritized_refuses_a_cold_tier_with_a_reason(cold_dir):
    why = cistern.config_problem(policy="prioritized", slots=8, watermark=1, cold_slots=8,
                                 cold_dir=cold_dir)
    assert why is not None and "prioritized takes no cold tier" in why


def test_firo_with_a_cold_tier_reads_each_sample_pseudo_epochs_times(segname, cold_dir):
    with cistern.create(segname, policy="firo", slots=16, slot_size=256, watermark=1,
                        pseudo_epochs=2, cold_slots=48, cold_dir=cold_dir) as seg:
        for i in range(64):
            seg.put(i.to_bytes(4, "little") * 8)
        st = seg.stats()
        assert (st.population, st.cold_population) == (64, 48)
        seg.close_reception()
        reads = {}
        for data in seg:
            data = bytes(data)
            assert data == data[:4] * 8
            k = int.from_bytes(data[:4], "little")
            reads[k] = reads.get(k, 0) + 1
        assert reads == {i: 2 for i in range(64)}
        assert seg.stats().cold_reads > 0
    cistern.unlink(segname)


def test_a_lossy_fifo_evict_with_a_cold_tier_keeps_the_newest_puts(segname, cold_dir):
    with cistern.create(segname, policy="fifo-evict-reservoir", slots=16, slot_size=256,
                        watermark=1, lossy=True, cold_slots=48, cold_dir=cold_dir) as seg:
        for i in range(100):
            seg.put(i.to_bytes(4, "little") * 8)
        st = seg.stats()
        assert (st.population, st.cold_population, st.evictions) == (64, 48, 36)
        seg.close_reception()
        got = sorted(int.from_bytes(bytes(d)[:4], "little") for d in seg)
        assert got == list(range(36, 100))
    cistern.unlink(segname)


def test_a_fifo_with_a_cold_tier_takes_a_burst_past_its_memory_in_order(segname, cold_dir):
    with cistern.create(segname, policy="fifo", slots=16, slot_size=256, cold_slots=64,
                        cold_dir=cold_dir) as seg:
        for i in range(64):
            seg.put(i.to_bytes(4, "little") * 8, timeout=0)
        st = seg.stats()
        assert (st.cold_slots, st.cold_spilled) == (64, 48)
        # The 48 cold puts sit in staging runs of the segment, in groups.
        assert st.cold_stage_bytes > 0
        assert st.cold_groups_staged + st.cold_groups_writing > 0
        assert os.path.exists(os.path.join(cold_dir, f"cistern.{segname}.cold"))
        seg.close_reception()
        got = [int.from_bytes(bytes(d)[:4], "little") for d in seg]
        assert got == list(range(64))
    cistern.unlink(segname)
    assert not os.path.exists(os.path.join(cold_dir, f"cistern.{segname}.cold"))


def test_make_buffer_gives_a_fifo_buffer_its_cold_tier(segname, cold_dir):
    from cistern.melissa import BufferType, make_buffer, segment_name
    with make_buffer(8, BufferType.FIFO, name=segname, sample_bytes=64, cold_slots=24,
                     cold_dir=cold_dir) as buf:
        for i in range(32):
            buf.segment().put(bytes([i]) * 64, timeout=0)
        st = buf.segment().stats()
        assert (st.cold_slots, st.cold_spilled) == (24, 24)
        cold = os.path.join(cold_dir, f"cistern.{segment_name(segname, 0)}.cold")
        assert os.path.exists(cold)
        got = [bytes(buf.segment().get(timeout=1))[0] for _ in range(32)]
        assert got == list(range(32))
    assert not os.path.exists(cold)


def test_cold_slots_without_a_directory_is_refused():
    why = cistern.config_problem(policy="reservoir", watermark=1, cold_slots=8)
    assert why is not None and "cold_dir" in why


def test_make_buffer_gives_a_reservoir_buffer_its_cold_tier(segname, cold_dir):
    from cistern.melissa import BufferType, make_buffer, segment_name
    with make_buffer(8, BufferType.Reservoir, per_server_watermark=1, name=segname,
                     sample_bytes=64, cold_slots=24, cold_dir=cold_dir) as buf:
        for i in range(32):
            buf.segment().put(bytes([i]) * 64)
        st = buf.segment().stats()
        assert (st.population, st.cold_slots, st.cold_population) == (32, 24, 24)
        cold = os.path.join(cold_dir, f"cistern.{segment_name(segname, 0)}.cold")
        assert os.path.exists(cold)
    assert not os.path.exists(cold)


def test_a_dump_and_restore_carry_the_cold_samples(segname, cold_dir):
    copy = segname + "-copy"
    path = os.path.join(cold_dir, "seg.dump")
    with cistern.create(segname, policy="reservoir", slots=16, slot_size=256, watermark=1,
                        cold_slots=48, cold_dir=cold_dir) as seg:
        for i in range(40):
            seg.put(i.to_bytes(4, "little") * 8)
        info = cistern.dump(segname, path)
    cistern.unlink(segname)
    assert (info.samples, info.cold_samples, info.format_version) == (40, 24, 3)
    assert cistern.verify_dump(path).cold_samples == 24
    cistern.restore(path, copy)
    try:
        with cistern.attach(copy) as seg:
            st = seg.stats()
            assert (st.population, st.cold_population) == (40, 24)
            seg.close_reception()
            assert {int.from_bytes(bytes(d)[:4], "little") for d in seg} == set(range(40))
    finally:
        cistern.unlink(copy)
    assert not os.path.exists(os.path.join(cold_dir, f"cistern.{copy}.cold"))
