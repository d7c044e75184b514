/* SPDX-License-Identifier: MIT */
/*
 * cistern.h - the public interface of libcistern.
 *
 * A cistern is a named POSIX shared-memory segment that holds a fixed number of
 * fixed-size slots and applies one sampling policy. Producer processes put samples
 * in and reader (learner) processes take them out. No broker runs between them,
 * and the reserve/commit and acquire/release calls copy nothing.
 *
 * Conventions, everywhere in this header:
 *  - A call returns 0 (or a non-negative count) on success and a negative errno
 *    value on failure. It never aborts and never prints. cistern_strerror() turns
 *    a result into a sentence.
 *  - A call that takes a handle returns -EINVAL for a NULL handle and for a NULL
 *    pointer that it needs. The calls that move samples or change the segment
 *    (reserve, commit, abort, put, acquire, release, unacquire, get and their
 *    pair and batch forms, cistern_close_reception() and cistern_producer_done())
 *    return -EBADF on a handle from cistern_open_readonly() and on a handle that a
 *    fork() child inherited.
 *  - Blocking calls take timeout_ms. With 0 the call tries once and returns
 *    -EAGAIN if it would have to wait. With a negative value it waits as long as
 *    it takes. With a positive value it waits at most that many milliseconds and
 *    then returns -ETIMEDOUT. A waiting call spins for some microseconds first
 *    and then sleeps until another process wakes it (docs/DEVELOPING.md says
 *    how).
 *  - CISTERN_EOD (-ENODATA) means end of data: reception is closed and the policy
 *    has nothing left to hand out. It is neither an error nor a timeout.
 *  - -EPROTO means a damaged segment. From an attach or open it means that the
 *    object is not a whole cistern segment of this layout. From any later call it
 *    means that the call found a value in the shared memory that no run of the
 *    library leaves there, so another process that may write the object wrote it
 *    (the object's mode decides who may). The call does not use the value, the
 *    handle stays usable, and calls that do not meet the damage go on working.
 *    Such a process can corrupt or withhold samples. It cannot make the library
 *    crash or reach outside its mapping, unless it shrinks the object: then every
 *    attached process that touches the lost pages gets SIGBUS (the library
 *    installs no signal handlers). Read-only handles are safe from that: see
 *    cistern_open_readonly(). docs/protocol/trust.md describes the trust model.
 *  - A struct cistern handle belongs to one process and one thread at a time. Open
 *    one handle per thread that moves samples.
 *  - Crashes: a process that dies while attached, even by SIGKILL, loses no
 *    committed sample and wedges nobody. The next process to attach, any producer
 *    or reader that waits (within 200 ms), or cistern_gc() finds it dead, drops
 *    its unfinished reservations, hands the FIFO and FIRO samples it held out
 *    again, drops its reservoir pins, and frees any single-producer or
 *    single-reader role it held.
 *  - fork(): the child gets a copy of every handle of its parent and cannot use
 *    it. Every call on such a copy returns -EBADF, except cistern_detach(), which
 *    frees the child's copy and leaves the parent's attachment, and what it holds,
 *    alone. The copy does not keep the parent's attachment alive either: a parent
 *    killed while its forked children live (multiprocessing or torch DataLoader
 *    workers) is found dead at once, as without children. A child attaches by
 *    itself like any process. fork() waits up to a second while the child lets go
 *    of its parent's segments; in a process without handles it waits for nothing.
 *    A child made without fork()'s handlers (the raw clone() or vfork() system
 *    calls) keeps its parent's attachments alive until it exits or calls exec.
 *    Do not call fork() from a signal handler that may interrupt
 *    cistern_create(), cistern_attach(), cistern_open_readonly(),
 *    cistern_detach(), cistern_remove() or cistern_gc(): fork() takes a lock that
 *    these calls hold for a moment.
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

/* The library is built with hidden visibility; only what is marked here is exported. */
#if defined(__GNUC__) || defined(__clang__)
#define CISTERN_API __attribute__((visibility("default")))
#else
#define CISTERN_API
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

/** Largest sweep_size * nb_time_steps of a SimPairedReservoir. */
#define CISTERN_PAIR_INDEX_MAX (UINT64_C(1) << 28)
/** Most reader handles pinning samples of one reservoir segment at once. */
#define CISTERN_PIN_READERS_MAX 64

/** Config flags. */
enum {
	/** FIFOEvictReservoir: evict the oldest even if unseen (counted as evicted unseen). */
	CISTERN_LOSSY = 1u << 0,
	/**
	 * FIFO: one producer at a time. The first handle to reserve or put takes
	 * the producer role and keeps it until it detaches or dies. Meanwhile a
	 * reserve or put on any other handle returns -EBUSY. When the holder dies,
	 * the role is free once its attachment is reclaimed; a handle that finds
	 * another process reclaiming it waits up to a second for it. The flag
	 * guarantees a single producer; it does not make puts faster, because a
	 * FIFO without the flag gives its only producer the same fast puts for as
	 * long as that producer stays alone (docs/POLICIES.md).
	 */
	CISTERN_SINGLE_PRODUCER = 1u << 1,
	/**
	 * FIFO and the reservoir kinds (not FIRO): one reader at a time, as
	 * CISTERN_SINGLE_PRODUCER is for producers. Meanwhile a get, acquire or
	 * batch on any other handle returns -EBUSY. As with the producer flag, a
	 * segment without this one gives its only reader the same fast reads until
	 * a second reader comes (docs/POLICIES.md).
	 */
	CISTERN_SINGLE_READER = 1u << 2,
	/**
	 * With expected_producers > 0: a counted producer that dies before its
	 * cistern_producer_done() counts as done. Reception then closes without
	 * it (once done + died reach expected_producers), and readers reach end of
	 * data. Without the flag such a death is counted too
	 * (cistern_stats.producers_died), but reception waits for a replacement:
	 * a producer that attaches in its place and calls cistern_producer_done()
	 * fills the count, as online-training frameworks that relaunch failed
	 * simulations expect. With the flag, do not relaunch: a replacement's done
	 * would count on top.
	 *
	 * A handle becomes a counted producer on a segment with
	 * expected_producers > 0 when it attaches with CISTERN_ATTACH_PRODUCER,
	 * or else at its first reserve or put: a process that may die before its
	 * first put (a simulation crashing at start-up) attaches with the flag,
	 * so that its death is counted too. It dies "before done" if its
	 * process ends without cistern_producer_done() and without
	 * cistern_detach(). A clean detach counts as neither done nor died (the
	 * program may attach again). The death is counted when the dead
	 * attachment is reclaimed: by the next attach, by any waiting producer or
	 * reader within 200 ms, or by cistern_gc().
	 */
	CISTERN_DEAD_PRODUCER_DONE = 1u << 3,
};

/**
 * Creation parameters. A zero-initialised struct gives a FIFO of
 * CISTERN_DEFAULT_SLOT_COUNT slots of CISTERN_DEFAULT_SLOT_SIZE bytes, mode 0600.
 */
struct cistern_config {
	uint64_t
		slot_size; /**< largest payload in bytes; 0 = default (with a schema: its sample size) */
	uint64_t slot_count;        /**< number of slots (capacity); 0 = default */
	enum cistern_policy policy; /**< CISTERN_FIFO by default */
	uint32_t mode;              /**< permission bits of the shm object; 0 = 0600 */
	uint64_t watermark;         /**< FIRO and reservoirs: population before reads start */
	uint32_t pseudo_epochs;     /**< FIRO: reads of each sample; 0 = 1 */
	uint32_t sweep_size;        /**< SimPairedReservoir: sim_id < sweep_size */
	uint32_t nb_time_steps;     /**< SimPairedReservoir: time_step < nb_time_steps */
	uint32_t batch_size;        /**< BatchReservoir: samples per batch */
	uint64_t seed;              /**< random seed; 0 = seeded from the clock */
	uint32_t max_procs;         /**< attachment table size; 0 = default */
	uint32_t
		expected_producers; /**< reception closes after this many cistern_producer_done() (0 = only by cistern_close_reception); see CISTERN_DEAD_PRODUCER_DONE */
	uint32_t
		flags; /**< CISTERN_LOSSY, CISTERN_SINGLE_PRODUCER, CISTERN_SINGLE_READER, CISTERN_DEAD_PRODUCER_DONE */
	uint32_t reserved_; /**< must be 0 */
	/**
	 * Reservoir kinds: optional rate limiter; 0 = off. When reads_per_put > 0,
	 * with puts counted after the first `watermark` ones and reads since
	 * creation, a read of n samples (1, a pair's 2, a batch's n) waits while
	 * reads + n > reads_per_put * puts + slack, and a producer waits while
	 * reads_per_put * (puts + 1) > reads + slack. A read takes its n reads
	 * of budget all at once, or waits holding none. Neither waits for the
	 * limiter while the other side waits for it for something else: a put
	 * that finds no sample it may evict lets reads through, and a read that
	 * finds too few samples lets puts through, so the two never wait for
	 * each other, whoever dies. 0 or from 1 to 1e9; below 1 only for a
	 * CISTERN_LOSSY FIFOEvictReservoir, since the other kinds put into a
	 * full buffer only in place of a sample that was read (create refuses
	 * it, naming reads_per_put). A sample handed back unread, or held by a
	 * reader that died, gives its read back to the limiter.
	 */
	double reads_per_put;
	/**
	 * The limiter's allowed drift, in reads. 0 = automatic (what
	 * cistern_config_get() then reports): producers use reads_per_put, and
	 * a read of n samples the larger of reads_per_put and n, so that every
	 * read starts once the reads before it are paid for. Set by hand, it
	 * is kept on both sides: create refuses one under which the policy's
	 * own read could never start (below (reads_per_put + 1) / 2 for a
	 * read, + 2 for a pair, + batch_size for a BatchReservoir, give or
	 * take the rounding of whole reads), and a larger batch that could
	 * never start is refused at once with -EDEADLK (a rate_slack of
	 * (reads_per_put + n) / 2 always admits a batch of n).
	 */
	double rate_slack;
	/**
	 * What every sample holds, or NULL (or "") for none: named fields, each
	 * of a dtype and a shape, in the text form of docs/SCHEMA.md, for
	 * example "obs:float32[84,84];action:int64[];reward:float32[]". The
	 * library keeps it in the segment (in a canonical form: no spaces, every
	 * shape in brackets) for readers and tools; it never checks payloads
	 * against it. With a schema, slot_size 0 means the schema's sample size.
	 * cistern_config_problem() says what is wrong with a bad one.
	 * cistern_config_get() points it at the handle's copy (valid until
	 * cistern_detach()), or sets it NULL for a segment without a schema.
	 */
	const char *schema;
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
	void *data;      /**< where to write the payload */
	size_t capacity; /**< the segment's slot_size */
	uint64_t pos_;   /**< internal: position claimed */
	uint32_t index_; /**< internal: slot index */
	uint32_t live_;  /**< internal: nonzero while reserved */
};

