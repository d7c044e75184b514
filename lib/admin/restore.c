/* SPDX-License-Identifier: MIT */
/*
 * restore.c - checking a dump file whole (cistern_dump_verify) and making a
 * segment from one (cistern_restore): the file is read front to back once,
 * several chunks in flight, and parsed as the chunks arrive.
 */
#include <errno.h>
#include <fcntl.h>
#include <roaring/roaring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "admin/dump_format.h"
#include "admin/dump_io.h"
#include "core/policy.h"
#include "admin/dump.h"
#include "sys/crc32c.h"
#include "sys/rng.h"
#include "cistern/admin.h"

/* Parses the samples section as a byte stream and lays records into slots. */
struct parser {
	struct cistern *c;
	const struct dump_meta *m;
	uint8_t hdr[REC_HDR_V4];
	size_t hsize;      /* bytes of a record header: dump_rec_hdr(m->version) */
	size_t hfill;      /* header bytes collected */
	uint64_t len, pad; /* payload bytes and padding of the current record */
	uint64_t got;      /* payload bytes copied so far */
	int state;         /* 0 header, 1 payload, 2 padding */
	uint64_t count, bytes;
	struct dump_rec last;   /* the previous record (count > 0) */
	roaring_bitmap_t *seen; /* rebuilt from the records, to compare with the file's */
};

static int parse(struct parser *ps, const uint8_t *p, size_t n)
{
	struct cistern *c = ps->c;
	while (n) {
		if (ps->state == 0) {
			size_t k = ps->hsize - ps->hfill < n ? ps->hsize - ps->hfill : n;
			memcpy(ps->hdr + ps->hfill, p, k);
			ps->hfill += k;
			p += k;
			n -= k;
			if (ps->hfill < ps->hsize)
				break;
			ps->hfill = 0;
			if (ps->count >= ps->m->sample_count)
				return -EBADMSG;
			struct dump_rec rec;
			dump_rec_decode(ps->hdr, ps->m->version, &rec);
			int r = cistern__dump_rec_check(ps->m, &rec, ps->count ? &ps->last : NULL);
			if (r < 0)
				return r;
			uint64_t len = rec.len;
			struct cistern_slotmeta *sm = cistern__slotmeta(c, ps->count);
			sm->sample_id = rec.id;
			sm->sim_id = rec.sim_id;
			sm->time_step = rec.time_step;
			sm->flags = rec.flags; /* 0 from a file before version 4 */
			sm->len = len;
			atomic_store_explicit(&sm->seen, rec.seen, memory_order_relaxed);
			if (rec.seen)
				roaring_bitmap_add(ps->seen, rec.src);
			ps->last = rec;
			ps->len = len;
			ps->pad = cistern__align_up((size_t)len, 8) - len;
			ps->got = 0;
			ps->state = len ? 1 : (ps->pad ? 2 : 0);
			ps->bytes += len;
			ps->count++;
		} else if (ps->state == 1) {
			uint64_t k = ps->len - ps->got < n ? ps->len - ps->got : n;
			memcpy((char *)cistern__payload(c, ps->count - 1) + ps->got, p, (size_t)k);
			ps->got += k;
			p += k;
			n -= (size_t)k;
			if (ps->got == ps->len)
				ps->state = ps->pad ? 2 : 0;
		} else {
			/* Padding must be zero: anything else means the stream is off. */
			if (*p != 0)
				return -EBADMSG;
			p++;
			n--;
			if (--ps->pad == 0)
				ps->state = 0;
		}
	}
	return 0;
}

/*
 * Parses the cold section's records as a byte stream: each sample is
 * collected whole, checked, and (a restore) handed to the tier, which puts
 * it into the cold slot it held.
 */
struct cold_parser {
	const struct dump_meta *m;
	struct cistern *c; /* NULL: only check (cistern_dump_verify()) */
	uint8_t hdr[COLD_REC_HDR];
	size_t hfill;
	struct dump_cold_rec rec, last;
	uint8_t *buf; /* one sample's payload */
	uint64_t got, pad;
	int state; /* 0 header, 1 payload, 2 padding */
	uint64_t count, bytes;
};

