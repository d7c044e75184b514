/* SPDX-License-Identifier: MIT */
/*
 * liveness.c - the attachment table: who is attached, who died, and giving back
 * what the dead held.
 *
 * Entry i of the table belongs to whoever holds the OFD write lock on byte
 * CISTERN_LOCK_BASE + i of the shm object. Open-file-description locks are
 * released by the kernel when the last reference to that open file goes away:
 * its descriptors and any mapping made through it. Nothing maps the handle's
 * locking description and a fork() child closes its copy (fork.c), so that is
 * when the owner exits or is killed, whatever children it has:
 *   - entry state ACTIVE and lock held      -> the owner is alive;
 *   - entry state ACTIVE and lock not held  -> the owner died without detaching;
 *   - whoever takes the lock of a dead entry owns its clean-up, alone; it marks
 *     the entry RECLAIMING while it gives back what the dead owner held.
 * There is no watchdog thread and no pid comparison, so pid reuse fools nothing.
 * A clean-up interrupted by another death leaves the entry RECLAIMING and
 * unlocked, so the next sweeper simply does it again; every reclaim step is
 * idempotent.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "core/roles.h"
#include "core/liveness.h"
#include "core/wait.h"
#include "core/policy.h"

/* The one-byte lock range at offset off of the shm object. */
static struct flock byte_range(off_t off, short type)
{
	struct flock fl;
	memset(&fl, 0, sizeof(fl));
	fl.l_type = type;
	fl.l_whence = SEEK_SET;
	fl.l_start = off;
	fl.l_len = 1;
	return fl;
}

static int lock_at(int fd, off_t off, short type, int cmd)
{
	struct flock fl = byte_range(off, type);
	return fcntl(fd, cmd, &fl) < 0 ? -errno : 0;
}

static int lock_byte(int fd, uint32_t index, short type, int cmd)
{
	return lock_at(fd, CISTERN_LOCK_BASE + (off_t)index, type, cmd);
}

static int lock_intent(int fd, uint32_t index, short type)
{
	return lock_at(fd, CISTERN_INTENT_BASE + (off_t)index, type, F_OFD_SETLK);
}

/* 1 if another open file description holds the lock on byte off, 0 if not. */
static int held_at(int fd, off_t off)
{
	struct flock fl = byte_range(off, F_WRLCK);
	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		return -errno;
	return fl.l_type != F_UNLCK;
}

int cistern__entry_alive(int fd, uint32_t index)
{
	return held_at(fd, CISTERN_LOCK_BASE + (off_t)index);
}

int cistern__hold_intent(int fd, uint32_t index, bool hold)
{
	return lock_intent(fd, index, hold ? F_WRLCK : F_UNLCK);
}

/* Fold a gone attachment's counters into the segment's retired counters. */
static void retire_counters(struct cistern_hdr *h, struct cistern_counters *ctr)
{
	_Atomic uint64_t *src = (_Atomic uint64_t *)ctr;
	_Atomic uint64_t *dst = (_Atomic uint64_t *)&h->retired;
	size_t n = sizeof(*ctr) / sizeof(uint64_t);
	for (size_t i = 0; i < n; i++) {
		uint64_t v = atomic_load_explicit(&src[i], memory_order_relaxed);
		if (v) {
			atomic_fetch_add_explicit(&dst[i], v, memory_order_relaxed);
			atomic_store_explicit(&src[i], 0, memory_order_relaxed);
		}
	}
}

/*
 * Clean up entry `index`, whose lock the caller holds and whose owner is gone
 * (dead, or the caller itself detaching): give back what it held, keep its
 * statistics, mark it free.
 */
