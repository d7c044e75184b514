/* SPDX-License-Identifier: MIT */
/*
 * test_crash_counts.c - a process dying between a slot change and the count
 * that goes with it, under FIRO and the reservoirs (lib/policy/reservoir/reservoir.h).
 *
 * Each child does the first step of a two-step update through the internal
 * headers and dies by SIGKILL. The order of the steps leaves the header's
 * `filled` count high, never low; the survivors must still reach end of data,
 * with every sample that is there read once, and without waiting for the
 * timeout.
 */
#include <criterion/criterion.h>
#include <fcntl.h>

#include "helpers.h"
#include "policy/reservoir/reservoir.h"
#include "core/open.h"
#include "core/liveness.h"
#include "policy/reservoir/pins.h"

static struct cistern *make(const char *tag, char *name, size_t len, enum cistern_policy policy,
			    uint64_t slots)
{
	snprintf(name, len, "t-%s-%d", tag, (int)getpid());
	cistern_unlink(name);
	struct cistern_config cfg = {.policy = policy,
				     .slot_size = 4,
				     .slot_count = slots,
				     .watermark = 1,
				     .pseudo_epochs = 1};
	struct cistern *c;
	int r = cistern_create(name, &cfg, &c);
	cr_assert_eq(r, 0, "create: %s", cistern_strerror(r));
	return c;
}

static void drop(struct cistern *c, const char *name)
{
	cistern_detach(c);
	cistern_unlink(name);
}

static void put_u32(struct cistern *c, uint32_t v)
{
	int r = cistern_put(c, &v, sizeof(v), NULL, 0);
	cr_assert_eq(r, 0, "put %u: %s", v, cistern_strerror(r));
}

/*
 * Run step() in a child process that then dies by SIGKILL, as if killed right
 * after it, and wait for that death. The child works on its own handle: an
 * attachment, or with `attach` false a bare mapping that takes no entry (a
 * reclaimer, which must not leave a dead entry of its own). step() returns
 * false if it could not do its part.
 */
static void die_after(const char *name, bool attach, bool (*step)(struct cistern *r, void *arg),
		      void *arg)
{
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *r;
		int rc = attach ? cistern_attach(name, &r)
				: cistern__open_mapped(name, false, false, &r);
		if (rc < 0 || !step(r, arg))
			_exit(1);
		raise(SIGKILL);
		_exit(2);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "the child failed its first step (status %d)", status);
}

/*
 * Read until end of data, each get allowed 10 s: a wedge shows as -ETIMEDOUT,
 * and a drain that takes half of that as a failure too. Marks each payload
 * value (< 32) in seen[]; returns the count.
 */
static int drain(struct cistern *c, unsigned seen[32])
{
	const int timeout_ms = 10000;
	double t0 = mono_now();
	int n = 0;
	uint32_t v;
	ssize_t r;
	while ((r = cistern_get(c, &v, sizeof(v), NULL, timeout_ms)) == sizeof(v)) {
		cr_assert_lt(v, 32);
		seen[v]++;
		n++;
	}
	cr_assert_eq(r, CISTERN_EOD, "the drain ended with %s, not end of data",
		     cistern_strerror((int)r));
	cr_assert_lt(mono_now() - t0, timeout_ms / 2000.0,
		     "end of data took the better part of the timeout");
	return n;
}

/* Take a sample for good (its last epoch), empty its slot, and stop before the count. */
static bool take_and_empty(struct cistern *r, void *taken)
{
	struct cistern_sample s;
	if (cistern_acquire(r, &s, 0) < 0)
		return false;
	*(uint32_t *)taken = *(const uint32_t *)s.data;
	uint64_t w = atomic_load(&cistern__slotmeta(r, s.index_)->word);
	atomic_store(&cistern__slotmeta(r, s.index_)->word,
		     sw_make(sw_pos(w) + r->slot_count, RS_EMPTY, 0));
	return true;
}

/* A fill's count, and stop before the claim. */
static bool count_a_fill(struct cistern *r, void *arg)
{
	(void)arg;
	atomic_fetch_add(&r->hdr->filled, 1);
	return true;
}

/* A fill's count and its claim of slot *index, and stop before the commit. */
static bool count_and_claim(struct cistern *r, void *index)
{
	uint32_t idx = *(uint32_t *)index;
	atomic_fetch_add(&r->hdr->filled, 1);
	uint64_t w = atomic_load(&cistern__slotmeta(r, idx)->word);
	return atomic_compare_exchange_strong(&cistern__slotmeta(r, idx)->word, &w,
					      sw_make(sw_pos(w), RS_RESERVED, r->owner));
}

