/* SPDX-License-Identifier: MIT */
/*
 * reservoir_read.c - reading Reservoir, FIFOEvictReservoir and
 * BatchReservoir: a sample or a batch drawn uniformly, without replacement,
 * from what is held; pinned while reception is open, taken for good after it
 * closed; and batches given back (SimPairedReservoir's pairs too). The slot
 * states and the pin handshake are reservoir.h's and pins.c's.
 */
#include <errno.h>
#include <stdlib.h>

#include "policy/reservoir/reservoir.h"
#include "core/prefetch.h"
#include "policy/reservoir/pins.h"

/*
 * How far batched reads look ahead (cistern__rs_stream_pinned, cistern__rs_release_batch), in slot
 * metadata lines; a power of two. From 8 to 64 it makes little difference.
 */
#define RS_AHEAD 16

/*
 * cistern__rs_release_batch() for the sole reader holding no repeated pins (the usual
 * case): each pinned sample's bit cleared by a release store, with what the
 * loop reads of the handle in locals; anything else through the general path.
 */
static int release_batch_sole(struct cistern *c, struct cistern_sample *s, size_t n)
{
	int first = 0;
	char *meta0 = c->meta0;
	uint64_t mstride = c->meta_stride;
	uint64_t nslots = c->slot_count, bit = UINT64_C(1) << cistern__rs(c)->pin_bit;
	bool capped = c->fixed.max_times_sampled != 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t idx = s[i].index_;
		int r = 0;
		if (s[i].live_ == RS_LIVE_PINNED && idx < nslots) {
			_Atomic uint64_t *pins = &cistern__slotmeta_in(meta0, mstride, idx)->pins;
			uint64_t p = atomic_load_explicit(pins, memory_order_relaxed);
			if (p & bit) {
				/* [unpin] release: our reads of the payload come before it. */
				atomic_store_explicit(pins, p & ~bit, memory_order_release);
				s[i].live_ = 0;
				s[i].data = NULL;
				if (capped)
					cistern__rs_retire_if_spent(c, idx);
			} else {
				r = -EINVAL;
			}
		} else {
			r = cistern__rs_release_generic(c, &s[i]);
		}
		if (r < 0 && first == 0)
			first = r;
	}
	/* [wait-register]: the unpins were plain stores; one wake for all, as below. */
	cistern__fence_before_wake();
	cistern__wake_producers(c);
	return first;
}

/*
 * A whole batch back: as cistern__rs_release_generic() on each sample, but with the
 * next samples' slot metadata prefetched and producers woken once, after the
 * last unpin. One wake suffices: every unpin is a seq_cst RMW before the
 * wake's seq_cst look at producers_waiting (wait.c), so a producer that
 * registered too late to be seen there re-checks after all of them.
 */
int cistern__rs_release_batch(struct cistern *c, struct cistern_sample *s, size_t n)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	if (cistern__reads_alone(c) && rs->dups.used == 0 && rs->pin_bit >= 0)
		return release_batch_sole(c, s, n);
	int first = 0;
	bool wake = false;
	for (size_t i = 0; i < n; i++) {
		if (i + RS_AHEAD < n && s[i + RS_AHEAD].index_ < c->slot_count)
			__builtin_prefetch(cistern__slotmeta(c, s[i + RS_AHEAD].index_), 1, 3);
		int r;
		if (s[i].live_ == RS_LIVE_PINNED && s[i].index_ < c->slot_count) {
			r = cistern__unpin_quiet(c, s[i].index_);
			if (r >= 0) {
				wake |= r > 0;
				s[i].live_ = 0;
				s[i].data = NULL;
				rs_let_go(c, s[i].index_);
			}
		} else {
			r = cistern__rs_release_generic(c, &s[i]);
		}
		if (r < 0 && first == 0)
			first = r;
	}
	if (wake) {
		if (cistern__reads_alone(c))
			cistern__fence_before_wake(); /* [wait-register]: plain unpins */
		cistern__wake_producers(c);
	}
	return first;
}

static bool take_index(struct cistern *c, struct cistern_sample *s, uint64_t idx, bool closed);

