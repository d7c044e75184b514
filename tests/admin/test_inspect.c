/* SPDX-License-Identifier: MIT */
/* test_inspect.c - read-only handles, occupancy, the process table, listing, rm, gc. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include "helpers.h"
#include "core/policy.h"
#include <cistern/admin.h>

/*
 * Every test's segments (seg_create(), seg_name()) and gc's dump directories
 * (seg_dir()) are the fixture's to remove, pass or fail.
 */
TestSuite(readonly, .fini = seg_fini);
TestSuite(occupancy, .fini = seg_fini);
TestSuite(procs, .fini = seg_fini);
TestSuite(list, .fini = seg_fini);
TestSuite(remove, .fini = seg_fini);
TestSuite(gc, .fini = seg_fini);
TestSuite(ids, .fini = seg_fini);

static struct cistern *make(const char *tag, uint64_t slots)
{
	struct cistern_config cfg = {.slot_size = 64, .slot_count = slots};
	return seg_create(tag, cfg);
}

/* A child holding `what` until it is killed (tests/helpers.h). */
static pid_t holder(const char *name, enum hold what)
{
	pid_t pid = spawn_holder(name, what);
	cr_assert_gt(pid, 0, "holder %d failed to start", (int)what);
	return pid;
}

static struct cistern *make_reservoir(const char *tag)
{
	struct cistern_config cfg = {
		.slot_size = 64, .slot_count = 8, .policy = CISTERN_RESERVOIR, .watermark = 1};
	return seg_create(tag, cfg);
}

Test(readonly, refuses_every_call_that_moves_samples)
{
	struct cistern *c = make("ro-moves", 8);
	const char *name = seg_name_of(c);
	struct cistern *ro;
	cr_assert_eq(cistern_open_readonly(name, &ro), 0);
	char buf[8];
	cr_assert_eq(cistern_put(ro, "x", 1, NULL, 0), -EBADF);
	cr_assert_eq(cistern_get(ro, buf, sizeof(buf), NULL, 0), -EBADF);
	cr_assert_eq(cistern_close_reception(ro), -EBADF);
	cistern_detach(ro);
}

Test(readonly, takes_no_attachment_entry)
{
	struct cistern *c = make("ro-entry", 8);
	const char *name = seg_name_of(c);
	struct cistern *ro;
	cr_assert_eq(cistern_open_readonly(name, &ro), 0);
	struct cistern_proc_info pi[4];
	cr_assert_eq(cistern_procs_get(ro, pi, 4), 1, "only the creator is attached");
	cr_assert_eq(pi[0].pid, (uint32_t)getpid());
	cistern_detach(ro);
}

Test(occupancy, counts_committed_acquired_and_free_slots)
{
	struct cistern *c = make("occ", 8);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cistern_put(c, "abcd", 4, NULL, 0), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	struct cistern_occupancy o;
	cr_assert_eq(cistern_occupancy_get(c, &o), 0);
	cr_assert_eq(o.slots[CISTERN_SLOT_COMMITTED], 2);
	cr_assert_eq(o.slots[CISTERN_SLOT_ACQUIRED], 1);
	cr_assert_eq(o.slots[CISTERN_SLOT_FREE], 5);
	cr_assert_eq(o.held, 2);
	cr_assert_eq(o.held_bytes, 8);
	cr_assert_eq(o.held_seen_hist[0], 2);
	cistern_release(c, &s);
}

Test(procs, a_killed_process_shows_as_dead_with_its_role)
{
	struct cistern *c = make("procs", 8);
	const char *name = seg_name_of(c);
	pid_t pid = holder(name, HOLD_RESERVATION);
	kill_and_reap(pid);
	struct cistern *ro;
	cr_assert_eq(cistern_open_readonly(name, &ro), 0);
	struct cistern_proc_info pi[4];
	cr_assert_eq(cistern_procs_get(ro, pi, 4), 2);
	int found = 0;
	for (int i = 0; i < 2; i++) {
		if (pi[i].pid == (uint32_t)pid) {
			found = 1;
			cr_assert_eq(pi[i].alive, 0);
			cr_assert_eq(pi[i].role, CISTERN_PROC_PRODUCER);
		} else {
			cr_assert_eq(pi[i].alive, 1, "the creator lives");
		}
	}
	cr_assert(found);
	cistern_detach(ro);
}

