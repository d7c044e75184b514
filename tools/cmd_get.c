/* SPDX-License-Identifier: MIT */
/* cmd_get.c - `cistern get`: take samples out to standard output. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char usage[] =
	"Usage: cistern get NAME [-n COUNT] [--timeout MS] [-0 | -r | --fields | --json]\n"
	"                        [--any-owner]\n"
	"Take samples from segment NAME and write their payloads to standard output,\n"
	"each followed by a newline (or a NUL with -0); a segment created with a\n"
	"schema can instead be shown field by field.\n"
	"\n"
	"  -n, --count COUNT   take COUNT samples (default 1); 0 takes samples until end\n"
	"                      of data, or until none arrives within the timeout\n"
	"  -T, --timeout MS    wait at most MS milliseconds for each sample\n"
	"                      (default -1: forever; 0: never wait)\n"
	"  -0, --null          end each payload with a NUL byte instead of a newline\n"
	"  -r, --raw           write payloads back to back, with nothing after them\n"
	"  -f, --fields        schema segments: a line with each sample's id, sim_id and\n"
	"                      time_step, then a line per field: its name, dtype and\n"
	"                      shape, and its value as JSON (nested arrays in C order)\n"
	"  -j, --json          schema segments: one JSON object a line, {\"sample_id\": I,\n"
	"                      \"sim_id\": S, \"time_step\": T, \"fields\": {...}}, which\n"
	"                      'cistern put --json' takes back\n" CLI_ANY_OWNER_HELP
	"  -h, --help          show this help\n"
	"\n"
	"A sim-paired-reservoir is read a pair at a time (x_t, then x_t+1) and a\n"
	"batch-reservoir a batch at a time; COUNT still counts samples, and members\n"
	"of a pair or batch past COUNT go back to the segment unread.\n"
	"A sample is released only once it is written out: if standard output fails,\n"
	"it goes back to the segment unread (FIFO hands it out again).\n"
	"With COUNT > 0, end of data or a timeout before COUNT samples is a failure.\n"
	"With --fields or --json, a sample whose length is not the schema's sample\n"
	"size is a failure, and goes back to the segment unread.\n";

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

enum show { PAYLOAD, FIELDS, JSON };

/* One sample of a schema segment as --fields or --json says. */
static void write_fields(const struct cistern_sample *s, const struct schema *sch, enum show how)
{
	const struct cistern_meta *m = &s->meta;
	if (how == JSON)
		printf("{\"sample_id\": %" PRIu64 ", \"sim_id\": %" PRIu32
		       ", \"time_step\": %" PRIu32 ", \"fields\": {",
		       m->sample_id, m->sim_id, m->time_step);
	else
		printf("sample %" PRIu64 "  sim_id %" PRIu32 "  time_step %" PRIu32 "\n",
		       m->sample_id, m->sim_id, m->time_step);
	for (int i = 0; i < sch->n; i++) {
		const struct cistern_field *f = &sch->f[i];
		if (how == JSON) {
			printf("%s\"%s\": ", i ? ", " : "", f->name);
		} else {
			char t[160];
			printf("  %s %s = ", esc(f->name), field_type(f, t, sizeof(t)));
		}
		field_print(stdout, f, s->data);
		if (how == FIELDS)
			putchar('\n');
	}
	if (how == JSON)
		fputs("}}\n", stdout);
}

/* Write one payload and its separator; 0, or the errno of the failed write. */
static int write_payload(const struct cistern_sample *s, int sep, const struct schema *sch,
			 enum show how)
{
	errno = 0;
	bool ok = true;
	if (how != PAYLOAD)
		write_fields(s, sch, how);
	else
		ok = fwrite(s->data, 1, s->len, stdout) == s->len;
	if (ok && sep != EOF && how == PAYLOAD)
		ok = putchar(sep) != EOF;
	ok = ok && !ferror(stdout) && fflush(stdout) == 0;
	return ok ? 0 : errno ? errno : EIO;
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"count", required_argument, NULL, 'n'},
		{"timeout", required_argument, NULL, 'T'},
		{"null", no_argument, NULL, '0'},
		{"raw", no_argument, NULL, 'r'},
		{"fields", no_argument, NULL, 'f'},
		{"json", no_argument, NULL, 'j'},
		{"any-owner", no_argument, NULL, 'A'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool any_owner = false;
	uint64_t count = 1;
	int timeout = -1, o, sep = '\n', seps = 0;
	enum show how = PAYLOAD;
	while ((o = cli_getopt(&cmd_get, argc, argv, "n:T:0rfjh", opts)) != -1) {
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
			seps++;
			break;
		case 'r':
			sep = EOF;
			seps++;
			break;
		case 'f':
		case 'j':
			how = o == 'f' ? FIELDS : JSON;
			seps++;
			break;
		case 'A':
			any_owner = true;
			break;
		}
	}
	if (seps > 1)
		return cli_usage(&cmd_get, "-0, --raw, --fields and --json exclude each other");
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
	struct schema sch;
	r = schema_load(c, &sch);
	if (r <= 0 && how != PAYLOAD) {
		if (r < 0)
			cli_error(&cmd_get, name, r, NULL);
		else
			cli_error(&cmd_get, name, 0,
				  "--%s needs a segment created with a schema "
				  "(cistern create --schema)",
				  how == JSON ? "json" : "fields");
		cistern_detach(c);
		return EXIT_FAIL;
	}
	struct cistern_sample *unit = calloc(
		cfg.policy == CISTERN_BATCH_RESERVOIR ? cfg.batch_size : 2, sizeof(*unit));
	if (!unit) {
		cli_error(&cmd_get, name, -ENOMEM, NULL);
		schema_free(&sch);
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
			if (how != PAYLOAD && unit[i].len != sch.size) {
				cli_error(&cmd_get, name, 0,
					  "sample %" PRIu64 " is %zu bytes, where "
					  "samples of the schema are %" PRIu64
					  "; it goes back to the "
					  "segment",
					  unit[i].meta.sample_id, unit[i].len, sch.size);
				status = EXIT_FAIL;
				break;
			}
			int werr = write_payload(&unit[i], sep, &sch, how);
			if (werr) {
				cli_error(&cmd_get, name, 0,
					  "writing standard output: %s; the sample "
					  "goes back to the segment",
					  strerror(werr));
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
	schema_free(&sch);
	cistern_detach(c);
	return status;
}

const struct command cmd_get = {"get", run, "take samples out to standard output", usage};
