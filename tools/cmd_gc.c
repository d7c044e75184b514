/* SPDX-License-Identifier: MIT */
/* cmd_gc.c - `cistern gc`: reclaim what dead processes hold, remove abandoned segments. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include <cistern/admin.h>

static const char usage[] =
	"Usage: cistern gc [--dry-run] [--dump-to DIR | --discard] [--cold-dir DIR]...\n"
	"                  [--any-owner] [NAME...]\n"
	"Collect garbage in each segment NAME (default: every segment on the machine),\n"
	"printing one line per action:\n"
	"  - reclaim the attachments of processes that died without detaching: their\n"
	"    unfinished puts are dropped, the FIFO/FIRO samples they held are put back\n"
	"    for redelivery, their reservoir pins are dropped;\n"
	"  - remove a segment when every process that was attached died without\n"
	"    detaching (at least one died, none lives) and it holds no unread sample,\n"
	"    when its creation never finished and is older than 10 seconds, or when it\n"
	"    is a restore that was abandoned half-way (only the object a restore marks\n"
	"    as its own, once the restorer is gone: a copy of a segment under another\n"
	"    name is kept).\n"
	"Committed samples are never thrown away unasked: a segment whose processes\n"
	"all died but which still holds unread samples (FIFO, FIRO: any sample held;\n"
	"reservoirs: samples never seen) is kept and reported ('stale, N unread\n"
	"samples and D dead attachments kept') and left as it is, dead attachments\n"
	"included, unless --dump-to or --discard says otherwise.\n"
	"A segment nobody is attached to because it was created for later, or whose\n"
	"processes all detached cleanly, is kept. Damaged segments and segments of an\n"
	"incompatible build are never removed by gc (see 'cistern rm --force'), nor\n"
	"are objects under a segment's name that are not segments (a FIFO, a socket,\n"
	"a directory, ...). Segments owned by another user than you or root are left\n"
	"alone (and, in a scan of the machine, passed over in silence) unless\n"
	"--any-owner; a dry run says what the real one would do.\n"
	"gc takes no attachment itself, so it works even when the table is full.\n"
	"A segment gc removes goes with its cold file. gc also removes the cold files\n"
	"whose segment is gone (a file DIR/cistern.NAME.cold whose header names no\n"
	"segment NAME that exists with the same creation nonce, or has no whole\n"
	"header), in each --cold-dir DIR and, when no NAME is given, in the cold\n"
	"directories of the segments on the machine. It never follows a symbolic\n"
	"link found in such a directory, never touches another user's file (unless\n"
	"--any-owner), and leaves a file written in the last 10 seconds alone (a\n"
	"create or restore may be under way). There is no default cold directory: a\n"
	"directory no segment names any more is only looked at when given with\n"
	"--cold-dir.\n"
	"\n"
	"  -n, --dry-run      say what would be done, do nothing\n"
	"  -d, --dump-to DIR  dump such a segment to DIR/NAME.dump (never over an\n"
	"                     existing file or symbolic link; 'cistern restore'\n"
	"                     brings it back), read the dump back, then remove the\n"
	"                     segment\n"
	"      --discard      remove such a segment anyway, losing its samples\n"
	"      --cold-dir DIR look for cold files whose segment is gone in DIR too\n"
	"                     (may be given more than once)\n" CLI_ANY_OWNER_HELP
	"  -h, --help         show this help\n";

const struct command cmd_gc;

static const char *why(int removed)
{
	switch (removed) {
	case 1:
		return "every attached process died without detaching";
	case 2:
		return "its creation never finished";
	case 3:
		return "an abandoned restore";
	default:
		return "?";
	}
}

static const char *plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

/* Returns 0, or -errno for a segment that could not be collected. */
static int collect(const char *name, unsigned flags, const char *dir, bool named)
{
	bool dry = flags & CISTERN_GC_DRY_RUN;
	char path[4096];
	if (dir)
		snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	struct cistern_gc_report rep;
	int r = cistern_gc_dump_to(name, dir, flags, &rep);
	if (r < 0 && rep.kept) {
		/* The dump failed: whatever the scan, say so, the segment is still there. */
		cli_error(&cmd_gc, name, 0,
			  "stale, %" PRIu64
			  " unread sample%s and %u dead attachment%s kept: %s %s: %s",
			  rep.unread, plural(rep.unread), rep.dead_procs, plural(rep.dead_procs),
			  dry ? "would not dump to" : "cannot dump to", path,
			  r == -EAGAIN ? "the dump does not hold every sample" : strerror(-r));
		return r;
	}
	if (r == -EPROTO || r == -EPROTONOSUPPORT || r == -ENOTSUP) {
		/*
		 * Not ours to judge. Asked by name: say so and fail. In a scan of
		 * the machine, 'cistern ls' already shows them as stale: stay quiet.
		 */
		if (named)
			cli_error(&cmd_gc, name, r, "skipped");
		return named ? r : 0;
	}
	/* Scanning the machine: gone since the listing, or another user's to collect. */
	if ((r == -ENOENT || r == -EACCES) && !named)
		return 0;
	if (r < 0) {
		cli_segment_error(&cmd_gc, name, r, flags & CISTERN_GC_ANY_OWNER, NULL);
		return r;
	}
	/* A kept segment keeps its dead attachments too: said on its own line below. */
	if (rep.dead_procs && !rep.kept)
		printf("%s: %s %u dead attachment%s: %" PRIu64 " reservation%s dropped, %" PRIu64
		       " sample%s put back for redelivery, %" PRIu64 " pin%s dropped\n",
		       name, dry ? "would reclaim" : "reclaimed", rep.dead_procs,
		       rep.dead_procs == 1 ? "" : "s", rep.reservations, plural(rep.reservations),
		       rep.redelivered, plural(rep.redelivered), rep.pins, plural(rep.pins));
	if (rep.kept)
		printf("%s: stale, %" PRIu64 " unread sample%s and %u dead attachment%s %s (every "
		       "attached process died; --dump-to DIR or --discard removes it)\n",
		       name, rep.unread, plural(rep.unread), rep.dead_procs, plural(rep.dead_procs),
		       dry ? "would be kept" : "kept");
	else if (rep.removed == 4 && dry)
		printf("%s: stale, %" PRIu64 " unread sample%s would be dumped to %s, then the "
		       "segment removed\n",
		       name, rep.unread, plural(rep.unread), esc(path));
	else if (rep.removed == 4)
		printf("%s: stale, %" PRIu64 " unread sample%s dumped to %s (%" PRIu64
		       " sample%s in all), removed\n",
		       name, rep.unread, plural(rep.unread), esc(path), rep.dumped,
		       plural(rep.dumped));
	else if (rep.removed == 5)
		printf("%s: stale, %" PRIu64 " unread sample%s %s\n", name, rep.unread,
		       plural(rep.unread),
		       dry ? "would be discarded, the segment removed" : "discarded, removed");
	else if (rep.removed)
		printf("%s: %s (%s)\n", name, dry ? "would remove" : "removed", why(rep.removed));
	return 0;
}

