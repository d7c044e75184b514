/* SPDX-License-Identifier: MIT */
/*
 * cistern.h - the public interface of libcistern: segments, their policies and
 * schemas. cistern/admin.h adds inspection, gc, dump and restore (also in
 * libcistern); cistern/remote.h the remote producers and the server, in
 * libcistern-remote, the one cistern library that links ZeroMQ.
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
/** Longest cold_dir of struct cistern_config, in bytes. */
#define CISTERN_COLD_DIR_MAX 255

/** Default slot payload size when the config leaves it 0. */
#define CISTERN_DEFAULT_SLOT_SIZE 4096
/** Default number of slots when the config leaves it 0. */
#define CISTERN_DEFAULT_SLOT_COUNT 1024
/** Default size of the attachment table when the config leaves it 0. */
#define CISTERN_DEFAULT_MAX_PROCS 64

/** The sampling policies (see docs/POLICIES.md for their exact semantics). */
enum cistern_policy {
	CISTERN_FIFO = 0,                 /**< first in, first out, each sample once */
	CISTERN_FIRO = 1,                 /**< first in, random out, pseudo_epochs reads each */
	CISTERN_RESERVOIR = 2,            /**< random reads; evicts a random seen sample */
	CISTERN_FIFO_EVICT_RESERVOIR = 3, /**< random reads; evicts the oldest (seen) sample */
	CISTERN_SIM_PAIRED_RESERVOIR = 4, /**< reads pairs (x_t, x_t+1) of one simulation */
	CISTERN_BATCH_RESERVOIR = 5,      /**< reads batches of batch_size distinct samples */
	CISTERN_PRIORITIZED = 6, /**< draws by priority^alpha; evicts a random seen sample */
};
#define CISTERN_POLICY_COUNT 7

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
	uint32_t sweep_size;        /**< SimPairedReservoir, windows: sim_id < sweep_size */
	uint32_t nb_time_steps;     /**< with sweep_size: time_step < nb_time_steps */
	uint32_t batch_size;        /**< BatchReservoir: samples per batch */
	uint64_t seed;              /**< random seed; 0 = seeded from the clock */
	uint32_t max_procs;         /**< attachment table size; 0 = default */
	uint32_t
		expected_producers; /**< reception closes after this many cistern_producer_done() (0 = only by cistern_close_reception); see CISTERN_DEAD_PRODUCER_DONE */
	uint32_t
		flags; /**< CISTERN_LOSSY, CISTERN_SINGLE_PRODUCER, CISTERN_SINGLE_READER, CISTERN_DEAD_PRODUCER_DONE */
	/**
	 * Reservoir kinds (Reservoir, BatchReservoir, FIFOEvictReservoir,
	 * SimPairedReservoir, prioritized): a sample leaves the buffer once it
	 * was read this many times; 0 = never (it stays until a producer evicts
	 * it). A read counts when it is handed out, and the sample leaves when
	 * the last reader holding it lets go (a release, or the end of a copy
	 * read); its slot is then free for a put, and it counts in
	 * cistern_stats.seen_hist, not in evictions. No sample is handed out
	 * more than this many times; a read given back (cistern_unacquire(), or
	 * a reader that died holding it) does not count. Create refuses it for
	 * FIFO and FIRO (which read each sample once or pseudo_epochs times),
	 * with a cold tier, and under a reads_per_put above it. This field was
	 * the reserved word that had to be 0: a config from before it reads 0.
	 */
	uint32_t max_times_sampled;
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
	/**
	 * CISTERN_PRIORITIZED only (0 for the others): a draw picks sample i with
	 * probability (q_i + epsilon)^alpha / sum_j (q_j + epsilon)^alpha, q the
	 * priorities, and weighs it (N P(i))^-beta / max_j (N P(j))^-beta
	 * (docs/protocol/priorities.md). alpha from 0 (uniform) to 8, beta from
	 * 0 to 1 (cistern_set_beta() changes it later), epsilon >= 0; all finite.
	 */
	double alpha;
	double beta;
	double epsilon;
	/**
	 * A cold tier on disk (docs/protocol/tiers.md): cold_slots slots in the
	 * file cold_dir/cistern.NAME.cold, allocated in full at create and read
	 * and written with O_DIRECT through io_uring. The population is the hot
	 * slots plus the cold ones. FIFO (a spill ring after the hot ring),
	 * Reservoir and BatchReservoir take one; create refuses it for the other
	 * policies, naming the reason. 0 = no tier.
	 */
	uint64_t cold_slots;
	const char *cold_dir; /**< the cold file's directory, up to CISTERN_COLD_DIR_MAX bytes */
};

