/* SPDX-License-Identifier: MIT */
/* common.c - timing, processes, payload work and the result table. */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cistern.h>
#include <mqueue.h>
#include <zmq.h>

#include "peer_boost.h"

struct bench_opts g_opt;

int bench_section_enabled(const char *id)
{
	if (!g_opt.only)
		return 1;
	size_t l = strlen(id);
	const char *p = g_opt.only;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == l && strncmp(p, id, n) == 0)
			return 1;
		if (!e)
			break;
		p = e + 1;
	}
	return 0;
}

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
			      .tv_nsec = (long)(ns % 1000000000u)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void pin_cpu(int cpu)
{
	if (g_opt.ncpu <= 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET((size_t)(cpu % g_opt.ncpu), &set);
	(void)sched_setaffinity(0, sizeof set, &set);
}

void *shm_anon(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	len = (len + pg - 1) / pg * pg;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

/*
 * The same kind of memory as a cistern segment: an object in /dev/shm, its
 * name removed at once. Whatever /dev/shm's mount gives a segment (2 MiB
 * pages with huge=within_size or always, 4 KiB pages by default) it gives
 * this too, so that a bound measured in it differs from cistern by the
 * transport alone. Free with shm_anon_free().
 */
void *shm_tmpfs(size_t len)
{
	static unsigned n;
	char name[64];
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	len = (len + pg - 1) / pg * pg;
	snprintf(name, sizeof name, "/cistern-bench-mem-%d-%u", (int)getpid(), n++);
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0) {
		perror("shm_open");
		exit(2);
	}
	shm_unlink(name);
	int r = ftruncate(fd, (off_t)len) == 0 ? posix_fallocate(fd, 0, (off_t)len) : errno;
	if (r != 0) {
		fprintf(stderr, "cistern-bench: /dev/shm object of %zu bytes: %s\n", len,
			strerror(r));
		exit(2);
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

void shm_huge_option(char *out, size_t cap)
{
	snprintf(out, cap, "unknown (no /dev/shm mount found)");
	FILE *f = fopen("/proc/self/mounts", "r");
	if (!f)
		return;
	char line[1024];
	while (fgets(line, sizeof line, f)) {
		char dev[256], dir[256], type[64], opts[512];
		if (sscanf(line, "%255s %255s %63s %511s", dev, dir, type, opts) != 4 ||
		    strcmp(dir, "/dev/shm") != 0)
			continue;
		const char *h = strstr(opts, "huge=");
		if (!h) {
			snprintf(out, cap, "never");
		} else {
			size_t k = strcspn(h + 5, ",");
			snprintf(out, cap, "%.*s", (int)k, h + 5);
		}
	}
	fclose(f);
}

void shm_anon_free(void *p, size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	len = (len + pg - 1) / pg * pg;
	munmap(p, len);
}

struct run_ctl *ctl_new(int nprod, int nread, uint64_t per_producer)
{
	struct run_ctl *c = shm_anon(sizeof *c);
	c->nprod = nprod;
	c->nread = nread;
	c->per_producer = per_producer;
	return c;
}

void ctl_free(struct run_ctl *c)
{
	shm_anon_free(c, sizeof *c);
}

void ctl_child_ready(struct run_ctl *c)
{
	atomic_fetch_add(&c->ready, 1);
	while (!atomic_load_explicit(&c->go, memory_order_acquire))
		sched_yield();
}

void ctl_error(struct run_ctl *c, int slot, const char *fmt, ...)
{
	if (slot < 0 || slot >= BENCH_MAX_PROCS * 2 || c->err[slot][0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err[slot], sizeof c->err[slot], fmt, ap);
	va_end(ap);
}

static void kill_all(pid_t *pids, int n, int *alive)
{
	for (int i = 0; i < n; i++)
		if (alive[i])
			kill(pids[i], SIGKILL);
	for (int i = 0; i < n; i++)
		if (alive[i]) {
			waitpid(pids[i], NULL, 0);
			alive[i] = 0;
		}
}

int run_children(struct run_ctl *c, const struct run_hooks *h, uint64_t *t0)
{
	int n = c->nprod + c->nread;
	pid_t pids[BENCH_MAX_PROCS * 2];
	int alive[BENCH_MAX_PROCS * 2] = {0};
	int failed = 0;
	sigset_t chld, old;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	fflush(NULL);
	for (int i = 0; i < n; i++) {
		int role = i < c->nprod ? 'p' : 'r';
		int idx = i < c->nprod ? i : i - c->nprod;
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			kill_all(pids, i, alive);
			sigprocmask(SIG_SETMASK, &old, NULL);
			return -1;
		}
		if (pid == 0) {
			sigprocmask(SIG_SETMASK, &old, NULL);
			int rc = h->fn(role, idx, h->arg);
			_exit(rc ? 1 : 0);
		}
		pids[i] = pid;
		alive[i] = 1;
	}

	if (h->after_fork)
		h->after_fork(h->arg);

	/* Start barrier. */
	uint64_t deadline = now_ns() + 60ull * 1000000000u;
	while (atomic_load(&c->ready) < n) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p > 0) {
			for (int i = 0; i < n; i++)
				if (pids[i] == p)
					alive[i] = 0;
			failed = 1;
			break;
		}
		if (now_ns() > deadline) {
			failed = 1;
			break;
		}
		sleep_ns(200000);
	}
	if (failed) {
		atomic_store(&c->go, 1);
		sleep_ns(100000000);
		kill_all(pids, n, alive);
		sigprocmask(SIG_SETMASK, &old, NULL);
		return -1;
	}
	if (h->settle_ns)
		sleep_ns(h->settle_ns);
	*t0 = now_ns();
	atomic_store_explicit(&c->go, 1, memory_order_release);

	int prod_left = c->nprod, left = n, called = 0;
	deadline = *t0 + h->timeout_ns;
	while (left > 0) {
		int st;
		pid_t p;
		while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
			for (int i = 0; i < n; i++) {
				if (pids[i] != p || !alive[i])
					continue;
				alive[i] = 0;
				left--;
				if (i < c->nprod)
					prod_left--;
				if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
					failed = 1;
					if (!WIFEXITED(st))
						ctl_error(c,
							  i < c->nprod
								  ? i
								  : BENCH_MAX_PROCS + i - c->nprod,
							  "killed by signal %d", WTERMSIG(st));
				}
			}
		}
		if (prod_left == 0 && !called) {
			called = 1;
			if (h->after_producers && h->after_producers(h->arg) != 0)
				failed = 1;
			continue;
		}
		if (left == 0)
			break;
		if (failed) {
			/* A child failed: its peers may wait forever. Give them a moment. */
			sleep_ns(200000000);
			while ((p = waitpid(-1, &st, WNOHANG)) > 0)
				for (int i = 0; i < n; i++)
					if (pids[i] == p)
						alive[i] = 0;
			kill_all(pids, n, alive);
			break;
		}
		uint64_t t = now_ns();
		if (t >= deadline) {
			c->timed_out = 1;
			c->t_stop = t;
			ctl_error(c, 0, "timed out after %.1f s", (double)h->timeout_ns / 1e9);
			kill_all(pids, n, alive);
			failed = 1;
			break;
		}
		uint64_t w = deadline - t;
		if (w > 100000000)
			w = 100000000;
		struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)w};
		(void)sigtimedwait(&chld, NULL, &ts);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return failed ? -1 : 0;
}

