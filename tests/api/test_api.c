/* SPDX-License-Identifier: MIT */
/* test_api.c - the C API in one process: names, parameters, results, error paths. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "helpers.h"

/* Every test's segments go through seg_create(); the fixture removes them, pass or fail. */
TestSuite(create, .fini = seg_fini);
TestSuite(read_problem, .fini = seg_fini);
TestSuite(attach, .fini = seg_fini);
TestSuite(fifo, .fini = seg_fini);
TestSuite(reservoir, .fini = seg_fini);
TestSuite(stats, .fini = seg_fini);

Test(names, accepts_the_documented_alphabet)
{
	cr_assert_eq(cistern_name_valid("a"), 0);
	cr_assert_eq(cistern_name_valid("run-42.heat_2d"), 0);
	char longest[CISTERN_NAME_MAX + 1];
	memset(longest, 'x', CISTERN_NAME_MAX);
	longest[CISTERN_NAME_MAX] = '\0';
	cr_assert_eq(cistern_name_valid(longest), 0);
}

Test(names, refuses_separators_dots_empty_and_long_names)
{
	cr_assert_eq(cistern_name_valid(NULL), -EINVAL);
	cr_assert_eq(cistern_name_valid(""), -EINVAL);
	cr_assert_eq(cistern_name_valid("a/b"), -EINVAL);
	cr_assert_eq(cistern_name_valid("/abs"), -EINVAL);
	cr_assert_eq(cistern_name_valid(".."), -EINVAL);
	cr_assert_eq(cistern_name_valid(".hidden"), -EINVAL);
	cr_assert_eq(cistern_name_valid("-flag"), -EINVAL);
	cr_assert_eq(cistern_name_valid("sp ace"), -EINVAL);
	cr_assert_eq(cistern_name_valid("caf\xc3\xa9"), -EINVAL);
	char toolong[CISTERN_NAME_MAX + 2];
	memset(toolong, 'x', CISTERN_NAME_MAX + 1);
	toolong[CISTERN_NAME_MAX + 1] = '\0';
	cr_assert_eq(cistern_name_valid(toolong), -ENAMETOOLONG);
}

Test(names, bad_names_are_refused_by_every_entry_point)
{
	struct cistern *c = (struct cistern *)0x1;
	cr_assert_eq(cistern_create("../etc", NULL, &c), -EINVAL);
	cr_assert_null(c, "the out handle is cleared on failure");
	cr_assert_eq(cistern_attach("x/y", &c), -EINVAL);
	cr_assert_eq(cistern_unlink(".."), -EINVAL);
}

Test(create, zero_config_gives_documented_defaults)
{
	struct cistern *c = seg_create_cfg("defaults", NULL);
	struct cistern_config cfg;
	cr_assert_eq(cistern_config_get(c, &cfg), 0);
	cr_assert_eq(cfg.slot_size, CISTERN_DEFAULT_SLOT_SIZE);
	cr_assert_eq(cfg.slot_count, CISTERN_DEFAULT_SLOT_COUNT);
	cr_assert_eq(cfg.policy, CISTERN_FIFO);
	cr_assert_eq(cfg.mode, 0600);
	cr_assert_eq(cfg.pseudo_epochs, 1);
	cr_assert_eq(cfg.max_procs, CISTERN_DEFAULT_MAX_PROCS);
	cr_assert_neq(cfg.seed, 0);
	seg_drop(c);
}

Test(create, applies_the_requested_mode_despite_umask)
{
	char path[128];
	mode_t old = umask(077);
	struct cistern_config cfg = {.mode = 0640};
	struct cistern *c = seg_create("mode", cfg);
	umask(old);
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", seg_name_of(c));
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0640);
	seg_drop(c);
}

Test(create, an_existing_name_is_refused)
{
	struct cistern *c = seg_create_cfg("exists", NULL);
	const char *name = seg_name_of(c);
	struct cistern *d;
	cr_assert_eq(cistern_create(name, NULL, &d), -EEXIST);
	seg_drop(c);
}

/*
 * Every config create refuses for its parameters is named by
 * cistern_config_problem(), by the field that is wrong, and every config it
 * names nothing in is one create takes: the two judge by one list.
 */
