/* SPDX-License-Identifier: MIT */
/*
 * fuzz_dump.c - libFuzzer target for the dump reader: the input is written as
 * a dump file, then cistern_dump_verify() and cistern_restore() read it. Both
 * must refuse damage with an error, never crash, and a refused restore must
 * leave no segment behind. The seeds (fuzz/corpus/dump/) are real dumps of
 * small segments of several policies, and fifo-refused-config, a FIFO's
 * dump given a read rate under a meta checksum that holds, which a run
 * found verify accepting and restore refusing. Every section carries a
 * checksum, so most mutations stop at the first one, which is itself what
 * is tested: nothing past a failed checksum is trusted.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define CHECK(c)                                                                          \
	do {                                                                              \
		if (!(c))                                                                 \
			__builtin_trap();                                                 \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64], name[64];
	snprintf(path, sizeof(path), "/dev/shm/fuzz-dump-%d.in", (int)getpid());
	snprintf(name, sizeof(name), "fuzz-dump-%d", (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, data, size) == (ssize_t)size);
	close(fd);

	struct cistern_dump_info info;
	int v = cistern_dump_verify(path, &info);
	CHECK(v == 0 || v == -EBADMSG || v == -ENOMSG || v == -EPROTONOSUPPORT ||
	      v == -ENOTSUP || v == -EINVAL || v == -ENOMEM);
	int r = cistern_restore(path, name, NULL, NULL, NULL);
	if (r == 0) {
		/* A restored segment must attach and answer like any other. */
		struct cistern *c;
		CHECK(cistern_attach(name, &c) == 0);
		struct cistern_stats st;
		CHECK(cistern_stats_get(c, &st) == 0);
		cistern_detach(c);
		cistern_unlink(name);
	} else {
		struct cistern *c;
		CHECK(cistern_attach(name, &c) == -ENOENT); /* nothing was created */
	}
	/* What verify accepts, restore accepts, and the other way round. */
	CHECK((v == 0) == (r == 0) || r == -ENOMEM || r == -ENOSPC);
	unlink(path);
	return 0;
}
