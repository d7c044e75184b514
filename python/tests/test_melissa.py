# SPDX-License-Identifier: MIT
"""cistern.melissa: Melissa's make_buffer()/BufferType on cistern segments."""
import itertools
import multiprocessing as mp
import os
import pickle
import threading

import numpy as np
import pytest

import cistern
from cistern.melissa import (Buffer, BufferType, attach, attach_buffer, make_buffer,
                             make_buffers, segment_name)

F = 4
_seq = itertools.count()


@pytest.fixture
def prefix():
    """A buffer name unique to this test; every segment under it removed afterwards."""
    name = f"pyt-{os.getpid()}-mel{next(_seq)}"
    yield name
    for r in range(4):
        cistern.unlink(segment_name(name, r), missing_ok=True)


def vec(i):
    return np.full(F, i, dtype=np.float32)


def test_buffer_types_carry_melissas_numbers():
    assert [(t.name, int(t)) for t in BufferType] == [
        ("FIFO", 0), ("FIRO", 1), ("Reservoir", 2), ("FIFOEvictReservoir", 3),
        ("SimPairedReservoir", 4), ("BatchReservoir", 5)]
    assert issubclass(BufferType, int)


def test_fifo_buffer_puts_gets_in_order_and_len_is_the_population(prefix):
    with make_buffer(8, name=prefix, shape=(F,)) as buf:
        assert isinstance(buf, Buffer) and buf.name == segment_name(prefix, 0) == prefix + ".rank0"
        assert len(buf) == 0
        for i in range(5):
            buf.put(vec(i), sim_id=1, time_step=i)
        assert len(buf) == 5
        assert buf.get().tolist() == vec(0).tolist()
        assert buf.get_batch(2)[:, 0].tolist() == [1.0, 2.0]
        assert len(buf) == 2
        buf.signal_reception_over()
        assert [x[0] for x in buf] == [3.0, 4.0]
        with pytest.raises(cistern.EndOfData):
            buf.get()


@pytest.mark.parametrize("buffer_t, kw, missing", [
    (BufferType.FIRO, {}, "per_server_watermark"),
    (BufferType.Reservoir, {}, "per_server_watermark"),
    (BufferType.FIFOEvictReservoir, {}, "per_server_watermark"),
    (BufferType.SimPairedReservoir, {"per_server_watermark": 2}, "sweep_size"),
    (BufferType.SimPairedReservoir, {"per_server_watermark": 2, "sweep_size": 3}, "nb_time_steps"),
    (BufferType.BatchReservoir, {"per_server_watermark": 4}, "batch_size"),
])
def test_a_parameter_the_type_needs_missing_is_a_value_error(prefix, buffer_t, kw, missing):
    with pytest.raises(ValueError, match=missing):
        make_buffer(16, buffer_t, name=prefix, **kw)
    assert not os.path.exists("/dev/shm/cistern." + segment_name(prefix, 0))


@pytest.mark.parametrize("kw, why", [
    ({"buffer_size": 0}, "buffer_size"),
    ({"buffer_t": 9}, "buffer_t"),
    ({"buffer_t": BufferType.FIRO, "per_server_watermark": 16}, "below buffer_size"),
    ({"buffer_t": BufferType.Reservoir, "per_server_watermark": 17}, "exceed buffer_size"),
    ({"buffer_t": BufferType.FIRO, "per_server_watermark": 4, "pseudo_epochs": 0},
     "pseudo_epochs"),
    ({"buffer_t": BufferType.BatchReservoir, "per_server_watermark": 4, "batch_size": 5},
     "batch_size"),
    ({"comm_size": 2, "rank": 2}, "rank"),
    ({"use_legacy": True}, "use_legacy"),
])
def test_bad_parameters_are_value_errors_naming_them(prefix, kw, why):
    args = dict(buffer_size=16)
    args.update(kw)
    with pytest.raises(ValueError, match=why):
        make_buffer(name=prefix, **args)


