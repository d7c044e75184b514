/* SPDX-License-Identifier: MIT */
/*
 * tiered.c - the cold tier wired into the reservoirs (Reservoir,
 * BatchReservoir, FIRO and FIFOEvictReservoir, each with its own rules in
 * its descriptor's tier_rules, tiered.h): a put that finds the hot arena
 * full spills hot samples to the cold file (a batch of them to one run of
 * slots, or one at a time where the policy picks them), takes the first
 * one's slot and leaves the others empty for the next puts; reads draw
 * uniformly over hot and cold samples and read the cold ones of a batch in
 * one io_uring submission; reclaim repairs what a dead spiller or reader
 * left in the cold index (docs/protocol/tiers.md).
 *
 * Everything hot goes through the reservoir's own functions; this file adds
 * the cold half and the one move between the two (the spill). A cold
 * sample handed to a reader has index_ = slot_count + its cold slot and
 * data in a buffer of the reader's own, freed at release.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "policy/reservoir/tiered.h"
#include "core/open.h"
#include "core/ring.h"
#include "sys/fence.h"
#include "core/wait.h"
#include "policy/reservoir/pins.h"
#include "policy/reservoir/reservoir.h"
#include "sys/crc32c.h"
#include "tier/tier.h"

/* ---- the tier's area in the segment ---------------------------------- */

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static uint64_t notes_bytes(uint64_t procs)
{
	return align_up(procs * sizeof(struct cistern__spill_note), CISTERN_CACHELINE);
}

static uint64_t tier_bytes(uint64_t cold_slots, uint64_t procs)
{
	if (cold_slots == 0)
		return 0;
	return align_up(sizeof(struct cistern__tier_shm) + notes_bytes(procs) +
				cold_slots * sizeof(struct cistern__cold_ent),
			4096);
}

static struct cistern__tier_shm *T(const struct cistern *c)
{
	return (struct cistern__tier_shm *)((char *)c->hdr + c->fixed.cold_off);
}

static struct cistern__spill_note *note_of(const struct cistern *c, uint32_t owner)
{
	char *p = (char *)T(c) + sizeof(struct cistern__tier_shm);
	return (struct cistern__spill_note *)p + (owner - 1);
}

static struct cistern__cold_ent *ents(const struct cistern *c)
{
	return (struct cistern__cold_ent *)((char *)T(c) + sizeof(struct cistern__tier_shm) +
					    notes_bytes(c->fixed.procs_count));
}

/* The rules of c's policy's tier (tiered.h); none: every hook is Reservoir's. */
static const struct cistern__tier_rules no_rules;
static const struct cistern__tier_rules *R(const struct cistern *c)
{
	return c->policy->tier_rules ? c->policy->tier_rules : &no_rules;
}

/* ---- create, open, remove --------------------------------------------- */

static int tier_create(struct cistern *c)
{
	const struct cistern_fixed *f = &c->fixed;
	struct cistern__tier *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	int r = cistern__tier_file_create(&t->cold, &t->open, f);
	if (r < 0) {
		free(t);
		return r;
	}
	c->tier = t;
	return 0;
}

/* The handle's cold file, opened on first use. */
static int tier_get(struct cistern *c, struct cistern__tier **out)
{
	const struct cistern_fixed *f = &c->fixed;
	struct cistern__tier *t = c->tier;
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return -ENOMEM;
		c->tier = t;
	}
	int r = cistern__tier_file_open(&t->cold, &t->open, f);
	if (r < 0)
		return r;
	*out = t;
	return 0;
}

static void ahead_drop(struct cistern *c);
static void ahead_free(struct cistern__ahead *a);
static void bufs_free(struct cistern__tier *t);

static void tier_release(struct cistern *c)
{
	struct cistern__tier *t = c->tier;
	if (!t)
		return;
	/* Before the file closes: reads in flight finish into their buffers first. */
	ahead_drop(c);
	cistern__tier_file_close(&t->cold, &t->open);
	ahead_free(&t->ahead[0]);
	ahead_free(&t->ahead[1]);
	bufs_free(t);
	free(t->stage);
	free(t->rbuf);
	free(t);
	c->tier = NULL;
}

/*
 * The tier's counters: from the segment, or by pread() for a copied
 * read-only handle, whose private copy stops before the tier (segment.c).
 */
static void tier_counts(const struct cistern *c, struct cistern__tier_shm *out)
{
	memset(out, 0, sizeof(*out));
	if (c->copied) {
		if (cistern__pread_all(c->fd, out, sizeof(*out), c->fixed.cold_off) < 0)
			memset(out, 0, sizeof(*out));
		return;
	}
	const struct cistern__tier_shm *ts = T(c);
	/* Relaxed: statistics, read one by one. */
	atomic_init(&out->population, atomic_load_explicit(&ts->population, memory_order_relaxed));
	atomic_init(&out->spilled, atomic_load_explicit(&ts->spilled, memory_order_relaxed));
	atomic_init(&out->cold_reads, atomic_load_explicit(&ts->cold_reads, memory_order_relaxed));
	atomic_init(&out->cold_evictions,
		    atomic_load_explicit(&ts->cold_evictions, memory_order_relaxed));
	atomic_init(&out->io.bytes_written,
		    atomic_load_explicit(&ts->io.bytes_written, memory_order_relaxed));
	atomic_init(&out->io.bytes_read,
		    atomic_load_explicit(&ts->io.bytes_read, memory_order_relaxed));
	atomic_init(&out->io.write_wait_ns,
		    atomic_load_explicit(&ts->io.write_wait_ns, memory_order_relaxed));
	atomic_init(&out->io.read_wait_ns,
		    atomic_load_explicit(&ts->io.read_wait_ns, memory_order_relaxed));
}

static void tier_view(const struct cistern *c, struct cistern__tier_view *v)
{
	memset(v, 0, sizeof(*v));
	if (c->fixed.cold_slots == 0)
		return;
	struct cistern__tier_shm ts;
	tier_counts(c, &ts);
	v->slots = c->fixed.cold_slots;
	/* A plain copy now: nobody else sees it. */
	v->population = atomic_load_explicit(&ts.population, memory_order_relaxed);
	v->spilled = atomic_load_explicit(&ts.spilled, memory_order_relaxed);
	v->cold_reads = atomic_load_explicit(&ts.cold_reads, memory_order_relaxed);
	v->cold_evictions = atomic_load_explicit(&ts.cold_evictions, memory_order_relaxed);
	v->bytes_written = atomic_load_explicit(&ts.io.bytes_written, memory_order_relaxed);
	v->bytes_read = atomic_load_explicit(&ts.io.bytes_read, memory_order_relaxed);
	v->write_wait_ns = atomic_load_explicit(&ts.io.write_wait_ns, memory_order_relaxed);
	v->read_wait_ns = atomic_load_explicit(&ts.io.read_wait_ns, memory_order_relaxed);
	uint64_t sb = cistern__cold_slot_bytes(c->fixed.slot_size);
	v->disk_bytes = CISTERN__COLD_BLOCK + sb * c->fixed.cold_slots;
}

/* ---- spill: hot to cold ------------------------------------------------ */

/*
 * How many samples a spill moves: CISTERN__SPILL_BYTES of slots, at most
 * CISTERN__SPILL_MAX, and at most a quarter of the hot arena, so that a
 * spill never holds most of the hot samples away from readers at once.
 */
static unsigned spill_batch(const struct cistern *c, const struct cistern__cold *cold)
{
	uint64_t n = CISTERN__SPILL_BYTES / cold->slot_bytes;
	if (n > c->slot_count / 4)
		n = c->slot_count / 4;
	if (n > CISTERN__SPILL_MAX)
		n = CISTERN__SPILL_MAX;
	return n ? (unsigned)n : 1;
}

/* A seen sample that a claim of cold slots evicted leaves the population: counted here. */
static void count_cold_eviction(struct cistern *c, uint32_t seen)
{
	struct cistern_counters *ctr = &c->me->ctr;
	cistern__count(&ctr->seen_hist[cistern__seen_bucket(seen)], 1);
	cistern__count(&ctr->evictions, 1);
	atomic_fetch_add_explicit(&T(c)->cold_evictions, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&T(c)->population, 1, memory_order_relaxed);
}

bool cistern__tiered_claim_cold(struct cistern *c, bool in_order, enum cistern__cold_take take,
				uint64_t *out)
{
	struct cistern__tier_shm *ts = T(c);
	struct cistern__cold_ent *E = ents(c);
	uint64_t n = c->fixed.cold_slots;
	/*
	 * Only free slots, and all of them held: no scan, unless a death may
	 * have left the count high. Relaxed, no edge: a hint; claims are by CAS.
	 */
	if (take == CISTERN__COLD_TAKE_FREE &&
	    atomic_load_explicit(&ts->population, memory_order_relaxed) >= n &&
	    !atomic_load_explicit(&c->hdr->counts_unsure, memory_order_relaxed))
		return false;
	for (uint64_t scanned = 0; scanned < (in_order ? 1 : n); scanned++) {
		/* Relaxed: the cursor is a hint of where to look; claims are by CAS. */
		uint64_t cur = atomic_load_explicit(&ts->cursor, memory_order_relaxed);
		uint64_t s = cur % n;
		uint64_t w = atomic_load_explicit(&E[s].word, memory_order_relaxed);
		bool ok = cistern__cold_claim_as(&E[s], c->owner, take);
		/*
		 * Relaxed: a lost race only means another process moved it on. In
		 * order, the cursor moves only past a slot taken: the next spill
		 * waits at a slot it may not take yet.
		 */
		if (ok || !in_order)
			atomic_compare_exchange_strong_explicit(&ts->cursor, &cur, cur + 1,
								memory_order_relaxed,
								memory_order_relaxed);
		if (!ok)
			continue;
		if (cistern__cold_state(w) == CISTERN__COLD_HELD) {
			/* The claim took the held sample of word w: an eviction. */
			uint32_t seen = atomic_load_explicit(&E[s].seen, memory_order_relaxed);
			struct cistern_counters *ctr = &c->me->ctr;
			cistern__count(&ctr->seen_hist[cistern__seen_bucket(seen)], 1);
			cistern__count(&ctr->evictions, 1);
			if (seen == 0)
				cistern__count(&ctr->evicted_unseen, 1);
			atomic_fetch_add_explicit(&ts->cold_evictions, 1, memory_order_relaxed);
			atomic_fetch_sub_explicit(&ts->population, 1, memory_order_relaxed);
		}
		*out = s;
		return true;
	}
	return false;
}

