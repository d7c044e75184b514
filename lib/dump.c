/* SPDX-License-Identifier: MIT */
/*
 * dump.c - snapshots of a segment: dump to a file, restore from one.
 *
 * File format, version 1. Every integer is little-endian, whatever the host.
 *
 *   preamble  16 bytes   "CISTDUMP", u32 format version, u32 preamble size (16)
 *   samples   records back to back, in ascending sample id order:
 *               u64 sample_id, u32 sim_id, u32 time_step, u64 len,
 *               u32 seen, u32 source slot index,          (32 bytes)
 *               len payload bytes, zero padding to a multiple of 8
 *   seen set  a CRoaring bitmap, portable serialization
 *             (roaring_bitmap_portable_serialize), of the SOURCE SLOT INDICES
 *             of the records whose seen count is >= 1. Slot indices, not
 *             sample ids: they are below 2^28, so they fit the 32-bit bitmap
 *             whatever the ids are. It repeats what the records say, so a
 *             restore checks that both agree.
 *   meta      512 bytes: section offsets and sizes, counts, next sample id,
 *             times, reception state, the config, the statistics, the CRC-32C
 *             of the samples section and of the seen set, and last the CRC-32C
 *             of the meta block's first 508 bytes.
 *   trailer   32 bytes: "CISTEND1", u64 file size, u64 meta offset,
 *             u32 CRC-32C of every byte of the file before this field, u32 0.
 *
 * The meta block comes last because a dump of a live segment only knows what
 * it wrote when it is done (samples that move while copied are left out), and
 * so every byte is produced in file order: the whole-file CRC is computed on
 * the way, and a reader finds the trailer and meta at fixed distances from the
 * end. A truncated file has no trailer there, a damaged one fails a CRC.
 *
 * Dumping never attaches: it maps the segment read-only. For each held slot
 * (COMMITTED or REDELIVER, see cistern_snap_ops.classify) it remembers the
 * state word, copies metadata and payload into a staging buffer, then loads
 * the word again; if it changed the copy may be torn and is dropped (counted
 * as skipped). A slot's word changes whenever its sample leaves, so a kept
 * copy is a whole sample. Producers and readers never wait for the dump.
 *
 * I/O goes through io_uring: staging buffers (registered with the ring when
 * the memlock limit allows) are filled in turn, their writes queued and
 * submitted in batches with several in flight. The dump file is written with
 * O_DIRECT where the file system allows it, so those writes really proceed
 * while the next buffer is being filled (see docs/dump-benchmark.md). A
 * restore keeps several chunk reads in flight and parses chunks as they
 * arrive.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <roaring/roaring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define DUMP_MAGIC "CISTDUMP"
#define TRAILER_MAGIC "CISTEND1"
#define PREAMBLE_SIZE 16
#define META_SIZE 512
#define TRAILER_SIZE 32
#define REC_HDR 32
#define MIB (UINT64_C(1) << 20)
/* Staging and read-ahead memory a dump or restore may use at most (roughly). */
#define IO_MEMORY (256 * MIB)
#define IO_BUFFERS 8
/* O_DIRECT offsets, lengths and buffers are multiples of this. */
#define DIRECT_ALIGN 4096

bool cistern__no_uring;

/* ---- little-endian encoding ------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* A cursor that encodes or decodes the meta block field by field, in one order. */
struct cur {
	uint8_t *p;
	size_t off;
	bool dec; /* decoding: read into the fields instead of writing them */
};

static void f64(struct cur *c, uint64_t *v)
{
	if (c->dec)
		*v = get64(c->p + c->off);
	else
		put64(c->p + c->off, *v);
	c->off += 8;
}

static void f32(struct cur *c, uint32_t *v)
{
	if (c->dec)
		*v = get32(c->p + c->off);
	else
		put32(c->p + c->off, *v);
	c->off += 4;
}

struct meta {
	uint64_t samples_off, samples_size, sample_count, payload_bytes;
	uint64_t bitmap_off, bitmap_size, skipped, next_id, created_ns, dumped_ns;
	uint32_t closed, producers_done;
	struct cistern_config cfg;
	char name[CISTERN_NAME_MAX + 1];
	struct cistern_stats st;
	uint32_t samples_crc, bitmap_crc;
};

