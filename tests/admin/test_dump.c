/* SPDX-License-Identifier: MIT */
/* test_dump.c - dump and restore: fidelity, damage detection, live dumps, the checksum. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <roaring/roaring.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "helpers.h"
#include "core/policy.h"
#include "admin/dump.h"
#include "sys/crc32c.h"
#include "dumpfile.h"
#include "peek.h"
#include <cistern/admin.h>

#define PAYLOAD 200

/*
 * Every test's segments, restored copies (seg_name()) and dump files
 * (seg_dump_path()) are the fixture's to remove, pass or fail.
 */
TestSuite(dump, .fini = seg_fini);
TestSuite(dump_policies, .fini = seg_fini);

static struct cistern *make(const char *tag, uint64_t slots)
{
	struct cistern_config cfg = {.slot_size = PAYLOAD, .slot_count = slots, .seed = 7};
	return seg_create(tag, cfg);
}

/* The name a dump of the segment made under tag is restored under. */
static const char *copy_name(const char *tag)
{
	char copy_tag[32];
	snprintf(copy_tag, sizeof(copy_tag), "%s2", tag);
	return seg_name(copy_tag);
}

static void fill(struct cistern *c, uint32_t n)
{
	uint8_t buf[PAYLOAD];
	for (uint32_t i = 0; i < n; i++) {
		size_t len = 1 + (i * 37) % PAYLOAD;
		fill_payload(buf, len, 9, i);
		struct cistern_meta m = {.sim_id = 9, .time_step = i};
		cr_assert_eq(cistern_put(c, buf, len, &m, 0), 0);
	}
	/* FIFO itself never counts reads of held samples; set seen to prove it travels. */
	for (uint64_t s = 0; s < c->slot_count; s++)
		atomic_store(&cistern__slotmeta(c, s)->seen,
			     (uint32_t)(cistern__slotmeta(c, s)->time_step % 4));
}

/*
 * What most tests here start from: a FIFO segment of `slots` slots holding
 * fill(n)'s samples, its name, the name its copy is restored under and its
 * dump file. seg_fini removes all three, pass or fail.
 */
struct subject {
	struct cistern *c;
	const char *name;
	const char *copy;
	const char *path;
};

static struct subject subject(const char *tag, uint64_t slots, uint32_t n)
{
	struct subject s = {.c = make(tag, slots)};
	s.name = seg_name_of(s.c);
	s.copy = copy_name(tag);
	s.path = seg_dump_path(tag);
	fill(s.c, n);
	return s;
}

/* Dump the subject to its file, asserted to succeed. */
static void dump_subject(const struct subject *s)
{
	int r = cistern_dump(s->name, s->path, NULL, NULL, NULL);
	cr_assert_eq(r, 0, "dump of %s: %s", s->name, cistern_strerror(r));
}

/*
 * Restore the subject's dump under its copy's name, asserted to succeed:
 * a handle on the copy, for the test to detach (seg_fini unlinks the copy).
 */
static struct cistern *restore_copy(const struct subject *s)
{
	int r = cistern_restore(s->path, s->copy, NULL, NULL, NULL);
	cr_assert_eq(r, 0, "restore of %s: %s", s->path, cistern_strerror(r));
	struct cistern *copy;
	cr_assert_eq(cistern_attach(s->copy, &copy), 0);
	return copy;
}

/* Put n samples whose payload length and bytes depend on i; give sample i seen count i % 4. */
static int temp_objects_left(void)
{
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "cistern.restore-%d-", (int)getpid());
	DIR *d = opendir("/dev/shm");
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	uint8_t b;
	cr_assert_eq(pread(fd, &b, 1, off), 1);
	b ^= 0x20;
	cr_assert_eq(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

static off_t file_size(const char *path)
{
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	return st.st_size;
}

Test(crc32c, matches_the_standard_check_value)
{
	cr_assert_eq(cistern__crc32c(0, "123456789", 9), 0xE3069283u);
	cr_assert_eq(cistern__crc32c_soft(0, "123456789", 9), 0xE3069283u);
}

Test(crc32c, hardware_and_table_agree_at_every_length_and_alignment)
{
	uint8_t buf[300];
	fill_payload(buf, sizeof(buf), 1, 2);
	for (size_t off = 0; off < 8; off++)
		for (size_t len = 0; len + off <= sizeof(buf); len += 7)
			cr_assert_eq(cistern__crc32c(5, buf + off, len),
				     cistern__crc32c_soft(5, buf + off, len), "off %zu len %zu",
				     off, len);
}

/* Past three lanes of 1360 bytes the hardware path runs three CRCs at once and joins them. */
Test(crc32c, hardware_and_table_agree_over_long_buffers)
{
	static uint8_t buf[3 * 4096 + 64];
	fill_payload(buf, sizeof(buf), 5, 6);
	for (size_t off = 0; off < 8; off += 3)
		for (size_t len = 4000; len + off <= sizeof(buf); len += 37)
			cr_assert_eq(cistern__crc32c(9, buf + off, len),
				     cistern__crc32c_soft(9, buf + off, len), "off %zu len %zu",
				     off, len);
}

Test(crc32c, continues_across_pieces)
{
	uint8_t buf[100];
	fill_payload(buf, sizeof(buf), 3, 4);
	cr_assert_eq(cistern__crc32c(cistern__crc32c(0, buf, 33), buf + 33, 67),
		     cistern__crc32c(0, buf, 100));
}

Test(dump, restore_gives_identical_samples_metadata_and_seen_counts)
{
	struct subject seg = subject("d-same", 64, 40);
	/* Take 5 out so that the ring does not start at slot 0. */
	uint8_t buf[PAYLOAD];
	for (int i = 0; i < 5; i++)
		cr_assert_gt(cistern_get(seg.c, buf, sizeof(buf), NULL, 0), 0);
	struct cistern_dump_info di;
	cr_assert_eq(cistern_dump(seg.name, seg.path, NULL, NULL, &di), 0);
	cr_assert_eq(di.samples, 35);
	cr_assert_eq(di.skipped, 0);
	struct cistern_dump_info ri;
	cr_assert_eq(cistern_restore(seg.path, seg.copy, NULL, NULL, &ri), 0);
	cr_assert_eq(ri.samples, 35);

	struct cistern *r;
	cr_assert_eq(cistern_attach(seg.copy, &r), 0);
	struct cistern_config a, b;
	cistern_config_get(seg.c, &a);
	cistern_config_get(r, &b);
	cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0, "same config");
	/* Seen counts sit in slot metadata: compare by sample id before anyone reads. */
	for (uint64_t s = 0; s < 35; s++) {
		uint64_t id = cistern__slotmeta(r, s)->sample_id;
		cr_assert_eq(cistern__slotmeta(r, s)->seen, (uint32_t)(id % 4),
			     "seen of sample %lu", (unsigned long)id);
	}
	for (uint32_t i = 5; i < 40; i++) {
		struct cistern_meta m1, m2;
		uint8_t b1[PAYLOAD], b2[PAYLOAD];
		ssize_t n1 = cistern_get(seg.c, b1, sizeof(b1), &m1, 0);
		ssize_t n2 = cistern_get(r, b2, sizeof(b2), &m2, 0);
		cr_assert_eq(n1, n2);
		cr_assert_eq(memcmp(b1, b2, (size_t)n1), 0, "payload of sample %u", i);
		cr_assert_eq(m1.sample_id, m2.sample_id);
		cr_assert_eq(m1.sim_id, m2.sim_id);
		cr_assert_eq(m1.time_step, m2.time_step);
	}
	cistern_detach(r);
}

