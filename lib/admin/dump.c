/* SPDX-License-Identifier: MIT */
/*
 * dump.c - a snapshot of a segment into a file (the format: dump_format.h).
 *
 * Dumping never attaches: it maps the segment read-only. For each held slot
 * (COMMITTED or REDELIVER, see cistern_snap_ops.classify) it remembers the
 * state word, copies metadata and payload into a staging buffer, then loads
 * the word again; if it changed the copy may be torn and is dropped (counted
 * as skipped). A slot's word changes whenever its sample leaves, so a kept
 * copy is a whole sample. Producers and readers never wait for the dump.
 *
 * A segment someone else may shrink is not mapped at all (a copied handle,
 * open.h): there the same three reads are pread() calls of the object,
 * whose short count says it shrank, where a mapping would raise SIGBUS.
 */
#include <errno.h>
#include <fcntl.h>
#include <roaring/roaring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "admin/dump_format.h"
#include "admin/dump_io.h"
#include "core/wait.h"
#include "core/policy.h"
#include "core/open.h"
#include "admin/dump.h"
#include "sys/crc32c.h"
#include "sys/fence.h"
#include "sys/rng.h"
#include "cistern/admin.h"

struct held {
	uint64_t id;
	uint64_t word;
	uint32_t index;
};

/* A copied handle: read slot idx's metadata line from the object into the copy. */
static int read_line(struct cistern *c, uint32_t idx)
{
	const struct cistern_fixed *f = &c->fixed;
	return cistern__pread_all(c->fd, cistern__slotmeta(c, idx), sizeof(struct cistern_slotmeta),
				  f->meta_off + idx * f->meta_stride);
}

/* A copied handle: the first len bytes of slot idx's payload, from the object into `to`. */
static int read_payload(struct cistern *c, uint32_t idx, void *to, size_t len)
{
	const struct cistern_fixed *f = &c->fixed;
	return cistern__pread_all(c->fd, to, len, f->arena_off + idx * f->slot_stride);
}

/* A copied handle: slot idx's word as the object holds it now, into *word. */
static int read_word(struct cistern *c, uint32_t idx, uint64_t *word)
{
	const struct cistern_fixed *f = &c->fixed;
	return cistern__pread_all(c->fd, word, sizeof(*word),
				  f->meta_off + idx * f->meta_stride +
					  offsetof(struct cistern_slotmeta, word));
}

static int by_id(const void *a, const void *b)
{
	uint64_t x = ((const struct held *)a)->id, y = ((const struct held *)b)->id;
	return x < y ? -1 : x > y;
}

/* Next id a restored segment must hand out: above every id this one gave. */
static uint64_t next_id_of(struct cistern *c, uint64_t max_held)
{
	struct cistern_hdr *h = c->hdr;
	/* FIFO derives ids from positions, other policies count them: take both.
	 * Acquire, no edge: each is a bound, read once; nothing is read after them. */
	uint64_t a = atomic_load_explicit(&h->tail, memory_order_acquire) + c->id_base;
	uint64_t b = atomic_load_explicit(&h->next_sample_id, memory_order_acquire);
	uint64_t n = a > b ? a : b;
	return n > max_held ? n : max_held + 1;
}

