# SPDX-License-Identifier: MIT
import cistern

STATS_KEYS = {
    "population", "puts", "gets", "evictions", "evicted_unseen", "redeliveries",
    "reclaimed", "producer_waits", "producer_wait_ns", "reader_waits",
    "reader_wait_ns", "seen_hist", "unpaired", "procs_attached", "reception_closed",
    "producers_expected", "producers_done", "producers_died",
    "cold_slots", "cold_population", "cold_disk_bytes", "cold_spilled", "cold_reads",
    "cold_evictions", "cold_bytes_written", "cold_bytes_read", "cold_write_wait_ns",
    "cold_read_wait_ns", "cold_stage_bytes", "cold_groups_staged", "cold_groups_writing",
    "cold_write_waits",
}


def test_stats_counts_puts_gets_and_population(fifo):
    for i in range(5):
        fifo.put(b"s")
    fifo.get()
    fifo.get()
    st = fifo.stats()
    assert set(st) == STATS_KEYS
    assert (st["puts"], st["gets"], st["population"]) == (5, 2, 3)
    assert (st.puts, st.gets, st.population) == (5, 2, 3)
    assert st["procs_attached"] >= 1
    assert st["reception_closed"] is False
    assert len(st["seen_hist"]) == 8 and st["seen_hist"][1] == 2


def test_config_has_the_creation_parameters(segname):
    with cistern.create(segname, policy="fifo", slots=32, slot_size=512, seed=42,
                        expected_producers=3) as seg:
        cfg = seg.config()
        assert cfg["policy"] == "fifo"
        assert (cfg["slots"], cfg["slot_size"], cfg["seed"]) == (32, 512, 42)
        assert cfg["expected_producers"] == 3
        assert cfg["mode"] == 0o600
        assert (cfg.slots, cfg.policy) == (32, "fifo")
        assert seg.slot_size == 512


def test_policies_are_named():
    assert cistern.POLICIES[:3] == ("fifo", "firo", "reservoir")
    assert len(cistern.POLICIES) == 7