/* Open reception: pin a uniformly chosen held sample. After close: take one. */
static int reservoir_take_one(struct cistern *c, struct cistern_sample *s, bool closed)
{
	for (int tries = 0; tries < RS_PICK_TRIES; tries++) {
		uint64_t idx;
		int r = cistern__pick(c, &cistern__rs(c)->pick_read, cistern__rs_is_held, NULL,
				      &idx);
		if (r < 0)
			return r;
		if (take_index(c, s, idx, closed))
			return 0;
	}
	return -EAGAIN;
}

/* Take a specific held slot: pin it (open) or take it (closed). */
static bool take_index(struct cistern *c, struct cistern_sample *s, uint64_t idx, bool closed)
{
	if (closed)
		return cistern__rs_read_exclusive(c, s, idx) == 0;
	uint64_t w;
	if (!cistern__pin(c, idx, RS_HELD, &w))
		return false;
	return cistern__rs_read_pinned(c, s, idx, w) == 0;
}

/*
 * Complete a batch when random picks keep hitting members it already has (a
 * batch that is a large part of what is held): draw the rest without
 * replacement from a fresh snapshot, by a partial Fisher-Yates shuffle.
 */
static int finish_from_snapshot(struct cistern *c, struct cistern_sample *out, size_t got, size_t n,
				bool closed)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	uint32_t *a;
	uint64_t k;
	int r = cistern__snapshot(c, &rs->pick_read, cistern__rs_is_held, NULL, &a, &k);
	if (r < 0)
		return r;
	for (uint64_t i = 0; i < k && got < n; i++) {
		uint64_t j = i + cistern__rng_below(&c->rng, k - i);
		uint32_t idx = a[j];
		a[j] = a[i];
		a[i] = idx;
		if (!cistern__scratch_add(&rs->scratch, idx))
			continue; /* already in the batch */
		if (take_index(c, &out[got], idx, closed))
			got++;
	}
	free(a);
	return (int)got;
}

/*
 * The sole reader's batch, after cistern__rs_stream_pinned() stored a pin on each of the
 * n candidates in s[] (index_ = slot, pos_ = the word it saw held): one
 * seq_cst fence, then each slot word is read again. An unchanged word means
 * no producer can evict the sample any more (the handshake in pins.c); a
 * changed one means a producer took the slot before the fence, and that pin
 * is taken back and the slot left out of the batch's set of members, so that
 * whatever is held there now may still be drawn. The confirmed members are
 * counted as seen and made into samples, packed at the front of s[].
 * Returns how many; *woke is set if a seen count went from 0 to 1.
 */
static size_t confirm_sole_pins(struct cistern *c, struct cistern_sample *s, size_t n, bool *woke)
{
	size_t kept = 0;
	bool undone = false, prefetch = !c->gathering;
	/* Locals: stores into s[] could alias the handle's fields (see cistern__rs_stream_pinned()). */
	char *meta0 = c->meta0;
	uint64_t mstride = c->meta_stride;
	const char *arena = c->arena;
	uint64_t stride = c->slot_stride;
	/* rs_over_cap(): the cap less one, the largest count with the cap off (0). */
	uint32_t cap_less_one = c->fixed.max_times_sampled - 1u;
	/* [pin-evict] seq_cst: orders every pin store above before the look again below. */
	cistern__full_fence();
	for (size_t i = 0; i < n; i++) {
		uint32_t idx = s[i].index_;
		uint64_t w = s[i].pos_;
		struct cistern_slotmeta *m = cistern__slotmeta_in(meta0, mstride, idx);
		if (atomic_load_explicit(&m->word, memory_order_relaxed) != w) {
			/* Only a pin stored now can fail: a repeated one kept the slot. */
			cistern__unpin_sole_store(c, idx);
			cistern__scratch_forget(&cistern__rs(c)->scratch, idx);
			undone = true;
			continue;
		}
		/* seen += 1 by a load and a store: cistern__seen_add() for the sole reader. */
		uint32_t seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
		if (__builtin_expect(seen > cap_less_one, 0)) {
			/* Spent (max_times_sampled), and pinned by us already: drop this pin. */
			cistern__unpin_quiet(c, idx);
			cistern__scratch_forget(&cistern__rs(c)->scratch, idx);
			cistern__rs_retire_if_spent(c, idx);
			undone = true;
			continue;
		}
		atomic_store_explicit(&m->seen, seen + 1, memory_order_relaxed);
		if (seen == 0) {
			cistern__rs_note_seen(c, idx);
			*woke = true;
		}
		const char *data = arena + idx * stride;
		if (prefetch)
			__builtin_prefetch(data, 0, 3);
		rs_fill_sample_at(&s[kept++], m, data, idx, w, RS_LIVE_PINNED);
	}
	if (undone) {
		/* A producer may have backed off from a pin that is gone now. [wait-register] */
		cistern__fence_before_wake();
		cistern__wake_producers(c);
	}
	return kept;
}

