/* SPDX-License-Identifier: MIT */
/*
 * test_cold_dump.c - dump, restore and gc of segments with a cold tier
 * (lib/admin/, lib/policy/reservoir/tiered.c; docs/protocol/tiers.md): a
 * round trip keeps every hot and cold sample with its meta and seen count,
 * a dump without a tier keeps the older format, a damaged cold section or a
 * cold directory that cannot take the tier leaves nothing behind, and gc
 * removes a cold file whose segment is gone and only such a file.
 *
 * The cold files live in a directory under /var/tmp, on a disk file system
 * that takes O_DIRECT (not /dev/shm). The fixture removes it, the segments
 * and the dump files.
 */
#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include "helpers.h"
#include "core/handle.h"
#include "sys/crc32c.h"
#include "dumpfile.h"
#include "cistern/admin.h"
#include "policy/reservoir/reservoir.h"
#include "policy/reservoir/tiered.h"
#include "tier/cold.h"

#define HOT 32
#define COLD 128
#define SLOT 4096
#define PUTS (HOT + 80) /* 80 samples spill to the cold tier */
#define GETS 40

static char dir[64];

static void cold_init(void)
{
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-colddump-XXXXXX");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void cold_fini(void)
{
	seg_fini();
	if (dir[0]) {
		/* The subdirectories some tests make their cold directory. */
		static const char *const subs[] = {"cold", "gone", "mnt"};
		for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
			char sub[128];
			snprintf(sub, sizeof(sub), "%s/%s", dir, subs[i]);
			seg_empty_dir(sub);
			rmdir(sub);
		}
		seg_empty_dir(dir);
		rmdir(dir);
	}
}

TestSuite(cold_dump, .init = cold_init, .fini = cold_fini, .timeout = 120);
TestSuite(cold_gc, .init = cold_init, .fini = cold_fini, .timeout = 60);

static struct cistern_config tiered_cfg(const char *cold_dir)
{
	return (struct cistern_config){
		.policy = CISTERN_RESERVOIR,
		.slot_size = SLOT,
		.slot_count = HOT,
		.watermark = 1,
		.seed = 11,
		.cold_slots = COLD,
		.cold_dir = cold_dir,
	};
}

static size_t len_of(uint32_t step)
{
	return 1 + (step * 397u) % SLOT;
}

/*
 * In a child process: attach to `name`, put PUTS samples (sample i: sim 5,
 * step i, len_of(i) bytes of fill_payload(.., 5, i)), then take and release
 * GETS single samples, so that GETS reads are counted in all. Exits 0 if all
 * went well.
 */
static void producer_child(const char *name)
{
	struct cistern *c;
	if (cistern_attach(name, &c) != 0)
		_exit(2);
	static uint8_t buf[SLOT];
	for (uint32_t i = 0; i < PUTS; i++) {
		fill_payload(buf, len_of(i), 5, i);
		struct cistern_meta m = {.sim_id = 5, .time_step = i};
		if (cistern_put(c, buf, len_of(i), &m, 0) != 0)
			_exit(3);
	}
	for (int k = 0; k < GETS; k++) {
		struct cistern_sample s;
		if (cistern_acquire(c, &s, 2000) != 0 || cistern_release(c, &s) != 0)
			_exit(4);
	}
	_exit(cistern_detach(c) == 0 ? 0 : 5);
}

/* A tiered segment under tag, filled by a child process; its name. */
static const char *filled_source(const char *tag, const char *cold_dir)
{
	struct cistern *c = seg_create(tag, tiered_cfg(cold_dir));
	const char *name = seg_name_of(c);
	pid_t pid = fork_child();
	if (pid == 0)
		producer_child(name);
	cr_assert_eq(reap_status(pid), 0, "the producer failed");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.population, PUTS);
	cr_assert_gt(st.cold_population, 0, "nothing spilled to the cold tier");
	return name;
}

/* One sample of a dump file, hot or cold, as its record says. */
struct rec {
	uint64_t id, len;
	uint32_t seen, sim, step;
	uint32_t crc;
	bool cold;
};

static int by_id(const void *a, const void *b)
{
	uint64_t x = ((const struct rec *)a)->id, y = ((const struct rec *)b)->id;
	return x < y ? -1 : x > y;
}

