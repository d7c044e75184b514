/* SPDX-License-Identifier: MIT */
/*
 * rate_limit.c - the reservoirs' rate limiter (reads_per_put, rate_slack):
 * how many reads the puts so far allow, and how many puts the reads allow.
 *
 * The limiter compares reads with the puts made after the first `watermark`
 * ones (the fill that reads wait for anyway, as Reverb's min_size_to_sample).
 * Call d = reads_per_put * puts_after_fill - reads the drift. A producer may
 * put while d + reads_per_put <= slack; a read of n samples may start while
 * reads + n <= reads_per_put * puts_after_fill + slack, i.e. d >= n - slack.
 *
 * A read that can never start. Producers stop for good once d is above
 * slack - reads_per_put (readers alone then move d, and only down). A read of
 * n must still be able to start there, or it waits for ever, and so does
 * every producer behind it: with the slack at reads_per_put and a batch of
 * 16 at two reads per put, the producers stop two reads ahead and the batch
 * waits for sixteen. Hence two rules:
 *  - rate_slack left 0 (automatic): producers use reads_per_put, and a read
 *    of n uses the larger of reads_per_put and n, so that it starts once the
 *    reads before it are paid for (d >= 0), which stopped producers always
 *    leave. Every read can start.
 *  - rate_slack set: it is kept on both sides, and a read larger than
 *    cistern__rate_grant() says is refused at once (-EDEADLK) instead of
 *    waiting; create refuses a slack that could not admit even the policy's
 *    own read (one sample, a pair, a batch of batch_size).
 *
 * Admission is whole and atomic: a read takes its n reads of budget in one
 * compare-and-swap on rl_gets (cistern__rs_rate_take) before it draws, so that
 * several readers cannot all pass on the same budget, and no reader holds a
 * part of a budget while it waits for the rest (which would let two batch
 * readers starve each other). A draw that comes back short gives the reads
 * it did not make back (cistern__rs_rate_settle).
 */
#include "open.h"
#include "reservoir.h"
#include "wait.h"

static double puts_after_fill(const struct cistern *c, uint64_t extra)
{
	/* [rate-budget] seq_cst, see cistern__rs_rate_take(). */
	uint64_t p = atomic_load_explicit(&c->hdr->rl_puts, memory_order_seq_cst) + extra;
	uint64_t w = c->fixed.watermark;
	return p > w ? (double)(p - w) : 0.0;
}

/* The slack of a read of n samples and of a put (see the top of the file). */
static double read_slack(const struct cistern_fixed *f, uint64_t n)
{
	if (f->rate_slack > 0)
		return f->rate_slack;
	return (double)n > f->reads_per_put ? (double)n : f->reads_per_put;
}

static double put_slack(const struct cistern_fixed *f)
{
	return f->rate_slack > 0 ? f->rate_slack : f->reads_per_put;
}

/* floor(), without libm: exact for every double (those from 2^52 up are whole). */
static double whole_below(double x)
{
	if (!(x > -0x1p52 && x < 0x1p52))
		return x;
	double t = (double)(int64_t)x; /* towards zero */
	return t > x ? t - 1 : t;
}

uint64_t cistern__rate_grant(double reads_per_put, double slack)
{
	/*
	 * The smallest drift at which producers are stopped: the least value d
	 * can take above slack - reads_per_put. d moves by reads_per_put per
	 * put and by whole reads, so with reads_per_put = p / 2^k (k small:
	 * 2, 0.5, 0.25, 1.5 ...) it is always a multiple of 2^-k, computed
	 * exactly; otherwise it comes as close to that edge as it likes, and a
	 * millionth of a read keeps rounding on the safe side. Reads are taken
	 * one by one here: where they only come in pairs or batches, d moves
	 * in coarser steps and a slightly smaller slack would do, but the
	 * answer stays safe.
	 */
	double edge = slack - reads_per_put, least = edge + 1e-6;
	for (int k = 0; k <= 20; k++) {
		double scale = (double)(UINT32_C(1) << k); /* products by it are exact */
		if (reads_per_put * scale == whole_below(reads_per_put * scale)) {
			least = (whole_below(edge * scale) + 1) / scale;
			break;
		}
	}
	double most = whole_below(least + slack);
	return most < 1 ? 0 : most >= 0x1p63 ? UINT64_C(1) << 63 : (uint64_t)most;
}

