/* SPDX-License-Identifier: MIT */
/*
 * test_foreign.c - looking at another user's segment: the commands and calls
 * that only look (ls, inspect, gc --dry-run, dump; cistern_list(),
 * cistern_open_readonly() and its getters, cistern_dump()) against a segment
 * whose owner shrinks and regrows it while they read. The owner is a child
 * that drops to user nobody; a shrunk object turns every access to a mapping
 * of its lost pages into SIGBUS, so none of them may map it.
 *
 * The tests run as root (the test suite does), which may become nobody.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>

#include <sys/prctl.h>

#include "helpers.h"
#include <cistern/admin.h>

#ifndef CISTERN_BIN
#error "CISTERN_BIN must name the built cistern binary"
#endif

TestSuite(foreign, .fini = seg_fini);

/* User and group nobody. */
#define NOBODY 65534

/*
 * Runs of each command beside the shrinking segment: 100, or
 * CISTERN_TEST_RUNS (scripts/check.sh asks fewer of the sanitizer builds,
 * which look for memory errors rather than for a rare signal).
 */
static int runs(void)
{
	const char *e = getenv("CISTERN_TEST_RUNS");
	int n = e ? atoi(e) : 0;
	return n > 0 ? n : 100;
}
#define RUNS runs()

/*
 * Become user nobody for good: 0, or -1. A change of credentials clears
 * the parent-death signal fork_child() set, so it is set again: a child
 * left by a failed test must not spin on after its test.
 */
static int as_nobody(void)
{
	pid_t parent = getppid();
	if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
		return -1;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		return -1;
	return geteuid() == NOBODY ? 0 : -1;
}

static void need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root, to run a child as another user");
}

/*
 * In a child, become nobody, create segment `name` of `policy` with slots
 * of slot_size bytes, put `n` samples of 1000 bytes (sample i is
 * fill_payload(.., 3, i), time_step i) and stay attached. The handle, or exit.
 */
static struct cistern *make_as_nobody(const char *name, enum cistern_policy policy,
				      uint64_t slot_size, int n)
{
	if (as_nobody() < 0)
		_exit(10);
	/* The largest attachment table: 48 pages that every listing reads. */
	struct cistern_config cfg = {.slot_size = slot_size,
				     .slot_count = 256,
				     .policy = policy,
				     .mode = 0644,
				     .max_procs = CISTERN_PROCS_MAX};
	if (policy != CISTERN_FIFO)
		cfg.watermark = 1;
	struct cistern *c;
	if (cistern_create(name, &cfg, &c) < 0)
		_exit(11);
	uint8_t buf[1000];
	for (int i = 0; i < n; i++) {
		fill_payload(buf, sizeof(buf), 3, (uint32_t)i);
		struct cistern_meta m = {.sim_id = 3, .time_step = (uint32_t)i};
		if (cistern_put(c, buf, sizeof(buf), &m, 1000) < 0)
			_exit(12);
	}
	return c;
}

/*
 * Fork a child that, as nobody, makes segment `name` (a reservoir: the
 * metadata of its slots lies among the payloads, across every page) and
 * then shrinks its object to a page count that changes every time (the
 * header's first page always stays, so that the header keeps its magic)
 * and regrows it, as fast as it can, until it is killed. Its pid once it
 * runs.
 */
static pid_t start_shrinker(const char *name)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		make_as_nobody(name, CISTERN_RESERVOIR, 1000, 200);
		char shm[96];
		snprintf(shm, sizeof(shm), "/cistern.%s", name);
		int fd = shm_open(shm, O_RDWR, 0);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0)
			_exit(13);
		size_t size = (size_t)st.st_size, pages = size / 4096;
		char *keep = malloc(size);
		if (!keep || pread(fd, keep, size, 0) != (ssize_t)size)
			_exit(14);
		char ok = 1;
		if (write(p[1], &ok, 1) != 1)
			_exit(15);
		for (uint64_t k = 0;; k++) {
			/*
			 * Three times in four into the header or the attachment
			 * table, else anywhere. The regrown pages read as zeros
			 * (the header's first page, which stays, still validates):
			 * the content comes back one time in eight only, so that
			 * the object changes size as often as it can.
			 */
			size_t small = 4096 *
				       (1 + (size_t)(k % 4 ? k % 50 : k * 7919 % (pages - 1)));
			if (ftruncate(fd, (off_t)small) < 0 || ftruncate(fd, (off_t)size) < 0)
				_exit(16);
			if (k % 8 == 0 && pwrite(fd, keep + small, size - small, (off_t)small) !=
						  (ssize_t)(size - small))
				_exit(16);
		}
	}
	pid = await_ready(p, pid);
	cr_assert_gt(pid, 0, "the shrinking child did not start");
	return pid;
}

