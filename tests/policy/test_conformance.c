/* SPDX-License-Identifier: MIT */
/*
 * test_conformance.c - what every policy promises, run once per line of the
 * policy table (cistern__policies[], lib/core/policy.c): a new policy gets
 * these tests by adding its line. Each test is a criterion parameterized
 * test whose parameter is a policy's enum value; reads go through the call
 * its descriptor says it answers (pairs, whole batches or single samples).
 * What one policy alone does lives in the other programs of this folder.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>

#include "helpers.h"
#include "core/handle.h"
#include "core/policy.h"
#include "peek.h"

TestSuite(conformance, .fini = seg_fini);

/* Every value of the table, as the parameters of each test. */
static void free_policies(struct criterion_test_params *params)
{
	cr_free(params->params);
}

static struct criterion_test_params every_policy(void)
{
	uint32_t *v = cr_malloc(sizeof(*v) * CISTERN_POLICY_COUNT);
	for (uint32_t i = 0; i < CISTERN_POLICY_COUNT; i++)
		v[i] = i;
	return cr_make_param_array(uint32_t, v, CISTERN_POLICY_COUNT, free_policies);
}

#define EVERY_POLICY(name)                             \
	ParameterizedTestParameters(conformance, name) \
	{                                              \
		return every_policy();                 \
	}                                              \
	ParameterizedTest(uint32_t *policy, conformance, name)

enum {
	SLOTS = 32,
	PAYLOAD = 64,
	WATERMARK = 4,
	SIMS = 16,       /* sweep_size: N samples are sims 0..N/2-1 at steps 0 and 1 */
	STEPS = 2,       /* nb_time_steps: each simulation is exactly one pair */
	BATCH = 2,       /* batch_size */
	N = 20,          /* samples most tests put: above the watermark, within the slots */
	READ_MS = 10000, /* a read that must succeed: long enough never to be the cause */
};

static const struct cistern__policy *desc(const uint32_t *policy)
{
	const struct cistern__policy *d = cistern__policy_of(*policy);
	cr_assert_not_null(d, "policy %u has no line in cistern__policies[]", *policy);
	return d;
}

/* A config every policy takes as it is, so that one change is all create could refuse. */
static struct cistern_config base(uint32_t policy)
{
	struct cistern_config cfg = {
		.policy = (enum cistern_policy)policy,
		.slot_size = PAYLOAD,
		.slot_count = SLOTS,
		.watermark = WATERMARK,
		.sweep_size = SIMS,
		.nb_time_steps = STEPS,
		.batch_size = BATCH,
	};
	const char *why = cistern_config_problem(&cfg);
	cr_assert_null(why, "%s refuses the base config: %s", cistern_policy_name(cfg.policy), why);
	return cfg;
}

/* Sample i: simulation i / 2 at step i % 2, 1 + (i * 37) % PAYLOAD bytes of fill_payload(). */
static struct cistern_meta meta_of(uint32_t i)
{
	return (struct cistern_meta){.sim_id = i / STEPS, .time_step = i % STEPS};
}

static size_t len_of(uint32_t i)
{
	return 1 + (i * 37) % PAYLOAD;
}

static uint32_t index_of(const struct cistern_meta *m)
{
	return m->sim_id * STEPS + m->time_step;
}

static void put_samples(struct cistern *c, uint32_t n)
{
	uint8_t buf[PAYLOAD];
	for (uint32_t i = 0; i < n; i++) {
		struct cistern_meta m = meta_of(i);
		fill_payload(buf, len_of(i), m.sim_id, m.time_step);
		int r = cistern_put(c, buf, len_of(i), &m, 0);
		cr_assert_eq(r, 0, "put %u: %s", i, cistern_strerror(r));
	}
}

/*
 * One read of the kind the policy answers, copied out: a pair, a whole
 * batch, or one sample. The number of samples read (up to BATCH), into
 * buf[k], len[k], meta[k]; else the call's result (CISTERN_EOD, -errno).
 */
static int read_unit(struct cistern *c, const struct cistern__policy *d, uint8_t buf[][PAYLOAD],
		     size_t *len, struct cistern_meta *meta, int timeout_ms)
{
	if (d->has_pairs) {
		void *bufs[2] = {buf[0], buf[1]};
		int r = cistern_get_pair(c, bufs, PAYLOAD, len, meta, timeout_ms);
		return r == 0 ? 2 : r;
	}
	if (d->reads_whole_batches)
		return cistern_get_batch(c, buf, PAYLOAD, 0, len, meta, timeout_ms);
	ssize_t r = cistern_get(c, buf[0], PAYLOAD, &meta[0], timeout_ms);
	if (r < 0) /* CISTERN_EOD too */
		return (int)r;
	len[0] = (size_t)r;
	return 1;
}

