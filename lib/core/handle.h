/* SPDX-License-Identifier: MIT */
/*
 * handle.h - the process-local handle: what one attachment keeps for itself, and
 * the accessors of the mapped segment it reads through (internal).
 */
#ifndef CISTERN_HANDLE_H
#define CISTERN_HANDLE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/segment.h"
#include "sys/rng.h"
#include "core/slotword.h"

struct cistern_ops;
struct cistern__tier;
struct cistern__policy;

/*
 * A descriptor of a segment that may carry OFD locks, listed so that a fork()
 * child closes its copy (fork.c). It lives where *fd does: in its handle, or
 * on the stack of a call that holds the gc lock by a bare descriptor.
 */
struct cistern__lockfd {
	int *fd;
	struct cistern *handle; /* the handle whose c->fd it is, or NULL */
	struct cistern__lockfd *prev, *next;
	bool listed;
	/* Under the list's mutex: */
	uint32_t entry;       /* the attachment entry it holds, + 1; 0: none */
	uint32_t intent_held; /* the entry whose intent lock a fork took, + 1 */
};

/*
 * How a handle stands in one role (roles.c, roles.h), set when it takes the
 * role and changed by the automatic role's handshake. The handle keeps one
 * for each side, c->producing and c->reading, since one handle may put and
 * get (its c->role has both bits) and hold the two roles in different ways,
 * e.g. the producer's by CISTERN_SINGLE_PRODUCER and the reader's
 * automatically. Each fast path's test is one load and compare: the order
 * makes "runs the sole reader's paths" (IN_CALL, SOLE) one comparison too.
 */
enum cistern_hold {
	CISTERN_HOLD_NONE = 0,      /* no role of its own: the shared paths */
	CISTERN_HOLD_COUNTED,       /* counted among several in the automatic role */
	CISTERN_HOLD_AUTO,          /* holds the automatic role: each claim bracketed (FIFO) */
	CISTERN_HOLD_CALLS_COUNTED, /* a reservoir reader counted among several */
	CISTERN_HOLD_CALLS_AUTO, /* a reservoir reader holding the automatic role, between calls */
	CISTERN_HOLD_IN_CALL,    /* ... inside a read call (cistern__auto_read_begin()) */
	CISTERN_HOLD_SOLE,       /* holds the role by its CISTERN_SINGLE_* flag */
};

/*
 * cistern_put() and cistern_get() of arguments checked, through the general
 * calls and their waits: the API hands its own to a policy's one step
 * (put_step, get_step below), which ends there when it cannot finish alone.
 */
typedef int cistern__put_fn(struct cistern *c, const void *buf, size_t len,
			    struct cistern_meta *meta, int timeout_ms);
typedef ssize_t cistern__get_fn(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta,
				int timeout_ms);

