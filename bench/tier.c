/* SPDX-License-Identifier: MIT */
/*
 * tier - what a cold tier costs a learner and saves in memory: one reservoir
 * segment of a fixed population, all in memory, half cold and 70 % cold, for
 * 4 KiB samples (--mib, default 512 MiB of them) and 256 KiB samples
 * (--big-mib, default 2048 MiB: a batch of 256 such samples is 64 MiB, and
 * a learner that reads ahead holds two batches' buffers, which a buffer
 * larger than memory dwarfs), and the two tiered ones again with the
 * learner's read-ahead turned off. In each run, forked producers fill the
 * population as fast as they can, then put at --put-mibs in all (default
 * 32; 0: as fast as they can) while one forked learner draws batches of 256
 * with cistern_acquire_batch(), checks every sample it gets and sleeps
 * --step-ms (default 20; 0: none) for a training step on an accelerator,
 * holding the batch. --step-ms 0 --put-mibs 0 makes a stress run, in which
 * the producers' spills share the disk with the learner's reads (the disk
 * bound is measured without them). Runs alternate (all in memory, half,
 * 70 %, half and 70 % without read-ahead) and are repeated; each figure is
 * the median of the repetitions.
 *
 * Each run measures:
 *
 *   batches/s  the learner's batches in a timed window, once the
 *              population is full; producers put all along
 *   bound      the disk's random-read rate for the run's own cold file and
 *              pattern: a plain io_uring loop keeping `depth` O_DIRECT
 *              reads of one random slot each in flight, run just after
 *              the job ends; divided by the cold reads a batch made, it is
 *              the batch rate that the disk allows
 *   memory     the peak of the job's memory: the usage of a memory cgroup
 *              (v1) child group that the benchmark makes for the run (as
 *              root), holding the learner, the producers, the shared memory
 *              and any page cache they touch; without one, the peak of the
 *              sum of the processes' PSS (anonymous and file) plus the
 *              shared memory object's blocks, sampled every 20 ms
 *   written    bytes written to disk: the processes' /proc/PID/io
 *              write_bytes and the tier's own counter (spilled samples
 *              times the slot size), against the bytes of the samples
 *              spilled
 *
 * It prints one table, a verdict line a target (for the runs with
 * read-ahead, the library's default) and what read-ahead changes; it
 * asserts no time. The
 * exit status is 1 only when a run failed (an error, or a sample that did
 * not arrive whole).
 *
 *   cistern-tier [--tiny] [--dir DIR] [--mib N] [--big-mib N] [--secs S]
 *                [--reps R] [--producers N] [--put-mibs R] [--step-ms T]
 *                [--batch N]
 *
 * DIR (default /var/tmp) must be on a disk file system that takes O_DIRECT.
 * --tiny is a run of a few seconds for the test suite: small, one
 * repetition, figures meaningless.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cistern.h>

#include "policy/reservoir/tiered.h"
#include "tier/cold.h"
#include "memwatch.h"

enum { DEPTH = 256, MAX_PRODUCERS = 16, MAX_REPS = 15, NFRAC = 5, NSIZE = 2 };

/* The populations; the last two are the tiered ones again with read-ahead off. */
static const double fracs[NFRAC] = {0.0, 0.5, 0.7, 0.5, 0.7};
static const bool no_ahead[NFRAC] = {false, false, false, true, true};
static const char *frac_names[NFRAC] = {"in memory", "half cold", "70 % cold",
					"half cold, no read-ahead", "70 % cold, no read-ahead"};
static const double mem_target[NFRAC] = {1.0, 0.55, 0.35, 0.55, 0.35};
static const uint32_t sizes[NSIZE] = {4096, 262144};

struct opts {
	const char *dir;
	uint64_t mib, big_mib; /* the population of 4 KiB and of 256 KiB samples */
	double secs, bound_secs;
	double put_mibs; /* the producers' put rate, all together; 0: as fast as they can */
	double step_ms;  /* the learner's training step after each batch (a sleep) */
	int reps, producers;
	unsigned batch;
	bool tiny;
	double warm_s; /* the learner's reads before the window; < 0: as long as the window */
};

