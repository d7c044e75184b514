/* SPDX-License-Identifier: MIT */
/*
 * test_hostile.c - hostile and damaged input is refused with a clear error,
 * never a crash: bad names, shm objects that are not cistern segments, headers
 * of other builds, sizes that lie or overflow, out-of-range parameters,
 * oversized payloads, forged or repeated releases, and another user's segment.
 *
 * Damaged segments are made by creating a real one, detaching, and rewriting
 * its bytes through /dev/shm, so every test starts from a header that would
 * otherwise be accepted and changes exactly one thing.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "helpers.h"
#include "core/roles.h"
#include <cistern/admin.h>

/*
 * Every test's segments and objects are named by seg_name() (through the
 * helpers below); the fixture removes them, pass or fail.
 */
TestSuite(hostile_names, .fini = seg_fini);
TestSuite(hostile_objects, .fini = seg_fini);
TestSuite(hostile_special, .fini = seg_fini);
TestSuite(hostile_header, .fini = seg_fini);
TestSuite(hostile_sizes, .fini = seg_fini);
TestSuite(hostile_create, .fini = seg_fini);
TestSuite(hostile_payload, .fini = seg_fini);
TestSuite(hostile_handles, .fini = seg_fini);
TestSuite(hostile_user, .fini = seg_fini);
TestSuite(hostile_owner, .fini = seg_fini);
TestSuite(hostile_ring, .fini = seg_fini);
TestSuite(hostile_after_attach, .fini = seg_fini);

#define NOBODY 65534

static void path_of(const char *name, char *path, size_t len)
{
	snprintf(path, len, "/dev/shm/cistern.%s", name);
}

/* Attach, detach if it worked, and return what attach said. */
static int attach_result(const char *name)
{
	struct cistern *c = NULL;
	int r = cistern_attach(name, &c);
	if (r == 0)
		cistern_detach(c);
	else
		cr_assert_null(c, "a failed attach leaves no handle");
	return r;
}

/* A real, detached segment, by name; its header is copied to *h if h is not NULL. */
static const char *real_segment(const char *tag, struct cistern_hdr *h)
{
	struct cistern_config cfg = {.slot_size = 100, .slot_count = 8};
	struct cistern *c = seg_create(tag, cfg);
	const char *name = seg_name_of(c);
	if (h)
		memcpy(h, c->hdr, sizeof(*h));
	cr_assert_eq(seg_detach(c), 0);
	return name;
}

/* Overwrite the header of segment `name` with *h. */
static void write_header(const char *name, const struct cistern_hdr *h)
{
	char path[128];
	path_of(name, path, sizeof(path));
	int fd = open(path, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, h, sizeof(*h), 0), (ssize_t)sizeof(*h));
	close(fd);
}

static void truncate_to(const char *name, off_t size)
{
	char path[128];
	path_of(name, path, sizeof(path));
	cr_assert_eq(truncate(path, size), 0);
}

/* An shm object under cistern's prefix holding exactly `len` bytes of `data`, by name. */
static const char *raw_object(const char *tag, const void *data, size_t len)
{
	const char *name;
	int fd = seg_shm_object(tag, &name);
	if (len)
		cr_assert_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
	return name;
}

/*
 * Change one header field of a fresh segment and return what attach says.
 * The field is given by offset and width so one helper serves them all.
 */
static int attach_with(const char *tag, size_t off, size_t width, uint64_t value)
{
	struct cistern_hdr h;
	const char *name = real_segment(tag, &h);
	if (width == sizeof(uint32_t)) {
		uint32_t v = (uint32_t)value;
		memcpy((char *)&h + off, &v, sizeof(v));
	} else {
		cr_assert_eq(width, sizeof(uint64_t));
		memcpy((char *)&h + off, &value, sizeof(value));
	}
	write_header(name, &h);
	return attach_result(name);
}

#define ATTACH_WITH(tag, field, value)                          \
	attach_with((tag), offsetof(struct cistern_hdr, field), \
		    sizeof(((struct cistern_hdr *)0)->field), (uint64_t)(value))

/* ---- names ---------------------------------------------------------------- */

Test(hostile_names, a_slash_is_refused_everywhere)
{
	struct cistern *c;
	cr_assert_eq(cistern_create("a/b", NULL, &c), -EINVAL);
	cr_assert_eq(cistern_attach("a/b", &c), -EINVAL);
	cr_assert_eq(cistern_unlink("a/b"), -EINVAL);
	cr_assert_eq(cistern_attach("/cistern.x", &c), -EINVAL);
}

Test(hostile_names, dot_dot_is_refused_everywhere)
{
	struct cistern *c;
	cr_assert_eq(cistern_create("..", NULL, &c), -EINVAL);
	cr_assert_eq(cistern_attach("..", &c), -EINVAL);
	cr_assert_eq(cistern_unlink("../cistern.x"), -EINVAL);
}

Test(hostile_names, empty_and_null_names_are_refused)
{
	struct cistern *c;
	cr_assert_eq(cistern_create("", NULL, &c), -EINVAL);
	cr_assert_eq(cistern_attach("", &c), -EINVAL);
	cr_assert_eq(cistern_attach(NULL, &c), -EINVAL);
	cr_assert_eq(cistern_unlink(NULL), -EINVAL);
}

