/* SPDX-License-Identifier: MIT */
/*
 * roles.c - the single-producer and single-reader roles of a segment created
 * with CISTERN_SINGLE_PRODUCER (FIFO) or CISTERN_SINGLE_READER (FIFO and the
 * reservoirs), and the automatic roles of a segment created without them
 * (further down).
 *
 * hdr->sole_producer (sole_reader) holds the owner (attachment index + 1) of
 * the handle that has the role, or 0. A handle takes it with a CAS from 0 on
 * its first reserve (read) and keeps it until its entry is reclaimed, by its
 * own detach or after its death; reclaim_entry() gives the role back after
 * the slot walk that cleans up the holder's slots, so the next holder never
 * meets a slot the previous one still owns.
 *
 * What the role buys is in fifo.c: while only one handle may move the tail
 * (head), it claims slots and moves the index with plain stores; and, for
 * the reservoirs, in pins.c and reservoir_read.c: the one reader is the only
 * writer of the pins words and of the seen counts of held samples, so it
 * pins and counts with plain stores and fences once per batch.
 */
#include <errno.h>
#include <time.h>

#include "core/roles.h"
#include "core/wait.h"
#include "core/open.h"
#include "core/liveness.h"
#include "core/policy.h"

static _Atomic uint32_t *holder_of(struct cistern_hdr *h, uint32_t role)
{
	return role == CISTERN_ROLE_PRODUCER ? &h->sole_producer : &h->sole_reader;
}

static bool role_is_sole(const struct cistern *c, uint32_t role)
{
	if (role == CISTERN_ROLE_PRODUCER)
		return c->fixed.flags & CISTERN_SINGLE_PRODUCER;
	if (role == CISTERN_ROLE_READER)
		return c->fixed.flags & CISTERN_SINGLE_READER;
	return false;
}

/*
 * How long a handle waits for the reclaim of a dead holder that someone else
 * is doing (a sweeper, or the holder's own detach) before it answers -EBUSY:
 * a reclaim walks every slot, tens of milliseconds at a million slots.
 */
#define SOLE_TAKEOVER_ROUNDS 1000 /* of 1 ms */

int cistern__take_sole(struct cistern *c, uint32_t role)
{
	struct cistern_hdr *h = c->hdr;
	if (!role_is_sole(c, role))
		return 0;
	_Atomic uint32_t *holder = holder_of(h, role);
	for (unsigned round = 0;; round++) {
		/* [sole-drop] acquire: the previous holder's reclaim, if the role is free. */
		uint32_t cur = atomic_load_explicit(holder, memory_order_acquire);
		if (cur == c->owner)
			break;
		/*
		 * [sole-drop] acq_rel: we see everything the previous holder's
		 * reclaim did before it gave the role back (drop_sole's release).
		 */
		if (cur == 0) {
			if (atomic_compare_exchange_strong_explicit(holder, &cur, c->owner,
								    memory_order_acq_rel,
								    memory_order_acquire))
				break;
			continue;
		}
		/* Owners index the table: a holder past it is damage, not a process. */
		if (cur > c->fixed.procs_count)
			return -EPROTO;
		/* Held by another entry: a live one keeps it; a dead one is reclaimed. */
		if (round >= SOLE_TAKEOVER_ROUNDS)
			return -EBUSY;
		bool reclaiming = cistern__entry_reclaiming(c, cur - 1);
		if (!reclaiming && cistern__entry_alive(c->fd, cur - 1) != 0)
			return -EBUSY;
		/* Dead, or being reclaimed: reclaim it ourselves, or give the other one time. */
		if (cistern__sweep(c) <= 0) {
			struct timespec ms = {0, 1000000};
			nanosleep(&ms, NULL);
		}
	}
	if (role == CISTERN_ROLE_PRODUCER)
		c->producing = CISTERN_HOLD_SOLE;
	else
		c->reading = CISTERN_HOLD_SOLE;
	return 0;
}

void cistern__drop_sole(struct cistern_hdr *h, uint32_t owner)
{
	/* [sole-drop] release (acq_rel): the reclaim's slot changes are visible to the next holder. */
	uint32_t o = owner;
	atomic_compare_exchange_strong_explicit(&h->sole_producer, &o, 0, memory_order_acq_rel,
						memory_order_relaxed);
	o = owner;
	atomic_compare_exchange_strong_explicit(&h->sole_reader, &o, 0, memory_order_acq_rel,
						memory_order_relaxed);
}

