/* SPDX-License-Identifier: MIT */
/*
 * wait.h - sleeping for data or room, and waking the sleepers (wait.c) (internal).
 */
#ifndef CISTERN_WAIT_H
#define CISTERN_WAIT_H

#include "core/handle.h"
#include "sys/clock.h"
#include "sys/fence.h"

/* Bump a futex word and wake its sleepers (the slow half of the wakes below). */
void cistern__wake_futex(_Atomic uint32_t *word);

/*
 * Wake the readers (producers) that sleep, if any: the waker's side of the
 * handshake in wait.c. Inline, so that the common case, nobody asleep, costs
 * one load of a line that stays shared in every cache. [wait-register]
 * seq_cst: pairs with the sleeper's registration.
 */
static inline bool cistern__readers_wait(struct cistern *c)
{
	return atomic_load_explicit(&c->hdr->readers_waiting, memory_order_seq_cst) != 0;
}

static inline bool cistern__producers_wait(struct cistern *c)
{
	/* [wait-register] as cistern__readers_wait(). */
	return atomic_load_explicit(&c->hdr->producers_waiting, memory_order_seq_cst) != 0;
}

static inline void cistern__wake_readers(struct cistern *c)
{
	if (cistern__readers_wait(c))
		cistern__wake_futex(&c->hdr->data_futex);
}

static inline void cistern__wake_producers(struct cistern *c)
{
	if (cistern__producers_wait(c))
		cistern__wake_futex(&c->hdr->space_futex);
}
void cistern__wake_all(struct cistern_hdr *h);
/* A dead sleeper's registration would make every waker enter the kernel: undo it. */
void cistern__forget_waiter(struct cistern_hdr *h, struct cistern_proc *p);

enum cistern_wait_kind { CISTERN_WAIT_DATA, CISTERN_WAIT_SPACE };
struct cistern_waiter {
	enum cistern_wait_kind kind;
	int timeout_ms;
	bool registered;
	bool fenced; /* the membarrier after registering succeeded */
	bool here;   /* wait.c: what we wait for runs on our CPU */
	uint32_t spins;
	uint32_t pace;  /* wait.c: 0 before the first spin, pauses of a starved
					 * reader's next short round, then CISTERN_SPIN_USUAL */
	uint32_t round; /* wait.c: pauses of a usual round */
	uint32_t seq;
	int64_t start_ns;
	int64_t deadline_ns;
	int64_t next_sweep_ns;
};
void cistern__wait_init(struct cistern_waiter *w, enum cistern_wait_kind kind, int timeout_ms);
/* Called after a failed attempt: 0 means "try again", else -EAGAIN/-ETIMEDOUT. */
int cistern__wait(struct cistern *c, struct cistern_waiter *w);
void cistern__wait_done(struct cistern *c, struct cistern_waiter *w);

#endif
