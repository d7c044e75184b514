/* SPDX-License-Identifier: MIT */
/*
 * fifo.c - the FIFO policy: a multi-producer, multi-consumer ring whose cells
 * are the slots themselves, crash-safe at every step. This file has the
 * protocol (the policy's general calls, end of data, the reclaim of a dead
 * owner's slots, restore); fifo_copy.c has cistern_put() and cistern_get()
 * in one step; fifo.h what the two share.
 *
 * Ring positions are free-running 64-bit counters: hdr->tail (next position a
 * producer claims) and hdr->head (next position a reader takes). Position p
 * lives in slot p % slot_count. Each slot's 64-bit state word says which
 * position it serves now, in what state, and who owns it:
 *
 *     word = pos[63:16] (low 48 bits of the position) | state[15:12] | owner[11:0]
 *
 * The slot state machine (owner = attachment index + 1; n = slot_count):
 *
 *     FREE(p) --producer CAS--> RESERVED(p, me) --commit--> COMMITTED(p)
 *        ^                          |   |                       |
 *        |                  abort / |   | owner died:           | reader CAS
 *        |     after close  (store) |   | reclaim CAS           v
 *        |                          v   v                   ACQUIRED(p, me)
 *        |                        SKIP(p)                    |    |
 *        |   reader at head CAS      |        release (store)|    | owner died: reclaim CAS,
 *        +------ FREE(p+n) <---------+---------<-------------+    | or get with a short buffer
 *                    ^                                            v
 *                    +--- release <-- ACQUIRED(p, me) <-- CAS -- REDELIVER(p, old owner)
 *
 * and one more, the sole reader's one-step get of a sample of up to 64 bytes
 * (get_as() in fifo_copy.c): COMMITTED(p) --copy out, then store--> FREE(p+n),
 * no ACQUIRED.
 *
 * Only the owner moves a slot out of RESERVED(p, me) or ACQUIRED(p, me) while
 * it lives; only the one process that holds a dead owner's entry lock does the
 * reclaim CAS. The holder of a sole role (roles.c) claims with plain stores, as
 * nobody else may claim then. Every other transition is a CAS, so two
 * processes never both win.
 *
 * The indices only ever move forward by CAS(p, p+1), and any process that finds
 * the slot of position `tail` (or `head`) already past the FREE (or COMMITTED)
 * state helps move the index. A process that dies between claiming a slot and
 * moving the index therefore leaves nothing stuck: the next one moves it. A
 * producer that dies after claiming leaves RESERVED(p, dead), which the reclaim
 * turns into SKIP(p), which readers step over. A reader that dies holding a
 * sample leaves ACQUIRED(p, dead), which the reclaim turns into REDELIVER(p):
 * readers look for those (hinted by hdr->redeliver_pending) before the head.
 *
 * Ordering (the labels in brackets; docs/protocol/fifo.md lists each with
 * both of its sides): commit publishes payload and metadata with a release
 * store ([commit]; cistern__publish_word, whose fenced form is a seq_cst
 * exchange: also the store half of the wake handshake, [wake-data]);
 * readers load words with acquire, or claim them with an acq_rel CAS,
 * before touching the payload; release hands the slot back with the same
 * kind of store after the reader's last access to the payload
 * ([slot-free], [wake-space]). Commit and release may be stores because
 * only the owner moves a slot out of RESERVED or ACQUIRED while it lives,
 * and nobody acts for a dead owner until it is gone.
 */
#include <errno.h>
#include <string.h>

#include "policy/fifo/fifo.h"
#include "policy/fifo/fifo_copy.h"
#include "policy/fifo/fifo_tier.h"
#include "core/ring.h"
#include "core/policy.h"

#include "cistern/admin.h"

void cistern__fifo_init(struct cistern *c)
{
	for (uint64_t i = 0; i < c->slot_count; i++)
		atomic_store_explicit(&cistern__slotmeta(c, i)->word, sw_make(i, FIFO_FREE, 0),
				      memory_order_relaxed);
}

