/* SPDX-License-Identifier: MIT */
/*
 * prioritized.c - the public calls of prioritized sampling: argument checks
 * and waiting, around the draws and updates of the policy's descriptor
 * (core/policy.h's struct cistern__priorities), as api.c does for the other
 * reads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/open.h"
#include "core/liveness.h"
#include "core/policy.h"
#include "core/roles.h"
#include "core/wait.h"
#include "api/reads.h"

/* A handle that may move samples of a prioritized segment: 0 or -errno. */
static int usable(const struct cistern *c)
{
	if (!c)
		return -EINVAL;
	if (c->readonly || !c->owner || c->inherited)
		return -EBADF;
	return c->policy->prio ? 0 : -EINVAL;
}

int cistern_put_prioritized(struct cistern *c, const void *buf, size_t len,
			    struct cistern_meta *meta, double priority, int timeout_ms)
{
	int r = usable(c);
	if (r < 0)
		return r;
	if ((!buf && len) || !cistern__prio_ok(priority))
		return -EINVAL;
	if (cistern__len_misfit(c, len))
		return -EMSGSIZE;
	struct cistern_slot slot;
	r = cistern_reserve(c, &slot, timeout_ms);
	if (r < 0)
		return r;
	if (len)
		memcpy(slot.data, buf, len);
	r = c->policy->prio->set_reserved(c, &slot, priority);
	if (r == 0)
		r = cistern_commit(c, &slot, len, meta);
	if (r < 0)
		cistern_abort(c, &slot);
	return r;
}

/* A draw of n to wait for (reads.h). */
struct draw_req {
	struct cistern_sample *s;
	size_t n;
	uint64_t *ids;
	double *weights;
};

static int try_draw(struct cistern *c, const void *arg)
{
	const struct draw_req *q = arg;
	bool plain = cistern__read_begin(c);
	int r = c->policy->prio->draw(c, q->s, q->n, q->ids, q->weights);
	cistern__read_end(c, plain);
	return r;
}

static bool draw_drained(struct cistern *c, const void *arg)
{
	(void)arg;
	return c->ops->drained(c);
}

/* Draw, and while there is nothing, look for end of data and wait (api.c's read_loop). */
static int draw_loop(struct cistern *c, struct cistern_sample *s, size_t n, uint64_t *ids,
		     double *weights, int timeout_ms)
{
	const struct draw_req q = {s, n, ids, weights};
	const struct cistern__read_try t = {try_draw, draw_drained, &q};
	int r = cistern__read_wait(c, &t, timeout_ms);
	if (r > 0)
		c->holding += (uint64_t)r; /* as api.c's holding_add(): released below */
	return r;
}

/* Sample records kept on the stack; more are malloc'd. */
#define DRAW_ON_STACK 64

