/* SPDX-License-Identifier: MIT */
/*
 * test_policies.c - FIRO and the reservoirs in one process: what each read and
 * put does, watermarks, eviction rules, pins, pairs, batches, end of data.
 */
#include <criterion/criterion.h>

#include "helpers.h"
#include "policy/reservoir/pick.h"
#include "policy/reservoir/reservoir.h"
#include "peek.h"

/*
 * Every test's segments go through seg_create(); a test ends with seg_drop(),
 * which checks that its segment detaches and unlinks, and the suites'
 * fixture removes what a failed assertion leaves behind.
 */
TestSuite(firo, .fini = seg_fini);
TestSuite(reservoir, .fini = seg_fini);
TestSuite(fifo_evict, .fini = seg_fini);
TestSuite(sim_paired, .fini = seg_fini);
TestSuite(batch, .fini = seg_fini);
TestSuite(policies, .fini = seg_fini);
TestSuite(layout, .fini = seg_fini);

/* A `policy` segment whose samples are one uint32_t each: its configuration, or itself. */
static struct cistern_config u32_cfg(enum cistern_policy policy, uint64_t slots, uint64_t watermark)
{
	return (struct cistern_config){
		.policy = policy, .slot_size = 4, .slot_count = slots, .watermark = watermark};
}

static struct cistern *u32_seg(const char *tag, enum cistern_policy policy, uint64_t slots,
			       uint64_t watermark)
{
	return seg_create(tag, u32_cfg(policy, slots, watermark));
}

static void put_u32(struct cistern *c, uint32_t v, uint32_t sim, uint32_t step)
{
	struct cistern_meta m = {.sim_id = sim, .time_step = step};
	int r = cistern_put(c, &v, sizeof(v), &m, 0);
	cr_assert_eq(r, 0, "put %u: %s", v, cistern_strerror(r));
}

/* Put the values 0 to n - 1 (simulation 0, step 0). */
static void fill_u32(struct cistern *c, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		put_u32(c, i, 0, 0);
}

static struct cistern_stats stats(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st;
}

/* Drain after close; returns how many samples; marks payload values in `seen`. */
static int drain(struct cistern *c, uint8_t *seen, size_t nseen)
{
	int n = 0;
	uint32_t v;
	ssize_t r;
	while ((r = cistern_get(c, &v, sizeof(v), NULL, 0)) == 4) {
		if (seen && v < nseen)
			seen[v]++;
		n++;
	}
	cr_assert_eq(r, CISTERN_EOD, "drain ended with %s", cistern_strerror((int)r));
	return n;
}

/* ---- FIRO ---- */

Test(firo, reads_wait_until_population_exceeds_watermark)
{
	struct cistern *c = u32_seg("firo-wm", CISTERN_FIRO, 8, 3);
	uint32_t v;
	for (uint32_t i = 0; i < 3; i++)
		put_u32(c, i, 0, i);
	cr_assert_eq(cistern_get(c, &v, sizeof(v), NULL, 0), -EAGAIN, "population == watermark");
	put_u32(c, 3, 0, 3);
	cr_assert_eq(cistern_get(c, &v, sizeof(v), NULL, 0), 4);
	cr_assert_eq(stats(c).population, 3, "the read removed the sample (pseudo_epochs 1)");
	seg_drop(c);
}

/*
 * A fill takes the empty slots near its cursor and never needs the picker's
 * snapshot, whose rebuild reads every slot word.
 */
/*
 * A full reservoir whose reads barely keep ahead of its puts has few
 * evictable samples, each new one just read for the first time by another
 * handle. The producer learns of them from the segment's log of first reads
 * instead of rebuilding its snapshot (a read of every slot word) on each put,
 * and still evicts only samples that were seen.
 */
/*
 * A read that draws many members whose pin then fails forgets each one
 * (a tombstone in the batch's set). Once tombstones fill the set's table,
 * a lookup must still end: the set takes the next index in a tombstone's
 * place and still knows the indices it holds. (Readers took samples for
 * good after close and spun here for ever.)
 */
Test(reservoir, a_batch_set_full_of_forgotten_draws_still_takes_new_ones, .timeout = 10)
{
	struct cistern *c = seg_create("scratch", u32_cfg(CISTERN_RESERVOIR, 64, 1));
	struct cistern_scratch *set = &cistern__rs(c)->scratch;
	cr_assert_eq(cistern__scratch_reset(c, 1), 0);
	uint32_t cap = set->cap;
	for (uint32_t i = 0; i < 4 * cap; i++) {
		cr_assert(cistern__scratch_add(set, i), "draw %u taken as a repeat", i);
		cistern__scratch_forget(set, i);
	}
	cr_assert(cistern__scratch_add(set, 7 * cap), "a new draw after the table filled");
	cr_assert_not(cistern__scratch_add(set, 7 * cap), "a held index taken twice");
	cr_assert(cistern__scratch_add(set, 7 * cap + 1));
	seg_drop(c);
}

Test(reservoir, a_full_reservoirs_producer_finds_newly_seen_samples_without_a_rescan)
{
	struct cistern *p = u32_seg("res-seenlog", CISTERN_RESERVOIR, 4096, 1);
	struct cistern *r;
	cr_assert_eq(cistern_attach(seg_name_of(p), &r), 0);
	fill_u32(p, 4096);
	struct cistern_sample s;
	for (uint32_t i = 0; i < 500; i++) {
		cr_assert_eq(cistern_acquire(r, &s, 0), 0);
		cr_assert_eq(cistern_release(r, &s), 0);
		put_u32(p, 4096 + i, 0, 0);
	}
	struct cistern_stats st = stats(p);
	cr_assert_geq(st.evictions, 500);
	cr_assert_eq(st.evicted_unseen, 0);
	/*
	 * One rebuild to start from and the periodic one every slot_count / 16
	 * picks (2 here); without the log it would be one per put.
	 */
	cr_assert_leq(cistern__rs(p)->pick_evict.refreshes, 5, "the producer rescanned %lu times",
		      (unsigned long)cistern__rs(p)->pick_evict.refreshes);
	cistern_detach(r);
	seg_drop(p);
}

/*
 * With the log, each producer's evictable snapshot is exactly the evictable
 * set after its put (reads released before each put, three producers taking
 * turns): it learns of every first read and of the others' evictions, so its
 * uniform pick is over every evictable sample and never lands on a slot that
 * another producer refilled.
 */
