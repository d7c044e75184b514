/* SPDX-License-Identifier: MIT */
/*
 * api.c - the public put/get calls: argument checks, waiting, end of data.
 * The policies (fifo.c, ...) only ever try once; this file decides whether to
 * wait, for how long, and what a failed wait means.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/prefetch.h"
#include "core/roles.h"
#include "core/wait.h"
#include "core/open.h"
#include "core/liveness.h"
#include "core/policy.h"
#include "api/reads.h"

/*
 * c->holding counts this handle's reservations and acquisitions not yet
 * committed, aborted or released. Only the public calls below move it, and
 * only on success, so it can err high (a failed release leaves it up) but
 * never low; at zero, cistern_detach() knows that no slot names this handle
 * and skips the walk over every slot (liveness.c).
 */
static inline void holding_add(struct cistern *c, size_t n)
{
	c->holding += n;
}

static inline void holding_sub(struct cistern *c, size_t n)
{
	c->holding -= n;
}

static int writable(const struct cistern *c)
{
	if (!c)
		return -EINVAL;
	return c->readonly || !c->owner ? -EBADF : 0;
}

int cistern_reserve(struct cistern *c, struct cistern_slot *slot, int timeout_ms)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!slot)
		return -EINVAL;
	r = cistern__add_role(c, CISTERN_ROLE_PRODUCER);
	if (r < 0)
		return r;
	struct cistern_waiter w;
	cistern__wait_init(&w, CISTERN_WAIT_SPACE, timeout_ms);
	for (;;) {
		/* [close] a plain load of a line written once: cheap on the hot path. */
		if (atomic_load_explicit(&c->hdr->closed, memory_order_acquire)) {
			r = -EPIPE;
			break;
		}
		r = c->ops->try_reserve(c, slot);
		if (r != -EAGAIN)
			break;
		r = cistern__wait(c, &w);
		if (r < 0)
			break;
	}
	cistern__wait_done(c, &w);
	if (r == 0 && atomic_load_explicit(&c->hdr->closed, memory_order_seq_cst)) {
		/*
		 * [close] seq_cst, after the claim: reception closed while we
		 * claimed; readers may already have concluded end of data, so
		 * this sample must not appear.
		 */
		c->ops->abort(c, slot);
		r = -EPIPE;
	}
	if (r == 0)
		holding_add(c, 1);
	return r;
}

int cistern_commit(struct cistern *c, struct cistern_slot *slot, size_t len,
		   struct cistern_meta *meta)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!slot)
		return -EINVAL;
	if (cistern__len_misfit(c, len))
		return -EMSGSIZE;
	r = c->ops->commit(c, slot, len, meta);
	if (r == 0)
		holding_sub(c, 1);
	return r;
}

int cistern_abort(struct cistern *c, struct cistern_slot *slot)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!slot)
		return -EINVAL;
	r = c->ops->abort(c, slot);
	if (r == 0)
		holding_sub(c, 1);
	return r;
}

/* cistern_put() through the general calls, for a caller that checked the arguments. */
static int put_slow(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta,
		    int timeout_ms)
{
	struct cistern_slot slot;
	int r = cistern_reserve(c, &slot, timeout_ms);
	if (r < 0)
		return r;
	if (len)
		memcpy(slot.data, buf, len);
	r = c->ops->commit(c, &slot, len, meta);
	if (r == 0 || c->ops->abort(c, &slot) == 0) /* e.g. -ERANGE: the put did not happen */
		holding_sub(c, 1);
	return r;
}

int cistern_put(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta,
		int timeout_ms)
{
	/*
	 * A FIFO handle's one step, which falls back to the general path
	 * itself: a tail call, after the checks below in their fewest
	 * instructions (put_step is set only for a writable FIFO handle).
	 */
	if (c && c->put_step && (buf || !len) && !cistern__len_misfit(c, len))
		return c->put_step(c, buf, len, meta, timeout_ms, put_slow);
	int r = writable(c);
	if (r < 0)
		return r;
	if (!buf && len)
		return -EINVAL;
	if (cistern__len_misfit(c, len))
		return -EMSGSIZE;
	return put_slow(c, buf, len, meta, timeout_ms);
}

/*
 * The samples of a batch there is room for now: the FIFO's own way
 * (fifo_copy.c), else one put after another that need not wait. How many;
 * 0 if none went in for want of room; else the first one's error.
 */
