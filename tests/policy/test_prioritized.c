/* SPDX-License-Identifier: MIT */
/*
 * test_prioritized.c - the prioritized policy (docs/protocol/priorities.md):
 * draws by priority^alpha, importance weights, updates by id, stale ids,
 * refused priorities and parameters, draining after close, and its sum tree
 * after producers and learners are killed at random moments.
 *
 * The distribution tests use fixed seeds, so they are reproducible, and
 * reject at a false-failure rate of 1e-6: the statistic must stay below the
 * chi-square quantile at 1 - 1e-6 (Wilson-Hilferty approximation).
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>

#include "helpers.h"
#include "cistern/admin.h"
#include "core/handle.h"
#include "policy/reservoir/prioritized.h"

TestSuite(prioritized, .fini = seg_fini);

#define SEED 0x9e1044

static double chi2(const uint64_t *obs, const double *expected, int k)
{
	double x = 0;
	for (int i = 0; i < k; i++) {
		double d = (double)obs[i] - expected[i];
		x += d * d / expected[i];
	}
	return x;
}

static struct cistern_config prio_cfg(uint64_t slots, uint64_t watermark, double alpha, double beta,
				      double eps)
{
	return (struct cistern_config){
		.policy = CISTERN_PRIORITIZED,
		.slot_count = slots,
		.slot_size = 64,
		.watermark = watermark,
		.seed = SEED,
		.alpha = alpha,
		.beta = beta,
		.epsilon = eps,
	};
}

/* Put sample i (sim_id i, a payload of i's) with priority q[i]. */
static void put_all(struct cistern *c, const double *q, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint8_t buf[16];
		fill_payload(buf, sizeof(buf), i, 0);
		struct cistern_meta m = {.sim_id = i};
		int r = cistern_put_prioritized(c, buf, sizeof(buf), &m, q[i], 0);
		cr_assert_eq(r, 0, "put %u: %s", i, cistern_strerror(r));
	}
}

/* Draw `rounds` batches of 256, counting draws by sim_id (k of them). */
static void count_draws(struct cistern *c, uint64_t *counts, uint32_t k, int rounds)
{
	static uint8_t buf[256 * 64];
	struct cistern_meta meta[256];
	for (int r = 0; r < rounds; r++) {
		int got = cistern_get_prioritized(c, buf, 64, 256, NULL, meta, NULL, NULL, 0);
		cr_assert_eq(got, 256, "batch %d: %s", r, cistern_strerror(got));
		for (int i = 0; i < got; i++) {
			cr_assert_lt(meta[i].sim_id, k);
			counts[meta[i].sim_id]++;
		}
	}
}

#define K 16
#define ROUNDS 400

static void expected_by_priority(const double *q, double alpha, double eps, double total, double *e)
{
	double sum = 0;
	for (int i = 0; i < K; i++)
		sum += pow(q[i] + eps, alpha);
	for (int i = 0; i < K; i++)
		e[i] = total * pow(q[i] + eps, alpha) / sum;
}

static const double spread[K] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 30, 50};

Test(prioritized, draws_follow_priority_to_the_alpha)
{
	struct cistern *c = seg_create("p-chi", prio_cfg(K, K, 0.7, 0.4, 0.5));
	put_all(c, spread, K);
	uint64_t counts[K] = {0};
	count_draws(c, counts, K, ROUNDS);
	double e[K];
	expected_by_priority(spread, 0.7, 0.5, 256.0 * ROUNDS, e);
	double x = chi2(counts, e, K), crit = chi2_critical(K - 1, Z_1E6);
	cr_assert_lt(x, crit, "chi-square %.1f >= %.1f against p^alpha", x, crit);
}

/* The same counts are far from uniform: the test above can tell. */
Test(prioritized, the_chi_square_test_rejects_uniform_draws_of_the_same_priorities)
{
	struct cistern *c = seg_create("p-chi-u", prio_cfg(K, K, 0.7, 0.4, 0.5));
	put_all(c, spread, K);
	uint64_t counts[K] = {0};
	count_draws(c, counts, K, ROUNDS);
	double e[K];
	for (int i = 0; i < K; i++)
		e[i] = 256.0 * ROUNDS / K;
	cr_assert_gt(chi2(counts, e, K), chi2_critical(K - 1, Z_1E6));
}

