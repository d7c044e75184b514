/* SPDX-License-Identifier: MIT */
/*
 * cistern.h - the public interface of libcistern.
 *
 * A cistern is a named POSIX shared-memory segment that holds a fixed number of
 * fixed-size slots and applies one sampling policy. Producer processes put samples
 * in, reader (learner) processes take them out, all without a broker and, with the
 * reserve/commit and acquire/release calls, without copying.
 *
 * Conventions, everywhere in this header:
 *  - A call returns 0 (or a non-negative count) on success and a negative errno
 *    value on failure; it never aborts and never prints. cistern_strerror() turns a
 *    result into a sentence.
 *  - Blocking calls take timeout_ms: 0 tries once (-EAGAIN if it would wait),
 *    a negative value waits forever, a positive value waits at most that many
 *    milliseconds (-ETIMEDOUT when it expires). Waiting sleeps in the kernel.
 *  - CISTERN_EOD (-ENODATA) is "end of data": reception is closed and the policy
 *    has nothing left to hand out. It is not an error and not a timeout.
 *  - A struct cistern handle belongs to one process and one thread at a time; open
 *    one handle per thread that moves samples. Handles are not inherited usefully
 *    across fork(): attach again in the child.
 */
#ifndef CISTERN_H
#define CISTERN_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CISTERN_VERSION_MAJOR 0
#define CISTERN_VERSION_MINOR 1
#define CISTERN_VERSION_PATCH 0

/** End of data: reception closed and nothing left to hand out. */
#define CISTERN_EOD (-ENODATA)

/** Longest segment name, in bytes (without the terminating NUL). */
#define CISTERN_NAME_MAX 64
/** Largest slot payload, in bytes (1 GiB). */
#define CISTERN_SLOT_SIZE_MAX (UINT64_C(1) << 30)
/** Largest number of slots. */
#define CISTERN_SLOT_COUNT_MAX (UINT64_C(1) << 28)
/** Largest total arena (slot_size rounded up times slot_count): 64 GiB. */
#define CISTERN_ARENA_MAX (UINT64_C(1) << 36)
/** Most processes (handles) attached at once. */
#define CISTERN_PROCS_MAX 1024

/** Default slot payload size when the config leaves it 0. */
#define CISTERN_DEFAULT_SLOT_SIZE 4096
/** Default number of slots when the config leaves it 0. */
#define CISTERN_DEFAULT_SLOT_COUNT 1024
/** Default size of the attachment table when the config leaves it 0. */
#define CISTERN_DEFAULT_MAX_PROCS 64

/** The six sampling policies (see docs/POLICIES.md for their exact semantics). */
enum cistern_policy {
	CISTERN_FIFO = 0,                 /**< first in, first out, each sample once */
	CISTERN_FIRO = 1,                 /**< first in, random out, pseudo_epochs reads each */
	CISTERN_RESERVOIR = 2,            /**< random reads; evicts a random seen sample */
	CISTERN_FIFO_EVICT_RESERVOIR = 3, /**< random reads; evicts the oldest (seen) sample */
	CISTERN_SIM_PAIRED_RESERVOIR = 4, /**< reads pairs (x_t, x_t+1) of one simulation */
	CISTERN_BATCH_RESERVOIR = 5,      /**< reads batches of batch_size distinct samples */
};
#define CISTERN_POLICY_COUNT 6

/** Config flags. */
enum {
	/** FIFOEvictReservoir: evict the oldest even if unseen (counted as evicted unseen). */
	CISTERN_LOSSY = 1u << 0,
};

/**
 * Creation parameters. A zero-initialised struct gives a FIFO of
 * CISTERN_DEFAULT_SLOT_COUNT slots of CISTERN_DEFAULT_SLOT_SIZE bytes, mode 0600.
 */
