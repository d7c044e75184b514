/* SPDX-License-Identifier: MIT */
/* helpers.h - small utilities shared by the test programs. */
#ifndef CISTERN_TEST_HELPERS_H
#define CISTERN_TEST_HELPERS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <cistern.h>

/* A segment name unique to this process and call site. */
#define TEST_NAME(buf, tag) snprintf((buf), sizeof(buf), "t-%s-%d", (tag), (int)getpid())

/*
 * The segments, dump files and directories a test makes, for the fixture
 * seg_fini to remove. A failed assertion leaves the test body at once
 * (Criterion jumps out of it), past any clean-up written at its end, but the
 * fixtures still run: a suite declared with TestSuite(suite, .fini =
 * seg_fini) leaves nothing in /dev/shm or /tmp, pass or fail. Each test runs
 * in a process of its own, so the list is the test's alone.
 *
 * Criterion reports an assertion that fails in a fixture but does not count
 * it against the test, so seg_fini asserts nothing: a test that checks its
 * clean-up does so in its body, with seg_drop().
 */
enum { SEG_MAX = 8, SEG_FILES_MAX = 4, SEG_DIRS_MAX = 2 };

struct seg_entry {
	char name[CISTERN_NAME_MAX + 1];
	struct cistern *c; /* detached at the end; NULL: nothing left to detach */
};

struct seg_list {
	pid_t pid; /* the test's process: a child it forks leaves the list alone */
	int n;
	struct seg_entry e[SEG_MAX];
	int nfiles;
	char files[SEG_FILES_MAX][128]; /* seg_dump_path()'s */
	int ndirs;
	char dirs[SEG_DIRS_MAX][128]; /* seg_dir()'s */
};

static inline struct seg_list *seg_list(void)
{
	static struct seg_list l;
	return &l;
}

/* The list, made the current process's on its first entry. */
static inline struct seg_list *seg_list_to_add(void)
{
	struct seg_list *l = seg_list();
	if (l->n == 0 && l->nfiles == 0 && l->ndirs == 0)
		l->pid = getpid();
	return l;
}

/*
 * Hand seg_fini a segment name the test did not make with seg_name() (the
 * temporary object a killed restore left, say): it unlinks it at the end.
 * The string lives until the test ends.
 */
static inline const char *seg_adopt(const char *name)
{
	struct seg_list *l = seg_list();
	for (int i = 0; i < l->n; i++)
		if (strcmp(l->e[i].name, name) == 0)
			return l->e[i].name;
	cr_assert_lt(l->n, SEG_MAX, "more than %d segment names in one test", SEG_MAX);
	l = seg_list_to_add();
	struct seg_entry *e = &l->e[l->n++];
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->c = NULL;
	return e->name;
}

/*
 * The name "t-<tag>-<pid>", with whatever a killed earlier run left under
 * it removed; seg_fini unlinks it. The string lives until the test ends.
 */
static inline const char *seg_name(const char *tag)
{
	char want[CISTERN_NAME_MAX + 1];
	snprintf(want, sizeof(want), "t-%s-%d", tag, (int)getpid());
	int known = seg_list()->n;
	const char *name = seg_adopt(want);
	if (seg_list()->n > known)
		cistern_unlink(name);
	return name;
}

/*
 * An empty shm object under cistern's prefix named seg_name(tag), as a
 * creator leaves one between shm_open() and ftruncate(): its descriptor (to
 * close), the name in *name. seg_fini unlinks it.
 */
static inline int seg_shm_object(const char *tag, const char **name)
{
	*name = seg_name(tag);
	char shm[96];
	snprintf(shm, sizeof(shm), "/cistern.%s", *name);
	int fd = shm_open(shm, O_RDWR | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0, "shm_open %s: %s", shm, strerror(errno));
	return fd;
}

/*
 * Give seg_fini a handle the test made itself on name, a string seg_name()
 * or seg_adopt() returned (to assert its create in its own words, say):
 * seg_fini detaches it. Returns c.
 */