Test(dump, new_samples_of_a_restored_segment_get_higher_ids)
{
	struct subject seg = subject("d-ids", 16, 10);
	dump_subject(&seg);
	struct cistern *r = restore_copy(&seg);
	struct cistern_meta m;
	cr_assert_eq(cistern_put(r, "new", 3, &m, 0), 0);
	cr_assert_eq(m.sample_id, 10, "ids continue after the restored 0..9");
	struct cistern_stats st;
	cistern_stats_get(r, &st);
	cr_assert_eq(st.population, 11);
	cr_assert_eq(st.puts, 11, "counters continue");
	cistern_detach(r);
}

Test(dump, restore_under_the_stored_name_refuses_an_existing_segment)
{
	struct subject seg = subject("d-exist", 8, 3);
	dump_subject(&seg);
	cr_assert_eq(cistern_restore(seg.path, NULL, NULL, NULL, NULL), -EEXIST);
	struct cistern_stats st;
	cistern_stats_get(seg.c, &st);
	cr_assert_eq(st.population, 3, "the existing segment is untouched");
	seg_detach(seg.c);
	cistern_unlink(seg.name);
	cr_assert_eq(cistern_restore(seg.path, NULL, NULL, NULL, NULL), 0,
		     "once gone, it restores");
}

static void refused(const char *tag, void (*damage)(const char *path))
{
	struct subject seg = subject(tag, 32, 20);
	dump_subject(&seg);
	damage(seg.path);
	cr_assert_eq(cistern_restore(seg.path, seg.copy, NULL, NULL, NULL), -EBADMSG);
	cr_assert_eq(cistern_dump_verify(seg.path, NULL), -EBADMSG);
	struct cistern *r;
	cr_assert_eq(cistern_attach(seg.copy, &r), -ENOENT, "nothing was created");
	cr_assert_eq(temp_objects_left(), 0, "no temporary object is left behind");
}

static void flip_in_payload(const char *path)
{
	flip_byte(path, 16 + 32 + 5);
}

static void flip_in_meta(const char *path)
{
	flip_byte(path, file_size(path) - 32 - 512 + 20);
}

static void flip_in_seen_set(const char *path)
{
	/* The seen set sits just before the meta block; its last byte is in it. */
	flip_byte(path, file_size(path) - 32 - 512 - 1);
}

/*
 * A meta block that checks out but holds a config create refuses: a read
 * rate (reads_per_put 1.0) on this FIFO, the meta checksum made again over
 * it (the whole-file checksum does not move: a block followed by its own
 * CRC-32C adds nothing to a CRC-32C running over both).
 */
static void refused_config_in_meta(const char *path)
{
	const off_t meta = file_size(path) - 32 - 512;
	const off_t rpp =
		meta +
		160; /* reads_per_put in the meta block (lib/admin/dump_format.c, meta_code()) */
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	uint8_t mb[512];
	cr_assert_eq(pread(fd, mb, sizeof(mb), meta), (ssize_t)sizeof(mb));
	double one = 1.0;
	uint64_t bits;
	memcpy(&bits, &one, sizeof(bits));
	for (int i = 0; i < 8; i++)
		mb[rpp - meta + i] = (uint8_t)(bits >> (8 * i));
	uint32_t crc = cistern__crc32c(0, mb, sizeof(mb) - 4);
	for (size_t i = 0; i < 4; i++)
		mb[sizeof(mb) - 4 + i] = (uint8_t)(crc >> (8 * i));
	cr_assert_eq(pwrite(fd, mb, sizeof(mb), meta), (ssize_t)sizeof(mb));
	close(fd);
}

static void truncate_half(const char *path)
{
	cr_assert_eq(truncate(path, file_size(path) / 2), 0);
}

static void truncate_one(const char *path)
{
	cr_assert_eq(truncate(path, file_size(path) - 1), 0);
}

/* A stored name of bytes a terminal obeys, every checksum made to hold again. */
static void stored_name_of_escape_sequences(const char *path)
{
	struct dumpfile f;
	dumpfile_load(&f, path);
	memset(f.m.name, 0, sizeof(f.m.name));
	snprintf(f.m.name, sizeof(f.m.name), "\033]0;PWNED\a\033[2J");
	dumpfile_store(&f, path);
}

/* A stored name that walks out of /dev/shm. */
static void stored_name_with_a_path(const char *path)
{
	struct dumpfile f;
	dumpfile_load(&f, path);
	memset(f.m.name, 0, sizeof(f.m.name));
	snprintf(f.m.name, sizeof(f.m.name), "../../tmp/x");
	dumpfile_store(&f, path);
}

Test(dump, a_stored_name_of_control_bytes_is_refused_by_verify_and_restore_alike)
{
	refused("d-ctlname", stored_name_of_escape_sequences);
}

Test(dump, a_stored_name_with_a_path_is_refused_by_verify_and_restore_alike)
{
	refused("d-pathname", stored_name_with_a_path);
}

Test(dump, a_flipped_payload_byte_is_refused_and_nothing_created)
{
	refused("d-flip", flip_in_payload);
}

Test(dump, a_flipped_meta_byte_is_refused_and_nothing_created)
{
	refused("d-meta", flip_in_meta);
}

Test(dump, a_flipped_seen_set_byte_is_refused_and_nothing_created)
{
	refused("d-seen", flip_in_seen_set);
}

Test(dump, a_config_create_would_refuse_is_refused_by_verify_and_restore_alike)
{
	refused("d-cfg", refused_config_in_meta);
}

