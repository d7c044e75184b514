/* SPDX-License-Identifier: MIT */
/*
 * tiered.h - the cold tier wired into the reservoirs: the tier's area
 * in the segment, the cold file a handle opens, and the ops of a tiered
 * reservoir (tiered.c; docs/protocol/tiers.md) (internal).
 *
 * The tier's area follows the rest of the segment, at fixed.cold_off:
 *
 *   [ struct cistern__tier_shm     ]  write cursor, cold population, counters
 *   [ struct cistern__spill_note xP ]  one a attachment: its spill under way
 *   [ struct cistern__cold_ent x N ]  the cold index, 64 bytes a cold slot
 */
#ifndef CISTERN_RESERVOIR_TIERED_H
#define CISTERN_RESERVOIR_TIERED_H

#include "core/policy.h"
#include "core/segment.h"
#include "tier/cold.h"

struct cistern__tier_shm {
	CL_ALIGN _Atomic uint64_t cursor; /* the spills' write cursor (cold.h) */
	/* HELD cold entries; a death may leave it high, never low. */
	CL_ALIGN _Atomic uint64_t population;
	_Atomic uint64_t spilled;        /* samples moved from hot to cold */
	_Atomic uint64_t cold_reads;     /* cold samples read back */
	_Atomic uint64_t cold_evictions; /* cold samples evicted by a spill */
};

/*
 * An attachment's spill under way: the hot slot it moves and the cold slot
 * it writes. The reclaim of a dead spiller reads it to tell a sample both
 * hot and cold (the cold copy published) from one only hot.
 */
struct cistern__spill_note {
	_Atomic uint64_t live; /* 1 while the fields below describe a spill */
	uint64_t hot;          /* slot index */
	uint64_t cold;         /* cold slot */
	uint64_t id;           /* the sample's id */
	uint32_t cold_gen;     /* the cold entry's generation when claimed */
	uint32_t pad_;
	uint64_t pad2_[3];
};
_Static_assert(sizeof(struct cistern__spill_note) == 64, "a note is a cache line");

/* The handle's side: the open cold file and a staging slot. */
struct cistern__tier {
	struct cistern__cold cold;
	bool open;
	void *stage; /* one aligned slot */
	/* A restore: staged slots from rfirst on, written rfill at a time (tiered.c). */
	void *rbuf;
	uint64_t rfirst, restored;
	unsigned rfill;
};

/* reservoir.c: Reservoir's and BatchReservoir's tier. */
extern const struct cistern__tiering cistern__rs_tiering;

#endif