uint64_t tagsum_expected(int nprod, uint64_t per_producer)
{
	uint64_t s = 0;
	for (int p = 0; p < nprod; p++)
		s += make_tag(p, 0) * per_producer + per_producer * (per_producer - 1) / 2;
	return s;
}

/*
 * The raw ZeroMQ reader of sections 3 and 8: bind PULL socket s at ep (its
 * receive high-water mark hwm), tell the producer it is bound, and receive
 * per_producer samples of len bytes, counting those whose length or sum is
 * wrong. 0, or -1 after ctl_error() in reader slot `slot`.
 */
int zmq_pull_checked(struct run_ctl *c, int slot, void *s, const char *ep, size_t len, int hwm,
		     uint64_t *count, uint64_t *bad)
{
	int linger = 0;
	*count = *bad = 0;
	zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	if (zmq_bind(s, ep) != 0) {
		ctl_error(c, slot, "zmq_bind %s: %s", ep, zmq_strerror(zmq_errno()));
		return -1;
	}
	atomic_fetch_add(&c->bound, 1);
	ctl_child_ready(c);
	while (*count < c->per_producer) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, s, 0) < 0) {
			zmq_msg_close(&m);
			if (zmq_errno() == EINTR)
				continue;
			ctl_error(c, slot, "zmq_msg_recv: %s", zmq_strerror(zmq_errno()));
			return -1;
		}
		*bad += zmq_msg_size(&m) != len ||
			big_sum(zmq_msg_data(&m), len) != big_sum_expected(len, *count);
		zmq_msg_close(&m);
		++*count;
	}
	return 0;
}