static ssize_t put_batch_now(struct cistern *c, size_t n, const struct cistern_scatter *s)
{
	/* A policy's own batch put: a FIFO's, with or without a cold tier (policy.h). */
	if ((c->put_step || c->ops != c->policy->ops) && c->policy->put_batch_now)
		return c->policy->put_batch_now(c, n, s);
	size_t k = 0;
	for (; k < n; k++) {
		size_t len = cistern__scatter_len(s, k);
		if (len > s->stride)
			break;
		int r = cistern_put(c, s->src + k * s->stride, len, s->meta ? &s->meta[k] : NULL,
				    0);
		if (r < 0) {
			if (k == 0 && r != -EAGAIN)
				return r;
			break;
		}
	}
	return (ssize_t)k;
}

int cistern_put_batch(struct cistern *c, const void *buf, size_t stride, size_t n,
		      const size_t *len, struct cistern_meta *meta, int timeout_ms)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!buf || n == 0 || n > INT_MAX)
		return -EINVAL;
	struct cistern_scatter s = {buf, stride, len, meta};
	ssize_t k = put_batch_now(c, n, &s);
	if (k != 0)
		return (int)k;
	/* No room for the first: wait for it as cistern_put() does (and let it say what is wrong). */
	size_t len0 = cistern__scatter_len(&s, 0);
	if (len0 > stride)
		return -EINVAL;
	r = cistern_put(c, buf, len0, meta, timeout_ms);
	if (r < 0)
		return r;
	if (n == 1)
		return 1;
	struct cistern_scatter rest = {s.src + stride, stride, len ? len + 1 : NULL,
				       meta ? meta + 1 : NULL};
	k = put_batch_now(c, n - 1, &rest);
	/* An error of the second sample is the next call's to report. */
	return 1 + (k > 0 ? (int)k : 0);
}

int cistern_close_reception(struct cistern *c)
{
	int r = writable(c);
	if (r < 0)
		return r;
	/* [close] seq_cst: ordered against reservations' re-checks and end-of-data checks. */
	atomic_store_explicit(&c->hdr->closed, 1, memory_order_seq_cst);
	cistern__wake_all(c->hdr);
	return 0;
}

int cistern_producer_done(struct cistern *c)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (c->fixed.expected_producers == 0)
		return -EINVAL;
	/* [producers-ended] seq_cst RMW, read back by cistern__producers_left(). */
	atomic_fetch_add_explicit(&c->hdr->producers_done, 1, memory_order_seq_cst);
	/*
	 * After the count, as in cistern__producer_gone(): dying in between
	 * counts this producer as done and as died, never as neither.
	 */
	atomic_store_explicit(&c->me->producing, CISTERN_COUNTED_DONE, memory_order_relaxed);
	return cistern__producers_left(c);
}

/*
 * A counted producer without an entry of its own died before done: a
 * remote one, for which the server put (remote_server.c, in
 * libcistern-remote, which calls it as public API). Counted as
 * cistern__producer_gone() counts a local one, so stats and the
 * CISTERN_DEAD_PRODUCER_DONE choice treat both alike (without the flag a
 * death ends nothing, and cistern__producers_left() counts the done ones only).
 * Returns how many expected producers have not ended, or -EINVAL without
 * expected producers.
 */
int cistern_producer_died(struct cistern *c)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (c->fixed.expected_producers == 0)
		return -EINVAL;
	/* [producers-ended] seq_cst RMW, read back by cistern__producers_left(). */
	atomic_fetch_add_explicit(&c->hdr->producers_died, 1, memory_order_seq_cst);
	return cistern__producers_left(c);
}

/* What a read tries: one sample, a pair or a batch. Returns >= 0 or -errno. */
struct read_req {
	enum { READ_ONE, READ_PAIR, READ_BATCH, READ_WINDOW } kind;
	struct cistern_sample *out;
	size_t n;    /* samples read: 1, 2, a batch's or a window's length */
	size_t step; /* READ_WINDOW: time steps between members */
};

