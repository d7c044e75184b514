/* SPDX-License-Identifier: MIT */
/*
 * test_threads.c - many threads of one process, each with its own handle.
 *
 * The multi-process tests show the protocol works across address spaces; these
 * give ThreadSanitizer (scripts/check.sh runs them in build-tsan) real
 * concurrency inside one process, where it can see every access: a race on
 * the slot words, the indices, the payloads or the attachment table shows up
 * here as a report, not as a once-a-month lost sample.
 */
#include <criterion/criterion.h>
#include <pthread.h>

#include "helpers.h"

/* Every test's segment goes through seg_create(); the fixture removes it, pass or fail. */
TestSuite(threads, .fini = seg_fini);

#define T_PRODUCERS 4
#define T_READERS 4
#define T_PER 20000u
#define T_TOTAL (T_PRODUCERS * T_PER)
#define T_PAYLOAD 32

struct t_ctx {
	char name[64];
	uint32_t id;
	_Atomic uint32_t *seen; /* reads of each sample: reservoirs read some hundreds of times */
	_Atomic int *failures;
};

static void *t_producer(void *arg)
{
	struct t_ctx *x = arg;
	struct cistern *c;
	if (cistern_attach(x->name, &c) < 0) {
		atomic_fetch_add(x->failures, 1);
		return NULL;
	}
	for (uint32_t i = 0; i < T_PER; i++) {
		struct cistern_meta m = {.sim_id = x->id, .time_step = i};
		int r;
		if (i & 1) {
			uint8_t buf[T_PAYLOAD];
			fill_payload(buf, sizeof(buf), x->id, i);
			r = cistern_put(c, buf, sizeof(buf), &m, 10000);
		} else {
			struct cistern_slot slot;
			r = cistern_reserve(c, &slot, 10000);
			if (r == 0) {
				fill_payload(slot.data, T_PAYLOAD, x->id, i);
				r = cistern_commit(c, &slot, T_PAYLOAD, &m);
			}
		}
		if (r < 0) {
			atomic_fetch_add(x->failures, 1);
			break;
		}
	}
	cistern_producer_done(c);
	cistern_detach(c);
	return NULL;
}

static void *t_reader(void *arg)
{
	struct t_ctx *x = arg;
	struct cistern *c;
	if (cistern_attach(x->name, &c) < 0) {
		atomic_fetch_add(x->failures, 1);
		return NULL;
	}
	for (uint32_t n = 0;; n++) {
		struct cistern_meta m;
		uint8_t buf[T_PAYLOAD];
		const uint8_t *data = buf;
		size_t len = 0;
		struct cistern_sample s;
		int r;
		if ((n + x->id) & 1) {
			r = cistern_acquire(c, &s, 10000);
			if (r == 0) {
				data = s.data;
				len = s.len;
				m = s.meta;
			}
		} else {
			ssize_t got = cistern_get(c, buf, sizeof(buf), &m, 10000);
			r = got < 0 ? (int)got : 0;
			len = got < 0 ? 0 : (size_t)got;
		}
		if (r == CISTERN_EOD)
			break;
		if (r < 0) {
			atomic_fetch_add(x->failures, 1);
			break;
		}
		if (len != T_PAYLOAD || m.sim_id >= T_PRODUCERS || m.time_step >= T_PER ||
		    !check_payload(data, len, m.sim_id, m.time_step))
			atomic_fetch_add(x->failures, 1);
		else
			atomic_fetch_add(&x->seen[m.sim_id * T_PER + m.time_step], 1);
		if (data != buf && cistern_release(c, &s) < 0)
			atomic_fetch_add(x->failures, 1);
	}
	cistern_detach(c);
	return NULL;
}

/*
 * Run T_PRODUCERS producer threads and T_READERS reader threads on a segment of
 * this config; then every sample must have been read `exactly` times, or at
 * least once when exactly is 0 (reads with replacement).
 */