/* The one description of the meta block, used both ways. */
static void meta_code(struct cur *c, struct meta *m)
{
	f64(c, &m->samples_off);
	f64(c, &m->samples_size);
	f64(c, &m->sample_count);
	f64(c, &m->payload_bytes);
	f64(c, &m->bitmap_off);
	f64(c, &m->bitmap_size);
	f64(c, &m->skipped);
	f64(c, &m->next_id);
	f64(c, &m->created_ns);
	f64(c, &m->dumped_ns);
	f32(c, &m->closed);
	f32(c, &m->producers_done);
	uint32_t policy = (uint32_t)m->cfg.policy, zero = 0;
	f64(c, &m->cfg.slot_size);
	f64(c, &m->cfg.slot_count);
	f32(c, &policy);
	m->cfg.policy = (enum cistern_policy)policy;
	f32(c, &m->cfg.mode);
	f64(c, &m->cfg.watermark);
	f32(c, &m->cfg.pseudo_epochs);
	f32(c, &m->cfg.sweep_size);
	f32(c, &m->cfg.nb_time_steps);
	f32(c, &m->cfg.batch_size);
	f64(c, &m->cfg.seed);
	f32(c, &m->cfg.max_procs);
	f32(c, &m->cfg.expected_producers);
	f32(c, &m->cfg.flags);
	f32(c, &zero);
	/* Doubles travel as their IEEE 754 bits. */
	uint64_t rpp, slack;
	memcpy(&rpp, &m->cfg.reads_per_put, sizeof(rpp));
	memcpy(&slack, &m->cfg.rate_slack, sizeof(slack));
	f64(c, &rpp);
	f64(c, &slack);
	memcpy(&m->cfg.reads_per_put, &rpp, sizeof(rpp));
	memcpy(&m->cfg.rate_slack, &slack, sizeof(slack));
	if (c->dec)
		memcpy(m->name, c->p + c->off, sizeof(m->name));
	else
		memcpy(c->p + c->off, m->name, sizeof(m->name));
	c->off += 72; /* 65 bytes of name, padded to 8 */
	uint64_t *st64[] = {
		&m->st.population, &m->st.puts, &m->st.gets, &m->st.evictions,
		&m->st.evicted_unseen, &m->st.redeliveries, &m->st.reclaimed,
		&m->st.producer_waits, &m->st.producer_wait_ns, &m->st.reader_waits,
		&m->st.reader_wait_ns,
	};
	for (size_t i = 0; i < sizeof(st64) / sizeof(st64[0]); i++)
		f64(c, st64[i]);
	for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
		f64(c, &m->st.seen_hist[i]);
	f32(c, &m->st.procs_attached);
	f32(c, &m->st.reception_closed);
	f32(c, &m->samples_crc);
	f32(c, &m->bitmap_crc);
}

static void meta_encode(struct meta *m, uint8_t out[META_SIZE])
{
	memset(out, 0, META_SIZE);
	struct cur c = {out, 0, false};
	meta_code(&c, m);
	put32(out + META_SIZE - 4, cistern__crc32c(0, out, META_SIZE - 4));
}

static int meta_decode(const uint8_t in[META_SIZE], struct meta *m)
{
	if (cistern__crc32c(0, in, META_SIZE - 4) != get32(in + META_SIZE - 4))
		return -EBADMSG;
	memset(m, 0, sizeof(*m));
	struct cur c = {(uint8_t *)in, 0, true};
	meta_code(&c, m);
	m->name[CISTERN_NAME_MAX] = '\0';
	return 0;
}

static void info_from_meta(const struct meta *m, uint64_t file_size, struct cistern_dump_info *info)
{
	if (!info)
		return;
	memset(info, 0, sizeof(*info));
	memcpy(info->name, m->name, sizeof(info->name));
	info->config = m->cfg;
	info->stats = m->st;
	info->samples = m->sample_count;
	info->payload_bytes = m->payload_bytes;
	info->skipped = m->skipped;
	info->next_id = m->next_id;
	info->created_ns = m->created_ns;
	info->dumped_ns = m->dumped_ns;
	info->file_size = file_size;
	info->format_version = CISTERN_DUMP_VERSION;
	info->closed = m->closed;
}

/* ---- buffers ----------------------------------------------------------- */