static int try_read(struct cistern *c, const void *arg)
{
	const struct read_req *q = arg;
	bool plain = cistern__read_begin(c);
	int r;
	switch (q->kind) {
	case READ_ONE:
		r = c->ops->try_acquire(c, q->out);
		break;
	case READ_PAIR:
		r = c->ops->try_acquire_pair(c, q->out);
		break;
	case READ_WINDOW:
		r = c->ops->try_acquire_window(c, q->out, q->n, q->step);
		break;
	default:
		r = c->ops->try_acquire_batch(c, q->out, q->n);
		break;
	}
	cistern__read_end(c, plain);
	return r;
}

/* Release one sample (in the reader's bracket, reads.h); 0 or -errno. */
static int release_one(struct cistern *c, struct cistern_sample *s)
{
	bool plain = cistern__read_begin(c);
	int r = c->ops->release(c, s);
	cistern__read_end(c, plain);
	if (r == 0)
		holding_sub(c, 1);
	return r;
}

/* Hand one sample back as never read (in the reader's bracket); 0 or -errno. */
static int unacquire_one(struct cistern *c, struct cistern_sample *s)
{
	bool plain = cistern__read_begin(c);
	int r = c->ops->unacquire(c, s);
	cistern__read_end(c, plain);
	if (r == 0)
		holding_sub(c, 1);
	return r;
}

int cistern__copy_out(struct cistern *c, struct cistern_sample *s, size_t n, void *buf,
		      size_t stride, size_t *len, struct cistern_meta *meta)
{
	bool fits = true;
	for (size_t i = 0; i < n; i++)
		fits &= s[i].len <= stride && s[i].len <= c->slot_size;
	if (!fits) {
		for (size_t i = 0; i < n; i++)
			unacquire_one(c, &s[i]);
		return -EMSGSIZE;
	}
	/* The samples may sit anywhere: prefetch ahead of the copy (prefetch.h). */
	char *dst = buf;
	for (size_t i = 0; i < CISTERN_GATHER_AHEAD && i < n; i++)
		cistern__prefetch_payload(&s[i]);
	for (size_t i = 0; i < n; i++) {
		if (i + CISTERN_GATHER_AHEAD < n)
			cistern__prefetch_payload(&s[i + CISTERN_GATHER_AHEAD]);
		memcpy(dst + i * stride, s[i].data, s[i].len);
		if (len)
			len[i] = s[i].len;
		if (meta)
			meta[i] = s[i].meta;
	}
	return 0;
}

/* Whether nothing more that q reads can come (reads.h). */
static bool read_drained(struct cistern *c, const void *arg)
{
	const struct read_req *q = arg;
	return q->kind == READ_WINDOW ? c->ops->windows_drained(c, q->n, q->step)
				      : c->ops->drained(c);
}

/* Try, and while there is nothing yet, check for end of data and wait. */
static int read_loop(struct cistern *c, const struct read_req *q, int timeout_ms)
{
	const struct cistern__read_try t = {try_read, read_drained, q};
	int r = cistern__read_wait(c, &t, timeout_ms);
	size_t got = r < 0 ? 0 : q->kind == READ_BATCH ? (size_t)r : q->n;
	for (size_t i = 0; i < got; i++) {
		if (q->out[i].len > c->slot_size) {
			/*
			 * Only a damaged segment can say this; a caller reading len
			 * bytes would run past the slot. Give it back and refuse it.
			 */
			bool plain = cistern__read_begin(c);
			for (size_t j = 0; j < got; j++)
				c->ops->release(c, &q->out[j]);
			cistern__read_end(c, plain);
			return -EPROTO;
		}
	}
	holding_add(c, got);
	return r;
}

int cistern_acquire(struct cistern *c, struct cistern_sample *s, int timeout_ms)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!s)
		return -EINVAL;
	struct read_req q = {READ_ONE, s, 1, 0};
	return read_loop(c, &q, timeout_ms);
}

int cistern_acquire_pair(struct cistern *c, struct cistern_sample pair[2], int timeout_ms)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!pair || !c->ops->try_acquire_pair)
		return -EINVAL;
	struct read_req q = {READ_PAIR, pair, 2, 0};
	return read_loop(c, &q, timeout_ms);
}

int cistern_release_pair(struct cistern *c, struct cistern_sample pair[2])
{
	return cistern_release_batch(c, pair, 2);
}

