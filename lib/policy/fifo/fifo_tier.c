/* SPDX-License-Identifier: MIT */
/*
 * fifo_tier.c - the FIFO's cold tier: a second ring, on disk, after the hot
 * ring (docs/protocol/tiers.md, "The FIFO's spill ring").
 *
 * The queue is the hot ring followed by the cold ring. One word of the
 * tier's area, the mode word, says where puts go: HOT, or COLD with the
 * cold ring's tail. A put that finds the hot ring full turns the mode to
 * COLD; from then on every put goes to the cold ring, until the cold ring
 * has drained and a producer turns the mode back to HOT. A hot claim made
 * under HOT counts only if the mode word has not moved when the claim is
 * done; else it turns into a SKIP and the put goes again. So every hot
 * sample that counts comes before every cold sample, and a reader takes
 * the hot ring first, then, once the hot ring holds nothing that counts,
 * the cold ring, in order.
 *
 * The cold ring's entries (tier/cold.h's 64-byte entries) keep the FIFO's
 * slot states, with the low 32 bits of the position in the generation
 * field: FREE(p) -> WRITING(p, o) -> STAGED(p) -> [COMMITTED(p)] ->
 * ACQUIRED(p, o) -> FREE(p + N), and SKIP and REDELIVER as in the hot
 * ring. A cold put writes its sample into the staging run of its group
 * of slots, in the segment, and publishes STAGED without I/O. The put
 * that finds its group's puts all done starts the group's O_DIRECT write
 * through its process's io_uring and returns without waiting for it; its
 * later calls collect the completion, and then the STAGED entries turn
 * COMMITTED and the run is free. A reader copies a STAGED sample from
 * its run while the run holds its group. A cold read of COMMITTED samples reads its slot and
 * the next committed slots after it in one read, and takes them from
 * that buffer while their entries still name the same position.
 *
 * A cold sample handed to a reader has index_ = slot_count + its cold slot
 * and data in a buffer of the reader's own, freed at release.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "policy/fifo/fifo_tier.h"
#include "policy/fifo/fifo.h"
#include "core/open.h"
#include "core/ring.h"
#include "sys/crc32c.h"
#include "sys/fence.h"
#include "tier/tier.h"

/* Bytes read ahead at most by one cold read (a whole slot at least). */
#define READ_AHEAD_BYTES (1u << 20)
/* Looks again at a mode word that moved, before a put answers -EAGAIN. */
#define MODE_ROUNDS 64
/* Slots of one group of the staging area at most (and of one read ahead). */
#define RUN_SLOTS 32u
/* Staging runs at most: groups staged in memory at once. */
#define STAGE_RUNS 4u
/* A cold entry's state, besides fifo.h's: committed, its bytes in a staging run only. */
#define FIFO_STAGED 6u
/* A staging run word's states (bits 32-33); bits 0-31 the group's first position. */
enum { RUN_FREE = 0, RUN_HELD = 1, RUN_WRITING = 2 };
/*
 * A counter on the run words' line, after the words (a statistic,
 * relaxed): the times a put waited for a group's write.
 */
enum { CTR_WRITE_WAITS = STAGE_RUNS };
_Static_assert(STAGE_RUNS + 1 <= 8, "the counter fits the run words' line");

/*
 * A run of cold slots read ahead: the bytes of positions pos .. pos + n - 1,
 * read from the file after their entries were found COMMITTED.
 */
struct ra_run {
	void *buf;
	uint64_t *word; /* the COMMITTED word of each when the read started */
	uint64_t pos;
	unsigned n, cap;
	bool in_flight; /* started, not waited for: wait before buf is reused or freed */
	struct cistern__io io;
	struct cistern__io_batch batch;
};

/*
 * A group's write this handle started and has not collected yet: one a
 * staging run at most (the run stays WRITING(me) until it is collected).
 */
struct stage_write {
	struct cistern__io io;
	struct cistern__io_batch batch;
	uint64_t y0;   /* the group's first position */
	uint64_t word; /* the run word WRITING(me) of the group */
	uint32_t cnt;  /* the group's slots */
	bool busy;
};

/* The handle's side: the open cold file, a spare staging slot, the read ahead. */
struct fifo_tier {
	struct cistern__cold cold;
	bool open;
	void *stage; /* a spare staging slot for a cold put */
	/* The run the reader takes from now, and the one after it, in flight. */
	struct ra_run ra[2];
	unsigned cur;
	uint64_t restored; /* a restore: cold samples put so far, at positions 0, 1, ... */
	/* Group writes in flight, by staging run, and how many. */
	struct stage_write sw[STAGE_RUNS];
	unsigned writes;
};

/* ---- the area in the segment -------------------------------------------- */

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* Slots one group covers: 1 MiB at most, 1 to RUN_SLOTS slots, and no more than the ring. */
static uint64_t group_slots(uint64_t cold_slots, uint64_t sb)
{
	uint64_t s = READ_AHEAD_BYTES / sb;
	s = s < 1 ? 1 : s > RUN_SLOTS ? RUN_SLOTS : s;
	return s < cold_slots ? s : cold_slots;
}

/* Staging runs: STAGE_RUNS, or fewer if the ring has fewer groups. */
static uint64_t stage_runs(uint64_t cold_slots, uint64_t gs)
{
	uint64_t groups = (cold_slots + gs - 1) / gs;
	return groups < STAGE_RUNS ? groups : STAGE_RUNS;
}

static uint64_t area_bytes(uint64_t cold_slots, uint64_t procs)
{
	(void)procs;
	if (cold_slots == 0)
		return 0;
	/* The header, the entries, then one line of run words. */
	return align_up(sizeof(struct cistern__fifo_tier_shm) +
				cold_slots * sizeof(struct cistern__cold_ent) + 64,
			4096);
}

static uint64_t stage_bytes(uint64_t cold_slots, uint64_t slot_size)
{
	if (cold_slots == 0)
		return 0;
	uint64_t sb = cistern__cold_slot_bytes(slot_size);
	uint64_t gs = group_slots(cold_slots, sb);
	return stage_runs(cold_slots, gs) * gs * sb;
}

static struct cistern__fifo_tier_shm *TS(const struct cistern *c)
{
	return (struct cistern__fifo_tier_shm *)((char *)c->hdr + c->fixed.cold_off);
}

static struct cistern__cold_ent *ents(const struct cistern *c)
{
	return (struct cistern__cold_ent *)((char *)TS(c) + sizeof(struct cistern__fifo_tier_shm));
}

/* The staging runs' words, on the line after the entries. */
static _Atomic uint64_t *runs(const struct cistern *c)
{
	return (_Atomic uint64_t *)(void *)((char *)ents(c) +
					    c->fixed.cold_slots * sizeof(struct cistern__cold_ent));
}

static struct fifo_tier *FT(const struct cistern *c)
{
	/* c->tier is the tier's opaque handle side: the FIFO's is this struct. */
	return (struct fifo_tier *)(void *)c->tier;
}

/* A cold entry's word: a FIFO state, an owner and the low 32 bits of the position. */
static uint64_t cw(unsigned state, uint32_t owner, uint64_t pos)
{
	return cistern__cold_word(state, owner, (uint32_t)pos);
}

/* How many positions the word is ahead of position p (mod 2^32): 0 = it serves p. */
static int32_t cw_lap(uint64_t w, uint64_t p)
{
	return (int32_t)(cistern__cold_gen(w) - (uint32_t)p);
}

static uint64_t mode_tail(uint64_t m)
{
	return m & ~CISTERN__FIFO_MODE_COLD;
}

size_t cistern__fifo_tier_ahead(const struct cistern *c, uint64_t *first)
{
	const struct fifo_tier *t = FT(c);
	if (!t)
		return 0;
	const struct ra_run *b = &t->ra[!t->cur];
	*first = b->pos;
	return b->n;
}

void cistern__fifo_tier_peek(const struct cistern *c, uint64_t *mode, uint64_t *chead)
{
	*mode = atomic_load_explicit(&TS(c)->mode, memory_order_relaxed);
	*chead = atomic_load_explicit(&TS(c)->chead, memory_order_relaxed);
}

/* ---- create, open, remove --------------------------------------------- */

static int tier_create(struct cistern *c)
{
	const struct cistern_fixed *f = &c->fixed;
	struct fifo_tier *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	int r = cistern__tier_file_create(&t->cold, &t->open, f);
	if (r < 0) {
		free(t);
		return r;
	}
	c->tier = (struct cistern__tier *)(void *)t;
	return 0;
}

/* The handle's cold file, opened on first use. */
static int tier_get(struct cistern *c, struct fifo_tier **out)
{
	const struct cistern_fixed *f = &c->fixed;
	struct fifo_tier *t = FT(c);
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return -ENOMEM;
		c->tier = (struct cistern__tier *)(void *)t;
	}
	int r = cistern__tier_file_open(&t->cold, &t->open, f);
	if (r < 0)
		return r;
	*out = t;
	return 0;
}

