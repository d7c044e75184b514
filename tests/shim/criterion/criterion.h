/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for <criterion/criterion.h>, used only by the ThreadSanitizer
 * build (scripts/check.sh, build-tsan).
 *
 * Why: Criterion maps an "inheritable arena" at a fixed address that falls
 * inside ThreadSanitizer's shadow memory, so every Criterion program built
 * with -fsanitize=thread aborts before its first test ("Could not initialize
 * inheritable arena", Criterion issue #274). This header implements the small
 * part of Criterion's interface the tests use: Test() and TestSuite()
 * registration with .init and .fini fixtures, the cr_assert family and
 * cr_log_info. Each test runs in a forked child, as
 * Criterion runs them, under an alarm for its timeout, and the run ends with
 * Criterion's own "Synthesis" line so scripts/test.sh counts it the same way.
 */
#ifndef CISTERN_CRITERION_SHIM_H
#define CISTERN_CRITERION_SHIM_H

/*
 * Read as a system header, as Criterion's own is: an assertion without a
 * message leaves the macros' "..." empty, which -Wpedantic (warning_level=3)
 * reports at every call in the tests, but not for a system header's macros.
 */
#pragma GCC system_header

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* .init runs before the test, .fini after it, also after a failed assertion. */
struct shim_test_opts {
	double timeout;
	int disabled;
	void (*init)(void);
	void (*fini)(void);
};

struct shim_test {
	const char *suite, *name;
	void (*fn)(void);
	struct shim_test_opts opts;
};

void shim_register(const char *suite, const char *name, void (*fn)(void),
		   struct shim_test_opts opts);
void shim_register_suite(const char *suite, struct shim_test_opts opts);
void shim_fail(const char *file, int line, const char *expr, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 4, 5)));
void shim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define Test(suite, name, ...)                                                      \
	static void shim_##suite##_##name(void);                                    \
	__attribute__((constructor)) static void shim_reg_##suite##_##name(void)    \
	{                                                                           \
		shim_register(#suite, #name, shim_##suite##_##name,                 \
			      (struct shim_test_opts){.disabled = 0, __VA_ARGS__}); \
	}                                                                           \
	static void shim_##suite##_##name(void)

/* A suite's fixtures; the declaration at the end takes the caller's semicolon. */
#define TestSuite(suite, ...)                                                                     \
	__attribute__((constructor)) static void shim_suite_##suite(void)                         \
	{                                                                                         \
		shim_register_suite(#suite, (struct shim_test_opts){.disabled = 0, __VA_ARGS__}); \
	}                                                                                         \
	extern int shim_suite_##suite##_declared

/* Every assertion takes an optional printf-style message, as Criterion's do. */
#define SHIM_CHECK(cond, expr, ...)                                           \
	do {                                                                  \
		if (!(cond))                                                  \
			shim_fail(__FILE__, __LINE__, expr, " " __VA_ARGS__); \
	} while (0)

#define cr_assert(c, ...) SHIM_CHECK((c), #c, ##__VA_ARGS__)
#define cr_assert_not(c, ...) SHIM_CHECK(!(c), "!(" #c ")", ##__VA_ARGS__)
#define cr_assert_fail(...) shim_fail(__FILE__, __LINE__, "fail", " " __VA_ARGS__)
#define cr_assert_eq(a, b, ...) SHIM_CHECK((a) == (b), #a " == " #b, ##__VA_ARGS__)
#define cr_assert_neq(a, b, ...) SHIM_CHECK((a) != (b), #a " != " #b, ##__VA_ARGS__)
#define cr_assert_lt(a, b, ...) SHIM_CHECK((a) < (b), #a " < " #b, ##__VA_ARGS__)
#define cr_assert_leq(a, b, ...) SHIM_CHECK((a) <= (b), #a " <= " #b, ##__VA_ARGS__)
#define cr_assert_gt(a, b, ...) SHIM_CHECK((a) > (b), #a " > " #b, ##__VA_ARGS__)
#define cr_assert_geq(a, b, ...) SHIM_CHECK((a) >= (b), #a " >= " #b, ##__VA_ARGS__)
#define cr_assert_null(p, ...) SHIM_CHECK((p) == NULL, #p " == NULL", ##__VA_ARGS__)
#define cr_assert_not_null(p, ...) SHIM_CHECK((p) != NULL, #p " != NULL", ##__VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) SHIM_CHECK(strcmp((a), (b)) == 0, #a " eq " #b, ##__VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) SHIM_CHECK(strcmp((a), (b)) != 0, #a " ne " #b, ##__VA_ARGS__)
#define cr_assert_arr_eq(a, b, n, ...) \
	SHIM_CHECK(memcmp((a), (b), (n)) == 0, #a " eq " #b, ##__VA_ARGS__)
#define cr_log_info(...) shim_log(__VA_ARGS__)

#endif