/*
 * Claim a slot word that should read `expect`, making it `desired`; false with
 * the word's current value in *seen otherwise.
 *
 * After a success the next slot is normally ready too, so we CAS at once with
 * the value we expect: the other core last wrote that line, and a load before
 * the CAS would fetch it shared and then upgrade it, two transfers instead of
 * one. While polling (the last attempt found nothing) we load first, so that
 * spinning on a slot the other side is about to write does not keep taking
 * the line away from it. acq_rel on success: the acquire half is the
 * observing side of [commit] (T5, T9) or [slot-free] (T1), so we see
 * everything the word's last writer published before we touch the payload.
 * Acquire on failure, the same edges: *seen is used to decide.
 */
static inline bool claim_direct(bool polling, _Atomic uint64_t *word, uint64_t expect,
				uint64_t desired, uint64_t *seen)
{
	uint64_t w = expect;
	if (polling) {
		w = atomic_load_explicit(word, memory_order_acquire);
		if (w != expect) {
			*seen = w;
			return false;
		}
	}
	if (atomic_compare_exchange_strong_explicit(word, &w, desired, memory_order_acq_rel,
						    memory_order_acquire))
		return true;
	*seen = w;
	return false;
}

uint32_t cistern__put_ahead(uint64_t slot_count)
{
	/*
	 * A quarter of the ring at most, so that on a small ring the lines
	 * asked for are not those of the slots the reader is about to free.
	 */
	uint64_t q = slot_count / 4;
	return q < FIFO_PUT_AHEAD ? (uint32_t)q : FIFO_PUT_AHEAD;
}

static inline bool reserve_sole(struct cistern *c, struct cistern_slot *slot)
{
	struct holder_at at;
	enum holder_step st = holder_claim(c, c->producing == CISTERN_HOLD_AUTO, &at);
	if (st == HOLDER_LOST)
		cistern__auto_lost(c, CISTERN_ROLE_PRODUCER);
	if (st != HOLDER_DONE)
		return false;
	cistern__set_slot(slot, c, at.idx, at.pos);
	return true;
}

int cistern__fifo_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	struct cistern_hdr *h = c->hdr;
	if (plain_producer(c) && reserve_sole(c, slot))
		return 0;
	for (;;) {
		/*
		 * [tail-claim] acquire: a holder's claim of every position below t
		 * is in its word; [restore-tail]: so are a restore's words and id base.
		 */
		uint64_t t = atomic_load_explicit(&h->tail, memory_order_acquire);
		uint64_t idx = cistern__slot_of(c, t);
		struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
		uint64_t w;
		/*
		 * Unless we are polling a full ring, fetch the payload's first line
		 * for writing while the claim's cache miss is outstanding; while
		 * polling it may still be in a reader's hands.
		 */
		if (!c->reserve_polling)
			__builtin_prefetch(cistern__payload(c, idx), 1, 3);
		if (claim_direct(c->reserve_polling, &m->word, sw_make(t, FIFO_FREE, 0),
				 sw_make(t, FIFO_RESERVED, c->owner), &w)) {
			c->reserve_polling = false;
			cistern__help_advance(&h->tail, t);
			cistern__set_slot(slot, c, idx, t);
			return 0;
		}
		int64_t d = sw_lap_diff(w, t);
		if (d == 0 && sw_state(w) == FIFO_FREE)
			return -EPROTO; /* FREE but not what we expected: an owner, i.e. damage */
		if (d >= 0) {
			/* Claimed already (maybe by a process that then died): help and retry. */
			if (cistern__help_or_refuse(c, &h->tail, t, d) < 0)
				return -EPROTO;
			continue;
		}
		/* The slot still serves the previous lap: full, unless tail moved on. */
		if (atomic_load_explicit(&h->tail, memory_order_acquire) != t)
			continue;
		c->reserve_polling = true;
		return -EAGAIN;
	}
}

bool cistern__fifo_slot_is_mine(struct cistern *c, const struct cistern_slot *slot)
{
	if (!slot->live_ || slot->index_ >= c->slot_count)
		return false;
	uint64_t w = atomic_load_explicit(&cistern__slotmeta(c, slot->index_)->word,
					  memory_order_relaxed);
	return w == sw_make(slot->pos_, FIFO_RESERVED, c->owner);
}