def test_a_parameter_the_type_does_not_use_is_ignored(prefix):
    with make_buffer(8, BufferType.FIFO, per_server_watermark=3, pseudo_epochs=2,
                     sweep_size=4, nb_time_steps=5, name=prefix) as buf:
        assert buf.config()["policy"] == "fifo" and buf.watermark == 0


def test_buffer_types_map_to_their_policies(prefix):
    kw = dict(per_server_watermark=4, sweep_size=2, nb_time_steps=3, batch_size=2)
    for t in BufferType:
        with make_buffer(8, t, name=f"{prefix}-{int(t)}", **kw) as buf:
            assert buf.config()["policy"] == t.policy
            assert buf.buffer_t is t and buf.buffer_size == 8


def test_firo_reads_wait_above_the_watermark_and_give_each_sample_pseudo_epochs_times(prefix):
    with make_buffer(16, BufferType.FIRO, per_server_watermark=3, pseudo_epochs=2,
                     name=prefix, shape=(F,)) as buf:
        for i in range(3):
            buf.put(vec(i))
        with pytest.raises(TimeoutError):
            buf.get(timeout=0)  # population 3 is not above the watermark
        for i in range(3, 6):
            buf.put(vec(i))
        seen = [int(buf.get()[0])]
        buf.close_reception()
        seen += [int(x[0]) for x in buf]
        assert sorted(seen) == sorted(list(range(6)) * 2)


def test_sim_paired_reservoir_reads_pairs_of_consecutive_steps(prefix):
    with make_buffer(16, BufferType.SimPairedReservoir, per_server_watermark=2, sweep_size=2,
                     nb_time_steps=4, name=prefix, shape=(F,)) as buf:
        for sim in range(2):
            for t in range(4):
                buf.put(vec(10 * sim + t), sim_id=sim, time_step=t)
        for _ in range(5):
            pair = buf.get()
            assert pair.shape == (2, F) and pair[1, 0] == pair[0, 0] + 1
        assert buf.get_batch(3).shape == (3, 2, F)


def test_batch_reservoir_reads_whole_batches(prefix):
    with make_buffer(16, BufferType.BatchReservoir, per_server_watermark=4, batch_size=3,
                     name=prefix, shape=(F,)) as buf:
        for i in range(8):
            buf.put(vec(i))
        batch = buf.get()
        assert batch.shape == (3, F) and len(set(batch[:, 0].tolist())) == 3
        assert buf.get_batch().shape == (3, F)


def _simulation(prefix, rank, sim_id, n):
    seg = attach(prefix, rank)
    for t in range(n):
        seg.put(vec(100 * sim_id + t), sim_id=sim_id, time_step=t)
    seg.producer_done()
    seg.detach()


def test_simulations_in_other_processes_put_by_name_and_close_reception(prefix):
    with make_buffer(64, BufferType.FIFO, name=prefix, shape=(F,), expected_producers=2) as buf:
        ctx = mp.get_context("fork")
        procs = [ctx.Process(target=_simulation, args=(prefix, 0, s, 10)) for s in (1, 2)]
        for p in procs:
            p.start()
        got = sorted(int(x[0]) for x in buf)  # ends when both declared themselves done
        for p in procs:
            p.join(10)
            assert p.exitcode == 0
        assert got == sorted([100 + t for t in range(10)] + [200 + t for t in range(10)])


def test_comm_size_makes_one_segment_per_rank_each_with_its_watermark(prefix):
    bufs = make_buffers(8, BufferType.Reservoir, per_server_watermark=2, comm_size=3,
                        name=prefix, shape=(F,))
    try:
        assert [b.name for b in bufs] == [segment_name(prefix, r) for r in range(3)]
        assert [(b.rank, b.comm_size, b.watermark) for b in bufs] == [(r, 3, 2) for r in range(3)]
        seg = attach(prefix, 1)
        seg.put(vec(7))
        seg.put(vec(8))
        seg.detach()
        assert [len(b) for b in bufs] == [0, 2, 0]
        assert sorted(bufs[1].get_batch(2)[:, 0].tolist()) == [7.0, 8.0]
        with pytest.raises(TimeoutError):
            bufs[0].get(timeout=0)
    finally:
        for b in bufs:
            b.close()


