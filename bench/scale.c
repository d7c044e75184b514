/* SPDX-License-Identifier: MIT */
/*
 * scale.c - section 6: cost as the work grows.
 *  6a  put+get, alternating in one process, 64-byte slots, 1K / 64K / 1M slots,
 *      the three sizes in one child taking turns (the run laps every ring at
 *      least twice, so every slot is touched);
 *  6b  cistern_create, cistern_attach (in another process), cistern_detach and
 *      cistern_unlink against the segment size;
 *  6c  CPU time (getrusage of the child) of a reader blocked 1 s in
 *      cistern_get(timeout -1), against a reader blocked 1 s in read() on a pipe.
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cistern.h>

/* ---- 6a ------------------------------------------------------------------------ */

/*
 * One child measures all three sizes, taking turns of OP_TURN pairs each, and
 * adds up each size's time. The host this runs on changes speed for seconds at
 * a time; sizes measured one after another in separate runs fall into
 * different states, and their ratio then says more about the host than about
 * the slot count. Turns of 64K pairs (a few ms) share the host's states out
 * evenly, and are long enough that a ring refills its caches in a small part of
 * each turn: a lap of the 1K ring is 1/64 of a turn, the 64K ring runs one lap
 * a turn as it would in one run, and the 1M ring streams from memory either way.
 */
#define OP_SIZES 3
#define OP_TURN 65536

struct op {
	struct run_ctl *c;
	int plain; /* the plain rings instead of cistern */
	char names[OP_SIZES][80];
	uint64_t slots[OP_SIZES];
	uint64_t ops; /* timed pairs per size */
};

/* One ring under test: a cistern handle, or a plain shared array. */
struct op_ring {
	struct cistern *c;
	unsigned char *mem;
	uint64_t slots, head, tail, next; /* next: the tag of the next pair */
};

/* n put+get pairs on ring r; returns the number of bad samples, or -1 on an error. */
static int64_t op_pairs(struct op *o, struct op_ring *r, uint64_t n)
{
	_Alignas(64) unsigned char in[BENCH_MSG], out[BENCH_MSG];
	int64_t bad = 0;
	for (uint64_t k = 0; k < n; k++, r->next++) {
		uint64_t tag;
		msg_fill(in, r->next);
		if (!r->c) {
			memcpy(r->mem + (r->tail++ % r->slots) * BENCH_MSG, in, BENCH_MSG);
			memcpy(out, r->mem + (r->head++ % r->slots) * BENCH_MSG, BENCH_MSG);
			bad += msg_check(out, &tag) || tag != r->next;
			continue;
		}
		int rc = cistern_put(r->c, in, BENCH_MSG, NULL, 0);
		if (rc < 0) {
			ctl_error(o->c, 0, "cistern_put: %s", cistern_strerror(rc));
			return -1;
		}
		struct cistern_meta m;
		ssize_t got = cistern_get(r->c, out, BENCH_MSG, &m, 0);
		if (got < 0) {
			ctl_error(o->c, 0, "cistern_get: %s", cistern_strerror((int)got));
			return -1;
		}
		bad += got != BENCH_MSG || msg_check(out, &tag) || tag != r->next;
	}
	return bad;
}

