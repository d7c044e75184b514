/* SPDX-License-Identifier: MIT */
/*
 * test_max_reads.c - max_times_sampled: a sample of a reservoir kind leaves
 * once it was read that many times, held by nobody; never read once more;
 * its slot free for a put; and a reader killed holding it gives its read
 * back. The other policies refuse it.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "cistern/admin.h"
#include "core/handle.h"
#include "policy/reservoir/prioritized.h"
#include "policy/reservoir/reservoir.h"

TestSuite(max_reads, .fini = seg_fini);

/* A `policy` segment of one-uint32_t samples, read at most k times each. */
static struct cistern_config cap_cfg(enum cistern_policy policy, uint64_t slots, uint32_t k)
{
	return (struct cistern_config){.policy = policy,
				       .slot_size = 4,
				       .slot_count = slots,
				       .watermark = 1,
				       .max_times_sampled = k};
}

static void put_u32(struct cistern *c, uint32_t v)
{
	int r = cistern_put(c, &v, sizeof(v), NULL, 0);
	cr_assert_eq(r, 0, "put %u: %s", v, cistern_strerror(r));
}

static struct cistern_stats stats(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st;
}

/* A get of the one sample that must be there. */
static uint32_t get_u32(struct cistern *c, int timeout_ms)
{
	uint32_t v = UINT32_MAX;
	ssize_t r = cistern_get(c, &v, sizeof(v), NULL, timeout_ms);
	cr_assert_eq(r, 4, "get: %s", cistern_strerror((int)r));
	return v;
}

Test(max_reads, a_sample_leaves_after_exactly_k_copy_reads)
{
	struct cistern *c = seg_create("k3", cap_cfg(CISTERN_RESERVOIR, 4, 3));
	put_u32(c, 7);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(stats(c).population, 1, "still there before read %d", i + 1);
		cr_assert_eq(get_u32(c, 0), 7);
	}
	uint32_t v;
	cr_assert_eq(cistern_get(c, &v, sizeof(v), NULL, 0), -EAGAIN, "a fourth read");
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, 0);
	cr_assert_eq(st.seen_hist[3], 1, "it left with three reads");
	cr_assert_eq(st.evictions, 0, "leaving is not an eviction");
	seg_drop(c);
}

Test(max_reads, fifo_evict_and_prioritized_samples_leave_after_k_reads_too)
{
	static const enum cistern_policy kinds[] = {CISTERN_FIFO_EVICT_RESERVOIR,
						    CISTERN_PRIORITIZED};
	for (size_t p = 0; p < 2; p++) {
		struct cistern *c = seg_create("kinds", cap_cfg(kinds[p], 4, 2));
		put_u32(c, 1);
		get_u32(c, 0);
		get_u32(c, 0);
		struct cistern_stats st = stats(c);
		cr_assert_eq(st.population, 0, "%s", cistern_policy_name(kinds[p]));
		cr_assert_eq(st.seen_hist[2], 1, "%s", cistern_policy_name(kinds[p]));
		seg_drop(c);
	}
}

Test(max_reads, a_spent_sample_stays_until_its_last_holder_releases)
{
	struct cistern *c = seg_create("pins", cap_cfg(CISTERN_RESERVOIR, 4, 2));
	put_u32(c, 5);
	struct cistern_sample a, b, x;
	cr_assert_eq(cistern_acquire(c, &a, 0), 0);
	cr_assert_eq(cistern_acquire(c, &b, 0), 0, "the second of two reads");
	cr_assert_eq(cistern_acquire(c, &x, 0), -EAGAIN, "a third read is refused");
	cr_assert_eq(cistern_release(c, &a), 0);
	cr_assert_eq(stats(c).population, 1, "b still reads it in place");
	cr_assert_eq(*(const uint32_t *)b.data, 5);
	cr_assert_eq(cistern_release(c, &b), 0);
	cr_assert_eq(stats(c).population, 0, "the last release let it go");
	seg_drop(c);
}

Test(max_reads, a_read_given_back_does_not_count)
{
	struct cistern *c = seg_create("back", cap_cfg(CISTERN_RESERVOIR, 4, 1));
	put_u32(c, 3);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	cr_assert_eq(cistern_unacquire(c, &s), 0);
	cr_assert_eq(stats(c).population, 1, "given back, unread");
	cr_assert_eq(get_u32(c, 0), 3, "the one read it has");
	cr_assert_eq(stats(c).population, 0);
	seg_drop(c);
}

