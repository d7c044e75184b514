/* SPDX-License-Identifier: MIT */
/*
 * fifo_tier.h - the FIFO's cold tier, a spill ring on disk after the hot
 * ring (fifo_tier.c; docs/protocol/tiers.md, "The FIFO's spill ring")
 * (internal).
 *
 * The tier's area follows the rest of the segment, at fixed.cold_off:
 *
 *   [ struct cistern__fifo_tier_shm ]  mode word, cold head, hint, counters, I/O
 *   [ struct cistern__cold_ent x N  ]  the cold ring, 64 bytes a cold slot
 *   [ run words, one line           ]  each staging run's state and group
 *   [ staging runs (page aligned)   ]  a group of cold slots' bytes each
 */
#ifndef CISTERN_FIFO_TIER_H
#define CISTERN_FIFO_TIER_H

#include "core/policy.h"
#include "core/segment.h"
#include "tier/cold.h"

/* The mode word: this bit set = puts go to the cold ring; the rest is the cold tail. */
#define CISTERN__FIFO_MODE_COLD (UINT64_C(1) << 63)

struct cistern__fifo_tier_shm {
	/* [tier-mode]: COLD bit | next cold position a producer claims. */
	CL_ALIGN _Atomic uint64_t mode;
	/* Next cold position a reader takes. */
	CL_ALIGN _Atomic uint64_t chead;
	/* Hint: some cold entry may be REDELIVER ([cold-redeliver-hint]). */
	CL_ALIGN _Atomic uint64_t redeliver;
	_Atomic uint64_t next_id;    /* ids of the samples put, both rings */
	_Atomic uint64_t spilled;    /* samples put to the cold ring */
	_Atomic uint64_t cold_reads; /* cold samples handed out */
	struct cistern__cold_io io;  /* bytes moved and waits (cold.h) */
};
/*
 * The I/O counters fill what was the padding of the counters' line: the
 * area keeps its size, and an older segment's zero padding reads as no I/O.
 */
_Static_assert(sizeof(struct cistern__fifo_tier_shm) == 192, "the tier's header is three lines");

/* The FIFO's tier (fifo.c's descriptor). */
extern const struct cistern__tiering cistern__fifo_tiering;

/* fifo_tier.c: cistern_put_batch()'s samples there is room for now (fifo_copy.c's hook). */
ssize_t cistern__fifo_tier_put_now(struct cistern *c, size_t n, const struct cistern_scatter *s);

/*
 * For tests: called by a process that starts to write a staging run's
 * group to the cold file, once the run is marked as its write and the
 * write is in flight.
 */
extern void (*cistern__fifo_stage_hook)(void);

/*
 * Wait for the group writes this handle started and collect them (their
 * runs go free): 0 or the first write's -errno. Detach does it; for tests.
 */
int cistern__fifo_tier_settle(struct cistern *c);

/* For tests: the handle's mode word and cold head. */
void cistern__fifo_tier_peek(const struct cistern *c, uint64_t *mode, uint64_t *chead);
/* For tests: the run of cold positions the handle reads ahead, from *first on: how many. */
size_t cistern__fifo_tier_ahead(const struct cistern *c, uint64_t *first);

#endif
