/* SPDX-License-Identifier: MIT */
/*
 * test_schema.c - samples that describe themselves: the schema's text form,
 * its layout, its place in the header (kept, checked at attach), and dumps
 * that carry it.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>

#include "helpers.h"
#include "sys/crc32c.h"
#include "admin/dump_format.h"
#include <cistern/admin.h>

#define RL "obs:float32[84,84];action:int64[];reward:float32[];next_obs:float32[84,84]"

/*
 * Every test's segments (sch_name()) and dump files (sch_dump_path()) are the
 * fixture's to remove, pass or fail.
 */
TestSuite(schema_text, .fini = seg_fini);
TestSuite(schema_bad, .fini = seg_fini);
TestSuite(schema_header, .fini = seg_fini);
TestSuite(schema_dump, .fini = seg_fini);
TestSuite(schema_put, .fini = seg_fini);

/* seg_name("sch-<tag>"): this program's segment names. */
static const char *sch_name(const char *tag)
{
	char sch_tag[64];
	snprintf(sch_tag, sizeof(sch_tag), "sch-%s", tag);
	return seg_name(sch_tag);
}

/* seg_dump_path("sch-<tag>"). */
static const char *sch_dump_path(const char *tag)
{
	char sch_tag[64];
	snprintf(sch_tag, sizeof(sch_tag), "sch-%s", tag);
	return seg_dump_path(sch_tag);
}

static struct cistern *make(const char *tag, uint64_t slot_size, const char *schema)
{
	const char *name = sch_name(tag);
	struct cistern_config cfg = {.slot_size = slot_size, .slot_count = 8, .schema = schema};
	struct cistern *c = NULL;
	int r = cistern_create(name, &cfg, &c);
	cr_assert_eq(r, 0, "create %s: %s (%s)", name, cistern_strerror(r),
		     cistern_config_problem(&cfg));
	return seg_keep(name, c);
}

/* ---- the text form and the layout ----------------------------------------- */

Test(schema_text, an_rl_transition_is_laid_out_as_a_c_struct)
{
	struct {
		float obs[84][84];
		int64_t action;
		float reward;
		float next_obs[84][84];
	} t;
	struct cistern_field f[4];
	uint64_t size = 0;
	cr_assert_eq(cistern_schema_parse(RL, f, 4, &size), 4);
	cr_assert_str_eq(f[0].name, "obs");
	cr_assert_eq(f[0].dtype, CISTERN_FLOAT32);
	cr_assert_eq(f[0].ndim, 2);
	cr_assert_eq(f[0].shape[0], 84);
	cr_assert_eq(f[0].shape[1], 84);
	cr_assert_eq(f[0].shape[2], 0);
	cr_assert_eq(f[1].dtype, CISTERN_INT64);
	cr_assert_eq(f[1].ndim, 0);
	cr_assert_eq(f[1].itemsize, 8);
	cr_assert_eq(f[1].size, 8);
	cr_assert_eq(f[0].offset, offsetof(__typeof__(t), obs));
	cr_assert_eq(f[1].offset, offsetof(__typeof__(t), action));
	cr_assert_eq(f[2].offset, offsetof(__typeof__(t), reward));
	cr_assert_eq(f[3].offset, offsetof(__typeof__(t), next_obs));
	cr_assert_eq(f[3].size, sizeof(t.next_obs));
	cr_assert_eq(size, sizeof(t), "end padding to the largest item, as sizeof does");
}

Test(schema_text, spaces_and_scalars_without_brackets_are_accepted_and_made_canonical)
{
	char buf[CISTERN_SCHEMA_MAX];
	struct cistern *c = make("canon", 0,
				 " obs : float32 [ 084 , 84 ] ;\n action:int64; done: bool[]\t");
	cr_assert_eq(cistern_schema_get(c, buf, sizeof(buf)),
		     (ssize_t)strlen("obs:float32[84,84];action:int64[];done:bool[]"));
	cr_assert_str_eq(buf, "obs:float32[84,84];action:int64[];done:bool[]");
	struct cistern_config cfg;
	cr_assert_eq(cistern_config_get(c, &cfg), 0);
	cr_assert_str_eq(cfg.schema, buf, "the config holds the canonical text too");
}

