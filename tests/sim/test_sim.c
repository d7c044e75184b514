/* SPDX-License-Identifier: MIT */
/*
 * test_sim.c - the simulation client (sim/cistern_sim.h) in C, through a
 * server, and from Fortran (tests/sim/fortran_put.f90, whose samples these
 * tests read back field by field).
 */
#include "helpers.h"

#include <cistern_sim.h>
#include <cistern/remote.h>

TestSuite(sim, .fini = seg_fini, .timeout = 60);

/* u:float64[2,3] at 0, step:int32[] at 48, x:float32[4] at 52; 72 bytes a sample. */
#define SCHEMA "u:float64[2,3];step:int32[];x:float32[4]"
#define U_AT 0
#define STEP_AT 48
#define X_AT 52
#define SAMPLE 72

static struct cistern *schema_segment(const char *tag, uint32_t producers)
{
	return seg_create(tag, (struct cistern_config){.slot_count = 16,
						       .schema = SCHEMA,
						       .expected_producers = producers});
}

static struct cistern_sim *open_sim(const char *target, uint32_t sim_id)
{
	struct cistern_sim *s = NULL;
	int rc = cistern_sim_open(target, sim_id, &s);
	cr_assert_eq(rc, 0, "open %s: %s", target, cistern_sim_problem(NULL));
	return s;
}

/* Declare the three fields of SCHEMA: their indexes in f[0..2]. */
static void declare_all(struct cistern_sim *s, int f[3])
{
	f[0] = cistern_sim_field(s, "u", CISTERN_FLOAT64, 6);
	f[1] = cistern_sim_field(s, "step", CISTERN_INT32, 1);
	f[2] = cistern_sim_field(s, "x", CISTERN_FLOAT32, 4);
	cr_assert(f[0] >= 0 && f[1] >= 0 && f[2] >= 0, "declare: %s", cistern_sim_problem(s));
}

/* Send step t of the values fortran_put.f90's "sim" mode sends. */
static void send_step(struct cistern_sim *s, const int f[3], int t)
{
	double u[6];
	float x[4];
	for (int i = 0; i < 6; i++)
		u[i] = 10.0 * t + i + 1;
	for (int i = 0; i < 4; i++)
		x[i] = (float)t + (float)(i + 1) / 4.0f;
	int32_t step = t;
	cr_assert_eq(cistern_sim_write(s, f[0], u), 0);
	cr_assert_eq(cistern_sim_write(s, f[1], &step), 0);
	cr_assert_eq(cistern_sim_write(s, f[2], x), 0);
	int rc = cistern_sim_send(s, (uint32_t)t, 5000);
	cr_assert_eq(rc, 0, "send %d: %s", t, cistern_sim_problem(s));
}

/* Read the next sample and check it is step t of sim sim_id, field by field. */
static void expect_step(struct cistern *c, uint32_t sim_id, int t)
{
	unsigned char buf[256];
	struct cistern_meta m;
	ssize_t n = cistern_get(c, buf, sizeof(buf), &m, 5000);
	cr_assert_eq(n, SAMPLE, "step %d: got %zd bytes", t, n);
	cr_assert_eq(m.sim_id, sim_id);
	cr_assert_eq(m.time_step, (uint32_t)t);
	double u[6];
	memcpy(u, buf + U_AT, sizeof(u));
	for (int i = 0; i < 6; i++)
		cr_assert_eq(u[i], 10.0 * t + i + 1, "step %d: u[%d] = %g", t, i, u[i]);
	int32_t step;
	memcpy(&step, buf + STEP_AT, sizeof(step));
	cr_assert_eq(step, t);
	float x[4];
	memcpy(x, buf + X_AT, sizeof(x));
	for (int i = 0; i < 4; i++)
		cr_assert_eq(x[i], (float)t + (float)(i + 1) / 4.0f, "step %d: x[%d] = %g", t, i,
			     (double)x[i]);
}

