# SPDX-License-Identifier: MIT
"""Samples that do not fit: refused at put time where the sample size, dtype or
schema is known, and gone past by a reader that asks to (skip_misfits)."""
import itertools
import os
import warnings

import numpy as np
import pytest

import cistern
from cistern.melissa import BufferType, attach, make_buffer, segment_name

_seq = itertools.count()


@pytest.fixture
def prefix():
    """A buffer name unique to this test; its segment removed afterwards."""
    name = f"pyt-{os.getpid()}-mis{next(_seq)}"
    yield name
    cistern.unlink(segment_name(name, 0), missing_ok=True)


def vec(i, dtype=np.float32):
    return np.full(4, i, dtype=dtype)


# ---- puts that know the sample refuse what does not fit


def test_buffer_put_refuses_raw_bytes_of_another_size_and_writes_nothing(prefix):
    with make_buffer(8, name=prefix, shape=(4,)) as buf:
        with pytest.raises(ValueError, match="raw bytes of 10 bytes where this buffer's "
                                             "samples are 16"):
            buf.put(b"\0" * 10)
        assert buf.stats()["puts"] == 0
        buf.put(vec(1).tobytes())
        assert buf.get(timeout=0).tolist() == [1.0] * 4


def test_buffer_put_batch_refuses_rows_of_another_shape(prefix):
    with make_buffer(8, name=prefix, shape=(4,)) as buf:
        with pytest.raises(ValueError, match="a row of 2 items where this buffer holds shape"):
            buf.put_batch(np.zeros((3, 2), np.float32))
        assert buf.stats()["puts"] == 0


def test_buffer_put_converts_another_dtype_by_the_rule_or_refuses_it(prefix):
    with make_buffer(8, name=prefix, shape=(4,), dtype="int32") as buf:
        buf.put(np.array([1.0, 2.0, 3.0, 4.0]))  # whole numbers fit an int32
        assert buf.get(timeout=0).tolist() == [1, 2, 3, 4]
        with pytest.raises(ValueError, match="not a whole number, for int32"):
            buf.put(np.array([0.5, 1.0, 2.0, 3.0]))
        with pytest.raises(ValueError, match="out of range for int32"):
            buf.put(np.full(4, 2**40))
        assert buf.stats()["puts"] == 1


def test_buffer_put_refuses_a_float_beyond_float32s_range(prefix):
    with make_buffer(8, name=prefix, shape=(4,)) as buf:
        with pytest.raises(ValueError, match="out of range for float32"):
            buf.put(np.full(4, 1e39))
        assert buf.stats()["puts"] == 0


def test_a_float64_array_into_a_one_field_schema_is_refused_as_the_field(segname):
    seg = cistern.create(segname, slots=4, schema={"x": ("float32", (4,))})
    try:
        with pytest.raises(ValueError, match="field 'x': dtype float64, where the schema "
                                             "has float32"):
            seg.put(np.array([1.0, 2.0]))  # 16 bytes, as many as a sample
        with pytest.raises(ValueError, match="field 'x'"):
            seg.put_batch(np.zeros((2, 2)))
        assert seg.stats().puts == 0
        seg.put(np.arange(4, dtype=np.float32))
        assert seg.get()["x"].tolist() == [0.0, 1.0, 2.0, 3.0]
    finally:
        seg.detach()


def test_a_numpy_scalar_of_another_dtype_into_a_one_field_schema_is_refused(segname):
    seg = cistern.create(segname, slots=4, schema="r:float32")
    try:
        with pytest.raises(ValueError, match="field 'r': dtype int32, where the schema has "
                                             "float32"):
            seg.put(np.int32(3))  # 4 bytes, as many as a sample
        seg.put(np.float32(0.5))
        assert seg.get()["r"] == 0.5
    finally:
        seg.detach()


def test_a_typed_array_into_a_schema_of_several_fields_is_refused(segname):
    seg = cistern.create(segname, slots=4, schema="a:float32;b:float32")
    try:
        with pytest.raises(ValueError, match="a float32 array is not a sample of the schema"):
            seg.put(np.zeros(2, np.float32))
        assert seg.stats().puts == 0
    finally:
        seg.detach()