static void tier_release(struct cistern *c)
{
	struct fifo_tier *t = FT(c);
	if (!t)
		return;
	/*
	 * A write in flight reads from the staging run and names our io: wait
	 * for it (a detach that reclaimed our entry did already). A fork()
	 * child's copy leaves its parent's writes alone.
	 */
	if (!c->inherited && t->writes)
		(void)cistern__fifo_tier_settle(c);
	cistern__tier_file_close(&t->cold, &t->open);
	free(t->stage);
	for (int i = 0; i < 2; i++) {
		struct ra_run *a = &t->ra[i];
		/*
		 * A read in flight writes into buf until it is waited for; a fork()
		 * child's copy does not wait (the read is its parent's), nor frees.
		 */
		bool leak = a->in_flight &&
			    (c->inherited ||
			     (cistern__cold_wait(&TS(c)->io, &a->batch) < 0 && a->batch.pending));
		if (!leak)
			free(a->buf);
		free(a->word);
	}
	free(t);
	c->tier = NULL;
}

/* ---- the staging area ----------------------------------------------------- */

void (*cistern__fifo_stage_hook)(void);

/* The staging geometry: bytes of a cold slot, slots of a group, staging runs. */
struct geo {
	uint64_t sb, gs, nr;
};

static struct geo geo_of(const struct cistern *c)
{
	struct geo g;
	g.sb = cistern__cold_slot_bytes(c->fixed.slot_size);
	g.gs = group_slots(c->fixed.cold_slots, g.sb);
	g.nr = stage_runs(c->fixed.cold_slots, g.gs);
	return g;
}

/* The word of the staging run that holds the group of cold slot j. */
static _Atomic uint64_t *run_of(const struct cistern *c, const struct geo *g, uint64_t j)
{
	return &runs(c)[(j / g->gs) % g->nr];
}

/* Cold slot j's bytes in the staging run of its group. */
static uint8_t *stage_slot(const struct cistern *c, const struct geo *g, uint64_t j)
{
	uint8_t *base = (uint8_t *)TS(c) + area_bytes(c->fixed.cold_slots, 0);
	return base + (((j / g->gs) % g->nr) * g->gs + j % g->gs) * g->sb;
}

/* A run word: a state, the writer, the low 32 bits of its group's first position. */
static uint64_t run_word(unsigned state, uint32_t owner, uint32_t y0)
{
	return (uint64_t)y0 | (uint64_t)state << 32 | (uint64_t)(owner & 0xffffff) << 40;
}

static uint32_t run_gen(uint64_t w)
{
	return (uint32_t)w;
}

static unsigned run_state(uint64_t w)
{
	return (unsigned)(w >> 32) & 3;
}

static uint32_t run_owner(uint64_t w)
{
	return (uint32_t)(w >> 40);
}

static void tier_view(const struct cistern *c, struct cistern__tier_view *v)
{
	memset(v, 0, sizeof(*v));
	if (c->fixed.cold_slots == 0)
		return;
	struct cistern__fifo_tier_shm ts;
	memset(&ts, 0, sizeof(ts));
	if (c->copied) {
		/* A copied read-only handle's private copy stops before the tier (segment.c). */
		if (cistern__pread_all(c->fd, &ts, sizeof(ts), c->fixed.cold_off) < 0)
			memset(&ts, 0, sizeof(ts));
	} else {
		const struct cistern__fifo_tier_shm *s = TS(c);
		/* Relaxed: statistics, read one by one. */
		atomic_init(&ts.mode, atomic_load_explicit(&s->mode, memory_order_relaxed));
		atomic_init(&ts.chead, atomic_load_explicit(&s->chead, memory_order_relaxed));
		atomic_init(&ts.spilled, atomic_load_explicit(&s->spilled, memory_order_relaxed));
		atomic_init(&ts.cold_reads,
			    atomic_load_explicit(&s->cold_reads, memory_order_relaxed));
		atomic_init(&ts.io.bytes_written,
			    atomic_load_explicit(&s->io.bytes_written, memory_order_relaxed));
		atomic_init(&ts.io.bytes_read,
			    atomic_load_explicit(&s->io.bytes_read, memory_order_relaxed));
		atomic_init(&ts.io.write_wait_ns,
			    atomic_load_explicit(&s->io.write_wait_ns, memory_order_relaxed));
		atomic_init(&ts.io.read_wait_ns,
			    atomic_load_explicit(&s->io.read_wait_ns, memory_order_relaxed));
	}
	/* A plain copy now: nobody else sees it. */
	uint64_t tail = mode_tail(atomic_load_explicit(&ts.mode, memory_order_relaxed));
	uint64_t head = atomic_load_explicit(&ts.chead, memory_order_relaxed);
	v->slots = c->fixed.cold_slots;
	v->population = tail > head ? tail - head : 0;
	v->spilled = atomic_load_explicit(&ts.spilled, memory_order_relaxed);
	v->cold_reads = atomic_load_explicit(&ts.cold_reads, memory_order_relaxed);
	v->bytes_written = atomic_load_explicit(&ts.io.bytes_written, memory_order_relaxed);
	v->bytes_read = atomic_load_explicit(&ts.io.bytes_read, memory_order_relaxed);
	v->write_wait_ns = atomic_load_explicit(&ts.io.write_wait_ns, memory_order_relaxed);
	v->read_wait_ns = atomic_load_explicit(&ts.io.read_wait_ns, memory_order_relaxed);
	uint64_t sb = cistern__cold_slot_bytes(c->fixed.slot_size);
	v->disk_bytes = CISTERN__COLD_BLOCK + sb * c->fixed.cold_slots;
	/* The run words' line: the runs' states, then the counters. */
	uint64_t line[8];
	memset(line, 0, sizeof(line));
	if (c->copied) {
		uint64_t off = c->fixed.cold_off + sizeof(struct cistern__fifo_tier_shm) +
			       c->fixed.cold_slots * sizeof(struct cistern__cold_ent);
		if (cistern__pread_all(c->fd, line, sizeof(line), off) < 0)
			memset(line, 0, sizeof(line));
	} else {
		/* Relaxed: statistics, read one by one. */
		for (unsigned k = 0; k < 8; k++)
			line[k] = atomic_load_explicit(&runs(c)[k], memory_order_relaxed);
	}
	struct geo g = geo_of(c);
	v->stage_bytes = stage_bytes(c->fixed.cold_slots, c->fixed.slot_size);
	for (unsigned r = 0; r < g.nr; r++) {
		v->groups_staged += run_state(line[r]) == RUN_HELD;
		v->groups_writing += run_state(line[r]) == RUN_WRITING;
	}
	v->write_waits = line[CTR_WRITE_WAITS];
}

/* The low 32 bits of the first position of y's group (slot j = y % N). */
static uint32_t group_gen(const struct geo *g, uint64_t j, uint64_t y)
{
	return (uint32_t)(y - j % g->gs);
}

static _Atomic uint64_t *stage_ctr(const struct cistern *c, unsigned k)
{
	return &runs(c)[k];
}

/* Staging run r of the handle's writes in flight, if the run's word w is that write's. */
static struct stage_write *own_write(struct cistern *c, struct fifo_tier *t, unsigned r, uint64_t w)
{
	struct stage_write *s = &t->sw[r];
	return !c->inherited && s->busy && s->word == w ? s : NULL;
}

/*
 * The end of group write s of staging run r, whose result is res: its
 * STAGED entries turn COMMITTED and the run FREE; on an error the run goes
 * back to HELD (the group stays staged; the next put that needs the run
 * writes it again). Either wakes waiting producers.
 */
static void stage_write_end(struct cistern *c, struct fifo_tier *t, unsigned r, int res)
{
	struct stage_write *s = &t->sw[r];
	_Atomic uint64_t *rw = &runs(c)[r];
	uint64_t n = c->fixed.cold_slots;
	struct cistern__cold_ent *E = ents(c) + s->y0 % n;
	uint64_t w = s->word;
	s->busy = false;
	t->writes--;
	if (res < 0) {
		/* [stage-hold] release: the group stays staged; readers read it there. */
		atomic_compare_exchange_strong_explicit(rw, &w,
							run_word(RUN_HELD, 0, run_gen(s->word)),
							memory_order_release, memory_order_relaxed);
		cistern__wake_producers(c);
		return;
	}
	for (uint64_t i = 0; i < s->cnt; i++) {
		uint64_t ew = cw(FIFO_STAGED, 0, s->y0 + i);
		/*
		 * [cold-publish] release: the write completed before COMMITTED;
		 * a read ahead that finds COMMITTED reads the disk.
		 */
		atomic_compare_exchange_strong_explicit(&E[i].word, &ew,
							cw(FIFO_COMMITTED, 0, s->y0 + i),
							memory_order_release, memory_order_relaxed);
	}
	/*
	 * [stage-hold] release: the group is on disk before the run is free;
	 * the next group's holder writes into it after its acquire of FREE.
	 * FREE keeps y0: a copy that started under y0 still finds the bytes it
	 * copied unchanged. The CAS fails if a reclaim took the run back
	 * (the owner's own detach): the group is then written again.
	 */
	if (atomic_compare_exchange_strong_explicit(rw, &w, run_word(RUN_FREE, 0, run_gen(w)),
						    memory_order_release, memory_order_relaxed))
		cistern__wake_producers(c);
}

