/* SPDX-License-Identifier: MIT */
/*
 * fifo.h - what the FIFO's protocol (fifo.c) and its one-step put and get
 * (fifo_copy.c) share: the slot states, and the role holder's steps, inline,
 * so that the one-step paths make no call on their way. The slot state
 * machine is written down at the top of fifo.c and in docs/protocol/fifo.md;
 * the map of a whole put and get is at the top of fifo_copy.c.
 *
 * The holder's steps here (each used by fifo_copy.c's fast path and by the
 * general path's reserve and acquire in fifo.c):
 *
 *     holder_claim()       the put's claim: FREE(t) -> RESERVED(t, me), tail t + 1
 *     publish_sample_at()  the put's publish: metadata, COMMITTED(t) (T2), and
 *                          the load that says whether readers sleep (the wake)
 *     holder_look()        the get's look: the head's slot holds COMMITTED(p)
 *     holder_take()        the get's take (T5) of a sample that is long or
 *                          goes back: ACQUIRED(p, me), head p + 1
 *     free_slot_at()       the release after a take (T6), and the load that
 *                          says whether producers sleep
 *     publish_as()         the release store of a slot word that every
 *                          publish and release above goes through
 *
 * A step that finds its slot not ready, or the automatic role taken away,
 * returns HOLDER_NOT_READY or HOLDER_LOST with nothing done: the caller
 * falls back (fifo_copy.c: put_general(), get_general()).
 */
#ifndef CISTERN_FIFO_H
#define CISTERN_FIFO_H

#include "core/prefetch.h"
#include "core/roles.h"
#include "core/wait.h"
#include "core/slotword.h"

/* Slots ahead of its claim the sole producer prefetches for writing (put_prefetch()). */
#define FIFO_PUT_AHEAD 16
/* Puts without those prefetches after a claim that found the ring full. */
#define FIFO_PUT_QUIET 256
/* The longest payload copied inline (copy_small()): two overlapping moves of up to 32 bytes. */
#define FIFO_SMALL_COPY_MAX 64

enum {
	FIFO_FREE = 0,
	FIFO_RESERVED = 1,
	FIFO_COMMITTED = 2,
	FIFO_ACQUIRED = 3,
	FIFO_SKIP = 4,
	FIFO_REDELIVER = 5,
};

#define OWNER_UNACQUIRED 0 /* REDELIVER owner for a sample handed back by a short get */

/*
 * The outcome of holder_claim() and holder_look(): HOLDER_DONE with the
 * position and slot in a struct holder_at; HOLDER_NOT_READY (nothing done)
 * if the slot is not FREE(t) (COMMITTED(p)): the general path decides;
 * HOLDER_LOST if the automatic role was taken away: the caller owes
 * cistern__auto_lost().
 */
enum holder_step { HOLDER_DONE, HOLDER_NOT_READY, HOLDER_LOST };

/*
 * The position and slot a role holder's claim (look) found, with the slot's
 * metadata and payload addresses: kept in registers from the claim to the
 * copy and the commit (hand-back), which would otherwise compute them again
 * after each atomic access, since the compiler may not keep the handle's
 * fields across one.
 */
struct holder_at {
	uint64_t pos, idx;
	struct cistern_slotmeta *m;
	void *payload;
};

/*
 * The sole producer, claiming slot idx, asks for the lines it will write
 * c->put_ahead slots later (the slot's metadata line and the first line of
 * its payload) with a write prefetch. Those lines were
 * last touched by the reader, which read the payload and stored FREE in the
 * metadata: without the prefetch every put waits for them, and on x86 a
 * read prefetch or the claim's own load brings in a shared copy that the
 * stores must then take over in a second exchange with the reader's core.
 * Asked for a few slots early and with ownership, they are here when the
 * stores come; the further apart the two cores, the more this matters.
 *
 * Not while the ring is full or was lately: the reader is then just ahead
 * of us, about to take the sample in the slot asked for, and taking that
 * slot's lines away makes the reader fetch them back. A claim that finds its
 * slot not yet freed stops the prefetches for the next FIFO_PUT_QUIET puts
 * (c->put_quiet), longer than the run of puts a producer makes each time
 * the reader frees a few slots of a full ring. Where the reader is the
 * slower side, prefetching regardless slowed the ring down, a short quiet
 * spell less so; reading the reader's head to tell how full the ring is
 * would instead take a line from a reader that sets the pace.
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

/*
 * The producer role holder's claim (CISTERN_SINGLE_PRODUCER, or the
 * automatic role): nobody else moves the tail or claims a FREE slot, so a
 * load that finds FREE(t) can be followed by plain stores, which leave
 * through the store buffer while we go on, where the CAS would wait for the
 * slot's cache line to come back from the reader. Only with light wakes:
 * fifo_drained() relies on a membarrier to order our tail store before our
 * check for a closed reception (cistern_reserve()). `guarded`: we hold the
 * automatic role (CISTERN_HOLD_AUTO), which a second producer may take
 * away, not the flag's. Always inlined and free of calls, so that the put's
 * fast path saves no register (see put_as()).
 */