int cistern_get_pair(struct cistern *c, void *buf[2], size_t cap, size_t len[2],
		     struct cistern_meta meta[2], int timeout_ms)
{
	if (!buf || !buf[0] || !buf[1] || !len)
		return -EINVAL;
	struct cistern_sample pair[2];
	int r = cistern_acquire_pair(c, pair, timeout_ms);
	if (r < 0)
		return r;
	if (pair[0].len > cap || pair[1].len > cap) {
		for (int i = 0; i < 2; i++)
			unacquire_one(c, &pair[i]);
		return -EMSGSIZE;
	}
	for (int i = 0; i < 2; i++) {
		memcpy(buf[i], pair[i].data, pair[i].len);
		len[i] = pair[i].len;
		if (meta)
			meta[i] = pair[i].meta;
	}
	return cistern_release_pair(c, pair);
}

/* -EINVAL unless a window of this shape can be read on c at all. */
static int window_problem(const struct cistern *c, size_t length, size_t step)
{
	if (!c->ops->try_acquire_window || length == 0 || step == 0)
		return -EINVAL;
	uint64_t span = ((uint64_t)length - 1) * step + 1;
	if (length > c->fixed.nb_time_steps || step >= (uint64_t)1 << 32 ||
	    span > c->fixed.nb_time_steps || length > c->slot_count)
		return -EINVAL;
	return 0;
}

static int read_refused(const struct cistern *c, size_t n);

int cistern_acquire_window(struct cistern *c, struct cistern_sample *out, size_t length,
			   size_t step, int timeout_ms)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!out || (r = window_problem(c, length, step)) < 0)
		return r < 0 ? r : -EINVAL;
	/* Before any wait: a window the rate limiter can never admit would wait for ever. */
	r = read_refused(c, length);
	if (r < 0)
		return r;
	struct read_req q = {READ_WINDOW, out, length, step};
	return read_loop(c, &q, timeout_ms);
}

int cistern_release_window(struct cistern *c, struct cistern_sample *out, size_t length)
{
	return cistern_release_batch(c, out, length);
}

/* Window members cistern__get_windows_by() keeps on the stack; longer windows are malloc'd. */
#define WINDOW_ON_STACK 16

int cistern__get_windows_by(struct cistern *c, void *buf, size_t stride, size_t n, size_t length,
			    size_t *len, struct cistern_meta *meta, int timeout_ms,
			    cistern__take_window_fn take, void *arg)
{
	struct cistern_sample local[WINDOW_ON_STACK];
	struct cistern_sample *s = length <= WINDOW_ON_STACK ? local : malloc(length * sizeof(*s));
	if (!s)
		return -ENOMEM;
	size_t got = 0;
	int r = 0;
	for (; got < n; got++) {
		r = take(c, s, length, got, got ? 0 : timeout_ms, arg);
		if (r < 0)
			break;
		/* A misfit is handed back unread. */
		size_t at = got * length;
		r = cistern__copy_out(c, s, length, (char *)buf + at * stride, stride,
				      len ? len + at : NULL, meta ? meta + at : NULL);
		if (r < 0)
			break;
		r = cistern_release_window(c, s, length);
		if (r < 0)
			break;
	}
	if (s != local)
		free(s);
	return got > 0 ? (int)got : r;
}

/* cistern_get_windows()'s take: a uniform window, *arg time steps between members. */
static int acquire_window(struct cistern *c, struct cistern_sample *s, size_t length, size_t i,
			  int timeout_ms, void *arg)
{
	(void)i;
	return cistern_acquire_window(c, s, length, *(const size_t *)arg, timeout_ms);
}

int cistern_get_windows(struct cistern *c, void *buf, size_t stride, size_t n, size_t length,
			size_t step, size_t *len, struct cistern_meta *meta, int timeout_ms)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!buf || n == 0 || n > INT32_MAX)
		return -EINVAL;
	if ((r = window_problem(c, length, step)) < 0)
		return r;
	return cistern__get_windows_by(c, buf, stride, n, length, len, meta, timeout_ms,
				       acquire_window, &step);
}

/* The most samples a segment holds: its hot slots and its cold ones. */
static uint64_t holds_at_most(const struct cistern *c)
{
	return c->slot_count + c->fixed.cold_slots;
}

/*
 * -EDEADLK if the policy's rate limiter could never admit a read of n on
 * this segment (it would wait for ever), else 0; 0 without a limiter.
 */
static int read_refused(const struct cistern *c, size_t n)
{
	const struct cistern__limiter *l = c->policy->limiter;
	return l ? l->refuses(&c->fixed, n) : 0;
}

