/* SPDX-License-Identifier: MIT */
/*
 * test_prio_windows.c - windows drawn by priority on a prioritized segment
 * with a sweep_size (cistern_get_prioritized_windows(); the window draw of
 * lib/policy/reservoir/prioritized.c over windows.c): the law of the draws
 * among complete windows, the weights, episode ends, updates by a window's
 * id, readers killed holding windows, close, and what is refused.
 *
 * The distribution tests use a fixed seed, so they are reproducible, and
 * reject at a false-failure rate of 1e-6: the statistic must stay below the
 * chi-square quantile at 1 - 1e-6 (Wilson-Hilferty approximation).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "cistern/admin.h"
#include "core/handle.h"
#include "policy/reservoir/prioritized.h"
#include "policy/reservoir/reservoir.h"

TestSuite(prio_windows, .fini = seg_fini);

#define SIMS 4
#define STEPS 8
#define END CISTERN_META_END_OF_EPISODE
#define ALPHA 0.8
#define EPS 0.1

static struct cistern_config pw_cfg(uint64_t slots, double beta)
{
	return (struct cistern_config){.policy = CISTERN_PRIORITIZED,
				       .slot_size = 4,
				       .slot_count = slots,
				       .watermark = 1,
				       .sweep_size = SIMS,
				       .nb_time_steps = STEPS,
				       .seed = 0x9e1044,
				       .alpha = ALPHA,
				       .beta = beta,
				       .epsilon = EPS};
}

/* What the tests put: which steps are held, which end an episode, and their priorities. */
struct world {
	bool held[SIMS][STEPS];
	uint32_t flags[SIMS][STEPS];
	double q[SIMS][STEPS];
};

static uint32_t value_of(uint32_t sim, uint32_t step)
{
	return sim * 1000 + step;
}

static void put_step(struct cistern *c, struct world *w, uint32_t sim, uint32_t t, uint32_t flags,
		     double q)
{
	uint32_t v = value_of(sim, t);
	struct cistern_meta m = {.sim_id = sim, .time_step = t, .flags = flags};
	int r = cistern_put_prioritized(c, &v, sizeof(v), &m, q, 0);
	cr_assert_eq(r, 0, "put (%u, %u): %s", sim, t, cistern_strerror(r));
	w->held[sim][t] = true;
	w->flags[sim][t] = flags;
	w->q[sim][t] = q;
}

/*
 * Sim 0: steps 0..7, one episode. Sim 1: steps 0..7, an episode ending at 3.
 * Sim 2: steps 0..7 but 3. Sim 3: steps 0 and 1 only. Priorities spread
 * from 0.5 to 40, so that the law of the last member and of the first differ.
 */
static void put_world(struct cistern *c, struct world *w)
{
	memset(w, 0, sizeof(*w));
	for (uint32_t sim = 0; sim < SIMS; sim++)
		for (uint32_t t = 0; t < STEPS; t++) {
			if ((sim == 2 && t == 3) || (sim == 3 && t > 1))
				continue;
			double q = 0.5 + (double)((sim * 5 + t * 3) % 9) * 5;
			put_step(c, w, sim, t, sim == 1 && t == 3 ? END : 0, q);
		}
}

/* Does a complete window of `length`, `step` apart, end at (sim, t) in w? */
static bool ends_window(const struct world *w, uint32_t sim, uint32_t t, uint32_t length,
			uint32_t step)
{
	uint32_t span = (length - 1) * step + 1;
	if (!w->held[sim][t] || t + 1 < span)
		return false;
	for (uint32_t u = t + 1 - span; u <= t; u++)
		if (!w->held[sim][u] || (u < t && (w->flags[sim][u] & END)))
			return false;
	return true;
}

static double leaf(double q)
{
	return pow(q + EPS, ALPHA);
}

/*
 * 0 if win[] (length members `step` apart, payloads as put) is a window
 * that crosses no episode's end; else a number saying what is wrong.
 */
static int window_problem(const uint32_t *vals, const struct cistern_meta *m, uint32_t length,
			  uint32_t step)
{
	for (uint32_t k = 0; k < length; k++) {
		if (m[k].sim_id != m[0].sim_id)
			return 1;
		if (m[k].time_step != m[0].time_step + k * step)
			return 2;
		if (vals[k] != value_of(m[k].sim_id, m[k].time_step))
			return 3;
		if (k + 1 < length && (m[k].flags & END))
			return 4;
	}
	return 0;
}

#define BATCH 64
/* Windows of a batch larger than the policy's draws at once (DRAW_CHUNK, 64). */
#define BIG_BATCH 1000

