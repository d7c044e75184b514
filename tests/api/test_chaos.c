/* SPDX-License-Identifier: MIT */
/*
 * test_chaos.c - 4 producers and 4 readers on one segment while a killer
 * SIGKILLs a random participant at random moments and restarts it.
 *
 * The normal run does CHAOS_KILLS_QUICK kills (a few seconds); CISTERN_CHAOS_FULL=1
 * in the environment does CHAOS_KILLS_FULL, and CISTERN_CHAOS_KILLS=N does N (the
 * sanitizer runs of scripts/check.sh take fewer: there the races matter, and each kill
 * costs several times more). CISTERN_CHAOS_SEED=N replays a run's choice of victims
 * and moments (printed when a run fails).
 *
 * Bookkeeping, all in memory shared with the children (MAP_SHARED anonymous):
 *  - producer p tags each sample (p, seq) in its metadata and payload. Before a
 *    put it has next[p] == seq ("seq may be in flight"); after the put returned 0
 *    it sets committed[p][seq], then next[p] = seq + 1. A restarted producer
 *    never reuses a seq: the killer marks next[p] uncertain (it may or may not
 *    have been committed: killed after the commit but before the record) and
 *    moves next[p] on. So every tag is put at most once, and a received tag
 *    that is neither committed nor uncertain is a phantom.
 *  - readers count every (p, seq) they receive, after checking the payload and
 *    before releasing it.
 *
 * After the kills the producers stop, the killer closes reception, and every
 * reader must finish with end of data before a deadline (a wedge fails the
 * test, it does not hang it). The policy decides what the counts must show; the
 * harness takes the policy as a parameter (struct chaos_policy) so that the
 * reservoirs get their own check when they land.
 *
 * With chaos_policy.forking, every participant also forks children ("heirs")
 * that inherit its handle and outlive it, as DataLoader workers and
 * multiprocessing pools do: one right after it attaches, one the first time it
 * holds a reservation or a sample. So every kill lands on a process with live
 * children, which must not keep its attachment (and what it held) alive.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <sys/prctl.h>
#include <unistd.h>

#include "helpers.h"

#define PRODUCERS 4
#define READERS 4
#define PARTICIPANTS (PRODUCERS + READERS)
#define MAX_SEQ (UINT32_C(1) << 21) /* per producer; producers idle once there */
#define PAYLOAD 40
#define CHAOS_KILLS_QUICK 50
#define CHAOS_KILLS_FULL 300
#define KILL_GAP_US 15000        /* kills come 0 to this many microseconds apart */
#define OP_TIMEOUT_MS 100        /* every blocking call wakes to look at the clock */
#define DRAIN_DEADLINE_S 60.0    /* readers must reach end of data within this */
#define PROGRESS_DEADLINE_S 30.0 /* with chaos_policy.progress: puts and gets go on within this */

struct chaos_shared {
	_Atomic uint32_t stop;                  /* producers: stop putting */
	_Atomic uint32_t bad;                   /* payloads or tags that were wrong */
	_Atomic uint32_t next[PRODUCERS];       /* seq a producer is about to put */
	_Atomic uint32_t inflight[PRODUCERS];   /* how many from next[] on (0: one) */
	_Atomic uint32_t holding[PARTICIPANTS]; /* 1: holds a reservation or a sample now;
						    * 2: inside a cistern_put_batch() */
	_Atomic uint8_t committed[PRODUCERS][MAX_SEQ];
	_Atomic uint8_t uncertain[PRODUCERS][MAX_SEQ];
	_Atomic uint32_t received[PRODUCERS][MAX_SEQ];
	pid_t killer;                /* the test process */
	_Atomic uint32_t heirs;      /* children forked by participants */
	_Atomic uint32_t heirs_bad;  /* inherited handles that did not refuse a call */
	_Atomic uint32_t heirs_stop; /* heirs: exit now */
};

struct chaos_result {
	uint64_t committed, uncertain, received, missing, phantoms, duplicates;
	uint32_t max_received;
	uint64_t producers_died_holding; /* killed with a reservation in hand */
	uint64_t readers_died_holding;   /* killed with an acquired sample in hand */
	uint64_t readers_killed;
	struct cistern_stats stats;
};

/* What a policy requires of a finished run; cr_assert_* inside. */
struct chaos_policy {
	const char *name;
	struct cistern_config cfg;
	void (*verify)(const struct chaos_result *res);
	unsigned batch;     /* readers acquire batches of this many (0: one sample at a time) */
	bool pairs;         /* readers acquire pairs (SimPairedReservoir) */
	bool copying;       /* readers copy samples out with cistern_get() (FIFO), or with
			 * cistern_get_batch() of up to `batch` when batch > 0 */
	unsigned put_batch; /* producers put batches of up to this many (0: one at a time) */
	bool forking;       /* participants fork children that inherit their handle (see above) */
	bool progress;      /* after the kills, puts and gets must still go on (see below) */
};

static const char *chaos_name;
static unsigned chaos_batch;
static unsigned chaos_put_batch;
static bool chaos_pairs;
static bool chaos_copying;
static bool chaos_forking;
static struct chaos_shared *chaos_sh; /* for kill_all() */

/* ---- participants (children) ---------------------------------------------- */

static void tag_payload(uint8_t *buf, uint32_t p, uint32_t seq)
{
	memcpy(buf, &p, sizeof(p));
	memcpy(buf + 4, &seq, sizeof(seq));
	fill_payload(buf + 8, PAYLOAD - 8, p, seq);
}