Test(dump, a_file_cut_in_half_is_refused_and_nothing_created)
{
	refused("d-half", truncate_half);
}

Test(dump, a_file_missing_its_last_byte_is_refused_and_nothing_created)
{
	refused("d-last", truncate_one);
}

/*
 * Verify and restore `path` with standard error caught: both must refuse it
 * with -EBADMSG, print nothing (the library never prints, CRoaring included)
 * and create nothing.
 */
static void refused_quietly(const char *path, const char *copy)
{
	fflush(stderr);
	int saved = dup(2);
	int cap = memfd_create("stderr", MFD_CLOEXEC);
	cr_assert_geq(saved, 0);
	cr_assert_geq(cap, 0);
	dup2(cap, 2);
	int v = cistern_dump_verify(path, NULL);
	int r = cistern_restore(path, copy, NULL, NULL, NULL);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	char printed[256] = "";
	ssize_t n = pread(cap, printed, sizeof(printed) - 1, 0);
	close(cap);
	cr_assert_eq(v, -EBADMSG, "verify: %s", cistern_strerror(v));
	cr_assert_eq(r, -EBADMSG, "restore: %s", cistern_strerror(r));
	cr_assert_eq(n, 0, "printed on stderr: %s", printed);
	struct cistern *c;
	cr_assert_eq(cistern_attach(copy, &c), -ENOENT, "nothing was created");
	cr_assert_eq(temp_objects_left(), 0, "no temporary object is left behind");
}

/*
 * A SimPairedReservoir of sweep 4 x 8 steps dumped to `path`, then record 0's
 * field at byte `field` of its header (8 sim_id, 12 time_step) set to `value`,
 * every checksum made to hold again.
 */
static const char *sim_paired_dump_with(const char *tag, size_t field, uint32_t value)
{
	struct cistern_config cfg = {.slot_size = PAYLOAD,
				     .slot_count = 32,
				     .policy = CISTERN_SIM_PAIRED_RESERVOIR,
				     .watermark = 2,
				     .sweep_size = 4,
				     .nb_time_steps = 8};
	struct cistern *c = seg_create(tag, cfg);
	const char *path = seg_dump_path(tag);
	for (uint32_t i = 0; i < 8; i++) {
		struct cistern_meta m = {.sim_id = i % 4, .time_step = i / 4};
		cr_assert_eq(cistern_put(c, "pair", 4, &m, 0), 0);
	}
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	struct dumpfile f;
	dumpfile_load(&f, path);
	put32(dumpfile_record(&f, 0) + field, value);
	dumpfile_store(&f, path);
	return path;
}

Test(dump, a_sim_paired_record_past_sweep_size_is_refused_by_verify_and_restore_alike)
{
	const char *copy = seg_name("d-psim2");
	const char *path = sim_paired_dump_with("d-psim", 8, 4 /* sweep_size */);
	refused_quietly(path, copy);
}

Test(dump, a_sim_paired_record_past_nb_time_steps_is_refused_by_verify_and_restore_alike)
{
	const char *copy = seg_name("d-pstep2");
	const char *path = sim_paired_dump_with("d-pstep", 12, 8 /* nb_time_steps */);
	refused_quietly(path, copy);
}

/* A dump of 20 FIFO samples, a quarter of them never seen, so that its seen set is not empty. */
static const char *fifo_dump(const char *tag)
{
	struct subject seg = subject(tag, 32, 20);
	dump_subject(&seg);
	return seg.path;
}

Test(dump, an_empty_seen_set_section_is_refused_without_a_word_on_stderr)
{
	const char *copy = seg_name("d-noseen2");
	const char *path = fifo_dump("d-noseen");
	struct dumpfile f;
	dumpfile_load(&f, path);
	dumpfile_set_seen_set(&f, "", 0);
	dumpfile_store(&f, path);
	refused_quietly(path, copy);
}

Test(dump, a_seen_set_of_garbage_is_refused_without_a_word_on_stderr)
{
	const char *copy = seg_name("d-junkseen2");
	const char *path = fifo_dump("d-junkseen");
	struct dumpfile f;
	dumpfile_load(&f, path);
	/* The right cookie, then a container count and keys that run past the end. */
	uint8_t junk[24];
	memset(junk, 0xa5, sizeof(junk));
	put32(junk, 12346);
	dumpfile_set_seen_set(&f, junk, sizeof(junk));
	dumpfile_store(&f, path);
	refused_quietly(path, copy);
}

Test(dump, a_seen_set_that_disagrees_with_the_records_is_refused)
{
	const char *copy = seg_name("d-otherseen2");
	const char *path = fifo_dump("d-otherseen");
	struct dumpfile f;
	dumpfile_load(&f, path);
	/* A well-formed set, one slot short of what the records say was seen. */
	roaring_bitmap_t *b = roaring_bitmap_create();
	for (uint64_t i = 0; i < f.m.sample_count; i++) {
		uint8_t *rec = dumpfile_record(&f, i);
		if (get32(rec + 24))
			roaring_bitmap_add(b, get32(rec + 28));
	}
	roaring_bitmap_remove(b, roaring_bitmap_maximum(b));
	char bytes[4096];
	size_t n = roaring_bitmap_portable_serialize(b, bytes);
	roaring_bitmap_free(b);
	dumpfile_set_seen_set(&f, bytes, n);
	dumpfile_store(&f, path);
	refused_quietly(path, copy);
}

Test(dump, a_dump_whose_checksums_are_made_again_unchanged_still_restores)
{
	const char *copy = seg_name("d-same-crc2");
	const char *path = fifo_dump("d-same-crc");
	struct dumpfile f;
	dumpfile_load(&f, path);
	dumpfile_store(&f, path);
	cr_assert_eq(cistern_dump_verify(path, NULL), 0,
		     "the tests' rewriting alone breaks nothing");
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
}

/* A FIFO of `slots` 64 KiB slots, every one held, sample i's bytes all equal to i. */
static struct cistern *make_full_64k(const char *tag, uint32_t slots)
{
	struct cistern_config cfg = {.slot_size = 65536, .slot_count = slots};
	struct cistern *c = seg_create(tag, cfg);
	uint8_t *buf = malloc(65536);
	for (uint32_t i = 0; i < slots; i++) {
		memset(buf, (int)i, 65536);
		cr_assert_eq(cistern_put(c, buf, 65536, NULL, 0), 0);
	}
	free(buf);
	return c;
}

