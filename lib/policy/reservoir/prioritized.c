/* SPDX-License-Identifier: MIT */
/*
 * prioritized.c - the prioritized policy: a reservoir (slot states, pins,
 * fills and evictions of reservoir.c) whose reads draw by priority^alpha from
 * a sum tree kept in the policy index. docs/protocol/priorities.md gives the
 * design; in short:
 *
 *  - every change of a leaf happens under one process-shared robust mutex,
 *    in the same critical section as the slot-state change it follows;
 *  - whenever nobody holds the mutex, leaf i is nonzero exactly when slot i
 *    is HELD (or EVICTING), and then it is the fixed-point (q + eps)^alpha of
 *    prio[i]; each inner node is the sum and the minimum of its children;
 *  - a holder that dies leaves the mutex to the next locker with EOWNERDEAD,
 *    who rebuilds the tree from the slot states; a reclaim, whose moves of
 *    dead readers' samples back to HELD happen outside the mutex, ends with a
 *    pass that sets every leaf from its slot.
 *
 * Tree words are relaxed atomics: the mutex orders them between holders,
 * and a reader without it (cistern_prio_info_get()) only wants a recent total.
 *
 * A segment created with a sweep_size also reads windows (windows.c): its
 * index starts with the (sim_id, time_step) table of pairs.c, which the
 * commits here publish and the puts that take a slot clear. A window's
 * priority is its last member's: a window draw takes a leaf from the tree
 * and keeps it if it ends a complete window, else draws again; after
 * RS_PICK_TRIES misses a window it sums the leaves of the ends it finds and
 * draws among them alone. A batch of windows is drawn in one hold of the
 * lock (docs/protocol/priorities.md, "Windows").
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "policy/reservoir/prioritized.h"
#include "policy/reservoir/reservoir.h"
#include "policy/reservoir/pins.h"
#include "policy/reservoir/pairs.h"
#include "policy/reservoir/windows.h"
#include "core/wait.h"

/* Fixed point of the leaves: p^alpha * 2^24. */
#define LEAF_ONE 16777216.0
/* Entries of the index before prio[]: the mutex's line and the counters' line. */
#define HEAD_ENTRIES 16

struct prio_head {
	CL_ALIGN pthread_mutex_t lock;
	CL_ALIGN _Atomic uint64_t beta; /* bits of a double */
	_Atomic uint64_t max_prio;      /* bits of a double: largest priority seen */
	_Atomic uint64_t updates;       /* priorities applied */
	_Atomic uint64_t stale;         /* ids ignored */
	_Atomic uint64_t rebuilds;      /* rebuilds after a holder died */
};
_Static_assert(sizeof(struct prio_head) <= HEAD_ENTRIES * sizeof(uint64_t),
	       "the head fits its entries");

/* Where the parts of the index are, for a handle. */
struct pv {
	struct prio_head *h;
	_Atomic uint64_t *prio; /* n entries: bits of doubles */
	_Atomic uint64_t *nd;   /* node k: nd[2k] sum, nd[2k + 1] min (UINT64_MAX: none) */
	uint64_t n, L, leaf_max;
	double alpha, eps;
};

/* Leaves of the tree: n rounded up to a power of two (n is at most CISTERN_SLOT_COUNT_MAX). */
static uint64_t leaves_of(uint64_t n)
{
	uint64_t L = 1;
	while (L < n && L < (UINT64_C(1) << 62))
		L <<= 1;
	return L;
}

/*
 * Entries of the (sim_id, time_step) table before the head, rounded up to a
 * cache line (8 entries) so that the head's mutex keeps its own line: none
 * without a sweep_size, as a segment without windows.
 */
static uint64_t pairs_entries(uint32_t sweep_size, uint32_t nb_time_steps)
{
	uint64_t e = sweep_size ? (uint64_t)sweep_size * nb_time_steps : 0;
	return (e + 7) & ~UINT64_C(7);
}

/* prio[] starts HEAD_ENTRIES after the head; the nodes at the next multiple of 8 (a cache line). */
static uint64_t nodes_at(uint64_t n)
{
	return HEAD_ENTRIES + ((n + 7) & ~UINT64_C(7));
}

static uint64_t prio_index_entries(uint64_t slot_count, uint32_t sweep_size, uint32_t nb_time_steps)
{
	return pairs_entries(sweep_size, nb_time_steps) + nodes_at(slot_count) +
	       4 * leaves_of(slot_count);
}

/* Does the segment keep the (sim_id, time_step) table, and so read windows? */
static bool has_windows(const struct cistern *c)
{
	return c->fixed.sweep_size > 0;
}

