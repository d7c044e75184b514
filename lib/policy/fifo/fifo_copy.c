/* SPDX-License-Identifier: MIT */
/*
 * fifo_copy.c - cistern_put(), cistern_get(), cistern_get_batch() and
 * cistern_put_batch() on a FIFO: the copy in or out made in one step when
 * the slot is ready, by the role holder with plain stores (or by anyone
 * through the general path, fifo.c), with no slot record filled and read
 * back and no call on the way.
 *
 * The map of one put. cistern_put() (api.c) checks its arguments and calls
 * c->put_step: put_plain(), or put_wide() where the processor has AVX2, two
 * builds of the same inline path, put_holder() and put_as():
 *
 *     role     put_holder()           light wakes, and which holder we are
 *     claim    holder_claim() fifo.h  FREE(t) -> RESERVED(t, me), then tail t + 1
 *     close    put_as()               the re-check of `closed` after the claim
 *     copy     copy_small()           up to FIFO_SMALL_COPY_MAX bytes, inline
 *     publish  publish_sample_at()    the metadata, then COMMITTED(t) (T2)
 *     wake     publish_sample_at()    its load of readers_waiting; put_wake() wakes
 *
 * and its fallbacks, each out of line and reached by a tail call:
 *
 *     put_general()  not the holder, ring full, reception closed, role lost
 *                    (another role holder took it): the general one step
 *                    (put_now()), then the waiting path the caller handed it
 *     put_voided()   a close came during the claim: the claim becomes SKIP
 *     put_long()     a sample longer than a line: memcpy(), publish, wake
 *     put_wake()     readers sleep: the futex wake after the publish
 *
 * The map of one get, the mirror (c->get_step: get_plain(), get_wide()):
 *
 *     role     get_holder()           light wakes, and which holder we are
 *     look     holder_look() fifo.h   the head's slot holds COMMITTED(p)
 *     copy     copy_small()           a sample of up to a line that fits the buffer
 *     hand-back holder_pass()         FREE(p + n) (T11), then head p + 1
 *     wake     holder_pass()          its load of producers_waiting; get_wake() wakes
 *
 *     get_general()  not the holder, redeliveries pending, nothing committed,
 *                    role lost: get_now(), then the caller's waiting path
 *     get_taken()    longer than a line, or than the buffer: taken (T5), then
 *                    copied with memcpy() or handed back (-EMSGSIZE)
 *     get_wake()     producers sleep: the futex wake after the hand-back
 *
 * wide copies: put_wide() and get_wide() are put_plain() and get_plain()
 * compiled for AVX2 (see put_wide()). The batch calls (further down) run the
 * same claim, copy and publish in loops of their own.
 */
#include <errno.h>
#include <string.h>

#include "policy/fifo/fifo.h"
#include "policy/fifo/fifo_copy.h"
#include "policy/fifo/fifo_tier.h"
#include "core/ring.h"
#include "core/policy.h"
#include "sys/cpu.h"

/*
 * Copy a payload of up to 64 bytes (a cache line, the common small sample)
 * with two overlapping fixed-size moves inline, so that the one-step put and
 * get make no call on their way; longer ones go through memcpy() on a path
 * of their own (put_long(), get_taken()).
 */
typedef char fifo_v32 __attribute__((vector_size(32), aligned(1), may_alias));

static inline __attribute__((always_inline)) void copy_small(void *dst, const void *src, size_t n)
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
	} else if (n >= 4) {
		__builtin_memcpy(d, s, 4);
		__builtin_memcpy(d + n - 4, s + n - 4, 4);
	} else if (n) {
		/* 1 to 3 bytes: the first, the middle and the last, with no loop. */
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	}
}

/*
 * The general one step, for anyone who does not hold the role: the general
 * claim (fifo.c), the copy and the commit without the waiting path's layers
 * (waiter set-up, indirect calls, ownership checks of a slot we just
 * claimed). -EAGAIN when the call cannot go straight through: the caller
 * takes the waiting path, which waits, adds the role and reports the
 * errors. The caller checked the handle.
 */
