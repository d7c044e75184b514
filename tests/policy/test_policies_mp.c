/* SPDX-License-Identifier: MIT */
/*
 * test_policies_mp.c - FIRO and the reservoirs across real processes: 4
 * producers and 4 readers, checked from the outside (what readers received),
 * not only through the segment's own counters.
 */
#include <criterion/criterion.h>

#include "helpers.h"

/* Every test's segment goes through seg_create(); the fixture removes it, pass or fail. */
TestSuite(policies_mp, .fini = seg_fini);

#define NPROD 4
#define NREAD 4
#define PAYLOAD 64
#define WAIT_MS 20000 /* a wedge fails the test instead of hanging it */

struct shared {
	_Atomic uint32_t reads[NPROD * 8192]; /* reads of each (producer, seq) */
	_Atomic uint32_t damaged;             /* payloads that failed their check */
	_Atomic uint32_t bad_pairs;
	_Atomic uint32_t bad_batches;
	_Atomic uint32_t errors;
	_Atomic uint64_t total_reads;
};

struct run {
	struct cistern_config cfg;
	uint32_t per_producer;
	int put_pause_us; /* producers pause between puts (readers outrun them) */
	int hold_us;      /* readers hold each sample this long, checking twice */
	size_t batch;     /* readers use acquire_batch of this size (0: single) */
	bool pairs;       /* readers use acquire_pair */
	int readers;      /* reader processes (0: NREAD) */
	bool gather;      /* readers use get_batch of `batch` samples (copies) */
};

static void record(struct shared *sh, const struct run *rn, const struct cistern_sample *s)
{
	uint32_t p = s->meta.sim_id, q = s->meta.time_step;
	if (p >= NPROD || q >= rn->per_producer || s->len != PAYLOAD ||
	    !check_payload(s->data, s->len, p, q)) {
		atomic_fetch_add(&sh->damaged, 1);
		return;
	}
	atomic_fetch_add(&sh->reads[p * rn->per_producer + q], 1);
}

static void hold_and_recheck(struct shared *sh, const struct run *rn,
			     const struct cistern_sample *s, size_t n)
{
	if (!rn->hold_us)
		return;
	usleep((useconds_t)rn->hold_us);
	for (size_t i = 0; i < n; i++)
		if (!check_payload(s[i].data, s[i].len, s[i].meta.sim_id, s[i].meta.time_step))
			atomic_fetch_add(&sh->damaged, 1); /* overwritten while held */
}

static int reader(const char *name, struct shared *sh, const struct run *rn)
{
	struct cistern *c;
	if (cistern_attach(name, &c) < 0)
		return 1;
	struct cistern_sample s[256];
	static unsigned char buf[256 * PAYLOAD];
	size_t lens[256];
	struct cistern_meta metas[256];
	for (;;) {
		int r;
		size_t n;
		if (rn->gather) {
			r = cistern_get_batch(c, buf, PAYLOAD, rn->batch, lens, metas, WAIT_MS);
			if (r == CISTERN_EOD)
				break;
			if (r < 0) {
				atomic_fetch_add(&sh->errors, 1);
				return 2;
			}
			for (int i = 0; i < r; i++) {
				struct cistern_sample copy = {.data = buf + (size_t)i * PAYLOAD,
							      .len = lens[i],
							      .meta = metas[i]};
				record(sh, rn, &copy);
				for (int j = i + 1; j < r; j++)
					if (metas[i].sample_id == metas[j].sample_id)
						atomic_fetch_add(&sh->bad_batches, 1);
			}
			atomic_fetch_add(&sh->total_reads, (uint64_t)r);
			continue;
		}
		if (rn->pairs) {
			r = cistern_acquire_pair(c, s, WAIT_MS);
			n = 2;
		} else if (rn->batch) {
			r = cistern_acquire_batch(c, s, rn->batch, WAIT_MS);
			n = r > 0 ? (size_t)r : 0;
		} else {
			r = cistern_acquire(c, s, WAIT_MS);
			n = 1;
		}
		if (r == CISTERN_EOD)
			break;
		if (r < 0) {
			atomic_fetch_add(&sh->errors, 1);
			return 2;
		}
		for (size_t i = 0; i < n; i++)
			record(sh, rn, &s[i]);
		if (rn->pairs && (s[0].meta.sim_id != s[1].meta.sim_id ||
				  s[0].meta.time_step + 1 != s[1].meta.time_step))
			atomic_fetch_add(&sh->bad_pairs, 1);
		for (size_t i = 0; rn->batch && i < n; i++)
			for (size_t j = i + 1; j < n; j++)
				if (s[i].index_ == s[j].index_)
					atomic_fetch_add(&sh->bad_batches, 1);
		hold_and_recheck(sh, rn, s, n);
		atomic_fetch_add(&sh->total_reads, n);
		if (cistern_release_batch(c, s, n) < 0) {
			atomic_fetch_add(&sh->errors, 1);
			return 3;
		}
	}
	cistern_detach(c);
	return 0;
}

