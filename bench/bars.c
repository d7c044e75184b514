/* SPDX-License-Identifier: MIT */
/* bars.c - the targets of issue 6, judged on the medians just measured. */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct bar_rows g_bars = {
	.s1_cis_sole = -1,
	.s1_cis = -1,
	.s1_cis_spin = -1,
	.s1_ck = -1,
	.s1_rte = -1,
	.s1_pipe = -1,
	.s1_mq = -1,
	.s1_boost = -1,
	.s1_zmq = -1,
	.s1_bare = -1,
	.s1_bare_stores = -1,
	.s1_bare_batched = -1,
	.s1_bare_rounds = -1,
	.s1_bare_prefetch = -1,
	.s3_cis = -1,
	.s3_bound = -1,
	.s3_bound_1 = -1,
	.s3_cis_1cpu = -1,
	.s3_cis_busy = -1,
	.s3_handoff = -1,
	.s3_handoff_1cpu = -1,
	.s4_zc = -1,
	.s4_gather = -1,
	.s4_zc_any = -1,
	.s4_gather_any = -1,
	.s4_zc_two = -1,
	.s4_gather_two = -1,
	.s4_floor_zc = -1,
	.s4_floor_gather = -1,
	.s4_pass_zc = -1,
	.s4_pass_gather = -1,
	.s4_opt_gather = -1,
	.s4_opt_apart = -1,
	.s4_opt_words = -1,
	.s4_gather_rs = -1,
	.s4_torch = -1,
	.s4_torch_fixed = -1,
	.s6_op = {-1, -1, -1},
	.s7_cis_batch = -1,
	.s7_cis_one = -1,
	.s7_queue = -1,
	.s8_ack = {-1, -1, -1},
	.s8_zmq = {-1, -1, -1},
};

/* Median of a row, NAN when it was not measured. */
static double med(int i)
{
	const struct row *r = row_get(i);
	if (!r || r->note[0] || r->n == 0)
		return NAN;
	return row_median(r);
}

