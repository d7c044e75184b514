/* SPDX-License-Identifier: MIT */
/*
 * dump_io.c - staged writes and read-ahead through io_uring, with a plain
 * pwrite()/pread() path where io_uring is unavailable (dump_io.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "admin/dump_io.h"
#include "core/handle.h"
#include "sys/crc32c.h"

bool cistern__no_uring;

/* ---- buffers ----------------------------------------------------------- */

/* n buffers of at least `min` bytes each, within IO_MEMORY when possible. */
static int bufs_alloc(struct bufs *b, size_t min, unsigned want)
{
	b->size = cistern__align_up(min ? min : 1, 4096);
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

static void io_w_queue(struct io_writer *w, unsigned i)
{
	struct wbuf *wb = &w->w[i];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
	if (!sqe) {
		/* Cannot happen with one ring entry per buffer; submit and retry anyway. */
		io_uring_submit(&w->ring);
		w->queued = 0;
		sqe = io_uring_get_sqe(&w->ring);
		if (!sqe) {
			/* Not in flight: cistern__io_w_destroy() must not wait for it. */
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
static void io_w_reap(struct io_writer *w, bool wait)
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
			io_w_queue(w, i);
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
			io_w_queue(w, i);
			continue;
		}
		wb->busy = false;
		w->inflight--;
	}
}

static int io_w_flush(struct io_writer *w)
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
	io_w_queue(w, w->cur);
	w->off += n;
	w->fill = 0;
	/* Submit in batches of two buffers: fewer system calls, the disk stays busy. */
	if (w->queued >= 2) {
		io_uring_submit(&w->ring);
		w->queued = 0;
	}
	/* Next buffer in turn; wait for its previous write if still in flight. */
	w->cur = (w->cur + 1) % w->b.n;
	io_w_reap(w, false);
	while (w->w[w->cur].busy && !w->err)
		io_w_reap(w, true);
	if (carry && !w->err) {
		/* The kernel only reads the previous buffer: copying from it is safe. */
		memcpy(buf_at(&w->b, w->cur), buf_at(&w->b, prev) + n, carry);
		w->fill = carry;
	}
	return w->err;
}

/* Room for n contiguous bytes in the current buffer (n <= buffer size). */
uint8_t *cistern__io_w_room(struct io_writer *w, size_t n)
{
	if (w->fill + n > w->b.size && io_w_flush(w) < 0)
		return NULL;
	return buf_at(&w->b, w->cur) + w->fill;
}

/* Keep n bytes written at cistern__io_w_room(): they become part of the file. */
void cistern__io_w_keep(struct io_writer *w, const uint8_t *p, size_t n)
{
	w->crc = cistern__crc32c(w->crc, p, n);
	w->fill += n;
}

int cistern__io_w_append(struct io_writer *w, const void *data, size_t n)
{
	const uint8_t *s = data;
	while (n) {
		size_t room = w->b.size - w->fill;
		if (room == 0) {
			if (io_w_flush(w) < 0)
				return w->err;
			continue;
		}
		size_t k = n < room ? n : room;
		uint8_t *p = buf_at(&w->b, w->cur) + w->fill;
		memcpy(p, s, k);
		cistern__io_w_keep(w, p, k);
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
int cistern__io_w_init(struct io_writer *w, int fd, bool plain, bool buffered, size_t min_buf,
		       uint64_t expect)
{
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->plain = plain;
	/* Room for a carried partial block in front of the largest record. */
	size_t min = min_buf + DIRECT_ALIGN;
	size_t size = expect < IO_MIB ? (size_t)expect : IO_MIB;
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
int cistern__io_w_finish(struct io_writer *w)
{
	uint64_t size = w->off + w->fill;
	if (w->direct && w->fill % DIRECT_ALIGN) {
		/* The last block goes out whole, zero-padded; the file is cut back below. */
		size_t pad = DIRECT_ALIGN - w->fill % DIRECT_ALIGN;
		memset(buf_at(&w->b, w->cur) + w->fill, 0, pad);
		w->fill += pad;
	}
	if (io_w_flush(w) < 0)
		return w->err;
	if (w->plain)
		return fsync(w->fd) < 0 ? -errno : 0;
	while (w->inflight && !w->err)
		io_w_reap(w, true);
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

void cistern__io_w_destroy(struct io_writer *w)
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

/* ---- the reader -------------------------------------------------------- */

static void io_r_queue(struct io_reader *rd, unsigned i)
{
	struct rbuf *rb = &rd->r[i];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&rd->ring);
	if (!sqe) {
		rd->err = -EBUSY;
		rb->state =
			0; /* nothing of it is in flight: cistern__io_r_destroy() must not wait for it */
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
static void io_r_fill(struct io_reader *rd)
{
	bool any = false;
	for (unsigned k = 0; k < rd->b.n && rd->next < rd->size; k++) {
		unsigned i = (rd->head + k) % rd->b.n;
		if (rd->r[i].state != 0)
			continue;
		struct rbuf *rb = &rd->r[i];
		rb->off = rd->next;
		rb->len = rd->size - rd->next < rd->b.size ? (size_t)(rd->size - rd->next)
							   : rd->b.size;
		rb->got = 0;
		rd->next += rb->len;
		io_r_queue(rd, i);
		any = true;
	}
	if (any)
		io_uring_submit(&rd->ring);
}

/* Without io_uring: the next chunk with pread(), into buffer 0. */
static const uint8_t *io_r_next_plain(struct io_reader *rd, size_t *len)
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

const uint8_t *cistern__io_r_next(struct io_reader *rd, size_t *len)
{
	if (!rd->ring_ok)
		return io_r_next_plain(rd, len);
	io_r_fill(rd);
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
			io_r_queue(rd, i);
		} else if (res <= 0) {
			/*
			 * Failed (0: the file shrank under us). Its completion is
			 * taken, so it is no longer in flight: left at 1,
			 * cistern__io_r_destroy() would wait for a completion that never comes.
			 */
			rd->err = res < 0 ? res : -EBADMSG;
			x->state = 0;
		} else {
			x->got += (size_t)res;
			if (x->got < x->len) {
				io_r_queue(rd, i);
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

/* The chunk cistern__io_r_next() returned is consumed: its buffer can be refilled. */
void cistern__io_r_done(struct io_reader *rd)
{
	if (!rd->ring_ok)
		return;
	rd->r[rd->head].state = 0;
	rd->head = (rd->head + 1) % rd->b.n;
}

int cistern__io_r_init(struct io_reader *rd, int fd, uint64_t size)
{
	memset(rd, 0, sizeof(*rd));
	rd->fd = fd;
	rd->size = size;
	/*
	 * Chunks of 1 MiB, several in flight; a file smaller than that many
	 * chunks gets only what it fills (a small dump is read with one small
	 * buffer, not 8 MiB populated and pinned).
	 */
	size_t chunk = size < IO_MIB ? (size_t)size : IO_MIB;
	uint64_t chunks = chunk ? (size + chunk - 1) / chunk : 1;
	int r = bufs_alloc(&rd->b, chunk, chunks < IO_BUFFERS ? (unsigned)chunks : IO_BUFFERS);
	if (r < 0)
		return r;
	r = cistern__no_uring ? -ENOSYS : io_uring_queue_init(IO_BUFFERS, &rd->ring, 0);
	if (r < 0)
		return 0; /* no io_uring here: cistern__io_r_next() reads with pread() */
	rd->ring_ok = true;
	bufs_register(&rd->b, &rd->ring);
	return 0;
}

void cistern__io_r_destroy(struct io_reader *rd)
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