/**
 * A sample handed out by cistern_acquire(): read `len` bytes at `data` in place
 * until cistern_release(). The fields after `meta` belong to the library.
 */
struct cistern_sample {
	const void *data;         /**< the payload, valid until release */
	size_t len;               /**< payload length */
	struct cistern_meta meta; /**< its metadata */
	uint64_t pos_;            /**< internal */
	uint32_t index_;          /**< internal */
	uint32_t live_;           /**< internal: nonzero while held */
};

/** An opaque handle on an attached segment. */
struct cistern;

/**
 * Check a segment name: 1 to CISTERN_NAME_MAX characters from [A-Za-z0-9._-],
 * the first a letter or a digit. Never blocks.
 * @return 0 if the name is valid; -EINVAL if it is NULL, empty or holds a
 *         character outside that set; -ENAMETOOLONG if it is longer than
 *         CISTERN_NAME_MAX.
 */
CISTERN_API int cistern_name_valid(const char *name);

/**
 * Create a new segment and attach to it. The segment is complete before any
 * other process can attach: until then cistern_attach() waits for it or returns
 * -EAGAIN. A creator that crashes half-way leaves an object that no one can
 * attach to; cistern_gc() removes it after CISTERN_GC_GRACE_S seconds. The call
 * allocates all of the segment's memory, so a full /dev/shm is -ENOSPC here and
 * never a SIGBUS later.
 * @param name segment name (see cistern_name_valid())
 * @param cfg  parameters, or NULL for all defaults
 * @param out  receives the handle
 * @return 0; -EEXIST if the name is taken; -EINVAL for a bad name or bad
 *         parameters (cistern_config_problem() says which parameter);
 *         -ENAMETOOLONG for a name longer than CISTERN_NAME_MAX; -ENOTSUP for a
 *         policy this build does not implement; -ENOSPC if /dev/shm has no room
 *         for the segment; -ENOMEM; -EACCES if the caller may not create objects
 *         in /dev/shm; another -errno of shm_open(), ftruncate() or mmap().
 */
CISTERN_API int cistern_create(const char *name, const struct cistern_config *cfg,
			       struct cistern **out);

/**
 * Say why cistern_create() would refuse `cfg` with -EINVAL. It judges `cfg` as
 * create does, after filling in the defaults of the fields left 0. It does not
 * judge the segment name (see cistern_name_valid()). Never blocks.
 * @param cfg  parameters, or NULL for all defaults
 * @return NULL if the parameters are acceptable; else a sentence that names
 *         the first wrong field in the terms of struct cistern_config (for
 *         example "FIRO needs a watermark above 0 and below slot_count"). The
 *         sentence is static, except for a bad schema: that sentence (naming
 *         the field of the schema that is wrong) lives in a per-thread buffer
 *         that the next call in the same thread overwrites. It quotes a
 *         character of the schema only if it is printable ASCII; any other
 *         byte is named by its value ("the byte 0x1b"), so the sentence never
 *         carries control bytes of the text to a terminal or a log.
 */
CISTERN_API const char *cistern_config_problem(const struct cistern_config *cfg);

/**
 * Attach to an existing segment. Same as cistern_attach_flags(name, 0, out):
 * the call refuses a segment owned by a user other than the caller or root.
 * Before it returns, the call reclaims what dead processes left in the segment
 * (see "Crashes" above). It waits up to about a second for a segment that is
 * still being created, and it waits while cistern_remove() or cistern_gc()
 * works on the segment (a cistern_gc_dump_to() that dumps the segment holds it
 * for the whole dump).
 * @return 0; -ENOENT if no such segment exists, or if it was removed while the
 *         call attached; -EINVAL for a bad name; -ENAMETOOLONG for a name longer
 *         than CISTERN_NAME_MAX; -EPROTO if the object is not a cistern segment
 *         (also for a FIFO, socket, directory, device or symbolic link under the
 *         name) or is damaged; -EPROTONOSUPPORT if a build with another ABI or
 *         layout made it; -ENOTSUP for a policy this build does not implement;
 *         -EACCES without permission, or for an object owned by another user
 *         (see CISTERN_ATTACH_ANY_OWNER); -EUSERS if every entry of the
 *         attachment table is taken by a live process; -EAGAIN if the segment
 *         is still being created after that wait; -ENOMEM.
 */
CISTERN_API int cistern_attach(const char *name, struct cistern **out);

/**
 * Flag of cistern_attach_flags(): attach even when the shm object is owned by a
 * user other than the caller (effective uid) or root. Without the flag the
 * call refuses such an object with -EACCES before it reads anything of it.
 * The check protects the caller: anyone can create /dev/shm/cistern.NAME first,
 * with mode 0666, and would then receive the samples we put and hand us samples
 * of its own. Set the flag only to share a segment between users on purpose
 * (the command line's --any-owner).
 */
#define CISTERN_ATTACH_ANY_OWNER (1u << 0)

/**
 * Flag of cistern_attach_flags(): map every page of the segment now, as
 * writable, instead of at its first touch. Attaching takes longer (in
 * proportion to the segment's size) and the process's page tables cover the
 * whole segment at once; in exchange its first pass over the slots pays no
 * page fault per 4 KiB, which costs more than copying those 4 KiB. For
 * long-running processes that go through the whole segment: a server (`cistern
 * serve` sets it), a learner. A kernel without MADV_POPULATE_WRITE (before
 * Linux 5.14) attaches as without it.
 */
#define CISTERN_ATTACH_POPULATE (1u << 1)

/**
 * Flag of cistern_attach_flags(): the process attaches as one of the
 * segment's expected producers (cfg.expected_producers). It counts as a
 * producer from the attach on, instead of from its first reserve or put, so
 * that dying before its first put is dying before done like any other
 * death (see CISTERN_DEAD_PRODUCER_DONE). It is the same one producer
 * after its first put, and done after its cistern_producer_done(), as
 * without the flag. The flag takes no role: the producer role is
 * still taken at the first reserve or put (where CISTERN_SINGLE_PRODUCER's
 * -EBUSY comes). On a segment without expected producers it changes nothing.
 * The command line's `cistern put` attaches with it.
 */
#define CISTERN_ATTACH_PRODUCER (1u << 2)

/**
 * cistern_attach() with flags: 0, or CISTERN_ATTACH_ANY_OWNER,
 * CISTERN_ATTACH_POPULATE and CISTERN_ATTACH_PRODUCER or-ed.
 * @return as cistern_attach(); -EINVAL for an unknown flag.
 */
CISTERN_API int cistern_attach_flags(const char *name, uint32_t flags, struct cistern **out);

/**
 * Detach and free the handle. Reservations the handle still holds vanish as if
 * aborted, FIFO and FIRO samples it acquired are handed out again, and its
 * reservoir pins are dropped. A process that exits or dies without detaching
 * is reclaimed the same way (see "Crashes" above), but a counted producer then
 * counts as dead before done (see CISTERN_DEAD_PRODUCER_DONE). The call does
 * not wait for other processes. On a handle that a
 * fork() child inherited, it only frees the child's copy: the attachment and
 * what it holds stay the parent's. The handle must not be used afterwards.
 * @return 0, or -EINVAL for a NULL handle.
 */
CISTERN_API int cistern_detach(struct cistern *c);

