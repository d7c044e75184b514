/* SPDX-License-Identifier: MIT */
/*
 * gather.h - cistern_get_batch() of the reservoirs in one pass (gather.c) (internal).
 */
#ifndef CISTERN_GATHER_H
#define CISTERN_GATHER_H

#include "core/policy.h"

/* cistern_get_batch() in one pass for a reader holding nothing; -EAGAIN = general path. */
int cistern__rs_gather_now(struct cistern *c, struct cistern_sample *tmp, size_t n,
			   const struct cistern_gather *g);

#endif
