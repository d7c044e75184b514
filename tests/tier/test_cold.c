/* SPDX-License-Identifier: MIT */
/*
 * test_cold.c - the cold store (lib/tier/cold.c, lib/sys/uring.c): the cold
 * file, batches of O_DIRECT reads and writes through io_uring, a full disk,
 * the index under SIGKILL, and the CRC check of a read, made at the first
 * read of each write only (docs/protocol/tiers.md).
 *
 * The files live in a directory under /var/tmp, on a disk file system that
 * takes O_DIRECT (not /dev/shm). The fixture removes it, pass or fail.
 */
#include <sched.h>
#include <sys/mount.h>
#include <sys/time.h>

#include "helpers.h"
#include "sys/crc32c.h"
#include "tier/cold.h"

static char dir[64];

static void dir_init(void)
{
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-cold-XXXXXX");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void dir_fini(void)
{
	if (dir[0]) {
		seg_empty_dir(dir);
		rmdir(dir);
	}
}

TestSuite(cold, .init = dir_init, .fini = dir_fini, .timeout = 60);

/* A byte of sample `id` at offset i: a torn or mixed slot does not match. */
static uint8_t pattern(uint64_t id, size_t i)
{
	uint64_t x = id * 0x9e3779b97f4a7c15u + i / 8;
	x ^= x >> 29;
	return (uint8_t)(x >> (8 * (i % 8)));
}

static void fill(uint8_t *p, size_t len, uint64_t id)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern(id, i);
}

static bool matches(const uint8_t *p, size_t len, uint64_t id)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern(id, i))
			return false;
	return true;
}

static void make(struct cistern__cold *c, const char *name, uint32_t slot_bytes, uint64_t n)
{
	int r = cistern__cold_create(c, dir, name, slot_bytes, n, 42);
	cr_assert_eq(r, 0, "create %s/%s: %s", dir, name, strerror(-r));
}

Test(cold, slots_written_in_one_batch_read_back_in_another)
{
	struct cistern__cold c;
	make(&c, "rw", 8192, 16);
	uint8_t *w = cistern__cold_alloc(&c, 16), *r = cistern__cold_alloc(&c, 16);
	for (uint64_t i = 0; i < 16; i++)
		fill(w + i * 8192, 8192, 100 + i);
	struct cistern__io io[16];
	/* Each slot a request of its own, in reverse order. */
	for (unsigned i = 0; i < 16; i++)
		cistern__cold_prep(&c, &io[i], 15 - i, 1, w + (15 - i) * 8192, true);
	cr_assert_eq(cistern__uring_run(io, 16), 0);
	/* All sixteen back with one read. */
	cistern__cold_prep(&c, &io[0], 0, 16, r, false);
	cr_assert_eq(cistern__uring_run(io, 1), 0);
	for (uint64_t i = 0; i < 16; i++)
		cr_assert(matches(r + i * 8192, 8192, 100 + i), "slot %lu differs",
			  (unsigned long)i);
	free(w);
	free(r);
	cistern__cold_close(&c);
}

Test(cold, more_reads_than_the_ring_holds_all_complete)
{
	enum { N = 1000 };
	struct cistern__cold c;
	make(&c, "many", 4096, N);
	uint8_t *w = cistern__cold_alloc(&c, N), *r = cistern__cold_alloc(&c, N);
	for (uint64_t i = 0; i < N; i++)
		fill(w + i * 4096, 4096, i * 7);
	struct cistern__io *io = calloc(N, sizeof(*io));
	cistern__cold_prep(&c, &io[0], 0, N, w, true);
	cr_assert_eq(cistern__uring_run(io, 1), 0);
	cr_assert_gt(N, cistern__uring_depth());
	/* Slot i read into place (i * 389) % N: scattered, all submitted at once. */
	for (unsigned i = 0; i < N; i++)
		cistern__cold_prep(&c, &io[i], (i * 389u) % N, 1, r + (size_t)i * 4096, false);
	cr_assert_eq(cistern__uring_run(io, N), 0);
	for (unsigned i = 0; i < N; i++) {
		cr_assert_eq(io[i].res, 0);
		cr_assert(matches(r + (size_t)i * 4096, 4096, ((i * 389u) % N) * 7),
			  "read %u is not its slot", i);
	}
	free(io);
	free(w);
	free(r);
	cistern__cold_close(&c);
}