/* What the job's processes tell the parent, in a shared anonymous page. */
struct shared {
	_Atomic int phase; /* 0 start, 1 segment made, 2 warm-up and window, 3 stop */
	_Atomic int failed;
	_Atomic uint64_t write_bytes;
	_Atomic uint64_t bad; /* samples that did not arrive whole */
	double window;
	uint64_t batches;
	/* The learner's time in the window, summed: acquire, checks, step, release. */
	double t_part[4];
	double read_wait; /* of which the cold reads' waits (the tier's counter) */
	uint64_t cold_reads, spilled;
	char why[160];
};

struct result {
	double batches_s;
	double cold_per_batch;
	double bound_slots_s; /* the plain loop's reads a second; 0 without a tier */
	double mem_bytes;
	double spilled_bytes, counter_bytes, proc_bytes;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

static void fail(struct shared *sh, const char *what, int err)
{
	int z = 0;
	/* Relaxed: the parent reads why only after the child exited (waitpid). */
	if (atomic_compare_exchange_strong_explicit(&sh->failed, &z, 1, memory_order_relaxed,
						    memory_order_relaxed))
		snprintf(sh->why, sizeof(sh->why), "%s: %s", what, cistern_strerror(err));
	atomic_store(&sh->phase, 3);
}

/* ---- memory: a cgroup v1 child group, or PSS plus the shm object (memwatch.h) */

static uint64_t proc_write_bytes(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	char line[128];
	unsigned long long v = 0, got = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "write_bytes: %llu", &v) == 1)
			got = v;
	fclose(f);
	return got;
}

/* ---- the job: a learner and producers ---------------------------------- */

/* A sample carries one token at its start and its end: a torn sample shows. */
static void stamp(void *data, size_t len, uint64_t token)
{
	memcpy(data, &token, 8);
	memcpy((char *)data + len - 8, &token, 8);
}

static bool whole(const struct cistern_sample *s, size_t len)
{
	uint64_t a, b;
	if (s->len != len)
		return false;
	memcpy(&a, s->data, 8);
	memcpy(&b, (const char *)s->data + len - 8, 8);
	return a == b && a != 0;
}

static void producer(struct shared *sh, const char *name, size_t len, int k, const struct opts *o)
{
	struct cistern *c;
	int r = cistern_attach(name, &c);
	if (r < 0) {
		fail(sh, "producer attach", r);
		return;
	}
	uint64_t seq = 0;
	double t0 = 0, per_s = o->put_mibs * 1048576.0 / (double)len / o->producers;
	uint64_t seq0 = 0;
	bool paced = false;
	/* Relaxed: a stop flag; the learner's results travel by its exit. */
	while (atomic_load_explicit(&sh->phase, memory_order_relaxed) < 3) {
		struct cistern_slot slot;
		r = cistern_reserve(c, &slot, 100);
		if (r == -ETIMEDOUT || r == -EAGAIN)
			continue;
		if (r < 0) {
			fail(sh, "cistern_reserve", r);
			break;
		}
		stamp(slot.data, len, (uint64_t)(k + 1) << 48 | ++seq);
		r = cistern_commit(c, &slot, len, NULL);
		if (r < 0) {
			fail(sh, "cistern_commit", r);
			break;
		}
		/*
		 * A rate, from the window's start on (the fill goes as fast as it
		 * can): sleep until this put's turn has come.
		 */
		if (per_s > 0 && !paced && atomic_load(&sh->phase) >= 2) {
			paced = true;
			t0 = now();
			seq0 = seq;
		}
		double ahead = paced ? (double)(seq - seq0) / per_s - (now() - t0) : 0;
		if (ahead > 0)
			nap(ahead < 0.1 ? ahead : 0.1);
	}
	atomic_fetch_add(&sh->write_bytes, proc_write_bytes());
	cistern_detach(c);
}