Test(max_reads, a_slot_freed_by_the_last_read_takes_a_put_without_an_eviction)
{
	struct cistern *c = seg_create("reuse", cap_cfg(CISTERN_RESERVOIR, 2, 1));
	put_u32(c, 1);
	put_u32(c, 2);
	uint32_t first = get_u32(c, 0);
	cr_assert(first == 1 || first == 2);
	cr_assert_eq(cistern_put(c, &(uint32_t){3}, 4, NULL, 0), 0, "the freed slot");
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.evictions, 0, "nothing was evicted for it");
	cr_assert_eq(st.population, 2);
	cr_assert_eq(st.seen_hist[1], 1);
	/* The buffer is full again and nothing in it was read: a put now waits. */
	cr_assert_eq(cistern_put(c, &(uint32_t){4}, 4, NULL, 0), -EAGAIN);
	seg_drop(c);
}

Test(max_reads, a_batch_read_counts_each_member)
{
	struct cistern_config cfg = cap_cfg(CISTERN_BATCH_RESERVOIR, 4, 2);
	cfg.batch_size = 4;
	cfg.watermark = 4;
	struct cistern *c = seg_create("batch", cfg);
	for (uint32_t i = 0; i < 4; i++)
		put_u32(c, i);
	struct cistern_sample s[4];
	cr_assert_eq(cistern_acquire_batch(c, s, 4, 0), 4);
	cr_assert_eq(cistern_release_batch(c, s, 4), 0);
	cr_assert_eq(stats(c).population, 4, "one read each so far");
	uint32_t buf[4];
	size_t len[4];
	cr_assert_eq(cistern_get_batch(c, buf, 4, 4, len, NULL, 0), 4, "the copy read");
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, 0, "every member had its two reads");
	cr_assert_eq(st.seen_hist[2], 4);
	seg_drop(c);
}

Test(max_reads, a_pair_read_counts_both_members)
{
	struct cistern_config cfg = cap_cfg(CISTERN_SIM_PAIRED_RESERVOIR, 4, 1);
	cfg.sweep_size = 1;
	cfg.nb_time_steps = 2;
	struct cistern *c = seg_create("pair", cfg);
	for (uint32_t t = 0; t < 2; t++) {
		struct cistern_meta m = {.sim_id = 0, .time_step = t};
		cr_assert_eq(cistern_put(c, &t, 4, &m, 0), 0);
	}
	struct cistern_sample pair[2];
	cr_assert_eq(cistern_acquire_pair(c, pair, 0), 0);
	cr_assert_eq(cistern_release_pair(c, pair), 0);
	cr_assert_eq(stats(c).population, 0, "both members had their one read");
	seg_drop(c);
}

/* Under the lock, after every step: the prioritized tree agrees with the slots. */
Test(max_reads, the_prioritized_tree_drops_a_spent_sample)
{
	struct cistern_config cfg = cap_cfg(CISTERN_PRIORITIZED, 8, 2);
	cfg.alpha = 1;
	struct cistern *c = seg_create("prio", cfg);
	for (uint32_t i = 0; i < 4; i++)
		put_u32(c, i);
	uint64_t where = 0;
	struct cistern_sample hold[8];
	int held = 0;
	/* Hold every read: spent samples stay HELD, pinned, and must have no leaf. */
	while (cistern_acquire(c, &hold[held], 0) == 0) {
		held++;
		cr_assert_leq(held, 8, "more than two reads of four samples");
		cr_assert_eq(cistern__prio_check(c, &where), 0, "node %lu after read %d",
			     (unsigned long)where, held);
	}
	cr_assert_eq(held, 8, "two reads of each of four samples");
	cr_assert_eq(stats(c).population, 4, "held, so not gone yet");
	for (int i = 0; i < held; i++) {
		cr_assert_eq(cistern_release(c, &hold[i]), 0);
		cr_assert_eq(cistern__prio_check(c, &where), 0, "node %lu after release %d",
			     (unsigned long)where, i);
	}
	cr_assert_eq(stats(c).population, 0);
	/* The freed slots take new samples, drawable again. */
	put_u32(c, 9);
	cr_assert_eq(get_u32(c, 0), 9);
	cr_assert_eq(cistern__prio_check(c, &where), 0, "node %lu", (unsigned long)where);
	seg_drop(c);
}

