/* SPDX-License-Identifier: MIT */
/*
 * test_detach.c - the hold count that lets a clean cistern_detach() skip its
 * walk over every slot (lib/api/api.c, lib/core/liveness.c): it must follow every call
 * that starts or ends a hold, exactly, or a detach would leave a slot that
 * names a gone handle. Failed calls must never lower it.
 */
#include <criterion/criterion.h>

#include "helpers.h"
#include "core/handle.h"

/* Every test's segment goes through seg_create(); the fixture removes it, pass or fail. */
TestSuite(holding, .fini = seg_fini);

#define HOLDING(h, n) cr_assert_eq((h)->holding, (uint64_t)(n), "line %d: holding", __LINE__)

Test(holding, follows_every_fifo_call)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 64};
	struct cistern *c = seg_create("hf", cfg);
	const char *name = seg_name_of(c);
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0);
	char buf[8];
	struct cistern_slot sl;
	struct cistern_sample s;
	HOLDING(h, 0);
	cr_assert_eq(cistern_put(h, "abcdefgh", 8, NULL, 0), 0);
	HOLDING(h, 0);
	cr_assert_eq(cistern_reserve(h, &sl, 0), 0);
	HOLDING(h, 1);
	cr_assert_eq(cistern_commit(h, &sl, 9, NULL), -EMSGSIZE);
	HOLDING(h, 1);
	cr_assert_eq(cistern_commit(h, &sl, 1, NULL), 0);
	HOLDING(h, 0);
	cr_assert_eq(cistern_commit(h, &sl, 1, NULL), -EINVAL, "committed already");
	HOLDING(h, 0);
	cr_assert_eq(cistern_reserve(h, &sl, 0), 0);
	cr_assert_eq(cistern_abort(h, &sl), 0);
	HOLDING(h, 0);
	cr_assert_eq(cistern_abort(h, &sl), -EINVAL);
	HOLDING(h, 0);
	cr_assert_eq(cistern_get(h, buf, 2, NULL, 0), -EMSGSIZE, "handed back");
	HOLDING(h, 0);
	cr_assert_eq(cistern_acquire(h, &s, 0), 0);
	HOLDING(h, 1);
	cr_assert_eq(cistern_release(h, &s), 0);
	HOLDING(h, 0);
	cr_assert_eq(cistern_release(h, &s), -EINVAL);
	HOLDING(h, 0);
	cr_assert_eq(cistern_get(h, buf, sizeof(buf), NULL, 0), 1);
	HOLDING(h, 0);
	cr_assert_eq(cistern_get(h, buf, sizeof(buf), NULL, 0), -EAGAIN);
	HOLDING(h, 0);
	cr_assert_eq(cistern_close_reception(c), 0);
	cr_assert_eq(cistern_reserve(h, &sl, 0), -EPIPE);
	HOLDING(h, 0);
	cr_assert_eq(cistern_put(h, "x", 1, NULL, 0), -EPIPE);
	HOLDING(h, 0);
	cr_assert_eq(cistern_acquire(h, &s, 0), CISTERN_EOD);
	HOLDING(h, 0);
	cistern_detach(h);
}

Test(holding, follows_reservoir_batches_and_short_gathers)
{
	struct cistern_config cfg = {
		.slot_size = 8, .slot_count = 32, .policy = CISTERN_RESERVOIR, .watermark = 16};
	struct cistern *c = seg_create("hr", cfg);
	const char *name = seg_name_of(c);
	for (uint64_t i = 0; i < 32; i++)
		cr_assert_eq(cistern_put(c, &i, sizeof(i), NULL, 0), 0);
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0);
	struct cistern_sample b[8];
	uint64_t out[8];
	size_t len[8];
	cr_assert_eq(cistern_acquire_batch(h, b, 8, 0), 8);
	HOLDING(h, 8);
	cr_assert_eq(cistern_release_batch(h, b, 8), 0);
	HOLDING(h, 0);
	cr_assert_eq(cistern_get_batch(h, out, sizeof(out[0]), 8, len, NULL, 0), 8);
	HOLDING(h, 0);
	cr_assert_eq(cistern_get_batch(h, out, 4, 8, len, NULL, 0), -EMSGSIZE, "handed back");
	HOLDING(h, 0);
	cr_assert_eq(cistern_acquire(h, &b[0], 0), 0);
	cr_assert_eq(cistern_acquire(h, &b[1], 0), 0);
	HOLDING(h, 2);
	/* A batch with a member that is not held: an error, and the count may only err high. */
	b[2] = b[1];
	b[2].index_ = UINT32_MAX;
	cr_assert_lt(cistern_release_batch(h, b, 3), 0);
	HOLDING(h, 2); /* it cannot tell how many went, so it lowers nothing */
	cr_assert_eq(cistern_release(h, &b[0]), -EINVAL, "released by the batch");
	cistern_detach(h);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.population, 32, "nothing lost");
}

/*
 * FIRO hands samples out exclusively: a sample held at a clean detach, after
 * balanced traffic, is still given back and handed out again.
 */
Test(holding, firo_sample_held_at_detach_after_traffic_comes_back)
{
	struct cistern_config cfg = {
		.slot_size = 8, .slot_count = 16, .policy = CISTERN_FIRO, .watermark = 1};
	struct cistern *c = seg_create("hfi", cfg);
	const char *name = seg_name_of(c);
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0);
	for (uint64_t i = 0; i < 4; i++)
		cr_assert_eq(cistern_put(c, &i, sizeof(i), NULL, 0), 0);
	struct cistern_sample held;
	cr_assert_eq(cistern_acquire(h, &held, 0), 0);
	uint64_t v = 99, got;
	for (int i = 0; i < 10; i++) {
		cr_assert_eq(cistern_put(h, &v, sizeof(v), NULL, 0), 0);
		cr_assert_eq(cistern_get(h, &got, sizeof(got), NULL, 0), (ssize_t)sizeof(got));
	}
	HOLDING(h, 1);
	uint64_t held_value;
	memcpy(&held_value, held.data, sizeof(held_value));
	cr_assert_eq(cistern_detach(h), 0);
	cr_assert_eq(cistern_close_reception(c), 0);
	int seen_held = 0;
	ssize_t n;
	while ((n = cistern_get(c, &got, sizeof(got), NULL, 0)) == (ssize_t)sizeof(got))
		seen_held += got == held_value;
	cr_assert_eq(n, CISTERN_EOD);
	cr_assert_eq(seen_held, 1, "the held sample came back, once");
}