/* A whole cold sample: to the tier, at the cold slot it held (checked below cold_slots). */
static int cold_take(struct cold_parser *cp)
{
	if (!cp->c)
		return 0;
	struct cistern__cold_sample s = {
		.id = cp->rec.id,
		.len = (uint32_t)cp->rec.len,
		.seen = cp->rec.seen,
		.slot = cp->rec.slot,
		.data = cp->buf,
	};
	memcpy(s.meta, cp->rec.meta, sizeof(s.meta));
	return cp->c->policy->tiering->restore_put(cp->c, &s);
}

static int cold_parse(struct cold_parser *cp, const uint8_t *p, size_t n)
{
	while (n) {
		if (cp->state == 0) {
			size_t k = COLD_REC_HDR - cp->hfill < n ? COLD_REC_HDR - cp->hfill : n;
			memcpy(cp->hdr + cp->hfill, p, k);
			cp->hfill += k;
			p += k;
			n -= k;
			if (cp->hfill < COLD_REC_HDR)
				break;
			cp->hfill = 0;
			if (cp->count >= cp->m->cold_count)
				return -EBADMSG;
			dump_cold_rec_decode(cp->hdr, &cp->rec);
			int r = cistern__dump_cold_rec_check(cp->m, &cp->rec,
							     cp->count ? &cp->last : NULL);
			if (r < 0)
				return r;
			cp->last = cp->rec;
			cp->got = 0;
			cp->pad = cistern__align_up((size_t)cp->rec.len, 8) - cp->rec.len;
			cp->bytes += cp->rec.len;
			cp->count++;
			cp->state = cp->rec.len ? 1 : (cp->pad ? 2 : 0);
			if (cp->state == 0 && (r = cold_take(cp)) < 0)
				return r;
		} else if (cp->state == 1) {
			uint64_t k = cp->rec.len - cp->got < n ? cp->rec.len - cp->got : n;
			memcpy(cp->buf + cp->got, p, (size_t)k);
			cp->got += k;
			p += k;
			n -= (size_t)k;
			if (cp->got == cp->rec.len) {
				cp->state = cp->pad ? 2 : 0;
				int r = cp->state == 0 ? cold_take(cp) : 0;
				if (r < 0)
					return r;
			}
		} else {
			if (*p != 0)
				return -EBADMSG;
			p++;
			n--;
			if (--cp->pad == 0) {
				cp->state = 0;
				int r = cold_take(cp);
				if (r < 0)
					return r;
			}
		}
	}
	return 0;
}

