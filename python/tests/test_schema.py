# SPDX-License-Identifier: MIT
"""Samples that describe themselves: a segment created with a schema takes
dicts (or structured arrays) checked against it, and gives dicts of numpy
arrays back, without the reader restating anything."""
import numpy as np
import pytest

import cistern

RL = {"obs": ("float32", (84, 84)), "action": ("int64", ()), "reward": "float32",
      "next_obs": ("float32", (84, 84))}
RL_TEXT = "obs:float32[84,84];action:int64[];reward:float32[];next_obs:float32[84,84]"


def transition(i):
    rng = np.random.default_rng(i)
    return {"obs": rng.random((84, 84), dtype=np.float32), "action": i,
            "reward": i / 4, "next_obs": rng.random((84, 84), dtype=np.float32)}


def assert_transition(got, i):
    want = transition(i)
    assert set(got) == set(want)
    np.testing.assert_array_equal(got["obs"], want["obs"])
    np.testing.assert_array_equal(got["next_obs"], want["next_obs"])
    assert got["action"] == i and got["action"].dtype == np.int64
    assert got["reward"] == np.float32(i / 4) and got["reward"].dtype == np.float32


@pytest.fixture
def rl(segname):
    """An RL transition FIFO of 16 slots, sized by its schema."""
    seg = cistern.create(segname, slots=16, schema=RL)
    yield seg
    seg.detach()


# ---- the schema itself

def test_a_schema_is_laid_out_as_numpy_lays_out_an_aligned_struct():
    sch = cistern.Schema.parse(RL)
    assert sch.text == str(sch) == RL_TEXT
    assert list(sch) == ["obs", "action", "reward", "next_obs"]
    aligned = np.dtype([("obs", "f4", (84, 84)), ("action", "i8"), ("reward", "f4"),
                        ("next_obs", "f4", (84, 84))], align=True)
    assert sch.dtype == aligned
    assert sch.size == aligned.itemsize == 56464
    assert sch["action"] == cistern.Field(name="action", dtype="int64", shape=(), offset=28224,
                                          size=8, itemsize=8)
    assert sch["obs"].shape == (84, 84) and sch["obs"].size == 84 * 84 * 4


def test_every_form_of_a_schema_gives_the_same_schema():
    forms = [RL_TEXT, " obs : float32[84, 84]; action: int64; reward: float32[];"
             " next_obs: float32[84,84]", RL,
             [("obs", np.float32, (84, 84)), ("action", np.int64), ("reward", "float32"),
              ("next_obs", "f4", (84, 84))],
             np.dtype([("obs", "f4", (84, 84)), ("action", "i8"), ("reward", "f4"),
                       ("next_obs", "f4", (84, 84))]),
             cistern.Schema.parse(RL)]
    assert {cistern.Schema.parse(f) for f in forms} == {cistern.Schema.parse(RL_TEXT)}


def test_the_library_and_the_package_agree_on_the_text_and_layout(rl):
    assert rl.schema == cistern.Schema.parse(RL)
    assert rl.config().schema == RL_TEXT
    assert rl.slot_size == rl.schema.size, "slot_size 0 means the sample size"


@pytest.mark.parametrize("spec, says", [
    ("obs:float33[4]", "field 'obs': unknown dtype 'float33'"),
    ("obs:float32[4];obs:int8", "field 'obs' appears twice"),
    ({"obs": ("float32", (4, 0))}, "field 'obs': a dimension of 0"),
    ({"obs": "complex64"}, "field 'obs': dtype complex64 is not one of"),
    ({"obs": ">f4"}, "field 'obs': dtype >f4 is not one of"),
    ({"obs": object()}, "field 'obs'"),
    ({1: "int8"}, "a field name is a str"),
    (np.dtype("f4"), "has no named fields"),
])
def test_a_bad_schema_is_refused_naming_what_is_wrong(segname, spec, says):
    with pytest.raises(ValueError, match=says):
        cistern.Schema.parse(spec)
    with pytest.raises(ValueError, match=says):
        cistern.create(segname, schema=spec)
    with pytest.raises(FileNotFoundError):
        cistern.attach(segname)


def test_an_empty_schema_is_none_for_create_and_no_schema_for_parse(segname):
    with pytest.raises(ValueError, match="no field"):
        cistern.Schema.parse("")
    with cistern.create(segname, slots=4, slot_size=8, schema="") as seg:
        assert seg.schema is None


