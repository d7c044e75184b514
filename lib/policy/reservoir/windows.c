/* SPDX-License-Identifier: MIT */
/*
 * windows.c - windows: `length` samples of one simulation, `step` time
 * steps apart. SimPairedReservoir draws them uniformly among the complete
 * windows held now; the prioritized policy (prioritized.c) draws a window's
 * last member by priority and takes the window that ends there
 * (cistern__windows_take_ending()). The pair read (pairs.c) draws the
 * windows of length 2 and step 1, without the checks on sample ids and
 * episode ends.
 *
 * A window is named by its first member (its head) and its shape, so
 * picking uniformly among the heads of complete windows is picking uniformly
 * among windows. It is complete when every time step of its span, from the
 * head's t to t + (length-1) * step, is held, the sample ids increase along
 * the span, and no step but the last carries CISTERN_META_END_OF_EPISODE.
 * Every one of these conditions is between neighbouring steps, so a sample
 * lies in some complete window exactly when the run of such steps around it
 * is at least a span long (run_around()).
 *
 * It works on the (sim_id, time_step) index of pairs.c. Entries are hints:
 * the members are pinned (or, after close, taken) and their keys and ids
 * checked again before the window is handed out. The steps between members
 * are looked at, not pinned: the span was whole when it was looked at.
 */
#include <errno.h>

#include "policy/reservoir/reservoir.h"
#include "policy/reservoir/pins.h"
#include "policy/reservoir/windows.h"

struct shape {
	uint32_t length, step;
	uint32_t span; /* (length - 1) * step + 1 time steps */
};

static struct shape shape_of(uint64_t word)
{
	struct shape s = {(uint32_t)(word >> 32), (uint32_t)word, 0};
	/* In 64 bits: a shape read from the header may be anything; too long a span fits no segment. */
	uint64_t span = s.length ? ((uint64_t)s.length - 1) * s.step + 1 : 0;
	s.span = span > UINT32_MAX ? UINT32_MAX : (uint32_t)span;
	return s;
}

static uint64_t packed(size_t length, size_t step)
{
	return (uint64_t)length << 32 | (uint32_t)step;
}

static _Atomic uint64_t *entry(struct cistern *c, uint32_t sim, uint32_t t)
{
	return &cistern__index(c)[(uint64_t)sim * c->fixed.nb_time_steps + t];
}

/* What a look at one held slot sees: its key, id and flags. */
struct look {
	uint32_t sim, t, flags;
	uint64_t id;
};

/* Look at slot i: false unless it holds a sample now (a hint; nothing is pinned). */
static bool look_at(struct cistern *c, uint64_t i, struct look *l)
{
	struct cistern_slotmeta *m = cistern__slotmeta(c, i);
	/* [rs-held] acquire: the fields read next are those the commit published. */
	uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
	if (sw_state(w) != RS_HELD)
		return false;
	l->sim = __atomic_load_n(&m->sim_id, __ATOMIC_RELAXED);
	l->t = __atomic_load_n(&m->time_step, __ATOMIC_RELAXED);
	l->flags = __atomic_load_n(&m->flags, __ATOMIC_RELAXED);
	l->id = __atomic_load_n(&m->sample_id, __ATOMIC_RELAXED);
	return l->sim < c->fixed.sweep_size && l->t < c->fixed.nb_time_steps;
}

/* The slot holding (sim, t) now, seen as *l, or UINT64_MAX. */
static uint64_t held_step(struct cistern *c, uint32_t sim, uint32_t t, struct look *l)
{
	/* [sim-pair] acquire: the entry's slot was published after its sample. */
	uint64_t e = atomic_load_explicit(entry(c, sim, t), memory_order_acquire);
	if (e == 0 || e > c->slot_count || !look_at(c, e - 1, l) || l->sim != sim || l->t != t)
		return UINT64_MAX;
	return e - 1;
}

