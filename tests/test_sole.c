/* SPDX-License-Identifier: MIT */
/*
 * test_sole.c - CISTERN_SINGLE_PRODUCER and CISTERN_SINGLE_READER (lib/core/roles.c,
 * the plain-store claims in lib/policy/fifo/fifo.c): one holder of each role at a time,
 * the role passes on when its holder detaches or dies, and nothing is lost
 * or wedged on the way, including at end of data.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "helpers.h"
#include "peek.h"
#include "core/policy.h"
#include "core/roles.h"
#include "policy/fifo/fifo.h"
#include "policy/fifo/fifo_copy.h"
#include "sys/cpu.h"
#include <cistern/admin.h>

#define SOLE (CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER)

/* Every test's segments go through seg_create(); the fixture removes them, pass or fail. */
TestSuite(sole, .fini = seg_fini);

static struct cistern *create(const char *tag, uint64_t slots, uint32_t flags)
{
	return seg_create(
		tag, (struct cistern_config){.slot_size = 64, .slot_count = slots, .flags = flags});
}

Test(sole, producer_flag_is_fifo_only_and_reader_flag_is_refused_under_firo)
{
	const char *name = seg_name("so-pol");
	struct cistern *c = NULL;
	struct cistern_config cfg = {.policy = CISTERN_RESERVOIR,
				     .slot_count = 8,
				     .watermark = 1,
				     .flags = CISTERN_SINGLE_PRODUCER};
	cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL);
	cfg = (struct cistern_config){.policy = CISTERN_FIRO,
				      .slot_count = 8,
				      .watermark = 1,
				      .flags = CISTERN_SINGLE_READER};
	cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL);
	cr_assert_null(c);
}

static struct cistern *create_reservoir_flags(const char *tag, enum cistern_policy policy,
					      uint64_t slots, uint32_t flags)
{
	return seg_create(tag, (struct cistern_config){.policy = policy,
						       .slot_size = 64,
						       .slot_count = slots,
						       .watermark = 4,
						       .batch_size = 4,
						       .sweep_size = 2,
						       .nb_time_steps = 4,
						       .flags = flags});
}

static struct cistern *create_reservoir(const char *tag, enum cistern_policy policy, uint64_t slots)
{
	return create_reservoir_flags(tag, policy, slots, CISTERN_SINGLE_READER);
}

/*
 * cistern_get_batch() goes one pass (lib/policy/reservoir/gather.c) for the sole reader and
 * for any other reader alike: each test of it below runs under both, with
 * flags CISTERN_SINGLE_READER or 0.
 */

Test(sole, reader_flag_is_taken_by_every_pinning_reservoir)
{
	const enum cistern_policy pol[] = {CISTERN_RESERVOIR, CISTERN_FIFO_EVICT_RESERVOIR,
					   CISTERN_SIM_PAIRED_RESERVOIR, CISTERN_BATCH_RESERVOIR};
	for (size_t i = 0; i < sizeof(pol) / sizeof(pol[0]); i++) {
		struct cistern *c = create_reservoir("so-rpol", pol[i], 8);
		struct cistern_config got;
		cr_assert_eq(cistern_config_get(c, &got), 0);
		cr_assert_eq(got.flags, CISTERN_SINGLE_READER);
		seg_drop(c);
	}
}

Test(sole, second_reservoir_reader_is_refused_until_the_first_detaches)
{
	struct cistern *a = create_reservoir("so-r2r", CISTERN_RESERVOIR, 8);
	const char *name = seg_name_of(a);
	struct cistern *b;
	cr_assert_eq(cistern_attach(name, &b), 0);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(cistern_put(b, "x", 1, NULL, 0), 0, "producers are not limited");
	struct cistern_sample s[4];
	cr_assert_eq(cistern_acquire_batch(a, s, 4, 0), 4);
	cr_assert_eq(cistern_acquire_batch(b, s, 4, 0), -EBUSY);
	cr_assert_eq(cistern_acquire(b, s, 0), -EBUSY);
	char buf[4 * 64];
	for (int k = 0; k < 2; k++)
		cr_assert_eq(cistern_get_batch(b, buf, 64, 4, NULL, NULL, 0), -EBUSY);
	cr_assert_eq(cistern_release_batch(a, s, 4), 0);
	seg_detach(a);
	cr_assert_eq(cistern_acquire_batch(b, s, 4, 0), 4, "the role passed on");
	cr_assert_eq(cistern_release_batch(b, s, 4), 0);
	cistern_detach(b);
}

Test(sole, sole_reader_batches_count_each_read_once_and_leave_no_pin)
{
	struct cistern *c = create_reservoir("so-rseen", CISTERN_RESERVOIR, 64);
	for (int i = 0; i < 64; i++)
		cr_assert_eq(cistern_put(c, &i, sizeof(i), NULL, 0), 0);
	struct cistern_sample s[16], t[16];
	bool pinned;
	uint64_t reads = 0;
	for (int round = 0; round < 50; round++) {
		cr_assert_eq(cistern_acquire_batch(c, s, 16, 0), 16);
		reads += 16;
		cr_assert_eq(seen_sum(c, &pinned), reads);
		cr_assert(pinned);
		/* A second batch while the first is held: repeats are pinned twice, locally. */
		cr_assert_eq(cistern_acquire_batch(c, t, 16, 0), 16);
		reads += 16;
		cr_assert_eq(cistern_release_batch(c, s, 16), 0);
		cr_assert_eq(seen_sum(c, &pinned), reads);
		cr_assert(pinned, "the second batch still pins its members");
		for (int i = 0; i < 16; i++)
			cr_assert_neq(atomic_load(&cistern__slotmeta(c, t[i].index_)->pins), 0,
				      "a member of the second batch was unpinned with the first");
		cr_assert_eq(cistern_release_batch(c, t, 16), 0);
		seen_sum(c, &pinned);
		cr_assert_not(pinned, "every pin went with its release");
	}
}

