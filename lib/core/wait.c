/* SPDX-License-Identifier: MIT */
/*
 * wait.c - sleeping until data or room appears, with futexes in the segment.
 *
 * The protocol is a Dekker handshake between a sleeper and a waker, on two
 * words per direction (readers waiting for data shown; producers waiting for
 * room are the mirror image on space_futex / producers_waiting):
 *
 *   sleeper                                 waker (a producer)
 *   readers_waiting += 1        (seq_cst)   publish the sample    (seq_cst)
 *   seq = data_futex                        if readers_waiting != 0 (seq_cst):
 *   re-check for data           (seq_cst)       data_futex += 1
 *   futex_wait(data_futex, seq)                 futex_wake(data_futex, all)
 *
 * Both sides' first step is seq_cst, so in the single total order either the
 * waker sees the sleeper registered (and bumps the word, which makes a late
 * futex_wait return at once) or the sleeper's re-check sees the sample. The
 * waker's fast path is one load of a word that only changes when someone
 * starts or stops waiting, so it stays shared in every cache: no system call
 * and no cache-line transfer while nobody sleeps. Labels: [wait-register]
 * is this Dekker pair (the waiting count against the published state),
 * [wake-seq] the bump of the futex word against the sleeper's read of it,
 * [wake-barrier] the membarrier (sys/fence.h) that stands in for the waker's fence.
 *
 * The FIFO's commits and releases, the hottest wakers, skip the store-load
 * fence their first step would need (cistern__publish_word): a processor may
 * read readers_waiting before its store of the sample leaves its store
 * buffer. The sleeper makes up for it: between registering and re-checking it
 * issues a global expedited membarrier, a full barrier on every CPU running a
 * process that registered for it (every handle that publishes light does, in
 * cistern__register_light_wakes). At that barrier a waker either has not yet
 * read readers_waiting (so it reads it afterwards and sees the registration)
 * or has, and then its earlier store is visible before the membarrier returns
 * (so the re-check sees it). The waker pays nothing; the sleeper pays a
 * system call on its way to sleep. A sleeper that cannot issue the membarrier
 * sleeps at most CISTERN_UNFENCED_SLEEP_MS at a time instead.
 *
 * A sleeper wakes up at least every CISTERN_SWEEP_MS to look for attachments
 * whose owners died holding what it waits for, so a crash never wedges it.
 *
 * Before sleeping a waiter spins, pausing between looks, because the other
 * side usually runs on another CPU and is about to make progress. Where the
 * one process it waits for shares its CPU (processes pinned together, or
 * more busy processes than CPUs), pausing only keeps that process from
 * running: such a waiter yields at every round instead (counterpart_here()).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/roles.h"
#include "core/wait.h"
#include "core/open.h"
#include "core/liveness.h"
#include "core/policy.h"
#include "sys/clock.h"
#include "sys/fence.h"
#include "sys/futex.h"

#define CISTERN_SWEEP_MS 200
#define CISTERN_SPIN_ROUNDS 16
/*
 * Pauses per spin round: the usual, and where a starved reader starts
 * (doubling up to the usual). A waiter's pace is CISTERN_SPIN_USUAL once it
 * spins the usual rounds.
 */
#define CISTERN_SPIN_PACE 64
#define CISTERN_SPIN_PACE_MIN 4
#define CISTERN_SPIN_USUAL (CISTERN_SPIN_PACE + 1)
/*
 * At most this many pauses per round for a reader that caught up with a
 * producer running ahead of it (it took more than one sample since its
 * last wait; see ahead_round()).
 */
#define CISTERN_SPIN_AHEAD_MAX 512
#define CISTERN_UNFENCED_SLEEP_MS 1

void cistern__wake_futex(_Atomic uint32_t *word)
{
	/* [wake-seq] seq_cst: a sleeper that reads the word after this sees the bump. */
	atomic_fetch_add_explicit(word, 1, memory_order_seq_cst);
	cistern__futex_wake(word);
}