/*
 * ---- Automatic roles ------------------------------------------------------
 *
 * A FIFO created without CISTERN_SINGLE_PRODUCER (READER), and a reservoir
 * kind without CISTERN_SINGLE_READER, still let a handle use the role's
 * plain stores while it is the only one acting in the role, and take that
 * away, without its cooperation, the moment a second handle wants in.
 * hdr->auto_producer (auto_reader) is the mode word:
 *
 *     owner[15:0]     the automatic holder (attachment index + 1), 0 = none
 *     revoking[16]    a second handle is taking the role away from the holder
 *     shared[63:32]   handles counted as acting in the role alongside others
 *
 * and goes through these states (H holder, n shared count):
 *
 *     (0, 0) --first handle--> (H, 0) --second handle--> (H|rev, 2) --> (0, 2)
 *       ^                        |  ^                                     |
 *       +---- holder leaves -----+  +--- the last one counted (0, 1) -----+
 *
 * The second handle counts the holder along with itself, so that every
 * handle that ever entered is counted until it leaves (its detach, or the
 * reclaim after its death, gives its count back: leave_role()).
 *
 * The holder brackets each plain claim (holder_claim(), holder_look() in fifo.h;
 * a reservoir reader each read call: cistern__auto_read_begin(), api.c)
 * with cistern__auto_begin() and cistern__auto_end(): it stores the role bit
 * in its entry's auto_busy, then loads the mode word, claims only if it
 * still reads (H, 0), and clears auto_busy with a release store after the
 * claim's last store. The revoker sets `revoking`, then issues a global
 * membarrier (a full barrier on every CPU running a registered process,
 * which the holder is: it took the role only with light wakes), then loads
 * the holder's auto_busy. This is Dekker's handshake with the holder's fence
 * supplied by the revoker: either the holder's load of the mode word comes
 * after the barrier and sees `revoking` (and it claims no more with plain
 * stores), or its store to auto_busy came before the barrier and the revoker
 * sees it, and waits for the release that ends the claim; that release
 * orders the claim's plain stores before the revoker's first CAS. Then the
 * revoker clears the holder: (H|rev, n) -> (0, n). The holder, on finding
 * its mode word changed, acts as a counted handle from then on; if it finds
 * `revoking` still set, it clears the holder itself (it is between claims),
 * which is what a revoker that may not issue the membarrier waits for.
 *
 * Nobody becomes holder while others are counted: (0, 0) -> (H, 0) takes an
 * empty word, and (0, 1) -> (H, 0) is done only by the one counted handle
 * (it knows it is counted, so n = 1 is itself). A count lost to a death
 * between entering and writing auto_entered is never given back; the role
 * then stays shared, which is only slower.
 */

#define AUTO_OWNER_MASK CISTERN_AUTO_OWNER
#define AUTO_REVOKING CISTERN_AUTO_REVOKING
#define AUTO_ONE CISTERN_AUTO_ONE

static _Atomic uint64_t *mode_of(struct cistern_hdr *h, uint32_t role)
{
	return role == CISTERN_ROLE_PRODUCER ? &h->auto_producer : &h->auto_reader;
}

/*
 * The owner that holds `role` alone, by its flag or automatically (no
 * revocation under way, nobody counted beside it); 0 if none does.
 * Relaxed: a hint for waiters (wait.c), which a stale answer only makes
 * pause or yield when the other would have served them better.
 */
uint32_t cistern__lone_holder(const struct cistern *c, uint32_t role)
{
	uint64_t o = atomic_load_explicit(holder_of(c->hdr, role), memory_order_relaxed);
	if (o == 0)
		o = atomic_load_explicit(mode_of(c->hdr, role), memory_order_relaxed);
	return o <= c->fixed.procs_count ? (uint32_t)o : 0;
}

/*
 * Where a role may be held automatically: where its flag could have been
 * given (CISTERN_SINGLE_PRODUCER: FIFO; CISTERN_SINGLE_READER: FIFO and the
 * reservoir kinds) and was not.
 */
static bool auto_allowed(const struct cistern *c, uint32_t role)
{
	if (role_is_sole(c, role))
		return false;
	if (role == CISTERN_ROLE_PRODUCER)
		return c->policy->flags & CISTERN_SINGLE_PRODUCER;
	return role == CISTERN_ROLE_READER && (c->policy->flags & CISTERN_SINGLE_READER);
}

/*
 * This handle's side of the mode word: the holder, or one of those counted.
 * `calls`: a reservoir reader, whose plain paths span whole read calls.
 */
