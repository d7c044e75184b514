# SPDX-License-Identifier: MIT
"""create(max_times_sampled=k): a reservoir sample leaves after k reads."""
import numpy as np
import pytest

import cistern
from cistern.melissa import BufferType, make_buffer


def test_a_sample_leaves_after_k_reads_and_frees_its_slot(segname):
    with cistern.create(segname, "reservoir", slots=2, slot_size=16, watermark=1,
                        max_times_sampled=2) as seg:
        seg.put(np.full(4, 7, dtype=np.float32))
        for _ in range(2):
            assert int(seg.get_array(np.float32, (4,), timeout=1)[0]) == 7
        st = seg.stats()
        assert st.population == 0 and st.evictions == 0 and st.seen_hist[2] == 1
        with pytest.raises(TimeoutError):
            seg.get(timeout=0.05)


def test_config_reads_it_back(segname):
    with cistern.create(segname, "batch-reservoir", slots=8, slot_size=16, watermark=4,
                        batch_size=4, max_times_sampled=3) as seg:
        assert seg.config().max_times_sampled == 3


@pytest.mark.parametrize("policy", ["fifo", "firo"])
def test_fifo_and_firo_refuse_it_naming_it(segname, policy):
    why = cistern.config_problem(policy, slots=8, watermark=1, max_times_sampled=2)
    assert why is not None and "max_times_sampled" in why
    with pytest.raises(ValueError, match="max_times_sampled"):
        cistern.create(segname, policy, slots=8, watermark=1, max_times_sampled=2)


def test_make_buffer_forwards_it(segname):
    with make_buffer(8, BufferType.Reservoir, per_server_watermark=1, name=segname,
                     max_times_sampled=4) as buf:
        assert buf.segment().config().max_times_sampled == 4
