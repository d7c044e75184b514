/* SPDX-License-Identifier: MIT */
/*
 * test_remote.c - remote producers and `cistern serve` (docs/REMOTE.md): the
 * built binary serves segments this test creates, forked producers connect
 * over ipc:// in a temporary directory or tcp:// on a loopback port found
 * free at run time, and the segments are read back to see what arrived.
 * Every wait is bounded: a serve that never answers fails its test.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <zmq.h>

#include "helpers.h"
#include "remote/remote_wire.h"
#include <cistern/remote.h>

#ifndef CISTERN_BIN
#error "CISTERN_BIN must name the built cistern binary"
#endif

#define PAYLOAD 64

static char tmpdir[256];

static void remote_init(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/cistern-remote-test-XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void remote_fini(void)
{
	seg_fini();
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (tmpdir[0] && system(cmd) != 0)
		tmpdir[0] = '\0';
}

TestSuite(remote, .init = remote_init, .fini = remote_fini, .timeout = 120);

static const char *ipc_endpoint(const char *tag)
{
	static char ep[2][320];
	static int k;
	char *e = ep[k++ & 1];
	snprintf(e, sizeof(ep[0]), "ipc://%s/%s.sock", tmpdir, tag);
	return e;
}

/* A tcp:// endpoint on 127.0.0.1 whose port the kernel just found free. */
static const char *tcp_endpoint(void)
{
	static char ep[64];
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	socklen_t al = sizeof(a);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	close(fd);
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", ntohs(a.sin_port));
	return ep;
}

static void slurp_file(const char *path, char *buf, size_t cap)
{
	buf[0] = '\0';
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, cap - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
}

struct serve {
	pid_t pid;
	char log[320];
};

/* Start `cistern serve ARGS...` (NULL-terminated) with stderr to a log file. */
static void serve_start_v(struct serve *s, const char *tag, const char *const *args)
{
	static int n;
	snprintf(s->log, sizeof(s->log), "%s/serve-%s-%d.log", tmpdir, tag, n++);
	s->pid = fork_child();
	cr_assert_geq(s->pid, 0);
	if (s->pid == 0) {
		alarm(100); /* a serve left behind does not outlive its test by long */
		int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 2);
		char *argv[40] = {(char *)CISTERN_BIN, (char *)"serve"};
		for (int i = 0; args[i] && i < 37; i++)
			argv[i + 2] = (char *)(uintptr_t)args[i];
		execv(CISTERN_BIN, argv);
		_exit(127);
	}
}

/* Wait until the log holds `what`, at most `secs` seconds. */
static int log_wait(const char *path, const char *what, double secs)
{
	static char buf[1 << 16];
	double end = mono_now() + secs;
	do {
		slurp_file(path, buf, sizeof(buf));
		if (strstr(buf, what))
			return 1;
		usleep(10000);
	} while (mono_now() < end);
	return 0;
}

static void serve_ready(struct serve *s)
{
	cr_assert(log_wait(s->log, "listening on", 20), "serve did not start");
}

/* SIGTERM, then the exit status (128 + signal if killed), within 30 s. */
static int serve_stop(struct serve *s)
{
	kill(s->pid, SIGTERM);
	double end = mono_now() + 30;
	int st = 0;
	while (waitpid(s->pid, &st, WNOHANG) == 0) {
		if (mono_now() > end) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, &st, 0);
			cr_assert_fail("serve did not stop within 30 s of SIGTERM");
		}
		usleep(10000);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* `cistern serve` of segment c alone on an ipc endpoint of its own, started and ready. */
static const char *serve_one(struct serve *s, const char *tag, const struct cistern *c)
{
	const char *ep = ipc_endpoint(tag);
	serve_start_v(s, tag, (const char *const[]){"-b", ep, "-s", seg_name_of(c), NULL});
	serve_ready(s);
	return ep;
}

static int wait_child(pid_t pid, double secs)
{
	double end = mono_now() + secs;
	int st = 0;
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (mono_now() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(10000);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static struct cistern_config fifo(uint64_t slots, uint64_t slot_size)
{
	return (struct cistern_config){.slot_count = slots, .slot_size = slot_size};
}

static struct cistern_remote *connect_retry(const char *ep, const struct cistern_remote_opts *o)
{
	struct cistern_remote *r = NULL;
	double end = mono_now() + 20;
	int rc;
	while ((rc = cistern_remote_connect(ep, o, &r)) < 0 && mono_now() < end)
		usleep(20000);
	return rc == 0 ? r : NULL;
}

/* Put sample idx of simulation sim: payload fill_payload(sim, idx), time_step idx. */
static int put_sample(struct cistern_remote *r, uint32_t sim, uint32_t idx, int timeout_ms)
{
	uint8_t buf[PAYLOAD];
	fill_payload(buf, sizeof(buf), sim, idx);
	struct cistern_meta m = {.sim_id = sim, .time_step = idx};
	return cistern_remote_put(r, buf, sizeof(buf), &m, timeout_ms);
}

/*
 * Through serve s, the producer r puts one sample that reaches segment c;
 * then r closes and serve stops cleanly.
 */
static void one_sample_goes_through(struct serve *s, struct cistern_remote *r, struct cistern *c)
{
	cr_assert_eq(put_sample(r, 1, 0, 5000), 0);
	cr_assert_eq(cistern_remote_flush(r, 10000), 0);
	cistern_remote_close(r);
	uint8_t buf[PAYLOAD];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 1000), PAYLOAD);
	cr_assert_eq(serve_stop(s), 0);
}

/*
 * Read what the segment holds (FIFO), checking every payload whole, into
 * count[idx] for samples of simulation sim (idx < cap). Returns samples read.
 */
static uint64_t drain_count(struct cistern *c, uint32_t sim, uint32_t *count, size_t cap,
			    uint32_t *ranks_seen, uint32_t rank)
{
	uint64_t n = 0;
	uint8_t buf[PAYLOAD];
	struct cistern_meta m;
	ssize_t len;
	while ((len = cistern_get(c, buf, sizeof(buf), &m, 300)) >= 0) {
		cr_assert_eq(len, PAYLOAD, "a sample of %zd bytes", len);
		cr_assert(check_payload(buf, PAYLOAD, m.sim_id, m.time_step),
			  "sample (%u, %u) damaged", m.sim_id, m.time_step);
		if (ranks_seen)
			ranks_seen[m.sim_id] |= 1u << rank;
		if (m.sim_id == sim && m.time_step < cap)
			count[m.time_step]++;
		n++;
	}
	cr_assert(len == -ETIMEDOUT || len == -EAGAIN || len == CISTERN_EOD, "get: %s",
		  cistern_strerror((int)len));
	return n;
}

/* ---------------------------------------------------------------------- */

struct shared_progress {
	_Atomic uint64_t acked;
	_Atomic uint64_t sent;
	_Atomic int connected;
};

Test(remote, producer_killed_mid_stream_leaves_every_acked_sample_once_and_whole)
{
	struct cistern *c = seg_create("rkill", fifo(1 << 15, PAYLOAD));
	const char *ep = ipc_endpoint("kill");
	struct serve s;
	serve_start_v(&s, "kill",
		      (const char *const[]){"--bind", ep, "--segment", seg_name_of(c), NULL});
	serve_ready(&s);
	struct shared_progress *sp = shared_alloc(sizeof(*sp));
	pid_t prod = fork_child();
	cr_assert_geq(prod, 0);
	if (prod == 0) {
		struct cistern_remote *r = connect_retry(ep, NULL);
		if (!r)
			_exit(3);
		for (uint32_t i = 0;; i++) {
			if (put_sample(r, 7, i, 10000) < 0)
				_exit(4);
			struct cistern_remote_info info;
			cistern_remote_info_get(r, &info);
			atomic_store(&sp->acked, info.acked);
			atomic_store(&sp->sent, info.sent);
		}
	}
	double end = mono_now() + 30;
	while (atomic_load(&sp->acked) < 3000 && mono_now() < end)
		usleep(1000);
	kill(prod, SIGKILL);
	waitpid(prod, NULL, 0);
	uint64_t acked = atomic_load(&sp->acked), sent = atomic_load(&sp->sent);
	cr_assert_geq(acked, 3000, "only %llu samples acknowledged in 30 s",
		      (unsigned long long)acked);
	cr_assert(log_wait(s.log, "lost", 15), "serve did not see the producer die");

	static uint32_t count[1 << 15];
	uint64_t n = drain_count(c, 7, count, 1 << 15, NULL, 0);
	for (uint64_t i = 0; i < acked; i++)
		cr_assert_eq(count[i], 1, "acknowledged sample %llu is there %u times",
			     (unsigned long long)i, count[i]);
	/* Past the acknowledged ones: some in-flight samples, each at most once, in order. */
	for (uint64_t i = acked; i < (1 << 15); i++)
		cr_assert_leq(count[i], 1);
	cr_assert_leq(n, sent + 1);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, every_sim_id_lands_on_one_rank_sim_id_mod_ranks)
{
	struct cistern *r0 = seg_create("rrt0", fifo(4096, PAYLOAD));
	struct cistern *r1 = seg_create("rrt1", fifo(4096, PAYLOAD));
	struct cistern *r2 = seg_create("rrt2", fifo(4096, PAYLOAD));
	const char *ep = ipc_endpoint("route");
	struct serve s;
	serve_start_v(&s, "route",
		      (const char *const[]){"-b", ep, "-s", seg_name_of(r0), "-s", seg_name_of(r1),
					    "-s", seg_name_of(r2), NULL});
	serve_ready(&s);
	enum { PRODUCERS = 3, SIMS = 5, STEPS = 40 };
	pid_t kids[PRODUCERS];
	for (int p = 0; p < PRODUCERS; p++) {
		kids[p] = fork_child();
		cr_assert_geq(kids[p], 0);
		if (kids[p] == 0) {
			struct cistern_remote *r = connect_retry(ep, NULL);
			if (!r)
				_exit(3);
			struct cistern_remote_info info;
			cistern_remote_info_get(r, &info);
			if (info.ranks != 3)
				_exit(5);
			for (uint32_t t = 0; t < STEPS; t++)
				for (uint32_t k = 0; k < SIMS; k++)
					if (put_sample(r, (uint32_t)p * SIMS + k, t, 10000) < 0)
						_exit(4);
			_exit(cistern_remote_flush(r, 20000) == 0 ? 0 : 6);
		}
	}
	for (int p = 0; p < PRODUCERS; p++)
		cr_assert_eq(wait_child(kids[p], 60), 0, "producer %d failed", p);
	uint32_t seen[PRODUCERS * SIMS] = {0};
	static uint32_t dummy[1];
	uint64_t total = drain_count(r0, UINT32_MAX, dummy, 0, seen, 0) +
			 drain_count(r1, UINT32_MAX, dummy, 0, seen, 1) +
			 drain_count(r2, UINT32_MAX, dummy, 0, seen, 2);
	cr_assert_eq(total, PRODUCERS * SIMS * STEPS);
	for (uint32_t sim = 0; sim < PRODUCERS * SIMS; sim++)
		cr_assert_eq(seen[sim], 1u << (sim % 3), "sim %u seen on ranks mask %#x", sim,
			     seen[sim]);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, route_map_file_sends_listed_sims_to_their_rank)
{
	struct cistern *r0 = seg_create("rmp0", fifo(1024, PAYLOAD));
	struct cistern *r1 = seg_create("rmp1", fifo(1024, PAYLOAD));
	char map[400];
	snprintf(map, sizeof(map), "%s/route.map", tmpdir);
	FILE *f = fopen(map, "w");
	fputs("# sim rank\n2 1\n3 1\n", f);
	fclose(f);
	const char *ep = ipc_endpoint("map");
	struct serve s;
	serve_start_v(&s, "map",
		      (const char *const[]){"-b", ep, "-s", seg_name_of(r0), "-s", seg_name_of(r1),
					    "--route-map", map, NULL});
	serve_ready(&s);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	for (uint32_t sim = 0; sim < 6; sim++)
		for (uint32_t t = 0; t < 10; t++)
			cr_assert_eq(put_sample(r, sim, t, 5000), 0);
	cr_assert_eq(cistern_remote_flush(r, 10000), 0);
	cistern_remote_close(r);
	uint32_t seen[6] = {0};
	static uint32_t dummy[1];
	drain_count(r0, UINT32_MAX, dummy, 0, seen, 0);
	drain_count(r1, UINT32_MAX, dummy, 0, seen, 1);
	/* 2 and 3 by the map; the others by sim_id mod 2 */
	uint32_t want[6] = {1, 2, 2, 2, 1, 2};
	for (int sim = 0; sim < 6; sim++)
		cr_assert_eq(seen[sim], want[sim], "sim %d on ranks mask %#x", sim, seen[sim]);
	cr_assert_eq(serve_stop(&s), 0);
}