/* Every record of dump file `path`, hot and cold, sorted by id, into *out: how many. */
static size_t records_of(const char *path, struct rec **out)
{
	struct dumpfile f;
	dumpfile_load(&f, path);
	size_t n = (size_t)(f.m.sample_count + f.m.cold_count), k = 0;
	struct rec *v = calloc(n ? n : 1, sizeof(*v));
	cr_assert_not_null(v);
	for (uint64_t i = 0; i < f.m.sample_count; i++) {
		const uint8_t *p = dumpfile_record(&f, i);
		struct dump_rec r;
		dump_rec_decode(p, f.m.version, &r);
		v[k++] = (struct rec){
			r.id,
			r.len,
			r.seen,
			r.sim_id,
			r.time_step,
			cistern__crc32c(0, p + dump_rec_hdr(f.m.version), (size_t)r.len),
			false};
	}
	if (f.m.cold_count) {
		uint64_t off = f.m.cold_off + COLD_HDR +
			       cistern__align_up(get32(f.b + f.m.cold_off + 32), 8);
		for (uint64_t i = 0; i < f.m.cold_count; i++) {
			struct dump_cold_rec r;
			dump_cold_rec_decode(f.b + off, &r);
			uint32_t key[2];
			memcpy(key, r.meta, sizeof(key));
			v[k++] = (struct rec){
				r.id,   r.len,
				r.seen, key[0],
				key[1], cistern__crc32c(0, f.b + off + COLD_REC_HDR, (size_t)r.len),
				true};
			off += COLD_REC_HDR + cistern__align_up((size_t)r.len, 8);
		}
	}
	free(f.b);
	qsort(v, k, sizeof(*v), by_id);
	*out = v;
	return k;
}

/* Whether a file named cistern.restore-*.cold or the cold file of `name` is in d. */
static int cold_files_in(const char *d, const char *name)
{
	DIR *dp = opendir(d);
	if (!dp)
		return -1;
	char want[128];
	snprintf(want, sizeof(want), "cistern.%s.cold", name ? name : "");
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dp)) != NULL)
		n += strncmp(e->d_name, "cistern.restore-", 16) == 0 ||
		     (name && strcmp(e->d_name, want) == 0);
	closedir(dp);
	return n;
}

static int temp_segments_left(void)
{
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "cistern.restore-%d-", (int)getpid());
	DIR *d = opendir("/dev/shm");
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

/* Whether segment `name` exists. */
static bool segment_exists(const char *name)
{
	char path[128];
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	return access(path, F_OK) == 0;
}

/* ---- dump and restore -------------------------------------------------- */