/*
 * For the any-reader half of the tests below: a second reader, which reads
 * one sample first, so that the handle under test is not the lone reader
 * (which takes the sole reader's paths without the flag) but one of two
 * counted readers (lib/core/roles.c). Adds its read to *reads.
 */
static struct cistern *second_reader(const char *name, unsigned *reads)
{
	struct cistern *r = NULL;
	char buf[64];
	cr_assert_eq(cistern_attach(name, &r), 0);
	cr_assert_eq(cistern_get_batch(r, buf, sizeof(buf), 1, NULL, NULL, 0), 1);
	*reads += 1;
	return r;
}

/* After the handle's first read: the lone reader holds the role, one of two does not. */
static void assert_role(const struct cistern *c, uint32_t flags)
{
	if (flags)
		cr_assert(cistern__reads_alone(c), "the flag's holder");
	else
		cr_assert(!cistern__holds_auto(c, CISTERN_ROLE_READER) &&
				  cistern__counted(c, CISTERN_ROLE_READER),
			  "one of two counted readers");
}

static void get_batch_copies_distinct_samples_and_counts_each_once(uint32_t flags)
{
	struct cistern *c = create_reservoir_flags(flags ? "so-rget" : "so-rget-any",
						   CISTERN_RESERVOIR, 64, flags);
	const char *name = seg_name_of(c);
	for (int i = 0; i < 64; i++) {
		struct cistern_meta m = {.sim_id = (uint32_t)i};
		cr_assert_eq(cistern_put(c, &i, sizeof(i), &m, 0), 0);
	}
	unsigned reads = 0;
	struct cistern *other = flags ? NULL : second_reader(name, &reads);
	int buf[16];
	size_t len[16];
	struct cistern_meta meta[16];
	bool pinned;
	/* The first read makes the handle a reader; the ones after it go the one-pass way. */
	for (int round = 1; round <= 50; round++) {
		memset(len, 0, sizeof(len));
		cr_assert_eq(cistern_get_batch(c, buf, sizeof(int), 16, len, meta, 0), 16);
		assert_role(c, flags);
		for (int i = 0; i < 16; i++) {
			cr_assert_eq(len[i], sizeof(int));
			cr_assert_eq((uint32_t)buf[i], meta[i].sim_id,
				     "payload and metadata agree");
			for (int j = i + 1; j < 16; j++)
				cr_assert_neq(meta[i].sample_id, meta[j].sample_id,
					      "distinct members");
		}
		cr_assert_eq(seen_sum(c, &pinned), reads + 16u * (unsigned)round,
			     "each copy counted once");
		cr_assert_not(pinned, "nothing stays pinned after a get");
	}
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.gets, reads + 50 * 16);
	if (other)
		cistern_detach(other);
}

Test(sole, sole_readers_get_batch_copies_distinct_samples_and_counts_each_once)
{
	get_batch_copies_distinct_samples_and_counts_each_once(CISTERN_SINGLE_READER);
}

Test(sole, any_readers_get_batch_copies_distinct_samples_and_counts_each_once)
{
	get_batch_copies_distinct_samples_and_counts_each_once(0);
}

/*
 * Payloads of every length from 0 to the slot size, gathered into a stride
 * narrower than the slots (but wide enough for every sample), many batches
 * over: each row holds its sample whole, and the bytes past it are left as
 * they were. The sole reader prefetches each member's payload by the slot's
 * size rather than the sample's length as it pins it; without the flag a
 * second reader is attached and has read once, so that the first is not the
 * lone reader (which takes the sole reader's paths without the flag) and
 * leaves the prefetches to its copies.
 */
static void get_batch_copies_every_length_whole(uint32_t flags)
{
	enum { SLOTS = 64, SIZE = 1024, STRIDE = 700, N = 16 };
	struct cistern_config cfg = {.policy = CISTERN_RESERVOIR,
				     .slot_size = SIZE,
				     .slot_count = SLOTS,
				     .watermark = SLOTS,
				     .flags = flags};
	struct cistern *c = seg_create(flags ? "so-rglen" : "so-rglen-any", cfg);
	const char *name = seg_name_of(c);
	cr_assert_eq(put_length_ramp(c, SLOTS, STRIDE, 7), 0);
	static uint8_t out[N][STRIDE];
	size_t len[N];
	struct cistern_meta meta[N];
	struct cistern *other = NULL;
	unsigned reads = 0;
	if (!flags) {
		cr_assert_eq(cistern_attach(name, &other), 0);
		cr_assert_eq(cistern_get_batch(other, out, STRIDE, N, NULL, NULL, 0), N);
		reads += N;
	}
	for (int round = 0; round < 200; round++) {
		memset(out, 0xa5, sizeof(out));
		cr_assert_eq(cistern_get_batch(c, out, STRIDE, N, len, meta, 0), N);
		for (int i = 0; i < N; i++) {
			uint32_t step = meta[i].time_step;
			cr_assert_eq(len[i], (size_t)step * STRIDE / (SLOTS - 1));
			cr_assert(check_payload(out[i], len[i], 7, step),
				  "row %d is sample %u, whole", i, step);
			for (size_t b = len[i]; b < STRIDE; b++)
				cr_assert_eq(out[i][b], 0xa5, "row %d written past its length", i);
		}
	}
	bool pinned;
	cr_assert_eq(seen_sum(c, &pinned), reads + 200u * N);
	cr_assert_not(pinned);
	if (other)
		cistern_detach(other);
}