Test(hostile_names, an_over_long_name_is_enametoolong_and_creates_nothing)
{
	char name[CISTERN_NAME_MAX + 2];
	memset(name, 'q', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	struct cistern *c;
	cr_assert_eq(cistern_create(name, NULL, &c), -ENAMETOOLONG);
	cr_assert_eq(cistern_attach(name, &c), -ENAMETOOLONG);
	cr_assert_eq(cistern_unlink(name), -ENAMETOOLONG);
	/* Not silently cut to 64 characters either. */
	name[CISTERN_NAME_MAX] = '\0';
	cr_assert_eq(cistern_attach(name, &c), -ENOENT);
}

/* ---- objects that are not cistern segments -------------------------------- */

Test(hostile_objects, random_bytes_are_eproto)
{
	static uint8_t junk[1 << 16];
	uint64_t x = (uint64_t)getpid() * 0x9e3779b97f4a7c15u + 1;
	for (size_t i = 0; i < sizeof(junk); i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		junk[i] = (uint8_t)x;
	}
	junk[0] = 'J'; /* an all-zero magic would read as "still being created" */
	const char *name = raw_object("h-random", junk, sizeof(junk));
	cr_assert_eq(attach_result(name), -EPROTO);
}

Test(hostile_objects, a_zero_length_object_is_eagain_within_a_bounded_time)
{
	/* Indistinguishable from a segment between shm_open and ftruncate: retried, then EAGAIN. */
	const char *name = raw_object("h-empty", NULL, 0);
	double t0 = mono_now();
	cr_assert_eq(attach_result(name), -EAGAIN);
	cr_assert_lt(mono_now() - t0, 5.0, "attach must not wait for ever");
}

Test(hostile_objects, a_few_bytes_are_eproto)
{
	const char *name = raw_object("h-few", "CIST", 4);
	cr_assert_eq(attach_result(name), -EPROTO);
}

Test(hostile_objects, a_header_without_its_body_is_eproto)
{
	struct cistern_hdr h;
	const char *name = real_segment("h-hdronly", &h);
	cistern_unlink(name); /* the name goes to an object of its header alone */
	raw_object("h-hdronly", &h, sizeof(h));
	cr_assert_eq(attach_result(name), -EPROTO);
}

/* ---- objects that are not regular files ------------------------------------ */

/*
 * Anyone who may write /dev/shm can put a FIFO, a socket, a directory, a
 * device node or a symbolic link under a segment's name. Opening a FIFO for
 * reading waits for a writer: a call that did would never return. Each test
 * arms an alarm, so that such a wait kills the test (a failure) instead of
 * hanging the suite (special_make() in helpers.h); no call here has any
 * reason to take more than a moment.
 */

/*
 * special_make() under seg_name(tag), given in *name; returns the descriptor
 * to give special_remove().
 */
static int special_object(enum special kind, const char *tag, const char **name)
{
	*name = seg_name(tag);
	int keep;
	int r = special_make(kind, *name, &keep);
	cr_assert_eq(r, 0, "making the object: %s", strerror(-r));
	return keep;
}

/* Every call that opens a segment by name answers -EPROTO for it, at once. */
static void refused_at_once(enum special kind, const char *tag)
{
	char dump[128];
	const char *name;
	int keep = special_object(kind, tag, &name);
	alarm(20); /* a wait for ever fails the test instead of hanging it */
	struct cistern *c = NULL;
	cr_expect_eq(cistern_attach(name, &c), -EPROTO, "attach");
	cr_expect_null(c);
	cr_expect_eq(cistern_open_readonly(name, &c), -EPROTO, "open_readonly");
	struct cistern_gc_report rep;
	cr_expect_eq(cistern_gc(name, CISTERN_GC_DRY_RUN, &rep), -EPROTO, "gc dry run");
	cr_expect_eq(cistern_gc(name, 0, &rep), -EPROTO, "gc");
	cr_expect_eq(rep.removed, 0);
	cr_expect_eq(cistern_remove(name, 0), -EPROTO, "remove");
	snprintf(dump, sizeof(dump), "/tmp/cistern-%s.dump", name);
	cr_expect_eq(cistern_dump(name, dump, NULL, NULL, NULL), -EPROTO, "dump");
	cr_expect_neq(access(dump, F_OK), 0, "no dump file");
	struct cistern_segment_info *v = NULL;
	int n = cistern_list(&v);
	cr_expect_geq(n, 1, "list");
	int status = 1;
	for (int i = 0; i < n; i++)
		if (strcmp(v[i].name, name) == 0)
			status = v[i].status;
	free(v);
	cr_expect_eq(status, -EPROTO, "listed as not a segment");
	special_remove(keep);
}

Test(hostile_special, a_fifo_under_a_segment_name_is_eproto_without_waiting)
{
	refused_at_once(SP_FIFO, "h-fifo");
}

Test(hostile_special, a_socket_under_a_segment_name_is_eproto)
{
	refused_at_once(SP_SOCKET, "h-sock");
}

Test(hostile_special, a_directory_under_a_segment_name_is_eproto)
{
	refused_at_once(SP_DIR, "h-dir");
}

Test(hostile_special, a_symlink_to_dev_null_under_a_segment_name_is_eproto)
{
	refused_at_once(SP_LINK, "h-link");
}

Test(hostile_special, a_device_node_under_a_segment_name_is_eproto)
{
	refused_at_once(SP_DEVICE, "h-dev");
}

Test(hostile_special, a_listing_goes_on_past_a_fifo)
{
	/* The FIFO's name sorts first, the segment's after it: both are listed. */
	struct cistern *c = seg_create_cfg("h-lsb", NULL);
	const char *name = seg_name_of(c), *fifo;
	int keep = special_object(SP_FIFO, "h-lsa", &fifo);
	alarm(20);
	struct cistern_segment_info *v = NULL;
	int n = cistern_list(&v);
	alarm(0);
	int fifo_status = 1, seg_status = 1;
	for (int i = 0; i < n; i++) {
		if (strcmp(v[i].name, fifo) == 0)
			fifo_status = v[i].status;
		if (strcmp(v[i].name, name) == 0)
			seg_status = v[i].status;
	}
	free(v);
	special_remove(keep);
	cr_assert_eq(fifo_status, -EPROTO);
	cr_assert_eq(seg_status, 0);
}

Test(hostile_special, a_forced_remove_takes_a_fifo_away)
{
	char path[128];
	const char *name;
	int keep = special_object(SP_FIFO, "h-rmfifo", &name);
	path_of(name, path, sizeof(path));
	alarm(20);
	cr_assert_eq(cistern_remove(name, CISTERN_REMOVE_FORCE), 0);
	struct stat st;
	cr_assert_neq(lstat(path, &st), 0, "the FIFO is gone");
	special_remove(keep);
}

/* ---- magic, ABI and layout ------------------------------------------------ */

Test(hostile_header, a_wrong_magic_is_eproto)
{
	struct cistern_hdr h;
	const char *name = real_segment("h-magic", &h);
	memcpy(h.magic, "CISTERM", 8);
	write_header(name, &h);
	cr_assert_eq(attach_result(name), -EPROTO);
}

Test(hostile_header, another_abi_version_is_eprotonosupport)
{
	cr_assert_eq(ATTACH_WITH("h-abi", abi_version, CISTERN_ABI_VERSION + 1), -EPROTONOSUPPORT);
}

Test(hostile_header, another_layout_signature_is_eprotonosupport)
{
	cr_assert_eq(ATTACH_WITH("h-sig", layout_sig, cistern__layout_signature() ^ 1),
		     -EPROTONOSUPPORT);
}

/* ---- sizes that lie ------------------------------------------------------- */

Test(hostile_sizes, an_object_shorter_than_its_header_says_is_eproto_without_sigbus)
{
	struct cistern_hdr h;
	const char *name = real_segment("h-short", &h);
	truncate_to(name, (off_t)h.total_size - 4096);
	cr_assert_eq(attach_result(name), -EPROTO);
	truncate_to(name, (off_t)sizeof(h) + 1);
	cr_assert_eq(attach_result(name), -EPROTO);
}

Test(hostile_sizes, attach_refuses_a_segment_truncated_after_others_attached)
{
	struct cistern_config cfg = {.slot_size = 100, .slot_count = 8};
	struct cistern *c = seg_create("h-trunc", cfg);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	truncate_to(name, 4096);
	cr_assert_eq(attach_result(name), -EPROTO);
	/* The handle that was attached can still let go without touching lost pages. */
	cr_assert_eq(seg_detach(c), 0);
}

Test(hostile_sizes, an_attached_process_touching_truncated_pages_gets_sigbus)
{
	/*
	 * Documented behaviour, not a wish: shrinking a mapped object removes
	 * its pages, and the kernel answers an access with SIGBUS. The library
	 * does not install signal handlers; only a process with write access to
	 * the object (same user, mode 0600) can do this.
	 */
	struct cistern_config cfg = {.slot_size = 100, .slot_count = 8};
	struct cistern *c = seg_create("h-sigbus", cfg);
	const char *name = seg_name_of(c);
	pid_t pid = fork();
	if (pid == 0) {
		/* Its own handle: one inherited through fork() refuses every call. */
		struct cistern *own;
		if (cistern_attach(name, &own) < 0)
			_exit(1);
		truncate_to(name, 0);
		char buf[8];
		cistern_get(own, buf, sizeof(buf), NULL, 0);
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS, "status %d", status);
	cr_assert_eq(seg_detach(c), 0, "detach of the truncated segment must not fault");
}

Test(hostile_sizes, slot_count_times_stride_beyond_the_arena_limit_is_eproto)
{
	struct cistern_hdr h;
	const char *name = real_segment("h-arena", &h);
	/* Each within its own limit, the product (2^58) is not; offsets made to match. */
	h.slot_size = CISTERN_SLOT_SIZE_MAX;
	h.slot_count = CISTERN_SLOT_COUNT_MAX;
	h.slot_stride = CISTERN_SLOT_SIZE_MAX;
	h.arena_off = h.meta_off + CISTERN_SLOT_COUNT_MAX * sizeof(struct cistern_slotmeta);
	h.total_size = h.arena_off + (CISTERN_SLOT_SIZE_MAX << 28);
	write_header(name, &h);
	cr_assert_eq(attach_result(name), -EPROTO);
}

Test(hostile_sizes, a_slot_count_whose_product_wraps_is_eproto)
{
	cr_assert_eq(ATTACH_WITH("h-wrap", slot_count, UINT64_C(1) << 58), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-wrap2", slot_size, UINT64_MAX - 10), -EPROTO);
}

Test(hostile_sizes, a_huge_slot_count_is_refused_before_a_policy_sizes_its_index, .timeout = 10)
{
	/* The prioritized policy sizes its tree by rounding the count up to a power of two. */
	struct cistern_config cfg = {
		.policy = CISTERN_PRIORITIZED, .slot_size = 64, .slot_count = 8, .watermark = 1};
	struct cistern *c = seg_create("h-prio-count", cfg);
	const char *name = seg_name_of(c);
	struct cistern_hdr h;
	memcpy(&h, c->hdr, sizeof(h));
	cr_assert_eq(seg_detach(c), 0);
	h.slot_count = (UINT64_C(1) << 63) + 1;
	write_header(name, &h);
	cr_assert_eq(attach_result(name), -EPROTO);
}

Test(hostile_sizes, offsets_that_wrap_or_disagree_are_eproto)
{
	cr_assert_eq(ATTACH_WITH("h-off1", meta_off, UINT64_MAX - 63), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-off2", arena_off, 64), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-off3", procs_off, 0), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-off4", slot_stride, 0), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-off5", total_size, UINT64_MAX), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-off6", meta_stride, 0), -EPROTO);
}

Test(hostile_sizes, zero_or_too_many_slots_or_entries_in_a_header_are_eproto)
{
	cr_assert_eq(ATTACH_WITH("h-z1", slot_count, 0), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-z2", slot_size, 0), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-z3", procs_count, 0), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-z4", procs_count, CISTERN_PROCS_MAX + 1), -EPROTO);
}

Test(hostile_header, an_unknown_policy_or_flag_is_eproto)
{
	cr_assert_eq(ATTACH_WITH("h-pol", policy, CISTERN_POLICY_COUNT), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-flag", flags, 0x80), -EPROTO);
}

Test(hostile_header, policy_parameters_create_would_refuse_are_eproto)
{
	cr_assert_eq(ATTACH_WITH("h-wm", watermark, 9), -EPROTO, "watermark over slot_count");
	cr_assert_eq(ATTACH_WITH("h-pe", pseudo_epochs, 0), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-mode", mode, 0170000), -EPROTO);
}

Test(hostile_header, a_name_without_terminator_is_eproto)
{
	struct cistern_hdr h;
	const char *name = real_segment("h-nonul", &h);
	memset(h.name, 'n', sizeof(h.name));
	write_header(name, &h);
	cr_assert_eq(attach_result(name), -EPROTO);
}

Test(hostile_header, validation_refuses_a_short_buffer)
{
	struct cistern_hdr h;
	real_segment("h-vshort", &h);
	cr_assert_eq(cistern__validate_header(&h, sizeof(h), h.total_size), 0,
		     "the control passes");
	cr_assert_eq(cistern__validate_header(&h, sizeof(h) - 1, h.total_size), -EPROTO);
	cr_assert_eq(cistern__validate_header(&h, sizeof(h), h.total_size - 1), -EPROTO);
}

/* ---- create parameters ----------------------------------------------------- */

Test(hostile_create, zero_slot_size_and_count_mean_the_documented_defaults)
{
	struct cistern_config cfg = {.slot_size = 0, .slot_count = 0};
	struct cistern *c = seg_create("h-zero", cfg);
	struct cistern_config got;
	cistern_config_get(c, &got);
	cr_assert_eq(got.slot_size, CISTERN_DEFAULT_SLOT_SIZE);
	cr_assert_eq(got.slot_count, CISTERN_DEFAULT_SLOT_COUNT);
}

Test(hostile_create, sizes_beyond_the_limits_are_einval_and_leave_nothing)
{
	const char *name = seg_name("h-limits");
	struct cistern *c = (struct cistern *)0x1;
	struct cistern_config cfg;
	cfg = (struct cistern_config){.slot_size = CISTERN_SLOT_SIZE_MAX + 1};
	cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL);
	cr_assert_null(c);
	cfg = (struct cistern_config){.slot_size = UINT64_MAX};
	cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL);
	cfg = (struct cistern_config){.slot_count = CISTERN_SLOT_COUNT_MAX + 1};
	cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL);
	cfg = (struct cistern_config){.slot_count = UINT64_MAX};
	cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL);
	cfg = (struct cistern_config){.slot_size = CISTERN_SLOT_SIZE_MAX,
				      .slot_count = CISTERN_SLOT_COUNT_MAX};
	cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL, "arena over 64 GiB");
	cfg = (struct cistern_config){.max_procs = UINT32_MAX};
	cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL);
	cr_assert_eq(cistern_attach(name, &c), -ENOENT);
}

