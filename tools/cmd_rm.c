/* SPDX-License-Identifier: MIT */
/* cmd_rm.c - `cistern rm`: remove segments nobody uses. */
#include <errno.h>

#include "cli.h"
#include <cistern/admin.h>

static const char usage[] =
	"Usage: cistern rm [--force] [--any-owner] NAME...\n"
	"Remove each segment NAME. A segment with live processes attached is refused\n"
	"(processes keep working on a removed segment, but nobody new can attach).\n"
	"\n"
	"  -f, --force   remove even with live processes attached, and remove objects\n"
	"                named cistern.NAME that are damaged, half-created, made by\n"
	"                an incompatible build, or not segments at all (a FIFO, a\n"
	"                socket, a symbolic link, ...)\n" CLI_ANY_OWNER_HELP
	"  -h, --help    show this help\n";

const struct command cmd_rm;

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"force", no_argument, NULL, 'f'},
		{"any-owner", no_argument, NULL, 'A'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	unsigned flags = 0;
	int o;
	while ((o = cli_getopt(&cmd_rm, argc, argv, "fh", opts)) != -1) {
		if (o == 'h')
			return cli_help(&cmd_rm);
		if (o == '?')
			return EXIT_USAGE;
		flags |= o == 'A' ? CISTERN_REMOVE_ANY_OWNER : CISTERN_REMOVE_FORCE;
	}
	if (optind >= argc)
		return cli_usage(&cmd_rm, "missing NAME");
	for (int i = optind; i < argc; i++) {
		int r = cistern_name_valid(argv[i]);
		if (r < 0)
			return cli_bad_name(&cmd_rm, argv[i], r);
	}
	int status = EXIT_OK;
	for (int i = optind; i < argc; i++) {
		const char *name = argv[i];
		int r = cistern_remove(name, flags);
		if (r == -EBUSY)
			cli_error(&cmd_rm, name, 0,
				  "live processes are attached (see 'cistern inspect %s'); "
				  "not removed, use --force to remove anyway",
				  name);
		else if (r == -EPROTO || r == -EPROTONOSUPPORT || r == -EAGAIN)
			cli_error(&cmd_rm, name, r,
				  "cannot tell who is attached; not removed, "
				  "use --force to remove anyway");
		else if (r < 0)
			cli_segment_error(&cmd_rm, name, r, flags & CISTERN_REMOVE_ANY_OWNER, NULL);
		if (r < 0)
			status = EXIT_FAIL;
	}
	return status;
}

const struct command cmd_rm = {"rm", run, "remove segments", usage};