Test(cold_dump, a_round_trip_keeps_every_hot_and_cold_sample_its_meta_and_seen_count)
{
	const char *name = filled_source("cd-rt", dir);
	const char *path = seg_dump_path("cd-rt"), *copy = seg_name("cd-rt2");
	struct cistern_dump_info info;
	int r = cistern_dump(name, path, NULL, NULL, &info);
	cr_assert_eq(r, 0, "dump: %s", cistern_strerror(r));
	cr_assert_eq(info.format_version, 3);
	cr_assert_eq(info.samples, PUTS, "%lu samples dumped", (unsigned long)info.samples);
	cr_assert_gt(info.cold_samples, 0);
	cr_assert_eq(info.skipped, 0);

	/* Every sample the producer put, whole, and every read it counted. */
	struct rec *a;
	size_t n = records_of(path, &a);
	cr_assert_eq(n, PUTS);
	uint64_t seen = 0;
	uint8_t buf[SLOT];
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(a[i].sim, 5);
		cr_assert_lt(a[i].step, PUTS);
		cr_assert_eq(a[i].len, len_of(a[i].step), "step %u: length", a[i].step);
		fill_payload(buf, a[i].len, 5, a[i].step);
		cr_assert_eq(a[i].crc, cistern__crc32c(0, buf, (size_t)a[i].len), "step %u: bytes",
			     a[i].step);
		if (i)
			cr_assert_neq(a[i].step, a[i - 1].step);
		seen += a[i].seen;
	}
	cr_assert_eq(seen, GETS, "%lu reads counted in the dump", (unsigned long)seen);

	struct cistern_dump_info rinfo;
	r = cistern_restore(path, copy, NULL, NULL, &rinfo);
	cr_assert_eq(r, 0, "restore: %s", cistern_strerror(r));
	cr_assert_eq(cold_files_in(dir, copy), 1, "the copy's cold file is not (only) there");
	cr_assert_eq(temp_segments_left(), 0);

	/* The copy holds the same samples in the same tiers, with the same seen counts. */
	const char *path2 = seg_dump_path("cd-rt2");
	r = cistern_dump(copy, path2, NULL, NULL, &info);
	cr_assert_eq(r, 0, "dump of the copy: %s", cistern_strerror(r));
	struct rec *b;
	cr_assert_eq(records_of(path2, &b), n);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(b[i].id, a[i].id);
		cr_assert_eq(b[i].len, a[i].len);
		cr_assert_eq(b[i].seen, a[i].seen, "id %lu: seen %u, was %u",
			     (unsigned long)a[i].id, b[i].seen, a[i].seen);
		cr_assert_eq(b[i].step, a[i].step);
		cr_assert_eq(b[i].crc, a[i].crc);
		cr_assert_eq(b[i].cold, a[i].cold, "id %lu changed tier", (unsigned long)a[i].id);
	}
	free(a);
	free(b);

	/* And readers get every one of them back from the restored cold file. */
	struct cistern *c;
	cr_assert_eq(cistern_attach(copy, &c), 0);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.population, PUTS);
	cr_assert_eq(st.cold_population, rinfo.cold_samples);
	cr_assert_eq(cistern_close_reception(c), 0);
	uint8_t got[PUTS] = {0};
	for (uint32_t k = 0; k < PUTS; k++) {
		struct cistern_sample s;
		r = cistern_acquire(c, &s, 2000);
		cr_assert_eq(r, 0, "acquire %u: %s", k, cistern_strerror(r));
		cr_assert_lt(s.meta.time_step, PUTS);
		cr_assert_eq(got[s.meta.time_step]++, 0, "step %u twice", s.meta.time_step);
		cr_assert_eq(s.len, len_of(s.meta.time_step));
		cr_assert(check_payload(s.data, s.len, 5, s.meta.time_step));
		cr_assert_eq(cistern_release(c, &s), 0);
	}
	cistern_detach(c);
}

Test(cold_dump, a_dump_without_a_tier_is_format_2_and_restores)
{
	struct cistern_config cfg = tiered_cfg(NULL);
	cfg.cold_slots = 0;
	struct cistern *c = seg_create("cd-old", cfg);
	cr_assert_eq(put_length_ramp(c, HOT, SLOT, 4), 0);
	const char *path = seg_dump_path("cd-old"), *copy = seg_name("cd-old2");
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	/* What builds before the cold section read: format 2, nothing past byte 471 of the meta. */
	struct dumpfile f;
	dumpfile_load(&f, path);
	cr_assert_eq(get32(f.b + 8), 2);
	const uint8_t *mb = f.b + f.size - TRAILER_SIZE - META_SIZE;
	for (int i = 472; i < 508; i++)
		cr_assert_eq(mb[i], 0, "meta byte %d is set", i);
	free(f.b);
	struct cistern_dump_info info;
	int r = cistern_restore(path, copy, NULL, NULL, &info);
	cr_assert_eq(r, 0, "restore: %s", cistern_strerror(r));
	cr_assert_eq(info.format_version, 2);
	cr_assert_eq(info.samples, HOT);
	cr_assert_eq(info.cold_samples, 0);
	cr_assert_eq(info.config.cold_slots, 0);
	cr_assert_null(info.config.cold_dir);
}

/* Flip the first payload byte of the first cold record. */
static void flip_cold_payload(const char *path)
{
	struct dumpfile f;
	dumpfile_load(&f, path);
	cr_assert_gt(f.m.cold_count, 0);
	uint64_t off = f.m.cold_off + COLD_HDR +
		       cistern__align_up(get32(f.b + f.m.cold_off + 32), 8);
	cr_assert_gt(get64(f.b + off + 8), 0);
	free(f.b);
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	uint8_t b;
	cr_assert_eq(pread(fd, &b, 1, (off_t)(off + COLD_REC_HDR)), 1);
	b ^= 0x40;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)(off + COLD_REC_HDR)), 1);
	close(fd);
}

