/* SPDX-License-Identifier: MIT */
/*
 * test_fifo_mp.c - FIFO across real processes: exactly-once delivery under
 * 4 producers and 4 readers, in copying and zero-copy forms, back-pressure,
 * timeouts, end of data, and a blocked reader's CPU.
 */
#include <criterion/criterion.h>
#include <sched.h>

#include "helpers.h"

/* Every test's segment goes through seg_create(); the fixture removes it, pass or fail. */
TestSuite(fifo_mp, .fini = seg_fini);

#define PRODUCERS 4
#define READERS 4
#define TOTAL 1000000u
#define PER (TOTAL / PRODUCERS)
#define PAYLOAD 48

static int produce(const char *name, uint32_t id, int zero_copy)
{
	struct cistern *c;
	if (cistern_attach(name, &c) < 0)
		return 10;
	for (uint32_t i = 0; i < PER; i++) {
		struct cistern_meta m = {.sim_id = id, .time_step = i};
		if (zero_copy) {
			struct cistern_slot slot;
			if (cistern_reserve(c, &slot, -1) < 0)
				return 11;
			fill_payload(slot.data, PAYLOAD, id, i);
			if (cistern_commit(c, &slot, PAYLOAD, &m) < 0)
				return 12;
		} else {
			uint8_t buf[PAYLOAD];
			fill_payload(buf, PAYLOAD, id, i);
			if (cistern_put(c, buf, PAYLOAD, &m, -1) < 0)
				return 13;
		}
	}
	cistern_producer_done(c);
	cistern_detach(c);
	return 0;
}

static int consume(const char *name, uint8_t *seen, int zero_copy)
{
	struct cistern *c;
	if (cistern_attach(name, &c) < 0)
		return 20;
	for (;;) {
		const uint8_t *data;
		size_t len;
		struct cistern_meta m;
		struct cistern_sample s;
		uint8_t buf[PAYLOAD];
		int r;
		if (zero_copy) {
			r = cistern_acquire(c, &s, -1);
			data = s.data;
			len = s.len;
			m = s.meta;
		} else {
			ssize_t n = cistern_get(c, buf, sizeof(buf), &m, -1);
			r = n < 0 ? (int)n : 0;
			data = buf;
			len = n < 0 ? 0 : (size_t)n;
		}
		if (r == CISTERN_EOD)
			break;
		if (r < 0)
			return 21;
		if (len != PAYLOAD || m.sim_id >= PRODUCERS || m.time_step >= PER ||
		    !check_payload(data, len, m.sim_id, m.time_step))
			return 22;
		__atomic_fetch_add(&seen[(size_t)m.sim_id * PER + m.time_step], 1,
				   __ATOMIC_RELAXED);
		if (zero_copy && cistern_release(c, &s) < 0)
			return 23;
	}
	cistern_detach(c);
	return 0;
}

static void run_exactly_once(const char *tag, int zero_copy)
{
	struct cistern_config cfg = {
		.slot_size = PAYLOAD, .slot_count = 1024, .expected_producers = PRODUCERS};
	struct cistern *c = seg_create(tag, cfg);
	const char *name = seg_name_of(c);
	uint8_t *seen = shared_alloc(TOTAL);
	cr_assert_not_null(seen);
	for (int i = 0; i < READERS; i++)
		if (fork_child() == 0)
			_exit(consume(name, seen, zero_copy));
	for (uint32_t i = 0; i < PRODUCERS; i++)
		if (fork_child() == 0)
			_exit(produce(name, i, zero_copy));
	cr_assert_eq(reap_all(), 0, "a producer or reader failed");
	size_t missing = 0, dup = 0;
	for (size_t i = 0; i < TOTAL; i++) {
		missing += seen[i] == 0;
		dup += seen[i] > 1;
	}
	cr_assert_eq(missing, 0, "%zu samples never received", missing);
	cr_assert_eq(dup, 0, "%zu samples received twice", dup);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.puts, TOTAL);
	cr_assert_eq(st.gets, TOTAL);
	cr_assert_eq(st.population, 0);
}

Test(fifo_mp, four_by_four_copying_delivers_every_sample_exactly_once, .timeout = 300)
{
	run_exactly_once("x1", 0);
}

Test(fifo_mp, four_by_four_zero_copy_delivers_every_sample_exactly_once, .timeout = 300)
{
	run_exactly_once("x0", 1);
}

