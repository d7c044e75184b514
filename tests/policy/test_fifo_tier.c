/* SPDX-License-Identifier: MIT */
/*
 * test_fifo_tier.c - a FIFO with a cold tier (lib/policy/fifo/fifo_tier.c):
 * a burst larger than the hot ring goes to the cold ring without a wait and
 * comes back in order; forked producers and readers get every sample once,
 * each producer's in order; a full hot and cold ring answers -EAGAIN and
 * loses nothing; a reader killed holding a cold sample and a producer
 * killed in a cold put lose nothing and wedge nothing; group writes go
 * behind the puts: a burst producer does not wait for them while runs are
 * free, and a detach collects its own
 * (docs/protocol/tiers.md, "The FIFO's spill ring").
 *
 * The cold files live in a directory under /var/tmp, on a disk file system
 * that takes O_DIRECT. The fixture removes it and the segments.
 */
#include <signal.h>
#include <sys/wait.h>

#include "helpers.h"
#include "cistern/admin.h"
#include "policy/fifo/fifo_tier.h"

#define HOT 64
#define COLD 256
#define SLOT 4096

static char dir[64];

static void tier_init(void)
{
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-fifo-tier-XXXXXX");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void tier_fini(void)
{
	seg_fini();
	if (dir[0]) {
		seg_empty_dir(dir);
		rmdir(dir);
	}
}

TestSuite(fifo_tier, .init = tier_init, .fini = tier_fini, .timeout = 60);

static struct cistern_config tier_cfg(void)
{
	return (struct cistern_config){
		.policy = CISTERN_FIFO,
		.slot_size = SLOT,
		.slot_count = HOT,
		.cold_slots = COLD,
		.cold_dir = dir,
	};
}

/* Sample `seq` of producer `p`: its length, and its bytes by fill_payload(.., p, seq). */
static size_t len_of(uint32_t seq)
{
	return 1 + (seq * 397u) % SLOT;
}

/* Put sample seq of producer p without waiting: 0 or the put's error. */
static int try_put(struct cistern *c, uint32_t p, uint32_t seq)
{
	uint8_t buf[SLOT];
	size_t len = len_of(seq);
	fill_payload(buf, len, p, seq);
	struct cistern_meta m = {.sim_id = p, .time_step = seq};
	return cistern_put(c, buf, len, &m, 0);
}

/* Take the next sample: it is whole and it is sample (p, seq). */
static void get_expect(struct cistern *c, uint32_t p, uint32_t seq)
{
	struct cistern_sample s;
	int r = cistern_acquire(c, &s, 2000);
	cr_assert_eq(r, 0, "acquire of %u: %s", seq, cistern_strerror(r));
	cr_assert_eq(s.meta.sim_id, p);
	cr_assert_eq(s.meta.time_step, seq, "read %u where %u comes next", s.meta.time_step, seq);
	cr_assert_eq(s.len, len_of(seq));
	cr_assert(check_payload(s.data, s.len, p, seq), "sample %u: bytes differ", seq);
	cr_assert_eq(cistern_release(c, &s), 0);
}

static uint64_t cold_mode(struct cistern *c)
{
	uint64_t mode, chead;
	cistern__fifo_tier_peek(c, &mode, &chead);
	return mode & CISTERN__FIFO_MODE_COLD;
}

Test(fifo_tier, a_burst_of_four_hot_rings_is_taken_without_a_wait_and_read_in_order)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("burst", &cfg);
	for (uint32_t i = 0; i < 4 * HOT; i++) {
		int r = try_put(c, 1, i);
		cr_assert_eq(r, 0, "put %u: %s", i, cistern_strerror(r));
	}
	cr_assert(cold_mode(c), "the puts past the hot ring went cold");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.cold_spilled, 4 * HOT - HOT);
	for (uint32_t i = 0; i < 4 * HOT; i++)
		get_expect(c, 1, i);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EAGAIN);
}

Test(fifo_tier, counts_the_cold_bytes_moved_and_the_time_waited_for_reads)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("io", &cfg);
	for (uint32_t i = 0; i < 4 * HOT; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	/* The group writes started behind the puts count once collected. */
	cr_assert_eq(cistern__fifo_tier_settle(c), 0);
	uint64_t sb = cistern__cold_slot_bytes(SLOT);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_gt(st.cold_bytes_written, 0);
	cr_assert_eq(st.cold_bytes_written % sb, 0, "groups went to disk whole");
	cr_assert_eq(st.cold_bytes_read, 0, "nothing was read yet");
	for (uint32_t i = 0; i < 4 * HOT; i++)
		get_expect(c, 1, i);
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.cold_reads, 4 * HOT - HOT);
	cr_assert_gt(st.cold_bytes_read, 0, "the samples written were read from disk");
	cr_assert_eq(st.cold_bytes_read % sb, 0);
	cr_assert_gt(st.cold_read_wait_ns, 0);
}

/* Slots of one staging group at SLOT bytes (1 MiB, at most 32), as fifo_tier.c. */
#define GROUP 32

/* The cold file's bytes written so far, in cold slots. */
static uint64_t slots_written(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st.cold_bytes_written / cistern__cold_slot_bytes(SLOT);
}

/* The writes this process handed to its io_uring so far. */
static uint64_t writes_started(void)
{
	uint64_t writes, bytes;
	cistern__uring_written(&writes, &bytes);
	return writes;
}

static struct cistern_stats stats_of(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st;
}

static uint64_t bytes_read(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st.cold_bytes_read;
}