/* Stream the whole file: parse samples, collect the seen set, check every CRC. */
static int load(int fd, uint64_t size, const struct dump_meta *m, struct cistern *c,
		roaring_bitmap_t *seen, bool restoring, cistern_progress_fn progress, void *arg)
{
	struct io_reader rd;
	int r = cistern__io_r_init(&rd, fd, size);
	if (r < 0)
		return r;
	struct parser ps = {.c = c, .m = m, .hsize = dump_rec_hdr(m->version), .seen = seen};
	struct cold_parser cps = {.m = m, .c = restoring ? c : NULL};
	char *bm = malloc(m->bitmap_size ? m->bitmap_size : 1);
	if (m->cold_size)
		cps.buf = malloc(m->cfg.slot_size ? m->cfg.slot_size : 1);
	if (!bm || (m->cold_size && !cps.buf)) {
		free(bm);
		free(cps.buf);
		cistern__io_r_destroy(&rd);
		return -ENOMEM;
	}
	uint32_t cold_crc = 0;
	uint32_t file_crc = 0, samples_crc = 0;
	uint64_t pos = 0;
	const uint64_t crc_end = size - 8; /* the whole-file CRC stops at its own field */
	const uint8_t *p;
	size_t len;
	uint8_t tail[8];
	r = 0;
	while (r == 0 && (p = cistern__io_r_next(&rd, &len)) != NULL) {
		uint64_t a = pos, b = pos + len;
		uint64_t ce = b < crc_end ? b : crc_end;
		if (ce > a)
			file_crc = cistern__crc32c(file_crc, p, (size_t)(ce - a));
		if (b > crc_end) {
			uint64_t from = a > crc_end ? a : crc_end;
			memcpy(tail + (from - crc_end), p + (from - a), (size_t)(b - from));
		}
		/* The part of this chunk inside the samples section. */
		uint64_t s0 = m->samples_off, s1 = m->samples_off + m->samples_size;
		uint64_t x0 = a > s0 ? a : s0, x1 = b < s1 ? b : s1;
		if (x1 > x0) {
			samples_crc = cistern__crc32c(samples_crc, p + (x0 - a), (size_t)(x1 - x0));
			r = parse(&ps, p + (x0 - a), (size_t)(x1 - x0));
		}
		uint64_t b0 = m->bitmap_off, b1 = m->bitmap_off + m->bitmap_size;
		x0 = a > b0 ? a : b0;
		x1 = b < b1 ? b : b1;
		if (x1 > x0)
			memcpy(bm + (x0 - b0), p + (x0 - a), (size_t)(x1 - x0));
		/* The cold section: all of it under its CRC, its records after the header. */
		uint64_t c0 = m->cold_off, c1 = m->cold_off + m->cold_size;
		x0 = a > c0 ? a : c0;
		x1 = b < c1 ? b : c1;
		if (r == 0 && x1 > x0) {
			cold_crc = cistern__crc32c(cold_crc, p + (x0 - a), (size_t)(x1 - x0));
			uint64_t r0 = c0 + m->cold_hdr_size;
			x0 = x0 > r0 ? x0 : r0;
			if (x1 > x0)
				r = cold_parse(&cps, p + (x0 - a), (size_t)(x1 - x0));
		}
		pos = b;
		cistern__io_r_done(&rd);
		if (progress)
			progress(pos, size, arg);
	}
	if (r == 0 && rd.err)
		r = rd.err;
	cistern__io_r_destroy(&rd);
	if (r == 0 && pos != size)
		r = -EBADMSG;
	/* Checksums first: a damaged file must say "damaged", whatever else is off. */
	if (r == 0 && file_crc != get32(tail))
		r = -EBADMSG;
	if (r == 0 && (samples_crc != m->samples_crc ||
		       cistern__crc32c(0, bm, m->bitmap_size) != m->bitmap_crc))
		r = -EBADMSG;
	if (r == 0 && cold_crc != m->cold_crc)
		r = -EBADMSG;
	if (r == 0 && (ps.state != 0 || ps.hfill != 0 || ps.count != m->sample_count ||
		       ps.bytes != m->payload_bytes))
		r = -EBADMSG;
	if (r == 0 && (cps.state != 0 || cps.hfill != 0 || cps.count != m->cold_count ||
		       cps.bytes != m->cold_payload))
		r = -EBADMSG;
	free(cps.buf);
	if (r == 0)
		r = cistern__dump_seen_set_check((const uint8_t *)bm, (size_t)m->bitmap_size, seen);
	free(bm);
	return r;
}

/* Carry the statistics over, so counters continue where the source left them. */
static void restore_stats(struct cistern *c, const struct dump_meta *m)
{
	struct cistern_counters *ret = &c->hdr->retired;
	const struct cistern_stats *st = &m->st;
#define SET(f) atomic_store_explicit(&ret->f, st->f, memory_order_relaxed)
	SET(puts);
	SET(gets);
	SET(evictions);
	SET(evicted_unseen);
	SET(redeliveries);
	SET(reclaimed);
	SET(producer_waits);
	SET(producer_wait_ns);
	SET(reader_waits);
	SET(reader_wait_ns);
#undef SET
	for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
		atomic_store_explicit(&ret->seen_hist[i], st->seen_hist[i], memory_order_relaxed);
	/*
	 * Samples in readers' hands or moving during the dump were counted in the
	 * source's population but are not here: lower `puts` by that many, so a
	 * policy that derives its population from the counters agrees with what
	 * was restored.
	 */
	struct cistern_stats now;
	cistern_stats_get(c, &now);
	uint64_t held = m->sample_count + m->cold_count;
	if (now.population != held)
		atomic_fetch_add_explicit(&ret->puts, held - now.population, memory_order_relaxed);
}

