/* SPDX-License-Identifier: MIT */
/*
 * state.h - what one handle keeps for FIRO and the reservoir policies: its
 * pickers, its pin bit and repeated pins, its scratch set, its fill cursor
 * and the limiter's mark (internal).
 *
 * The handle holds it behind c->pstate (core/handle.h): the descriptor's
 * new_state hook allocates it as the handle is set up, and free_state frees
 * it (reservoir.c). A call loads c->pstate once (cistern__rs()) and works
 * through the local copy.
 */
#ifndef CISTERN_RS_STATE_H
#define CISTERN_RS_STATE_H

#include <roaring/roaring.h>

#include "core/handle.h"

/*
 * A process-local set of candidate slots for uniform random picks (pick.c).
 * The shared slot words are the truth; this is a snapshot of them in a Roaring
 * bitmap, refreshed from the words when it runs dry or goes stale.
 */
struct cistern_picker {
	roaring_bitmap_t *set;
	uint64_t misses;    /* picks from the set that no longer qualified */
	uint64_t uses;      /* picks served since the last refresh */
	uint64_t refreshes; /* full scans done (statistics, tests) */
	/*
	 * A log that the owner merges into the set between refreshes (the
	 * reservoirs' evictable picker: reservoir.c), or NULL. A refresh
	 * notes how far the log went before it scanned: log_pos.
	 */
	const _Atomic uint64_t *log_next;
	uint64_t log_pos;
	bool stale;     /* the owner lost track of the log: refresh next time */
	uint64_t ahead; /* pick.c: the next probe, drawn and prefetched early, + 1; 0: none */
};

/* This handle's extra pins on slots it already pins (pins.c). */
struct cistern_pindups {
	uint32_t *slot;
	uint32_t *count;
	size_t cap;
	size_t used;
};

/*
 * A scratch set of slot indices for one batch (distinct members): open
 * addressing over entries stamped with the batch they belong to, so that a
 * reset is O(1) and a lookup touches one cache line.
 */
struct cistern_scratch_entry {
	uint32_t stamp;
	uint32_t key;
};
struct cistern_scratch {
	struct cistern_scratch_entry *e;
	uint32_t cap;
	uint32_t now;
};

struct cistern__rs_state {
	int pin_bit; /* pins.c: the reader's pin bit, -1 until first needed */
	struct cistern_pindups dups;
	struct cistern_picker pick_read;   /* samples a reader may take */
	struct cistern_picker pick_evict;  /* samples a producer may evict */
	struct cistern_picker pick_empty;  /* empty slots */
	struct cistern_picker pick_window; /* windows.c: heads of complete windows */
	uint64_t window_shape;             /* windows.c: the shape pick_window was built for */
	uint64_t fill_next; /* reservoir.c: next slot a fill looks at, + 1; 0: unset */
	int64_t next_drain_look_ns; /* reservoir.c: earliest next look at every slot in cistern__rs_drained() */
	int64_t next_fill_look_ns; /* reservoir.c: earliest next look for an empty slot past `filled` */
	struct cistern_scratch scratch;
	bool rl_marked; /* rate_limit.c: we set our bit in hdr->rl_stuck (a read may clear it) */
};

/* The handle's reservoir state: set up with the handle, never NULL on a handle of these policies. */
static inline struct cistern__rs_state *cistern__rs(const struct cistern *c)
{
	return (struct cistern__rs_state *)c->pstate;
}

#endif
