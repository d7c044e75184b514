/* SPDX-License-Identifier: MIT */
/*
 * big.c - section 3: 1 MiB samples. The producer fills every word, the reader
 * sums every word and checks the sum. cistern writes and reads in place
 * (reserve/commit, acquire/release); the no-transport bound does the same fill
 * and sum in one process; the pipe and ZeroMQ move the bytes through the kernel.
 * The bounds' buffers live in /dev/shm, as cistern's slots do, and every child
 * passes two laps of samples before the timed ones (BIG_WARM).
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include <cistern.h>

#define BIG_LEN (1u << 20)
/*
 * cistern slots; also the bounds' and the hand-offs' buffers and the ZeroMQ
 * high-water mark. With both processes on one CPU, where they take turns, 8
 * slots let each side work through several samples a turn, which with
 * warm processes beats 1 slot (1 slot only looked better while the
 * children were timed cold).
 */
#define BIG_SLOTS 8

enum bkind {
	B_BOUND,
	B_BOUND_1,
	B_HANDOFF,
	B_HANDOFF_1CPU,
	B_CIS_ZC,
	B_CIS_ZC_BUSY,
	B_CIS_ZC_1CPU,
	B_CIS_COPY,
	B_PIPE,
	B_ZMQ,
	B_COUNT
};

static const char *bkind_label[B_COUNT] = {
	[B_BOUND] = "no-transport bound (fill + sum, one process on CPU 0, 8 x 1 MiB in /dev/shm)",
	[B_BOUND_1] = "no-transport bound, the same on CPU 1",
	[B_HANDOFF] = "hand-off bound (2 processes, 8 x 1 MiB in /dev/shm, spin)",
	[B_HANDOFF_1CPU] = "hand-off bound, both processes on CPU 1 (8 x 1 MiB, sched_yield)",
	[B_CIS_ZC] = "cistern reserve/commit + acquire/release (in place)",
	[B_CIS_ZC_BUSY] = "cistern in place, timeout 0 + retry (busy, as the hand-off bound)",
	[B_CIS_ZC_1CPU] = "cistern in place, both processes on CPU 1",
	[B_CIS_COPY] = "cistern put/get (copy in and out)",
	[B_PIPE] = "pipe (1 MiB pipe buffer)",
	[B_ZMQ] = "ZeroMQ ipc PUSH/PULL (zmq_msg)",
};

/* The hand-off bound: the least a two-process shared-memory transport can do. */
struct handoff {
	_Alignas(64) _Atomic uint64_t tail; /* buffers filled */
	_Alignas(64) _Atomic uint64_t head; /* buffers summed */
	_Alignas(4096) unsigned char buf[BIG_SLOTS][BIG_LEN];
};

struct big {
	enum bkind kind;
	struct handoff *ho;
	struct run_ctl *c;
	char name[80];
	struct cistern *ph;
	int pfd[2];
	char zep[108];
};

/*
 * Samples each child passes before the timed ones: two laps of its buffers
 * or slots, so that the timed run finds every page of them mapped in each
 * process, as a job that has run for a while does. A freshly forked child
 * otherwise pays a fault for each 4 KiB page on its first touch, which on
 * a virtual machine can cost more than the samples' own work.
 */
#define BIG_WARM (2 * BIG_SLOTS)

static void *xalloc(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n) != 0) {
		perror("posix_memalign");
		exit(2);
	}
	memset(p, 0, n);
	return p;
}

static void reader_done(struct run_ctl *c, uint64_t count, uint64_t bad)
{
	c->rd[0].t_end = now_ns();
	c->rd[0].count = count;
	c->rd[0].bad = bad;
}