static void pin_to_cpu0(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/*
 * Two processes on one CPU, each waiting for the other on a 2-slot ring: every
 * wait can only end after the waiter gives the CPU up (a yield, its sleep, or
 * preemption), the path where waits spin least and hand over most. Order and
 * count must hold throughout.
 */
Test(fifo_mp, producer_and_reader_sharing_one_cpu_hand_off_in_order, .timeout = 120)
{
	enum { N = 100000 };
	struct cistern_config cfg = {.slot_size = 16, .slot_count = 2, .expected_producers = 1};
	struct cistern *c = seg_create("1cpu", cfg);
	const char *name = seg_name_of(c);
	if (fork_child() == 0) {
		pin_to_cpu0();
		struct cistern *r;
		if (cistern_attach(name, &r) < 0)
			_exit(20);
		for (uint64_t i = 0; i < N; i++) {
			uint64_t v;
			if (cistern_get(r, &v, sizeof(v), NULL, -1) != (ssize_t)sizeof(v) || v != i)
				_exit(21);
		}
		uint64_t v;
		_exit(cistern_get(r, &v, sizeof(v), NULL, -1) == CISTERN_EOD ? 0 : 22);
	}
	if (fork_child() == 0) {
		pin_to_cpu0();
		struct cistern *p;
		if (cistern_attach(name, &p) < 0)
			_exit(10);
		for (uint64_t i = 0; i < N; i++)
			if (cistern_put(p, &i, sizeof(i), NULL, -1) < 0)
				_exit(11);
		_exit(cistern_producer_done(p) < 0 ? 12 : 0);
	}
	cr_assert_eq(reap_all(), 0, "the producer or the reader failed");
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.gets, N);
}

Test(fifo_mp, producer_blocks_when_full_until_a_reader_makes_room, .timeout = 60)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 8};
	struct cistern *c = seg_create("bp", cfg);
	const char *name = seg_name_of(c);
	_Atomic uint32_t *done = shared_alloc(sizeof(*done));
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *p;
		if (cistern_attach(name, &p) < 0)
			_exit(1);
		for (uint32_t i = 0; i < 16; i++) {
			if (cistern_put(p, &i, sizeof(i), NULL, -1) < 0)
				_exit(2);
			atomic_store(done, i + 1);
		}
		_exit(0);
	}
	/* Give the producer ample time: it must stop at the capacity. */
	usleep(300 * 1000);
	cr_assert_eq(atomic_load(done), 8, "producer got past a full segment");
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.population, 8);
	for (uint32_t i = 0; i < 16; i++) {
		uint32_t v;
		cr_assert_eq(cistern_get(c, &v, sizeof(v), NULL, 5000), 4);
		cr_assert_eq(v, i);
	}
	cr_assert_eq(reap_all(), 0);
	cistern_stats_get(c, &st);
	cr_assert_geq(st.producer_waits, 1, "the wait was counted");
}

Test(fifo_mp, reader_in_another_process_times_out, .timeout = 60)
{
	struct cistern *c = seg_create_cfg("rto", NULL);
	const char *name = seg_name_of(c);
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *r;
		if (cistern_attach(name, &r) < 0)
			_exit(1);
		char buf[8];
		double t0 = mono_now();
		ssize_t n = cistern_get(r, buf, sizeof(buf), NULL, 200);
		_exit(n == -ETIMEDOUT && mono_now() - t0 >= 0.19 ? 0 : 2);
	}
	cr_assert_eq(reap_all(), 0);
}

Test(fifo_mp, blocked_reader_wakes_for_a_sample_from_another_process, .timeout = 60)
{
	struct cistern *c = seg_create_cfg("wake", NULL);
	const char *name = seg_name_of(c);
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *r;
		if (cistern_attach(name, &r) < 0)
			_exit(1);
		char buf[8];
		ssize_t n = cistern_get(r, buf, sizeof(buf), NULL, 10000);
		_exit(n == 3 && memcmp(buf, "hey", 3) == 0 ? 0 : 2);
	}
	usleep(100 * 1000);
	cr_assert_eq(cistern_put(c, "hey", 3, NULL, 0), 0);
	cr_assert_eq(reap_all(), 0);
}