struct bufs {
	uint8_t *mem;
	unsigned n;
	size_t size;
	bool registered;
};

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* n buffers of at least `min` bytes each, within IO_MEMORY when possible. */
static int bufs_alloc(struct bufs *b, size_t min, unsigned want)
{
	b->size = round_up(min ? min : 1, 4096);
	b->n = want;
	while (b->n > 2 && (uint64_t)b->n * b->size > IO_MEMORY)
		b->n--;
	/*
	 * mmap rather than malloc: page-aligned (O_DIRECT needs it), given back
	 * whole at the end, and populated in one call rather than a fault a page.
	 */
	void *p = mmap(NULL, (size_t)b->n * b->size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	b->mem = p;
	b->registered = false;
	return 0;
}

static uint8_t *buf_at(const struct bufs *b, unsigned i)
{
	return b->mem + (size_t)i * b->size;
}

static void bufs_free(struct bufs *b)
{
	if (b->mem)
		munmap(b->mem, (size_t)b->n * b->size);
	b->mem = NULL;
}

/*
 * Register the buffers with the ring: the kernel pins them once instead of on
 * every request. It fails under a small RLIMIT_MEMLOCK; then plain requests do.
 */
static void bufs_register(struct bufs *b, struct io_uring *ring)
{
	struct iovec iov[IO_BUFFERS];
	for (unsigned i = 0; i < b->n; i++) {
		iov[i].iov_base = buf_at(b, i);
		iov[i].iov_len = b->size;
	}
	b->registered = io_uring_register_buffers(ring, iov, b->n) == 0;
}

/*
 * One completion from the ring, handing the kernel first whatever requests
 * are queued. A signal interrupts the wait (-EINTR) but not the requests, so
 * we wait again: a dump or restore must not fail because the caller's
 * process takes signals (a profiler's timer, an alarm). And a submit that
 * failed leaves its requests in the ring, where io_uring_wait_cqe() alone
 * would wait for completions of requests the kernel never saw; here the next
 * wait submits them. The caller has a request in flight or queued.
 */
static int next_cqe(struct io_uring *ring, struct io_uring_cqe **cqe)
{
	for (;;) {
		int r = io_uring_submit_and_wait(ring, 1);
		if (r < 0 && r != -EINTR)
			return r;
		if (io_uring_peek_cqe(ring, cqe) == 0)
			return 0;
	}
}

/*
 * A request that came back not done rather than failed: interrupted by a
 * signal, or canceled because the kernel could not start a worker for it
 * while a signal was pending (a buffered write or an fsync handed to
 * io_uring's workers). It is asked for again.
 */
static bool not_done(int res)
{
	return res == -EINTR || res == -ECANCELED;
}

/* ---- the writer -------------------------------------------------------- */

struct wbuf {
	size_t len;    /* bytes to write */
	size_t done;   /* bytes written so far */
	uint64_t off;  /* file offset of the buffer's first byte */
	bool busy;
};

struct writer {
	int fd;
	bool plain;             /* pwrite() instead of io_uring (benchmark baseline) */
	bool direct;            /* O_DIRECT: only whole DIRECT_ALIGN blocks are written */
	struct io_uring ring;
	bool ring_ok;
	struct bufs b;
	struct wbuf w[IO_BUFFERS];
	unsigned cur;           /* buffer being filled */
	size_t fill;            /* bytes staged in it */
	uint64_t off;           /* file offset where it goes */
	unsigned inflight, queued;
	int err;
	uint32_t crc;           /* CRC-32C of every byte staged so far */
};

static void w_queue(struct writer *w, unsigned i)
{
	struct wbuf *wb = &w->w[i];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
	if (!sqe) {
		/* Cannot happen with one ring entry per buffer; submit and retry anyway. */
		io_uring_submit(&w->ring);
		w->queued = 0;
		sqe = io_uring_get_sqe(&w->ring);
		if (!sqe) {
			/* Not in flight: w_destroy() must not wait for it. */
			w->err = -EBUSY;
			wb->busy = false;
			w->inflight--;
			return;
		}
	}
	uint8_t *p = buf_at(&w->b, i) + wb->done;
	unsigned n = (unsigned)(wb->len - wb->done);
	if (w->b.registered)
		io_uring_prep_write_fixed(sqe, w->fd, p, n, wb->off + wb->done, (int)i);
	else
		io_uring_prep_write(sqe, w->fd, p, n, wb->off + wb->done);
	io_uring_sqe_set_data64(sqe, i);
	w->queued++;
}

/* Take completions; with `wait`, block for at least one. */
static void w_reap(struct writer *w, bool wait)
{
	struct io_uring_cqe *cqe;
	if (wait) {
		int r = next_cqe(&w->ring, &cqe);
		w->queued = 0;
		if (r < 0) {
			w->err = r;
			return;
		}
	}
	while (io_uring_peek_cqe(&w->ring, &cqe) == 0) {
		unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&w->ring, cqe);
		if (i >= w->b.n) /* the final fsync */
			continue;
		struct wbuf *wb = &w->w[i];
		if (not_done(res)) {
			w_queue(w, i);
			continue;
		}
		if (res < 0) {
			if (!w->err)
				w->err = res;
		} else if (res == 0) {
			if (!w->err)
				w->err = -EIO;
		} else if (wb->done + (size_t)res < wb->len) {
			/* A short write (a signal, a full disk on the way): write the rest. */
			wb->done += (size_t)res;
			w_queue(w, i);
			continue;
		}
		wb->busy = false;
		w->inflight--;
	}
}

static int w_flush(struct writer *w)
{
	if (w->fill == 0 || w->err)
		return w->err;
	uint8_t *p = buf_at(&w->b, w->cur);
	if (w->plain) {
		size_t done = 0;
		while (done < w->fill) {
			ssize_t r = pwrite(w->fd, p + done, w->fill - done, (off_t)(w->off + done));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				return w->err = r < 0 ? -errno : -EIO;
			done += (size_t)r;
		}
		w->off += w->fill;
		w->fill = 0;
		return 0;
	}
	/*
	 * O_DIRECT writes whole blocks: write the aligned part and carry the
	 * rest (< DIRECT_ALIGN bytes) over to the start of the next buffer.
	 */
	size_t n = w->direct ? w->fill / DIRECT_ALIGN * DIRECT_ALIGN : w->fill;
	size_t carry = w->fill - n;
	if (n == 0)
		return 0; /* less than a block staged: keep filling this buffer */
	unsigned prev = w->cur;
	struct wbuf *wb = &w->w[w->cur];
	wb->len = n;
	wb->done = 0;
	wb->off = w->off;
	wb->busy = true;
	w->inflight++;
	w_queue(w, w->cur);
	w->off += n;
	w->fill = 0;
	/* Submit in batches of two buffers: fewer system calls, the disk stays busy. */
	if (w->queued >= 2) {
		io_uring_submit(&w->ring);
		w->queued = 0;
	}
	/* Next buffer in turn; wait for its previous write if still in flight. */
	w->cur = (w->cur + 1) % w->b.n;
	w_reap(w, false);
	while (w->w[w->cur].busy && !w->err)
		w_reap(w, true);
	if (carry && !w->err) {
		/* The kernel only reads the previous buffer: copying from it is safe. */
		memcpy(buf_at(&w->b, w->cur), buf_at(&w->b, prev) + n, carry);
		w->fill = carry;
	}
	return w->err;
}

/* Room for n contiguous bytes in the current buffer (n <= buffer size). */
static uint8_t *w_room(struct writer *w, size_t n)
{
	if (w->fill + n > w->b.size && w_flush(w) < 0)
		return NULL;
	return buf_at(&w->b, w->cur) + w->fill;
}

/* Keep n bytes written at w_room(): they become part of the file. */
static void w_keep(struct writer *w, const uint8_t *p, size_t n)
{
	w->crc = cistern__crc32c(w->crc, p, n);
	w->fill += n;
}

static int w_append(struct writer *w, const void *data, size_t n)
{
	const uint8_t *s = data;
	while (n) {
		size_t room = w->b.size - w->fill;
		if (room == 0) {
			if (w_flush(w) < 0)
				return w->err;
			continue;
		}
		size_t k = n < room ? n : room;
		uint8_t *p = buf_at(&w->b, w->cur) + w->fill;
		memcpy(p, s, k);
		w_keep(w, p, k);
		s += k;
		n -= k;
	}
	return 0;
}

