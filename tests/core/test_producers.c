/* SPDX-License-Identifier: MIT */
/*
 * test_producers.c - expected producers (cfg.expected_producers): done,
 * died before done, replacements, and CISTERN_DEAD_PRODUCER_DONE, with
 * real processes killed by SIGKILL.
 */
#include <criterion/criterion.h>

#include "helpers.h"
#include <cistern/admin.h>

/* Every test's segment goes through make(); the fixture removes it, pass or fail. */
TestSuite(producers, .fini = seg_fini);

static struct cistern *make(const char *tag, uint32_t expected, uint32_t flags)
{
	struct cistern_config cfg = {
		.slot_size = 8, .slot_count = 16, .expected_producers = expected, .flags = flags};
	return seg_create(tag, cfg);
}

static struct cistern_stats stats(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st;
}

enum end { END_DONE_DETACH, END_DETACH, END_KILLED, END_DONE_KILLED };

/*
 * A child that attaches to `name` with `flags`, puts `puts` samples, ends as
 * `how` says (one to be killed says it is ready, then waits for the
 * parent's SIGKILL), and is reaped before this returns.
 */
static void producer_with(const char *name, uint32_t flags, int puts, enum end how)
{
	bool killed = how == END_KILLED || how == END_DONE_KILLED;
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		struct cistern *h;
		if (cistern_attach_flags(name, flags, &h) < 0)
			_exit(1);
		for (int i = 0; i < puts; i++)
			if (cistern_put(h, "sample", 6, NULL, 5000) < 0)
				_exit(2);
		if ((how == END_DONE_DETACH || how == END_DONE_KILLED) &&
		    cistern_producer_done(h) < 0)
			_exit(3);
		if (killed)
			ready_then_wait(p[1]);
		cistern_detach(h);
		_exit(0);
	}
	if (killed) {
		cr_assert_gt(await_ready(p, pid), 0, "the producer ended on its own");
		kill_and_reap(pid);
		return;
	}
	close(p[0]);
	close(p[1]);
	int status = reap_status(pid);
	cr_assert_eq(status, 0, "producer status %d", status);
}

/* As producer_with(), attached without flags: counted from its first put. */
static void producer(const char *name, int puts, enum end how)
{
	producer_with(name, 0, puts, how);
}

/* As producer_with(), attached with CISTERN_ATTACH_PRODUCER: counted from its attach. */
static void attached_producer(const char *name, int puts, enum end how)
{
	producer_with(name, CISTERN_ATTACH_PRODUCER, puts, how);
}

/* Attach and detach again: the attach reclaims every dead entry. */
static void reclaim_the_dead(const char *name)
{
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0);
	cistern_detach(d);
}

/* Read until something other than a sample; how many samples came first in *n. */
static int read_all(struct cistern *c, int timeout_ms, int *n)
{
	char buf[8];
	ssize_t r;
	*n = 0;
	while ((r = cistern_get(c, buf, sizeof(buf), NULL, timeout_ms)) == 6)
		(*n)++;
	return (int)r;
}

Test(producers, with_the_flag_a_producer_killed_before_done_counts_as_done, .timeout = 60)
{
	struct cistern *c = make("prod-flag", 2, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	producer(name, 3, END_DONE_DETACH);
	producer(name, 2, END_KILLED);
	int n;
	/* The waiting reader's sweep reclaims the dead producer, which closes reception. */
	cr_assert_eq(read_all(c, 10000, &n), CISTERN_EOD);
	cr_assert_eq(n, 5, "every committed sample read");
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_expected, 2);
	cr_assert_eq(st.producers_done, 1);
	cr_assert_eq(st.producers_died, 1);
	cr_assert(st.reception_closed);
}

Test(producers, without_the_flag_readers_wait_for_a_replacement, .timeout = 60)
{
	struct cistern *c = make("prod-wait", 2, 0);
	const char *name = seg_name_of(c);
	producer(name, 3, END_DONE_DETACH);
	producer(name, 2, END_KILLED);
	int n;
	/* A second of waiting: sweeps every 200 ms reclaim the dead producer meanwhile. */
	cr_assert_eq(read_all(c, 1000, &n), -ETIMEDOUT, "reception stays open");
	cr_assert_eq(n, 5);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_done, 1);
	cr_assert_eq(st.producers_died, 1, "the death is counted, not taken as done");
	cr_assert(!st.reception_closed);
	/* A producer started in its place, done: the count is full. */
	producer(name, 1, END_DONE_DETACH);
	cr_assert_eq(read_all(c, 10000, &n), CISTERN_EOD);
	cr_assert_eq(n, 1);
	st = stats(c);
	cr_assert_eq(st.producers_done, 2);
	cr_assert_eq(st.producers_died, 1);
}

