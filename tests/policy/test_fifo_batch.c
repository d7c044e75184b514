/* SPDX-License-Identifier: MIT */
/*
 * test_fifo_batch.c - cistern_get_batch() on a FIFO: up to n samples in
 * order, those there now or the first one waited for, by the holder of the
 * reader role (flag or automatic) and by a reader that shares the role.
 */
#include <criterion/criterion.h>

#include "helpers.h"

enum mode { SOLE, AUTO, SHARED };

/* Every test's segment goes through seg_create(); the fixture removes it, pass or fail. */
TestSuite(fifo_batch, .fini = seg_fini);

static struct cistern *make(const char *tag, enum mode mode, struct cistern **other)
{
	char tag_mode[32];
	snprintf(tag_mode, sizeof(tag_mode), "%s-%d", tag, (int)mode);
	struct cistern_config cfg = {
		.slot_size = 16,
		.slot_count = 16,
		.flags = mode == SOLE ? CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER : 0};
	struct cistern *c = seg_create(tag_mode, cfg);
	*other = NULL;
	if (mode == SHARED) {
		/* A second reader that has read once: the role is shared from then on. */
		char b[16];
		cr_assert_eq(cistern_attach(seg_name_of(c), other), 0);
		cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
		cr_assert_eq(cistern_get(*other, b, sizeof(b), NULL, 0), 1);
	}
	return c;
}

/* The second reader's detach; seg_fini detaches c and unlinks the segment. */
static void drop_other(struct cistern *other)
{
	if (other)
		cistern_detach(other);
}

static void put_seq(struct cistern *c, uint32_t from, uint32_t count)
{
	for (uint32_t v = from; v < from + count; v++) {
		struct cistern_meta m = {.sim_id = v, .time_step = 7};
		cr_assert_eq(cistern_put(c, &v, sizeof(v), &m, 0), 0, "put %u", v);
	}
}

static void returns_what_is_there_in_order(enum mode mode)
{
	struct cistern *other, *c = make("fb-order", mode, &other);
	uint32_t out[8];
	size_t len[8];
	struct cistern_meta meta[8];
	put_seq(c, 0, 5);
	cr_assert_eq(cistern_get_batch(c, out, sizeof(out[0]), 8, len, meta, 0), 5);
	for (uint32_t i = 0; i < 5; i++) {
		cr_assert_eq(out[i], i);
		cr_assert_eq(len[i], sizeof(uint32_t));
		cr_assert_eq(meta[i].sim_id, i);
		cr_assert_eq(meta[i].time_step, 7);
		if (i)
			cr_assert_gt(meta[i].sample_id, meta[i - 1].sample_id);
	}
	cr_assert_eq(cistern_get_batch(c, out, sizeof(out[0]), 8, len, NULL, 0), -EAGAIN);
	/* No more than n, and the rest stays for the next call. */
	put_seq(c, 5, 10);
	cr_assert_eq(cistern_get_batch(c, out, sizeof(out[0]), 4, NULL, NULL, 0), 4);
	for (uint32_t i = 0; i < 4; i++)
		cr_assert_eq(out[i], 5 + i);
	uint32_t v;
	cr_assert_eq(cistern_get(c, &v, sizeof(v), NULL, 0), (ssize_t)sizeof(v));
	cr_assert_eq(v, 9);
	cr_assert_eq(cistern_get_batch(c, out, sizeof(out[0]), 8, NULL, NULL, 0), 5);
	cr_assert_eq(out[4], 14);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts - st.gets, 0, "every sample counted as read once");
	drop_other(other);
}

Test(fifo_batch, returns_what_is_there_in_order_for_the_sole_reader)
{
	returns_what_is_there_in_order(SOLE);
}

Test(fifo_batch, returns_what_is_there_in_order_for_the_automatic_reader)
{
	returns_what_is_there_in_order(AUTO);
}

Test(fifo_batch, returns_what_is_there_in_order_for_a_shared_reader)
{
	returns_what_is_there_in_order(SHARED);
}

