/* SPDX-License-Identifier: MIT */
/*
 * sole.c - the single-producer and single-reader roles of a segment created
 * with CISTERN_SINGLE_PRODUCER (FIFO) or CISTERN_SINGLE_READER (FIFO and the
 * reservoirs).
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
 * the reservoirs, in pins.c and reservoir.c: the one reader is the only
 * writer of the pins words and of the seen counts of held samples, so it
 * pins and counts with plain stores and fences once per batch.
 */
#include <errno.h>
#include <time.h>

#include "internal.h"

static _Atomic uint32_t *holder_of(struct cistern_hdr *h, uint32_t role)
{
	return role == CISTERN_ROLE_PRODUCER ? &h->sole_producer : &h->sole_reader;
}

static bool role_is_sole(const struct cistern_hdr *h, uint32_t role)
{
	if (role == CISTERN_ROLE_PRODUCER)
		return h->flags & CISTERN_SINGLE_PRODUCER;
	if (role == CISTERN_ROLE_READER)
		return h->flags & CISTERN_SINGLE_READER;
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
	if (!role_is_sole(h, role))
		return 0;
	_Atomic uint32_t *holder = holder_of(h, role);
	for (unsigned round = 0;; round++) {
		uint32_t cur = atomic_load_explicit(holder, memory_order_acquire);
		if (cur == c->owner)
			break;
		/*
		 * acq_rel: we see everything the previous holder's reclaim did
		 * before it gave the role back (drop_sole's release).
		 */
		if (cur == 0) {
			if (atomic_compare_exchange_strong_explicit(holder, &cur, c->owner,
								    memory_order_acq_rel,
								    memory_order_acquire))
				break;
			continue;
		}
		/* Held by another entry: a live one keeps it; a dead one is reclaimed. */
		if (cur > h->procs_count || round >= SOLE_TAKEOVER_ROUNDS)
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
		c->sole_producing = true;
	else
		c->sole_reading = true;
	return 0;
}

void cistern__drop_sole(struct cistern_hdr *h, uint32_t owner)
{
	/* Release: the reclaim's slot changes are visible to the next holder. */
	uint32_t o = owner;
	atomic_compare_exchange_strong_explicit(&h->sole_producer, &o, 0, memory_order_acq_rel,
						memory_order_relaxed);
	o = owner;
	atomic_compare_exchange_strong_explicit(&h->sole_reader, &o, 0, memory_order_acq_rel,
						memory_order_relaxed);
}
