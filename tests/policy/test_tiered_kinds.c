/* SPDX-License-Identifier: MIT */
/*
 * test_tiered_kinds.c - FIRO and FIFOEvictReservoir with a cold tier
 * (lib/policy/reservoir/tiered.c, firo.c, fifo_evict.c): each policy's rule
 * holds over hot and cold alike (docs/protocol/tiers.md, "Policies").
 *
 * FIRO reads every sample of either tier exactly pseudo_epochs times, never
 * evicts, and a reader killed holding cold samples gives them back with its
 * reads. FIFOEvictReservoir evicts in the order of the puts, also with
 * several producers. Create takes the tier for both, and a dump and restore
 * keep the cold samples with their seen counts.
 *
 * The cold files live in a directory under /var/tmp, on a disk file system
 * that takes O_DIRECT. The fixture removes it and the segments.
 */
#include <sys/mman.h>

#include "helpers.h"
#include "cistern/admin.h"
#include "policy/reservoir/tiered.h"
#include "tier/cold.h"

#define HOT 8
#define COLD 24
#define SLOT 4096
#define PE 3

static char dir[64];

static void kinds_init(void)
{
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-kinds-XXXXXX");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void kinds_fini(void)
{
	seg_fini();
	if (dir[0]) {
		seg_empty_dir(dir);
		rmdir(dir);
	}
}

TestSuite(tiered_kinds, .init = kinds_init, .fini = kinds_fini, .timeout = 60);

static struct cistern_config firo_cfg(void)
{
	return (struct cistern_config){
		.policy = CISTERN_FIRO,
		.slot_size = SLOT,
		.slot_count = HOT,
		.watermark = 1,
		.pseudo_epochs = PE,
		.cold_slots = COLD,
		.cold_dir = dir,
	};
}

static struct cistern_config fifo_evict_cfg(bool lossy)
{
	return (struct cistern_config){
		.policy = CISTERN_FIFO_EVICT_RESERVOIR,
		.slot_size = SLOT,
		.slot_count = HOT,
		.watermark = 1,
		.flags = lossy ? CISTERN_LOSSY : 0,
		.cold_slots = COLD,
		.cold_dir = dir,
	};
}

/* Sample (sim, step): its length, and its bytes by fill_payload(.., sim, step). */
static size_t len_of(uint32_t step)
{
	return 1 + (step * 397u) % SLOT;
}

static int put_one(struct cistern *c, uint32_t sim, uint32_t step, int timeout_ms)
{
	static uint8_t buf[SLOT];
	fill_payload(buf, len_of(step), sim, step);
	struct cistern_meta m = {.sim_id = sim, .time_step = step};
	return cistern_put(c, buf, len_of(step), &m, timeout_ms);
}

static void put_now(struct cistern *c, uint32_t step)
{
	int r = put_one(c, 3, step, 0);
	cr_assert_eq(r, 0, "put %u without waiting: %s", step, cistern_strerror(r));
}

static bool whole(const struct cistern_sample *s)
{
	return s->len == len_of(s->meta.time_step) &&
	       check_payload(s->data, s->len, s->meta.sim_id, s->meta.time_step);
}

static struct cistern_stats stats(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st;
}

/*
 * Close reception and read until end of data, counting the reads of each
 * step (below max) in reads[]; every sample is whole.
 */
static void drain_counting(struct cistern *c, uint32_t max, unsigned *reads)
{
	cr_assert_eq(cistern_close_reception(c), 0);
	for (;;) {
		struct cistern_sample s;
		int r = cistern_acquire(c, &s, 2000);
		if (r == CISTERN_EOD)
			break;
		cr_assert_eq(r, 0, "acquire: %s", cistern_strerror(r));
		cr_assert(whole(&s), "step %u is not whole", s.meta.time_step);
		cr_assert_lt(s.meta.time_step, max);
		reads[s.meta.time_step]++;
		cr_assert_eq(cistern_release(c, &s), 0);
	}
}

/* ---- create ------------------------------------------------------------ */

static bool cold_file_exists(const char *name)
{
	char path[512];
	cr_assert_eq(cistern__cold_path(path, sizeof(path), dir, name), 0);
	return access(path, F_OK) == 0;
}

Test(tiered_kinds, create_takes_a_tier_for_firo_and_fifo_evict)
{
	struct cistern_config a = firo_cfg(), b = fifo_evict_cfg(false);
	cr_assert_null(cistern_config_problem(&a), "%s", cistern_config_problem(&a));
	cr_assert_null(cistern_config_problem(&b), "%s", cistern_config_problem(&b));
	struct cistern *fc = seg_create("mk-firo", a);
	struct cistern *ec = seg_create("mk-fe", b);
	cr_assert(cold_file_exists(seg_name_of(fc)));
	cr_assert(cold_file_exists(seg_name_of(ec)));
	cr_assert_eq(stats(fc).cold_slots, COLD);
	cr_assert_eq(stats(ec).cold_slots, COLD);
}

/* ---- FIRO ---------------------------------------------------------------- */

Test(tiered_kinds, firo_spills_to_cold_and_waits_only_when_both_tiers_are_full)
{
	struct cistern *c = seg_create("firo-full", firo_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_now(c, i);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, HOT + COLD);
	cr_assert_eq(st.cold_population, COLD);
	/* FIRO evicts nothing: with both tiers full a put waits. */
	cr_assert_eq(put_one(c, 3, HOT + COLD, 0), -EAGAIN);
	cr_assert_eq(stats(c).evictions, 0);
}

Test(tiered_kinds, firo_refuses_batch_reads_with_a_tier_as_without)
{
	struct cistern *c = seg_create("firo-batch", firo_cfg());
	for (uint32_t i = 0; i < HOT + 4; i++)
		put_now(c, i);
	struct cistern_sample s[2];
	cr_assert_eq(cistern_acquire_batch(c, s, 2, 0), -EINVAL);
}

/* Shared with the children: reads of each step, counted by any process. */
#define RUN 300
static _Atomic unsigned *shared_reads(void)
{
	void *p = mmap(NULL, RUN * sizeof(unsigned), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	return p;
}

/* A child that reads until end of data, counting each read in reads[]. */
static pid_t spawn_counting_reader(const char *name, _Atomic unsigned *reads)
{
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *h;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		for (;;) {
			struct cistern_sample s;
			int r = cistern_acquire(h, &s, 10000);
			if (r == CISTERN_EOD)
				break;
			if (r != 0)
				_exit(2);
			if (!whole(&s) || s.meta.time_step >= RUN)
				_exit(3);
			atomic_fetch_add(&reads[s.meta.time_step], 1);
			if (cistern_release(h, &s) != 0)
				_exit(4);
		}
		cistern_detach(h);
		_exit(0);
	}
	return pid;
}

Test(tiered_kinds, firo_with_a_tier_reads_every_sample_exactly_pseudo_epochs_times)
{
	struct cistern *c = seg_create("firo-run", firo_cfg());
	const char *name = seg_name_of(c);
	_Atomic unsigned *reads = shared_reads();
	pid_t r1 = spawn_counting_reader(name, reads);
	pid_t r2 = spawn_counting_reader(name, reads);
	cr_assert_gt(r1, 0);
	cr_assert_gt(r2, 0);
	pid_t p = fork_child();
	if (p == 0) {
		struct cistern *h;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		/* Ten times the two tiers: puts wait for reads to free slots. */
		for (uint32_t i = 0; i < RUN; i++)
			if (put_one(h, 3, i, 10000) != 0)
				_exit(2);
		cistern_close_reception(h);
		cistern_detach(h);
		_exit(0);
	}
	cr_assert_gt(p, 0);
	cr_assert_eq(reap_status(p), 0, "the producer failed");
	cr_assert_eq(reap_status(r1), 0, "a reader failed");
	cr_assert_eq(reap_status(r2), 0, "a reader failed");
	for (uint32_t i = 0; i < RUN; i++)
		cr_assert_eq(reads[i], PE, "step %u read %u times", i, reads[i]);
	struct cistern_stats st = stats(c);
	cr_assert_gt(st.cold_spilled, 0, "nothing went cold: nothing to prove");
	cr_assert_gt(st.cold_reads, 0, "nothing read from cold: nothing to prove");
	cr_assert_eq(st.population, 0);
	cr_assert_eq(st.cold_population, 0);
	cr_assert_eq(st.evictions, 0);
	munmap((void *)(uintptr_t)reads, RUN * sizeof(unsigned));
}

/* A spawn_attached() set-up: take FIRO samples until *arg of them are cold ones. */
static int take_cold(struct cistern *h, const void *arg)
{
	int cold = *(const int *)arg, held = 0;
	struct cistern_sample s[HOT + COLD];
	for (int i = 0; i < HOT + COLD - 2 && held < cold; i++) {
		if (cistern_acquire(h, &s[i], 0) != 0)
			return 2;
		held += s[i].index_ >= HOT;
	}
	return held < cold ? 3 : 0;
}

/* A child that takes FIRO samples until it holds `cold` cold ones, then waits to be killed. */
static pid_t spawn_cold_holder(const char *name, int cold)
{
	return spawn_attached(name, take_cold, &cold);
}

Test(tiered_kinds, a_firo_reader_killed_holding_cold_samples_wedges_and_over_reads_nothing)
{
	struct cistern *c = seg_create("firo-kill", firo_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_now(c, i);
	pid_t pid = spawn_cold_holder(name, 4);
	cr_assert_gt(pid, 0, "the holder could not take cold samples");
	kill_and_reap(pid);
	/* An attach sweeps the dead first. */
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0);
	cr_assert_eq(cistern_detach(h), 0);
	for (uint64_t j = 0; j < COLD; j++) {
		const struct cistern__cold_ent *e = cistern__tiered_ent(c, j);
		cr_assert_eq(cistern__cold_state(atomic_load(&e->word)), CISTERN__COLD_HELD,
			     "cold slot %lu not given back", (unsigned long)j);
		cr_assert_eq(atomic_load(&e->seen), 0, "cold slot %lu keeps a dead read",
			     (unsigned long)j);
	}
	struct cistern_stats st = stats(c);
	cr_assert_geq(st.redeliveries, 4);
	cr_assert_eq(st.population, HOT + COLD);
	/* Nothing wedged: the survivors read each sample exactly pseudo_epochs times. */
	unsigned reads[HOT + COLD] = {0};
	drain_counting(c, HOT + COLD, reads);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		cr_assert_eq(reads[i], PE, "step %u read %u times", i, reads[i]);
}

/* (id, seen) of every held cold sample of c, sorted by id, into out: the count. */
struct idseen {
	uint64_t id;
	uint32_t seen;
};

static int by_id(const void *a, const void *b)
{
	uint64_t x = ((const struct idseen *)a)->id, y = ((const struct idseen *)b)->id;
	return x < y ? -1 : x > y;
}

static size_t cold_ids(struct cistern *c, struct idseen *out)
{
	size_t n = 0;
	for (uint64_t j = 0; j < COLD; j++) {
		const struct cistern__cold_ent *e = cistern__tiered_ent(c, j);
		if (cistern__cold_state(atomic_load(&e->word)) != CISTERN__COLD_HELD)
			continue;
		out[n].id = e->id;
		out[n].seen = atomic_load(&e->seen);
		n++;
	}
	qsort(out, n, sizeof(*out), by_id);
	return n;
}

Test(tiered_kinds, a_firo_dump_and_restore_keep_the_cold_samples_and_their_seen_counts)
{
	struct cistern *c = seg_create("firo-dump", firo_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_now(c, i);
	/* Read a while: some samples of both tiers have seen counts. */
	for (int k = 0; k < 40; k++) {
		struct cistern_sample s;
		cr_assert_eq(cistern_acquire(c, &s, 2000), 0);
		cr_assert_eq(cistern_release(c, &s), 0);
	}
	struct idseen a[COLD], b[COLD];
	size_t n = cold_ids(c, a);
	uint32_t seen = 0;
	for (size_t i = 0; i < n; i++)
		seen += a[i].seen;
	cr_assert_gt(n, 0);
	cr_assert_gt(seen, 0, "no cold sample was read: nothing to prove");
	const char *path = seg_dump_path("kinds-dump");
	struct cistern_dump_info info;
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, &info), 0);
	cr_assert_eq(info.cold_samples, n);
	const char *copy = seg_name("firo-copy");
	int r = cistern_restore(path, copy, NULL, NULL, NULL);
	cr_assert_eq(r, 0, "restore: %s", cistern_strerror(r));
	struct cistern *d;
	cr_assert_eq(cistern_attach(copy, &d), 0);
	seg_keep(copy, d);
	cr_assert_eq(cold_ids(d, b), n);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(b[i].id, a[i].id);
		cr_assert_eq(b[i].seen, a[i].seen, "id %lu: seen %u, was %u",
			     (unsigned long)a[i].id, b[i].seen, a[i].seen);
	}
	/* The copy's readers finish each sample's epochs, cold ones included. */
	struct cistern_stats st = stats(c);
	unsigned reads[HOT + COLD] = {0};
	drain_counting(d, HOT + COLD, reads);
	uint64_t total = 0;
	for (uint32_t i = 0; i < HOT + COLD; i++)
		total += reads[i];
	cr_assert_eq(total, (uint64_t)(HOT + COLD) * PE - st.gets);
}