static long rss_kib(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	slurp_file(path, buf, sizeof(buf));
	const char *p = strstr(buf, "VmRSS:");
	return p ? strtol(p + 6, NULL, 10) : -1;
}

struct bp_result {
	_Atomic int phase; /* 1: window full, measuring; 2: finished */
	uint64_t sent, acked, window, attempts;
	long rss_before, rss_full;
};

Test(remote, a_full_segment_bounds_memory_and_samples_in_flight)
{
	enum { BIG = 256 * 1024, SLOTS = 4, WINDOW = 8 };
	struct cistern *c = seg_create("rbp", fifo(SLOTS, BIG));
	const char *ep = ipc_endpoint("bp");
	struct serve s;
	serve_start_v(&s, "bp",
		      (const char *const[]){"-b", ep, "-s", seg_name_of(c), "--window", "8",
					    "--drain-timeout", "500", NULL});
	serve_ready(&s);
	long serve_before = rss_kib(s.pid);
	struct bp_result *res = shared_alloc(sizeof(*res));
	pid_t prod = fork_child();
	cr_assert_geq(prod, 0);
	if (prod == 0) {
		uint8_t *buf = calloc(1, BIG);
		struct cistern_remote *r = connect_retry(ep, NULL);
		if (!r || !buf)
			_exit(3);
		res->rss_before = rss_kib(getpid());
		/*
		 * Offer 256 samples of 256 KiB (64 MiB) to a segment that holds
		 * 4: without credits they would all be queued somewhere.
		 */
		for (int i = 0; i < 256; i++) {
			struct cistern_meta m = {.sim_id = 1, .time_step = (uint32_t)i};
			res->attempts++;
			if (cistern_remote_put(r, buf, BIG, &m, 20) == -ETIMEDOUT)
				continue;
		}
		struct cistern_remote_info info;
		cistern_remote_info_get(r, &info);
		res->sent = info.sent;
		res->acked = info.acked;
		res->window = info.window;
		res->rss_full = rss_kib(getpid());
		atomic_store(&res->phase, 1);
		while (atomic_load(&res->phase) != 2)
			usleep(1000);
		_exit(0);
	}
	double end = mono_now() + 60;
	while (atomic_load(&res->phase) != 1 && mono_now() < end)
		usleep(1000);
	cr_assert_eq(atomic_load(&res->phase), 1, "the producer did not finish its puts");
	long serve_full = rss_kib(s.pid);
	atomic_store(&res->phase, 2);
	cr_assert_eq(wait_child(prod, 10), 0);
	cr_assert_eq(res->window, WINDOW);
	/* The segment's 4 slots, and at most a window in flight beyond them. */
	cr_assert_leq(res->sent, SLOTS + WINDOW, "%llu samples sent",
		      (unsigned long long)res->sent);
	cr_assert_geq(res->sent, SLOTS);
	cr_assert_leq(res->sent - res->acked, WINDOW);
	cr_assert_eq(res->acked, SLOTS);
	/* A window is 2 MiB; 64 MiB were offered. 16 MiB of slack for allocators. */
	cr_assert_lt(serve_full - serve_before, 16 * 1024, "serve grew by %ld KiB",
		     serve_full - serve_before);
	cr_assert_lt(res->rss_full - res->rss_before, 16 * 1024, "producer grew by %ld KiB",
		     res->rss_full - res->rss_before);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, a_full_rank_holds_up_no_producer_of_another_rank)
{
	struct cistern *full = seg_create("rfull0", fifo(4, PAYLOAD));
	struct cistern *free1 = seg_create("rfull1", fifo(1024, PAYLOAD));
	const char *ep = ipc_endpoint("full");
	struct serve s;
	serve_start_v(&s, "full",
		      (const char *const[]){"-b", ep, "-s", seg_name_of(full), "-s",
					    seg_name_of(free1), "--window", "8", "--drain-timeout",
					    "200", NULL});
	serve_ready(&s);
	/* Producer A fills rank 0 (sim 0) and waits there with its window full. */
	struct cistern_remote *a = connect_retry(ep, NULL);
	cr_assert_not_null(a);
	uint32_t i = 0;
	while (put_sample(a, 0, i, 200) == 0)
		i++;
	cr_assert_eq(i, 4 + 8, "A sent %u samples to a rank holding 4, window 8", i);
	/* Producer B's samples go to rank 1: all of them arrive. */
	struct cistern_remote *b = connect_retry(ep, NULL);
	cr_assert_not_null(b);
	for (uint32_t t = 0; t < 500; t++)
		cr_assert_eq(put_sample(b, 1, t, 5000), 0, "B blocked at sample %u", t);
	cr_assert_eq(cistern_remote_flush(b, 10000), 0);
	static uint32_t count[500];
	cr_assert_eq(drain_count(free1, 1, count, 500, NULL, 0), 500);
	cistern_remote_close(b);
	cistern_remote_close(a);
	cr_assert_eq(serve_stop(&s), 0);
}

static void read_key(const char *path, const char *kind, char out[CISTERN_KEY_LEN + 1])
{
	char buf[512];
	slurp_file(path, buf, sizeof(buf));
	char want[16];
	snprintf(want, sizeof(want), "\n%s ", kind);
	const char *p = strstr(buf, want);
	cr_assert_not_null(p, "no %s key in %s", kind, path);
	p += strlen(want);
	memcpy(out, p, CISTERN_KEY_LEN);
	out[CISTERN_KEY_LEN] = '\0';
}

static void keygen(const char *path)
{
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execl(CISTERN_BIN, CISTERN_BIN, "keygen", path, NULL);
		_exit(127);
	}
	cr_assert_eq(wait_child(pid, 10), 0, "cistern keygen %s failed", path);
}

Test(remote, a_client_without_an_admitted_key_is_refused_and_logged)
{
	struct cistern *c = seg_create("rkey", fifo(64, PAYLOAD));
	char server[400], good[400], bad[400];
	snprintf(server, sizeof(server), "%s/server.key", tmpdir);
	snprintf(good, sizeof(good), "%s/good.key", tmpdir);
	snprintf(bad, sizeof(bad), "%s/bad.key", tmpdir);
	keygen(server);
	keygen(good);
	keygen(bad);
	char spub[41], gpub[41], gsec[41], bpub[41], bsec[41], goodpub[420];
	read_key(server, "public", spub);
	read_key(good, "public", gpub);
	read_key(good, "secret", gsec);
	read_key(bad, "public", bpub);
	read_key(bad, "secret", bsec);
	snprintf(goodpub, sizeof(goodpub), "%s.pub", good);
	const char *ep = tcp_endpoint();
	struct serve s;
	serve_start_v(&s, "key",
		      (const char *const[]){"-b", ep, "-s", seg_name_of(c), "--key", server,
					    "--client-keys", goodpub, NULL});
	serve_ready(&s);

	struct cistern_remote_opts o = {.size = sizeof(o),
					.server_key = spub,
					.public_key = bpub,
					.secret_key = bsec,
					.connect_timeout_ms = 1500};
	struct cistern_remote *r = NULL;
	int rc = cistern_remote_connect(ep, &o, &r);
	cr_assert_eq(rc, -ETIMEDOUT, "connect: %s", cistern_strerror(rc));
	cr_assert(log_wait(s.log, "refused a client", 10), "the refusal was not logged");
	char logbuf[8192];
	slurp_file(s.log, logbuf, sizeof(logbuf));
	cr_assert_not_null(strstr(logbuf, bpub), "the log does not name the refused key");

	/* No key at all is refused too: the handshake never completes. */
	struct cistern_remote_opts plain = {.size = sizeof(plain), .connect_timeout_ms = 1000};
	cr_assert_eq(cistern_remote_connect(ep, &plain, &r), -ETIMEDOUT);

	/* The admitted key gets in and its samples arrive. */
	o.public_key = gpub;
	o.secret_key = gsec;
	o.connect_timeout_ms = 10000;
	cr_assert_eq(cistern_remote_connect(ep, &o, &r), 0);
	one_sample_goes_through(&s, r, c);
}

Test(remote, serve_refuses_a_non_loopback_bind_without_keys)
{
	struct cistern *c = seg_create("rnl", fifo(64, PAYLOAD));
	struct serve s;
	serve_start_v(&s, "nl",
		      (const char *const[]){"-b", "tcp://0.0.0.0:0", "-s", seg_name_of(c), NULL});
	cr_assert_eq(wait_child(s.pid, 20), 1);
	cr_assert(log_wait(s.log, "needs CurveZMQ keys", 1));
}

