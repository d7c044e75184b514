/* SPDX-License-Identifier: MIT */
/*
 * fork.h - the lock descriptors a fork() child gives up (fork.c) (internal).
 */
#ifndef CISTERN_FORK_H
#define CISTERN_FORK_H

#include <sys/stat.h>

#include "core/handle.h"

/*
 * shm_open(shm, oflag | O_CLOEXEC, mode) into *fd, listed in l so
 * that a fork() child closes it and, if `handle` is set, makes its copy of
 * the handle inherited (cistern__disown()); 0 or -errno. Close it with
 * cistern__lockfd_close(), which closes the descriptor too.
 */
int cistern__lockfd_open(struct cistern__lockfd *l, int *fd, struct cistern *handle,
			 const char *shm, int oflag, mode_t mode);
/*
 * cistern__shm_open_existing() (segment.c) into *fd, listed as
 * cistern__lockfd_open() lists its descriptor.
 */
int cistern__lockfd_open_existing(struct cistern__lockfd *l, int *fd, struct cistern *handle,
				  const char *name, int access, struct stat *st);
void cistern__lockfd_close(struct cistern__lockfd *l);
/*
 * entry `index` is l's now (claimed, marked ACTIVE): let go of its
 * intent lock under the list's mutex, so that not while a fork is under way.
 */
void cistern__lockfd_claimed(struct cistern__lockfd *l, uint32_t index);
/* l's entry is being given up (a detach): forks no longer mark it. */
void cistern__lockfd_released(struct cistern__lockfd *l);

#endif
