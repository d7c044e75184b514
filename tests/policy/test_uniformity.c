/* SPDX-License-Identifier: MIT */
/*
 * test_uniformity.c - chi-square tests that random choices are uniform over
 * what qualifies: Reservoir and FIRO reads, Reservoir evictions, SimPaired
 * pairs, and the sparse case where picks go through the Roaring snapshot.
 *
 * Each test uses a fixed seed, so it is reproducible, and rejects uniformity
 * at significance 0.001: with k categories the statistic must stay below the
 * chi-square quantile for k - 1 degrees of freedom at 0.999 (Wilson-Hilferty
 * approximation, accurate to a fraction of a percent at these sizes). A
 * picker that favours half the categories by 5% fails at these counts.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "helpers.h"
#include "sys/rng.h"

#define SEED 0x5eed1234

static double chi2(const uint64_t *obs, int k, double expected)
{
	double x = 0;
	for (int i = 0; i < k; i++) {
		double d = (double)obs[i] - expected;
		x += d * d / expected;
	}
	return x;
}

/* Every test's segments go through make(); the fixture removes them, pass or fail. */
TestSuite(uniformity, .fini = seg_fini);

static struct cistern *make(const char *tag, struct cistern_config cfg)
{
	cfg.seed = SEED;
	return seg_create(tag, cfg);
}

static void put_u32(struct cistern *c, uint32_t v, uint32_t sim, uint32_t step)
{
	struct cistern_meta m = {.sim_id = sim, .time_step = step};
	cr_assert_eq(cistern_put(c, &v, sizeof(v), &m, 0), 0);
}

static void assert_uniform(const uint64_t *counts, int k, uint64_t total, const char *what)
{
	double x = chi2(counts, k, (double)total / k);
	double crit = chi2_critical(k - 1, Z_999);
	cr_assert_lt(x, crit, "%s: chi-square %.1f >= %.1f (df %d)", what, x, crit, k - 1);
}

/* A segment of this config holding K samples whose payloads are their index. */
static struct cistern *make_filled(const char *tag, struct cistern_config cfg, int k)
{
	struct cistern *c = make(tag, cfg);
	for (uint32_t i = 0; i < (uint32_t)k; i++)
		put_u32(c, i, 0, 0);
	return c;
}

/*
 * Attach a second reader to segment `name` and have both read once, so that
 * neither holds the single reader's role (docs/POLICIES.md, "One producer, one reader"): c's
 * batches then take the path of any number of readers, with locked pins.
 */
static struct cistern *second_reader(struct cistern *c, const char *name)
{
	struct cistern *r2 = NULL;
	struct cistern_sample s;
	cr_assert_eq(cistern_attach(name, &r2), 0);
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	cr_assert_eq(cistern_release(c, &s), 0);
	cr_assert_eq(cistern_acquire(r2, &s, 0), 0);
	cr_assert_eq(cistern_release(r2, &s), 0);
	return r2;
}

/*
 * Put K samples (payload = their index) into a segment of this config, read N
 * times with cistern_get(), and test the reads for uniformity over the K.
 */
static void reads_are_uniform(const char *tag, struct cistern_config cfg, int k, int n,
			      const char *what)
{
	struct cistern *c = make_filled(tag, cfg, k);
	uint64_t *counts = calloc((size_t)k, sizeof(*counts));
	cr_assert_not_null(counts);
	for (int i = 0; i < n; i++) {
		uint32_t v;
		cr_assert_eq(cistern_get(c, &v, 4, NULL, 0), 4);
		cr_assert_lt(v, (uint32_t)k);
		counts[v]++;
	}
	assert_uniform(counts, k, (uint64_t)n, what);
	free(counts);
}

Test(uniformity, reservoir_reads_are_uniform_over_held_samples)
{
	reads_are_uniform("u-res",
			  (struct cistern_config){.policy = CISTERN_RESERVOIR,
						  .slot_size = 4,
						  .slot_count = 100,
						  .watermark = 100},
			  100, 200000, "reservoir reads");
}