/*
 * With chaos_forking: fork an heir of handle c. The inherited handle must
 * refuse it (-EBADF); every other heir lets go of its copy at once, the rest
 * keep theirs, as a worker that never touches it does. It lives until the run
 * ends (or the test process is gone), killed with nobody.
 */
static void fork_heir(struct chaos_shared *sh, struct cistern *c, bool producing)
{
	if (!chaos_forking || fork() != 0)
		return;
	uint8_t buf[PAYLOAD] = {0};
	struct cistern_sample s;
	int r = producing ? cistern_put(c, buf, PAYLOAD, NULL, 0) : cistern_acquire(c, &s, 0);
	if (r != -EBADF)
		atomic_fetch_add(&sh->heirs_bad, 1);
	if ((atomic_fetch_add(&sh->heirs, 1) & 1) && cistern_detach(c) != 0)
		atomic_fetch_add(&sh->heirs_bad, 1);
	while (!atomic_load(&sh->heirs_stop) && kill(sh->killer, 0) == 0)
		usleep(100000);
	_exit(0);
}

/*
 * Now and then spin a while holding a reservation or a sample, flagged in
 * holding[who] so the killer can aim at it: kills should land in the middle
 * of holding as well as in waits and inside the calls. The first time, fork
 * an heir (with chaos_forking) while holding.
 */
static void hold_a_while(struct chaos_shared *sh, int who, uint32_t n, struct cistern *c)
{
	static bool forked;
	if ((n & 15) != 0)
		return;
	if (!forked) {
		forked = true;
		fork_heir(sh, c, who < PRODUCERS);
	}
	atomic_store(&sh->holding[who], 1);
	for (volatile int i = 0; i < 500000; i++) /* about 0.2 ms */
		;
	atomic_store(&sh->holding[who], 0);
}

/*
 * A producer that puts batches of up to chaos_put_batch with
 * cistern_put_batch(): inflight[p] says how many seqs from next[p] on may be
 * in flight, for the killer to mark uncertain.
 */
#define PUT_BATCH_MAX 16

static int put_batches(struct chaos_shared *sh, uint32_t p, struct cistern *c, uint32_t seq)
{
	uint8_t buf[PUT_BATCH_MAX][PAYLOAD];
	struct cistern_meta m[PUT_BATCH_MAX];
	uint32_t n = chaos_put_batch;
	if (n > MAX_SEQ - seq)
		n = MAX_SEQ - seq;
	for (uint32_t i = 0; i < n; i++) {
		tag_payload(buf[i], p, seq + i);
		m[i] = (struct cistern_meta){.sim_id = p, .time_step = seq + i};
	}
	atomic_store(&sh->inflight[p], n);
	/* 2: inside the call, where aimed kills should land too; not always holding a slot. */
	atomic_store(&sh->holding[p], 2);
	int r = cistern_put_batch(c, buf, PAYLOAD, n, NULL, m, OP_TIMEOUT_MS);
	atomic_store(&sh->holding[p], 0);
	if (r <= 0)
		return r;
	for (int i = 0; i < r; i++)
		atomic_store(&sh->committed[p][seq + (uint32_t)i], 1);
	atomic_store(&sh->next[p], seq + (uint32_t)r);
	return 0;
}

static int producer(struct chaos_shared *sh, uint32_t p)
{
	struct cistern *c;
	if (cistern_attach(chaos_name, &c) < 0)
		return 10;
	fork_heir(sh, c, true);
	while (!atomic_load(&sh->stop)) {
		uint32_t seq = atomic_load(&sh->next[p]);
		if (seq >= MAX_SEQ) {
			usleep(1000);
			continue;
		}
		struct cistern_meta m = {.sim_id = p, .time_step = seq};
		int r;
		if (chaos_put_batch) {
			r = put_batches(sh, p, c, seq);
			if (r == 0)
				continue; /* recorded there */
		} else if (seq & 1) {
			uint8_t buf[PAYLOAD];
			tag_payload(buf, p, seq);
			r = cistern_put(c, buf, PAYLOAD, &m, OP_TIMEOUT_MS);
		} else {
			struct cistern_slot slot;
			r = cistern_reserve(c, &slot, OP_TIMEOUT_MS);
			if (r == 0) {
				tag_payload(slot.data, p, seq);
				hold_a_while(sh, (int)p, seq / 2, c);
				r = cistern_commit(c, &slot, PAYLOAD, &m);
			}
		}
		if (r == -ETIMEDOUT)
			continue; /* nothing was put: try the same seq again */
		if (r == -EBUSY) {
			/* A single-producer segment whose role another producer holds. */
			usleep(500);
			continue;
		}
		if (r < 0)
			return 11;
		atomic_store(&sh->committed[p][seq], 1);
		atomic_store(&sh->next[p], seq + 1);
	}
	cistern_detach(c);
	return 0;
}

/*
 * Readers use acquire/release only: a reader records a sample before it
 * releases it, so a sample is either recorded or still held (and handed out
 * again if the reader dies). cistern_get() releases inside the call, so a
 * reader killed between the call's return and its record would lose the
 * sample for the bookkeeping though the library delivered it.
 */
