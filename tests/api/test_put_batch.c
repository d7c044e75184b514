/* SPDX-License-Identifier: MIT */
/*
 * test_put_batch.c - cistern_put_batch(): up to n samples in order, those
 * there is room for now or the first one waited for, by the holder of the
 * FIFO's producer role (flag or automatic), by a producer that shares the
 * role, and under a policy without a FIFO's own way.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <sched.h>

#include "helpers.h"
#include "core/handle.h"
#include <cistern/admin.h>

enum mode { SOLE, AUTO, SHARED, RESERVOIR };

/* Every test's segment goes through seg_create(); the fixture removes it, pass or fail. */
TestSuite(put_batch, .fini = seg_fini);

static struct cistern *make(const char *tag, enum mode mode, uint64_t slots, struct cistern **other)
{
	char tag_mode[32];
	snprintf(tag_mode, sizeof(tag_mode), "%s-%d", tag, (int)mode);
	struct cistern_config cfg = {.slot_size = 16, .slot_count = slots};
	if (mode == SOLE)
		cfg.flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER;
	if (mode == RESERVOIR) {
		cfg.policy = CISTERN_RESERVOIR;
		cfg.watermark = 1;
	}
	struct cistern *c = seg_create(tag_mode, cfg);
	*other = NULL;
	if (mode == SHARED) {
		/* A second producer that has put once: the role is shared from then on. */
		cr_assert_eq(cistern_attach(seg_name_of(c), other), 0);
		cr_assert_eq(cistern_put(*other, "x", 1, NULL, 0), 0);
		char b[16];
		cr_assert_eq(cistern_get(c, b, sizeof(b), NULL, 0), 1);
	}
	return c;
}

/* The second producer's detach; seg_fini detaches c and unlinks the segment. */
static void drop_other(struct cistern *other)
{
	if (other)
		cistern_detach(other);
}

/* Samples v = from .. from + n - 1: each 4 + v % 9 bytes, byte j = v * 3 + j. */
static size_t fill(uint8_t buf[][16], size_t *len, struct cistern_meta *meta, uint32_t from,
		   size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t v = from + (uint32_t)i;
		len[i] = 4 + v % 9;
		for (size_t j = 0; j < 16; j++)
			buf[i][j] = (uint8_t)(v * 3 + j);
		if (meta)
			meta[i] = (struct cistern_meta){.sim_id = v, .time_step = v * 2};
	}
	return n;
}

/* Read sample v back with cistern_get() and check every byte and field. */
static void expect(struct cistern *c, uint32_t v, uint64_t sample_id)
{
	uint8_t out[16];
	struct cistern_meta m;
	ssize_t r = cistern_get(c, out, sizeof(out), &m, 0);
	cr_assert_eq(r, (ssize_t)(4 + v % 9), "sample %u: got %zd", v, r);
	for (ssize_t j = 0; j < r; j++)
		cr_assert_eq(out[j], (uint8_t)(v * 3 + j), "sample %u byte %zd", v, j);
	cr_assert_eq(m.sim_id, v);
	cr_assert_eq(m.time_step, v * 2);
	cr_assert_eq(m.sample_id, sample_id, "sample %u", v);
}

static void puts_in_order_with_lengths_and_ids(enum mode mode)
{
	struct cistern *other, *c = make("pb-order", mode, 16, &other);
	uint8_t buf[10][16];
	size_t len[10];
	struct cistern_meta meta[10];
	fill(buf, len, meta, 0, 10);
	cr_assert_eq(cistern_put_batch(c, buf, 16, 10, len, meta, 0), 10);
	for (uint32_t i = 1; i < 10; i++)
		cr_assert_eq(meta[i].sample_id, meta[i - 1].sample_id + 1, "ids written back");
	for (uint32_t v = 0; v < 10; v++)
		expect(c, v, meta[v].sample_id);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 10 + (mode == SHARED), "each sample counted once");
	drop_other(other);
}

Test(put_batch, puts_in_order_with_lengths_and_ids_for_the_sole_producer)
{
	puts_in_order_with_lengths_and_ids(SOLE);
}

Test(put_batch, puts_in_order_with_lengths_and_ids_for_the_automatic_producer)
{
	puts_in_order_with_lengths_and_ids(AUTO);
}

Test(put_batch, puts_in_order_with_lengths_and_ids_for_a_shared_producer)
{
	puts_in_order_with_lengths_and_ids(SHARED);
}