static void pv_of(const struct cistern *c, struct pv *v)
{
	_Atomic uint64_t *ix = cistern__index(c) +
			       pairs_entries(c->fixed.sweep_size, c->fixed.nb_time_steps);
	/* The head is the entries after the table, laid out as struct prio_head. */
	v->h = (struct prio_head *)(uintptr_t)ix;
	v->prio = ix + HEAD_ENTRIES;
	v->n = c->slot_count;
	v->L = leaves_of(v->n);
	v->nd = ix + nodes_at(v->n);
	/* No sum of L leaves can pass 2^62. */
	v->leaf_max = (UINT64_C(1) << 62) / v->L;
	v->alpha = c->fixed.alpha;
	v->eps = c->fixed.epsilon;
}

static inline uint64_t ld(_Atomic uint64_t *p)
{
	return atomic_load_explicit(p, memory_order_relaxed);
}

static inline void st(_Atomic uint64_t *p, uint64_t v)
{
	atomic_store_explicit(p, v, memory_order_relaxed);
}

static inline double bits_to_d(uint64_t b)
{
	double d;
	memcpy(&d, &b, sizeof(d));
	return d;
}

static inline uint64_t d_to_bits(double d)
{
	uint64_t b;
	memcpy(&b, &d, sizeof(b));
	return b;
}

/* The leaf of priority q: round((q + eps)^alpha * 2^24), from 1 to leaf_max. */
static uint64_t leaf_of(const struct pv *v, double q)
{
	double x = pow(q + v->eps, v->alpha) * LEAF_ONE;
	if (!(x >= 1))
		return 1; /* also NaN, which only a damaged prio[] can give */
	if (x >= (double)v->leaf_max)
		return v->leaf_max;
	return (uint64_t)llround(x);
}

/* Node k from its children. */
static inline void pull(const struct pv *v, uint64_t k)
{
	uint64_t a = ld(&v->nd[4 * k]), b = ld(&v->nd[4 * k + 2]);
	uint64_t ma = ld(&v->nd[4 * k + 1]), mb = ld(&v->nd[4 * k + 3]);
	st(&v->nd[2 * k], a + b);
	st(&v->nd[2 * k + 1], ma < mb ? ma : mb);
}

static inline uint64_t leaf_at(const struct pv *v, uint64_t i)
{
	return ld(&v->nd[2 * (v->L + i)]);
}

/* Set leaf i and its path to the root. Under the lock. */
static void set_leaf(const struct pv *v, uint64_t i, uint64_t leaf)
{
	uint64_t k = v->L + i;
	st(&v->nd[2 * k], leaf);
	st(&v->nd[2 * k + 1], leaf ? leaf : UINT64_MAX);
	for (k >>= 1; k >= 1; k >>= 1)
		pull(v, k);
}

static double max_prio(const struct pv *v)
{
	return bits_to_d(ld(&v->h->max_prio));
}

static void raise_max(const struct pv *v, double q)
{
	if (q > max_prio(v))
		st(&v->h->max_prio, d_to_bits(q));
}

/*
 * What leaf i must be, from its slot: nonzero for a held sample (HELD, or
 * EVICTING by a producer that died deciding, whose reclaim puts it back).
 * A held slot whose prio[] is not a priority (its producer died in the
 * commit before it resolved it) gets the largest seen, as a put without one.
 */
static uint64_t leaf_due(const struct cistern *c, const struct pv *v, uint64_t i)
{
	uint64_t w = atomic_load_explicit(&cistern__slotmeta(c, i)->word, memory_order_relaxed);
	unsigned s = sw_state(w);
	if (s != RS_HELD && s != RS_EVICTING)
		return 0;
	/* Spent (max_times_sampled): no longer drawable, and about to leave. */
	if (c->fixed.max_times_sampled &&
	    atomic_load_explicit(&cistern__slotmeta(c, i)->seen, memory_order_relaxed) >=
		    c->fixed.max_times_sampled)
		return 0;
	double q = bits_to_d(ld(&v->prio[i]));
	if (!cistern__prio_ok(q)) {
		q = max_prio(v);
		st(&v->prio[i], d_to_bits(q));
	}
	return leaf_of(v, q);
}

/* Every leaf from its slot, then every inner node. Under the lock. */
static void rebuild(const struct cistern *c, const struct pv *v)
{
	for (uint64_t i = 0; i < v->L; i++) {
		uint64_t leaf = i < v->n ? leaf_due(c, v, i) : 0;
		st(&v->nd[2 * (v->L + i)], leaf);
		st(&v->nd[2 * (v->L + i) + 1], leaf ? leaf : UINT64_MAX);
	}
	for (uint64_t k = v->L - 1; k >= 1; k--)
		pull(v, k);
}