/*
 * Pin the members of an open-reception batch while held samples are dense,
 * i.e. while cistern__pick() would probe. The probes are drawn ahead, up to
 * RS_AHEAD of them (up to 2 * RS_BLOCK, a block of RS_BLOCK at a time, in
 * the common case of stream_blocks()), and the slot metadata line of each
 * is prefetched when it is drawn, so that the cache misses of a batch
 * overlap instead of following one another. Each candidate is then judged
 * as a probe is: skipped unless held, counted as a repeat if already in the
 * batch, else pinned. The draws are independent and uniform over the slots,
 * so what is taken is uniform over the held samples, without replacement,
 * as with one cistern__pick() per member; drawing a few more than are used
 * changes nothing about the ones used.
 *
 * The first payload line of each member is prefetched once it is pinned, for
 * the caller's reads in place, unless the batch is being gathered
 * (cistern_get_batch prefetches whole payloads as it copies; doing both was
 * slower than either).
 *
 * Repeats cost no pin: the scratch set finds them before pinning, or our own
 * bit, already on the slot, tells them (below). Counts
 * (gets) are added once for the run, and producers are woken once, after the
 * last seen count that went from 0 to 1.
 *
 * The sole reader (CISTERN_SINGLE_READER) stores its pins plainly as it goes
 * and confirms them all after one seq_cst fence (confirm_sole_pins()), where
 * every other reader pays a locked instruction and a full barrier per member.
 *
 * Returns with *got members in out[0..*got) and *dups repeats counted; when
 * a member takes `probes` misses in a row, or repeats pass the caller's
 * bound, it stops early and the caller goes on member by member.
 *
 * While the reader holds nothing (rs_pin_tells_repeats()), a slot that
 * carries its pin bit was drawn by this batch already: repeats are told by
 * that bit, found by the pin itself, and the scratch set is left empty (the
 * caller fills it if it goes on member by member).
 *
 * Gathering (gather.c; only while repeats are told by the pin bit): the
 * members are left pinned but not counted as read, with index_ and the word
 * seen held in pos_; the sole reader's pins are not confirmed either, and
 * the caller confirms them. The sole reader prefetches each candidate's
 * payload with its metadata line when it draws it, so that the caller's
 * copies, made once the pins are confirmed, find the members in cache: one
 * pass over memory. Copying each member as soon as its pin was stored,
 * inside this loop, measured slower, the more so the slower the memory.
 * Any other reader leaves the payloads to the caller's copies, which
 * prefetch them ahead: its pins are locked instructions, and prefetching
 * the payloads between them measured slower.
 */
/*
 * Pin a member while the handle holds nothing (rs_pin_tells_repeats()):
 * false, with nothing changed, if our bit is on the slot already, i.e. this
 * batch drew it before. The sole reader stores its bit (it is the only
 * writer of the word; cistern__rs_stream_pinned() confirms after its fence); any
 * other reader sets it with a seq_cst RMW ([pin-evict]), the first half of its handshake
 * with evictors (pins.c), whose old value tells the repeat at no extra cost.
 */
static inline bool pin_new_member(_Atomic uint64_t *pins, uint64_t bit, bool sole)
{
	if (!sole)
		return !(atomic_fetch_or_explicit(pins, bit, memory_order_seq_cst) & bit);
	uint64_t old = atomic_load_explicit(pins, memory_order_relaxed);
	if (old & bit)
		return false;
	atomic_store_explicit(pins, old | bit, memory_order_relaxed);
	return true;
}

/*
 * cistern__rs_stream_pinned()'s state while it draws and pins, in one place for its
 * two loops (stream_blocks(), stream_loop()).
 */