/* Run the built cistern with args (NULL-terminated), output thrown away: its wait status. */
static int run_cistern(const char *const *args)
{
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* A command that hangs dies by SIGALRM, which the test counts as a signal. */
		alarm(30);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		char *argv[8] = {(char *)CISTERN_BIN};
		for (int i = 0; args[i] && i < 6; i++)
			argv[i + 1] = (char *)(uintptr_t)args[i];
		execv(CISTERN_BIN, argv);
		_exit(127);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return st;
}

/* Run the command RUNS times beside a shrinking segment of nobody's: assert no run died by a signal. */
static void survives(const char *name, const char *const *args)
{
	pid_t shrinker = start_shrinker(name);
	int killed = 0, last_sig = 0, errors = 0;
	for (int i = 0; i < RUNS; i++) {
		int st = run_cistern(args);
		if (WIFSIGNALED(st)) {
			killed++;
			last_sig = WTERMSIG(st);
		} else if (WEXITSTATUS(st) == 127) {
			cr_assert_fail("%s did not start", CISTERN_BIN);
		} else {
			errors += WEXITSTATUS(st) != 0;
		}
	}
	kill_and_reap(shrinker);
	cr_assert_eq(killed, 0, "cistern %s died by signal %d (%s) in %d of %d runs", args[0],
		     last_sig, strsignal(last_sig), killed, RUNS);
	cr_log_info("cistern %s: %d of %d runs ended with an error", args[0], errors, RUNS);
}

Test(foreign, ls_survives_a_segment_its_owner_shrinks)
{
	need_root();
	const char *name = seg_name("f-ls");
	const char *args[] = {"ls", NULL};
	survives(name, args);
}

Test(foreign, inspect_survives_a_segment_its_owner_shrinks)
{
	need_root();
	const char *name = seg_name("f-inspect");
	const char *args[] = {"inspect", name, NULL};
	survives(name, args);
}

Test(foreign, gc_dry_run_survives_a_segment_its_owner_shrinks)
{
	need_root();
	const char *name = seg_name("f-gc");
	const char *args[] = {"gc", "--dry-run", NULL};
	survives(name, args);
}

Test(foreign, dump_survives_a_segment_its_owner_shrinks)
{
	need_root();
	const char *name = seg_name("f-dump");
	const char *path = seg_dump_path("f-dump");
	const char *args[] = {"dump", "--quiet", name, path, NULL};
	survives(name, args);
}

/*
 * The library calls the commands make, in a child of the test so that a
 * signal is reported as such: every read-only call on the shrinking
 * segment answers (an error or not) and none raises a signal.
 */
Test(foreign, readonly_calls_survive_a_segment_its_owner_shrinks)
{
	need_root();
	const char *name = seg_name("f-calls");
	const char *path = seg_dump_path("f-calls");
	pid_t shrinker = start_shrinker(name);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		for (int i = 0; i < RUNS; i++) {
			struct cistern *c;
			if (cistern_open_readonly(name, &c) == 0) {
				struct cistern_stats st;
				struct cistern_occupancy occ;
				struct cistern_proc_info procs[64];
				cistern_stats_get(c, &st);
				cistern_occupancy_get(c, &occ);
				cistern_procs_get(c, procs, 64);
				cistern_detach(c);
			}
			struct cistern_segment_info *v;
			if (cistern_list(&v) > 0)
				free(v);
			struct cistern_gc_report rep;
			cistern_gc(name, CISTERN_GC_DRY_RUN | CISTERN_GC_ANY_OWNER, &rep);
			if (i % 4 == 0) {
				struct cistern_dump_info info;
				cistern_dump(name, path, NULL, NULL, &info);
			}
		}
		_exit(0);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	kill_and_reap(shrinker);
	cr_assert(!WIFSIGNALED(st), "the read-only calls died by signal %d (%s)", WTERMSIG(st),
		  strsignal(WTERMSIG(st)));
	cr_assert_eq(WEXITSTATUS(st), 0);
}

