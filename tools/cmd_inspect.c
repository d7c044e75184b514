/* SPDX-License-Identifier: MIT */
/*
 * cmd_inspect.c - `cistern inspect`: everything about one segment, as text,
 * JSON or Prometheus exposition, once or refreshed live. It opens the segment
 * read-only (cistern_open_readonly): no attachment, no pin, no counter moves.
 */
#include <errno.h>
#include <stdio.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "prom.h"
#include <cistern/admin.h>

static const char usage[] =
	"Usage: cistern inspect NAME [--json | --prometheus] [--watch [SECONDS]]\n"
	"Show everything about segment NAME: parameters, the schema of its samples\n"
	"(each field's dtype, shape and offset), statistics, the seen-count\n"
	"histograms (of samples that left, and of samples held now), slot occupancy\n"
	"by state, and the attached processes with role, pid, name and liveness.\n"
	"A process name, a schema, any text another user controls, is printed\n"
	"escaped (\\e, \\xNN, ...; see cistern(1), Text from others).\n"
	"Inspecting never disturbs the segment: it maps it read-only, takes no\n"
	"attachment, pin or lock, and moves no counter. A segment someone else could\n"
	"shrink (another user's, or one others may write) is not mapped but read\n"
	"into memory of our own, so that its owner cannot kill the command.\n"
	"\n"
	"  -j, --json              one JSON object\n"
	"  -P, --prometheus        Prometheus text exposition format\n"
	"  -w, --watch [SECONDS]   refresh every SECONDS (default 1) until interrupted,\n"
	"                          with put and get rates\n"
	"  -h, --help              show this help\n";

const struct command cmd_inspect;

static const char *const bucket_names[CISTERN_SEEN_BUCKETS] = {
	"0", "1", "2", "3", "4", "5-8", "9-16", "17+",
};

struct snapshot {
	struct cistern_config cfg;
	struct cistern_stats st;
	struct cistern_occupancy occ;
	bool have_occ;
	struct cistern_rate rate;
	bool have_rate;
	struct cistern_prio_info prio; /* prioritized segments */
	bool have_prio;
	struct cistern_proc_info *procs;
	int nprocs;
	struct stat file;
	char name[CISTERN_NAME_MAX + 1];
	uint64_t taken_ns;
	struct schema schema; /* n 0: none */
	char cold_dir[CISTERN_COLD_DIR_MAX + 1];
};

static int take(const char *name, struct snapshot *s)
{
	struct cistern *c;
	int r = cistern_open_readonly(name, &c);
	if (r < 0)
		return r;
	free(s->procs);
	schema_free(&s->schema);
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", name);
	if (schema_load(c, &s->schema) < 0) {
		cistern_detach(c);
		return -ENOMEM;
	}
	cistern_config_get(c, &s->cfg);
	s->cfg.schema = s->schema.n ? s->schema.text : NULL; /* the handle's copy goes below */
	snprintf(s->cold_dir, sizeof(s->cold_dir), "%s", s->cfg.cold_dir ? s->cfg.cold_dir : "");
	s->cfg.cold_dir = s->cold_dir[0] ? s->cold_dir : NULL;
	/*
	 * Another user's segment is read through a copy, and these calls fail
	 * (-EPROTO) if its owner shrank it meanwhile: no half-read picture.
	 */
	r = cistern_stats_get(c, &s->st);
	if (r == 0) {
		r = cistern_occupancy_get(c, &s->occ);
		s->have_occ = r == 0;
		r = r == -ENOTSUP ? 0 : r;
	}
	if (r < 0) {
		cistern_detach(c);
		return r;
	}
	s->have_rate = cistern_rate_get(c, &s->rate) == 0;
	/* -EOPNOTSUPP for another user's segment, read through a copy: the parameters only. */
	s->have_prio = s->cfg.policy == CISTERN_PRIORITIZED &&
		       cistern_prio_info_get(c, &s->prio) == 0;
	s->procs = calloc(s->cfg.max_procs ? s->cfg.max_procs : 1, sizeof(*s->procs));
	if (!s->procs) {
		cistern_detach(c);
		return -ENOMEM;
	}
	r = cistern_procs_get(c, s->procs, s->cfg.max_procs);
	if (r < 0) {
		cistern_detach(c);
		return r;
	}
	s->nprocs = r > (int)s->cfg.max_procs ? (int)s->cfg.max_procs : r;
	char path[128];
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	stat(path, &s->file);
	s->taken_ns = now_ns();
	cistern_detach(c);
	return 0;
}

