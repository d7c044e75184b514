/* SPDX-License-Identifier: MIT */
/*
 * fence.c - registering for global expedited membarriers, and issuing one
 * ([wake-barrier], fence.h).
 */
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sys/fence.h"

static long membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

_Atomic bool cistern__light_wakes;

/*
 * Register this process for the sleepers' membarriers, unless the user asked
 * for fenced wakes: the membarrier interrupts every CPU that runs a
 * registered process, which a job on isolated CPUs may not want.
 */
static void register_now(void)
{
	const char *e = getenv("CISTERN_FENCED_WAKES");
	bool light = !(e && *e && strcmp(e, "0") != 0) &&
		     membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
	/* Relaxed: a publish that reads a stale true is still registered (it is idempotent). */
	atomic_store_explicit(&cistern__light_wakes, light, memory_order_relaxed);
}

static void install_atfork(void)
{
	/*
	 * A fork child has a memory map of its own, which may start unregistered
	 * while it inherits handles that publish light: register it before it runs.
	 */
	pthread_atfork(NULL, NULL, register_now);
}

bool cistern__fence_others(void)
{
	return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}

void cistern__register_light_wakes(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install_atfork);
	register_now(); /* idempotent and cheap: one system call per create or attach */
}
