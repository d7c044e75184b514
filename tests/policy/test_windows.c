/* SPDX-License-Identifier: MIT */
/*
 * test_windows.c - windows of one simulation (cistern_acquire_window(),
 * cistern_get_windows(); lib/policy/reservoir/windows.c): their members, the
 * end-of-episode mark, the steps between members, uniform draws, waits,
 * close, orphans, readers killed holding windows, and forked producers and
 * readers at once.
 *
 * The distribution test uses a fixed seed, so it is reproducible, and
 * rejects at a false-failure rate of 1e-6: the statistic must stay below the
 * chi-square quantile at 1 - 1e-6 (Wilson-Hilferty approximation).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(windows, .fini = seg_fini);

#define SIMS 4
#define STEPS 12
#define END CISTERN_META_END_OF_EPISODE

static struct cistern_config win_cfg(uint64_t slots)
{
	return (struct cistern_config){.policy = CISTERN_SIM_PAIRED_RESERVOIR,
				       .slot_size = 4,
				       .slot_count = slots,
				       .watermark = 1,
				       .sweep_size = SIMS,
				       .nb_time_steps = STEPS,
				       .seed = 0x5eed};
}

/* The payload of (sim, step): what every test puts, so a read can check it. */
static uint32_t value_of(uint32_t sim, uint32_t step)
{
	return sim * 1000 + step;
}

static int put_step(struct cistern *c, uint32_t sim, uint32_t step, uint32_t flags, int timeout_ms)
{
	uint32_t v = value_of(sim, step);
	struct cistern_meta m = {.sim_id = sim, .time_step = step, .flags = flags};
	return cistern_put(c, &v, sizeof(v), &m, timeout_ms);
}

static void put_ok(struct cistern *c, uint32_t sim, uint32_t step, uint32_t flags)
{
	int r = put_step(c, sim, step, flags, 0);
	cr_assert_eq(r, 0, "put (%u, %u): %s", sim, step, cistern_strerror(r));
}

static struct cistern_stats stats(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st;
}

/*
 * 0 if w[] is a window of `length` members `step` steps apart: one sim,
 * payloads matching the metadata, no end of episode before the last member;
 * else a number saying what is wrong.
 */
static int window_problem(const struct cistern_sample *w, size_t length, size_t step)
{
	for (size_t k = 0; k < length; k++) {
		if (w[k].meta.sim_id != w[0].meta.sim_id)
			return 1;
		if (w[k].meta.time_step != w[0].meta.time_step + k * step)
			return 2;
		if (w[k].len != 4 ||
		    *(const uint32_t *)w[k].data != value_of(w[k].meta.sim_id, w[k].meta.time_step))
			return 3;
		if (k + 1 < length && (w[k].meta.flags & END))
			return 4;
	}
	return 0;
}

/* Draw windows n times; count each head's (sim, step) in heads[sim][step]. */
static void draw_heads(struct cistern *c, size_t length, size_t step, int n,
		       uint64_t heads[SIMS][STEPS])
{
	struct cistern_sample w[STEPS];
	for (int i = 0; i < n; i++) {
		int r = cistern_acquire_window(c, w, length, step, 0);
		cr_assert_eq(r, 0, "draw %d: %s", i, cistern_strerror(r));
		int bad = window_problem(w, length, step);
		cr_assert_eq(bad, 0, "window at (%u, %u) is wrong (%d)", w[0].meta.sim_id,
			     w[0].meta.time_step, bad);
		heads[w[0].meta.sim_id][w[0].meta.time_step]++;
		cr_assert_eq(cistern_release_window(c, w, length), 0);
	}
}