static inline __attribute__((always_inline)) enum holder_step
holder_claim(struct cistern *c, bool guarded, struct holder_at *at)
{
	struct cistern_hdr *h = c->hdr;
	/* The automatic role holds only while nobody takes it away (roles.c). */
	if (guarded && !cistern__auto_try_begin(c, CISTERN_ROLE_PRODUCER, &h->auto_producer))
		return HOLDER_LOST;
	/* Relaxed: we are the only writer of the tail while we hold the role. */
	uint64_t t = atomic_load_explicit(&h->tail, memory_order_relaxed);
	uint64_t idx = cistern__slot_of(c, t);
	struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
	/*
	 * [slot-free] acquire: the reader's release store of FREE(t) follows its
	 * last read of the payload, which our writes then cannot overtake.
	 */
	if (atomic_load_explicit(&m->word, memory_order_acquire) != sw_make(t, FIFO_FREE, 0)) {
		if (guarded)
			cistern__auto_end(c);
		c->put_quiet = FIFO_PUT_QUIET; /* the ring is full: see put_prefetch() */
		return HOLDER_NOT_READY;
	}
	put_prefetch(c, idx);
	/*
	 * Relaxed: RESERVED names us for a reclaim if we die; nobody reads the
	 * payload before COMMITTED, whose release store ([commit]) orders our
	 * writes. [tail-claim] release: the tail's store comes after it, so a
	 * process whose acquire load sees a tail past t sees t's claim in the
	 * word (the general path's help and the reclaim rely on it).
	 */
	atomic_store_explicit(&m->word, sw_make(t, FIFO_RESERVED, c->owner), memory_order_relaxed);
	atomic_store_explicit(&h->tail, t + 1, memory_order_release);
	if (guarded)
		cistern__auto_end(c);
	/*
	 * [close-claim] compiler fence: keeps the caller's seq_cst check of
	 * `closed` after the tail's store; the processor's store-load fence is
	 * the membarrier that fifo_drained() issues after it sees the close.
	 */
	atomic_signal_fence(memory_order_seq_cst);
	*at = (struct holder_at){t, idx, m, cistern__payload(c, idx)};
	return HOLDER_DONE;
}

/*
 * Whether this handle holds the producer (reader) role: by
 * CISTERN_SINGLE_PRODUCER (READER) with light wakes, or automatically
 * (roles.c). The holder claims the tail (takes the head) with plain stores.
 */
static inline bool holds_producer(const struct cistern *c)
{
	return c->producing == CISTERN_HOLD_AUTO ||
	       (c->producing == CISTERN_HOLD_SOLE && cistern__light());
}

static inline bool holds_reader(const struct cistern *c)
{
	return c->reading == CISTERN_HOLD_AUTO ||
	       (c->reading == CISTERN_HOLD_SOLE && cistern__light());
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
	/* Relaxed: a hint; cistern__auto_regain()'s CAS ([auto-leave]) decides. */
	return c->producing == CISTERN_HOLD_COUNTED &&
	       atomic_load_explicit(&c->hdr->auto_producer, memory_order_relaxed) ==
		       CISTERN_AUTO_ONE &&
	       cistern__auto_regain(c, CISTERN_ROLE_PRODUCER);
}

static inline bool plain_reader(struct cistern *c)
{
	if (holds_reader(c))
		return true;
	return c->reading == CISTERN_HOLD_COUNTED &&
	       atomic_load_explicit(&c->hdr->auto_reader, memory_order_relaxed) ==
		       CISTERN_AUTO_ONE &&
	       cistern__auto_regain(c, CISTERN_ROLE_READER);
}

