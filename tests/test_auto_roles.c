/* SPDX-License-Identifier: MIT */
/*
 * test_auto_roles.c - the automatic producer and reader roles of a FIFO, and
 * the automatic reader role of a reservoir, created without the
 * CISTERN_SINGLE_* flags (lib/core/roles.c, the guarded plain claims in lib/policy/fifo/fifo.c,
 * the bracketed read calls in lib/api/api.c): the only handle acting in a role
 * holds it, a second one takes it away without the holder's help, the last
 * one left takes it back, and no sample is lost, doubled, reordered or (while
 * pinned) changed on the way, whether the holder is claiming, between
 * claims, stopped or dead.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>

#include "helpers.h"
#include "peek.h"
#include "core/roles.h"

/* Every test's segments go through seg_create(); the fixture removes them, pass or fail. */
TestSuite(auto_roles, .fini = seg_fini);

/* A FIFO of 64-byte slots. */
static struct cistern *create(const char *tag, uint64_t slots, uint32_t expected_producers)
{
	struct cistern_config cfg = {
		.slot_size = 64, .slot_count = slots, .expected_producers = expected_producers};
	return seg_create(tag, cfg);
}

static uint64_t producer_mode(struct cistern *c)
{
	return atomic_load(&c->hdr->auto_producer);
}

static uint64_t reader_mode(struct cistern *c)
{
	return atomic_load(&c->hdr->auto_reader);
}

/* Get one 1-byte sample and say which byte it was (0 if none). */
static char get_one(struct cistern *c)
{
	char buf[64];
	ssize_t n = cistern_get(c, buf, sizeof(buf), NULL, 1000);
	return n == 1 ? buf[0] : 0;
}

Test(auto_roles, lone_producer_and_reader_hold_their_roles)
{
	struct cistern *c = create("ar-lone", 8, 0);
	const char *name = seg_name_of(c);
	struct cistern *r;
	cr_assert_eq(cistern_attach(name, &r), 0);
	cr_assert_eq(producer_mode(c), 0, "nobody holds before the first put");
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(producer_mode(c), c->owner);
	cr_assert(c->producing == CISTERN_HOLD_AUTO);
	cr_assert_eq(get_one(r), 'a');
	cr_assert_eq(reader_mode(c), r->owner);
	cr_assert(cistern__holds_auto(r, CISTERN_ROLE_READER));
	cistern_detach(r);
	cr_assert_eq(reader_mode(c), 0, "a holder that detaches gives the role back");
}

Test(auto_roles, explicit_flags_leave_no_automatic_role)
{
	struct cistern_config cfg = {
		.slot_size = 64, .slot_count = 8, .flags = CISTERN_SINGLE_PRODUCER};
	struct cistern *c = seg_create("ar-flag", cfg);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(producer_mode(c), 0, "the flag's role is not an automatic one");
	cr_assert_not(c->producing == CISTERN_HOLD_AUTO);
	cr_assert_eq(get_one(c), 'a');
	cr_assert_eq(reader_mode(c), c->owner, "the reader role is still automatic");
}

Test(auto_roles, reservoirs_have_an_automatic_reader_role_and_no_producer_role)
{
	struct cistern_config cfg = {
		.slot_size = 64, .slot_count = 8, .policy = CISTERN_RESERVOIR, .watermark = 1};
	struct cistern *c = seg_create("ar-res", cfg);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(get_one(c), 'a');
	cr_assert_eq(producer_mode(c), 0, "a reservoir's producers share their role always");
	cr_assert_eq(reader_mode(c), c->owner);
	cr_assert(cistern__holds_auto(c, CISTERN_ROLE_READER));
	cr_assert_not(cistern__reads_alone(c),
		      "the sole reader's paths are on only inside a read call");
}

Test(auto_roles, firo_has_no_automatic_roles)
{
	struct cistern_config cfg = {
		.slot_size = 64, .slot_count = 8, .policy = CISTERN_FIRO, .watermark = 1};
	struct cistern *c = seg_create("ar-firo", cfg);
	/* Reads start once the population is over the watermark. */
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(get_one(c), 'a');
	cr_assert_eq(producer_mode(c), 0);
	cr_assert_eq(reader_mode(c), 0, "FIRO has no single-reader paths to take");
}