Test(create, the_problem_named_for_a_refused_config_is_the_field_that_is_wrong)
{
	static const struct {
		struct cistern_config cfg;
		const char *field;
	} bad[] = {
		{{.slot_size = CISTERN_SLOT_SIZE_MAX + 1}, "slot_size"},
		{{.slot_count = CISTERN_SLOT_COUNT_MAX + 1}, "slot_count"},
		{{.slot_size = 1 << 20, .slot_count = 1 << 20}, "CISTERN_ARENA_MAX"},
		{{.policy = (enum cistern_policy)99}, "policy"},
		{{.mode = 010000}, "mode"},
		{{.max_times_sampled = 1}, "max_times_sampled"},
		{{.flags = 1u << 20}, "flags"},
		{{.flags = CISTERN_LOSSY}, "CISTERN_LOSSY"},
		{{.max_procs = CISTERN_PROCS_MAX + 1}, "max_procs"},
		{{.slot_count = 8, .watermark = 9}, "watermark"},
		{{.policy = CISTERN_FIRO, .slot_count = 16}, "FIRO needs a watermark"},
		{{.policy = CISTERN_FIRO, .slot_count = 16, .watermark = 16}, "below slot_count"},
		{{.policy = CISTERN_RESERVOIR, .slot_count = 16}, "watermark"},
		{{.policy = CISTERN_SIM_PAIRED_RESERVOIR,
		  .slot_count = 16,
		  .watermark = 4,
		  .nb_time_steps = 10},
		 "sweep_size"},
		{{.policy = CISTERN_SIM_PAIRED_RESERVOIR,
		  .slot_count = 16,
		  .watermark = 4,
		  .sweep_size = 2,
		  .nb_time_steps = 1},
		 "nb_time_steps"},
		{{.policy = CISTERN_BATCH_RESERVOIR, .slot_count = 16, .watermark = 16},
		 "batch_size"},
		{{.policy = CISTERN_BATCH_RESERVOIR,
		  .slot_count = 16,
		  .watermark = 4,
		  .batch_size = 8},
		 "watermark of at least batch_size"},
		{{.policy = CISTERN_FIFO, .reads_per_put = 2}, "reads_per_put"},
		{{.policy = CISTERN_RESERVOIR, .watermark = 2, .reads_per_put = -1},
		 "reads_per_put"},
		/* Puts into a full buffer need reads: fewer reads than puts stop them. */
		{{.policy = CISTERN_RESERVOIR, .watermark = 2, .reads_per_put = 0.5},
		 "reads_per_put must be 0 (off) or at least 1"},
		{{.policy = CISTERN_BATCH_RESERVOIR,
		  .slot_count = 16,
		  .watermark = 4,
		  .batch_size = 4,
		  .reads_per_put = 0.5},
		 "reads_per_put must be 0 (off) or at least 1"},
		{{.policy = CISTERN_FIFO_EVICT_RESERVOIR, .watermark = 2, .reads_per_put = 0.99},
		 "reads_per_put must be 0 (off) or at least 1"},
		{{.policy = CISTERN_RESERVOIR, .watermark = 2, .flags = CISTERN_SINGLE_PRODUCER},
		 "CISTERN_SINGLE_PRODUCER"},
		{{.policy = CISTERN_FIRO, .watermark = 2, .flags = CISTERN_SINGLE_READER},
		 "CISTERN_SINGLE_READER"},
	};
	const char *name = seg_name("problem");
	struct cistern *c;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *why = cistern_config_problem(&bad[i].cfg);
		cr_assert_not_null(why, "case %zu (%s) named no problem", i, bad[i].field);
		cr_assert(strstr(why, bad[i].field), "case %zu: '%s' does not name %s", i, why,
			  bad[i].field);
		cr_assert_eq(cistern_create(name, &bad[i].cfg, &c), -EINVAL, "case %zu", i);
	}
	cr_assert_eq(cistern_create(name, NULL, NULL), -EINVAL);
	/* Nothing was left behind by the refusals. */
	cr_assert_eq(cistern_attach(name, &c), -ENOENT);
}

Test(create, a_config_with_no_problem_named_is_created)
{
	const struct cistern_config good[] = {
		{0},
		{.policy = CISTERN_FIRO, .slot_count = 16, .watermark = 15},
		{.policy = CISTERN_RESERVOIR,
		 .slot_count = 16,
		 .watermark = 16,
		 .flags = CISTERN_SINGLE_READER,
		 .reads_per_put = 1.5},
		{.policy = CISTERN_FIFO_EVICT_RESERVOIR,
		 .slot_count = 16,
		 .watermark = 1,
		 .flags = CISTERN_LOSSY},
		{.policy = CISTERN_SIM_PAIRED_RESERVOIR,
		 .slot_count = 16,
		 .watermark = 4,
		 .sweep_size = 2,
		 .nb_time_steps = 2},
		{.policy = CISTERN_BATCH_RESERVOIR,
		 .slot_count = 16,
		 .watermark = 8,
		 .batch_size = 8},
		{.slot_count = 8, .flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER},
	};
	cr_assert_null(cistern_config_problem(NULL));
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		const char *name = seg_name("noproblem");
		const char *why = cistern_config_problem(&good[i]);
		cr_assert_null(why, "case %zu: %s", i, why);
		struct cistern *c;
		cr_assert_eq(cistern_create(name, &good[i], &c), 0, "case %zu", i);
		seg_drop(seg_keep(name, c));
	}
}