Test(schema_text, another_handle_reads_the_same_schema_and_fields)
{
	char buf[CISTERN_SCHEMA_MAX];
	struct cistern *c = make("other", 0, RL);
	const char *name = seg_name_of(c);
	struct cistern *r, *ro;
	cr_assert_eq(cistern_attach(name, &r), 0);
	cr_assert_eq(cistern_open_readonly(name, &ro), 0);
	for (int k = 0; k < 2; k++) {
		struct cistern *h = k ? ro : r;
		cr_assert_eq(cistern_schema_get(h, buf, sizeof(buf)), (ssize_t)strlen(RL));
		cr_assert_str_eq(buf, RL);
		struct cistern_field f[4], g[4];
		uint64_t size, psize;
		cr_assert_eq(cistern_schema_fields(h, f, 4, &size), 4);
		cr_assert_eq(cistern_schema_parse(RL, g, 4, &psize), 4);
		cr_assert_eq(memcmp(f, g, sizeof(f)), 0);
		cr_assert_eq(size, psize);
	}
	cistern_detach(ro);
	cistern_detach(r);
}

Test(schema_text, slot_size_zero_means_the_sample_size)
{
	struct cistern *c = make("slot0", 0, RL);
	struct cistern_config cfg;
	uint64_t size;
	cistern_config_get(c, &cfg);
	cr_assert_eq(cistern_schema_parse(RL, NULL, 0, &size), 4);
	cr_assert_eq(cfg.slot_size, size);
}

Test(schema_text, a_segment_without_a_schema_has_none)
{
	char buf[8] = "x";
	struct cistern *c = make("none", 64, "");
	struct cistern_config cfg;
	cistern_config_get(c, &cfg);
	cr_assert_null(cfg.schema, "\"\" is no schema, as NULL is");
	cr_assert_eq(cistern_schema_get(c, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "");
	cr_assert_eq(cistern_schema_get(c, NULL, 0), 0);
	uint64_t size = 1;
	cr_assert_eq(cistern_schema_fields(c, NULL, 0, &size), 0);
	cr_assert_eq(size, 0);
	cr_assert_eq(cfg.slot_size, 64);
}

Test(schema_text, a_buffer_too_small_for_the_text_is_erange)
{
	char buf[CISTERN_SCHEMA_MAX];
	struct cistern *c = make("erange", 4096, "a:int8");
	cr_assert_eq(cistern_schema_get(c, buf, strlen("a:int8[]")), -ERANGE,
		     "no room for the NUL");
	cr_assert_eq(cistern_schema_get(c, NULL, 0), -ERANGE);
	cr_assert_eq(cistern_schema_get(c, buf, strlen("a:int8[]") + 1), 8);
	cr_assert_eq(cistern_schema_get(NULL, buf, sizeof(buf)), -EINVAL);
}

Test(schema_text, the_field_count_is_given_beyond_the_room_for_fields)
{
	struct cistern_field f[2];
	memset(f, 0x55, sizeof(f));
	cr_assert_eq(cistern_schema_parse("a:int8;b:int16;c:int32", f, 1, NULL), 3);
	cr_assert_str_eq(f[0].name, "a");
	cr_assert_eq((unsigned char)f[1].name[0], 0x55, "nothing written past cap");
	cr_assert_eq(cistern_schema_parse("", NULL, 0, NULL), 0);
	cr_assert_eq(cistern_schema_parse(NULL, NULL, 0, NULL), -EINVAL);
	cr_assert_eq(cistern_schema_parse("a:int8", NULL, 1, NULL), -EINVAL);
}

Test(schema_text, every_dtype_has_its_name_and_size)
{
	static const char *const names[CISTERN_DTYPE_COUNT] = {
		"int8",   "int16",  "int32",   "int64",   "uint8",   "uint16",
		"uint32", "uint64", "float16", "float32", "float64", "bool"};
	static const uint32_t sizes[CISTERN_DTYPE_COUNT] = {1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 1};
	for (int i = 0; i < CISTERN_DTYPE_COUNT; i++) {
		cr_assert_str_eq(cistern_dtype_name((enum cistern_dtype)i), names[i]);
		char text[32];
		snprintf(text, sizeof(text), "x:%s[3]", names[i]);
		struct cistern_field f;
		cr_assert_eq(cistern_schema_parse(text, &f, 1, NULL), 1, "%s", text);
		cr_assert_eq(f.dtype, (enum cistern_dtype)i);
		cr_assert_eq(f.itemsize, sizes[i]);
		cr_assert_eq(f.size, 3 * sizes[i]);
	}
	cr_assert_null(cistern_dtype_name(CISTERN_DTYPE_COUNT));
	cr_assert_null(cistern_dtype_name((enum cistern_dtype) - 1));
}

/* ---- bad schemas ------------------------------------------------------------ */

/*
 * Every bad schema is refused by create and named by cistern_config_problem(),
 * with the field that is wrong, and parse refuses it too.
 */
Test(schema_bad, each_is_refused_with_the_field_named)
{
	static const struct {
		const char *schema, *says;
	} bad[] = {
		{"obs:float33[4]", "'obs': unknown dtype 'float33'"},
		{"obs:float32[4];obs:int8", "'obs' appears twice"},
		{"obs float32[4]", "'obs': expected ':'"},
		{"obs:float32[4,0]", "'obs': a dimension of 0"},
		{"obs:float32[4,-1]", "'obs': a dimension is a number"},
		{"obs:float32[4;a:int8", "'obs': expected ',' or ']'"},
		{"obs:float32[1,1,1,1,1,1,1,1,1]", "'obs' has more than 8 dimensions"},
		{"obs:float32[1073741824]", "'obs' is larger than CISTERN_SLOT_SIZE_MAX"},
		{"obs:uint8[99999999999999999999999]", "'obs' is larger"},
		{"a:uint8[1073741824];b:uint8", "up to 'b' are larger"},
		{"obs:float32[4] action:int64", "expected ';' after field 'obs'"},
		{"obs:float32[4];", "field 2 is empty"},
		{";obs:float32[4]", "field 1 is empty"},
		{"   ", "field 1 is empty"},
		{"1obs:int8", "'1obs' starts with a digit"},
		{"-obs:int8", "field 1: a name starts with a letter or '_'"},
		{"o-bs:int8", "field 1: a name has only letters, digits and '_', not '-'"},
		{"o\033[2J:int8", "field 1: a name has only letters, digits and '_', not the byte "
				  "0x1b"},
		{"\033]0;x\a:int8", "field 1: a name starts with a letter or '_' and has only "
				    "letters, digits and '_', not the byte 0x1b"},
		{"a:int8;x234567890123456789012345678901234567890123456789012345678901234:int8",
		 "field 2: the name"},
	};
	const char *name = sch_name("bad");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cistern_config cfg = {.schema = bad[i].schema};
		const char *why = cistern_config_problem(&cfg);
		cr_assert_not_null(why, "case %zu (%s) named no problem", i, bad[i].schema);
		cr_assert(strstr(why, bad[i].says) && strncmp(why, "schema", 6) == 0,
			  "case %zu: '%s' does not say %s", i, why, bad[i].says);
		struct cistern *c;
		cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL, "case %zu", i);
		cr_assert_eq(cistern_schema_parse(bad[i].schema, NULL, 0, NULL), -EINVAL,
			     "case %zu", i);
	}
	struct cistern *c;
	cr_assert_eq(cistern_attach(name, &c), -ENOENT, "nothing was left behind");
}

