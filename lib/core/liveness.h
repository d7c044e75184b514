/* SPDX-License-Identifier: MIT */
/*
 * liveness.h - which attachments are alive, and their reclaim (liveness.c)
 * (internal).
 */
#ifndef CISTERN_LIVENESS_H
#define CISTERN_LIVENESS_H

#include "core/fork.h"
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

/* liveness.c: sweep, telling `fn` about each dead entry just before reclaiming it. */
typedef void (*cistern__reclaim_observer)(struct cistern *c, uint32_t index, void *arg);
int cistern__sweep_observed(struct cistern *c, cistern__reclaim_observer fn, void *arg);
/* Byte 0 gc lock: shared while attaching, exclusive while deciding to unlink. */
int cistern__gc_lock(int fd, short type, bool wait);

#endif