static const char *role_name(uint32_t role)
{
	switch (role & (CISTERN_PROC_PRODUCER | CISTERN_PROC_READER)) {
	case CISTERN_PROC_PRODUCER:
		return "producer";
	case CISTERN_PROC_READER:
		return "reader";
	case CISTERN_PROC_PRODUCER | CISTERN_PROC_READER:
		return "producer+reader";
	default:
		return "attached";
	}
}

static const char *waiting_name(uint32_t w)
{
	return w == 1 ? "data" : w == 2 ? "room" : "-";
}

static void text(const struct snapshot *s, const struct snapshot *prev)
{
	char a[32], b[32], c[40];
	const struct cistern_config *k = &s->cfg;
	const struct cistern_stats *st = &s->st;
	printf("segment    %s  (/dev/shm/cistern.%s, %s, mode %04o, uid %u)\n", s->name, s->name,
	       fmt_bytes((uint64_t)s->file.st_size, a, sizeof(a)), k->mode,
	       (unsigned)s->file.st_uid);
	printf("policy     %s  %" PRIu64 " slots x %s", cistern_policy_name(k->policy),
	       k->slot_count, fmt_bytes(k->slot_size, b, sizeof(b)));
	if (k->policy != CISTERN_FIFO)
		printf("  watermark %" PRIu64, k->watermark);
	if (k->policy == CISTERN_FIRO)
		printf("  pseudo-epochs %u", k->pseudo_epochs);
	/* A prioritized segment with a sweep size reads windows of that table. */
	if (k->policy == CISTERN_SIM_PAIRED_RESERVOIR ||
	    (k->policy == CISTERN_PRIORITIZED && k->sweep_size))
		printf("  sweep-size %u  time-steps %u", k->sweep_size, k->nb_time_steps);
	if (k->policy == CISTERN_BATCH_RESERVOIR)
		printf("  batch-size %u", k->batch_size);
	if (k->max_times_sampled)
		printf("  max-times-sampled %u", k->max_times_sampled);
	if (k->policy == CISTERN_PRIORITIZED)
		printf("  alpha %g  beta %g  epsilon %g", k->alpha,
		       s->have_prio ? s->prio.beta : k->beta, k->epsilon);
	if (k->flags & CISTERN_LOSSY)
		printf("  lossy");
	if (k->flags & CISTERN_SINGLE_PRODUCER)
		printf("  single-producer");
	if (k->flags & CISTERN_SINGLE_READER)
		printf("  single-reader");
	if (k->reads_per_put > 0 && k->rate_slack > 0)
		printf("  reads-per-put %g (slack %g)", k->reads_per_put, k->rate_slack);
	else if (k->reads_per_put > 0)
		printf("  reads-per-put %g (slack automatic)", k->reads_per_put);
	printf("\n           seed %" PRIu64 "  max-procs %u", k->seed, k->max_procs);
	if (k->expected_producers)
		printf("  producers %u", k->expected_producers);
	if (k->flags & CISTERN_DEAD_PRODUCER_DONE)
		printf("  dead-producer-done");
	printf("\nreception  %s\n", st->reception_closed ? "closed" : "open");
	if (s->have_prio)
		printf("priorities total %g (sum of (priority + epsilon)^alpha held), largest seen "
		       "%g\n           updates %" PRIu64 ", stale ids %" PRIu64 "\n",
		       s->prio.total, s->prio.max_priority, s->prio.updates, s->prio.stale_updates);
	if (st->producers_expected) {
		printf("producers  %u expected, %u done, %u died before done",
		       st->producers_expected, st->producers_done, st->producers_died);
		if (st->producers_died)
			printf(" (%s)", (k->flags & CISTERN_DEAD_PRODUCER_DONE)
						? "counted as done"
						: "waiting for a replacement to say it is done");
		printf("\n");
	}
	if (s->schema.n) {
		printf("schema     %s\n           %d field%s, %" PRIu64 " bytes a sample\n",
		       esc(s->schema.text), s->schema.n, s->schema.n == 1 ? "" : "s",
		       s->schema.size);
		for (int i = 0; i < s->schema.n; i++) {
			const struct cistern_field *f = &s->schema.f[i];
			char t[160];
			printf("  %-20s %-20s at %8" PRIu64 ", %" PRIu64 " bytes\n", esc(f->name),
			       field_type(f, t, sizeof(t)), f->offset, f->size);
		}
	}

	printf("\nstatistics\n");
	printf("  population      %12" PRIu64 " of %" PRIu64 "\n", st->population,
	       k->slot_count + st->cold_slots);
	if (st->cold_slots) {
		char db[16];
		printf("    in memory     %12" PRIu64 " of %" PRIu64 "\n",
		       st->population - st->cold_population, k->slot_count);
		printf("    on disk       %12" PRIu64 " of %" PRIu64 "  (%s in %s)\n",
		       st->cold_population, st->cold_slots,
		       fmt_bytes(st->cold_disk_bytes, db, sizeof(db)),
		       k->cold_dir ? k->cold_dir : "?");
		printf("  spilled         %12" PRIu64 "  (cold reads %" PRIu64
		       ", cold evictions %" PRIu64 ")\n",
		       st->cold_spilled, st->cold_reads, st->cold_evictions);
		char wb[16], rb[16];
		printf("  cold I/O        %12s written, %s read  (waited %.3f s writing, %.3f s "
		       "reading)\n",
		       fmt_bytes(st->cold_bytes_written, wb, sizeof(wb)),
		       fmt_bytes(st->cold_bytes_read, rb, sizeof(rb)),
		       (double)st->cold_write_wait_ns / 1e9, (double)st->cold_read_wait_ns / 1e9);
		/* A FIFO's staging runs: memory of the segment that cold puts go through. */
		if (st->cold_stage_bytes) {
			char sb[16];
			printf("  staging         %12s in the segment  (groups: %" PRIu64
			       " staged, %" PRIu64
			       " being written; puts waited for a write %" PRIu64 " times)\n",
			       fmt_bytes(st->cold_stage_bytes, sb, sizeof(sb)),
			       st->cold_groups_staged, st->cold_groups_writing,
			       st->cold_write_waits);
		}
	}
	printf("  puts            %12" PRIu64, st->puts);
	if (prev && s->taken_ns > prev->taken_ns)
		printf("   %.1f/s", (double)(st->puts - prev->st.puts) * 1e9 /
					    (double)(s->taken_ns - prev->taken_ns));
	printf("\n  gets            %12" PRIu64, st->gets);
	if (prev && s->taken_ns > prev->taken_ns)
		printf("   %.1f/s", (double)(st->gets - prev->st.gets) * 1e9 /
					    (double)(s->taken_ns - prev->taken_ns));
	printf("\n  evictions       %12" PRIu64 "  (unseen %" PRIu64 ")\n", st->evictions,
	       st->evicted_unseen);
	printf("  redeliveries    %12" PRIu64 "\n", st->redeliveries);
	printf("  reclaimed       %12" PRIu64 "  (puts of dead producers dropped)\n",
	       st->reclaimed);
	printf("  producer waits  %12" PRIu64 "  (%.3f s)\n", st->producer_waits,
	       (double)st->producer_wait_ns / 1e9);
	printf("  reader waits    %12" PRIu64 "  (%.3f s)\n", st->reader_waits,
	       (double)st->reader_wait_ns / 1e9);

	printf("\nseen counts  ");
	for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
		printf("%8s", bucket_names[i]);
	printf("\n  left       ");
	for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
		printf("%8" PRIu64, st->seen_hist[i]);
	if (s->have_occ) {
		printf("\n  held now   ");
		for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
			printf("%8" PRIu64, s->occ.held_seen_hist[i]);
		printf("\n\noccupancy   ");
		for (int i = 0; i < CISTERN_SLOT_CLASSES; i++)
			if (s->occ.slots[i] || i <= CISTERN_SLOT_ACQUIRED)
				printf(" %s %" PRIu64,
				       cistern_slot_class_name((enum cistern_slot_class)i),
				       s->occ.slots[i]);
		printf("\n            pinned %" PRIu64 "  held %" PRIu64 " samples, %s\n",
		       s->occ.pinned, s->occ.held, fmt_bytes(s->occ.held_bytes, c, sizeof(c)));
	} else {
		printf("\n\noccupancy   (this build cannot classify %s slots)\n",
		       cistern_policy_name(k->policy));
	}

	int live = 0;
	for (int i = 0; i < s->nprocs; i++)
		live += s->procs[i].alive;
	printf("\nprocesses   %d live, %d dead\n", live, s->nprocs - live);
	if (s->nprocs) {
		printf("  %4s %8s %-16s %-16s %-5s %-7s %10s %10s %8s\n", "SLOT", "PID", "COMM",
		       "ROLE", "STATE", "WAITING", "PUTS", "GETS", "ATTACHED");
		for (int i = 0; i < s->nprocs; i++) {
			const struct cistern_proc_info *p = &s->procs[i];
			uint64_t now = now_ns();
			printf("  %4u %8u %-16s %-16s %-5s %-7s %10" PRIu64 " %10" PRIu64 " %8s\n",
			       p->index, p->pid, p->comm[0] ? esc(p->comm) : "?",
			       role_name(p->role), p->alive ? "live" : "dead",
			       waiting_name(p->waiting), p->puts, p->gets,
			       fmt_age(now > p->attached_ns ? now - p->attached_ns : 0, a,
				       sizeof(a)));
		}
	}
}