/* ---- FIFOEvictReservoir ------------------------------------------------- */

/* Read single samples until every step below n was seen at least once. */
static void read_each_once(struct cistern *c, uint32_t n)
{
	bool seen[HOT + COLD] = {0};
	uint32_t left = n;
	for (int k = 0; left && k < 100000; k++) {
		struct cistern_sample s;
		cr_assert_eq(cistern_acquire(c, &s, 2000), 0);
		cr_assert(whole(&s));
		if (s.meta.time_step < n && !seen[s.meta.time_step]) {
			seen[s.meta.time_step] = true;
			left--;
		}
		cr_assert_eq(cistern_release(c, &s), 0);
	}
	cr_assert_eq(left, 0, "%u samples never drawn", left);
}

/* Close and take every sample: exactly the steps from `first` to `first + n - 1`. */
static void assert_left_steps(struct cistern *c, uint32_t first, uint32_t n)
{
	unsigned reads[4 * (HOT + COLD)] = {0};
	drain_counting(c, 4 * (HOT + COLD), reads);
	for (uint32_t i = 0; i < 4 * (HOT + COLD); i++)
		cr_assert_eq(reads[i], i >= first && i < first + n, "step %u taken %u times", i,
			     reads[i]);
}

Test(tiered_kinds, fifo_evict_with_a_tier_waits_while_the_oldest_is_unseen)
{
	struct cistern *c = seg_create("fe-wait", fifo_evict_cfg(false));
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_now(c, i);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, HOT + COLD);
	cr_assert_eq(st.cold_population, COLD);
	cr_assert_eq(put_one(c, 3, HOT + COLD, 0), -EAGAIN);
	cr_assert_eq(stats(c).evictions, 0);
}

