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
 * Then the same for windows (cistern_get_prioritized_windows()): a batch of
 * BATCH windows of WINDOW consecutive steps of one simulation, each drawn by
 * its last member's priority among the complete windows (no episode ends
 * before its last member), with HELD samples held in episodes of SIMS
 * simulations, then new priorities for the windows' ids:
 *
 *   cistern   cistern_get_prioritized_windows() (members copied out, ids,
 *             weights) and cistern_update_priorities()
 *   c-tree    the plain C sum tree over the steps that end a complete
 *             window, the members copied from an array, no lock
 *   numpy     bench/prio_peers.py: the numpy sum tree over those steps,
 *             the draw of last members, then slicing an array
 *
 * For windows, HELD is rounded up to SIMS simulations of whole steps (at
 * least EP_MIN each). Prints a table for each with each peer's time over
 * cistern's; asserts no time. Exits 1 if a cistern round failed or a window
 * of its last round was not consecutive steps of one episode.
 *
 *   prio [HELD [BATCH [ROUNDS]]]     (defaults 1000000, 256, 2000)
 *   prio --tiny                      (20000 held, 256, 50 rounds: a quick check)
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
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
/* Windows: members per window, simulations, and episodes of EP_MIN to EP_MIN + EP_SPAN - 1 steps. */
#define WINDOW 4
#define SIMS 1000
#define EP_MIN 20
#define EP_SPAN 61

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