/* Say why `schema` is refused, checking that parse refuses it too. */
static const char *problem_of(const char *schema)
{
	struct cistern_config cfg = {.schema = schema};
	const char *why = cistern_config_problem(&cfg);
	cr_assert_not_null(why, "%s was accepted", schema);
	cr_assert_eq(cistern_schema_parse(schema, NULL, 0, NULL), -EINVAL, "%s", schema);
	return why;
}

Test(schema_bad, a_dimension_not_written_in_decimal_is_named_whole)
{
	const char *why = problem_of("a:int8[0x10]");
	cr_assert(strstr(why, "field 'a': a dimension is a decimal number from 1 up, not '0x10'"),
		  "%s", why);
	cr_assert_null(strstr(why, "of 0"), "%s", why);
	why = problem_of("a:int8[2,1.5]");
	cr_assert(strstr(why, "not '1.5'"), "%s", why);
}

Test(schema_bad, a_trailing_comma_in_a_shape_is_refused_naming_what_follows_it)
{
	const char *why = problem_of("a:int8[1,]");
	cr_assert(strstr(why, "field 'a': expected a dimension after ',' in its shape, not ']'"),
		  "%s", why);
	why = problem_of("a:int8[1, ];b:int8");
	cr_assert(strstr(why, "field 'a': expected a dimension after ','"), "%s", why);
}

Test(schema_bad, a_shape_without_its_closing_bracket_is_refused_saying_so)
{
	cr_assert(strstr(problem_of("a:int8[4"), "field 'a': its shape has no closing ']'"));
	cr_assert(strstr(problem_of("a:int8[4,"), "field 'a': its shape has no closing ']'"));
}