Test(uniformity, reservoir_reads_are_uniform_when_held_samples_are_sparse)
{
	/* 20 held among 2000 slots: probes would mostly miss; the Roaring snapshot serves. */
	reads_are_uniform("u-sparse",
			  (struct cistern_config){.policy = CISTERN_RESERVOIR,
						  .slot_size = 4,
						  .slot_count = 2000,
						  .watermark = 20},
			  20, 40000, "sparse reservoir reads");
}

/* How batch_members_are_uniform_how() reads: flags. */
enum {
	READ_GATHERED = 1,      /* cistern_get_batch(), else acquire_batch/release_batch */
	READ_BESIDE_SECOND = 2, /* a second reader attached (second_reader()) */
};

/*
 * Put K samples (payload = their index) into a segment of this config, read
 * N batches of B as `how` says, and test the members for uniformity over
 * the K.
 */
static void batch_members_are_uniform_how(const char *tag, struct cistern_config cfg, int k, int b,
					  int n, const char *what, unsigned how)
{
	struct cistern *c = make_filled(tag, cfg, k);
	struct cistern *r2 = how & READ_BESIDE_SECOND ? second_reader(c, seg_name_of(c)) : NULL;
	uint64_t *counts = calloc((size_t)k, sizeof(*counts));
	struct cistern_sample *s = calloc((size_t)b, sizeof(*s));
	uint32_t *v = calloc((size_t)b, sizeof(*v));
	cr_assert(counts && s && v);
	for (int i = 0; i < n; i++) {
		if (how & READ_GATHERED) {
			cr_assert_eq(cistern_get_batch(c, v, sizeof(*v), (size_t)b, NULL, NULL, 0),
				     b);
		} else {
			cr_assert_eq(cistern_acquire_batch(c, s, (size_t)b, 0), b);
			for (int j = 0; j < b; j++)
				v[j] = *(const uint32_t *)s[j].data;
			cr_assert_eq(cistern_release_batch(c, s, (size_t)b), 0);
		}
		for (int j = 0; j < b; j++) {
			cr_assert_lt(v[j], (uint32_t)k);
			counts[v[j]]++;
		}
	}
	assert_uniform(counts, k, (uint64_t)n * (uint64_t)b, what);
	free(v);
	free(s);
	free(counts);
	if (r2)
		cistern_detach(r2);
}

static void batch_members_are_uniform(const char *tag, struct cistern_config cfg, int k, int b,
				      int n, const char *what)
{
	batch_members_are_uniform_how(tag, cfg, k, b, n, what, 0);
}

Test(uniformity, reservoir_batch_members_are_uniform_over_held_samples)
{
	/* 100 held in 128 slots: candidates drawn ahead of the pins, some of them empty. */
	batch_members_are_uniform("u-batch",
				  (struct cistern_config){.policy = CISTERN_RESERVOIR,
							  .slot_size = 4,
							  .slot_count = 128,
							  .watermark = 100},
				  100, 32, 6000, "reservoir batch members");
}

Test(uniformity, sole_readers_batch_members_are_uniform_over_held_samples)
{
	/*
	 * The sole reader's own loop (a full window of candidates, pins stored
	 * plainly): 100 held in 128 slots, so that some candidates are empty
	 * and batches of 48 draw repeats.
	 */
	batch_members_are_uniform("u-sbatch",
				  (struct cistern_config){.policy = CISTERN_RESERVOIR,
							  .flags = CISTERN_SINGLE_READER,
							  .slot_size = 4,
							  .slot_count = 128,
							  .watermark = 100},
				  100, 48, 4000, "sole reader's batch members");
}