/* The cold directories to sweep, each once. */
struct cold_dirs {
	char **v;
	size_t n;
};

static void cold_dirs_add(struct cold_dirs *d, const char *dir)
{
	for (size_t i = 0; i < d->n; i++)
		if (strcmp(d->v[i], dir) == 0)
			return;
	char **v = realloc(d->v, (d->n + 1) * sizeof(*v));
	char *s = strdup(dir);
	if (!v || !s) {
		free(s);
		if (v)
			d->v = v;
		return;
	}
	d->v = v;
	d->v[d->n++] = s;
}

static void cold_dirs_free(struct cold_dirs *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->v[i]);
	free(d->v);
}

struct cold_ctx {
	bool dry;
	int status;
};

static void cold_found(const struct cistern_gc_cold_report *rep, void *arg)
{
	struct cold_ctx *x = arg;
	static const char *const whys[] = {
		"?",
		"no segment of that name exists",
		"segment of that name is another one",
		"no whole header, or it names another segment",
	};
	const char *why = rep->why >= 1 && rep->why <= 3 ? whys[rep->why] : whys[0];
	if (rep->error) {
		cli_error(&cmd_gc, rep->path, rep->error, "cannot remove cold file");
		x->status = EXIT_FAIL;
		return;
	}
	printf("%s: %s cold file (%s)\n", esc(rep->path), x->dry ? "would remove" : "removed", why);
}

/* Sweep each cold directory for cold files whose segment is gone. */
static int sweep_cold(const struct cold_dirs *d, unsigned flags, bool named)
{
	struct cold_ctx x = {flags & CISTERN_GC_DRY_RUN, EXIT_OK};
	for (size_t i = 0; i < d->n; i++) {
		int r = cistern_gc_cold(d->v[i],
					flags & (CISTERN_GC_DRY_RUN | CISTERN_GC_ANY_OWNER),
					cold_found, &x);
		/* A directory a segment names may be gone with its disk: said only when asked. */
		if (r < 0 && (named || r != -ENOENT)) {
			cli_error(&cmd_gc, d->v[i], 0, "cannot look for cold files: %s",
				  strerror(-r));
			x.status = EXIT_FAIL;
		}
	}
	return x.status;
}

