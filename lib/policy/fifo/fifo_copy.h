/* SPDX-License-Identifier: MIT */
/*
 * fifo_copy.h - the FIFO's calls that copy: the one-step put and get, and
 * the batches (fifo_copy.c) (internal).
 */
#ifndef CISTERN_FIFO_COPY_H
#define CISTERN_FIFO_COPY_H

#include "core/policy.h"

/*
 * set the handle's put_step and get_step: cistern_put() and
 * cistern_get() on a FIFO, in one step when the slot is ready, else through
 * the slow path the caller hands them (api.c: reserve or acquire, waiting
 * as needed), with the copies this processor runs best; NULL for a
 * read-only handle or one without its attachment. The FIFO's set_steps.
 */
void cistern__fifo_steps(struct cistern *c);
/*
 * the samples of a cistern_put_batch() on a FIFO there is room
 * for now, stopping before one longer than the stride or a slot: how many
 * (0: none, the caller waits for the first); -EPIPE if reception closed
 * while the first was claimed. The caller checked the handle and n.
 */
ssize_t cistern__fifo_put_now(struct cistern *c, size_t n, const struct cistern_scatter *s);
/* cistern_get_batch() on a FIFO; the caller checked the handle and n. */
int cistern__fifo_get_batch(struct cistern *c, char *buf, size_t stride, size_t n, size_t *len,
			    struct cistern_meta *meta, int timeout_ms, cistern__get_fn *get_one);

#endif