def test_rank_comes_from_the_launchers_environment(prefix, monkeypatch):
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="rank"):
        make_buffer(8, comm_size=2, name=prefix)
    monkeypatch.setenv("SLURM_PROCID", "1")
    with make_buffer(8, comm_size=2, name=prefix) as buf:
        assert buf.rank == 1 and buf.name == segment_name(prefix, 1)


class ScalarLogger:
    def __init__(self):
        self.calls = []

    def log_scalar(self, tag, value, step):
        self.calls.append((tag, value, step))


class Writer:
    def __init__(self):
        self.calls = []

    def add_scalar(self, tag, scalar_value, global_step):
        self.calls.append((tag, scalar_value, global_step))


@pytest.mark.parametrize("logger_cls", [ScalarLogger, Writer])
def test_metric_logger_receives_the_buffers_metrics_every_log_every_reads(prefix, logger_cls):
    log = logger_cls()
    with make_buffer(8, BufferType.Reservoir, per_server_watermark=2, name=prefix, shape=(F,),
                     metric_logger=log, log_every=2) as buf:
        for i in range(4):
            buf.put(vec(i))
        buf.get()
        assert log.calls == []
        buf.get()
        got = {tag: (v, step) for tag, v, step in log.calls}
        assert got["buffer/population"] == (4.0, 2)
        assert got["buffer/puts"] == (4.0, 2)
        assert got["buffer/gets"] == (2.0, 2)
        assert got["buffer/evictions"] == (0.0, 2)
        assert {f"buffer/seen_{b}" for b in ("0", "1", "2", "3", "4", "5-8", "9-16", "17+")} <= set(got)


def test_seen_histogram_metrics_count_what_left_the_buffer(prefix):
    log = ScalarLogger()
    with make_buffer(4, BufferType.FIFO, name=prefix, shape=(F,), metric_logger=log) as buf:
        buf.put(vec(0))
        buf.put(vec(1))
        buf.get()
        buf.get()
        m = buf.log_metrics(step=7)
        assert m["seen_1"] == 2.0 and m["population"] == 0.0
        assert ("buffer/seen_1", 2.0, 7) in log.calls


def test_a_metric_logger_without_a_scalar_method_is_refused(prefix):
    with pytest.raises(TypeError, match="log_scalar"):
        make_buffer(8, name=prefix, metric_logger=object())


def test_threads_share_a_buffer_each_with_its_own_attachment(prefix):
    with make_buffer(4, name=prefix, shape=(F,)) as buf:
        def receive():  # as a server's receiving thread puts
            for i in range(50):
                buf.put(vec(i))
            buf.close_reception()

        t = threading.Thread(target=receive)
        t.start()
        got = [int(x[0]) for x in buf]
        t.join()
        assert got == list(range(50))


def _read_two(b, q):
    q.put([int(b.get()[0]), int(b.get()[0])])
    b.close()


def test_a_buffer_pickles_and_attaches_again_in_another_process(prefix):
    with make_buffer(8, name=prefix, shape=(F,)) as buf:
        for i in range(3):
            buf.put(vec(i))
        clone = pickle.loads(pickle.dumps(buf))
        assert not clone.owner and clone.name == buf.name
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_read_two, args=(buf, q))
        p.start()
        assert q.get(timeout=20) == [0, 1]
        p.join(10)
        assert clone.get()[0] == 2.0
        clone.close()
        assert len(buf) == 0  # the clone's close left the segment in place


def test_attach_buffer_takes_the_type_from_the_segment(prefix):
    with make_buffer(8, "FIFOEvictReservoir", per_server_watermark=2, name=prefix) as buf:
        other = attach_buffer(prefix, 0, shape=(F,))
        assert other.buffer_t is BufferType.FIFOEvictReservoir
        other.put(vec(1))
        assert len(buf) == 1
        other.close()