/* Collect the handle's group writes that completed, without waiting. */
static void stage_reap(struct cistern *c, struct fifo_tier *t)
{
	if (!t || t->writes == 0 || c->inherited)
		return;
	for (unsigned r = 0; r < STAGE_RUNS; r++) {
		if (!t->sw[r].busy)
			continue;
		int res = cistern__cold_poll(&TS(c)->io, &t->sw[r].batch);
		if (res != -EINPROGRESS)
			stage_write_end(c, t, r, res);
	}
}

/* Wait for the handle's group write of run r and collect it: 0 or its -errno. */
static int stage_settle_one(struct cistern *c, struct fifo_tier *t, unsigned r)
{
	int res = cistern__cold_poll(&TS(c)->io, &t->sw[r].batch);
	if (res == -EINPROGRESS)
		res = cistern__cold_wait(&TS(c)->io, &t->sw[r].batch);
	stage_write_end(c, t, r, res);
	return res;
}

int cistern__fifo_tier_settle(struct cistern *c)
{
	struct fifo_tier *t = FT(c);
	int err = 0;
	if (!t || c->inherited)
		return 0;
	for (unsigned r = 0; r < STAGE_RUNS; r++) {
		if (!t->sw[r].busy)
			continue;
		int res = stage_settle_one(c, t, r);
		if (res < 0 && err == 0)
			err = res;
	}
	return err;
}

/*
 * Start the write of the group that run word w = HELD(y0) stages, once
 * each of its puts is done, and return without waiting for it; x is a
 * position at or after y0 (the caller's), from which y0 is found in full.
 * 0 (the write is in flight, or the group left and the run is free, or
 * someone else moved the run: look at it again), -EAGAIN if a put of the
 * group is not done, or the -errno of the start (the group stays staged).
 * A group whose samples all left skips the write.
 */
static int stage_flush(struct cistern *c, struct fifo_tier *t, const struct geo *g,
		       _Atomic uint64_t *rw, uint64_t w, uint64_t x)
{
	uint64_t n = c->fixed.cold_slots;
	uint64_t y0 = x - (uint32_t)((uint32_t)x - run_gen(w));
	uint64_t j0 = y0 % n;
	if (j0 % g->gs != 0 || run_of(c, g, j0) != rw)
		return -EPROTO;
	uint64_t cnt = n - j0 < g->gs ? n - j0 : g->gs;
	struct cistern__cold_ent *E = ents(c) + j0;
	bool need = false;
	/* From the last slot back: while puts go on, the last one is the first not done. */
	for (uint64_t i = cnt; i-- > 0;) {
		/* [cold-publish] acquire: a STAGED entry's bytes are in the run. */
		uint64_t ew = atomic_load_explicit(&E[i].word, memory_order_acquire);
		int32_t d = cw_lap(ew, y0 + i);
		unsigned st = cistern__cold_state(ew);
		if (d < 0 || (d == 0 && (st == FIFO_FREE || st == FIFO_RESERVED)))
			return -EAGAIN; /* a put of the group is still writing its bytes */
		/* Taken or handed back: its reader may die, and the next one reads the disk. */
		if (d == 0 && st != FIFO_SKIP && st != FIFO_COMMITTED)
			need = true;
	}
	if (!need) {
		/*
		 * [stage-hold] release: every sample of the group left before the
		 * run is free. FREE keeps y0, as after a write.
		 */
		if (atomic_compare_exchange_strong_explicit(
			    rw, &w, run_word(RUN_FREE, 0, run_gen(w)), memory_order_release,
			    memory_order_relaxed))
			cistern__wake_producers(c);
		return 0;
	}
	unsigned r = (unsigned)(rw - runs(c));
	uint64_t mine = run_word(RUN_WRITING, c->owner, run_gen(w));
	/* [stage-hold] acq_rel: the run is ours to write; a dead writer's goes back to HELD. */
	if (!atomic_compare_exchange_strong_explicit(rw, &w, mine, memory_order_acq_rel,
						     memory_order_relaxed))
		return 0;
	struct stage_write *s = &t->sw[r];
	cistern__cold_prep(&t->cold, &s->io, j0, (uint32_t)cnt, stage_slot(c, g, j0), true);
	int res = cistern__uring_start(&s->batch, &s->io, 1);
	if (res < 0) {
		/* No ring: nothing in flight. [stage-hold] release: the group stays staged. */
		atomic_store_explicit(rw, w, memory_order_release);
		return res;
	}
	s->y0 = y0;
	s->word = mine;
	s->cnt = (uint32_t)cnt;
	s->busy = true;
	t->writes++;
	if (cistern__fifo_stage_hook)
		cistern__fifo_stage_hook();
	return 0;
}

/*
 * After a cold put of position x was published (or aborted): start its
 * group's write if every put of the group is done, so that the disk works
 * while the producer goes on. Nothing happens if a put of the group is
 * still going (the last one to finish starts it) or the run moved on.
 */
static void stage_behind(struct cistern *c, uint64_t x)
{
	struct fifo_tier *t = FT(c);
	if (!t || !t->open || c->inherited)
		return;
	struct geo g = geo_of(c);
	uint64_t j = x % c->fixed.cold_slots;
	_Atomic uint64_t *rw = run_of(c, &g, j);
	/*
	 * [stage-done] full fence: our publish before our looks at the group's
	 * other entries; pairs with the same fence of the group's other puts.
	 * Of two puts that finish last together, one sees the other's publish.
	 */
	cistern__full_fence();
	/* [stage-hold] acquire, as stage_hold(). */
	uint64_t w = atomic_load_explicit(rw, memory_order_acquire);
	if (run_state(w) != RUN_HELD || run_gen(w) != group_gen(&g, j, x))
		return;
	/* A failed start leaves the group staged: the put that needs its run tries again. */
	(void)stage_flush(c, t, &g, rw, w, x);
}

/*
 * Make the staging run of cold position x's group hold that group, before
 * x is claimed: 0; -ESTALE if x is behind (the group moved on: look at the
 * mode again); -EAGAIN if the run holds an older group not yet writable
 * (a put of it is still writing) or being written by another process; the
 * -errno of our write of an older group; another -errno. An older group
 * whose write is ours in flight: we wait for it here.
 */
static int stage_hold(struct cistern *c, struct fifo_tier *t, uint64_t x)
{
	struct geo g = geo_of(c);
	uint64_t j = x % c->fixed.cold_slots;
	uint32_t y0 = group_gen(&g, j, x);
	_Atomic uint64_t *rw = run_of(c, &g, j);
	unsigned ri = (unsigned)(rw - runs(c));
	for (;;) {
		/* [stage-hold] acquire: the older group is on disk, or left, before we reuse the run. */
		uint64_t w = atomic_load_explicit(rw, memory_order_acquire);
		int32_t d = (int32_t)(y0 - run_gen(w));
		unsigned st = run_state(w);
		if (d < 0 || (d == 0 && st != RUN_HELD))
			return -ESTALE;
		if (d == 0)
			break;
		if (st == RUN_WRITING) {
			struct stage_write *s = own_write(c, t, ri, w);
			int res = s ? cistern__cold_poll(&TS(c)->io, &s->batch) : -EINPROGRESS;
			if (res == -EINPROGRESS) {
				/* Relaxed: a statistic. */
				atomic_fetch_add_explicit(stage_ctr(c, CTR_WRITE_WAITS), 1,
							  memory_order_relaxed);
				if (!s)
					return -EAGAIN; /* another's: its collect wakes us */
				res = cistern__cold_wait(&TS(c)->io, &s->batch);
			}
			stage_write_end(c, t, ri, res);
			if (res < 0)
				return res;
			continue;
		}
		if (st == RUN_HELD) {
			int r = stage_flush(c, t, &g, rw, w, x);
			if (r < 0)
				return r;
			continue;
		}
		/* [stage-hold] acq_rel: FREE of an older group to HELD of ours. */
		if (atomic_compare_exchange_strong_explicit(rw, &w, run_word(RUN_HELD, 0, y0),
							    memory_order_acq_rel,
							    memory_order_relaxed))
			break;
	}
	/*
	 * [stage-copy] full fence: our look at the run word before our writes
	 * into the run; pairs with the fence of a copy of the run's older group
	 * (stage_copy()), which looks at the word again after its reads.
	 */
	cistern__full_fence();
	return 0;
}

/*
 * Copy len bytes of cold position y (slot j) from the staging run of its
 * group into dst: true if the run held y's group for the whole copy, so
 * that the bytes are y's; false: they are on disk.
 */
static bool stage_copy(struct cistern *c, uint64_t j, uint64_t y, void *dst, size_t len)
{
	struct geo g = geo_of(c);
	_Atomic uint64_t *rw = run_of(c, &g, j);
	uint32_t y0 = group_gen(&g, j, y);
	/* [stage-copy] acquire: the run holds y0; its bytes stay until a later group holds it. */
	uint64_t w = atomic_load_explicit(rw, memory_order_acquire);
	if (run_gen(w) != y0 || run_state(w) == RUN_FREE)
		return false;
	memcpy(dst, stage_slot(c, &g, j), len);
	/* [stage-copy] pairs with the full fence of stage_hold(): the reads before the second look. */
	cistern__load_fence();
	return run_gen(atomic_load_explicit(rw, memory_order_relaxed)) == y0;
}