Test(reservoir, each_producers_evictable_snapshot_follows_first_reads_and_evictions)
{
	enum { PRODUCERS = 3 };
	struct cistern *p[PRODUCERS];
	p[0] = u32_seg("res-seenset", CISTERN_RESERVOIR, 1024, 1);
	for (int k = 1; k < PRODUCERS; k++)
		cr_assert_eq(cistern_attach(seg_name_of(p[0]), &p[k]), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(seg_name_of(p[0]), &r), 0);
	fill_u32(p[0], 1024);
	struct cistern_sample s[4];
	unsigned checked = 0;
	for (uint32_t round = 0; round < 300; round++) {
		cr_assert_eq(cistern_acquire_batch(r, s, 4, 0), 4);
		cr_assert_eq(cistern_release_batch(r, s, 4), 0);
		struct cistern *q = p[round % PRODUCERS];
		put_u32(q, 1024 + round, 0, 0);
		/* Until a pick's probes first miss, a producer has built no snapshot. */
		if (!cistern__rs(q)->pick_evict.set)
			continue;
		checked++;
		uint64_t evictable = 0;
		for (uint32_t i = 0; i < 1024; i++) {
			struct cistern_slotmeta *m = cistern__slotmeta(q, i);
			bool ev = sw_state(atomic_load(&m->word)) == RS_HELD &&
				  atomic_load(&m->seen) >= 1 && atomic_load(&m->pins) == 0;
			evictable += ev;
			if (ev)
				cr_assert(
					roaring_bitmap_contains(cistern__rs(q)->pick_evict.set, i),
					"round %u: evictable slot %u missing from the snapshot",
					round, i);
		}
		cr_assert_eq(roaring_bitmap_get_cardinality(cistern__rs(q)->pick_evict.set),
			     evictable,
			     "round %u: the snapshot holds samples that are not evictable", round);
	}
	cr_assert_geq(checked, 250, "the snapshots were built only %u rounds in", 300 - checked);
	for (int k = 0; k < PRODUCERS; k++) {
		cr_assert_leq(cistern__rs(p[k])->pick_evict.refreshes, 5,
			      "producer %d rescanned %lu times", k,
			      (unsigned long)cistern__rs(p[k])->pick_evict.refreshes);
		if (k > 0)
			cistern_detach(p[k]);
	}
	cistern_detach(r);
	seg_drop(p[0]);
}

Test(reservoir, filling_an_empty_reservoir_needs_no_random_pick)
{
	struct cistern *c = u32_seg("res-fill", CISTERN_RESERVOIR, 4096, 1);
	fill_u32(c, 4096);
	cr_assert_eq(stats(c).population, 4096);
	cr_assert_eq(cistern__rs(c)->pick_empty.refreshes, 0,
		     "a fill rebuilt the empty-slot snapshot (%lu times)",
		     (unsigned long)cistern__rs(c)->pick_empty.refreshes);
	seg_drop(c);
}

/*
 * In a full FIRO, the one empty slot is the one a read just emptied, in
 * another handle: the producer finds it through the segment's vacancy
 * hints, not by rebuilding its snapshot (a read of every slot word) on
 * every put. Every sample put is still read exactly once.
 */
Test(firo, a_full_firos_producer_refills_what_a_reader_emptied_without_a_rescan)
{
	struct cistern *p = u32_seg("firo-vac", CISTERN_FIRO, 4096, 1);
	struct cistern *r;
	cr_assert_eq(cistern_attach(seg_name_of(p), &r), 0);
	static bool got[4096 + 500];
	fill_u32(p, 4096);
	uint32_t v = 0;
	for (uint32_t i = 4096; i < 4096 + 500; i++) {
		cr_assert_eq(cistern_get(r, &v, sizeof(v), NULL, 0), 4);
		cr_assert(v < 4096 + 500 && !got[v], "sample %u read twice or never put", v);
		got[v] = true;
		put_u32(p, i, 0, 0);
	}
	cr_assert_eq(cistern__rs(p)->pick_empty.refreshes, 0, "a put rescanned every slot");
	cr_assert_eq(cistern_close_reception(p), 0);
	ssize_t n;
	while ((n = cistern_get(r, &v, sizeof(v), NULL, 0)) == 4) {
		cr_assert(v < 4096 + 500 && !got[v], "sample %u read twice or never put", v);
		got[v] = true;
	}
	cr_assert_eq(n, -ENODATA);
	for (uint32_t i = 0; i < 4096 + 500; i++)
		cr_assert(got[i], "sample %u lost", i);
	cistern_detach(r);
	seg_drop(p);
}

Test(firo, population_holds_at_the_watermark_then_drains_after_close)
{
	struct cistern *c = u32_seg("firo-hold", CISTERN_FIRO, 64, 10);
	uint32_t v;
	for (uint32_t i = 0; i < 500; i++) {
		put_u32(c, i, 0, 0);
		ssize_t r = cistern_get(c, &v, sizeof(v), NULL, 0);
		cr_assert(i < 10 ? r == -EAGAIN : r == 4);
		cr_assert_eq(stats(c).population, i < 10 ? i + 1 : 10);
	}
	cr_assert_eq(cistern_close_reception(c), 0);
	cr_assert_eq(drain(c, NULL, 0), 10, "after close the watermark no longer applies");
	cr_assert_eq(stats(c).population, 0);
	seg_drop(c);
}

Test(firo, every_sample_is_read_exactly_pseudo_epochs_times)
{
	struct cistern_config cfg = u32_cfg(CISTERN_FIRO, 32, 5);
	cfg.pseudo_epochs = 3;
	struct cistern *c = seg_create("firo-ep", cfg);
	uint8_t reads[200] = {0};
	uint32_t v;
	for (uint32_t i = 0; i < 200; i++) {
		put_u32(c, i, 0, 0);
		while (cistern_get(c, &v, sizeof(v), NULL, 0) == 4)
			reads[v]++;
	}
	cistern_close_reception(c);
	drain(c, reads, 200);
	for (int i = 0; i < 200; i++)
		cr_assert_eq(reads[i], 3, "sample %d read %u times", i, reads[i]);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.gets, 600);
	cr_assert_eq(st.seen_hist[3], 200, "each left the buffer seen 3 times");
	seg_drop(c);
}

Test(firo, put_waits_when_full)
{
	struct cistern *c = u32_seg("firo-full", CISTERN_FIRO, 4, 3);
	fill_u32(c, 4);
	uint32_t v = 9;
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN);
	cr_assert_eq(cistern_get(c, &v, 4, NULL, 0), 4);
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), 0, "the read made room");
	seg_drop(c);
}

Test(firo, a_held_sample_belongs_to_its_reader_until_release)
{
	struct cistern_config cfg = u32_cfg(CISTERN_FIRO, 4, 1);
	cfg.pseudo_epochs = 5;
	struct cistern *c = seg_create("firo-own", cfg);
	put_u32(c, 1, 0, 0);
	put_u32(c, 2, 0, 0);
	struct cistern_sample a, b, x;
	cr_assert_eq(cistern_acquire(c, &a, 0), 0);
	cr_assert_eq(cistern_acquire(c, &b, 0), 0);
	cr_assert_neq(a.index_, b.index_, "the held one is not handed out again");
	cr_assert_eq(cistern_acquire(c, &x, 0), -EAGAIN);
	cr_assert_eq(cistern_release(c, &a), 0);
	cr_assert_eq(cistern_release(c, &a), -EINVAL, "released twice");
	cr_assert_eq(cistern_acquire(c, &x, 0), 0, "back after release (seen < pseudo_epochs)");
	cistern_release(c, &x);
	cistern_release(c, &b);
	seg_drop(c);
}

