/* SPDX-License-Identifier: MIT */
/*
 * fork.c - what a child made by fork() does with the descriptors and handles
 * it inherits.
 *
 * Liveness is an OFD lock (liveness.c), and an OFD lock lasts as long as its
 * open file description, which every descriptor duplicated from it and every
 * mapping made through it keeps open. A fork() child gets copies of both: left
 * alone, it would keep its parent's attachment alive after the parent died,
 * and with it every reservation and sample the parent held, for as long as the
 * child lives (a DataLoader worker, a multiprocessing pool). So:
 *  - the descriptor that takes the locks, c->fd, is an open file description
 *    of its own that nothing maps: the mapping is made through a second open
 *    of the same object, closed right after mmap() (segment.c). Closing a
 *    descriptor does not unmap, and the child's copy of the mapping holds the
 *    second description only, which carries no lock;
 *  - every descriptor that may carry a lock (each handle's c->fd, and the one
 *    cistern_remove() and cistern_gc() hold the gc lock by) is opened through
 *    cistern__lockfd_open(), which lists it here, and a pthread_atfork() child
 *    handler closes all of them in the child. The parent's locks then go when
 *    the parent goes, as if it had no children.
 * The child's copies of the handles are marked inherited: every call on them
 * answers -EBADF, and cistern_detach() only unmaps and frees the copy. The
 * child touches nothing shared, neither in the handler nor after: the
 * attachment, its roles and what it holds stay the parent's.
 *
 * The descriptor is opened and listed under the list's mutex, which the
 * prepare handler takes too, so a fork in one thread while another opens one
 * finds it either not yet open or already listed: no descriptor that later
 * takes a lock reaches a child unlisted. A fork while another thread is inside
 * any other call (a wait, a reclaim, a detach) needs nothing more: that thread
 * does not exist in the child, whose copy of its handle is closed and marked
 * like the others, and the parent's call goes on as if nothing happened.
 *
 * Not covered: a child made without the atfork handlers (the raw clone() or
 * vfork() system calls) keeps the descriptors until it calls exec, which
 * closes them (they are O_CLOEXEC), or exits.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cistern__lockfd *list_head;

static void before_fork(void)
{
	pthread_mutex_lock(&list_lock);
}

static void in_parent(void)
{
	pthread_mutex_unlock(&list_lock);
}

/*
 * Only async-signal-safe work here (close() and stores): the child of a
 * multithreaded process may call nothing else before it calls exec.
 */
static void in_child(void)
{
	for (struct cistern__lockfd *l = list_head; l; l = l->next) {
		if (*l->fd >= 0)
			close(*l->fd);
		*l->fd = -1;
		l->listed = false;
		if (l->handle)
			cistern__disown(l->handle);
	}
	/*
	 * Forget them all: the entries of other threads' descriptors live on
	 * stacks that the child may reuse, and a handle's copy is not listed
	 * again (its detach finds it unlisted).
	 */
	list_head = NULL;
	pthread_mutex_unlock(&list_lock);
}

static void install(void)
{
	pthread_atfork(before_fork, in_parent, in_child);
}

int cistern__lockfd_open(struct cistern__lockfd *l, int *fd, struct cistern *handle,
			 const char *shm, int oflag, mode_t mode)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install);
	l->fd = fd;
	l->handle = handle;
	l->prev = NULL;
	pthread_mutex_lock(&list_lock);
	*fd = shm_open(shm, oflag | O_CLOEXEC, mode);
	int r = *fd < 0 ? -errno : 0;
	l->listed = r == 0;
	if (l->listed) {
		l->next = list_head;
		if (list_head)
			list_head->prev = l;
		list_head = l;
	}
	pthread_mutex_unlock(&list_lock);
	return r;
}

void cistern__lockfd_close(struct cistern__lockfd *l)
{
	pthread_mutex_lock(&list_lock);
	if (l->listed) {
		if (l->prev)
			l->prev->next = l->next;
		else
			list_head = l->next;
		if (l->next)
			l->next->prev = l->prev;
		l->listed = false;
	}
	/*
	 * Closed under the mutex: a fork between unlisting and closing would
	 * hand the child a descriptor that may still carry the gc lock
	 * (cistern_remove() lets the close drop it).
	 */
	if (*l->fd >= 0)
		close(*l->fd);
	*l->fd = -1;
	pthread_mutex_unlock(&list_lock);
}
