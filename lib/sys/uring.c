/* SPDX-License-Identifier: MIT */
/*
 * uring.c - batches of reads and writes through one io_uring a process
 * (uring.h).
 */
#include "sys/uring.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

enum { RING_DEPTH = 256 };
/* Entries of the ring's buffer table: one a region, a few regions a handle. */
enum { RING_BUFS = 64 };

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static struct io_uring ring;
static pid_t ring_pid;     /* the process that made `ring`; 0: none */
static unsigned in_flight; /* requests the ring holds; at most RING_DEPTH */
/* Writes handed to the ring and bytes they wrote, for tests (cistern__uring_written). */
static uint64_t writes_queued, bytes_written;
/*
 * The registered regions: `ring_gen` names the ring made last, so that a
 * region registered with a ring that a fork() child replaced is never
 * used with the new one; bit i of `bufs_used` is table entry i.
 */
static uint32_t ring_gen;
static bool bufs_table; /* the ring has its (sparse) buffer table */
static uint64_t bufs_used;
static uint64_t fixed_queued; /* requests into a registered region, for tests */

unsigned cistern__uring_depth(void)
{
	return RING_DEPTH;
}

/*
 * A fork() while another thread holds ring_lock would leave the child's
 * copy locked for ever: the child starts with it unlocked (the ring itself
 * is replaced on the child's first call, below).
 */
static void child_unlock(void)
{
	pthread_mutex_init(&ring_lock, NULL);
}

static void install_atfork(void)
{
	pthread_atfork(NULL, NULL, child_unlock);
}

/* Install child_unlock() once, before the first use of ring_lock that a fork could catch. */
static void atfork_once(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install_atfork);
}

/*
 * The ring of this process. A ring inherited through fork() maps the same
 * pages as the parent's, so the child lets go of its copy (unmaps it and
 * closes its descriptor, which leaves the parent's ring alone) and makes
 * its own. Called with ring_lock held.
 */
static int ring_get(void)
{
	pid_t me = getpid();
	if (ring_pid == me)
		return 0;
	if (ring_pid != 0) {
		io_uring_queue_exit(&ring);
		ring_pid = 0;
		in_flight = 0;
	}
	int r = io_uring_queue_init(RING_DEPTH, &ring, 0);
	if (r < 0)
		return r;
	ring_pid = me;
	ring_gen++;
	bufs_table = false;
	bufs_used = 0;
	return 0;
}

/* Queue what is left of one request. The caller checked that the ring has room. */
static void queue_one(struct cistern__io *io)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
	if (!sqe) {
		/* The submission queue is full of queued requests: hand them over. */
		io_uring_submit(&ring);
		sqe = io_uring_get_sqe(&ring);
	}
	/* Not NULL: in_flight <= RING_DEPTH and the queue was just emptied. */
	uint8_t *p = (uint8_t *)io->buf + io->done;
	unsigned len = io->len - io->done;
	uint64_t off = io->off + io->done;
	bool fixed = io->region.slot && io->region.gen == ring_gen;
	if (fixed && io->write)
		io_uring_prep_write_fixed(sqe, io->fd, p, len, off, (int)io->region.slot - 1);
	else if (fixed)
		io_uring_prep_read_fixed(sqe, io->fd, p, len, off, (int)io->region.slot - 1);
	else if (io->write)
		io_uring_prep_write(sqe, io->fd, p, len, off);
	else
		io_uring_prep_read(sqe, io->fd, p, len, off);
	writes_queued += io->write;
	fixed_queued += fixed;
	io_uring_sqe_set_data(sqe, io);
	if (io->async)
		io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
	in_flight++;
}

/*
 * Queue the batch's requests that fit into the ring (those of length 0 are
 * done already). Called with ring_lock held.
 */
static void fill(struct cistern__io_batch *b)
{
	while (b->next < b->n && in_flight < RING_DEPTH) {
		struct cistern__io *x = &b->io[b->next++];
		if (x->res == 1)
			queue_one(x);
	}
}

static void finish(struct cistern__io *io, int res)
{
	struct cistern__io_batch *b = io->batch;
	io->res = res;
	if (res < 0 && b->err == 0)
		b->err = res;
	b->pending--;
}

/* Record one completion, and queue the rest of a short or interrupted request. */
static void complete(struct cistern__io *io, int res)
{
	in_flight--;
	if (res == -EINTR || res == -EAGAIN || res == -ECANCELED) {
		queue_one(io);
		return;
	}
	if (res < 0) {
		finish(io, res);
		return;
	}
	if (res == 0) {
		/* Nothing moved: a read past the end, or a write that cannot go on. */
		finish(io, -EIO);
		return;
	}
	io->done += (uint32_t)res;
	if (io->write)
		bytes_written += (uint64_t)res;
	if (io->done < io->len)
		queue_one(io);
	else
		finish(io, 0);
}

/* Record every completion the ring holds now. Called with ring_lock held. */
static void reap(void)
{
	struct io_uring_cqe *cqe;
	while (io_uring_peek_cqe(&ring, &cqe) == 0) {
		struct cistern__io *io = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
		complete(io, res);
	}
}