/*
 * Stop reads of held hot sample i, word w (unpinned when looked at):
 * HELD -> EVICTING(me), by the handshake of cistern__rs_evict_claim()
 * ([pin-evict]). false: it moved, or a reader pins it.
 */
static bool stop_hot(struct cistern *c, uint64_t i, uint64_t w)
{
	struct cistern_slotmeta *m = cistern__slotmeta(c, i);
	uint64_t tentative = sw_make(sw_pos(w), RS_EVICTING, c->owner);
	/* [pin-evict] seq_cst CAS, then the seq_cst load of pins, as an eviction. */
	if (!atomic_compare_exchange_strong_explicit(&m->word, &w, tentative, memory_order_seq_cst,
						     memory_order_relaxed))
		return false;
	if (atomic_load_explicit(&m->pins, memory_order_seq_cst) != 0) {
		/* [rs-release] seq_cst: back as it was. */
		atomic_store_explicit(&m->word, w, memory_order_seq_cst);
		return false;
	}
	return true;
}

/*
 * Stop reads of a held, unpinned hot sample: HELD -> EVICTING(me), by the
 * handshake of cistern__rs_evict_claim() ([pin-evict]), seen or not (a
 * spill keeps the sample). *word gets the HELD word.
 */
static bool hold_hot(struct cistern *c, uint64_t *idx, uint64_t *word)
{
	for (int tries = 0; tries < 4 * RS_PICK_TRIES; tries++) {
		uint64_t i = cistern__rng_below(&c->rng, c->slot_count);
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		/* Acquire [rs-held]: the sample's metadata and payload, which we copy. */
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		if (sw_state(w) != RS_HELD ||
		    atomic_load_explicit(&m->pins, memory_order_relaxed) || !stop_hot(c, i, w))
			continue;
		*idx = i;
		*word = w;
		return true;
	}
	return false;
}

/* Give held hot samples [from, to) back to readers: the spill does not move them. */
static void unhold_hot(struct cistern *c, const uint64_t *idx, const uint64_t *word, unsigned from,
		       unsigned to)
{
	for (unsigned i = from; i < to; i++)
		/* [rs-release] seq_cst: back as it was. */
		atomic_store_explicit(&cistern__slotmeta(c, idx[i])->word, word[i],
				      memory_order_seq_cst);
}

/*
 * The policy's own choice (tier_rules' pick_hot or claim_cold): one hot
 * sample to one cold slot, in the policy's order. Its claim counted any
 * sample it evicted. The hot sample is held as by hold_hot(); *pos is the
 * ring position its slot serves for the put.
 */
static bool pick_one(struct cistern *c, uint64_t *idx, uint64_t *hw, uint64_t *pos, uint64_t *cold)
{
	const struct cistern__tier_rules *tr = R(c);
	if (tr->pick_hot ? !tr->pick_hot(c, idx, hw, pos) || !stop_hot(c, *idx, *hw)
			 : !hold_hot(c, idx, hw))
		return false;
	if (!tr->pick_hot)
		*pos = sw_pos(*hw);
	if (!(tr->claim_cold
		      ? tr->claim_cold(c, cold)
		      : cistern__tiered_claim_cold(c, false, CISTERN__COLD_TAKE_SEEN, cold))) {
		unhold_hot(c, idx, hw, 0, 1);
		return false;
	}
	return true;
}

/*
 * A put found the hot arena full: move a batch of hot samples to a run of
 * cold slots, written at once, and reserve the first one's hot slot for
 * the put. The others become EMPTY for the next fills (their vacancy hints
 * lead a fill to them). A policy that picks what it spills (FIRO,
 * FIFOEvictReservoir) moves one sample a spill. Each sample is in the hot
 * arena until its cold copy is published (EVICTING(me) keeps readers off
 * it meanwhile, and a reclaim puts it back to HELD); the note tells a
 * reclaim of a dead spiller which cold copies were published. A sample
 * keeps its seen count in the cold tier.
 */
static int spill_reserve(struct cistern *c, struct cistern_slot *slot)
{
	struct cistern__tier *t;
	int r = tier_get(c, &t);
	if (r < 0)
		return r;
	const struct cistern__tier_rules *tr = R(c);
	const bool one = tr->pick_hot || tr->claim_cold;
	const unsigned want = one ? 1 : spill_batch(c, &t->cold);
	if (!t->stage && !(t->stage = cistern__cold_alloc(&t->cold, spill_batch(c, &t->cold))))
		return -ENOMEM;
	struct cistern__tier_shm *ts = T(c);
	struct cistern__cold_ent *E = ents(c);
	uint64_t idx[CISTERN__SPILL_MAX], hw[CISTERN__SPILL_MAX], slots[CISTERN__SPILL_MAX];
	uint64_t ids[CISTERN__SPILL_MAX], first, pos;
	uint32_t lens[CISTERN__SPILL_MAX], evicted[CISTERN__SPILL_MAX], seen[CISTERN__SPILL_MAX];
	unsigned n;
	if (one) {
		if (!pick_one(c, &idx[0], &hw[0], &pos, &first))
			return -EAGAIN;
		n = 1;
	} else {
		unsigned k = 0;
		while (k < want && hold_hot(c, &idx[k], &hw[k]))
			k++;
		if (k == 0)
			return -EAGAIN;
		n = cistern__cold_claim_run(E, c->fixed.cold_slots, &ts->cursor, c->owner, k,
					    &first, evicted);
		unhold_hot(c, idx, hw, n, k);
		if (n == 0)
			return -EAGAIN;
		for (unsigned i = 0; i < n; i++)
			if (evicted[i])
				count_cold_eviction(c, evicted[i]);
		pos = sw_pos(hw[0]);
	}

	struct cistern__spill_note *nt = note_of(c, c->owner);
	nt->cold = first;
	nt->n = n;
	for (unsigned i = 0; i < n; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta(c, idx[i]);
		struct cistern__cold_ent *e = &E[first + i];
		slots[i] = first + i;
		ids[i] = m->sample_id;
		lens[i] = (uint32_t)m->len;
		/* EVICTING(me), unpinned: no reader changes the count. The sample keeps its reads. */
		seen[i] = atomic_load_explicit(&m->seen, memory_order_relaxed);
		memcpy((uint8_t *)t->stage + (size_t)i * t->cold.slot_bytes,
		       cistern__payload(c, idx[i]), lens[i]);
		/* The entry is WRITING(me): nobody reads its fields until the publish. */
		uint32_t key[2] = {__atomic_load_n(&m->sim_id, __ATOMIC_RELAXED),
				   __atomic_load_n(&m->time_step, __ATOMIC_RELAXED)};
		memcpy(e->meta, key, sizeof(key));
	}
	/* Release [spill-note]: a reclaimer that reads live = 1 reads the fields above with it. */
	atomic_store_explicit(&nt->live, 1, memory_order_release);
	if (cistern__spill_hook)
		cistern__spill_hook(CISTERN__SPILL_CLAIMED, 0);
	/* Counted before the publish: a death in between leaves it high, never low. */
	atomic_fetch_add_explicit(&ts->population, n, memory_order_relaxed);
	/* Relaxed: read by a reclaimer only after we died. */
	atomic_store_explicit(&nt->live, 2, memory_order_relaxed);
	r = cistern__cold_spill_seen(&t->cold, E, slots, n, t->stage, lens, ids, seen, &ts->io);
	if (r < 0) {
		/* The entries went back to FREE: the count goes back, then the note. */
		atomic_store_explicit(&nt->live, 1, memory_order_relaxed);
		atomic_fetch_sub_explicit(&ts->population, n, memory_order_relaxed);
		atomic_store_explicit(&nt->live, 0, memory_order_relaxed);
		unhold_hot(c, idx, hw, 0, n); /* the samples stay hot */
		return r;
	}
	for (unsigned i = 0; i < n; i++) {
		if (i == 0)
			/* [rs-fill]: the slot stays counted in `filled`; it is ours to fill. */
			atomic_store_explicit(&cistern__slotmeta(c, idx[0])->word,
					      sw_make(pos, RS_RESERVED, c->owner),
					      memory_order_seq_cst);
		else
			cistern__rs_vacate(c, idx[i], hw[i]);
		/* After the slot, so that a death in between leaves the count high. */
		atomic_fetch_sub_explicit(&c->hdr->population, 1, memory_order_relaxed);
		if (cistern__spill_hook)
			cistern__spill_hook(CISTERN__SPILL_FREED, i);
	}
	atomic_fetch_add_explicit(&ts->spilled, n, memory_order_relaxed);
	atomic_store_explicit(&nt->live, 0, memory_order_relaxed);
	if (n > 1)
		cistern__wake_producers(c); /* slots to fill */
	cistern__set_slot(slot, c, idx[0], pos);
	return 0;
}

int cistern__tiered_spill_reserve(struct cistern *c, struct cistern_slot *slot)
{
	return spill_reserve(c, slot);
}

