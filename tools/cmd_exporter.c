/* SPDX-License-Identifier: MIT */
/*
 * cmd_exporter.c - `cistern exporter`: the figures of segments for
 * Prometheus, served over HTTP at /metrics or written for node_exporter's
 * textfile collector. Every scrape opens the segments afresh, read-only
 * (cistern_open_readonly: no attachment, no pin, no counter moves); a
 * segment that cannot be read is left out, logged once, and the others are
 * served.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "http.h"
#include "prom.h"
#include <cistern/admin.h>

#define DEFAULT_LISTEN "127.0.0.1:9731"

static const char usage[] =
	"Usage: cistern exporter [OPTION...] [NAME...]\n"
	"Serve the figures of segments to Prometheus: over HTTP at /metrics, or\n"
	"into a file for node_exporter's textfile collector. With NAMEs, those\n"
	"segments; else every segment this user may read. Each scrape reads the\n"
	"segments afresh and read-only: it never attaches, pins or moves a counter.\n"
	"A segment that cannot be read is left out (and logged once); the others\n"
	"are served. Logs go to standard error; SIGTERM or SIGINT stops it.\n"
	"\n"
	"  -l, --listen ADDR:PORT  where to serve (default " DEFAULT_LISTEN "; 9731 is\n"
	"                          in the range Prometheus keeps for exporters);\n"
	"                          ADDR is an IPv4 address, [IPv6] or localhost\n"
	"      --allow-remote      accept an ADDR other than loopback: anyone who can\n"
	"                          reach it then sees segment names and figures\n"
	"  -t, --textfile DIR      write DIR/cistern.prom instead of serving (a\n"
	"                          temporary file in DIR, then renamed over it)\n"
	"  -i, --interval SECONDS  with --textfile, rewrite it every SECONDS\n"
	"                          (default 15)\n"
	"      --once              with --textfile, write it once and exit\n"
	"  -o, --occupancy         add slot counts by state and seen counts of the\n"
	"                          samples held (a scan of every slot: its time\n"
	"                          grows with the segments' sizes)\n"
	"  -d, --dumps DIR         add the progress of the dumps running with\n"
	"                          `cistern dump --textfile DIR` (cistern_dump_*)\n"
	"  -h, --help              show this help\n"
	"\n"
	"Paths: / is a short page linking /metrics; anything else is 404. GET only;\n"
	"a request head above 8 KiB, or one not complete within 5 seconds, is refused.\n"
	"CISTERN_TEST_HTTP_TIMEOUT_MS (for tests only) sets those 5 seconds in\n"
	"milliseconds, so that a test sees a silent client dropped sooner.\n"
	"See docs/monitoring/README.md for the metrics, a Grafana dashboard and alerts.\n";

const struct command cmd_exporter;

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/*
 * "cistern exporter: " and a message, on one line of standard error, written
 * at once: a reader of the log never sees half a line (a port cut short).
 */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(line, sizeof(line), "cistern exporter: ");
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	fwrite(line, 1, (size_t)n, stderr);
}

/* A segment left out of a scrape, and why. */
struct skip {
	char name[CISTERN_NAME_MAX + 1];
	int err;
};

struct exporter {
	char **names; /* NULL: every segment */
	size_t nnames;
	bool occupancy;
	struct skip *skipped, *was_skipped; /* this scrape's, the last one's */
	size_t nskipped, nwas_skipped;
	struct known *known; /* what the last scrape learnt of its segments */
	size_t nknown;
	const char *dumps; /* --dumps DIR: running dumps' progress files, or NULL */
};

/* Most running dumps a scrape reports. */
#define DUMPS_MAX 64

/*
 * The progress of the dumps running now: each DIR/cistern-dump-*.prom that
 * `cistern dump --textfile DIR` keeps, read without following a link or
 * waiting on a FIFO, and left out unless it parses as one whole dump's.
 */
