/* SPDX-License-Identifier: MIT */
/*
 * peek.h - what tests read straight from a segment's slot metadata, past the
 * public API, to check what the library left there.
 */
#ifndef CISTERN_TEST_PEEK_H
#define CISTERN_TEST_PEEK_H

#include <stdbool.h>

#include "core/handle.h"

/* The sum of the slots' seen counts, and whether any pin bit is left. */
static inline uint64_t seen_sum(struct cistern *c, bool *pinned)
{
	uint64_t sum = 0;
	*pinned = false;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		sum += atomic_load(&cistern__slotmeta(c, i)->seen);
		*pinned |= atomic_load(&cistern__slotmeta(c, i)->pins) != 0;
	}
	return sum;
}

#endif
