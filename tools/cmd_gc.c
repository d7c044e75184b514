/* SPDX-License-Identifier: MIT */
/* cmd_gc.c - `cistern gc`: reclaim what dead processes hold, remove abandoned segments. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "cli.h"

static const char usage[] =
	"Usage: cistern gc [--dry-run] [NAME...]\n"
	"Collect garbage in each segment NAME (default: every segment on the machine),\n"
	"printing one line per action:\n"
	"  - reclaim the attachments of processes that died without detaching: their\n"
	"    unfinished puts are dropped, the FIFO/FIRO samples they held are put back\n"
	"    for redelivery, their reservoir pins are dropped;\n"
	"  - remove a segment when every process that was attached died without\n"
	"    detaching (at least one died, none lives), when its creation never\n"
	"    finished and is older than 10 seconds, or when it is a restore that was\n"
	"    abandoned half-way (only the object a restore marks as its own, once\n"
	"    the restorer is gone: a copy of a segment under another name is kept).\n"
	"A segment nobody is attached to because it was created for later, or whose\n"
	"processes all detached cleanly, is kept. Damaged segments and segments of an\n"
	"incompatible build are never removed by gc (see 'cistern rm --force').\n"
	"gc takes no attachment itself, so it works even when the table is full.\n"
	"\n"
	"  -n, --dry-run   say what would be done, do nothing\n"
	"  -h, --help      show this help\n";

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

/* Returns 0, or -errno for a segment that could not be collected. */
static int collect(const char *name, unsigned flags, bool named)
{
	bool dry = flags & CISTERN_GC_DRY_RUN;
	struct cistern_gc_report rep;
	int r = cistern_gc(name, flags, &rep);
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
		cli_error(&cmd_gc, name, r, NULL);
		return r;
	}
	if (rep.dead_procs)
		printf("%s: %s %u dead attachment%s: %" PRIu64 " reservation%s dropped, %" PRIu64
		       " sample%s put back for redelivery, %" PRIu64 " pin%s dropped\n",
		       name, dry ? "would reclaim" : "reclaimed", rep.dead_procs,
		       rep.dead_procs == 1 ? "" : "s", rep.reservations,
		       rep.reservations == 1 ? "" : "s", rep.redelivered,
		       rep.redelivered == 1 ? "" : "s", rep.pins, rep.pins == 1 ? "" : "s");
	if (rep.removed)
		printf("%s: %s (%s)\n", name, dry ? "would remove" : "removed", why(rep.removed));
	return 0;
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dry-run", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	unsigned flags = 0;
	int o;
	while ((o = cli_getopt(&cmd_gc, argc, argv, "nh", opts)) != -1) {
		if (o == 'h')
			return cli_help(&cmd_gc);
		if (o == '?')
			return EXIT_USAGE;
		flags |= CISTERN_GC_DRY_RUN;
	}
	int status = EXIT_OK;
	if (optind < argc) {
		for (int i = optind; i < argc; i++) {
			int r = cistern_name_valid(argv[i]);
			if (r < 0)
				return cli_usage(&cmd_gc, "bad segment name '%s': %s", argv[i],
						 cistern_strerror(r));
		}
		for (int i = optind; i < argc; i++)
			if (collect(argv[i], flags, true) < 0)
				status = EXIT_FAIL;
		return status;
	}
	struct cistern_segment_info *v;
	int n = cistern_list(&v);
	if (n < 0) {
		cli_error(&cmd_gc, "/dev/shm", n, "cannot list segments");
		return EXIT_FAIL;
	}
	for (int i = 0; i < n; i++)
		if (collect(v[i].name, flags, false) < 0)
			status = EXIT_FAIL;
	free(v);
	return status;
}

const struct command cmd_gc = {"gc", run, "reclaim what dead processes left, remove abandoned segments", usage};