Test(cold, reads_started_ahead_are_waited_for_in_any_order)
{
	struct cistern__cold c;
	make(&c, "ahead", 4096, 64);
	uint8_t *w = cistern__cold_alloc(&c, 64), *r = cistern__cold_alloc(&c, 64);
	for (uint64_t i = 0; i < 64; i++)
		fill(w + i * 4096, 4096, i);
	struct cistern__io wio;
	cistern__cold_prep(&c, &wio, 0, 64, w, true);
	cr_assert_eq(cistern__uring_run(&wio, 1), 0);
	struct cistern__io a[32], b[32];
	struct cistern__io_batch ba, bb;
	for (unsigned i = 0; i < 32; i++) {
		cistern__cold_prep(&c, &a[i], i, 1, r + i * 4096, false);
		cistern__cold_prep(&c, &b[i], 32 + i, 1, r + (32 + i) * 4096, false);
	}
	cr_assert_eq(cistern__uring_start(&ba, a, 32), 0);
	cr_assert_eq(cistern__uring_start(&bb, b, 32), 0);
	/* The later batch first: its wait records the earlier one's completions too. */
	cr_assert_eq(cistern__uring_wait(&bb), 0);
	cr_assert_eq(cistern__uring_wait(&ba), 0);
	for (uint64_t i = 0; i < 64; i++)
		cr_assert(matches(r + i * 4096, 4096, i), "slot %lu differs", (unsigned long)i);
	free(w);
	free(r);
	cistern__cold_close(&c);
}

Test(cold, a_batch_polled_until_done_is_whole_and_its_bytes_are_counted)
{
	struct cistern__cold c;
	make(&c, "poll", 4096, 32);
	uint8_t *w = cistern__cold_alloc(&c, 32), *r = cistern__cold_alloc(&c, 32);
	for (uint64_t i = 0; i < 32; i++)
		fill(w + i * 4096, 4096, 7 + i);
	struct cistern__io wio;
	struct cistern__io_batch b;
	struct cistern__cold_io ctr = {0};
	cistern__cold_prep(&c, &wio, 0, 32, w, true);
	cr_assert_eq(cistern__uring_start(&b, &wio, 1), 0);
	/* No wait: each poll records what completed and says whether the batch is done. */
	int res;
	while ((res = cistern__cold_poll(&ctr, &b)) == -EINPROGRESS)
		sched_yield();
	cr_assert_eq(res, 0);
	cr_assert_eq(atomic_load(&ctr.bytes_written), 32 * 4096);
	cr_assert_eq(atomic_load(&ctr.write_wait_ns), 0, "nobody waited");
	cr_assert(cistern__uring_poll(&b), "a done batch stays done");
	cistern__cold_prep(&c, &wio, 0, 32, r, false);
	cr_assert_eq(cistern__uring_run(&wio, 1), 0);
	for (uint64_t i = 0; i < 32; i++)
		cr_assert(matches(r + i * 4096, 4096, 7 + i), "slot %lu differs", (unsigned long)i);
	free(w);
	free(r);
	cistern__cold_close(&c);
}

Test(cold, reads_handed_to_the_kernels_workers_complete_like_the_others)
{
	struct cistern__cold c;
	make(&c, "async", 8192, 64);
	uint8_t *w = cistern__cold_alloc(&c, 64), *r = cistern__cold_alloc(&c, 64);
	for (uint64_t i = 0; i < 64; i++)
		fill(w + i * 8192, 8192, 500 + i);
	struct cistern__io io[64];
	cistern__cold_prep(&c, &io[0], 0, 64, w, true);
	cr_assert_eq(cistern__uring_run(io, 1), 0);
	/* Every other read async, scattered over the file. */
	for (unsigned i = 0; i < 64; i++) {
		cistern__cold_prep(&c, &io[i], (i * 37u) % 64, 1, r + (size_t)i * 8192, false);
		io[i].async = i % 2 == 0;
	}
	cr_assert_eq(cistern__uring_run(io, 64), 0);
	for (unsigned i = 0; i < 64; i++) {
		cr_assert_eq(io[i].res, 0, "read %u: %d", i, io[i].res);
		cr_assert(matches(r + (size_t)i * 8192, 8192, 500 + (i * 37u) % 64),
			  "read %u (async %d) is not its slot", i, io[i].async);
	}
	free(w);
	free(r);
	cistern__cold_close(&c);
}

Test(cold, a_read_past_the_end_fails_alone_in_its_batch)
{
	struct cistern__cold c;
	make(&c, "end", 4096, 4);
	uint8_t *r = cistern__cold_alloc(&c, 4);
	struct cistern__io io[2];
	cistern__cold_prep(&c, &io[0], 0, 1, r, false);
	cistern__cold_prep(&c, &io[1], 10, 1, r + 4096, false);
	cr_assert_eq(cistern__uring_run(io, 2), -EIO);
	cr_assert_eq(io[0].res, 0);
	cr_assert_eq(io[1].res, -EIO);
	free(r);
	cistern__cold_close(&c);
}

