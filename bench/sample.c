/* SPDX-License-Identifier: MIT */
/*
 * sample.c - section 4: batches of 256 random samples of 256 bytes out of a full
 * segment of 100,000 slots.
 *
 *  - C gather baseline: 256 random rows memcpy'd out of a plain array.
 *  - Two floors, with no library either: the tag word of 256 random rows read
 *    with the rows prefetched 16 ahead (what any zero-copy read of a random
 *    batch must pay, one cache miss a sample, overlapped), and the same with
 *    each row copied out (the same for any gathered batch).
 *  - Two more, still with no library, doing to memory what a pinning reader's
 *    batch does (cistern's single reader): 320-byte slots, a metadata line
 *    (state word, pin word, seen count) before each 256-byte row; draw the
 *    members with their metadata prefetched 16 ahead (and, for a gathered
 *    batch, their rows), load each state word and store a pin, one fence,
 *    look at each state word again (prefetching the row to be read in
 *    place), then read each row in place, or copy it out (prefetched again
 *    16 ahead, as cistern's copies are), and count each seen and unpin it.
 *    What is left between these and cistern is the library's own
 *    instructions.
 *  - Two more for a reader that pins nothing (an optimistic reader, as a
 *    sequence lock's): the same slots; load each member's state word and
 *    copy its row at once, one acquire fence, look at each word again and
 *    count each seen, in its metadata line or in an array of counts apart
 *    (small enough to stay in cache). They show what dropping the pins
 *    could gain, and that the metadata line's read is what the gathered
 *    batches pay beyond the memcpy floor.
 *  - One more optimistic reader whose rows have no metadata line: rows as
 *    the memcpy floor lays them out, and each row's state word and seen
 *    count in one 8-byte entry of an array apart (800 KB for 100,000
 *    rows). It shows what a segment format with the state and counts kept
 *    apart from the rows could reach.
 *  - cistern, policies batch_reservoir and reservoir: a reader process acquires
 *    256 samples and reads them in place (zero-copy), or cistern_get()s 256
 *    samples into one batch buffer (gathered). A policy this build does not
 *    implement shows "n/a: policy not implemented". The last two rows do the
 *    same on a reservoir of their own with a second reader handle attached
 *    (in the same process, idle after one read), so that the reader pays what
 *    any number of readers do rather than what a lone reader does.
 *  - torch index_select and numpy fancy indexing: sample_peers.py, run by the
 *    interpreter given with --python.
 *
 * Every C contender reads the tag word of each sample of a batch; the Python
 * peers only produce the gathered tensor/array.
 */
#include "bench.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cistern.h>

#define S_SLOTS 100000u
#define S_SIZE 256u
#define S_BATCH 256u

enum skind {
	S_GATHER,
	S_TOUCH_PF,
	S_GATHER_PF,
	S_PASS_ZC,
	S_PASS_GET,
	S_OPT_GET,
	S_OPT_APART,
	S_OPT_WORDS,
	S_CIS_ZC,
	S_CIS_GET,
	S_CIS_ONE,
	S_CIS_ZC2,
	S_CIS_GET2, /* S_CIS_ZC and S_CIS_GET with a second reader attached */
};

/* The floors: how far ahead rows are prefetched (the library's batch paths use 16 too). */
#define S_AHEAD 16u

/* The pinning passes' slots: a metadata line, then the row. */
#define S_PASS_STRIDE (64u + S_SIZE)

static int pinning_passes(enum skind k)
{
	return k == S_PASS_ZC || k == S_PASS_GET;
}

static int optimistic_passes(enum skind k)
{
	return k == S_OPT_GET || k == S_OPT_APART;
}

/* The kinds laid out as a segment's slots: a metadata line before each row. */
static int slot_layout(enum skind k)
{
	return pinning_passes(k) || optimistic_passes(k);
}

static int plain_array(enum skind k)
{
	return k == S_GATHER || k == S_TOUCH_PF || k == S_GATHER_PF || k == S_OPT_WORDS ||
	       slot_layout(k);
}

/* S_OPT_WORDS: a row's state word and seen count, in an array apart from the rows. */
struct word_ent {
	uint32_t word, seen;
};
struct samp {
	enum skind kind;
	struct run_ctl *c;
	const char *name; /* cistern segment */
};

