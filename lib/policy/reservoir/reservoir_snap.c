/* SPDX-License-Identifier: MIT */
/*
 * reservoir_snap.c - what inspect, gc, dump and restore need from FIRO and the
 * four reservoirs (struct cistern_snap_ops): one classification of their slot
 * states (reservoir.h) and one way to lay restored samples back in. Kept out
 * of the policies' own files so that they stay about the policies.
 */
#include <errno.h>

#include "policy/reservoir/reservoir.h"
#include "cistern/admin.h"

static struct cistern_slot_view rs_classify(uint64_t word)
{
	struct cistern_slot_view v = {CISTERN_SLOT_OTHER, 0};
	switch (sw_state(word)) {
	case RS_EMPTY:
		v.cls = CISTERN_SLOT_FREE;
		break;
	case RS_RESERVED:
		v.cls = CISTERN_SLOT_RESERVED;
		v.owner = sw_owner(word);
		break;
	case RS_HELD:
		v.cls = CISTERN_SLOT_COMMITTED;
		break;
	case RS_ACQUIRED:
		/* An exclusive read (FIRO, or a reservoir draining after close). */
		v.cls = CISTERN_SLOT_ACQUIRED;
		v.owner = sw_owner(word);
		break;
	case RS_EVICTING:
		/* A producer deciding whether to evict: the sample may stay or go. */
		v.cls = CISTERN_SLOT_EVICTING;
		v.owner = sw_owner(word);
		break;
	default:
		break;
	}
	return v;
}

static int rs_restore(struct cistern *c, uint64_t n, uint64_t next_id)
{
	struct cistern_hdr *h = c->hdr;
	const struct cistern_fixed *f = &c->fixed;
	if (n > c->slot_count)
		return -EINVAL;
	bool ring = c->policy->evicts_oldest;
	bool paired = c->policy->has_pairs;
	for (uint64_t i = 0; i < n; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		/*
		 * The ring of FIFOEvictReservoir keeps positions: the samples, oldest
		 * first, take positions 0..n-1, so the oldest is evicted first. The
		 * others stamp a held slot with its sample id.
		 */
		uint64_t pos = ring ? i : m->sample_id;
		if (paired) {
			/* Read once: the checks must hold for the values used. */
			uint32_t sim = m->sim_id, step = m->time_step;
			if (sim >= f->sweep_size || step >= f->nb_time_steps)
				return -EINVAL;
			/* The (sim_id, time_step) index: the newest sample of a key wins, as live. */
			_Atomic uint64_t *e = &cistern__index(
				c)[(uint64_t)sim * f->nb_time_steps + step];
			atomic_store_explicit(e, i + 1, memory_order_relaxed);
		}
		atomic_store_explicit(&m->word, sw_make(pos, RS_HELD, 0), memory_order_relaxed);
	}
	if (ring)
		atomic_store_explicit(&h->tail, n, memory_order_relaxed);
	atomic_store_explicit(&h->population, n, memory_order_relaxed);
	atomic_store_explicit(&h->filled, n, memory_order_relaxed);
	/* Release, no edge: the rename that shows the segment orders it (restore.c). */
	atomic_store_explicit(&h->next_sample_id, next_id, memory_order_release);
	/*
	 * A sample dumped spent (max_times_sampled) while a reader still held
	 * it had left already: nobody holds it here to let it go, so it goes now.
	 */
	for (uint64_t i = 0; i < n && f->max_times_sampled; i++)
		cistern__rs_retire_if_spent(c, i);
	return 0;
}

const struct cistern_snap_ops cistern__reservoir_snap_ops = {
	.classify = rs_classify,
	.restore = rs_restore,
};
