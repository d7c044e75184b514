/* SPDX-License-Identifier: MIT */
/*
 * test_cli.c - the `cistern` command, driven as a user would: fork/exec of the
 * built binary (its path comes from meson as CISTERN_BIN), standard input fed
 * from memory, standard output and error captured, exit status checked.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>

#include <sys/prctl.h>

#include "helpers.h"
#include "core/handle.h"
#include "sys/crc32c.h"
#include "dumpfile.h"
#include <cistern/admin.h>

#ifndef CISTERN_BIN
#error "CISTERN_BIN must name the built cistern binary"
#endif

struct result {
	int status; /* exit status, or 128 + signal */
	char out[1 << 16];
	char err[1 << 13];
	size_t outlen;
};

static int mem_file(const char *name, const void *data, size_t len)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	if (len)
		cr_assert_eq(write(fd, data, len), (ssize_t)len);
	lseek(fd, 0, SEEK_SET);
	return fd;
}

static size_t slurp(int fd, char *buf, size_t cap)
{
	lseek(fd, 0, SEEK_SET);
	ssize_t n = read(fd, buf, cap - 1);
	n = n < 0 ? 0 : n;
	buf[n] = '\0';
	close(fd);
	return (size_t)n;
}

/*
 * Seconds a command may run before SIGALRM kills it (0: no limit). The alarm
 * survives execve(): a command that waits for ever fails its test (status
 * 128 + SIGALRM) instead of hanging it.
 */
static unsigned run_alarm;

/* Start the binary with argv (NULL-terminated, without the program name). */
static pid_t start(const char *in, size_t inlen, int out, int err, char *const *args)
{
	int infd = mem_file("in", in, inlen);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (run_alarm)
			alarm(run_alarm);
		dup2(infd, 0);
		dup2(out, 1);
		dup2(err, 2);
		char *argv[32] = {(char *)CISTERN_BIN};
		for (int i = 0; args[i] && i < 30; i++)
			argv[i + 1] = args[i];
		execv(CISTERN_BIN, argv);
		_exit(127);
	}
	close(infd);
	return pid;
}

static int status_of(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static struct result *run_in(const char *in, size_t inlen, const char *first, ...)
{
	static struct result r;
	char *args[32];
	int n = 0;
	va_list ap;
	va_start(ap, first);
	for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
		args[n++] = (char *)(uintptr_t)a;
	va_end(ap);
	args[n] = NULL;
	int out = mem_file("out", NULL, 0), err = mem_file("err", NULL, 0);
	pid_t pid = start(in, inlen, out, err, args);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	r.status = status_of(st);
	r.outlen = slurp(out, r.out, sizeof(r.out));
	slurp(err, r.err, sizeof(r.err));
	return &r;
}

#define run(...) run_in(NULL, 0, __VA_ARGS__, NULL)

static void uname_(char *buf, size_t size, const char *tag)
{
	snprintf(buf, size, "t-cli-%s-%d", tag, (int)getpid());
	cistern_unlink(buf);
}

/* A fresh segment named for tag (into name) with configuration cfg. */
static struct cistern *make_with(const char *tag, char *name, size_t size,
				 struct cistern_config cfg)
{
	uname_(name, size, tag);
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	return c;
}

static struct cistern *make(const char *tag, char *name, size_t size, uint64_t slots)
{
	return make_with(tag, name, size,
			 (struct cistern_config){.slot_size = 1024, .slot_count = slots});
}

/* The configuration of the segment name, as a read-only handle reads it. */
static struct cistern_config created_config(const char *name)
{
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), 0);
	struct cistern_config cfg;
	cr_assert_eq(cistern_config_get(c, &cfg), 0);
	cistern_detach(c);
	return cfg;
}

static void cleanup(struct cistern *c, const char *name)
{
	if (c)
		cistern_detach(c);
	cistern_unlink(name);
}

static bool exists(const char *name)
{
	char path[128];
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	return access(path, F_OK) == 0;
}

/* ---- usage and help ---------------------------------------------------- */

Test(usage, no_arguments_is_bad_usage)
{
	cr_assert_eq(run_in(NULL, 0, NULL)->status, 2);
}

Test(usage, an_unknown_command_is_bad_usage)
{
	struct result *r = run("frobnicate");
	cr_assert_eq(r->status, 2);
	cr_assert(strstr(r->err, "frobnicate"), "%s", r->err);
}

Test(usage, an_unknown_option_is_bad_usage)
{
	struct result *r = run("ls", "--bogus");
	cr_assert_eq(r->status, 2);
	cr_assert(strstr(r->err, "--bogus"), "%s", r->err);
}

Test(usage, a_missing_name_is_bad_usage)
{
	cr_assert_eq(run("inspect")->status, 2);
	cr_assert_eq(run("dump", "x")->status, 2);
	cr_assert_eq(run("get")->status, 2);
}

Test(usage, a_bad_number_is_bad_usage)
{
	cr_assert_eq(run("create", "x", "--slots", "many")->status, 2);
	cr_assert_eq(run("get", "x", "-n", "-3")->status, 2);
}

Test(usage, an_invalid_segment_name_is_bad_usage)
{
	struct result *r = run("inspect", "../etc");
	cr_assert_eq(r->status, 2);
}

Test(help, every_command_has_help_three_ways)
{
	const char *cmds[] = {"create", "ls", "inspect", "put",  "get",
			      "close",  "rm", "gc",      "dump", "restore"};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char want[64];
		snprintf(want, sizeof(want), "Usage: cistern %s", cmds[i]);
		struct result *r = run(cmds[i], "--help");
		cr_assert_eq(r->status, 0, "%s --help", cmds[i]);
		cr_assert(strstr(r->out, want), "%s --help: %s", cmds[i], r->out);
		r = run("help", cmds[i]);
		cr_assert_eq(r->status, 0);
		cr_assert(strstr(r->out, want), "help %s", cmds[i]);
		r = run(cmds[i], "-h");
		cr_assert_eq(r->status, 0);
	}
}

Test(help, overview_lists_every_command_and_version_prints)
{
	struct result *r = run("--help");
	cr_assert_eq(r->status, 0);
	cr_assert(strstr(r->out, "restore"));
	r = run("--version");
	cr_assert_eq(r->status, 0);
	cr_assert(strncmp(r->out, "cistern 0.", 10) == 0, "%s", r->out);
}

/* ---- create and ls ----------------------------------------------------- */

Test(create, makes_a_segment_with_the_given_parameters)
{
	char name[64];
	uname_(name, sizeof(name), "create");
	struct result *r = run("create", name, "--slots", "2K", "--slot-size", "4K", "--mode",
			       "0640", "--producers", "2");
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern_config cfg = created_config(name);
	cr_assert_eq(cfg.slot_count, 2048);
	cr_assert_eq(cfg.slot_size, 4096);
	cr_assert_eq(cfg.mode, 0640);
	cr_assert_eq(cfg.expected_producers, 2);
	cistern_unlink(name);
}

Test(create, a_cold_tier_is_made_shown_and_removed_with_the_segment)
{
	char name[64], dir[64], file[160];
	uname_(name, sizeof(name), "cold");
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-cli-cold-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/cistern.%s.cold", dir, name);
	struct result *r = run("create", name, "--policy", "reservoir", "--watermark", "1",
			       "--slots", "8", "--cold-slots", "32", "--cold-dir", dir);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert_eq(access(file, F_OK), 0, "no cold file %s", file);
	r = run("inspect", "--json", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "\"cold\": {\"slots\": 32"), "%s", r->out);
	/* Nothing moved to or from the file yet. */
	cr_assert(strstr(r->out, ", \"bytes_written\": 0, \"bytes_read\": 0, \"write_wait_ns\": 0, "
				 "\"read_wait_ns\": 0}"),
		  "%s", r->out);
	r = run("ls");
	cr_assert(strstr(r->out, "8x1K+32") || strstr(r->out, "8x4K+32"), "%s", r->out);
	r = run("rm", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert_neq(access(file, F_OK), 0, "the cold file outlived rm");
	/* A prioritized segment refuses a tier, saying why in the options' terms. */
	r = run("create", name, "--policy", "prioritized", "--watermark", "1", "--slots", "8",
		"--cold-slots", "32", "--cold-dir", dir);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "prioritized takes no cold tier"), "%s", r->err);
	cr_assert(!exists(name));
	r = run("create", name, "--policy", "reservoir", "--watermark", "1", "--cold-slots", "32");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--cold-slots needs a --cold-dir"), "%s", r->err);
	rmdir(dir);
}

/* FIRO and fifo-evict-reservoir take a tier too: each makes its cold file. */
Test(create, firo_and_fifo_evict_take_a_cold_tier)
{
	const char *policies[] = {"firo", "fifo-evict-reservoir"};
	char dir[64];
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-cli-cold-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	for (size_t i = 0; i < 2; i++) {
		char name[64], file[160];
		uname_(name, sizeof(name), i ? "coldfe" : "coldfiro");
		snprintf(file, sizeof(file), "%s/cistern.%s.cold", dir, name);
		struct result *r = run("create", name, "--policy", policies[i], "--watermark", "1",
				       "--slots", "8", "--cold-slots", "16", "--cold-dir", dir);
		int status = r->status;
		bool made = access(file, F_OK) == 0;
		char *err = strdup(r->err);
		r = run("inspect", "--json", name);
		bool shown = strstr(r->out, "\"cold\": {\"slots\": 16") != NULL;
		run("rm", name);
		cr_assert_eq(status, 0, "%s: %s", policies[i], err);
		free(err);
		cr_assert(made, "%s: no cold file %s", policies[i], file);
		cr_assert(shown, "%s: %s", policies[i], r->out);
	}
	rmdir(dir);
}

Test(create, a_fifo_takes_a_cold_tier_shown_and_removed_with_it)
{
	char name[64], dir[64], file[160];
	uname_(name, sizeof(name), "fcold");
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-cli-fcold-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/cistern.%s.cold", dir, name);
	struct result *r = run("create", name, "--policy", "fifo", "--slots", "8", "--cold-slots",
			       "32", "--cold-dir", dir);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert_eq(access(file, F_OK), 0, "no cold file %s", file);
	r = run("inspect", "--json", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "\"cold\": {\"slots\": 32"), "%s", r->out);
	r = run("rm", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert_neq(access(file, F_OK), 0, "the cold file outlived rm");
	rmdir(dir);
}

Test(create, a_cold_dir_in_memory_is_taken_with_a_warning)
{
	char name[64], dir[64];
	uname_(name, sizeof(name), "tmpcold");
	/* /dev/shm is a tmpfs. */
	snprintf(dir, sizeof(dir), "/dev/shm/cli-tmpcold-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	struct result *r = run("create", name, "--policy", "reservoir", "--watermark", "1",
			       "--slots", "8", "--cold-slots", "8", "--cold-dir", dir);
	int status = r->status;
	bool warned = strstr(r->err, "in memory (tmpfs)") != NULL;
	run("rm", name);
	rmdir(dir);
	cr_assert_eq(status, 0, "%s", r->err);
	cr_assert(warned, "%s", r->err);
}

Test(create, a_cold_tier_on_disk_is_made_without_a_warning)
{
	char name[64], dir[64];
	uname_(name, sizeof(name), "diskcold");
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-cli-cold-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	struct result *r = run("create", name, "--policy", "reservoir", "--watermark", "1",
			       "--slots", "8", "--cold-slots", "8", "--cold-dir", dir);
	int status = r->status;
	bool quiet = r->err[0] == 0;
	run("rm", name);
	rmdir(dir);
	cr_assert_eq(status, 0);
	cr_assert(quiet, "%s", r->err);
}

Test(create, a_cold_tier_without_io_uring_is_refused_with_the_reason)
{
	char name[64], dir[64];
	uname_(name, sizeof(name), "nouring");
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-cli-cold-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	/* The filter passes to the command run below. */
	cr_assert_eq(forbid_io_uring(), 0);
	struct result *r = run("create", name, "--policy", "reservoir", "--watermark", "1",
			       "--slots", "8", "--cold-slots", "32", "--cold-dir", dir);
	rmdir(dir);
	cr_assert_eq(r->status, 1, "%s", r->err);
	cr_assert(strstr(r->err, "io_uring"), "%s", r->err);
	cr_assert(!exists(name));
}

