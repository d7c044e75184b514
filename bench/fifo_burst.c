/* SPDX-License-Identifier: MIT */
/*
 * fifo_burst - a FIFO whose cold tier absorbs a burst four times larger than
 * its hot ring (docs/protocol/tiers.md, "The FIFO's spill ring"). For 4 KiB
 * and 256 KiB samples, with a hot ring of H slots (--hot-mib of samples,
 * default 64 MiB), three FIFOs side by side in the same run:
 *
 *   tiered     H hot slots and a cold tier of 4H slots (cold file in DIR)
 *   hot only   the same H hot slots without a tier
 *   in memory  5H hot slots: the same capacity as the tiered one, all in RAM
 *
 * In each, one forked producer puts a burst of 5H samples as fast as it
 * can with cistern_put(..., 0), retried after a short sleep on -EAGAIN. It
 * counts the -EAGAIN answers, the puts that met one and the time from a
 * put's first -EAGAIN to its success, then closes reception. One forked
 * consumer takes the samples with cistern_acquire() at most at a fixed
 * rate: --read-frac (default 0.5) of the rate of the producer alone,
 * measured first by a burst into the tiered FIFO with no consumer. That
 * is the slowest of the three producers (once its staging runs are full,
 * its puts past the hot ring wait for the disk's writes of their groups),
 * so the consumer is the slower side in each row and the hot ring fills.
 * Before the clock starts, the producer puts one sample into each hot slot
 * and the consumer takes them, so that both processes have touched every
 * page of the hot ring (a first touch of a shared page is a fault that a
 * segment in use has paid long before its burst).
 * Every sample carries its sequence number at its start, middle and end:
 * the consumer checks that it arrives whole, in order and exactly once
 * (none twice, none missing at end of data).
 *
 * Each row reports the producer's burst seconds, its waits, the consumer's
 * rate, the samples spilled to the cold tier, the bytes written to the cold
 * file and the times a put waited for a group's write (counts that the
 * machine's load does not change), the order verdict, and the
 * ratios of burst time and consumer rate against the in-memory FIFO. It
 * asserts no time. The exit status is 1 only when a row could not run or a
 * sample came torn, out of order, twice or not at all.
 *
 *   cistern-fifo-burst [--tiny] [--dir DIR] [--hot-mib N] [--read-frac F]
 *
 * DIR (default /var/tmp) must be on a disk file system that takes O_DIRECT.
 * --tiny is a run of a second or two for the test suite: small bursts,
 * figures meaningless.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cistern.h>

enum { NSIZE = 2, NROW = 3, ROW_TIERED = 0, ROW_HOT = 1, ROW_MEM = 2 };

static const uint32_t sizes[NSIZE] = {4096, 262144};
static const char *row_names[NROW] = {"tiered", "hot only", "in memory"};

/* A put or a take that makes no progress for this long fails the row. */
#define STALL_S 120.0

struct opts {
	const char *dir;
	uint64_t hot_mib;
	double read_frac;
	bool tiny;
};

/* What the two processes tell the parent, in a shared anonymous page. */
struct shared {
	_Atomic int ready; /* processes attached */
	_Atomic int go;    /* the parent's start signal */
	_Atomic int failed;
	double t_go;
	double read_rate; /* the consumer's cap, samples a second; 0: no consumer */
	/* The producer's. */
	double burst_s, wait_s;
	uint64_t eagain, waited_puts, put;
	/* The consumer's. */
	double t_last;
	uint64_t got, torn, out_of_order, twice, missing;
	char why[160];
};

struct row {
	bool ran;
	double burst_s, wait_s, read_mibs;
	uint64_t eagain, waited_puts, spilled, cold_reads;
	/* The tier's counts, which the machine's load does not change: waits for group writes. */
	uint64_t write_waits, written;
	uint64_t torn, out_of_order, twice, missing;
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
	/* Relaxed: the parent reads why only after both children exited (waitpid). */
	if (atomic_compare_exchange_strong_explicit(&sh->failed, &z, 1, memory_order_relaxed,
						    memory_order_relaxed))
		snprintf(sh->why, sizeof(sh->why), "%s: %s", what, cistern_strerror(err));
}