static inline struct cistern *seg_keep(const char *name, struct cistern *c)
{
	struct seg_list *l = seg_list();
	for (int i = 0; i < l->n; i++)
		if (l->e[i].name == name) {
			l->e[i].c = c;
			return c;
		}
	cr_assert_fail("%s was not named by seg_name or seg_adopt", name);
	return c;
}

/*
 * Create the segment seg_name(tag) with *cfg, or the defaults if cfg is NULL
 * (asserted to succeed); seg_fini detaches the handle and unlinks the segment.
 */
static inline struct cistern *seg_create_cfg(const char *tag, const struct cistern_config *cfg)
{
	const char *name = seg_name(tag);
	struct cistern *c = NULL;
	int r = cistern_create(name, cfg, &c);
	cr_assert_eq(r, 0, "create %s: %s", name, cistern_strerror(r));
	return seg_keep(name, c);
}

/* seg_create_cfg() with the config by value. */
static inline struct cistern *seg_create(const char *tag, struct cistern_config cfg)
{
	return seg_create_cfg(tag, &cfg);
}

static inline struct seg_entry *seg_entry_of(const struct cistern *c)
{
	struct seg_list *l = seg_list();
	for (int i = 0; i < l->n; i++)
		if (l->e[i].c == c)
			return &l->e[i];
	cr_assert_fail("handle %p was not made by seg_create", (const void *)c);
	return NULL;
}

/* The name of a segment seg_create() made. */
static inline const char *seg_name_of(const struct cistern *c)
{
	return seg_entry_of(c)->name;
}

/*
 * Detach a handle seg_create() gave, before the end of the test (to give up
 * its roles or pins, say); seg_fini still unlinks the segment. The detach's
 * result.
 */
static inline int seg_detach(struct cistern *c)
{
	seg_entry_of(c)->c = NULL;
	return cistern_detach(c);
}

/*
 * Detach and unlink now, and assert that both succeed: the end of a test
 * that checks its clean-up, or of one that makes the same segment again.
 */
static inline void seg_drop(struct cistern *c)
{
	struct seg_entry *e = seg_entry_of(c);
	e->c = NULL;
	cr_assert_eq(cistern_detach(c), 0);
	cr_assert_eq(cistern_unlink(e->name), 0);
}

/*
 * The path "/tmp/cistern-test-<tag>-<pid><suffix>" in the list of n paths at
 * `list`, added (up to max) if it is not there yet: the stored string.
 */
static inline char *seg_path(char (*list)[128], int *n, int max, const char *tag,
			     const char *suffix)
{
	char want[128];
	snprintf(want, sizeof(want), "/tmp/cistern-test-%s-%d%s", tag, (int)getpid(), suffix);
	for (int i = 0; i < *n; i++)
		if (strcmp(list[i], want) == 0)
			return list[i];
	cr_assert_lt(*n, max, "more than %d paths like %s in one test", max, want);
	seg_list_to_add();
	char *path = list[(*n)++];
	memcpy(path, want, sizeof(want));
	return path;
}

/*
 * The path "/tmp/cistern-test-<tag>-<pid>.dump" for a dump file, with
 * whatever a killed earlier run left there removed; seg_fini removes it.
 * The string lives until the test ends.
 */
static inline const char *seg_dump_path(const char *tag)
{
	struct seg_list *l = seg_list();
	int known = l->nfiles;
	char *path = seg_path(l->files, &l->nfiles, SEG_FILES_MAX, tag, ".dump");
	if (l->nfiles > known)
		unlink(path);
	return path;
}