Test(prioritized, alpha_zero_draws_uniformly)
{
	struct cistern *c = seg_create("p-chi-0", prio_cfg(K, K, 0, 0, 0));
	put_all(c, spread, K);
	uint64_t counts[K] = {0};
	count_draws(c, counts, K, ROUNDS);
	double e[K];
	for (int i = 0; i < K; i++)
		e[i] = 256.0 * ROUNDS / K;
	double x = chi2(counts, e, K), crit = chi2_critical(K - 1, Z_1E6);
	cr_assert_lt(x, crit, "chi-square %.1f >= %.1f against uniform", x, crit);
}

/* w_i = (N P(i))^-beta / max_j (N P(j))^-beta, from the priorities put. */
static double weight_of(const double *q, int k, int i, double alpha, double beta, double eps)
{
	double sum = 0, pmin = INFINITY;
	for (int j = 0; j < k; j++) {
		double p = pow(q[j] + eps, alpha);
		sum += p;
		pmin = fmin(pmin, p);
	}
	double wi = pow(k * pow(q[i] + eps, alpha) / sum, -beta);
	double wmax = pow(k * pmin / sum, -beta);
	return wi / wmax;
}

static void check_weights(struct cistern *c, const double *q, int k, double alpha, double beta,
			  double eps)
{
	uint8_t buf[64 * 64];
	struct cistern_meta meta[64];
	double w[64];
	uint64_t ids[64];
	int got = cistern_get_prioritized(c, buf, 64, 64, NULL, meta, ids, w, 0);
	cr_assert_eq(got, 64, "%s", cistern_strerror(got));
	for (int i = 0; i < got; i++) {
		double want = weight_of(q, k, (int)meta[i].sim_id, alpha, beta, eps);
		cr_assert(fabs(w[i] - want) <= 1e-5 * want, "sample %u: weight %.9g, formula %.9g",
			  meta[i].sim_id, w[i], want);
	}
}

Test(prioritized, weights_match_the_formula)
{
	const double q[8] = {0.1, 0.5, 1, 2, 3, 5, 8, 13};
	struct cistern *c = seg_create("p-w", prio_cfg(8, 8, 0.6, 0.4, 0.01));
	put_all(c, q, 8);
	check_weights(c, q, 8, 0.6, 0.4, 0.01);
}

Test(prioritized, a_new_beta_reaches_the_weights)
{
	const double q[8] = {0.1, 0.5, 1, 2, 3, 5, 8, 13};
	struct cistern *c = seg_create("p-beta", prio_cfg(8, 8, 0.6, 0.4, 0.01));
	put_all(c, q, 8);
	cr_assert_eq(cistern_set_beta(c, 1.0), 0);
	check_weights(c, q, 8, 0.6, 1.0, 0.01);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert_eq(info.beta, 1.0);
	cr_assert_eq(cistern_set_beta(c, 1.5), -EINVAL);
	cr_assert_eq(cistern_set_beta(c, NAN), -EINVAL);
}

/* Draw until every one of the n samples was drawn; their ids by sim_id. */
static void ids_of_all(struct cistern *c, uint32_t n, uint64_t *ids_by_sim)
{
	uint8_t buf[16 * 64];
	struct cistern_meta meta[16];
	uint64_t ids[16];
	uint32_t seen = 0;
	bool have[64] = {false};
	for (int tries = 0; tries < 10000 && seen < n; tries++) {
		int got = cistern_get_prioritized(c, buf, 64, 16, NULL, meta, ids, NULL, 0);
		cr_assert_eq(got, 16, "%s", cistern_strerror(got));
		for (int i = 0; i < got; i++) {
			uint32_t s = meta[i].sim_id;
			cr_assert_lt(s, 64);
			if (!have[s]) {
				have[s] = true;
				ids_by_sim[s] = ids[i];
				seen++;
			}
		}
	}
	cr_assert_eq(seen, n, "drew %u of %u samples", seen, n);
}

