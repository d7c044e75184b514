/* SPDX-License-Identifier: MIT */
/*
 * remote.c - section 8: samples over loopback TCP. One producer sends samples
 * of 64 B, 4 KiB and 1 MiB to another process two ways, in the same run:
 *
 *  - raw ZeroMQ PUSH/PULL: zmq_send() of each filled buffer, received with
 *    zmq_msg_recv() and checked by the receiver: what ZeroMQ itself moves;
 *  - cistern's remote producer: cistern_remote_put() of each filled buffer
 *    to a server (cistern_server_run(), as `cistern serve` runs it, in its own
 *    process) that puts them into a FIFO segment, while a learner process
 *    reads that segment in place (acquire, check, release).
 *
 * The remote rows: "acknowledged" counts until cistern_remote_flush()
 * returned in the producer (every sample in the segment), "end to end" until
 * the learner read and checked the last one; both are the same run. The
 * ratio of the raw row is acknowledged remote puts / raw ZeroMQ (>1: cistern
 * faster). Every sample is filled word by word and summed by its receiver
 * (big_fill(), big_sum()), in order, so both move and check the same bytes.
 *
 * What each side pays, so that the ratio is read for what it is:
 *  - raw: the sender's copy into a ZeroMQ message, the kernel's two copies,
 *    the receiver's sum; two processes. Its samples in flight are bounded by
 *    SNDHWM + RCVHWM (a window each) plus what the kernel's TCP buffers hold,
 *    which for 64 B samples is thousands more: more in flight than the
 *    remote side, in raw's favour.
 *  - remote: the same copies, plus the server's copy into the segment and
 *    the acknowledgements coming back; three processes (producer, server,
 *    learner) on the same cores. Small samples travel gathered, many to a
 *    message, as cistern_remote_put() sends them by default. The segment
 *    of a size lives through all its runs, as a server's does, warmed by
 *    one pass of puts and gets first; server and learner attach it
 *    populated (CISTERN_ATTACH_POPULATE), and the server sets its
 *    allocator, as `cistern serve` does. At most a window in flight, and,
 *    since the segment holds a window of slots, "acknowledged" needs the
 *    learner to have read all but the last window's samples: the learner's
 *    sum is paid in both rows, as the raw receiver's is in raw's.
 */
#include "bench.h"

#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zmq.h>

#include <cistern.h>
#include <cistern/remote.h>

enum rkind { R_REMOTE, R_ZMQ, R_COUNT };

struct rsize {
	const char *section;
	size_t len;
	/*
	 * Samples in flight, both ways (the raw side's high-water marks too),
	 * and slots of the segment. For 64 B and 4 KiB the window a server
	 * grants by default (CISTERN_REMOTE_WINDOW); for 1 MiB a quarter of
	 * it, a 16 MiB segment.
	 */
	uint32_t window;
	uint64_t calib; /* samples of the calibration run */
	double scale;   /* samples/s per unit */
	const char *unit;
};

static const struct rsize sizes[] = {
	{"8a. remote 64 B", 64, 4096, 20000, 1e3, "k samples/s"},
	{"8b. remote 4 KiB", 4096, 4096, 5000, 1e3, "k samples/s"},
	{"8c. remote 1 MiB", 1u << 20, 16, 48, 1, "samples/s"},
};

/* What the children of one run share besides the run_ctl. */
struct rshared {
	_Atomic uint64_t t_acked; /* when the producer's flush returned */
	_Atomic int serving;      /* the server is bound and serving */
};

struct rrun {
	enum rkind kind;
	const struct rsize *sz;
	struct run_ctl *c;
	struct rshared *sh;
	char ep[64];
	const char *seg; /* the size's segment, made once for all its runs */
};

/* A loopback port free now (the kernel's pick); 0 if none. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	if (fd < 0)
		return 0;
	if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static void reader_done(struct run_ctl *c, uint64_t count, uint64_t bad)
{
	c->rd[0].t_end = now_ns();
	c->rd[0].count = count;
	c->rd[0].bad = bad;
	atomic_store(&c->stop, 1);
}

/* ---- raw ZeroMQ ------------------------------------------------------------ */