/*
 * Take the tree's mutex. A holder that died left it EOWNERDEAD: rebuild,
 * then mark it consistent. 0, or -EPROTO if the mutex is unusable (only a
 * process that writes the segment by other means can make it so).
 *
 * The wait looks at the mutex again every LOCK_RECHECK_NS. An unlock wakes
 * one waiter and clears the word's waiters bit; when that waiter is being
 * killed, the wake dies with it, and the other waiters would sleep on a
 * free mutex until some later unlock that may never come. Looking again
 * finds the mutex free (or its owner dead) and takes it. The slices are
 * measured on CLOCK_REALTIME, as pthread_mutex_timedlock() wants (a clock
 * step only makes one slice longer or shorter); ThreadSanitizer sees the
 * mutex taken through that call, not through pthread_mutex_clocklock().
 */
#define LOCK_RECHECK_NS 20000000L

/*
 * ThreadSanitizer's pthread_mutex_timedlock() sees a mutex taken only when
 * the call returns 0, unlike its pthread_mutex_lock(), which also counts
 * EOWNERDEAD. So under TSan a mutex taken from a dead holder is told to it
 * as a successful try-lock; else the unlock would look like one of a free
 * mutex. Nothing outside a TSan build.
 */
#if defined(__SANITIZE_THREAD__)
static void note_taken_from_dead(pthread_mutex_t *m)
{
	__tsan_mutex_pre_lock(m, __tsan_mutex_try_lock);
	__tsan_mutex_post_lock(m, __tsan_mutex_try_lock, 0);
}
#else
static void note_taken_from_dead(pthread_mutex_t *m)
{
	(void)m;
}
#endif

static int lock(const struct cistern *c, const struct pv *v)
{
	int r;
	do {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += LOCK_RECHECK_NS;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		r = pthread_mutex_timedlock(&v->h->lock, &until);
	} while (r == ETIMEDOUT);
	if (r == EOWNERDEAD) {
		note_taken_from_dead(&v->h->lock);
		rebuild(c, v);
		atomic_fetch_add_explicit(&v->h->rebuilds, 1, memory_order_relaxed);
		if (pthread_mutex_consistent(&v->h->lock) != 0) {
			pthread_mutex_unlock(&v->h->lock);
			return -EPROTO;
		}
		return 0;
	}
	return r == 0 ? 0 : -EPROTO;
}

static void unlock(const struct pv *v)
{
	pthread_mutex_unlock(&v->h->lock);
}

/* ---- The ops ---------------------------------------------------------- */

static void prio_init(struct cistern *c)
{
	cistern__rs_init(c);
	struct pv v;
	pv_of(c, &v);
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&v.h->lock, &a);
	pthread_mutexattr_destroy(&a);
	st(&v.h->beta, d_to_bits(c->fixed.beta));
	st(&v.h->max_prio, d_to_bits(1.0));
	for (uint64_t k = 1; k < 2 * v.L; k++) {
		st(&v.nd[2 * k], 0);
		st(&v.nd[2 * k + 1], UINT64_MAX);
	}
}

/* The shape is read again for each sample, as pairs.c does. */
static bool is_window_orphan(struct cistern *c, uint64_t index, void *arg)
{
	(void)arg;
	return cistern__windows_is_orphan(c, index, cistern__windows_wanted(c));
}

/*
 * Nothing seen to evict. Once a reader waited for windows of some shape, a
 * sample in no complete window of it may be one that reader never reads;
 * while none such window is held, evict one of those (as SimPairedReservoir
 * does, pairs.c) rather than wait for a read that may never come.
 */
static int evict_orphan(struct cistern *c, struct cistern_slot *slot)
{
	uint64_t wanted = cistern__windows_wanted(c);
	if (!wanted || cistern__windows_any_held(c, wanted))
		return -EAGAIN;
	return cistern__rs_evict_reserve(c, slot, is_window_orphan);
}

/* A put's slot: fill or evict under the lock, so that an eviction and its leaf go together. */
static int prio_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	struct pv v;
	pv_of(c, &v);
	int r = lock(c, &v);
	if (r < 0)
		return r;
	r = cistern__rs_reservoir_try_reserve(c, slot);
	if (r == -EAGAIN && has_windows(c))
		r = evict_orphan(c, slot);
	if (r == 0 && has_windows(c))
		/* Its old key (the metadata is the old sample's until the commit) names it no more. */
		cistern__pairs_forget(c, slot->index_);
	if (r == 0 && slot->index_ < v.n) {
		/* An evicted sample's leaf goes; a filled slot's is 0 already. */
		if (leaf_at(&v, slot->index_))
			set_leaf(&v, slot->index_, 0);
		/* Not a priority: the commit gives the largest seen unless the producer sets one. */
		st(&v.prio[slot->index_], d_to_bits(-1.0));
	}
	unlock(&v);
	return r;
}