static int fifo_commit(struct cistern *c, struct cistern_slot *slot, size_t len,
		       struct cistern_meta *meta)
{
	if (!cistern__fifo_slot_is_mine(c, slot))
		return -EINVAL;
	commit_mine(c, slot, len, meta);
	return 0;
}

int cistern__fifo_abort(struct cistern *c, struct cistern_slot *slot)
{
	if (!cistern__fifo_slot_is_mine(c, slot))
		return -EINVAL;
	/*
	 * T3, seq_cst: nothing to publish (the payload is garbage); the seq_cst
	 * exchange is the store half of [wake-data] for the wake below.
	 */
	atomic_exchange_explicit(&cistern__slotmeta(c, slot->index_)->word,
				 sw_make(slot->pos_, FIFO_SKIP, 0), memory_order_seq_cst);
	slot->live_ = 0;
	/* Readers may be waiting on this position to reach end of data: let them step over. */
	cistern__wake_readers(c);
	return 0;
}

/* Slow path: hand out a sample whose reader died (or that a short get gave back). */
static int take_redelivered(struct cistern *c, struct cistern_sample *s)
{
	struct cistern_hdr *h = c->hdr;
	/* [redeliver-hint] acquire: the marks made before the bump we read are in the words. */
	uint64_t hint = atomic_load_explicit(&h->redeliver_pending, memory_order_acquire);
	if (hint == 0)
		return -EAGAIN;
	/*
	 * Every slot, from the one just behind the head backwards: a sample
	 * handed back (cistern_unacquire()) or held by a reader that died is
	 * one the head passed lately, so this finds it in a few steps where a
	 * walk from slot 0 took milliseconds on a ring of a million. Relaxed:
	 * the head only says where to start; the walk covers every slot.
	 */
	uint64_t i = cistern__slot_of(c, atomic_load_explicit(&h->head, memory_order_relaxed));
	for (uint64_t k = 0; k < c->slot_count; k++) {
		i = (i == 0 ? c->slot_count : i) - 1;
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		/* [commit] acquire: the sample's payload and metadata, as at T5. */
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		if (sw_state(w) != FIFO_REDELIVER)
			continue;
		uint64_t nw = sw_make(sw_pos(w), FIFO_ACQUIRED, c->owner);
		if (!atomic_compare_exchange_strong_explicit(&m->word, &w, nw, memory_order_acq_rel,
							     memory_order_relaxed))
			continue;
		/* The slot keeps its lap; only the low 48 bits of the position matter to it. */
		fill_sample(c, s, i, sw_pos(w));
		cistern__count(&c->me->ctr.gets, 1);
		if (sw_owner(w) != OWNER_UNACQUIRED)
			cistern__count(&c->me->ctr.redeliveries, 1);
		return 0;
	}
	/*
	 * Nothing found. Clear the hint only if no reclaim bumped it during the
	 * scan: a reclaim marks the slot first and bumps the hint after, so a bump
	 * we did not see means a slot we may have passed already. acq_rel
	 * ([redeliver-hint]): the CAS fails on any bump since our load.
	 */
	atomic_compare_exchange_strong_explicit(&h->redeliver_pending, &hint, 0,
						memory_order_acq_rel, memory_order_relaxed);
	return -EAGAIN;
}

/* The sole reader's take (T5) for cistern_acquire(): the look, then ACQUIRED. */
static inline bool acquire_sole(struct cistern *c, struct cistern_sample *s)
{
	struct holder_at at;
	bool guarded = c->reading == CISTERN_HOLD_AUTO;
	enum holder_step st = holder_look(c, guarded, &at);
	if (st == HOLDER_LOST)
		cistern__auto_lost(c, CISTERN_ROLE_READER);
	if (st != HOLDER_DONE)
		return false;
	holder_take(c, guarded, &at);
	fill_sample(c, s, at.idx, at.pos);
	return true;
}