int cistern_acquire_batch(struct cistern *c, struct cistern_sample *out, size_t n, int timeout_ms)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!c->ops->try_acquire_batch)
		return -EINVAL;
	if (n == 0)
		n = c->fixed.batch_size;
	if (!out || n == 0 || n > holds_at_most(c) || n > INT32_MAX)
		return -EINVAL;
	/* Before any wait: a batch the rate limiter can never admit would wait for ever. */
	r = read_refused(c, n);
	if (r < 0)
		return r;
	struct read_req q = {READ_BATCH, out, n, 0};
	return read_loop(c, &q, timeout_ms);
}

int cistern_release_batch(struct cistern *c, struct cistern_sample *s, size_t n)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!s)
		return -EINVAL;
	if (c->ops->release_batch) {
		bool plain = cistern__read_begin(c);
		r = c->ops->release_batch(c, s, n);
		cistern__read_end(c, plain);
		if (r == 0)
			holding_sub(c, n); /* on an error we cannot tell how many went: err high */
		return r;
	}
	int first = 0;
	for (size_t i = 0; i < n; i++) {
		r = release_one(c, &s[i]);
		if (r < 0 && first == 0)
			first = r;
	}
	return first;
}

/* Sample records a reservoir's cistern_get_batch() keeps on the stack; more are malloc'd. */
#define GET_BATCH_ON_STACK 64

int cistern_get_batch(struct cistern *c, void *buf, size_t stride, size_t n, size_t *len,
		      struct cistern_meta *meta, int timeout_ms)
{
	if (!c || !buf)
		return -EINVAL;
	if (n == 0)
		n = c->fixed.batch_size;
	if (n == 0 || n > holds_at_most(c))
		return -EINVAL;
	/* A policy's own batch read, unless a cold tier runs other ops (policy.h). */
	if (c->policy->get_batch && c->ops == c->policy->ops) {
		int r = writable(c);
		return r < 0 ? r
			     : c->policy->get_batch(c, buf, stride, n, len, meta, timeout_ms,
						    cistern_get);
	}
	/* As cistern_acquire_batch() does, before the one-pass try (which may find budget now). */
	int refused = read_refused(c, n);
	if (refused < 0)
		return refused;
	struct cistern_sample local[GET_BATCH_ON_STACK];
	struct cistern_sample *s = n <= GET_BATCH_ON_STACK ? local : malloc(n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (c->ops->gather_now) {
		/* A reader of a reservoir: in one pass, if it can (gather.c). */
		struct cistern_gather g = {buf, stride, len, meta};
		bool plain = cistern__read_begin(c);
		int r = c->ops->gather_now(c, s, n, &g);
		cistern__read_end(c, plain);
		if (r != -EAGAIN) {
			if (s != local)
				free(s);
			return r;
		}
	}
	c->gathering = true;
	int got = cistern_acquire_batch(c, s, n, timeout_ms);
	c->gathering = false;
	if (got >= 0) {
		int r = cistern__copy_out(c, s, (size_t)got, buf, stride, len, meta);
		if (r == 0)
			r = cistern_release_batch(c, s, (size_t)got);
		if (r < 0)
			got = r;
	}
	if (s != local)
		free(s);
	return got;
}

/* snprintf() into why[size] if there is room to say anything; returns err. */
static int say(int err, char *why, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int say(int err, char *why, size_t size, const char *fmt, ...)
{
	if (why && size) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, size, fmt, ap);
		va_end(ap);
	}
	return err;
}

int cistern_read_problem(const struct cistern *c, size_t n, char *why, size_t size)
{
	if (why && size)
		why[0] = '\0';
	if (!c)
		return say(-EINVAL, why, size, "no segment handle");
	const struct cistern_fixed *h = &c->fixed;
	if (n == 0)
		n = h->batch_size;
	if (n == 0)
		return say(-EINVAL, why, size,
			   "a read of 0 samples, and the segment has no batch_size");
	if (n > holds_at_most(c))
		return say(
			-EINVAL, why, size,
			"a read of %zu samples is more than the segment holds (slot_count %" PRIu64
			" + cold_slots %" PRIu64 ")",
			n, c->slot_count, h->cold_slots);
	if (c->policy->reads_whole_batches && n != h->batch_size)
		return say(-EINVAL, why, size,
			   "a BatchReservoir reads batches of exactly batch_size (%u), not %zu",
			   h->batch_size, n);
	int r = read_refused(c, n);
	if (r < 0) {
		uint64_t most = c->policy->limiter->grant(h->reads_per_put, h->rate_slack);
		return say(
			r, why, size,
			"a read of %zu samples could never start: with reads_per_put %g and "
			"rate_slack %g the rate limiter is sure to admit at most %" PRIu64
			" reads at once; read at most that many at a time, or create the segment "
			"with a rate_slack of at least %g (or 0, automatic)",
			n, h->reads_per_put, h->rate_slack, most,
			((double)n + h->reads_per_put) / 2);
	}
	return 0;
}