static int bound_child(struct big *b)
{
	unsigned char *buf[BIG_SLOTS];
	uint64_t n = b->c->per_producer, bad = 0;
	/* In /dev/shm, as cistern's slots: the same pages, so only the transport differs. */
	unsigned char *mem = shm_tmpfs((size_t)BIG_SLOTS * BIG_LEN);
	for (int i = 0; i < BIG_SLOTS; i++)
		buf[i] = mem + (size_t)i * BIG_LEN;
	uint64_t warm = BIG_WARM;
	for (uint64_t s = 0; s < warm + n; s++) {
		if (s == warm)
			ctl_child_ready(b->c);
		unsigned char *p = buf[s % BIG_SLOTS];
		big_fill(p, BIG_LEN, s);
		bad += big_sum(p, BIG_LEN) != big_sum_expected(BIG_LEN, s);
	}
	reader_done(b->c, n, bad);
	return 0;
}

static int handoff_child(struct big *b, int role)
{
	struct handoff *ho = b->ho;
	uint64_t n = b->c->per_producer;
	/* On one CPU the other side cannot move until we give the CPU up. */
	int one_cpu = b->kind == B_HANDOFF_1CPU;
	uint64_t bufs = BIG_SLOTS, warm = BIG_WARM;
	if (role == 'p') {
		for (uint64_t s = 0; s < warm + n; s++) {
			if (s == warm)
				ctl_child_ready(b->c);
			while (s - atomic_load_explicit(&ho->head, memory_order_acquire) >= bufs)
				one_cpu ? (void)sched_yield() : cpu_relax();
			big_fill(ho->buf[s % bufs], BIG_LEN, s);
			atomic_store_explicit(&ho->tail, s + 1, memory_order_release);
		}
	} else {
		uint64_t bad = 0;
		for (uint64_t s = 0; s < warm + n; s++) {
			if (s == warm)
				ctl_child_ready(b->c);
			while (atomic_load_explicit(&ho->tail, memory_order_acquire) == s)
				one_cpu ? (void)sched_yield() : cpu_relax();
			bad += big_sum(ho->buf[s % bufs], BIG_LEN) != big_sum_expected(BIG_LEN, s);
			atomic_store_explicit(&ho->head, s + 1, memory_order_release);
		}
		reader_done(b->c, n, bad);
	}
	return 0;
}

static int cis_child(struct big *b, int role)
{
	struct cistern *c;
	int slot = role == 'p' ? 0 : BENCH_MAX_PROCS, rc = cistern_attach(b->name, &c), ret = 0;
	unsigned char *buf = NULL;
	if (rc < 0) {
		ctl_error(b->c, slot, "cistern_attach: %s", cistern_strerror(rc));
		return 1;
	}
	if (b->kind == B_CIS_COPY)
		buf = xalloc(BIG_LEN);
	uint64_t warm = BIG_WARM;
	if (role == 'p') {
		for (uint64_t s = 0; s < warm + b->c->per_producer; s++) {
			if (s == warm)
				ctl_child_ready(b->c);
			if (b->kind != B_CIS_COPY) {
				struct cistern_slot sl;
				/* The busy variant polls, as the hand-off bound spins; the others block. */
				while ((rc = cistern_reserve(c, &sl,
							     b->kind == B_CIS_ZC_BUSY ? 0 : -1)) ==
				       -EAGAIN)
					cpu_relax();
				if (rc == 0) {
					big_fill(sl.data, BIG_LEN, s);
					rc = cistern_commit(c, &sl, BIG_LEN, NULL);
				}
			} else {
				big_fill(buf, BIG_LEN, s);
				rc = cistern_put(c, buf, BIG_LEN, NULL, -1);
			}
			if (rc < 0) {
				ctl_error(b->c, slot, "produce: %s", cistern_strerror(rc));
				ret = 1;
				break;
			}
		}
		if (!ret && (rc = cistern_producer_done(c)) < 0) {
			ctl_error(b->c, slot, "cistern_producer_done: %s", cistern_strerror(rc));
			ret = 1;
		}
	} else {
		uint64_t count = 0, bad = 0;
		for (;;) {
			if (count == warm)
				ctl_child_ready(b->c);
			if (b->kind != B_CIS_COPY) {
				struct cistern_sample s;
				while ((rc = cistern_acquire(c, &s,
							     b->kind == B_CIS_ZC_BUSY ? 0 : -1)) ==
				       -EAGAIN)
					cpu_relax();
				if (rc == 0) {
					bad += s.len != BIG_LEN ||
					       big_sum(s.data, BIG_LEN) !=
						       big_sum_expected(BIG_LEN, count);
					rc = cistern_release(c, &s);
				}
			} else {
				struct cistern_meta m;
				ssize_t n = cistern_get(c, buf, BIG_LEN, &m, -1);
				rc = n < 0 ? (int)n : 0;
				if (n >= 0)
					bad += n != BIG_LEN ||
					       big_sum(buf, BIG_LEN) !=
						       big_sum_expected(BIG_LEN, count);
			}
			if (rc == CISTERN_EOD)
				break;
			if (rc < 0) {
				ctl_error(b->c, slot, "consume: %s", cistern_strerror(rc));
				ret = 1;
				break;
			}
			count++;
		}
		reader_done(b->c, count > warm ? count - warm : 0, bad);
	}
	free(buf);
	cistern_detach(c);
	return ret;
}