int cistern__rate_refuses(const struct cistern_fixed *f, uint64_t n)
{
	if (f->reads_per_put <= 0 || f->rate_slack <= 0)
		return 0; /* off, or automatic: every read can start */
	if (cistern__policy_of(f->policy)->reads_whole_batches)
		return 0; /* it reads batch_size or nothing (-EINVAL), and create checked that */
	return n > cistern__rate_grant(f->reads_per_put, f->rate_slack) ? -EDEADLK : 0;
}

bool cistern__rate_admits(const struct cistern_config *cfg, uint64_t n)
{
	if (!(cfg->reads_per_put > 0 && cfg->rate_slack > 0))
		return true; /* off, or automatic */
	return cistern__rate_grant(cfg->reads_per_put, cfg->rate_slack) >= n;
}

bool cistern__rs_rate_take(struct cistern *c, uint64_t n, uint64_t *taken)
{
	struct cistern_hdr *h = c->hdr;
	const struct cistern_fixed *f = &c->fixed;
	*taken = 0;
	if (f->reads_per_put <= 0 || cistern__rs_closed(c))
		return true;
	double slack = read_slack(f, n);
	/*
	 * [rate-budget] seq_cst: the load and the CAS are ordered with the producers' loads
	 * of rl_gets and their increments of rl_puts (cistern__rs_commit), so a reader
	 * that fails here and a producer that then puts see each other's
	 * counts, and the commit's wake finds the reader registered (wait.c).
	 */
	uint64_t gets = atomic_load_explicit(&h->rl_gets, memory_order_seq_cst);
	do {
		if ((double)(gets + n) > f->reads_per_put * puts_after_fill(c, 0) + slack)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(
		&h->rl_gets, &gets, gets + n, memory_order_seq_cst, memory_order_seq_cst));
	*taken = n;
	return true;
}

void cistern__rs_rate_settle(struct cistern *c, uint64_t taken, uint64_t got)
{
	struct cistern_hdr *h = c->hdr;
	if (taken == 0)
		return;
	if (got < taken) {
		/* [rate-budget] as the take; a reader may wait for the budget given back. */
		atomic_fetch_sub_explicit(&h->rl_gets, taken - got, memory_order_seq_cst);
		cistern__wake_readers(c);
	}
	if (got > 0)
		cistern__wake_producers(c); /* the reads made are budget for puts */
}

bool cistern__rs_rate_allows_put(struct cistern *c)
{
	const struct cistern_fixed *f = &c->fixed;
	if (f->reads_per_put <= 0)
		return true;
	/* [rate-budget] seq_cst, see cistern__rs_rate_take(). */
	double gets = (double)atomic_load_explicit(&c->hdr->rl_gets, memory_order_seq_cst);
	return f->reads_per_put * puts_after_fill(c, 1) <= gets + put_slack(f);
}

int cistern_rate_get(const struct cistern *c, struct cistern_rate *out)
{
	if (!c || !out)
		return -EINVAL;
	if (c->inherited)
		return -EBADF;
	const struct cistern_fixed *f = &c->fixed;
	if (f->reads_per_put <= 0)
		return -ENODATA;
	/* Another user's object is read through a copy: bring it up to date. */
	int r = cistern__refresh(c, CISTERN__COPY_TABLES);
	if (r < 0)
		return r;
	/*
	 * Relaxed: a look for monitoring, as cistern_stats_get()'s; nothing is
	 * read through these counts, and each is taken alone while producers
	 * and readers move them.
	 */
	uint64_t puts = atomic_load_explicit(&c->hdr->rl_puts, memory_order_relaxed);
	uint64_t reads = atomic_load_explicit(&c->hdr->rl_gets, memory_order_relaxed);
	double after_fill = puts > f->watermark ? (double)(puts - f->watermark) : 0.0;
	out->puts = puts;
	out->reads = reads;
	out->read_budget = f->reads_per_put * after_fill + read_slack(f, 1) - (double)reads;
	return 0;
}