int cistern__fifo_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	struct cistern_hdr *h = c->hdr;
	if (atomic_load_explicit(&h->redeliver_pending, memory_order_relaxed) != 0 &&
	    take_redelivered(c, s) == 0)
		return 0;
	if (plain_reader(c) && acquire_sole(c, s))
		return 0;
	for (;;) {
		/* [head-take] acquire: a holder's take of every position below p is in its word. */
		uint64_t p = atomic_load_explicit(&h->head, memory_order_acquire);
		uint64_t idx = cistern__slot_of(c, p);
		struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
		uint64_t w;
		/* As in cistern__fifo_try_reserve: overlap the payload's miss with the claim's. */
		if (!c->acquire_polling)
			__builtin_prefetch(cistern__payload(c, idx), 0, 3);
		if (claim_direct(c->acquire_polling, &m->word, sw_make(p, FIFO_COMMITTED, 0),
				 sw_make(p, FIFO_ACQUIRED, c->owner), &w)) {
			c->acquire_polling = false;
			cistern__help_advance(&h->head, p);
			fill_sample(c, s, idx, p);
			cistern__count(&c->me->ctr.gets, 1);
			return 0;
		}
		int64_t d = sw_lap_diff(w, p);
		if (d == 0) {
			switch (sw_state(w)) {
			case FIFO_COMMITTED:
				/* COMMITTED but not what we expected: an owner, i.e. damage. */
				return -EPROTO;
			case FIFO_SKIP: {
				/*
				 * T10, seq_cst: [slot-free] for the next lap's
				 * producer, and the store half of [wake-space].
				 */
				uint64_t nw = sw_make(p + c->slot_count, FIFO_FREE, 0);
				if (atomic_compare_exchange_strong_explicit(&m->word, &w, nw,
									    memory_order_seq_cst,
									    memory_order_relaxed)) {
					cistern__help_advance(&h->head, p);
					cistern__wake_producers(c);
				}
				continue;
			}
			case FIFO_ACQUIRED:
			case FIFO_REDELIVER:
				cistern__help_advance(&h->head, p);
				continue;
			default: /* FREE or RESERVED: nothing committed at the head yet */
				break;
			}
		} else if (d > 0) {
			if (cistern__help_or_refuse(c, &h->head, p, d) < 0)
				return -EPROTO;
			continue;
		}
		if (atomic_load_explicit(&h->head, memory_order_acquire) != p)
			continue;
		c->acquire_polling = true;
		return -EAGAIN;
	}
}

static bool sample_is_mine(struct cistern *c, const struct cistern_sample *s)
{
	if (!s->live_ || s->index_ >= c->slot_count)
		return false;
	uint64_t w = atomic_load_explicit(&cistern__slotmeta(c, s->index_)->word,
					  memory_order_relaxed);
	return sw_state(w) == FIFO_ACQUIRED && sw_owner(w) == c->owner &&
	       sw_pos(w) == (s->pos_ & SW_POS_MASK);
}

int cistern__fifo_release(struct cistern *c, struct cistern_sample *s)
{
	if (!sample_is_mine(c, s))
		return -EINVAL;
	release_mine(c, s);
	return 0;
}

/*
 * Mark a held slot for redelivery (T7, T8); [redeliver-hint] seq_cst: the
 * hint is bumped after the mark, so a reader that sees the bump finds the
 * mark (take_redelivered()).
 */
static void mark_redeliver(struct cistern *c, struct cistern_slotmeta *m, uint64_t w,
			   uint32_t owner)
{
	uint64_t nw = sw_make(sw_pos(w), FIFO_REDELIVER, owner);
	if (atomic_compare_exchange_strong_explicit(&m->word, &w, nw, memory_order_seq_cst,
						    memory_order_relaxed))
		atomic_fetch_add_explicit(&c->hdr->redeliver_pending, 1, memory_order_seq_cst);
}

int cistern__fifo_unacquire(struct cistern *c, struct cistern_sample *s)
{
	if (!sample_is_mine(c, s))
		return -EINVAL;
	struct cistern_slotmeta *m = cistern__slotmeta(c, s->index_);
	mark_redeliver(c, m, atomic_load_explicit(&m->word, memory_order_relaxed),
		       OWNER_UNACQUIRED);
	/* It was counted as handed out; it was not. */
	cistern__count(&c->me->ctr.gets, (uint64_t)-1);
	s->live_ = 0;
	s->data = NULL;
	cistern__wake_readers(c);
	return 0;
}