/* The cold directories of the segments on the machine, into d. */
static void cold_dirs_of_segments(const struct cistern_segment_info *v, int n, struct cold_dirs *d)
{
	for (int i = 0; i < n; i++) {
		if (v[i].status != 0 || v[i].config.cold_slots == 0)
			continue;
		struct cistern *c;
		struct cistern_config cfg;
		if (cistern_open_readonly(v[i].name, &c) < 0)
			continue;
		if (cistern_config_get(c, &cfg) == 0 && cfg.cold_dir)
			cold_dirs_add(d, cfg.cold_dir);
		cistern_detach(c);
	}
}

static int run(int argc, char **argv)
{
	enum { OPT_DISCARD = 256, OPT_COLD_DIR };
	static const struct option opts[] = {
		{"dry-run", no_argument, NULL, 'n'},
		{"any-owner", no_argument, NULL, 'A'},
		{"dump-to", required_argument, NULL, 'd'},
		{"discard", no_argument, NULL, OPT_DISCARD},
		{"cold-dir", required_argument, NULL, OPT_COLD_DIR},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	unsigned flags = 0;
	const char *dir = NULL;
	struct cold_dirs cold = {0};
	int o;
	while ((o = cli_getopt(&cmd_gc, argc, argv, "nd:h", opts)) != -1) {
		if (o == 'h' || o == '?') {
			cold_dirs_free(&cold);
			return o == 'h' ? cli_help(&cmd_gc) : EXIT_USAGE;
		}
		if (o == 'n')
			flags |= CISTERN_GC_DRY_RUN;
		else if (o == 'A')
			flags |= CISTERN_GC_ANY_OWNER;
		else if (o == 'd')
			dir = optarg;
		else if (o == OPT_COLD_DIR)
			cold_dirs_add(&cold, optarg);
		else
			flags |= CISTERN_GC_DISCARD;
	}
	if (dir && (flags & CISTERN_GC_DISCARD)) {
		cold_dirs_free(&cold);
		return cli_usage(&cmd_gc, "--dump-to and --discard exclude each other");
	}
	/* Up front: a missing directory would otherwise read as a missing segment. */
	if (dir) {
		struct stat st;
		const char *bad = NULL;
		if (stat(dir, &st) < 0)
			bad = strerror(errno);
		else if (!S_ISDIR(st.st_mode))
			bad = "not a directory";
		else if (access(dir, W_OK | X_OK) < 0)
			bad = strerror(errno);
		if (bad) {
			cli_error(&cmd_gc, dir, 0, "cannot dump there: %s", bad);
			cold_dirs_free(&cold);
			return EXIT_FAIL;
		}
	}
	int status = EXIT_OK;
	if (optind < argc) {
		for (int i = optind; i < argc; i++) {
			int r = cistern_name_valid(argv[i]);
			if (r < 0) {
				cold_dirs_free(&cold);
				return cli_bad_name(&cmd_gc, argv[i], r);
			}
		}
		for (int i = optind; i < argc; i++)
			if (collect(argv[i], flags, dir, true) < 0)
				status = EXIT_FAIL;
		if (sweep_cold(&cold, flags, true) != EXIT_OK)
			status = EXIT_FAIL;
		cold_dirs_free(&cold);
		return status;
	}
	struct cistern_segment_info *v;
	int n = cistern_list(&v);
	if (n < 0) {
		cli_error(&cmd_gc, "/dev/shm", n, "cannot list segments");
		cold_dirs_free(&cold);
		return EXIT_FAIL;
	}
	/* Before the segments go: a removed segment's directory may hold older orphans. */
	size_t asked = cold.n;
	cold_dirs_of_segments(v, n, &cold);
	for (int i = 0; i < n; i++)
		if (collect(v[i].name, flags, dir, false) < 0)
			status = EXIT_FAIL;
	free(v);
	/* The directories given are reported when they cannot be read; the others quietly. */
	struct cold_dirs given = {cold.v, asked}, found = {cold.v + asked, cold.n - asked};
	if (sweep_cold(&given, flags, true) != EXIT_OK)
		status = EXIT_FAIL;
	if (sweep_cold(&found, flags, false) != EXIT_OK)
		status = EXIT_FAIL;
	cold_dirs_free(&cold);
	return status;
}

const struct command cmd_gc = {
	"gc", run, "reclaim what dead processes left, remove abandoned segments", usage};