Test(tiered_kinds, fifo_evict_with_a_tier_evicts_in_the_order_of_the_puts)
{
	struct cistern *c = seg_create("fe-order", fifo_evict_cfg(false));
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_now(c, i);
	read_each_once(c, HOT + COLD);
	/* Sixteen more: each evicts the oldest of hot and cold, which is cold. */
	for (uint32_t i = HOT + COLD; i < HOT + COLD + 16; i++)
		put_now(c, i);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.evictions, 16);
	cr_assert_eq(st.cold_evictions, 16);
	cr_assert_eq(st.evicted_unseen, 0);
	cr_assert_eq(st.population, HOT + COLD);
	/* Left: the newest puts, steps 16 to 47; a random choice would leave gaps. */
	assert_left_steps(c, 16, HOT + COLD);
}

Test(tiered_kinds, a_sample_read_in_memory_stays_seen_once_spilled)
{
	struct cistern *c = seg_create("fe-carry", fifo_evict_cfg(false));
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_now(c, i);
	read_each_once(c, HOT + COLD);
	/*
	 * A full lap of puts: the last eight were read while hot and then
	 * spilled; they are evicted without another read, as seen samples.
	 */
	for (uint32_t i = HOT + COLD; i < 2 * (HOT + COLD); i++)
		put_now(c, i);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.evictions, HOT + COLD);
	cr_assert_eq(st.evicted_unseen, 0);
	assert_left_steps(c, HOT + COLD, HOT + COLD);
}