Test(sole, sole_readers_get_batch_copies_every_length_whole)
{
	get_batch_copies_every_length_whole(CISTERN_SINGLE_READER);
}

Test(sole, any_readers_get_batch_copies_every_length_whole)
{
	get_batch_copies_every_length_whole(0);
}

/*
 * A sample the reader holds (acquired, not yet released) stays drawable by
 * its gets, as by any read: a held member is pinned a second time, not left
 * out. With 8 of 64 held and batches of 8, about one member a batch is held.
 */
static void get_batch_may_draw_what_it_holds_and_keeps_its_pins(uint32_t flags)
{
	struct cistern *c = create_reservoir_flags(flags ? "so-rgeth" : "so-rgeth-any",
						   CISTERN_RESERVOIR, 64, flags);
	const char *name = seg_name_of(c);
	for (int i = 0; i < 64; i++)
		cr_assert_eq(cistern_put(c, &i, sizeof(i), NULL, 0), 0);
	unsigned reads = 0;
	struct cistern *other = flags ? NULL : second_reader(name, &reads);
	struct cistern_sample held[8];
	cr_assert_eq(cistern_acquire_batch(c, held, 8, 0), 8);
	assert_role(c, flags);
	int buf[8];
	struct cistern_meta meta[8];
	unsigned held_drawn = 0;
	bool pinned;
	for (int round = 0; round < 100; round++) {
		cr_assert_eq(cistern_get_batch(c, buf, sizeof(int), 8, NULL, meta, 0), 8);
		for (int i = 0; i < 8; i++) {
			for (int j = i + 1; j < 8; j++)
				cr_assert_neq(meta[i].sample_id, meta[j].sample_id,
					      "distinct members");
			for (int h = 0; h < 8; h++)
				held_drawn += meta[i].sample_id == held[h].meta.sample_id;
		}
		for (int h = 0; h < 8; h++)
			cr_assert_neq(atomic_load(&cistern__slotmeta(c, held[h].index_)->pins), 0,
				      "a get unpinned a sample the reader still holds");
	}
	/*
	 * A held sample is as likely a member as any: 8 x 8/64 a batch, 100
	 * expected, with a spread of about 9. Fewer than 50 means held samples
	 * were being passed over.
	 */
	cr_assert_gt(held_drawn, 50, "held samples drawn only %u times", held_drawn);
	cr_assert_eq(seen_sum(c, &pinned), reads + 8 + 100 * 8);
	cr_assert_eq(cistern_release_batch(c, held, 8), 0);
	seen_sum(c, &pinned);
	cr_assert_not(pinned, "every pin went with its release");
	if (other)
		cistern_detach(other);
}

Test(sole, sole_readers_get_batch_may_draw_what_it_holds_and_keeps_its_pins)
{
	get_batch_may_draw_what_it_holds_and_keeps_its_pins(CISTERN_SINGLE_READER);
}

Test(sole, any_readers_get_batch_may_draw_what_it_holds_and_keeps_its_pins)
{
	get_batch_may_draw_what_it_holds_and_keeps_its_pins(0);
}

/*
 * Draws from a reservoir barely larger than the batch repeat often, so the
 * batch is finished member by member; its members stay distinct.
 */
static void batch_of_nearly_every_sample_is_still_distinct(uint32_t flags)
{
	struct cistern *c = create_reservoir_flags(flags ? "so-rgetn" : "so-rgetn-any",
						   CISTERN_RESERVOIR, 40, flags);
	const char *name = seg_name_of(c);
	for (int i = 0; i < 40; i++)
		cr_assert_eq(cistern_put(c, &i, sizeof(i), NULL, 0), 0);
	unsigned reads = 0;
	struct cistern *other = flags ? NULL : second_reader(name, &reads);
	int buf[32];
	bool pinned;
	for (int round = 1; round <= 100; round++) {
		cr_assert_eq(cistern_get_batch(c, buf, sizeof(int), 32, NULL, NULL, 0), 32);
		assert_role(c, flags);
		bool seen[40] = {false};
		for (int i = 0; i < 32; i++) {
			cr_assert(buf[i] >= 0 && buf[i] < 40);
			cr_assert_not(seen[buf[i]], "sample %d twice in one batch", buf[i]);
			seen[buf[i]] = true;
		}
		cr_assert_eq(seen_sum(c, &pinned), reads + 32u * (unsigned)round);
		cr_assert_not(pinned);
	}
	/* The same for batches acquired in place. */
	struct cistern_sample s[32];
	for (int round = 1; round <= 100; round++) {
		cr_assert_eq(cistern_acquire_batch(c, s, 32, 0), 32);
		bool seen[40] = {false};
		for (int i = 0; i < 32; i++) {
			int v = *(const int *)s[i].data;
			cr_assert(v >= 0 && v < 40);
			cr_assert_not(seen[v], "sample %d twice in one acquired batch", v);
			seen[v] = true;
		}
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
		seen_sum(c, &pinned);
		cr_assert_not(pinned);
	}
	if (other)
		cistern_detach(other);
}

Test(sole, sole_readers_batch_of_nearly_every_sample_is_still_distinct)
{
	batch_of_nearly_every_sample_is_still_distinct(CISTERN_SINGLE_READER);
}