static double max2(double a, double b)
{
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	return a > b ? a : b;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/*
 * Row num against the best of the rows den[], repetition by repetition: the
 * median of num's k-th value over the best k-th value of den[], with the
 * smallest and largest of those ratios in *lo and *hi. The k-th repetitions
 * of a section's rows run back to back, seconds apart, so a change in the
 * host's speed between repetitions falls on both sides of each ratio, where
 * a ratio of medians can set one row's fast repetitions against another's
 * slow ones. NAN unless every row was measured as often.
 */
static double paired(int num, const int *den, int nden, double *lo, double *hi)
{
	*lo = *hi = NAN;
	const struct row *a = row_get(num);
	if (!a || a->note[0] || a->n == 0)
		return NAN;
	double q[BENCH_MAX_VALS];
	for (int k = 0; k < a->n; k++) {
		double best = NAN;
		for (int j = 0; j < nden; j++) {
			const struct row *b = row_get(den[j]);
			if (!b || b->note[0] || b->n != a->n)
				return NAN;
			best = max2(best, b->v[k]);
		}
		q[k] = a->v[k] / best;
	}
	qsort(q, (size_t)a->n, sizeof(q[0]), cmp_double);
	*lo = q[0];
	*hi = q[a->n - 1];
	return a->n % 2 ? q[a->n / 2] : (q[a->n / 2 - 1] + q[a->n / 2]) / 2;
}

static const char *verdict(int met, int known)
{
	return !known ? "NOT MEASURED" : met ? "MET" : "MISSED";
}

void bars_print(void)
{
	printf("Targets (medians):\n");

	if (bench_section_enabled("1")) {
		double cis = med(g_bars.s1_cis_sole), mpmc = med(g_bars.s1_cis),
		       spin = med(g_bars.s1_cis_spin);
		double rings = max2(med(g_bars.s1_ck), med(g_bars.s1_rte));
		double ipc = max2(max2(med(g_bars.s1_pipe), med(g_bars.s1_mq)),
				  max2(med(g_bars.s1_boost), med(g_bars.s1_zmq)));
		int known = !isnan(cis) && !isnan(rings) && !isnan(ipc);
		int a = cis >= rings, b = cis >= 10 * ipc;
		double bare = med(g_bars.s1_bare), stores = med(g_bars.s1_bare_stores),
		       batched = med(g_bars.s1_bare_batched), rounds = med(g_bars.s1_bare_rounds),
		       ahead = med(g_bars.s1_bare_prefetch);
		printf("(1) cistern >= best of ck_ring/rte_ring and >= 10x best of "
		       "pipe/mq/boost/zmq: %s\n"
		       "    cistern single producer/reader %.3f M/s (any number of them %.3f, "
		       "timeout-0 "
		       "variant %.3f); best ring %.3f (%s, x%.2f; any number x%.2f); best of "
		       "pipe/mq/boost/zmq %.3f (x%.2f, needs 10)\n"
		       "    no-library ring %.3f M/s: cistern x%.2f of it; 10x the best of "
		       "pipe/mq/boost/zmq would be x%.2f of it; with 16 more producer stores per "
		       "sample "
		       "it did %.3f M/s (x%.2f of itself)\n",
		       verdict(a && b, known), cis, mpmc, spin, rings, a ? "met" : "missed",
		       cis / rings, mpmc / rings, ipc, cis / ipc, bare, cis / bare, 10 * ipc / bare,
		       stores, stores / bare);
		if (!isnan(rounds))
			printf("    the no-library ring with its reader looking again after %d "
			       "pauses (as "
			       "cistern's does) %.3f M/s: cistern x%.2f of it; 10x the best of "
			       "pipe/mq/boost/zmq would be x%.2f of it\n",
			       BARE_ROUND_PAUSES, rounds, cis / rounds, 10 * ipc / rounds);
		if (!isnan(ahead))
			printf("    the same with its producer prefetching for writing %d slots "
			       "ahead (as "
			       "cistern's does) %.3f M/s: cistern x%.2f of it; 10x the best of "
			       "pipe/mq/boost/zmq would be x%.2f of it\n",
			       BARE_PUT_AHEAD, ahead, cis / ahead, 10 * ipc / ahead);
		if (!isnan(batched))
			printf("    a ring publishing its indices once per 16 samples (not a "
			       "queue) %.3f "
			       "M/s: x%.2f the per-sample no-library ring, x%.2f the best of "
			       "pipe/mq/boost/zmq\n",
			       batched, batched / bare, batched / ipc);
		int rings_rows[] = {g_bars.s1_ck, g_bars.s1_rte};
		int ipc_rows[] = {g_bars.s1_pipe, g_bars.s1_mq, g_bars.s1_boost, g_bars.s1_zmq};
		double rlo, rhi, qlo, qhi;
		double pr = paired(g_bars.s1_cis_sole, rings_rows, 2, &rlo, &rhi);
		double pq = paired(g_bars.s1_cis_sole, ipc_rows, 4, &qlo, &qhi);
		if (!isnan(pr) && !isnan(pq))
			printf("    rep by rep (the k-th repetitions of all rows run back to "
			       "back): "
			       "cistern / best ring x%.2f (x%.2f-x%.2f), cistern / best of "
			       "pipe/mq/boost/zmq x%.2f (x%.2f-x%.2f)\n",
			       pr, rlo, rhi, pq, qlo, qhi);
	}
	if (bench_section_enabled("3")) {
		double cis = med(g_bars.s3_cis), one = med(g_bars.s3_cis_1cpu),
		       busy = med(g_bars.s3_cis_busy);
		double b0 = med(g_bars.s3_bound), b1 = med(g_bars.s3_bound_1);
		double handoff = med(g_bars.s3_handoff), handoff1 = med(g_bars.s3_handoff_1cpu);
		/* Two CPUs: against the faster CPU's bound; both processes on CPU 1: against CPU 1's. */
		double bound = max2(b0, b1), two = max2(cis, busy);
		int known = !isnan(two) && !isnan(bound) && !isnan(one) && !isnan(b1);
		int met = known && (two >= 0.9 * bound || one >= 0.9 * b1);
		printf("(3) cistern zero-copy within 10%% of the no-transport bound: %s\n"
		       "    bound %.2f GB/s on CPU 0, %.2f on CPU 1\n"
		       "    cistern on two CPUs %.2f GB/s (%.1f%% of the faster bound; busy %.2f, "
		       "%.1f%%); "
		       "two-process hand-off bound %.2f GB/s (%.1f%%): cistern blocking x%.2f of "
		       "it, busy x%.2f\n"
		       "    both processes on CPU 1: cistern %.2f GB/s (%.1f%% of CPU 1's bound); "
		       "hand-off %.2f "
		       "(%.1f%%): cistern x%.2f of it\n",
		       verdict(met, known), b0, b1, cis, 100 * cis / bound, busy,
		       100 * busy / bound, handoff, 100 * handoff / bound, cis / handoff,
		       busy / handoff, one, 100 * one / b1, handoff1, 100 * handoff1 / b1,
		       one / handoff1);
	}
	if (bench_section_enabled("4")) {
		double zc = med(g_bars.s4_zc), ga = med(g_bars.s4_gather);
		double zca = med(g_bars.s4_zc_any), gaa = med(g_bars.s4_gather_any);
		double zc2 = med(g_bars.s4_zc_two), ga2 = med(g_bars.s4_gather_two);
		double fzc = med(g_bars.s4_floor_zc), fga = med(g_bars.s4_floor_gather);
		double pzc = med(g_bars.s4_pass_zc), pga = med(g_bars.s4_pass_gather);
		double torch = max2(med(g_bars.s4_torch), med(g_bars.s4_torch_fixed)),
		       tr = med(g_bars.s4_torch);
		int known = !isnan(zc) && !isnan(ga) && !isnan(torch);
		printf("(4) zero-copy batches >= 10x and gathered >= 2x torch index_select: %s\n"
		       "    single reader: zero-copy %.2f k/s (x%.2f), gathered %.2f k/s (x%.2f); "
		       "any number "
		       "of readers: zero-copy %.2f k/s (x%.2f), gathered %.2f k/s (x%.2f); torch "
		       "(faster "
		       "variant) %.2f k/s\n"
		       "    no-library floors: touching each row x%.2f torch, copying each row "
		       "x%.2f; "
		       "cistern at %.0f%% and %.0f%% of them\n"
		       "    a pinning reader's passes with no library: in place x%.2f torch, "
		       "copied out "
		       "x%.2f; the single reader at %.0f%% and %.0f%% of them\n"
		       "    with a second reader attached: zero-copy %.2f k/s, gathered %.2f k/s; "
		       "the "
		       "single reader x%.2f and x%.2f of them\n"
		       "    torch drawing its indices each batch (randint + index_select, as "
		       "TorchRL's "
		       "random sampler does, and as cistern's batches draw theirs) %.2f k/s: the "
		       "single "
		       "reader x%.2f zero-copy and x%.2f gathered\n",
		       verdict(zc >= 10 * torch && ga >= 2 * torch, known), zc, zc / torch, ga,
		       ga / torch, zca, zca / torch, gaa, gaa / torch, torch, fzc / torch,
		       fga / torch, 100 * zc / fzc, 100 * ga / fga, pzc / torch, pga / torch,
		       100 * zc / pzc, 100 * ga / pga, zc2, ga2, zc / zc2, ga / ga2, tr, zc / tr,
		       ga / tr);
		double oga = med(g_bars.s4_opt_gather), oap = med(g_bars.s4_opt_apart),
		       owd = med(g_bars.s4_opt_words), grs = med(g_bars.s4_gather_rs);
		double low = ga < gaa ? ga : gaa;
		low = grs < low ? grs : low;
		int fknown = !isnan(ga) && !isnan(gaa) && !isnan(grs) && !isnan(fga);
		printf("(4b) gathered batches >= 0.9x the memcpy floor (the same random rows "
		       "copied, prefetched 16 ahead, no library): %s\n"
		       "    batch_reservoir single reader x%.2f, any number of readers x%.2f; "
		       "reservoir x%.2f\n"
		       "    with no library: a pinning reader's passes x%.2f, an optimistic "
		       "reader's x%.2f, with seen counts apart x%.2f,\n"
		       "    with words and seen counts apart from the rows x%.2f\n",
		       verdict(low >= 0.9 * fga, fknown), ga / fga, gaa / fga, grs / fga, pga / fga,
		       oga / fga, oap / fga, owd / fga);
	}
	if (bench_section_enabled("6")) {
		double v[3], lo = INFINITY, hi = -INFINITY;
		int known = 1;
		for (int i = 0; i < 3; i++) {
			v[i] = med(g_bars.s6_op[i]);
			known &= !isnan(v[i]);
			lo = v[i] < lo ? v[i] : lo;
			hi = v[i] > hi ? v[i] : hi;
		}
		printf("(6) put+get cost flat within 20%% from 1K to 1M slots: %s\n"
		       "    1K %.1f ns, 64K %.1f ns, 1M %.1f ns: max/min %.2f\n",
		       verdict(hi <= 1.2 * lo, known), v[0], v[1], v[2], hi / lo);
	}
	if (bench_section_enabled("7")) {
		double batch = med(g_bars.s7_cis_batch), one = med(g_bars.s7_cis_one),
		       queue = med(g_bars.s7_queue);
		int known = !isnan(batch) && !isnan(queue);
		double lo, hi;
		int q[] = {g_bars.s7_queue};
		double pb = paired(g_bars.s7_cis_batch, q, 1, &lo, &hi);
		printf("(7) Python, 4 KiB between two processes: cistern >= 20x "
		       "multiprocessing.Queue: %s\n"
		       "    cistern batch calls %.1f k samples/s (x%.2f; rep by rep x%.2f, "
		       "x%.2f-x%.2f), "
		       "one a call into a reused array %.1f k/s (x%.2f); multiprocessing.Queue "
		       "%.1f k/s\n",
		       verdict(batch >= 20 * queue, known), batch, batch / queue, pb, lo, hi, one,
		       one / queue, queue);
	}
	if (bench_section_enabled("8")) {
		static const char *const size_name[3] = {"64 B", "4 KiB", "1 MiB"};
		static const char *const unit[3] = {"k samples/s", "k samples/s", "samples/s"};
		int known = 1, met = 1;
		double q[3];
		for (int i = 0; i < 3; i++) {
			q[i] = med(g_bars.s8_ack[i]) / med(g_bars.s8_zmq[i]);
			known &= !isnan(q[i]);
			met &= q[i] >= 0.8;
		}
		printf("(8) remote puts over loopback TCP, acknowledged, >= 0.8x raw ZeroMQ "
		       "PUSH/PULL: %s\n",
		       verdict(met, known));
		for (int i = 0; i < 3; i++) {
			double lo, hi;
			int z[] = {g_bars.s8_zmq[i]};
			double pq = paired(g_bars.s8_ack[i], z, 1, &lo, &hi);
			printf("    %s: remote %.1f, raw ZeroMQ %.1f %s: x%.2f (rep by rep x%.2f, "
			       "x%.2f-x%.2f)\n",
			       size_name[i], med(g_bars.s8_ack[i]), med(g_bars.s8_zmq[i]), unit[i],
			       q[i], pq, lo, hi);
		}
	}
	fflush(stdout);
}