/*
 * A rate_slack set by hand under which the policy's own read could never
 * start (producers stop before the budget for it can build up) is refused
 * by create, naming rate_slack; one that just admits it is taken.
 */
Test(create, a_rate_slack_under_which_no_read_could_start_is_refused)
{
	/* A policy's configuration with a slack under its limit and one that admits a read. */
	struct rate {
		double reads_per_put, rate_slack;
	};
	const struct {
		struct cistern_config cfg;
		struct rate bad, good;
	} cases[] = {
		/* Bad: producers stop 9 reads behind at worst: d > 1 - 10. */
		{{.policy = CISTERN_RESERVOIR, .slot_count = 16, .watermark = 4}, {10, 1}, {2, 1}},
		/* Bad: a quarter of a read ahead at most, never a whole one. */
		{{.policy = CISTERN_FIFO_EVICT_RESERVOIR,
		  .slot_count = 16,
		  .watermark = 4,
		  .flags = CISTERN_LOSSY},
		 {0.25, 0.25},
		 {0.5, 0.5}},
		{{.policy = CISTERN_SIM_PAIRED_RESERVOIR,
		  .slot_count = 16,
		  .watermark = 4,
		  .sweep_size = 2,
		  .nb_time_steps = 2},
		 {4, 2},
		 {4, 3}},
		/* Bad: producers stop at a drift of 2, a batch needs 5: 8 - 3. */
		{{.policy = CISTERN_BATCH_RESERVOIR,
		  .slot_count = 16,
		  .watermark = 8,
		  .batch_size = 8},
		 {2, 3},
		 {2, 5}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cistern_config cfg = cases[i].cfg;
		cfg.reads_per_put = cases[i].bad.reads_per_put;
		cfg.rate_slack = cases[i].bad.rate_slack;
		const char *why = cistern_config_problem(&cfg);
		cr_assert_not_null(why, "bad case %zu named no problem", i);
		cr_assert(strstr(why, "rate_slack"), "bad case %zu: '%s'", i, why);
		cfg.reads_per_put = cases[i].good.reads_per_put;
		cfg.rate_slack = cases[i].good.rate_slack;
		why = cistern_config_problem(&cfg);
		cr_assert_null(why, "good case %zu: %s", i, why);
	}
}

Test(create, a_rate_slack_left_0_stays_0_automatic)
{
	struct cistern_config cfg = {
		.policy = CISTERN_RESERVOIR, .slot_count = 16, .watermark = 4, .reads_per_put = 2};
	struct cistern *c = seg_create("slack0", cfg);
	struct cistern_config got;
	cr_assert_eq(cistern_config_get(c, &got), 0);
	cr_assert(got.reads_per_put == 2 && got.rate_slack == 0, "slack %g", got.rate_slack);
	seg_drop(c);
}

Test(read_problem, names_reads_per_put_rate_slack_and_the_batch)
{
	struct cistern_config cfg = {.policy = CISTERN_RESERVOIR,
				     .slot_size = 8,
				     .slot_count = 64,
				     .watermark = 32,
				     .reads_per_put = 2,
				     .rate_slack = 4};
	struct cistern *c = seg_create("readprob", cfg);
	char why[400];
	cr_assert_eq(cistern_read_problem(c, 16, why, sizeof(why)), -EDEADLK);
	cr_assert(strstr(why, "16 samples") && strstr(why, "reads_per_put 2") &&
			  strstr(why, "rate_slack 4") && strstr(why, "at least 9"),
		  "%s", why);
	cr_assert_eq(cistern_read_problem(c, 7, why, sizeof(why)), 0);
	cr_assert_str_empty(why);
	cr_assert_eq(cistern_read_problem(c, 65, why, sizeof(why)), -EINVAL);
	cr_assert(strstr(why, "slot_count 64"), "%s", why);
	cr_assert_eq(cistern_read_problem(c, 0, NULL, 0), -EINVAL, "no batch_size");
	seg_drop(c);
}

Test(attach, missing_segment_is_enoent)
{
	struct cistern *c;
	cr_assert_eq(cistern_attach("t-never-created-here", &c), -ENOENT);
	cr_assert_eq(cistern_unlink("t-never-created-here"), -ENOENT);
}

Test(attach, second_handle_sees_the_same_segment)
{
	struct cistern_config cfg = {.slot_size = 32, .slot_count = 8};
	struct cistern *c = seg_create("second", cfg);
	const char *name = seg_name_of(c);
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0);
	cr_assert_eq(cistern_put(c, "hello", 5, NULL, 0), 0);
	char buf[32];
	cr_assert_eq(cistern_get(d, buf, sizeof(buf), NULL, 0), 5);
	cr_assert_eq(memcmp(buf, "hello", 5), 0);
	cr_assert_eq(cistern_detach(d), 0);
	seg_drop(c);
}