/* Cuts the dump being restored down to nothing, once its first chunk is read. */
static void cut_after_first_chunk(uint64_t done, uint64_t total, void *arg)
{
	(void)done;
	(void)total;
	const char *path = arg;
	static bool cut;
	if (!cut) {
		cut = true;
		cr_assert_eq(truncate(path, 0), 0);
	}
}

/*
 * A dump that shrinks while it is read back fails the restore, and the reader
 * gives back its buffers without waiting for a read whose failure it already
 * took (which waited forever). 20 MiB: more chunks than are read at once, so
 * later reads find the file gone.
 */
Test(dump, a_dump_cut_short_during_restore_is_refused_not_waited_on, .timeout = 60)
{
	const char *copy = seg_name("d-cut2");
	char path[128]; /* the progress callback's argument: not const */
	snprintf(path, sizeof(path), "%s", seg_dump_path("cut"));
	struct cistern *c = make_full_64k("d-cut", 320);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	cr_assert_gt(file_size(path), 16 << 20);
	cr_assert_eq(cistern_restore(path, copy, cut_after_first_chunk, path, NULL), -EBADMSG);
	cr_assert_eq(file_size(path), 0, "the dump was cut while it was read");
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), -ENOENT, "nothing was created");
	cr_assert_eq(temp_objects_left(), 0, "no temporary object is left behind");
}

Test(dump, a_file_that_is_not_a_dump_is_enomsg_not_a_damaged_dump)
{
	const char *path = seg_dump_path("junk");
	const char *name = seg_name("d-junk");
	FILE *f = fopen(path, "w");
	for (int i = 0; i < 1000; i++)
		fputs("not a dump ", f);
	fclose(f);
	cr_assert_eq(cistern_restore(path, name, NULL, NULL, NULL), -ENOMSG);
	cr_assert_eq(cistern_dump_verify(path, NULL), -ENOMSG);
	struct cistern *r;
	cr_assert_eq(cistern_attach(name, &r), -ENOENT);
}

Test(dump, a_file_shorter_than_the_magic_is_enomsg)
{
	const char *path = seg_dump_path("tiny");
	FILE *f = fopen(path, "w");
	fputs("CIST", f);
	fclose(f);
	cr_assert_eq(cistern_dump_verify(path, NULL), -ENOMSG);
}

Test(dump, a_fifo_is_enomsg_without_waiting_for_a_writer, .timeout = 60)
{
	const char *path = seg_dump_path("fifo");
	const char *name = seg_name("d-fifo");
	cr_assert_eq(mkfifo(path, 0600), 0);
	cr_assert_eq(cistern_dump_verify(path, NULL), -ENOMSG);
	cr_assert_eq(cistern_restore(path, name, NULL, NULL, NULL), -ENOMSG);
}

/* The names a restore by this process would have taken first under its former naming. */
static void squat_restore_names(bool make)
{
	for (int i = 0; i < 4; i++) {
		char name[CISTERN_NAME_MAX + 1];
		snprintf(name, sizeof(name), "restore-%d-%d", (int)getpid(), i);
		if (!make) {
			cistern_unlink(name);
			continue;
		}
		struct cistern_config cfg = {.slot_size = 8, .slot_count = 2};
		struct cistern *c;
		cr_assert_eq(cistern_create(name, &cfg, &c), 0);
		cistern_detach(c);
	}
}

Test(dump, a_restore_succeeds_though_others_took_names_it_could_guess)
{
	struct subject seg = subject("d-squat", 8, 3);
	dump_subject(&seg);
	squat_restore_names(true);
	int r = cistern_restore(seg.path, seg.copy, NULL, NULL, NULL);
	squat_restore_names(false);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	struct cistern *d;
	cr_assert_eq(cistern_attach(seg.copy, &d), 0);
	seg_keep(seg.copy, d);
}

Test(dump, a_dump_succeeds_though_others_took_the_temporary_name_it_could_guess)
{
	struct subject seg = subject("d-tmpsquat", 8, 3);
	char squat[256];
	snprintf(squat, sizeof(squat), "%s.tmp.%d", seg.path, (int)getpid());
	int fd = open(squat, O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	int r = cistern_dump(seg.name, seg.path, NULL, NULL, NULL);
	struct stat st;
	bool squat_kept = stat(squat, &st) == 0 && st.st_size == 0;
	unlink(squat);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	cr_assert(squat_kept, "the other file is left as it was");
	cr_assert_eq(cistern_dump_verify(seg.path, NULL), 0);
}

Test(dump, a_refused_restore_still_says_the_stored_name)
{
	struct subject seg = subject("d-named", 8, 0);
	dump_subject(&seg);
	struct cistern_dump_info info;
	cr_assert_eq(cistern_restore(seg.path, NULL, NULL, NULL, &info), -EEXIST);
	cr_assert_str_eq(info.name, seg.name);
}

Test(dump, a_future_format_version_is_refused_as_unsupported)
{
	struct subject seg = subject("d-ver", 8, 0);
	dump_subject(&seg);
	flip_byte(seg.path, 9); /* format version 1 -> 0x2001 */
	cr_assert_eq(cistern_dump_verify(seg.path, NULL), -EPROTONOSUPPORT);
}

Test(dump, dumping_changes_not_a_byte_of_the_segment)
{
	char shm[128];
	struct subject seg = subject("d-quiet", 32, 20);
	snprintf(shm, sizeof(shm), "/dev/shm/cistern.%s", seg.name);
	size_t size = seg.c->map_size;
	uint8_t *before = malloc(size);
	memcpy(before, seg.c->hdr, size);
	dump_subject(&seg);
	cr_assert_eq(memcmp(before, seg.c->hdr, size), 0);
	free(before);
}

Test(dump, a_sample_held_by_a_reader_is_not_dumped)
{
	struct subject seg = subject("d-held", 8, 3);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(seg.c, &s, 0), 0);
	struct cistern_dump_info di;
	cr_assert_eq(cistern_dump(seg.name, seg.path, NULL, NULL, &di), 0);
	cr_assert_eq(di.samples, 2, "the reader's sample is being consumed");
	cr_assert_eq(cistern_restore(seg.path, seg.copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_open_readonly(seg.copy, &r), 0);
	struct cistern_stats st;
	cistern_stats_get(r, &st);
	cr_assert_eq(st.population, 2);
	cistern_detach(r);
	cistern_release(seg.c, &s);
}

Test(dump, a_closed_segment_restores_closed)
{
	struct subject seg = subject("d-closed", 8, 1);
	cistern_close_reception(seg.c);
	dump_subject(&seg);
	struct cistern *r = restore_copy(&seg);
	uint8_t buf[PAYLOAD];
	cr_assert_gt(cistern_get(r, buf, sizeof(buf), NULL, 0), 0);
	cr_assert_eq(cistern_get(r, buf, sizeof(buf), NULL, 0), CISTERN_EOD);
	cistern_detach(r);
}

/*
 * The producers that died before done go with the dump, reclaimed or not;
 * under CISTERN_DEAD_PRODUCER_DONE a count they complete closes the copy,
 * whose dead producers nobody is left to reclaim.
 */
Test(dump, producers_that_died_before_done_are_restored)
{
	const char *copy = seg_name("d-died2");
	const char *path = seg_dump_path("died");
	struct cistern_config cfg = {.slot_size = PAYLOAD,
				     .slot_count = 8,
				     .expected_producers = 2,
				     .flags = CISTERN_DEAD_PRODUCER_DONE};
	struct cistern *c = seg_create("d-died", cfg);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_producer_done(c), 1);
	pid_t pid = spawn_holder(name, HOLD_RESERVATION);
	cr_assert_gt(pid, 0);
	kill_and_reap(pid); /* dead, and nobody reclaimed it */
	struct cistern_dump_info info;
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, &info), 0);
	cr_assert_eq(info.stats.producers_died, 1);
	cr_assert_eq(info.stats.producers_done, 1);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(r, &st), 0);
	cr_assert_eq(st.producers_died, 1);
	cr_assert_eq(st.producers_done, 1);
	cr_assert(st.reception_closed, "one done, one died: both ended");
	cistern_detach(r);
}