/* ---- init ---------------------------------------------------------------- */

static void tf_init(struct cistern *c)
{
	cistern__fifo_init(c);
	struct cistern__cold_ent *E = ents(c);
	/* Relaxed: nobody else has the segment before create returns. */
	for (uint64_t j = 0; j < c->fixed.cold_slots; j++)
		atomic_store_explicit(&E[j].word, cw(FIFO_FREE, 0, j), memory_order_relaxed);
	atomic_store_explicit(&TS(c)->mode, 0, memory_order_relaxed);
	atomic_store_explicit(&TS(c)->chead, 0, memory_order_relaxed);
	/* Each run free, after a group older than any (position -1). */
	for (unsigned r = 0; r < STAGE_RUNS; r++)
		atomic_store_explicit(&runs(c)[r], run_word(RUN_FREE, 0, UINT32_MAX),
				      memory_order_relaxed);
}

/* ---- puts ---------------------------------------------------------------- */

/* An aligned staging slot for a cold put: the spare one, or a new one. */
static void *stage_take(struct fifo_tier *t)
{
	void *b = t->stage;
	t->stage = NULL;
	return b ? b : cistern__cold_alloc(&t->cold, 1);
}

static void stage_give(struct fifo_tier *t, void *b)
{
	if (!t->stage)
		t->stage = b;
	else
		free(b);
}

/* Whether the hot ring has room at its tail now (a hint: the claim decides). */
static bool hot_has_room(struct cistern *c)
{
	uint64_t t = atomic_load_explicit(&c->hdr->tail, memory_order_relaxed);
	uint64_t w = atomic_load_explicit(&cistern__slotmeta(c, cistern__slot_of(c, t))->word,
					  memory_order_relaxed);
	return w == sw_make(t, FIFO_FREE, 0);
}

/* Help the cold tail past x, whose entry is claimed or past: the mode word m = COLD | x. */
static void help_cold_tail(struct cistern__fifo_tier_shm *ts, uint64_t m)
{
	/* [tier-mode] seq_cst: an index move, as cistern__help_advance(). */
	atomic_compare_exchange_strong_explicit(&ts->mode, &m, m + 1, memory_order_seq_cst,
						memory_order_relaxed);
}

/*
 * Claim the cold position at the tail of mode word m (COLD | x): 0 and the
 * slot; -EAGAIN when the cold ring is full; -ESTALE when the mode word or
 * the entry moved meanwhile (look again); another -errno.
 */
static int cold_reserve(struct cistern *c, struct cistern_slot *slot, uint64_t m)
{
	struct fifo_tier *t;
	int r = tier_get(c, &t);
	if (r < 0)
		return r;
	struct cistern__fifo_tier_shm *ts = TS(c);
	uint64_t n = c->fixed.cold_slots;
	uint64_t x = mode_tail(m);
	uint64_t j = x % n;
	struct cistern__cold_ent *e = &ents(c)[j];
	/*
	 * [cold-free] acquire: the last reader of this slot finished its reads
	 * before it stored FREE(x); our write comes after them.
	 */
	uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
	int32_t d = cw_lap(w, x);
	if (d < 0)
		return -EAGAIN; /* the previous lap's sample is still there: full */
	if (d > 0 || cistern__cold_state(w) != FIFO_FREE) {
		/* Over a lap ahead of a tail that has not moved: damage, not a race. */
		if ((int64_t)d > (int64_t)n &&
		    atomic_load_explicit(&ts->mode, memory_order_relaxed) == m)
			return -EPROTO;
		help_cold_tail(ts, m);
		return -ESTALE;
	}
	if (cistern__cold_owner(w) != 0)
		return -EPROTO;
	/*
	 * The cold ring drained (every position below x taken) and the hot ring
	 * has room: puts go hot again. [tier-mode] seq_cst: the switch and the
	 * cold claims are CASes of one word, so a claim of x and the switch
	 * cannot both count.
	 */
	if (atomic_load_explicit(&ts->chead, memory_order_seq_cst) >= x && hot_has_room(c)) {
		atomic_compare_exchange_strong_explicit(&ts->mode, &m, x, memory_order_seq_cst,
							memory_order_relaxed);
		return -ESTALE;
	}
	/* The bytes go to the staging run of x's group: it holds that group first. */
	r = stage_hold(c, t, x);
	if (r < 0)
		return r;
	uint64_t mine = cw(FIFO_RESERVED, c->owner, x);
	/* Acq_rel: as T1 of the hot ring ([cold-free] on its acquire side). */
	if (!atomic_compare_exchange_strong_explicit(&e->word, &w, mine, memory_order_acq_rel,
						     memory_order_relaxed))
		return -ESTALE;
	/*
	 * Move the cold tail past x. [tier-mode] seq_cst: a helper may have
	 * moved it already (it found our claim); a switch back to HOT before
	 * our move means that x does not count: the entry turns SKIP (a
	 * helper of a later COLD epoch may count it, and readers step over a
	 * SKIP).
	 */
	for (;;) {
		uint64_t cur = m;
		if (atomic_compare_exchange_strong_explicit(
			    &ts->mode, &cur, m + 1, memory_order_seq_cst, memory_order_seq_cst))
			break;
		if ((cur & CISTERN__FIFO_MODE_COLD) && mode_tail(cur) > x)
			break;
		if (cur == m)
			continue;
		/* seq_cst: [wake-data] store half for readers that wait on x. */
		atomic_exchange_explicit(&e->word, cw(FIFO_SKIP, 0, x), memory_order_seq_cst);
		cistern__wake_readers(c);
		return -ESTALE;
	}
	struct geo g = geo_of(c);
	/* The entry is ours (WRITING): nobody reads its fields before COMMITTED. */
	e->id = c->id_base + atomic_fetch_add_explicit(&ts->next_id, 1, memory_order_relaxed);
	slot->data = stage_slot(c, &g, j);
	slot->capacity = c->slot_size;
	slot->pos_ = x;
	slot->index_ = (uint32_t)(c->slot_count + j);
	slot->live_ = 1;
	return 0;
}

static int tf_try_reserve(struct cistern *c, struct cistern_slot *slot)
{
	struct cistern__fifo_tier_shm *ts = TS(c);
	/* Our group writes that completed: their runs go free before we look. */
	stage_reap(c, FT(c));
	for (int round = 0; round < MODE_ROUNDS; round++) {
		/* [tier-mode] seq_cst: the mode this put decides by. */
		uint64_t m = atomic_load_explicit(&ts->mode, memory_order_seq_cst);
		if (!(m & CISTERN__FIFO_MODE_COLD)) {
			int r = cistern__fifo_try_reserve(c, slot);
			if (r == 0) {
				/*
				 * [tier-mode] seq_cst fence: our claim (the word and the
				 * tail) before the second look at the mode; a reader looks
				 * at the mode, fences, then at the tail and the head's
				 * word. One of the two sees the other.
				 */
				cistern__full_fence();
				if (atomic_load_explicit(&ts->mode, memory_order_relaxed) != m) {
					/* The puts went cold meanwhile: ours must not come first. */
					cistern__fifo_abort(c, slot);
					continue;
				}
				/* RESERVED(me): nobody reads the id before COMMITTED. */
				cistern__slotmeta(c, slot->index_)->sample_id =
					c->id_base + atomic_fetch_add_explicit(
							     &ts->next_id, 1, memory_order_relaxed);
				return 0;
			}
			if (r != -EAGAIN)
				return r;
			/* The hot ring is full: puts go to the cold ring from here on. */
			if (!atomic_compare_exchange_strong_explicit(
				    &ts->mode, &m, m | CISTERN__FIFO_MODE_COLD,
				    memory_order_seq_cst, memory_order_relaxed))
				continue;
			m |= CISTERN__FIFO_MODE_COLD;
		}
		int r = cold_reserve(c, slot, m);
		if (r != -ESTALE)
			return r;
	}
	return -EAGAIN;
}

static bool is_cold_slot(const struct cistern *c, const struct cistern_slot *slot)
{
	return slot->index_ >= c->slot_count;
}

/* The cold entry of a live cold reservation of ours, or NULL. */
static struct cistern__cold_ent *cold_slot_mine(struct cistern *c, const struct cistern_slot *slot)
{
	uint64_t j = slot->index_ - c->slot_count;
	if (!slot->live_ || j >= c->fixed.cold_slots || !FT(c))
		return NULL;
	struct cistern__cold_ent *e = &ents(c)[j];
	/* Relaxed: only we move it out of WRITING(me). */
	if (atomic_load_explicit(&e->word, memory_order_relaxed) !=
	    cw(FIFO_RESERVED, c->owner, slot->pos_))
		return NULL;
	return e;
}

