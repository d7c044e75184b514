/* SPDX-License-Identifier: MIT */
/*
 * fuzz_dump.c - libFuzzer target for the dump reader: the input is written as
 * a dump file, then cistern_dump_verify() and cistern_restore() read it. Both
 * must refuse damage with an error, never crash, and a refused restore must
 * leave no segment behind. The seeds (fuzz/corpus/dump/) are real dumps of
 * small segments of several policies, and fifo-refused-config, a FIFO's
 * dump given a read rate under a meta checksum that holds, which a run
 * found verify accepting and restore refusing, sim-paired-key-out-of-bounds,
 * a SimPairedReservoir dump with a record of sim_id = sweep_size, and
 * empty-seen-set, a FIFO dump whose seen set is 0 bytes long (both with
 * checksums that hold), reservoir-cold, a dump in format 3 of a reservoir
 * with a cold tier in /dev/shm (fuzz/gen_corpus.c writes it), so the cold
 * section's reader is fuzzed too, and sim-paired-end-of-episode, a format 4
 * dump whose records carry end-of-episode marks. Every section carries a
 * checksum, so most mutations stop at the first one, which is itself what
 * is tested: nothing past a failed checksum is trusted. Verify and
 * restore must give the same answer, and neither may write a byte to
 * standard error.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/handle.h"
#include <cistern/admin.h>

#define CHECK(c)                          \
	do {                              \
		if (!(c))                 \
			__builtin_trap(); \
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

	/* Standard error goes to a memory file while the library runs: it must stay empty. */
	static int cap = -1;
	if (cap < 0)
		cap = memfd_create("fuzz-stderr", MFD_CLOEXEC);
	CHECK(cap >= 0 && ftruncate(cap, 0) == 0 && lseek(cap, 0, SEEK_SET) == 0);
	fflush(stderr);
	int saved = dup(2);
	CHECK(saved >= 0 && dup2(cap, 2) == 2);

	struct cistern_dump_info info;
	int v = cistern_dump_verify(path, &info);
	CHECK(v == 0 || v == -EBADMSG || v == -ENOMSG || v == -EPROTONOSUPPORT || v == -ENOTSUP ||
	      v == -EINVAL || v == -ENOMEM);
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
	fflush(stderr);
	CHECK(dup2(saved, 2) == 2);
	close(saved);
	CHECK(lseek(cap, 0, SEEK_END) == 0); /* the library printed nothing */
	/*
	 * Verify and restore answer alike: one set of checks serves both. A
	 * restore also makes a cold tier's file, which this machine may not
	 * allow where the dump says (a missing directory, a file system
	 * without O_DIRECT, no io_uring): errors of the place, not of the file
	 * that verify accepted.
	 */
	bool cold_env = v == 0 && info.config.cold_slots &&
			(r == -ENOENT || r == -EINVAL || r == -EACCES || r == -EPERM ||
			 r == -ENOSYS || r == -EEXIST || r == -EFBIG || r == -ENAMETOOLONG);
	CHECK(v == r || r == -ENOMEM || r == -ENOSPC || v == -ENOMEM || cold_env);
	unlink(path);
	return 0;
}