Test(windows, members_are_one_simulation_at_consecutive_steps)
{
	struct cistern *c = seg_create("w-consec", win_cfg(64));
	/* Gaps at 3 and 7: the complete windows of 3 start at 0, 4 and 8, 9. */
	uint32_t steps[] = {0, 1, 2, 4, 5, 6, 8, 9, 10, 11};
	for (uint32_t sim = 0; sim < 3; sim++)
		for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++)
			put_ok(c, sim, steps[k], 0);
	uint64_t heads[SIMS][STEPS] = {{0}};
	draw_heads(c, 3, 1, 600, heads);
	for (uint32_t sim = 0; sim < 3; sim++)
		for (uint32_t t = 0; t < STEPS; t++) {
			bool head = t == 0 || t == 4 || t == 8 || t == 9;
			if (head)
				cr_assert_gt(heads[sim][t], 0, "(%u, %u) never drawn", sim, t);
			else
				cr_assert_eq(heads[sim][t], 0, "(%u, %u) heads no window", sim, t);
		}
	seg_drop(c);
}

Test(windows, a_window_never_crosses_an_end_of_episode)
{
	struct cistern *c = seg_create("w-end", win_cfg(64));
	/* One sim, steps 0..11, its episode ending at step 4. */
	for (uint32_t t = 0; t < STEPS; t++)
		put_ok(c, 0, t, t == 4 ? END : 0);
	uint64_t heads[SIMS][STEPS] = {{0}};
	draw_heads(c, 3, 1, 600, heads);
	/* Windows of 3 end at the mark (head 2) or start after it (5 to 9). */
	for (uint32_t t = 0; t < STEPS; t++) {
		bool head = t <= 2 || (t >= 5 && t <= 9);
		if (head)
			cr_assert_gt(heads[0][t], 0, "step %u never heads a window", t);
		else
			cr_assert_eq(heads[0][t], 0, "the window at %u crosses the end", t);
	}
	seg_drop(c);
}

Test(windows, the_end_of_episode_mark_is_read_back)
{
	struct cistern *c = seg_create("w-mark", win_cfg(64));
	put_ok(c, 1, 3, 0);
	put_ok(c, 1, 4, END | 0x80); /* a reserved bit is dropped */
	struct cistern_sample w[2];
	cr_assert_eq(cistern_acquire_window(c, w, 2, 1, 0), 0);
	cr_assert_eq(w[0].meta.flags, 0);
	cr_assert_eq(w[1].meta.flags, END);
	cr_assert_eq(cistern_release_window(c, w, 2), 0);
	seg_drop(c);
}

Test(windows, other_policies_keep_no_flags)
{
	struct cistern_config cfg = {.policy = CISTERN_RESERVOIR, .slot_count = 8, .watermark = 1};
	struct cistern *c = seg_create("w-noflags", cfg);
	put_ok(c, 0, 0, END);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	cr_assert_eq(s.meta.flags, 0);
	cr_assert_eq(cistern_release(c, &s), 0);
	struct cistern_sample w[2];
	cr_assert_eq(cistern_acquire_window(c, w, 1, 1, 0), -EINVAL, "no windows here");
	seg_drop(c);
}

Test(windows, the_step_between_members_is_respected_and_the_span_must_be_whole)
{
	struct cistern *c = seg_create("w-stride", win_cfg(64));
	put_ok(c, 2, 0, 0);
	put_ok(c, 2, 2, 0);
	struct cistern_sample w[2];
	cr_assert_eq(cistern_acquire_window(c, w, 2, 2, 0), -EAGAIN,
		     "step 1 is not held: the span is not whole");
	/* Sim 1 holds 0, 1, 2 and 4: (0, 2) is whole, (2, 4) misses step 3. */
	put_ok(c, 1, 0, 0);
	put_ok(c, 1, 1, 0);
	put_ok(c, 1, 2, 0);
	put_ok(c, 1, 4, 0);
	uint64_t heads[SIMS][STEPS] = {{0}};
	draw_heads(c, 2, 2, 200, heads);
	cr_assert_eq(heads[1][0], 200, "only (1, 0) heads a whole window");
	cr_assert_eq(cistern_acquire_window(c, w, 2, 2, 0), 0);
	cr_assert_eq(w[0].meta.time_step, 0);
	cr_assert_eq(w[1].meta.time_step, 2);
	cr_assert_eq(cistern_release_window(c, w, 2), 0);
	seg_drop(c);
}

