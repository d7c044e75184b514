/* SPDX-License-Identifier: MIT */
/*
 * prioritized.h - the prioritized policy's ids and the check of its tree
 * that the tests make (internal). The public calls reach its draws through
 * the descriptor's prio (core/policy.h). The design is in
 * docs/protocol/priorities.md.
 */
#ifndef CISTERN_PRIORITIZED_H
#define CISTERN_PRIORITIZED_H

#include <stddef.h>
#include <stdint.h>

#include "core/handle.h"

struct cistern_prio_info;

/*
 * An id: the slot in the low 28 bits, and above them the low 36 bits of the
 * sample id XORed with the segment's salt. Sample ids restart at 1 in every
 * segment, so without the salt an id read from one segment would name a
 * sample of another that sits in the same slot with the same sample id; with
 * it, such an id matches only by a 1 in 2^36 chance and is otherwise
 * ignored as stale.
 */
#define CISTERN__PRIO_SLOT_BITS 28
#define CISTERN__PRIO_SLOT_MASK ((UINT64_C(1) << CISTERN__PRIO_SLOT_BITS) - 1)

/* The segment's salt: a mix of its creation time and creator, fixed at create. */
static inline uint64_t cistern__prio_salt(const struct cistern *c)
{
	uint64_t x = c->fixed.created_ns ^ ((uint64_t)c->fixed.creator_pid << 40);
	x ^= x >> 31;
	x *= UINT64_C(0x7fb5d329728ea185);
	x ^= x >> 27;
	x *= UINT64_C(0x81dadef4bc2dd44d);
	return x ^ (x >> 33);
}

static inline uint64_t cistern__prio_id(const struct cistern *c, uint64_t sample_id, uint64_t slot)
{
	return ((sample_id ^ cistern__prio_salt(c)) << CISTERN__PRIO_SLOT_BITS) | slot;
}

/*
 * Under the lock: does every leaf agree with its slot's state and priority,
 * and every inner node with its children? 0, or -EPROTO at the first that
 * does not (its node number in *where if not NULL). For tests and tools.
 */
int cistern__prio_check(struct cistern *c, uint64_t *where);

#endif
