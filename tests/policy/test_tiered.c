/* SPDX-License-Identifier: MIT */
/*
 * test_tiered.c - a reservoir with a cold tier (lib/tier/tiered.c): puts
 * spill to disk instead of waiting, every sample reads back whole, only
 * seen samples are evicted in either tier, batches mix hot and cold, dead
 * readers and spillers are repaired, a spill moves a batch into a run of
 * cold slots with one write and a spiller killed at any of its steps
 * loses and doubles nothing, a job's peak memory stays near its hot arena
 * whatever its population, rm removes the cold file, a full
 * disk stops create, and batch reads draw the next two batches ahead: each
 * is the read's that takes it, never stale, and a reader killed with both
 * in flight leaves nothing pinned (docs/protocol/tiers.md).
 *
 * The cold files live in a directory under /var/tmp, on a disk file system
 * that takes O_DIRECT. The fixture removes it and the segments.
 */
#include <sched.h>
#include <sys/mount.h>

#include <criterion/logging.h>

#include "helpers.h"
#include "memwatch.h"
#include "cistern/admin.h"
#include "policy/reservoir/tiered.h"
#include "sys/uring.h"
#include "tier/cold.h"

#define HOT 64
#define COLD 256
#define SLOT 4096
/* A spill moves a batch: here a quarter of the hot arena (tiered.c, spill_batch). */
#define BATCH (HOT / 4)

static char dir[64];

static void tiered_init(void)
{
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-tiered-XXXXXX");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void tiered_fini(void)
{
	seg_fini();
	if (dir[0]) {
		seg_empty_dir(dir);
		rmdir(dir);
	}
}

TestSuite(tiered, .init = tiered_init, .fini = tiered_fini, .timeout = 60);

static struct cistern_config tiered_cfg(void)
{
	return (struct cistern_config){
		.policy = CISTERN_RESERVOIR,
		.slot_size = SLOT,
		.slot_count = HOT,
		.watermark = 1,
		.cold_slots = COLD,
		.cold_dir = dir,
	};
}

/* Sample `step`: its length, and its bytes by fill_payload(.., 3, step). */
static size_t len_of(uint32_t step)
{
	return 1 + (step * 397u) % SLOT;
}

static void put_step(struct cistern *c, uint32_t step)
{
	static uint8_t buf[SLOT];
	size_t len = len_of(step);
	fill_payload(buf, len, 3, step);
	struct cistern_meta m = {.sim_id = 3, .time_step = step};
	int r = cistern_put(c, buf, len, &m, 0);
	cr_assert_eq(r, 0, "put %u without waiting: %s", step, cistern_strerror(r));
}

/* A sample read: its length and bytes are those of its time step. */
static void assert_whole(const void *data, size_t len, const struct cistern_meta *m)
{
	cr_assert_eq(m->sim_id, 3);
	cr_assert_eq(len, len_of(m->time_step), "step %u: length %zu", m->time_step, len);
	cr_assert(check_payload(data, len, 3, m->time_step), "step %u: bytes differ", m->time_step);
}

/*
 * Close reception and take every sample: each is whole, none twice; the
 * count. (After close a read takes a sample for good.)
 */
static uint32_t drain_all(struct cistern *c, uint32_t max_step)
{
	uint8_t *seen = calloc(max_step, 1);
	cr_assert_eq(cistern_close_reception(c), 0);
	uint32_t n = 0;
	for (;;) {
		struct cistern_sample s;
		int r = cistern_acquire(c, &s, 2000);
		if (r == CISTERN_EOD)
			break;
		cr_assert_eq(r, 0, "acquire: %s", cistern_strerror(r));
		assert_whole(s.data, s.len, &s.meta);
		cr_assert_lt(s.meta.time_step, max_step);
		cr_assert_eq(seen[s.meta.time_step], 0, "step %u read twice", s.meta.time_step);
		seen[s.meta.time_step] = 1;
		cr_assert_eq(cistern_release(c, &s), 0);
		n++;
	}
	free(seen);
	return n;
}

/* The cold samples after `extra` puts past a full hot arena: whole batches. */
static uint32_t cold_after(uint32_t extra)
{
	return (extra + BATCH - 1) / BATCH * BATCH;
}

static struct cistern_stats stats(struct cistern *c)
{
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	return st;
}

/* Read batches of 32 and release them until `want` reads were made. */
static void read_batches(struct cistern *c, unsigned batches)
{
	for (unsigned b = 0; b < batches; b++) {
		struct cistern_sample s[32];
		int r = cistern_acquire_batch(c, s, 32, 2000);
		cr_assert_eq(r, 32, "batch: %s", cistern_strerror(r));
		for (int i = 0; i < 32; i++)
			assert_whole(s[i].data, s[i].len, &s[i].meta);
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	}
}

Test(tiered, takes_hot_plus_cold_puts_without_waiting_and_reads_all_back)
{
	struct cistern *c = seg_create("all", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, HOT + COLD);
	cr_assert_eq(st.cold_population, COLD);
	cr_assert_eq(st.cold_spilled, COLD);
	cr_assert_eq(st.evictions, 0);
	cr_assert_eq(drain_all(c, HOT + COLD), HOT + COLD);
}

Test(tiered, a_full_tiered_reservoir_evicts_only_seen_samples)
{
	struct cistern *c = seg_create("seen", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	/* Nothing seen, in either tier: a put has nothing it may take. */
	uint8_t b[8] = {0};
	cr_assert_eq(cistern_put(c, b, sizeof(b), NULL, 0), -EAGAIN);
	read_batches(c, 4);
	uint32_t extra = 0;
	while (extra < 512) {
		struct cistern_meta m = {.sim_id = 3, .time_step = HOT + COLD + extra};
		uint8_t buf[SLOT];
		fill_payload(buf, len_of(m.time_step), 3, m.time_step);
		int r = cistern_put(c, buf, len_of(m.time_step), &m, 0);
		if (r == -EAGAIN)
			break;
		cr_assert_eq(r, 0, "%s", cistern_strerror(r));
		extra++;
	}
	struct cistern_stats st = stats(c);
	/* At most the 128 reads made room; each eviction took a seen sample. */
	cr_assert_gt(extra, 0);
	cr_assert_leq(extra, 128);
	cr_assert_eq(st.evictions, extra);
	cr_assert_eq(st.evicted_unseen, 0);
	cr_assert_eq(st.population, HOT + COLD);
	cr_assert_eq(drain_all(c, HOT + COLD + extra), HOT + COLD);
}

Test(tiered, get_batch_over_hot_and_cold_gives_distinct_whole_samples)
{
	struct cistern *c = seg_create("batch", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	enum { N = 128 };
	uint8_t *buf = malloc((size_t)N * SLOT);
	size_t lens[N];
	struct cistern_meta meta[N];
	for (int round = 0; round < 4; round++) {
		int r = cistern_get_batch(c, buf, SLOT, N, lens, meta, 2000);
		cr_assert_eq(r, N, "get_batch: %s", cistern_strerror(r));
		uint8_t seen[HOT + COLD] = {0};
		for (int i = 0; i < N; i++) {
			assert_whole(buf + (size_t)i * SLOT, lens[i], &meta[i]);
			cr_assert_eq(seen[meta[i].time_step], 0, "step %u twice in a batch",
				     meta[i].time_step);
			seen[meta[i].time_step] = 1;
		}
	}
	free(buf);
	struct cistern_stats st = stats(c);
	/* Four fifths of the population is cold: batches of 128 read from it. */
	cr_assert_gt(st.cold_reads, 0);
	cr_assert_eq(st.gets, 4 * N);
}

Test(tiered, counts_the_cold_bytes_moved_and_the_time_waited_for_them)
{
	struct cistern *c = seg_create("io", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	uint64_t sb = cistern__cold_slot_bytes(SLOT);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.cold_spilled, COLD);
	cr_assert_geq(st.cold_bytes_written, st.cold_spilled * sb, "%lu bytes written",
		      (unsigned long)st.cold_bytes_written);
	cr_assert_gt(st.cold_write_wait_ns, 0);
	cr_assert_eq(st.cold_bytes_read, 0, "nothing was read yet");
	cr_assert_eq(st.cold_read_wait_ns, 0, "nothing was read yet");
	/* Without a read ahead, each batch's cold members are read while it waits. */
	cr_assert_eq(cistern__tiered_read_ahead(c, false), 0);
	read_batches(c, 4);
	st = stats(c);
	cr_assert_gt(st.cold_reads, 0);
	cr_assert_geq(st.cold_bytes_read, st.cold_reads * sb, "%lu bytes for %lu cold reads",
		      (unsigned long)st.cold_bytes_read, (unsigned long)st.cold_reads);
	cr_assert_gt(st.cold_read_wait_ns, 0);
}

/* A child that attaches, acquires a batch of 32 and waits to be killed. */
static pid_t spawn_batch_holder(const char *name)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		struct cistern *h;
		struct cistern_sample s[32];
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		if (cistern_acquire_batch(h, s, 32, 2000) != 32)
			_exit(2);
		ready_then_wait(p[1]);
	}
	return await_ready(p, pid);
}

Test(tiered, a_reader_killed_holding_cold_samples_loses_and_wedges_nothing)
{
	struct cistern *c = seg_create("reader", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	pid_t pid = spawn_batch_holder(name);
	cr_assert_gt(pid, 0);
	kill_and_reap(pid);
	/* An attach sweeps the dead first. */
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0);
	cr_assert_eq(cistern_detach(h), 0);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, HOT + COLD);
	/* Its pins are gone: the samples it read are evictable, so puts go on. */
	uint8_t b[8] = {0};
	uint32_t extra = 0;
	while (extra < 64 && cistern_put(c, b, sizeof(b), NULL, 0) == 0)
		extra++;
	cr_assert_gt(extra, 0, "no put found a sample the dead reader had seen");
	st = stats(c);
	cr_assert_eq(st.population, HOT + COLD);
	cr_assert_eq(st.evicted_unseen, 0);
}