static size_t read_dumps(const char *dir, struct prom_dump *d, size_t cap)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return 0;
	size_t n = 0;
	struct dirent *e;
	while (n < cap && (e = readdir(dp)) != NULL) {
		size_t len = strlen(e->d_name);
		if (strncmp(e->d_name, "cistern-dump-", 13) != 0 || len < 18 ||
		    strcmp(e->d_name + len - 5, ".prom") != 0)
			continue;
		int fd = openat(dirfd(dp), e->d_name,
				O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct stat st;
		char text[4096];
		ssize_t got = -1;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
			got = read(fd, text, sizeof(text) - 1);
		close(fd);
		if (got <= 0 || got == (ssize_t)sizeof(text) - 1)
			continue;
		text[got] = '\0';
		if (prom_dump_parse(text, &d[n]) == 0)
			n++;
	}
	closedir(dp);
	return n;
}

/*
 * Note that segment `name` was left out; log it unless the last scrape left
 * it out for the same reason already (a scrape every few seconds would
 * otherwise repeat it for ever).
 */
static void skip(struct exporter *e, const char *name, int err, size_t cap)
{
	bool known = false;
	for (size_t i = 0; i < e->nwas_skipped; i++)
		if (strcmp(e->was_skipped[i].name, name) == 0 && e->was_skipped[i].err == err)
			known = true;
	if (!known) {
		char shown[4 * CISTERN_NAME_MAX + 1] = "?";
		FILE *f = fmemopen(shown, sizeof(shown), "w");
		if (f) {
			prom_escape_log(f, name);
			fclose(f);
		}
		say("leaving out segment %s: %s", shown, cistern_strerror(err));
	}
	if (e->nskipped < cap) {
		snprintf(e->skipped[e->nskipped].name, sizeof(e->skipped[0].name), "%s", name);
		e->skipped[e->nskipped++].err = err;
	}
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * What the exporter learnt of a shm object (device and inode) from
 * cistern_list() or from reading it: its creation time, or why it cannot
 * be read. Listing validates every object in /dev/shm, which costs more
 * than a scrape may; a scrape lists only when it meets an object it does
 * not know (a new segment, a name made again, or one left out more than
 * RELIST_S ago, which may have been mended or allowed since), and opens
 * the ones it knows directly. An object still being created is never
 * remembered: the listing says -EAGAIN at once where opening it would wait.
 */
#define RELIST_S 30.0
struct known {
	char name[CISTERN_NAME_MAX + 1];
	dev_t dev;
	ino_t ino;
	uint64_t created_ns;
	int status;      /* 0, or why it was left out */
	double learnt_s; /* when (CLOCK_MONOTONIC) */
};

/* A segment a scrape looks at: its name, and its object as lstat() saw it. */
struct candidate {
	char name[CISTERN_NAME_MAX + 1];
	struct stat st;
	int err;                   /* of lstat(), or of the listing */
	const struct known *known; /* in the exporter's cache, the same object */
};

/* The candidates of a scrape: the names given, else every cistern.NAME in /dev/shm. */
static size_t candidates(const struct exporter *e, struct candidate **out)
{
	size_t n = 0, cap = e->names ? e->nnames : 16;
	struct candidate *c = calloc(cap ? cap : 1, sizeof(*c));
	if (!c)
		return 0;
	if (e->names) {
		for (size_t i = 0; i < e->nnames; i++)
			snprintf(c[n++].name, sizeof(c->name), "%s", e->names[i]);
	} else {
		DIR *d = opendir("/dev/shm");
		struct dirent *de;
		while (d && (de = readdir(d)) != NULL) {
			if (strncmp(de->d_name, "cistern.", 8) != 0 ||
			    cistern_name_valid(de->d_name + 8) < 0)
				continue;
			if (n == cap) {
				struct candidate *m = realloc(c, 2 * cap * sizeof(*c));
				if (!m)
					break;
				c = m;
				cap *= 2;
			}
			memset(&c[n], 0, sizeof(*c));
			snprintf(c[n++].name, sizeof(c->name), "%s", de->d_name + 8);
		}
		if (d)
			closedir(d);
	}
	*out = c;
	return n;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct candidate *)a)->name, ((const struct candidate *)b)->name);
}