/* Draw rounds batches of `batch` windows, checking each, counting them by their last member. */
static void count_ends_by(struct cistern *c, uint32_t length, uint32_t step, int rounds, int batch,
			  uint64_t counts[SIMS][STEPS])
{
	static uint32_t vals[BIG_BATCH * STEPS];
	static struct cistern_meta meta[BIG_BATCH * STEPS];
	cr_assert_leq(batch, BIG_BATCH);
	for (int r = 0; r < rounds; r++) {
		int got = cistern_get_prioritized_windows(c, vals, 4, (size_t)batch, length, step,
							  NULL, meta, NULL, NULL, 0);
		cr_assert_eq(got, batch, "round %d: %s", r, cistern_strerror(got));
		for (uint32_t i = 0; i < (uint32_t)got; i++) {
			const struct cistern_meta *m = &meta[i * length];
			int bad = window_problem(&vals[i * length], m, length, step);
			cr_assert_eq(bad, 0, "window at (%u, %u) is wrong (%d)", m[0].sim_id,
				     m[0].time_step, bad);
			counts[m[length - 1].sim_id][m[length - 1].time_step]++;
		}
	}
}

/* Draw rounds * BATCH windows, BATCH at a time (see count_ends_by()). */
static void count_ends(struct cistern *c, uint32_t length, uint32_t step, int rounds,
		       uint64_t counts[SIMS][STEPS])
{
	count_ends_by(c, length, step, rounds, BATCH, counts);
}

/*
 * The chi-square statistic of counts against a law proportional to the
 * priority of member `at` (0: the first, length - 1: the last) over the
 * complete windows of w; every other cell must be empty.
 */
static double chi2_against(const struct world *w, uint64_t counts[SIMS][STEPS], uint32_t length,
			   uint32_t step, uint32_t at, int *df)
{
	double sum = 0;
	uint64_t n = 0;
	uint32_t back = (length - 1 - at) * step;
	for (uint32_t s = 0; s < SIMS; s++)
		for (uint32_t t = 0; t < STEPS; t++) {
			n += counts[s][t];
			if (ends_window(w, s, t, length, step))
				sum += leaf(w->q[s][t - back]);
			else
				cr_assert_eq(counts[s][t], 0, "(%u, %u) ends no complete window", s,
					     t);
		}
	double x = 0;
	*df = -1;
	for (uint32_t s = 0; s < SIMS; s++)
		for (uint32_t t = 0; t < STEPS; t++)
			if (ends_window(w, s, t, length, step)) {
				double e = (double)n * leaf(w->q[s][t - back]) / sum;
				double d = (double)counts[s][t] - e;
				x += d * d / e;
				(*df)++;
			}
	return x;
}

Test(prio_windows, windows_are_drawn_by_their_last_members_priority)
{
	struct cistern *c = seg_create("pw-chi", pw_cfg(32, 0.4));
	struct world w;
	put_world(c, &w);
	uint64_t counts[SIMS][STEPS] = {{0}};
	count_ends(c, 3, 1, 300, counts);
	int df;
	double x = chi2_against(&w, counts, 3, 1, 2, &df);
	cr_assert_eq(df, 12, "13 complete windows");
	cr_assert_lt(x, chi2_critical(df, Z_1E6), "chi-square %.1f >= %.1f", x,
		     chi2_critical(df, Z_1E6));
}

Test(prio_windows, the_chi_square_test_rejects_the_law_of_the_first_member)
{
	struct cistern *c = seg_create("pw-chi-first", pw_cfg(32, 0.4));
	struct world w;
	put_world(c, &w);
	uint64_t counts[SIMS][STEPS] = {{0}};
	count_ends(c, 3, 1, 300, counts);
	int df;
	double x = chi2_against(&w, counts, 3, 1, 0, &df);
	cr_assert_gt(x, chi2_critical(df, Z_1E6), "chi-square %.1f: the test cannot tell the laws",
		     x);
}

Test(prio_windows, windows_with_a_stride_follow_the_same_law)
{
	struct cistern *c = seg_create("pw-chi-step", pw_cfg(32, 0.4));
	struct world w;
	put_world(c, &w);
	uint64_t counts[SIMS][STEPS] = {{0}};
	count_ends(c, 2, 2, 300, counts);
	int df;
	double x = chi2_against(&w, counts, 2, 2, 1, &df);
	cr_assert_lt(x, chi2_critical(df, Z_1E6), "chi-square %.1f >= %.1f", x,
		     chi2_critical(df, Z_1E6));
}