/* ---- payloads and handles -------------------------------------------------- */

Test(hostile_payload, a_put_over_slot_size_is_emsgsize)
{
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 4};
	struct cistern *c = seg_create("h-big", cfg);
	static char big[1 << 20];
	cr_assert_eq(cistern_put(c, big, 65, NULL, 0), -EMSGSIZE);
	cr_assert_eq(cistern_put(c, big, sizeof(big), NULL, 0), -EMSGSIZE);
	cr_assert_eq(cistern_put(c, big, SIZE_MAX, NULL, 0), -EMSGSIZE);
	struct cistern_slot slot;
	cr_assert_eq(cistern_reserve(c, &slot, 0), 0);
	cr_assert_eq(cistern_commit(c, &slot, SIZE_MAX, NULL), -EMSGSIZE);
	cr_assert_eq(cistern_abort(c, &slot), 0);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.puts, 0);
}

Test(hostile_payload, a_damaged_length_is_eproto_not_a_read_past_the_slot)
{
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 4};
	struct cistern *c = seg_create("h-len", cfg);
	cr_assert_eq(cistern_put(c, "abc", 3, NULL, 0), 0);
	cistern__slotmeta(c, 0)->len = UINT64_C(1) << 40;
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EPROTO);
	cr_assert_eq(cistern_put(c, "d", 1, NULL, 0), 0);
	char buf[64];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1, "the segment goes on");
}

