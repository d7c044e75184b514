/* SPDX-License-Identifier: MIT */
/*
 * peek.h - what tests read straight from a segment's slot metadata, past the
 * public API, to check what the library left there.
 */
#ifndef CISTERN_TEST_PEEK_H
#define CISTERN_TEST_PEEK_H

#include <stdbool.h>
#include <string.h>

#include "core/handle.h"
#include "core/policy.h"

/* The sum of the slots' seen counts, and whether any pin bit is left. */
static inline uint64_t seen_sum(struct cistern *c, bool *pinned)
{
	uint64_t sum = 0;
	*pinned = false;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		sum += atomic_load(&cistern__slotmeta(c, i)->seen);
		*pinned |= atomic_load(&cistern__slotmeta(c, i)->pins) != 0;
	}
	return sum;
}

/* A committed sample as its slot holds it (payloads past 256 bytes are cut). */
struct held_sample {
	uint64_t id;
	uint32_t sim, step, seen;
	uint64_t len;
	uint8_t payload[256];
};

/*
 * Every committed slot of a segment whose policy the tools can read (its
 * descriptor has snapshot ops), up to cap, sorted by id: how many.
 */
static inline size_t held_samples(struct cistern *c, struct held_sample *out, size_t cap)
{
	const struct cistern_snap_ops *so = cistern__policy_of(c->hdr->policy)->snap;
	size_t n = 0;
	for (uint64_t i = 0; i < c->slot_count && n < cap; i++) {
		const struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		if (so->classify(m->word).cls != CISTERN_SLOT_COMMITTED)
			continue;
		struct held_sample *h = &out[n++];
		h->id = m->sample_id;
		h->sim = m->sim_id;
		h->step = m->time_step;
		h->seen = m->seen;
		h->len = m->len;
		memcpy(h->payload, cistern__payload(c, i),
		       h->len < sizeof(h->payload) ? (size_t)h->len : sizeof(h->payload));
	}
	for (size_t a = 1; a < n; a++)
		for (size_t b = a; b > 0 && out[b - 1].id > out[b].id; b--) {
			struct held_sample t = out[b];
			out[b] = out[b - 1];
			out[b - 1] = t;
		}
	return n;
}

#endif
