/* SPDX-License-Identifier: MIT */
/* cmd_ls.c - `cistern ls`: every segment on the machine, one line each. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include <cistern/admin.h>

static const char usage[] =
	"Usage: cistern ls [--json]\n"
	"List every cistern segment on this machine (/dev/shm/cistern.*), one line each:\n"
	"name, policy, slots x slot size, population, processes attached (live/dead),\n"
	"age, and a status. Listing takes no attachment and changes nothing.\n"
	"\n"
	"Status: 'ok' while a live process is attached, 'closed' once reception is\n"
	"closed, 'idle' when nobody is attached and nobody died attached (created for\n"
	"later, or every process detached; gc keeps it), else 'stale: ...' with why:\n"
	"every process died (gc removes it), still being created, an unfinished\n"
	"restore, a damaged header, or a segment of an incompatible build. An object\n"
	"under a segment's name that is not a regular file (a FIFO, a socket, a\n"
	"directory, ...) is listed as 'not a cistern segment' without waiting on it.\n"
	"\n"
	"  -j, --json   one JSON array of objects instead of the table\n"
	"  -h, --help   show this help\n";

const struct command cmd_ls;

/* What the object named like segment NAME is, when it is not a regular file; NULL if it is. */
static const char *kind_of(const char *name)
{
	char path[160];
	struct stat st;
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	if (lstat(path, &st) < 0 || S_ISREG(st.st_mode))
		return NULL;
	if (S_ISFIFO(st.st_mode))
		return "a FIFO";
	if (S_ISSOCK(st.st_mode))
		return "a socket";
	if (S_ISDIR(st.st_mode))
		return "a directory";
	if (S_ISLNK(st.st_mode))
		return "a symbolic link";
	if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
		return "a device";
	return "not a regular file";
}

static const char *status_of(const struct cistern_segment_info *s, bool *stale)
{
	static char buf[64];
	const char *kind;
	*stale = true;
	switch (s->status) {
	case 0:
		if (s->procs_live) {
			*stale = false;
			return s->closed ? "closed" : "ok";
		}
		if (s->procs_dead)
			return "stale: every process died (gc removes it unless samples are "
			       "unread)";
		*stale = false;
		return "idle: nobody attached";
	case -EAGAIN:
		return "stale: being created (or its creator died)";
	case -EINPROGRESS:
		return s->procs_live ? "stale: restore in progress"
				     : "stale: unfinished restore (gc removes it)";
	case -EPROTO:
		kind = kind_of(s->name);
		if (!kind)
			return "stale: damaged header, not a cistern segment";
		snprintf(buf, sizeof(buf), "not a cistern segment: %s", kind);
		return buf;
	case -EPROTONOSUPPORT:
		return "stale: made by an incompatible build";
	case -EACCES:
		return "unreadable: permission denied";
	case -ENOTSUP:
		return "policy not supported by this build";
	default:
		return cistern_strerror(s->status);
	}
}

static void table(const struct cistern_segment_info *v, int n)
{
	printf("%-24s %-20s %-12s %8s %7s %8s  %s\n", "NAME", "POLICY", "SLOTS", "POP", "PROCS",
	       "AGE", "STATUS");
	uint64_t now = now_ns();
	for (int i = 0; i < n; i++) {
		const struct cistern_segment_info *s = &v[i];
		char slots[48], a[16], b[16], age[16], pop[24], procs[16];
		bool stale;
		const char *policy = "-";
		if (s->status == 0 || s->status == -EINPROGRESS) {
			policy = cistern_policy_name(s->config.policy);
			snprintf(slots, sizeof(slots), "%sx%s",
				 fmt_size(s->config.slot_count, a, sizeof(a)),
				 fmt_size(s->config.slot_size, b, sizeof(b)));
			/* A cold tier: its slots after a +, on disk. */
			if (s->config.cold_slots) {
				size_t l = strlen(slots);
				snprintf(slots + l, sizeof(slots) - l, "+%s",
					 fmt_size(s->config.cold_slots, a, sizeof(a)));
			}
			snprintf(pop, sizeof(pop), "%" PRIu64, s->population);
			snprintf(procs, sizeof(procs), "%u/%u", s->procs_live, s->procs_dead);
		} else {
			strcpy(slots, "-");
			strcpy(pop, "-");
			strcpy(procs, "-");
		}
		fmt_age(now > s->created_ns ? now - s->created_ns : 0, age, sizeof(age));
		printf("%-24s %-20s %-12s %8s %7s %8s  %s\n", s->name, policy, slots, pop, procs,
		       age, status_of(s, &stale));
	}
}

static void json(const struct cistern_segment_info *v, int n)
{
	putchar('[');
	for (int i = 0; i < n; i++) {
		const struct cistern_segment_info *s = &v[i];
		bool stale;
		const char *st = status_of(s, &stale);
		printf("%s\n  {\"name\": ", i ? "," : "");
		json_str(stdout, s->name);
		printf(", \"status\": ");
		json_str(stdout, st);
		printf(", \"stale\": %s, \"error\": %d", stale ? "true" : "false", s->status);
		if (s->status == 0 || s->status == -EINPROGRESS) {
			printf(", \"policy\": \"%s\", \"slots\": %" PRIu64
			       ", \"slot_size\": %" PRIu64 ", \"population\": %" PRIu64
			       ", \"procs_live\": %u, \"procs_dead\": %u"
			       ", \"closed\": %s",
			       cistern_policy_name(s->config.policy), s->config.slot_count,
			       s->config.slot_size, s->population, s->procs_live, s->procs_dead,
			       s->closed ? "true" : "false");
			printf(", \"cold_slots\": %" PRIu64 ", \"cold_population\": %" PRIu64,
			       s->config.cold_slots, s->cold_population);
		}
		printf(", \"file_size\": %" PRIu64
		       ", \"uid\": %u, \"mode\": \"0%o\", \"created_ns\": %" PRIu64 "}",
		       s->file_size, s->uid, s->mode, s->created_ns);
	}
	printf("%s]\n", n ? "\n" : "");
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool as_json = false;
	int o;
	while ((o = cli_getopt(&cmd_ls, argc, argv, "jh", opts)) != -1) {
		if (o == 'h')
			return cli_help(&cmd_ls);
		if (o == '?')
			return EXIT_USAGE;
		if (o == 'j')
			as_json = true;
	}
	if (optind != argc)
		return cli_usage(&cmd_ls, "ls takes no arguments");
	struct cistern_segment_info *v;
	int n = cistern_list(&v);
	if (n < 0) {
		cli_error(&cmd_ls, "/dev/shm", n, "cannot list segments");
		return EXIT_FAIL;
	}
	if (as_json)
		json(v, n);
	else
		table(v, n);
	free(v);
	return EXIT_OK;
}

const struct command cmd_ls = {"ls", run, "list every segment on the machine", usage};