Test(create, single_role_flags_reach_the_segment_and_inspect_shows_them)
{
	char name[64];
	uname_(name, sizeof(name), "sole");
	struct result *r = run("create", name, "--slots", "8", "--single-producer",
			       "--single-reader");
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern_config cfg = created_config(name);
	cr_assert_eq(cfg.flags, CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER);
	r = run("inspect", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "single-producer") && strstr(r->out, "single-reader"), "%s",
		  r->out);
	cistern_unlink(name);
	uname_(name, sizeof(name), "solebad");
	r = run("create", name, "--policy", "firo", "--watermark", "2", "--slots", "8",
		"--single-reader");
	cr_assert_eq(r->status, 1, "firo takes no single reader");
	cr_assert(strstr(r->err, "--single-reader does not apply to FIRO"), "%s", r->err);
	cr_assert(!exists(name));
	r = run("create", name, "--policy", "reservoir", "--watermark", "2", "--slots", "8",
		"--single-producer");
	cr_assert_eq(r->status, 1, "a single producer is for fifo only");
	cr_assert(!exists(name));
	r = run("create", name, "--policy", "batch-reservoir", "--watermark", "4", "--batch-size",
		"4", "--slots", "8", "--single-reader");
	cr_assert_eq(r->status, 0, "the reservoirs take a single reader: %s", r->err);
	cfg = created_config(name);
	cr_assert_eq(cfg.flags, CISTERN_SINGLE_READER);
	cistern_unlink(name);
}

/*
 * Below one read per put, a reservoir whose puts evict only samples that
 * were read stops once full: create refuses it, naming the option, and makes
 * nothing; a lossy FIFOEvictReservoir, whose puts need no read, takes it.
 */
Test(create, refuses_fewer_reads_than_puts_where_puts_need_reads)
{
	char name[64];
	uname_(name, sizeof(name), "rpp");
	const char *policies[] = {"reservoir", "batch-reservoir", "fifo-evict-reservoir"};
	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++) {
		struct result *r = run("create", name, "--policy", policies[i], "--watermark", "8",
				       "--batch-size", "4", "--slots", "64", "--reads-per-put",
				       "0.5");
		cr_assert_eq(r->status, 1, "%s took 0.5 reads per put", policies[i]);
		cr_assert(strstr(r->err, "--reads-per-put must be 0 (off) or at least 1"), "%s: %s",
			  policies[i], r->err);
		cr_assert(!exists(name), "%s", policies[i]);
	}
	struct result *r = run("create", name, "--policy", "fifo-evict-reservoir", "--lossy",
			       "--watermark", "8", "--slots", "64", "--reads-per-put", "0.5");
	cr_assert_eq(r->status, 0, "lossy: %s", r->err);
	cr_assert(exists(name));
	cistern_unlink(name);
}

Test(create, max_times_sampled_reaches_the_segment_and_inspect_shows_it)
{
	char name[64];
	uname_(name, sizeof(name), "cap");
	struct result *r = run("create", name, "--policy", "reservoir", "--slots", "16",
			       "--watermark", "1", "--max-times-sampled", "4");
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern_config cfg = created_config(name);
	cr_assert_eq(cfg.max_times_sampled, 4);
	r = run("inspect", name);
	cr_assert(strstr(r->out, "max-times-sampled 4"), "%s", r->out);
	r = run("inspect", "--json", name);
	cr_assert(strstr(r->out, "\"max_times_sampled\": 4"), "%s", r->out);
	cistern_unlink(name);
}

/* FIRO reads each sample pseudo_epochs times: create refuses a cap, naming the option. */
Test(create, max_times_sampled_is_refused_for_firo_naming_the_option)
{
	char name[64];
	uname_(name, sizeof(name), "capfiro");
	struct result *r = run("create", name, "--policy", "firo", "--slots", "16", "--watermark",
			       "1", "--max-times-sampled", "2");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--max-times-sampled applies to the reservoir kinds only"), "%s",
		  r->err);
	cr_assert(!exists(name));
}

Test(create, prioritized_takes_alpha_beta_and_epsilon)
{
	char name[64];
	uname_(name, sizeof(name), "prio");
	struct result *r = run("create", name, "--policy", "prioritized", "--slots", "16",
			       "--watermark", "2", "--alpha", "0.6", "--beta", "0.4", "--epsilon",
			       "0.01");
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern_config cfg = created_config(name);
	cr_assert_eq(cfg.policy, CISTERN_PRIORITIZED);
	cr_assert_eq(cfg.alpha, 0.6);
	cr_assert_eq(cfg.beta, 0.4);
	cr_assert_eq(cfg.epsilon, 0.01);
	cistern_unlink(name);
}

Test(create, prioritized_takes_a_sweep_size_for_windows_and_inspect_shows_it)
{
	char name[64];
	uname_(name, sizeof(name), "prio-win");
	struct result *r = run("create", name, "--policy", "prioritized", "--slots", "16",
			       "--watermark", "1", "--sweep-size", "3", "--time-steps", "10");
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern_config cfg = created_config(name);
	cr_assert_eq(cfg.sweep_size, 3);
	cr_assert_eq(cfg.nb_time_steps, 10);
	r = run("inspect", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "sweep-size 3  time-steps 10"), "%s", r->out);
	cistern_unlink(name);
}

Test(create, a_bad_alpha_is_refused_by_its_option_name)
{
	char name[64];
	uname_(name, sizeof(name), "prio-bad");
	struct result *r = run("create", name, "--policy", "prioritized", "--watermark", "2",
			       "--alpha", "9");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--alpha must be a number from 0 to 8"), "%s", r->err);
	cr_assert(!exists(name));
	r = run("create", name, "--watermark", "2", "--beta", "0.5");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--alpha, --beta and --epsilon apply to the prioritized policy"),
		  "%s", r->err);
	cr_assert(!exists(name));
}

/* A prioritized segment whose parameters inspect shows: alpha 1, beta 0.5. */
static struct cistern_config inspected_prioritized(void)
{
	return (struct cistern_config){.policy = CISTERN_PRIORITIZED,
				       .slot_count = 8,
				       .slot_size = 64,
				       .watermark = 1,
				       .alpha = 1,
				       .beta = 0.5};
}

Test(inspect, shows_the_priority_parameters_and_the_total)
{
	char name[64];
	struct cistern *c = make_with("prio-insp", name, sizeof(name), inspected_prioritized());
	cr_assert_eq(cistern_put_prioritized(c, "a", 1, NULL, 2.5, 0), 0);
	cr_assert_eq(cistern_put_prioritized(c, "b", 1, NULL, 4, 0), 0);
	struct result *r = run("inspect", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "alpha 1  beta 0.5  epsilon 0"), "%s", r->out);
	cr_assert(strstr(r->out, "priorities total 6.5 "), "%s", r->out);
	cr_assert(strstr(r->out, "largest seen 4"), "%s", r->out);
	r = run("inspect", name, "--json");
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "\"priorities\": {\"alpha\": 1, \"beta\": 0.5, \"epsilon\": 0, "
				 "\"total\": 6.5, \"max_priority\": 4"),
		  "%s", r->out);
	cleanup(c, name);
}

Test(create, dead_producer_done_reaches_the_segment_and_needs_producers)
{
	char name[64];
	uname_(name, sizeof(name), "deaddone");
	struct result *r = run("create", name, "--slots", "8", "--dead-producer-done");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--dead-producer-done needs --producers above 0"), "%s", r->err);
	cr_assert(!exists(name));
	r = run("create", name, "--slots", "8", "--producers", "2", "--dead-producer-done");
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern_config cfg = created_config(name);
	cr_assert_eq(cfg.flags, CISTERN_DEAD_PRODUCER_DONE);
	cr_assert_eq(cfg.expected_producers, 2);
	cistern_unlink(name);
}

Test(create, a_taken_name_fails_and_says_so)
{
	char name[64];
	struct cistern *c = make("taken", name, sizeof(name), 8);
	struct result *r = run("create", name);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, name) && strstr(r->err, "already exists"), "%s", r->err);
	cleanup(c, name);
}

Test(create, a_policy_this_build_lacks_is_reported_clearly)
{
	char name[64];
	uname_(name, sizeof(name), "nopol");
	struct cistern_config cfg = {.slot_count = 8, .policy = CISTERN_RESERVOIR, .watermark = 2};
	struct cistern *c;
	if (cistern_create(name, &cfg, &c) == 0) {
		cleanup(c, name);
		cr_skip_test("this build implements the reservoir policy");
	}
	struct result *r = run("create", name, "--policy", "reservoir", "--slots", "8",
			       "--watermark", "2");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "not implemented"), "%s", r->err);
	cr_assert(!exists(name));
}

Test(create, parameters_the_policy_refuses_fail)
{
	char name[64];
	uname_(name, sizeof(name), "badparam");
	struct result *r = run("create", name, "--watermark", "99", "--slots", "8");
	cr_assert_eq(r->status, 1);
	cr_assert(!exists(name));
}

/* A policy's missing parameter is named, not left to guesswork. */
Test(create, a_refusal_names_the_parameter_that_is_wrong)
{
	char name[64];
	uname_(name, sizeof(name), "whyparam");
	struct result *r = run("create", name, "--policy", "firo", "--slots", "8");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, name) &&
			  strstr(r->err, "FIRO needs a --watermark above 0 and below --slots"),
		  "%s", r->err);
	r = run("create", name, "--policy", "sim-paired-reservoir", "--slots", "8", "--watermark",
		"2", "--time-steps", "4");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "needs a --sweep-size"), "%s", r->err);
	r = run("create", name, "--policy", "batch-reservoir", "--slots", "8", "--watermark", "2",
		"--batch-size", "4");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--watermark of at least --batch-size"), "%s", r->err);
	cr_assert(!exists(name));
}

Test(ls, lists_a_segment_with_policy_size_population_and_processes)
{
	char name[64];
	struct cistern *c = make("ls", name, sizeof(name), 8);
	cistern_put(c, "x", 1, NULL, 0);
	struct result *r = run("ls");
	cr_assert_eq(r->status, 0);
	char *line = strstr(r->out, name);
	cr_assert_not_null(line, "%s", r->out);
	char *eol = strchr(line, '\n');
	*eol = '\0';
	cr_assert(strstr(line, "fifo") && strstr(line, "8x1K") && strstr(line, " 1/0 ") &&
			  strstr(line, "ok"),
		  "%s", line);
	cleanup(c, name);
}

/* Created for later, or left by processes that detached: idle, which gc keeps. */
Test(ls, a_segment_nobody_is_attached_to_is_idle_not_stale)
{
	char name[64], want[96];
	struct cistern *c = make("lsidle", name, sizeof(name), 8);
	cistern_detach(c);
	struct result *r = run("ls");
	char *line = strstr(r->out, name);
	cr_assert_not_null(line);
	*strchr(line, '\n') = '\0';
	cr_assert(strstr(line, "idle") && !strstr(line, "stale"), "%s", line);
	r = run("ls", "--json");
	snprintf(want, sizeof(want), "\"%s\"", name);
	line = strstr(r->out, want);
	cr_assert_not_null(line, "%s", r->out);
	cr_assert(strstr(line, "\"stale\": false"), "%s", line);
	cleanup(NULL, name);
}