/* A FIRO sample handed back unread still owes all of its pseudo_epochs reads. */
Test(firo, a_sample_handed_back_unread_keeps_its_reads)
{
	struct cistern_config cfg = u32_cfg(CISTERN_FIRO, 4, 1);
	cfg.pseudo_epochs = 2;
	struct cistern *c = seg_create("firo-unacq", cfg);
	put_u32(c, 7, 0, 0);
	put_u32(c, 8, 0, 0);
	struct cistern_sample a;
	cr_assert_eq(cistern_acquire(c, &a, 0), 0);
	cr_assert_eq(cistern_unacquire(c, &a), 0);
	cr_assert_eq(cistern_unacquire(c, &a), -EINVAL, "handed back twice");
	cr_assert_eq(stats(c).gets, 0);
	cr_assert_eq(cistern_close_reception(c), 0);
	uint8_t seen[16] = {0};
	cr_assert_eq(drain(c, seen, sizeof(seen)), 4, "two samples, two reads each");
	cr_assert(seen[7] == 2 && seen[8] == 2, "reads: %u of 7, %u of 8", seen[7], seen[8]);
	seg_drop(c);
}

/* ---- Reservoir ---- */

/* One member of a batch handed back, the others released one by one, as documented. */
Test(reservoir, a_batch_member_handed_back_leaves_the_others_to_release)
{
	struct cistern_config cfg = u32_cfg(CISTERN_BATCH_RESERVOIR, 16, 4);
	cfg.batch_size = 4;
	struct cistern *c = seg_create("rs-unacq1", cfg);
	fill_u32(c, 8);
	struct cistern_sample batch[4];
	cr_assert_eq(cistern_acquire_batch(c, batch, 4, 0), 4);
	cr_assert_eq(cistern_unacquire(c, &batch[2]), 0);
	for (int i = 0; i < 4; i++)
		if (i != 2)
			cr_assert_eq(cistern_release(c, &batch[i]), 0, "member %d", i);
	bool pinned;
	cr_assert_eq(seen_sum(c, &pinned), 3, "three reads kept, one taken back");
	cr_assert(!pinned, "a pin is left");
	cr_assert_eq(stats(c).gets, 3);
	seg_drop(c);
}

/* A read handed back is taken back: its seen count, its pin, its get. */
Test(reservoir, a_sample_handed_back_unread_is_unpinned_and_unseen)
{
	struct cistern *c = u32_seg("rs-unacq", CISTERN_RESERVOIR, 16, 4);
	fill_u32(c, 8);
	struct cistern_sample one, batch[4];
	cr_assert_eq(cistern_acquire(c, &one, 0), 0);
	cr_assert_eq(cistern_acquire_batch(c, batch, 4, 0), 4);
	bool pinned;
	cr_assert_eq(seen_sum(c, &pinned), 5);
	cr_assert(pinned);
	cr_assert_eq(cistern_unacquire(c, &one), 0);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern_unacquire(c, &batch[i]), 0, "member %d", i);
	cr_assert_eq(seen_sum(c, &pinned), 0);
	cr_assert(!pinned, "a pin is left");
	cr_assert_eq(stats(c).gets, 0);
	cr_assert_eq(cistern_unacquire(c, &batch[0]), -EINVAL, "handed back twice");
	seg_drop(c);
}

Test(reservoir, reads_wait_for_the_watermark_and_keep_the_sample)
{
	struct cistern *c = u32_seg("res-wm", CISTERN_RESERVOIR, 8, 2);
	uint32_t v;
	put_u32(c, 0, 0, 0);
	cr_assert_eq(cistern_get(c, &v, 4, NULL, 0), -EAGAIN);
	put_u32(c, 1, 0, 0);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(cistern_get(c, &v, 4, NULL, 0), 4);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, 2, "reads do not remove while reception is open");
	cr_assert_eq(st.gets, 10);
	seg_drop(c);
}

Test(reservoir, a_full_buffer_with_nothing_seen_makes_producers_wait)
{
	struct cistern *c = u32_seg("res-bp", CISTERN_RESERVOIR, 4, 1);
	fill_u32(c, 4);
	uint32_t v = 99;
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN);
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 30), -ETIMEDOUT);
	cr_assert_eq(stats(c).evictions, 0);
	seg_drop(c);
}

Test(reservoir, a_put_into_a_full_buffer_evicts_only_seen_samples)
{
	struct cistern *c = u32_seg("res-ev", CISTERN_RESERVOIR, 4, 4);
	fill_u32(c, 4);
	/* Read until exactly one sample was seen; then one put can evict just it. */
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	uint32_t seen_value = *(const uint32_t *)s.data;
	cr_assert_eq(cistern_release(c, &s), 0);
	put_u32(c, 100, 0, 0);
	cr_assert_eq(cistern_put(c, &seen_value, 4, NULL, 0), -EAGAIN,
		     "the others are unseen: nothing left to evict");
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.evictions, 1);
	cr_assert_eq(st.evicted_unseen, 0);
	cr_assert_eq(st.seen_hist[1], 1, "the evicted sample left seen once");
	cistern_close_reception(c);
	uint8_t left[101] = {0};
	cr_assert_eq(drain(c, left, sizeof(left)), 4);
	cr_assert_eq(left[seen_value], 0, "the seen sample was the one evicted");
	cr_assert_eq(left[100], 1);
	seg_drop(c);
}

Test(reservoir, a_pinned_sample_is_never_evicted)
{
	struct cistern *c = u32_seg("res-pin", CISTERN_RESERVOIR, 2, 2);
	put_u32(c, 7, 0, 0);
	put_u32(c, 8, 0, 0);
	struct cistern_sample s[2];
	cr_assert_eq(cistern_acquire_batch(c, s, 2, 0), 2);
	uint32_t v = 9;
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN, "both seen but both pinned");
	uint32_t kept = *(const uint32_t *)s[1].data;
	cr_assert_eq(cistern_release(c, &s[0]), 0);
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), 0, "the unpinned one can go");
	cr_assert_eq(*(const uint32_t *)s[1].data, kept, "the pinned payload is intact");
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN);
	cr_assert_eq(cistern_release(c, &s[1]), 0);
	seg_drop(c);
}