Test(cold_dump, check_and_restore_refuse_a_damaged_cold_section_and_leave_nothing)
{
	const char *name = filled_source("cd-bad", dir);
	const char *path = seg_dump_path("cd-bad"), *copy = seg_name("cd-bad2");
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_dump_verify(path, NULL), 0);
	flip_cold_payload(path);
	cr_assert_eq(cistern_dump_verify(path, NULL), -EBADMSG);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), -EBADMSG);
	cr_assert(!segment_exists(copy));
	cr_assert_eq(temp_segments_left(), 0);
	cr_assert_eq(cold_files_in(dir, copy), 0, "a cold file was left");
}

Test(cold_dump, a_missing_cold_dir_refuses_the_restore_and_leaves_nothing)
{
	char sub[128];
	snprintf(sub, sizeof(sub), "%s/gone", dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	const char *name = filled_source("cd-nodir", sub);
	const char *path = seg_dump_path("cd-nodir"), *copy = seg_name("cd-nodir2");
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_unlink(name), 0);
	cr_assert_eq(rmdir(sub), 0, "the source's cold file was left: %s", strerror(errno));
	struct cistern_dump_info info;
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, &info), -ENOENT);
	cr_assert_str_eq(info.cold_dir, sub);
	cr_assert(!segment_exists(copy));
	cr_assert_eq(temp_segments_left(), 0);
}

/*
 * In a child of its own mount namespace, mount `fstype` with `opts` on
 * directory mnt (made if missing) and run fn there: its code, or 100 + step
 * if the namespace or mount could not be made.
 */
static int in_mount(const char *fstype, const char *opts, const char *mnt,
		    int (*fn)(const char *mnt))
{
	pid_t pid = fork_child();
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) < 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
			_exit(101);
		if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(102);
		if (mkdir(mnt, 0700) < 0 && errno != EEXIST)
			_exit(103);
		if (mount("cistern-test", mnt, fstype, 0, opts) < 0)
			_exit(104);
		int code = fn(mnt);
		umount2(mnt, MNT_DETACH);
		_exit(code);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "the child died of signal %d", WTERMSIG(st));
	return WEXITSTATUS(st);
}

/* in_mount() of a 1 MiB tmpfs on a fresh directory. */
static int in_small_tmpfs(int (*fn)(const char *mnt))
{
	char mnt[128];
	snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
	int code = in_mount("tmpfs", "size=1m", mnt, fn);
	rmdir(mnt);
	return code;
}

/* The dump and the name of restore_without_direct_io(), set before the child forks. */
static const char *nodirect_dump, *nodirect_copy;

static int restore_without_direct_io(const char *mnt)
{
	(void)mnt;
	if (cistern_restore(nodirect_dump, nodirect_copy, NULL, NULL, NULL) != -EINVAL)
		return 1;
	if (segment_exists(nodirect_copy) || temp_segments_left() != 0)
		return 2;
	if (cold_files_in(mnt, nodirect_copy) != 0)
		return 3;
	return 0;
}

