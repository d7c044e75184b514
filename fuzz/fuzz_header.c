/* SPDX-License-Identifier: MIT */
/*
 * fuzz_header.c - libFuzzer target for cistern__validate_header().
 *
 * Input: the bytes of a header, optionally followed by 8 bytes giving the
 * object's size (else the input's length is the size). Beyond "never crash",
 * the target checks what attach relies on when validation says yes: the
 * layout is the one this build computes, every region lies inside the object
 * and after the one before it, and the name is terminated. A violation traps.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "core/segment.h"

#define CHECK(c)                          \
	do {                              \
		if (!(c))                 \
			__builtin_trap(); \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The validator reads an aligned copy, as attach gives it (pread into a struct). */
	struct cistern_hdr h;
	memset(&h, 0, sizeof(h));
	size_t n = size < sizeof(h) ? size : sizeof(h);
	memcpy(&h, data, n);
	uint64_t file_size = size;
	if (size >= sizeof(h) + sizeof(uint64_t))
		memcpy(&file_size, data + sizeof(h), sizeof(file_size));

	int r = cistern__validate_header(&h, n, file_size);
	CHECK(r == 0 || r == -EPROTO || r == -EPROTONOSUPPORT || r == -EAGAIN);
	if (r != 0)
		return 0;

	CHECK(n == sizeof(h));
	CHECK(memcmp(h.magic, CISTERN_MAGIC, sizeof(h.magic)) == 0);
	CHECK(h.policy < CISTERN_POLICY_COUNT);
	struct cistern_layout l;
	CHECK(cistern__compute_layout(h.policy, h.slot_size, h.slot_count, h.procs_count,
				      h.index_count, &l) == 0);
	CHECK(h.slot_size >= 1 && h.slot_size <= CISTERN_SLOT_SIZE_MAX);
	CHECK(h.slot_count >= 1 && h.slot_count <= CISTERN_SLOT_COUNT_MAX);
	CHECK(h.procs_count >= 1 && h.procs_count <= CISTERN_PROCS_MAX);
	CHECK(h.slot_stride >= h.slot_size && h.slot_stride % CISTERN_CACHELINE == 0);
	CHECK(h.procs_off >= sizeof(h));
	uint64_t procs_end = h.procs_off + h.procs_count * sizeof(struct cistern_proc);
	uint64_t index_end = h.index_off + h.index_count * sizeof(uint64_t);
	CHECK(h.meta_off >= procs_end && h.index_off >= procs_end);
	if (h.policy == CISTERN_FIFO) {
		/* Metadata in one array, then the index, then the payloads. */
		CHECK(h.meta_stride == sizeof(struct cistern_slotmeta));
		CHECK(h.index_off >= h.meta_off + h.slot_count * h.meta_stride);
		CHECK(h.arena_off >= index_end);
	} else {
		/* Each slot's metadata line just before its payload. */
		CHECK(h.meta_off >= index_end);
		CHECK(h.meta_stride == h.slot_stride);
		CHECK(h.arena_off == h.meta_off + sizeof(struct cistern_slotmeta));
		CHECK(h.slot_stride >= h.slot_size + sizeof(struct cistern_slotmeta));
	}
	CHECK(h.total_size >= h.meta_off + h.slot_count * h.meta_stride);
	CHECK(h.total_size >= h.arena_off + h.slot_count * h.slot_stride);
	CHECK(h.total_size <= file_size);
	CHECK(h.arena_off < h.total_size);
	CHECK(memchr(h.name, '\0', sizeof(h.name)) != NULL);
	CHECK(h.watermark <= h.slot_count);
	return 0;
}
