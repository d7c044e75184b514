/* SPDX-License-Identifier: MIT */
/* util.c - the small things every command needs: messages, option parsing, numbers, formats. */
#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

void cli_error(const struct command *cmd, const char *subject, int err, const char *fmt, ...)
{
	fprintf(stderr, "cistern %s: ", cmd->name);
	if (subject)
		fprintf(stderr, "%s: ", subject);
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
	}
	if (err)
		fprintf(stderr, "%s%s", fmt ? ": " : "", cistern_strerror(err));
	fputc('\n', stderr);
}

/* The owner of /dev/shm/cistern.NAME (not following a link); -1 if it cannot be told. */
static long long owner_of(const char *name, mode_t *mode)
{
	char path[160];
	struct stat st;
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	if (lstat(path, &st) < 0)
		return -1;
	*mode = st.st_mode & 07777;
	return (long long)st.st_uid;
}

void cli_segment_error(const struct command *cmd, const char *name, int err, bool any_owner,
		       const char *fmt, ...)
{
	char what[512] = "";
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(what, sizeof(what), fmt, ap);
		va_end(ap);
	}
	const char *sep = fmt ? ": " : "";
	mode_t mode = 0;
	long long uid = err == -EACCES ? owner_of(name, &mode) : -1;
	if (uid < 0) {
		cli_error(cmd, name, err, fmt ? "%s" : NULL, what);
		return;
	}
	if (!any_owner && uid != 0 && (uid_t)uid != geteuid()) {
		struct passwd *pw = getpwuid((uid_t)uid);
		char who[96];
		if (pw)
			snprintf(who, sizeof(who), "user %s (uid %lld)", pw->pw_name, uid);
		else
			snprintf(who, sizeof(who), "uid %lld", uid);
		cli_error(cmd, name, 0,
			  "%s%sowned by %s, not by you or root: refused (anyone may create a "
			  "segment's name first, to collect what is put into it); to share a "
			  "segment between users on purpose, use --any-owner",
			  what, sep, who);
		return;
	}
	cli_error(cmd, name, 0,
		  "%s%spermission denied by the segment's mode (%04o, owner uid %lld)", what, sep,
		  (unsigned)mode, uid);
}

int cli_bad_name(const struct command *cmd, const char *name, int err)
{
	return cli_usage(cmd,
			 "bad segment name '%s': %s; a name is 1 to %d characters from "
			 "[A-Za-z0-9._-], starting with a letter or digit",
			 name, err == -ENAMETOOLONG ? "too long" : "not allowed", CISTERN_NAME_MAX);
}

int cli_usage(const struct command *cmd, const char *fmt, ...)
{
	fprintf(stderr, "cistern %s: ", cmd->name);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'cistern %s --help'.\n", cmd->name);
	return EXIT_USAGE;
}

int cli_help(const struct command *cmd)
{
	fputs(cmd->usage, stdout);
	return EXIT_OK;
}

int cli_getopt(const struct command *cmd, int argc, char **argv, const char *shortopts,
	       const struct option *longopts)
{
	/* Our own messages, naming the command, instead of getopt's. */
	opterr = 0;
	int longindex = -1;
	int o = getopt_long(argc, argv, shortopts, longopts, &longindex);
	if (o == '?' || o == ':') {
		/* optind has moved past the offending word (or its missing value). */
		const char *word = optind > 1 && optind - 1 < argc ? argv[optind - 1] : "";
		if (optopt && optopt < 128 && !(word[0] == '-' && word[1] == '-'))
			cli_usage(cmd, "option -%c: unknown, or its value is missing", optopt);
		else
			cli_usage(cmd, "option '%s': unknown, or its value is missing", word);
		return '?';
	}
	return o;
}

int parse_u64(const char *s, uint64_t *out)
{
	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;
	if (parse_u64(s, &v) < 0 || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int parse_size(const char *s, uint64_t *out)
{
	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	unsigned shift = 0;
	switch (*end) {
	case '\0':
		break;
	case 'k':
	case 'K':
		shift = 10;
		break;
	case 'm':
	case 'M':
		shift = 20;
		break;
	case 'g':
	case 'G':
		shift = 30;
		break;
	case 't':
	case 'T':
		shift = 40;
		break;
	default:
		return -EINVAL;
	}
	if (*end) {
		end++;
		/* Accept 4K, 4KB, 4KiB alike. */
		if (*end == 'i')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

int parse_timeout(const char *s, int *out)
{
	if (s && strcmp(s, "-1") == 0) {
		*out = -1;
		return 0;
	}
	uint64_t v;
	if (parse_u64(s, &v) < 0 || v > INT32_MAX)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

char *fmt_bytes(uint64_t n, char *buf, size_t size)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)n;
	int u = 0;
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, size, "%" PRIu64 " B", n);
	else
		snprintf(buf, size, "%.1f %s", v, unit[u]);
	return buf;
}

char *fmt_size(uint64_t n, char *buf, size_t size)
{
	static const char suffix[] = "KMGT";
	int u = -1;
	while (n >= 1024 && n % 1024 == 0 && u < 3) {
		n /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, size, "%" PRIu64, n);
	else
		snprintf(buf, size, "%" PRIu64 "%c", n, suffix[u]);
	return buf;
}

char *fmt_age(uint64_t ns, char *buf, size_t size)
{
	uint64_t s = ns / 1000000000u;
	if (s < 60)
		snprintf(buf, size, "%" PRIu64 "s", s);
	else if (s < 3600)
		snprintf(buf, size, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, size, "%" PRIu64 "h%02" PRIu64 "m", s / 3600, s / 60 % 60);
	else
		snprintf(buf, size, "%" PRIu64 "d%02" PRIu64 "h", s / 86400, s / 3600 % 24);
	return buf;
}

char *fmt_time(uint64_t ns, char *buf, size_t size)
{
	time_t t = (time_t)(ns / 1000000000u);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, size, "%Y-%m-%d %H:%M:%S UTC", &tm);
	return buf;
}

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

void prom_label(FILE *f, const char *s)
{
	fputc('"', f);
	for (const char *p = s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", f);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

void progress_init(struct progress *p, const char *what)
{
	p->what = what;
	p->tty = isatty(STDERR_FILENO);
	p->last_ns = 0;
	p->drawn = 0;
}

void progress_cb(uint64_t done, uint64_t total, void *arg)
{
	struct progress *p = arg;
	if (!p->tty)
		return;
	uint64_t t = now_ns();
	/* Ten redraws a second are plenty; always draw the end. */
	if (done < total && t - p->last_ns < 100000000u)
		return;
	p->last_ns = t;
	int pct = total ? (int)(done * 100 / total) : 100;
	int fill = pct * 30 / 100;
	char bar[31];
	memset(bar, '#', (size_t)fill);
	memset(bar + fill, '.', (size_t)(30 - fill));
	bar[30] = '\0';
	fprintf(stderr, "\r%s [%s] %3d%%", p->what, bar, pct);
	p->drawn = 1;
}

void progress_end(struct progress *p)
{
	if (p->tty && p->drawn)
		fputs("\r\033[K", stderr);
}
