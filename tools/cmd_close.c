/* SPDX-License-Identifier: MIT */
/* cmd_close.c - `cistern close`: close reception; readers drain, then see end of data. */
#include "cli.h"

static const char usage[] =
	"Usage: cistern close [--any-owner] NAME...\n"
	"Close reception of each segment NAME: puts fail from now on, readers drain\n"
	"what is left and then get end of data. Closing twice is harmless.\n"
	"\n" CLI_ANY_OWNER_HELP "  -h, --help        show this help\n";

const struct command cmd_close;

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"any-owner", no_argument, NULL, 'A'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool any_owner = false;
	int o;
	while ((o = cli_getopt(&cmd_close, argc, argv, "h", opts)) != -1) {
		if (o == 'h')
			return cli_help(&cmd_close);
		if (o != 'A')
			return EXIT_USAGE;
		any_owner = true;
	}
	if (optind >= argc)
		return cli_usage(&cmd_close, "missing NAME");
	for (int i = optind; i < argc; i++) {
		int r = cistern_name_valid(argv[i]);
		if (r < 0)
			return cli_bad_name(&cmd_close, argv[i], r);
	}
	int status = EXIT_OK;
	for (int i = optind; i < argc; i++) {
		struct cistern *c;
		int r = cistern_attach_flags(argv[i], any_owner ? CISTERN_ATTACH_ANY_OWNER : 0, &c);
		if (r == 0) {
			r = cistern_close_reception(c);
			cistern_detach(c);
		}
		if (r < 0) {
			cli_segment_error(&cmd_close, argv[i], r, any_owner, NULL);
			status = EXIT_FAIL;
		}
	}
	return status;
}

const struct command cmd_close = {"close", run, "close reception of a segment", usage};