void cistern__forget_waiter(struct cistern_hdr *h, struct cistern_proc *p)
{
	/* Relaxed: a count left high costs wakers a futex call, never a lost wake. */
	uint32_t k = atomic_exchange_explicit(&p->waiting, 0, memory_order_relaxed);
	if (k == 1 + CISTERN_WAIT_DATA)
		atomic_fetch_sub_explicit(&h->readers_waiting, 1, memory_order_relaxed);
	else if (k == 1 + CISTERN_WAIT_SPACE)
		atomic_fetch_sub_explicit(&h->producers_waiting, 1, memory_order_relaxed);
}

void cistern__wake_all(struct cistern_hdr *h)
{
	/* Unconditional: used after reclaim and close, which are rare. [wake-seq] */
	atomic_fetch_add_explicit(&h->data_futex, 1, memory_order_seq_cst);
	cistern__futex_wake(&h->data_futex);
	atomic_fetch_add_explicit(&h->space_futex, 1, memory_order_seq_cst);
	cistern__futex_wake(&h->space_futex);
}

void cistern__wait_init(struct cistern_waiter *w, enum cistern_wait_kind kind, int timeout_ms)
{
	w->kind = kind;
	w->timeout_ms = timeout_ms;
	w->registered = false;
	w->fenced = false;
	w->spins = 0;
	w->pace = 0;
	w->here = false;
	w->seq = 0;
	w->start_ns = 0;
	w->deadline_ns = 0;
	w->next_sweep_ns = 0;
}

static void words(struct cistern *c, enum cistern_wait_kind kind, _Atomic uint32_t **word,
		  _Atomic uint32_t **waiting)
{
	if (kind == CISTERN_WAIT_DATA) {
		*word = &c->hdr->data_futex;
		*waiting = &c->hdr->readers_waiting;
	} else {
		*word = &c->hdr->space_futex;
		*waiting = &c->hdr->producers_waiting;
	}
}

/*
 * Whether this wait is a reader's that took only the sample its last wait
 * ended with: data comes one sample at a time (a request and its answer, or
 * a producer slower than us), so the next one is likely a cache-line trip
 * away, and a round of 64 pauses (over a microsecond) would only add to the
 * latency. A reader that found more has a producer running ahead of it, and
 * is better off leaving it alone for whole rounds: the producer fills
 * several slots undisturbed, which the reader then takes in a row.
 * Relaxed: the counter is ours (only this handle writes it).
 */
static bool starved(const struct cistern *c, const struct cistern_waiter *w)
{
	if (w->kind != CISTERN_WAIT_DATA || !c->me)
		return false;
	return atomic_load_explicit(&c->me->ctr.gets, memory_order_relaxed) == c->gets_at_wait;
}

/*
 * Pauses per usual round of a reader that is not starved: the longer it
 * leaves the producer alone, the more slots the producer fills without the
 * reader's looks taking away the line it writes next, and the more the
 * reader then takes in a row (of the round lengths tried between
 * processes, the longest did best). Half the slot count at most, so that a
 * producer that puts no faster than a sample per pause (a pause takes about
 * as long as the fastest puts) does not fill the ring and wait while the
 * reader is away; never fewer than everyone else's rounds.
 */
static uint32_t ahead_round(const struct cistern *c)
{
	uint64_t half = c->slot_count / 2;
	if (half < CISTERN_SPIN_PACE)
		return CISTERN_SPIN_PACE;
	return half < CISTERN_SPIN_AHEAD_MAX ? (uint32_t)half : CISTERN_SPIN_AHEAD_MAX;
}

/*
 * Whether the one process this wait depends on last began a wait on the CPU
 * we are on now; records our CPU for its waits to compare. Only where one
 * handle holds the other side's role (CISTERN_SINGLE_* or the automatic
 * roles, roles.c): with several, any of them may be the one to move. Relaxed
 * throughout: a hint, which a stale value turns into the pauses of a
 * waiter on another CPU or a yield that returns at once, never a lost wake.
 */