bool cistern__fifo_drained(struct cistern *c)
{
	struct cistern_hdr *h = c->hdr;
	/*
	 * [close-claim] seq_cst, closed first: a reservation that saw reception
	 * open moved tail before the close in the total order, so we see it
	 * below. Later reservations turn themselves into SKIPs that readers
	 * step over.
	 */
	if (!atomic_load_explicit(&h->closed, memory_order_seq_cst))
		return false;
	/*
	 * A sole producer moves the tail with a plain store and then checks
	 * `closed` (cistern_reserve()): its load may pass its store, so it may
	 * see reception open while we see its old tail. Once after seeing the
	 * close, a membarrier runs a barrier in that producer: either its tail
	 * store is visible when the membarrier returns, or its check comes after
	 * the barrier and sees the close, and it turns its claim into a SKIP.
	 * Any FIFO may have such a producer: one that holds the role by the
	 * flag, or automatically (roles.c). If this process may not issue the
	 * membarrier, only a producer role nobody holds either way (so no
	 * plain claim can be under way) lets us go on. This membarrier is the
	 * store-load fence of [close-claim] for the holder's claim.
	 */
	if (!c->close_fenced) {
		if (cistern__fence_others())
			c->close_fenced = true;
		else if (atomic_load_explicit(&h->sole_producer, memory_order_seq_cst) != 0 ||
			 (atomic_load_explicit(&h->auto_producer, memory_order_seq_cst) &
			  CISTERN_AUTO_OWNER) != 0)
			return false;
	}
	if (atomic_load_explicit(&h->redeliver_pending, memory_order_seq_cst) != 0)
		return false;
	uint64_t t = atomic_load_explicit(&h->tail, memory_order_seq_cst);
	uint64_t p = atomic_load_explicit(&h->head, memory_order_seq_cst);
	/*
	 * >=, not ==: a producer that died after claiming position t but before
	 * moving the tail leaves tail == t; once its claim is reclaimed as SKIP a
	 * reader steps over it and the head passes a tail that no producer is
	 * left to move. Every position below the head is resolved either way.
	 */
	return p >= t;
}

void cistern__fifo_reclaim(struct cistern *c, uint32_t owner)
{
	uint64_t redelivered = 0, reclaimed = 0;
	bool handed_back = false;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		/*
		 * A hand-back (fifo_unacquire) names no owner: if its process
		 * died between the mark and the hint, the slot is one of these,
		 * and nothing else would raise the hint for it.
		 */
		if (sw_state(w) == FIFO_REDELIVER && sw_owner(w) == OWNER_UNACQUIRED)
			handed_back = true;
		if (sw_owner(w) != owner)
			continue;
		switch (sw_state(w)) {
		case FIFO_RESERVED: {
			/* An unfinished put: that sample never existed (T4; seq_cst, as T3). */
			uint64_t nw = sw_make(sw_pos(w), FIFO_SKIP, 0);
			if (atomic_compare_exchange_strong_explicit(
				    &m->word, &w, nw, memory_order_seq_cst, memory_order_relaxed))
				reclaimed++;
			break;
		}
		case FIFO_ACQUIRED:
			mark_redeliver(c, m, w, owner);
			redelivered++;
			break;
		case FIFO_REDELIVER:
			/* Marked by an earlier, interrupted reclaim: make sure the hint is up. */
			atomic_fetch_add_explicit(&c->hdr->redeliver_pending, 1,
						  memory_order_seq_cst);
			break;
		default:
			break;
		}
	}
	if (handed_back) /* at worst one needless look at every slot */
		atomic_fetch_add_explicit(&c->hdr->redeliver_pending, 1, memory_order_seq_cst);
	if (reclaimed)
		atomic_fetch_add_explicit(&c->hdr->retired.reclaimed, reclaimed,
					  memory_order_relaxed);
	(void)redelivered; /* counted when handed out again */
}