struct stream {
	char *meta0;
	uint64_t mstride, nslots, probes, bit, misses;
	/* The sole reader's gather: how many lines of each candidate's payload to prefetch. */
	unsigned pf_lines;
	size_t k, d, dmax;
	unsigned win, qh;
	bool woke;
	struct cistern_rng rng;
	struct cistern_rng32 pool; /* two draws to each output (slot counts fit in 32 bits) */
	struct cistern_scratch set;
	uint32_t q[RS_AHEAD];
};

/*
 * A candidate just drawn: its metadata line for the pin (a hint only: the
 * pin reads the slot again, atomically), and when the batch is gathered the
 * start of its payload too, so that the copy after the pins finds it in
 * cache; the sample's length is not known yet, so the slot's is used.
 */
static inline __attribute__((always_inline)) void stream_prefetch(const struct stream *st,
								  uint32_t idx, bool payload)
{
	const char *meta = (const char *)cistern__slotmeta_in(st->meta0, st->mstride, idx);
	__builtin_prefetch(meta, 1, 3);
	if (payload) {
		/* The payload follows the metadata line (see rs_payload_lines()). */
		cistern__prefetch_lines(meta + sizeof(struct cistern_slotmeta), st->pf_lines);
	}
}

/*
 * A member just pinned (idx, its word w) into *s. The sole reader's pins,
 * and every gathered member's, are confirmed and counted by the caller:
 * only the slot and the word are kept. Any other reader acquiring counts
 * the read now and makes the sample record.
 */
static inline __attribute__((always_inline)) bool
stream_record(struct cistern *c, struct stream *st, struct cistern_sample *s, uint32_t idx,
	      uint64_t w, bool sole, bool confirm)
{
	if (sole || !confirm) {
		s->index_ = idx;
		s->pos_ = w; /* the whole word */
		return true;
	}
	/*
	 * Relaxed, as in cistern__rs_read_pinned(): an evictor reads seen only after it
	 * sees no pin, and our unpin, a seq_cst RMW that comes after this, is
	 * what lets it see none.
	 */
	uint32_t old = cistern__seen_add(c, idx);
	if (rs_over_cap(c, old)) {
		cistern__rs_refuse_pinned(c, idx); /* spent: not a member */
		return false;
	}
	if (old == 0) {
		cistern__rs_note_seen(c, idx);
		st->woke = true;
	}
	if (!c->gathering)
		__builtin_prefetch(cistern__payload(c, idx), 0, 3);
	rs_fill_sample(c, s, idx, w, RS_LIVE_PINNED);
	return true;
}

/*
 * The loop of cistern__rs_stream_pinned() for every case but the sole reader's
 * common one (stream_blocks()): any reader, repeats told by the pin bit or
 * the scratch set, a window of `win` candidates, each one taken out
 * replaced at once.
 */
static void stream_loop(struct cistern *c, struct stream *st, struct cistern_sample *out, size_t n,
			bool sole, bool by_pin, bool confirm)
{
	/* The sole reader's gather fetches payloads with the metadata (see cistern__rs_stream_pinned()). */
	bool payload = sole && !confirm;
	_Static_assert(CISTERN_SLOT_COUNT_MAX <= UINT32_MAX, "slot indices fit in 32 bits");
	/* The stops (batch full, too many misses in a row, too many repeats) tested where they change. */
	if (st->d > st->dmax || st->probes == 0)
		return;
	while (st->k < n) {
		uint32_t idx = st->q[st->qh], at = 0;
		uint32_t next = cistern__rng32_below(&st->rng, &st->pool, (uint32_t)st->nslots);
		st->q[st->qh] = next;
		stream_prefetch(st, next, payload);
		st->qh = st->qh + 1 == st->win ? 0 : st->qh + 1;
		struct cistern_slotmeta *m = cistern__slotmeta_in(st->meta0, st->mstride, idx);
		/* [rs-held] acquire: what the sole reader reads after confirming. */
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		if (sw_state(w) != RS_HELD) {
			if (++st->misses >= st->probes)
				break;
			continue;
		}
		if (by_pin ? !pin_new_member(&m->pins, st->bit, sole)
			   : cistern__scratch_find(&st->set, idx, &at)) {
			st->misses = 0;
			if (++st->d > st->dmax) /* this batch drew it already */
				break;
			continue;
		}
		if (sole) {
			/* Pinned for now; confirmed or undone after the loop. */
			if (!by_pin && cistern__pin_sole_store(c, idx) < 0) {
				if (++st->misses >= st->probes)
					break;
				continue;
			}
		} else {
			/*
			 * By pin: the second half of [pin-evict], the seq_cst
			 * look at the word after the pin's seq_cst RMW (pins.c).
			 */
			bool pinned = by_pin ? atomic_load_explicit(&m->word,
								    memory_order_seq_cst) == w
					     : cistern__pin(c, idx, RS_HELD, &w);
			if (!pinned) {
				if (by_pin)
					cistern__pin_undo(c, idx);
				/* left the held state since the look above */
				if (++st->misses >= st->probes)
					break;
				continue;
			}
		}
		if (!stream_record(c, st, &out[st->k], idx, w, sole, confirm)) {
			if (++st->misses >= st->probes)
				break;
			continue;
		}
		if (!by_pin)
			cistern__scratch_put(&st->set, at, idx);
		st->k++;
		st->misses = 0;
	}
}