/*
 * A child that puts samples with steps from `from` on, forever, into a
 * full tiered reservoir whose samples were all read: every put spills or
 * evicts.
 */
static pid_t spawn_spiller(const char *name, uint32_t from)
{
	pid_t pid = fork_child();
	if (pid == 0) {
		struct cistern *h;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		for (uint32_t i = from;; i++) {
			uint8_t buf[SLOT];
			fill_payload(buf, len_of(i), 3, i);
			struct cistern_meta m = {.sim_id = 3, .time_step = i};
			int r = cistern_put(h, buf, len_of(i), &m, 1000);
			if (r < 0 && r != -ETIMEDOUT)
				_exit(2);
		}
	}
	return pid;
}

Test(tiered, a_producer_killed_mid_spill_leaves_no_torn_or_lost_sample, .timeout = 120)
{
	struct cistern *c = seg_create("spill", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	enum { ROUNDS = 12, SPAN = 1u << 20 };
	for (int k = 0; k < ROUNDS; k++) {
		/* Every sample read, so that puts may evict in both tiers. */
		read_batches(c, 40);
		pid_t pid = spawn_spiller(name, (uint32_t)(k + 1) * SPAN);
		cr_assert_gt(pid, 0);
		struct timespec ts = {0, (long)(1 + k % 4) * 3 * 1000 * 1000};
		nanosleep(&ts, NULL);
		kill_and_reap(pid);
		struct cistern *h;
		cr_assert_eq(cistern_attach(name, &h), 0); /* sweeps the dead spiller */
		cr_assert_eq(cistern_detach(h), 0);
	}
	/*
	 * A spill moves samples and an eviction takes a seen one: what is
	 * held is what was put less what was evicted, no fewer (a dead
	 * producer's eviction may have no put after it).
	 */
	struct cistern_stats st = stats(c);
	uint64_t held = st.puts - st.evictions;
	cr_assert_geq(st.population, held);
	cr_assert_leq(st.cold_population, COLD);
	/* Every sample left reads back whole (the drain checks bytes and lengths). */
	uint32_t n = drain_all(c, (ROUNDS + 1) * SPAN);
	cr_assert_eq(n, held, "%u read back, %lu held", n, (unsigned long)held);
}

static bool cold_file_exists(const char *name)
{
	char path[512];
	cr_assert_eq(cistern__cold_path(path, sizeof(path), dir, name), 0);
	return access(path, F_OK) == 0;
}

Test(tiered, rm_and_unlink_remove_the_cold_file)
{
	struct cistern_config cfg = tiered_cfg();
	struct cistern *c = seg_create("rm", cfg);
	const char *name = seg_name_of(c);
	cr_assert(cold_file_exists(name));
	cr_assert_eq(seg_detach(c), 0);
	cr_assert_eq(cistern_remove(name, 0), 0);
	cr_assert_not(cold_file_exists(name));
	/* And cistern_unlink(). */
	c = NULL;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	seg_keep(name, c);
	cr_assert(cold_file_exists(name));
	cr_assert_eq(seg_detach(c), 0);
	cr_assert_eq(cistern_unlink(name), 0);
	cr_assert_not(cold_file_exists(name));
}

Test(tiered, create_refuses_a_tier_for_prioritized_and_sim_paired_with_a_reason)
{
	struct cistern_config cfg = tiered_cfg();
	cfg.policy = CISTERN_PRIORITIZED;
	const char *why = cistern_config_problem(&cfg);
	cr_assert_not_null(why);
	cr_assert(strstr(why, "prioritized") && strstr(why, "cold tier"), "%s", why);
	cfg.policy = CISTERN_SIM_PAIRED_RESERVOIR;
	cfg.watermark = 1;
	cfg.sweep_size = 2;
	cfg.nb_time_steps = 4;
	why = cistern_config_problem(&cfg);
	cr_assert_not_null(why);
	cr_assert(strstr(why, "pair"), "%s", why);
	struct cistern *c = NULL;
	cr_assert_eq(cistern_create(seg_name("paired"), &cfg, &c), -EINVAL);
	cr_assert_not(cold_file_exists(seg_name("paired")));
}

/* In a child with a private mount namespace: a 1 MiB tmpfs at dir/mnt, then fn. */
static int in_small_tmpfs(int (*fn)(const char *mnt))
{
	pid_t pid = fork_child();
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) < 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
			_exit(101);
		if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(102);
		char mnt[96];
		snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
		if (mkdir(mnt, 0700) < 0)
			_exit(103);
		if (mount("cistern-test", mnt, "tmpfs", 0, "size=1m") < 0)
			_exit(104);
		int code = fn(mnt);
		umount2(mnt, MNT_DETACH);
		rmdir(mnt);
		_exit(code);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "the child died of signal %d", WTERMSIG(st));
	return WEXITSTATUS(st);
}

static int create_too_big(const char *mnt)
{
	char name[64];
	snprintf(name, sizeof(name), "t-full-%d", (int)getpid());
	struct cistern_config cfg = tiered_cfg();
	cfg.slot_size = 65536;
	cfg.cold_slots = 64; /* 4 MiB on a 1 MiB file system */
	cfg.cold_dir = mnt;
	struct cistern *c = NULL;
	int r = cistern_create(name, &cfg, &c);
	if (r != -ENOSPC) {
		if (r == 0) {
			cistern_detach(c);
			cistern_unlink(name);
		}
		return 1;
	}
	/* Neither the segment nor a cold file is left. */
	if (cistern_attach(name, &c) != -ENOENT)
		return 2;
	char path[512];
	cistern__cold_path(path, sizeof(path), mnt, name);
	if (access(path, F_OK) == 0)
		return 3;
	return 0;
}

Test(tiered, a_disk_too_small_for_the_tier_gives_enospc_at_create)
{
	int code = in_small_tmpfs(create_too_big);
	cr_assert_lt(code, 100, "could not mount a small tmpfs (step %d)", code - 100);
	cr_assert_eq(code, 0, "check %d failed", code);
}

Test(tiered, create_refuses_a_tier_where_io_uring_is_forbidden_and_leaves_nothing)
{
	cr_assert_eq(forbid_io_uring(), 0);
	struct cistern_config cfg = tiered_cfg();
	struct cistern *c = NULL;
	const char *name = seg_name("tiered-nouring");
	cr_assert_eq(cistern_create(name, &cfg, &c), -ENOSYS);
	cr_assert_null(c);
	cr_assert_eq(cistern_attach(name, &c), -ENOENT, "the segment was left behind");
	char path[160];
	snprintf(path, sizeof(path), "%s/cistern.%s.cold", dir, name);
	cr_assert_neq(access(path, F_OK), 0, "%s was left behind", path);
	/* Without a tier the same process still makes segments: only the tier needs io_uring. */
	cfg.cold_slots = 0;
	cfg.cold_dir = NULL;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	cistern_detach(c);
}

