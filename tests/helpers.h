/* SPDX-License-Identifier: MIT */
/*
 * helpers.h - small utilities shared by the test programs (helpers.c, built
 * once as a static library that every test program links).
 */
#ifndef CISTERN_TEST_HELPERS_H
#define CISTERN_TEST_HELPERS_H

/* The headers most tests use: a test program includes this one first. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
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

/* The .fini fixture: detach what is still attached, remove every name, file and directory. */
void seg_fini(void);

/*
 * The name "t-<tag>-<pid>", with whatever a killed earlier run left under
 * it removed; seg_fini unlinks it. The string lives until the test ends.
 */
const char *seg_name(const char *tag);

/*
 * Hand seg_fini a segment name the test did not make with seg_name() (the
 * temporary object a killed restore left, say): it unlinks it at the end.
 * The string lives until the test ends.
 */
const char *seg_adopt(const char *name);

/*
 * An empty shm object under cistern's prefix named seg_name(tag), as a
 * creator leaves one between shm_open() and ftruncate(): its descriptor (to
 * close), the name in *name. seg_fini unlinks it.
 */
int seg_shm_object(const char *tag, const char **name);

/*
 * Give seg_fini a handle the test made itself on name, a string seg_name()
 * or seg_adopt() returned (to assert its create in its own words, say):
 * seg_fini detaches it. Returns c.
 */
struct cistern *seg_keep(const char *name, struct cistern *c);

/*
 * Create the segment seg_name(tag) with *cfg, or the defaults if cfg is NULL
 * (asserted to succeed); seg_fini detaches the handle and unlinks the segment.
 */
struct cistern *seg_create_cfg(const char *tag, const struct cistern_config *cfg);

/* seg_create_cfg() with the config by value. */
struct cistern *seg_create(const char *tag, struct cistern_config cfg);

/* The name of a segment seg_create() made. */
const char *seg_name_of(const struct cistern *c);

/*
 * Detach a handle seg_create() gave, before the end of the test (to give up
 * its roles or pins, say); seg_fini still unlinks the segment. The detach's
 * result.
 */
int seg_detach(struct cistern *c);

/*
 * Detach and unlink now, and assert that both succeed: the end of a test
 * that checks its clean-up, or of one that makes the same segment again.
 */
void seg_drop(struct cistern *c);

/*
 * The path "/tmp/cistern-test-<tag>-<pid>.dump" for a dump file, with
 * whatever a killed earlier run left there removed; seg_fini removes it.
 * The string lives until the test ends.
 */
const char *seg_dump_path(const char *tag);

/*
 * A directory "/tmp/cistern-test-<tag>-<pid>", made (mode 0700) or emptied
 * of what an earlier run left in it; seg_fini removes it with the files in
 * it. The string lives until the test ends.
 */
const char *seg_dir(const char *tag);

/* Remove the files in directory path (not below it). */
void seg_empty_dir(const char *path);

/* Memory shared with forked children (zeroed); NULL if mmap() failed. */
void *shared_alloc(size_t size);

/* Standard normal quantiles, for chi2_critical(): at 0.999 and at 1 - 1e-6. */
#define Z_999 3.090232
#define Z_1E6 4.753424

/*
 * The chi-square quantile for df degrees of freedom at the level whose
 * standard normal quantile is z (Wilson-Hilferty approximation): a
 * statistic at or above it rejects at a false-failure rate of 1 - that level.
 */
double chi2_critical(int df, double z);

/* CLOCK_MONOTONIC in seconds. */
double mono_now(void);

/* A payload whose every byte depends on (producer, seq), so damage is detected. */
void fill_payload(uint8_t *p, size_t len, uint32_t producer, uint32_t seq);

/* Whether p holds fill_payload(.., producer, seq) (len up to 4096 bytes). */
int check_payload(const uint8_t *p, size_t len, uint32_t producer, uint32_t seq);

/*
 * Put n samples whose lengths run evenly from 0 to max (sample i is
 * i * max / (n - 1) bytes of fill_payload(.., producer, i), time_step i).
 * 0, or the first failing put's error. The buffer holds up to 4096 bytes.
 */
int put_length_ramp(struct cistern *c, uint32_t n, size_t max, uint32_t producer);

/*
 * fork() for test children: a child dies with its parent, so a test that
 * fails or times out never leaves producers or readers running.
 */
pid_t fork_child(void);

