/* SPDX-License-Identifier: MIT */
/* cmd_close.c - `cistern close`: close reception; readers drain, then see end of data. */
#include "cli.h"

static const char usage[] =
	"Usage: cistern close NAME...\n"
	"Close reception of each segment NAME: puts fail from now on, readers drain\n"
	"what is left and then get end of data. Closing twice is harmless.\n"
	"\n"
	"  -h, --help   show this help\n";

const struct command cmd_close;

static int run(int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
	int o;
	while ((o = cli_getopt(&cmd_close, argc, argv, "h", opts)) != -1) {
		if (o == 'h')
			return cli_help(&cmd_close);
		return EXIT_USAGE;
	}
	if (optind >= argc)
		return cli_usage(&cmd_close, "missing NAME");
	int status = EXIT_OK;
	for (int i = optind; i < argc; i++) {
		struct cistern *c;
		int r = cistern_attach(argv[i], &c);
		if (r == 0) {
			r = cistern_close_reception(c);
			cistern_detach(c);
		}
		if (r < 0) {
			cli_error(&cmd_close, argv[i], r, NULL);
			status = EXIT_FAIL;
		}
	}
	return status;
}

const struct command cmd_close = {"close", run, "close reception of a segment", usage};