/* Remove the files in directory path (not below it). */
static inline void seg_empty_dir(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

/*
 * A directory "/tmp/cistern-test-<tag>-<pid>", made (mode 0700) or emptied
 * of what an earlier run left in it; seg_fini removes it with the files in
 * it. The string lives until the test ends.
 */
static inline const char *seg_dir(const char *tag)
{
	struct seg_list *l = seg_list();
	int known = l->ndirs;
	char *path = seg_path(l->dirs, &l->ndirs, SEG_DIRS_MAX, tag, "");
	if (l->ndirs > known) {
		cr_assert(mkdir(path, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", path,
			  strerror(errno));
		seg_empty_dir(path);
	}
	return path;
}

/* The .fini fixture: detach what is still attached, remove every name, file and directory. */
static inline void seg_fini(void)
{
	struct seg_list *l = seg_list();
	if (l->pid != getpid())
		return;
	for (int i = l->n - 1; i >= 0; i--) {
		if (l->e[i].c)
			cistern_detach(l->e[i].c);
		cistern_unlink(l->e[i].name);
		l->e[i].c = NULL;
	}
	for (int i = 0; i < l->nfiles; i++)
		unlink(l->files[i]);
	for (int i = 0; i < l->ndirs; i++) {
		seg_empty_dir(l->dirs[i]);
		rmdir(l->dirs[i]);
	}
	l->n = 0;
	l->nfiles = 0;
	l->ndirs = 0;
}

/* Memory shared with forked children (zeroed). */
static inline void *shared_alloc(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static inline double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A payload whose every byte depends on (producer, seq), so damage is detected. */
static inline void fill_payload(uint8_t *p, size_t len, uint32_t producer, uint32_t seq)
{
	uint64_t x = ((uint64_t)producer << 32 | seq) * UINT64_C(0x9e3779b97f4a7c15) + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static inline int check_payload(const uint8_t *p, size_t len, uint32_t producer, uint32_t seq)
{
	uint8_t buf[4096];
	if (len > sizeof(buf))
		return 0;
	fill_payload(buf, len, producer, seq);
	return memcmp(buf, p, len) == 0;
}

/*
 * Put n samples whose lengths run evenly from 0 to max (sample i is
 * i * max / (n - 1) bytes of fill_payload(.., producer, i), time_step i).
 * 0, or the first failing put's error. The buffer holds up to 4096 bytes.
 */
static inline int put_length_ramp(struct cistern *c, uint32_t n, size_t max, uint32_t producer)
{
	static uint8_t buf[4096];
	if (max > sizeof(buf) || n < 2)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		size_t len = (size_t)i * max / (n - 1);
		fill_payload(buf, len, producer, i);
		struct cistern_meta m = {.time_step = i};
		int r = cistern_put(c, buf, len, &m, 0);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * fork() for test children: a child dies with its parent, so a test that
 * fails or times out never leaves producers or readers running.
 */
static inline pid_t fork_child(void)
{
	pid_t ppid = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != ppid)
			_exit(99);
	}
	return pid;
}

/* What a holder child takes before it waits to be killed. */
enum hold { HOLD_NOTHING, HOLD_RESERVATION, HOLD_SAMPLE, HOLD_BATCH };

/* In a spawned child: say ready down the pipe, then wait to be killed. */
static inline void ready_then_wait(int fd)
{
	char ok = 1;
	if (write(fd, &ok, 1) != 1)
		_exit(4);
	pause();
	_exit(0);
}

/*
 * In the parent of a child spawned with pipe p: its pid once it said ready,
 * or -1 with the child reaped (it failed, or the fork did).
 */
static inline pid_t await_ready(int p[2], pid_t pid)
{
	close(p[1]);
	char ok = 0;
	ssize_t n = pid > 0 ? read(p[0], &ok, 1) : -1;
	close(p[0]);
	if (n != 1) {
		if (pid > 0)
			waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

/*
 * Fork a child that attaches to `name`, takes `what` (a reservation, an
 * acquired sample: pinned under the reservoirs, held alone under FIFO and
 * FIRO, or a batch of the segment's batch_size), says it is ready, then waits to be killed. Returns its pid once it
 * is ready, or -1 if it could not start (the child is reaped).
 */
static inline pid_t spawn_holder(const char *name, enum hold what)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		struct cistern *h;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		struct cistern_slot slot;
		struct cistern_sample s, batch[64];
		if (what == HOLD_RESERVATION && cistern_reserve(h, &slot, 1000) < 0)
			_exit(2);
		if (what == HOLD_SAMPLE && cistern_acquire(h, &s, 1000) < 0)
			_exit(3);
		if (what == HOLD_BATCH && cistern_acquire_batch(h, batch, 0, 1000) < 0)
			_exit(5);
		ready_then_wait(p[1]);
	}
	return await_ready(p, pid);
}

/*
 * Fork a child that attaches to `name`, commits n samples (sample i is
 * 1 + i % 50 bytes of fill_payload(.., 7, i), time_step i), says it is ready,
 * then waits to be killed: a producer that dies with its samples committed.
 * Returns its pid once they are in, or -1 (the child is reaped).
 */
static inline pid_t spawn_filler(const char *name, uint32_t n)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		struct cistern *h;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		for (uint32_t i = 0; i < n; i++) {
			uint8_t buf[64];
			size_t len = 1 + i % 50;
			fill_payload(buf, len, 7, i);
			struct cistern_meta m = {.sim_id = 7, .time_step = i};
			if (cistern_put(h, buf, len, &m, 1000) < 0)
				_exit(2);
		}
		ready_then_wait(p[1]);
	}
	return await_ready(p, pid);
}

/* SIGKILL a child and reap it. */
static inline void kill_and_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* Wait for every child; return how many exited non-zero or by a signal. */
static inline int reap_all(void)
{
	int bad = 0, status;
	while (wait(&status) > 0)
		bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	return bad;
}

/*
 * Objects anyone who may write /dev/shm can put under a segment's name that
 * are not regular files. Opening a FIFO for reading waits for a writer, so a
 * test that meets one arms an alarm: special_make() installs a SIGALRM
 * handler that takes the object away and fails the test, instead of a wait
 * that hangs the suite.
 */
enum special { SP_FIFO, SP_SOCKET, SP_DIR, SP_LINK, SP_DEVICE };

/* The object this test made: one per test process. */
static inline char *special_path(void)
{
	static char path[128];
	return path;
}

/*
 * Take the object away. A FIFO is first opened for writing for a moment:
 * whatever waits to open it for reading, anywhere on the machine (a build
 * of cistern without the fix, run by someone else), then goes on.
 */
static inline void special_clear(void)
{
	const char *path = special_path();
	int w = open(path, O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	if (w >= 0)
		close(w);
	if (unlink(path) < 0)
		rmdir(path);
}

static inline void special_alarm(int sig)
{
	(void)sig;
	special_clear();
	_exit(3);
}

/*
 * Make a `kind` object at /dev/shm/cistern.<name>. *keep receives a
 * descriptor to close when done (the socket's), or -1. 0 or -errno.
 */
static inline int special_make(enum special kind, const char *name, int *keep)
{
	char *path = special_path();
	snprintf(path, 128, "/dev/shm/cistern.%s", name);
	unlink(path);
	rmdir(path);
	struct sigaction sa = {.sa_handler = special_alarm};
	sigaction(SIGALRM, &sa, NULL);
	*keep = -1;
	int r = 0;
	switch (kind) {
	case SP_FIFO:
		r = mkfifo(path, 0666);
		break;
	case SP_SOCKET: {
		struct sockaddr_un sa_un = {.sun_family = AF_UNIX};
		if (strlen(path) >= sizeof(sa_un.sun_path))
			return -ENAMETOOLONG;
		memcpy(sa_un.sun_path, path, strlen(path) + 1);
		*keep = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		r = *keep < 0 || bind(*keep, (struct sockaddr *)&sa_un, sizeof(sa_un)) < 0 ||
				    listen(*keep, 1) < 0
			    ? -1
			    : 0;
		break;
	}
	case SP_DIR:
		r = mkdir(path, 0777);
		break;
	case SP_LINK:
		r = symlink("/dev/null", path);
		break;
	case SP_DEVICE:
		/* /dev/null's numbers: reading gives nothing, writing loses everything. */
		r = mknod(path, S_IFCHR | 0666, makedev(1, 3));
		break;
	}
	return r < 0 ? -errno : 0;
}

/* Done with the object: no alarm, no object, no descriptor. */
static inline void special_remove(int keep)
{
	alarm(0);
	special_clear();
	if (keep >= 0)
		close(keep);
}

#endif
