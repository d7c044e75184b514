/* SPDX-License-Identifier: MIT */
/*
 * test_crash_points.c - a process dying between two steps of the FIFO protocol.
 *
 * Each test puts the segment in the exact state a process leaves when it is
 * killed at one point of fifo.c's protocol (a slot claimed but the index not
 * moved, a sample taken but the head not moved, a reclaim cut between marking
 * a slot and raising the hint, ...), by running a child that does the first
 * step through the internal headers and then dies by SIGKILL. The survivors
 * must neither wedge nor lose nor duplicate a committed sample.
 */
#include <criterion/criterion.h>
#include <fcntl.h>

#include "helpers.h"
#include "core/roles.h"
#include "core/open.h"
#include "core/liveness.h"

/* The FIFO word encoding, as lib/policy/fifo/fifo.h defines it (kept private to lib/). */
enum { F_FREE = 0, F_RESERVED = 1, F_COMMITTED = 2, F_ACQUIRED = 3, F_SKIP = 4, F_REDELIVER = 5 };

static uint64_t word(uint64_t pos, unsigned state, uint32_t owner)
{
	return ((pos & ((UINT64_C(1) << 48) - 1)) << 16) | ((uint64_t)state << 12) |
	       (owner & 0xfff);
}

static unsigned word_state(uint64_t w)
{
	return (unsigned)(w >> 12) & 0xf;
}

/* Reap child `pid`, which must have done its first step and died by SIGKILL. */
static void reap_killed(pid_t pid)
{
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "the child failed its first step (status %d)", status);
}

/*
 * Fork a child that attaches, moves slot `index` from `from` to `to` (with the
 * child's owner id filled in where `to` wants one) by CAS, and dies by SIGKILL
 * without touching anything else: the first step of a two-step update, done.
 */
static void die_after_cas(const char *name, uint32_t index, uint64_t from_pos, unsigned from,
			  unsigned to)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *c;
		if (cistern_attach(name, &c) < 0)
			_exit(1);
		uint64_t w = word(from_pos, from, 0);
		if (!atomic_compare_exchange_strong(&cistern__slotmeta(c, index)->word, &w,
						    word(from_pos, to, c->owner)))
			_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	reap_killed(pid);
}

static struct cistern *make_flagged(const char *tag, char *name, size_t len, uint64_t slots,
				    uint32_t flags)
{
	snprintf(name, len, "t-%s-%d", tag, (int)getpid());
	cistern_unlink(name);
	struct cistern_config cfg = {.slot_size = 16, .slot_count = slots, .flags = flags};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	return c;
}

static struct cistern *make(const char *tag, char *name, size_t len, uint64_t slots)
{
	return make_flagged(tag, name, len, slots, 0);
}

static void drop(struct cistern *c, const char *name)
{
	cistern_detach(c);
	cistern_unlink(name);
}

/* Take (F_WRLCK) or drop (F_UNLCK) an OFD lock on byte `at` of r's shm object; 0 or -1. */
static int ofd_lock(struct cistern *r, off_t at, short type)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
	return fcntl(r->fd, F_OFD_SETLK, &fl);
}

/*
 * Fork a process that begins a reclaim of entry `dead` and dies in it: it
 * takes the entry's intent lock (when `intent`) and its entry lock, marks the
 * entry RECLAIMING (when `mark`), holds all that for `hold_ms`, and is
 * killed. Returns its pid, unreaped, once those steps are done; fails the
 * test if the process could not do them.
 */
static pid_t reclaimer_dying_after(const char *name, uint32_t dead, bool intent, bool mark,
				   unsigned hold_ms)
{
	_Atomic uint32_t *started = shared_alloc(sizeof(*started));
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *r;
		if (cistern__open_mapped(name, false, false, &r) < 0)
			_exit(1);
		if (intent && ofd_lock(r, CISTERN_INTENT_BASE + dead - 1, F_WRLCK) < 0)
			_exit(2);
		if (ofd_lock(r, CISTERN_LOCK_BASE + dead - 1, F_WRLCK) < 0)
			_exit(3);
		if (mark)
			atomic_store(&cistern__procs(r)[dead - 1].state, CISTERN_PROC_RECLAIMING);
		atomic_store(started, 1);
		usleep(hold_ms * 1000);
		raise(SIGKILL);
		_exit(4);
	}
	while (!atomic_load(started)) {
		/* WNOWAIT: the caller reaps it. */
		siginfo_t si = {0};
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    si.si_pid == pid && !atomic_load(started))
			cr_assert_fail("the reclaimer could not take its steps (exit %d)",
				       si.si_status);
		usleep(1000);
	}
	return pid;
}