Test(sole, any_readers_batch_of_nearly_every_sample_is_still_distinct)
{
	batch_of_nearly_every_sample_is_still_distinct(0);
}

static void get_batch_into_too_narrow_a_stride_reads_nothing(uint32_t flags)
{
	struct cistern *c = create_reservoir_flags(flags ? "so-rnarrow" : "so-rnarrow-any",
						   CISTERN_RESERVOIR, 8, flags);
	const char *name = seg_name_of(c);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(cistern_put(c, "12345678", 8, NULL, 0), 0);
	unsigned reads = 0;
	struct cistern *other = flags ? NULL : second_reader(name, &reads);
	char buf[8 * 8];
	bool pinned;
	/* Twice: once becoming a reader (the general path), once a reader. */
	for (int k = 0; k < 2; k++) {
		cr_assert_eq(cistern_get_batch(c, buf, 4, 4, NULL, NULL, 0), -EMSGSIZE);
		assert_role(c, flags);
		cr_assert_eq(seen_sum(c, &pinned), reads, "nothing was counted as read");
		cr_assert_not(pinned);
	}
	cr_assert_eq(cistern_get_batch(c, buf, 8, 4, NULL, NULL, 0), 4,
		     "a wide enough stride reads");
	if (other)
		cistern_detach(other);
}

Test(sole, sole_readers_get_batch_into_too_narrow_a_stride_reads_nothing)
{
	get_batch_into_too_narrow_a_stride_reads_nothing(CISTERN_SINGLE_READER);
}

Test(sole, any_readers_get_batch_into_too_narrow_a_stride_reads_nothing)
{
	get_batch_into_too_narrow_a_stride_reads_nothing(0);
}

Test(sole, sole_readers_pin_keeps_a_full_reservoir_from_evicting_it)
{
	struct cistern *c = create_reservoir("so-rkeep", CISTERN_RESERVOIR, 4);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern_put(c, &i, sizeof(i), NULL, 0), 0);
	struct cistern_sample s[4];
	cr_assert_eq(cistern_acquire_batch(c, s, 4, 0), 4);
	int was[4];
	for (int i = 0; i < 4; i++)
		was[i] = *(const int *)s[i].data;
	int v = 99;
	cr_assert_eq(cistern_put(c, &v, sizeof(v), NULL, 0), -EAGAIN, "all seen but pinned");
	uint32_t freed = s[2].index_;
	cr_assert_eq(cistern_release(c, &s[2]), 0);
	cr_assert_eq(cistern_put(c, &v, sizeof(v), NULL, 0), 0, "the released one may go");
	cr_assert_eq(*(const int *)cistern__payload(c, freed), 99, "and it was the one evicted");
	for (int i = 0; i < 4; i++)
		if (i != 2)
			cr_assert_eq(*(const int *)s[i].data, was[i], "pinned, unchanged");
	cr_assert_eq(cistern_release_batch(c, s, 2), 0);
	cr_assert_eq(cistern_release(c, &s[3]), 0);
}

Test(sole, dead_sole_readers_pins_are_dropped_and_its_role_taken_over, .timeout = 60)
{
	struct cistern *c = create_reservoir("so-rdead", CISTERN_BATCH_RESERVOIR, 4);
	const char *name = seg_name_of(c);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern_put(c, &i, sizeof(i), NULL, 0), 0);
	pid_t pid = spawn_holder(name, HOLD_BATCH); /* the reader role, and pins on all four */
	cr_assert_gt(pid, 0);
	int v = 99;
	cr_assert_eq(cistern_put(c, &v, sizeof(v), NULL, 0), -EAGAIN, "pinned by the victim");
	struct cistern_sample s[4];
	cr_assert_eq(cistern_acquire_batch(c, s, 4, 0), -EBUSY, "the victim holds the role");
	kill_and_reap(pid);
	/* The dead holder is reclaimed (its pins and unfinished reads dropped), then the role is ours. */
	cr_assert_eq(cistern_acquire_batch(c, s, 4, 1000), 4);
	cr_assert_eq(cistern_release_batch(c, s, 4), 0);
	bool pinned;
	cr_assert_eq(seen_sum(c, &pinned), 4, "only the live read counts");
	cr_assert_not(pinned);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern_put(c, &v, sizeof(v), NULL, 0), 0,
			     "seen and unpinned: may go");
}

Test(sole, flags_are_kept_in_the_segment)
{
	struct cistern *c = create("so-cfg", 8, SOLE);
	struct cistern_config got;
	cr_assert_eq(cistern_config_get(c, &got), 0);
	cr_assert_eq(got.flags, SOLE);
}