static int producer(const char *name, uint32_t id, const struct run *rn)
{
	struct cistern *c;
	if (cistern_attach(name, &c) < 0)
		return 1;
	for (uint32_t i = 0; i < rn->per_producer; i++) {
		struct cistern_slot slot;
		if (cistern_reserve(c, &slot, WAIT_MS) < 0)
			return 2;
		fill_payload(slot.data, PAYLOAD, id, i);
		struct cistern_meta m = {.sim_id = id, .time_step = i};
		if (cistern_commit(c, &slot, PAYLOAD, &m) < 0)
			return 3;
		if (rn->put_pause_us)
			usleep((useconds_t)rn->put_pause_us);
	}
	cistern_producer_done(c);
	cistern_detach(c);
	return 0;
}

/* Population samples taken by the parent while the run goes on. */
struct curve {
	uint64_t pop[20000];
	int closed_at; /* first sample taken after reception closed */
	int n;
};

static struct shared *run_policy(const char *tag, struct run *rn, struct curve *curve,
				 struct cistern_stats *final)
{
	rn->cfg.slot_size = PAYLOAD;
	rn->cfg.expected_producers = NPROD;
	struct cistern *c = seg_create(tag, rn->cfg);
	const char *name = seg_name_of(c);
	struct shared *sh = shared_alloc(sizeof(*sh));
	cr_assert_not_null(sh);
	for (int i = 0; i < (rn->readers ? rn->readers : NREAD); i++)
		if (fork_child() == 0)
			_exit(reader(name, sh, rn));
	for (uint32_t i = 0; i < NPROD; i++)
		if (fork_child() == 0)
			_exit(producer(name, i, rn));
	if (curve) {
		curve->n = 0;
		curve->closed_at = -1;
		struct cistern_stats st;
		while (curve->n < 20000) {
			cistern_stats_get(c, &st);
			if (st.reception_closed && curve->closed_at < 0)
				curve->closed_at = curve->n;
			curve->pop[curve->n++] = st.population;
			if (st.reception_closed && st.population == 0)
				break;
			usleep(2000);
		}
	}
	cr_assert_eq(reap_all(), 0, "a producer or reader failed (errors %u)",
		     atomic_load(&sh->errors));
	cistern_stats_get(c, final);
	cr_assert_eq(atomic_load(&sh->damaged), 0, "damaged or overwritten payloads");
	return sh;
}

static void assert_every_sample_read(struct shared *sh, const struct run *rn, uint32_t exactly)
{
	for (uint32_t p = 0; p < NPROD; p++) {
		for (uint32_t q = 0; q < rn->per_producer; q++) {
			uint32_t n = atomic_load(&sh->reads[p * rn->per_producer + q]);
			if (exactly)
				cr_assert_eq(n, exactly, "sample (%u,%u) read %u times", p, q, n);
			else
				cr_assert_geq(n, 1, "sample (%u,%u) left the buffer unseen", p, q);
		}
	}
}

/*
 * Every batch was whole and distinct, every sample was read before it left,
 * and producers did evict meanwhile (else the run proved nothing).
 */
static void assert_batches_whole_while_evicting(struct shared *sh, const struct run *rn,
						const struct cistern_stats *st)
{
	cr_assert_eq(atomic_load(&sh->bad_batches), 0);
	assert_every_sample_read(sh, rn, 0);
	cr_assert_eq(st->evicted_unseen, 0);
	cr_assert_gt(st->evictions, 0, "producers did overwrite slots meanwhile");
}

