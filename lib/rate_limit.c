/* SPDX-License-Identifier: MIT */
/*
 * rate_limit.c - the reservoirs' rate limiter (reads_per_put, rate_slack):
 * how many reads the puts so far allow, and how many puts the reads allow.
 */
#include "reservoir.h"

/*
 * The rate limiter compares reads with the puts made after the first
 * `watermark` ones (the fill that reads wait for anyway, as Reverb's
 * min_size_to_sample): readers wait while reads would exceed
 * reads_per_put * puts_after_fill + slack, producers while
 * reads_per_put * puts_after_fill would exceed reads + slack.
 */
static double puts_after_fill(const struct cistern *c, uint64_t extra)
{
	uint64_t p = atomic_load_explicit(&c->hdr->rl_puts, memory_order_seq_cst) + extra;
	uint64_t w = c->fixed.watermark;
	return p > w ? (double)(p - w) : 0.0;
}

bool rs_rate_allows_read(struct cistern *c, uint64_t n)
{
	const struct cistern_fixed *f = &c->fixed;
	if (f->reads_per_put <= 0 || rs_closed(c))
		return true;
	double gets = (double)atomic_load_explicit(&c->hdr->rl_gets, memory_order_seq_cst);
	return gets + (double)n <= f->reads_per_put * puts_after_fill(c, 0) + f->rate_slack;
}

bool rs_rate_allows_put(struct cistern *c)
{
	const struct cistern_fixed *f = &c->fixed;
	if (f->reads_per_put <= 0)
		return true;
	double gets = (double)atomic_load_explicit(&c->hdr->rl_gets, memory_order_seq_cst);
	return f->reads_per_put * puts_after_fill(c, 1) <= gets + f->rate_slack;
}

void rs_rate_count_reads(struct cistern *c, uint64_t n)
{
	if (c->fixed.reads_per_put > 0) {
		atomic_fetch_add_explicit(&c->hdr->rl_gets, n, memory_order_seq_cst);
		cistern__wake_producers(c);
	}
}