Test(cold, a_child_after_fork_uses_a_ring_of_its_own)
{
	struct cistern__cold c;
	make(&c, "fork", 4096, 2);
	uint8_t *w = cistern__cold_alloc(&c, 2);
	fill(w, 8192, 5);
	struct cistern__io io;
	/* The parent's ring exists before the fork. */
	cistern__cold_prep(&c, &io, 0, 1, w, true);
	cr_assert_eq(cistern__uring_run(&io, 1), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		cistern__cold_prep(&c, &io, 1, 1, w + 4096, true);
		_exit(cistern__uring_run(&io, 1) == 0 ? 0 : 1);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's write failed");
	uint8_t *r = cistern__cold_alloc(&c, 2);
	cistern__cold_prep(&c, &io, 0, 2, r, false);
	cr_assert_eq(cistern__uring_run(&io, 1), 0);
	cr_assert(matches(r, 8192, 5));
	free(w);
	free(r);
	cistern__cold_close(&c);
}

Test(cold, open_refuses_a_file_of_another_segment)
{
	struct cistern__cold c, d;
	make(&c, "nonce", 4096, 4);
	cistern__cold_close(&c);
	cr_assert_eq(cistern__cold_open(&d, dir, "nonce", 43), -ESTALE);
	cr_assert_eq(cistern__cold_open(&d, dir, "nonce", 42), 0);
	cr_assert_eq(d.slot_bytes, 4096);
	cr_assert_eq(d.nslots, 4);
	cistern__cold_close(&d);
	cr_assert_eq(cistern__cold_unlink(dir, "nonce"), 0);
	cr_assert_eq(cistern__cold_open(&d, dir, "nonce", 42), -ENOENT);
}

Test(cold, create_refuses_an_existing_file_and_leaves_it)
{
	struct cistern__cold c, d;
	make(&c, "twice", 4096, 4);
	cr_assert_eq(cistern__cold_create(&d, dir, "twice", 4096, 8, 7), -EEXIST);
	cistern__cold_close(&c);
	cr_assert_eq(cistern__cold_open(&d, dir, "twice", 42), 0);
	cistern__cold_close(&d);
}

Test(cold, create_refuses_a_slot_size_off_the_block)
{
	struct cistern__cold c;
	cr_assert_eq(cistern__cold_create(&c, dir, "odd", 5000, 4, 1), -EINVAL);
	cr_assert_eq(cistern__cold_slot_bytes(5000), 8192);
	cr_assert_eq(cistern__cold_slot_bytes(4096), 4096);
}

Test(cold, a_file_over_the_size_limit_gives_efbig_and_leaves_nothing)
{
	struct cistern__cold c;
	/* The default action of SIGXFSZ ends the process; the call should fail instead. */
	signal(SIGXFSZ, SIG_IGN);
	struct rlimit rl = {1 << 20, 1 << 20};
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
	cr_assert_eq(cistern__cold_create(&c, dir, "big", 65536, 64, 1), -EFBIG);
	char path[4096];
	cistern__cold_path(path, sizeof(path), dir, "big");
	cr_assert_eq(access(path, F_OK), -1, "%s was left behind", path);
}

/*
 * In a child of its own mount namespace (a user namespace too when not
 * root), mount `fstype` with `opts` on a fresh directory, run `fn` there and
 * return its result as the child's exit code: 0 passed; 100 + step if the
 * namespace or mount could not be made.
 */
static int in_mount(const char *fstype, const char *opts, int (*fn)(const char *mnt))
{
	pid_t pid = fork_child();
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) < 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
			_exit(101);
		if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(102);
		char mnt[96];
		snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
		if (mkdir(mnt, 0700) < 0)
			_exit(103);
		if (mount("cistern-test", mnt, fstype, 0, opts) < 0)
			_exit(104);
		int code = fn(mnt);
		umount2(mnt, MNT_DETACH);
		rmdir(mnt);
		_exit(code);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "the child died of signal %d", WTERMSIG(st));
	return WEXITSTATUS(st);
}

static int empty_after(const char *mnt)
{
	char path[4096];
	cistern__cold_path(path, sizeof(path), mnt, "full");
	return access(path, F_OK) == 0 ? 3 : 0;
}

static int create_on_small_fs(const char *mnt)
{
	struct cistern__cold c;
	/* 4 MiB of slots on a 1 MiB file system. */
	int r = cistern__cold_create(&c, mnt, "full", 65536, 64, 1);
	if (r != -ENOSPC)
		return 1;
	if (empty_after(mnt))
		return 2;
	/* What fits still works. */
	r = cistern__cold_create(&c, mnt, "full", 65536, 4, 1);
	if (r != 0)
		return 4;
	cistern__cold_close(&c);
	return 0;
}

Test(cold, a_full_disk_gives_enospc_at_create_and_leaves_nothing)
{
	int code = in_mount("tmpfs", "size=1m", create_on_small_fs);
	cr_assert_lt(code, 100, "could not mount a small tmpfs (step %d)", code - 100);
	cr_assert_eq(code, 0, "check %d failed", code);
}

