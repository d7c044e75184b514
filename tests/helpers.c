/* SPDX-License-Identifier: MIT */
/* helpers.c - small utilities shared by the test programs (helpers.h says what each does). */
#include "helpers.h"

#include <dirent.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <math.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

/*
 * What seg_fini removes: the segments, dump files and directories the test
 * running in this process made (see helpers.h).
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

static struct seg_list *seg_list(void)
{
	static struct seg_list l;
	return &l;
}

/* The list, made the current process's on its first entry. */
static struct seg_list *seg_list_to_add(void)
{
	struct seg_list *l = seg_list();
	if (l->n == 0 && l->nfiles == 0 && l->ndirs == 0)
		l->pid = getpid();
	return l;
}

const char *seg_adopt(const char *name)
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

const char *seg_name(const char *tag)
{
	char want[CISTERN_NAME_MAX + 1];
	snprintf(want, sizeof(want), "t-%s-%d", tag, (int)getpid());
	int known = seg_list()->n;
	const char *name = seg_adopt(want);
	if (seg_list()->n > known)
		cistern_unlink(name);
	return name;
}

int seg_shm_object(const char *tag, const char **name)
{
	*name = seg_name(tag);
	char shm[96];
	snprintf(shm, sizeof(shm), "/cistern.%s", *name);
	int fd = shm_open(shm, O_RDWR | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0, "shm_open %s: %s", shm, strerror(errno));
	return fd;
}

struct cistern *seg_keep(const char *name, struct cistern *c)
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

struct cistern *seg_create_cfg(const char *tag, const struct cistern_config *cfg)
{
	const char *name = seg_name(tag);
	struct cistern *c = NULL;
	int r = cistern_create(name, cfg, &c);
	cr_assert_eq(r, 0, "create %s: %s", name, cistern_strerror(r));
	return seg_keep(name, c);
}

struct cistern *seg_create(const char *tag, struct cistern_config cfg)
{
	return seg_create_cfg(tag, &cfg);
}

static struct seg_entry *seg_entry_of(const struct cistern *c)
{
	struct seg_list *l = seg_list();
	for (int i = 0; i < l->n; i++)
		if (l->e[i].c == c)
			return &l->e[i];
	cr_assert_fail("handle %p was not made by seg_create", (const void *)c);
	return NULL;
}

const char *seg_name_of(const struct cistern *c)
{
	return seg_entry_of(c)->name;
}

int seg_detach(struct cistern *c)
{
	seg_entry_of(c)->c = NULL;
	return cistern_detach(c);
}

void seg_drop(struct cistern *c)
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
static char *seg_path(char (*list)[128], int *n, int max, const char *tag, const char *suffix)
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

const char *seg_dump_path(const char *tag)
{
	struct seg_list *l = seg_list();
	int known = l->nfiles;
	char *path = seg_path(l->files, &l->nfiles, SEG_FILES_MAX, tag, ".dump");
	if (l->nfiles > known)
		unlink(path);
	return path;
}

/* Remove the files in directory path (not below it). */
void seg_empty_dir(const char *path)
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

const char *seg_dir(const char *tag)
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

void seg_fini(void)
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

void *shared_alloc(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

double chi2_critical(int df, double z)
{
	double a = 2.0 / (9.0 * df);
	double t = 1.0 - a + z * sqrt(a);
	return df * t * t * t;
}

double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void fill_payload(uint8_t *p, size_t len, uint32_t producer, uint32_t seq)
{
	uint64_t x = ((uint64_t)producer << 32 | seq) * UINT64_C(0x9e3779b97f4a7c15) + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

int check_payload(const uint8_t *p, size_t len, uint32_t producer, uint32_t seq)
{
	uint8_t buf[4096];
	if (len > sizeof(buf))
		return 0;
	fill_payload(buf, len, producer, seq);
	return memcmp(buf, p, len) == 0;
}

int put_length_ramp(struct cistern *c, uint32_t n, size_t max, uint32_t producer)
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

pid_t fork_child(void)
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

void say_ready(int fd)
{
	char ok = 1;
	if (write(fd, &ok, 1) != 1)
		_exit(4);
	close(fd);
}

void ready_then_wait(int fd)
{
	say_ready(fd);
	pause();
	_exit(0);
}

pid_t await_ready(int p[2], pid_t pid)
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

pid_t spawn_attached(const char *name, attached_fn set_up, const void *arg)
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
		int status = set_up(h, arg);
		if (status)
			_exit(status);
		ready_then_wait(p[1]);
	}
	return await_ready(p, pid);
}