Test(sim, steps_sent_arrive_field_by_field_with_their_ids)
{
	struct cistern *c = schema_segment("steps", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 7);
	cr_assert_eq(cistern_sim_sample_size(s), SAMPLE);
	int f[3];
	declare_all(s, f);
	for (int t = 0; t < 3; t++)
		send_step(s, f, t);
	cistern_sim_close(s);
	for (int t = 0; t < 3; t++)
		expect_step(c, 7, t);
}

Test(sim, undeclared_fields_stay_zero)
{
	struct cistern *c = schema_segment("zero", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 1);
	int step = cistern_sim_field(s, "step", CISTERN_INT32, 1);
	int32_t v = 42;
	cr_assert_eq(cistern_sim_write(s, step, &v), 0);
	cr_assert_eq(cistern_sim_send(s, 0, 0), 0);
	cistern_sim_close(s);
	unsigned char buf[SAMPLE], zero[SAMPLE] = {0};
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), SAMPLE);
	cr_assert_eq(memcmp(buf + U_AT, zero, 48), 0);
	cr_assert_eq(memcmp(buf + X_AT, zero, 16), 0);
}

Test(sim, a_segment_without_schema_is_refused_with_a_reason)
{
	struct cistern *c = seg_create("noschema", (struct cistern_config){.slot_count = 4});
	struct cistern_sim *s = NULL;
	cr_assert_eq(cistern_sim_open(seg_name_of(c), 0, &s), -EINVAL);
	cr_assert_null(s);
	cr_assert(strstr(cistern_sim_problem(NULL), "no schema"), "%s", cistern_sim_problem(NULL));
}

Test(sim, a_missing_segment_is_enoent)
{
	struct cistern_sim *s = NULL;
	cr_assert_eq(cistern_sim_open(seg_name("missing"), 0, &s), -ENOENT);
	cr_assert(strstr(cistern_sim_problem(NULL), "cannot attach"), "%s",
		  cistern_sim_problem(NULL));
}

Test(sim, a_field_the_schema_lacks_is_enoent_and_named)
{
	struct cistern *c = schema_segment("nofield", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 0);
	cr_assert_eq(cistern_sim_field(s, "v", CISTERN_FLOAT64, 6), -ENOENT);
	cr_assert(strstr(cistern_sim_problem(s), "no field named v"), "%s", cistern_sim_problem(s));
	cistern_sim_close(s);
}

Test(sim, a_field_of_another_dtype_is_eprototype)
{
	struct cistern *c = schema_segment("dtype", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 0);
	cr_assert_eq(cistern_sim_field(s, "u", CISTERN_FLOAT32, 6), -EPROTOTYPE);
	cr_assert(strstr(cistern_sim_problem(s), "float64"), "%s", cistern_sim_problem(s));
	cistern_sim_close(s);
}

Test(sim, a_field_of_another_count_is_emsgsize)
{
	struct cistern *c = schema_segment("count", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 0);
	cr_assert_eq(cistern_sim_field(s, "u", CISTERN_FLOAT64, 5), -EMSGSIZE);
	cistern_sim_close(s);
}

Test(sim, declaring_a_field_again_gives_its_index)
{
	struct cistern *c = schema_segment("again", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 0);
	int a = cistern_sim_field(s, "x", CISTERN_FLOAT32, 4);
	int b = cistern_sim_field(s, "u", CISTERN_FLOAT64, 6);
	cr_assert_eq(cistern_sim_field(s, "x", CISTERN_FLOAT32, 4), a);
	cr_assert_neq(a, b);
	cistern_sim_close(s);
}

Test(sim, a_step_with_a_field_unwritten_is_enodata_and_sends_nothing)
{
	struct cistern *c = schema_segment("unwritten", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 0);
	int f[3];
	declare_all(s, f);
	send_step(s, f, 0);
	double u[6] = {0};
	cr_assert_eq(cistern_sim_write(s, f[0], u), 0);
	cr_assert_eq(cistern_sim_send(s, 1, 0), -ENODATA);
	cr_assert(strstr(cistern_sim_problem(s), "field step"), "%s", cistern_sim_problem(s));
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.puts, 1);
	cistern_sim_close(s);
}

