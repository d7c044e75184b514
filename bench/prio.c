/* SPDX-License-Identifier: MIT */
/*
 * prio - prioritized sampling with many samples held: the median time of one
 * round that draws a batch by priority^alpha (with importance weights) and
 * writes new priorities for it, in the same run for:
 *
 *   cistern   cistern_get_prioritized() (samples copied out, ids, weights)
 *             and cistern_update_priorities() on a prioritized segment
 *   c-tree    a plain C sum tree and min tree of doubles in one process:
 *             the same draws, weights and updates, no copies, no lock
 *   numpy     bench/prio_peers.py: a vectorised numpy sum tree
 *   loop      bench/prio_peers.py: the classic per-item Python sum tree
 *
 * Prints a table with each peer's time over cistern's; asserts nothing.
 *
 *   prio [HELD [BATCH [ROUNDS]]]     (defaults 1000000, 256, 2000)
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cistern.h>

#ifndef BENCH_SRCDIR
#define BENCH_SRCDIR "bench"
#endif

#define ALPHA 0.6
#define BETA 0.4
#define SLOT 8

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static double rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (double)(rng_state >> 11) / 9007199254740992.0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
	qsort(t, (size_t)n, sizeof(*t), cmp_d);
	return t[n / 2];
}

/* ---- A plain C sum tree, as a program in one process would keep it ---- */

struct ctree {
	uint64_t leaves;
	double *sum, *min;
};

static void ct_pull(struct ctree *t, uint64_t k)
{
	t->sum[k] = t->sum[2 * k] + t->sum[2 * k + 1];
	t->min[k] = fmin(t->min[2 * k], t->min[2 * k + 1]);
}

static int ct_init(struct ctree *t, const double *p, uint64_t n)
{
	t->leaves = 1;
	while (t->leaves < n)
		t->leaves *= 2;
	t->sum = calloc(2 * t->leaves, sizeof(double));
	t->min = malloc(2 * t->leaves * sizeof(double));
	if (!t->sum || !t->min)
		return -ENOMEM;
	for (uint64_t i = 0; i < t->leaves; i++) {
		t->sum[t->leaves + i] = i < n ? p[i] : 0;
		t->min[t->leaves + i] = i < n ? p[i] : INFINITY;
	}
	for (uint64_t k = t->leaves - 1; k >= 1; k--)
		ct_pull(t, k);
	return 0;
}

static uint64_t ct_draw(const struct ctree *t, double u)
{
	uint64_t k = 1;
	while (k < t->leaves) {
		double left = t->sum[2 * k];
		if (u < left) {
			k = 2 * k;
		} else {
			u -= left;
			k = 2 * k + 1;
		}
	}
	return k - t->leaves;
}

static void ct_set(struct ctree *t, uint64_t i, double v)
{
	uint64_t k = t->leaves + i;
	t->sum[k] = v;
	t->min[k] = v;
	for (k >>= 1; k >= 1; k >>= 1)
		ct_pull(t, k);
}

/* ---- The rounds ---------------------------------------------------------- */

static double run_ctree(uint64_t held, int batch, int rounds)
{
	double *p = malloc(held * sizeof(double));
	uint64_t *idx = malloc((size_t)batch * sizeof(uint64_t));
	double *w = malloc((size_t)batch * sizeof(double));
	double *t = malloc((size_t)rounds * sizeof(double));
	struct ctree tr;
	if (!p || !idx || !w || !t)
		return -1;
	for (uint64_t i = 0; i < held; i++)
		p[i] = pow(rnd() * 10 + 0.01, ALPHA);
	if (ct_init(&tr, p, held) < 0)
		return -1;
	for (int r = 0; r < rounds; r++) {
		double t0 = now_us();
		double total = tr.sum[1], wmax = pow((double)held * tr.min[1] / total, -BETA);
		for (int j = 0; j < batch; j++) {
			idx[j] = ct_draw(&tr, rnd() * total);
			double pi = tr.sum[tr.leaves + idx[j]] / total;
			w[j] = pow((double)held * pi, -BETA) / wmax;
		}
		for (int j = 0; j < batch; j++)
			ct_set(&tr, idx[j], pow(rnd() * 10 + 0.01, ALPHA));
		t[r] = now_us() - t0;
	}
	double m = median(t, rounds);
	free(p);
	free(idx);
	free(w);
	free(t);
	free(tr.sum);
	free(tr.min);
	return m;
}