static void learner(struct shared *sh, const char *name, const struct cistern_config *cfg,
		    size_t len, const struct opts *o, bool ahead)
{
	struct cistern *c;
	int r = cistern_create(name, cfg, &c);
	if (r < 0) {
		fail(sh, "cistern_create", r);
		return;
	}
	if (cfg->cold_slots && (r = cistern__tiered_read_ahead(c, ahead)) < 0) {
		fail(sh, "read-ahead", r);
		cistern_detach(c);
		return;
	}
	atomic_store(&sh->phase, 1);
	uint64_t pop = cfg->slot_count + cfg->cold_slots;
	/* Full: every slot holds an unseen sample; a few puts may be under way. */
	uint64_t full = pop - (uint64_t)o->producers;
	struct cistern_stats st0, st1;
	double t = now();
	for (;;) {
		cistern_stats_get(c, &st0);
		if (st0.population >= full || atomic_load(&sh->failed))
			break;
		if (now() - t > 600) {
			fail(sh, "fill", ETIMEDOUT);
			break;
		}
		nap(0.01);
	}
	struct cistern_sample *b = calloc(o->batch, sizeof(*b));
	uint64_t batches = 0, bad = 0;
	/*
	 * Warm-up: the fill wrote every cold slot at once, and the first read
	 * of each write checks its CRC. A long-running job reads each write
	 * many times; read the population once over before the window, so
	 * that the window sees the steady state.
	 */
	/* The producers keep their pace from here on, through the warm-up and the window. */
	atomic_store(&sh->phase, 2);
	for (double tw = now(); b && now() - tw < o->warm_s;) {
		r = cistern_acquire_batch(c, b, o->batch, 1000);
		if (r < 0) {
			fail(sh, "cistern_acquire_batch", r);
			break;
		}
		if (o->step_ms > 0)
			nap(o->step_ms / 1000);
		cistern_release_batch(c, b, (size_t)r);
	}
	cistern_stats_get(c, &st0);
	double t0 = now(), t1 = t0;
	while (b && !atomic_load_explicit(&sh->failed, memory_order_relaxed) && t1 - t0 < o->secs) {
		double ta = now();
		r = cistern_acquire_batch(c, b, o->batch, 1000);
		if (r < 0) {
			fail(sh, "cistern_acquire_batch", r);
			break;
		}
		double tb = now();
		for (int i = 0; i < r; i++)
			bad += !whole(&b[i], len);
		double tc = now();
		/* A training step on the batch: the CPU waits as for an accelerator. */
		if (o->step_ms > 0)
			nap(o->step_ms / 1000);
		double td = now();
		cistern_release_batch(c, b, (size_t)r);
		double te = now();
		sh->t_part[0] += tb - ta;
		sh->t_part[1] += tc - tb;
		sh->t_part[2] += td - tc;
		sh->t_part[3] += te - td;
		/* A reservoir hands out whole batches while it is open. */
		bad += (unsigned)r != o->batch;
		batches++;
		t1 = now();
	}
	cistern_stats_get(c, &st1);
	free(b);
	sh->window = t1 - t0;
	sh->batches = batches;
	sh->cold_reads = st1.cold_reads - st0.cold_reads;
	sh->read_wait = (double)(st1.cold_read_wait_ns - st0.cold_read_wait_ns) / 1e9;
	sh->spilled = st1.cold_spilled;
	atomic_fetch_add(&sh->bad, bad);
	atomic_store(&sh->phase, 3);
	atomic_fetch_add(&sh->write_bytes, proc_write_bytes());
	cistern_detach(c);
}

/* ---- the bound: a plain io_uring loop over the run's cold file ---------- */