/* Assert that a sample read is sample index_of(m) as put_samples() put it: its index. */
static uint32_t assert_whole(const struct cistern__policy *d, const uint8_t *buf, size_t len,
			     const struct cistern_meta *m)
{
	uint32_t i = index_of(m);
	cr_assert_lt(i, N, "%s: a sample nobody put: sim %u step %u", d->name, m->sim_id,
		     m->time_step);
	cr_assert_eq(len, len_of(i), "%s: sample %u: %zu bytes", d->name, i, len);
	cr_assert(check_payload(buf, len, m->sim_id, m->time_step), "%s: sample %u is damaged",
		  d->name, i);
	return i;
}

/*
 * After close: read until CISTERN_EOD, counting the reads of each sample in
 * reads[N] (each asserted whole). The number of samples read.
 */
static uint32_t drain(struct cistern *c, const struct cistern__policy *d, uint32_t *reads)
{
	uint8_t buf[BATCH][PAYLOAD];
	size_t len[BATCH];
	struct cistern_meta meta[BATCH];
	uint32_t total = 0;
	int r;
	while ((r = read_unit(c, d, buf, len, meta, READ_MS)) > 0) {
		for (int k = 0; k < r; k++)
			reads[assert_whole(d, buf[k], len[k], &meta[k])]++;
		total += (uint32_t)r;
		cr_assert_leq(total, 1000, "%s: the drain does not end", d->name);
	}
	cr_assert_eq(r, CISTERN_EOD, "%s: the drain ended with %s", d->name, cistern_strerror(r));
	return total;
}

static struct cistern_stats stats(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st;
}

EVERY_POLICY(create_gives_a_segment_of_the_policy_that_others_attach_and_detach)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern *c = seg_create(d->name, base(*policy));
	struct cistern_config got;
	cr_assert_eq(cistern_config_get(c, &got), 0);
	cr_assert_eq((uint32_t)got.policy, *policy, "%s", d->name);
	struct cistern *other = NULL;
	cr_assert_eq(cistern_attach(seg_name_of(c), &other), 0, "%s", d->name);
	cr_assert_eq(cistern_config_get(other, &got), 0);
	cr_assert_eq((uint32_t)got.policy, *policy, "%s", d->name);
	cr_assert_eq(stats(c).procs_attached, 2, "%s", d->name);
	cr_assert_eq(cistern_detach(other), 0, "%s", d->name);
	cr_assert_eq(stats(c).procs_attached, 1, "%s", d->name);
	seg_drop(c);
}

EVERY_POLICY(create_takes_exactly_the_flags_its_descriptor_lists)
{
	static const uint32_t flags[] = {CISTERN_LOSSY, CISTERN_SINGLE_PRODUCER,
					 CISTERN_SINGLE_READER};
	const struct cistern__policy *d = desc(policy);
	for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]); k++) {
		struct cistern_config cfg = base(*policy);
		cfg.flags = flags[k];
		bool listed = (d->flags & flags[k]) != 0;
		cr_assert_eq(cistern_config_problem(&cfg) == NULL, listed,
			     "%s and flag %#x: listed %d", d->name, flags[k], listed);
		const char *name = seg_name("flags");
		struct cistern *c = NULL;
		int r = cistern_create(name, &cfg, &c);
		if (listed) {
			cr_assert_eq(r, 0, "%s and flag %#x: %s", d->name, flags[k],
				     cistern_strerror(r));
			cr_assert_eq(cistern_detach(c), 0);
			cr_assert_eq(cistern_unlink(name), 0);
		} else {
			cr_assert_eq(r, -EINVAL, "%s and flag %#x: %s", d->name, flags[k],
				     cistern_strerror(r));
			cr_assert_null(c);
			cr_assert_eq(cistern_attach(name, &c), -ENOENT, "a refused create made %s",
				     name);
		}
	}
}

EVERY_POLICY(create_takes_reads_per_put_exactly_where_its_descriptor_is_rate_limited)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern_config cfg = base(*policy);
	cfg.reads_per_put = 1;
	cr_assert_eq(cistern_config_problem(&cfg) == NULL, (d->limiter != NULL), "%s", d->name);
	struct cistern *c = NULL;
	int r = cistern_create(seg_name("rpp"), &cfg, &c);
	cr_assert_eq(r, (d->limiter != NULL) ? 0 : -EINVAL, "%s: %s", d->name, cistern_strerror(r));
	if (c)
		seg_keep(seg_name("rpp"), c);
}

EVERY_POLICY(a_read_of_an_empty_segment_is_eagain_at_once_and_etimedout_after_a_wait)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern *c = seg_create(d->name, base(*policy));
	uint8_t buf[BATCH][PAYLOAD];
	size_t len[BATCH];
	struct cistern_meta meta[BATCH];
	int r = read_unit(c, d, buf, len, meta, 0);
	cr_assert_eq(r, -EAGAIN, "%s: %s", d->name, cistern_strerror(r));
	r = read_unit(c, d, buf, len, meta, 20);
	cr_assert_eq(r, -ETIMEDOUT, "%s: %s", d->name, cistern_strerror(r));
	cr_assert_eq(stats(c).reader_waits, 1, "%s: the wait is counted", d->name);
}