/* A length past the slot but within the caller's buffer: a get would copy past the slot. */
static void damaged_length_within_cap(uint32_t flags, uint64_t slot_size, uint64_t bad_len)
{
	struct cistern_config cfg = {.slot_size = slot_size, .slot_count = 4, .flags = flags};
	struct cistern *c = seg_create("h-len2", cfg);
	char buf[4096];
	/* A first get makes the handle a reader: the next one takes the one-step path. */
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(cistern_put(c, "abc", 3, NULL, 0), 0);
	cistern__slotmeta(c, 1)->len = bad_len;
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EPROTO);
	cr_assert_eq(cistern_put(c, "d", 1, NULL, 0), 0);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1, "the segment goes on");
	cr_assert_eq(buf[0], 'd');
}

Test(hostile_payload, a_damaged_length_within_the_buffer_is_eproto_for_get)
{
	damaged_length_within_cap(0, 64, 1000);
}

Test(hostile_payload, a_damaged_length_within_the_buffer_is_eproto_for_the_sole_reader)
{
	damaged_length_within_cap(CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER, 64, 1000);
}

/* The sole reader copies samples of up to a line straight out: the slot's size still bounds it. */
Test(hostile_payload, a_damaged_length_under_a_line_is_eproto_for_the_sole_reader)
{
	damaged_length_within_cap(CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER, 16, 40);
}

Test(hostile_payload, a_free_slot_word_naming_an_owner_is_eproto_for_producers)
{
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 4};
	struct cistern *c = seg_create("h-own", cfg);
	/* Slot 0 serves position 0 and is FREE (state 0), but names owner 7. */
	atomic_store(&cistern__slotmeta(c, 0)->word, (uint64_t)7);
	cr_assert_eq(cistern_put(c, "abc", 3, NULL, 0), -EPROTO);
	cr_assert_eq(cistern_put(c, "abc", 3, NULL, 100), -EPROTO,
		     "a blocking put does not spin on it");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 0, "nothing was stored");
}

Test(hostile_payload, a_committed_slot_word_naming_an_owner_is_eproto_for_readers)
{
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 4};
	struct cistern *c = seg_create("h-cown", cfg);
	cr_assert_eq(cistern_put(c, "abc", 3, NULL, 0), 0);
	/* Position 0, COMMITTED (state 2), but naming owner 5. */
	atomic_store(&cistern__slotmeta(c, 0)->word, (uint64_t)(2u << 12 | 5u));
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EPROTO);
	cr_assert_eq(cistern_acquire(c, &s, 100), -EPROTO,
		     "a blocking acquire does not spin on it");
}

Test(hostile_handles, release_of_a_sample_never_acquired_is_einval)
{
	struct cistern *c = seg_create_cfg("h-rel0", NULL);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	struct cistern_sample s;
	memset(&s, 0, sizeof(s));
	cr_assert_eq(cistern_release(c, &s), -EINVAL);
	/* A forged handle naming a committed slot, or a slot beyond the ring. */
	s.live_ = 1;
	s.index_ = 0;
	s.pos_ = 0;
	cr_assert_eq(cistern_release(c, &s), -EINVAL);
	s.index_ = UINT32_MAX;
	cr_assert_eq(cistern_release(c, &s), -EINVAL);
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1, "the sample was not released");
}