/* Check a received sample: count it, or count it as damaged. */
static void record(struct chaos_shared *sh, const struct cistern_sample *s)
{
	const uint8_t *data = s->data;
	uint32_t p, seq;
	memcpy(&p, data, sizeof(p));
	memcpy(&seq, data + 4, sizeof(seq));
	if (s->len != PAYLOAD || p >= PRODUCERS || seq >= MAX_SEQ || s->meta.sim_id != p ||
	    s->meta.time_step != seq || !check_payload(data + 8, PAYLOAD - 8, p, seq))
		atomic_fetch_add(&sh->bad, 1);
	else
		atomic_fetch_add(&sh->received[p][seq], 1);
}

/*
 * A reader that copies samples out with cistern_get(), which releases inside
 * the call: a kill between the call's return and the record loses that one
 * sample for the bookkeeping (the library delivered it), so each reader kill
 * may leave one committed sample unrecorded. The holding flag covers the call
 * itself, so that aimed kills land inside it.
 */
#define COPY_BATCH_MAX 16

static int copying_reader(struct chaos_shared *sh, uint32_t id, struct cistern *c)
{
	double deadline = mono_now() + 600;
	for (;;) {
		uint8_t buf[COPY_BATCH_MAX][PAYLOAD];
		size_t len[COPY_BATCH_MAX];
		struct cistern_meta meta[COPY_BATCH_MAX];
		atomic_store(&sh->holding[PRODUCERS + id], 1);
		ssize_t r = chaos_batch ? cistern_get_batch(c, buf, PAYLOAD, chaos_batch, len, meta,
							    OP_TIMEOUT_MS)
					: cistern_get(c, buf[0], PAYLOAD, &meta[0], OP_TIMEOUT_MS);
		atomic_store(&sh->holding[PRODUCERS + id], 0);
		if (r == CISTERN_EOD)
			break;
		if (r == -ETIMEDOUT || r == -EBUSY) {
			if (mono_now() > deadline)
				return 21;
			if (r == -EBUSY)
				usleep(500);
			continue;
		}
		if (r < 0)
			return 22;
		if (!chaos_batch)
			len[0] = (size_t)r;
		for (ssize_t i = 0; i < (chaos_batch ? r : 1); i++) {
			struct cistern_sample s = {.data = buf[i], .len = len[i], .meta = meta[i]};
			record(sh, &s);
		}
	}
	cistern_detach(c);
	return 0;
}

static int reader(struct chaos_shared *sh, uint32_t id)
{
	struct cistern *c;
	if (cistern_attach(chaos_name, &c) < 0)
		return 20;
	fork_heir(sh, c, false);
	if (chaos_copying)
		return copying_reader(sh, id, c);
	double deadline = mono_now() + 600;
	for (uint32_t n = id;; n++) {
		struct cistern_sample s[8];
		size_t want = chaos_batch ? chaos_batch : 1;
		int r = chaos_pairs   ? cistern_acquire_pair(c, s, OP_TIMEOUT_MS)
			: chaos_batch ? cistern_acquire_batch(c, s, want, OP_TIMEOUT_MS)
				      : cistern_acquire(c, s, OP_TIMEOUT_MS);
		if (r == CISTERN_EOD)
			break;
		if (r == -ETIMEDOUT || r == -EBUSY) {
			if (mono_now() > deadline)
				return 21;
			if (r ==
			    -EBUSY) /* a single-reader segment whose role another reader holds */
				usleep(500);
			continue;
		}
		if (r < 0)
			return 22;
		size_t got = chaos_pairs ? 2 : chaos_batch ? (size_t)r : 1;
		if (chaos_pairs && (s[0].meta.sim_id != s[1].meta.sim_id ||
				    s[1].meta.time_step != s[0].meta.time_step + 1))
			atomic_fetch_add(&sh->bad, 1); /* not (x_t, x_t+1) of one simulation */
		for (size_t i = 0; i < got; i++)
			record(sh, &s[i]);
		hold_a_while(sh, PRODUCERS + (int)id, n, c);
		if ((chaos_pairs ? cistern_release_pair(c, s) : cistern_release_batch(c, s, got)) <
		    0)
			return 23;
	}
	cistern_detach(c);
	return 0;
}

static pid_t spawn(struct chaos_shared *sh, int who)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(who < PRODUCERS ? producer(sh, (uint32_t)who)
				      : reader(sh, (uint32_t)(who - PRODUCERS)));
	return pid;
}

/* ---- the killer (the test process) ---------------------------------------- */

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Wait for pid until the deadline; 0 and *status if it ended, -1 if not. */
static int wait_until(pid_t pid, int *status, double deadline)
{
	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 0;
		if (mono_now() > deadline)
			return -1;
		usleep(2000);
	}
}

/* Let the heirs go, and reap them (the test process is their subreaper). */
static void end_heirs(void)
{
	if (!chaos_forking)
		return;
	atomic_store(&chaos_sh->heirs_stop, 1);
	while (waitpid(-1, NULL, 0) > 0)
		;
}

static void kill_all(pid_t *pids)
{
	for (int i = 0; i < PARTICIPANTS; i++) {
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
			pids[i] = 0;
		}
	}
	end_heirs();
}