static int hold(struct cistern *h, const void *arg)
{
	enum hold what = *(const enum hold *)arg;
	struct cistern_slot slot;
	struct cistern_sample s, batch[64];
	if (what == HOLD_RESERVATION && cistern_reserve(h, &slot, 1000) < 0)
		return 2;
	if (what == HOLD_SAMPLE && cistern_acquire(h, &s, 1000) < 0)
		return 3;
	if (what == HOLD_BATCH && cistern_acquire_batch(h, batch, 0, 1000) < 0)
		return 5;
	if (what == HOLD_PAIR && cistern_acquire_pair(h, batch, 1000) < 0)
		return 6;
	return 0;
}

pid_t spawn_holder(const char *name, enum hold what)
{
	return spawn_attached(name, hold, &what);
}

static int fill(struct cistern *h, const void *arg)
{
	uint32_t n = *(const uint32_t *)arg;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t buf[64];
		size_t len = 1 + i % 50;
		fill_payload(buf, len, 7, i);
		struct cistern_meta m = {.sim_id = 7, .time_step = i};
		if (cistern_put(h, buf, len, &m, 1000) < 0)
			return 2;
	}
	return 0;
}

pid_t spawn_filler(const char *name, uint32_t n)
{
	return spawn_attached(name, fill, &n);
}

static int hold_window(struct cistern *h, const void *arg)
{
	size_t length = *(const size_t *)arg;
	struct cistern_sample w[64];
	if (length > 64)
		return 1;
	return cistern_acquire_window(h, w, length, 1, 1000) < 0 ? 2 : 0;
}

pid_t spawn_window_holder(const char *name, size_t length)
{
	return spawn_attached(name, hold_window, &length);
}

#define FORKED_MAX 16

void run_forked_producers_and_readers(struct cistern *c, uint32_t producers, child_fn producer,
				      uint32_t readers, child_fn reader)
{
	cr_assert(producers <= FORKED_MAX && readers <= FORKED_MAX);
	const char *name = seg_name_of(c);
	pid_t prod[FORKED_MAX], rd[FORKED_MAX], doomed;
	for (uint32_t p = 0; p < producers; p++)
		if ((prod[p] = fork_child()) == 0) {
			producer(name, p);
			_exit(9); /* a body that returns is a failure, not a second parent */
		}
	for (uint32_t r = 0; r < readers; r++)
		if ((rd[r] = fork_child()) == 0) {
			reader(name, r);
			_exit(9);
		}
	if ((doomed = fork_child()) == 0) {
		reader(name, 0);
		_exit(9);
	}
	for (uint32_t p = 0; p < producers; p++)
		cr_assert_eq(reap_status(prod[p]), 0, "producer %u failed", p);
	kill_and_reap(doomed);
	cistern_close_reception(c);
	for (uint32_t r = 0; r < readers; r++)
		cr_assert_eq(reap_status(rd[r]), 0, "reader %u failed or saw a bad window", r);
}

int reap_status(pid_t pid)
{
	int status;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void kill_and_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

int reap_all(void)
{
	int bad = 0, status;
	while (wait(&status) > 0)
		bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	return bad;
}

/* The object this test made: one per test process. */
static char *special_path(void)
{
	static char path[128];
	return path;
}

/*
 * Take the object away. A FIFO is first opened for writing for a moment:
 * whatever waits to open it for reading, anywhere on the machine (a build
 * of cistern without the fix, run by someone else), then goes on.
 */
static void special_clear(void)
{
	const char *path = special_path();
	int w = open(path, O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	if (w >= 0)
		close(w);
	if (unlink(path) < 0)
		rmdir(path);
}

static void special_alarm(int sig)
{
	(void)sig;
	special_clear();
	_exit(3);
}

int special_make(enum special kind, const char *name, int *keep)
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

void special_remove(int keep)
{
	alarm(0);
	special_clear();
	if (keep >= 0)
		close(keep);
}

int forbid_io_uring(void)
{
#if defined(__x86_64__) && defined(__NR_io_uring_setup)
	struct sock_filter prog[] = {
		/* Another architecture's calls: let them be (none here). */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fprog = {.len = sizeof(prog) / sizeof(prog[0]), .filter = prog};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) < 0)
		return -errno;
	return 0;
#else
	return -ENOTSUP;
#endif
}
