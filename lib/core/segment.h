/* SPDX-License-Identifier: MIT */
/*
 * segment.h - the layout of a cistern segment in shared memory (internal).
 *
 * A segment is one POSIX shm object "/cistern.<name>", laid out as:
 *
 *   [ struct cistern_hdr          ]  immutable part, then one cache line per
 *                                    hot shared word (tail, head, wait words)
 *   [ struct cistern_proc x procs ]  attachment table, two cache lines an entry
 *   FIFO:
 *   [ struct cistern_slotmeta x n ]  slot metadata, one cache line a slot
 *   [ policy index                ]  (none)
 *   [ arena: n x slot_stride      ]  payloads, each slot cache-line aligned
 *   every other policy (random reads):
 *   [ policy index                ]  SimPairedReservoir: (sim, step) -> slot
 *   [ n x (slotmeta, payload)     ]  each slot's metadata line, then its
 *                                    payload; slot_stride = meta_stride
 *
 * cistern__compute_layout() says why the two differ. The slots start on a page.
 * Every offset and size is stored in the header and re-derived and checked by
 * cistern__validate_header() before anything past the header is touched, so a
 * damaged or foreign object is refused instead of faulting. A handle then keeps
 * what it validated (struct cistern_fixed) and never reads the immutable part
 * again: a process with write access could rewrite it after the check.
 *
 * Liveness: attachment entry i is owned by whoever holds an OFD write lock on
 * byte CISTERN_LOCK_BASE + i of the shm object. The kernel drops the lock when
 * the last reference to the owner's open file description goes, i.e. when it
 * dies (nothing maps that description, and fork() children close their copy:
 * fork.c), so a free lock on an entry marked active means its owner is gone
 * (pid reuse cannot fool this).
 */
#ifndef CISTERN_SEGMENT_H
#define CISTERN_SEGMENT_H

#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>

#include "cistern.h"

#define CISTERN_CACHELINE 64
#define CISTERN_MAGIC "CISTERN" /* 8 bytes with the NUL */
#define CISTERN_ABI_VERSION 1u
#define CISTERN_SHM_PREFIX "/cistern."
/* Where shm_open() keeps its objects (glibc): listing and lstat look there. */
#define CISTERN_SHM_DIR "/dev/shm"
/* Byte 0 of the object is the gc lock; entry i's liveness lock is byte 1 + i. */
#define CISTERN_LOCK_BASE 1
/*
 * Entry i's intent lock is byte CISTERN_INTENT_BASE + i (past every liveness
 * byte; locks may lie beyond the end of the object). Whoever reclaims entry i
 * takes it before the entry's own lock and keeps it to the end, so the moment
 * between taking the entry lock and marking the entry RECLAIMING, when it
 * looks like a live owner, is still visible as a reclaim under way.
 */
#define CISTERN_INTENT_BASE (CISTERN_LOCK_BASE + CISTERN_PROCS_MAX)

#define CL_ALIGN _Alignas(CISTERN_CACHELINE)

/* Roles an attachment has taken, ORed into cistern_proc.role. */
enum {
	CISTERN_ROLE_PRODUCER = 1u << 0,
	CISTERN_ROLE_READER = 1u << 1,
	CISTERN_ROLE_INSPECTOR = 1u << 2,
};

/*
 * cistern_proc.producing, on a segment with expected_producers > 0: whether
 * the entry's owner is one of the producers counted towards closing
 * reception. An owner becomes COUNTED when it attaches with
 * CISTERN_ATTACH_PRODUCER (liveness.c: set before the entry reads ACTIVE) or
 * else when it takes the producer role, and DONE at its
 * cistern_producer_done(); a reclaim that finds a dead owner
 * COUNTED counts a producer that died before done (hdr->producers_died).
 */
enum {
	CISTERN_COUNTED_NONE = 0,
	CISTERN_COUNTED = 1,
	CISTERN_COUNTED_DONE = 2,
};

/* cistern_proc.state */
enum {
	CISTERN_PROC_FREE = 0,
	CISTERN_PROC_ACTIVE = 1,
	/* Its owner is gone (or detaching) and a reclaim of what it held is under way. */
	CISTERN_PROC_RECLAIMING = 2,
};