static int create_on_ramfs(const char *mnt)
{
	struct cistern__cold c;
	int r = cistern__cold_create(&c, mnt, "full", 4096, 4, 1);
	if (r != -EINVAL)
		return 1;
	return empty_after(mnt);
}

Test(cold, create_fails_where_io_uring_is_forbidden_and_leaves_no_file)
{
	cr_assert_eq(forbid_io_uring(), 0);
	struct cistern__cold c;
	cr_assert_eq(cistern__cold_create(&c, dir, "nouring", 4096, 4, 42), -ENOSYS);
	char path[128];
	snprintf(path, sizeof(path), "%s/cistern.nouring.cold", dir);
	cr_assert_neq(access(path, F_OK), 0, "%s was left behind", path);
}

Test(cold, a_file_system_without_direct_io_gives_einval)
{
	int code = in_mount("ramfs", "", create_on_ramfs);
	cr_assert_lt(code, 100, "could not mount a ramfs (step %d)", code - 100);
	cr_assert_eq(code, 0, "check %d failed", code);
}

/* ---- the index ---------------------------------------------------------- */

static void publish_one(struct cistern__cold *c, struct cistern__cold_ent *ents, uint64_t slot,
			uint64_t id)
{
	uint8_t *b = cistern__cold_alloc(c, 1);
	fill(b, c->slot_bytes, id);
	cr_assert(cistern__cold_claim(&ents[slot], 1));
	uint32_t len = c->slot_bytes;
	cr_assert_eq(cistern__cold_spill(c, ents, &slot, 1, b, &len, &id), 0);
	free(b);
}

Test(cold, an_unseen_sample_is_not_evicted)
{
	struct cistern__cold c;
	make(&c, "unseen", 4096, 1);
	struct cistern__cold_ent e[1] = {0};
	publish_one(&c, e, 0, 9);
	cr_assert_not(cistern__cold_claim(&e[0], 2));
	atomic_store(&e[0].seen, 1);
	cr_assert(cistern__cold_claim(&e[0], 2));
	cistern__cold_close(&c);
}

Test(cold, a_pinned_sample_is_not_evicted_until_unpinned)
{
	struct cistern__cold c;
	make(&c, "pinned", 4096, 1);
	struct cistern__cold_ent e[1] = {0};
	publish_one(&c, e, 0, 9);
	atomic_store(&e[0].seen, 1);
	uint64_t w;
	cr_assert(cistern__cold_pin(&e[0], 5, &w));
	cr_assert_not(cistern__cold_claim(&e[0], 2));
	cr_assert_eq(cistern__cold_state(atomic_load(&e[0].word)), CISTERN__COLD_HELD);
	cistern__cold_unpin(&e[0], 5);
	cr_assert(cistern__cold_claim(&e[0], 2));
	/* Now WRITING: no new pin. */
	cr_assert_not(cistern__cold_pin(&e[0], 5, &w));
	cistern__cold_close(&c);
}

Test(cold, a_publish_moves_the_generation_on)
{
	struct cistern__cold c;
	make(&c, "gen", 4096, 1);
	struct cistern__cold_ent e[1] = {0};
	publish_one(&c, e, 0, 1);
	uint64_t w1 = atomic_load(&e[0].word);
	atomic_store(&e[0].seen, 1);
	publish_one(&c, e, 0, 2);
	uint64_t w2 = atomic_load(&e[0].word);
	cr_assert_eq(cistern__cold_gen(w2), cistern__cold_gen(w1) + 1);
	cr_assert_eq(e[0].id, 2);
	cistern__cold_close(&c);
}

/* ---- the CRC check of a read ---------------------------------------------- */

/* Read slot `slot` of c into buf (one slot, aligned) while entry e is pinned: its word. */
static uint64_t read_pinned(struct cistern__cold *c, struct cistern__cold_ent *e, uint64_t slot,
			    void *buf)
{
	uint64_t w;
	cr_assert(cistern__cold_pin(e, 3, &w));
	struct cistern__io io;
	cistern__cold_prep(c, &io, slot, 1, buf, false);
	cr_assert_eq(cistern__uring_run(&io, 1), 0);
	cistern__cold_unpin(e, 3);
	return w;
}

/* Change bytes of slot `slot` of the cold file `name` behind the index's back. */
static void corrupt(const struct cistern__cold *c, const char *name, uint64_t slot)
{
	char path[512];
	cr_assert_eq(cistern__cold_path(path, sizeof(path), dir, name), 0);
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	static const char junk[] = "not the bytes written";
	off_t at = (off_t)(CISTERN__COLD_BLOCK + slot * c->slot_bytes + 100);
	cr_assert_eq(pwrite(fd, junk, sizeof(junk), at), (ssize_t)sizeof(junk));
	/* An O_DIRECT read writes the dirty page cache of its range back first; sync all the same. */
	cr_assert_eq(fsync(fd), 0);
	close(fd);
}