Test(hostile_handles, release_twice_is_einval_and_frees_once)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 2};
	struct cistern *c = seg_create("h-rel2", cfg);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	struct cistern_sample copy = s;
	cr_assert_eq(cistern_release(c, &s), 0);
	cr_assert_eq(cistern_release(c, &s), -EINVAL);
	/* The slot now serves a new sample; a stale copy must not free it. */
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "c", 1, NULL, 0), 0);
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	cr_assert_eq(cistern_release(c, &copy), -EINVAL);
	cr_assert_eq(cistern_release(c, &s), 0);
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(buf[0], 'c');
}

Test(hostile_handles, a_forged_slot_cannot_be_committed_or_aborted)
{
	struct cistern *c = seg_create_cfg("h-slot", NULL);
	struct cistern_slot slot = {.live_ = 1, .index_ = 0, .pos_ = 0};
	cr_assert_eq(cistern_commit(c, &slot, 1, NULL), -EINVAL);
	cr_assert_eq(cistern_abort(c, &slot), -EINVAL);
	slot.index_ = UINT32_MAX;
	cr_assert_eq(cistern_commit(c, &slot, 1, NULL), -EINVAL);
}

/* ---- another user ---------------------------------------------------------- */

/* Run fn(name) in a child that became user nobody; return its exit code. */
static int as_nobody(const char *name, int (*fn)(const char *))
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (setgid(NOBODY) < 0 || setuid(NOBODY) < 0 || getuid() != NOBODY)
			_exit(100);
		_exit(fn(name));
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "the child died (status %d)", status);
	cr_assert_neq(WEXITSTATUS(status), 100, "could not become user nobody");
	return WEXITSTATUS(status);
}

static int attach_code(const char *name)
{
	struct cistern *c;
	int r = cistern_attach(name, &c);
	if (r == 0)
		cistern_detach(c);
	return r == 0 ? 0 : r == -EACCES ? 1 : 2;
}

static int unlink_code(const char *name)
{
	int r = cistern_unlink(name);
	return r == 0 ? 0 : r == -EACCES ? 1 : 2;
}

Test(hostile_user, another_user_cannot_attach_a_default_mode_segment)
{
	struct cistern *c = seg_create_cfg("h-user", NULL);
	const char *name = seg_name_of(c);
	cr_assert_eq(as_nobody(name, attach_code), 1, "attach by nobody was not -EACCES");
}

Test(hostile_user, another_user_can_attach_when_the_mode_allows_it)
{
	/* The control for the test above: the refusal comes from the mode, not the setup. */
	struct cistern_config cfg = {.mode = 0666};
	struct cistern *c = seg_create("h-user666", cfg);
	const char *name = seg_name_of(c);
	cr_assert_eq(as_nobody(name, attach_code), 0);
}

Test(hostile_user, another_user_cannot_unlink_a_segment)
{
	struct cistern *c = seg_create_cfg("h-unlink", NULL);
	const char *name = seg_name_of(c);
	cr_assert_eq(as_nobody(name, unlink_code), 1, "unlink by nobody was not -EACCES");
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	seg_detach(c);
	cr_assert_eq(cistern_unlink(name), 0, "the segment was still there");
}

/* ---- another user's object under our segment's name ---------------------------- */

/*
 * A squatter: a 0666 segment made under the name before us, then given to
 * `uid` (root can chown, as a user creating it himself would own it); its name.
 */
static const char *squatted(const char *tag, uid_t uid)
{
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 8, .mode = 0666};
	struct cistern *c = seg_create(tag, cfg);
	const char *name = seg_name_of(c);
	cr_assert_eq(fchown(c->fd, uid, uid), 0, "fchown: %s", strerror(errno));
	cr_assert_eq(seg_detach(c), 0);
	return name;
}

static uint64_t puts_of(const char *name)
{
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), 0);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cistern_detach(c);
	return st.puts;
}

Test(hostile_owner, attach_refuses_a_segment_owned_by_another_user)
{
	const char *name = squatted("h-squat", NOBODY);
	struct cistern *c = NULL;
	cr_assert_eq(cistern_attach(name, &c), -EACCES);
	cr_assert_null(c);
	cr_assert_eq(cistern_attach_flags(name, 0, &c), -EACCES);
}

Test(hostile_owner, attach_flags_any_owner_allows_another_users_segment)
{
	const char *name = squatted("h-share", NOBODY);
	struct cistern *c = NULL;
	cr_assert_eq(cistern_attach_flags(name, CISTERN_ATTACH_ANY_OWNER, &c), 0);
	cr_assert_eq(cistern_put(c, "shared", 6, NULL, 0), 0);
	cistern_detach(c);
	cr_assert_eq(puts_of(name), 1);
}

Test(hostile_owner, attach_flags_refuses_unknown_flags)
{
	const char *name = real_segment("h-flags", NULL);
	struct cistern *c = NULL;
	cr_assert_eq(cistern_attach_flags(name, 1u << 5, &c), -EINVAL);
	cr_assert_null(c);
}

Test(hostile_owner, a_read_only_open_looks_at_any_owners_segment)
{
	/* Documented choice: looking cannot put anything of ours into the object. */
	const char *name = squatted("h-look", NOBODY);
	struct cistern *c = NULL;
	cr_assert_eq(cistern_open_readonly(name, &c), 0);
	cistern_detach(c);
}

Test(hostile_owner, gc_and_remove_refuse_another_users_segment_unless_allowed)
{
	const char *name = squatted("h-gcown", NOBODY);
	/* Garbage by every other measure: a process died attached to it. */
	struct cistern *c;
	cr_assert_eq(cistern_attach_flags(name, CISTERN_ATTACH_ANY_OWNER, &c), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *h;
		_exit(cistern_attach_flags(name, CISTERN_ATTACH_ANY_OWNER, &h) == 0 ? 0 : 1);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cistern_detach(c);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, CISTERN_GC_DRY_RUN, &rep), -EACCES);
	cr_assert_eq(cistern_gc(name, 0, &rep), -EACCES);
	cr_assert_eq(cistern_remove(name, 0), -EACCES);
	cr_assert_eq(cistern_remove(name, CISTERN_REMOVE_FORCE), -EACCES);
	char path[128];
	path_of(name, path, sizeof(path));
	cr_assert_eq(access(path, F_OK), 0, "still there");
	cr_assert_eq(cistern_gc(name, CISTERN_GC_DRY_RUN | CISTERN_GC_ANY_OWNER, &rep), 0);
	cr_assert_eq(rep.removed, 1, "the dry run sees garbage once allowed");
	cr_assert_eq(cistern_gc(name, CISTERN_GC_ANY_OWNER, &rep), 0);
	cr_assert_eq(rep.removed, 1);
	cr_assert_neq(access(path, F_OK), 0, "removed");
}