/**
 * Flag of cistern_meta.flags: this sample is the last step of its episode.
 * The policies that read windows (SimPairedReservoir, prioritized) keep it
 * with the sample, and no window (cistern_acquire_window()) runs past it.
 * The other policies keep no flags.
 */
#define CISTERN_META_END_OF_EPISODE (1u << 0)

/**
 * Metadata carried by every sample. Zero-initialise it (for example
 * `struct cistern_meta m = {0}`) before setting the fields a put takes.
 */
struct cistern_meta {
	uint64_t sample_id; /**< assigned by the segment at commit: unique, increasing */
	uint32_t sim_id;    /**< the producer's simulation id */
	uint32_t time_step; /**< the producer's time step */
	/**
	 * CISTERN_META_END_OF_EPISODE or 0. A put on a SimPairedReservoir keeps
	 * it, and reads give it back; other bits are reserved and ignored, and
	 * the other policies read back 0.
	 */
	uint32_t flags;
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
 *         With a cold tier, also: -EINVAL with no config problem if the
 *         file system of cold_dir refuses O_DIRECT; -ENOSPC if its disk
 *         cannot hold the cold file; -ENOSYS or -EPERM if this process may
 *         not use io_uring (kernel.io_uring_disabled, a seccomp filter);
 *         another -errno of open() or fallocate() of the cold file. Nothing
 *         is left behind after an error.
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
 * @return 0; -EMSGSIZE if len is above slot_size or, in a segment with a
 *         schema, is not its sample size (the slot stays reserved);
 *         -EINVAL if this handle does not hold the slot reserved (never
 *         reserved, or already committed or aborted); -ERANGE under a
 *         SimPairedReservoir (or a prioritized segment with a sweep_size)
 *         for a sim_id of sweep_size or more or a time_step of
 *         nb_time_steps or more (the slot stays reserved).
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
 * @return 0; -EMSGSIZE if len is above slot_size or, in a segment with a
 *         schema, is not its sample size; -EINVAL if buf is NULL with
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
 * sample that cistern_put() would refuse for its length, or longer than
 * stride, ends the batch before it: the call that meets it first returns
 * -EMSGSIZE (longer than slot_size, or not the schema's sample size) or
 * -EINVAL (longer than stride) and puts nothing. Every policy accepts it.
 * @return the number of samples put (1 to n); -EINVAL if n is 0 or above
 *         INT_MAX, buf is NULL, or the first sample is longer than stride;
 *         -EMSGSIZE if cistern_put() would refuse the first sample's length
 *         (above slot_size, or not the schema's sample size); -ERANGE as
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
 * Count one of cfg.expected_producers as died before done, for a producer
 * that has no attachment of its own: one that puts through a server
 * (cistern/remote.h), whose connection was lost. It counts as a local
 * producer's death does: with CISTERN_DEAD_PRODUCER_DONE it ends that
 * producer, and the call that completes the count closes reception; without
 * the flag it ends nothing. Never blocks.
 * @return the number of producers still expected; -EINVAL if the segment
 *         expects no producers; -EBADF as cistern_producer_done().
 */
CISTERN_API int cistern_producer_died(struct cistern *c);

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
 * Acquire a window of `length` samples of one simulation (SimPairedReservoir,
 * or a prioritized segment with a sweep_size, which draws it by priority as
 * cistern_get_prioritized_windows() does, without ids and weights): members
 * k = 0 .. length-1 have the same sim_id and time steps
 * t + k * step. A window is complete when every time step from t to
 * t + (length-1) * step is held (the steps between members too), their
 * sample ids increase with the step, and none but the last carries
 * CISTERN_META_END_OF_EPISODE: a window never crosses an episode's end, nor
 * mixes samples of two runs of one sim_id. The call draws uniformly among
 * the complete windows held now and pins the members together until
 * cistern_release_window(); each member counts as read. After reception
 * closes, each window is handed out once and its members removed, and end
 * of data comes when no complete window of this shape is left. The call
 * waits for a window as cistern_acquire() waits for a sample.
 * cistern_acquire_pair() reads the windows of length 2 and step 1, but
 * without the checks on sample ids and episode ends.
 * @param out     receives the members, in time order (length of them)
 * @param length  members of the window, from 1 to nb_time_steps
 * @param step    time steps from one member to the next, 1 or more, with
 *                (length-1) * step < nb_time_steps
 * @return 0; CISTERN_EOD; -EAGAIN; -ETIMEDOUT; -EINVAL under another
 *         policy, for a NULL out, or for a length or step out of range;
 *         -EDEADLK if the rate limiter could never admit `length` reads at
 *         once (cistern_read_problem()); -EBUSY, -EUSERS, -EPROTO and
 *         -ENOMEM as cistern_acquire().
 */
CISTERN_API int cistern_acquire_window(struct cistern *c, struct cistern_sample *out, size_t length,
				       size_t step, int timeout_ms);

/**
 * Release a window acquired with cistern_acquire_window(). Never blocks.
 * @return 0, or -EINVAL if this handle does not hold a member (the others
 *         are released all the same).
 */
CISTERN_API int cistern_release_window(struct cistern *c, struct cistern_sample *out,
				       size_t length);

/**
 * Copy up to n windows out, as cistern_acquire_window() draws them, into
 * one array laid out (n, length, stride): member k of window i goes to
 * buf + (i * length + k) * stride, its length to len[i * length + k] and its
 * metadata to meta[i * length + k] (len and meta may be NULL). The first
 * window waits as cistern_acquire_window() does; the others are drawn
 * without waiting, each independently of the others (two windows may
 * share members), and the call returns early, with those it has, when one
 * is not there at once.
 * A window with a member longer than stride ends the batch before it and
 * is handed back unread; if it is the first, the call returns -EMSGSIZE.
 * @return the number of windows (1 to n); CISTERN_EOD; -EAGAIN; -ETIMEDOUT;
 *         -EMSGSIZE if a member of the first window is longer than stride
 *         (nothing is read); -EINVAL for a NULL buf, an n of 0 or above
 *         INT32_MAX, or as cistern_acquire_window(); the errors of
 *         cistern_acquire_window().
 */
CISTERN_API int cistern_get_windows(struct cistern *c, void *buf, size_t stride, size_t n,
				    size_t length, size_t step, size_t *len,
				    struct cistern_meta *meta, int timeout_ms);

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
	/* The cold tier (struct cistern_config.cold_slots); all 0 without one. */
	uint64_t cold_slots;      /**< slots of the cold tier */
	uint64_t cold_population; /**< samples held in the cold tier (part of population) */
	uint64_t cold_disk_bytes; /**< bytes of the cold file */
	uint64_t cold_spilled;    /**< samples moved from memory to the cold tier */
	uint64_t cold_reads;      /**< cold samples read back */
	uint64_t cold_evictions;  /**< cold samples evicted (counted in evictions too) */
	/*
	 * The cold file's I/O, appended after the fields above. Bytes count
	 * when their I/O completes; the waits are the time processes spent
	 * blocked until cold writes or reads completed (a read ahead running
	 * in the background counts only the wait that collects it). A dump's
	 * reads are not counted.
	 */
	uint64_t cold_bytes_written; /**< bytes written to the cold file */
	uint64_t cold_bytes_read;    /**< bytes read from the cold file */
	uint64_t cold_write_wait_ns; /**< time spent waiting for cold writes */
	uint64_t cold_read_wait_ns;  /**< time spent waiting for cold reads */
	/*
	 * A FIFO's staging runs (docs/protocol/tiers.md, "Staging runs"),
	 * appended after the fields above; 0 for other tiers. Cold puts copy
	 * their samples there; a group of them goes to disk in one write.
	 */
	uint64_t cold_stage_bytes;    /**< bytes of the staging runs in the segment */
	uint64_t cold_groups_staged;  /**< groups staged, their write not started */
	uint64_t cold_groups_writing; /**< groups being written (or not yet collected) */
	uint64_t cold_write_waits;    /**< times a put waited for a group's write */
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
/* Prioritized sampling (CISTERN_PRIORITIZED, docs/protocol/priorities.md)    */
/* ======================================================================== */

/*
 * A prioritized segment draws sample i with probability p_i^alpha / sum_j
 * p_j^alpha, p = priority + epsilon, and hands out with each sample an id and
 * an importance weight w_i = (N P(i))^-beta / max_j (N P(j))^-beta. Learners
 * send new priorities back by id. cistern_put(), cistern_acquire(),
 * cistern_get() and cistern_get_batch() work on it too: a put without a
 * priority gets the largest seen so far, and a read draws by priority.
 */

/**
 * Put one sample with priority `priority` (finite, >= 0), waiting for room as
 * cistern_put() does.
 * @return 0; -EINVAL for a priority that is NaN, infinite or negative, or on
 *         another policy; the errors of cistern_put().
 */
CISTERN_API int cistern_put_prioritized(struct cistern *c, const void *buf, size_t len,
					struct cistern_meta *meta, double priority, int timeout_ms);

/**
 * Draw n samples by priority and copy them out as cistern_get_batch() does:
 * sample k to buf + k * stride, its length to len[k], its metadata to
 * meta[k], its id to ids[k] and its importance weight (in (0, 1]) to
 * weights[k]; len, meta, ids and weights may be NULL. While reception is open
 * the draws are independent, with replacement, and the call waits (as
 * cistern_get_batch()) until the population reaches the watermark. After
 * close, each sample drawn is taken out, and the last batch may be short.
 * @return the number of samples; CISTERN_EOD; -EAGAIN; -ETIMEDOUT;
 *         -EMSGSIZE if a sample is longer than stride (nothing is read);
 *         -EINVAL for n = 0, or on another policy;
 *         -EBUSY, -EUSERS, -EPROTO and -ENOMEM as cistern_acquire().
 */
CISTERN_API int cistern_get_prioritized(struct cistern *c, void *buf, size_t stride, size_t n,
					size_t *len, struct cistern_meta *meta, uint64_t *ids,
					double *weights, int timeout_ms);

/**
 * Draw up to n windows by priority and copy them out as
 * cistern_get_windows() does (member k of window i to
 * buf + (i * length + k) * stride, its length and metadata to
 * len[i * length + k] and meta[i * length + k]), with each window's id in
 * ids[i] and its importance weight (in (0, 1]) in weights[i]; len, meta,
 * ids and weights may be NULL. Only a prioritized segment created with a
 * sweep_size (and nb_time_steps) has windows: `length` samples of one
 * simulation, `step` time steps apart, complete as cistern_acquire_window()
 * says (no episode's end before the last member). A window's priority is
 * its last member's: a window is drawn with probability proportional to
 * that member's (priority + epsilon)^alpha among the complete windows held
 * now, and its id is that member's, so cistern_update_priorities() on it
 * sets the priority of every window ending there (and of that sample's
 * own draws). The weight is (least leaf / this leaf)^beta, the least over
 * every sample held (docs/protocol/priorities.md, "Windows"). Draws are
 * independent while reception is open; after close each window is taken
 * out. The first window waits as cistern_get_windows() does. The windows
 * are drawn together in one hold of the segment's tree lock, up to 4096
 * members' worth at a time: puts wait for the draw of a batch.
 * @return the number of windows (1 to n); CISTERN_EOD; -EAGAIN; -ETIMEDOUT;
 *         -EMSGSIZE if a member of the first window is longer than stride
 *         (nothing is read); -EINVAL for a NULL buf, an n of 0 or above
 *         INT32_MAX, a length or step out of range, on another policy, or
 *         on a segment without a sweep_size; -EBUSY, -EUSERS, -EPROTO and
 *         -ENOMEM as cistern_acquire().
 */
CISTERN_API int cistern_get_prioritized_windows(struct cistern *c, void *buf, size_t stride,
						size_t n, size_t length, size_t step, size_t *len,
						struct cistern_meta *meta, uint64_t *ids,
						double *weights, int timeout_ms);

/**
 * Set the priorities of n samples by the ids a prioritized read gave, from
 * any attached process, in one call. An id whose sample left the buffer
 * since (or that names no slot of this segment, or that another segment
 * gave) is ignored and counted in
 * cistern_prio_info.stale_updates. Never blocks for long: it takes the
 * segment's tree lock once.
 * @return how many were applied; -EINVAL if a priority is NaN, infinite or
 *         negative (nothing is applied), or on another policy.
 */
CISTERN_API int cistern_update_priorities(struct cistern *c, const uint64_t *ids,
					  const double *priorities, size_t n);

/**
 * Change beta, the exponent of the importance weights, for every reader of
 * the segment. Never blocks.
 * @return 0; -EINVAL for a beta outside [0, 1] or on another policy.
 */
CISTERN_API int cistern_set_beta(struct cistern *c, double beta);

/** The parameters and totals of a prioritized segment. */
struct cistern_prio_info {
	double alpha, beta, epsilon; /**< beta as it is now */
	double total;                /**< sum of p^alpha over the samples held */
	double least;                /**< smallest p^alpha held, 0 if none */
	double max_priority;         /**< largest priority seen (the default of a put) */
	uint64_t updates;            /**< priorities applied by cistern_update_priorities() */
	uint64_t stale_updates;      /**< ids it ignored */
	uint64_t rebuilds;           /**< tree rebuilds after a process died holding its lock */
};

/**
 * Read a prioritized segment's parameters and totals, without its lock.
 * Never blocks.
 * @return 0; -EINVAL on another policy; -EBADF on a handle a fork() child inherited;
 *         -EOPNOTSUPP on a read-only handle that reads a copy of the segment.
 */
CISTERN_API int cistern_prio_info_get(const struct cistern *c, struct cistern_prio_info *info);

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
 * The library stores and describes the schema, and holds every put to its
 * length: cistern_put(), cistern_put_batch() and cistern_commit() refuse a
 * sample of any other length than the schema's sample size with -EMSGSIZE,
 * and write nothing (so one bad put cannot block the readers of a segment).
 * Puts and gets still move bytes: the library does not look inside them.
 * The Python package and the `cistern` command check what they put and read
 * against the fields as well.
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

#ifdef __cplusplus
}
#endif

#endif /* CISTERN_H */