Test(sim, a_field_written_in_place_counts_as_written_at_every_send)
{
	struct cistern *c = schema_segment("inplace", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 0);
	int step = cistern_sim_field(s, "step", CISTERN_INT32, 1);
	int32_t *at = cistern_sim_field_data(s, step);
	cr_assert_not_null(at);
	for (int32_t t = 0; t < 2; t++) {
		*at = 40 + t;
		cr_assert_eq(cistern_sim_send(s, (uint32_t)t, 0), 0, "%s", cistern_sim_problem(s));
	}
	cistern_sim_close(s);
	unsigned char buf[SAMPLE];
	for (int32_t t = 0; t < 2; t++) {
		cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), SAMPLE);
		int32_t v;
		memcpy(&v, buf + STEP_AT, sizeof(v));
		cr_assert_eq(v, 40 + t);
	}
}

Test(sim, writing_an_undeclared_index_is_einval)
{
	struct cistern *c = schema_segment("index", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 0);
	double u[6] = {0};
	cr_assert_eq(cistern_sim_write(s, 0, u), -EINVAL);
	cr_assert_null(cistern_sim_field_data(s, 3));
	cistern_sim_close(s);
}

Test(sim, done_closes_reception_of_the_last_expected_producer)
{
	struct cistern *c = schema_segment("done", 1);
	struct cistern_sim *s = open_sim(seg_name_of(c), 0);
	int f[3];
	declare_all(s, f);
	send_step(s, f, 0);
	cr_assert_eq(cistern_sim_done(s, 0), 0);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert(st.reception_closed);
	cistern_sim_close(s);
}

Test(sim, a_send_after_done_is_epipe)
{
	struct cistern *c = schema_segment("afterdone", 0);
	struct cistern_sim *s = open_sim(seg_name_of(c), 0);
	int f[3];
	declare_all(s, f);
	cr_assert_eq(cistern_sim_done(s, 0), 0);
	int32_t v = 1;
	double u[6] = {0};
	float x[4] = {0};
	cistern_sim_write(s, f[0], u);
	cistern_sim_write(s, f[1], &v);
	cistern_sim_write(s, f[2], x);
	cr_assert_eq(cistern_sim_send(s, 1, 0), -EPIPE);
	cistern_sim_close(s);
}

Test(sim, reserve_and_commit_without_structs_publish_the_sample)
{
	struct cistern *c = seg_create("slot",
				       (struct cistern_config){.slot_count = 4, .slot_size = 64});
	struct cistern_sim_slot *slot;
	void *data;
	uint64_t cap;
	cr_assert_eq(cistern_sim_reserve(c, &slot, &data, &cap, 0), 0);
	cr_assert_eq(cap, 64);
	memcpy(data, "hello", 5);
	cr_assert_eq(cistern_sim_commit(c, slot, 5, 3, 9), 0);
	cr_assert_eq(cistern_sim_reserve(c, &slot, &data, &cap, 0), 0);
	cr_assert_eq(cistern_sim_abort(c, slot), 0);
	char buf[64];
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), &m, 0), 5);
	cr_assert_eq(memcmp(buf, "hello", 5), 0);
	cr_assert_eq(m.sim_id, 3);
	cr_assert_eq(m.time_step, 9);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), &m, 0), -EAGAIN);
}

/* A server of segment `name` on an ipc endpoint, in a child, for up to 20 s. */
static pid_t serve(const char *name, char *ep, size_t cap)
{
	snprintf(ep, cap, "ipc:///tmp/cistern-test-sim-%d.sock", (int)getpid());
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		const char *eps[] = {ep};
		const char *segs[] = {name};
		struct cistern_server_opts o = {.size = sizeof(o),
						.endpoints = eps,
						.n_endpoints = 1,
						.segments = segs,
						.ranks = 1};
		struct cistern_server *srv;
		if (cistern_server_create(&o, &srv) < 0)
			_exit(3);
		say_ready(p[1]);
		cistern_server_run(srv, 20000);
		cistern_server_close(srv, 1000);
		_exit(0);
	}
	pid = await_ready(p, pid);
	cr_assert_gt(pid, 0, "the server did not start");
	return pid;
}

