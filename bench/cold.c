/* SPDX-License-Identifier: MIT */
/*
 * cold - what the cold store's batch reads get of the disk: random reads of
 * a cold file, three ways in the same run, for 4 KiB and 256 KiB samples:
 *
 *   bound     a plain io_uring loop: `depth` O_DIRECT reads of one sample
 *             each kept in flight, a new one queued as each completes; the
 *             disk's random-read rate for this file and pattern
 *   batch     the cold store: batches of 256 random slots, each started
 *             and then waited for in full (lib/sys/uring.c, lib/tier/cold.c)
 *   ahead     the same batches with the next one started before the current
 *             one is waited for, as a reader that draws ahead does
 *
 * All read uniformly random slots of the same file, which is written in
 * full first (unwritten blocks would read as zeros without touching the
 * disk). Rounds alternate the three ways; each rate is the median of the
 * rounds. Prints a table and the ratios against the bound; asserts nothing.
 *
 *   cistern-cold [DIR [MIB [SECONDS]]]   (defaults /var/tmp, 512, 1)
 *
 * DIR must be on a disk file system that takes O_DIRECT.
 */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tier/cold.h"

enum { BATCH = 256, DEPTH = 256, ROUNDS = 5 };

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_state = 0x853c49e6748fea9bu;

static uint64_t below(uint64_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state % n;
}

/* Fill every slot, 1 MiB or one slot at a time. */
static int fill_file(struct cistern__cold *c)
{
	uint64_t per = (1u << 20) / c->slot_bytes;
	per = per ? per : 1;
	uint8_t *buf = cistern__cold_alloc(c, per);
	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < per * c->slot_bytes; i++)
		buf[i] = (uint8_t)(i * 31 + 7);
	for (uint64_t s = 0; s < c->nslots; s += per) {
		uint64_t n = s + per <= c->nslots ? per : c->nslots - s;
		struct cistern__io io;
		cistern__cold_prep(c, &io, s, (uint32_t)n, buf, true);
		int r = cistern__uring_run(&io, 1);
		if (r < 0) {
			free(buf);
			return r;
		}
	}
	free(buf);
	return 0;
}

/* The bound: DEPTH single-slot reads always in flight, for `secs`. Slots a second. */
static double run_bound(struct cistern__cold *c, uint8_t *bufs, double secs)
{
	struct io_uring ring;
	if (io_uring_queue_init(DEPTH, &ring, 0) < 0)
		return -1;
	uint64_t done = 0;
	for (unsigned i = 0; i < DEPTH; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		uint64_t s = below(c->nslots);
		io_uring_prep_read(sqe, c->fd, bufs + (size_t)i * c->slot_bytes, c->slot_bytes,
				   CISTERN__COLD_BLOCK + s * c->slot_bytes);
		io_uring_sqe_set_data64(sqe, i);
	}
	double t0 = now(), t = t0;
	unsigned in_flight = DEPTH;
	bool stop = false;
	while (in_flight) {
		struct io_uring_cqe *cqe;
		int r = io_uring_submit_and_wait(&ring, 1);
		if (r < 0 && r != -EINTR)
			break;
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
			bool ok = cqe->res == (int)c->slot_bytes;
			io_uring_cqe_seen(&ring, cqe);
			in_flight--;
			if (!ok)
				stop = true;
			done++;
			if (stop)
				continue;
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			uint64_t s = below(c->nslots);
			io_uring_prep_read(sqe, c->fd, bufs + (size_t)i * c->slot_bytes,
					   c->slot_bytes, CISTERN__COLD_BLOCK + s * c->slot_bytes);
			io_uring_sqe_set_data64(sqe, i);
			in_flight++;
		}
		t = now();
		if (t - t0 >= secs)
			stop = true;
	}
	io_uring_queue_exit(&ring);
	return (double)done / (t - t0);
}

static void draw(struct cistern__cold *c, struct cistern__io *io, uint8_t *bufs)
{
	for (unsigned i = 0; i < BATCH; i++)
		cistern__cold_prep(c, &io[i], below(c->nslots), 1, bufs + (size_t)i * c->slot_bytes,
				   false);
}