/*
 * A child of nobody's that makes segment `name` (make_as_nobody()), puts n
 * samples and then, for each byte read from cmd, puts 10 more and answers
 * one byte. Its pid once the first n are in; *cmd and *ans are the parent's
 * ends.
 */
static pid_t start_producer(const char *name, enum cistern_policy policy, uint64_t slot_size, int n,
			    int *cmd, int *ans)
{
	int c[2], a[2];
	cr_assert_eq(pipe(c), 0);
	cr_assert_eq(pipe(a), 0);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(c[1]);
		close(a[0]);
		struct cistern *h = make_as_nobody(name, policy, slot_size, n);
		char b = 1;
		if (write(a[1], &b, 1) != 1)
			_exit(15);
		while (read(c[0], &b, 1) == 1) {
			uint8_t buf[1000] = {0};
			for (int i = 0; i < 10; i++)
				if (cistern_put(h, buf, sizeof(buf), NULL, 1000) < 0)
					_exit(16);
			if (write(a[1], &b, 1) != 1)
				_exit(17);
		}
		_exit(0);
	}
	close(c[0]);
	close(a[1]);
	char b;
	cr_assert_eq(read(a[0], &b, 1), 1, "the producing child did not start");
	*cmd = c[1];
	*ans = a[0];
	return pid;
}

/* Whether this process maps anything of the shm object of segment `name`. */
static bool maps_segment(const char *name)
{
	char want[160], line[512];
	snprintf(want, sizeof(want), "/dev/shm/cistern.%s", name);
	FILE *f = fopen("/proc/self/maps", "re");
	cr_assert_not_null(f);
	bool found = false;
	while (fgets(line, sizeof(line), f))
		found |= strstr(line, want) != NULL;
	fclose(f);
	return found;
}

Test(foreign, readonly_handle_on_another_users_segment_maps_none_of_it)
{
	need_root();
	const char *name = seg_name("f-nomap");
	int cmd, ans;
	pid_t pid = start_producer(name, CISTERN_FIFO, 1000, 5, &cmd, &ans);
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), 0);
	cr_assert_not(maps_segment(name), "the read-only handle maps nobody's object");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.population, 5);
	cistern_detach(c);
	close(cmd);
	close(ans);
	kill_and_reap(pid);
}

Test(foreign, readonly_handle_on_another_users_segment_sees_it_change)
{
	need_root();
	const char *name = seg_name("f-live");
	int cmd, ans;
	pid_t pid = start_producer(name, CISTERN_FIFO, 1000, 5, &cmd, &ans);
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), 0);
	struct cistern_stats st;
	struct cistern_occupancy occ;
	struct cistern_proc_info procs[4];
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.population, 5);
	char b = 1;
	cr_assert_eq(write(cmd, &b, 1), 1);
	cr_assert_eq(read(ans, &b, 1), 1);
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.population, 15, "the handle shows the puts made since it was opened");
	cr_assert_eq(cistern_occupancy_get(c, &occ), 0);
	cr_assert_eq(occ.held, 15);
	cr_assert_eq(cistern_procs_get(c, procs, 4), 1);
	cr_assert_eq(procs[0].puts, 15);
	cr_assert_eq(procs[0].uid, NOBODY);
	cistern_detach(c);
	close(cmd);
	close(ans);
	kill_and_reap(pid);
}

/*
 * Dump nobody's segment of `policy` and slot_size holding 50 samples: the
 * dump holds them all, and restored they read back as they were put.
 */