static bool counterpart_here(struct cistern *c, enum cistern_wait_kind kind)
{
	int cpu = sched_getcpu();
	if (cpu < 0 || !c->me)
		return false;
	atomic_store_explicit(&c->me->wait_cpu, (uint32_t)cpu + 1, memory_order_relaxed);
	uint32_t o = cistern__lone_holder(c, kind == CISTERN_WAIT_DATA ? CISTERN_ROLE_PRODUCER
								       : CISTERN_ROLE_READER);
	if (o == 0 || o == c->owner)
		return false;
	const struct cistern_proc *p = &cistern__procs(c)[o - 1];
	return atomic_load_explicit(&p->wait_cpu, memory_order_relaxed) == (uint32_t)cpu + 1;
}

int cistern__wait(struct cistern *c, struct cistern_waiter *w)
{
	_Atomic uint32_t *word, *waiting;
	words(c, w->kind, &word, &waiting);

	if (w->timeout_ms == 0)
		return -EAGAIN;
	/*
	 * Spin briefly first: the other side is usually a few hundred
	 * nanoseconds from making progress, and a sleep and wake cost
	 * microseconds on both sides. Yielding lets a preempted peer that holds
	 * the position we wait on run when processes outnumber cores. A
	 * starved reader (see starved()) looks again after 4, 8, 16 and 32
	 * pauses and yields once before the usual rounds of 64: a wait for data
	 * that comes one sample at a time ends up to a microsecond sooner, and
	 * a producer on the same CPU gets it sooner, while a reader that
	 * catches up with a faster producer keeps long rounds (it found more
	 * than one sample last time, so it is not starved), longer still than
	 * the usual (ahead_round()).
	 */
	if (w->spins < CISTERN_SPIN_ROUNDS) {
		if (w->pace == 0) {
			w->here = counterpart_here(c, w->kind);
			c->cpu_shared_waits += w->here;
			bool short_rounds = !w->here && starved(c, w);
			w->pace = short_rounds ? CISTERN_SPIN_PACE_MIN : CISTERN_SPIN_USUAL;
			w->round = w->kind == CISTERN_WAIT_DATA && !short_rounds
					   ? ahead_round(c)
					   : CISTERN_SPIN_PACE;
		}
		if (w->here) {
			/* It cannot move until we give the CPU up. */
			w->spins++;
			sched_yield();
			return 0;
		}
		if (w->pace < CISTERN_SPIN_USUAL) {
			/*
			 * A starved reader's rounds before the usual ones: 4, 8,
			 * 16 and 32 pauses, then a yield, in case what we wait
			 * for comes from a process that shares our CPU.
			 */
			if (w->pace == CISTERN_SPIN_PACE) {
				sched_yield();
				w->pace = CISTERN_SPIN_USUAL;
			} else {
				for (uint32_t i = 0; i < w->pace; i++)
					cistern__cpu_relax();
				w->pace *= 2;
			}
			return 0;
		}
		w->spins++;
		if (w->spins % 4 == 0) {
			sched_yield();
		} else {
			for (uint32_t i = 0; i < w->round; i++)
				cistern__cpu_relax();
		}
		return 0;
	}
	int64_t now = cistern__now_ns(CLOCK_MONOTONIC);
	if (!w->registered) {
		/* First failure: register, then let the caller re-check once. */
		w->registered = true;
		w->start_ns = now;
		w->deadline_ns = w->timeout_ms < 0 ? INT64_MAX
						   : now + (int64_t)w->timeout_ms * 1000000;
		/*
		 * The sweeps' schedule is the handle's, not this wait's: a caller
		 * that waits in slices shorter than CISTERN_SWEEP_MS (the Python
		 * binding, to look for signals) still sweeps every
		 * CISTERN_SWEEP_MS, instead of timing out each slice before its
		 * first sweep. A handle that has not waited for a while sweeps at
		 * once, at most one sweep per CISTERN_SWEEP_MS.
		 */
		w->next_sweep_ns = c->sweep_due_ns;
		if (w->next_sweep_ns > now + (int64_t)CISTERN_SWEEP_MS * 1000000)
			w->next_sweep_ns = now + (int64_t)CISTERN_SWEEP_MS * 1000000;
		/*
		 * [wait-register] seq_cst: a waker sees us, or our re-check sees its
		 * publish (a FIFO's [wake-data] or [wake-space], a reservoir's unpin).
		 */
		atomic_fetch_add_explicit(waiting, 1, memory_order_seq_cst);
		/* After the increment: a reclaim of a dead sleeper undoes only what was done. */
		if (c->me)
			atomic_store_explicit(&c->me->waiting, 1 + w->kind, memory_order_relaxed);
		/* [wake-barrier] the heavy half of the asymmetric fence; then [wake-seq]. */
		w->fenced = cistern__fence_others();
		w->seq = atomic_load_explicit(word, memory_order_seq_cst);
		return 0;
	}
	if (now >= w->deadline_ns)
		return -ETIMEDOUT;
	if (now >= w->next_sweep_ns) {
		w->next_sweep_ns = now + (int64_t)CISTERN_SWEEP_MS * 1000000;
		c->sweep_due_ns = w->next_sweep_ns;
		if (c->owner && cistern__sweep(c) > 0) {
			/* [wake-seq] read again: the sweep's reclaims bumped it. */
			w->seq = atomic_load_explicit(word, memory_order_seq_cst);
			return 0;
		}
	}
	int64_t slice = w->next_sweep_ns - now;
	if (w->deadline_ns - now < slice)
		slice = w->deadline_ns - now;
	if (!w->fenced && slice > (int64_t)CISTERN_UNFENCED_SLEEP_MS * 1000000)
		slice = (int64_t)CISTERN_UNFENCED_SLEEP_MS * 1000000; /* a wake may be lost */
	cistern__futex_wait(word, w->seq, slice);
	/* [wake-seq] whatever woke us (wake, timeout, signal), read the word before re-checking. */
	w->seq = atomic_load_explicit(word, memory_order_seq_cst);
	return 0;
}

