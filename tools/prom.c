/* SPDX-License-Identifier: MIT */
/*
 * prom.c - segments' figures in the Prometheus text exposition format (see
 * prom.h). Names follow Prometheus' conventions: one prefix, base units
 * (seconds, bytes), `_total` on counters, parameters in `cistern_info`, and
 * no label that grows with the samples (a segment, a role, a side, a state or
 * a seen-count bucket only). Every family is written once, with one sample
 * per segment, as the format requires.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "prom.h"
#include <cistern/admin.h>

static const char *const role_label[PROM_ROLES] = {"attached", "producer", "reader",
						   "producer+reader"};
static const char *const bucket_label[CISTERN_SEEN_BUCKETS] = {
	"0", "1", "2", "3", "4", "5-8", "9-16", "17+",
};

void prom_fill(struct prom_seg *s, const char *name, uint64_t created_ns,
	       const struct cistern_config *cfg, const struct cistern_stats *st,
	       const struct cistern_occupancy *occ, const struct cistern_rate *rate,
	       const struct cistern_prio_info *prio, const struct cistern_proc_info *procs,
	       size_t nprocs)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->created_ns = created_ns;
	s->cfg = *cfg;
	s->cfg.schema = NULL;   /* the handle's copy goes with it */
	s->cfg.cold_dir = NULL; /* likewise */
	s->st = *st;
	if (occ) {
		s->occ = *occ;
		s->have_occ = true;
	}
	if (rate) {
		s->rate = *rate;
		s->have_rate = true;
	}
	if (prio) {
		s->prio = *prio;
		s->have_prio = true;
	}
	for (size_t i = 0; i < nprocs; i++) {
		const struct cistern_proc_info *p = &procs[i];
		uint32_t role = p->role & (CISTERN_PROC_PRODUCER | CISTERN_PROC_READER);
		s->procs[role][p->alive ? 0 : 1]++;
		if (p->alive && p->waiting == 1)
			s->waiting_readers++;
		else if (p->alive && p->waiting == 2)
			s->waiting_producers++;
	}
}

uint64_t prom_created_ns(const char *name)
{
	struct cistern_segment_info *list = NULL;
	int n = cistern_list(&list);
	uint64_t t = 0;
	for (int i = 0; i < n; i++)
		if (strcmp(list[i].name, name) == 0)
			t = list[i].created_ns;
	free(list);
	return t;
}

int prom_take(const char *name, uint64_t created_ns, bool occupancy, struct prom_seg *s)
{
	struct cistern *c;
	int r = cistern_open_readonly(name, &c);
	if (r < 0)
		return r;
	struct cistern_config cfg;
	struct cistern_stats st;
	struct cistern_occupancy occ;
	struct cistern_rate rate;
	struct cistern_prio_info prio;
	struct cistern_proc_info *p = NULL;
	bool have_occ = false;
	if ((r = cistern_config_get(c, &cfg)) < 0 || (r = cistern_stats_get(c, &st)) < 0)
		goto out;
	if (occupancy)
		have_occ = cistern_occupancy_get(c, &occ) == 0;
	uint32_t cap = cfg.max_procs ? cfg.max_procs : 1;
	p = calloc(cap, sizeof(*p));
	if (!p) {
		r = -ENOMEM;
		goto out;
	}
	r = cistern_procs_get(c, p, cap);
	if (r >= 0) {
		bool have_rate = cistern_rate_get(c, &rate) == 0;
		/* -EOPNOTSUPP for another user's segment read through a copy: left out. */
		bool have_prio = cfg.policy == CISTERN_PRIORITIZED &&
				 cistern_prio_info_get(c, &prio) == 0;
		prom_fill(s, name, created_ns, &cfg, &st, have_occ ? &occ : NULL,
			  have_rate ? &rate : NULL, have_prio ? &prio : NULL, p,
			  (uint32_t)r < cap ? (size_t)r : cap);
		r = 0;
	}
out:
	free(p);
	cistern_detach(c);
	return r;
}

void prom_family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{segment="S"[,lname="lvalue"]} value */
static void sample(FILE *f, const char *name, const struct prom_seg *s, const char *lname,
		   const char *lvalue, double v)
{
	fprintf(f, "%s{segment=", name);
	prom_label(f, s->name);
	if (lname) {
		fprintf(f, ",%s=", lname);
		prom_label(f, lvalue);
	}
	fprintf(f, "} %.17g\n", v);
}

static void sample_u64(FILE *f, const char *name, const struct prom_seg *s, uint64_t v)
{
	fprintf(f, "%s{segment=", name);
	prom_label(f, s->name);
	fprintf(f, "} %" PRIu64 "\n", v);
}