uint64_t cistern__fifo_population(const struct cistern *c, const struct cistern_stats *st)
{
	(void)c;
	/* A redelivered sample came back into the buffer after its first get. */
	return st->puts + st->redeliveries - st->gets;
}

/*
 * A get took a sample longer than the caller's buffer: it goes back to be
 * handed out again (-EMSGSIZE). Longer than the slot, which only a damaged
 * segment says: it is refused and dropped, as cistern_acquire() does (-EPROTO).
 */
ssize_t cistern__fifo_got_too_long(struct cistern *c, struct cistern_sample *s)
{
	if (s->len > c->slot_size) {
		release_mine(c, s);
		return -EPROTO;
	}
	cistern__fifo_unacquire(c, s);
	return -EMSGSIZE;
}

static const struct cistern_ops cistern__fifo_ops = {
	.init = cistern__fifo_init,
	.try_reserve = cistern__fifo_try_reserve,
	.commit = fifo_commit,
	.abort = cistern__fifo_abort,
	.try_acquire = cistern__fifo_try_acquire,
	.release = cistern__fifo_release,
	.unacquire = cistern__fifo_unacquire,
	.drained = cistern__fifo_drained,
	.reclaim = cistern__fifo_reclaim,
	.population = cistern__fifo_population,
};

/* ---- Inspection and snapshots (see struct cistern_snap_ops) ------------ */

static struct cistern_slot_view cistern__fifo_classify(uint64_t word)
{
	static const enum cistern_slot_class map[] = {
		[FIFO_FREE] = CISTERN_SLOT_FREE,
		[FIFO_RESERVED] = CISTERN_SLOT_RESERVED,
		[FIFO_COMMITTED] = CISTERN_SLOT_COMMITTED,
		[FIFO_ACQUIRED] = CISTERN_SLOT_ACQUIRED,
		[FIFO_SKIP] = CISTERN_SLOT_SKIP,
		[FIFO_REDELIVER] = CISTERN_SLOT_REDELIVER,
	};
	unsigned st = sw_state(word);
	struct cistern_slot_view v = {CISTERN_SLOT_OTHER, 0};
	if (st < sizeof(map) / sizeof(map[0]))
		v.cls = map[st];
	/* Only RESERVED and ACQUIRED name a live owner; REDELIVER keeps the dead one's. */
	if (st == FIFO_RESERVED || st == FIFO_ACQUIRED)
		v.owner = sw_owner(word);
	return v;
}

static int fifo_restore(struct cistern *c, uint64_t n, uint64_t next_id)
{
	struct cistern_hdr *h = c->hdr;
	if (n > c->slot_count || next_id < n)
		return -EINVAL;
	/*
	 * The samples sit at ring positions 0..n-1 in id order, so they come out
	 * in the order they went in. Their ids were written by the restorer; new
	 * samples start at position n and must get ids from next_id on.
	 */
	for (uint64_t i = 0; i < n; i++)
		atomic_store_explicit(&cistern__slotmeta(c, i)->word, sw_make(i, FIFO_COMMITTED, 0),
				      memory_order_relaxed);
	/* Ours, and the header's for those who attach once the restore is done. */
	c->id_base = next_id - n;
	h->id_base = c->id_base;
	atomic_store_explicit(&h->head, 0, memory_order_relaxed);
	/*
	 * [restore-tail] release: the words and the header's id base come
	 * before the tail; a producer's acquire load of the tail ([tail-claim]'s
	 * observing side) finds them.
	 */
	atomic_store_explicit(&h->tail, n, memory_order_release);
	return 0;
}

static const struct cistern_snap_ops cistern__fifo_snap_ops = {
	.classify = cistern__fifo_classify,
	.restore = fifo_restore,
};

const struct cistern__policy cistern__fifo_policy = {
	.name = "fifo",
	.value = CISTERN_FIFO,
	.ops = &cistern__fifo_ops,
	.tiering = &cistern__fifo_tiering,
	.snap = &cistern__fifo_snap_ops,
	.flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER,
	.set_steps = cistern__fifo_steps,
	.get_batch = cistern__fifo_get_batch,
	.put_batch_now = cistern__fifo_put_now,
	.reads_in_order = true,
};