/*
 * Candidates that stream_blocks() draws at a time: two windows. The longer
 * lead (a candidate is prefetched 32 to 63 draws before it is judged), with
 * only the candidates a batch can use prefetched, leaves each miss more time
 * to finish than blocks of RS_AHEAD would.
 */
#define RS_BLOCK (2 * RS_AHEAD)

/*
 * Draw the n candidates of a block into b, prefetching the first `pf` of
 * them (the ones the batch can still use, and the next read's first).
 */
static inline __attribute__((always_inline)) void stream_draw(struct stream *st, uint32_t *b,
							      unsigned n, unsigned pf, bool payload)
{
	for (unsigned i = 0; i < n; i++) {
		b[i] = cistern__rng32_below(&st->rng, &st->pool, (uint32_t)st->nslots);
		if (i < pf)
			stream_prefetch(st, b[i], payload);
	}
}

/*
 * How many of the next block's candidates to prefetch when `want` members
 * are still needed and `ahead` candidates are drawn before it: those the
 * batch would use if every candidate held a new member, and one more (the
 * next read's first). Near the end of a batch the rest would be lines
 * fetched for nothing.
 */
static inline unsigned stream_prefetch_count(size_t want, unsigned ahead)
{
	if (want < ahead)
		return 0;
	return want - ahead + 1 < RS_BLOCK ? (unsigned)(want - ahead + 1) : RS_BLOCK;
}

/*
 * The common loop (repeats told by the pin bit, a full window of RS_AHEAD
 * candidates), with the drawing split from the judging: a ring of two blocks
 * of RS_BLOCK candidates, one being judged while the other, drawn and
 * prefetched all at once before it, waits. Drawing inline, as stream_loop()
 * does, keeps the generator's state live beside everything the judging
 * needs, more values than the processor has registers, and the loop
 * spilled; split, each loop keeps its own in registers. The same stops and
 * the same use of the draws as stream_loop(): candidates drawn and not used
 * are dropped, which biases nothing.
 */
