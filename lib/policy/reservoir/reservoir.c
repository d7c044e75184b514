/* SPDX-License-Identifier: MIT */
/*
 * reservoir.c - the slot machinery FIRO and the reservoirs share (states in
 * reservoir.h): fills, evictions, commits and aborts, exclusive and pinned
 * reads, removal, release, reclaiming a dead attachment's slots, end of
 * data; and the Reservoir and BatchReservoir policies, whose puts fill or
 * evict and whose reads are reservoir_read.c's.
 *
 * Ordering, as in fifo.c: claims are acq_rel CASes; commit publishes payload
 * and metadata with a seq_cst exchange; evictions and pins follow the seq_cst
 * handshake described in pins.c; a removal hands the slot back with a seq_cst
 * store after the reader's last access.
 */
#include <errno.h>
#include <time.h>

#include "policy/reservoir/reservoir.h"
#include "core/ring.h"
#include "policy/reservoir/pins.h"
#include "policy/reservoir/tiered.h"

static inline struct cistern_slotmeta *M(struct cistern *c, uint64_t i)
{
	return cistern__slotmeta(c, i);
}

void cistern__rs_init(struct cistern *c)
{
	/* EMPTY(i): for the ring of FIFOEvictReservoir, slot i first serves position i. */
	for (uint64_t i = 0; i < c->slot_count; i++)
		atomic_store_explicit(&M(c, i)->word, sw_make(i, RS_EMPTY, 0),
				      memory_order_relaxed);
}

bool cistern__rs_is_held(struct cistern *c, uint64_t i, void *arg)
{
	(void)arg;
	return sw_state(atomic_load_explicit(&M(c, i)->word, memory_order_relaxed)) == RS_HELD;
}

static bool is_empty(struct cistern *c, uint64_t i, void *arg)
{
	(void)arg;
	return sw_state(atomic_load_explicit(&M(c, i)->word, memory_order_relaxed)) == RS_EMPTY;
}

/* Evictable: held, seen at least once, pinned by nobody. */
static bool is_evictable(struct cistern *c, uint64_t i, void *arg)
{
	(void)arg;
	struct cistern_slotmeta *m = M(c, i);
	return sw_state(atomic_load_explicit(&m->word, memory_order_relaxed)) == RS_HELD &&
	       atomic_load_explicit(&m->seen, memory_order_relaxed) >= 1 &&
	       atomic_load_explicit(&m->pins, memory_order_relaxed) == 0;
}

/* How many slots a fill looks at after its cursor before it picks at random. */
#define FILL_LOOK 8

/*
 * Which empty slot a sample goes to does not matter to any read (reads draw
 * uniformly over the held samples, wherever they sit), so a fill need not
 * pick one at random. Each handle keeps a cursor and takes the first empty
 * slot among the FILL_LOOK from there, so that filling an empty segment costs
 * a load or two per sample rather than a pick (whose snapshot select walks a
 * bitset once empties grow sparse). The cursor starts at a random slot, so
 * that producers filling at once do not all contend for the same ones.
 * False if none of those slots is empty; the caller then picks.
 */
static bool fill_cursor_next(struct cistern *c, uint64_t *out)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	uint64_t n = c->slot_count;
	uint64_t i = rs->fill_next ? rs->fill_next - 1 : cistern__rng_below(&c->rng, n);
	bool found = false;
	for (int k = 0; k < FILL_LOOK && !found; k++) {
		found = is_empty(c, i, NULL);
		if (found)
			*out = i;
		i = i + 1 == n ? 0 : i + 1;
	}
	rs->fill_next = i + 1; /* 0 means "not started" */
	return found;
}

/*
 * A slot just went EMPTY here: leave a hint for the next fill, which
 * otherwise, with one empty slot among many (a full FIRO that a reader just
 * took from), finds it only by rebuilding its snapshot, a read of every
 * slot word. Relaxed: a fill that sees the hint before the word re-checks
 * the word anyway and passes the slot by; the hint is never trusted.
 */
static void note_vacancy(struct cistern *c, uint64_t index)
{
	atomic_store_explicit(&c->hdr->vacated[index & (CISTERN_VACANCIES - 1)],
			      (uint32_t)index + 1, memory_order_relaxed);
}

/*
 * Take a hinted empty slot, clearing each hint looked at (by CAS, so that a
 * hint left meanwhile for another slot stays). False if none was empty.
 */
static bool fill_from_vacancies(struct cistern *c, uint64_t *out)
{
	_Atomic uint32_t *v = c->hdr->vacated;
	for (unsigned k = 0; k < CISTERN_VACANCIES; k++) {
		uint32_t hint = atomic_load_explicit(&v[k], memory_order_relaxed);
		if (hint == 0 || hint > c->slot_count)
			continue;
		/* On a copy: a failed CAS writes back what it found, unchecked. */
		uint32_t expected = hint;
		atomic_compare_exchange_strong_explicit(&v[k], &expected, 0, memory_order_relaxed,
							memory_order_relaxed);
		if (is_empty(c, hint - 1, NULL)) {
			*out = hint - 1;
			return true;
		}
	}
	return false;
}

/*
 * A handle's throttle for the looks at every slot that a count left high by a
 * death calls for: true, and the next one `gap` ns away, if one is due now.
 */
