/* SPDX-License-Identifier: MIT */
/*
 * reservoir_read.h - the reservoirs' reads: drawing, pinning and batches (reservoir_read.c) (internal).
 */
#ifndef CISTERN_RESERVOIR_READ_H
#define CISTERN_RESERVOIR_READ_H

#include "core/policy.h"

/* n samples back at once: what cistern__rs_release_generic() does to each, one wake. */
int cistern__rs_release_batch(struct cistern *c, struct cistern_sample *s, size_t n);
/* A reservoir's try_acquire_batch and try_acquire (one sample). */
int cistern__rs_try_acquire_n(struct cistern *c, struct cistern_sample *out, size_t n);
int cistern__rs_try_acquire(struct cistern *c, struct cistern_sample *s);
/*
 * May a read of n pinned samples start (reception open)? 0 with *taken as
 * cistern__rs_rate_take() says (the caller settles it), -EAGAIN, or the pin bit's error.
 */
int cistern__rs_open_read_ready(struct cistern *c, size_t n, uint64_t *taken);
/*
 * Draw and pin batch members while held samples are dense;
 * gathering (gather.c), the pins are left uncounted, the sole reader's for
 * the caller to confirm, and the sole reader prefetches each member's
 * payload for the caller's copy.
 */
void cistern__rs_stream_pinned(struct cistern *c, struct cistern_sample *out, size_t n, size_t *got,
			       size_t *dups, uint64_t probes, bool gather);

#endif
