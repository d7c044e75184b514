/* SPDX-License-Identifier: MIT */
/*
 * producers.c - counting the producers that ended (done, or died before
 * done), which closes reception once every expected one did.
 */
#include "core/producers.h"
#include "core/wait.h"

/*
 * How many of the expected producers have ended: those done, and under
 * CISTERN_DEAD_PRODUCER_DONE those that died before done. Done and died
 * are two words, each moved by a seq_cst RMW and read back seq_cst after
 * it ([producers-ended]): of a producer_done() and a reclaim that count at once, the later one
 * in the single total order sees both counts, so the one that completes the
 * count always closes reception.
 */
static uint64_t producers_ended(const struct cistern *c)
{
	struct cistern_hdr *h = c->hdr;
	uint64_t n = atomic_load_explicit(&h->producers_done, memory_order_seq_cst);
	if (c->fixed.flags & CISTERN_DEAD_PRODUCER_DONE)
		n += atomic_load_explicit(&h->producers_died, memory_order_seq_cst);
	return n;
}

/* Close reception from a reclaim or a producer_done(): [close], as cistern_close_reception(). */
static void close_for_producers(struct cistern_hdr *h)
{
	atomic_store_explicit(&h->closed, 1, memory_order_seq_cst);
	cistern__wake_all(h);
}

void cistern__count_producer(struct cistern *c)
{
	/* Relaxed: only the owner writes its entry's mark while it lives; a reclaimer reads it after. */
	if (atomic_load_explicit(&c->me->producing, memory_order_relaxed) == CISTERN_COUNTED_NONE)
		atomic_store_explicit(&c->me->producing, CISTERN_COUNTED, memory_order_relaxed);
}

void cistern__producer_gone(struct cistern *c, struct cistern_proc *p, bool died)
{
	struct cistern_hdr *h = c->hdr;
	if (died && atomic_load_explicit(&p->producing, memory_order_relaxed) == CISTERN_COUNTED) {
		/*
		 * Count, then clear the mark: a reclaimer that dies in between
		 * leaves the entry RECLAIMING and marked, and the next one counts
		 * it again. Twice is the safe side: under the flag it closes
		 * reception one producer early (the producers left get -EPIPE);
		 * never counted, it would leave readers waiting for good.
		 * [producers-ended] seq_cst RMW, read back below.
		 */
		atomic_fetch_add_explicit(&h->producers_died, 1, memory_order_seq_cst);
		if ((c->fixed.flags & CISTERN_DEAD_PRODUCER_DONE) &&
		    producers_ended(c) >= c->fixed.expected_producers)
			close_for_producers(h);
	}
	atomic_store_explicit(&p->producing, CISTERN_COUNTED_NONE, memory_order_relaxed);
}

/*
 * [producers-ended] read back after a count: once every expected producer
 * ended, close reception (again, if it was: closing is idempotent). Returns
 * how many have not ended.
 */
int cistern__producers_left(struct cistern *c)
{
	uint32_t expected = c->fixed.expected_producers;
	uint64_t ended = producers_ended(c);
	if (ended >= expected) {
		close_for_producers(c->hdr);
		return 0;
	}
	return (int)(expected - ended);
}