static void stops_where_the_room_ends(enum mode mode)
{
	struct cistern *other, *c = make("pb-room", mode, 8, &other);
	uint8_t buf[20][16];
	size_t len[20];
	struct cistern_meta meta[20];
	fill(buf, len, meta, 0, 20);
	cr_assert_eq(cistern_put_batch(c, buf, 16, 20, len, meta, 0), 8,
		     "as many as there is room for");
	cr_assert_eq(cistern_put_batch(c, buf[8], 16, 12, len + 8, meta + 8, 0), -EAGAIN);
	for (uint32_t v = 0; v < 3; v++)
		expect(c, v, meta[v].sample_id);
	cr_assert_eq(cistern_put_batch(c, buf[8], 16, 12, len + 8, meta + 8, 0), 3);
	for (uint32_t v = 3; v < 11; v++)
		expect(c, v, meta[v].sample_id);
	drop_other(other);
}

Test(put_batch, stops_where_the_room_ends_for_the_sole_producer)
{
	stops_where_the_room_ends(SOLE);
}

Test(put_batch, stops_where_the_room_ends_for_a_shared_producer)
{
	stops_where_the_room_ends(SHARED);
}

/*
 * Seven slots (not a power of two), the tail at slot 5: one batch fills
 * slots 5, 6, then 0 to 3, and a second one, lap after lap, wraps again.
 */
static void a_batch_across_the_end_of_the_ring_keeps_order(enum mode mode)
{
	struct cistern *other, *c = make("pb-wrap", mode, 7, &other);
	uint8_t buf[40][16];
	size_t len[40];
	struct cistern_meta meta[40];
	fill(buf, len, meta, 0, 40);
	cr_assert_eq(cistern_put_batch(c, buf, 16, 5, len, meta, 0), 5);
	for (uint32_t v = 0; v < 5; v++)
		expect(c, v, meta[v].sample_id);
	uint32_t v = 5;
	while (v < 40) {
		size_t n = 40 - v < 6 ? 40 - v : 6;
		cr_assert_eq(cistern_put_batch(c, buf[v], 16, n, len + v, meta + v, 0), (int)n,
			     "room for %zu at %u", n, v);
		for (size_t i = 0; i < n; i++)
			expect(c, v + (uint32_t)i, meta[v + i].sample_id);
		v += (uint32_t)n;
	}
	for (uint32_t i = 1; i < 40; i++)
		cr_assert_eq(meta[i].sample_id, meta[i - 1].sample_id + 1, "ids in order");
	drop_other(other);
}

Test(put_batch, a_batch_across_the_end_of_the_ring_keeps_order_for_the_sole_producer)
{
	a_batch_across_the_end_of_the_ring_keeps_order(SOLE);
}

Test(put_batch, a_batch_across_the_end_of_the_ring_keeps_order_for_the_automatic_producer)
{
	a_batch_across_the_end_of_the_ring_keeps_order(AUTO);
}

static void long_sample_ends_the_batch(enum mode mode)
{
	struct cistern *other, *c = make("pb-long", mode, 16, &other);
	uint8_t buf[4][32];
	memset(buf, 'a', sizeof(buf));
	size_t len[4] = {3, 5, 17, 2}; /* the third is longer than a slot (16) */
	cr_assert_eq(cistern_put_batch(c, buf, 32, 4, len, NULL, 0), 2,
		     "stops before the long one");
	cr_assert_eq(cistern_put_batch(c, buf[2], 32, 2, len + 2, NULL, 0), -EMSGSIZE,
		     "and the next call says why, with nothing put");
	size_t wide[2] = {20, 2};
	cr_assert_eq(cistern_put_batch(c, buf[0], 16, 2, wide, NULL, 0), -EINVAL,
		     "a length past the stride is refused");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 2 + (mode == SHARED), "nothing put by the refused calls");
	cr_assert_eq(cistern_put_batch(c, buf[3], 32, 1, len + 3, NULL, 0), 1);
	if (mode != RESERVOIR) {
		uint8_t out[16];
		cr_assert_eq(cistern_get(c, out, sizeof(out), NULL, 0), 3);
		cr_assert_eq(cistern_get(c, out, sizeof(out), NULL, 0), 5);
		cr_assert_eq(cistern_get(c, out, sizeof(out), NULL, 0), 2);
	}
	drop_other(other);
}

Test(put_batch, a_sample_too_long_ends_the_batch_for_the_sole_producer)
{
	long_sample_ends_the_batch(SOLE);
}

Test(put_batch, a_sample_too_long_ends_the_batch_for_a_shared_producer)
{
	long_sample_ends_the_batch(SHARED);
}

Test(put_batch, a_sample_too_long_ends_the_batch_under_a_reservoir)
{
	long_sample_ends_the_batch(RESERVOIR);
}

Test(put_batch, without_lengths_every_sample_is_stride_bytes)
{
	struct cistern *other, *c = make("pb-stride", SOLE, 16, &other);
	uint32_t v[5] = {10, 11, 12, 13, 14};
	cr_assert_eq(cistern_put_batch(c, v, sizeof(v[0]), 5, NULL, NULL, 0), 5);
	for (uint32_t i = 0; i < 5; i++) {
		uint32_t w = 0;
		cr_assert_eq(cistern_get(c, &w, sizeof(w), NULL, 0), (ssize_t)sizeof(w));
		cr_assert_eq(w, 10 + i);
	}
	drop_other(other);
}