/*
 * Publish a slot word (release) ahead of a wake check. The holder of a role
 * (`holder`) took it only with light wakes and its caller checked that they
 * still hold (put_holder(), get_holder()), so the release store alone will
 * do: a sleeper's membarrier makes up the store-load fence; anyone else
 * lets cistern__publish_word() decide.
 */
static inline __attribute__((always_inline)) void publish_as(bool holder, _Atomic uint64_t *word,
							     uint64_t w)
{
	if (holder) {
		/* Release: [commit] or [slot-free], as the word says (the callers). */
		atomic_store_explicit(word, w, memory_order_release);
		/*
		 * [wake-data] / [wake-space] compiler fence: keeps the wake check's
		 * load after the store; the sleeper's membarrier (wait.c) is the
		 * store-load fence.
		 */
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		cistern__publish_word(word, w);
	}
}

/* The metadata of the sample about to be committed as `id`; the id written back to meta. */
static inline __attribute__((always_inline)) void
write_meta(struct cistern_slotmeta *m, uint64_t id, size_t len, struct cistern_meta *meta)
{
	m->len = len;
	m->sample_id = id;
	m->sim_id = meta ? meta->sim_id : 0;
	m->time_step = meta ? meta->time_step : 0;
	if (meta)
		meta->sample_id = id;
}

/*
 * Commit the sample in the slot whose metadata is m, which we claimed for
 * position pos; `holder` as for publish_as(). True if readers sleep: the
 * caller wakes them (cistern__wake_futex on data_futex), left to it so that
 * the put's fast path makes no call.
 */
static inline __attribute__((always_inline)) bool
publish_sample_at(struct cistern *c, bool holder, struct cistern_slotmeta *m, uint64_t pos,
		  size_t len, struct cistern_meta *meta)
{
	/* Loaded before the stores below, as in holder_pass() (fifo_copy.c). */
	struct cistern_hdr *h = c->hdr;
	struct cistern_proc *me = c->me;
	/* The position is unique and increasing: offset by id_base, it is the sample id. */
	write_meta(m, pos + c->id_base, len, meta);
	/*
	 * T2, [commit] release: the payload, len and ids are written before the
	 * COMMITTED word; a reader's acquire load of the word sees them.
	 */
	publish_as(holder, &m->word, sw_make(pos, FIFO_COMMITTED, 0));
	cistern__count(&me->ctr.puts, 1);
	/*
	 * [wake-data] seq_cst: after the commit, the look for sleeping readers;
	 * a sleeper registers in readers_waiting before it looks at the word
	 * again (wait.c), so one of the two sees the other.
	 */
	return atomic_load_explicit(&h->readers_waiting, memory_order_seq_cst) != 0;
}

static inline __attribute__((always_inline)) bool
publish_sample(struct cistern *c, uint64_t idx, uint64_t pos, size_t len, struct cistern_meta *meta)
{
	return publish_sample_at(c, false, cistern__slotmeta(c, idx), pos, len, meta);
}

/* Commit a slot the caller has checked is ours. */
static inline void commit_mine(struct cistern *c, struct cistern_slot *slot, size_t len,
			       struct cistern_meta *meta)
{
	if (publish_sample(c, slot->index_, slot->pos_, len, meta))
		cistern__wake_futex(&c->hdr->data_futex);
	slot->live_ = 0;
}

static inline void fill_sample(struct cistern *c, struct cistern_sample *s, uint64_t idx,
			       uint64_t pos)
{
	struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
	s->data = cistern__payload(c, idx);
	s->len = (size_t)m->len;
	s->meta.sample_id = m->sample_id;
	s->meta.sim_id = m->sim_id;
	s->meta.time_step = m->time_step;
	s->meta.flags = 0; /* the FIFO keeps no flags */
	s->pos_ = pos;
	s->index_ = (uint32_t)idx;
	s->live_ = 1;
}

/*
 * The sole reader's look at the head (CISTERN_SINGLE_READER), the first half
 * of the mirror of holder_claim(): only we move the head or take a
 * COMMITTED slot. HOLDER_DONE with *at filled when the head's slot holds its
 * sample; a guarded caller is then inside its bracket, which the step that
 * follows (holder_take() or holder_pass()) ends.
 */
