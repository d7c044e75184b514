/* SPDX-License-Identifier: MIT */
/*
 * cmd_serve.c - `cistern serve`: put what remote producers send over ZeroMQ
 * into local segments, one per learner rank (docs/REMOTE.md); and `cistern
 * keygen`: write a CurveZMQ key pair for it.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "serve_metrics.h"
#include <cistern/remote.h>

static const char usage[] =
	"Usage: cistern serve [OPTION...] --segment NAME [--segment NAME...]\n"
	"Receive samples from remote producers (cistern_remote_connect(), Python's\n"
	"cistern.connect()) over ZeroMQ and put them into the segments named, which\n"
	"must exist: the i-th --segment is rank i. A sample goes to rank sim_id mod R\n"
	"(R segments), so each simulation stays on one rank. Logs to stderr; SIGTERM\n"
	"or SIGINT stops it cleanly: samples received are put (waiting up to\n"
	"--drain-timeout for room), acknowledged, producers told, segments detached\n"
	"with what they hold. See docs/REMOTE.md.\n"
	"\n"
	"  -b, --bind ENDPOINT     tcp://HOST:PORT or ipc://PATH to listen on; may be\n"
	"                          repeated (default tcp://127.0.0.1:5555). Without keys\n"
	"                          only loopback is allowed (127.x.x.x, [::1], localhost,\n"
	"                          bound as 127.0.0.1, ipc://PATH); any other address,\n"
	"                          and an abstract socket ipc://@NAME (which has no file\n"
	"                          permissions), needs --key and client keys\n"
	"  -s, --segment NAME      the next rank's segment (repeat once per rank)\n"
	"      --window N          samples in flight per producer (default: as many as\n"
	"                          64 MiB of slots hold, 16 to 4096): what\n"
	"                          a producer may send before its samples are in a segment\n"
	"      --route-map FILE    lines 'SIM_ID RANK': those sim_ids go to that rank,\n"
	"                          the others to sim_id mod R\n"
	"      --key FILE          the server's CurveZMQ key pair (from cistern keygen);\n"
	"                          refused if other users may read or write FILE\n"
	"      --open-key-ok       use a --key FILE that other users may read\n"
	"      --secret-key Z85    the server's secret key itself (other users may see a\n"
	"                          command line: prefer --key)\n"
	"      --client-key Z85    admit the client with this public key (repeatable)\n"
	"      --client-keys FILE  admit the public keys of FILE, one a line (a line may\n"
	"                          be 'public Z85' as keygen writes it; a line starting\n"
	"                          with # is a comment)\n"
	"      --heartbeat MS      ZeroMQ heartbeat interval (default 1000); a producer\n"
	"                          silent 5 intervals is taken for dead\n"
	"      --drain-timeout MS  at stop, how long to wait for room (default "
	"5000)\n"
	"      --metrics ADDR:PORT serve the server's figures to Prometheus at\n"
	"                          http://ADDR:PORT/metrics (loopback only, unless\n"
	"                          --metrics-allow-remote); see docs/monitoring/\n"
	"      --metrics-allow-remote\n"
	"                          accept a --metrics ADDR other than loopback\n" CLI_ANY_OWNER_HELP
	"  -h, --help              show this help\n";

static const char keygen_usage[] =
	"Usage: cistern keygen FILE\n"
	"Write a new CurveZMQ key pair for cistern serve and remote producers: FILE\n"
	"(mode 0600) holds the lines 'public Z85' and 'secret Z85', FILE.pub only the\n"
	"public line. Give FILE to `cistern serve --key`, FILE.pub's key to the other\n"
	"side. An existing FILE is not replaced.\n"
	"\n"
	"  -h, --help   show this help\n";

const struct command cmd_serve, cmd_keygen;

static struct cistern_server *g_server;
/* Set by the first signal; also read by serve_metrics_run(), which runs in slices. */
static volatile sig_atomic_t g_stop_asked;

/* End at once, from a signal handler: a line (write(2) is safe there), then _exit(). */
static void end_now(const char *why)
{
	static const char head[] = "cistern serve: ";
	(void)!write(2, head, sizeof(head) - 1);
	(void)!write(2, why, strlen(why));
	_exit(EXIT_FAIL);
}

/*
 * The first SIGTERM or SIGINT asks for a clean stop; a second one ends the
 * process at once, as SIGKILL would (docs/REMOTE.md says what that loses).
 */
static void on_signal(int sig)
{
	(void)sig;
	if (g_stop_asked)
		end_now("stopped by a second signal: samples not yet put are lost\n");
	g_stop_asked = 1;
	cistern_server_stop(g_server);
}

/* The clean stop outlived its bound (the drain timeout and STOP_SLACK_S). */
static void on_alarm(int sig)
{
	(void)sig;
	end_now("error: the clean stop took too long: ending without it\n");
}