Test(put_batch, refuses_bad_arguments_and_read_only_handles)
{
	struct cistern *other, *c = make("pb-args", SOLE, 16, &other);
	const char *name = seg_name_of(c);
	uint32_t v[2] = {1, 2};
	cr_assert_eq(cistern_put_batch(NULL, v, 4, 2, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(cistern_put_batch(c, NULL, 4, 2, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(cistern_put_batch(c, v, 4, 0, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(cistern_put_batch(c, v, 4, (size_t)INT_MAX + 1, NULL, NULL, 0), -EINVAL);
	struct cistern *ro;
	cr_assert_eq(cistern_open_readonly(name, &ro), 0);
	cr_assert_eq(cistern_put_batch(ro, v, 4, 2, NULL, NULL, 0), -EBADF);
	cistern_detach(ro);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 0);
	drop_other(other);
}

static void after_close_puts_nothing(enum mode mode)
{
	struct cistern *other, *c = make("pb-close", mode, 16, &other);
	uint32_t v[4] = {1, 2, 3, 4};
	cr_assert_eq(cistern_put_batch(c, v, 4, 2, NULL, NULL, 0), 2);
	cr_assert_eq(cistern_close_reception(c), 0);
	cr_assert_eq(cistern_put_batch(c, v + 2, 4, 2, NULL, NULL, 1000), -EPIPE);
	uint32_t w;
	cr_assert_eq(cistern_get(c, &w, sizeof(w), NULL, 0), 4);
	cr_assert_eq(w, 1);
	cr_assert_eq(cistern_get(c, &w, sizeof(w), NULL, 0), 4);
	cr_assert_eq(w, 2);
	cr_assert_eq(cistern_get(c, &w, sizeof(w), NULL, 1000), CISTERN_EOD,
		     "nothing of the refused batch appears");
	drop_other(other);
}

Test(put_batch, after_close_puts_nothing_for_the_sole_producer)
{
	after_close_puts_nothing(SOLE);
}

Test(put_batch, after_close_puts_nothing_for_a_shared_producer)
{
	after_close_puts_nothing(SHARED);
}

Test(put_batch, under_a_reservoir_puts_every_sample)
{
	struct cistern *other, *c = make("pb-res", RESERVOIR, 16, &other);
	uint8_t buf[10][16];
	size_t len[10];
	struct cistern_meta meta[10];
	fill(buf, len, meta, 0, 10);
	cr_assert_eq(cistern_put_batch(c, buf, 16, 10, len, meta, 0), 10);
	for (uint32_t i = 1; i < 10; i++)
		cr_assert_gt(meta[i].sample_id, meta[i - 1].sample_id);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 10);
	/* A batch of all ten held draws each once: every sample went in whole. */
	uint8_t out[10][16];
	size_t olen[10];
	struct cistern_meta om[10];
	cr_assert_eq(cistern_get_batch(c, out, 16, 10, olen, om, 0), 10);
	uint32_t seen = 0;
	for (int i = 0; i < 10; i++) {
		uint32_t v = om[i].sim_id;
		cr_assert_lt(v, 10);
		seen |= 1u << v;
		cr_assert_eq(olen[i], len[v]);
		cr_assert_eq(memcmp(out[i], buf[v], len[v]), 0, "sample %u", v);
	}
	cr_assert_eq(seen, 0x3ff);
	drop_other(other);
}

/*
 * A full ring: the batch waits for room for its first sample, which a
 * reader process makes a little later, then goes on with what fits.
 */
Test(put_batch, waits_for_room_for_the_first_sample, .timeout = 60)
{
	struct cistern *other, *c = make("pb-wait", SOLE, 4, &other);
	const char *name = seg_name_of(c);
	_Atomic uint32_t *reading = shared_alloc(sizeof(*reading));
	cr_assert_not_null(reading);
	uint32_t v[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	cr_assert_eq(cistern_put_batch(c, v, 4, 4, NULL, NULL, 0), 4);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* The reader: it takes the reader role, which nobody has taken yet. */
		struct cistern *r;
		uint32_t w[2];
		usleep(100 * 1000);
		if (cistern_attach(name, &r) < 0)
			_exit(1);
		atomic_store(reading, 1);
		int got = 0;
		for (int i = 0; i < 2; i++)
			got += cistern_get(r, &w[i], sizeof(w[i]), NULL, 1000) == 4 &&
			       w[i] == (uint32_t)i;
		cistern_detach(r);
		_exit(got == 2 ? 0 : 2);
	}
	int r = cistern_put_batch(c, v + 4, 4, 4, NULL, NULL, 5000);
	cr_assert_eq(atomic_load(reading), 1, "returned before the reader made room");
	cr_assert(r == 1 || r == 2, "put %d: room came for one or two", r);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reader status %d", status);
	drop_other(other);
}

/*
 * Another process closes reception while the holder puts batches as fast as
 * it can: a batch whose claims the close voids (-EPIPE) puts nothing, and
 * every sample of the batches that went in is both counted and read, once.
 */
Test(put_batch, batches_racing_a_close_are_counted_exactly, .timeout = 120)
{
	for (int round = 0; round < 40; round++) {
		struct cistern *other, *c = make("pb-race", SOLE, 1 << 12, &other);
		const char *name = seg_name_of(c);
		_Atomic uint32_t *go = shared_alloc(sizeof(*go));
		cr_assert_not_null(go);
		if (fork_child() == 0) {
			struct cistern *k;
			if (cistern_attach(name, &k) < 0)
				_exit(1);
			atomic_store(go, 1);
			while (atomic_load(go) != 2)
				;
			for (volatile int spin = 0; spin < (round % 8) * 500; spin++)
				;
			_exit(cistern_close_reception(k) < 0 ? 2 : 0);
		}
		while (atomic_load(go) != 1)
			sched_yield();
		uint32_t v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
		uint64_t ok = 0;
		int r;
		atomic_store(go, 2);
		/* Until the close: a full ring (-EAGAIN) only waits for it. */
		while ((r = cistern_put_batch(c, v, 4, 8, NULL, NULL, 0)) > 0 || r == -EAGAIN)
			ok += r > 0 ? (uint64_t)r : 0;
		cr_assert_eq(r, -EPIPE, "round %d: the batches ended with %d", round, r);
		cr_assert_eq(reap_all(), 0);
		cr_assert_eq(atomic_load(&c->me->ctr.puts), ok, "round %d", round);
		uint64_t got = 0;
		ssize_t n;
		uint32_t w;
		while ((n = cistern_get(c, &w, sizeof(w), NULL, 0)) == 4) {
			cr_assert_eq(w, 1 + got % 8, "round %d: sample %llu", round,
				     (unsigned long long)got);
			got++;
		}
		cr_assert_eq(n, CISTERN_EOD, "round %d", round);
		cr_assert_eq(got, ok, "round %d", round);
		drop_other(other);
		seg_drop(c); /* the next round makes the segment again */
	}
}

/*
 * A producer process streams COUNT samples in batches of up to 8 into a
 * 16-slot ring while this one reads them: every sample arrives once, in
 * order, undamaged, with the ids the producer was given back.
 */
#define COUNT 200000

static void stream(uint32_t flags)
{
	struct cistern_config cfg = {.slot_size = 16, .slot_count = 16, .flags = flags};
	struct cistern *c = seg_create("pb-stream", cfg);
	const char *name = seg_name_of(c);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *p;
		if (cistern_attach(name, &p) < 0)
			_exit(1);
		uint32_t v = 0;
		while (v < COUNT) {
			uint32_t w[8][2];
			struct cistern_meta m[8];
			size_t n = COUNT - v < 8 ? COUNT - v : 8;
			for (size_t i = 0; i < n; i++) {
				w[i][0] = v + (uint32_t)i;
				w[i][1] = ~(v + (uint32_t)i);
				m[i] = (struct cistern_meta){.sim_id = v + (uint32_t)i};
			}
			int r = cistern_put_batch(p, w, sizeof(w[0]), n, NULL, m, 5000);
			if (r <= 0 || (size_t)r > n)
				_exit(2);
			for (int i = 0; i < r; i++)
				if (m[i].sample_id != (uint64_t)v + (uint64_t)i)
					_exit(3);
			v += (uint32_t)r;
		}
		cistern_close_reception(p);
		cistern_detach(p);
		_exit(0);
	}
	uint32_t next = 0, out[2];
	for (;;) {
		struct cistern_meta m;
		ssize_t r = cistern_get(c, out, sizeof(out), &m, 5000);
		if (r == CISTERN_EOD)
			break;
		cr_assert_eq(r, (ssize_t)sizeof(out), "get: %s", cistern_strerror((int)r));
		cr_assert_eq(out[0], next, "sample %u came as %u", next, out[0]);
		cr_assert_eq(out[1], ~next);
		cr_assert_eq(m.sim_id, next);
		next++;
	}
	cr_assert_eq(next, COUNT);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "producer status %d", status);
}

Test(put_batch, a_stream_to_another_process_arrives_whole_and_in_order_sole, .timeout = 120)
{
	stream(CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER);
}

Test(put_batch, a_stream_to_another_process_arrives_whole_and_in_order_auto, .timeout = 120)
{
	stream(0);
}