Test(prioritized, an_update_changes_what_is_drawn)
{
	const double q[4] = {1, 1, 1, 1};
	struct cistern *c = seg_create("p-upd", prio_cfg(4, 4, 1, 0, 0));
	put_all(c, q, 4);
	uint64_t ids[4];
	ids_of_all(c, 4, ids);
	double big = 1000;
	cr_assert_eq(cistern_update_priorities(c, &ids[2], &big, 1), 1);
	uint64_t counts[4] = {0};
	uint8_t buf[256 * 64];
	struct cistern_meta meta[256];
	int got = cistern_get_prioritized(c, buf, 64, 256, NULL, meta, NULL, NULL, 0);
	cr_assert_eq(got, 256);
	for (int i = 0; i < got; i++)
		counts[meta[i].sim_id]++;
	/* Expected 256 * 1000 / 1003: fewer than 245 has probability below 1e-9. */
	cr_assert_geq(counts[2], 245, "the updated sample was drawn %" PRIu64 " times of 256",
		      counts[2]);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert_eq(info.updates, 1);
	cr_assert_eq(info.max_priority, 1000);
	cr_assert(fabs(info.total - 1003) < 1e-3, "total %g", info.total);
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
}

Test(prioritized, ids_of_evicted_samples_are_ignored_and_counted)
{
	const double q[4] = {1, 2, 3, 4};
	struct cistern *c = seg_create("p-stale", prio_cfg(4, 1, 1, 0, 0));
	put_all(c, q, 4);
	uint64_t old[4];
	ids_of_all(c, 4, old);
	/* Four more puts evict the four samples read (the new ones are unread). */
	put_all(c, q, 4);
	double p[6] = {9, 9, 9, 9, 9, 9};
	uint64_t ids[6] = {old[0], old[1], old[2], old[3], CISTERN__PRIO_SLOT_MASK, 4};
	cr_assert_eq(cistern_update_priorities(c, ids, p, 6), 0);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert_eq(info.stale_updates, 6);
	cr_assert_eq(info.updates, 0);
	cr_assert(fabs(info.total - 10) < 1e-3, "the tree changed: total %g", info.total);
}

/*
 * Two segments filled alike hold the same sample ids in the same slots: an
 * id read from one must not reach the other's sample.
 */
Test(prioritized, ids_from_another_segment_are_ignored_and_counted)
{
	const double q[4] = {1, 2, 3, 4};
	struct cistern *a = seg_create("p-ours", prio_cfg(4, 1, 1, 0, 0));
	struct cistern *b = seg_create("p-theirs", prio_cfg(4, 1, 1, 0, 0));
	put_all(a, q, 4);
	put_all(b, q, 4);
	uint64_t ours[4], theirs[4];
	ids_of_all(a, 4, ours);
	ids_of_all(b, 4, theirs);
	double p[4] = {9, 9, 9, 9};
	cr_assert_eq(cistern_update_priorities(a, theirs, p, 4), 0);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(a, &info), 0);
	cr_assert_eq(info.stale_updates, 4);
	cr_assert(fabs(info.total - 10) < 1e-3, "the tree changed: total %g", info.total);
	/* Its own ids still apply. */
	cr_assert_eq(cistern_update_priorities(a, ours, p, 4), 4);
}

Test(prioritized, an_id_of_a_sample_still_held_applies_among_stale_ones)
{
	const double q[2] = {1, 1};
	struct cistern *c = seg_create("p-mixed", prio_cfg(2, 2, 1, 0, 0));
	put_all(c, q, 2);
	uint64_t ids[2];
	ids_of_all(c, 2, ids);
	uint64_t batch[3] = {ids[0], ids[1] ^ (UINT64_C(1) << 40), ids[1]};
	double p[3] = {3, 5, 7};
	cr_assert_eq(cistern_update_priorities(c, batch, p, 3), 2);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert_eq(info.stale_updates, 1);
	cr_assert(fabs(info.total - 10) < 1e-3, "total %g", info.total);
}