/*
 * Use O_DIRECT when the file system takes it: the writes then really run in
 * the background while the next buffer is staged (buffered writes are mostly
 * a copy into the page cache made during submission), nothing is copied a
 * second time, and a large dump does not push the job's data out of the page
 * cache. Probed with one aligned block; file systems without it keep buffered
 * I/O.
 */
static bool try_direct(int fd, uint8_t *aligned_buf)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_DIRECT) < 0)
		return false;
	memset(aligned_buf, 0, DIRECT_ALIGN);
	if (pwrite(fd, aligned_buf, DIRECT_ALIGN, 0) == DIRECT_ALIGN && ftruncate(fd, 0) == 0)
		return true;
	fcntl(fd, F_SETFL, fl);
	return false;
}

/*
 * min_buf: the largest record; expect: about how big the file will be. A small
 * dump gets two small buffers rather than 8 MiB populated and registered (which
 * took most of a small segment's dump time); a guess that falls short costs
 * only overlap, as the buffers take turns.
 */
static int w_init(struct writer *w, int fd, bool plain, bool buffered, size_t min_buf,
		  uint64_t expect)
{
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->plain = plain;
	/* Room for a carried partial block in front of the largest record. */
	size_t min = min_buf + DIRECT_ALIGN;
	size_t size = expect < MIB ? (size_t)expect : MIB;
	size = size > min ? size : min;
	uint64_t n = (expect + size - 1) / size;
	n = n < 2 ? 2 : n > IO_BUFFERS ? IO_BUFFERS : n;
	int r = bufs_alloc(&w->b, size, plain ? 1 : (unsigned)n);
	if (r < 0)
		return r;
	if (plain)
		return 0;
	/* One entry per buffer plus the fsync: never more requests than that. */
	r = cistern__no_uring ? -ENOSYS : io_uring_queue_init(IO_BUFFERS + 2, &w->ring, 0);
	if (r < 0) {
		/*
		 * No io_uring here (kernel.io_uring_disabled, a container's seccomp
		 * filter, an old kernel): write with pwrite() rather than fail.
		 */
		w->plain = true;
		return 0;
	}
	w->ring_ok = true;
	bufs_register(&w->b, &w->ring);
	w->direct = !buffered && try_direct(fd, buf_at(&w->b, 0));
	return 0;
}

/* Write what is staged, wait for every write, and make the file durable. */
static int w_finish(struct writer *w)
{
	uint64_t size = w->off + w->fill;
	if (w->direct && w->fill % DIRECT_ALIGN) {
		/* The last block goes out whole, zero-padded; the file is cut back below. */
		size_t pad = DIRECT_ALIGN - w->fill % DIRECT_ALIGN;
		memset(buf_at(&w->b, w->cur) + w->fill, 0, pad);
		w->fill += pad;
	}
	if (w_flush(w) < 0)
		return w->err;
	if (w->plain)
		return fsync(w->fd) < 0 ? -errno : 0;
	while (w->inflight && !w->err)
		w_reap(w, true);
	if (w->err)
		return w->err;
	if (w->direct && ftruncate(w->fd, (off_t)size) < 0)
		return -errno;
	for (;;) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
		if (!sqe)
			return -EBUSY;
		io_uring_prep_fsync(sqe, w->fd, 0);
		io_uring_sqe_set_data64(sqe, IO_BUFFERS);
		struct io_uring_cqe *cqe;
		int r = next_cqe(&w->ring, &cqe);
		if (r < 0)
			return r;
		r = cqe->res;
		io_uring_cqe_seen(&w->ring, cqe);
		if (!not_done(r))
			return r < 0 ? r : 0;
	}
}

static void w_destroy(struct writer *w)
{
	if (w->ring_ok) {
		/* Never unmap buffers the kernel may still be writing from. */
		while (w->inflight) {
			struct io_uring_cqe *cqe;
			if (next_cqe(&w->ring, &cqe) < 0)
				break;
			unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
			io_uring_cqe_seen(&w->ring, cqe);
			if (i < w->b.n && w->w[i].busy) {
				w->w[i].busy = false;
				w->inflight--;
			}
		}
		io_uring_queue_exit(&w->ring);
	}
	bufs_free(&w->b);
}

/* ---- dump -------------------------------------------------------------- */

/*
 * The acquire fence of the copy-then-recheck read. gcc refuses thread fences
 * under -fsanitize=thread (-Wtsan), and TSan models no fences anyway: there,
 * and only there, a compiler barrier stands in (the TSan build runs no dumps).
 */
static inline void load_fence(void)
{
#if defined(__SANITIZE_THREAD__)
	atomic_signal_fence(memory_order_acquire);
#else
	atomic_thread_fence(memory_order_acquire);
#endif
}

struct held {
	uint64_t id;
	uint64_t word;
	uint32_t index;
};

static int by_id(const void *a, const void *b)
{
	uint64_t x = ((const struct held *)a)->id, y = ((const struct held *)b)->id;
	return x < y ? -1 : x > y;
}

/* Next id a restored segment must hand out: above every id this one gave. */
static uint64_t next_id_of(struct cistern_hdr *h, uint64_t max_held)
{
	/* FIFO derives ids from positions, other policies count them: take both. */
	uint64_t a = atomic_load_explicit(&h->tail, memory_order_acquire) + h->id_base;
	uint64_t b = atomic_load_explicit(&h->next_sample_id, memory_order_acquire);
	uint64_t n = a > b ? a : b;
	return n > max_held ? n : max_held + 1;
}

