/* SPDX-License-Identifier: MIT */
/*
 * inspect.h - what inspect.c offers the rest of admin/ (gc.c) (internal).
 */
#ifndef CISTERN_INSPECT_H
#define CISTERN_INSPECT_H

#include <sys/stat.h>

#include "core/handle.h"

/* Whether entry i's owner lives (the caller's own entry does). */
int cistern__entry_alive_here(const struct cistern *c, uint32_t i);
/* Count live and dead (ACTIVE, unlocked) entries. */
void cistern__count_procs(const struct cistern *c, uint32_t *live, uint32_t *dead);
/* Read and validate a header copy from an open descriptor, without waiting. */
int cistern__probe_header(int fd, struct cistern_hdr *copy, struct stat *st);
/* A file's modification time in nanoseconds. */
uint64_t cistern__mtime_ns(const struct stat *st);

#endif