Test(remote, serve_restarted_under_load_loses_and_duplicates_nothing)
{
	enum { TOTAL = 6000 };
	struct cistern *c = seg_create("rrs", fifo(8192, PAYLOAD));
	const char *ep = tcp_endpoint();
	const char *const args[] = {"-b", ep, "-s", seg_name_of(c), NULL};
	struct serve s;
	serve_start_v(&s, "rs1", args);
	serve_ready(&s);
	struct shared_progress *sp = shared_alloc(sizeof(*sp));
	pid_t prod = fork_child();
	cr_assert_geq(prod, 0);
	if (prod == 0) {
		/*
		 * Puts samples 0..TOTAL-1; when the server goes, it connects
		 * again and puts the ones it was not told were in (after a
		 * clean stop no sample is in doubt).
		 */
		uint32_t base = 0;
		int resets = 0;
		while (base < TOTAL) {
			struct cistern_remote *r = connect_retry(ep, NULL);
			if (!r)
				_exit(3);
			uint32_t i = base;
			int rc = 0;
			/*
			 * Paced (a pause every 50 samples), so that the restart
			 * comes while samples still stream in, however fast the
			 * server puts them.
			 */
			for (; i < TOTAL && rc == 0; i++) {
				rc = put_sample(r, 9, i, 10000);
				if (i % 50 == 49)
					usleep(2000);
			}
			if (rc == 0)
				rc = cistern_remote_flush(r, 20000);
			struct cistern_remote_info info;
			cistern_remote_info_get(r, &info);
			cistern_remote_close(r);
			if (rc == 0) {
				base = TOTAL;
				break;
			}
			if (rc != -ECONNRESET)
				_exit(4);
			if (info.acked + info.failed != info.sent) {
				fprintf(stderr, "in doubt: sent %llu acked %llu failed %llu\n",
					(unsigned long long)info.sent,
					(unsigned long long)info.acked,
					(unsigned long long)info.failed);
				_exit(5); /* samples in doubt */
			}
			base += (uint32_t)info.acked;
			atomic_store(&sp->acked, base);
			resets++;
		}
		_exit(resets >= 1 ? 0 : 6);
	}
	/* Restart the server once it has taken a third of the samples. */
	double end = mono_now() + 30;
	while (cistern_stats_get(c, &(struct cistern_stats){0}) == 0 && mono_now() < end) {
		struct cistern_stats st;
		cistern_stats_get(c, &st);
		if (st.puts >= TOTAL / 3)
			break;
		usleep(1000);
	}
	cr_assert_eq(serve_stop(&s), 0);
	struct cistern_stats mid;
	cistern_stats_get(c, &mid);
	cr_assert_lt(mid.puts, TOTAL, "the producer finished before the restart");
	serve_start_v(&s, "rs2", args);
	serve_ready(&s);
	int st = wait_child(prod, 60);
	cr_assert_eq(st, 0, "the producer failed across the restart (status %d)", st);
	static uint32_t count[TOTAL];
	uint64_t n = drain_count(c, 9, count, TOTAL, NULL, 0);
	cr_assert_eq(n, TOTAL);
	for (uint32_t i = 0; i < TOTAL; i++)
		cr_assert_eq(count[i], 1, "sample %u is there %u times", i, count[i]);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, a_dead_remote_producer_counts_died_and_ends_under_dead_producer_done)
{
	struct cistern_config cfg = fifo(256, PAYLOAD);
	cfg.expected_producers = 2;
	cfg.flags = CISTERN_DEAD_PRODUCER_DONE;
	struct cistern *c = seg_create("rdead", cfg);
	const char *ep = ipc_endpoint("dead");
	struct serve s;
	serve_start_v(
		&s, "dead",
		(const char *const[]){"-b", ep, "-s", seg_name_of(c), "--heartbeat", "200", NULL});
	serve_ready(&s);
	pid_t prod = fork_child();
	cr_assert_geq(prod, 0);
	if (prod == 0) {
		struct cistern_remote *r = connect_retry(ep, NULL);
		if (!r || put_sample(r, 1, 0, 5000) < 0 || cistern_remote_flush(r, 5000) < 0)
			_exit(3);
		raise(SIGKILL);
	}
	waitpid(prod, NULL, 0);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	cr_assert_eq(put_sample(r, 2, 0, 5000), 0);
	cr_assert_eq(cistern_remote_producer_done(r, 10000), 0);
	cistern_remote_close(r);
	/* One done, one died: reception closes and the reader reaches end of data. */
	struct cistern_stats st;
	double end = mono_now() + 15;
	do {
		cistern_stats_get(c, &st);
		if (st.reception_closed)
			break;
		usleep(10000);
	} while (mono_now() < end);
	cr_assert(st.reception_closed, "reception still open: %u done", st.producers_done);
	/* as a local producer that died: counted in producers_died, not done */
	cr_assert_eq(st.producers_died, 1);
	cr_assert_eq(st.producers_done, 1);
	uint8_t buf[PAYLOAD];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 1000), PAYLOAD);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 1000), PAYLOAD);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 1000), CISTERN_EOD);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, a_silent_producer_is_found_dead_by_heartbeats)
{
	struct cistern_config cfg = fifo(256, PAYLOAD);
	cfg.expected_producers = 1;
	cfg.flags = CISTERN_DEAD_PRODUCER_DONE;
	struct cistern *c = seg_create("rhb", cfg);
	const char *ep = tcp_endpoint();
	struct serve s;
	serve_start_v(
		&s, "hb",
		(const char *const[]){"-b", ep, "-s", seg_name_of(c), "--heartbeat", "100", NULL});
	serve_ready(&s);
	struct shared_progress *sp = shared_alloc(sizeof(*sp));
	pid_t prod = fork_child();
	cr_assert_geq(prod, 0);
	if (prod == 0) {
		struct cistern_remote *r = connect_retry(ep, NULL);
		if (!r || put_sample(r, 1, 0, 5000) < 0 || cistern_remote_flush(r, 5000) < 0)
			_exit(3);
		atomic_store(&sp->connected, 1);
		for (;;)
			pause();
	}
	double end = mono_now() + 20;
	while (!atomic_load(&sp->connected) && mono_now() < end)
		usleep(1000);
	cr_assert(atomic_load(&sp->connected));
	/*
	 * Stopped, its process answers no heartbeat, as if its network had
	 * dropped: its connection stays open, and only the heartbeat finds it.
	 */
	kill(prod, SIGSTOP);
	cr_assert(log_wait(s.log, "lost", 15), "serve did not find the silent producer");
	struct cistern_stats st;
	end = mono_now() + 10;
	do {
		cistern_stats_get(c, &st);
		if (st.reception_closed)
			break;
		usleep(10000);
	} while (mono_now() < end);
	cr_assert(st.reception_closed, "the silent producer was not counted done");
	kill(prod, SIGKILL);
	waitpid(prod, NULL, 0);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, a_connection_gives_the_segments_schema_and_slot_size)
{
	struct cistern_config cfg = {.slot_count = 16, .schema = "obs:float32[4];action:int64[]"};
	struct cistern *c = seg_create("rsch", cfg);
	struct serve s;
	const char *ep = serve_one(&s, "schema", c);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	char want[CISTERN_SCHEMA_MAX], got[CISTERN_SCHEMA_MAX];
	ssize_t wl = cistern_schema_get(c, want, sizeof(want));
	cr_assert_gt(wl, 0);
	cr_assert_eq(cistern_remote_schema_get(r, got, sizeof(got)), wl);
	cr_assert_str_eq(got, want);
	cr_assert_eq(cistern_remote_schema_get(r, got, (size_t)wl), -ERANGE);
	struct cistern_remote_info info;
	cr_assert_eq(cistern_remote_info_get(r, &info), 0);
	cr_assert_eq(info.slot_size, 24);
	uint8_t big[25] = {0};
	cr_assert_eq(cistern_remote_put(r, big, sizeof(big), NULL, 1000), -EMSGSIZE);
	cr_assert_eq(cistern_remote_put(r, big, 24, NULL, 1000), 0);
	cr_assert_eq(cistern_remote_producer_done(r, 5000), 0);
	cr_assert_eq(cistern_remote_put(r, big, 24, NULL, 1000), -EPIPE);
	cistern_remote_close(r);
	cr_assert_eq(cistern_get(c, big, sizeof(big), NULL, 1000), 24);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, put_batch_delivers_every_sample_with_its_length_and_meta)
{
	struct cistern *r0 = seg_create("rpb0", fifo(2048, PAYLOAD));
	struct cistern *r1 = seg_create("rpb1", fifo(2048, PAYLOAD));
	const char *ep = ipc_endpoint("batch");
	struct serve s;
	serve_start_v(&s, "batch",
		      (const char *const[]){"-b", ep, "-s", seg_name_of(r0), "-s", seg_name_of(r1),
					    "--window", "40", NULL});
	serve_ready(&s);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	enum { N = 1000, B = 64 };
	static uint8_t buf[B * PAYLOAD];
	size_t len[B];
	struct cistern_meta meta[B];
	uint32_t done = 0;
	while (done < N) {
		uint32_t k = N - done < B ? N - done : B;
		for (uint32_t j = 0; j < k; j++) {
			uint32_t i = done + j;
			/* lengths 1..PAYLOAD; sims 0..9 over both ranks */
			len[j] = 1 + i % PAYLOAD;
			meta[j] = (struct cistern_meta){.sim_id = i % 10, .time_step = i};
			fill_payload(buf + j * PAYLOAD, len[j], i % 10, i);
		}
		int n = cistern_remote_put_batch(r, buf, PAYLOAD, k, len, meta, 10000);
		cr_assert_gt(n, 0, "put_batch: %s", cistern_strerror(n));
		cr_assert_leq(n, 40, "%d samples sent beyond a window of 40", n);
		/* what was not sent is sent again from the front */
		done += (uint32_t)n;
	}
	cr_assert_eq(cistern_remote_flush(r, 20000), 0);
	struct cistern_remote_info info;
	cistern_remote_info_get(r, &info);
	cr_assert_eq(info.acked, N);
	cistern_remote_close(r);
	static uint32_t count[N];
	for (int rank = 0; rank < 2; rank++) {
		struct cistern *c = rank ? r1 : r0;
		uint8_t got[PAYLOAD];
		struct cistern_meta m;
		ssize_t l;
		while ((l = cistern_get(c, got, sizeof(got), &m, 300)) >= 0) {
			cr_assert_lt(m.time_step, N);
			cr_assert_eq(m.sim_id, m.time_step % 10);
			cr_assert_eq(m.sim_id % 2, (uint32_t)rank);
			cr_assert_eq((size_t)l, 1 + m.time_step % PAYLOAD);
			cr_assert(check_payload(got, (size_t)l, m.sim_id, m.time_step));
			count[m.time_step]++;
		}
	}
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(count[i], 1, "sample %u arrived %u times", i, count[i]);
	cr_assert_eq(serve_stop(&s), 0);
}

/*
 * A segment of 4 slots, read one sample at a time by a learner that pauses:
 * the server keeps finding it full and waits there for room. Every sample
 * still arrives once, whole and in order, and all are acknowledged.
 */
Test(remote, a_segment_kept_full_by_a_slow_learner_gets_every_sample_in_order)
{
	struct cistern *c = seg_create("rslow", fifo(4, PAYLOAD));
	const char *ep = ipc_endpoint("slow");
	struct serve s;
	serve_start_v(
		&s, "slow",
		(const char *const[]){"-b", ep, "-s", seg_name_of(c), "--window", "16", NULL});
	serve_ready(&s);
	enum { N = 600 };
	struct shared_progress *sp = shared_alloc(sizeof(*sp));
	pid_t prod = fork_child();
	cr_assert_geq(prod, 0);
	if (prod == 0) {
		struct cistern_remote *r = connect_retry(ep, NULL);
		if (!r)
			_exit(3);
		for (uint32_t i = 0; i < N; i++)
			if (put_sample(r, 3, i, 20000) < 0)
				_exit(4);
		if (cistern_remote_flush(r, 20000) < 0)
			_exit(5);
		struct cistern_remote_info info;
		cistern_remote_info_get(r, &info);
		atomic_store(&sp->acked, info.acked);
		cistern_remote_close(r);
		_exit(0);
	}
	uint8_t buf[PAYLOAD];
	for (uint32_t i = 0; i < N; i++) {
		struct cistern_meta m;
		ssize_t len = cistern_get(c, buf, sizeof(buf), &m, 20000);
		cr_assert_eq(len, PAYLOAD, "sample %u: %s", i, cistern_strerror((int)len));
		cr_assert_eq(m.sim_id, 3);
		cr_assert_eq(m.time_step, i, "sample %u arrived in place of %u", m.time_step, i);
		cr_assert(check_payload(buf, PAYLOAD, m.sim_id, m.time_step));
		if (i % 50 == 0)
			usleep(20000); /* the segment stays full meanwhile */
	}
	cr_assert_eq(wait_child(prod, 30), 0);
	cr_assert_eq(atomic_load(&sp->acked), N);
	ssize_t extra = cistern_get(c, buf, sizeof(buf), NULL, 200);
	cr_assert(extra == -ETIMEDOUT || extra == -EAGAIN, "a sample beyond the %d sent", N);
	cr_assert_eq(serve_stop(&s), 0);
}

/*
 * Puts of every size in one stream: small ones gathered into shared
 * messages, those above the gathering limit (16 KiB) sent by themselves
 * between them, and empty ones. Every sample arrives once, whole, in the
 * order it was put.
 */