def test_schema_fields_take_values_by_the_documented_rule(segname):
    seg = cistern.create(segname, slots=4, schema="i:int64;f:float32")
    try:
        seg.put({"i": 3.0, "f": 0.1})  # a whole float fits; a float is rounded
        got = seg.get()
        assert got["i"] == 3 and got["f"] == np.float32(0.1)
        with pytest.raises(ValueError, match="field 'i': a value that is not a whole number"):
            seg.put({"i": 3.5, "f": 0.0})
        with pytest.raises(ValueError, match="field 'f': a value out of range for float32"):
            seg.put({"i": 0, "f": 1e39})
    finally:
        seg.detach()


# ---- a reader's way past a sample that does not fit


def test_a_misfit_stays_and_get_takes_it_as_bytes(fifo):
    fifo.put(b"\0" * 10)
    fifo.put(vec(1))
    with pytest.raises(ValueError, match="stays in the segment"):
        fifo.get_array("float32", (4,), timeout=0)
    assert fifo.get(timeout=0) == b"\0" * 10
    assert fifo.get_array("float32", (4,), timeout=0).tolist() == [1.0] * 4


def test_skip_misfits_reads_past_a_sample_of_another_size(fifo):
    fifo.put(b"\0" * 10)
    fifo.put(vec(1))
    fifo.skip_misfits = True
    assert fifo.get_array("float32", (4,), timeout=0).tolist() == [1.0] * 4
    assert fifo.misfits_skipped == 1
    assert len(fifo) == 0


def test_skip_misfits_reads_past_one_in_a_batch_and_in_iteration(fifo):
    fifo.put(vec(1))
    fifo.put(b"\0" * 10)
    fifo.put(vec(2))
    fifo.close_reception()
    fifo.skip_misfits = True
    assert [a[0] for a in fifo.iter_arrays("float32", (4,))] == [1.0, 2.0]
    assert fifo.misfits_skipped == 1


def test_skip_misfits_without_a_shape_skips_what_is_not_whole_items(fifo):
    fifo.put(b"\0" * 10)
    fifo.put(vec(3))
    fifo.skip_misfits = True
    assert fifo.get_array("float32", timeout=0).tolist() == [3.0] * 4
    assert fifo.misfits_skipped == 1


def test_skip_misfits_drops_a_misfit_from_a_reservoirs_batch(segname):
    seg = cistern.create(segname, policy="reservoir", slots=8, slot_size=64, watermark=4)
    try:
        for i in range(3):
            seg.put(vec(i))
        seg.put(b"\0" * 10)
        seg.close_reception()
        seg.skip_misfits = True
        got = seg.get_batch(4, "float32", (4,), timeout=0)
        assert sorted(got[:, 0].tolist()) == [0.0, 1.0, 2.0]
        assert seg.misfits_skipped == 1
    finally:
        seg.detach()


def test_skip_misfits_leaves_a_misfit_out_of_acquire_many(fifo):
    fifo.put(vec(1))
    fifo.put(b"\0" * 10)
    fifo.put(vec(2))
    fifo.skip_misfits = True
    with fifo.acquire_many(2, timeout=0, dtype="float32", shape=(4,)) as views:
        assert [v[0] for v in views] == [1.0, 2.0]
    assert fifo.misfits_skipped == 1


def test_a_buffer_with_skip_misfits_reads_past_a_simulations_short_sample(prefix):
    with make_buffer(8, name=prefix, shape=(4,), skip_misfits=True) as buf:
        with attach(prefix) as sim:  # a simulation's raw segment knows no sample size
            sim.put(b"\0" * 10)
            sim.put(vec(5))
        assert buf.get(timeout=0).tolist() == [5.0] * 4
        assert buf.segment().misfits_skipped == 1