/* Sample seq carries seq + 1 at its start, its middle and its end. */
static void stamp(uint8_t *data, size_t len, uint64_t seq)
{
	uint64_t t = seq + 1;
	memcpy(data, &t, 8);
	memcpy(data + (len / 2 & ~(size_t)7), &t, 8);
	memcpy(data + len - 8, &t, 8);
}

/* The sample's sequence number, or UINT64_MAX when it is torn. */
static uint64_t seq_of(const struct cistern_sample *s, size_t len)
{
	uint64_t a, b, m;
	if (s->len != len)
		return UINT64_MAX;
	const uint8_t *d = s->data;
	memcpy(&a, d, 8);
	memcpy(&m, d + (len / 2 & ~(size_t)7), 8);
	memcpy(&b, d + len - 8, 8);
	return a == b && a == m && a != 0 ? a - 1 : UINT64_MAX;
}

static bool wait_go(struct shared *sh)
{
	atomic_fetch_add(&sh->ready, 1);
	while (!atomic_load(&sh->go) && !atomic_load(&sh->failed))
		nap(0.0005);
	return !atomic_load(&sh->failed);
}

static void producer(struct shared *sh, const char *name, size_t len, uint64_t n, uint64_t hot)
{
	struct cistern *c;
	int r = cistern_attach(name, &c);
	uint8_t *buf = malloc(len);
	if (r < 0 || !buf) {
		fail(sh, "producer attach", r < 0 ? r : -ENOMEM);
		atomic_fetch_add(&sh->ready, 1);
		free(buf);
		if (r == 0)
			cistern_detach(c);
		return;
	}
	memset(buf, 0x5a, len);
	/* The warm-up: one sample in each hot slot, numbered from n on; it fits. */
	for (uint64_t i = 0; i < hot; i++) {
		stamp(buf, len, n + i);
		if ((r = cistern_put(c, buf, len, NULL, 0)) < 0) {
			fail(sh, "the warm-up's put", r);
			break;
		}
	}
	if (!wait_go(sh))
		goto out;
	double t0 = sh->t_go;
	for (uint64_t i = 0; i < n; i++) {
		stamp(buf, len, i);
		double tw = 0;
		for (;;) {
			r = cistern_put(c, buf, len, NULL, 0);
			if (r != -EAGAIN)
				break;
			/* Full: count the answer, sleep a little and try again. */
			sh->eagain++;
			double t = now();
			if (tw == 0) {
				tw = t;
				sh->waited_puts++;
			}
			if (t - tw > STALL_S ||
			    atomic_load_explicit(&sh->failed, memory_order_relaxed))
				break;
			nap(0.00005);
		}
		if (tw > 0)
			sh->wait_s += now() - tw;
		if (r < 0) {
			fail(sh, "cistern_put", r == -EAGAIN ? -ETIMEDOUT : r);
			break;
		}
		sh->put++;
	}
	sh->burst_s = now() - t0;
out:
	/* The consumer drains what is left and then gets end of data. */
	cistern_close_reception(c);
	cistern_detach(c);
	free(buf);
}

