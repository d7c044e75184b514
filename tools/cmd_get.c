/* SPDX-License-Identifier: MIT */
/* cmd_get.c - `cistern get`: take samples out to standard output. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char usage[] =
	"Usage: cistern get NAME [-n COUNT] [--timeout MS] [-0 | --raw] [--any-owner]\n"
	"Take samples from segment NAME and write their payloads to standard output,\n"
	"each followed by a newline (or a NUL with -0).\n"
	"\n"
	"  -n, --count COUNT   take COUNT samples (default 1); 0 takes samples until end\n"
	"                      of data, or until none arrives within the timeout\n"
	"  -T, --timeout MS    wait at most MS milliseconds for each sample\n"
	"                      (default -1: forever; 0: never wait)\n"
	"  -0, --null          end each payload with a NUL byte instead of a newline\n"
	"  -r, --raw           write payloads back to back, with nothing after them\n"
	CLI_ANY_OWNER_HELP
	"  -h, --help          show this help\n"
	"\n"
	"A sim-paired-reservoir is read a pair at a time (x_t, then x_t+1) and a\n"
	"batch-reservoir a batch at a time; COUNT still counts samples, and members\n"
	"of a pair or batch past COUNT go back to the segment unread.\n"
	"A sample is released only once it is written out: if standard output fails,\n"
	"it goes back to the segment unread (FIFO hands it out again).\n"
	"With COUNT > 0, end of data or a timeout before COUNT samples is a failure.\n";

const struct command cmd_get;

/*
 * One read in the policy's unit: a sample, a pair, or a batch (into unit[],
 * which holds batch_size). The count read, or a negative result.
 */
static int read_unit(struct cistern *c, enum cistern_policy policy, struct cistern_sample *unit,
		     int timeout)
{
	if (policy == CISTERN_SIM_PAIRED_RESERVOIR) {
		int r = cistern_acquire_pair(c, unit, timeout);
		return r < 0 ? r : 2;
	}
	if (policy == CISTERN_BATCH_RESERVOIR)
		return cistern_acquire_batch(c, unit, 0, timeout);
	int r = cistern_acquire(c, unit, timeout);
	return r < 0 ? r : 1;
}

/* Write one payload and its separator; 0, or the errno of the failed write. */
static int write_payload(const struct cistern_sample *s, int sep)
{
	errno = 0;
	bool ok = fwrite(s->data, 1, s->len, stdout) == s->len;
	if (ok && sep != EOF)
		ok = putchar(sep) != EOF;
	ok = ok && fflush(stdout) == 0;
	return ok ? 0 : errno ? errno : EIO;
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"count", required_argument, NULL, 'n'},
		{"timeout", required_argument, NULL, 'T'},
		{"null", no_argument, NULL, '0'},
		{"raw", no_argument, NULL, 'r'},
		{"any-owner", no_argument, NULL, 'A'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool any_owner = false;
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
		case 'A':
			any_owner = true;
			break;
		}
	}
	if (optind != argc - 1)
		return cli_usage(&cmd_get, optind >= argc ? "missing NAME" : "too many arguments");
	const char *name = argv[optind];
	int r = cistern_name_valid(name);
	if (r < 0)
		return cli_bad_name(&cmd_get, name, r);
	/* A closed pipe must be an error we handle (sample handed back), not a kill. */
	signal(SIGPIPE, SIG_IGN);

	struct cistern *c;
	r = cistern_attach_flags(name, any_owner ? CISTERN_ATTACH_ANY_OWNER : 0, &c);
	if (r < 0) {
		cli_segment_error(&cmd_get, name, r, any_owner, NULL);
		return EXIT_FAIL;
	}
	struct cistern_config cfg;
	cistern_config_get(c, &cfg);
	struct cistern_sample *unit =
		calloc(cfg.policy == CISTERN_BATCH_RESERVOIR ? cfg.batch_size : 2, sizeof(*unit));
	if (!unit) {
		cli_error(&cmd_get, name, -ENOMEM, NULL);
		cistern_detach(c);
		return EXIT_FAIL;
	}
	int status = EXIT_OK;
	uint64_t got = 0;
	while (status == EXIT_OK && (count == 0 || got < count)) {
		int n = read_unit(c, cfg.policy, unit, timeout);
		if (n == CISTERN_EOD || ((n == -ETIMEDOUT || n == -EAGAIN) && count == 0)) {
			if (count) {
				cli_error(&cmd_get, name, 0,
					  "end of data after %llu of %llu samples",
					  (unsigned long long)got, (unsigned long long)count);
				status = EXIT_FAIL;
			}
			break;
		}
		if (n < 0) {
			cli_error(&cmd_get, name, n, "after %llu samples", (unsigned long long)got);
			status = EXIT_FAIL;
			break;
		}
		int i = 0;
		for (; i < n && (count == 0 || got < count); i++) {
			int werr = write_payload(&unit[i], sep);
			if (werr) {
				cli_error(&cmd_get, name, 0, "writing standard output: %s; the sample "
					  "goes back to the segment", strerror(werr));
				status = EXIT_FAIL;
				break;
			}
			cistern_release(c, &unit[i]);
			got++;
		}
		/* Not written (past COUNT, or the write failed): back unread, nothing lost. */
		for (; i < n; i++)
			cistern_unacquire(c, &unit[i]);
	}
	free(unit);
	cistern_detach(c);
	return status;
}

const struct command cmd_get = {"get", run, "take samples out to standard output", usage};
