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

extern const struct command cmd_create, cmd_ls, cmd_inspect, cmd_put, cmd_get, cmd_close,
	cmd_rm, cmd_gc, cmd_dump, cmd_restore;

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
#define CLI_ANY_OWNER_HELP                                                              \
	"      --any-owner   act on a segment owned by another user than you or root;\n"    \
	"                    without it such a segment is refused, since anyone can\n"      \
	"                    create cistern.NAME first to collect what is put in it\n"

/* Print a usage error and the help hint; returns EXIT_USAGE. */
int cli_usage(const struct command *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
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
char *fmt_bytes(uint64_t n, char *buf, size_t size);  /* 4.0 MiB */
char *fmt_size(uint64_t n, char *buf, size_t size);   /* 4K, 1M, or plain when not round */
char *fmt_age(uint64_t ns, char *buf, size_t size);   /* 3m12s */
char *fmt_time(uint64_t ns, char *buf, size_t size);  /* 2026-12-02 10:00:00 UTC */
uint64_t now_ns(void);                                 /* CLOCK_REALTIME */

/* JSON string, escaped; Prometheus label value, escaped. */
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

#endif