Test(remote, gathered_puts_keep_their_order_among_puts_sent_alone)
{
	enum { N = 600, BIG = 20000 };
	struct cistern *c = seg_create("rgath", fifo(1024, BIG));
	struct serve s;
	const char *ep = serve_one(&s, "gather", c);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	static const size_t sizes[] = {0, 1, 64, 700, BIG, 16384, 5, 4096};
	static uint8_t buf[BIG], got[BIG], want[BIG];
	for (uint32_t i = 0; i < N; i++) {
		size_t len = sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
		fill_payload(buf, len, 7, i);
		struct cistern_meta m = {.sim_id = 7, .time_step = i};
		int rc = cistern_remote_put(r, buf, len, &m, 10000);
		cr_assert_eq(rc, 0, "put %u: %s", i, cistern_strerror(rc));
	}
	cr_assert_eq(cistern_remote_flush(r, 20000), 0);
	struct cistern_remote_info info;
	cistern_remote_info_get(r, &info);
	cr_assert_eq(info.acked, N);
	cistern_remote_close(r);
	for (uint32_t i = 0; i < N; i++) {
		struct cistern_meta m;
		ssize_t l = cistern_get(c, got, sizeof(got), &m, 1000);
		cr_assert_geq(l, 0, "sample %u: %s", i, cistern_strerror((int)l));
		size_t len = sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
		cr_assert_eq(m.time_step, i, "sample %u came as number %u", i, m.time_step);
		cr_assert_eq((size_t)l, len);
		fill_payload(want, len, 7, i);
		cr_assert(memcmp(got, want, len) == 0, "sample %u damaged", i);
	}
	cr_assert_eq(serve_stop(&s), 0);
}

/*
 * With a linger of 1 s, a put right after another is gathered and not sent
 * at once; the connection's own thread sends it once the linger ran out,
 * although the producer makes no further call. (Were the test stalled for a
 * linger between the two puts, the second would leave alone, at once.)
 */
Test(remote, a_gathered_put_leaves_after_its_linger_without_another_call)
{
	struct cistern *c = seg_create("rling", fifo(16, PAYLOAD));
	struct serve s;
	const char *ep = serve_one(&s, "linger", c);
	struct cistern_remote_opts o = {.size = sizeof(o), .linger_us = 1000 * 1000};
	struct cistern_remote *r = connect_retry(ep, &o);
	cr_assert_not_null(r);
	/* an idle connection: the first put leaves at once, the second waits */
	cr_assert_eq(put_sample(r, 1, 0, 1000), 0);
	cr_assert_eq(put_sample(r, 1, 1, 1000), 0);
	double t_put = mono_now();
	uint8_t got[PAYLOAD];
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, got, sizeof(got), &m, 5000), PAYLOAD);
	cr_assert_eq(m.time_step, 0);
	cr_assert_eq(cistern_get(c, got, sizeof(got), &m, 5000), PAYLOAD,
		     "the gathered put never left");
	double waited = mono_now() - t_put;
	cr_assert_eq(m.time_step, 1);
	cr_assert(check_payload(got, PAYLOAD, 1, 1));
	cr_assert_geq(waited, 0.5, "the second put left after %.3f s, before its linger", waited);
	cistern_remote_close(r);
	cr_assert_eq(serve_stop(&s), 0);
}

/* Closing sends what the connection gathered before it says goodbye. */
Test(remote, close_sends_the_gathered_puts_first)
{
	struct cistern *c = seg_create("rclose", fifo(16, PAYLOAD));
	struct serve s;
	const char *ep = serve_one(&s, "close", c);
	/* a linger far beyond the test: only close can send them */
	struct cistern_remote_opts o = {.size = sizeof(o), .linger_us = 60 * 1000 * 1000};
	struct cistern_remote *r = connect_retry(ep, &o);
	cr_assert_not_null(r);
	for (uint32_t i = 0; i < 5; i++)
		cr_assert_eq(put_sample(r, 2, i, 1000), 0);
	cr_assert_eq(cistern_remote_close(r), 0);
	for (uint32_t i = 0; i < 5; i++) {
		uint8_t got[PAYLOAD];
		struct cistern_meta m;
		cr_assert_eq(cistern_get(c, got, sizeof(got), &m, 5000), PAYLOAD, "sample %u lost",
			     i);
		cr_assert_eq(m.time_step, i);
		cr_assert(check_payload(got, PAYLOAD, 2, i));
	}
	cr_assert_eq(serve_stop(&s), 0);
}

/* The bits of `sigs` set in the SigBlk mask of this process's thread named `name`; -1 if none. */
static long long thread_blocked(const char *name, unsigned long long sigs)
{
	char path[320], buf[4096];
	DIR *d = opendir("/proc/self/task");
	cr_assert_not_null(d);
	long long found = -1;
	struct dirent *e;
	while (found < 0 && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		slurp_file(path, buf, sizeof(buf));
		if (strncmp(buf, name, strlen(name)) != 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		slurp_file(path, buf, sizeof(buf));
		const char *p = strstr(buf, "SigBlk:");
		if (p)
			found = (long long)(strtoull(p + 7, NULL, 16) & sigs);
	}
	closedir(d);
	return found;
}

/*
 * The connection's own thread blocks signals, so that a program's handlers
 * run on the program's threads, and it is gone once the connection is closed.
 */
Test(remote, the_connections_thread_blocks_signals_and_ends_with_it)
{
	struct cistern *c = seg_create("rsig", fifo(16, PAYLOAD));
	struct serve s;
	const char *ep = serve_one(&s, "sig", c);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	unsigned long long sigs = 1ull << (SIGINT - 1) | 1ull << (SIGTERM - 1) |
				  1ull << (SIGUSR1 - 1) | 1ull << (SIGCHLD - 1);
	cr_assert_eq(thread_blocked("cistern-flush", sigs), (long long)sigs);
	cistern_remote_close(r);
	cr_assert_eq(thread_blocked("cistern-flush", sigs), -1,
		     "the thread outlived its connection");
	cr_assert_eq(serve_stop(&s), 0);
}

/* ---------------------------------------------------------------------- */
/* Hostile peers: raw ZeroMQ sockets that speak the wire protocol (or not). */

struct raw {
	void *ctx, *sock;
};

/* A DEALER, to connect, that does not reconnect once dropped. */
static void raw_open(struct raw *r)
{
	r->ctx = zmq_ctx_new();
	cr_assert_not_null(r->ctx);
	r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
	cr_assert_not_null(r->sock);
	int zero = 0, never = -1;
	zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(r->sock, ZMQ_SNDHWM, &zero, sizeof(zero));
	zmq_setsockopt(r->sock, ZMQ_RECONNECT_IVL, &never, sizeof(never));
}

static void raw_connect(struct raw *r, const char *ep)
{
	cr_assert_eq(zmq_connect(r->sock, ep), 0, "connect %s: %s", ep, zmq_strerror(zmq_errno()));
}

static void raw_close(struct raw *r)
{
	zmq_close(r->sock);
	zmq_ctx_term(r->ctx);
}

/* Send a header (bytes 2-3 set to `zero`) and a payload in one frame. */
static void raw_send(struct raw *r, const struct cistern__wire *w, uint16_t zero, const void *pay,
		     size_t len)
{
	zmq_msg_t m;
	cr_assert_eq(zmq_msg_init_size(&m, CISTERN__WIRE_HDR + len), 0);
	unsigned char *d = zmq_msg_data(&m);
	cistern__wire_encode(w, d);
	d[2] = (unsigned char)zero;
	d[3] = (unsigned char)(zero >> 8);
	if (len)
		memcpy(d + CISTERN__WIRE_HDR, pay, len);
	cr_assert_geq(zmq_msg_send(&m, r->sock, 0), 0);
}

static void raw_put(struct raw *r, uint8_t version, uint16_t zero, uint64_t seq)
{
	uint8_t buf[PAYLOAD];
	fill_payload(buf, sizeof(buf), 1, (uint32_t)seq);
	struct cistern__wire w = {.kind = CISTERN__W_PUT,
				  .version = version,
				  .seq = seq,
				  .sim_id = 1,
				  .time_step = (uint32_t)seq};
	raw_send(r, &w, zero, buf, sizeof(buf));
}

/* The next message's header, waiting up to ms; 0 if none came. */
static int raw_recv(struct raw *r, struct cistern__wire *w, int ms)
{
	zmq_pollitem_t it = {.socket = r->sock, .events = ZMQ_POLLIN};
	if (zmq_poll(&it, 1, ms) <= 0)
		return 0;
	unsigned char hdr[CISTERN__WIRE_HDR];
	int n = zmq_recv(r->sock, hdr, sizeof(hdr), 0);
	int64_t more = 0;
	size_t ml = sizeof(more);
	while (zmq_getsockopt(r->sock, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
		char skip[64];
		(void)zmq_recv(r->sock, skip, sizeof(skip), 0);
	}
	cr_assert_geq(n, CISTERN__WIRE_HDR);
	cr_assert_eq(cistern__wire_decode(hdr, CISTERN__WIRE_HDR, w), 0);
	return 1;
}

/* Wait for a message of this kind (others are skipped); 0 if none came in ms. */
static int raw_expect(struct raw *r, uint8_t kind, struct cistern__wire *w, int ms)
{
	double end = mono_now() + ms / 1000.0;
	while (mono_now() < end)
		if (raw_recv(r, w, 50) && w->kind == kind)
			return 1;
	return 0;
}

/* HELLO with a window wish, and its WELCOME. */
static void raw_hello(struct raw *r, const char *ep, uint32_t window)
{
	raw_open(r);
	raw_connect(r, ep);
	struct cistern__wire w = {.kind = CISTERN__W_HELLO,
				  .version = CISTERN_REMOTE_PROTOCOL,
				  .a = window,
				  .seq = 42};
	raw_send(r, &w, 0, NULL, 0);
	cr_assert(raw_expect(r, CISTERN__W_WELCOME, &w, 20000), "no WELCOME");
}

/* Samples the segment holds (FIFO): those of time_step > after counted in *later. */
static uint64_t read_all(struct cistern *c, uint32_t after, uint64_t *later)
{
	uint8_t buf[PAYLOAD];
	struct cistern_meta m;
	uint64_t n = 0;
	*later = 0;
	while (cistern_get(c, buf, sizeof(buf), &m, 300) >= 0) {
		n++;
		*later += m.time_step > after;
	}
	return n;
}

/*
 * PUTs 1-100 to a segment of 64 slots (36 wait in serve's queue), then a
 * frame too short for a header, then PUTs 101-150 numbered right: serve
 * drops the producer at the bad frame and puts none of what followed.
 */
/*
 * A FIFO segment "r<tag>" served by `cistern serve`, and a raw producer
 * that said HELLO to it with a window of `window`: the segment.
 */
static struct cistern *raw_producer_of(const char *tag, uint32_t window, struct serve *s,
				       struct raw *r)
{
	char seg_tag[32];
	snprintf(seg_tag, sizeof(seg_tag), "r%s", tag);
	struct cistern *c = seg_create(seg_tag, fifo(64, PAYLOAD));
	raw_hello(r, serve_one(s, tag, c), window);
	return c;
}

/* The raw producer's end: the socket closed, serve stopped cleanly. */
static void raw_producer_end(struct serve *s, struct raw *r)
{
	raw_close(r);
	cr_assert_eq(serve_stop(s), 0);
}

/*
 * A raw PUT of `version` with reserved bytes `zero`: the producer is told
 * (an ERROR frame), nothing is put, and serve's log says `why`.
 */
static void put_is_refused(const char *tag, uint8_t version, uint16_t zero, const char *why)
{
	struct serve s;
	struct raw r;
	struct cistern *c = raw_producer_of(tag, 16, &s, &r);
	raw_put(&r, version, zero, 1);
	struct cistern__wire w;
	cr_assert(raw_expect(&r, CISTERN__W_ERROR, &w, 10000), "a PUT (%s) was not refused", why);
	uint64_t later;
	cr_assert_eq(read_all(c, 0, &later), 0, "a PUT (%s) was put", why);
	cr_assert(log_wait(s.log, why, 5), "serve did not log \"%s\"", why);
	raw_producer_end(&s, &r);
}

/* A producer of window 16 at the wire level sends w `times` times: serve logs `line`. */
static void sent_message_is_logged(const char *tag, const struct cistern__wire *w, int times,
				   const char *line)
{
	struct serve s;
	struct raw r;
	raw_producer_of(tag, 16, &s, &r);
	for (int i = 0; i < times; i++)
		raw_send(&r, w, 0, NULL, 0);
	cr_assert(log_wait(s.log, line, 10), "serve did not log \"%s\"", line);
	raw_producer_end(&s, &r);
}

Test(remote, a_dropped_producer_has_nothing_more_put)
{
	struct serve s;
	struct raw r;
	struct cistern *c = raw_producer_of("drop", 128, &s, &r);
	for (uint64_t i = 1; i <= 100; i++)
		raw_put(&r, CISTERN_REMOTE_PROTOCOL, 0, i);
	cr_assert_eq(zmq_send(r.sock, "", 0, 0), 0);
	usleep(100000);
	for (uint64_t i = 101; i <= 150; i++)
		raw_put(&r, CISTERN_REMOTE_PROTOCOL, 0, i);
	usleep(300000); /* serve has read what followed the bad frame */
	uint64_t later;
	uint64_t n = read_all(c, 100, &later);
	cr_assert_eq(later, 0, "%llu samples put after the producer was dropped",
		     (unsigned long long)later);
	cr_assert_eq(n, 100, "%llu of the 100 samples sent before it put", (unsigned long long)n);
	struct cistern__wire w;
	cr_assert(raw_expect(&r, CISTERN__W_ERROR, &w, 10000), "the producer was not told");
	cr_assert_eq(w.a, EPROTO);
	raw_producer_end(&s, &r);
}

Test(remote, a_put_of_another_protocol_version_is_refused)
{
	put_is_refused("ver", 9, 0, "protocol version 9");
}

Test(remote, a_put_with_non_zero_reserved_bytes_is_refused)
{
	put_is_refused("rsv", CISTERN_REMOTE_PROTOCOL, 0x0100, "non-zero reserved bytes");
}

Test(remote, a_batch_of_no_samples_is_named_as_such)
{
	struct cistern__wire w = {
		.kind = CISTERN__W_PUTS, .version = CISTERN_REMOTE_PROTOCOL, .a = 0, .seq = 1};
	sent_message_is_logged("zero", &w, 1, "dropped: a batch of no samples");
}

Test(remote, a_put_after_done_is_named_as_such)
{
	struct serve s;
	struct raw r;
	struct cistern *c = raw_producer_of("after", 16, &s, &r);
	raw_put(&r, CISTERN_REMOTE_PROTOCOL, 0, 1);
	struct cistern__wire w = {
		.kind = CISTERN__W_DONE, .version = CISTERN_REMOTE_PROTOCOL, .seq = 1};
	raw_send(&r, &w, 0, NULL, 0);
	raw_put(&r, CISTERN_REMOTE_PROTOCOL, 0, 2);
	cr_assert(log_wait(s.log, "dropped: a sample after its DONE", 10), "not named as such");
	uint64_t later;
	cr_assert_eq(read_all(c, 0, &later), 1);
	raw_producer_end(&s, &r);
}

static long status_kib(pid_t pid, const char *field)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	slurp_file(path, buf, sizeof(buf));
	const char *p = strstr(buf, field);
	return p ? strtol(p + strlen(field), NULL, 10) : -1;
}

/*
 * A peer that never said HELLO sends a frame of 100 MB: ZeroMQ refuses it
 * from its announced size (ZMQ_MAXMSGSIZE) and drops the connection, and
 * serve's peak resident memory does not grow by the frame.
 */
Test(remote, a_100_mb_frame_before_hello_is_refused_without_being_stored)
{
	enum { BIG = 100 << 20 };
	struct cistern *c = seg_create("rbig", fifo(64, PAYLOAD));
	struct serve s;
	const char *ep = serve_one(&s, "big", c);
	long before = status_kib(s.pid, "VmHWM:");
	cr_assert_gt(before, 0);
	struct raw r;
	raw_open(&r);
	char mon[64];
	snprintf(mon, sizeof(mon), "inproc://test-raw-mon");
	cr_assert_eq(zmq_socket_monitor(r.sock, mon, ZMQ_EVENT_DISCONNECTED), 0);
	void *m = zmq_socket(r.ctx, ZMQ_PAIR);
	cr_assert_eq(zmq_connect(m, mon), 0);
	raw_connect(&r, ep);
	void *big = calloc(1, BIG);
	cr_assert_not_null(big);
	cr_assert_eq(zmq_send(r.sock, big, BIG, 0), BIG);
	free(big);
	zmq_pollitem_t it = {.socket = m, .events = ZMQ_POLLIN};
	cr_assert_eq(zmq_poll(&it, 1, 20000), 1, "serve kept the connection of a 100 MB frame");
	long after = status_kib(s.pid, "VmHWM:");
	cr_assert_lt(after - before, 16 * 1024, "serve's peak memory grew by %ld KiB",
		     after - before);
	int zero = 0;
	zmq_setsockopt(m, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_close(m);
	raw_close(&r);
	cr_assert_eq(serve_stop(&s), 0);
}

/* Write all of buf to a blocking socket; false if it failed or stalled (SO_SNDTIMEO). */
static bool send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/*
 * A peer that speaks ZMTP 3.0 by hand: connected to a tcp:// or ipc://
 * endpoint, it sent a DEALER's handshake (NULL mechanism) and never reads.
 * A send that stalls for 10 s fails (SO_SNDTIMEO).
 */
static int zmtp_open(const char *ep)
{
	int fd;
	if (strncmp(ep, "tcp://", 6) == 0) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_geq(fd, 0);
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_port = htons((uint16_t)atoi(strrchr(ep, ':') + 1)),
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s",
			     strerror(errno));
	} else {
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		cr_assert_geq(fd, 0);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", ep + 6);
		cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s",
			     strerror(errno));
	}
	struct timeval tv = {.tv_sec = 10};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	/*
	 * Signature, version 3.0, mechanism NULL, not as server: in three
	 * steps, each after the server's answer to the one before (its
	 * signature, then the rest of its greeting), as libzmq 4.3 fails a
	 * handshake whose greeting came in one read.
	 */
	unsigned char greeting[64] = {
		0xff, [9] = 0x7f, [10] = 3, [11] = 0, [12] = 'N', 'U', 'L', 'L'};
	static const unsigned char ready[] = {0x04, 28,  5,   'R', 'E', 'A', 'D', 'Y', 11,  'S',
					      'o',  'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e',
					      0,    0,   0,   6,   'D', 'E', 'A', 'L', 'E', 'R'};
	unsigned char theirs[64];
	cr_assert(send_all(fd, greeting, 10), "greeting not sent: %s", strerror(errno));
	cr_assert_eq(recv(fd, theirs, 10, MSG_WAITALL), 10, "no signature from serve");
	cr_assert(send_all(fd, greeting + 10, 1), "greeting not sent: %s", strerror(errno));
	cr_assert_eq(recv(fd, theirs + 10, 54, MSG_WAITALL), 54, "no greeting from serve");
	cr_assert(send_all(fd, greeting + 11, sizeof(greeting) - 11) &&
			  send_all(fd, ready, sizeof(ready)),
		  "handshake not sent: %s", strerror(errno));
	return fd;
}

