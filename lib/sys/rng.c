/* SPDX-License-Identifier: MIT */
/*
 * rng.c - 64 bits nobody else can guess (rng.h).
 */
#include <stdint.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "sys/clock.h"
#include "sys/rng.h"

uint64_t cistern__unguessable(void)
{
	uint64_t v;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
		return v;
	/* No entropy yet (early boot): the clock's nanoseconds, mixed, are hard enough to hit. */
	uint64_t x = (uint64_t)cistern__now_ns(CLOCK_MONOTONIC) ^ (uint64_t)getpid() << 40 ^
		     (uint64_t)(uintptr_t)&v;
	return cistern__splitmix64(&x);
}
