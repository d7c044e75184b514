/* SPDX-License-Identifier: MIT */
/*
 * futex.h - sleeping on a 32-bit word in shared memory and waking its
 * sleepers (futex.c), and the pause of a spinning wait (internal).
 */
#ifndef CISTERN_SYS_FUTEX_H
#define CISTERN_SYS_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>

/*
 * Sleep while *word == expected, at most timeout_ns; 0 when woken (or the
 * word differed), else -errno (-ETIMEDOUT, -EINTR, -EAGAIN).
 */
int cistern__futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns);
/* Wake every process asleep on word. */
void cistern__futex_wake(_Atomic uint32_t *word);

/* One pause of a spinning wait: lets the sibling hyperthread run. */
static inline void cistern__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif
