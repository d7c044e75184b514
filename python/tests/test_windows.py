# SPDX-License-Identifier: MIT
"""Windows of one simulation (Segment.get_windows(), cistern_get_windows())
and the end-of-episode mark a producer puts."""
import multiprocessing as mp

import numpy as np
import pytest

import cistern


def _paired(name, **kw):
    args = dict(policy="sim-paired-reservoir", slots=64, slot_size=16, watermark=1,
                sweep_size=4, time_steps=12, seed=7)
    args.update(kw)
    return cistern.create(name, **args)


def _put_episode(seg, sim, steps, end_at=None):
    for t in steps:
        seg.put(np.full(4, 100 * sim + t, dtype=np.float32), sim_id=sim, time_step=t,
                end_of_episode=(t == end_at))


def test_windows_come_as_a_batch_by_window_then_step(segname):
    with _paired(segname) as seg:
        _put_episode(seg, 1, range(8))
        out, metas = seg.get_windows(6, 3, dtype=np.float32, shape=(4,), timeout=1, meta=True)
        assert out.shape == (6, 3, 4)
        assert metas.shape == (6, 3, 4)
        for w, m in zip(out, metas):
            assert (m[:, 1] == 1).all()
            assert list(m[:, 2]) == [m[0, 2], m[0, 2] + 1, m[0, 2] + 2]
            assert list(w[:, 0]) == [100 + int(t) for t in m[:, 2]]


def test_a_window_never_runs_past_an_end_of_episode(segname):
    with _paired(segname) as seg:
        _put_episode(seg, 0, range(10), end_at=4)
        _, metas = seg.get_windows(300, 3, dtype=np.float32, shape=(4,), timeout=1, meta=True)
        heads = {int(t) for t in metas[:, 0, 2]}
        assert heads == {0, 1, 2, 5, 6, 7}
        flags = metas[:, :, 3]
        assert (flags[:, :2] == 0).all(), "no member but the last carries the mark"
        assert (flags[metas[:, 2, 2] == 4, 2] == cistern.META_END_OF_EPISODE).all()


def test_the_step_between_members_is_respected(segname):
    with _paired(segname) as seg:
        _put_episode(seg, 2, range(7))
        _, metas = seg.get_windows(50, 3, step=3, timeout=1, meta=True, dtype=np.float32,
                                   shape=(4,))
        assert (metas[:, 1, 2] == metas[:, 0, 2] + 3).all()
        assert (metas[:, 2, 2] == metas[:, 0, 2] + 6).all()
        assert set(metas[:, 0, 2].tolist()) == {0}


def test_a_schema_gives_a_dict_of_window_arrays(segname):
    schema = "obs:float32[2];done:bool[]"
    with _paired(segname, slot_size=0, schema=schema) as seg:
        for t in range(5):
            seg.put({"obs": np.array([t, -t], dtype=np.float32), "done": t == 4},
                    sim_id=3, time_step=t, end_of_episode=(t == 4))
        got = seg.get_windows(4, 2, timeout=1)
        assert got["obs"].shape == (4, 2, 2)
        assert got["done"].shape == (4, 2)
        assert (got["obs"][:, 1, 0] == got["obs"][:, 0, 0] + 1).all()


def test_no_complete_window_times_out(segname):
    with _paired(segname) as seg:
        _put_episode(seg, 0, [0, 1, 3])
        with pytest.raises(TimeoutError):
            seg.get_windows(1, 3, dtype=np.float32, shape=(4,), timeout=0.05)


def test_bad_windows_are_refused(segname):
    with _paired(segname) as seg:
        with pytest.raises(ValueError):
            seg.get_windows(1, 0)
        with pytest.raises(ValueError):
            seg.get_windows(1, 2, step=0)
        with pytest.raises(ValueError, match="time_steps"):
            seg.get_windows(1, 5, step=3)


def test_other_policies_refuse_windows(segname):
    with cistern.create(segname, policy="reservoir", slots=8, slot_size=16,
                        watermark=1) as seg:
        seg.put(b"x", end_of_episode=True)
        with pytest.raises(ValueError, match="sim-paired-reservoir"):
            seg.get_windows(1, 2)


def test_after_close_windows_run_out(segname):
    with _paired(segname) as seg:
        _put_episode(seg, 0, range(6))
        seg.close_reception()
        taken = 0
        while True:
            try:
                taken += len(seg.get_windows(1, 3, dtype=np.float32, shape=(4,), timeout=1))
            except cistern.EndOfData:
                break
        assert taken in (1, 2)


def _producer(name, sim):
    with cistern.attach(name) as seg:
        for e in range(20):
            n = 5 + (sim + e) % 4
            _put_episode(seg, sim, range(n), end_at=n - 1)


def test_windows_read_while_forked_producers_put(segname):
    with _paired(segname, slots=32) as seg:
        ctx = mp.get_context("fork")
        procs = [ctx.Process(target=_producer, args=(segname, s)) for s in range(3)]
        for p in procs:
            p.start()
        bad = 0
        reads = 0
        while any(p.is_alive() for p in procs) or reads == 0:
            try:
                out, metas = seg.get_windows(4, 3, dtype=np.float32, shape=(4,), timeout=0.2,
                                             meta=True)
            except TimeoutError:
                continue
            reads += len(out)
            for w, m in zip(out, metas):
                bad += not ((m[:, 1] == m[0, 1]).all()
                            and (m[:, 2] == m[0, 2] + np.arange(3)).all()
                            and (m[:2, 3] == 0).all()
                            and (w[:, 0] == 100 * m[:, 1] + m[:, 2]).all())
        for p in procs:
            p.join(10)
            assert p.exitcode == 0
        assert reads > 0
        assert bad == 0


def test_a_reservation_commits_the_end_of_episode_mark(segname):
    with _paired(segname) as seg:
        for t in range(2):
            r = seg.reserve("float32", (4,), sim_id=0, time_step=t, timeout=1)
            r.array[...] = t
            r.commit(end_of_episode=(t == 1))
        out, metas = seg.get_windows(1, 2, dtype=np.float32, shape=(4,), timeout=1, meta=True)
        assert list(out[0, :, 0]) == [0, 1]
        assert list(metas[0, :, 3]) == [0, cistern.META_END_OF_EPISODE]


def test_dump_and_restore_keep_the_end_of_episode_marks(segname, tmp_path):
    copy = segname + ".copy"
    with _paired(segname) as seg:
        _put_episode(seg, 0, range(10), end_at=4)
        info = cistern.dump(segname, tmp_path / "d")
        assert info.format_version == 4
    cistern.restore(tmp_path / "d", copy)
    try:
        with cistern.attach(copy) as seg:
            _, metas = seg.get_windows(300, 3, dtype=np.float32, shape=(4,), timeout=1,
                                       meta=True)
            assert {int(t) for t in metas[:, 0, 2]} == {0, 1, 2, 5, 6, 7}
            marked = {int(t) for t in metas[:, :, 2][metas[:, :, 3] != 0]}
            assert marked == {4}
    finally:
        cistern.unlink(copy, missing_ok=True)