Test(policies_mp, reservoir_never_evicts_a_sample_unseen, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_RESERVOIR, .slot_count = 256, .watermark = 32},
			 .per_producer = 5000};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-res", &rn, NULL, &st);
	/* Evicted samples were all read before; the rest were read while draining. */
	assert_every_sample_read(sh, &rn, 0);
	cr_assert_eq(st.evicted_unseen, 0);
	cr_assert_eq(st.puts, NPROD * rn.per_producer);
	cr_assert_eq(st.evictions, st.puts - 256, "every put beyond capacity evicted one");
}

Test(policies_mp, fifo_evict_reservoir_never_evicts_a_sample_unseen, .timeout = 120)
{
	struct run rn = {
		.cfg = {.policy = CISTERN_FIFO_EVICT_RESERVOIR, .slot_count = 256, .watermark = 32},
		.per_producer = 5000};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-fe", &rn, NULL, &st);
	assert_every_sample_read(sh, &rn, 0);
	cr_assert_eq(st.evicted_unseen, 0);
}

Test(policies_mp, firo_reads_every_sample_exactly_pseudo_epochs_times, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_FIRO,
				 .slot_count = 128,
				 .watermark = 16,
				 .pseudo_epochs = 3},
			 .per_producer = 5000};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-firo", &rn, NULL, &st);
	assert_every_sample_read(sh, &rn, 3);
	cr_assert_eq(st.gets, 3ull * NPROD * rn.per_producer);
	cr_assert_eq(st.population, 0);
}

Test(policies_mp, pinned_samples_are_never_overwritten_while_held, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_RESERVOIR, .slot_count = 32, .watermark = 8},
			 .per_producer = 3000,
			 .hold_us = 50};
	struct cistern_stats st;
	run_policy("mp-pin", &rn, NULL, &st);
	cr_assert_gt(st.evictions, 0, "producers did overwrite slots meanwhile");
}

Test(policies_mp, pinned_batches_are_distinct_and_never_overwritten, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_BATCH_RESERVOIR,
				 .slot_count = 64,
				 .watermark = 16,
				 .batch_size = 16},
			 .per_producer = 3000,
			 .batch = 16,
			 .hold_us = 50};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-batch", &rn, NULL, &st);
	cr_assert_eq(atomic_load(&sh->bad_batches), 0);
	assert_every_sample_read(sh, &rn, 0);
	cr_assert_eq(st.evicted_unseen, 0);
}

Test(policies_mp, sim_paired_pairs_are_one_simulation_at_consecutive_steps, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_SIM_PAIRED_RESERVOIR,
				 .slot_count = 128,
				 .watermark = 16,
				 .sweep_size = NPROD,
				 .nb_time_steps = 3000},
			 .per_producer = 3000,
			 .pairs = true};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-pairs", &rn, NULL, &st);
	cr_assert_eq(atomic_load(&sh->bad_pairs), 0);
	cr_assert_gt(atomic_load(&sh->total_reads), 0);
	cr_assert_eq(st.puts, NPROD * rn.per_producer, "no producer wedged");
}

/* Several readers gather batches (one pass each, lib/policy/reservoir/gather.c) while producers evict. */
Test(policies_mp, gathered_batches_of_several_readers_are_whole_and_distinct, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_RESERVOIR, .slot_count = 64, .watermark = 16},
			 .per_producer = 5000,
			 .batch = 16,
			 .gather = true};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-gather", &rn, NULL, &st);
	assert_batches_whole_while_evicting(sh, &rn, &st);
}

/*
 * CISTERN_SINGLE_READER: the one reader pins and counts reads with plain
 * stores and one fence per batch (lib/policy/reservoir/pins.c), against 4 producers evicting
 * as fast as they can.
 */
