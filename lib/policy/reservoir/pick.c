/* SPDX-License-Identifier: MIT */
/*
 * pick.c - uniform random picks among the slots that qualify (held samples for
 * a reader, evictable samples for a producer, empty slots for a fill that
 * found none near its cursor: see reservoir.c).
 *
 * The slot state words in shared memory are the only truth. A Roaring bitmap
 * cannot be changed lock-free by several processes, so none is shared: each
 * handle keeps its own snapshot of the qualifying slots in a Roaring bitmap
 * and confirms every pick against the live word (the caller then claims it
 * with a CAS, which is the real decision).
 *
 * A pick first tries a few random probes of the whole slot array: when the
 * qualifying slots are dense (a full reservoir whose samples were seen), a
 * probe hits in a handful of loads and is exactly uniform. When they are
 * sparse (the snapshot holds under an eighth of the slots), probes would take
 * ~capacity/qualifying tries, each a cache miss, so the pick goes straight to
 * a uniform rank in the snapshot and takes roaring_bitmap_select() of it.
 * Picks that no longer qualify are removed from the snapshot; the snapshot is
 * rebuilt from the words when it is empty, when half of its recent picks
 * missed, or after it served as many picks as it has members (at least a
 * sixteenth of the slot count, so that rebuilding, which reads every word,
 * costs a small fraction of a pick), so new qualifying slots join it soon.
 * Each of the two ways is uniform over what it looks at, so their mixture is
 * uniform over the qualifying slots up to the snapshot's staleness.
 *
 * The first probe of a pick is drawn at the end of the one before (draw_ahead()),
 * and its slot prefetched, so that a handle that picks one sample at a time
 * (a reader, an evicting producer) finds it in the cache.
 */
#include <errno.h>
#include <stdlib.h>

#include "policy/reservoir/pick.h"

#define PROBES 12
#define SCAN_CHUNK 1024

static int refresh(struct cistern *c, struct cistern_picker *pk, cistern_qualify_fn ok, void *arg)
{
	if (!pk->set) {
		pk->set = roaring_bitmap_create();
		if (!pk->set)
			return -ENOMEM;
	} else {
		roaring_bitmap_clear(pk->set);
	}
	/*
	 * Before the scan: entries from here on are merged later (each one
	 * checked and acquired then), and the samples logged before are in the
	 * words the scan reads. Acquire, no edge (the position moves relaxed):
	 * it only keeps the scan's loads after this one.
	 */
	if (pk->log_next)
		pk->log_pos = atomic_load_explicit(pk->log_next, memory_order_acquire);
	pk->stale = false;
	uint32_t buf[SCAN_CHUNK];
	size_t k = 0;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		if (!ok(c, i, arg))
			continue;
		buf[k++] = (uint32_t)i;
		if (k == SCAN_CHUNK) {
			roaring_bitmap_add_many(pk->set, k, buf);
			k = 0;
		}
	}
	if (k)
		roaring_bitmap_add_many(pk->set, k, buf);
	pk->misses = 0;
	pk->uses = 0;
	pk->refreshes++;
	return 0;
}

uint64_t cistern__pick_probes(const struct cistern *c, const struct cistern_picker *pk)
{
	uint64_t card = pk->set ? roaring_bitmap_get_cardinality(pk->set) : 0;
	/*
	 * Probe unless the snapshot says candidates are sparse (under 1/16 of
	 * the slots): then probes would mostly miss, each a cache miss, while
	 * the bitmap's containers are sorted arrays whose select is one lookup.
	 * Denser, the containers are bitsets whose select walks up to 8 KiB,
	 * and a few probes (three times the expected number) are cheaper.
	 */
	if (card != 0 && card * 16 < c->slot_count)
		return 0;
	uint64_t probes = card ? 3 * c->slot_count / card : PROBES;
	return probes < PROBES ? PROBES : probes;
}