Test(fifo_tier, single_cold_puts_are_staged_and_written_a_whole_group_at_a_time)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("staged", &cfg);
	uint64_t w0 = writes_started();
	for (uint32_t i = 0; i < 4 * HOT + GROUP / 2; i++)
		cr_assert_eq(try_put(c, 1, i), 0, "put %u", i);
	cr_assert_eq(cistern__fifo_tier_settle(c), 0);
	struct cistern_stats st = stats_of(c);
	uint64_t w = slots_written(c);
	/* 6 whole groups and half of one put: each whole group in one write, the half staged. */
	cr_assert_eq(st.cold_spilled, 6 * GROUP + GROUP / 2);
	cr_assert_eq(w, 6 * GROUP, "%llu slots written for %llu spilled", (unsigned long long)w,
		     (unsigned long long)st.cold_spilled);
	cr_assert_eq(writes_started() - w0, 6);
	cr_assert_eq(st.cold_groups_staged, 1);
	for (uint32_t i = 0; i < 4 * HOT + GROUP / 2; i++)
		get_expect(c, 1, i);
}

/*
 * A forked reader of segment `name`: takes samples from .. to - 1 of
 * producer 1, each whole and in order, then exits 0 (1 to 3: what went
 * wrong). With `last`, nothing may come after them.
 */
static pid_t fork_reader(const char *name, uint32_t from, uint32_t to, bool last)
{
	pid_t pid = fork_child();
	if (pid != 0)
		return pid;
	struct cistern *r;
	if (cistern_attach(name, &r) < 0)
		_exit(1);
	for (uint32_t i = from; i < to; i++) {
		struct cistern_sample s;
		if (cistern_acquire(r, &s, 2000) != 0)
			_exit(2);
		bool ok = s.meta.sim_id == 1 && s.meta.time_step == i && s.len == len_of(i) &&
			  check_payload(s.data, s.len, 1, i);
		if (!ok || cistern_release(r, &s) != 0)
			_exit(3);
	}
	struct cistern_sample s;
	_exit(last && cistern_acquire(r, &s, 0) != -EAGAIN ? 4 : 0);
}

Test(fifo_tier, staged_samples_are_read_in_order_once_before_and_after_their_group_reached_disk)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("stread", &cfg);
	const char *name = seg_name_of(c);
	uint32_t next = 0;
	/* Cold positions 0 .. 15: half of group 0, staged. */
	while (next < HOT + GROUP / 2)
		cr_assert_eq(try_put(c, 1, next++), 0);
	cr_assert_eq(cistern__fifo_tier_settle(c), 0);
	cr_assert_eq(slots_written(c), 0);
	/* A reader takes the hot ring and 8 of group 0, from memory. */
	cr_assert_eq(reap_status(fork_reader(name, 0, HOT + GROUP / 4, false)), 0);
	cr_assert_eq(bytes_read(c), 0, "staged samples come from memory");
	/* Groups 0 .. 5 done: each goes to disk behind its last put. */
	while (next < HOT + 6 * GROUP)
		cr_assert_eq(try_put(c, 1, next++), 0);
	cr_assert_eq(cistern__fifo_tier_settle(c), 0);
	cr_assert_eq(slots_written(c), 6 * GROUP);
	/* Another reader takes the rest, from disk now. */
	cr_assert_eq(reap_status(fork_reader(name, HOT + GROUP / 4, next, true)), 0);
	cr_assert_gt(bytes_read(c), 0, "the rest came from disk");
}

Test(fifo_tier, a_group_whose_samples_all_left_before_its_last_put_ended_is_not_written)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("left", &cfg);
	uint64_t w0 = writes_started();
	/* Group 0 but its last slot put; its last slot claimed. */
	for (uint32_t i = 0; i < HOT + GROUP - 1; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	struct cistern_slot slot;
	cr_assert_eq(cistern_reserve(c, &slot, 0), 0);
	/* All read meanwhile, then the last put is aborted: every sample of the group left. */
	for (uint32_t i = 0; i < HOT + GROUP - 1; i++)
		get_expect(c, 1, i);
	cr_assert_eq(cistern_abort(c, &slot), 0);
	cr_assert_eq(cistern__fifo_tier_settle(c), 0);
	struct cistern_stats st = stats_of(c);
	cr_assert_eq(writes_started() - w0, 0, "no write for a group that left");
	cr_assert_eq(st.cold_groups_staged + st.cold_groups_writing, 0, "its run is free");
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EAGAIN);
}

Test(fifo_tier, a_full_hot_and_cold_ring_answers_eagain_and_loses_nothing)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("full", &cfg);
	uint32_t n = HOT + COLD;
	for (uint32_t i = 0; i < n; i++)
		cr_assert_eq(try_put(c, 1, i), 0, "put %u", i);
	cr_assert_eq(try_put(c, 1, n), -EAGAIN);
	cr_assert_eq(try_put(c, 1, n), -EAGAIN);
	for (uint32_t i = 0; i < n; i++)
		get_expect(c, 1, i);
	/* Room again: the put refused is made now, after all the others. */
	cr_assert_eq(try_put(c, 1, n), 0);
	get_expect(c, 1, n);
}

Test(fifo_tier, puts_go_hot_again_only_once_the_cold_ring_drained)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("back", &cfg);
	uint32_t next = 0, want = 0;
	/* Rounds: fill past the hot ring, read a part, put more, read all. */
	for (int round = 0; round < 5; round++) {
		for (int i = 0; i < HOT + 10; i++)
			cr_assert_eq(try_put(c, 1, next++), 0);
		cr_assert(cold_mode(c));
		for (int i = 0; i < HOT + 5; i++)
			get_expect(c, 1, want++);
		/* Cold still holds samples: these puts go cold too, behind them. */
		for (int i = 0; i < 3; i++)
			cr_assert_eq(try_put(c, 1, next++), 0);
		cr_assert(cold_mode(c));
		while (want < next)
			get_expect(c, 1, want++);
		/* Drained: the next put goes hot. */
		cr_assert_eq(try_put(c, 1, next++), 0);
		cr_assert(!cold_mode(c), "round %d: puts went hot again", round);
		get_expect(c, 1, want++);
	}
}

