# SPDX-License-Identifier: MIT
"""A producer written in C (python/tests/c_producer.c) and a Python reader."""
import subprocess

import numpy as np

import cistern


def test_c_producers_python_reader(segname, c_producer):
    exe = c_producer
    count, floats = 200, 32
    with cistern.create(segname, slots=8, slot_size=floats * 4,
                        expected_producers=2) as seg:
        procs = [subprocess.Popen([exe, segname, str(count), str(floats), str(sim)])
                 for sim in (10, 11)]
        seen = {10: [], 11: []}
        try:
            while True:
                try:
                    a, m = seg.get_array(np.float32, (floats,), timeout=20, meta=True)
                except cistern.EndOfData:
                    break
                t = m.time_step
                np.testing.assert_array_equal(a, np.arange(floats) + t * floats)
                seen[m.sim_id].append(t)
        finally:
            codes = [p.wait(timeout=20) for p in procs]
        assert codes == [0, 0]
        # FIFO: every sample exactly once, each producer's in its order
        assert seen == {10: list(range(count)), 11: list(range(count))}
        st = seg.stats()
        assert st["puts"] == st["gets"] == 2 * count
        assert st["reception_closed"]
