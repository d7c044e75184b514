/* SPDX-License-Identifier: MIT */
/*
 * cpu.h - what this processor offers (cpu.c) (internal).
 */
#ifndef CISTERN_SYS_CPU_H
#define CISTERN_SYS_CPU_H

#include <stdbool.h>

/*
 * Code for AVX2 is compiled in (x86-64 with GCC or clang): a caller may then
 * define a function with __attribute__((target("avx2"))) and call it where
 * cistern__wide_copies() says so.
 */
#if defined(__x86_64__) && defined(__GNUC__)
#define CISTERN_WIDE_COPIES 1
#endif

/* Whether this processor runs code compiled for AVX2 (CISTERN_WIDE_COPIES). */
bool cistern__wide_copies(void);
/* Whether this processor has PREFETCHW (see cistern__prefetch_for_write()). */
bool cistern__has_prefetchw(void);

#endif