/* A family with one plain sample per segment, taken by `get` from a segment. */
#define EACH(f, name, type, help, expr)                       \
	do {                                                  \
		prom_family(f, name, type, help);             \
		for (size_t i_ = 0; i_ < n; i_++) {           \
			const struct prom_seg *x = &segs[i_]; \
			sample_u64(f, name, x, (expr));       \
		}                                             \
	} while (0)

/*
 * The prioritized policy's parameters and totals (cistern_prio_info_get()):
 * families only if some segment has them, samples only for those.
 */
static void prio_write(FILE *f, const struct prom_seg *segs, size_t n)
{
	bool any = false;
	for (size_t i = 0; i < n; i++)
		any |= segs[i].have_prio;
	if (!any)
		return;
#define PRIO(name, help, expr)                                          \
	do {                                                            \
		prom_family(f, name, "gauge", help);                    \
		for (size_t i_ = 0; i_ < n; i_++) {                     \
			const struct prom_seg *x = &segs[i_];           \
			if (x->have_prio)                               \
				sample(f, name, x, NULL, NULL, (expr)); \
		}                                                       \
	} while (0)
#define PRIO_U64(name, help, expr)                              \
	do {                                                    \
		prom_family(f, name, "counter", help);          \
		for (size_t i_ = 0; i_ < n; i_++) {             \
			const struct prom_seg *x = &segs[i_];   \
			if (x->have_prio)                       \
				sample_u64(f, name, x, (expr)); \
		}                                               \
	} while (0)
	PRIO("cistern_priority_alpha",
	     "Prioritized: exponent of the priorities in the draw probabilities.", x->prio.alpha);
	PRIO("cistern_priority_beta",
	     "Prioritized: exponent of the importance weights, as it is now.", x->prio.beta);
	PRIO("cistern_priority_epsilon", "Prioritized: added to every priority.", x->prio.epsilon);
	PRIO("cistern_priority_mass",
	     "Prioritized: sum of (priority + epsilon)^alpha over the samples held.",
	     x->prio.total);
	PRIO("cistern_priority_least",
	     "Prioritized: smallest (priority + epsilon)^alpha held (0: none held).",
	     x->prio.least);
	PRIO("cistern_priority_max",
	     "Prioritized: largest priority seen, given to a put without one.",
	     x->prio.max_priority);
	PRIO_U64("cistern_priority_updates_total", "Prioritized: priorities set by updates.",
		 x->prio.updates);
	PRIO_U64("cistern_priority_stale_updates_total",
		 "Prioritized: priority updates ignored, their sample gone from the buffer.",
		 x->prio.stale_updates);
	PRIO_U64("cistern_priority_rebuilds_total",
		 "Prioritized: sum tree rebuilds after a process died holding its lock.",
		 x->prio.rebuilds);
#undef PRIO
#undef PRIO_U64
}

static const char *yes(uint32_t flags, uint32_t bit)
{
	return (flags & bit) ? "true" : "false";
}