/**
 * Remove a segment's name, whoever is attached. Attached processes keep
 * working, and the memory is freed when the last one detaches. Never blocks.
 * cistern_remove() is the careful form: it refuses while processes live.
 * @return 0; -ENOENT if no such name exists; -EINVAL or -ENAMETOOLONG for a bad
 *         name; -EACCES if the caller may not remove it.
 */
CISTERN_API int cistern_unlink(const char *name);

/**
 * Reserve a writable slot (zero-copy put). The handle takes the producer role
 * at its first reserve or put. The call waits for room as timeout_ms says (see
 * the conventions above). The slot stays this handle's until cistern_commit()
 * or cistern_abort(); if the process dies first, the slot is reclaimed and
 * nothing of it is ever read.
 * @return 0; -EAGAIN if timeout_ms is 0 and there is no room; -ETIMEDOUT if no
 *         room came in time; -EPIPE once reception is closed; -EBUSY if the
 *         segment was created with CISTERN_SINGLE_PRODUCER and another live
 *         handle holds that role, or, on any FIFO at this handle's first reserve
 *         or put, if the handle that produced alone so far stayed stopped in the
 *         middle of claiming a slot for a second (nothing was done; a later
 *         call tries again); -EPROTO if the segment is damaged; -ENOMEM (not
 *         under FIFO) if the library could not allocate its working memory.
 */
CISTERN_API int cistern_reserve(struct cistern *c, struct cistern_slot *slot, int timeout_ms);

/**
 * Publish a reserved slot that holds `len` bytes. The call takes meta->sim_id
 * and meta->time_step, and writes the sample id it assigns to meta->sample_id;
 * meta may be NULL (ids 0). Never blocks. Once it returns 0, the sample
 * survives the death of any process.
 * @return 0; -EMSGSIZE if len is above slot_size (the slot stays reserved);
 *         -EINVAL if this handle does not hold the slot reserved (never
 *         reserved, or already committed or aborted); -ERANGE under a
 *         SimPairedReservoir for a sim_id of sweep_size or more or a time_step
 *         of nb_time_steps or more (the slot stays reserved).
 */
CISTERN_API int cistern_commit(struct cistern *c, struct cistern_slot *slot, size_t len,
			       struct cistern_meta *meta);

/**
 * Give a reserved slot back unpublished: that sample never existed. Never
 * blocks.
 * @return 0, or -EINVAL if this handle does not hold the slot reserved.
 */
CISTERN_API int cistern_abort(struct cistern *c, struct cistern_slot *slot);

/**
 * Copy `len` bytes in as one sample: cistern_reserve(), a copy and
 * cistern_commit() in one call. It waits for room as cistern_reserve() does;
 * meta is as for cistern_commit(). On any error nothing was put.
 * @return 0; -EMSGSIZE if len is above slot_size; -EINVAL if buf is NULL with
 *         a len above 0; -ERANGE as cistern_commit(); -EAGAIN, -ETIMEDOUT,
 *         -EPIPE, -EBUSY, -EPROTO and -ENOMEM as cistern_reserve().
 */
CISTERN_API int cistern_put(struct cistern *c, const void *buf, size_t len,
			    struct cistern_meta *meta, int timeout_ms);

/**
 * Copy up to `n` samples in, in order, each as cistern_put() copies one.
 * Sample i is the len[i] bytes at buf + i * stride (with len NULL, stride bytes
 * each), and meta[i] is its cistern_put() meta (meta may be NULL). The call
 * puts as many as there is room for now. If there is room for none, it waits
 * for the first as cistern_put() waits and then puts any that fit after it. A
 * sample longer than slot_size or than stride ends the batch before it: the
 * call that meets it first returns -EMSGSIZE (longer than slot_size) or
 * -EINVAL (longer than stride) and puts nothing. Every policy accepts it.
 * @return the number of samples put (1 to n); -EINVAL if n is 0 or above
 *         INT_MAX, buf is NULL, or the first sample is longer than stride;
 *         -EMSGSIZE if the first sample is longer than slot_size; -ERANGE as
 *         cistern_commit(); -EAGAIN, -ETIMEDOUT, -EPIPE, -EBUSY, -EPROTO and
 *         -ENOMEM as cistern_reserve().
 */
CISTERN_API int cistern_put_batch(struct cistern *c, const void *buf, size_t stride, size_t n,
				  const size_t *len, struct cistern_meta *meta, int timeout_ms);

/**
 * Close reception. From now on reserves and puts return -EPIPE, readers drain
 * what the segment holds and then get CISTERN_EOD, and every process waiting
 * on the segment wakes. Calling it again changes nothing. Never blocks.
 * Reception stays closed for the life of the segment.
 * @return 0.
 */
CISTERN_API int cistern_close_reception(struct cistern *c);

/**
 * Declare one of cfg.expected_producers done. The call that completes the
 * count closes reception (with CISTERN_DEAD_PRODUCER_DONE, producers that
 * died before done count as done). Any handle may call it, a producer for
 * itself or a coordinator for others. A producer that called it no longer
 * counts as dying before done when it later dies. Never blocks.
 * @return the number of producers still expected (0 once the count is
 *         complete); -EINVAL if the segment expects no producers
 *         (expected_producers 0).
 */
CISTERN_API int cistern_producer_done(struct cistern *c);

/**
 * Acquire a sample to read in place (zero-copy get). The handle takes the
 * reader role at its first read. The call waits for a sample as timeout_ms
 * says (see the conventions above). Under FIFO and FIRO the sample belongs to
 * this handle until cistern_release(); under the reservoirs it stays pinned
 * (never evicted nor overwritten) until then. If the process dies first, a
 * FIFO or FIRO sample is handed out again and a reservoir pin is dropped.
 * SimPairedReservoir and BatchReservoir read pairs and batches only.
 * @return 0; CISTERN_EOD at end of data; -EAGAIN if timeout_ms is 0 and no
 *         sample is there; -ETIMEDOUT if none came in time; -EINVAL under
 *         SimPairedReservoir or BatchReservoir; -EBUSY if the segment was
 *         created with CISTERN_SINGLE_READER and another live handle holds that
 *         role, or, without that flag, as for cistern_reserve() with the reader
 *         that read alone so far (the same holds for every get, acquire and
 *         batch); -EUSERS under a reservoir kind if CISTERN_PIN_READERS_MAX
 *         other handles read it already; -EPROTO if the segment is damaged
 *         (for example a sample longer than slot_size, which the call does
 *         not hand over); -ENOMEM (reservoir kinds) if the library could not allocate
 *         its working memory.
 */
CISTERN_API int cistern_acquire(struct cistern *c, struct cistern_sample *s, int timeout_ms);

/**
 * Release an acquired sample: under FIFO it is consumed, under FIRO it counts
 * as one of its pseudo_epochs reads, under the reservoirs it is unpinned.
 * Never blocks.
 * @return 0, or -EINVAL if this handle does not hold `s` (never acquired, or
 *         already released or handed back).
 */
CISTERN_API int cistern_release(struct cistern *c, struct cistern_sample *s);

/**
 * Hand an acquired sample back unread, for a reader that cannot use it (a
 * payload of the wrong size, a learner shutting down). The segment is left as
 * if this acquire had not happened: FIFO hands the sample out again, to any
 * reader, before the samples behind it; FIRO and the reservoirs take back the
 * read (its seen count is what it was) and unpin it. It does not count as a
 * get. Never blocks.
 * @param s  a sample from cistern_acquire(), or a member of a pair or batch;
 *           a member handed back must not be released again (release the
 *           others one by one with cistern_release())
 * @return 0, or -EINVAL if this handle does not hold `s` (never acquired,
 *         already released or handed back).
 */
CISTERN_API int cistern_unacquire(struct cistern *c, struct cistern_sample *s);

/**
 * Copy one sample out: cistern_acquire(), a copy to buf and cistern_release()
 * in one call. It waits for a sample as cistern_acquire() does. meta, if not
 * NULL, receives the sample's metadata.
 * @return the payload length; CISTERN_EOD; -EMSGSIZE if the sample is longer
 *         than `cap` (the sample is not lost: it is handed out again); -EINVAL
 *         if buf is NULL with a cap above 0; -EAGAIN, -ETIMEDOUT, -EINVAL,
 *         -EBUSY, -EUSERS, -EPROTO and -ENOMEM as cistern_acquire().
 */
CISTERN_API ssize_t cistern_get(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta,
				int timeout_ms);

/**
 * Acquire a pair (x_t, x_t+1) of one simulation (SimPairedReservoir only): two
 * samples with the same sim_id and consecutive time steps, chosen uniformly
 * among the pairs held now and pinned together until cistern_release_pair().
 * After reception closes, each pair is handed out once and removed. The call
 * waits for a pair as cistern_acquire() waits for a sample.
 * @return 0; CISTERN_EOD; -EAGAIN; -ETIMEDOUT; -EINVAL under another policy;
 *         -EBUSY, -EUSERS, -EPROTO and -ENOMEM as cistern_acquire().
 */
CISTERN_API int cistern_acquire_pair(struct cistern *c, struct cistern_sample pair[2],
				     int timeout_ms);