static void reclaim_entry(struct cistern *c, uint32_t index)
{
	struct cistern_proc *p = &cistern__procs(c)[index];
	/*
	 * Say so before giving anything back: a reader about to declare end of
	 * data must wait for the samples this reclaim is about to hand out again
	 * (see cistern__reclaim_under_way). If we die half-way, the entry stays
	 * RECLAIMING with its lock free, and the next sweeper does it again.
	 * [entry-reclaiming] seq_cst: before any slot is handed back.
	 */
	atomic_store_explicit(&p->state, CISTERN_PROC_RECLAIMING, memory_order_seq_cst);
	if (index + 1 == c->owner && c->holding == 0) {
		/*
		 * Our own clean detach, holding nothing (api.c counts): no slot
		 * word names us, so skip the walk over every slot; only a pin bit
		 * taken earlier must go back.
		 */
		if (c->policy->reclaim_idle)
			c->policy->reclaim_idle(c, p);
	} else {
		c->ops->reclaim(c, index + 1);
	}
	if (c->policy->forget)
		c->policy->forget(c, index + 1); /* it waits for nobody now */
	cistern__producer_gone(c, p, index + 1 != c->owner);
	cistern__drop_sole(c->hdr, index + 1);
	cistern__leave_auto(c->hdr, p, index + 1);
	cistern__forget_waiter(c->hdr, p);
	retire_counters(c->hdr, &p->ctr);
	atomic_store_explicit(&p->role, 0, memory_order_relaxed);
	/*
	 * [entry-free] release: everything the reclaim did is visible before the
	 * entry reads FREE, so a newcomer never sees the dead owner's marks.
	 */
	atomic_store_explicit(&p->state, CISTERN_PROC_FREE, memory_order_release);
	cistern__wake_all(c->hdr);
}

int cistern__claim_entry(struct cistern *c, bool producer)
{
	struct cistern_hdr *h = c->hdr;
	struct cistern_proc *procs = cistern__procs(c);
	for (uint32_t i = 0; i < c->fixed.procs_count; i++) {
		/* Cheap pre-check: skip entries in use unless they might be dead. [entry-free] */
		if (atomic_load_explicit(&procs[i].state, memory_order_acquire) !=
			    CISTERN_PROC_FREE &&
		    cistern__entry_alive(c->fd, i) == 1)
			continue;
		/* The intent lock first: the entry may be a dead one to reclaim (segment.h). */
		int r = lock_intent(c->fd, i, F_WRLCK);
		if (r == -EAGAIN || r == -EACCES)
			continue;
		if (r < 0)
			return r;
		r = lock_byte(c->fd, i, F_WRLCK, F_OFD_SETLK);
		if (r < 0) {
			lock_intent(c->fd, i, F_UNLCK);
			if (r == -EAGAIN || r == -EACCES)
				continue;
			return r;
		}
		/* The lock is ours: the entry is ours, alone. [entry-free] acquire. */
		bool dead = atomic_load_explicit(&procs[i].state, memory_order_acquire) !=
			    CISTERN_PROC_FREE;
		if (dead)
			reclaim_entry(c, i);
		struct cistern_proc *p = &procs[i];
		memset(&p->ctr, 0, sizeof(p->ctr));
		p->reader_bit = UINT32_MAX;
		atomic_store_explicit(&p->auto_busy, 0, memory_order_relaxed);
		atomic_store_explicit(&p->auto_entered, 0, memory_order_relaxed);
		atomic_store_explicit(&p->role, 0, memory_order_relaxed);
		/*
		 * The producer mark, before the entry reads ACTIVE: an owner that
		 * attaches as a producer counts from here, so its reclaim counts a
		 * death at any later step, first put or not; any other owner is
		 * counted at its first reserve (roles.h). One mark per entry: it
		 * is the same producer then. A claimer that died before ACTIVE
		 * left its mark on a FREE entry, which nobody reads and the next
		 * claimer overwrites here. Relaxed: published with the reset by
		 * [entry-active].
		 */
		bool counted = producer && c->fixed.expected_producers;
		atomic_store_explicit(&p->producing,
				      counted ? CISTERN_COUNTED : CISTERN_COUNTED_NONE,
				      memory_order_relaxed);
		/* [entry-active] release: the reset above comes before the entry reads ACTIVE. */
		atomic_store_explicit(&p->state, CISTERN_PROC_ACTIVE, memory_order_release);
		c->owner = i + 1;
		c->me = p;
		/* Not while a fork is under way (fork.c): the child may share the lock. */
		cistern__lockfd_claimed(&c->lockfd, i);
		/* Readers waiting at end of data looked at the intent lock too. */
		if (dead)
			cistern__wake_all(h);
		return 0;
	}
	return -EUSERS;
}