Test(max_reads, create_refuses_it_for_fifo_and_firo_naming_it)
{
	static const enum cistern_policy refused[] = {CISTERN_FIFO, CISTERN_FIRO};
	for (size_t p = 0; p < 2; p++) {
		struct cistern_config cfg = cap_cfg(refused[p], 8, 2);
		const char *why = cistern_config_problem(&cfg);
		cr_assert_not_null(why, "%s took it", cistern_policy_name(refused[p]));
		cr_assert_not_null(strstr(why, "max_times_sampled"), "%s", why);
		struct cistern *c = NULL;
		cr_assert_eq(cistern_create(seg_name("refused"), &cfg, &c), -EINVAL);
		cr_assert_null(c);
	}
}

Test(max_reads, create_refuses_a_rate_above_it)
{
	struct cistern_config cfg = cap_cfg(CISTERN_RESERVOIR, 8, 2);
	cfg.reads_per_put = 3;
	const char *why = cistern_config_problem(&cfg);
	cr_assert_not_null(why);
	cr_assert_not_null(strstr(why, "max_times_sampled"), "%s", why);
	cfg.reads_per_put = 2;
	cr_assert_null(cistern_config_problem(&cfg));
}

Test(max_reads, config_get_gives_it_back)
{
	struct cistern *c = seg_create("get", cap_cfg(CISTERN_RESERVOIR, 8, 5));
	struct cistern_config got;
	cr_assert_eq(cistern_config_get(c, &got), 0);
	cr_assert_eq(got.max_times_sampled, 5);
	seg_drop(c);
}

/* ---- several processes ---- */

enum { MP_SAMPLES = 300, MP_READERS = 4, MP_K = 3 };

/*
 * A reader child: reads until end of data, by copy or by acquire and
 * release (every other reader), counting each sample's reads in reads[].
 */
static int count_reader(const char *name, _Atomic uint32_t *reads, bool zero_copy)
{
	struct cistern *h = NULL;
	if (cistern_attach(name, &h) < 0)
		return 2;
	for (;;) {
		uint32_t v;
		int r;
		if (zero_copy) {
			struct cistern_sample s;
			r = cistern_acquire(h, &s, 10000);
			if (r == 0) {
				v = *(const uint32_t *)s.data;
				usleep(200); /* hold it a while: others pin it meanwhile */
				if (cistern_release(h, &s) < 0)
					return 3;
			}
		} else {
			ssize_t n = cistern_get(h, &v, sizeof(v), NULL, 10000);
			r = n == 4 ? 0 : (int)n;
		}
		if (r == CISTERN_EOD)
			break;
		if (r < 0 || v >= MP_SAMPLES)
			return 4;
		atomic_fetch_add(&reads[v], 1);
	}
	cistern_detach(h);
	return 0;
}

/* Wait until the population falls to 0 (every sample spent and gone). */
static bool wait_empty(struct cistern *c, int ms)
{
	for (int t = 0; t < ms; t++) {
		if (stats(c).population == 0)
			return true;
		usleep(1000);
	}
	return false;
}

Test(max_reads, several_forked_readers_read_every_sample_exactly_k_times, .timeout = 120)
{
	/* Room for every sample: none is evicted, so each leaves by its reads alone. */
	struct cistern *c = seg_create("mp", cap_cfg(CISTERN_RESERVOIR, 512, MP_K));
	const char *name = seg_name_of(c);
	_Atomic uint32_t *reads = shared_alloc(sizeof(*reads) * MP_SAMPLES);
	pid_t pid[MP_READERS];
	for (int i = 0; i < MP_READERS; i++) {
		pid[i] = fork_child();
		if (pid[i] == 0)
			_exit(count_reader(name, reads, i % 2 == 1));
	}
	/*
	 * Two at a time, each pair gone before the next: every reader then
	 * draws from the same two samples at once, and pins meet.
	 */
	for (uint32_t i = 0; i < MP_SAMPLES; i += 2) {
		put_u32(c, i);
		put_u32(c, i + 1);
		cr_assert(wait_empty(c, 10000), "samples %u and %u still there", i, i + 1);
	}
	cr_assert_eq(cistern_close_reception(c), 0);
	for (int i = 0; i < MP_READERS; i++)
		cr_assert_eq(reap_status(pid[i]), 0, "reader %d", i);
	for (uint32_t i = 0; i < MP_SAMPLES; i++)
		cr_assert_eq(reads[i], MP_K, "sample %u read %u times", i, reads[i]);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.seen_hist[MP_K], MP_SAMPLES);
	cr_assert_eq(st.evictions, 0);
	seg_drop(c);
}