static int full_io(int fd, void *buf, size_t len, int wr)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = wr ? write(fd, (char *)buf + done, len - done)
			       : read(fd, (char *)buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return done ? -EBADMSG : 0;
		done += (size_t)n;
	}
	return 1;
}

static int pipe_child(struct big *b, int role)
{
	unsigned char *buf = xalloc(BIG_LEN);
	int ret = 0;
	if (role == 'p') {
		close(b->pfd[0]);
		ctl_child_ready(b->c);
		for (uint64_t s = 0; s < b->c->per_producer; s++) {
			big_fill(buf, BIG_LEN, s);
			int rc = full_io(b->pfd[1], buf, BIG_LEN, 1);
			if (rc < 0) {
				ctl_error(b->c, 0, "write: %s", strerror(-rc));
				ret = 1;
				break;
			}
		}
		close(b->pfd[1]);
	} else {
		uint64_t count = 0, bad = 0;
		close(b->pfd[1]);
		ctl_child_ready(b->c);
		for (;;) {
			int rc = full_io(b->pfd[0], buf, BIG_LEN, 0);
			if (rc == 0)
				break;
			if (rc < 0) {
				ctl_error(b->c, BENCH_MAX_PROCS, "read: %s", strerror(-rc));
				ret = 1;
				break;
			}
			bad += big_sum(buf, BIG_LEN) != big_sum_expected(BIG_LEN, count);
			count++;
		}
		reader_done(b->c, count, bad);
	}
	free(buf);
	return ret;
}

static int zmq_child(struct big *b, int role)
{
	int slot = role == 'p' ? 0 : BENCH_MAX_PROCS, ret = 1, hwm = BIG_SLOTS;
	void *ctx = zmq_ctx_new();
	void *s = ctx ? zmq_socket(ctx, role == 'p' ? ZMQ_PUSH : ZMQ_PULL) : NULL;
	if (!s) {
		ctl_error(b->c, slot, "zmq_socket: %s", zmq_strerror(zmq_errno()));
		goto out;
	}
	if (role == 'r') {
		uint64_t count, bad;
		if (zmq_pull_checked(b->c, slot, s, b->zep, BIG_LEN, hwm, &count, &bad) < 0)
			goto out;
		reader_done(b->c, count, bad);
	} else {
		zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
		while (atomic_load(&b->c->bound) < 1)
			sched_yield();
		if (zmq_connect(s, b->zep) != 0) {
			ctl_error(b->c, slot, "zmq_connect: %s", zmq_strerror(zmq_errno()));
			goto out;
		}
		ctl_child_ready(b->c);
		for (uint64_t q = 0; q < b->c->per_producer; q++) {
			zmq_msg_t m;
			zmq_msg_init_size(&m, BIG_LEN);
			big_fill(zmq_msg_data(&m), BIG_LEN, q);
			while (zmq_msg_send(&m, s, 0) < 0) {
				if (zmq_errno() != EINTR) {
					ctl_error(b->c, slot, "zmq_msg_send: %s",
						  zmq_strerror(zmq_errno()));
					zmq_msg_close(&m);
					goto out;
				}
			}
		}
	}
	ret = 0;
out:
	if (s)
		zmq_close(s);
	if (ctx)
		zmq_ctx_term(ctx);
	return ret;
}

