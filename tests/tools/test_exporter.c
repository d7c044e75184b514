/* SPDX-License-Identifier: MIT */
/*
 * test_exporter.c - `cistern exporter`, run as a user would: the built binary
 * (CISTERN_BIN) serving /metrics on a loopback port of the kernel's choice,
 * scraped over real sockets; and its textfile mode.
 */
#include <arpa/inet.h>
#include <math.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/prctl.h>

#include "helpers.h"
#include <cistern/admin.h>
#include <cistern/remote.h>

#ifndef CISTERN_BIN
#error "CISTERN_BIN must name the built cistern binary"
#endif

TestSuite(exporter, .fini = seg_fini);

struct exporter {
	pid_t pid;
	int err; /* its standard error, a memfd */
	int port;
};

/* The process the test started last, to say what became of it when it does not answer. */
static struct exporter watched;

/* The exporter's standard error so far. */
static const char *err_text(const struct exporter *x)
{
	static char buf[1 << 14];
	ssize_t n = pread(x->err, buf, sizeof(buf) - 1, 0);
	buf[n < 0 ? 0 : n] = '\0';
	return buf;
}

/*
 * The number after `marker` in the process's standard error, once it says
 * it whole (digits, then something else: not a port cut short), or 0.
 */
static int number_after(const struct exporter *x, const char *marker)
{
	for (int i = 0; i < 1000; i++) {
		const char *p = strstr(err_text(x), marker);
		if (p) {
			p += strlen(marker);
			size_t digits = strspn(p, "0123456789");
			if (digits && p[digits])
				return atoi(p);
		}
		usleep(10000);
	}
	return 0;
}