Test(auto_roles, second_producer_takes_the_role_away_and_the_last_one_takes_it_back)
{
	struct cistern *a = create("ar-2p", 8, 0);
	const char *name = seg_name_of(a);
	struct cistern *b;
	cr_assert_eq(cistern_attach(name, &b), 0);
	cr_assert_eq(cistern_put(a, "1", 1, NULL, 0), 0);
	cr_assert(a->producing == CISTERN_HOLD_AUTO);
	cr_assert_eq(cistern_put(b, "2", 1, NULL, 0), 0);
	cr_assert_eq(producer_mode(a), 2 * CISTERN_AUTO_ONE, "no holder, both counted");
	cr_assert_not(b->producing == CISTERN_HOLD_AUTO);
	cr_assert_eq(cistern_put(a, "3", 1, NULL, 0), 0);
	cr_assert_not(a->producing == CISTERN_HOLD_AUTO, "the old holder noticed on its next put");
	cr_assert(a->producing == CISTERN_HOLD_COUNTED);
	cistern_detach(b);
	cr_assert_eq(producer_mode(a), CISTERN_AUTO_ONE, "b's count went with it");
	cr_assert_eq(cistern_put(a, "4", 1, NULL, 0), 0);
	cr_assert_eq(producer_mode(a), a->owner, "the one left holds the role again");
	cr_assert(a->producing == CISTERN_HOLD_AUTO);
	const char *want = "1234";
	for (int i = 0; i < 4; i++)
		cr_assert_eq(get_one(a), want[i], "sample %d", i);
	cr_assert_eq(get_one(a), 0, "nothing more");
}

Test(auto_roles, second_reader_takes_the_role_away_and_each_sample_goes_once)
{
	struct cistern *a = create("ar-2r", 8, 0);
	const char *name = seg_name_of(a);
	struct cistern *b;
	cr_assert_eq(cistern_attach(name, &b), 0);
	for (const char *p = "12345"; *p; p++)
		cr_assert_eq(cistern_put(a, p, 1, NULL, 0), 0);
	cr_assert_eq(get_one(a), '1');
	cr_assert(cistern__holds_auto(a, CISTERN_ROLE_READER));
	cr_assert_eq(get_one(b), '2');
	cr_assert_eq(reader_mode(a), 2 * CISTERN_AUTO_ONE);
	cr_assert_eq(get_one(a), '3');
	cr_assert_not(cistern__holds_auto(a, CISTERN_ROLE_READER));
	cr_assert_eq(get_one(b), '4');
	cistern_detach(b);
	cr_assert_eq(get_one(a), '5');
	cr_assert(cistern__holds_auto(a, CISTERN_ROLE_READER),
		  "the one reader left holds the role again");
}

Test(auto_roles, holder_found_revoked_between_claims_clears_the_revocation_itself)
{
	struct cistern *a = create("ar-ack", 8, 0);
	cr_assert_eq(cistern_put(a, "1", 1, NULL, 0), 0);
	/*
	 * What a revoker that may not fence leaves: the holder marked, both it
	 * and the revoker counted, waiting for the holder's next claim.
	 */
	atomic_store(&a->hdr->auto_producer,
		     a->owner | CISTERN_AUTO_REVOKING | 2 * CISTERN_AUTO_ONE);
	cr_assert_eq(cistern_put(a, "2", 1, NULL, 0), 0);
	cr_assert_eq(producer_mode(a), 2 * CISTERN_AUTO_ONE, "holder cleared, counts kept");
	cr_assert_not(a->producing == CISTERN_HOLD_AUTO);
	cr_assert_eq(get_one(a), '1');
	cr_assert_eq(get_one(a), '2');
}

static uint64_t puts_of(struct cistern *c)
{
	return atomic_load(&c->me->ctr.puts);
}