/* Every process that was attached died without detaching: stale, which gc removes. */
Test(ls, a_segment_whose_processes_all_died_is_stale)
{
	char name[64];
	struct cistern *c = make("lsdead", name, sizeof(name), 8);
	cistern_detach(c);
	pid_t pid = fork();
	if (pid == 0) {
		struct cistern *d;
		_exit(cistern_attach(name, &d) == 0 ? 0 : 1); /* dies attached */
	}
	int st;
	waitpid(pid, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct result *r = run("ls");
	char *line = strstr(r->out, name);
	cr_assert_not_null(line);
	*strchr(line, '\n') = '\0';
	cr_assert(strstr(line, "stale: every process died"), "%s", line);
	cleanup(NULL, name);
}

Test(ls, json_output_names_the_segment)
{
	char name[64], want[96];
	struct cistern *c = make("lsjson", name, sizeof(name), 8);
	struct result *r = run("ls", "--json");
	cr_assert_eq(r->status, 0);
	snprintf(want, sizeof(want), "{\"name\": \"%s\"", name);
	cr_assert(strstr(r->out, want), "%s", r->out);
	cr_assert_eq(r->out[0], '[');
	cleanup(c, name);
}

/* ---- put, get, close --------------------------------------------------- */

Test(put, each_file_is_one_sample_with_the_given_metadata)
{
	char name[64], f1[96], f2[96];
	struct cistern *c = make("putf", name, sizeof(name), 8);
	snprintf(f1, sizeof(f1), "/tmp/cistern-cli-%d-1", (int)getpid());
	snprintf(f2, sizeof(f2), "/tmp/cistern-cli-%d-2", (int)getpid());
	FILE *f = fopen(f1, "w");
	fputs("first\nsample", f);
	fclose(f);
	f = fopen(f2, "w");
	fputs("second", f);
	fclose(f);
	struct result *r = run("put", name, "--sim-id", "7", "--time-step", "9", f1, f2);
	cr_assert_eq(r->status, 0, "%s", r->err);
	char buf[64];
	struct cistern_meta m;
	ssize_t n = cistern_get(c, buf, sizeof(buf), &m, 0);
	cr_assert_eq(n, 12);
	cr_assert_eq(memcmp(buf, "first\nsample", 12), 0);
	cr_assert_eq(m.sim_id, 7);
	cr_assert_eq(m.time_step, 9);
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), &m, 0), 6);
	unlink(f1);
	unlink(f2);
	cleanup(c, name);
}

Test(put, priority_gives_every_sample_its_priority)
{
	char name[64];
	struct cistern *c = make_with("put-prio", name, sizeof(name),
				      (struct cistern_config){.policy = CISTERN_PRIORITIZED,
							      .slot_count = 8,
							      .slot_size = 64,
							      .watermark = 1,
							      .alpha = 1});
	struct result *r = run_in("a\nb\n", 4, "put", name, "--lines", "--priority", "3", NULL);
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	cr_assert_eq(info.total, 6, "total %g", info.total);
	r = run_in("a", 1, "put", name, "--priority", "nan", NULL);
	cr_assert_eq(r->status, 2);
	cleanup(c, name);
}

/* A segment of policy p read in windows of two time steps of one simulation. */
static struct cistern_config windows_of_two(enum cistern_policy p)
{
	return (struct cistern_config){.policy = p,
				       .slot_count = 8,
				       .slot_size = 8,
				       .watermark = 1,
				       .sweep_size = 2,
				       .nb_time_steps = 4};
}

Test(put, end_of_episode_marks_the_samples)
{
	char name[64];
	struct cistern *c = make_with("put-end", name, sizeof(name),
				      windows_of_two(CISTERN_SIM_PAIRED_RESERVOIR));
	struct result *r = run_in("a", 1, "put", name, "-s", "1", "-t", "2", NULL);
	cr_assert_eq(r->status, 0, "%s", r->err);
	r = run_in("b", 1, "put", name, "-s", "1", "-t", "3", "--end-of-episode", NULL);
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern_sample w[2];
	cr_assert_eq(cistern_acquire_window(c, w, 2, 1, 0), 0);
	cr_assert_eq(w[0].meta.flags, 0);
	cr_assert_eq(w[1].meta.flags, CISTERN_META_END_OF_EPISODE);
	cr_assert_eq(cistern_release_window(c, w, 2), 0);
	cleanup(c, name);
}

Test(put, end_of_episode_goes_with_a_priority_into_prioritized_windows)
{
	char name[64];
	struct cistern *c = make_with("put-end-prio", name, sizeof(name),
				      windows_of_two(CISTERN_PRIORITIZED));
	struct result *r = run_in("a", 1, "put", name, "-s", "1", "-t", "2", "--priority", "3",
				  NULL);
	cr_assert_eq(r->status, 0, "%s", r->err);
	r = run_in("b", 1, "put", name, "-s", "1", "-t", "3", "--end-of-episode", "--priority", "5",
		   NULL);
	cr_assert_eq(r->status, 0, "%s", r->err);
	char buf[2 * 8];
	struct cistern_meta meta[2];
	double w;
	cr_assert_eq(cistern_get_prioritized_windows(c, buf, 8, 1, 2, 1, NULL, meta, NULL, &w, 0),
		     1);
	cr_assert_eq(meta[0].flags, 0);
	cr_assert_eq(meta[1].flags, CISTERN_META_END_OF_EPISODE);
	cleanup(c, name);
}

Test(put, priority_is_refused_on_other_policies)
{
	char name[64];
	struct cistern *c = make("put-prio-fifo", name, sizeof(name), 4);
	struct result *r = run_in("x", 1, "put", name, "--priority", "2", NULL);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--priority needs a prioritized segment, not fifo"), "%s", r->err);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 0);
	cleanup(c, name);
}

Test(put, lines_of_standard_input_are_samples)
{
	char name[64];
	struct cistern *c = make("putl", name, sizeof(name), 8);
	const char in[] = "one\ntwo\n\nfour";
	struct result *r = run_in(in, strlen(in), "put", name, "--lines", NULL);
	cr_assert_eq(r->status, 0, "%s", r->err);
	const char *want[] = {"one", "two", "", "four"};
	for (int i = 0; i < 4; i++) {
		char buf[16];
		ssize_t n = cistern_get(c, buf, sizeof(buf), NULL, 0);
		cr_assert_eq(n, (ssize_t)strlen(want[i]));
		cr_assert_eq(memcmp(buf, want[i], (size_t)n), 0);
	}
	cleanup(c, name);
}

Test(put, a_file_larger_than_a_slot_fails_and_says_so)
{
	char name[64];
	struct cistern *c = make("putbig", name, sizeof(name), 8);
	char big[2000];
	memset(big, 'x', sizeof(big));
	struct result *r = run_in(big, sizeof(big), "put", name, NULL);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "larger than the slot size"), "%s", r->err);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.puts, 0);
	cleanup(c, name);
}

/* The lines before an oversized one are in, and the error says where to start again. */
Test(put, an_oversized_line_is_named_with_what_was_put_before_it)
{
	char name[64];
	struct cistern *c = make_with("putline", name, sizeof(name),
				      (struct cistern_config){.slot_size = 4, .slot_count = 8});
	const char in[] = "ab\ncd\nabcdefgh\nef\n";
	struct result *r = run_in(in, sizeof(in) - 1, "put", name, "--lines", NULL);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "line 3 of standard input is 8 bytes") &&
			  strstr(r->err, "lines 1-2 were put, none after it"),
		  "%s", r->err);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.puts, 2);
	cleanup(c, name);
}

/* Killed while it waits for its first line, `cistern put` counts as a producer that died. */
Test(put, killed_before_its_first_sample_it_counts_as_a_dead_producer, .timeout = 60)
{
	char name[64];
	struct cistern *c = make_with(
		"putdied", name, sizeof(name),
		(struct cistern_config){.slot_size = 8, .slot_count = 8, .expected_producers = 1});
	int in[2];
	cr_assert_eq(pipe(in), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(in[0], 0);
		close(in[0]);
		close(in[1]);
		execl(CISTERN_BIN, CISTERN_BIN, "put", name, "--lines", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	/* Attached once the table holds two entries; then it waits on the open pipe. */
	struct cistern_proc_info pi[4];
	while (cistern_procs_get(c, pi, 4) < 2) {
		int st;
		cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "cistern put ended on its own");
		usleep(1000);
	}
	kill_and_reap(pid);
	close(in[1]);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 0);
	cr_assert_eq(st.producers_died, 1);
	cleanup(c, name);
}

Test(put, into_a_missing_segment_fails_naming_it)
{
	struct result *r = run_in("x", 1, "put", "t-cli-no-such-segment", NULL);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "t-cli-no-such-segment: no segment"), "%s", r->err);
}

Test(put, into_a_single_producer_segment_held_elsewhere_fails_saying_why)
{
	char name[64];
	struct cistern *c = make_with("putsole", name, sizeof(name),
				      (struct cistern_config){.slot_size = 64,
							      .slot_count = 8,
							      .flags = CISTERN_SINGLE_PRODUCER});
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0, "this handle takes the role");
	struct result *r = run_in("x", 1, "put", name, NULL);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, name) && strstr(r->err, "single producer or reader role"), "%s",
		  r->err);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.puts, 1, "the refused put left nothing");
	cleanup(c, name);
}

Test(get, writes_payloads_separated_by_newlines)
{
	char name[64];
	struct cistern *c = make("get", name, sizeof(name), 8);
	cistern_put(c, "alpha", 5, NULL, 0);
	cistern_put(c, "beta", 4, NULL, 0);
	struct result *r = run("get", name, "-n", "2");
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert_str_eq(r->out, "alpha\nbeta\n");
	cleanup(c, name);
}

Test(get, null_separator_option)
{
	char name[64];
	struct cistern *c = make("get0", name, sizeof(name), 8);
	cistern_put(c, "a\nb", 3, NULL, 0);
	cistern_put(c, "c", 1, NULL, 0);
	struct result *r = run("get", name, "-n", "2", "-0");
	cr_assert_eq(r->status, 0);
	cr_assert_eq(r->outlen, 6);
	cr_assert_eq(memcmp(r->out, "a\nb\0c\0", 6), 0);
	cleanup(c, name);
}

Test(get, a_timeout_before_the_count_is_a_failure)
{
	char name[64];
	struct cistern *c = make("getto", name, sizeof(name), 8);
	cistern_put(c, "only", 4, NULL, 0);
	struct result *r = run("get", name, "-n", "2", "--timeout", "50");
	cr_assert_eq(r->status, 1);
	cr_assert_str_eq(r->out, "only\n");
	cr_assert(strstr(r->err, "timed out"), "%s", r->err);
	cleanup(c, name);
}

Test(get, count_zero_drains_until_end_of_data)
{
	char name[64];
	struct cistern *c = make("getall", name, sizeof(name), 8);
	cistern_put(c, "1", 1, NULL, 0);
	cistern_put(c, "2", 1, NULL, 0);
	struct result *r = run("close", name);
	cr_assert_eq(r->status, 0);
	r = run("get", name, "-n", "0");
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert_str_eq(r->out, "1\n2\n");
	cleanup(c, name);
}

Test(get, end_of_data_before_the_count_is_a_failure)
{
	char name[64];
	struct cistern *c = make("geteod", name, sizeof(name), 8);
	cistern_put(c, "1", 1, NULL, 0);
	cistern_close_reception(c);
	struct result *r = run("get", name, "-n", "3");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "end of data after 1 of 3"), "%s", r->err);
	cleanup(c, name);
}

Test(close, put_after_close_fails_with_reception_closed)
{
	char name[64];
	struct cistern *c = make("close", name, sizeof(name), 8);
	cr_assert_eq(run("close", name)->status, 0);
	struct stat;
	struct result *r = run_in("x", 1, "put", name, NULL);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "reception is closed"), "%s", r->err);
	cleanup(c, name);
}

/* ---- inspect ----------------------------------------------------------- */

static uint8_t *snapshot_segment(const char *name, size_t *size)
{
	char path[128];
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	struct stat st;
	fstat(fd, &st);
	*size = (size_t)st.st_size;
	uint8_t *copy = malloc(*size);
	cr_assert_eq(pread(fd, copy, *size, 0), (ssize_t)*size);
	close(fd);
	return copy;
}

Test(inspect, changes_not_a_byte_of_the_segment)
{
	char name[64];
	struct cistern *c = make("quiet", name, sizeof(name), 16);
	for (int i = 0; i < 5; i++)
		cistern_put(c, "abc", 3, NULL, 0);
	struct cistern_sample s;
	cistern_acquire(c, &s, 0);
	size_t n1, n2;
	uint8_t *before = snapshot_segment(name, &n1);
	cr_assert_eq(run("inspect", name)->status, 0);
	cr_assert_eq(run("inspect", name, "--json")->status, 0);
	cr_assert_eq(run("inspect", name, "--prometheus")->status, 0);
	cr_assert_eq(run("ls")->status, 0);
	uint8_t *after = snapshot_segment(name, &n2);
	cr_assert_eq(n1, n2);
	cr_assert_eq(memcmp(before, after, n1), 0, "the segment changed");
	free(before);
	free(after);
	cistern_release(c, &s);
	cleanup(c, name);
}