/*
 * Put one sample (payload `v`), close reception when `close`, and have a
 * reader take it, move the head past it and die holding it. Returns the dead
 * reader's owner id (its entry is owner - 1).
 */
static uint32_t last_sample_held_by_a_dead_reader(struct cistern *c, const char *name, char v,
						  bool close)
{
	cr_assert_eq(cistern_put(c, &v, 1, NULL, 0), 0);
	if (close)
		cr_assert_eq(cistern_close_reception(c), 0);
	die_after_cas(name, 0, 0, F_COMMITTED, F_ACQUIRED);
	atomic_store(&c->hdr->head, 1);
	return (uint32_t)(atomic_load(&cistern__slotmeta(c, 0)->word) & 0xfff);
}

Test(crash_points, producer_dead_after_claim_before_tail_moves_does_not_block_producers)
{
	char name[64];
	struct cistern *c = make("cp-claim", name, sizeof(name), 4);
	die_after_cas(name, 0, 0, F_FREE, F_RESERVED);
	cr_assert_eq(atomic_load(&c->hdr->tail), 0, "the dead producer never moved the tail");
	/* The next producer finds position 0 claimed, helps the tail on and takes 1. */
	cr_assert_eq(cistern_put(c, "one", 3, NULL, 0), 0);
	cr_assert_eq(atomic_load(&c->hdr->tail), 2);
	char buf[16];
	/* The head waits on the dead reservation until a sweep turns it into a skip. */
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 2000), 3);
	cr_assert_eq(memcmp(buf, "one", 3), 0);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN, "nothing else");
	drop(c, name);
}

Test(crash_points, producer_dead_after_claim_before_tail_moves_still_reaches_end_of_data)
{
	char name[64];
	struct cistern *c = make("cp-eod", name, sizeof(name), 4);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	/* Position 1 is claimed by a producer that dies before moving tail past it. */
	die_after_cas(name, 1, 1, F_FREE, F_RESERVED);
	/* Someone sweeps first (an attach, a waiting peer): the claim becomes a skip. */
	cr_assert_eq(cistern__sweep(c), 1);
	cr_assert_eq(word_state(atomic_load(&cistern__slotmeta(c, 1)->word)), F_SKIP);
	cr_assert_eq(cistern_close_reception(c), 0);
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 2000), 1);
	/*
	 * The reader steps over the reclaimed reservation and so moves the head
	 * past a tail nobody is left to move: that must still read as drained.
	 */
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 2000), CISTERN_EOD);
	drop(c, name);
}

Test(crash_points, reader_dead_after_take_before_head_moves_loses_nothing)
{
	char name[64];
	struct cistern *c = make("cp-take", name, sizeof(name), 4);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), 0);
	die_after_cas(name, 0, 0, F_COMMITTED, F_ACQUIRED);
	cr_assert_eq(atomic_load(&c->hdr->head), 0, "the dead reader never moved the head");
	char buf[16];
	/* The next reader helps the head past the taken slot and gets "b". */
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(buf[0], 'b');
	/* Then a sweep hands "a" out again. */
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 2000), 1);
	cr_assert_eq(buf[0], 'a');
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN, "no third sample");
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.redeliveries, 1);
	drop(c, name);
}

Test(crash_points, reader_dead_holding_the_last_sample_does_not_let_end_of_data_drop_it)
{
	char name[64];
	struct cistern *c = make("cp-last", name, sizeof(name), 4);
	/* A reader takes the only sample, moves the head, and dies before release. */
	last_sample_held_by_a_dead_reader(c, name, 'z', true);
	/* Closed, head == tail, no hint yet: only the dead reader's entry says otherwise. */
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1,
		     "end of data was declared while a dead reader held a sample");
	cr_assert_eq(buf[0], 'z');
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), CISTERN_EOD);
	drop(c, name);
}

