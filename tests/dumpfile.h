/* SPDX-License-Identifier: MIT */
/*
 * dumpfile.h - editing dump files in tests: load one, change records or the
 * seen set in place, make every checksum hold again, write it back. What is
 * left for a reader to refuse is then the edit itself, not a checksum.
 */
#ifndef CISTERN_TEST_DUMPFILE_H
#define CISTERN_TEST_DUMPFILE_H

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admin/dump_format.h"

struct dumpfile {
	uint8_t *b;
	size_t size;
	struct dump_meta m;
};

static inline void dumpfile_load(struct dumpfile *f, const char *path)
{
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0, "%s", path);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	f->size = (size_t)st.st_size;
	f->b = malloc(f->size);
	cr_assert_not_null(f->b);
	cr_assert_eq(pread(fd, f->b, f->size, 0), (ssize_t)f->size);
	close(fd);
	cr_assert_eq(cistern__dump_meta_decode(f->b + f->size - TRAILER_SIZE - META_SIZE, &f->m),
		     0);
	f->m.version = get32(f->b + 8);
}

/* The header of record i (records are walked from the first: their lengths vary). */
static inline uint8_t *dumpfile_record(struct dumpfile *f, uint64_t i)
{
	uint64_t off = f->m.samples_off;
	for (uint64_t k = 0; k < i; k++)
		off += dump_rec_hdr(f->m.version) +
		       cistern__align_up((size_t)get64(f->b + off + 16), 8);
	return f->b + off;
}

/* Replace the seen set's bytes by n others (the file grows or shrinks with them). */
static inline void dumpfile_set_seen_set(struct dumpfile *f, const void *bytes, size_t n)
{
	size_t tail = META_SIZE + TRAILER_SIZE;
	size_t size = (size_t)f->m.bitmap_off + n + tail;
	uint8_t *b = malloc(size);
	cr_assert_not_null(b);
	memcpy(b, f->b, (size_t)f->m.bitmap_off);
	memcpy(b + f->m.bitmap_off, bytes, n);
	memcpy(b + f->m.bitmap_off + n, f->b + f->size - tail, tail);
	free(f->b);
	f->b = b;
	f->size = size;
	f->m.bitmap_size = n;
}

/* Every checksum and every size made to agree with the bytes as they are, then written out. */
static inline void dumpfile_store(struct dumpfile *f, const char *path)
{
	struct dump_meta *m = &f->m;
	uint64_t meta_off = f->size - TRAILER_SIZE - META_SIZE;
	m->samples_crc = cistern__crc32c(0, f->b + m->samples_off, (size_t)m->samples_size);
	m->bitmap_crc = cistern__crc32c(0, f->b + m->bitmap_off, (size_t)m->bitmap_size);
	cistern__dump_meta_encode(m, f->b + meta_off);
	uint8_t *tr = f->b + f->size - TRAILER_SIZE;
	put64(tr + 8, f->size);
	put64(tr + 16, meta_off);
	put32(tr + 24, cistern__crc32c(0, f->b, f->size - 8));
	int fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(write(fd, f->b, f->size), (ssize_t)f->size);
	close(fd);
	free(f->b);
	f->b = NULL;
}

#endif