Test(prio_windows, a_window_never_crosses_an_end_of_episode)
{
	struct cistern *c = seg_create("pw-eoe", pw_cfg(32, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	/* Episodes of 2 steps: no window of 3 is complete, though every step is held. */
	for (uint32_t t = 0; t < STEPS; t++)
		put_step(c, &w, 0, t, t % 2 ? END : 0, 1 + t);
	uint32_t vals[3];
	int r = cistern_get_prioritized_windows(c, vals, 4, 1, 3, 1, NULL, NULL, NULL, NULL, 0);
	cr_assert_eq(r, -EAGAIN, "a window of 3 crossed an end: %s", cistern_strerror(r));
	/* Windows of 2 are exactly the episodes. */
	uint64_t counts[SIMS][STEPS] = {{0}};
	count_ends(c, 2, 1, 50, counts);
	for (uint32_t t = 0; t < STEPS; t++)
		if (t % 2)
			cr_assert_gt(counts[0][t], 0, "episode ending at %u never drawn", t);
}

/* The weight of the window ending at (sim, t): (least leaf held / its leaf)^beta. */
static double weight_of(const struct world *w, uint32_t sim, uint32_t t, double beta)
{
	double least = INFINITY;
	for (uint32_t s = 0; s < SIMS; s++)
		for (uint32_t u = 0; u < STEPS; u++)
			if (w->held[s][u])
				least = fmin(least, leaf(w->q[s][u]));
	return pow(least / leaf(w->q[sim][t]), beta);
}

Test(prio_windows, weights_match_the_formula)
{
	struct cistern *c = seg_create("pw-w", pw_cfg(32, 0.6));
	struct world w;
	put_world(c, &w);
	uint32_t vals[BATCH * 3];
	struct cistern_meta meta[BATCH * 3];
	double weight[BATCH];
	int got = cistern_get_prioritized_windows(c, vals, 4, BATCH, 3, 1, NULL, meta, NULL, weight,
						  0);
	cr_assert_eq(got, BATCH, "%s", cistern_strerror(got));
	for (int i = 0; i < got; i++) {
		const struct cistern_meta *end = &meta[i * 3 + 2];
		double want = weight_of(&w, end->sim_id, end->time_step, 0.6);
		cr_assert(fabs(weight[i] - want) <= 1e-5 * want,
			  "window ending at (%u, %u): weight %.9g, formula %.9g", end->sim_id,
			  end->time_step, weight[i], want);
	}
}

Test(prio_windows, an_update_by_a_windows_id_changes_what_is_drawn)
{
	struct cistern *c = seg_create("pw-upd", pw_cfg(32, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	for (uint32_t t = 0; t < STEPS; t++)
		put_step(c, &w, 0, t, 0, 1);
	/* Draw until the window ending at step 4 comes, and keep its id. */
	uint32_t vals[3];
	struct cistern_meta meta[3];
	uint64_t id = 0;
	bool found = false;
	for (int i = 0; i < 10000 && !found; i++) {
		cr_assert_eq(cistern_get_prioritized_windows(c, vals, 4, 1, 3, 1, NULL, meta, &id,
							     NULL, 0),
			     1);
		found = meta[2].time_step == 4;
	}
	cr_assert(found, "the window ending at 4 never came");
	double big = 1000;
	cr_assert_eq(cistern_update_priorities(c, &id, &big, 1), 1);
	uint64_t counts[SIMS][STEPS] = {{0}};
	count_ends(c, 3, 1, 4, counts);
	/* Expected 256 * 1000^0.8 / (1000^0.8 + 5): fewer than 230 has probability below 1e-9. */
	cr_assert_geq(counts[0][4], 230, "the updated window was drawn %" PRIu64 " times of 256",
		      counts[0][4]);
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
}

Test(prio_windows, after_close_each_window_is_taken_once_then_end_of_data)
{
	struct cistern *c = seg_create("pw-close", pw_cfg(32, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	for (uint32_t t = 0; t < 6; t++)
		put_step(c, &w, 0, t, 0, 1 + t);
	cr_assert_eq(cistern_close_reception(c), 0);
	uint32_t vals[2 * 3];
	struct cistern_meta meta[2 * 3];
	int total = 0, got;
	while ((got = cistern_get_prioritized_windows(c, vals, 4, 2, 3, 1, NULL, meta, NULL, NULL,
						      1000)) > 0) {
		for (int i = 0; i < got; i++)
			cr_assert_eq(window_problem(&vals[i * 3], &meta[i * 3], 3, 1), 0);
		total += got;
	}
	cr_assert_eq(got, CISTERN_EOD, "%s", cistern_strerror(got));
	/* Six steps hold two disjoint windows of 3 at most; at least one is taken. */
	cr_assert(total >= 1 && total <= 2, "%d windows", total);
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
}

Test(prio_windows, a_reader_killed_holding_a_window_leaves_no_pin_behind)
{
	struct cistern *c = seg_create("pw-kill", pw_cfg(3, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	for (uint32_t t = 0; t < 3; t++)
		put_step(c, &w, 0, t, 0, 1);
	pid_t pid = spawn_window_holder(seg_name_of(c), 3);
	cr_assert_gt(pid, 0, "the reader did not start");
	uint32_t v = 7;
	struct cistern_meta m = {.sim_id = 1, .time_step = 0};
	cr_assert_eq(cistern_put_prioritized(c, &v, 4, &m, 1, 0), -EAGAIN,
		     "every sample is pinned by the window");
	kill_and_reap(pid);
	/* The dead reader's reads do not count: another reader reads the window. */
	uint32_t vals[3];
	cr_assert_eq(
		cistern_get_prioritized_windows(c, vals, 4, 1, 3, 1, NULL, NULL, NULL, NULL, 5000),
		1);
	/* A waiting producer reclaims the dead reader's pins; the seen samples can go. */
	int r = cistern_put_prioritized(c, &v, 4, &m, 1, 5000);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	uint64_t where = 0;
	cr_assert_eq(cistern__prio_check(c, &where), 0, "node %" PRIu64 " disagrees", where);
}

Test(prio_windows, a_window_taken_after_close_by_a_killed_reader_is_not_lost)
{
	struct cistern *c = seg_create("pw-kill-closed", pw_cfg(8, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	for (uint32_t t = 0; t < 3; t++)
		put_step(c, &w, 0, t, 0, 1);
	cr_assert_eq(cistern_close_reception(c), 0);
	pid_t pid = spawn_window_holder(seg_name_of(c), 3);
	cr_assert_gt(pid, 0, "the reader did not start");
	kill_and_reap(pid);
	uint32_t vals[3];
	struct cistern_meta meta[3];
	int r = cistern_get_prioritized_windows(c, vals, 4, 1, 3, 1, NULL, meta, NULL, NULL, 5000);
	cr_assert_eq(r, 1, "the dead reader's window comes back: %s", cistern_strerror(r));
	cr_assert_eq(window_problem(vals, meta, 3, 1), 0);
	cr_assert_eq(
		cistern_get_prioritized_windows(c, vals, 4, 1, 3, 1, NULL, NULL, NULL, NULL, 1000),
		CISTERN_EOD);
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
}

/*
 * Fragments shorter than a window can never be read by a reader of
 * windows: once such a reader waited, a producer stuck on a full buffer of
 * unseen samples evicts one of them (counted unseen) rather than wait.
 */
Test(prio_windows, fragments_no_window_can_hold_are_evicted_once_a_reader_waited)
{
	struct cistern *c = seg_create("pw-orphan", pw_cfg(4, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	put_step(c, &w, 0, 0, 0, 1);
	put_step(c, &w, 0, 1, 0, 1);
	put_step(c, &w, 1, 0, 0, 1);
	put_step(c, &w, 1, 1, 0, 1);
	uint32_t v = 9;
	struct cistern_meta m = {.sim_id = 2, .time_step = 0};
	cr_assert_eq(cistern_put_prioritized(c, &v, 4, &m, 1, 0), -EAGAIN,
		     "nothing was read and no window reader waited: the put waits");
	uint32_t vals[3];
	cr_assert_eq(
		cistern_get_prioritized_windows(c, vals, 4, 1, 3, 1, NULL, NULL, NULL, NULL, 0),
		-EAGAIN);
	cr_assert_eq(cistern_put_prioritized(c, &v, 4, &m, 1, 0), 0,
		     "no window of 3 can form: a fragment goes");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.evicted_unseen, 1);
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
}

/* A restore rebuilds the (sim_id, time_step) table from the samples' keys. */
Test(prio_windows, a_restored_segment_reads_windows)
{
	struct cistern *c = seg_create("pw-dump", pw_cfg(8, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	for (uint32_t t = 0; t < 3; t++)
		put_step(c, &w, 1, t, 0, 1);
	const char *path = seg_dump_path("pw-dump");
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	const char *back = seg_name("pw-undump");
	int r = cistern_restore(path, back, NULL, NULL, NULL);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	struct cistern *h;
	cr_assert_eq(cistern_attach(back, &h), 0);
	seg_keep(back, h);
	cr_assert_eq(cistern__prio_check(h, NULL), 0);
	uint32_t vals[3];
	struct cistern_meta meta[3];
	r = cistern_get_prioritized_windows(h, vals, 4, 1, 3, 1, NULL, meta, NULL, NULL, 0);
	cr_assert_eq(r, 1, "%s", cistern_strerror(r));
	cr_assert_eq(window_problem(vals, meta, 3, 1), 0);
	cr_assert_eq(meta[0].sim_id, 1);
}

/* A dump keeps the end-of-episode marks, so restored windows still stop at them. */
Test(prio_windows, a_restored_segment_keeps_its_ends_of_episode)
{
	struct cistern *c = seg_create("pw-dump-eoe", pw_cfg(8, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	/* Episodes 0..1 and 2..3: windows of 2 only, never one of 3. */
	for (uint32_t t = 0; t < 4; t++)
		put_step(c, &w, 1, t, t % 2 ? END : 0, 1);
	const char *path = seg_dump_path("pw-dump-eoe");
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	const char *back = seg_name("pw-undump-eoe");
	int r = cistern_restore(path, back, NULL, NULL, NULL);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	struct cistern *h;
	cr_assert_eq(cistern_attach(back, &h), 0);
	seg_keep(back, h);
	uint32_t vals[3];
	struct cistern_meta meta[3];
	r = cistern_get_prioritized_windows(h, vals, 4, 1, 3, 1, NULL, meta, NULL, NULL, 0);
	cr_assert_eq(r, -EAGAIN, "a restored window of 3 crossed an end: %s", cistern_strerror(r));
	r = cistern_get_prioritized_windows(h, vals, 4, 1, 2, 1, NULL, meta, NULL, NULL, 0);
	cr_assert_eq(r, 1, "%s", cistern_strerror(r));
	cr_assert_eq(meta[1].flags, END, "the window's last member lost its mark");
	cr_assert_eq(meta[0].time_step % 2, 0, "a window of 2 began mid-episode");
}

Test(prio_windows, a_key_outside_the_table_is_refused)
{
	struct cistern *c = seg_create("pw-range", pw_cfg(8, 0.4));
	uint32_t v = 1;
	struct cistern_meta m = {.sim_id = SIMS, .time_step = 0};
	cr_assert_eq(cistern_put_prioritized(c, &v, 4, &m, 1, 0), -ERANGE);
	m = (struct cistern_meta){.sim_id = 0, .time_step = STEPS};
	cr_assert_eq(cistern_put_prioritized(c, &v, 4, &m, 1, 0), -ERANGE);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 0);
}

Test(prio_windows, windows_are_refused_without_a_sweep_size_and_out_of_shape)
{
	struct cistern_config cfg = pw_cfg(8, 0.4);
	cfg.sweep_size = 0;
	cfg.nb_time_steps = 0;
	struct cistern *c = seg_create("pw-none", cfg);
	uint32_t v = 1;
	cr_assert_eq(cistern_put_prioritized(c, &v, 4, NULL, 1, 0), 0);
	uint32_t vals[2];
	cr_assert_eq(
		cistern_get_prioritized_windows(c, vals, 4, 1, 2, 1, NULL, NULL, NULL, NULL, 0),
		-EINVAL);
	struct cistern *d = seg_create("pw-shape", pw_cfg(8, 0.4));
	uint32_t big[9];
	cr_assert_eq(cistern_get_prioritized_windows(d, big, 4, 1, 3, 4, NULL, NULL, NULL, NULL, 0),
		     -EINVAL, "a span of 9 steps is longer than nb_time_steps");
	cr_assert_eq(cistern_get_prioritized_windows(d, big, 4, 1, 2, 0, NULL, NULL, NULL, NULL, 0),
		     -EINVAL);
}

Test(prio_windows, a_sweep_size_needs_two_time_steps)
{
	struct cistern_config cfg = pw_cfg(8, 0.4);
	cfg.nb_time_steps = 1;
	const char *why = cistern_config_problem(&cfg);
	cr_assert_not_null(why);
	cr_assert_not_null(strstr(why, "nb_time_steps"), "%s", why);
}

/* ---- Batches of windows: one hold of the tree's lock for many ------------ */

/* Batches of BIG_BATCH windows: the descents of many chunks, one lock hold per call. */
Test(prio_windows, a_large_batch_of_windows_follows_the_last_members_priority)
{
	struct cistern *c = seg_create("pw-big-chi", pw_cfg(32, 0.4));
	struct world w;
	put_world(c, &w);
	uint64_t counts[SIMS][STEPS] = {{0}};
	count_ends_by(c, 3, 1, 20, BIG_BATCH, counts);
	int df;
	double x = chi2_against(&w, counts, 3, 1, 2, &df);
	cr_assert_eq(df, 12, "13 complete windows");
	cr_assert_lt(x, chi2_critical(df, Z_1E6), "chi-square %.1f >= %.1f", x,
		     chi2_critical(df, Z_1E6));
}

/*
 * Few leaves end a window: samples of large priority that end none make
 * most descents miss, so a batch soon draws from the exact pass. Its
 * windows follow the same law and are whole.
 */
Test(prio_windows, a_batch_drawn_mostly_by_the_exact_pass_follows_the_same_law)
{
	struct cistern *c = seg_create("pw-sparse-chi", pw_cfg(32, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	/* Sim 0: episodes 0..2 and 3..5, whose ends have priorities 1 and 6. */
	for (uint32_t t = 0; t < 6; t++)
		put_step(c, &w, 0, t, t == 2 || t == 5 ? END : 0, t == 5 ? 6 : 1);
	/* Sims 1..3: episodes of one step each, at priority 1000: in no window of 2. */
	for (uint32_t sim = 1; sim < SIMS; sim++)
		for (uint32_t t = 0; t < STEPS; t++)
			put_step(c, &w, sim, t, END, 1000);
	uint64_t counts[SIMS][STEPS] = {{0}};
	count_ends_by(c, 2, 1, 20, 200, counts);
	int df;
	double x = chi2_against(&w, counts, 2, 1, 1, &df);
	cr_assert_eq(df, 3, "4 complete windows of 2");
	cr_assert_lt(x, chi2_critical(df, Z_1E6), "chi-square %.1f >= %.1f", x,
		     chi2_critical(df, Z_1E6));
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
}

/* Episodes of 3 steps in every sim: no window of 2 of a large batch straddles two. */
Test(prio_windows, no_window_of_a_large_batch_crosses_an_end_of_episode)
{
	struct cistern *c = seg_create("pw-big-eoe", pw_cfg(32, 0.4));
	struct world w;
	memset(&w, 0, sizeof(w));
	for (uint32_t sim = 0; sim < SIMS; sim++)
		for (uint32_t t = 0; t < STEPS; t++)
			put_step(c, &w, sim, t, t % 3 == 2 ? END : 0, 1 + (sim + t) % 7);
	uint64_t counts[SIMS][STEPS] = {{0}};
	/* count_ends_by() checks every window; no cell that ends none may be counted. */
	count_ends_by(c, 2, 1, 5, BIG_BATCH, counts);
	for (uint32_t sim = 0; sim < SIMS; sim++)
		for (uint32_t t = 0; t < STEPS; t++)
			if (!ends_window(&w, sim, t, 2, 1))
				cr_assert_eq(counts[sim][t], 0, "a window ended at (%u, %u)", sim,
					     t);
			else
				cr_assert_gt(counts[sim][t], 0, "(%u, %u) never ended a window",
					     sim, t);
}

Test(prio_windows, weights_of_a_large_batch_match_the_formula)
{
	struct cistern *c = seg_create("pw-big-w", pw_cfg(32, 0.6));
	struct world w;
	put_world(c, &w);
	static uint32_t vals[BIG_BATCH * 3];
	static struct cistern_meta meta[BIG_BATCH * 3];
	static double weight[BIG_BATCH];
	static uint64_t ids[BIG_BATCH];
	int got = cistern_get_prioritized_windows(c, vals, 4, BIG_BATCH, 3, 1, NULL, meta, ids,
						  weight, 0);
	cr_assert_eq(got, BIG_BATCH, "%s", cistern_strerror(got));
	for (int i = 0; i < got; i++) {
		const struct cistern_meta *end = &meta[i * 3 + 2];
		double want = weight_of(&w, end->sim_id, end->time_step, 0.6);
		cr_assert(fabs(weight[i] - want) <= 1e-5 * want,
			  "window %d ending at (%u, %u): weight %.9g, formula %.9g", i, end->sim_id,
			  end->time_step, weight[i], want);
	}
	/* Each id names its window's last member: an update by it applies. */
	double q = 2;
	cr_assert_eq(cistern_update_priorities(c, ids, &q, 1), 1);
}

/* Sim 0: four episodes of 2 steps; sim 1: one. Five disjoint windows of 2. */
static void put_five_windows(struct cistern *c, struct world *w)
{
	memset(w, 0, sizeof(*w));
	for (uint32_t t = 0; t < STEPS; t++)
		put_step(c, w, 0, t, t % 2 ? END : 0, 1 + t);
	for (uint32_t t = 0; t < 2; t++)
		put_step(c, w, 1, t, t % 2 ? END : 0, 3);
}

Test(prio_windows, while_open_a_batch_larger_than_the_windows_held_repeats_them)
{
	struct cistern *c = seg_create("pw-more-open", pw_cfg(16, 0.4));
	struct world w;
	put_five_windows(c, &w);
	uint32_t vals[64 * 2];
	struct cistern_meta meta[64 * 2];
	int got = cistern_get_prioritized_windows(c, vals, 4, 64, 2, 1, NULL, meta, NULL, NULL, 0);
	cr_assert_eq(got, 64, "draws are with replacement while open: %s", cistern_strerror(got));
	for (int i = 0; i < got; i++)
		cr_assert_eq(window_problem(&vals[i * 2], &meta[i * 2], 2, 1), 0, "window %d", i);
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
}

Test(prio_windows, after_close_a_batch_larger_than_the_windows_held_takes_each_once)
{
	struct cistern *c = seg_create("pw-more-closed", pw_cfg(16, 0.4));
	struct world w;
	put_five_windows(c, &w);
	cr_assert_eq(cistern_close_reception(c), 0);
	uint32_t vals[64 * 2];
	struct cistern_meta meta[64 * 2];
	int got = cistern_get_prioritized_windows(c, vals, 4, 64, 2, 1, NULL, meta, NULL, NULL, 0);
	cr_assert_eq(got, 5, "the five windows, each once: %s", cistern_strerror(got));
	bool seen[SIMS][STEPS] = {{false}};
	for (int i = 0; i < got; i++) {
		cr_assert_eq(window_problem(&vals[i * 2], &meta[i * 2], 2, 1), 0, "window %d", i);
		for (int k = 0; k < 2; k++) {
			const struct cistern_meta *m = &meta[i * 2 + k];
			cr_assert_not(seen[m->sim_id][m->time_step], "(%u, %u) taken twice",
				      m->sim_id, m->time_step);
			seen[m->sim_id][m->time_step] = true;
		}
	}
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
	cr_assert_eq(
		cistern_get_prioritized_windows(c, vals, 4, 64, 2, 1, NULL, meta, NULL, NULL, 1000),
		CISTERN_EOD);
}

/*
 * With max_times_sampled 1 a member read by one window of a batch is spent:
 * no later window of the batch reads it again, and the leaves of the
 * spent members leave the tree.
 */
Test(prio_windows, a_batch_never_reads_a_member_spent_earlier_in_it)
{
	struct cistern_config cfg = pw_cfg(16, 0.4);
	cfg.max_times_sampled = 1;
	struct cistern *c = seg_create("pw-spent", cfg);
	struct world w;
	memset(&w, 0, sizeof(w));
	/* One episode of 8 steps: 7 windows of 2, overlapping. */
	for (uint32_t t = 0; t < STEPS; t++)
		put_step(c, &w, 0, t, 0, 1 + t);
	uint32_t vals[64 * 2];
	struct cistern_meta meta[64 * 2];
	int got = cistern_get_prioritized_windows(c, vals, 4, 64, 2, 1, NULL, meta, NULL, NULL, 0);
	cr_assert(got >= 1 && got <= 4, "at most 4 windows of 2 share no member: %s",
		  got < 0 ? cistern_strerror(got) : "");
	bool read[STEPS] = {false};
	for (int i = 0; i < got; i++) {
		cr_assert_eq(window_problem(&vals[i * 2], &meta[i * 2], 2, 1), 0, "window %d", i);
		for (int k = 0; k < 2; k++) {
			uint32_t t = meta[i * 2 + k].time_step;
			cr_assert_not(read[t], "step %u read twice", t);
			read[t] = true;
		}
	}
	uint64_t where = 0;
	cr_assert_eq(cistern__prio_check(c, &where), 0, "node %" PRIu64 " disagrees", where);
}

/* The reads counted on the slots now, and whether any slot is pinned. */
static uint64_t seen_total(struct cistern *c, bool *pinned)
{
	uint64_t seen = 0;
	*pinned = false;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		seen += atomic_load(&cistern__slotmeta(c, i)->seen);
		*pinned |= atomic_load(&cistern__slotmeta(c, i)->pins) != 0;
	}
	return seen;
}

/*
 * A window with a member longer than stride ends the batch before it: the
 * windows before it are read, it and those after it go back unread, and
 * nothing stays pinned. As the first window, the call is -EMSGSIZE.
 */
Test(prio_windows, a_misfit_window_ends_a_batch_and_goes_back_unread_with_those_after)
{
	struct cistern *c = seg_create("pw-misfit", pw_cfg(16, 0.4));
	/* Sim 0: a window of 2 of 2-byte samples; sim 1: one whose last member has 4 bytes. */
	const uint32_t len[2][2] = {{2, 2}, {2, 4}};
	for (uint32_t sim = 0; sim < 2; sim++)
		for (uint32_t t = 0; t < 2; t++) {
			uint32_t v = value_of(sim, t);
			struct cistern_meta m = {.sim_id = sim, .time_step = t};
			cr_assert_eq(cistern_put_prioritized(c, &v, len[sim][t], &m, 1, 0), 0);
		}
	uint32_t vals[64 * 2];
	struct cistern_meta meta[64 * 2];
	uint64_t read = 0;
	int refused = 0, short_batches = 0;
	for (int round = 0; round < 20; round++) {
		int got = cistern_get_prioritized_windows(c, vals, 2, 64, 2, 1, NULL, meta, NULL,
							  NULL, 0);
		if (got == -EMSGSIZE) {
			refused++;
		} else {
			cr_assert(got > 0 && got < 64, "round %d: %s", round,
				  cistern_strerror(got));
			short_batches++;
			for (int i = 0; i < got; i++)
				cr_assert_eq(meta[i * 2].sim_id, 0, "the misfit window was read");
			read += 2 * (uint64_t)got;
		}
		bool pinned;
		cr_assert_eq(seen_total(c, &pinned), read, "round %d: reads of windows not read",
			     round);
		cr_assert_not(pinned, "round %d: a window given back is still pinned", round);
	}
	cr_assert(refused > 0 && short_batches > 0, "%d refused, %d short", refused, short_batches);
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
}

/*
 * A reader killed at a random moment while it draws large batches of
 * windows and updates their priorities: often inside the tree's lock, mid
 * batch, with some members pinned. The next locker rebuilds the tree, the
 * reclaim unpins the members, and the tree agrees with the slots.
 */
#define KB_SIMS 64
#define KB_STEPS 64
#define KB_WINDOWS 1024

static void batch_reader(const char *name, int ready)
{
	struct cistern *h;
	if (cistern_attach(name, &h) < 0)
		_exit(1);
	static uint32_t vals[KB_WINDOWS * 4];
	static uint64_t ids[KB_WINDOWS];
	static double q[KB_WINDOWS];
	for (size_t i = 0; i < KB_WINDOWS; i++)
		q[i] = 1 + (double)(i % 13);
	say_ready(ready);
	for (;;) {
		int got = cistern_get_prioritized_windows(h, vals, 4, KB_WINDOWS, 4, 1, NULL, NULL,
							  ids, NULL, 1000);
		if (got < 0 || cistern_update_priorities(h, ids, q, (size_t)got) < 0)
			_exit(2);
	}
}

Test(prio_windows, a_reader_killed_mid_batch_leaves_a_consistent_tree, .timeout = 120)
{
	struct cistern_config cfg = pw_cfg(KB_SIMS * KB_STEPS, 0.4);
	cfg.sweep_size = KB_SIMS;
	cfg.nb_time_steps = KB_STEPS;
	struct cistern *c = seg_create("pw-kill-batch", cfg);
	for (uint32_t sim = 0; sim < KB_SIMS; sim++)
		for (uint32_t t = 0; t < KB_STEPS; t++) {
			uint32_t v = value_of(sim, t);
			struct cistern_meta m = {
				.sim_id = sim, .time_step = t, .flags = t % 16 == 15 ? END : 0};
			cr_assert_eq(cistern_put_prioritized(c, &v, 4, &m, 1 + t % 5, 0), 0);
		}
	struct cistern_rng rng;
	cistern__rng_seed(&rng, 0x6b1115);
	struct cistern_prio_info info = {0};
	int round = 0;
	/* Until a kill landed inside the lock, and at least four rounds. */
	for (; round < 60 && (round < 4 || info.rebuilds == 0); round++) {
		int p[2];
		cr_assert_eq(pipe(p), 0);
		pid_t pid = fork_child();
		if (pid == 0) {
			close(p[0]);
			batch_reader(seg_name_of(c), p[1]);
		}
		cr_assert_gt(await_ready(p, pid), 0, "the reader did not start");
		usleep((useconds_t)(2000 + cistern__rng_below(&rng, 20000)));
		kill_and_reap(pid);
		/* The next attach reclaims the dead reader. */
		struct cistern *h;
		cr_assert_eq(cistern_attach(seg_name_of(c), &h), 0);
		uint64_t where = 0;
		cr_assert_eq(cistern__prio_check(h, &where), 0,
			     "round %d: node %" PRIu64 " disagrees with the slots", round, where);
		bool pinned;
		seen_total(h, &pinned);
		cr_assert_not(pinned, "round %d: the dead reader left a pin", round);
		cr_assert_eq(cistern_prio_info_get(h, &info), 0);
		cr_assert_eq(cistern_detach(h), 0);
	}
	cr_log_info("%d kills, %" PRIu64 " inside the lock", round, info.rebuilds);
	cr_assert_gt(info.rebuilds, 0, "no kill in %d landed inside the lock", round);
	/* The windows are all still there, whole. */
	static uint32_t vals[KB_WINDOWS * 4];
	static struct cistern_meta meta[KB_WINDOWS * 4];
	int got = cistern_get_prioritized_windows(c, vals, 4, KB_WINDOWS, 4, 1, NULL, meta, NULL,
						  NULL, 0);
	cr_assert_eq(got, KB_WINDOWS, "%s", cistern_strerror(got));
	for (int i = 0; i < got; i++)
		cr_assert_eq(window_problem(&vals[i * 4], &meta[i * 4], 4, 1), 0, "window %d", i);
}

/*
 * Producers running episodes of their own sims with priorities and episode
 * ends, and readers drawing windows by priority and sending priorities
 * back, all forked, one reader killed while it reads. Every reader that
 * lives sees only whole windows with weights in (0, 1], and the tree agrees
 * with the slots at the end.
 */
#define MP_PRODUCERS 3
#define MP_READERS 3
#define MP_EPISODES 30

/* Episodes of 3 to 8 steps; time steps restart at 0 in each. */
static uint32_t mp_episode_len(uint32_t p, uint32_t e)
{
	return 3 + (p * 5 + e * 3) % 6;
}

static void mp_producer(const char *name, uint32_t p)
{
	struct cistern *h;
	if (cistern_attach(name, &h) < 0)
		_exit(1);
	for (uint32_t e = 0; e < MP_EPISODES; e++) {
		uint32_t len = mp_episode_len(p, e);
		for (uint32_t t = 0; t < len; t++) {
			uint32_t v = value_of(p, t);
			struct cistern_meta m = {
				.sim_id = p, .time_step = t, .flags = t + 1 == len ? END : 0};
			if (cistern_put_prioritized(h, &v, 4, &m, 1 + (e + t) % 5, 10000) < 0)
				_exit(2);
		}
	}
	cistern_detach(h);
	_exit(0);
}

static void mp_reader(const char *name, uint32_t r)
{
	struct cistern *h;
	if (cistern_attach(name, &h) < 0)
		_exit(1);
	/* Spans of 2 or 3 steps: every step of an episode of 3 or more lies in a window. */
	uint32_t length = 2 + r % 2, step = 1 + (r == 2);
	uint32_t vals[4 * 3];
	struct cistern_meta meta[4 * 3];
	uint64_t ids[4];
	double weights[4];
	for (;;) {
		int x = cistern_get_prioritized_windows(h, vals, 4, 4, length, step, NULL, meta,
							ids, weights, 10000);
		if (x == CISTERN_EOD)
			break;
		if (x < 0)
			_exit(2);
		for (uint32_t i = 0; i < (uint32_t)x; i++) {
			if (window_problem(&vals[i * length], &meta[i * length], length, step) != 0)
				_exit(3);
			if (!(weights[i] > 0 && weights[i] <= 1))
				_exit(4);
			double q = (double)(meta[i * length].time_step % 4);
			if (cistern_update_priorities(h, &ids[i], &q, 1) < 0)
				_exit(5);
		}
	}
	cistern_detach(h);
	_exit(0);
}

Test(prio_windows, forked_producers_and_readers_see_only_whole_windows, .timeout = 120)
{
	struct cistern *c = seg_create("pw-mp", pw_cfg(32, 0.4));
	run_forked_producers_and_readers(c, MP_PRODUCERS, mp_producer, MP_READERS, mp_reader);
	uint64_t puts = 0;
	for (uint32_t p = 0; p < MP_PRODUCERS; p++)
		for (uint32_t e = 0; e < MP_EPISODES; e++)
			puts += mp_episode_len(p, e);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, puts, "every producer put all its steps");
	cr_assert_gt(st.gets, 0);
	uint64_t where = 0;
	cr_assert_eq(cistern__prio_check(c, &where), 0, "node %" PRIu64 " disagrees", where);
}
