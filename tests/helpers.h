/* SPDX-License-Identifier: MIT */
/* helpers.h - small utilities shared by the test programs. */
#ifndef CISTERN_TEST_HELPERS_H
#define CISTERN_TEST_HELPERS_H

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cistern.h>

/* A segment name unique to this process and call site. */
#define TEST_NAME(buf, tag) snprintf((buf), sizeof(buf), "t-%s-%d", (tag), (int)getpid())

/* Memory shared with forked children (zeroed). */
static inline void *shared_alloc(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static inline double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A payload whose every byte depends on (producer, seq), so damage is detected. */
static inline void fill_payload(uint8_t *p, size_t len, uint32_t producer, uint32_t seq)
{
	uint64_t x = ((uint64_t)producer << 32 | seq) * UINT64_C(0x9e3779b97f4a7c15) + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static inline int check_payload(const uint8_t *p, size_t len, uint32_t producer, uint32_t seq)
{
	uint8_t buf[4096];
	if (len > sizeof(buf))
		return 0;
	fill_payload(buf, len, producer, seq);
	return memcmp(buf, p, len) == 0;
}

/*
 * Put n samples whose lengths run evenly from 0 to max (sample i is
 * i * max / (n - 1) bytes of fill_payload(.., producer, i), time_step i).
 * 0, or the first failing put's error. The buffer holds up to 4096 bytes.
 */
static inline int put_length_ramp(struct cistern *c, uint32_t n, size_t max, uint32_t producer)
{
	static uint8_t buf[4096];
	if (max > sizeof(buf) || n < 2)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		size_t len = (size_t)i * max / (n - 1);
		fill_payload(buf, len, producer, i);
		struct cistern_meta m = {.time_step = i};
		int r = cistern_put(c, buf, len, &m, 0);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * fork() for test children: a child dies with its parent, so a test that
 * fails or times out never leaves producers or readers running.
 */
static inline pid_t fork_child(void)
{
	pid_t ppid = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != ppid)
			_exit(99);
	}
	return pid;
}

/* What a holder child takes before it waits to be killed. */
enum hold { HOLD_NOTHING, HOLD_RESERVATION, HOLD_SAMPLE, HOLD_BATCH };

/*
 * Fork a child that attaches to `name`, takes `what` (a reservation, an
 * acquired sample: pinned under the reservoirs, held alone under FIFO and
 * FIRO, or a batch of the segment's batch_size), says it is ready, then waits to be killed. Returns its pid once it
 * is ready, or -1 if it could not start (the child is reaped).
 */
static inline pid_t spawn_holder(const char *name, enum hold what)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		struct cistern *h;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		struct cistern_slot slot;
		struct cistern_sample s, batch[64];
		if (what == HOLD_RESERVATION && cistern_reserve(h, &slot, 1000) < 0)
			_exit(2);
		if (what == HOLD_SAMPLE && cistern_acquire(h, &s, 1000) < 0)
			_exit(3);
		if (what == HOLD_BATCH && cistern_acquire_batch(h, batch, 0, 1000) < 0)
			_exit(5);
		char ok = 1;
		if (write(p[1], &ok, 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	close(p[1]);
	char ok = 0;
	ssize_t n = pid > 0 ? read(p[0], &ok, 1) : -1;
	close(p[0]);
	if (n != 1) {
		if (pid > 0)
			waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

/*
 * Fork a child that attaches to `name`, commits n samples (sample i is
 * 1 + i % 50 bytes of fill_payload(.., 7, i), time_step i), says it is ready,
 * then waits to be killed: a producer that dies with its samples committed.
 * Returns its pid once they are in, or -1 (the child is reaped).
 */
static inline pid_t spawn_filler(const char *name, uint32_t n)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		struct cistern *h;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		for (uint32_t i = 0; i < n; i++) {
			uint8_t buf[64];
			size_t len = 1 + i % 50;
			fill_payload(buf, len, 7, i);
			struct cistern_meta m = {.sim_id = 7, .time_step = i};
			if (cistern_put(h, buf, len, &m, 1000) < 0)
				_exit(2);
		}
		char ok = 1;
		if (write(p[1], &ok, 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	close(p[1]);
	char ok = 0;
	ssize_t got = pid > 0 ? read(p[0], &ok, 1) : -1;
	close(p[0]);
	if (got != 1) {
		if (pid > 0)
			waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

/* SIGKILL a child and reap it. */
static inline void kill_and_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* Wait for every child; return how many exited non-zero or by a signal. */
static inline int reap_all(void)
{
	int bad = 0, status;
	while (wait(&status) > 0)
		bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	return bad;
}

#endif