def test_a_schema_larger_than_the_slots_is_refused(segname):
    why = cistern.config_problem(slot_size=4096, schema="obs:float32[32,32];x:int8")
    assert why == "schema needs 4100 bytes a sample, more than slot_size (4096)"
    with pytest.raises(ValueError, match="more than slot_size"):
        cistern.create(segname, slot_size=4096, schema="obs:float32[32,32];x:int8")


def test_field_names_are_the_users_own_words_in_messages():
    why = cistern.config_problem(schema="slot_count:floaty")
    assert "field 'slot_count'" in why, why


# ---- puts and gets

def test_an_rl_transition_round_trips_as_a_dict(rl):
    ids = [rl.put(transition(i), sim_id=2, time_step=i) for i in range(3)]
    for i, sid in enumerate(ids):
        got, meta = rl.get(meta=True)
        assert meta == cistern.Meta(sid, 2, i)
        assert_transition(got, i)
        assert got["obs"].flags.writeable, "a private copy"


def test_get_batch_gives_the_fields_batched_along_a_first_axis(rl):
    for i in range(5):
        rl.put(transition(i), time_step=i)
    batch, metas = rl.get_batch(4, meta=True)
    assert batch["obs"].shape == (4, 84, 84) and batch["obs"].dtype == np.float32
    assert batch["action"].shape == (4,) and batch["reward"].shape == (4,)
    assert metas[:, 2].tolist() == [0, 1, 2, 3]
    for i in range(4):
        assert_transition({k: v[i] for k, v in batch.items()}, i)
    # Views of one private array: the samples side by side, as in the segment.
    assert batch["obs"].base is batch["action"].base
    rest = rl.get_batch(4, timeout=0)
    assert rest["action"].tolist() == [4]


def test_get_batch_under_a_reservoir_draws_distinct_samples(segname):
    seg = cistern.create(segname, policy="reservoir", slots=16, watermark=4, schema=RL)
    try:
        for i in range(8):
            seg.put(transition(i))
        batch = seg.get_batch(6, timeout=1)
        assert len(set(batch["action"].tolist())) == 6
        for j, i in enumerate(batch["action"].tolist()):
            assert_transition({k: v[j] for k, v in batch.items()}, i)
    finally:
        seg.detach()


def test_acquire_gives_zero_copy_views_of_each_field(rl):
    rl.put(transition(7))
    s = rl.acquire()
    with s as t:
        assert_transition(t, 7)
        base = s._s.address
        for name, f in rl.schema.items():
            assert t[name].__array_interface__["data"][0] == base + f.offset, name
            assert not t[name].flags.writeable
        with pytest.raises(ValueError):
            t["obs"][0, 0] = 1
    assert not s.held
    with pytest.raises(ValueError, match="released"):
        s.fields


def test_acquire_with_a_dtype_still_reads_raw_bytes(rl):
    rl.put(transition(1))
    with rl.acquire(dtype=np.uint8) as raw:
        assert raw.shape == (rl.schema.size,)


def test_a_structured_record_and_array_are_put_as_samples(rl):
    dt = np.dtype([("obs", "f4", (84, 84)), ("action", "i8"), ("reward", "f4"),
                   ("next_obs", "f4", (84, 84))], align=True)
    recs = np.zeros(3, dtype=dt)
    for i in range(3):
        for k, v in transition(i).items():
            recs[i][k] = v
    rl.put(recs[0])                     # one record (numpy.void)
    ids = rl.put_batch(recs[1:])        # a structured array: one sample per record
    assert len(ids) == 2
    for i in range(3):
        assert_transition(rl.get(), i)


def test_a_packed_structured_array_with_other_offsets_is_put_field_by_field(rl):
    packed = np.dtype([("reward", "f4"), ("action", "i8"), ("obs", "f4", (84, 84)),
                       ("next_obs", "f4", (84, 84))])
    rec = np.zeros((), dtype=packed)
    for k, v in transition(5).items():
        rec[k] = v
    rl.put(rec)
    assert_transition(rl.get(), 5)


def test_put_batch_takes_a_dict_of_fields_along_a_first_axis(rl):
    batch = {k: np.stack([np.asarray(transition(i)[k]) for i in range(4)]) for k in RL}
    batch["reward"] = batch["reward"].astype(np.float32)
    ids = rl.put_batch(batch, time_step=[0, 1, 2, 3])
    assert len(ids) == 4
    for i in range(4):
        got, meta = rl.get(meta=True)
        assert meta.time_step == i
        assert_transition(got, i)


