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

/*
 * A handle's next batch, drawn ahead (tiered.c): its cold members, read
 * into buffers of the handle's own while the caller works on the batch
 * before, and how many hot members it draws when asked. Nothing in the
 * segment records it: the members are not pinned until the next read
 * checks and pins them (docs/protocol/tiers.md).
 */
struct cistern__ahead {
	size_t n;       /* the batch size it was drawn for; 0: none drawn */
	size_t k;       /* cold members */
	size_t cap;     /* room in the arrays below */
	uint64_t *slot; /* their cold slots */
	uint64_t *word; /* their entries' HELD words when drawn */
	void **buf;     /* one aligned slot each */
	struct cistern__io *io;
	struct cistern__io_batch batch;
	bool in_flight; /* started: wait before the buffers are freed */
};

/*
 * Slot buffers a handle's cold samples gave back, kept for its next reads
 * (tiered.c): a batch read then allocates nothing, and the pages stay
 * mapped instead of being faulted in and zeroed again. It keeps at most
 * `cap`, one batch's worth; a buffer given back past that is freed.
 */
struct cistern__spares {
	void **buf;
	size_t n, cap;
};

/* The handle's side: the open cold file, a staging slot, the batch drawn ahead. */
struct cistern__tier {
	struct cistern__cold cold;
	bool open;
	void *stage;   /* one aligned slot */
	bool no_ahead; /* batch reads do not draw ahead (cistern__tiered_read_ahead) */
	struct cistern__ahead ahead;
	struct cistern__spares spares;
	/* A restore: staged slots from rfirst on, written rfill at a time (tiered.c). */
	void *rbuf;
	uint64_t rfirst, restored;
	unsigned rfill;
};

/*
 * Whether the batch reads of handle c draw their next batch ahead (they do
 * by default): 0, or a negative errno if the tier cannot be set up. Turned
 * off, it drops a batch drawn ahead. For benchmarks and tests.
 */
int cistern__tiered_read_ahead(struct cistern *c, bool on);
/*
 * The cold slots of the batch handle c drew ahead, up to cap of them into
 * slots: their count (0: none drawn). For tests.
 */
size_t cistern__tiered_ahead_slots(const struct cistern *c, uint64_t *slots, size_t cap);
/* How many slot buffers handle c keeps for reuse now. For tests. */
size_t cistern__tiered_spares(const struct cistern *c);
/* Cold slot j's entry in c's cold index, or NULL. For tests. */
const struct cistern__cold_ent *cistern__tiered_ent(const struct cistern *c, uint64_t j);

/* reservoir.c: Reservoir's and BatchReservoir's tier. */
extern const struct cistern__tiering cistern__rs_tiering;

#endif
