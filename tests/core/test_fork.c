/* SPDX-License-Identifier: MIT */
/*
 * test_fork.c - handles and fork(). A child inherits its parent's handles (what
 * Python's multiprocessing and torch's DataLoader workers do): it must not be
 * able to use them, nor keep its parent's attachment alive, so that a parent
 * killed while such children live is seen dead as promptly as one without;
 * and it attaches by itself as any process does.
 *
 * The children that inherit a handle here sleep (a "sleeper") while the test
 * kills their parent. The test process is made a subreaper, so that sleepers
 * orphaned by the kill become its children and are reaped at the end.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/prctl.h>

#include "helpers.h"
#include <cistern/admin.h>

/* Every test's segment is named by seg_name(); the fixture removes it, pass or fail. */
TestSuite(fork, .fini = seg_fini);

#define SLOT 64
/* How long a sleeper lives, unless the test ends it first: far longer than PROMPT_S. */
#define SLEEPER_LIFE_S 30
/* A dead process's attachment must be seen dead within this (sweeps run every 200 ms). */
#define PROMPT_S 2.0

static pid_t test_pid;

static void setup(void)
{
	test_pid = getpid();
	prctl(PR_SET_CHILD_SUBREAPER, 1);
}

/*
 * Fork a child that inherits every handle of the caller and sleeps, up to
 * SLEEPER_LIFE_S or until the test process is gone (it is not killed with
 * its parent: outliving it is the point).
 */
static pid_t fork_sleeper(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		for (int i = 0; i < SLEEPER_LIFE_S * 10 && kill(test_pid, 0) == 0; i++)
			usleep(100000);
		_exit(0);
	}
	return pid;
}

/*
 * Fork a holder: it attaches to `name`, takes `what` (HOLD_RESERVATION or
 * HOLD_SAMPLE), forks a sleeper and waits to be killed. Returns the holder's
 * pid once the sleeper runs (*sleeper its pid), or -1.
 */
static pid_t spawn_forking_holder(const char *name, enum hold what, pid_t *sleeper)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		struct cistern *h;
		struct cistern_slot slot;
		struct cistern_sample s;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		if (what == HOLD_RESERVATION && cistern_reserve(h, &slot, 1000) < 0)
			_exit(2);
		if (what == HOLD_SAMPLE && cistern_acquire(h, &s, 1000) < 0)
			_exit(3);
		pid_t child = fork_sleeper();
		if (child < 0 || write(p[1], &child, sizeof(child)) != sizeof(child))
			_exit(4);
		pause();
		_exit(0);
	}
	close(p[1]);
	ssize_t n = pid > 0 ? read(p[0], sleeper, sizeof(*sleeper)) : -1;
	close(p[0]);
	if (n != sizeof(*sleeper)) {
		if (pid > 0)
			kill_and_reap(pid);
		return -1;
	}
	return pid;
}

/* Whether any entry in use, other than the caller's, is alive with owner pid `pid`. */
static bool alive_entry_of(struct cistern *c, pid_t pid)
{
	struct cistern_proc_info info[16];
	int n = cistern_procs_get(c, info, 16);
	cr_assert_geq(n, 0);
	for (int i = 0; i < n && i < 16; i++)
		if (info[i].pid == (uint32_t)pid && info[i].alive)
			return true;
	return false;
}

