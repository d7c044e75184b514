/* SPDX-License-Identifier: MIT */
/*
 * pyxfer.c - section 7: 4 KiB samples from one Python process to another, with
 * cistern's Python binding beside multiprocessing.Queue and a
 * multiprocessing.shared_memory ring with a hand-made index. The contenders
 * run in bench/transfer_peers.py (its docstring says how), under the
 * interpreter given with --python, with the binding of this build on its
 * path; this file runs it and reads its rows.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BENCH_PYPATH
#define BENCH_PYPATH ""
#endif

#define X_SIZE 4096u
#define X_BATCH 64u
#define X_SLOTS 1024u

void sec_pyxfer(void)
{
	const char *section = "7. Python 1P/1R 4 KiB";
	char cmd[2048];
	snprintf(cmd, sizeof cmd,
		 "'%s' '%s' --reps %d --target-s %g --size %u --batch %u --slots %u --cistern-path "
		 "'%s'",
		 g_opt.python, g_opt.py_transfer, g_opt.reps, g_opt.target_s, X_SIZE, X_BATCH,
		 X_SLOTS, BENCH_PYPATH);
	progress("[%s] running %s", section, cmd);
	fflush(NULL);
	FILE *f = popen(cmd, "r");
	int got = 0, ref = -1;
	if (f) {
		char line[4096];
		while (fgets(line, sizeof line, f)) {
			line[strcspn(line, "\n")] = 0;
			if (strncmp(line, "ROW\t", 4) != 0) {
				if (line[0])
					progress("[%s] python: %s", section, line);
				continue;
			}
			char *name = line + 4, *vals = strchr(name, '\t');
			if (!vals)
				continue;
			*vals++ = 0;
			int r = row_add(section, name, "samples", "k samples/s", HIGHER_BETTER);
			/* The first row, cistern's batch calls, is the reference of the ratios. */
			if (ref < 0)
				ref = r;
			row_ref(r, ref, 0);
			if (strncmp(vals, "n/a", 3) == 0 || strncmp(vals, "ERR", 3) == 0) {
				row_note(r, "%s", vals);
			} else {
				for (char *t = strtok(vals, ","); t; t = strtok(NULL, ","))
					row_push(r, atof(t));
			}
			if (strncmp(name, "cistern put_batch", 17) == 0)
				g_bars.s7_cis_batch = r;
			else if (strncmp(name, "cistern put/get_into", 20) == 0)
				g_bars.s7_cis_one = r;
			else if (strncmp(name, "multiprocessing.Queue put/get", 29) == 0)
				g_bars.s7_queue = r;
			got++;
		}
		int st = pclose(f);
		if (st != 0)
			progress("[%s] %s exited with status %d", section, g_opt.py_transfer, st);
	}
	if (!got) {
		int r = row_add(section, "cistern / multiprocessing peers", "samples", "",
				HIGHER_BETTER);
		row_note(r, "ERR: %s did not run (see stderr)", g_opt.py_transfer);
	}
}