/* Producers and readers keep going while we dump: every dumped sample is whole. */
Test(dump, a_dump_under_load_holds_only_whole_samples, .timeout = 60)
{
	struct subject seg = subject("d-load", 256, 0);
	_Atomic int *stop = shared_alloc(sizeof(*stop));
	for (int k = 0; k < 2; k++) {
		if (fork_child() == 0) {
			struct cistern *p;
			if (cistern_attach(seg.name, &p) < 0)
				_exit(1);
			uint8_t buf[PAYLOAD];
			for (uint32_t i = 0; !atomic_load(stop); i++) {
				size_t len = 1 + (i * 13) % PAYLOAD;
				fill_payload(buf, len, (uint32_t)k, i);
				struct cistern_meta m = {.sim_id = (uint32_t)k, .time_step = i};
				if (cistern_put(p, buf, len, &m, 50) < 0 && !atomic_load(stop))
					continue;
			}
			cistern_detach(p);
			_exit(0);
		}
	}
	if (fork_child() == 0) {
		struct cistern *g;
		if (cistern_attach(seg.name, &g) < 0)
			_exit(1);
		uint8_t buf[PAYLOAD];
		while (!atomic_load(stop))
			cistern_get(g, buf, sizeof(buf), NULL, 50);
		cistern_detach(g);
		_exit(0);
	}
	usleep(50 * 1000);
	uint64_t total = 0;
	for (int round = 0; round < 20; round++) {
		struct cistern_dump_info di;
		cr_assert_eq(cistern_dump(seg.name, seg.path, NULL, NULL, &di), 0);
		cr_assert_eq(cistern_restore(seg.path, seg.copy, NULL, NULL, NULL), 0);
		struct cistern *r;
		cr_assert_eq(cistern_attach(seg.copy, &r), 0);
		struct cistern_sample s;
		while (cistern_acquire(r, &s, 0) == 0) {
			cr_assert(check_payload(s.data, s.len, s.meta.sim_id, s.meta.time_step),
				  "torn sample %u/%u", s.meta.sim_id, s.meta.time_step);
			cr_assert_eq(s.len, 1 + (s.meta.time_step * 13) % PAYLOAD);
			cistern_release(r, &s);
			total++;
		}
		cistern_detach(r);
		cistern_unlink(seg.copy);
	}
	atomic_store(stop, 1);
	cr_assert_eq(reap_all(), 0);
	cr_assert_gt(total, 0, "the dumps held samples");
}

/* A segment created 0644, then made private with chmod 600 (on its /dev/shm file). */
static struct cistern *made_private_after_creation(const char *tag)
{
	/* A umask that would leave a 0644 file as it is: the test sees what the dump asked for. */
	umask(022);
	struct cistern_config cfg = {.slot_size = PAYLOAD, .slot_count = 8, .mode = 0644};
	struct cistern *c = seg_create(tag, cfg);
	char shm[128];
	snprintf(shm, sizeof(shm), "/dev/shm/cistern.%s", seg_name_of(c));
	cr_assert_eq(chmod(shm, 0600), 0);
	return c;
}

static unsigned mode_of(const char *path)
{
	struct stat st;
	cr_assert_eq(stat(path, &st), 0, "%s", path);
	return (unsigned)st.st_mode & 07777;
}

Test(dump, the_dump_file_is_no_more_readable_than_the_segment_is_now)
{
	struct cistern *c = made_private_after_creation("d-mode");
	const char *name = seg_name_of(c);
	const char *path = seg_dump_path("mode");
	fill(c, 3);
	struct cistern_dump_info di;
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, &di), 0);
	cr_assert_eq(mode_of(path), 0600, "mode %o", mode_of(path));
	cr_assert_eq(di.config.mode, 0600, "the dump records the mode it had, %o", di.config.mode);
}

Test(dump, a_restored_segment_gets_the_mode_the_segment_had_when_dumped)
{
	char shm[128];
	struct cistern *c = made_private_after_creation("d-rmode");
	const char *name = seg_name_of(c);
	const char *copy = seg_name("d-rmode2");
	const char *path = seg_dump_path("rmode");
	fill(c, 3);
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	struct cistern_dump_info ri;
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, &ri), 0);
	snprintf(shm, sizeof(shm), "/dev/shm/cistern.%s", copy);
	cr_assert_eq(mode_of(shm), 0600, "mode %o", mode_of(shm));
	struct cistern *r;
	struct cistern_config cfg;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	cistern_config_get(r, &cfg);
	cr_assert_eq(cfg.mode, 0600, "its config says so too, %o", cfg.mode);
	cistern_detach(r);
}

Test(dump, verify_describes_a_good_dump)
{
	struct subject seg = subject("d-verify", 16, 7);
	dump_subject(&seg);
	struct cistern_dump_info di;
	cr_assert_eq(cistern_dump_verify(seg.path, &di), 0);
	cr_assert_eq(di.samples, 7);
	cr_assert_str_eq(di.name, seg.name);
	cr_assert_eq(di.config.slot_count, 16);
	cr_assert_eq(di.stats.puts, 7);
	cr_assert_eq(di.file_size, (uint64_t)file_size(seg.path));
}

