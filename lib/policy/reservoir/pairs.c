/* SPDX-License-Identifier: MIT */
/*
 * pairs.c - SimPairedReservoir: reads return pairs (x_t, x_t+1) of one
 * simulation, chosen uniformly among the pairs held now.
 *
 * The segment holds an index with one entry per (sim_id, time_step): the slot
 * holding that sample, plus one (0 = not held). A commit publishes the entry
 * after the sample; an eviction or removal clears it (by CAS, so a newer
 * sample of the same key is not erased). The successor of a sample is thus
 * one load away. Entries are hints: every use is confirmed by pinning (or
 * taking) the slot and checking its metadata.
 *
 * A pair is identified by its first member, so picking uniformly among held
 * samples that have a held successor is picking uniformly among pairs.
 */
#include <errno.h>

#include "policy/reservoir/reservoir.h"
#include "policy/reservoir/pins.h"
#include "policy/reservoir/windows.h"

static _Atomic uint64_t *entry(struct cistern *c, uint32_t sim, uint32_t step)
{
	return &cistern__index(c)[(uint64_t)sim * c->fixed.nb_time_steps + step];
}

static void key_of(struct cistern *c, uint64_t index, uint32_t *sim, uint32_t *step)
{
	*sim = __atomic_load_n(&cistern__slotmeta(c, index)->sim_id, __ATOMIC_RELAXED);
	*step = __atomic_load_n(&cistern__slotmeta(c, index)->time_step, __ATOMIC_RELAXED);
}

static bool key_ok(struct cistern *c, uint32_t sim, uint32_t step)
{
	return sim < c->fixed.sweep_size && step < c->fixed.nb_time_steps;
}

void cistern__pairs_publish(struct cistern *c, uint64_t index, uint32_t sim, uint32_t step)
{
	/*
	 * The key the commit wrote, not the slot's metadata read back: another
	 * process may have rewritten that since, past the index's end.
	 */
	if (!key_ok(c, sim, step))
		return;
	/* [sim-pair] release: a reader that finds the entry finds the published sample. */
	atomic_store_explicit(entry(c, sim, step), index + 1, memory_order_release);
}

void cistern__pairs_forget(struct cistern *c, uint64_t index)
{
	uint32_t sim, step;
	key_of(c, index, &sim, &step);
	if (!key_ok(c, sim, step))
		return;
	uint64_t expect = index + 1;
	/* [sim-pair] acq_rel: only the entry this slot published goes. */
	atomic_compare_exchange_strong_explicit(entry(c, sim, step), &expect, 0,
						memory_order_acq_rel, memory_order_relaxed);
}

/* The slot holding (sim, step + 1) if it is held now, else UINT64_MAX. */
static uint64_t successor(struct cistern *c, uint64_t index)
{
	uint32_t sim, step;
	key_of(c, index, &sim, &step);
	if (!key_ok(c, sim, step) || step + 1 >= c->fixed.nb_time_steps)
		return UINT64_MAX;
	/* [sim-pair] acquire; the word is checked again after. */
	uint64_t e = atomic_load_explicit(entry(c, sim, step + 1), memory_order_acquire);
	if (e == 0 || e > c->slot_count || !cistern__rs_is_held(c, e - 1, NULL))
		return UINT64_MAX;
	return e - 1;
}

/* The slot holding (sim, step - 1) if it is held now, else UINT64_MAX. */
static uint64_t predecessor(struct cistern *c, uint64_t index)
{
	uint32_t sim, step;
	key_of(c, index, &sim, &step);
	if (!key_ok(c, sim, step) || step == 0)
		return UINT64_MAX;
	/* [sim-pair] acquire, as in successor(). */
	uint64_t e = atomic_load_explicit(entry(c, sim, step - 1), memory_order_acquire);
	if (e == 0 || e > c->slot_count || !cistern__rs_is_held(c, e - 1, NULL))
		return UINT64_MAX;
	return e - 1;
}

/*
 * Reads only ever see samples through pairs, so a sample whose neighbours
 * were both evicted before any pair reached it could never be seen, and a
 * buffer full of them would stop every producer for good. When no seen
 * sample can be evicted and no pair is held (cistern__pairs_any_held()), such an
 * orphan may be (counted as evicted unseen). While a pair is held, a read
 * of it (or the release of one pinned now) makes a seen sample evictable,
 * so the producer waits as under the Reservoir: a sample that merely waits
 * for its successor to be produced is not taken for lost. Once a reader
 * waited for windows (windows.c), the same holds of the windows of the
 * shape it waited for instead of pairs.
 */