Test(crash_points, reclaim_cut_between_mark_and_hint_is_finished_by_the_next_sweep)
{
	char name[64];
	struct cistern *c = make("cp-hint", name, sizeof(name), 4);
	last_sample_held_by_a_dead_reader(c, name, 'r', false);
	/*
	 * A reclaimer marked the slot for redelivery and died before raising the
	 * hint: the dead reader's entry is still ACTIVE and unlocked.
	 */
	uint64_t w = atomic_load(&cistern__slotmeta(c, 0)->word);
	uint32_t owner = (uint32_t)(w & 0xfff);
	atomic_store(&cistern__slotmeta(c, 0)->word, word(0, F_REDELIVER, owner));
	cr_assert_eq(atomic_load(&c->hdr->redeliver_pending), 0);
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 2000), 1, "the mark was forgotten");
	cr_assert_eq(buf[0], 'r');
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN, "handed out once only");
	drop(c, name);
}

/*
 * A reader hands a sample back (cistern_unacquire()) and dies between marking
 * the slot and raising the hint: the slot names no owner to reclaim it by, so
 * the reclaim of the dead reader must raise the hint on seeing it.
 */
Test(crash_points, hand_back_cut_between_mark_and_hint_is_finished_by_the_next_sweep)
{
	char name[64];
	struct cistern *c = make("cp-unacq", name, sizeof(name), 4);
	cr_assert_eq(cistern_put(c, "h", 1, NULL, 0), 0);
	cr_assert_eq(cistern_close_reception(c), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *d;
		struct cistern_sample s;
		if (cistern_attach(name, &d) < 0 || cistern_acquire(d, &s, 0) < 0)
			_exit(1);
		/* The first step of the hand-back: REDELIVER with no owner, no hint yet. */
		uint64_t w = atomic_load(&cistern__slotmeta(d, s.index_)->word);
		if (!atomic_compare_exchange_strong(&cistern__slotmeta(d, s.index_)->word, &w,
						    word(s.pos_, F_REDELIVER, 0)))
			_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %d", status);
	cr_assert_eq(atomic_load(&c->hdr->redeliver_pending), 0);
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1,
		     "end of data was declared over a sample handed back");
	cr_assert_eq(buf[0], 'h');
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), CISTERN_EOD);
	drop(c, name);
}

Test(crash_points, reclaimer_dead_mid_reclaim_leaves_the_entry_to_the_next_sweeper)
{
	char name[64];
	struct cistern *c = make("cp-rdead", name, sizeof(name), 4);
	uint32_t dead = last_sample_held_by_a_dead_reader(c, name, 'q', false);
	/* A second process takes the dead entry's lock to reclaim it, and dies at once. */
	pid_t pid = reclaimer_dying_after(name, dead, false, false, 0);
	int status;
	waitpid(pid, &status, 0);
	cr_assert(WIFSIGNALED(status), "the reclaimer could not take the dead entry's lock");
	cr_assert_eq(word_state(atomic_load(&cistern__slotmeta(c, 0)->word)), F_ACQUIRED);
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 2000), 1);
	cr_assert_eq(buf[0], 'q');
	drop(c, name);
}

/*
 * The one reader's one-step get of a sample of a line or less copies it out
 * while the slot is still COMMITTED, hands the slot straight back (T11, a
 * plain store of FREE one lap on) and then moves the head. Put "a", "b",
 * "c"; a child takes the reader role (by the flag, or automatically when
 * `flags` is 0), makes T11 at positions 0 .. freed - 1 (a batch frees more
 * than one) and dies before moving the head. What it freed was delivered to
 * the dead reader; the survivor must help the head past the freed slots, get
 * the rest and nothing twice, and the producer must be able to fill the
 * slots on their next lap.
 */
static void reader_dead_between_hand_back_and_head(const char *tag, uint32_t flags, uint32_t freed)
{
	char name[64];
	struct cistern *c = make_flagged(tag, name, sizeof(name), 4, flags);
	for (const char *v = "abc"; *v; v++)
		cr_assert_eq(cistern_put(c, v, 1, NULL, 0), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *r;
		if (cistern_attach(name, &r) < 0 || cistern__add_role(r, CISTERN_ROLE_READER) < 0)
			_exit(1);
		for (uint32_t i = 0; i < freed; i++) {
			_Atomic uint64_t *w = &cistern__slotmeta(r, i)->word;
			if (atomic_load(w) != word(i, F_COMMITTED, 0) ||
			    *(char *)cistern__payload(r, i) != "abc"[i])
				_exit(2);
			atomic_store_explicit(w, word(i + 4, F_FREE, 0), memory_order_release);
		}
		raise(SIGKILL);
		_exit(3);
	}
	reap_killed(pid);
	cr_assert_eq(atomic_load(&c->hdr->head), 0, "the dead reader never moved the head");
	char buf[16];
	/* The role passes on once the dead holder is swept; the head is helped past the freed slots. */
	for (uint32_t i = freed; i < 3; i++) {
		cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 2000), 1);
		cr_assert_eq(buf[0], "abc"[i]);
	}
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN,
		     "a freed sample came back");
	/* A full lap more, through the slots the dead reader freed. */
	for (const char *v = "defg"; *v; v++)
		cr_assert_eq(cistern_put(c, v, 1, NULL, 0), 0, "put %c", *v);
	for (const char *v = "defg"; *v; v++) {
		cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
		cr_assert_eq(buf[0], *v);
	}
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.redeliveries, 0);
	drop(c, name);
}