Test(sole, second_producer_is_refused_while_the_first_lives)
{
	struct cistern *a = create("so-2p", 8, CISTERN_SINGLE_PRODUCER);
	const char *name = seg_name_of(a);
	struct cistern *b;
	cr_assert_eq(cistern_attach(name, &b), 0);
	cr_assert_eq(cistern_put(a, "x", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(b, "y", 1, NULL, 0), -EBUSY);
	struct cistern_slot sl;
	cr_assert_eq(cistern_reserve(b, &sl, 0), -EBUSY);
	/* Readers are not limited by the producer flag. */
	char buf[64];
	cr_assert_eq(cistern_get(b, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(buf[0], 'x');
	cistern_detach(b);
}

Test(sole, second_reader_is_refused_while_the_first_lives)
{
	struct cistern *a = create("so-2r", 8, CISTERN_SINGLE_READER);
	const char *name = seg_name_of(a);
	struct cistern *b;
	cr_assert_eq(cistern_attach(name, &b), 0);
	cr_assert_eq(cistern_put(a, "x", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(b, "y", 1, NULL, 0), 0, "producers are not limited");
	char buf[64];
	cr_assert_eq(cistern_get(a, buf, sizeof(buf), NULL, 0), 1);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(b, &s, 0), -EBUSY);
	cr_assert_eq(cistern_get(b, buf, sizeof(buf), NULL, 0), -EBUSY);
	cr_assert_eq(cistern_get(a, buf, sizeof(buf), NULL, 0), 1, "the refused get took nothing");
	cr_assert_eq(buf[0], 'y');
	cistern_detach(b);
}

Test(sole, role_passes_on_when_its_holder_detaches)
{
	struct cistern *c = create("so-pass", 8, SOLE);
	const char *name = seg_name_of(c);
	struct cistern *a, *b;
	cr_assert_eq(cistern_attach(name, &a), 0);
	cr_assert_eq(cistern_attach(name, &b), 0);
	char buf[64];
	cr_assert_eq(cistern_put(a, "1", 1, NULL, 0), 0);
	cr_assert_eq(cistern_get(a, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(cistern_put(b, "2", 1, NULL, 0), -EBUSY);
	cistern_detach(a);
	cr_assert_eq(cistern_put(b, "2", 1, NULL, 0), 0);
	cr_assert_eq(cistern_get(b, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(buf[0], '2');
	cistern_detach(b);
}

Test(sole, dead_producers_reservation_is_skipped_and_its_role_taken_over, .timeout = 60)
{
	struct cistern *c = create("so-dp", 8, SOLE);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	seg_detach(c); /* gives both roles back */
	pid_t pid = spawn_holder(name, HOLD_RESERVATION);
	cr_assert(pid > 0);
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0);
	cr_assert_eq(cistern_put(h, "b", 1, NULL, 0), -EBUSY, "the holder lives");
	kill_and_reap(pid);
	cr_assert_eq(cistern_put(h, "b", 1, NULL, 0), 0, "a dead holder's role is taken over");
	char buf[64];
	cr_assert_eq(cistern_get(h, buf, sizeof(buf), NULL, 1000), 1);
	cr_assert_eq(buf[0], 'a');
	cr_assert_eq(cistern_get(h, buf, sizeof(buf), NULL, 1000), 1,
		     "steps over the dead reservation");
	cr_assert_eq(buf[0], 'b');
	cistern_detach(h);
}

Test(sole, dead_readers_sample_is_handed_to_the_next_reader, .timeout = 60)
{
	struct cistern *c = create("so-dr", 8, SOLE);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), 0);
	pid_t pid = spawn_holder(name, HOLD_SAMPLE);
	cr_assert(pid > 0);
	char buf[64];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EBUSY, "the holder lives");
	kill_and_reap(pid);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 1000), 1);
	cr_assert_eq(buf[0], 'a', "the dead reader's sample comes first, again");
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 1000), 1);
	cr_assert_eq(buf[0], 'b');
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN);
}

/*
 * A producer and a reader process through a small ring, many laps, then end
 * of data: every sample arrives once, in order, intact, and the reader sees
 * CISTERN_EOD only after the last one (the close against the producer's
 * plain tail store, fifo_drained()).
 */
/*
 * One producer process puts count samples through a ring of `slots`, the
 * test's process reads them (stopping 200 µs after every `nap_every`, if
 * not 0, so that the ring fills) and checks each one and the order.
 */
static void hand_off_ring(const char *tag, uint32_t flags, uint32_t count, uint64_t slots,
			  uint32_t nap_every)
{
	struct cistern_config cfg = {
		.slot_size = 64, .slot_count = slots, .flags = flags, .expected_producers = 1};
	struct cistern *c = seg_create(tag, cfg);
	const char *name = seg_name_of(c);
	pid_t prod = fork_child();
	if (prod == 0) {
		struct cistern *p;
		if (cistern_attach(name, &p) < 0)
			_exit(1);
		uint8_t msg[64];
		for (uint32_t i = 0; i < count; i++) {
			fill_payload(msg, sizeof(msg), 0, i);
			if (cistern_put(p, msg, sizeof(msg), NULL, -1) < 0)
				_exit(2);
		}
		_exit(cistern_producer_done(p) < 0 ? 3 : 0);
	}
	struct cistern *r;
	cr_assert_eq(cistern_attach(name, &r), 0);
	uint8_t buf[64];
	uint32_t got = 0, bad = 0;
	ssize_t n;
	while ((n = cistern_get(r, buf, sizeof(buf), NULL, 10000)) == 64) {
		bad += !check_payload(buf, sizeof(buf), 0, got);
		if (++got % (nap_every ? nap_every : UINT32_MAX) == 0)
			usleep(200);
	}
	cr_assert_eq(n, CISTERN_EOD, "ended with %zd after %u samples", n, got);
	cr_assert_eq(got, count);
	cr_assert_eq(bad, 0, "%u samples out of order or damaged", bad);
	cr_assert_eq(reap_all(), 0);
	cistern_detach(r);
	seg_drop(c); /* a test may hand off through the same ring again */
}

static void hand_off(const char *tag, uint32_t flags, uint32_t count)
{
	hand_off_ring(tag, flags, count, 16, 0);
}

Test(sole, single_producer_and_reader_hand_off_every_sample_in_order, .timeout = 120)
{
	hand_off("so-ho", SOLE, 200000);
}

Test(sole, end_of_data_never_comes_before_the_last_sample, .timeout = 120)
{
	/* Many short runs: each close races the producer's last plain claims. */
	for (int i = 0; i < 100; i++)
		hand_off("so-eod", CISTERN_SINGLE_PRODUCER, 50);
}