/* "RSTR": says the low half is a name's CRC, not whatever a damaged header holds. */
#define RESTORE_MARK_TAG UINT64_C(0x52535452)

uint64_t cistern__restore_mark(const char *name)
{
	return RESTORE_MARK_TAG << 32 | cistern__crc32c(0, name, strlen(name));
}

bool cistern__restore_unfinished(const struct cistern_hdr *h, const char *name)
{
	return h->restore_mark == cistern__restore_mark(name);
}

/* Open a dump and check its frame (cistern__dump_read_frame()); on an error nothing stays open. */
static int open_dump(const char *path, int *fd, uint64_t *size, struct dump_meta *m)
{
	if (!path)
		return -EINVAL;
	/*
	 * A FIFO given as the file must not keep us waiting for a writer, nor a
	 * terminal become ours: cistern__dump_read_frame() refuses what is not a regular
	 * file, and a regular file's reads are plain ones again (io_uring would
	 * answer -EAGAIN to reads of a descriptor left O_NONBLOCK).
	 */
	*fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (*fd < 0)
		return -errno;
	int r = cistern__dump_read_frame(*fd, size, m);
	if (r == 0) {
		int fl = fcntl(*fd, F_GETFL);
		if (fl < 0 || fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
			r = -errno;
	}
	if (r < 0)
		close(*fd);
	return r;
}

int cistern_dump_verify(const char *path, struct cistern_dump_info *info)
{
	int fd;
	uint64_t size;
	struct dump_meta m;
	int r = open_dump(path, &fd, &size, &m);
	if (r < 0)
		return r;
	/* Parse into a private scratch "segment": one slot reused by every record. */
	struct cistern scratch;
	memset(&scratch, 0, sizeof(scratch));
	r = 0;
	/* Slot metadata is cache-line aligned by type: calloc's 16 bytes are not enough. */
	struct cistern_slotmeta *sm = aligned_alloc(CISTERN_CACHELINE, sizeof(*sm));
	if (sm)
		memset(sm, 0, sizeof(*sm));
	char *arena = m.cfg.slot_size <= CISTERN_SLOT_SIZE_MAX ? malloc(m.cfg.slot_size + 1) : NULL;
	roaring_bitmap_t *seen = roaring_bitmap_create();
	if (!sm || !arena || !seen) {
		r = -ENOMEM;
	} else {
		/* Stride 0: every record's metadata and payload land on the same scratch bytes. */
		scratch.meta0 = (char *)sm;
		scratch.arena = arena;
		scratch.slot_size = m.cfg.slot_size;
		scratch.slot_stride = 0;
		scratch.meta_stride = 0;
		scratch.slot_count = m.sample_count;
		r = load(fd, size, &m, &scratch, seen, false, NULL, NULL);
	}
	free(sm);
	free(arena);
	if (seen)
		roaring_bitmap_free(seen);
	close(fd);
	if (r == 0)
		cistern__dump_info_from_meta(&m, size, info);
	return r;
}

int cistern_restore(const char *path, const char *name, cistern_progress_fn progress, void *arg,
		    struct cistern_dump_info *info)
{
	int fd;
	uint64_t size;
	struct dump_meta m;
	if (info)
		memset(info, 0, sizeof(*info));
	int r = open_dump(path, &fd, &size, &m);
	if (r < 0)
		return r;
	/* Said now, so that a refusal (-EEXIST) can name the stored name. */
	cistern__dump_info_from_meta(&m, size, info);
	if (!name)
		name = m.name;
	char final[96], tmpname[CISTERN_NAME_MAX + 1], tmp[96], from[128], to[128];
	if ((r = cistern__shm_name(name, final, sizeof(final))) < 0)
		goto out_fd;
	snprintf(to, sizeof(to), "/dev/shm%s", final);
	if (access(to, F_OK) == 0) {
		r = -EEXIST;
		goto out_fd;
	}
	/*
	 * Built under restore-PID-RANDOM: a name nobody can take first to make
	 * the restore fail (create is exclusive; a collision tries another).
	 * The target was checked above, so -EEXIST from here on is the
	 * temporary name's only after every try.
	 */
	struct cistern *c;
	for (int tries = 0;; tries++) {
		snprintf(tmpname, sizeof(tmpname), "restore-%d-%016llx", (int)getpid(),
			 (unsigned long long)cistern__unguessable());
		r = cistern_create(tmpname, &m.cfg, &c);
		if (r != -EEXIST || tries + 1 == CISTERN__TEMP_TRIES)
			break;
	}
	if (r < 0)
		goto out_fd;
	cistern__shm_name(tmpname, tmp, sizeof(tmp));
	snprintf(from, sizeof(from), "/dev/shm%s", tmp);
	/*
	 * Mark the object as a restore under way, bound to its temporary name:
	 * tools that come across it know what it is, and gc removes it if we die
	 * before the rename. The mark stays after the rename, where it no longer
	 * matches the name (segment.h). Then name the header for its final name.
	 */
	c->hdr->restore_mark = cistern__restore_mark(tmpname);
	memset(c->fixed.name, 0, sizeof(c->fixed.name));
	snprintf(c->fixed.name, sizeof(c->fixed.name), "%s", name);
	memcpy(c->hdr->name, c->fixed.name, sizeof(c->hdr->name));
	const struct cistern_snap_ops *so = c->policy->snap;
	const struct cistern__tiering *tg = m.cfg.cold_slots ? c->policy->tiering : NULL;
	bool cold_renamed = false;
	roaring_bitmap_t *seen = roaring_bitmap_create();
	if (!so || (m.cfg.cold_slots && (!tg || !tg->restore_put)))
		r = -ENOTSUP;
	else if (!seen)
		r = -ENOMEM;
	else
		r = load(fd, size, &m, c, seen, true, progress, arg);
	if (seen)
		roaring_bitmap_free(seen);
	if (r == 0)
		r = so->restore(c, m.sample_count, m.next_id);
	if (r == 0 && tg) {
		struct cistern__tier_counts n = {m.cold_spilled, m.cold_reads, m.cold_evictions};
		r = tg->restore_end(c, &n);
		/*
		 * The cold file takes the final name before the segment does: a
		 * segment never appears without its cold file. A death between
		 * the two renames leaves a cold file whose segment is gone, which
		 * gc removes (docs/protocol/tiers.md).
		 */
		if (r == 0 && (r = tg->rename(c, m.cold_dir, tmpname, name)) == 0)
			cold_renamed = true;
	}
	if (r == 0) {
		atomic_store_explicit(&c->hdr->next_sample_id, m.next_id, memory_order_relaxed);
		atomic_store_explicit(&c->hdr->producers_done, m.producers_done,
				      memory_order_relaxed);
		atomic_store_explicit(&c->hdr->producers_died, m.producers_died,
				      memory_order_relaxed);
		/*
		 * The dump counted producers that died and were not reclaimed
		 * yet, whose reclaim would have closed reception under
		 * CISTERN_DEAD_PRODUCER_DONE: nobody is left to do it here.
		 */
		bool ended = (m.cfg.flags & CISTERN_DEAD_PRODUCER_DONE) &&
			     (uint64_t)m.producers_done + m.producers_died >=
				     m.cfg.expected_producers;
		atomic_store_explicit(&c->hdr->closed, m.closed || ended ? 1 : 0,
				      memory_order_relaxed);
		restore_stats(c, &m);
		/*
		 * No fence needed: whoever finds the segment does so through the
		 * rename below and its own open and mmap, system calls that order
		 * our stores before their loads.
		 */
		/* Appear all at once, and never over a segment created meanwhile. */
		if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) < 0)
			r = -errno;
	}
	if (r < 0) {
		shm_unlink(tmp);
		/* The segment first, then its cold file, as cistern_unlink() does. */
		if (m.cfg.cold_slots && c->policy->tiering)
			c->policy->tiering->unlink(m.cold_dir, cold_renamed ? name : tmpname);
	}
	cistern_detach(c);
out_fd:
	close(fd);
	return r;
}