bool cistern__pairs_is_orphan(struct cistern *c, uint64_t index, void *arg)
{
	(void)arg;
	uint64_t wanted = cistern__windows_wanted(c);
	if (wanted)
		return cistern__windows_is_orphan(c, index, wanted);
	struct cistern_slotmeta *m = cistern__slotmeta(c, index);
	return cistern__rs_is_held(c, index, NULL) &&
	       atomic_load_explicit(&m->seen, memory_order_relaxed) == 0 &&
	       atomic_load_explicit(&m->pins, memory_order_relaxed) == 0 &&
	       successor(c, index) == UINT64_MAX && predecessor(c, index) == UINT64_MAX;
}

static bool is_pair_head(struct cistern *c, uint64_t index, void *arg)
{
	(void)arg;
	return cistern__rs_is_held(c, index, NULL) && successor(c, index) != UINT64_MAX;
}

bool cistern__pairs_any_held(struct cistern *c)
{
	uint64_t wanted = cistern__windows_wanted(c);
	if (wanted)
		return cistern__windows_any_held(c, wanted);
	/*
	 * A scan, stopped at the first pair: it runs only when a producer
	 * found nothing seen to evict. Every pinned sample belongs to a held
	 * pair, so this also answers "will a release make one evictable".
	 */
	for (uint64_t i = 0; i < c->slot_count; i++)
		if (is_pair_head(c, i, NULL))
			return true;
	return false;
}

/* Both members still what the index said: same simulation, consecutive steps. */
static bool members_match(struct cistern *c, uint64_t x, uint64_t y)
{
	uint32_t sx, tx, sy, ty;
	key_of(c, x, &sx, &tx);
	key_of(c, y, &sy, &ty);
	return sx == sy && tx + 1 == ty;
}

static int take_pair(struct cistern *c, struct cistern_sample pair[2], bool closed)
{
	uint64_t x;
	int r = cistern__pick(c, &cistern__rs(c)->pick_read, is_pair_head, NULL, &x);
	if (r < 0)
		return r;
	if (closed) {
		/* Without replacement: take both members for good. */
		if (cistern__rs_read_exclusive(c, &pair[0], x) < 0)
			return -EBUSY;
		uint64_t y = successor(c, x);
		if (y == UINT64_MAX || !members_match(c, x, y) ||
		    cistern__rs_read_exclusive(c, &pair[1], y) < 0) {
			cistern__rs_unacquire(c, &pair[0]);
			return -EBUSY;
		}
		return 0;
	}
	uint64_t wx, wy;
	if (!cistern__pin(c, x, RS_HELD, &wx))
		return -EBUSY;
	uint64_t y = successor(c, x);
	if (y == UINT64_MAX || !cistern__pin(c, y, RS_HELD, &wy)) {
		cistern__unpin(c, x);
		return -EBUSY;
	}
	if (!members_match(c, x, y)) {
		cistern__unpin(c, y);
		cistern__unpin(c, x);
		return -EBUSY;
	}
	/* Either read may be refused at max_times_sampled, its pin given back. */
	if (cistern__rs_read_pinned(c, &pair[0], x, wx) < 0) {
		cistern__unpin(c, y);
		rs_let_go(c, y);
		return -EBUSY;
	}
	if (cistern__rs_read_pinned(c, &pair[1], y, wy) < 0) {
		cistern__rs_unacquire(c, &pair[0]);
		return -EBUSY;
	}
	return 0;
}

static int pairs_try_acquire_pair(struct cistern *c, struct cistern_sample pair[2])
{
	struct cistern_hdr *h = c->hdr;
	bool closed = cistern__rs_closed(c);
	uint64_t taken = 0;
	if (!closed) {
		/* Acquire, no edge: population is a relaxed hint; slot words are acquired. */
		if (atomic_load_explicit(&h->population, memory_order_acquire) <
		    c->fixed.watermark) {
			cistern__rs_rate_stuck(c, false); /* waits for a put (rate_limit.c) */
			return -EAGAIN;
		}
		int b = cistern__pin_bit(c);
		if (b < 0)
			return b;
		if (!cistern__rs_rate_take(c, 2, &taken))
			return -EAGAIN;
	}
	int r = -EAGAIN;
	for (int tries = 0; tries < RS_PICK_TRIES; tries++) {
		r = take_pair(c, pair, closed);
		if (r != -EBUSY)
			break;
		r = -EAGAIN;
	}
	cistern__rs_rate_settle(c, taken, r == 0 ? 2 : 0);
	/* No pair to draw: it waits for a put, which the limiter lets through. */
	if (r == -EAGAIN && !closed)
		cistern__rs_rate_stuck(c, false);
	return r;
}