static int zmq_child(struct rrun *x, int role)
{
	int slot = role == 'p' ? 0 : BENCH_MAX_PROCS, ret = 1, hwm = (int)x->sz->window;
	size_t len = x->sz->len;
	void *ctx = zmq_ctx_new();
	void *s = ctx ? zmq_socket(ctx, role == 'p' ? ZMQ_PUSH : ZMQ_PULL) : NULL;
	unsigned char *buf = NULL;
	if (!s) {
		ctl_error(x->c, slot, "zmq_socket: %s", zmq_strerror(zmq_errno()));
		goto out;
	}
	if (role == 'r') {
		uint64_t count, bad;
		if (zmq_pull_checked(x->c, slot, s, x->ep, len, hwm, &count, &bad) < 0)
			goto out;
		reader_done(x->c, count, bad);
	} else {
		buf = aligned_alloc(64, len);
		if (!buf) {
			ctl_error(x->c, slot, "out of memory");
			goto out;
		}
		zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
		while (atomic_load(&x->c->bound) < 1)
			sched_yield();
		if (zmq_connect(s, x->ep) != 0) {
			ctl_error(x->c, slot, "zmq_connect: %s", zmq_strerror(zmq_errno()));
			goto out;
		}
		ctl_child_ready(x->c);
		for (uint64_t q = 0; q < x->c->per_producer; q++) {
			big_fill(buf, len, q);
			while (zmq_send(s, buf, len, 0) < 0) {
				if (zmq_errno() != EINTR) {
					ctl_error(x->c, slot, "zmq_send: %s",
						  zmq_strerror(zmq_errno()));
					goto out;
				}
			}
		}
	}
	ret = 0;
out:
	free(buf);
	if (s)
		zmq_close(s); /* the producer lingers until everything is delivered */
	if (ctx)
		zmq_ctx_term(ctx);
	return ret;
}

/* ---- cistern remote ---------------------------------------------------------- */

/* The server: reader slot 1. Serves until the learner has read everything. */
static int server_child(struct rrun *x)
{
	int slot = BENCH_MAX_PROCS + 1;
	const char *eps[1] = {x->ep};
	const char *segs[1] = {x->seg};
	struct cistern_server_opts o = {0};
	struct cistern_server *s = NULL;
	o.size = sizeof o;
	o.endpoints = eps;
	o.n_endpoints = 1;
	o.segments = segs;
	o.ranks = 1;
	o.window = x->sz->window;
	/* The allocator as `cistern serve` sets it (tools/cmd_serve.c says why). */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	int rc = cistern_server_create(&o, &s);
	if (rc < 0) {
		ctl_error(x->c, slot, "cistern_server_create: %s", cistern_strerror(rc));
		return 1;
	}
	/*
	 * Ready without waiting for go: the producer says HELLO before it is
	 * ready, and only a running server answers it.
	 */
	atomic_store(&x->sh->serving, 1);
	atomic_fetch_add(&x->c->ready, 1);
	/*
	 * Until the learner read everything and the producer's flush returned:
	 * a server that stopped first would say BYE to a producer still reading
	 * its last acknowledgements, whose flush then reports the lost
	 * connection. A producer that never gets there is given 10 s.
	 */
	uint64_t t_stop = 0;
	while (!atomic_load(&x->sh->t_acked)) {
		if (atomic_load(&x->c->stop)) {
			if (!t_stop)
				t_stop = now_ns();
			else if (now_ns() - t_stop > 10000000000ull)
				break;
		}
		rc = cistern_server_run(s, 20);
		if (rc < 0) {
			ctl_error(x->c, slot, "cistern_server_run: %s", cistern_strerror(rc));
			break;
		}
	}
	int cr = cistern_server_close(s, 1000);
	if (rc >= 0 && cr < 0)
		ctl_error(x->c, slot, "cistern_server_close: %s", cistern_strerror(cr));
	return rc < 0 || cr < 0;
}

/* The learner: reader slot 0. Reads the segment in place, in order. */
static int learner_child(struct rrun *x)
{
	int slot = BENCH_MAX_PROCS;
	size_t len = x->sz->len;
	struct cistern *h = NULL;
	int rc = cistern_attach_flags(x->seg, CISTERN_ATTACH_POPULATE, &h);
	if (rc < 0) {
		ctl_error(x->c, slot, "cistern_attach: %s", cistern_strerror(rc));
		return 1;
	}
	ctl_child_ready(x->c);
	uint64_t count = 0, bad = 0;
	while (count < x->c->per_producer) {
		struct cistern_sample smp;
		rc = cistern_acquire(h, &smp, 200);
		if (rc == -ETIMEDOUT || rc == -EAGAIN) {
			if (atomic_load(&x->c->stop))
				break;
			continue;
		}
		if (rc < 0) {
			ctl_error(x->c, slot, "cistern_acquire: %s", cistern_strerror(rc));
			break;
		}
		bad += smp.len != len || big_sum(smp.data, len) != big_sum_expected(len, count);
		cistern_release(h, &smp);
		count++;
	}
	reader_done(x->c, count, bad);
	cistern_detach(h);
	return rc < 0 && rc != -ETIMEDOUT && rc != -EAGAIN;
}