static inline __attribute__((always_inline)) enum holder_step
holder_look(struct cistern *c, bool guarded, struct holder_at *at)
{
	struct cistern_hdr *h = c->hdr;
	if (guarded && !cistern__auto_try_begin(c, CISTERN_ROLE_READER, &h->auto_reader))
		return HOLDER_LOST;
	/* Relaxed: we are the only writer of the head while we hold the role. */
	uint64_t p = atomic_load_explicit(&h->head, memory_order_relaxed);
	uint64_t idx = cistern__slot_of(c, p);
	struct cistern_slotmeta *m = cistern__slotmeta(c, idx);
	void *payload = cistern__payload(c, idx);
	__builtin_prefetch(payload, 0, 3);
	/* [commit] acquire: the payload, len and ids the producer wrote before T2. */
	if (atomic_load_explicit(&m->word, memory_order_acquire) != sw_make(p, FIFO_COMMITTED, 0)) {
		if (guarded)
			cistern__auto_end(c);
		return HOLDER_NOT_READY;
	}
	*at = (struct holder_at){p, idx, m, payload};
	return HOLDER_DONE;
}

/* T5 by the sole reader, at the position holder_look() found COMMITTED. */
static inline __attribute__((always_inline)) void holder_take(struct cistern *c, bool guarded,
							      const struct holder_at *at)
{
	/*
	 * Relaxed: ACQUIRED names us so that a reclaim hands the sample out again
	 * if we die. [head-take] release: the head's store follows it, so a
	 * reader whose acquire load sees a head past p sees p taken in the word.
	 */
	atomic_store_explicit(&at->m->word, sw_make(at->pos, FIFO_ACQUIRED, c->owner),
			      memory_order_relaxed);
	atomic_store_explicit(&c->hdr->head, at->pos + 1, memory_order_release);
	if (guarded)
		cistern__auto_end(c);
	cistern__count(&c->me->ctr.gets, 1);
}

/*
 * Hand the slot whose metadata is m, taken for position pos, back for
 * position pos + n; `holder` as for publish_as(). True if producers sleep:
 * the caller wakes them (see publish_sample()).
 */
static inline __attribute__((always_inline)) bool
free_slot_at(struct cistern *c, bool holder, struct cistern_slotmeta *m, uint64_t pos)
{
	/*
	 * T6, [slot-free] release: our reads of the payload come before FREE;
	 * a producer's acquire load or claim of the word comes after them.
	 */
	publish_as(holder, &m->word, sw_make(pos + c->slot_count, FIFO_FREE, 0));
	cistern__count(&c->me->ctr.seen_hist[1], 1);
	/* [wake-space] seq_cst, as [wake-data] in publish_sample_at(). */
	return cistern__producers_wait(c);
}

static inline __attribute__((always_inline)) bool free_slot(struct cistern *c, uint64_t idx,
							    uint64_t pos)
{
	return free_slot_at(c, false, cistern__slotmeta(c, idx), pos);
}

/* Release a sample the caller has checked is ours. */
static inline void release_mine(struct cistern *c, struct cistern_sample *s)
{
	if (free_slot(c, s->index_, s->pos_))
		cistern__wake_futex(&c->hdr->space_futex);
	s->live_ = 0;
	s->data = NULL;
}

/* fifo.c: the general path, which the one-step put and get fall back on. */
int cistern__fifo_try_reserve(struct cistern *c, struct cistern_slot *slot);
int cistern__fifo_abort(struct cistern *c, struct cistern_slot *slot);
int cistern__fifo_try_acquire(struct cistern *c, struct cistern_sample *s);
ssize_t cistern__fifo_got_too_long(struct cistern *c, struct cistern_sample *s);
/* fifo.c: the rest of the hot ring's ops, which the cold tier (fifo_tier.c) wraps. */
void cistern__fifo_init(struct cistern *c);
bool cistern__fifo_slot_is_mine(struct cistern *c, const struct cistern_slot *slot);
int cistern__fifo_release(struct cistern *c, struct cistern_sample *s);
int cistern__fifo_unacquire(struct cistern *c, struct cistern_sample *s);
bool cistern__fifo_drained(struct cistern *c);
void cistern__fifo_reclaim(struct cistern *c, uint32_t owner);
uint64_t cistern__fifo_population(const struct cistern *c, const struct cistern_stats *st);

/* fifo.c: how many slots ahead of its claim the sole producer prefetches, for slot_count slots. */
uint32_t cistern__put_ahead(uint64_t slot_count);

#endif
