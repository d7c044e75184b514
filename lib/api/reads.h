/* SPDX-License-Identifier: MIT */
/*
 * reads.h - what the read calls of api.c and prioritized.c share
 * (internal): the reader's bracket around one try, the wait for something
 * to read, the copy out, and the loop over a batch of windows. One place, so that the prioritized reads wait,
 * find end of data, copy and refuse a sample too long for its place as the
 * others do.
 */
#ifndef CISTERN_API_READS_H
#define CISTERN_API_READS_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include <cistern.h>

#include "core/liveness.h"
#include "core/roles.h"
#include "core/wait.h"

/*
 * A reservoir reader in the automatic role runs each read call (never a
 * wait) inside the role's bracket (roles.c): inside, it pins and counts with
 * plain stores as the holder of CISTERN_SINGLE_READER does, unless a second
 * reader took the role away. Anyone else: nothing to do.
 */
static inline bool cistern__read_begin(struct cistern *c)
{
	return cistern__reads_in_calls(c) && cistern__auto_read_begin(c);
}

static inline void cistern__read_end(struct cistern *c, bool plain)
{
	if (plain)
		cistern__auto_read_end(c);
}

/*
 * One read to wait for: try_once() tries it once, in the reader's bracket,
 * and returns >= 0 or -errno, -EAGAIN for nothing yet; drained() says that
 * nothing more it could read will come (end of data but for a sweep).
 */
struct cistern__read_try {
	int (*try_once)(struct cistern *c, const void *arg);
	bool (*drained)(struct cistern *c, const void *arg);
	const void *arg;
};

/*
 * Take the reader role, then try, and while there is nothing yet, check for
 * end of data and wait as timeout_ms says. What the last try returned,
 * CISTERN_EOD, or the error of the role or of the wait.
 */
static inline int cistern__read_wait(struct cistern *c, const struct cistern__read_try *t,
				     int timeout_ms)
{
	int r = cistern__add_role(c, CISTERN_ROLE_READER);
	if (r < 0)
		return r;
	struct cistern_waiter w;
	cistern__wait_init(&w, CISTERN_WAIT_DATA, timeout_ms);
	for (;;) {
		r = t->try_once(c, t->arg);
		if (r != -EAGAIN)
			break;
		if (t->drained(c, t->arg)) {
			/*
			 * A reader that died holding a sample is found only by a
			 * sweep; end of data now would drop that sample for good.
			 * Reclaim first, and look again if anything came back.
			 */
			if (cistern__sweep(c) > 0)
				continue;
			/*
			 * The sweep skips entries whose lock is held: one being
			 * reclaimed right now may still hand samples back. Wait
			 * for it (its end wakes every sleeper).
			 */
			if (!cistern__reclaim_under_way(c)) {
				r = CISTERN_EOD;
				break;
			}
		}
		r = cistern__wait(c, &w);
		if (r < 0)
			break;
	}
	cistern__wait_done(c, &w);
	return r;
}

/*
 * Copy the n samples s[0..n) that this handle holds to buf, one every stride
 * bytes, their lengths to len[0..n) and their metadata to meta[0..n) (either
 * may be NULL); they stay held, for the caller to release. If any is longer
 * than stride (or than a slot, which only a damaged segment says), nothing
 * is copied: every one goes back to the segment as if never read, and the
 * call returns -EMSGSIZE. Else 0.
 */
int cistern__copy_out(struct cistern *c, struct cistern_sample *s, size_t n, void *buf,
		      size_t stride, size_t *len, struct cistern_meta *meta);

/*
 * Take window i of a batch into s[0 .. length), held by this handle, waiting
 * as timeout_ms says: 0 or -errno.
 */
typedef int (*cistern__take_window_fn)(struct cistern *c, struct cistern_sample *s, size_t length,
				       size_t i, int timeout_ms, void *arg);

/*
 * Up to n windows of length members, each taken by take() and copied out as
 * cistern_get_windows() says, then released. The first waits as timeout_ms
 * says, the others only if there now. The number of windows copied, or the
 * first one's error (an error after the first ends the batch there).
 */
int cistern__get_windows_by(struct cistern *c, void *buf, size_t stride, size_t n, size_t length,
			    size_t *len, struct cistern_meta *meta, int timeout_ms,
			    cistern__take_window_fn take, void *arg);

#endif