Test(fifo_mp, all_readers_get_end_of_data_after_the_last_producer, .timeout = 60)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 64, .expected_producers = 2};
	struct cistern *c = seg_create("eod", cfg);
	const char *name = seg_name_of(c);
	_Atomic uint32_t *got = shared_alloc(sizeof(*got));
	for (int i = 0; i < 3; i++) {
		if (fork_child() == 0) {
			struct cistern *r;
			if (cistern_attach(name, &r) < 0)
				_exit(1);
			uint64_t v;
			ssize_t n;
			while ((n = cistern_get(r, &v, sizeof(v), NULL, -1)) == 8)
				atomic_fetch_add(got, 1);
			_exit(n == CISTERN_EOD ? 0 : 2);
		}
	}
	for (int i = 0; i < 2; i++) {
		if (fork_child() == 0) {
			struct cistern *p;
			if (cistern_attach(name, &p) < 0)
				_exit(1);
			for (uint64_t v = 0; v < 1000; v++)
				if (cistern_put(p, &v, sizeof(v), NULL, -1) < 0)
					_exit(2);
			cistern_producer_done(p);
			_exit(0);
		}
	}
	cr_assert_eq(reap_all(), 0, "every reader must end with end of data");
	cr_assert_eq(atomic_load(got), 2000);
}

Test(fifo_mp, blocked_reader_uses_almost_no_cpu, .timeout = 60)
{
	struct cistern *c = seg_create_cfg("idle", NULL);
	const char *name = seg_name_of(c);
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *r;
		if (cistern_attach(name, &r) < 0)
			_exit(1);
		char buf[8];
		_exit(cistern_get(r, buf, sizeof(buf), NULL, -1) == CISTERN_EOD ? 0 : 2);
	}
	sleep(1);
	cr_assert_eq(cistern_close_reception(c), 0);
	int status;
	struct rusage ru;
	cr_assert_eq(wait4(pid, &status, 0, &ru), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
		     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	/* A spinning reader would burn about a second; a sleeping one a few ms. */
	cr_assert_lt(cpu, 0.1, "blocked reader used %.3f s of CPU in 1 s", cpu);
}

Test(fifo_mp, killed_reader_sample_is_handed_out_again, .timeout = 60)
{
	struct cistern *c = seg_create_cfg("kreader", NULL);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "precious", 8, NULL, 0), 0);
	pid_t pid = spawn_holder(name, HOLD_SAMPLE);
	cr_assert_gt(pid, 0, "the reader did not start");
	kill_and_reap(pid);
	/* A waiting reader finds the dead holder and gets the sample back. */
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 5000), 8);
	cr_assert_eq(memcmp(buf, "precious", 8), 0);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.redeliveries, 1);
	cr_assert_eq(st.population, 0);
}

Test(fifo_mp, killed_producer_reservation_does_not_wedge_readers, .timeout = 60)
{
	struct cistern *c = seg_create_cfg("kprod", NULL);
	const char *name = seg_name_of(c);
	pid_t pid = spawn_holder(name, HOLD_RESERVATION);
	cr_assert_gt(pid, 0, "the producer did not start");
	cr_assert_eq(cistern_put(c, "after", 5, NULL, 0), 0);
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN,
		     "the live reservation holds the head");
	kill_and_reap(pid);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 5000), 5);
	cr_assert_eq(memcmp(buf, "after", 5), 0);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.reclaimed, 1);
}

/*
 * A reader that waits in slices shorter than the sweep period (as the Python
 * binding does, to look for signals between them) still sweeps every
 * CISTERN_SWEEP_MS: the sweeps keep the handle's schedule, not each wait's.
 */
Test(fifo_mp, reader_waiting_in_short_slices_still_reclaims_a_dead_producer, .timeout = 60)
{
	struct cistern *c = seg_create_cfg("kslices", NULL);
	const char *name = seg_name_of(c);
	pid_t pid = spawn_holder(name, HOLD_RESERVATION);
	cr_assert_gt(pid, 0);
	cr_assert_eq(cistern_put(c, "after", 5, NULL, 0), 0);
	kill_and_reap(pid);
	char buf[16];
	ssize_t r = -ETIMEDOUT;
	/* Fifty slices of 100 ms: the sweep, due every 200 ms, comes in the first few. */
	for (int i = 0; i < 50 && r == -ETIMEDOUT; i++)
		r = cistern_get(c, buf, sizeof(buf), NULL, 100);
	cr_assert_eq(r, 5, "the dead reservation still holds the head: %s",
		     cistern_strerror((int)r));
}