/* Take a sample and hold it; *index says which slot. */
static bool take_and_hold(struct cistern *r, void *index)
{
	struct cistern_sample s;
	if (cistern_acquire(r, &s, 0) < 0)
		return false;
	*(uint32_t *)index = s.index_;
	return true;
}

/*
 * As the reclaimer of the dead holder of slot *index: take its entry's lock,
 * then do cistern__rs_reclaim()'s first steps on the slot (count the redelivery, take
 * the read back), and stop before the CAS.
 */
static bool begin_reclaim(struct cistern *r, void *index)
{
	uint32_t idx = *(uint32_t *)index;
	uint32_t dead = sw_owner(atomic_load(&cistern__slotmeta(r, idx)->word));
	struct flock fl = {.l_type = F_WRLCK,
			   .l_whence = SEEK_SET,
			   .l_start = CISTERN_LOCK_BASE + dead - 1,
			   .l_len = 1};
	if (fcntl(r->fd, F_OFD_SETLK, &fl) < 0)
		return false;
	atomic_fetch_add(&r->hdr->retired.redeliveries, 1);
	cistern__seen_take_back(cistern__slotmeta(r, idx));
	return true;
}

Test(crash_counts, firo_reader_dead_between_emptying_a_slot_and_uncounting_it_leaves_no_wedge)
{
	char name[64];
	struct cistern *c = make("cc-firo", name, sizeof(name), CISTERN_FIRO, 4);
	for (uint32_t v = 0; v < 3; v++)
		put_u32(c, v);
	cr_assert_eq(cistern_close_reception(c), 0);
	uint32_t *taken = shared_alloc(sizeof(*taken));
	die_after(name, true, take_and_empty, taken);
	cr_assert_eq(atomic_load(&c->hdr->filled), 3, "the child's slot is empty but counted");
	unsigned seen[32] = {0};
	cr_assert_eq(drain(c, seen), 2);
	for (uint32_t v = 0; v < 3; v++)
		cr_assert_eq(seen[v], v == *taken ? 0u : 1u, "sample %u read %u times", v, seen[v]);
	drop(c, name);
}

Test(crash_counts, reservoir_producer_dead_between_counting_a_fill_and_claiming_leaves_no_wedge)
{
	char name[64];
	struct cistern *c = make("cc-res", name, sizeof(name), CISTERN_RESERVOIR, 4);
	for (uint32_t v = 0; v < 2; v++)
		put_u32(c, v);
	die_after(name, true, count_a_fill, NULL);
	cr_assert_eq(cistern_close_reception(c), 0);
	unsigned seen[32] = {0};
	cr_assert_eq(drain(c, seen), 2);
	cr_assert(seen[0] == 1 && seen[1] == 1);
	drop(c, name);
}

/* Counted and claimed, then dead: the reclaim empties the slot and uncounts it, exactly. */
Test(crash_counts, producer_dead_after_counting_and_claiming_is_uncounted_by_the_reclaim)
{
	char name[64];
	struct cistern *c = make("cc-claim", name, sizeof(name), CISTERN_RESERVOIR, 4);
	put_u32(c, 7);
	uint32_t idx = UINT32_MAX;
	for (uint32_t i = 0; i < 4 && idx == UINT32_MAX; i++)
		if (sw_state(atomic_load(&cistern__slotmeta(c, i)->word)) == RS_EMPTY)
			idx = i;
	die_after(name, true, count_and_claim, &idx);
	cr_assert_eq(atomic_load(&c->hdr->filled), 2);
	cr_assert_gt(cistern__sweep(c), 0, "the dead producer's entry was reclaimed");
	cr_assert_eq(sw_state(atomic_load(&cistern__slotmeta(c, idx)->word)), RS_EMPTY);
	cr_assert_eq(atomic_load(&c->hdr->filled), 1, "the count follows the slot back");
	drop(c, name);
}

/*
 * A reader dies holding a FIRO sample; the process that reclaims it counts the
 * redelivery and takes the read back, then dies before its CAS. The next
 * sweeper does it all again: the sample comes back once, its seen count is
 * not taken below 0, and the redelivery is counted (twice, never not at all).
 */
Test(crash_counts, reclaimer_dead_before_handing_a_read_back_leaves_it_to_the_next_one)
{
	char name[64];
	struct cistern *c = make("cc-rdead", name, sizeof(name), CISTERN_FIRO, 4);
	for (uint32_t v = 0; v < 2; v++)
		put_u32(c, v);
	cr_assert_eq(cistern_close_reception(c), 0);
	uint32_t *idx = shared_alloc(sizeof(*idx));
	die_after(name, true, take_and_hold, idx);
	cr_assert_eq(sw_state(atomic_load(&cistern__slotmeta(c, *idx)->word)), RS_ACQUIRED);
	die_after(name, false, begin_reclaim, idx);
	cr_assert_eq(atomic_load(&cistern__slotmeta(c, *idx)->seen), 0,
		     "the unfinished read was taken back");
	cr_assert_gt(cistern__sweep(c), 0, "the next sweeper reclaimed the dead reader");
	cr_assert_eq(sw_state(atomic_load(&cistern__slotmeta(c, *idx)->word)), RS_HELD);
	cr_assert_eq(atomic_load(&cistern__slotmeta(c, *idx)->seen), 0,
		     "taken back twice, but not below 0");
	unsigned seen[32] = {0};
	cr_assert_eq(drain(c, seen), 2);
	cr_assert(seen[0] == 1 && seen[1] == 1, "each sample read once (%u, %u)", seen[0], seen[1]);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_geq(st.redeliveries, 1);
	drop(c, name);
}

