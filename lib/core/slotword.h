/* SPDX-License-Identifier: MIT */
/*
 * slotword.h - the encoding of a slot's 64-bit state word, shared by the
 * policies (internal):
 *
 *     word = pos[63:16] (low 48 bits of a position or generation)
 *          | state[15:12] | owner[11:0] (attachment index + 1, 0 = nobody)
 *
 * What `pos` and each state mean is the policy's business (fifo.h and fifo.c
 * for FIFO, reservoir.h for FIRO and the reservoirs); the packing is common
 * so that tools can decode any segment.
 */
#ifndef CISTERN_SLOTWORD_H
#define CISTERN_SLOTWORD_H

#include <stdint.h>

#include "cistern.h"

/* Owner field: holds every attachment index + 1 up to CISTERN_PROCS_MAX (asserted below). */
#define SW_OWNER_BITS 12
#define SW_OWNER_MASK ((UINT32_C(1) << SW_OWNER_BITS) - 1)
/* State field: room for 16 states; the policies use at most 6. */
#define SW_STATE_BITS 4
#define SW_STATE_SHIFT SW_OWNER_BITS
#define SW_STATE_MASK ((1u << SW_STATE_BITS) - 1)
/* Position field: the 48 bits left; positions compare modulo 2^48 (sw_lap_diff()). */
#define SW_POS_SHIFT (SW_STATE_SHIFT + SW_STATE_BITS)
#define SW_POS_BITS 48
#define SW_POS_MASK ((UINT64_C(1) << SW_POS_BITS) - 1)

_Static_assert(SW_POS_SHIFT + SW_POS_BITS == 64, "the three fields fill the slot word");
_Static_assert(CISTERN_PROCS_MAX <= SW_OWNER_MASK, "every owner (attachment index + 1) fits");

static inline uint64_t sw_make(uint64_t pos, unsigned state, uint32_t owner)
{
	return ((pos & SW_POS_MASK) << SW_POS_SHIFT) | ((uint64_t)state << SW_STATE_SHIFT) |
	       (owner & SW_OWNER_MASK);
}

static inline uint64_t sw_pos(uint64_t w)
{
	return w >> SW_POS_SHIFT;
}

static inline unsigned sw_state(uint64_t w)
{
	return (unsigned)(w >> SW_STATE_SHIFT) & SW_STATE_MASK;
}

static inline uint32_t sw_owner(uint64_t w)
{
	return (uint32_t)(w & SW_OWNER_MASK);
}

/* Where a word's position stands against p (mod 2^48): 0 same, >0 ahead, <0 behind. */
static inline int64_t sw_lap_diff(uint64_t w, uint64_t p)
{
	uint64_t d = (sw_pos(w) - p) & SW_POS_MASK;
	return d < (UINT64_C(1) << (SW_POS_BITS - 1)) ? (int64_t)d
						      : (int64_t)d - (int64_t)(SW_POS_MASK + 1);
}

#endif