Test(policies_mp, sole_reader_reservoir_never_evicts_a_sample_unseen, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_RESERVOIR,
				 .slot_count = 256,
				 .watermark = 32,
				 .flags = CISTERN_SINGLE_READER},
			 .per_producer = 5000,
			 .readers = 1};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-sole-res", &rn, NULL, &st);
	assert_every_sample_read(sh, &rn, 0);
	cr_assert_eq(st.evicted_unseen, 0);
	cr_assert_eq(st.evictions, st.puts - 256, "every put beyond capacity evicted one");
}

Test(policies_mp, sole_reader_pinned_batches_are_distinct_and_never_overwritten, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_BATCH_RESERVOIR,
				 .slot_count = 64,
				 .watermark = 16,
				 .batch_size = 16,
				 .flags = CISTERN_SINGLE_READER},
			 .per_producer = 3000,
			 .batch = 16,
			 .hold_us = 50,
			 .readers = 1};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-sole-batch", &rn, NULL, &st);
	assert_batches_whole_while_evicting(sh, &rn, &st);
}

Test(policies_mp, sole_reader_gathered_batches_are_whole_and_distinct, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_RESERVOIR,
				 .slot_count = 64,
				 .watermark = 16,
				 .flags = CISTERN_SINGLE_READER},
			 .per_producer = 5000,
			 .batch = 16,
			 .gather = true,
			 .readers = 1};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-sole-gather", &rn, NULL, &st);
	assert_batches_whole_while_evicting(sh, &rn, &st);
}

Test(policies_mp, sole_reader_fifo_evict_reservoir_never_evicts_a_sample_unseen, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_FIFO_EVICT_RESERVOIR,
				 .slot_count = 256,
				 .watermark = 32,
				 .flags = CISTERN_SINGLE_READER},
			 .per_producer = 5000,
			 .readers = 1,
			 .batch = 8};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-sole-fe", &rn, NULL, &st);
	assert_every_sample_read(sh, &rn, 0);
	cr_assert_eq(st.evicted_unseen, 0);
}

Test(policies_mp, sole_reader_sim_paired_pairs_are_one_simulation_at_consecutive_steps,
     .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_SIM_PAIRED_RESERVOIR,
				 .slot_count = 128,
				 .watermark = 16,
				 .sweep_size = NPROD,
				 .nb_time_steps = 3000,
				 .flags = CISTERN_SINGLE_READER},
			 .per_producer = 3000,
			 .pairs = true,
			 .readers = 1,
			 .hold_us = 20};
	struct cistern_stats st;
	struct shared *sh = run_policy("mp-sole-pairs", &rn, NULL, &st);
	cr_assert_eq(atomic_load(&sh->bad_pairs), 0);
	cr_assert_gt(atomic_load(&sh->total_reads), 0);
	cr_assert_eq(st.puts, NPROD * rn.per_producer, "no producer wedged");
}

Test(policies_mp, firo_population_holds_at_the_watermark_then_drains, .timeout = 120)
{
	/* Readers outrun the simulations, as in training: the population sits at the watermark. */
	struct run rn = {.cfg = {.policy = CISTERN_FIRO, .slot_count = 256, .watermark = 40},
			 .per_producer = 600,
			 .put_pause_us = 300};
	static struct curve cv;
	struct cistern_stats st;
	run_policy("mp-firo-curve", &rn, &cv, &st);
	cr_assert_gt(cv.closed_at, 10);
	int first = -1, near = 0, steady = 0;
	for (int i = 0; i < cv.closed_at; i++) {
		if (first < 0 && cv.pop[i] >= 40)
			first = i;
		if (first >= 0) {
			steady++;
			near += cv.pop[i] + NREAD >= 40 && cv.pop[i] <= 40 + NPROD;
		}
		cr_assert_lt(cv.pop[i], 256, "never near capacity");
	}
	cr_assert_geq(first, 0, "the population reached the watermark");
	cr_assert_geq(near * 10, steady * 9, "held at the watermark: %d of %d samples", near,
		      steady);
	cr_assert_eq(cv.pop[cv.n - 1], 0, "drained after close");
}