Test(tiered, a_dump_holds_the_hot_and_the_cold_samples)
{
	struct cistern *c = seg_create("dump", tiered_cfg());
	for (uint32_t i = 0; i < HOT + 8; i++)
		put_step(c, i);
	char path[128];
	snprintf(path, sizeof(path), "%s/seg.dump", dir);
	struct cistern_dump_info info;
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, &info), 0);
	cr_assert_eq(info.samples, HOT + 8);
	cr_assert_eq(info.cold_samples, cold_after(8));
	cr_assert_eq(info.config.cold_slots, COLD);
	cr_assert_str_eq(info.cold_dir, dir);
	unlink(path);
}

Test(tiered, a_read_only_handle_sees_hot_and_cold_population)
{
	struct cistern *c = seg_create("view", tiered_cfg());
	for (uint32_t i = 0; i < HOT + 40; i++)
		put_step(c, i);
	struct cistern *v;
	cr_assert_eq(cistern_open_readonly(seg_name_of(c), &v), 0);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(v, &st), 0);
	cistern_detach(v);
	cr_assert_eq(st.population, HOT + 40);
	cr_assert_eq(st.cold_population, cold_after(40));
	cr_assert_eq(st.cold_slots, COLD);
	cr_assert_geq(st.cold_disk_bytes, (uint64_t)COLD * SLOT);
}

Test(tiered, single_reads_draw_each_tier_by_its_share_of_the_population)
{
	struct cistern *c = seg_create("share", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	enum { READS = 4000 };
	for (int k = 0; k < READS; k++) {
		struct cistern_sample s;
		cr_assert_eq(cistern_acquire(c, &s, 2000), 0);
		assert_whole(s.data, s.len, &s.meta);
		cr_assert_eq(cistern_release(c, &s), 0);
	}
	/*
	 * Four fifths of the samples are cold: a uniform draw reads cold 3200
	 * times in 4000 on average, with a standard deviation of about 25.
	 */
	struct cistern_stats st = stats(c);
	cr_assert_gt(st.cold_reads, 3000, "%lu cold reads", (unsigned long)st.cold_reads);
	cr_assert_lt(st.cold_reads, 3400, "%lu cold reads", (unsigned long)st.cold_reads);
}

Test(tiered, a_batch_reservoir_with_a_tier_reads_whole_batches_over_both)
{
	struct cistern_config cfg = tiered_cfg();
	cfg.policy = CISTERN_BATCH_RESERVOIR;
	cfg.batch_size = 32;
	cfg.watermark = 32;
	struct cistern *c = seg_create("breservoir", cfg);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	struct cistern_sample one;
	cr_assert_eq(cistern_acquire(c, &one, 0), -EINVAL, "a single read of a batch policy");
	read_batches(c, 8);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.gets, 8 * 32);
	cr_assert_gt(st.cold_reads, 0);
}

Test(tiered, samples_held_across_reads_are_each_released_once)
{
	struct cistern *c = seg_create("held", tiered_cfg());
	for (uint32_t i = 0; i < 24; i++)
		put_step(c, i);
	/* 24 samples, 8 of them cold: hold them all, one read at a time. */
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.cold_population, 0);
	for (uint32_t i = 24; i < HOT + 8; i++)
		put_step(c, i);
	enum { N = HOT + 8 };
	struct cistern_sample s[N];
	int got = 0;
	for (int tries = 0; got < N && tries < 100 * N; tries++) {
		if (cistern_acquire(c, &s[got], 0) != 0)
			break;
		got++;
	}
	cr_assert_gt(got, 0);
	for (int i = 0; i < got; i++) {
		assert_whole(s[i].data, s[i].len, &s[i].meta);
		cr_assert_eq(cistern_release(c, &s[i]), 0, "release %d of %d", i, got);
	}
}

/* ---- reading ahead ------------------------------------------------------ */

/* The cold slots handle c drew ahead, sorted, into out (COLD of room): their count. */
static size_t ahead_sorted(struct cistern *c, uint64_t *out)
{
	size_t k = cistern__tiered_ahead_slots(c, 0, out, COLD);
	cr_assert_leq(k, COLD);
	for (size_t i = 1; i < k; i++)
		for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
			uint64_t x = out[j];
			out[j] = out[j - 1];
			out[j - 1] = x;
		}
	return k;
}

/* The cold slots of the cold members of s[0..n), sorted, into out: their count. */
static size_t cold_members_sorted(const struct cistern_sample *s, size_t n, uint64_t *out)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (s[i].index_ >= HOT)
			out[k++] = s[i].index_ - HOT;
	for (size_t i = 1; i < k; i++)
		for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
			uint64_t x = out[j];
			out[j] = out[j - 1];
			out[j - 1] = x;
		}
	return k;
}

/* A cold sample handed out is the one its entry holds now, and is whole. */
static void assert_current(struct cistern *c, const struct cistern_sample *s)
{
	assert_whole(s->data, s->len, &s->meta);
	if (s->index_ < HOT)
		return;
	const struct cistern__cold_ent *e = cistern__tiered_ent(c, s->index_ - HOT);
	cr_assert_not_null(e);
	uint64_t w = atomic_load(&e->word);
	cr_assert_eq(cistern__cold_state(w), CISTERN__COLD_HELD, "cold slot %u not held",
		     s->index_ - HOT);
	cr_assert_eq(e->id, s->meta.sample_id, "cold slot %u holds sample %lu, handed out %lu",
		     s->index_ - HOT, (unsigned long)e->id, (unsigned long)s->meta.sample_id);
}

Test(tiered, a_batch_drawn_ahead_is_exactly_the_next_batch_read)
{
	struct cistern *c = seg_create("ahead", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	for (int round = 0; round < 8; round++) {
		struct cistern_sample s[32];
		cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
		uint64_t ahead[COLD], got[32];
		/* Four fifths of the samples are cold: a batch of 32 draws some. */
		size_t k = ahead_sorted(c, ahead);
		cr_assert_gt(k, 0, "no cold member drawn ahead");
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
		cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
		size_t m = cold_members_sorted(s, 32, got);
		cr_assert_eq(m, k, "round %d: %zu cold members drawn ahead, %zu read", round, k, m);
		for (size_t i = 0; i < k; i++)
			cr_assert_eq(got[i], ahead[i], "round %d: cold member %zu differs", round,
				     i);
		for (int i = 0; i < 32; i++)
			assert_current(c, &s[i]);
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	}
}

Test(tiered, a_handle_without_read_ahead_draws_nothing_ahead)
{
	struct cistern *c = seg_create("noahead", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	cr_assert_eq(cistern__tiered_read_ahead(c, false), 0);
	struct cistern_sample s[32];
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	uint64_t ahead[COLD];
	cr_assert_eq(cistern__tiered_ahead_slots(c, 0, ahead, COLD), 0);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
}

/* Whether p is the data of a cold member of s[0..n). */
static bool cold_data_in(const void *p, const struct cistern_sample *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i].index_ >= HOT && s[i].data == p)
			return true;
	return false;
}

/*
 * Hold batch `held` while 16 more batches are read and released: no cold
 * member of a later batch shares a buffer with it, and its bytes stay whole.
 */
static void assert_held_batch_untouched(struct cistern *c)
{
	struct cistern_sample held[32], s[32];
	cr_assert_eq(cistern_acquire_batch(c, held, 32, 2000), 32);
	cr_assert_gt(cold_members_sorted(held, 32, (uint64_t[32]){0}), 0, "no cold member held");
	for (int round = 0; round < 16; round++) {
		cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
		for (int i = 0; i < 32; i++) {
			assert_whole(s[i].data, s[i].len, &s[i].meta);
			if (s[i].index_ >= HOT)
				cr_assert(!cold_data_in(s[i].data, held, 32),
					  "round %d: member %d reuses a buffer still held", round,
					  i);
		}
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	}
	for (int i = 0; i < 32; i++)
		assert_whole(held[i].data, held[i].len, &held[i].meta);
	cr_assert_eq(cistern_release_batch(c, held, 32), 0);
}

