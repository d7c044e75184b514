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

#include "helpers.h"
#include "internal.h"

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

/* A real, detached segment; its header is copied to *h if h is not NULL. */
static void real_segment(const char *tag, char *name, size_t len, struct cistern_hdr *h)
{
	snprintf(name, len, "t-%s-%d", tag, (int)getpid());
	cistern_unlink(name);
	struct cistern_config cfg = {.slot_size = 100, .slot_count = 8};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	if (h)
		memcpy(h, c->hdr, sizeof(*h));
	cr_assert_eq(cistern_detach(c), 0);
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

/* An shm object under cistern's prefix holding exactly `len` bytes of `data`. */
static void raw_object(const char *tag, char *name, size_t namelen, const void *data, size_t len)
{
	snprintf(name, namelen, "t-%s-%d", tag, (int)getpid());
	cistern_unlink(name);
	char shm[96];
	snprintf(shm, sizeof(shm), "/cistern.%s", name);
	int fd = shm_open(shm, O_RDWR | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0);
	if (len)
		cr_assert_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
}

/*
 * Change one header field of a fresh segment and return what attach says.
 * The field is given by offset and width so one helper serves them all.
 */
static int attach_with(const char *tag, size_t off, size_t width, uint64_t value)
{
	char name[64];
	struct cistern_hdr h;
	real_segment(tag, name, sizeof(name), &h);
	if (width == sizeof(uint32_t)) {
		uint32_t v = (uint32_t)value;
		memcpy((char *)&h + off, &v, sizeof(v));
	} else {
		cr_assert_eq(width, sizeof(uint64_t));
		memcpy((char *)&h + off, &value, sizeof(value));
	}
	write_header(name, &h);
	int r = attach_result(name);
	cistern_unlink(name);
	return r;
}

#define ATTACH_WITH(tag, field, value)                                                    \
	attach_with((tag), offsetof(struct cistern_hdr, field),                            \
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
	char name[64];
	raw_object("h-random", name, sizeof(name), junk, sizeof(junk));
	cr_assert_eq(attach_result(name), -EPROTO);
	cistern_unlink(name);
}

Test(hostile_objects, a_zero_length_object_is_eagain_within_a_bounded_time)
{
	/* Indistinguishable from a segment between shm_open and ftruncate: retried, then EAGAIN. */
	char name[64];
	raw_object("h-empty", name, sizeof(name), NULL, 0);
	double t0 = mono_now();
	cr_assert_eq(attach_result(name), -EAGAIN);
	cr_assert_lt(mono_now() - t0, 5.0, "attach must not wait for ever");
	cistern_unlink(name);
}

Test(hostile_objects, a_few_bytes_are_eproto)
{
	char name[64];
	raw_object("h-few", name, sizeof(name), "CIST", 4);
	cr_assert_eq(attach_result(name), -EPROTO);
	cistern_unlink(name);
}

Test(hostile_objects, a_header_without_its_body_is_eproto)
{
	char name[64];
	struct cistern_hdr h;
	real_segment("h-hdronly", name, sizeof(name), &h);
	cistern_unlink(name);
	raw_object("h-hdronly", name, sizeof(name), &h, sizeof(h));
	cr_assert_eq(attach_result(name), -EPROTO);
	cistern_unlink(name);
}

/* ---- magic, ABI and layout ------------------------------------------------ */

Test(hostile_header, a_wrong_magic_is_eproto)
{
	char name[64];
	struct cistern_hdr h;
	real_segment("h-magic", name, sizeof(name), &h);
	memcpy(h.magic, "CISTERM", 8);
	write_header(name, &h);
	cr_assert_eq(attach_result(name), -EPROTO);
	cistern_unlink(name);
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
	char name[64];
	struct cistern_hdr h;
	real_segment("h-short", name, sizeof(name), &h);
	truncate_to(name, (off_t)h.total_size - 4096);
	cr_assert_eq(attach_result(name), -EPROTO);
	truncate_to(name, (off_t)sizeof(h) + 1);
	cr_assert_eq(attach_result(name), -EPROTO);
	cistern_unlink(name);
}

Test(hostile_sizes, attach_refuses_a_segment_truncated_after_others_attached)
{
	char name[64];
	snprintf(name, sizeof(name), "t-h-trunc-%d", (int)getpid());
	struct cistern_config cfg = {.slot_size = 100, .slot_count = 8};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	truncate_to(name, 4096);
	cr_assert_eq(attach_result(name), -EPROTO);
	/* The handle that was attached can still let go without touching lost pages. */
	cr_assert_eq(cistern_detach(c), 0);
	cistern_unlink(name);
}

Test(hostile_sizes, an_attached_process_touching_truncated_pages_gets_sigbus)
{
	/*
	 * Documented behaviour, not a wish: shrinking a mapped object removes
	 * its pages, and the kernel answers an access with SIGBUS. The library
	 * does not install signal handlers; only a process with write access to
	 * the object (same user, mode 0600) can do this.
	 */
	char name[64];
	snprintf(name, sizeof(name), "t-h-sigbus-%d", (int)getpid());
	struct cistern_config cfg = {.slot_size = 100, .slot_count = 8};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
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
	cr_assert_eq(cistern_detach(c), 0, "detach of the truncated segment must not fault");
	cistern_unlink(name);
}

Test(hostile_sizes, slot_count_times_stride_beyond_the_arena_limit_is_eproto)
{
	char name[64];
	struct cistern_hdr h;
	real_segment("h-arena", name, sizeof(name), &h);
	/* Each within its own limit, the product (2^58) is not; offsets made to match. */
	h.slot_size = CISTERN_SLOT_SIZE_MAX;
	h.slot_count = CISTERN_SLOT_COUNT_MAX;
	h.slot_stride = CISTERN_SLOT_SIZE_MAX;
	h.arena_off = h.meta_off + CISTERN_SLOT_COUNT_MAX * sizeof(struct cistern_slotmeta);
	h.total_size = h.arena_off + (CISTERN_SLOT_SIZE_MAX << 28);
	write_header(name, &h);
	cr_assert_eq(attach_result(name), -EPROTO);
	cistern_unlink(name);
}

Test(hostile_sizes, a_slot_count_whose_product_wraps_is_eproto)
{
	cr_assert_eq(ATTACH_WITH("h-wrap", slot_count, UINT64_C(1) << 58), -EPROTO);
	cr_assert_eq(ATTACH_WITH("h-wrap2", slot_size, UINT64_MAX - 10), -EPROTO);
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
	char name[64];
	struct cistern_hdr h;
	real_segment("h-nonul", name, sizeof(name), &h);
	memset(h.name, 'n', sizeof(h.name));
	write_header(name, &h);
	cr_assert_eq(attach_result(name), -EPROTO);
	cistern_unlink(name);
}

Test(hostile_header, validation_refuses_a_short_buffer)
{
	struct cistern_hdr h;
	char name[64];
	real_segment("h-vshort", name, sizeof(name), &h);
	cistern_unlink(name);
	cr_assert_eq(cistern__validate_header(&h, sizeof(h), h.total_size), 0, "the control passes");
	cr_assert_eq(cistern__validate_header(&h, sizeof(h) - 1, h.total_size), -EPROTO);
	cr_assert_eq(cistern__validate_header(&h, sizeof(h), h.total_size - 1), -EPROTO);
}

/* ---- create parameters ----------------------------------------------------- */

Test(hostile_create, zero_slot_size_and_count_mean_the_documented_defaults)
{
	char name[64];
	TEST_NAME(name, "h-zero");
	struct cistern_config cfg = {.slot_size = 0, .slot_count = 0};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	struct cistern_config got;
	cistern_config_get(c, &got);
	cr_assert_eq(got.slot_size, CISTERN_DEFAULT_SLOT_SIZE);
	cr_assert_eq(got.slot_count, CISTERN_DEFAULT_SLOT_COUNT);
	cistern_detach(c);
	cistern_unlink(name);
}

Test(hostile_create, sizes_beyond_the_limits_are_einval_and_leave_nothing)
{
	char name[64];
	TEST_NAME(name, "h-limits");
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
	char name[64];
	TEST_NAME(name, "h-big");
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 4};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
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
	cistern_detach(c);
	cistern_unlink(name);
}