static void json(const struct snapshot *s)
{
	const struct cistern_config *k = &s->cfg;
	const struct cistern_stats *st = &s->st;
	printf("{\"name\": ");
	json_str(stdout, s->name);
	printf(", \"file_size\": %" PRIu64 ", \"uid\": %u,\n", (uint64_t)s->file.st_size,
	       (unsigned)s->file.st_uid);
	printf(" \"config\": {\"policy\": \"%s\", \"slots\": %" PRIu64 ", \"slot_size\": %" PRIu64
	       ", \"mode\": \"%04o\", \"watermark\": %" PRIu64 ", \"pseudo_epochs\": %u"
	       ", \"sweep_size\": %u, \"time_steps\": %u, \"batch_size\": %u, \"seed\": %" PRIu64
	       ", \"max_procs\": %u, \"producers\": %u, \"lossy\": %s"
	       ", \"single_producer\": %s, \"single_reader\": %s, \"dead_producer_done\": %s"
	       ", \"reads_per_put\": %.17g, \"rate_slack\": %.17g, \"max_times_sampled\": %u},\n",
	       cistern_policy_name(k->policy), k->slot_count, k->slot_size, k->mode, k->watermark,
	       k->pseudo_epochs, k->sweep_size, k->nb_time_steps, k->batch_size, k->seed,
	       k->max_procs, k->expected_producers, (k->flags & CISTERN_LOSSY) ? "true" : "false",
	       (k->flags & CISTERN_SINGLE_PRODUCER) ? "true" : "false",
	       (k->flags & CISTERN_SINGLE_READER) ? "true" : "false",
	       (k->flags & CISTERN_DEAD_PRODUCER_DONE) ? "true" : "false", k->reads_per_put,
	       k->rate_slack, k->max_times_sampled);
	if (k->policy == CISTERN_PRIORITIZED) {
		printf(" \"priorities\": {\"alpha\": %.17g, \"beta\": %.17g, \"epsilon\": %.17g",
		       k->alpha, s->have_prio ? s->prio.beta : k->beta, k->epsilon);
		if (s->have_prio)
			printf(", \"total\": %.17g, \"max_priority\": %.17g, \"updates\": %" PRIu64
			       ", \"stale_updates\": %" PRIu64,
			       s->prio.total, s->prio.max_priority, s->prio.updates,
			       s->prio.stale_updates);
		printf("},\n");
	}
	/* The schema: its text as create took it, then how its fields lie in a sample. */
	printf(" \"schema\": ");
	if (!s->schema.n) {
		printf("null,\n");
	} else {
		printf("{\"text\": ");
		json_str(stdout, s->schema.text);
		printf(", \"sample_size\": %" PRIu64 ", \"fields\": [", s->schema.size);
		for (int i = 0; i < s->schema.n; i++) {
			const struct cistern_field *f = &s->schema.f[i];
			printf("%s{\"name\": ", i ? ", " : "");
			json_str(stdout, f->name);
			printf(", \"dtype\": \"%s\", \"shape\": [", cistern_dtype_name(f->dtype));
			for (uint32_t d = 0; d < f->ndim; d++)
				printf("%s%" PRIu64, d ? ", " : "", f->shape[d]);
			printf("], \"offset\": %" PRIu64 ", \"size\": %" PRIu64 "}", f->offset,
			       f->size);
		}
		printf("]},\n");
	}
	printf(" \"stats\": {\"population\": %" PRIu64 ", \"puts\": %" PRIu64 ", \"gets\": %" PRIu64
	       ", \"evictions\": %" PRIu64 ", \"evicted_unseen\": %" PRIu64
	       ", \"redeliveries\": %" PRIu64 ", \"reclaimed\": %" PRIu64
	       ", \"producer_waits\": %" PRIu64 ", \"producer_wait_ns\": %" PRIu64
	       ", \"reader_waits\": %" PRIu64 ", \"reader_wait_ns\": %" PRIu64
	       ", \"procs_attached\": %u, \"reception_closed\": %s"
	       ", \"producers_expected\": %u, \"producers_done\": %u, \"producers_died\": %u},\n",
	       st->population, st->puts, st->gets, st->evictions, st->evicted_unseen,
	       st->redeliveries, st->reclaimed, st->producer_waits, st->producer_wait_ns,
	       st->reader_waits, st->reader_wait_ns, st->procs_attached,
	       st->reception_closed ? "true" : "false", st->producers_expected, st->producers_done,
	       st->producers_died);
	if (st->cold_slots)
		printf(" \"cold\": {\"slots\": %" PRIu64 ", \"population\": %" PRIu64
		       ", \"disk_bytes\": %" PRIu64 ", \"spilled\": %" PRIu64
		       ", \"reads\": %" PRIu64 ", \"evictions\": %" PRIu64
		       ", \"stage_bytes\": %" PRIu64 ", \"groups_staged\": %" PRIu64
		       ", \"groups_writing\": %" PRIu64 ", \"write_waits\": %" PRIu64
		       ", \"bytes_written\": %" PRIu64 ", \"bytes_read\": %" PRIu64
		       ", \"write_wait_ns\": %" PRIu64 ", \"read_wait_ns\": %" PRIu64 "},\n",
		       st->cold_slots, st->cold_population, st->cold_disk_bytes, st->cold_spilled,
		       st->cold_reads, st->cold_evictions, st->cold_stage_bytes,
		       st->cold_groups_staged, st->cold_groups_writing, st->cold_write_waits,
		       st->cold_bytes_written, st->cold_bytes_read, st->cold_write_wait_ns,
		       st->cold_read_wait_ns);
	printf(" \"seen_left\": {");
	for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
		printf("%s\"%s\": %" PRIu64, i ? ", " : "", bucket_names[i], st->seen_hist[i]);
	printf("},\n");
	if (s->have_occ) {
		printf(" \"seen_held\": {");
		for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
			printf("%s\"%s\": %" PRIu64, i ? ", " : "", bucket_names[i],
			       s->occ.held_seen_hist[i]);
		printf("},\n \"occupancy\": {");
		for (int i = 0; i < CISTERN_SLOT_CLASSES; i++)
			printf("%s\"%s\": %" PRIu64, i ? ", " : "",
			       cistern_slot_class_name((enum cistern_slot_class)i),
			       s->occ.slots[i]);
		printf(", \"pinned\": %" PRIu64 ", \"held\": %" PRIu64 ", \"held_bytes\": %" PRIu64
		       "},\n",
		       s->occ.pinned, s->occ.held, s->occ.held_bytes);
	}
	printf(" \"processes\": [");
	for (int i = 0; i < s->nprocs; i++) {
		const struct cistern_proc_info *p = &s->procs[i];
		printf("%s\n  {\"slot\": %u, \"pid\": %u, \"uid\": %u, \"comm\": ", i ? "," : "",
		       p->index, p->pid, p->uid);
		json_str(stdout, p->comm);
		printf(", \"role\": \"%s\", \"alive\": %s, \"waiting\": \"%s\", \"puts\": %" PRIu64
		       ", \"gets\": %" PRIu64 ", \"attached_ns\": %" PRIu64 "}",
		       role_name(p->role), p->alive ? "true" : "false", waiting_name(p->waiting),
		       p->puts, p->gets, p->attached_ns);
	}
	printf("%s]}\n", s->nprocs ? "\n " : "");
}