Test(inspect, text_shows_statistics_occupancy_and_processes)
{
	char name[64], pid[32];
	struct cistern *c = make("itext", name, sizeof(name), 16);
	for (int i = 0; i < 3; i++)
		cistern_put(c, "abc", 3, NULL, 0);
	struct cistern_sample s;
	cistern_acquire(c, &s, 0);
	struct result *r = run("inspect", name);
	cr_assert_eq(r->status, 0);
	snprintf(pid, sizeof(pid), " %d ", (int)getpid());
	cr_assert(strstr(r->out, "population                 2 of 16"), "%s", r->out);
	cr_assert(strstr(r->out, "committed 2 acquired 1"), "%s", r->out);
	cr_assert(strstr(r->out, "1 live, 0 dead"), "%s", r->out);
	cr_assert(strstr(r->out, pid) && strstr(r->out, "producer+reader"), "%s", r->out);
	cistern_release(c, &s);
	cleanup(c, name);
}

Test(inspect, json_has_stats_occupancy_seen_and_processes)
{
	char name[64];
	struct cistern *c = make("ijson", name, sizeof(name), 16);
	cistern_put(c, "abc", 3, NULL, 0);
	struct result *r = run("inspect", name, "--json");
	cr_assert_eq(r->status, 0);
	cr_assert(strstr(r->out, "\"population\": 1,"), "%s", r->out);
	cr_assert(strstr(r->out, "\"committed\": 1,"), "%s", r->out);
	cr_assert(strstr(r->out, "\"seen_held\": {\"0\": 1,"), "%s", r->out);
	cr_assert(strstr(r->out, "\"alive\": true"), "%s", r->out);
	cleanup(c, name);
}

Test(inspect, prometheus_exposition_has_typed_families)
{
	char name[64], want[128];
	struct cistern *c = make("iprom", name, sizeof(name), 16);
	cistern_put(c, "abc", 3, NULL, 0);
	struct result *r = run("inspect", name, "--prometheus");
	cr_assert_eq(r->status, 0);
	snprintf(want, sizeof(want), "cistern_puts_total{segment=\"%s\"} 1\n", name);
	cr_assert(strstr(r->out, want), "%s", r->out);
	cr_assert(strstr(r->out, "# TYPE cistern_puts_total counter\n"));
	snprintf(want, sizeof(want),
		 "cistern_slots_by_state{segment=\"%s\",state=\"committed\"} 1\n", name);
	cr_assert(strstr(r->out, want), "%s", r->out);
	cleanup(c, name);
}

/*
 * A FIFO with a cold tier, its hot ring full, one cold group whole (its
 * write started behind the puts, not collected: its producer made no call
 * since) and one half put by another handle (staged): inspect shows the
 * staging runs' bytes and the groups in each state, in text, JSON and
 * Prometheus.
 */
Test(inspect, shows_a_fifos_staging_runs_and_their_groups)
{
	char name[64], dir[64], want[200];
	uname_(name, sizeof(name), "istage");
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-cli-stage-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	struct cistern_config cfg = {.policy = CISTERN_FIFO,
				     .slot_size = 4096,
				     .slot_count = 8,
				     .cold_slots = 128,
				     .cold_dir = dir};
	struct cistern *c, *b;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	cr_assert_eq(cistern_attach(name, &b), 0);
	for (int i = 0; i < 8 + 32; i++)
		cr_assert_eq(cistern_put(c, "abc", 3, NULL, 0), 0, "put %d", i);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(cistern_put(b, "abc", 3, NULL, 0), 0, "put %d", i);
	/* 4 runs of 32 slots of 4 KiB. */
	const unsigned long long bytes = 4ull * 32 * 4096;
	struct result *r = run("inspect", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "staging            512.0 KiB in the segment  (groups: 1 staged, "
				 "1 being written; puts waited for a write 0 times)"),
		  "%s", r->out);
	r = run("inspect", name, "--json");
	cr_assert_eq(r->status, 0, "%s", r->err);
	snprintf(want, sizeof(want),
		 "\"stage_bytes\": %llu, \"groups_staged\": 1, \"groups_writing\": 1, "
		 "\"write_waits\": 0,",
		 bytes);
	cr_assert(strstr(r->out, want), "no %s in %s", want, r->out);
	r = run("inspect", name, "--prometheus");
	cr_assert_eq(r->status, 0, "%s", r->err);
	snprintf(want, sizeof(want), "\ncistern_cold_stage_bytes{segment=\"%s\"} %llu\n", name,
		 bytes);
	cr_assert(strstr(r->out, want), "no %s in %s", want, r->out);
	snprintf(want, sizeof(want), "\ncistern_cold_groups_writing{segment=\"%s\"} 1\n", name);
	cr_assert(strstr(r->out, want), "no %s in %s", want, r->out);
	snprintf(want, sizeof(want), "\ncistern_cold_groups_staged{segment=\"%s\"} 1\n", name);
	cr_assert(strstr(r->out, want), "no %s in %s", want, r->out);
	/* The detach collects the write: inspect shows none in flight. */
	cr_assert_eq(cistern_detach(c), 0);
	cr_assert_eq(cistern_detach(b), 0);
	r = run("inspect", name, "--json");
	cr_assert(strstr(r->out, "\"groups_staged\": 1, \"groups_writing\": 0,"), "%s", r->out);
	cleanup(NULL, name);
	rmdir(dir);
}

Test(inspect, prometheus_gives_a_prioritized_segments_totals)
{
	char name[64], want[160];
	struct cistern *c = make_with("iprom-prio", name, sizeof(name), inspected_prioritized());
	cr_assert_eq(cistern_put_prioritized(c, "a", 1, NULL, 3, 0), 0);
	cr_assert_eq(cistern_put_prioritized(c, "b", 1, NULL, 5, 0), 0);
	const uint64_t stale = UINT64_MAX;
	const double q = 1;
	cr_assert_eq(cistern_update_priorities(c, &stale, &q, 1), 0);
	struct cistern_prio_info info;
	cr_assert_eq(cistern_prio_info_get(c, &info), 0);
	struct result *r = run("inspect", name, "--prometheus");
	cr_assert_eq(r->status, 0, "%s", r->err);
	snprintf(want, sizeof(want), "\ncistern_priority_mass{segment=\"%s\"} %.17g\n", name,
		 info.total);
	cr_assert(strstr(r->out, want), "no %s in %s", want, r->out);
	snprintf(want, sizeof(want), "\ncistern_priority_max{segment=\"%s\"} 5\n", name);
	cr_assert(strstr(r->out, want), "no %s in %s", want, r->out);
	snprintf(want, sizeof(want), "\ncistern_priority_stale_updates_total{segment=\"%s\"} 1\n",
		 name);
	cr_assert(strstr(r->out, want), "no %s in %s", want, r->out);
	cleanup(c, name);
}

Test(inspect, prometheus_gives_no_priority_family_for_other_policies)
{
	char name[64];
	struct cistern *c = make("iprom-fifo", name, sizeof(name), 4);
	struct result *r = run("inspect", name, "--prometheus");
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "cistern_puts_total"), "%s", r->out);
	cr_assert_null(strstr(r->out, "cistern_priority_"), "%s", r->out);
	cleanup(c, name);
}

Test(inspect, json_and_prometheus_together_is_bad_usage)
{
	cr_assert_eq(run("inspect", "x", "--json", "--prometheus")->status, 2);
}

Test(inspect, a_missing_segment_fails_naming_it)
{
	struct result *r = run("inspect", "t-cli-not-there");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "t-cli-not-there: no segment of that name"), "%s", r->err);
}

/* While producers and readers run, a watching inspector never shows up in the table. */
Test(inspect, under_load_the_inspector_never_attaches, .timeout = 60)
{
	char name[64];
	struct cistern *c = make("iload", name, sizeof(name), 64);
	_Atomic int *stop = shared_alloc(sizeof(*stop));
	pid_t kids[2];
	for (int k = 0; k < 2; k++) {
		kids[k] = fork();
		if (kids[k] == 0) {
			struct cistern *h;
			if (cistern_attach(name, &h) < 0)
				_exit(1);
			char buf[8] = "payload";
			while (!atomic_load(stop)) {
				if (k == 0)
					cistern_put(h, buf, sizeof(buf), NULL, 20);
				else
					cistern_get(h, buf, sizeof(buf), NULL, 20);
			}
			cistern_detach(h);
			_exit(0);
		}
	}
	int out = mem_file("out", NULL, 0), err = mem_file("err", NULL, 0);
	char *args[] = {"inspect", name, "--watch", "0.05", NULL};
	pid_t insp = start(NULL, 0, out, err, args);
	struct cistern_proc_info pi[64];
	double end = mono_now() + 0.5;
	int polls = 0;
	while (mono_now() < end) {
		int n = cistern_procs_get(c, pi, 64);
		for (int i = 0; i < n && i < 64; i++)
			cr_assert_neq(pi[i].pid, (uint32_t)insp, "the inspector attached");
		polls++;
	}
	kill(insp, SIGINT);
	int st;
	waitpid(insp, &st, 0);
	cr_assert_eq(status_of(st), 0, "watch ends cleanly on SIGINT");
	char buf[1 << 16];
	slurp(out, buf, sizeof(buf));
	close(err);
	cr_assert(strstr(strstr(buf, "statistics") + 1, "statistics"), "refreshed at least twice");
	atomic_store(stop, 1);
	waitpid(kids[0], NULL, 0);
	waitpid(kids[1], NULL, 0);
	cr_assert_gt(polls, 10);
	cleanup(c, name);
}

/* ---- rm ---------------------------------------------------------------- */

Test(rm, refuses_while_a_live_process_is_attached)
{
	char name[64];
	struct cistern *c = make("rmlive", name, sizeof(name), 8);
	struct result *r = run("rm", name);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "live processes are attached"), "%s", r->err);
	cr_assert(exists(name));
	cleanup(c, name);
}

Test(rm, force_removes_despite_live_processes)
{
	char name[64];
	struct cistern *c = make("rmforce", name, sizeof(name), 8);
	cr_assert_eq(run("rm", "--force", name)->status, 0);
	cr_assert(!exists(name));
	cistern_detach(c);
}

Test(rm, removes_an_unused_segment)
{
	char name[64];
	struct cistern *c = make("rmidle", name, sizeof(name), 8);
	cistern_detach(c);
	cr_assert_eq(run("rm", name)->status, 0);
	cr_assert(!exists(name));
}

Test(rm, a_missing_segment_fails)
{
	struct result *r = run("rm", "t-cli-never-was");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "t-cli-never-was"));
}

/* ---- gc ---------------------------------------------------------------- */

static pid_t holder(const char *name, enum hold what)
{
	pid_t pid = spawn_holder(name, what);
	cr_assert_gt(pid, 0, "holder %d failed to start", (int)what);
	return pid;
}

Test(gc, reclaims_what_a_killed_producer_and_reader_held)
{
	char name[64], want[256];
	struct cistern *c = make("gckill", name, sizeof(name), 8);
	cistern_put(c, "held", 4, NULL, 0);
	/* Both alive before either dies: an attaching process would sweep the first. */
	pid_t reader = holder(name, HOLD_SAMPLE);
	pid_t producer = holder(name, HOLD_RESERVATION);
	kill_and_reap(reader);
	kill_and_reap(producer);
	struct result *r = run("gc", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	snprintf(want, sizeof(want),
		 "%s: reclaimed 2 dead attachments: 1 reservation dropped, 1 sample put back for "
		 "redelivery, 0 pins dropped\n",
		 name);
	cr_assert_str_eq(r->out, want);
	struct cistern_proc_info pi[4];
	cr_assert_eq(cistern_procs_get(c, pi, 4), 1, "attachments freed");
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 4, "the sample is redelivered");
	cleanup(c, name);
}

/* A producer killed before done shows in inspect at once, and still after gc reclaimed it. */
Test(inspect, counts_a_producer_that_died_before_done)
{
	char name[64];
	struct cistern *c = make_with(
		"diedprod", name, sizeof(name),
		(struct cistern_config){.slot_size = 8, .slot_count = 8, .expected_producers = 2});
	kill_and_reap(holder(name, HOLD_RESERVATION)); /* a reserve takes the producer role */
	const char *want = "producers  2 expected, 0 done, 1 died before done "
			   "(waiting for a replacement to say it is done)";
	for (int round = 0; round < 2; round++) {
		struct result *r = run("inspect", name);
		cr_assert_eq(r->status, 0, "%s", r->err);
		cr_assert(strstr(r->out, want), "round %d: %s", round, r->out);
		r = run("inspect", "--json", name);
		cr_assert(strstr(r->out, "\"producers_expected\": 2, \"producers_done\": 0, "
					 "\"producers_died\": 1"),
			  "%s", r->out);
		r = run("gc", name);
		cr_assert_eq(r->status, 0, "%s", r->err);
	}
	cleanup(c, name);
}