/*
 * The holder of the producer role mixes its one-step puts with
 * reservations left open across them, committed out of order or aborted:
 * its count of puts is exact after every call.
 */
static void holder_counts_each_put_once(uint32_t flags)
{
	struct cistern_config cfg = {.slot_size = 128, .slot_count = 16, .flags = flags};
	struct cistern *c = seg_create("ar-cnt", cfg);
	struct cistern_slot r1, r2, r3;
	cr_assert_eq(cistern_put(c, "1", 1, NULL, 0), 0);
	cr_assert(c->producing == CISTERN_HOLD_AUTO || c->producing == CISTERN_HOLD_SOLE,
		  "the one producer holds the role");
	cr_assert_eq(puts_of(c), 1);
	cr_assert_eq(cistern_reserve(c, &r1, 0), 0);
	cr_assert_eq(puts_of(c), 1, "an open reservation is no put");
	cr_assert_eq(cistern_put(c, "2", 1, NULL, 0), 0);
	cr_assert_eq(puts_of(c), 2, "a put past an open reservation counts itself only");
	cr_assert_eq(cistern_reserve(c, &r2, 0), 0);
	cr_assert_eq(cistern_reserve(c, &r3, 0), 0);
	cr_assert_eq(cistern_abort(c, &r2), 0);
	cr_assert_eq(cistern_put(c, "3", 1, NULL, 0), 0);
	cr_assert_eq(puts_of(c), 3, "an aborted reservation is no put");
	memcpy(r3.data, "r", 1);
	cr_assert_eq(cistern_commit(c, &r3, 1, NULL), 0);
	cr_assert_eq(puts_of(c), 4);
	memcpy(r1.data, "q", 1);
	cr_assert_eq(cistern_commit(c, &r1, 1, NULL), 0);
	cr_assert_eq(puts_of(c), 5, "commits out of order count once each");
	cr_assert_eq(cistern_put(c, "4", 1, NULL, 0), 0);
	cr_assert_eq(puts_of(c), 6);
	const char *want = "1q2r34"; /* in the order of the positions claimed */
	for (int i = 0; want[i]; i++)
		cr_assert_eq(get_one(c), want[i], "sample %d", i);
	cr_assert_eq(get_one(c), 0, "nothing more");
	/* Many laps of the ring, every put by the one-step path. */
	for (int i = 0; i < 100; i++) {
		cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
		cr_assert_eq(get_one(c), 'x');
	}
	/* Longer than a line: the one-step put's other copy. */
	char big[100], back[128];
	memset(big, 'L', sizeof(big));
	cr_assert_eq(cistern_put(c, big, sizeof(big), NULL, 0), 0);
	cr_assert_eq(puts_of(c), 107);
	cr_assert_eq(cistern_get(c, back, sizeof(back), NULL, 0), (ssize_t)sizeof(big));
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 107);
	cr_assert_eq(st.gets, 107);
}

Test(auto_roles, automatic_holder_counts_each_put_once_past_open_and_aborted_reservations)
{
	holder_counts_each_put_once(0);
}

Test(auto_roles, flag_holder_counts_each_put_once_past_open_and_aborted_reservations)
{
	holder_counts_each_put_once(CISTERN_SINGLE_PRODUCER);
}

