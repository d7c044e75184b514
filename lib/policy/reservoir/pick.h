/* SPDX-License-Identifier: MIT */
/*
 * pick.h - uniform random picks among slots, and the scratch set of one batch (pick.c) (internal).
 */
#ifndef CISTERN_PICK_H
#define CISTERN_PICK_H

#include "policy/reservoir/state.h"

/* pick.c: uniform picks among slots that satisfy `ok` */
typedef bool (*cistern_qualify_fn)(struct cistern *c, uint64_t index, void *arg);
int cistern__pick(struct cistern *c, struct cistern_picker *pk, cistern_qualify_fn ok, void *arg,
		  uint64_t *out);
void cistern__picker_free(struct cistern_picker *pk);
/*
 * How many random probes cistern__pick() makes before it turns to the
 * snapshot, or 0 when the snapshot says candidates are sparse and it goes
 * there at once. Callers that draw probes themselves (batched reads) use the
 * same rule, so their picks stay what cistern__pick() would make.
 */
uint64_t cistern__pick_probes(const struct cistern *c, const struct cistern_picker *pk);
/* Refresh the snapshot and return its members as a malloc'd array. */
int cistern__snapshot(struct cistern *c, struct cistern_picker *pk, cistern_qualify_fn ok,
		      void *arg, uint32_t **out, uint64_t *count);
/* scratch set: start a batch, then add() returns false for an index already in it */
int cistern__scratch_reset(struct cistern *c, size_t n);

/*
 * The helpers below take the set itself, not the handle: a loop that keeps a
 * copy of the set in a local sees no store through another pointer that
 * could change it (a store to a uint32_t of a sample could, to the compiler).
 */
/*
 * Spreads slot indices over the set's table (Knuth's multiplicative hash,
 * about 2^32 / golden ratio): odd, so indices that differ modulo the table's
 * size land on different entries, and neighbouring indices far apart.
 */
#define CISTERN__SCRATCH_SPREAD 2654435761u

/*
 * Whether index is in the batch's set; if not, *at is where put() would
 * add it: the first tombstone on its probe path, else the free entry that
 * ends the path. A batch that forgets many indices (draws whose pin
 * failed) can leave no free entry at all; the probe then stops after one
 * lap of the table instead of going round for ever, and adds at a
 * tombstone, which exists because the set holds fewer live indices than
 * it has entries (cistern__scratch_reset()). With neither, it answers
 * true, as for a repeat: the caller draws again.
 */
static inline bool cistern__scratch_find(const struct cistern_scratch *s, uint32_t index,
					 uint32_t *at)
{
	uint32_t mask = s->cap - 1, tomb = UINT32_MAX;
	uint32_t h = (index * CISTERN__SCRATCH_SPREAD) & mask;
	for (uint32_t k = 0; k < s->cap; k++, h = (h + 1) & mask) {
		if (s->e[h].stamp != s->now) {
			*at = tomb != UINT32_MAX ? tomb : h;
			return false;
		}
		if (s->e[h].key == index)
			return true;
		if (s->e[h].key == UINT32_MAX && tomb == UINT32_MAX)
			tomb = h;
	}
	*at = tomb;
	return tomb == UINT32_MAX;
}

/* Add index at the place find() gave, with no other put() in between. */
static inline void cistern__scratch_put(struct cistern_scratch *s, uint32_t at, uint32_t index)
{
	s->e[at] = (struct cistern_scratch_entry){s->now, index};
}

/*
 * Take index out of the batch's set. Its entry stays as a tombstone (a key
 * no slot has, slot indices being below CISTERN_SLOT_COUNT_MAX) so that
 * lookups still probe past it.
 */
static inline void cistern__scratch_forget(struct cistern_scratch *s, uint32_t index)
{
	uint32_t mask = s->cap - 1;
	uint32_t h = (index * CISTERN__SCRATCH_SPREAD) & mask;
	for (uint32_t k = 0; k < s->cap && s->e[h].stamp == s->now; k++, h = (h + 1) & mask) {
		if (s->e[h].key == index) {
			s->e[h].key = UINT32_MAX;
			return;
		}
	}
}

static inline bool cistern__scratch_add(struct cistern_scratch *s, uint32_t index)
{
	uint32_t at;
	if (cistern__scratch_find(s, index, &at))
		return false;
	cistern__scratch_put(s, at, index);
	return true;
}

#endif