Test(windows, an_end_between_members_stops_a_strided_window)
{
	struct cistern *c = seg_create("w-stride-end", win_cfg(64));
	for (uint32_t t = 0; t <= 4; t++)
		put_ok(c, 0, t, t == 1 ? END : 0);
	uint64_t heads[SIMS][STEPS] = {{0}};
	draw_heads(c, 2, 2, 200, heads);
	/* Windows (t, t + 2): only (2, 4) stays inside one episode. */
	cr_assert_eq(heads[0][0], 0, "(0, 2) skips over the end at step 1");
	cr_assert_eq(heads[0][1], 0, "(1, 3) starts at the end");
	cr_assert_eq(heads[0][2], 200);
	seg_drop(c);
}

Test(windows, a_window_never_mixes_two_runs_of_one_simulation)
{
	struct cistern *c = seg_create("w-runs", win_cfg(64));
	/* A first run of sim 0 to step 3, then a second one from 0 again (newer ids). */
	for (uint32_t t = 0; t <= 3; t++)
		put_ok(c, 0, t, 0);
	put_ok(c, 0, 0, 0);
	put_ok(c, 0, 1, 0);
	uint64_t heads[SIMS][STEPS] = {{0}};
	draw_heads(c, 2, 1, 300, heads);
	cr_assert_gt(heads[0][0], 0, "(0, 1) of the second run");
	cr_assert_gt(heads[0][2], 0, "(2, 3) of the first run");
	cr_assert_eq(heads[0][1], 0, "(1, 2) would join the second run to the first");
	seg_drop(c);
}

Test(windows, draws_are_uniform_over_the_complete_windows)
{
	struct cistern *c = seg_create("w-chi", win_cfg(64));
	/*
	 * Sims of different lengths, a gap and an end, so that a draw by sim,
	 * by sample or by run would be far from uniform over windows of 3.
	 */
	for (uint32_t t = 0; t < STEPS; t++)
		put_ok(c, 0, t, 0); /* heads 0..9 */
	for (uint32_t t = 0; t < 4; t++)
		put_ok(c, 1, t, 0); /* heads 0, 1 */
	for (uint32_t t = 0; t < 9; t++)
		if (t != 5)
			put_ok(c, 2, t, t == 2 ? END : 0); /* heads 0 (ends at 2), 6 */
	put_ok(c, 3, 7, 0);                                /* heads none */
	bool is_head[SIMS][STEPS] = {{false}};
	int k = 0;
	for (uint32_t t = 0; t <= 9; t++)
		is_head[0][t] = true;
	is_head[1][0] = is_head[1][1] = true;
	is_head[2][0] = is_head[2][6] = true;
	for (int s = 0; s < SIMS; s++)
		for (int t = 0; t < STEPS; t++)
			k += is_head[s][t];
	const int per = 400;
	uint64_t heads[SIMS][STEPS] = {{0}};
	draw_heads(c, 3, 1, per * k, heads);
	double x = 0;
	for (int s = 0; s < SIMS; s++)
		for (int t = 0; t < STEPS; t++) {
			if (!is_head[s][t]) {
				cr_assert_eq(heads[s][t], 0, "(%d, %d) heads no complete window", s,
					     t);
				continue;
			}
			double d = (double)heads[s][t] - per;
			x += d * d / per;
		}
	double crit = chi2_critical(k - 1, Z_1E6);
	cr_assert_lt(x, crit, "chi-square %.1f >= %.1f over %d windows", x, crit, k);
	seg_drop(c);
}

Test(windows, no_complete_window_means_eagain_or_a_timeout)
{
	struct cistern *c = seg_create("w-none", win_cfg(64));
	put_ok(c, 0, 0, 0);
	put_ok(c, 0, 1, 0);
	put_ok(c, 1, 2, 0);
	struct cistern_sample w[3];
	cr_assert_eq(cistern_acquire_window(c, w, 3, 1, 0), -EAGAIN);
	cr_assert_eq(cistern_acquire_window(c, w, 3, 1, 30), -ETIMEDOUT);
	uint32_t buf[3];
	cr_assert_eq(cistern_get_windows(c, buf, 4, 1, 3, 1, NULL, NULL, 0), -EAGAIN);
	put_ok(c, 0, 2, 0);
	cr_assert_eq(cistern_acquire_window(c, w, 3, 1, 0), 0);
	cr_assert_eq(cistern_release_window(c, w, 3), 0);
	seg_drop(c);
}