void big_fill(void *buf, size_t len, uint64_t seq)
{
	uint64_t *w = buf;
	size_t n = len / 8;
	uint64_t base = seq * FILL_K;
	for (size_t i = 0; i < n; i++)
		w[i] = base + i;
}

uint64_t big_sum(const void *buf, size_t len)
{
	const uint64_t *w = buf;
	size_t n = len / 8;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		s0 += w[i];
		s1 += w[i + 1];
		s2 += w[i + 2];
		s3 += w[i + 3];
	}
	for (; i < n; i++)
		s0 += w[i];
	return s0 + s1 + s2 + s3;
}

uint64_t big_sum_expected(size_t len, uint64_t seq)
{
	uint64_t n = len / 8;
	return n * (seq * FILL_K) + n * (n - 1) / 2;
}

/* ---- results ------------------------------------------------------------------ */

#define MAX_ROWS 160
static struct row rows[MAX_ROWS];
static int nrows;

int row_add(const char *section, const char *contender, const char *metric, const char *unit,
	    enum better better)
{
	if (nrows >= MAX_ROWS) {
		fprintf(stderr, "too many rows\n");
		exit(2);
	}
	struct row *r = &rows[nrows];
	memset(r, 0, sizeof *r);
	snprintf(r->section, sizeof r->section, "%s", section);
	snprintf(r->contender, sizeof r->contender, "%s", contender);
	snprintf(r->metric, sizeof r->metric, "%s", metric);
	snprintf(r->unit, sizeof r->unit, "%s", unit);
	r->better = better;
	r->ref = -1;
	return nrows++;
}

struct row *row_get(int i)
{
	return (i >= 0 && i < nrows) ? &rows[i] : NULL;
}

int row_count(void)
{
	return nrows;
}

void row_push(int i, double v)
{
	struct row *r = row_get(i);
	if (r && r->n < BENCH_MAX_VALS)
		r->v[r->n++] = v;
}