Test(hostile_payload, a_damaged_length_is_eproto_not_a_read_past_the_slot)
{
	char name[64];
	TEST_NAME(name, "h-len");
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 4};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	cr_assert_eq(cistern_put(c, "abc", 3, NULL, 0), 0);
	cistern__slotmeta(c, 0)->len = UINT64_C(1) << 40;
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EPROTO);
	cr_assert_eq(cistern_put(c, "d", 1, NULL, 0), 0);
	char buf[64];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1, "the segment goes on");
	cistern_detach(c);
	cistern_unlink(name);
}

/* A length past the slot but within the caller's buffer: a get would copy past the slot. */
static void damaged_length_within_cap(uint32_t flags, uint64_t slot_size, uint64_t bad_len)
{
	char name[64];
	TEST_NAME(name, "h-len2");
	struct cistern_config cfg = {.slot_size = slot_size, .slot_count = 4, .flags = flags};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
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
	cistern_detach(c);
	cistern_unlink(name);
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
	char name[64];
	TEST_NAME(name, "h-own");
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 4};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	/* Slot 0 serves position 0 and is FREE (state 0), but names owner 7. */
	atomic_store(&cistern__slotmeta(c, 0)->word, (uint64_t)7);
	cr_assert_eq(cistern_put(c, "abc", 3, NULL, 0), -EPROTO);
	cr_assert_eq(cistern_put(c, "abc", 3, NULL, 100), -EPROTO, "a blocking put does not spin on it");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 0, "nothing was stored");
	cistern_detach(c);
	cistern_unlink(name);
}

