/* SPDX-License-Identifier: MIT */
/*
 * dump.h - the dump engine (dump.c) (internal).
 */
#ifndef CISTERN_DUMP_H
#define CISTERN_DUMP_H

#include "core/handle.h"
#include "cistern/admin.h"
#include "core/policy.h"
#include "admin/dump_io.h"
#include "admin/restore.h"

/* How many names a dump or a restore tries before it gives up (-EEXIST). */
#define CISTERN__TEMP_TRIES 16

/*
 * dump.c: the dump engine. For the benchmark: CISTERN__DUMP_PLAIN writes with a
 * pwrite() loop, CISTERN__DUMP_BUFFERED keeps io_uring but without O_DIRECT.
 * CISTERN__DUMP_NOREPLACE (gc): an existing file at the path is never
 * replaced, the dump fails with -EEXIST instead. CISTERN__DUMP_DEAD_HELD
 * (gc, on a segment nobody alive is attached to): the samples dead
 * processes held are saved too, as their reclaim would leave them
 * (cistern__held_once_reclaimed()).
 */
enum {
	CISTERN__DUMP_PLAIN = 1u << 0,
	CISTERN__DUMP_BUFFERED = 1u << 1,
	CISTERN__DUMP_NOREPLACE = 1u << 2,
	CISTERN__DUMP_DEAD_HELD = 1u << 3,
};
int cistern__dump_ex(const char *name, const char *path, unsigned flags,
		     cistern_progress_fn progress, void *arg, struct cistern_dump_info *info);
/* The same from a handle already open on segment `name` (read-only or not; gc's own). */
int cistern__dump_handle(struct cistern *c, const char *name, const char *path, unsigned flags,
			 cistern_progress_fn progress, void *arg, struct cistern_dump_info *info);

/*
 * dump.c, for a segment nobody alive is attached to: whether a slot whose
 * word is `word` holds a sample once the dead are reclaimed (held, acquired
 * by a dead reader, or being evicted by a dead producer), and its seen count
 * then (the reads dead readers never released taken off, as their reclaim
 * does). gc's count of unread samples and its dump share these.
 */
bool cistern__held_once_reclaimed(const struct cistern_snap_ops *so, uint64_t word);
uint32_t cistern__seen_once_reclaimed(const struct cistern *c, const struct cistern_slotmeta *m,
				      uint64_t word, const struct cistern_snap_ops *so);

#endif