void cistern__release_entry(struct cistern *c)
{
	uint32_t index = c->owner - 1;
	cistern__lockfd_released(&c->lockfd);
	reclaim_entry(c, index);
	lock_byte(c->fd, index, F_UNLCK, F_OFD_SETLK);
	c->owner = 0;
	c->me = NULL;
	cistern__set_steps(c); /* none without an attachment */
}

int cistern__sweep(struct cistern *c)
{
	return cistern__sweep_observed(c, NULL, NULL);
}

int cistern__gc_lock(int fd, short type, bool wait)
{
	struct flock fl;
	memset(&fl, 0, sizeof(fl));
	fl.l_type = type;
	fl.l_whence = SEEK_SET;
	fl.l_start = 0;
	fl.l_len = 1;
	for (;;) {
		if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

int cistern__sweep_observed(struct cistern *c, cistern__reclaim_observer fn, void *arg)
{
	struct cistern_hdr *h = c->hdr;
	struct cistern_proc *procs = cistern__procs(c);
	int reclaimed = 0;
	for (uint32_t i = 0; i < c->fixed.procs_count; i++) {
		if (i + 1 == c->owner)
			continue;
		/* [entry-active] ACTIVE with its owner dead, or RECLAIMING, its reclaimer dead. */
		if (atomic_load_explicit(&procs[i].state, memory_order_acquire) ==
		    CISTERN_PROC_FREE)
			continue;
		if (cistern__entry_alive(c->fd, i) != 0)
			continue;
		/* Intent, then entry (see segment.h); either taken: someone else is at it. */
		if (lock_intent(c->fd, i, F_WRLCK) < 0)
			continue;
		if (lock_byte(c->fd, i, F_WRLCK, F_OFD_SETLK) < 0) {
			lock_intent(c->fd, i, F_UNLCK);
			continue;
		}
		/* Re-check under the lock: another sweeper may have finished it. [entry-free] */
		if (atomic_load_explicit(&procs[i].state, memory_order_acquire) !=
		    CISTERN_PROC_FREE) {
			if (fn)
				fn(c, i, arg);
			reclaim_entry(c, i);
			reclaimed++;
		}
		lock_byte(c->fd, i, F_UNLCK, F_OFD_SETLK);
		lock_intent(c->fd, i, F_UNLCK);
	}
	/* Readers waiting at end of data looked at the intent locks too. */
	if (reclaimed)
		cistern__wake_all(h);
	return reclaimed;
}

bool cistern__entry_reclaiming(struct cistern *c, uint32_t i)
{
	struct cistern_proc *p = &cistern__procs(c)[i];
	/* [entry-reclaiming] seq_cst: after our end-of-data reads in the single total order. */
	uint32_t state = atomic_load_explicit(&p->state, memory_order_seq_cst);
	if (state == CISTERN_PROC_RECLAIMING)
		return true;
	/* Locked but not marked yet: only the intent lock tells it from a live owner. */
	return state != CISTERN_PROC_FREE && held_at(c->fd, CISTERN_INTENT_BASE + (off_t)i) == 1;
}

bool cistern__reclaim_under_way(struct cistern *c)
{
	struct cistern_proc *procs = cistern__procs(c);
	for (uint32_t i = 0; i < c->fixed.procs_count; i++) {
		if (cistern__entry_reclaiming(c, i))
			return true;
		/*
		 * Dead and not reclaimed: the caller's sweep may have met its
		 * intent lock held by a process attaching, which then let go
		 * (the owner was alive when it looked). Nobody is at it now, so
		 * the next sweep will be. Our own entry's lock is invisible to
		 * us (an OFD lock never conflicts with its own description).
		 * [entry-reclaiming] seq_cst, as in cistern__entry_reclaiming().
		 */
		if (i + 1 != c->owner &&
		    atomic_load_explicit(&procs[i].state, memory_order_seq_cst) !=
			    CISTERN_PROC_FREE &&
		    cistern__entry_alive(c->fd, i) == 0)
			return true;
	}
	return false;
}