Test(hostile_payload, a_committed_slot_word_naming_an_owner_is_eproto_for_readers)
{
	char name[64];
	TEST_NAME(name, "h-cown");
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 4};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	cr_assert_eq(cistern_put(c, "abc", 3, NULL, 0), 0);
	/* Position 0, COMMITTED (state 2), but naming owner 5. */
	atomic_store(&cistern__slotmeta(c, 0)->word, (uint64_t)(2u << 12 | 5u));
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), -EPROTO);
	cr_assert_eq(cistern_acquire(c, &s, 100), -EPROTO, "a blocking acquire does not spin on it");
	cistern_detach(c);
	cistern_unlink(name);
}

Test(hostile_handles, release_of_a_sample_never_acquired_is_einval)
{
	char name[64];
	TEST_NAME(name, "h-rel0");
	struct cistern *c;
	cr_assert_eq(cistern_create(name, NULL, &c), 0);
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
	cistern_detach(c);
	cistern_unlink(name);
}

Test(hostile_handles, release_twice_is_einval_and_frees_once)
{
	char name[64];
	TEST_NAME(name, "h-rel2");
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 2};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
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
	cistern_detach(c);
	cistern_unlink(name);
}

Test(hostile_handles, a_forged_slot_cannot_be_committed_or_aborted)
{
	char name[64];
	TEST_NAME(name, "h-slot");
	struct cistern *c;
	cr_assert_eq(cistern_create(name, NULL, &c), 0);
	struct cistern_slot slot = {.live_ = 1, .index_ = 0, .pos_ = 0};
	cr_assert_eq(cistern_commit(c, &slot, 1, NULL), -EINVAL);
	cr_assert_eq(cistern_abort(c, &slot), -EINVAL);
	slot.index_ = UINT32_MAX;
	cr_assert_eq(cistern_commit(c, &slot, 1, NULL), -EINVAL);
	cistern_detach(c);
	cistern_unlink(name);
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
	char name[64];
	TEST_NAME(name, "h-user");
	struct cistern *c;
	cr_assert_eq(cistern_create(name, NULL, &c), 0);
	cr_assert_eq(as_nobody(name, attach_code), 1, "attach by nobody was not -EACCES");
	cistern_detach(c);
	cistern_unlink(name);
}

Test(hostile_user, another_user_can_attach_when_the_mode_allows_it)
{
	/* The control for the test above: the refusal comes from the mode, not the setup. */
	char name[64];
	TEST_NAME(name, "h-user666");
	struct cistern_config cfg = {.mode = 0666};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	cr_assert_eq(as_nobody(name, attach_code), 0);
	cistern_detach(c);
	cistern_unlink(name);
}

Test(hostile_user, another_user_cannot_unlink_a_segment)
{
	char name[64];
	TEST_NAME(name, "h-unlink");
	struct cistern *c;
	cr_assert_eq(cistern_create(name, NULL, &c), 0);
	cr_assert_eq(as_nobody(name, unlink_code), 1, "unlink by nobody was not -EACCES");
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cistern_detach(c);
	cr_assert_eq(cistern_unlink(name), 0, "the segment was still there");
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
		atomic_store(&cistern__slotmeta(c, i)->word, ((UINT64_C(1) << 40) + i) << 16 | (UINT64_C(1) << 12));
}

Test(hostile_ring, slot_words_far_ahead_of_the_indices_are_eproto_not_a_spin, .timeout = 20)
{
	char name[64];
	TEST_NAME(name, "h-ring");
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 4};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	stamp_far_ahead(c);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), -EPROTO);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 1000), -EPROTO, "no waiting either");
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EPROTO);
	cistern_detach(c);
	cistern_unlink(name);
}

Test(hostile_ring, fifo_evict_slot_words_far_ahead_of_the_tail_are_eproto_not_a_spin,
     .timeout = 20)
{
	char name[64];
	TEST_NAME(name, "h-ering");
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 4,
				     .policy = CISTERN_FIFO_EVICT_RESERVOIR, .watermark = 1};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	stamp_far_ahead(c); /* in the ring of FIFOEvictReservoir */
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), -EPROTO);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 1000), -EPROTO, "no waiting either");
	cistern_detach(c);
	cistern_unlink(name);
}