Test(max_reads, a_reader_killed_holding_the_last_read_gives_it_back, .timeout = 60)
{
	struct cistern *c = seg_create("kill1", cap_cfg(CISTERN_RESERVOIR, 2, 1));
	put_u32(c, 4);
	pid_t pid = spawn_holder(seg_name_of(c), HOLD_SAMPLE);
	cr_assert_gt(pid, 0);
	uint32_t v;
	cr_assert_eq(cistern_get(c, &v, sizeof(v), NULL, 0), -EAGAIN, "its one read is taken");
	kill_and_reap(pid);
	/* The wait finds the dead reader and reclaims it: its read comes back. */
	cr_assert_eq(get_u32(c, 5000), 4);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, 0, "the live read was its last");
	cr_assert_eq(st.seen_hist[1], 1);
	seg_drop(c);
}

Test(max_reads, a_reader_killed_below_the_cap_neither_wedges_nor_loses_the_sample, .timeout = 60)
{
	struct cistern *c = seg_create("kill2", cap_cfg(CISTERN_RESERVOIR, 2, 2));
	put_u32(c, 6);
	pid_t pid = spawn_holder(seg_name_of(c), HOLD_SAMPLE); /* read 1, held */
	cr_assert_gt(pid, 0);
	cr_assert_eq(get_u32(c, 0), 6, "read 2: the last");
	cr_assert_eq(stats(c).population, 1, "the victim's pin keeps it");
	kill_and_reap(pid);
	/* The reclaim drops the pin and takes back the read that never ended. */
	cr_assert_eq(get_u32(c, 5000), 6, "the read the victim gave back");
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, 0);
	cr_assert_eq(st.seen_hist[2], 1);
	cr_assert_eq(cistern_put(c, &(uint32_t){1}, 4, NULL, 0), 0, "its slot takes a put");
	seg_drop(c);
}

/*
 * A process that dies removing a spent sample leaves it EVICTING in its
 * name. The last reader's release finds it so and leaves it; the reclaim of
 * the dead process, here by the attach that takes its entry (a handle with
 * no entry of its own yet), puts it back and removes it in the dead one's name.
 */
/* A spawned child's set-up: the remover's first step on slot *arg, HELD -> EVICTING in its name. */
static int start_removal(struct cistern *h, const void *arg)
{
	_Atomic uint64_t *w = &cistern__slotmeta(h, *(const uint32_t *)arg)->word;
	uint64_t held = atomic_load(w);
	if (sw_state(held) != RS_HELD)
		return 3;
	atomic_store(w, sw_make(sw_pos(held), RS_EVICTING, h->owner));
	return 0;
}

Test(max_reads, a_remover_killed_mid_removal_leaves_it_to_its_reclaim, .timeout = 60)
{
	struct cistern *c = seg_create("killrm", cap_cfg(CISTERN_RESERVOIR, 2, 1));
	const char *name = seg_name_of(c);
	put_u32(c, 8);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0, "its one read, held");
	pid_t pid = spawn_attached(name, start_removal, &s.index_);
	cr_assert_gt(pid, 0);
	kill_and_reap(pid);
	cr_assert_eq(cistern_release(c, &s), 0);
	cr_assert_eq(stats(c).population, 1, "EVICTING in the dead one's name: not ours to take");
	struct cistern *late = NULL;
	cr_assert_eq(cistern_attach(name, &late), 0, "the attach reclaims the dead entry");
	cr_assert_eq(stats(c).population, 0, "the reclaim removed the spent sample");
	cr_assert_eq(cistern_put(c, &(uint32_t){2}, 4, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, &(uint32_t){3}, 4, NULL, 0), 0, "both slots free");
	cr_assert_eq(cistern_detach(late), 0);
	seg_drop(c);
}

/* A sample dumped with its last read still held had left: the restored copy does not keep it. */
Test(max_reads, a_restore_drops_a_sample_dumped_spent)
{
	struct cistern *c = seg_create("dumpcap", cap_cfg(CISTERN_RESERVOIR, 4, 1));
	put_u32(c, 1);
	put_u32(c, 2);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0, "one sample's last read, held");
	const char *path = seg_dump_path("dumpcap");
	const char *copy = seg_name("dumpcopy");
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	seg_keep(copy, r);
	cr_assert_eq(stats(r).population, 1, "only the unread sample");
	cr_assert_eq(get_u32(r, 0), *(const uint32_t *)s.data == 1 ? 2 : 1);
	cr_assert_eq(cistern_release(c, &s), 0);
	seg_drop(c);
}