static struct cistern_segment_info *find(struct cistern_segment_info *v, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(v[i].name, name) == 0)
			return &v[i];
	return NULL;
}

Test(list, shows_a_segment_with_its_parameters_and_processes)
{
	struct cistern *c = make("list", 16);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0);
	struct cistern_segment_info *v;
	int n = cistern_list(&v);
	cr_assert_gt(n, 0);
	struct cistern_segment_info *si = find(v, n, name);
	cr_assert_not_null(si);
	cr_assert_eq(si->status, 0);
	cr_assert_eq(si->config.slot_count, 16);
	cr_assert_eq(si->config.slot_size, 64);
	cr_assert_eq(si->population, 1);
	cr_assert_eq(si->procs_live, 1);
	cr_assert_eq(si->procs_dead, 0);
	free(v);
}

Test(list, flags_a_half_created_object_as_being_created)
{
	const char *name;
	int fd = seg_shm_object("half", &name);
	cr_assert_eq(ftruncate(fd, 1 << 16), 0);
	struct cistern_segment_info *v;
	int n = cistern_list(&v);
	struct cistern_segment_info *si = find(v, n, name);
	cr_assert_not_null(si);
	cr_assert_eq(si->status, -EAGAIN);
	free(v);
	close(fd);
}

Test(remove, refuses_while_a_live_process_is_attached)
{
	struct cistern *c = make("rm-live", 8);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_remove(name, 0), -EBUSY);
	struct cistern *again;
	cr_assert_eq(cistern_attach(name, &again), 0, "the segment is still there");
	cistern_detach(again);
}

Test(remove, removes_once_every_process_detached)
{
	struct cistern *c = make("rm-idle", 8);
	const char *name = seg_name_of(c);
	seg_detach(c);
	cr_assert_eq(cistern_remove(name, 0), 0);
	cr_assert_eq(cistern_attach(name, &c), -ENOENT);
}

Test(remove, force_removes_despite_live_processes)
{
	struct cistern *c = make("rm-force", 8);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_remove(name, CISTERN_REMOVE_FORCE), 0);
	struct cistern *again;
	cr_assert_eq(cistern_attach(name, &again), -ENOENT);
	cr_assert_eq(cistern_put(c, "x", 1, NULL, 0), 0, "attached processes keep working");
}

Test(gc, reclaims_what_killed_producer_and_reader_held)
{
	struct cistern *c = make("gc-kill", 8);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "held", 4, NULL, 0), 0);
	pid_t reader = holder(name, HOLD_SAMPLE);
	pid_t producer = holder(name, HOLD_RESERVATION);
	kill_and_reap(reader);
	kill_and_reap(producer);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.dead_procs, 2);
	cr_assert_eq(rep.reservations, 1);
	cr_assert_eq(rep.redelivered, 1);
	cr_assert_eq(rep.live_procs, 1);
	cr_assert_eq(rep.removed, 0, "the creator still lives");
	struct cistern_proc_info pi[4];
	cr_assert_eq(cistern_procs_get(c, pi, 4), 1, "the dead entries are free");
	char buf[8];
	struct cistern_meta m;
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), &m, 0), 4, "the held sample is back");
	cr_assert_eq(memcmp(buf, "held", 4), 0);
	struct cistern_stats st;
	cistern_stats_get(c, &st);
	cr_assert_eq(st.redeliveries, 1);
	cr_assert_eq(st.reclaimed, 1);
}

Test(gc, dry_run_reports_but_reclaims_nothing)
{
	struct cistern *c = make("gc-dry", 8);
	const char *name = seg_name_of(c);
	kill_and_reap(holder(name, HOLD_RESERVATION));
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, CISTERN_GC_DRY_RUN, &rep), 0);
	cr_assert_eq(rep.dead_procs, 1);
	cr_assert_eq(rep.reservations, 1);
	struct cistern_proc_info pi[4];
	cr_assert_eq(cistern_procs_get(c, pi, 4), 2, "the dead entry is still there");
}