static int tiered_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	if (R(c)->try_reserve)
		return R(c)->try_reserve(c, slot);
	if (!cistern__rs_rate_allows_put(c))
		return -EAGAIN;
	int r = cistern__rs_fill_reserve(c, slot);
	if (r == -EAGAIN)
		r = cistern__rs_fill_past_count(c, slot);
	/* Full: spill to cold (evicting a seen cold sample if cold is full too). */
	if (r == -EAGAIN)
		r = spill_reserve(c, slot);
	/* No cold slot may be taken: evict a seen hot sample, as without a tier. */
	if (r == -EAGAIN)
		r = cistern__rs_evict_reserve(c, slot, NULL);
	if (r == -EAGAIN)
		cistern__rs_rate_stuck(c, true);
	return r;
}

/* ---- reads ------------------------------------------------------------- */

static bool is_cold(const struct cistern *c, const struct cistern_sample *s)
{
	return s->index_ >= c->slot_count;
}

/*
 * Make sure that n slot buffers are free: one new chunk for what is
 * missing, registered with the ring if it can be (else its reads pin
 * pages each, as ordinary buffers do). 0 or -ENOMEM.
 */
static int bufs_reserve(struct cistern__tier *t, size_t n)
{
	struct cistern__spares *sp = &t->spares;
	if (sp->n >= n)
		return 0;
	size_t need = n - sp->n;
	struct cistern__buf_chunk *ch = realloc(sp->chunk, (sp->chunks + 1) * sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	sp->chunk = ch;
	void **buf = realloc(sp->buf, (sp->total + need) * sizeof(*buf));
	if (!buf)
		return -ENOMEM;
	sp->buf = buf;
	uint8_t *base = cistern__cold_alloc(&t->cold, need);
	if (!base)
		return -ENOMEM;
	ch = &sp->chunk[sp->chunks++];
	ch->base = base;
	ch->slots = need;
	cistern__uring_register(base, need * t->cold.slot_bytes, &ch->region);
	for (size_t i = 0; i < need; i++)
		sp->buf[sp->n++] = base + i * t->cold.slot_bytes;
	sp->total += need;
	return 0;
}

/* A free slot buffer for a cold read, or NULL. */
static void *buf_get(struct cistern__tier *t)
{
	struct cistern__spares *sp = &t->spares;
	if (sp->n == 0 && bufs_reserve(t, 1) < 0)
		return NULL;
	return sp->buf[--sp->n];
}

/* Give back a slot buffer that no read in flight writes to and no sample handed out points into. */
static void buf_put(struct cistern__tier *t, void *p)
{
	struct cistern__spares *sp = &t->spares;
	if (p)
		sp->buf[sp->n++] = p;
}

/* Prepare the read of cold slot j into buf, in buf's registered chunk if it has one. */
static void prep_read(struct cistern__tier *t, struct cistern__io *io, uint64_t j, void *buf)
{
	struct cistern__spares *sp = &t->spares;
	cistern__cold_prep(&t->cold, io, j, 1, buf, false);
	for (size_t i = 0; i < sp->chunks; i++) {
		struct cistern__buf_chunk *ch = &sp->chunk[i];
		if ((uint8_t *)buf >= ch->base &&
		    (uint8_t *)buf < ch->base + ch->slots * t->cold.slot_bytes) {
			io->region = ch->region;
			return;
		}
	}
}

/* Free the chunks (the buffers are all back, or abandoned to a failed ring). */
static void bufs_free(struct cistern__tier *t)
{
	struct cistern__spares *sp = &t->spares;
	for (size_t i = 0; i < sp->chunks; i++) {
		cistern__uring_unregister(&sp->chunk[i].region);
		if (!sp->abandoned)
			free(sp->chunk[i].base);
	}
	free(sp->chunk);
	free(sp->buf);
	memset(sp, 0, sizeof(*sp));
}

size_t cistern__tiered_spares(const struct cistern *c, size_t *total, size_t *registered)
{
	const struct cistern__spares *sp = c->tier ? &c->tier->spares : NULL;
	*total = sp ? sp->total : 0;
	*registered = 0;
	for (size_t i = 0; sp && i < sp->chunks; i++)
		*registered += sp->chunk[i].region.slot ? sp->chunk[i].slots : 0;
	return sp ? sp->n : 0;
}

/*
 * Draw a held cold slot uniformly: probes at random; false after too many
 * misses. One this handle pins already (a sample it holds from an earlier
 * read) counts as a miss: its one pin bit could not tell two holds apart.
 */
static bool draw_cold(struct cistern *c, uint64_t *out)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	struct cistern__cold_ent *E = ents(c);
	uint64_t mine = rs->pin_bit >= 0 ? UINT64_C(1) << rs->pin_bit : 0;
	for (int k = 0; k < 4 * RS_PICK_TRIES; k++) {
		uint64_t j = cistern__rng_below(&c->rng, c->fixed.cold_slots);
		uint64_t w = atomic_load_explicit(&E[j].word, memory_order_relaxed);
		/* Relaxed: our own bit, which only we set and clear while we live. */
		if (cistern__cold_state(w) == CISTERN__COLD_HELD &&
		    !(atomic_load_explicit(&E[j].pins, memory_order_relaxed) & mine)) {
			*out = j;
			return true;
		}
	}
	return false;
}

/*
 * After close, a cold sample is taken for good: HELD -> EVICTING(me) once
 * no reader pins it; the release frees the slot, a reclaim puts it back.
 */
static bool take_cold(struct cistern *c, struct cistern__cold_ent *e, uint64_t *word)
{
	/* Acquire [cold-publish]: the entry's fields and the slot's bytes. */
	uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
	if (cistern__cold_state(w) != CISTERN__COLD_HELD)
		return false;
	uint64_t ev = cistern__cold_word(CISTERN__COLD_EVICTING, c->owner, cistern__cold_gen(w));
	/* seq_cst [cold-pin]: as an evictor's CAS, then its load of pins. */
	if (!atomic_compare_exchange_strong_explicit(&e->word, &w, ev, memory_order_seq_cst,
						     memory_order_relaxed))
		return false;
	if (atomic_load_explicit(&e->pins, memory_order_seq_cst) != 0) {
		atomic_store_explicit(&e->word, w, memory_order_relaxed);
		return false;
	}
	*word = ev;
	return true;
}

/* Count a cistern__cold_check() result in the handle's stats: whether the bytes passed. */
static bool count_check(struct cistern__tier *t, int checked)
{
	t->ahead_stats.crc_checks += checked == 1;
	t->ahead_stats.crc_skips += checked == 2;
	t->ahead_stats.crc_fails += checked == 0;
	return checked != 0;
}

/* Read the cold members of out[0..n) (none read yet) in one submission. */
static int read_cold_members(struct cistern *c, struct cistern_sample *out, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += is_cold(c, &out[i]);
	if (k == 0)
		return 0;
	struct cistern__tier *t;
	int r = tier_get(c, &t);
	if (r < 0)
		return r;
	struct cistern__cold_ent *E = ents(c);
	if (bufs_reserve(t, k) < 0)
		return -ENOMEM;
	struct cistern__io *io = calloc(k, sizeof(*io));
	if (!io)
		return -ENOMEM;
	size_t q = 0;
	r = 0;
	for (size_t i = 0; i < n && r == 0; i++) {
		if (!is_cold(c, &out[i]))
			continue;
		void *buf = buf_get(t);
		if (!buf) {
			r = -ENOMEM;
			break;
		}
		out[i].data = buf;
		prep_read(t, &io[q++], out[i].index_ - c->slot_count, buf);
	}
	if (r == 0)
		r = cistern__cold_run(&T(c)->io, io, (unsigned)q);
	free(io);
	for (size_t i = 0; i < n && r == 0; i++) {
		if (!is_cold(c, &out[i]))
			continue;
		struct cistern__cold_ent *e = &E[out[i].index_ - c->slot_count];
		/* Pinned or taken: the fields are the ones published with the bytes read. */
		if (!count_check(t, cistern__cold_check(e, out[i].pos_, out[i].data, out[i].len)))
			r = -EIO;
	}
	return r;
}

/* Make s the cold sample of entry j (pinned or taken, word w); data comes later. */
static void fill_cold_sample(struct cistern *c, struct cistern_sample *s, uint64_t j, uint64_t w,
			     uint32_t live)
{
	struct cistern__cold_ent *e = &ents(c)[j];
	uint32_t key[2];
	memcpy(key, e->meta, sizeof(key));
	s->data = NULL;
	s->len = e->len;
	s->meta.sample_id = e->id;
	s->meta.sim_id = key[0];
	s->meta.time_step = key[1];
	s->meta.flags = 0; /* a tiered segment keeps no flags */
	s->pos_ = w;
	s->index_ = (uint32_t)(c->slot_count + j);
	s->live_ = live;
}

static int tiered_unacquire_one(struct cistern *c, struct cistern_sample *s);

/* ---- reading ahead ------------------------------------------------------ */

/*
 * A handle keeps up to two batches drawn ahead: ahead[next], the batch its
 * next read takes, and ahead[next ^ 1], the one after. Each batch's reads
 * go to the ring in parts of CISTERN__AHEAD_PART, and a part starts only
 * while the handle's reads outstanding leave it room in the ring; a part
 * that finds no room starts when a part before it is collected. So the
 * ring stays near full, and the reads of the batch after fly while the
 * caller waits for the tail of the next one.
 */

static size_t parts_of(const struct cistern__ahead *a)
{
	return (a->k + CISTERN__AHEAD_PART - 1) / CISTERN__AHEAD_PART;
}

static unsigned part_len(const struct cistern__ahead *a, size_t i)
{
	size_t left = a->k - i * CISTERN__AHEAD_PART;
	return (unsigned)(left < CISTERN__AHEAD_PART ? left : CISTERN__AHEAD_PART);
}