/*
 * Per-attachment entry. Counters are written only by the owner (relaxed
 * load + store, no locked instruction) and read by anyone; when the owner is
 * gone they are folded into cistern_hdr.retired by whoever reclaims the entry.
 */
struct cistern_counters {
	_Atomic uint64_t puts;
	_Atomic uint64_t gets;
	_Atomic uint64_t evictions;
	_Atomic uint64_t evicted_unseen;
	_Atomic uint64_t redeliveries;
	_Atomic uint64_t reclaimed;
	_Atomic uint64_t producer_waits;
	_Atomic uint64_t producer_wait_ns;
	_Atomic uint64_t reader_waits;
	_Atomic uint64_t reader_wait_ns;
	_Atomic uint64_t seen_hist[CISTERN_SEEN_BUCKETS];
};

struct cistern_proc {
	CL_ALIGN _Atomic uint32_t state; /* CISTERN_PROC_* */
	_Atomic uint32_t role;           /* CISTERN_ROLE_* bits */
	uint32_t pid;
	uint32_t uid;
	uint64_t attached_ns;          /* CLOCK_REALTIME at attach */
	uint32_t reader_bit;           /* reservoir pin bit (0..63), or UINT32_MAX */
	_Atomic uint32_t waiting;      /* 0, or 1 + enum cistern_wait_kind while registered */
	char comm[16];                 /* process name, for the CLI */
	_Atomic uint32_t auto_busy;    /* roles.c: role bit while an automatic holder claims */
	_Atomic uint32_t auto_entered; /* roles.c: role bits this entry counts in auto_* */
	_Atomic uint32_t producing;    /* api.c: CISTERN_COUNTED_*, expected producers only */
	CL_ALIGN struct cistern_counters ctr;
	/*
	 * wait.c: 1 + the CPU its last wait began on, 0 = none. Read by the
	 * other side at its waits: kept off the lines this process writes on
	 * every claim (auto_busy) and every sample (the counters).
	 */
	CL_ALIGN _Atomic uint32_t wait_cpu;
};

/*
 * Slot metadata. `word` is the slot's state; its encoding belongs to the
 * policy (see fifo.c and reservoir.c). Payload length and sample metadata are
 * written by the owner of a reservation and published by the release store
 * to `word` that commits it.
 */
struct cistern_slotmeta {
	CL_ALIGN _Atomic uint64_t word;
	_Atomic uint64_t pins; /* reservoirs: mask of pinning readers */
	uint64_t sample_id;
	uint32_t sim_id;
	uint32_t time_step;
	uint64_t len;
	_Atomic uint32_t seen; /* times handed to a reader */
	uint32_t flags;        /* SimPairedReservoir: CISTERN_META_END_OF_EPISODE as put */
};

/* Entries of the header's vacated-slot hints (a power of two). */
#define CISTERN_VACANCIES 64
/* Entries of the header's log of newly evictable samples (a power of two). */
#define CISTERN_SEEN_LOG 1024

struct cistern_hdr {
	/* Immutable after creation: written before `magic` is published. */
	CL_ALIGN char magic[8];
	uint32_t abi_version;
	uint32_t layout_sig;
	uint64_t total_size;
	uint64_t slot_size;
	uint64_t slot_count;
	uint64_t slot_stride; /* payload i is at arena_off + i * slot_stride */
	uint64_t meta_stride; /* metadata i is at meta_off + i * meta_stride */
	uint64_t procs_off;
	uint64_t procs_count;
	uint64_t meta_off;
	uint64_t index_off;
	uint64_t index_count; /* entries of 8 bytes at index_off */
	uint64_t arena_off;
	uint32_t policy;
	uint32_t flags;
	uint64_t watermark;
	uint32_t pseudo_epochs;
	uint32_t sweep_size;
	uint32_t nb_time_steps;
	uint32_t batch_size;
	uint64_t seed;
	uint32_t expected_producers;
	uint32_t mode;
	double reads_per_put; /* rate limiter, 0 = off */
	double rate_slack;
	double alpha; /* prioritized: the exponent of the priorities; 0 for the others */
	double beta;  /* prioritized: beta at create (the current one is in its index) */
	double epsilon;
	uint64_t created_ns; /* CLOCK_REALTIME */
	uint32_t creator_pid;
	uint32_t creator_uid;
	uint32_t max_times_sampled; /* reservoir kinds: reads before a sample leaves, 0 = off */
	char name[CISTERN_NAME_MAX + 1];
	/*
	 * FIFO sample id = ring position + id_base. 0 for a new segment; a
	 * restored one starts above the ids it restored (see lib/admin/restore.c).
	 */
	uint64_t id_base;
	/*
	 * What every sample holds (schema.c): the canonical text of the schema,
	 * NUL-terminated; "" for none. Written at creation like everything above.
	 */
	char schema[CISTERN_SCHEMA_MAX];
	/* The cold tier (lib/tier/tiered.h): its slots (0: none), the file's nonce and directory. */
	uint64_t cold_slots;
	uint64_t cold_nonce;
	char cold_dir[CISTERN_COLD_DIR_MAX + 1];
	/*
	 * Zero, except in a segment cistern_restore() is building under a
	 * temporary name: then cistern__restore_mark() of that temporary name,
	 * written before anything else. Only an object whose mark is the one of
	 * its own file name is an unfinished restore (gc removes it once the
	 * restorer is gone): after the rename, and in a copy of the object under
	 * any other name, the mark no longer matches and it is an ordinary
	 * segment.
	 */
	uint64_t restore_mark;