Test(schema_bad, a_text_longer_than_the_header_holds_is_refused)
{
	/* 1023 bytes would fit; "[]" added to each of these scalars would not. */
	char text[CISTERN_SCHEMA_MAX + 8];
	size_t n = 0;
	for (int i = 0; n + 16 < CISTERN_SCHEMA_MAX - 1; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%sf%03d:int8", i ? ";" : "", i);
	cr_assert_lt(n, CISTERN_SCHEMA_MAX);
	struct cistern_config cfg = {.schema = text};
	const char *why = cistern_config_problem(&cfg);
	cr_assert_not_null(why);
	cr_assert(strstr(why, "once written as name:dtype[shape]"), "%s", why);
	memset(text, 'a', CISTERN_SCHEMA_MAX);
	text[CISTERN_SCHEMA_MAX] = '\0';
	why = cistern_config_problem(&cfg);
	cr_assert_not_null(why);
	cr_assert(strstr(why, "schema is longer than 1023 bytes"), "%s", why);
}

Test(schema_bad, a_sample_larger_than_slot_size_is_refused)
{
	struct cistern_config cfg = {.slot_size = 4096, .schema = "obs:float32[32,32];x:int8"};
	const char *why = cistern_config_problem(&cfg);
	cr_assert_not_null(why);
	cr_assert(strstr(why, "schema needs 4100 bytes a sample, more than slot_size (4096)"), "%s",
		  why);
	const char *name = sch_name("big");
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), -EINVAL);
	cfg.slot_size = 4100;
	cr_assert_null(cistern_config_problem(&cfg), "exactly a slot is fine");
}

/* ---- puts held to the schema's length -------------------------------------- */

/* 16 bytes a sample, in slots of 64: a misfit still fits the slot. */
#define PUT_SCHEMA "a:float32[4]"
#define PUT_SIZE 16

enum put_mode { PUT_SOLE, PUT_AUTO, PUT_SHARED, PUT_RESERVOIR };

/*
 * A segment of PUT_SCHEMA whose handle puts as `mode` says: the holder of the
 * FIFO's producer role by flag or automatically (the one-step put), one of two
 * producers sharing it, or a reservoir's producer. *other is the second
 * producer (PUT_SHARED) or NULL.
 */
static struct cistern *make_put(const char *tag, enum put_mode mode, struct cistern **other)
{
	char t[32];
	snprintf(t, sizeof(t), "%s-%d", tag, (int)mode);
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 8, .schema = PUT_SCHEMA};
	if (mode == PUT_SOLE)
		cfg.flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER;
	if (mode == PUT_RESERVOIR) {
		cfg.policy = CISTERN_RESERVOIR;
		cfg.watermark = 1;
	}
	const char *name = sch_name(t);
	struct cistern *c = NULL;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	seg_keep(name, c);
	*other = NULL;
	if (mode == PUT_SHARED) {
		char b[PUT_SIZE] = {0};
		cr_assert_eq(cistern_attach(name, other), 0);
		cr_assert_eq(cistern_put(*other, b, PUT_SIZE, NULL, 0), 0);
		cr_assert_eq(cistern_get(c, b, sizeof(b), NULL, 0), PUT_SIZE);
	}
	return c;
}

/* The segment's count of puts (a refused put counts none). */
static uint64_t puts_of(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st.puts;
}

static void a_put_of_another_length_is_emsgsize(enum put_mode mode)
{
	struct cistern *other, *c = make_put("put-len", mode, &other);
	char b[64] = {0};
	size_t bad[] = {0, 1, PUT_SIZE - 1, PUT_SIZE + 1, 64};
	uint64_t puts = puts_of(c);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(cistern_put(c, b, bad[i], NULL, 0), -EMSGSIZE, "%zu bytes", bad[i]);
	cr_assert_eq(puts_of(c), puts, "nothing was put");
	cr_assert_eq(cistern_get(c, b, sizeof(b), NULL, 0), -EAGAIN, "nothing to read");
	cr_assert_eq(cistern_put(c, b, PUT_SIZE, NULL, 0), 0, "the sample size is put");
	cr_assert_eq(cistern_get(c, b, sizeof(b), NULL, 0), PUT_SIZE);
	if (other)
		cistern_detach(other);
}