static void dump_holds_every_sample(const char *tag, enum cistern_policy policy, uint64_t slot_size)
{
	need_root();
	const char *name = seg_name(tag);
	const char *path = seg_dump_path(tag);
	int cmd, ans;
	pid_t pid = start_producer(name, policy, slot_size, 50, &cmd, &ans);
	struct cistern *c;
	struct cistern_occupancy occ;
	cr_assert_eq(cistern_open_readonly(name, &c), 0);
	cr_assert_eq(cistern_occupancy_get(c, &occ), 0);
	cr_assert_eq(occ.held, 50, "every slot's state read from nobody's object");
	cr_assert_eq(occ.held_bytes, 50 * 1000);
	cistern_detach(c);
	struct cistern_dump_info info, check;
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, &info), 0);
	cr_assert_eq(info.samples, 50);
	cr_assert_eq(info.skipped, 0);
	cr_assert_eq(cistern_dump_verify(path, &check), 0);
	cr_assert_eq(check.samples, 50);
	/* Restored, the samples read back as they were put, each in its own words. */
	char back[CISTERN_NAME_MAX + 1];
	snprintf(back, sizeof(back), "%s-back", tag);
	const char *bname = seg_name(back);
	cr_assert_eq(cistern_restore(path, bname, NULL, NULL, &check), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(bname, &r), 0);
	seg_keep(bname, r);
	for (int i = 0; i < 50; i++) {
		uint8_t buf[1000];
		struct cistern_meta m;
		ssize_t len = cistern_get(r, buf, sizeof(buf), &m, 0);
		cr_assert_eq(len, (ssize_t)sizeof(buf));
		cr_assert(check_payload(buf, sizeof(buf), 3, m.time_step), "sample %u",
			  m.time_step);
	}
	close(cmd);
	close(ans);
	kill_and_reap(pid);
}

/* Its slots' lines in one array. */
Test(foreign, dump_of_another_users_fifo_holds_every_sample)
{
	dump_holds_every_sample("f-dfifo", CISTERN_FIFO, 1000);
}

/* Each slot's line before its payload, slots of less than a page. */
Test(foreign, dump_of_another_users_reservoir_holds_every_sample)
{
	dump_holds_every_sample("f-dres", CISTERN_RESERVOIR, 1000);
}

/* ... and of more than a page. */
Test(foreign, dump_of_another_users_reservoir_of_large_slots_holds_every_sample)
{
	dump_holds_every_sample("f-dbig", CISTERN_RESERVOIR, 10000);
}

/*
 * While nobody puts and gets without pause, every sample a dump of its
 * segment holds (read by pread(), not through a mapping) is whole.
 */
Test(foreign, dump_of_another_users_busy_segment_holds_only_whole_samples)
{
	need_root();
	const char *name = seg_name("f-busy");
	const char *copy = seg_name("f-busy2");
	const char *path = seg_dump_path("f-busy");
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		/* The ring all but full: each put takes the slot the get before it freed. */
		struct cistern *h = make_as_nobody(name, CISTERN_FIFO, 1000, 255);
		char ok = 1;
		if (write(p[1], &ok, 1) != 1)
			_exit(15);
		uint8_t buf[1000];
		for (uint32_t i = 255;; i++) {
			size_t len = 1 + (i * 13) % sizeof(buf);
			fill_payload(buf, len, 3, i);
			struct cistern_meta m = {.sim_id = 3, .time_step = i};
			if (cistern_put(h, buf, len, &m, 1000) < 0 ||
			    cistern_get(h, buf, sizeof(buf), NULL, 1000) < 0)
				_exit(16);
			/* A breath now and then, so that a dump finds some samples at rest. */
			if (i % 64 == 0)
				usleep(100);
		}
	}
	pid = await_ready(p, pid);
	cr_assert_gt(pid, 0, "the busy child did not start");
	/*
	 * Twenty dumps, and more until one held a sample: a slow build (the
	 * sanitizers) can see every sample change under its copy for a while.
	 */
	uint64_t total = 0;
	for (int round = 0; round < 20 || (total == 0 && round < 400); round++) {
		struct cistern_dump_info di;
		cr_assert_eq(cistern_dump(name, path, NULL, NULL, &di), 0);
		cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
		struct cistern *r;
		cr_assert_eq(cistern_attach(copy, &r), 0);
		struct cistern_sample s;
		while (cistern_acquire(r, &s, 0) == 0) {
			cr_assert(check_payload(s.data, s.len, 3, s.meta.time_step),
				  "torn sample %u", s.meta.time_step);
			/* The first 255, make_as_nobody()'s, are 1000 bytes each. */
			size_t want = s.meta.time_step < 255 ? 1000
							     : 1 + (s.meta.time_step * 13) % 1000;
			cr_assert_eq(s.len, want, "sample %u", s.meta.time_step);
			cistern_release(r, &s);
			total++;
		}
		cistern_detach(r);
		cistern_unlink(copy);
	}
	kill_and_reap(pid);
	cr_assert_gt(total, 0, "the dumps held samples");
}
