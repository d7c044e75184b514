/* SPDX-License-Identifier: MIT */
/*
 * reservoir.h - what FIRO and the four reservoir policies share (internal).
 *
 * Slot states (encoded with slotword.h; owner = attachment index + 1):
 *
 *   EMPTY(p)  ---fill: producer CAS--->  RESERVED(p', me)  ---commit--->  HELD(p')
 *      ^                                   |       ^                      |  |  ^
 *      |        abort, or owner died       |       |  evict: producer CAS |  |  |
 *      +------------- (reclaim) -----------+       +----------------------+  |  |
 *      |                                                 (pins == 0 after)   |  |
 *      |                     exclusive read: reader CAS                      |  |
 *      +--- remove <--- ACQUIRED(p', me) <-----------------------------------+  |
 *                              |        back to HELD: FIRO read with epochs     |
 *                              +--------- left, or owner died (reclaim) --------+
 *
 * An eviction passes through EVICTING(p, me) between HELD and RESERVED: the
 * producer has stopped new pins and checks that no reader pinned the sample;
 * if one did, the slot goes back to HELD(p) (see cistern__rs_evict_claim in reservoir.c).
 * HELD samples are also read shared, by pinning (pins.c): a pinned sample
 * stays HELD and no producer may evict it. `pos` is the ring position for
 * FIFOEvictReservoir (the oldest sample is the one at tail - capacity) and the
 * sample id for the others; EMPTY(p) after a removal carries p + capacity.
 *
 * Counters in the header: `filled` counts slots not EMPTY (fills and removals
 * move it), `population` counts HELD and ACQUIRED samples (commits raise it,
 * evictions and removals lower it).
 *
 * A counter and the slot word it follows change in two steps, and a process
 * may die between them. The steps are ordered so that a death leaves a
 * counter high, never low: a fill counts the slot before it claims it, a
 * removal empties the slot before it uncounts it, a commit counts the sample
 * before it publishes it. A `filled` too low would let readers declare end of
 * data over a sample still there (lost); too high, it would keep them waiting
 * for one that is gone (wedged), so after a dead attachment was reclaimed
 * (hdr->counts_unsure) cistern__rs_drained() also believes a look at every slot, and
 * so does a put that finds `filled` full, before it evicts or waits
 * (cistern__rs_fill_past_count), so that a high count neither stops a put while
 * reception is open nor leaves a slot empty for good under puts that evict.
 * A `population` too high only lets a read start a
 * sample early at the watermark, which several readers racing past it do
 * anyway.
 */
#ifndef CISTERN_RESERVOIR_H
#define CISTERN_RESERVOIR_H

#include "policy/reservoir/pick.h"
#include "policy/reservoir/rate_limit.h"
#include "policy/reservoir/reservoir_read.h"
#include "policy/reservoir/gather.h"
#include "policy/reservoir/pairs.h"
#include "policy/reservoir/reservoir_snap.h"
#include "core/policy.h"
#include "core/slotword.h"

enum { RS_EMPTY = 0, RS_RESERVED = 1, RS_HELD = 2, RS_ACQUIRED = 3, RS_EVICTING = 4 };

/* cistern_sample.live_ values */
enum { RS_LIVE_PINNED = 1, RS_LIVE_EXCLUSIVE = 2 };

/*
 * Random picks one try makes before it gives up with -EAGAIN (a blocking
 * call then waits and tries again): a failed pick has mostly lost its slot
 * to another handle, so this many failures in a row mean contention that a
 * wait serves better, and the bound keeps a try short.
 */
#define RS_PICK_TRIES 64

void cistern__rs_init(struct cistern *c);
bool cistern__rs_is_held(struct cistern *c, uint64_t i, void *arg);
int cistern__rs_fill_reserve(struct cistern *c, struct cistern_slot *slot);
/* For a put about to wait on a full buffer: fill a slot `filled` may count wrongly. */
int cistern__rs_fill_past_count(struct cistern *c, struct cistern_slot *slot);
/* Evict a sample for which ok() holds (NULL: held, seen, unpinned) and reserve its slot. */
int cistern__rs_evict_reserve(struct cistern *c, struct cistern_slot *slot, cistern_qualify_fn ok);
/*
 * Take held slot idx (word w) for overwriting, through EVICTING; false if
 * its word is no longer w, a reader pinned it, or, with need_seen, nobody
 * has read it yet.
 */
bool cistern__rs_evict_claim(struct cistern *c, uint64_t idx, uint64_t w, uint64_t newpos,
			     bool need_seen);
/* Reservoir puts: fill an empty slot, else evict a random seen, unpinned sample. */
int cistern__rs_reservoir_try_reserve(struct cistern *c, struct cistern_slot *slot);
int cistern__rs_commit(struct cistern *c, struct cistern_slot *slot, size_t len,
		       struct cistern_meta *meta);
int cistern__rs_abort(struct cistern *c, struct cistern_slot *slot);
/* 0, or -EAGAIN (pin given back) if the read is over max_times_sampled. */
int cistern__rs_read_pinned(struct cistern *c, struct cistern_sample *s, uint64_t index,
			    uint64_t word);
