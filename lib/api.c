/* SPDX-License-Identifier: MIT */
/*
 * api.c - the public put/get calls: argument checks, waiting, end of data.
 * The policies (fifo.c, ...) only ever try once; this file decides whether to
 * wait, for how long, and what a failed wait means.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

const struct cistern_ops *cistern__ops_for(uint32_t policy)
{
	switch (policy) {
	case CISTERN_FIFO:
		return &cistern__fifo_ops;
	default:
		return NULL;
	}
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
	cistern__add_role(c, CISTERN_ROLE_PRODUCER);
	struct cistern_waiter w;
	cistern__wait_init(&w, CISTERN_WAIT_SPACE, timeout_ms);
	for (;;) {
		/* A plain load of a line that is written once: cheap on the hot path. */
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
		 * Reception closed while we claimed: readers may already have
		 * concluded end of data, so this sample must not appear.
		 */
		c->ops->abort(c, slot);
		r = -EPIPE;
	}
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
	if (len > c->slot_size)
		return -EMSGSIZE;
	return c->ops->commit(c, slot, len, meta);
}

int cistern_abort(struct cistern *c, struct cistern_slot *slot)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!slot)
		return -EINVAL;
	return c->ops->abort(c, slot);
}

int cistern_put(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta,
		int timeout_ms)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!buf && len)
		return -EINVAL;
	if (len > c->slot_size)
		return -EMSGSIZE;
	struct cistern_slot slot;
	r = cistern_reserve(c, &slot, timeout_ms);
	if (r < 0)
		return r;
	if (len)
		memcpy(slot.data, buf, len);
	return c->ops->commit(c, &slot, len, meta);
}

int cistern_close_reception(struct cistern *c)
{
	int r = writable(c);
	if (r < 0)
		return r;
	/* seq_cst: ordered against reservations and end-of-data checks (fifo.c). */
	atomic_store_explicit(&c->hdr->closed, 1, memory_order_seq_cst);
	cistern__wake_all(c->hdr);
	return 0;
}

int cistern_producer_done(struct cistern *c)
{
	int r = writable(c);
	if (r < 0)
		return r;
	uint32_t expected = c->hdr->expected_producers;
	if (expected == 0)
		return -EINVAL;
	uint32_t done = atomic_fetch_add_explicit(&c->hdr->producers_done, 1,
						  memory_order_acq_rel) + 1;
	if (done >= expected) {
		cistern_close_reception(c);
		return 0;
	}
	return (int)(expected - done);
}

int cistern_acquire(struct cistern *c, struct cistern_sample *s, int timeout_ms)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!s)
		return -EINVAL;
	cistern__add_role(c, CISTERN_ROLE_READER);
	struct cistern_waiter w;
	cistern__wait_init(&w, CISTERN_WAIT_DATA, timeout_ms);
	for (;;) {
		r = c->ops->try_acquire(c, s);
		if (r != -EAGAIN)
			break;
		if (c->ops->drained(c)) {
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
	if (r == 0 && s->len > c->slot_size) {
		/*
		 * Only a damaged segment can say this; a caller reading s->len
		 * bytes would run past the slot. Give it back and refuse it.
		 */
		c->ops->release(c, s);
		return -EPROTO;
	}
	return r;
}

int cistern_release(struct cistern *c, struct cistern_sample *s)
{
	int r = writable(c);
	if (r < 0)
		return r;
	if (!s)
		return -EINVAL;
	return c->ops->release(c, s);
}

ssize_t cistern_get(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta,
		    int timeout_ms)
{
	if (!buf && cap)
		return -EINVAL;
	struct cistern_sample s;
	int r = cistern_acquire(c, &s, timeout_ms);
	if (r < 0)
		return r;
	if (s.len > cap) {
		c->ops->unacquire(c, &s);
		return -EMSGSIZE;
	}
	memcpy(buf, s.data, s.len);
	if (meta)
		*meta = s.meta;
	size_t len = s.len;
	r = c->ops->release(c, &s);
	return r < 0 ? r : (ssize_t)len;
}

int cistern_stats_get(const struct cistern *c, struct cistern_stats *st)
{
	if (!c || !st)
		return -EINVAL;
	struct cistern_hdr *h = c->hdr;
	memset(st, 0, sizeof(*st));
	struct cistern_counters sum;
	_Atomic uint64_t *acc = (_Atomic uint64_t *)&sum;
	size_t n = sizeof(sum) / sizeof(uint64_t);
	const _Atomic uint64_t *ret = (const _Atomic uint64_t *)&h->retired;
	for (size_t i = 0; i < n; i++)
		atomic_init(&acc[i], atomic_load_explicit(&ret[i], memory_order_relaxed));
	struct cistern_proc *procs = cistern__procs(h);
	for (uint64_t p = 0; p < h->procs_count; p++) {
		uint32_t state = atomic_load_explicit(&procs[p].state, memory_order_acquire);
		if (state == CISTERN_PROC_FREE)
			continue;
		/* A RECLAIMING entry still has counters to fold, but no process. */
		if (state == CISTERN_PROC_ACTIVE &&
		    (cistern__entry_alive(c->fd, (uint32_t)p) == 1 || p + 1 == c->owner))
			st->procs_attached++;
		const _Atomic uint64_t *src = (const _Atomic uint64_t *)&procs[p].ctr;
		for (size_t i = 0; i < n; i++)
			atomic_init(&acc[i], atomic_load_explicit(&acc[i], memory_order_relaxed) +
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
	st->reception_closed = atomic_load_explicit(&h->closed, memory_order_acquire);
	st->population = c->ops->population(c, st);
	return 0;
}

static const char *const policy_names[CISTERN_POLICY_COUNT] = {
	"fifo", "firo", "reservoir", "fifo-evict-reservoir", "sim-paired-reservoir",
	"batch-reservoir",
};

const char *cistern_policy_name(enum cistern_policy p)
{
	return (unsigned)p < CISTERN_POLICY_COUNT ? policy_names[p] : NULL;
}

int cistern_policy_parse(const char *s, enum cistern_policy *out)
{
	if (!s || !out)
		return -EINVAL;
	for (int i = 0; i < CISTERN_POLICY_COUNT; i++) {
		if (strcmp(s, policy_names[i]) == 0) {
			*out = (enum cistern_policy)i;
			return 0;
		}
	}
	return -EINVAL;
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
		return "payload larger than the slot size (or than the buffer given)";
	case -EINVAL:
		return "invalid argument (name, parameter, or a slot/sample not held by this handle)";
	case -ENAMETOOLONG:
		return "segment name longer than 64 characters";
	case -EEXIST:
		return "a segment of that name already exists";
	case -ENOENT:
		return "no segment of that name";
	case -EACCES:
		return "permission denied by the segment's mode";
	case -EPROTO:
		return "not a cistern segment, or a damaged one";
	case -EPROTONOSUPPORT:
		return "segment made by an incompatible build of cistern (ABI or layout differs)";
	case -ENOTSUP:
		return "policy not supported by this build";
	case -EUSERS:
		return "attachment table full: too many processes attached";
	case -EBADF:
		return "handle is read-only or detached";
	case -ERANGE:
		return "sim_id or time_step outside the segment's bounds";
	case -ENOMEM:
		return "out of memory";
	case -ENOSPC:
		return "no space left for the segment (/dev/shm full)";
	default:
		return err < 0 ? strerror(-err) : "unknown result";
	}
}
