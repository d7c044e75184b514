# SPDX-License-Identifier: MIT
"""What the `cistern` command does, from Python: the rate limiter at create,
config_problem(), open_readonly(), occupancy() and procs(), list_segments(),
inspect(), remove(), gc(), dump(), restore() and verify_dump()."""
import errno
import os

import pytest

import cistern


def test_rate_limiter_parameters_are_kept(segname):
    with cistern.create(segname, policy="reservoir", slots=8, slot_size=16, watermark=1,
                        reads_per_put=2.5, rate_slack=4) as seg:
        cfg = seg.config()
        assert (cfg.reads_per_put, cfg.rate_slack) == (2.5, 4.0)


def test_rate_limiter_holds_a_reader_to_its_share_of_reads(segname):
    with cistern.create(segname, policy="reservoir", slots=8, slot_size=16, watermark=1,
                        reads_per_put=1, rate_slack=1) as seg:
        seg.put(b"a")
        reads = 0
        with pytest.raises(TimeoutError):
            while reads < 100:
                seg.get(timeout=0)
                reads += 1
        assert 1 <= reads <= 2  # reads_per_put * puts + rate_slack
        seg.put(b"b")
        assert seg.get(timeout=0) in (b"a", b"b")  # a put makes room for a read


def test_rate_limiter_is_refused_outside_the_reservoirs(segname):
    with pytest.raises(ValueError, match="reads_per_put"):
        cistern.create(segname, policy="fifo", reads_per_put=1)
    with pytest.raises(ValueError, match="reads_per_put"):
        cistern.create(segname, policy="reservoir", watermark=1, reads_per_put=-1)


def test_fewer_reads_than_puts_is_refused_where_puts_need_reads(segname):
    with pytest.raises(ValueError, match="reads_per_put must be 0 .off. or at least 1"):
        cistern.create(segname, policy="reservoir", watermark=2, reads_per_put=0.5)
    with cistern.create(segname, policy="fifo-evict-reservoir", watermark=2, lossy=True,
                        reads_per_put=0.5) as seg:
        assert seg.config().reads_per_put == 0.5


def test_config_problem_names_the_wrong_argument_in_create_words():
    assert cistern.config_problem() is None
    assert cistern.config_problem(policy="reservoir", watermark=4, slots=8) is None
    why = cistern.config_problem(policy="firo", slots=8)
    assert why is not None and "watermark" in why and "slots" in why
    assert "slot_count" not in why


def test_open_readonly_watches_without_an_attachment_and_cannot_move_samples(fifo):
    fifo.put(b"abc")
    with cistern.open_readonly(fifo.name) as ro:
        assert ro.stats().population == 1
        assert ro.stats().procs_attached == 1  # only `fifo`
        with pytest.raises(OSError) as e:
            ro.put(b"x")
        assert e.value.errno == errno.EBADF
        with pytest.raises(OSError) as e:
            ro.get(timeout=0)
        assert e.value.errno == errno.EBADF
    assert fifo.get(timeout=0) == b"abc"


def test_occupancy_counts_slots_by_class(fifo):
    fifo.put(b"one")
    fifo.put(b"two!")
    held = fifo.acquire()
    occ = fifo.occupancy()
    assert set(occ.slots) == set(cistern.SLOT_CLASSES)
    assert occ.slots["committed"] == 1 and occ.slots["acquired"] == 1
    assert sum(occ.slots.values()) == 16
    assert occ.held == 1 and occ.held_bytes == 4
    held.release()


def test_procs_lists_this_process_with_its_roles(fifo):
    fifo.put(b"x")
    fifo.get()
    (me,) = fifo.procs()
    assert me.pid == os.getpid() and me.alive
    assert me.producer and me.reader
    assert (me.puts, me.gets) == (1, 1)


def test_list_segments_reports_a_segment_with_its_config(fifo):
    fifo.put(b"x")
    infos = {s.name: s for s in cistern.list_segments()}
    me = infos[fifo.name]
    assert me.status == 0 and me.problem is None
    assert me.config is not None and me.config.policy == "fifo" and me.config.slots == 16
    assert me.population == 1 and me.procs_live == 1 and not me.closed


def test_inspect_reads_config_stats_occupancy_and_procs(fifo):
    fifo.put(b"x")
    ins = cistern.inspect(fifo.name)
    assert ins.name == fifo.name and ins.config == fifo.config()
    assert ins.stats.puts == 1 and ins.occupancy.slots["committed"] == 1
    assert [p.pid for p in ins.procs] == [os.getpid()]


def test_remove_refuses_a_segment_in_use_unless_forced(fifo):
    with pytest.raises(OSError) as e:
        cistern.remove(fifo.name)
    assert e.value.errno == errno.EBUSY
    cistern.remove(fifo.name, force=True)
    with pytest.raises(FileNotFoundError):
        cistern.attach(fifo.name)
    fifo.put(b"still works")  # attached processes keep the memory
    assert fifo.get(timeout=0) == b"still works"


