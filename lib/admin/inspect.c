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

#include "tier/tiered.h"
#include "core/open.h"
#include "core/liveness.h"
#include "policy/reservoir/pins.h"
#include "core/policy.h"
#include "admin/dump.h"
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
	struct cistern_proc *procs = cistern__procs(c);
	*live = *dead = 0;
	for (uint32_t i = 0; i < c->fixed.procs_count; i++) {
		/* [entry-active], as in cistern_procs_get(). */
		if (atomic_load_explicit(&procs[i].state, memory_order_acquire) !=
		    CISTERN_PROC_ACTIVE)
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
			si->created_ns = mtime_ns(&st);
		}
		si->status = r;
		return;
	}
	struct cistern_hdr copy;
	r = probe_header(fd, &copy, &st);
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
	si->config.schema = NULL; /* the handle's copy goes with it, below */
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
	if (flags & ~(unsigned)(CISTERN_REMOVE_FORCE | CISTERN_REMOVE_ANY_OWNER))
		return -EINVAL;
	bool force = flags & CISTERN_REMOVE_FORCE;
	bool any_owner = flags & CISTERN_REMOVE_ANY_OWNER;
	/* It will hold the gc lock: listed, so that a fork() child does not keep it (fork.c). */
	int fd;
	struct stat st;
	struct cistern__lockfd lf;
	r = cistern__lockfd_open_existing(&lf, &fd, NULL, name, O_RDWR, &st);
	if (r < 0) {
		/*
		 * Unlinking needs rights on /dev/shm, not on the object: forced, an
		 * object we may not open, or one that is not a regular file, goes
		 * all the same, if its owner (as lstat saw it) is one we act for.
		 */
		if ((r == -EACCES || r == -EPROTO) && force && st.st_mode) {
			r = cistern__owner_check(&st, any_owner);
			return r < 0 ? r : shm_unlink(shm) < 0 ? -errno : 0;
		}
		return r;
	}
	r = cistern__owner_check(&st, any_owner);
	if (r < 0)
		goto out;
	struct cistern_hdr copy;
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
	bool tiered = r == 0 && copy.cold_slots;
	r = unlink_same(shm, fd);
	/* The segment first, then its cold file (docs/protocol/tiers.md). */
	if (r == 0 && tiered)
		r = cistern__tier_unlink(copy.cold_dir, name);
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
	struct cistern_proc *p = &cistern__procs(c)[index];
	uint32_t bit = p->reader_bit;
	uint64_t mask = bit < 64 ? UINT64_C(1) << bit : 0;
	t->rep->dead_procs++;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		/* A policy without a classification: its slots cannot be counted, only reclaimed.
		 * Acquire, no edge: only the state is classified. */
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

/*
 * Reclaim every dead attachment as an attaching process would, counting what
 * each held (tally_entry); a dry run only counts.
 */
