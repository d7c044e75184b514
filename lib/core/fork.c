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
 * Until the child has run its handler, though, its copies hold the parent's
 * locks: a parent killed just after fork() returned would look alive for that
 * moment, and a reader reaching end of data then would not wait for the
 * samples it held. So, around the fork, the parent marks each of its
 * attachments as a reclaim under way by taking the entry's own intent lock
 * (segment.h), which end of data waits for (liveness.c), and lets go of it
 * only once the child says it has closed its copies (a byte down a pipe, or
 * the pipe's end if the child died first). If the parent dies in between, the
 * intent lock lives on in the child's copy until the child closes it, and the
 * next sweep then reclaims the entry. The handlers touch no shared memory, so
 * a segment shrunk under the process cannot fault a fork.
 *
 * The list has one mutex, which the prepare handler takes and the parent
 * handler gives back: a descriptor opened by another thread at the moment of
 * the fork is either not open yet or listed, and a thread that claims an
 * entry meanwhile gives back its intent lock (cistern__lockfd_claimed()) only
 * after the child closed its copies. A thread inside any other call at the
 * fork does not exist in the child, whose copy of its handle is closed and
 * marked like the others; in the parent its call goes on.
 *
 * Not covered: a child made without the atfork handlers (the raw clone() or
 * vfork() system calls) keeps the descriptors until it calls exec, which
 * closes them (they are O_CLOEXEC), or exits.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/wait.h"
#include "core/open.h"
#include "core/liveness.h"

/*
 * How long fork() waits in the parent for the child to close its copies. A
 * child that is not scheduled for that long (stopped) leaves the parent's
 * attachments unmarked from then on.
 */
#define FORK_WAIT_MS 1000

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cistern__lockfd *list_head;
/* The child's word that it closed its copies: created before a fork, gone after. */
static int child_done[2] = {-1, -1};

static void before_fork(void)
{
	pthread_mutex_lock(&list_lock);
	if (!list_head)
		return;
	for (struct cistern__lockfd *l = list_head; l; l = l->next)
		if (l->entry && cistern__hold_intent(*l->fd, l->entry - 1, true) == 0)
			l->intent_held = l->entry;
	if (pipe2(child_done, O_CLOEXEC) < 0)
		child_done[0] = child_done[1] = -1;
}

/* Wait until the child writes its byte or is gone, or FORK_WAIT_MS pass. */
static void wait_for_child(int fd)
{
	int64_t end = cistern__now_ns(CLOCK_MONOTONIC) + (int64_t)FORK_WAIT_MS * 1000000;
	for (;;) {
		int64_t left = end - cistern__now_ns(CLOCK_MONOTONIC);
		if (left <= 0)
			return;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int r = poll(&p, 1, (int)((left + 999999) / 1000000));
		if (r > 0) {
			char b;
			/* The byte, or end of file: the child closed its copies, or died. */
			while (read(fd, &b, 1) < 0 && errno == EINTR)
				;
			return;
		}
		if (r == 0 || errno != EINTR)
			return;
	}
}

static void in_parent(void)
{
	if (child_done[0] >= 0) {
		/* Ours closed: end of file then means no child holds the other end. */
		close(child_done[1]);
		wait_for_child(child_done[0]);
		close(child_done[0]);
		child_done[0] = child_done[1] = -1;
	}
	/*
	 * Readers that waited at end of data meanwhile look again within a
	 * sweep period (wait.c); a wake would touch the mapping.
	 */
	for (struct cistern__lockfd *l = list_head; l; l = l->next) {
		if (l->intent_held)
			cistern__hold_intent(*l->fd, l->intent_held - 1, false);
		l->intent_held = 0;
	}
	pthread_mutex_unlock(&list_lock);
}

/*
 * Only async-signal-safe work here (close(), write() and stores): the child
 * of a multithreaded process may call nothing else before it calls exec.
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
	if (child_done[1] >= 0) {
		char b = 1;
		while (write(child_done[1], &b, 1) < 0 && errno == EINTR)
			;
		close(child_done[1]);
		close(child_done[0]);
		child_done[0] = child_done[1] = -1;
	}
	pthread_mutex_unlock(&list_lock);
}

static void install(void)
{
	pthread_atfork(before_fork, in_parent, in_child);
}

/* One registration for the process: the handlers must run once a fork. */
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

/* Set l up for descriptor *fd of `handle` (or none), not listed yet; takes the list's mutex. */
static void lockfd_begin(struct cistern__lockfd *l, int *fd, struct cistern *handle)
{
	pthread_once(&install_once, install);
	l->fd = fd;
	l->handle = handle;
	l->prev = NULL;
	l->entry = 0;
	l->intent_held = 0;
	pthread_mutex_lock(&list_lock);
}

/*
 * The open's result r: list l if it opened, then give the mutex back. The
 * open ran under the mutex, so no fork saw the descriptor open and unlisted.
 */
static int lockfd_end(struct cistern__lockfd *l, int r)
{
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

int cistern__lockfd_open(struct cistern__lockfd *l, int *fd, struct cistern *handle,
			 const char *shm, int oflag, mode_t mode)
{
	lockfd_begin(l, fd, handle);
	*fd = shm_open(shm, oflag | O_CLOEXEC, mode);
	return lockfd_end(l, *fd < 0 ? -errno : 0);
}

int cistern__lockfd_open_existing(struct cistern__lockfd *l, int *fd, struct cistern *handle,
				  const char *name, int access, struct stat *st)
{
	lockfd_begin(l, fd, handle);
	return lockfd_end(l, cistern__shm_open_existing(name, access, fd, st));
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

void cistern__lockfd_claimed(struct cistern__lockfd *l, uint32_t index)
{
	pthread_mutex_lock(&list_lock);
	l->entry = index + 1;
	cistern__hold_intent(*l->fd, index, false);
	pthread_mutex_unlock(&list_lock);
}

void cistern__lockfd_released(struct cistern__lockfd *l)
{
	pthread_mutex_lock(&list_lock);
	l->entry = 0;
	pthread_mutex_unlock(&list_lock);
}
