/* SPDX-License-Identifier: MIT */
/*
 * gather.c - cistern_get_batch() in one pass, for a reader of an open
 * reservoir that holds nothing.
 *
 * The general path acquires the batch (a pin, a seen count and a sample
 * record for each member), copies it out, then releases it: three passes over
 * the members and their slot metadata. Here the members are drawn and pinned
 * as for an acquire, but neither counted nor recorded (cistern__rs_stream_pinned()
 * with the gather's array). The sole reader (CISTERN_SINGLE_READER) stores
 * its pins plainly, prefetching each member's payload with its metadata
 * when it draws it, so that the copies below find it in cache (one pass
 * over memory), and checks every pin after one seq_cst fence (the
 * handshake in pins.c); any other reader's pins were checked one by one as
 * they were set. Only when every pin holds is each member copied out,
 * counted as seen and unpinned, one after the other. Nothing is held when
 * it returns, so no sample record is filled and no release is owed. On an
 * error nothing has been copied.
 *
 * It answers -EAGAIN whenever the general path should do the work instead:
 * a handle that is not a reader yet (the general path makes it one, and takes
 * the sole reader's role where the segment has one), samples already held by
 * the handle (acquired and not yet released), reception closed (reads then
 * take samples rather than pin them), held samples sparse, a batch the
 * stream could not fill, or a producer that took a member before the sole
 * reader's fence (rare; the pins are undone and the general path draws
 * again). -EMSGSIZE and -EPROTO are answered here, with nothing read, as the
 * general path would.
 */
#include <errno.h>
#include <string.h>

#include "policy/reservoir/reservoir.h"
#include "core/prefetch.h"
#include "policy/reservoir/pins.h"

/* Give back the n pins of tmp[] (none counted as a read) and let producers know. */
static void undo_pins(struct cistern *c, const struct cistern_sample *tmp, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cistern__unpin_quiet(c, tmp[i].index_);
	/* A producer may have backed off from one of them. */
	if (cistern__reads_alone(c))
		cistern__fence_before_wake(); /* [wait-register]: plain unpins */
	cistern__wake_producers(c);
}

/*
 * After the fence: 0 if every member's word is the one seen held before it
 * was pinned and its length fits; else what to answer.
 */
static int check_members(struct cistern *c, struct cistern_sample *tmp, size_t n, size_t stride)
{
	int r = 0;
	/* Locals: the stores into tmp[] could alias the handle's fields (see cistern__rs_gather_now()). */
	char *meta0 = c->meta0, *arena = c->arena;
	uint64_t mstride = c->meta_stride, pstride = c->slot_stride, slot_size = c->slot_size;
	for (size_t i = 0; i < n; i++) {
		uint32_t idx = tmp[i].index_;
		const struct cistern_slotmeta *m = cistern__slotmeta_in(meta0, mstride, idx);
		uint64_t len = m->len;
		tmp[i].data = arena + idx * pstride;
		tmp[i].len = (size_t)len;
		/* Relaxed, after the fence: sees any producer's claim from before it. */
		if (atomic_load_explicit(&m->word, memory_order_relaxed) != tmp[i].pos_)
			return -EAGAIN; /* a lost race; lengths of lost members mean nothing */
		if (len > slot_size)
			r = -EPROTO; /* only a damaged segment says this */
		else if (len > stride && r == 0)
			r = -EMSGSIZE;
	}
	return r;
}

