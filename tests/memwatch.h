/* SPDX-License-Identifier: MIT */
/*
 * memwatch.h - the peak memory of a job of forked processes, for tests and
 * benchmarks (memwatch.c; no Criterion, so bench/ links it too).
 *
 * Two ways, the first where it is possible:
 *  - a memory cgroup (v1) child group that the caller makes (as root, under
 *    /sys/fs/cgroup/memory) and that each process of the job joins before it
 *    does its work: its max_usage_in_bytes holds their memory, the shared
 *    memory they touch and any page cache they fill;
 *  - else, sampled by the caller: each process's PSS (anonymous and file)
 *    plus the blocks of the segment's shared memory object.
 */
#ifndef CISTERN_TEST_MEMWATCH_H
#define CISTERN_TEST_MEMWATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The path of a child group for run `run` of `tag` into dir; true if it was
 * made and gives a peak (root, a cgroup v1 memory hierarchy), false if the
 * caller must sample PSS instead.
 */
bool memwatch_cg_make(char *dir, size_t cap, const char *tag, int run);
/* Move the calling process into the group: true on success. */
bool memwatch_cg_join(const char *dir);
/* The group's peak usage in bytes (0 if it cannot be read). */
uint64_t memwatch_cg_peak(const char *dir);
/* Remove the group once its processes exited (their charges go to the parent group). */
void memwatch_cg_remove(const char *dir);
/* Pss_Anon + Pss_File of one process, in bytes (0 if it is gone). */
uint64_t memwatch_pss(pid_t pid);
/* The bytes of the shared memory object of segment `name` on its file system. */
uint64_t memwatch_shm_bytes(const char *name);

#endif