/**
 * Release a pair acquired with cistern_acquire_pair(). Never blocks.
 * @return 0, or -EINVAL if this handle does not hold a member (the other one
 *         is released all the same).
 */
CISTERN_API int cistern_release_pair(struct cistern *c, struct cistern_sample pair[2]);

/**
 * Copy a pair out: payloads to buf[0] and buf[1] (each of `cap` bytes), lengths
 * to len[0] and len[1], metadata to meta[0] and meta[1] (meta may be NULL). It
 * waits as cistern_acquire_pair() does.
 * @return 0; -EMSGSIZE if a member is longer than cap (the pair is handed
 *         back, not lost); -EINVAL if buf, buf[0], buf[1] or len is NULL; the
 *         errors of cistern_acquire_pair().
 */
CISTERN_API int cistern_get_pair(struct cistern *c, void *buf[2], size_t cap, size_t len[2],
				 struct cistern_meta meta[2], int timeout_ms);

/**
 * Acquire a batch of `n` distinct samples drawn uniformly at random from those
 * held, pinned together (Reservoir, FIFOEvictReservoir, BatchReservoir; for
 * BatchReservoir n must be 0 or batch_size, 0 meaning batch_size). After
 * reception closes, batches remove what they return, and the last batch may
 * be short. The call waits for enough samples as cistern_acquire() waits for
 * one. Under the rate limiter a batch starts only when its n reads fit the
 * budget, all at once (see struct cistern_config).
 * @return the number of samples acquired; CISTERN_EOD; -EAGAIN; -ETIMEDOUT;
 *         -EINVAL for FIFO, FIRO or SimPairedReservoir, for an n of 0 without
 *         a batch_size, above slot_count, or other than a BatchReservoir's
 *         batch_size; -EDEADLK at once, without waiting, if the rate limiter
 *         could never admit n reads at once (cistern_read_problem() says why);
 *         -EBUSY, -EUSERS, -EPROTO and -ENOMEM as cistern_acquire().
 */
CISTERN_API int cistern_acquire_batch(struct cistern *c, struct cistern_sample *out, size_t n,
				      int timeout_ms);

/**
 * Release `n` samples acquired with cistern_acquire_batch(). Never blocks.
 * @return 0, or -EINVAL if this handle does not hold one of them (the others
 *         are released all the same).
 */
CISTERN_API int cistern_release_batch(struct cistern *c, struct cistern_sample *s, size_t n);

/**
 * Gather a batch into one contiguous array: sample i is copied to
 * buf + i * stride (stride >= the longest sample), its length to len[i] and
 * its metadata to meta[i] (len and meta may be NULL).
 *
 * Reservoir, FIFOEvictReservoir, BatchReservoir: a batch drawn as
 * cistern_acquire_batch() draws it, copied out and released. n = 0 means
 * batch_size.
 *
 * FIFO: the next samples in order, at most n (n = 0 is -EINVAL, as a FIFO has
 * no batch_size): those there now, or, if none is, the first one waited for as
 * cistern_get() waits, with any that came with it. A sample longer than stride
 * ends the batch before it. The call that meets such a sample first returns
 * -EMSGSIZE and leaves the sample to be read with a larger buffer, as
 * cistern_get() does. Each sample returned is consumed, as by cistern_get().
 *
 * After an error nothing was read (no seen count moves), but buf may have been
 * written.
 * @return the number of samples; CISTERN_EOD; -EAGAIN; -ETIMEDOUT; -EMSGSIZE
 *         if a sample is longer than stride; -EINVAL for FIRO or
 *         SimPairedReservoir, or for a bad n (as cistern_acquire_batch());
 *         -EDEADLK as cistern_acquire_batch(); -EBUSY, -EUSERS, -EPROTO and
 *         -ENOMEM as cistern_acquire().
 */
CISTERN_API int cistern_get_batch(struct cistern *c, void *buf, size_t stride, size_t n,
				  size_t *len, struct cistern_meta *meta, int timeout_ms);

/**
 * Say whether a read of `n` samples would be refused at once instead of
 * waited for, and why. It gives the answer that cistern_acquire_batch() and
 * cistern_get_batch() give before any wait (cistern_acquire() reads 1 sample,
 * a pair 2). Never blocks and changes nothing.
 * @param n    samples read at once; 0 = the segment's batch_size
 * @param why  receives a sentence naming the parameters involved (as
 *             snprintf() would, truncated to size bytes); may be NULL
 * @return 0 if such a read can start (now or after a wait); -EDEADLK if the
 *         rate limiter, with the rate_slack set at creation, could never
 *         admit n reads at once (see struct cistern_config); -EINVAL for an
 *         n of 0 without a batch_size, above slot_count, or other than a
 *         BatchReservoir's batch_size.
 */
CISTERN_API int cistern_read_problem(const struct cistern *c, size_t n, char *why, size_t size);

/**
 * Give the segment's parameters as created, defaults filled in. cfg->schema
 * points at the handle's copy of the schema text (valid until
 * cistern_detach()), or is NULL for a segment without one. Never blocks.
 * @return 0; -EBADF on a handle that a fork() child inherited.
 */
CISTERN_API int cistern_config_get(const struct cistern *c, struct cistern_config *cfg);

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
	uint64_t unpaired; /**< SimPairedReservoir: samples left without a partner at the end */
	uint32_t procs_attached;     /**< live attachments */
	uint32_t reception_closed;   /**< nonzero once reception is closed */
	uint32_t producers_expected; /**< cfg.expected_producers */
	uint32_t producers_done;     /**< cistern_producer_done() calls so far */
	/**
	 * Counted producers that died before cistern_producer_done() (see
	 * CISTERN_DEAD_PRODUCER_DONE), those whose attachment was reclaimed and
	 * those found dead and not reclaimed yet.
	 */
	uint32_t producers_died;
};

/**
 * Read the segment's statistics without disturbing it. Never blocks. The
 * counters are read one by one while others may move them.
 * @return 0; -EBADF on a handle that a fork() child inherited; -EPROTO on a
 *         read-only handle whose segment was found shrunk (cistern_open_readonly()).
 */
CISTERN_API int cistern_stats_get(const struct cistern *c, struct cistern_stats *st);

/** A sentence for a result code (0, a negative errno, or CISTERN_EOD). Never NULL. */
CISTERN_API const char *cistern_strerror(int err);

/** The name of a policy ("fifo", "firo", ...), or NULL if out of range. */
CISTERN_API const char *cistern_policy_name(enum cistern_policy p);

/**
 * Parse a policy name as cistern_policy_name() prints it.
 * @return 0, or -EINVAL for a NULL or unknown name.
 */
CISTERN_API int cistern_policy_parse(const char *s, enum cistern_policy *out);

/* ======================================================================== */
/* Schemas: samples that describe themselves (docs/SCHEMA.md)                */
/* ======================================================================== */

/*
 * A segment may be created with a schema (cistern_config.schema): named
 * fields, each a dtype and a shape, laid out in every sample as the members
 * of a C struct are: in order, each at the next offset that is a multiple of
 * its item size, and the sample padded at the end to a multiple of the
 * largest item size (numpy's dtype(..., align=True) gives the same layout).
 * The text form, for an RL transition:
 *
 *     obs:float32[84,84];action:int64[];reward:float32[];next_obs:float32[84,84]
 *
 * The library only stores and describes the schema: puts and gets still move
 * bytes, and the library checks no sample's length against it. The Python
 * package and the `cistern` command check what they put and read against it.
 */

/** Longest schema text, in bytes, with its terminating NUL. */
#define CISTERN_SCHEMA_MAX 1024
/** Longest field name, in bytes (without the terminating NUL). */
#define CISTERN_FIELD_NAME_MAX 63
/** Most dimensions of a field. */
#define CISTERN_FIELD_DIMS 8

/** Element types of schema fields (their names are those of the text form). */
enum cistern_dtype {
	CISTERN_INT8 = 0,
	CISTERN_INT16 = 1,
	CISTERN_INT32 = 2,
	CISTERN_INT64 = 3,
	CISTERN_UINT8 = 4,
	CISTERN_UINT16 = 5,
	CISTERN_UINT32 = 6,
	CISTERN_UINT64 = 7,
	CISTERN_FLOAT16 = 8, /**< IEEE 754 binary16 */
	CISTERN_FLOAT32 = 9,
	CISTERN_FLOAT64 = 10,
	CISTERN_BOOL = 11, /**< one byte, 0 or 1 */
};
#define CISTERN_DTYPE_COUNT 12

/** One field of a schema, as laid out in a sample (all little-endian, host order). */
struct cistern_field {
	char name[CISTERN_FIELD_NAME_MAX + 1]; /**< NUL-terminated */
	enum cistern_dtype dtype;
	uint32_t itemsize;                  /**< bytes of one element: 1, 2, 4 or 8 */
	uint32_t ndim;                      /**< 0 for a scalar */
	uint64_t shape[CISTERN_FIELD_DIMS]; /**< shape[0..ndim-1], C order; the rest 0 */
	uint64_t offset;                    /**< bytes from the start of the sample */
	uint64_t size;                      /**< itemsize times the product of the shape */
};