/* May step b follow step a (a's time step + 1) inside a window? */
static bool links(const struct look *a, const struct look *b)
{
	return a->id < b->id && !(a->flags & CISTERN_META_END_OF_EPISODE);
}

/*
 * Look at slot x, false unless it holds the sample the index names for its
 * key: a sample put again at the same key since is no longer in any window.
 */
static bool look_indexed(struct cistern *c, uint64_t x, struct look *l)
{
	/* [sim-pair] acquire, as in held_step(). */
	return look_at(c, x, l) &&
	       atomic_load_explicit(entry(c, l->sim, l->t), memory_order_acquire) == x + 1;
}

/*
 * Is the sample in slot x the head of a complete window of shape s? If so,
 * and slots is not NULL, the members' slots go to slots[k].index_ and the
 * ids seen to slots[k].meta.sample_id, k = 0 .. length-1.
 */
static bool window_at(struct cistern *c, uint64_t x, const struct shape *s,
		      struct cistern_sample *slots)
{
	struct look prev, cur;
	if (!look_indexed(c, x, &prev) || (uint64_t)prev.t + s->span > c->fixed.nb_time_steps)
		return false;
	if (slots) {
		slots[0].index_ = (uint32_t)x;
		slots[0].meta.sample_id = prev.id;
	}
	for (uint32_t k = 1; k < s->span; k++) {
		uint64_t i = held_step(c, prev.sim, prev.t + 1, &cur);
		if (i == UINT64_MAX || !links(&prev, &cur))
			return false;
		if (slots && k % s->step == 0) {
			slots[k / s->step].index_ = (uint32_t)i;
			slots[k / s->step].meta.sample_id = cur.id;
		}
		prev = cur;
	}
	return true;
}

static bool is_window_head(struct cistern *c, uint64_t x, void *arg)
{
	return cistern__rs_is_held(c, x, NULL) && window_at(c, x, arg, NULL);
}

/*
 * How many steps the run of linked, held steps around the sample in slot x
 * has, counted up to `enough` (0 if x holds nothing).
 */
static uint32_t run_around(struct cistern *c, uint64_t x, uint32_t enough)
{
	struct look at, prev, cur;
	if (!look_indexed(c, x, &at))
		return 0;
	uint32_t run = 1;
	for (prev = at; run < enough && prev.t > 0; prev = cur, run++)
		if (held_step(c, prev.sim, prev.t - 1, &cur) == UINT64_MAX || !links(&cur, &prev))
			break;
	for (prev = at; run < enough && prev.t + 1 < c->fixed.nb_time_steps; prev = cur, run++)
		if (held_step(c, prev.sim, prev.t + 1, &cur) == UINT64_MAX || !links(&prev, &cur))
			break;
	return run;
}

uint64_t cistern__windows_wanted(struct cistern *c)
{
	/* Relaxed: a hint for the producers' slow path (see cistern__windows_is_orphan()). */
	return atomic_load_explicit(&c->hdr->window_wanted, memory_order_relaxed);
}

/*
 * A sample that lies in no complete window of the shape readers wait for
 * can never be read by them: see cistern__pairs_is_orphan() for why such a
 * sample may go unseen once nothing seen can be evicted. The shape is read
 * again for each sample, and a bad one (written by another process) judges
 * nothing an orphan.
 */
bool cistern__windows_is_orphan(struct cistern *c, uint64_t index, uint64_t wanted)
{
	struct shape s = shape_of(wanted);
	struct cistern_slotmeta *m = cistern__slotmeta(c, index);
	if (s.length == 0 || s.step == 0 || s.span > c->fixed.nb_time_steps)
		return false;
	return cistern__rs_is_held(c, index, NULL) &&
	       atomic_load_explicit(&m->seen, memory_order_relaxed) == 0 &&
	       atomic_load_explicit(&m->pins, memory_order_relaxed) == 0 &&
	       run_around(c, index, s.span) < s.span;
}