/*
 * The pipe protocol of spawned children: the parent makes a pipe p and
 * forks; the child closes p[0] and, once set up, says so on p[1]; the
 * parent's await_ready() waits for that word.
 */

/* In a spawned child: say ready down the pipe (the child _exits 4 if it cannot). */
void say_ready(int fd);

/* In a spawned child: say ready down the pipe, then wait to be killed. */
void ready_then_wait(int fd);

/*
 * In the parent of a child spawned with pipe p: its pid once it said ready,
 * or -1 with the child reaped (it failed, or the fork did).
 */
pid_t await_ready(int p[2], pid_t pid);

/*
 * What a spawned child does once attached, before it says it is ready: 0,
 * or the status the child _exits with.
 */
typedef int (*attached_fn)(struct cistern *h, const void *arg);

/*
 * Fork a child that attaches to `name` (or _exits 1), runs set_up(h, arg),
 * says it is ready, then waits to be killed. Returns its pid once it is
 * ready, or -1 if it could not start (the child is reaped).
 */
pid_t spawn_attached(const char *name, attached_fn set_up, const void *arg);

/* What a holder child takes before it waits to be killed. */
enum hold { HOLD_NOTHING, HOLD_RESERVATION, HOLD_SAMPLE, HOLD_BATCH, HOLD_PAIR };

/*
 * Fork a child that attaches to `name`, takes `what` (a reservation, an
 * acquired sample: pinned under the reservoirs, held alone under FIFO and
 * FIRO, a batch of the segment's batch_size, or a pair), says it is ready, then
 * waits to be killed. Returns its pid once it is ready, or -1 if it could
 * not start (the child is reaped).
 */
pid_t spawn_holder(const char *name, enum hold what);

/*
 * Fork a child that attaches to `name`, commits n samples (sample i is
 * 1 + i % 50 bytes of fill_payload(.., 7, i), time_step i), says it is ready,
 * then waits to be killed: a producer that dies with its samples committed.
 * Returns its pid once they are in, or -1 (the child is reaped).
 */
pid_t spawn_filler(const char *name, uint32_t n);

/*
 * Fork a child that attaches to `name`, acquires a window of `length`
 * consecutive steps (at most 64) with cistern_acquire_window(), says it is
 * ready, then waits to be killed: a reader that dies holding a window.
 * Returns its pid once it holds the window, or -1 (the child is reaped).
 */
pid_t spawn_window_holder(const char *name, size_t length);

/* The body of a forked producer or reader: attaches to name and _exits 0 if all went well. */
typedef void (*child_fn)(const char *name, uint32_t which);

/*
 * Producers and readers at once on c, all forked: producer(name, p) for p
 * below producers, reader(name, r) for r below readers, and one more
 * reader(name, 0) killed once the producers are done, while it may hold
 * samples. Asserts that every producer exits 0, then closes reception and
 * asserts that every reader that lived exits 0 (reaches end of data and saw
 * only what it should). At most 16 of each.
 */
void run_forked_producers_and_readers(struct cistern *c, uint32_t producers, child_fn producer,
				      uint32_t readers, child_fn reader);

/* Reap child pid: its exit status, 128 + the signal that ended it, or -1 if waitpid() failed. */
int reap_status(pid_t pid);

/* SIGKILL a child and reap it. */
void kill_and_reap(pid_t pid);

/* Wait for every child; return how many exited non-zero or by a signal. */
int reap_all(void);

/*
 * Objects anyone who may write /dev/shm can put under a segment's name that
 * are not regular files. Opening a FIFO for reading waits for a writer, so a
 * test that meets one arms an alarm: special_make() installs a SIGALRM
 * handler that takes the object away and fails the test, instead of a wait
 * that hangs the suite.
 */
enum special { SP_FIFO, SP_SOCKET, SP_DIR, SP_LINK, SP_DEVICE };

/*
 * Make a `kind` object at /dev/shm/cistern.<name>. *keep receives a
 * descriptor to close when done (the socket's), or -1. 0 or -errno.
 */
int special_make(enum special kind, const char *name, int *keep);

/* Done with the object: no alarm, no object, no descriptor. */
void special_remove(int keep);

/*
 * From now on, io_uring_setup() fails with ENOSYS in this process and in
 * what it forks or executes, as under kernel.io_uring_disabled or a
 * container's seccomp filter. For a test's own process or child: there is
 * no way back. 0 or -errno.
 */
int forbid_io_uring(void);

#endif