/**
 * Parse a schema's text form (docs/SCHEMA.md) and lay it out. Never blocks.
 * @param fields receives the first `cap` fields, in order (may be NULL if cap is 0)
 * @param size   if not NULL, receives the bytes of one sample, end padding included
 * @return the number of fields (may exceed cap; 0 for ""); -EINVAL for a NULL
 *         text, for NULL fields with a cap above 0, or for a bad text
 *         (cistern_config_problem() with .schema = text says why).
 */
CISTERN_API int cistern_schema_parse(const char *text, struct cistern_field *fields, size_t cap,
				     uint64_t *size);

/**
 * Copy a segment's schema text, in its canonical form and NUL-terminated, into
 * buf. Never blocks.
 * @return its length (0 for a segment without a schema); -ERANGE if cap is not
 *         above the length (CISTERN_SCHEMA_MAX always suffices); -EINVAL for
 *         NULL buf with a cap above 0.
 */
CISTERN_API ssize_t cistern_schema_get(const struct cistern *c, char *buf, size_t cap);

/**
 * Give a segment's schema, parsed, as cistern_schema_parse() gives it. Never
 * blocks.
 * @return the number of fields (0 without a schema; may exceed cap); -EINVAL
 *         for NULL fields with a cap above 0.
 */
CISTERN_API int cistern_schema_fields(const struct cistern *c, struct cistern_field *fields,
				      size_t cap, uint64_t *size);

/** The name of a dtype ("float32", ...), or NULL if out of range. */
CISTERN_API const char *cistern_dtype_name(enum cistern_dtype t);

/* ======================================================================== */
/* Inspection, listing, removal and garbage collection                      */
/* ======================================================================== */

/*
 * Everything in this section is for tools (the `cistern` command) and
 * monitoring. A handle from cistern_open_readonly() can only look: it cannot
 * disturb producers or readers, and it never appears in the attachment table.
 * cistern_config_get(), cistern_stats_get(), the schema calls and the calls
 * below work on it; the calls that move samples return -EBADF.
 *
 * The calls here never wait on nor follow an object named like a segment
 * that is not a regular file (a FIFO, socket, directory, device or symbolic
 * link): they answer -EPROTO for it at once.
 */

/**
 * Open a segment for inspection only. Close it with cistern_detach(). The call
 * opens segments of any owner: a read-only handle cannot put anything of ours
 * into another user's object (what it shows is whatever that user wrote;
 * cistern_segment_info.uid and fstat() name the owner). It waits up to about a
 * second for a segment that is still being created.
 *
 * A segment that someone other than the caller could shrink (another user's,
 * or one whose mode lets others write it) is never mapped, since touching a
 * page a shrink took away raises SIGBUS: the handle reads it into memory of
 * its own with pread(), again at each call that looks (cistern_stats_get(),
 * cistern_procs_get(), cistern_occupancy_get(), cistern_dump()), and such a
 * call answers -EPROTO if the segment is found shrunk. A segment only the
 * caller could shrink is mapped read-only.
 * @return 0; -ENOENT if no such segment exists; -EINVAL or -ENAMETOOLONG for a
 *         bad name; -EACCES if the caller may not read it; -EPROTO if it is not
 *         a cistern segment or is damaged; -EPROTONOSUPPORT if a build with
 *         another layout made it; -EAGAIN if it is still being created after
 *         that wait; -ENOTSUP for a policy this build does not implement;
 *         -ENOMEM.
 */
CISTERN_API int cistern_open_readonly(const char *name, struct cistern **out);

/** What a slot is doing, as far as an outside observer can tell. */
enum cistern_slot_class {
	CISTERN_SLOT_FREE = 0,      /**< empty, ready for a producer */
	CISTERN_SLOT_RESERVED = 1,  /**< a producer is writing it */
	CISTERN_SLOT_COMMITTED = 2, /**< holds a sample waiting for (or open to) readers */
	CISTERN_SLOT_ACQUIRED = 3,  /**< FIFO/FIRO: a reader owns the sample right now */
	CISTERN_SLOT_SKIP = 4,      /**< an aborted or reclaimed put that readers step over */
	CISTERN_SLOT_REDELIVER = 5, /**< a sample whose reader died, to be handed out again */
	CISTERN_SLOT_EVICTING = 6,  /**< reservoirs: a producer is deciding whether to evict it */
	CISTERN_SLOT_OTHER = 7,     /**< a state this build cannot name */
};
#define CISTERN_SLOT_CLASSES 8

/** The name of a slot class ("free", "reserved", ...), or NULL if out of range. */
CISTERN_API const char *cistern_slot_class_name(enum cistern_slot_class cls);

/** Occupancy of a segment: its slots counted by class. */
struct cistern_occupancy {
	uint64_t slots[CISTERN_SLOT_CLASSES]; /**< slots per enum cistern_slot_class */
	uint64_t pinned;     /**< slots with at least one reader pin (reservoirs) */
	uint64_t held;       /**< samples held now: committed + redeliver slots */
	uint64_t held_bytes; /**< their payload bytes */
	/** seen counts of samples held now, bucketed as cistern_stats.seen_hist */
	uint64_t held_seen_hist[CISTERN_SEEN_BUCKETS];
};

/**
 * Count the segment's slots by class. The call reads the slots one by one
 * while other processes may change them, so under load the counts are a
 * near-instant picture, not an atomic one. Never blocks; it takes time in
 * proportion to slot_count.
 * @return 0; -EBADF on a handle that a fork() child inherited; -ENOTSUP if
 *         this build cannot classify the slots of the segment's policy;
 *         -EPROTO on a read-only handle whose segment was found shrunk.
 */
CISTERN_API int cistern_occupancy_get(const struct cistern *c, struct cistern_occupancy *occ);

/** Roles an attached process has taken (cistern_proc_info.role bits). */
enum {
	CISTERN_PROC_PRODUCER = 1u << 0,
	CISTERN_PROC_READER = 1u << 1,
};

/** The reservoirs' rate limiter as it stands (cistern_rate_get()). */
struct cistern_rate {
	uint64_t puts;  /**< puts the limiter counted since creation */
	uint64_t reads; /**< reads it admitted since creation */
	/**
	 * Reads of one sample that may start now: reads_per_put times the
	 * puts after the first `watermark`, plus the slack of a one-sample
	 * read (rate_slack, or when it is automatic the larger of
	 * reads_per_put and 1), less the reads. At or below 0, readers wait
	 * for puts; producers wait while it exceeds their own slack.
	 */
	double read_budget;
};

/**
 * Read the rate limiter's counts without disturbing it; a read-only handle
 * will do. The two counts are read one by one while others may move them.
 * Never blocks.
 * @return 0; -ENODATA for a segment without a rate limiter (reads_per_put
 *         0); -EINVAL for a NULL argument; -EBADF on a handle that a fork()
 *         child inherited.
 */
CISTERN_API int cistern_rate_get(const struct cistern *c, struct cistern_rate *out);

/** One entry of the attachment table that is in use. */
struct cistern_proc_info {
	uint32_t index;       /**< entry index in the table */
	uint32_t pid;         /**< process id at attach time */
	uint32_t uid;         /**< its user id */
	uint32_t role;        /**< CISTERN_PROC_* bits; 0 = attached, nothing moved yet */
	int alive;            /**< 1 if its owner holds the entry, 0 if it died without detaching */
	uint32_t waiting;     /**< 0, 1 waiting for data, 2 waiting for room */
	uint64_t attached_ns; /**< CLOCK_REALTIME at attach */
	uint64_t puts;        /**< samples it committed */
	uint64_t gets;        /**< samples it was handed */
	char comm[16];        /**< process name (NUL-terminated) */
};

/**
 * List the attachment entries in use (live or dead), at most `cap` of them.
 * An entry counts as alive while its process lives (asked of the kernel, so a
 * pid reused by another process does not fool it). Never blocks.
 * @return the number of entries in use (may exceed cap); -EINVAL for NULL out
 *         with a cap above 0; -EBADF on a handle that a fork() child inherited;
 *         -EPROTO on a read-only handle whose segment was found shrunk.
 */
CISTERN_API int cistern_procs_get(const struct cistern *c, struct cistern_proc_info *out,
				  size_t cap);

/** Summary of one shm object named cistern.*, as cistern_list() sees it. */
struct cistern_segment_info {
	char name[CISTERN_NAME_MAX + 1]; /**< segment name (from the file name) */
	/**
	 * 0 if the header validates; else why not: -EAGAIN being created,
	 * -EPROTO damaged or foreign, or not a regular file (a FIFO, socket,
	 * directory, device or link), -EPROTONOSUPPORT another build, -EACCES
	 * unreadable, -ENOTSUP a policy this build lacks, -EINPROGRESS an
	 * unfinished restore (the object cistern_restore() builds under a
	 * temporary name, which carries a mark bound to that name; a copy of
	 * a segment under another name is a segment like any other).
	 */
	int status;
	/** valid when status == 0; config.schema is NULL here (open the segment to read it) */
	struct cistern_config config;
	uint64_t file_size;  /**< bytes of the shm object */
	uint64_t created_ns; /**< header's creation time, else the file's mtime */
	uint32_t uid;        /**< owner of the shm object */
	uint32_t mode;       /**< its permission bits */
	uint64_t population; /**< samples held (status == 0) */
	uint32_t procs_live; /**< attachments whose owner lives */
	uint32_t procs_dead; /**< attachments whose owner died without detaching */
	uint32_t closed;     /**< reception closed */
};