static void run_chaos(const struct chaos_policy *pol)
{
	const char *full = getenv("CISTERN_CHAOS_FULL");
	int kills = full && *full && strcmp(full, "0") ? CHAOS_KILLS_FULL : CHAOS_KILLS_QUICK;
	const char *count = getenv("CISTERN_CHAOS_KILLS");
	if (count && atoi(count) > 0)
		kills = atoi(count);
	const char *seed_env = getenv("CISTERN_CHAOS_SEED");
	uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0)
				 : (uint64_t)(mono_now() * 1e9) ^ ((uint64_t)getpid() << 40);
	seed |= 1;
	uint64_t x = seed;

	static char name[64];
	snprintf(name, sizeof(name), "t-chaos-%s-%d", pol->name, (int)getpid());
	chaos_name = name;
	chaos_batch = pol->batch;
	chaos_put_batch = pol->put_batch;
	chaos_pairs = pol->pairs;
	chaos_copying = pol->copying;
	chaos_forking = pol->forking;
	cistern_unlink(name);
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &pol->cfg, &c), 0);
	struct chaos_shared *sh = shared_alloc(sizeof(*sh));
	cr_assert_not_null(sh);
	chaos_sh = sh;
	sh->killer = getpid();
	/* Heirs orphaned by a kill become ours, to reap at the end. */
	if (chaos_forking)
		cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);

	pid_t pids[PARTICIPANTS];
	for (int i = 0; i < PARTICIPANTS; i++)
		pids[i] = spawn(sh, i);

	int by_role[2] = {0, 0};
	uint64_t died_holding[2] = {0, 0};
	for (int k = 0; k < kills; k++) {
		usleep((useconds_t)(rnd(&x) % KILL_GAP_US));
		int v = (int)(rnd(&x) % PARTICIPANTS);
		/*
		 * Half of the kills aim at a victim that holds something (a
		 * reservation or a sample): left to chance, nearly every kill
		 * lands in a wait, and the reclaim paths would go untested.
		 */
		if (rnd(&x) & 1) {
			double until = mono_now() + 0.05;
			while (!atomic_load(&sh->holding[v]) && mono_now() < until)
				;
		}
		kill(pids[v], SIGKILL);
		int status;
		waitpid(pids[v], &status, 0);
		/* Still flagged 1 once dead: it died holding, and the segment must notice. */
		if (atomic_load(&sh->holding[v]) == 1)
			died_holding[v >= PRODUCERS]++;
		atomic_store(&sh->holding[v], 0);
		if (!WIFSIGNALED(status)) {
			pids[v] = 0;
			kill_all(pids);
			cr_assert_fail("%s: participant %d ended by itself (status %d) during the "
				       "kills; seed %#llx",
				       pol->name, v, status, (unsigned long long)seed);
		}
		if (v < PRODUCERS) {
			/* Its in-flight seqs may or may not have been committed. */
			uint32_t s = atomic_load(&sh->next[v]);
			uint32_t n = atomic_load(&sh->inflight[v]);
			n = n ? n : 1;
			for (uint32_t i = 0; i < n && s + i < MAX_SEQ; i++)
				atomic_store(&sh->uncertain[v][s + i], 1);
			atomic_store(&sh->next[v], s + n < MAX_SEQ ? s + n : MAX_SEQ);
		}
		by_role[v >= PRODUCERS]++;
		pids[v] = spawn(sh, v);
	}

	/*
	 * With pol->progress: the segment still moves once the kills are over,
	 * both ways. A wedge that only end of data would undo (the rate
	 * limiter stops waiting at close) is caught here, not by the drain.
	 */
	if (pol->progress) {
		struct cistern_stats st0, st;
		cistern_stats_get(c, &st0);
		uint64_t enough = 2 * pol->cfg.slot_count;
		double until = mono_now() + PROGRESS_DEADLINE_S;
		do {
			usleep(2000);
			cistern_stats_get(c, &st);
		} while ((st.puts < st0.puts + enough || st.gets < st0.gets + enough) &&
			 mono_now() < until);
		if (st.puts < st0.puts + enough || st.gets < st0.gets + enough) {
			kill_all(pids);
			cr_assert_fail("%s: stopped after the kills (%llu puts, %llu gets since); "
				       "seed %#llx",
				       pol->name, (unsigned long long)(st.puts - st0.puts),
				       (unsigned long long)(st.gets - st0.gets),
				       (unsigned long long)seed);
		}
	}

	/* Producers stop; then reception closes; then readers must drain. */
	atomic_store(&sh->stop, 1);
	double deadline = mono_now() + 30;
	for (int i = 0; i < PRODUCERS; i++) {
		int status;
		if (wait_until(pids[i], &status, deadline) < 0) {
			kill_all(pids);
			cr_assert_fail("%s: producer %d stuck after stop; seed %#llx", pol->name, i,
				       (unsigned long long)seed);
		}
		pids[i] = 0;
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "%s: producer %d failed (status %d); seed %#llx", pol->name, i, status,
			  (unsigned long long)seed);
	}
	cr_assert_eq(cistern_close_reception(c), 0);
	deadline = mono_now() + DRAIN_DEADLINE_S;
	for (int i = PRODUCERS; i < PARTICIPANTS; i++) {
		int status;
		if (wait_until(pids[i], &status, deadline) < 0) {
			kill_all(pids);
			cr_assert_fail("%s: reader %d never reached end of data; seed %#llx",
				       pol->name, i - PRODUCERS, (unsigned long long)seed);
		}
		pids[i] = 0;
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "%s: reader %d failed (status %d); seed %#llx", pol->name, i - PRODUCERS,
			  status, (unsigned long long)seed);
	}

	struct chaos_result res;
	memset(&res, 0, sizeof(res));
	for (uint32_t p = 0; p < PRODUCERS; p++) {
		for (uint32_t s = 0; s < MAX_SEQ; s++) {
			uint8_t com = atomic_load(&sh->committed[p][s]);
			uint8_t unc = atomic_load(&sh->uncertain[p][s]);
			uint32_t got = atomic_load(&sh->received[p][s]);
			res.committed += com;
			res.uncertain += unc && !com;
			res.received += got;
			res.missing += com && got == 0;
			res.phantoms += got && !com && !unc;
			res.duplicates += got > 1 ? got - 1 : 0;
			if (got > res.max_received)
				res.max_received = got;
		}
	}
	res.producers_died_holding = died_holding[0];
	res.readers_died_holding = died_holding[1];
	res.readers_killed = (uint64_t)by_role[1];
	cistern_stats_get(c, &res.stats);
	cr_log_info("chaos %s: seed %#llx, %d kills (%d producers, %llu holding a reservation; "
		    "%d readers, %llu holding a sample), %llu committed, "
		    "%llu uncertain, %llu received, %llu missing, %llu duplicates, "
		    "%llu redeliveries, %llu reclaimed, %llu evicted unseen, %llu unpaired",
		    pol->name, (unsigned long long)seed, kills, by_role[0],
		    (unsigned long long)died_holding[0], by_role[1],
		    (unsigned long long)died_holding[1], (unsigned long long)res.committed,
		    (unsigned long long)res.uncertain, (unsigned long long)res.received,
		    (unsigned long long)res.missing, (unsigned long long)res.duplicates,
		    (unsigned long long)res.stats.redeliveries,
		    (unsigned long long)res.stats.reclaimed,
		    (unsigned long long)res.stats.evicted_unseen,
		    (unsigned long long)res.stats.unpaired);
	cr_assert_eq(atomic_load(&sh->bad), 0, "%s: damaged samples; seed %#llx", pol->name,
		     (unsigned long long)seed);
	cr_assert_gt(res.committed, (uint64_t)kills, "%s: too little traffic to mean anything",
		     pol->name);
	uint32_t heirs = atomic_load(&sh->heirs);
	end_heirs();
	if (chaos_forking) {
		cr_assert_gt(heirs, (uint32_t)kills, "%s: too few heirs (%u)", pol->name, heirs);
		cr_assert_eq(atomic_load(&sh->heirs_bad), 0,
			     "%s: %u inherited handles did not refuse a call, or their detach "
			     "failed",
			     pol->name, atomic_load(&sh->heirs_bad));
	}
	pol->verify(&res);
	cistern_detach(c);
	cistern_unlink(name);
	munmap(sh, sizeof(*sh));
}

