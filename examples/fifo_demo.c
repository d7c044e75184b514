/* SPDX-License-Identifier: MIT */
/*
 * fifo_demo - producers and readers in separate processes through one FIFO
 * segment: each producer puts tagged samples, readers check every payload, and
 * the parent verifies that every sample arrived exactly once.
 *
 *   fifo_demo [PRODUCERS [READERS [SAMPLES]]]     (defaults: 2 2 200000)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cistern.h>

struct payload {
	uint32_t producer;
	uint32_t seq;
	uint64_t check;
};

static uint64_t checksum(uint32_t producer, uint32_t seq)
{
	uint64_t x = ((uint64_t)producer << 32) | seq;
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	return x ^ (x >> 29);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int produce(const char *name, uint32_t id, uint32_t count)
{
	struct cistern *c;
	int r = cistern_attach(name, &c);
	if (r < 0) {
		fprintf(stderr, "producer %u: attach %s: %s\n", id, name, cistern_strerror(r));
		return 1;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct payload p = {id, i, checksum(id, i)};
		struct cistern_meta m = {.sim_id = id, .time_step = i};
		r = cistern_put(c, &p, sizeof(p), &m, -1);
		if (r < 0) {
			fprintf(stderr, "producer %u: put: %s\n", id, cistern_strerror(r));
			return 1;
		}
	}
	cistern_producer_done(c);
	cistern_detach(c);
	return 0;
}

/* Readers write one bit per received sample into a shared result file. */
static int consume(const char *name, uint32_t id, uint8_t *seen, uint32_t per_producer)
{
	struct cistern *c;
	int r = cistern_attach(name, &c);
	if (r < 0) {
		fprintf(stderr, "reader %u: attach: %s\n", id, cistern_strerror(r));
		return 1;
	}
	for (;;) {
		struct payload p;
		struct cistern_meta m;
		ssize_t n = cistern_get(c, &p, sizeof(p), &m, -1);
		if (n == CISTERN_EOD)
			break;
		if (n < 0) {
			fprintf(stderr, "reader %u: get: %s\n", id, cistern_strerror((int)n));
			return 1;
		}
		if (n != sizeof(p) || p.check != checksum(p.producer, p.seq) ||
		    m.sim_id != p.producer || m.time_step != p.seq) {
			fprintf(stderr, "reader %u: damaged sample\n", id);
			return 1;
		}
		__atomic_fetch_add(&seen[(size_t)p.producer * per_producer + p.seq], 1,
				   __ATOMIC_RELAXED);
	}
	cistern_detach(c);
	return 0;
}

#include <sys/mman.h>

int main(int argc, char **argv)
{
	uint32_t producers = argc > 1 ? (uint32_t)atoi(argv[1]) : 2;
	uint32_t readers = argc > 2 ? (uint32_t)atoi(argv[2]) : 2;
	uint32_t samples = argc > 3 ? (uint32_t)atoi(argv[3]) : 200000;
	if (producers == 0 || readers == 0 || samples < producers) {
		fprintf(stderr, "usage: fifo_demo [PRODUCERS [READERS [SAMPLES]]]\n");
		return 2;
	}
	uint32_t per = samples / producers;
	char name[64];
	snprintf(name, sizeof(name), "fifo-demo-%d", (int)getpid());

	struct cistern_config cfg = {
		.slot_size = sizeof(struct payload),
		.slot_count = 4096,
		.policy = CISTERN_FIFO,
		.expected_producers = producers,
	};
	struct cistern *c;
	int r = cistern_create(name, &cfg, &c);
	if (r < 0) {
		fprintf(stderr, "fifo_demo: create %s: %s\n", name, cistern_strerror(r));
		return 1;
	}
	uint8_t *seen = mmap(NULL, (size_t)per * producers, PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (seen == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	printf("segment %s: FIFO, %u slots of %zu bytes; %u producers, %u readers, %u samples\n",
	       name, 4096u, sizeof(struct payload), producers, readers, per * producers);
	double t0 = now();
	for (uint32_t i = 0; i < readers; i++)
		if (fork() == 0)
			_exit(consume(name, i, seen, per));
	for (uint32_t i = 0; i < producers; i++)
		if (fork() == 0)
			_exit(produce(name, i, per));
	int failed = 0, status;
	while (wait(&status) > 0)
		failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	double dt = now() - t0;
	uint64_t missing = 0, dup = 0;
	for (size_t i = 0; i < (size_t)per * producers; i++) {
		missing += seen[i] == 0;
		dup += seen[i] > 1;
	}
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	printf("moved %llu samples in %.3f s (%.2f M samples/s); puts %llu, gets %llu, "
	       "producer waits %llu, reader waits %llu\n",
	       (unsigned long long)st.gets, dt, (double)st.gets / dt / 1e6,
	       (unsigned long long)st.puts, (unsigned long long)st.gets,
	       (unsigned long long)st.producer_waits, (unsigned long long)st.reader_waits);
	printf("every sample received exactly once: %s (missing %llu, duplicated %llu)\n",
	       !failed && !missing && !dup ? "yes" : "NO", (unsigned long long)missing,
	       (unsigned long long)dup);
	cistern_detach(c);
	cistern_unlink(name);
	return failed || missing || dup;
}
