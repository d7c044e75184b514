/* SPDX-License-Identifier: MIT */
/*
 * roles.h - who produces and who reads: the sole and automatic roles (roles.c) (internal).
 */
#ifndef CISTERN_ROLES_H
#define CISTERN_ROLES_H

#include "core/handle.h"
#include "core/producers.h"

/*
 * CISTERN_SINGLE_* (roles.c): take the producer or reader role if the segment
 * allows only one holder; 0, -EBUSY while another live handle has it, or
 * -EPROTO (a holder word naming no entry of the table).
 */
int cistern__take_sole(struct cistern *c, uint32_t role);
/* Give back the roles `owner` holds, after its slots were cleaned up. */
void cistern__drop_sole(struct cistern_hdr *h, uint32_t owner);

/*
 * The automatic roles of a segment without the CISTERN_SINGLE_* flags (the
 * producer's under FIFO, the reader's under FIFO and the reservoirs; roles.c):
 * enter the role (take it if nobody acts in it, else be counted, taking it
 * from its holder if there is one); 0, -EBUSY (a holder could not be made to
 * give it up) or -EPROTO (a damaged mode word).
 */
int cistern__enter_auto(struct cistern *c, uint32_t role);
/* Mode word fields (the layout is in roles.c): the holder; one handle counted; revoking. */
#define CISTERN_AUTO_OWNER UINT64_C(0xffff)
#define CISTERN_AUTO_ONE (UINT64_C(1) << 32)
#define CISTERN_AUTO_REVOKING (UINT64_C(1) << 16)
/* The holder found its role taken away (cistern__auto_begin() said no). */
void cistern__auto_lost(struct cistern *c, uint32_t role);
/* A counted handle that is the only one left takes the role; true if it did. */
bool cistern__auto_regain(struct cistern *c, uint32_t role);
/* The owner holding `role` alone (flag or automatic role), or 0 (roles.c). */
uint32_t cistern__lone_holder(const struct cistern *c, uint32_t role);
/* Give back what entry `owner` (p) holds or is counted for, at its reclaim. */
void cistern__leave_auto(struct cistern_hdr *h, struct cistern_proc *p, uint32_t owner);
/* Whether the handle holds `role` automatically (a reservoir reader: between or inside calls). */
static inline bool cistern__holds_auto(const struct cistern *c, uint32_t role)
{
	if (role == CISTERN_ROLE_PRODUCER)
		return c->producing == CISTERN_HOLD_AUTO;
	return c->reading == CISTERN_HOLD_AUTO || c->reading == CISTERN_HOLD_CALLS_AUTO ||
	       c->reading == CISTERN_HOLD_IN_CALL;
}

/* Whether it is counted among several handles in the automatic `role`. */
static inline bool cistern__counted(const struct cistern *c, uint32_t role)
{
	if (role == CISTERN_ROLE_PRODUCER)
		return c->producing == CISTERN_HOLD_COUNTED;
	return c->reading == CISTERN_HOLD_COUNTED || c->reading == CISTERN_HOLD_CALLS_COUNTED;
}

/* A reservoir reader in the automatic role, whose plain paths span whole read calls. */
static inline bool cistern__reads_in_calls(const struct cistern *c)
{
	return c->reading == CISTERN_HOLD_CALLS_AUTO || c->reading == CISTERN_HOLD_CALLS_COUNTED;
}

/*
 * A reservoir reader's bracket around one read call (api.c): while the
 * automatic role holds, the call runs the sole reader's paths
 * (c->reading is CISTERN_HOLD_IN_CALL inside it only). True: the role holds, call cistern__auto_read_end()
 * after the call; false: the call takes the shared paths.
 */
bool cistern__auto_read_begin(struct cistern *c);
void cistern__auto_read_end(struct cistern *c);

/*
 * The automatic holder's bracket around one plain claim (the handshake is
 * described in roles.c). The store of the role bit and the load of the mode
 * word are kept in this order by a compiler fence only: a revoker's
 * membarrier supplies the store-load fence at run time. False if the role
 * was taken away: the caller then owes a cistern__auto_lost() (kept apart
 * so that a claim's fast path makes no call of its own).
 */
static inline bool cistern__auto_try_begin(struct cistern *c, uint32_t role, _Atomic uint64_t *mode)
{
	/*
	 * [auto-claim]: the role bit, then the mode word, both relaxed and kept
	 * in order by the compiler fence; the revoker's membarrier between its
	 * seq_cst CAS of `revoking` and its load of auto_busy (finish_revoke(),
	 * roles.c) is the store-load fence, so one of the two sees the other.
	 */
	atomic_store_explicit(&c->me->auto_busy, role, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	if (atomic_load_explicit(mode, memory_order_relaxed) == c->owner)
		return true;
	/* Relaxed: we claimed nothing; a revoker waits for the bit to clear, not for stores. */
	atomic_store_explicit(&c->me->auto_busy, 0, memory_order_relaxed);
	return false;
}

/* As cistern__auto_try_begin(), and a refusal turns us into a counted handle at once. */
static inline bool cistern__auto_begin(struct cistern *c, uint32_t role, _Atomic uint64_t *mode)
{
	if (cistern__auto_try_begin(c, role, mode))
		return true;
	cistern__auto_lost(c, role);
	return false;
}

/*
 * [auto-end] release: the claim's plain stores come before the cleared
 * bit; the revoker's acquire load of auto_busy sees them before its CAS
 * (finish_revoke(), roles.c).
 */
static inline void cistern__auto_end_of(struct cistern_proc *me)
{
	atomic_store_explicit(&me->auto_busy, 0, memory_order_release);
}

static inline void cistern__auto_end(struct cistern *c)
{
	cistern__auto_end_of(c->me);
}

/*
 * producers.c: expected producers. A handle taking the producer role becomes a
 * counted producer (unless it already is, from its attach with
 * CISTERN_ATTACH_PRODUCER, or said it is done); a reclaim calls
 * cistern__producer_gone() for every entry it frees, `died` false for an
 * owner's own detach, and counts a counted producer that died before done.
 */

/* Publish that this handle acts as `role`; 0, -EBUSY or -EPROTO (see cistern__take_sole). */
static inline int cistern__add_role(struct cistern *c, uint32_t role)
{
	if (!(c->role & role)) {
		int r = cistern__take_sole(c, role);
		if (r == 0)
			r = cistern__enter_auto(c, role);
		if (r < 0)
			return r;
		c->role |= role;
		/* Relaxed: the published role is for statistics and the reclaim, which takes the entry's lock. */
		atomic_fetch_or_explicit(&c->me->role, role, memory_order_relaxed);
		if (role == CISTERN_ROLE_PRODUCER && c->fixed.expected_producers)
			cistern__count_producer(c);
	}
	return 0;
}

#endif