def _attach_and_die(name):
    """A child process that attaches to `name`, puts a sample, reserves a slot
    and dies without detaching."""
    pid = os.fork()
    if pid == 0:
        try:
            seg = cistern.attach(name)
            seg.put(b"from the child")
            seg.reserve("uint8", (4,))
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_gc_reclaims_a_dead_process_and_keeps_a_segment_in_use(fifo):
    _attach_and_die(fifo.name)
    dry = cistern.gc(fifo.name, dry_run=True)
    assert (dry.dead_procs, dry.live_procs, dry.removed) == (1, 1, 0)
    rep = cistern.gc(fifo.name)
    assert (rep.dead_procs, rep.removed) == (1, 0)
    assert cistern.gc(fifo.name).dead_procs == 0
    # The child's open reservation no longer holds up the ring.
    fifo.put(b"after")
    assert fifo.get(timeout=0) == b"from the child"
    assert fifo.get(timeout=0) == b"after"


def test_gc_keeps_a_stale_segment_holding_unread_samples(segname):
    cistern.create(segname, slots=4, slot_size=64).detach()
    _attach_and_die(segname)
    rep = cistern.gc(segname)
    assert rep.removed == 0 and rep.kept and rep.unread == 1
    with cistern.attach(segname) as seg:
        assert seg.get(timeout=0) == b"from the child"


def test_gc_dump_to_saves_a_stale_segment_then_removes_it(segname, tmp_path):
    cistern.create(segname, slots=4, slot_size=64).detach()
    _attach_and_die(segname)
    rep = cistern.gc(segname, dump_to=tmp_path)
    assert rep.removed == 4 and rep.dumped == 1
    with pytest.raises(FileNotFoundError):
        cistern.attach(segname)
    assert cistern.verify_dump(tmp_path / f"{segname}.dump").samples == 1


def test_gc_discard_removes_a_stale_segment_with_its_samples(segname):
    cistern.create(segname, slots=4, slot_size=64).detach()
    _attach_and_die(segname)
    assert cistern.gc(segname, dry_run=True, discard=True).removed == 5
    assert cistern.gc(segname, discard=True).removed == 5
    with pytest.raises(FileNotFoundError):
        cistern.attach(segname)


def test_dump_restore_and_verify_keep_samples_ids_and_meta(fifo, segname, tmp_path):
    ids = [fifo.put(bytes([i]) * (i + 1), sim_id=5, time_step=i) for i in range(3)]
    path = tmp_path / "seg.dump"
    calls = []
    info = cistern.dump(fifo.name, path, progress=lambda done, total: calls.append((done, total)))
    assert info.samples == 3 and info.name == fifo.name and info.config == fifo.config()
    assert calls and calls[-1][0] == calls[-1][1]
    assert cistern.verify_dump(path).samples == 3
    copy = segname + "-copy"
    try:
        restored = cistern.restore(path, copy)
        assert restored.samples == 3
        with cistern.attach(copy) as seg:
            got = [seg.get(timeout=0, meta=True) for _ in range(3)]
        assert got == [(bytes([i]) * (i + 1), cistern.Meta(ids[i], 5, i)) for i in range(3)]
        with pytest.raises(FileExistsError):
            cistern.restore(path, copy)
    finally:
        cistern.unlink(copy, missing_ok=True)


def test_a_damaged_dump_is_refused_and_restores_nothing(fifo, segname, tmp_path):
    fifo.put(b"payload" * 10)
    path = tmp_path / "seg.dump"
    cistern.dump(fifo.name, str(path))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(OSError) as e:
        cistern.verify_dump(path)
    assert e.value.errno == errno.EBADMSG and e.value.filename == str(path)
    copy = segname + "-copy"
    with pytest.raises(OSError) as e:
        cistern.restore(path, copy)
    assert e.value.errno == errno.EBADMSG
    with pytest.raises(FileNotFoundError):
        cistern.attach(copy)


def _mapped_kib(name):
    """KiB of this process's mappings of the segment's shm object in its page tables."""
    path, kib, ours = f"/dev/shm/cistern.{name}", 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                ours = line.rstrip().endswith(path)
            elif ours and head == "Rss:":
                kib += int(line.split()[1])
    return kib


def test_attach_populate_maps_every_page_and_works(segname):
    seg = cistern.create(segname, slots=2048, slot_size=4096)   # 8 MiB of slots
    try:
        before = _mapped_kib(segname)
        with cistern.attach(segname) as plain:
            after_plain = _mapped_kib(segname)
            with cistern.attach(segname, populate=True) as full:
                after_full = _mapped_kib(segname)
                full.put(b"populated")
                assert bytes(plain.get(timeout=0)) == b"populated"
        assert after_plain - before < 1024
        assert after_full - after_plain >= 8192
    finally:
        seg.detach()
        cistern.unlink(segname, missing_ok=True)