void prom_write(FILE *f, const struct prom_seg *segs, size_t n)
{
	if (n == 0)
		return;
	prom_family(f, "cistern_info", "gauge", "Segment parameters as labels (value 1).");
	for (size_t i = 0; i < n; i++) {
		const struct prom_seg *x = &segs[i];
		fprintf(f, "cistern_info{segment=");
		prom_label(f, x->name);
		const char *pol = cistern_policy_name(x->cfg.policy);
		fprintf(f,
			",policy=\"%s\",lossy=\"%s\",single_producer=\"%s\",single_reader=\"%s\""
			",dead_producer_done=\"%s\"} 1\n",
			pol ? pol : "unknown", yes(x->cfg.flags, CISTERN_LOSSY),
			yes(x->cfg.flags, CISTERN_SINGLE_PRODUCER),
			yes(x->cfg.flags, CISTERN_SINGLE_READER),
			yes(x->cfg.flags, CISTERN_DEAD_PRODUCER_DONE));
	}
	EACH(f, "cistern_slots", "gauge", "Capacity: samples the segment can hold.",
	     x->cfg.slot_count);
	EACH(f, "cistern_slot_size_bytes", "gauge", "Largest sample, in bytes.", x->cfg.slot_size);
	EACH(f, "cistern_watermark", "gauge",
	     "Samples a reservoir holds before readers may draw (0: none).", x->cfg.watermark);
	EACH(f, "cistern_max_processes", "gauge", "Attachments the segment has room for.",
	     (uint64_t)x->cfg.max_procs);
	prom_family(f, "cistern_created_timestamp_seconds", "gauge",
		    "When the segment was created, in seconds since the epoch.");
	for (size_t i = 0; i < n; i++) {
		if (!segs[i].created_ns)
			continue; /* unknown */
		fputs("cistern_created_timestamp_seconds{segment=", f);
		prom_label(f, segs[i].name);
		fprintf(f, "} %" PRIu64 ".%03u\n", segs[i].created_ns / 1000000000u,
			(unsigned)(segs[i].created_ns / 1000000u % 1000u));
	}
	EACH(f, "cistern_population", "gauge", "Samples held now.", x->st.population);
	EACH(f, "cistern_reception_closed", "gauge", "1 once reception is closed, else 0.",
	     (uint64_t)(x->st.reception_closed != 0));
	EACH(f, "cistern_producers_expected", "gauge",
	     "Producers the segment was told to expect (0: not counted).",
	     (uint64_t)x->st.producers_expected);
	EACH(f, "cistern_producers_done", "gauge", "Producers that said they are done.",
	     (uint64_t)x->st.producers_done);
	EACH(f, "cistern_producers_died", "gauge",
	     "Counted producers that died before they said they were done.",
	     (uint64_t)x->st.producers_died);
	EACH(f, "cistern_unpaired_samples", "gauge",
	     "SimPairedReservoir: samples left without a partner at the end.", x->st.unpaired);

	/* The cold tier: families only if some segment has one, samples only for those. */
	bool any_cold = false;
	for (size_t i = 0; i < n; i++)
		any_cold |= segs[i].st.cold_slots != 0;
#define COLD(f, name, type, help, expr)                         \
	do {                                                    \
		prom_family(f, name, type, help);               \
		for (size_t i_ = 0; i_ < n; i_++) {             \
			const struct prom_seg *x = &segs[i_];   \
			if (x->st.cold_slots)                   \
				sample_u64(f, name, x, (expr)); \
		}                                               \
	} while (0)
	if (any_cold) {
		COLD(f, "cistern_cold_slots", "gauge", "Slots of the cold tier on disk.",
		     x->st.cold_slots);
		COLD(f, "cistern_cold_population", "gauge",
		     "Samples held in the cold tier (part of cistern_population).",
		     x->st.cold_population);
		COLD(f, "cistern_cold_disk_bytes", "gauge", "Bytes of the cold file.",
		     x->st.cold_disk_bytes);
		COLD(f, "cistern_cold_spilled_total", "counter",
		     "Samples moved from memory to the cold tier.", x->st.cold_spilled);
		COLD(f, "cistern_cold_reads_total", "counter", "Cold samples read back.",
		     x->st.cold_reads);
		COLD(f, "cistern_cold_evictions_total", "counter",
		     "Cold samples evicted to make room (also in cistern_evictions_total).",
		     x->st.cold_evictions);
		COLD(f, "cistern_cold_bytes_written_total", "counter",
		     "Bytes written to the cold file.", x->st.cold_bytes_written);
		COLD(f, "cistern_cold_bytes_read_total", "counter",
		     "Bytes read from the cold file.", x->st.cold_bytes_read);
		COLD(f, "cistern_cold_stage_bytes", "gauge",
		     "Bytes of a FIFO's staging runs in the segment (0 for other policies).",
		     x->st.cold_stage_bytes);
		COLD(f, "cistern_cold_groups_staged", "gauge",
		     "Groups of cold slots staged in memory, their write not started.",
		     x->st.cold_groups_staged);
		COLD(f, "cistern_cold_groups_writing", "gauge",
		     "Groups of cold slots being written (or not yet collected by their writer).",
		     x->st.cold_groups_writing);
		COLD(f, "cistern_cold_write_waits_total", "counter",
		     "Times a put waited for a group's write to the cold file.",
		     x->st.cold_write_waits);
		prom_family(f, "cistern_cold_write_wait_seconds_total", "counter",
			    "Time spent waiting for cold writes to complete.");
		for (size_t i = 0; i < n; i++)
			if (segs[i].st.cold_slots)
				sample(f, "cistern_cold_write_wait_seconds_total", &segs[i], NULL,
				       NULL, (double)segs[i].st.cold_write_wait_ns / 1e9);
		prom_family(f, "cistern_cold_read_wait_seconds_total", "counter",
			    "Time spent waiting for cold reads to complete.");
		for (size_t i = 0; i < n; i++)
			if (segs[i].st.cold_slots)
				sample(f, "cistern_cold_read_wait_seconds_total", &segs[i], NULL,
				       NULL, (double)segs[i].st.cold_read_wait_ns / 1e9);
	}
#undef COLD

	EACH(f, "cistern_puts_total", "counter", "Samples committed.", x->st.puts);
	EACH(f, "cistern_gets_total", "counter", "Samples handed to readers.", x->st.gets);
	EACH(f, "cistern_evictions_total", "counter", "Samples evicted to make room.",
	     x->st.evictions);
	EACH(f, "cistern_evicted_unseen_total", "counter",
	     "Samples evicted before any reader saw them.", x->st.evicted_unseen);
	EACH(f, "cistern_redeliveries_total", "counter",
	     "Samples handed out again after their reader died.", x->st.redeliveries);
	EACH(f, "cistern_reclaimed_total", "counter", "Reservations of dead producers dropped.",
	     x->st.reclaimed);
	EACH(f, "cistern_producer_waits_total", "counter", "Times a producer waited for room.",
	     x->st.producer_waits);
	prom_family(f, "cistern_producer_wait_seconds_total", "counter",
		    "Time producers spent waiting for room.");
	for (size_t i = 0; i < n; i++)
		sample(f, "cistern_producer_wait_seconds_total", &segs[i], NULL, NULL,
		       (double)segs[i].st.producer_wait_ns / 1e9);
	EACH(f, "cistern_reader_waits_total", "counter", "Times a reader waited for data.",
	     x->st.reader_waits);
	prom_family(f, "cistern_reader_wait_seconds_total", "counter",
		    "Time readers spent waiting for data.");
	for (size_t i = 0; i < n; i++)
		sample(f, "cistern_reader_wait_seconds_total", &segs[i], NULL, NULL,
		       (double)segs[i].st.reader_wait_ns / 1e9);
	prom_family(f, "cistern_left_samples_total", "counter",
		    "Samples that left the segment, by how many times readers saw them.");
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < CISTERN_SEEN_BUCKETS; b++)
			sample(f, "cistern_left_samples_total", &segs[i], "seen", bucket_label[b],
			       (double)segs[i].st.seen_hist[b]);

	prom_family(f, "cistern_processes", "gauge",
		    "Attached processes by role, live or dead (died without detaching).");
	for (size_t i = 0; i < n; i++)
		for (int r = 0; r < PROM_ROLES; r++)
			for (int d = 0; d < 2; d++) {
				fprintf(f, "cistern_processes{segment=");
				prom_label(f, segs[i].name);
				fprintf(f, ",role=\"%s\",state=\"%s\"} %u\n", role_label[r],
					d ? "dead" : "live", segs[i].procs[r][d]);
			}
	prom_family(f, "cistern_waiting_processes", "gauge",
		    "Live processes waiting now: readers for data, producers for room.");
	for (size_t i = 0; i < n; i++) {
		sample(f, "cistern_waiting_processes", &segs[i], "side", "reader",
		       segs[i].waiting_readers);
		sample(f, "cistern_waiting_processes", &segs[i], "side", "producer",
		       segs[i].waiting_producers);
	}

	/* The rate limiter's parameters, on the segments that have one. */
	size_t limited = 0;
	for (size_t i = 0; i < n; i++)
		limited += segs[i].cfg.reads_per_put > 0;
	if (limited) {
		prom_family(f, "cistern_reads_per_put", "gauge",
			    "Rate limiter: reads allowed per put after the watermark.");
		for (size_t i = 0; i < n; i++)
			if (segs[i].cfg.reads_per_put > 0)
				sample(f, "cistern_reads_per_put", &segs[i], NULL, NULL,
				       segs[i].cfg.reads_per_put);
		prom_family(f, "cistern_rate_limit_read_budget", "gauge",
			    "Rate limiter: reads of one sample that may start now (at or "
			    "below 0, readers wait for puts).");
		for (size_t i = 0; i < n; i++)
			if (segs[i].have_rate)
				sample(f, "cistern_rate_limit_read_budget", &segs[i], NULL, NULL,
				       segs[i].rate.read_budget);
	}

	prio_write(f, segs, n);

	size_t occ = 0;
	for (size_t i = 0; i < n; i++)
		occ += segs[i].have_occ;
	if (!occ)
		return;
	prom_family(f, "cistern_slots_by_state", "gauge", "Slots in each state.");
	for (size_t i = 0; i < n; i++)
		if (segs[i].have_occ)
			for (int k = 0; k < CISTERN_SLOT_CLASSES; k++)
				sample(f, "cistern_slots_by_state", &segs[i], "state",
				       cistern_slot_class_name((enum cistern_slot_class)k),
				       (double)segs[i].occ.slots[k]);
	prom_family(f, "cistern_held_samples", "gauge",
		    "Samples held now, by how many times readers saw them.");
	for (size_t i = 0; i < n; i++)
		if (segs[i].have_occ)
			for (int b = 0; b < CISTERN_SEEN_BUCKETS; b++)
				sample(f, "cistern_held_samples", &segs[i], "seen", bucket_label[b],
				       (double)segs[i].occ.held_seen_hist[b]);
	prom_family(f, "cistern_held_bytes", "gauge", "Payload bytes of the samples held now.");
	for (size_t i = 0; i < n; i++)
		if (segs[i].have_occ)
			sample(f, "cistern_held_bytes", &segs[i], NULL, NULL,
			       (double)segs[i].occ.held_bytes);
	prom_family(f, "cistern_pinned_slots", "gauge", "Slots pinned by at least one reader.");
	for (size_t i = 0; i < n; i++)
		if (segs[i].have_occ)
			sample(f, "cistern_pinned_slots", &segs[i], NULL, NULL,
			       (double)segs[i].occ.pinned);
}