Test(cold_dump, a_cold_dir_without_direct_io_refuses_the_restore_and_leaves_nothing)
{
	char sub[128];
	snprintf(sub, sizeof(sub), "%s/cold", dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	const char *name = filled_source("cd-ramfs", sub);
	nodirect_dump = seg_dump_path("cd-ramfs");
	nodirect_copy = seg_name("cd-ramfs2");
	cr_assert_eq(cistern_dump(name, nodirect_dump, NULL, NULL, NULL), 0);
	/* The same path, now a ramfs: a file system without O_DIRECT. */
	int code = in_mount("ramfs", "", sub, restore_without_direct_io);
	cr_assert_lt(code, 100, "could not mount a ramfs (step %d)", code - 100);
	cr_assert_eq(code, 0, "check %d failed", code);
}

/*
 * A tiered segment whose cold file fits the small disk, dumped; the disk
 * then filled by another file; the restore must fail for space and leave
 * neither segment nor cold file.
 */
static int restore_on_a_full_disk(const char *mnt)
{
	char name[64], copy[64], path[128], filler[256];
	snprintf(name, sizeof(name), "cd-full-%d", (int)getpid());
	snprintf(copy, sizeof(copy), "cd-full2-%d", (int)getpid());
	snprintf(path, sizeof(path), "%s/full.dump", dir);
	struct cistern_config cfg = tiered_cfg(mnt);
	cfg.slot_size = 65536;
	cfg.slot_count = 4;
	cfg.cold_slots = 8; /* 516 KiB of a 1 MiB file system */
	struct cistern *c;
	if (cistern_create(name, &cfg, &c) != 0)
		return 1;
	static uint8_t buf[65536];
	int code = 0;
	for (uint32_t i = 0; i < 10 && !code; i++) {
		fill_payload(buf, sizeof(buf), 6, i);
		struct cistern_meta m = {.time_step = i};
		if (cistern_put(c, buf, sizeof(buf), &m, 0) != 0)
			code = 2;
	}
	struct cistern_dump_info info;
	if (!code && (cistern_dump(name, path, NULL, NULL, &info) != 0 || info.cold_samples == 0))
		code = 3;
	cistern_detach(c);
	cistern_unlink(name);
	/* Fill the disk: a file grows until the disk is full, leaving less than the tier. */
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (!code && fd < 0)
		code = 4;
	memset(buf, 1, sizeof(buf));
	while (!code && write(fd, buf, sizeof(buf)) > 0)
		;
	if (fd >= 0)
		close(fd);
	/* The space a cold file would take is gone: an error, and nothing left. */
	int r = code ? 0 : cistern_restore(path, copy, NULL, NULL, NULL);
	if (!code && r != -ENOSPC)
		code = 5;
	if (!code && segment_exists(copy))
		code = 6;
	if (!code && (temp_segments_left() != 0 || cold_files_in(mnt, copy) != 0))
		code = 7;
	if (r == 0)
		cistern_unlink(copy);
	unlink(filler);
	unlink(path);
	return code;
}

Test(cold_dump, a_full_disk_refuses_the_restore_and_leaves_nothing)
{
	int code = in_small_tmpfs(restore_on_a_full_disk);
	cr_assert_lt(code, 100, "could not mount a small tmpfs (step %d)", code - 100);
	cr_assert_eq(code, 0, "check %d failed", code);
}

/* ---- gc of cold files ---------------------------------------------------- */

/* Age a file past gc's grace period. */
static void age(const char *path)
{
	struct timespec t[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
	cr_assert_eq(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0, "%s: %s", path,
		     strerror(errno));
}

/*
 * A tiered segment made under tag, then its shm object removed without its
 * cold file (as a process killed between the two unlinks of rm leaves it):
 * the cold file's path into path.
 */
static void orphan(const char *tag, char *path, size_t cap)
{
	struct cistern *c = seg_create(tag, tiered_cfg(dir));
	const char *name = seg_name_of(c);
	cistern__cold_path(path, cap, dir, name);
	seg_detach(c);
	char shm[96];
	snprintf(shm, sizeof(shm), "/cistern.%s", name);
	cr_assert_eq(shm_unlink(shm), 0);
	age(path);
}

/* What a gc of dir reported: the paths, one a line. */
struct found {
	char text[4096];
	int n;
};

static void note(const struct cistern_gc_cold_report *rep, void *arg)
{
	struct found *f = arg;
	size_t k = strlen(f->text);
	snprintf(f->text + k, sizeof(f->text) - k, "%s %d %d\n", rep->path, rep->why, rep->removed);
	f->n++;
}

Test(cold_gc, removes_a_cold_file_whose_segment_is_gone)
{
	char path[512];
	orphan("cg-orph", path, sizeof(path));
	struct found f = {{0}, 0};
	int r = cistern_gc_cold(dir, 0, note, &f);
	cr_assert_eq(r, 1, "%d found: %s", r, f.text);
	cr_assert_neq(access(path, F_OK), 0, "%s is still there", path);
	char want[600];
	snprintf(want, sizeof(want), "%s 1 1\n", path);
	cr_assert_str_eq(f.text, want);
}

Test(cold_gc, keeps_the_cold_file_of_a_live_segment)
{
	/* Its producer ran in another process and left; the segment stays. */
	const char *name = filled_source("cg-live", dir);
	char path[512];
	cistern__cold_path(path, sizeof(path), dir, name);
	age(path);
	cr_assert_eq(cistern_gc_cold(dir, 0, NULL, NULL), 0);
	cr_assert_eq(access(path, F_OK), 0, "the live segment's cold file was removed");
	struct cistern *c;
	cr_assert_eq(cistern_attach(name, &c), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 2000), 0);
	cr_assert_eq(cistern_release(c, &s), 0);
	cistern_detach(c);
}

Test(cold_gc, removes_a_cold_file_whose_segment_is_another_of_the_same_name)
{
	/* The segment was made again under the name: the old file has the old nonce. */
	struct cistern_config cfg = tiered_cfg(dir);
	struct cistern *c = seg_create("cg-again", cfg);
	const char *name = seg_name_of(c);
	char path[512], aside[600];
	cistern__cold_path(path, sizeof(path), dir, name);
	snprintf(aside, sizeof(aside), "%s.aside", path);
	cr_assert_eq(rename(path, aside), 0);
	seg_drop(c);
	cfg.cold_slots = 0;
	cfg.cold_dir = NULL;
	struct cistern *again;
	cr_assert_eq(cistern_create(name, &cfg, &again), 0);
	seg_keep(name, again);
	cr_assert_eq(rename(aside, path), 0);
	age(path);
	struct found f = {{0}, 0};
	cr_assert_eq(cistern_gc_cold(dir, 0, note, &f), 1, "%s", f.text);
	cr_assert_neq(access(path, F_OK), 0);
	cr_assert(strstr(f.text, " 2 1\n"), "%s", f.text);
}

Test(cold_gc, a_dry_run_reports_what_the_real_run_removes_and_removes_nothing)
{
	char a[512], b[512], link_path[600];
	orphan("cg-dry1", a, sizeof(a));
	orphan("cg-dry2", b, sizeof(b));
	const char *live = filled_source("cg-dry3", dir);
	char live_path[512];
	cistern__cold_path(live_path, sizeof(live_path), dir, live);
	age(live_path);
	/* A link under a cold file's name is never followed nor removed. */
	snprintf(link_path, sizeof(link_path), "%s/cistern.cg-link.cold", dir);
	cr_assert_eq(symlink(a, link_path), 0);
	struct found dry = {{0}, 0}, real = {{0}, 0};
	cr_assert_eq(cistern_gc_cold(dir, CISTERN_GC_DRY_RUN, note, &dry), 2, "%s", dry.text);
	cr_assert_eq(access(a, F_OK), 0);
	cr_assert_eq(access(b, F_OK), 0);
	cr_assert_eq(cistern_gc_cold(dir, 0, note, &real), 2, "%s", real.text);
	/* Both runs found the same files; only the real one removed them. */
	cr_assert_neq(access(a, F_OK), 0);
	cr_assert_neq(access(b, F_OK), 0);
	cr_assert_eq(access(live_path, F_OK), 0);
	struct stat st;
	cr_assert_eq(lstat(link_path, &st), 0, "the link was removed");
	cr_assert_str_eq(dry.text, real.text);
	unlink(link_path);
}

/*
 * A tiered segment made under tag whose only producer put HOT + 10 samples
 * (10 of them spilled to the cold tier) and was killed: stale, every sample
 * unread. Its name; the cold file's path into path.
 */
static const char *stale_tiered(const char *tag, char *path, size_t cap)
{
	struct cistern *c = seg_create(tag, tiered_cfg(dir));
	const char *name = seg_name_of(c);
	cistern__cold_path(path, cap, dir, name);
	seg_detach(c);
	pid_t pid = spawn_filler(name, HOT + 10);
	cr_assert_gt(pid, 0, "the producer did not start");
	kill_and_reap(pid);
	return name;
}

Test(cold_gc, keeps_a_stale_segment_whose_cold_samples_are_unread)
{
	char path[512];
	const char *name = stale_tiered("cg-stale", path, sizeof(path));
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.kept, 1);
	cr_assert_eq(rep.unread, HOT + 10, "%lu unread", (unsigned long)rep.unread);
	cr_assert(segment_exists(name));
	cr_assert_eq(access(path, F_OK), 0);
}