int cistern__rs_read_exclusive(struct cistern *c, struct cistern_sample *s, uint64_t index);
/* Remove an exclusively held sample from the buffer. */
void cistern__rs_remove(struct cistern *c, uint64_t index, uint64_t word);
/*
 * Empty slot index, which this handle holds EVICTING (word: its HELD word),
 * for the next fills: its sample lives on elsewhere (a spill to the cold
 * tier), so no sample is counted as leaving. The caller lowers population.
 */
void cistern__rs_vacate(struct cistern *c, uint64_t index, uint64_t word);
bool cistern__rs_exclusive_is_mine(struct cistern *c, const struct cistern_sample *s,
				   uint64_t *word);
int cistern__rs_release_generic(struct cistern *c, struct cistern_sample *s);
int cistern__rs_unacquire(struct cistern *c, struct cistern_sample *s);
/* cistern_unacquire() on the rate-limited reservoirs: the read goes back to the limiter too. */
int cistern__rs_hand_back(struct cistern *c, struct cistern_sample *s);
bool cistern__rs_closed(struct cistern *c);
bool cistern__rs_drained(struct cistern *c);
void cistern__rs_reclaim(struct cistern *c, uint32_t owner);
uint64_t cistern__rs_population(const struct cistern *c, const struct cistern_stats *st);
/*
 * max_times_sampled (reservoir.c): a sample whose seen count reached the cap
 * is spent. A read that would count past the cap is refused; the sample
 * leaves once it is spent and no reader holds it.
 *
 * Is a read whose seen count was `old` before it over the cap? One compare:
 * with the cap 0 (off), cap - 1 wraps to the largest count.
 */
static inline bool rs_over_cap(const struct cistern *c, uint32_t old)
{
	return __builtin_expect(old > c->fixed.max_times_sampled - 1u, 0);
}
/*
 * Remove slot index's sample if it is held, spent and pinned by nobody.
 * Whoever lets go of a spent sample calls it after letting go (rs_let_go()).
 */
void cistern__rs_retire_if_spent(struct cistern *c, uint64_t index);
/*
 * The same, done in the name of attachment `owner` (its EVICTING, its
 * counters): a reclaim acts for the dead entry it reclaims, whose handle
 * may have no entry of its own yet, and whose own death leaves the
 * EVICTING to the next reclaim of that entry.
 */
void cistern__rs_retire_as(struct cistern *c, uint64_t index, uint32_t owner);
/* After a pin dropped, a take given back or an eviction backed off: retire the sample if spent. */
static inline void rs_let_go(struct cistern *c, uint64_t index)
{
	if (__builtin_expect(c->fixed.max_times_sampled != 0, 0))
		cistern__rs_retire_if_spent(c, index);
}
static inline void rs_let_go_as(struct cistern *c, uint64_t index, uint32_t owner)
{
	if (__builtin_expect(c->fixed.max_times_sampled != 0, 0))
		cistern__rs_retire_as(c, index, owner);
}
/* A pinned read over the cap: take its count and its pin back, and retire the sample. */
void cistern__rs_refuse_pinned(struct cistern *c, uint64_t index);
/* A sample's seen count went from 0 to 1: log it for producers (reservoir.c). */
void cistern__rs_note_seen(struct cistern *c, uint64_t index);
/*
 * True while the handle holds nothing (no acquired sample, no repeated pin):
 * then its pin bit is on no slot but those the batch being drawn has pinned
 * (no other handle sets or clears it; a dead holder's bit is cleared from
 * every slot before it is handed out again), and cistern__rs_stream_pinned() tells
 * repeats by it.
 */
static inline bool rs_pin_tells_repeats(const struct cistern *c)
{
	return c->holding == 0 && cistern__rs(c)->dups.used == 0;
}

/* Make s the sample in slot index (metadata m, payload at data). */
static inline void rs_fill_sample_at(struct cistern_sample *s, const struct cistern_slotmeta *m,
				     const void *data, uint64_t index, uint64_t word, uint32_t live)
{
	s->data = data;
	s->len = (size_t)m->len;
	s->meta.sample_id = m->sample_id;
	s->meta.sim_id = __atomic_load_n(&m->sim_id, __ATOMIC_RELAXED);
	s->meta.time_step = __atomic_load_n(&m->time_step, __ATOMIC_RELAXED);
	s->meta.flags = __atomic_load_n(&m->flags, __ATOMIC_RELAXED);
	s->pos_ = sw_pos(word);
	s->index_ = (uint32_t)index;
	s->live_ = live;
}

static inline void rs_fill_sample(struct cistern *c, struct cistern_sample *s, uint64_t index,
				  uint64_t word, uint32_t live)
{
	rs_fill_sample_at(s, cistern__slotmeta(c, index), cistern__payload(c, index), index, word,
			  live);
}

/*
 * reservoir.c: the new_state and free_state of FIRO and the reservoirs: the
 * handle's struct cistern__rs_state (state.h), with its pickers, pin tables
 * and scratch set.
 */
int cistern__rs_new_state(struct cistern *c);
void cistern__rs_free_state(struct cistern *c);
/*
 * reservoir.c: what the reservoir policies ask of every config (a
 * watermark), and that with what a rate limiter set by hand asks of a read
 * of one sample (the config_problem of the policies that read one at a time).
 */
const char *cistern__rs_config_problem(const struct cistern_config *cfg);
const char *cistern__rs_limited_config_problem(const struct cistern_config *cfg);

#endif