static int tf_commit(struct cistern *c, struct cistern_slot *slot, size_t len,
		     struct cistern_meta *meta)
{
	if (!is_cold_slot(c, slot)) {
		if (!cistern__fifo_slot_is_mine(c, slot))
			return -EINVAL;
		struct cistern_slotmeta *m = cistern__slotmeta(c, slot->index_);
		/* The id was given at the claim; the rest as write_meta(). */
		m->len = len;
		m->sim_id = meta ? meta->sim_id : 0;
		m->time_step = meta ? meta->time_step : 0;
		if (meta)
			meta->sample_id = m->sample_id;
		/* T2, [commit] release (or seq_cst): the payload and metadata before COMMITTED. */
		cistern__publish_word(&m->word, sw_make(slot->pos_, FIFO_COMMITTED, 0));
		cistern__count(&c->me->ctr.puts, 1);
		/* [wake-data] seq_cst load of readers_waiting, after the publish. */
		cistern__wake_readers(c);
		slot->live_ = 0;
		return 0;
	}
	struct cistern__cold_ent *e = cold_slot_mine(c, slot);
	if (!e)
		return -EINVAL;
	e->len = (uint32_t)len;
	e->crc = cistern__crc32c(0, slot->data, len);
	/* Relaxed [cold-verified]: the FIFO checks every read; the mark stays clear. */
	atomic_store_explicit(&e->verified, 0, memory_order_relaxed);
	uint32_t key[2] = {meta ? meta->sim_id : 0, meta ? meta->time_step : 0};
	memset(e->meta, 0, sizeof(e->meta));
	memcpy(e->meta, key, sizeof(key));
	atomic_store_explicit(&e->seen, 0, memory_order_relaxed);
	if (meta)
		meta->sample_id = e->id;
	/*
	 * [cold-publish] release (or seq_cst): the bytes in the staging run
	 * and the fields are stored before STAGED; a reader's acquire load of
	 * the word sees both. No write here: the group's write comes later.
	 */
	cistern__publish_word(&e->word, cw(FIFO_STAGED, 0, slot->pos_));
	cistern__count(&c->me->ctr.puts, 1);
	atomic_fetch_add_explicit(&TS(c)->spilled, 1, memory_order_relaxed);
	/* [wake-data] seq_cst load of readers_waiting, after the publish. */
	cistern__wake_readers(c);
	/* The last put of a group starts its write, and we go on. */
	stage_behind(c, slot->pos_);
	/* A producer may wait for this put's group to be done, to write it. */
	cistern__wake_producers(c);
	slot->data = NULL;
	slot->live_ = 0;
	return 0;
}

static int tf_abort(struct cistern *c, struct cistern_slot *slot)
{
	if (!is_cold_slot(c, slot))
		return cistern__fifo_abort(c, slot);
	struct cistern__cold_ent *e = cold_slot_mine(c, slot);
	if (!e)
		return -EINVAL;
	/* As T3, seq_cst: the store half of [wake-data] for the wake below. */
	atomic_exchange_explicit(&e->word, cw(FIFO_SKIP, 0, slot->pos_), memory_order_seq_cst);
	stage_behind(c, slot->pos_);
	slot->data = NULL;
	slot->live_ = 0;
	cistern__wake_readers(c);
	cistern__wake_producers(c);
	return 0;
}

/* ---- batch puts ------------------------------------------------------------ */

/*
 * cistern_put_batch() on a FIFO with a cold tier (the FIFO descriptor's
 * put_batch_now): the samples there is room for now, in order, each
 * claimed, copied and committed in turn. A cold sample is copied into the
 * staging run of its group, whose write covers the group's slots at once.
 */
ssize_t cistern__fifo_tier_put_now(struct cistern *c, size_t n, const struct cistern_scatter *s)
{
	int r = cistern__add_role(c, CISTERN_ROLE_PRODUCER);
	if (r < 0)
		return r;
	size_t done = 0;
	for (size_t k = 0; k < n; k++) {
		size_t len = cistern__scatter_len(s, k);
		if (len > s->stride || cistern__len_misfit(c, len))
			break; /* the first-sample path reports it */
		/* [close] acquire, as cistern_reserve(). */
		if (atomic_load_explicit(&c->hdr->closed, memory_order_acquire)) {
			r = -EPIPE;
			break;
		}
		struct cistern_slot slot;
		r = tf_try_reserve(c, &slot);
		if (r < 0)
			break;
		/*
		 * [close-claim] seq_cst, after the claim, as cistern_reserve():
		 * a claim that finds reception closed must not appear.
		 */
		if (atomic_load_explicit(&c->hdr->closed, memory_order_seq_cst)) {
			tf_abort(c, &slot);
			r = -EPIPE;
			break;
		}
		memcpy(slot.data, s->src + k * s->stride, len);
		tf_commit(c, &slot, len, s->meta ? &s->meta[k] : NULL);
		done++;
	}
	if (done == 0 && r < 0 && r != -EAGAIN)
		return r;
	return (ssize_t)done;
}

/* ---- reads ---------------------------------------------------------------- */

/* Slots one read ahead covers at most: 1 MiB, 1 to RUN_SLOTS slots. */
static unsigned run_slots(const struct fifo_tier *t)
{
	unsigned cap = READ_AHEAD_BYTES / t->cold.slot_bytes;
	return cap < 1 ? 1 : cap > RUN_SLOTS ? RUN_SLOTS : cap;
}

static bool is_cold(const struct cistern *c, const struct cistern_sample *s)
{
	return s->index_ >= c->slot_count;
}

static bool ra_room(struct fifo_tier *t, struct ra_run *a, unsigned cap)
{
	if (a->cap >= cap)
		return true;
	void *b = cistern__cold_alloc(&t->cold, cap);
	uint64_t *w = malloc(cap * sizeof(*w));
	if (!b || !w) {
		free(b);
		free(w);
		return false;
	}
	free(a->buf);
	free(a->word);
	a->buf = b;
	a->word = w;
	a->cap = cap;
	return true;
}

/*
 * Wait for a run's read, if it is in flight: false if the run is not
 * usable (a read error; the ring failed, leaving buf to the kernel).
 */
static bool ra_wait(struct cistern *c, struct ra_run *a)
{
	if (!a->in_flight)
		return a->n > 0;
	a->in_flight = false;
	int r = cistern__cold_wait(&TS(c)->io, &a->batch);
	if (r < 0 && a->batch.pending) {
		a->buf = NULL; /* the kernel may still write into it: leak it */
		a->cap = 0;
	}
	if (r < 0 || a->io.res != 0)
		a->n = 0;
	return a->n > 0;
}

/* Whether run a holds the bytes of position y, whose take found COMMITTED(y). */
static bool ra_holds(const struct ra_run *a, uint64_t y)
{
	return a->n && y >= a->pos && y - a->pos < a->n &&
	       a->word[y - a->pos] == cw(FIFO_COMMITTED, 0, y);
}

/*
 * Fill run a with the words of positions y, y+1, ... whose entries are
 * COMMITTED now, consecutive in the file, up to its room: how many (0 if
 * y's is not). `first`: y's word, found already by the caller's take.
 */
static unsigned ra_plan(struct cistern *c, struct ra_run *a, uint64_t y, bool first)
{
	struct cistern__cold_ent *E = ents(c);
	uint64_t n = c->fixed.cold_slots;
	uint64_t j = y % n;
	unsigned k = 0;
	if (first)
		a->word[k++] = cw(FIFO_COMMITTED, 0, y);
	while (k < a->cap && j + k < n) {
		/* [cold-publish] acquire: that slot's bytes are on disk before we read them. */
		uint64_t w = atomic_load_explicit(&E[j + k].word, memory_order_acquire);
		if (w != cw(FIFO_COMMITTED, 0, y + k))
			break;
		a->word[k++] = w;
	}
	return k;
}

/*
 * Start reading the run after the current one into the other buffer, if
 * its first sample is committed already: the reader works on the current
 * run meanwhile. Nothing happens if the other buffer is busy or the start
 * fails; a take then reads what it needs itself.
 */
static void ra_start_next(struct cistern *c, struct fifo_tier *t)
{
	struct ra_run *a = &t->ra[t->cur], *b = &t->ra[!t->cur];
	if (!a->n || b->in_flight || !ra_room(t, b, run_slots(t)))
		return;
	uint64_t y = a->pos + a->n;
	b->n = 0;
	unsigned k = ra_plan(c, b, y, false);
	if (k == 0)
		return;
	cistern__cold_prep(&t->cold, &b->io, y % c->fixed.cold_slots, k, b->buf, false);
	if (cistern__uring_start(&b->batch, &b->io, 1) < 0)
		return; /* no ring: nothing in flight */
	b->pos = y;
	b->n = k;
	b->in_flight = true;
}

/*
 * The bytes of cold position y (slot j), which we hold (ACQUIRED): from a
 * run read ahead if one holds them, else by one read of slot j and of the
 * COMMITTED slots that follow it in order, up to the end of the file. Then
 * the read of the run after it starts, while the caller works.
 */
