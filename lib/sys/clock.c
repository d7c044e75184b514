/* SPDX-License-Identifier: MIT */
/*
 * clock.c - the time of a POSIX clock in nanoseconds.
 */
#include <time.h>

#include "sys/clock.h"

int64_t cistern__now_ns(int clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