static bool look_due(int64_t *next_ns, int64_t gap)
{
	int64_t now = cistern__now_ns(CLOCK_MONOTONIC);
	if (now < *next_ns)
		return false;
	*next_ns = now + gap;
	return true;
}

/* Claim slot idx for a fill if it is EMPTY; the caller counted the fill. */
static bool claim_empty(struct cistern *c, uint64_t idx, struct cistern_slot *slot)
{
	struct cistern_slotmeta *m = M(c, idx);
	uint64_t w = atomic_load_explicit(&m->word, memory_order_relaxed);
	if (sw_state(w) != RS_EMPTY)
		return false;
	/*
	 * [rs-fill] seq_cst: the claim is ordered before our closed re-check, so a
	 * reader that finds reception closed and then looks at every slot
	 * (cistern__rs_drained) sees it; acquire on success ([rs-empty]).
	 */
	if (!atomic_compare_exchange_strong_explicit(&m->word, &w,
						     sw_make(sw_pos(w), RS_RESERVED, c->owner),
						     memory_order_seq_cst, memory_order_relaxed))
		return false;
	cistern__set_slot(slot, c, idx, sw_pos(w));
	return true;
}

int cistern__rs_fill_reserve(struct cistern *c, struct cistern_slot *slot)
{
	struct cistern_hdr *h = c->hdr;
	/* Relaxed: a look only; the count below decides. */
	if (atomic_load_explicit(&h->filled, memory_order_relaxed) >= c->slot_count)
		return -EAGAIN;
	/*
	 * Count the slot before claiming one, and take the count back if no
	 * claim comes of it, so that a death in between leaves `filled` high
	 * (reservoir.h). [rs-fill] seq_cst: ordered before the claim and the reserver's
	 * closed re-check (api.c), against cistern__rs_drained()'s look at closed.
	 */
	if (atomic_fetch_add_explicit(&h->filled, 1, memory_order_seq_cst) >= c->slot_count) {
		atomic_fetch_sub_explicit(&h->filled, 1, memory_order_seq_cst);
		return -EAGAIN;
	}
	int r = -EAGAIN;
	for (int tries = 0; tries < RS_PICK_TRIES; tries++) {
		uint64_t idx;
		if (!fill_cursor_next(c, &idx) && !fill_from_vacancies(c, &idx)) {
			r = cistern__pick(c, &cistern__rs(c)->pick_empty, is_empty, NULL, &idx);
			if (r < 0)
				break;
			r = -EAGAIN;
		}
		if (claim_empty(c, idx, slot))
			return 0;
	}
	/* [rs-fill]: no claim came of the count; take it back. */
	atomic_fetch_sub_explicit(&h->filled, 1, memory_order_seq_cst);
	return r;
}

/*
 * How often one handle may look at every slot for an empty one that `filled`
 * counts as in use (cistern__rs_fill_past_count): a put that finds the buffer full by
 * the count calls it on every try (before it evicts or waits), and a look
 * reads every slot word, a few ns each. At least 10 ms apart, and 1 us per
 * slot, so that a producer putting into (or waiting on) a full buffer of a
 * million slots spends about 1% of a core looking. Only once a dead
 * attachment was reclaimed: until then the count is exact.
 */
#define FILL_LOOK_MIN_NS (10 * 1000 * 1000)
#define FILL_LOOK_NS_PER_SLOT 1000

int cistern__rs_fill_past_count(struct cistern *c, struct cistern_slot *slot)
{
	struct cistern_hdr *h = c->hdr;
	/*
	 * Without a reclaim of a dead attachment the count is exact: full is
	 * full. [counts-unsure] acquire: pairs with the reclaim's store, so the slot words we
	 * read below are at least as new as its repairs.
	 */
	if (!atomic_load_explicit(&h->counts_unsure, memory_order_acquire))
		return -EAGAIN;
	uint64_t gap = c->slot_count * FILL_LOOK_NS_PER_SLOT;
	if (!look_due(&cistern__rs(c)->next_fill_look_ns,
		      gap > FILL_LOOK_MIN_NS ? (int64_t)gap : FILL_LOOK_MIN_NS))
		return -EAGAIN;
	/*
	 * A death may have left `filled` high: believe the slot words. The fill
	 * is counted like any other (before the claim, seq_cst: [rs-fill], as
	 * in cistern__rs_fill_reserve()), so the count stays exactly as high
	 * as the death left it, never lower; only the slot words say what is
	 * empty. From a random slot on, so that producers spread out.
	 */
	atomic_fetch_add_explicit(&h->filled, 1, memory_order_seq_cst);
	uint64_t start = cistern__rng_below(&c->rng, c->slot_count);
	for (uint64_t k = 0; k < c->slot_count; k++) {
		uint64_t idx = start + k < c->slot_count ? start + k : start + k - c->slot_count;
		if (claim_empty(c, idx, slot))
			return 0;
	}
	/* [rs-fill]: no claim came of the count; take it back. */
	atomic_fetch_sub_explicit(&h->filled, 1, memory_order_seq_cst);
	return -EAGAIN;
}

/* Account for a sample leaving the buffer (eviction or removal) in ctr. */
static void count_leaving_in(struct cistern *c, struct cistern_counters *ctr, uint32_t seen,
			     bool evicted)
{
	cistern__count(&ctr->seen_hist[cistern__seen_bucket(seen)], 1);
	if (evicted) {
		cistern__count(&ctr->evictions, 1);
		if (seen == 0)
			cistern__count(&ctr->evicted_unseen, 1);
	}
	atomic_fetch_sub_explicit(&c->hdr->population, 1, memory_order_relaxed);
}