Test(gc, dry_run_says_what_it_would_do_and_does_nothing)
{
	char name[64];
	struct cistern *c = make("gcdry", name, sizeof(name), 8);
	kill_and_reap(holder(name, HOLD_RESERVATION));
	struct result *r = run("gc", "--dry-run", name);
	cr_assert_eq(r->status, 0);
	cr_assert(strstr(r->out, "would reclaim 1 dead attachment: 1 reservation dropped"), "%s",
		  r->out);
	struct cistern_proc_info pi[4];
	cr_assert_eq(cistern_procs_get(c, pi, 4), 2, "nothing was reclaimed");
	cleanup(c, name);
}

Test(gc, removes_a_segment_whose_processes_all_died)
{
	char name[64];
	struct cistern *c = make("gcall", name, sizeof(name), 8);
	cistern_detach(c);
	kill_and_reap(holder(name, HOLD_NOTHING));
	struct result *r = run("gc", name);
	cr_assert_eq(r->status, 0);
	cr_assert(strstr(r->out, "removed (every attached process died without detaching)"), "%s",
		  r->out);
	cr_assert(!exists(name));
}

/* A segment whose only other process committed n samples and was killed (SIGKILL). */
static void stale_with_samples(const char *tag, char *name, size_t size, uint32_t n)
{
	struct cistern *c = make(tag, name, size, 64);
	cistern_detach(c);
	pid_t pid = spawn_filler(name, n);
	cr_assert_gt(pid, 0, "the producer failed to start");
	kill_and_reap(pid);
}

static void gc_dir(char *buf, size_t size, const char *tag)
{
	snprintf(buf, size, "/tmp/cistern-cli-gc-%s-%d", tag, (int)getpid());
	cr_assert(mkdir(buf, 0700) == 0 || errno == EEXIST);
}

Test(gc, keeps_a_stale_segment_with_unread_samples_and_says_so)
{
	char name[64], want[128];
	stale_with_samples("gcunread", name, sizeof(name), 63);
	struct result *r = run("gc", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	snprintf(want, sizeof(want), "%s: stale, 63 unread samples and 1 dead attachment kept",
		 name);
	cr_assert(strstr(r->out, want), "%s", r->out);
	cr_assert(exists(name));
	cleanup(NULL, name);
}

Test(gc, dump_to_dumps_a_stale_segment_that_restore_brings_back)
{
	char name[64], dir[128], path[256], want[384];
	stale_with_samples("gcdump", name, sizeof(name), 63);
	gc_dir(dir, sizeof(dir), "dump");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	unlink(path);
	struct result *r = run("gc", "--dump-to", dir, name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	snprintf(want, sizeof(want), "%s: stale, 63 unread samples dumped to %s", name, path);
	cr_assert(strstr(r->out, want), "%s", r->out);
	cr_assert(strstr(r->out, "removed"), "%s", r->out);
	cr_assert(!exists(name));
	r = run("restore", "-q", path);
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern *c;
	cr_assert_eq(cistern_attach(name, &c), 0);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.population, 63, "every sample came back");
	cleanup(c, name);
	unlink(path);
	rmdir(dir);
}

Test(gc, discard_removes_a_stale_segment_and_says_what_was_lost)
{
	char name[64], want[128];
	stale_with_samples("gcdiscard", name, sizeof(name), 5);
	struct result *r = run("gc", "--discard", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	snprintf(want, sizeof(want), "%s: stale, 5 unread samples discarded, removed", name);
	cr_assert(strstr(r->out, want), "%s", r->out);
	cr_assert(!exists(name));
}

Test(gc, dump_to_over_an_existing_file_fails_and_keeps_the_segment)
{
	char name[64], dir[128], path[256];
	stale_with_samples("gcdumpx", name, sizeof(name), 2);
	gc_dir(dir, sizeof(dir), "dumpx");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	struct result *r = run("gc", "--dump-to", dir, name);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "2 unread samples and 1 dead attachment kept"), "%s", r->err);
	cr_assert(exists(name));
	cleanup(NULL, name);
	unlink(path);
	rmdir(dir);
}

Test(gc, dump_to_a_missing_directory_fails_up_front)
{
	char name[64];
	stale_with_samples("gcnodir", name, sizeof(name), 2);
	struct result *r = run("gc", "--dump-to", "/nonexistent/cistern-dumps", name);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "/nonexistent/cistern-dumps"), "%s", r->err);
	cr_assert(exists(name));
	cleanup(NULL, name);
}

Test(gc, dump_to_with_discard_is_bad_usage)
{
	cr_assert_eq(run("gc", "--dump-to", "/tmp", "--discard", "t-cli-any")->status, 2);
}

Test(gc, keeps_a_segment_created_for_later_and_prints_nothing)
{
	char name[64];
	uname_(name, sizeof(name), "gckeep");
	cr_assert_eq(run("create", name)->status, 0);
	struct result *r = run("gc", name);
	cr_assert_eq(r->status, 0);
	cr_assert_str_eq(r->out, "");
	cr_assert(exists(name));
	cleanup(NULL, name);
}

Test(gc, a_missing_named_segment_fails)
{
	cr_assert_eq(run("gc", "t-cli-gone-long-ago")->status, 1);
}

Test(gc, cold_dir_removes_a_cold_file_whose_segment_is_gone_and_a_dry_run_says_so)
{
	char name[64], dir[64], file[160], shm[96];
	uname_(name, sizeof(name), "gccold");
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-cli-gccold-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/cistern.%s.cold", dir, name);
	struct result *r = run("create", name, "--policy", "reservoir", "--watermark", "1",
			       "--slots", "8", "--cold-slots", "16", "--cold-dir", dir);
	cr_assert_eq(r->status, 0, "%s", r->err);
	/* The segment goes without its cold file, as a kill in the middle of rm leaves it. */
	snprintf(shm, sizeof(shm), "/cistern.%s", name);
	cr_assert_eq(shm_unlink(shm), 0);
	struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
	cr_assert_eq(utimensat(AT_FDCWD, file, old, 0), 0);
	r = run("gc", "--dry-run", "--cold-dir", dir);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, file) && strstr(r->out, "would remove cold file"), "%s", r->out);
	cr_assert_eq(access(file, F_OK), 0, "the dry run removed it");
	r = run("gc", "--cold-dir", dir);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, file) && strstr(r->out, "removed cold file"), "%s", r->out);
	cr_assert_neq(access(file, F_OK), 0, "the cold file is still there");
	rmdir(dir);
}

/* ---- dump and restore -------------------------------------------------- */

static void tmp_path(char *buf, size_t size, const char *tag)
{
	snprintf(buf, size, "/tmp/cistern-cli-%s-%d.dump", tag, (int)getpid());
	unlink(buf);
}

Test(dump, a_tiered_dump_restores_with_its_cold_tier_and_names_a_missing_cold_dir)
{
	char name[64], copy[64], dir[64], sub[96], path[128];
	uname_(name, sizeof(name), "dcold");
	uname_(copy, sizeof(copy), "dcold2");
	tmp_path(path, sizeof(path), "dcold");
	snprintf(dir, sizeof(dir), "/var/tmp/cistern-cli-dcold-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/cold", dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	struct result *r = run("create", name, "--policy", "reservoir", "--watermark", "1",
			       "--slots", "8", "--cold-slots", "16", "--cold-dir", sub);
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern *c;
	cr_assert_eq(cistern_attach(name, &c), 0);
	for (uint32_t i = 0; i < 12; i++) {
		struct cistern_meta m = {.time_step = i};
		cr_assert_eq(cistern_put(c, &i, sizeof(i), &m, 0), 0);
	}
	cistern_detach(c);
	r = run("dump", name, path);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->err, "dumped 12 samples") && strstr(r->err, "4 of them from the cold"),
		  "%s", r->err);
	r = run("restore", "--check", path);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "cold tier: 4 of the samples, 16 cold slots"), "%s", r->out);
	r = run("restore", path, copy);
	cr_assert_eq(r->status, 0, "%s", r->err);
	r = run("rm", name, copy);
	cr_assert_eq(r->status, 0, "%s", r->err);
	/* Its cold directory gone: said in the directory's words, and nothing made. */
	cr_assert_eq(rmdir(sub), 0, "a cold file was left: %s", strerror(errno));
	r = run("restore", path, copy);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, sub) && strstr(r->err, "nothing was created"), "%s", r->err);
	cr_assert(!exists(copy));
	unlink(path);
	rmdir(dir);
}

Test(dump, dump_then_restore_gives_the_same_samples_in_order)
{
	char name[64], copy[64], path[128];
	struct cistern *c = make("dump", name, sizeof(name), 32);
	uname_(copy, sizeof(copy), "dumpcopy");
	tmp_path(path, sizeof(path), "dump");
	for (uint32_t i = 0; i < 20; i++) {
		char p[32];
		int n = snprintf(p, sizeof(p), "sample-%u", i);
		struct cistern_meta m = {.sim_id = i % 3, .time_step = i};
		cistern_put(c, p, (size_t)n, &m, 0);
	}
	struct result *r = run("dump", name, path);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->err, "dumped 20 samples"), "%s", r->err);
	r = run("restore", path, copy);
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern *d;
	cr_assert_eq(cistern_attach(copy, &d), 0);
	for (int i = 0; i < 20; i++) {
		char a[32], b[32];
		struct cistern_meta ma, mb;
		ssize_t na = cistern_get(c, a, sizeof(a), &ma, 0);
		ssize_t nb = cistern_get(d, b, sizeof(b), &mb, 0);
		cr_assert_eq(na, nb);
		cr_assert_eq(memcmp(a, b, (size_t)na), 0);
		cr_assert_eq(ma.sample_id, mb.sample_id);
		cr_assert_eq(ma.sim_id, mb.sim_id);
		cr_assert_eq(ma.time_step, mb.time_step);
	}
	cistern_detach(d);
	cleanup(c, name);
	cistern_unlink(copy);
	unlink(path);
}

static void corrupt_and_refuse(const char *tag, bool truncate_it)
{
	char name[64], copy[64], path[128];
	struct cistern *c = make(tag, name, sizeof(name), 8);
	snprintf(copy, sizeof(copy), "t-cli-%s2-%d", tag, (int)getpid());
	tmp_path(path, sizeof(path), tag);
	for (int i = 0; i < 5; i++)
		cistern_put(c, "0123456789", 10, NULL, 0);
	cr_assert_eq(run("dump", "-q", name, path)->status, 0);
	struct stat st;
	stat(path, &st);
	if (truncate_it) {
		cr_assert_eq(truncate(path, st.st_size - 100), 0);
	} else {
		int fd = open(path, O_RDWR);
		char b;
		pread(fd, &b, 1, 60);
		b ^= 1;
		pwrite(fd, &b, 1, 60);
		close(fd);
	}
	struct result *r = run("restore", path, copy);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "damaged or truncated dump"), "%s", r->err);
	cr_assert(!exists(copy), "nothing created");
	r = run("restore", "--check", path);
	cr_assert_eq(r->status, 1);
	cleanup(c, name);
	unlink(path);
}

Test(dump, a_dump_with_a_flipped_byte_is_refused)
{
	corrupt_and_refuse("flip", false);
}

Test(dump, a_truncated_dump_is_refused)
{
	corrupt_and_refuse("trunc", true);
}

/* A SimPairedReservoir (sweep 4) whose dump holds a record of sim 4, checksums made to hold. */
Test(dump, a_record_the_policy_refuses_fails_check_and_restore_alike)
{
	char name[64], copy[64], path[128];
	uname_(name, sizeof(name), "pairbad");
	uname_(copy, sizeof(copy), "pairbad2");
	tmp_path(path, sizeof(path), "pairbad");
	struct cistern_config cfg = {.slot_size = 64,
				     .slot_count = 16,
				     .policy = CISTERN_SIM_PAIRED_RESERVOIR,
				     .watermark = 2,
				     .sweep_size = 4,
				     .nb_time_steps = 8};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	for (uint32_t i = 0; i < 6; i++) {
		struct cistern_meta m = {.sim_id = i % 3, .time_step = i / 3};
		cr_assert_eq(cistern_put(c, "x", 1, &m, 0), 0);
	}
	cr_assert_eq(run("dump", "-q", name, path)->status, 0);
	cleanup(c, name);
	struct dumpfile f;
	dumpfile_load(&f, path);
	put32(dumpfile_record(&f, 0) + 8, 4); /* sim_id = sweep_size */
	dumpfile_store(&f, path);
	struct result *r = run("restore", "--check", path);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "damaged or truncated dump"), "%s", r->err);
	r = run("restore", path, copy);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "damaged or truncated dump"), "%s", r->err);
	cr_assert(!exists(copy), "nothing created");
	unlink(path);
}