Test(crash_points, sole_reader_dead_after_hand_back_before_head_moves_loses_nothing)
{
	reader_dead_between_hand_back_and_head("cp-pass", CISTERN_SINGLE_READER, 1);
}

Test(crash_points, auto_reader_dead_after_hand_back_before_head_moves_loses_nothing)
{
	reader_dead_between_hand_back_and_head("cp-apass", 0, 1);
}

/* A batch (cistern_get_batch()) frees each slot it copies out and moves the head once. */
Test(crash_points, sole_reader_dead_mid_batch_before_head_moves_loses_nothing)
{
	reader_dead_between_hand_back_and_head("cp-bpass", CISTERN_SINGLE_READER, 2);
}

/*
 * The holder of the producer role in a cistern_put_batch() makes each
 * sample's claim (RESERVED, then the tail) and commit in turn. Killed after
 * committing two and claiming a third: the committed samples are read, the
 * claim left is reclaimed into a skip that readers step over, nothing else
 * appears, and the next producer goes on from the tail.
 */
static void producer_dead_mid_put_batch(const char *tag, uint32_t flags)
{
	char name[64];
	struct cistern *c = make_flagged(tag, name, sizeof(name), 4, flags);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *p;
		if (cistern_attach(name, &p) < 0 || cistern__add_role(p, CISTERN_ROLE_PRODUCER) < 0)
			_exit(1);
		for (uint32_t i = 0; i < 3; i++) {
			struct cistern_slotmeta *m = cistern__slotmeta(p, i);
			atomic_store_explicit(&m->word, word(i, F_RESERVED, p->owner),
					      memory_order_relaxed);
			atomic_store_explicit(&p->hdr->tail, i + 1, memory_order_release);
			if (i == 2)
				break; /* killed between this claim and its commit */
			*(char *)cistern__payload(p, i) = "ab"[i];
			m->len = 1;
			atomic_store_explicit(&m->word, word(i, F_COMMITTED, 0),
					      memory_order_release);
		}
		raise(SIGKILL);
		_exit(3);
	}
	reap_killed(pid);
	cr_assert_eq(atomic_load(&c->hdr->tail), 3);
	char buf[16];
	for (const char *v = "ab"; *v; v++) {
		cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 2000), 1);
		cr_assert_eq(buf[0], *v);
	}
	/* The role passes on once the dead holder is swept; its claim becomes a skip. */
	cr_assert_eq(cistern_put(c, "c", 1, NULL, 2000), 0);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 2000), 1);
	cr_assert_eq(buf[0], 'c', "the dead claim was stepped over");
	for (const char *v = "def"; *v; v++)
		cr_assert_eq(cistern_put(c, v, 1, NULL, 0), 0, "put %c: the slots came back", *v);
	for (const char *v = "def"; *v; v++) {
		cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
		cr_assert_eq(buf[0], *v);
	}
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN, "nothing else appeared");
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_geq(st.reclaimed, 1, "the dead claim reclaimed");
	drop(c, name);
}

Test(crash_points, sole_producer_dead_mid_put_batch_leaves_its_commits_and_skips_its_claim)
{
	producer_dead_mid_put_batch("cp-pbatch", CISTERN_SINGLE_PRODUCER);
}

Test(crash_points, auto_producer_dead_mid_put_batch_leaves_its_commits_and_skips_its_claim)
{
	producer_dead_mid_put_batch("cp-apbatch", 0);
}

