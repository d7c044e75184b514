/* SPDX-License-Identifier: MIT */
/*
 * pins.h - reservoir pins, the fences around them, and the seen counts (pins.c) (internal).
 */
#ifndef CISTERN_PINS_H
#define CISTERN_PINS_H

#include "sys/fence.h"
#include "policy/reservoir/state.h"
#include "core/wait.h"

/* Bucket of the seen histogram for a count. */
static inline unsigned cistern__seen_bucket(uint32_t seen)
{
	if (seen <= 4)
		return seen;
	if (seen <= 8)
		return 5;
	if (seen <= 16)
		return 6;
	return 7;
}

/* pins.c */
int cistern__pin_bit(struct cistern *c);
bool cistern__pin_again(struct cistern *c, uint64_t index);
void cistern__pin_undo(struct cistern *c, uint64_t index);

/*
 * [wait-register] A store-load barrier between a reader's plain stores (the sole reader's
 * pins and seen counts) and its look at producers_waiting before a wake: with
 * light wakes the sleeper's membarrier supplies it at run time and a
 * compiler-only fence keeps the order in the program; otherwise a seq_cst
 * fence. See wait.c.
 */
static inline void cistern__fence_before_wake(void)
{
	if (cistern__light())
		atomic_signal_fence(memory_order_seq_cst);
	else
		cistern__full_fence();
}

/*
 * The sole reader's pin (CISTERN_SINGLE_READER, roles.c): no other handle
 * writes this slot's pins word while it holds the role (the previous holder's
 * pins were dropped by its reclaim before the role passed on), so a load and
 * a relaxed store set the bit, with no locked instruction. The pin holds only
 * once a seq_cst fence ([pin-evict]) follows the store and the slot word, read after the
 * fence, is still the one seen before (pins.c): cistern__pin() fences each
 * pin, batched reads (reservoir_read.c) fence once for all of theirs.
 * 1: the bit was set now; 0: this handle already pinned the slot (an extra
 * pin, counted locally); -1: no memory to count it.
 */
static inline int cistern__pin_sole_store(struct cistern *c, uint64_t index)
{
	_Atomic uint64_t *pins = &cistern__slotmeta(c, index)->pins;
	uint64_t bit = UINT64_C(1) << cistern__rs(c)->pin_bit;
	uint64_t old = atomic_load_explicit(pins, memory_order_relaxed);
	if (old & bit)
		return cistern__pin_again(c, index) ? 0 : -1;
	atomic_store_explicit(pins, old | bit, memory_order_relaxed);
	return 1;
}

/*
 * [unpin] The sole reader's unpin: a release store, so that its reads of the payload
 * are done before an evictor that sees the bit clear (a seq_cst load,
 * acquiring) takes the slot. The caller fences before it wakes producers.
 */
static inline void cistern__unpin_sole_store(struct cistern *c, uint64_t index)
{
	_Atomic uint64_t *pins = &cistern__slotmeta(c, index)->pins;
	uint64_t bit = UINT64_C(1) << cistern__rs(c)->pin_bit;
	atomic_store_explicit(pins, atomic_load_explicit(pins, memory_order_relaxed) & ~bit,
			      memory_order_release);
}

/*
 * Pin slot `index` for this handle (cistern__pin_bit() done) if its state is
 * held_state; *word gets its word. False: not in that state (or no memory for
 * a repeated pin). The handshake with evictors is described in pins.c; the
 * rare paths live there too. Inline: batched reads pin every member.
 */