bool cistern__windows_any_held(struct cistern *c, uint64_t wanted)
{
	struct shape s = shape_of(wanted);
	if (s.length == 0 || s.step == 0 || s.span > c->fixed.nb_time_steps)
		return false;
	/* A scan, stopped at the first window, as cistern__pairs_any_held(). */
	for (uint64_t i = 0; i < c->slot_count; i++)
		if (is_window_head(c, i, &s))
			return true;
	return false;
}

/*
 * Do the members in out[] (pinned or taken) make the window: one sim, steps
 * `step` apart, no end of episode before the last?
 */
static bool members_match(const struct cistern_sample *out, const struct shape *s)
{
	for (uint32_t k = 0; k < s->length; k++) {
		const struct cistern_meta *m = &out[k].meta;
		if (m->sim_id != out[0].meta.sim_id ||
		    m->time_step != out[0].meta.time_step + k * s->step)
			return false;
		if (k + 1 < s->length && (m->flags & CISTERN_META_END_OF_EPISODE))
			return false;
	}
	return true;
}

/*
 * Pin the members of a window window_at() just found (open), or take them
 * (closed). out[] first holds what window_at() found, then the members.
 * -EBUSY when the window changed under us (a retry draws again), with
 * nothing left pinned or taken. The pinned members are counted as read only
 * once the whole window is confirmed.
 */
static int take_members(struct cistern *c, struct cistern_sample *out, const struct shape *s,
			bool closed)
{
	uint32_t got = 0; /* members pinned or taken: out[0 .. got) */
	bool ok = true;
	for (uint32_t k = 0; k < s->length && ok; k++) {
		/* out[k] is overwritten by the sample: keep what window_at() saw. */
		uint64_t idx = out[k].index_, id = out[k].meta.sample_id, w;
		if (closed) {
			ok = cistern__rs_read_exclusive(c, &out[k], idx) == 0;
		} else {
			ok = cistern__pin(c, idx, RS_HELD, &w);
			if (ok)
				rs_fill_sample(c, &out[k], idx, w, RS_LIVE_PINNED);
		}
		if (ok)
			got++;
		/* The same sample as seen: not one put at that key since. */
		ok = ok && out[k].meta.sample_id == id;
	}
	if (ok && members_match(out, s)) {
		if (closed)
			return 0;
		for (uint32_t k = 0; k < s->length; k++) {
			if (cistern__rs_read_pinned(c, &out[k], out[k].index_,
						    sw_make(out[k].pos_, RS_HELD, 0)) == 0)
				continue;
			/*
			 * Member k is spent (max_times_sampled) and its pin
			 * given back: the window is not read. The reads
			 * counted before it go back, the pins after it too.
			 */
			for (uint32_t j = 0; j < k; j++)
				cistern__rs_unacquire(c, &out[j]);
			for (uint32_t j = k + 1; j < s->length; j++) {
				cistern__unpin(c, out[j].index_);
				rs_let_go(c, out[j].index_);
			}
			return -EBUSY;
		}
		return 0;
	}
	for (uint32_t k = 0; k < got; k++) {
		if (closed)
			cistern__rs_unacquire(c, &out[k]);
		else if (cistern__unpin(c, out[k].index_) == 0)
			rs_let_go(c,
				  out[k].index_); /* ours may have been a spent sample's last pin */
	}
	return -EBUSY;
}

/* Draw a window uniformly among the complete ones and take its members (take_members()). */
static int take_window(struct cistern *c, struct cistern_sample *out, struct shape *s, bool closed)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	uint64_t x;
	int r = cistern__pick(c, &rs->pick_window, is_window_head, s, &x);
	if (r < 0)
		return r;
	if (!window_at(c, x, s, out))
		return -EBUSY;
	return take_members(c, out, s, closed);
}

/*
 * The head of the window of shape s whose last member is the sample in slot
 * x, if x holds the sample the index names for its key and the head's time
 * step is held now (a hint), else UINT64_MAX.
 */