/* Kilobytes of this process's mappings of /dev/shm/cistern.NAME that are in its page tables. */
static long mapped_kib(const char *name)
{
	char path[160], line[512];
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	FILE *f = fopen("/proc/self/smaps", "r");
	cr_assert_not_null(f);
	long kib = 0;
	int ours = 0;
	while (fgets(line, sizeof(line), f)) {
		long v;
		if (strchr(line, '-') && strchr(line, ' ') && strchr(line, '-') < strchr(line, ' '))
			ours = strstr(line, path) != NULL; /* a mapping's first line */
		else if (ours && sscanf(line, "Rss: %ld kB", &v) == 1)
			kib += v;
	}
	fclose(f);
	return kib;
}

Test(attach, populate_maps_every_page_at_attach)
{
	struct cistern_config cfg = {.slot_size = 4096, .slot_count = 2048};
	struct cistern *c = seg_create("populate", cfg);
	const char *name = seg_name_of(c);
	struct cistern *plain, *full;
	long before = mapped_kib(name);
	cr_assert_eq(cistern_attach_flags(name, 0, &plain), 0);
	long after_plain = mapped_kib(name);
	cr_assert_eq(cistern_attach_flags(name, CISTERN_ATTACH_POPULATE, &full), 0);
	long after_full = mapped_kib(name);
	/* 8 MiB of slots: the plain attach maps a few pages, the populated one all */
	cr_assert_lt(after_plain - before, 1024, "a plain attach mapped %ld KiB",
		     after_plain - before);
	cr_assert_geq(after_full - after_plain, 8192, "a populated attach mapped %ld KiB",
		      after_full - after_plain);
	cr_assert_eq(cistern_put(full, "x", 1, NULL, 0), 0);
	char b[8];
	cr_assert_eq(cistern_get(plain, b, sizeof(b), NULL, 0), 1);
	cr_assert_eq(cistern_detach(full), 0);
	cr_assert_eq(cistern_detach(plain), 0);
	cr_assert_eq(cistern_attach_flags(name, 1u << 3, &full), -EINVAL, "an unknown flag");
	seg_drop(c);
}

Test(attach, a_full_attachment_table_is_eusers)
{
	struct cistern_config cfg = {.max_procs = 2};
	struct cistern *c = seg_create("eusers", cfg);
	const char *name = seg_name_of(c);
	struct cistern *d, *e;
	cr_assert_eq(cistern_attach(name, &d), 0);
	cr_assert_eq(cistern_attach(name, &e), -EUSERS);
	cr_assert_eq(cistern_detach(d), 0);
	cr_assert_eq(cistern_attach(name, &e), 0, "a detached entry is reused");
	cistern_detach(e);
	seg_drop(c);
}

Test(fifo, put_get_round_trip_keeps_payload_and_metadata)
{
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 4};
	struct cistern *c = seg_create("roundtrip", cfg);
	uint8_t in[64], out[64];
	fill_payload(in, sizeof(in), 7, 9);
	struct cistern_meta m = {.sim_id = 7, .time_step = 9}, got;
	cr_assert_eq(cistern_put(c, in, sizeof(in), &m, 0), 0);
	cr_assert_eq(cistern_get(c, out, sizeof(out), &got, 0), 64);
	cr_assert_eq(memcmp(in, out, 64), 0);
	cr_assert_eq(got.sim_id, 7);
	cr_assert_eq(got.time_step, 9);
	cr_assert_eq(got.sample_id, m.sample_id, "commit reports the id the reader sees");
	seg_drop(c);
}

Test(fifo, empty_payloads_are_samples_too)
{
	struct cistern *c = seg_create_cfg("empty", NULL);
	cr_assert_eq(cistern_put(c, NULL, 0, NULL, 0), 0);
	char buf[1];
	cr_assert_eq(cistern_get(c, buf, 0, NULL, 0), 0);
	cr_assert_eq(cistern_get(c, buf, 0, NULL, 0), -EAGAIN);
	seg_drop(c);
}

/*
 * No buffer for an empty sample: each path of the get (the first, the sole
 * reader's, a reader among several) copies nothing from it. Under the
 * sanitizers a copy to NULL, even of 0 bytes, is a report.
 */
