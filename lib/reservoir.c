/* SPDX-License-Identifier: MIT */
/*
 * reservoir.c - the machinery FIRO and the reservoirs share (states in
 * reservoir.h), and the Reservoir, FIFOEvictReservoir and BatchReservoir
 * policies themselves.
 *
 * Ordering, as in fifo.c: claims are acq_rel CASes; commit publishes payload
 * and metadata with a seq_cst exchange; evictions and pins follow the seq_cst
 * handshake described in pins.c; a removal hands the slot back with a seq_cst
 * store after the reader's last access.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "reservoir.h"

/*
 * How far batched reads look ahead (rs_stream_pinned, rs_release_batch), in slot
 * metadata lines; a power of two. From 8 to 64 it makes little difference.
 */
#define RS_AHEAD 16

static inline struct cistern_slotmeta *M(struct cistern *c, uint64_t i)
{
	return cistern__slotmeta(c, i);
}

void rs_init(struct cistern_hdr *h)
{
	/* EMPTY(i): for the ring of FIFOEvictReservoir, slot i first serves position i. */
	for (uint64_t i = 0; i < h->slot_count; i++)
		atomic_store_explicit(&cistern__meta_at(h, i)->word, sw_make(i, RS_EMPTY, 0),
				      memory_order_relaxed);
}

bool rs_is_held(struct cistern *c, uint64_t i, void *arg)
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
	uint64_t n = c->slot_count;
	uint64_t i = c->fill_next ? c->fill_next - 1 : cistern__rng_below(&c->rng, n);
	bool found = false;
	for (int k = 0; k < FILL_LOOK && !found; k++) {
		found = is_empty(c, i, NULL);
		if (found)
			*out = i;
		i = i + 1 == n ? 0 : i + 1;
	}
	c->fill_next = i + 1; /* 0 means "not started" */
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
	 * seq_cst: the claim is ordered before our closed re-check, so a
	 * reader that finds reception closed and then looks at every slot
	 * (rs_drained) sees it; acquire on success for what follows.
	 */
	if (!atomic_compare_exchange_strong_explicit(&m->word, &w,
						     sw_make(sw_pos(w), RS_RESERVED, c->owner),
						     memory_order_seq_cst, memory_order_relaxed))
		return false;
	cistern__set_slot(slot, c, idx, sw_pos(w));
	return true;
}

int rs_fill_reserve(struct cistern *c, struct cistern_slot *slot)
{
	struct cistern_hdr *h = c->hdr;
	/* Relaxed: a look only; the count below decides. */
	if (atomic_load_explicit(&h->filled, memory_order_relaxed) >= c->slot_count)
		return -EAGAIN;
	/*
	 * Count the slot before claiming one, and take the count back if no
	 * claim comes of it, so that a death in between leaves `filled` high
	 * (reservoir.h). seq_cst: ordered before the claim and the reserver's
	 * closed re-check (api.c), against rs_drained()'s look at closed.
	 */
	if (atomic_fetch_add_explicit(&h->filled, 1, memory_order_seq_cst) >= c->slot_count) {
		atomic_fetch_sub_explicit(&h->filled, 1, memory_order_seq_cst);
		return -EAGAIN;
	}
	int r = -EAGAIN;
	for (int tries = 0; tries < 64; tries++) {
		uint64_t idx;
		if (!fill_cursor_next(c, &idx) && !fill_from_vacancies(c, &idx)) {
			r = cistern__pick(c, &c->pick_empty, is_empty, NULL, &idx);
			if (r < 0)
				break;
			r = -EAGAIN;
		}
		if (claim_empty(c, idx, slot))
			return 0;
	}
	atomic_fetch_sub_explicit(&h->filled, 1, memory_order_seq_cst);
	return r;
}

/*
 * How often one handle may look at every slot for an empty one that `filled`
 * counts as in use (rs_fill_past_count): a put that finds the buffer full by
 * the count calls it on every try (before it evicts or waits), and a look
 * reads every slot word, a few ns each. At least 10 ms apart, and 1 us per
 * slot, so that a producer putting into (or waiting on) a full buffer of a
 * million slots spends about 1% of a core looking. Only once a dead
 * attachment was reclaimed: until then the count is exact.
 */
#define FILL_LOOK_MIN_NS (10 * 1000 * 1000)
#define FILL_LOOK_NS_PER_SLOT 1000