/* One scrape into f: the segments' families, then the exporter's own. 0 or -errno. */
static int scrape(struct exporter *e, FILE *f)
{
	double t0 = mono_s();
	struct candidate *cand = NULL;
	size_t n = candidates(e, &cand);
	if (!cand)
		return -ENOMEM;
	if (!e->names)
		qsort(cand, n, sizeof(*cand), by_name);
	/* Which objects are known: the same device and inode as when they validated. */
	bool unknown = false;
	for (size_t i = 0; i < n; i++) {
		char path[CISTERN_NAME_MAX + 32];
		snprintf(path, sizeof(path), "/dev/shm/cistern.%s", cand[i].name);
		if (lstat(path, &cand[i].st) < 0) {
			cand[i].err = errno == ENOENT ? -ENOENT : -errno;
			continue;
		}
		for (size_t k = 0; k < e->nknown && !cand[i].known; k++)
			if (strcmp(e->known[k].name, cand[i].name) == 0 &&
			    e->known[k].dev == cand[i].st.st_dev &&
			    e->known[k].ino == cand[i].st.st_ino &&
			    (e->known[k].status == 0 || t0 - e->known[k].learnt_s < RELIST_S))
				cand[i].known = &e->known[k];
		unknown |= !cand[i].known;
	}
	struct known *known = calloc(n ? n : 1, sizeof(*known));
	struct prom_seg *segs = calloc(n ? n : 1, sizeof(*segs));
	struct skip *sk = calloc(n ? n : 1, sizeof(*sk));
	if (!known || !segs || !sk) {
		free(known);
		free(segs);
		free(sk);
		free(cand);
		return -ENOMEM;
	}
	struct cistern_segment_info *list = NULL;
	int nlist = 0;
	if (unknown && (nlist = cistern_list(&list)) < 0) {
		say("cannot list the segments: %s", cistern_strerror(nlist));
		nlist = 0;
	}
	free(e->was_skipped);
	e->was_skipped = e->skipped;
	e->nwas_skipped = e->nskipped;
	e->skipped = sk;
	e->nskipped = 0;
	size_t served = 0, nknown = 0;
	for (size_t i = 0; i < n; i++) {
		struct candidate *c = &cand[i];
		uint64_t created = 0;
		double learnt = t0;
		int r = c->err;
		if (r == 0 && c->known) {
			created = c->known->created_ns;
			r = c->known->status;
			learnt = c->known->learnt_s;
		} else if (r == 0) {
			const struct cistern_segment_info *info = NULL;
			for (int j = 0; j < nlist && !info; j++)
				if (strcmp(list[j].name, c->name) == 0)
					info = &list[j];
			r = info ? info->status : -ENOENT;
			created = info ? info->created_ns : 0;
		}
		if (r == 0)
			r = prom_take(c->name, created, e->occupancy, &segs[served]);
		if (r == 0)
			served++;
		/* Gone between the directory and the look: not worth a line. */
		else if (e->names || r != -ENOENT)
			skip(e, c->name, r, n);
		if (c->err || r == -EAGAIN || r == -ENOENT)
			continue; /* nothing to remember */
		struct known *k = &known[nknown++];
		snprintf(k->name, sizeof(k->name), "%s", c->name);
		k->dev = c->st.st_dev;
		k->ino = c->st.st_ino;
		k->created_ns = created;
		k->status = r;
		k->learnt_s = r == 0 ? t0 : learnt;
	}
	free(list);
	free(cand);
	free(e->known);
	e->known = known;
	e->nknown = nknown;
	prom_write(f, segs, served);
	free(segs);
	if (e->dumps) {
		static struct prom_dump dumps[DUMPS_MAX];
		prom_dump_write(f, dumps, read_dumps(e->dumps, dumps, DUMPS_MAX));
	}
	prom_family(f, "cistern_exporter_segments", "gauge",
		    "Segments in the last scrape: served, or left out as unreadable.");
	fprintf(f, "cistern_exporter_segments{state=\"served\"} %zu\n", served);
	fprintf(f, "cistern_exporter_segments{state=\"skipped\"} %zu\n", e->nskipped);
	prom_family(f, "cistern_exporter_scrape_duration_seconds", "gauge",
		    "Time the last scrape took to read the segments.");
	fprintf(f, "cistern_exporter_scrape_duration_seconds %.9f\n", mono_s() - t0);
	return 0;
}