Test(hostile_owner, a_forced_remove_of_another_users_fifo_is_refused)
{
	char path[128];
	const char *name;
	int keep = special_object(SP_FIFO, "h-rmown", &name);
	path_of(name, path, sizeof(path));
	cr_assert_eq(lchown(path, NOBODY, NOBODY), 0);
	alarm(20);
	cr_assert_eq(cistern_remove(name, CISTERN_REMOVE_FORCE), -EACCES);
	cr_assert_eq(cistern_remove(name, CISTERN_REMOVE_FORCE | CISTERN_REMOVE_ANY_OWNER), 0);
	special_remove(keep);
}

static int attach_any_code(const char *name)
{
	struct cistern *c;
	int r = cistern_attach_flags(name, CISTERN_ATTACH_ANY_OWNER, &c);
	if (r == 0)
		cistern_detach(c);
	return r == 0 ? 0 : r == -EACCES ? 1 : 2;
}

Test(hostile_owner, a_user_is_refused_a_third_users_segment_unless_allowed)
{
	/* Neither the caller (nobody) nor root owns it: the mode would allow it, the owner not. */
	const char *name = squatted("h-third", 4242);
	cr_assert_eq(as_nobody(name, attach_code), 1, "attach by nobody was not -EACCES");
	cr_assert_eq(as_nobody(name, attach_any_code), 0);
}

Test(hostile_owner, a_user_attaches_a_segment_it_owns)
{
	const char *name = squatted("h-mine", NOBODY);
	cr_assert_eq(as_nobody(name, attach_code), 0);
}

/* ---- damaged ring ------------------------------------------------------------ */

/*
 * Every slot of a 4-slot ring claims a position 2^40 laps ahead: helping the
 * indices along would take 2^40 steps. The state (RESERVED, owner 0) is one no
 * reclaim touches, so nothing repairs it behind our back.
 */
static void stamp_far_ahead(struct cistern *c)
{
	for (uint32_t i = 0; i < 4; i++)
		atomic_store(&cistern__slotmeta(c, i)->word,
			     ((UINT64_C(1) << 40) + i) << 16 | (UINT64_C(1) << 12));
}

Test(hostile_ring, slot_words_far_ahead_of_the_indices_are_eproto_not_a_spin, .timeout = 20)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 4};
	struct cistern *c = seg_create("h-ring", cfg);
	stamp_far_ahead(c);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), -EPROTO);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 1000), -EPROTO, "no waiting either");
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EPROTO);
}

Test(hostile_ring, fifo_evict_slot_words_far_ahead_of_the_tail_are_eproto_not_a_spin, .timeout = 20)
{
	struct cistern_config cfg = {.slot_size = 8,
				     .slot_count = 4,
				     .policy = CISTERN_FIFO_EVICT_RESERVOIR,
				     .watermark = 1};
	struct cistern *c = seg_create("h-ering", cfg);
	stamp_far_ahead(c); /* in the ring of FIFOEvictReservoir */
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), -EPROTO);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 1000), -EPROTO, "no waiting either");
}

/* ---- damage after attach ------------------------------------------------------ */

/*
 * Validation guards an attaching process; afterwards any process that may
 * write the object can rewrite the header or the shared words under it. These
 * tests attach a victim, then rewrite a field through a second mapping of
 * the object, as such a process would, and check that the victim's calls
 * answer -EPROTO or go on as before. The victim runs in a child: a crash
 * fails the test instead of taking the test program down.
 */

/* A writable mapping of all of segment `name`, made apart from any handle. */
static void *map_segment(const char *name, size_t *size)
{
	char path[128];
	path_of(name, path, sizeof(path));
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	close(fd);
	*size = (size_t)st.st_size;
	return p;
}

/* Slot i's metadata in a raw mapping (the layout of segment.h). */
static struct cistern_slotmeta *raw_meta(struct cistern_hdr *raw, uint64_t i)
{
	return (struct cistern_slotmeta *)((char *)raw + raw->meta_off + i * raw->meta_stride);
}

/*
 * What the victim does once attached, with `raw` the intruder's mapping:
 * 0 if every call answered as it should, else the number of the first check
 * that failed.
 */
typedef int (*victim_fn)(struct cistern *c, struct cistern_hdr *raw);

/*
 * Run fn in a child holding its own handle on `name` (read-only if ro), then
 * detaching it; the test fails if the child dies by a signal or fn says a
 * call answered wrongly.
 */
static void run_victim(const char *name, bool ro, victim_fn fn)
{
	size_t size;
	struct cistern_hdr *raw = map_segment(name, &size);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *c;
		int r = ro ? cistern_open_readonly(name, &c) : cistern_attach(name, &c);
		if (r < 0)
			_exit(100);
		r = fn(c, raw);
		cistern_detach(c);
		_exit(r);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	munmap(raw, size);
	cr_assert(!WIFSIGNALED(status), "the victim died by signal %d (%s)", WTERMSIG(status),
		  strsignal(WTERMSIG(status)));
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "the victim's check %d failed", WEXITSTATUS(status));
}

/* A fresh segment for a victim, by name: created, the creator kept attached (*keep) or not. */
static const char *victim_segment(const char *tag, const struct cistern_config *cfg,
				  struct cistern **keep)
{
	struct cistern *c = seg_create_cfg(tag, cfg);
	const char *name = seg_name_of(c);
	if (keep)
		*keep = c;
	else
		seg_detach(c);
	return name;
}

static const struct cistern_config fifo8 = {.slot_size = 64, .slot_count = 8};

/* The field being rewritten by the victim below, by offset and width. */
static size_t bad_off, bad_width;
static uint64_t bad_value;

