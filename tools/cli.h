/* SPDX-License-Identifier: MIT */
/* cli.h - what the `cistern` command's files share: the command table and helpers. */
#ifndef CISTERN_CLI_H
#define CISTERN_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cistern.h>

/* Exit statuses: success, failure, bad usage. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

struct command {
	const char *name;
	int (*run)(int argc, char **argv); /* argv[0] is the command name */
	const char *summary;               /* one line for `cistern --help` */
	const char *usage;                 /* the full help text of `cistern help CMD` */
};

extern const struct command cmd_create, cmd_ls, cmd_inspect, cmd_put, cmd_get, cmd_close, cmd_rm,
	cmd_gc, cmd_dump, cmd_restore;
/* cmd_serve.c: the server of remote producers, and its key pairs */
extern const struct command cmd_serve, cmd_keygen;
/* cmd_exporter.c: segments' figures for Prometheus */
extern const struct command cmd_exporter;

/* Print "cistern CMD: SUBJECT: message: reason-of-err" to stderr (SUBJECT/err optional). */
void cli_error(const struct command *cmd, const char *subject, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/*
 * cli_error() for a failed call on segment NAME. -EACCES is made precise: an
 * object owned by another user than us or root is named with its owner and
 * the way to allow it (--any-owner, unless any_owner was given already);
 * else the segment's mode is what refuses us.
 */
void cli_segment_error(const struct command *cmd, const char *name, int err, bool any_owner,
		       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A bad segment NAME (cistern_name_valid() said err), with the naming rule; returns EXIT_USAGE. */
int cli_bad_name(const struct command *cmd, const char *name, int err);
/* The text after "--any-owner" in the help of the commands that take it. */
#define CLI_ANY_OWNER_HELP                                                               \
	"      --any-owner   act on a segment owned by another user than you or root;\n" \
	"                    without it such a segment is refused, since anyone can\n"   \
	"                    create cistern.NAME first to collect what is put in it\n"

/* Print a usage error and the help hint; returns EXIT_USAGE. */
int cli_usage(const struct command *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Print the command's help on stdout; returns EXIT_OK. */
int cli_help(const struct command *cmd);

/*
 * getopt_long over a command's arguments, with "--help" handled for every
 * command. Returns the option, -1 at the end, or '?' after having printed a
 * usage error (the caller returns EXIT_USAGE), 'h' for help.
 */
int cli_getopt(const struct command *cmd, int argc, char **argv, const char *shortopts,
	       const struct option *longopts);

/* Numbers: plain decimal (0x.. hex), sizes with K/M/G/T suffixes (powers of 1024). */
int parse_u64(const char *s, uint64_t *out);
int parse_u32(const char *s, uint32_t *out);
int parse_size(const char *s, uint64_t *out);
int parse_timeout(const char *s, int *out); /* milliseconds; -1 = forever */

/* Human formatting into a caller's buffer; each returns buf. */
char *fmt_bytes(uint64_t n, char *buf, size_t size); /* 4.0 MiB */
char *fmt_size(uint64_t n, char *buf, size_t size);  /* 4K, 1M, or plain when not round */
char *fmt_age(uint64_t ns, char *buf, size_t size);  /* 3m12s */
char *fmt_time(uint64_t ns, char *buf, size_t size); /* 2026-12-02 10:00:00 UTC */
uint64_t now_ns(void);                               /* CLOCK_REALTIME */

/*
 * Text another user may control (a name, a process's comm, a path, a schema,
 * a dump's contents, anything typed) made safe for a terminal or a log line,
 * as docs/cistern.1 (TEXT OUTPUT) describes: printable ASCII as it is, a
 * backslash doubled, control bytes as \e, \n, ... or \xNN, other bytes as
 * \xNN, except that valid UTF-8 passes when the locale is a UTF-8 one (C1
 * controls, bidirectional controls and line separators never do). The result
 * lives in one of 8 per-thread buffers used in turn, so up to 8 may be used in
 * one printf().
 */
const char *esc(const char *s);

/*
 * JSON string, escaped: valid UTF-8 as esc() lets it through in a UTF-8
 * locale, every other byte as \u00XX; Prometheus label value, escaped.
 */
void json_str(FILE *f, const char *s);
void prom_label(FILE *f, const char *s);

/* A progress bar on stderr, drawn only when stderr is a terminal. */
struct progress {
	const char *what;
	bool tty;
	uint64_t last_ns;
	int drawn;
};
void progress_init(struct progress *p, const char *what);
void progress_cb(uint64_t done, uint64_t total, void *arg); /* arg: struct progress * */
void progress_end(struct progress *p);

/*
 * fields.c: the samples of a segment with a schema, as text. Values are JSON:
 * a number (or true/false) for a scalar field, nested arrays in C order (or
 * one flat array) for a field with a shape. The parsers return NULL, or a
 * sentence naming the field that is wrong (in a per-thread buffer).
 */
struct schema {
	struct cistern_field *f;
	int n;
	uint64_t size;                 /* bytes of one sample */
	char text[CISTERN_SCHEMA_MAX]; /* canonical text */
};
/* The segment's schema: its field count (0: none; nothing to free), or -errno. */
int schema_load(struct cistern *c, struct schema *s);
void schema_free(struct schema *s);
const struct cistern_field *schema_find(const struct schema *s, const char *name, size_t len);
char *field_type(const struct cistern_field *f, char *buf, size_t size); /* float32[84,84] */
uint64_t field_count(const struct cistern_field *f);                     /* its elements */
/* Field f of a sample as a JSON value. */
void field_print(FILE *out, const struct cistern_field *f, const void *sample);
/* A JSON value at *pp into field f of the sample; *pp moves past it. */
const char *field_parse(const char **pp, const struct cistern_field *f, void *sample);
/* The same for the whole of `text`, whose outer brackets may be left out ("1,2,3"). */
const char *field_parse_text(const char *text, const struct cistern_field *f, void *sample);
/*
 * One JSON object of fields into the sample (seen[] has room for s->n),
 * or the form `cistern get --json` prints: {"sim_id": S, "time_step": T,
 * "fields": {...}}, whose sim_id and time_step go to *meta. Every field is
 * needed and none other is taken.
 */
const char *sample_parse_json(const char *line, const struct schema *s, void *sample,
			      struct cistern_meta *meta, bool *seen);
/* Why not every field was given: the first one missing, or NULL. */
const char *schema_missing(const struct schema *s, const bool *seen);

#endif