static void count_progress(uint64_t done, uint64_t total, void *arg)
{
	uint64_t *last = arg;
	cr_assert_leq(done, total);
	cr_assert_geq(done, *last, "progress never goes back");
	*last = done;
}

Test(dump, progress_reaches_the_total)
{
	struct subject seg = subject("d-prog", 512, 300);
	uint64_t last = 0;
	cr_assert_eq(cistern_dump(seg.name, seg.path, count_progress, &last, NULL), 0);
	cr_assert_eq(last, 300);
	last = 0;
	cr_assert_eq(cistern_restore(seg.path, seg.copy, count_progress, &last, NULL), 0);
	cr_assert_eq(last, (uint64_t)file_size(seg.path));
}

/* Two dumps of one segment are the same file but for the dump time in the meta block. */
static void assert_same_dump(const char *a, const char *b)
{
	off_t size = file_size(a);
	cr_assert_eq(size, file_size(b), "%s and %s", a, b);
	uint8_t *x = malloc((size_t)size), *y = malloc((size_t)size);
	FILE *fa = fopen(a, "r"), *fb = fopen(b, "r");
	cr_assert_eq(fread(x, 1, (size_t)size, fa), (size_t)size);
	cr_assert_eq(fread(y, 1, (size_t)size, fb), (size_t)size);
	fclose(fa);
	fclose(fb);
	/* Everything before the meta block (512 bytes) and the trailer (32). */
	cr_assert_eq(memcmp(x, y, (size_t)(size - 512 - 32)), 0, "%s and %s", a, b);
	free(x);
	free(y);
}