Test(sole, short_buffer_get_keeps_the_sample_for_the_next_get)
{
	struct cistern *c = create("so-short", 8, SOLE);
	cr_assert_eq(cistern_put(c, "12345678", 8, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "abcdefgh", 8, NULL, 0), 0);
	char buf[8];
	/* The first get takes the role; the next ones go straight to the sole path. */
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 8);
	cr_assert_eq(memcmp(buf, "12345678", 8), 0);
	struct cistern_meta pm = {.sim_id = 7, .time_step = 9};
	cr_assert_eq(cistern_put(c, "ABCDEFGH", 8, &pm, 0), 0);
	cr_assert_eq(pm.sample_id, 2, "the put says the id it gave");
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, buf, 2, &m, 0), -EMSGSIZE);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), &m, 0), 8);
	cr_assert_eq(memcmp(buf, "abcdefgh", 8), 0, "the refused sample comes back first");
	cr_assert_eq(m.sample_id, 1);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), &m, 0), 8);
	cr_assert_eq(memcmp(buf, "ABCDEFGH", 8), 0);
	cr_assert_eq(m.sample_id, 2);
	cr_assert_eq(m.sim_id, 7);
	cr_assert_eq(m.time_step, 9);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 3);
	cr_assert_eq(st.gets, 3, "the refused get is not counted");
}

/*
 * The one-step put and get copy short payloads with fixed-size moves chosen
 * by length, and longer ones on a path of their own: every length from 0 to
 * past the inline limit comes back exact with its metadata, and nothing past
 * it is written in the reader's buffer. `wide`: with the copies compiled for
 * AVX2 (lib/policy/fifo/fifo_copy.c, put_wide()), else with those of any x86-64.
 */
static void every_length_round_trips(bool wide)
{
	if (wide && !cistern__wide_copies())
		cr_skip_test("this processor has no AVX2");
	struct cistern *c = seg_create(
		"so-len",
		(struct cistern_config){.slot_size = 100, .slot_count = 4, .flags = SOLE});
	c->wide_copies = wide;
	cistern__fifo_steps(c); /* the steps are chosen by it */
	uint8_t in[100], out[110];
	/* The first put and get take the roles on the general path. */
	cr_assert_eq(cistern_put(c, in, 1, NULL, 0), 0);
	cr_assert_eq(cistern_get(c, out, sizeof(out), NULL, 0), 1);
	for (size_t len = 0; len <= 100; len++) {
		for (size_t i = 0; i < sizeof(in); i++)
			in[i] = (uint8_t)(len * 31 + i * 7 + 1);
		memset(out, 0xee, sizeof(out));
		struct cistern_meta pm = {.sim_id = (uint32_t)len + 5,
					  .time_step = (uint32_t)len * 3};
		cr_assert_eq(cistern_put(c, in, len, &pm, 0), 0, "len %zu", len);
		struct cistern_meta gm = {0};
		cr_assert_eq(cistern_get(c, out, sizeof(out), &gm, 0), (ssize_t)len, "len %zu",
			     len);
		cr_assert_eq(memcmp(out, in, len), 0, "len %zu: payload differs", len);
		cr_assert_eq(gm.sample_id, pm.sample_id, "len %zu", len);
		cr_assert_eq(gm.sample_id, 2 * len + 1, "len %zu: ids follow the puts", len);
		cr_assert_eq(gm.sim_id, len + 5, "len %zu", len);
		cr_assert_eq(gm.time_step, len * 3, "len %zu", len);
		for (size_t i = len; i < sizeof(out); i++)
			cr_assert_eq(out[i], 0xee, "len %zu: byte %zu written past the sample", len,
				     i);
		/* The same through the holder's batch (lib/policy/fifo/fifo_copy.c, gather_as()). */
		memset(out, 0xee, sizeof(out));
		cr_assert_eq(cistern_put(c, in, len, &pm, 0), 0, "len %zu", len);
		size_t blen = 999;
		cr_assert_eq(cistern_get_batch(c, out, sizeof(out), 1, &blen, &gm, 0), 1, "len %zu",
			     len);
		cr_assert_eq(blen, len);
		cr_assert_eq(memcmp(out, in, len), 0, "len %zu: batch payload differs", len);
		cr_assert_eq(gm.sample_id, pm.sample_id, "len %zu", len);
		cr_assert_eq(gm.sim_id, len + 5, "len %zu", len);
		for (size_t i = len; i < sizeof(out); i++)
			cr_assert_eq(out[i], 0xee, "len %zu: batch wrote byte %zu", len, i);
	}
}

Test(sole, every_length_round_trips_exactly_through_the_one_step_put_and_get)
{
	every_length_round_trips(false);
}

Test(sole, every_length_round_trips_exactly_through_the_wide_one_step_put_and_get)
{
	every_length_round_trips(true);
}

Test(sole, put_after_close_fails_with_epipe_and_leaves_no_sample)
{
	struct cistern *c = create("so-close", 8, SOLE);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_close_reception(c), 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), -EPIPE);
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), CISTERN_EOD);
}

/*
 * Another process closes reception while the holder puts as fast as it can:
 * a put whose claim the close voids (-EPIPE) is not counted, and every put
 * that succeeded is both counted and read.
 */