static bool reserved_here(struct cistern *c, const struct cistern_slot *slot)
{
	if (!slot->live_ || slot->index_ >= c->slot_count)
		return false;
	uint64_t w = atomic_load_explicit(&cistern__slotmeta(c, slot->index_)->word,
					  memory_order_relaxed);
	return w == sw_make(slot->pos_, RS_RESERVED, c->owner);
}

static int prio_set_reserved(struct cistern *c, const struct cistern_slot *slot, double q)
{
	if (!c->policy->prio || !cistern__prio_ok(q) || !reserved_here(c, slot))
		return -EINVAL;
	struct pv v;
	pv_of(c, &v);
	/* Ours while reserved: nobody else reads prio[] of a slot that is not held. */
	st(&v.prio[slot->index_], d_to_bits(q));
	return 0;
}

static int prio_commit(struct cistern *c, struct cistern_slot *slot, size_t len,
		       struct cistern_meta *meta)
{
	if (!reserved_here(c, slot))
		return -EINVAL;
	/* With windows, a key outside the table is refused, as SimPairedReservoir refuses it. */
	uint32_t sim = meta ? meta->sim_id : 0, step = meta ? meta->time_step : 0;
	if (has_windows(c) && (sim >= c->fixed.sweep_size || step >= c->fixed.nb_time_steps))
		return -ERANGE;
	struct pv v;
	pv_of(c, &v);
	int r = lock(c, &v);
	if (r < 0)
		return r;
	uint64_t i = slot->index_;
	double q = bits_to_d(ld(&v.prio[i]));
	if (cistern__prio_ok(q))
		raise_max(&v, q);
	else
		q = max_prio(&v);
	st(&v.prio[i], d_to_bits(q));
	r = cistern__rs_commit(c, slot, len, meta);
	if (r == 0)
		set_leaf(&v, i, leaf_of(&v, q));
	/* After the commit's [rs-held] exchange: pairs.c publishes with [sim-pair]. */
	if (r == 0 && has_windows(c))
		cistern__pairs_publish(c, i, sim, step);
	unlock(&v);
	return r;
}

/* Draws walked down the tree together (see descend_batch()). */
#define DRAW_CHUNK 64

/*
 * Leaves for m uniform draws below `total`, walked down level by level for
 * all of them at once: the m loads of a level do not depend on each other,
 * so their cache misses overlap instead of queueing one draw's twenty
 * behind another's. Under the lock.
 */
static void descend_batch(struct cistern *c, const struct pv *v, uint64_t total, uint64_t *k,
			  size_t m)
{
	uint64_t u[DRAW_CHUNK];
	for (size_t j = 0; j < m; j++) {
		u[j] = cistern__rng_below(&c->rng, total);
		k[j] = 1;
	}
	for (uint64_t level = 1; level < v->L; level <<= 1) {
		for (size_t j = 0; j < m; j++) {
			uint64_t left = ld(&v->nd[4 * k[j]]);
			bool right = u[j] >= left;
			u[j] -= right ? left : 0;
			k[j] = 2 * k[j] + right;
		}
	}
	for (size_t j = 0; j < m; j++)
		k[j] -= v->L;
}

/* Take slot i for out: pin it (open) or take it (closed). False if it cannot be. */
static bool take_drawn(struct cistern *c, const struct pv *v, uint64_t i, bool closed,
		       struct cistern_sample *s)
{
	if (i >= v->n || leaf_at(v, i) == 0)
		return false; /* only a damaged tree lands here */
	if (!closed) {
		/* Pinned before the lock goes: no eviction while the caller copies. */
		uint64_t word;
		if (!cistern__pin(c, i, RS_HELD, &word))
			return false;
		if (cistern__rs_read_pinned(c, s, i, word) < 0)
			return false; /* spent: max_times_sampled */
		/*
		 * Its last read: the leaf goes now, under the lock, so that the
		 * removal when the last reader lets go (reservoir.c) finds the
		 * tree right without it.
		 */
		if (c->fixed.max_times_sampled && leaf_due(c, v, i) == 0)
			set_leaf(v, i, 0);
		return true;
	}
	if (cistern__rs_read_exclusive(c, s, i) < 0)
		return false;
	return true;
}

/*
 * Before a draw that reads n at once: while reception is open, the
 * watermark and the rate limiter must let it through (reservoir_read.c);
 * then the tree's lock. *closed: whether reception was closed. 0 or -errno.
 */
static int draw_begin(struct cistern *c, size_t n, struct pv *v, bool *closed)
{
	*closed = cistern__rs_closed(c);
	if (!*closed) {
		uint64_t taken; /* 0: the policy has no rate limiter */
		int r = cistern__rs_open_read_ready(c, n, &taken);
		if (r < 0)
			return r;
	}
	pv_of(c, v);
	return lock(c, v);
}

