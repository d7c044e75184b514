/* SPDX-License-Identifier: MIT */
/*
 * clock.h - the time of a POSIX clock in nanoseconds (clock.c) (internal).
 */
#ifndef CISTERN_SYS_CLOCK_H
#define CISTERN_SYS_CLOCK_H

#include <stdint.h>

/* Nanoseconds of clock `clock` (CLOCK_MONOTONIC, CLOCK_REALTIME, ...). */
int64_t cistern__now_ns(int clock);

#endif