static int cold_bytes(struct cistern *c, struct fifo_tier *t, uint64_t j, uint64_t y,
		      const uint8_t **out)
{
	uint32_t sb = t->cold.slot_bytes;
	struct ra_run *b = &t->ra[!t->cur];
	/*
	 * A run read after an acquire load found COMMITTED(y) ([cold-publish])
	 * holds y's bytes if our take found the same word: the slot is not
	 * written again before it is FREE at a later position.
	 */
	if (!ra_holds(&t->ra[t->cur], y)) {
		if (b->n && y >= b->pos && y - b->pos < b->n && ra_wait(c, b) && ra_holds(b, y)) {
			t->cur = !t->cur;
		} else {
			/* Not read ahead (another reader took those): read from y on now. */
			ra_wait(c, b);
			b->n = 0;
			struct ra_run *a = &t->ra[t->cur];
			a->n = 0;
			if (!ra_room(t, a, run_slots(t)) && !ra_room(t, a, 1))
				return -ENOMEM;
			unsigned k = ra_plan(c, a, y, true);
			cistern__cold_prep(&t->cold, &a->io, j, k, a->buf, false);
			int r = cistern__cold_run(&TS(c)->io, &a->io, 1);
			if (r < 0)
				return r;
			a->pos = y;
			a->n = k;
		}
	}
	struct ra_run *a = &t->ra[t->cur];
	*out = (const uint8_t *)a->buf + (y - a->pos) * sb;
	ra_start_next(c, t);
	return 0;
}

/* Mark a held cold entry for redelivery ([cold-redeliver-hint], as mark_redeliver()). */
static void cold_mark_redeliver(struct cistern *c, struct cistern__cold_ent *e, uint64_t w,
				uint32_t owner)
{
	uint64_t nw = cw(FIFO_REDELIVER, owner, cistern__cold_gen(w));
	if (atomic_compare_exchange_strong_explicit(&e->word, &w, nw, memory_order_seq_cst,
						    memory_order_relaxed))
		atomic_fetch_add_explicit(&TS(c)->redeliver, 1, memory_order_seq_cst);
}

/*
 * Hand out cold position y of slot j, which we just took (ACQUIRED(y, me)):
 * its bytes into a buffer of our own, checked against the entry's CRC.
 * On an error the sample goes back for another reader.
 */
static int cold_hand_out(struct cistern *c, struct cistern_sample *s, uint64_t j, uint64_t y,
			 bool redelivered, bool staged)
{
	struct cistern__cold_ent *e = &ents(c)[j];
	uint64_t mine = cw(FIFO_ACQUIRED, c->owner, y);
	struct fifo_tier *t = NULL;
	const uint8_t *src = NULL;
	uint8_t *buf = NULL;
	int r = tier_get(c, &t);
	/* Taken by an acq_rel CAS ([cold-publish]): the fields are the sample's. */
	uint32_t len = e->len;
	if (r == 0 && len > c->slot_size)
		r = -EPROTO;
	if (r == 0 && !(buf = malloc(len ? len : 1)))
		r = -ENOMEM;
	/* Its bytes: from its group's staging run while that holds them, else from disk. */
	if (r == 0 && !(staged && stage_copy(c, j, y, buf, len))) {
		r = cold_bytes(c, t, j, y, &src);
		if (r == 0)
			memcpy(buf, src, len);
	}
	if (r == 0 && cistern__crc32c(0, buf, len) != e->crc)
		r = -EIO;
	if (r < 0) {
		free(buf);
		if (t)
			t->ra[t->cur].n = 0;
		cold_mark_redeliver(c, e, mine, 0);
		cistern__wake_readers(c);
		return r;
	}
	uint32_t key[2];
	memcpy(key, e->meta, sizeof(key));
	s->data = buf;
	s->len = len;
	s->meta.sample_id = e->id;
	s->meta.sim_id = key[0];
	s->meta.time_step = key[1];
	s->meta.flags = 0;
	s->pos_ = y;
	s->index_ = (uint32_t)(c->slot_count + j);
	s->live_ = 1;
	cistern__count(&c->me->ctr.gets, 1);
	if (redelivered)
		cistern__count(&c->me->ctr.redeliveries, 1);
	atomic_fetch_add_explicit(&TS(c)->cold_reads, 1, memory_order_relaxed);
	return 0;
}

/* A cold sample whose reader died or handed it back: as take_redelivered() of the hot ring. */
static int cold_take_redelivered(struct cistern *c, struct cistern_sample *s)
{
	struct cistern__fifo_tier_shm *ts = TS(c);
	/* [cold-redeliver-hint] acquire: the marks made before the bump are in the words. */
	uint64_t hint = atomic_load_explicit(&ts->redeliver, memory_order_acquire);
	if (hint == 0)
		return -EAGAIN;
	struct cistern__cold_ent *E = ents(c);
	for (uint64_t j = 0; j < c->fixed.cold_slots; j++) {
		/* [cold-publish] acquire: the entry's fields and the slot's bytes. */
		uint64_t w = atomic_load_explicit(&E[j].word, memory_order_acquire);
		if (cistern__cold_state(w) != FIFO_REDELIVER)
			continue;
		uint64_t y = cistern__cold_gen(w);
		uint64_t nw = cw(FIFO_ACQUIRED, c->owner, y);
		if (!atomic_compare_exchange_strong_explicit(
			    &E[j].word, &w, nw, memory_order_acq_rel, memory_order_relaxed))
			continue;
		int r = cold_hand_out(c, s, j, y, cistern__cold_owner(w) != OWNER_UNACQUIRED, true);
		return r == 0 ? 0 : -EAGAIN;
	}
	/* Nothing found: clear the hint unless a mark bumped it meanwhile. */
	atomic_compare_exchange_strong_explicit(&ts->redeliver, &hint, 0, memory_order_acq_rel,
						memory_order_relaxed);
	return -EAGAIN;
}

/* Move the cold head from y to y+1 unless someone did ([cold-head], seq_cst). */
static void help_cold_head(struct cistern__fifo_tier_shm *ts, uint64_t y)
{
	atomic_compare_exchange_strong_explicit(&ts->chead, &y, y + 1, memory_order_seq_cst,
						memory_order_relaxed);
}

/* Take the sample at the cold head, in order: 0, -EAGAIN if none is there yet, or -errno. */
static int cold_take(struct cistern *c, struct cistern_sample *s)
{
	struct cistern__fifo_tier_shm *ts = TS(c);
	struct cistern__cold_ent *E = ents(c);
	uint64_t n = c->fixed.cold_slots;
	for (;;) {
		/* [cold-head] acquire: a head past y has y taken or freed in its entry. */
		uint64_t y = atomic_load_explicit(&ts->chead, memory_order_acquire);
		uint64_t j = y % n;
		struct cistern__cold_ent *e = &E[j];
		/* [cold-publish] acquire: a COMMITTED entry's fields and bytes. */
		uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
		int32_t d = cw_lap(w, y);
		if (d > 0) {
			/* Over a lap ahead of a head that has not moved: damage. */
			if ((int64_t)d > (int64_t)n &&
			    atomic_load_explicit(&ts->chead, memory_order_relaxed) == y)
				return -EPROTO;
			help_cold_head(ts, y);
			continue;
		}
		if (d < 0)
			return -EAGAIN; /* the previous lap still holds the slot: nothing put at y */
		switch (cistern__cold_state(w)) {
		case FIFO_COMMITTED:
		case FIFO_STAGED: {
			if (cistern__cold_owner(w) != 0)
				return -EPROTO;
			uint64_t nw = cw(FIFO_ACQUIRED, c->owner, y);
			/* Acq_rel: [cold-publish] on the acquire side, as T5. */
			if (!atomic_compare_exchange_strong_explicit(
				    &e->word, &w, nw, memory_order_acq_rel, memory_order_relaxed))
				continue;
			help_cold_head(ts, y);
			return cold_hand_out(c, s, j, y, false,
					     cistern__cold_state(w) == FIFO_STAGED);
		}
		case FIFO_SKIP: {
			/* As T10, seq_cst: [cold-free] for the next lap, and [wake-space]. */
			uint64_t nw = cw(FIFO_FREE, 0, y + n);
			if (atomic_compare_exchange_strong_explicit(
				    &e->word, &w, nw, memory_order_seq_cst, memory_order_relaxed)) {
				help_cold_head(ts, y);
				cistern__wake_producers(c);
			}
			continue;
		}
		case FIFO_ACQUIRED:
		case FIFO_REDELIVER:
			help_cold_head(ts, y);
			continue;
		default: /* FREE or WRITING: nothing committed at the cold head yet */
			return -EAGAIN;
		}
	}
}

/*
 * Whether the hot ring holds nothing that comes before the cold ring: the
 * mode is COLD (the caller saw it), and after the fence the head is at or
 * past the tail, and the head's slot is neither claimed nor committed.
 */
static bool hot_resolved(struct cistern *c, bool *retry)
{
	struct cistern_hdr *h = c->hdr;
	/*
	 * [tier-mode] seq_cst fence, after the caller's seq_cst load of the
	 * mode: a hot claim that saw HOT at its second look has its word and
	 * tail visible to the loads below (see tf_try_reserve()).
	 */
	cistern__full_fence();
	uint64_t t = atomic_load_explicit(&h->tail, memory_order_relaxed);
	uint64_t p = atomic_load_explicit(&h->head, memory_order_relaxed);
	*retry = false;
	if (p < t)
		return false;
	uint64_t w = atomic_load_explicit(&cistern__slotmeta(c, cistern__slot_of(c, p))->word,
					  memory_order_relaxed);
	if (sw_lap_diff(w, p) == 0 &&
	    (sw_state(w) == FIFO_RESERVED || sw_state(w) == FIFO_COMMITTED)) {
		*retry = sw_state(w) == FIFO_COMMITTED;
		return false;
	}
	return true;
}