static int producer_child(struct rrun *x)
{
	int slot = 0, ret = 1;
	size_t len = x->sz->len;
	struct cistern_remote *r = NULL;
	struct cistern_remote_opts o = {0};
	unsigned char *buf = aligned_alloc(64, len);
	if (!buf) {
		ctl_error(x->c, slot, "out of memory");
		return 1;
	}
	o.size = sizeof o;
	o.window = x->sz->window;
	o.connect_timeout_ms = 20000;
	while (!atomic_load(&x->sh->serving))
		sched_yield();
	int rc = cistern_remote_connect(x->ep, &o, &r);
	if (rc < 0) {
		ctl_error(x->c, slot, "cistern_remote_connect %s: %s", x->ep, cistern_strerror(rc));
		goto out;
	}
	ctl_child_ready(x->c);
	for (uint64_t q = 0; q < x->c->per_producer; q++) {
		big_fill(buf, len, q);
		struct cistern_meta m = {.sim_id = 0, .time_step = (uint32_t)q};
		rc = cistern_remote_put(r, buf, len, &m, 60000);
		if (rc < 0) {
			ctl_error(x->c, slot, "cistern_remote_put: %s", cistern_strerror(rc));
			goto out;
		}
	}
	rc = cistern_remote_flush(r, 60000);
	atomic_store(&x->sh->t_acked, now_ns());
	if (rc < 0) {
		ctl_error(x->c, slot, "cistern_remote_flush: %s", cistern_strerror(rc));
		goto out;
	}
	ret = 0;
out:
	if (r)
		cistern_remote_close(r);
	free(buf);
	return ret;
}

static int rchild(int role, int idx, void *arg)
{
	struct rrun *x = arg;
	if (x->kind == R_ZMQ)
		return zmq_child(x, role);
	if (role == 'p')
		return producer_child(x);
	return idx == 0 ? learner_child(x) : server_child(x);
}

/*
 * One run of n samples. *rate is samples/s, received (raw) or acknowledged
 * (remote); *e2e the remote's samples/s read by the learner.
 */
static int rrun(enum rkind k, const struct rsize *sz, const char *seg, uint64_t n, double *rate,
		double *e2e, char *err, size_t cap)
{
	struct rrun x;
	memset(&x, 0, sizeof x);
	x.kind = k;
	x.sz = sz;
	x.seg = seg;
	x.c = ctl_new(1, k == R_REMOTE ? 2 : 1, n);
	x.sh = shm_anon(sizeof *x.sh);
	err[0] = 0;
	int port = free_port();
	snprintf(x.ep, sizeof x.ep, "tcp://127.0.0.1:%d", port);
	if (!port) {
		snprintf(err, cap, "no free loopback port");
		goto done;
	}
	struct run_hooks hk = {
		.fn = rchild,
		.arg = &x,
		.settle_ns = 50000000,
		.timeout_ns = (uint64_t)(g_opt.target_s * 40 * 1e9) + 30000000000ull,
	};
	uint64_t t0 = 0;
	int rc = run_children(x.c, &hk, &t0);
	for (int i = 0; i < BENCH_MAX_PROCS * 2 && !err[0]; i++)
		if (x.c->err[i][0])
			snprintf(err, cap, "%s", x.c->err[i]);
	if (!err[0] && rc != 0)
		snprintf(err, cap, "a child failed");
	if (!err[0] && (x.c->rd[0].count != n || x.c->rd[0].bad))
		snprintf(err, cap, "INVALID: %llu of %llu samples, %llu bad",
			 (unsigned long long)x.c->rd[0].count, (unsigned long long)n,
			 (unsigned long long)x.c->rd[0].bad);
	if (!err[0]) {
		uint64_t t_end = k == R_REMOTE ? atomic_load(&x.sh->t_acked) : x.c->rd[0].t_end;
		*rate = (double)n * 1e9 / (double)(t_end - t0);
		*e2e = (double)n * 1e9 / (double)(x.c->rd[0].t_end - t0);
	}
done:
	shm_anon_free(x.sh, sizeof *x.sh);
	ctl_free(x.c);
	return err[0] ? -1 : 0;
}

/*
 * The segment of one size, for all its runs, as a server's segment lives
 * longer than a run. One pass of puts and gets touches every slot first:
 * the runs measure moving samples, not the kernel's first allocation of the
 * segment's pages, which the raw side's reused buffers do not pay either.
 */