Test(fifo_tier, cold_samples_go_round_the_cold_ring_many_times_in_order)
{
	struct cistern_config cfg = tier_cfg();
	cfg.cold_slots = 8;
	struct cistern *c = seg_create_cfg("laps", &cfg);
	uint32_t next = 0, want = 0;
	srand(7);
	/* Fill both rings, read a part, again: the cold ring goes round many times. */
	for (int round = 0; round < 200; round++) {
		int r;
		while ((r = try_put(c, 1, next)) == 0)
			next++;
		cr_assert_eq(r, -EAGAIN, "put %u: %s", next, cistern_strerror(r));
		/* Refused only with the cold ring full (puts stay cold until it drains). */
		cr_assert_geq(next - want, 8);
		cr_assert(cold_mode(c));
		uint32_t k = 1 + (uint32_t)rand() % (next - want);
		for (uint32_t i = 0; i < k; i++)
			get_expect(c, 1, want++);
	}
	while (want < next)
		get_expect(c, 1, want++);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_gt(st.cold_spilled, 8 * 20, "the cold ring went round");
}

Test(fifo_tier, a_cold_read_starts_the_read_of_the_next_run_in_order)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("ahead", &cfg);
	/*
	 * 4 KiB slots: a run is 32 of them, as a group. 7 groups: the first 3
	 * went to disk, to free their staging runs for the last 3.
	 */
	for (uint32_t i = 0; i < HOT + 224; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	uint64_t first;
	for (uint32_t i = 0; i < HOT; i++)
		get_expect(c, 1, i);
	cr_assert_eq(cistern__fifo_tier_ahead(c, &first), 0,
		     "nothing read ahead before a cold read");
	get_expect(c, 1, HOT); /* cold position 0: its run 0 .. 31 is read */
	cr_assert_eq(cistern__fifo_tier_ahead(c, &first), 32);
	cr_assert_eq(first, 32, "the next run follows");
	for (uint32_t i = HOT + 1; i < HOT + 33; i++)
		get_expect(c, 1, i);
	/* Position 32 came from that run; the one after it is under way. */
	cr_assert_eq(cistern__fifo_tier_ahead(c, &first), 32);
	cr_assert_eq(first, 64);
	for (uint32_t i = HOT + 33; i < HOT + 224; i++)
		get_expect(c, 1, i);
}

Test(fifo_tier, samples_read_ahead_that_another_reader_took_are_not_handed_out_again)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("ahead2", &cfg);
	struct cistern *d;
	cr_assert_eq(cistern_attach(seg_name_of(c), &d), 0);
	seg_keep(seg_name_of(c), d);
	for (uint32_t i = 0; i < HOT + 100; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	for (uint32_t i = 0; i < HOT; i++)
		get_expect(c, 1, i);
	get_expect(c, 1, HOT); /* c read 0 .. 31 and reads 32 .. 63 ahead */
	for (uint32_t i = HOT + 1; i < HOT + 41; i++)
		get_expect(d, 1, i); /* d takes 1 .. 40 */
	for (uint32_t i = HOT + 41; i < HOT + 100; i++)
		get_expect(c, 1, i); /* c goes on at 41, from its run ahead */
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EAGAIN);
}

Test(fifo_tier, get_and_get_batch_copy_cold_samples_in_order)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("getb", &cfg);
	uint32_t n = 3 * HOT;
	for (uint32_t i = 0; i < n; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	static uint8_t buf[16][SLOT];
	size_t len[16];
	struct cistern_meta meta[16];
	uint32_t want = 0;
	while (want < n) {
		int k = cistern_get_batch(c, buf, SLOT, 16, len, meta, 2000);
		cr_assert_gt(k, 0, "get_batch: %s", cistern_strerror(k));
		for (int i = 0; i < k; i++, want++) {
			cr_assert_eq(meta[i].time_step, want);
			cr_assert_eq(len[i], len_of(want));
			cr_assert(check_payload(buf[i], len[i], 1, want));
		}
	}
	cr_assert_eq(try_put(c, 1, n), 0);
	ssize_t r = cistern_get(c, buf[0], SLOT, &meta[0], 2000);
	cr_assert_eq(r, (ssize_t)len_of(n));
	cr_assert_eq(meta[0].time_step, n);
}

Test(fifo_tier, a_batch_put_past_the_hot_ring_is_taken_at_once_and_read_in_order)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("putb", &cfg);
	enum { N = 3 * HOT + 7 };
	static uint8_t buf[N][SLOT];
	size_t len[N];
	struct cistern_meta meta[N];
	for (uint32_t i = 0; i < N; i++) {
		len[i] = len_of(i);
		fill_payload(buf[i], len[i], 1, i);
		meta[i] = (struct cistern_meta){.sim_id = 1, .time_step = i};
	}
	/* In parts: a batch that starts hot and goes cold, then cold ones. */
	int r = cistern_put_batch(c, buf, SLOT, HOT / 2, len, meta, 0);
	cr_assert_eq(r, HOT / 2, "put_batch: %s", cistern_strerror(r));
	r = cistern_put_batch(c, buf[HOT / 2], SLOT, N - HOT / 2, len + HOT / 2, meta + HOT / 2, 0);
	cr_assert_eq(r, N - HOT / 2, "put_batch: %s", cistern_strerror(r));
	cr_assert(cold_mode(c));
	for (uint32_t i = 1; i < N; i++)
		cr_assert_gt(meta[i].sample_id, meta[i - 1].sample_id, "ids given back in order");
	for (uint32_t i = 0; i < N; i++)
		get_expect(c, 1, i);
}