static void count_leaving(struct cistern *c, uint32_t seen, bool evicted)
{
	count_leaving_in(c, &c->me->ctr, seen, evicted);
}

/*
 * Take a held slot for overwriting. The slot first goes HELD(p) ->
 * EVICTING(p, me), a tentative state that readers cannot pin and that other
 * producers must not mistake for a finished claim (they wait on it). Then,
 * seq_cst against the pin handshake ([pin-evict]), either no reader pins it and
 * it becomes RESERVED(newpos, me), or one does and it goes back to HELD(p).
 */
bool cistern__rs_evict_claim(struct cistern *c, uint64_t idx, uint64_t w, uint64_t newpos,
			     bool need_seen)
{
	struct cistern_slotmeta *m = M(c, idx);
	uint64_t tentative = sw_make(sw_pos(w), RS_EVICTING, c->owner);
	if (!atomic_compare_exchange_strong_explicit(&m->word, &w, tentative, memory_order_seq_cst,
						     memory_order_relaxed))
		return false;
	/*
	 * [pin-evict] the seq_cst CAS above, then the seq_cst load of pins (which
	 * also acquires [unpin]). Only we move a slot out of EVICTING(.., me):
	 * stores, not CASes, suffice.
	 * Seen is checked again after pins: a reader that gave a read back
	 * (a batch it could not complete) lowers seen before it unpins, so once
	 * we see no pin we also see the seen count it left.
	 */
	if (atomic_load_explicit(&m->pins, memory_order_seq_cst) != 0 ||
	    (need_seen && atomic_load_explicit(&m->seen, memory_order_relaxed) == 0)) {
		atomic_store_explicit(&m->word, w, memory_order_seq_cst);
		/* [retire]: one who let go of a spent sample meanwhile found it EVICTING. */
		rs_let_go(c, idx);
		return false;
	}
	if (c->policy->has_pairs)
		cistern__pairs_forget(c, idx);
	count_leaving(c, atomic_load_explicit(&m->seen, memory_order_relaxed), true);
	atomic_store_explicit(&m->word, sw_make(newpos, RS_RESERVED, c->owner),
			      memory_order_seq_cst);
	return true;
}

/*
 * The log of evictable samples (segment.h: seen_log) says, slot by slot, that
 * a sample became evictable (its first read) or that one was evicted
 * (EVICT_LOG_GONE, so that the other producers' snapshots drop it too). The
 * fetch_add (relaxed) only hands out positions; the entry's release store
 * ([seen-log]) publishes it with its sequence number, which a producer checks, so an entry
 * not yet written (or a writer that died between the two) is never mistaken
 * for one that was. A slot's gone entry comes before the first-read entry of
 * the sample that replaces it: the evictor logs before it commits, and that
 * read takes the sample only after the commit.
 */
#define EVICT_LOG_GONE (UINT32_C(1) << 31) /* above any slot (CISTERN_SLOT_COUNT_MAX) */

static void evict_log_append(struct cistern *c, uint32_t entry)
{
	struct cistern_hdr *h = c->hdr;
	uint64_t k = atomic_fetch_add_explicit(&h->seen_log_next, 1, memory_order_relaxed);
	atomic_store_explicit(&h->seen_log[k & (CISTERN_SEEN_LOG - 1)], ((k + 1) << 32) | entry,
			      memory_order_release);
}

/*
 * A sample's seen count just went from 0 to 1 here: it became evictable.
 * FIFOEvictReservoir evicts by ring position, with no snapshot to feed.
 */
void cistern__rs_note_seen(struct cistern *c, uint64_t index)
{
	if (!c->policy->evicts_oldest)
		evict_log_append(c, (uint32_t)index);
}

/*
 * Bring this producer's evictable snapshot up to date with the log: add the
 * samples that became evictable since it last looked and drop those that
 * other producers evicted, so that with few evictable samples (reads barely
 * ahead of puts) a pick finds the new ones without a rescan of every slot
 * word, and does not keep landing on slots evicted under it. Stops at an
 * entry not yet written, to take it next time; if the log went round past
 * what it had read, the snapshot is marked stale and the next pick rebuilds
 * it. Entries are hints: every pick re-checks the word.
 */
static void merge_seen_log(struct cistern *c)
{
	struct cistern_hdr *h = c->hdr;
	struct cistern_picker *pk = &cistern__rs(c)->pick_evict;
	if (!pk->log_next) {
		pk->log_next = &h->seen_log_next;
		pk->stale = true; /* no log position yet: start from a rescan */
		return;
	}
	if (!pk->set || pk->stale)
		return;
	/* Relaxed: only bounds the walk; each entry is checked and acquired below. */
	uint64_t next = atomic_load_explicit(&h->seen_log_next, memory_order_relaxed);
	uint64_t pos = pk->log_pos;
	if (next - pos > CISTERN_SEEN_LOG) {
		pk->stale = true;
		return;
	}
	for (; pos != next; pos++) {
		/* [seen-log] acquire: pairs with the writer's release store of the entry. */
		uint64_t e = atomic_load_explicit(&h->seen_log[pos & (CISTERN_SEEN_LOG - 1)],
						  memory_order_acquire);
		if ((uint32_t)(e >> 32) != (uint32_t)(pos + 1))
			break; /* not written yet */
		uint32_t slot = (uint32_t)e & ~EVICT_LOG_GONE;
		if (slot >= c->slot_count)
			continue;
		if ((uint32_t)e & EVICT_LOG_GONE)
			roaring_bitmap_remove(pk->set, slot);
		else
			roaring_bitmap_add(pk->set, slot);
	}
	pk->log_pos = pos;
}