/* Batches of BATCH random slots; with `ahead`, the next batch is in flight meanwhile. */
static double run_batches(struct cistern__cold *c, uint8_t *bufs, double secs, bool ahead)
{
	struct cistern__io io[2][BATCH];
	struct cistern__io_batch b[2];
	uint64_t done = 0;
	double t0 = now(), t = t0;
	unsigned cur = 0;
	draw(c, io[0], bufs);
	if (cistern__uring_start(&b[0], io[0], BATCH) < 0)
		return -1;
	for (;;) {
		unsigned nxt = cur ^ 1;
		bool more = t - t0 < secs;
		if (ahead && more) {
			draw(c, io[nxt], bufs + (size_t)nxt * BATCH * c->slot_bytes);
			if (cistern__uring_start(&b[nxt], io[nxt], BATCH) < 0)
				return -1;
		}
		if (cistern__uring_wait(&b[cur]) < 0)
			return -1;
		done += BATCH;
		t = now();
		if (!more)
			break;
		if (!ahead) {
			draw(c, io[nxt], bufs + (size_t)nxt * BATCH * c->slot_bytes);
			if (cistern__uring_start(&b[nxt], io[nxt], BATCH) < 0)
				return -1;
		}
		cur = nxt;
	}
	return (double)done / (t - t0);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int one_size(const char *dir, uint32_t slot_bytes, uint64_t mib, double secs)
{
	char name[64];
	snprintf(name, sizeof(name), "bench-%d-%u", (int)getpid(), slot_bytes);
	struct cistern__cold c;
	uint64_t nslots = (mib << 20) / slot_bytes;
	int r = cistern__cold_create(&c, dir, name, slot_bytes, nslots, 1);
	if (r < 0) {
		fprintf(stderr, "cold: create in %s: %s\n", dir, strerror(-r));
		return r;
	}
	fprintf(stderr, "cold: writing %llu MiB of %u-byte slots\n", (unsigned long long)mib,
		slot_bytes);
	uint8_t *bufs = cistern__cold_alloc(&c, 2 * BATCH);
	r = bufs ? fill_file(&c) : -ENOMEM;
	double rate[3][ROUNDS];
	for (int k = 0; r == 0 && k < ROUNDS; k++) {
		rate[0][k] = run_bound(&c, bufs, secs);
		rate[1][k] = run_batches(&c, bufs, secs, false);
		rate[2][k] = run_batches(&c, bufs, secs, true);
		for (int w = 0; w < 3; w++)
			if (rate[w][k] < 0)
				r = -EIO;
	}
	cistern__cold_close(&c);
	cistern__cold_unlink(dir, name);
	free(bufs);
	if (r < 0) {
		fprintf(stderr, "cold: %s\n", strerror(-r));
		return r;
	}
	for (int w = 0; w < 3; w++)
		qsort(rate[w], ROUNDS, sizeof(double), cmp);
	double med[3] = {rate[0][ROUNDS / 2], rate[1][ROUNDS / 2], rate[2][ROUNDS / 2]};
	const char *what[3] = {"bound (plain loop, depth 256)", "batch of 256",
			       "batch of 256, next started ahead"};
	for (int w = 0; w < 3; w++)
		printf("| %6u KiB | %-34s | %10.0f | %8.1f | %5.2f |\n", slot_bytes / 1024, what[w],
		       med[w], med[w] * slot_bytes / (1 << 20), med[w] / med[0]);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/var/tmp";
	uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 0) : 512;
	double secs = argc > 3 ? atof(argv[3]) : 1.0;
	if (mib == 0 || secs <= 0) {
		fprintf(stderr, "usage: cistern-cold [DIR [MIB [SECONDS]]]\n");
		return 2;
	}
	printf("Cold reads (random O_DIRECT reads of a %llu MiB file in %s; median of %d rounds "
	       "of %.1f s):\n\n",
	       (unsigned long long)mib, dir, ROUNDS, secs);
	printf("| sample | way | samples/s | MiB/s | / bound |\n");
	printf("| --- | --- | --- | --- | --- |\n");
	int r = one_size(dir, 4096, mib, secs);
	if (r == 0)
		r = one_size(dir, 262144, mib, secs);
	return r < 0 ? 1 : 0;
}
