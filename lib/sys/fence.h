/* SPDX-License-Identifier: MIT */
/*
 * fence.h - asymmetric fences with membarrier(2) (fence.c) (internal).
 */
#ifndef CISTERN_SYS_FENCE_H
#define CISTERN_SYS_FENCE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * The acquire fence of a copy-then-recheck read: every read of the copy
 * (a slot's bytes, or the kernel's copy made by a pread() of this thread)
 * completes before the second look at the word that guarded it. Callers
 * name the edge it serves ([dump-recheck]). gcc refuses thread fences
 * under -fsanitize=thread (-Wtsan), and TSan models none: there, and only
 * there, a compiler barrier stands in.
 */
static inline void cistern__load_fence(void)
{
#if defined(__SANITIZE_THREAD__)
	atomic_signal_fence(memory_order_acquire);
#else
	atomic_thread_fence(memory_order_acquire);
#endif
}

/*
 * A full barrier (store-load included). gcc refuses thread fences under
 * -fsanitize=thread; there a seq_cst RMW on a local stands in, which is a
 * full barrier on x86, where the TSan build runs (TSan checks happens-before,
 * which no fence gives, so it loses nothing by it).
 */
static inline void cistern__full_fence(void)
{
#if defined(__SANITIZE_THREAD__)
	_Atomic int here = 0;
	atomic_fetch_add_explicit(&here, 0, memory_order_seq_cst);
#else
	atomic_thread_fence(memory_order_seq_cst);
#endif
}

/*
 * [wake-barrier] Asymmetric fences: a process that registered for global expedited
 * membarriers may publish with a plain release store and check for sleepers
 * with no store-load fence, because every sleeper issues the membarrier,
 * which runs a full barrier on each CPU where such a process runs, between
 * registering itself and re-checking. cistern__light_wakes stays false when
 * the kernel refuses, and every publish then pays for its own fence.
 */
void cistern__register_light_wakes(void);
extern _Atomic bool cistern__light_wakes; /* set by it: this process is registered */

static inline bool cistern__light(void)
{
	return atomic_load_explicit(&cistern__light_wakes, memory_order_relaxed);
}
/*
 * The heavy half: a full barrier on every CPU that runs a registered process,
 * before this returns. False if the kernel refused.
 */
bool cistern__fence_others(void);

/*
 * Publish a word that only the caller may change now (an owner's commit
 * or release), as the store half of [wait-register]; the release carries the
 * caller's own edge (labelled at the call). With light wakes: a release store
 * and a compiler-only fence ([wake-barrier]) that keeps the following check
 * for sleepers after it in program order; the sleeper's membarrier supplies
 * the store-load ordering at run time. Otherwise a seq_cst exchange: release
 * plus the store-load fence, paid on every call.
 * The exchange is a locked instruction that stalls until the line, usually
 * read by the other side meanwhile, comes back; the store does not.
 */
static inline void cistern__publish_word(_Atomic uint64_t *word, uint64_t w)
{
	if (cistern__light()) {
		atomic_store_explicit(word, w, memory_order_release);
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		atomic_exchange_explicit(word, w, memory_order_seq_cst);
	}
}

#endif