Test(fifo_tier, a_batch_put_stops_where_the_cold_ring_is_full_and_loses_nothing)
{
	struct cistern_config cfg = tier_cfg();
	cfg.cold_slots = 40;
	struct cistern *c = seg_create_cfg("putfull", &cfg);
	enum { N = HOT + 60 };
	static uint8_t buf[N][SLOT];
	size_t len[N];
	struct cistern_meta meta[N];
	for (uint32_t i = 0; i < N; i++) {
		len[i] = len_of(i);
		fill_payload(buf[i], len[i], 1, i);
		meta[i] = (struct cistern_meta){.sim_id = 1, .time_step = i};
	}
	int r = cistern_put_batch(c, buf, SLOT, N, len, meta, 0);
	cr_assert_eq(r, HOT + 40, "put_batch: %s", cistern_strerror(r));
	for (uint32_t i = 0; i < HOT + 40; i++)
		get_expect(c, 1, i);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EAGAIN);
}

Test(fifo_tier, end_of_data_comes_after_the_last_cold_sample)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("eod", &cfg);
	for (uint32_t i = 0; i < 2 * HOT; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	cr_assert_eq(cistern_close_reception(c), 0);
	for (uint32_t i = 0; i < 2 * HOT; i++)
		get_expect(c, 1, i);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 2000), CISTERN_EOD);
}

Test(fifo_tier, sample_ids_are_unique_and_grow_with_each_producers_puts)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("ids", &cfg);
	for (uint32_t i = 0; i < 3 * HOT; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	uint64_t last = 0;
	for (uint32_t i = 0; i < 3 * HOT; i++) {
		struct cistern_sample s;
		cr_assert_eq(cistern_acquire(c, &s, 2000), 0);
		if (i)
			cr_assert_gt(s.meta.sample_id, last);
		last = s.meta.sample_id;
		cr_assert_eq(cistern_release(c, &s), 0);
	}
}

/* ---- forked producers and readers ----------------------------------------- */

#define PRODUCERS 3
#define READERS 2
#define PER_PRODUCER 600

struct mp_log {
	_Atomic uint32_t count[PRODUCERS][PER_PRODUCER]; /* times each sample was read */
	_Atomic uint32_t bad;                            /* damaged or out of order */
};

/* Put a producer's samples: one by one, or (`batch`) in batches of up to 8. */
static void producer_child(const char *name, uint32_t p, bool batch)
{
	struct cistern *c;
	if (cistern_attach(name, &c) < 0)
		_exit(2);
	static uint8_t buf[8][SLOT];
	for (uint32_t i = 0; i < PER_PRODUCER;) {
		uint32_t k = batch ? 1 + i % 8 : 1;
		k = k > PER_PRODUCER - i ? PER_PRODUCER - i : k;
		size_t len[8];
		struct cistern_meta m[8];
		for (uint32_t q = 0; q < k; q++) {
			len[q] = len_of(i + q);
			fill_payload(buf[q], len[q], p, i + q);
			m[q] = (struct cistern_meta){.sim_id = p, .time_step = i + q};
		}
		int r = batch ? cistern_put_batch(c, buf, SLOT, k, len, m, 10000)
			      : cistern_put(c, buf[0], len[0], m, 10000);
		if (r < 0)
			_exit(3);
		uint32_t put = batch ? (uint32_t)r : 1;
		/* Bursts, then a pause: the rings fill and drain, the mode turns both ways. */
		if (i / 97 != (i + put) / 97)
			usleep(20000);
		i += put;
	}
	cistern_producer_done(c);
	cistern_detach(c);
	_exit(0);
}

/* A reader's sample: counted once, or as bad (damaged, out of its producer's order). */
static void log_sample(struct mp_log *log, int64_t *last, const uint8_t *p, size_t len,
		       const struct cistern_meta *m)
{
	if (m->sim_id >= PRODUCERS || m->time_step >= PER_PRODUCER || len != len_of(m->time_step) ||
	    !check_payload(p, len, m->sim_id, m->time_step) ||
	    (int64_t)m->time_step <= last[m->sim_id]) {
		atomic_fetch_add(&log->bad, 1);
		return;
	}
	last[m->sim_id] = m->time_step;
	atomic_fetch_add(&log->count[m->sim_id][m->time_step], 1);
}

/* Read until end of data: one by one, or (`batch`) up to 8 at a time. */
static void reader_child(const char *name, struct mp_log *log, bool batch)
{
	struct cistern *c;
	if (cistern_attach(name, &c) < 0)
		_exit(2);
	int64_t last[PRODUCERS];
	for (int p = 0; p < PRODUCERS; p++)
		last[p] = -1;
	static uint8_t buf[8][SLOT];
	for (uint32_t k = 0;; k++) {
		struct cistern_meta m[8];
		size_t len[8];
		int got;
		if (batch) {
			got = cistern_get_batch(c, buf, SLOT, 8, len, m, 10000);
		} else {
			ssize_t r = cistern_get(c, buf[0], SLOT, m, 10000);
			got = r < 0 ? (int)r : 1;
			len[0] = r < 0 ? 0 : (size_t)r;
		}
		if (got == CISTERN_EOD)
			break;
		if (got < 0)
			_exit(3);
		for (int i = 0; i < got; i++)
			log_sample(log, last, buf[i], len[i], &m[i]);
		if (k % 131 == 0)
			usleep(5000); /* a slow reader now and then: the rings fill up */
	}
	cistern_detach(c);
	_exit(0);
}