int cistern__rs_evict_reserve(struct cistern *c, struct cistern_slot *slot, cistern_qualify_fn ok)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	if (!ok)
		merge_seen_log(c);
	for (int tries = 0; tries < RS_PICK_TRIES; tries++) {
		uint64_t idx;
		int r = cistern__pick(c, &rs->pick_evict, ok ? ok : is_evictable, NULL, &idx);
		if (r < 0)
			return r;
		/* Acquire, no edge: only the state is used; the CAS decides. */
		uint64_t w = atomic_load_explicit(&M(c, idx)->word, memory_order_acquire);
		/* The orphan rule (pairs.c) is the one way to evict an unseen sample here. */
		bool need_seen = ok == NULL;
		if (sw_state(w) != RS_HELD ||
		    !cistern__rs_evict_claim(c, idx, w, sw_pos(w), need_seen))
			continue;
		/*
		 * Its new sample is unseen: not a candidate until the log says
		 * so. Tell the other producers, and forget it here at once.
		 */
		if (!ok)
			evict_log_append(c, (uint32_t)idx | EVICT_LOG_GONE);
		if (rs->pick_evict.set)
			roaring_bitmap_remove(rs->pick_evict.set, (uint32_t)idx);
		cistern__set_slot(slot, c, idx, sw_pos(w));
		return 0;
	}
	return -EAGAIN;
}

static bool slot_is_mine(struct cistern *c, const struct cistern_slot *slot)
{
	if (!slot->live_ || slot->index_ >= c->slot_count)
		return false;
	uint64_t w = atomic_load_explicit(&M(c, slot->index_)->word, memory_order_relaxed);
	return w == sw_make(slot->pos_, RS_RESERVED, c->owner);
}

int cistern__rs_commit(struct cistern *c, struct cistern_slot *slot, size_t len,
		       struct cistern_meta *meta)
{
	struct cistern_hdr *h = c->hdr;
	const struct cistern_fixed *f = &c->fixed;
	if (!slot_is_mine(c, slot))
		return -EINVAL;
	uint32_t sim = meta ? meta->sim_id : 0, step = meta ? meta->time_step : 0;
	if (c->policy->has_pairs && (sim >= f->sweep_size || step >= f->nb_time_steps))
		return -ERANGE;
	/* Only the policies with windows keep the end-of-episode mark; other bits are reserved. */
	uint32_t flags = meta ? meta->flags & cistern__kept_flags(c->policy) : 0;
	struct cistern_slotmeta *m = M(c, slot->index_);
	uint64_t id = atomic_fetch_add_explicit(&h->next_sample_id, 1, memory_order_relaxed);
	m->len = len;
	/* Relaxed atomic stores: pair and window lookups peek at these before pinning. */
	__atomic_store_n(&m->sample_id, id, __ATOMIC_RELAXED);
	__atomic_store_n(&m->sim_id, sim, __ATOMIC_RELAXED);
	__atomic_store_n(&m->time_step, step, __ATOMIC_RELAXED);
	__atomic_store_n(&m->flags, flags, __ATOMIC_RELAXED);
	atomic_store_explicit(&m->seen, 0, memory_order_relaxed);
	if (meta)
		meta->sample_id = id;
	/* The ring keeps its position; the others are stamped with the sample id. */
	uint64_t pos = c->policy->evicts_oldest ? slot->pos_ : id;
	atomic_fetch_add_explicit(&h->population, 1, memory_order_relaxed);
	/* [rs-held] seq_cst exchange: publishes payload and metadata; [wait-register] too. */
	atomic_exchange_explicit(&m->word, sw_make(pos, RS_HELD, 0), memory_order_seq_cst);
	if (c->policy->has_pairs)
		cistern__pairs_publish(c, slot->index_, sim, step);
	slot->live_ = 0;
	cistern__count(&c->me->ctr.puts, 1);
	/* [rate-budget] seq_cst: a reader's take sees this put, or our wake finds it waiting. */
	if (f->reads_per_put > 0) {
		atomic_fetch_add_explicit(&h->rl_puts, 1, memory_order_seq_cst);
		if (cistern__rs(c)->rl_marked)
			cistern__rate_unmark(c); /* it put: it waits no more (rate_limit.c) */
	}
	cistern__wake_readers(c);
	return 0;
}

int cistern__rs_abort(struct cistern *c, struct cistern_slot *slot)
{
	if (!slot_is_mine(c, slot))
		return -EINVAL;
	/* What was in the slot (if evicted) is gone: [rs-empty], then [rs-fill]. */
	atomic_store_explicit(&M(c, slot->index_)->word,
			      sw_make(slot->pos_ + c->slot_count, RS_EMPTY, 0),
			      memory_order_seq_cst);
	atomic_fetch_sub_explicit(&c->hdr->filled, 1, memory_order_seq_cst);
	note_vacancy(c, slot->index_);
	slot->live_ = 0;
	cistern__wake_producers(c);
	cistern__wake_readers(c); /* a reader may be waiting to see end of data */
	return 0;
}

