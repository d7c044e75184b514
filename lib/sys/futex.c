/* SPDX-License-Identifier: MIT */
/*
 * futex.c - shared (not private) futexes: sleepers and wakers are different
 * processes that map the same word.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sys/futex.h"

int cistern__futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
	struct timespec ts = {
		.tv_sec = timeout_ns / 1000000000,
		.tv_nsec = timeout_ns % 1000000000,
	};
	long r = syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
	return r < 0 ? -errno : 0;
}

void cistern__futex_wake(_Atomic uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