Test(sole, puts_racing_a_close_are_counted_exactly, .timeout = 120)
{
	for (int round = 0; round < 40; round++) {
		struct cistern *c = create("so-cnt", 1 << 12, SOLE);
		const char *name = seg_name_of(c);
		_Atomic uint32_t *go = shared_alloc(sizeof(*go));
		cr_assert_not_null(go);
		if (fork_child() == 0) {
			struct cistern *k;
			if (cistern_attach(name, &k) < 0)
				_exit(1);
			atomic_store(go, 1);
			while (atomic_load(go) != 2)
				;
			for (volatile int spin = 0; spin < (round % 8) * 500; spin++)
				;
			_exit(cistern_close_reception(k) < 0 ? 2 : 0);
		}
		while (atomic_load(go) != 1)
			sched_yield();
		uint64_t ok = 0;
		int r;
		atomic_store(go, 2);
		/* Until the close: a full ring (-EAGAIN) only waits for it. */
		while ((r = cistern_put(c, "s", 1, NULL, 0)) == 0 || r == -EAGAIN)
			ok += r == 0;
		cr_assert_eq(r, -EPIPE, "round %d: the puts ended with %d", round, r);
		cr_assert_eq(reap_all(), 0);
		cr_assert_eq(atomic_load(&c->me->ctr.puts), ok, "round %d", round);
		char buf[8];
		uint64_t got = 0;
		ssize_t n;
		while ((n = cistern_get(c, buf, sizeof(buf), NULL, 0)) == 1)
			got++;
		cr_assert_eq(n, CISTERN_EOD, "round %d", round);
		cr_assert_eq(got, ok, "round %d", round);
		seg_drop(c);
	}
}

Test(sole, dump_and_restore_keep_the_flags_and_free_the_roles, .timeout = 60)
{
	char path[128];
	struct cistern *c = create("so-dump", 8, SOLE);
	const char *name = seg_name_of(c), *copy = seg_name("so-dump2");
	snprintf(path, sizeof(path), "/tmp/cistern-test-sole-%d.dump", (int)getpid());
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), 0);
	/* c holds the producer role while the dump is taken. */
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	unlink(path);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	struct cistern_config cfg;
	cr_assert_eq(cistern_config_get(r, &cfg), 0);
	cr_assert_eq(cfg.flags, SOLE);
	cr_assert_eq(cistern_put(r, "c", 1, NULL, 0), 0, "nobody holds the role in the copy");
	char buf[8];
	const char *want = "abc";
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(cistern_get(r, buf, sizeof(buf), NULL, 0), 1);
		cr_assert_eq(buf[0], want[i]);
	}
	cistern_detach(r);
}

static void *unlock_later(void *arg)
{
	usleep(50 * 1000);
	close(*(int *)arg); /* drops the OFD lock taken on it */
	return NULL;
}

/*
 * A dead holder's reclaim that someone else has started (here: the test holds
 * its intent lock, as a sweeper does for the whole reclaim) is waited for,
 * not answered with -EBUSY.
 */
Test(sole, role_of_a_dead_holder_being_reclaimed_elsewhere_is_waited_for, .timeout = 60)
{
	char shm[96];
	struct cistern *c = create("so-wait", 8, SOLE);
	const char *name = seg_name_of(c);
	pid_t pid = spawn_holder(name, HOLD_RESERVATION);
	cr_assert(pid > 0);
	uint32_t holder = atomic_load(&c->hdr->sole_producer);
	cr_assert(holder > 0, "the holder took the role");
	kill_and_reap(pid);
	snprintf(shm, sizeof(shm), "/cistern.%s", name);
	int fd = shm_open(shm, O_RDWR, 0);
	cr_assert(fd >= 0);
	struct flock fl = {.l_type = F_WRLCK,
			   .l_whence = SEEK_SET,
			   .l_start = CISTERN_INTENT_BASE + (off_t)(holder - 1),
			   .l_len = 1};
	cr_assert_eq(fcntl(fd, F_OFD_SETLK, &fl), 0);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, unlock_later, &fd), 0);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0,
		     "waited for the reclaim, then took the role");
	pthread_join(t, NULL);
	cr_assert_eq(atomic_load(&c->hdr->sole_producer), c->owner);
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 1000), 1,
		     "the dead reservation is skipped");
	cr_assert_eq(buf[0], 'x');
}

/*
 * A producer and a reader pinned to CPUs `pcpu` and `rcpu` pass `n` samples
 * through a one-slot FIFO, so that each waits for the other at every sample.
 * Returns the producer's count of waits that yielded at once because the
 * reader last waited on its CPU; checks every sample arrived in order.
 */
static uint64_t hand_off_on(const char *tag, int pcpu, int rcpu, uint32_t flags, int n)
{
	struct cistern *c = create(tag, 1, flags);
	const char *name = seg_name_of(c);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET((size_t)rcpu, &set);
		struct cistern *r = NULL;
		if (sched_setaffinity(0, sizeof set, &set) != 0 || cistern_attach(name, &r) != 0)
			_exit(2);
		for (int i = 0; i < n; i++) {
			uint8_t buf[64];
			if (cistern_get(r, buf, sizeof buf, NULL, 10000) != 64 ||
			    !check_payload(buf, 64, 1, (uint32_t)i))
				_exit(3);
		}
		_exit(0);
	}
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET((size_t)pcpu, &set);
	cr_assert_eq(sched_setaffinity(0, sizeof set, &set), 0);
	for (int i = 0; i < n; i++) {
		uint8_t buf[64];
		fill_payload(buf, 64, 1, (uint32_t)i);
		cr_assert_eq(cistern_put(c, buf, 64, NULL, 10000), 0);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reader status %d", st);
	uint64_t here = c->cpu_shared_waits;
	return here;
}

