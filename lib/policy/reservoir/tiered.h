/* SPDX-License-Identifier: MIT */
/*
 * tiered.h - the cold tier wired into the reservoirs: the tier's area
 * in the segment, the cold file a handle opens, and the ops of a tiered
 * reservoir (tiered.c; docs/protocol/tiers.md) (internal).
 *
 * The tier's area follows the rest of the segment, at fixed.cold_off:
 *
 *   [ struct cistern__tier_shm     ]  write cursor, cold population, counters, I/O
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
	struct cistern__cold_io io;      /* bytes moved and waits (cold.h) */
};
/*
 * The I/O counters fill what was the padding of the counters' line: the
 * area keeps its size, and an older segment's zero padding reads as no I/O.
 */
_Static_assert(sizeof(struct cistern__tier_shm) == 128, "the tier's header is two lines");

/*
 * A spill moves up to CISTERN__SPILL_MAX hot samples, and no more than
 * about CISTERN__SPILL_BYTES of slots, into one run of cold slots written
 * at once (tiered.c, docs/protocol/tiers.md).
 */
#define CISTERN__SPILL_MAX 64u
#define CISTERN__SPILL_BYTES (1u << 20)

/*
 * An attachment's spill under way: the run of cold slots it writes. The
 * reclaim of a dead spiller reads it to tell a sample both hot and cold
 * (its cold copy published) from one only hot: the spill's hot slots are
 * the dead owner's EVICTING ones, matched to the run's entries by sample
 * id. live: 0 none; 1 the fields describe a spill; 2 and the cold
 * population counts the run.
 */
struct cistern__spill_note {
	_Atomic uint64_t live;
	uint64_t cold; /* the run's first cold slot */
	uint32_t n;    /* the run's slots */
	uint32_t pad_;
	uint64_t pad2_[5];
};
_Static_assert(sizeof(struct cistern__spill_note) == 64, "a note is a cache line");

/*
 * A batch drawn ahead (tiered.c): its cold members, read into buffers of
 * the handle's own while the caller works on the batches before, and how
 * many hot members it draws when asked. Its reads go to the ring in parts
 * of CISTERN__AHEAD_PART, each part a batch of the ring: the parts that do
 * not fit beside the reads outstanding start as earlier parts complete.
 * Nothing in the segment records it: the members are not pinned until the
 * read that takes the batch checks and pins them (docs/protocol/tiers.md).
 */
#define CISTERN__AHEAD_PART 32u
struct cistern__ahead {
	size_t n;       /* the batch size it was drawn for; 0: none drawn */
	size_t k;       /* cold members */
	size_t cap;     /* room in the arrays below */
	uint64_t *slot; /* their cold slots */
	uint64_t *word; /* their entries' HELD words when drawn */
	void **buf;     /* one aligned slot each */
	struct cistern__io *io;
	struct cistern__io_batch *part; /* one a part */
	size_t started, waited;         /* parts started; parts waited for (their buffers ours) */
};

/*
 * The slot buffers of a handle's cold reads (tiered.c). They come in
 * chunks of contiguous slots, each registered with the process's ring
 * where it can be (uring.h): a read into one skips pinning its pages. A
 * buffer given back stays free for the next read, so a batch read
 * allocates nothing and its pages stay mapped. A chunk is made for what a
 * read lacks, so the buffers never exceed the most a handle held at once.
 */
struct cistern__buf_chunk {
	uint8_t *base;
	size_t slots;
	struct cistern__io_region region;
};

struct cistern__spares {
	void **buf; /* the free buffers: room for every buffer of every chunk */
	size_t n;
	struct cistern__buf_chunk *chunk;
	size_t chunks, total;
	/* A failed ring may still write into buffers it held: the chunks are never freed then. */
	bool abandoned;
};

/*
 * How deep a handle keeps its reads ahead (tiered.c): the reads it started
 * ahead and did not collect yet, summed at three moments. This counts what
 * the handle asks of the disk, not what the disk did, so it does not
 * depend on the machine's speed. Also how the CRCs of the handle's cold
 * reads were checked. For benchmarks and tests.
 */
struct cistern__ahead_stats {
	uint64_t starts;      /* submissions of reads ahead */
	uint64_t start_depth; /* reads outstanding just after each submission */
	uint64_t waits;       /* waits for a batch drawn ahead, at its read */
	uint64_t wait_depth;  /* reads outstanding as each wait began */
	uint64_t tail_depth;  /* reads still outstanding as each wait ended */
	/* The cold samples this handle read, by their CRC check (cistern__cold_check()): */
	uint64_t crc_checks; /* checked and good: the first good read of its write */
	uint64_t crc_skips;  /* not checked: a read of the same write was good already */
	uint64_t crc_fails;  /* checked and bad: the read failed (-EIO or dropped) */
};