static int op_child(int role, int idx, void *arg)
{
	struct op *o = arg;
	struct op_ring r[OP_SIZES];
	uint64_t spent[OP_SIZES] = {0}, done[OP_SIZES] = {0};
	int64_t bad = 0;
	int i, fail = 0;
	(void)role;
	(void)idx;
	pin_cpu(1);
	memset(r, 0, sizeof(r));
	for (i = 0; i < OP_SIZES && !fail; i++) {
		r[i].slots = o->slots[i];
		if (o->plain) {
			r[i].mem = shm_anon((size_t)r[i].slots * BENCH_MSG);
		} else {
			int rc = cistern_attach(o->names[i], &r[i].c);
			if (rc < 0) {
				ctl_error(o->c, 0, "cistern_attach: %s", cistern_strerror(rc));
				fail = 1;
			}
		}
		/* One untimed lap first: every slot mapped and touched once. */
		if (!fail && op_pairs(o, &r[i], r[i].slots) < 0)
			fail = 1;
	}
	ctl_child_ready(o->c);
	for (int more = !fail; more;) {
		more = 0;
		for (i = 0; i < OP_SIZES; i++) {
			uint64_t n = o->ops - done[i] < OP_TURN ? o->ops - done[i] : OP_TURN;
			if (!n)
				continue;
			uint64_t t0 = now_ns();
			int64_t b = op_pairs(o, &r[i], n);
			spent[i] += now_ns() - t0;
			if (b < 0) {
				fail = 1;
				break;
			}
			bad += b;
			done[i] += n;
			more |= done[i] < o->ops;
		}
		if (fail)
			break;
	}
	o->c->rd[0].t_end = now_ns();
	o->c->rd[0].bad = (uint64_t)bad;
	for (i = 0; i < OP_SIZES; i++) {
		o->c->rd[0].aux[i] = spent[i];
		if (r[i].c)
			cistern_detach(r[i].c);
		if (r[i].mem)
			shm_anon_free(r[i].mem, (size_t)r[i].slots * BENCH_MSG);
	}
	return fail;
}

/* One run of all sizes; ns[i]: mean cost of a pair at size i. */
static int op_run(int plain, const uint64_t *slots, uint64_t ops, double *ns, char *err, size_t cap)
{
	struct cistern *h[OP_SIZES] = {NULL};
	struct op o = {.plain = plain, .ops = ops};
	int rc = 0, i;
	err[0] = 0;
	for (i = 0; i < OP_SIZES; i++) {
		o.slots[i] = slots[i];
		if (plain)
			continue;
		struct cistern_config cfg = {0};
		cfg.slot_size = BENCH_MSG;
		cfg.slot_count = slots[i];
		cfg.policy = CISTERN_FIFO;
		bench_name(o.names[i], sizeof o.names[i], "op");
		rc = cistern_create(o.names[i], &cfg, &h[i]);
		if (rc < 0) {
			snprintf(err, cap, "cistern_create: %s", cistern_strerror(rc));
			break;
		}
		cleanup_register(o.names[i]);
	}
	if (!err[0]) {
		o.c = ctl_new(1, 0, ops);
		struct run_hooks hk = {.fn = op_child, .arg = &o, .timeout_ns = 300000000000ull};
		uint64_t t0 = 0;
		rc = run_children(o.c, &hk, &t0);
		if (o.c->err[0][0])
			snprintf(err, cap, "%s", o.c->err[0]);
		else if (rc)
			snprintf(err, cap, "the child failed");
		else if (o.c->rd[0].bad)
			snprintf(err, cap, "INVALID: %llu bad samples",
				 (unsigned long long)o.c->rd[0].bad);
		else
			for (i = 0; i < OP_SIZES; i++)
				ns[i] = (double)o.c->rd[0].aux[i] / (double)ops;
		ctl_free(o.c);
	}
	for (i = 0; i < OP_SIZES; i++) {
		if (!h[i])
			continue;
		cistern_detach(h[i]);
		cistern_unlink(o.names[i]);
		cleanup_forget(o.names[i]);
	}
	return err[0] ? -1 : 0;
}