Test(windows, a_member_spent_and_held_elsewhere_keeps_its_windows_unread)
{
	struct cistern_config cfg = win_cfg(64);
	cfg.max_times_sampled = 1;
	struct cistern *a = seg_create("win-spent", cfg);
	for (uint32_t t = 0; t < STEPS; t++)
		put_ok(a, 0, t, 0);
	uint32_t reads[STEPS] = {0};
	struct cistern_sample held[2], w[2];
	cr_assert_eq(cistern_acquire_window(a, held, 2, 1, 0), 0);
	reads[held[0].meta.time_step]++;
	reads[held[1].meta.time_step]++;
	/* Spent (one read each) but pinned by a: no one else may read them. */
	struct cistern *b;
	cr_assert_eq(cistern_attach(seg_name_of(a), &b), 0);
	int r, windows = 0;
	while (windows < 100 && (r = cistern_acquire_window(b, w, 2, 1, 0)) == 0) {
		for (int k = 0; k < 2; k++) {
			uint32_t t = w[k].meta.time_step;
			cr_assert_eq(reads[t], 0, "step %u read again while spent", t);
			reads[t]++;
		}
		cr_assert_eq(cistern_release_window(b, w, 2), 0);
		windows++;
	}
	cr_assert_eq(r, -EAGAIN);
	cr_assert_gt(windows, 0, "b read no window at all");
	cistern_detach(b);
	cr_assert_eq(cistern_release_window(a, held, 2), 0);
}