/* ---- policies --------------------------------------------------------------- */

/*
 * FIFO: at least once. Every committed sample was received; nothing was
 * received that was never put; and a sample is received twice only when a
 * reader died holding it after counting it, which the segment counts as a
 * redelivery, so duplicates <= redeliveries.
 */
/* What every FIFO run must show, however its readers read. */
static void verify_fifo_common(const struct chaos_result *res)
{
	cr_assert_gt(res->committed, 0, "fifo: no traffic at all");
	cr_assert_eq(res->phantoms, 0, "fifo: %llu samples received that were never put",
		     (unsigned long long)res->phantoms);
	cr_assert_leq(res->duplicates, res->stats.redeliveries,
		      "fifo: %llu duplicates but only %llu redeliveries",
		      (unsigned long long)res->duplicates,
		      (unsigned long long)res->stats.redeliveries);
	cr_assert_geq(res->stats.reclaimed, res->producers_died_holding,
		      "fifo: %llu producers died holding a reservation, %llu reclaimed",
		      (unsigned long long)res->producers_died_holding,
		      (unsigned long long)res->stats.reclaimed);
}

static void verify_fifo(const struct chaos_result *res)
{
	verify_fifo_common(res);
	cr_assert_eq(res->missing, 0, "fifo: %llu committed samples never received",
		     (unsigned long long)res->missing);
	/* Each death in hand must have been noticed and repaired. */
	cr_assert_geq(res->stats.redeliveries, res->readers_died_holding,
		      "fifo: %llu readers died holding a sample, %llu redeliveries",
		      (unsigned long long)res->readers_died_holding,
		      (unsigned long long)res->stats.redeliveries);
}

static const struct chaos_policy chaos_fifo = {
	.name = "fifo",
	/* A small ring: producers and readers meet full and empty all the time. */
	.cfg = {.slot_size = PAYLOAD, .slot_count = 32},
	.verify = verify_fifo,
};

/*
 * The same FIFO with one producer and one reader at a time: the other three
 * of each wait on -EBUSY, and every kill of a holder passes its role on
 * through the reclaim, with the plain-store claims in between.
 */
static const struct chaos_policy chaos_fifo_sole = {
	.name = "fifo-sole",
	.cfg = {.slot_size = PAYLOAD,
		.slot_count = 32,
		.flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER},
	.verify = verify_fifo,
};

/*
 * FIFO read with cistern_get(): at least once, except that each reader kill
 * may cost the bookkeeping the one sample it had just copied out (with
 * cistern_get_batch(), the batch it had just copied out).
 */
static void verify_fifo_copying(const struct chaos_result *res)
{
	verify_fifo_common(res);
	uint64_t per_kill = chaos_batch ? chaos_batch : 1;
	cr_assert_leq(res->missing, res->readers_killed * per_kill,
		      "fifo: %llu committed samples never received, %llu reader kills",
		      (unsigned long long)res->missing, (unsigned long long)res->readers_killed);
}