void cistern__wait_done(struct cistern *c, struct cistern_waiter *w)
{
	if (w->pace && w->kind == CISTERN_WAIT_DATA && c->me)
		c->gets_at_wait = atomic_load_explicit(&c->me->ctr.gets, memory_order_relaxed);
	if (!w->registered)
		return;
	_Atomic uint32_t *word, *waiting;
	words(c, w->kind, &word, &waiting);
	if (c->me)
		atomic_store_explicit(&c->me->waiting, 0, memory_order_relaxed);
	/*
	 * A call that slept ends: it waits for the other side no more
	 * (rate_limit.c). The policy knows whether it marked anything; a
	 * clear of a mark not set changes nothing.
	 */
	if (c->policy->forget)
		c->policy->forget(c, c->owner);
	/* Relaxed: a waker that still sees us only makes a futex call it could skip. */
	atomic_fetch_sub_explicit(waiting, 1, memory_order_relaxed);
	int64_t waited = cistern__now_ns(CLOCK_MONOTONIC) - w->start_ns;
	if (c->me) {
		struct cistern_counters *ctr = &c->me->ctr;
		if (w->kind == CISTERN_WAIT_DATA) {
			cistern__count(&ctr->reader_waits, 1);
			cistern__count(&ctr->reader_wait_ns, (uint64_t)waited);
		} else {
			cistern__count(&ctr->producer_waits, 1);
			cistern__count(&ctr->producer_wait_ns, (uint64_t)waited);
		}
	}
	w->registered = false;
}
