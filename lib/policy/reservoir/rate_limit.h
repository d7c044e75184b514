/* SPDX-License-Identifier: MIT */
/*
 * rate_limit.h - the rate limiter of the reservoir policies (rate_limit.c)
 * (internal).
 */
#ifndef CISTERN_RATE_LIMIT_H
#define CISTERN_RATE_LIMIT_H

#include "policy/reservoir/state.h"
#include "core/policy.h"

/*
 * the largest read (in samples) that a rate limiter with this
 * reads_per_put and a rate_slack set by hand always admits in the end, and
 * -EDEADLK if a read of n on this segment never could be (0 otherwise).
 */
uint64_t cistern__rate_grant(double reads_per_put, double slack);
int cistern__rate_refuses(const struct cistern_fixed *f, uint64_t n);
/*
 * whether a config's rate limiter (off, automatic, or with a
 * rate_slack set by hand) admits a read of n samples in the end.
 */
bool cistern__rate_admits(const struct cistern_config *cfg, uint64_t n);
/* The two above, for the descriptors of the policies it limits (limiter). */
extern const struct cistern__limiter cistern__rate_limiter;
/*
 * clear attachment `owner`'s mark in hdr->rl_stuck (it waits for
 * the other side no more: it detached, died, or its call ended), and this
 * handle's own (cistern__rate_unmark, when its state says it marked). No-ops without the
 * limiter.
 */
void cistern__rate_forget(struct cistern *c, uint32_t owner);
void cistern__rate_unmark(struct cistern *c);
/* n reads the limiter counted were taken back (seen counts lowered). */
void cistern__rate_give_back(struct cistern *c, uint64_t n);

/*
 * Admit a read of n against the limiter's budget, all or
 * nothing: true if it may start (*taken reads then count, 0 when the
 * limiter is off or reception closed), false to wait.
 */
bool cistern__rs_rate_take(struct cistern *c, uint64_t n, uint64_t *taken);
/* The read admitted with `taken` made `got` reads: give back the rest, wake who may go on. */
void cistern__rs_rate_settle(struct cistern *c, uint64_t taken, uint64_t got);
/* May a producer put one more? */
bool cistern__rs_rate_allows_put(struct cistern *c);
/*
 * This handle waits for the other side for something other than the limiter
 * (a producer admitted by it found no slot it may take, a reader found too
 * few samples): mark it, so that the limiter lets the other side through, and
 * wake that side. Cleared as rate_limit.c says.
 */
void cistern__rs_rate_stuck(struct cistern *c, bool producer);

#endif
