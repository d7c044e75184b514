/* SPDX-License-Identifier: MIT */
/*
 * cold.c - the cold file of a segment and its index (cold.h,
 * docs/protocol/tiers.md).
 */
#include "tier/cold.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sys/clock.h"
#include "sys/crc32c.h"

/* The header block, at offset 0 of the file. */
struct cold_hdr {
	char magic[8];
	uint32_t version;
	uint32_t slot_bytes;
	uint64_t nslots;
	uint64_t nonce;
	char name[256];
};
_Static_assert(sizeof(struct cold_hdr) <= CISTERN__COLD_BLOCK, "the header fits its block");

uint32_t cistern__cold_slot_bytes(size_t max_bytes)
{
	if (max_bytes == 0)
		max_bytes = 1;
	if (max_bytes > (size_t)UINT32_MAX - CISTERN__COLD_BLOCK)
		return 0;
	size_t r = (max_bytes + CISTERN__COLD_BLOCK - 1) / CISTERN__COLD_BLOCK *
		   CISTERN__COLD_BLOCK;
	return (uint32_t)r;
}

int cistern__cold_path(char *out, size_t cap, const char *dir, const char *name)
{
	int n = snprintf(out, cap, "%s/cistern.%s.cold", dir, name);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static void *block_alloc(size_t bytes)
{
	void *p = NULL;
	return posix_memalign(&p, CISTERN__COLD_BLOCK, bytes) == 0 ? p : NULL;
}

void *cistern__cold_alloc(const struct cistern__cold *c, size_t n)
{
	if (n == 0 || n > SIZE_MAX / c->slot_bytes)
		return NULL;
	return block_alloc(n * c->slot_bytes);
}

int cistern__cold_create(struct cistern__cold *c, const char *dir, const char *name,
			 uint32_t slot_bytes, uint64_t nslots, uint64_t nonce)
{
	char path[4096];
	struct cold_hdr h;
	if (slot_bytes == 0 || slot_bytes % CISTERN__COLD_BLOCK || nslots == 0 ||
	    strlen(name) >= sizeof(h.name) ||
	    nslots > ((uint64_t)INT64_MAX - CISTERN__COLD_BLOCK) / slot_bytes)
		return -EINVAL;
	int r = cistern__cold_path(path, sizeof(path), dir, name);
	if (r < 0)
		return r;
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		r = -errno;
		/*
		 * EINVAL: the file system has no direct I/O. open() made the file
		 * before it refused O_DIRECT (O_EXCL: it was not there before).
		 */
		if (r == -EINVAL)
			unlink(path);
		return r;
	}
	/*
	 * Every block now, so that no later write to a slot runs out of space:
	 * a full disk is an error of create, never of a spill.
	 */
	off_t size = (off_t)(CISTERN__COLD_BLOCK + nslots * slot_bytes);
	if (fallocate(fd, 0, 0, size) < 0) {
		r = -errno;
		goto fail;
	}
	/* The header last: a file without one is a create that did not finish. */
	void *blk = block_alloc(CISTERN__COLD_BLOCK);
	if (!blk) {
		r = -ENOMEM;
		goto fail;
	}
	memset(blk, 0, CISTERN__COLD_BLOCK);
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, CISTERN__COLD_MAGIC, sizeof(h.magic));
	h.version = CISTERN__COLD_VERSION;
	h.slot_bytes = slot_bytes;
	h.nslots = nslots;
	h.nonce = nonce;
	strcpy(h.name, name);
	memcpy(blk, &h, sizeof(h));
	/* Some file systems take O_DIRECT at open() and refuse it at the first write. */
	ssize_t w = pwrite(fd, blk, CISTERN__COLD_BLOCK, 0);
	r = w < 0 ? -errno : w != CISTERN__COLD_BLOCK ? -EIO : 0;
	/*
	 * Every later read and write of the file goes through io_uring. Read
	 * the header back through it now: where this process may not use
	 * io_uring (kernel.io_uring_disabled, a seccomp filter), create fails
	 * with that error instead of making a tier whose samples could never
	 * be spilled or read.
	 */
	if (r == 0) {
		struct cistern__io io = {.fd = fd, .buf = blk, .len = CISTERN__COLD_BLOCK};
		r = cistern__uring_run(&io, 1);
	}
	free(blk);
	if (r < 0)
		goto fail;
	c->fd = fd;
	c->slot_bytes = slot_bytes;
	c->nslots = nslots;
	c->nonce = nonce;
	return 0;
fail:
	unlink(path);
	close(fd);
	return r;
}