Test(auto_roles, each_producer_counts_its_own_puts_as_the_role_passes_between_them)
{
	struct cistern *a = create("ar-cnt2", 16, 0);
	const char *name = seg_name_of(a);
	struct cistern *b;
	cr_assert_eq(cistern_attach(name, &b), 0);
	cr_assert_eq(cistern_put(a, "1", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(a, "2", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(b, "3", 1, NULL, 0), 0); /* takes the role away */
	cr_assert_eq(cistern_put(a, "4", 1, NULL, 0), 0); /* finds it gone */
	cr_assert_eq(cistern_put(b, "5", 1, NULL, 0), 0);
	cr_assert_eq(puts_of(a), 3);
	cr_assert_eq(puts_of(b), 2);
	cistern_detach(b);
	cr_assert_eq(cistern_put(a, "6", 1, NULL, 0), 0); /* takes it back */
	cr_assert(a->producing == CISTERN_HOLD_AUTO);
	cr_assert_eq(cistern_put(a, "7", 1, NULL, 0), 0);
	cr_assert_eq(puts_of(a), 5, "b's puts are not a's, though the tail moved by them");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(a, &st), 0);
	cr_assert_eq(st.puts, 7);
}

/*
 * A producer that died between its claim of position t and its move of the
 * tail leaves the tail at t; the holder that comes next moves the tail past
 * t as well as past its own claim, and still counts only its own put.
 */
Test(auto_roles, holder_helping_the_tail_past_a_dead_claim_does_not_count_it)
{
	struct cistern *a = create("ar-cnt3", 16, 0);
	const char *name = seg_name_of(a);
	struct cistern *d;
	cr_assert_eq(cistern_attach(name, &d), 0);
	cr_assert_eq(cistern_put(a, "1", 1, NULL, 0), 0);
	struct cistern_slot s;
	cr_assert_eq(cistern_reserve(d, &s, 0), 0); /* a claim by CAS: two producers */
	cr_assert_eq(atomic_load(&a->hdr->tail), 2);
	atomic_store(&a->hdr->tail, 1); /* as if d died before it moved the tail */
	cistern_detach(d);              /* its reclaim voids the claim */
	cr_assert_eq(atomic_load(&a->hdr->tail), 1, "the reclaim leaves the tail");
	cr_assert_eq(cistern_put(a, "2", 1, NULL, 0), 0);
	cr_assert_eq(atomic_load(&a->hdr->tail), 3, "past the void and the put");
	cr_assert_eq(puts_of(a), 2);
	cr_assert(a->producing == CISTERN_HOLD_AUTO, "the one producer left holds the role again");
	cr_assert_eq(cistern_put(a, "3", 1, NULL, 0), 0);
	cr_assert_eq(puts_of(a), 3, "the one-step put counts from the tail it moved");
	const char *want = "123";
	for (int i = 0; want[i]; i++)
		cr_assert_eq(get_one(a), want[i], "sample %d", i);
	cr_assert_eq(get_one(a), 0, "nothing more");
}

Test(auto_roles, damaged_mode_word_is_refused_and_the_ring_left_alone)
{
	struct cistern *c = create("ar-bad", 8, 0);
	const char *name = seg_name_of(c);
	struct cistern *r;
	cr_assert_eq(cistern_attach(name, &r), 0);
	/* An owner past the attachment table: no entry to look at. */
	atomic_store(&c->hdr->auto_producer, UINT64_C(0xfff0));
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), -EPROTO);
	/* Our own owner, which we never entered as. */
	atomic_store(&c->hdr->auto_reader, (uint64_t)r->owner);
	char buf[8];
	cr_assert_eq(cistern_get(r, buf, sizeof(buf), NULL, 0), -EPROTO);
	cr_assert_eq(atomic_load(&c->hdr->tail), 0, "nothing was claimed");
	cistern_detach(r);
}

/*
 * A child that takes the producer role with one put ('c'), marks itself in
 * the middle of a claim, and stops (SIGSTOP), as a holder preempted or
 * stopped by a debugger between its claim's stores would be. On SIGCONT it
 * ends the claim and puts 'd'.
 */
static pid_t spawn_stopped_holder(const char *name)
{
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *h;
		if (cistern_attach(name, &h) < 0 || cistern_put(h, "c", 1, NULL, 0) < 0)
			_exit(1);
		if (h->producing != CISTERN_HOLD_AUTO)
			_exit(2);
		atomic_store(&h->me->auto_busy, CISTERN_ROLE_PRODUCER);
		raise(SIGSTOP);
		cistern__auto_end(h);
		if (cistern_put(h, "d", 1, NULL, 0) < 0)
			_exit(3);
		cistern_detach(h);
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, WUNTRACED), pid);
	cr_assert(WIFSTOPPED(status), "the holder stopped in its claim");
	return pid;
}

