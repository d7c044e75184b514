/* SPDX-License-Identifier: MIT */
/* cmd_get.c - `cistern get`: take samples out to standard output. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char usage[] =
	"Usage: cistern get NAME [-n COUNT] [--timeout MS] [-0]\n"
	"Take samples from segment NAME and write their payloads to standard output,\n"
	"each followed by a newline (or a NUL with -0).\n"
	"\n"
	"  -n, --count COUNT   take COUNT samples (default 1); 0 takes samples until end\n"
	"                      of data, or until none arrives within the timeout\n"
	"  -T, --timeout MS    wait at most MS milliseconds for each sample\n"
	"                      (default -1: forever; 0: never wait)\n"
	"  -0, --null          end each payload with a NUL byte instead of a newline\n"
	"  -r, --raw           write payloads back to back, with nothing after them\n"
	"  -h, --help          show this help\n"
	"\n"
	"A sample is released only once it is written out: if standard output fails,\n"
	"the sample goes back to the segment (FIFO hands it out again).\n"
	"With COUNT > 0, end of data or a timeout before COUNT samples is a failure.\n";

const struct command cmd_get;

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"count", required_argument, NULL, 'n'},
		{"timeout", required_argument, NULL, 'T'},
		{"null", no_argument, NULL, '0'},
		{"raw", no_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	uint64_t count = 1;
	int timeout = -1, o, sep = '\n';
	while ((o = cli_getopt(&cmd_get, argc, argv, "n:T:0rh", opts)) != -1) {
		switch (o) {
		case 'h':
			return cli_help(&cmd_get);
		case '?':
			return EXIT_USAGE;
		case 'n':
			if (parse_u64(optarg, &count) < 0)
				return cli_usage(&cmd_get, "bad count '%s'", optarg);
			break;
		case 'T':
			if (parse_timeout(optarg, &timeout) < 0)
				return cli_usage(&cmd_get, "bad --timeout '%s'", optarg);
			break;
		case '0':
			sep = '\0';
			break;
		case 'r':
			sep = EOF;
			break;
		}
	}
	if (optind != argc - 1)
		return cli_usage(&cmd_get, optind >= argc ? "missing NAME" : "too many arguments");
	const char *name = argv[optind];
	int r = cistern_name_valid(name);
	if (r < 0)
		return cli_usage(&cmd_get, "bad segment name '%s': %s", name, cistern_strerror(r));
	/* A closed pipe must be an error we handle (sample handed back), not a kill. */
	signal(SIGPIPE, SIG_IGN);

	struct cistern *c;
	r = cistern_attach(name, &c);
	if (r < 0) {
		cli_error(&cmd_get, name, r, NULL);
		return EXIT_FAIL;
	}
	int status = EXIT_OK;
	uint64_t got = 0;
	while (count == 0 || got < count) {
		struct cistern_sample s;
		r = cistern_acquire(c, &s, timeout);
		if (r == CISTERN_EOD || ((r == -ETIMEDOUT || r == -EAGAIN) && count == 0)) {
			if (count) {
				cli_error(&cmd_get, name, 0,
					  "end of data after %llu of %llu samples",
					  (unsigned long long)got, (unsigned long long)count);
				status = EXIT_FAIL;
			}
			break;
		}
		if (r < 0) {
			cli_error(&cmd_get, name, r, "after %llu samples", (unsigned long long)got);
			status = EXIT_FAIL;
			break;
		}
		errno = 0;
		bool ok = fwrite(s.data, 1, s.len, stdout) == s.len;
		if (ok && sep != EOF)
			ok = putchar(sep) != EOF;
		ok = ok && fflush(stdout) == 0;
		if (!ok) {
			/* Handed back unread (FIFO: to the next reader): a broken pipe loses no sample. */
			int werr = errno ? errno : EIO;
			cistern_unacquire(c, &s);
			cli_error(&cmd_get, name, 0, "writing standard output: %s; the sample "
				  "goes back to the segment", strerror(werr));
			status = EXIT_FAIL;
			break;
		}
		cistern_release(c, &s);
		got++;
	}
	cistern_detach(c);
	return status;
}

const struct command cmd_get = {"get", run, "take samples out to standard output", usage};