static void gc_reclaim(struct cistern *c, bool dry, struct gc_tally *t)
{
	if (!dry) {
		cistern__sweep_observed(c, tally_entry, t);
		return;
	}
	struct cistern_proc *procs = cistern__procs(c);
	/* [entry-active] acquire, as in count_procs(). */
	for (uint32_t i = 0; i < c->fixed.procs_count; i++)
		if (atomic_load_explicit(&procs[i].state, memory_order_acquire) ==
			    CISTERN_PROC_ACTIVE &&
		    !entry_alive(c, i))
			tally_entry(c, i, t);
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

bool cistern__held_once_reclaimed(const struct cistern_snap_ops *so, uint64_t word)
{
	enum cistern_slot_class cls = so->classify(word).cls;
	return is_held(cls) || cls == CISTERN_SLOT_ACQUIRED || cls == CISTERN_SLOT_EVICTING;
}

uint32_t cistern__seen_once_reclaimed(const struct cistern *c, const struct cistern_slotmeta *m,
				      uint64_t word, const struct cistern_snap_ops *so)
{
	uint32_t seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
	if (!c->policy->counts_reads)
		return seen; /* FIFO counts no reads: its reclaim leaves seen alone */
	uint64_t undone = (uint64_t)__builtin_popcountll(
				  atomic_load_explicit(&m->pins, memory_order_relaxed)) +
			  (so->classify(word).cls == CISTERN_SLOT_ACQUIRED);
	return seen > undone ? (uint32_t)(seen - undone) : 0;
}

/*
 * Samples a stale segment (nobody alive attached) holds that readers would
 * still get: under FIFO and FIRO every sample held, since it leaves only once
 * read (FIRO: read pseudo_epochs times); under the reservoirs every sample
 * never seen, since a seen one is evictable anyway. What dead processes hold
 * counts as their reclaim would leave it (cistern__held_once_reclaimed()), so
 * the count is the same before and after a sweep, and in a dry run.
 */
static uint64_t unread_samples(struct cistern *c, const struct cistern_snap_ops *so)
{
	if (!so) {
		/* Slots this build cannot classify: every sample held counts, to be safe. */
		struct cistern_stats st;
		return cistern_stats_get(c, &st) == 0 ? st.population : 0;
	}
	bool all_held = !c->policy->evicts_seen;
	uint64_t n = 0;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slotmeta *m = cistern__slotmeta(c, i);
		/* Acquire, no edge: state and seen only. */
		uint64_t word = atomic_load_explicit(&m->word, memory_order_acquire);
		if (cistern__held_once_reclaimed(so, word))
			n += all_held || cistern__seen_once_reclaimed(c, m, word, so) == 0;
	}
	return n;
}

/* Where gc dumps segment `name`: DIR/NAME.dump. */
static int gc_dump_path(const char *dir, const char *name, char *buf, size_t size)
{
	int k = snprintf(buf, size, "%s/%s.dump", dir, name);
	return k < 0 || (size_t)k >= size ? -ENAMETOOLONG : 0;
}

/*
 * What a dry run predicts of gc_dump() writing `path` in `dir`: any object
 * already there is in the way, a dangling symbolic link too (the dump never
 * follows a link nor replaces what is there), and so is a directory the
 * dump cannot create its file in.
 */
static int gc_dump_possible(const char *dir, const char *path)
{
	struct stat st;
	if (lstat(path, &st) == 0)
		return -EEXIST;
	if (errno != ENOENT)
		return -errno;
	return access(dir, W_OK | X_OK) < 0 ? -errno : 0;
}

/*
 * Dump the stale segment open on c to `path` (never over an existing file),
 * and read the file back whole: only a dump that verifies and holds every
 * sample the segment holds lets gc remove the segment. The caller holds the
 * gc lock and saw nobody alive, so no sample moves meanwhile. Nothing is
 * reclaimed first (the samples dead processes held are saved as their
 * reclaim would leave them), so that a failed dump leaves the segment as it
 * was: still stale, for another try.
 */
static int gc_dump(struct cistern *c, const char *name, const char *path,
		   struct cistern_gc_report *rep)
{
	struct cistern_dump_info info, check;
	int r = cistern__dump_handle(c, name, path,
				     CISTERN__DUMP_NOREPLACE | CISTERN__DUMP_DEAD_HELD, NULL, NULL,
				     &info);
	if (r < 0)
		return r;
	r = cistern_dump_verify(path, &check);
	if (r == 0 && (info.skipped || check.samples != info.samples || info.samples < rep->unread))
		r = -EAGAIN;
	if (r < 0) {
		unlink(path); /* ours: NOREPLACE made it, nobody else's file */
		return r;
	}
	rep->dumped = info.samples;
	return 0;
}

int cistern_gc(const char *name, unsigned flags, struct cistern_gc_report *rep)
{
	return cistern_gc_dump_to(name, NULL, flags, rep);
}