static void fill_sample(unsigned char *p, uint64_t id)
{
	uint64_t *w = (uint64_t *)p;
	w[0] = make_tag(0, id);
	for (unsigned i = 1; i < S_SIZE / 8; i++)
		w[i] = w[0] * FILL_K + i;
}

static int tag_ok(uint64_t t)
{
	return (t >> 40) == 1 && (t & ((UINT64_C(1) << 40) - 1)) < S_SLOTS;
}

/* The pinning passes' metadata line: only these words are used. */
struct pass_meta {
	uint64_t word, pins, seen;
};

/*
 * A slot's row, to copy out (asm statements: gcc may drop unrolled
 * __builtin_prefetch calls).
 */
static inline void pass_prefetch_row(const unsigned char *slot)
{
	for (unsigned l = 1; l <= S_SIZE / 64; l++)
#if defined(__x86_64__) || defined(__i386__)
		__asm__ volatile("prefetcht0 %0" : : "m"(slot[l * 64]));
#else
		__builtin_prefetch(slot + l * 64, 0, 3);
#endif
}

/* A drawn member's metadata line, and when its row is copied out, the row too. */
static inline void pass_prefetch(const unsigned char *slot, bool row)
{
	__builtin_prefetch(slot, 1, 3);
	if (row)
		pass_prefetch_row(slot);
}

/*
 * One batch of a pinning reader's passes over arr (S_PASS_STRIDE slots), as
 * described at the top; a member whose word changed is counted bad (none
 * does: nothing else writes here).
 */
