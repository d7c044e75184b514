/* SPDX-License-Identifier: MIT */
/*
 * dump_io.h - the file I/O of dumps and restores (dump_io.c); internal.
 *
 * I/O goes through io_uring: staging buffers (registered with the ring when
 * the memlock limit allows) are filled in turn, their writes queued and
 * submitted in batches with several in flight. The dump file is written with
 * O_DIRECT where the file system allows it, so those writes really proceed
 * while the next buffer is being filled (see docs/dump-benchmark.md). A
 * restore keeps several chunk reads in flight and parses chunks as they
 * arrive.
 */
#ifndef CISTERN_DUMP_IO_H
#define CISTERN_DUMP_IO_H

#include <liburing.h>

#define IO_MIB (UINT64_C(1) << 20)
/* Staging and read-ahead memory a dump or restore may use at most (roughly). */
#define IO_MEMORY (256 * IO_MIB)
#define IO_BUFFERS 8
/* O_DIRECT offsets, lengths and buffers are multiples of this. */
#define DIRECT_ALIGN 4096

/* The staging or read-ahead buffers: n of `size` bytes, one mapping. */
struct bufs {
	uint8_t *mem;
	unsigned n;
	size_t size;
	bool registered;
};

/* One staging buffer's write. */
struct wbuf {
	size_t len;   /* bytes to write */
	size_t done;  /* bytes written so far */
	uint64_t off; /* file offset of the buffer's first byte */
	bool busy;
};

/* Stages bytes in file order and writes them out, several buffers in flight. */
struct io_writer {
	int fd;
	bool plain;  /* pwrite() instead of io_uring (benchmark baseline) */
	bool direct; /* O_DIRECT: only whole DIRECT_ALIGN blocks are written */
	struct io_uring ring;
	bool ring_ok;
	struct bufs b;
	struct wbuf w[IO_BUFFERS];
	unsigned cur; /* buffer being filled */
	size_t fill;  /* bytes staged in it */
	uint64_t off; /* file offset where it goes */
	unsigned inflight, queued;
	int err;
	uint32_t crc; /* CRC-32C of every byte staged so far */
};

/*
 * A writer on fd (O_WRONLY, empty). min_buf: the largest record; expect:
 * about how big the file will be. plain: pwrite() instead of io_uring;
 * buffered: no O_DIRECT. 0 or -ENOMEM.
 */
int cistern__io_w_init(struct io_writer *w, int fd, bool plain, bool buffered, size_t min_buf,
		       uint64_t expect);
/* Room for n contiguous bytes (n <= the largest record), or NULL on an error (w->err). */
uint8_t *cistern__io_w_room(struct io_writer *w, size_t n);
/* Keep n bytes written at cistern__io_w_room(): they become part of the file. */
void cistern__io_w_keep(struct io_writer *w, const uint8_t *p, size_t n);
/* Append n bytes: 0 or the first write error. */
int cistern__io_w_append(struct io_writer *w, const void *data, size_t n);
/* Write what is staged, wait for every write, and make the file durable. */
int cistern__io_w_finish(struct io_writer *w);
/* Wait for writes in flight, then free everything (after cistern__io_w_init() succeeded). */
void cistern__io_w_destroy(struct io_writer *w);

/* One read-ahead buffer's chunk. */
struct rbuf {
	uint64_t off; /* file offset of the chunk */
	size_t len;   /* bytes wanted */
	size_t got;   /* bytes read so far */
	int state;    /* 0 idle, 1 in flight, 2 complete */
};

/* Reads a file front to back in chunks, several in flight, handed over in order. */
struct io_reader {
	int fd;
	uint64_t size, next; /* file size; offset of the next chunk to ask for */
	struct io_uring ring;
	bool ring_ok;
	struct bufs b;
	struct rbuf r[IO_BUFFERS];
	unsigned head; /* buffer holding the next chunk in file order */
	int err;
};

/* A reader of the size bytes of fd, front to back. 0 or -ENOMEM. */
int cistern__io_r_init(struct io_reader *rd, int fd, uint64_t size);
/* The next chunk in file order, or NULL at the end or on an error (rd->err). */
const uint8_t *cistern__io_r_next(struct io_reader *rd, size_t *len);
/* The chunk cistern__io_r_next() returned is consumed: its buffer can be refilled. */
void cistern__io_r_done(struct io_reader *rd);
void cistern__io_r_destroy(struct io_reader *rd);

/* Tests set this to take the paths used where io_uring is unavailable. */
extern bool cistern__no_uring;

#endif