/* Forked producers and readers over one FIFO with a cold tier; every sample checked. */
static void run_mp(const char *tag, bool batch)
{
	struct cistern_config cfg = tier_cfg();
	cfg.expected_producers = PRODUCERS;
	struct cistern *c = seg_create_cfg(tag, &cfg);
	const char *name = seg_name_of(c);
	struct mp_log *log = shared_alloc(sizeof(*log));
	pid_t pids[PRODUCERS + READERS];
	for (int r = 0; r < READERS; r++)
		if ((pids[r] = fork_child()) == 0)
			reader_child(name, log, batch);
	for (uint32_t p = 0; p < PRODUCERS; p++)
		if ((pids[READERS + p] = fork_child()) == 0)
			producer_child(name, p, batch);
	for (int i = 0; i < PRODUCERS + READERS; i++)
		cr_assert_eq(reap_status(pids[i]), 0, "child %d failed", i);
	cr_assert_eq(atomic_load(&log->bad), 0, "samples damaged or out of order");
	for (int p = 0; p < PRODUCERS; p++)
		for (int i = 0; i < PER_PRODUCER; i++)
			cr_assert_eq(atomic_load(&log->count[p][i]), 1,
				     "sample (%d, %d) read %u times", p, i,
				     atomic_load(&log->count[p][i]));
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_gt(st.cold_spilled, 0, "the cold ring took part");
}

Test(fifo_tier, forked_producers_and_readers_get_each_sample_once_in_each_producers_order,
     .timeout = 120)
{
	run_mp("mp", false);
}

Test(fifo_tier, forked_batch_producers_and_readers_get_each_sample_once_in_order, .timeout = 120)
{
	run_mp("mpb", true);
}

/* ---- deaths ----------------------------------------------------------------- */

/* Fill the hot ring and n cold slots with samples 0 .. HOT + n - 1 of producer 1. */
static void fill_past_hot(struct cistern *c, uint32_t n)
{
	for (uint32_t i = 0; i < HOT + n; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	cr_assert(cold_mode(c));
}

Test(fifo_tier, a_reader_killed_holding_a_cold_sample_loses_nothing)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("kread", &cfg);
	const char *name = seg_name_of(c);
	fill_past_hot(c, 20);
	/* Take the hot ones here: the child's first read is the first cold sample. */
	for (uint32_t i = 0; i < HOT; i++)
		get_expect(c, 1, i);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		struct cistern *r;
		struct cistern_sample s;
		if (cistern_attach(name, &r) < 0 || cistern_acquire(r, &s, 2000) < 0 ||
		    s.meta.time_step != HOT)
			_exit(3);
		ready_then_wait(p[1]);
	}
	cr_assert_gt(await_ready(p, pid), 0);
	kill_and_reap(pid);
	/* Its sample comes back (first, being handed out again); then the rest in order. */
	uint8_t seen[HOT + 20] = {0};
	for (uint32_t k = 0; k < 20; k++) {
		struct cistern_sample s;
		int r = cistern_acquire(c, &s, 5000);
		cr_assert_eq(r, 0, "acquire: %s", cistern_strerror(r));
		uint32_t seq = s.meta.time_step;
		cr_assert(seq >= HOT && seq < HOT + 20);
		cr_assert(check_payload(s.data, s.len, 1, seq));
		cr_assert_eq(seen[seq], 0, "sample %u twice", seq);
		seen[seq] = 1;
		cr_assert_eq(cistern_release(c, &s), 0);
	}
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EAGAIN);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.redeliveries, 1);
}

Test(fifo_tier, a_producer_killed_in_a_cold_put_loses_nothing_and_wedges_nothing)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("kput", &cfg);
	const char *name = seg_name_of(c);
	fill_past_hot(c, 10);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		struct cistern *w;
		struct cistern_slot slot;
		if (cistern_attach(name, &w) < 0 || cistern_reserve(w, &slot, 0) < 0)
			_exit(3);
		/* Half a sample written: the cold put the kill cuts short. */
		memset(slot.data, 0xab, 100);
		ready_then_wait(p[1]);
	}
	cr_assert_gt(await_ready(p, pid), 0);
	/* A put behind the live reservation, which holds the cold head once reached. */
	cr_assert_eq(try_put(c, 1, HOT + 10), 0);
	kill_and_reap(pid);
	for (uint32_t i = 0; i <= HOT + 10; i++)
		get_expect(c, 1, i);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.reclaimed, 1);
	/* Nothing wedged: the rings go on. */
	for (uint32_t i = 0; i < 2 * HOT; i++)
		cr_assert_eq(try_put(c, 2, i), 0);
	for (uint32_t i = 0; i < 2 * HOT; i++)
		get_expect(c, 2, i);
}

static int hook_fd = -1;

/* The stage hook of a child: say ready, then wait to be killed, in the group's write. */
static void stop_in_write(void)
{
	ready_then_wait(hook_fd);
}

Test(fifo_tier,
     a_producer_killed_with_a_group_write_in_flight_loses_nothing_and_it_is_written_again)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("kwrite", &cfg);
	const char *name = seg_name_of(c);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		hook_fd = p[1];
		cistern__fifo_stage_hook = stop_in_write;
		struct cistern *w;
		if (cistern_attach(name, &w) < 0)
			_exit(3);
		/* The last put of group 0 starts its write and stops with it in flight. */
		for (uint32_t i = 0; i < HOT + GROUP; i++)
			if (try_put(w, 1, i) != 0)
				_exit(4);
		_exit(5);
	}
	cr_assert_gt(await_ready(p, pid), 0);
	kill_and_reap(pid);
	uint64_t w0 = writes_started();
	/*
	 * Groups 1 .. 3 go behind our puts; group 4's first put needs group 0's
	 * run: it waits for the reclaim of the dead writer, then writes group 0
	 * again.
	 */
	for (uint32_t i = 0; i < 3 * GROUP + 1; i++) {
		uint8_t buf[SLOT];
		fill_payload(buf, len_of(i), 2, i);
		struct cistern_meta m = {.sim_id = 2, .time_step = i};
		int r = cistern_put(c, buf, len_of(i), &m, 5000);
		cr_assert_eq(r, 0, "put %u: %s", i, cistern_strerror(r));
	}
	cr_assert_eq(cistern__fifo_tier_settle(c), 0);
	cr_assert_geq(writes_started() - w0, 4, "groups 1 .. 3, and group 0 again");
	cr_assert_eq(slots_written(c), 4 * GROUP, "the dead one's write was never collected");
	/* Every sample once, in order: group 0 from disk, as written again. */
	for (uint32_t i = 0; i < HOT + GROUP; i++)
		get_expect(c, 1, i);
	cr_assert_gt(bytes_read(c), 0, "group 0 came from disk");
	for (uint32_t i = 0; i < 3 * GROUP + 1; i++)
		get_expect(c, 2, i);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EAGAIN, "each sample once");
}