Test(auto_roles, producer_waits_for_a_stopped_holder_then_refuses_and_loses_nothing, .timeout = 60)
{
	struct cistern *c = create("ar-stop", 8, 0);
	const char *name = seg_name_of(c);
	pid_t pid = spawn_stopped_holder(name);
	uint64_t held = producer_mode(c);
	cr_assert(held != 0 && held < CISTERN_AUTO_REVOKING, "the child holds: %#lx",
		  (unsigned long)held);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), -EBUSY,
		     "a holder in the middle of a claim is never overrun");
	cr_assert_eq(producer_mode(c), held | CISTERN_AUTO_REVOKING | CISTERN_AUTO_ONE,
		     "marked, with only the holder counted: %#lx", (unsigned long)producer_mode(c));
	kill(pid, SIGCONT);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "holder status %#x", status);
	cr_assert_eq(producer_mode(c), 0, "the holder gave up the role and left");
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	cr_assert_eq(get_one(c), 'c');
	cr_assert_eq(get_one(c), 'd');
	cr_assert_eq(get_one(c), 'x');
	cr_assert_eq(get_one(c), 0);
}

Test(auto_roles, dead_holder_in_the_middle_of_a_claim_does_not_stop_the_next_producer,
     .timeout = 60)
{
	struct cistern *c = create("ar-dead", 8, 0);
	const char *name = seg_name_of(c);
	pid_t pid = spawn_stopped_holder(name);
	kill_and_reap(pid);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 1000), 0);
	cr_assert_eq(get_one(c), 'c');
	cr_assert_eq(get_one(c), 'x');
	cr_assert_eq(get_one(c), 0);
}

/*
 * Read producers 0 and 1 (sim_id) to end of data: each sample intact and in
 * its producer's order (time_step), want0 and want1 of them.
 */
static void read_two_streams(struct cistern *c, uint32_t want0, uint32_t want1)
{
	uint32_t next[2] = {0, 0}, bad = 0;
	uint8_t buf[64];
	struct cistern_meta m;
	ssize_t n;
	while ((n = cistern_get(c, buf, sizeof(buf), &m, 10000)) == 64) {
		if (m.sim_id > 1 || m.time_step != next[m.sim_id] ||
		    !check_payload(buf, sizeof(buf), m.sim_id, m.time_step))
			bad++;
		else
			next[m.sim_id]++;
	}
	cr_assert_eq(n, CISTERN_EOD, "ended with %zd", n);
	cr_assert_eq(bad, 0, "%u samples out of order, doubled or damaged", bad);
	cr_assert_eq(next[0], want0);
	cr_assert_eq(next[1], want1);
}

/*
 * Producers 0 and 1 stream COUNT samples each through a small ring while
 * the parent reads. Producer 1 joins once producer 0 has put a quarter of
 * its samples (taking the role from it mid-stream) and detaches half-way
 * (so producer 0 takes it back); every sample must arrive once, intact, and
 * in its producer's order, then end of data.
 */
static void two_producers(uint64_t slots)
{
	enum { COUNT = 100000 };
	struct cistern *c = create("ar-mp", slots, 2);
	const char *name = seg_name_of(c);
	_Atomic uint32_t *progress = shared_alloc(sizeof(*progress));
	cr_assert_not_null(progress);
	for (uint32_t id = 0; id < 2; id++) {
		if (fork_child() != 0)
			continue;
		struct cistern *p;
		if (cistern_attach(name, &p) < 0)
			_exit(1);
		while (id == 1 && atomic_load(progress) < COUNT / 4)
			sched_yield();
		uint8_t msg[64];
		for (uint32_t i = 0; i < COUNT; i++) {
			fill_payload(msg, sizeof(msg), id, i);
			struct cistern_meta m = {.sim_id = id, .time_step = i};
			if (cistern_put(p, msg, sizeof(msg), &m, -1) < 0)
				_exit(2);
			if (id == 0)
				atomic_store(progress, i + 1);
		}
		if (cistern_producer_done(p) < 0)
			_exit(3);
		cistern_detach(p);
		_exit(0);
	}
	read_two_streams(c, COUNT, COUNT);
	cr_assert_eq(reap_all(), 0);
}