@pytest.mark.parametrize("change, says", [
    (lambda t: t.update(obs=t["obs"].astype(np.float64)),
     "field 'obs': dtype float64, where the schema has float32"),
    (lambda t: t.update(obs=t["obs"][:83]), r"field 'obs': shape \(83, 84\)"),
    (lambda t: t.pop("reward"), "field 'reward' is missing"),
    (lambda t: t.update(extra=1), "field 'extra' is not in the schema"),
    (lambda t: t.update(action=0.5), "field 'action': a value that is not a whole number"),
    (lambda t: t.update(action=[1, 2]), r"field 'action': shape \(2,\)"),
    (lambda t: t.update(action="three"), "field 'action'"),
])
def test_wrong_data_is_refused_naming_the_field_and_nothing_is_written(rl, change, says):
    t = transition(0)
    change(t)
    with pytest.raises(ValueError, match=says):
        rl.put(t)
    assert rl.stats().puts == 0
    assert rl.occupancy().slots["reserved"] == 0
    rl.put(transition(1))
    assert_transition(rl.get(), 1)


def test_wrong_data_is_refused_before_waiting_for_room(segname):
    seg = cistern.create(segname, slots=1, schema=RL)
    try:
        seg.put(transition(0))
        bad = transition(1)
        del bad["obs"]
        with pytest.raises(ValueError, match="field 'obs' is missing"):
            seg.put(bad, timeout=None)  # a full segment: a wait would never end
    finally:
        seg.detach()


def test_a_wrong_batch_is_refused_whole(rl):
    batch = {k: np.stack([np.asarray(transition(i)[k]) for i in range(3)]) for k in RL}
    batch["reward"] = batch["reward"].astype(np.float32)
    batch["action"] = batch["action"][:2]
    with pytest.raises(ValueError, match=r"field 'action': shape \(2,\), where the schema has "
                                         r"\(3,\)"):
        rl.put_batch(batch)
    assert rl.stats().puts == 0


def test_scalars_out_of_their_fields_range_are_refused_naming_the_field(segname):
    seg = cistern.create(segname, slots=4, schema="u:uint8;f:float16;b:bool;i:int16[2]")
    try:
        seg.put({"u": 255, "f": 0.5, "b": True, "i": [-3, 7]})
        got = seg.get()
        assert got["u"] == 255 and got["f"] == 0.5 and got["b"] and got["i"].tolist() == [-3, 7]
        for bad, says in (({"u": 256}, "field 'u': a value out of range for uint8"),
                          ({"u": -1}, "field 'u': a value out of range"),
                          ({"f": 1e6}, "field 'f': a value out of range for float16"),
                          ({"b": 1}, "field 'b': int64 values, where the schema has bool"),
                          ({"i": [1, 1 << 20]}, "field 'i': a value out of range for int16")):
            t = {"u": 1, "f": 0.0, "b": False, "i": [0, 0]}
            t.update(bad)
            with pytest.raises(ValueError, match=says):
                seg.put(t)
        assert seg.stats().puts == 1
    finally:
        seg.detach()


def test_raw_bytes_of_another_size_are_refused_and_of_the_size_taken(rl):
    with pytest.raises(ValueError, match="a sample of 5 bytes, where the schema's samples are"):
        rl.put(b"bytes")
    raw = np.zeros(rl.schema.size, dtype=np.uint8)
    rl.put(raw)
    assert rl.get()["action"] == 0


def test_the_library_refuses_a_raw_put_of_another_size(segname):
    seg = cistern.create(segname, slots=4, schema="a:int32[2]")
    try:
        # The C call under every put, as a producer that ignores the schema calls it.
        with pytest.raises(ValueError, match="another length than the segment's schema"):
            seg._h.put(b"abc")
        assert seg.stats().puts == 0
        seg._h.put(b"\0" * 8)
        assert seg.stats().puts == 1
    finally:
        seg.detach()


def test_a_segment_without_a_schema_works_as_before(fifo):
    assert fifo.schema is None and fifo.config().schema is None
    fifo.put(b"hello")
    assert fifo.get() == b"hello"
    fifo.put(np.arange(4, dtype=np.float32))
    assert fifo.get_batch(1, np.float32, (4,)).shape == (1, 4)


# ---- other readers and tools