/* Hand out a sample this handle pinned: seen += 1. */
int cistern__rs_read_pinned(struct cistern *c, struct cistern_sample *s, uint64_t index,
			    uint64_t word)
{
	uint32_t old = cistern__seen_add(c, index);
	if (rs_over_cap(c, old)) {
		cistern__rs_refuse_pinned(c, index);
		return -EAGAIN;
	}
	rs_fill_sample(c, s, index, word, RS_LIVE_PINNED);
	cistern__count(&c->me->ctr.gets, 1);
	if (old == 0) {
		cistern__rs_note_seen(c, index);
		if (cistern__reads_alone(c))
			cistern__fence_before_wake(); /* [wait-register]: seen was a plain store */
		cistern__wake_producers(c);           /* it just became evictable */
	}
	return 0;
}

/* Take a held sample for this handle alone (FIRO, and every read after close). */
int cistern__rs_read_exclusive(struct cistern *c, struct cistern_sample *s, uint64_t index)
{
	struct cistern_slotmeta *m = M(c, index);
	uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
	if (sw_state(w) != RS_HELD)
		return -EAGAIN;
	/* [rs-held], [rs-release] acquire: the sample and the last holder's reads before it. */
	uint64_t nw = sw_make(sw_pos(w), RS_ACQUIRED, c->owner);
	if (!atomic_compare_exchange_strong_explicit(&m->word, &w, nw, memory_order_acq_rel,
						     memory_order_relaxed))
		return -EAGAIN;
	if (rs_over_cap(c, atomic_fetch_add_explicit(&m->seen, 1, memory_order_relaxed))) {
		/* Spent: put it back as a give-back does ([rs-release] seq_cst), and let go. */
		atomic_fetch_sub_explicit(&m->seen, 1, memory_order_relaxed);
		atomic_store_explicit(&m->word, w, memory_order_seq_cst);
		rs_let_go(c, index);
		return -EAGAIN;
	}
	rs_fill_sample(c, s, index, nw, RS_LIVE_EXCLUSIVE);
	cistern__count(&c->me->ctr.gets, 1);
	return 0;
}

/* cistern__rs_remove(), counted in ctr. */
static void remove_counted(struct cistern *c, uint64_t index, uint64_t word,
			   struct cistern_counters *ctr)
{
	struct cistern_slotmeta *m = M(c, index);
	if (c->policy->has_pairs)
		cistern__pairs_forget(c, index);
	/* Read before the slot is EMPTY: a fill may reset it right after. */
	uint32_t seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
	/* [rs-empty] seq_cst: the reader's accesses are done before the slot can be refilled. */
	atomic_store_explicit(&m->word, sw_make(sw_pos(word) + c->slot_count, RS_EMPTY, 0),
			      memory_order_seq_cst);
	/* The counters after the slot ([rs-fill]): a death in between leaves them high. */
	count_leaving_in(c, ctr, seen, false);
	atomic_fetch_sub_explicit(&c->hdr->filled, 1, memory_order_seq_cst);
	note_vacancy(c, index);
	cistern__wake_producers(c);
	cistern__wake_readers(c); /* end of data may have arrived */
}

void cistern__rs_remove(struct cistern *c, uint64_t index, uint64_t word)
{
	remove_counted(c, index, word, &c->me->ctr);
}

void cistern__rs_vacate(struct cistern *c, uint64_t index, uint64_t word)
{
	/* [rs-empty] seq_cst: the spill's copy of the sample is done before a refill. */
	atomic_store_explicit(&M(c, index)->word,
			      sw_make(sw_pos(word) + c->slot_count, RS_EMPTY, 0),
			      memory_order_seq_cst);
	/* After the slot ([rs-fill]): a death in between leaves the count high. */
	atomic_fetch_sub_explicit(&c->hdr->filled, 1, memory_order_seq_cst);
	note_vacancy(c, index);
}

bool cistern__rs_exclusive_is_mine(struct cistern *c, const struct cistern_sample *s, uint64_t *w)
{
	if (s->live_ != RS_LIVE_EXCLUSIVE || s->index_ >= c->slot_count)
		return false;
	*w = atomic_load_explicit(&M(c, s->index_)->word, memory_order_relaxed);
	return *w == sw_make(s->pos_, RS_ACQUIRED, c->owner);
}

/* Release for the reservoirs: drop a pin, or remove what was taken after close. */
int cistern__rs_release_generic(struct cistern *c, struct cistern_sample *s)
{
	if (s->live_ == RS_LIVE_PINNED && s->index_ < c->slot_count) {
		int r = cistern__unpin(c, s->index_);
		if (r < 0)
			return r;
		rs_let_go(c, s->index_);
	} else {
		uint64_t w;
		if (!cistern__rs_exclusive_is_mine(c, s, &w))
			return -EINVAL;
		cistern__rs_remove(c, s->index_, w);
	}
	s->live_ = 0;
	s->data = NULL;
	return 0;
}