static int put_now(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta)
{
	/* Acquire: a first look; the seq_cst check after the claim decides ([close-claim]). */
	if (!(c->role & CISTERN_ROLE_PRODUCER) ||
	    atomic_load_explicit(&c->hdr->closed, memory_order_acquire))
		return -EAGAIN;
	struct cistern_slot slot;
	int r = cistern__fifo_try_reserve(c, &slot);
	if (r < 0)
		return r;
	/* [close-claim] seq_cst, as cistern_reserve(): a close that came while we claimed voids the claim. */
	if (atomic_load_explicit(&c->hdr->closed, memory_order_seq_cst)) {
		cistern__fifo_abort(c, &slot);
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
	int r = cistern__fifo_try_acquire(c, &s);
	if (r < 0)
		return r;
	if (s.len > c->slot_size || s.len > cap)
		return cistern__fifo_got_too_long(c, &s);
	/* As cistern_get(): an empty sample may come with no buffer. */
	if (s.len)
		memcpy(buf, s.data, s.len);
	if (meta)
		*meta = s.meta;
	size_t len = s.len;
	release_mine(c, &s);
	return (ssize_t)len;
}

/*
 * ---- The put's fallbacks ----------------------------------------------------
 *
 * Whatever needs a call (a wake, a lost role, a voided claim, a payload
 * longer than a line, a handle that does not hold the role) is left to one
 * of these, out of line (noinline) and reached by a tail call with nothing
 * of the fast path live after it, so that the inline path saves few
 * registers (a saved register is a store) and calls nothing on the way.
 */

/*
 * The put of a handle that cannot take the holder's path now. A counted
 * handle that finds itself the only producer left takes the role back
 * (once) and goes round the holder's path again. Six arguments at most, all
 * in registers, so that the fast path reaches it by a tail call.
 */
static __attribute__((noinline)) int put_general(struct cistern *c, const void *buf, size_t len,
						 struct cistern_meta *meta, int timeout_ms,
						 cistern__put_fn *slow)
{
	if (!holds_producer(c) && plain_producer(c))
		return c->put_step(c, buf, len, meta, timeout_ms, slow);
	int r = put_now(c, buf, len, meta);
	return r == -EAGAIN ? slow(c, buf, len, meta, timeout_ms) : r;
}

/* As put_general(), for a handle that held the automatic role and found it taken away. */
static __attribute__((noinline)) int put_lost(struct cistern *c, const void *buf, size_t len,
					      struct cistern_meta *meta, int timeout_ms,
					      cistern__put_fn *slow)
{
	cistern__auto_lost(c, CISTERN_ROLE_PRODUCER);
	return put_general(c, buf, len, meta, timeout_ms, slow);
}

/* As cistern_reserve(): a close that came while we claimed voids the claim (SKIP). */
static __attribute__((noinline)) int put_voided(struct cistern *c, uint64_t pos, uint64_t idx)
{
	struct cistern_slot slot;
	cistern__set_slot(&slot, c, idx, pos);
	cistern__fifo_abort(c, &slot);
	return -EPIPE;
}

static __attribute__((noinline)) int put_wake(struct cistern *c)
{
	cistern__wake_futex(&c->hdr->data_futex);
	return 0;
}

/* The copy, the publish and the wake of a sample longer than a line. */
static __attribute__((noinline)) int put_long(struct cistern *c, const void *buf, size_t len,
					      struct cistern_meta *meta, uint64_t pos, uint64_t idx)
{
	memcpy(cistern__payload(c, idx), buf, len);
	if (publish_sample_at(c, true, cistern__slotmeta(c, idx), pos, len, meta))
		cistern__wake_futex(&c->hdr->data_futex);
	return 0;
}

/*
 * ---- The put's fast path ----------------------------------------------------
 *
 * The holder of the producer role (CISTERN_SINGLE_PRODUCER with light wakes,
 * or the automatic role): the claim, the copy and the commit on the position
 * and slot index alone, with no slot record filled and read back: the same
 * steps in the same order as cistern_reserve() + cistern_commit(), in fewer
 * instructions and stores. The caller (cistern_put()) checked the handle and
 * the length. `guarded`: the automatic holder, whose claim is bracketed
 * (holder_claim()).
 */
static inline __attribute__((always_inline)) int
put_as(struct cistern *c, bool guarded, const void *buf, size_t len, struct cistern_meta *meta,
       int timeout_ms, cistern__put_fn *slow)
{
	struct holder_at at;
	/* Acquire: a first look, as put_now()'s. */
	if (atomic_load_explicit(&c->hdr->closed, memory_order_acquire))
		return put_general(c, buf, len, meta, timeout_ms, slow);
	switch (holder_claim(c, guarded, &at)) {
	case HOLDER_LOST:
		return put_lost(c, buf, len, meta, timeout_ms, slow);
	case HOLDER_NOT_READY:
		return put_general(c, buf, len, meta, timeout_ms, slow);
	case HOLDER_DONE:
		break;
	}
	/* [close-claim] seq_cst, after the tail's store: fifo_drained() pairs with it. */
	if (atomic_load_explicit(&c->hdr->closed, memory_order_seq_cst))
		return put_voided(c, at.pos, at.idx);
	if (len > FIFO_SMALL_COPY_MAX)
		return put_long(c, buf, len, meta, at.pos, at.idx);
	copy_small(at.payload, buf, len);
	if (publish_sample_at(c, true, at.m, at.pos, len, meta))
		return put_wake(c);
	return 0;
}

/*
 * Which holder we are. One copy of put_as() each for the automatic holder
 * and the flag's: one register fewer. Either holds the role's plain stores
 * only with light wakes: the flag's by this check; the automatic holder took
 * its role with them, but a fork child that could not register for them
 * inherits the role without. Checked once here, so that the commit's store
 * needs no second look (publish_as()).
 */
static inline __attribute__((always_inline)) int put_holder(struct cistern *c, const void *buf,
							    size_t len, struct cistern_meta *meta,
							    int timeout_ms, cistern__put_fn *slow)
{
	if (!cistern__light())
		return put_general(c, buf, len, meta, timeout_ms, slow);
	if (c->producing == CISTERN_HOLD_AUTO)
		return put_as(c, true, buf, len, meta, timeout_ms, slow);
	if (c->producing == CISTERN_HOLD_SOLE)
		return put_as(c, false, buf, len, meta, timeout_ms, slow);
	return put_general(c, buf, len, meta, timeout_ms, slow);
}

/*
 * The one-step put and get once more, compiled for AVX2 and taken where the
 * processor has it (c->wide_copies, cistern__wide_copies()): a payload of 33
 * to 64 bytes is then copied with two 32-byte moves instead of four of 16.
 * The producer's stores wait in the core's store buffer for cache lines
 * that are still in the reader's cache; a sample that needs fewer entries
 * there leaves room for more samples in flight.
 */
#ifdef CISTERN_WIDE_COPIES
static __attribute__((target("avx2"), noinline)) int put_wide(struct cistern *c, const void *buf,
							      size_t len, struct cistern_meta *meta,
							      int timeout_ms, cistern__put_fn *slow)
{
	return put_holder(c, buf, len, meta, timeout_ms, slow);
}
#endif

static __attribute__((noinline)) int put_plain(struct cistern *c, const void *buf, size_t len,
					       struct cistern_meta *meta, int timeout_ms,
					       cistern__put_fn *slow)
{
	return put_holder(c, buf, len, meta, timeout_ms, slow);
}

static inline __attribute__((always_inline)) void meta_out(const struct cistern_slotmeta *m,
							   struct cistern_meta *meta)
{
	if (meta) {
		meta->sample_id = m->sample_id;
		meta->sim_id = m->sim_id;
		meta->time_step = m->time_step;
		meta->flags = 0; /* the FIFO keeps no flags */
	}
}

/* ---- The get's fallbacks (as the put's) -------------------------------------- */

static __attribute__((noinline)) ssize_t get_general(struct cistern *c, void *buf, size_t cap,
						     struct cistern_meta *meta, int timeout_ms,
						     cistern__get_fn *slow);

/* As put_lost(), for the reader role. */
static __attribute__((noinline)) ssize_t get_lost(struct cistern *c, void *buf, size_t cap,
						  struct cistern_meta *meta, int timeout_ms,
						  cistern__get_fn *slow)
{
	cistern__auto_lost(c, CISTERN_ROLE_READER);
	return get_general(c, buf, cap, meta, timeout_ms, slow);
}

/* As put_general(), for the reader role. */
static __attribute__((noinline)) ssize_t get_general(struct cistern *c, void *buf, size_t cap,
						     struct cistern_meta *meta, int timeout_ms,
						     cistern__get_fn *slow)
{
	if (!holds_reader(c) && plain_reader(c))
		return c->get_step(c, buf, cap, meta, timeout_ms, slow);
	ssize_t n = get_now(c, buf, cap, meta);
	return n == -EAGAIN ? slow(c, buf, cap, meta, timeout_ms) : n;
}

static __attribute__((noinline)) ssize_t get_wake(struct cistern *c, size_t len)
{
	cistern__wake_futex(&c->hdr->space_futex);
	return (ssize_t)len;
}

/*
 * The holder's get of a sample longer than a line or than the caller's
 * buffer, which get_as() found COMMITTED at position pos in slot idx: taken
 * first (T5) as any get does, since its copy is long or it goes back for
 * redelivery. The bracket of the automatic holder (CISTERN_HOLD_AUTO) is
 * still open; holder_take() ends it.
 */
static __attribute__((noinline)) ssize_t get_taken(struct cistern *c, void *buf, size_t cap,
						   struct cistern_meta *meta, uint64_t pos,
						   uint64_t idx)
{
	struct holder_at at = {pos, idx, cistern__slotmeta(c, idx), cistern__payload(c, idx)};
	/* Stable: the slot is COMMITTED and only we take it. */
	size_t len = (size_t)at.m->len;
	holder_take(c, c->reading == CISTERN_HOLD_AUTO, &at);
	if (len > c->slot_size || len > cap) {
		struct cistern_sample s;
		fill_sample(c, &s, idx, pos);
		return cistern__fifo_got_too_long(c, &s);
	}
	memcpy(buf, at.payload, len);
	meta_out(at.m, meta);
	if (free_slot_at(c, true, at.m, pos))
		cistern__wake_futex(&c->hdr->space_futex);
	return (ssize_t)len;
}

/*
 * ---- The get's fast path ----------------------------------------------------
 *
 * The hand-back: T11 and I2 by the holder of the reader role, which has
 * copied out the sample at position p (the COMMITTED word holder_look()
 * loaded): the slot goes straight to FREE(p + n), with no ACQUIRED between,
 * and then the head moves. True if producers sleep (see free_slot()).
 *
 * The order is what keeps a death harmless. Killed before the hand-back, we
 * leave the sample COMMITTED at the head, where the next reader takes it: it
 * was never delivered, since our call never returned. Killed between the
 * hand-back and the head's store, we leave the head behind a slot already a
 * lap ahead, which any reader helps past (cistern__fifo_try_acquire()), as it does
 * past a dead reader's take. The head's store comes last so that a head past
 * p always has p's sample gone from COMMITTED.
 */
static inline __attribute__((always_inline)) bool holder_pass(struct cistern *c, bool guarded,
							      const struct holder_at *at)
{
	/*
	 * Loaded before the stores below, which the compiler cannot tell from
	 * stores to the handle: else it loads them again after each one.
	 */
	struct cistern_hdr *h = c->hdr;
	struct cistern_proc *me = c->me;
	uint64_t next = at->pos + c->slot_count;
	/* T11, [slot-free] release (publish_as()): our reads of the payload come before FREE. */
	publish_as(true, &at->m->word, sw_make(next, FIFO_FREE, 0));
	cistern__count(&me->ctr.seen_hist[1], 1);
	/* [wake-space] seq_cst, as free_slot_at()'s. */
	bool sleepers = atomic_load_explicit(&h->producers_waiting, memory_order_seq_cst) != 0;
	/* [head-take] release: a reader that loads this head sees the hand-back before it. */
	atomic_store_explicit(&h->head, at->pos + 1, memory_order_release);
	if (guarded)
		cistern__auto_end_of(me);
	cistern__count(&me->ctr.gets, 1);
	return sleepers;
}

/*
 * The holder of the reader role: the mirror of put_as(). A sample of up to a
 * line that fits the caller's buffer is copied out while still COMMITTED and
 * then handed back (holder_pass()), one store to the slot word where a take
 * and a release would make two; a longer one, or one that does not fit,
 * goes to get_taken().
 */
static inline __attribute__((always_inline)) ssize_t
get_as(struct cistern *c, bool guarded, void *buf, size_t cap, struct cistern_meta *meta,
       int timeout_ms, cistern__get_fn *slow)
{
	struct holder_at at;
	/*
	 * As cistern__fifo_try_acquire(): redeliveries first (the general path
	 * takes them). Relaxed: a hint, which take_redelivered() confirms slot by
	 * slot.
	 */
	if (atomic_load_explicit(&c->hdr->redeliver_pending, memory_order_relaxed) != 0)
		return get_general(c, buf, cap, meta, timeout_ms, slow);
	switch (holder_look(c, guarded, &at)) {
	case HOLDER_LOST:
		return get_lost(c, buf, cap, meta, timeout_ms, slow);
	case HOLDER_NOT_READY:
		return get_general(c, buf, cap, meta, timeout_ms, slow);
	case HOLDER_DONE:
		break;
	}
	size_t len = (size_t)at.m->len;
	if (len > (cap < c->small_fit ? cap : c->small_fit))
		return get_taken(c, buf, cap, meta, at.pos, at.idx);
	copy_small(buf, at.payload, len);
	meta_out(at.m, meta);
	if (holder_pass(c, guarded, &at))
		return get_wake(c, len);
	return (ssize_t)len;
}

/* Which holder we are, as put_holder(). */
static inline __attribute__((always_inline)) ssize_t
get_holder(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta, int timeout_ms,
	   cistern__get_fn *slow)
{
	if (!cistern__light())
		return get_general(c, buf, cap, meta, timeout_ms, slow);
	if (c->reading == CISTERN_HOLD_AUTO)
		return get_as(c, true, buf, cap, meta, timeout_ms, slow);
	if (c->reading == CISTERN_HOLD_SOLE)
		return get_as(c, false, buf, cap, meta, timeout_ms, slow);
	return get_general(c, buf, cap, meta, timeout_ms, slow);
}

#ifdef CISTERN_WIDE_COPIES
static __attribute__((target("avx2"), noinline)) ssize_t
get_wide(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta, int timeout_ms,
	 cistern__get_fn *slow)
{
	return get_holder(c, buf, cap, meta, timeout_ms, slow);
}
#endif

static __attribute__((noinline)) ssize_t get_plain(struct cistern *c, void *buf, size_t cap,
						   struct cistern_meta *meta, int timeout_ms,
						   cistern__get_fn *slow)
{
	return get_holder(c, buf, cap, meta, timeout_ms, slow);
}

void cistern__fifo_steps(struct cistern *c)
{
	c->small_fit = c->slot_size < FIFO_SMALL_COPY_MAX ? c->slot_size : FIFO_SMALL_COPY_MAX;
	c->put_ahead = cistern__put_ahead(c->slot_count);
	c->put_step = NULL;
	c->get_step = NULL;
	/* With a cold tier every put and get goes through the tier's ops (fifo_tier.c). */
	if (c->readonly || !c->owner || c->fixed.cold_slots)
		return;
	c->put_step = put_plain;
	c->get_step = get_plain;
#ifdef CISTERN_WIDE_COPIES
	if (c->wide_copies) {
		c->put_step = put_wide;
		c->get_step = get_wide;
	}
#endif
}

/*
 * ---- cistern_get_batch() on a FIFO ----------------------------------------
 *
 * Up to n samples in order, copied to g->dst + i * g->stride: as many as are
 * there now, and if none is, the first one waited for as cistern_get() waits.
 * The holder of the reader role copies each one out of its COMMITTED slot and
 * frees the slot (T11), and moves the head once for the whole batch; a batch
 * cut short by the holder's death leaves the head behind freed slots, which
 * any reader helps past one by one, as after a death between one T11 and its
 * head store. Longer batches spread the call's fixed costs (the checks, the
 * head's store, the counters, the wake check) over more samples.
 */

/* The holder's batch: the samples there now, stopping before one that does not fit. */
static inline __attribute__((always_inline)) size_t
gather_as(struct cistern *c, bool guarded, size_t n, const struct cistern_gather *g, bool *lost)
{
	struct cistern_hdr *h = c->hdr;
	struct cistern_proc *me = c->me;
	if (guarded && !cistern__auto_try_begin(c, CISTERN_ROLE_READER, &h->auto_reader)) {
		*lost = true;
		return 0;
	}
	/* Relaxed: we are the only writer of the head while we hold the role. */
	uint64_t p0 = atomic_load_explicit(&h->head, memory_order_relaxed), p = p0;
	/*
	 * Locals: the stores to the caller's arrays could alias the handle's
	 * fields as far as the compiler knows, which would load them again for
	 * every sample.
	 */
	uint64_t idx = cistern__slot_of(c, p0), slots = c->slot_count;
	char *meta0 = c->meta0, *arena = c->arena;
	uint64_t mstride = c->meta_stride, pstride = c->slot_stride;
	size_t stride = g->stride;
	size_t fit = stride < c->slot_size ? stride : (size_t)c->slot_size;
	char *dst = g->dst;
	size_t *lens = g->len;
	struct cistern_meta *metas = g->meta;
	for (size_t i = 0; i < n; i++, p++, dst += stride) {
		struct cistern_slotmeta *m = cistern__slotmeta_in(meta0, mstride, idx);
		/* [commit] acquire: the payload is complete. */
		if (atomic_load_explicit(&m->word, memory_order_acquire) !=
		    sw_make(p, FIFO_COMMITTED, 0))
			break;
		size_t len = (size_t)m->len;
		if (len > fit)
			break; /* left COMMITTED; the first-sample path reports it */
		const char *src = arena + idx * pstride;
		if (len <= FIFO_SMALL_COPY_MAX)
			copy_small(dst, src, len);
		else
			memcpy(dst, src, len);
		if (lens)
			lens[i] = len;
		if (metas)
			meta_out(m, &metas[i]);
		/* T11, [slot-free] release: our reads of the payload come before the hand-back. */
		atomic_store_explicit(&m->word, sw_make(p + slots, FIFO_FREE, 0),
				      memory_order_release);
		if (++idx == slots)
			idx = 0;
	}
	size_t k = (size_t)(p - p0);
	/* [head-take] release: a reader that loads this head sees the hand-backs before it. */
	if (k)
		atomic_store_explicit(&h->head, p, memory_order_release);
	if (guarded)
		cistern__auto_end_of(me);
	if (k) {
		cistern__count(&me->ctr.gets, k);
		cistern__count(&me->ctr.seen_hist[1], k);
		/*
		 * [wake-space]: the wake check after the last hand-back. With light
		 * wakes (the role needs them) a sleeping producer's membarrier
		 * orders our stores before its re-check, so a compiler fence is
		 * enough here.
		 */
		atomic_signal_fence(memory_order_seq_cst);
		if (atomic_load_explicit(&h->producers_waiting, memory_order_seq_cst) != 0)
			cistern__wake_futex(&h->space_futex);
	}
	return k;
}

/* One copy each for the automatic holder and the flag's, as get_holder(). */
static inline __attribute__((always_inline)) size_t
gather_holder(struct cistern *c, size_t n, const struct cistern_gather *g, bool *lost)
{
	if (c->reading == CISTERN_HOLD_AUTO)
		return gather_as(c, true, n, g, lost);
	return gather_as(c, false, n, g, lost);
}

static __attribute__((noinline)) size_t gather_plain(struct cistern *c, size_t n,
						     const struct cistern_gather *g, bool *lost)
{
	return gather_holder(c, n, g, lost);
}

#ifdef CISTERN_WIDE_COPIES
/* As get_wide(): samples of 33 to 64 bytes in two 32-byte moves each. */
static __attribute__((target("avx2"), noinline)) size_t
gather_wide(struct cistern *c, size_t n, const struct cistern_gather *g, bool *lost)
{
	return gather_holder(c, n, g, lost);
}
#endif

/* Anyone else: one general get after another, while samples are there. */
static ssize_t gather_shared(struct cistern *c, size_t n, const struct cistern_gather *g)
{
	size_t k = 0;
	for (; k < n; k++) {
		struct cistern_meta mt;
		ssize_t r = get_now(c, g->dst + k * g->stride, g->stride, g->meta ? &mt : NULL);
		if (r < 0) {
			/* A sample that did not fit went back for redelivery: it comes first next time. */
			if (k == 0 && r != -EAGAIN)
				return r;
			break;
		}
		if (g->len)
			g->len[k] = (size_t)r;
		if (g->meta)
			g->meta[k] = mt;
	}
	return (ssize_t)k;
}

/* The samples there now: how many (0: none), or an error of the first one. */
static ssize_t gather_now(struct cistern *c, size_t n, const struct cistern_gather *g)
{
	bool lost = false;
	size_t k;
	if (atomic_load_explicit(&c->hdr->redeliver_pending, memory_order_relaxed) != 0)
		return gather_shared(c, n, g); /* redeliveries first, as every get */
	/* The holder, or a counted handle that finds itself the only reader left (as get_holder()). */
	if (!cistern__light() || !plain_reader(c))
		return gather_shared(c, n, g);
#ifdef CISTERN_WIDE_COPIES
	if (c->wide_copies)
		k = gather_wide(c, n, g, &lost);
	else
#endif
		k = gather_plain(c, n, g, &lost);
	if (lost) {
		cistern__auto_lost(c, CISTERN_ROLE_READER);
		return gather_shared(c, n, g);
	}
	return (ssize_t)k;
}

int cistern__fifo_get_batch(struct cistern *c, char *buf, size_t stride, size_t n, size_t *len,
			    struct cistern_meta *meta, int timeout_ms, cistern__get_fn *get_one)
{
	struct cistern_gather g = {buf, stride, len, meta};
	ssize_t k = gather_now(c, n, &g);
	if (k != 0)
		return (int)k;
	/* Nothing there: wait for one as cistern_get() does (end of data, errors), then the rest. */
	ssize_t r = get_one(c, buf, stride, meta, timeout_ms);
	if (r < 0)
		return (int)r;
	if (len)
		len[0] = (size_t)r;
	struct cistern_gather rest = {buf + stride, stride, len ? len + 1 : NULL,
				      meta ? meta + 1 : NULL};
	k = n > 1 ? gather_now(c, n - 1, &rest) : 0;
	/* An error of the second sample is the next call's to report. */
	return 1 + (k > 0 ? (int)k : 0);
}

/*
 * ---- cistern_put_batch() on a FIFO ----------------------------------------
 *
 * Up to n samples in order, sample i the lens[i] bytes at src + i * stride:
 * as many as there is room for now, and if there is none, the first one
 * waited for as cistern_put() waits. The holder of the producer role puts
 * each sample with put_as()'s steps (the claim, the check of closed
 * reception, the copy, the commit), so that a death mid-batch leaves what a
 * death inside one put leaves; the call's fixed costs (the checks of the
 * handle and the role, the counter, the look for sleeping readers) are paid
 * once for the batch.
 */

/*
 * The holder's batch: puts each sample there is a free slot for now, as
 * put_as() does (the claim, the check of closed reception, the copy and
 * the commit), stopping before a sample of a length a put refuses
 * (cistern__len_misfit()) or too long for the stride, or when the role goes (*lost); how many, 0 if none (the caller
 * waits for the first, or reports its length); -EPIPE if reception closed
 * while it claimed the first.
 */
static inline __attribute__((always_inline)) ssize_t
scatter_as(struct cistern *c, bool guarded, size_t n, const struct cistern_scatter *s, bool *lost)
{
	struct cistern_hdr *h = c->hdr;
	struct cistern_proc *me = c->me;
	/* A first look, as put_as()'s: after a close, the caller's cistern_put() says -EPIPE. */
	if (atomic_load_explicit(&h->closed, memory_order_acquire))
		return 0;
	/* Relaxed: we are the only writer of the tail while we hold the role. */
	uint64_t t0 = atomic_load_explicit(&h->tail, memory_order_relaxed), t = t0;
	/*
	 * Locals: the stores below could alias the handle's fields as far as
	 * the compiler knows, which would load them again for every sample.
	 * The slot's metadata and payload are walked by pointer, the lengths
	 * and metadata records likewise, so that a sample costs no multiply
	 * and few reloads of values the loop has no register left for.
	 */
	uint64_t idx = cistern__slot_of(c, t0), slots = c->slot_count;
	/*
	 * The lengths that fit: lo plus 0 to span, those a put takes
	 * (cistern__len_misfit()) no longer than the stride. None fits a
	 * stride below lo: the caller's first-sample path reports it.
	 */
	uint64_t lo = c->put_len_min, hi = lo + c->put_len_span;
	if (s->stride < lo)
		return 0;
	uint64_t span = (s->stride < hi ? s->stride : hi) - lo;
	char *meta0 = c->meta0, *arena = c->arena;
	uint64_t mstride = c->meta_stride, pstride = c->slot_stride, id_base = c->id_base;
	struct cistern_slotmeta *m = cistern__slotmeta_in(meta0, mstride, idx);
	struct cistern_slotmeta *mend = cistern__slotmeta_in(meta0, mstride, slots);
	char *dst = arena + idx * pstride;
	/*
	 * The slot word's position field, stepped by sw_make(1, 0, 0) a
	 * sample: the 48 position bits fill the word above the 16 others, so
	 * the sum wraps as sw_make()'s mask does.
	 */
	_Static_assert(SW_POS_SHIFT + SW_POS_BITS == 64, "the position field ends the slot word");
	uint64_t wpos = sw_make(t0, 0, 0);
	uint64_t reserved = sw_make(0, FIFO_RESERVED, c->owner);
	const char *src = s->src;
	size_t stride = s->stride;
	/* Without lengths every sample is stride bytes: read stride, not stepping. */
	const size_t *lens = s->len ? s->len : &stride;
	size_t lstep = s->len ? 1 : 0;
	struct cistern_meta *metas = s->meta;
	/*
	 * The write prefetches of put_prefetch(), further ahead by the batch's
	 * length (at most a quarter of the ring, as put_ahead is; so less than
	 * the ring): the slots the next batch will fill, whose lines then come
	 * in while this batch is written. Prefetched put_ahead ahead as a lone
	 * put's are, most of a batch's lines would come too late.
	 */
	uint64_t far = c->put_ahead + (n < slots / 4 ? n : slots / 4);
	uint64_t quiet = c->put_quiet, ahead = cistern__slot_ahead(idx, far, slots);
	/* The slot prefetched next, walked as m and dst are. */
	char *am = meta0 + ahead * mstride, *ap = arena + ahead * pstride;
	bool prefetchw = c->write_prefetch;
	bool voided = false;
	for (uint64_t tend = t0 + n; t != tend; t++) {
		size_t len = *lens;
		if (len - lo > span)
			break; /* the first-sample path reports it */
		/* Each claim in a bracket of its own, as put_as()'s: the copies need none. */
		if (guarded &&
		    !cistern__auto_try_begin(c, CISTERN_ROLE_PRODUCER, &h->auto_producer)) {
			*lost = true;
			break;
		}
		/* [slot-free] acquire: the reader's release store of FREE(t) follows its last read. */
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		if (w != (wpos | sw_make(0, FIFO_FREE, 0))) {
			if (guarded)
				cistern__auto_end_of(me);
			quiet = FIFO_PUT_QUIET; /* the ring is full: see put_prefetch() */
			break;
		}
		if (quiet) {
			quiet--;
		} else {
			cistern__prefetch_for_write(am, prefetchw);
			cistern__prefetch_for_write(ap, prefetchw);
		}
		am += mstride;
		ap += pstride;
		if (am == (char *)mend) {
			am = meta0;
			ap = arena;
		}
		/* Relaxed, then the tail ([tail-claim] release): as holder_claim(). */
		atomic_store_explicit(&m->word, wpos | reserved, memory_order_relaxed);
		atomic_store_explicit(&h->tail, t + 1, memory_order_release);
		if (guarded)
			cistern__auto_end_of(me);
		/* [close-claim] seq_cst, after the claim: as put_as()'s check. */
		atomic_signal_fence(memory_order_seq_cst);
		if (atomic_load_explicit(&h->closed, memory_order_seq_cst)) {
			voided = true;
			break;
		}
		if (len <= FIFO_SMALL_COPY_MAX)
			copy_small(dst, src, len);
		else
			memcpy(dst, src, len);
		/* The position is the sample id, offset by id_base (publish_sample_at()). */
		write_meta(m, t + id_base, len, metas);
		/* T2, [commit] release: publishes the payload and the metadata. */
		atomic_store_explicit(&m->word, wpos | sw_make(0, FIFO_COMMITTED, 0),
				      memory_order_release);
		wpos += sw_make(1, 0, 0);
		src += stride;
		lens += lstep;
		if (metas)
			metas++;
		m = (struct cistern_slotmeta *)((char *)m + mstride);
		dst += pstride;
		if (m == mend) {
			m = cistern__slotmeta_in(meta0, mstride, 0);
			dst = arena;
		}
	}
	c->put_quiet = quiet;
	size_t k = (size_t)(t - t0);
	if (voided)
		put_voided(c, t, cistern__slot_of(c, t)); /* t is not counted in k */
	if (k == 0)
		return voided ? -EPIPE : 0;
	cistern__count(&me->ctr.puts, k);
	/* [wake-data]: the wake check after the last commit; light wakes, as gather_as(). */
	atomic_signal_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&h->readers_waiting, memory_order_seq_cst) != 0)
		cistern__wake_futex(&h->data_futex);
	return (ssize_t)k;
}