Test(cold, a_slot_corrupted_before_its_first_read_fails_the_check_and_stays_unmarked)
{
	struct cistern__cold c;
	make(&c, "crcbad", 4096, 2);
	struct cistern__cold_ent e[2] = {0};
	publish_one(&c, e, 1, 7);
	corrupt(&c, "crcbad", 1);
	uint8_t *b = cistern__cold_alloc(&c, 1);
	uint64_t w = read_pinned(&c, &e[1], 1, b);
	cr_assert_eq(cistern__cold_check(&e[1], w, b, e[1].len), 0);
	cr_assert_eq(atomic_load(&e[1].verified), 0, "a failed check marked the entry");
	/* Each later read is checked too, and fails too. */
	w = read_pinned(&c, &e[1], 1, b);
	cr_assert_eq(cistern__cold_check(&e[1], w, b, e[1].len), 0);
	free(b);
	cistern__cold_close(&c);
}

Test(cold, the_first_good_read_of_a_write_is_checked_and_later_reads_are_not)
{
	struct cistern__cold c;
	make(&c, "crcgood", 4096, 1);
	struct cistern__cold_ent e[1] = {0};
	publish_one(&c, e, 0, 7);
	cr_assert_eq(atomic_load(&e[0].verified), 0, "a new write is unchecked");
	uint8_t *b = cistern__cold_alloc(&c, 1);
	uint64_t w = read_pinned(&c, &e[0], 0, b);
	cr_assert(matches(b, c.slot_bytes, 7));
	cr_assert_eq(cistern__cold_check(&e[0], w, b, e[0].len), 1);
	cr_assert_eq(atomic_load(&e[0].verified), cistern__cold_gen(w) + 1);
	w = read_pinned(&c, &e[0], 0, b);
	cr_assert_eq(cistern__cold_check(&e[0], w, b, e[0].len), 2);
	free(b);
	cistern__cold_close(&c);
}

Test(cold, a_slot_rewritten_after_a_checked_read_is_checked_again_at_its_next_read)
{
	struct cistern__cold c;
	make(&c, "crcagain", 4096, 1);
	struct cistern__cold_ent e[1] = {0};
	publish_one(&c, e, 0, 7);
	uint8_t *b = cistern__cold_alloc(&c, 1);
	uint64_t w = read_pinned(&c, &e[0], 0, b);
	cr_assert_eq(cistern__cold_check(&e[0], w, b, e[0].len), 1);
	atomic_store(&e[0].seen, 1);
	publish_one(&c, e, 0, 8);
	cr_assert_eq(atomic_load(&e[0].verified), 0, "the write kept the mark of the last");
	corrupt(&c, "crcagain", 0);
	w = read_pinned(&c, &e[0], 0, b);
	cr_assert_eq(cistern__cold_check(&e[0], w, b, e[0].len), 0,
		     "the rewritten slot's bad bytes passed");
	free(b);
	cistern__cold_close(&c);
}

Test(cold, a_mark_of_an_older_write_stored_late_does_not_skip_the_check)
{
	struct cistern__cold c;
	make(&c, "crclate", 4096, 1);
	struct cistern__cold_ent e[1] = {0};
	publish_one(&c, e, 0, 7);
	uint64_t old = atomic_load(&e[0].word);
	atomic_store(&e[0].seen, 1);
	publish_one(&c, e, 0, 8);
	/* A reader of the first write, checked good, marks the entry only now. */
	atomic_store(&e[0].verified, cistern__cold_gen(old) + 1);
	corrupt(&c, "crclate", 0);
	uint8_t *b = cistern__cold_alloc(&c, 1);
	uint64_t w = read_pinned(&c, &e[0], 0, b);
	cr_assert_neq(cistern__cold_gen(w), cistern__cold_gen(old));
	cr_assert_eq(cistern__cold_check(&e[0], w, b, e[0].len), 0);
	free(b);
	cistern__cold_close(&c);
}

Test(cold, reclaim_frees_a_dead_owners_claim_of_a_never_used_slot)
{
	/* Generation 0: the freed word is 0 itself. */
	struct cistern__cold_ent e[2] = {0};
	cr_assert(cistern__cold_claim(&e[0], 7));
	cr_assert(cistern__cold_claim(&e[1], 8));
	cr_assert_eq(cistern__cold_reclaim(e, 2, 7, 64), 1);
	cr_assert_eq(atomic_load(&e[0].word), cistern__cold_word(CISTERN__COLD_FREE, 0, 0));
	/* Another owner's claim stays. */
	cr_assert_eq(cistern__cold_state(atomic_load(&e[1].word)), CISTERN__COLD_WRITING);
}