/* ---- group writes behind the puts ------------------------------------------ */

Test(fifo_tier, a_burst_producer_never_waits_while_runs_are_free_and_writes_are_in_flight)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("behind", &cfg);
	uint64_t w0 = writes_started();
	/* Timeout 0: a put that had to wait would answer -EAGAIN. */
	for (uint32_t i = 0; i < HOT + 4 * GROUP; i++) {
		int r = try_put(c, 1, i);
		cr_assert_eq(r, 0, "put %u: %s", i, cistern_strerror(r));
	}
	struct cistern_stats st = stats_of(c);
	/* At least: an interrupted request is handed to the ring again. */
	cr_assert_geq(writes_started() - w0, 4, "each group's write started behind its puts");
	cr_assert_eq(st.cold_write_waits, 0, "no put waited for a group's write");
	cr_assert_eq(st.producer_waits, 0);
	/* The last group's write is still ours to collect: nothing of ours waited for it. */
	cr_assert_geq(st.cold_groups_writing, 1);
	cr_assert_eq(st.cold_groups_staged, 0, "no whole group waits for its write to start");
	cr_assert_eq(cistern__fifo_tier_settle(c), 0);
	st = stats_of(c);
	cr_assert_eq(st.cold_groups_writing, 0);
	cr_assert_eq(slots_written(c), 4 * GROUP);
	for (uint32_t i = 0; i < HOT + 4 * GROUP; i++)
		get_expect(c, 1, i);
}

Test(fifo_tier, a_detach_collects_its_group_write_in_flight)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("detw", &cfg);
	struct cistern *w;
	cr_assert_eq(cistern_attach(seg_name_of(c), &w), 0);
	for (uint32_t i = 0; i < HOT + GROUP; i++)
		cr_assert_eq(try_put(w, 1, i), 0);
	struct cistern_stats st = stats_of(c);
	cr_assert_eq(st.cold_groups_writing, 1, "group 0's write is in flight");
	cr_assert_eq(st.cold_bytes_written, 0, "and not collected");
	cr_assert_eq(cistern_detach(w), 0);
	st = stats_of(c);
	cr_assert_eq(st.cold_groups_writing + st.cold_groups_staged, 0, "its run is free");
	cr_assert_eq(slots_written(c), GROUP, "the detach collected the write");
	for (uint32_t i = 0; i < HOT + GROUP; i++)
		get_expect(c, 1, i);
	cr_assert_gt(bytes_read(c), 0, "group 0 came from disk");
}

/*
 * A child that puts the hot ring and 4 groups of producer 1, says ready
 * with its last group's write uncollected, and detaches when told to.
 */
static pid_t fork_writer(const char *name, int p[2], int go[2])
{
	pid_t pid = fork_child();
	if (pid != 0)
		return pid;
	close(p[0]);
	close(go[1]);
	struct cistern *w;
	if (cistern_attach(name, &w) < 0)
		_exit(3);
	for (uint32_t i = 0; i < HOT + 4 * GROUP; i++)
		if (try_put(w, 1, i) != 0)
			_exit(4);
	if (write(p[1], "r", 1) != 1)
		_exit(5);
	char b;
	if (read(go[0], &b, 1) != 1)
		_exit(6);
	_exit(cistern_detach(w) == 0 ? 0 : 7);
}

Test(fifo_tier, a_put_that_needs_a_run_another_process_writes_waits_for_its_collect)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("other", &cfg);
	int p[2], go[2];
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(pipe(go), 0);
	pid_t pid = fork_writer(seg_name_of(c), p, go);
	close(go[0]);
	cr_assert_gt(await_ready(p, pid), 0);
	/* Our puts go on until one needs a run whose write the child has not collected. */
	uint32_t mine = 0;
	int r;
	while ((r = try_put(c, 2, mine)) == 0)
		mine++;
	cr_assert_eq(r, -EAGAIN, "put %u: %s", mine, cistern_strerror(r));
	cr_assert_leq(mine, 3 * GROUP, "at the latest group 7 needs group 3's run");
	struct cistern_stats st = stats_of(c);
	cr_assert_geq(st.cold_write_waits, 1, "the put waited for the child's write");
	cr_assert_geq(st.cold_groups_writing, 1);
	/* The child's detach collects its writes; our waiting put goes on. */
	cr_assert_eq(write(go[1], "x", 1), 1);
	uint8_t buf[SLOT];
	fill_payload(buf, len_of(mine), 2, mine);
	struct cistern_meta m = {.sim_id = 2, .time_step = mine};
	r = cistern_put(c, buf, len_of(mine), &m, 5000);
	cr_assert_eq(r, 0, "put: %s", cistern_strerror(r));
	mine++;
	cr_assert_eq(reap_status(pid), 0);
	close(go[1]);
	for (uint32_t i = 0; i < HOT + 4 * GROUP; i++)
		get_expect(c, 1, i);
	for (uint32_t i = 0; i < mine; i++)
		get_expect(c, 2, i);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EAGAIN, "each sample once");
}