/* One copy each for the automatic holder and the flag's, as put_holder(). */
static inline __attribute__((always_inline)) ssize_t
scatter_holder(struct cistern *c, size_t n, const struct cistern_scatter *s, bool *lost)
{
	if (c->producing == CISTERN_HOLD_AUTO)
		return scatter_as(c, true, n, s, lost);
	return scatter_as(c, false, n, s, lost);
}

static __attribute__((noinline)) ssize_t scatter_plain(struct cistern *c, size_t n,
						       const struct cistern_scatter *s, bool *lost)
{
	return scatter_holder(c, n, s, lost);
}

#ifdef CISTERN_WIDE_COPIES
static __attribute__((target("avx2"), noinline)) ssize_t
scatter_wide(struct cistern *c, size_t n, const struct cistern_scatter *s, bool *lost)
{
	return scatter_holder(c, n, s, lost);
}
#endif

/* Anyone else: one general put after another, while there is room. */
static ssize_t scatter_shared(struct cistern *c, size_t n, const struct cistern_scatter *s)
{
	size_t k = 0;
	for (; k < n; k++) {
		size_t len = cistern__scatter_len(s, k);
		if (len > s->stride || cistern__len_misfit(c, len))
			break; /* the first-sample path reports it */
		int r = put_now(c, s->src + k * s->stride, len, s->meta ? &s->meta[k] : NULL);
		if (r < 0) {
			if (k == 0 && r != -EAGAIN)
				return r;
			break;
		}
	}
	return (ssize_t)k;
}

ssize_t cistern__fifo_put_now(struct cistern *c, size_t n, const struct cistern_scatter *s)
{
	bool lost = false;
	ssize_t k;
	/* With a cold tier: the tier's batch put, which writes cold runs at once. */
	if (c->fixed.cold_slots)
		return cistern__fifo_tier_put_now(c, n, s);
	/* The holder, or a counted handle that finds itself the only producer left (as put_holder()). */
	if (!cistern__light() || !plain_producer(c))
		return scatter_shared(c, n, s);
#ifdef CISTERN_WIDE_COPIES
	if (c->wide_copies)
		k = scatter_wide(c, n, s, &lost);
	else
#endif
		k = scatter_plain(c, n, s, &lost);
	if (lost) {
		cistern__auto_lost(c, CISTERN_ROLE_PRODUCER);
		/* The samples put before the role went stay put: the next call puts the rest. */
		return k > 0 ? k : scatter_shared(c, n, s);
	}
	return k;
}
