/* SPDX-License-Identifier: MIT */
/*
 * windows.h - windows of one simulation (windows.c): SimPairedReservoir's,
 * and the prioritized policy's (internal). Both keep the (sim_id, time_step)
 * index of pairs.c at the start of their policy index.
 */
#ifndef CISTERN_WINDOWS_H
#define CISTERN_WINDOWS_H

#include "core/policy.h"

/* The policy's try_acquire_window and windows_drained (struct cistern_ops). */
int cistern__windows_try_acquire(struct cistern *c, struct cistern_sample *out, size_t length,
				 size_t step);
bool cistern__windows_drained(struct cistern *c, size_t length, size_t step);
/* The shape (length << 32 | step) a reader last waited for, or 0. */
uint64_t cistern__windows_wanted(struct cistern *c);
/* Held, unseen, unpinned, and in no complete window of the shape `wanted`. */
bool cistern__windows_is_orphan(struct cistern *c, uint64_t index, uint64_t wanted);
/* Some complete window of the shape `wanted` is held now. */
bool cistern__windows_any_held(struct cistern *c, uint64_t wanted);
/*
 * Is the sample in slot x the last member of a complete window of this
 * shape now? A hint: nothing is pinned.
 */
bool cistern__windows_ends_at(struct cistern *c, uint64_t x, size_t length, size_t step);
/*
 * Pin (open) or take (closed) the members of the complete window of this
 * shape whose last member is the sample in slot x, into out[0 .. length):
 * 0, or -EBUSY if there is none now (nothing is left pinned or taken).
 */
int cistern__windows_take_ending(struct cistern *c, struct cistern_sample *out, uint64_t x,
				 size_t length, size_t step, bool closed);

#endif