Test(fifo_tier, producers_killed_at_random_in_cold_puts_leave_every_commit_once_in_order,
     .timeout = 120)
{
	struct cistern_config cfg = tier_cfg();
	cfg.slot_count = 8;
	cfg.cold_slots = 64;
	struct cistern *c = seg_create_cfg("chaos", &cfg);
	const char *name = seg_name_of(c);
	/*
	 * committed[i]: sample i's put returned. Each put takes its number
	 * before it starts, so that a producer killed after its put returned
	 * but before it said so leaves sample i uncertain (there or not, once)
	 * rather than making the next producer put i a second time.
	 */
	_Atomic uint32_t *committed = shared_alloc(4000 * sizeof(*committed));
	_Atomic uint32_t *next = shared_alloc(sizeof(*next));
	uint32_t want = 0;
	uint8_t *got = calloc(4000, 1);
	for (int kill_no = 0; kill_no < 12; kill_no++) {
		pid_t pid = fork_child();
		if (pid == 0) {
			struct cistern *w;
			if (cistern_attach(name, &w) < 0)
				_exit(2);
			uint8_t buf[SLOT];
			for (;;) {
				uint32_t i = atomic_fetch_add(next, 1);
				if (i >= 4000)
					pause();
				size_t len = len_of(i);
				fill_payload(buf, len, 5, i);
				struct cistern_meta m = {.sim_id = 5, .time_step = i};
				if (cistern_put(w, buf, len, &m, 10000) < 0)
					_exit(3);
				atomic_store(&committed[i], 1);
			}
		}
		usleep(2000 + (unsigned)(rand() % 8000));
		/* Read a few while it puts; then kill it, wherever it is. */
		for (int k = 0; k < 20; k++) {
			struct cistern_sample s;
			if (cistern_acquire(c, &s, 0) != 0)
				break;
			uint32_t seq = s.meta.time_step;
			cr_assert(check_payload(s.data, s.len, 5, seq));
			cr_assert_geq(seq, want, "sample %u after %u", seq, want);
			cr_assert_eq(got[seq], 0);
			got[seq] = 1;
			want = seq + 1;
			cr_assert_eq(cistern_release(c, &s), 0);
		}
		kill_and_reap(pid);
	}
	/* Every committed sample is there, once, in order. */
	for (;;) {
		struct cistern_sample s;
		int r = cistern_acquire(c, &s, 1000);
		if (r == -ETIMEDOUT || r == -EAGAIN)
			break;
		cr_assert_eq(r, 0, "acquire: %s", cistern_strerror(r));
		uint32_t seq = s.meta.time_step;
		cr_assert(check_payload(s.data, s.len, 5, seq));
		cr_assert_geq(seq, want, "sample %u after %u", seq, want);
		cr_assert_eq(got[seq], 0);
		got[seq] = 1;
		want = seq + 1;
		cr_assert_eq(cistern_release(c, &s), 0);
	}
	uint32_t n = atomic_load(next);
	for (uint32_t i = 0; i < n && i < 4000; i++)
		if (atomic_load(&committed[i]))
			cr_assert(got[i], "committed sample %u lost", i);
	free(got);
}

Test(fifo_tier, readers_killed_at_random_in_cold_reads_leave_every_sample_once, .timeout = 120)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("kreads", &cfg);
	const char *name = seg_name_of(c);
	enum { N = HOT + COLD };
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	_Atomic uint32_t *taken = shared_alloc(sizeof(*taken));
	srand(11);
	/*
	 * Each child takes samples and never lets go, a little at a time; it
	 * dies wherever the kill finds it: in a take, in a cold read, holding.
	 */
	for (int round = 0; round < 8 || (round < 60 && atomic_load(taken) <= HOT + 20); round++) {
		pid_t pid = fork_child();
		if (pid == 0) {
			struct cistern *r;
			if (cistern_attach(name, &r) < 0)
				_exit(2);
			for (;;) {
				struct cistern_sample s;
				if (cistern_acquire(r, &s, 100) == 0)
					atomic_fetch_add(taken, 1);
				usleep(200);
			}
		}
		usleep(3000 + (unsigned)(rand() % 5000));
		kill_and_reap(pid);
	}
	cr_assert_gt(atomic_load(taken), HOT, "the children read cold samples too");
	/* Every sample comes back once: the dead readers' first, then the rest in order. */
	static uint8_t seen[N];
	for (uint32_t k = 0; k < N; k++) {
		struct cistern_sample s;
		int r = cistern_acquire(c, &s, 5000);
		cr_assert_eq(r, 0, "acquire %u: %s", k, cistern_strerror(r));
		uint32_t seq = s.meta.time_step;
		cr_assert_lt(seq, N);
		cr_assert(check_payload(s.data, s.len, 1, seq), "sample %u: bytes differ", seq);
		cr_assert_eq(seen[seq], 0, "sample %u twice", seq);
		seen[seq] = 1;
		cr_assert_eq(cistern_release(c, &s), 0);
	}
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EAGAIN);
}

Test(fifo_tier, gc_counts_a_stale_fifos_cold_samples_as_unread_and_keeps_it)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("gc", &cfg);
	const char *name = seg_name_of(c);
	seg_detach(c);
	/* Its only producer puts HOT + 10 samples (10 of them cold) and is killed. */
	pid_t pid = spawn_filler(name, HOT + 10);
	cr_assert_gt(pid, 0, "the producer did not start");
	kill_and_reap(pid);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.kept, 1);
	cr_assert_eq(rep.unread, HOT + 10, "%lu unread", (unsigned long)rep.unread);
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0);
	seg_keep(name, d);
	for (uint32_t i = 0; i < HOT + 10; i++) {
		struct cistern_sample s;
		cr_assert_eq(cistern_acquire(d, &s, 2000), 0);
		cr_assert_eq(s.meta.time_step, i);
		cr_assert_eq(cistern_release(d, &s), 0);
	}
}

/* ---- dump and restore --------------------------------------------------- */