static void set_holding(struct cistern *c, uint32_t role, bool holding, bool calls)
{
	if (role == CISTERN_ROLE_PRODUCER)
		c->producing = holding ? CISTERN_HOLD_AUTO : CISTERN_HOLD_COUNTED;
	else if (calls)
		c->reading = holding ? CISTERN_HOLD_CALLS_AUTO : CISTERN_HOLD_CALLS_COUNTED;
	else
		c->reading = holding ? CISTERN_HOLD_AUTO : CISTERN_HOLD_COUNTED;
}

/* Whether the handle's automatic reader role spans read calls (set_holding()). */
static bool in_calls(const struct cistern *c, uint32_t role)
{
	return role == CISTERN_ROLE_READER && c->reading >= CISTERN_HOLD_CALLS_COUNTED &&
	       c->reading <= CISTERN_HOLD_IN_CALL;
}

/*
 * Take the role back from holder `hold` in mode word *mode, in which we are
 * counted already and `revoking` is set (by us or by another revoker). 0 once
 * the holder is cleared, by us or by anyone; -EBUSY if it could not be within
 * SOLE_TAKEOVER_ROUNDS (a holder stopped in the middle of a claim, or one
 * that we may not fence and that makes no claim to notice the revocation).
 */
static int finish_revoke(struct cistern *c, _Atomic uint64_t *mode, uint32_t role, uint32_t hold)
{
	struct cistern_proc *hp = &cistern__procs(c)[hold - 1];
	/*
	 * [auto-claim]: after the store of `revoking` (our CAS, seq_cst) and
	 * before the load of auto_busy, the holder's store-load fence.
	 */
	bool fenced = cistern__fence_others();
	for (unsigned round = 0;; round++) {
		uint64_t m = atomic_load_explicit(mode, memory_order_acquire);
		if ((m & (AUTO_OWNER_MASK | AUTO_REVOKING)) != (hold | AUTO_REVOKING))
			return 0; /* cleared by the holder, its reclaim, or another revoker */
		/*
		 * [auto-end] acquire: pairs with the release that ends the
		 * holder's claim, so its plain stores are seen before our first
		 * CAS. A dead holder claims no more, whatever its auto_busy says.
		 */
		bool idle = fenced &&
			    !(atomic_load_explicit(&hp->auto_busy, memory_order_acquire) & role);
		if (idle || cistern__entry_alive(c->fd, hold - 1) == 0) {
			uint64_t cleared = m & ~(AUTO_OWNER_MASK | AUTO_REVOKING);
			atomic_compare_exchange_strong_explicit(
				mode, &m, cleared, memory_order_acq_rel, memory_order_acquire);
			continue;
		}
		if (round >= SOLE_TAKEOVER_ROUNDS)
			return -EBUSY;
		/* A claim is a few stores: the holder is off its CPU, or not claiming. */
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
	}
}

/* Take our count back after a failed revocation (nothing else of ours is in it). */
static void uncount(_Atomic uint64_t *mode)
{
	uint64_t m = atomic_load_explicit(mode, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(mode, &m, m - AUTO_ONE, memory_order_acq_rel,
						      memory_order_relaxed))
		;
}

int cistern__enter_auto(struct cistern *c, uint32_t role)
{
	if (!auto_allowed(c, role))
		return 0;
	_Atomic uint64_t *mode = mode_of(c->hdr, role);
	/* Only a registered process may hold: the revoker's membarrier must reach it. */
	bool may_hold = cistern__light();
	uint64_t m = atomic_load_explicit(mode, memory_order_acquire);
	for (;;) {
		uint32_t hold = (uint32_t)(m & AUTO_OWNER_MASK);
		uint64_t want;
		/* We never entered, and owners index the table: else the word is damaged. */
		if (hold == c->owner || hold > c->fixed.procs_count)
			return -EPROTO;
		if (m == 0 && may_hold)
			want = c->owner;
		else if (hold == 0)
			want = m + AUTO_ONE;
		else if (m & AUTO_REVOKING)
			want = m + AUTO_ONE; /* another revoker is at it; we help */
		else
			want = (m | AUTO_REVOKING) + 2 * AUTO_ONE; /* we and the holder */
		/*
		 * [auto-leave] acquire half: a holder sees the claims of every
		 * handle that left before (their leave is a release); seq_cst for
		 * [auto-claim], whose store of `revoking` this is; a counted
		 * handle's first CAS claim follows the revocation below.
		 */
		if (!atomic_compare_exchange_weak_explicit(mode, &m, want, memory_order_seq_cst,
							   memory_order_acquire))
			continue;
		if (hold != 0) {
			int r = finish_revoke(c, mode, role, hold);
			if (r < 0) {
				uncount(mode);
				return r;
			}
		}
		break;
	}
	/*
	 * What our leave gives back; see the note above on a death before this
	 * store. Relaxed: read by our own leave, or by the reclaim under the
	 * entry's lock.
	 */
	atomic_fetch_or_explicit(&c->me->auto_entered, role, memory_order_relaxed);
	/* The reservoirs' plain paths span whole calls: api.c brackets them. */
	set_holding(c, role, m == 0 && may_hold,
		    role == CISTERN_ROLE_READER && c->policy->readers_pin);
	return 0;
}