Test(gc, removes_a_segment_whose_processes_all_died)
{
	struct cistern *c = make("gc-rm", 8);
	const char *name = seg_name_of(c);
	seg_detach(c);
	kill_and_reap(holder(name, HOLD_NOTHING));
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.removed, 1);
	cr_assert_eq(cistern_attach(name, &c), -ENOENT);
}

/* A FIFO of 64 slots whose only other process committed n samples and was killed (SIGKILL). */
static const char *stale_with_samples(const char *tag, uint32_t n)
{
	struct cistern *c = make(tag, 64);
	const char *name = seg_name_of(c);
	seg_detach(c);
	pid_t pid = spawn_filler(name, n);
	cr_assert_gt(pid, 0, "the producer failed to start");
	kill_and_reap(pid);
	return name;
}

/* The n samples spawn_filler() puts, read back in order from segment `name`. */
static void holds_the_filler_samples(const char *name, uint32_t n)
{
	struct cistern *c;
	cr_assert_eq(cistern_attach(name, &c), 0);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t buf[64];
		struct cistern_meta m;
		ssize_t len = cistern_get(c, buf, sizeof(buf), &m, 0);
		cr_assert_eq(len, (ssize_t)(1 + i % 50), "sample %u", i);
		cr_assert(check_payload(buf, (size_t)len, 7, i), "sample %u's bytes", i);
		cr_assert_eq(m.time_step, i);
	}
	cr_assert_eq(cistern_get(c, (char[64]){0}, 64, NULL, 0), -EAGAIN, "and no more");
	cistern_detach(c);
}

Test(gc, keeps_a_stale_segment_that_holds_unread_samples)
{
	const char *name = stale_with_samples("gc-unread", 63);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.removed, 0, "committed samples are never thrown away unasked");
	cr_assert_eq(rep.kept, 1);
	cr_assert_eq(rep.unread, 63);
	holds_the_filler_samples(name, 63);
}

Test(gc, a_dry_run_counts_the_unread_samples_it_would_keep)
{
	const char *name = stale_with_samples("gc-unread-dry", 10);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, CISTERN_GC_DRY_RUN, &rep), 0);
	cr_assert_eq(rep.removed, 0);
	cr_assert_eq(rep.kept, 1);
	cr_assert_eq(rep.unread, 10);
}

Test(gc, a_kept_stale_segment_reports_its_dead_attachment)
{
	const char *name = stale_with_samples("gc-kept-dead", 5);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, CISTERN_GC_DRY_RUN, &rep), 0);
	cr_assert_eq(rep.kept, 1);
	cr_assert_eq(rep.dead_procs, 1, "a dry run counts the dead producer");
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.kept, 1);
	cr_assert_eq(rep.dead_procs, 1, "the real run too");
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), 0);
	struct cistern_proc_info pi[2];
	cr_assert_eq(cistern_procs_get(c, pi, 2), 1, "and leaves it in place");
	cr_assert_eq(pi[0].alive, 0);
	cistern_detach(c);
}

Test(gc, a_sample_a_killed_reader_held_counts_as_unread)
{
	struct cistern *c = make("gc-unread-held", 8);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), 0);
	seg_detach(c);
	kill_and_reap(holder(name, HOLD_SAMPLE)); /* dies holding "a" */
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, CISTERN_GC_DRY_RUN, &rep), 0);
	cr_assert_eq(rep.unread, 2, "a dry run counts it as the reclaim will leave it");
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.unread, 2, "it is owed again once put back");
	cr_assert_eq(rep.kept, 1);
}