Test(producers, producer_done_counts_the_dead_under_the_flag)
{
	struct cistern *c = make("prod-left", 3, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	producer(name, 1, END_KILLED);
	/* An attach reclaims the dead entry. */
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0);
	cr_assert_eq(stats(c).producers_died, 1);
	cr_assert_eq(cistern_producer_done(d), 1, "three expected: one died, one done");
	cr_assert_eq(cistern_producer_done(d), 0);
	cr_assert(stats(c).reception_closed);
	cistern_detach(d);
}

Test(producers, a_dead_producer_shows_in_the_stats_before_its_reclaim)
{
	struct cistern *c = make("prod-unrecl", 2, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	producer(name, 1, END_KILLED);
	/* Nobody waits or attaches: the entry is dead, not reclaimed. */
	struct cistern *ro;
	cr_assert_eq(cistern_open_readonly(name, &ro), 0);
	struct cistern_stats st = stats(ro);
	cr_assert_eq(st.producers_died, 1);
	cr_assert(!st.reception_closed, "only a reclaim counts it towards closing");
	cistern_detach(ro);
}

Test(producers, a_producer_that_detaches_before_done_is_neither_done_nor_died)
{
	struct cistern *c = make("prod-detach", 1, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	producer(name, 2, END_DETACH);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_done, 0);
	cr_assert_eq(st.producers_died, 0);
	cr_assert(!st.reception_closed, "it may attach again");
}

Test(producers, a_producer_killed_after_done_is_not_counted_again)
{
	struct cistern *c = make("prod-after", 2, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	producer(name, 2, END_DONE_KILLED);
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0); /* reclaims it */
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_done, 1);
	cr_assert_eq(st.producers_died, 0);
	cr_assert(!st.reception_closed, "one of two producers ended");
	cistern_detach(d);
}

Test(producers, a_killed_reader_is_not_a_producer)
{
	struct cistern *c = make("prod-reader", 1, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "sample", 6, NULL, 0), 0);
	pid_t pid = spawn_holder(name, HOLD_SAMPLE);
	cr_assert_gt(pid, 0);
	kill_and_reap(pid);
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_died, 0);
	cr_assert(!st.reception_closed);
	cistern_detach(d);
}

Test(producers, the_flag_needs_expected_producers)
{
	struct cistern_config cfg = {.flags = CISTERN_DEAD_PRODUCER_DONE};
	const char *why = cistern_config_problem(&cfg);
	cr_assert(why && strstr(why, "expected_producers"), "%s", why ? why : "(none)");
}

Test(producers, with_the_flag_a_producer_killed_before_its_first_put_counts_as_done, .timeout = 60)
{
	struct cistern *c = make("prod-start", 2, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	producer(name, 3, END_DONE_DETACH);
	/* A simulation that crashed at start-up: attached as a producer, never put. */
	attached_producer(name, 0, END_KILLED);
	int n;
	cr_assert_eq(read_all(c, 10000, &n), CISTERN_EOD, "the readers see end of data");
	cr_assert_eq(n, 3);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_done, 1);
	cr_assert_eq(st.producers_died, 1);
}

Test(producers, without_the_flag_a_producer_killed_before_its_first_put_is_counted_died)
{
	struct cistern *c = make("prod-start-wait", 1, 0);
	const char *name = seg_name_of(c);
	attached_producer(name, 0, END_KILLED);
	reclaim_the_dead(name);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_died, 1);
	cr_assert(!st.reception_closed, "reception waits for a replacement");
}

Test(producers, a_producer_attached_as_one_and_killed_after_its_puts_is_counted_once)
{
	struct cistern *c = make("prod-start-once", 2, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	attached_producer(name, 2, END_KILLED);
	reclaim_the_dead(name);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_died, 1, "counted at its attach and its first put: one producer");
	cr_assert(!st.reception_closed, "one of two producers ended");
}

Test(producers, a_producer_attached_as_one_and_killed_after_done_is_not_counted_died)
{
	struct cistern *c = make("prod-start-done", 2, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	attached_producer(name, 0, END_DONE_KILLED);
	reclaim_the_dead(name);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_done, 1);
	cr_assert_eq(st.producers_died, 0);
	cr_assert(!st.reception_closed, "one of two producers ended");
}

Test(producers, a_producer_attached_as_one_that_detaches_is_neither_done_nor_died)
{
	struct cistern *c = make("prod-start-detach", 1, CISTERN_DEAD_PRODUCER_DONE);
	const char *name = seg_name_of(c);
	attached_producer(name, 0, END_DETACH);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_done, 0);
	cr_assert_eq(st.producers_died, 0);
	cr_assert(!st.reception_closed, "it may attach again");
}

Test(producers, attaching_as_a_producer_counts_nothing_without_expected_producers)
{
	struct cistern *c = make("prod-start-none", 0, 0);
	const char *name = seg_name_of(c);
	attached_producer(name, 0, END_KILLED);
	reclaim_the_dead(name);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.producers_died, 0);
	cr_assert(!st.reception_closed);
}