EVERY_POLICY(after_close_every_sample_put_is_read_whole_then_end_of_data)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern *c = seg_create(d->name, base(*policy));
	put_samples(c, N);
	cr_assert_eq(cistern_close_reception(c), 0);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), -EPIPE, "%s takes a put after close",
		     d->name);
	uint32_t reads[N] = {0};
	drain(c, d, reads);
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(reads[i], 1, "%s: sample %u read %u times after close", d->name, i,
			     reads[i]);
	seg_drop(c);
}

EVERY_POLICY(closed_below_its_watermark_a_segment_still_drains_every_sample)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern *c = seg_create(d->name, base(*policy));
	put_samples(c, 2); /* one simulation's pair, one whole batch, below the watermark */
	cr_assert_eq(cistern_close_reception(c), 0);
	uint32_t reads[N] = {0};
	cr_assert_eq(drain(c, d, reads), 2, "%s", d->name);
	cr_assert(reads[0] == 1 && reads[1] == 1, "%s: read %u and %u times", d->name, reads[0],
		  reads[1]);
	cr_assert_eq(stats(c).population, 0, "%s", d->name);
	seg_drop(c);
}

EVERY_POLICY(population_and_counters_follow_puts_and_reads)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern *c = seg_create(d->name, base(*policy));
	put_samples(c, N);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.puts, N, "%s", d->name);
	cr_assert_eq(st.population, N, "%s: nothing was evicted", d->name);
	cr_assert_eq(st.evictions, 0, "%s", d->name);
	cr_assert_eq(st.gets, 0, "%s", d->name);
	cistern_close_reception(c);
	uint32_t reads[N] = {0};
	uint32_t total = drain(c, d, reads);
	st = stats(c);
	cr_assert_eq(st.gets, total, "%s: gets counts each sample handed out", d->name);
	cr_assert_eq(st.population, 0, "%s: a drained segment holds nothing", d->name);
	cr_assert(st.reception_closed, "%s", d->name);
	uint64_t left = 0;
	for (int b = 0; b < CISTERN_SEEN_BUCKETS; b++)
		left += st.seen_hist[b];
	cr_assert_eq(left, N, "%s: the seen histogram counts every sample that left", d->name);
	seg_drop(c);
}

EVERY_POLICY(samples_held_by_a_reader_killed_holding_them_are_not_lost)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern *c = seg_create(d->name, base(*policy));
	put_samples(c, N);
	enum hold what = d->has_pairs             ? HOLD_PAIR
			 : d->reads_whole_batches ? HOLD_BATCH
						  : HOLD_SAMPLE;
	pid_t pid = spawn_holder(seg_name_of(c), what);
	cr_assert_gt(pid, 0, "%s: the reader did not start", d->name);
	kill_and_reap(pid);
	cistern_close_reception(c);
	uint32_t reads[N] = {0};
	drain(c, d, reads);
	for (uint32_t i = 0; i < N; i++)
		cr_assert_geq(reads[i], 1, "%s: sample %u was lost with its reader", d->name, i);
	cr_assert_eq(stats(c).population, 0, "%s", d->name);
	seg_drop(c);
}

/* ---- Dump and restore, for the policies the tools can read ---------- */

EVERY_POLICY(a_dump_restores_the_same_samples_metadata_and_seen_counts)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern *c = seg_create(d->name, base(*policy));
	const char *name = seg_name_of(c);
	const char *copy = seg_name("copy");
	const char *path = seg_dump_path(d->name);
	put_samples(c, N);
	if (!d->snap) {
		cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), -ENOTSUP, "%s", d->name);
		return;
	}
	/* Reads first, so that seen counts (and a FIFO's head) move. */
	uint8_t buf[BATCH][PAYLOAD];
	size_t len[BATCH];
	struct cistern_meta meta[BATCH];
	for (int k = 0; k < 9; k++)
		cr_assert_gt(read_unit(c, d, buf, len, meta, READ_MS), 0, "%s", d->name);
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0, "%s", d->name);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0, "%s", d->name);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	seg_keep(copy, r);
	static struct held_sample a[SLOTS], b[SLOTS];
	size_t na = held_samples(c, a, SLOTS), nb = held_samples(r, b, SLOTS);
	cr_assert_gt(na, 0, "%s: the segment holds samples", d->name);
	cr_assert_eq(na, nb, "%s", d->name);
	for (size_t i = 0; i < na; i++) {
		cr_assert_eq(a[i].id, b[i].id, "%s", d->name);
		cr_assert_eq(a[i].sim, b[i].sim, "%s", d->name);
		cr_assert_eq(a[i].step, b[i].step, "%s", d->name);
		cr_assert_eq(a[i].seen, b[i].seen, "%s: seen of sample %lu", d->name,
			     (unsigned long)a[i].id);
		cr_assert_eq(a[i].len, b[i].len, "%s", d->name);
		cr_assert_eq(memcmp(a[i].payload, b[i].payload, (size_t)a[i].len), 0, "%s",
			     d->name);
	}
	cr_assert_eq(stats(r).population, stats(c).population, "%s", d->name);
	/* A simulation not put yet, so that a pairing policy takes it too. */
	struct cistern_meta m = {.sim_id = N / STEPS, .time_step = 0};
	cr_assert_eq(cistern_put(r, "n", 1, &m, 0), 0, "%s: the restored segment takes samples",
		     d->name);
	cr_assert_eq(m.sample_id, N, "%s: with ids after the restored ones", d->name);
}