Test(prioritized, nan_negative_and_infinite_priorities_are_refused)
{
	const double q[2] = {1, 2};
	struct cistern *c = seg_create("p-bad", prio_cfg(4, 2, 1, 0, 0));
	put_all(c, q, 2);
	const double bad[3] = {NAN, -1, INFINITY};
	uint8_t b[4] = {0};
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cistern_put_prioritized(c, b, 4, NULL, bad[i], 0), -EINVAL);
	uint64_t ids[2];
	ids_of_all(c, 2, ids);
	for (int i = 0; i < 3; i++) {
		double p[2] = {5, bad[i]};
		cr_assert_eq(cistern_update_priorities(c, ids, p, 2), -EINVAL);
	}
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert_eq(info.updates, 0, "nothing of a refused batch is applied");
	cr_assert(fabs(info.total - 3) < 1e-3, "total %g", info.total);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.population, 2);
}

Test(prioritized, a_sample_of_priority_zero_can_still_be_drawn)
{
	const double q[1] = {0};
	struct cistern *c = seg_create("p-zero", prio_cfg(2, 1, 1, 1, 0));
	put_all(c, q, 1);
	uint8_t buf[64];
	double w;
	uint64_t id;
	cr_assert_eq(cistern_get_prioritized(c, buf, 64, 1, NULL, NULL, &id, &w, 0), 1);
	cr_assert_eq(w, 1.0);
	cr_assert_lt(id & CISTERN__PRIO_SLOT_MASK, 2);
}

Test(prioritized, a_put_without_a_priority_gets_the_largest_seen)
{
	struct cistern *c = seg_create("p-max", prio_cfg(4, 2, 1, 0, 0));
	uint8_t b[4] = {0};
	cr_assert_eq(cistern_put_prioritized(c, b, 4, NULL, 5, 0), 0);
	cr_assert_eq(cistern_put(c, b, 4, NULL, 0), 0);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert_eq(info.max_priority, 5);
	cr_assert(fabs(info.total - 10) < 1e-3, "total %g", info.total);
}

Test(prioritized, the_first_put_without_a_priority_gets_one)
{
	struct cistern *c = seg_create("p-first", prio_cfg(4, 1, 1, 0, 0));
	uint8_t b[4] = {0};
	cr_assert_eq(cistern_put(c, b, 4, NULL, 0), 0);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert(fabs(info.total - 1) < 1e-6, "total %g", info.total);
}

Test(prioritized, bad_alpha_beta_and_epsilon_are_named)
{
	struct cistern_config cfg = prio_cfg(4, 1, NAN, 0, 0);
	struct cistern *c = NULL;
	cr_assert_eq(cistern_create(seg_name("p-cfg"), &cfg, &c), -EINVAL);
	cr_assert_str_eq(cistern_config_problem(&cfg), "alpha must be a number from 0 to 8");
	cfg.alpha = 9;
	cr_assert_str_eq(cistern_config_problem(&cfg), "alpha must be a number from 0 to 8");
	cfg.alpha = 1;
	cfg.beta = -0.5;
	cr_assert_str_eq(cistern_config_problem(&cfg), "beta must be a number from 0 to 1");
	cfg.beta = 1;
	cfg.epsilon = INFINITY;
	cr_assert_str_eq(cistern_config_problem(&cfg),
			 "epsilon must be a finite number of at least 0");
	cfg.epsilon = 0;
	cr_assert_null(cistern_config_problem(&cfg));
	struct cistern_config fifo = {.alpha = 0.6};
	cr_assert_str_eq(cistern_config_problem(&fifo),
			 "alpha, beta and epsilon apply to the prioritized policy only");
}

Test(prioritized, the_parameters_come_back_from_config_get)
{
	struct cistern *c = seg_create("p-get", prio_cfg(4, 1, 0.6, 0.4, 1e-6));
	struct cistern_config cfg;
	cr_assert_eq(cistern_config_get(c, &cfg), 0);
	cr_assert_eq(cfg.alpha, 0.6);
	cr_assert_eq(cfg.beta, 0.4);
	cr_assert_eq(cfg.epsilon, 1e-6);
}

