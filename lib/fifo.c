/* SPDX-License-Identifier: MIT */
/*
 * fifo.c - the FIFO policy: a multi-producer, multi-consumer ring whose cells
 * are the slots themselves, crash-safe at every step.
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
 * (get_as()): COMMITTED(p) --copy out, then store--> FREE(p+n), no ACQUIRED.
 *
 * Only the owner moves a slot out of RESERVED(p, me) or ACQUIRED(p, me) while
 * it lives; only the one process that holds a dead owner's entry lock does the
 * reclaim CAS. The holder of a sole role (sole.c) claims with plain stores, as
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
 * Ordering: the CAS that claims a slot is acq_rel so that the payload written
 * after it cannot be observed before the claim; commit publishes payload and
 * metadata with a release store (cistern__publish_word: also the store half
 * of the wake handshake in wait.c); readers load words with acquire before
 * touching the payload; release hands the slot back with the same kind of
 * store after the reader's last access to the payload. Commit and release
 * may be plain stores because only the owner moves a slot out of RESERVED or
 * ACQUIRED while it lives, and nobody acts for a dead owner until it is gone.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "slotword.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* Slots ahead of its claim the sole producer prefetches for writing (put_prefetch()). */
#define FIFO_PUT_AHEAD 16
/* Puts without those prefetches after a claim that found the ring full. */
#define FIFO_PUT_QUIET 256

enum {
	FIFO_FREE = 0,
	FIFO_RESERVED = 1,
	FIFO_COMMITTED = 2,
	FIFO_ACQUIRED = 3,
	FIFO_SKIP = 4,
	FIFO_REDELIVER = 5,
};

#define OWNER_UNACQUIRED 0 /* REDELIVER owner for a sample handed back by a short get */