int cistern__rs_unacquire(struct cistern *c, struct cistern_sample *s)
{
	struct cistern_slotmeta *m = M(c, s->index_ < c->slot_count ? s->index_ : 0);
	uint64_t w;
	if (s->live_ == RS_LIVE_PINNED && s->index_ < c->slot_count) {
		/* Before the unpin: no evictor may count this read as seen. */
		cistern__seen_sub(c, s->index_);
		int r = cistern__unpin(c, s->index_);
		if (r < 0)
			return r;
		rs_let_go(c, s->index_);
	} else if (cistern__rs_exclusive_is_mine(c, s, &w)) {
		atomic_fetch_sub_explicit(&m->seen, 1, memory_order_relaxed);
		/* [rs-release] seq_cst: our reads (and seen) before another takes it. */
		atomic_store_explicit(&m->word, sw_make(sw_pos(w), RS_HELD, 0),
				      memory_order_seq_cst);
		rs_let_go(c, s->index_);
		cistern__wake_readers(c);
	} else {
		return -EINVAL;
	}
	cistern__count(&c->me->ctr.gets, (uint64_t)-1);
	s->live_ = 0;
	s->data = NULL;
	return 0;
}

int cistern__rs_hand_back(struct cistern *c, struct cistern_sample *s)
{
	/* A pinned read was made while reception was open, so the limiter counted it. */
	bool counted = s->live_ == RS_LIVE_PINNED;
	int r = cistern__rs_unacquire(c, s);
	if (r == 0 && counted)
		cistern__rate_give_back(c, 1); /* its seen count went back: its read too */
	return r;
}

bool cistern__rs_closed(struct cistern *c)
{
	/* [close] seq_cst: before the looks at filled and the slot words ([rs-fill]). */
	return atomic_load_explicit(&c->hdr->closed, memory_order_seq_cst) != 0;
}

/*
 * How often one handle may look at every slot to see past a `filled` left
 * high by a death (cistern__rs_drained): readers call it each time they find nothing,
 * and the look reads every slot word.
 */
#define DRAIN_LOOK_NS (10 * 1000 * 1000)

/* No slot in use (all EMPTY), read after reception closed. */
static bool no_slot_in_use(struct cistern *c)
{
	for (uint64_t i = 0; i < c->slot_count; i++) {
		/* [rs-fill] seq_cst: after our look at closed, against fills' claims. */
		uint64_t w = atomic_load_explicit(&M(c, i)->word, memory_order_seq_cst);
		if (sw_state(w) != RS_EMPTY)
			return false;
	}
	return true;
}

bool cistern__rs_drained(struct cistern *c)
{
	struct cistern_hdr *h = c->hdr;
	/*
	 * closed first: a fill that saw reception open counted its slot, and
	 * claimed it, before its re-check of closed, so before the close.
	 */
	if (!cistern__rs_closed(c))
		return false;
	if (atomic_load_explicit(&h->filled, memory_order_seq_cst) == 0) /* [rs-fill] */
		return true;
	if (!atomic_load_explicit(&h->counts_unsure, memory_order_acquire)) /* [counts-unsure] */
		return false;
	/* A death may have left `filled` high (reservoir.h): believe the slots, now and then. */
	return look_due(&cistern__rs(c)->next_drain_look_ns, DRAIN_LOOK_NS) && no_slot_in_use(c);
}

void cistern__rs_reclaim(struct cistern *c, uint32_t owner)
{
	struct cistern_hdr *h = c->hdr;
	struct cistern_counters *retired = &h->retired;
	/*
	 * Not our own detach: the owner died, perhaps between a slot change
	 * and its count (reservoir.h). Before the walk, whose end wakes every
	 * sleeper to look again (liveness.c). [counts-unsure] seq_cst store.
	 */
	if (owner != c->owner)
		atomic_store_explicit(&h->counts_unsure, 1, memory_order_seq_cst);
	/*
	 * Each slot is counted before its CAS, and the count taken back if the
	 * CAS fails: a reclaimer that dies half-way leaves its entry to the
	 * next sweeper, who does it again, so a slot done but not counted would
	 * go uncounted for good, while one counted but not done is counted
	 * twice (docs/protocol/reservoirs.md: statistics err high, never low).
	 */
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *m = M(c, i);
		/* Acquire, no edge: only state and owner are used; the CASes decide. */
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		if (sw_owner(w) != owner)
			continue;
		if (sw_state(w) == RS_RESERVED) {
			/* An unfinished put: that sample never existed: [rs-empty], [rs-fill]. */
			uint64_t nw = sw_make(sw_pos(w) + c->slot_count, RS_EMPTY, 0);
			atomic_fetch_add_explicit(&retired->reclaimed, 1, memory_order_relaxed);
			if (atomic_compare_exchange_strong_explicit(
				    &m->word, &w, nw, memory_order_seq_cst, memory_order_relaxed))
				atomic_fetch_sub_explicit(&h->filled, 1, memory_order_seq_cst);
			else
				atomic_fetch_sub_explicit(&retired->reclaimed, 1,
							  memory_order_relaxed);
		} else if (sw_state(w) == RS_EVICTING) {
			/*
			 * Died deciding whether to evict, or retiring a spent
			 * sample: the sample stays ([rs-release]); spent, it goes.
			 */
			atomic_compare_exchange_strong_explicit(
				&m->word, &w, sw_make(sw_pos(w), RS_HELD, 0), memory_order_seq_cst,
				memory_order_relaxed);
			rs_let_go_as(c, i, owner);
		} else if (sw_state(w) == RS_ACQUIRED) {
			/*
			 * A read that never finished: the sample goes back, unread.
			 * Its seen count is taken back, never below 0 (the reader
			 * may have died between its claim and raising it); a
			 * reclaimer that dies before the CAS makes the next one take
			 * it back twice, which errs on the side of another read.
			 * [rs-release] seq_cst CAS, after the seen count.
			 */
			uint64_t nw = sw_make(sw_pos(w), RS_HELD, 0);
			atomic_fetch_add_explicit(&retired->redeliveries, 1, memory_order_relaxed);
			bool lowered = cistern__seen_take_back(m);
			if (!atomic_compare_exchange_strong_explicit(
				    &m->word, &w, nw, memory_order_seq_cst, memory_order_relaxed)) {
				if (lowered)
					atomic_fetch_add_explicit(&m->seen, 1,
								  memory_order_relaxed);
				atomic_fetch_sub_explicit(&retired->redeliveries, 1,
							  memory_order_relaxed);
			}
			rs_let_go_as(c, i, owner);
		}
	}
	cistern__drop_pins(c, &cistern__procs(c)[owner - 1]);
}