static void consumer(struct shared *sh, const char *name, size_t len, uint64_t n, uint64_t hot)
{
	struct cistern *c;
	int r = cistern_attach(name, &c);
	uint8_t *seen = calloc((size_t)(n + 7) / 8, 1);
	if (r < 0 || !seen) {
		fail(sh, "consumer attach", r < 0 ? r : -ENOMEM);
		atomic_fetch_add(&sh->ready, 1);
		free(seen);
		if (r == 0)
			cistern_detach(c);
		return;
	}
	/* The warm-up's samples, in order; without a rate, nothing more. */
	for (uint64_t i = 0; i < hot; i++) {
		struct cistern_sample s;
		if ((r = cistern_acquire(c, &s, 30000)) < 0) {
			fail(sh, "the warm-up's acquire", r);
			break;
		}
		bool good = seq_of(&s, len) == n + i;
		cistern_release(c, &s);
		if (!good) {
			fail(sh, "the warm-up's samples", -EPROTO);
			break;
		}
	}
	if (sh->read_rate <= 0) {
		atomic_fetch_add(&sh->ready, 1);
		goto out;
	}
	if (!wait_go(sh))
		goto out;
	double t0 = sh->t_go, rate = sh->read_rate, idle = now();
	uint64_t next = 0, unique = 0;
	for (;;) {
		struct cistern_sample s;
		r = cistern_acquire(c, &s, 1000);
		if (r == CISTERN_EOD)
			break;
		if (r == -ETIMEDOUT) {
			if (now() - idle > STALL_S) {
				fail(sh, "cistern_acquire", r);
				break;
			}
			continue;
		}
		if (r < 0) {
			fail(sh, "cistern_acquire", r);
			break;
		}
		uint64_t seq = seq_of(&s, len);
		cistern_release(c, &s);
		sh->got++;
		if (seq >= n) {
			sh->torn++;
		} else {
			if (seq != next)
				sh->out_of_order++;
			next = seq + 1;
			if (seen[seq / 8] & (1u << (seq % 8))) {
				sh->twice++;
			} else {
				seen[seq / 8] |= (uint8_t)(1u << (seq % 8));
				unique++;
			}
		}
		/* At most `rate` samples a second from the start: sleep until this one's turn. */
		idle = now();
		double ahead = rate > 0 ? (double)sh->got / rate - (idle - t0) : 0;
		if (ahead > 0.0002)
			nap(ahead);
	}
	sh->t_last = now();
	sh->missing = n - unique;
out:
	cistern_detach(c);
	free(seen);
}

static void reap(pid_t *pids, int np)
{
	for (int i = 0; i < np; i++)
		if (pids[i] > 0)
			waitpid(pids[i], NULL, 0);
}

/*
 * One FIFO: `hot` slots and `cold` cold ones, a burst of n samples. With a
 * read_rate of 0 the consumer only takes the warm-up (the producer alone,
 * into a FIFO that holds the whole burst). 0, or -EIO when the row could not run.
 */
static int one_row(const struct opts *o, int run, uint32_t len, uint64_t hot, uint64_t cold,
		   uint64_t n, double read_rate, struct row *res)
{
	memset(res, 0, sizeof(*res));
	struct cistern_config cfg = {0};
	cfg.policy = CISTERN_FIFO;
	cfg.slot_size = len;
	cfg.slot_count = hot;
	cfg.cold_slots = cold;
	cfg.cold_dir = cold ? o->dir : NULL;
	cfg.max_procs = 8;
	char name[64];
	snprintf(name, sizeof(name), "fifoburst-%d-%d", (int)getpid(), run);

	struct cistern *c;
	int r = cistern_create(name, &cfg, &c);
	if (r < 0) {
		const char *why = cistern_config_problem(&cfg);
		fprintf(stderr, "fifo-burst: cistern_create: %s%s%s\n", cistern_strerror(r),
			why ? ": " : "", why ? why : "");
		return -EIO;
	}
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		cistern_detach(c);
		cistern_unlink(name);
		return -EIO;
	}
	memset(sh, 0, sizeof(*sh));
	sh->read_rate = read_rate;

	pid_t pids[2] = {0, 0};
	int np = 2;
	for (int i = 0; i < np; i++) {
		pid_t p = fork();
		if (p == 0) {
			if (i == 0)
				producer(sh, name, len, n, hot);
			else
				consumer(sh, name, len, n, hot);
			_exit(0);
		}
		if (p < 0) {
			fail(sh, "fork", -errno);
			np = i;
			break;
		}
		pids[i] = p;
	}
	double t = now();
	while (atomic_load(&sh->ready) < np && !atomic_load(&sh->failed) && now() - t < 30)
		nap(0.001);
	if (atomic_load(&sh->ready) < np)
		fail(sh, "the processes' start", -ETIMEDOUT);
	/*
	 * Seq_cst: the children read t_go after they load go; their figures
	 * come back through their exit (waitpid).
	 */
	sh->t_go = now();
	atomic_store(&sh->go, 1);
	reap(pids, np);

	struct cistern_stats st;
	if (cistern_stats_get(c, &st) == 0) {
		res->spilled = st.cold_spilled;
		res->cold_reads = st.cold_reads;
		res->write_waits = st.cold_write_waits;
		res->written = st.cold_bytes_written;
	}
	cistern_detach(c);
	cistern_unlink(name);

	r = 0;
	if (atomic_load(&sh->failed)) {
		fprintf(stderr, "fifo-burst: %u KiB, %s: %s\n", len / 1024, name, sh->why);
		r = -EIO;
	} else if (sh->put != n) {
		fprintf(stderr, "fifo-burst: %u KiB: the producer put %llu of %llu samples\n",
			len / 1024, (unsigned long long)sh->put, (unsigned long long)n);
		r = -EIO;
	}
	res->ran = r == 0;
	res->burst_s = sh->burst_s;
	res->wait_s = sh->wait_s;
	res->eagain = sh->eagain;
	res->waited_puts = sh->waited_puts;
	double span = sh->t_last - sh->t_go;
	res->read_mibs = span > 0 ? (double)sh->got * len / 1048576.0 / span : 0;
	res->torn = sh->torn;
	res->out_of_order = sh->out_of_order;
	res->twice = sh->twice;
	res->missing = read_rate > 0 ? sh->missing : 0;
	munmap(sh, sizeof(*sh));
	return r;
}