Test(cold_gc, removes_the_cold_file_with_a_stale_segment_it_removes)
{
	char path[512];
	const char *name = stale_tiered("cg-disc", path, sizeof(path));
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, CISTERN_GC_DISCARD, &rep), 0);
	cr_assert_eq(rep.removed, 5);
	cr_assert(!segment_exists(name));
	cr_assert_neq(access(path, F_OK), 0, "the cold file outlived its segment");
}

Test(cold_gc, dump_to_saves_the_cold_samples_of_a_stale_segment)
{
	char path[512];
	const char *name = stale_tiered("cg-dumpto", path, sizeof(path));
	const char *d = seg_dir("cg-dumpto");
	struct cistern_gc_report rep;
	int r = cistern_gc_dump_to(name, d, 0, &rep);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	cr_assert_eq(rep.removed, 4);
	cr_assert_eq(rep.dumped, HOT + 10);
	cr_assert_neq(access(path, F_OK), 0, "the cold file outlived its segment");
	char file[600];
	snprintf(file, sizeof(file), "%s/%s.dump", d, name);
	struct cistern_dump_info info;
	cr_assert_eq(cistern_dump_verify(file, &info), 0);
	/* A spill moves HOT / 4 samples here: the 10 puts past the hot arena made two. */
	cr_assert_eq(info.cold_samples, 2 * (HOT / 4));
}