Test(sim, steps_sent_through_a_server_arrive_field_by_field)
{
	struct cistern *c = schema_segment("remote", 1);
	char ep[128];
	pid_t srv = serve(seg_name_of(c), ep, sizeof(ep));
	struct cistern_sim *s = open_sim(ep, 5);
	cr_assert_eq(cistern_sim_sample_size(s), SAMPLE);
	int f[3];
	declare_all(s, f);
	for (int t = 0; t < 3; t++)
		send_step(s, f, t);
	cr_assert_eq(cistern_sim_done(s, 10000), 0, "%s", cistern_sim_problem(s));
	cistern_sim_close(s);
	kill_and_reap(srv);
	unlink(ep + strlen("ipc://"));
	for (int t = 0; t < 3; t++)
		expect_step(c, 5, t);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert(st.reception_closed);
}

/* Run tests/sim/fortran_put on segment `name` in `mode`; its exit status. */
static int fortran_put(const char *name, const char *mode)
{
	if (FORTRAN_PUT[0] == '\0')
		cr_skip_test("no Fortran module to test: %s", FORTRAN_MISSING);
	pid_t pid = fork_child();
	if (pid == 0) {
		execl(FORTRAN_PUT, FORTRAN_PUT, name, mode, (char *)NULL);
		_exit(127);
	}
	cr_assert_gt(pid, 0);
	return reap_status(pid);
}

Test(sim, fortran_steps_arrive_field_by_field)
{
	struct cistern *c = schema_segment("fsim", 1);
	cr_assert_eq(fortran_put(seg_name_of(c), "sim"), 0);
	for (int t = 0; t < 3; t++)
		expect_step(c, 7, t);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert(st.reception_closed, "the Fortran simulation's done did not close reception");
}

Test(sim, fortran_puts_of_reals_and_doubles_arrive_as_written)
{
	struct cistern *c = seg_create("fput",
				       (struct cistern_config){.slot_count = 4, .slot_size = 64});
	cr_assert_eq(fortran_put(seg_name_of(c), "put"), 0);
	float r[5];
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, r, sizeof(r), &m, 0), (ssize_t)sizeof(r));
	for (int i = 0; i < 5; i++)
		cr_assert_eq(r[i], (float)(i + 1) / 2.0f);
	cr_assert_eq(m.sim_id, 1);
	cr_assert_eq(m.time_step, 0);
	double d[3];
	cr_assert_eq(cistern_get(c, d, sizeof(d), &m, 0), (ssize_t)sizeof(d));
	for (int i = 0; i < 3; i++)
		cr_assert_eq(d[i], (double)(i + 1) / 2.0);
	cr_assert_eq(m.time_step, 1);
}

Test(sim, fortran_reserve_and_commit_publish_and_abort_drops)
{
	struct cistern *c = seg_create("fslot",
				       (struct cistern_config){.slot_count = 4, .slot_size = 64});
	cr_assert_eq(fortran_put(seg_name_of(c), "slot"), 0);
	double d[4];
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, d, sizeof(d), &m, 0), (ssize_t)sizeof(d));
	for (int i = 0; i < 4; i++)
		cr_assert_eq(d[i], 101.0 + i);
	cr_assert_eq(m.sim_id, 2);
	cr_assert_eq(m.time_step, 5);
	cr_assert_eq(cistern_get(c, d, sizeof(d), &m, 0), -EAGAIN,
		     "the aborted slot was published");
}

Test(sim, fortran_callers_get_testable_error_codes)
{
	struct cistern *c = schema_segment("fbad", 0);
	cr_assert_eq(fortran_put(seg_name_of(c), "bad"), 0);
}
