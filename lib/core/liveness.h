/* SPDX-License-Identifier: MIT */
/*
 * liveness.h - which attachments are alive, their reclaim, and the lock descriptors a
 * fork() child gives up (liveness.c, fork.c) (internal).
 */
#ifndef CISTERN_LIVENESS_H
#define CISTERN_LIVENESS_H

#include "core/handle.h"

/* liveness.c */
/*
 * Take a free or dead entry of the table for c; `producer`: the owner attaches
 * as a counted producer (CISTERN_ATTACH_PRODUCER). 0, or -EUSERS.
 */
int cistern__claim_entry(struct cistern *c, bool producer);
void cistern__release_entry(struct cistern *c);
/* Reclaim every dead attachment; returns how many were reclaimed. */
int cistern__sweep(struct cistern *c);
/*
 * True while some entry is being reclaimed (by a sweeper or a detaching owner),
 * or is dead and not reclaimed yet: samples may be about to come back for
 * redelivery, so end of data must wait (and sweep again).
 */
bool cistern__reclaim_under_way(struct cistern *c);
/* The same for entry i alone (RECLAIMING, or its intent lock held). */
bool cistern__entry_reclaiming(struct cistern *c, uint32_t i);
/* 1 if attachment index i is held by a live process, 0 if not, <0 on error. */
int cistern__entry_alive(int fd, uint32_t index);
/* Take (hold) or let go of entry index's intent lock by fd, never waiting; 0 or -errno. */
int cistern__hold_intent(int fd, uint32_t index, bool hold);

/*
 * fork.c: shm_open(shm, oflag | O_CLOEXEC, mode) into *fd, listed in l so
 * that a fork() child closes it and, if `handle` is set, makes its copy of
 * the handle inherited (cistern__disown()); 0 or -errno. Close it with
 * cistern__lockfd_close(), which closes the descriptor too.
 */
int cistern__lockfd_open(struct cistern__lockfd *l, int *fd, struct cistern *handle,
			 const char *shm, int oflag, mode_t mode);
/*
 * fork.c: cistern__shm_open_existing() (segment.c) into *fd, listed as
 * cistern__lockfd_open() lists its descriptor.
 */
int cistern__lockfd_open_existing(struct cistern__lockfd *l, int *fd, struct cistern *handle,
				  const char *name, int access, struct stat *st);
void cistern__lockfd_close(struct cistern__lockfd *l);
/*
 * fork.c: entry `index` is l's now (claimed, marked ACTIVE): let go of its
 * intent lock under the list's mutex, so that not while a fork is under way.
 */
void cistern__lockfd_claimed(struct cistern__lockfd *l, uint32_t index);
/* fork.c: l's entry is being given up (a detach): forks no longer mark it. */
void cistern__lockfd_released(struct cistern__lockfd *l);
/* segment.c: in a fork() child, make its copy of c refuse every call but detach. */
void cistern__disown(struct cistern *c);

/* liveness.c: sweep, telling `fn` about each dead entry just before reclaiming it. */
typedef void (*cistern__reclaim_observer)(struct cistern *c, uint32_t index, void *arg);
int cistern__sweep_observed(struct cistern *c, cistern__reclaim_observer fn, void *arg);
/* Byte 0 gc lock: shared while attaching, exclusive while deciding to unlink. */
int cistern__gc_lock(int fd, short type, bool wait);

#endif
