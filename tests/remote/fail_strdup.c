/* SPDX-License-Identifier: MIT */
/*
 * fail_strdup.c - an LD_PRELOAD module for tests/remote/test_remote.c: strdup() of
 * the string named by CISTERN_FAIL_STRDUP fails with ENOMEM, every other
 * copy succeeds. It lets a test reach the out-of-memory path of an option
 * parser without exhausting memory.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

char *strdup(const char *s)
{
	const char *fail = getenv("CISTERN_FAIL_STRDUP");
	if (fail && strcmp(s, fail) == 0) {
		errno = ENOMEM;
		return NULL;
	}
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}