/*
 * After a pick that probed: draw the next pick's first probe now and start
 * fetching its slot (metadata, and the payload's first line beside it), so
 * that the cache miss a probe costs runs while the caller works on this
 * pick. The probe is a uniform draw, independent of the slots' states, used
 * as it would have been if drawn later, so the picks stay uniform.
 * Write intent: the claim or pin that follows a hit writes the word.
 */
static void draw_ahead(struct cistern *c, struct cistern_picker *pk)
{
	uint64_t idx = cistern__rng_below(&c->rng, c->slot_count);
	pk->ahead = idx + 1;
	__builtin_prefetch(cistern__slotmeta(c, idx), 1, 3);
	__builtin_prefetch(cistern__payload(c, idx), 0, 3);
}

int cistern__pick(struct cistern *c, struct cistern_picker *pk, cistern_qualify_fn ok, void *arg,
		  uint64_t *out)
{
	uint64_t probes = cistern__pick_probes(c, pk);
	if (probes) {
		for (uint64_t i = 0; i < probes; i++) {
			uint64_t idx = pk->ahead ? pk->ahead - 1
						 : cistern__rng_below(&c->rng, c->slot_count);
			pk->ahead = 0;
			if (ok(c, idx, arg)) {
				draw_ahead(c, pk);
				*out = idx;
				return 0;
			}
		}
	}
	pk->ahead = 0;
	/* A refresh reads every slot word: space them out by a fraction of that cost. */
	uint64_t card = pk->set ? roaring_bitmap_get_cardinality(pk->set) : 0;
	uint64_t max_uses = card > c->slot_count / 16 ? card : c->slot_count / 16;
	bool refreshed = false;
	for (;;) {
		card = pk->set ? roaring_bitmap_get_cardinality(pk->set) : 0;
		if (card == 0 || pk->misses * 2 > card + 8 || pk->uses > max_uses || pk->stale) {
			if (refreshed && card == 0)
				return -EAGAIN;
			int r = refresh(c, pk, ok, arg);
			if (r < 0)
				return r;
			refreshed = true;
			card = roaring_bitmap_get_cardinality(pk->set);
			if (card == 0)
				return -EAGAIN;
			max_uses = card > c->slot_count / 16 ? card : c->slot_count / 16;
		}
		uint32_t idx;
		if (!roaring_bitmap_select(pk->set, (uint32_t)cistern__rng_below(&c->rng, card),
					   &idx))
			return -EAGAIN; /* cannot happen: rank < cardinality */
		pk->uses++;
		if (ok(c, idx, arg)) {
			*out = idx;
			return 0;
		}
		roaring_bitmap_remove(pk->set, idx);
		pk->misses++;
	}
}

int cistern__snapshot(struct cistern *c, struct cistern_picker *pk, cistern_qualify_fn ok,
		      void *arg, uint32_t **out, uint64_t *count)
{
	int r = refresh(c, pk, ok, arg);
	if (r < 0)
		return r;
	uint64_t n = roaring_bitmap_get_cardinality(pk->set);
	uint32_t *a = malloc((n ? n : 1) * sizeof(*a));
	if (!a)
		return -ENOMEM;
	roaring_bitmap_to_uint32_array(pk->set, a);
	*out = a;
	*count = n;
	return 0;
}

void cistern__picker_free(struct cistern_picker *pk)
{
	if (pk->set)
		roaring_bitmap_free(pk->set);
	pk->set = NULL;
}

/* A generation-stamped open-addressing set: reset is O(1) between batches. */
int cistern__scratch_reset(struct cistern *c, size_t n)
{
	struct cistern_scratch *s = &cistern__rs(c)->scratch;
	uint32_t want = 16;
	while (want < 2 * n)
		want *= 2;
	if (want > s->cap) {
		struct cistern_scratch_entry *e = realloc(s->e, want * sizeof(*e));
		if (!e)
			return -ENOMEM;
		s->e = e;
		for (uint32_t i = 0; i < want; i++)
			s->e[i].stamp = 0;
		s->cap = want;
		s->now = 0;
	}
	if (++s->now == 0) {
		for (uint32_t i = 0; i < s->cap; i++)
			s->e[i].stamp = 0;
		s->now = 1;
	}
	return 0;
}
