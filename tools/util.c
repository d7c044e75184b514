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

/* Whether the locale (LC_ALL, else LC_CTYPE, else LANG) names UTF-8 as its character set. */
static bool utf8_locale(void)
{
	static _Thread_local int known = -1; /* -1: not looked at yet */
	if (known >= 0)
		return known;
	const char *v = NULL;
	static const char *const vars[] = {"LC_ALL", "LC_CTYPE", "LANG"};
	for (size_t i = 0; i < 3 && !(v && *v); i++)
		v = getenv(vars[i]);
	known = v && (strcasestr(v, "UTF-8") || strcasestr(v, "UTF8"));
	return known;
}

/*
 * The length of the UTF-8 character at s (n bytes left) if it may reach a
 * terminal as it is, else 0: an invalid, overlong or truncated sequence, a
 * surrogate, a C1 control (U+0080-U+009F, which some terminals obey), or a
 * character that reorders or breaks the text around it (U+200E, U+200F,
 * U+2028-U+202E, U+2066-U+2069), is not.
 */
static size_t utf8_char(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp, min;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f, min = 0x80;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f, min = 0x800;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07, min = 0x10000;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp <= 0x9f ||
	    cp == 0x200e || cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) ||
	    (cp >= 0x2066 && cp <= 0x2069))
		return 0;
	return len;
}

/* s escaped into out, which has room for 4 * strlen(s) + 1 bytes (\xNN is the longest). */
static void escape_into(char *out, const char *s)
{
	static const char named[] = "\\a\\b\\t\\n\\v\\f\\r"; /* bytes 7 to 13 */
	bool utf8 = utf8_locale();
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	char *o = out;
	for (size_t i = 0; i < n;) {
		unsigned char ch = p[i];
		size_t k;
		if (ch == '\\') {
			*o++ = '\\';
			*o++ = '\\';
			i++;
		} else if (ch >= 0x20 && ch < 0x7f) {
			*o++ = (char)ch;
			i++;
		} else if (ch >= 7 && ch <= 13) {
			memcpy(o, named + 2 * (ch - 7), 2);
			o += 2;
			i++;
		} else if (ch == 0x1b) {
			memcpy(o, "\\e", 2);
			o += 2;
			i++;
		} else if (utf8 && ch >= 0x80 && (k = utf8_char(p + i, n - i)) > 0) {
			memcpy(o, p + i, k);
			o += k;
			i += k;
		} else {
			static const char hex[] = "0123456789abcdef";
			*o++ = '\\';
			*o++ = 'x';
			*o++ = hex[ch >> 4];
			*o++ = hex[ch & 15];
			i++;
		}
	}
	*o = '\0';
}

const char *esc(const char *s)
{
	static _Thread_local char *ring[8];
	static _Thread_local unsigned next;
	if (!s)
		return "(null)";
	char *b = malloc(4 * strlen(s) + 1);
	if (!b)
		return "(text left out: out of memory)";
	escape_into(b, s);
	free(ring[next]);
	ring[next] = b;
	next = (next + 1) % 8;
	return b;
}

/* "cistern CMD: SUBJECT: " and the message, each escaped (NULL subject or fmt: left out). */
static void vmessage(const struct command *cmd, const char *subject, const char *fmt, va_list ap)
{
	fprintf(stderr, "cistern %s: ", cmd->name);
	if (subject)
		fprintf(stderr, "%s: ", esc(subject));
	if (!fmt)
		return;
	char *msg;
	if (vasprintf(&msg, fmt, ap) < 0) {
		fputs("(message left out: out of memory)", stderr);
		return;
	}
	fputs(esc(msg), stderr);
	free(msg);
}

void cli_error(const struct command *cmd, const char *subject, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmessage(cmd, subject, fmt, ap);
	va_end(ap);
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
	va_list ap;
	va_start(ap, fmt);
	vmessage(cmd, NULL, fmt, ap);
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

/*
 * JSON text is UTF-8 whatever the locale, so the locale plays no part here:
 * a character utf8_char() lets through is written as it is; a quote or a
 * backslash is escaped; every other byte (controls, DEL, the bytes of a C1
 * or bidirectional control, a byte that is not UTF-8) is written as
 * \u00XX, so that the output is valid JSON and holds no control byte.
 */
void json_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	fputc('"', f);
	for (size_t i = 0; i < n;) {
		size_t k;
		if (p[i] == '"' || p[i] == '\\') {
			fprintf(f, "\\%c", p[i]);
			i++;
		} else if (p[i] >= 0x20 && p[i] < 0x7f) {
			fputc(p[i], f);
			i++;
		} else if (p[i] >= 0x80 && (k = utf8_char(p + i, n - i)) > 0) {
			fwrite(p + i, 1, k, f);
			i += k;
		} else {
			fprintf(f, "\\u%04x", p[i]);
			i++;
		}
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