int cistern__uring_start(struct cistern__io_batch *b, struct cistern__io *io, unsigned n)
{
	atfork_once();
	memset(b, 0, sizeof(*b));
	b->io = io;
	b->n = n;
	b->pending = n;
	for (unsigned i = 0; i < n; i++) {
		io[i].done = 0;
		io[i].res = 1;
		io[i].batch = b;
		if (io[i].len == 0) {
			io[i].res = 0;
			b->pending--;
		}
	}
	if (b->pending == 0)
		return 0;
	pthread_mutex_lock(&ring_lock);
	int r = ring_get();
	if (r < 0) {
		pthread_mutex_unlock(&ring_lock);
		for (unsigned i = 0; i < n; i++)
			if (io[i].res == 1)
				io[i].res = r;
		b->pending = 0;
		b->err = r;
		return r;
	}
	fill(b);
	/*
	 * A failed submit leaves the requests queued, and the wait submits them
	 * again. Its error is not returned: a caller told of a failure might
	 * free requests that the ring still holds and will complete.
	 */
	io_uring_submit(&ring);
	pthread_mutex_unlock(&ring_lock);
	return 0;
}

int cistern__uring_wait(struct cistern__io_batch *b)
{
	pthread_mutex_lock(&ring_lock);
	while (b->pending > 0) {
		/* Requests of this batch that did not fit before. */
		fill(b);
		/*
		 * Hand over whatever is queued and wait. Once every request of the
		 * batch is in the ring, wait for as many completions as it still
		 * needs (no more than the ring holds, so that they all come): one
		 * wake-up for the batch, not one a request. A signal interrupts
		 * the wait, not the requests: wait again.
		 */
		unsigned want = 1;
		if (b->next == b->n)
			want = b->pending < in_flight ? b->pending : in_flight;
		int r = io_uring_submit_and_wait(&ring, want ? want : 1);
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
			pthread_mutex_unlock(&ring_lock);
			return r;
		}
		reap();
	}
	pthread_mutex_unlock(&ring_lock);
	return b->err;
}

bool cistern__uring_poll(struct cistern__io_batch *b)
{
	if (b->pending == 0)
		return true;
	pthread_mutex_lock(&ring_lock);
	if (ring_pid != getpid()) {
		/* A batch of the parent's ring (a fork() child's copy): never ours to finish. */
		pthread_mutex_unlock(&ring_lock);
		return false;
	}
	/* Requests that did not fit before, and whatever is queued: no wait. */
	fill(b);
	io_uring_submit(&ring);
	reap();
	/* A completion may have queued the rest of a short request: hand it over. */
	io_uring_submit(&ring);
	bool done = b->pending == 0;
	pthread_mutex_unlock(&ring_lock);
	return done;
}

int cistern__uring_run(struct cistern__io *io, unsigned n)
{
	struct cistern__io_batch b;
	int r = cistern__uring_start(&b, io, n);
	if (r < 0)
		return r;
	return cistern__uring_wait(&b);
}

int cistern__uring_register(void *base, size_t len, struct cistern__io_region *out)
{
	atfork_once();
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&ring_lock);
	int r = ring_get();
	if (r == 0 && !bufs_table) {
		/* Made on first use: a process that never registers pins nothing. */
		r = io_uring_register_buffers_sparse(&ring, RING_BUFS);
		bufs_table = r == 0;
	}
	unsigned i = 0;
	if (r == 0) {
		while (i < RING_BUFS && (bufs_used >> i & 1))
			i++;
		if (i == RING_BUFS)
			r = -ENOSPC;
	}
	if (r == 0) {
		struct iovec iov = {.iov_base = base, .iov_len = len};
		r = io_uring_register_buffers_update_tag(&ring, i, &iov, NULL, 1);
		r = r == 1 ? 0 : r < 0 ? r : -EIO;
	}
	if (r == 0) {
		bufs_used |= UINT64_C(1) << i;
		out->slot = i + 1;
		out->gen = ring_gen;
	}
	pthread_mutex_unlock(&ring_lock);
	return r;
}

void cistern__uring_unregister(struct cistern__io_region *region)
{
	pthread_mutex_lock(&ring_lock);
	/*
	 * Only the ring that registered it: a fork() child's copy of the ring
	 * descriptor still names its parent's ring until the child makes its own.
	 */
	if (region->slot && region->gen == ring_gen && ring_pid == getpid()) {
		struct iovec iov = {.iov_base = NULL, .iov_len = 0};
		unsigned i = region->slot - 1;
		if (io_uring_register_buffers_update_tag(&ring, i, &iov, NULL, 1) == 1)
			bufs_used &= ~(UINT64_C(1) << i);
	}
	pthread_mutex_unlock(&ring_lock);
	memset(region, 0, sizeof(*region));
}

void cistern__uring_fixed(uint64_t *requests, unsigned *regions)
{
	pthread_mutex_lock(&ring_lock);
	*requests = fixed_queued;
	*regions = ring_pid == getpid() ? (unsigned)__builtin_popcountll(bufs_used) : 0;
	pthread_mutex_unlock(&ring_lock);
}

void cistern__uring_written(uint64_t *writes, uint64_t *bytes)
{
	pthread_mutex_lock(&ring_lock);
	*writes = writes_queued;
	*bytes = bytes_written;
	pthread_mutex_unlock(&ring_lock);
}