Test(cold_dump, a_segment_others_may_write_is_dumped_whole_without_a_mapping)
{
	/* Others may write it, so others may shrink it: the dump reads it by pread(). */
	const char *name = filled_source("cd-copied", dir);
	char shm[128];
	snprintf(shm, sizeof(shm), "/dev/shm/cistern.%s", name);
	cr_assert_eq(chmod(shm, 0666), 0);
	struct cistern *v;
	cr_assert_eq(cistern_open_readonly(name, &v), 0);
	cr_assert(v->copied, "the segment was mapped");
	cistern_detach(v);
	const char *path = seg_dump_path("cd-copied"), *ref = seg_dump_path("cd-copied-ref");
	struct cistern_dump_info info;
	int r = cistern_dump(name, path, NULL, NULL, &info);
	cr_assert_eq(r, 0, "dump: %s", cistern_strerror(r));
	cr_assert_eq(info.samples, PUTS);
	cr_assert_gt(info.cold_samples, 0);
	/* The same records as a dump through a mapping. */
	cr_assert_eq(chmod(shm, 0600), 0);
	cr_assert_eq(cistern_dump(name, ref, NULL, NULL, NULL), 0);
	struct rec *a, *b;
	cr_assert_eq(records_of(path, &a), PUTS);
	cr_assert_eq(records_of(ref, &b), PUTS);
	for (size_t i = 0; i < PUTS; i++)
		cr_assert(a[i].id == b[i].id && a[i].seen == b[i].seen && a[i].crc == b[i].crc &&
				  a[i].cold == b[i].cold,
			  "record %zu differs", i);
	free(a);
	free(b);
}

/*
 * Leave segment c as a spiller killed between the publish of its cold copy
 * and the release of its hot slot leaves it: attachment `owner` (dead) has
 * a live spill note, the hot slot holds the sample EVICTING(owner), and the
 * cold entry holds the same id, published. Returns the sample's id.
 */
static uint64_t forge_spilled_twice(struct cistern *c, uint32_t owner)
{
	char *tier = (char *)c->hdr + c->fixed.cold_off;
	struct cistern__spill_note *nt =
		(struct cistern__spill_note *)(tier + sizeof(struct cistern__tier_shm)) +
		(owner - 1);
	size_t notes = (c->fixed.procs_count * sizeof(*nt) + CISTERN_CACHELINE - 1) /
		       CISTERN_CACHELINE * CISTERN_CACHELINE;
	struct cistern__cold_ent *E =
		(struct cistern__cold_ent *)(tier + sizeof(struct cistern__tier_shm) + notes);
	uint64_t j = 0;
	while (j < c->fixed.cold_slots &&
	       cistern__cold_state(atomic_load(&E[j].word)) != CISTERN__COLD_HELD)
		j++;
	cr_assert_lt(j, c->fixed.cold_slots, "no cold sample");
	struct cistern_slotmeta *m = cistern__slotmeta(c, 0);
	uint64_t hw = atomic_load(&m->word);
	cr_assert_eq(sw_state(hw), RS_HELD);
	/* The hot slot holds the cold sample's id, being moved by the dead spiller. */
	m->sample_id = E[j].id;
	atomic_store(&m->word, sw_make(sw_pos(hw), RS_EVICTING, owner));
	nt->cold = j;
	nt->n = 1;
	atomic_store(&nt->live, 2);
	return E[j].id;
}