Test(fifo_tier, a_dump_and_restore_keep_the_hot_and_cold_samples_in_order)
{
	struct cistern_config cfg = tier_cfg();
	cfg.cold_slots = 32;
	struct cistern *c = seg_create_cfg("dump", &cfg);
	uint32_t next = 0, want = 0;
	/* Round the cold ring once, so that its samples do not start at slot 0. */
	for (int i = 0; i < HOT + 20; i++)
		cr_assert_eq(try_put(c, 1, next++), 0);
	for (int i = 0; i < HOT + 15; i++)
		get_expect(c, 1, want++);
	for (int i = 0; i < 25; i++)
		cr_assert_eq(try_put(c, 1, next++), 0);
	cr_assert(cold_mode(c));
	/* A sample handed back comes first after the restore, as before it. */
	struct cistern_sample held;
	cr_assert_eq(cistern_acquire(c, &held, 0), 0);
	cr_assert_eq(held.meta.time_step, want);
	cr_assert_eq(cistern_unacquire(c, &held), 0);
	const char *path = seg_dump_path("dump");
	struct cistern_dump_info info;
	int r = cistern_dump(seg_name_of(c), path, NULL, NULL, &info);
	cr_assert_eq(r, 0, "dump: %s", cistern_strerror(r));
	cr_assert_eq(info.samples, next - want);
	cr_assert_eq(info.cold_samples, next - want);
	const char *copy = seg_name("dump-copy");
	r = cistern_restore(path, copy, NULL, NULL, NULL);
	cr_assert_eq(r, 0, "restore: %s", cistern_strerror(r));
	struct cistern *d;
	cr_assert_eq(cistern_attach(copy, &d), 0);
	seg_keep(copy, d);
	/*
	 * New puts come after the restored samples, with ids past theirs: in
	 * the cold ring, which holds 30 of its 32 slots, until it drains.
	 */
	uint32_t next2 = next, want2 = want;
	for (int i = 0; i < 2; i++)
		cr_assert_eq(r = try_put(d, 1, next2++), 0, "put: %s", cistern_strerror(r));
	cr_assert_eq(try_put(d, 1, next2), -EAGAIN);
	uint64_t last = 0;
	while (want2 < next2) {
		struct cistern_sample s;
		cr_assert_eq(cistern_acquire(d, &s, 2000), 0);
		cr_assert_eq(s.meta.time_step, want2, "read %u where %u comes next",
			     s.meta.time_step, want2);
		cr_assert(check_payload(s.data, s.len, 1, want2));
		if (want2 >= next)
			cr_assert_gt(s.meta.sample_id, last, "a new id above the restored ones");
		else if (s.meta.sample_id > last)
			last = s.meta.sample_id;
		cr_assert_eq(cistern_release(d, &s), 0);
		want2++;
	}
	/* The original is untouched by the dump. */
	while (want < next)
		get_expect(c, 1, want++);
}

Test(fifo_tier, a_dump_and_restore_of_staged_samples_keep_their_order)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("dumpst", &cfg);
	/* Cold positions 0 .. 39, staged (a group and 8 of the next); 5 of them read. */
	for (uint32_t i = 0; i < HOT + 40; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	for (uint32_t i = 0; i < HOT + 5; i++)
		get_expect(c, 1, i);
	cr_assert_eq(cistern__fifo_tier_settle(c), 0);
	cr_assert_eq(slots_written(c), GROUP, "group 0 went to disk behind its last put");
	const char *path = seg_dump_path("dumpst");
	struct cistern_dump_info info;
	int r = cistern_dump(seg_name_of(c), path, NULL, NULL, &info);
	cr_assert_eq(r, 0, "dump: %s", cistern_strerror(r));
	cr_assert_eq(info.cold_samples, 35);
	const char *copy = seg_name("dumpst-copy");
	r = cistern_restore(path, copy, NULL, NULL, NULL);
	cr_assert_eq(r, 0, "restore: %s", cistern_strerror(r));
	struct cistern *d;
	cr_assert_eq(cistern_attach(copy, &d), 0);
	seg_keep(copy, d);
	/*
	 * The restored samples sit at cold positions 0 .. 34. New puts fill
	 * group 1 after them and more groups, so that group 1, restored and
	 * new samples together, goes to disk in one write, then is read back.
	 */
	uint64_t before = slots_written(d);
	for (uint32_t i = 0; i < 136; i++)
		cr_assert_eq(try_put(d, 2, i), 0, "put %u", i);
	cr_assert_eq(cistern__fifo_tier_settle(d), 0);
	/* Groups 1 .. 4 whole, each in one write; group 5 staged. */
	cr_assert_eq(slots_written(d) - before, 4 * GROUP);
	for (uint32_t i = HOT + 5; i < HOT + 40; i++)
		get_expect(d, 1, i);
	for (uint32_t i = 0; i < 136; i++)
		get_expect(d, 2, i);
	/* The original still holds its own, staged, in order. */
	for (uint32_t i = HOT + 5; i < HOT + 40; i++)
		get_expect(c, 1, i);
}

Test(fifo_tier, a_restore_of_hot_and_cold_samples_reads_the_hot_ones_first)
{
	struct cistern_config cfg = tier_cfg();
	struct cistern *c = seg_create_cfg("dumphot", &cfg);
	for (uint32_t i = 0; i < HOT + 10; i++)
		cr_assert_eq(try_put(c, 1, i), 0);
	const char *path = seg_dump_path("dumphot");
	struct cistern_dump_info info;
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, &info), 0);
	cr_assert_eq(info.samples, HOT + 10);
	cr_assert_eq(info.cold_samples, 10);
	const char *copy = seg_name("dumphot-copy");
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *d;
	cr_assert_eq(cistern_attach(copy, &d), 0);
	seg_keep(copy, d);
	for (uint32_t i = 0; i < HOT + 10; i++)
		get_expect(d, 1, i);
}