Test(gc, a_kept_stale_segment_stays_stale_for_a_later_dump_to)
{
	char path[256];
	struct cistern *c = make("gc-later", 8);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "a", 1, NULL, 0), 0);
	cr_assert_eq(cistern_put(c, "b", 1, NULL, 0), 0);
	seg_detach(c);
	kill_and_reap(holder(name, HOLD_SAMPLE)); /* dies holding "a" */
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.kept, 1);
	struct cistern_segment_info *v;
	int n = cistern_list(&v);
	struct cistern_segment_info *si = find(v, n, name);
	cr_assert_not_null(si);
	cr_assert_eq(si->procs_dead, 1, "left as it was: still stale");
	free(v);
	const char *dir = seg_dir("gc-later");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	cr_assert_eq(cistern_gc_dump_to(name, dir, 0, &rep), 0);
	cr_assert_eq(rep.removed, 4, "a second call, told where to dump, removes it");
	cr_assert_eq(rep.dumped, 2, "the sample the dead reader held is in the dump");
	const char *copy = seg_name("gc-later2");
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_attach(copy, &c), 0);
	char buf[4];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(buf[0], 'a', "in its place, first");
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 1);
	cr_assert_eq(buf[0], 'b');
	cistern_detach(c);
}

Test(gc, removes_a_stale_segment_whose_samples_were_all_read)
{
	struct cistern *c = make("gc-allread", 64);
	const char *name = seg_name_of(c);
	pid_t producer = spawn_filler(name, 5);
	cr_assert_gt(producer, 0);
	for (int i = 0; i < 5; i++)
		cr_assert_gt(cistern_get(c, (char[64]){0}, 64, NULL, 0), 0);
	seg_detach(c);           /* cleanly */
	kill_and_reap(producer); /* its entry makes the segment stale */
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.unread, 0);
	cr_assert_eq(rep.removed, 1, "nothing is owed to anyone");
	cr_assert_eq(cistern_open_readonly(name, &c), -ENOENT);
}

/* A stale reservoir: 4 samples put by the creator, then a reader killed while it pins one. */
Test(gc, a_killed_readers_unreleased_read_leaves_a_reservoir_sample_unseen)
{
	struct cistern *c = make_reservoir("gc-unseen");
	const char *name = seg_name_of(c);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern_put(c, "r", 1, NULL, 0), 0);
	seg_detach(c);
	kill_and_reap(holder(name, HOLD_SAMPLE));
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, CISTERN_GC_DRY_RUN, &rep), 0);
	cr_assert_eq(rep.unread, 4, "the read was never released: not seen");
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.unread, 4);
	cr_assert_eq(rep.kept, 1);
}

Test(gc, a_dump_to_saves_a_killed_readers_unreleased_read_as_unseen)
{
	char path[256];
	struct cistern *c = make_reservoir("gc-unseen-dump");
	const char *name = seg_name_of(c);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(cistern_put(c, "r", 1, NULL, 0), 0);
	seg_detach(c);
	kill_and_reap(holder(name, HOLD_SAMPLE));
	const char *dir = seg_dir("gc-unseen");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc_dump_to(name, dir, 0, &rep), 0);
	cr_assert_eq(rep.removed, 4);
	cr_assert_eq(rep.dumped, 4);
	cr_assert_eq(rep.pins, 1, "the dead reader's pin was dropped");
	struct cistern_dump_info di;
	cr_assert_eq(cistern_dump_verify(path, &di), 0);
	cr_assert_eq(cistern_restore(path, NULL, NULL, NULL, NULL), 0);
	cr_assert_eq(cistern_open_readonly(name, &c), 0);
	for (uint64_t i = 0; i < c->slot_count; i++)
		cr_assert_eq(cistern__slotmeta(c, i)->seen, 0, "slot %lu", (unsigned long)i);
	cistern_detach(c);
}