Test(sole, waiter_yields_at_once_to_its_counterpart_on_the_same_cpu, .timeout = 60)
{
	/* With the flags, and with the automatic roles of a lone producer and reader. */
	cr_assert_gt(hand_off_on("so-cpu1", 0, 0, SOLE, 2000), 0);
	cr_assert_gt(hand_off_on("so-cpu1a", 0, 0, 0, 2000), 0);
}

Test(sole, waiter_on_another_cpu_than_its_counterpart_keeps_spinning, .timeout = 60)
{
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		cr_skip_test("needs two CPUs");
	cr_assert_eq(hand_off_on("so-cpu2", 0, 1, SOLE, 2000), 0);
	cr_assert_eq(hand_off_on("so-cpu2a", 0, 1, 0, 2000), 0);
}

/*
 * The sole producer's write prefetches (lib/policy/fifo/fifo.h, put_prefetch()): which
 * instruction, how far ahead, where the slot ahead wraps, and that a full
 * ring stops them for a while. They are hints, which change no result, so
 * what is checked is what decides them; the hand-off below runs the path
 * with them switching on and off.
 */

/* Whether /proc/cpuinfo lists `flag` among the first processor's flags. */
static bool cpuinfo_has(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	cr_assert_not_null(f);
	char line[8192];
	bool has = false, seen = false;
	size_t n = strlen(flag);
	while (!seen && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		seen = true;
		for (char *p = strstr(line, flag); p; p = strstr(p + 1, flag))
			if (p[-1] == ' ' && (p[n] == ' ' || p[n] == '\n'))
				has = true;
	}
	fclose(f);
	cr_assert(seen, "no flags line in /proc/cpuinfo");
	return has;
}

Test(sole, the_producer_prefetches_with_prefetchw_exactly_where_the_processor_has_it)
{
	bool want = false;
#if defined(__x86_64__) || defined(__i386__)
	want = cpuinfo_has("3dnowprefetch");
#endif
	cr_assert_eq(cistern__has_prefetchw(), want);
	struct cistern *c = create("so-pfw", 8, SOLE);
	cr_assert_eq(c->write_prefetch, want, "the handle follows the processor");
}

Test(sole, the_producer_prefetches_sixteen_slots_ahead_or_a_quarter_of_a_smaller_ring)
{
	static const uint64_t slots[] = {1, 3, 4, 7, 8, 63, 64, 65, 1024, UINT64_C(1) << 28};
	static const uint32_t ahead[] = {0, 0, 1, 1, 2, 15, 16, 16, 16, 16};
	for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++)
		cr_assert_eq(cistern__put_ahead(slots[i]), ahead[i], "%llu slots",
			     (unsigned long long)slots[i]);
	struct cistern *c = create("so-pfa", 12, SOLE);
	cr_assert_eq(c->put_ahead, 3, "a handle on 12 slots looks 3 ahead");
}

Test(sole, the_slot_ahead_wraps_inside_rings_of_any_size)
{
	static const uint64_t sizes[] = {1, 2, 3, 5, 8, 37, 1000, 1024};
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint64_t n = sizes[k];
		uint64_t aheads[] = {0, n / 4, n - 1};
		for (size_t a = 0; a < 3; a++)
			for (uint64_t i = 0; i < n; i++)
				cr_assert_eq(cistern__slot_ahead(i, aheads[a], n),
					     (i + aheads[a]) % n,
					     "slot %llu, %llu ahead, ring of %llu",
					     (unsigned long long)i, (unsigned long long)aheads[a],
					     (unsigned long long)n);
	}
}

Test(sole, a_put_that_finds_the_ring_full_stops_the_prefetches_for_the_next_puts)
{
	struct cistern *c = create("so-pfq", 8, SOLE);
	uint8_t msg[64] = {0}, out[64];
	/* The first put and get take the roles on the general path. */
	cr_assert_eq(cistern_put(c, msg, sizeof(msg), NULL, 0), 0);
	cr_assert_eq(cistern_get(c, out, sizeof(out), NULL, 0), 64);
	cr_assert(c->producing == CISTERN_HOLD_SOLE && cistern__reads_alone(c));
	cr_assert_eq(c->put_quiet, 0, "a producer that never found the ring full prefetches");
	for (int i = 0; i < 8; i++)
		cr_assert_eq(cistern_put(c, msg, sizeof(msg), NULL, 0), 0);
	cr_assert_eq(c->put_quiet, 0);
	cr_assert_eq(cistern_put(c, msg, sizeof(msg), NULL, 0), -EAGAIN, "the ring is full");
	uint64_t quiet = c->put_quiet;
	cr_assert_gt(quiet, 8, "a full ring stops the prefetches for more than a lap of 8");
	/* Each put from then on counts one down. */
	for (uint64_t i = 1; i <= 5; i++) {
		cr_assert_eq(cistern_get(c, out, sizeof(out), NULL, 0), 64);
		cr_assert_eq(cistern_put(c, msg, sizeof(msg), NULL, 0), 0);
		cr_assert_eq(c->put_quiet, quiet - i);
	}
}

Test(sole, a_ring_of_no_power_of_two_hands_off_every_sample_as_the_prefetches_come_and_go,
     .timeout = 120)
{
	/*
	 * 37 slots (the slot ahead wraps by subtraction, not a mask) and a
	 * reader that stops now and then, so that the ring fills (which stops
	 * the producer's prefetches) and empties again (which lets them
	 * resume): every sample arrives whole and in order.
	 */
	hand_off_ring("so-pf37", SOLE, 100000, 37, 5000);
}
