/* SPDX-License-Identifier: MIT */
/*
 * fifo_evict.c - FIFOEvictReservoir: a ring of slots whose puts, once it is
 * full, evict the oldest sample if it was seen; reads are the reservoirs'
 * (reservoir_read.c), the slot states reservoir.h's.
 *
 * With a cold tier (tiered.c) a put that finds the oldest hot sample at the
 * tail moves it to the cold slot at the write cursor instead, and the cold
 * slots are taken in file order, none skipped: the cold file from the
 * cursor on holds the older samples in the order of their puts, then the
 * hot ring the newer ones. The oldest of all is the sample at the cursor,
 * which the spill evicts once it was seen (or at once, lossy).
 */
#include <errno.h>

#include "policy/reservoir/pins.h"
#include "policy/reservoir/reservoir.h"
#include "policy/reservoir/tiered.h"
#include "core/ring.h"
#include "core/wait.h"

/*
 * A put at the tail: fill the slot at the tail, or take the oldest sample
 * there, which `tiered` spills to the cold tier and, without a tier, is
 * evicted.
 */
static int ring_reserve(struct cistern *c, struct cistern_slot *slot, bool tiered)
{
	struct cistern_hdr *h = c->hdr;
	bool lossy = c->fixed.flags & CISTERN_LOSSY;
	if (!cistern__rs_rate_allows_put(c))
		return -EAGAIN;
	for (;;) {
		/* [ring-advance] acquire, then the word: [rs-empty] or [rs-held] acquire. */
		uint64_t t = atomic_load_explicit(&h->tail, memory_order_acquire);
		uint64_t idx = cistern__slot_of(c, t);
		struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		int64_t d = sw_lap_diff(w, t);
		if (d == 0 && sw_state(w) == RS_EMPTY) {
			uint64_t nw = sw_make(t, RS_RESERVED, c->owner);
			/* [rs-fill] counted before the claim, as in cistern__rs_fill_reserve(). */
			atomic_fetch_add_explicit(&h->filled, 1, memory_order_seq_cst);
			if (!atomic_compare_exchange_strong_explicit(
				    &m->word, &w, nw, memory_order_seq_cst, memory_order_relaxed)) {
				atomic_fetch_sub_explicit(&h->filled, 1, memory_order_seq_cst);
				continue;
			}
			cistern__help_advance(&h->tail, t);
			cistern__set_slot(slot, c, idx, t);
			return 0;
		}
		if (d >= 0) {
			/* Claimed already: help the index along. */
			if (cistern__help_or_refuse(c, &h->tail, t, d) < 0)
				return -EPROTO;
			continue;
		}
		/* The oldest hot sample: to the cold tier, seen or not (it stays held). */
		if (tiered && d == -(int64_t)c->slot_count && sw_state(w) == RS_HELD) {
			int r = cistern__tiered_spill_reserve(c, slot);
			if (r == 0) {
				cistern__help_advance(&h->tail, slot->pos_);
				/* Others waited while the spill held the tail. */
				cistern__wake_producers(c);
				return 0;
			}
			if (r != -EAGAIN)
				return r;
		}
		/* The slot holds the oldest sample, from the previous lap. */
		if (!tiered && d == -(int64_t)c->slot_count && sw_state(w) == RS_HELD &&
		    (lossy || atomic_load_explicit(&m->seen, memory_order_relaxed) >= 1)) {
			if (cistern__rs_evict_claim(c, idx, w, t, !lossy)) {
				cistern__help_advance(&h->tail, t);
				cistern__set_slot(slot, c, idx, t);
				return 0;
			}
		}
		/* [ring-advance] acquire: has a producer claimed t meanwhile? */
		if (atomic_load_explicit(&h->tail, memory_order_acquire) != t)
			continue;
		/*
		 * The oldest is unseen, pinned, being evicted or spilled, or still
		 * being written: this put waits for a read, which the limiter must
		 * let through (rate_limit.c).
		 */
		cistern__rs_rate_stuck(c, true);
		return -EAGAIN;
	}
}

static int fifo_evict_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	return ring_reserve(c, slot, false);
}

static int tiered_reserve(struct cistern *c, struct cistern_slot *slot)
{
	return ring_reserve(c, slot, true);
}

/* A spill moves the oldest hot sample, at the tail, and its slot serves the tail. */
static bool oldest_hot(struct cistern *c, uint64_t *idx, uint64_t *word, uint64_t *pos)
{
	/* [ring-advance] acquire, then the word: [rs-held] acquire (the spill copies it). */
	uint64_t t = atomic_load_explicit(&c->hdr->tail, memory_order_acquire);
	uint64_t i = cistern__slot_of(c, t);
	struct cistern_slotmeta *m = cistern__slotmeta(c, i);
	uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
	if (sw_lap_diff(w, t) != -(int64_t)c->slot_count || sw_state(w) != RS_HELD)
		return false;
	*idx = i;
	*word = w;
	*pos = t;
	return true;
}

/* The cold slot at the cursor only: the oldest cold sample, evicted if seen (or lossy). */
static bool cursor_cold(struct cistern *c, uint64_t *slot)
{
	bool lossy = c->fixed.flags & CISTERN_LOSSY;
	return cistern__tiered_claim_cold(
		c, true, lossy ? CISTERN__COLD_TAKE_ANY : CISTERN__COLD_TAKE_SEEN, slot);
}

static const struct cistern__tier_rules fifo_evict_tier_rules = {
	.try_reserve = tiered_reserve,
	.pick_hot = oldest_hot,
	.claim_cold = cursor_cold,
};

static const struct cistern_ops cistern__fifo_evict_ops = {
	.init = cistern__rs_init,
	.try_reserve = fifo_evict_try_reserve,
	.commit = cistern__rs_commit,
	.abort = cistern__rs_abort,
	.try_acquire = cistern__rs_try_acquire,
	.release = cistern__rs_release_generic,
	.release_batch = cistern__rs_release_batch,
	.unacquire = cistern__rs_hand_back,
	.try_acquire_batch = cistern__rs_try_acquire_n,
	.gather_now = cistern__rs_gather_now,
	.drained = cistern__rs_drained,
	.reclaim = cistern__rs_reclaim,
	.population = cistern__rs_population,
};

const struct cistern__policy cistern__fifo_evict_policy = {
	.name = "fifo-evict-reservoir",
	.value = CISTERN_FIFO_EVICT_RESERVOIR,
	.ops = &cistern__fifo_evict_ops,
	.snap = &cistern__reservoir_snap_ops,
	.config_problem = cistern__rs_limited_config_problem,
	.new_state = cistern__rs_new_state,
	.free_state = cistern__rs_free_state,
	.tiering = &cistern__rs_tiering,
	.tier_rules = &fifo_evict_tier_rules,
	.reclaim_idle = cistern__drop_pins,
	.forget = cistern__rate_forget,
	.flags = CISTERN_LOSSY | CISTERN_SINGLE_READER,
	.limiter = &cistern__rate_limiter,
	.evicts_oldest = true,
	.evicts_seen = true,
	.counts_reads = true,
	.readers_pin = true,
	.caps_reads = true,
};