/**
 * List every cistern segment on the machine (every /dev/shm/cistern.NAME
 * with a valid NAME), sorted by name, without disturbing any of them. Never
 * waits: a segment being created is listed with status -EAGAIN.
 * @param out receives a malloc'ed array (free() it); NULL when there are none
 * @return the number of segments; -ENOMEM; -errno of opendir() if /dev/shm
 *         cannot be read.
 */
CISTERN_API int cistern_list(struct cistern_segment_info **out);

/** Flags of cistern_remove() and cistern_gc(). */
enum {
	CISTERN_REMOVE_FORCE = 1u << 0, /**< remove even with live processes attached */
	CISTERN_GC_DRY_RUN = 1u << 1,   /**< say what would be done, do nothing */
	/**
	 * Act on an object owned by another user than the caller (effective
	 * uid) or root too; without it such an object is -EACCES, as for
	 * cistern_attach() (see CISTERN_ATTACH_ANY_OWNER).
	 */
	CISTERN_REMOVE_ANY_OWNER = 1u << 2,
	CISTERN_GC_ANY_OWNER = CISTERN_REMOVE_ANY_OWNER,
	/** remove a stale segment even though it holds unread samples (they are lost) */
	CISTERN_GC_DISCARD = 1u << 3,
};

/**
 * Remove a segment's name, refusing while live processes are attached. No
 * process can be half-way through attaching when the name goes: the call waits
 * up to about 100 ms for an attach under way and returns -EBUSY if it does not
 * finish. With CISTERN_REMOVE_FORCE it removes the name whoever is attached,
 * and it also removes damaged, foreign-build or half-created objects named
 * cistern.NAME, and objects there that are not regular files. Flags:
 * CISTERN_REMOVE_FORCE, CISTERN_REMOVE_ANY_OWNER.
 * @return 0; -EBUSY with live attachments, or with an attach still under way;
 *         -ENOENT if no such segment exists; -EINVAL for a bad name or an
 *         unknown flag; -ENAMETOOLONG for a name longer than CISTERN_NAME_MAX;
 *         -EACCES without permission, or for another user's object;
 *         -EPROTO, -EPROTONOSUPPORT or -EAGAIN (unless forced) for an object
 *         that the call cannot check.
 */
CISTERN_API int cistern_remove(const char *name, unsigned flags);

/** What cistern_gc() found and did for one segment. */
struct cistern_gc_report {
	uint32_t
		dead_procs; /**< attachments of dead processes (reclaimed unless dry run or kept) */
	/* What those attachments hold, dropped or put back as said unless dry run or kept. */
	uint64_t reservations; /**< their unfinished puts, dropped */
	uint64_t redelivered;  /**< their held FIFO/FIRO samples, put back for redelivery */
	uint64_t pins;         /**< their reservoir pins, dropped */
	uint32_t live_procs;   /**< attachments whose owner lives */
	/**
	 * Nonzero if the segment was removed (or would be, in a dry run):
	 * 1 stale (every attachment is dead and at least one died without
	 *   detaching) and holding no unread sample;
	 * 2 the header never finished creation and is older than
	 *   CISTERN_GC_GRACE_S seconds; 3 an unfinished restore nobody works on
	 *   (an object that carries the mark cistern_restore() puts on the
	 *   segment it builds, and whose restorer died: see
	 *   cistern_segment_info.status);
	 * 4 stale with unread samples, dumped (cistern_gc_dump_to()) and then
	 *   removed; 5 stale with unread samples, removed with them
	 *   (CISTERN_GC_DISCARD).
	 */
	int removed;
	/**
	 * A stale segment's unread samples: those its readers would still get.
	 * FIFO and FIRO: every sample it holds (a sample leaves only once read,
	 * under FIRO pseudo_epochs times). The reservoirs: every sample it holds
	 * that was never seen (a seen one is evictable anyway). Samples dead
	 * processes held count as their reclaim leaves them (an acquired one goes
	 * back, a read that was never released is not counted as seen).
	 */
	uint64_t unread;
	uint64_t dumped; /**< removed == 4: samples in the dump (every one held) */
	/**
	 * 1 if the segment is stale but was kept because it holds unread samples
	 * (neither a dump directory nor CISTERN_GC_DISCARD), or because its dump
	 * failed (then the call returns the error).
	 */
	int kept;
};
/** Age below which a half-created segment is left alone (its creator may be busy). */
#define CISTERN_GC_GRACE_S 10

/**
 * Collect one segment's garbage. The call takes no attachment entry, so it
 * works even when the table is full. It reclaims every dead attachment as an
 * attaching process would, and it removes the segment's name when the segment
 * is garbage (see cistern_gc_report.removed). A segment nobody ever attached
 * to, or whose processes all detached cleanly, is kept: it was created for
 * later use. A stale segment (every process attached died) that still holds
 * unread samples (cistern_gc_report.unread) is kept too, and reported
 * (kept = 1), unless `flags` has CISTERN_GC_DISCARD: the call never throws
 * committed samples away unasked. It leaves such a segment exactly as it is,
 * dead attachments included (whoever attaches next reclaims them), so that it
 * stays stale for cistern_list() and for a later call told to dump or discard
 * it. It never removes damaged or foreign-build objects, nor objects that are
 * not regular files (-EPROTO). Before it removes a segment, it waits up to
 * about 100 ms for an attach under way; if one is, the segment is not garbage,
 * and the call returns 0 with removed = 0. Flags: CISTERN_GC_DRY_RUN,
 * CISTERN_GC_DISCARD, CISTERN_GC_ANY_OWNER (a dry run refuses another user's
 * segment as the real one would).
 * @return 0 (see *rep); -ENOENT if no such segment exists; -EINVAL for a bad
 *         name or an unknown flag; -ENAMETOOLONG for a name longer than
 *         CISTERN_NAME_MAX; -EACCES without permission, or for another user's
 *         object; -EPROTO; -EPROTONOSUPPORT; -ENOTSUP for a policy this build
 *         does not implement; -ENOMEM.
 */
CISTERN_API int cistern_gc(const char *name, unsigned flags, struct cistern_gc_report *rep);

/**
 * As cistern_gc(), but a stale segment that holds unread samples is first
 * dumped (cistern_dump()) to `dir`/NAME.dump, then removed (removed = 4,
 * dumped = the samples saved): the dump holds every sample the segment held,
 * restores with cistern_restore(), and is read back whole before the segment
 * goes (samples dead processes held are in it as their reclaim would leave
 * them: put back, their unreleased reads not counted as seen). An existing
 * file of that name is never replaced: the call fails with -EEXIST and the
 * segment stays as it was, as it does when the dump fails. A process that
 * attaches to the segment meanwhile waits until the call ends. `dir` NULL is
 * cistern_gc(); CISTERN_GC_DISCARD with a `dir` is -EINVAL. In a dry run
 * nothing is written, and the answer is the real run's: anything at the
 * path (a file, a symbolic link even one that leads nowhere) is -EEXIST, a
 * directory we cannot write in is its -errno.
 * @return as cistern_gc(); also -EEXIST, -ENAMETOOLONG, -EAGAIN (the dump
 *         read back did not hold every sample; it is deleted) and the errors
 *         of cistern_dump(): the segment is then kept (kept = 1).
 */
CISTERN_API int cistern_gc_dump_to(const char *name, const char *dir, unsigned flags,
				   struct cistern_gc_report *rep);

/* ======================================================================== */
/* Snapshots: dump and restore                                              */
/* ======================================================================== */

/*
 * A dump file is a versioned, checksummed snapshot of a segment: its config,
 * statistics and every held sample (payload, metadata, seen count). Dumping
 * never attaches to the segment, pins a sample or blocks anyone, and it saves
 * only whole samples: a sample that changes while it is copied is left out.
 * Restoring builds an equivalent segment under a temporary name and renames it
 * into place atomically, so a failed restore creates nothing. The file format
 * is described in lib/dump_format.h.
 */

/** Called now and then with how far a dump or restore got; `total` may grow. */
typedef void (*cistern_progress_fn)(uint64_t done, uint64_t total, void *arg);