int rs_fill_past_count(struct cistern *c, struct cistern_slot *slot)
{
	struct cistern_hdr *h = c->hdr;
	/*
	 * Without a reclaim of a dead attachment the count is exact: full is
	 * full. Acquire: pairs with the reclaim's store, so the slot words we
	 * read below are at least as new as its repairs.
	 */
	if (!atomic_load_explicit(&h->counts_unsure, memory_order_acquire))
		return -EAGAIN;
	uint64_t gap = c->slot_count * FILL_LOOK_NS_PER_SLOT;
	if (!look_due(&c->next_fill_look_ns, gap > FILL_LOOK_MIN_NS ? (int64_t)gap : FILL_LOOK_MIN_NS))
		return -EAGAIN;
	/*
	 * A death may have left `filled` high: believe the slot words. The fill
	 * is counted like any other (before the claim, seq_cst, for the same
	 * reasons as in rs_fill_reserve()), so the count stays exactly as high
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
	atomic_fetch_sub_explicit(&h->filled, 1, memory_order_seq_cst);
	return -EAGAIN;
}

/* Account for a sample leaving the buffer (eviction or removal). */
static void count_leaving(struct cistern *c, uint32_t seen, bool evicted)
{
	struct cistern_counters *ctr = &c->me->ctr;
	cistern__count(&ctr->seen_hist[cistern__seen_bucket(seen)], 1);
	if (evicted) {
		cistern__count(&ctr->evictions, 1);
		if (seen == 0)
			cistern__count(&ctr->evicted_unseen, 1);
	}
	atomic_fetch_sub_explicit(&c->hdr->population, 1, memory_order_relaxed);
}

/*
 * Take a held slot for overwriting. The slot first goes HELD(p) ->
 * EVICTING(p, me), a tentative state that readers cannot pin and that other
 * producers must not mistake for a finished claim (they wait on it). Then,
 * seq_cst against the pin handshake (pins.c), either no reader pins it and
 * it becomes RESERVED(newpos, me), or one does and it goes back to HELD(p).
 */
static bool evict_claim(struct cistern *c, uint64_t idx, uint64_t w, uint64_t newpos,
			bool need_seen)
{
	struct cistern_slotmeta *m = M(c, idx);
	uint64_t tentative = sw_make(sw_pos(w), RS_EVICTING, c->owner);
	if (!atomic_compare_exchange_strong_explicit(&m->word, &w, tentative, memory_order_seq_cst,
						     memory_order_relaxed))
		return false;
	/*
	 * Only we move a slot out of EVICTING(.., me): plain stores suffice.
	 * Seen is checked again after pins: a reader that gave a read back
	 * (a batch it could not complete) lowers seen before it unpins, so once
	 * we see no pin we also see the seen count it left.
	 */
	if (atomic_load_explicit(&m->pins, memory_order_seq_cst) != 0 ||
	    (need_seen && atomic_load_explicit(&m->seen, memory_order_relaxed) == 0)) {
		atomic_store_explicit(&m->word, w, memory_order_seq_cst);
		return false;
	}
	if (c->hdr->policy == CISTERN_SIM_PAIRED_RESERVOIR)
		pairs_forget(c, idx);
	count_leaving(c, atomic_load_explicit(&m->seen, memory_order_relaxed), true);
	atomic_store_explicit(&m->word, sw_make(newpos, RS_RESERVED, c->owner), memory_order_seq_cst);
	return true;
}

/*
 * The log of evictable samples (segment.h: seen_log) says, slot by slot, that
 * a sample became evictable (its first read) or that one was evicted
 * (EVICT_LOG_GONE, so that the other producers' snapshots drop it too). The
 * fetch_add orders writers among themselves; the entry's release store
 * publishes it with its sequence number, which a producer checks, so an entry
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
void rs_note_seen(struct cistern *c, uint64_t index)
{
	if (c->hdr->policy != CISTERN_FIFO_EVICT_RESERVOIR)
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
	struct cistern_picker *pk = &c->pick_evict;
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
		/* Acquire: pairs with the writer's release store of the entry. */
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

int rs_evict_reserve(struct cistern *c, struct cistern_slot *slot, cistern_qualify_fn ok)
{
	if (!ok)
		merge_seen_log(c);
	for (int tries = 0; tries < 64; tries++) {
		uint64_t idx;
		int r = cistern__pick(c, &c->pick_evict, ok ? ok : is_evictable, NULL, &idx);
		if (r < 0)
			return r;
		uint64_t w = atomic_load_explicit(&M(c, idx)->word, memory_order_acquire);
		/* The orphan rule (pairs.c) is the one way to evict an unseen sample here. */
		bool need_seen = ok == NULL;
		if (sw_state(w) != RS_HELD || !evict_claim(c, idx, w, sw_pos(w), need_seen))
			continue;
		/*
		 * Its new sample is unseen: not a candidate until the log says
		 * so. Tell the other producers, and forget it here at once.
		 */
		if (!ok)
			evict_log_append(c, (uint32_t)idx | EVICT_LOG_GONE);
		if (c->pick_evict.set)
			roaring_bitmap_remove(c->pick_evict.set, (uint32_t)idx);
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

int rs_commit(struct cistern *c, struct cistern_slot *slot, size_t len, struct cistern_meta *meta)
{
	struct cistern_hdr *h = c->hdr;
	if (!slot_is_mine(c, slot))
		return -EINVAL;
	uint32_t sim = meta ? meta->sim_id : 0, step = meta ? meta->time_step : 0;
	if (h->policy == CISTERN_SIM_PAIRED_RESERVOIR &&
	    (sim >= h->sweep_size || step >= h->nb_time_steps))
		return -ERANGE;
	struct cistern_slotmeta *m = M(c, slot->index_);
	uint64_t id = atomic_fetch_add_explicit(&h->next_sample_id, 1, memory_order_relaxed);
	m->len = len;
	m->sample_id = id;
	/* Relaxed atomic stores: pair lookups peek at these before pinning. */
	__atomic_store_n(&m->sim_id, sim, __ATOMIC_RELAXED);
	__atomic_store_n(&m->time_step, step, __ATOMIC_RELAXED);
	atomic_store_explicit(&m->seen, 0, memory_order_relaxed);
	if (meta)
		meta->sample_id = id;
	/* The ring keeps its position; the others are stamped with the sample id. */
	uint64_t pos = h->policy == CISTERN_FIFO_EVICT_RESERVOIR ? slot->pos_ : id;
	atomic_fetch_add_explicit(&h->population, 1, memory_order_relaxed);
	/* seq_cst exchange: publishes payload and metadata, then the wake check. */
	atomic_exchange_explicit(&m->word, sw_make(pos, RS_HELD, 0), memory_order_seq_cst);
	if (h->policy == CISTERN_SIM_PAIRED_RESERVOIR)
		pairs_publish(c, slot->index_);
	slot->live_ = 0;
	cistern__count(&c->me->ctr.puts, 1);
	if (h->reads_per_put > 0)
		atomic_fetch_add_explicit(&h->rl_puts, 1, memory_order_seq_cst);
	cistern__wake_readers(c);
	return 0;
}

int rs_abort(struct cistern *c, struct cistern_slot *slot)
{
	if (!slot_is_mine(c, slot))
		return -EINVAL;
	/* Whatever was in the slot before (if it was evicted) is gone; the slot is empty. */
	atomic_store_explicit(&M(c, slot->index_)->word,
			      sw_make(slot->pos_ + c->slot_count, RS_EMPTY, 0), memory_order_seq_cst);
	atomic_fetch_sub_explicit(&c->hdr->filled, 1, memory_order_seq_cst);
	note_vacancy(c, slot->index_);
	slot->live_ = 0;
	cistern__wake_producers(c);
	cistern__wake_readers(c); /* a reader may be waiting to see end of data */
	return 0;
}

/* Make s the sample in slot index (metadata m, payload at data). */
static inline void fill_sample_at(struct cistern_sample *s, const struct cistern_slotmeta *m,
				  const void *data, uint64_t index, uint64_t word, uint32_t live)
{
	s->data = data;
	s->len = (size_t)m->len;
	s->meta.sample_id = m->sample_id;
	s->meta.sim_id = __atomic_load_n(&m->sim_id, __ATOMIC_RELAXED);
	s->meta.time_step = __atomic_load_n(&m->time_step, __ATOMIC_RELAXED);
	s->pos_ = sw_pos(word);
	s->index_ = (uint32_t)index;
	s->live_ = live;
}

static inline void fill_sample(struct cistern *c, struct cistern_sample *s, uint64_t index,
			       uint64_t word, uint32_t live)
{
	fill_sample_at(s, M(c, index), cistern__payload(c, index), index, word, live);
}

/* Hand out a sample this handle pinned: seen += 1. */
int rs_read_pinned(struct cistern *c, struct cistern_sample *s, uint64_t index, uint64_t word)
{
	uint32_t old = cistern__seen_add(c, index);
	fill_sample(c, s, index, word, RS_LIVE_PINNED);
	cistern__count(&c->me->ctr.gets, 1);
	if (old == 0) {
		rs_note_seen(c, index);
		if (c->sole_reading)
			cistern__fence_before_wake(); /* seen was a plain store */
		cistern__wake_producers(c); /* it just became evictable */
	}
	return 0;
}

/* Take a held sample for this handle alone (FIRO, and every read after close). */
int rs_read_exclusive(struct cistern *c, struct cistern_sample *s, uint64_t index)
{
	struct cistern_slotmeta *m = M(c, index);
	uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
	if (sw_state(w) != RS_HELD)
		return -EAGAIN;
	uint64_t nw = sw_make(sw_pos(w), RS_ACQUIRED, c->owner);
	if (!atomic_compare_exchange_strong_explicit(&m->word, &w, nw, memory_order_acq_rel,
						     memory_order_relaxed))
		return -EAGAIN;
	atomic_fetch_add_explicit(&m->seen, 1, memory_order_relaxed);
	fill_sample(c, s, index, nw, RS_LIVE_EXCLUSIVE);
	cistern__count(&c->me->ctr.gets, 1);
	return 0;
}

void rs_remove(struct cistern *c, uint64_t index, uint64_t word)
{
	struct cistern_slotmeta *m = M(c, index);
	if (c->hdr->policy == CISTERN_SIM_PAIRED_RESERVOIR)
		pairs_forget(c, index);
	/* Read before the slot is EMPTY: a fill may reset it right after. */
	uint32_t seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
	/* seq_cst: the reader's accesses are done before the slot can be refilled. */
	atomic_store_explicit(&m->word, sw_make(sw_pos(word) + c->slot_count, RS_EMPTY, 0),
			      memory_order_seq_cst);
	/* The counters after the slot: a death in between leaves them high (reservoir.h). */
	count_leaving(c, seen, false);
	atomic_fetch_sub_explicit(&c->hdr->filled, 1, memory_order_seq_cst);
	note_vacancy(c, index);
	cistern__wake_producers(c);
	cistern__wake_readers(c); /* end of data may have arrived */
}

bool rs_exclusive_is_mine(struct cistern *c, const struct cistern_sample *s, uint64_t *w)
{
	if (s->live_ != RS_LIVE_EXCLUSIVE || s->index_ >= c->slot_count)
		return false;
	*w = atomic_load_explicit(&M(c, s->index_)->word, memory_order_relaxed);
	return *w == sw_make(s->pos_, RS_ACQUIRED, c->owner);
}

/* Release for the reservoirs: drop a pin, or remove what was taken after close. */
int rs_release_generic(struct cistern *c, struct cistern_sample *s)
{
	if (s->live_ == RS_LIVE_PINNED && s->index_ < c->slot_count) {
		int r = cistern__unpin(c, s->index_);
		if (r < 0)
			return r;
	} else {
		uint64_t w;
		if (!rs_exclusive_is_mine(c, s, &w))
			return -EINVAL;
		rs_remove(c, s->index_, w);
	}
	s->live_ = 0;
	s->data = NULL;
	return 0;
}

/*
 * rs_release_batch() for the sole reader holding no repeated pins (the usual
 * case): each pinned sample's bit cleared by a release store, with what the
 * loop reads of the handle in locals; anything else through the general path.
 */
static int release_batch_sole(struct cistern *c, struct cistern_sample *s, size_t n)
{
	int first = 0;
	char *meta0 = c->meta0;
	uint64_t mstride = c->meta_stride;
	uint64_t nslots = c->slot_count, bit = UINT64_C(1) << c->pin_bit;
	for (size_t i = 0; i < n; i++) {
		uint32_t idx = s[i].index_;
		int r = 0;
		if (s[i].live_ == RS_LIVE_PINNED && idx < nslots) {
			_Atomic uint64_t *pins = &cistern__slotmeta_in(meta0, mstride, idx)->pins;
			uint64_t p = atomic_load_explicit(pins, memory_order_relaxed);
			if (p & bit) {
				/* Release: our reads of the payload come before it (pins.c). */
				atomic_store_explicit(pins, p & ~bit, memory_order_release);
				s[i].live_ = 0;
				s[i].data = NULL;
			} else {
				r = -EINVAL;
			}
		} else {
			r = rs_release_generic(c, &s[i]);
		}
		if (r < 0 && first == 0)
			first = r;
	}
	/* The unpins were plain stores; one wake for all of them, as below. */
	cistern__fence_before_wake();
	cistern__wake_producers(c);
	return first;
}

/*
 * A whole batch back: as rs_release_generic() on each sample, but with the
 * next samples' slot metadata prefetched and producers woken once, after the
 * last unpin. One wake suffices: every unpin is a seq_cst RMW before the
 * wake's seq_cst look at producers_waiting (wait.c), so a producer that
 * registered too late to be seen there re-checks after all of them.
 */
int rs_release_batch(struct cistern *c, struct cistern_sample *s, size_t n)
{
	if (c->sole_reading && c->dups.used == 0 && c->pin_bit >= 0)
		return release_batch_sole(c, s, n);
	int first = 0;
	bool wake = false;
	for (size_t i = 0; i < n; i++) {
		if (i + RS_AHEAD < n && s[i + RS_AHEAD].index_ < c->slot_count)
			__builtin_prefetch(M(c, s[i + RS_AHEAD].index_), 1, 3);
		int r;
		if (s[i].live_ == RS_LIVE_PINNED && s[i].index_ < c->slot_count) {
			r = cistern__unpin_quiet(c, s[i].index_);
			if (r >= 0) {
				wake |= r > 0;
				s[i].live_ = 0;
				s[i].data = NULL;
			}
		} else {
			r = rs_release_generic(c, &s[i]);
		}
		if (r < 0 && first == 0)
			first = r;
	}
	if (wake) {
		if (c->sole_reading)
			cistern__fence_before_wake(); /* the unpins were plain stores */
		cistern__wake_producers(c);
	}
	return first;
}

int rs_unacquire(struct cistern *c, struct cistern_sample *s)
{
	struct cistern_slotmeta *m = M(c, s->index_ < c->slot_count ? s->index_ : 0);
	uint64_t w;
	if (s->live_ == RS_LIVE_PINNED && s->index_ < c->slot_count) {
		/* Before the unpin: no evictor may count this read as seen. */
		cistern__seen_sub(c, s->index_);
		int r = cistern__unpin(c, s->index_);
		if (r < 0)
			return r;
	} else if (rs_exclusive_is_mine(c, s, &w)) {
		atomic_fetch_sub_explicit(&m->seen, 1, memory_order_relaxed);
		atomic_store_explicit(&m->word, sw_make(sw_pos(w), RS_HELD, 0), memory_order_seq_cst);
		cistern__wake_readers(c);
	} else {
		return -EINVAL;
	}
	cistern__count(&c->me->ctr.gets, (uint64_t)-1);
	s->live_ = 0;
	s->data = NULL;
	return 0;
}

bool rs_closed(struct cistern *c)
{
	return atomic_load_explicit(&c->hdr->closed, memory_order_seq_cst) != 0;
}

/*
 * How often one handle may look at every slot to see past a `filled` left
 * high by a death (rs_drained): readers call it each time they find nothing,
 * and the look reads every slot word.
 */
#define DRAIN_LOOK_NS (10 * 1000 * 1000)

/* No slot in use (all EMPTY), read after reception closed. */
static bool no_slot_in_use(struct cistern *c)
{
	for (uint64_t i = 0; i < c->slot_count; i++) {
		/* seq_cst: after our look at closed, against fills' seq_cst claims. */
		uint64_t w = atomic_load_explicit(&M(c, i)->word, memory_order_seq_cst);
		if (sw_state(w) != RS_EMPTY)
			return false;
	}
	return true;
}

bool rs_drained(struct cistern *c)
{
	struct cistern_hdr *h = c->hdr;
	/*
	 * closed first: a fill that saw reception open counted its slot, and
	 * claimed it, before its re-check of closed, so before the close.
	 */
	if (!rs_closed(c))
		return false;
	if (atomic_load_explicit(&h->filled, memory_order_seq_cst) == 0)
		return true;
	if (!atomic_load_explicit(&h->counts_unsure, memory_order_acquire))
		return false;
	/* A death may have left `filled` high (reservoir.h): believe the slots, now and then. */
	return look_due(&c->next_drain_look_ns, DRAIN_LOOK_NS) && no_slot_in_use(c);
}

void rs_reclaim(struct cistern *c, uint32_t owner)
{
	struct cistern_hdr *h = c->hdr;
	struct cistern_counters *retired = &h->retired;
	/*
	 * Not our own detach: the owner died, perhaps between a slot change
	 * and its count (reservoir.h). Before the walk, whose end wakes every
	 * sleeper to look again (liveness.c).
	 */
	if (owner != c->owner)
		atomic_store_explicit(&h->counts_unsure, 1, memory_order_seq_cst);
	/*
	 * Each slot is counted before its CAS, and the count taken back if the
	 * CAS fails: a reclaimer that dies half-way leaves its entry to the
	 * next sweeper, who does it again, so a slot done but not counted would
	 * go uncounted for good, while one counted but not done is counted
	 * twice (docs/STATE-MACHINE.md: statistics err high, never low).
	 */
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *m = M(c, i);
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		if (sw_owner(w) != owner)
			continue;
		if (sw_state(w) == RS_RESERVED) {
			/* An unfinished put: that sample never existed; the slot is empty. */
			uint64_t nw = sw_make(sw_pos(w) + c->slot_count, RS_EMPTY, 0);
			atomic_fetch_add_explicit(&retired->reclaimed, 1, memory_order_relaxed);
			if (atomic_compare_exchange_strong_explicit(&m->word, &w, nw,
								    memory_order_seq_cst,
								    memory_order_relaxed))
				atomic_fetch_sub_explicit(&h->filled, 1, memory_order_seq_cst);
			else
				atomic_fetch_sub_explicit(&retired->reclaimed, 1,
							  memory_order_relaxed);
		} else if (sw_state(w) == RS_EVICTING) {
			/* Died deciding whether to evict: the sample stays. */
			atomic_compare_exchange_strong_explicit(&m->word, &w,
								sw_make(sw_pos(w), RS_HELD, 0),
								memory_order_seq_cst,
								memory_order_relaxed);
		} else if (sw_state(w) == RS_ACQUIRED) {
			/*
			 * A read that never finished: the sample goes back, unread.
			 * Its seen count is taken back, never below 0 (the reader
			 * may have died between its claim and raising it); a
			 * reclaimer that dies before the CAS makes the next one take
			 * it back twice, which errs on the side of another read.
			 */
			uint64_t nw = sw_make(sw_pos(w), RS_HELD, 0);
			atomic_fetch_add_explicit(&retired->redeliveries, 1, memory_order_relaxed);
			bool lowered = cistern__seen_take_back(m);
			if (!atomic_compare_exchange_strong_explicit(&m->word, &w, nw,
								     memory_order_seq_cst,
								     memory_order_relaxed)) {
				if (lowered)
					atomic_fetch_add_explicit(&m->seen, 1, memory_order_relaxed);
				atomic_fetch_sub_explicit(&retired->redeliveries, 1,
							  memory_order_relaxed);
			}
		}
	}
	cistern__drop_pins(c, &cistern__procs(h)[owner - 1]);
}

uint64_t rs_population(const struct cistern *c, const struct cistern_stats *st)
{
	(void)st;
	return atomic_load_explicit(&c->hdr->population, memory_order_relaxed);
}

/*
 * The rate limiter compares reads with the puts made after the first
 * `watermark` ones (the fill that reads wait for anyway, as Reverb's
 * min_size_to_sample): readers wait while reads would exceed
 * reads_per_put * puts_after_fill + slack, producers while
 * reads_per_put * puts_after_fill would exceed reads + slack.
 */
static double puts_after_fill(const struct cistern_hdr *h, uint64_t extra)
{
	uint64_t p = atomic_load_explicit(&h->rl_puts, memory_order_seq_cst) + extra;
	return p > h->watermark ? (double)(p - h->watermark) : 0.0;
}

bool rs_rate_allows_read(struct cistern *c, uint64_t n)
{
	struct cistern_hdr *h = c->hdr;
	if (h->reads_per_put <= 0 || rs_closed(c))
		return true;
	double gets = (double)atomic_load_explicit(&h->rl_gets, memory_order_seq_cst);
	return gets + (double)n <= h->reads_per_put * puts_after_fill(h, 0) + h->rate_slack;
}

bool rs_rate_allows_put(struct cistern *c)
{
	struct cistern_hdr *h = c->hdr;
	if (h->reads_per_put <= 0)
		return true;
	double gets = (double)atomic_load_explicit(&h->rl_gets, memory_order_seq_cst);
	return h->reads_per_put * puts_after_fill(h, 1) <= gets + h->rate_slack;
}

void rs_rate_count_reads(struct cistern *c, uint64_t n)
{
	if (c->hdr->reads_per_put > 0) {
		atomic_fetch_add_explicit(&c->hdr->rl_gets, n, memory_order_seq_cst);
		cistern__wake_producers(c);
	}
}

/* ---- Reservoir and BatchReservoir ---- */

int rs_reservoir_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	if (!rs_rate_allows_put(c))
		return -EAGAIN;
	int r = rs_fill_reserve(c, slot);
	/*
	 * Full by the count: is it really full? After a death the count may
	 * stand over an empty slot (reservoir.h), and a put that can evict
	 * never waits, so it must look before it evicts, or the slot would
	 * stay empty for good.
	 */
	if (r == -EAGAIN)
		r = rs_fill_past_count(c, slot);
	if (r == -EAGAIN)
		r = rs_evict_reserve(c, slot, NULL);
	if (r == -EAGAIN && c->hdr->policy == CISTERN_SIM_PAIRED_RESERVOIR && !pairs_any_held(c))
		r = rs_evict_reserve(c, slot, pairs_is_orphan);
	return r;
}

static bool take_index(struct cistern *c, struct cistern_sample *s, uint64_t idx, bool closed);

/* Open reception: pin a uniformly chosen held sample. After close: take one. */
static int reservoir_take_one(struct cistern *c, struct cistern_sample *s, bool closed)
{
	for (int tries = 0; tries < 64; tries++) {
		uint64_t idx;
		int r = cistern__pick(c, &c->pick_read, rs_is_held, NULL, &idx);
		if (r < 0)
			return r;
		if (take_index(c, s, idx, closed))
			return 0;
	}
	return -EAGAIN;
}

/* Take a specific held slot: pin it (open) or take it (closed). */
static bool take_index(struct cistern *c, struct cistern_sample *s, uint64_t idx, bool closed)
{
	if (closed)
		return rs_read_exclusive(c, s, idx) == 0;
	uint64_t w;
	if (!cistern__pin(c, idx, RS_HELD, &w))
		return false;
	rs_read_pinned(c, s, idx, w);
	return true;
}

/*
 * Complete a batch when random picks keep hitting members it already has (a
 * batch that is a large part of what is held): draw the rest without
 * replacement from a fresh snapshot, by a partial Fisher-Yates shuffle.
 */
static int finish_from_snapshot(struct cistern *c, struct cistern_sample *out, size_t got,
				size_t n, bool closed)
{
	uint32_t *a;
	uint64_t k;
	int r = cistern__snapshot(c, &c->pick_read, rs_is_held, NULL, &a, &k);
	if (r < 0)
		return r;
	for (uint64_t i = 0; i < k && got < n; i++) {
		uint64_t j = i + cistern__rng_below(&c->rng, k - i);
		uint32_t idx = a[j];
		a[j] = a[i];
		a[i] = idx;
		if (!cistern__scratch_add(&c->scratch, idx))
			continue; /* already in the batch */
		if (take_index(c, &out[got], idx, closed))
			got++;
	}
	free(a);
	return (int)got;
}

/*
 * The sole reader's batch, after rs_stream_pinned() stored a pin on each of the
 * n candidates in s[] (index_ = slot, pos_ = the word it saw held): one
 * seq_cst fence, then each slot word is read again. An unchanged word means
 * no producer can evict the sample any more (the handshake in pins.c); a
 * changed one means a producer took the slot before the fence, and that pin
 * is taken back and the slot left out of the batch's set of members, so that
 * whatever is held there now may still be drawn. The confirmed members are
 * counted as seen and made into samples, packed at the front of s[].
 * Returns how many; *woke is set if a seen count went from 0 to 1.
 */
static size_t confirm_sole_pins(struct cistern *c, struct cistern_sample *s, size_t n,
				bool *woke)
{
	size_t kept = 0;
	bool undone = false, prefetch = !c->gathering;
	/* Locals: stores into s[] could alias the handle's fields (see rs_stream_pinned()). */
	char *meta0 = c->meta0;
	uint64_t mstride = c->meta_stride;
	const char *arena = c->arena;
	uint64_t stride = c->slot_stride;
	/* seq_cst: orders every pin store above before the look again below. */
	cistern__full_fence();
	for (size_t i = 0; i < n; i++) {
		uint32_t idx = s[i].index_;
		uint64_t w = s[i].pos_;
		struct cistern_slotmeta *m = cistern__slotmeta_in(meta0, mstride, idx);
		if (atomic_load_explicit(&m->word, memory_order_relaxed) != w) {
			/* Only a pin stored now can fail: a repeated one kept the slot. */
			cistern__unpin_sole_store(c, idx);
			cistern__scratch_forget(&c->scratch, idx);
			undone = true;
			continue;
		}
		/* seen += 1 by a load and a store: cistern__seen_add() for the sole reader. */
		uint32_t seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
		atomic_store_explicit(&m->seen, seen + 1, memory_order_relaxed);
		if (seen == 0) {
			rs_note_seen(c, idx);
			*woke = true;
		}
		const char *data = arena + idx * stride;
		if (prefetch)
			__builtin_prefetch(data, 0, 3);
		fill_sample_at(&s[kept++], m, data, idx, w, RS_LIVE_PINNED);
	}
	if (undone) {
		/* A producer may have backed off from a pin that is gone now. */
		cistern__fence_before_wake();
		cistern__wake_producers(c);
	}
	return kept;
}

/*
 * Pin the members of an open-reception batch while held samples are dense,
 * i.e. while cistern__pick() would probe. The probes are drawn ahead, up to
 * RS_AHEAD of them (up to 2 * RS_BLOCK, a block of RS_BLOCK at a time, in
 * the common case of stream_blocks()), and the slot metadata line of each
 * is prefetched when it is drawn, so that the cache misses of a batch
 * overlap instead of following one another. Each candidate is then judged
 * as a probe is: skipped unless held, counted as a repeat if already in the
 * batch, else pinned. The draws are independent and uniform over the slots,
 * so what is taken is uniform over the held samples, without replacement,
 * as with one cistern__pick() per member; drawing a few more than are used
 * changes nothing about the ones used.
 *
 * The first payload line of each member is prefetched once it is pinned, for
 * the caller's reads in place, unless the batch is being gathered
 * (cistern_get_batch prefetches whole payloads as it copies; doing both was
 * slower than either).
 *
 * Repeats cost no pin: the scratch set finds them before pinning, or our own
 * bit, already on the slot, tells them (below). Counts
 * (gets) are added once for the run, and producers are woken once, after the
 * last seen count that went from 0 to 1.
 *
 * The sole reader (CISTERN_SINGLE_READER) stores its pins plainly as it goes
 * and confirms them all after one seq_cst fence (confirm_sole_pins()), where
 * every other reader pays a locked instruction and a full barrier per member.
 *
 * Returns with *got members in out[0..*got) and *dups repeats counted; when
 * a member takes `probes` misses in a row, or repeats pass the caller's
 * bound, it stops early and the caller goes on member by member.
 *
 * While the reader holds nothing (rs_pin_tells_repeats()), a slot that
 * carries its pin bit was drawn by this batch already: repeats are told by
 * that bit, found by the pin itself, and the scratch set is left empty (the
 * caller fills it if it goes on member by member).
 *
 * Gathering (gather.c; only while repeats are told by the pin bit): the
 * members are left pinned but not counted as read, with index_ and the word
 * seen held in pos_; the sole reader's pins are not confirmed either, and
 * the caller confirms them. The sole reader prefetches each candidate's
 * payload with its metadata line when it draws it, so that the caller's
 * copies, made once the pins are confirmed, find the members in cache: one
 * pass over memory. Copying each member as soon as its pin was stored,
 * inside this loop, was up to 4% slower where the host's memory was fast
 * and 18% slower where it was slow (docs/benchmarks-log.md, "Where
 * cistern's time goes"). Any other reader leaves the payloads to the
 * caller's copies, which prefetch them ahead: its pins are locked
 * instructions, and prefetching the payloads between them made its batches
 * 5% slower.
 */
/*
 * Pin a member while the handle holds nothing (rs_pin_tells_repeats()):
 * false, with nothing changed, if our bit is on the slot already, i.e. this
 * batch drew it before. The sole reader stores its bit (it is the only
 * writer of the word; rs_stream_pinned() confirms after its fence); any
 * other reader sets it with a seq_cst RMW, the first half of its handshake
 * with evictors (pins.c), whose old value tells the repeat at no extra cost.
 */
static inline bool pin_new_member(_Atomic uint64_t *pins, uint64_t bit, bool sole)
{
	if (!sole)
		return !(atomic_fetch_or_explicit(pins, bit, memory_order_seq_cst) & bit);
	uint64_t old = atomic_load_explicit(pins, memory_order_relaxed);
	if (old & bit)
		return false;
	atomic_store_explicit(pins, old | bit, memory_order_relaxed);
	return true;
}

/*
 * rs_stream_pinned()'s state while it draws and pins, in one place for its
 * two loops (stream_blocks(), stream_loop()).
 */
struct stream {
	char *meta0;
	uint64_t mstride, nslots, probes, bit, misses;
	/* The sole reader's gather: how many lines of each candidate's payload to prefetch. */
	unsigned pf_lines;
	size_t k, d, dmax;
	unsigned win, qh;
	bool woke;
	struct cistern_rng rng;
	struct cistern_rng32 pool; /* two draws to each output (slot counts fit in 32 bits) */
	struct cistern_scratch set;
	uint32_t q[RS_AHEAD];
};

/*
 * A candidate just drawn: its metadata line for the pin (a hint only: the
 * pin reads the slot again, atomically), and when the batch is gathered the
 * start of its payload too, so that the copy after the pins finds it in
 * cache; the sample's length is not known yet, so the slot's is used.
 */
static inline __attribute__((always_inline)) void stream_prefetch(const struct stream *st,
								  uint32_t idx, bool payload)
{
	const char *meta = (const char *)cistern__slotmeta_in(st->meta0, st->mstride, idx);
	__builtin_prefetch(meta, 1, 3);
	if (payload) {
		/* The payload follows the metadata line (see rs_payload_lines()). */
		cistern__prefetch_lines(meta + sizeof(struct cistern_slotmeta), st->pf_lines);
	}
}

/*
 * A member just pinned (idx, its word w) into *s. The sole reader's pins,
 * and every gathered member's, are confirmed and counted by the caller:
 * only the slot and the word are kept. Any other reader acquiring counts
 * the read now and makes the sample record.
 */
static inline __attribute__((always_inline)) void
stream_record(struct cistern *c, struct stream *st, struct cistern_sample *s, uint32_t idx,
	      uint64_t w, bool sole, bool confirm)
{
	if (sole || !confirm) {
		s->index_ = idx;
		s->pos_ = w; /* the whole word */
		return;
	}
	/*
	 * Relaxed, as in rs_read_pinned(): an evictor reads seen only after it
	 * sees no pin, and our unpin, a seq_cst RMW that comes after this, is
	 * what lets it see none.
	 */
	if (cistern__seen_add(c, idx) == 0) {
		rs_note_seen(c, idx);
		st->woke = true;
	}
	if (!c->gathering)
		__builtin_prefetch(cistern__payload(c, idx), 0, 3);
	fill_sample(c, s, idx, w, RS_LIVE_PINNED);
}

/*
 * The loop of rs_stream_pinned() for every case but the sole reader's
 * common one (stream_blocks()): any reader, repeats told by the pin bit or
 * the scratch set, a window of `win` candidates, each one taken out
 * replaced at once.
 */
static void stream_loop(struct cistern *c, struct stream *st, struct cistern_sample *out, size_t n,
			bool sole, bool by_pin, bool confirm)
{
	/* The sole reader's gather fetches payloads with the metadata (see rs_stream_pinned()). */
	bool payload = sole && !confirm;
	_Static_assert(CISTERN_SLOT_COUNT_MAX <= UINT32_MAX, "slot indices fit in 32 bits");
	/* The stops (batch full, too many misses in a row, too many repeats) tested where they change. */
	if (st->d > st->dmax || st->probes == 0)
		return;
	while (st->k < n) {
		uint32_t idx = st->q[st->qh], at = 0;
		uint32_t next = cistern__rng32_below(&st->rng, &st->pool, (uint32_t)st->nslots);
		st->q[st->qh] = next;
		stream_prefetch(st, next, payload);
		st->qh = st->qh + 1 == st->win ? 0 : st->qh + 1;
		struct cistern_slotmeta *m = cistern__slotmeta_in(st->meta0, st->mstride, idx);
		/* Acquire: what the sole reader reads of the sample after confirming is its. */
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		if (sw_state(w) != RS_HELD) {
			if (++st->misses >= st->probes)
				break;
			continue;
		}
		if (by_pin ? !pin_new_member(&m->pins, st->bit, sole)
			   : cistern__scratch_find(&st->set, idx, &at)) {
			st->misses = 0;
			if (++st->d > st->dmax) /* this batch drew it already */
				break;
			continue;
		}
		if (sole) {
			/* Pinned for now; confirmed or undone after the loop. */
			if (!by_pin && cistern__pin_sole_store(c, idx) < 0) {
				if (++st->misses >= st->probes)
					break;
				continue;
			}
		} else {
			/*
			 * By pin: the second half of the handshake, the seq_cst
			 * look at the word after the pin's seq_cst RMW (pins.c).
			 */
			bool pinned = by_pin ? atomic_load_explicit(&m->word, memory_order_seq_cst) == w
					     : cistern__pin(c, idx, RS_HELD, &w);
			if (!pinned) {
				if (by_pin)
					cistern__pin_undo(c, idx);
				/* left the held state since the look above */
				if (++st->misses >= st->probes)
					break;
				continue;
			}
		}
		stream_record(c, st, &out[st->k], idx, w, sole, confirm);
		if (!by_pin)
			cistern__scratch_put(&st->set, at, idx);
		st->k++;
		st->misses = 0;
	}
}

/*
 * Candidates that stream_blocks() draws at a time: two windows. The longer
 * lead (a candidate is prefetched 32 to 63 draws before it is judged) with
 * only the candidates a batch can use prefetched made gathered batches
 * 5-9% faster than blocks of RS_AHEAD, and zero-copy ones up to 10%
 * (docs/benchmarks-log.md, "Where cistern's time goes").
 */
#define RS_BLOCK (2 * RS_AHEAD)

/*
 * Draw the n candidates of a block into b, prefetching the first `pf` of
 * them (the ones the batch can still use, and the next read's first).
 */
static inline __attribute__((always_inline)) void
stream_draw(struct stream *st, uint32_t *b, unsigned n, unsigned pf, bool payload)
{
	for (unsigned i = 0; i < n; i++) {
		b[i] = cistern__rng32_below(&st->rng, &st->pool, (uint32_t)st->nslots);
		if (i < pf)
			stream_prefetch(st, b[i], payload);
	}
}

/*
 * How many of the next block's candidates to prefetch when `want` members
 * are still needed and `ahead` candidates are drawn before it: those the
 * batch would use if every candidate held a new member, and one more (the
 * next read's first). Near the end of a batch the rest would be lines
 * fetched for nothing.
 */
static inline unsigned stream_prefetch_count(size_t want, unsigned ahead)
{
	if (want < ahead)
		return 0;
	return want - ahead + 1 < RS_BLOCK ? (unsigned)(want - ahead + 1) : RS_BLOCK;
}

/*
 * The common loop (repeats told by the pin bit, a full window of RS_AHEAD
 * candidates), with the drawing split from the judging: a ring of two blocks
 * of RS_BLOCK candidates, one being judged while the other, drawn and
 * prefetched all at once before it, waits. Drawing inline, as stream_loop()
 * does, keeps the generator's state live beside everything the judging
 * needs, more values than the processor has registers, and the loop
 * spilled; split, each loop keeps its own in registers. The same stops and
 * the same use of the draws as stream_loop(): candidates drawn and not used
 * are dropped, which biases nothing.
 */
static inline __attribute__((always_inline)) void
stream_blocks(struct cistern *c, struct stream *st, struct cistern_sample *out, size_t n, bool sole,
	      bool confirm)
{
	/* The sole reader's gather fetches payloads with the metadata (see rs_stream_pinned()). */
	bool payload = sole && !confirm;
	uint32_t ring[2 * RS_BLOCK];
	char *meta0 = st->meta0;
	uint64_t mstride = st->mstride, bit = st->bit, probes = st->probes;
	uint64_t misses = st->misses;
	size_t k = st->k, d = st->d, dmax = st->dmax;
	unsigned cur = 0, at = 0;
	bool stop = st->d > st->dmax || probes == 0;
	/* The first block: the window the caller just drew (q[0] on), then draws of our own. */
	for (unsigned i = 0; i < RS_AHEAD; i++)
		ring[i] = st->q[i];
	stream_draw(st, ring + RS_AHEAD, RS_BLOCK - RS_AHEAD,
		    stream_prefetch_count(n - k, RS_AHEAD), payload);
	while (!stop && k < n) {
		/* Draw the other block while this one is judged. */
		stream_draw(st, ring + (cur ^ RS_BLOCK), RS_BLOCK,
			    stream_prefetch_count(n - k, RS_BLOCK), payload);
		for (at = 0; at < RS_BLOCK; at++) {
			uint32_t idx = ring[cur + at];
			struct cistern_slotmeta *m = cistern__slotmeta_in(meta0, mstride, idx);
			/* Acquire: what the sole reader reads of the sample after confirming is its. */
			uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
			if (sw_state(w) != RS_HELD) {
				if (++misses >= probes) {
					stop = true;
					at++;
					break;
				}
				continue;
			}
			if (!pin_new_member(&m->pins, bit, sole)) {
				misses = 0;
				if (++d > dmax) { /* this batch drew it already */
					stop = true;
					at++;
					break;
				}
				continue;
			}
			/* The second half of the handshake, as in stream_loop(). */
			if (!sole && atomic_load_explicit(&m->word, memory_order_seq_cst) != w) {
				cistern__pin_undo(c, idx);
				if (++misses >= probes) {
					stop = true;
					at++;
					break;
				}
				continue;
			}
			stream_record(c, st, &out[k], idx, w, sole, confirm);
			misses = 0;
			if (++k == n) {
				at++;
				break;
			}
		}
		if (at == RS_BLOCK) {
			cur ^= RS_BLOCK;
			at = 0;
		}
	}
	/* The next candidate not judged, drawn (and prefetched): the caller keeps it for the next read. */
	st->q[0] = ring[cur + at];
	st->qh = 0;
	st->k = k;
	st->d = d;
	st->misses = misses;
}

/*
 * How many lines of each candidate's payload the sole reader's gather
 * prefetches: the first CISTERN_GATHER_LINES at most (the copies ask for
 * the rest). stream_prefetch() finds a payload just after its slot's
 * metadata line, where every policy but the FIFO keeps it
 * (cistern__compute_layout()); on any other layout, none.
 */
static unsigned rs_payload_lines(const struct cistern *c)
{
	if (c->arena != c->meta0 + sizeof(struct cistern_slotmeta) ||
	    c->slot_stride != c->meta_stride)
		return 0;
	return cistern__payload_lines(c->slot_size);
}

void rs_stream_pinned(struct cistern *c, struct cistern_sample *out, size_t n, size_t *got,
		      size_t *dups, uint64_t probes, bool gather)
{
	size_t start = *got;
	bool sole = c->sole_reading;
	bool by_pin = rs_pin_tells_repeats(c);
	/*
	 * Locals (st) for what the loop reads of the handle on every candidate,
	 * and the generator's state, written back at the end: the stores into
	 * out[] could alias the handle's fields as far as the compiler knows,
	 * which would reload them all each time round.
	 *
	 * A window of `win` drawn candidates, as many as the batch still needs
	 * up to RS_AHEAD, drawn and prefetched here; the loops draw more as
	 * they go, and up to 2 * RS_BLOCK draws at the end go unused (they are
	 * independent of the rest: dropping them biases nothing).
	 */
	struct stream st = {
		.meta0 = c->meta0,
		.mstride = c->meta_stride,
		.nslots = c->slot_count,
		.probes = probes,
		.bit = by_pin ? UINT64_C(1) << c->pin_bit : 0,
		.k = start,
		.d = *dups,
		.dmax = n / 4 + 8,
		.win = n - start < RS_AHEAD ? (unsigned)(n - start) : RS_AHEAD,
		.rng = c->rng,
		.set = c->scratch,
		.pf_lines = gather && sole ? rs_payload_lines(c) : 0,
	};
	for (unsigned i = 0; i < st.win; i++) {
		if (i == 0 && c->pick_read.ahead) {
			/* Drawn and prefetched at the end of the last read (below). */
			st.q[0] = (uint32_t)(c->pick_read.ahead - 1);
			continue;
		}
		st.q[i] = (uint32_t)cistern__rng_below(&st.rng, st.nslots);
		stream_prefetch(&st, st.q[i], gather && sole);
	}
	c->pick_read.ahead = 0;
	/* The sole reader's common case, gathering or not, gets a loop of its own. */
	bool common = by_pin && st.win == RS_AHEAD;
	if (common && sole && gather)
		stream_blocks(c, &st, out, n, true, false);
	else if (common && sole)
		stream_blocks(c, &st, out, n, true, true);
	else if (common && gather)
		stream_blocks(c, &st, out, n, false, false);
	else if (common)
		stream_blocks(c, &st, out, n, false, true);
	else
		stream_loop(c, &st, out, n, sole, by_pin, !gather);
	/*
	 * The next candidate in the ring was drawn and prefetched but not
	 * looked at: the next read starts with it, its miss under way while
	 * the caller works on this one (an independent uniform draw, so using
	 * it later biases nothing, as dropping it would not).
	 */
	if (st.win)
		c->pick_read.ahead = (uint64_t)st.q[st.qh] + 1;
	c->rng = st.rng;
	*dups = st.d;
	size_t k = st.k;
	bool woke = st.woke;
	if (gather) {
		*got = k;
		return;
	}
	if (sole)
		k = start + confirm_sole_pins(c, out + start, k - start, &woke);
	cistern__count(&c->me->ctr.gets, k - start);
	if (woke) {
		if (sole)
			cistern__fence_before_wake(); /* seen counts were plain stores */
		cistern__wake_producers(c); /* some just became evictable */
	}
	*got = k;
}

int rs_open_read_ready(struct cistern *c, size_t n)
{
	struct cistern_hdr *h = c->hdr;
	uint64_t need = h->watermark > n ? h->watermark : n;
	if (atomic_load_explicit(&h->population, memory_order_acquire) < need)
		return -EAGAIN;
	if (!rs_rate_allows_read(c, n))
		return -EAGAIN;
	int b = cistern__pin_bit(c);
	return b < 0 ? b : 0;
}

static int reservoir_try_acquire_n(struct cistern *c, struct cistern_sample *out, size_t n)
{
	bool closed = rs_closed(c);
	int r;
	if (!closed && (r = rs_open_read_ready(c, n)) < 0)
		return r;
	r = cistern__scratch_reset(c, n);
	if (r < 0)
		return r;
	size_t got = 0, dups = 0;
	if (!closed) {
		uint64_t probes = cistern__pick_probes(c, &c->pick_read);
		if (probes)
			rs_stream_pinned(c, out, n, &got, &dups, probes, false);
		/* The steps below tell repeats by the scratch set: give it the stream's members. */
		if (got < n && rs_pin_tells_repeats(c))
			for (size_t i = 0; i < got; i++)
				cistern__scratch_add(&c->scratch, out[i].index_);
	}
	while (got < n) {
		if (dups > n / 4 + 8) {
			r = finish_from_snapshot(c, out, got, n, closed);
			if (r >= 0)
				got = (size_t)r;
			break;
		}
		struct cistern_sample *s = &out[got];
		r = reservoir_take_one(c, s, closed);
		if (r < 0)
			break;
		if (!cistern__scratch_add(&c->scratch, s->index_)) {
			/* Already in this batch: give this copy back. */
			rs_unacquire(c, s);
			dups++;
			continue;
		}
		got++;
	}
	if (got == n || (closed && got > 0)) {
		rs_rate_count_reads(c, got);
		return (int)got;
	}
	for (size_t i = 0; i < got; i++)
		rs_unacquire(c, &out[i]);
	return r < 0 && r != -EAGAIN ? r : -EAGAIN;
}

static int reservoir_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	int r = reservoir_try_acquire_n(c, s, 1);
	return r < 0 ? r : 0;
}