static int tf_try_acquire(struct cistern *c, struct cistern_sample *s)
{
	struct cistern__fifo_tier_shm *ts = TS(c);
	/* A handle that puts and reads collects its group writes here too. */
	stage_reap(c, FT(c));
	if (atomic_load_explicit(&ts->redeliver, memory_order_relaxed) != 0 &&
	    cold_take_redelivered(c, s) == 0)
		return 0;
	for (int round = 0; round < 4; round++) {
		int r = cistern__fifo_try_acquire(c, s);
		if (r != -EAGAIN)
			return r;
		/* [tier-mode] seq_cst: the hot ring comes first while puts go hot. */
		uint64_t m = atomic_load_explicit(&ts->mode, memory_order_seq_cst);
		if (!(m & CISTERN__FIFO_MODE_COLD))
			return -EAGAIN;
		bool retry;
		if (!hot_resolved(c, &retry)) {
			if (retry)
				continue;
			return -EAGAIN;
		}
		return cold_take(c, s);
	}
	return -EAGAIN;
}

/*
 * cistern_get_batch() (api.c's general path): up to n samples in order, as
 * many as are there now; -EAGAIN if none is.
 */
static int tf_try_acquire_batch(struct cistern *c, struct cistern_sample *out, size_t n)
{
	size_t got = 0;
	while (got < n) {
		int r = tf_try_acquire(c, &out[got]);
		if (r < 0) {
			if (got)
				break;
			return r;
		}
		got++;
	}
	return (int)got;
}

/* The cold entry of a cold sample this handle holds, or NULL. */
static struct cistern__cold_ent *cold_held(struct cistern *c, const struct cistern_sample *s)
{
	uint64_t j = s->index_ - c->slot_count;
	if (!s->live_ || j >= c->fixed.cold_slots)
		return NULL;
	struct cistern__cold_ent *e = &ents(c)[j];
	/* Relaxed: only we move it out of ACQUIRED(me). */
	if (atomic_load_explicit(&e->word, memory_order_relaxed) !=
	    cw(FIFO_ACQUIRED, c->owner, s->pos_))
		return NULL;
	return e;
}

static void forget_cold(struct cistern_sample *s)
{
	free((void *)(uintptr_t)s->data);
	s->data = NULL;
	s->live_ = 0;
}

static int tf_release(struct cistern *c, struct cistern_sample *s)
{
	if (!is_cold(c, s))
		return cistern__fifo_release(c, s);
	struct cistern__cold_ent *e = cold_held(c, s);
	if (!e)
		return -EINVAL;
	/*
	 * As T6, [cold-free] release (or seq_cst): our read of the slot is over
	 * (it was into our buffer) before the next lap's producer claims it.
	 */
	cistern__publish_word(&e->word, cw(FIFO_FREE, 0, s->pos_ + c->fixed.cold_slots));
	cistern__count(&c->me->ctr.seen_hist[1], 1);
	/* [wake-space] seq_cst load of producers_waiting, after the store. */
	cistern__wake_producers(c);
	forget_cold(s);
	return 0;
}

static int tf_unacquire(struct cistern *c, struct cistern_sample *s)
{
	if (!is_cold(c, s))
		return cistern__fifo_unacquire(c, s);
	struct cistern__cold_ent *e = cold_held(c, s);
	if (!e)
		return -EINVAL;
	cold_mark_redeliver(c, e, cw(FIFO_ACQUIRED, c->owner, s->pos_), OWNER_UNACQUIRED);
	cistern__count(&c->me->ctr.gets, (uint64_t)-1);
	forget_cold(s);
	cistern__wake_readers(c);
	return 0;
}

static bool tf_drained(struct cistern *c)
{
	/* Closed, the hot ring resolved ([close-claim], in cistern__fifo_drained()). */
	if (!cistern__fifo_drained(c))
		return false;
	struct cistern__fifo_tier_shm *ts = TS(c);
	if (atomic_load_explicit(&ts->redeliver, memory_order_seq_cst) != 0)
		return false;
	/*
	 * [close-claim] seq_cst: a cold claim that saw reception open moved the
	 * cold tail (in the mode word) before the close; we see it here.
	 */
	uint64_t m = atomic_load_explicit(&ts->mode, memory_order_seq_cst);
	uint64_t y = atomic_load_explicit(&ts->chead, memory_order_seq_cst);
	return y >= mode_tail(m);
}

static void tf_reclaim(struct cistern *c, uint32_t owner)
{
	/* Our own detach: our group writes complete and are collected first. */
	if (owner != 0 && owner == c->owner)
		(void)cistern__fifo_tier_settle(c);
	cistern__fifo_reclaim(c, owner);
	struct cistern__fifo_tier_shm *ts = TS(c);
	struct cistern__cold_ent *E = ents(c);
	uint64_t reclaimed = 0;
	bool hint = false;
	for (uint64_t j = 0; j < c->fixed.cold_slots; j++) {
		uint64_t w = atomic_load_explicit(&E[j].word, memory_order_acquire);
		unsigned st = cistern__cold_state(w);
		uint32_t o = cistern__cold_owner(w);
		if (st == FIFO_REDELIVER && (o == OWNER_UNACQUIRED || o == owner))
			hint = true; /* a hand-back, or an interrupted reclaim: raise the hint */
		if (o != owner || owner == 0)
			continue;
		if (st == FIFO_RESERVED) {
			/* An unfinished cold put: as T4, seq_cst. */
			uint64_t nw = cw(FIFO_SKIP, 0, cistern__cold_gen(w));
			if (atomic_compare_exchange_strong_explicit(
				    &E[j].word, &w, nw, memory_order_seq_cst, memory_order_relaxed))
				reclaimed++;
		} else if (st == FIFO_ACQUIRED) {
			cold_mark_redeliver(c, &E[j], w, owner);
		}
	}
	if (hint)
		atomic_fetch_add_explicit(&ts->redeliver, 1, memory_order_seq_cst);
	/* A group its dead writer was writing stays staged; the next holder writes it again. */
	bool freed = false;
	for (unsigned r = 0; owner != 0 && r < STAGE_RUNS; r++) {
		_Atomic uint64_t *rw = &runs(c)[r];
		uint64_t w = atomic_load_explicit(rw, memory_order_acquire);
		if (run_state(w) != RUN_WRITING || run_owner(w) != (owner & 0xffffff))
			continue;
		/* [stage-hold] release: back to HELD, as the writer's failed write does. */
		freed |= atomic_compare_exchange_strong_explicit(
			rw, &w, run_word(RUN_HELD, 0, run_gen(w)), memory_order_release,
			memory_order_relaxed);
	}
	if (freed || reclaimed)
		cistern__wake_producers(c);
	if (reclaimed)
		atomic_fetch_add_explicit(&c->hdr->retired.reclaimed, reclaimed,
					  memory_order_relaxed);
}

static int tf_rename(struct cistern *c, const char *dir, const char *from, const char *to)
{
	struct fifo_tier *t = FT(c);
	return t ? cistern__tier_rename(&t->cold, t->open, dir, from, to) : -EINVAL;
}

/* ---- dump and restore --------------------------------------------------- */

/* Cold slots a dump reads in one submission. */
#define DUMP_BATCH 64u

/* The fields of an entry a dump saves, copied at its first look. */
struct dump_ent {
	uint64_t y, w, id;
	uint32_t len, crc;
	uint8_t meta[24];
};

/* Hand the batch's samples whose entries did not move to fn, in order. */
static int dump_flush(struct cistern *c, struct cistern__cold *cold, struct dump_ent *d,
		      struct cistern__io *io, uint8_t *buf, unsigned k, unsigned nio,
		      uint64_t *rank, cistern__cold_fn fn, void *arg, uint64_t *skipped)
{
	if (k == 0)
		return 0;
	int r = nio ? cistern__uring_run(io, nio) : 0;
	if (r < 0)
		return r;
	/*
	 * [dump-recheck]: every read of a slot completed before this second
	 * look at its word, which a producer moves from FREE before it writes.
	 */
	cistern__load_fence();
	struct cistern__cold_ent *E = ents(c);
	for (unsigned i = 0; i < k && r == 0; i++) {
		/* Relaxed: ordered after the reads by the fence above. */
		uint64_t now = atomic_load_explicit(&E[d[i].y % c->fixed.cold_slots].word,
						    memory_order_relaxed);
		/* STAGED that went COMMITTED: its group was written meanwhile, same bytes. */
		bool same = now == d[i].w || (cistern__cold_state(d[i].w) == FIFO_STAGED &&
					      now == cw(FIFO_COMMITTED, 0, d[i].y));
		if (!same) {
			(*skipped)++; /* taken and written again while read */
			continue;
		}
		const uint8_t *p = buf + (size_t)i * cold->slot_bytes;
		if (cistern__crc32c(0, p, d[i].len) != d[i].crc)
			return -EIO;
		struct cistern__cold_sample cs = {
			.id = d[i].id, .len = d[i].len, .seen = 0, .slot = (*rank)++, .data = p};
		memcpy(cs.meta, d[i].meta, sizeof(cs.meta));
		r = fn(&cs, arg);
	}
	return r;
}