Test(policies_mp, reservoir_population_rises_to_capacity_holds_then_drains, .timeout = 120)
{
	struct run rn = {.cfg = {.policy = CISTERN_RESERVOIR, .slot_count = 200, .watermark = 20},
			 .per_producer = 1500,
			 .put_pause_us = 100};
	static struct curve cv;
	struct cistern_stats st;
	run_policy("mp-res-curve", &rn, &cv, &st);
	int first = -1, full = 0, steady = 0;
	for (int i = 0; i < cv.closed_at; i++) {
		if (first < 0 && cv.pop[i] + NPROD >= 200)
			first = i;
		if (first >= 0) {
			steady++;
			full += cv.pop[i] + NPROD >=
				200; /* in-flight evictions dip it by at most one each */
		}
	}
	cr_assert_geq(first, 0, "the population reached capacity");
	cr_assert_geq(full * 10, steady * 9, "held at capacity: %d of %d", full, steady);
	cr_assert_eq(cv.pop[cv.n - 1], 0, "drained after close");
}

Test(policies_mp, a_sample_pinned_in_another_process_survives_puts_into_a_full_reservoir,
     .timeout = 60)
{
	struct cistern_config cfg = {
		.policy = CISTERN_RESERVOIR, .slot_size = PAYLOAD, .slot_count = 8, .watermark = 1};
	struct cistern *c = seg_create("pinfull", cfg);
	const char *name = seg_name_of(c);
	unsigned char buf[PAYLOAD];
	for (uint32_t q = 0; q < 8; q++) {
		fill_payload(buf, PAYLOAD, 0, q);
		struct cistern_meta m = {.sim_id = 0, .time_step = q};
		cr_assert_eq(cistern_put(c, buf, PAYLOAD, &m, 0), 0);
	}
	int ready[2], done[2];
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(done), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *r;
		struct cistern_sample s;
		if (cistern_attach(name, &r) < 0 || cistern_acquire(r, &s, 1000) < 0)
			_exit(1);
		uint32_t q = s.meta.time_step;
		if (write(ready[1], &q, sizeof(q)) != (ssize_t)sizeof(q))
			_exit(2);
		char go;
		if (read(done[0], &go, 1) != 1)
			_exit(3);
		/* Unchanged after every put, though it was seen and the reservoir full. */
		bool same = s.len == PAYLOAD && check_payload(s.data, s.len, 0, q);
		cistern_release(r, &s);
		cistern_detach(r);
		_exit(same ? 0 : 4);
	}
	cr_assert_gt(pid, 0);
	uint32_t pinned;
	cr_assert_eq(read(ready[0], &pinned, sizeof(pinned)), (ssize_t)sizeof(pinned));
	int puts = 0;
	for (uint32_t q = 8; q < 400; q++) {
		/* Read what is held so that every sample but the pinned one may be evicted. */
		for (int i = 0; i < 8; i++)
			cistern_get(c, buf, sizeof(buf), NULL, 0);
		fill_payload(buf, PAYLOAD, 1, q);
		struct cistern_meta m = {.sim_id = 1, .time_step = q};
		puts += cistern_put(c, buf, PAYLOAD, &m, 0) == 0;
	}
	cr_assert_gt(puts, 300, "puts went on, evicting the other samples (%d)", puts);
	cr_assert_eq(write(done[1], "x", 1), 1);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the pinned sample changed (%d)",
		  status);
	cr_log_info("pinned step %u, %d puts", pinned, puts);
}

/* ---- crashes ---- */

Test(policies_mp, a_killed_reader_pins_are_dropped, .timeout = 60)
{
	struct cistern_config cfg = {
		.policy = CISTERN_RESERVOIR, .slot_size = 8, .slot_count = 1, .watermark = 1};
	struct cistern *c = seg_create("kpin", cfg);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "old", 3, NULL, 0), 0);
	pid_t pid = spawn_holder(name, HOLD_SAMPLE); /* a pin, under a reservoir */
	cr_assert_gt(pid, 0);
	cr_assert_eq(cistern_put(c, "new", 3, NULL, 0), -EAGAIN, "seen, but pinned by the victim");
	kill_and_reap(pid);
	/* A waiting put finds the dead reader within a sweep: its pin goes, and so does its
	 * read, which never completed: the sample counts as unseen again and stays. */
	cr_assert_eq(cistern_put(c, "new", 3, NULL, 600), -ETIMEDOUT);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.procs_attached, 1, "the dead reader was reclaimed");
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 3, "a live read");
	cr_assert_eq(cistern_put(c, "new", 3, NULL, 0), 0, "now it may go");
	cistern_stats_get(c, &st);
	cr_assert_eq(st.evictions, 1);
	cr_assert_eq(st.evicted_unseen, 0);
}