/* A reader child of whole batches of two: acquires, holds a while, releases; counts reads. */
static int batch_reader(const char *name, _Atomic uint32_t *reads)
{
	struct cistern *h = NULL;
	if (cistern_attach(name, &h) < 0)
		return 2;
	for (;;) {
		struct cistern_sample s[2];
		int r = cistern_acquire_batch(h, s, 2, 10000);
		if (r == CISTERN_EOD)
			break;
		if (r <= 0)
			return 3;
		for (int i = 0; i < r; i++) {
			uint32_t v = *(const uint32_t *)s[i].data;
			if (v >= MP_SAMPLES)
				return 4;
			atomic_fetch_add(&reads[v], 1);
		}
		usleep(100);
		if (cistern_release_batch(h, s, (size_t)r) < 0)
			return 5;
	}
	cistern_detach(h);
	return 0;
}

Test(max_reads, several_forked_batch_readers_never_read_a_sample_past_k, .timeout = 120)
{
	struct cistern_config cfg = cap_cfg(CISTERN_BATCH_RESERVOIR, 512, MP_K);
	cfg.batch_size = 2;
	cfg.watermark = 2;
	struct cistern *c = seg_create("mpbatch", cfg);
	const char *name = seg_name_of(c);
	_Atomic uint32_t *reads = shared_alloc(sizeof(*reads) * MP_SAMPLES);
	pid_t pid[MP_READERS];
	for (int i = 0; i < MP_READERS; i++) {
		pid[i] = fork_child();
		if (pid[i] == 0)
			_exit(batch_reader(name, reads));
	}
	for (uint32_t i = 0; i < MP_SAMPLES; i++)
		put_u32(c, i);
	/* Once fewer than a batch are left, open reads stop for good: close, and they drain. */
	for (int t = 0; t < 60000 && stats(c).population >= 2; t++)
		usleep(1000);
	cr_assert_lt(stats(c).population, 2);
	cr_assert_eq(cistern_close_reception(c), 0);
	for (int i = 0; i < MP_READERS; i++)
		cr_assert_eq(reap_status(pid[i]), 0, "reader %d", i);
	uint32_t total = 0;
	for (uint32_t i = 0; i < MP_SAMPLES; i++) {
		cr_assert_leq(reads[i], MP_K, "sample %u read %u times", i, reads[i]);
		cr_assert_geq(reads[i], 1, "sample %u never read", i);
		total += reads[i];
	}
	cr_assert_eq(stats(c).gets, total, "every read counted once");
	cr_assert_eq(stats(c).population, 0);
	seg_drop(c);
}

enum { RL_SAMPLES = 400 };

/* A producer child: puts RL_SAMPLES values, then says it is done. */
static int rl_producer(const char *name)
{
	struct cistern *h = NULL;
	if (cistern_attach(name, &h) < 0)
		return 2;
	for (uint32_t i = 0; i < RL_SAMPLES; i++)
		if (cistern_put(h, &i, sizeof(i), NULL, 10000) < 0)
			return 3;
	if (cistern_producer_done(h) < 0)
		return 4;
	cistern_detach(h);
	return 0;
}

/*
 * With one read per put allowed by the limiter and one read per sample, a
 * reservoir is a queue in random order: the producer and the reader both
 * finish (neither waits for the other for good: a read that finds too few
 * samples lets a put through), and every sample is read exactly once.
 */
Test(max_reads, under_the_rate_limiter_one_read_each_reads_every_sample_once, .timeout = 120)
{
	struct cistern_config cfg = cap_cfg(CISTERN_RESERVOIR, 16, 1);
	cfg.watermark = 4;
	cfg.reads_per_put = 1;
	cfg.expected_producers = 1;
	struct cistern *c = seg_create("rl", cfg);
	pid_t pid = fork_child();
	if (pid == 0)
		_exit(rl_producer(seg_name_of(c)));
	uint32_t *reads = calloc(RL_SAMPLES, sizeof(*reads));
	cr_assert_not_null(reads);
	uint32_t v;
	ssize_t r;
	while ((r = cistern_get(c, &v, sizeof(v), NULL, 10000)) == 4) {
		cr_assert_lt(v, RL_SAMPLES);
		reads[v]++;
	}
	cr_assert_eq(r, CISTERN_EOD, "the read ended with %s", cistern_strerror((int)r));
	cr_assert_eq(reap_status(pid), 0, "the producer finished");
	for (uint32_t i = 0; i < RL_SAMPLES; i++)
		cr_assert_eq(reads[i], 1, "sample %u read %u times", i, reads[i]);
	free(reads);
	/* Left by its read, or evicted by a put between the release and the removal: read once. */
	cr_assert_eq(stats(c).seen_hist[1], RL_SAMPLES);
	seg_drop(c);
}