Test(auto_roles, producers_joining_and_leaving_a_full_ring_lose_and_reorder_nothing, .timeout = 120)
{
	two_producers(16);
}

/* A ring the reader keeps empty: the two producers race for the same tail. */
Test(auto_roles, producers_joining_and_leaving_a_roomy_ring_lose_and_reorder_nothing,
     .timeout = 120)
{
	two_producers(4096);
}

/*
 * Producer 0 streams while producer 1 attaches, puts a short run and
 * detaches, again and again: each arrival takes the role away from
 * producer 0 and each departure lets it take the role back, under load.
 */
Test(auto_roles, producers_churning_in_and_out_lose_and_reorder_nothing, .timeout = 120)
{
	enum { COUNT = 60000, VISITS = 60, RUN = 100 };
	struct cistern *c = create("ar-churn", 64, 2);
	const char *name = seg_name_of(c);
	for (uint32_t id = 0; id < 2; id++) {
		if (fork_child() != 0)
			continue;
		uint32_t total = id == 0 ? COUNT : VISITS * RUN;
		uint8_t msg[64];
		struct cistern *p = NULL;
		for (uint32_t i = 0; i < total; i++) {
			if (!p && cistern_attach(name, &p) < 0)
				_exit(1);
			fill_payload(msg, sizeof(msg), id, i);
			struct cistern_meta m = {.sim_id = id, .time_step = i};
			if (cistern_put(p, msg, sizeof(msg), &m, -1) < 0)
				_exit(2);
			if (id == 1 && i % RUN == RUN - 1 && i + 1 < total) {
				cistern_detach(p);
				p = NULL;
			}
		}
		if (cistern_producer_done(p) < 0)
			_exit(3);
		cistern_detach(p);
		_exit(0);
	}
	read_two_streams(c, COUNT, VISITS * RUN);
	cr_assert_eq(reap_all(), 0);
	cr_assert_eq(producer_mode(c), 0, "everyone left: nobody holds, nobody counted");
}

/*
 * One producer streams; reader 0 starts, reader 1 joins a quarter of the way
 * through and leaves half-way; each marks what it got in a shared table.
 * Every sample must be taken exactly once, each reader's in increasing order.
 */
Test(auto_roles, readers_joining_and_leaving_a_stream_take_each_sample_once, .timeout = 120)
{
	enum { COUNT = 100000 };
	struct cistern *c = create("ar-mr", 16, 1);
	const char *name = seg_name_of(c);
	_Atomic uint8_t *taken = shared_alloc(COUNT);
	_Atomic uint32_t *progress = shared_alloc(sizeof(*progress));
	cr_assert(taken && progress);
	for (uint32_t id = 0; id < 2; id++) {
		if (fork_child() != 0)
			continue;
		struct cistern *r;
		if (cistern_attach(name, &r) < 0)
			_exit(1);
		while (id == 1 && atomic_load(progress) < COUNT / 4)
			sched_yield();
		uint8_t buf[64];
		struct cistern_meta m;
		int64_t last = -1;
		ssize_t n;
		while ((n = cistern_get(r, buf, sizeof(buf), &m, 10000)) == 64) {
			if (m.time_step >= COUNT || (int64_t)m.time_step <= last ||
			    !check_payload(buf, sizeof(buf), 0, m.time_step))
				_exit(2);
			last = m.time_step;
			atomic_fetch_add(&taken[m.time_step], 1);
			if (id == 0)
				atomic_store(progress, m.time_step);
			if (id == 1 && m.time_step >= COUNT / 2)
				break;
		}
		if (id == 0 && n != CISTERN_EOD)
			_exit(3);
		cistern_detach(r);
		_exit(0);
	}
	uint8_t msg[64];
	for (uint32_t i = 0; i < COUNT; i++) {
		fill_payload(msg, sizeof(msg), 0, i);
		struct cistern_meta m = {.time_step = i};
		cr_assert_eq(cistern_put(c, msg, sizeof(msg), &m, -1), 0);
	}
	cr_assert_eq(cistern_producer_done(c), 0);
	cr_assert_eq(reap_all(), 0);
	uint32_t missing = 0, doubled = 0;
	for (uint32_t i = 0; i < COUNT; i++) {
		missing += taken[i] == 0;
		doubled += taken[i] > 1;
	}
	cr_assert_eq(missing, 0, "%u samples never taken", missing);
	cr_assert_eq(doubled, 0, "%u samples taken twice", doubled);
}

