/* SPDX-License-Identifier: MIT */
/*
 * uring.h - batches of reads and writes through one io_uring a process.
 *
 * A caller fills an array of struct cistern__io (file, buffer, length,
 * offset, read or write), starts it as a batch and later waits for the
 * whole batch. Many batches may be in flight at once; each completion
 * names its request, so waiting for one batch also records the
 * completions of the others. A short transfer is continued from where it
 * stopped, and a request that came back interrupted (-EINTR, -EAGAIN,
 * -ECANCELED) is asked for again, so a batch ends with every request done
 * in full or failed with an error.
 *
 * The ring is made on first use and belongs to the process: a child made
 * by fork() makes its own on its first call and never touches its
 * parent's. Threads share the ring under a mutex. This layer knows files
 * and buffers only, nothing of segments.
 */
#ifndef CISTERN_SYS_URING_H
#define CISTERN_SYS_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cistern__io_batch;

/*
 * A buffer region registered with the process's ring
 * (cistern__uring_register()): the kernel pinned its pages once, so a
 * request into it skips pinning them again. Zeroed: none.
 */
struct cistern__io_region {
	uint32_t slot; /* the ring's buffer table entry + 1; 0: not registered */
	uint32_t gen;  /* the ring it belongs to: a fork() child's new ring has another */
};

struct cistern__io {
	int fd;
	bool write;
	void *buf;
	uint32_t len;
	uint64_t off;
	/*
	 * Issued by the kernel's workers (IOSQE_ASYNC) rather than inside the
	 * submission, which then returns at once: for requests that nobody
	 * waits for soon, such as reads ahead.
	 */
	bool async;
	/* buf lies inside this region (or zeroed: an ordinary buffer). */
	struct cistern__io_region region;
	/* Set by the batch: bytes done so far, and 0 once done, or -errno. */
	uint32_t done;
	int res;
	struct cistern__io_batch *batch;
};

struct cistern__io_batch {
	struct cistern__io *io;
	unsigned n;
	unsigned next;    /* first request not yet handed to the ring */
	unsigned pending; /* requests not yet done or failed */
	int err;          /* the first error of the batch, or 0 */
};

/*
 * Hand the batch's requests to the ring, as many as it has room for: 0, or
 * the error of making the ring (io_uring disabled by the kernel or a
 * seccomp filter: then every request failed with it, and none is in the
 * ring). After 0 the caller must wait for the batch before it reuses or
 * frees the requests or their buffers.
 */
int cistern__uring_start(struct cistern__io_batch *b, struct cistern__io *io, unsigned n);
/* Wait until every request of the batch is done or failed: 0 or the first -errno. */
int cistern__uring_wait(struct cistern__io_batch *b);
/*
 * Record the completions the ring holds now, without waiting: true once
 * every request of the batch is done or failed (b->err says which).
 */
bool cistern__uring_poll(struct cistern__io_batch *b);
/* Start and wait. */
int cistern__uring_run(struct cistern__io *io, unsigned n);
/*
 * The writes this process handed to its ring so far (a short write's rest
 * counts again) and the bytes they wrote. For tests and benchmarks.
 */
void cistern__uring_written(uint64_t *writes, uint64_t *bytes);
/*
 * Register [base, base + len) with the process's ring, so that requests
 * into it need no page pinning each (the kernel pins the pages once, now;
 * they stay resident until unregistered): 0 and *out, or -errno (no room
 * in the ring's table, RLIMIT_MEMLOCK for a user without CAP_IPC_LOCK, a
 * kernel without sparse buffer tables). A caller that gets an error uses
 * the region as ordinary memory: every request works without it.
 */
int cistern__uring_register(void *base, size_t len, struct cistern__io_region *out);
/*
 * Give the region's table entry back, once no request into it is in
 * flight. A region of another ring (a parent's, after fork()) is left
 * alone. Zeroes *region.
 */
void cistern__uring_unregister(struct cistern__io_region *region);
/*
 * Requests handed to the ring into a registered region, and their count
 * of regions registered now. For tests and benchmarks.
 */
void cistern__uring_fixed(uint64_t *requests, unsigned *regions);
/* The number of entries of the process's ring. */
unsigned cistern__uring_depth(void);

#endif