/* A stale reservoir some of whose samples were read: only those never seen are owed. */
Test(gc, counts_only_the_never_seen_samples_of_a_stale_reservoir)
{
	struct cistern *c = make_reservoir("gc-seen");
	const char *name = seg_name_of(c);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(cistern_put(c, "r", 1, NULL, 0), 0);
	for (int i = 0; i < 4; i++) {
		struct cistern_sample s;
		cr_assert_eq(cistern_acquire(c, &s, 0), 0);
		cistern_release(c, &s);
	}
	uint64_t unseen = 0;
	for (uint64_t i = 0; i < c->slot_count; i++) {
		struct cistern_slot_view v = cistern__policy_of(c->hdr->policy)
						     ->snap->classify(
							     cistern__slotmeta(c, i)->word);
		unseen += v.cls == CISTERN_SLOT_COMMITTED && cistern__slotmeta(c, i)->seen == 0;
	}
	cr_assert_lt(unseen, 6, "some were seen");
	seg_detach(c);
	kill_and_reap(holder(name, HOLD_NOTHING));
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.unread, unseen);
	cr_assert_eq(rep.removed, 0);
	cr_assert_eq(rep.kept, unseen > 0);
}

Test(gc, dump_to_saves_a_stale_segment_whole_then_removes_it)
{
	char path[256];
	const char *name = stale_with_samples("gc-dump", 63);
	const char *dir = seg_dir("gc-dump");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc_dump_to(name, dir, 0, &rep), 0);
	cr_assert_eq(rep.removed, 4);
	cr_assert_eq(rep.unread, 63);
	cr_assert_eq(rep.dumped, 63);
	cr_assert_eq(rep.kept, 0);
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), -ENOENT, "the segment is gone");
	const char *copy = seg_name("gc-dump2");
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	holds_the_filler_samples(copy, 63);
}

Test(gc, dump_to_never_replaces_an_existing_file)
{
	char path[256];
	const char *name = stale_with_samples("gc-dumpx", 3);
	const char *dir = seg_dir("gc-dumpx");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "mine", 4), 4);
	close(fd);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc_dump_to(name, dir, 0, &rep), -EEXIST);
	cr_assert_eq(rep.removed, 0);
	cr_assert_eq(rep.kept, 1);
	holds_the_filler_samples(name, 3);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_size, 4, "the file is as it was");
}

Test(gc, a_dry_run_of_dump_to_writes_and_removes_nothing)
{
	char path[256];
	const char *name = stale_with_samples("gc-dumpdry", 3);
	const char *dir = seg_dir("gc-dumpdry");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc_dump_to(name, dir, CISTERN_GC_DRY_RUN, &rep), 0);
	cr_assert_eq(rep.removed, 4, "it would dump and remove");
	cr_assert_neq(access(path, F_OK), 0, "no file");
	holds_the_filler_samples(name, 3);
}

Test(gc, a_dry_run_of_dump_to_predicts_the_refusal_of_a_dangling_link)
{
	char path[256];
	const char *name = stale_with_samples("gc-dumplink", 3);
	const char *dir = seg_dir("gc-dumplink");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	cr_assert_eq(symlink("/nonexistent/cistern-target", path), 0);
	struct cistern_gc_report dry, real;
	int rd = cistern_gc_dump_to(name, dir, CISTERN_GC_DRY_RUN, &dry);
	int rr = cistern_gc_dump_to(name, dir, 0, &real);
	cr_assert_eq(rr, -EEXIST, "the real run refuses: %s", cistern_strerror(rr));
	cr_assert_eq(rd, rr, "and the dry run says so: %s", cistern_strerror(rd));
	cr_assert_eq(dry.kept, real.kept);
	cr_assert_eq(dry.removed, real.removed);
	holds_the_filler_samples(name, 3);
}

Test(gc, dump_to_succeeds_though_others_took_the_temporary_name_it_could_guess)
{
	char path[256], squat[300];
	const char *name = stale_with_samples("gc-dumpsquat", 3);
	const char *dir = seg_dir("gc-dumpsquat");
	snprintf(path, sizeof(path), "%s/%s.dump", dir, name);
	snprintf(squat, sizeof(squat), "%s.tmp.%d", path, (int)getpid());
	int fd = open(squat, O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	struct cistern_gc_report rep;
	int r = cistern_gc_dump_to(name, dir, 0, &rep);
	cr_assert_eq(r, 0, "%s", cistern_strerror(r));
	cr_assert_eq(rep.removed, 4);
	cr_assert_eq(access(squat, F_OK), 0, "the other file is left alone");
	const char *copy = seg_name("gc-dumpsquat2");
	cr_assert_eq(cistern_restore(path, copy, NULL, NULL, NULL), 0);
	holds_the_filler_samples(copy, 3);
}

Test(gc, discard_removes_a_stale_segment_with_its_unread_samples)
{
	const char *name = stale_with_samples("gc-discard", 7);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, CISTERN_GC_DISCARD, &rep), 0);
	cr_assert_eq(rep.removed, 5);
	cr_assert_eq(rep.unread, 7);
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), -ENOENT);
}

