# SPDX-License-Identifier: MIT
"""Remote producers in Python: cistern.connect() to the built `cistern serve`,
on loopback, and the samples arriving in its segments."""
import contextlib
import os
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

import cistern


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(cli, *names, extra=(), host="127.0.0.1"):
    """`cistern serve` on a loopback port of host for these segments; yields its
    endpoint once it answers, stops it with SIGTERM afterwards."""
    ep = f"tcp://{host}:{_free_port()}"
    cmd = [cli, "serve", "--bind", ep, *[a for n in names for a in ("--segment", n)], *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert p.poll() is None, f"cistern serve exited: {p.communicate()[0]}"
            try:
                cistern.connect(ep, connect_timeout=0.5).close()
                break
            except TimeoutError:
                assert time.monotonic() < deadline, "cistern serve never answered"
        yield ep
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        p.communicate()


@pytest.fixture
def seg2(segname):
    """Two FIFO segments, ranks 0 and 1, of 64 slots of 256 bytes."""
    names = [f"{segname}.0", f"{segname}.1"]
    segs = [cistern.create(n, slots=64, slot_size=256) for n in names]
    yield names, segs
    for n, s in zip(names, segs):
        s.detach()
        cistern.unlink(n, missing_ok=True)


def _drain(seg):
    out = []
    while True:
        try:
            out.append(seg.get(timeout=0, meta=True))
        except TimeoutError:
            return out


def test_put_arrives_in_the_segment_whole_with_its_meta(fifo, segname, cistern_cli):
    with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
        for t in range(10):
            out.put(np.full(16, t, np.float32), sim_id=4, time_step=t)
        out.flush(timeout=30)
        info = out.info()
        assert (info.sent, info.acked, info.failed, info.ranks) == (10, 10, 0, 1)
        assert info.slot_size == 1024
        assert set(out._r.info()) == set(cistern.RemoteInfo._names())  # every field, once
    got = _drain(fifo)
    assert [m.time_step for _, m in got] == list(range(10))
    assert all(m.sim_id == 4 for _, m in got)
    assert [np.frombuffer(b, np.float32)[0] for b, _ in got] == list(range(10))


def _paired(name):
    """A sim-paired-reservoir of one simulation and 6 steps: it keeps the marks."""
    return cistern.create(name, policy="sim-paired-reservoir", slots=16, slot_size=16,
                          watermark=1, sweep_size=1, time_steps=6, seed=3)


def test_end_of_episode_arrives_through_serve(segname, cistern_cli):
    with _paired(segname) as seg:
        with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
            for t in range(6):
                out.put(np.full(4, t, np.float32), time_step=t, end_of_episode=(t == 2))
            out.flush(timeout=30)
        _, metas = seg.get_windows(300, 2, dtype=np.float32, shape=(4,), timeout=5, meta=True)
        assert 2 not in set(metas[:, 0, 2].tolist()), "a window ran past the end"
        marked = {int(t) for t in metas[:, :, 2][metas[:, :, 3] != 0]}
        assert marked == {2}


def _prioritized(name, **kw):
    return cistern.create(name, policy="prioritized", slots=16, slot_size=64, watermark=1,
                          alpha=1.0, beta=0.5, epsilon=0.0, **kw)


def test_priorities_arrive_through_serve(segname, cistern_cli):
    with _prioritized(segname) as seg:
        with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
            out.put(b"a", priority=2.5)
            out.put(b"b", priority=7)
            out.put(b"c")  # the largest priority seen so far
            out.flush(timeout=30)
        info = seg.prio_info()
        assert info.max_priority == 7.0
        assert info.total == pytest.approx(16.5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_a_bad_priority_is_refused_and_nothing_sent(segname, cistern_cli, bad):
    with _prioritized(segname):
        with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
            with pytest.raises(ValueError, match="finite and >= 0"):
                out.put(b"x", priority=bad)
            assert out.info().sent == 0


def test_a_priority_to_a_server_without_prioritized_segments_is_refused(fifo, segname,
                                                                      cistern_cli):
    with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
        with pytest.raises(ValueError, match="prioritized"):
            out.put(b"x", priority=1.0)
        out.put(b"y")
        out.flush(timeout=30)
        assert out.info().sent == 1
    assert [bytes(b) for b, _ in _drain(fifo)] == [b"y"], "nothing of the refused put"


def test_put_batch_sends_every_row_in_order(fifo, segname, cistern_cli):
    rows = np.arange(8 * 4, dtype=np.int32).reshape(8, 4)
    with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
        assert out.put_batch(rows, sim_id=[1, 2] * 4, time_step=range(8)) == 8
        out.flush(timeout=30)
    got = _drain(fifo)
    assert [bytes(b) for b, _ in got] == [r.tobytes() for r in rows]
    assert [(m.sim_id, m.time_step) for _, m in got] == [(1 + i % 2, i) for i in range(8)]


def test_a_gathered_put_arrives_after_its_linger_without_another_call(fifo, segname,
                                                                     cistern_cli):
    with serving(cistern_cli, segname) as ep, cistern.connect(ep, linger=0.2) as out:
        out.put(b"first", sim_id=0, time_step=0)   # an idle connection: sent at once
        out.put(b"second", sim_id=0, time_step=1)  # right after: gathered
        t = time.monotonic()
        assert bytes(fifo.get(timeout=5)) == b"first"
        assert bytes(fifo.get(timeout=5)) == b"second"
        assert time.monotonic() - t >= 0.1, "the gathered put left before its linger"


@pytest.mark.parametrize("linger", [-0.1, 2, "1", True])
def test_linger_must_be_seconds_from_0_to_1(linger):
    with pytest.raises(ValueError, match="linger"):
        cistern.connect("tcp://127.0.0.1:1", linger=linger)


def test_every_simulation_goes_to_rank_sim_id_mod_ranks(seg2, cistern_cli):
    names, segs = seg2
    with serving(cistern_cli, *names) as ep, cistern.connect(ep) as out:
        assert out.info().ranks == 2
        for s in range(6):
            for t in range(5):
                out.put(bytes([s, t]), sim_id=s, time_step=t)
        out.flush(timeout=30)
    for r, seg in enumerate(segs):
        got = _drain(seg)
        assert sorted({m.sim_id for _, m in got}) == [s for s in range(6) if s % 2 == r]
        assert len(got) == 15  # 3 simulations of 5 steps, each whole on its rank


def test_leaving_the_with_block_flushes_then_closes(fifo, segname, cistern_cli):
    with serving(cistern_cli, segname) as ep:
        with cistern.connect(ep) as out:
            for t in range(10):  # fewer than the segment's 16 slots: no reader here
                out.put(b"x" * 100, time_step=t)
        assert out.closed
        with pytest.raises(ValueError, match="closed"):
            out.put(b"y")
        assert len(_drain(fifo)) == 10  # every put was acknowledged before the close


def test_producer_done_ends_the_readers_data(segname, cistern_cli):
    seg = cistern.create(segname, slots=16, slot_size=64, expected_producers=1)
    try:
        with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
            out.put(b"a")
            out.put(b"b")
            out.producer_done(timeout=30)
            with pytest.raises(BrokenPipeError):
                out.put(b"c")
        assert [bytes(x) for x in seg] == [b"a", b"b"]  # then end of data
        assert seg.stats().reception_closed
    finally:
        seg.detach()


def test_schema_samples_are_checked_then_sent_as_dicts(segname, cistern_cli):
    schema = {"obs": ("float32", (3,)), "action": "int64"}
    seg = cistern.create(segname, slots=16, schema=schema)
    try:
        with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
            assert out.schema is not None and out.schema.names == ("obs", "action")
            out.put({"obs": np.array([1, 2, 3], np.float32), "action": 7}, sim_id=2)
            out.put_batch({"obs": np.ones((2, 3), np.float32), "action": np.array([8, 9])})
            with pytest.raises(ValueError, match="reward"):
                out.put({"obs": np.zeros(3, np.float32), "action": 1, "reward": 0.5})
            with pytest.raises(ValueError, match="schema"):
                out.put(b"raw bytes of another length")
            out.flush(timeout=30)
            assert out.info().sent == 3  # the refused ones were never sent
        first = seg.get()
        assert first["obs"].tolist() == [1, 2, 3] and int(first["action"]) == 7
        assert [int(seg.get()["action"]) for _ in range(2)] == [8, 9]
    finally:
        seg.detach()


def test_sample_larger_than_the_slots_is_refused_unsent(fifo, segname, cistern_cli):
    with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
        with pytest.raises(ValueError, match="1024"):
            out.put(bytes(1025))
        with pytest.raises(ValueError, match="1024"):
            out.put_batch(np.zeros((2, 1025), np.uint8))
        assert out.info().sent == 0


def test_a_full_segment_makes_puts_wait_with_a_bounded_window(segname, cistern_cli):
    seg = cistern.create(segname, slots=4, slot_size=64)
    try:
        with serving(cistern_cli, segname) as ep, cistern.connect(ep, window=2) as out:
            assert out.info().window <= 2
            sent = 0
            with pytest.raises(TimeoutError):
                while sent < 100:
                    out.put(b"z" * 8, time_step=sent, timeout=1.0)
                    sent += 1
            # The segment's 4 slots plus at most the window in flight, no more.
            assert 4 <= sent <= 4 + 2
            assert len(_drain(seg)) >= 4
            out.put(b"again", timeout=30)  # room made: puts go on
            out.flush(timeout=30)
    finally:
        seg.detach()


def test_connect_to_no_server_times_out(cistern_cli):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        cistern.connect(f"tcp://127.0.0.1:{_free_port()}", connect_timeout=0.3)
    assert time.monotonic() - t0 < 20  # bounded, not forever


def test_bad_endpoint_is_a_value_error():
    with pytest.raises(ValueError):
        cistern.connect("nonsense://x")


def test_keygen_gives_a_z85_key_pair():
    pub, sec = cistern.keygen()
    assert len(pub) == len(sec) == 40 and pub != sec


def test_a_forked_child_cannot_use_its_parents_connection(fifo, segname, cistern_cli):
    with serving(cistern_cli, segname) as ep, cistern.connect(ep) as out:
        pid = os.fork()
        if pid == 0:
            try:
                out.put(b"from the child")
            except RuntimeError:
                os._exit(0)
            os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        out.put(b"from the parent")
    assert [bytes(b) for b, _ in _drain(fifo)] == [b"from the parent"]


@pytest.mark.parametrize("host", ["localhost", "[::1]"])
def test_loopback_by_name_or_ipv6_is_served_without_keys(fifo, segname, cistern_cli, host):
    with serving(cistern_cli, segname, host=host) as ep, cistern.connect(ep) as out:
        out.put(np.full(16, 1, np.float32), sim_id=2, time_step=0)
        out.flush(timeout=30)
    assert [m.sim_id for _, m in _drain(fifo)] == [2]