Test(tiered_kinds, a_lossy_fifo_evict_with_a_tier_evicts_the_oldest_unseen)
{
	struct cistern *c = seg_create("fe-lossy", fifo_evict_cfg(true));
	for (uint32_t i = 0; i < HOT + COLD + 40; i++)
		put_now(c, i);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.evictions, 40);
	cr_assert_eq(st.evicted_unseen, 40);
	assert_left_steps(c, 40, HOT + COLD);
}

/* A child that puts steps 0..n-1 of sim `sim`, lossy, none refused. */
static pid_t spawn_sim_producer(const char *name, uint32_t sim, uint32_t n)
{
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *h;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		for (uint32_t i = 0; i < n; i++)
			if (put_one(h, sim, i, 10000) != 0)
				_exit(2);
		cistern_detach(h);
		_exit(0);
	}
	return pid;
}

Test(tiered_kinds, fifo_evict_with_a_tier_keeps_each_producers_order)
{
	struct cistern *c = seg_create("fe-mp", fifo_evict_cfg(true));
	const char *name = seg_name_of(c);
	enum { N = 200 };
	pid_t a = spawn_sim_producer(name, 1, N), b = spawn_sim_producer(name, 2, N);
	cr_assert_gt(a, 0);
	cr_assert_gt(b, 0);
	cr_assert_eq(reap_status(a), 0);
	cr_assert_eq(reap_status(b), 0);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, HOT + COLD);
	cr_assert_eq(st.evictions, 2 * N - (HOT + COLD));
	/* What is left is the newest puts: of each producer, the end of its steps, no gap. */
	cr_assert_eq(cistern_close_reception(c), 0);
	bool left[3][N] = {{0}};
	for (;;) {
		struct cistern_sample s;
		int r = cistern_acquire(c, &s, 2000);
		if (r == CISTERN_EOD)
			break;
		cr_assert_eq(r, 0, "acquire: %s", cistern_strerror(r));
		cr_assert(whole(&s));
		cr_assert(s.meta.sim_id == 1 || s.meta.sim_id == 2);
		cr_assert_lt(s.meta.time_step, N);
		left[s.meta.sim_id][s.meta.time_step] = true;
		cr_assert_eq(cistern_release(c, &s), 0);
	}
	unsigned total = 0;
	for (int p = 1; p <= 2; p++) {
		uint32_t i = 0;
		while (i < N && !left[p][i])
			i++;
		for (uint32_t k = i; k < N; k++)
			cr_assert(left[p][k], "producer %d: step %u gone, step %u kept", p, k, i);
		total += N - i;
	}
	cr_assert_eq(total, HOT + COLD);
}

Test(tiered_kinds, a_fifo_evict_restore_keeps_the_order_of_the_puts)
{
	struct cistern *c = seg_create("fe-dump", fifo_evict_cfg(true));
	/* Forty past full: the cold file wrapped, its oldest sample mid-file. */
	for (uint32_t i = 0; i < HOT + COLD + 40; i++)
		put_now(c, i);
	const char *path = seg_dump_path("fe-dump");
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	const char *copy = seg_name("fe-copy");
	int r = cistern_restore(path, copy, NULL, NULL, NULL);
	cr_assert_eq(r, 0, "restore: %s", cistern_strerror(r));
	struct cistern *d;
	cr_assert_eq(cistern_attach(copy, &d), 0);
	seg_keep(copy, d);
	/* Ten more puts into the copy evict the ten oldest there. */
	for (uint32_t i = HOT + COLD + 40; i < HOT + COLD + 50; i++)
		put_now(d, i);
	assert_left_steps(d, 50, HOT + COLD);
}
