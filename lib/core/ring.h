/* SPDX-License-Identifier: MIT */
/*
 * ring.h - ring positions and the slots that serve them (internal).
 */
#ifndef CISTERN_RING_H
#define CISTERN_RING_H

#include "core/handle.h"

/* Hand slot `idx`, claimed for ring position (or generation) pos, to a reserver. */
static inline void cistern__set_slot(struct cistern_slot *slot, const struct cistern *c,
				     uint64_t idx, uint64_t pos)
{
	slot->data = cistern__payload(c, idx);
	slot->capacity = c->slot_size;
	slot->pos_ = pos;
	slot->index_ = (uint32_t)idx;
	slot->live_ = 1;
}

/*
 * Move a ring index (tail or head) from p to p+1 unless someone already did.
 * Anyone may: a process that claimed position p and died before moving the
 * index leaves that to the next one that finds p claimed. [ring-advance]
 * seq_cst: ordered with the close and end-of-data checks (fifo.c); the word
 * of p was claimed before it.
 */
static inline void cistern__help_advance(_Atomic uint64_t *idx, uint64_t p)
{
	atomic_compare_exchange_strong_explicit(idx, &p, p + 1, memory_order_seq_cst,
						memory_order_relaxed);
}

/*
 * The slot of ring position p already serves position p + d (d >= 0): help
 * the index *idx past p, or answer -EPROTO when the word is over a lap ahead
 * of an index that has not moved. No run of a ring's protocol leaves that (a
 * slot reaches position p + n only after p was claimed; a FIFOEvictReservoir
 * removal after close moves a claimed slot one lap on), only damage does, and
 * helping would walk the index for ever. The load is only a value check
 * (seq_cst by default, ordering nothing here).
 */
static inline int cistern__help_or_refuse(const struct cistern *c, _Atomic uint64_t *idx,
					  uint64_t p, int64_t d)
{
	if (d > (int64_t)c->slot_count && atomic_load(idx) == p)
		return -EPROTO;
	cistern__help_advance(idx, p);
	return 0;
}

#endif