int cistern_get_prioritized(struct cistern *c, void *buf, size_t stride, size_t n, size_t *len,
			    struct cistern_meta *meta, uint64_t *ids, double *weights,
			    int timeout_ms)
{
	int r = usable(c);
	if (r < 0)
		return r;
	if (!buf || n == 0 || n > INT32_MAX)
		return -EINVAL;
	struct cistern_sample local[DRAW_ON_STACK];
	struct cistern_sample *s = n <= DRAW_ON_STACK ? local : malloc(n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	int got = draw_loop(c, s, n, ids, weights, timeout_ms);
	if (got > 0) {
		/* A misfit is not read: every sample goes back as if never drawn. */
		r = cistern__copy_out(c, s, (size_t)got, buf, stride, len, meta);
		if (r == 0)
			r = cistern_release_batch(c, s, (size_t)got);
		if (r < 0)
			got = r;
	}
	if (s != local)
		free(s);
	return got;
}

/* A batch of windows to wait for (reads.h). */
struct window_req {
	struct cistern_sample *s;
	size_t n, length, step;
	uint64_t *ids;
	double *weights;
};

static int try_windows(struct cistern *c, const void *arg)
{
	const struct window_req *q = arg;
	bool plain = cistern__read_begin(c);
	int r = c->policy->prio->draw_windows(c, q->s, q->n, q->length, q->step, q->ids,
					      q->weights);
	cistern__read_end(c, plain);
	return r;
}

/* End of data is when no complete window of the shape is left. */
static bool window_drained(struct cistern *c, const void *arg)
{
	const struct window_req *q = arg;
	return c->ops->windows_drained(c, q->length, q->step);
}

/* draw_loop() for up to n windows: how many, or -errno. */
static int window_loop(struct cistern *c, const struct window_req *q, int timeout_ms)
{
	const struct cistern__read_try t = {try_windows, window_drained, q};
	int r = cistern__read_wait(c, &t, timeout_ms);
	if (r > 0)
		c->holding += (uint64_t)r * q->length; /* as draw_loop(): released below */
	return r;
}

/* Window members drawn in one call, at most: a longer batch is drawn in parts. */
#define WINDOW_MEMBERS_MAX 4096

/* The first of s's got windows with a member cistern__copy_out() refuses; got if none. */
static size_t first_misfit(const struct cistern *c, const struct cistern_sample *s, size_t got,
			   size_t length, size_t stride)
{
	for (size_t i = 0; i < got * length; i++)
		if (s[i].len > stride || s[i].len > c->slot_size)
			return i / length;
	return got;
}

/*
 * Copy out the got windows drawn into s, to window `at` of the caller's
 * arrays, and release them. A window with a misfit and those after it go
 * back unread. How many were copied (the misfit's index), or -errno.
 */
static int copy_windows(struct cistern *c, struct cistern_sample *s, size_t got, size_t length,
			size_t at, void *buf, size_t stride, size_t *len, struct cistern_meta *meta)
{
	size_t fit = first_misfit(c, s, got, length, stride);
	size_t m = fit * length, base = at * length;
	int r = 0;
	if (m > 0) {
		r = cistern__copy_out(c, s, m, (char *)buf + base * stride, stride,
				      len ? len + base : NULL, meta ? meta + base : NULL);
		if (r == 0)
			r = cistern_release_batch(c, s, m);
	}
	/* Every window from the misfit on: copy_out() finds it and gives them all back. */
	if (r == 0 && fit < got)
		cistern__copy_out(c, s + m, (got - fit) * length, buf, stride, NULL, NULL);
	return r < 0 ? r : (int)fit;
}

int cistern_get_prioritized_windows(struct cistern *c, void *buf, size_t stride, size_t n,
				    size_t length, size_t step, size_t *len,
				    struct cistern_meta *meta, uint64_t *ids, double *weights,
				    int timeout_ms)
{
	int r = usable(c);
	if (r < 0)
		return r;
	if (!buf || n == 0 || n > INT32_MAX || length == 0 || length > c->slot_count)
		return -EINVAL;
	/* Windows drawn per call: all n in one hold of the tree's lock unless they are many. */
	size_t per = length < WINDOW_MEMBERS_MAX ? WINDOW_MEMBERS_MAX / length : 1;
	if (per > n)
		per = n;
	struct cistern_sample local[DRAW_ON_STACK];
	struct cistern_sample *s = per * length <= DRAW_ON_STACK
					   ? local
					   : malloc(per * length * sizeof(*s));
	if (!s)
		return -ENOMEM;
	size_t done = 0;
	while (done < n) {
		size_t want = n - done < per ? n - done : per;
		/* The first part waits; the others take what is there now. */
		struct window_req q = {s,
				       want,
				       length,
				       step,
				       ids ? ids + done : NULL,
				       weights ? weights + done : NULL};
		r = window_loop(c, &q, done ? 0 : timeout_ms);
		if (r < 0)
			break;
		size_t got = (size_t)r;
		r = copy_windows(c, s, got, length, done, buf, stride, len, meta);
		if (r < 0)
			break;
		done += (size_t)r;
		if ((size_t)r < got) {
			r = done ? 0 : -EMSGSIZE;
			break;
		}
		if (got < want)
			break;
	}
	if (s != local)
		free(s);
	return done > 0 ? (int)done : r;
}

int cistern_update_priorities(struct cistern *c, const uint64_t *ids, const double *priorities,
			      size_t n)
{
	int r = usable(c);
	if (r < 0)
		return r;
	if (n == 0)
		return 0;
	if (!ids || !priorities || n > INT32_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!cistern__prio_ok(priorities[i]))
			return -EINVAL;
	return c->policy->prio->update(c, ids, priorities, n);
}

int cistern_set_beta(struct cistern *c, double beta)
{
	int r = usable(c);
	return r < 0 ? r : c->policy->prio->set_beta(c, beta);
}

int cistern_prio_info_get(const struct cistern *c, struct cistern_prio_info *info)
{
	if (!c || !info)
		return -EINVAL;
	if (c->inherited)
		return -EBADF;
	if (!c->policy->prio)
		return -EINVAL;
	/* A read-only handle on a copy reads no policy index (segment.c). */
	if (!c->index)
		return -EOPNOTSUPP;
	c->policy->prio->info(c, info);
	return 0;
}