static void long_sample_ends_the_batch(enum mode mode)
{
	struct cistern *other, *c = make("fb-long", mode, &other);
	cr_assert_eq(cistern_put(c, "aa", 2, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "bbbbbbbb", 8, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "cc", 2, NULL, 0), 0);
	char out[4][4];
	size_t len[4];
	cr_assert_eq(cistern_get_batch(c, out, 4, 4, len, NULL, 0), 1, "stops before the long one");
	cr_assert_eq(memcmp(out[0], "aa", 2), 0);
	cr_assert_eq(cistern_get_batch(c, out, 4, 4, len, NULL, 0), -EMSGSIZE);
	char big[16];
	cr_assert_eq(cistern_get(c, big, sizeof(big), NULL, 0), 8, "nothing was lost");
	cr_assert_eq(memcmp(big, "bbbbbbbb", 8), 0);
	cr_assert_eq(cistern_get_batch(c, out, 4, 4, len, NULL, 0), 1);
	cr_assert_eq(memcmp(out[0], "cc", 2), 0);
	cr_assert_eq(len[0], 2);
	drop_other(other);
}

Test(fifo_batch, a_sample_longer_than_the_stride_ends_the_batch_for_the_sole_reader)
{
	long_sample_ends_the_batch(SOLE);
}

Test(fifo_batch, a_sample_longer_than_the_stride_ends_the_batch_for_a_shared_reader)
{
	long_sample_ends_the_batch(SHARED);
}

Test(fifo_batch, reaches_end_of_data_after_the_last_samples)
{
	struct cistern *other, *c = make("fb-eod", SOLE, &other);
	put_seq(c, 0, 3);
	cr_assert_eq(cistern_close_reception(c), 0);
	uint32_t out[8];
	cr_assert_eq(cistern_get_batch(c, out, sizeof(out[0]), 8, NULL, NULL, 1000), 3);
	cr_assert_eq(cistern_get_batch(c, out, sizeof(out[0]), 8, NULL, NULL, 1000), CISTERN_EOD);
	drop_other(other);
}

Test(fifo_batch, refuses_n_zero_and_more_than_the_slots)
{
	struct cistern *other, *c = make("fb-n", SOLE, &other);
	uint32_t out[32];
	cr_assert_eq(cistern_get_batch(c, out, sizeof(out[0]), 0, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(cistern_get_batch(c, out, sizeof(out[0]), 17, NULL, NULL, 0), -EINVAL);
	drop_other(other);
}

/*
 * A producer process streams COUNT samples into a 16-slot ring while this
 * one reads them in batches of up to 8, waiting when none is there: every
 * sample arrives once, in order, undamaged.
 */
#define COUNT 200000

static void stream(uint32_t flags)
{
	struct cistern_config cfg = {.slot_size = 16, .slot_count = 16, .flags = flags};
	struct cistern *c = seg_create("fb-stream", cfg);
	const char *name = seg_name_of(c);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *p;
		if (cistern_attach(name, &p) < 0)
			_exit(1);
		for (uint32_t v = 0; v < COUNT; v++) {
			uint32_t w[2] = {v, ~v};
			if (cistern_put(p, w, sizeof(w), NULL, 5000) < 0)
				_exit(2);
		}
		cistern_close_reception(p);
		cistern_detach(p);
		_exit(0);
	}
	uint32_t next = 0, out[8][2];
	size_t len[8];
	for (;;) {
		int r = cistern_get_batch(c, out, sizeof(out[0]), 8, len, NULL, 5000);
		if (r == CISTERN_EOD)
			break;
		cr_assert_gt(r, 0, "get_batch: %s", cistern_strerror(r));
		for (int i = 0; i < r; i++, next++) {
			cr_assert_eq(len[i], sizeof(out[0]));
			cr_assert_eq(out[i][0], next, "sample %u came as %u", next, out[i][0]);
			cr_assert_eq(out[i][1], ~next);
		}
	}
	cr_assert_eq(next, COUNT);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

Test(fifo_batch, a_stream_from_another_process_arrives_whole_and_in_order_sole, .timeout = 120)
{
	stream(CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER);
}

Test(fifo_batch, a_stream_from_another_process_arrives_whole_and_in_order_auto, .timeout = 120)
{
	stream(0);
}