EVERY_POLICY(create_takes_max_times_sampled_exactly_where_its_descriptor_caps_reads)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern_config cfg = base(*policy);
	cfg.max_times_sampled = 2;
	const char *why = cistern_config_problem(&cfg);
	cr_assert_eq(why == NULL, d->caps_reads, "%s: %s", d->name, why ? why : "taken");
	if (why)
		cr_assert_not_null(strstr(why, "max_times_sampled"), "%s: %s", d->name, why);
	struct cistern *c = NULL;
	int r = cistern_create(seg_name("cap"), &cfg, &c);
	cr_assert_eq(r, d->caps_reads ? 0 : -EINVAL, "%s: %s", d->name, cistern_strerror(r));
	if (c)
		seg_keep(seg_name("cap"), c);
}

/* The policies whose descriptors take max_times_sampled, as the parameters of a test. */
static struct criterion_test_params capping_policies(void)
{
	uint32_t *v = cr_malloc(sizeof(*v) * CISTERN_POLICY_COUNT);
	size_t n = 0;
	for (uint32_t i = 0; i < CISTERN_POLICY_COUNT; i++)
		if (cistern__policy_of(i) && cistern__policy_of(i)->caps_reads)
			v[n++] = i;
	return cr_make_param_array(uint32_t, v, n, free_policies);
}

#define CAPPING_POLICY(name)                           \
	ParameterizedTestParameters(conformance, name) \
	{                                              \
		return capping_policies();             \
	}                                              \
	ParameterizedTest(uint32_t *policy, conformance, name)

/*
 * Reads while open until too few samples are left, then close and drain:
 * no sample is read more than max_times_sampled times, and none is lost.
 */
CAPPING_POLICY(under_max_times_sampled_no_sample_is_read_past_it_and_none_is_lost)
{
	enum { K = 2 };
	const struct cistern__policy *d = desc(policy);
	struct cistern_config cfg = base(*policy);
	cfg.max_times_sampled = K;
	struct cistern *c = seg_create(d->name, cfg);
	put_samples(c, N);
	uint32_t reads[N] = {0};
	uint8_t buf[BATCH][PAYLOAD];
	size_t len[BATCH];
	struct cistern_meta meta[BATCH];
	int r, units = 0;
	while ((r = read_unit(c, d, buf, len, meta, 0)) > 0) {
		for (int k = 0; k < r; k++)
			reads[assert_whole(d, buf[k], len[k], &meta[k])]++;
		cr_assert_leq(++units, K * N, "%s: more reads than K per sample", d->name);
	}
	cr_assert_eq(r, -EAGAIN, "%s: %s", d->name, cistern_strerror(r));
	cr_assert_eq(cistern_close_reception(c), 0);
	drain(c, d, reads);
	for (uint32_t i = 0; i < N; i++) {
		cr_assert_leq(reads[i], K, "%s: sample %u read %u times", d->name, i, reads[i]);
		cr_assert_geq(reads[i], 1, "%s: sample %u never read", d->name, i);
	}
	cr_assert_eq(stats(c).population, 0, "%s", d->name);
}

CAPPING_POLICY(a_dump_keeps_max_times_sampled)
{
	const struct cistern__policy *d = desc(policy);
	struct cistern_config cfg = base(*policy);
	cfg.max_times_sampled = 3;
	struct cistern *c = seg_create(d->name, cfg);
	const char *copy = seg_name("capcopy");
	const char *path = seg_dump_path(d->name);
	put_samples(c, N);
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0, "%s", d->name);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0, "%s", d->name);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	seg_keep(copy, r);
	struct cistern_config got;
	cr_assert_eq(cistern_config_get(r, &got), 0);
	cr_assert_eq(got.max_times_sampled, 3, "%s", d->name);
}