/* One message of one frame, as ZMTP frames it: false if the send failed. */
static bool zmtp_send(int fd, const void *data, size_t len)
{
	unsigned char head[9];
	size_t hl = 2;
	if (len < 256) {
		head[0] = 0x00;
		head[1] = (unsigned char)len;
	} else {
		head[0] = 0x02;
		for (int i = 0; i < 8; i++)
			head[1 + i] = (unsigned char)((uint64_t)len >> (56 - 8 * i));
		hl = 9;
	}
	return send_all(fd, head, hl) && send_all(fd, data, len);
}

/* HELLO with a window wish, its WELCOME left unread. */
static void zmtp_hello(int fd, uint32_t window)
{
	unsigned char hdr[CISTERN__WIRE_HDR];
	struct cistern__wire w = {.kind = CISTERN__W_HELLO,
				  .version = CISTERN_REMOTE_PROTOCOL,
				  .a = window,
				  .seq = 7};
	cistern__wire_encode(&w, hdr);
	cr_assert(zmtp_send(fd, hdr, sizeof(hdr)));
}

#define FLOOD_BYTES (UINT64_C(1) << 30)

/*
 * Messages of 64 KiB as fast as the connection takes them, FLOOD_BYTES in
 * all: the errno of the send that failed (0 if all went), bytes sent in *sent.
 */
static int zmtp_flood(int fd, uint64_t *sent)
{
	static unsigned char frame[64 << 10];
	*sent = 0;
	while (*sent < FLOOD_BYTES) {
		if (!zmtp_send(fd, frame, sizeof(frame)))
			return errno;
		*sent += sizeof(frame);
	}
	return 0;
}

/*
 * Flood serve s on fd until it cuts the connection off; its peak memory
 * (before it was `before` KiB) grew by less than 64 MiB. Then close fd and
 * stop serve cleanly.
 */
static void flood_is_cut_off(struct serve *s, int fd, long before)
{
	uint64_t sent;
	int err = zmtp_flood(fd, &sent);
	cr_assert(err == EPIPE || err == ECONNRESET,
		  "the connection was not cut: %llu bytes sent, then %s", (unsigned long long)sent,
		  err ? strerror(err) : "no error");
	long after = status_kib(s->pid, "VmHWM:");
	cr_assert_lt(after - before, 64 * 1024, "serve's peak memory grew by %ld KiB",
		     after - before);
	close(fd);
	cr_assert_eq(serve_stop(s), 0);
}

/*
 * Small messages with a ZMTP PING after each, sent as fast as the
 * connection to 127.0.0.1:port takes them, then a reset (SO_LINGER 0)
 * while they wait to be read. With a finite ZMQ_RCVHWM, libzmq 4.3 pauses
 * such a connection's input; the reset marks it broken, and a PING decoded
 * from what it had buffered then makes libzmq write its PONG to the broken
 * connection and abort (stream_engine_base.cpp, "!_io_error"), whether the
 * server's own heartbeats are on or off.
 */
static void zmtp_flood_then_reset(uint16_t port)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", port);
	int fd = zmtp_open(ep);
	struct timeval tv = {.tv_sec = 2};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	static const unsigned char msg_ping[] = {
		0x00, 16,  'x', 'x',  'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x',
		'x',  'x', 'x', 0x04, 10,  4,   'P', 'I', 'N', 'G', 0,   0,   'c', 't', 'x'};
	static unsigned char chunk[400 * sizeof(msg_ping)];
	for (size_t i = 0; i < 400; i++)
		memcpy(chunk + i * sizeof(msg_ping), msg_ping, sizeof(msg_ping));
	bool ok = true;
	for (int i = 0; ok && i < 50; i++)
		ok = send_all(fd, chunk, sizeof(chunk));
	usleep(200 * 1000); /* heartbeats fall due meanwhile */
	struct linger reset = {.l_onoff = 1, .l_linger = 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
	close(fd);
}

/*
 * The reason serve's receive queue has no high-water mark: peers that flood
 * it with PINGs between their messages and reset while their messages wait,
 * one after another with serve's heartbeats due, do not end serve, and a
 * producer still gets its sample in after them.
 */