Test(cold, reclaim_puts_a_dead_evictors_sample_back_and_drops_a_dead_readers_pin)
{
	struct cistern__cold_ent e[1] = {0};
	uint64_t held = cistern__cold_word(CISTERN__COLD_HELD, 0, 4);
	atomic_store(&e[0].word, cistern__cold_word(CISTERN__COLD_EVICTING, 9, 4));
	atomic_store(&e[0].pins, (uint64_t)1 << 3 | 1);
	cr_assert_eq(cistern__cold_reclaim(e, 1, 9, 3), 2);
	cr_assert_eq(atomic_load(&e[0].word), held);
	cr_assert_eq(atomic_load(&e[0].pins), 1);
}

Test(cold, a_failed_spill_frees_its_slots_and_publishes_none)
{
	struct cistern__cold c;
	make(&c, "fail", 4096, 4);
	struct cistern__cold_ent e[4] = {0};
	uint64_t first;
	_Atomic uint64_t cursor = 0;
	cr_assert_eq(cistern__cold_claim_run(e, 4, &cursor, 3, 4, &first, NULL), 4);
	uint8_t *b = cistern__cold_alloc(&c, 4);
	uint64_t slots[4] = {0, 1, 2, 3}, ids[4] = {1, 2, 3, 4};
	uint32_t lens[4] = {4096, 4096, 4096, 4096};
	/* A descriptor open for reading only: the write fails. */
	char path[4096];
	cistern__cold_path(path, sizeof(path), dir, "fail");
	int fd = c.fd;
	c.fd = open(path, O_RDONLY | O_DIRECT);
	cr_assert_geq(c.fd, 0);
	cr_assert_eq(cistern__cold_spill(&c, e, slots, 4, b, lens, ids), -EBADF);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern__cold_state(atomic_load(&e[i].word)), CISTERN__COLD_FREE);
	close(c.fd);
	c.fd = fd;
	free(b);
	cistern__cold_close(&c);
}

Test(cold, a_run_is_claimed_in_file_order_past_what_cannot_be_taken)
{
	struct cistern__cold c;
	make(&c, "run", 4096, 8);
	struct cistern__cold_ent e[8] = {0};
	publish_one(&c, e, 2, 1); /* unseen: cannot be taken */
	_Atomic uint64_t cursor = 0;
	uint64_t first;
	cr_assert_eq(cistern__cold_claim_run(e, 8, &cursor, 3, 8, &first, NULL), 2);
	cr_assert_eq(first, 0);
	cr_assert_eq(cistern__cold_claim_run(e, 8, &cursor, 3, 8, &first, NULL), 5);
	cr_assert_eq(first, 3);
	/* Nothing left that can be taken. */
	cr_assert_eq(cistern__cold_claim_run(e, 8, &cursor, 3, 8, &first, NULL), 0);
	cistern__cold_close(&c);
}

/* ---- SIGKILL during spills --------------------------------------------- */

enum { KS_SLOTS = 64, KS_BYTES = 65536, KS_CHILDREN = 3 };

struct ks_shared {
	_Atomic uint64_t cursor;
	_Atomic uint64_t spills;
	struct cistern__cold_ent ents[KS_SLOTS];
};

/* Spill runs of samples forever, and mark what it spilled earlier as seen. */
static void ks_child(struct cistern__cold *c, struct ks_shared *s, uint32_t owner)
{
	uint8_t *b = cistern__cold_alloc(c, 4);
	uint64_t slots[4], ids[4];
	uint32_t lens[4];
	for (uint64_t n = 0;; n++) {
		uint64_t first;
		unsigned k = cistern__cold_claim_run(s->ents, KS_SLOTS, &s->cursor, owner, 4,
						     &first, NULL);
		for (unsigned i = 0; i < k; i++) {
			slots[i] = first + i;
			ids[i] = (uint64_t)owner << 40 | (n * 4 + i);
			lens[i] = (uint32_t)(KS_BYTES / 2 + (ids[i] * 977) % (KS_BYTES / 2));
			fill(b + (size_t)i * KS_BYTES, lens[i], ids[i]);
		}
		if (k && cistern__cold_spill(c, s->ents, slots, k, b, lens, ids) != 0)
			_exit(2);
		atomic_fetch_add(&s->spills, 1);
		/* As a reader would: what is held becomes evictable. */
		for (unsigned i = 0; i < KS_SLOTS; i++)
			atomic_store_explicit(&s->ents[(n * 7 + i) % KS_SLOTS].seen, 1,
					      memory_order_relaxed);
	}
}