static void sec_ops(void)
{
	const char *section = "6a. put+get, one process";
	static const uint64_t slots[OP_SIZES] = {1024, 65536, 1048576};
	static const char *size[OP_SIZES] = {"1K", "64K", "1M"};
	int row[2][OP_SIZES], ok[2] = {1, 1};
	char err[160];
	/* At least two laps of the largest ring, timed, at every size. */
	uint64_t ops = g_opt.quick ? 2 * slots[OP_SIZES - 1] : 4000000;

	for (int p = 0; p < 2; p++)
		for (int i = 0; i < OP_SIZES; i++) {
			char lab[96];
			snprintf(lab, sizeof lab, "%s %s slots x 64 B",
				 p ? "plain ring, no library (memcpy in/out),"
				   : "cistern FIFO put/get,",
				 size[i]);
			row[p][i] = row_add(section, lab, "put+get pair", "ns", LOWER_BETTER);
			row_ref(row[p][i], row[p][0], 1);
			if (!p)
				g_bars.s6_op[i] = row[p][i];
		}
	for (int rep = -1; rep < g_opt.reps; rep++) /* rep -1: warm-up */
		for (int p = 0; p < 2; p++) {
			double ns[OP_SIZES];
			if (!ok[p])
				continue;
			if (op_run(p, slots, rep < 0 ? ops / 4 : ops, ns, err, sizeof err) < 0) {
				for (int i = 0; i < OP_SIZES; i++)
					row_note(row[p][i], "ERR: %s", err);
				ok[p] = 0;
				continue;
			}
			if (rep < 0)
				continue;
			for (int i = 0; i < OP_SIZES; i++) {
				row_push(row[p][i], ns[i]);
				progress("[%s] rep %d/%d %s: %.1f ns", section, rep + 1, g_opt.reps,
					 row_get(row[p][i])->contender, ns[i]);
			}
		}
}

/* ---- 6b ------------------------------------------------------------------------ */

struct life {
	struct run_ctl *c;
	const char *name;
};

static int life_child(int role, int idx, void *arg)
{
	struct life *l = arg;
	struct cistern *c;
	(void)role;
	(void)idx;
	pin_cpu(1);
	ctl_child_ready(l->c);
	uint64_t t0 = now_ns();
	int rc = cistern_attach(l->name, &c);
	uint64_t t1 = now_ns();
	if (rc < 0) {
		ctl_error(l->c, 0, "cistern_attach: %s", cistern_strerror(rc));
		return 1;
	}
	rc = cistern_detach(c);
	uint64_t t2 = now_ns();
	l->c->rd[0].aux[0] = t1 - t0;
	l->c->rd[0].aux[1] = t2 - t1;
	return rc < 0;
}

/* out: create, attach, detach (child), detach (creator), unlink, in microseconds */
static int life_run(uint64_t slot_size, uint64_t slots, double out[5], char *err, size_t cap)
{
	struct cistern_config cfg = {0};
	struct cistern *h;
	char name[80];
	cfg.slot_size = slot_size;
	cfg.slot_count = slots;
	cfg.policy = CISTERN_FIFO;
	bench_name(name, sizeof name, "life");
	err[0] = 0;
	uint64_t t0 = now_ns();
	int rc = cistern_create(name, &cfg, &h);
	uint64_t t1 = now_ns();
	if (rc < 0) {
		snprintf(err, cap, "cistern_create: %s", cistern_strerror(rc));
		return -1;
	}
	cleanup_register(name);
	struct life l = {ctl_new(1, 0, 0), name};
	struct run_hooks hk = {.fn = life_child, .arg = &l, .timeout_ns = 60000000000ull};
	uint64_t tgo;
	rc = run_children(l.c, &hk, &tgo);
	if (l.c->err[0][0])
		snprintf(err, cap, "%s", l.c->err[0]);
	else if (rc)
		snprintf(err, cap, "the child failed");
	out[0] = (double)(t1 - t0) / 1e3;
	out[1] = (double)l.c->rd[0].aux[0] / 1e3;
	out[2] = (double)l.c->rd[0].aux[1] / 1e3;
	ctl_free(l.c);
	uint64_t t2 = now_ns();
	cistern_detach(h);
	uint64_t t3 = now_ns();
	rc = cistern_unlink(name);
	uint64_t t4 = now_ns();
	cleanup_forget(name);
	if (rc < 0 && !err[0])
		snprintf(err, cap, "cistern_unlink: %s", cistern_strerror(rc));
	out[3] = (double)(t3 - t2) / 1e3;
	out[4] = (double)(t4 - t3) / 1e3;
	return err[0] ? -1 : 0;
}