/* The handle's side: the open cold file, a staging slot, the batches drawn ahead. */
struct cistern__tier {
	struct cistern__cold cold;
	bool open;
	void *stage;   /* a spill's slots, aligned; made at the first spill */
	bool no_ahead; /* batch reads do not draw ahead (cistern__tiered_read_ahead) */
	/* ahead[next]: the batch the next batch read takes; ahead[next ^ 1]: the one after. */
	struct cistern__ahead ahead[2];
	unsigned next;
	struct cistern__ahead_stats ahead_stats;
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
 * The cold slots of a batch handle c drew ahead, up to cap of them into
 * slots: their count (0: none drawn). which: 0 the batch the next batch
 * read takes, 1 the one after it. For tests.
 */
size_t cistern__tiered_ahead_slots(const struct cistern *c, unsigned which, uint64_t *slots,
				   size_t cap);
/* The depth counters of handle c's reads ahead into *out (zero if none yet). */
void cistern__tiered_ahead_stats(const struct cistern *c, struct cistern__ahead_stats *out);
/*
 * How many slot buffers handle c keeps free for reuse now; *total gets
 * how many it made, free or not, and *registered how many of those lie in
 * chunks registered with the ring. For tests.
 */
size_t cistern__tiered_spares(const struct cistern *c, size_t *total, size_t *registered);
/* Cold slot j's entry in c's cold index, or NULL. For tests. */
const struct cistern__cold_ent *cistern__tiered_ent(const struct cistern *c, uint64_t j);

/*
 * What a reservoir kind's tier does its own way (its descriptor's
 * tier_rules, defined in its file; docs/protocol/tiers.md, "Policies").
 * Every hook is optional: NULL is Reservoir's way, which tiered.c does.
 */
struct cistern__tier_rules {
	/*
	 * A put: its own try_reserve on a tiered segment, which spills through
	 * cistern__tiered_spill_reserve(). NULL: fill an empty slot, else
	 * spill, else evict a seen hot sample as without a tier.
	 */
	int (*try_reserve)(struct cistern *c, struct cistern_slot *slot);
	/*
	 * The hot sample a spill moves: a HELD one at *idx, its word in *word,
	 * and the ring position *pos its slot serves for the put; the spill
	 * then stops reads of it (or gives up if a reader pins it). NULL: a
	 * held, unpinned sample drawn at random, at its own position.
	 */
	bool (*pick_hot)(struct cistern *c, uint64_t *idx, uint64_t *word, uint64_t *pos);
	/*
	 * The cold slot a spill takes, claimed WRITING(me), an evicted sample
	 * counted (cistern__tiered_claim_cold()). NULL: the first from the
	 * write cursor that is free or holds a seen, unpinned sample.
	 */
	bool (*claim_cold)(struct cistern *c, uint64_t *slot);
	/*
	 * Whether a read of n may start while reception is open, with pop
	 * samples held in both tiers. NULL: pop >= max(watermark, n).
	 */
	bool (*may_read)(const struct cistern *c, uint64_t pop, size_t n);
	/*
	 * Reads take each sample for the reader alone, open or closed; a
	 * release keeps it while seen < pseudo_epochs, and a reclaim gives a
	 * dead reader's cold take back with its read (FIRO). false: reads pin
	 * while reception is open and take for good after.
	 */
	bool reads_take;
};

/*
 * A put found the hot arena full: move a hot sample (the rules' pick_hot)
 * to a cold slot (the rules' claim_cold) and reserve its hot slot for the
 * put: 0; -EAGAIN if no hot sample or no cold slot may be taken now.
 */
int cistern__tiered_spill_reserve(struct cistern *c, struct cistern_slot *slot);
/*
 * Claim a cold slot for a spill under the rule `take`: from the write
 * cursor on (in_order: the cursor's slot only, so that slots are taken in
 * file order), WRITING(me); a sample it evicts is counted. false: none.
 */
bool cistern__tiered_claim_cold(struct cistern *c, bool in_order, enum cistern__cold_take take,
				uint64_t *slot);

/* The tier of Reservoir, BatchReservoir, FIRO and FIFOEvictReservoir (tiered.c). */
extern const struct cistern__tiering cistern__rs_tiering;

#endif