Test(cold, spillers_killed_mid_write_leave_no_torn_sample_in_the_index)
{
	struct cistern__cold c;
	make(&c, "kill", KS_BYTES, KS_SLOTS);
	struct ks_shared *s = shared_alloc(sizeof(*s));
	cr_assert_not_null(s);
	uint8_t *r = cistern__cold_alloc(&c, 1);
	uint64_t held_total = 0;
	for (int round = 0; round < 8; round++) {
		pid_t pid[KS_CHILDREN];
		uint64_t before = atomic_load(&s->spills);
		for (uint32_t k = 0; k < KS_CHILDREN; k++) {
			pid[k] = fork_child();
			if (pid[k] == 0)
				ks_child(&c, s, k + 1);
		}
		/* Let them spill a while, then kill them with writes in flight. */
		while (atomic_load(&s->spills) < before + 20 + (uint64_t)round * 5)
			usleep(200);
		for (int k = 0; k < KS_CHILDREN; k++)
			kill(pid[k], SIGKILL);
		for (int k = 0; k < KS_CHILDREN; k++) {
			int st;
			cr_assert_eq(waitpid(pid[k], &st, 0), pid[k]);
			cr_assert(WIFSIGNALED(st), "spiller %d exited with %d", k, WEXITSTATUS(st));
		}
		for (uint32_t k = 0; k < KS_CHILDREN; k++)
			cistern__cold_reclaim(s->ents, KS_SLOTS, k + 1, 64);
		for (unsigned i = 0; i < KS_SLOTS; i++) {
			uint64_t w;
			unsigned st = cistern__cold_state(atomic_load(&s->ents[i].word));
			cr_assert(st == CISTERN__COLD_FREE || st == CISTERN__COLD_HELD,
				  "entry %u left in state %u (owner %u)", i, st,
				  cistern__cold_owner(atomic_load(&s->ents[i].word)));
			if (!cistern__cold_pin(&s->ents[i], 0, &w))
				continue;
			struct cistern__io io;
			cistern__cold_prep(&c, &io, i, 1, r, false);
			cr_assert_eq(cistern__uring_run(&io, 1), 0);
			struct cistern__cold_ent *e = &s->ents[i];
			cr_assert_eq(cistern__crc32c(0, r, e->len), e->crc, "slot %u is torn", i);
			cr_assert(matches(r, e->len, e->id), "slot %u holds another sample", i);
			cistern__cold_unpin(e, 0);
			held_total++;
		}
	}
	cr_assert_gt(held_total, 0, "no sample was ever published");
	free(r);
	cistern__cold_close(&c);
}

/* ---- signals, short transfers, and reads racing evictions --------------- */

static _Atomic unsigned alarms;

static void on_alarm(int sig)
{
	(void)sig;
	atomic_fetch_add_explicit(&alarms, 1, memory_order_relaxed);
}

Test(cold, batches_complete_while_signals_interrupt_the_waits)
{
	enum { N = 512 };
	struct cistern__cold c;
	make(&c, "signals", 4096, N);
	uint8_t *w = cistern__cold_alloc(&c, N), *r = cistern__cold_alloc(&c, N);
	for (uint64_t i = 0; i < N; i++)
		fill(w + i * 4096, 4096, i);
	struct cistern__io *io = calloc(N, sizeof(*io));
	cistern__cold_prep(&c, &io[0], 0, N, w, true);
	cr_assert_eq(cistern__uring_run(io, 1), 0);
	/* No SA_RESTART: a blocked wait returns -EINTR at each tick. */
	struct sigaction sa = {.sa_handler = on_alarm};
	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGALRM, &sa, NULL), 0);
	struct itimerval it = {{0, 50}, {0, 50}};
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	for (int round = 0; round < 40; round++) {
		memset(r, 0, (size_t)N * 4096);
		for (unsigned i = 0; i < N; i++)
			cistern__cold_prep(&c, &io[i], (i * 131u + (unsigned)round) % N, 1,
					   r + (size_t)i * 4096, false);
		cr_assert_eq(cistern__uring_run(io, N), 0, "round %d", round);
		for (unsigned i = 0; i < N; i++)
			cr_assert(matches(r + (size_t)i * 4096, 4096,
					  (i * 131u + (unsigned)round) % N));
	}
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, NULL);
	cr_assert_gt(atomic_load(&alarms), 0, "no signal arrived: the test proved nothing");
	free(io);
	free(w);
	free(r);
	cistern__cold_close(&c);
}

/* A plain file in the test's directory, open read-write, `size` bytes of id 1. */
static int plain_file(const char *name, size_t size)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	uint8_t *b = malloc(size ? size : 1);
	fill(b, size, 1);
	cr_assert_eq(write(fd, b, size), (ssize_t)size);
	free(b);
	return fd;
}

