/* SPDX-License-Identifier: MIT */
/* cmd_dump.c - `cistern dump`: snapshot a segment to a file, live or not. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "prom.h"
#include <cistern/admin.h>

static const char usage[] =
	"Usage: cistern dump [--quiet] [--textfile DIR] NAME FILE\n"
	"Write a snapshot of segment NAME to FILE: its parameters, statistics and every\n"
	"sample it holds, with metadata and seen counts, checksummed. The segment may\n"
	"be in use: the dump maps it read-only, never blocks producers or readers, and\n"
	"saves only whole samples (one that changes while copied is left out). A\n"
	"segment someone else could shrink (another user's, or one others may write) is\n"
	"read with pread() instead of mapped: shrunk during the dump, it fails. FILE is\n"
	"written as FILE.tmp.RANDOM (created exclusively: nobody can take the name\n"
	"first) and renamed, so it is replaced atomically; on failure an existing\n"
	"FILE is left as it was. FILE gets the segment's permission bits as they are\n"
	"now (plus read and write for its owner), and a segment restored from it\n"
	"gets those bits.\n"
	"A segment with a cold tier is dumped whole: its cold samples are read from\n"
	"its cold file through io_uring, each checked against its checksum, and kept\n"
	"with their metadata and seen counts (dump format 3; a segment without a\n"
	"cold tier is written in format 2, which older builds read).\n"
	"A sim-paired-reservoir or a prioritized segment is dumped in format 4,\n"
	"which keeps its samples' end-of-episode marks.\n"
	"A progress bar is drawn on standard error when it is a terminal.\n"
	"\n"
	"  -q, --quiet         no summary line\n"
	"  -t, --textfile DIR  while the dump runs, keep its progress in\n"
	"                      DIR/cistern-dump-NAME.prom (the cistern_dump_*\n"
	"                      families, for node_exporter's textfile collector or\n"
	"                      `cistern exporter --dumps DIR`), each time through a\n"
	"                      temporary file renamed over it; removed at the end\n"
	"  -h, --help          show this help\n"
	"\n"
	"The segment is only read: the progress goes to DIR, never into the segment.\n"
	"CISTERN_TEST_DUMP_STALL_MS (for tests only) makes --textfile wait that many\n"
	"milliseconds after each update, so that a test sees a dump half done.\n";

const struct command cmd_dump;

/* The progress bar and, with --textfile, the progress file. */
struct watch {
	struct progress bar;
	const char *dir;
	char path[PATH_MAX];
	struct prom_dump d;
	uint64_t last_ns;
	unsigned stall_ms;
	bool failed; /* said once that the file cannot be written */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Replace the progress file: a temporary file in DIR, written whole, then renamed. */
static void write_progress(struct watch *w)
{
	char tmp[PATH_MAX + 16];
	snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", w->path);
	int fd = mkstemp(tmp);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		if (fd >= 0)
			close(fd);
		goto fail;
	}
	fchmod(fd, 0644); /* the collector may run as another user */
	prom_dump_write(f, &w->d, 1);
	if (fclose(f) != 0 || rename(tmp, w->path) != 0) {
		unlink(tmp);
		goto fail;
	}
	if (w->stall_ms)
		usleep(w->stall_ms * 1000u);
	return;
fail:
	if (!w->failed)
		fprintf(stderr, "cistern dump: cannot write the progress to %s: %s\n", esc(w->path),
			strerror(errno));
	w->failed = true;
}