Test(schema_put, a_put_of_another_length_is_emsgsize_for_the_sole_producer)
{
	a_put_of_another_length_is_emsgsize(PUT_SOLE);
}

Test(schema_put, a_put_of_another_length_is_emsgsize_for_the_automatic_producer)
{
	a_put_of_another_length_is_emsgsize(PUT_AUTO);
}

Test(schema_put, a_put_of_another_length_is_emsgsize_for_a_shared_producer)
{
	a_put_of_another_length_is_emsgsize(PUT_SHARED);
}

Test(schema_put, a_put_of_another_length_is_emsgsize_in_a_reservoir)
{
	a_put_of_another_length_is_emsgsize(PUT_RESERVOIR);
}

Test(schema_put, a_prioritized_put_of_another_length_is_emsgsize)
{
	struct cistern_config cfg = {.slot_size = 64,
				     .slot_count = 8,
				     .schema = PUT_SCHEMA,
				     .policy = CISTERN_PRIORITIZED,
				     .watermark = 1,
				     .alpha = 1.0};
	const char *name = sch_name("put-prio");
	struct cistern *c = NULL;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0, "%s", cistern_config_problem(&cfg));
	seg_keep(name, c);
	char b[64] = {0};
	uint64_t puts = puts_of(c);
	cr_assert_eq(cistern_put_prioritized(c, b, PUT_SIZE - 1, NULL, 1.0, 0), -EMSGSIZE);
	cr_assert_eq(cistern_put_prioritized(c, b, PUT_SIZE + 1, NULL, 1.0, 0), -EMSGSIZE);
	cr_assert_eq(puts_of(c), puts, "nothing was put");
	/* No slot stays reserved by a refusal: all 8 take a sample of the size. */
	for (int i = 0; i < 8; i++)
		cr_assert_eq(cistern_put_prioritized(c, b, PUT_SIZE, NULL, 1.0, 0), 0, "put %d", i);
}

static void a_batch_stops_before_a_misfit(enum put_mode mode)
{
	struct cistern *other, *c = make_put("put-batch", mode, &other);
	char b[4][64] = {{0}};
	size_t len[4] = {PUT_SIZE, PUT_SIZE, PUT_SIZE - 4, PUT_SIZE};
	uint64_t puts = puts_of(c);
	/* The first misfit: nothing of the call is put. */
	cr_assert_eq(cistern_put_batch(c, b[2], 64, 2, len + 2, NULL, 0), -EMSGSIZE);
	/* Lengths from the stride: a stride of another length is refused, one of it put. */
	cr_assert_eq(cistern_put_batch(c, b, 64, 2, NULL, NULL, 0), -EMSGSIZE);
	cr_assert_eq(cistern_put_batch(c, b, 8, 2, NULL, NULL, 0), -EMSGSIZE);
	cr_assert_eq(puts_of(c), puts, "nothing was put");
	/* A misfit third: the first two go in, and the next call reports it. */
	cr_assert_eq(cistern_put_batch(c, b, 64, 4, len, NULL, 0), 2);
	cr_assert_eq(cistern_put_batch(c, b[2], 64, 2, len + 2, NULL, 0), -EMSGSIZE);
	cr_assert_eq(puts_of(c), puts + 2, "the two before the misfit");
	for (int i = 0; i < 2; i++)
		cr_assert_eq(cistern_get(c, b[0], 64, NULL, 0), PUT_SIZE);
	if (other)
		cistern_detach(other);
}

Test(schema_put, a_batch_stops_before_a_misfit_for_the_sole_producer)
{
	a_batch_stops_before_a_misfit(PUT_SOLE);
}

Test(schema_put, a_batch_stops_before_a_misfit_for_the_automatic_producer)
{
	a_batch_stops_before_a_misfit(PUT_AUTO);
}

Test(schema_put, a_batch_stops_before_a_misfit_for_a_shared_producer)
{
	a_batch_stops_before_a_misfit(PUT_SHARED);
}

Test(schema_put, a_batch_stops_before_a_misfit_in_a_reservoir)
{
	a_batch_stops_before_a_misfit(PUT_RESERVOIR);
}

