/* SPDX-License-Identifier: MIT */
/*
 * windows.h - SimPairedReservoir's windows of one simulation (windows.c) (internal).
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

#endif