Test(uniformity, sole_readers_gathered_members_are_uniform_over_held_samples)
{
	/*
	 * The sole reader's gather (candidates drawn a block at a time, their
	 * payloads prefetched with their metadata): 100 held in 128 slots, so
	 * that some candidates are empty and batches of 48 draw repeats.
	 */
	batch_members_are_uniform_how("u-sgather",
				      (struct cistern_config){.policy = CISTERN_RESERVOIR,
							      .flags = CISTERN_SINGLE_READER,
							      .slot_size = 4,
							      .slot_count = 128,
							      .watermark = 100},
				      100, 48, 4000, "sole reader's gathered members",
				      READ_GATHERED);
}

Test(uniformity, sole_readers_gathered_members_are_uniform_in_a_large_segment)
{
	/* 4,000 held in 4,096 slots, batches of 256: the common case of the bench's section 4. */
	batch_members_are_uniform_how("u-sgather-l",
				      (struct cistern_config){.policy = CISTERN_RESERVOIR,
							      .flags = CISTERN_SINGLE_READER,
							      .slot_size = 4,
							      .slot_count = 4096,
							      .watermark = 4000},
				      4000, 256, 1600, "sole reader's gathered members, large",
				      READ_GATHERED);
}

Test(uniformity, batch_members_are_uniform_with_a_second_reader)
{
	/* Locked pins, each checked against the slot word as it is set. */
	batch_members_are_uniform_how("u-batch2",
				      (struct cistern_config){.policy = CISTERN_RESERVOIR,
							      .slot_size = 4,
							      .slot_count = 128,
							      .watermark = 100},
				      100, 48, 4000, "batch members, second reader",
				      READ_BESIDE_SECOND);
}

Test(uniformity, gathered_members_are_uniform_with_a_second_reader)
{
	batch_members_are_uniform_how("u-gather2",
				      (struct cistern_config){.policy = CISTERN_RESERVOIR,
							      .slot_size = 4,
							      .slot_count = 128,
							      .watermark = 100},
				      100, 48, 4000, "gathered members, second reader",
				      READ_GATHERED | READ_BESIDE_SECOND);
}

Test(uniformity, reservoir_batch_members_are_uniform_when_held_samples_are_sparse)
{
	/* 20 held among 2000 slots: the first probes miss, then the snapshot serves. */
	batch_members_are_uniform("u-bsparse",
				  (struct cistern_config){.policy = CISTERN_RESERVOIR,
							  .slot_size = 4,
							  .slot_count = 2000,
							  .watermark = 20},
				  20, 8, 5000, "sparse reservoir batch members");
}

Test(uniformity, firo_reads_are_uniform_over_held_samples)
{
	/* pseudo_epochs so large that nothing leaves during the test. */
	reads_are_uniform("u-firo",
			  (struct cistern_config){.policy = CISTERN_FIRO,
						  .slot_size = 4,
						  .slot_count = 64,
						  .watermark = 49,
						  .pseudo_epochs = 1000000},
			  50, 100000, "FIRO reads");
}

Test(uniformity, reservoir_evictions_are_uniform_over_evictable_samples)
{
	enum { K = 40, N = 40000 };
	struct cistern *c = make("u-evict", (struct cistern_config){.policy = CISTERN_RESERVOIR,
								    .slot_size = 4,
								    .slot_count = K,
								    .watermark = K});
	for (uint32_t i = 0; i < K; i++)
		put_u32(c, i, 0, 0);
	static uint64_t counts[K];
	struct cistern_sample all[K];
	for (int i = 0; i < N; i++) {
		/* See every sample, so every one qualifies for eviction. */
		cr_assert_eq(cistern_acquire_batch(c, all, K, 0), K);
		cr_assert_eq(cistern_release_batch(c, all, K), 0);
		struct cistern_slot slot;
		cr_assert_eq(cistern_reserve(c, &slot, 0), 0);
		counts[slot.index_]++; /* the slot whose sample was evicted */
		cr_assert_eq(cistern_commit(c, &slot, 4, NULL), 0);
	}
	assert_uniform(counts, K, N, "reservoir evictions");
}