static void a_commit_of_another_length_keeps_the_slot(enum put_mode mode)
{
	struct cistern *other, *c = make_put("put-commit", mode, &other);
	struct cistern_slot slot;
	char b[64];
	cr_assert_eq(cistern_reserve(c, &slot, 0), 0);
	cr_assert_geq(slot.capacity, 64);
	memset(slot.data, 7, PUT_SIZE);
	uint64_t puts = puts_of(c);
	cr_assert_eq(cistern_commit(c, &slot, PUT_SIZE + 8, NULL), -EMSGSIZE);
	cr_assert_eq(cistern_commit(c, &slot, PUT_SIZE - 8, NULL), -EMSGSIZE);
	cr_assert_eq(puts_of(c), puts, "nothing was committed");
	cr_assert_eq(cistern_commit(c, &slot, PUT_SIZE, NULL), 0, "the slot stayed reserved");
	cr_assert_eq(cistern_get(c, b, sizeof(b), NULL, 0), PUT_SIZE);
	cr_assert_eq(b[PUT_SIZE - 1], 7);
	if (other)
		cistern_detach(other);
}

Test(schema_put, a_commit_of_another_length_keeps_the_slot_in_a_fifo)
{
	a_commit_of_another_length_keeps_the_slot(PUT_AUTO);
}

Test(schema_put, a_commit_of_another_length_keeps_the_slot_in_a_reservoir)
{
	a_commit_of_another_length_keeps_the_slot(PUT_RESERVOIR);
}

Test(schema_put, without_a_schema_any_length_up_to_the_slot_is_put)
{
	struct cistern *c = make("put-raw", 64, NULL);
	char b[65] = {0};
	cr_assert_eq(cistern_put(c, b, 0, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, b, 64, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, b, 65, NULL, 0), -EMSGSIZE);
	cr_assert_eq(cistern_get(c, b, sizeof(b), NULL, 0), 0);
	cr_assert_eq(cistern_get(c, b, sizeof(b), NULL, 0), 64);
}

/* ---- the header ------------------------------------------------------------- */

/* A detached segment with a schema, by name, and a copy of its header. */
static const char *real_segment(const char *tag, struct cistern_hdr *h)
{
	struct cistern *c = make(tag, 64, "a:float32[4];b:int64");
	const char *name = seg_name_of(c);
	memcpy(h, c->hdr, sizeof(*h));
	seg_detach(c);
	return name;
}

static int attach_with_schema_bytes(const char *tag, const char *bytes, size_t n)
{
	char path[128];
	struct cistern_hdr h;
	const char *name = real_segment(tag, &h);
	memset(h.schema, 0, sizeof(h.schema));
	memcpy(h.schema, bytes, n);
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	int fd = open(path, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	struct cistern *c = NULL;
	int r = cistern_attach(name, &c);
	if (r == 0)
		cistern_detach(c);
	int ro = cistern_open_readonly(name, &c);
	if (ro == 0)
		cistern_detach(c);
	cr_assert_eq(r, ro, "attach and open_readonly agree");
	return r;
}

Test(schema_header, the_control_attaches)
{
	const char good[] = "a:float32[4];b:int64[]";
	cr_assert_eq(attach_with_schema_bytes("h-ok", good, sizeof(good)), 0);
}

Test(schema_header, a_schema_without_terminator_is_eproto)
{
	char full[CISTERN_SCHEMA_MAX];
	memset(full, 'a', sizeof(full));
	cr_assert_eq(attach_with_schema_bytes("h-nonul", full, sizeof(full)), -EPROTO);
}

Test(schema_header, a_schema_that_does_not_parse_is_eproto)
{
	const char bad[] = "a:float32[4];b:int65[]";
	cr_assert_eq(attach_with_schema_bytes("h-parse", bad, sizeof(bad)), -EPROTO);
}

Test(schema_header, a_schema_larger_than_the_slots_is_eproto)
{
	const char big[] = "a:float32[17]"; /* 68 bytes in 64-byte slots */
	cr_assert_eq(attach_with_schema_bytes("h-big", big, sizeof(big)), -EPROTO);
}

Test(schema_header, the_schema_is_part_of_the_layout_signature)
{
	/* Another build's header differs in size and offsets; the signature says so. */
	cr_assert_eq(offsetof(struct cistern_hdr, schema),
		     offsetof(struct cistern_hdr, id_base) + 8);
	cr_assert_lt(offsetof(struct cistern_hdr, schema), offsetof(struct cistern_hdr, tail),
		     "kept with what is immutable and validated at attach");
}

Test(schema_header, a_listing_leaves_no_pointer_to_a_closed_segment)
{
	struct cistern *c = make("list", 0, RL);
	const char *name = seg_name_of(c);
	struct cistern_segment_info *v;
	int n = cistern_list(&v);
	cr_assert_geq(n, 1);
	int found = 0;
	for (int i = 0; i < n; i++)
		if (strcmp(v[i].name, name) == 0) {
			found = 1;
			cr_assert_eq(v[i].status, 0);
			cr_assert_null(v[i].config.schema);
		}
	cr_assert(found);
	free(v);
}

/* ---- dumps ------------------------------------------------------------------ */

Test(schema_dump, restore_recreates_the_schema)
{
	char buf[CISTERN_SCHEMA_MAX];
	struct cistern *c = make("dump", 0, RL);
	const char *name = seg_name_of(c);
	const char *copy = sch_name("dump2");
	const char *path = sch_dump_path("keep");
	struct cistern_config cfg;
	cistern_config_get(c, &cfg);
	char *payload = calloc(1, cfg.slot_size);
	cr_assert_eq(cistern_put(c, payload, cfg.slot_size, NULL, 0), 0);
	struct cistern_dump_info di, vi, ri;
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, &di), 0);
	cr_assert_str_eq(di.schema, RL);
	cr_assert_eq(di.config.schema, di.schema);
	/* Format 2 carries the schema; format 3 only adds a cold tier, which this has not. */
	cr_assert_eq(di.format_version, 2);
	cr_assert_eq(cistern_dump_verify(path, &vi), 0);
	cr_assert_str_eq(vi.config.schema, RL);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, &ri), 0);
	cr_assert_str_eq(ri.schema, RL);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	cr_assert_eq(cistern_schema_get(r, buf, sizeof(buf)), (ssize_t)strlen(RL));
	cr_assert_str_eq(buf, RL);
	struct cistern_config rc;
	cistern_config_get(r, &rc);
	cr_assert_eq(rc.slot_size, cfg.slot_size);
	cr_assert_eq(cistern_get(r, payload, cfg.slot_size, NULL, 0), (ssize_t)cfg.slot_size);
	free(payload);
	cistern_detach(r);
}