Test(gc, dump_to_and_discard_together_are_refused)
{
	const char *name = stale_with_samples("gc-both", 2);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc_dump_to(name, "/tmp", CISTERN_GC_DISCARD, &rep), -EINVAL);
	holds_the_filler_samples(name, 2);
}

Test(gc, keeps_a_segment_created_for_later_use)
{
	struct cistern *c = make("gc-idle", 8);
	const char *name = seg_name_of(c);
	seg_detach(c);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.removed, 0);
	cr_assert_eq(cistern_attach(name, &c), 0);
	cistern_detach(c);
}

Test(gc, leaves_a_fresh_half_created_object_alone)
{
	const char *name;
	int fd = seg_shm_object("gchalf", &name);
	char shm[96];
	snprintf(shm, sizeof(shm), "/cistern.%s", name);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.removed, 0, "its creator may still be at work");
	/* Age it past the grace period: now it is garbage. */
	struct timespec old[2] = {{0, UTIME_OMIT}, {time(NULL) - 2 * CISTERN_GC_GRACE_S, 0}};
	cr_assert_eq(futimens(fd, old), 0);
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.removed, 2);
	close(fd);
	cr_assert_eq(shm_unlink(shm), -1, "already removed");
}

Test(ids, fifo_sample_ids_are_positions_from_zero_in_a_new_segment)
{
	struct cistern *c = make("ids", 8);
	struct cistern_meta m;
	cr_assert_eq(cistern_put(c, "a", 1, &m, 0), 0);
	cr_assert_eq(m.sample_id, 0);
	cr_assert_eq(cistern_put(c, "b", 1, &m, 0), 0);
	cr_assert_eq(m.sample_id, 1);
}

static void die_now(uint64_t done, uint64_t total, void *arg)
{
	(void)done, (void)total, (void)arg;
	raise(SIGKILL);
}

/*
 * A restore that died half-way: a child restores a dump and is killed from
 * its progress callback, once the samples are loaded, before the rename.
 * The temporary name it left behind, which seg_fini removes.
 */
static const char *abandoned_restore(void)
{
	struct cistern *c = make("abrt-src", 8);
	cr_assert_eq(cistern_put(c, "sample", 6, NULL, 0), 0);
	const char *path = seg_dump_path("abrt");
	cr_assert_eq(cistern_dump(seg_name_of(c), path, NULL, NULL, NULL), 0);
	const char *final = seg_name("abrt-final");
	pid_t pid = fork_child();
	if (pid == 0) {
		cistern_restore(path, final, die_now, NULL, NULL);
		_exit(1);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		  "the restorer died in its progress call");
	/* The restorer names its temporary object restore-PID-RANDOM. */
	char prefix[64];
	int plen = snprintf(prefix, sizeof(prefix), "cistern.restore-%d-", (int)pid);
	DIR *d = opendir("/dev/shm");
	cr_assert_not_null(d);
	struct dirent *e;
	char name[CISTERN_NAME_MAX + 1] = "";
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, prefix, (size_t)plen) == 0)
			snprintf(name, sizeof(name), "%s", e->d_name + strlen("cistern."));
	closedir(d);
	cr_assert_neq(name[0], '\0', "the restore left its temporary object behind");
	struct cistern *probe;
	cr_assert_eq(cistern_attach(final, &probe), -ENOENT, "and never got to the rename");
	return seg_adopt(name);
}

/* A copy of segment `from`'s object as `to`, made as cp(1) makes one. */
static void copy_object(const char *from, const char *to)
{
	char a[128], b[128];
	snprintf(a, sizeof(a), "/dev/shm/cistern.%s", from);
	snprintf(b, sizeof(b), "/dev/shm/cistern.%s", to);
	int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(in, 0);
	cr_assert_geq(out, 0);
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		cr_assert_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
}