static inline __attribute__((always_inline)) void
stream_blocks(struct cistern *c, struct stream *st, struct cistern_sample *out, size_t n, bool sole,
	      bool confirm)
{
	/* The sole reader's gather fetches payloads with the metadata (see cistern__rs_stream_pinned()). */
	bool payload = sole && !confirm;
	uint32_t ring[2 * RS_BLOCK];
	char *meta0 = st->meta0;
	uint64_t mstride = st->mstride, bit = st->bit, probes = st->probes;
	uint64_t misses = st->misses;
	size_t k = st->k, d = st->d, dmax = st->dmax;
	unsigned cur = 0, at = 0;
	bool stop = st->d > st->dmax || probes == 0;
	/* The first block: the window the caller just drew (q[0] on), then draws of our own. */
	for (unsigned i = 0; i < RS_AHEAD; i++)
		ring[i] = st->q[i];
	stream_draw(st, ring + RS_AHEAD, RS_BLOCK - RS_AHEAD,
		    stream_prefetch_count(n - k, RS_AHEAD), payload);
	while (!stop && k < n) {
		/* Draw the other block while this one is judged. */
		stream_draw(st, ring + (cur ^ RS_BLOCK), RS_BLOCK,
			    stream_prefetch_count(n - k, RS_BLOCK), payload);
		for (at = 0; at < RS_BLOCK; at++) {
			uint32_t idx = ring[cur + at];
			struct cistern_slotmeta *m = cistern__slotmeta_in(meta0, mstride, idx);
			/* [rs-held] acquire: what the sole reader reads after confirming. */
			uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
			if (sw_state(w) != RS_HELD) {
				if (++misses >= probes) {
					stop = true;
					at++;
					break;
				}
				continue;
			}
			if (!pin_new_member(&m->pins, bit, sole)) {
				misses = 0;
				if (++d > dmax) { /* this batch drew it already */
					stop = true;
					at++;
					break;
				}
				continue;
			}
			/* [pin-evict] the second half of the handshake, as in stream_loop(). */
			if (!sole && atomic_load_explicit(&m->word, memory_order_seq_cst) != w) {
				cistern__pin_undo(c, idx);
				if (++misses >= probes) {
					stop = true;
					at++;
					break;
				}
				continue;
			}
			if (!stream_record(c, st, &out[k], idx, w, sole, confirm)) {
				if (++misses >= probes) {
					stop = true;
					at++;
					break;
				}
				continue;
			}
			misses = 0;
			if (++k == n) {
				at++;
				break;
			}
		}
		if (at == RS_BLOCK) {
			cur ^= RS_BLOCK;
			at = 0;
		}
	}
	/* The next candidate not judged, drawn (and prefetched): the caller keeps it for the next read. */
	st->q[0] = ring[cur + at];
	st->qh = 0;
	st->k = k;
	st->d = d;
	st->misses = misses;
}

/*
 * How many lines of each candidate's payload the sole reader's gather
 * prefetches: the first CISTERN_GATHER_LINES at most (the copies ask for
 * the rest). stream_prefetch() finds a payload just after its slot's
 * metadata line, where every policy but the FIFO keeps it
 * (cistern__compute_layout()); on any other layout, none.
 */
static unsigned rs_payload_lines(const struct cistern *c)
{
	if (c->arena != c->meta0 + sizeof(struct cistern_slotmeta) ||
	    c->slot_stride != c->meta_stride)
		return 0;
	return cistern__payload_lines(c->slot_size);
}

void cistern__rs_stream_pinned(struct cistern *c, struct cistern_sample *out, size_t n, size_t *got,
			       size_t *dups, uint64_t probes, bool gather)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	size_t start = *got;
	bool sole = cistern__reads_alone(c);
	bool by_pin = rs_pin_tells_repeats(c);
	/*
	 * Locals (st) for what the loop reads of the handle on every candidate,
	 * and the generator's state, written back at the end: the stores into
	 * out[] could alias the handle's fields as far as the compiler knows,
	 * which would reload them all each time round.
	 *
	 * A window of `win` drawn candidates, as many as the batch still needs
	 * up to RS_AHEAD, drawn and prefetched here; the loops draw more as
	 * they go, and up to 2 * RS_BLOCK draws at the end go unused (they are
	 * independent of the rest: dropping them biases nothing).
	 */
	struct stream st = {
		.meta0 = c->meta0,
		.mstride = c->meta_stride,
		.nslots = c->slot_count,
		.probes = probes,
		.bit = by_pin ? UINT64_C(1) << rs->pin_bit : 0,
		.k = start,
		.d = *dups,
		.dmax = n / 4 + 8,
		.win = n - start < RS_AHEAD ? (unsigned)(n - start) : RS_AHEAD,
		.rng = c->rng,
		.set = rs->scratch,
		.pf_lines = gather && sole ? rs_payload_lines(c) : 0,
	};
	for (unsigned i = 0; i < st.win; i++) {
		if (i == 0 && rs->pick_read.ahead) {
			/* Drawn and prefetched at the end of the last read (below). */
			st.q[0] = (uint32_t)(rs->pick_read.ahead - 1);
			continue;
		}
		st.q[i] = (uint32_t)cistern__rng_below(&st.rng, st.nslots);
		stream_prefetch(&st, st.q[i], gather && sole);
	}
	rs->pick_read.ahead = 0;
	/* The sole reader's common case, gathering or not, gets a loop of its own. */
	bool common = by_pin && st.win == RS_AHEAD;
	if (common && sole && gather)
		stream_blocks(c, &st, out, n, true, false);
	else if (common && sole)
		stream_blocks(c, &st, out, n, true, true);
	else if (common && gather)
		stream_blocks(c, &st, out, n, false, false);
	else if (common)
		stream_blocks(c, &st, out, n, false, true);
	else
		stream_loop(c, &st, out, n, sole, by_pin, !gather);
	/*
	 * The next candidate in the ring was drawn and prefetched but not
	 * looked at: the next read starts with it, its miss under way while
	 * the caller works on this one (an independent uniform draw, so using
	 * it later biases nothing, as dropping it would not).
	 */
	if (st.win)
		rs->pick_read.ahead = (uint64_t)st.q[st.qh] + 1;
	c->rng = st.rng;
	*dups = st.d;
	size_t k = st.k;
	bool woke = st.woke;
	if (gather) {
		*got = k;
		return;
	}
	if (sole)
		k = start + confirm_sole_pins(c, out + start, k - start, &woke);
	cistern__count(&c->me->ctr.gets, k - start);
	if (woke) {
		if (sole)
			cistern__fence_before_wake(); /* [wait-register]: plain seen counts */
		cistern__wake_producers(c);           /* some just became evictable */
	}
	*got = k;
}