static int big_child(int role, int idx, void *arg)
{
	struct big *b = arg;
	(void)idx;
	pin_cpu(role == 'p' && b->kind != B_CIS_ZC_1CPU && b->kind != B_HANDOFF_1CPU &&
				b->kind != B_BOUND_1
			? 0
			: 1);
	switch (b->kind) {
	case B_BOUND:
	case B_BOUND_1:
		return bound_child(b);
	case B_HANDOFF:
	case B_HANDOFF_1CPU:
		return handoff_child(b, role);
	case B_CIS_ZC:
	case B_CIS_ZC_BUSY:
	case B_CIS_ZC_1CPU:
	case B_CIS_COPY:
		return cis_child(b, role);
	case B_PIPE:
		return pipe_child(b, role);
	case B_ZMQ:
		return zmq_child(b, role);
	default:
		return 1;
	}
}

static void big_after_fork(void *arg)
{
	struct big *b = arg;
	if (b->kind == B_PIPE) {
		close(b->pfd[0]);
		close(b->pfd[1]);
		b->pfd[0] = b->pfd[1] = -1;
	}
}

/* One run; *gbps in 1e9 bytes per second. */
static int big_run(enum bkind k, uint64_t n, double *gbps, char *err, size_t cap)
{
	struct big b;
	int rc;
	memset(&b, 0, sizeof b);
	b.kind = k;
	b.c = ctl_new(1, k == B_BOUND || k == B_BOUND_1 ? 0 : 1, n);
	b.pfd[0] = b.pfd[1] = -1;
	err[0] = 0;
	if (k == B_CIS_ZC || k == B_CIS_ZC_BUSY || k == B_CIS_ZC_1CPU || k == B_CIS_COPY) {
		struct cistern_config cfg = {0};
		cfg.slot_size = BIG_LEN;
		cfg.slot_count = BIG_SLOTS;
		cfg.policy = CISTERN_FIFO;
		cfg.expected_producers = 1;
		bench_name(b.name, sizeof b.name, "big");
		rc = cistern_create(b.name, &cfg, &b.ph);
		if (rc < 0) {
			snprintf(err, cap, "cistern_create: %s", cistern_strerror(rc));
			ctl_free(b.c);
			return -1;
		}
		cleanup_register(b.name);
	} else if (k == B_HANDOFF || k == B_HANDOFF_1CPU) {
		b.ho = shm_tmpfs(sizeof *b.ho);
	} else if (k == B_PIPE) {
		if (pipe(b.pfd) != 0) {
			snprintf(err, cap, "pipe: %s", strerror(errno));
			ctl_free(b.c);
			return -1;
		}
		if (fcntl(b.pfd[1], F_SETPIPE_SZ, BIG_LEN) < 0)
			progress("note: F_SETPIPE_SZ 1 MiB failed (%s); default pipe size",
				 strerror(errno));
	} else if (k == B_ZMQ) {
		char nm[64];
		bench_name(nm, sizeof nm, "zbig");
		snprintf(b.zep, sizeof b.zep, "ipc:///tmp/%s", nm);
	}
	struct run_hooks h = {
		.fn = big_child,
		.arg = &b,
		.after_fork = big_after_fork,
		.settle_ns = k == B_ZMQ ? 100000000 : 10000000,
		.timeout_ns = (uint64_t)(g_opt.target_s * 40 * 1e9) + 30000000000ull,
	};
	uint64_t t0 = 0;
	rc = run_children(b.c, &h, &t0);
	if (b.ph) {
		struct cistern_stats st;
		if (cistern_stats_get(b.ph, &st) == 0)
			progress("  cistern stats: producers waited %llu times (%.1f ms), readers "
				 "waited %llu times (%.1f ms)",
				 (unsigned long long)st.producer_waits,
				 (double)st.producer_wait_ns / 1e6,
				 (unsigned long long)st.reader_waits,
				 (double)st.reader_wait_ns / 1e6);
		cistern_detach(b.ph);
		cistern_unlink(b.name);
		cleanup_forget(b.name);
	}
	if (b.pfd[0] >= 0)
		close(b.pfd[0]);
	if (b.pfd[1] >= 0)
		close(b.pfd[1]);
	if (k == B_ZMQ)
		unlink(b.zep + strlen("ipc://"));
	if (b.ho)
		shm_anon_free(b.ho, sizeof *b.ho);
	for (int i = 0; i < BENCH_MAX_PROCS * 2 && !err[0]; i++)
		if (b.c->err[i][0])
			snprintf(err, cap, "%s", b.c->err[i]);
	if (!err[0] && rc != 0)
		snprintf(err, cap, "a child failed");
	if (!err[0] && (b.c->rd[0].count != n || b.c->rd[0].bad))
		snprintf(err, cap, "INVALID: %llu of %llu samples, %llu bad",
			 (unsigned long long)b.c->rd[0].count, (unsigned long long)n,
			 (unsigned long long)b.c->rd[0].bad);
	if (!err[0])
		*gbps = (double)n * BIG_LEN / ((double)(b.c->rd[0].t_end - t0));
	ctl_free(b.c);
	return err[0] ? -1 : 0;
}