int cistern_gc_dump_to(const char *name, const char *dir, unsigned flags,
		       struct cistern_gc_report *rep)
{
	char shm[96], path[4096];
	struct cistern_gc_report dummy;
	if (!rep)
		rep = &dummy;
	memset(rep, 0, sizeof(*rep));
	int r = cistern__shm_name(name, shm, sizeof(shm));
	if (r < 0)
		return r;
	if (flags & ~(unsigned)(CISTERN_GC_DRY_RUN | CISTERN_GC_DISCARD | CISTERN_GC_ANY_OWNER))
		return -EINVAL;
	bool dry = flags & CISTERN_GC_DRY_RUN, discard = flags & CISTERN_GC_DISCARD;
	bool any_owner = flags & CISTERN_GC_ANY_OWNER;
	if (dir && discard)
		return -EINVAL; /* dump the samples, or throw them away: not both */
	if (dir && (r = gc_dump_path(dir, name, path, sizeof(path))) < 0)
		return r;

	/* gc_half_created() takes the gc lock by it: listed for fork() children (fork.c). */
	int fd;
	struct stat st;
	struct cistern__lockfd lf;
	r = cistern__lockfd_open_existing(&lf, &fd, NULL, name, dry ? O_RDONLY : O_RDWR, &st);
	if (r < 0)
		return r;
	/* A dry run answers what the real one would: another user's object is refused. */
	r = cistern__owner_check(&st, any_owner);
	if (r < 0) {
		cistern__lockfd_close(&lf);
		return r;
	}
	struct cistern_hdr copy;
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
	r = cistern__open_mapped(name, dry, any_owner, &c);
	if (r < 0)
		return r;
	struct gc_tally t = {c->policy->snap, rep};
	/* Only the restore's own mark says so: a copy under another name is a segment. */
	bool restoring = cistern__restore_unfinished(c->hdr, name);
	uint32_t live, dead;
	count_procs(c, &live, &dead);
	rep->live_procs = live;
	int why = 0;
	if (live == 0 && restoring)
		why = 3; /* the restorer stays attached until the rename: it is gone */
	else if (live == 0 && dead > 0)
		why = 1;
	if (!why) {
		gc_reclaim(c, dry, &t);
		cistern_detach(c);
		return 0;
	}
	if (!dry) {
		r = gc_lock_exclusive(c->fd);
		/* Under the lock nobody can be joining: re-check that nobody lives. */
		if (r == 0 && live_entries(c->fd, c->fixed.procs_count) != 0)
			r = -EBUSY;
	}
	if (r < 0) {
		/* Someone is attaching (it sweeps as it joins): it is not garbage any more. */
		cistern_detach(c);
		return r == -EBUSY ? 0 : r;
	}
	/*
	 * A stale segment may still hold committed samples nobody read: they
	 * are never thrown away unasked. Counted under the lock, where nobody
	 * can attach and put more. Kept, it is left as it is, dead attachments
	 * and all (whoever attaches next reclaims them), so that it still reads
	 * as stale to `cistern ls` and to a later gc told to dump or discard it.
	 */
	if (why == 1 && (rep->unread = unread_samples(c, t.so)) > 0) {
		if (dir) {
			why = 4;
		} else if (discard) {
			why = 5;
		} else {
			rep->kept = 1;
			gc_reclaim(c, true, &t); /* counted, not reclaimed: they stay with it */
			cistern_detach(c);
			return 0;
		}
	}
	if (why == 4) {
		if (dry)
			r = gc_dump_possible(dir, path);
		else
			r = gc_dump(c, name, path, rep);
		if (r < 0) {
			rep->kept = 1; /* no dump, no removal: the samples stay where they are */
			gc_reclaim(c, true, &t);
			cistern_detach(c);
			return r;
		}
	}
	/* Going: reclaimed first all the same, so that the report says what the dead held. */
	gc_reclaim(c, dry, &t);
	if (!dry)
		r = unlink_same(shm, c->fd);
	if (r == 0)
		rep->removed = why;
	cistern_detach(c);
	return r;
}