Test(gc, keeps_a_copy_of_a_segment_under_another_name)
{
	struct cistern *c = make("gc-cp", 8);
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "kept", 4, NULL, 0), 0);
	seg_detach(c);
	const char *copy = seg_name("gc-cp2");
	copy_object(name, copy);
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(copy, 0, &rep), 0);
	cr_assert_eq(rep.removed, 0, "a copy is no restore's leftover");
	cr_assert_eq(cistern_attach(copy, &c), 0);
	char buf[8];
	cr_assert_eq(cistern_get(c, buf, sizeof(buf), NULL, 0), 4, "and its sample is there");
	cistern_detach(c);
}

Test(list, shows_a_copy_under_another_name_as_a_segment)
{
	struct cistern *c = make("ls-cp", 8);
	const char *name = seg_name_of(c);
	seg_detach(c);
	const char *copy = seg_name("ls-cp2");
	copy_object(name, copy);
	struct cistern_segment_info *v;
	int n = cistern_list(&v);
	struct cistern_segment_info *si = find(v, n, copy);
	cr_assert_not_null(si);
	cr_assert_eq(si->status, 0, "not an unfinished restore: %d", si->status);
	free(v);
}

Test(list, flags_an_unfinished_restore)
{
	const char *name = abandoned_restore();
	struct cistern_segment_info *v;
	int n = cistern_list(&v);
	struct cistern_segment_info *si = find(v, n, name);
	cr_assert_not_null(si);
	cr_assert_eq(si->status, -EINPROGRESS);
	free(v);
}

Test(gc, removes_an_abandoned_restore)
{
	const char *name = abandoned_restore();
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.removed, 3);
	struct cistern *c;
	cr_assert_eq(cistern_open_readonly(name, &c), -ENOENT);
}

/*
 * gc removing a dead segment races a process attaching to it: either the
 * attach fails (the name was gone first) or the name survives. An attach that
 * succeeds on a segment whose name then vanishes is the bug the gc lock prevents.
 */
Test(gc, never_removes_a_segment_under_a_process_that_attached, .timeout = 120)
{
	const char *name = seg_name("gcrace");
	int attached = 0, refused = 0;
	for (int round = 0; round < 64; round++) {
		cistern_unlink(name);
		struct cistern *c;
		cr_assert_eq(cistern_create(name, NULL, &c), 0);
		cistern_detach(c);
		kill_and_reap(holder(name, HOLD_NOTHING)); /* one dead entry, nobody alive */
		int go[2], res[2];
		cr_assert_eq(pipe(go), 0);
		cr_assert_eq(pipe(res), 0);
		pid_t pid = fork();
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			char b;
			if (read(go[0], &b, 1) != 1)
				_exit(1);
			struct cistern *h;
			int r = cistern_attach(name, &h);
			if (write(res[1], &r, sizeof(r)) != sizeof(r))
				_exit(1);
			pause();
			_exit(0);
		}
		close(res[1]); /* so that a child dying early reads as EOF, not a hang */
		cr_assert_eq(write(go[1], "g", 1), 1);
		/* Vary who is first: sometimes gc right away, sometimes a little later. */
		static const int delay_us[] = {0, 50, 100, 200, 400, 800, 1500, 3000};
		usleep((useconds_t)delay_us[round % 8]);
		struct cistern_gc_report rep;
		int g = cistern_gc(name, 0, &rep);
		cr_assert(g == 0 || g == -ENOENT, "gc: %d", g);
		int r = 1;
		ssize_t got = read(res[0], &r, sizeof(r));
		struct cistern *probe;
		int still = cistern_open_readonly(name, &probe);
		if (still == 0)
			cistern_detach(probe);
		/* The child goes before any assertion: a failing test must not leave it behind. */
		kill_and_reap(pid);
		close(go[0]);
		close(go[1]);
		close(res[0]);
		cr_assert_eq(got, (ssize_t)sizeof(r), "the attaching child died");
		if (r == 0) {
			attached++;
			cr_assert_eq(still, 0, "round %d: attached, yet the name is gone", round);
		} else {
			refused++;
			cr_assert_eq(r, -ENOENT, "round %d: attach: %d", round, r);
		}
	}
	cr_log_info("attached %d times, refused %d times", attached, refused);
}

