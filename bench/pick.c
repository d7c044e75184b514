/* SPDX-License-Identifier: MIT */
/*
 * pick - what the Roaring snapshots buy: the cost of one uniform pick among
 * the qualifying slots of a 100,000-slot segment, as the qualifying fraction
 * shrinks, three ways in the same run:
 *
 *   cistern   cistern__pick(): a dozen random probes, then a uniform rank in the
 *             handle's Roaring snapshot (roaring_bitmap_select), refreshed from
 *             the slot words when stale
 *   probes    random probes only, until one qualifies
 *   scan      a linear scan of the slot words for each pick (no snapshot kept)
 *
 * Each pick is confirmed against the live word, as the library does before it
 * claims a slot. Prints a table; asserts nothing.
 *
 *   pick [SLOTS [PICKS]]     (defaults 100000 and 20000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "policy/reservoir/pick.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Qualifies: the benchmark marks slots by a nonzero seen count. */
static bool marked(struct cistern *c, uint64_t i, void *arg)
{
	(void)arg;
	return atomic_load_explicit(&cistern__slotmeta(c, i)->seen, memory_order_relaxed) != 0;
}

static uint64_t pick_probes(struct cistern *c)
{
	for (;;) {
		uint64_t i = cistern__rng_below(&c->rng, c->slot_count);
		if (marked(c, i, NULL))
			return i;
	}
}

static uint64_t pick_scan(struct cistern *c, uint32_t *buf)
{
	uint64_t k = 0;
	for (uint64_t i = 0; i < c->slot_count; i++)
		if (marked(c, i, NULL))
			buf[k++] = (uint32_t)i;
	return buf[cistern__rng_below(&c->rng, k)];
}

int main(int argc, char **argv)
{
	uint64_t slots = argc > 1 ? strtoull(argv[1], NULL, 0) : 100000;
	int picks = argc > 2 ? atoi(argv[2]) : 20000;
	char name[64];
	snprintf(name, sizeof(name), "bench-pick-%d", (int)getpid());
	struct cistern_config cfg = {.policy = CISTERN_RESERVOIR,
				     .slot_size = 8,
				     .slot_count = slots,
				     .watermark = 1,
				     .seed = 42};
	struct cistern *c;
	int r = cistern_create(name, &cfg, &c);
	if (r < 0) {
		fprintf(stderr, "pick: create %s: %s\n", name, cistern_strerror(r));
		return 1;
	}
	uint32_t *buf = malloc(slots * sizeof(*buf));
	if (!buf)
		return 1;
	printf("uniform pick among qualifying slots of %llu; ns per pick (median of 5)\n",
	       (unsigned long long)slots);
	printf("%12s %10s %10s %12s %9s %9s\n", "qualifying", "cistern", "probes", "scan",
	       "probes/c", "scan/c");
	uint64_t fractions[] = {2, 10, 100, 1000, 10000};
	for (size_t f = 0; f < sizeof(fractions) / sizeof(fractions[0]); f++) {
		uint64_t k = slots / fractions[f];
		if (k == 0)
			continue;
		for (uint64_t i = 0; i < slots; i++)
			atomic_store(&cistern__slotmeta(c, i)->seen, 0);
		for (uint64_t i = 0; i < k; i++)
			atomic_store(&cistern__slotmeta(c, i * fractions[f])->seen, 1);
		double best[3][5];
		volatile uint64_t sink = 0;
		for (int rep = 0; rep < 5; rep++) {
			struct cistern_picker pk = {0};
			double t0 = now();
			for (int i = 0; i < picks; i++) {
				uint64_t idx;
				if (cistern__pick(c, &pk, marked, NULL, &idx) == 0)
					sink += idx;
			}
			double t1 = now();
			for (int i = 0; i < picks; i++)
				sink += pick_probes(c);
			double t2 = now();
			int scans = picks / 100 > 10 ? picks / 100 : 10; /* a scan is slow: fewer */
			for (int i = 0; i < scans; i++)
				sink += pick_scan(c, buf);
			double t3 = now();
			best[0][rep] = (t1 - t0) / picks * 1e9;
			best[1][rep] = (t2 - t1) / picks * 1e9;
			best[2][rep] = (t3 - t2) / scans * 1e9;
			cistern__picker_free(&pk);
		}
		double med[3];
		for (int w = 0; w < 3; w++) {
			for (int a = 0; a < 5; a++)
				for (int b = a + 1; b < 5; b++)
					if (best[w][b] < best[w][a]) {
						double t = best[w][a];
						best[w][a] = best[w][b];
						best[w][b] = t;
					}
			med[w] = best[w][2];
		}
		printf("%12llu %10.0f %10.0f %12.0f %8.1fx %8.1fx\n", (unsigned long long)k, med[0],
		       med[1], med[2], med[1] / med[0], med[2] / med[0]);
		(void)sink;
	}
	free(buf);
	cistern_detach(c);
	cistern_unlink(name);
	return 0;
}