static void pass_batch(enum skind kind, unsigned char *arr, unsigned char *batch, uint64_t *seed,
		       uint64_t *bad)
{
	uint32_t idx[S_BATCH], q[S_AHEAD];
	uint64_t seen_w[S_BATCH];
	bool get = kind == S_PASS_GET;
	for (unsigned k = 0; k < S_AHEAD; k++) {
		q[k] = (uint32_t)(rng_next(seed) % S_SLOTS);
		pass_prefetch(arr + (size_t)q[k] * S_PASS_STRIDE, get);
	}
	for (unsigned k = 0; k < S_BATCH; k++) {
		uint32_t i = q[k % S_AHEAD];
		q[k % S_AHEAD] = (uint32_t)(rng_next(seed) % S_SLOTS);
		pass_prefetch(arr + (size_t)q[k % S_AHEAD] * S_PASS_STRIDE, get);
		volatile struct pass_meta *m =
			(volatile struct pass_meta *)(arr + (size_t)i * S_PASS_STRIDE);
		seen_w[k] = m->word;
		m->pins = m->pins | 1;
		idx[k] = i;
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (unsigned k = 0; k < S_BATCH; k++) {
		unsigned char *slot = arr + (size_t)idx[k] * S_PASS_STRIDE;
		*bad += ((volatile struct pass_meta *)slot)->word != seen_w[k];
		if (kind == S_PASS_ZC)
			__builtin_prefetch(slot + 64, 0, 3);
	}
	/* Copied once the pins are confirmed, as cistern's gather does. */
	for (unsigned k = 0; get && k < S_AHEAD; k++)
		pass_prefetch_row(arr + (size_t)idx[k] * S_PASS_STRIDE);
	for (unsigned k = 0; k < S_BATCH; k++) {
		unsigned char *slot = arr + (size_t)idx[k] * S_PASS_STRIDE;
		const unsigned char *row = slot + 64;
		if (get) {
			if (k + S_AHEAD < S_BATCH)
				pass_prefetch_row(arr + (size_t)idx[k + S_AHEAD] * S_PASS_STRIDE);
			memcpy(batch + (size_t)k * S_SIZE, row, S_SIZE);
			row = batch + (size_t)k * S_SIZE;
		}
		*bad += !tag_ok(*(const uint64_t *)row);
		volatile struct pass_meta *m = (volatile struct pass_meta *)slot;
		m->seen = m->seen + 1;
		m->pins = m->pins & ~(uint64_t)1;
	}
}

/*
 * One batch of an optimistic reader's passes over arr: no pins. Draw the
 * members with their metadata line and row prefetched 16 ahead, load each
 * state word and copy the row out at once, one acquire fence, then look at
 * each state word again (a changed word would void the copy) and count
 * each seen: in its metadata line, or in seen_apart[] (an array of
 * 4-byte counts, small enough to stay in cache) when that is given.
 */
static void optimistic_batch(unsigned char *arr, unsigned char *batch, uint32_t *seen_apart,
			     uint64_t *seed, uint64_t *bad)
{
	uint32_t idx[S_BATCH], q[S_AHEAD];
	uint64_t seen_w[S_BATCH];
	for (unsigned k = 0; k < S_AHEAD; k++) {
		q[k] = (uint32_t)(rng_next(seed) % S_SLOTS);
		pass_prefetch(arr + (size_t)q[k] * S_PASS_STRIDE, true);
	}
	for (unsigned k = 0; k < S_BATCH; k++) {
		uint32_t i = q[k % S_AHEAD];
		q[k % S_AHEAD] = (uint32_t)(rng_next(seed) % S_SLOTS);
		pass_prefetch(arr + (size_t)q[k % S_AHEAD] * S_PASS_STRIDE, true);
		unsigned char *slot = arr + (size_t)i * S_PASS_STRIDE;
		seen_w[k] = __atomic_load_n(&((struct pass_meta *)slot)->word, __ATOMIC_ACQUIRE);
		memcpy(batch + (size_t)k * S_SIZE, slot + 64, S_SIZE);
		idx[k] = i;
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	for (unsigned k = 0; k < S_BATCH; k++) {
		volatile struct pass_meta *m =
			(volatile struct pass_meta *)(arr + (size_t)idx[k] * S_PASS_STRIDE);
		*bad += m->word != seen_w[k];
		*bad += !tag_ok(*(const uint64_t *)(batch + (size_t)k * S_SIZE));
		if (seen_apart)
			seen_apart[idx[k]]++;
		else
			m->seen = m->seen + 1;
	}
}

/*
 * One batch of an optimistic reader over plain rows (S_SIZE apart) whose
 * state words and seen counts live in ents[]: draw the members with their
 * rows and entries prefetched 16 ahead, load each word and copy its row,
 * one acquire fence, then look at each word again and count each seen.
 */
static void words_apart_batch(unsigned char *arr, unsigned char *batch, struct word_ent *ents,
			      uint64_t *seed, uint64_t *bad)
{
	uint32_t idx[S_BATCH], q[S_AHEAD];
	uint32_t seen_w[S_BATCH];
	for (unsigned k = 0; k < S_AHEAD; k++) {
		q[k] = (uint32_t)(rng_next(seed) % S_SLOTS);
		__builtin_prefetch(&ents[q[k]], 1, 3);
		for (unsigned l = 0; l < S_SIZE / 64; l++)
			__builtin_prefetch(arr + (size_t)q[k] * S_SIZE + l * 64, 0, 3);
	}
	for (unsigned k = 0; k < S_BATCH; k++) {
		uint32_t i = q[k % S_AHEAD];
		uint32_t nx = (uint32_t)(rng_next(seed) % S_SLOTS);
		q[k % S_AHEAD] = nx;
		__builtin_prefetch(&ents[nx], 1, 3);
		for (unsigned l = 0; l < S_SIZE / 64; l++)
			__builtin_prefetch(arr + (size_t)nx * S_SIZE + l * 64, 0, 3);
		seen_w[k] = __atomic_load_n(&ents[i].word, __ATOMIC_ACQUIRE);
		memcpy(batch + (size_t)k * S_SIZE, arr + (size_t)i * S_SIZE, S_SIZE);
		idx[k] = i;
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	for (unsigned k = 0; k < S_BATCH; k++) {
		volatile struct word_ent *e = &ents[idx[k]];
		*bad += e->word != seen_w[k];
		*bad += !tag_ok(*(const uint64_t *)(batch + (size_t)k * S_SIZE));
		e->seen = e->seen + 1;
	}
}

/* One batch of the contender; adds damaged samples to *bad. 0 or -1 (error recorded). */
static int one_batch(struct samp *s, struct cistern *c, struct cistern_sample *held,
		     unsigned char *batch, unsigned char *arr, uint32_t *seen_apart, uint64_t *seed,
		     uint64_t *bad)
{
	int rc;
	if (s->kind == S_GATHER) {
		for (unsigned k = 0; k < S_BATCH; k++) {
			uint64_t i = rng_next(seed) % S_SLOTS;
			memcpy(batch + (size_t)k * S_SIZE, arr + i * S_SIZE, S_SIZE);
		}
		for (unsigned k = 0; k < S_BATCH; k++)
			*bad += !tag_ok(*(const uint64_t *)(batch + (size_t)k * S_SIZE));
	} else if (s->kind == S_TOUCH_PF || s->kind == S_GATHER_PF) {
		uint32_t idx[S_BATCH];
		for (unsigned k = 0; k < S_BATCH; k++)
			idx[k] = (uint32_t)(rng_next(seed) % S_SLOTS);
		for (unsigned k = 0; k < S_BATCH; k++) {
			if (k + S_AHEAD < S_BATCH) {
				const unsigned char *row = arr + (size_t)idx[k + S_AHEAD] * S_SIZE;
				unsigned lines = s->kind == S_GATHER_PF ? S_SIZE / 64 : 1;
				for (unsigned l = 0; l < lines; l++)
					__builtin_prefetch(row + l * 64, 0, 3);
			}
			const unsigned char *row = arr + (size_t)idx[k] * S_SIZE;
			if (s->kind == S_GATHER_PF) {
				memcpy(batch + (size_t)k * S_SIZE, row, S_SIZE);
				row = batch + (size_t)k * S_SIZE;
			}
			*bad += !tag_ok(*(const uint64_t *)row);
		}
	} else if (pinning_passes(s->kind)) {
		pass_batch(s->kind, arr, batch, seed, bad);
	} else if (optimistic_passes(s->kind)) {
		optimistic_batch(arr, batch, seen_apart, seed, bad);
	} else if (s->kind == S_OPT_WORDS) {
		words_apart_batch(arr, batch, (struct word_ent *)seen_apart, seed, bad);
	} else if (s->kind == S_CIS_ZC || s->kind == S_CIS_ZC2) {
		rc = cistern_acquire_batch(c, held, S_BATCH, 1000);
		if (rc != (int)S_BATCH) {
			ctl_error(s->c, 0, "cistern_acquire_batch: %s",
				  rc < 0 ? cistern_strerror(rc) : "short batch");
			return -1;
		}
		for (unsigned k = 0; k < S_BATCH; k++)
			*bad += held[k].len != S_SIZE || !tag_ok(*(const uint64_t *)held[k].data);
		rc = cistern_release_batch(c, held, S_BATCH);
		if (rc < 0) {
			ctl_error(s->c, 0, "cistern_release_batch: %s", cistern_strerror(rc));
			return -1;
		}
	} else if (s->kind == S_CIS_GET || s->kind == S_CIS_GET2) {
		rc = cistern_get_batch(c, batch, S_SIZE, S_BATCH, NULL, NULL, 1000);
		if (rc != (int)S_BATCH) {
			ctl_error(s->c, 0, "cistern_get_batch: %s",
				  rc < 0 ? cistern_strerror(rc) : "short batch");
			return -1;
		}
		for (unsigned k = 0; k < S_BATCH; k++)
			*bad += !tag_ok(*(const uint64_t *)(batch + (size_t)k * S_SIZE));
	} else {
		/* One sample at a time: the cost of a call per sample. */
		for (unsigned k = 0; k < S_BATCH; k++) {
			rc = cistern_acquire(c, &held[k], 1000);
			if (rc < 0) {
				ctl_error(s->c, 0, "cistern_acquire: %s", cistern_strerror(rc));
				return -1;
			}
			*bad += held[k].len != S_SIZE || !tag_ok(*(const uint64_t *)held[k].data);
		}
		for (unsigned k = 0; k < S_BATCH; k++) {
			rc = cistern_release(c, &held[k]);
			if (rc < 0) {
				ctl_error(s->c, 0, "cistern_release: %s", cistern_strerror(rc));
				return -1;
			}
		}
	}
	return 0;
}

/*
 * For the rows with a second reader: attach another handle in this process and
 * read once with each, so that neither holds a reservoir's lone-reader role
 * and both read as any number of readers do. 0, or -1 (error recorded).
 */
static int second_reader(struct samp *s, struct cistern *c, struct cistern **c2)
{
	struct cistern_sample one;
	int rc = cistern_attach(s->name, c2);
	if (rc < 0) {
		*c2 = NULL;
		ctl_error(s->c, 0, "cistern_attach (second reader): %s", cistern_strerror(rc));
		return -1;
	}
	struct cistern *h[2] = {*c2, c};
	for (int i = 0; i < 2; i++) {
		rc = cistern_acquire(h[i], &one, 1000);
		if (rc >= 0)
			rc = cistern_release(h[i], &one);
		if (rc < 0) {
			ctl_error(s->c, 0, "cistern_acquire/release (reader %d): %s", i + 1,
				  cistern_strerror(rc));
			return -1;
		}
	}
	return 0;
}

/*
 * The reader process. It builds its own table (C gather) or attaches (cistern),
 * then runs warm-up batches until every page has most likely been touched, so
 * that the measured batches see a warm process, as a long-lived learner would.
 */
static int samp_child(int role, int idx, void *arg)
{
	struct samp *s = arg;
	uint64_t batches = s->c->per_producer, bad = 0, seed = 0x1234567 + (uint64_t)getpid();
	uint64_t warm = 2 * S_SLOTS / S_BATCH;
	unsigned char *batch = NULL, *arr = NULL;
	uint32_t *seen_apart = NULL;
	struct cistern *c = NULL, *c2 = NULL;
	struct cistern_sample *held = NULL;
	int rc, ret = 1;
	(void)role;
	(void)idx;

	pin_cpu(1);
	if (posix_memalign((void **)&batch, 4096, (size_t)S_BATCH * S_SIZE) != 0)
		return 1;
	memset(batch, 0, (size_t)S_BATCH * S_SIZE);
	if (plain_array(s->kind)) {
		bool pass = slot_layout(s->kind);
		size_t stride = pass ? S_PASS_STRIDE : S_SIZE, off = pass ? 64 : 0;
		/* Aligned as a segment's slots (and torch's rows) are: malloc's would start 16 bytes into a line. */
		if (posix_memalign((void **)&arr, 4096, (size_t)S_SLOTS * stride) != 0) {
			arr = NULL;
			goto out;
		}
		for (uint64_t i = 0; i < S_SLOTS; i++) {
			memset(arr + i * stride, 0, off);
			fill_sample(arr + i * stride + off, i);
		}
		if (s->kind == S_OPT_APART && !(seen_apart = calloc(S_SLOTS, sizeof *seen_apart)))
			goto out;
		/* Two counts a row: the state word and the seen count. */
		if (s->kind == S_OPT_WORDS &&
		    !(seen_apart = calloc(S_SLOTS, sizeof(struct word_ent))))
			goto out;
	} else {
		rc = cistern_attach(s->name, &c);
		if (rc < 0) {
			ctl_error(s->c, 0, "cistern_attach: %s", cistern_strerror(rc));
			goto out;
		}
		held = calloc(S_BATCH, sizeof *held);
		if (!held)
			goto out;
		if ((s->kind == S_CIS_ZC2 || s->kind == S_CIS_GET2) && second_reader(s, c, &c2) < 0)
			goto out;
	}
	for (uint64_t b = 0; b < warm; b++)
		if (one_batch(s, c, held, batch, arr, seen_apart, &seed, &bad) < 0)
			goto out;
	bad = 0;
	ctl_child_ready(s->c);
	for (uint64_t b = 0; b < batches; b++)
		if (one_batch(s, c, held, batch, arr, seen_apart, &seed, &bad) < 0)
			goto out;
	s->c->rd[0].t_end = now_ns();
	s->c->rd[0].count = batches;
	s->c->rd[0].bad = bad;
	ret = 0;
out:
	if (c2)
		cistern_detach(c2);
	if (c)
		cistern_detach(c);
	free(held);
	free(seen_apart);
	free(arr);
	free(batch);
	return ret;
}

static int samp_run(struct samp *proto, uint64_t batches, double *kbps, char *err, size_t cap)
{
	struct samp s = *proto;
	s.c = ctl_new(1, 0, batches);
	struct run_hooks h = {
		.fn = samp_child,
		.arg = &s,
		.timeout_ns = (uint64_t)(g_opt.target_s * 40 * 1e9) + 30000000000ull,
	};
	uint64_t t0 = 0;
	int rc = run_children(s.c, &h, &t0);
	err[0] = 0;
	if (s.c->err[0][0])
		snprintf(err, cap, "%s", s.c->err[0]);
	else if (rc != 0)
		snprintf(err, cap, "the reader failed");
	else if (s.c->rd[0].count != batches || s.c->rd[0].bad)
		snprintf(err, cap, "INVALID: %llu bad samples", (unsigned long long)s.c->rd[0].bad);
	else
		*kbps = (double)batches / ((double)(s.c->rd[0].t_end - t0) / 1e9) / 1e3;
	ctl_free(s.c);
	return err[0] ? -1 : 0;
}

/* Create and fill a segment with policy p. 0, or a negative errno. */
static int make_segment(enum cistern_policy p, uint32_t flags, char *name, size_t cap,
			struct cistern **out)
{
	struct cistern_config cfg = {0};
	cfg.flags = flags;
	unsigned char buf[S_SIZE];
	cfg.slot_size = S_SIZE;
	cfg.slot_count = S_SLOTS;
	cfg.policy = p;
	cfg.watermark = S_SLOTS;
	cfg.batch_size = S_BATCH;
	cfg.seed = 42;
	bench_name(name, cap, "res");
	int rc = cistern_create(name, &cfg, out);
	if (rc < 0)
		return rc;
	cleanup_register(name);
	for (uint64_t i = 0; i < S_SLOTS; i++) {
		fill_sample(buf, i);
		rc = cistern_put(*out, buf, S_SIZE, NULL, 0);
		if (rc < 0) {
			cistern_detach(*out);
			cistern_unlink(name);
			cleanup_forget(name);
			*out = NULL;
			return rc;
		}
	}
	return 0;
}

/* Python peers: parse "ROW\t<contender>\t<v1,v2,...>" lines (k batches/s). */
static void python_peers(const char *section, int ref)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd,
		 "'%s' '%s' --reps %d --target-s %g --slots %u --slot-size %u --batch %u",
		 g_opt.python, g_opt.py, g_opt.reps, g_opt.target_s, S_SLOTS, S_SIZE, S_BATCH);
	progress("[%s] running %s", section, cmd);
	fflush(NULL);
	FILE *f = popen(cmd, "r");
	int got = 0;
	if (f) {
		char line[4096];
		while (fgets(line, sizeof line, f)) {
			line[strcspn(line, "\n")] = 0;
			if (strncmp(line, "ROW\t", 4) == 0) {
				char *name = line + 4, *vals = strchr(name, '\t');
				if (!vals)
					continue;
				*vals++ = 0;
				int r = row_add(section, name, "batches", "k batches/s",
						HIGHER_BETTER);
				row_ref(r, ref, 0);
				if (strncmp(vals, "n/a", 3) == 0 || strncmp(vals, "ERR", 3) == 0) {
					row_note(r, "%s", vals);
				} else {
					for (char *t = strtok(vals, ","); t; t = strtok(NULL, ","))
						row_push(r, atof(t));
				}
				if (strstr(name, "index_select") && strstr(name, "randint"))
					g_bars.s4_torch = r;
				else if (strstr(name, "index_select"))
					g_bars.s4_torch_fixed = r;
				got++;
			} else if (line[0]) {
				progress("[%s] python: %s", section, line);
			}
		}
		int st = pclose(f);
		if (st != 0)
			progress("[%s] python peers exited with status %d", section, st);
	}
	if (!got) {
		int r = row_add(section, "torch / numpy peers", "batches", "", HIGHER_BETTER);
		row_note(r, "ERR: %s did not run (see stderr)", g_opt.py);
	}
}

void sec_sample(void)
{
	const char *section = "4. batch 256 x 256 B of 100k";
	struct {
		const char *label;
		enum skind kind;
		enum cistern_policy pol; /* for cistern kinds */
		uint32_t flags;          /* the segment's CISTERN_SINGLE_READER, or 0 */
		int row;
		uint64_t batches;
		char name[80];
		struct cistern *h;
	} t[] = {
		{"cistern batch_reservoir zero-copy, SINGLE_READER (acquire_batch/release_batch)",
		 S_CIS_ZC, CISTERN_BATCH_RESERVOIR, CISTERN_SINGLE_READER, -1, 0, "", NULL},
		{"cistern batch_reservoir gathered, SINGLE_READER (get_batch)", S_CIS_GET,
		 CISTERN_BATCH_RESERVOIR, CISTERN_SINGLE_READER, -1, 0, "", NULL},
		{"cistern batch_reservoir zero-copy (acquire_batch/release_batch)", S_CIS_ZC,
		 CISTERN_BATCH_RESERVOIR, 0, -1, 0, "", NULL},
		{"cistern batch_reservoir gathered (get_batch)", S_CIS_GET, CISTERN_BATCH_RESERVOIR,
		 0, -1, 0, "", NULL},
		{"cistern reservoir zero-copy (acquire_batch/release_batch)", S_CIS_ZC,
		 CISTERN_RESERVOIR, 0, -1, 0, "", NULL},
		{"cistern reservoir gathered (get_batch)", S_CIS_GET, CISTERN_RESERVOIR, 0, -1, 0,
		 "", NULL},
		{"cistern reservoir acquire/release one at a time x256", S_CIS_ONE,
		 CISTERN_RESERVOIR, 0, -1, 0, "", NULL},
		{"C gather baseline (memcpy 256 random rows of a plain array)", S_GATHER,
		 CISTERN_FIFO, 0, -1, 0, "", NULL},
		{"floor, no library: tag word of 256 random rows, prefetched 16 ahead", S_TOUCH_PF,
		 CISTERN_FIFO, 0, -1, 0, "", NULL},
		{"floor, no library: memcpy 256 random rows, prefetched 16 ahead", S_GATHER_PF,
		 CISTERN_FIFO, 0, -1, 0, "", NULL},
		{"floor, no library: a pinning reader's passes, rows read in place", S_PASS_ZC,
		 CISTERN_FIFO, 0, -1, 0, "", NULL},
		{"floor, no library: a pinning reader's passes, rows copied out", S_PASS_GET,
		 CISTERN_FIFO, 0, -1, 0, "", NULL},
		{"floor, no library: an optimistic reader's passes, rows copied out", S_OPT_GET,
		 CISTERN_FIFO, 0, -1, 0, "", NULL},
		{"floor, no library: an optimistic reader's passes, seen counts in an array apart",
		 S_OPT_APART, CISTERN_FIFO, 0, -1, 0, "", NULL},
		{"floor, no library: an optimistic reader's passes, words and seen counts apart",
		 S_OPT_WORDS, CISTERN_FIFO, 0, -1, 0, "", NULL},
		{"cistern reservoir zero-copy, a second reader attached", S_CIS_ZC2,
		 CISTERN_RESERVOIR, 0, -1, 0, "", NULL},
		{"cistern reservoir gathered, a second reader attached", S_CIS_GET2,
		 CISTERN_RESERVOIR, 0, -1, 0, "", NULL},
	};
	int n = (int)(sizeof t / sizeof t[0]);
	char err[160];

	int ref = -1;
	for (int i = 0; i < n; i++) {
		t[i].row = row_add(section, t[i].label, "batches", "k batches/s", HIGHER_BETTER);
		if (i == 0)
			ref = t[i].row;
		row_ref(t[i].row, ref, 0);
	}
	g_bars.s4_zc = t[0].row;
	g_bars.s4_gather = t[1].row;
	g_bars.s4_zc_any = t[2].row;
	g_bars.s4_gather_any = t[3].row;
	for (int i = 0; i < n; i++) {
		if (t[i].kind == S_TOUCH_PF)
			g_bars.s4_floor_zc = t[i].row;
		if (t[i].kind == S_GATHER_PF)
			g_bars.s4_floor_gather = t[i].row;
		if (t[i].kind == S_PASS_ZC)
			g_bars.s4_pass_zc = t[i].row;
		if (t[i].kind == S_PASS_GET)
			g_bars.s4_pass_gather = t[i].row;
		if (t[i].kind == S_OPT_GET)
			g_bars.s4_opt_gather = t[i].row;
		if (t[i].kind == S_OPT_APART)
			g_bars.s4_opt_apart = t[i].row;
		if (t[i].kind == S_OPT_WORDS)
			g_bars.s4_opt_words = t[i].row;
		if (t[i].kind == S_CIS_GET && t[i].pol == CISTERN_RESERVOIR)
			g_bars.s4_gather_rs = t[i].row;
		if (t[i].kind == S_CIS_ZC2)
			g_bars.s4_zc_two = t[i].row;
		if (t[i].kind == S_CIS_GET2)
			g_bars.s4_gather_two = t[i].row;
	}

	for (int i = 0; i < n; i++) {
		struct samp s = {.kind = t[i].kind, .name = t[i].name};
		double k = 0;
		if (!plain_array(t[i].kind)) {
			/* The rows of one policy and flags share the segment of their first row. */
			int first = i;
			while (first > 0 && !plain_array(t[first - 1].kind) &&
			       t[first - 1].pol == t[i].pol && t[first - 1].flags == t[i].flags)
				first--;
			if (first != i) {
				if (!t[first].h) {
					row_note(t[i].row, "%s", row_get(t[first].row)->note);
					continue;
				}
				snprintf(t[i].name, sizeof t[i].name, "%s", t[first].name);
			} else {
				const char *fl = t[i].flags ? ", SINGLE_READER"
						 : t[i].kind == S_CIS_ZC2 || t[i].kind == S_CIS_GET2
							 ? ", second-reader rows"
							 : "";
				progress("[%s] filling a %s%s segment", section,
					 cistern_policy_name(t[i].pol), fl);
				uint64_t f0 = now_ns();
				int rc = make_segment(t[i].pol, t[i].flags, t[i].name,
						      sizeof t[i].name, &t[i].h);
				if (rc == 0) {
					char lab[112];
					snprintf(
						lab, sizeof lab,
						"cistern %s%s: create + fill 100k (setup, one run)",
						cistern_policy_name(t[i].pol), fl);
					int fr = row_add(section, lab, "time", "ms", LOWER_BETTER);
					row_push(fr, (double)(now_ns() - f0) / 1e6);
				}
				if (rc == -ENOTSUP) {
					row_note(t[i].row, "n/a: policy not implemented");
					continue;
				}
				if (rc < 0) {
					row_note(t[i].row, "ERR: create/fill: %s",
						 cistern_strerror(rc));
					continue;
				}
			}
		}
		progress("[%s] calibrating %s", section, t[i].label);
		if (samp_run(&s, g_opt.quick ? 50 : 200, &k, err, sizeof err) < 0) {
			row_note(t[i].row, "ERR: %s", err);
			continue;
		}
		double want = k * 1e3 * g_opt.target_s;
		t[i].batches = want < 20 ? 20 : (uint64_t)want;
	}
	for (int rep = 0; rep < g_opt.reps; rep++)
		for (int i = 0; i < n; i++) {
			struct samp s = {.kind = t[i].kind, .name = t[i].name};
			double k = 0;
			if (!t[i].batches)
				continue;
			if (samp_run(&s, t[i].batches, &k, err, sizeof err) < 0) {
				row_note(t[i].row, "ERR: %s", err);
				t[i].batches = 0;
				continue;
			}
			row_push(t[i].row, k);
			progress("[%s] rep %d/%d %s: %.2f k batches/s", section, rep + 1,
				 g_opt.reps, t[i].label, k);
		}
	for (int i = 0; i < n; i++)
		if (t[i].h) {
			cistern_detach(t[i].h);
			cistern_unlink(t[i].name);
			cleanup_forget(t[i].name);
		}
	python_peers(section, ref);
}