static double plain_loop(const char *path, uint32_t slot_bytes, uint64_t nslots, double secs)
{
	int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct io_uring ring;
	uint8_t *bufs = NULL;
	if (posix_memalign((void **)&bufs, 4096, (size_t)DEPTH * slot_bytes) != 0) {
		close(fd);
		return -1;
	}
	if (io_uring_queue_init(DEPTH, &ring, 0) < 0) {
		free(bufs);
		close(fd);
		return -1;
	}
	uint64_t rng = 0x2545f4914f6cdd1du ^ (uint64_t)getpid();
#define NEXT_SLOT() (rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17, rng % nslots)
	for (unsigned i = 0; i < DEPTH; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		io_uring_prep_read(sqe, fd, bufs + (size_t)i * slot_bytes, slot_bytes,
				   CISTERN__COLD_BLOCK + NEXT_SLOT() * slot_bytes);
		io_uring_sqe_set_data64(sqe, i);
	}
	double t0 = now(), t = t0;
	unsigned in_flight = DEPTH;
	uint64_t done = 0;
	bool stop = false, bad = false;
	while (in_flight) {
		int r = io_uring_submit_and_wait(&ring, 1);
		if (r < 0 && r != -EINTR) {
			bad = true;
			break;
		}
		struct io_uring_cqe *cqe;
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
			if (cqe->res != (int)slot_bytes)
				stop = bad = true;
			io_uring_cqe_seen(&ring, cqe);
			in_flight--;
			done++;
			if (stop)
				continue;
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			io_uring_prep_read(sqe, fd, bufs + (size_t)i * slot_bytes, slot_bytes,
					   CISTERN__COLD_BLOCK + NEXT_SLOT() * slot_bytes);
			io_uring_sqe_set_data64(sqe, i);
			in_flight++;
		}
		t = now();
		if (t - t0 >= secs)
			stop = true;
	}
#undef NEXT_SLOT
	io_uring_queue_exit(&ring);
	free(bufs);
	close(fd);
	return bad ? -1 : (double)done / (t - t0);
}

/* ---- one run ------------------------------------------------------------ */