/*
 * Dump: the cold samples in queue order, those handed back first (they
 * are older), numbered 0, 1, ... in that order. dead_held (nobody alive is
 * attached): a sample a dead reader holds counts, as its reclaim leaves it.
 */
static int tf_dump(struct cistern *c, bool dead_held, cistern__cold_fn fn, void *arg,
		   uint64_t *skipped)
{
	const struct cistern_fixed *f = &c->fixed;
	/* A copied handle's private copy stops before the tier (segment.c). */
	if (c->copied)
		return -ENOTSUP;
	struct cistern__cold cold;
	int r = cistern__cold_open_read(&cold, f->cold_dir, f->name, f->cold_nonce);
	if (r < 0)
		return r;
	struct dump_ent *d = calloc(DUMP_BATCH, sizeof(*d));
	struct cistern__io *io = calloc(DUMP_BATCH, sizeof(*io));
	uint8_t *buf = cistern__cold_alloc(&cold, DUMP_BATCH);
	if (!d || !io || !buf)
		r = -ENOMEM;
	struct cistern__cold_ent *E = ents(c);
	uint64_t n = f->cold_slots, rank = 0;
	/* Relaxed: where to look; each entry's word decides. */
	uint64_t tail = mode_tail(atomic_load_explicit(&TS(c)->mode, memory_order_relaxed));
	unsigned k = 0, nio = 0;
	for (uint64_t y = tail > n ? tail - n : 0; r == 0 && y < tail; y++) {
		struct cistern__cold_ent *e = &E[y % n];
		/* [cold-publish] acquire: the entry's fields and the slot's bytes. */
		uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
		unsigned st = cistern__cold_state(w);
		if (cw_lap(w, y) != 0 ||
		    !(st == FIFO_COMMITTED || st == FIFO_STAGED || st == FIFO_REDELIVER ||
		      (dead_held && st == FIFO_ACQUIRED)) ||
		    e->len > cold.slot_bytes)
			continue;
		d[k] = (struct dump_ent){.y = y, .w = w, .id = e->id, .len = e->len, .crc = e->crc};
		memcpy(d[k].meta, e->meta, sizeof(d[k].meta));
		uint8_t *p = buf + (size_t)k * cold.slot_bytes;
		/* A sample whose group is still staged is copied from memory; else read. */
		if (st == FIFO_COMMITTED || !stage_copy(c, y % n, y, p, e->len))
			cistern__cold_prep(&cold, &io[nio++], y % n, 1, p, false);
		if (++k == DUMP_BATCH) {
			r = dump_flush(c, &cold, d, io, buf, k, nio, &rank, fn, arg, skipped);
			k = nio = 0;
		}
	}
	if (r == 0)
		r = dump_flush(c, &cold, d, io, buf, k, nio, &rank, fn, arg, skipped);
	free(d);
	free(io);
	free(buf);
	cistern__cold_close(&cold);
	return r;
}

/*
 * Restore, on the segment being built: cold sample s goes to the next
 * cold position (0, 1, ...), in the order the dump saved them, which is
 * the queue's. Its entry is COMMITTED once its write completed.
 */
static int tf_restore_put(struct cistern *c, const struct cistern__cold_sample *s)
{
	struct fifo_tier *t = FT(c);
	if (!t || !t->open || s->len > t->cold.slot_bytes || t->restored >= c->fixed.cold_slots)
		return -EINVAL;
	uint8_t *p = stage_take(t);
	if (!p)
		return -ENOMEM;
	uint64_t y = t->restored;
	memcpy(p, s->data, s->len);
	memset(p + s->len, 0, t->cold.slot_bytes - s->len);
	struct cistern__io io;
	cistern__cold_prep(&t->cold, &io, y, 1, p, true);
	int r = cistern__cold_run(&TS(c)->io, &io, 1);
	stage_give(t, p);
	if (r < 0)
		return r;
	struct cistern__cold_ent *e = &ents(c)[y];
	e->id = s->id;
	e->len = s->len;
	e->crc = cistern__crc32c(0, s->data, s->len);
	/* Relaxed [cold-verified]: the FIFO checks every read; the mark stays clear. */
	atomic_store_explicit(&e->verified, 0, memory_order_relaxed);
	memcpy(e->meta, s->meta, sizeof(e->meta));
	atomic_store_explicit(&e->seen, 0, memory_order_relaxed);
	/* Release [cold-publish]: the write completed and the fields are stored. */
	atomic_store_explicit(&e->word, cw(FIFO_COMMITTED, 0, y), memory_order_release);
	t->restored++;
	return 0;
}

static int tf_restore_end(struct cistern *c, const struct cistern__tier_counts *n)
{
	struct fifo_tier *t = FT(c);
	if (!t || !t->open)
		return -EINVAL;
	struct cistern__fifo_tier_shm *ts = TS(c);
	/*
	 * Relaxed: nobody else has the segment yet (it appears by a rename).
	 * The hot samples sit at positions 0 .. tail - 1 (the FIFO's restore
	 * ran), the cold ones after them: puts go cold until those drain.
	 * New ids start past the hot ones' (fifo_restore() set id_base).
	 */
	uint64_t k = t->restored;
	/*
	 * The restored samples are on disk. If the last of them ends inside a
	 * group, new puts fill the rest of it, and its write covers the whole
	 * group: its staging run gets the restored slots' bytes first, read
	 * back from disk, so that the write puts the same bytes there.
	 */
	struct geo g = geo_of(c);
	uint64_t j = k % c->fixed.cold_slots;
	if (k && j % g.gs) {
		uint64_t j0 = j - j % g.gs;
		struct cistern__io io;
		cistern__cold_prep(&t->cold, &io, j0, (uint32_t)(j - j0), stage_slot(c, &g, j0),
				   false);
		int r = cistern__cold_run(&ts->io, &io, 1);
		if (r < 0)
			return r;
		/* Relaxed: nobody else has the segment yet. */
		atomic_store_explicit(run_of(c, &g, j0),
				      run_word(RUN_HELD, 0, (uint32_t)(k - j + j0)),
				      memory_order_relaxed);
	}
	atomic_store_explicit(&ts->mode, k ? CISTERN__FIFO_MODE_COLD | k : 0, memory_order_relaxed);
	atomic_store_explicit(&ts->chead, 0, memory_order_relaxed);
	atomic_store_explicit(&ts->next_id,
			      atomic_load_explicit(&c->hdr->tail, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&ts->spilled, n->spilled, memory_order_relaxed);
	atomic_store_explicit(&ts->cold_reads, n->cold_reads, memory_order_relaxed);
	return 0;
}

static void tf_counts(const struct cistern *c, struct cistern__tier_counts *n)
{
	struct cistern__tier_view v;
	tier_view(c, &v);
	n->spilled = v.spilled;
	n->cold_reads = v.cold_reads;
	n->cold_evictions = 0;
}

/*
 * gc: the cold samples readers would still get, as a reclaim of the dead
 * leaves them: committed, handed back, or held by a reader (nobody alive is
 * attached, so that reader is dead and its sample goes back).
 */
static uint64_t tf_unread(const struct cistern *c)
{
	const struct cistern__cold_ent *E = ents(c);
	uint64_t n = 0;
	for (uint64_t j = 0; j < c->fixed.cold_slots; j++) {
		/* Relaxed: a count; the caller holds the gc lock and nobody alive is attached. */
		unsigned st = cistern__cold_state(
			atomic_load_explicit(&E[j].word, memory_order_relaxed));
		n += st == FIFO_COMMITTED || st == FIFO_STAGED || st == FIFO_REDELIVER ||
		     st == FIFO_ACQUIRED;
	}
	return n;
}

static const struct cistern_ops tf_ops = {
	.init = tf_init,
	.try_reserve = tf_try_reserve,
	.commit = tf_commit,
	.abort = tf_abort,
	.try_acquire = tf_try_acquire,
	.try_acquire_batch = tf_try_acquire_batch,
	.release = tf_release,
	.unacquire = tf_unacquire,
	.drained = tf_drained,
	.reclaim = tf_reclaim,
	.population = cistern__fifo_population,
};

const struct cistern__tiering cistern__fifo_tiering = {
	.ops = &tf_ops,
	.area_bytes = area_bytes,
	.stage_bytes = stage_bytes,
	.config_problem = cistern__tier_config_problem,
	.create = tier_create,
	.release = tier_release,
	.unlink = cistern__tier_unlink,
	.view = tier_view,
	.dump = tf_dump,
	.restore_put = tf_restore_put,
	.restore_end = tf_restore_end,
	.rename = tf_rename,
	.counts = tf_counts,
	.unread = tf_unread,
};