Test(fifo, an_empty_sample_is_got_with_no_buffer_on_every_path)
{
	struct cistern *c = seg_create_cfg("emptynull", NULL);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cistern_put(c, NULL, 0, NULL, 0), 0);
	cr_assert_eq(cistern_get(c, NULL, 0, NULL, 0), 0, "the first get");
	struct cistern *d;
	cr_assert_eq(cistern_attach(seg_name_of(c), &d), 0);
	cr_assert_eq(cistern_get(d, NULL, 0, NULL, 0), 0, "a second reader's first get");
	cr_assert_eq(cistern_get(c, NULL, 0, NULL, 0), 0, "a get among two readers");
	cr_assert_eq(cistern_get(c, NULL, 0, NULL, 0), -EAGAIN);
	cistern_detach(d);
	seg_drop(c);
}

Test(reservoir, an_empty_sample_is_got_with_no_buffer)
{
	struct cistern_config cfg = {
		.policy = CISTERN_RESERVOIR, .slot_size = 8, .slot_count = 4, .watermark = 1};
	struct cistern *c = seg_create("resnull", cfg);
	cr_assert_eq(cistern_put(c, NULL, 0, NULL, 0), 0);
	cr_assert_eq(cistern_get(c, NULL, 0, NULL, 0), 0);
	seg_drop(c);
}

Test(fifo, order_and_ids_hold_across_many_wraps_of_an_odd_sized_ring)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 3};
	struct cistern *c = seg_create("wrap", cfg);
	uint64_t last_id = 0;
	for (uint64_t i = 0; i < 10000; i++) {
		cr_assert_eq(cistern_put(c, &i, sizeof(i), NULL, 0), 0);
		if (i % 3 == 2) {
			for (uint64_t j = i - 2; j <= i; j++) {
				uint64_t v;
				struct cistern_meta m;
				cr_assert_eq(cistern_get(c, &v, sizeof(v), &m, 0), 8);
				cr_assert_eq(v, j);
				cr_assert(j == 0 || m.sample_id > last_id, "ids increase");
				last_id = m.sample_id;
			}
		}
	}
	seg_drop(c);
}

Test(fifo, oversized_put_is_emsgsize_and_enqueues_nothing)
{
	struct cistern_config cfg = {.slot_size = 16, .slot_count = 4};
	struct cistern *c = seg_create("msgsize", cfg);
	char big[17] = {0};
	cr_assert_eq(cistern_put(c, big, sizeof(big), NULL, 0), -EMSGSIZE);
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.puts, 0);
	seg_drop(c);
}

Test(fifo, get_into_a_short_buffer_loses_nothing)
{
	struct cistern_config cfg = {.slot_size = 16, .slot_count = 4};
	struct cistern *c = seg_create("shortbuf", cfg);
	cr_assert_eq(cistern_put(c, "0123456789", 10, NULL, 0), 0);
	char small[4], buf[16];
	cr_assert_eq(cistern_get(c, small, sizeof(small), NULL, 0), -EMSGSIZE);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 10);
	cr_assert_eq(memcmp(buf, "0123456789", 10), 0);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.gets, 1, "the refused get is not counted");
	cr_assert_eq(st.redeliveries, 0, "nor is it a crash redelivery");
	cr_assert_eq(st.population, 0);
	seg_drop(c);
}

Test(fifo, empty_get_with_timeout_waits_then_times_out)
{
	struct cistern *c = seg_create_cfg("timeout", NULL);
	char buf[8];
	double t0 = mono_now();
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 120), -ETIMEDOUT);
	cr_assert_geq(mono_now() - t0, 0.110, "returned before its timeout");
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.reader_waits, 1);
	cr_assert_geq(st.reader_wait_ns, 110000000ull);
	seg_drop(c);
}

Test(fifo, full_put_try_once_is_eagain_and_timeout_is_etimedout)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 2};
	struct cistern *c = seg_create("full", cfg);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "c", 1, NULL, 0), -EAGAIN);
	cr_assert_eq(cistern_put(c, "c", 1, NULL, 50), -ETIMEDOUT);
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(cistern_put(c, "c", 1, NULL, 0), 0, "room again after a get");
	seg_drop(c);
}

Test(fifo, close_reception_refuses_puts_then_drains_to_end_of_data)
{
	struct cistern *c = seg_create_cfg("close", NULL);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), 0);
	cr_assert_eq(cistern_close_reception(c), 0);
	cr_assert_eq(cistern_close_reception(c), 0, "idempotent");
	cr_assert_eq(cistern_put(c, "c", 1, NULL, 0), -EPIPE);
	struct cistern_slot slot;
	cr_assert_eq(cistern_reserve(c, &slot, 0), -EPIPE);
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(buf[0], 'a');
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(buf[0], 'b');
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), CISTERN_EOD);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, -1), CISTERN_EOD,
		     "end of data does not wait");
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_neq(st.reception_closed, 0);
	seg_drop(c);
}