/*
 * Many short runs of one producer process and one reader with no flags:
 * each close races the automatic holder's last plain claims, and end of
 * data must never come before the last sample (fifo_drained()).
 */
Test(auto_roles, end_of_data_never_comes_before_the_last_sample, .timeout = 120)
{
	for (int run = 0; run < 100; run++) {
		struct cistern *c = create("ar-eod", 16, 1);
		const char *name = seg_name_of(c);
		pid_t pid = fork_child();
		if (pid == 0) {
			struct cistern *p;
			if (cistern_attach(name, &p) < 0)
				_exit(1);
			for (uint32_t i = 0; i < 50; i++)
				if (cistern_put(p, &i, sizeof(i), NULL, -1) < 0)
					_exit(2);
			_exit(cistern_producer_done(p) < 0 ? 3 : 0);
		}
		uint32_t v, got = 0;
		ssize_t n;
		while ((n = cistern_get(c, &v, sizeof(v), NULL, 10000)) == sizeof(v)) {
			cr_assert_eq(v, got, "run %d: sample %u out of order", run, got);
			got++;
		}
		cr_assert_eq(n, CISTERN_EOD);
		cr_assert_eq(got, 50, "run %d: end of data after %u samples", run, got);
		cr_assert_eq(reap_all(), 0);
		seg_drop(c); /* the next run makes the segment again */
	}
}

/* A reservoir reader's batch: every member intact when taken and again before release. */
static int check_batch(struct cistern *r, size_t n, int timeout_ms)
{
	struct cistern_sample out[16];
	int got = cistern_acquire_batch(r, out, n, timeout_ms);
	if (got < 0)
		return got == -EAGAIN || got == -ETIMEDOUT ? 0 : got;
	int bad = 0;
	for (int i = 0; i < got; i++)
		bad += !check_payload(out[i].data, out[i].len, 0, out[i].meta.time_step);
	sched_yield(); /* let the producer evict what it may meanwhile */
	for (int i = 0; i < got; i++)
		bad += !check_payload(out[i].data, out[i].len, 0, out[i].meta.time_step);
	if (cistern_release_batch(r, out, (size_t)got) < 0)
		return -EPROTO;
	return bad ? -EBADMSG : 0;
}

Test(auto_roles, reservoir_reader_role_is_taken_away_and_back_with_pins_held)
{
	struct cistern_config cfg = {
		.slot_size = 64, .slot_count = 64, .policy = CISTERN_RESERVOIR, .watermark = 8};
	struct cistern *a = seg_create("ar-rpin", cfg);
	const char *name = seg_name_of(a);
	struct cistern *b;
	cr_assert_eq(cistern_attach(name, &b), 0);
	uint8_t msg[64];
	for (uint32_t i = 0; i < 64; i++) {
		fill_payload(msg, sizeof(msg), 0, i);
		struct cistern_meta m = {.time_step = i};
		cr_assert_eq(cistern_put(a, msg, sizeof(msg), &m, 0), 0);
	}
	struct cistern_sample sa[16], sb[16];
	cr_assert_eq(cistern_acquire_batch(a, sa, 16, 0), 16);
	cr_assert_eq(reader_mode(a), a->owner, "a holds, with 16 pins stored plainly");
	cr_assert_eq(cistern_acquire_batch(b, sb, 16, 0), 16);
	cr_assert_eq(reader_mode(a), 2 * CISTERN_AUTO_ONE, "b took the role away");
	/* a's release now finds the role gone and unpins with atomic operations. */
	cr_assert_eq(cistern_release_batch(a, sa, 16), 0);
	cr_assert_not(cistern__holds_auto(a, CISTERN_ROLE_READER));
	bool pinned;
	uint64_t seen = seen_sum(a, &pinned);
	cr_assert(pinned, "b's pins are still there");
	cr_assert_eq(cistern_release_batch(b, sb, 16), 0);
	seen = seen_sum(a, &pinned);
	cr_assert_not(pinned, "every pin went back");
	cr_assert_eq(seen, 32, "each read counted once: %lu", (unsigned long)seen);
	cistern_detach(b);
	cr_assert_eq(check_batch(a, 16, 0), 0);
	cr_assert_eq(reader_mode(a), a->owner, "the one reader left holds the role again");
	seen = seen_sum(a, &pinned);
	cr_assert_not(pinned);
	cr_assert_eq(seen, 48);
}

