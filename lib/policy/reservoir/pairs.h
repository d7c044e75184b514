/* SPDX-License-Identifier: MIT */
/*
 * pairs.h - SimPairedReservoir's index of (sim_id, time_step) (pairs.c) (internal).
 */
#ifndef CISTERN_PAIRS_H
#define CISTERN_PAIRS_H

#include "core/policy.h"

/* Index slot `index`, just committed with key (sim, step). */
void cistern__pairs_publish(struct cistern *c, uint64_t index, uint32_t sim, uint32_t step);
void cistern__pairs_forget(struct cistern *c, uint64_t index);
/* Held, unseen, unpinned, and with neither neighbour held: no read can reach it. */
bool cistern__pairs_is_orphan(struct cistern *c, uint64_t index, void *arg);
/* Some pair is held now, so a read can still make a sample evictable. */
bool cistern__pairs_any_held(struct cistern *c);

#endif
