/* SPDX-License-Identifier: MIT */
/*
 * cistern/admin.h - inspection, listing, removal, garbage collection, dump and restore.
 *
 * The calls the `cistern` command and monitoring are built on. They are part
 * of libcistern (pkg-config cistern): include this header beside cistern.h,
 * whose conventions hold here too.
 */
#ifndef CISTERN_ADMIN_H
#define CISTERN_ADMIN_H

#include <cistern.h>

#ifdef __cplusplus
extern "C" {
#endif

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
	/**
	 * valid when status == 0; config.schema and config.cold_dir are NULL here
	 * (open the segment to read them)
	 */
	struct cistern_config config;
	uint64_t file_size;       /**< bytes of the shm object */
	uint64_t created_ns;      /**< header's creation time, else the file's mtime */
	uint32_t uid;             /**< owner of the shm object */
	uint32_t mode;            /**< its permission bits */
	uint64_t population;      /**< samples held (status == 0) */
	uint32_t procs_live;      /**< attachments whose owner lives */
	uint32_t procs_dead;      /**< attachments whose owner died without detaching */
	uint32_t closed;          /**< reception closed */
	uint64_t cold_population; /**< of population, the samples in the cold tier */
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

/** A cold file that cistern_gc_cold() found without its segment. */
struct cistern_gc_cold_report {
	char path[4096];                 /**< DIR/cistern.NAME.cold */
	char name[CISTERN_NAME_MAX + 1]; /**< NAME, from the file's name */
	/**
	 * Why it is garbage: 1 no segment NAME exists; 2 segment NAME exists
	 * but is another one (it has no cold tier, or another creation nonce
	 * than the file's header); 3 the file has no whole header (a create
	 * that died half-way) or its header names another segment.
	 */
	int why;
	int removed; /**< 1 if it was removed (in a dry run: would be) */
	int error;   /**< 0, or -errno of its removal (then removed = 0) */
};
/** Called by cistern_gc_cold() on each cold file it removes or would remove. */
typedef void (*cistern_gc_cold_fn)(const struct cistern_gc_cold_report *rep, void *arg);

/**
 * Remove the cold files in directory `dir` whose segment is gone: each
 * regular file named cistern.NAME.cold whose header (name and creation nonce,
 * docs/protocol/tiers.md) matches no segment NAME that exists now. A cold
 * file whose segment exists with the same nonce is never removed, nor one
 * whose segment cannot be judged (being created, damaged, another build's),
 * nor one changed in the last CISTERN_GC_GRACE_S seconds (a create or a
 * restore may be under way), nor a symbolic link (never followed), nor
 * another user's file unless CISTERN_GC_ANY_OWNER. Flags:
 * CISTERN_GC_DRY_RUN (remove nothing; report what the real run would),
 * CISTERN_GC_ANY_OWNER.
 * @param fn  may be NULL; called on each file found, with what was done
 * @return the number of such files found (removed, or that a dry run would
 *         remove); -EINVAL for a NULL or empty dir or an unknown flag;
 *         -errno of opening the directory.
 */
CISTERN_API int cistern_gc_cold(const char *dir, unsigned flags, cistern_gc_cold_fn fn, void *arg);

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
 * is described in lib/admin/dump_format.h.
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
	uint64_t samples;           /**< samples in the dump, hot and cold */
	uint64_t payload_bytes;     /**< their payload bytes */
	uint64_t skipped;           /**< samples that moved while copied, left out */
	uint64_t next_id;           /**< restored segments give new samples ids from here */
	uint64_t created_ns;        /**< when the source segment was created */
	uint64_t dumped_ns;         /**< when the dump was taken */
	uint64_t file_size;         /**< bytes of the dump file */
	uint32_t format_version;    /**< the file's format: 1 to CISTERN_DUMP_VERSION */
	uint32_t closed;            /**< reception was closed */
	/**
	 * The segment's schema text ("" for none). config.schema points here, so
	 * it is valid while this struct is, and a copy of the struct still points
	 * into the original.
	 */
	char schema[CISTERN_SCHEMA_MAX];
	/** of samples, those of the cold tier (format 3; 0 without a cold tier) */
	uint64_t cold_samples;
	/**
	 * The segment's cold_dir ("" without a cold tier); config.cold_dir
	 * points here. stats.cold_slots and the stats' cold counters (spilled,
	 * reads, evictions) are the source's; stats.cold_population is
	 * cold_samples, and stats.cold_disk_bytes is 0.
	 */
	char cold_dir[CISTERN_COLD_DIR_MAX + 1];
};
/**
 * The newest dump format this build writes and reads. A segment whose
 * policy keeps the samples' flags (the end-of-episode marks of a
 * SimPairedReservoir or a prioritized segment) is dumped in format 4, which adds them; one with a cold tier in
 * format 3, which adds its cold samples; any other in format 2, which older
 * builds read too. It reads formats 1 (written by builds before schemas),
 * 2 (which added the segment's schema), 3 and 4. Samples of a file before
 * format 4 restore with flags 0.
 */
#define CISTERN_DUMP_VERSION 4

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
 * segment with them. A segment with a cold tier is dumped with its cold
 * samples (format 3), read from its cold file with O_DIRECT through io_uring
 * and each checked against its CRC; a cold sample that moves while read is
 * left out and counted in `skipped`, as a hot one.
 * @param progress may be NULL; called with (slots scanned, slot_count, arg)
 * @param info     may be NULL; receives what was written
 * @return 0; -EINVAL for a NULL path; the errors of cistern_open_readonly();
 *         -EPROTO also if a segment read without a mapping (see
 *         cistern_open_readonly()) is found shrunk during the dump (nothing is
 *         written over `path` then); -ENOTSUP if this build cannot read the
 *         slots of the segment's policy; -ENAMETOOLONG if the temporary file's
 *         path is too long; -ENOMEM; -errno of the file I/O or of the cold
 *         file (its reads are checked against each sample's CRC: -EIO if one
 *         does not match).
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
 * its temporary name, and cistern_gc() removes it. A dump of a segment with
 * a cold tier makes the tier again, in the cold_dir and with the cold_slots
 * stored in the dump (info->cold_dir): its cold file is made under the
 * temporary name, then named for `name` just before the segment is; a
 * restore that fails removes it too, and one whose process dies leaves a
 * cold file that cistern_gc() or cistern_gc_cold() removes.
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
 *         cistern_create() (for a cold tier: -ENOENT for a missing cold_dir,
 *         -EINVAL for one without O_DIRECT, -ENOSPC for a disk that cannot
 *         hold it); -EEXIST also for a file already at the cold file's path;
 *         -errno of the file I/O.
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

#ifdef __cplusplus
}
#endif

#endif /* CISTERN_ADMIN_H */