static void sec_life(void)
{
	const char *section = "6b. segment lifecycle";
	static const char *what[5] = {"cistern_create", "cistern_attach (other process)",
				      "cistern_detach (other process)", "cistern_detach (creator)",
				      "cistern_unlink"};
	static const uint64_t mib[4] = {1, 16, 256, 1024};
	int nsz = g_opt.quick ? 3 : 4, row[4][5], ok[4];
	char err[160];

	for (int w = 0; w < 5; w++)
		for (int s = 0; s < nsz; s++) {
			char lab[96];
			snprintf(lab, sizeof lab, "%s, %llu MiB (4 KiB slots)", what[w],
				 (unsigned long long)mib[s]);
			row[s][w] = row_add(section, lab, "time", "us", LOWER_BETTER);
			row_ref(row[s][w], row[0][w], 1);
		}
	for (int s = 0; s < nsz; s++) {
		double v[5];
		ok[s] = life_run(4096, mib[s] * 256, v, err, sizeof err) == 0;
		if (!ok[s])
			for (int w = 0; w < 5; w++)
				row_note(row[s][w], "ERR: %s", err);
	}
	for (int rep = 0; rep < g_opt.reps; rep++)
		for (int s = 0; s < nsz; s++) {
			double v[5];
			if (!ok[s])
				continue;
			if (life_run(4096, mib[s] * 256, v, err, sizeof err) < 0) {
				for (int w = 0; w < 5; w++)
					row_note(row[s][w], "ERR: %s", err);
				ok[s] = 0;
				continue;
			}
			for (int w = 0; w < 5; w++)
				row_push(row[s][w], v[w]);
			progress("[%s] rep %d/%d %llu MiB: create %.0f attach %.0f detach "
				 "%.0f/%.0f unlink %.0f us",
				 section, rep + 1, g_opt.reps, (unsigned long long)mib[s], v[0],
				 v[1], v[2], v[3], v[4]);
		}
}

/* ---- 6c ------------------------------------------------------------------------ */

struct idle {
	struct run_ctl *c;
	int pipe;
	const char *name;
	int pfd[2];
};