/* The reads this handle started ahead and did not collect yet. */
static size_t outstanding(const struct cistern__tier *t)
{
	size_t q = 0;
	for (int h = 0; h < 2; h++)
		for (size_t i = t->ahead[h].waited; i < t->ahead[h].started; i++)
			q += part_len(&t->ahead[h], i);
	return q;
}

/*
 * Start a's parts in order: those that fit in the ring beside the reads
 * outstanding, or (all) every one left. A ring that cannot be made fails
 * each read of the part (cistern__uring_start()); the take then drops them.
 */
static void ahead_start(struct cistern__tier *t, struct cistern__ahead *a, bool all)
{
	size_t q = outstanding(t);
	bool any = false;
	while (a->started < parts_of(a)) {
		size_t i = a->started;
		unsigned len = part_len(a, i);
		if (!all && q + len > cistern__uring_depth())
			break;
		cistern__uring_start(&a->part[i], a->io + i * CISTERN__AHEAD_PART, len);
		a->started++;
		q += len;
		any = true;
	}
	if (any) {
		t->ahead_stats.starts++;
		t->ahead_stats.start_depth += q;
	}
}

/*
 * Wait for part i of a (started). A failed ring may still write into the
 * part's buffers: true then, and they must never be reused.
 */
static bool part_wait(struct cistern *c, struct cistern__ahead *a, size_t i)
{
	struct cistern__io_batch *b = &a->part[i];
	return cistern__cold_wait(&T(c)->io, b) < 0 && b->pending > 0;
}

/*
 * Drop a batch drawn ahead: wait for its reads, free their buffers. A
 * handle a fork() child inherited does not wait: the reads are in its
 * parent's ring and write into its parent's buffers, not into this copy.
 */
static void ahead_drop_one(struct cistern *c, struct cistern__ahead *a)
{
	struct cistern__tier *t = c->tier;
	bool leak = false;
	for (; a->waited < a->started; a->waited++)
		if (!c->inherited)
			leak |= part_wait(c, a, a->waited);
	for (size_t i = 0; i < a->k; i++) {
		if (!leak)
			buf_put(t, a->buf[i]);
		a->buf[i] = NULL;
	}
	t->spares.abandoned |= leak;
	a->started = a->waited = 0;
	a->k = 0;
	a->n = 0;
}

/* Drop both batches drawn ahead. */
static void ahead_drop(struct cistern *c)
{
	struct cistern__tier *t = c->tier;
	if (!t)
		return;
	ahead_drop_one(c, &t->ahead[t->next ^ 1]);
	ahead_drop_one(c, &t->ahead[t->next]);
}

static bool ahead_room(struct cistern__ahead *a, size_t n)
{
	if (a->cap >= n)
		return true;
	size_t parts = (n + CISTERN__AHEAD_PART - 1) / CISTERN__AHEAD_PART;
	uint64_t *slot = realloc(a->slot, n * sizeof(*slot));
	if (slot)
		a->slot = slot;
	uint64_t *word = realloc(a->word, n * sizeof(*word));
	if (word)
		a->word = word;
	void **buf = realloc(a->buf, n * sizeof(*buf));
	if (buf)
		a->buf = buf;
	struct cistern__io *io = realloc(a->io, n * sizeof(*io));
	if (io)
		a->io = io;
	struct cistern__io_batch *part = realloc(a->part, parts * sizeof(*part));
	if (part)
		a->part = part;
	if (!slot || !word || !buf || !io || !part)
		return false;
	a->cap = n;
	return true;
}

static void ahead_free(struct cistern__ahead *a)
{
	free(a->slot);
	free(a->word);
	free(a->buf);
	free(a->io);
	free(a->part);
}

/*
 * Draw a batch of n ahead into a (none drawn there), as a read would draw
 * it now: each member takes a tier by its share of the population; a cold
 * member is drawn at once and its read started into a buffer of our own; a
 * hot one is only counted, and drawn when the batch is asked for (it needs
 * no read). `before`, a batch drawn ahead to be read first, or NULL: its
 * cold members are not drawn again, since one pin bit could not hold a
 * sample for both. The members are not pinned: the read that takes the
 * batch checks that each is still the sample drawn before it hands it out.
 * A failure here only means no batch is drawn ahead.
 */
static void ahead_draw(struct cistern *c, struct cistern__ahead *a, size_t n,
		       const struct cistern__ahead *before)
{
	struct cistern__tier *t;
	size_t prior = before ? before->k : 0;
	if (tier_get(c, &t) < 0 || t->no_ahead || !ahead_room(a, n) ||
	    cistern__scratch_reset(c, n + prior) < 0)
		return;
	struct cistern__rs_state *rs = cistern__rs(c);
	struct cistern__cold_ent *E = ents(c);
	uint64_t hot_n = atomic_load_explicit(&c->hdr->population, memory_order_relaxed);
	uint64_t cold_n = atomic_load_explicit(&T(c)->population, memory_order_relaxed);
	if (hot_n + cold_n == 0)
		return;
	for (size_t i = 0; i < prior; i++)
		cistern__scratch_add(&rs->scratch, (uint32_t)(c->slot_count + before->slot[i]));
	a->k = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t j;
		if (cistern__rng_below(&c->rng, hot_n + cold_n) < hot_n)
			continue;
		/*
		 * A cold member drawn twice, or drawn by the batch before, is drawn
		 * again: counted hot instead, the batch would lean to the hot tier.
		 */
		bool drawn = false;
		for (int tries = 0; !drawn && tries < 4; tries++)
			drawn = draw_cold(c, &j) &&
				cistern__scratch_add(&rs->scratch, (uint32_t)(c->slot_count + j));
		if (!drawn)
			continue;
		/* Acquire [cold-publish]: the slot's bytes are on disk before we read them. */
		uint64_t w = atomic_load_explicit(&E[j].word, memory_order_acquire);
		if (cistern__cold_state(w) != CISTERN__COLD_HELD)
			continue;
		a->slot[a->k] = j;
		a->word[a->k] = w;
		a->k++;
	}
	/* The buffers now, as many as the cold members: a chunk holds no spare one. */
	if (bufs_reserve(t, a->k) < 0)
		a->k = 0;
	for (size_t i = 0; i < a->k; i++) {
		a->buf[i] = buf_get(t);
		prep_read(t, &a->io[i], a->slot[i], a->buf[i]);
		/* The kernel's workers issue it: the caller goes back to its step at once. */
		a->io[i].async = true;
	}
	a->n = n;
	a->started = a->waited = 0;
	ahead_start(t, a, false);
}

/*
 * Wait for every read of a (the next batch), starting any part not started
 * yet; as each part is collected, the batch after starts the parts that now
 * fit in the ring. true if the ring failed.
 */
static bool ahead_collect(struct cistern *c, struct cistern__ahead *a, struct cistern__ahead *after)
{
	struct cistern__tier *t = c->tier;
	bool failed = false;
	t->ahead_stats.waits++;
	t->ahead_stats.wait_depth += outstanding(t);
	while (a->waited < parts_of(a)) {
		if (a->started == a->waited)
			ahead_start(t, a, true);
		failed |= part_wait(c, a, a->waited);
		a->waited++;
		if (a->waited == parts_of(a))
			t->ahead_stats.tail_depth += outstanding(t);
		if (!failed)
			ahead_start(t, after, false);
	}
	return failed;
}

/*
 * Take the batch drawn ahead into out[0..): wait for its reads, then pin
 * each cold member and keep it only if its entry still holds the sample
 * drawn (the same HELD word: the slot was not written since). Their bytes
 * are checked later, by ahead_check(). The batch after becomes the next.
 * The count taken; *hot gets the hot members to draw.
 */
static size_t ahead_take(struct cistern *c, struct cistern_sample *out, size_t *hot)
{
	struct cistern__tier *t = c->tier;
	struct cistern__ahead *a = &t->ahead[t->next];
	struct cistern__rs_state *rs = cistern__rs(c);
	struct cistern__cold_ent *E = ents(c);
	uint64_t mine = UINT64_C(1) << rs->pin_bit;
	if (ahead_collect(c, a, &t->ahead[t->next ^ 1])) {
		ahead_drop(c); /* the ring failed; draw afresh */
		*hot = 0;
		return 0;
	}
	*hot = a->n - a->k;
	size_t got = 0;
	for (size_t i = 0; i < a->k; i++) {
		struct cistern__cold_ent *e = &E[a->slot[i]];
		uint64_t w;
		/*
		 * Our own pin already on it (a sample we hold from a read since):
		 * one bit cannot tell two holds apart. Else pin it; [cold-pin] and
		 * [cold-publish] in cistern__cold_pin(). The same word as at the
		 * draw: no spill wrote the slot in between, since a write turns the
		 * word from HELD and its publish raises the generation.
		 */
		bool ok = a->io[i].res == 0 &&
			  !(atomic_load_explicit(&e->pins, memory_order_relaxed) & mine) &&
			  cistern__cold_pin(e, (unsigned)rs->pin_bit, &w);
		if (ok &&
		    (w != a->word[i] ||
		     !cistern__scratch_add(&rs->scratch, (uint32_t)(c->slot_count + a->slot[i])))) {
			cistern__cold_unpin(e, (unsigned)rs->pin_bit);
			ok = false;
		}
		if (!ok) {
			buf_put(t, a->buf[i]);
			a->buf[i] = NULL;
			continue;
		}
		fill_cold_sample(c, &out[got], a->slot[i], w, RS_LIVE_PINNED);
		out[got++].data = a->buf[i];
		a->buf[i] = NULL;
	}
	a->started = a->waited = 0;
	a->k = 0;
	a->n = 0;
	t->next ^= 1;
	return got;
}