static int dump_samples(struct cistern *c, const struct cistern_snap_ops *so, struct io_writer *w,
			struct dump_meta *m, roaring_bitmap_t *seen, bool dead_held,
			cistern_progress_fn progress, void *arg)
{
	/* Pass 1: which slots hold samples, and their ids, so records go out in id order. */
	size_t n = 0, cap = 1024;
	struct held *v = malloc(cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *sm = cistern__slotmeta(c, i);
		/* Acquire, no edge: only the state and id are kept; pass 2 reads again. */
		uint64_t word = atomic_load_explicit(&sm->word, memory_order_acquire);
		if (dead_held ? !cistern__held_once_reclaimed(so, word)
			      : !(so->classify(word).cls == CISTERN_SLOT_COMMITTED ||
				  so->classify(word).cls == CISTERN_SLOT_REDELIVER))
			continue;
		if (n == cap) {
			struct held *nv = realloc(v, 2 * cap * sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
			cap *= 2;
		}
		v[n++] = (struct held){sm->sample_id, word, (uint32_t)i};
	}
	qsort(v, n, sizeof(*v), by_id);
	/*
	 * Fault the arena in with one call: touching a fresh read-only mapping
	 * page by page costs a fault per 4 KiB, which dominated dump time. Old
	 * kernels refuse the advice; the copy below then faults as before.
	 */
	if (!c->copied) {
		/* The advice takes pages. */
		char *from = (char *)((uintptr_t)c->arena & ~(uintptr_t)4095);
		madvise(from, (size_t)(c->arena + c->slot_count * c->slot_stride - from),
			MADV_POPULATE_READ);
	}
	uint64_t max_id = 0;
	uint32_t crc = 0;
	const size_t hdr = dump_rec_hdr(m->version);

	/* Pass 2: copy each, keep it only if its word did not move meanwhile. */
	for (size_t k = 0; k < n; k++) {
		struct cistern_slotmeta *sm = cistern__slotmeta(c, v[k].index);
		int r = c->copied ? read_line(c, v[k].index) : 0;
		if (r < 0) {
			free(v);
			return r;
		}
		/* A copied handle: the acquire below, for the kernel's copy of the line. */
		if (c->copied)
			cistern__load_fence();
		/* [rs-held] acquire (or the FIFO's commit): metadata and payload after it. */
		uint64_t word = atomic_load_explicit(&sm->word, memory_order_acquire);
		uint64_t len = sm->len;
		uint64_t id = sm->sample_id;
		uint32_t sim = sm->sim_id, step = sm->time_step, fl = sm->flags;
		uint32_t nseen = dead_held ? cistern__seen_once_reclaimed(c, sm, word, so)
					   : atomic_load_explicit(&sm->seen, memory_order_relaxed);
		bool ok = word == v[k].word && len <= c->slot_size;
		uint8_t *p = cistern__io_w_room(w,
						hdr + cistern__align_up(ok ? (size_t)len : 0, 8));
		if (!p) {
			free(v);
			return w->err;
		}
		if (ok && c->copied)
			r = read_payload(c, v[k].index, p + hdr, (size_t)len);
		else if (ok)
			memcpy(p + hdr, cistern__payload(c, v[k].index), (size_t)len);
		/*
		 * [dump-recheck] every read above happens before this second look
		 * at the word, which the claims that move a slot word before any
		 * byte of it is written ([rs-fill], [pin-evict] and the FIFO's)
		 * would have changed. A copied handle's reads are the kernel's copies in
		 * the pread() calls this thread made, which the fence orders too.
		 */
		cistern__load_fence();
		uint64_t now = 0;
		if (!c->copied)
			now = atomic_load_explicit(&sm->word, memory_order_relaxed);
		else if (r == 0)
			r = read_word(c, v[k].index, &now);
		if (r < 0) {
			free(v);
			return r;
		}
		ok = ok && now == word;
		if (!ok) {
			m->skipped++;
			continue;
		}
		struct dump_rec dr = {.id = id,
				      .len = len,
				      .sim_id = sim,
				      .time_step = step,
				      .seen = nseen,
				      .src = v[k].index,
				      .flags = fl & cistern__kept_flags(c->policy)};
		dump_rec_encode(p, m->version, &dr);
		size_t rec = hdr + cistern__align_up((size_t)len, 8);
		memset(p + hdr + len, 0, rec - hdr - (size_t)len);
		crc = cistern__crc32c(crc, p, rec);
		cistern__io_w_keep(w, p, rec);
		m->samples_size += rec;
		m->sample_count++;
		m->payload_bytes += len;
		if (id > max_id)
			max_id = id;
		if (nseen >= 1)
			roaring_bitmap_add(seen, v[k].index);
		if (progress && (k % 256 == 255 || k + 1 == n))
			progress(k + 1, n, arg);
	}
	free(v);
	m->samples_crc = crc;
	m->next_id = next_id_of(c, m->sample_count ? max_id : 0);
	return 0;
}

/* The cold section's writer: records go out as the tier hands them over. */
struct cold_out {
	struct io_writer *w;
	struct dump_meta *m;
	uint64_t max_id;
	uint32_t crc;
};

static int cold_record(const struct cistern__cold_sample *s, void *arg)
{
	struct cold_out *o = arg;
	size_t rec = COLD_REC_HDR + cistern__align_up(s->len, 8);
	uint8_t *p = cistern__io_w_room(o->w, rec);
	if (!p)
		return o->w->err;
	struct dump_cold_rec r = {
		.id = s->id, .len = s->len, .seen = s->seen, .slot = (uint32_t)s->slot};
	memcpy(r.meta, s->meta, sizeof(r.meta));
	dump_cold_rec_encode(p, &r);
	memcpy(p + COLD_REC_HDR, s->data, s->len);
	memset(p + COLD_REC_HDR + s->len, 0, rec - COLD_REC_HDR - s->len);
	o->crc = cistern__crc32c(o->crc, p, rec);
	cistern__io_w_keep(o->w, p, rec);
	o->m->cold_size += rec;
	o->m->cold_count++;
	o->m->cold_payload += s->len;
	if (s->id > o->max_id)
		o->max_id = s->id;
	return 0;
}

/*
 * The cold section (dump_format.h) of a segment with a cold tier: its header
 * and dir, then each cold sample the tier reads back whole.
 */
static int dump_cold(struct cistern *c, struct io_writer *w, struct dump_meta *m, bool dead_held)
{
	const struct cistern__tiering *tg = c->policy->tiering;
	struct cistern__tier_counts n = {0};
	tg->counts(c, &n);
	m->cold_spilled = n.spilled;
	m->cold_reads = n.cold_reads;
	m->cold_evictions = n.cold_evictions;
	snprintf(m->cold_dir, sizeof(m->cold_dir), "%s", c->fixed.cold_dir);
	uint8_t hdr[COLD_HDR + CISTERN_COLD_DIR_MAX + 8];
	size_t len;
	cistern__dump_cold_header(m, hdr, &len);
	int r = cistern__io_w_append(w, hdr, len);
	if (r < 0)
		return r;
	m->cold_size = len;
	struct cold_out o = {w, m, 0, cistern__crc32c(0, hdr, len)};
	r = tg->dump(c, dead_held, cold_record, &o, &m->skipped);
	if (r < 0)
		return r;
	m->cold_crc = o.crc;
	if (m->cold_count && o.max_id >= m->next_id)
		m->next_id = o.max_id + 1;
	return 0;
}

bool cistern__held_once_reclaimed(const struct cistern_snap_ops *so, uint64_t word)
{
	enum cistern_slot_class cls = so->classify(word).cls;
	return cls == CISTERN_SLOT_COMMITTED || cls == CISTERN_SLOT_REDELIVER ||
	       cls == CISTERN_SLOT_ACQUIRED || cls == CISTERN_SLOT_EVICTING;
}

uint32_t cistern__seen_once_reclaimed(const struct cistern *c, const struct cistern_slotmeta *m,
				      uint64_t word, const struct cistern_snap_ops *so)
{
	uint32_t seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
	if (!c->policy->counts_reads)
		return seen; /* FIFO counts no reads: its reclaim leaves seen alone */
	uint64_t undone = (uint64_t)__builtin_popcountll(
				  atomic_load_explicit(&m->pins, memory_order_relaxed)) +
			  (so->classify(word).cls == CISTERN_SLOT_ACQUIRED);
	return seen > undone ? (uint32_t)(seen - undone) : 0;
}

/*
 * Create the temporary file next to `path` that the dump is written to,
 * under a name nobody can take first (PATH.tmp.RANDOM, exclusively), trying
 * another on the rare collision. Its name goes to tmp.
 */
static int open_temp(const char *path, mode_t mode, char *tmp, size_t size)
{
	for (int tries = 0; tries < CISTERN__TEMP_TRIES; tries++) {
		if (snprintf(tmp, size, "%s.tmp.%016llx", path,
			     (unsigned long long)cistern__unguessable()) >= (int)size)
			return -ENAMETOOLONG;
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
		if (fd >= 0 || errno != EEXIST)
			return fd >= 0 ? fd : -errno;
	}
	return -EEXIST;
}

/* Put the finished file in place: over an older one, or (NOREPLACE) never. */
static int publish(const char *tmp, const char *path, unsigned flags)
{
	if (!(flags & CISTERN__DUMP_NOREPLACE))
		return rename(tmp, path) < 0 ? -errno : 0;
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	/* A file system without the flag: link() refuses an existing name just as well. */
	if (link(tmp, path) < 0)
		return -errno;
	unlink(tmp);
	return 0;
}

int cistern__dump_handle(struct cistern *c, const char *name, const char *path, unsigned flags,
			 cistern_progress_fn progress, void *arg, struct cistern_dump_info *info)
{
	int r;
	const struct cistern_snap_ops *so = c->policy->snap;
	/* A cold tier's samples are read back through the tier's hooks. */
	bool tiered = c->fixed.cold_slots != 0;
	if (!so || (tiered && (!c->policy->tiering || !c->policy->tiering->dump)))
		return -ENOTSUP;
	/* A copied handle: which slots hold samples, as the object says now (pass 1). */
	r = cistern__refresh(c, CISTERN__COPY_TABLES | CISTERN__COPY_SLOTS);
	if (r < 0)
		return r;
	struct dump_meta m;
	memset(&m, 0, sizeof(m));
	cistern_config_get(c, &m.cfg);
	if (m.cfg.schema) {
		snprintf(m.schema, sizeof(m.schema), "%s", m.cfg.schema);
		m.cfg.schema = m.schema;
	}
	/*
	 * The oldest format that holds the segment whole, which older builds
	 * read: 4 where a put keeps flags (cistern__kept_flags()), 3 for a
	 * cold tier, else 2.
	 */
	m.version = cistern__kept_flags(c->policy) ? 4 : tiered ? 3 : 2;
	/*
	 * The permission bits come from the object as it is now, not from the
	 * header, which keeps those given at creation: a chmod since then must
	 * reach the dump file and the segment a restore makes from it.
	 */
	struct stat st;
	if (fstat(c->fd, &st) < 0)
		return -errno;
	m.cfg.mode = (uint32_t)st.st_mode & 0777;
	if ((r = cistern_stats_get(c, &m.st)) < 0)
		return r;
	snprintf(m.name, sizeof(m.name), "%s", name);
	m.created_ns = c->fixed.created_ns;
	m.dumped_ns = (uint64_t)cistern__now_ns(CLOCK_REALTIME);
	/* [close], [producers-ended]: figures for the record; acquire orders nothing more. */
	m.closed = atomic_load_explicit(&c->hdr->closed, memory_order_acquire);
	m.producers_done = atomic_load_explicit(&c->hdr->producers_done, memory_order_acquire);
	m.producers_died = m.st.producers_died;

	/* Write next to the target and rename: a failed dump leaves the old file alone. */
	char tmp[4096];
	/* The dump holds the samples: keep it as private as the segment. */
	int fd = open_temp(path, (m.cfg.mode & 0666) | 0600, tmp, sizeof(tmp));
	if (fd < 0)
		return fd;
	struct io_writer w;
	roaring_bitmap_t *seen = NULL;
	char *bm = NULL;
	/* Every slot held, plus room for the seen set, the meta block and the trailer. */
	uint64_t expect = PREAMBLE_SIZE +
			  c->slot_count * (REC_HDR_V4 + cistern__align_up(c->slot_size, 8)) +
			  c->fixed.cold_slots *
				  (COLD_REC_HDR + cistern__align_up(c->slot_size, 8)) +
			  2 * c->slot_count + 4 * META_SIZE;
	r = cistern__io_w_init(
		&w, fd, flags & CISTERN__DUMP_PLAIN, flags & CISTERN__DUMP_BUFFERED,
		(tiered ? COLD_REC_HDR : REC_HDR_V4) + cistern__align_up(c->slot_size, 8), expect);
	if (r < 0)
		goto out_file;
	seen = roaring_bitmap_create();
	if (!seen) {
		r = -ENOMEM;
		goto out;
	}
	uint8_t pre[PREAMBLE_SIZE];
	memcpy(pre, DUMP_MAGIC, 8);
	put32(pre + 8, m.version);
	put32(pre + 12, PREAMBLE_SIZE);
	if ((r = cistern__io_w_append(&w, pre, sizeof(pre))) < 0)
		goto out;
	m.samples_off = PREAMBLE_SIZE;
	if ((r = dump_samples(c, so, &w, &m, seen, flags & CISTERN__DUMP_DEAD_HELD, progress,
			      arg)) < 0)
		goto out;

	roaring_bitmap_run_optimize(seen);
	m.bitmap_off = m.samples_off + m.samples_size;
	m.bitmap_size = roaring_bitmap_portable_size_in_bytes(seen);
	bm = malloc(m.bitmap_size ? m.bitmap_size : 1);
	if (!bm) {
		r = -ENOMEM;
		goto out;
	}
	if (roaring_bitmap_portable_serialize(seen, bm) != m.bitmap_size) {
		r = -EIO;
		goto out;
	}
	m.bitmap_crc = cistern__crc32c(0, bm, m.bitmap_size);
	if ((r = cistern__io_w_append(&w, bm, m.bitmap_size)) < 0)
		goto out;

	m.schema_off = m.bitmap_off + m.bitmap_size;
	m.schema_size = strlen(m.schema);
	m.schema_crc = cistern__crc32c(0, m.schema, (size_t)m.schema_size);
	if (m.schema_size && (r = cistern__io_w_append(&w, m.schema, m.schema_size)) < 0)
		goto out;
	uint64_t meta_off = m.schema_off + m.schema_size;
	if (tiered) {
		m.cold_off = meta_off;
		if ((r = dump_cold(c, &w, &m, flags & CISTERN__DUMP_DEAD_HELD)) < 0)
			goto out;
		meta_off += m.cold_size;
		/* The config a restore creates: with the tier's slots and directory. */
		m.cfg.cold_slots = c->fixed.cold_slots;
		m.cfg.cold_dir = m.cold_dir;
	}

	uint8_t mb[META_SIZE], tr[TRAILER_SIZE];
	cistern__dump_meta_encode(&m, mb);
	if ((r = cistern__io_w_append(&w, mb, sizeof(mb))) < 0)
		goto out;
	uint64_t file_size = meta_off + META_SIZE + TRAILER_SIZE;
	memset(tr, 0, sizeof(tr));
	memcpy(tr, TRAILER_MAGIC, 8);
	put64(tr + 8, file_size);
	put64(tr + 16, meta_off);
	if ((r = cistern__io_w_append(&w, tr, 24)) < 0)
		goto out;
	put32(tr + 24, w.crc);
	if ((r = cistern__io_w_append(&w, tr + 24, 8)) < 0)
		goto out;
	if ((r = cistern__io_w_finish(&w)) < 0)
		goto out;
	if ((r = publish(tmp, path, flags)) < 0)
		goto out;
	cistern__dump_info_from_meta(&m, file_size, info);
	r = 0;
out:
	cistern__io_w_destroy(&w);
out_file:
	close(fd);
	if (r < 0)
		unlink(tmp);
	free(bm);
	if (seen)
		roaring_bitmap_free(seen);
	return r;
}

int cistern__dump_ex(const char *name, const char *path, unsigned flags,
		     cistern_progress_fn progress, void *arg, struct cistern_dump_info *info)
{
	if (!path)
		return -EINVAL;
	struct cistern *c;
	int r = cistern_open_readonly(name, &c);
	if (r < 0)
		return r;
	r = cistern__dump_handle(c, name, path, flags, progress, arg, info);
	cistern_detach(c);
	return r;
}

int cistern_dump(const char *name, const char *path, cistern_progress_fn progress, void *arg,
		 struct cistern_dump_info *info)
{
	return cistern__dump_ex(name, path, 0, progress, arg, info);
}
