/* SPDX-License-Identifier: MIT */
/* cmd_dump.c - `cistern dump`: snapshot a segment to a file, live or not. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "cli.h"
#include <cistern/admin.h>

static const char usage[] =
	"Usage: cistern dump [--quiet] NAME FILE\n"
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
	"A progress bar is drawn on standard error when it is a terminal.\n"
	"\n"
	"  -q, --quiet   no summary line\n"
	"  -h, --help    show this help\n";

const struct command cmd_dump;

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool quiet = false;
	int o;
	while ((o = cli_getopt(&cmd_dump, argc, argv, "qh", opts)) != -1) {
		if (o == 'h')
			return cli_help(&cmd_dump);
		if (o == '?')
			return EXIT_USAGE;
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
	struct cistern_config cfg;
	bool tiered = cistern_config_get(c, &cfg) == 0 && cfg.cold_slots;
	cistern_detach(c);
	if (tiered) {
		cli_error(&cmd_dump, name, 0,
			  "the segment has a cold tier on disk, and a dump does not carry cold "
			  "samples yet; not dumped");
		return EXIT_FAIL;
	}
	struct progress p;
	progress_init(&p, "dump");
	struct cistern_dump_info info;
	r = cistern_dump(name, file, progress_cb, &p, &info);
	progress_end(&p);
	if (r < 0) {
		/* Past the check above, what fails is the file, unless the segment just went. */
		if (r == -ENOENT || r == -EACCES || r == -ENOSPC || r == -EROFS || r == -EISDIR ||
		    r == -ENOTDIR || r == -EIO || r == -EDQUOT || r == -EFBIG)
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
		if (info.skipped)
			fprintf(stderr, "; %" PRIu64 " left out (they moved while copied)",
				info.skipped);
		fputc('\n', stderr);
	}
	return EXIT_OK;
}

const struct command cmd_dump = {"dump", run, "snapshot a segment to a file", usage};
