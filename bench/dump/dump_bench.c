/* SPDX-License-Identifier: MIT */
/*
 * dump_bench - the io_uring dump engine against a plain pwrite() loop, on the
 * same segment and the same bytes: every engine stages identical buffers and
 * fsyncs at the end, so the difference is only how the writes are issued:
 *   io_uring           the default: O_DIRECT, 8 x 1 MiB registered buffers in
 *                      flight, submissions batched;
 *   io_uring-buffered  the same without O_DIRECT (through the page cache);
 *   pwrite             one blocking pwrite() per staged buffer, page cache.
 *
 *   dump_bench [DIR [ROUNDS]]       (defaults: /tmp 5)
 *
 * Prints one line per shape and engine: median wall time, throughput, and
 * median CPU time (user + system of the whole process, io_uring workers
 * included).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "admin/dump.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds of the whole process: user + system, io_uring workers included. */
static double cpu(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct shape {
	uint64_t slots, slot_size, len;
};

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/tmp";
	int rounds = argc > 2 ? atoi(argv[2]) : 5;
	if (rounds < 1 || rounds > 100)
		rounds = 5;
	static const struct shape shapes[] = {
		{65536, 1024, 1000},    /* many small samples: 64 MiB */
		{4096, 16384, 16000},   /* medium: 64 MiB */
		{1024, 262144, 262144}, /* large: 256 MiB */
		{64, 4 << 20, 4 << 20}, /* very large: 256 MiB */
	};
	char name[64], path[4096];
	snprintf(name, sizeof(name), "dump-bench-%d", (int)getpid());
	snprintf(path, sizeof(path), "%s/cistern-dump-bench-%d.dump", dir, (int)getpid());
	printf("%-22s %-18s %10s %10s %10s\n", "shape", "engine", "median s", "MiB/s", "cpu s");
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		const struct shape *s = &shapes[k];
		struct cistern_config cfg = {.slot_size = s->slot_size, .slot_count = s->slots};
		struct cistern *c;
		cistern_unlink(name);
		int r = cistern_create(name, &cfg, &c);
		if (r < 0) {
			fprintf(stderr, "dump_bench: create %s: %s\n", name, cistern_strerror(r));
			return 1;
		}
		char *buf = malloc(s->len);
		for (uint64_t i = 0; i < s->len; i++)
			buf[i] = (char)(i * 131 + 7);
		for (uint64_t i = 0; i < s->slots; i++)
			if ((r = cistern_put(c, buf, s->len, NULL, 0)) < 0) {
				fprintf(stderr, "dump_bench: put: %s\n", cistern_strerror(r));
				return 1;
			}
		free(buf);
		double mib = (double)(s->slots * s->len) / (1 << 20);
		char label[64];
		snprintf(label, sizeof(label), "%lu x %lu B", (unsigned long)s->slots,
			 (unsigned long)s->len);
		static const struct {
			const char *name;
			unsigned flags;
		} engines[] = {
			{"io_uring", 0}, /* O_DIRECT when possible */
			{"io_uring-buffered", CISTERN__DUMP_BUFFERED},
			{"pwrite", CISTERN__DUMP_PLAIN},
		};
		for (int e = 0; e < 3; e++) {
			double t[100], used[100];
			for (int i = 0; i < rounds; i++) {
				double c0 = cpu();
				double t0 = now();
				r = cistern__dump_ex(name, path, engines[e].flags, NULL, NULL,
						     NULL);
				t[i] = now() - t0;
				used[i] = cpu() - c0;
				if (r < 0) {
					fprintf(stderr, "dump_bench: dump: %s\n",
						cistern_strerror(r));
					return 1;
				}
				unlink(path);
			}
			qsort(t, (size_t)rounds, sizeof(t[0]), cmp);
			qsort(used, (size_t)rounds, sizeof(used[0]), cmp);
			double med = t[rounds / 2];
			printf("%-22s %-18s %10.4f %10.0f %10.4f\n", label, engines[e].name, med,
			       mib / med, used[rounds / 2]);
		}
		cistern_detach(c);
		cistern_unlink(name);
	}
	return 0;
}