/* The importance weight of a drawn leaf: (least leaf / leaf)^beta, at most 1. */
static double weight_of(uint64_t least, uint64_t leaf, double beta)
{
	double w = pow((double)least / (double)leaf, beta);
	return w < 1 ? w : 1;
}

static int prio_draw(struct cistern *c, struct cistern_sample *out, size_t n, uint64_t *ids,
		     double *weights)
{
	bool closed;
	struct pv v;
	int r = draw_begin(c, 1, &v, &closed);
	if (r < 0)
		return r;
	uint64_t least = ld(&v.nd[3]);
	double beta = bits_to_d(ld(&v.h->beta));
	size_t got = 0;
	int misses = 0;
	while (got < n && misses < RS_PICK_TRIES) {
		uint64_t total = ld(&v.nd[2]);
		if (total == 0)
			break;
		/* After close one draw takes a leaf away: draw them one at a time then. */
		size_t m = closed ? 1 : n - got < DRAW_CHUNK ? n - got : DRAW_CHUNK;
		uint64_t k[DRAW_CHUNK];
		descend_batch(c, &v, total, k, m);
		/* The pins below are locked instructions, which wait for their line: fetch them all first. */
		for (size_t j = 0; j < m; j++)
			if (k[j] < v.n)
				__builtin_prefetch(cistern__slotmeta(c, k[j]), 1, 3);
		for (size_t j = 0; j < m; j++) {
			struct cistern_sample *s = &out[got];
			uint64_t i = k[j];
			/* Before the take, which zeroes the leaf of a sample's last read. */
			uint64_t leaf = i < v.L ? leaf_at(&v, i) : 0;
			if (!take_drawn(c, &v, i, closed, s)) {
				misses++;
				continue;
			}
			if (closed)
				set_leaf(&v, i, 0); /* acquired: no longer drawable */
			if (ids)
				ids[got] = cistern__prio_id(c, s->meta.sample_id, i);
			if (weights)
				weights[got] = weight_of(least, leaf, beta);
			got++;
		}
	}
	if (!closed && got > 0 && got < n) {
		/* While open a batch is whole or not at all. */
		for (size_t j = 0; j < got; j++) {
			cistern__rs_unacquire(c, &out[j]);
			/* A read given back: a sample it had spent is drawable again. */
			if (c->fixed.max_times_sampled && out[j].index_ < v.n)
				set_leaf(&v, out[j].index_, leaf_due(c, &v, out[j].index_));
		}
		got = 0;
	}
	unlock(&v);
	return got ? (int)got : -EAGAIN;
}

/* Is the window shape one this segment can hold? */
static bool shape_ok(const struct cistern *c, size_t length, size_t step)
{
	if (!has_windows(c) || length == 0 || step == 0 || step >= (UINT64_C(1) << 32) ||
	    length > c->slot_count || length > c->fixed.nb_time_steps)
		return false;
	return ((uint64_t)length - 1) * step + 1 <= c->fixed.nb_time_steps;
}

/*
 * After RS_PICK_TRIES draws hit no end of a complete window: sum the leaves
 * of the slots that end one now and draw among them alone, so that a window
 * is found whenever one is held, with the same law. The slot, or UINT64_MAX
 * if none ends one. Under the lock.
 */
static uint64_t draw_end_exactly(struct cistern *c, const struct pv *v, size_t length, size_t step)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < v->n; i++)
		if (leaf_at(v, i) && cistern__windows_ends_at(c, i, length, step))
			sum += leaf_at(v, i);
	if (sum == 0)
		return UINT64_MAX;
	uint64_t u = cistern__rng_below(&c->rng, sum);
	for (uint64_t i = 0; i < v->n; i++) {
		uint64_t leaf = leaf_at(v, i);
		if (!leaf || !cistern__windows_ends_at(c, i, length, step))
			continue;
		if (u < leaf)
			return i;
		u -= leaf;
	}
	return UINT64_MAX; /* a window went between the passes: the caller draws again later */
}

/*
 * Take the window of `length` members `step` apart that ends at slot x into
 * out[0 .. length): pin (open) or take (closed) its members, then set each
 * member's leaf as its slot now says: 0 once taken (closed) or spent by this
 * read (max_times_sampled); a window given back leaves them as they were.
 * True if taken. Under the lock.
 */
static bool take_window_ending(struct cistern *c, const struct pv *v, struct cistern_sample *out,
			       uint64_t x, size_t length, size_t step, bool closed)
{
	for (size_t k = 0; k < length; k++)
		out[k].index_ = UINT32_MAX;
	bool taken = cistern__windows_take_ending(c, out, x, length, step, closed) == 0;
	/* A pin leaves its slot HELD, so its leaf stays, unless it was the last read allowed. */
	if (!closed && !c->fixed.max_times_sampled)
		return taken;
	for (size_t k = 0; k < length; k++) {
		uint64_t i = out[k].index_;
		if (i < v->n && leaf_at(v, i) != leaf_due(c, v, i))
			set_leaf(v, i, leaf_due(c, v, i));
	}
	return taken;
}