Test(uniformity, sim_paired_pairs_are_uniform_over_held_pairs)
{
	enum { SIMS = 6, STEPS = 6, PAIRS = SIMS * (STEPS - 1), N = 60000 };
	struct cistern *c = make("u-pairs",
				 (struct cistern_config){.policy = CISTERN_SIM_PAIRED_RESERVOIR,
							 .slot_size = 4,
							 .slot_count = 64,
							 .watermark = 2,
							 .sweep_size = SIMS,
							 .nb_time_steps = STEPS});
	for (uint32_t s = 0; s < SIMS; s++)
		for (uint32_t t = 0; t < STEPS; t++)
			put_u32(c, s * STEPS + t, s, t);
	static uint64_t counts[PAIRS];
	for (int i = 0; i < N; i++) {
		struct cistern_sample p[2];
		cr_assert_eq(cistern_acquire_pair(c, p, 0), 0);
		counts[p[0].meta.sim_id * (STEPS - 1) + p[0].meta.time_step]++;
		cr_assert_eq(cistern_release_pair(c, p), 0);
	}
	assert_uniform(counts, PAIRS, N, "sim-paired pairs");
}

/*
 * The sole reader's batch draws two slots from each output of the generator
 * (cistern__rng32_below()): every ordered pair of consecutive draws, within
 * one output and across two, must be as likely as any other. Draws below 13
 * (not a power of two, so rejection is exercised) give 169 pairs.
 */
Test(uniformity, two_draws_from_one_output_are_uniform_and_independent)
{
	enum { N = 13, PAIRS = 400000 };
	struct cistern_rng r;
	struct cistern_rng32 pool = {0, 0};
	cistern__rng_seed(&r, SEED);
	uint64_t *counts = calloc(N * N, sizeof(*counts));
	uint64_t singles[N] = {0};
	cr_assert(counts);
	uint32_t prev = cistern__rng32_below(&r, &pool, N);
	for (int i = 0; i < PAIRS; i++) {
		uint32_t x = cistern__rng32_below(&r, &pool, N);
		cr_assert_lt(x, (uint32_t)N);
		counts[prev * N + x]++;
		singles[x]++;
		prev = x;
	}
	cr_assert_lt(chi2(singles, N, (double)PAIRS / N), chi2_critical(N - 1, Z_999),
		     "draws not uniform");
	cr_assert_lt(chi2(counts, N * N, (double)PAIRS / (N * N)), chi2_critical(N * N - 1, Z_999),
		     "consecutive draws not independent");
	free(counts);
}

Test(uniformity, the_test_rejects_a_biased_picker)
{
	/* The statistic must catch a 5% preference for half of 100 categories. */
	enum { K = 100, N = 200000 };
	static uint64_t counts[K];
	for (int i = 0; i < K; i++)
		counts[i] = i < K / 2 ? N / K + N / K / 20 : N / K - N / K / 20;
	cr_assert_geq(chi2(counts, K, (double)N / K), chi2_critical(K - 1, Z_999));
}

Test(uniformity, a_fixed_seed_makes_a_run_reproducible)
{
	uint32_t first[64];
	for (int run = 0; run < 2; run++) {
		struct cistern *c = make(run ? "u-rep1" : "u-rep0",
					 (struct cistern_config){.policy = CISTERN_RESERVOIR,
								 .slot_size = 4,
								 .slot_count = 16,
								 .watermark = 8});
		uint32_t seq[64];
		for (uint32_t i = 0; i < 64; i++) {
			uint32_t v = i;
			struct cistern_meta m = {0};
			int r;
			while ((r = cistern_put(c, &v, 4, &m, 0)) == -EAGAIN) {
				uint32_t x;
				cistern_get(c, &x, 4, NULL, 0);
			}
			cr_assert_eq(r, 0);
			uint32_t x = 0;
			seq[i] = cistern_get(c, &x, 4, NULL, 0) == 4 ? x : UINT32_MAX;
		}
		if (run == 0)
			memcpy(first, seq, sizeof(first));
		else
			cr_assert_arr_eq(first, seq, sizeof(first), "same seed, same reads");
	}
}