/* Seconds a clean stop may take beyond the drain timeout before it is cut short. */
#define STOP_SLACK_S 10

/* Whether the server logged an error: then "cannot start" adds nothing to it. */
static bool g_logged_error;

static void log_line(int level, const char *line, void *arg)
{
	(void)arg;
	if (level >= 2)
		g_logged_error = true;
	char when[32];
	time_t t = time(NULL);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	fprintf(stderr, "cistern serve: %s %s%s\n", when,
		level >= 2   ? "error: "
		: level == 1 ? "warning: "
			     : "",
		esc(line));
}

struct route_entry {
	uint32_t sim_id, rank;
};
struct route_map {
	struct route_entry *e;
	size_t n;
};

static int cmp_route(const void *a, const void *b)
{
	uint32_t x = ((const struct route_entry *)a)->sim_id;
	uint32_t y = ((const struct route_entry *)b)->sim_id;
	return x < y ? -1 : x > y;
}

static uint32_t route_by_map(const struct cistern_meta *meta, uint32_t ranks, void *arg)
{
	const struct route_map *m = arg;
	struct route_entry key = {.sim_id = meta->sim_id};
	const struct route_entry *e = bsearch(&key, m->e, m->n, sizeof(*m->e), cmp_route);
	return e ? e->rank : meta->sim_id % ranks;
}

static int load_route_map(const char *path, uint32_t ranks, struct route_map *m)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		cli_error(&cmd_serve, path, -errno, NULL);
		return -1;
	}
	char line[256];
	size_t cap = 0, lineno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char a[64], b[64], extra[2];
		int n = sscanf(line, "%63s %63s %1s", a, b, extra);
		if (n <= 0)
			continue;
		uint32_t sim, rank;
		if (n != 2 || parse_u32(a, &sim) < 0 || parse_u32(b, &rank) < 0 || rank >= ranks) {
			cli_error(&cmd_serve, path, 0,
				  "line %zu: expected 'SIM_ID RANK' with RANK below %u", lineno,
				  ranks);
			fclose(f);
			return -1;
		}
		if (m->n == cap) {
			cap = cap ? 2 * cap : 64;
			struct route_entry *ne = realloc(m->e, cap * sizeof(*ne));
			if (!ne) {
				fclose(f);
				return -1;
			}
			m->e = ne;
		}
		m->e[m->n++] = (struct route_entry){sim, rank};
	}
	fclose(f);
	qsort(m->e, m->n, sizeof(*m->e), cmp_route);
	return 0;
}

/*
 * Read the keys of a file: "public Z85", "secret Z85" or a bare Z85 line
 * each. A file read for its secret key must be the user's alone (as ssh
 * wants of its keys), unless `open_ok`.
 */
