/* SPDX-License-Identifier: MIT */
/*
 * tiered.h - a segment's cold tier wired into its policy: the tier's area
 * in the segment, the cold file a handle opens, and the ops of a tiered
 * reservoir (tiered.c; docs/protocol/tiers.md) (internal).
 *
 * The tier's area follows the rest of the segment, at fixed.cold_off:
 *
 *   [ struct cistern__tier_shm     ]  write cursor, cold population, counters
 *   [ struct cistern__spill_note xP ]  one a attachment: its spill under way
 *   [ struct cistern__cold_ent x N ]  the cold index, 64 bytes a cold slot
 */
#ifndef CISTERN_TIER_TIERED_H
#define CISTERN_TIER_TIERED_H

#include "core/policy.h"
#include "core/segment.h"
#include "tier/cold.h"

struct cistern__tier_shm {
	CL_ALIGN _Atomic uint64_t cursor; /* the spills' write cursor (cold.h) */
	CL_ALIGN _Atomic uint64_t population; /* HELD cold entries (high, never low, after a death) */
	_Atomic uint64_t spilled;             /* samples moved from hot to cold */
	_Atomic uint64_t cold_reads;          /* cold samples read back */
	_Atomic uint64_t cold_evictions;      /* cold samples evicted by a spill */
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
};

/* The most samples the segment holds: its hot slots and its cold ones. */
static inline uint64_t cistern__holds_at_most(const struct cistern *c)
{
	return c->slot_count + c->fixed.cold_slots;
}
/* Bytes of the tier's area for cold_slots slots and procs attachments; 0 without a tier. */
uint64_t cistern__tier_bytes(uint64_t cold_slots, uint64_t procs);
/*
 * What create refuses in a tier for policy p (the sentence), or NULL; and
 * for the tier's own fields of cfg.
 */
const char *cistern__tier_config_problem(const struct cistern__policy *p,
					 const struct cistern_config *cfg);
/* The ops of a tiered segment of c's policy: c->policy->ops without a tier. */
const struct cistern_ops *cistern__tier_ops(const struct cistern *c);
/* Make the cold file of a segment being created (c->fixed set): 0 or -errno, nothing left. */
int cistern__tier_create(struct cistern *c);
/* Close the handle's cold file and free its side. */
void cistern__tier_free(struct cistern *c);
/* Remove the cold file of a segment whose header says (dir, name); 0 if it has none. */
int cistern__tier_unlink(const char *dir, const char *name);

/* What inspect shows of the tier. */
struct cistern__tier_view {
	uint64_t slots, population, disk_bytes, spilled, cold_reads, cold_evictions;
};
void cistern__tier_view(const struct cistern *c, struct cistern__tier_view *v);

#endif