Test(cold_gc, a_sample_a_dead_spiller_left_in_both_tiers_is_dumped_once)
{
	struct cistern *c = seg_create("cg-twice", tiered_cfg(dir));
	const char *name = seg_name_of(c);
	pid_t pid = spawn_holder(name, HOLD_NOTHING);
	cr_assert_gt(pid, 0);
	uint32_t owner = 0;
	for (uint32_t i = 0; i < c->fixed.procs_count && !owner; i++)
		if (cistern__procs(c)[i].pid == (uint32_t)pid)
			owner = i + 1;
	cr_assert_neq(owner, 0, "the child's attachment was not found");
	uint8_t buf[64];
	for (uint32_t i = 0; i < HOT + 5; i++) {
		fill_payload(buf, sizeof(buf), 8, i);
		struct cistern_meta m = {.time_step = i};
		cr_assert_eq(cistern_put(c, buf, sizeof(buf), &m, 0), 0);
	}
	kill_and_reap(pid);
	uint64_t id = forge_spilled_twice(c, owner);
	seg_detach(c);
	/* HOT + 5 samples put; the one whose hot copy now holds the cold one's id is gone. */
	const char *d = seg_dir("cg-twice");
	struct cistern_gc_report rep;
	int r = cistern_gc_dump_to(name, d, 0, &rep);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	cr_assert_eq(rep.unread, HOT + 4, "%lu unread", (unsigned long)rep.unread);
	cr_assert_eq(rep.dumped, HOT + 4, "%lu dumped", (unsigned long)rep.dumped);
	char file[600];
	snprintf(file, sizeof(file), "%s/%s.dump", d, name);
	struct rec *v;
	size_t n = records_of(file, &v);
	cr_assert_eq(n, HOT + 4);
	size_t found = 0;
	for (size_t i = 0; i < n; i++) {
		found += v[i].id == id;
		if (i)
			cr_assert_neq(v[i].id, v[i - 1].id, "id %lu twice", (unsigned long)v[i].id);
	}
	cr_assert_eq(found, 1);
	free(v);
}

static void die_now(uint64_t done, uint64_t total, void *arg)
{
	(void)done, (void)total, (void)arg;
	_exit(0);
}

Test(cold_gc, removes_an_abandoned_restore_with_its_cold_file)
{
	const char *name = filled_source("cg-abandon", dir);
	const char *path = seg_dump_path("cg-abandon"), *copy = seg_name("cg-abandon2");
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	/* A restorer that dies once it has read the file, before its renames. */
	pid_t pid = fork_child();
	if (pid == 0) {
		cistern_restore(path, copy, die_now, NULL, NULL);
		_exit(3);
	}
	cr_assert_eq(reap_status(pid), 0, "the restorer did not die where it should");
	char prefix[64], tmp[CISTERN_NAME_MAX + 1] = "";
	snprintf(prefix, sizeof(prefix), "cistern.restore-%d-", (int)pid);
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
			snprintf(tmp, sizeof(tmp), "%s", e->d_name + strlen("cistern."));
	closedir(d);
	cr_assert_neq(tmp[0], '\0', "the restore left no segment");
	seg_keep(seg_adopt(tmp), NULL);
	char cold[512];
	cistern__cold_path(cold, sizeof(cold), dir, tmp);
	cr_assert_eq(access(cold, F_OK), 0, "the restore left no cold file");
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(tmp, 0, &rep), 0);
	cr_assert_eq(rep.removed, 3);
	cr_assert(!segment_exists(tmp));
	cr_assert_neq(access(cold, F_OK), 0, "the abandoned restore's cold file is still there");
	cr_assert(!segment_exists(copy));
}