void prom_escape_log(FILE *f, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p >= 0x7f || *p == '\\')
			fprintf(f, "\\x%02x", *p);
		else
			fputc(*p, f);
	}
}

void prom_dump_write(FILE *f, const struct prom_dump *d, size_t n)
{
	prom_family(f, "cistern_dump_progress_ratio", "gauge",
		    "Share of its samples a running dump has written, 0 to 1.");
	for (size_t i = 0; i < n; i++) {
		fputs("cistern_dump_progress_ratio{segment=", f);
		prom_label(f, d[i].name);
		fprintf(f, "} %.6f\n",
			d[i].samples ? (double)d[i].written / (double)d[i].samples : 0.0);
	}
	prom_family(f, "cistern_dump_written_samples", "gauge",
		    "Samples a running dump has written so far.");
	for (size_t i = 0; i < n; i++) {
		fputs("cistern_dump_written_samples{segment=", f);
		prom_label(f, d[i].name);
		fprintf(f, "} %" PRIu64 "\n", d[i].written);
	}
	prom_family(f, "cistern_dump_samples", "gauge",
		    "Samples a running dump writes in all (0 until it has found them).");
	for (size_t i = 0; i < n; i++) {
		fputs("cistern_dump_samples{segment=", f);
		prom_label(f, d[i].name);
		fprintf(f, "} %" PRIu64 "\n", d[i].samples);
	}
	prom_family(f, "cistern_dump_start_time_seconds", "gauge",
		    "When a running dump started, in seconds since the Unix epoch.");
	for (size_t i = 0; i < n; i++) {
		fputs("cistern_dump_start_time_seconds{segment=", f);
		prom_label(f, d[i].name);
		fprintf(f, "} %.3f\n", d[i].started_s);
	}
}

