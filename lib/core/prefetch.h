/* SPDX-License-Identifier: MIT */
/*
 * prefetch.h - bringing payloads and slot lines into the cache ahead of use (internal).
 */
#ifndef CISTERN_PREFETCH_H
#define CISTERN_PREFETCH_H

#include "core/handle.h"

/*
 * Gathering copies samples that sit in random places (cistern_get_batch(),
 * api.c and gather.c): prefetch the first CISTERN_GATHER_AHEAD, then the one
 * CISTERN_GATHER_AHEAD places on while copying each, up to
 * CISTERN_GATHER_LINES cache lines of it (beyond that the hardware prefetcher
 * follows the copy). The distance is the one, of those tried from 0 to 256,
 * that gathered the benchmark's 256-byte samples fastest (its section 4).
 */
#define CISTERN_GATHER_AHEAD 16
#define CISTERN_GATHER_LINES 8

/*
 * A read prefetch of one line that the compiler keeps. With the loop below
 * unrolled, gcc 12 left none of its __builtin_prefetch() calls in the object
 * code of the one-pass gather, which then ran slower, its misses no longer
 * started ahead; an asm statement is not dropped.
 */
static inline void cistern__prefetch_line(const char *p)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("prefetcht0 %0" : : "m"(*p));
#else
	__builtin_prefetch(p, 0, 3);
#endif
}

/*
 * Prefetch the line at p for writing: fetched with ownership, so that the
 * store that follows finds it ready, where a read prefetch (what gcc makes
 * of __builtin_prefetch(p, 1, ...) unless built for a processor with
 * PREFETCHW) brings in a shared copy and the store must then ask for the
 * line a second time, invalidating the other core's copy. `prefetchw` is
 * the handle's write_prefetch: the processor has the instruction.
 */
static inline __attribute__((always_inline)) void cistern__prefetch_for_write(const void *p,
									      bool prefetchw)
{
#if defined(__x86_64__) || defined(__i386__)
	if (prefetchw) {
		__asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
		return;
	}
#else
	(void)prefetchw;
#endif
	__builtin_prefetch(p, 1, 3);
}

/*
 * `lines` lines from p. Four, the lines of a 256-byte sample, the common
 * case of batched reads, are asked for with no loop to count: a loop of one
 * prefetch a step spends more instructions on its own control than on the
 * prefetches, and a loop of four a step, its bound the length clamped on
 * every call, measured slower than this too.
 */
static inline __attribute__((always_inline)) void cistern__prefetch_lines(const char *p,
									  unsigned lines)
{
	if (lines == 4) {
		cistern__prefetch_line(p);
		cistern__prefetch_line(p + CISTERN_CACHELINE);
		cistern__prefetch_line(p + 2 * CISTERN_CACHELINE);
		cistern__prefetch_line(p + 3 * CISTERN_CACHELINE);
		return;
	}
	for (unsigned l = 0; l < lines; l++)
		cistern__prefetch_line(p + (size_t)l * CISTERN_CACHELINE);
}

/* How many of a payload of len bytes the batched reads prefetch: CISTERN_GATHER_LINES at most. */
static inline unsigned cistern__payload_lines(uint64_t len)
{
	if (len > CISTERN_GATHER_LINES * CISTERN_CACHELINE)
		len = CISTERN_GATHER_LINES * CISTERN_CACHELINE;
	return (unsigned)((len + CISTERN_CACHELINE - 1) / CISTERN_CACHELINE);
}

/* The first CISTERN_GATHER_LINES lines of a sample's payload. */
static inline void cistern__prefetch_payload(const struct cistern_sample *s)
{
	cistern__prefetch_lines(s->data, cistern__payload_lines(s->len));
}

#endif