static void rewrite(struct cistern_hdr *raw)
{
	if (bad_width == sizeof(uint32_t)) {
		uint32_t v = (uint32_t)bad_value;
		memcpy((char *)raw + bad_off, &v, sizeof(v));
	} else {
		memcpy((char *)raw + bad_off, &bad_value, sizeof(bad_value));
	}
}

#define SET_BAD(field, value)                           \
	(bad_off = offsetof(struct cistern_hdr, field), \
	 bad_width = sizeof(((struct cistern_hdr *)0)->field), bad_value = (uint64_t)(value))

static int stats_and_traffic(struct cistern *c, struct cistern_hdr *raw)
{
	rewrite(raw);
	struct cistern_stats st;
	if (cistern_stats_get(c, &st) != 0)
		return 1;
	if (st.procs_attached != 1)
		return 2;
	char buf[64];
	if (cistern_put(c, "abc", 3, NULL, 0) != 0)
		return 3;
	if (cistern_get(c, buf, sizeof(buf), NULL, 0) != 3)
		return 4;
	if (cistern_stats_get(c, &st) != 0 || st.puts != 1 || st.gets != 1)
		return 5;
	return 0;
}

Test(hostile_after_attach, a_procs_count_rewritten_after_attach_is_not_read_by_stats)
{
	const char *name = victim_segment("h-aa-pc", &fifo8, NULL);
	SET_BAD(procs_count, UINT64_C(1) << 40);
	run_victim(name, false, stats_and_traffic);
}

Test(hostile_after_attach, a_procs_off_rewritten_after_attach_is_not_read_by_stats)
{
	const char *name = victim_segment("h-aa-po", &fifo8, NULL);
	SET_BAD(procs_off, UINT64_C(1) << 50);
	run_victim(name, false, stats_and_traffic);
}

/* Fork a child that attaches, says so, waits delay_ms, puts "w" and detaches. */
static pid_t spawn_late_putter(const char *name, int delay_ms)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		struct cistern *c;
		if (cistern_attach(name, &c) < 0)
			_exit(1);
		char ok = 1;
		if (write(p[1], &ok, 1) != 1)
			_exit(2);
		struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
		int r = cistern_put(c, "w", 1, NULL, 1000);
		cistern_detach(c);
		_exit(r == 0 ? 0 : 3);
	}
	close(p[1]);
	char ok = 0;
	cr_assert_eq(read(p[0], &ok, 1), 1, "the late putter did not start");
	close(p[0]);
	return pid;
}

static void reap_ok(pid_t pid)
{
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "helper status %d", status);
}

/* A get that blocks (sweeping for the dead every 200 ms) until the late putter's sample. */
static int blocked_get(struct cistern *c, struct cistern_hdr *raw)
{
	rewrite(raw);
	char buf[64];
	if (cistern_get(c, buf, sizeof(buf), NULL, 10000) != 1)
		return 1;
	if (buf[0] != 'w')
		return 2;
	return 0;
}

Test(hostile_after_attach, a_blocked_get_survives_procs_count_rewritten_and_is_woken, .timeout = 60)
{
	const char *name = victim_segment("h-aa-blk", &fifo8, NULL);
	/* Long enough that the victim sleeps through a few sweeps first. */
	pid_t putter = spawn_late_putter(name, 1000);
	SET_BAD(procs_count, UINT64_C(1) << 40);
	run_victim(name, false, blocked_get);
	reap_ok(putter);
}

static pid_t holder_pid;

/* The holder of the one sample dies after the rewrite: the victim's sweep gives it back. */
static int reclaim_after_death(struct cistern *c, struct cistern_hdr *raw)
{
	rewrite(raw);
	kill(holder_pid, SIGKILL);
	char buf[64];
	if (cistern_get(c, buf, sizeof(buf), NULL, 10000) != 1)
		return 1;
	if (buf[0] != 'a')
		return 2;
	struct cistern_stats st;
	if (cistern_stats_get(c, &st) != 0 || st.redeliveries != 1)
		return 3;
	return 0;
}

Test(hostile_after_attach, a_dead_holder_is_reclaimed_with_procs_count_rewritten, .timeout = 60)
{
	struct cistern *keep;
	const char *name = victim_segment("h-aa-rcl", &fifo8, &keep);
	cr_assert_eq(cistern_put(keep, "a", 1, NULL, 0), 0);
	holder_pid = spawn_holder(name, HOLD_SAMPLE);
	cr_assert_gt(holder_pid, 0);
	SET_BAD(procs_count, UINT64_C(1) << 40);
	run_victim(name, false, reclaim_after_death);
	waitpid(holder_pid, NULL, 0);
}

/* What the inspection calls of a read-only handle answer after the rewrite. */
static int inspect_calls(struct cistern *c, struct cistern_hdr *raw)
{
	rewrite(raw);
	struct cistern_proc_info info[4];
	if (cistern_procs_get(c, info, 4) != 1)
		return 1;
	struct cistern_stats st;
	if (cistern_stats_get(c, &st) != 0 || st.puts != 1)
		return 2;
	struct cistern_occupancy occ;
	if (cistern_occupancy_get(c, &occ) != 0 || occ.held != 1)
		return 3;
	return 0;
}

/* A segment holding one sample, its creator attached, inspected by a read-only victim. */
static void inspect_victim(const char *tag)
{
	struct cistern *keep;
	const char *name = victim_segment(tag, &fifo8, &keep);
	cr_assert_eq(cistern_put(keep, "a", 1, NULL, 0), 0);
	run_victim(name, true, inspect_calls);
}

Test(hostile_after_attach, inspection_survives_the_attachment_table_rewritten)
{
	SET_BAD(procs_count, UINT64_C(1) << 40);
	inspect_victim("h-aa-insp1");
	SET_BAD(procs_off, UINT64_C(1) << 50);
	inspect_victim("h-aa-insp2");
}

static const struct cistern_config paired = {.slot_size = 64,
					     .slot_count = 16,
					     .policy = CISTERN_SIM_PAIRED_RESERVOIR,
					     .watermark = 2,
					     .sweep_size = 4,
					     .nb_time_steps = 4};