static int batch_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	(void)c;
	(void)s;
	return -EINVAL; /* the unit of a read is a batch: cistern_acquire_batch() */
}

static int batch_try_acquire_batch(struct cistern *c, struct cistern_sample *out, size_t n)
{
	if (n != c->hdr->batch_size)
		return -EINVAL;
	return reservoir_try_acquire_n(c, out, n);
}

const struct cistern_ops cistern__reservoir_ops = {
	.init = rs_init,
	.try_reserve = rs_reservoir_try_reserve,
	.commit = rs_commit,
	.abort = rs_abort,
	.try_acquire = reservoir_try_acquire,
	.release = rs_release_generic,
	.release_batch = rs_release_batch,
	.unacquire = rs_unacquire,
	.try_acquire_batch = reservoir_try_acquire_n,
	.gather_now = rs_gather_now,
	.drained = rs_drained,
	.reclaim = rs_reclaim,
	.population = rs_population,
};

const struct cistern_ops cistern__batch_ops = {
	.init = rs_init,
	.try_reserve = rs_reservoir_try_reserve,
	.commit = rs_commit,
	.abort = rs_abort,
	.try_acquire = batch_try_acquire,
	.release = rs_release_generic,
	.release_batch = rs_release_batch,
	.unacquire = rs_unacquire,
	.try_acquire_batch = batch_try_acquire_batch,
	.gather_now = rs_gather_now,
	.drained = rs_drained,
	.reclaim = rs_reclaim,
	.population = rs_population,
};