Test(dump, restore_check_describes_a_good_dump)
{
	char name[64], path[128];
	struct cistern *c = make("check", name, sizeof(name), 8);
	tmp_path(path, sizeof(path), "check");
	cistern_put(c, "x", 1, NULL, 0);
	cr_assert_eq(run("dump", "-q", name, path)->status, 0);
	struct result *r = run("restore", "--check", path);
	cr_assert_eq(r->status, 0);
	cr_assert(strstr(r->out, "ok ") && strstr(r->out, "1 samples"), "%s", r->out);
	cleanup(c, name);
	unlink(path);
}

Test(dump, of_a_missing_segment_fails_and_writes_no_file)
{
	char path[128];
	tmp_path(path, sizeof(path), "missing");
	struct result *r = run("dump", "t-cli-absent", path);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "t-cli-absent"));
	cr_assert_neq(access(path, F_OK), 0);
}

/* ---- more failures ----------------------------------------------------- */

Test(close, a_missing_segment_fails_naming_it)
{
	struct result *r = run("close", "t-cli-no-close");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "t-cli-no-close: no segment of that name"), "%s", r->err);
}

Test(put, a_missing_file_fails_and_puts_nothing)
{
	char name[64];
	struct cistern *c = make("putmiss", name, sizeof(name), 8);
	struct result *r = run("put", name, "/nonexistent/file");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "/nonexistent/file"), "%s", r->err);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.puts, 0);
	cleanup(c, name);
}

Test(dump, into_a_missing_directory_fails)
{
	char name[64];
	struct cistern *c = make("dumpdir", name, sizeof(name), 8);
	struct result *r = run("dump", name, "/nonexistent-dir/x.dump");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, name) && strstr(r->err, "No such file"), "%s", r->err);
	cleanup(c, name);
}

Test(dump, restore_of_a_missing_file_fails)
{
	struct result *r = run("restore", "/nonexistent/x.dump", "t-cli-nothing");
	cr_assert_eq(r->status, 1);
	cr_assert(!exists("t-cli-nothing"));
}

Test(dump, restore_over_an_existing_segment_fails)
{
	char name[64], path[128];
	struct cistern *c = make("dumpover", name, sizeof(name), 8);
	tmp_path(path, sizeof(path), "over");
	cr_assert_eq(run("dump", "-q", name, path)->status, 0);
	struct result *r = run("restore", path);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "already exists"), "%s", r->err);
	cleanup(c, name);
	unlink(path);
}

Test(dump, no_progress_bar_when_stderr_is_not_a_terminal)
{
	char name[64], path[128];
	struct cistern *c = make("noprog", name, sizeof(name), 8);
	tmp_path(path, sizeof(path), "noprog");
	struct result *r = run("dump", name, path);
	cr_assert_eq(r->status, 0);
	cr_assert(strncmp(r->err, "dumped ", 7) == 0, "%s", r->err);
	cleanup(c, name);
	unlink(path);
}

Test(dump, a_progress_bar_on_a_terminal)
{
	char name[64], path[128];
	struct cistern *c = make("prog", name, sizeof(name), 8);
	tmp_path(path, sizeof(path), "prog");
	cistern_put(c, "x", 1, NULL, 0);
	int m = posix_openpt(O_RDWR | O_NOCTTY);
	cr_assert_geq(m, 0);
	cr_assert_eq(grantpt(m), 0);
	cr_assert_eq(unlockpt(m), 0);
	int s = open(ptsname(m), O_RDWR | O_NOCTTY);
	cr_assert_geq(s, 0);
	int out = mem_file("out", NULL, 0);
	char *args[] = {"dump", name, path, NULL};
	pid_t pid = start(NULL, 0, out, s, args);
	int st;
	waitpid(pid, &st, 0);
	cr_assert_eq(status_of(st), 0);
	close(s);
	char buf[4096];
	ssize_t n = read(m, buf, sizeof(buf) - 1);
	cr_assert_gt(n, 0);
	buf[n] = '\0';
	cr_assert(strstr(buf, "dump [") && strstr(buf, "100%"), "%s", buf);
	close(m);
	close(out);
	cleanup(c, name);
	unlink(path);
}

Test(usage, commands_that_need_names_refuse_none)
{
	cr_assert_eq(run("rm")->status, 2);
	cr_assert_eq(run("close")->status, 2);
	cr_assert_eq(run("put")->status, 2);
	cr_assert_eq(run("restore")->status, 2);
	cr_assert_eq(run("create")->status, 2);
	cr_assert_eq(run("gc", "bad/name")->status, 2);
}

/* A pair is read whole; its second member, past the count, goes back unread. */
Test(get, a_sim_paired_segment_is_read_a_pair_at_a_time)
{
	char name[64];
	struct cistern *c = make_with(
		"getpair", name, sizeof(name),
		(struct cistern_config){.policy = CISTERN_SIM_PAIRED_RESERVOIR,
					.slot_size = 16,
					.slot_count = 16,
					.watermark = 2,
					.sweep_size = 1,
					.nb_time_steps = 2});
	struct cistern_meta m0 = {.time_step = 0}, m1 = {.time_step = 1};
	cr_assert_eq(cistern_put(c, "t0", 2, &m0, 0), 0);
	cr_assert_eq(cistern_put(c, "t1", 2, &m1, 0), 0);
	struct result *r = run("get", name, "-n", "3", "--timeout", "0");
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert_str_eq(r->out, "t0\nt1\nt0\n");
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.gets, 3, "the fourth member went back unread");
	cleanup(c, name);
}

/* A batch is read whole; members past the count go back unread. */
Test(get, a_batch_reservoir_is_read_a_batch_at_a_time)
{
	char name[64];
	struct cistern *c = make_with("getbatch", name, sizeof(name),
				      (struct cistern_config){.policy = CISTERN_BATCH_RESERVOIR,
							      .slot_size = 16,
							      .slot_count = 16,
							      .watermark = 4,
							      .batch_size = 4});
	for (char v = 'a'; v <= 'e'; v++)
		cr_assert_eq(cistern_put(c, &v, 1, NULL, 0), 0);
	struct result *r = run("get", name, "-n", "6", "--timeout", "0");
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert_eq(strlen(r->out), 12, "six samples of one byte and a newline: %s", r->out);
	struct cistern_stats st;
	cr_assert_eq(cistern_stats_get(c, &st), 0);
	cr_assert_eq(st.gets, 6, "two members of the second batch went back unread");
	cleanup(c, name);
}

Test(get, a_sample_whose_output_fails_goes_back_to_the_segment)
{
	char name[64];
	struct cistern *c = make("getpipe", name, sizeof(name), 8);
	cistern_put(c, "precious", 8, NULL, 0);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	close(p[0]); /* nobody will ever read: writing fails with EPIPE */
	int err = mem_file("err", NULL, 0);
	char *args[] = {"get", name, NULL};
	pid_t pid = start(NULL, 0, p[1], err, args);
	close(p[1]);
	int st;
	waitpid(pid, &st, 0);
	cr_assert_eq(status_of(st), 1, "a failed write is a failure, not a kill by SIGPIPE");
	close(err);
	char buf[16];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 8, "the sample was not lost");
	cr_assert_eq(memcmp(buf, "precious", 8), 0);
	/* Handed back unread, not left for a reclaim: one get, no redelivery. */
	struct cistern_stats sts;
	cr_assert_eq(cistern_stats_get(c, &sts), 0);
	cr_assert(sts.gets == 1 && sts.redeliveries == 0, "gets %lu, redeliveries %lu",
		  (unsigned long)sts.gets, (unsigned long)sts.redeliveries);
	cleanup(c, name);
}

/* ---- schemas: create --schema, inspect, put and get by field ---------------- */

#define SCHEMA_RL "obs:float32[2,3];action:int64[];reward:float32[];done:bool[]"

/* A segment made by `cistern create --schema SCHEMA_RL`. */
static struct cistern *make_schema(const char *tag, char *name, size_t size)
{
	uname_(name, size, tag);
	struct result *r = run("create", name, "--slots", "8", "--schema",
			       " obs: float32[2, 3]; action: int64; reward: float32; done: bool ");
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct cistern *c;
	cr_assert_eq(cistern_attach(name, &c), 0);
	return c;
}

static uint64_t puts_of(struct cistern *c)
{
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	return st.puts;
}

Test(schema, create_keeps_the_schema_canonical_and_sizes_slots_by_it)
{
	char name[64], text[CISTERN_SCHEMA_MAX];
	struct cistern *c = make_schema("screate", name, sizeof(name));
	cr_assert_gt(cistern_schema_get(c, text, sizeof(text)), 0);
	cr_assert_str_eq(text, SCHEMA_RL);
	struct cistern_config cfg;
	cistern_config_get(c, &cfg);
	cr_assert_eq(cfg.slot_size, 40, "24 + 8 + 4 + 1, padded to 8");
	cleanup(c, name);
}

Test(schema, create_refuses_a_bad_schema_naming_the_field)
{
	char name[64];
	uname_(name, sizeof(name), "sbad");
	struct result *r = run("create", name, "--schema", "obs:float32[2,3];slot_size:int65");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--schema: field 'slot_size': unknown dtype 'int65'"), "%s",
		  r->err);
	r = run("create", name, "--schema", "obs:float32[2,3]", "--slot-size", "16");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--schema needs 24 bytes a sample, more than --slot-size (16)"),
		  "%s", r->err);
	cr_assert(!exists(name));
}

Test(schema, inspect_shows_the_fields_as_text_and_json)
{
	char name[64];
	struct cistern *c = make_schema("sinspect", name, sizeof(name));
	struct result *r = run("inspect", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "schema     " SCHEMA_RL "\n"), "%s", r->out);
	cr_assert(strstr(r->out, "4 fields, 40 bytes a sample"), "%s", r->out);
	cr_assert(strstr(r->out, "reward               float32[]            at       32, 4 bytes"),
		  "%s", r->out);
	r = run("inspect", name, "--json");
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "\"schema\": {\"text\": \"" SCHEMA_RL "\", \"sample_size\": 40, "
				 "\"fields\": [{\"name\": \"obs\", \"dtype\": \"float32\", "
				 "\"shape\": [2, 3], \"offset\": 0, \"size\": 24}, "),
		  "%s", r->out);
	cleanup(c, name);
	struct cistern *plain = make("snoschema", name, sizeof(name), 8);
	r = run("inspect", name, "--json");
	cr_assert(strstr(r->out, "\"schema\": null,"), "%s", r->out);
	cleanup(plain, name);
}

Test(schema, put_by_field_then_get_fields_shows_each_value)
{
	char name[64];
	struct cistern *c = make_schema("sput", name, sizeof(name));
	struct result *r = run("put", name, "--sim-id", "4", "--field", "obs=1,2,3,4,5,6.5",
			       "--field", "action=-3", "--field", "reward=0.25", "--field",
			       "done=true");
	cr_assert_eq(r->status, 0, "%s", r->err);
	struct {
		float obs[2][3];
		int64_t action;
		float reward;
		bool done;
	} want = {{{1, 2, 3}, {4, 5, 6.5}}, -3, 0.25f, true}, got;
	memset(&got, 0xff, sizeof(got));
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, &got, sizeof(got), &m, 0), 40);
	cr_assert_eq(memcmp(got.obs, want.obs, sizeof(want.obs)), 0);
	cr_assert_eq(got.action, -3);
	cr_assert_eq(got.reward, 0.25f);
	cr_assert_eq(got.done, true);
	cr_assert_eq(m.sim_id, 4);
	cr_assert_eq(cistern_put(c, &want, 40, &m, 0), 0);
	r = run("get", name, "--fields");
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "sim_id 4  time_step 0\n"
				 "  obs float32[2,3] = [[1,2,3],[4,5,6.5]]\n"
				 "  action int64[] = -3\n"
				 "  reward float32[] = 0.25\n"
				 "  done bool[] = true\n"),
		  "%s", r->out);
	cleanup(c, name);
}