Test(remote, peers_that_flood_ping_and_reset_do_not_end_serve)
{
	struct cistern *c = seg_create("rreset", fifo(64, PAYLOAD));
	const char *ep = tcp_endpoint();
	uint16_t port = (uint16_t)atoi(strrchr(ep, ':') + 1);
	struct serve s;
	serve_start_v(
		&s, "reset",
		(const char *const[]){"-b", ep, "-s", seg_name_of(c), "--heartbeat", "20", NULL});
	serve_ready(&s);
	for (int i = 0; i < 20; i++) {
		zmtp_flood_then_reset(port);
		cr_assert_eq(waitpid(s.pid, NULL, WNOHANG), 0, "serve ended after peer %d: %s", i,
			     s.log);
	}
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	one_sample_goes_through(&s, r, c);
}

/*
 * A producer that serve dropped (a frame too short for a header) and that
 * then tries to push 1 GiB: serve cuts its connection, so that a send
 * fails (EPIPE or ECONNRESET) long before the last byte, and serve's peak
 * memory grows by less than 64 MiB meanwhile.
 */
Test(remote, a_dropped_producer_that_keeps_sending_is_cut_off)
{
	struct cistern *c = seg_create("rcut", fifo(64, PAYLOAD));
	const char *ep = tcp_endpoint();
	struct serve s;
	serve_start_v(&s, "cut", (const char *const[]){"-b", ep, "-s", seg_name_of(c), NULL});
	serve_ready(&s);
	long before = status_kib(s.pid, "VmHWM:");
	cr_assert_gt(before, 0);
	int fd = zmtp_open(ep);
	zmtp_hello(fd, 16);
	cr_assert(zmtp_send(fd, "x", 1));
	cr_assert(log_wait(s.log, "dropped: a message shorter than a header", 20), "not dropped");
	flood_is_cut_off(&s, fd, before);
}

/* The same over ipc:// from a connection that never said HELLO. */
Test(remote, a_connection_never_welcomed_that_keeps_sending_is_cut_off)
{
	struct cistern *c = seg_create("rcutipc", fifo(64, PAYLOAD));
	struct serve s;
	const char *ep = serve_one(&s, "cutipc", c);
	long before = status_kib(s.pid, "VmHWM:");
	cr_assert_gt(before, 0);
	int fd = zmtp_open(ep);
	flood_is_cut_off(&s, fd, before);
}

/*
 * While a dropped peer pushes 1 GiB at serve until it is cut, a producer
 * beside it gets every one of its 2000 samples in, once each.
 */
Test(remote, a_peer_cut_off_costs_a_producer_beside_it_nothing)
{
	enum { N = 2000 };
	struct cistern *c = seg_create("rbeside", fifo(4096, PAYLOAD));
	const char *ep = tcp_endpoint();
	struct serve s;
	serve_start_v(&s, "beside", (const char *const[]){"-b", ep, "-s", seg_name_of(c), NULL});
	serve_ready(&s);
	int fd = zmtp_open(ep);
	zmtp_hello(fd, 16);
	cr_assert(zmtp_send(fd, "x", 1));
	pid_t prod = fork_child();
	cr_assert_geq(prod, 0);
	if (prod == 0) {
		struct cistern_remote *r = connect_retry(ep, NULL);
		if (!r)
			_exit(2);
		for (uint32_t i = 0; i < N; i++)
			if (put_sample(r, 1, i, 20000) != 0)
				_exit(3);
		int rc = cistern_remote_flush(r, 20000);
		cistern_remote_close(r);
		_exit(rc == 0 ? 0 : 4);
	}
	uint64_t sent;
	int err = zmtp_flood(fd, &sent);
	cr_assert_eq(wait_child(prod, 60), 0, "the producer beside failed");
	cr_assert(err == EPIPE || err == ECONNRESET, "the peer was not cut off: %s",
		  err ? strerror(err) : "no error");
	static uint32_t count[N];
	uint64_t n = drain_count(c, 1, count, N, NULL, 0);
	cr_assert_eq(n, N, "%llu samples in the segment", (unsigned long long)n);
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(count[i], 1, "sample %u arrived %u times", i, count[i]);
	close(fd);
	cr_assert_eq(serve_stop(&s), 0);
}

/*
 * A dropped producer that sends nothing more still has its connection
 * ended, after its ERROR reached it.
 */