Test(windows, bad_shapes_are_refused)
{
	struct cistern *c = seg_create("w-bad", win_cfg(64));
	struct cistern_sample w[STEPS + 1];
	uint32_t buf[64];
	cr_assert_eq(cistern_acquire_window(c, w, 0, 1, 0), -EINVAL, "length 0");
	cr_assert_eq(cistern_acquire_window(c, w, 2, 0, 0), -EINVAL, "step 0");
	cr_assert_eq(cistern_acquire_window(c, w, STEPS + 1, 1, 0), -EINVAL, "too long");
	cr_assert_eq(cistern_acquire_window(c, w, 4, 4, 0), -EINVAL, "span 13 > 12 steps");
	cr_assert_eq(cistern_acquire_window(c, NULL, 2, 1, 0), -EINVAL);
	cr_assert_eq(cistern_get_windows(c, buf, 4, 0, 2, 1, NULL, NULL, 0), -EINVAL, "n 0");
	cr_assert_eq(cistern_get_windows(c, NULL, 4, 1, 2, 1, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(stats(c).gets, 0);
	seg_drop(c);
}

Test(windows, a_window_the_rate_limiter_can_never_admit_is_refused_at_once)
{
	struct cistern_config cfg = win_cfg(64);
	cfg.reads_per_put = 1;
	cfg.rate_slack = 2; /* admits reads of up to 3 at once */
	struct cistern *c = seg_create("w-rate", cfg);
	put_ok(c, 0, 0, 0);
	put_ok(c, 0, 1, 0); /* the limiter lets no more puts ahead of reads */
	struct cistern_sample w[STEPS];
	cr_assert_eq(cistern_acquire_window(c, w, 8, 1, -1), -EDEADLK, "no wait for ever");
	cr_assert_eq(cistern_acquire_window(c, w, 2, 1, 0), 0);
	cr_assert_eq(cistern_release_window(c, w, 2), 0);
	seg_drop(c);
}

Test(windows, a_pair_is_the_window_of_two)
{
	struct cistern *c = seg_create("w-pair", win_cfg(64));
	put_ok(c, 3, 6, 0);
	put_ok(c, 3, 7, 0);
	struct cistern_sample w[2];
	cr_assert_eq(cistern_acquire_window(c, w, 2, 1, 0), 0);
	cr_assert_eq(w[0].meta.time_step, 6);
	cr_assert_eq(w[1].meta.time_step, 7);
	cr_assert_eq(cistern_release_window(c, w, 2), 0);
	cr_assert_eq(cistern_acquire_pair(c, w, 0), 0);
	cr_assert_eq(cistern_release_pair(c, w), 0);
	cr_assert_eq(stats(c).gets, 4, "each member counts as read");
	seg_drop(c);
}

Test(windows, get_windows_lays_a_batch_out_by_window_then_step)
{
	struct cistern *c = seg_create("w-get", win_cfg(64));
	for (uint32_t t = 0; t < 6; t++)
		put_ok(c, 1, t, 0);
	enum { B = 5, L = 3, STRIDE = 8 };
	uint8_t buf[B * L * STRIDE];
	size_t len[B * L];
	struct cistern_meta meta[B * L];
	memset(buf, 0xee, sizeof(buf));
	int r = cistern_get_windows(c, buf, STRIDE, B, L, 1, len, meta, 0);
	cr_assert_eq(r, B, "%s", cistern_strerror(r));
	for (int b = 0; b < B; b++)
		for (int k = 0; k < L; k++) {
			size_t at = (size_t)b * L + (size_t)k;
			uint32_t v;
			memcpy(&v, buf + at * STRIDE, 4);
			cr_assert_eq(len[at], 4);
			cr_assert_eq(meta[at].sim_id, 1);
			cr_assert_eq(meta[at].time_step, meta[b * L].time_step + (uint32_t)k);
			cr_assert_eq(v, value_of(1, meta[at].time_step));
		}
	cr_assert_eq(stats(c).gets, B * L);
	cr_assert_eq(cistern_get_windows(c, buf, 2, 1, L, 1, NULL, NULL, 0), -EMSGSIZE);
	cr_assert_eq(stats(c).gets, B * L, "a window too long for the stride is not read");
	seg_drop(c);
}

Test(windows, after_close_each_window_goes_once_then_end_of_data)
{
	struct cistern *c = seg_create("w-close", win_cfg(64));
	for (uint32_t t = 0; t < 6; t++)
		put_ok(c, 0, t, 0);
	put_ok(c, 1, 0, 0);
	cistern_close_reception(c);
	struct cistern_sample w[3];
	int windows = 0;
	for (;;) {
		int r = cistern_acquire_window(c, w, 3, 1, 1000);
		if (r == CISTERN_EOD)
			break;
		cr_assert_eq(r, 0, "%s", cistern_strerror(r));
		cr_assert_eq(window_problem(w, 3, 1), 0);
		cr_assert_eq(cistern_release_window(c, w, 3), 0);
		windows++;
	}
	/* 6 steps: one window, or two if the first drawn starts at 0 or 3. */
	cr_assert(windows == 1 || windows == 2, "%d windows", windows);
	cr_assert_eq(stats(c).population, 7 - 3 * (uint64_t)windows,
		     "the members went; the rest stays");
	seg_drop(c);
}

/*
 * Fragments shorter than a window can never be read by a reader of
 * windows: once such a reader waited, a producer stuck on a full buffer
 * evicts one of them (counted unseen) rather than wait for ever.
 */
Test(windows, fragments_no_window_can_hold_are_evicted_rather_than_wedge)
{
	struct cistern *c = seg_create("w-orphan", win_cfg(4));
	put_ok(c, 0, 0, 0);
	put_ok(c, 0, 1, 0);
	put_ok(c, 1, 0, 0);
	put_ok(c, 1, 1, 0);
	cr_assert_eq(put_step(c, 2, 0, 0, 0), -EAGAIN, "pairs are held: a pair reader could read");
	struct cistern_sample w[3];
	cr_assert_eq(cistern_acquire_window(c, w, 3, 1, 0), -EAGAIN);
	cr_assert_eq(put_step(c, 2, 0, 0, 0), 0, "no window of 3 can form: a fragment goes");
	cr_assert_eq(stats(c).evicted_unseen, 1);
	seg_drop(c);
}

Test(windows, a_reader_killed_holding_a_window_leaves_no_pin_behind)
{
	struct cistern *c = seg_create("w-kill", win_cfg(4));
	for (uint32_t t = 0; t < 4; t++)
		put_ok(c, 0, t, 0);
	pid_t pid = spawn_window_holder(seg_name_of(c), 4);
	cr_assert_gt(pid, 0, "the reader did not start");
	cr_assert_eq(put_step(c, 1, 0, 0, 0), -EAGAIN, "every sample is pinned by the window");
	kill_and_reap(pid);
	/* The dead reader's reads do not count: another reader reads the window. */
	struct cistern_sample w[4];
	cr_assert_eq(cistern_acquire_window(c, w, 4, 1, 0), 0);
	cr_assert_eq(cistern_release_window(c, w, 4), 0);
	/* A waiting producer reclaims the dead reader's pins; the seen samples can go. */
	int r = put_step(c, 1, 0, 0, 5000);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	cr_assert_eq(stats(c).evicted_unseen, 0);
	seg_drop(c);
}

Test(windows, a_window_taken_after_close_by_a_killed_reader_is_not_lost)
{
	struct cistern *c = seg_create("w-kill-closed", win_cfg(8));
	for (uint32_t t = 0; t < 3; t++)
		put_ok(c, 0, t, 0);
	cistern_close_reception(c);
	pid_t pid = spawn_window_holder(seg_name_of(c), 3);
	cr_assert_gt(pid, 0, "the reader did not start");
	kill_and_reap(pid);
	struct cistern_sample w[3];
	int r = cistern_acquire_window(c, w, 3, 1, 5000);
	cr_assert_eq(r, 0, "the dead reader's window comes back: %s", cistern_strerror(r));
	cr_assert_eq(window_problem(w, 3, 1), 0);
	cr_assert_eq(cistern_release_window(c, w, 3), 0);
	cr_assert_eq(cistern_acquire_window(c, w, 3, 1, 1000), CISTERN_EOD);
	seg_drop(c);
}

/*
 * Producers, each running episodes of its own sims and marking their ends,
 * and readers checking every window, all forked, some readers killed while
 * they hold windows. Every reader that lives must see only good windows.
 */
#define MP_PRODUCERS 3
#define MP_READERS 3
#define MP_EPISODES 40

static void mp_producer(const char *name, uint32_t p)
{
	struct cistern *h;
	if (cistern_attach(name, &h) < 0)
		_exit(1);
	for (uint32_t e = 0; e < MP_EPISODES; e++) {
		/* Episodes of 5 to 12 steps; time steps restart at 0 in each. */
		uint32_t len = 5 + (p * 7 + e * 3) % 8, sim = p;
		for (uint32_t t = 0; t < len; t++)
			if (put_step(h, sim, t, t + 1 == len ? END : 0, 10000) < 0)
				_exit(2);
	}
	cistern_detach(h);
	_exit(0);
}

static void mp_reader(const char *name, uint32_t r)
{
	struct cistern *h;
	if (cistern_attach(name, &h) < 0)
		_exit(1);
	struct cistern_sample w[STEPS];
	size_t length = 2 + r % 3, step = 1 + r % 2;
	for (;;) {
		int x = cistern_acquire_window(h, w, length, step, 10000);
		if (x == CISTERN_EOD)
			break;
		if (x < 0)
			_exit(2);
		if (window_problem(w, length, step) != 0)
			_exit(3);
		if (cistern_release_window(h, w, length) < 0)
			_exit(4);
	}
	cistern_detach(h);
	_exit(0);
}

Test(windows, forked_producers_and_readers_see_only_whole_windows, .timeout = 120)
{
	struct cistern_config cfg = win_cfg(48);
	struct cistern *c = seg_create("w-mp", cfg);
	run_forked_producers_and_readers(c, MP_PRODUCERS, mp_producer, MP_READERS, mp_reader);
	uint64_t puts = 0;
	for (uint32_t p = 0; p < MP_PRODUCERS; p++)
		for (uint32_t e = 0; e < MP_EPISODES; e++)
			puts += 5 + (p * 7 + e * 3) % 8;
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.puts, puts, "every producer put all its steps");
	cr_assert_gt(st.gets, 0);
	seg_drop(c);
}