/* The one-step put and get of the sole roles, killed inside as well. */
static const struct chaos_policy chaos_fifo_sole_copying = {
	.name = "fifo-sole-get",
	.cfg = {.slot_size = PAYLOAD,
		.slot_count = 32,
		.flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER},
	.verify = verify_fifo_copying,
	.copying = true,
};

static const struct chaos_policy chaos_fifo_copying = {
	.name = "fifo-get",
	.cfg = {.slot_size = PAYLOAD, .slot_count = 32},
	.verify = verify_fifo_copying,
	.copying = true,
};

/* Batches of the sole reader: several slots freed, then the head moved once. */
static const struct chaos_policy chaos_fifo_sole_batches = {
	.name = "fifo-sole-get-batch",
	.cfg = {.slot_size = PAYLOAD,
		.slot_count = 32,
		.flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER},
	.verify = verify_fifo_copying,
	.copying = true,
	.batch = 8,
};

static const struct chaos_policy chaos_fifo_batches = {
	.name = "fifo-get-batch",
	.cfg = {.slot_size = PAYLOAD, .slot_count = 32},
	.verify = verify_fifo_copying,
	.copying = true,
	.batch = 8,
};

/* Producers put batches of up to 8: several slots claimed before the first commit. */
static const struct chaos_policy chaos_fifo_sole_put_batches = {
	.name = "fifo-sole-put-batch",
	.cfg = {.slot_size = PAYLOAD,
		.slot_count = 32,
		.flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER},
	.verify = verify_fifo,
	.put_batch = 8,
};

static const struct chaos_policy chaos_fifo_put_batches = {
	.name = "fifo-put-batch",
	.cfg = {.slot_size = PAYLOAD, .slot_count = 32},
	.verify = verify_fifo,
	.put_batch = 8,
};

Test(chaos, single_role_fifo_written_by_put_batch_survives_random_sigkills, .timeout = 900)
{
	run_chaos(&chaos_fifo_sole_put_batches);
}

Test(chaos, fifo_written_by_put_batch_survives_random_sigkills, .timeout = 900)
{
	run_chaos(&chaos_fifo_put_batches);
}

Test(chaos, single_role_fifo_read_by_get_survives_random_sigkills, .timeout = 900)
{
	run_chaos(&chaos_fifo_sole_copying);
}

Test(chaos, single_role_fifo_read_by_get_batch_survives_random_sigkills, .timeout = 900)
{
	run_chaos(&chaos_fifo_sole_batches);
}

Test(chaos, fifo_read_by_get_batch_survives_random_sigkills, .timeout = 900)
{
	run_chaos(&chaos_fifo_batches);
}

Test(chaos, fifo_read_by_get_survives_random_sigkills, .timeout = 900)
{
	run_chaos(&chaos_fifo_copying);
}

/*
 * Reservoir: reads are with replacement, so duplicates are normal. What must
 * hold: nothing is evicted before a live reader saw it (a dead reader's
 * unreleased read does not count), and everything left is drained after
 * close, so every committed sample was received at least once; nothing
 * received was never put; and the dead readers' pins did not wedge producers
 * (the run would have failed to drain or to make traffic).
 */
static void verify_reservoir(const struct chaos_result *res)
{
	cr_assert_eq(res->missing, 0, "reservoir: %llu committed samples never received",
		     (unsigned long long)res->missing);
	cr_assert_eq(res->phantoms, 0, "reservoir: %llu samples received that were never put",
		     (unsigned long long)res->phantoms);
	cr_assert_eq(res->stats.evicted_unseen, 0);
	cr_assert_gt(res->stats.evictions, 0, "reservoir: the buffer never filled");
	cr_assert_geq(res->stats.reclaimed, res->producers_died_holding,
		      "reservoir: %llu producers died holding a reservation, %llu reclaimed",
		      (unsigned long long)res->producers_died_holding,
		      (unsigned long long)res->stats.reclaimed);
}

static const struct chaos_policy chaos_reservoir = {
	.name = "reservoir",
	.cfg = {.policy = CISTERN_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8},
	.verify = verify_reservoir,
};

Test(chaos, reservoir_survives_random_sigkills_without_unseen_eviction_or_wedge, .timeout = 900)
{
	run_chaos(&chaos_reservoir);
}

/*
 * Prioritized: reads draw by priority (cistern_acquire() through the
 * policy's tree, every sample at the largest priority seen, so a put's
 * default applies), puts evict as the reservoir's do; the same rules hold.
 */
static const struct chaos_policy chaos_prioritized = {
	.name = "prioritized",
	.cfg = {.policy = CISTERN_PRIORITIZED,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8,
		.alpha = 0.6,
		.beta = 0.4,
		.epsilon = 0.01},
	.verify = verify_reservoir,
};

Test(chaos, prioritized_survives_random_sigkills_without_unseen_eviction_or_wedge, .timeout = 900)
{
	run_chaos(&chaos_prioritized);
}

/* As fifo-forking: a reader's pins must go when it dies, whatever children it has. */
static const struct chaos_policy chaos_reservoir_forking = {
	.name = "reservoir-forking",
	.cfg = {.policy = CISTERN_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8},
	.verify = verify_reservoir,
	.forking = true,
};

Test(chaos, reservoir_survives_random_sigkills_of_processes_with_forked_children, .timeout = 900)
{
	run_chaos(&chaos_reservoir_forking);
}