Test(remote, a_dropped_producer_is_told_then_disconnected)
{
	struct cistern *c = seg_create("rtold", fifo(64, PAYLOAD));
	struct serve s;
	const char *ep = serve_one(&s, "told", c);
	struct raw r;
	raw_open(&r);
	cr_assert_eq(zmq_socket_monitor(r.sock, "inproc://test-told-mon", ZMQ_EVENT_DISCONNECTED),
		     0);
	void *m = zmq_socket(r.ctx, ZMQ_PAIR);
	cr_assert_eq(zmq_connect(m, "inproc://test-told-mon"), 0);
	raw_connect(&r, ep);
	struct cistern__wire w = {
		.kind = CISTERN__W_HELLO, .version = CISTERN_REMOTE_PROTOCOL, .a = 16, .seq = 42};
	raw_send(&r, &w, 0, NULL, 0);
	cr_assert(raw_expect(&r, CISTERN__W_WELCOME, &w, 20000), "no WELCOME");
	cr_assert_eq(zmq_send(r.sock, "", 0, 0), 0);
	cr_assert(raw_expect(&r, CISTERN__W_ERROR, &w, 10000), "the producer was not told");
	cr_assert_eq(w.a, EPROTO);
	zmq_pollitem_t it = {.socket = m, .events = ZMQ_POLLIN};
	cr_assert_eq(zmq_poll(&it, 1, 30000), 1, "serve kept the connection of a dropped producer");
	int zero = 0;
	zmq_setsockopt(m, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_close(m);
	raw_close(&r);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, a_second_hello_drops_its_producer)
{
	struct cistern__wire w = {
		.kind = CISTERN__W_HELLO, .version = CISTERN_REMOTE_PROTOCOL, .a = 16, .seq = 42};
	sent_message_is_logged("hello2", &w, 1, "dropped: a second HELLO");
}

/* A DONE, then 17 more: one more repeat than its window of 16. */
Test(remote, a_producer_repeating_done_beyond_its_window_is_dropped)
{
	struct cistern__wire w = {.kind = CISTERN__W_DONE, .version = CISTERN_REMOTE_PROTOCOL};
	sent_message_is_logged("done17", &w, 1 + 16 + 1,
			       "dropped: more repeated DONE and BYE messages than its window");
}

/* Loopback given by name: bound (as 127.0.0.1), and a producer gets its sample in. */
static void serve_put_one(const char *bind, const char *connect, const char *tag)
{
	struct cistern *c = seg_create(tag, fifo(64, PAYLOAD));
	struct serve s;
	serve_start_v(&s, tag, (const char *const[]){"-b", bind, "-s", seg_name_of(c), NULL});
	serve_ready(&s);
	struct cistern_remote *r = connect_retry(connect, NULL);
	cr_assert_not_null(r, "no connection to %s", connect);
	one_sample_goes_through(&s, r, c);
}

Test(remote, serve_binds_localhost_without_keys)
{
	const char *ep = tcp_endpoint();
	char bind[64];
	snprintf(bind, sizeof(bind), "tcp://localhost:%s", strrchr(ep, ':') + 1);
	serve_put_one(bind, ep, "rlh");
}

Test(remote, serve_binds_ipv6_loopback_without_keys)
{
	const char *ep = tcp_endpoint();
	char bind[64];
	snprintf(bind, sizeof(bind), "tcp://[::1]:%s", strrchr(ep, ':') + 1);
	serve_put_one(bind, bind, "rv6");
}

Test(remote, serve_refuses_an_abstract_ipc_socket_without_keys)
{
	struct cistern *c = seg_create("rabs", fifo(64, PAYLOAD));
	char ep[128];
	snprintf(ep, sizeof(ep), "ipc://@cistern-test-%d", (int)getpid());
	struct serve s;
	serve_start_v(&s, "abs", (const char *const[]){"-b", ep, "-s", seg_name_of(c), NULL});
	cr_assert_eq(wait_child(s.pid, 20), 1);
	cr_assert(log_wait(s.log, "abstract socket", 1));
}

Test(remote, a_refused_bind_blames_the_endpoint_not_a_segment)
{
	struct cistern *c = seg_create("rnl2", fifo(64, PAYLOAD));
	struct serve s;
	serve_start_v(&s, "nl2",
		      (const char *const[]){"-b", "tcp://0.0.0.0:0", "-s", seg_name_of(c), NULL});
	cr_assert_eq(wait_child(s.pid, 20), 1);
	char buf[4096];
	slurp_file(s.log, buf, sizeof(buf));
	cr_assert_null(strstr(buf, "segment's mode"), "the log blames a segment: %s", buf);
}

/* A key pair for serve: its file, public key, and the admitted client's keys file. */
struct keys {
	char server[400], client[400], clientpub[420];
	char spub[41], cpub[41], csec[41];
};

static void make_keys(struct keys *k)
{
	snprintf(k->server, sizeof(k->server), "%s/server.key", tmpdir);
	snprintf(k->client, sizeof(k->client), "%s/client.key", tmpdir);
	snprintf(k->clientpub, sizeof(k->clientpub), "%s.pub", k->client);
	keygen(k->server);
	keygen(k->client);
	read_key(k->server, "public", k->spub);
	read_key(k->client, "public", k->cpub);
	read_key(k->client, "secret", k->csec);
}

Test(remote, serve_refuses_a_secret_key_file_others_may_read)
{
	struct cistern *c = seg_create("rmode", fifo(64, PAYLOAD));
	struct keys k;
	make_keys(&k);
	cr_assert_eq(chmod(k.server, 0644), 0);
	struct serve s;
	serve_start_v(&s, "mode",
		      (const char *const[]){"-b", tcp_endpoint(), "-s", seg_name_of(c), "--key",
					    k.server, "--client-keys", k.clientpub, NULL});
	cr_assert_eq(wait_child(s.pid, 20), 1);
	cr_assert(log_wait(s.log, "other users may read", 1));
}

Test(remote, serve_uses_a_key_file_others_may_read_when_told_to)
{
	struct cistern *c = seg_create("rmodeok", fifo(64, PAYLOAD));
	struct keys k;
	make_keys(&k);
	cr_assert_eq(chmod(k.server, 0644), 0);
	struct serve s;
	serve_start_v(&s, "modeok",
		      (const char *const[]){"-b", tcp_endpoint(), "-s", seg_name_of(c), "--key",
					    k.server, "--client-keys", k.clientpub, "--open-key-ok",
					    NULL});
	serve_ready(&s);
	cr_assert_eq(serve_stop(&s), 0);
}

static const char *serve_curve(struct serve *s, const char *tag, struct keys *k)
{
	struct cistern *c = seg_create(tag, fifo(64, PAYLOAD));
	make_keys(k);
	const char *ep = tcp_endpoint();
	serve_start_v(s, tag,
		      (const char *const[]){"-b", ep, "-s", seg_name_of(c), "--key", k->server,
					    "--client-keys", k->clientpub, NULL});
	serve_ready(s);
	return ep;
}

Test(remote, a_plaintext_client_refused_by_a_curve_server_is_logged)
{
	struct serve s;
	struct keys k;
	const char *ep = serve_curve(&s, "rplain", &k);
	struct cistern_remote_opts plain = {.size = sizeof(plain), .connect_timeout_ms = 1000};
	struct cistern_remote *r = NULL;
	cr_assert_eq(cistern_remote_connect(ep, &plain, &r), -ETIMEDOUT);
	cr_assert(log_wait(s.log, "refused a client from 127.0.0.1:", 10), "not logged");
	cr_assert_eq(serve_stop(&s), 0);
	/*
	 * libzmq reports the mismatch of mechanisms as such, or as a handshake
	 * that did not complete when the client hangs up first: either is a
	 * reason given.
	 */
	static char buf[1 << 16];
	slurp_file(s.log, buf, sizeof(buf));
	cr_assert(strstr(buf, "another security mechanism") ||
			  strstr(buf, "its handshake did not complete"),
		  "no reason given:\n%s", buf);
}

Test(remote, a_client_with_a_wrong_server_key_is_refused_and_logged)
{
	struct serve s;
	struct keys k;
	const char *ep = serve_curve(&s, "rwrong", &k);
	char other[41], othersec[41];
	cr_assert_eq(cistern_remote_keygen(other, othersec), 0);
	struct cistern_remote_opts o = {.size = sizeof(o),
					.server_key = other,
					.public_key = k.cpub,
					.secret_key = k.csec,
					.connect_timeout_ms = 1000};
	struct cistern_remote *r = NULL;
	cr_assert_eq(cistern_remote_connect(ep, &o, &r), -ETIMEDOUT);
	cr_assert(log_wait(s.log, "refused a client from 127.0.0.1:", 10), "not logged");
	cr_assert(log_wait(s.log, "CurveZMQ handshake failed", 1), "no reason given");
	cr_assert_eq(serve_stop(&s), 0);
}

static int count_lines(const char *path, const char *what)
{
	static char buf[1 << 16];
	slurp_file(path, buf, sizeof(buf));
	int n = 0;
	for (const char *p = buf; (p = strstr(p, what)); p++)
		n++;
	return n;
}

/* 50 clients with keys not admitted: a few lines, then one that counts the rest. */
Test(remote, refused_clients_are_logged_at_a_bounded_rate)
{
	enum { CLIENTS = 50 };
	struct serve s;
	struct keys k;
	const char *ep = serve_curve(&s, "rflood", &k);
	static struct raw r[CLIENTS];
	for (int i = 0; i < CLIENTS; i++) {
		char pub[41], sec[41];
		cr_assert_eq(zmq_curve_keypair(pub, sec), 0);
		raw_open(&r[i]);
		zmq_setsockopt(r[i].sock, ZMQ_CURVE_SERVERKEY, k.spub, 40);
		zmq_setsockopt(r[i].sock, ZMQ_CURVE_PUBLICKEY, pub, 40);
		zmq_setsockopt(r[i].sock, ZMQ_CURVE_SECRETKEY, sec, 40);
		raw_connect(&r[i], ep);
	}
	/* every refusal is counted; the count is in serve's last line */
	for (int i = 0; i < CLIENTS; i++)
		raw_close(&r[i]);
	double end = mono_now() + 20;
	while (count_lines(s.log, "refused a client") < 5 && mono_now() < end)
		usleep(10000);
	usleep(500000);
	cr_assert_eq(serve_stop(&s), 0);
	int lines = count_lines(s.log, "refused a client");
	cr_assert_eq(lines, 5, "%d refusals logged one by one", lines);
	cr_assert(log_wait(s.log, "more clients refused in the last", 1), "the rest not counted");
}

/*
 * 20 stops of a serve that a producer keeps busy on a SimPairedReservoir
 * segment, the producer connecting again to each new serve: every stop
 * ends with a clean exit, none hangs.
 */
Test(remote, serve_stops_cleanly_under_load_every_time)
{
	enum { STOPS = 20 };
	struct cistern_config cfg = {.policy = CISTERN_SIM_PAIRED_RESERVOIR,
				     .slot_count = 256,
				     .slot_size = PAYLOAD,
				     .watermark = 4,
				     .sweep_size = 8,
				     .nb_time_steps = 1 << 16};
	struct cistern *c = seg_create("rstops", cfg);
	const char *ep = ipc_endpoint("stops");
	struct shared_progress *sp = shared_alloc(sizeof(*sp));
	pid_t prod = fork_child();
	cr_assert_geq(prod, 0);
	if (prod == 0) {
		struct cistern_remote_opts o = {.size = sizeof(o), .connect_timeout_ms = 200};
		uint32_t t = 0;
		while (!atomic_load(&sp->connected)) {
			struct cistern_remote *r = NULL;
			if (cistern_remote_connect(ep, &o, &r) < 0) {
				usleep(5000);
				continue;
			}
			while (put_sample(r, t % 8, (t / 8) % (1 << 16), 1000) == 0)
				t++;
			cistern_remote_close(r);
		}
		_exit(0);
	}
	/* A learner reads pairs all along, so that the reservoir takes every put. */
	pid_t learner = fork_child();
	cr_assert_geq(learner, 0);
	if (learner == 0) {
		struct cistern *h;
		if (cistern_attach(seg_name_of(c), &h) < 0)
			_exit(3);
		uint8_t x[2][PAYLOAD];
		void *bufs[2] = {x[0], x[1]};
		size_t len[2];
		while (!atomic_load(&sp->connected))
			(void)cistern_get_pair(h, bufs, PAYLOAD, len, NULL, 100);
		cistern_detach(h);
		_exit(0);
	}
	for (int i = 0; i < STOPS; i++) {
		struct cistern_stats st;
		cistern_stats_get(c, &st);
		uint64_t before = st.puts;
		struct serve s;
		serve_start_v(&s, "stops",
			      (const char *const[]){"-b", ep, "-s", seg_name_of(c),
						    "--drain-timeout", "200", NULL});
		serve_ready(&s);
		double end = mono_now() + 20;
		do {
			usleep(2000);
			cistern_stats_get(c, &st);
		} while (st.puts < before + 50 && mono_now() < end);
		cr_assert_geq(st.puts, before + 50, "stop %d: the producer put nothing", i);
		kill(s.pid, SIGTERM);
		int rc = wait_child(s.pid, 15);
		cr_assert_eq(rc, 0, "stop %d: serve %s", i,
			     rc < 0 ? "did not exit within 15 s of SIGTERM" : "failed");
	}
	atomic_store(&sp->connected, 1);
	cr_assert_eq(wait_child(prod, 20), 0);
	cr_assert_eq(wait_child(learner, 20), 0);
}

/*
 * A serve waiting at stop for room that will not come (its drain timeout a
 * minute) ends at once on a second SIGTERM, as documented.
 */
Test(remote, a_second_signal_ends_a_stopping_serve_at_once)
{
	struct cistern *c = seg_create("rsig2", fifo(4, PAYLOAD));
	const char *ep = ipc_endpoint("sig2");
	struct serve s;
	serve_start_v(&s, "sig2",
		      (const char *const[]){"-b", ep, "-s", seg_name_of(c), "--window", "8",
					    "--drain-timeout", "60000", NULL});
	serve_ready(&s);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	uint32_t i = 0;
	while (put_sample(r, 0, i, 200) == 0)
		i++;
	cr_assert_eq(i, 4 + 8, "%u samples sent to a segment of 4, window 8", i);
	kill(s.pid, SIGTERM);
	cr_assert(log_wait(s.log, "stopping: finishing", 20), "serve did not start stopping");
	kill(s.pid, SIGTERM);
	cr_assert_eq(wait_child(s.pid, 15), 1, "serve did not end on a second SIGTERM");
	cr_assert(log_wait(s.log, "second signal", 1));
	cistern_remote_close(r);
}

/*
 * A connection never welcomed that sends 1000 PUTs gets one ERROR, not
 * one per message: a peer that never reads cannot grow serve's outgoing
 * queue.
 */
Test(remote, a_connection_never_welcomed_is_answered_once)
{
	struct cistern *c = seg_create("ronce", fifo(64, PAYLOAD));
	struct serve s;
	const char *ep = serve_one(&s, "once", c);
	struct raw r;
	raw_open(&r);
	raw_connect(&r, ep);
	for (uint64_t i = 1; i <= 1000; i++)
		raw_put(&r, CISTERN_REMOTE_PROTOCOL, 0, i);
	struct cistern__wire w;
	cr_assert(raw_expect(&r, CISTERN__W_ERROR, &w, 10000), "no ERROR");
	cr_assert_eq(w.a, ECONNRESET);
	int more = 0;
	while (raw_recv(&r, &w, 500))
		more++;
	cr_assert_eq(more, 0, "%d more answers to a connection never welcomed", more);
	uint64_t later;
	cr_assert_eq(read_all(c, 0, &later), 0);
	raw_close(&r);
	cr_assert_eq(serve_stop(&s), 0);
}

/*
 * `cistern serve ARGS...` under valgrind's leak check, with strdup() of `key`
 * failing (tests/fail_strdup.c preloaded): its exit status, 99 if memory leaked.
 * Valgrind's realloc always moves the block, so an array left unstored leaks.
 */
static int serve_leak_check(const char *key, const char *const *args)
{
	/* A sanitizer's runtime replaces strdup() and cannot run under valgrind. */
	if (CISTERN_SANITIZED)
		cr_skip_test("valgrind and tests/fail_strdup.c need a build without sanitizers");
	char log[320];
	snprintf(log, sizeof(log), "%s/leak.log", tmpdir);
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(100);
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 2);
		setenv("LD_PRELOAD", FAIL_STRDUP_SO, 1);
		setenv("CISTERN_FAIL_STRDUP", key, 1);
		char *argv[40] = {"valgrind",
				  "-q",
				  "--leak-check=full",
				  "--errors-for-leak-kinds=definite",
				  "--error-exitcode=99",
				  (char *)CISTERN_BIN,
				  "serve"};
		for (int i = 0; args[i] && i < 32; i++)
			argv[i + 7] = (char *)(uintptr_t)args[i];
		execvp("valgrind", argv);
		_exit(127);
	}
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st));
	cr_assert_neq(WEXITSTATUS(st), 127, "valgrind could not be run");
	char buf[1 << 14];
	slurp_file(log, buf, sizeof(buf));
	cr_assert(WEXITSTATUS(st) != 99, "serve leaked:\n%s", buf);
	cr_assert(strstr(buf, "memory"), "serve did not say it ran out of memory:\n%s", buf);
	return WEXITSTATUS(st);
}

#define LEAK_KEY "0123456789abcdefghij0123456789abcdefghij"

Test(remote, a_client_key_that_cannot_be_copied_leaks_nothing)
{
	cr_assert_eq(
		serve_leak_check(LEAK_KEY, (const char *const[]){"--client-key", LEAK_KEY, NULL}),
		1);
}

Test(remote, a_key_file_key_that_cannot_be_copied_leaks_nothing)
{
	char path[320];
	snprintf(path, sizeof(path), "%s/clients.keys", tmpdir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "public %s\n", LEAK_KEY);
	fclose(f);
	cr_assert_eq(serve_leak_check(LEAK_KEY, (const char *const[]){"--client-keys", path, NULL}),
		     1);
}

/* ---- end-of-episode marks and priorities (protocol 3) -------------------- */

#define END CISTERN_META_END_OF_EPISODE

/* A SimPairedReservoir of one sim and 6 steps: where end-of-episode marks are kept. */
static struct cistern *episodes(const char *tag)
{
	struct cistern_config cfg = {.policy = CISTERN_SIM_PAIRED_RESERVOIR,
				     .slot_count = 16,
				     .slot_size = PAYLOAD,
				     .watermark = 1,
				     .sweep_size = 1,
				     .nb_time_steps = 6};
	return seg_create(tag, cfg);
}

/*
 * Draw 300 windows of two steps from c: the flags each step came back with,
 * or-ed into flags[step] (6 steps), and how often each step headed a window.
 */
static void draw_windows(struct cistern *c, uint32_t flags[6], uint32_t heads[6])
{
	for (int k = 0; k < 300; k++) {
		struct cistern_sample w[2];
		int rc = cistern_acquire_window(c, w, 2, 1, 1000);
		cr_assert_eq(rc, 0, "window: %s", cistern_strerror(rc));
		heads[w[0].meta.time_step]++;
		for (int i = 0; i < 2; i++)
			flags[w[i].meta.time_step] |= w[i].meta.flags;
		cr_assert_eq(cistern_release_window(c, w, 2), 0);
	}
}