static double run_cistern(const char *name, uint64_t held, int batch, int rounds)
{
	struct cistern_config cfg = {
		.policy = CISTERN_PRIORITIZED,
		.slot_size = SLOT,
		.slot_count = held,
		.watermark = 1,
		.seed = 42,
		.alpha = ALPHA,
		.beta = BETA,
		.epsilon = 0.01,
	};
	struct cistern *c;
	int r = cistern_create(name, &cfg, &c);
	if (r < 0) {
		fprintf(stderr, "prio: create %s: %s\n", name, cistern_strerror(r));
		return -1;
	}
	double m = -1;
	char *buf = malloc((size_t)batch * SLOT);
	uint64_t *ids = malloc((size_t)batch * sizeof(uint64_t));
	double *w = malloc((size_t)batch * sizeof(double));
	double *q = malloc((size_t)batch * sizeof(double));
	double *t = malloc((size_t)rounds * sizeof(double));
	if (!buf || !ids || !w || !q || !t)
		goto out;
	for (uint64_t i = 0; i < held; i++) {
		uint64_t v = i;
		r = cistern_put_prioritized(c, &v, sizeof(v), NULL, rnd() * 10, 0);
		if (r < 0) {
			fprintf(stderr, "prio: put %llu: %s\n", (unsigned long long)i,
				cistern_strerror(r));
			goto out;
		}
	}
	for (int k = -rounds / 10; k < rounds; k++) {
		double t0 = now_us();
		r = cistern_get_prioritized(c, buf, SLOT, (size_t)batch, NULL, NULL, ids, w, 0);
		if (r != batch) {
			fprintf(stderr, "prio: draw: %s\n", cistern_strerror(r));
			goto out;
		}
		for (int j = 0; j < batch; j++)
			q[j] = rnd() * 10;
		r = cistern_update_priorities(c, ids, q, (size_t)batch);
		if (r < 0) {
			fprintf(stderr, "prio: update: %s\n", cistern_strerror(r));
			goto out;
		}
		if (k >= 0)
			t[k] = now_us() - t0;
	}
	m = median(t, rounds);
out:
	free(buf);
	free(ids);
	free(w);
	free(q);
	free(t);
	cistern_detach(c);
	cistern_unlink(name);
	return m;
}

/* The Python peers' medians, by name; -1 for a peer that did not report. */
static void run_python(uint64_t held, int batch, int rounds, double *np_us, double *loop_us)
{
	char cmd[512];
	*np_us = *loop_us = -1;
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/prio_peers.py %llu %d %d 1", BENCH_SRCDIR,
		 (unsigned long long)held, batch, rounds);
	FILE *f = popen(cmd, "r");
	if (!f)
		return;
	char name[32];
	double us;
	while (fscanf(f, "%31s %lf", name, &us) == 2) {
		if (strcmp(name, "numpy") == 0)
			*np_us = us;
		else if (strcmp(name, "loop") == 0)
			*loop_us = us;
	}
	pclose(f);
}

static void row(const char *name, double us, double base)
{
	if (us < 0)
		printf("%-10s %12s %10s\n", name, "failed", "-");
	else
		printf("%-10s %12.1f %9.2fx\n", name, us, base > 0 ? us / base : 0);
}

int main(int argc, char **argv)
{
	uint64_t held = argc > 1 ? strtoull(argv[1], NULL, 0) : 1000000;
	int batch = argc > 2 ? atoi(argv[2]) : 256;
	int rounds = argc > 3 ? atoi(argv[3]) : 2000;
	if (held == 0 || batch <= 0 || rounds <= 0) {
		fprintf(stderr, "usage: prio [HELD [BATCH [ROUNDS]]]\n");
		return 2;
	}
	char name[64];
	snprintf(name, sizeof(name), "bench-prio-%d", (int)getpid());
	double cis = run_cistern(name, held, batch, rounds);
	double ct = run_ctree(held, batch, rounds);
	double np_us, loop_us;
	run_python(held, batch, rounds / 10 > 20 ? rounds / 10 : 20, &np_us, &loop_us);
	printf("prioritized sampling: draw %d by priority^%.1f with weights, then update their "
	       "priorities, %llu samples held; median us per round\n",
	       batch, ALPHA, (unsigned long long)held);
	printf("%-10s %12s %10s\n", "contender", "us/round", "/cistern");
	row("cistern", cis, cis);
	row("c-tree", ct, cis);
	row("numpy", np_us, cis);
	row("loop", loop_us, cis);
	return cis < 0 ? 1 : 0;
}
