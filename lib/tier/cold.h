/* SPDX-License-Identifier: MIT */
/*
 * cold.h - the cold tier of a segment: a file of slots on a local disk read
 * and written with O_DIRECT through io_uring, and its index, one 64-byte
 * entry a slot (docs/protocol/tiers.md).
 *
 * The file is DIR/cistern.NAME.cold: a header block, then nslots slots of
 * slot_bytes each (a multiple of CISTERN__COLD_BLOCK). The index lives in
 * memory the caller gives (the segment's); its entries go
 * FREE -> WRITING -> COLD, and COLD -> EVICTING -> WRITING or back to COLD.
 * A slot's bytes are all on disk before its entry turns COLD.
 */
#ifndef CISTERN_TIER_COLD_H
#define CISTERN_TIER_COLD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sys/uring.h"

#define CISTERN__COLD_BLOCK 4096u
/* The file's header block; slot i starts at CISTERN__COLD_BLOCK + i * slot_bytes. */
#define CISTERN__COLD_MAGIC "CSTCOLD1"
#define CISTERN__COLD_VERSION 1u

struct cistern__cold {
	int fd;
	uint32_t slot_bytes;
	uint64_t nslots;
	uint64_t nonce;
};

/* The slot size for samples of up to max_bytes: rounded up to a block; 0 if too big. */
uint32_t cistern__cold_slot_bytes(size_t max_bytes);
/* DIR/cistern.NAME.cold into out: 0, or -ENAMETOOLONG. */
int cistern__cold_path(char *out, size_t cap, const char *dir, const char *name);
/*
 * Make the cold file of segment `name` in `dir`, allocated in full: 0;
 * -EEXIST if it exists; -ENOSPC if the disk cannot hold it; -EINVAL if the
 * file system refuses O_DIRECT; -EFBIG if it exceeds the process's file size
 * limit; another -errno. On error nothing is left behind.
 */
int cistern__cold_create(struct cistern__cold *c, const char *dir, const char *name,
			 uint32_t slot_bytes, uint64_t nslots, uint64_t nonce);
/* Open an existing cold file: -ESTALE if its header is not that of (name, nonce). */
int cistern__cold_open(struct cistern__cold *c, const char *dir, const char *name, uint64_t nonce);
/* The same for reading only (a dump): no write is made through it. */
int cistern__cold_open_read(struct cistern__cold *c, const char *dir, const char *name,
			    uint64_t nonce);
void cistern__cold_close(struct cistern__cold *c);

/* What a cold file's header says: whose it is and its shape. */
struct cistern__cold_id {
	char name[256];
	uint64_t nonce;
	uint32_t slot_bytes;
	uint64_t nslots;
};
/*
 * Read the header block of the cold file open on fd (O_DIRECT or not):
 * 0 and *id; -ESTALE if it is no whole header (a create that did not
 * finish, or not a cold file); another -errno of the read.
 */
int cistern__cold_header(int fd, struct cistern__cold_id *id);
/*
 * Give the cold file open on c, DIR/cistern.FROM.cold, to segment `to`:
 * its header names `to` (written and synced first), then the file is
 * renamed to DIR/cistern.TO.cold, never over an existing file (-EEXIST).
 * -ESTALE if its header is not that of `from`.
 */
int cistern__cold_rename(struct cistern__cold *c, const char *dir, const char *from,
			 const char *to);
/* Remove the cold file of segment `name` in `dir`. */
int cistern__cold_unlink(const char *dir, const char *name);

/*
 * The I/O counters of a segment's cold tier, in the tier's area of the
 * segment (each policy's tier keeps one): the bytes moved to and from the
 * cold file, counted when a batch's wait finds them done, and the time
 * processes spent blocked in those waits. A batch that runs in the
 * background (a read ahead) counts only the wait that collects it.
 * Relaxed: they are statistics; nothing is ordered by them.
 */
struct cistern__cold_io {
	_Atomic uint64_t bytes_written, bytes_read, write_wait_ns, read_wait_ns;
};
/*
 * cistern__uring_wait() on a batch of cold file I/O, counted in ctr (NULL:
 * not counted): its bytes done and the time the wait took. The batch is all
 * reads or all writes.
 */
int cistern__cold_wait(struct cistern__cold_io *ctr, struct cistern__io_batch *b);
/*
 * cistern__uring_poll() on a batch of cold file I/O: -EINPROGRESS while
 * some request is not done; then 0 or the first -errno, its bytes counted
 * in ctr (NULL: not counted) as cistern__cold_wait() counts them, with no
 * time (nobody waited).
 */
int cistern__cold_poll(struct cistern__cold_io *ctr, struct cistern__io_batch *b);
/* cistern__uring_run(), its wait counted in ctr as cistern__cold_wait(). */
int cistern__cold_run(struct cistern__cold_io *ctr, struct cistern__io *io, unsigned n);

/* An aligned buffer of n slots, or NULL; freed with free(). */
void *cistern__cold_alloc(const struct cistern__cold *c, size_t n);
/* Fill io for `count` slots from `slot` on, to or from buf (count * slot_bytes, aligned). */
void cistern__cold_prep(const struct cistern__cold *c, struct cistern__io *io, uint64_t slot,
			uint32_t count, void *buf, bool write);

/* ---- the index ---------------------------------------------------------- */

enum cistern__cold_state {
	CISTERN__COLD_FREE = 0,
	CISTERN__COLD_WRITING = 1,
	CISTERN__COLD_HELD = 2, /* "COLD" in the protocol page */
	CISTERN__COLD_EVICTING = 3,
};