/* The exposition `cistern exporter` serves (prom.c), for this one segment. */
static void prometheus(const struct snapshot *s)
{
	struct prom_seg p;
	prom_fill(&p, s->name, prom_created_ns(s->name), &s->cfg, &s->st,
		  s->have_occ ? &s->occ : NULL, s->have_rate ? &s->rate : NULL,
		  s->have_prio ? &s->prio : NULL, s->procs, (size_t)s->nprocs);
	prom_write(stdout, &p, 1);
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

enum format { TEXT, JSON, PROMETHEUS };

static void show(enum format f, const struct snapshot *s, const struct snapshot *prev)
{
	if (f == JSON)
		json(s);
	else if (f == PROMETHEUS)
		prometheus(s);
	else
		text(s, prev);
}

static int inspect(int argc, char **argv)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{"prometheus", no_argument, NULL, 'P'},
		{"watch", optional_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	enum format fmt = TEXT;
	bool watch = false;
	double period = 1.0;
	int o;
	while ((o = cli_getopt(&cmd_inspect, argc, argv, "jPwh", opts)) != -1) {
		switch (o) {
		case 'h':
			return cli_help(&cmd_inspect);
		case '?':
			return EXIT_USAGE;
		case 'j':
		case 'P':
			if (fmt != TEXT)
				return cli_usage(&cmd_inspect,
						 "--json and --prometheus exclude each other");
			fmt = o == 'j' ? JSON : PROMETHEUS;
			break;
		case 'w': {
			watch = true;
			const char *arg = optarg;
			if (arg) {
				char *end;
				period = strtod(arg, &end);
				if (*end || !(period >= 0.05 && period <= 86400))
					return cli_usage(&cmd_inspect, "bad --watch period '%s'",
							 arg);
			}
			break;
		}
		}
	}
	if (optind != argc - 1)
		return cli_usage(&cmd_inspect,
				 optind >= argc ? "missing NAME" : "too many arguments");
	const char *name = argv[optind];
	int r = cistern_name_valid(name);
	if (r < 0)
		return cli_bad_name(&cmd_inspect, name, r);

	struct snapshot cur = {0}, prev = {0};
	r = take(name, &cur);
	if (r < 0) {
		cli_error(&cmd_inspect, name, r, NULL);
		return EXIT_FAIL;
	}
	if (!watch) {
		show(fmt, &cur, NULL);
		free(cur.procs);
		schema_free(&cur.schema);
		return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
	}
	struct sigaction sa = {0};
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	bool clear = fmt == TEXT && isatty(STDOUT_FILENO);
	int status = EXIT_OK;
	for (;;) {
		if (clear)
			fputs("\033[H\033[2J", stdout);
		show(fmt, &cur, prev.taken_ns ? &prev : NULL);
		if (clear) {
			char t[40];
			printf("\n(every %gs, %s; interrupt to stop)\n", period,
			       fmt_time(cur.taken_ns, t, sizeof(t)));
		}
		if (fflush(stdout) != 0) {
			status = EXIT_FAIL;
			break;
		}
		struct timespec ts = {(time_t)period,
				      (long)((period - (double)(time_t)period) * 1e9)};
		while (!stop && nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		if (stop)
			break;
		/* Keep the previous snapshot for rates; its procs array is reused. */
		free(prev.procs);
		schema_free(&prev.schema);
		prev = cur;
		cur.procs = NULL;
		cur.schema.f = NULL;
		r = take(name, &cur);
		if (r < 0) {
			cli_error(&cmd_inspect, name, r, "segment went away");
			status = EXIT_FAIL;
			break;
		}
	}
	free(cur.procs);
	free(prev.procs);
	schema_free(&cur.schema);
	schema_free(&prev.schema);
	return status;
}

static int run(int argc, char **argv)
{
	/*
	 * "--watch 2" and "-w 2": an optional argument is normally only taken
	 * as "--watch=2"; glue a following number on before getopt sees it.
	 */
	char **args = calloc((size_t)argc + 1, sizeof(*args));
	char *glued = NULL;
	if (!args)
		return EXIT_FAIL;
	int nargs = 0;
	for (int i = 0; i < argc; i++) {
		bool w = strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "-w") == 0;
		if (w && !glued && i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') {
			size_t n = strlen(argv[i + 1]) + 9;
			glued = malloc(n);
			if (!glued) {
				free(args);
				return EXIT_FAIL;
			}
			snprintf(glued, n, "--watch=%s", argv[i + 1]);
			args[nargs++] = glued;
			i++;
			continue;
		}
		args[nargs++] = argv[i];
	}
	int status = inspect(nargs, args);
	free(glued);
	free(args);
	return status;
}

const struct command cmd_inspect = {"inspect", run, "show everything about a segment", usage};