static const char index_page[] =
	"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>cistern exporter</title>"
	"</head>\n<body><h1>cistern exporter</h1>\n"
	"<p>Figures of the cistern segments on this machine, for Prometheus: "
	"<a href=\"/metrics\">/metrics</a>.</p>\n</body></html>\n";

static int scrape_to(FILE *f, void *arg)
{
	return scrape(arg, f);
}

static int route(const char *path, struct http_reply *rep, void *arg)
{
	return http_route_metrics(path, rep, index_page, scrape_to, arg);
}

/* Write DIR/cistern.prom: a temporary file in DIR, then renamed over it. */
static int write_textfile(struct exporter *e, const char *dir)
{
	char tmp[4096], dst[4096];
	if ((size_t)snprintf(dst, sizeof(dst), "%s/cistern.prom", dir) >= sizeof(dst) ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s/.cistern.prom.XXXXXX", dir) >= sizeof(tmp))
		return -ENAMETOOLONG;
	/* The collector reads only *.prom: the temporary name is never read half-written. */
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	FILE *f = fdopen(fd, "w");
	if (!f) {
		int err = -errno;
		close(fd);
		unlink(tmp);
		return err;
	}
	int r = fchmod(fd, 0644) < 0 ? -errno : 0;
	if (r == 0)
		r = scrape(e, f);
	if (fflush(f) != 0 && r == 0)
		r = -errno;
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (fclose(f) != 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, dst) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

/*
 * The signals that stop the exporter are blocked except while it waits:
 * ppoll() unblocks them atomically with its wait, so one that comes just
 * before a wait ends it instead of being noticed only at the next scrape.
 */
static sigset_t stop_signals, unblocked;

static void block_stop_signals(void)
{
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGTERM);
	sigaddset(&stop_signals, SIGINT);
	sigprocmask(SIG_BLOCK, &stop_signals, &unblocked);
	sigdelset(&unblocked, SIGTERM);
	sigdelset(&unblocked, SIGINT);
}

/* Sleep s seconds, or until a stop signal. */
static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	if (!stop)
		ppoll(NULL, 0, &ts, &unblocked);
}

static int textfile_loop(struct exporter *e, const char *dir, double interval, bool once)
{
	struct stat st;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		cli_error(&cmd_exporter, dir, errno ? -errno : -ENOTDIR, "cannot write there");
		return EXIT_FAIL;
	}
	if (!once)
		say("writing %s/cistern.prom every %gs", dir, interval);
	for (;;) {
		int r = write_textfile(e, dir);
		if (r < 0) {
			cli_error(&cmd_exporter, dir, r, "cannot write cistern.prom");
			if (once)
				return EXIT_FAIL;
		}
		if (once)
			return EXIT_OK;
		sleep_s(interval);
		if (stop) {
			say("stopping");
			return EXIT_OK;
		}
	}
}