/*
 * A producer dies between counting a fill and claiming a slot: `filled` stays
 * one high while reception is open. Once the dead attachment is reclaimed, a
 * put that finds the buffer full by the count looks at the slots and fills
 * the empty one (no capacity lost), but never more than there are slots.
 */
static void fills_past_a_high_count(enum cistern_policy policy, const char *tag)
{
	char name[64];
	struct cistern *c = make(tag, name, sizeof(name), policy, 2);
	put_u32(c, 0);
	die_after(name, true, count_a_fill, NULL);
	cr_assert_eq(atomic_load(&c->hdr->filled), 2, "one slot used, two counted");
	uint32_t v = 1;
	cr_assert_eq(cistern_put(c, &v, sizeof(v), NULL, 0), -EAGAIN,
		     "before the reclaim the count is believed");
	cr_assert_gt(cistern__sweep(c), 0, "the dead producer's entry was reclaimed");
	cr_assert_eq(cistern_put(c, &v, sizeof(v), NULL, 0), 0, "the empty slot is filled");
	cr_assert_eq(sw_state(atomic_load(&cistern__slotmeta(c, 0)->word)), RS_HELD);
	cr_assert_eq(sw_state(atomic_load(&cistern__slotmeta(c, 1)->word)), RS_HELD);
	if (policy == CISTERN_FIRO) {
		/* Both slots hold a sample now: a third put must wait, count or not. */
		cistern__rs(c)->next_fill_look_ns = 0;
		v = 2;
		cr_assert_eq(cistern_put(c, &v, sizeof(v), NULL, 0), -EAGAIN,
			     "no slot past the last");
	}
	cr_assert_eq(cistern_close_reception(c), 0);
	unsigned seen[32] = {0};
	cr_assert_eq(drain(c, seen), 2);
	cr_assert(seen[0] == 1 && seen[1] == 1, "each sample read once (%u, %u)", seen[0], seen[1]);
	drop(c, name);
}

Test(crash_counts, firo_put_fills_a_slot_a_dead_producers_count_still_holds)
{
	fills_past_a_high_count(CISTERN_FIRO, "cc-fpast");
}

Test(crash_counts, reservoir_put_fills_a_slot_a_dead_producers_count_still_holds)
{
	fills_past_a_high_count(CISTERN_RESERVOIR, "cc-rpast");
}

/*
 * The same death in a reservoir whose sample was read: a put can evict it, so
 * it never waits, and before it evicts it looks for the slot the high count
 * hides. Evicting instead would lose the read sample and leave the other slot
 * empty for good.
 */
Test(crash_counts, evicting_put_fills_a_slot_a_dead_producers_count_still_holds)
{
	char name[64];
	struct cistern *c = make("cc-epast", name, sizeof(name), CISTERN_RESERVOIR, 2);
	put_u32(c, 0);
	uint32_t v;
	cr_assert_eq(cistern_get(c, &v, sizeof(v), NULL, 0), (ssize_t)sizeof(v));
	cr_assert_eq(v, 0);
	die_after(name, true, count_a_fill, NULL);
	cr_assert_eq(atomic_load(&c->hdr->filled), 2, "one slot used, two counted");
	cr_assert_gt(cistern__sweep(c), 0, "the dead producer's entry was reclaimed");
	v = 1;
	cr_assert_eq(cistern_put(c, &v, sizeof(v), NULL, 0), 0);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.evictions, 0, "the put filled the empty slot instead of evicting");
	cr_assert_eq(sw_state(atomic_load(&cistern__slotmeta(c, 0)->word)), RS_HELD);
	cr_assert_eq(sw_state(atomic_load(&cistern__slotmeta(c, 1)->word)), RS_HELD);
	cr_assert_eq(cistern_close_reception(c), 0);
	unsigned seen[32] = {0};
	cr_assert_eq(drain(c, seen), 2);
	cr_assert(seen[0] == 1 && seen[1] == 1, "both samples still there (%u, %u)", seen[0],
		  seen[1]);
	drop(c, name);
}