static uint64_t cpu_us(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec +
	       (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
}

static int idle_child(int role, int idx, void *arg)
{
	struct idle *d = arg;
	_Alignas(64) unsigned char msg[BENCH_MSG];
	struct cistern *c = NULL;
	int rc;
	(void)role;
	(void)idx;
	pin_cpu(1);
	if (d->pipe) {
		close(d->pfd[1]);
	} else {
		rc = cistern_attach(d->name, &c);
		if (rc < 0) {
			ctl_error(d->c, BENCH_MAX_PROCS, "cistern_attach: %s",
				  cistern_strerror(rc));
			return 1;
		}
	}
	ctl_child_ready(d->c);
	uint64_t u0 = cpu_us(), t0 = now_ns();
	ssize_t n;
	if (d->pipe) {
		do
			n = read(d->pfd[0], msg, sizeof msg);
		while (n < 0 && errno == EINTR);
	} else {
		struct cistern_meta m;
		n = cistern_get(c, msg, sizeof msg, &m, -1);
	}
	uint64_t u1 = cpu_us(), t1 = now_ns();
	d->c->rd[0].aux[0] = u1 - u0;
	d->c->rd[0].aux[1] = t1 - t0;
	if (n != BENCH_MSG)
		ctl_error(d->c, BENCH_MAX_PROCS, "receive returned %zd", n);
	if (c)
		cistern_detach(c);
	return n != BENCH_MSG;
}

/* The parent is the producer: once the reader is released it waits, then sends one sample. */
struct idle_parent {
	struct idle *d;
	struct cistern *h;
	double wait_s;
};

static int idle_send(void *arg)
{
	struct idle_parent *p = arg;
	_Alignas(64) unsigned char msg[BENCH_MSG];
	msg_fill(msg, 1);
	sleep_ns((uint64_t)(p->wait_s * 1e9));
	if (p->d->pipe)
		return write(p->d->pfd[1], msg, sizeof msg) == (ssize_t)sizeof msg ? 0 : -1;
	return cistern_put(p->h, msg, sizeof msg, NULL, -1) == 0 ? 0 : -1;
}

static int idle_child_fn(int role, int idx, void *arg)
{
	return idle_child(role, idx, ((struct idle_parent *)arg)->d);
}

/* out: CPU time in microseconds, wall time blocked in seconds */
static int idle_run(int use_pipe, double wait_s, double out[2], char *err, size_t cap)
{
	struct idle d;
	struct cistern *h = NULL;
	char name[80] = "";
	memset(&d, 0, sizeof d);
	d.pipe = use_pipe;
	d.pfd[0] = d.pfd[1] = -1;
	err[0] = 0;
	if (use_pipe) {
		if (pipe(d.pfd) != 0) {
			snprintf(err, cap, "pipe: %s", strerror(errno));
			return -1;
		}
	} else {
		struct cistern_config cfg = {0};
		cfg.slot_size = BENCH_MSG;
		cfg.slot_count = 1024;
		bench_name(name, sizeof name, "idle");
		int rc = cistern_create(name, &cfg, &h);
		if (rc < 0) {
			snprintf(err, cap, "cistern_create: %s", cistern_strerror(rc));
			return -1;
		}
		cleanup_register(name);
		d.name = name;
	}
	d.c = ctl_new(0, 1, 0);
	struct idle_parent p = {&d, h, wait_s};
	/* No producers: run_children calls after_producers right after releasing the reader. */
	struct run_hooks hk = {.fn = idle_child_fn,
			       .arg = &p,
			       .after_producers = idle_send,
			       .timeout_ns = 60000000000ull};
	uint64_t t0;
	int rc = run_children(d.c, &hk, &t0);
	if (d.c->err[BENCH_MAX_PROCS][0])
		snprintf(err, cap, "%s", d.c->err[BENCH_MAX_PROCS]);
	else if (rc)
		snprintf(err, cap, "the reader or the sender failed");
	out[0] = (double)d.c->rd[0].aux[0];
	out[1] = (double)d.c->rd[0].aux[1] / 1e9;
	ctl_free(d.c);
	if (d.pfd[0] >= 0)
		close(d.pfd[0]);
	if (d.pfd[1] >= 0)
		close(d.pfd[1]);
	if (h) {
		cistern_detach(h);
		cistern_unlink(name);
		cleanup_forget(name);
	}
	return err[0] ? -1 : 0;
}

static void sec_idle(void)
{
	const char *section = "6c. reader blocked 1 s";
	static const char *label[2] = {"cistern_get(timeout -1)", "pipe read()"};
	int row[2], ok[2] = {1, 1};
	/* Each repetition blocks a reader for a second: --reps (1 in a smoke run) caps them. */
	int reps = g_opt.quick ? 3 : 5;
	if (g_opt.reps < reps)
		reps = g_opt.reps;
	char err[160];

	for (int i = 0; i < 2; i++) {
		row[i] = row_add(section, label[i], "child CPU time", "us", LOWER_BETTER);
		row_ref(row[i], row[0], 0);
	}
	for (int i = 0; i < 2; i++) {
		double v[2];
		if (idle_run(i, 0.1, v, err, sizeof err) < 0) {
			row_note(row[i], "ERR: %s", err);
			ok[i] = 0;
		}
	}
	for (int rep = 0; rep < reps; rep++)
		for (int i = 0; i < 2; i++) {
			double v[2];
			if (!ok[i])
				continue;
			if (idle_run(i, 1.0, v, err, sizeof err) < 0) {
				row_note(row[i], "ERR: %s", err);
				ok[i] = 0;
				continue;
			}
			row_push(row[i], v[0]);
			progress("[%s] rep %d/%d %s: %.0f us CPU over %.3f s", section, rep + 1,
				 reps, label[i], v[0], v[1]);
		}
}

void sec_scale(void)
{
	sec_ops();
	sec_life();
	sec_idle();
}
