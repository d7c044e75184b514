/* SPDX-License-Identifier: MIT */
/* cmd_restore.c - `cistern restore`: rebuild a segment from a dump file. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>
#include <inttypes.h>

#include "cli.h"
#include <cistern/admin.h>

static const char usage[] =
	"Usage: cistern restore [--check] [--quiet] FILE [NAME]\n"
	"Rebuild a segment from dump FILE, as NAME (default: the name it was dumped\n"
	"from), which must not exist: same parameters, same samples with the same ids,\n"
	"metadata and seen counts, statistics carried over; readers can use it at once.\n"
	"The file is checked completely (every checksum) while it is loaded into a\n"
	"segment under a temporary name, which appears as NAME only when all is well:\n"
	"a damaged or truncated dump is refused and nothing is created, and so is a\n"
	"file that is not a cistern dump at all (a FIFO is not waited on), one\n"
	"holding a record the segment could not hold (say a sim_id past the sweep),\n"
	"and one whose stored name breaks the naming rule. The temporary name,\n"
	"restore-PID-RANDOM, is created exclusively: nobody can take it first.\n"
	"A dump in format 4 restores its samples' end-of-episode marks; a\n"
	"sim-paired-reservoir dumped in an older format restores them unmarked.\n"
	"A dump of a segment with a cold tier (format 3) restores with its cold\n"
	"tier: the cold file DIR/cistern.NAME.cold is made in the cold directory\n"
	"stored in the dump, with as many cold slots, and the cold samples go back\n"
	"with their metadata and seen counts. A cold directory that is missing,\n"
	"whose file system refuses direct I/O (O_DIRECT) or whose disk cannot hold\n"
	"the cold slots refuses the restore, and nothing is left behind; so does an\n"
	"existing file at the cold file's path (see 'cistern gc --cold-dir').\n"
	"A progress bar is drawn on standard error when it is a terminal.\n"
	"\n"
	"  -c, --check   only verify FILE (the same checks as a restore, the cold\n"
	"                samples' included) and describe it and the schema of its\n"
	"                samples, if it has one; create nothing\n"
	"  -q, --quiet   no summary line\n"
	"  -h, --help    show this help\n";

const struct command cmd_restore;

/*
 * A restore of a tiered dump that failed at its cold tier: said in the
 * directory's words (the library's -ENOENT would read "no segment"). false
 * if the error is not one of the cold tier's.
 */
static bool segment_exists(const char *name)
{
	char shm[PATH_MAX];
	snprintf(shm, sizeof(shm), "/dev/shm/cistern.%s", name);
	return access(shm, F_OK) == 0;
}

static bool cold_problem(int r, const struct cistern_dump_info *info, const char *name)
{
	const char *as = name ? name : info->name, *dir = info->cold_dir;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/cistern.%s.cold", dir, as);
	struct stat st;
	if (r == -ENOENT || r == -ENOTDIR || r == -EACCES || r == -EROFS) {
		if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, W_OK | X_OK) == 0)
			return false;
		cli_error(&cmd_restore, as, 0,
			  "cannot make the cold tier in %s: %s; nothing was created", esc(dir),
			  strerror(-r));
	} else if (r == -EINVAL) {
		cli_error(&cmd_restore, as, 0,
			  "the file system of the cold directory %s refuses direct I/O (O_DIRECT); "
			  "nothing was created",
			  esc(dir));
	} else if (r == -ENOSPC || r == -EFBIG || r == -EDQUOT) {
		cli_error(&cmd_restore, as, 0,
			  "the disk of the cold directory %s (or /dev/shm) cannot hold the "
			  "segment's %" PRIu64 " cold slots: %s; nothing was created",
			  esc(dir), info->config.cold_slots, strerror(-r));
	} else if (r == -EEXIST && lstat(path, &st) == 0 && !segment_exists(as)) {
		cli_error(&cmd_restore, as, 0,
			  "a file is in the way of its cold file: %s (a cold file whose segment "
			  "is gone? 'cistern gc --cold-dir %s' removes those); nothing was created",
			  esc(path), esc(dir));
	} else {
		return false;
	}
	return true;
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"check", no_argument, NULL, 'c'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool quiet = false, check = false;
	int o;
	while ((o = cli_getopt(&cmd_restore, argc, argv, "cqh", opts)) != -1) {
		if (o == 'h')
			return cli_help(&cmd_restore);
		if (o == '?')
			return EXIT_USAGE;
		if (o == 'c')
			check = true;
		else
			quiet = true;
	}
	int nargs = argc - optind;
	if (nargs < 1 || nargs > 2 || (check && nargs != 1))
		return cli_usage(&cmd_restore, nargs < 1 ? "missing FILE" : "too many arguments");
	const char *file = argv[optind], *name = nargs == 2 ? argv[optind + 1] : NULL;
	if (name) {
		int r = cistern_name_valid(name);
		if (r < 0)
			return cli_bad_name(&cmd_restore, name, r);
	}
	/*
	 * File errors in the file's words: the library's -ENOENT would read "no
	 * segment". Without waiting: a FIFO is refused by the library as no dump.
	 */
	int fd = open(file, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		cli_error(&cmd_restore, file, 0, "cannot read: %s", strerror(errno));
		return EXIT_FAIL;
	}
	close(fd);
	struct cistern_dump_info info = {0};
	int r;
	if (check) {
		r = cistern_dump_verify(file, &info);
	} else {
		struct progress p;
		progress_init(&p, "restore");
		r = cistern_restore(file, name, progress_cb, &p, &info);
		progress_end(&p);
	}
	if (r < 0) {
		if (r == -EBADMSG)
			cli_error(&cmd_restore, file, 0,
				  "damaged or truncated dump, refused; nothing was created");
		else if (r == -ENOMSG)
			cli_error(&cmd_restore, file, 0, "not a cistern dump; nothing was created");
		else if (r == -EPROTONOSUPPORT)
			cli_error(&cmd_restore, file, 0, "dump format not supported by this build");
		else if (!check && info.config.cold_slots && cold_problem(r, &info, name))
			;
		else if (check)
			cli_error(&cmd_restore, file, r, NULL);
		else if (name || info.name[0])
			cli_error(&cmd_restore, file, r, "cannot restore as '%s'",
				  name ? name : info.name);
		else
			cli_error(&cmd_restore, file, r, "cannot restore");
		return EXIT_FAIL;
	}
	if (!quiet || check) {
		char a[32], t[40];
		fprintf(check ? stdout : stderr,
			"%s %s: %" PRIu64 " samples (%s payload) of %s, policy %s, %" PRIu64
			" slots, dumped %s\n",
			check ? "ok" : "restored", esc(check ? file : (name ? name : info.name)),
			info.samples, fmt_bytes(info.payload_bytes, a, sizeof(a)), esc(info.name),
			cistern_policy_name(info.config.policy), info.config.slot_count,
			fmt_time(info.dumped_ns, t, sizeof(t)));
		if (info.config.cold_slots)
			fprintf(check ? stdout : stderr,
				"cold tier: %" PRIu64 " of the samples, %" PRIu64
				" cold slots in %s\n",
				info.cold_samples, info.config.cold_slots, esc(info.cold_dir));
		if (check && info.schema[0])
			printf("schema %s\n", esc(info.schema));
	}
	return EXIT_OK;
}

const struct command cmd_restore = {"restore", run, "rebuild a segment from a dump file", usage};