void cistern__auto_lost(struct cistern *c, uint32_t role)
{
	_Atomic uint64_t *mode = mode_of(c->hdr, role);
	uint64_t m = atomic_load_explicit(mode, memory_order_acquire);
	/*
	 * Revoked while we were between claims: say so ourselves, for a
	 * revoker that could not fence us. We are counted in the word already.
	 */
	while ((m & (AUTO_OWNER_MASK | AUTO_REVOKING)) == (c->owner | AUTO_REVOKING) &&
	       !atomic_compare_exchange_weak_explicit(mode, &m,
						      m & ~(AUTO_OWNER_MASK | AUTO_REVOKING),
						      memory_order_acq_rel, memory_order_acquire))
		;
	set_holding(c, role, false, in_calls(c, role));
}

bool cistern__auto_regain(struct cistern *c, uint32_t role)
{
	if (!cistern__light())
		return false;
	_Atomic uint64_t *mode = mode_of(c->hdr, role);
	uint64_t m = AUTO_ONE;
	/* [auto-leave] acquire: we see the claims of the handles that left (their leave's release). */
	if (!atomic_compare_exchange_strong_explicit(mode, &m, c->owner, memory_order_seq_cst,
						     memory_order_relaxed))
		return false;
	set_holding(c, role, true, in_calls(c, role));
	return true;
}

/* Entry `owner` (p) leaves `role`: give back its hold, or its count. */
static void leave_role(struct cistern_hdr *h, struct cistern_proc *p, uint32_t owner, uint32_t role)
{
	_Atomic uint64_t *mode = mode_of(h, role);
	bool counted = atomic_load_explicit(&p->auto_entered, memory_order_relaxed) & role;
	uint64_t m = atomic_load_explicit(mode, memory_order_acquire);
	for (;;) {
		uint64_t want;
		if ((m & AUTO_OWNER_MASK) == owner)
			/* The holder; a revoker counted it already if it is revoking. */
			want = (m & AUTO_REVOKING)
				       ? (m & ~(AUTO_OWNER_MASK | AUTO_REVOKING)) - AUTO_ONE
				       : m & ~AUTO_OWNER_MASK;
		else if (counted && m >= AUTO_ONE)
			want = m - AUTO_ONE;
		else
			return;
		/* [auto-leave] release: our claims, or the reclaim of them, come before a new holder's. */
		if (atomic_compare_exchange_weak_explicit(mode, &m, want, memory_order_seq_cst,
							  memory_order_acquire))
			return;
	}
}

void cistern__leave_auto(struct cistern_hdr *h, struct cistern_proc *p, uint32_t owner)
{
	leave_role(h, p, owner, CISTERN_ROLE_PRODUCER);
	leave_role(h, p, owner, CISTERN_ROLE_READER);
	atomic_store_explicit(&p->auto_entered, 0, memory_order_relaxed);
	atomic_store_explicit(&p->auto_busy, 0, memory_order_relaxed);
}

bool cistern__auto_read_begin(struct cistern *c)
{
	if (c->reading != CISTERN_HOLD_CALLS_AUTO &&
	    !(c->reading == CISTERN_HOLD_CALLS_COUNTED &&
	      atomic_load_explicit(&c->hdr->auto_reader, memory_order_relaxed) == AUTO_ONE &&
	      cistern__auto_regain(c, CISTERN_ROLE_READER)))
		return false;
	if (!cistern__auto_begin(c, CISTERN_ROLE_READER, &c->hdr->auto_reader))
		return false;
	c->reading = CISTERN_HOLD_IN_CALL;
	return true;
}

void cistern__auto_read_end(struct cistern *c)
{
	c->reading = CISTERN_HOLD_CALLS_AUTO;
	cistern__auto_end(c);
}
