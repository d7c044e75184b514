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

/* An id: the slot in the low 28 bits, the low 36 bits of the sample id above. */
#define CISTERN__PRIO_SLOT_BITS 28
#define CISTERN__PRIO_SLOT_MASK ((UINT64_C(1) << CISTERN__PRIO_SLOT_BITS) - 1)

static inline uint64_t cistern__prio_id(uint64_t sample_id, uint64_t slot)
{
	return (sample_id << CISTERN__PRIO_SLOT_BITS) | slot;
}

/*
 * Under the lock: does every leaf agree with its slot's state and priority,
 * and every inner node with its children? 0, or -EPROTO at the first that
 * does not (its node number in *where if not NULL). For tests and tools.
 */
int cistern__prio_check(struct cistern *c, uint64_t *where);

#endif