uint64_t cistern__rs_population(const struct cistern *c, const struct cistern_stats *st)
{
	(void)st;
	return atomic_load_explicit(&c->hdr->population, memory_order_relaxed);
}

/*
 * max_times_sampled. A read counts itself in seen when it is handed out,
 * and one that finds the count at the cap already is refused and taken back
 * (rs_over_cap()): counts taken and not given back never pass the cap, so no
 * sample is handed out more than max_times_sampled times. A spent sample
 * stays HELD while readers pin it, and leaves when the last lets go: each
 * one that lets go (an unpin, a take given back, a producer backing off an
 * eviction, a reclaim putting back what the dead held) looks after letting
 * go, and the one that finds the sample held, spent and unpinned removes it,
 * through EVICTING as an eviction does, so that a reader pinning meanwhile
 * is seen ([retire]).
 *
 * [retire] Those who let go and the remover race as pins and evictions do
 * (pins.c), all seq_cst: whoever lets go drops its hold (an unpin, a word
 * put back), then fences and looks at the word and pins; the remover CASes
 * HELD -> EVICTING, then looks at pins, and if a pin is there puts the word
 * back and looks at pins again. In the single total order either the
 * remover's last look sees the pin gone, or the one letting go sees the
 * word HELD again: one of them removes the sample, and it is never left
 * spent, held and unpinned for good (then it would never be read again,
 * and after close its slot would never empty).
 *
 * The prioritized policy zeroes a spent sample's leaf when it draws its
 * last read (prioritized.c), so that a removal outside its lock leaves the
 * tree right.
 */
void cistern__rs_retire_as(struct cistern *c, uint64_t index, uint32_t owner)
{
	/* Only an attachment removes: a handle without an entry holds nothing to let go. */
	if (owner == 0 || owner > c->fixed.procs_count)
		return;
	struct cistern_slotmeta *m = M(c, index);
	struct cistern_counters *ctr = &cistern__procs(c)[owner - 1].ctr;
	uint32_t cap = c->fixed.max_times_sampled;
	/* [retire] seq_cst fence: our letting go (perhaps a plain unpin) before the looks. */
	cistern__full_fence();
	for (int tries = 0; tries < RS_PICK_TRIES; tries++) {
		/* [retire] seq_cst looks; pins also acquires [unpin] (seen given back before it). */
		uint64_t w = atomic_load_explicit(&m->word, memory_order_seq_cst);
		if (sw_state(w) != RS_HELD ||
		    atomic_load_explicit(&m->pins, memory_order_seq_cst) ||
		    atomic_load_explicit(&m->seen, memory_order_relaxed) < cap)
			return;
		uint64_t tentative = sw_make(sw_pos(w), RS_EVICTING, owner);
		/* [retire], [pin-evict] seq_cst CAS: readers that pin from now on see it. */
		if (!atomic_compare_exchange_strong_explicit(
			    &m->word, &w, tentative, memory_order_seq_cst, memory_order_relaxed))
			continue;
		/*
		 * No pin now: nobody can give a read back any more (only holders
		 * do), and a seen count given back before its unpin shows.
		 */
		bool unpinned = atomic_load_explicit(&m->pins, memory_order_seq_cst) == 0;
		if (unpinned && atomic_load_explicit(&m->seen, memory_order_relaxed) >= cap) {
			remove_counted(c, index, w, ctr);
			return;
		}
		/* Pinned, or a read was given back: back to HELD; if pinned, look again. */
		atomic_store_explicit(&m->word, w, memory_order_seq_cst);
		if (unpinned)
			return;
	}
}

void cistern__rs_retire_if_spent(struct cistern *c, uint64_t index)
{
	cistern__rs_retire_as(c, index, c->owner);
}

void cistern__rs_refuse_pinned(struct cistern *c, uint64_t index)
{
	/* Before the unpin, as a give-back: no evictor or remover counts this read. */
	cistern__seen_sub(c, index);
	cistern__unpin(c, index);
	cistern__rs_retire_if_spent(c, index);
}

/* ---- Reservoir and BatchReservoir ---- */