static uint64_t head_of_end(struct cistern *c, uint64_t x, const struct shape *s)
{
	struct look end, head;
	if (x >= c->slot_count || !look_indexed(c, x, &end) || end.t + 1 < s->span)
		return UINT64_MAX;
	return held_step(c, end.sim, end.t + 1 - s->span, &head);
}

bool cistern__windows_ends_at(struct cistern *c, uint64_t x, size_t length, size_t step)
{
	struct shape s = shape_of(packed(length, step));
	uint64_t h = head_of_end(c, x, &s);
	/* The walk from the head ends at the slot the index names for x's key: x, as just seen. */
	return h != UINT64_MAX && window_at(c, h, &s, NULL);
}

int cistern__windows_take_ending(struct cistern *c, struct cistern_sample *out, uint64_t x,
				 size_t length, size_t step, bool closed)
{
	struct shape s = shape_of(packed(length, step));
	uint64_t h = head_of_end(c, x, &s);
	if (h == UINT64_MAX || !window_at(c, h, &s, out) || out[s.length - 1].index_ != x)
		return -EBUSY;
	return take_members(c, out, &s, closed);
}

int cistern__windows_try_acquire(struct cistern *c, struct cistern_sample *out, size_t length,
				 size_t step)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	struct cistern_hdr *h = c->hdr;
	struct shape s = shape_of(packed(length, step));
	bool closed = cistern__rs_closed(c);
	uint64_t taken = 0;
	/* A picker built for another shape picks among the wrong heads: rebuild it. */
	if (rs->window_shape != packed(length, step)) {
		rs->window_shape = packed(length, step);
		rs->pick_window.stale = true;
	}
	if (!closed) {
		/* Acquire, no edge: population is a relaxed hint; slot words are acquired. */
		if (atomic_load_explicit(&h->population, memory_order_acquire) <
		    c->fixed.watermark) {
			cistern__rs_rate_stuck(c, false); /* waits for a put (rate_limit.c) */
			return -EAGAIN;
		}
		int b = cistern__pin_bit(c);
		if (b < 0)
			return b;
		if (!cistern__rs_rate_take(c, length, &taken))
			return -EAGAIN;
	}
	int r = -EAGAIN;
	for (int tries = 0; tries < RS_PICK_TRIES; tries++) {
		r = take_window(c, out, &s, closed);
		if (r != -EBUSY)
			break;
		r = -EAGAIN;
	}
	cistern__rs_rate_settle(c, taken, r == 0 ? length : 0);
	if (r == -EAGAIN && !closed) {
		/*
		 * No window to draw: say which shape this reader waits for, so
		 * that a producer stuck on a full buffer may evict an unseen
		 * sample that no such window holds. Relaxed: a hint, read by
		 * producers on their slow path only.
		 */
		if (atomic_load_explicit(&h->window_wanted, memory_order_relaxed) !=
		    packed(length, step))
			atomic_store_explicit(&h->window_wanted, packed(length, step),
					      memory_order_relaxed);
		cistern__rs_rate_stuck(
			c, false); /* it waits for a put, which the limiter lets through */
	}
	return r;
}

/*
 * After close: drained for this shape when nothing is in flight and no
 * complete window is left.
 */
bool cistern__windows_drained(struct cistern *c, size_t length, size_t step)
{
	if (!cistern__rs_closed(c))
		return false;
	if (atomic_load_explicit(&c->hdr->filled, memory_order_seq_cst) == 0) /* [rs-fill] */
		return true;
	struct shape s = shape_of(packed(length, step));
	/* Acquire, no edge: only the state is used. */
	for (uint64_t i = 0; i < c->slot_count; i++) {
		unsigned st = sw_state(
			atomic_load_explicit(&cistern__slotmeta(c, i)->word, memory_order_acquire));
		if (st == RS_RESERVED || st == RS_ACQUIRED)
			return false;
		if (st == RS_HELD && window_at(c, i, &s, NULL))
			return false;
	}
	return true;
}