	/* Producer side: next ring position to claim (FIFO, FIRO). */
	CL_ALIGN _Atomic uint64_t tail;
	/* Reader side: next ring position to hand out (FIFO). */
	CL_ALIGN _Atomic uint64_t head;

	/*
	 * Readers sleep on data_futex; producers bump it and wake only when
	 * readers_waiting is nonzero. Same for producers on space_futex.
	 */
	CL_ALIGN _Atomic uint32_t data_futex;
	_Atomic uint32_t readers_waiting;
	CL_ALIGN _Atomic uint32_t space_futex;
	_Atomic uint32_t producers_waiting;

	/* Rarely written state: read on slow paths, never on the FIFO hot path. */
	CL_ALIGN _Atomic uint32_t closed;   /* reception closed */
	_Atomic uint32_t producers_done;    /* cistern_producer_done() calls */
	_Atomic uint32_t producers_died;    /* counted producers that died before done */
	_Atomic uint64_t redeliver_pending; /* FIFO: slots waiting to be handed out again */
	_Atomic uint64_t next_sample_id;    /* policies that do not derive ids from positions */
	_Atomic uint64_t population;        /* reservoirs, FIRO: samples held (HELD or ACQUIRED) */
	_Atomic uint64_t filled;            /* reservoirs, FIRO: slots not EMPTY */
	_Atomic uint64_t reader_bits;       /* reservoirs: pin bits taken by readers */
	_Atomic uint64_t unpaired;          /* SimPaired: left without a partner at the end */
	/*
	 * SimPaired: the shape (length << 32 | step) of the last window read
	 * that found no complete window while reception was open; 0 = none.
	 * Producers stuck on a full buffer judge orphans by it (windows.c).
	 */
	_Atomic uint64_t window_wanted;
	/* CISTERN_SINGLE_*: owner (attachment index + 1) holding the role, 0 = none. */
	_Atomic uint32_t sole_producer;
	_Atomic uint32_t sole_reader;
	/*
	 * Reservoirs, FIRO: set once a dead attachment was reclaimed, after
	 * which `filled` may count a slot it emptied (reservoir.h).
	 */
	_Atomic uint32_t counts_unsure;
	/*
	 * Without CISTERN_SINGLE_PRODUCER (FIFO) or CISTERN_SINGLE_READER (FIFO,
	 * the reservoir kinds): the role's automatic holder and the count of handles acting in it alongside others
	 * (roles.c): owner[15:0] | revoking[16] | shared count[63:32].
	 */
	_Atomic uint64_t auto_producer;
	_Atomic uint64_t auto_reader;
	/* Rate limiter: reads and puts since creation (kept only when it is on). */
	CL_ALIGN _Atomic uint64_t rl_puts;
	CL_ALIGN _Atomic uint64_t rl_gets;
	/*
	 * Rate limiter: bit i of rl_stuck[0] set while attachment i waits as a
	 * producer for a read (no slot it may take), of rl_stuck[1] while it
	 * waits as a reader for a put (too few samples to draw); the limiter
	 * holds the other side back while none is set (rate_limit.c). Cleared
	 * by the owner, by the reclaim of its entry, and [0] by every read.
	 */
	CL_ALIGN _Atomic uint64_t rl_stuck[2][CISTERN_PROCS_MAX / 64];
	/*
	 * Reservoirs, FIRO: slots just emptied by a read or an abort, a hint
	 * for the next fill (reservoir.c). Entry i % CISTERN_VACANCIES holds
	 * slot i + 1, 0 = none; a fill re-checks the slot word and claims it
	 * by CAS, so a stale or lost hint costs a pick, never a wrong claim.
	 */
	CL_ALIGN _Atomic uint32_t vacated[CISTERN_VACANCIES];
	/*
	 * Reservoirs: the log of slots whose sample just became evictable
	 * (seen went from 0 to 1) or was just evicted (reservoir.c). Entry
	 * k % CISTERN_SEEN_LOG holds ((k + 1) mod 2^32) << 32 | slot, with bit
	 * 31 set for an eviction, once written; each producer merges the
	 * entries since its last look into its evictable snapshot, so that a
	 * snapshot stays exact without a rescan of every slot.
	 */
	CL_ALIGN _Atomic uint64_t seen_log_next;
	CL_ALIGN _Atomic uint64_t seen_log[CISTERN_SEEN_LOG];