int cistern_release(struct cistern *c, struct cistern_sample *s)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!s)
		return -EINVAL;
	return release_one(c, s);
}

int cistern_unacquire(struct cistern *c, struct cistern_sample *s)
{
	int r = writable(c);
	if (r < 0)
		return r;
	/* The policies check that the slot is ours; a record never filled is not. */
	if (!s || !s->live_)
		return -EINVAL;
	return unacquire_one(c, s);
}

/* cistern_get() through the general calls, for a caller that checked buf and cap. */
static ssize_t get_slow(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta,
			int timeout_ms)
{
	struct cistern_sample s;
	int r = cistern_acquire(c, &s, timeout_ms);
	if (r < 0)
		return r;
	if (s.len > cap) {
		unacquire_one(c, &s);
		return -EMSGSIZE;
	}
	/* An empty sample may come with no buffer (buf NULL, cap 0): memcpy() takes no NULL. */
	if (s.len)
		memcpy(buf, s.data, s.len);
	if (meta)
		*meta = s.meta;
	size_t len = s.len;
	r = release_one(c, &s);
	return r < 0 ? r : (ssize_t)len;
}

ssize_t cistern_get(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta,
		    int timeout_ms)
{
	/* As cistern_put(). */
	if (c && c->get_step && (buf || !cap))
		return c->get_step(c, buf, cap, meta, timeout_ms, get_slow);
	if (!buf && cap)
		return -EINVAL;
	return get_slow(c, buf, cap, meta, timeout_ms);
}

int cistern_stats_get(const struct cistern *c, struct cistern_stats *st)
{
	if (!c || !st)
		return -EINVAL;
	if (c->inherited)
		return -EBADF;
	/* Another user's object is read through a copy: bring it up to date. */
	int r = cistern__refresh(c, CISTERN__COPY_TABLES);
	if (r < 0)
		return r;
	struct cistern_hdr *h = c->hdr;
	memset(st, 0, sizeof(*st));
	struct cistern_counters sum;
	_Atomic uint64_t *acc = (_Atomic uint64_t *)&sum;
	size_t n = sizeof(sum) / sizeof(uint64_t);
	const _Atomic uint64_t *ret = (const _Atomic uint64_t *)&h->retired;
	for (size_t i = 0; i < n; i++)
		atomic_init(&acc[i], atomic_load_explicit(&ret[i], memory_order_relaxed));
	struct cistern_proc *procs = cistern__procs(c);
	uint32_t died_unreclaimed = 0;
	for (uint64_t p = 0; p < c->fixed.procs_count; p++) {
		/* [entry-active] acquire: an entry's counters are its present owner's. */
		uint32_t state = atomic_load_explicit(&procs[p].state, memory_order_acquire);
		if (state == CISTERN_PROC_FREE)
			continue;
		/* A RECLAIMING entry still has counters to fold, but no process. */
		if (state == CISTERN_PROC_ACTIVE) {
			if (cistern__entry_alive(c->fd, (uint32_t)p) == 1 || p + 1 == c->owner)
				st->procs_attached++;
			else if (atomic_load_explicit(&procs[p].producing, memory_order_relaxed) ==
				 CISTERN_COUNTED)
				died_unreclaimed++; /* its reclaim will count it */
		}
		const _Atomic uint64_t *src = (const _Atomic uint64_t *)&procs[p].ctr;
		for (size_t i = 0; i < n; i++)
			atomic_init(&acc[i],
				    atomic_load_explicit(&acc[i], memory_order_relaxed) +
					    atomic_load_explicit(&src[i], memory_order_relaxed));
	}
#define TAKE(f) st->f = atomic_load_explicit(&sum.f, memory_order_relaxed)
	TAKE(puts);
	TAKE(gets);
	TAKE(evictions);
	TAKE(evicted_unseen);
	TAKE(redeliveries);
	TAKE(reclaimed);
	TAKE(producer_waits);
	TAKE(producer_wait_ns);
	TAKE(reader_waits);
	TAKE(reader_wait_ns);
#undef TAKE
	for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
		st->seen_hist[i] = atomic_load_explicit(&sum.seen_hist[i], memory_order_relaxed);
	/* [close]: a statistic; acquire orders nothing more here. */
	st->reception_closed = atomic_load_explicit(&h->closed, memory_order_acquire);
	st->producers_expected = c->fixed.expected_producers;
	st->producers_done = atomic_load_explicit(&h->producers_done, memory_order_relaxed);
	st->producers_died = atomic_load_explicit(&h->producers_died, memory_order_relaxed) +
			     died_unreclaimed;
	st->unpaired = atomic_load_explicit(&h->unpaired, memory_order_relaxed);
	st->population = c->ops->population(c, st);
	struct cistern__tier_view tv = {0};
	if (c->fixed.cold_slots && c->policy->tiering)
		c->policy->tiering->view(c, &tv);
	st->cold_slots = tv.slots;
	st->cold_population = tv.population;
	st->cold_disk_bytes = tv.disk_bytes;
	st->cold_spilled = tv.spilled;
	st->cold_reads = tv.cold_reads;
	st->cold_evictions = tv.cold_evictions;
	st->cold_bytes_written = tv.bytes_written;
	st->cold_bytes_read = tv.bytes_read;
	st->cold_write_wait_ns = tv.write_wait_ns;
	st->cold_read_wait_ns = tv.read_wait_ns;
	st->cold_stage_bytes = tv.stage_bytes;
	st->cold_groups_staged = tv.groups_staged;
	st->cold_groups_writing = tv.groups_writing;
	st->cold_write_waits = tv.write_waits;
	return 0;
}