Test(fork, a_producer_killed_holding_a_reservation_is_reclaimed_while_its_forked_child_lives,
     .init = setup, .timeout = 60)
{
	struct cistern_config cfg = {.slot_size = SLOT, .slot_count = 8};
	struct cistern *c = seg_create("fork-res", cfg);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "first", 6, NULL, 0), 0);
	pid_t sleeper;
	pid_t holder = spawn_forking_holder(name, HOLD_RESERVATION, &sleeper);
	cr_assert_gt(holder, 0);
	/* Behind the holder's reservation: readers reach it only once that is reclaimed. */
	cr_assert_eq(cistern_put(c, "third", 6, NULL, 0), 0);
	kill_and_reap(holder);

	char buf[SLOT];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 6);
	cr_assert_str_eq(buf, "first");
	double t0 = mono_now();
	ssize_t r = cistern_get(c, buf, sizeof(buf), NULL, (int)(PROMPT_S * 1000));
	double took = mono_now() - t0;
	kill_and_reap(sleeper);
	cr_assert_eq(r, 6,
		     "the reader still waited behind the dead producer's reservation after "
		     "%.1f s (%zd), its child alive",
		     took, r);
	cr_assert_str_eq(buf, "third");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.reclaimed, 1);
}

Test(fork,
     a_reader_killed_holding_a_fifo_sample_gets_it_handed_out_before_end_of_data_while_its_child_lives,
     .init = setup, .timeout = 60)
{
	struct cistern_config cfg = {.slot_size = SLOT, .slot_count = 8};
	struct cistern *c = seg_create("fork-eod", cfg);
	const char *name = seg_name_of(c);
	const char *sent[3] = {"s0", "s1", "s2"};
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cistern_put(c, sent[i], 3, NULL, 0), 0);
	pid_t sleeper;
	pid_t holder = spawn_forking_holder(name, HOLD_SAMPLE, &sleeper); /* holds "s0" */
	cr_assert_gt(holder, 0);
	kill_and_reap(holder);
	cr_assert_eq(cistern_close_reception(c), 0);

	bool got[3] = {false, false, false};
	int extra = 0;
	ssize_t r;
	double deadline = mono_now() + PROMPT_S;
	for (;;) {
		char buf[SLOT];
		r = cistern_get(c, buf, sizeof(buf), NULL, (int)(PROMPT_S * 1000));
		if (r != 3 || mono_now() > deadline)
			break;
		int k = buf[1] - '0';
		if (k >= 0 && k < 3 && !got[k])
			got[k] = true;
		else
			extra++;
	}
	kill_and_reap(sleeper);
	cr_assert_eq(r, CISTERN_EOD, "the reads ended with %zd", r);
	cr_assert(got[0], "end of data came while the dead reader's sample was still held");
	cr_assert(got[1] && got[2]);
	cr_assert_eq(extra, 0);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.redeliveries, 1);
}

/*
 * A child handler registered before the library's runs before it: the child
 * starts this long after the fork with the parent's descriptors still open.
 */
#define SLOW_CHILD_MS 1000