static int dump_samples(struct cistern *c, const struct cistern_snap_ops *so,
			struct writer *w, struct meta *m, roaring_bitmap_t *seen,
			cistern_progress_fn progress, void *arg)
{
	/* Pass 1: which slots hold samples, and their ids, so records go out in id order. */
	size_t n = 0, cap = 1024;
	struct held *v = malloc(cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *sm = cistern__slotmeta(c, i);
		uint64_t word = atomic_load_explicit(&sm->word, memory_order_acquire);
		if (!(so->classify(word).cls == CISTERN_SLOT_COMMITTED ||
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
	char *from = (char *)((uintptr_t)c->arena & ~(uintptr_t)4095); /* the advice takes pages */
	madvise(from, (size_t)(c->arena + c->slot_count * c->slot_stride - from),
		MADV_POPULATE_READ);
	uint64_t max_id = 0;
	uint32_t crc = 0;

	/* Pass 2: copy each, keep it only if its word did not move meanwhile. */
	for (size_t k = 0; k < n; k++) {
		struct cistern_slotmeta *sm = cistern__slotmeta(c, v[k].index);
		uint64_t word = atomic_load_explicit(&sm->word, memory_order_acquire);
		uint64_t len = sm->len;
		uint64_t id = sm->sample_id;
		uint32_t sim = sm->sim_id, step = sm->time_step;
		uint32_t nseen = atomic_load_explicit(&sm->seen, memory_order_relaxed);
		bool ok = word == v[k].word && len <= c->slot_size;
		uint8_t *p = w_room(w, REC_HDR + round_up(ok ? (size_t)len : 0, 8));
		if (!p) {
			free(v);
			return w->err;
		}
		if (ok)
			memcpy(p + REC_HDR, cistern__payload(c, v[k].index), (size_t)len);
		/* Every read above happens before this second look at the word. */
		load_fence();
		ok = ok && atomic_load_explicit(&sm->word, memory_order_relaxed) == word;
		if (!ok) {
			m->skipped++;
			continue;
		}
		put64(p, id);
		put32(p + 8, sim);
		put32(p + 12, step);
		put64(p + 16, len);
		put32(p + 24, nseen);
		put32(p + 28, v[k].index);
		size_t rec = REC_HDR + round_up((size_t)len, 8);
		memset(p + REC_HDR + len, 0, rec - REC_HDR - (size_t)len);
		crc = cistern__crc32c(crc, p, rec);
		w_keep(w, p, rec);
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
	m->next_id = next_id_of(c->hdr, m->sample_count ? max_id : 0);
	return 0;
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
	const struct cistern_snap_ops *so = cistern__snap_ops_for(c->hdr->policy);
	if (!so) {
		cistern_detach(c);
		return -ENOTSUP;
	}
	struct meta m;
	memset(&m, 0, sizeof(m));
	cistern_config_get(c, &m.cfg);
	cistern_stats_get(c, &m.st);
	snprintf(m.name, sizeof(m.name), "%s", c->hdr->name);
	m.created_ns = c->hdr->created_ns;
	m.dumped_ns = (uint64_t)cistern__now_ns(CLOCK_REALTIME);
	m.closed = atomic_load_explicit(&c->hdr->closed, memory_order_acquire);
	m.producers_done = atomic_load_explicit(&c->hdr->producers_done, memory_order_acquire);

	/* Write next to the target and rename: a failed dump leaves the old file alone. */
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
		cistern_detach(c);
		return -ENAMETOOLONG;
	}
	/* The dump holds the samples: keep it as private as the segment. */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (m.cfg.mode & 0666) | 0600);
	if (fd < 0) {
		r = -errno;
		cistern_detach(c);
		return r;
	}
	struct writer w;
	roaring_bitmap_t *seen = NULL;
	char *bm = NULL;
	/* Every slot held, plus room for the seen set, the meta block and the trailer. */
	uint64_t expect = PREAMBLE_SIZE + c->slot_count * (REC_HDR + round_up(c->slot_size, 8)) +
			  2 * c->slot_count + 4 * META_SIZE;
	r = w_init(&w, fd, flags & CISTERN__DUMP_PLAIN, flags & CISTERN__DUMP_BUFFERED,
		   REC_HDR + round_up(c->slot_size, 8), expect);
	if (r < 0)
		goto out_file;
	seen = roaring_bitmap_create();
	if (!seen) {
		r = -ENOMEM;
		goto out;
	}
	uint8_t pre[PREAMBLE_SIZE];
	memcpy(pre, DUMP_MAGIC, 8);
	put32(pre + 8, CISTERN_DUMP_VERSION);
	put32(pre + 12, PREAMBLE_SIZE);
	if ((r = w_append(&w, pre, sizeof(pre))) < 0)
		goto out;
	m.samples_off = PREAMBLE_SIZE;
	if ((r = dump_samples(c, so, &w, &m, seen, progress, arg)) < 0)
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
	if ((r = w_append(&w, bm, m.bitmap_size)) < 0)
		goto out;

	uint8_t mb[META_SIZE], tr[TRAILER_SIZE];
	meta_encode(&m, mb);
	if ((r = w_append(&w, mb, sizeof(mb))) < 0)
		goto out;
	uint64_t meta_off = m.bitmap_off + m.bitmap_size;
	uint64_t file_size = meta_off + META_SIZE + TRAILER_SIZE;
	memset(tr, 0, sizeof(tr));
	memcpy(tr, TRAILER_MAGIC, 8);
	put64(tr + 8, file_size);
	put64(tr + 16, meta_off);
	if ((r = w_append(&w, tr, 24)) < 0)
		goto out;
	put32(tr + 24, w.crc);
	if ((r = w_append(&w, tr + 24, 8)) < 0)
		goto out;
	if ((r = w_finish(&w)) < 0)
		goto out;
	if (rename(tmp, path) < 0) {
		r = -errno;
		goto out;
	}
	info_from_meta(&m, file_size, info);
	r = 0;
out:
	w_destroy(&w);
out_file:
	close(fd);
	if (r < 0)
		unlink(tmp);
	free(bm);
	if (seen)
		roaring_bitmap_free(seen);
	cistern_detach(c);
	return r;
}

int cistern_dump(const char *name, const char *path, cistern_progress_fn progress, void *arg,
		 struct cistern_dump_info *info)
{
	return cistern__dump_ex(name, path, 0, progress, arg, info);
}

/* ---- the reader -------------------------------------------------------- */

struct rbuf {
	uint64_t off;  /* file offset of the chunk */
	size_t len;    /* bytes wanted */
	size_t got;    /* bytes read so far */
	int state;     /* 0 idle, 1 in flight, 2 complete */
};

/* Reads a file front to back in chunks, several in flight, handed over in order. */
struct reader {
	int fd;
	uint64_t size, next;    /* file size; offset of the next chunk to ask for */
	struct io_uring ring;
	bool ring_ok;
	struct bufs b;
	struct rbuf r[IO_BUFFERS];
	unsigned head;          /* buffer holding the next chunk in file order */
	int err;
};

static void r_queue(struct reader *rd, unsigned i)
{
	struct rbuf *rb = &rd->r[i];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&rd->ring);
	if (!sqe) {
		rd->err = -EBUSY;
		rb->state = 0; /* nothing of it is in flight: r_destroy() must not wait for it */
		return;
	}
	uint8_t *p = buf_at(&rd->b, i) + rb->got;
	unsigned n = (unsigned)(rb->len - rb->got);
	if (rd->b.registered)
		io_uring_prep_read_fixed(sqe, rd->fd, p, n, rb->off + rb->got, (int)i);
	else
		io_uring_prep_read(sqe, rd->fd, p, n, rb->off + rb->got);
	io_uring_sqe_set_data64(sqe, i);
	rb->state = 1;
}

/* Ask for every chunk that has a free buffer, in one submission. */
static void r_fill(struct reader *rd)
{
	bool any = false;
	for (unsigned k = 0; k < rd->b.n && rd->next < rd->size; k++) {
		unsigned i = (rd->head + k) % rd->b.n;
		if (rd->r[i].state != 0)
			continue;
		struct rbuf *rb = &rd->r[i];
		rb->off = rd->next;
		rb->len = rd->size - rd->next < rd->b.size ? (size_t)(rd->size - rd->next) : rd->b.size;
		rb->got = 0;
		rd->next += rb->len;
		r_queue(rd, i);
		any = true;
	}
	if (any)
		io_uring_submit(&rd->ring);
}

/* The next chunk in file order, or NULL at the end (or on error: rd->err). */
/* Without io_uring: the next chunk with pread(), into buffer 0. */
static const uint8_t *r_next_plain(struct reader *rd, size_t *len)
{
	if (rd->next >= rd->size)
		return NULL;
	size_t want = rd->size - rd->next < rd->b.size ? (size_t)(rd->size - rd->next) : rd->b.size;
	uint8_t *p = buf_at(&rd->b, 0);
	size_t got = 0;
	while (got < want) {
		ssize_t r = pread(rd->fd, p + got, want - got, (off_t)(rd->next + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rd->err = r < 0 ? -errno : -EBADMSG; /* 0: the file shrank under us */
			return NULL;
		}
		got += (size_t)r;
	}
	rd->next += want;
	*len = want;
	return p;
}

static const uint8_t *r_next(struct reader *rd, size_t *len)
{
	if (!rd->ring_ok)
		return r_next_plain(rd, len);
	r_fill(rd);
	struct rbuf *rb = &rd->r[rd->head];
	if (rb->state == 0)
		return NULL;
	while (rb->state != 2 && !rd->err) {
		struct io_uring_cqe *cqe;
		int r = next_cqe(&rd->ring, &cqe);
		if (r < 0) {
			rd->err = r;
			continue;
		}
		unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&rd->ring, cqe);
		struct rbuf *x = &rd->r[i];
		if (not_done(res)) {
			r_queue(rd, i);
		} else if (res <= 0) {
			/*
			 * Failed (0: the file shrank under us). Its completion is
			 * taken, so it is no longer in flight: left at 1,
			 * r_destroy() would wait for a completion that never comes.
			 */
			rd->err = res < 0 ? res : -EBADMSG;
			x->state = 0;
		} else {
			x->got += (size_t)res;
			if (x->got < x->len) {
				r_queue(rd, i);
				io_uring_submit(&rd->ring);
			} else {
				x->state = 2;
			}
		}
	}
	if (rd->err)
		return NULL;
	*len = rb->len;
	return buf_at(&rd->b, rd->head);
}

/* The chunk r_next() returned is consumed: its buffer can be refilled. */
static void r_done(struct reader *rd)
{
	if (!rd->ring_ok)
		return;
	rd->r[rd->head].state = 0;
	rd->head = (rd->head + 1) % rd->b.n;
}

static int r_init(struct reader *rd, int fd, uint64_t size)
{
	memset(rd, 0, sizeof(*rd));
	rd->fd = fd;
	rd->size = size;
	/*
	 * Chunks of 1 MiB, several in flight; a file smaller than that many
	 * chunks gets only what it fills (a small dump is read with one small
	 * buffer, not 8 MiB populated and pinned).
	 */
	size_t chunk = size < MIB ? (size_t)size : MIB;
	uint64_t chunks = chunk ? (size + chunk - 1) / chunk : 1;
	int r = bufs_alloc(&rd->b, chunk, chunks < IO_BUFFERS ? (unsigned)chunks : IO_BUFFERS);
	if (r < 0)
		return r;
	r = cistern__no_uring ? -ENOSYS : io_uring_queue_init(IO_BUFFERS, &rd->ring, 0);
	if (r < 0)
		return 0; /* no io_uring here: r_next() reads with pread() */
	rd->ring_ok = true;
	bufs_register(&rd->b, &rd->ring);
	return 0;
}

static void r_destroy(struct reader *rd)
{
	if (rd->ring_ok) {
		for (unsigned i = 0; i < rd->b.n; i++) {
			while (rd->r[i].state == 1) {
				struct io_uring_cqe *cqe;
				if (next_cqe(&rd->ring, &cqe) < 0)
					goto out;
				rd->r[io_uring_cqe_get_data64(cqe)].state = 2;
				io_uring_cqe_seen(&rd->ring, cqe);
			}
		}
out:
		io_uring_queue_exit(&rd->ring);
	}
	bufs_free(&rd->b);
}

/* ---- restore ----------------------------------------------------------- */

/* Parses the samples section as a byte stream and lays records into slots. */
struct parser {
	struct cistern *c;
	const struct meta *m;
	uint8_t hdr[REC_HDR];
	size_t hfill;           /* header bytes collected */
	uint64_t len, pad;      /* payload bytes and padding of the current record */
	uint64_t got;           /* payload bytes copied so far */
	int state;              /* 0 header, 1 payload, 2 padding */
	uint64_t count, bytes;
	uint64_t last_id;
	roaring_bitmap_t *seen; /* rebuilt from the records, to compare with the file's */
};

static int parse(struct parser *ps, const uint8_t *p, size_t n)
{
	struct cistern *c = ps->c;
	while (n) {
		if (ps->state == 0) {
			size_t k = REC_HDR - ps->hfill < n ? REC_HDR - ps->hfill : n;
			memcpy(ps->hdr + ps->hfill, p, k);
			ps->hfill += k;
			p += k;
			n -= k;
			if (ps->hfill < REC_HDR)
				break;
			ps->hfill = 0;
			if (ps->count >= ps->m->sample_count)
				return -EBADMSG;
			uint64_t id = get64(ps->hdr);
			uint64_t len = get64(ps->hdr + 16);
			uint32_t src = get32(ps->hdr + 28);
			if (len > c->slot_size || (ps->count && id <= ps->last_id) ||
			    src >= CISTERN_SLOT_COUNT_MAX)
				return -EBADMSG;
			struct cistern_slotmeta *sm = cistern__slotmeta(c, ps->count);
			sm->sample_id = id;
			sm->sim_id = get32(ps->hdr + 8);
			sm->time_step = get32(ps->hdr + 12);
			sm->len = len;
			uint32_t nseen = get32(ps->hdr + 24);
			atomic_store_explicit(&sm->seen, nseen, memory_order_relaxed);
			if (nseen)
				roaring_bitmap_add(ps->seen, src);
			ps->last_id = id;
			ps->len = len;
			ps->pad = round_up((size_t)len, 8) - len;
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

/* Read and check preamble, trailer and meta: everything decided before creating anything. */
static int read_frame(int fd, uint64_t *size, struct meta *m)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	*size = (uint64_t)st.st_size;
	uint8_t pre[PREAMBLE_SIZE], tr[TRAILER_SIZE], mb[META_SIZE];
	if (*size < PREAMBLE_SIZE + META_SIZE + TRAILER_SIZE)
		return -EBADMSG;
	if (pread(fd, pre, sizeof(pre), 0) != (ssize_t)sizeof(pre))
		return -EBADMSG;
	if (memcmp(pre, DUMP_MAGIC, 8) != 0)
		return -EBADMSG;
	if (get32(pre + 8) != CISTERN_DUMP_VERSION)
		return -EPROTONOSUPPORT;
	if (get32(pre + 12) != PREAMBLE_SIZE)
		return -EBADMSG;
	if (pread(fd, tr, sizeof(tr), (off_t)(*size - TRAILER_SIZE)) != (ssize_t)sizeof(tr))
		return -EBADMSG;
	if (memcmp(tr, TRAILER_MAGIC, 8) != 0 || get64(tr + 8) != *size ||
	    get64(tr + 16) != *size - TRAILER_SIZE - META_SIZE)
		return -EBADMSG;
	if (pread(fd, mb, sizeof(mb), (off_t)get64(tr + 16)) != (ssize_t)sizeof(mb))
		return -EBADMSG;
	int r = meta_decode(mb, m);
	if (r < 0)
		return r;
	/* The sections must tile the file exactly. */
	if (m->samples_off != PREAMBLE_SIZE || m->bitmap_off != m->samples_off + m->samples_size ||
	    m->bitmap_off + m->bitmap_size != get64(tr + 16) ||
	    m->sample_count > m->cfg.slot_count || m->samples_size < m->sample_count * REC_HDR ||
	    m->cfg.policy >= CISTERN_POLICY_COUNT || m->next_id < m->sample_count)
		return -EBADMSG;
	/*
	 * A config that create would refuse, under a meta checksum that holds:
	 * refused here, where verify and restore both read it, so that they
	 * agree (restore would otherwise fail later, at create, with -EINVAL).
	 */
	if (cistern_config_problem(&m->cfg) != NULL)
		return -EBADMSG;
	return 0;
}

/* Stream the whole file: parse samples, collect the seen set, check every CRC. */
static int load(int fd, uint64_t size, const struct meta *m, struct cistern *c,
		roaring_bitmap_t *seen, cistern_progress_fn progress, void *arg)
{
	struct reader rd;
	int r = r_init(&rd, fd, size);
	if (r < 0)
		return r;
	struct parser ps = {.c = c, .m = m, .seen = seen};
	char *bm = malloc(m->bitmap_size ? m->bitmap_size : 1);
	if (!bm) {
		r_destroy(&rd);
		return -ENOMEM;
	}
	uint32_t file_crc = 0, samples_crc = 0;
	uint64_t pos = 0;
	const uint64_t crc_end = size - 8; /* the whole-file CRC stops at its own field */
	const uint8_t *p;
	size_t len;
	uint8_t tail[8];
	r = 0;
	while (r == 0 && (p = r_next(&rd, &len)) != NULL) {
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
		pos = b;
		r_done(&rd);
		if (progress)
			progress(pos, size, arg);
	}
	if (r == 0 && rd.err)
		r = rd.err;
	r_destroy(&rd);
	if (r == 0 && pos != size)
		r = -EBADMSG;
	/* Checksums first: a damaged file must say "damaged", whatever else is off. */
	if (r == 0 && file_crc != get32(tail))
		r = -EBADMSG;
	if (r == 0 && (samples_crc != m->samples_crc ||
		       cistern__crc32c(0, bm, m->bitmap_size) != m->bitmap_crc))
		r = -EBADMSG;
	if (r == 0 && (ps.state != 0 || ps.hfill != 0 || ps.count != m->sample_count ||
		       ps.bytes != m->payload_bytes))
		r = -EBADMSG;
	if (r == 0) {
		roaring_bitmap_t *fb = NULL;
		if (roaring_bitmap_portable_deserialize_size(bm, m->bitmap_size) == m->bitmap_size)
			fb = roaring_bitmap_portable_deserialize_safe(bm, m->bitmap_size);
		if (!fb || !roaring_bitmap_equals(fb, seen))
			r = -EBADMSG;
		if (fb)
			roaring_bitmap_free(fb);
	}
	free(bm);
	return r;
}

/* Carry the statistics over, so counters continue where the source left them. */
static void restore_stats(struct cistern *c, const struct meta *m)
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
	if (now.population != m->sample_count)
		atomic_fetch_add_explicit(&ret->puts, m->sample_count - now.population,
					  memory_order_relaxed);
}

int cistern_dump_verify(const char *path, struct cistern_dump_info *info)
{
	if (!path)
		return -EINVAL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	uint64_t size;
	struct meta m;
	int r = read_frame(fd, &size, &m);
	if (r < 0) {
		close(fd);
		return r;
	}
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
		r = load(fd, size, &m, &scratch, seen, NULL, NULL);
	}
	free(sm);
	free(arena);
	if (seen)
		roaring_bitmap_free(seen);
	close(fd);
	if (r == 0)
		info_from_meta(&m, size, info);
	return r;
}

int cistern_restore(const char *path, const char *name, cistern_progress_fn progress, void *arg,
		    struct cistern_dump_info *info)
{
	if (!path)
		return -EINVAL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	uint64_t size;
	struct meta m;
	int r = read_frame(fd, &size, &m);
	if (r < 0)
		goto out_fd;
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
	static _Atomic unsigned counter;
	snprintf(tmpname, sizeof(tmpname), "restore-%d-%u", (int)getpid(),
		 atomic_fetch_add(&counter, 1));
	cistern__shm_name(tmpname, tmp, sizeof(tmp));
	snprintf(from, sizeof(from), "/dev/shm%s", tmp);

	struct cistern *c;
	r = cistern_create(tmpname, &m.cfg, &c);
	if (r < 0)
		goto out_fd;
	/*
	 * Name the header for its final name now: tools that come across the
	 * temporary object see a name that differs from the file's and know a
	 * restore is under way (or died: then gc removes it).
	 */
	memset(c->hdr->name, 0, sizeof(c->hdr->name));
	snprintf(c->hdr->name, sizeof(c->hdr->name), "%s", name);
	const struct cistern_snap_ops *so = cistern__snap_ops_for(c->hdr->policy);
	roaring_bitmap_t *seen = roaring_bitmap_create();
	if (!so)
		r = -ENOTSUP;
	else if (!seen)
		r = -ENOMEM;
	else
		r = load(fd, size, &m, c, seen, progress, arg);
	if (seen)
		roaring_bitmap_free(seen);
	if (r == 0)
		r = so->restore(c->hdr, m.sample_count, m.next_id);
	if (r == 0) {
		atomic_store_explicit(&c->hdr->next_sample_id, m.next_id, memory_order_relaxed);
		atomic_store_explicit(&c->hdr->producers_done, m.producers_done,
				      memory_order_relaxed);
		atomic_store_explicit(&c->hdr->closed, m.closed ? 1 : 0, memory_order_relaxed);
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
	if (r < 0)
		shm_unlink(tmp);
	cistern_detach(c);
	if (r == 0)
		info_from_meta(&m, size, info);
out_fd:
	close(fd);
	return r;
}