Test(dump, the_plain_write_path_writes_the_same_file)
{
	struct subject seg = subject("d-plain", 64, 50);
	const char *plain = seg_dump_path("d-plain-b");
	cr_assert_eq(cistern__dump_ex(seg.name, seg.path, 0, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern__dump_ex(seg.name, plain, CISTERN__DUMP_PLAIN, NULL, NULL, NULL), 0);
	assert_same_dump(seg.path, plain);
}

/* Several staging buffers, odd record sizes: O_DIRECT block carrying and the padded end. */
Test(dump, a_multi_buffer_dump_matches_the_plain_path_and_restores)
{
	const char *copy = seg_name("d-big2");
	struct cistern_config cfg = {.slot_size = 65536, .slot_count = 100};
	struct cistern *c = seg_create("d-big", cfg);
	const char *name = seg_name_of(c);
	const char *a = seg_dump_path("big-a");
	const char *b = seg_dump_path("big-b");
	uint8_t *buf = malloc(65536);
	for (uint32_t i = 0; i < 100; i++) {
		size_t len = 65536 - i * 331;
		for (size_t k = 0; k < len; k++)
			buf[k] = (uint8_t)(k * 7 + i);
		cr_assert_eq(cistern_put(c, buf, len, NULL, 0), 0);
	}
	cr_assert_eq(cistern__dump_ex(name, a, 0, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern__dump_ex(name, b, CISTERN__DUMP_PLAIN, NULL, NULL, NULL), 0);
	cr_assert_gt(file_size(a), 4 << 20, "more than a few staging buffers");
	assert_same_dump(a, b);
	cr_assert_eq(cistern_restore(a, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	for (uint32_t i = 0; i < 100; i++) {
		ssize_t n = cistern_get(r, buf, 65536, NULL, 0);
		cr_assert_eq(n, 65536 - (ssize_t)i * 331);
		for (ssize_t k = 0; k < n; k++)
			cr_assert_eq(buf[k], (uint8_t)(k * 7 + i));
	}
	free(buf);
	cistern_detach(r);
}

/*
 * The staging buffers are sized from the segment: segments of many shapes,
 * from one 1-byte slot to records larger than a small dump's whole estimate,
 * dump to the same file on both write paths and restore whole.
 */
Test(dump, segments_of_every_shape_dump_and_restore_whole, .timeout = 120)
{
	static const uint32_t sizes[] = {1, 7, 64, 4064, 4096, 5000, 70000};
	static const uint32_t counts[] = {1, 3, 50, 300};
	const char *copy = seg_name("d-shape2");
	const char *a = seg_dump_path("shape-a");
	const char *b = seg_dump_path("shape-b");
	uint8_t *buf = malloc(70000), *want = malloc(70000);
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
			uint32_t size = sizes[si], count = counts[ci];
			struct cistern_config cfg = {.slot_size = size, .slot_count = count};
			struct cistern *c = seg_create("d-shape", cfg);
			const char *name = seg_name_of(c);
			for (uint32_t i = 0; i < count; i++) {
				size_t len = 1 + (i * 2654435761u) % size;
				fill_payload(buf, len, size, i);
				cr_assert_eq(cistern_put(c, buf, len, NULL, 0), 0);
			}
			cr_assert_eq(cistern__dump_ex(name, a, 0, NULL, NULL, NULL), 0);
			cr_assert_eq(
				cistern__dump_ex(name, b, CISTERN__DUMP_PLAIN, NULL, NULL, NULL),
				0);
			assert_same_dump(a, b);
			cr_assert_eq(cistern_restore(a, copy, NULL, NULL, NULL), 0, "%u x %u B",
				     count, size);
			struct cistern *r;
			cr_assert_eq(cistern_attach(copy, &r), 0);
			for (uint32_t i = 0; i < count; i++) {
				size_t len = 1 + (i * 2654435761u) % size;
				cr_assert_eq(cistern_get(r, buf, size, NULL, 0), (ssize_t)len);
				fill_payload(want, len, size, i);
				cr_assert_eq(memcmp(buf, want, len), 0, "%u x %u B, sample %u",
					     count, size, i);
			}
			cistern_detach(r);
			cistern_unlink(copy);
			seg_drop(c); /* the next shape is made under the same name */
		}
	}
	free(buf);
	free(want);
}

static volatile sig_atomic_t alarms;

static void count_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/*
 * A process that takes signals all the time (a profiler's timer, an alarm)
 * still dumps and restores: a signal interrupts io_uring's waits, not its
 * requests. Every 50 us a SIGALRM whose handler does not ask for restarts.
 */
Test(dump, dump_and_restore_go_through_a_storm_of_signals, .timeout = 120)
{
	const char *copy = seg_name("d-sig2");
	const char *path = seg_dump_path("sig");
	struct cistern *c = make_full_64k("d-sig", 64);
	const char *name = seg_name_of(c);
	uint8_t *buf = malloc(65536);
	struct sigaction sa = {.sa_handler = count_alarm}, old;
	cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);
	struct itimerval every = {{0, 50}, {0, 50}}, off = {{0, 0}, {0, 0}};
	cr_assert_eq(setitimer(ITIMER_REAL, &every, NULL), 0);
	int dumped = 0, restored = 0, first = 0;
	for (int round = 0; round < 20; round++) {
		int r = cistern_dump(name, path, NULL, NULL, NULL);
		dumped += r == 0;
		first = first ? first : r;
		r = cistern_restore(path, copy, NULL, NULL, NULL);
		restored += r == 0;
		first = first ? first : r;
		cistern_unlink(copy);
	}
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	cr_assert_gt(alarms, 100, "the signals came (%d)", (int)alarms);
	cr_assert_eq(dumped, 20, "dumps done: %d of 20 (%s)", dumped, cistern_strerror(first));
	cr_assert_eq(restored, 20, "restores done: %d of 20 (%s)", restored,
		     cistern_strerror(first));
	/* And what came back is what went in. */
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	for (uint32_t i = 0; i < 64; i++) {
		cr_assert_eq(cistern_get(r, buf, 65536, NULL, 0), 65536);
		cr_assert_eq(buf[0], (uint8_t)i);
		cr_assert_eq(buf[65535], (uint8_t)i);
	}
	free(buf);
	cistern_detach(r);
}

/* Someone polling for the name sees nothing, then the whole restored segment. */
Test(dump, a_restored_segment_appears_complete_or_not_at_all, .timeout = 60)
{
	struct subject seg = subject("d-atomic", 2048, 2000);
	dump_subject(&seg);
	pid_t pid = fork();
	if (pid == 0) {
		double end = mono_now() + 20;
		while (mono_now() < end) {
			struct cistern *r;
			if (cistern_open_readonly(seg.copy, &r) != 0)
				continue;
			struct cistern_occupancy o;
			cistern_occupancy_get(r, &o);
			_exit(o.slots[CISTERN_SLOT_COMMITTED] == 2000 ? 0 : 2);
		}
		_exit(3);
	}
	usleep(20 * 1000);
	cr_assert_eq(cistern_restore(seg.path, seg.copy, NULL, NULL, NULL), 0);
	int st;
	waitpid(pid, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the poller saw a partial segment (%d)",
		  WEXITSTATUS(st));
}

/* Where io_uring is unavailable (seccomp, io_uring_disabled), dump and restore still work. */
Test(dump, works_without_io_uring)
{
	struct subject seg = subject("d-nouring", 16, 10);
	cistern__no_uring = true;
	dump_subject(&seg);
	cr_assert_eq(cistern_dump_verify(seg.path, NULL), 0);
	cistern__no_uring = false;
	struct cistern *r = restore_copy(&seg);
	for (uint32_t i = 0; i < 10; i++) {
		uint8_t buf[PAYLOAD];
		struct cistern_meta m;
		ssize_t n = cistern_get(r, buf, sizeof(buf), &m, 0);
		cr_assert_eq(n, (ssize_t)(1 + (i * 37) % PAYLOAD));
		cr_assert(check_payload(buf, (size_t)n, 9, i));
	}
	cistern_detach(r);
}

/* ---- FIRO and the reservoirs ------------------------------------------- */

static void put_n(struct cistern *c, uint32_t n, uint32_t sims)
{
	uint8_t buf[PAYLOAD];
	for (uint32_t i = 0; i < n; i++) {
		size_t len = 1 + (i * 37) % PAYLOAD;
		fill_payload(buf, len, i % sims, i / sims);
		struct cistern_meta m = {.sim_id = i % sims, .time_step = i / sims};
		cr_assert_eq(cistern_put(c, buf, len, &m, 0), 0);
	}
}

Test(dump_policies, new_reservoir_samples_get_ids_above_the_restored_ones)
{
	struct cistern_config cfg = {.slot_size = PAYLOAD,
				     .slot_count = 16,
				     .policy = CISTERN_RESERVOIR,
				     .watermark = 2};
	struct cistern *c = seg_create("dr-ids", cfg);
	const char *name = seg_name_of(c);
	const char *copy = seg_name("dr-ids2");
	const char *path = seg_dump_path("dr-ids");
	put_n(c, 7, 1);
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	struct cistern_meta m;
	cr_assert_eq(cistern_put(r, "n", 1, &m, 0), 0);
	cr_assert_eq(m.sample_id, 7);
	struct cistern_stats st;
	cistern_stats_get(r, &st);
	cr_assert_eq(st.population, 8);
	cistern_detach(r);
}

Test(dump_policies, a_restored_fifo_evict_ring_evicts_the_oldest_first)
{
	struct cistern_config cfg = {.slot_size = PAYLOAD,
				     .slot_count = 8,
				     .policy = CISTERN_FIFO_EVICT_RESERVOIR,
				     .watermark = 1,
				     .flags = CISTERN_LOSSY};
	struct cistern *c = seg_create("dr-ring", cfg);
	const char *name = seg_name_of(c);
	const char *copy = seg_name("dr-ring2");
	const char *path = seg_dump_path("dr-ring");
	put_n(c, 12, 1); /* 4 evicted: ids 4..11 held, the ring wrapped */
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	struct cistern_meta m;
	cr_assert_eq(cistern_put(r, "n", 1, &m, 0), 0);
	cr_assert_eq(m.sample_id, 12);
	static struct held_sample h[16];
	size_t n = held_samples(r, h, 16);
	cr_assert_eq(n, 8);
	cr_assert_eq(h[0].id, 5, "id 4, the oldest, was evicted");
	cr_assert_eq(h[7].id, 12);
	cistern_detach(r);
}

Test(dump_policies, a_restored_sim_paired_reservoir_hands_out_pairs)
{
	struct cistern_config cfg = {.slot_size = PAYLOAD,
				     .slot_count = 32,
				     .policy = CISTERN_SIM_PAIRED_RESERVOIR,
				     .watermark = 2,
				     .sweep_size = 4,
				     .nb_time_steps = 8};
	struct cistern *c = seg_create("dr-pair", cfg);
	const char *name = seg_name_of(c);
	const char *copy = seg_name("dr-pair2");
	const char *path = seg_dump_path("dr-pair");
	put_n(c, 16, 4); /* sims 0..3, steps 0..3 */
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	for (int k = 0; k < 20; k++) {
		struct cistern_sample p[2];
		cr_assert_eq(cistern_acquire_pair(r, p, 0), 0);
		cr_assert_eq(p[0].meta.sim_id, p[1].meta.sim_id);
		cr_assert_eq(p[0].meta.time_step + 1, p[1].meta.time_step);
		cr_assert(
			check_payload(p[1].data, p[1].len, p[1].meta.sim_id, p[1].meta.time_step));
		cistern_release_pair(r, p);
	}
	cistern_detach(r);
}

Test(dump, strerror_names_a_damaged_dump)
{
	cr_assert_str_eq(cistern_strerror(-EBADMSG), "damaged or truncated dump file");
}

/* ---- end-of-episode marks ------------------------------------------------ */

#define END CISTERN_META_END_OF_EPISODE

/* A SimPairedReservoir of one sim and `steps` steps, for windows over them. */
static struct cistern *make_episodes(const char *tag, uint32_t steps)
{
	struct cistern_config cfg = {.slot_size = PAYLOAD,
				     .slot_count = 16,
				     .policy = CISTERN_SIM_PAIRED_RESERVOIR,
				     .watermark = 2,
				     .sweep_size = 1,
				     .nb_time_steps = steps,
				     .seed = 11};
	return seg_create(tag, cfg);
}

/*
 * Draw `draws` windows of two steps from c and count, per step, how often
 * it heads one (heads[step]) and how often it is read back with the
 * end-of-episode mark (marked[step]).
 */
static void count_windows(struct cistern *c, int draws, uint32_t *heads, uint32_t *marked)
{
	for (int k = 0; k < draws; k++) {
		struct cistern_sample w[2];
		int r = cistern_acquire_window(c, w, 2, 1, 0);
		cr_assert_eq(r, 0, "window: %s", cistern_strerror(r));
		heads[w[0].meta.time_step]++;
		for (int i = 0; i < 2; i++)
			marked[w[i].meta.time_step] += (w[i].meta.flags & END) != 0;
		cr_assert_eq(cistern_release_window(c, w, 2), 0);
	}
}

Test(dump_policies, a_restored_sim_paired_reservoir_keeps_its_end_of_episode_marks)
{
	struct cistern *c = make_episodes("d-eoe", 6);
	for (uint32_t t = 0; t < 6; t++) {
		struct cistern_meta m = {.time_step = t, .flags = t == 2 ? END : 0};
		cr_assert_eq(cistern_put(c, "step", 4, &m, 0), 0);
	}
	const char *path = seg_dump_path("d-eoe");
	const char *copy = seg_name("d-eoe2");
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	uint32_t heads[6] = {0}, marked[6] = {0};
	count_windows(r, 400, heads, marked);
	cr_assert_eq(heads[2], 0, "a window ran past the end of the episode at step 2");
	cr_assert_gt(marked[2], 0, "step 2 came back without its mark");
	for (uint32_t t = 0; t < 6; t++)
		if (t != 2)
			cr_assert_eq(marked[t], 0, "step %u came back marked", t);
	cistern_detach(r);
}

Test(dump, a_sim_paired_dump_is_written_in_format_4)
{
	struct cistern *c = make_episodes("d-eoe4", 4);
	const char *path = seg_dump_path("d-eoe4");
	struct cistern_dump_info info;
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, &info), 0);
	cr_assert_eq(info.format_version, 4);
	cr_assert_eq(cistern_dump_verify(path, &info), 0);
	cr_assert_eq(info.format_version, 4);
}