/* The value of family `fam`'s sample in text, whose label must be segment="name". */
static int dump_value(const char *text, const char *fam, char *name, double *v)
{
	char key[64];
	snprintf(key, sizeof(key), "\n%s{segment=\"", fam);
	const char *p = strstr(text, key);
	if (!p)
		return -EBADMSG;
	p += strlen(key);
	const char *q = strchr(p, '"');
	if (!q || q - p > CISTERN_NAME_MAX || q[1] != '}' || q[2] != ' ')
		return -EBADMSG;
	char got[CISTERN_NAME_MAX + 1];
	memcpy(got, p, (size_t)(q - p));
	got[q - p] = '\0';
	if (cistern_name_valid(got) < 0 || (name[0] && strcmp(name, got) != 0))
		return -EBADMSG;
	strcpy(name, got);
	char *end;
	*v = strtod(q + 3, &end);
	return end == q + 3 || *end != '\n' || !(*v >= 0) ? -EBADMSG : 0;
}

int prom_dump_parse(const char *text, struct prom_dump *d)
{
	double written, samples, started;
	d->name[0] = '\0';
	if (dump_value(text, "cistern_dump_written_samples", d->name, &written) < 0 ||
	    dump_value(text, "cistern_dump_samples", d->name, &samples) < 0 ||
	    dump_value(text, "cistern_dump_start_time_seconds", d->name, &started) < 0 ||
	    written > samples || samples > (double)UINT64_MAX)
		return -EBADMSG;
	d->written = (uint64_t)written;
	d->samples = (uint64_t)samples;
	d->started_s = started;
	return 0;
}