Test(reservoir, the_same_sample_pinned_twice_by_one_reader_needs_two_releases)
{
	struct cistern *c = u32_seg("res-dup", CISTERN_RESERVOIR, 1, 1);
	put_u32(c, 5, 0, 0);
	struct cistern_sample a, b;
	cr_assert_eq(cistern_acquire(c, &a, 0), 0);
	cr_assert_eq(cistern_acquire(c, &b, 0), 0);
	cr_assert_eq(a.index_, b.index_);
	cr_assert_eq(cistern_release(c, &a), 0);
	uint32_t v = 6;
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN, "still pinned by b");
	cr_assert_eq(cistern_release(c, &b), 0);
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), 0);
	cr_assert_eq(cistern_release(c, &b), -EINVAL, "no pin left to release");
	seg_drop(c);
}

/* A reservoir of k slots, all holding samples (payloads 0..k-1). */
static struct cistern *full_reservoir(const char *tag, uint32_t k)
{
	struct cistern *c = u32_seg(tag, CISTERN_RESERVOIR, k, k);
	fill_u32(c, k);
	return c;
}

Test(reservoir, a_batch_pins_again_what_its_reader_already_pins)
{
	struct cistern *c = full_reservoir("res-bdup", 4);
	struct cistern_sample a[4], b[4];
	cr_assert_eq(cistern_acquire_batch(c, a, 4, 0), 4);
	cr_assert_eq(cistern_acquire_batch(c, b, 4, 0), 4, "the same four, pinned twice");
	cr_assert_eq(cistern_release_batch(c, a, 4), 0);
	uint32_t v = 9;
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN, "still pinned by the second batch");
	cr_assert_eq(cistern_release_batch(c, b, 4), 0);
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), 0);
	seg_drop(c);
}

/*
 * A reader that holds nothing tells a batch's repeats by its own pin bit;
 * one that holds samples keeps a list. Either way each member is one read
 * and every pin goes with its release.
 */
Test(reservoir, a_readers_batches_count_each_read_once_and_leave_no_pin)
{
	struct cistern *c = full_reservoir("res-bseen", 64);
	struct cistern_sample s[16], t[16];
	bool pinned;
	uint64_t reads = 0;
	unsigned held_drawn = 0;
	for (int round = 0; round < 50; round++) {
		cr_assert_eq(cistern_acquire_batch(c, s, 16, 0), 16);
		reads += 16;
		cr_assert_eq(seen_sum(c, &pinned), reads);
		for (int i = 0; i < 16; i++)
			for (int j = i + 1; j < 16; j++)
				cr_assert_neq(s[i].index_, s[j].index_, "distinct members");
		/* While the first is held: its members may be drawn again, and pinned twice. */
		cr_assert_eq(cistern_acquire_batch(c, t, 16, 0), 16);
		reads += 16;
		for (int i = 0; i < 16; i++)
			for (int j = 0; j < 16; j++)
				held_drawn += t[i].index_ == s[j].index_;
		cr_assert_eq(cistern_release_batch(c, s, 16), 0);
		cr_assert_eq(seen_sum(c, &pinned), reads);
		for (int i = 0; i < 16; i++)
			cr_assert_neq(atomic_load(&cistern__slotmeta(c, t[i].index_)->pins), 0,
				      "a member of the second batch was unpinned with the first");
		cr_assert_eq(cistern_release_batch(c, t, 16), 0);
		seen_sum(c, &pinned);
		cr_assert_not(pinned, "every pin went with its release");
	}
	/*
	 * A held sample is as likely a member as any: 16 x 16/64 a batch, 200
	 * expected, with a spread of about 12. Fewer than 100 means held
	 * samples were being passed over.
	 */
	cr_assert_gt(held_drawn, 100, "held samples drawn again only %u times", held_drawn);
	seg_drop(c);
}

/*
 * Another reader's pins on the slots are not this reader's repeats, and stay,
 * whether it acquires its batches or gathers them.
 */
Test(reservoir, another_readers_pins_are_not_taken_for_repeats)
{
	struct cistern *a = full_reservoir("res-bother", 20);
	struct cistern *b;
	cr_assert_eq(cistern_attach(seg_name_of(a), &b), 0);
	struct cistern_sample held[16], s[16];
	cr_assert_eq(cistern_acquire_batch(a, held, 16, 0), 16);
	uint64_t abit = UINT64_C(1) << cistern__rs(a)->pin_bit;
	for (int round = 0; round < 200; round++) {
		uint32_t v[16];
		if (round % 2) {
			cr_assert_eq(cistern_get_batch(b, v, sizeof(v[0]), 16, NULL, NULL, 0), 16);
		} else {
			cr_assert_eq(cistern_acquire_batch(b, s, 16, 0), 16);
			for (int i = 0; i < 16; i++)
				v[i] = *(const uint32_t *)s[i].data;
			cr_assert_eq(cistern_release_batch(b, s, 16), 0);
		}
		uint8_t hit[20] = {0};
		for (int i = 0; i < 16; i++) {
			cr_assert_lt(v[i], 20);
			cr_assert_eq(hit[v[i]]++, 0, "sample %u twice in one batch", v[i]);
		}
		for (int i = 0; i < 16; i++)
			cr_assert(atomic_load(&cistern__slotmeta(a, held[i].index_)->pins) & abit,
				  "the other reader's pin went with this reader's release");
	}
	cr_assert_eq(cistern_release_batch(a, held, 16), 0);
	cistern_detach(b);
	seg_drop(a);
}

Test(reservoir, release_batch_releases_the_rest_after_an_invalid_sample)
{
	struct cistern *c = full_reservoir("res-brel", 3);
	struct cistern_sample s[3];
	cr_assert_eq(cistern_acquire_batch(c, s, 3, 0), 3);
	cr_assert_eq(cistern_release(c, &s[1]), 0);
	cr_assert_eq(cistern_release_batch(c, s, 3), -EINVAL, "s[1] was released already");
	uint32_t v = 9;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), 0, "put %d: all three are unpinned",
			     i);
	cr_assert_eq(cistern_release_batch(c, s, 3), -EINVAL, "nothing left to release");
	seg_drop(c);
}

Test(reservoir, rate_limiter_bounds_reads_per_put)
{
	struct cistern *c = seg_create("res-rate",
				       (struct cistern_config){.policy = CISTERN_RESERVOIR,
							       .slot_size = 4,
							       .slot_count = 64,
							       .watermark = 4,
							       .reads_per_put = 2,
							       .rate_slack = 1});
	uint32_t v;
	fill_u32(c, 4);
	/* Fill done: 2 * 0 + 1 reads allowed. */
	cr_assert_eq(cistern_get(c, &v, 4, NULL, 0), 4);
	cr_assert_eq(cistern_get(c, &v, 4, NULL, 0), -EAGAIN, "reader ahead of the ratio");
	put_u32(c, 4, 0, 0);
	cr_assert_eq(cistern_get(c, &v, 4, NULL, 0), 4);
	cr_assert_eq(cistern_get(c, &v, 4, NULL, 0), 4);
	cr_assert_eq(cistern_get(c, &v, 4, NULL, 0), -EAGAIN);
	/* Producer side: 2 * (puts_after_fill + 1) <= reads + 1 ? 2*2 <= 4: yes; then 6 > 4. */
	put_u32(c, 5, 0, 0);
	v = 6;
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN, "producer ahead of the ratio");
	seg_drop(c);
}