static int make_segment(const struct rsize *sz, char *name, size_t cap, struct cistern **h,
			char *err, size_t ecap)
{
	struct cistern_config cfg = {0};
	cfg.policy = CISTERN_FIFO;
	cfg.slot_size = sz->len;
	cfg.slot_count = sz->window;
	bench_name(name, cap, "remote");
	int rc = cistern_create(name, &cfg, h);
	if (rc < 0) {
		snprintf(err, ecap, "cistern_create: %s", cistern_strerror(rc));
		return -1;
	}
	cleanup_register(name);
	unsigned char *buf = calloc(1, sz->len);
	for (uint32_t i = 0; buf && rc >= 0 && i < sz->window; i++)
		rc = cistern_put(*h, buf, sz->len, NULL, 0);
	for (uint32_t i = 0; buf && rc >= 0 && i < sz->window; i++) {
		struct cistern_sample smp;
		rc = cistern_acquire(*h, &smp, 0);
		if (rc >= 0)
			cistern_release(*h, &smp);
	}
	free(buf);
	if (!buf || rc < 0) {
		snprintf(err, ecap, "warming the segment: %s",
			 buf ? cistern_strerror(rc) : "out of memory");
		return -1;
	}
	return 0;
}

static void sec_remote_size(const struct rsize *sz)
{
	char err[160], seg[80];
	struct cistern *h = NULL;
	/* Rows: the acknowledged remote puts (the reference), raw ZeroMQ, end to end. */
	int r_ack = row_add(sz->section, "cistern_remote_put -> serve -> segment, acknowledged",
			    "samples", sz->unit, HIGHER_BETTER);
	int r_zmq = row_add(sz->section, "raw ZeroMQ PUSH/PULL (zmq_send, tcp loopback)", "samples",
			    sz->unit, HIGHER_BETTER);
	int r_e2e = row_add(sz->section, "cistern remote, end to end: read by a learner", "samples",
			    sz->unit, HIGHER_BETTER);
	row_ref(r_ack, r_ack, 0);
	row_ref(r_zmq, r_ack, 0);
	row_ref(r_e2e, r_ack, 1);
	enum rkind list[R_COUNT] = {R_REMOTE, R_ZMQ};
	uint64_t per[R_COUNT] = {0};
	bool have_seg = make_segment(sz, seg, sizeof seg, &h, err, sizeof err) == 0;
	if (!have_seg) {
		row_note(r_ack, "ERR: %s", err);
		row_note(r_e2e, "ERR: %s", err);
	}
	for (int i = 0; i < R_COUNT; i++) {
		double rate = 0, e2e = 0;
		if (list[i] == R_REMOTE && !have_seg)
			continue;
		progress("[%s] calibrating %s", sz->section,
			 list[i] == R_ZMQ ? "ZeroMQ" : "remote");
		uint64_t n = g_opt.quick ? sz->calib / 4 : sz->calib;
		if (rrun(list[i], sz, seg, n, &rate, &e2e, err, sizeof err) < 0) {
			row_note(list[i] == R_ZMQ ? r_zmq : r_ack, "ERR: %s", err);
			if (list[i] == R_REMOTE)
				row_note(r_e2e, "ERR: %s", err);
			continue;
		}
		double want = rate * g_opt.target_s;
		per[i] = want < 16 ? 16 : (uint64_t)want;
	}
	for (int rep = 0; rep < g_opt.reps; rep++)
		for (int i = 0; i < R_COUNT; i++) {
			double rate = 0, e2e = 0;
			if (!per[i])
				continue;
			if (rrun(list[i], sz, seg, per[i], &rate, &e2e, err, sizeof err) < 0) {
				row_note(list[i] == R_ZMQ ? r_zmq : r_ack, "ERR: %s", err);
				if (list[i] == R_REMOTE)
					row_note(r_e2e, "ERR: %s", err);
				per[i] = 0;
				continue;
			}
			if (list[i] == R_ZMQ) {
				row_push(r_zmq, rate / sz->scale);
			} else {
				row_push(r_ack, rate / sz->scale);
				row_push(r_e2e, e2e / sz->scale);
			}
			progress("[%s] rep %d/%d %s: %.1f samples/s", sz->section, rep + 1,
				 g_opt.reps, list[i] == R_ZMQ ? "ZeroMQ" : "remote", rate);
		}
	if (h) {
		cistern_detach(h);
		cistern_unlink(seg);
		cleanup_forget(seg);
	}
	g_bars.s8_ack[sz - sizes] = r_ack;
	g_bars.s8_zmq[sz - sizes] = r_zmq;
}

void sec_remote(void)
{
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		sec_remote_size(&sizes[i]);
}
