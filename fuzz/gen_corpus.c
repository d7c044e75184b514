/* SPDX-License-Identifier: MIT */
/*
 * gen_corpus.c - write the seed corpora of the fuzz targets.
 *
 *   build-fuzz/fuzz/gen_corpus fuzz/corpus
 *
 * Seeds are real segments of this build in interesting states (empty, holding
 * samples, a reservation and a sample held by an attachment whose owner is
 * gone, closed) and a few near misses (other ABI, wrong magic, short). The
 * layout signature is in every header, so run this again after a change to
 * the shared structures, or the seeds only reach the version check.
 *
 * It also writes one seed of fuzz_dump, dump/reservoir-cold: a dump in
 * format 3 of a reservoir with a cold tier (hot samples, cold samples, a
 * few seen), so the fuzzer starts inside the cold section. Its cold
 * directory is /dev/shm, which exists wherever segments do and which the
 * fuzzer's clean-up sweeps (scripts/fuzz.sh); making it needs a kernel
 * whose tmpfs takes O_DIRECT. The other dump seeds are dumps of the same
 * kind made by hand.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/handle.h"
#include <cistern/admin.h>

static const char *outdir;

static void save(const char *target, const char *file, const void *data, size_t len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", outdir, target);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", outdir, target, file);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len) {
		perror(path);
		exit(1);
	}
	fclose(f);
}

/* The bytes of segment `name` (the whole object, or only `len` of them). */
static void *object_bytes(const char *name, size_t *len)
{
	char path[256];
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		perror(path);
		exit(1);
	}
	void *buf = malloc((size_t)st.st_size);
	if (!buf || pread(fd, buf, (size_t)st.st_size, 0) != st.st_size)
		exit(1);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

/*
 * Save a segment as a seed of both targets. fuzz_header takes the header and
 * then the object size (8 bytes); fuzz_attach takes the object's first bytes
 * (at most 8 KiB: it grows the object to the size the header says).
 */
static void save_segment(const char *seed, const char *name)
{
	size_t len;
	uint8_t *b = object_bytes(name, &len);
	uint8_t hs[sizeof(struct cistern_hdr) + sizeof(uint64_t)];
	uint64_t size = len;
	memcpy(hs, b, sizeof(struct cistern_hdr));
	memcpy(hs + sizeof(struct cistern_hdr), &size, sizeof(size));
	save("header", seed, hs, sizeof(hs));
	save("attach", seed, b, len < 8192 ? len : 8192);
	free(b);
}

static struct cistern *make(const char *name, struct cistern_config cfg)
{
	struct cistern *c;
	cistern_unlink(name);
	int r = cistern_create(name, &cfg, &c);
	if (r < 0) {
		fprintf(stderr, "create %s: %s\n", name, cistern_strerror(r));
		exit(1);
	}
	return c;
}

/* The bytes of file path, freed by the caller. */
static void *file_bytes(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		perror(path);
		exit(1);
	}
	void *buf = malloc((size_t)st.st_size);
	if (!buf || pread(fd, buf, (size_t)st.st_size, 0) != st.st_size)
		exit(1);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

/*
 * A dump in format 3: a reservoir of 8 hot and 8 cold slots holding 12
 * samples (a spill moves 2 at a time here, so 4 are cold), 3 of them read.
 */
