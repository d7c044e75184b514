/* SPDX-License-Identifier: MIT */
/*
 * cpu.c - probes of the processor's features, made once per handle.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "sys/cpu.h"

bool cistern__wide_copies(void)
{
#ifdef CISTERN_WIDE_COPIES
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
#else
	return false;
#endif
}

bool cistern__has_prefetchw(void)
{
#if defined(__x86_64__) || defined(__i386__)
	/* CPUID 0x80000001, ECX bit 8: PREFETCHW (AMD's 3DNowPrefetch). */
	unsigned a, b, cx, d;
	return __get_cpuid(0x80000001, &a, &b, &cx, &d) && (cx & (1u << 8));
#else
	return false;
#endif
}