const char *cistern_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case CISTERN_EOD:
		return "end of data: reception is closed and nothing is left to read";
	case -EAGAIN:
		return "would have to wait (timeout 0), or the segment is still being created";
	case -ETIMEDOUT:
		return "timed out";
	case -EPIPE:
		return "reception is closed: no more samples are accepted";
	case -EMSGSIZE:
		return "payload larger than the slot size (or than the buffer given), or of "
		       "another length than the segment's schema gives a sample";
	case -EINVAL:
		return "invalid argument (name, parameter, or a slot/sample not held by this "
		       "handle)";
	case -ENAMETOOLONG:
		return "segment name longer than 64 characters";
	case -EEXIST:
		return "a segment of that name already exists";
	case -ENOENT:
		return "no segment of that name";
	case -EACCES:
		return "permission denied by the segment's mode, or the segment is owned by "
		       "another "
		       "user than you or root (to share one between users on purpose: "
		       "CISTERN_ATTACH_ANY_OWNER, --any-owner on the command line)";
	case -EPROTO:
		return "not a cistern segment, or a damaged one (or one shrunk while it was read)";
	case -EPROTONOSUPPORT:
		return "segment made by an incompatible build of cistern (ABI or layout differs)";
	case -ENOTSUP:
		return "policy not supported by this build";
	case -EUSERS:
		return "attachment table full: too many processes attached";
	case -EBADF:
		return "handle is read-only, detached, or inherited through fork()";
	case -ERANGE:
		return "sim_id or time_step outside the segment's bounds";
	case -ENOMEM:
		return "out of memory";
	case -ENOSPC:
		return "no space left for the segment (/dev/shm full)";
	/* The tools' results (inspect.c, dump.c), and a single role held elsewhere (roles.c). */
	case -EBUSY:
		return "live processes are attached to the segment (or one is attaching), or "
		       "another holds its single producer or reader role";
	case -EBADMSG:
		return "damaged or truncated dump file";
	case -ENOMSG:
		return "not a cistern dump file";
	case -EINPROGRESS:
		return "a restore of that segment is unfinished";
	case -EDEADLK:
		return "a read larger than the rate limiter (reads_per_put, rate_slack) can ever "
		       "admit at once: it would wait for ever";
	default:
		return err < 0 ? strerror(-err) : "unknown result";
	}
}