static int one_run(const struct opts *o, int run, uint32_t len, int fi, struct result *res,
		   bool *by_cgroup)
{
	uint64_t pop = ((len > 4096 ? o->big_mib : o->mib) << 20) / len;
	uint64_t cold = (uint64_t)((double)pop * fracs[fi] + 0.5);
	struct cistern_config cfg = {0};
	cfg.policy = CISTERN_RESERVOIR;
	cfg.slot_size = len;
	cfg.slot_count = pop - cold;
	cfg.cold_slots = cold;
	cfg.cold_dir = cold ? o->dir : NULL;
	cfg.watermark = o->batch;
	cfg.max_procs = 8 + (uint32_t)o->producers;
	cfg.seed = 1 + (uint64_t)run;
	char name[64];
	snprintf(name, sizeof(name), "tierbench-%d-%d", (int)getpid(), run);

	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return -ENOMEM;
	memset(sh, 0, sizeof(*sh));
	char cg[256];
	bool use_cg = memwatch_cg_make(cg, sizeof(cg), "tier", run);
	*by_cgroup = use_cg;

	pid_t pids[1 + MAX_PRODUCERS];
	int np = 0;
	pid_t l = fork();
	if (l == 0) {
		if (use_cg && !memwatch_cg_join(cg))
			fail(sh, "joining the memory cgroup", EIO);
		else
			learner(sh, name, &cfg, len, o, !no_ahead[fi]);
		_exit(0);
	}
	if (l < 0) {
		munmap(sh, sizeof(*sh));
		if (use_cg)
			memwatch_cg_remove(cg);
		return -errno;
	}
	pids[np++] = l;
	while (atomic_load(&sh->phase) < 1 && !atomic_load(&sh->failed))
		nap(0.005);
	for (int k = 0; k < o->producers && !atomic_load(&sh->failed); k++) {
		pid_t p = fork();
		if (p == 0) {
			if (use_cg && !memwatch_cg_join(cg))
				fail(sh, "joining the memory cgroup", EIO);
			else
				producer(sh, name, len, k, o);
			_exit(0);
		}
		if (p > 0)
			pids[np++] = p;
	}
	/* Wait for the job; without a cgroup, sample its PSS meanwhile. */
	uint64_t peak = 0;
	int left = np;
	double t0 = now();
	while (left > 0) {
		if (!use_cg) {
			uint64_t m = memwatch_shm_bytes(name);
			for (int i = 0; i < np; i++)
				m += pids[i] > 0 ? memwatch_pss(pids[i]) : 0;
			peak = m > peak ? m : peak;
		}
		nap(0.02);
		for (int i = 0; i < np; i++) {
			if (pids[i] > 0 && waitpid(pids[i], NULL, WNOHANG) == pids[i]) {
				pids[i] = -pids[i];
				left--;
			}
		}
		if (now() - t0 > 900 && !atomic_load(&sh->failed)) {
			fail(sh, "the run", ETIMEDOUT);
			for (int i = 0; i < np; i++)
				if (pids[i] > 0)
					kill(pids[i], SIGKILL);
		}
	}
	if (use_cg)
		peak = memwatch_cg_peak(cg);

	int r = 0;
	if (atomic_load(&sh->failed)) {
		fprintf(stderr, "tier: %s\n", sh->why);
		r = -EIO;
	} else if (atomic_load(&sh->bad)) {
		fprintf(stderr, "tier: %llu samples did not arrive whole\n",
			(unsigned long long)atomic_load(&sh->bad));
		r = -EIO;
	}
	if (sh->batches)
		fprintf(stderr,
			"tier: the learner's ms a batch: acquire %.2f, checks %.2f, step %.2f, "
			"release %.2f; waiting for cold reads %.2f\n",
			1e3 * sh->t_part[0] / (double)sh->batches,
			1e3 * sh->t_part[1] / (double)sh->batches,
			1e3 * sh->t_part[2] / (double)sh->batches,
			1e3 * sh->t_part[3] / (double)sh->batches,
			1e3 * sh->read_wait / (double)sh->batches);
	memset(res, 0, sizeof(*res));
	res->batches_s = sh->window > 0 ? (double)sh->batches / sh->window : 0;
	res->cold_per_batch = sh->batches ? (double)sh->cold_reads / (double)sh->batches : 0;
	res->mem_bytes = (double)peak;
	uint32_t slot_bytes = cistern__cold_slot_bytes(len);
	res->spilled_bytes = (double)sh->spilled * len;
	res->counter_bytes = (double)sh->spilled * slot_bytes;
	res->proc_bytes = (double)atomic_load(&sh->write_bytes);
	if (r == 0 && cold) {
		char path[4096];
		cistern__cold_path(path, sizeof(path), o->dir, name);
		res->bound_slots_s = plain_loop(path, slot_bytes, cold, o->bound_secs);
		if (res->bound_slots_s < 0) {
			fprintf(stderr, "tier: the plain loop over %s failed\n", path);
			r = -EIO;
		}
	}
	cistern_unlink(name);
	if (use_cg)
		memwatch_cg_remove(cg);
	munmap(sh, sizeof(*sh));
	return r;
}

/* ---- report ------------------------------------------------------------- */

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	double t[MAX_REPS];
	memcpy(t, v, (size_t)n * sizeof(*t));
	qsort(t, (size_t)n, sizeof(*t), cmp_d);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

#define MED(field) med_of(rs, n, offsetof(struct result, field))
static double med_of(const struct result *rs, int n, size_t off)
{
	double v[MAX_REPS];
	for (int i = 0; i < n; i++)
		memcpy(&v[i], (const char *)&rs[i] + off, sizeof(double));
	return median(v, n);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: cistern-tier [--tiny] [--dir DIR] [--mib N] [--big-mib N] [--secs S] "
		"[--reps R] [--producers N] [--put-mibs R] [--step-ms T] [--batch N] [--warm-s "
		"S]\n");
}