def test_pairs_and_batches_give_fields_per_member(segname):
    seg = cistern.create(segname, policy="sim-paired-reservoir", slots=16, watermark=2,
                         sweep_size=2, time_steps=4, schema="x:float32[3];t:int32")
    try:
        for t in range(4):
            seg.put({"x": np.full(3, t, dtype=np.float32), "t": t}, sim_id=1, time_step=t)
        pair = seg.get_pair(timeout=1)
        assert pair["x"].shape == (2, 3)
        assert pair["t"][1] == pair["t"][0] + 1
        with seg.acquire_pair(timeout=1) as (a, b):
            assert b["t"] == a["t"] + 1
    finally:
        seg.detach()
    res = cistern.create(segname + "-b", policy="reservoir", slots=8, watermark=2,
                         schema="x:float32[3];t:int32")
    try:
        for t in range(4):
            res.put({"x": np.full(3, t, dtype=np.float32), "t": t})
        g = res.acquire_batch(3, timeout=1)
        with g as members:
            assert len(members) == 3
            ts = [int(m["t"]) for m in members]
            assert len(set(ts)) == 3, "distinct members"
            stacked = g.stack_fields()
            assert stacked["x"].shape == (3, 3)
    finally:
        res.detach()
        cistern.unlink(segname + "-b")


def test_dump_and_restore_keep_the_schema(rl, segname, tmp_path):
    rl.put(transition(3))
    info = cistern.dump(segname, tmp_path / "d")
    assert info.config.schema == RL_TEXT and info.format_version == 2
    assert cistern.verify_dump(tmp_path / "d").config.schema == RL_TEXT
    copy = segname + "-copy"
    cistern.restore(tmp_path / "d", copy)
    try:
        with cistern.attach(copy) as seg:
            assert seg.schema == rl.schema
            assert_transition(seg.get(), 3)
    finally:
        cistern.unlink(copy)


def test_inspect_and_list_say_what_they_know(rl, segname):
    assert cistern.inspect(segname).config.schema == RL_TEXT
    with cistern.open_readonly(segname) as ro:
        assert ro.schema == rl.schema
    [info] = [s for s in cistern.list_segments() if s.name == segname]
    assert info.config is not None and info.config.schema is None, "not read by a listing"


# ---- torch

def test_torch_dataset_gives_dicts_of_tensors(segname):
    torch = pytest.importorskip("torch")
    from cistern.torch import CisternDataset
    seg = cistern.create(segname, slots=32, schema=RL)
    try:
        for i in range(10):
            seg.put(transition(i))
        seg.close_reception()
        loader = torch.utils.data.DataLoader(CisternDataset(segname), batch_size=4)
        batches = list(loader)
        assert [b["obs"].shape for b in batches] == [(4, 84, 84)] * 2 + [(2, 84, 84)]
        assert torch.cat([b["action"] for b in batches]).tolist() == list(range(10))
        assert batches[0]["reward"].dtype == torch.float32
    finally:
        seg.detach()


def test_torch_dataset_batches_and_views_by_the_schema(segname):
    torch = pytest.importorskip("torch")
    from cistern.torch import CisternDataset
    seg = cistern.create(segname, slots=32, schema=RL)
    try:
        for i in range(10):
            seg.put(transition(i))
        ds = CisternDataset(segname, batch_size=4, with_meta=True)
        first, meta = next(iter(ds))
        assert first["obs"].shape == (4, 84, 84) and meta.shape == (4, 3)
        assert first["action"].tolist() == [0, 1, 2, 3]
        seg.close_reception()
        seen = []
        for t in CisternDataset(segname, copy=False):
            assert t["obs"].shape == (84, 84)
            seen.append(int(t["action"]))
            np.testing.assert_array_equal(t["obs"].numpy(), transition(seen[-1])["obs"])
        assert seen == list(range(4, 10))
    finally:
        seg.detach()


def test_torch_dataset_batches_of_a_plain_segment_still_need_a_shape(segname):
    torch = pytest.importorskip("torch")
    from cistern.torch import CisternDataset
    seg = cistern.create(segname, slots=4, slot_size=16)
    try:
        with pytest.raises(ValueError, match="needs the sample shape"):
            next(iter(CisternDataset(segname, batch_size=2)))
        with pytest.raises(ValueError, match="needs the sample shape"):
            CisternDataset(segname, "float32", batch_size=2)
        assert torch is not None
    finally:
        seg.detach()