static void run_threads(const char *tag, struct cistern_config cfg, uint32_t exactly)
{
	struct t_ctx ctx[T_PRODUCERS + T_READERS];
	cfg.slot_size = T_PAYLOAD;
	cfg.expected_producers = T_PRODUCERS;
	struct cistern *c = seg_create(tag, cfg);
	const char *name = seg_name_of(c);
	static _Atomic uint32_t seen[T_TOTAL];
	static _Atomic int failures;
	pthread_t th[T_PRODUCERS + T_READERS];
	for (uint32_t i = 0; i < T_PRODUCERS + T_READERS; i++) {
		snprintf(ctx[i].name, sizeof(ctx[i].name), "%s", name);
		ctx[i].id = i < T_PRODUCERS ? i : i - T_PRODUCERS;
		ctx[i].seen = seen;
		ctx[i].failures = &failures;
		cr_assert_eq(pthread_create(&th[i], NULL, i < T_PRODUCERS ? t_producer : t_reader,
					    &ctx[i]),
			     0);
	}
	for (int i = 0; i < T_PRODUCERS + T_READERS; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&failures), 0);
	size_t missing = 0, wrong = 0;
	for (size_t i = 0; i < T_TOTAL; i++) {
		uint32_t n = atomic_load(&seen[i]);
		missing += n == 0;
		wrong += exactly && n != exactly;
	}
	cr_assert_eq(missing, 0, "%zu samples never received", missing);
	cr_assert_eq(wrong, 0, "%zu samples not received exactly %u times", wrong, exactly);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.puts, T_TOTAL);
	if (exactly)
		cr_assert_eq(st.gets, (uint64_t)T_TOTAL * exactly);
}

Test(threads, handles_in_many_threads_deliver_every_sample_exactly_once, .timeout = 300)
{
	run_threads("thr", (struct cistern_config){.slot_count = 64}, 1);
}

Test(threads, firo_threads_read_every_sample_pseudo_epochs_times, .timeout = 300)
{
	run_threads("thr-firo",
		    (struct cistern_config){.policy = CISTERN_FIRO,
					    .slot_count = 64,
					    .watermark = 8,
					    .pseudo_epochs = 2},
		    2);
}

Test(threads, reservoir_threads_never_lose_a_sample_unseen, .timeout = 300)
{
	run_threads("thr-res",
		    (struct cistern_config){
			    .policy = CISTERN_RESERVOIR, .slot_count = 64, .watermark = 8},
		    0);
}

/*
 * Threads that attach, move a few samples and detach (sometimes holding a
 * sample or a reservation, which detach must give back) while others stream:
 * the attachment table, the reclaim and the statistics under concurrency.
 */
struct churn_ctx {
	char name[64];
	uint32_t id;
	_Atomic int *failures;
	_Atomic uint64_t *moved;
};

static void *t_churn(void *arg)
{
	struct churn_ctx *x = arg;
	for (uint32_t round = 0; round < 200; round++) {
		struct cistern *c;
		int r = cistern_attach(x->name, &c);
		if (r == -EUSERS)
			continue;
		if (r < 0) {
			atomic_fetch_add(x->failures, 1);
			return NULL;
		}
		uint64_t v = ((uint64_t)x->id << 32) | round;
		if (cistern_put(c, &v, sizeof(v), NULL, 1000) == 0)
			atomic_fetch_add(x->moved, 1);
		struct cistern_sample s;
		struct cistern_slot slot;
		/* Leave something in hand for detach to give back (a sample) or drop (a slot). */
		if (round % 3 == 0)
			(void)cistern_acquire(c, &s, 0);
		else if (round % 3 == 1)
			(void)cistern_reserve(c, &slot, 0);
		struct cistern_stats st;
		cistern_stats_get(c, &st);
		cistern_detach(c);
	}
	return NULL;
}

Test(threads, attach_and_detach_race_with_traffic_without_loss, .timeout = 300)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 2048, .max_procs = 16};
	struct cistern *c = seg_create("churn", cfg);
	const char *name = seg_name_of(c);
	static _Atomic int failures;
	static _Atomic uint64_t moved;
	enum { CHURNERS = 6 };
	struct churn_ctx ctx[CHURNERS];
	pthread_t th[CHURNERS];
	for (uint32_t i = 0; i < CHURNERS; i++) {
		snprintf(ctx[i].name, sizeof(ctx[i].name), "%s", name);
		ctx[i].id = i;
		ctx[i].failures = &failures;
		ctx[i].moved = &moved;
		cr_assert_eq(pthread_create(&th[i], NULL, t_churn, &ctx[i]), 0);
	}
	for (int i = 0; i < CHURNERS; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&failures), 0);
	/* Everything put is still there, exactly once; nothing held or reserved leaked. */
	uint64_t got = 0, v;
	while (cistern_get(c, &v, sizeof(v), NULL, 0) == sizeof(v))
		got++;
	cr_assert_eq(got, atomic_load(&moved));
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.procs_attached, 1, "every churner's entry was given back");
	cr_assert_eq(st.population, 0);
}