void sec_big(void)
{
	const char *section = "3. 1P/1R 1 MiB";
	enum bkind list[] = {B_CIS_ZC,  B_BOUND,       B_BOUND_1,  B_CIS_ZC_1CPU, B_HANDOFF_1CPU,
			     B_HANDOFF, B_CIS_ZC_BUSY, B_CIS_COPY, B_PIPE,        B_ZMQ};
	int n = (int)(sizeof list / sizeof list[0]);
	int row[B_COUNT];
	uint64_t per[B_COUNT];
	char err[160];
	int ref = -1;

	for (int i = 0; i < n; i++) {
		double g = 0;
		progress("[%s] calibrating %s", section, bkind_label[list[i]]);
		int rc = big_run(list[i], g_opt.quick ? 16 : 32, &g, err, sizeof err);
		row[i] = row_add(section, bkind_label[list[i]], "throughput", "GB/s",
				 HIGHER_BETTER);
		if (list[i] == B_CIS_ZC)
			ref = row[i];
		row_ref(row[i], ref, 0);
		if (list[i] == B_CIS_ZC)
			g_bars.s3_cis = row[i];
		if (list[i] == B_BOUND)
			g_bars.s3_bound = row[i];
		if (list[i] == B_BOUND_1)
			g_bars.s3_bound_1 = row[i];
		if (list[i] == B_CIS_ZC_1CPU)
			g_bars.s3_cis_1cpu = row[i];
		if (list[i] == B_CIS_ZC_BUSY)
			g_bars.s3_cis_busy = row[i];
		if (list[i] == B_HANDOFF)
			g_bars.s3_handoff = row[i];
		if (list[i] == B_HANDOFF_1CPU)
			g_bars.s3_handoff_1cpu = row[i];
		per[i] = 0;
		if (rc < 0) {
			row_note(row[i], "ERR: %s", err);
			continue;
		}
		double want = g * 1e9 * g_opt.target_s / BIG_LEN;
		per[i] = want < 16 ? 16 : (uint64_t)want;
	}
	for (int rep = 0; rep < g_opt.reps; rep++)
		for (int i = 0; i < n; i++) {
			double g = 0;
			if (!per[i])
				continue;
			if (big_run(list[i], per[i], &g, err, sizeof err) < 0) {
				row_note(row[i], "ERR: %s", err);
				per[i] = 0;
				continue;
			}
			row_push(row[i], g);
			progress("[%s] rep %d/%d %s: %.2f GB/s", section, rep + 1, g_opt.reps,
				 bkind_label[list[i]], g);
		}
}