Test(schema_dump, a_segment_without_a_schema_restores_without_one)
{
	struct cistern *c = make("dnone", 64, NULL);
	const char *name = seg_name_of(c);
	const char *copy = sch_name("dnone2");
	const char *path = sch_dump_path("none");
	struct cistern_dump_info di;
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, &di), 0);
	cr_assert_null(di.config.schema);
	cr_assert_str_eq(di.schema, "");
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	cr_assert_eq(cistern_schema_get(r, NULL, 0), 0);
	cistern_detach(r);
}

static void *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	uint8_t *p = malloc((size_t)st.st_size);
	cr_assert_eq(pread(fd, p, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return p;
}

static void write_file(const char *path, const void *p, size_t len)
{
	int fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, p, len, 0), (ssize_t)len);
	close(fd);
}

/* Seal a file whose bytes were changed: meta CRC (if meta is given) and file CRC. */
static void reseal(uint8_t *p, size_t len, struct dump_meta *meta)
{
	uint64_t meta_off = get64(p + len - TRAILER_SIZE + 16);
	if (meta)
		cistern__dump_meta_encode(meta, p + meta_off);
	put32(p + len - 8, cistern__crc32c(0, p, len - 8));
}

/*
 * A file as builds before schemas wrote it (format 1: no schema section, zeros
 * in its meta fields) is still read and restored.
 */
Test(schema_dump, a_format_1_dump_is_still_read_and_restored)
{
	struct cistern *c = make("v1", 64, NULL);
	const char *name = seg_name_of(c);
	const char *copy = sch_name("v1b");
	const char *path = sch_dump_path("v1");
	uint8_t payload[10] = "0123456789";
	cr_assert_eq(cistern_put(c, payload, sizeof(payload), NULL, 0), 0);
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	size_t len;
	uint8_t *p = read_file(path, &len);
	struct dump_meta m;
	uint64_t meta_off = get64(p + len - TRAILER_SIZE + 16);
	cr_assert_eq(cistern__dump_meta_decode(p + meta_off, &m), 0);
	cr_assert_eq(m.schema_size, 0);
	cr_assert_eq(m.schema_off, meta_off);
	put32(p + 8, 1);
	m.schema_off = 0;
	m.schema_crc = 0;
	reseal(p, len, &m);
	write_file(path, p, len);
	struct cistern_dump_info vi;
	cr_assert_eq(cistern_dump_verify(path, &vi), 0);
	cr_assert_eq(vi.format_version, 1);
	cr_assert_null(vi.config.schema);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), 0);
	uint8_t out[64];
	cr_assert_eq(cistern_get(r, out, sizeof(out), NULL, 0), (ssize_t)sizeof(payload));
	cr_assert_eq(memcmp(out, payload, sizeof(payload)), 0);
	cistern_detach(r);
	/* Format 1 with schema fields set is not what any build wrote. */
	m.schema_off = meta_off;
	reseal(p, len, &m);
	write_file(path, p, len);
	cr_assert_eq(cistern_dump_verify(path, NULL), -EBADMSG);
	free(p);
}