static inline bool cistern__pin(struct cistern *c, uint64_t index, unsigned held_state,
				uint64_t *word)
{
	struct cistern_slotmeta *m = cistern__slotmeta(c, index);
	if (cistern__reads_alone(c)) {
		/* [rs-held] acquire: the metadata the caller reads next is the sample's. */
		uint64_t before = atomic_load_explicit(&m->word, memory_order_acquire);
		if (sw_state(before) != held_state)
			return false;
		int r = cistern__pin_sole_store(c, index);
		if (r <= 0) {
			*word = before;
			return r == 0;
		}
		/* [pin-evict] seq_cst fence, then the look again: the reader's half. */
		cistern__full_fence();
		if (atomic_load_explicit(&m->word, memory_order_relaxed) != before) {
			cistern__pin_undo(c, index);
			return false;
		}
		*word = before;
		return true;
	}
	uint64_t bit = UINT64_C(1) << cistern__rs(c)->pin_bit;
	/* [pin-evict] seq_cst RMW, then a seq_cst load (also [rs-held]): the reader's half. */
	uint64_t old = atomic_fetch_or_explicit(&m->pins, bit, memory_order_seq_cst);
	uint64_t w = atomic_load_explicit(&m->word, memory_order_seq_cst);
	if (old & bit) {
		/* Already pinned by this handle, so it cannot have changed under us. */
		if (!cistern__pin_again(c, index))
			return false;
		*word = w;
		return true;
	}
	if (sw_state(w) != held_state) {
		cistern__pin_undo(c, index);
		return false;
	}
	*word = w;
	return true;
}
int cistern__unpin(struct cistern *c, uint64_t index);
/* 0 if this handle pins `index` more than once (one repeat dropped), else 1. */
int cistern__unpin_repeated(struct cistern *c, uint64_t index);
/*
 * cistern__unpin() without waking producers: 1 when the shared pin bit was
 * cleared (the caller owes cistern__wake_producers(), after its last unpin,
 * behind cistern__fence_before_wake() if this handle is the sole reader),
 * 0 when only a repeated pin of this handle was dropped, or -EINVAL.
 */
static inline int cistern__unpin_quiet(struct cistern *c, uint64_t index)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	if (rs->pin_bit < 0)
		return -EINVAL;
	if (rs->dups.used && cistern__unpin_repeated(c, index) == 0)
		return 0;
	uint64_t bit = UINT64_C(1) << rs->pin_bit;
	if (cistern__reads_alone(c)) {
		if (!(atomic_load_explicit(&cistern__slotmeta(c, index)->pins,
					   memory_order_relaxed) &
		      bit))
			return -EINVAL;
		cistern__unpin_sole_store(c, index);
		return 1;
	}
	/* [unpin] seq_cst: our reads of the payload are done before the slot can be evicted. */
	uint64_t old = atomic_fetch_and_explicit(&cistern__slotmeta(c, index)->pins, ~bit,
						 memory_order_seq_cst);
	return old & bit ? 1 : -EINVAL;
}

/*
 * Count one more read of a sample this handle pins or holds: seen += 1, the
 * old count back. The sole reader is the only writer of seen while it pins
 * (producers set it only on a slot they reserved), so a load and a store do.
 * Relaxed: the unpin or release that follows ([unpin], [rs-release]) carries it.
 */
static inline uint32_t cistern__seen_add(struct cistern *c, uint64_t index)
{
	_Atomic uint32_t *seen = &cistern__slotmeta(c, index)->seen;
	if (cistern__reads_alone(c)) {
		uint32_t old = atomic_load_explicit(seen, memory_order_relaxed);
		atomic_store_explicit(seen, old + 1, memory_order_relaxed);
		return old;
	}
	return atomic_fetch_add_explicit(seen, 1, memory_order_relaxed);
}

/* Take back a read counted by cistern__seen_add() (a read given back unread). */
static inline void cistern__seen_sub(struct cistern *c, uint64_t index)
{
	_Atomic uint32_t *seen = &cistern__slotmeta(c, index)->seen;
	if (cistern__reads_alone(c))
		atomic_store_explicit(seen, atomic_load_explicit(seen, memory_order_relaxed) - 1,
				      memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(seen, 1, memory_order_relaxed);
}
/*
 * A dead reader's read given back by a reclaim: seen -= 1, but never below 0
 * (the reader may have died before it raised it). True if it was lowered.
 */
static inline bool cistern__seen_take_back(struct cistern_slotmeta *m)
{
	uint32_t seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
	while (seen > 0 &&
	       !atomic_compare_exchange_weak_explicit(&m->seen, &seen, seen - 1,
						      memory_order_relaxed, memory_order_relaxed))
		;
	return seen > 0;
}
void cistern__drop_pins(struct cistern *c, struct cistern_proc *p);
void cistern__pins_free(struct cistern *c);

#endif