static void slow_child(void)
{
	struct timespec ts = {SLOW_CHILD_MS / 1000, (SLOW_CHILD_MS % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

Test(fork, a_reader_killed_inside_fork_gets_its_fifo_sample_handed_out_before_end_of_data,
     .init = setup, .timeout = 60)
{
	/* The child creates the segment; the fixture removes it. */
	const char *name = seg_name("fork-mid");
	int p[2];
	cr_assert_eq(pipe(p), 0);
	/*
	 * Before any cistern call that sets the library up here (seg_name()'s
	 * unlink does not): this process must not have the library's handlers yet.
	 */
	pid_t holder = fork_child();
	if (holder == 0) {
		close(p[0]);
		/* Before the library's, which the first cistern call sets up: it runs first. */
		pthread_atfork(NULL, NULL, slow_child);
		struct cistern_config cfg = {.slot_size = SLOT, .slot_count = 8};
		struct cistern *h;
		struct cistern_sample s;
		if (cistern_create(name, &cfg, &h) < 0 || cistern_put(h, "s0", 3, NULL, 0) < 0 ||
		    cistern_put(h, "s1", 3, NULL, 0) < 0 || cistern_acquire(h, &s, 0) < 0)
			_exit(1);
		pid_t none = 0;
		if (write(p[1], &none, sizeof(none)) != sizeof(none))
			_exit(2);
		/* The sleeper, its handlers run, says who it is; we are killed before then. */
		pid_t child = fork();
		if (child == 0) {
			pid_t me = getpid();
			if (write(p[1], &me, sizeof(me)) != sizeof(me))
				_exit(3);
			for (int i = 0; i < SLEEPER_LIFE_S * 10 && kill(test_pid, 0) == 0; i++)
				usleep(100000);
			_exit(0);
		}
		pause();
		_exit(0);
	}
	close(p[1]);
	pid_t none = -1, sleeper = 0;
	cr_assert_eq(read(p[0], &none, sizeof(none)), (ssize_t)sizeof(none));
	struct cistern *c;
	cr_assert_eq(cistern_attach(name, &c), 0);
	seg_keep(name, c);
	/* Well inside the fork: the child sleeps in its first handler, the library's yet to run. */
	usleep(SLOW_CHILD_MS * 1000 / 4);
	kill_and_reap(holder);
	cr_assert_eq(cistern_close_reception(c), 0);
	bool got0 = false;
	ssize_t r;
	for (;;) {
		char buf[SLOT];
		r = cistern_get(c, buf, sizeof(buf), NULL, 5000);
		if (r != 3)
			break;
		got0 |= strcmp(buf, "s0") == 0;
	}
	ssize_t n = read(p[0], &sleeper, sizeof(sleeper));
	close(p[0]);
	if (n == (ssize_t)sizeof(sleeper))
		kill_and_reap(sleeper);
	cr_assert_eq(r, CISTERN_EOD, "the reads ended with %zd", r);
	cr_assert(got0, "end of data came while the sample of a reader killed inside fork() "
			"was held");
}

/* A holder's thread waits inside cistern_acquire() on a handle of its own. */
static void *wait_for_data(void *arg)
{
	const char *name = arg;
	struct cistern *h;
	struct cistern_sample s;
	if (cistern_attach(name, &h) == 0)
		cistern_acquire(h, &s, -1);
	return NULL;
}

Test(fork, a_handle_another_thread_waits_in_is_let_go_in_the_child, .init = setup, .timeout = 60)
{
	struct cistern *c = seg_create_cfg("fork-thr", NULL);
	const char *name = seg_name_of(c);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t holder = fork_child();
	if (holder == 0) {
		/* The forking thread holds only a read-only handle, to see the waiter by. */
		struct cistern *ro;
		pthread_t t;
		char arg[CISTERN_NAME_MAX + 1]; /* the thread's: not const */
		snprintf(arg, sizeof(arg), "%s", name);
		if (cistern_open_readonly(name, &ro) < 0 ||
		    pthread_create(&t, NULL, wait_for_data, arg) != 0)
			_exit(1);
		for (int waiting = 0; !waiting;) {
			struct cistern_proc_info info[4];
			int n = cistern_procs_get(ro, info, 4);
			for (int i = 0; i < n && i < 4; i++)
				waiting |= info[i].pid == (uint32_t)getpid() &&
					   info[i].waiting == 1;
			usleep(1000);
		}
		pid_t child = fork_sleeper();
		if (child < 0 || write(p[1], &child, sizeof(child)) != sizeof(child))
			_exit(2);
		pause();
		_exit(0);
	}
	close(p[1]);
	pid_t sleeper = 0;
	cr_assert_eq(read(p[0], &sleeper, sizeof(sleeper)), (ssize_t)sizeof(sleeper));
	close(p[0]);
	cr_assert(alive_entry_of(c, holder));
	kill_and_reap(holder);
	/*
	 * The kernel drops the holder's locks as its descriptors go, which for
	 * a process of several threads may finish a moment after it is reaped.
	 */
	double deadline = mono_now() + PROMPT_S;
	bool alive;
	while ((alive = alive_entry_of(c, holder)) && mono_now() < deadline)
		usleep(10000);
	kill_and_reap(sleeper);
	cr_assert_not(alive,
		      "the waiting thread's attachment outlived its killed process by %.1f s",
		      PROMPT_S);
}

Test(fork, a_child_cannot_use_a_handle_it_inherited, .timeout = 30)
{
	struct cistern *c = seg_create_cfg("fork-use", NULL), *ro;
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "kept", 5, NULL, 0), 0);
	cr_assert_eq(cistern_open_readonly(name, &ro), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		int bad = 0;
		char buf[SLOT] = {0};
		struct cistern_slot slot;
		struct cistern_sample s;
		struct cistern_stats st;
		struct cistern_config cfg;
		struct cistern_occupancy occ;
		struct cistern_proc_info info[4];
		bad += cistern_put(c, "x", 1, NULL, 0) != -EBADF;
		bad += cistern_put_batch(c, buf, 8, 1, NULL, NULL, 0) != -EBADF;
		bad += cistern_reserve(c, &slot, 0) != -EBADF;
		bad += cistern_get(c, buf, sizeof(buf), NULL, 0) != -EBADF;
		bad += cistern_get_batch(c, buf, 8, 1, NULL, NULL, 0) != -EBADF;
		bad += cistern_acquire(c, &s, 0) != -EBADF;
		bad += cistern_close_reception(c) != -EBADF;
		bad += cistern_stats_get(c, &st) != -EBADF;
		bad += cistern_config_get(c, &cfg) != -EBADF;
		bad += cistern_occupancy_get(c, &occ) != -EBADF;
		bad += cistern_procs_get(c, info, 4) != -EBADF;
		/* A read-only handle is inherited the same way. */
		bad += cistern_stats_get(ro, &st) != -EBADF;
		bad += cistern_procs_get(ro, info, 4) != -EBADF;
		_exit(bad);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0,
		     "%d calls on inherited handles did not fail with -EBADF", WEXITSTATUS(status));
	/* And the segment is as the child found it. */
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.reception_closed, 0);
	cr_assert_eq(st.puts, 1);
	cr_assert_eq(st.gets, 0);
	cr_assert_eq(st.procs_attached, 1);
	char buf[SLOT];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 5);
	cr_assert_str_eq(buf, "kept");
	cistern_detach(ro);
}

