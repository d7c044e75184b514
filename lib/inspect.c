/* SPDX-License-Identifier: MIT */
/*
 * inspect.c - looking at segments from outside: read-only handles, occupancy,
 * the attachment table, listing /dev/shm, removal and garbage collection.
 *
 * Everything that only looks goes through a read-only handle (O_RDONLY
 * descriptor, PROT_READ mapping, no attachment entry): the kernel itself then
 * guarantees that looking changes nothing, and F_OFD_GETLK answers liveness
 * questions without taking any lock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define SHM_DIR "/dev/shm"

const struct cistern_snap_ops *cistern__snap_ops_for(uint32_t policy)
{
	/* Each policy adds its case here, next to its cistern__ops_for() case. */
	switch (policy) {
	case CISTERN_FIFO:
		return &cistern__fifo_snap_ops;
	case CISTERN_FIRO:
	case CISTERN_RESERVOIR:
	case CISTERN_FIFO_EVICT_RESERVOIR:
	case CISTERN_SIM_PAIRED_RESERVOIR:
	case CISTERN_BATCH_RESERVOIR:
		return &cistern__reservoir_snap_ops;
	default:
		return NULL;
	}
}

int cistern_open_readonly(const char *name, struct cistern **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	return cistern__open_mapped(name, true, out);
}

const char *cistern_slot_class_name(enum cistern_slot_class cls)
{
	static const char *const names[CISTERN_SLOT_CLASSES] = {
		"free", "reserved", "committed", "acquired", "skip", "redeliver", "evicting", "other",
	};
	return (unsigned)cls < CISTERN_SLOT_CLASSES ? names[cls] : NULL;
}

static bool is_held(enum cistern_slot_class cls)
{
	return cls == CISTERN_SLOT_COMMITTED || cls == CISTERN_SLOT_REDELIVER;
}

int cistern_occupancy_get(const struct cistern *c, struct cistern_occupancy *occ)
{
	if (!c || !occ)
		return -EINVAL;
	if (c->inherited)
		return -EBADF;
	const struct cistern_snap_ops *so = cistern__snap_ops_for(c->hdr->policy);
	if (!so)
		return -ENOTSUP;
	memset(occ, 0, sizeof(*occ));
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
		struct cistern_slot_view v = so->classify(w);
		occ->slots[v.cls]++;
		if (atomic_load_explicit(&m->pins, memory_order_relaxed) != 0)
			occ->pinned++;
		if (is_held(v.cls)) {
			occ->held++;
			occ->held_bytes += m->len;
			uint32_t seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
			occ->held_seen_hist[cistern__seen_bucket(seen)]++;
		}
	}
	return 0;
}

static int entry_alive(const struct cistern *c, uint32_t i)
{
	if (i + 1 == c->owner)
		return 1;
	return cistern__entry_alive(c->fd, i) == 1;
}

int cistern_procs_get(const struct cistern *c, struct cistern_proc_info *out, size_t cap)
{
	if (!c || (!out && cap))
		return -EINVAL;
	if (c->inherited)
		return -EBADF;
	struct cistern_proc *procs = cistern__procs(c->hdr);
	size_t n = 0;
	for (uint32_t i = 0; i < c->hdr->procs_count; i++) {
		struct cistern_proc *p = &procs[i];
		if (atomic_load_explicit(&p->state, memory_order_acquire) != CISTERN_PROC_ACTIVE)
			continue;
		if (n < cap) {
			struct cistern_proc_info *o = &out[n];
			memset(o, 0, sizeof(*o));
			o->index = i;
			o->pid = p->pid;
			o->uid = p->uid;
			uint32_t role = atomic_load_explicit(&p->role, memory_order_relaxed);
			o->role = (role & CISTERN_ROLE_PRODUCER ? CISTERN_PROC_PRODUCER : 0) |
				  (role & CISTERN_ROLE_READER ? CISTERN_PROC_READER : 0);
			o->alive = entry_alive(c, i);
			o->waiting = atomic_load_explicit(&p->waiting, memory_order_relaxed);
			o->attached_ns = p->attached_ns;
			o->puts = atomic_load_explicit(&p->ctr.puts, memory_order_relaxed);
			o->gets = atomic_load_explicit(&p->ctr.gets, memory_order_relaxed);
			/* The owner may be rewriting it; keep whatever is there, terminated. */
			memcpy(o->comm, p->comm, sizeof(o->comm));
			o->comm[sizeof(o->comm) - 1] = '\0';
		}
		n++;
	}
	return (int)n;
}