/* Start the binary with argv (after its name), standard error kept, and learn its port. */
static struct exporter start_argv(const char *const *args, const char *marker)
{
	struct exporter x = {.err = memfd_create("err", MFD_CLOEXEC)};
	cr_assert_geq(x.err, 0);
	x.pid = fork();
	cr_assert_geq(x.pid, 0);
	if (x.pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
		alarm(60);
		dup2(x.err, 2);
		const char *argv[20] = {CISTERN_BIN};
		for (int i = 0; args[i] && i < 18; i++)
			argv[1 + i] = args[i];
		execv(CISTERN_BIN, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	x.port = number_after(&x, marker);
	watched = x;
	cr_assert_gt(x.port, 0, "it never said where it serves: %s", err_text(&x));
	return x;
}

/* Start `cistern exporter --listen 127.0.0.1:0 ARGS...` and learn its port. */
static struct exporter start(const char *const *args)
{
	const char *argv[16] = {"exporter", "--listen", "127.0.0.1:0"};
	for (int i = 0; args[i] && i < 12; i++)
		argv[3 + i] = args[i];
	return start_argv(argv, "serving http://127.0.0.1:");
}

/* SIGTERM, then its exit status. */
static int stop(struct exporter *x)
{
	kill(x->pid, SIGTERM);
	int st;
	cr_assert_eq(waitpid(x->pid, &st, 0), x->pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int connect_to(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s",
		     strerror(errno));
	struct timeval tv = {.tv_sec = 20};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Send `len` bytes of request and read the whole answer (the server closes). */
static const char *exchange(int port, const char *req, size_t len)
{
	static char buf[1 << 17];
	int fd = connect_to(port);
	cr_assert_eq(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
	size_t got = 0;
	ssize_t n;
	while (got < sizeof(buf) - 1 && (n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	int err = errno;
	close(fd);
	if (got == 0 && watched.pid > 0) {
		/* The failure message then says why: a closed connection, or a death. */
		int st = 0;
		pid_t w = waitpid(watched.pid, &st, WNOHANG);
		snprintf(buf, sizeof(buf), "(no answer: %s; the process %s %d; its log: %s)",
			 strerror(err), w == watched.pid ? "ended, status" : "runs, pid",
			 w == watched.pid ? st : watched.pid, err_text(&watched));
	}
	return buf;
}

static const char *get(int port, const char *path)
{
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
	return exchange(port, req, (size_t)n);
}

/* A segment of 16 slots holding `puts` samples, its handle detached. */
static const char *segment_with(const char *tag, int puts)
{
	struct cistern *c = seg_create(tag,
				       (struct cistern_config){.slot_size = 64, .slot_count = 16});
	for (int i = 0; i < puts; i++)
		cr_assert_eq(cistern_put(c, "sample", 6, NULL, 0), 0);
	const char *name = seg_name_of(c);
	cr_assert_eq(seg_detach(c), 0);
	return name;
}

static bool has_line(const char *text, const char *fmt, const char *name)
{
	char want[256];
	snprintf(want, sizeof(want), fmt, name);
	return strstr(text, want) != NULL;
}

Test(exporter, metrics_give_what_the_segment_holds)
{
	const char *name = segment_with("exp-puts", 3);
	struct exporter x = start((const char *[]){name, NULL});
	const char *body = get(x.port, "/metrics");
	cr_assert(strstr(body, "HTTP/1.1 200 OK\r\n"), "%s", body);
	cr_assert(strstr(body, "Content-Type: text/plain; version=0.0.4"), "%s", body);
	cr_assert(has_line(body, "\ncistern_puts_total{segment=\"%s\"} 3\n", name), "%s", body);
	cr_assert(has_line(body, "\ncistern_population{segment=\"%s\"} 3\n", name), "%s", body);
	cr_assert(has_line(body, "\ncistern_slots{segment=\"%s\"} 16\n", name), "%s", body);
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, each_scrape_reads_the_segment_afresh)
{
	const char *name = segment_with("exp-fresh", 1);
	struct exporter x = start((const char *[]){name, NULL});
	cr_assert(has_line(get(x.port, "/metrics"), "\ncistern_puts_total{segment=\"%s\"} 1\n",
			   name));
	struct cistern *c;
	cr_assert_eq(cistern_attach(name, &c), 0);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	cr_assert_eq(cistern_detach(c), 0);
	const char *body = get(x.port, "/metrics");
	cr_assert(has_line(body, "\ncistern_puts_total{segment=\"%s\"} 2\n", name), "%s", body);
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, scraping_neither_attaches_nor_moves_a_counter)
{
	const char *name = segment_with("exp-ro", 2);
	struct exporter x = start((const char *[]){name, NULL});
	get(x.port, "/metrics");
	get(x.port, "/metrics");
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), 0);
	struct cistern_proc_info p[4];
	cr_assert_eq(cistern_procs_get(c, p, 4), 0, "the exporter took an attachment");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.gets, 0);
	cr_assert_eq(st.population, 2);
	cistern_detach(c);
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, root_page_links_the_metrics)
{
	struct exporter x = start((const char *[]){"t-exp-none", NULL});
	const char *body = get(x.port, "/");
	cr_assert(strstr(body, "HTTP/1.1 200 OK\r\n"), "%s", body);
	cr_assert(strstr(body, "<a href=\"/metrics\">"), "%s", body);
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, other_paths_are_not_found)
{
	struct exporter x = start((const char *[]){"t-exp-none", NULL});
	cr_assert(strstr(get(x.port, "/metricsx"), "HTTP/1.1 404 "));
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, a_method_other_than_get_is_refused)
{
	struct exporter x = start((const char *[]){"t-exp-none", NULL});
	static const char req[] = "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
	const char *body = exchange(x.port, req, sizeof(req) - 1);
	cr_assert(strstr(body, "HTTP/1.1 405 "), "%s", body);
	cr_assert(strstr(body, "\r\nAllow: GET\r\n"), "%s", body);
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, an_oversized_request_is_refused_and_the_next_served)
{
	const char *name = segment_with("exp-big", 1);
	struct exporter x = start((const char *[]){name, NULL});
	size_t len = 3 * 8192;
	char *req = malloc(len);
	cr_assert_not_null(req);
	memcpy(req, "GET /metrics HTTP/1.1\r\nX-Pad: ", 30);
	memset(req + 30, 'a', len - 30);
	cr_assert(strstr(exchange(x.port, req, 8200), "HTTP/1.1 431 "));
	free(req);
	cr_assert(has_line(get(x.port, "/metrics"), "\ncistern_puts_total{segment=\"%s\"} 1\n",
			   name));
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, a_silent_client_is_dropped_and_the_next_served)
{
	const char *name = segment_with("exp-slow", 1);
	/* Dropped after one second instead of five: the drop is what is tested. */
	cr_assert_eq(setenv("CISTERN_TEST_HTTP_TIMEOUT_MS", "1000", 1), 0);
	struct exporter x = start((const char *[]){name, NULL});
	int silent = connect_to(x.port);
	cr_assert_eq(send(silent, "GET /met", 8, MSG_NOSIGNAL), 8); /* and nothing more */
	/* Served once the silent one was dropped: before, this waits behind it. */
	const char *body = get(x.port, "/metrics");
	cr_assert(has_line(body, "\ncistern_puts_total{segment=\"%s\"} 1\n", name), "%s", body);
	char buf[256];
	ssize_t n = recv(silent, buf, sizeof(buf) - 1, 0);
	buf[n < 0 ? 0 : n] = '\0';
	cr_assert(strstr(buf, "HTTP/1.1 408 "), "the silent client got: %s", buf);
	close(silent);
	cr_assert(strstr(err_text(&x), "did not send a request in time"), "%s", err_text(&x));
	cr_assert_eq(stop(&x), 0);
}

/* A segment whose object its owner cut short, as a hostile or broken one may be. */
static const char *shrunk_segment(const char *tag)
{
	const char *name = segment_with(tag, 1);
	char path[128];
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	cr_assert_eq(truncate(path, 4096), 0);
	return name;
}

Test(exporter, a_shrunk_segment_is_left_out_and_the_others_served)
{
	const char *good = segment_with("exp-good", 2);
	const char *bad = shrunk_segment("exp-shrunk");
	struct exporter x = start((const char *[]){bad, good, NULL});
	const char *body = get(x.port, "/metrics");
	cr_assert(has_line(body, "\ncistern_puts_total{segment=\"%s\"} 2\n", good), "%s", body);
	cr_assert(!has_line(body, "segment=\"%s\"", bad), "%s", body);
	cr_assert(strstr(body, "\ncistern_exporter_segments{state=\"skipped\"} 1\n"), "%s", body);
	cr_assert(has_line(err_text(&x), "leaving out segment %s: ", bad), "%s", err_text(&x));
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, a_segment_left_out_again_for_the_same_reason_is_logged_once)
{
	const char *bad = shrunk_segment("exp-once");
	struct exporter x = start((const char *[]){bad, NULL});
	get(x.port, "/metrics");
	get(x.port, "/metrics");
	const char *log = err_text(&x);
	const char *first = strstr(log, "leaving out segment");
	cr_assert_not_null(first, "%s", log);
	cr_assert_null(strstr(first + 1, "leaving out segment"), "%s", log);
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, a_foreign_object_is_left_out_and_the_others_served)
{
	const char *good = segment_with("exp-good2", 1);
	const char *foreign;
	int fd = seg_shm_object("exp-foreign", &foreign);
	char junk[8192];
	memset(junk, 0x5a, sizeof(junk));
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	struct exporter x = start((const char *[]){foreign, good, NULL});
	const char *body = get(x.port, "/metrics");
	cr_assert(has_line(body, "\ncistern_puts_total{segment=\"%s\"} 1\n", good), "%s", body);
	cr_assert(has_line(err_text(&x), "leaving out segment %s: ", foreign), "%s", err_text(&x));
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, sigterm_stops_it_with_status_zero)
{
	struct exporter x = start((const char *[]){"t-exp-none", NULL});
	cr_assert_eq(stop(&x), 0);
	cr_assert(strstr(err_text(&x), "stopping"), "%s", err_text(&x));
}

/* Run `cistern exporter ARGS...` to its end: its exit status, its stdout and stderr in err. */
static int run_cmd(const char *const *args, char *err, size_t size)
{
	int efd = memfd_create("err", MFD_CLOEXEC);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(30);
		dup2(efd, 1);
		dup2(efd, 2);
		const char *argv[16] = {CISTERN_BIN, "exporter"};
		for (int i = 0; args[i] && i < 13; i++)
			argv[2 + i] = args[i];
		execv(CISTERN_BIN, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	ssize_t n = pread(efd, err, size - 1, 0);
	err[n < 0 ? 0 : n] = '\0';
	close(efd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(exporter, a_non_loopback_address_is_refused_unless_allowed)
{
	char err[4096];
	cr_assert_eq(run_cmd((const char *[]){"--listen", "0.0.0.0:0", NULL}, err, sizeof(err)), 2);
	cr_assert(strstr(err, "not a loopback address"), "%s", err);
	cr_assert(strstr(err, "--allow-remote"), "%s", err);
}

Test(exporter, textfile_once_writes_the_metrics_by_a_rename)
{
	const char *name = segment_with("exp-text", 4);
	const char *dir = seg_dir("exp-text");
	char err[4096];
	cr_assert_eq(run_cmd((const char *[]){"--textfile", dir, "--once", name, NULL}, err,
			     sizeof(err)),
		     0, "%s", err);
	char path[256], text[1 << 16];
	snprintf(path, sizeof(path), "%s/cistern.prom", dir);
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	text[n < 0 ? 0 : n] = '\0';
	cr_assert(has_line(text, "\ncistern_puts_total{segment=\"%s\"} 4\n", name), "%s", text);
	/* Nothing but the renamed file is left in the directory. */
	DIR *d = opendir(dir);
	int files = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		files += e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."));
	closedir(d);
	cr_assert_eq(files, 1);
}

Test(exporter, serve_metrics_count_the_samples_put_and_name_the_ranks)
{
	const char *name = segment_with("exp-serve", 0);
	struct exporter x = start_argv((const char *[]){"serve", "--segment", name, "--bind",
							"tcp://127.0.0.1:0", "--metrics",
							"127.0.0.1:0", NULL},
				       "metrics at http://127.0.0.1:");
	int zport = number_after(&x, "listening on tcp://127.0.0.1:");
	cr_assert_gt(zport, 0, "%s", err_text(&x));
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", zport);
	struct cistern_remote *r;
	cr_assert_eq(cistern_remote_connect(ep, NULL, &r), 0);
	struct cistern_meta m = {.sim_id = 1};
	for (int i = 0; i < 2; i++)
		cr_assert_eq(cistern_remote_put(r, "sample", 6, &m, 10000), 0);
	cr_assert_eq(cistern_remote_flush(r, 10000), 0);
	const char *body = get(x.port, "/metrics");
	cr_assert(strstr(body, "\ncistern_serve_put_samples_total 2\n"), "%s", body);
	cr_assert(strstr(body, "\ncistern_serve_connected_producers 1\n"), "%s", body);
	cr_assert(has_line(body, "\ncistern_serve_rank_info{rank=\"0\",segment=\"%s\"} 1\n", name),
		  "%s", body);
	cistern_remote_close(r);
	cr_assert_eq(stop(&x), 0);
}

/* The unsigned number after `prefix` at the start of a line of text; -1 if none. */
static long long metric_value(const char *text, const char *prefix)
{
	char key[128];
	int n = snprintf(key, sizeof(key), "\n%s ", prefix);
	if (n < 0 || (size_t)n >= sizeof(key))
		return -1;
	const char *p = strstr(text, key);
	return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

Test(exporter, serve_metrics_count_credits_and_bytes)
{
	const char *name = segment_with("exp-credits", 0);
	struct exporter x = start_argv((const char *[]){"serve", "--segment", name, "--bind",
							"tcp://127.0.0.1:0", "--metrics",
							"127.0.0.1:0", NULL},
				       "metrics at http://127.0.0.1:");
	int zport = number_after(&x, "listening on tcp://127.0.0.1:");
	cr_assert_gt(zport, 0, "%s", err_text(&x));
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", zport);
	struct cistern_remote *r;
	cr_assert_eq(cistern_remote_connect(ep, NULL, &r), 0);
	struct cistern_remote_info info;
	cr_assert_eq(cistern_remote_info_get(r, &info), 0);
	struct cistern_meta m = {.sim_id = 1};
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cistern_remote_put(r, "sample", 6, &m, 10000), 0);
	cr_assert_eq(cistern_remote_flush(r, 10000), 0);
	const char *body = get(x.port, "/metrics");
	/* The window at hello, then one credit back for each sample acknowledged. */
	cr_assert_eq(metric_value(body, "cistern_serve_credits_granted_total"),
		     (long long)info.window + 3, "%s", body);
	cr_assert_eq(metric_value(body, "cistern_serve_credits_outstanding"),
		     (long long)info.window, "nothing in flight: %s", body);
	long long in = metric_value(body, "cistern_serve_received_bytes_total");
	long long out = metric_value(body, "cistern_serve_sent_bytes_total");
	cr_assert_geq(in, 3 * 6, "%s", body);
	cr_assert_gt(out, 0, "%s", body);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cistern_remote_put(r, "sample", 6, &m, 10000), 0);
	cr_assert_eq(cistern_remote_flush(r, 10000), 0);
	body = get(x.port, "/metrics");
	cr_assert_geq(metric_value(body, "cistern_serve_received_bytes_total"), in + 3 * 6, "%s",
		      body);
	cr_assert_gt(metric_value(body, "cistern_serve_sent_bytes_total"), out, "acks: %s", body);
	cistern_remote_close(r);
	cr_assert_eq(stop(&x), 0);
}

/* The server's log lines, on standard error for a test that fails. */
static void log_stderr(int level, const char *line, void *arg)
{
	(void)level;
	(void)arg;
	fprintf(stderr, "server: %s\n", line);
}

Test(exporter, server_stats_fill_no_more_than_the_size_the_caller_knows)
{
	const char *name = segment_with("exp-stsize", 0);
	const char *segs[] = {name};
	const char *eps[] = {"tcp://127.0.0.1:0"};
	struct cistern_server_opts o = {.size = sizeof(o),
					.endpoints = eps,
					.n_endpoints = 1,
					.segments = segs,
					.ranks = 1,
					.log = log_stderr};
	struct cistern_server *srv;
	int rc = cistern_server_create(&o, &srv);
	cr_assert_eq(rc, 0, "%s", cistern_strerror(rc));
	struct cistern_server_stats st;
	const unsigned char *b = (const unsigned char *)&st;
	/* The first version's call: nothing past its ten fields. */
	memset(&st, 0xa5, sizeof(st));
	cr_assert_eq(cistern_server_stats_get(srv, &st), 0);
	cr_assert_eq(st.producers, 0);
	for (size_t i = CISTERN_SERVER_STATS_SIZE_V1; i < sizeof(st); i++)
		cr_assert_eq(b[i], 0xa5, "byte %zu written", i);
	/* A caller built against that version, through the sized call. */
	memset(&st, 0xa5, sizeof(st));
	cr_assert_eq(cistern_server_stats_read(srv, &st, CISTERN_SERVER_STATS_SIZE_V1),
		     (int)CISTERN_SERVER_STATS_SIZE_V1);
	for (size_t i = CISTERN_SERVER_STATS_SIZE_V1; i < sizeof(st); i++)
		cr_assert_eq(b[i], 0xa5, "byte %zu written", i);
	/* Today's callers get every field; a size below the first version is refused. */
	memset(&st, 0xa5, sizeof(st));
	cr_assert_eq(cistern_server_stats_read(srv, &st, sizeof(st)), (int)sizeof(st));
	cr_assert_eq(st.bytes_in, 0);
	cr_assert_eq(st.credits_outstanding, 0);
	cr_assert_eq(cistern_server_stats_read(srv, &st, CISTERN_SERVER_STATS_SIZE_V1 - 8),
		     -EINVAL);
	cr_assert_eq(cistern_server_close(srv, 0), 0);
}

/* The double after `prefix` at the start of a line of text; -1 if none. */
static double metric_double(const char *text, const char *prefix)
{
	char key[192];
	snprintf(key, sizeof(key), "\n%s ", prefix);
	const char *p = strstr(text, key);
	return p ? strtod(p + strlen(key), NULL) : -1;
}

/* The text a `cistern exporter --textfile DIR --once NAME` run writes, into text. */
static void textfile_once(const char *name, const char *dir, char *text, size_t size)
{
	char err[4096];
	cr_assert_eq(run_cmd((const char *[]){"--textfile", dir, "--once", name, NULL}, err,
			     sizeof(err)),
		     0, "%s", err);
	char path[256];
	snprintf(path, sizeof(path), "%s/cistern.prom", dir);
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	ssize_t n = read(fd, text, size - 1);
	close(fd);
	text[n < 0 ? 0 : n] = '\0';
}

/*
 * A reservoir that spilled to its cold tier and read back from it: the
 * cold I/O families give the segment's statistics, the waits in seconds.
 */
static char cold[64];

/* The segment goes with its cold file, then the directory, whatever the test asserted. */
static void cold_fini(void)
{
	seg_fini();
	if (cold[0])
		rmdir(cold);
}

Test(exporter, metrics_give_the_cold_tiers_bytes_and_waits, .fini = cold_fini)
{
	snprintf(cold, sizeof(cold), "/var/tmp/cistern-exp-cold-XXXXXX");
	cr_assert_not_null(mkdtemp(cold), "mkdtemp: %s", strerror(errno));
	struct cistern *c = seg_create("exp-cold", (struct cistern_config){
							   .policy = CISTERN_RESERVOIR,
							   .slot_size = 4096,
							   .slot_count = 16,
							   .watermark = 1,
							   .cold_slots = 64,
							   .cold_dir = cold,
						   });
	for (int i = 0; i < 80; i++)
		cr_assert_eq(cistern_put(c, "sample", 6, NULL, 0), 0);
	for (int b = 0; b < 4; b++) {
		struct cistern_sample s[32];
		cr_assert_eq(cistern_acquire_batch(c, s, 32, 2000), 32);
		cr_assert_eq(cistern_release_batch(c, s, 32), 0);
	}
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_gt(st.cold_bytes_written, 0);
	cr_assert_gt(st.cold_bytes_read, 0);
	const char *name = seg_name_of(c);
	char text[1 << 16], key[160];
	textfile_once(name, seg_dir("exp-cold"), text, sizeof(text));
	snprintf(key, sizeof(key), "cistern_cold_bytes_written_total{segment=\"%s\"}", name);
	cr_assert_eq(metric_value(text, key), (long long)st.cold_bytes_written, "%s", text);
	snprintf(key, sizeof(key), "cistern_cold_bytes_read_total{segment=\"%s\"}", name);
	cr_assert_eq(metric_value(text, key), (long long)st.cold_bytes_read, "%s", text);
	snprintf(key, sizeof(key), "cistern_cold_write_wait_seconds_total{segment=\"%s\"}", name);
	cr_assert_float_eq(metric_double(text, key), (double)st.cold_write_wait_ns / 1e9, 1e-12,
			   "%s", text);
	snprintf(key, sizeof(key), "cistern_cold_read_wait_seconds_total{segment=\"%s\"}", name);
	cr_assert_float_eq(metric_double(text, key), (double)st.cold_read_wait_ns / 1e9, 1e-12,
			   "%s", text);
	cr_assert(strstr(text, "# TYPE cistern_cold_read_wait_seconds_total counter\n"), "%s",
		  text);
}

/*
 * A dump of 3000 samples whose progress file waits 200 ms at each update
 * (CISTERN_TEST_DUMP_STALL_MS) is seen half done through `cistern exporter
 * --dumps`, and gone from the scrape once it ends.
 */
Test(exporter, a_running_dump_shows_its_progress_and_leaves_no_series)
{
	struct cistern *c = seg_create(
		"exp-dump", (struct cistern_config){.slot_size = 64, .slot_count = 4096});
	for (int i = 0; i < 3000; i++)
		cr_assert_eq(cistern_put(c, "sample", 6, NULL, 0), 0);
	const char *name = seg_name_of(c);
	char dir[] = "/tmp/cistern-exp-dumps-XXXXXX", file[96], key[128];
	cr_assert_not_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/out.dump", dir);
	struct exporter x = start((const char *[]){"--dumps", dir, name, NULL});
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(60);
		setenv("CISTERN_TEST_DUMP_STALL_MS", "200", 1);
		execl(CISTERN_BIN, CISTERN_BIN, "dump", "--quiet", "--textfile", dir, name, file,
		      (char *)NULL);
		_exit(127);
	}
	snprintf(key, sizeof(key), "cistern_dump_progress_ratio{segment=\"%s\"}", name);
	double ratio = -1;
	for (int i = 0; i < 400 && !(ratio > 0 && ratio < 1); i++) {
		ratio = metric_double(get(x.port, "/metrics"), key);
		usleep(10000);
	}
	cr_assert(ratio > 0 && ratio < 1, "no progress between 0 and 1 seen: %f", ratio);
	const char *body = get(x.port, "/metrics");
	snprintf(key, sizeof(key), "cistern_dump_samples{segment=\"%s\"}", name);
	cr_assert_eq(metric_value(body, key), 3000, "%s", body);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the dump failed");
	body = get(x.port, "/metrics");
	cr_assert(strstr(body, "# TYPE cistern_dump_progress_ratio gauge\n"), "%s", body);
	cr_assert_null(strstr(body, "cistern_dump_progress_ratio{"), "left behind: %s", body);
	cr_assert_eq(stop(&x), 0);
	unlink(file);
	cr_assert_eq(rmdir(dir), 0, "the dump left a file in %s", dir);
}

/* A reservoir of 16 slots, watermark 2, one read per put, holding 3 samples. */
static struct cistern *limited(const char *tag)
{
	struct cistern *c = seg_create(tag, (struct cistern_config){.policy = CISTERN_RESERVOIR,
								    .slot_size = 64,
								    .slot_count = 16,
								    .watermark = 2,
								    .reads_per_put = 1});
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cistern_put(c, "sample", 6, NULL, 0), 0);
	return c;
}

Test(exporter, rate_get_gives_the_reads_that_may_start)
{
	struct cistern *c = limited("exp-rate");
	struct cistern *ro;
	cr_assert_eq(cistern_open_readonly(seg_name_of(c), &ro), 0);
	struct cistern_rate rate;
	cr_assert_eq(cistern_rate_get(ro, &rate), 0);
	/* One put past the watermark at one read each, plus a read's slack of 1. */
	cr_assert_eq(rate.puts, 3);
	cr_assert_eq(rate.reads, 0);
	cr_assert_float_eq(rate.read_budget, 2.0, 1e-9);
	char buf[64];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 6);
	cr_assert_eq(cistern_rate_get(ro, &rate), 0);
	cr_assert_eq(rate.reads, 1);
	cr_assert_float_eq(rate.read_budget, 1.0, 1e-9);
	cistern_detach(ro);
}

Test(exporter, rate_get_is_enodata_without_a_limiter)
{
	struct cistern *c = seg_create("exp-norate", (struct cistern_config){.slot_count = 4});
	struct cistern_rate rate;
	cr_assert_eq(cistern_rate_get(c, &rate), -ENODATA);
}

Test(exporter, metrics_give_the_rate_limiters_budget)
{
	struct cistern *c = limited("exp-ratem");
	const char *name = seg_name_of(c);
	cr_assert_eq(seg_detach(c), 0);
	struct exporter x = start((const char *[]){name, NULL});
	const char *body = get(x.port, "/metrics");
	cr_assert(has_line(body, "\ncistern_rate_limit_read_budget{segment=\"%s\"} 2\n", name),
		  "%s", body);
	cr_assert(has_line(body, "\ncistern_reads_per_put{segment=\"%s\"} 1\n", name), "%s", body);
	cr_assert_eq(stop(&x), 0);
}

/*
 * A prioritized segment of 16 slots (alpha 0.7, beta 0.5 set to 0.75 since,
 * epsilon 0.1) holding 4 samples of priorities 1 to 4: one drawn batch's
 * priorities sent back, one update of an id that names no slot (stale). Its
 * totals as cistern_prio_info_get() gives them after all that, in *info.
 */
static const char *prioritized_with(const char *tag, struct cistern_prio_info *info)
{
	struct cistern *c = seg_create(tag, (struct cistern_config){.policy = CISTERN_PRIORITIZED,
								    .slot_size = 64,
								    .slot_count = 16,
								    .watermark = 1,
								    .alpha = 0.7,
								    .beta = 0.5,
								    .epsilon = 0.1});
	for (int i = 1; i <= 4; i++)
		cr_assert_eq(cistern_put_prioritized(c, "sample", 6, NULL, i, 0), 0);
	char buf[3][64];
	uint64_t ids[3];
	cr_assert_eq(cistern_get_prioritized(c, buf, 64, 3, NULL, NULL, ids, NULL, 0), 3);
	const double q[3] = {0.5, 6.0, 2.5};
	cr_assert_eq(cistern_update_priorities(c, ids, q, 3), 3);
	const uint64_t stale = UINT64_MAX; /* slot 2^28 - 1: none in this segment */
	cr_assert_eq(cistern_update_priorities(c, &stale, q, 1), 0);
	cr_assert_eq(cistern_set_beta(c, 0.75), 0);
	cr_assert_eq(cistern_prio_info_get(c, info), 0);
	cr_assert_eq(info->stale_updates, 1);
	const char *name = seg_name_of(c);
	cr_assert_eq(seg_detach(c), 0);
	return name;
}

/* The value of family fam's sample for segment name in body; NAN if there is none. */
static double value_of(const char *body, const char *fam, const char *name)
{
	char want[256];
	snprintf(want, sizeof(want), "\n%s{segment=\"%s\"} ", fam, name);
	const char *p = strstr(body, want);
	if (!p)
		return NAN;
	char *end;
	double v = strtod(p + strlen(want), &end);
	return *end == '\n' ? v : NAN;
}

/* How many samples of the cistern_priority_ families body gives segment name. */
static int priority_samples_of(const char *body, const char *name)
{
	char label[128];
	snprintf(label, sizeof(label), "{segment=\"%s\"} ", name);
	int k = 0;
	for (const char *p = body; (p = strstr(p, "\ncistern_priority_")); p++) {
		const char *brace = strchr(p, '{'), *eol = strchr(p + 1, '\n');
		k += brace && (!eol || brace < eol) && strncmp(brace, label, strlen(label)) == 0;
	}
	return k;
}

Test(exporter, metrics_give_a_prioritized_segments_parameters_and_totals)
{
	struct cistern_prio_info info;
	const char *name = prioritized_with("exp-prio", &info);
	struct exporter x = start((const char *[]){name, NULL});
	const char *body = get(x.port, "/metrics");
	const struct {
		const char *fam;
		double want;
	} fams[] = {
		{"cistern_priority_alpha", info.alpha},
		{"cistern_priority_beta", info.beta},
		{"cistern_priority_epsilon", info.epsilon},
		{"cistern_priority_mass", info.total},
		{"cistern_priority_least", info.least},
		{"cistern_priority_max", info.max_priority},
		{"cistern_priority_updates_total", (double)info.updates},
		{"cistern_priority_stale_updates_total", (double)info.stale_updates},
		{"cistern_priority_rebuilds_total", (double)info.rebuilds},
	};
	for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
		/* The text holds each double to 17 digits: it reads back exactly. */
		cr_assert_eq(value_of(body, fams[i].fam, name), fams[i].want,
			     "%s: want %.17g in %s", fams[i].fam, fams[i].want, body);
		size_t len = strlen(fams[i].fam);
		bool counter = len > 6 && strcmp(fams[i].fam + len - 6, "_total") == 0;
		char type[128];
		snprintf(type, sizeof(type), "\n# TYPE %s %s\n", fams[i].fam,
			 counter ? "counter" : "gauge");
		cr_assert(strstr(body, type), "no %s", type);
	}
	cr_assert_eq(info.beta, 0.75);
	cr_assert_eq(info.max_priority, 6.0);
	cr_assert_eq(info.updates, 3);
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, a_segment_of_another_policy_gives_no_priority_family)
{
	struct cistern_prio_info info;
	const char *prio = prioritized_with("exp-prio-mix", &info);
	const char *fifo = segment_with("exp-noprio", 2);
	struct exporter x = start((const char *[]){prio, fifo, NULL});
	const char *body = get(x.port, "/metrics");
	cr_assert(has_line(body, "\ncistern_priority_mass{segment=\"%s\"} ", prio), "%s", body);
	cr_assert_eq(priority_samples_of(body, prio), 9, "%s", body);
	cr_assert_eq(priority_samples_of(body, fifo), 0, "%s", body);
	cr_assert_eq(stop(&x), 0);

	/* Alone, the FIFO segment brings not even the families' headers. */
	struct exporter y = start((const char *[]){fifo, NULL});
	body = get(y.port, "/metrics");
	cr_assert(has_line(body, "\ncistern_puts_total{segment=\"%s\"} 2\n", fifo), "%s", body);
	cr_assert_null(strstr(body, "cistern_priority_"), "%s", body);
	cr_assert_eq(stop(&y), 0);
}

Test(exporter, without_names_every_readable_segment_is_served)
{
	const char *a = segment_with("exp-all-a", 1);
	const char *b = segment_with("exp-all-b", 2);
	struct exporter x = start((const char *[]){NULL});
	const char *body = get(x.port, "/metrics");
	cr_assert(has_line(body, "\ncistern_puts_total{segment=\"%s\"} 1\n", a), "%s", body);
	cr_assert(has_line(body, "\ncistern_puts_total{segment=\"%s\"} 2\n", b), "%s", body);
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, a_segment_made_again_under_its_name_is_read_anew)
{
	struct cistern *c = seg_create("exp-again", (struct cistern_config){.slot_count = 8});
	const char *name = seg_name_of(c);
	struct exporter x = start((const char *[]){name, NULL});
	cr_assert(has_line(get(x.port, "/metrics"), "\ncistern_slots{segment=\"%s\"} 8\n", name));
	seg_drop(c);
	c = seg_create("exp-again", (struct cistern_config){.slot_count = 32});
	const char *body = get(x.port, "/metrics");
	cr_assert(has_line(body, "\ncistern_slots{segment=\"%s\"} 32\n", name), "%s", body);
	cr_assert_eq(stop(&x), 0);
}

Test(exporter, help_describes_the_command)
{
	char out[8192];
	cr_assert_eq(run_cmd((const char *[]){"--help", NULL}, out, sizeof(out)), 0);
	cr_assert(strstr(out, "Usage: cistern exporter"), "%s", out);
	cr_assert(strstr(out, "--textfile DIR"), "%s", out);
	cr_assert(strstr(out, "127.0.0.1:9731"), "%s", out);
}

Test(exporter, options_of_the_textfile_need_it)
{
	char err[4096];
	cr_assert_eq(run_cmd((const char *[]){"--once", NULL}, err, sizeof(err)), 2);
	cr_assert(strstr(err, "--once and --interval go with --textfile"), "%s", err);
	cr_assert_eq(
		run_cmd((const char *[]){"--textfile", "/tmp", "--listen", "127.0.0.1:0", NULL},
			err, sizeof(err)),
		2);
}

Test(exporter, textfile_mode_keeps_writing_until_sigterm)
{
	const char *name = segment_with("exp-textloop", 1);
	const char *dir = seg_dir("exp-textloop");
	char path[256];
	snprintf(path, sizeof(path), "%s/cistern.prom", dir);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(60);
		execl(CISTERN_BIN, CISTERN_BIN, "exporter", "--textfile", dir, "--interval", "0.1",
		      name, (char *)NULL);
		_exit(127);
	}
	struct stat st;
	int i = 0;
	while (stat(path, &st) < 0 && i++ < 1000)
		usleep(10000);
	cr_assert_eq(stat(path, &st), 0, "%s never appeared", path);
	/* A put shows in a later rewrite. */
	struct cistern *c;
	cr_assert_eq(cistern_attach(name, &c), 0);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	cr_assert_eq(cistern_detach(c), 0);
	char text[1 << 16], want[128];
	snprintf(want, sizeof(want), "\ncistern_puts_total{segment=\"%s\"} 2\n", name);
	bool seen = false;
	for (i = 0; i < 1000 && !seen; i++) {
		int fd = open(path, O_RDONLY);
		ssize_t n = fd < 0 ? 0 : read(fd, text, sizeof(text) - 1);
		if (fd >= 0)
			close(fd);
		text[n < 0 ? 0 : n] = '\0';
		seen = strstr(text, want) != NULL;
		if (!seen)
			usleep(10000);
	}
	cr_assert(seen, "%s", text);
	kill(pid, SIGTERM);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}

Test(exporter, a_malformed_request_is_refused_and_the_next_served)
{
	const char *name = segment_with("exp-bad-req", 1);
	struct exporter x = start((const char *[]){name, NULL});
	static const char req[] = "GET metrics\r\n\r\n";
	const char *body = exchange(x.port, req, sizeof(req) - 1);
	cr_assert(strstr(body, "HTTP/1.1 400 "), "%s", body);
	cr_assert(has_line(get(x.port, "/metrics"), "\ncistern_puts_total{segment=\"%s\"} 1\n",
			   name));
	cr_assert_eq(stop(&x), 0);
}