	/* Counters of attachments that are gone. */
	CL_ALIGN struct cistern_counters retired;
};

/*
 * The immutable part of the header as the handle knows it: taken from the
 * private copy that cistern__validate_header() accepted (attach,
 * open_readonly) or from the config that create wrote into the header, and
 * from then on the only place the library reads it. The header itself stays
 * writable by every process that may write the object, which could make any
 * later read of it say something else (docs/protocol/trust.md).
 * id_base is kept in the handle apart (struct cistern), beside the fields
 * the FIFO's one-step put reads.
 */
struct cistern_fixed {
	uint64_t total_size;
	uint64_t slot_size;
	uint64_t slot_count;
	uint64_t slot_stride;
	uint64_t meta_stride;
	uint64_t procs_off;
	uint64_t procs_count;
	uint64_t meta_off;
	uint64_t index_off;
	uint64_t index_count;
	uint64_t arena_off;
	uint32_t policy;
	uint32_t flags;
	uint64_t watermark;
	/* Beside watermark, which every open read loads: reads test it on the same line. */
	uint32_t max_times_sampled;
	uint32_t pseudo_epochs;
	uint32_t sweep_size;
	uint32_t nb_time_steps;
	uint32_t batch_size;
	uint64_t seed;
	uint32_t expected_producers;
	uint32_t mode;
	double reads_per_put;
	double rate_slack;
	double alpha;
	double beta;
	double epsilon;
	uint64_t created_ns;
	uint32_t creator_pid;
	uint32_t creator_uid;
	char name[CISTERN_NAME_MAX + 1];
	char schema[CISTERN_SCHEMA_MAX];
	uint64_t cold_slots;
	uint64_t cold_nonce;
	uint64_t cold_off; /* the tier's area: the layout's total size, before the tier */
	char cold_dir[CISTERN_COLD_DIR_MAX + 1];
};

/* Copy the immutable fields of a header (a validated private copy) into *f. */
void cistern__fixed_of(const struct cistern_hdr *h, struct cistern_fixed *f);

/* Encode the compile-time layout so that another build refuses to attach. */
uint32_t cistern__layout_signature(void);

/* Layout derived from the parameters; returns -EINVAL on overflow or limits. */
struct cistern_layout {
	uint64_t slot_stride, meta_stride, procs_off, meta_off, index_off, arena_off, total_size;
};
int cistern__compute_layout(uint32_t policy, uint64_t slot_size, uint64_t slot_count,
			    uint64_t procs, uint64_t index_count, struct cistern_layout *out);

/*
 * Check that `len` bytes at `hdr` (a copy, or a mapping of at least
 * sizeof(struct cistern_hdr)) describe a segment of this build whose layout fits
 * in file_size bytes. Returns 0, -EPROTO (not a cistern segment or damaged),
 * -EPROTONOSUPPORT (another ABI or layout) or -EAGAIN (still being created).
 */
int cistern__validate_header(const void *hdr, size_t len, uint64_t file_size);

/* Build the shm object name "/cistern.<name>" into buf (size >= 80). */
int cistern__shm_name(const char *name, char *buf, size_t size);

#endif