static void fifo_init(struct cistern_hdr *h)
{
	for (uint64_t i = 0; i < h->slot_count; i++)
		atomic_store_explicit(&cistern__meta_at(h, i)->word, sw_make(i, FIFO_FREE, 0),
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
 * the line away from it. acq_rel on success: the claim is ordered before our
 * accesses to the payload, and we see everything the word's last writer
 * published (commit or release). Acquire on failure: *seen is used to decide.
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

/*
 * The sole producer's claim (CISTERN_SINGLE_PRODUCER): nobody else moves the
 * tail or claims a FREE slot, so a load that finds FREE(t) can be followed by
 * plain stores, which leave through the store buffer while we go on, where
 * the CAS would wait for the slot's cache line to come back from the reader.
 * Only with light wakes: fifo_drained() relies on a membarrier to order our
 * tail store before our check for a closed reception (cistern_reserve()).
 * SOLE_NOT_READY (nothing done) if the slot is not FREE(t): the general path
 * decides. SOLE_LOST if the automatic role was taken away: the caller owes
 * cistern__auto_lost(). SOLE_DONE with the position and slot claimed;
 * reserve_sole() puts them in a slot record, put_as() uses them as they
 * are. `guarded`: we hold the automatic role (c->auto_producing), which a
 * second producer may take away, not the flag's. Always inlined and free of
 * calls, so that the put's fast path saves no register (see put_as()).
 */
enum sole_step { SOLE_DONE, SOLE_NOT_READY, SOLE_LOST };

/*
 * The sole producer, claiming slot idx, asks for the lines it will write
 * c->put_ahead slots later (the slot's metadata line and the first line of
 * its payload) with a write prefetch. Those lines were
 * last touched by the reader, which read the payload and stored FREE in the
 * metadata: without the prefetch every put waits for them, and on x86 a
 * read prefetch or the claim's own load brings in a shared copy that the
 * stores must then take over in a second exchange with the reader's core.
 * Asked for a few slots early and with ownership, they are here when the
 * stores come. On the Zen 5 host with its two vCPUs far apart (a cache
 * line's round trip ~470 ns), 64-byte samples (benchmark section 1) went
 * from about 30 to 72-82 M/s with 16 slots ahead (4: 40-42, 8: 51-54, 32:
 * 69-72), and to 52-76 with the pause below (docs/benchmarks-log.md, "Write
 * prefetches").
 *
 * Not while the ring is full or was lately: the reader is then just ahead
 * of us, about to take the sample in the slot asked for, and taking that
 * slot's lines away makes the reader fetch them back. A claim that finds its
 * slot not yet freed stops the prefetches for the next FIFO_PUT_QUIET puts
 * (c->put_quiet), longer than the run of puts a producer makes each time
 * the reader frees a few slots of a full ring. In a driver whose reader
 * was made a little slower than the producer (a pause or two per sample),
 * prefetching regardless took the rate from 34-36 to 23 M/s and from 21
 * to 16, a quiet spell of 32 puts left it at 25-27 and 15-18, and one of
 * 256 at 33 and 21 (in later pairs level to a tenth below the build without
 * prefetches); reading the reader's head to tell how full the ring is cost
 * a reader that sets the pace 15%, one read every 16 puts.
 */
static inline __attribute__((always_inline)) void put_prefetch(struct cistern *c, uint64_t idx)
{
	if (c->put_quiet) {
		c->put_quiet--;
		return;
	}
	uint64_t ahead = cistern__slot_ahead(idx, c->put_ahead, c->slot_count);
	cistern__prefetch_for_write(cistern__slotmeta(c, ahead), c->write_prefetch);
	cistern__prefetch_for_write(cistern__payload(c, ahead), c->write_prefetch);
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

bool cistern__has_prefetchw(void)
{
#if defined(__x86_64__) || defined(__i386__)
	/* CPUID 0x80000001, ECX bit 8: PREFETCHW (AMD's 3DNowPrefetch). */
	unsigned a, b, cx, d;
	return __get_cpuid(0x80000001, &a, &b, &cx, &d) && (cx & (1u << 8));
#else
	return false;
#endif
}

static inline __attribute__((always_inline)) enum sole_step
sole_claim_as(struct cistern *c, bool guarded, uint64_t *pos, uint64_t *index)
{
	struct cistern_hdr *h = c->hdr;
	/* The automatic role holds only while nobody takes it away (sole.c). */
	if (guarded && !cistern__auto_try_begin(c, CISTERN_ROLE_PRODUCER, &h->auto_producer))
		return SOLE_LOST;
	/* Relaxed: we are the only writer of the tail while we hold the role. */
	uint64_t t = atomic_load_explicit(&h->tail, memory_order_relaxed);
	uint64_t idx = cistern__slot_of(c, t);
	struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
	/* Acquire: the reader's release store of FREE(t) follows its last read of the payload. */
	if (atomic_load_explicit(&m->word, memory_order_acquire) != sw_make(t, FIFO_FREE, 0)) {
		if (guarded)
			cistern__auto_end(c);
		c->put_quiet = FIFO_PUT_QUIET; /* the ring is full: see put_prefetch() */
		return SOLE_NOT_READY;
	}
	put_prefetch(c, idx);
	/*
	 * Relaxed: RESERVED names us for a reclaim if we die; nobody reads the
	 * payload before COMMITTED, whose release store orders our writes. The
	 * tail's release store comes after it, so a tail past t always has t's
	 * claim in the word (the general path's help and the reclaim rely on it).
	 */
	atomic_store_explicit(&m->word, sw_make(t, FIFO_RESERVED, c->owner), memory_order_relaxed);
	atomic_store_explicit(&h->tail, t + 1, memory_order_release);
	if (guarded)
		cistern__auto_end(c);
	/* Keeps the compiler from moving the caller's check of `closed` above. */
	atomic_signal_fence(memory_order_seq_cst);
	*pos = t;
	*index = idx;
	return SOLE_DONE;
}

static inline __attribute__((always_inline)) enum sole_step
sole_claim_tail(struct cistern *c, uint64_t *pos, uint64_t *index)
{
	return sole_claim_as(c, c->auto_producing, pos, index);
}

/*
 * Whether this handle holds the producer (reader) role: by
 * CISTERN_SINGLE_PRODUCER (READER) with light wakes, or automatically
 * (sole.c). The holder claims the tail (takes the head) with plain stores.
 */
static inline bool holds_producer(const struct cistern *c)
{
	return c->auto_producing || (c->sole_producing && cistern__light());
}

static inline bool holds_reader(const struct cistern *c)
{
	return c->auto_reading || (c->sole_reading && cistern__light());
}

/*
 * Whether this handle claims with plain stores: it holds the role, or it is
 * a counted handle that finds itself the only one left and takes the role
 * back here (one load of a line nobody writes while the count stands).
 */
static inline bool plain_producer(struct cistern *c)
{
	if (holds_producer(c))
		return true;
	return c->auto_shared_producer &&
	       atomic_load_explicit(&c->hdr->auto_producer, memory_order_relaxed) ==
		       CISTERN_AUTO_ONE &&
	       cistern__auto_regain(c, CISTERN_ROLE_PRODUCER);
}

static inline bool plain_reader(struct cistern *c)
{
	if (holds_reader(c))
		return true;
	return c->auto_shared_reader &&
	       atomic_load_explicit(&c->hdr->auto_reader, memory_order_relaxed) ==
		       CISTERN_AUTO_ONE &&
	       cistern__auto_regain(c, CISTERN_ROLE_READER);
}

static inline bool reserve_sole(struct cistern *c, struct cistern_slot *slot)
{
	uint64_t t, idx;
	enum sole_step st = sole_claim_tail(c, &t, &idx);
	if (st == SOLE_LOST)
		cistern__auto_lost(c, CISTERN_ROLE_PRODUCER);
	if (st != SOLE_DONE)
		return false;
	cistern__set_slot(slot, c, idx, t);
	return true;
}

static int fifo_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	struct cistern_hdr *h = c->hdr;
	if (plain_producer(c) && reserve_sole(c, slot))
		return 0;
	for (;;) {
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

static bool slot_is_mine(struct cistern *c, const struct cistern_slot *slot)
{
	if (!slot->live_ || slot->index_ >= c->slot_count)
		return false;
	uint64_t w = atomic_load_explicit(&cistern__slotmeta(c, slot->index_)->word,
					  memory_order_relaxed);
	return w == sw_make(slot->pos_, FIFO_RESERVED, c->owner);
}

/*
 * Commit the sample in slot idx, which we claimed for position pos. True if
 * readers sleep: the caller wakes them (cistern__wake_futex on data_futex),
 * left to it so that the put's fast path makes no call.
 */
static inline __attribute__((always_inline)) bool
publish_sample(struct cistern *c, uint64_t idx, uint64_t pos, size_t len,
	       struct cistern_meta *meta)
{
	struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
	m->len = len;
	/* The position is unique and increasing: offset by id_base, it is the sample id. */
	uint64_t id = pos + c->hdr->id_base;
	m->sample_id = id;
	m->sim_id = meta ? meta->sim_id : 0;
	m->time_step = meta ? meta->time_step : 0;
	if (meta)
		meta->sample_id = id;
	/* Publishes payload and metadata (release), then the wake check. */
	cistern__publish_word(&m->word, sw_make(pos, FIFO_COMMITTED, 0));
	cistern__count(&c->me->ctr.puts, 1);
	return cistern__readers_wait(c);
}

/* Commit a slot the caller has checked is ours. */
static inline void commit_mine(struct cistern *c, struct cistern_slot *slot, size_t len,
			       struct cistern_meta *meta)
{
	if (publish_sample(c, slot->index_, slot->pos_, len, meta))
		cistern__wake_futex(&c->hdr->data_futex);
	slot->live_ = 0;
}

static int fifo_commit(struct cistern *c, struct cistern_slot *slot, size_t len,
		       struct cistern_meta *meta)
{
	if (!slot_is_mine(c, slot))
		return -EINVAL;
	commit_mine(c, slot, len, meta);
	return 0;
}

static int fifo_abort(struct cistern *c, struct cistern_slot *slot)
{
	if (!slot_is_mine(c, slot))
		return -EINVAL;
	atomic_exchange_explicit(&cistern__slotmeta(c, slot->index_)->word,
				 sw_make(slot->pos_, FIFO_SKIP, 0), memory_order_seq_cst);
	slot->live_ = 0;
	/* Readers may be waiting on this position to reach end of data: let them step over. */
	cistern__wake_readers(c);
	return 0;
}

static void fill_sample(struct cistern *c, struct cistern_sample *s, uint64_t idx, uint64_t pos)
{
	struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
	s->data = cistern__payload(c, idx);
	s->len = (size_t)m->len;
	s->meta.sample_id = m->sample_id;
	s->meta.sim_id = m->sim_id;
	s->meta.time_step = m->time_step;
	s->pos_ = pos;
	s->index_ = (uint32_t)idx;
	s->live_ = 1;
}

/* Slow path: hand out a sample whose reader died (or that a short get gave back). */
static int take_redelivered(struct cistern *c, struct cistern_sample *s)
{
	struct cistern_hdr *h = c->hdr;
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
	 * we did not see means a slot we may have passed already.
	 */
	atomic_compare_exchange_strong_explicit(&h->redeliver_pending, &hint, 0,
						memory_order_acq_rel, memory_order_relaxed);
	return -EAGAIN;
}

/*
 * The sole reader's look at the head (CISTERN_SINGLE_READER), the first half
 * of the mirror of sole_claim_as(): only we move the head or take a
 * COMMITTED slot. SOLE_DONE with the position and slot when the head's slot
 * holds its sample; a guarded caller is then inside its bracket, which the
 * step that follows (sole_take_at() or sole_pass_at()) ends.
 */
static inline __attribute__((always_inline)) enum sole_step
sole_look_as(struct cistern *c, bool guarded, uint64_t *pos, uint64_t *index)
{
	struct cistern_hdr *h = c->hdr;
	if (guarded && !cistern__auto_try_begin(c, CISTERN_ROLE_READER, &h->auto_reader))
		return SOLE_LOST;
	/* Relaxed: we are the only writer of the head while we hold the role. */
	uint64_t p = atomic_load_explicit(&h->head, memory_order_relaxed);
	uint64_t idx = cistern__slot_of(c, p);
	struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
	__builtin_prefetch(cistern__payload(c, idx), 0, 3);
	/* Acquire: pairs with the commit's release store; the payload is complete. */
	if (atomic_load_explicit(&m->word, memory_order_acquire) != sw_make(p, FIFO_COMMITTED, 0)) {
		if (guarded)
			cistern__auto_end(c);
		return SOLE_NOT_READY;
	}
	*pos = p;
	*index = idx;
	return SOLE_DONE;
}

/* T5 by the sole reader, at the position sole_look_as() found COMMITTED. */
static inline __attribute__((always_inline)) void sole_take_at(struct cistern *c, bool guarded,
								uint64_t p, uint64_t idx)
{
	/*
	 * Relaxed: ACQUIRED names us so that a reclaim hands the sample out again
	 * if we die; the head's release store follows it, so a head past p always
	 * has p taken in the word.
	 */
	atomic_store_explicit(&cistern__slotmeta(c, idx)->word, sw_make(p, FIFO_ACQUIRED, c->owner),
			      memory_order_relaxed);
	atomic_store_explicit(&c->hdr->head, p + 1, memory_order_release);
	if (guarded)
		cistern__auto_end(c);
	cistern__count(&c->me->ctr.gets, 1);
}

static inline __attribute__((always_inline)) enum sole_step
sole_take_as(struct cistern *c, bool guarded, uint64_t *pos, uint64_t *index)
{
	enum sole_step st = sole_look_as(c, guarded, pos, index);
	if (st == SOLE_DONE)
		sole_take_at(c, guarded, *pos, *index);
	return st;
}

static inline __attribute__((always_inline)) enum sole_step
sole_take_head(struct cistern *c, uint64_t *pos, uint64_t *index)
{
	return sole_take_as(c, c->auto_reading, pos, index);
}

static inline bool acquire_sole(struct cistern *c, struct cistern_sample *s)
{
	uint64_t p, idx;
	enum sole_step st = sole_take_head(c, &p, &idx);
	if (st == SOLE_LOST)
		cistern__auto_lost(c, CISTERN_ROLE_READER);
	if (st != SOLE_DONE)
		return false;
	fill_sample(c, s, idx, p);
	return true;
}

static int fifo_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	struct cistern_hdr *h = c->hdr;
	if (atomic_load_explicit(&h->redeliver_pending, memory_order_relaxed) != 0 &&
	    take_redelivered(c, s) == 0)
		return 0;
	if (plain_reader(c) && acquire_sole(c, s))
		return 0;
	for (;;) {
		uint64_t p = atomic_load_explicit(&h->head, memory_order_acquire);
		uint64_t idx = cistern__slot_of(c, p);
		struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
		uint64_t w;
		/* As in fifo_try_reserve: overlap the payload's miss with the claim's. */
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

/*
 * Hand slot idx, taken for position pos, back for position pos + n. True if
 * producers sleep: the caller wakes them (see publish_sample()).
 */
static inline __attribute__((always_inline)) bool free_slot(struct cistern *c, uint64_t idx,
							     uint64_t pos)
{
	/* Our reads of the payload are done (release), then the wake check. */
	cistern__publish_word(&cistern__slotmeta(c, idx)->word,
			      sw_make(pos + c->slot_count, FIFO_FREE, 0));
	cistern__count(&c->me->ctr.seen_hist[1], 1);
	return cistern__producers_wait(c);
}

/* Release a sample the caller has checked is ours. */
static inline void release_mine(struct cistern *c, struct cistern_sample *s)
{
	if (free_slot(c, s->index_, s->pos_))
		cistern__wake_futex(&c->hdr->space_futex);
	s->live_ = 0;
	s->data = NULL;
}

static int fifo_release(struct cistern *c, struct cistern_sample *s)
{
	if (!sample_is_mine(c, s))
		return -EINVAL;
	release_mine(c, s);
	return 0;
}

/* Mark a held slot for redelivery; the hint is bumped after the mark (see take_redelivered). */
static void mark_redeliver(struct cistern *c, struct cistern_slotmeta *m, uint64_t w,
			   uint32_t owner)
{
	uint64_t nw = sw_make(sw_pos(w), FIFO_REDELIVER, owner);
	if (atomic_compare_exchange_strong_explicit(&m->word, &w, nw, memory_order_seq_cst,
						    memory_order_relaxed))
		atomic_fetch_add_explicit(&c->hdr->redeliver_pending, 1, memory_order_seq_cst);
}

static int fifo_unacquire(struct cistern *c, struct cistern_sample *s)
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

static bool fifo_drained(struct cistern *c)
{
	struct cistern_hdr *h = c->hdr;
	/*
	 * closed first (seq_cst): a reservation that saw reception open moved
	 * tail before the close in the total order, so we see it below. Later
	 * reservations turn themselves into SKIPs that readers step over.
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
	 * flag, or automatically (sole.c). If this process may not issue the
	 * membarrier, only a producer role nobody holds either way (so no
	 * plain claim can be under way) lets us go on.
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

static void fifo_reclaim(struct cistern *c, uint32_t owner)
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
			/* An unfinished put: that sample never existed. */
			uint64_t nw = sw_make(sw_pos(w), FIFO_SKIP, 0);
			if (atomic_compare_exchange_strong_explicit(&m->word, &w, nw,
								    memory_order_seq_cst,
								    memory_order_relaxed))
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

static uint64_t fifo_population(const struct cistern *c, const struct cistern_stats *st)
{
	(void)c;
	/* A redelivered sample came back into the buffer after its first get. */
	return st->puts + st->redeliveries - st->gets;
}

/*
 * Copy a payload of up to 64 bytes (a cache line, the common small sample)
 * with two overlapping fixed-size moves inline, so that the one-step put and
 * get make no call on their way; longer ones go through memcpy() on a path
 * of their own (put_long(), get_long()).
 */
typedef char fifo_v32 __attribute__((vector_size(32), aligned(1), may_alias));

static inline __attribute__((always_inline)) void copy_small(void *dst, const void *src,
							     size_t n)
{
	char *d = dst;
	const char *s = src;
	/* The two moves of a size may overlap each other, never dst with src. */
	if (n >= 32) {
		/*
		 * As one 32-byte vector: one move where AVX2 is on (put_wide()),
		 * two of 16 bytes elsewhere; gcc splits a 32-byte memcpy in two
		 * even with AVX2.
		 */
		*(fifo_v32 *)d = *(const fifo_v32 *)s;
		*(fifo_v32 *)(d + n - 32) = *(const fifo_v32 *)(s + n - 32);
	} else if (n >= 16) {
		__builtin_memcpy(d, s, 16);
		__builtin_memcpy(d + n - 16, s + n - 16, 16);
	} else if (n >= 8) {
		__builtin_memcpy(d, s, 8);
		__builtin_memcpy(d + n - 8, s + n - 8, 8);
	} else {
		for (size_t i = 0; i < n; i++)
			d[i] = s[i];
	}
}

/*
 * A get took a sample longer than the caller's buffer: it goes back to be
 * handed out again (-EMSGSIZE). Longer than the slot, which only a damaged
 * segment says: it is refused and dropped, as cistern_acquire() does (-EPROTO).
 */
static ssize_t got_too_long(struct cistern *c, struct cistern_sample *s)
{
	if (s->len > c->slot_size) {
		release_mine(c, s);
		return -EPROTO;
	}
	fifo_unacquire(c, s);
	return -EMSGSIZE;
}

/*
 * cistern_put() and cistern_get() when the slot at the index is ready: the
 * claim, the copy and the commit (release) without the general path's
 * layers (waiter set-up, indirect calls, ownership checks of a slot we just
 * claimed), so that more samples fit in the processor's window of
 * instructions in flight and their cache misses overlap. -EAGAIN when the
 * call cannot go straight through: the caller takes the general path, which
 * waits, adds the role and reports the errors. The caller checked the handle.
 */
static int put_now(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta)
{
	if (!(c->role & CISTERN_ROLE_PRODUCER) ||
	    atomic_load_explicit(&c->hdr->closed, memory_order_acquire))
		return -EAGAIN;
	struct cistern_slot slot;
	int r = fifo_try_reserve(c, &slot);
	if (r < 0)
		return r;
	/* As cistern_reserve(): a close that came while we claimed voids the claim. */
	if (atomic_load_explicit(&c->hdr->closed, memory_order_seq_cst)) {
		fifo_abort(c, &slot);
		return -EPIPE;
	}
	if (len)
		memcpy(slot.data, buf, len);
	commit_mine(c, &slot, len, meta);
	return 0;
}

static ssize_t get_now(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta)
{
	if (!(c->role & CISTERN_ROLE_READER))
		return -EAGAIN;
	struct cistern_sample s;
	int r = fifo_try_acquire(c, &s);
	if (r < 0)
		return r;
	if (s.len > c->slot_size || s.len > cap)
		return got_too_long(c, &s);
	memcpy(buf, s.data, s.len);
	if (meta)
		*meta = s.meta;
	size_t len = s.len;
	release_mine(c, &s);
	return (ssize_t)len;
}

/*
 * The holder's put and get (below) and what they leave to others.
 *
 * The holder's path makes no call: whatever needs one (a wake, a lost role,
 * a voided claim, a payload longer than a line, a shared handle) is left to
 * one of these functions, reached by a tail call with nothing of ours live
 * after it, so the path saves few registers (a saved register is a store)
 * and calls nothing on the way. A put + get pair in one process takes a
 * quarter fewer instructions so; between two processes the rate stayed
 * where it was (docs/benchmarks-log.md, "(1)").
 */
static __attribute__((noinline)) int put_shared(struct cistern *c, const void *buf, size_t len,
						struct cistern_meta *meta, int timeout_ms)
{
	/* A counted handle that finds itself the only producer left takes the role (once). */
	if (!holds_producer(c) && plain_producer(c))
		return cistern__fifo_put(c, buf, len, meta, timeout_ms);
	int r = put_now(c, buf, len, meta);
	return r == -EAGAIN ? cistern__put_slow(c, buf, len, meta, timeout_ms) : r;
}

static __attribute__((noinline)) int put_lost(struct cistern *c, const void *buf, size_t len,
					      struct cistern_meta *meta, int timeout_ms)
{
	cistern__auto_lost(c, CISTERN_ROLE_PRODUCER);
	return put_shared(c, buf, len, meta, timeout_ms);
}

/* As cistern_reserve(): a close that came while we claimed voids the claim. */
static __attribute__((noinline)) int put_voided(struct cistern *c, uint64_t pos, uint64_t idx)
{
	struct cistern_slot slot;
	cistern__set_slot(&slot, c, idx, pos);
	fifo_abort(c, &slot);
	return -EPIPE;
}

static __attribute__((noinline)) int put_woken(struct cistern *c)
{
	cistern__wake_futex(&c->hdr->data_futex);
	return 0;
}

static __attribute__((noinline)) int put_long(struct cistern *c, const void *buf, size_t len,
					      struct cistern_meta *meta, uint64_t pos,
					      uint64_t idx)
{
	memcpy(cistern__payload(c, idx), buf, len);
	if (publish_sample(c, idx, pos, len, meta))
		cistern__wake_futex(&c->hdr->data_futex);
	return 0;
}

/*
 * The holder of the producer role (CISTERN_SINGLE_PRODUCER with light wakes,
 * or the automatic role): the claim, the copy and the commit on the position
 * and slot index alone, with no slot record filled and read back: the same
 * steps in the same order as cistern_reserve() + cistern_commit(), in fewer
 * instructions and stores. Anyone else, or a slot not ready, takes the
 * general path (put_shared()), which waits, adds the role and reports the
 * errors. The caller (cistern_put()) checked the handle and the length.
 */
static inline __attribute__((always_inline)) int
put_as(struct cistern *c, bool guarded, const void *buf, size_t len, struct cistern_meta *meta,
       int timeout_ms)
{
	uint64_t t, idx;
	if (atomic_load_explicit(&c->hdr->closed, memory_order_acquire))
		return put_shared(c, buf, len, meta, timeout_ms);
	switch (sole_claim_as(c, guarded, &t, &idx)) {
	case SOLE_LOST:
		return put_lost(c, buf, len, meta, timeout_ms);
	case SOLE_NOT_READY:
		return put_shared(c, buf, len, meta, timeout_ms);
	case SOLE_DONE:
		break;
	}
	/* seq_cst, as cistern_reserve()'s check (fifo_drained() pairs with it). */
	if (atomic_load_explicit(&c->hdr->closed, memory_order_seq_cst))
		return put_voided(c, t, idx);
	if (len > 64)
		return put_long(c, buf, len, meta, t, idx);
	copy_small(cistern__payload(c, idx), buf, len);
	if (publish_sample(c, idx, t, len, meta))
		return put_woken(c);
	return 0;
}

/* One copy of the path each for the automatic holder and the flag's: one register fewer. */
static inline __attribute__((always_inline)) int
put_holder(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta,
	   int timeout_ms)
{
	if (c->auto_producing)
		return put_as(c, true, buf, len, meta, timeout_ms);
	if (c->sole_producing && cistern__light())
		return put_as(c, false, buf, len, meta, timeout_ms);
	return put_shared(c, buf, len, meta, timeout_ms);
}

/*
 * The one-step put and get once more, compiled for AVX2 and taken where the
 * processor has it (c->wide_copies, cistern__wide_copies()): a payload of 33
 * to 64 bytes is then copied with two 32-byte moves instead of four of 16.
 * The producer's stores wait in the core's store buffer for cache lines
 * that are still in the reader's cache; a sample that needs fewer entries
 * there leaves room for more samples in flight. Section 1 of the
 * benchmark (64-byte samples) went about an eighth faster with it
 * (docs/benchmarks-log.md, "The producer's stores").
 */
#if defined(__x86_64__) && defined(__GNUC__)
#define FIFO_WIDE_COPIES 1
static __attribute__((target("avx2"), noinline)) int
put_wide(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta, int timeout_ms)
{
	return put_holder(c, buf, len, meta, timeout_ms);
}
#endif

bool cistern__wide_copies(void)
{
#ifdef FIFO_WIDE_COPIES
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
#else
	return false;
#endif
}

int cistern__fifo_put(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta,
		      int timeout_ms)
{
#ifdef FIFO_WIDE_COPIES
	if (c->wide_copies)
		return put_wide(c, buf, len, meta, timeout_ms);
#endif
	return put_holder(c, buf, len, meta, timeout_ms);
}

static inline __attribute__((always_inline)) void meta_out(const struct cistern_slotmeta *m,
							   struct cistern_meta *meta)
{
	if (meta) {
		meta->sample_id = m->sample_id;
		meta->sim_id = m->sim_id;
		meta->time_step = m->time_step;
	}
}

static __attribute__((noinline)) ssize_t get_shared(struct cistern *c, void *buf, size_t cap,
						    struct cistern_meta *meta, int timeout_ms)
{
	/* A counted handle that finds itself the only reader left takes the role (once). */
	if (!holds_reader(c) && plain_reader(c))
		return cistern__fifo_get(c, buf, cap, meta, timeout_ms);
	ssize_t n = get_now(c, buf, cap, meta);
	return n == -EAGAIN ? cistern__get_slow(c, buf, cap, meta, timeout_ms) : n;
}

static __attribute__((noinline)) ssize_t get_lost(struct cistern *c, void *buf, size_t cap,
						  struct cistern_meta *meta, int timeout_ms)
{
	cistern__auto_lost(c, CISTERN_ROLE_READER);
	return get_shared(c, buf, cap, meta, timeout_ms);
}

static __attribute__((noinline)) ssize_t get_misfit(struct cistern *c, uint64_t pos,
						    uint64_t idx)
{
	struct cistern_sample s;
	fill_sample(c, &s, idx, pos);
	return got_too_long(c, &s);
}

static __attribute__((noinline)) ssize_t get_woken(struct cistern *c, size_t len)
{
	cistern__wake_futex(&c->hdr->space_futex);
	return (ssize_t)len;
}

static __attribute__((noinline)) ssize_t get_long(struct cistern *c, void *buf, size_t len,
						  struct cistern_meta *meta, uint64_t pos,
						  uint64_t idx)
{
	memcpy(buf, cistern__payload(c, idx), len);
	meta_out(cistern__slotmeta(c, idx), meta);
	if (free_slot(c, idx, pos))
		cistern__wake_futex(&c->hdr->space_futex);
	return (ssize_t)len;
}

/*
 * T11 and I2 by the sole reader, which has copied out the sample at position
 * p (the COMMITTED word sole_look_as() loaded): the slot goes straight to
 * FREE(p + n), with no ACQUIRED between, and then the head moves. True if
 * producers sleep (see free_slot()).
 *
 * The order is what keeps a death harmless. Killed before the hand-back, we
 * leave the sample COMMITTED at the head, where the next reader takes it: it
 * was never delivered, since our call never returned. Killed between the
 * hand-back and the head's store, we leave the head behind a slot already a
 * lap ahead, which any reader helps past (fifo_try_acquire()), as it does
 * past a dead reader's take. The head's store comes last so that a head past
 * p always has p's sample gone from COMMITTED.
 */
static inline __attribute__((always_inline)) bool sole_pass_at(struct cistern *c, bool guarded,
								uint64_t p, uint64_t idx)
{
	/* Release (free_slot): our reads of the payload come before the hand-back. */
	bool sleepers = free_slot(c, idx, p);
	/* Release: a reader that loads this head sees the hand-back before it. */
	atomic_store_explicit(&c->hdr->head, p + 1, memory_order_release);
	if (guarded)
		cistern__auto_end(c);
	cistern__count(&c->me->ctr.gets, 1);
	return sleepers;
}

/*
 * The holder of the reader role: the mirror of put_as(). A sample of up to a
 * line that fits the caller's buffer is copied out while still COMMITTED and
 * then handed back (sole_pass_at()), one store to the slot word where a take
 * and a release would make two; a longer one, or one that does not fit, is
 * taken first (T5) as any get does, since its copy is long or it goes back.
 */
static inline __attribute__((always_inline)) ssize_t
get_as(struct cistern *c, bool guarded, void *buf, size_t cap, struct cistern_meta *meta,
       int timeout_ms)
{
	uint64_t p, idx;
	/*
	 * As fifo_try_acquire(): redeliveries first (the general path takes
	 * them). Relaxed: a hint, which take_redelivered() confirms slot by slot.
	 */
	if (atomic_load_explicit(&c->hdr->redeliver_pending, memory_order_relaxed) != 0)
		return get_shared(c, buf, cap, meta, timeout_ms);
	switch (sole_look_as(c, guarded, &p, &idx)) {
	case SOLE_LOST:
		return get_lost(c, buf, cap, meta, timeout_ms);
	case SOLE_NOT_READY:
		return get_shared(c, buf, cap, meta, timeout_ms);
	case SOLE_DONE:
		break;
	}
	const struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
	size_t len = (size_t)m->len;
	if (len > 64 || len > cap || len > c->slot_size) {
		sole_take_at(c, guarded, p, idx);
		if (len > c->slot_size || len > cap)
			return get_misfit(c, p, idx);
		return get_long(c, buf, len, meta, p, idx);
	}
	copy_small(buf, cistern__payload(c, idx), len);
	meta_out(m, meta);
	if (sole_pass_at(c, guarded, p, idx))
		return get_woken(c, len);
	return (ssize_t)len;
}

static inline __attribute__((always_inline)) ssize_t
get_holder(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta, int timeout_ms)
{
	if (c->auto_reading)
		return get_as(c, true, buf, cap, meta, timeout_ms);
	if (c->sole_reading && cistern__light())
		return get_as(c, false, buf, cap, meta, timeout_ms);
	return get_shared(c, buf, cap, meta, timeout_ms);
}

#ifdef FIFO_WIDE_COPIES
static __attribute__((target("avx2"), noinline)) ssize_t
get_wide(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta, int timeout_ms)
{
	return get_holder(c, buf, cap, meta, timeout_ms);
}
#endif

ssize_t cistern__fifo_get(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta,
			  int timeout_ms)
{
#ifdef FIFO_WIDE_COPIES
	if (c->wide_copies)
		return get_wide(c, buf, cap, meta, timeout_ms);
#endif
	return get_holder(c, buf, cap, meta, timeout_ms);
}

const struct cistern_ops cistern__fifo_ops = {
	.init = fifo_init,
	.try_reserve = fifo_try_reserve,
	.commit = fifo_commit,
	.abort = fifo_abort,
	.try_acquire = fifo_try_acquire,
	.release = fifo_release,
	.unacquire = fifo_unacquire,
	.drained = fifo_drained,
	.reclaim = fifo_reclaim,
	.population = fifo_population,
};

/* ---- Inspection and snapshots (see struct cistern_snap_ops) ------------ */

struct cistern_slot_view cistern__fifo_classify(uint64_t word)
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

static int fifo_restore(struct cistern_hdr *h, uint64_t n, uint64_t next_id)
{
	if (n > h->slot_count || next_id < n)
		return -EINVAL;
	/*
	 * The samples sit at ring positions 0..n-1 in id order, so they come out
	 * in the order they went in. Their ids were written by the restorer; new
	 * samples start at position n and must get ids from next_id on.
	 */
	for (uint64_t i = 0; i < n; i++)
		atomic_store_explicit(&cistern__meta_at(h, i)->word, sw_make(i, FIFO_COMMITTED, 0),
				      memory_order_relaxed);
	h->id_base = next_id - n;
	atomic_store_explicit(&h->head, 0, memory_order_relaxed);
	atomic_store_explicit(&h->tail, n, memory_order_release);
	return 0;
}

const struct cistern_snap_ops cistern__fifo_snap_ops = {
	.classify = cistern__fifo_classify,
	.restore = fifo_restore,
};
