/* SPDX-License-Identifier: MIT */
/* cmd_put.c - `cistern put`: feed files or lines of standard input into a segment. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char usage[] =
	"Usage: cistern put NAME [--any-owner] [OPTION...] [FILE...]\n"
	"       cistern put NAME --field FIELD=VALUE... [--any-owner] [OPTION...]\n"
	"       cistern put NAME --json [--any-owner] [OPTION...] < LINES\n"
	"Put samples into segment NAME: each FILE is one sample ('-' is standard\n"
	"input); without FILE, all of standard input is one sample; with --lines,\n"
	"each line of standard input (without its newline) is one sample.\n"
	"Samples go in in order; the first that fails (too large for a slot, a\n"
	"timeout, reception closed) ends the command, which says how many went in.\n"
	"On a segment created with --producers, the command is a producer from its\n"
	"attach: killed before its first sample, it counts as one that died.\n"
	"\n"
	"A segment created with a schema (cistern create --schema) takes samples\n"
	"of exactly its sample size, and can be given them field by field:\n"
	"  -f, --field FIELD=VALUE  one sample, every field given once: VALUE is a\n"
	"                         number (or true/false) for a scalar field; for a\n"
	"                         field with a shape, JSON arrays in C order, nested\n"
	"                         or flat, whose outer brackets may be left out\n"
	"                         ('obs=1,2,3,4'); or @FILE ('@-': standard input),\n"
	"                         the field's raw bytes, exactly its size\n"
	"  -j, --json             one sample per line of standard input, a JSON object\n"
	"                         of every field ({\"obs\": [[...]], \"action\": 3}), or\n"
	"                         what 'cistern get --json' prints (its sim_id and\n"
	"                         time_step are used; blank lines are skipped)\n"
	"\n"
	"  -l, --lines            one sample per line of standard input\n"
	"  -s, --sim-id N         sim_id of the samples (default 0)\n"
	"  -t, --time-step N      time_step of the samples (default 0)\n"
	"      --end-of-episode   mark the samples as the last step of their episode\n"
	"                         (a sim-paired-reservoir or a prioritized segment\n"
	"                         keeps the mark: no window of\n"
	"                         'cistern_get_windows()' runs past it)\n"
	"      --priority P       prioritized segments: every sample's priority (a\n"
	"                         number >= 0; default: the largest seen so far)\n"
	"  -T, --timeout MS       wait at most MS milliseconds for room per sample\n"
	"                         (default -1: forever; 0: never wait)\n" CLI_ANY_OWNER_HELP
	"  -h, --help             show this help\n";

const struct command cmd_put;

/* cli_usage() after freeing the --field list. */
static int usage_free(char **fields, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_free(char **fields, const char *fmt, ...)
{
	free(fields);
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return cli_usage(&cmd_put, "%s", msg);
}

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

/* --priority: the priority of every sample put, or negative for none given. */
static double priority = -1;

/* cistern_put(), or with --priority cistern_put_prioritized(). */
static int put_sample(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta,
		      int timeout)
{
	return priority >= 0 ? cistern_put_prioritized(c, buf, len, meta, priority, timeout)
			     : cistern_put(c, buf, len, meta, timeout);
}

static int put_one(struct cistern *c, const char *name, const char *what, const char *buf,
		   size_t len, struct cistern_meta *meta, int timeout)
{
	int r = put_sample(c, buf, len, meta, timeout);
	if (r < 0) {
		cli_error(&cmd_put, name, r, "%s", what);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* "lines 1-3 were put, none after it": where to start again after sample k + 1 failed. */
static void done_before(const char *what, unsigned long long k, char *buf, size_t size)
{
	if (k == 0)
		snprintf(buf, size, "no %s was put", what);
	else if (k == 1)
		snprintf(buf, size, "%s 1 was put, none after it", what);
	else
		snprintf(buf, size, "%ss 1-%llu were put, none after it", what, k);
}

/* Field FIELD=VALUE of an option into the sample; 0, or EXIT_FAIL having said why. */
static int field_option(const char *name, const struct schema *s, const char *arg, char *sample,
			bool *seen)
{
	const char *eq = strchr(arg, '=');
	if (!eq) {
		cli_error(&cmd_put, name, 0, "--field '%s': expected FIELD=VALUE", arg);
		return EXIT_FAIL;
	}
	const struct cistern_field *f = schema_find(s, arg, (size_t)(eq - arg));
	if (!f) {
		cli_error(&cmd_put, name, 0, "--field '%.*s': not a field of the schema (%s)",
			  (int)(eq - arg), arg, s->text);
		return EXIT_FAIL;
	}
	if (seen[f - s->f]) {
		cli_error(&cmd_put, name, 0, "--field '%s' is given twice", f->name);
		return EXIT_FAIL;
	}
	seen[f - s->f] = true;
	const char *v = eq + 1;
	if (*v != '@') {
		const char *why = field_parse_text(v, f, sample);
		if (why) {
			cli_error(&cmd_put, name, 0, "%s", why);
			return EXIT_FAIL;
		}
		return EXIT_OK;
	}
	const char *file = v + 1;
	bool in = strcmp(file, "-") == 0;
	int fd = in ? STDIN_FILENO : open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		cli_error(&cmd_put, name, 0, "field '%s': cannot open %s: %s", f->name, file,
			  strerror(errno));
		return EXIT_FAIL;
	}
	ssize_t len = slurp(fd, sample + f->offset, (size_t)f->size);
	if (!in)
		close(fd);
	if (len < 0 && len != -EMSGSIZE) {
		cli_error(&cmd_put, name, 0, "field '%s': reading %s: %s", f->name, file,
			  strerror((int)-len));
		return EXIT_FAIL;
	}
	if (len != (ssize_t)f->size) {
		char t[160];
		cli_error(&cmd_put, name, 0,
			  "field '%s': %s holds %s bytes, where %s needs %" PRIu64, f->name,
			  in ? "standard input" : file, len < 0 ? "more" : "fewer",
			  field_type(f, t, sizeof(t)), f->size);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* The sample of --field options; nothing is put unless every field is right. */
static int put_fields(struct cistern *c, const char *name, const struct schema *s, char **args,
		      int nargs, struct cistern_meta *meta, int timeout)
{
	char *sample = calloc(1, s->size);
	bool *seen = calloc((size_t)s->n, sizeof(*seen));
	int status = sample && seen ? EXIT_OK : EXIT_FAIL;
	if (status != EXIT_OK)
		cli_error(&cmd_put, name, -ENOMEM, NULL);
	for (int i = 0; status == EXIT_OK && i < nargs; i++)
		status = field_option(name, s, args[i], sample, seen);
	const char *why = status == EXIT_OK ? schema_missing(s, seen) : NULL;
	if (why) {
		cli_error(&cmd_put, name, 0, "%s", why);
		status = EXIT_FAIL;
	}
	if (status == EXIT_OK)
		status = put_one(c, name, "the sample of --field", sample, s->size, meta, timeout);
	free(seen);
	free(sample);
	return status;
}

/* One sample per line of JSON on standard input. */
static int put_json(struct cistern *c, const char *name, const struct schema *s,
		    const struct cistern_meta *given, int timeout)
{
	char *sample = malloc(s->size), *line = NULL;
	bool *seen = calloc((size_t)s->n, sizeof(*seen));
	int status = sample && seen ? EXIT_OK : EXIT_FAIL;
	if (status != EXIT_OK)
		cli_error(&cmd_put, name, -ENOMEM, NULL);
	size_t cap = 0;
	unsigned long long no = 0, put = 0;
	while (status == EXIT_OK && getline(&line, &cap, stdin) >= 0) {
		no++;
		if (strspn(line, " \t\r\n") == strlen(line))
			continue;
		/* The padding between fields stays zero. */
		memset(sample, 0, s->size);
		struct cistern_meta meta = *given;
		const char *why = sample_parse_json(line, s, sample, &meta, seen);
		char done[64];
		done_before("sample", put, done, sizeof(done));
		if (why) {
			cli_error(&cmd_put, name, 0, "line %llu of standard input: %s; %s", no, why,
				  done);
			status = EXIT_FAIL;
			break;
		}
		int r = put_sample(c, sample, s->size, &meta, timeout);
		if (r < 0) {
			cli_error(&cmd_put, name, r, "line %llu of standard input (%s)", no, done);
			status = EXIT_FAIL;
			break;
		}
		put++;
	}
	if (status == EXIT_OK && ferror(stdin)) {
		cli_error(&cmd_put, name, 0, "reading standard input: %s", strerror(EIO));
		status = EXIT_FAIL;
	}
	free(line);
	free(seen);
	free(sample);
	return status;
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"lines", no_argument, NULL, 'l'},
		{"field", required_argument, NULL, 'f'},
		{"json", no_argument, NULL, 'j'},
		{"sim-id", required_argument, NULL, 's'},
		{"time-step", required_argument, NULL, 't'},
		{"timeout", required_argument, NULL, 'T'},
		{"priority", required_argument, NULL, 'P'},
		{"end-of-episode", no_argument, NULL, 'E'},
		{"any-owner", no_argument, NULL, 'A'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool lines = false, json = false, any_owner = false;
	struct cistern_meta meta = {0};
	int timeout = -1, o, nfields = 0;
	char **fields = calloc((size_t)argc + 1, sizeof(*fields));
	if (!fields)
		return EXIT_FAIL;
	while ((o = cli_getopt(&cmd_put, argc, argv, "lf:js:t:T:h", opts)) != -1) {
		switch (o) {
		case 'h':
			free(fields);
			return cli_help(&cmd_put);
		case '?':
			free(fields);
			return EXIT_USAGE;
		case 'l':
			lines = true;
			break;
		case 'f':
			fields[nfields++] = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'A':
			any_owner = true;
			break;
		case 'E':
			meta.flags = CISTERN_META_END_OF_EPISODE;
			break;
		case 's':
			if (parse_u32(optarg, &meta.sim_id) < 0)
				return usage_free(fields, "bad --sim-id '%s'", optarg);
			break;
		case 't':
			if (parse_u32(optarg, &meta.time_step) < 0)
				return usage_free(fields, "bad --time-step '%s'", optarg);
			break;
		case 'T':
			if (parse_timeout(optarg, &timeout) < 0)
				return usage_free(fields, "bad --timeout '%s'", optarg);
			break;
		case 'P': {
			char *end;
			errno = 0;
			priority = strtod(optarg, &end);
			/* NaN fails the comparisons. */
			if (errno || end == optarg || *end || !(priority >= 0 && priority <= 1e300))
				return usage_free(fields, "bad --priority '%s' (a number >= 0)",
						  optarg);
			break;
		}
		}
	}
	if (optind >= argc)
		return usage_free(fields, "missing NAME");
	const char *name = argv[optind++];
	if ((lines || json) && optind < argc)
		return usage_free(fields, "%s reads standard input: no FILE arguments",
				  lines ? "--lines" : "--json");
	if (nfields && (lines || json || optind < argc))
		return usage_free(fields, "--field makes one sample: no --lines, --json or FILE");
	if (lines && json)
		return usage_free(fields, "--lines and --json exclude each other");
	int r = cistern_name_valid(name);
	if (r < 0) {
		free(fields);
		return cli_bad_name(&cmd_put, name, r);
	}

	/* A producer from the attach: killed before its first sample, it counts as died. */
	struct cistern *c;
	r = cistern_attach_flags(
		name, CISTERN_ATTACH_PRODUCER | (any_owner ? CISTERN_ATTACH_ANY_OWNER : 0), &c);
	if (r < 0) {
		cli_segment_error(&cmd_put, name, r, any_owner, NULL);
		free(fields);
		return EXIT_FAIL;
	}
	struct cistern_config cfg;
	cistern_config_get(c, &cfg);
	struct schema sch;
	int status = EXIT_OK;
	r = schema_load(c, &sch);
	if (r < 0) {
		cli_error(&cmd_put, name, r, NULL);
		status = EXIT_FAIL;
	} else if (priority >= 0 && cfg.policy != CISTERN_PRIORITIZED) {
		cli_error(&cmd_put, name, 0, "--priority needs a prioritized segment, not %s",
			  cistern_policy_name(cfg.policy));
		status = EXIT_FAIL;
	} else if ((nfields || json) && sch.n == 0) {
		cli_error(&cmd_put, name, 0,
			  "%s needs a segment created with a schema "
			  "(cistern create --schema)",
			  json ? "--json" : "--field");
		status = EXIT_FAIL;
	}
	if (status == EXIT_OK && nfields) {
		status = put_fields(c, name, &sch, fields, nfields, &meta, timeout);
	} else if (status == EXIT_OK && json) {
		status = put_json(c, name, &sch, &meta, timeout);
	} else if (status == EXIT_OK && lines) {
		char *line = NULL;
		size_t cap = 0;
		ssize_t n;
		unsigned long long put = 0;
		while (status == EXIT_OK && (n = getline(&line, &cap, stdin)) >= 0) {
			if (n > 0 && line[n - 1] == '\n')
				n--;
			/* A schema's samples are all of its size: anything else is refused unput. */
			int pr = sch.n && (uint64_t)n != sch.size
					 ? -EBADMSG
					 : put_sample(c, line, (size_t)n, &meta, timeout);
			if (pr == 0) {
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
				snprintf(done, sizeof(done), "lines 1-%llu were put, none after it",
					 put);
			if (pr == -EBADMSG)
				cli_error(&cmd_put, name, 0,
					  "line %llu of standard input is %zd bytes, "
					  "where samples of the schema are %" PRIu64
					  " (see --json); %s",
					  put + 1, n, sch.size, done);
			else if (pr == -EMSGSIZE)
				cli_error(&cmd_put, name, 0,
					  "line %llu of standard input is %zd bytes, "
					  "over the slot size (%s); %s",
					  put + 1, n, fmt_bytes(cfg.slot_size, a, sizeof(a)), done);
			else
				cli_error(&cmd_put, name, pr, "line %llu of standard input (%s)",
					  put + 1, done);
			status = EXIT_FAIL;
		}
		if (status == EXIT_OK && ferror(stdin)) {
			cli_error(&cmd_put, name, 0, "reading standard input: %s", strerror(EIO));
			status = EXIT_FAIL;
		}
		free(line);
	} else if (status == EXIT_OK) {
		char *buf = malloc(cfg.slot_size + 1);
		if (!buf) {
			cli_error(&cmd_put, name, -ENOMEM, NULL);
			status = EXIT_FAIL;
		}
		int nfiles = argc - optind;
		for (int i = 0; status == EXIT_OK && i < (nfiles ? nfiles : 1); i++) {
			const char *file = nfiles ? argv[optind + i] : "-";
			bool in = strcmp(file, "-") == 0;
			/* With several files, where to start again: the ones before it are in. */
			char done[64] = "";
			if (nfiles > 1)
				snprintf(done, sizeof(done),
					 "; %d file%s before it %s put, none after it", i,
					 i == 1 ? "" : "s", i == 1 ? "was" : "were");
			int fd = in ? STDIN_FILENO : open(file, O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				/* File errors in the file's words (cistern_strerror speaks of segments). */
				cli_error(&cmd_put, name, 0, "cannot open %s: %s%s", file,
					  strerror(errno), done);
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
			} else if (sch.n && (uint64_t)len != sch.size) {
				cli_error(&cmd_put, name, 0,
					  "%s: %zd bytes, where samples of the "
					  "schema are %" PRIu64 " (see --field and --json)%s",
					  in ? "standard input" : file, len, sch.size, done);
				status = EXIT_FAIL;
			} else {
				char what[PATH_MAX + 80];
				snprintf(what, sizeof(what), "%s%s", in ? "standard input" : file,
					 done);
				status = put_one(c, name, what, buf, (size_t)len, &meta, timeout);
			}
		}
		free(buf);
	}
	schema_free(&sch);
	cistern_detach(c);
	free(fields);
	return status;
}

const struct command cmd_put = {"put", run, "put files or lines as samples", usage};