/*
 * Check the bytes of the members taken from ahead, out[0..k), against
 * their entries' CRCs: pinned and unchanged since the draw, the entries
 * describe the bytes that were read (a CRC already found good for the
 * same write is not computed again: cistern__cold_check()). A member that
 * fails is unpinned and swapped with the last member of out[0..*got), so
 * that the failed ones end in out[*got..), where the caller finds their
 * slots to keep them out of the draws that replace them. Whether all
 * passed.
 */
static bool ahead_check(struct cistern *c, struct cistern_sample *out, size_t k, size_t *got)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	struct cistern__cold_ent *E = ents(c);
	bool all = true;
	/* From the end: a member moved into a hole was checked already, or needs no check. */
	for (size_t i = k; i-- > 0;) {
		struct cistern__cold_ent *e = &E[out[i].index_ - c->slot_count];
		if (count_check(c->tier,
				cistern__cold_check(e, out[i].pos_, out[i].data, out[i].len)))
			continue;
		all = false;
		cistern__cold_unpin(e, (unsigned)rs->pin_bit);
		buf_put(c->tier, (void *)(uintptr_t)out[i].data);
		struct cistern_sample failed = out[i];
		out[i] = out[--*got];
		out[*got] = failed;
	}
	return all;
}

int cistern__tiered_read_ahead(struct cistern *c, bool on)
{
	if (!c->fixed.cold_slots || !c->policy->tiering || c->ops != c->policy->tiering->ops)
		return -EINVAL;
	struct cistern__tier *t;
	int r = tier_get(c, &t);
	if (r < 0)
		return r;
	t->no_ahead = !on;
	if (!on)
		ahead_drop(c);
	return 0;
}

void cistern__tiered_ahead_stats(const struct cistern *c, struct cistern__ahead_stats *out)
{
	static const struct cistern__ahead_stats none;
	*out = c->tier ? c->tier->ahead_stats : none;
}

size_t cistern__tiered_ahead_slots(const struct cistern *c, unsigned which, uint64_t *slots,
				   size_t cap)
{
	const struct cistern__tier *t = c->tier;
	if (!t || which > 1)
		return 0;
	const struct cistern__ahead *a = &t->ahead[t->next ^ which];
	if (!a->n)
		return 0;
	for (size_t i = 0; i < a->k && i < cap; i++)
		slots[i] = a->slot[i];
	return a->k;
}

const struct cistern__cold_ent *cistern__tiered_ent(const struct cistern *c, uint64_t j)
{
	return j < c->fixed.cold_slots ? &ents(c)[j] : NULL;
}

/*
 * At a batch read of n: draw the next batch ahead unless the release of
 * the batch before drew it already.
 */
static void ahead_draw_next(struct cistern *c, size_t n)
{
	struct cistern__tier *t;
	if (tier_get(c, &t) == 0 && !t->ahead[t->next].n)
		ahead_draw(c, &t->ahead[t->next], n, NULL);
}

/* ---- a read ------------------------------------------------------------- */

/*
 * A read of n samples over both tiers. `batch`: a batch read, which takes
 * the batch drawn ahead (if drawn for n) and draws the next one ahead
 * (unless the release of the batch before drew it).
 */
static int tiered_try_acquire_n(struct cistern *c, struct cistern_sample *out, size_t n, bool batch)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	struct cistern__tier_shm *ts = T(c);
	struct cistern__cold_ent *E = ents(c);
	bool closed = cistern__rs_closed(c);
	/* Each sample taken for this reader alone: after close, and always under reads_take. */
	bool take = closed || R(c)->reads_take;
	uint64_t taken = 0;
	int r;
	if (!closed) {
		/* Relaxed hints: the slot words and entries decide. */
		uint64_t pop = atomic_load_explicit(&c->hdr->population, memory_order_relaxed) +
			       atomic_load_explicit(&ts->population, memory_order_relaxed);
		uint64_t need = c->fixed.watermark > n ? c->fixed.watermark : n;
		if (R(c)->may_read ? !R(c)->may_read(c, pop, n) : pop < need) {
			cistern__rs_rate_stuck(c, false);
			return -EAGAIN;
		}
		int b = take ? 0 : cistern__pin_bit(c);
		if (b < 0)
			return b;
		if (!cistern__rs_rate_take(c, n, &taken))
			return -EAGAIN;
	}
	r = cistern__scratch_reset(c, n);
	if (r < 0) {
		cistern__rs_rate_settle(c, taken, 0);
		return r;
	}
	/* A batch drawn ahead for this read; after close a read takes samples for good. */
	size_t got = 0, misses = 0, hot_left = 0;
	struct cistern__tier *t = c->tier;
	size_t next_n = t ? t->ahead[t->next].n : 0;
	if (next_n && (closed || !batch || next_n != n)) {
		/* A single read leaves the batches drawn ahead for the batch reads. */
		if (closed || batch)
			ahead_drop(c);
	} else if (next_n) {
		got = ahead_take(c, out, &hot_left);
	}
	/* Members out[0..unchecked) came from ahead; out[unchecked..unread) need no read. */
	size_t unchecked = got, unread = got;
	bool drew = false;
	for (;;) {
		while (got < n && misses < 4 * RS_PICK_TRIES) {
			uint64_t hot_n = atomic_load_explicit(&c->hdr->population,
							      memory_order_relaxed);
			uint64_t cold_n = atomic_load_explicit(&ts->population,
							       memory_order_relaxed);
			if (hot_n + cold_n == 0)
				break;
			/* The hot members planned ahead first, unless the hot tier keeps missing. */
			if (hot_left && misses >= RS_PICK_TRIES)
				hot_left = 0;
			/* Each sample alike: a tier by its share of the population, then uniform in it. */
			struct cistern_sample *s = &out[got];
			if (hot_left || cistern__rng_below(&c->rng, hot_n + cold_n) < hot_n) {
				uint64_t idx, w;
				if (cistern__pick(c, &rs->pick_read, cistern__rs_is_held, NULL,
						  &idx) < 0 ||
				    !cistern__scratch_add(&rs->scratch, (uint32_t)idx)) {
					misses++;
					continue;
				}
				bool ok = take ? cistern__rs_read_exclusive(c, s, idx) == 0
					       : cistern__pin(c, idx, RS_HELD, &w);
				if (!ok) {
					cistern__scratch_forget(&rs->scratch, (uint32_t)idx);
					misses++;
					continue;
				}
				if (!take)
					cistern__rs_read_pinned(c, s, idx, w);
				hot_left -= hot_left > 0;
			} else {
				uint64_t j, w;
				uint32_t key;
				if (!draw_cold(c, &j) ||
				    !cistern__scratch_add(&rs->scratch,
							  key = (uint32_t)(c->slot_count + j))) {
					misses++;
					continue;
				}
				bool ok = take ? take_cold(c, &E[j], &w)
					       : cistern__cold_pin(&E[j], (unsigned)rs->pin_bit,
								   &w);
				if (!ok) {
					cistern__scratch_forget(&rs->scratch, key);
					misses++;
					continue;
				}
				/*
				 * A take is counted at once, before its read: a reclaim of a
				 * dead taker gives one read back (give_back_takes()), which
				 * must have been counted.
				 */
				if (take)
					atomic_fetch_add_explicit(&E[j].seen, 1,
								  memory_order_relaxed);
				fill_cold_sample(c, s, j, w,
						 take ? RS_LIVE_EXCLUSIVE : RS_LIVE_PINNED);
			}
			misses = 0;
			got++;
		}
		/* The members taken from ahead were read already. */
		r = read_cold_members(c, out + unread, got - unread);
		if (r < 0)
			break;
		unread = got;
		if (unchecked == 0)
			break;
		/*
		 * The next batch's reads start before this one's bytes are checked,
		 * so that the disk works while the CPU checks. Its draw skips the
		 * cold members we pin now.
		 */
		if (batch && !take && got == n && !drew) {
			ahead_draw_next(c, n);
			drew = true;
		}
		size_t before = got;
		bool all = ahead_check(c, out, unchecked, &got);
		unchecked = 0;
		unread = got;
		if (all || got == n)
			break;
		/*
		 * Draw the failed members' places afresh, distinct from the
		 * members kept and from the failed ones (out[got..before)),
		 * whose bytes would fail again.
		 */
		r = cistern__scratch_reset(c, n);
		if (r < 0)
			break;
		for (size_t i = 0; i < before; i++)
			cistern__scratch_add(&rs->scratch, out[i].index_);
		misses = 0;
	}
	size_t cold = 0;
	for (size_t i = 0; i < got; i++)
		cold += is_cold(c, &out[i]);
	if (r < 0) {
		/* Give every member back, hot and cold, as if never drawn. */
		for (size_t i = 0; i < got; i++) {
			if (is_cold(c, &out[i])) {
				/* Unread: a pin's seen count was not raised, a take's was. */
				if (out[i].live_ == RS_LIVE_EXCLUSIVE)
					atomic_fetch_sub_explicit(
						&E[out[i].index_ - c->slot_count].seen, 1,
						memory_order_relaxed);
				buf_put(c->tier, (void *)(uintptr_t)out[i].data);
				out[i].data = NULL;
				tiered_unacquire_one(c, &out[i]);
			} else {
				cistern__rs_unacquire(c, &out[i]);
			}
		}
		cistern__rs_rate_settle(c, taken, 0);
		return r;
	}
	if (cold) {
		/* Seen while pinned or taken: counted before the release lets an evictor see it. */
		bool woke = false;
		for (size_t i = 0; i < got; i++)
			if (is_cold(c, &out[i]) && out[i].live_ == RS_LIVE_PINNED)
				woke |= atomic_fetch_add_explicit(
						&E[out[i].index_ - c->slot_count].seen, 1,
						memory_order_relaxed) == 0;
		cistern__count(&c->me->ctr.gets, cold);
		atomic_fetch_add_explicit(&ts->cold_reads, cold, memory_order_relaxed);
		if (woke)
			cistern__wake_producers(c); /* cold samples became evictable */
	}
	if (got == n || (closed && got > 0)) {
		cistern__rs_rate_settle(c, taken, got);
		if (batch && !take && !drew)
			ahead_draw_next(c, n);
		return (int)got;
	}
	for (size_t i = 0; i < got; i++)
		tiered_unacquire_one(c, &out[i]);
	cistern__rs_rate_settle(c, taken, 0);
	if (!closed)
		cistern__rs_rate_stuck(c, false);
	return -EAGAIN;
}

