/* SPDX-License-Identifier: MIT */
/*
 * cistern-bench: measures cistern against its peers and prints one table.
 * Benchmarks report numbers; they assert no times.
 *
 *   cistern-bench [--quick | --smoke] [--reps N] [--target-s S] [--only 1,2,3,4,5,6,7,8]
 *                 [--py PATH] [--py-transfer PATH] [--python PATH]
 *
 * Exit status 0 when every contender ran and every sample it passed arrived
 * whole and in order; 1 when a row says ERR (a peer or cistern failed, or
 * failed its payload checks); 2 for a bad command line.
 */
#include "bench.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef BENCH_SRCDIR
#define BENCH_SRCDIR "bench"
#endif

static void on_signal(int sig)
{
	cleanup_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void usage(FILE *out, const char *argv0)
{
	fprintf(out,
		"usage: %s [--quick | --smoke] [--reps N] [--target-s SECONDS] [--only LIST] [--py "
		"PATH]\n"
		"       [--py-transfer PATH] [--python PATH]\n"
		"  --quick       about one minute: fewer repetitions, shorter runs\n"
		"  --smoke       --quick with one repetition: does every contender run and pass "
		"its\n"
		"                payload checks? (the test suite runs this; its numbers mean "
		"little)\n"
		"  --reps N      measured repetitions per contender (default 7, quick 5)\n"
		"  --target-s S  wall time of one measured throughput run (default 0.5, quick "
		"0.08)\n"
		"  --only LIST   comma-separated sections among 0,1,2,3,4,5,6,7,8\n"
		"  --py PATH     sample_peers.py (default %s/sample_peers.py)\n"
		"  --py-transfer PATH\n"
		"                transfer_peers.py, section 7 (default %s/transfer_peers.py)\n"
		"  --python PATH interpreter for them (default /usr/bin/python3)\n"
		"Exit status: 0 if every row has numbers, 1 if a row says ERR, 2 for bad usage.\n",
		argv0, BENCH_SRCDIR, BENCH_SRCDIR);
}

static void cpu_model(char *out, size_t cap)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];
	snprintf(out, cap, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "model name", 10) == 0) {
			char *p = strchr(line, ':');
			if (p) {
				p++;
				while (*p == ' ' || *p == '\t')
					p++;
				p[strcspn(p, "\n")] = 0;
				snprintf(out, cap, "%s", p);
			}
			break;
		}
	}
	fclose(f);
}

static void loadavg(char *out, size_t cap)
{
	FILE *f = fopen("/proc/loadavg", "r");
	snprintf(out, cap, "?");
	if (f) {
		if (fgets(out, (int)cap, f))
			out[strcspn(out, "\n")] = 0;
		fclose(f);
	}
}

int main(int argc, char **argv)
{
	int reps = 0, smoke = 0;
	double target = 0;

	g_opt.python = "/usr/bin/python3";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--quick") == 0) {
			g_opt.quick = 1;
		} else if (strcmp(a, "--smoke") == 0) {
			g_opt.quick = 1;
			smoke = 1;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout, argv[0]);
			return 0;
		} else if (strcmp(a, "--reps") == 0 && i + 1 < argc) {
			reps = atoi(argv[++i]);
		} else if (strcmp(a, "--target-s") == 0 && i + 1 < argc) {
			target = atof(argv[++i]);
		} else if (strcmp(a, "--only") == 0 && i + 1 < argc) {
			g_opt.only = argv[++i];
		} else if (strcmp(a, "--py") == 0 && i + 1 < argc) {
			g_opt.py = argv[++i];
		} else if (strcmp(a, "--py-transfer") == 0 && i + 1 < argc) {
			g_opt.py_transfer = argv[++i];
		} else if (strcmp(a, "--python") == 0 && i + 1 < argc) {
			g_opt.python = argv[++i];
		} else {
			usage(stderr, argv[0]);
			return 2;
		}
	}
	g_opt.reps = reps > 0 ? reps : (smoke ? 1 : g_opt.quick ? 5 : 7);
	if (g_opt.reps > BENCH_MAX_VALS)
		g_opt.reps = BENCH_MAX_VALS;
	g_opt.target_s = target > 0 ? target : (g_opt.quick ? 0.08 : 0.5);
	g_opt.ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (g_opt.ncpu < 1)
		g_opt.ncpu = 1;
	if (!g_opt.py)
		g_opt.py = BENCH_SRCDIR "/sample_peers.py";
	if (!g_opt.py_transfer)
		g_opt.py_transfer = BENCH_SRCDIR "/transfer_peers.py";

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	atexit(cleanup_all);

	char model[256], load[128];
	struct utsname u;
	cpu_model(model, sizeof model);
	uname(&u);
	loadavg(load, sizeof load);
	printf("cistern-bench: %d CPUs online (%s), kernel %s %s; %d measured repetitions per "
	       "contender, "
	       "interleaved, after one unmeasured calibration/warm-up run; %s mode.\n",
	       g_opt.ncpu, model, u.sysname, u.release, g_opt.reps, g_opt.quick ? "quick" : "full");
	printf("/proc/loadavg at start: %s\n", load);
	char huge[128];
	shm_huge_option(huge, sizeof huge);
	printf("/dev/shm mounted with huge=%s (the pages of cistern's segments and of section 3's "
	       "bounds)\n",
	       huge);
	printf("ratio: sections 1-5, 6c, 7 and 8 = how many times better the cistern reference row "
	       "is (>1: cistern better; 8's end-to-end row: its rate / the reference's); 6a, 6b = "
	       "cost / cost at the smallest size.\n\n");
	fflush(stdout);

	if (bench_section_enabled("0"))
		sec_machine();
	if (bench_section_enabled("1"))
		sec_fifo64(1, 1);
	if (bench_section_enabled("2"))
		sec_fifo64(4, 4);
	if (bench_section_enabled("3"))
		sec_big();
	if (bench_section_enabled("4"))
		sec_sample();
	if (bench_section_enabled("5"))
		sec_latency();
	if (bench_section_enabled("6"))
		sec_scale();
	if (bench_section_enabled("7"))
		sec_pyxfer();
	if (bench_section_enabled("8"))
		sec_remote();

	loadavg(load, sizeof load);
	table_print();
	printf("\n/proc/loadavg at end: %s\n\n", load);
	bars_print();
	cleanup_all();
	/* A row with no numbers but an error means a contender did not do its work. */
	int failed = 0;
	for (int i = 0; i < row_count(); i++) {
		const struct row *r = row_get(i);
		if (strncmp(r->note, "ERR", 3) == 0) {
			fprintf(stderr, "cistern-bench: %s / %s: %s\n", r->section, r->contender,
				r->note);
			failed++;
		}
	}
	if (failed)
		fprintf(stderr, "cistern-bench: %d row(s) failed\n", failed);
	return failed ? 1 : 0;
}