Test(schema, json_lines_from_get_put_back_the_same_samples)
{
	char a[64], b[64];
	static char json[sizeof(((struct result *)0)->out)];
	struct cistern *ca = make_schema("sjsona", a, sizeof(a));
	struct cistern *cb = make_schema("sjsonb", b, sizeof(b));
	const char *in = "{\"obs\": [[1,2,3],[4,5,1e-3]], \"action\": 9223372036854775807, "
			 "\"reward\": -0.5, \"done\": false}\n\n"
			 "{\"done\": true, \"reward\": 1, \"action\": 0, \"obs\": [0,0,0,0,0,0]}\n";
	struct result *r = run_in(in, strlen(in), "put", a, "--json", "--time-step", "7", NULL);
	cr_assert_eq(r->status, 0, "%s", r->err);
	r = run("get", a, "--json", "-n", "2");
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "{\"sample_id\": 0, \"sim_id\": 0, \"time_step\": 7, \"fields\": "
				 "{\"obs\": [[1,2,3],[4,5,0.00100000005]], \"action\": "
				 "9223372036854775807, \"reward\": -0.5, \"done\": false}}\n"),
		  "%s", r->out);
	memcpy(json, r->out, r->outlen + 1);
	r = run_in(json, strlen(json), "put", b, "--json", NULL);
	cr_assert_eq(r->status, 0, "%s", r->err);
	r = run("get", b, "--json", "-n", "2");
	cr_assert_eq(r->status, 0, "%s", r->err);
	/* The same lines, but for the ids the new segment gave. */
	cr_assert_str_eq(r->out, json);
	cleanup(ca, a);
	cleanup(cb, b);
}

Test(schema, wrong_data_is_refused_naming_the_field_and_nothing_is_put)
{
	char name[64];
	struct cistern *c = make_schema("swrong", name, sizeof(name));
	static const struct {
		const char *obs, *action, *says;
	} bad[] = {
		{"obs=1,2,3", "action=1", "field 'obs': 3 values where 6 belong"},
		{"obs=[[1,2,3],[4,5]]", "action=1", "field 'obs': 2 values where 3 belong"},
		{"obs=1,2,3,4,5,6", "action=1.5", "field 'action': '1.5' is not a whole number"},
		{"obs=1,2,3,4,5,x", "action=1", "field 'obs': 'x' is not a number"},
		{"obs=1,2,3,4,5,6", "reward=1", "--field 'reward' is given twice"},
		{"obs=1,2,3,4,5,6", "nope=1", "--field 'nope': not a field of the schema"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct result *r = run("put", name, "--field", bad[i].obs, "--field", bad[i].action,
				       "--field", "reward=1", "--field", "done=0");
		cr_assert_eq(r->status, 1, "case %zu", i);
		cr_assert(strstr(r->err, bad[i].says), "case %zu: %s", i, r->err);
	}
	struct result *r = run("put", name, "--field", "obs=1,2,3,4,5,6", "--field", "action=1",
			       "--field", "done=0");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "field 'reward' is missing"), "%s", r->err);
	const char *in = "{\"obs\": [1,2,3,4,5,6], \"action\": 1, \"reward\": 1, \"done\": 2}\n";
	r = run_in(in, strlen(in), "put", name, "--json", NULL);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err,
			 "line 1 of standard input: field 'done': '2' is not true or false; "
			 "no sample was put"),
		  "%s", r->err);
	r = run_in("a sample of bytes", 17, "put", name, NULL);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "17 bytes, where samples of the schema are 40"), "%s", r->err);
	cr_assert_eq(puts_of(c), 0, "nothing was put");
	cleanup(c, name);
}

Test(schema, a_field_read_from_a_file_must_be_its_exact_size)
{
	char name[64], path[96];
	struct cistern *c = make_schema("sfile", name, sizeof(name));
	snprintf(path, sizeof(path), "/tmp/cistern-cli-%d-obs", (int)getpid());
	float obs[6] = {1, 2, 3, 4, 5, 6};
	FILE *f = fopen(path, "w");
	fwrite(obs, sizeof(float), 5, f);
	fclose(f);
	char arg[128];
	snprintf(arg, sizeof(arg), "obs=@%s", path);
	struct result *r = run("put", name, "--field", arg, "--field", "action=1", "--field",
			       "reward=1", "--field", "done=0");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "holds fewer bytes, where float32[2,3] needs 24"), "%s", r->err);
	f = fopen(path, "w");
	fwrite(obs, sizeof(float), 6, f);
	fclose(f);
	r = run("put", name, "--field", arg, "--field", "action=1", "--field", "reward=1",
		"--field", "done=0");
	cr_assert_eq(r->status, 0, "%s", r->err);
	float got[10];
	cr_assert_eq(cistern_get(c, got, sizeof(got), NULL, 0), 40);
	cr_assert_eq(memcmp(got, obs, sizeof(obs)), 0);
	unlink(path);
	cleanup(c, name);
}

Test(schema, fields_of_a_segment_without_a_schema_are_refused)
{
	char name[64];
	struct cistern *c = make("snone", name, sizeof(name), 8);
	cistern_put(c, "abc", 3, NULL, 0);
	struct result *r = run("get", name, "--fields");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--fields needs a segment created with a schema"), "%s", r->err);
	r = run("put", name, "--field", "a=1");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "--field needs a segment created with a schema"), "%s", r->err);
	cr_assert_eq(cistern_get(c, (char[8]){0}, 8, NULL, 0), 3, "the sample is still there");
	cleanup(c, name);
}

Test(schema, a_sample_of_another_size_goes_back_unread)
{
	char name[64];
	struct cistern *c = make_schema("sshort", name, sizeof(name));
	cr_assert_eq(cistern_put(c, "short", 5, NULL, 0), -EMSGSIZE, "the library refuses it");
	/* What an older library let a put leave: this handle's lengths as without a schema. */
	c->put_len_min = 0;
	c->put_len_span = c->slot_size;
	cr_assert_eq(cistern_put(c, "short", 5, NULL, 0), 0);
	struct result *r = run("get", name, "--json");
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "sample 0 is 5 bytes, where samples of the schema are 40"), "%s",
		  r->err);
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 5, "still in the segment");
	cleanup(c, name);
}

Test(schema, restore_check_shows_the_schema_of_a_dump)
{
	char name[64], path[96];
	struct cistern *c = make_schema("sdump", name, sizeof(name));
	snprintf(path, sizeof(path), "/tmp/cistern-cli-%d.dump", (int)getpid());
	struct result *r = run("dump", name, path);
	cr_assert_eq(r->status, 0, "%s", r->err);
	r = run("restore", "--check", path);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "\nschema " SCHEMA_RL "\n"), "%s", r->out);
	unlink(path);
	cleanup(c, name);
}

/* ---- objects under a segment's name that are not segments ------------- */

/*
 * Every command on an object that is not a regular file answers "not a
 * cistern segment" and goes on; none waits on it. Each command runs under an
 * alarm (run_alarm), so one that waits is killed and fails the test.
 */
static void no_command_waits_on(enum special kind, const char *tag)
{
	char name[64], dump[128];
	uname_(name, sizeof(name), tag);
	int keep;
	int made = special_make(kind, name, &keep);
	cr_assert_eq(made, 0, "making the object: %s", strerror(-made));
	snprintf(dump, sizeof(dump), "/tmp/cistern-cli-%s.dump", name);
	run_alarm = 20;
	const char *const cmds[][4] = {
		{"inspect", name}, {"dump", name, dump}, {"gc", "--dry-run", name},
		{"gc", name},      {"put", name},        {"get", name, "--timeout", "0"},
		{"close", name},   {"rm", name},
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		struct result *r = run_in("x", 1, cmds[i][0], cmds[i][1], cmds[i][2], cmds[i][3],
					  NULL);
		cr_expect_eq(r->status, 1, "%s: status %d: %s", cmds[i][0], r->status, r->err);
		cr_expect(strstr(r->err, "not a cistern segment"), "%s: %s", cmds[i][0], r->err);
	}
	cr_expect_neq(access(dump, F_OK), 0, "no dump file");
	struct result *r = run("ls");
	cr_expect_eq(r->status, 0, "ls: status %d: %s", r->status, r->err);
	const char *line = strstr(r->out, name);
	cr_expect(line && strstr(line, "not a cistern segment"), "ls: %s", r->out);
	/* The whole machine: it lists the object, passes over it and goes on. */
	r = run("gc", "--dry-run");
	cr_expect_neq(r->status, 128 + SIGALRM, "gc --dry-run of every segment waited");
	cr_expect_null(strstr(r->err, name), "gc --dry-run: %s", r->err);
	run_alarm = 0;
	special_remove(keep);
}

Test(special, no_command_waits_on_a_fifo)
{
	no_command_waits_on(SP_FIFO, "fifo");
}

Test(special, no_command_waits_on_a_socket)
{
	no_command_waits_on(SP_SOCKET, "sock");
}

Test(special, no_command_waits_on_a_directory)
{
	no_command_waits_on(SP_DIR, "dir");
}

Test(special, no_command_follows_a_symlink_to_dev_null)
{
	no_command_waits_on(SP_LINK, "link");
}

Test(special, no_command_opens_a_device_node)
{
	no_command_waits_on(SP_DEVICE, "dev");
}

Test(special, rm_force_removes_a_fifo)
{
	char name[64];
	uname_(name, sizeof(name), "rmfifo");
	int keep;
	cr_assert_eq(special_make(SP_FIFO, name, &keep), 0);
	run_alarm = 20;
	struct result *r = run("rm", "--force", name);
	cr_expect_eq(r->status, 0, "%s", r->err);
	cr_expect(!exists(name));
	run_alarm = 0;
	special_remove(keep);
}

/* ---- another user's segment -------------------------------------------- */

#define NOBODY 65534

/* A 0666 segment under the name, owned by user nobody: what a squatter makes. */
static void squatted(const char *tag, char *name, size_t size)
{
	uname_(name, size, tag);
	struct cistern_config cfg = {.slot_size = 64, .slot_count = 8, .mode = 0666};
	struct cistern *c;
	cr_assert_eq(cistern_create(name, &cfg, &c), 0);
	cr_assert_eq(fchown(c->fd, NOBODY, NOBODY), 0, "fchown: %s", strerror(errno));
	cr_assert_eq(cistern_put(c, "bait", 4, NULL, 0), 0);
	cistern_detach(c);
}

Test(owner, writing_commands_refuse_another_users_segment_naming_the_owner)
{
	char name[64];
	squatted("squat", name, sizeof(name));
	const char *const cmds[][4] = {
		{"put", name},
		{"get", name, "--timeout", "0"},
		{"close", name},
		{"gc", name},
		{"gc", "--dry-run", name},
		{"rm", name},
		{"rm", "--force", name},
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		struct result *r = run_in("secret", 6, cmds[i][0], cmds[i][1], cmds[i][2],
					  cmds[i][3], NULL);
		cr_expect_eq(r->status, 1, "%s %s: status %d", cmds[i][0], cmds[i][1], r->status);
		cr_expect(strstr(r->err, "owned by user nobody (uid 65534)") &&
				  strstr(r->err, "--any-owner"),
			  "%s %s: %s", cmds[i][0], cmds[i][1], r->err);
	}
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), 0, "still there");
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cistern_detach(c);
	cr_expect_eq(st.puts, 1, "nothing of ours was put");
	cr_expect_eq(st.gets, 0, "nothing of theirs was taken");
	cr_expect_eq(st.reception_closed, 0);
	cleanup(NULL, name);
}

Test(owner, any_owner_lets_writing_commands_share_another_users_segment)
{
	char name[64];
	squatted("share", name, sizeof(name));
	struct result *r = run_in("ours", 4, "put", "--any-owner", name, NULL);
	cr_assert_eq(r->status, 0, "put: %s", r->err);
	r = run("get", "--any-owner", name, "-n", "2", "--timeout", "0");
	cr_assert_eq(r->status, 0, "get: %s", r->err);
	cr_assert_str_eq(r->out, "bait\nours\n");
	r = run("close", "--any-owner", name);
	cr_assert_eq(r->status, 0, "close: %s", r->err);
	r = run("gc", "--any-owner", name);
	cr_assert_eq(r->status, 0, "gc: %s", r->err);
	r = run("rm", "--any-owner", name);
	cr_assert_eq(r->status, 0, "rm: %s", r->err);
	cr_assert(!exists(name));
}