Test(cold, a_short_write_is_continued_until_the_error)
{
	int fd = plain_file("short-w", 0);
	signal(SIGXFSZ, SIG_IGN);
	/* The limit cuts the 8192-byte write at 6144: a short write, then EFBIG. */
	struct rlimit rl = {6144, 6144};
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
	uint8_t b[8192];
	fill(b, sizeof(b), 2);
	struct cistern__io io = {.fd = fd, .write = true, .buf = b, .len = sizeof(b), .off = 0};
	cr_assert_eq(cistern__uring_run(&io, 1), -EFBIG);
	cr_assert_eq(io.done, 6144, "the write stopped at %u", io.done);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq(st.st_size, 6144);
	close(fd);
}

Test(cold, a_short_read_is_continued_and_ends_at_the_end_of_file)
{
	int fd = plain_file("short-r", 6000);
	uint8_t b[8192];
	struct cistern__io io = {.fd = fd, .buf = b, .len = sizeof(b), .off = 0};
	cr_assert_eq(cistern__uring_run(&io, 1), -EIO);
	cr_assert_eq(io.done, 6000);
	cr_assert(matches(b, 6000, 1));
	/* The same read, within the file, completes. */
	struct cistern__io in = {.fd = fd, .buf = b, .len = 6000, .off = 0};
	cr_assert_eq(cistern__uring_run(&in, 1), 0);
	close(fd);
}

enum { RE_SLOTS = 8, RE_READS = 10000 };

struct re_shared {
	_Atomic uint64_t cursor;
	_Atomic uint64_t reads;
	_Atomic uint64_t bad;
	struct cistern__cold_ent ents[RE_SLOTS];
};

static void re_evictor(struct cistern__cold *c, struct re_shared *s, uint32_t owner)
{
	uint8_t *b = cistern__cold_alloc(c, 2);
	uint64_t slots[2], ids[2];
	uint32_t lens[2];
	for (uint64_t n = 0;; n++) {
		uint64_t first;
		unsigned k = cistern__cold_claim_run(s->ents, RE_SLOTS, &s->cursor, owner, 2,
						     &first, NULL);
		for (unsigned i = 0; i < k; i++) {
			slots[i] = first + i;
			ids[i] = (uint64_t)owner << 40 | (n * 2 + i);
			lens[i] = 4096;
			fill(b + (size_t)i * 4096, 4096, ids[i]);
		}
		if (k && cistern__cold_spill(c, s->ents, slots, k, b, lens, ids) != 0)
			_exit(2);
	}
}

/* Pin, read, check, count a read, unpin; a read never meets a slot being rewritten. */
static void re_reader(struct cistern__cold *c, struct re_shared *s, unsigned bit)
{
	uint8_t *b = cistern__cold_alloc(c, 1);
	for (uint64_t n = 0; atomic_load(&s->reads) < RE_READS; n++) {
		struct cistern__cold_ent *e = &s->ents[(n * 5 + bit) % RE_SLOTS];
		uint64_t w;
		if (!cistern__cold_pin(e, bit, &w))
			continue;
		uint64_t id = e->id;
		struct cistern__io io;
		cistern__cold_prep(c, &io, (uint64_t)(e - s->ents), 1, b, false);
		if (cistern__uring_run(&io, 1) != 0 || !matches(b, 4096, id))
			atomic_fetch_add(&s->bad, 1);
		atomic_store(&e->seen, 1);
		cistern__cold_unpin(e, bit);
		atomic_fetch_add(&s->reads, 1);
	}
	_exit(0);
}

Test(cold, readers_pinning_against_evicting_spillers_never_read_a_rewritten_slot)
{
	struct cistern__cold c;
	make(&c, "race", 4096, RE_SLOTS);
	struct re_shared *s = shared_alloc(sizeof(*s));
	cr_assert_not_null(s);
	for (uint64_t i = 0; i < RE_SLOTS; i++) {
		publish_one(&c, s->ents, i, 1000 + i);
		atomic_store(&s->ents[i].seen, 1);
	}
	pid_t ev[2], rd[2];
	for (uint32_t k = 0; k < 2; k++) {
		ev[k] = fork_child();
		if (ev[k] == 0)
			re_evictor(&c, s, k + 1);
	}
	for (unsigned k = 0; k < 2; k++) {
		rd[k] = fork_child();
		if (rd[k] == 0)
			re_reader(&c, s, k);
	}
	for (int k = 0; k < 2; k++) {
		int st;
		cr_assert_eq(waitpid(rd[k], &st, 0), rd[k]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reader %d failed", k);
	}
	for (int k = 0; k < 2; k++) {
		kill(ev[k], SIGKILL);
		int st;
		cr_assert_eq(waitpid(ev[k], &st, 0), ev[k]);
		cr_assert(WIFSIGNALED(st), "evictor %d exited with %d", k, WEXITSTATUS(st));
	}
	cr_assert_geq(atomic_load(&s->reads), RE_READS);
	cr_assert_eq(atomic_load(&s->bad), 0, "%lu reads met a rewritten slot",
		     (unsigned long)atomic_load(&s->bad));
	cistern__cold_close(&c);
}