struct cistern_config {
	uint64_t slot_size;            /**< largest payload in bytes; 0 = default */
	uint64_t slot_count;           /**< number of slots (capacity); 0 = default */
	enum cistern_policy policy;    /**< CISTERN_FIFO by default */
	uint32_t mode;                 /**< permission bits of the shm object; 0 = 0600 */
	uint64_t watermark;            /**< FIRO and reservoirs: population before reads start */
	uint32_t pseudo_epochs;        /**< FIRO: reads of each sample; 0 = 1 */
	uint32_t sweep_size;           /**< SimPairedReservoir: sim_id < sweep_size */
	uint32_t nb_time_steps;        /**< SimPairedReservoir: time_step < nb_time_steps */
	uint32_t batch_size;           /**< BatchReservoir: samples per batch */
	uint64_t seed;                 /**< random seed; 0 = seeded from the clock */
	uint32_t max_procs;            /**< attachment table size; 0 = default */
	uint32_t expected_producers;   /**< reception closes after this many cistern_producer_done() (0 = only by cistern_close_reception) */
	uint32_t flags;                /**< CISTERN_LOSSY, ... */
	uint32_t reserved_;            /**< must be 0 */
};

/** Metadata carried by every sample. */
struct cistern_meta {
	uint64_t sample_id; /**< assigned by the segment at commit: unique, increasing */
	uint32_t sim_id;    /**< the producer's simulation id */
	uint32_t time_step; /**< the producer's time step */
};

/**
 * A writable slot handed out by cistern_reserve(). Write up to `capacity` bytes at
 * `data`, then cistern_commit() or cistern_abort(). The fields after `capacity`
 * belong to the library.
 */
struct cistern_slot {
	void *data;          /**< where to write the payload */
	size_t capacity;     /**< the segment's slot_size */
	uint64_t pos_;       /**< internal: position claimed */
	uint32_t index_;     /**< internal: slot index */
	uint32_t live_;      /**< internal: nonzero while reserved */
};

/**
 * A sample handed out by cistern_acquire(): read `len` bytes at `data` in place
 * until cistern_release(). The fields after `meta` belong to the library.
 */
struct cistern_sample {
	const void *data;           /**< the payload, valid until release */
	size_t len;                 /**< payload length */
	struct cistern_meta meta;   /**< its metadata */
	uint64_t pos_;              /**< internal */
	uint32_t index_;            /**< internal */
	uint32_t live_;             /**< internal: nonzero while held */
};

/** An opaque handle on an attached segment. */
struct cistern;

/**
 * Check a segment name: 1 to CISTERN_NAME_MAX characters from [A-Za-z0-9._-],
 * starting with a letter or digit.
 * @return 0 if valid, -EINVAL if not, -ENAMETOOLONG if too long.
 */
int cistern_name_valid(const char *name);

/**
 * Create a new segment and attach to it.
 * @param name segment name (see cistern_name_valid())
 * @param cfg  parameters, or NULL for all defaults
 * @param out  receives the handle
 * @return 0; -EEXIST if the name is taken; -EINVAL for bad parameters;
 *         -ENOTSUP for a policy this build does not implement; -ENOMEM, -ENOSPC, ...
 */
int cistern_create(const char *name, const struct cistern_config *cfg, struct cistern **out);

/**
 * Attach to an existing segment. Recovers what dead processes left behind.
 * @return 0; -ENOENT if no such segment; -EPROTO if the object is not a cistern
 *         segment or is damaged; -EPROTONOSUPPORT if it was made by a build with
 *         another ABI or layout; -EACCES without permission; -EUSERS if the
 *         attachment table is full; -EAGAIN if the segment is still being created.
 */
int cistern_attach(const char *name, struct cistern **out);

/**
 * Detach: give back what this handle still holds (reservations vanish, acquired
 * FIFO/FIRO samples are handed out again), unmap and free the handle.
 * @return 0, or -EINVAL for a NULL handle.
 */
int cistern_detach(struct cistern *c);

/**
 * Remove a segment's name. Attached processes keep working; the memory is freed
 * when the last one detaches.
 * @return 0; -ENOENT; -EINVAL for a bad name; -EACCES.
 */
int cistern_unlink(const char *name);

/**
 * Reserve a writable slot (zero-copy put). Waits for room as cistern_put() does.
 * @return 0; -EAGAIN/-ETIMEDOUT; -EPIPE once reception is closed; -EPROTO if
 *         the segment's ring is damaged.
 */
int cistern_reserve(struct cistern *c, struct cistern_slot *slot, int timeout_ms);

