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
 *
 * Progress. The slack above settles the case where both sides wait for the
 * limiter: they cannot. The limiter must also never hold one side back while
 * the other waits on it for something else, or the two wait for each other:
 *  - a producer admitted by the limiter may find no slot it may take (a full
 *    FIFOEvictReservoir whose oldest sample nobody read, a full reservoir
 *    whose read samples are all pinned or were handed back by a dead
 *    reader's reclaim): it waits for a read, and reads must be let through;
 *  - a reader admitted by the limiter may find too few samples to draw (a
 *    hole left by a dead producer under the watermark): it waits for a put,
 *    and puts must be let through.
 * So the rule is: the limiter holds nobody back while anybody waits for the
 * other side for something other than the limiter. Such a waiter sets its
 * attachment's bit in hdr->rl_stuck[0] (a producer) or [1] (a reader)
 * (cistern__rs_rate_stuck) and wakes the other side; a read the budget
 * refuses passes while a bit of [0] is set, a put while one of [1] is, and
 * each counts as usual (the counts stay every read and every put). A bit is
 * cleared by the owner's next put or read, by the end of a call of it that
 * slept (a timeout: it no longer waits), and by the reclaim of its entry,
 * dead or detached (cistern__rate_forget); a dead owner's bit, until then,
 * only lets the others pass, which cannot wedge anyone. Every read also
 * clears [0] and wakes the producers: a put waiting for a read earns reads
 * one look at a time (it marks itself again, and wakes the readers, if the
 * reads so far did not give it a slot), so that reads run ahead of the
 * ratio only by what the producers' looks need. No count is kept of the
 * bits, so no death between two steps can leave one wrong.
 *
 * Reads given back. A read the limiter counted is taken back from rl_gets
 * where its seen count is taken back: a sample handed back unread
 * (cistern_unacquire()) and the pins of a reader that detached or died
 * holding them (cistern__drop_pins), so that the limiter's reads are the
 * reads the buffer's seen counts remember. Deaths can still leave rl_gets
 * off by the reads of a batch being drawn; by the rule above that only
 * moves the drift, it never stops both sides.
 */
#include "core/open.h"
#include "policy/reservoir/reservoir.h"
#include "core/wait.h"
#include "cistern/admin.h"

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

const struct cistern__limiter cistern__rate_limiter = {
	.refuses = cistern__rate_refuses,
	.grant = cistern__rate_grant,
};

bool cistern__rate_admits(const struct cistern_config *cfg, uint64_t n)
{
	if (!(cfg->reads_per_put > 0 && cfg->rate_slack > 0))
		return true; /* off, or automatic */
	return cistern__rate_grant(cfg->reads_per_put, cfg->rate_slack) >= n;
}

/*
 * Is any attachment waiting for the other side for something other than the
 * limiter? [rate-stuck] seq_cst loads: against the marker's seq_cst RMW,
 * which comes before its wake of our side; we load after registering as a
 * waiter, so either we see the bit or its wake finds us registered.
 */
static bool anyone_stuck(const struct cistern *c, int side)
{
	uint64_t words = (c->fixed.procs_count + 63) / 64;
	for (uint64_t i = 0; i < words; i++)
		if (atomic_load_explicit(&c->hdr->rl_stuck[side][i], memory_order_seq_cst))
			return true;
	return false;
}

/*
 * A read was made: the producers waiting for one look again. [rate-stuck]
 * seq_cst RMWs, before the caller's wake of the producers, which re-mark
 * themselves before they wait if they still find no slot.
 */
static void clear_producer_marks(struct cistern *c)
{
	uint64_t words = (c->fixed.procs_count + 63) / 64;
	for (uint64_t i = 0; i < words; i++)
		if (atomic_load_explicit(&c->hdr->rl_stuck[0][i], memory_order_seq_cst))
			atomic_exchange_explicit(&c->hdr->rl_stuck[0][i], 0, memory_order_seq_cst);
}

bool cistern__rs_rate_take(struct cistern *c, uint64_t n, uint64_t *taken)
{
	struct cistern_hdr *h = c->hdr;
	const struct cistern_fixed *f = &c->fixed;
	*taken = 0;
	if (f->reads_per_put <= 0 || cistern__rs_closed(c))
		return true;
	double slack = read_slack(f, n);
	bool pass = false;
	/*
	 * [rate-budget] seq_cst: the load and the CAS are ordered with the producers' loads
	 * of rl_gets and their increments of rl_puts (cistern__rs_commit), so a reader
	 * that fails here and a producer that then puts see each other's
	 * counts, and the commit's wake finds the reader registered (wait.c).
	 */
	uint64_t gets = atomic_load_explicit(&h->rl_gets, memory_order_seq_cst);
	do {
		if (!pass &&
		    (double)(gets + n) > f->reads_per_put * puts_after_fill(c, 0) + slack) {
			/* Over budget: pass only while a producer waits for a read (top of the file). */
			if (!anyone_stuck(c, 0))
				return false;
			pass = true;
		}
	} while (!atomic_compare_exchange_weak_explicit(
		&h->rl_gets, &gets, gets + n, memory_order_seq_cst, memory_order_seq_cst));
	*taken = n;
	return true;
}

/* rl_gets -= n, never below 0. [rate-budget] seq_cst, as the take. */
static void give_back(struct cistern_hdr *h, uint64_t n)
{
	uint64_t gets = atomic_load_explicit(&h->rl_gets, memory_order_seq_cst);
	while (!atomic_compare_exchange_weak_explicit(&h->rl_gets, &gets, gets > n ? gets - n : 0,
						      memory_order_seq_cst, memory_order_seq_cst))
		;
}

void cistern__rs_rate_settle(struct cistern *c, uint64_t taken, uint64_t got)
{
	struct cistern_hdr *h = c->hdr;
	if (taken == 0)
		return;
	if (got < taken) {
		give_back(h, taken - got);
		cistern__wake_readers(c); /* a reader may wait for the budget given back */
	}
	if (got > 0) {
		if (cistern__rs(c)->rl_marked)
			cistern__rate_unmark(c); /* it read: it waits no more */
		clear_producer_marks(c);
		cistern__wake_producers(c); /* the reads made are budget for puts, or a slot */
	}
}

void cistern__rate_give_back(struct cistern *c, uint64_t n)
{
	if (c->fixed.reads_per_put <= 0 || n == 0)
		return;
	give_back(c->hdr, n);
	cistern__wake_readers(c);
}

bool cistern__rs_rate_allows_put(struct cistern *c)
{
	const struct cistern_fixed *f = &c->fixed;
	if (f->reads_per_put <= 0)
		return true;
	/* [rate-budget] seq_cst, see cistern__rs_rate_take(). */
	double gets = (double)atomic_load_explicit(&c->hdr->rl_gets, memory_order_seq_cst);
	if (f->reads_per_put * puts_after_fill(c, 1) <= gets + put_slack(f))
		return true;
	/* Over budget: pass only while a reader waits for a put (top of the file). */
	return anyone_stuck(c, 1);
}

void cistern__rs_rate_stuck(struct cistern *c, bool producer)
{
	if (c->fixed.reads_per_put <= 0 || !c->owner)
		return;
	uint32_t e = c->owner - 1;
	cistern__rs(c)->rl_marked = true;
	/*
	 * Each time, even if marked before: a read may have cleared a
	 * producer's mark since. [rate-stuck] seq_cst RMW, before the wake's
	 * seq_cst look at the waiters ([wait-register]).
	 */
	atomic_fetch_or_explicit(&c->hdr->rl_stuck[producer ? 0 : 1][e / 64],
				 UINT64_C(1) << (e % 64), memory_order_seq_cst);
	if (producer)
		cistern__wake_readers(c);
	else
		cistern__wake_producers(c);
}

void cistern__rate_forget(struct cistern *c, uint32_t owner)
{
	if (c->fixed.reads_per_put <= 0 || owner == 0 || owner > c->fixed.procs_count)
		return;
	uint32_t e = owner - 1;
	/*
	 * [rate-stuck] seq_cst RMW. Clearing a bit only holds the others back
	 * again, which no one waits for, so no wake is owed.
	 */
	for (int side = 0; side < 2; side++)
		atomic_fetch_and_explicit(&c->hdr->rl_stuck[side][e / 64],
					  ~(UINT64_C(1) << (e % 64)), memory_order_seq_cst);
	if (owner == c->owner)
		cistern__rs(c)->rl_marked = false;
}

void cistern__rate_unmark(struct cistern *c)
{
	cistern__rate_forget(c, c->owner);
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