/* Put with timeout 0 until the limiter (or the room) says wait; how many went in. */
static int put_while_allowed(struct cistern *c, uint32_t *next)
{
	int k = 0;
	for (;;) {
		uint32_t v = *next;
		int r = cistern_put(c, &v, sizeof(v), NULL, 0);
		if (r == -EAGAIN)
			return k;
		cr_assert_eq(r, 0, "put: %s", cistern_strerror(r));
		(*next)++;
		k++;
	}
}

/*
 * The slack left 0 is reads_per_put, 2 here: below a batch of 16. Producers
 * stop two reads ahead, so a batch that waited for 16 reads of budget would
 * wait for ever; the batch starts once the reads before it are paid for.
 */
Test(reservoir, rate_limiter_admits_a_batch_above_the_default_slack)
{
	struct cistern *c = seg_create("res-rate-batch",
				       (struct cistern_config){.policy = CISTERN_RESERVOIR,
							       .slot_size = 4,
							       .slot_count = 256,
							       .watermark = 32,
							       .reads_per_put = 2});
	uint32_t next = 0, buf[16];
	for (int round = 0; round < 6; round++) {
		int k = put_while_allowed(c, &next);
		cr_assert_gt(k, 0, "round %d: the producer stopped before any put", round);
		int r = cistern_get_batch(c, buf, sizeof(buf[0]), 16, NULL, NULL, 0);
		cr_assert_eq(r, 16, "round %d: batch of 16 after %u puts: %s", round, next,
			     cistern_strerror(r));
	}
	/* Two reads per put after the fill, give or take one batch. */
	struct cistern_stats st = stats(c);
	cr_assert_leq(st.gets, 2 * (st.puts - 32) + 16);
	cr_assert_geq(st.gets + 16, 2 * (st.puts - 32));
	seg_drop(c);
}

/*
 * A slack set by hand is kept; a batch it could never admit is refused at
 * once, whatever the timeout, instead of waiting for budget that the
 * stopped producers will never make.
 */
Test(reservoir, rate_limiter_refuses_at_once_a_batch_its_slack_can_never_admit)
{
	struct cistern *c = seg_create("res-rate-never",
				       (struct cistern_config){.policy = CISTERN_RESERVOIR,
							       .slot_size = 4,
							       .slot_count = 256,
							       .watermark = 32,
							       .reads_per_put = 2,
							       .rate_slack = 4});
	uint32_t next = 0, buf[16];
	put_while_allowed(c, &next);
	cr_assert_eq(cistern_get_batch(c, buf, sizeof(buf[0]), 16, NULL, NULL, 3000), -EDEADLK);
	struct cistern_sample s[16];
	cr_assert_eq(cistern_acquire_batch(c, s, 16, 3000), -EDEADLK);
	/*
	 * Producers stop at a drift of 3 reads or more (puts come two reads at
	 * a time, 3 + 2 > 4), where a batch of 7 may start (3 >= 7 - 4) and
	 * one of 8 may not.
	 */
	cr_assert_eq(cistern_acquire_batch(c, s, 8, 0), -EDEADLK);
	for (int round = 0; round < 4; round++) {
		int r = cistern_get_batch(c, buf, sizeof(buf[0]), 7, NULL, NULL, 0);
		cr_assert_eq(r, 7, "round %d: %s", round, cistern_strerror(r));
		put_while_allowed(c, &next);
	}
	seg_drop(c);
}

/*
 * One read per four puts with the slack left 0: producers stop a quarter
 * of a read ahead, so a read that waited for a whole read of budget would
 * wait for ever. (Below one read per put only a lossy FIFOEvictReservoir:
 * the others' puts need reads.)
 */
Test(reservoir, rate_limiter_default_slack_admits_single_reads_below_one_read_per_put)
{
	struct cistern *c = seg_create(
		"res-rate-quarter", (struct cistern_config){.policy = CISTERN_FIFO_EVICT_RESERVOIR,
							    .flags = CISTERN_LOSSY,
							    .slot_size = 4,
							    .slot_count = 64,
							    .watermark = 4,
							    .reads_per_put = 0.25});
	uint32_t next = 0, v;
	for (int round = 0; round < 8; round++) {
		cr_assert_gt(put_while_allowed(c, &next), 0, "round %d", round);
		ssize_t r = cistern_get(c, &v, sizeof(v), NULL, 0);
		cr_assert_eq(r, 4, "round %d, after %u puts: %s", round, next,
			     cistern_strerror((int)r));
	}
	seg_drop(c);
}

/* ---- FIFOEvictReservoir ---- */

Test(fifo_evict, a_put_into_a_full_buffer_evicts_the_oldest)
{
	struct cistern *c = u32_seg("fe-old", CISTERN_FIFO_EVICT_RESERVOIR, 3, 3);
	fill_u32(c, 3);
	struct cistern_sample s[3];
	cr_assert_eq(cistern_acquire_batch(c, s, 3, 0), 3, "see them all");
	cr_assert_eq(cistern_release_batch(c, s, 3), 0);
	put_u32(c, 3, 0, 0);
	put_u32(c, 4, 0, 0);
	cistern_close_reception(c);
	uint8_t left[5] = {0};
	cr_assert_eq(drain(c, left, 5), 3);
	cr_assert(!left[0] && !left[1] && left[2] && left[3] && left[4],
		  "the two oldest went first");
	seg_drop(c);
}

Test(fifo_evict, waits_while_the_oldest_is_unseen)
{
	struct cistern *c = u32_seg("fe-wait", CISTERN_FIFO_EVICT_RESERVOIR, 2, 2);
	put_u32(c, 0, 0, 0);
	put_u32(c, 1, 0, 0);
	uint32_t v = 2;
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN);
	seg_drop(c);
}

Test(fifo_evict, lossy_evicts_the_oldest_unseen_and_counts_it)
{
	struct cistern_config cfg = u32_cfg(CISTERN_FIFO_EVICT_RESERVOIR, 2, 2);
	cfg.flags = CISTERN_LOSSY;
	struct cistern *c = seg_create("fe-lossy", cfg);
	fill_u32(c, 5);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.evictions, 3);
	cr_assert_eq(st.evicted_unseen, 3);
	cistern_close_reception(c);
	uint8_t left[5] = {0};
	cr_assert_eq(drain(c, left, 5), 2);
	cr_assert(left[3] && left[4]);
	seg_drop(c);
}

/* ---- SimPairedReservoir ---- */

static struct cistern_config paired_cfg(void)
{
	return (struct cistern_config){.policy = CISTERN_SIM_PAIRED_RESERVOIR,
				       .slot_size = 4,
				       .slot_count = 64,
				       .watermark = 2,
				       .sweep_size = 4,
				       .nb_time_steps = 10};
}