static int pairs_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	(void)c;
	(void)s;
	return -EINVAL; /* the unit of a read is a pair: cistern_acquire_pair() */
}

/*
 * After close: drained when nothing is in flight and no pair is left. What
 * remains then has no partner; it is counted, and stays for inspection.
 */
static bool pairs_drained(struct cistern *c)
{
	if (!cistern__rs_closed(c))
		return false;
	if (atomic_load_explicit(&c->hdr->filled, memory_order_seq_cst) == 0) /* [rs-fill] */
		return true;
	uint64_t held = 0;
	/* Acquire, no edge: only the state is used. */
	for (uint64_t i = 0; i < c->slot_count; i++) {
		unsigned st = sw_state(
			atomic_load_explicit(&cistern__slotmeta(c, i)->word, memory_order_acquire));
		if (st == RS_RESERVED || st == RS_ACQUIRED)
			return false;
		if (st == RS_HELD) {
			if (successor(c, i) != UINT64_MAX)
				return false;
			held++;
		}
	}
	atomic_store_explicit(&c->hdr->unpaired, held, memory_order_relaxed);
	return true;
}

static const struct cistern_ops cistern__sim_paired_ops = {
	.init = cistern__rs_init,
	.try_reserve = cistern__rs_reservoir_try_reserve,
	.commit = cistern__rs_commit,
	.abort = cistern__rs_abort,
	.try_acquire = pairs_try_acquire,
	.release = cistern__rs_release_generic,
	.release_batch = cistern__rs_release_batch,
	.unacquire = cistern__rs_hand_back,
	.try_acquire_pair = pairs_try_acquire_pair,
	.try_acquire_window = cistern__windows_try_acquire,
	.windows_drained = cistern__windows_drained,
	.drained = pairs_drained,
	.reclaim = cistern__rs_reclaim,
	.population = cistern__rs_population,
};

static const char *sim_paired_config_problem(const struct cistern_config *cfg)
{
	const char *why = cistern__rs_config_problem(cfg);
	if (why)
		return why;
	if (cfg->sweep_size == 0)
		return "SimPairedReservoir needs a sweep_size above 0";
	if (cfg->nb_time_steps < 2)
		return "SimPairedReservoir needs nb_time_steps of 2 or more";
	if ((uint64_t)cfg->sweep_size * cfg->nb_time_steps > CISTERN_PAIR_INDEX_MAX)
		return "sweep_size * nb_time_steps is above CISTERN_PAIR_INDEX_MAX (2^28)";
	/* A slack set by hand must admit the policy's own read. */
	if (!cistern__rate_admits(cfg, 2))
		return "rate_slack is too small for reads_per_put: the rate limiter could "
		       "never admit a pair (rate_slack must be at least (reads_per_put + "
		       "2) "
		       "/ 2, or 0 for automatic)";
	return NULL;
}

/* One entry per (sim_id, time_step). */
static uint64_t sim_paired_index_entries(uint64_t slot_count, uint32_t sweep_size,
					 uint32_t nb_time_steps)
{
	(void)slot_count;
	return (uint64_t)sweep_size * nb_time_steps;
}

const struct cistern__policy cistern__sim_paired_policy = {
	.name = "sim-paired-reservoir",
	.value = CISTERN_SIM_PAIRED_RESERVOIR,
	.ops = &cistern__sim_paired_ops,
	.no_tier_why = "sim-paired-reservoir takes no cold tier: a pair draw follows the hot "
		       "slots' neighbour links, which a pair split between the tiers would break",
	.snap = &cistern__reservoir_snap_ops,
	.config_problem = sim_paired_config_problem,
	.new_state = cistern__rs_new_state,
	.free_state = cistern__rs_free_state,
	.reclaim_idle = cistern__drop_pins,
	.forget = cistern__rate_forget,
	.index_entries = sim_paired_index_entries,
	.flags = CISTERN_SINGLE_READER,
	.limiter = &cistern__rate_limiter,
	.has_pairs = true,
	.evicts_seen = true,
	.counts_reads = true,
	.readers_pin = true,
	.caps_reads = true,
};