/* Puts and a pair read of simulation 3, and a put past the real sweep refused. */
static int paired_traffic(struct cistern *c, struct cistern_hdr *raw)
{
	rewrite(raw);
	for (uint32_t t = 0; t < 4; t++) {
		struct cistern_meta m = {.sim_id = 3, .time_step = t};
		if (cistern_put(c, &t, sizeof(t), &m, 0) != 0)
			return 1;
	}
	struct cistern_meta far = {.sim_id = 1000, .time_step = 0};
	if (cistern_put(c, "x", 1, &far, 0) != -ERANGE)
		return 2;
	struct cistern_sample pair[2];
	if (cistern_acquire_pair(c, pair, 0) != 0)
		return 3;
	if (pair[0].meta.sim_id != 3 || pair[1].meta.time_step != pair[0].meta.time_step + 1)
		return 4;
	if (cistern_release_pair(c, pair) != 0)
		return 5;
	return 0;
}

Test(hostile_after_attach, sim_paired_index_bounds_rewritten_after_attach_are_not_read)
{
	const char *name = victim_segment("h-aa-nts", &paired, NULL);
	SET_BAD(nb_time_steps, UINT32_C(1) << 31);
	run_victim(name, false, paired_traffic);
	name = victim_segment("h-aa-sws", &paired, NULL);
	SET_BAD(sweep_size, UINT32_MAX);
	run_victim(name, false, paired_traffic);
	name = victim_segment("h-aa-ixo", &paired, NULL);
	SET_BAD(index_off, UINT64_C(1) << 50);
	run_victim(name, false, paired_traffic);
}

/* Every config field of the header rewritten: the attached handle goes on as created. */
static int config_unchanged(struct cistern *c, struct cistern_hdr *raw)
{
	struct cistern_config before;
	cistern_config_get(c, &before);
	raw->policy = CISTERN_FIRO;
	raw->flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER | CISTERN_LOSSY;
	raw->watermark = UINT64_MAX;
	raw->pseudo_epochs = 0;
	raw->batch_size = UINT32_MAX;
	raw->expected_producers = 7;
	raw->reads_per_put = -1.0;
	raw->slot_size = 1;
	raw->slot_count = UINT64_MAX;
	raw->id_base = UINT64_C(1) << 40;
	struct cistern_config after;
	cistern_config_get(c, &after);
	if (memcmp(&before, &after, sizeof(before)) != 0)
		return 1;
	struct cistern_meta m = {0};
	if (cistern_put(c, "abc", 3, &m, 0) != 0 || m.sample_id != 0)
		return 2;
	char buf[64];
	if (cistern_get(c, buf, sizeof(buf), &m, 0) != 3 || m.sample_id != 0)
		return 3;
	if (cistern_producer_done(c) != -EINVAL)
		return 4;
	return 0;
}

Test(hostile_after_attach, config_fields_rewritten_after_attach_change_nothing)
{
	const char *name = victim_segment("h-aa-cfg", &fifo8, NULL);
	run_victim(name, false, config_unchanged);
}

/* The automatic producer role's holder set to an owner past the table. */
static int auto_holder_past_table(struct cistern *c, struct cistern_hdr *raw)
{
	raw->procs_count = UINT64_C(1) << 40;
	atomic_store(&raw->auto_producer, CISTERN_AUTO_OWNER);
	if (cistern_put(c, "abc", 3, NULL, 0) != -EPROTO)
		return 1;
	return 0;
}

Test(hostile_after_attach, an_automatic_role_holder_past_the_table_is_eproto)
{
	const char *name = victim_segment("h-aa-auto", &fifo8, NULL);
	run_victim(name, false, auto_holder_past_table);
}

/* The single reader role held by an owner past the table. */
static int sole_holder_past_table(struct cistern *c, struct cistern_hdr *raw)
{
	atomic_store(&raw->sole_reader, CISTERN_PROCS_MAX + 1);
	char buf[64];
	if (cistern_get(c, buf, sizeof(buf), NULL, 0) != -EPROTO)
		return 1;
	return 0;
}

Test(hostile_after_attach, a_single_role_holder_past_the_table_is_eproto)
{
	struct cistern_config cfg = fifo8;
	cfg.flags = CISTERN_SINGLE_READER;
	const char *name = victim_segment("h-aa-sole", &cfg, NULL);
	run_victim(name, false, sole_holder_past_table);
}

/*
 * A one-slot SimPairedReservoir, where every put lands in slot 0 (evicting
 * the lone sample before it, an orphan), while that slot's simulation id is
 * rewritten, far past the sweep, at arbitrary moments of the victim's own
 * calls: by a timer signal's handler, through the intruder's mapping, so
 * that the writes land inside the library's commits however the processes
 * of a loaded machine are scheduled. The index entries the library then
 * skips may leave a stale pair that keeps a put out (-EAGAIN): damage, not
 * a crash.
 */
static _Atomic uint32_t *scribbled;

static void scribble(int sig)
{
	(void)sig;
	atomic_store_explicit(scribbled, UINT32_C(0x7fffffff), memory_order_relaxed);
}

static int puts_under_scribbling(struct cistern *c, struct cistern_hdr *raw)
{
	scribbled = (_Atomic uint32_t *)&raw_meta(raw, 0)->sim_id;
	struct sigaction sa = {.sa_handler = scribble, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) != 0)
		return 3;
	struct itimerval every = {{0, 20}, {0, 20}};
	if (setitimer(ITIMER_REAL, &every, NULL) != 0)
		return 4;
	uint64_t stored = 0;
	double end = mono_now() + 1.0;
	int bad = 0;
	for (uint32_t i = 0; mono_now() < end; i++) {
		struct cistern_meta m = {.sim_id = 0, .time_step = i % 2};
		int r = cistern_put(c, &i, sizeof(i), &m, 0);
		if (r != 0 && r != -EAGAIN) {
			bad = 1;
			break;
		}
		stored += r == 0;
	}
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, NULL);
	if (bad)
		return bad;
	return stored > 0 ? 0 : 2;
}

Test(hostile_after_attach, sample_keys_rewritten_during_commits_are_never_followed, .timeout = 60)
{
	struct cistern_config cfg = {.slot_size = 16,
				     .slot_count = 1,
				     .policy = CISTERN_SIM_PAIRED_RESERVOIR,
				     .watermark = 1,
				     .sweep_size = 1,
				     .nb_time_steps = 2};
	const char *name = victim_segment("h-aa-scrib", &cfg, NULL);
	run_victim(name, false, puts_under_scribbling);
}