Test(dump, a_dump_of_a_policy_without_flags_stays_in_format_2)
{
	struct subject seg = subject("d-v2", 8, 4);
	struct cistern_dump_info info;
	cr_assert_eq(cistern_dump(seg.name, seg.path, NULL, NULL, &info), 0);
	cr_assert_eq(info.format_version, 2, "older builds read it");
}

/*
 * tests/admin/data/sim-paired-v2.dump: a SimPairedReservoir of sweep 2 x 4
 * steps, sim 0 steps 0-3 put with step 1 marked as its episode's end, and
 * sim 1 step 0, dumped by a build that wrote format 2, which has no flags.
 */
Test(dump, a_version_2_dump_of_a_sim_paired_reservoir_restores_with_flags_0)
{
	const char *copy = seg_name("d-old2");
	struct cistern_dump_info info;
	int r = cistern_restore(DUMP_DATA "/sim-paired-v2.dump", copy, NULL, NULL, &info);
	cr_assert_eq(r, 0, "restore: %s", cistern_strerror(r));
	cr_assert_eq(info.format_version, 2);
	cr_assert_eq(info.samples, 5);
	struct cistern *c;
	cr_assert_eq(cistern_attach(copy, &c), 0);
	uint32_t heads[4] = {0}, marked[4] = {0};
	count_windows(c, 200, heads, marked);
	for (uint32_t t = 0; t < 4; t++)
		cr_assert_eq(marked[t], 0, "step %u came back marked", t);
	cr_assert_gt(heads[1], 0, "without the mark, a window may start at step 1");
	cistern_detach(c);
}

/* Record 0 of a sim-paired dump given flags `flags`, every checksum made to hold. */
static const char *sim_paired_dump_flagged(const char *tag, uint32_t flags)
{
	struct cistern *c = make_episodes(tag, 4);
	for (uint32_t t = 0; t < 4; t++) {
		struct cistern_meta m = {.time_step = t};
		cr_assert_eq(cistern_put(c, "step", 4, &m, 0), 0);
	}
	const char *path = seg_dump_path(tag);
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	struct dumpfile f;
	dumpfile_load(&f, path);
	cr_assert_eq(f.m.version, 4);
	put32(dumpfile_record(&f, 0) + 32, flags);
	dumpfile_store(&f, path);
	return path;
}

Test(dump, a_record_with_a_flag_no_put_keeps_is_refused_by_verify_and_restore_alike)
{
	const char *copy = seg_name("d-badflag2");
	refused_quietly(sim_paired_dump_flagged("d-badflag", 0x80), copy);
}

Test(dump, a_record_whose_reserved_word_is_not_zero_is_refused)
{
	const char *copy = seg_name("d-resv2");
	const char *path = sim_paired_dump_flagged("d-resv", END);
	struct dumpfile f;
	dumpfile_load(&f, path);
	put32(dumpfile_record(&f, 1) + 36, 1);
	dumpfile_store(&f, path);
	refused_quietly(path, copy);
}
