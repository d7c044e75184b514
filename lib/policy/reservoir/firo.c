/* SPDX-License-Identifier: MIT */
/*
 * firo.c - FIRO, first in, random out: puts fill empty slots as FIFO does;
 * a read takes a held sample chosen uniformly at random for this reader alone,
 * and its release either puts it back (seen < pseudo_epochs) or removes it.
 * While reception is open, reads wait until the population exceeds the
 * watermark, so the population holds there while training runs; after close
 * the watermark no longer applies and the buffer drains.
 *
 * With several readers the watermark is approximate by up to the number of
 * readers racing past the check at once.
 *
 * With a cold tier (tiered.c) a put that finds the hot slots full moves a
 * hot sample to a free cold slot, and waits when the cold slots are full
 * too: FIRO evicts nothing. A read takes a sample of either tier, each by
 * its share of the population, for this reader alone; a cold sample's seen
 * count lives in its entry, and its release puts it back or frees its slot
 * by the same rule as a hot one.
 */
#include <errno.h>

#include "policy/reservoir/pins.h"
#include "policy/reservoir/reservoir.h"
#include "policy/reservoir/tiered.h"
#include "core/wait.h"

static int firo_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	int r = cistern__rs_fill_reserve(c, slot);
	if (r == -EAGAIN)
		r = cistern__rs_fill_past_count(c, slot); /* about to wait: is it really full? */
	return r;
}

static int firo_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	struct cistern_hdr *h = c->hdr;
	/* Acquire, no edge: population is a relaxed hint; slot words are acquired. */
	if (!cistern__rs_closed(c) &&
	    atomic_load_explicit(&h->population, memory_order_acquire) <= c->fixed.watermark)
		return -EAGAIN;
	for (int tries = 0; tries < RS_PICK_TRIES; tries++) {
		uint64_t idx;
		int r = cistern__pick(c, &cistern__rs(c)->pick_read, cistern__rs_is_held, NULL,
				      &idx);
		if (r < 0)
			return r;
		if (cistern__rs_read_exclusive(c, s, idx) == 0)
			return 0;
	}
	return -EAGAIN;
}

static int firo_release(struct cistern *c, struct cistern_sample *s)
{
	uint64_t w;
	if (!cistern__rs_exclusive_is_mine(c, s, &w))
		return -EINVAL;
	struct cistern_slotmeta *m = cistern__slotmeta(c, s->index_);
	if (atomic_load_explicit(&m->seen, memory_order_relaxed) >= c->fixed.pseudo_epochs) {
		cistern__rs_remove(c, s->index_, w);
	} else {
		/* [rs-release] seq_cst: our reads are done before another reader can take it. */
		atomic_store_explicit(&m->word, sw_make(sw_pos(w), RS_HELD, 0),
				      memory_order_seq_cst);
		cistern__wake_readers(c);
	}
	s->live_ = 0;
	s->data = NULL;
	return 0;
}

/* Full hot slots: a spill to a free cold slot; none free, the put waits. */
static int tiered_reserve(struct cistern *c, struct cistern_slot *slot)
{
	int r = firo_try_reserve(c, slot);
	if (r == -EAGAIN)
		r = cistern__tiered_spill_reserve(c, slot);
	return r;
}

/* A free cold slot: a held sample is never evicted. */
static bool free_cold(struct cistern *c, uint64_t *slot)
{
	return cistern__tiered_claim_cold(c, false, CISTERN__COLD_TAKE_FREE, slot);
}

/* Reads wait for a population above the watermark, counting both tiers. */
static bool above_watermark(const struct cistern *c, uint64_t pop, size_t n)
{
	(void)n;
	return pop > c->fixed.watermark;
}

static const struct cistern__tier_rules firo_tier_rules = {
	.try_reserve = tiered_reserve,
	.claim_cold = free_cold,
	.may_read = above_watermark,
	.reads_take = true,
};

static const struct cistern_ops cistern__firo_ops = {
	.init = cistern__rs_init,
	.try_reserve = firo_try_reserve,
	.commit = cistern__rs_commit,
	.abort = cistern__rs_abort,
	.try_acquire = firo_try_acquire,
	.release = firo_release,
	.unacquire = cistern__rs_unacquire,
	.drained = cistern__rs_drained,
	.reclaim = cistern__rs_reclaim,
	.population = cistern__rs_population,
};

static const char *firo_config_problem(const struct cistern_config *cfg)
{
	/* Reads wait for a population above the watermark, which a full ring must reach. */
	if (cfg->watermark == 0 || cfg->watermark >= cfg->slot_count)
		return "FIRO needs a watermark above 0 and below slot_count";
	return NULL;
}

const struct cistern__policy cistern__firo_policy = {
	.name = "firo",
	.value = CISTERN_FIRO,
	.ops = &cistern__firo_ops,
	.snap = &cistern__reservoir_snap_ops,
	.config_problem = firo_config_problem,
	.new_state = cistern__rs_new_state,
	.free_state = cistern__rs_free_state,
	.tiering = &cistern__rs_tiering,
	.tier_rules = &firo_tier_rules,
	.reclaim_idle = cistern__drop_pins,
	.forget = cistern__rate_forget,
	.counts_reads = true,
};