Test(fifo, last_expected_producer_closes_reception)
{
	struct cistern_config cfg = {.expected_producers = 2};
	struct cistern *c = seg_create("pdone", cfg);
	cr_assert_eq(cistern_producer_done(c), 1, "one producer still expected");
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0, "reception still open");
	cr_assert_eq(cistern_producer_done(c), 0);
	cr_assert_eq(cistern_put(c, "y", 1, NULL, 0), -EPIPE);
	seg_drop(c);
}

Test(fifo, producer_done_without_expected_producers_is_einval)
{
	struct cistern *c = seg_create_cfg("pdone0", NULL);
	cr_assert_eq(cistern_producer_done(c), -EINVAL);
	cr_assert_eq(cistern_put(c, "y", 1, NULL, 0), 0, "reception stays open");
	seg_drop(c);
}

Test(fifo, reserve_commit_writes_in_place)
{
	struct cistern_config cfg = {.slot_size = 100, .slot_count = 4};
	struct cistern *c = seg_create("inplace", cfg);
	struct cistern_slot slot;
	cr_assert_eq(cistern_reserve(c, &slot, 0), 0);
	cr_assert_eq(slot.capacity, 100);
	cr_assert_eq((uintptr_t)slot.data % 64, 0, "slots are cache-line aligned");
	char buf[100];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN,
		     "a reserved sample is invisible until commit");
	fill_payload(slot.data, 100, 1, 2);
	struct cistern_meta m = {.sim_id = 1, .time_step = 2};
	cr_assert_eq(cistern_commit(c, &slot, 100, &m), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	cr_assert_eq(s.len, 100);
	cr_assert(check_payload(s.data, s.len, 1, 2));
	cr_assert_eq(s.meta.sim_id, 1);
	cr_assert_eq(s.meta.sample_id, m.sample_id);
	cr_assert_eq(cistern_release(c, &s), 0);
	seg_drop(c);
}

Test(fifo, commit_over_slot_size_keeps_the_reservation)
{
	struct cistern_config cfg = {.slot_size = 16, .slot_count = 4};
	struct cistern *c = seg_create("commitbig", cfg);
	struct cistern_slot slot;
	cr_assert_eq(cistern_reserve(c, &slot, 0), 0);
	cr_assert_eq(cistern_commit(c, &slot, 17, NULL), -EMSGSIZE);
	cr_assert_eq(cistern_commit(c, &slot, 16, NULL), 0);
	cr_assert_eq(cistern_commit(c, &slot, 16, NULL), -EINVAL, "committed twice");
	seg_drop(c);
}

Test(fifo, aborted_reservation_never_appears)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 4};
	struct cistern *c = seg_create("abort", cfg);
	struct cistern_slot slot;
	cr_assert_eq(cistern_reserve(c, &slot, 0), 0);
	memcpy(slot.data, "ghost", 5);
	cr_assert_eq(cistern_abort(c, &slot), 0);
	cr_assert_eq(cistern_abort(c, &slot), -EINVAL, "aborted twice");
	cr_assert_eq(cistern_put(c, "real", 4, NULL, 0), 0);
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 4);
	cr_assert_eq(memcmp(buf, "real", 4), 0);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN);
	seg_drop(c);
}

Test(fifo, release_of_a_sample_never_acquired_or_twice_is_einval)
{
	struct cistern *c = seg_create_cfg("badrel", NULL);
	struct cistern_sample s;
	memset(&s, 0, sizeof(s));
	cr_assert_eq(cistern_release(c, &s), -EINVAL);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	struct cistern_sample copy = s;
	cr_assert_eq(cistern_release(c, &s), 0);
	cr_assert_eq(cistern_release(c, &s), -EINVAL);
	cr_assert_eq(cistern_release(c, &copy), -EINVAL, "a stale copy of the handle");
	cr_assert_eq(cistern_release(c, NULL), -EINVAL);
	seg_drop(c);
}

Test(fifo, another_handle_cannot_release_my_sample)
{
	struct cistern *c = seg_create_cfg("otherrel", NULL);
	const char *name = seg_name_of(c);
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	cr_assert_eq(cistern_release(d, &s), -EINVAL);
	cr_assert_eq(cistern_release(c, &s), 0);
	cistern_detach(d);
	seg_drop(c);
}

