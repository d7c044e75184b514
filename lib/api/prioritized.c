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

/* One window to wait for (reads.h). */
struct window_req {
	struct cistern_sample *s;
	size_t length, step;
	uint64_t *id;
	double *weight;
};

static int try_window(struct cistern *c, const void *arg)
{
	const struct window_req *q = arg;
	bool plain = cistern__read_begin(c);
	int r = c->policy->prio->draw_window(c, q->s, q->length, q->step, q->id, q->weight);
	cistern__read_end(c, plain);
	return r;
}

/* End of data is when no complete window of the shape is left. */
static bool window_drained(struct cistern *c, const void *arg)
{
	const struct window_req *q = arg;
	return c->ops->windows_drained(c, q->length, q->step);
}

/* draw_loop() for one window. */
static int window_loop(struct cistern *c, struct cistern_sample *s, size_t length, size_t step,
		       uint64_t *id, double *weight, int timeout_ms)
{
	const struct window_req q = {s, length, step, id, weight};
	const struct cistern__read_try t = {try_window, window_drained, &q};
	int r = cistern__read_wait(c, &t, timeout_ms);
	if (r == 0)
		c->holding += length; /* as draw_loop(): released by the caller */
	return r;
}

/* Where the windows of a batch go beside their members: their ids and weights. */
struct window_batch {
	size_t step;
	uint64_t *ids;
	double *weights;
};

/* cistern__get_windows_by()'s take for window i: one drawn by priority. */
static int take_window(struct cistern *c, struct cistern_sample *s, size_t length, size_t i,
		       int timeout_ms, void *arg)
{
	const struct window_batch *b = arg;
	return window_loop(c, s, length, b->step, b->ids ? &b->ids[i] : NULL,
			   b->weights ? &b->weights[i] : NULL, timeout_ms);
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
	struct window_batch b = {step, ids, weights};
	return cistern__get_windows_by(c, buf, stride, n, length, len, meta, timeout_ms,
				       take_window, &b);
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