/* One cold slot's entry: 64 bytes, in the segment. */
struct cistern__cold_ent {
	/* state (bits 0-7), owner (bits 8-31), generation (bits 32-63) */
	_Atomic uint64_t word;
	_Atomic uint64_t pins; /* one bit a reading handle */
	uint64_t id;
	uint32_t len;
	uint32_t crc; /* CRC-32C of the len bytes of payload */
	_Atomic uint32_t seen;
	/*
	 * The generation + 1 of the publish whose bytes a read found good
	 * against crc; 0: none yet (cistern__cold_check()).
	 */
	_Atomic uint32_t verified;
	uint8_t meta[24];
};
_Static_assert(sizeof(struct cistern__cold_ent) == 64, "a cold entry is 64 bytes");

static inline unsigned cistern__cold_state(uint64_t w)
{
	return (unsigned)(w & 0xff);
}
static inline uint32_t cistern__cold_owner(uint64_t w)
{
	return (uint32_t)((w >> 8) & 0xffffff);
}
static inline uint32_t cistern__cold_gen(uint64_t w)
{
	return (uint32_t)(w >> 32);
}
static inline uint64_t cistern__cold_word(unsigned state, uint32_t owner, uint32_t gen)
{
	return (uint64_t)state | (uint64_t)(owner & 0xffffff) << 8 | (uint64_t)gen << 32;
}

/*
 * Claim one entry for owner (1..2^24-1): FREE, or HELD with a seen sample
 * that no reader pins, becomes WRITING. false if it cannot be taken.
 */
bool cistern__cold_claim(struct cistern__cold_ent *e, uint32_t owner);
/* Which held entries a claim may take besides FREE ones. */
enum cistern__cold_take {
	CISTERN__COLD_TAKE_FREE, /* none: a FREE entry only */
	CISTERN__COLD_TAKE_SEEN, /* a seen sample no reader pins (cistern__cold_claim) */
	CISTERN__COLD_TAKE_ANY,  /* any sample no reader pins, seen or not (a lossy eviction) */
};
/* cistern__cold_claim() under the rule `take`. */
bool cistern__cold_claim_as(struct cistern__cold_ent *e, uint32_t owner,
			    enum cistern__cold_take take);
/*
 * Claim a run of up to max consecutive entries in file order from the
 * shared write cursor: the count claimed (0 if no entry of the whole file
 * can be taken), the first in *first. With evicted (max entries), evicted[i]
 * gets the seen count of the sample that slot first + i held (at least 1:
 * only seen samples are taken), or 0 if it was free.
 */
unsigned cistern__cold_claim_run(struct cistern__cold_ent *ents, uint64_t nslots,
				 _Atomic uint64_t *cursor, uint32_t owner, unsigned max,
				 uint64_t *first, uint32_t *evicted);
/*
 * Write n claimed slots from buf (n slots back to back, the sample of slot
 * slots[i] at buf + i * slot_bytes, lens[i] bytes of it, id ids[i]) and
 * publish them. Consecutive slots go out as one write. Every entry turns
 * HELD only after every write completed; on an error all go back to FREE
 * and the error is returned.
 */
int cistern__cold_spill(struct cistern__cold *c, struct cistern__cold_ent *ents,
			const uint64_t *slots, unsigned n, void *buf, const uint32_t *lens,
			const uint64_t *ids);
/*
 * The steps of a spill, for tests that kill a spiller at one of them: the
 * hook, when set, is called at each with the step and the member (the
 * count of members done so far). NULL in every build's normal use.
 */
enum cistern__spill_step {
	CISTERN__SPILL_CLAIMED,   /* hot samples held, cold run claimed, note live */
	CISTERN__SPILL_WRITING,   /* the run's write is in flight */
	CISTERN__SPILL_PUBLISHED, /* member i's cold entry was just published */
	CISTERN__SPILL_FREED,     /* member i's hot slot was just freed */
};
extern void (*cistern__spill_hook)(enum cistern__spill_step step, unsigned i);

/*
 * cistern__cold_spill() that gives each entry the seen count seen[i] of its
 * sample (NULL: 0), so that a sample keeps its reads when it moves, and
 * counts its writes in ctr (NULL: not counted; cistern__cold_wait()).
 */
int cistern__cold_spill_seen(struct cistern__cold *c, struct cistern__cold_ent *ents,
			     const uint64_t *slots, unsigned n, void *buf, const uint32_t *lens,
			     const uint64_t *ids, const uint32_t *seen,
			     struct cistern__cold_io *ctr);
/* Put a claimed entry back to FREE without publishing. */
void cistern__cold_abort(struct cistern__cold_ent *e);
/*
 * Pin a HELD entry for reading handle `bit` (0..63): true and the entry's
 * word in *w; false if it is not HELD or an evictor won.
 */
bool cistern__cold_pin(struct cistern__cold_ent *e, unsigned bit, uint64_t *w);
/*
 * Check the len bytes at data, read from the slot of entry e while it held
 * word w (pinned or taken, so the read is neither torn nor stale), against
 * the entry's CRC: 1 if good, 0 if not, 2 if good without a check because
 * a read of the same publish (w's generation) was checked good already. The
 * first good check of each publish marks the entry so. A write of the slot
 * clears the mark, and the mark names its generation, so each write is
 * checked again at its first read.
 */
int cistern__cold_check(struct cistern__cold_ent *e, uint64_t w, const void *data, size_t len);
/* Drop a pin, once the read of the slot completed. */
void cistern__cold_unpin(struct cistern__cold_ent *e, unsigned bit);
/*
 * Repair what a dead owner and a dead reading handle left in n entries:
 * WRITING(owner) to FREE, EVICTING(owner) back to HELD, and the bit of the
 * dead handle cleared (bit < 64; 64 for none). The count of entries changed.
 */
uint64_t cistern__cold_reclaim(struct cistern__cold_ent *ents, uint64_t n, uint32_t owner,
			       unsigned bit);

#endif