static int read_keys(const char *path, char ***pub, size_t *npub, char *secret, bool open_ok)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		cli_error(&cmd_serve, path, -errno, NULL);
		return -1;
	}
	struct stat st;
	if (secret && !open_ok && fstat(fileno(f), &st) == 0 && (st.st_mode & 077)) {
		cli_error(&cmd_serve, path, 0,
			  "holds a secret key but other users may read or write it (mode %04o): "
			  "chmod 600 it, or pass --open-key-ok",
			  (unsigned)(st.st_mode & 07777));
		fclose(f);
		return -1;
	}
	char line[256];
	while (fgets(line, sizeof(line), f)) {
		char a[64], b[64];
		int n = sscanf(line, "%63s %63s", a, b);
		/* '#' is a Z85 digit: only a line that starts with it is a comment */
		if (n <= 0 || a[0] == '#')
			continue;
		const char *key = n == 2 ? b : a;
		bool is_secret = n == 2 && strcmp(a, "secret") == 0;
		if (strlen(key) != CISTERN_KEY_LEN ||
		    (n == 2 && !is_secret && strcmp(a, "public"))) {
			cli_error(&cmd_serve, path, 0, "not a key line: %s", a);
			fclose(f);
			return -1;
		}
		if (is_secret) {
			if (secret)
				memcpy(secret, key, CISTERN_KEY_LEN + 1);
		} else if (pub) {
			/* The new array is kept even if the copy fails: the old one is gone. */
			char **np = realloc(*pub, (*npub + 1) * sizeof(*np));
			if (np)
				*pub = np;
			if (!np || !(np[*npub] = strdup(key))) {
				cli_error(&cmd_serve, path, -ENOMEM, NULL);
				fclose(f);
				return -1;
			}
			(*npub)++;
		}
	}
	fclose(f);
	return 0;
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"bind", required_argument, NULL, 'b'},
		{"segment", required_argument, NULL, 's'},
		{"window", required_argument, NULL, 'w'},
		{"route-map", required_argument, NULL, 'r'},
		{"key", required_argument, NULL, 'k'},
		{"open-key-ok", no_argument, NULL, 'O'},
		{"secret-key", required_argument, NULL, 'S'},
		{"client-key", required_argument, NULL, 'c'},
		{"client-keys", required_argument, NULL, 'C'},
		{"heartbeat", required_argument, NULL, 'H'},
		{"drain-timeout", required_argument, NULL, 'd'},
		{"any-owner", no_argument, NULL, 'A'},
		{"metrics", required_argument, NULL, 'M'},
		{"metrics-allow-remote", no_argument, NULL, 'm'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char **binds = calloc((size_t)argc, sizeof(*binds));
	const char **segs = calloc((size_t)argc, sizeof(*segs));
	char **client_keys = NULL;
	size_t nbinds = 0, nsegs = 0, nclient = 0;
	uint32_t window = 0;
	const char *route_path = NULL, *key_path = NULL;
	bool open_key_ok = false;
	char secret[CISTERN_KEY_LEN + 1] = "";
	int heartbeat = 0, drain = 5000;
	bool any_owner = false;
	const char *metrics = NULL;
	bool metrics_remote = false;
	int metrics_fd = -1;
	struct route_map map = {0};
	int status = EXIT_USAGE;
	if (!binds || !segs) {
		status = EXIT_FAIL;
		goto out;
	}
	int o;
	while ((o = cli_getopt(&cmd_serve, argc, argv, "b:s:h", opts)) != -1) {
		switch (o) {
		case 'h':
			status = cli_help(&cmd_serve);
			goto out;
		case 'b':
			binds[nbinds++] = optarg;
			break;
		case 's': {
			int r = cistern_name_valid(optarg);
			if (r < 0) {
				status = cli_bad_name(&cmd_serve, optarg, r);
				goto out;
			}
			segs[nsegs++] = optarg;
			break;
		}
		case 'w':
			if (parse_u32(optarg, &window) < 0 || window == 0) {
				status = cli_usage(&cmd_serve, "bad --window: %s", optarg);
				goto out;
			}
			break;
		case 'r':
			route_path = optarg;
			break;
		case 'k':
			key_path = optarg;
			break;
		case 'O':
			open_key_ok = true;
			break;
		case 'S':
			snprintf(secret, sizeof(secret), "%s", optarg);
			break;
		case 'c': {
			/* The new array is kept even if the copy fails: the old one is gone. */
			char **np = realloc(client_keys, (nclient + 1) * sizeof(*np));
			if (np)
				client_keys = np;
			if (!np || !(np[nclient] = strdup(optarg))) {
				cli_error(&cmd_serve, NULL, -ENOMEM, NULL);
				status = EXIT_FAIL;
				goto out;
			}
			nclient++;
			break;
		}
		case 'C':
			if (read_keys(optarg, &client_keys, &nclient, NULL, false) < 0) {
				status = EXIT_FAIL;
				goto out;
			}
			break;
		case 'H':
		case 'd': {
			int v;
			if (parse_timeout(optarg, &v) < 0 || v < 0) {
				status = cli_usage(&cmd_serve, "bad %s: %s",
						   o == 'H' ? "--heartbeat" : "--drain-timeout",
						   optarg);
				goto out;
			}
			*(o == 'H' ? &heartbeat : &drain) = v;
			break;
		}
		case 'A':
			any_owner = true;
			break;
		case 'M':
			metrics = optarg;
			break;
		case 'm':
			metrics_remote = true;
			break;
		default:
			goto out;
		}
	}
	if (optind < argc) {
		status = cli_usage(&cmd_serve, "unexpected argument: %s", argv[optind]);
		goto out;
	}
	if (nsegs == 0) {
		status = cli_usage(&cmd_serve, "missing --segment NAME");
		goto out;
	}
	if (nbinds == 0)
		binds[nbinds++] = "tcp://127.0.0.1:5555";
	status = EXIT_FAIL;
	if (route_path && load_route_map(route_path, (uint32_t)nsegs, &map) < 0)
		goto out;
	if (key_path) {
		if (read_keys(key_path, NULL, NULL, secret, open_key_ok) < 0)
			goto out;
		if (!secret[0]) {
			cli_error(&cmd_serve, key_path, 0, "holds no 'secret' line");
			goto out;
		}
	}
	if (nclient && !secret[0]) {
		status = cli_usage(&cmd_serve,
				   "client keys need the server's --key or --secret-key");
		goto out;
	}
	if (metrics && (metrics_fd = serve_metrics_listen(metrics, metrics_remote)) < 0) {
		status = metrics_fd == -EINVAL ? EXIT_USAGE : EXIT_FAIL;
		goto out;
	}
	struct cistern_server_opts so = {
		.size = sizeof(so),
		.endpoints = binds,
		.n_endpoints = nbinds,
		.segments = segs,
		.ranks = (uint32_t)nsegs,
		.window = window,
		.route = route_path ? route_by_map : NULL,
		.route_arg = &map,
		.log = log_line,
		.secret_key = secret[0] ? secret : NULL,
		.client_keys = (const char *const *)client_keys,
		.n_client_keys = nclient,
		.heartbeat_ivl_ms = heartbeat,
		.attach_flags = any_owner ? CISTERN_ATTACH_ANY_OWNER : 0,
	};
	/*
	 * ZeroMQ receives every large sample into a buffer of its size. glibc
	 * maps buffers that large afresh and unmaps them when freed, so each
	 * received sample would fault on every page of its buffer. Kept in the
	 * heap instead (up to the largest threshold glibc allows), a freed
	 * buffer serves the next sample. What the heap keeps is bounded by the
	 * windows in flight.
	 */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	struct cistern_server *s;
	int r = cistern_server_create(&so, &s);
	if (r < 0) {
		if (g_logged_error)
			cli_error(&cmd_serve, NULL, 0, "cannot start (the error above says why)");
		else
			cli_error(&cmd_serve, NULL, r, "cannot start");
		goto out;
	}
	g_server = s;
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	r = metrics_fd >= 0 ? serve_metrics_run(s, metrics_fd, segs, nsegs, &g_stop_asked)
			    : cistern_server_run(s, -1);
	/*
	 * Stopping is bounded: the drain timeout, then a second for the
	 * last acknowledgements and BYEs to leave, and a margin.
	 */
	struct sigaction al = {.sa_handler = on_alarm};
	sigemptyset(&al.sa_mask);
	sigaction(SIGALRM, &al, NULL);
	alarm((unsigned)(drain / 1000) + STOP_SLACK_S);
	log_line(0, r < 0 ? "stopping after an error" : "stopping: finishing the puts under way",
		 NULL);
	int rc = cistern_server_close(s, drain);
	alarm(0);
	g_server = NULL;
	(void)rc; /* samples failed at stop were logged and their producers told */
	status = r < 0 ? EXIT_FAIL : EXIT_OK;
out:
	if (metrics_fd >= 0)
		close(metrics_fd);
	for (size_t i = 0; i < nclient; i++)
		free(client_keys[i]);
	free(client_keys);
	free(map.e);
	free(binds);
	free(segs);
	return status;
}

