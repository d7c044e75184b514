/* SPDX-License-Identifier: MIT */
/*
 * memwatch.c - the peak memory of a job of forked processes (memwatch.h).
 */
#include "memwatch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CG_ROOT "/sys/fs/cgroup/memory"

static bool write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text);
}

static uint64_t read_u64_file(const char *path)
{
	FILE *f = fopen(path, "r");
	unsigned long long v = 0;
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

bool memwatch_cg_make(char *dir, size_t cap, const char *tag, int run)
{
	snprintf(dir, cap, CG_ROOT "/cistern-%s-%d-%d", tag, (int)getpid(), run);
	if (geteuid() != 0 || access(CG_ROOT "/cgroup.procs", W_OK) != 0)
		return false;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return false;
	char p[300];
	snprintf(p, sizeof(p), "%s/memory.max_usage_in_bytes", dir);
	if (access(p, R_OK) == 0)
		return true;
	rmdir(dir);
	return false;
}

bool memwatch_cg_join(const char *dir)
{
	char p[300], pid[32];
	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	return write_file(p, pid);
}

uint64_t memwatch_cg_peak(const char *dir)
{
	char p[300];
	snprintf(p, sizeof(p), "%s/memory.max_usage_in_bytes", dir);
	return read_u64_file(p);
}

void memwatch_cg_remove(const char *dir)
{
	/* The last task may take a moment to leave the group after its exit. */
	struct timespec ts = {0, 20 * 1000 * 1000};
	for (int i = 0; i < 50 && rmdir(dir) < 0 && errno == EBUSY; i++)
		nanosleep(&ts, NULL);
}

uint64_t memwatch_pss(pid_t pid)
{
	char p[64], line[256];
	snprintf(p, sizeof(p), "/proc/%d/smaps_rollup", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return 0;
	uint64_t kb = 0;
	unsigned long long v;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Pss_Anon: %llu", &v) == 1 ||
		    sscanf(line, "Pss_File: %llu", &v) == 1)
			kb += v;
	fclose(f);
	return kb * 1024;
}

uint64_t memwatch_shm_bytes(const char *name)
{
	char p[300];
	struct stat st;
	snprintf(p, sizeof(p), "/dev/shm/cistern.%s", name);
	return stat(p, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}
