/* SPDX-License-Identifier: MIT */
/*
 * producers.h - counting the producers that ended, and closing reception
 * when every expected one did (producers.c) (internal).
 */
#ifndef CISTERN_PRODUCERS_H
#define CISTERN_PRODUCERS_H

#include "core/handle.h"

/* Mark this handle's entry as a counted producer (its first put). */
void cistern__count_producer(struct cistern *c);
/*
 * Entry p leaves (detach or reclaim): if it `died` a counted producer
 * before done, count it as died, closing reception under
 * CISTERN_DEAD_PRODUCER_DONE once every expected producer ended.
 */
void cistern__producer_gone(struct cistern *c, struct cistern_proc *p, bool died);
/*
 * After a count of done or died: close reception once every expected
 * producer ended; how many have not.
 */
int cistern__producers_left(struct cistern *c);

#endif