/*
 * The reservoir with one reader at a time, reading batches: the holder pins
 * with plain stores and one fence per batch, and is killed anywhere in that,
 * including between a pin it stored and the check that confirms it.
 */
static const struct chaos_policy chaos_reservoir_sole = {
	.name = "reservoir-sole",
	.cfg = {.policy = CISTERN_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8,
		.flags = CISTERN_SINGLE_READER},
	.verify = verify_reservoir,
	.batch = 4,
};

Test(chaos, single_reader_reservoir_survives_random_sigkills_without_unseen_eviction_or_wedge,
     .timeout = 900)
{
	run_chaos(&chaos_reservoir_sole);
}

/*
 * FIRO with one read per sample: as the FIFO, at least once, in random order.
 * Every read empties a slot and leaves a vacancy hint that producers, killed
 * anywhere too, take; a hint is never trusted, so none of that may lose,
 * duplicate or wedge anything.
 */
static const struct chaos_policy chaos_firo = {
	.name = "firo",
	.cfg = {.policy = CISTERN_FIRO, .slot_size = PAYLOAD, .slot_count = 32, .watermark = 4},
	.verify = verify_fifo,
};

Test(chaos, firo_survives_random_sigkills_without_loss_or_wedge, .timeout = 900)
{
	run_chaos(&chaos_firo);
}

Test(chaos, fifo_survives_random_sigkills_without_loss_or_wedge, .timeout = 900)
{
	run_chaos(&chaos_fifo);
}

/*
 * With a cold tier: the same rules over both tiers, while kills land in
 * spills (a producer that finds the hot slots full), cold reads and the
 * FIFO's cold ring. The cold file lives in a directory of its own, which
 * must be empty once the segment is gone.
 */
static void run_chaos_tiered(const struct chaos_policy *pol)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-chaos-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	struct chaos_policy p = *pol;
	p.cfg.cold_slots = 64;
	p.cfg.cold_dir = dir;
	run_chaos(&p);
	cr_assert_eq(rmdir(dir), 0, "%s: a cold file outlived its segment in %s", pol->name, dir);
}

/* The tier took part: samples went to disk and came back. */
static void verify_cold_traffic(const struct chaos_result *res)
{
	cr_assert_gt(res->stats.cold_spilled, 0, "no sample went to the cold tier");
	cr_assert_gt(res->stats.cold_reads, 0, "no sample was read from the cold tier");
}

static void verify_reservoir_tiered(const struct chaos_result *res)
{
	verify_reservoir(res);
	verify_cold_traffic(res);
}

static void verify_fifo_tiered(const struct chaos_result *res)
{
	verify_fifo(res);
	verify_cold_traffic(res);
}

static const struct chaos_policy chaos_reservoir_tiered = {
	.name = "reservoir-tiered",
	.cfg = {.policy = CISTERN_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8},
	.verify = verify_reservoir_tiered,
};

Test(chaos, reservoir_with_a_cold_tier_survives_random_sigkills, .timeout = 900)
{
	run_chaos_tiered(&chaos_reservoir_tiered);
}

static const struct chaos_policy chaos_fifo_tiered = {
	.name = "fifo-tiered",
	.cfg = {.slot_size = PAYLOAD, .slot_count = 32},
	.verify = verify_fifo_tiered,
};

Test(chaos, fifo_with_a_cold_tier_survives_random_sigkills, .timeout = 900)
{
	run_chaos_tiered(&chaos_fifo_tiered);
}

static const struct chaos_policy chaos_firo_tiered = {
	.name = "firo-tiered",
	.cfg = {.policy = CISTERN_FIRO, .slot_size = PAYLOAD, .slot_count = 32, .watermark = 4},
	.verify = verify_fifo_tiered,
};

Test(chaos, firo_with_a_cold_tier_survives_random_sigkills, .timeout = 900)
{
	run_chaos_tiered(&chaos_firo_tiered);
}

/*
 * Every participant has forked children alive when it is killed: its death
 * must be seen, its reservations reclaimed and its samples handed out again,
 * as without them (else readers wedge behind a reservation or lose a sample).
 */
static const struct chaos_policy chaos_fifo_forking = {
	.name = "fifo-forking",
	.cfg = {.slot_size = PAYLOAD, .slot_count = 32},
	.verify = verify_fifo,
	.forking = true,
};

Test(chaos, fifo_survives_random_sigkills_of_processes_with_forked_children, .timeout = 900)
{
	run_chaos(&chaos_fifo_forking);
}

Test(chaos, single_role_fifo_survives_random_sigkills_without_loss_or_wedge, .timeout = 900)
{
	run_chaos(&chaos_fifo_sole);
}

/*
 * FIFOEvictReservoir: as the reservoir, except that a full buffer evicts its
 * oldest sample and waits while that one is unseen; a reader killed holding
 * the oldest sample must not keep it pinned, or the producers wait for good.
 */
static const struct chaos_policy chaos_fifo_evict = {
	.name = "fifo-evict",
	.cfg = {.policy = CISTERN_FIFO_EVICT_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8},
	.verify = verify_reservoir,
};

Test(chaos, fifo_evict_reservoir_survives_random_sigkills_without_unseen_eviction_or_wedge,
     .timeout = 900)
{
	run_chaos(&chaos_fifo_evict);
}

/*
 * BatchReservoir: readers pin batch_size distinct samples at once and are
 * killed holding whole batches; after close the last batches may be short.
 */