/* Dump a schema segment, change the file with `damage`, and expect a refusal. */
static void refused(const char *tag, void (*damage)(uint8_t *p, size_t len))
{
	struct cistern *c = make(tag, 64, "a:float32[4];b:int64");
	const char *name = seg_name_of(c);
	char copy_tag[32];
	snprintf(copy_tag, sizeof(copy_tag), "%s2", tag);
	const char *copy = sch_name(copy_tag);
	const char *path = sch_dump_path(tag);
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	size_t len;
	uint8_t *p = read_file(path, &len);
	damage(p, len);
	write_file(path, p, len);
	free(p);
	cr_assert_eq(cistern_dump_verify(path, NULL), -EBADMSG);
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), -EBADMSG);
	struct cistern *r;
	cr_assert_eq(cistern_attach(copy, &r), -ENOENT, "nothing created");
}

static uint8_t *schema_of(uint8_t *p, size_t len, struct dump_meta *m)
{
	cr_assert_eq(cistern__dump_meta_decode(p + get64(p + len - TRAILER_SIZE + 16), m), 0);
	cr_assert_eq(m->schema_size, strlen("a:float32[4];b:int64[]"));
	return p + m->schema_off;
}

static void flip_schema_byte(uint8_t *p, size_t len)
{
	struct dump_meta m;
	schema_of(p, len, &m)[2] ^= 0x20; /* float32 -> Float32 */
}

static void change_schema_resealed(uint8_t *p, size_t len)
{
	/* Every checksum holds, but the text no longer parses: create would refuse it. */
	struct dump_meta m;
	uint8_t *s = schema_of(p, len, &m);
	s[2] = 'F';
	m.schema_crc = cistern__crc32c(0, s, (size_t)m.schema_size);
	reseal(p, len, &m);
}

static void nul_in_schema_resealed(uint8_t *p, size_t len)
{
	struct dump_meta m;
	uint8_t *s = schema_of(p, len, &m);
	s[5] = '\0';
	m.schema_crc = cistern__crc32c(0, s, (size_t)m.schema_size);
	reseal(p, len, &m);
}

Test(schema_dump, a_flipped_schema_byte_is_refused_and_nothing_created)
{
	refused("dflip", flip_schema_byte);
}

Test(schema_dump, a_schema_create_would_refuse_is_refused_and_nothing_created)
{
	refused("dbad", change_schema_resealed);
}

Test(schema_dump, a_nul_inside_the_schema_section_is_refused)
{
	refused("dnul", nul_in_schema_resealed);
}

/*
 * The meta block's producers that died before done stay at bytes 416-419,
 * where the format 1 files that carry them have them, and the schema's offset,
 * size and CRC-32C follow at 424-443: neither overwrites the other.
 */
Test(schema_dump, producers_died_and_the_schema_fields_keep_their_own_meta_bytes)
{
	struct dump_meta m, back;
	memset(&m, 0, sizeof(m));
	m.producers_died = 0x01020304u;
	m.schema_off = 0x1112131415161718ull;
	m.schema_size = 0x2122232425262728ull;
	m.schema_crc = 0x31323334u;
	uint8_t b[META_SIZE];
	cistern__dump_meta_encode(&m, b);
	cr_assert_eq(get32(b + 416), m.producers_died);
	cr_assert_eq(get64(b + 424), m.schema_off);
	cr_assert_eq(get64(b + 432), m.schema_size);
	cr_assert_eq(get32(b + 440), m.schema_crc);
	cr_assert_eq(cistern__dump_meta_decode(b, &back), 0);
	cr_assert_eq(back.producers_died, m.producers_died);
	cr_assert_eq(back.schema_off, m.schema_off);
	cr_assert_eq(back.schema_size, m.schema_size);
	cr_assert_eq(back.schema_crc, m.schema_crc);
}