int cistern__rs_open_read_ready(struct cistern *c, size_t n, uint64_t *taken)
{
	struct cistern_hdr *h = c->hdr;
	uint64_t need = c->fixed.watermark > n ? c->fixed.watermark : n;
	*taken = 0;
	/* Acquire, no edge: population is a relaxed hint; slot words are acquired. */
	if (atomic_load_explicit(&h->population, memory_order_acquire) < need) {
		/* Waits for a put, which the limiter must let through (rate_limit.c). */
		cistern__rs_rate_stuck(c, false);
		return -EAGAIN;
	}
	int b = cistern__pin_bit(c);
	if (b < 0)
		return b;
	/* Last: nothing after it can fail, so only a short draw gives budget back. */
	return cistern__rs_rate_take(c, n, taken) ? 0 : -EAGAIN;
}

int cistern__rs_try_acquire_n(struct cistern *c, struct cistern_sample *out, size_t n)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	bool closed = cistern__rs_closed(c);
	uint64_t taken = 0;
	int r;
	if (!closed && (r = cistern__rs_open_read_ready(c, n, &taken)) < 0)
		return r;
	r = cistern__scratch_reset(c, n);
	if (r < 0) {
		cistern__rs_rate_settle(c, taken, 0);
		return r;
	}
	size_t got = 0, dups = 0;
	if (!closed) {
		uint64_t probes = cistern__pick_probes(c, &rs->pick_read);
		if (probes)
			cistern__rs_stream_pinned(c, out, n, &got, &dups, probes, false);
		/* The steps below tell repeats by the scratch set: give it the stream's members. */
		if (got < n && rs_pin_tells_repeats(c))
			for (size_t i = 0; i < got; i++)
				cistern__scratch_add(&rs->scratch, out[i].index_);
	}
	while (got < n) {
		if (dups > n / 4 + 8) {
			r = finish_from_snapshot(c, out, got, n, closed);
			if (r >= 0)
				got = (size_t)r;
			break;
		}
		struct cistern_sample *s = &out[got];
		r = reservoir_take_one(c, s, closed);
		if (r < 0)
			break;
		if (!cistern__scratch_add(&rs->scratch, s->index_)) {
			/* Already in this batch: give this copy back. */
			cistern__rs_unacquire(c, s);
			dups++;
			continue;
		}
		got++;
	}
	if (got == n || (closed && got > 0)) {
		cistern__rs_rate_settle(c, taken, got);
		return (int)got;
	}
	for (size_t i = 0; i < got; i++)
		cistern__rs_unacquire(c, &out[i]);
	cistern__rs_rate_settle(c, taken, 0);
	/* Too few samples to draw (or drawn away by others): it waits for a put too. */
	if (!closed)
		cistern__rs_rate_stuck(c, false);
	return r < 0 && r != -EAGAIN ? r : -EAGAIN;
}

int cistern__rs_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	int r = cistern__rs_try_acquire_n(c, s, 1);
	return r < 0 ? r : 0;
}