/* Whether block 0 as read (n bytes) is a whole header: its fields checked, not its name. */
static bool hdr_valid(const struct cold_hdr *h, ssize_t n)
{
	return n == CISTERN__COLD_BLOCK && memcmp(h->magic, CISTERN__COLD_MAGIC, 8) == 0 &&
	       h->version == CISTERN__COLD_VERSION && h->slot_bytes != 0 &&
	       h->slot_bytes % CISTERN__COLD_BLOCK == 0 && h->nslots != 0 &&
	       strnlen(h->name, sizeof(h->name)) < sizeof(h->name);
}

int cistern__cold_header(int fd, struct cistern__cold_id *id)
{
	void *blk = block_alloc(CISTERN__COLD_BLOCK);
	if (!blk)
		return -ENOMEM;
	ssize_t n = pread(fd, blk, CISTERN__COLD_BLOCK, 0);
	int r = n < 0 ? -errno : 0;
	struct cold_hdr h;
	memcpy(&h, blk, sizeof(h));
	free(blk);
	if (r < 0)
		return r;
	if (!hdr_valid(&h, n))
		return -ESTALE;
	memcpy(id->name, h.name, sizeof(id->name));
	id->nonce = h.nonce;
	id->slot_bytes = h.slot_bytes;
	id->nslots = h.nslots;
	return 0;
}

