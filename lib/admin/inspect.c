/* SPDX-License-Identifier: MIT */
/*
 * inspect.c - looking at segments from outside: read-only handles, occupancy,
 * the attachment table, listing /dev/shm (removal and gc: gc.c).
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

#include "core/open.h"
#include "core/liveness.h"
#include "policy/reservoir/pins.h"
#include "core/policy.h"
#include "admin/dump.h"
#include "admin/inspect.h"
#include "cistern/admin.h"

#define SHM_DIR "/dev/shm"

int cistern_open_readonly(const char *name, struct cistern **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	/*
	 * Any owner: looking puts nothing of ours into the object. Another
	 * user's is read through a copy, never mapped (cistern__open_view()).
	 */
	return cistern__open_view(name, CISTERN__COPY_SLOTS, false, out);
}

const char *cistern_slot_class_name(enum cistern_slot_class cls)
{
	static const char *const names[CISTERN_SLOT_CLASSES] = {
		"free", "reserved",  "committed", "acquired",
		"skip", "redeliver", "evicting",  "other",
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
	const struct cistern_snap_ops *so = c->policy->snap;
	if (!so)
		return -ENOTSUP;
	int r = cistern__refresh(c, CISTERN__COPY_SLOTS);
	if (r < 0)
		return r;
	memset(occ, 0, sizeof(*occ));
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		/* Acquire, no edge: only the state is counted. */
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

int cistern__entry_alive_here(const struct cistern *c, uint32_t i)
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
	int r = cistern__refresh(c, CISTERN__COPY_TABLES);
	if (r < 0)
		return r;
	struct cistern_proc *procs = cistern__procs(c);
	size_t n = 0;
	for (uint32_t i = 0; i < c->fixed.procs_count; i++) {
		struct cistern_proc *p = &procs[i];
		/* [entry-active] acquire: the fields read below are the present owner's. */
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
			o->alive = cistern__entry_alive_here(c, i);
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
void cistern__count_procs(const struct cistern *c, uint32_t *live, uint32_t *dead)
{
	struct cistern_proc *procs = cistern__procs(c);
	*live = *dead = 0;
	for (uint32_t i = 0; i < c->fixed.procs_count; i++) {
		/* [entry-active], as in cistern_procs_get(). */
		if (atomic_load_explicit(&procs[i].state, memory_order_acquire) !=
		    CISTERN_PROC_ACTIVE)
			continue;
		if (cistern__entry_alive_here(c, i))
			(*live)++;
		else
			(*dead)++;
	}
}

/* Read and validate a header copy from an open descriptor, without waiting. */
int cistern__probe_header(int fd, struct cistern_hdr *copy, struct stat *st)
{
	if (fstat(fd, st) < 0)
		return -errno;
	memset(copy, 0, sizeof(*copy));
	ssize_t got = pread(fd, copy, sizeof(*copy), 0);
	if (got < 0)
		return -errno;
	return cistern__validate_header(copy, (size_t)got, (uint64_t)st->st_size);
}

uint64_t cistern__mtime_ns(const struct stat *st)
{
	return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

static void fill_info(const char *name, struct cistern_segment_info *si)
{
	memset(si, 0, sizeof(*si));
	snprintf(si->name, sizeof(si->name), "%s", name);
	int fd;
	struct stat st;
	int r = cistern__shm_open_existing(name, O_RDONLY, &fd, &st);
	if (r < 0) {
		/* Not a regular file: say whose it is all the same. */
		if (st.st_mode) {
			si->uid = st.st_uid;
			si->mode = st.st_mode & 07777;
			si->created_ns = cistern__mtime_ns(&st);
		}
		si->status = r;
		return;
	}
	struct cistern_hdr copy;
	r = cistern__probe_header(fd, &copy, &st);
	close(fd);
	if (r == -EBADF || r == -EIO || r == -ENOMEM)
		r = -EPROTO;
	si->file_size = (uint64_t)st.st_size;
	si->uid = st.st_uid;
	si->mode = st.st_mode & 07777;
	si->created_ns = cistern__mtime_ns(&st);
	si->status = r;
	if (r < 0)
		return;
	si->created_ns = copy.created_ns;
	if (cistern__restore_unfinished(&copy, name)) {
		/* Built under this temporary name by a restore, not yet renamed. */
		si->status = -EINPROGRESS;
	}
	/*
	 * Its tables only, through a copy whoever owns it: a listing never maps
	 * an object, so that no owner can kill it by shrinking one.
	 */
	struct cistern *c;
	r = cistern__open_view(name, 0, true, &c);
	if (r < 0) {
		if (si->status == 0)
			si->status = r;
		return;
	}
	cistern_config_get(c, &si->config);
	si->config.schema = NULL;   /* the handle's copy goes with it, below */
	si->config.cold_dir = NULL; /* likewise */
	cistern__count_procs(c, &si->procs_live, &si->procs_dead);
	struct cistern_stats stats;
	if (cistern_stats_get(c, &stats) == 0) {
		si->population = stats.population;
		si->cold_population = stats.cold_population;
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