def test_a_dataset_with_skip_misfits_reads_past_a_misfit(segname):
    torch = pytest.importorskip("torch")
    from cistern.torch import CisternDataset
    seg = cistern.create(segname, slots=8, slot_size=64)
    try:
        seg.put(vec(1))
        seg.put(b"\0" * 10)
        seg.put(vec(2))
        seg.close_reception()
        ds = CisternDataset(segname, "float32", (4,), batch_size=2, skip_misfits=True)
        batches = list(ds)
        assert torch.cat(batches)[:, 0].tolist() == [1.0, 2.0]
    finally:
        seg.detach()


# ---- the metric logger


class Failing:
    def __init__(self):
        self.calls = 0

    def log_scalar(self, tag, value, step):
        self.calls += 1
        raise RuntimeError("the logger's disk is full")


def test_a_metric_logger_that_raises_loses_no_sample(prefix):
    with make_buffer(8, name=prefix, shape=(4,), metric_logger=Failing(), log_every=1) as buf:
        buf.put(vec(7))
        with pytest.warns(RuntimeWarning, match="metric_logger raised RuntimeError"):
            got = buf.get(timeout=0)
        assert got.tolist() == [7.0] * 4
        assert len(buf) == 0


class Recording:
    def __init__(self):
        self.steps = []

    def log_scalar(self, tag, value, step):
        if tag == "buffer/population":
            self.steps.append(step)


def test_log_every_counts_samples_read_not_calls(prefix):
    log = Recording()
    with make_buffer(16, name=prefix, shape=(4,), metric_logger=log, log_every=4) as buf:
        buf.put_batch(np.zeros((8, 4), np.float32))
        buf.get_batch(4)
        assert log.steps == [4]
        buf.get_batch(3)
        buf.get()
        assert log.steps == [4, 8]


# ---- the rank from the environment


def test_a_rank_variable_that_is_not_a_number_is_named(prefix, monkeypatch):
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK", "abc")
    with pytest.raises(ValueError, match="RANK='abc' is not a rank"):
        make_buffer(8, comm_size=2, name=prefix)


def test_a_rank_variable_beyond_comm_size_is_named(prefix, monkeypatch):
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ValueError, match="rank 5, from RANK='5', is not below comm_size=2"):
        make_buffer(8, comm_size=2, name=prefix)


# ---- reads that wait below the watermark say so


def reservoir_of_18(segname):
    seg = cistern.create(segname, policy="reservoir", slots=128, slot_size=64, watermark=64)
    seg.put_batch(np.zeros((18, 4), np.float32))
    return seg


def test_a_read_timing_out_below_the_watermark_names_population_and_watermark(segname):
    seg = reservoir_of_18(segname)
    try:
        with pytest.raises(TimeoutError, match="population 18, watermark 64"):
            seg.get(timeout=0.05)
        with pytest.raises(TimeoutError, match="population 18, watermark 64"):
            seg.get_batch(4, "float32", (4,), timeout=0)
        with pytest.raises(TimeoutError, match="population 18, watermark 64"):
            seg.get_into(np.empty(4, np.float32), timeout=0)
    finally:
        seg.detach()


def test_a_read_interrupted_below_the_watermark_notes_population_and_watermark(segname):
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    seg = reservoir_of_18(segname)
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt) as e:
            seg.get()
        assert any("population 18, watermark 64" in n for n in e.value.__notes__)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        seg.detach()


def test_a_timeout_above_the_watermark_says_nothing_of_it(segname):
    seg = cistern.create(segname, policy="fifo", slots=4, slot_size=64)
    try:
        with pytest.raises(TimeoutError) as e:
            seg.get(timeout=0)
        assert "watermark" not in str(e.value)
    finally:
        seg.detach()


def test_buffer_reads_say_why_they_wait(prefix):
    with make_buffer(128, BufferType.Reservoir, per_server_watermark=64, name=prefix,
                     shape=(4,)) as buf:
        buf.put_batch(np.zeros((18, 4), np.float32))
        with pytest.raises(TimeoutError, match="population 18, watermark 64"):
            buf.get(timeout=0)
