/* SPDX-License-Identifier: MIT */
/*
 * gc.c - removing a segment, and garbage collection: the reclaim of dead
 * attachments from outside, the removal of a segment nobody alive uses, and
 * the dump of what it held first (cistern_gc_dump_to()).
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
#include "sys/clock.h"
#include "policy/reservoir/pins.h"
#include "core/policy.h"
#include "tier/cold.h"
#include "admin/dump.h"
#include "admin/inspect.h"
#include "cistern/admin.h"

#define SHM_DIR "/dev/shm"

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
	r = cistern__probe_header(fd, &copy, &st);
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
	if (r == 0 && tiered) {
		r = cistern__cold_unlink(copy.cold_dir, name);
		if (r == -ENOENT)
			r = 0; /* a cold file already gone */
	}
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
	/* [entry-active] acquire, as in cistern__count_procs(). */
	for (uint32_t i = 0; i < c->fixed.procs_count; i++)
		if (atomic_load_explicit(&procs[i].state, memory_order_acquire) ==
			    CISTERN_PROC_ACTIVE &&
		    !cistern__entry_alive_here(c, i))
			tally_entry(c, i, t);
}

static int gc_half_created(const char *shm, int fd, const struct stat *st, unsigned flags,
			   struct cistern_gc_report *rep)
{
	int64_t age_ns = cistern__now_ns(CLOCK_REALTIME) - (int64_t)cistern__mtime_ns(st);
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
		if (cistern__probe_header(fd, &copy, &now) == -EAGAIN)
			r = unlink_same(shm, fd);
		else
			r = 0, rep->removed = 0;
	}
	if (r < 0)
		rep->removed = 0;
	return r == -EBUSY ? 0 : r;
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
	/* A cold tier's samples are the segment's too. */
	const struct cistern__tiering *tg = c->policy->tiering;
	if (c->fixed.cold_slots && tg && tg->unread)
		n += tg->unread(c);
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
	r = cistern__probe_header(fd, &copy, &st);
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
	cistern__count_procs(c, &live, &dead);
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
	/*
	 * The segment first, then its cold file (docs/protocol/tiers.md), named
	 * as the object is (an unfinished restore's is under its temporary name).
	 */
	if (!dry && r == 0 && c->fixed.cold_slots) {
		int cr = cistern__cold_unlink(c->fixed.cold_dir, name);
		r = cr == -ENOENT ? 0 : cr;
	}
	cistern_detach(c);
	return r;
}

/* ---- cold files whose segment is gone ----------------------------------- */

/* The segment name X of an entry named cistern.X.cold, into name; false if it is none. */
static bool cold_file_name(const char *ent, char name[CISTERN_NAME_MAX + 1])
{
	size_t n = strlen(ent);
	const size_t pre = sizeof("cistern.") - 1, suf = sizeof(".cold") - 1;
	if (n <= pre + suf || n - pre - suf > CISTERN_NAME_MAX ||
	    strncmp(ent, "cistern.", pre) != 0 || strcmp(ent + n - suf, ".cold") != 0)
		return false;
	memcpy(name, ent + pre, n - pre - suf);
	name[n - pre - suf] = '\0';
	return cistern_name_valid(name) == 0;
}

/*
 * Why the cold file of segment `name` with nonce `nonce` is garbage: 1 no
 * segment of the name exists; 2 the segment of the name has no cold tier or
 * another nonce. 0 if it is that segment's, or if the segment cannot be
 * judged (being created, damaged, another build's, not ours to read): a
 * file is only removed when it surely belongs to no segment.
 */
static int cold_orphan_why(const char *name, uint64_t nonce)
{
	int fd;
	struct stat st;
	int r = cistern__shm_open_existing(name, O_RDONLY, &fd, &st);
	if (r == -ENOENT)
		return 1;
	if (r < 0)
		return 0;
	struct cistern_hdr copy;
	r = cistern__probe_header(fd, &copy, &st);
	close(fd);
	if (r < 0)
		return 0;
	return copy.cold_slots && copy.cold_nonce == nonce ? 0 : 2;
}

/* Whether the name ent in dfd is still the file st describes. */
static bool same_file(int dfd, const char *ent, const struct stat *st)
{
	struct stat now;
	return fstatat(dfd, ent, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st->st_dev &&
	       now.st_ino == st->st_ino;
}

/* Judge one entry of a cold directory; 1 if it is garbage (rep says what was done), else 0. */
static int gc_cold_entry(int dfd, const char *dir, const char *ent, unsigned flags,
			 struct cistern_gc_cold_report *rep)
{
	memset(rep, 0, sizeof(*rep));
	if (!cold_file_name(ent, rep->name))
		return 0;
	/* Never through a symbolic link, and never another user's file unless asked. */
	struct stat st;
	if (fstatat(dfd, ent, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return 0;
	if (st.st_uid != geteuid() && !(flags & CISTERN_GC_ANY_OWNER))
		return 0;
	/*
	 * A file written within the grace period may be a create or a restore
	 * under way: create writes the header last, and a restore writes the
	 * header again just before it renames the file and then its segment.
	 */
	int64_t age_ns = cistern__now_ns(CLOCK_REALTIME) - (int64_t)cistern__mtime_ns(&st);
	if (age_ns < (int64_t)CISTERN_GC_GRACE_S * 1000000000)
		return 0;
	int fd = openat(dfd, ent, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat fst;
	struct cistern__cold_id id;
	int r = fstat(fd, &fst) < 0 ? -errno : cistern__cold_header(fd, &id);
	close(fd);
	if (r == -ESTALE)
		rep->why = 3; /* no whole header: a create that died half-way */
	else if (r < 0 || fst.st_dev != st.st_dev || fst.st_ino != st.st_ino)
		return 0;
	else if (strcmp(id.name, rep->name) != 0)
		rep->why = 3; /* it names another segment: no segment opens it under this name */
	else
		rep->why = cold_orphan_why(rep->name, id.nonce);
	if (!rep->why)
		return 0;
	snprintf(rep->path, sizeof(rep->path), "%s/%s", dir, ent);
	rep->removed = 1;
	if (flags & CISTERN_GC_DRY_RUN)
		return 1;
	/* Between our checks and the unlink someone may have put another file there. */
	if (!same_file(dfd, ent, &st)) {
		rep->removed = 0;
		return 0;
	}
	if (unlinkat(dfd, ent, 0) < 0) {
		rep->removed = 0;
		rep->error = -errno;
	}
	return 1;
}

int cistern_gc_cold(const char *dir, unsigned flags, cistern_gc_cold_fn fn, void *arg)
{
	if (!dir || !dir[0])
		return -EINVAL;
	if (flags & ~(unsigned)(CISTERN_GC_DRY_RUN | CISTERN_GC_ANY_OWNER))
		return -EINVAL;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	DIR *d = fdopendir(dfd);
	if (!d) {
		int r = -errno;
		close(dfd);
		return r;
	}
	int found = 0;
	struct dirent *e;
	struct cistern_gc_cold_report rep;
	while ((e = readdir(d)) != NULL) {
		if (gc_cold_entry(dirfd(d), dir, e->d_name, flags, &rep) == 0)
			continue;
		if (found < INT32_MAX)
			found++;
		if (fn)
			fn(&rep, arg);
	}
	closedir(d);
	return found;
}