/*
 * A full reservoir that a producer keeps refilling (evicting what was
 * seen), reader 0 taking batches all along, reader 1 arriving and leaving
 * again and again: no batch member may change while it is pinned, whoever
 * holds the role and however it pinned, and no pin may be left at the end.
 */
Test(auto_roles, reservoir_readers_churning_never_see_a_pinned_sample_change, .timeout = 120)
{
	enum { BATCHES = 20000, VISITS = 100, PER_VISIT = 100 };
	/* Few slots, so that the two readers keep pinning the same ones. */
	struct cistern_config cfg = {
		.slot_size = 64, .slot_count = 16, .policy = CISTERN_RESERVOIR, .watermark = 8};
	struct cistern *c = seg_create("ar-rchurn", cfg);
	const char *name = seg_name_of(c);
	_Atomic uint32_t *stop = shared_alloc(sizeof(*stop));
	cr_assert_not_null(stop);
	pid_t prod = fork_child();
	if (prod == 0) {
		struct cistern *p;
		if (cistern_attach(name, &p) < 0)
			_exit(1);
		uint8_t msg[64];
		for (uint32_t i = 0; !atomic_load(stop); i++) {
			fill_payload(msg, sizeof(msg), 0, i);
			struct cistern_meta m = {.time_step = i};
			int r = cistern_put(p, msg, sizeof(msg), &m, 10);
			if (r < 0 && r != -ETIMEDOUT && r != -EAGAIN)
				_exit(2);
		}
		cistern_detach(p);
		_exit(0);
	}
	for (uint32_t id = 0; id < 2; id++) {
		if (fork_child() != 0)
			continue;
		struct cistern *r = NULL;
		uint32_t total = id == 0 ? BATCHES : VISITS * PER_VISIT;
		for (uint32_t k = 0; k < total; k++) {
			if (!r && cistern_attach(name, &r) < 0)
				_exit(1);
			int e = check_batch(r, 8, 1000);
			if (e < 0)
				_exit(e == -EBADMSG ? 3 : 4);
			if (id == 1 && k % PER_VISIT == PER_VISIT - 1) {
				cistern_detach(r);
				r = NULL;
			}
		}
		if (r)
			cistern_detach(r);
		_exit(0);
	}
	/* Readers first (the producer puts until told to stop). */
	int bad = 0, status;
	for (int i = 0; i < 2; i++) {
		pid_t w = wait(&status);
		cr_assert(w > 0);
		if (w == prod) {
			i--;
			bad++;
			continue;
		}
		bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 3,
			  "a pinned sample changed under a reader");
	}
	atomic_store(stop, 1);
	cr_assert_eq(reap_all(), 0);
	cr_assert_eq(bad, 0, "a reader or the producer failed");
	bool pinned;
	seen_sum(c, &pinned);
	cr_assert_not(pinned, "a pin was left behind");
	cr_assert_eq(reader_mode(c), 0, "every reader left: nobody holds, nobody counted");
}