static int tiered_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	if (c->policy->reads_whole_batches)
		return -EINVAL; /* the unit of a read is a batch */
	int r = tiered_try_acquire_n(c, s, 1, false);
	return r < 0 ? r : 0;
}

static int tiered_try_acquire_batch(struct cistern *c, struct cistern_sample *out, size_t n)
{
	if (!c->policy->ops->try_acquire_batch)
		return -EINVAL; /* the tier reads no batches where the policy reads none */
	if (c->policy->reads_whole_batches && n != c->fixed.batch_size)
		return -EINVAL;
	return tiered_try_acquire_n(c, out, n, true);
}

/* The cold entry of a cold sample this handle holds, or NULL. */
static struct cistern__cold_ent *held_entry(struct cistern *c, const struct cistern_sample *s)
{
	struct cistern__rs_state *rs = cistern__rs(c);
	uint64_t j = s->index_ - c->slot_count;
	if (j >= c->fixed.cold_slots)
		return NULL;
	struct cistern__cold_ent *e = &ents(c)[j];
	if (s->live_ == RS_LIVE_PINNED && rs->pin_bit >= 0) {
		uint64_t bit = UINT64_C(1) << rs->pin_bit;
		/* Relaxed: our own bit, which only we set and clear while we live. */
		if (!(atomic_load_explicit(&e->pins, memory_order_relaxed) & bit))
			return NULL;
		return e;
	}
	if (s->live_ == RS_LIVE_EXCLUSIVE &&
	    atomic_load_explicit(&e->word, memory_order_relaxed) == s->pos_)
		return e;
	return NULL;
}

static void forget_cold(struct cistern *c, struct cistern_sample *s)
{
	buf_put(c->tier, (void *)(uintptr_t)s->data);
	s->data = NULL;
	s->live_ = 0;
}

static int tiered_release(struct cistern *c, struct cistern_sample *s)
{
	if (!is_cold(c, s))
		return c->policy->ops->release(c, s); /* as without a tier */
	struct cistern__cold_ent *e = held_entry(c, s);
	if (!e)
		return -EINVAL;
	uint32_t seen = atomic_load_explicit(&e->seen, memory_order_relaxed);
	if (s->live_ == RS_LIVE_PINNED) {
		cistern__cold_unpin(e, (unsigned)cistern__rs(c)->pin_bit);
	} else if (R(c)->reads_take && seen < c->fixed.pseudo_epochs) {
		/* Release [cold-unpin]: back to HELD, our reads before the next taker's. */
		atomic_store_explicit(
			&e->word,
			cistern__cold_word(CISTERN__COLD_HELD, 0, cistern__cold_gen(s->pos_)),
			memory_order_release);
		cistern__wake_readers(c);
	} else {
		cistern__count(&c->me->ctr.seen_hist[cistern__seen_bucket(seen)], 1);
		/* Release [cold-unpin]: our read is over before the slot can be claimed. */
		atomic_store_explicit(
			&e->word,
			cistern__cold_word(CISTERN__COLD_FREE, 0, cistern__cold_gen(s->pos_)),
			memory_order_release);
		atomic_fetch_sub_explicit(&T(c)->population, 1, memory_order_relaxed);
		cistern__wake_readers(c); /* end of data may have arrived */
	}
	forget_cold(c, s);
	cistern__wake_producers(c);
	return 0;
}

/*
 * A batch of n given back: its buffers are free, so the batch after the
 * next one is drawn ahead into them now, when the next batch was drawn for
 * n and no batch after it yet. Its reads then fly while the caller waits
 * for the tail of the next batch's, and the handle still holds at most two
 * batches of buffers: the next batch's and this one.
 */
static int tiered_release_batch(struct cistern *c, struct cistern_sample *s, size_t n)
{
	int first = 0;
	for (size_t i = 0; i < n; i++) {
		int r = tiered_release(c, &s[i]);
		if (r < 0 && first == 0)
			first = r;
	}
	struct cistern__tier *t = c->tier;
	if (t && t->ahead[t->next].n == n && !t->ahead[t->next ^ 1].n && !t->no_ahead &&
	    !R(c)->reads_take && !cistern__rs_closed(c))
		ahead_draw(c, &t->ahead[t->next ^ 1], n, &t->ahead[t->next]);
	return first;
}

/* A sample handed back unread: its seen count goes back too. */
static int tiered_unacquire_one(struct cistern *c, struct cistern_sample *s)
{
	if (!is_cold(c, s))
		return cistern__rs_unacquire(c, s);
	struct cistern__cold_ent *e = held_entry(c, s);
	if (!e)
		return -EINVAL;
	if (s->data)
		atomic_fetch_sub_explicit(&e->seen, 1, memory_order_relaxed);
	if (s->live_ == RS_LIVE_PINNED)
		cistern__cold_unpin(e, (unsigned)cistern__rs(c)->pin_bit);
	else
		/* Release [cold-unpin]: back to HELD, our reads before another's. */
		atomic_store_explicit(
			&e->word,
			cistern__cold_word(CISTERN__COLD_HELD, 0, cistern__cold_gen(s->pos_)),
			memory_order_release);
	if (s->data)
		cistern__count(&c->me->ctr.gets, (uint64_t)-1);
	forget_cold(c, s);
	cistern__wake_producers(c);
	cistern__wake_readers(c);
	return 0;
}

static int tiered_hand_back(struct cistern *c, struct cistern_sample *s)
{
	if (!is_cold(c, s))
		return cistern__rs_hand_back(c, s);
	bool counted = s->live_ == RS_LIVE_PINNED;
	int r = tiered_unacquire_one(c, s);
	if (r == 0 && counted)
		cistern__rate_give_back(c, 1);
	return r;
}

/* ---- end of data, population, reclaim ---------------------------------- */

static bool tiered_drained(struct cistern *c)
{
	if (!cistern__rs_drained(c))
		return false;
	/* Acquire, no edge: a hint, confirmed by the entries below once a count may be high. */
	if (atomic_load_explicit(&T(c)->population, memory_order_acquire) == 0)
		return true;
	/* [counts-unsure] acquire, as cistern__rs_drained(). */
	if (!atomic_load_explicit(&c->hdr->counts_unsure, memory_order_acquire))
		return false;
	struct cistern__cold_ent *E = ents(c);
	for (uint64_t j = 0; j < c->fixed.cold_slots; j++)
		if (cistern__cold_state(atomic_load_explicit(&E[j].word, memory_order_relaxed)) !=
		    CISTERN__COLD_FREE)
			return false;
	return true;
}

static uint64_t tiered_population(const struct cistern *c, const struct cistern_stats *st)
{
	struct cistern__tier_view v;
	tier_view(c, &v);
	return cistern__rs_population(c, st) + v.population;
}

/* Whether a dead spiller's note holds a run that fits the tier. */
static bool note_sane(const struct cistern *c, const struct cistern__spill_note *nt)
{
	return nt->n != 0 && nt->n <= CISTERN__SPILL_MAX && nt->cold < c->fixed.cold_slots &&
	       nt->n <= c->fixed.cold_slots - nt->cold;
}

/* Whether cold entry word ew is still the dead owner's claim: never published. */
static bool unwritten(uint64_t ew, uint32_t owner)
{
	return cistern__cold_state(ew) == CISTERN__COLD_WRITING && cistern__cold_owner(ew) == owner;
}

/*
 * The cold slot of a dead spiller's run that holds a published copy of
 * sample `id`, or UINT64_MAX. The spill stores an entry's id only after its
 * write completed, just before it publishes the entry, and a sample whose
 * hot copy is held is in no other cold slot. So an entry of the run with
 * that id that is no longer the dead owner's claim was published by it
 * (and may have been evicted since, which took the sample for good).
 */
static uint64_t published_in_run(const struct cistern *c, const struct cistern__spill_note *nt,
				 uint32_t owner, uint64_t id)
{
	for (uint32_t i = 0; i < nt->n; i++) {
		const struct cistern__cold_ent *e = &ents(c)[nt->cold + i];
		/* Acquire [cold-publish]: the entry's id with its word. */
		uint64_t ew = atomic_load_explicit(&e->word, memory_order_acquire);
		if (!unwritten(ew, owner) && e->id == id)
			return nt->cold + i;
	}
	return UINT64_MAX;
}

/*
 * Whether hot slot i holds a sample of a dead spiller's run whose cold copy
 * was published: EVICTING(owner), its id in the run. *hw gets the slot's
 * word, *cold the cold slot.
 */
static bool spilled_hot(const struct cistern *c, const struct cistern__spill_note *nt,
			uint32_t owner, uint64_t i, uint64_t *hw, uint64_t *cold)
{
	const struct cistern_slotmeta *m = cistern__slotmeta(c, i);
	/* Acquire, no edge: the owner is dead; its stores are all there is. */
	*hw = atomic_load_explicit(&m->word, memory_order_acquire);
	if (sw_state(*hw) != RS_EVICTING || sw_owner(*hw) != owner)
		return false;
	*cold = published_in_run(c, nt, owner, m->sample_id);
	return *cold != UINT64_MAX;
}