int cistern__rs_reservoir_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	if (!cistern__rs_rate_allows_put(c))
		return -EAGAIN;
	int r = cistern__rs_fill_reserve(c, slot);
	/*
	 * Full by the count: is it really full? After a death the count may
	 * stand over an empty slot (reservoir.h), and a put that can evict
	 * never waits, so it must look before it evicts, or the slot would
	 * stay empty for good.
	 */
	if (r == -EAGAIN)
		r = cistern__rs_fill_past_count(c, slot);
	if (r == -EAGAIN)
		r = cistern__rs_evict_reserve(c, slot, NULL);
	if (r == -EAGAIN && c->policy->has_pairs && !cistern__pairs_any_held(c))
		r = cistern__rs_evict_reserve(c, slot, cistern__pairs_is_orphan);
	/* Nothing this put may take: it waits for a read, which the limiter lets through. */
	if (r == -EAGAIN)
		cistern__rs_rate_stuck(c, true);
	return r;
}

static int batch_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	(void)c;
	(void)s;
	return -EINVAL; /* the unit of a read is a batch: cistern_acquire_batch() */
}

static int batch_try_acquire_batch(struct cistern *c, struct cistern_sample *out, size_t n)
{
	if (n != c->fixed.batch_size)
		return -EINVAL;
	return cistern__rs_try_acquire_n(c, out, n);
}

static const struct cistern_ops cistern__reservoir_ops = {
	.init = cistern__rs_init,
	.try_reserve = cistern__rs_reservoir_try_reserve,
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

static const struct cistern_ops cistern__batch_ops = {
	.init = cistern__rs_init,
	.try_reserve = cistern__rs_reservoir_try_reserve,
	.commit = cistern__rs_commit,
	.abort = cistern__rs_abort,
	.try_acquire = batch_try_acquire,
	.release = cistern__rs_release_generic,
	.release_batch = cistern__rs_release_batch,
	.unacquire = cistern__rs_hand_back,
	.try_acquire_batch = batch_try_acquire_batch,
	.gather_now = cistern__rs_gather_now,
	.drained = cistern__rs_drained,
	.reclaim = cistern__rs_reclaim,
	.population = cistern__rs_population,
};

const char *cistern__rs_config_problem(const struct cistern_config *cfg)
{
	if (cfg->watermark == 0)
		return "the reservoir policies need a watermark above 0";
	return NULL;
}

int cistern__rs_new_state(struct cistern *c)
{
	struct cistern__rs_state *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	rs->pin_bit = -1;
	c->pstate = rs;
	return 0;
}

void cistern__rs_free_state(struct cistern *c)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	if (!rs)
		return; /* the handle went before its state was made */
	cistern__picker_free(&rs->pick_read);
	cistern__picker_free(&rs->pick_evict);
	cistern__picker_free(&rs->pick_empty);
	cistern__picker_free(&rs->pick_window);
	cistern__pins_free(c);
	free(rs->scratch.e);
	free(rs);
	c->pstate = NULL;
}

const char *cistern__rs_limited_config_problem(const struct cistern_config *cfg)
{
	const char *why = cistern__rs_config_problem(cfg);
	if (why)
		return why;
	/* A slack set by hand must admit a read. */
	if (!cistern__rate_admits(cfg, 1))
		return "rate_slack is too small for reads_per_put: the rate limiter could "
		       "never admit a read (rate_slack must be at least (reads_per_put + "
		       "1) "
		       "/ 2, or 0 for automatic)";
	return NULL;
}

/*
 * Reservoir and BatchReservoir share their state, snapshot, tiering, pins and
 * rate limiter: only the read ops and the config check differ. One list of
 * the shared hooks keeps the two entries from drifting apart.
 */
#define RS_FAMILY_HOOKS                                                                         \
	.snap = &cistern__reservoir_snap_ops, .new_state = cistern__rs_new_state,               \
	.free_state = cistern__rs_free_state, .tiering = &cistern__rs_tiering,                  \
	.reclaim_idle = cistern__drop_pins, .forget = cistern__rate_forget,                     \
	.flags = CISTERN_SINGLE_READER, .limiter = &cistern__rate_limiter, .evicts_seen = true, \
	.counts_reads = true, .readers_pin = true, .caps_reads = true

const struct cistern__policy cistern__reservoir_policy = {
	.name = "reservoir",
	.value = CISTERN_RESERVOIR,
	.ops = &cistern__reservoir_ops,
	.config_problem = cistern__rs_limited_config_problem,
	RS_FAMILY_HOOKS,
};

static const char *batch_config_problem(const struct cistern_config *cfg)
{
	if (cfg->batch_size == 0 || cfg->batch_size > cfg->slot_count)
		return "BatchReservoir needs a batch_size from 1 to slot_count";
	if (cfg->watermark < cfg->batch_size)
		return "BatchReservoir needs a watermark of at least batch_size";
	/* A slack set by hand must admit the policy's own read. */
	if (!cistern__rate_admits(cfg, cfg->batch_size))
		return "rate_slack is too small for reads_per_put: the rate limiter could "
		       "never admit a batch of batch_size (rate_slack must be at least "
		       "(reads_per_put + batch_size) / 2, or 0 for automatic)";
	return NULL;
}

const struct cistern__policy cistern__batch_policy = {
	.name = "batch-reservoir",
	.value = CISTERN_BATCH_RESERVOIR,
	.ops = &cistern__batch_ops,
	.config_problem = batch_config_problem,
	.reads_whole_batches = true,
	RS_FAMILY_HOOKS,
};