static int write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	size_t len = strlen(text);
	ssize_t n = write(fd, text, len);
	int err = n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
	if (close(fd) < 0 && err == 0)
		err = -errno;
	return err;
}

static int run_keygen(int argc, char **argv)
{
	static const struct option opts[] = {
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int o;
	while ((o = cli_getopt(&cmd_keygen, argc, argv, "h", opts)) != -1) {
		if (o == 'h')
			return cli_help(&cmd_keygen);
		return EXIT_USAGE;
	}
	if (optind + 1 != argc)
		return cli_usage(&cmd_keygen, optind >= argc ? "missing FILE" : "one FILE only");
	const char *path = argv[optind];
	char pub[CISTERN_KEY_LEN + 1], sec[CISTERN_KEY_LEN + 1];
	int r = cistern_remote_keygen(pub, sec);
	if (r < 0) {
		cli_error(&cmd_keygen, NULL, r, "cannot make a key pair");
		return EXIT_FAIL;
	}
	char text[256], pubtext[128], pubpath[4096];
	snprintf(text, sizeof(text),
		 "# cistern CurveZMQ key pair: keep secret\npublic %s\nsecret %s\n", pub, sec);
	snprintf(pubtext, sizeof(pubtext), "public %s\n", pub);
	if ((size_t)snprintf(pubpath, sizeof(pubpath), "%s.pub", path) >= sizeof(pubpath)) {
		cli_error(&cmd_keygen, path, -ENAMETOOLONG, NULL);
		return EXIT_FAIL;
	}
	r = write_file(path, text, 0600);
	if (r < 0) {
		cli_error(&cmd_keygen, path, r, NULL);
		return EXIT_FAIL;
	}
	r = write_file(pubpath, pubtext, 0644);
	if (r < 0) {
		cli_error(&cmd_keygen, pubpath, r, NULL);
		unlink(path);
		return EXIT_FAIL;
	}
	printf("%s\n", pub);
	return EXIT_OK;
}

const struct command cmd_serve = {"serve", run, "put samples from remote producers into segments",
				  usage};
const struct command cmd_keygen = {
	"keygen", run_keygen, "write a CurveZMQ key pair for serve and its clients", keygen_usage};