/*
 * Repair a dead spiller's run (docs/protocol/tiers.md, "Crashes"). A
 * sample whose cold copy was published while its hot slot is still
 * EVICTING(dead) is in both tiers: the hot copy goes (to RESERVED(dead),
 * which the reservoir's reclaim empties). A sample never published stays
 * hot (the reservoir's reclaim puts it back to HELD), and, once the run was
 * counted (live 2), its count in the cold population goes back. Runs
 * before the cold index's reclaim, which frees the unpublished entries.
 */
static void repair_spill(struct cistern *c, uint32_t owner)
{
	struct cistern__spill_note *nt = note_of(c, owner);
	/* Acquire [spill-note]: the fields stored before live. */
	uint64_t live = atomic_load_explicit(&nt->live, memory_order_acquire);
	if (!live)
		return;
	if (note_sane(c, nt)) {
		uint64_t left = 0;
		for (uint32_t i = 0; i < nt->n; i++)
			/* Relaxed: the owner is dead; its word is all there is. */
			left += unwritten(atomic_load_explicit(&ents(c)[nt->cold + i].word,
							       memory_order_relaxed),
					  owner);
		for (uint64_t i = 0; i < c->slot_count; i++) {
			uint64_t hw, cold;
			if (spilled_hot(c, nt, owner, i, &hw, &cold) &&
			    atomic_compare_exchange_strong_explicit(
				    &cistern__slotmeta(c, i)->word, &hw,
				    sw_make(sw_pos(hw), RS_RESERVED, owner), memory_order_seq_cst,
				    memory_order_relaxed))
				atomic_fetch_sub_explicit(&c->hdr->population, 1,
							  memory_order_relaxed);
		}
		/*
		 * The note first: a reclaimer that dies before the count leaves
		 * it high, and the next one does not take it back twice.
		 */
		if (live == 2) {
			atomic_store_explicit(&nt->live, 1, memory_order_relaxed);
			atomic_fetch_sub_explicit(&T(c)->population, left, memory_order_relaxed);
		}
	}
	atomic_store_explicit(&nt->live, 0, memory_order_relaxed);
}

/*
 * Under reads_take, a cold EVICTING(owner) is a sample the dead reader took
 * (a spill claims only free slots there): it goes back to HELD with its read
 * taken back (never below 0) and counts as a redelivery, as a hot ACQUIRED
 * one does. Counted before the CAS and undone if the CAS fails; a reclaimer
 * that dies in between leaves it to the next, which takes the read back
 * twice: one read more, never one fewer.
 */
static void give_back_takes(struct cistern *c, uint32_t owner)
{
	struct cistern__cold_ent *E = ents(c);
	_Atomic uint64_t *redelivered = &c->hdr->retired.redeliveries;
	for (uint64_t j = 0; j < c->fixed.cold_slots; j++) {
		struct cistern__cold_ent *e = &E[j];
		/* Relaxed: only state and owner are used; the CAS decides. */
		uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
		if (cistern__cold_state(w) != CISTERN__COLD_EVICTING ||
		    cistern__cold_owner(w) != owner)
			continue;
		atomic_fetch_add_explicit(redelivered, 1, memory_order_relaxed);
		uint32_t seen = atomic_load_explicit(&e->seen, memory_order_relaxed);
		bool lowered = false;
		while (seen > 0 && !(lowered = atomic_compare_exchange_weak_explicit(
					     &e->seen, &seen, seen - 1, memory_order_relaxed,
					     memory_order_relaxed)))
			;
		uint64_t held = cistern__cold_word(CISTERN__COLD_HELD, 0, cistern__cold_gen(w));
		/* Release [cold-unpin]: the read taken back before the next taker sees HELD. */
		if (!atomic_compare_exchange_strong_explicit(
			    &e->word, &w, held, memory_order_release, memory_order_relaxed)) {
			if (lowered)
				atomic_fetch_add_explicit(&e->seen, 1, memory_order_relaxed);
			atomic_fetch_sub_explicit(redelivered, 1, memory_order_relaxed);
		}
	}
}

static void tiered_reclaim(struct cistern *c, uint32_t owner)
{
	if (owner == 0 || owner > c->fixed.procs_count)
		return;
	repair_spill(c, owner);
	if (R(c)->reads_take)
		give_back_takes(c, owner);
	uint32_t bit = cistern__procs(c)[owner - 1].reader_bit;
	cistern__cold_reclaim(ents(c), c->fixed.cold_slots, owner, bit < 64 ? bit : 64);
	cistern__rs_reclaim(c, owner);
}

/* ---- dump and restore -------------------------------------------------- */

/*
 * Slots a dump reads, and a restore writes, in one submission: up to 64,
 * and no more than COLD_BATCH_BYTES of them (at least one), so that large
 * slots do not make a large buffer.
 */
#define COLD_BATCH 64u
#define COLD_BATCH_BYTES (8u << 20)

static unsigned batch_of(const struct cistern__cold *cold)
{
	unsigned n = COLD_BATCH_BYTES / cold->slot_bytes;
	return n == 0 ? 1 : n < COLD_BATCH ? n : COLD_BATCH;
}

/* Byte offset of cold entry j in the object. */
static uint64_t ent_off(const struct cistern *c, uint64_t j)
{
	return c->fixed.cold_off + sizeof(struct cistern__tier_shm) +
	       notes_bytes(c->fixed.procs_count) + j * sizeof(struct cistern__cold_ent);
}

/*
 * Copy n entries from j on into out: from the segment, or by pread() for a
 * copied handle, whose private copy stops before the tier.
 */
static int copy_ents(struct cistern *c, uint64_t j, uint64_t n, struct cistern__cold_ent *out)
{
	if (c->copied) {
		int r = cistern__pread_all(c->fd, out, n * sizeof(*out), ent_off(c, j));
		/* [dump-recheck]: the kernel's copy of the words before our reads of the slots. */
		cistern__load_fence();
		return r;
	}
	const struct cistern__cold_ent *E = ents(c) + j;
	for (uint64_t i = 0; i < n; i++) {
		/* Acquire [cold-publish]: a HELD word brings the entry's fields and the slot's bytes. */
		atomic_init(&out[i].word, atomic_load_explicit(&E[i].word, memory_order_acquire));
		atomic_init(&out[i].seen, atomic_load_explicit(&E[i].seen, memory_order_relaxed));
		out[i].id = E[i].id;
		out[i].len = E[i].len;
		out[i].crc = E[i].crc;
		memcpy(out[i].meta, E[i].meta, sizeof(out[i].meta));
	}
	return 0;
}

/* The words of n entries from j on as they are now, after the reads of their slots. */
static int words_now(struct cistern *c, uint64_t j, uint64_t n, uint64_t *now)
{
	/*
	 * [dump-recheck]: every read of a slot completed before this second look
	 * at its word, which a claim moves before the slot is written ([cold-pin]).
	 */
	cistern__load_fence();
	for (uint64_t i = 0; i < n; i++) {
		if (c->copied) {
			int r = cistern__pread_all(
				c->fd, &now[i], sizeof(now[i]),
				ent_off(c, j + i) + offsetof(struct cistern__cold_ent, word));
			if (r < 0)
				return r;
		} else {
			/* Relaxed: ordered after the reads by the fence above. */
			now[i] = atomic_load_explicit(&ents(c)[j + i].word, memory_order_relaxed);
		}
	}
	return 0;
}

/* Whether a word is a sample a dump saves: HELD; with dead_held, EVICTING(dead) too. */
static bool dumped_state(uint64_t w, bool dead_held)
{
	unsigned s = cistern__cold_state(w);
	return s == CISTERN__COLD_HELD || (dead_held && s == CISTERN__COLD_EVICTING);
}