Test(tiered, buffers_reused_by_reads_ahead_never_overwrite_a_batch_still_held)
{
	struct cistern *c = seg_create("reuse", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	assert_held_batch_untouched(c);
}

Test(tiered, buffers_reused_by_plain_batch_reads_never_overwrite_a_batch_still_held)
{
	struct cistern *c = seg_create("reuse_plain", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	cr_assert_eq(cistern__tiered_read_ahead(c, false), 0);
	assert_held_batch_untouched(c);
}

/* The slot buffers of c's reads ahead, both batches. */
static size_t buffers_ahead(const struct cistern *c)
{
	uint64_t ahead[COLD];
	return cistern__tiered_ahead_slots(c, 0, ahead, COLD) +
	       cistern__tiered_ahead_slots(c, 1, ahead, COLD);
}

/* The cold members of s[0..n): each holds a slot buffer. */
static size_t cold_held(const struct cistern_sample *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += s[i].index_ >= HOT;
	return k;
}

Test(tiered, cold_buffers_given_back_serve_the_next_reads_and_no_more_are_made)
{
	struct cistern *c = seg_create("spares", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	struct cistern_sample s[32];
	size_t peak = 0, total, registered;
	for (int round = 0; round < 16; round++) {
		cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
		/* Every buffer is held, read into ahead or free: none is lost. */
		size_t held = cold_held(s, 32) + buffers_ahead(c);
		size_t free_now = cistern__tiered_spares(c, &total, &registered);
		cr_assert_eq(free_now + held, total, "round %d: %zu free, %zu held, %zu made",
			     round, free_now, held, total);
		peak = held > peak ? held : peak;
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
		held = buffers_ahead(c);
		free_now = cistern__tiered_spares(c, &total, &registered);
		cr_assert_eq(free_now + held, total,
			     "round %d released: %zu free, %zu held, %zu made", round, free_now,
			     held, total);
		peak = held > peak ? held : peak;
		/* A buffer is made only when the handle holds more than ever before. */
		cr_assert_leq(total, peak, "round %d: %zu made, at most %zu held at once", round,
			      total, peak);
	}
}

/*
 * Read `batches` batches of 32 from c: 0 if each sample was whole (its
 * bytes those of its time step), else the count of failures. Fit for a
 * fork() child, where an assertion cannot report.
 */
static int batches_whole(struct cistern *c, int batches)
{
	struct cistern_sample s[32];
	int bad = 0;
	for (int b = 0; b < batches; b++) {
		if (cistern_acquire_batch(c, s, 32, 2000) != 32)
			return bad + 1;
		for (size_t i = 0; i < 32; i++)
			bad += s[i].len != len_of(s[i].meta.time_step) ||
			       !check_payload(s[i].data, s[i].len, 3, s[i].meta.time_step);
		if (cistern_release_batch(c, s, 32) < 0)
			bad++;
	}
	return bad;
}

Test(tiered, cold_reads_go_into_buffers_registered_with_the_ring)
{
	struct cistern *c = seg_create("fixed", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	uint64_t before, after;
	unsigned regions;
	cistern__uring_fixed(&before, &regions);
	cr_assert_eq(batches_whole(c, 8), 0);
	cistern__uring_fixed(&after, &regions);
	size_t total, registered;
	cistern__tiered_spares(c, &total, &registered);
	cr_assert_gt(total, 0);
	cr_assert_eq(registered, total, "%zu of %zu buffers registered", registered, total);
	cr_assert_geq(after - before, total, "%llu reads into registered buffers",
		      (unsigned long long)(after - before));
}

Test(tiered, closing_a_handle_gives_its_ring_entries_back)
{
	struct cistern *c = seg_create("unreg", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	unsigned base;
	uint64_t fixed;
	cistern__uring_fixed(&fixed, &base);
	/* More handles, one after another, than the ring's table has entries. */
	for (int round = 0; round < 80; round++) {
		struct cistern *h;
		cr_assert_eq(cistern_attach(name, &h), 0);
		cr_assert_eq(batches_whole(h, 1), 0);
		size_t total, registered;
		cistern__tiered_spares(h, &total, &registered);
		cr_assert_eq(registered, total, "handle %d: %zu of %zu buffers registered", round,
			     registered, total);
		cr_assert_eq(cistern_detach(h), 0);
		unsigned regions;
		cistern__uring_fixed(&fixed, &regions);
		cr_assert_eq(regions, base, "handle %d left %u regions, %u before", round, regions,
			     base);
	}
}

Test(tiered, reads_are_whole_when_the_ring_takes_no_more_regions)
{
	struct cistern *c = seg_create("noreg", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	/* Fill the ring's table with regions of our own. */
	static uint8_t spare[4096] __attribute__((aligned(4096)));
	struct cistern__io_region mine[128];
	size_t n = 0;
	while (n < 128 && cistern__uring_register(spare, sizeof(spare), &mine[n]) == 0)
		n++;
	cr_assert_lt(n, 128, "the table took %zu regions", n);
	cr_assert_eq(batches_whole(c, 8), 0);
	size_t total, registered;
	cistern__tiered_spares(c, &total, &registered);
	cr_assert_gt(total, 0);
	cr_assert_eq(registered, 0, "%zu buffers registered in a full table", registered);
	for (size_t i = 0; i < n; i++)
		cistern__uring_unregister(&mine[i]);
}

/* In a fork() child: attach, read batches whole, into regions of the child's own ring. */
static int child_reads_registered(const char *name)
{
	struct cistern *h;
	if (cistern_attach(name, &h) < 0)
		return 1;
	uint64_t before, after;
	unsigned regions;
	cistern__uring_fixed(&before, &regions);
	if (batches_whole(h, 4) != 0)
		return 4;
	cistern__uring_fixed(&after, &regions);
	size_t total, registered;
	cistern__tiered_spares(h, &total, &registered);
	if (registered != total || regions == 0 || after - before < total)
		return 2;
	return cistern_detach(h) == 0 ? 0 : 3;
}

Test(tiered, a_fork_child_reads_into_regions_of_its_own_ring)
{
	struct cistern *c = seg_create("forkreg", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	/* The parent's regions are registered before the fork. */
	cr_assert_eq(batches_whole(c, 2), 0);
	pid_t pid = fork_child();
	if (pid == 0)
		_exit(child_reads_registered(name));
	cr_assert_eq(reap_status(pid), 0, "the child's reads");
	/* The parent's regions still serve its reads. */
	uint64_t before, after;
	unsigned regions;
	cistern__uring_fixed(&before, &regions);
	cr_assert_eq(batches_whole(c, 4), 0);
	cistern__uring_fixed(&after, &regions);
	cr_assert_gt(after, before);
}

Test(tiered, a_member_rewritten_after_the_draw_ahead_is_not_handed_out_stale)
{
	struct cistern *c = seg_create("stale", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	/* Nearly every sample read, so that puts may evict in both tiers. */
	batches_whole(c, 40);
	struct cistern_sample s[32];
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	uint64_t ahead[COLD], was[COLD];
	size_t k = ahead_sorted(c, ahead);
	cr_assert_gt(k, 0, "no cold member drawn ahead");
	for (size_t i = 0; i < k; i++)
		was[i] = atomic_load(&cistern__tiered_ent(c, ahead[i])->word);
	/* Another handle puts until nothing more may be evicted: the spills rewrite cold slots. */
	struct cistern *p;
	cr_assert_eq(cistern_attach(name, &p), 0);
	static uint8_t b[SLOT];
	for (uint32_t step = HOT + COLD; step < 5 * (HOT + COLD); step++) {
		fill_payload(b, len_of(step), 3, step);
		struct cistern_meta m = {.sim_id = 3, .time_step = step};
		if (cistern_put(p, b, len_of(step), &m, 0) != 0)
			break;
	}
	cr_assert_eq(cistern_detach(p), 0);
	size_t rewritten = 0;
	for (size_t i = 0; i < k; i++)
		rewritten += atomic_load(&cistern__tiered_ent(c, ahead[i])->word) != was[i];
	cr_assert_gt(rewritten, 0, "no member drawn ahead was rewritten: nothing to prove");
	/* The next batch hands out only the samples the entries hold now. */
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	for (int i = 0; i < 32; i++)
		assert_current(c, &s[i]);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
}

Test(tiered, a_member_drawn_ahead_whose_bytes_fail_their_crc_is_replaced)
{
	struct cistern *c = seg_create("badcrc", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	struct cistern_sample s[32];
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	uint64_t ahead[COLD];
	size_t k = ahead_sorted(c, ahead);
	cr_assert_gt(k, 0, "no cold member drawn ahead");
	/* The entry's word stays: only the check of the bytes read can tell. */
	struct cistern__cold_ent *e = (struct cistern__cold_ent *)(uintptr_t)cistern__tiered_ent(
		c, ahead[0]);
	uint32_t crc = e->crc;
	e->crc = ~crc;
	/* A read of the batch before may have checked it: make this read check it again. */
	atomic_store(&e->verified, 0);
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	e->crc = crc;
	uint64_t got[32];
	size_t m = cold_members_sorted(s, 32, got);
	for (size_t i = 0; i < m; i++)
		cr_assert_neq(got[i], ahead[0], "the member that failed its CRC was handed out");
	for (int i = 0; i < 32; i++)
		assert_current(c, &s[i]);
	/* Its place was drawn afresh: the batch still holds 32 distinct samples. */
	for (int i = 0; i < 32; i++)
		for (int j = i + 1; j < 32; j++)
			cr_assert_neq(s[i].meta.sample_id, s[j].meta.sample_id,
				      "members %d and %d are one sample", i, j);
	/* The next batch drawn ahead is still exactly the next batch read. */
	k = ahead_sorted(c, ahead);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	m = cold_members_sorted(s, 32, got);
	cr_assert_eq(m, k, "%zu cold members drawn ahead, %zu read", k, m);
	for (size_t i = 0; i < k; i++)
		cr_assert_eq(got[i], ahead[i], "cold member %zu differs", i);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
}

/* ---- the CRC check of cold reads ---------------------------------------- */

/* Change bytes of cold slot j of segment c's file behind its back. */
static void corrupt_cold(struct cistern *c, uint64_t j)
{
	char path[512];
	cr_assert_eq(cistern__cold_path(path, sizeof(path), dir, seg_name_of(c)), 0);
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	static const char junk[] = "not the bytes written";
	uint64_t sb = cistern__cold_slot_bytes(SLOT);
	cr_assert_eq(pwrite(fd, junk, sizeof(junk), (off_t)(CISTERN__COLD_BLOCK + j * sb)),
		     (ssize_t)sizeof(junk));
	cr_assert_eq(fsync(fd), 0);
	close(fd);
}

/* Batch reads of 32 until one fails: its error (0 if none of `batches` did). */
static int read_until_error(struct cistern *c, unsigned batches)
{
	for (unsigned b = 0; b < batches; b++) {
		struct cistern_sample s[32];
		int r = cistern_acquire_batch(c, s, 32, 2000);
		if (r < 0)
			return r;
		cr_assert_eq(r, 32);
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	}
	return 0;
}

Test(tiered, a_cold_slot_corrupted_on_disk_fails_the_first_batch_read_of_it)
{
	struct cistern *c = seg_create("corrupt", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	cr_assert_eq(cistern__tiered_read_ahead(c, false), 0);
	for (uint64_t j = 0; j < COLD; j++)
		corrupt_cold(c, j);
	cr_assert_eq(read_until_error(c, 8), -EIO);
	struct cistern__ahead_stats a;
	cistern__tiered_ahead_stats(c, &a);
	cr_assert_gt(a.crc_fails, 0);
	cr_assert_eq(a.crc_checks + a.crc_skips, 0, "a corrupted slot passed its check");
	for (uint64_t j = 0; j < COLD; j++)
		cr_assert_eq(atomic_load(&cistern__tiered_ent(c, j)->verified), 0,
			     "corrupted cold slot %lu marked checked", (unsigned long)j);
}

Test(tiered, each_cold_write_is_checked_at_its_first_read_and_skipped_at_later_ones)
{
	struct cistern *c = seg_create("crccount", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	uint8_t read[COLD] = {0};
	uint64_t total = 0, distinct = 0;
	for (unsigned b = 0; b < 40; b++) {
		struct cistern_sample s[32];
		cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
		for (int i = 0; i < 32; i++) {
			assert_current(c, &s[i]);
			if (s[i].index_ < HOT)
				continue;
			total++;
			distinct += !read[s[i].index_ - HOT];
			read[s[i].index_ - HOT] = 1;
		}
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	}
	struct cistern__ahead_stats a;
	cistern__tiered_ahead_stats(c, &a);
	cr_assert_eq(a.crc_fails, 0);
	cr_assert_eq(a.crc_checks, distinct, "%lu checks for %lu cold samples read",
		     (unsigned long)a.crc_checks, (unsigned long)distinct);
	cr_assert_eq(a.crc_skips, total - distinct, "%lu skips for %lu reads again",
		     (unsigned long)a.crc_skips, (unsigned long)(total - distinct));
	cr_assert_gt(a.crc_skips, 0, "no cold sample was read twice: nothing to prove");
	for (uint64_t j = 0; j < COLD; j++) {
		const struct cistern__cold_ent *e = cistern__tiered_ent(c, j);
		uint32_t want = read[j] ? cistern__cold_gen(atomic_load(&e->word)) + 1 : 0;
		cr_assert_eq(atomic_load(&e->verified), want, "cold slot %lu", (unsigned long)j);
	}
}

Test(tiered, a_cold_slot_rewritten_after_a_checked_read_is_checked_again)
{
	struct cistern *c = seg_create("crcagain", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	cr_assert_eq(cistern__tiered_read_ahead(c, false), 0);
	/* Nearly every sample read, so that puts may evict in both tiers. */
	batches_whole(c, 40);
	uint64_t was[COLD];
	uint32_t marked[COLD];
	for (uint64_t j = 0; j < COLD; j++) {
		was[j] = atomic_load(&cistern__tiered_ent(c, j)->word);
		marked[j] = atomic_load(&cistern__tiered_ent(c, j)->verified);
	}
	struct cistern *p;
	cr_assert_eq(cistern_attach(name, &p), 0);
	static uint8_t b[SLOT];
	for (uint32_t step = HOT + COLD; step < 5 * (HOT + COLD); step++) {
		fill_payload(b, len_of(step), 3, step);
		struct cistern_meta m = {.sim_id = 3, .time_step = step};
		if (cistern_put(p, b, len_of(step), &m, 0) != 0)
			break;
	}
	cr_assert_eq(cistern_detach(p), 0);
	size_t again = 0;
	for (uint64_t j = 0; j < COLD; j++) {
		const struct cistern__cold_ent *e = cistern__tiered_ent(c, j);
		if (atomic_load(&e->word) == was[j])
			continue;
		cr_assert_eq(atomic_load(&e->verified), 0, "rewritten cold slot %lu still marked",
			     (unsigned long)j);
		again += marked[j] != 0;
		corrupt_cold(c, j);
	}
	cr_assert_gt(again, 0, "no checked cold slot was rewritten: nothing to prove");
	/* The rewritten slots' bad bytes are caught as a new write's are. */
	cr_assert_eq(read_until_error(c, 40), -EIO);
}

/*
 * A spawn_attached() set-up: read a batch and release it, then, if *arg
 * says so, read the next one and hold it. The batches drawn ahead (one
 * while a batch is held, two after a release) must have their reads
 * started. 0, or the child's exit status.
 */
static int read_with_batches_ahead(struct cistern *h, const void *arg)
{
	bool hold = *(const bool *)arg;
	struct cistern_sample s[32];
	uint64_t ahead[COLD];
	if (cistern_acquire_batch(h, s, 32, 2000) != 32 || cistern_release_batch(h, s, 32) != 0)
		return 2;
	if (hold && cistern_acquire_batch(h, s, 32, 2000) != 32)
		return 2;
	if (cistern__tiered_ahead_slots(h, 0, ahead, COLD) == 0)
		return 3;
	if (!hold && cistern__tiered_ahead_slots(h, 1, ahead, COLD) == 0)
		return 3;
	return 0;
}

/*
 * A child that reads a batch, releases it and reads the next (so that it
 * holds a batch and has the one after drawn ahead, its reads started),
 * then waits to be killed.
 */
static pid_t spawn_reader_ahead(const char *name)
{
	static const bool hold = true;
	return spawn_attached(name, read_with_batches_ahead, &hold);
}

Test(tiered, a_reader_killed_with_reads_ahead_in_flight_loses_and_wedges_nothing)
{
	struct cistern *c = seg_create("killahead", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	pid_t pid = spawn_reader_ahead(name);
	cr_assert_gt(pid, 0);
	kill_and_reap(pid);
	/* An attach sweeps the dead first. */
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0);
	cr_assert_eq(cistern_detach(h), 0);
	for (uint64_t j = 0; j < COLD; j++)
		cr_assert_eq(atomic_load(&cistern__tiered_ent(c, j)->pins), 0,
			     "cold slot %lu still pinned", (unsigned long)j);
	/* Every sample is still there, and each is taken once: nothing is pinned for ever. */
	cr_assert_eq(drain_all(c, HOT + COLD), HOT + COLD);
}

/* Both batches drawn ahead, sorted into next[] and after[] (COLD each): their counts. */
static void both_ahead_sorted(struct cistern *c, uint64_t *next, size_t *kn, uint64_t *after,
			      size_t *ka)
{
	*kn = ahead_sorted(c, next);
	*ka = cistern__tiered_ahead_slots(c, 1, after, COLD);
	cr_assert_leq(*ka, COLD);
	for (size_t i = 1; i < *ka; i++)
		for (size_t j = i; j > 0 && after[j - 1] > after[j]; j--) {
			uint64_t x = after[j];
			after[j] = after[j - 1];
			after[j - 1] = x;
		}
}

/* Read a batch of 32: its cold members are exactly want[0..k) (sorted); then release it. */
static void assert_next_batch_is(struct cistern *c, const uint64_t *want, size_t k,
				 const char *which)
{
	struct cistern_sample s[32];
	uint64_t got[32];
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	size_t m = cold_members_sorted(s, 32, got);
	cr_assert_eq(m, k, "%s: %zu cold members drawn ahead, %zu read", which, k, m);
	for (size_t i = 0; i < k; i++)
		cr_assert_eq(got[i], want[i], "%s: cold member %zu differs", which, i);
	for (int i = 0; i < 32; i++)
		assert_current(c, &s[i]);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
}

Test(tiered, a_release_draws_the_batch_after_the_next_and_both_are_read_in_turn)
{
	struct cistern *c = seg_create("ahead2", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	struct cistern_sample s[32];
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	for (int round = 0; round < 4; round++) {
		uint64_t next[COLD], after[COLD];
		size_t kn, ka;
		both_ahead_sorted(c, next, &kn, after, &ka);
		cr_assert_gt(kn, 0, "round %d: no cold member drawn for the next batch", round);
		cr_assert_gt(ka, 0, "round %d: no cold member drawn for the batch after", round);
		/* One pin bit a handle: no sample is drawn for both. */
		for (size_t i = 0; i < kn; i++)
			for (size_t j = 0; j < ka; j++)
				cr_assert_neq(next[i], after[j], "round %d: slot %lu drawn twice",
					      round, (unsigned long)next[i]);
		assert_next_batch_is(c, next, kn, "the next batch");
		assert_next_batch_is(c, after, ka, "the batch after");
	}
}

Test(tiered, members_of_both_batches_drawn_ahead_rewritten_are_not_handed_out_stale)
{
	struct cistern *c = seg_create("stale2", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	/* Nearly every sample read, so that puts may evict in both tiers. */
	batches_whole(c, 40);
	uint64_t next[COLD], after[COLD], was_next[COLD], was_after[COLD];
	size_t kn, ka;
	both_ahead_sorted(c, next, &kn, after, &ka);
	cr_assert(kn > 0 && ka > 0, "%zu and %zu cold members drawn ahead", kn, ka);
	for (size_t i = 0; i < kn; i++)
		was_next[i] = atomic_load(&cistern__tiered_ent(c, next[i])->word);
	for (size_t i = 0; i < ka; i++)
		was_after[i] = atomic_load(&cistern__tiered_ent(c, after[i])->word);
	/* Another handle puts until nothing more may be evicted: the spills rewrite cold slots. */
	struct cistern *p;
	cr_assert_eq(cistern_attach(name, &p), 0);
	static uint8_t b[SLOT];
	for (uint32_t step = HOT + COLD; step < 5 * (HOT + COLD); step++) {
		fill_payload(b, len_of(step), 3, step);
		struct cistern_meta m = {.sim_id = 3, .time_step = step};
		if (cistern_put(p, b, len_of(step), &m, 0) != 0)
			break;
	}
	cr_assert_eq(cistern_detach(p), 0);
	size_t rn = 0, ra = 0;
	for (size_t i = 0; i < kn; i++)
		rn += atomic_load(&cistern__tiered_ent(c, next[i])->word) != was_next[i];
	for (size_t i = 0; i < ka; i++)
		ra += atomic_load(&cistern__tiered_ent(c, after[i])->word) != was_after[i];
	cr_assert(rn > 0 && ra > 0, "%zu and %zu members rewritten: nothing to prove", rn, ra);
	/* Both batches hand out only the samples the entries hold now. */
	for (int round = 0; round < 2; round++) {
		struct cistern_sample s[32];
		cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
		for (int i = 0; i < 32; i++)
			assert_current(c, &s[i]);
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	}
}

/*
 * A child that attaches, reads a batch and releases it (so that it has the
 * next two batches drawn ahead, their reads started) and waits to be killed.
 */
static pid_t spawn_reader_two_ahead(const char *name)
{
	static const bool hold = false;
	return spawn_attached(name, read_with_batches_ahead, &hold);
}

Test(tiered, a_reader_killed_with_two_batches_in_flight_leaves_nothing_pinned_or_lost)
{
	struct cistern *c = seg_create("kill2", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	uint64_t cold = stats(c).cold_population;
	pid_t pid = spawn_reader_two_ahead(name);
	cr_assert_gt(pid, 0);
	kill_and_reap(pid);
	/* An attach sweeps the dead first. */
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0);
	cr_assert_eq(cistern_detach(h), 0);
	uint64_t held = 0;
	for (uint64_t j = 0; j < COLD; j++) {
		const struct cistern__cold_ent *e = cistern__tiered_ent(c, j);
		cr_assert_eq(atomic_load(&e->pins), 0, "cold slot %lu still pinned",
			     (unsigned long)j);
		unsigned st = cistern__cold_state(atomic_load(&e->word));
		cr_assert(st == CISTERN__COLD_HELD || st == CISTERN__COLD_FREE,
			  "cold slot %lu left in state %u", (unsigned long)j, st);
		held += st == CISTERN__COLD_HELD;
	}
	cr_assert_eq(held, cold, "%lu cold samples held, %lu before", (unsigned long)held,
		     (unsigned long)cold);
	cr_assert_eq(stats(c).cold_population, cold);
	/* Every sample is still there, and each is taken once. */
	cr_assert_eq(drain_all(c, HOT + COLD), HOT + COLD);
}

Test(tiered, a_batch_read_of_another_size_drops_both_batches_drawn_ahead)
{
	struct cistern *c = seg_create("resize", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	struct cistern_sample s[32];
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	uint64_t ahead[COLD];
	cr_assert_gt(cistern__tiered_ahead_slots(c, 1, ahead, COLD), 0, "no batch after drawn");
	/* A batch of 16: both batches of 32 dropped, the next one of 16 drawn. */
	cr_assert_eq(cistern_acquire_batch(c, s, 16, 2000), 16);
	for (int i = 0; i < 16; i++)
		assert_current(c, &s[i]);
	size_t k = ahead_sorted(c, ahead);
	cr_assert_gt(k, 0, "no batch of 16 drawn ahead");
	cr_assert_eq(cistern__tiered_ahead_slots(c, 1, (uint64_t[COLD]){0}, COLD), 0,
		     "a batch after the next drawn before the release");
	cr_assert_eq(cistern_release_batch(c, s, 16), 0);
	cr_assert_gt(cistern__tiered_ahead_slots(c, 1, (uint64_t[COLD]){0}, COLD), 0,
		     "the release of 16 drew no batch after the next");
	/* A single read leaves both batches drawn ahead for the batch reads. */
	struct cistern_sample one;
	cr_assert_eq(cistern_acquire(c, &one, 2000), 0);
	assert_current(c, &one);
	cr_assert_eq(cistern_release(c, &one), 0);
	uint64_t now[COLD];
	cr_assert_eq(ahead_sorted(c, now), k);
	for (size_t i = 0; i < k; i++)
		cr_assert_eq(now[i], ahead[i], "a single read changed member %zu drawn ahead", i);
	/* The next batch of 16 is the one drawn; the sizes may change again. */
	uint64_t got[32];
	cr_assert_eq(cistern_acquire_batch(c, s, 16, 2000), 16);
	size_t m = cold_members_sorted(s, 16, got);
	cr_assert_eq(m, k, "%zu cold members drawn ahead, %zu read", k, m);
	for (size_t i = 0; i < k; i++)
		cr_assert_eq(got[i], ahead[i], "cold member %zu differs", i);
	cr_assert_eq(cistern_release_batch(c, s, 16), 0);
	cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
	for (int i = 0; i < 32; i++)
		assert_current(c, &s[i]);
	cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	/* Turned off, read ahead pins nothing and holds no batch. */
	cr_assert_eq(cistern__tiered_read_ahead(c, false), 0);
	cr_assert_eq(cistern__tiered_ahead_slots(c, 0, (uint64_t[COLD]){0}, COLD), 0);
	cr_assert_eq(cistern__tiered_ahead_slots(c, 1, (uint64_t[COLD]){0}, COLD), 0);
	for (uint64_t j = 0; j < COLD; j++)
		cr_assert_eq(atomic_load(&cistern__tiered_ent(c, j)->pins), 0,
			     "cold slot %lu still pinned", (unsigned long)j);
}

Test(tiered, the_batch_after_the_next_has_reads_outstanding_while_the_next_is_collected)
{
	struct cistern *c = seg_create("depth", tiered_cfg());
	for (uint32_t i = 0; i < HOT + COLD; i++)
		put_step(c, i);
	batches_whole(c, 1);
	for (int round = 0; round < 8; round++) {
		struct cistern__ahead_stats a0, a1;
		uint64_t after[COLD];
		size_t ka = cistern__tiered_ahead_slots(c, 1, after, COLD);
		cr_assert_gt(ka, 0, "round %d: no cold member drawn for the batch after", round);
		cistern__tiered_ahead_stats(c, &a0);
		struct cistern_sample s[32];
		cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
		cistern__tiered_ahead_stats(c, &a1);
		cr_assert_eq(a1.waits, a0.waits + 1, "round %d: the batch was not collected",
			     round);
		/* The ring holds both batches here: every read of the batch after started. */
		cr_assert_eq(a1.tail_depth - a0.tail_depth, ka,
			     "round %d: %lu reads outstanding as the wait ended, %zu drawn after",
			     round, (unsigned long)(a1.tail_depth - a0.tail_depth), ka);
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	}
}

/* ---- spills of a batch --------------------------------------------------- */

/* Put sample `step` at the full slot size (fill_payload(.., 5, step)). */
static void put_full(struct cistern *c, uint32_t step)
{
	static uint8_t buf[SLOT];
	fill_payload(buf, SLOT, 5, step);
	struct cistern_meta m = {.sim_id = 5, .time_step = step};
	int r = cistern_put(c, buf, SLOT, &m, 0);
	cr_assert_eq(r, 0, "put %u without waiting: %s", step, cistern_strerror(r));
}

Test(tiered, a_spill_moves_a_batch_into_a_run_of_cold_slots_with_one_write)
{
	struct cistern *c = seg_create("run", tiered_cfg());
	for (uint32_t i = 0; i < HOT; i++)
		put_full(c, i);
	uint64_t w0, b0, w1, b1;
	cistern__uring_written(&w0, &b0);
	put_full(c, HOT); /* the hot arena is full: this put spills */
	cistern__uring_written(&w1, &b1);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.cold_spilled, BATCH);
	cr_assert_eq(st.cold_population, BATCH);
	cr_assert_eq(w1 - w0, 1, "%lu writes for one spill", (unsigned long)(w1 - w0));
	/* Every sample fills its slot: the bytes written are the bytes spilled. */
	cr_assert_leq((b1 - b0) * 10, (uint64_t)BATCH * SLOT * 11, "%lu bytes written",
		      (unsigned long)(b1 - b0));
	/* The run lies in file order from the cursor, which starts at slot 0. */
	for (uint64_t j = 0; j < COLD; j++)
		cr_assert_eq(cistern__cold_state(atomic_load(&cistern__tiered_ent(c, j)->word)),
			     j < BATCH ? CISTERN__COLD_HELD : CISTERN__COLD_FREE, "cold slot %lu",
			     (unsigned long)j);
}

Test(tiered, the_hot_slots_a_spill_frees_take_the_next_puts_without_a_write)
{
	struct cistern *c = seg_create("freed", tiered_cfg());
	for (uint32_t i = 0; i <= HOT; i++)
		put_full(c, i);
	uint64_t w0, b0, w1, b1;
	cistern__uring_written(&w0, &b0);
	for (uint32_t i = HOT + 1; i < HOT + BATCH; i++)
		put_full(c, i);
	cistern__uring_written(&w1, &b1);
	struct cistern_stats st = stats(c);
	cr_assert_eq(w1, w0, "the puts after a spill wrote %lu times", (unsigned long)(w1 - w0));
	cr_assert_eq(st.cold_spilled, BATCH);
	cr_assert_eq(st.population, HOT + BATCH);
	/* The next put finds the hot arena full again and spills the next batch. */
	put_full(c, HOT + BATCH);
	cistern__uring_written(&w1, &b1);
	cr_assert_eq(w1 - w0, 1);
	cr_assert_eq(stats(c).cold_spilled, 2 * BATCH);
}

/* The step at which a spiller child kills itself. */
static enum cistern__spill_step die_step;
static unsigned die_member;

static void die_at(enum cistern__spill_step step, unsigned i)
{
	if (step == die_step && i == die_member)
		raise(SIGKILL);
}

/*
 * Fill the hot arena with HOT samples, then fork a child that attaches and
 * puts one more, whose spill kills the child at (step, i). Its sweep by a
 * new attachment must leave exactly the HOT committed samples, each once,
 * `cold` of them in the cold tier.
 */
static void spiller_killed_at(enum cistern__spill_step step, unsigned i, uint32_t cold)
{
	struct cistern *c = seg_create("killat", tiered_cfg());
	const char *name = seg_name_of(c);
	for (uint32_t k = 0; k < HOT; k++)
		put_step(c, k);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cistern *h;
		if (cistern_attach(name, &h) < 0)
			_exit(1);
		die_step = step;
		die_member = i;
		cistern__spill_hook = die_at;
		uint8_t b[8] = {0};
		cistern_put(h, b, sizeof(b), NULL, 0);
		_exit(2); /* the spill never reached the step */
	}
	cr_assert_eq(reap_status(pid), 128 + SIGKILL, "the spiller did not die at its step");
	struct cistern *h;
	cr_assert_eq(cistern_attach(name, &h), 0); /* sweeps the dead spiller */
	cr_assert_eq(cistern_detach(h), 0);
	struct cistern_stats st = stats(c);
	cr_assert_eq(st.population, HOT, "population %lu", (unsigned long)st.population);
	cr_assert_eq(st.cold_population, cold, "cold population %lu",
		     (unsigned long)st.cold_population);
	cr_assert_eq(drain_all(c, HOT), HOT);
}

Test(tiered, a_spiller_killed_before_its_write_leaves_every_sample_hot)
{
	spiller_killed_at(CISTERN__SPILL_CLAIMED, 0, 0);
}

Test(tiered, a_spiller_killed_during_its_write_leaves_every_sample_hot)
{
	spiller_killed_at(CISTERN__SPILL_WRITING, 0, 0);
}

Test(tiered, a_spiller_killed_after_its_first_publish_moves_one_sample_once)
{
	spiller_killed_at(CISTERN__SPILL_PUBLISHED, 0, 1);
}

Test(tiered, a_spiller_killed_half_way_through_its_publishes_moves_those_once)
{
	spiller_killed_at(CISTERN__SPILL_PUBLISHED, BATCH / 2, BATCH / 2 + 1);
}

Test(tiered, a_spiller_killed_before_freeing_its_hot_slots_moves_the_run_once)
{
	spiller_killed_at(CISTERN__SPILL_PUBLISHED, BATCH - 1, BATCH);
}

Test(tiered, a_spiller_killed_while_freeing_its_hot_slots_moves_the_run_once)
{
	spiller_killed_at(CISTERN__SPILL_FREED, BATCH / 2, BATCH);
}

Test(tiered, producers_spilling_at_once_keep_every_sample_exactly_once, .timeout = 120)
{
	enum { PRODUCERS = 4, PER = (HOT + COLD) / PRODUCERS };
	struct cistern *c = seg_create("manyspill", tiered_cfg());
	const char *name = seg_name_of(c);
	for (int p = 0; p < PRODUCERS; p++) {
		pid_t pid = fork_child();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			struct cistern *h;
			if (cistern_attach(name, &h) < 0)
				_exit(1);
			for (uint32_t i = 0; i < PER; i++) {
				uint32_t step = (uint32_t)p * PER + i;
				uint8_t buf[SLOT];
				fill_payload(buf, len_of(step), 3, step);
				struct cistern_meta m = {.sim_id = 3, .time_step = step};
				if (cistern_put(h, buf, len_of(step), &m, 10000) != 0)
					_exit(2);
			}
			_exit(cistern_detach(h) == 0 ? 0 : 3);
		}
	}
	cr_assert_eq(reap_all(), 0, "a producer failed a put");
	struct cistern_stats st = stats(c);
	/* Every hot and cold slot holds one sample: none was evicted, none is doubled. */
	cr_assert_eq(st.population, HOT + COLD);
	cr_assert_eq(st.cold_population, COLD);
	cr_assert_eq(st.evictions, 0);
	cr_assert_eq(drain_all(c, HOT + COLD), HOT + COLD);
}

/* ---- the memory bound, measured ------------------------------------------ */

/*
 * A job of two forked processes, a learner and a producer, on a reservoir
 * of MEM_POP samples of SLOT bytes: the producer puts them all, and the
 * learner reads MEM_BATCHES batches of MEM_BATCH spread over the fill.
 */
#define MEM_HOT 1024
#define MEM_POP (16 * MEM_HOT)
#define MEM_BATCH 32
#define MEM_BATCHES 24
/* What a job may use past what the bound names (stacks, page tables, the rings). */
#define MEM_SLACK (8u << 20)

struct mem_job {
	_Atomic int made;
	_Atomic int failed;
	_Atomic uint32_t put;
};

static void mem_learner(struct mem_job *sh, const char *name, uint64_t hot, uint64_t cold)
{
	struct cistern_config cfg = tiered_cfg();
	cfg.slot_count = hot;
	cfg.cold_slots = cold;
	cfg.cold_dir = cold ? dir : NULL;
	cfg.watermark = MEM_BATCH;
	struct cistern *c;
	if (cistern_create(name, &cfg, &c) < 0)
		_exit(2);
	atomic_store(&sh->made, 1);
	for (uint32_t b = 0; b < MEM_BATCHES; b++) {
		/* Batch b once its share of the fill is in: the reads span the fill. */
		while (atomic_load(&sh->put) < (b + 1) * (MEM_POP / MEM_BATCHES)) {
			if (atomic_load(&sh->failed))
				_exit(3);
			struct timespec ts = {0, 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		struct cistern_sample s[MEM_BATCH];
		if (cistern_acquire_batch(c, s, MEM_BATCH, 5000) != MEM_BATCH)
			_exit(4);
		for (int i = 0; i < MEM_BATCH; i++)
			if (s[i].len != SLOT ||
			    !check_payload(s[i].data, SLOT, 5, s[i].meta.time_step))
				_exit(5);
		if (cistern_release_batch(c, s, MEM_BATCH) != 0)
			_exit(6);
	}
	_exit(cistern_detach(c) == 0 ? 0 : 7);
}

static void mem_producer(struct mem_job *sh, const char *name)
{
	struct cistern *c;
	if (cistern_attach(name, &c) < 0) {
		atomic_store(&sh->failed, 1);
		_exit(2);
	}
	static uint8_t buf[SLOT];
	for (uint32_t i = 0; i < MEM_POP; i++) {
		fill_payload(buf, SLOT, 5, i);
		struct cistern_meta m = {.sim_id = 5, .time_step = i};
		if (cistern_put(c, buf, SLOT, &m, 5000) != 0) {
			atomic_store(&sh->failed, 1);
			_exit(3);
		}
		atomic_fetch_add(&sh->put, 1);
	}
	_exit(cistern_detach(c) == 0 ? 0 : 4);
}

/*
 * Run the job on a new segment `name` of `hot` slots and `cold` cold slots:
 * its peak memory, measured by a memory cgroup the job runs in when there
 * is one, else by sampling its processes' PSS and the shm object. *seg
 * gets the size of the segment's shared memory object.
 */
static uint64_t mem_job_peak(const char *name, uint64_t hot, uint64_t cold, int run, uint64_t *seg)
{
	struct mem_job *sh = shared_alloc(sizeof(*sh));
	cr_assert_not_null(sh);
	char cg[256];
	bool by_cg = memwatch_cg_make(cg, sizeof(cg), "tiered-test", run);
	pid_t pids[2];
	pids[0] = fork_child();
	cr_assert_geq(pids[0], 0);
	if (pids[0] == 0) {
		if (by_cg && !memwatch_cg_join(cg))
			_exit(1);
		mem_learner(sh, name, hot, cold);
	}
	double t0 = mono_now();
	while (!atomic_load(&sh->made) && mono_now() - t0 < 30)
		usleep(1000);
	cr_assert(atomic_load(&sh->made), "the learner made no segment");
	pids[1] = fork_child();
	cr_assert_geq(pids[1], 0);
	if (pids[1] == 0) {
		if (by_cg && !memwatch_cg_join(cg))
			_exit(1);
		mem_producer(sh, name);
	}
	uint64_t peak = 0;
	int status[2] = {-1, -1}, left = 2;
	while (left > 0) {
		if (!by_cg) {
			uint64_t m = memwatch_shm_bytes(name);
			for (int i = 0; i < 2; i++)
				m += status[i] < 0 ? memwatch_pss(pids[i]) : 0;
			peak = m > peak ? m : peak;
		}
		usleep(10000);
		for (int i = 0; i < 2; i++) {
			int st;
			if (status[i] < 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
				status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
				left--;
			}
		}
		if (mono_now() - t0 > 120)
			for (int i = 0; i < 2; i++)
				if (status[i] < 0)
					kill(pids[i], SIGKILL);
	}
	if (by_cg)
		peak = memwatch_cg_peak(cg);
	struct stat st;
	char path[300];
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	*seg = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
	cistern_unlink(name);
	if (by_cg)
		memwatch_cg_remove(cg);
	munmap(sh, sizeof(*sh));
	cr_assert_eq(status[0], 0, "the learner failed (%d)", status[0]);
	cr_assert_eq(status[1], 0, "the producer failed (%d)", status[1]);
	cr_assert_gt(*seg, 0);
	cr_assert_gt(peak, 0, "no peak was measured");
	return peak;
}

Test(tiered, a_job_s_peak_memory_stays_near_its_hot_arena_not_its_population, .timeout = 300)
{
	uint64_t tseg, mseg;
	uint64_t tiered = mem_job_peak(seg_name("memt"), MEM_HOT, MEM_POP - MEM_HOT, 0, &tseg);
	uint64_t memory = mem_job_peak(seg_name("memm"), MEM_POP, 0, 1, &mseg);
	/*
	 * What the job needs besides its samples (its processes' own pages,
	 * allocators, a sanitizer's): the all-in-memory job's peak less its
	 * segment, measured in the same run.
	 */
	uint64_t overhead = memory > mseg ? memory - mseg : 0;
	/*
	 * The tiered job: its segment (the hot arena, the slot index, the
	 * cold index), the learner's cold buffers for the batch it holds and
	 * the one it reads ahead, and the producer's staging slots of a spill.
	 */
	uint64_t bound = tseg + 2 * MEM_BATCH * SLOT + (uint64_t)CISTERN__SPILL_MAX * SLOT +
			 overhead + MEM_SLACK;
	cr_log_info("peak: tiered %lu KiB (bound %lu KiB, segment %lu KiB), all in memory %lu KiB "
		    "(segment %lu KiB)",
		    (unsigned long)(tiered >> 10), (unsigned long)(bound >> 10),
		    (unsigned long)(tseg >> 10), (unsigned long)(memory >> 10),
		    (unsigned long)(mseg >> 10));
	cr_assert_leq(tiered, bound,
		      "tiered peak %lu KiB > bound %lu KiB (segment %lu KiB, overhead %lu KiB)",
		      (unsigned long)(tiered >> 10), (unsigned long)(bound >> 10),
		      (unsigned long)(tseg >> 10), (unsigned long)(overhead >> 10));
	/* And well below the same population all in memory. */
	cr_assert_lt(2 * tiered, memory, "tiered peak %lu KiB, all in memory %lu KiB",
		     (unsigned long)(tiered >> 10), (unsigned long)(memory >> 10));
}