Test(policies_mp, a_killed_reader_batch_loses_its_pins_and_its_reads, .timeout = 60)
{
	struct cistern_config cfg = {.policy = CISTERN_BATCH_RESERVOIR,
				     .slot_size = 8,
				     .slot_count = 4,
				     .watermark = 4,
				     .batch_size = 4};
	struct cistern *c = seg_create("kbatch", cfg);
	const char *name = seg_name_of(c);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern_put(c, "old", 3, NULL, 0), 0);
	pid_t pid = spawn_holder(name, HOLD_BATCH); /* pins all four */
	cr_assert_gt(pid, 0);
	cr_assert_eq(cistern_put(c, "new", 3, NULL, 0), -EAGAIN, "seen, but pinned by the victim");
	kill_and_reap(pid);
	/* The sweep drops the four pins and the four reads, which never completed. */
	cr_assert_eq(cistern_put(c, "new", 3, NULL, 600), -ETIMEDOUT);
	struct cistern_sample s[4];
	cr_assert_eq(cistern_acquire_batch(c, s, 4, 0), 4, "a live read of all four");
	cr_assert_eq(cistern_release_batch(c, s, 4), 0);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern_put(c, "new", 3, NULL, 0), 0, "seen and unpinned: may go");
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.evictions, 4);
	cr_assert_eq(st.evicted_unseen, 0);
}

Test(policies_mp, a_killed_firo_reader_sample_is_handed_out_again, .timeout = 60)
{
	struct cistern_config cfg = {
		.policy = CISTERN_FIRO, .slot_size = 8, .slot_count = 4, .watermark = 1};
	struct cistern *c = seg_create("kfiro", cfg);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), 0);
	pid_t pid = spawn_holder(name, HOLD_SAMPLE); /* held alone, under FIRO */
	cr_assert_gt(pid, 0);
	cistern_close_reception(c);
	char got[2] = {0};
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	got[0] = buf[0];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN,
		     "the other is held by the victim: not end of data yet");
	kill_and_reap(pid);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 5000), 1);
	got[1] = buf[0];
	cr_assert((got[0] == 'a' && got[1] == 'b') || (got[0] == 'b' && got[1] == 'a'));
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), CISTERN_EOD);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.redeliveries, 1);
	cr_assert_eq(st.seen_hist[1], 2, "each left seen once: the dead read does not count");
}

Test(policies_mp, a_killed_producer_reservation_vanishes, .timeout = 60)
{
	struct cistern_config cfg = {
		.policy = CISTERN_RESERVOIR, .slot_size = 8, .slot_count = 2, .watermark = 1};
	struct cistern *c = seg_create("kres", cfg);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	pid_t pid = spawn_holder(name, HOLD_RESERVATION);
	cr_assert_gt(pid, 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), -EAGAIN, "the victim holds the last slot");
	kill_and_reap(pid);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 5000), 0, "its slot came back empty");
	cistern_close_reception(c);
	char buf[8];
	int n = 0;
	while (cistern_get(c, buf, sizeof(buf), NULL, 0) == 1)
		n++;
	cr_assert_eq(n, 2, "the reservation never became a sample");
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.reclaimed, 1);
}

/* ---- the rate limiter: progress ---- */

#define RL_WAIT_MS 5000 /* a wedge fails the call instead of hanging the test */

/* A producer child: n puts of 8 bytes, each allowed to wait. Exit 0 if all went in. */
static int rl_producer(const char *name, uint32_t n)
{
	struct cistern *c;
	if (cistern_attach(name, &c) < 0)
		return 1;
	for (uint32_t i = 0; i < n; i++)
		if (cistern_put(c, &i, sizeof(i), NULL, RL_WAIT_MS) < 0)
			return 2;
	cistern_detach(c);
	return 0;
}