static bool order_ok(const struct row *w)
{
	return w->ran && !w->torn && !w->out_of_order && !w->twice && !w->missing;
}

static void usage(void)
{
	fprintf(stderr, "usage: cistern-fifo-burst [--tiny] [--dir DIR] [--hot-mib N] "
			"[--read-frac F]\n");
}

int main(int argc, char **argv)
{
	struct opts o = {"/var/tmp", 64, 0.5, false};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--tiny")) {
			o.tiny = true;
			o.hot_mib = 2;
			continue;
		}
		if (!v) {
			usage();
			return 2;
		}
		if (!strcmp(a, "--dir"))
			o.dir = v;
		else if (!strcmp(a, "--hot-mib"))
			o.hot_mib = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--read-frac"))
			o.read_frac = atof(v);
		else {
			usage();
			return 2;
		}
		i++;
	}
	if (o.hot_mib == 0 || o.hot_mib > 4096 || (o.hot_mib << 20) / sizes[NSIZE - 1] < 2 ||
	    !(o.read_frac > 0 && o.read_frac <= 1)) {
		fprintf(stderr, "cistern-fifo-burst: bad options (the hot ring must hold two of "
				"the largest samples; --read-frac in (0, 1])\n");
		usage();
		return 2;
	}

	static struct row rows[NSIZE][NROW];
	double alone_mibs[NSIZE] = {0}, cap_mibs[NSIZE] = {0};
	int run = 0, status = 0;
	for (int s = 0; s < NSIZE; s++) {
		uint32_t len = sizes[s];
		uint64_t h = (o.hot_mib << 20) / len, n = 5 * h;
		/* The producer alone, into the tiered FIFO, which holds the whole burst. */
		struct row alone;
		fprintf(stderr, "fifo-burst: %u KiB, the producer alone\n", len / 1024);
		if (one_row(&o, run++, len, h, 4 * h, n, 0, &alone) < 0 || alone.burst_s <= 0) {
			fprintf(stderr, "fifo-burst: %u KiB: the producer alone did not run\n",
				len / 1024);
			status = 1;
			continue;
		}
		double rate = (double)n / alone.burst_s * o.read_frac;
		alone_mibs[s] = (double)n * len / 1048576.0 / alone.burst_s;
		cap_mibs[s] = rate * len / 1048576.0;
		const uint64_t hot[NROW] = {h, h, n}, cold[NROW] = {4 * h, 0, 0};
		for (int k = 0; k < NROW; k++) {
			fprintf(stderr, "fifo-burst: %u KiB, %s\n", len / 1024, row_names[k]);
			if (one_row(&o, run++, len, hot[k], cold[k], n, rate, &rows[s][k]) < 0)
				status = 1;
		}
	}

	printf("FIFO burst (one producer puts a burst of 5H samples with cistern_put(..., 0), "
	       "retried on -EAGAIN; H = %llu MiB of samples; one consumer reads at most %.2fx "
	       "the producer's rate alone into the tiered FIFO; cold file in %s)%s:\n\n",
	       (unsigned long long)o.hot_mib, o.read_frac, o.dir,
	       o.tiny ? " [tiny run: figures meaningless]" : "");
	printf("| sample | FIFO | slots | burst s | / in memory | -EAGAIN | puts that waited | "
	       "waited s | consumer MiB/s | / in memory | spilled | cold MiB written | "
	       "waits for a group write | order, exactly once |\n");
	printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
	       "--- |\n");
	char lines[NSIZE * 4][240];
	int nl = 0;
	const char *tag = o.tiny ? "verdict (tiny run, not a measurement)" : "verdict";
	for (int s = 0; s < NSIZE; s++) {
		uint32_t len = sizes[s];
		uint64_t h = (o.hot_mib << 20) / len;
		const struct row *m = &rows[s][ROW_MEM];
		for (int k = 0; k < NROW; k++) {
			const struct row *w = &rows[s][k];
			char slots[48];
			if (k == ROW_TIERED)
				snprintf(slots, sizeof(slots), "%llu + %llu cold",
					 (unsigned long long)h, (unsigned long long)(4 * h));
			else
				snprintf(slots, sizeof(slots), "%llu",
					 (unsigned long long)(k == ROW_MEM ? 5 * h : h));
			if (!w->ran) {
				printf("| %3u KiB | %s | %s | did not run | | | | | | | | | | |\n",
				       len / 1024, row_names[k], slots);
				continue;
			}
			char verdict[96] = "ok";
			if (!order_ok(w))
				snprintf(verdict, sizeof(verdict),
					 "FAILED: %llu torn, %llu out of order, %llu twice, "
					 "%llu missing",
					 (unsigned long long)w->torn,
					 (unsigned long long)w->out_of_order,
					 (unsigned long long)w->twice,
					 (unsigned long long)w->missing);
			printf("| %3u KiB | %s | %s | %.3f | %.2f | %llu | %llu | %.3f | %.0f | "
			       "%.2f | %llu | %.0f | %llu | %s |\n",
			       len / 1024, row_names[k], slots, w->burst_s,
			       m->ran && m->burst_s > 0 ? w->burst_s / m->burst_s : 0,
			       (unsigned long long)w->eagain, (unsigned long long)w->waited_puts,
			       w->wait_s, w->read_mibs,
			       m->ran && m->read_mibs > 0 ? w->read_mibs / m->read_mibs : 0,
			       (unsigned long long)w->spilled, (double)w->written / 1048576.0,
			       (unsigned long long)w->write_waits, verdict);
			if (!order_ok(w))
				status = 1;
		}
		const struct row *a = &rows[s][ROW_TIERED];
		if (!a->ran || !m->ran)
			continue;
		snprintf(lines[nl++], sizeof(lines[0]),
			 "%s: %u KiB: waits %s: the producer met -EAGAIN %llu times with a cold "
			 "tier that had room (target 0); %llu samples spilled",
			 tag, len / 1024, a->eagain == 0 ? "met" : "MISSED",
			 (unsigned long long)a->eagain, (unsigned long long)a->spilled);
		snprintf(lines[nl++], sizeof(lines[0]),
			 "ratio: %u KiB: tiered against in memory: burst time %.2fx, consumer "
			 "rate %.2fx (producer alone into the tiered FIFO %.0f MiB/s, consumer "
			 "capped at %.0f MiB/s)",
			 len / 1024, m->burst_s > 0 ? a->burst_s / m->burst_s : 0,
			 m->read_mibs > 0 ? a->read_mibs / m->read_mibs : 0, alone_mibs[s],
			 cap_mibs[s]);
	}
	printf("\n");
	for (int i = 0; i < nl; i++)
		printf("%s\n", lines[i]);
	return status;
}