/** What a dump holds (filled by cistern_dump(), cistern_restore(), cistern_dump_info()). */
struct cistern_dump_info {
	char name[CISTERN_NAME_MAX + 1]; /**< segment the dump was taken from (a valid name) */
	/**
	 * its parameters; mode: its permission bits at dump time; config.schema
	 * points at `schema` below (NULL without one)
	 */
	struct cistern_config config;
	struct cistern_stats stats; /**< its statistics when the dump started */
	uint64_t samples;           /**< samples in the dump */
	uint64_t payload_bytes;     /**< their payload bytes */
	uint64_t skipped;           /**< samples that moved while copied, left out */
	uint64_t next_id;           /**< restored segments give new samples ids from here */
	uint64_t created_ns;        /**< when the source segment was created */
	uint64_t dumped_ns;         /**< when the dump was taken */
	uint64_t file_size;         /**< bytes of the dump file */
	uint32_t format_version;    /**< the file's format: 1 or CISTERN_DUMP_VERSION */
	uint32_t closed;            /**< reception was closed */
	/**
	 * The segment's schema text ("" for none). config.schema points here, so
	 * it is valid while this struct is, and a copy of the struct still points
	 * into the original.
	 */
	char schema[CISTERN_SCHEMA_MAX];
};
/**
 * The dump format this build writes. It reads that one and format 1, written
 * by builds before schemas (version 2 added the segment's schema).
 */
#define CISTERN_DUMP_VERSION 2

/**
 * Dump segment `name` to `path` (replaced atomically: written to a temporary
 * file next to it, `path`.tmp.RANDOM, created exclusively under a name
 * nobody can take first, then renamed). Besides cistern_open_readonly()'s wait for a
 * segment being created, the call blocks on the file I/O only. I/O that a
 * signal to the process interrupts is retried, never reported as
 * -EINTR (the same holds for cistern_restore() and cistern_dump_verify()).
 * config.mode in the dump is the segment's permission bits when the dump is
 * taken (fstat of the object: a chmod since creation counts, the mode given
 * at creation does not); the file is created with those bits, plus read and
 * write for its owner, under the umask, and cistern_restore() creates the
 * segment with them.
 * @param progress may be NULL; called with (slots scanned, slot_count, arg)
 * @param info     may be NULL; receives what was written
 * @return 0; -EINVAL for a NULL path; the errors of cistern_open_readonly();
 *         -EPROTO also if a segment read without a mapping (see
 *         cistern_open_readonly()) is found shrunk during the dump (nothing is
 *         written over `path` then); -ENOTSUP if this build cannot read the
 *         slots of the segment's policy; -ENAMETOOLONG if the temporary file's
 *         path is too long; -ENOMEM; -errno of the file I/O.
 */
CISTERN_API int cistern_dump(const char *name, const char *path, cistern_progress_fn progress,
			     void *arg, struct cistern_dump_info *info);

/**
 * Restore a dump as segment `name` (NULL: the name stored in the dump). The
 * whole file is checked (every section checksum and the file checksum) while
 * it is loaded into a segment under a temporary name (restore-PID-RANDOM,
 * created exclusively, under a name nobody can take first); only a fully checked
 * segment is renamed to `name`, which must not exist. The call blocks on the
 * file I/O only. If the restoring process dies, the half-built segment keeps
 * its temporary name, and cistern_gc() removes it.
 * @param progress may be NULL; called with (bytes read, file size, arg)
 * @param info     may be NULL; receives what the dump holds as soon as its
 *                 frame is read, also when the restore then fails (so that
 *                 -EEXIST can be told with the stored name); all zero when
 *                 the file could not be read as a dump
 * @return 0; -EEXIST if `name` exists; -EBADMSG for a damaged or truncated
 *         dump, one whose config cistern_create() would refuse, or one holding
 *         a record the segment could not hold (a payload longer than a slot,
 *         ids out of order, a SimPairedReservoir sim_id >= sweep_size or
 *         time_step >= nb_time_steps), or a stored name that breaks the
 *         naming rule (cistern_name_valid()), even under checksums that
 *         hold; -ENOMSG for a file that is not a cistern dump at all (no
 *         dump magic, or not a regular file: a FIFO is refused, not waited
 *         on);
 *         -EPROTONOSUPPORT for a dump format this build does not know;
 *         -ENOTSUP for a policy this build lacks; -EINVAL for a NULL path or
 *         a bad name; -ENOSPC, -ENOMEM and the other errors of
 *         cistern_create(); -errno of the file I/O.
 */
CISTERN_API int cistern_restore(const char *path, const char *name, cistern_progress_fn progress,
				void *arg, struct cistern_dump_info *info);

/**
 * Read and fully verify a dump file without restoring it: it runs the same
 * checks as cistern_restore(), on every record and on the seen set, so it
 * accepts exactly the files a restore accepts and refuses the others with
 * the same error. The call blocks on the file I/O only.
 * @return 0; -EBADMSG, -ENOMSG or -EPROTONOSUPPORT as cistern_restore();
 *         -EINVAL for a NULL path; -ENOMEM; -errno of the file I/O.
 */
CISTERN_API int cistern_dump_verify(const char *path, struct cistern_dump_info *info);

/* ======================================================================== */
/* Remote producers and the server (lib/remote*.c, docs/REMOTE.md)          */
/* ======================================================================== */

/*
 * Producers on other machines put samples into segments through a server
 * (`cistern serve`, or cistern_server_run() in a program of one's own) over
 * ZeroMQ: the server binds a ROUTER socket on tcp:// or ipc:// endpoints and
 * puts what it receives into R local segments, one per learner rank; each
 * remote producer is a DEALER. docs/REMOTE.md gives the wire protocol and
 * what is guaranteed.
 *
 * Credits: the server grants each connection a window of samples in flight
 * (sent but not yet in a segment); a put waits, up to its timeout, while the
 * window is full, so a full segment slows its remote producers and neither
 * side holds more than the window. Acknowledgements are cumulative: a sample
 * is acknowledged once it is in its segment (whole, exactly once).
 *
 * Gathering: small puts (up to 16 KiB) that follow each other closely share
 * one ZeroMQ message of up to 64 KiB, which the server puts with one
 * cistern_put_batch(). The message leaves when it is full, when a call must
 * wait for credit, on flush, producer_done and close, or at the latest a
 * linger (cistern_remote_opts.linger_us, 1 ms by default) after its first
 * sample, sent by the connection's own thread. A put on a connection idle
 * for a linger leaves at once.
 *
 * Routing: the sample with sim_id s goes to rank s mod R, unless a
 * cistern_route_fn says otherwise, so every simulation stays on one rank.
 *
 * Security: a server binds loopback (tcp://127.0.0.1, tcp://[::1],
 * tcp://localhost, ipc://) without keys; any other endpoint needs CurveZMQ
 * keys (its secret key and the public keys of the clients it admits), or the
 * server refuses to start. Keys are 40-character Z85 strings.
 *
 * A struct cistern_remote belongs to one thread at a time, as a struct
 * cistern does (the connection's own thread, which sends a gathered message
 * when its linger runs out, takes a lock the calls take too); after fork()
 * the child must not use its parent's connection (it may
 * cistern_remote_connect() its own).
 */

/** Length of a CurveZMQ key in its Z85 text form, without the terminating NUL. */
#define CISTERN_KEY_LEN 40
/** The protocol version that HELLO carries (see docs/REMOTE.md). */
#define CISTERN_REMOTE_PROTOCOL 2
/**
 * Default window, the samples a connection may have in flight: at most
 * this many, and at most as many as fit in CISTERN_REMOTE_WINDOW_BYTES of
 * slots (at least 16).
 */
#define CISTERN_REMOTE_WINDOW 4096
/** Bytes of slot_size the default window may cover. */
#define CISTERN_REMOTE_WINDOW_BYTES (UINT64_C(64) << 20)

/** An opaque connection of a remote producer to a server. */
struct cistern_remote;

/**
 * Options of cistern_remote_connect(). Zero-initialise, then set `size` to
 * sizeof(struct cistern_remote_opts): fields a later version appends are
 * then read as 0 by it. NULL opts is all defaults (no CurveZMQ).
 */
struct cistern_remote_opts {
	size_t size; /**< sizeof(struct cistern_remote_opts) */
	/** the server's public key (Z85), or NULL for a server without CurveZMQ */
	const char *server_key;
	/** this client's key pair (Z85), needed with server_key; NULL: a fresh pair */
	const char *public_key;
	const char *secret_key;
	/** how long connect waits for the server's answer; 0 = 5000 ms, < 0 forever */
	int connect_timeout_ms;
	/** ZeroMQ heartbeat interval on the connection; 0 = 1000 ms */
	int heartbeat_ivl_ms;
	/** a peer silent this long is taken for dead; 0 = 5 * heartbeat_ivl_ms */
	int heartbeat_timeout_ms;
	/** samples in flight asked for; 0 = what the server grants (it may grant fewer) */
	uint32_t window;
	/**
	 * how long a small put may wait to leave with the puts after it (see
	 * cistern_remote_put()); 0 = 1000 us; < 0: every put leaves by itself
	 */
	int32_t linger_us;
};

/** What a connection knows of its server, and its counts (cistern_remote_info_get()). */
struct cistern_remote_info {
	uint64_t slot_size; /**< largest payload: the smallest slot_size of the server's segments */
	uint64_t producer_id; /**< this connection's random 64-bit id, in the server's log */
	uint32_t ranks;       /**< segments the server routes to */
	uint32_t window;      /**< samples in flight granted */
	uint64_t sent;        /**< samples handed to the connection */
	uint64_t acked;       /**< of those, acknowledged: in their segment */
	uint64_t failed;      /**< of those, refused by the server (see cistern_remote_put()) */
};

