/* SPDX-License-Identifier: MIT */
/*
 * pins.c - readers pinning reservoir samples so that no producer evicts or
 * overwrites them while they are read in place.
 *
 * Each reading handle takes one of 64 pin bits (hdr->reader_bits); a slot's
 * `pins` word is the set of handles pinning it. A bit, not a count, so that
 * a dead reader's pins can be dropped exactly (clear its bit everywhere),
 * whatever instant it died at. A handle that pins a slot it already pins
 * records the extra pin locally (struct cistern_pindups) and the shared bit
 * is cleared only with its last pin.
 *
 * Pin and eviction race with a Dekker handshake, both sides seq_cst:
 *   reader:  pins |= bit;           then load word: still held? else undo
 *   evictor: CAS word held->reserved; then load pins: zero? else undo
 * In the single total order one of the two second loads sees the other's
 * first step, so a reader never keeps a pin on a slot being overwritten and a
 * producer never overwrites a pinned slot.
 *
 * The sole reader of a segment created with CISTERN_SINGLE_READER is the only
 * writer of the pins words while it holds the role, so it sets and clears
 * its bit with plain stores, and its half of the handshake becomes
 *   reader:  pins = bit (store);    seq_cst fence;  load word: unchanged? else undo
 * which the same single-total-order argument covers (a load sequenced after
 * a seq_cst fence sees the last seq_cst write before the fence, or a later
 * one). A batch stores all its pins and fences once (reservoir_read.c).
 *
 * The fast paths of a pin and an unpin, cistern__pin() and
 * cistern__unpin_quiet(), are inline in pins.h; what is here is their
 * rare paths, the pin bits and dropping a dead reader's pins.
 */
#include <errno.h>
#include <stdlib.h>

#include "policy/reservoir/pins.h"
#include "policy/reservoir/rate_limit.h"
#include "policy/reservoir/reservoir.h"
#include "core/slotword.h"
#include "core/policy.h"

int cistern__pin_bit(struct cistern *c)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	if (rs->pin_bit >= 0)
		return rs->pin_bit;
	_Atomic uint64_t *bits = &c->hdr->reader_bits;
	uint64_t cur = atomic_load_explicit(bits, memory_order_relaxed);
	for (;;) {
		if (cur == UINT64_MAX)
			return -EUSERS;
		int b = __builtin_ctzll(~cur);
		/* [reader-bit] acquire: a freed bit comes with every slot's pins cleared of it. */
		if (atomic_compare_exchange_weak_explicit(bits, &cur, cur | (UINT64_C(1) << b),
							  memory_order_acq_rel,
							  memory_order_relaxed)) {
			/* A death right here leaks the bit until the segment is recreated. */
			c->me->reader_bit = (uint32_t)b;
			rs->pin_bit = b;
			return b;
		}
	}
}

static ssize_t dup_find(struct cistern_pindups *d, uint32_t slot)
{
	for (size_t i = 0; i < d->used; i++)
		if (d->slot[i] == slot)
			return (ssize_t)i;
	return -1;
}

static bool dup_add(struct cistern_pindups *d, uint32_t slot)
{
	ssize_t i = dup_find(d, slot);
	if (i >= 0) {
		d->count[i]++;
		return true;
	}
	if (d->used == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 16;
		uint32_t *s = realloc(d->slot, cap * sizeof(*s));
		if (!s)
			return false;
		d->slot = s;
		uint32_t *n = realloc(d->count, cap * sizeof(*n));
		if (!n)
			return false;
		d->count = n;
		d->cap = cap;
	}
	d->slot[d->used] = slot;
	d->count[d->used] = 1;
	d->used++;
	return true;
}

/* cistern__pin() (pins.h) found our bit already set: count the extra pin locally. */
bool cistern__pin_again(struct cistern *c, uint64_t index)
{
	return dup_add(&cistern__rs(c)->dups, (uint32_t)index);
}

/* cistern__pin() found the slot no longer held: take the pin back. */
void cistern__pin_undo(struct cistern *c, uint64_t index)
{
	uint64_t bit = UINT64_C(1) << cistern__rs(c)->pin_bit;
	/* [unpin] seq_cst, like every unpin: ordered before the producers' wake check. */
	atomic_fetch_and_explicit(&cistern__slotmeta(c, index)->pins, ~bit, memory_order_seq_cst);
	cistern__wake_producers(c);
	/* [retire]: a remover may have seen this pin and backed off. */
	rs_let_go(c, index);
}

/* cistern__unpin_quiet() (pins.h): this handle pins the slot more than once. */
int cistern__unpin_repeated(struct cistern *c, uint64_t index)
{
	struct cistern_pindups *d = &cistern__rs(c)->dups;
	ssize_t i = dup_find(d, (uint32_t)index);
	if (i < 0)
		return 1; /* the last pin: the caller clears the shared bit */
	if (--d->count[i] == 0) {
		d->used--;
		d->slot[i] = d->slot[d->used];
		d->count[i] = d->count[d->used];
	}
	return 0;
}

int cistern__unpin(struct cistern *c, uint64_t index)
{
	int r = cistern__unpin_quiet(c, index);
	if (r <= 0)
		return r;
	if (cistern__reads_alone(c))
		cistern__fence_before_wake(); /* [wait-register]: the unpin was a plain store */
	cistern__wake_producers(c);
	return 0;
}

void cistern__drop_pins(struct cistern *c, struct cistern_proc *p)
{
	uint32_t b = p->reader_bit;
	if (b >= CISTERN_PIN_READERS_MAX)
		return;
	uint64_t bit = UINT64_C(1) << b;
	/* Its entry's owner: a removal here is done in its name (cistern__rs_retire_as()). */
	uint32_t owner = (uint32_t)(p - cistern__procs(c)) + 1;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		if (!(atomic_load_explicit(&m->pins, memory_order_relaxed) & bit))
			continue;
		/*
		 * A read that was never released does not count as seen: take back
		 * the one it added (before the unpin, so no producer can evict on
		 * its strength), never below zero. If the reader died between its
		 * pin and its increment this takes back another's read instead,
		 * which only delays an eviction: erring low is the safe side.
		 * [unpin]: an evictor that sees the bit clear sees the count.
		 * The rate limiter counted that read: it is taken back there too,
		 * before the unpin, so that a reclaimer that dies in between
		 * leaves both to the next one (rate_limit.c).
		 */
		if (cistern__seen_take_back(m))
			cistern__rate_give_back(c, 1);
		atomic_fetch_and_explicit(&m->pins, ~bit, memory_order_seq_cst);
		/* [retire]: the dead reader's pin may have been the last on a spent sample. */
		rs_let_go_as(c, i, owner);
	}
	p->reader_bit = UINT32_MAX;
	/* [reader-bit] release: the bit is free only after every slot forgot it. */
	atomic_fetch_and_explicit(&c->hdr->reader_bits, ~bit, memory_order_release);
}

void cistern__pins_free(struct cistern *c)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	free(rs->dups.slot);
	free(rs->dups.count);
	rs->dups = (struct cistern_pindups){0};
	rs->pin_bit = -1;
}