static void watch_cb(uint64_t done, uint64_t total, void *arg)
{
	struct watch *w = arg;
	progress_cb(done, total, &w->bar);
	if (!w->dir)
		return;
	/* Ten updates a second at most; the last one is the file's removal. */
	uint64_t t = mono_ns();
	if (t - w->last_ns < 100000000u && !w->stall_ms)
		return;
	w->last_ns = t;
	w->d.written = done;
	w->d.samples = total;
	write_progress(w);
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"quiet", no_argument, NULL, 'q'},
		{"textfile", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool quiet = false;
	struct watch w = {0};
	int o;
	while ((o = cli_getopt(&cmd_dump, argc, argv, "qt:h", opts)) != -1) {
		if (o == 'h')
			return cli_help(&cmd_dump);
		if (o == '?')
			return EXIT_USAGE;
		if (o == 't')
			w.dir = optarg;
		else
			quiet = true;
	}
	if (argc - optind != 2)
		return cli_usage(&cmd_dump,
				 argc - optind < 2 ? "need NAME and FILE" : "too many arguments");
	const char *name = argv[optind], *file = argv[optind + 1];
	int r = cistern_name_valid(name);
	if (r < 0)
		return cli_bad_name(&cmd_dump, name, r);
	/*
	 * Check the segment on its own first: the library says -ENOENT both for
	 * a missing segment and for a missing directory, and they need different
	 * messages.
	 */
	struct cistern *c;
	r = cistern_open_readonly(name, &c);
	if (r < 0) {
		cli_error(&cmd_dump, name, r, NULL);
		return EXIT_FAIL;
	}
	/* A cold tier's file is read too: its errors are told apart from FILE's. */
	struct cistern_config cfg;
	char cold[PATH_MAX] = "";
	if (cistern_config_get(c, &cfg) == 0 && cfg.cold_slots && cfg.cold_dir)
		snprintf(cold, sizeof(cold), "%s/cistern.%s.cold", cfg.cold_dir, name);
	cistern_detach(c);
	progress_init(&w.bar, "dump");
	if (w.dir) {
		struct stat st;
		if (stat(w.dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
			cli_error(&cmd_dump, name, 0, "--textfile %s is not a directory",
				  esc(w.dir));
			return EXIT_FAIL;
		}
		snprintf(w.path, sizeof(w.path), "%s/cistern-dump-%s.prom", w.dir, name);
		snprintf(w.d.name, sizeof(w.d.name), "%s", name);
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		w.d.started_s = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
		const char *stall = getenv("CISTERN_TEST_DUMP_STALL_MS");
		w.stall_ms = stall ? (unsigned)strtoul(stall, NULL, 10) : 0;
		write_progress(&w);
		w.last_ns = mono_ns();
	}
	struct cistern_dump_info info;
	r = cistern_dump(name, file, watch_cb, &w, &info);
	progress_end(&w.bar);
	if (w.dir)
		unlink(w.path);
	if (r < 0) {
		/* Past the check above, what fails is the file, unless the segment just went. */
		if (cold[0] && r == -EIO)
			cli_error(&cmd_dump, name, 0,
				  "a cold sample read from %s does not match its checksum, or the "
				  "disk failed; %s was not written",
				  esc(cold), esc(file));
		else if (cold[0] && access(cold, R_OK) != 0)
			cli_error(&cmd_dump, name, 0,
				  "cannot read its cold file %s: %s; %s was not written", esc(cold),
				  strerror(errno), esc(file));
		else if (r == -ENOENT || r == -EACCES || r == -ENOSPC || r == -EROFS ||
			 r == -EISDIR || r == -ENOTDIR || r == -EIO || r == -EDQUOT || r == -EFBIG)
			cli_error(&cmd_dump, name, 0, "cannot write %s: %s", file, strerror(-r));
		else
			cli_error(&cmd_dump, name, r, "dump to %s failed", file);
		return EXIT_FAIL;
	}
	if (!quiet) {
		char a[32], b[32];
		fprintf(stderr, "dumped %" PRIu64 " samples (%s payload, file %s) of %s to %s",
			info.samples, fmt_bytes(info.payload_bytes, a, sizeof(a)),
			fmt_bytes(info.file_size, b, sizeof(b)), name, esc(file));
		if (info.config.cold_slots)
			fprintf(stderr, "; %" PRIu64 " of them from the cold tier",
				info.cold_samples);
		if (info.skipped)
			fprintf(stderr, "; %" PRIu64 " left out (they moved while copied)",
				info.skipped);
		fputc('\n', stderr);
	}
	return EXIT_OK;
}

const struct command cmd_dump = {"dump", run, "snapshot a segment to a file", usage};