/* ---- FIRO and the reservoirs ------------------------------------------- */

Test(occupancy, counts_held_and_pinned_reservoir_samples)
{
	struct cistern *c = make_reservoir("occ-res");
	for (int i = 0; i < 5; i++)
		cr_assert_eq(cistern_put(c, "abcd", 4, NULL, 0), 0);
	struct cistern_sample s;
	cr_assert_eq(cistern_acquire(c, &s, 0), 0);
	struct cistern_occupancy o;
	cr_assert_eq(cistern_occupancy_get(c, &o), 0);
	cr_assert_eq(o.slots[CISTERN_SLOT_COMMITTED], 5, "pinned samples stay held");
	cr_assert_eq(o.slots[CISTERN_SLOT_FREE], 3);
	cr_assert_eq(o.pinned, 1);
	cr_assert_eq(o.held_seen_hist[1], 1, "the one read was seen once");
	cistern_release(c, &s);
}

Test(occupancy, counts_a_sample_pinned_by_two_readers_once)
{
	struct cistern *c = make_reservoir("occ-2r");
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "abcd", 4, NULL, 0), 0);
	struct cistern *r2;
	cr_assert_eq(cistern_attach(name, &r2), 0);
	struct cistern_sample a, b;
	cr_assert_eq(cistern_acquire(c, &a, 0), 0);
	cr_assert_eq(cistern_acquire(r2, &b, 0), 0);
	struct cistern_occupancy o;
	cr_assert_eq(cistern_occupancy_get(c, &o), 0);
	cr_assert_eq(o.pinned, 1, "one sample, two pins");
	cistern_release(c, &a);
	cr_assert_eq(cistern_occupancy_get(c, &o), 0);
	cr_assert_eq(o.pinned, 1, "the other reader still pins it");
	cistern_release(r2, &b);
	cr_assert_eq(cistern_occupancy_get(c, &o), 0);
	cr_assert_eq(o.pinned, 0);
	cistern_detach(r2);
}

Test(occupancy, a_sample_pinned_twice_by_one_reader_stays_pinned_until_both_release)
{
	struct cistern *c = make_reservoir("occ-2p");
	cr_assert_eq(cistern_put(c, "abcd", 4, NULL, 0), 0);
	struct cistern_sample a, b;
	cr_assert_eq(cistern_acquire(c, &a, 0), 0);
	cr_assert_eq(cistern_acquire(c, &b, 0), 0, "the only sample, again");
	struct cistern_occupancy o;
	cistern_release(c, &a);
	cr_assert_eq(cistern_occupancy_get(c, &o), 0);
	cr_assert_eq(o.pinned, 1, "the second pin holds");
	cistern_release(c, &b);
	cr_assert_eq(cistern_occupancy_get(c, &o), 0);
	cr_assert_eq(o.pinned, 0);
}

Test(gc, drops_the_pins_of_a_killed_reservoir_reader)
{
	struct cistern *c = make_reservoir("gc-pin");
	const char *name = seg_name_of(c);
	cr_assert_eq(cistern_put(c, "abcd", 4, NULL, 0), 0);
	kill_and_reap(holder(name, HOLD_SAMPLE));
	struct cistern_gc_report rep;
	cr_assert_eq(cistern_gc(name, 0, &rep), 0);
	cr_assert_eq(rep.dead_procs, 1);
	cr_assert_eq(rep.pins, 1);
	struct cistern_occupancy o;
	cistern_occupancy_get(c, &o);
	cr_assert_eq(o.pinned, 0, "the pin is gone");
}

Test(remove, strerror_explains_a_refusal)
{
	cr_assert(strstr(cistern_strerror(-EBUSY), "live processes are attached"));
}