static int http_loop(struct exporter *e, const char *listen_on, bool allow_remote)
{
	struct http_addr a;
	if (http_parse_addr(listen_on, &a) < 0)
		return cli_usage(&cmd_exporter,
				 "bad --listen '%s': give ADDR:PORT, such as " DEFAULT_LISTEN,
				 listen_on);
	if (!a.loopback && !allow_remote)
		return cli_usage(&cmd_exporter,
				 "--listen %s is not a loopback address: anyone who can reach it "
				 "would see the segments; add --allow-remote to mean it",
				 listen_on);
	int lfd = http_listen(&a);
	if (lfd < 0) {
		cli_error(&cmd_exporter, listen_on, lfd, "cannot listen");
		return EXIT_FAIL;
	}
	char shown[80];
	snprintf(shown, sizeof(shown), "%.*s:%d", (int)(strrchr(listen_on, ':') - listen_on),
		 listen_on, http_port(lfd));
	say("serving http://%s/metrics", shown);
	const char *timeout_env = getenv("CISTERN_TEST_HTTP_TIMEOUT_MS");
	int timeout_ms = timeout_env ? atoi(timeout_env) : 0;
	if (timeout_ms <= 0)
		timeout_ms = 5000;
	while (!stop) {
		struct pollfd p = {.fd = lfd, .events = POLLIN};
		int n = ppoll(&p, 1, NULL, &unblocked);
		if (n < 0 && errno != EINTR) {
			say("cannot wait for connections: %s", strerror(errno));
			close(lfd);
			return EXIT_FAIL;
		}
		if (n <= 0)
			continue;
		/* Unblocked during the exchange: a stop ends a slow client's wait. */
		sigprocmask(SIG_UNBLOCK, &stop_signals, NULL);
		const char *why;
		int r = http_serve_one(lfd, timeout_ms, route, e, &stop, &why);
		sigprocmask(SIG_BLOCK, &stop_signals, NULL);
		if (r < 0 && why && r != -EAGAIN)
			say("%s", why);
	}
	say("stopping");
	close(lfd);
	return EXIT_OK;
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"allow-remote", no_argument, NULL, 'R'},
		{"textfile", required_argument, NULL, 't'},
		{"interval", required_argument, NULL, 'i'},
		{"once", no_argument, NULL, '1'},
		{"occupancy", no_argument, NULL, 'o'},
		{"dumps", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *listen_on = NULL, *dir = NULL;
	bool allow_remote = false, once = false, have_interval = false;
	double interval = 15;
	struct exporter e = {0};
	int o;
	while ((o = cli_getopt(&cmd_exporter, argc, argv, "l:t:i:od:h", opts)) != -1) {
		switch (o) {
		case 'h':
			return cli_help(&cmd_exporter);
		case 'l':
			listen_on = optarg;
			break;
		case 'R':
			allow_remote = true;
			break;
		case 't':
			dir = optarg;
			break;
		case 'i': {
			char *end;
			interval = strtod(optarg, &end);
			if (*end || end == optarg || !(interval >= 0.1 && interval <= 86400))
				return cli_usage(&cmd_exporter,
						 "bad --interval '%s': give seconds, 0.1 to 86400",
						 optarg);
			have_interval = true;
			break;
		}
		case '1':
			once = true;
			break;
		case 'o':
			e.occupancy = true;
			break;
		case 'd':
			e.dumps = optarg;
			break;
		default:
			return EXIT_USAGE;
		}
	}
	if (dir && (listen_on || allow_remote))
		return cli_usage(&cmd_exporter, "--textfile excludes --listen and --allow-remote");
	if (!dir && (once || have_interval))
		return cli_usage(&cmd_exporter, "--once and --interval go with --textfile");
	for (int i = optind; i < argc; i++) {
		int r = cistern_name_valid(argv[i]);
		if (r < 0)
			return cli_bad_name(&cmd_exporter, argv[i], r);
	}
	if (optind < argc) {
		e.names = argv + optind;
		e.nnames = (size_t)(argc - optind);
	}
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: waits end at once */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	block_stop_signals();
	int status = dir ? textfile_loop(&e, dir, interval, once)
			 : http_loop(&e, listen_on ? listen_on : DEFAULT_LISTEN, allow_remote);
	free(e.skipped);
	free(e.was_skipped);
	free(e.known);
	return status;
}

const struct command cmd_exporter = {"exporter", run,
				     "serve segments' figures to Prometheus (/metrics)", usage};