static const struct chaos_policy chaos_batch_reservoir = {
	.name = "batch",
	.cfg = {.policy = CISTERN_BATCH_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8,
		.batch_size = 4},
	.verify = verify_reservoir,
	.batch = 4,
};

Test(chaos, batch_reservoir_survives_random_sigkills_without_unseen_eviction_or_wedge,
     .timeout = 900)
{
	run_chaos(&chaos_batch_reservoir);
}

/*
 * SimPairedReservoir: each producer is one simulation (sim_id p, time step
 * seq), so a killed producer leaves a step missing and the samples around it
 * with one neighbour fewer. Reads only see samples through pairs: a sample
 * with no neighbour left is an orphan, the one kind of sample the policy may
 * evict unseen, and after close what has no partner stays, counted. So every
 * committed sample was received, or evicted as an orphan, or left unpaired;
 * nothing seen was not put; and every pair was (x_t, x_t+1) of one
 * simulation (checked by the readers).
 */
static void verify_pairs(const struct chaos_result *res)
{
	cr_assert_eq(res->phantoms, 0, "sim-paired: %llu samples received that were never put",
		     (unsigned long long)res->phantoms);
	cr_assert_leq(res->missing, res->stats.evicted_unseen + res->stats.unpaired,
		      "sim-paired: %llu committed samples never received, but only %llu "
		      "orphans evicted and %llu left unpaired",
		      (unsigned long long)res->missing,
		      (unsigned long long)res->stats.evicted_unseen,
		      (unsigned long long)res->stats.unpaired);
	cr_assert_gt(res->stats.evictions, 0, "sim-paired: the buffer never filled");
	cr_assert_geq(res->stats.reclaimed, res->producers_died_holding,
		      "sim-paired: %llu producers died holding a reservation, %llu reclaimed",
		      (unsigned long long)res->producers_died_holding,
		      (unsigned long long)res->stats.reclaimed);
}

static const struct chaos_policy chaos_sim_paired = {
	.name = "sim-paired",
	.cfg = {.policy = CISTERN_SIM_PAIRED_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8,
		.sweep_size = PRODUCERS,
		.nb_time_steps = MAX_SEQ},
	.verify = verify_pairs,
	.pairs = true,
};

Test(chaos, sim_paired_reservoir_survives_random_sigkills_without_loss_or_wedge, .timeout = 900)
{
	run_chaos(&chaos_sim_paired);
}

/*
 * The rate limiter on (reads_per_put), each reservoir kind: kills land on
 * producers waiting for a read and readers waiting for budget, on readers
 * holding reads the limiter counted, and on producers whose puts readers
 * wait for. Besides what the policy's check asks, the segment must keep
 * making progress after the kills (chaos_policy.progress): the limiter must
 * never leave producers and readers waiting for each other.
 */
static const struct chaos_policy chaos_reservoir_limited = {
	.name = "reservoir-limited",
	.cfg = {.policy = CISTERN_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8,
		.reads_per_put = 1},
	.verify = verify_reservoir,
	.progress = true,
};

Test(chaos, rate_limited_reservoir_survives_random_sigkills_and_keeps_going, .timeout = 900)
{
	run_chaos(&chaos_reservoir_limited);
}

/* One reader at a time, in batches, with a slack set by hand. */
static const struct chaos_policy chaos_reservoir_sole_limited = {
	.name = "reservoir-sole-limited",
	.cfg = {.policy = CISTERN_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8,
		.flags = CISTERN_SINGLE_READER,
		.reads_per_put = 2,
		.rate_slack = 3},
	.verify = verify_reservoir,
	.batch = 4,
	.progress = true,
};

Test(chaos, rate_limited_single_reader_reservoir_survives_random_sigkills_and_keeps_going,
     .timeout = 900)
{
	run_chaos(&chaos_reservoir_sole_limited);
}

/* A put waits for one sample in particular, the oldest, to be read. */
static const struct chaos_policy chaos_fifo_evict_limited = {
	.name = "fifo-evict-limited",
	.cfg = {.policy = CISTERN_FIFO_EVICT_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8,
		.reads_per_put = 2},
	.verify = verify_reservoir,
	.progress = true,
};

Test(chaos, rate_limited_fifo_evict_reservoir_survives_random_sigkills_and_keeps_going,
     .timeout = 900)
{
	run_chaos(&chaos_fifo_evict_limited);
}

static const struct chaos_policy chaos_batch_limited = {
	.name = "batch-limited",
	.cfg = {.policy = CISTERN_BATCH_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8,
		.batch_size = 4,
		.reads_per_put = 1},
	.verify = verify_reservoir,
	.batch = 4,
	.progress = true,
};

Test(chaos, rate_limited_batch_reservoir_survives_random_sigkills_and_keeps_going, .timeout = 900)
{
	run_chaos(&chaos_batch_limited);
}

static const struct chaos_policy chaos_sim_paired_limited = {
	.name = "sim-paired-limited",
	.cfg = {.policy = CISTERN_SIM_PAIRED_RESERVOIR,
		.slot_size = PAYLOAD,
		.slot_count = 32,
		.watermark = 8,
		.sweep_size = PRODUCERS,
		.nb_time_steps = MAX_SEQ,
		.reads_per_put = 2},
	.verify = verify_pairs,
	.pairs = true,
	.progress = true,
};

Test(chaos, rate_limited_sim_paired_reservoir_survives_random_sigkills_and_keeps_going,
     .timeout = 900)
{
	run_chaos(&chaos_sim_paired_limited);
}