int main(int argc, char **argv)
{
	struct opts o = {"/var/tmp", 512, 2048, 3.0, 1.0, 32, 20, 3, 2, 256, false, -1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--tiny")) {
			o.tiny = true;
			o.mib = 8;
			o.big_mib = 8;
			o.secs = 0.2;
			o.bound_secs = 0.1;
			o.reps = 1;
			o.batch = 8;
			o.step_ms = 1;
			o.put_mibs = 0;
			o.warm_s = 0;
			continue;
		}
		if (!v) {
			usage();
			return 2;
		}
		if (!strcmp(a, "--dir"))
			o.dir = v;
		else if (!strcmp(a, "--mib"))
			o.mib = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--big-mib"))
			o.big_mib = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--secs"))
			o.secs = atof(v);
		else if (!strcmp(a, "--reps"))
			o.reps = atoi(v);
		else if (!strcmp(a, "--step-ms"))
			o.step_ms = atof(v);
		else if (!strcmp(a, "--put-mibs"))
			o.put_mibs = atof(v);
		else if (!strcmp(a, "--producers"))
			o.producers = atoi(v);
		else if (!strcmp(a, "--batch"))
			o.batch = (unsigned)atoi(v);
		else if (!strcmp(a, "--warm-s"))
			o.warm_s = atof(v);
		else {
			usage();
			return 2;
		}
		i++;
	}
	if (o.warm_s < 0)
		o.warm_s = o.secs;
	if (o.mib == 0 || o.big_mib == 0 || o.secs <= 0 || o.put_mibs < 0 || o.step_ms < 0 ||
	    o.reps < 1 || o.reps > MAX_REPS || o.producers < 1 || o.producers > MAX_PRODUCERS ||
	    o.batch < 1 || (o.big_mib << 20) / sizes[NSIZE - 1] < 4 * (uint64_t)o.batch) {
		fprintf(stderr, "cistern-tier: bad options (the population of the largest samples "
				"must hold 4 batches)\n");
		usage();
		return 2;
	}

	static struct result res[NSIZE][NFRAC][MAX_REPS];
	bool by_cgroup = false;
	int run = 0, status = 0;
	for (int s = 0; s < NSIZE && status == 0; s++)
		for (int k = 0; k < o.reps && status == 0; k++)
			for (int f = 0; f < NFRAC && status == 0; f++) {
				fprintf(stderr, "tier: %u KiB, %s, repetition %d of %d\n",
					sizes[s] / 1024, frac_names[f], k + 1, o.reps);
				if (one_run(&o, run++, sizes[s], f, &res[s][f][k], &by_cgroup) < 0)
					status = 1;
			}
	if (status)
		return 1;

	char put_rate[48] = "as fast as they can";
	if (o.put_mibs > 0)
		snprintf(put_rate, sizeof(put_rate), "%.0f MiB/s in all", o.put_mibs);
	printf("Cold tier (reservoir of %llu MiB of 4 KiB samples and %llu MiB of 256 KiB samples, "
	       "cold file in %s; %d producers putting "
	       "%s, one learner drawing batches of %u with a step of %.0f ms; median of %d runs of "
	       "%.1f s; memory by %s)%s:\n\n",
	       (unsigned long long)o.mib, (unsigned long long)o.big_mib, o.dir, o.producers,
	       put_rate, o.batch, o.step_ms, o.reps, o.secs,
	       by_cgroup ? "a memory cgroup's peak usage" : "peak PSS plus the shm object",
	       o.tiny ? " [tiny run: figures meaningless]" : "");
	printf("| sample | population | batches/s | / in memory | cold reads/batch | disk bound "
	       "batches/s | / bound | memory MiB | / in memory | written / spilled (proc io, "
	       "counters) |\n");
	printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
	char verdicts[NSIZE * NFRAC * 3][200];
	int nv = 0;
	for (int s = 0; s < NSIZE; s++) {
		double mem_rate = 0, mem_bytes = 0;
		for (int f = 0; f < NFRAC; f++) {
			const struct result *rs = res[s][f];
			int n = o.reps;
			double rate = MED(batches_s), cpb = MED(cold_per_batch);
			double bound_slots = MED(bound_slots_s), mem = MED(mem_bytes);
			double spilled = MED(spilled_bytes), cnt = MED(counter_bytes);
			double pio = MED(proc_bytes);
			if (f == 0) {
				mem_rate = rate;
				mem_bytes = mem;
			}
			double bound = cpb > 0 ? bound_slots / cpb : 0;
			char bs[32] = "-", br[32] = "-", wr[48] = "-";
			if (f > 0) {
				snprintf(bs, sizeof(bs), "%.0f", bound);
				snprintf(br, sizeof(br), "%.2f", bound > 0 ? rate / bound : 0);
				snprintf(wr, sizeof(wr), "%.3f, %.3f",
					 spilled > 0 ? pio / spilled : 0,
					 spilled > 0 ? cnt / spilled : 0);
			}
			printf("| %3u KiB | %s | %.0f | %.2f | %.1f | %s | %s | %.0f | %.2f | %s "
			       "|\n",
			       sizes[s] / 1024, frac_names[f], rate,
			       mem_rate > 0 ? rate / mem_rate : 0, cpb, bs, br, mem / 1048576.0,
			       mem_bytes > 0 ? mem / mem_bytes : 0, wr);
			if (f == 0)
				continue;
			if (no_ahead[f]) {
				/* What reading ahead changes: the same population with it. */
				const struct result *ra = res[s][f - 2];
				double with = med_of(ra, n, offsetof(struct result, batches_s));
				snprintf(verdicts[nv++], sizeof(verdicts[0]),
					 "read-ahead: %u KiB %s: %.2fx the batches/s without it",
					 sizes[s] / 1024, frac_names[f - 2],
					 rate > 0 ? with / rate : 0);
				continue;
			}
			const char *tag = o.tiny ? "verdict (tiny run, not a measurement)"
						 : "verdict";
			/* The disk carries the cold reads when its bound is above the in-memory rate. */
			if (bound >= mem_rate) {
				double x = rate / mem_rate;
				snprintf(verdicts[nv++], sizeof(verdicts[0]),
					 "%s: %u KiB %s: throughput %s: %.2fx in memory (target "
					 ">= 0.90x; the disk carries the cold reads)",
					 tag, sizes[s] / 1024, frac_names[f],
					 x >= 0.9 ? "met" : "MISSED", x);
			} else {
				double x = bound > 0 ? rate / bound : 0;
				snprintf(verdicts[nv++], sizeof(verdicts[0]),
					 "%s: %u KiB %s: throughput %s: %.2fx the disk bound "
					 "(target >= 0.80x; the disk cannot carry %.0f batches/s)",
					 tag, sizes[s] / 1024, frac_names[f],
					 x >= 0.8 ? "met" : "MISSED", x, mem_rate);
			}
			double mx = mem_bytes > 0 ? mem / mem_bytes : 0;
			snprintf(verdicts[nv++], sizeof(verdicts[0]),
				 "%s: %u KiB %s: memory %s: %.2fx in memory (target <= %.2fx)", tag,
				 sizes[s] / 1024, frac_names[f],
				 mx <= mem_target[f] ? "met" : "MISSED", mx, mem_target[f]);
			/* The processes' own count when it saw the writes, else the tier's. */
			double w = pio > 0 ? pio : cnt;
			double wx = spilled > 0 ? w / spilled : 0;
			snprintf(verdicts[nv++], sizeof(verdicts[0]),
				 "%s: %u KiB %s: bytes written %s: %.3fx the bytes spilled "
				 "(target <= 1.10x; by %s)",
				 tag, sizes[s] / 1024, frac_names[f], wx <= 1.1 ? "met" : "MISSED",
				 wx, pio > 0 ? "/proc/PID/io" : "the tier's counter");
		}
	}
	printf("\n");
	for (int i = 0; i < nv; i++)
		printf("%s\n", verdicts[i]);
	return 0;
}
