/* SPDX-License-Identifier: MIT */
/*
 * fuzz_attach.c - libFuzzer target for cistern_attach() on a shm object whose
 * bytes are the fuzz input, followed, when attach succeeds, by one try of each
 * call (put, acquire/release, get, stats, close, detach) on what it mapped.
 *
 * The input is the object's first bytes. If it holds a header claiming a
 * larger object (up to 256 KiB), the object is grown to that size (zero
 * bytes), so that attach gets past the size check and runs the attachment
 * table, the sweep and the reclaim over the fuzzed entries and slot words.
 * Inputs whose magic is all zero read as "still being created" and make
 * attach retry for a second: fuzz_header covers those, this target skips them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/handle.h"

#define GROW_MAX (256 * 1024)

#define CHECK(c)                          \
	do {                              \
		if (!(c))                 \
			__builtin_trap(); \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char name[64], shm[96];

static void exercise(struct cistern *c)
{
	const char *arena_end = c->arena + c->slot_count * c->slot_stride;
	CHECK((char *)c->hdr + c->map_size >= arena_end);
	uint8_t buf[64] = {0};
	int r = cistern_put(c, buf, sizeof(buf) < c->slot_size ? sizeof(buf) : c->slot_size, NULL,
			    0);
	/* -EBUSY: a single-producer FIFO whose role word names another entry. */
	CHECK(r == 0 || r == -EAGAIN || r == -EPIPE || r == -EPROTO || r == -EBUSY);
	struct cistern_sample s;
	r = cistern_acquire(c, &s, 0);
	if (r == 0) {
		/* What a reader may touch must lie inside one slot of the arena. */
		CHECK(s.len <= c->slot_size);
		CHECK((const char *)s.data >= c->arena);
		CHECK((const char *)s.data + s.len <= arena_end);
		volatile uint8_t sink = 0;
		for (size_t i = 0; i < s.len; i++)
			sink ^= ((const uint8_t *)s.data)[i];
		(void)sink;
		CHECK(cistern_release(c, &s) == 0);
	} else {
		/* -EUSERS: a reservoir whose 64 pin bits all read as taken; -EBUSY as above. */
		CHECK(r == -EAGAIN || r == CISTERN_EOD || r == -EPROTO || r == -EUSERS ||
		      r == -EBUSY);
	}
	ssize_t n = cistern_get(c, buf, sizeof(buf), NULL, 0);
	CHECK(n >= 0 || n == -EAGAIN || n == CISTERN_EOD || n == -EPROTO || n == -EMSGSIZE ||
	      n == -EUSERS || n == -EBUSY);
	struct cistern_stats st;
	CHECK(cistern_stats_get(c, &st) == 0);
	struct cistern_config cfg;
	CHECK(cistern_config_get(c, &cfg) == 0);
	CHECK(cistern_close_reception(c) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t zero[8];
	if (size < sizeof(zero) || memcmp(data, zero, sizeof(zero)) == 0)
		return 0;
	if (!name[0]) {
		snprintf(name, sizeof(name), "fuzz-attach-%d", (int)getpid());
		snprintf(shm, sizeof(shm), "/cistern.%s", name);
	}
	shm_unlink(shm);
	int fd = shm_open(shm, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, data, size) == (ssize_t)size);
	if (size >= sizeof(struct cistern_hdr)) {
		struct cistern_hdr h;
		memcpy(&h, data, sizeof(h));
		if (h.total_size > size && h.total_size <= GROW_MAX)
			CHECK(ftruncate(fd, (off_t)h.total_size) == 0);
	}
	close(fd);

	struct cistern *c = NULL;
	int r = cistern_attach(name, &c);
	if (r == 0) {
		exercise(c);
		CHECK(cistern_detach(c) == 0);
	} else {
		CHECK(c == NULL);
		CHECK(r == -EPROTO || r == -EPROTONOSUPPORT || r == -ENOTSUP || r == -EUSERS ||
		      r == -ENOMEM);
	}
	shm_unlink(shm);
	return 0;
}