/* Count live and dead (ACTIVE, unlocked) entries. */
static void count_procs(const struct cistern *c, uint32_t *live, uint32_t *dead)
{
	struct cistern_proc *procs = cistern__procs(c->hdr);
	*live = *dead = 0;
	for (uint32_t i = 0; i < c->hdr->procs_count; i++) {
		if (atomic_load_explicit(&procs[i].state, memory_order_acquire) != CISTERN_PROC_ACTIVE)
			continue;
		if (entry_alive(c, i))
			(*live)++;
		else
			(*dead)++;
	}
}

/* Read and validate a header copy from an open descriptor, without waiting. */
static int probe_header(int fd, struct cistern_hdr *copy, struct stat *st)
{
	if (fstat(fd, st) < 0)
		return -errno;
	memset(copy, 0, sizeof(*copy));
	ssize_t got = pread(fd, copy, sizeof(*copy), 0);
	if (got < 0)
		return -errno;
	return cistern__validate_header(copy, (size_t)got, (uint64_t)st->st_size);
}

static uint64_t mtime_ns(const struct stat *st)
{
	return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

static void fill_info(const char *name, struct cistern_segment_info *si)
{
	char shm[96];
	memset(si, 0, sizeof(*si));
	snprintf(si->name, sizeof(si->name), "%s", name);
	if (cistern__shm_name(name, shm, sizeof(shm)) < 0) {
		si->status = -EINVAL;
		return;
	}
	int fd = shm_open(shm, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0) {
		si->status = -errno;
		return;
	}
	struct cistern_hdr copy;
	struct stat st;
	int r = probe_header(fd, &copy, &st);
	close(fd);
	if (r == -EBADF || r == -EIO || r == -ENOMEM)
		r = -EPROTO;
	si->file_size = (uint64_t)st.st_size;
	si->uid = st.st_uid;
	si->mode = st.st_mode & 07777;
	si->created_ns = mtime_ns(&st);
	si->status = r;
	if (r < 0)
		return;
	si->created_ns = copy.created_ns;
	if (strcmp(copy.name, name) != 0) {
		/* Built under this temporary name by a restore, not yet renamed. */
		si->status = -EINPROGRESS;
	}
	struct cistern *c;
	r = cistern__open_mapped(name, true, &c);
	if (r < 0) {
		if (si->status == 0)
			si->status = r;
		return;
	}
	cistern_config_get(c, &si->config);
	count_procs(c, &si->procs_live, &si->procs_dead);
	struct cistern_stats stats;
	if (cistern_stats_get(c, &stats) == 0) {
		si->population = stats.population;
		si->closed = stats.reception_closed;
	}
	cistern_detach(c);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct cistern_segment_info *)a)->name,
		      ((const struct cistern_segment_info *)b)->name);
}

int cistern_list(struct cistern_segment_info **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	DIR *d = opendir(SHM_DIR);
	if (!d)
		return -errno;
	struct cistern_segment_info *v = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	const size_t plen = strlen(CISTERN_SHM_PREFIX) - 1; /* "cistern." */
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, &CISTERN_SHM_PREFIX[1], plen) != 0)
			continue;
		const char *name = e->d_name + plen;
		if (cistern_name_valid(name) < 0)
			continue; /* not reachable through the API, so not ours to show */
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			struct cistern_segment_info *nv = realloc(v, ncap * sizeof(*v));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
			cap = ncap;
		}
		fill_info(name, &v[n]);
		/* Gone between readdir and open: not a segment any more. */
		if (v[n].status == -ENOENT)
			continue;
		n++;
	}
	closedir(d);
	if (r < 0) {
		free(v);
		return r;
	}
	if (n == 0) {
		free(v);
		return 0;
	}
	qsort(v, n, sizeof(*v), by_name);
	*out = v;
	return (int)n;
}

