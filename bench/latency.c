/* SPDX-License-Identifier: MIT */
/*
 * latency.c - section 5: one-way latency of a 64-byte ping-pong at low load
 * (one sample in flight). Two processes on two CPUs; each message carries its
 * send time (CLOCK_MONOTONIC, one clock for both CPUs) and the receiver records
 * now - send time, in both directions. cistern uses two FIFO segments, one each
 * way; the comparison is a pair of pipes.
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cistern.h>

enum lkind { L_CIS, L_CIS_SPIN, L_PIPE, L_COUNT };

static const char *lkind_label[L_COUNT] = {
	[L_CIS] = "cistern FIFO x2 (blocking get, timeout -1)",
	[L_CIS_SPIN] = "cistern FIFO x2 (timeout 0 + retry, busy)",
	[L_PIPE] = "pipe pair (blocking read)",
};

struct lat {
	enum lkind kind;
	struct run_ctl *c;
	char name[2][80];
	struct cistern *ph[2];
	int p[2][2]; /* p[0]: ping -> pong, p[1]: pong -> ping */
	uint64_t iters;
	uint64_t *samples; /* 2 * iters, shared: [0, iters) by pong, [iters, 2 iters) by ping */
};

static int lat_send(struct lat *l, void *h, int dir, void *msg)
{
	msg_fill(msg, now_ns());
	if (l->kind == L_PIPE) {
		for (;;) {
			ssize_t n = write(l->p[dir][1], msg, BENCH_MSG);
			if (n == BENCH_MSG)
				return 0;
			if (n < 0 && errno == EINTR)
				continue;
			return n < 0 ? -errno : -EIO;
		}
	}
	for (;;) {
		int rc = cistern_put(h, msg, BENCH_MSG, NULL, l->kind == L_CIS ? -1 : 0);
		if (rc != -EAGAIN)
			return rc;
		cpu_relax();
	}
}

