/* SPDX-License-Identifier: MIT */
/*
 * open.h - opening a segment by name: the checked open, the owner check, the
 * validated mapping (segment.c) (internal).
 */
#ifndef CISTERN_OPEN_H
#define CISTERN_OPEN_H

#include "core/handle.h"
#include "core/schema.h"

/*
 * segment.c: open the existing object of segment `name` for `access`
 * (O_RDONLY or O_RDWR), never waiting and never following a link; anything
 * but a regular file (a FIFO, socket, directory, device or link that anyone
 * may make under the name) is -EPROTO, "not a cistern segment". On success
 * *fd is open and *st is its fstat; on failure *fd is -1 and *st is what
 * lstat saw of the name (all zero if nothing), so that its owner can be told.
 */
struct stat;
int cistern__shm_open_existing(const char *name, int access, int *fd, struct stat *st);
/*
 * 0 if an object owned as *st says may be written by this process: its owner
 * is our effective uid or root, or any_owner is set; else -EACCES. Another
 * user's object under the name could be a trap that collects what we put in.
 */
int cistern__owner_check(const struct stat *st, bool any_owner);
/*
 * segment.c: open and map a segment by name, validated, without attaching.
 * Unless any_owner, an object of another user than us or root is -EACCES
 * (see cistern__owner_check()), before anything of it is read. Read-only,
 * an object someone else may shrink is copied instead, slot metadata and
 * all (see cistern__open_view()).
 */
int cistern__open_mapped(const char *name, bool readonly, bool any_owner, struct cistern **out);

/*
 * What a copied read-only handle (struct cistern.copied) reads again by
 * pread() of the object: the header and the attachment table (TABLES), and
 * the metadata line of every slot (SLOTS); payloads are read where they are
 * needed (dump.c), and the policy index, which no read-only call reads,
 * never (it reads as zeros).
 */
enum {
	CISTERN__COPY_TABLES = 1u << 0,
	CISTERN__COPY_SLOTS = 1u << 1,
};
/*
 * Open segment `name` read-only, of any owner, as cistern_open_readonly()
 * does. An object that another user may shrink (it is not ours, or its mode
 * lets others write it) is never mapped: the handle reads a private copy,
 * filled with `parts` at open. With `always`, our own objects are copied too
 * (cistern_list() reads the tables of every segment that way, cheaply).
 * One that is ours alone is mapped, since only we could shrink it.
 */
int cistern__open_view(const char *name, unsigned parts, bool always, struct cistern **out);
/*
 * Read `parts` of the object again into the copy of a copied handle (0 at
 * once for a mapped one): 0, -EPROTO if the object is now shorter than its
 * layout (shrunk under us), or -errno of pread().
 */
int cistern__refresh(const struct cistern *c, unsigned parts);
/*
 * pread() of exactly len bytes at off of the object open on fd: 0, -EPROTO
 * if it ends first (the object shrank), or -errno.
 */
int cistern__pread_all(int fd, void *buf, size_t len, uint64_t off);

/* segment.c: in a fork() child, make its copy of c refuse every call but detach. */
void cistern__disown(struct cistern *c);

#endif
