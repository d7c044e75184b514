/* SPDX-License-Identifier: MIT */
/*
 * shim.c - the runner of the Criterion stand-in used by the ThreadSanitizer
 * build (see criterion/criterion.h). Runs each registered test in a forked
 * child with an alarm, prints Criterion-like result lines and the closing
 * "Synthesis" line, and exits non-zero if any test failed or crashed.
 * Options: --filter=SUBSTRING runs the tests whose "suite::name" contains it;
 * other arguments (such as --jobs=1) are accepted and ignored.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criterion/criterion.h"

#define SHIM_MAX_TESTS 256
#define SHIM_DEFAULT_TIMEOUT 600

static struct shim_test tests[SHIM_MAX_TESTS];
static int ntests;

/* Suites with fixtures (TestSuite); a suite without one has none. */
static struct {
	const char *suite;
	struct shim_test_opts opts;
} suites[SHIM_MAX_TESTS];
static int nsuites;

/*
 * In a test's process: the test running, its pid (a process the test forks
 * fails alone, its fixtures are its parent's) and whether its .fini fixtures
 * have begun.
 */
static const struct shim_test *current;
static pid_t current_pid;
static int finishing;

void shim_register(const char *suite, const char *name, void (*fn)(void),
		   struct shim_test_opts opts)
{
	if (ntests == SHIM_MAX_TESTS || opts.disabled)
		return;
	tests[ntests++] = (struct shim_test){suite, name, fn, opts};
}

void shim_register_suite(const char *suite, struct shim_test_opts opts)
{
	if (nsuites < SHIM_MAX_TESTS) {
		suites[nsuites].suite = suite;
		suites[nsuites++].opts = opts;
	}
}

static const struct shim_test_opts *suite_opts(const char *suite)
{
	static const struct shim_test_opts none;
	for (int i = 0; i < nsuites; i++)
		if (strcmp(suites[i].suite, suite) == 0)
			return &suites[i].opts;
	return &none;
}

/*
 * The test's .fini, then its suite's, as Criterion runs them: once, even
 * when an assertion fails in the test; a failure inside them ends them.
 */
static void run_fini(void)
{
	if (!current || finishing || getpid() != current_pid)
		return;
	finishing = 1;
	if (current->opts.fini)
		current->opts.fini();
	if (suite_opts(current->suite)->fini)
		suite_opts(current->suite)->fini();
}

void shim_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
	fprintf(stderr, "[----] %s:%d: Assertion Failed: %s\n[----]   ", file, line, expr);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	fflush(NULL);
	run_fini();
	fflush(NULL);
	_exit(1);
}

void shim_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "[----] ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

int main(int argc, char **argv)
{
	const char *filter = NULL;
	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], "--filter=", 9) == 0)
			filter = argv[i] + 9;
	int tested = 0, passed = 0, failed = 0, crashed = 0;
	for (int i = 0; i < ntests; i++) {
		char id[256];
		snprintf(id, sizeof(id), "%s::%s", tests[i].suite, tests[i].name);
		if (filter && !strstr(id, filter))
			continue;
		tested++;
		fflush(NULL);
		pid_t pid = fork();
		if (pid == 0) {
			unsigned t = tests[i].opts.timeout > 0 ? (unsigned)tests[i].opts.timeout + 1
							       : SHIM_DEFAULT_TIMEOUT;
			alarm(t);
			current = &tests[i];
			current_pid = getpid();
			if (suite_opts(tests[i].suite)->init)
				suite_opts(tests[i].suite)->init();
			if (tests[i].opts.init)
				tests[i].opts.init();
			tests[i].fn();
			run_fini();
			fflush(NULL);
			_exit(0);
		}
		int status = 0;
		waitpid(pid, &status, 0);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			passed++;
			printf("[PASS] %s\n", id);
		} else if (WIFEXITED(status)) {
			failed++;
			printf("[FAIL] %s\n", id);
		} else {
			crashed++;
			printf("[FAIL] %s: CRASH! (signal %d)\n", id, WTERMSIG(status));
		}
		fflush(stdout);
	}
	printf("[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: %d \n", tested,
	       passed, failed, crashed);
	return failed + crashed ? 1 : 0;
}