int cistern__rs_gather_now(struct cistern *c, struct cistern_sample *tmp, size_t n,
			   const struct cistern_gather *g)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	const struct cistern_fixed *f = &c->fixed;
	bool sole = cistern__reads_alone(c);
	/*
	 * Only while the handle holds nothing: then no pin of ours is on any
	 * slot, so the stream tells repeats by our pin bit, and each member
	 * is unpinned below by clearing the bit (no repeated pins to keep).
	 * A handle of a segment with a sole reader reads here only once it
	 * holds that role: the role's plain stores to the pins words need
	 * every reader to be the role's holder.
	 */
	if (!(c->role & CISTERN_ROLE_READER) || c->readonly || !c->owner)
		return -EAGAIN;
	if (!sole && (f->flags & CISTERN_SINGLE_READER))
		return -EAGAIN;
	if (c->holding != 0 || rs->dups.used != 0 || cistern__rs_closed(c))
		return -EAGAIN;
	/* Reads that may be refused at the cap (max_times_sampled) go the general way. */
	if (f->max_times_sampled)
		return -EAGAIN;
	if (c->policy->reads_whole_batches && n != f->batch_size)
		return -EAGAIN; /* the general path says -EINVAL */
	uint64_t taken;
	if (cistern__rs_open_read_ready(c, n, &taken) < 0)
		return -EAGAIN;
	uint64_t probes = cistern__pick_probes(c, &rs->pick_read);
	if (!probes || cistern__scratch_reset(c, n) < 0) {
		cistern__rs_rate_settle(c, taken, 0);
		return -EAGAIN;
	}
	size_t got = 0, dups = 0;
	cistern__rs_stream_pinned(c, tmp, n, &got, &dups, probes, true);
	if (got < n) {
		undo_pins(c, tmp, got);
		cistern__rs_rate_settle(c, taken, 0);
		return -EAGAIN;
	}
	/* [pin-evict] seq_cst: every pin the sole reader stored above is before the checks. */
	if (sole)
		cistern__full_fence();
	int r = check_members(c, tmp, n, g->stride);
	if (r < 0) {
		undo_pins(c, tmp, n);
		cistern__rs_rate_settle(c, taken, 0);
		return r;
	}
	/*
	 * Locals: the stores into g's arrays could alias the handle's fields
	 * as far as the compiler knows, which would reload them for every
	 * member.
	 */
	char *meta0 = c->meta0;
	uint64_t mstride = c->meta_stride;
	uint64_t bit = UINT64_C(1) << rs->pin_bit;
	char *dst = g->dst;
	size_t stride = g->stride;
	size_t *lens = g->len;
	struct cistern_meta *metas = g->meta;
	/*
	 * Ahead of each copy. The sole reader's stream prefetched every
	 * payload already, but only its first CISTERN_GATHER_LINES lines, and
	 * a large batch may have pushed the first members out of the cache
	 * since: asking again costs little.
	 */
	for (size_t i = 0; i < CISTERN_GATHER_AHEAD && i < n; i++)
		cistern__prefetch_payload(&tmp[i]);
	for (size_t i = 0; i < n; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta_in(meta0, mstride, tmp[i].index_);
		if (i + CISTERN_GATHER_AHEAD < n)
			cistern__prefetch_payload(&tmp[i + CISTERN_GATHER_AHEAD]);
		memcpy(dst + i * stride, tmp[i].data, tmp[i].len);
		if (lens)
			lens[i] = tmp[i].len;
		if (metas)
			metas[i] = (struct cistern_meta){
				.sample_id = m->sample_id,
				.sim_id = __atomic_load_n(&m->sim_id, __ATOMIC_RELAXED),
				.time_step = __atomic_load_n(&m->time_step, __ATOMIC_RELAXED),
				.flags = __atomic_load_n(&m->flags, __ATOMIC_RELAXED),
			};
		/*
		 * Seen += 1, then the unpin (the pin is ours and confirmed). The
		 * sole reader does both with plain stores, as
		 * cistern__seen_add() and cistern__unpin_sole_store() do: the
		 * unpin's release store publishes both the count and the end of
		 * our reads to the producer that next finds the slot unpinned
		 * (a seq_cst load, acquiring). Any other reader shares the
		 * words: a relaxed RMW for the count (as cistern__rs_read_pinned()), and
		 * a seq_cst RMW for the unpin, ordered after it and after our
		 * reads, as every unpin is ([unpin]; the sole reader's is a release store).
		 */
		uint32_t seen;
		if (sole) {
			seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
			atomic_store_explicit(&m->seen, seen + 1, memory_order_relaxed);
		} else {
			seen = atomic_fetch_add_explicit(&m->seen, 1, memory_order_relaxed);
		}
		if (seen == 0)
			cistern__rs_note_seen(c, tmp[i].index_);
		/* [unpin]: a release store for the sole reader, else a seq_cst RMW. */
		if (sole) {
			uint64_t pins = atomic_load_explicit(&m->pins, memory_order_relaxed);
			atomic_store_explicit(&m->pins, pins & ~bit, memory_order_release);
		} else {
			atomic_fetch_and_explicit(&m->pins, ~bit, memory_order_seq_cst);
		}
	}
	cistern__count(&c->me->ctr.gets, n);
	cistern__rs_rate_settle(c, taken, n);
	/* Samples just unpinned (and some just seen) may be what a producer waits for. */
	if (sole)
		cistern__fence_before_wake(); /* [wait-register]: plain unpins */
	cistern__wake_producers(c);
	return (int)n;
}