static int by_slot(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/*
 * The cold slots whose sample is still hot too: published by a spiller
 * that died before it freed the hot slot, which repair_spill() frees at the
 * spiller's reclaim. For a segment nobody alive is attached to, the hot copy
 * counts and these do not: a dump saves the sample once, gc counts it once.
 * Into out (twice_cap(c) entries), sorted; how many.
 */
static size_t spilled_twice(const struct cistern *c, uint64_t *out)
{
	size_t n = 0;
	for (uint32_t owner = 1; owner <= c->fixed.procs_count; owner++) {
		const struct cistern__spill_note *nt = note_of(c, owner);
		/* Acquire [spill-note]: the fields stored before live (spill_reserve()). */
		if (!atomic_load_explicit(&nt->live, memory_order_acquire) || !note_sane(c, nt))
			continue;
		uint32_t found = 0;
		for (uint64_t i = 0; i < c->slot_count && found < nt->n; i++) {
			uint64_t hw, cold;
			if (spilled_hot(c, nt, owner, i, &hw, &cold)) {
				out[n++] = cold;
				found++;
			}
		}
	}
	qsort(out, n, sizeof(*out), by_slot);
	return n;
}

/* Room for spilled_twice(): every attachment's whole run. */
static size_t twice_cap(const struct cistern *c)
{
	return (size_t)c->fixed.procs_count * CISTERN__SPILL_MAX + 1;
}

static bool in_slots(const uint64_t *v, size_t n, uint64_t j)
{
	return n && bsearch(&j, v, n, sizeof(*v), by_slot) != NULL;
}

static int tiered_dump(struct cistern *c, bool dead_held, cistern__cold_fn fn, void *arg,
		       uint64_t *skipped)
{
	const struct cistern_fixed *f = &c->fixed;
	struct cistern__cold cold;
	int r = cistern__cold_open_read(&cold, f->cold_dir, f->name, f->cold_nonce);
	if (r < 0)
		return r;
	const unsigned batch = batch_of(&cold);
	struct cistern__cold_ent *snap = calloc(batch, sizeof(*snap));
	struct cistern__io *io = calloc(batch, sizeof(*io));
	uint64_t *now = calloc(batch, sizeof(*now));
	uint8_t *buf = cistern__cold_alloc(&cold, batch);
	/* A handle of gc's own (mapped): the samples a dead spiller left in both tiers. */
	uint64_t *twice = dead_held ? calloc(twice_cap(c), sizeof(*twice)) : NULL;
	size_t ntwice = 0;
	if (!snap || !io || !now || !buf || (dead_held && !twice))
		r = -ENOMEM;
	else if (dead_held && !c->copied)
		ntwice = spilled_twice(c, twice);
	for (uint64_t j0 = 0; r == 0 && j0 < f->cold_slots; j0 += batch) {
		uint64_t k = f->cold_slots - j0 < batch ? f->cold_slots - j0 : batch;
		if ((r = copy_ents(c, j0, k, snap)) < 0)
			break;
		/* One read for each run of wanted slots: they lie back to back in buf too. */
		unsigned q = 0;
		for (uint64_t i = 0; i < k;) {
			uint64_t w = atomic_load_explicit(&snap[i].word, memory_order_relaxed);
			if (!dumped_state(w, dead_held) || snap[i].len > cold.slot_bytes) {
				i++;
				continue;
			}
			uint64_t e = i + 1;
			while (e < k &&
			       dumped_state(
				       atomic_load_explicit(&snap[e].word, memory_order_relaxed),
				       dead_held) &&
			       snap[e].len <= cold.slot_bytes)
				e++;
			cistern__cold_prep(&cold, &io[q++], j0 + i, (uint32_t)(e - i),
					   buf + i * cold.slot_bytes, false);
			i = e;
		}
		if (q == 0)
			continue;
		if ((r = cistern__uring_run(io, q)) < 0 || (r = words_now(c, j0, k, now)) < 0)
			break;
		for (uint64_t i = 0; i < k && r == 0; i++) {
			uint64_t w = atomic_load_explicit(&snap[i].word, memory_order_relaxed);
			if (!dumped_state(w, dead_held) || snap[i].len > cold.slot_bytes)
				continue;
			if (in_slots(twice, ntwice, j0 + i))
				continue; /* the dump has its hot copy */
			/* Moved while read: its bytes may be another sample's, or torn. */
			if (now[i] != w) {
				(*skipped)++;
				continue;
			}
			const uint8_t *p = buf + i * cold.slot_bytes;
			/* Unmoved and wrong: the disk gave back other bytes than were written. */
			if (cistern__crc32c(0, p, snap[i].len) != snap[i].crc) {
				r = -EIO;
				break;
			}
			struct cistern__cold_sample s = {
				.id = snap[i].id,
				.len = snap[i].len,
				.seen = atomic_load_explicit(&snap[i].seen, memory_order_relaxed),
				.slot = j0 + i,
				.data = p,
			};
			memcpy(s.meta, snap[i].meta, sizeof(s.meta));
			/* A dead taker's read goes back at its reclaim (give_back_takes()). */
			if (dead_held && R(c)->reads_take && s.seen > 0 &&
			    cistern__cold_state(w) == CISTERN__COLD_EVICTING)
				s.seen--;
			r = fn(&s, arg);
		}
	}
	free(snap);
	free(io);
	free(now);
	free(buf);
	free(twice);
	cistern__cold_close(&cold);
	return r;
}

/* Write the staged slots of a restore, then publish their entries. */
static int restore_flush(struct cistern *c, struct cistern__tier *t)
{
	if (t->rfill == 0)
		return 0;
	struct cistern__io io;
	cistern__cold_prep(&t->cold, &io, t->rfirst, t->rfill, t->rbuf, true);
	int r = cistern__cold_run(&T(c)->io, &io, 1);
	if (r < 0)
		return r;
	struct cistern__cold_ent *E = ents(c);
	for (unsigned i = 0; i < t->rfill; i++) {
		struct cistern__cold_ent *e = &E[t->rfirst + i];
		/* Release [cold-publish]: the write completed and the fields are stored. */
		atomic_store_explicit(&e->word, cistern__cold_word(CISTERN__COLD_HELD, 0, 1),
				      memory_order_release);
	}
	t->restored += t->rfill;
	t->rfill = 0;
	return 0;
}

static int tiered_restore_put(struct cistern *c, const struct cistern__cold_sample *s)
{
	struct cistern__tier *t = c->tier;
	if (!t || !t->open || s->slot >= c->fixed.cold_slots || s->len > t->cold.slot_bytes)
		return -EINVAL;
	if (!t->rbuf && !(t->rbuf = cistern__cold_alloc(&t->cold, batch_of(&t->cold))))
		return -ENOMEM;
	int r = 0;
	if (t->rfill && (t->rfill == batch_of(&t->cold) || s->slot != t->rfirst + t->rfill))
		r = restore_flush(c, t);
	if (r < 0)
		return r;
	if (t->rfill == 0)
		t->rfirst = s->slot;
	uint8_t *p = (uint8_t *)t->rbuf + (size_t)t->rfill * t->cold.slot_bytes;
	memcpy(p, s->data, s->len);
	memset(p + s->len, 0, t->cold.slot_bytes - s->len);
	/* The entry stays FREE until its slot is written: nobody reads these fields before. */
	struct cistern__cold_ent *e = &ents(c)[s->slot];
	e->id = s->id;
	e->len = s->len;
	e->crc = cistern__crc32c(0, s->data, s->len);
	/* Relaxed [cold-verified]: the entry is FREE; its publish comes later. */
	atomic_store_explicit(&e->verified, 0, memory_order_relaxed);
	memcpy(e->meta, s->meta, sizeof(e->meta));
	atomic_store_explicit(&e->seen, s->seen, memory_order_relaxed);
	t->rfill++;
	return 0;
}

static int tiered_restore_end(struct cistern *c, const struct cistern__tier_counts *n)
{
	struct cistern__tier *t = c->tier;
	if (!t || !t->open)
		return -EINVAL;
	int r = restore_flush(c, t);
	if (r < 0)
		return r;
	struct cistern__tier_shm *ts = T(c);
	/* Relaxed: nobody else has the segment yet (it appears by a rename). */
	atomic_store_explicit(&ts->population, t->restored, memory_order_relaxed);
	/*
	 * The samples keep their slots, and the cursor goes where the spills
	 * left it: an in-order claim (fifo-evict-reservoir) moves it past one
	 * slot a spill, so the next spill takes the slot after the newest cold
	 * sample, and the cold file keeps the order of the puts.
	 */
	atomic_store_explicit(&ts->cursor, n->spilled, memory_order_relaxed);
	atomic_store_explicit(&ts->spilled, n->spilled, memory_order_relaxed);
	atomic_store_explicit(&ts->cold_reads, n->cold_reads, memory_order_relaxed);
	atomic_store_explicit(&ts->cold_evictions, n->cold_evictions, memory_order_relaxed);
	free(t->rbuf);
	t->rbuf = NULL;
	return 0;
}

static int tiered_rename(struct cistern *c, const char *dir, const char *from, const char *to)
{
	struct cistern__tier *t = c->tier;
	return t ? cistern__tier_rename(&t->cold, t->open, dir, from, to) : -EINVAL;
}

static void tiered_counts(const struct cistern *c, struct cistern__tier_counts *n)
{
	struct cistern__tier_view v;
	tier_view(c, &v);
	n->spilled = v.spilled;
	n->cold_reads = v.cold_reads;
	n->cold_evictions = v.cold_evictions;
}

static uint64_t tiered_unread(const struct cistern *c)
{
	const struct cistern__cold_ent *E = ents(c);
	uint64_t n = 0;
	/* A sample a dead spiller left in both tiers counts once, as its hot copy. */
	uint64_t *twice = calloc(twice_cap(c), sizeof(*twice));
	size_t ntwice = twice ? spilled_twice(c, twice) : 0;
	for (uint64_t j = 0; j < c->fixed.cold_slots; j++) {
		if (in_slots(twice, ntwice, j))
			continue;
		/* Relaxed: a count; the caller holds the gc lock and nobody alive is attached. */
		uint64_t w = atomic_load_explicit(&E[j].word, memory_order_relaxed);
		uint32_t seen = atomic_load_explicit(&E[j].seen, memory_order_relaxed);
		/* A dead taker's read goes back at its reclaim (give_back_takes()). */
		if (R(c)->reads_take && seen > 0 &&
		    cistern__cold_state(w) == CISTERN__COLD_EVICTING)
			seen--;
		n += dumped_state(w, true) && seen == 0;
	}
	free(twice);
	return n;
}

static const struct cistern_ops tiered_ops = {
	.init = cistern__rs_init,
	.try_reserve = tiered_try_reserve,
	.commit = cistern__rs_commit,
	.abort = cistern__rs_abort,
	.try_acquire = tiered_try_acquire,
	.release = tiered_release,
	.release_batch = tiered_release_batch,
	.unacquire = tiered_hand_back,
	.try_acquire_batch = tiered_try_acquire_batch,
	.drained = tiered_drained,
	.reclaim = tiered_reclaim,
	.population = tiered_population,
};

const struct cistern__tiering cistern__rs_tiering = {
	.ops = &tiered_ops,
	.area_bytes = tier_bytes,
	.config_problem = cistern__tier_config_problem,
	.create = tier_create,
	.release = tier_release,
	.unlink = cistern__tier_unlink,
	.view = tier_view,
	.dump = tiered_dump,
	.restore_put = tiered_restore_put,
	.restore_end = tiered_restore_end,
	.rename = tiered_rename,
	.counts = tiered_counts,
	.unread = tiered_unread,
};