/*
 * Draw up to n windows by their last member's priority, in one hold of the
 * lock, and pin (open) or take (closed) the members of window j into
 * out[j * length .. (j + 1) * length), with its last member's id and weight
 * in ids[j] and weights[j] (either may be NULL). While open the descents of
 * up to DRAW_CHUNK draws go down the tree together, as prio_draw()'s do;
 * a draw that lands on no end of a complete window (or on a leaf a take of
 * this batch has since spent) is a miss and is drawn again: the take finds
 * the window that ends at the draw, or fails. Once the misses
 * reach RS_PICK_TRIES for each window drawn so far and one more, the rest
 * of the batch comes from the exact pass (draw_end_exactly()), one window
 * at a time; its first failed take ends the batch. After close one draw
 * takes a window away: draws go one at a time then. The count (1 to n),
 * -EAGAIN (no complete window now), or -errno. Never waits. The caller runs
 * it in the reader's bracket.
 */
static int prio_draw_windows(struct cistern *c, struct cistern_sample *out, size_t n, size_t length,
			     size_t step, uint64_t *ids, double *weights)
{
	if (!shape_ok(c, length, step))
		return -EINVAL;
	bool closed;
	struct pv v;
	int r = draw_begin(c, length, &v, &closed);
	if (r < 0)
		return r;
	double beta = bits_to_d(ld(&v.h->beta));
	size_t got = 0;
	uint64_t misses = 0;
	bool exact = false;
	while (got < n && ld(&v.nd[2]) != 0) {
		uint64_t k[DRAW_CHUNK];
		size_t m = 1;
		if (!exact && misses >= (uint64_t)RS_PICK_TRIES * (got + 1))
			exact = true;
		if (exact) {
			if ((k[0] = draw_end_exactly(c, &v, length, step)) == UINT64_MAX)
				break;
		} else {
			m = closed ? 1 : n - got < DRAW_CHUNK ? n - got : DRAW_CHUNK;
			descend_batch(c, &v, ld(&v.nd[2]), k, m);
			/* The looks at the windows below start at the slots' words: fetch them all first. */
			for (size_t j = 0; j < m; j++)
				if (k[j] < v.n)
					__builtin_prefetch(cistern__slotmeta(c, k[j]), 0, 3);
		}
		size_t before = got;
		for (size_t j = 0; j < m; j++) {
			uint64_t x = k[j];
			/* Before the take, which zeroes the leaves of members it spends or takes. */
			uint64_t leaf = x < v.n ? leaf_at(&v, x) : 0;
			/* The least leaf now, as a draw of this window alone would see it. */
			uint64_t least = ld(&v.nd[3]);
			struct cistern_sample *w = out + got * length;
			/* The take finds the window from x, so it is the test that x ends one. */
			if (leaf == 0 || !take_window_ending(c, &v, w, x, length, step, closed)) {
				misses++;
				continue;
			}
			if (ids)
				ids[got] = cistern__prio_id(c, w[length - 1].meta.sample_id, x);
			if (weights)
				weights[got] = weight_of(least, leaf, beta);
			got++;
		}
		if (exact && got == before)
			break; /* the exact pass found a window it could not take: try again later */
	}
	unlock(&v);
	if (got == 0) {
		uint64_t shape = (uint64_t)length << 32 | (uint32_t)step;
		/*
		 * No window to draw: say which shape this reader waits for (see
		 * evict_orphan()). Relaxed: a hint, read by producers on their
		 * slow path only.
		 */
		if (!closed && cistern__windows_wanted(c) != shape)
			atomic_store_explicit(&c->hdr->window_wanted, shape, memory_order_relaxed);
		return -EAGAIN;
	}
	return (int)got;
}

static int prio_try_acquire_window(struct cistern *c, struct cistern_sample *out, size_t length,
				   size_t step)
{
	int r = prio_draw_windows(c, out, 1, length, step, NULL, NULL);
	return r < 0 ? r : 0;
}

static int prio_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	int r = prio_draw(c, s, 1, NULL, NULL);
	return r < 0 ? r : 0;
}

static int prio_try_acquire_batch(struct cistern *c, struct cistern_sample *out, size_t n)
{
	return prio_draw(c, out, n, NULL, NULL);
}

/* A sample handed back unread: one taken after close is HELD again, and drawable. */
static int prio_unacquire(struct cistern *c, struct cistern_sample *s)
{
	struct pv v;
	pv_of(c, &v);
	int r = lock(c, &v);
	if (r < 0)
		return r;
	uint32_t i = s->index_;
	r = cistern__rs_unacquire(c, s);
	if (r == 0 && i < v.n)
		set_leaf(&v, i, leaf_due(c, &v, i));
	unlock(&v);
	return r;
}