Test(sim_paired, samples_outside_the_bounds_are_refused)
{
	struct cistern *c = seg_create("sp-range", paired_cfg());
	uint32_t v = 1;
	struct cistern_meta m = {.sim_id = 4, .time_step = 0};
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), -ERANGE);
	m = (struct cistern_meta){.sim_id = 0, .time_step = 10};
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), -ERANGE);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.puts, 0);
	cr_assert_eq(st.population, 0, "the refused puts left nothing behind");
	seg_drop(c);
}

Test(sim_paired, a_pair_is_one_simulation_at_consecutive_steps)
{
	struct cistern *c = seg_create("sp-pair", paired_cfg());
	/* Interleave simulations, leave gaps: pairs exist only where steps follow. */
	uint32_t steps[] = {0, 1, 2, 4, 5, 8};
	for (uint32_t sim = 0; sim < 4; sim++)
		for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++)
			put_u32(c, sim * 100 + steps[k], sim, steps[k]);
	for (int i = 0; i < 500; i++) {
		struct cistern_sample p[2];
		cr_assert_eq(cistern_acquire_pair(c, p, 0), 0);
		cr_assert_eq(p[0].meta.sim_id, p[1].meta.sim_id);
		cr_assert_eq(p[0].meta.time_step + 1, p[1].meta.time_step);
		cr_assert_eq(*(const uint32_t *)p[0].data,
			     p[0].meta.sim_id * 100 + p[0].meta.time_step, "payload matches meta");
		cr_assert_neq(p[0].meta.time_step, 8, "step 8 has no successor held");
		cr_assert_eq(cistern_release_pair(c, p), 0);
	}
	seg_drop(c);
}

Test(sim_paired, single_reads_are_refused)
{
	struct cistern *c = seg_create("sp-single", paired_cfg());
	put_u32(c, 0, 0, 0);
	put_u32(c, 1, 0, 1);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EINVAL);
	seg_drop(c);
}

Test(sim_paired, no_pair_held_means_wait)
{
	struct cistern *c = seg_create("sp-none", paired_cfg());
	put_u32(c, 0, 0, 0);
	put_u32(c, 1, 1, 0);
	put_u32(c, 2, 0, 2);
	struct cistern_sample p[2];
	cr_assert_eq(cistern_acquire_pair(c, p, 0), -EAGAIN);
	put_u32(c, 3, 0, 1);
	cr_assert_eq(cistern_acquire_pair(c, p, 0), 0, "(0,1) or (1,2) now");
	cistern_release_pair(c, p);
	seg_drop(c);
}

Test(sim_paired, after_close_pairs_go_once_and_the_unpaired_are_counted)
{
	struct cistern *c = seg_create("sp-close", paired_cfg());
	put_u32(c, 0, 0, 0);
	put_u32(c, 1, 0, 1);
	put_u32(c, 2, 0, 2);
	put_u32(c, 3, 2, 5);
	cistern_close_reception(c);
	struct cistern_sample p[2];
	cr_assert_eq(cistern_acquire_pair(c, p, 0), 0);
	cr_assert_eq(cistern_release_pair(c, p), 0);
	cr_assert_eq(cistern_acquire_pair(c, p, 0), CISTERN_EOD);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.unpaired, 2, "one of sim 0's steps and sim 2's lone step");
	cr_assert_eq(st.population, 2);
	seg_drop(c);
}

Test(sim_paired, get_pair_copies_both_members)
{
	struct cistern *c = seg_create("sp-get", paired_cfg());
	put_u32(c, 70, 3, 6);
	put_u32(c, 71, 3, 7);
	uint32_t a = 0, b = 0;
	void *bufs[2] = {&a, &b};
	size_t len[2];
	struct cistern_meta meta[2];
	cr_assert_eq(cistern_get_pair(c, bufs, 4, len, meta, 0), 0);
	cr_assert_eq(a, 70);
	cr_assert_eq(b, 71);
	cr_assert_eq(meta[1].time_step, 7);
	cr_assert_eq(len[0], 4);
	seg_drop(c);
}

/* ---- BatchReservoir ---- */

static struct cistern_config batch_cfg(void)
{
	return (struct cistern_config){.policy = CISTERN_BATCH_RESERVOIR,
				       .slot_size = 4,
				       .slot_count = 64,
				       .watermark = 16,
				       .batch_size = 16};
}

Test(batch, members_of_a_batch_are_distinct)
{
	struct cistern *c = seg_create("b-dist", batch_cfg());
	fill_u32(c, 20);
	for (int k = 0; k < 200; k++) {
		struct cistern_sample s[16];
		cr_assert_eq(cistern_acquire_batch(c, s, 0, 0), 16);
		uint8_t hit[20] = {0};
		for (int i = 0; i < 16; i++) {
			uint32_t v = *(const uint32_t *)s[i].data;
			cr_assert_lt(v, 20);
			cr_assert_eq(hit[v]++, 0, "sample %u twice in one batch", v);
		}
		cr_assert_eq(cistern_release_batch(c, s, 16), 0);
	}
	seg_drop(c);
}

Test(batch, reads_wait_for_the_watermark)
{
	struct cistern *c = seg_create("b-wm", batch_cfg());
	fill_u32(c, 15);
	struct cistern_sample s[16];
	cr_assert_eq(cistern_acquire_batch(c, s, 16, 0), -EAGAIN);
	put_u32(c, 15, 0, 0);
	cr_assert_eq(cistern_acquire_batch(c, s, 16, 0), 16);
	cistern_release_batch(c, s, 16);
	seg_drop(c);
}

Test(batch, wrong_sizes_and_single_reads_are_refused)
{
	struct cistern *c = seg_create("b-size", batch_cfg());
	struct cistern_sample s[17];
	cr_assert_eq(cistern_acquire_batch(c, s, 17, 0), -EINVAL);
	cr_assert_eq(cistern_acquire(c, s, 0), -EINVAL);
	seg_drop(c);
}

/* A wrong size is a wrong size first, even beyond what a rate_slack set by hand admits. */
Test(batch, a_wrong_size_under_a_set_rate_slack_is_einval)
{
	struct cistern_config cfg = batch_cfg();
	cfg.reads_per_put = 1;
	cfg.rate_slack = 8.5; /* admits the batch of 16 (8 + 8.5), not one of 17 */
	struct cistern *c = seg_create("b-size-rate", cfg);
	struct cistern_sample s[17];
	uint32_t buf[17];
	cr_assert_eq(cistern_acquire_batch(c, s, 17, 0), -EINVAL);
	cr_assert_eq(cistern_get_batch(c, buf, sizeof(buf[0]), 17, NULL, NULL, 0), -EINVAL);
	seg_drop(c);
}