/* Steps 0-5 of sim 0 through serve, step 2 marked, put one by one or in one batch. */
static void end_of_episode_arrives(const char *tag, bool batch)
{
	struct cistern *c = episodes(tag);
	struct serve s;
	const char *ep = serve_one(&s, tag, c);
	/* No gathering for puts: each leaves as a PUT of its own; a batch is one PUTS. */
	struct cistern_remote_opts o = {.size = sizeof(o), .linger_us = -1};
	struct cistern_remote *r = connect_retry(ep, &o);
	cr_assert_not_null(r);
	uint8_t buf[6 * PAYLOAD];
	struct cistern_meta meta[6];
	for (uint32_t t = 0; t < 6; t++) {
		fill_payload(buf + t * PAYLOAD, PAYLOAD, 0, t);
		meta[t] = (struct cistern_meta){.time_step = t, .flags = t == 2 ? END : 0};
		if (!batch)
			cr_assert_eq(
				cistern_remote_put(r, buf + t * PAYLOAD, PAYLOAD, &meta[t], 5000),
				0);
	}
	if (batch)
		cr_assert_eq(cistern_remote_put_batch(r, buf, PAYLOAD, 6, NULL, meta, 5000), 6);
	cr_assert_eq(cistern_remote_flush(r, 20000), 0);
	cistern_remote_close(r);
	uint32_t flags[6] = {0}, heads[6] = {0};
	draw_windows(c, flags, heads);
	for (uint32_t t = 0; t < 6; t++)
		cr_assert_eq(flags[t], t == 2 ? END : 0, "step %u came back with flags %u", t,
			     flags[t]);
	cr_assert_eq(heads[2], 0, "a window ran past the end of the episode");
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, an_end_of_episode_mark_put_alone_arrives_through_serve)
{
	end_of_episode_arrives("eoe1", false);
}

Test(remote, an_end_of_episode_mark_put_in_a_batch_arrives_through_serve)
{
	end_of_episode_arrives("eoeb", true);
}

/* A prioritized segment whose draws weigh priorities as they are (alpha 1, epsilon 0). */
static struct cistern *prioritized(const char *tag)
{
	struct cistern_config cfg = {.policy = CISTERN_PRIORITIZED,
				     .slot_count = 16,
				     .slot_size = PAYLOAD,
				     .watermark = 1,
				     .alpha = 1,
				     .beta = 0.5,
				     .epsilon = 0};
	return seg_create(tag, cfg);
}

/*
 * Priorities 2.5 and 7 through serve, then a sample without one: the
 * segment's total is 2.5 + 7 + 7 (the last gets the largest seen so far).
 */
static void priorities_arrive(const char *tag, int32_t linger_us)
{
	struct cistern *c = prioritized(tag);
	struct serve s;
	const char *ep = serve_one(&s, tag, c);
	struct cistern_remote_opts o = {.size = sizeof(o), .linger_us = linger_us};
	struct cistern_remote *r = connect_retry(ep, &o);
	cr_assert_not_null(r);
	uint8_t buf[PAYLOAD] = {1};
	cr_assert_eq(cistern_remote_put_prioritized(r, buf, PAYLOAD, NULL, 2.5, 5000), 0);
	cr_assert_eq(cistern_remote_put_prioritized(r, buf, PAYLOAD, NULL, 7.0, 5000), 0);
	cr_assert_eq(cistern_remote_put(r, buf, PAYLOAD, NULL, 5000), 0);
	cr_assert_eq(cistern_remote_flush(r, 20000), 0);
	cistern_remote_close(r);
	struct cistern_prio_info pi;
	cr_assert_eq(cistern_prio_info_get(c, &pi), 0);
	cr_assert_float_eq(pi.max_priority, 7.0, 1e-9);
	cr_assert_float_eq(pi.total, 16.5, 1e-9, "total %g", pi.total);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, priorities_sent_alone_arrive_in_a_prioritized_segment)
{
	priorities_arrive("prio1", -1);
}

Test(remote, priorities_gathered_into_one_message_arrive_in_a_prioritized_segment)
{
	/* A linger of 10 s: the three leave together, at the flush. */
	priorities_arrive("priog", 10 * 1000 * 1000);
}

Test(remote, a_priority_that_is_not_finite_and_non_negative_is_refused_and_not_sent)
{
	struct cistern *c = prioritized("prbad");
	struct serve s;
	const char *ep = serve_one(&s, "prbad", c);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	uint8_t buf[PAYLOAD] = {0};
	const double bad[] = {NAN, INFINITY, -1.0};
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cistern_remote_put_prioritized(r, buf, PAYLOAD, NULL, bad[i], 1000),
			     -EINVAL, "priority %g", bad[i]);
	struct cistern_remote_info info;
	cr_assert_eq(cistern_remote_info_get(r, &info), 0);
	cr_assert_eq(info.sent, 0, "a refused priority was sent");
	cistern_remote_close(r);
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, a_priority_for_a_server_without_prioritized_segments_is_refused_at_once)
{
	struct cistern *c = seg_create("prnone", fifo(16, PAYLOAD));
	struct serve s;
	const char *ep = serve_one(&s, "prnone", c);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	uint8_t buf[PAYLOAD] = {0};
	cr_assert_eq(cistern_remote_put_prioritized(r, buf, PAYLOAD, NULL, 1.0, 1000), -ENOTSUP);
	struct cistern_remote_info info;
	cr_assert_eq(cistern_remote_info_get(r, &info), 0);
	cr_assert_eq(info.sent, 0, "a refused priority was sent");
	cistern_remote_close(r);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), -EAGAIN, "something was put");
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, a_priority_routed_to_a_segment_without_priorities_fails_there)
{
	struct cistern *p0 = prioritized("prmix0");
	struct cistern *f1 = seg_create("prmix1", fifo(16, PAYLOAD));
	const char *ep = ipc_endpoint("prmix");
	struct serve s;
	serve_start_v(&s, "prmix",
		      (const char *const[]){"-b", ep, "-s", seg_name_of(p0), "-s", seg_name_of(f1),
					    NULL});
	serve_ready(&s);
	struct cistern_remote *r = connect_retry(ep, NULL);
	cr_assert_not_null(r);
	uint8_t buf[PAYLOAD] = {0};
	struct cistern_meta to0 = {.sim_id = 0}, to1 = {.sim_id = 1};
	cr_assert_eq(cistern_remote_put_prioritized(r, buf, PAYLOAD, &to0, 3.0, 5000), 0);
	cr_assert_eq(cistern_remote_put_prioritized(r, buf, PAYLOAD, &to1, 3.0, 5000), 0);
	cr_assert_eq(cistern_remote_flush(r, 20000), -ENOTSUP, "the refusal is reported");
	struct cistern_remote_info info;
	cr_assert_eq(cistern_remote_info_get(r, &info), 0);
	cr_assert_eq(info.acked, 1);
	cr_assert_eq(info.failed, 1);
	cistern_remote_close(r);
	struct cistern_prio_info pi;
	cr_assert_eq(cistern_prio_info_get(p0, &pi), 0);
	cr_assert_float_eq(pi.total, 3.0, 1e-9);
	cr_assert_eq(cistern_get(f1, buf, sizeof(buf), NULL, 0), -EAGAIN,
		     "the sample was put without its priority");
	cr_assert_eq(serve_stop(&s), 0);
}

Test(remote, a_protocol_2_producer_is_welcomed_in_version_2_and_its_puts_arrive)
{
	struct cistern *c = seg_create("rv2", fifo(16, PAYLOAD));
	struct serve s;
	const char *ep = serve_one(&s, "v2", c);
	struct raw r;
	raw_open(&r);
	raw_connect(&r, ep);
	struct cistern__wire w = {.kind = CISTERN__W_HELLO, .version = 2, .a = 16, .seq = 42};
	raw_send(&r, &w, 0, NULL, 0);
	cr_assert(raw_expect(&r, CISTERN__W_WELCOME, &w, 20000), "no WELCOME");
	cr_assert_eq(w.version, 2, "answered in version %u", w.version);
	raw_put(&r, 2, 0, 1);
	cr_assert(raw_expect(&r, CISTERN__W_ACK, &w, 20000), "no ACK");
	cr_assert_eq(w.version, 2);
	cr_assert_eq(w.seq, 1);
	uint8_t buf[PAYLOAD];
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), &m, 1000), PAYLOAD);
	cr_assert(check_payload(buf, PAYLOAD, 1, 1));
	cr_assert_eq(m.flags, 0);
	raw_producer_end(&s, &r);
}

Test(remote, a_put_with_flags_protocol_3_does_not_know_is_refused)
{
	struct serve s;
	struct raw r;
	struct cistern *c = raw_producer_of("flag", 16, &s, &r);
	uint8_t buf[PAYLOAD] = {0};
	struct cistern__wire w = {.kind = CISTERN__W_PUT,
				  .version = CISTERN_REMOTE_PROTOCOL,
				  .a = 0x100,
				  .seq = 1,
				  .sim_id = 1};
	raw_send(&r, &w, 0, buf, sizeof(buf));
	cr_assert(raw_expect(&r, CISTERN__W_ERROR, &w, 10000), "the PUT was not refused");
	uint64_t later;
	cr_assert_eq(read_all(c, 0, &later), 0, "the PUT was put");
	cr_assert(log_wait(s.log, "unknown flags", 5), "serve did not say why");
	raw_producer_end(&s, &r);
}

/*
 * A server of protocol 2, as far as a HELLO goes: a ROUTER in a child that
 * answers a HELLO of any other version with ERROR EPROTONOSUPPORT, as such a
 * server does, then stays a moment.
 */
static pid_t old_server(const char *ep)
{
	pid_t pid = fork_child();
	cr_assert_geq(pid, 0);
	if (pid)
		return pid;
	alarm(30);
	void *ctx = zmq_ctx_new();
	void *sock = zmq_socket(ctx, ZMQ_ROUTER);
	if (zmq_bind(sock, ep) < 0)
		_exit(1);
	unsigned char rid[256], hdr[CISTERN__WIRE_HDR];
	int rl = zmq_recv(sock, rid, sizeof(rid), 0);
	int hl = zmq_recv(sock, hdr, sizeof(hdr), 0);
	struct cistern__wire w;
	if (rl <= 0 || hl < CISTERN__WIRE_HDR || cistern__wire_decode(hdr, (size_t)hl, &w) < 0 ||
	    w.kind != CISTERN__W_HELLO || w.version == 2)
		_exit(2);
	struct cistern__wire err = {.kind = CISTERN__W_ERROR, .version = 2, .a = EPROTONOSUPPORT};
	cistern__wire_encode(&err, hdr);
	zmq_send(sock, rid, (size_t)rl, ZMQ_SNDMORE);
	zmq_send(sock, hdr, sizeof(hdr), 0);
	sleep(2);
	zmq_close(sock);
	zmq_ctx_term(ctx);
	_exit(0);
}

Test(remote, a_producer_against_a_protocol_2_server_is_refused_as_unsupported)
{
	const char *ep = ipc_endpoint("old");
	pid_t pid = old_server(ep);
	struct cistern_remote_opts o = {.size = sizeof(o), .connect_timeout_ms = 10000};
	struct cistern_remote *r = NULL;
	int rc = cistern_remote_connect(ep, &o, &r);
	cr_assert_eq(rc, -EPROTONOSUPPORT, "connect: %s", cistern_strerror(rc));
	cr_assert_null(r);
	cr_assert_eq(wait_child(pid, 20), 0, "the old server saw no HELLO of another version");
}