/* ---- FIFOEvictReservoir: a ring whose oldest sample is evicted ---- */

static int fifo_evict_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	struct cistern_hdr *h = c->hdr;
	bool lossy = h->flags & CISTERN_LOSSY;
	if (!rs_rate_allows_put(c))
		return -EAGAIN;
	for (;;) {
		uint64_t t = atomic_load_explicit(&h->tail, memory_order_acquire);
		uint64_t idx = cistern__slot_of(c, t);
		struct cistern_slotmeta *m = M(c, idx);
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		int64_t d = sw_lap_diff(w, t);
		if (d == 0 && sw_state(w) == RS_EMPTY) {
			uint64_t nw = sw_make(t, RS_RESERVED, c->owner);
			/* Counted before the claim, as in rs_fill_reserve(), and seq_cst for the same reasons. */
			atomic_fetch_add_explicit(&h->filled, 1, memory_order_seq_cst);
			if (!atomic_compare_exchange_strong_explicit(&m->word, &w, nw,
								     memory_order_seq_cst,
								     memory_order_relaxed)) {
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
		/* The slot holds the oldest sample, from the previous lap. */
		if (d == -(int64_t)c->slot_count && sw_state(w) == RS_HELD &&
		    (lossy || atomic_load_explicit(&m->seen, memory_order_relaxed) >= 1)) {
			if (evict_claim(c, idx, w, t, !lossy)) {
				cistern__help_advance(&h->tail, t);
				cistern__set_slot(slot, c, idx, t);
				return 0;
			}
		}
		if (atomic_load_explicit(&h->tail, memory_order_acquire) != t)
			continue;
		/* The oldest is unseen, pinned, being evicted, or still being written. */
		return -EAGAIN;
	}
}

const struct cistern_ops cistern__fifo_evict_ops = {
	.init = rs_init,
	.try_reserve = fifo_evict_try_reserve,
	.commit = rs_commit,
	.abort = rs_abort,
	.try_acquire = reservoir_try_acquire,
	.release = rs_release_generic,
	.release_batch = rs_release_batch,
	.unacquire = rs_unacquire,
	.try_acquire_batch = reservoir_try_acquire_n,
	.gather_now = rs_gather_now,
	.drained = rs_drained,
	.reclaim = rs_reclaim,
	.population = rs_population,
};
