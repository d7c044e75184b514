/* SPDX-License-Identifier: MIT */
/*
 * prioritized.h - the prioritized policy's sum tree and the calls the public
 * API (api/prioritized.c) and the tests make of it (internal). The design is
 * in docs/protocol/priorities.md.
 */
#ifndef CISTERN_PRIORITIZED_H
#define CISTERN_PRIORITIZED_H

#include <stddef.h>
#include <stdint.h>

#include "core/handle.h"

struct cistern_prio_info;

/* An id: the slot in the low 28 bits, the low 36 bits of the sample id above. */
#define CISTERN__PRIO_SLOT_BITS 28
#define CISTERN__PRIO_SLOT_MASK ((UINT64_C(1) << CISTERN__PRIO_SLOT_BITS) - 1)

static inline uint64_t cistern__prio_id(uint64_t sample_id, uint64_t slot)
{
	return (sample_id << CISTERN__PRIO_SLOT_BITS) | slot;
}

/* A priority a caller may give: finite and >= 0. */
static inline int cistern__prio_ok(double q)
{
	return q >= 0 && q <= 1.7976931348623157e308; /* NaN fails both */
}

/*
 * Draw up to n samples by priority, each pinned (reception open, with
 * replacement) or taken (after close), with their ids and weights (either may
 * be NULL). The count, or -EAGAIN (nothing to draw now; open: fewer than n),
 * or -errno. Never waits. The caller runs it in the reader's bracket.
 */
int cistern__prio_draw(struct cistern *c, struct cistern_sample *out, size_t n, uint64_t *ids,
		       double *weights);
/* Give slot->index_, reserved by this handle, the priority q (checked) for its commit. */
int cistern__prio_set_reserved(struct cistern *c, const struct cistern_slot *slot, double q);
/* Apply priorities q[i] (checked) to ids[i]: how many applied; the rest counted as stale. */
int cistern__prio_update(struct cistern *c, const uint64_t *ids, const double *q, size_t n);
int cistern__prio_set_beta(struct cistern *c, double beta);
void cistern__prio_info(const struct cistern *c, struct cistern_prio_info *info);
/*
 * Under the lock: does every leaf agree with its slot's state and priority,
 * and every inner node with its children? 0, or -EPROTO at the first that
 * does not (its node number in *where if not NULL). For tests and tools.
 */
int cistern__prio_check(struct cistern *c, uint64_t *where);

#endif
