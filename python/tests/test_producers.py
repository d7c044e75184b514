# SPDX-License-Identifier: MIT
"""expected_producers: a producer that dies before producer_done() is waited
for (a replacement fills the count), or with dead_producer_done=True counts
as done, and the iterators and cistern.torch's dataset follow."""
import subprocess
import sys

import pytest

import cistern

# A producer in a process of its own: puts `puts` samples, then says it is
# done and detaches, or dies by SIGKILL without either.
_PRODUCER = """
import os, signal, sys
import cistern
name, puts, end = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seg = cistern.attach(name, producer=sys.argv[4] == "producer")
for i in range(puts):
    seg.put(bytes([i]) * 4, timeout=10)
if end == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
seg.producer_done()
seg.detach()
"""


def _producer(name, puts, end, attach_as="plain"):
    code = subprocess.run([sys.executable, "-c", _PRODUCER, name, str(puts), end, attach_as],
                          timeout=60).returncode
    assert code == (-9 if end == "killed" else 0)


def _read(seg, timeout):
    """Payloads until end of data; TimeoutError with what came before in .items."""
    items = []
    try:
        for a in seg.iter_arrays("uint8", None, timeout=timeout):
            items.append(a.tobytes())
    except TimeoutError as e:
        e.items = items
        raise
    return items


def test_iterator_ends_when_a_dead_producer_counts_as_done(segname):
    with cistern.create(segname, slots=16, slot_size=4, expected_producers=2,
                        dead_producer_done=True) as seg:
        assert seg.config()["dead_producer_done"]
        _producer(segname, 3, "done")
        _producer(segname, 2, "killed")
        assert len(_read(seg, timeout=10)) == 5  # then end of data, not a timeout
        st = seg.stats()
        assert (st["producers_expected"], st["producers_done"], st["producers_died"]) == (2, 1, 1)
        assert st["reception_closed"]


def test_iterator_waits_for_a_replacement_by_default(segname):
    with cistern.create(segname, slots=16, slot_size=4, expected_producers=2) as seg:
        assert not seg.config()["dead_producer_done"]
        _producer(segname, 3, "done")
        _producer(segname, 2, "killed")
        with pytest.raises(TimeoutError) as e:
            _read(seg, timeout=1)
        assert len(e.value.items) == 5
        st = seg.stats()
        assert (st["producers_done"], st["producers_died"]) == (1, 1)
        assert not st["reception_closed"]
        _producer(segname, 1, "done")  # started in the dead one's place
        assert len(_read(seg, timeout=10)) == 1
        assert seg.stats()["producers_done"] == 2


def test_a_producer_attached_as_one_and_killed_before_its_first_put_ends_reading(segname):
    with cistern.create(segname, slots=16, slot_size=4, expected_producers=2,
                        dead_producer_done=True) as seg:
        _producer(segname, 3, "done")
        _producer(segname, 0, "killed", attach_as="producer")
        assert len(_read(seg, timeout=10)) == 3  # then end of data, not a timeout
        st = seg.stats()
        assert (st["producers_done"], st["producers_died"]) == (1, 1)


def test_dead_producer_done_needs_expected_producers(segname):
    with pytest.raises(ValueError, match="dead_producer_done needs expected_producers"):
        cistern.create(segname, dead_producer_done=True)


def test_torch_dataset_follows_the_choice(segname):
    torch = pytest.importorskip("torch")
    from cistern.torch import CisternDataset
    for flag in (True, False):
        name = f"{segname}-{int(flag)}"
        with cistern.create(name, slots=16, slot_size=4, expected_producers=2,
                            dead_producer_done=flag) as seg:
            try:
                _producer(name, 3, "done")
                _producer(name, 2, "killed")
                ds = CisternDataset(name, "uint8", (4,), timeout=1 if not flag else 10)
                loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
                got = []
                if flag:
                    got = list(loader)  # ends at end of data
                else:
                    with pytest.raises(TimeoutError):
                        for t in loader:
                            got.append(t)
                assert len(got) == 5
            finally:
                seg.unlink()