int cistern__cold_rename(struct cistern__cold *c, const char *dir, const char *from, const char *to)
{
	char a[4096], b[4096];
	struct cold_hdr h;
	int r = cistern__cold_path(a, sizeof(a), dir, from);
	if (r == 0)
		r = cistern__cold_path(b, sizeof(b), dir, to);
	if (r < 0)
		return r;
	if (strlen(to) >= sizeof(h.name))
		return -EINVAL;
	void *blk = block_alloc(CISTERN__COLD_BLOCK);
	if (!blk)
		return -ENOMEM;
	ssize_t n = pread(c->fd, blk, CISTERN__COLD_BLOCK, 0);
	memcpy(&h, blk, sizeof(h));
	r = n < 0 ? -errno : !hdr_valid(&h, n) || strcmp(h.name, from) != 0 ? -ESTALE : 0;
	if (r == 0) {
		/* The header first: under either name, the file then names its new segment. */
		memset(h.name, 0, sizeof(h.name));
		strcpy(h.name, to);
		memcpy(blk, &h, sizeof(h));
		ssize_t w = pwrite(c->fd, blk, CISTERN__COLD_BLOCK, 0);
		r = w < 0 ? -errno : w != CISTERN__COLD_BLOCK ? -EIO : 0;
	}
	free(blk);
	if (r == 0 && fdatasync(c->fd) < 0)
		r = -errno;
	if (r < 0)
		return r;
	if (renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	/* A file system without the flag: link() refuses an existing name just as well. */
	if (link(a, b) < 0)
		return -errno;
	unlink(a);
	return 0;
}

static int open_as(struct cistern__cold *c, const char *dir, const char *name, uint64_t nonce,
		   int access)
{
	char path[4096];
	int r = cistern__cold_path(path, sizeof(path), dir, name);
	if (r < 0)
		return r;
	int fd = open(path, access | O_DIRECT | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	void *blk = block_alloc(CISTERN__COLD_BLOCK);
	if (!blk) {
		close(fd);
		return -ENOMEM;
	}
	ssize_t n = pread(fd, blk, CISTERN__COLD_BLOCK, 0);
	struct cold_hdr h;
	memcpy(&h, blk, sizeof(h));
	free(blk);
	struct stat st;
	if (n < 0) {
		r = -errno;
	} else if (!hdr_valid(&h, n)) {
		r = -ESTALE;
	} else if (strcmp(h.name, name) != 0 || h.nonce != nonce) {
		r = -ESTALE;
	} else if (fstat(fd, &st) < 0) {
		r = -errno;
	} else if ((uint64_t)st.st_size < CISTERN__COLD_BLOCK + h.nslots * h.slot_bytes) {
		/* Cut short: slots past the end would read as nothing. */
		r = -ESTALE;
	}
	if (r < 0) {
		close(fd);
		return r;
	}
	c->fd = fd;
	c->slot_bytes = h.slot_bytes;
	c->nslots = h.nslots;
	c->nonce = nonce;
	return 0;
}

int cistern__cold_open(struct cistern__cold *c, const char *dir, const char *name, uint64_t nonce)
{
	return open_as(c, dir, name, nonce, O_RDWR);
}

int cistern__cold_open_read(struct cistern__cold *c, const char *dir, const char *name,
			    uint64_t nonce)
{
	return open_as(c, dir, name, nonce, O_RDONLY);
}

void cistern__cold_close(struct cistern__cold *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

int cistern__cold_unlink(const char *dir, const char *name)
{
	char path[4096];
	int r = cistern__cold_path(path, sizeof(path), dir, name);
	if (r < 0)
		return r;
	return unlink(path) < 0 ? -errno : 0;
}

void cistern__cold_prep(const struct cistern__cold *c, struct cistern__io *io, uint64_t slot,
			uint32_t count, void *buf, bool write)
{
	memset(io, 0, sizeof(*io));
	io->fd = c->fd;
	io->write = write;
	io->buf = buf;
	io->len = count * c->slot_bytes;
	io->off = CISTERN__COLD_BLOCK + slot * c->slot_bytes;
}

/* ---- the index ---------------------------------------------------------- */

void (*cistern__spill_hook)(enum cistern__spill_step step, unsigned i);

static void spill_step(enum cistern__spill_step step, unsigned i)
{
	if (cistern__spill_hook)
		cistern__spill_hook(step, i);
}

/*
 * cistern__cold_claim(); *evicted gets the seen count of the sample it
 * took, or 0 for a free slot.
 */
static bool claim_one(struct cistern__cold_ent *e, uint32_t owner, enum cistern__cold_take take,
		      uint32_t *evicted)
{
	*evicted = 0;
	uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
	uint32_t g = cistern__cold_gen(w);
	switch (cistern__cold_state(w)) {
	case CISTERN__COLD_FREE:
		/* Relaxed: nothing is published by a free slot, and the CAS alone decides. */
		return atomic_compare_exchange_strong_explicit(
			&e->word, &w, cistern__cold_word(CISTERN__COLD_WRITING, owner, g),
			memory_order_relaxed, memory_order_relaxed);
	case CISTERN__COLD_HELD:
		if (take == CISTERN__COLD_TAKE_FREE)
			return false;
		break;
	default:
		return false;
	}
	bool unseen_ok = take == CISTERN__COLD_TAKE_ANY;
	if (!unseen_ok && atomic_load_explicit(&e->seen, memory_order_relaxed) == 0)
		return false;
	/*
	 * seq_cst [cold-pin]: stop new pins, then read the pins. A reader sets
	 * its bit and then reads the word (both seq_cst): one of us sees the
	 * other.
	 */
	uint64_t ev = cistern__cold_word(CISTERN__COLD_EVICTING, owner, g);
	if (!atomic_compare_exchange_strong_explicit(&e->word, &w, ev, memory_order_seq_cst,
						     memory_order_relaxed))
		return false;
	/*
	 * seq_cst [cold-pin] [cold-unpin]: a pin set before our CAS is seen here;
	 * a pin cleared (release) after its read completed is seen clear only
	 * once that read is over, so the slot is not written under it.
	 */
	uint64_t pins = atomic_load_explicit(&e->pins, memory_order_seq_cst);
	/* No pin is left: nobody raises the count any more. */
	uint32_t seen = atomic_load_explicit(&e->seen, memory_order_relaxed);
	if (pins != 0 || (!unseen_ok && seen == 0)) {
		/* Relaxed: back to the word it was; the entry's fields did not change. */
		atomic_store_explicit(&e->word, w, memory_order_relaxed);
		return false;
	}
	*evicted = seen;
	/* Relaxed: only the owner moves an EVICTING entry on. */
	atomic_store_explicit(&e->word, cistern__cold_word(CISTERN__COLD_WRITING, owner, g),
			      memory_order_relaxed);
	return true;
}

bool cistern__cold_claim_as(struct cistern__cold_ent *e, uint32_t owner,
			    enum cistern__cold_take take)
{
	uint32_t evicted;
	return claim_one(e, owner, take, &evicted);
}

bool cistern__cold_claim(struct cistern__cold_ent *e, uint32_t owner)
{
	return cistern__cold_claim_as(e, owner, CISTERN__COLD_TAKE_SEEN);
}

unsigned cistern__cold_claim_run(struct cistern__cold_ent *ents, uint64_t nslots,
				 _Atomic uint64_t *cursor, uint32_t owner, unsigned max,
				 uint64_t *first, uint32_t *evicted)
{
	uint32_t ignored;
	for (uint64_t scanned = 0; scanned < nslots;) {
		/* Relaxed: the cursor is a hint of where to look; claims are by CAS. */
		uint64_t cur = atomic_load_explicit(cursor, memory_order_relaxed);
		uint64_t s = cur % nslots;
		unsigned k = 0;
		/* A run stops at the end of the file: one write never wraps. */
		while (k < max && s + k < nslots &&
		       claim_one(&ents[s + k], owner, CISTERN__COLD_TAKE_SEEN,
				 evicted ? &evicted[k] : &ignored))
			k++;
		uint64_t adv = k ? k : 1;
		/* Relaxed: a lost race only means another process moved it on. */
		atomic_compare_exchange_strong_explicit(cursor, &cur, cur + adv,
							memory_order_relaxed, memory_order_relaxed);
		if (k) {
			*first = s;
			return k;
		}
		scanned++;
	}
	return 0;
}

void cistern__cold_abort(struct cistern__cold_ent *e)
{
	uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
	/* Relaxed: a free slot publishes nothing. */
	atomic_store_explicit(&e->word,
			      cistern__cold_word(CISTERN__COLD_FREE, 0, cistern__cold_gen(w)),
			      memory_order_relaxed);
}

int cistern__cold_wait(struct cistern__cold_io *ctr, struct cistern__io_batch *b)
{
	if (!ctr)
		return cistern__uring_wait(b);
	int64_t t0 = cistern__now_ns(CLOCK_MONOTONIC);
	int r = cistern__uring_wait(b);
	int64_t ns = cistern__now_ns(CLOCK_MONOTONIC) - t0;
	if (b->n == 0)
		return r;
	uint64_t bytes = 0;
	for (unsigned i = 0; i < b->n; i++)
		bytes += b->io[i].done; /* a failed request counts what it moved */
	bool write = b->io[0].write;
	/* Relaxed: statistics (cold.h); nothing is ordered by them. */
	atomic_fetch_add_explicit(write ? &ctr->bytes_written : &ctr->bytes_read, bytes,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(write ? &ctr->write_wait_ns : &ctr->read_wait_ns,
				  ns > 0 ? (uint64_t)ns : 0, memory_order_relaxed);
	return r;
}

int cistern__cold_poll(struct cistern__cold_io *ctr, struct cistern__io_batch *b)
{
	if (!cistern__uring_poll(b))
		return -EINPROGRESS;
	if (ctr && b->n) {
		uint64_t bytes = 0;
		for (unsigned i = 0; i < b->n; i++)
			bytes += b->io[i].done;
		/* Relaxed: statistics (cold.h); nothing is ordered by them. No wait: no time. */
		atomic_fetch_add_explicit(b->io[0].write ? &ctr->bytes_written : &ctr->bytes_read,
					  bytes, memory_order_relaxed);
	}
	return b->err;
}

int cistern__cold_run(struct cistern__cold_io *ctr, struct cistern__io *io, unsigned n)
{
	struct cistern__io_batch b;
	int r = cistern__uring_start(&b, io, n);
	if (r < 0)
		return r;
	return cistern__cold_wait(ctr, &b);
}

int cistern__cold_spill(struct cistern__cold *c, struct cistern__cold_ent *ents,
			const uint64_t *slots, unsigned n, void *buf, const uint32_t *lens,
			const uint64_t *ids)
{
	return cistern__cold_spill_seen(c, ents, slots, n, buf, lens, ids, NULL, NULL);
}

int cistern__cold_spill_seen(struct cistern__cold *c, struct cistern__cold_ent *ents,
			     const uint64_t *slots, unsigned n, void *buf, const uint32_t *lens,
			     const uint64_t *ids, const uint32_t *seen,
			     struct cistern__cold_io *ctr)
{
	if (n == 0)
		return 0;
	for (unsigned i = 0; i < n; i++)
		if (slots[i] >= c->nslots || lens[i] > c->slot_bytes)
			return -EINVAL;
	struct cistern__io *io = calloc(n, sizeof(*io));
	if (!io)
		return -ENOMEM;
	/* One write for each run of consecutive slots that lie back to back in buf. */
	unsigned m = 0;
	for (unsigned i = 0; i < n;) {
		unsigned j = i + 1;
		while (j < n && slots[j] == slots[j - 1] + 1)
			j++;
		cistern__cold_prep(c, &io[m++], slots[i], j - i,
				   (uint8_t *)buf + (size_t)i * c->slot_bytes, true);
		i = j;
	}
	struct cistern__io_batch b;
	int r = cistern__uring_start(&b, io, m);
	if (r == 0) {
		spill_step(CISTERN__SPILL_WRITING, 0);
		r = cistern__cold_wait(ctr, &b);
	}
	free(io);
	if (r < 0) {
		for (unsigned i = 0; i < n; i++)
			cistern__cold_abort(&ents[slots[i]]);
		return r;
	}
	for (unsigned i = 0; i < n; i++) {
		struct cistern__cold_ent *e = &ents[slots[i]];
		const uint8_t *p = (const uint8_t *)buf + (size_t)i * c->slot_bytes;
		e->id = ids[i];
		e->len = lens[i];
		e->crc = cistern__crc32c(0, p, lens[i]);
		/* meta stays as the caller wrote it while the entry was WRITING. */
		/* Relaxed [cold-verified]: the new bytes are unchecked; the mark names its generation. */
		atomic_store_explicit(&e->verified, 0, memory_order_relaxed);
		atomic_store_explicit(&e->seen, seen ? seen[i] : 0, memory_order_relaxed);
		uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
		/*
		 * Release [cold-publish]: the write completed (its completion was
		 * harvested above) and the fields are stored; a reader that loads
		 * HELD with acquire sees both.
		 */
		atomic_store_explicit(
			&e->word,
			cistern__cold_word(CISTERN__COLD_HELD, 0, cistern__cold_gen(w) + 1),
			memory_order_release);
		spill_step(CISTERN__SPILL_PUBLISHED, i);
	}
	return 0;
}

int cistern__cold_check(struct cistern__cold_ent *e, uint64_t w, const void *data, size_t len)
{
	uint32_t mark = cistern__cold_gen(w) + 1;
	/*
	 * Relaxed [cold-verified]: the mark orders nothing. It only says that
	 * some read of this publish found the file's bytes good; a mark of an
	 * older publish, however late it lands, names another generation.
	 */
	if (mark != 0 && atomic_load_explicit(&e->verified, memory_order_relaxed) == mark)
		return 2;
	if (cistern__crc32c(0, data, len) != e->crc)
		return 0;
	/* Relaxed [cold-verified]: as the load above. */
	atomic_store_explicit(&e->verified, mark, memory_order_relaxed);
	return 1;
}

bool cistern__cold_pin(struct cistern__cold_ent *e, unsigned bit, uint64_t *wp)
{
	/* Acquire [cold-publish]: a HELD word brings the entry's fields and the slot's bytes. */
	uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
	if (cistern__cold_state(w) != CISTERN__COLD_HELD)
		return false;
	uint64_t b = (uint64_t)1 << bit;
	/* seq_cst [cold-pin]: set the bit, then read the word again; pairs with the evictor's CAS. */
	atomic_fetch_or_explicit(&e->pins, b, memory_order_seq_cst);
	if (atomic_load_explicit(&e->word, memory_order_seq_cst) != w) {
		/* Relaxed: this pin protected nothing. */
		atomic_fetch_and_explicit(&e->pins, ~b, memory_order_relaxed);
		return false;
	}
	*wp = w;
	return true;
}

void cistern__cold_unpin(struct cistern__cold_ent *e, unsigned bit)
{
	/* Release [cold-unpin]: the read completed before an evictor sees the bit clear. */
	atomic_fetch_and_explicit(&e->pins, ~((uint64_t)1 << bit), memory_order_release);
}

uint64_t cistern__cold_reclaim(struct cistern__cold_ent *ents, uint64_t n, uint32_t owner,
			       unsigned bit)
{
	uint64_t changed = 0;
	for (uint64_t i = 0; i < n; i++) {
		struct cistern__cold_ent *e = &ents[i];
		uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
		unsigned s = cistern__cold_state(w);
		uint32_t g = cistern__cold_gen(w);
		if (owner != 0 && cistern__cold_owner(w) == owner) {
			/* FREE(0) is the word 0: whether to move is a flag of its own. */
			bool move = true;
			uint64_t to = 0;
			if (s == CISTERN__COLD_WRITING)
				/* Its bytes may be partly written: the slot was never published. */
				to = cistern__cold_word(CISTERN__COLD_FREE, 0, g);
			else if (s == CISTERN__COLD_EVICTING)
				/* Nothing was written yet: the sample stays. */
				to = cistern__cold_word(CISTERN__COLD_HELD, 0, g);
			else
				move = false;
			/* Relaxed: the dead owner wrote no field that the new word publishes. */
			if (move && atomic_compare_exchange_strong_explicit(&e->word, &w, to,
									    memory_order_relaxed,
									    memory_order_relaxed))
				changed++;
		}
		if (bit < 64) {
			uint64_t b = (uint64_t)1 << bit;
			/* Relaxed: the dead handle's reads are over; the kernel ended them. */
			if (atomic_fetch_and_explicit(&e->pins, ~b, memory_order_relaxed) & b)
				changed++;
		}
	}
	return changed;
}