static void save_cold_dump(const char *name)
{
	struct cistern_config cfg = {.policy = CISTERN_RESERVOIR,
				     .slot_size = 40,
				     .slot_count = 8,
				     .max_procs = 2,
				     .watermark = 1,
				     .seed = 1,
				     .cold_slots = 8,
				     .cold_dir = "/dev/shm"};
	struct cistern *c = make(name, cfg);
	for (uint32_t i = 0; i < 12; i++) {
		char buf[40];
		int n = snprintf(buf, sizeof(buf), "cold-seed-sample-%u", i);
		struct cistern_meta m = {.sim_id = 2, .time_step = i};
		if (cistern_put(c, buf, (size_t)n, &m, 0) < 0) {
			fprintf(stderr, "put %u into the tiered segment failed\n", i);
			exit(1);
		}
	}
	for (int i = 0; i < 3; i++) {
		struct cistern_sample s;
		if (cistern_acquire(c, &s, 0) == 0)
			cistern_release(c, &s);
	}
	char path[128];
	snprintf(path, sizeof(path), "/dev/shm/%s.dump", name);
	struct cistern_dump_info info;
	int r = cistern_dump(name, path, NULL, NULL, &info);
	if (r < 0 || info.cold_samples == 0) {
		fprintf(stderr, "dump of the tiered segment: %s, %lu cold samples\n",
			cistern_strerror(r), (unsigned long)info.cold_samples);
		exit(1);
	}
	size_t len;
	void *b = file_bytes(path, &len);
	save("dump", "reservoir-cold", b, len);
	free(b);
	unlink(path);
	cistern_detach(c);
	cistern_unlink(name);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	outdir = argv[1];
	char name[64];
	snprintf(name, sizeof(name), "gen-corpus-%d", (int)getpid());
	struct cistern_config small = {.slot_size = 24, .slot_count = 4, .max_procs = 4, .seed = 1};

	/* An empty segment. */
	struct cistern *c = make(name, small);
	save_segment("empty", name);

	/* Holding samples, the ring wrapped once. */
	for (int i = 0; i < 6; i++) {
		if (i >= 4) {
			char buf[24];
			cistern_get(c, buf, sizeof(buf), NULL, 0);
		}
		struct cistern_meta m = {.sim_id = 1, .time_step = (uint32_t)i};
		cistern_put(c, "sample-payload", 14, &m, 0);
	}
	save_segment("samples", name);

	/*
	 * A second attachment holding a reservation and a sample, then "dead":
	 * in a copy of the object its entry reads ACTIVE and nobody holds its
	 * lock, exactly what a killed process leaves.
	 */
	struct cistern *d;
	if (cistern_attach(name, &d) == 0) {
		struct cistern_sample s;
		struct cistern_slot slot;
		cistern_acquire(d, &s, 0);
		cistern_get(c, (char[24]){0}, 24, NULL, 0);
		cistern_reserve(d, &slot, 0);
		save_segment("dead-holder", name);
		cistern_detach(d);
	}

	/* Closed and drained. */
	cistern_close_reception(c);
	save_segment("closed", name);
	cistern_detach(c);
	cistern_unlink(name);

	/* Odd ring sizes: a non-power-of-two count, one slot, a large slot. */
	c = make(name, (struct cistern_config){.slot_size = 100, .slot_count = 3, .max_procs = 1});
	cistern_put(c, "x", 1, NULL, 0);
	save_segment("odd-ring", name);
	cistern_detach(c);
	c = make(name, (struct cistern_config){.slot_size = 8, .slot_count = 1, .max_procs = 2});
	save_segment("one-slot", name);
	cistern_detach(c);
	c = make(name,
		 (struct cistern_config){.slot_size = 65536, .slot_count = 2, .max_procs = 2});
	save_segment("big-slot", name);
	cistern_detach(c);
	/* A schema, which every attach parses from the header. */
	c = make(name,
		 (struct cistern_config){.slot_count = 2,
					 .max_procs = 2,
					 .schema = "obs:float32[2,3];action:int64[];done:bool"});
	cistern_put(c, (char[40]){1, 2, 3}, 40, NULL, 0);
	save_segment("schema", name);
	cistern_detach(c);

	/* Near misses, from the empty segment's header. */
	c = make(name, small);
	size_t len;
	struct cistern_hdr *h = object_bytes(name, &len);
	cistern_detach(c);
	cistern_unlink(name);
	struct cistern_hdr v = *h;
	v.abi_version++;
	save("header", "other-abi", &v, sizeof(v));
	v = *h;
	memcpy(v.magic, "CISTERM", 8);
	save("header", "wrong-magic", &v, sizeof(v));
	save("attach", "wrong-magic", &v, sizeof(v));
	v = *h;
	v.total_size = UINT64_MAX - 4095;
	save("header", "huge-size", &v, sizeof(v));
	save("header", "short", h, 100);
	save("attach", "short", h, 100);
	free(h);

	save_cold_dump(name);
	return 0;
}