/* Leaves p[0..n) to sum, and m[0..n) (p if NULL) to take the least of. */
static int ct_init(struct ctree *t, const double *p, const double *m, uint64_t n)
{
	if (!m)
		m = p;
	t->leaves = 1;
	while (t->leaves < n)
		t->leaves *= 2;
	t->sum = calloc(2 * t->leaves, sizeof(double));
	t->min = malloc(2 * t->leaves * sizeof(double));
	if (!t->sum || !t->min)
		return -ENOMEM;
	for (uint64_t i = 0; i < t->leaves; i++) {
		t->sum[t->leaves + i] = i < n ? p[i] : 0;
		t->min[t->leaves + i] = i < n ? m[i] : INFINITY;
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

/* ---- Windows: the samples they are drawn from ---------------------------- */

/*
 * The samples of the window rounds: simulation s holds steps 0 to
 * steps - 1, sample s * steps + t, in episodes whose lengths come from
 * (s, episode) alone; the last step of each is an end of episode.
 */
static uint32_t episode_len(uint32_t sim, uint32_t e)
{
	return EP_MIN + (sim * 7 + e * 13) % EP_SPAN;
}

/* ends[i]: whether step i ends an episode, for held = SIMS * steps samples. */
static void episode_ends(bool *ends, uint32_t steps)
{
	for (uint32_t s = 0; s < SIMS; s++) {
		uint32_t t = 0;
		for (uint32_t e = 0; t < steps; e++) {
			t += episode_len(s, e);
			ends[(uint64_t)s * steps + (t < steps ? t : steps) - 1] = true;
		}
	}
}

/* Whether sample i (step t of its simulation) ends a complete window of WINDOW. */
static bool ends_window(const bool *ends, uint64_t i, uint32_t t)
{
	if (t + 1 < WINDOW)
		return false;
	for (uint64_t k = i + 1 - WINDOW; k < i; k++)
		if (ends[k])
			return false;
	return true;
}

/* ---- The rounds ---------------------------------------------------------- */

/*
 * What one run draws: held samples, and with steps > 0, windows of WINDOW
 * from SIMS simulations of `steps` steps each (held = SIMS * steps).
 */
struct draws {
	uint64_t held;
	uint32_t steps;
	int batch, rounds;
};

/* Samples a round copies out: a batch, or a batch of windows. */
static size_t members(const struct draws *d)
{
	return (size_t)d->batch * (d->steps ? WINDOW : 1);
}

static double run_ctree(const struct draws *d)
{
	uint64_t held = d->held;
	int batch = d->batch;
	double *p = malloc(held * sizeof(double)), *m = malloc(held * sizeof(double));
	bool *ends = calloc(held, sizeof(bool));
	uint64_t *data = malloc(held * sizeof(uint64_t));
	uint64_t *out = malloc(members(d) * sizeof(uint64_t));
	uint64_t *idx = malloc((size_t)batch * sizeof(uint64_t));
	double *w = malloc((size_t)batch * sizeof(double));
	double *t = malloc((size_t)d->rounds * sizeof(double));
	struct ctree tr = {0};
	double med = -1;
	if (!p || !m || !ends || !data || !out || !idx || !w || !t)
		goto out;
	if (d->steps)
		episode_ends(ends, d->steps);
	for (uint64_t i = 0; i < held; i++) {
		data[i] = i;
		m[i] = pow(rnd() * 10 + 0.01, ALPHA);
		/* Windows: only a step that ends a complete one can be drawn. */
		p[i] = !d->steps || ends_window(ends, i, (uint32_t)(i % d->steps)) ? m[i] : 0;
	}
	if (ct_init(&tr, p, m, held) < 0)
		goto out;
	for (int r = 0; r < d->rounds; r++) {
		double t0 = now_us();
		double total = tr.sum[1], wmax = pow((double)held * tr.min[1] / total, -BETA);
		for (int j = 0; j < batch; j++) {
			idx[j] = ct_draw(&tr, rnd() * total);
			/* The members of a window, or no copy at all (as before windows). */
			if (d->steps)
				memcpy(&out[(size_t)j * WINDOW], &data[idx[j] + 1 - WINDOW],
				       WINDOW * sizeof(uint64_t));
			double pi = tr.sum[tr.leaves + idx[j]] / total;
			w[j] = pow((double)held * pi, -BETA) / wmax;
		}
		for (int j = 0; j < batch; j++)
			ct_set(&tr, idx[j], pow(rnd() * 10 + 0.01, ALPHA));
		t[r] = now_us() - t0;
	}
	med = median(t, d->rounds);
out:
	free(p);
	free(m);
	free(ends);
	free(data);
	free(out);
	free(idx);
	free(w);
	free(t);
	free(tr.sum);
	free(tr.min);
	return med;
}

/* Whether every window of a round is consecutive steps of one episode. */
static bool windows_whole(const uint64_t *buf, const struct cistern_meta *meta, int batch)
{
	for (int j = 0; j < batch; j++)
		for (int k = 1; k < WINDOW; k++) {
			const struct cistern_meta *a = &meta[j * WINDOW + k - 1], *b = a + 1;
			if (buf[j * WINDOW + k] != buf[j * WINDOW + k - 1] + 1 ||
			    a->sim_id != b->sim_id || a->time_step + 1 != b->time_step || a->flags)
				return false;
		}
	return true;
}

static double run_cistern(const char *name, const struct draws *d)
{
	uint64_t held = d->held;
	int batch = d->batch;
	struct cistern_config cfg = {
		.policy = CISTERN_PRIORITIZED,
		.slot_size = SLOT,
		.slot_count = held,
		.watermark = 1,
		.sweep_size = d->steps ? SIMS : 0,
		.nb_time_steps = d->steps,
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
	double med = -1;
	bool *ends = calloc(held, sizeof(bool));
	uint64_t *buf = malloc(members(d) * sizeof(uint64_t));
	struct cistern_meta *meta = malloc(members(d) * sizeof(*meta));
	uint64_t *ids = malloc((size_t)batch * sizeof(uint64_t));
	double *w = malloc((size_t)batch * sizeof(double));
	double *q = malloc((size_t)batch * sizeof(double));
	double *t = malloc((size_t)d->rounds * sizeof(double));
	if (!ends || !buf || !meta || !ids || !w || !q || !t)
		goto out;
	if (d->steps)
		episode_ends(ends, d->steps);
	for (uint64_t i = 0; i < held; i++) {
		uint64_t v = i;
		struct cistern_meta m = {0};
		if (d->steps) {
			m.sim_id = (uint32_t)(i / d->steps);
			m.time_step = (uint32_t)(i % d->steps);
			m.flags = ends[i] ? CISTERN_META_END_OF_EPISODE : 0;
		}
		r = cistern_put_prioritized(c, &v, sizeof(v), d->steps ? &m : NULL, rnd() * 10, 0);
		if (r < 0) {
			fprintf(stderr, "prio: put %llu: %s\n", (unsigned long long)i,
				cistern_strerror(r));
			goto out;
		}
	}
	for (int k = -d->rounds / 10; k < d->rounds; k++) {
		double t0 = now_us();
		if (d->steps)
			r = cistern_get_prioritized_windows(c, buf, SLOT, (size_t)batch, WINDOW, 1,
							    NULL, meta, ids, w, 0);
		else
			r = cistern_get_prioritized(c, buf, SLOT, (size_t)batch, NULL, NULL, ids, w,
						    0);
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
	med = median(t, d->rounds);
	if (d->steps && !windows_whole(buf, meta, batch)) {
		fprintf(stderr, "prio: a window of the last round is not whole\n");
		med = -1;
	}
out:
	free(ends);
	free(buf);
	free(meta);
	free(ids);
	free(w);
	free(q);
	free(t);
	cistern_detach(c);
	cistern_unlink(name);
	return med;
}

/*
 * The Python peers' medians, by name; -1 for a peer that did not report.
 * With window > 0, the peers of windows of that length (numpy alone).
 */
static void run_python(uint64_t held, int batch, int rounds, int window, double *np_us,
		       double *loop_us)
{
	char cmd[512];
	*np_us = *loop_us = -1;
	if (window > 0)
		snprintf(cmd, sizeof(cmd),
			 "/usr/bin/python3 %s/prio_peers.py %llu %d %d 1 %d %d %d %d", BENCH_SRCDIR,
			 (unsigned long long)held, batch, rounds, window, SIMS, EP_MIN, EP_SPAN);
	else
		snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/prio_peers.py %llu %d %d 1",
			 BENCH_SRCDIR, (unsigned long long)held, batch, rounds);
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
	uint64_t held = 1000000;
	int batch = 256, rounds = 2000;
	if (argc > 1 && strcmp(argv[1], "--tiny") == 0) {
		/* A second or so: every contender and check runs, the figures mean little. */
		held = 20000;
		rounds = 50;
	} else {
		held = argc > 1 ? strtoull(argv[1], NULL, 0) : held;
		batch = argc > 2 ? atoi(argv[2]) : batch;
		rounds = argc > 3 ? atoi(argv[3]) : rounds;
	}
	if (held == 0 || batch <= 0 || rounds <= 0) {
		fprintf(stderr, "usage: prio [--tiny | HELD [BATCH [ROUNDS]]]\n");
		return 2;
	}
	char name[64];
	snprintf(name, sizeof(name), "bench-prio-%d", (int)getpid());
	const struct draws plain = {held, 0, batch, rounds};
	double cis = run_cistern(name, &plain);
	double ct = run_ctree(&plain);
	double np_us, loop_us;
	run_python(held, batch, rounds / 10 > 20 ? rounds / 10 : 20, 0, &np_us, &loop_us);
	printf("prioritized sampling: draw %d by priority^%.1f with weights, then update their "
	       "priorities, %llu samples held; median us per round\n",
	       batch, ALPHA, (unsigned long long)held);
	printf("%-10s %12s %10s\n", "contender", "us/round", "/cistern");
	row("cistern", cis, cis);
	row("c-tree", ct, cis);
	row("numpy", np_us, cis);
	row("loop", loop_us, cis);

	/* Windows: as many samples as the draws above, SIMS simulations of whole steps. */
	uint32_t steps = (uint32_t)((held + SIMS - 1) / SIMS);
	if (steps < EP_MIN)
		steps = EP_MIN;
	const struct draws windows = {(uint64_t)SIMS * steps, steps, batch, rounds};
	double wcis = run_cistern(name, &windows);
	double wct = run_ctree(&windows);
	double wnp, unused;
	run_python((uint64_t)SIMS * steps, batch, rounds / 10 > 20 ? rounds / 10 : 20, WINDOW, &wnp,
		   &unused);
	printf("\nprioritized windows: draw %d windows of %d steps by their last member's "
	       "priority^%.1f with weights, then update their priorities, %llu samples held "
	       "in episodes of %d to %d steps of %d simulations; median us per round\n",
	       batch, WINDOW, ALPHA, (unsigned long long)SIMS * steps, EP_MIN, EP_MIN + EP_SPAN - 1,
	       SIMS);
	printf("%-10s %12s %10s\n", "contender", "us/round", "/cistern");
	row("cistern", wcis, wcis);
	row("c-tree", wct, wcis);
	row("numpy", wnp, wcis);
	return cis < 0 || wcis < 0 ? 1 : 0;
}
