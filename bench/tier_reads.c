/* SPDX-License-Identifier: MIT */
/*
 * tier_reads - a learner's batch reads over a cold tier, alone in one
 * process, for a profiler: it fills a reservoir (hot and cold), then draws
 * --batches batches of --batch with cistern_acquire_batch() and releases
 * each. No producer runs during the reads, so each batch read ahead is the
 * batch taken. Run it under callgrind to count the instructions of a batch
 * read:
 *
 *   valgrind --tool=callgrind --toggle-collect=cistern_acquire_batch \
 *       --toggle-collect=cistern_release_batch cistern-tier-reads
 *
 * and divide by --batches (the first batch has no batch read ahead). It
 * prints the cold reads a batch made and the wall time a batch spent in
 * the library (reads and releases, not the step), which is only a hint (it
 * asserts nothing about time). It also prints how deep the handle kept its
 * reads ahead (cistern__tiered_ahead_stats(): reads started and not yet
 * collected, on average after each submission, as each acquire began to
 * wait and as that wait ended). These count what the reader asked of the
 * disk, so they do not move with the machine's load. Last, how many cold
 * reads had their CRC checked (the first read of each write) and how many
 * skipped it. --step-ms T holds each batch T ms, as a
 * training step would, so that reads ahead have time to complete.
 *
 *   cistern-tier-reads [--dir DIR] [--size BYTES] [--pop N] [--cold F]
 *                      [--batch N] [--batches N] [--step-ms T] [--no-ahead]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cistern.h>

#include "policy/reservoir/tiered.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const char *dir = "/var/tmp";
	size_t size = 4096, batch = 256;
	uint64_t pop = 8192, batches = 50;
	double frac = 0.5, step_ms = 0;
	bool ahead = true;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--no-ahead")) {
			ahead = false;
			continue;
		}
		if (!v)
			goto usage;
		if (!strcmp(a, "--dir"))
			dir = v;
		else if (!strcmp(a, "--size"))
			size = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--pop"))
			pop = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--cold"))
			frac = atof(v);
		else if (!strcmp(a, "--batch"))
			batch = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--batches"))
			batches = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--step-ms"))
			step_ms = atof(v);
		else
			goto usage;
		i++;
	}
	uint64_t cold = (uint64_t)((double)pop * frac + 0.5);
	if (size < 16 || batch == 0 || cold == 0 || cold >= pop || pop < 2 * batch)
		goto usage;

	struct cistern_config cfg = {0};
	cfg.policy = CISTERN_RESERVOIR;
	cfg.slot_size = size;
	cfg.slot_count = pop - cold;
	cfg.cold_slots = cold;
	cfg.cold_dir = dir;
	cfg.watermark = (uint32_t)batch;
	cfg.seed = 1;
	char name[64];
	snprintf(name, sizeof(name), "tierreads-%d", (int)getpid());
	struct cistern *c;
	int r = cistern_create(name, &cfg, &c);
	if (r < 0) {
		fprintf(stderr, "tier_reads: create: %s\n", cistern_strerror(r));
		return 1;
	}
	r = cistern__tiered_read_ahead(c, ahead);
	uint8_t *buf = calloc(1, size);
	struct cistern_sample *b = calloc(batch, sizeof(*b));
	if (!buf || !b)
		r = -ENOMEM;
	for (uint64_t i = 0; r == 0 && i < pop; i++) {
		memcpy(buf, &i, sizeof(i));
		r = cistern_put(c, buf, size, NULL, 0);
	}
	struct cistern_stats st0, st1;
	cistern_stats_get(c, &st0);
	double t = 0;
	for (uint64_t k = 0; r == 0 && k < batches; k++) {
		double t0 = now();
		r = cistern_acquire_batch(c, b, batch, 1000);
		/* The first two batches fill the spare buffers: not timed. */
		if (k < 2)
			t0 = now();
		t += now() - t0;
		if (r < 0)
			break;
		if (step_ms > 0) {
			struct timespec ts = {(time_t)(step_ms / 1000),
					      (long)(step_ms * 1e6) % 1000000000L};
			nanosleep(&ts, NULL);
		}
		t0 = now();
		r = cistern_release_batch(c, b, (size_t)r);
		if (k >= 2)
			t += now() - t0;
	}
	cistern_stats_get(c, &st1);
	struct cistern__ahead_stats as;
	cistern__tiered_ahead_stats(c, &as);
	double starts = as.starts ? (double)as.starts : 1, waits = as.waits ? (double)as.waits : 1;
	if (r < 0)
		fprintf(stderr, "tier_reads: %s\n", cistern_strerror(r));
	else
		printf("%llu batches of %zu, %zu-byte samples, %.0f %% cold, read-ahead %s: "
		       "%.1f cold reads a batch, %.3f ms a batch\n",
		       (unsigned long long)batches, batch, size, frac * 100, ahead ? "on" : "off",
		       (double)(st1.cold_reads - st0.cold_reads) / (double)batches,
		       batches > 2 ? t * 1e3 / (double)(batches - 2) : 0);
	if (r >= 0)
		printf("reads ahead outstanding: %.1f after a submission, %.1f as an acquire "
		       "waits, %.1f as its wait ends; %.3f ms a batch waiting for cold reads\n",
		       (double)as.start_depth / starts, (double)as.wait_depth / waits,
		       (double)as.tail_depth / waits,
		       (double)(st1.cold_read_wait_ns - st0.cold_read_wait_ns) / 1e6 /
			       (double)batches);
	if (r >= 0)
		printf("cold CRCs: %llu checked (the first read of a write), %llu skipped "
		       "(read again), %llu failed\n",
		       (unsigned long long)as.crc_checks, (unsigned long long)as.crc_skips,
		       (unsigned long long)as.crc_fails);
	free(b);
	free(buf);
	cistern_detach(c);
	cistern_unlink(name);
	return r < 0 ? 1 : 0;
usage:
	fprintf(stderr, "usage: cistern-tier-reads [--dir DIR] [--size BYTES] [--pop N] "
			"[--cold F] [--batch N] [--batches N] [--step-ms T] [--no-ahead]\n");
	return 2;
}