/* A sample handed back unread is the next one out, and was never a get. */
Test(fifo, a_sample_handed_back_unread_is_handed_out_again_first)
{
	struct cistern_config cfg = {.slot_size = 16, .slot_count = 8};
	struct cistern *c = seg_create("unacq", cfg);
	for (char v = 'a'; v <= 'c'; v++)
		cr_assert_eq(cistern_put(c, &v, 1, NULL, 0), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	cr_assert_eq(*(const char *)s.data, 'a');
	uint64_t id = s.meta.sample_id;
	cr_assert_eq(cistern_unacquire(c, &s), 0);
	cr_assert_eq(cistern_unacquire(c, &s), -EINVAL, "handed back twice");
	cr_assert_eq(cistern_release(c, &s), -EINVAL, "released after it was handed back");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.gets, 0);
	cr_assert_eq(st.population, 3);
	char v;
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, &v, 1, &m, 0), 1);
	cr_assert(v == 'a' && m.sample_id == id, "got %c, id %lu", v, (unsigned long)m.sample_id);
	cr_assert_eq(cistern_get(c, &v, 1, NULL, 0), 1);
	cr_assert_eq(v, 'b');
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.gets, 2);
	seg_drop(c);
}

Test(fifo, another_handle_cannot_hand_back_my_sample)
{
	struct cistern_config cfg = {.slot_size = 16, .slot_count = 8};
	struct cistern *c = seg_create("unacqo", cfg);
	const char *name = seg_name_of(c);
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	cr_assert_eq(cistern_unacquire(d, &s), -EINVAL);
	struct cistern_sample never = {0};
	cr_assert_eq(cistern_unacquire(c, &never), -EINVAL);
	cr_assert_eq(cistern_release(c, &s), 0);
	cr_assert_eq(cistern_detach(d), 0);
	seg_drop(c);
}

Test(fifo, detach_gives_back_reservations_and_held_samples)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 4};
	struct cistern *c = seg_create("detach", cfg);
	const char *name = seg_name_of(c);
	struct cistern *p, *r;
	cr_assert_eq(cistern_attach(name, &p), 0);
	cr_assert_eq(cistern_attach(name, &r), 0);
	struct cistern_slot slot;
	cr_assert_eq(cistern_reserve(p, &slot, 0), 0);
	cr_assert_eq(cistern_put(c, "kept", 4, NULL, 0), 0);
	struct cistern_sample s;
	/* The head is the reservation: nothing to read until it is resolved. */
	cr_assert_eq(cistern_acquire(r, &s, 0), -EAGAIN);
	cr_assert_eq(cistern_detach(p), 0); /* the reservation vanishes */
	cr_assert_eq(cistern_acquire(r, &s, 0), 0);
	cr_assert_eq(memcmp(s.data, "kept", 4), 0);
	cr_assert_eq(cistern_detach(r), 0); /* holding it: it goes back */
	char buf[8];
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), &m, 0), 4);
	cr_assert_eq(memcmp(buf, "kept", 4), 0);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN, "exactly one copy");
	seg_drop(c);
}

/*
 * Detach skips its walk over the slots when the handle holds nothing, so every
 * call that ends a hold must count exactly once. Hold a sample through every
 * kind of balanced call (put, get, a get into a short buffer, reserve + abort,
 * reserve + commit, acquire + release, a second release), then hold a
 * reservation through a refused commit and a put, and detach: had any call
 * forgotten one
 * hold too many, the held sample would stay ACQUIRED for ever and the
 * reservation would block the ring.
 */
