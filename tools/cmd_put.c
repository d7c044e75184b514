/* SPDX-License-Identifier: MIT */
/* cmd_put.c - `cistern put`: feed files or lines of standard input into a segment. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char usage[] =
	"Usage: cistern put NAME [--any-owner] [OPTION...] [FILE...]\n"
	"Put samples into segment NAME: each FILE is one sample ('-' is standard\n"
	"input); without FILE, all of standard input is one sample; with --lines,\n"
	"each line of standard input (without its newline) is one sample.\n"
	"Samples go in in order; the first that fails (too large for a slot, a\n"
	"timeout, reception closed) ends the command, which says how many went in.\n"
	"\n"
	"  -l, --lines            one sample per line of standard input\n"
	"  -s, --sim-id N         sim_id of the samples (default 0)\n"
	"  -t, --time-step N      time_step of the samples (default 0)\n"
	"  -T, --timeout MS       wait at most MS milliseconds for room per sample\n"
	"                         (default -1: forever; 0: never wait)\n"
	CLI_ANY_OWNER_HELP
	"  -h, --help             show this help\n";

const struct command cmd_put;

/* Read all of fd, refusing more than `cap` bytes; returns the length or -errno. */
static ssize_t slurp(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	for (;;) {
		/* Ask for one byte beyond the cap so that an oversized input is noticed. */
		ssize_t r = read(fd, buf + n, cap + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return (ssize_t)n;
		n += (size_t)r;
		if (n > cap)
			return -EMSGSIZE;
	}
}

static int put_one(struct cistern *c, const char *name, const char *what, const char *buf,
		   size_t len, struct cistern_meta *meta, int timeout)
{
	int r = cistern_put(c, buf, len, meta, timeout);
	if (r < 0) {
		cli_error(&cmd_put, name, r, "%s", what);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"lines", no_argument, NULL, 'l'},
		{"sim-id", required_argument, NULL, 's'},
		{"time-step", required_argument, NULL, 't'},
		{"timeout", required_argument, NULL, 'T'},
		{"any-owner", no_argument, NULL, 'A'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool lines = false, any_owner = false;
	struct cistern_meta meta = {0};
	int timeout = -1, o;
	while ((o = cli_getopt(&cmd_put, argc, argv, "ls:t:T:h", opts)) != -1) {
		switch (o) {
		case 'h':
			return cli_help(&cmd_put);
		case '?':
			return EXIT_USAGE;
		case 'l':
			lines = true;
			break;
		case 'A':
			any_owner = true;
			break;
		case 's':
			if (parse_u32(optarg, &meta.sim_id) < 0)
				return cli_usage(&cmd_put, "bad --sim-id '%s'", optarg);
			break;
		case 't':
			if (parse_u32(optarg, &meta.time_step) < 0)
				return cli_usage(&cmd_put, "bad --time-step '%s'", optarg);
			break;
		case 'T':
			if (parse_timeout(optarg, &timeout) < 0)
				return cli_usage(&cmd_put, "bad --timeout '%s'", optarg);
			break;
		}
	}
	if (optind >= argc)
		return cli_usage(&cmd_put, "missing NAME");
	const char *name = argv[optind++];
	if (lines && optind < argc)
		return cli_usage(&cmd_put, "--lines reads standard input: no FILE arguments");
	int r = cistern_name_valid(name);
	if (r < 0)
		return cli_bad_name(&cmd_put, name, r);

	struct cistern *c;
	r = cistern_attach_flags(name, any_owner ? CISTERN_ATTACH_ANY_OWNER : 0, &c);
	if (r < 0) {
		cli_segment_error(&cmd_put, name, r, any_owner, NULL);
		return EXIT_FAIL;
	}
	struct cistern_config cfg;
	cistern_config_get(c, &cfg);
	int status = EXIT_OK;
	if (lines) {
		char *line = NULL;
		size_t cap = 0;
		ssize_t n;
		unsigned long long put = 0;
		while (status == EXIT_OK && (n = getline(&line, &cap, stdin)) >= 0) {
			if (n > 0 && line[n - 1] == '\n')
				n--;
			int r = cistern_put(c, line, (size_t)n, &meta, timeout);
			if (r == 0) {
				put++;
				continue;
			}
			/* Say which line, and where to start again: the ones before it are in. */
			char done[64], a[32];
			if (put == 0)
				snprintf(done, sizeof(done), "no line was put");
			else if (put == 1)
				snprintf(done, sizeof(done), "line 1 was put, none after it");
			else
				snprintf(done, sizeof(done), "lines 1-%llu were put, none after it", put);
			if (r == -EMSGSIZE)
				cli_error(&cmd_put, name, 0, "line %llu of standard input is %zd bytes, "
					  "over the slot size (%s); %s", put + 1, n,
					  fmt_bytes(cfg.slot_size, a, sizeof(a)), done);
			else
				cli_error(&cmd_put, name, r, "line %llu of standard input (%s)", put + 1,
					  done);
			status = EXIT_FAIL;
		}
		if (status == EXIT_OK && ferror(stdin)) {
			cli_error(&cmd_put, name, 0, "reading standard input: %s", strerror(EIO));
			status = EXIT_FAIL;
		}
		free(line);
	} else {
		char *buf = malloc(cfg.slot_size + 1);
		if (!buf) {
			cli_error(&cmd_put, name, -ENOMEM, NULL);
			cistern_detach(c);
			return EXIT_FAIL;
		}
		int nfiles = argc - optind;
		for (int i = 0; status == EXIT_OK && i < (nfiles ? nfiles : 1); i++) {
			const char *file = nfiles ? argv[optind + i] : "-";
			bool in = strcmp(file, "-") == 0;
			/* With several files, where to start again: the ones before it are in. */
			char done[64] = "";
			if (nfiles > 1)
				snprintf(done, sizeof(done), "; %d file%s before it %s put, none after it",
					 i, i == 1 ? "" : "s", i == 1 ? "was" : "were");
			int fd = in ? STDIN_FILENO : open(file, O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				/* File errors in the file's words (cistern_strerror speaks of segments). */
				cli_error(&cmd_put, name, 0, "cannot open %s: %s%s", file, strerror(errno),
					  done);
				status = EXIT_FAIL;
				break;
			}
			ssize_t len = slurp(fd, buf, (size_t)cfg.slot_size);
			if (!in)
				close(fd);
			if (len == -EMSGSIZE) {
				char a[32];
				cli_error(&cmd_put, name, 0, "%s: larger than the slot size (%s)%s",
					  in ? "standard input" : file,
					  fmt_bytes(cfg.slot_size, a, sizeof(a)), done);
				status = EXIT_FAIL;
			} else if (len < 0) {
				cli_error(&cmd_put, name, 0, "reading %s: %s%s", file,
					  strerror((int)-len), done);
				status = EXIT_FAIL;
			} else {
				char what[PATH_MAX + 80];
				snprintf(what, sizeof(what), "%s%s", in ? "standard input" : file, done);
				status = put_one(c, name, what, buf, (size_t)len, &meta, timeout);
			}
		}
		free(buf);
	}
	cistern_detach(c);
	return status;
}

const struct command cmd_put = {"put", run, "put files or lines as samples", usage};