/* Set every leaf that disagrees with its slot, and its path. Under the lock. */
static void sync_leaves(const struct cistern *c, const struct pv *v)
{
	for (uint64_t i = 0; i < v->n; i++) {
		uint64_t due = leaf_due(c, v, i);
		if (leaf_at(v, i) != due)
			set_leaf(v, i, due);
	}
}

static void prio_reclaim(struct cistern *c, uint32_t owner)
{
	cistern__rs_reclaim(c, owner);
	/* A dead reader's samples went back to HELD outside the lock: give them their leaves. */
	struct pv v;
	pv_of(c, &v);
	if (lock(c, &v) < 0)
		return;
	sync_leaves(c, &v);
	unlock(&v);
}

/*
 * Paths of m leaves just set, recomputed level by level for all of them at
 * once (their loads overlap, as in descend_batch()). A parent shared by two
 * is recomputed twice, to the same value: each level reads only the level
 * below, which is final. Under the lock.
 */
static void pull_batch(const struct pv *v, uint64_t *k, size_t m)
{
	for (uint64_t level = 1; level < v->L; level <<= 1)
		for (size_t j = 0; j < m; j++) {
			k[j] >>= 1;
			pull(v, k[j]);
		}
}

/* Set leaf i alone, leaving its path to pull_batch(). */
static void put_leaf(const struct pv *v, uint64_t i, uint64_t leaf)
{
	uint64_t k = v->L + i;
	st(&v->nd[2 * k], leaf);
	st(&v->nd[2 * k + 1], leaf ? leaf : UINT64_MAX);
}

static int prio_update(struct cistern *c, const uint64_t *ids, const double *q, size_t n)
{
	struct pv v;
	pv_of(c, &v);
	int r = lock(c, &v);
	if (r < 0)
		return r;
	uint64_t applied = 0;
	uint64_t k[DRAW_CHUNK];
	size_t m = 0;
	for (size_t j = 0; j < n; j++) {
		uint64_t i = ids[j] & CISTERN__PRIO_SLOT_MASK;
		if (i >= v.n)
			continue;
		struct cistern_slotmeta *sm = cistern__slotmeta(c, i);
		/* Relaxed: under the lock no commit, eviction or take can move this slot. */
		unsigned s = sw_state(atomic_load_explicit(&sm->word, memory_order_relaxed));
		if (s != RS_HELD && s != RS_EVICTING && s != RS_ACQUIRED)
			continue;
		if (cistern__prio_id(c, sm->sample_id, i) != ids[j])
			continue;
		st(&v.prio[i], d_to_bits(q[j]));
		raise_max(&v, q[j]);
		applied++;
		if (s == RS_ACQUIRED)
			continue; /* taken after close: its leaf stays 0 */
		put_leaf(&v, i, leaf_of(&v, q[j]));
		k[m++] = v.L + i;
		if (m == DRAW_CHUNK) {
			pull_batch(&v, k, m);
			m = 0;
		}
	}
	pull_batch(&v, k, m);
	unlock(&v);
	atomic_fetch_add_explicit(&v.h->updates, applied, memory_order_relaxed);
	atomic_fetch_add_explicit(&v.h->stale, n - applied, memory_order_relaxed);
	return (int)applied;
}

static int prio_set_beta(struct cistern *c, double beta)
{
	if (!(beta >= 0 && beta <= 1))
		return -EINVAL;
	struct pv v;
	pv_of(c, &v);
	/* Relaxed: a draw takes whichever beta it finds; nothing else hangs on it. */
	st(&v.h->beta, d_to_bits(beta));
	return 0;
}

static void prio_info(const struct cistern *c, struct cistern_prio_info *info)
{
	struct pv v;
	pv_of(c, &v);
	memset(info, 0, sizeof(*info));
	info->alpha = c->fixed.alpha;
	info->epsilon = c->fixed.epsilon;
	info->beta = bits_to_d(ld(&v.h->beta));
	info->total = (double)ld(&v.nd[2]) / LEAF_ONE;
	uint64_t least = ld(&v.nd[3]);
	info->least = least == UINT64_MAX ? 0 : (double)least / LEAF_ONE;
	info->max_priority = max_prio(&v);
	info->updates = ld(&v.h->updates);
	info->stale_updates = ld(&v.h->stale);
	info->rebuilds = ld(&v.h->rebuilds);
}