Test(fork, a_childs_detach_of_an_inherited_handle_leaves_the_parents_attachment_alone,
     .timeout = 30)
{
	struct cistern *c = seg_create_cfg("fork-det", NULL), *other;
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "held", 5, NULL, 0), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	pid_t pid = fork_child();
	if (pid == 0)
		_exit(cistern_detach(c) == 0 ? 0 : 1);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The parent's entry lives on and still holds its sample: nobody else gets it. */
	cr_assert_eq(cistern_attach(name, &other), 0);
	char buf[SLOT];
	cr_assert_eq(cistern_get(other, buf, sizeof(buf), NULL, 0), -EAGAIN);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.procs_attached, 2);
	cr_assert_eq(st.redeliveries, 0);
	cr_assert_eq(cistern_release(c, &s), 0);
	cistern_detach(other);
}

Test(fork, a_child_attaches_by_itself_and_moves_samples, .timeout = 30)
{
	struct cistern *c = seg_create_cfg("fork-own", NULL);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "to child", 9, NULL, 0), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *own;
		char buf[SLOT];
		if (cistern_attach(name, &own) < 0)
			_exit(1);
		if (cistern_get(own, buf, sizeof(buf), NULL, 1000) != 9 || strcmp(buf, "to child"))
			_exit(2);
		if (cistern_put(own, "to parent", 10, NULL, 1000) < 0)
			_exit(3);
		/* The inherited handle, let go of in the child, leaves the parent's be. */
		if (cistern_detach(c) < 0 || cistern_detach(own) < 0)
			_exit(4);
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0);
	char buf[SLOT];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 10);
	cr_assert_str_eq(buf, "to parent");
}
