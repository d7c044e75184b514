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

#define SW_POS_BITS 48
#define SW_POS_MASK ((UINT64_C(1) << SW_POS_BITS) - 1)

static inline uint64_t sw_make(uint64_t pos, unsigned state, uint32_t owner)
{
	return ((pos & SW_POS_MASK) << 16) | ((uint64_t)state << 12) | (owner & 0xfff);
}

static inline uint64_t sw_pos(uint64_t w)
{
	return w >> 16;
}

static inline unsigned sw_state(uint64_t w)
{
	return (unsigned)(w >> 12) & 0xf;
}

static inline uint32_t sw_owner(uint64_t w)
{
	return (uint32_t)(w & 0xfff);
}

/* Where a word's position stands against p (mod 2^48): 0 same, >0 ahead, <0 behind. */
static inline int64_t sw_lap_diff(uint64_t w, uint64_t p)
{
	uint64_t d = (sw_pos(w) - p) & SW_POS_MASK;
	return d < (UINT64_C(1) << (SW_POS_BITS - 1)) ? (int64_t)d
						      : (int64_t)d - (int64_t)(SW_POS_MASK + 1);
}

#endif