struct cistern {
	struct cistern_hdr *hdr;
	size_t map_size;
	int fd; /* takes the locks; nothing maps it (fork.c) */
	bool readonly;
	/*
	 * A read-only handle on an object someone else may shrink (segment.c:
	 * cistern__open_view()): hdr is then a private anonymous copy of it,
	 * which the calls fill in by pread() of fd (cistern__refresh()), so
	 * that no page of the object itself is ever mapped.
	 */
	bool copied;
	bool inherited;                /* a fork() child's copy: every call but detach is -EBADF */
	struct cistern__lockfd lockfd; /* lists fd for fork() children to close */
	uint32_t owner;                /* attachment index + 1; 0 when read-only */
	struct cistern_proc *me;
	const struct cistern_ops *ops;        /* policy->ops, one load nearer the hot paths */
	const struct cistern__policy *policy; /* policy.h: what the segment's policy is */
	char *meta0; /* slot 0's metadata; slot i's is meta_stride * i on */
	char *arena; /* slot 0's payload; slot i's is slot_stride * i on */
	uint64_t meta_stride;
	uint64_t slot_count;
	uint64_t slot_mask; /* slot_count - 1 if a power of two, else 0 */
	uint64_t slot_stride;
	uint64_t slot_size;
	/*
	 * The lengths a put may give: put_len_min plus 0 to put_len_span
	 * (cistern__len_misfit()). Without a schema 0 plus up to slot_size;
	 * with one its sample size exactly (schema.c), so that the check of a
	 * put is one subtraction and one compare either way.
	 */
	uint64_t put_len_min;
	uint64_t put_len_span;
	uint64_t id_base; /* FIFO: sample id = ring position + id_base (segment.h) */
	uint32_t role;    /* roles already published in me->role */
	struct cistern_rng rng;
	/*
	 * What the policy keeps for this handle (its descriptor's new_state
	 * made it, free_state frees it), or NULL: a type core does not know.
	 * FIRO and the reservoirs keep their pickers, pins and scratch set
	 * there (policy/reservoir/state.h). The FIFO's few fields stay below,
	 * in the handle itself: its one-step put and get read them on every
	 * call, and a pointer would put one more dependent load in front.
	 */
	void *pstate;
	bool reserve_polling;        /* FIFO: the last reserve found the ring full */
	bool acquire_polling;        /* FIFO: the last acquire found nothing */
	enum cistern_hold producing; /* roles.c: how this handle stands in the producer role */
	enum cistern_hold reading;   /* roles.c: how it stands in the reader role */
	bool close_fenced;           /* fifo.c: fenced against plain claims after close */
	bool gathering;              /* in cistern_get_batch(): it prefetches payloads */
	bool wide_copies;            /* fifo_copy.c: the one-step put and get copy with AVX2 */
	uint64_t small_fit; /* fifo_copy.c: the longest sample copied inline, min(64, slot_size) */
	/*
	 * cistern__set_steps() (the policy's set_steps): what cistern_put() and
	 * cistern_get() call for arguments they checked, so that they decide in
	 * one load whether the FIFO's one step applies. The callee falls back
	 * itself, to `slow`, the caller's general path.
	 */
	int (*put_step)(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta,
			int timeout_ms, cistern__put_fn *slow);
	ssize_t (*get_step)(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta,
			    int timeout_ms, cistern__get_fn *slow);
	bool write_prefetch;       /* the processor has PREFETCHW (cistern__has_prefetchw()) */
	uint32_t put_ahead;        /* fifo.c: how many slots ahead the sole producer prefetches */
	uint64_t put_quiet;        /* fifo.h: puts left before the sole producer prefetches again */
	uint64_t holding;          /* api.c: reservations and acquisitions outstanding */
	uint64_t gets_at_wait;     /* wait.c: our gets count when a wait for data last ended */
	uint64_t cpu_shared_waits; /* wait.c: waits that yielded to a counterpart on our CPU */
	/*
	 * schema.c: the segment's schema, copied out of fixed.schema (the
	 * validated copy) and parsed once at open (NULL and 0 without one), so
	 * that no call reads the shared text again.
	 */
	char *schema;
	struct cistern_field *fields;
	uint32_t nfields;
	uint64_t sample_size;
	/*
	 * The header's immutable part as validated (segment.h): every size,
	 * offset, count and policy parameter the library uses comes from here
	 * (or from the copies above), never from the segment again.
	 */
	struct cistern_fixed fixed;
	struct cistern_proc *procs; /* the attachment table: fixed.procs_count entries */
	_Atomic uint64_t *index;    /* the policy index: fixed.index_count entries */
	int64_t sweep_due_ns;       /* wait.c: when this handle's next sweep for the dead is due */
	struct cistern__tier *tier; /* tier/tiered.c: the cold file, opened on first use */
};

/*
 * Whether the handle runs the sole reader's paths now: it holds the reader
 * role by CISTERN_SINGLE_READER, or it is a reservoir reader holding the
 * automatic role, inside a read call.
 */
static inline bool cistern__reads_alone(const struct cistern *c)
{
	return c->reading >= CISTERN_HOLD_IN_CALL;
}

/*
 * Whether a put may not give a sample of len bytes: longer than the slot, or,
 * in a segment with a schema, of another length than its sample size (the
 * subtraction wraps for a shorter one). Callers return -EMSGSIZE.
 */
static inline bool cistern__len_misfit(const struct cistern *c, uint64_t len)
{
	return len - c->put_len_min > c->put_len_span;
}

/* v rounded up to a multiple of a, a power of two. */
static inline uint64_t cistern__align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* Slot index of ring position pos. */
static inline uint64_t cistern__slot_of(const struct cistern *c, uint64_t pos)
{
	return c->slot_mask ? (pos & c->slot_mask) : (pos % c->slot_count);
}

/* The slot `ahead` places after slot idx in a ring of n (ahead < n). */
static inline uint64_t cistern__slot_ahead(uint64_t idx, uint64_t ahead, uint64_t n)
{
	uint64_t i = idx + ahead;
	return i >= n ? i - n : i;
}

/* The attachment table, fixed.procs_count entries long. */
static inline struct cistern_proc *cistern__procs(const struct cistern *c)
{
	return c->procs;
}

/* The policy index (SimPairedReservoir's), fixed.index_count entries long. */
static inline _Atomic uint64_t *cistern__index(const struct cistern *c)
{
	return c->index;
}

static inline void *cistern__payload(const struct cistern *c, uint64_t index)
{
	return c->arena + index * c->slot_stride;
}

/* Slot i's metadata, from a base and stride a hot loop keeps in locals. */
static inline struct cistern_slotmeta *cistern__slotmeta_in(char *meta0, uint64_t stride,
							    uint64_t i)
{
	return (struct cistern_slotmeta *)(meta0 + i * stride);
}

/* Slot i's metadata (segment.h: in an array, or the line just before its payload). */
static inline struct cistern_slotmeta *cistern__slotmeta(const struct cistern *c, uint64_t i)
{
	return cistern__slotmeta_in(c->meta0, c->meta_stride, i);
}

/*
 * Owner-only counter bump: only the attachment's own process writes its
 * counters, so a relaxed load and store suffice (no locked instruction); other
 * processes read them with relaxed loads for statistics.
 */
static inline void cistern__count(_Atomic uint64_t *ctr, uint64_t n)
{
	atomic_store_explicit(ctr, atomic_load_explicit(ctr, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

#endif