Test(batch, get_batch_gathers_into_one_array)
{
	struct cistern *c = seg_create("b-gather", batch_cfg());
	for (uint32_t i = 0; i < 16; i++)
		put_u32(c, 1000 + i, 0, i);
	uint32_t out[16];
	size_t len[16];
	struct cistern_meta meta[16];
	cr_assert_eq(cistern_get_batch(c, out, sizeof(uint32_t), 16, len, meta, 0), 16);
	uint32_t sum = 0;
	for (int i = 0; i < 16; i++) {
		cr_assert_eq(out[i], 1000 + meta[i].time_step, "row %d matches its metadata", i);
		cr_assert_eq(len[i], 4);
		sum += out[i];
	}
	cr_assert_eq(sum, 16 * 1000 + 120, "all sixteen, once each");
	seg_drop(c);
}

Test(batch, get_batch_copies_payloads_of_any_length)
{
	enum { N = 40, SIZE = 1024 };
	struct cistern *c = seg_create("b-glen",
				       (struct cistern_config){.policy = CISTERN_BATCH_RESERVOIR,
							       .slot_size = SIZE,
							       .slot_count = 64,
							       .watermark = N,
							       .batch_size = N});
	/* 0 to SIZE bytes: shorter and longer than a prefetch. */
	cr_assert_eq(put_length_ramp(c, N, SIZE, 0), 0);
	static uint8_t out[N][SIZE];
	size_t len[N];
	struct cistern_meta meta[N];
	cr_assert_eq(cistern_get_batch(c, out, SIZE, N, len, meta, 0), N);
	for (int i = 0; i < N; i++) {
		uint32_t step = meta[i].time_step;
		cr_assert_eq(len[i], step * SIZE / (N - 1));
		cr_assert(check_payload(out[i], len[i], 0, step), "row %d is sample %u", i, step);
	}
	seg_drop(c);
}

Test(batch, after_close_batches_remove_and_the_last_may_be_short)
{
	struct cistern *c = seg_create("b-close", batch_cfg());
	fill_u32(c, 40);
	cistern_close_reception(c);
	struct cistern_sample s[16];
	int total = 0, r;
	int sizes[4], k = 0;
	while ((r = cistern_acquire_batch(c, s, 16, 0)) > 0) {
		sizes[k++] = r;
		total += r;
		cr_assert_eq(cistern_release_batch(c, s, (size_t)r), 0);
	}
	cr_assert_eq(r, CISTERN_EOD);
	cr_assert_eq(total, 40);
	cr_assert_eq(k, 3);
	cr_assert(sizes[0] == 16 && sizes[1] == 16 && sizes[2] == 8);
	seg_drop(c);
}

/* ---- all random policies ---- */

Test(policies, a_reservoir_refuses_a_65th_pinning_reader)
{
	struct cistern_config cfg = u32_cfg(CISTERN_RESERVOIR, 4, 1);
	cfg.max_procs = 80;
	struct cistern *c = seg_create("pin64", cfg);
	put_u32(c, 1, 0, 0);
	struct cistern *h[65];
	struct cistern_sample s;
	for (int i = 0; i < 65; i++) {
		cr_assert_eq(cistern_attach(seg_name_of(c), &h[i]), 0);
		int r = cistern_acquire(h[i], &s, 0);
		cr_assert_eq(r, i < 64 ? 0 : -EUSERS, "reader %d: %s", i, cistern_strerror(r));
	}
	cistern_detach(h[0]);
	cr_assert_eq(cistern_acquire(h[64], &s, 0), 0, "a detached reader's bit is free again");
	for (int i = 1; i < 65; i++)
		cistern_detach(h[i]);
	seg_drop(c);
}

Test(policies, detach_drops_pins_and_their_unfinished_reads)
{
	struct cistern *c = u32_seg("pin-detach", CISTERN_RESERVOIR, 1, 1);
	put_u32(c, 1, 0, 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(seg_name_of(c), &r), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(r, &s, 0), 0);
	uint32_t v = 2;
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN, "pinned");
	cistern_detach(r);
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), -EAGAIN,
		     "unpinned, but a read never released does not count as seen");
	uint32_t x;
	cr_assert_eq(cistern_get(c, &x, 4, NULL, 0), 4);
	cr_assert_eq(cistern_put(c, &v, 4, NULL, 0), 0, "seen by a finished read: evictable");
	seg_drop(c);
}

/*
 * A sample whose predecessor is gone may only be waiting for its successor:
 * while a pair is held, a read makes something evictable, so a producer
 * waits rather than evict the lone sample unseen.
 */
Test(sim_paired, a_lone_sample_is_not_evicted_unseen_while_a_pair_can_still_be_read)
{
	struct cistern_config cfg = paired_cfg();
	cfg.slot_count = 3;
	struct cistern *c = seg_create("sp-lone", cfg);
	put_u32(c, 0, 0, 0);
	put_u32(c, 1, 0, 1);
	put_u32(c, 2, 1, 5); /* alone: (1,4) is gone, (1,6) not produced yet */
	uint32_t v = 3;
	struct cistern_meta m = {.sim_id = 2, .time_step = 0};
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), -EAGAIN,
		     "full, nothing seen, a pair still readable: wait");
	cr_assert_eq(stats(c).evicted_unseen, 0);
	struct cistern_sample p[2];
	cr_assert_eq(cistern_acquire_pair(c, p, 0), 0);
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), -EAGAIN, "the pair is pinned: still wait");
	cr_assert_eq(cistern_release_pair(c, p), 0);
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), 0, "a seen member of the pair goes");
	cr_assert_eq(stats(c).evicted_unseen, 0);
	/* (1,5) is still there, and its successor now makes a pair with it. */
	v = 4;
	m = (struct cistern_meta){.sim_id = 1, .time_step = 6};
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), 0);
	cr_assert_eq(stats(c).evicted_unseen, 0);
	cr_assert_eq(cistern_acquire_pair(c, p, 0), 0);
	cr_assert_eq(p[0].meta.sim_id, 1);
	cr_assert_eq(p[0].meta.time_step, 5);
	cr_assert_eq(p[1].meta.time_step, 6);
	cr_assert_eq(cistern_release_pair(c, p), 0);
	seg_drop(c);
}