/* A reader child: reads of `batch` samples (0: single gets) until end of data. */
static int rl_reader(const char *name, size_t batch)
{
	struct cistern *c;
	if (cistern_attach(name, &c) < 0)
		return 1;
	for (;;) {
		int r;
		if (batch) {
			struct cistern_sample s[16];
			r = cistern_acquire_batch(c, s, batch, RL_WAIT_MS);
			if (r > 0 && cistern_release_batch(c, s, (size_t)r) < 0)
				return 3;
		} else {
			uint32_t v;
			r = (int)cistern_get(c, &v, sizeof(v), NULL, RL_WAIT_MS);
		}
		if (r == CISTERN_EOD)
			break;
		if (r < 0)
			return 2;
	}
	cistern_detach(c);
	return 0;
}

/*
 * One producer child putting n samples and one reader child reading until
 * end of data, which the parent declares once the producer is through.
 * True if both finished, every call within RL_WAIT_MS.
 */
static bool rl_both_finish(struct cistern *c, uint32_t n, size_t batch)
{
	const char *name = seg_name_of(c);
	pid_t prod = fork_child();
	if (prod == 0)
		_exit(rl_producer(name, n));
	pid_t rd = fork_child();
	if (rd == 0)
		_exit(rl_reader(name, batch));
	int ps = -1, rs = -1;
	waitpid(prod, &ps, 0);
	cistern_close_reception(c);
	waitpid(rd, &rs, 0);
	return WIFEXITED(ps) && WEXITSTATUS(ps) == 0 && WIFEXITED(rs) && WEXITSTATUS(rs) == 0;
}

/*
 * A put into a full FIFOEvictReservoir waits for its oldest sample to be
 * read, and reads are drawn at random: the reads the limiter grants for the
 * puts so far may all miss it. The limiter lets reads through while a put
 * waits for one.
 */
Test(policies_mp, a_rate_limited_fifo_evict_reservoir_keeps_a_producer_and_a_reader_going,
     .timeout = 120)
{
	const double rates[] = {1, 2, 4};
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		char tag[32];
		snprintf(tag, sizeof(tag), "rl-fe-%zu", i);
		struct cistern *c = seg_create(
			tag, (struct cistern_config){.policy = CISTERN_FIFO_EVICT_RESERVOIR,
						     .slot_size = 64,
						     .slot_count = 64,
						     .watermark = 8,
						     .reads_per_put = rates[i]});
		cr_assert(rl_both_finish(c, 500, 0), "reads_per_put %g: a side stopped", rates[i]);
		struct cistern_stats st;
		cistern_stats_get(c, &st);
		cr_assert_eq(st.puts, 500, "reads_per_put %g", rates[i]);
		seg_drop(c);
	}
}

/* A spawned child's set-up: acquire a batch of 4 and hold it. */
static int take_four(struct cistern *h, const void *arg)
{
	(void)arg;
	struct cistern_sample s[4];
	return cistern_acquire_batch(h, s, 4, 1000) != 4;
}

/*
 * A reader killed holding a batch: its reclaim takes the batch's seen counts
 * back, so the limiter takes its reads back too; and while nothing is
 * evictable the producer's wait lets reads through.
 */
Test(policies_mp, a_reader_killed_holding_a_batch_leaves_a_rate_limited_reservoir_going,
     .timeout = 120)
{
	const double rates[] = {1, 2};
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		char tag[32];
		snprintf(tag, sizeof(tag), "rl-kill-%zu", i);
		struct cistern *c = seg_create(tag,
					       (struct cistern_config){.policy = CISTERN_RESERVOIR,
								       .slot_size = 8,
								       .slot_count = 8,
								       .watermark = 8,
								       .reads_per_put = rates[i]});
		for (uint32_t k = 0; k < 8; k++)
			cr_assert_eq(cistern_put(c, &k, sizeof(k), NULL, 0), 0);
		pid_t pid = spawn_attached(seg_name_of(c), take_four, NULL);
		cr_assert_gt(pid, 0, "the victim took its batch");
		kill_and_reap(pid);
		cr_assert(rl_both_finish(c, 100, 0), "reads_per_put %g: a side stopped", rates[i]);
		seg_drop(c);
	}
}
