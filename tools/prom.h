/* SPDX-License-Identifier: MIT */
/*
 * prom.h - the figures of segments in the Prometheus text exposition format,
 * as `cistern exporter` serves them: every family once, a sample per segment
 * (label `segment`), names under the one prefix `cistern_`.
 */
#ifndef CISTERN_PROM_H
#define CISTERN_PROM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cistern.h>
#include <cistern/admin.h>

/* Process roles as the exporter labels them, and their count. */
#define PROM_ROLES 4

/* What one segment holds, taken read-only at one moment. */
struct prom_seg {
	char name[CISTERN_NAME_MAX + 1];
	struct cistern_config cfg; /* cfg.schema unused (NULL) */
	struct cistern_stats st;
	struct cistern_occupancy occ;
	bool have_occ;
	uint64_t created_ns;
	uint32_t procs[PROM_ROLES][2]; /* [role][0 live, 1 dead] */
	uint32_t waiting_readers;      /* live processes waiting for data */
	uint32_t waiting_producers;    /* live processes waiting for room */
	struct cistern_rate rate;      /* the rate limiter's, if have_rate */
	bool have_rate;
	struct cistern_prio_info prio; /* a prioritized segment's, if have_prio */
	bool have_prio;
};

/*
 * Take segment `name`'s figures read-only (cistern_open_readonly: no
 * attachment, pin or counter moves); with `occupancy`, count its slots by
 * state too (time in proportion to its slots). Returns 0 or -errno.
 */
int prom_take(const char *name, uint64_t created_ns, bool occupancy, struct prom_seg *s);

/*
 * Fill s from figures already taken: the segment's config, stats, occupancy,
 * rate limiter and priority totals (NULL: none) and its nprocs attachment
 * entries. created_ns 0: unknown.
 */
void prom_fill(struct prom_seg *s, const char *name, uint64_t created_ns,
	       const struct cistern_config *cfg, const struct cistern_stats *st,
	       const struct cistern_occupancy *occ, const struct cistern_rate *rate,
	       const struct cistern_prio_info *prio, const struct cistern_proc_info *procs,
	       size_t nprocs);

/* When segment `name` was created, as cistern_list() tells it; 0 if it does not. */
uint64_t prom_created_ns(const char *name);

/* Write the families of n segments (n may be 0: headers only where useful). */
void prom_write(FILE *f, const struct prom_seg *s, size_t n);

/* One family's header: # HELP and # TYPE. */
void prom_family(FILE *f, const char *name, const char *type, const char *help);

/*
 * A running dump's progress (`cistern dump --textfile`): samples written of
 * the samples it found (0 until it has found them), and when it started
 * (Unix seconds).
 */
struct prom_dump {
	char name[CISTERN_NAME_MAX + 1];
	uint64_t written, samples;
	double started_s;
};

/* Write the cistern_dump_* families of n running dumps. */
void prom_dump_write(FILE *f, const struct prom_dump *d, size_t n);

/*
 * Read one dump's progress back from text prom_dump_write() wrote for it:
 * 0, or -EBADMSG if the text does not give a valid name and all three values.
 */
int prom_dump_parse(const char *text, struct prom_dump *d);

/* Write s to f with every control byte, and every byte from 0x7f up, as \xNN. */
void prom_escape_log(FILE *f, const char *s);

#endif