void row_note(int i, const char *fmt, ...)
{
	struct row *r = row_get(i);
	if (!r || r->note[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->note, sizeof r->note, fmt, ap);
	va_end(ap);
}

void row_ref(int i, int ref, int kind)
{
	struct row *r = row_get(i);
	if (r) {
		r->ref = ref;
		r->ratio_kind = kind;
	}
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double row_median(const struct row *r)
{
	if (r->n == 0)
		return NAN;
	double t[BENCH_MAX_VALS];
	memcpy(t, r->v, sizeof(double) * (size_t)r->n);
	qsort(t, (size_t)r->n, sizeof(double), cmp_d);
	return r->n % 2 ? t[r->n / 2] : (t[r->n / 2 - 1] + t[r->n / 2]) / 2;
}

double row_min(const struct row *r)
{
	double m = INFINITY;
	for (int i = 0; i < r->n; i++)
		m = r->v[i] < m ? r->v[i] : m;
	return m;
}

double row_max(const struct row *r)
{
	double m = -INFINITY;
	for (int i = 0; i < r->n; i++)
		m = r->v[i] > m ? r->v[i] : m;
	return m;
}

static void fmt_num(char *out, size_t cap, double v)
{
	double a = fabs(v);
	if (isnan(v))
		snprintf(out, cap, "-");
	else if (a >= 1000)
		snprintf(out, cap, "%.0f", v);
	else if (a >= 100)
		snprintf(out, cap, "%.1f", v);
	else if (a >= 10)
		snprintf(out, cap, "%.2f", v);
	else if (a >= 0.01 || a == 0)
		snprintf(out, cap, "%.3f", v);
	else
		snprintf(out, cap, "%.2g", v);
}

/* Ratio shown for row r, NAN if none. */
static double row_ratio(const struct row *r)
{
	const struct row *ref = row_get(r->ref);
	if (!ref || ref == r || ref->note[0] || r->note[0] || r->n == 0 || ref->n == 0)
		return NAN;
	double a = row_median(ref), b = row_median(r);
	if (a == 0 || b == 0)
		return NAN;
	if (r->ratio_kind == 1)
		return b / a;
	return r->better == HIGHER_BETTER ? a / b : b / a;
}

void table_print(void)
{
	const char *last = "";
	printf("| section | contender | metric | median | min-max | unit | ratio |\n");
	printf("|---|---|---|---:|---:|---|---:|\n");
	for (int i = 0; i < nrows; i++) {
		struct row *r = &rows[i];
		char med[32], lo[32], hi[32], rat[32];
		const char *sec = strcmp(r->section, last) ? r->section : "";
		last = r->section;
		if (r->note[0]) {
			printf("| %s | %s | %s | %s | | | |\n", sec, r->contender, r->metric,
			       r->note);
			continue;
		}
		fmt_num(med, sizeof med, row_median(r));
		fmt_num(lo, sizeof lo, row_min(r));
		fmt_num(hi, sizeof hi, row_max(r));
		double q = row_ratio(r);
		if (isnan(q))
			snprintf(rat, sizeof rat, "%s", r->ref == i ? "1 (ref)" : "");
		else
			snprintf(rat, sizeof rat, "%.2f", q);
		printf("| %s | %s | %s | %s | %s-%s | %s | %s |\n", sec, r->contender, r->metric,
		       med, lo, hi, r->unit, rat);
	}
	fflush(stdout);
}

uint64_t round_to(uint64_t n, uint64_t m)
{
	n = (n + m - 1) / m * m;
	return n ? n : m;
}

void progress(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- names ------------------------------------------------------------------ */

#define MAX_NAMES 64
/* First character: 'c' cistern segment, 'm' POSIX mq, 'b' Boost queue; then the name. */
static char names[MAX_NAMES][CISTERN_NAME_MAX + 3];
static pid_t names_owner;

void bench_name(char *out, size_t cap, const char *what)
{
	static unsigned seq;
	snprintf(out, cap, "bench-%ld-%s%u", (long)getpid(), what, seq++);
}

void cleanup_register_kind(char kind, const char *n)
{
	names_owner = getpid();
	for (int i = 0; i < MAX_NAMES; i++)
		if (!names[i][0]) {
			snprintf(names[i], sizeof names[i], "%c%s", kind, n);
			return;
		}
}

void cleanup_forget(const char *n)
{
	for (int i = 0; i < MAX_NAMES; i++)
		if (names[i][0] && strcmp(names[i] + 1, n) == 0)
			names[i][0] = 0;
}

void cleanup_register(const char *n)
{
	cleanup_register_kind('c', n);
}

void cleanup_all(void)
{
	if (getpid() != names_owner)
		return;
	for (int i = 0; i < MAX_NAMES; i++) {
		if (names[i][0] == 'c')
			(void)cistern_unlink(names[i] + 1);
		else if (names[i][0] == 'm')
			(void)mq_unlink(names[i] + 1);
		else if (names[i][0] == 'b')
			bq_remove(names[i] + 1);
		names[i][0] = 0;
	}
}