Test(fifo, detach_after_balanced_traffic_still_gives_back_what_is_held)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 256};
	struct cistern *c = seg_create("hold", cfg);
	const char *name = seg_name_of(c);
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0);
	cr_assert_eq(cistern_put(c, "held", 4, NULL, 0), 0);
	struct cistern_sample held;
	cr_assert_eq(cistern_acquire(h, &held, 0), 0);
	char buf[8];
	for (int round = 0; round < 20; round++) {
		struct cistern_slot sl;
		struct cistern_sample s;
		cr_assert_eq(cistern_put(c, "12345678", 8, NULL, 0), 0);
		cr_assert_eq(cistern_put(h, "abcdefgh", 8, NULL, 0), 0);
		cr_assert_eq(cistern_get(h, buf, 2, NULL, 0), -EMSGSIZE, "too short: handed back");
		cr_assert_eq(cistern_reserve(h, &sl, 0), 0);
		cr_assert_eq(cistern_abort(h, &sl), 0);
		cr_assert_eq(cistern_reserve(h, &sl, 0), 0);
		cr_assert_eq(cistern_commit(h, &sl, 1, NULL), 0);
		cr_assert_eq(cistern_get(h, buf, sizeof(buf), NULL, 0), 8);
		cr_assert_eq(cistern_get(h, buf, sizeof(buf), NULL, 0), 8);
		cr_assert_eq(cistern_acquire(h, &s, 0), 0);
		cr_assert_eq(cistern_release(h, &s), 0);
		cr_assert_eq(cistern_release(h, &s), -EINVAL, "a second release ends nothing");
	}
	struct cistern_slot open_slot;
	cr_assert_eq(cistern_reserve(h, &open_slot, 0), 0);
	cr_assert_eq(cistern_commit(h, &open_slot, 9, NULL), -EMSGSIZE, "still reserved");
	cr_assert_eq(cistern_put(h, "after", 5, NULL, 0), 0);
	cr_assert_eq(cistern_detach(h), 0);
	/* The reservation became a SKIP (the ring moves on), the sample came back. */
	int got_held = 0, got_after = 0;
	ssize_t n;
	while ((n = cistern_get(c, buf, sizeof(buf), NULL, 0)) >= 0) {
		got_held += n == 4 && memcmp(buf, "held", 4) == 0;
		got_after += n == 5 && memcmp(buf, "after", 5) == 0;
	}
	cr_assert_eq(n, -EAGAIN);
	cr_assert_eq(got_held, 1, "the sample held at detach is handed out again, once");
	cr_assert_eq(got_after, 1, "the reservation left at detach does not block the ring");
	seg_drop(c);
}

Test(stats, counters_follow_puts_gets_and_population)
{
	struct cistern_config cfg = {.slot_size = 8, .slot_count = 16};
	struct cistern *c = seg_create("stats", cfg);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(cistern_put(c, &i, sizeof(i), NULL, 0), 0);
	int v;
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern_get(c, &v, sizeof(v), NULL, 0), 4);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 10);
	cr_assert_eq(st.gets, 4);
	cr_assert_eq(st.population, 6);
	cr_assert_eq(st.seen_hist[1], 4, "FIFO samples leave seen once");
	cr_assert_eq(st.procs_attached, 1);
	seg_drop(c);
}

Test(stats, counters_of_a_detached_process_are_kept)
{
	struct cistern *c = seg_create_cfg("retired", NULL);
	const char *name = seg_name_of(c);
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0);
	cr_assert_eq(cistern_put(d, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(d, "b", 1, NULL, 0), 0);
	cr_assert_eq(cistern_detach(d), 0);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.puts, 2);
	cr_assert_eq(st.population, 2);
	cr_assert_eq(st.procs_attached, 1);
	seg_drop(c);
}

Test(errors, every_result_has_a_sentence)
{
	int codes[] = {0,         CISTERN_EOD,      -EAGAIN,  -ETIMEDOUT, -EPIPE,
		       -EMSGSIZE, -EINVAL,          -EEXIST,  -ENOENT,    -EACCES,
		       -EPROTO,   -EPROTONOSUPPORT, -ENOTSUP, -EUSERS,    -EBADF,
		       -ERANGE,   -ENOSPC,          -EIO,     12345};
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		const char *s = cistern_strerror(codes[i]);
		cr_assert_not_null(s);
		cr_assert_gt(strlen(s), 3);
	}
	cr_assert_str_neq(cistern_strerror(CISTERN_EOD), cistern_strerror(-ETIMEDOUT));
}

Test(errors, policy_names_round_trip)
{
	for (int i = 0; i < CISTERN_POLICY_COUNT; i++) {
		enum cistern_policy p;
		cr_assert_eq(cistern_policy_parse(cistern_policy_name((enum cistern_policy)i), &p),
			     0);
		cr_assert_eq((int)p, i);
	}
	enum cistern_policy p;
	cr_assert_eq(cistern_policy_parse("lifo", &p), -EINVAL);
	cr_assert_null(cistern_policy_name(CISTERN_POLICY_COUNT));
}

Test(errors, null_handles_are_einval)
{
	char buf[4] = {0};
	struct cistern_slot slot;
	struct cistern_sample s;
	cr_assert_eq(cistern_put(NULL, buf, 1, NULL, 0), -EINVAL);
	cr_assert_eq(cistern_get(NULL, buf, 1, NULL, 0), -EINVAL);
	cr_assert_eq(cistern_reserve(NULL, &slot, 0), -EINVAL);
	cr_assert_eq(cistern_acquire(NULL, &s, 0), -EINVAL);
	cr_assert_eq(cistern_unacquire(NULL, &s), -EINVAL);
	cr_assert_eq(cistern_detach(NULL), -EINVAL);
	cr_assert_eq(cistern_stats_get(NULL, NULL), -EINVAL);
}