Test(sim_paired, unseen_samples_in_a_pair_are_not_evicted_but_orphans_are)
{
	struct cistern_config cfg = paired_cfg();
	cfg.slot_count = 2;
	struct cistern *c = seg_create("sp-orphan", cfg);
	put_u32(c, 0, 0, 0);
	put_u32(c, 1, 0, 1);
	uint32_t v = 2;
	struct cistern_meta m = {.sim_id = 1, .time_step = 3};
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), -EAGAIN, "a pair no reader has seen stays");
	struct cistern_sample p[2];
	cr_assert_eq(cistern_acquire_pair(c, p, 0), 0);
	cr_assert_eq(cistern_release_pair(c, p), 0);
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), 0, "seen: evictable");
	cr_assert_eq(stats(c).evicted_unseen, 0);
	/* Held: the other seen step of sim 0 and (1,3). The seen one goes first. */
	m = (struct cistern_meta){.sim_id = 2, .time_step = 7};
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), 0);
	cr_assert_eq(stats(c).evicted_unseen, 0);
	/* Held: (1,3) and (2,7), both unseen, neither with a neighbour: no read can reach them. */
	m = (struct cistern_meta){.sim_id = 3, .time_step = 9};
	cr_assert_eq(cistern_put(c, &v, 4, &m, 0), 0, "an orphan is evicted rather than wedge");
	cr_assert_eq(stats(c).evicted_unseen, 1);
	seg_drop(c);
}

/* ---- Slot layout ---- */

/*
 * Every policy but the FIFO reads slots in random order; there a slot's
 * metadata line sits just before its payload, so that one random sample
 * costs one wait for memory, not two (segment.c, cistern__compute_layout()).
 */
Test(layout, random_reading_policies_keep_each_slots_metadata_just_before_its_payload)
{
	static const struct cistern_config cfgs[] = {
		{.policy = CISTERN_FIRO, .slot_size = 100, .slot_count = 50, .watermark = 1},
		{.policy = CISTERN_RESERVOIR, .slot_size = 100, .slot_count = 50, .watermark = 1},
		{.policy = CISTERN_FIFO_EVICT_RESERVOIR,
		 .slot_size = 100,
		 .slot_count = 50,
		 .watermark = 1},
		{.policy = CISTERN_SIM_PAIRED_RESERVOIR,
		 .slot_size = 100,
		 .slot_count = 50,
		 .watermark = 2,
		 .sweep_size = 4,
		 .nb_time_steps = 8},
		{.policy = CISTERN_BATCH_RESERVOIR,
		 .slot_size = 100,
		 .slot_count = 50,
		 .watermark = 4,
		 .batch_size = 4},
	};
	for (size_t k = 0; k < sizeof(cfgs) / sizeof(cfgs[0]); k++) {
		struct cistern *c = seg_create("lay", cfgs[k]);
		/* 100 bytes round up to 128, and the metadata line comes on top. */
		cr_assert_eq(c->slot_stride, 128 + sizeof(struct cistern_slotmeta), "policy %u",
			     cfgs[k].policy);
		for (uint64_t i = 0; i < 50; i++) {
			char *meta = (char *)cistern__slotmeta(c, i);
			char *payload = cistern__payload(c, i);
			cr_assert_eq(payload - meta, (ptrdiff_t)sizeof(struct cistern_slotmeta),
				     "policy %u slot %lu", cfgs[k].policy, (unsigned long)i);
			cr_assert_eq((uintptr_t)meta % CISTERN_CACHELINE, 0);
		}
		char *end = (char *)c->hdr + c->hdr->total_size;
		cr_assert_leq((char *)cistern__payload(c, 49) + c->slot_size, end);
		seg_drop(c);
	}
}

/* The FIFO walks its slots in order: its metadata stays one array, before the payloads. */
Test(layout, the_fifo_keeps_its_slot_metadata_in_one_array_before_the_payloads)
{
	struct cistern *c = seg_create("layf",
				       (struct cistern_config){.slot_size = 100, .slot_count = 50});
	cr_assert_eq(c->slot_stride, 128);
	for (uint64_t i = 0; i < 50; i++) {
		char *meta = (char *)cistern__slotmeta(c, i);
		cr_assert_eq(meta - (char *)cistern__slotmeta(c, 0),
			     (ptrdiff_t)(i * sizeof(struct cistern_slotmeta)));
		cr_assert_leq(meta + sizeof(struct cistern_slotmeta),
			      (char *)cistern__payload(c, 0));
	}
	seg_drop(c);
}

/* ---- Probes drawn ahead (pick.c, cistern__rs_stream_pinned()) ---- */

/* Which slot holds the sample with this id; slot_count if none. */
static uint64_t slot_of_id(struct cistern *c, uint64_t id)
{
	for (uint64_t i = 0; i < c->slot_count; i++)
		if (sw_state(atomic_load(&cistern__slotmeta(c, i)->word)) == RS_HELD &&
		    cistern__slotmeta(c, i)->sample_id == id)
			return i;
	return c->slot_count;
}

/*
 * A read leaves the next read's first probe drawn, with its slot on its way
 * into the cache; the next read looks there first. With every slot held the
 * probe hits, so the next read returns exactly that slot's sample (a fresh
 * draw would find it once in 64 reads).
 */
Test(reservoir, a_read_draws_the_next_reads_first_probe_ahead)
{
	struct cistern *c = full_reservoir("ahr", 64);
	for (int round = 0; round < 8; round++) {
		struct cistern_sample s;
		cr_assert_eq(cistern_acquire(c, &s, 0), 0);
		cr_assert_eq(cistern_release(c, &s), 0);
		uint64_t ahead = cistern__rs(c)->pick_read.ahead;
		cr_assert_neq(ahead, 0, "round %d: no probe drawn ahead", round);
		cr_assert_eq(cistern_acquire(c, &s, 0), 0);
		cr_assert_eq(s.index_, ahead - 1, "round %d: the next read looked elsewhere first",
			     round);
		cr_assert_eq(cistern_release(c, &s), 0);
	}
	seg_drop(c);
}

/*
 * The same for a producer's evictions: a put that evicted leaves the next
 * eviction's first probe drawn, and with every other sample seen the next
 * put replaces the sample in that slot.
 */
Test(reservoir, an_eviction_draws_the_next_evictions_first_probe_ahead)
{
	struct cistern *c = full_reservoir("ahe", 64);
	/* Every sample seen, so every one but the newest put may be evicted. */
	for (uint64_t i = 0; i < 64; i++)
		atomic_store(&cistern__slotmeta(c, i)->seen, 1);
	int checked = 0;
	for (uint32_t v = 64; v < 96; v++) {
		uint64_t ahead = cistern__rs(c)->pick_evict.ahead;
		struct cistern_meta m = {0};
		uint32_t x = v;
		cr_assert_eq(cistern_put(c, &x, sizeof(x), &m, 0), 0, "put %u", v);
		uint64_t at = slot_of_id(c, m.sample_id);
		cr_assert_lt(at, 64, "put %u: its sample is in no slot", v);
		/* Mark it seen too, so that any slot may be the next victim. */
		atomic_store(&cistern__slotmeta(c, at)->seen, 1);
		if (v > 64) {
			cr_assert_neq(ahead, 0, "put %u: no probe drawn ahead", v);
			cr_assert_eq(at, ahead - 1, "put %u: the eviction looked elsewhere first",
				     v);
			checked++;
		}
	}
	cr_assert_eq(checked, 31);
	seg_drop(c);
}