int cistern__prio_check(struct cistern *c, uint64_t *where)
{
	struct pv v;
	pv_of(c, &v);
	int r = lock(c, &v);
	if (r < 0)
		return r;
	uint64_t bad = 0;
	for (uint64_t i = 0; i < v.L && !bad; i++) {
		uint64_t due = i < v.n ? leaf_due(c, &v, i) : 0;
		if (leaf_at(&v, i) != due ||
		    ld(&v.nd[2 * (v.L + i) + 1]) != (due ? due : UINT64_MAX))
			bad = v.L + i;
	}
	for (uint64_t k = v.L - 1; k >= 1 && !bad; k--) {
		uint64_t ma = ld(&v.nd[4 * k + 1]), mb = ld(&v.nd[4 * k + 3]);
		if (ld(&v.nd[2 * k]) != ld(&v.nd[4 * k]) + ld(&v.nd[4 * k + 2]) ||
		    ld(&v.nd[2 * k + 1]) != (ma < mb ? ma : mb))
			bad = k;
	}
	unlock(&v);
	if (where)
		*where = bad;
	return bad ? -EPROTO : 0;
}

static const struct cistern_ops prio_ops = {
	.init = prio_init,
	.try_reserve = prio_try_reserve,
	.commit = prio_commit,
	.abort = cistern__rs_abort,
	.try_acquire = prio_try_acquire,
	.release = cistern__rs_release_generic,
	.release_batch = cistern__rs_release_batch,
	.unacquire = prio_unacquire,
	.try_acquire_batch = prio_try_acquire_batch,
	.try_acquire_window = prio_try_acquire_window,
	.windows_drained = cistern__windows_drained,
	.drained = cistern__rs_drained,
	.reclaim = prio_reclaim,
	.population = cistern__rs_population,
};

static const char *prio_config_problem(const struct cistern_config *cfg)
{
	const char *why = cistern__rs_config_problem(cfg);
	if (why)
		return why;
	if (!(cfg->alpha >= 0 && cfg->alpha <= 8))
		return "alpha must be a number from 0 to 8";
	if (!(cfg->beta >= 0 && cfg->beta <= 1))
		return "beta must be a number from 0 to 1";
	if (!(cfg->epsilon >= 0 && cfg->epsilon <= 1e300))
		return "epsilon must be a finite number of at least 0";
	/* A sweep_size asks for windows: the (sim_id, time_step) table of SimPairedReservoir. */
	if (cfg->sweep_size > 0 && cfg->nb_time_steps < 2)
		return "a prioritized segment with a sweep_size (windows) needs nb_time_steps of 2 "
		       "or more";
	if ((uint64_t)cfg->sweep_size * cfg->nb_time_steps > CISTERN_PAIR_INDEX_MAX)
		return "sweep_size * nb_time_steps is above CISTERN_PAIR_INDEX_MAX (2^28)";
	return NULL;
}

/* The tools read its slots as a reservoir's. */
static struct cistern_slot_view prio_classify(uint64_t word)
{
	return cistern__reservoir_snap_ops.classify(word);
}

/*
 * A dump keeps the samples and the parameters, not the priorities: each
 * restored sample gets the largest priority seen, 1 in a new segment, as a
 * put without one would.
 */
static int prio_restore(struct cistern *c, uint64_t n, uint64_t next_id)
{
	int r = cistern__reservoir_snap_ops.restore(c, n, next_id);
	if (r < 0)
		return r;
	struct pv v;
	pv_of(c, &v);
	if ((r = lock(c, &v)) < 0)
		return r;
	for (uint64_t i = 0; i < n; i++) {
		st(&v.prio[i], d_to_bits(max_prio(&v)));
		/* The table of a segment with windows: the newest sample of a key wins, as live. */
		if (has_windows(c)) {
			struct cistern_slotmeta *m = cistern__slotmeta(c, i);
			cistern__pairs_publish(c, i, m->sim_id, m->time_step);
		}
	}
	rebuild(c, &v);
	unlock(&v);
	return 0;
}

static const struct cistern_snap_ops prio_snap_ops = {
	.classify = prio_classify,
	.restore = prio_restore,
};

static const struct cistern__priorities prio_draws = {
	.draw = prio_draw,
	.draw_windows = prio_draw_windows,
	.set_reserved = prio_set_reserved,
	.update = prio_update,
	.set_beta = prio_set_beta,
	.info = prio_info,
};

const struct cistern__policy cistern__prioritized_policy = {
	.name = "prioritized",
	.value = CISTERN_PRIORITIZED,
	.ops = &prio_ops,
	.snap = &prio_snap_ops,
	.config_problem = prio_config_problem,
	.index_entries = prio_index_entries,
	.new_state = cistern__rs_new_state,
	.free_state = cistern__rs_free_state,
	.reclaim_idle = cistern__drop_pins,
	.flags = 0,
	.evicts_seen = true,
	.counts_reads = true,
	.readers_pin = true,
	.caps_reads = true,
	.prio = &prio_draws,
};