Test(owner, reading_commands_show_another_users_segment)
{
	/* Looking cannot put anything of ours into it: ls and inspect need no opt-in. */
	char name[64];
	squatted("look", name, sizeof(name));
	struct result *r = run("inspect", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "uid 65534"), "%s", r->out);
	cleanup(NULL, name);
}

/* ---- small things ------------------------------------------------------ */

Test(create, zero_where_the_library_means_a_default_is_bad_usage)
{
	char name[64];
	uname_(name, sizeof(name), "zero");
	const char *const opts[][2] = {
		{"--slots", "--slots"},
		{"--slot-size", "--slot-size"},
		{"-s", "--slots"},
		{"-z", "--slot-size"},
		{"--max-procs", "--max-procs"},
		{"--pseudo-epochs", "--pseudo-epochs"},
		{"--mode", "--mode"},
	};
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		struct result *r = run("create", name, opts[i][0], "0");
		cr_expect_eq(r->status, 2, "%s 0: status %d", opts[i][0], r->status);
		cr_expect(strstr(r->err, opts[i][1]), "%s 0: %s", opts[i][0], r->err);
		cr_expect(!exists(name), "%s 0 created the segment", opts[i][0]);
		cistern_unlink(name);
	}
}

Test(usage, a_bad_name_states_the_naming_rule)
{
	const char *const cmds[][3] = {
		{"create", "_x"}, {"inspect", "../etc"}, {"put", "a/b"}, {"get", ".hidden"},
		{"close", "a b"}, {"rm", "a/b"},         {"gc", "a/b"},  {"dump", "a/b", "/tmp/x"},
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		struct result *r = run(cmds[i][0], cmds[i][1], cmds[i][2]);
		cr_expect_eq(r->status, 2, "%s: status %d", cmds[i][0], r->status);
		cr_expect(strstr(r->err, "1 to 64 characters from [A-Za-z0-9._-], starting with a "
					 "letter or digit"),
			  "%s: %s", cmds[i][0], r->err);
		cr_expect_null(strstr(r->err, "invalid argument"), "%s: %s", cmds[i][0], r->err);
	}
}

Test(dump, restore_onto_a_taken_stored_name_names_it)
{
	char name[64], path[128], want[160];
	struct cistern *c = make("dumptaken", name, sizeof(name), 8);
	tmp_path(path, sizeof(path), "taken");
	cr_assert_eq(run("dump", "-q", name, path)->status, 0);
	struct result *r = run("restore", path);
	cr_assert_eq(r->status, 1);
	snprintf(want, sizeof(want), "cannot restore as '%s'", name);
	cr_assert(strstr(r->err, want), "%s", r->err);
	cleanup(c, name);
	unlink(path);
}

Test(dump, restore_of_a_file_that_is_not_a_dump_says_so)
{
	char path[128], name[64];
	tmp_path(path, sizeof(path), "notdump");
	uname_(name, sizeof(name), "notdump");
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	for (int i = 0; i < 100; i++)
		fputs("just some text\n", f);
	fclose(f);
	struct result *r = run("restore", path, name);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "not a cistern dump"), "%s", r->err);
	cr_assert(!exists(name));
	r = run("restore", "--check", path);
	cr_assert_eq(r->status, 1);
	cr_assert(strstr(r->err, "not a cistern dump"), "%s", r->err);
	unlink(path);
}

Test(dump, restore_of_a_fifo_does_not_wait_for_a_writer)
{
	char path[128], name[64];
	tmp_path(path, sizeof(path), "fifo");
	uname_(name, sizeof(name), "fifodump");
	cr_assert_eq(mkfifo(path, 0600), 0);
	run_alarm = 20;
	struct result *r = run("restore", path, name);
	run_alarm = 0;
	/* Before unlinking: a restore that waits is given a writer, and goes on. */
	int w = open(path, O_WRONLY | O_NONBLOCK);
	if (w >= 0)
		close(w);
	unlink(path);
	cr_assert_eq(r->status, 1, "status %d: %s", r->status, r->err);
	cr_assert(strstr(r->err, "not a cistern dump"), "%s", r->err);
	cr_assert(!exists(name));
}

/* ---- text from others reaches the terminal escaped ------------------------ */

/* Whether the captured text holds a byte a terminal would obey (C0 but newline, DEL). */
static bool has_control(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if ((*p < 0x20 && *p != '\n') || *p == 0x7f)
			return true;
	return false;
}

/*
 * A child that names itself `comm` (as any process may), attaches to `name`,
 * says it is ready and waits to be killed.
 */
static pid_t attach_as(const char *name, const char *comm)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork_child();
	if (pid == 0) {
		close(p[0]);
		struct cistern *h;
		if (prctl(PR_SET_NAME, comm) < 0 || cistern_attach(name, &h) < 0)
			_exit(1);
		ready_then_wait(p[1]);
	}
	pid = await_ready(p, pid);
	cr_assert_gt(pid, 0, "the child failed to attach");
	return pid;
}

Test(escape, inspect_shows_a_process_name_of_escape_sequences_escaped)
{
	char name[64];
	struct cistern *c = make("esccomm", name, sizeof(name), 8);
	pid_t pid = attach_as(name, "\033]0;PWNED\a\033[2J");
	struct result *r = run("inspect", name);
	kill_and_reap(pid);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(!has_control(r->out), "a control byte reached the terminal: %s", r->out);
	cr_assert(strstr(r->out, " \\e]0;PWNED\\a\\e[2J "), "%s", r->out);
	cleanup(c, name);
}

Test(escape, inspect_json_writes_del_and_bytes_not_utf8_as_code_points)
{
	char name[64];
	struct cistern *c = make("escjson", name, sizeof(name), 8);
	pid_t pid = attach_as(name, "a\x7f\xff\xc2\x9b\xc3\xa9");
	struct result *r = run("inspect", "--json", name);
	kill_and_reap(pid);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(!has_control(r->out), "a control byte reached the output: %s", r->out);
	cr_assert(!strchr(r->out, 0x7f) && !strchr(r->out, 0xff), "%s", r->out);
	/* é is UTF-8 and passes; the C1 control CSI (c2 9b) does not. */
	cr_assert(strstr(r->out, "\"a\\u007f\\u00ff\\u00c2\\u009b\xc3\xa9\""), "%s", r->out);
	cleanup(c, name);
}

Test(escape, a_bad_name_typed_is_shown_escaped)
{
	struct result *r = run("inspect", "x\033[2J\\y");
	cr_assert_eq(r->status, 2);
	cr_assert(!has_control(r->err), "%s", r->err);
	cr_assert(strstr(r->err, "'x\\e[2J\\\\y'"), "%s", r->err);
}

Test(escape, a_path_in_a_message_is_shown_escaped)
{
	char name[64];
	struct cistern *c = make("escpath", name, sizeof(name), 8);
	struct result *r = run("dump", name, "/nonexistent/\033]0;x\a.dump");
	cr_assert_eq(r->status, 1);
	cr_assert(!has_control(r->err), "%s", r->err);
	cr_assert(strstr(r->err, "/nonexistent/\\e]0;x\\a.dump"), "%s", r->err);
	cleanup(c, name);
}

Test(escape, utf8_passes_in_a_utf8_locale)
{
	setenv("LC_ALL", "C.UTF-8", 1);
	struct result *r = run("inspect", "caf\xc3\xa9!");
	cr_assert_eq(r->status, 2);
	cr_assert(strstr(r->err, "'caf\xc3\xa9!'"), "%s", r->err);
}

Test(escape, non_ascii_bytes_are_escaped_outside_a_utf8_locale)
{
	setenv("LC_ALL", "C", 1);
	struct result *r = run("inspect", "caf\xc3\xa9!");
	cr_assert_eq(r->status, 2);
	cr_assert(strstr(r->err, "'caf\\xc3\\xa9!'"), "%s", r->err);
}

Test(escape, c1_controls_and_invalid_utf8_are_escaped_in_a_utf8_locale)
{
	setenv("LC_ALL", "C.UTF-8", 1);
	/* U+009B is CSI to a terminal that obeys C1 controls; \xff is no UTF-8. */
	struct result *r = run("inspect", "a\xc2\x9b"
					  "2Jb\xff");
	cr_assert_eq(r->status, 2);
	cr_assert(strstr(r->err, "'a\\xc2\\x9b2Jb\\xff'"), "%s", r->err);
}

Test(escape, a_schema_refused_at_create_names_a_control_byte_without_sending_it)
{
	char name[64];
	uname_(name, sizeof(name), "escschema");
	struct result *r = run("create", "--schema", "a\033[2J:int8", name);
	cr_assert_eq(r->status, 1, "%s", r->err);
	cr_assert(!has_control(r->err), "%s", r->err);
	cr_assert(strstr(r->err, "not the byte 0x1b"), "%s", r->err);
	cr_assert(!exists(name));
}

/* A dump of a segment, its stored name then replaced by `stored` (checksums made whole). */
static void dump_named(const char *tag, const char *stored, char *path, size_t size)
{
	char name[64];
	struct cistern *c = make(tag, name, sizeof(name), 8);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	tmp_path(path, size, tag);
	cr_assert_eq(cistern_dump(name, path, NULL, NULL, NULL), 0);
	cleanup(c, name);
	struct dumpfile f;
	dumpfile_load(&f, path);
	memset(f.m.name, 0, sizeof(f.m.name));
	snprintf(f.m.name, sizeof(f.m.name), "%s", stored);
	dumpfile_store(&f, path);
}

Test(escape, restore_check_refuses_a_dump_whose_stored_name_breaks_the_rule)
{
	char path[128];
	dump_named("escdump", "\033]0;PWNED\a", path, sizeof(path));
	struct result *r = run("restore", "--check", path);
	cr_assert_eq(r->status, 1, "%s", r->out);
	cr_assert(!has_control(r->out) && !has_control(r->err), "%s%s", r->out, r->err);
	cr_assert(strstr(r->err, "damaged or truncated dump"), "%s", r->err);
	unlink(path);
}

Test(escape, restore_as_a_name_refuses_a_dump_whose_stored_name_breaks_the_rule)
{
	char path[128], name[64];
	dump_named("escdump2", "../../etc/x", path, sizeof(path));
	uname_(name, sizeof(name), "escdump2-copy");
	struct result *r = run("restore", path, name);
	cr_assert_eq(r->status, 1, "%s", r->err);
	cr_assert(strstr(r->err, "damaged or truncated dump"), "%s", r->err);
	cr_assert(!exists(name));
	unlink(path);
}

/* ---- names and messages that say what is really there -------------------- */

Test(gc, dry_run_predicts_the_refusal_of_a_dangling_link_at_the_dump_path)
{
	char name[64], dir[128], path[256];
	stale_with_samples("gclink", name, sizeof(name), 3);
	gc_dir(dir, sizeof(dir), "link");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	unlink(path);
	cr_assert_eq(symlink("/nonexistent/cistern-target", path), 0);
	struct result *dry = run("gc", "--dry-run", "--dump-to", dir, name);
	cr_assert_eq(dry->status, 1, "%s", dry->out);
	cr_assert(strstr(dry->err, "would not dump to"), "%s", dry->err);
	struct result *real = run("gc", "--dump-to", dir, name);
	cr_assert_eq(real->status, 1, "%s", real->out);
	cr_assert(strstr(real->err, "cannot dump to"), "%s", real->err);
	cr_assert(exists(name));
	cleanup(NULL, name);
	unlink(path);
	rmdir(dir);
}

Test(gc, a_stale_segment_kept_for_its_samples_counts_its_dead_attachment)
{
	char name[64];
	stale_with_samples("gckeptdead", name, sizeof(name), 4);
	struct result *r = run("gc", "--dry-run", name);
	cr_assert_eq(r->status, 0, "%s", r->err);
	cr_assert(strstr(r->out, "4 unread samples and 1 dead attachment would be kept"), "%s",
		  r->out);
	cr_assert_null(strstr(r->out, "reclaim"), "nothing is reclaimed: %s", r->out);
	cleanup(NULL, name);
}