/**
 * Publish a reserved slot holding `len` bytes. meta->sim_id and time_step are
 * taken; the assigned sample id is written back to meta->sample_id. meta may be NULL.
 * @return 0; -EMSGSIZE if len > slot_size (the slot stays reserved); -EINVAL if
 *         the slot is not reserved by this handle; -ERANGE for a sim_id or
 *         time_step outside the SimPairedReservoir bounds.
 */
int cistern_commit(struct cistern *c, struct cistern_slot *slot, size_t len, struct cistern_meta *meta);

/**
 * Give a reserved slot back unpublished: that sample never existed.
 * @return 0 or -EINVAL.
 */
int cistern_abort(struct cistern *c, struct cistern_slot *slot);

/**
 * Copy `len` bytes in as one sample (reserve + copy + commit).
 * @return 0; -EMSGSIZE; -EAGAIN/-ETIMEDOUT; -EPIPE once reception is closed.
 */
int cistern_put(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta, int timeout_ms);

/**
 * Close reception: puts fail with -EPIPE from now on and readers drain, then get
 * CISTERN_EOD. Idempotent.
 */
int cistern_close_reception(struct cistern *c);

/**
 * Declare one of cfg.expected_producers done; the last one closes reception.
 * @return the number of producers still expected, or -EINVAL if none is expected.
 */
int cistern_producer_done(struct cistern *c);

/**
 * Acquire a sample to read in place (zero-copy get). Under FIFO and FIRO the
 * sample belongs to this handle until release; under the reservoirs it is pinned
 * (never evicted nor overwritten) until release.
 * @return 0; CISTERN_EOD; -EAGAIN/-ETIMEDOUT; -EPROTO if the segment is damaged
 *         (a ring index it cannot follow, a sample longer than slot_size).
 */
int cistern_acquire(struct cistern *c, struct cistern_sample *s, int timeout_ms);

/**
 * Release an acquired sample.
 * @return 0, or -EINVAL if `s` is not held by this handle (never acquired, or
 *         already released).
 */
int cistern_release(struct cistern *c, struct cistern_sample *s);

/**
 * Copy one sample out (acquire + copy + release).
 * @return the payload length; CISTERN_EOD; -EAGAIN/-ETIMEDOUT; -EMSGSIZE if the
 *         sample is larger than `cap` (the sample is not lost: it is handed out again).
 */
ssize_t cistern_get(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta, int timeout_ms);

/** The segment's parameters as created (defaults filled in). */
int cistern_config_get(const struct cistern *c, struct cistern_config *cfg);

/** Statistics of a segment (see docs/POLICIES.md). */
#define CISTERN_SEEN_BUCKETS 8
struct cistern_stats {
	uint64_t population;       /**< samples held now */
	uint64_t puts;             /**< samples committed */
	uint64_t gets;             /**< samples handed to readers */
	uint64_t evictions;        /**< samples evicted to make room */
	uint64_t evicted_unseen;   /**< evicted before any reader saw them */
	uint64_t redeliveries;     /**< samples handed out again after a reader died */
	uint64_t reclaimed;        /**< reservations of dead producers dropped */
	uint64_t producer_waits;   /**< times a producer had to wait for room */
	uint64_t producer_wait_ns; /**< total time producers waited */
	uint64_t reader_waits;     /**< times a reader had to wait for data */
	uint64_t reader_wait_ns;   /**< total time readers waited */
	/** seen counts of samples that left the buffer: 0,1,2,3,4,5-8,9-16,>16 */
	uint64_t seen_hist[CISTERN_SEEN_BUCKETS];
	uint32_t procs_attached;   /**< live attachments */
	uint32_t reception_closed; /**< nonzero once reception is closed */
};

/** Read the statistics, without disturbing the segment. */
int cistern_stats_get(const struct cistern *c, struct cistern_stats *st);

/** A sentence for a result code (0, a negative errno, or CISTERN_EOD). Never NULL. */
const char *cistern_strerror(int err);

/** The name of a policy ("fifo", "firo", ...), or NULL if out of range. */
const char *cistern_policy_name(enum cistern_policy p);

/** Parse a policy name as cistern_policy_name() prints it. @return 0 or -EINVAL. */
int cistern_policy_parse(const char *s, enum cistern_policy *out);

#ifdef __cplusplus
}
#endif

#endif /* CISTERN_H */