Test(crash_points, aborted_slot_at_the_head_is_stepped_over_and_freed)
{
	char name[64];
	struct cistern *c = make("cp-skip", name, sizeof(name), 2);
	/* A dead producer's reservation already turned into SKIP by a reclaim. */
	die_after_cas(name, 0, 0, F_FREE, F_RESERVED);
	atomic_store(&c->hdr->tail, 1);
	uint64_t w = atomic_load(&cistern__slotmeta(c, 0)->word);
	atomic_store(&cistern__slotmeta(c, 0)->word, word(0, F_SKIP, 0));
	(void)w;
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(word_state(atomic_load(&cistern__slotmeta(c, 0)->word)), F_FREE);
	/* Both slots are usable again: the skip did not leak a slot. */
	cr_assert_eq(cistern_put(c, "y", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "z", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "!", 1, NULL, 0), -EAGAIN);
	drop(c, name);
}

/*
 * A reader takes the last sample (v) and dies holding it; a reclaimer of its
 * entry then dies after the steps `intent` and `mark` (reclaimer_dying_after()),
 * holding its locks for a while. The segment is closed and drained, yet end of
 * data must wait for the dead entry: the get returns the sample. `when` says
 * at which step of the reclaim it failed to wait.
 */
static void end_of_data_waits_for_a_dying_reclaimer(const char *tag, char v, bool intent, bool mark,
						    const char *when)
{
	char name[64];
	struct cistern *c = make(tag, name, sizeof(name), 4);
	uint32_t dead = last_sample_held_by_a_dead_reader(c, name, v, true);
	pid_t pid = reclaimer_dying_after(name, dead, intent, mark, 300);
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 3000), 1, "end of data was declared %s",
		     when);
	cr_assert_eq(buf[0], v);
	waitpid(pid, NULL, 0);
	drop(c, name);
}

Test(crash_points, end_of_data_waits_for_a_reclaim_under_way)
{
	/*
	 * Another process has begun reclaiming the dead reader: it holds its entry lock
	 * and has marked the entry, but not yet the slot. It takes a while, then
	 * dies too, leaving the entry to the next sweeper. The sweep finds the
	 * entry locked: only its mark says wait.
	 */
	end_of_data_waits_for_a_dying_reclaimer("cp-inprog", 'w', false, true,
						"while a reclaim was under way");
}

Test(crash_points, end_of_data_waits_for_a_reclaimer_between_lock_and_mark)
{
	/*
	 * A sweeper has taken the dead entry's intent and entry locks and has not
	 * marked it RECLAIMING yet: ACTIVE and locked, like a live owner. (Found by
	 * the exhaustive search of model/fifo.pml.)
	 */
	end_of_data_waits_for_a_dying_reclaimer("cp-window", 'v', true, false,
						"between a reclaimer's lock and its mark");
}

/*
 * A process attaching takes a live reader's intent lock, finds its entry lock
 * held and lets go; the reader dies in between. A sweep at end of data met the
 * intent lock and skipped the entry; once it is let go, nobody is reclaiming
 * the dead entry, yet its sample must still hold end of data back. (Found by
 * model/fifo.pml with a hand-back; the same holds for any dead reader.)
 */
Test(crash_points, end_of_data_waits_for_a_dead_entry_a_sweep_skipped)
{
	char name[64];
	struct cistern *c = make("cp-skipped", name, sizeof(name), 4);
	uint32_t dead = last_sample_held_by_a_dead_reader(c, name, 'u', true);
	/* The attaching process holds the dead entry's intent lock for a moment. */
	_Atomic uint32_t *step = shared_alloc(sizeof(*step));
	pid_t pid = fork();
	if (pid == 0) {
		struct cistern *r;
		if (cistern__open_mapped(name, false, false, &r) < 0)
			_exit(1);
		if (ofd_lock(r, CISTERN_INTENT_BASE + dead - 1, F_WRLCK) < 0)
			_exit(2);
		atomic_store(step, 1);
		while (atomic_load(step) != 2)
			usleep(1000);
		/* Let go, as cistern__claim_entry does. */
		if (ofd_lock(r, CISTERN_INTENT_BASE + dead - 1, F_UNLCK) < 0)
			_exit(3);
		atomic_store(step, 3);
		_exit(0);
	}
	while (atomic_load(step) != 1)
		usleep(1000);
	cr_assert_eq(cistern__sweep(c), 0, "the sweep skips an entry whose intent lock is held");
	atomic_store(step, 2);
	while (atomic_load(step) != 3)
		usleep(1000);
	cr_assert(cistern__reclaim_under_way(c),
		  "a dead entry no sweep reclaimed yet must hold end of data back");
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 3000), 1, "the sample was lost");
	cr_assert_eq(buf[0], 'u');
	waitpid(pid, NULL, 0);
	drop(c, name);
}