Test(prioritized, the_prioritized_calls_refuse_other_policies)
{
	struct cistern *c = seg_create("p-other", (struct cistern_config){.slot_count = 4});
	uint8_t b[4] = {0};
	uint64_t id = 0;
	double q = 1;
	cr_assert_eq(cistern_put_prioritized(c, b, 4, NULL, 1, 0), -EINVAL);
	cr_assert_eq(cistern_get_prioritized(c, b, 4, 1, NULL, NULL, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(cistern_update_priorities(c, &id, &q, 1), -EINVAL);
	cr_assert_eq(cistern_set_beta(c, 0.5), -EINVAL);
}

Test(prioritized, after_close_reads_take_every_sample_once_then_end)
{
	const double q[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct cistern *c = seg_create("p-close", prio_cfg(8, 8, 1, 0, 0));
	put_all(c, q, 8);
	cr_assert_eq(cistern_close_reception(c), 0);
	uint8_t buf[3 * 64];
	struct cistern_meta meta[3];
	bool have[8] = {false};
	int total = 0, got;
	while ((got = cistern_get_prioritized(c, buf, 64, 3, NULL, meta, NULL, NULL, 0)) > 0) {
		for (int i = 0; i < got; i++) {
			cr_assert_not(have[meta[i].sim_id], "sample %u twice", meta[i].sim_id);
			have[meta[i].sim_id] = true;
		}
		total += got;
		cr_assert_eq(cistern__prio_check(c, NULL), 0);
	}
	cr_assert_eq(got, CISTERN_EOD, "%s", cistern_strerror(got));
	cr_assert_eq(total, 8);
}

Test(prioritized, the_general_reads_draw_from_the_tree_too)
{
	const double q[4] = {1, 2, 3, 4};
	struct cistern *c = seg_create("p-gen", prio_cfg(4, 4, 1, 0, 0));
	put_all(c, q, 4);
	uint8_t buf[4 * 64];
	cr_assert_eq(cistern_get_batch(c, buf, 64, 4, NULL, NULL, 0), 4);
	cr_assert_eq(cistern_get(c, buf, 64, NULL, 0), 16);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	cr_assert_eq(cistern_unacquire(c, &s), 0);
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
}

/*
 * A process that dies holding the tree's lock, with a node half written:
 * the next call that takes the lock rebuilds the tree from the slots.
 */
Test(prioritized, a_holder_killed_inside_the_lock_leaves_a_tree_rebuilt)
{
	const double q[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	struct cistern *c = seg_create("p-owner", prio_cfg(16, 1, 1, 0, 0));
	put_all(c, q, 16);
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *h;
		if (cistern_attach(seg_name_of(c), &h) < 0)
			_exit(1);
		pthread_mutex_t *m = (pthread_mutex_t *)(uintptr_t)h->index;
		if (pthread_mutex_lock(m) != 0)
			_exit(2);
		/* The root's sum (node 1, after 16 head entries and 16 of prio[]). */
		atomic_store(&h->index[16 + 16 + 2], 12345);
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	uint64_t where = 0;
	cr_assert_eq(cistern__prio_check(c, &where), 0, "node %" PRIu64 " disagrees", where);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert_eq(info.rebuilds, 1);
	cr_assert(fabs(info.total - 136) < 1e-3, "total %g", info.total);
}

/*
 * After close a read takes its sample out of the tree; a reader that dies
 * holding it gives it back by its reclaim, outside the lock, and the
 * reclaim's pass must give the sample its leaf again.
 */
Test(prioritized, a_sample_a_dead_reader_took_after_close_is_drawable_again)
{
	const double q[4] = {1, 2, 3, 4};
	struct cistern *c = seg_create("p-deadtake", prio_cfg(4, 1, 1, 0, 0));
	put_all(c, q, 4);
	cr_assert_eq(cistern_close_reception(c), 0);
	pid_t pid = spawn_holder(seg_name_of(c), HOLD_SAMPLE);
	cr_assert_gt(pid, 0);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert_lt(info.total, 10 - 0.5, "the taken sample left the tree: total %g", info.total);
	kill_and_reap(pid);
	struct cistern *h;
	cr_assert_eq(cistern_attach(seg_name_of(c), &h), 0); /* reclaims the dead reader */
	uint64_t where = 0;
	cr_assert_eq(cistern__prio_check(h, &where), 0, "node %" PRIu64 " disagrees", where);
	cr_assert_eq(cistern_prio_info_get(h, &info), 0);
	cr_assert(fabs(info.total - 10) < 1e-3, "total %g", info.total);
	uint8_t buf[4 * 64];
	int got, total = 0;
	while ((got = cistern_get_prioritized(h, buf, 64, 4, NULL, NULL, NULL, NULL, 0)) > 0)
		total += got;
	cr_assert_eq(got, CISTERN_EOD);
	cr_assert_eq(total, 4);
	cr_assert_eq(cistern_detach(h), 0);
}

/*
 * A dump keeps the samples and the parameters, not the priorities: the
 * restored segment draws with the same alpha, beta and epsilon, every
 * sample at priority 1.
 */
Test(prioritized, a_dump_keeps_the_parameters_and_a_restore_builds_the_tree)
{
	const double q[4] = {1, 2, 3, 4};
	struct cistern *c = seg_create("p-dump", prio_cfg(8, 2, 0.5, 0.25, 0.5));
	put_all(c, q, 4);
	const char *path = seg_dump_path("p-dump");
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	const char *back = seg_name("p-undump");
	int r = cistern_restore(path, back, NULL, NULL, NULL);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	struct cistern *h;
	cr_assert_eq(cistern_attach(back, &h), 0);
	seg_keep(back, h);
	struct cistern_config cfg;
	cr_assert_eq(cistern_config_get(h, &cfg), 0);
	cr_assert_eq(cfg.policy, CISTERN_PRIORITIZED);
	cr_assert_eq(cfg.alpha, 0.5);
	cr_assert_eq(cfg.beta, 0.25);
	cr_assert_eq(cfg.epsilon, 0.5);
	cr_assert_eq(cistern__prio_check(h, NULL), 0);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(h, &info), 0);
	/* Four samples at priority 1: 4 * (1 + 0.5)^0.5. */
	cr_assert(fabs(info.total - 4 * sqrt(1.5)) < 1e-5, "total %g", info.total);
	uint8_t buf[4 * 64];
	cr_assert_eq(cistern_get_prioritized(h, buf, 64, 4, NULL, NULL, NULL, NULL, 0), 4);
}

/* ---- Producers and learners killed at random moments ----------------- */

struct chaos {
	_Atomic uint64_t torn;  /* payloads that did not match their metadata */
	_Atomic uint64_t draws; /* samples drawn, all processes */
	_Atomic uint64_t puts;
};

#define CHAOS_SLOTS 64
#define CHAOS_LEN 48

static void chaos_producer(const char *name, uint32_t who, struct chaos *sh)
{
	struct cistern *h;
	if (cistern_attach(name, &h) < 0)
		_exit(1);
	struct cistern_rng rng;
	cistern__rng_seed(&rng, SEED + who);
	for (uint32_t seq = 0;; seq++) {
		uint8_t buf[CHAOS_LEN];
		fill_payload(buf, CHAOS_LEN, who, seq);
		struct cistern_meta m = {.sim_id = who, .time_step = seq};
		int r = seq % 3 ? cistern_put_prioritized(h, buf, CHAOS_LEN, &m,
							  (double)cistern__rng_below(&rng, 100),
							  100)
				: cistern_put(h, buf, CHAOS_LEN, &m, 100);
		if (r == 0)
			atomic_fetch_add(&sh->puts, 1);
		else if (r != -ETIMEDOUT)
			_exit(2);
	}
}

static void chaos_learner(const char *name, uint32_t who, struct chaos *sh)
{
	struct cistern *h;
	if (cistern_attach(name, &h) < 0)
		_exit(1);
	struct cistern_rng rng;
	cistern__rng_seed(&rng, SEED * 7 + who);
	for (;;) {
		uint8_t buf[8 * 64];
		struct cistern_meta meta[8];
		size_t len[8];
		uint64_t ids[8];
		double w[8], q[8];
		int got = cistern_get_prioritized(h, buf, 64, 8, len, meta, ids, w, 100);
		if (got == -ETIMEDOUT)
			continue;
		if (got < 0)
			_exit(3);
		for (int i = 0; i < got; i++) {
			if (len[i] != CHAOS_LEN ||
			    !check_payload(buf + i * 64, len[i], meta[i].sim_id,
					   meta[i].time_step) ||
			    !(w[i] > 0 && w[i] <= 1))
				atomic_fetch_add(&sh->torn, 1);
			q[i] = (double)cistern__rng_below(&rng, 1000) / 10;
		}
		atomic_fetch_add(&sh->draws, (uint64_t)got);
		if (cistern_update_priorities(h, ids, q, (size_t)got) < 0)
			_exit(4);
	}
}

Test(prioritized, killed_producers_and_learners_leave_a_tree_that_agrees_with_the_slots,
     .timeout = 120)
{
	struct cistern *c = seg_create("p-chaos", prio_cfg(CHAOS_SLOTS, 8, 0.6, 0.4, 0.01));
	const char *name = seg_name_of(c);
	struct chaos *sh = shared_alloc(sizeof(*sh));
	cr_assert_not_null(sh);
	struct cistern_rng rng;
	cistern__rng_seed(&rng, SEED);
	uint32_t who = 0;
	for (int round = 0; round < 12; round++) {
		pid_t kids[4];
		for (int k = 0; k < 4; k++) {
			pid_t pid = fork_child();
			cr_assert_geq(pid, 0);
			if (pid == 0) {
				if (k < 2)
					chaos_producer(name, who + (uint32_t)k, sh);
				else
					chaos_learner(name, who + (uint32_t)k, sh);
			}
			kids[k] = pid;
		}
		who += 4;
		/* Each dies at its own random moment, 1 to 60 ms in. */
		for (int k = 0; k < 4; k++) {
			usleep((useconds_t)(1000 + cistern__rng_below(&rng, 15000)));
			kill_and_reap(kids[k]);
		}
		/* The dead are reclaimed by the next attach. */
		struct cistern *h;
		cr_assert_eq(cistern_attach(name, &h), 0);
		uint64_t where = 0;
		int r = cistern__prio_check(h, &where);
		cr_assert_eq(r, 0, "round %d: node %" PRIu64 " disagrees with the slots", round,
			     where);
		cr_assert_eq(cistern_detach(h), 0);
	}
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_log_info("%" PRIu64 " draws, %" PRIu64 " puts, %" PRIu64 " rebuilds after a kill",
		    atomic_load(&sh->draws), atomic_load(&sh->puts), info.rebuilds);
	cr_assert_eq(atomic_load(&sh->torn), 0, "draws returned torn or free slots");
	cr_assert_gt(atomic_load(&sh->draws), 0, "the learners drew nothing");
	/* Whatever is held is drawable, whole, and drains to end of data. */
	cr_assert_eq(cistern_close_reception(c), 0);
	uint8_t buf[8 * 64];
	struct cistern_meta meta[8];
	size_t len[8];
	int got;
	uint64_t drained = 0;
	while ((got = cistern_get_prioritized(c, buf, 64, 8, len, meta, NULL, NULL, 1000)) > 0) {
		for (int i = 0; i < got; i++)
			cr_assert(len[i] == CHAOS_LEN &&
				  check_payload(buf + i * 64, len[i], meta[i].sim_id,
						meta[i].time_step));
		drained += (uint64_t)got;
	}
	cr_assert_eq(got, CISTERN_EOD, "%s", cistern_strerror(got));
	cr_assert_gt(drained, 0);
	cr_assert_eq(cistern__prio_check(c, NULL), 0);
	munmap(sh, sizeof(*sh));
}