/*
 * Unlink the name only if it still refers to the object open on fd: between
 * our checks and the unlink someone may have removed and re-created it.
 */
static int unlink_same(const char *shm, int fd)
{
	struct stat a, b;
	char path[128];
	snprintf(path, sizeof(path), SHM_DIR "%s", shm);
	if (fstat(fd, &a) < 0)
		return -errno;
	if (stat(path, &b) < 0)
		return -errno;
	if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		return -ENOENT;
	return shm_unlink(shm) < 0 ? -errno : 0;
}

/* Take the gc lock exclusively, giving an attacher a short while to finish. */
static int gc_lock_exclusive(int fd)
{
	for (int tries = 0;; tries++) {
		int r = cistern__gc_lock(fd, F_WRLCK, false);
		if (r != -EAGAIN && r != -EACCES)
			return r;
		if (tries >= 20)
			return -EBUSY;
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static uint32_t live_entries(int fd, uint64_t procs)
{
	uint32_t live = 0;
	for (uint32_t i = 0; i < procs; i++)
		live += cistern__entry_alive(fd, i) == 1;
	return live;
}

int cistern_remove(const char *name, unsigned flags)
{
	char shm[96];
	int r = cistern__shm_name(name, shm, sizeof(shm));
	if (r < 0)
		return r;
	if (flags & ~(unsigned)CISTERN_REMOVE_FORCE)
		return -EINVAL;
	bool force = flags & CISTERN_REMOVE_FORCE;
	/* It will hold the gc lock: listed, so that a fork() child does not keep it (fork.c). */
	int fd;
	struct cistern__lockfd lf;
	r = cistern__lockfd_open(&lf, &fd, NULL, shm, O_RDWR, 0);
	if (r < 0) {
		/* Unlinking needs rights on /dev/shm, not on the object. */
		if (r == -EACCES && force)
			return shm_unlink(shm) < 0 ? -errno : 0;
		return r;
	}
	struct cistern_hdr copy;
	struct stat st;
	r = probe_header(fd, &copy, &st);
	if (r < 0 && !force)
		goto out;
	int lr = gc_lock_exclusive(fd);
	if (lr < 0 && !force) {
		r = lr;
		goto out;
	}
	if (r == 0 && !force && live_entries(fd, copy.procs_count) > 0) {
		r = -EBUSY;
		goto out;
	}
	r = unlink_same(shm, fd);
out:
	cistern__lockfd_close(&lf); /* drops the gc lock too */
	return r;
}

/* ---- gc ---------------------------------------------------------------- */

struct gc_tally {
	const struct cistern_snap_ops *so;
	struct cistern_gc_report *rep;
};

/* What dead entry `index` holds: reservations, FIFO/FIRO samples, reservoir pins. */
static void tally_entry(struct cistern *c, uint32_t index, void *arg)
{
	struct gc_tally *t = arg;
	struct cistern_proc *p = &cistern__procs(c->hdr)[index];
	uint32_t bit = p->reader_bit;
	uint64_t mask = bit < 64 ? UINT64_C(1) << bit : 0;
	t->rep->dead_procs++;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		/* A policy without a classification: its slots cannot be counted, only reclaimed. */
		struct cistern_slot_view v = {CISTERN_SLOT_OTHER, 0};
		if (t->so)
			v = t->so->classify(atomic_load_explicit(&m->word, memory_order_acquire));
		if (v.owner == index + 1) {
			if (v.cls == CISTERN_SLOT_RESERVED)
				t->rep->reservations++;
			else if (v.cls == CISTERN_SLOT_ACQUIRED)
				t->rep->redelivered++;
		}
		if (mask && (atomic_load_explicit(&m->pins, memory_order_relaxed) & mask))
			t->rep->pins++;
	}
}

static int gc_half_created(const char *shm, int fd, const struct stat *st, unsigned flags,
			   struct cistern_gc_report *rep)
{
	int64_t age_ns = cistern__now_ns(CLOCK_REALTIME) - (int64_t)mtime_ns(st);
	if (age_ns < (int64_t)CISTERN_GC_GRACE_S * 1000000000)
		return 0;
	rep->removed = 2;
	if (flags & CISTERN_GC_DRY_RUN)
		return 0;
	int r = gc_lock_exclusive(fd);
	if (r == 0) {
		/* Still unfinished under the lock? Creation may have completed meanwhile. */
		struct cistern_hdr copy;
		struct stat now;
		if (probe_header(fd, &copy, &now) == -EAGAIN)
			r = unlink_same(shm, fd);
		else
			r = 0, rep->removed = 0;
	}
	if (r < 0)
		rep->removed = 0;
	return r == -EBUSY ? 0 : r;
}

int cistern_gc(const char *name, unsigned flags, struct cistern_gc_report *rep)
{
	char shm[96];
	struct cistern_gc_report dummy;
	if (!rep)
		rep = &dummy;
	memset(rep, 0, sizeof(*rep));
	int r = cistern__shm_name(name, shm, sizeof(shm));
	if (r < 0)
		return r;
	if (flags & ~(unsigned)CISTERN_GC_DRY_RUN)
		return -EINVAL;
	bool dry = flags & CISTERN_GC_DRY_RUN;

	/* gc_half_created() takes the gc lock by it: listed for fork() children (fork.c). */
	int fd;
	struct cistern__lockfd lf;
	r = cistern__lockfd_open(&lf, &fd, NULL, shm, dry ? O_RDONLY : O_RDWR, 0);
	if (r < 0)
		return r;
	struct cistern_hdr copy;
	struct stat st;
	r = probe_header(fd, &copy, &st);
	bool half_created = r == -EAGAIN;
	if (half_created)
		r = gc_half_created(shm, fd, &st, flags, rep);
	cistern__lockfd_close(&lf);
	if (half_created)
		return r;
	if (r < 0)
		return r; /* damaged or another build's: not ours to judge */

	struct cistern *c;
	r = cistern__open_mapped(name, dry, &c);
	if (r < 0)
		return r;
	struct gc_tally t = {cistern__snap_ops_for(c->hdr->policy), rep};
	bool restoring = strcmp(c->hdr->name, name) != 0;
	uint32_t live, dead;
	count_procs(c, &live, &dead);
	if (dry) {
		struct cistern_proc *procs = cistern__procs(c->hdr);
		for (uint32_t i = 0; i < c->hdr->procs_count; i++)
			if (atomic_load_explicit(&procs[i].state, memory_order_acquire) ==
				    CISTERN_PROC_ACTIVE &&
			    !entry_alive(c, i))
				tally_entry(c, i, &t);
	} else {
		/* Reclaims exactly what an attaching process would, and counts it. */
		cistern__sweep_observed(c, tally_entry, &t);
	}
	rep->live_procs = live;
	int why = 0;
	if (live == 0 && restoring)
		why = 3; /* the restorer stays attached until the rename: it is gone */
	else if (live == 0 && dead > 0)
		why = 1;
	if (why && dry) {
		rep->removed = why;
	} else if (why) {
		r = gc_lock_exclusive(c->fd);
		/* Under the lock nobody can be joining: re-check that nobody lives. */
		if (r == 0 && live_entries(c->fd, c->hdr->procs_count) == 0) {
			r = unlink_same(shm, c->fd);
			if (r == 0)
				rep->removed = why;
		}
		if (r == -EBUSY)
			r = 0; /* someone is attaching: it is not garbage any more */
	}
	cistern_detach(c);
	return r;
}