/* Receive one message; store its latency at *slot. */
static int lat_recv(struct lat *l, void *h, int dir, void *msg, uint64_t *slot)
{
	if (l->kind == L_PIPE) {
		size_t got = 0;
		while (got < BENCH_MSG) {
			ssize_t n = read(l->p[dir][0], (char *)msg + got, BENCH_MSG - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? -errno : -EPIPE;
			got += (size_t)n;
		}
	} else {
		struct cistern_meta m;
		for (;;) {
			ssize_t n = cistern_get(h, msg, BENCH_MSG, &m, l->kind == L_CIS ? -1 : 0);
			if (n == BENCH_MSG)
				break;
			if (n != -EAGAIN)
				return n < 0 ? (int)n : -EBADMSG;
			cpu_relax();
		}
	}
	uint64_t t = now_ns(), tag;
	if (msg_check(msg, &tag))
		return -EBADMSG;
	*slot = t - tag;
	return 0;
}

static int lat_child(int role, int idx, void *arg)
{
	struct lat *l = arg;
	_Alignas(64) unsigned char msg[BENCH_MSG];
	void *h[2] = {NULL, NULL};
	int ping = role == 'p', rc = 0, slot = ping ? 0 : BENCH_MAX_PROCS;
	(void)idx;

	pin_cpu(ping ? 0 : 1);
	if (l->kind == L_PIPE) {
		/* ping writes p[0], reads p[1]; pong the reverse */
		close(l->p[0][ping ? 0 : 1]);
		close(l->p[1][ping ? 1 : 0]);
	} else {
		for (int d = 0; d < 2; d++) {
			struct cistern *c;
			rc = cistern_attach(l->name[d], &c);
			if (rc < 0) {
				ctl_error(l->c, slot, "cistern_attach: %s", cistern_strerror(rc));
				return 1;
			}
			h[d] = c;
		}
	}
	ctl_child_ready(l->c);
	for (uint64_t i = 0; i < l->iters && rc == 0; i++) {
		if (ping) {
			rc = lat_send(l, h[0], 0, msg);
			if (rc == 0)
				rc = lat_recv(l, h[1], 1, msg, &l->samples[l->iters + i]);
		} else {
			rc = lat_recv(l, h[0], 0, msg, &l->samples[i]);
			if (rc == 0)
				rc = lat_send(l, h[1], 1, msg);
		}
	}
	if (rc < 0)
		ctl_error(l->c, slot, "%s", strerror(-rc));
	l->c->rd[0].t_end = now_ns();
	for (int d = 0; d < 2; d++)
		if (h[d])
			cistern_detach(h[d]);
	return rc < 0;
}

static void lat_after_fork(void *arg)
{
	struct lat *l = arg;
	if (l->kind == L_PIPE)
		for (int d = 0; d < 2; d++)
			for (int e = 0; e < 2; e++) {
				close(l->p[d][e]);
				l->p[d][e] = -1;
			}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static double pct(const uint64_t *s, uint64_t n, double q)
{
	uint64_t i = (uint64_t)(q * (double)(n - 1) + 0.5);
	return (double)s[i];
}

/* One run: out[0..2] = p50, p99, p99.9 in microseconds. */
static int lat_run(enum lkind k, uint64_t iters, double out[3], char *err, size_t cap)
{
	struct lat l;
	int rc = 0;
	memset(&l, 0, sizeof l);
	l.kind = k;
	l.iters = iters;
	l.c = ctl_new(1, 1, iters);
	l.samples = shm_anon(2 * iters * sizeof(uint64_t));
	for (int d = 0; d < 2; d++)
		l.p[d][0] = l.p[d][1] = -1;
	err[0] = 0;
	if (k == L_PIPE) {
		for (int d = 0; d < 2 && rc == 0; d++)
			if (pipe(l.p[d]) != 0) {
				rc = -errno;
				snprintf(err, cap, "pipe: %s", strerror(errno));
			}
	} else {
		for (int d = 0; d < 2 && rc == 0; d++) {
			struct cistern_config cfg = {0};
			cfg.slot_size = BENCH_MSG;
			cfg.slot_count = 1024;
			cfg.policy = CISTERN_FIFO;
			bench_name(l.name[d], sizeof l.name[d], d ? "lb" : "la");
			rc = cistern_create(l.name[d], &cfg, &l.ph[d]);
			if (rc < 0)
				snprintf(err, cap, "cistern_create: %s", cistern_strerror(rc));
			else
				cleanup_register(l.name[d]);
		}
	}
	if (rc == 0) {
		struct run_hooks h = {
			.fn = lat_child,
			.arg = &l,
			.after_fork = lat_after_fork,
			.settle_ns = 10000000,
			.timeout_ns = 120000000000ull,
		};
		uint64_t t0;
		rc = run_children(l.c, &h, &t0);
		for (int i = 0; i < BENCH_MAX_PROCS * 2 && !err[0]; i++)
			if (l.c->err[i][0])
				snprintf(err, cap, "%s", l.c->err[i]);
		if (rc != 0 && !err[0])
			snprintf(err, cap, "a child failed");
	}
	for (int d = 0; d < 2; d++) {
		if (l.ph[d]) {
			cistern_detach(l.ph[d]);
			cistern_unlink(l.name[d]);
			cleanup_forget(l.name[d]);
		}
		for (int e = 0; e < 2; e++)
			if (l.p[d][e] >= 0)
				close(l.p[d][e]);
	}
	if (!err[0]) {
		qsort(l.samples, 2 * iters, sizeof(uint64_t), cmp_u64);
		out[0] = pct(l.samples, 2 * iters, 0.50) / 1e3;
		out[1] = pct(l.samples, 2 * iters, 0.99) / 1e3;
		out[2] = pct(l.samples, 2 * iters, 0.999) / 1e3;
	}
	shm_anon_free(l.samples, 2 * iters * sizeof(uint64_t));
	ctl_free(l.c);
	return err[0] ? -1 : 0;
}

void sec_latency(void)
{
	const char *section = "5. latency 64 B ping-pong";
	static const char *pname[3] = {"one-way p50", "one-way p99", "one-way p99.9"};
	enum lkind list[] = {L_CIS, L_CIS_SPIN, L_PIPE};
	int n = 3, row[3][3], ok[3];
	uint64_t iters = g_opt.quick ? 5000 : 20000;
	char err[160];

	for (int q = 0; q < 3; q++)
		for (int i = 0; i < n; i++) {
			row[i][q] = row_add(section, lkind_label[list[i]], pname[q], "us",
					    LOWER_BETTER);
			row_ref(row[i][q], row[0][q], 0);
		}
	for (int i = 0; i < n; i++) {
		double v[3];
		progress("[%s] warm-up %s", section, lkind_label[list[i]]);
		ok[i] = lat_run(list[i], iters / 4, v, err, sizeof err) == 0;
		if (!ok[i])
			for (int q = 0; q < 3; q++)
				row_note(row[i][q], "ERR: %s", err);
	}
	for (int rep = 0; rep < g_opt.reps; rep++)
		for (int i = 0; i < n; i++) {
			double v[3];
			if (!ok[i])
				continue;
			if (lat_run(list[i], iters, v, err, sizeof err) < 0) {
				for (int q = 0; q < 3; q++)
					row_note(row[i][q], "ERR: %s", err);
				ok[i] = 0;
				continue;
			}
			for (int q = 0; q < 3; q++)
				row_push(row[i][q], v[q]);
			progress("[%s] rep %d/%d %s: p50 %.2f p99 %.2f p99.9 %.2f us", section,
				 rep + 1, g_opt.reps, lkind_label[list[i]], v[0], v[1], v[2]);
		}
}

/* ---- section 0: the machine's core-to-core cache-line round trip ------------------------ */

struct c2c {
	struct run_ctl *c;
	_Atomic uint64_t *word;
	uint64_t iters;
};

static int c2c_child(int role, int idx, void *arg)
{
	struct c2c *x = arg;
	(void)idx;
	pin_cpu(role == 'p' ? 0 : 1);
	ctl_child_ready(x->c);
	uint64_t t0 = now_ns();
	for (uint64_t i = 1; i <= x->iters; i++) {
		if (role == 'p') {
			atomic_store_explicit(x->word, 2 * i - 1, memory_order_release);
			while (atomic_load_explicit(x->word, memory_order_acquire) != 2 * i)
				cpu_relax();
		} else {
			while (atomic_load_explicit(x->word, memory_order_acquire) != 2 * i - 1)
				cpu_relax();
			atomic_store_explicit(x->word, 2 * i, memory_order_release);
		}
	}
	if (role == 'p')
		x->c->rd[0].aux[0] = now_ns() - t0;
	return 0;
}

void sec_machine(void)
{
	const char *section = "0. machine";
	int row = row_add(section, "cache-line round trip CPU0 <-> CPU1 (two processes, spin)",
			  "round trip", "ns", LOWER_BETTER);
	uint64_t iters = g_opt.quick ? 50000 : 200000;
	for (int rep = -1; rep < g_opt.reps; rep++) {
		struct c2c x = {ctl_new(1, 1, 0), NULL, rep < 0 ? iters / 4 : iters};
		x.word = shm_anon(4096);
		struct run_hooks h = {.fn = c2c_child, .arg = &x, .timeout_ns = 60000000000ull};
		uint64_t t0;
		int rc = run_children(x.c, &h, &t0);
		if (rc != 0)
			row_note(row, "ERR: %s", x.c->err[0][0] ? x.c->err[0] : "a child failed");
		else if (rep >= 0)
			row_push(row, (double)x.c->rd[0].aux[0] / (double)x.iters);
		shm_anon_free((void *)(uintptr_t)x.word, 4096);
		ctl_free(x.c);
		if (rc != 0)
			return;
	}
}