/**
 * Connect to a server and say HELLO; returns once the server answered.
 * @param endpoint "tcp://HOST:PORT" or "ipc://PATH"
 * @param opts     may be NULL
 * @return 0; -EINVAL (bad endpoint or options, a key that is not Z85);
 *         -ETIMEDOUT if no answer came in time (a client the server refuses
 *         for its key gets no answer: ZeroMQ drops it silently);
 *         -EPROTONOSUPPORT if the server speaks another protocol version;
 *         -ENOTSUP for keys without CurveZMQ in libzmq; -ENOMEM.
 */
CISTERN_API int cistern_remote_connect(const char *endpoint, const struct cistern_remote_opts *opts,
				       struct cistern_remote **out);

/**
 * Send `len` bytes as one sample, as cistern_put() puts one: meta->sim_id
 * (which picks the rank) and time_step are taken; meta may be NULL (sim_id
 * 0). meta->sample_id is not written: the segment assigns it later. Returns
 * once the sample is handed to the connection under a credit, waiting while
 * the window is full: sent, or gathered to leave within the linger (see
 * "Gathering" above); either way `buf` may be reused at once. An error the server met with an earlier sample (the
 * segment's -EPIPE once reception closed, -ERANGE) is returned by the next
 * call, once; that sample counts as failed, not acked.
 * @return 0; -EMSGSIZE if len > slot_size; -EAGAIN/-ETIMEDOUT while the
 *         window stays full; -ECONNRESET once the server is gone or stopped
 *         (close and connect again; docs/REMOTE.md says which samples are in
 *         doubt); -EPIPE, -ERANGE as above; -EINVAL.
 */
CISTERN_API int cistern_remote_put(struct cistern_remote *r, const void *buf, size_t len,
				   const struct cistern_meta *meta, int timeout_ms);

/**
 * Send up to `n` samples, laid out as for cistern_put_batch(): sample i is the
 * len[i] bytes at buf + i * stride (len NULL: stride bytes each), meta[i] its
 * meta (may be NULL). Sends as many as the window admits now, or, if none,
 * waits for the first as cistern_remote_put() does. The samples are gathered
 * as puts are, even with gathering off for puts; on an idle connection, or
 * with gathering off, the last message leaves before the call returns.
 * @return the number sent (1 to n); the errors of cistern_remote_put();
 *         -EINVAL (n = 0 or above INT_MAX, buf NULL, len[i] > stride).
 */
CISTERN_API int cistern_remote_put_batch(struct cistern_remote *r, const void *buf, size_t stride,
					 size_t n, const size_t *len,
					 const struct cistern_meta *meta, int timeout_ms);

/**
 * Wait until every sample sent so far is acknowledged or failed.
 * @return 0; -ETIMEDOUT/-EAGAIN; -ECONNRESET once the server is gone or
 *         stopped (as every call on the connection from then on:
 *         cistern_remote_info_get() says which samples are in); the first
 *         error the server reported since the last call that returned one.
 */
CISTERN_API int cistern_remote_flush(struct cistern_remote *r, int timeout_ms);

/**
 * Flush, then declare this producer done, as cistern_producer_done() does:
 * the server counts it done on every rank it sent a sample to whose segment
 * expects producers (cfg.expected_producers > 0). Further puts fail -EPIPE.
 * @return 0; the errors of cistern_remote_flush().
 */
CISTERN_API int cistern_remote_producer_done(struct cistern_remote *r, int timeout_ms);

/** The server's parameters and this connection's counts. @return 0 or -EINVAL. */
CISTERN_API int cistern_remote_info_get(const struct cistern_remote *r,
					struct cistern_remote_info *info);

/**
 * The schema of the server's segments (they all have the same), as
 * cistern_schema_get() gives it.
 * @return its length (0 without a schema); -ERANGE if cap is too small; -EINVAL.
 */
CISTERN_API ssize_t cistern_remote_schema_get(const struct cistern_remote *r, char *buf,
					      size_t cap);

/**
 * Say goodbye and free the connection. Samples not yet acknowledged are not
 * waited for (flush first); those already sent still reach their segment if
 * the server can put them (close lets them leave for up to a second). On a
 * fork() child's copy it frees the copy and leaves the parent's connection
 * alone. A producer that closes without
 * cistern_remote_producer_done() detached cleanly: neither done nor died.
 * @return 0, or -EINVAL for NULL.
 */
CISTERN_API int cistern_remote_close(struct cistern_remote *r);

/**
 * Make a CurveZMQ key pair in Z85 text.
 * @param public_key receives CISTERN_KEY_LEN characters and a NUL
 * @param secret_key receives CISTERN_KEY_LEN characters and a NUL
 * @return 0; -ENOTSUP if libzmq was built without CurveZMQ.
 */
CISTERN_API int cistern_remote_keygen(char public_key[CISTERN_KEY_LEN + 1],
				      char secret_key[CISTERN_KEY_LEN + 1]);

/**
 * Pick the rank of a sample: return a number below `ranks`. Called by the
 * server's thread for every sample; a result >= ranks fails that sample
 * with -ERANGE (reported to its producer).
 */
typedef uint32_t (*cistern_route_fn)(const struct cistern_meta *meta, uint32_t ranks, void *arg);

/** A line of the server's log (no newline), and its level: 0 info, 1 warning, 2 error. */
typedef void (*cistern_log_fn)(int level, const char *line, void *arg);

/** An opaque server. */
struct cistern_server;

/** Options of cistern_server_create(); zero-initialise, then set `size`. */
struct cistern_server_opts {
	size_t size; /**< sizeof(struct cistern_server_opts) */
	/** endpoints to bind ("tcp://127.0.0.1:5555", "ipc:///run/x"), n_endpoints of them */
	const char *const *endpoints;
	size_t n_endpoints;
	/** segments, existing, attached by name: segments[i] is rank i */
	const char *const *segments;
	uint32_t ranks;
	/** samples in flight granted per producer; 0 = the default (see CISTERN_REMOTE_WINDOW) */
	uint32_t window;
	/** NULL: sim_id mod ranks */
	cistern_route_fn route;
	void *route_arg;
	/** log lines go here; NULL: no log (the library never prints) */
	cistern_log_fn log;
	void *log_arg;
	/**
	 * The server's CurveZMQ key pair (Z85). secret_key NULL: no CurveZMQ
	 * (loopback only). public_key is not needed by the server (clients
	 * are given it) and may be NULL.
	 */
	const char *public_key;
	const char *secret_key;
	/** the client public keys admitted (Z85), n_client_keys of them */
	const char *const *client_keys;
	size_t n_client_keys;
	/** heartbeats, as in struct cistern_remote_opts */
	int heartbeat_ivl_ms;
	int heartbeat_timeout_ms;
	/** CISTERN_ATTACH_ANY_OWNER to attach other users' segments */
	uint32_t attach_flags;
	uint32_t reserved_; /**< must be 0 */
};

/** What a server did so far (cistern_server_stats_get()). */
struct cistern_server_stats {
	uint64_t producers;  /**< producers that said HELLO */
	uint64_t live;       /**< connected now */
	uint64_t done;       /**< that declared done */
	uint64_t died;       /**< lost without done (dead, or their network dropped) */
	uint64_t refused;    /**< clients refused (a key not admitted) */
	uint64_t received;   /**< samples received */
	uint64_t put;        /**< samples put into a segment (acknowledged) */
	uint64_t failed;     /**< samples refused (their producer was told why) */
	uint64_t queued;     /**< samples received and not yet in a segment, now */
	uint64_t queued_max; /**< the most ever queued at once */
};

/**
 * Attach the segments and bind the endpoints. Refuses a non-loopback
 * endpoint without CurveZMQ keys, segments of different schemas, and a
 * ranks of 0.
 * @return 0; -EINVAL (bad options; the log says which);
 *         -EACCES for a non-loopback endpoint without keys; -EADDRINUSE;
 *         the errors of cistern_attach_flags().
 */
CISTERN_API int cistern_server_create(const struct cistern_server_opts *opts,
				      struct cistern_server **out);

/**
 * Serve: receive, put, acknowledge, until cistern_server_stop() or until
 * timeout_ms passed (negative: until stopped).
 * @return 0 when stopped or the time is up; -errno of ZeroMQ.
 */
CISTERN_API int cistern_server_run(struct cistern_server *s, int timeout_ms);

/**
 * Ask a running cistern_server_run() to return soon. Async-signal-safe:
 * call it from a SIGTERM handler.
 */
CISTERN_API void cistern_server_stop(struct cistern_server *s);

/** The server's counts. @return 0 or -EINVAL. */
CISTERN_API int cistern_server_stats_get(const struct cistern_server *s,
					 struct cistern_server_stats *st);

/**
 * Stop cleanly: refuse new samples, put those received (waiting up to
 * drain_timeout_ms for room; what is left then is failed and its producers
 * told), acknowledge, tell every producer that the server is going, detach
 * the segments (a clean detach: what they hold stays) and free.
 * @return 0; -ETIMEDOUT if samples had to be failed; -EINVAL.
 */
CISTERN_API int cistern_server_close(struct cistern_server *s, int drain_timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* CISTERN_H */
