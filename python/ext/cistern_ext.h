/* SPDX-License-Identifier: MIT */
/*
 * cistern_ext.h - what the files of the `_cistern` extension module share.
 *
 * The module stays thin: argument conversion, error mapping, GIL handling and
 * object lifetimes. Everything a user sees (Segment, numpy views, iteration,
 * the torch dataset) is written in Python on top of it, in the cistern package.
 *
 * A file per type, plus the module functions by concern:
 *  - module.c: the module itself, its constants and the fork handler.
 *  - common.c: results as Python exceptions, int converters, sliced waits.
 *  - records.c: the C structs as the dicts the Python records wrap.
 *  - put.c: the one body of put() and put_batch() for Handle and Remote.
 *  - handle.c: Handle, one struct cistern. Used by one thread at a time (the
 *    library's rule); a second thread entering while a call is in flight gets
 *    RuntimeError instead of undefined behaviour. It belongs to the process
 *    that opened it: after fork() the child must attach again.
 *  - sample.c: Sample, one acquired sample (or pair, batch, member), exporting
 *    its payload read-only through the buffer protocol (numpy.frombuffer(sample)
 *    is a zero-copy view). The mapping must outlive every view, and numpy
 *    drops its buffer export right away but keeps the Sample as the array's
 *    base, so lifetimes follow references, not exports: a Sample holds its
 *    Handle, and a Handle defers the real cistern_detach() until its last
 *    Sample object is gone. A view read after release therefore never faults;
 *    it just sees whatever the slot holds by then. New buffer requests on a
 *    released Sample fail.
 *  - prioritized.c: the Handle methods of prioritized sampling.
 *  - slot.c: Slot, an open reservation (cistern_reserve()), held like a Sample.
 *  - remote.c: Remote, a remote producer's connection (cistern_remote_*()).
 *  - segment.c, admin.c: the module functions on segments and on inspection,
 *    gc, dump and restore.
 *
 * Blocking calls run without the GIL, in slices of at most WAIT_SLICE_MS,
 * checking for signals (Ctrl-C) between slices.
 *
 * Names shared between the files start with cx_. They stay inside the module:
 * python/meson.build builds it with hidden symbols, so that only
 * PyInit__cistern is exported.
 */
#ifndef CISTERN_EXT_H
#define CISTERN_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cistern.h>
#include <cistern/admin.h>
#include <cistern/remote.h>

/* Longest single wait without looking at signals. */
#define WAIT_SLICE_MS 200

/* Returned by the sliced waiters when a Python exception is set (a signal handler raised). */
#define PYERR_SET INT_MIN

/* Room for cistern_read_problem()'s sentence. */
#define RW_WHY 400

/* ------------------------------------------------------------- module.c */

/* cistern.EndOfData: reception closed and nothing left to hand out. */
extern PyObject *cx_EndOfData;

/*
 * This process's pid, set at import and by a fork handler in each child.
 * Every call on a handle checks that it runs in the process that opened the
 * handle; getpid() is a system call, which costs more than a whole get on
 * some virtual machines, so the check reads this instead.
 */
extern pid_t cx_self_pid;

/* ------------------------------------------------------------- common.c */

/* Set the Python exception for a negative result `r` of the C API. Returns NULL. */
PyObject *cx_raise_result(int r);
/*
 * A read the rate limiter could never admit (-EDEADLK): a ValueError, with
 * cistern_read_problem()'s sentence naming the parameters. Returns NULL.
 */
PyObject *cx_raise_refused_read(const char *why);
/* A bad segment name as ValueError, saying what a name may be; 0 if the name is good. */
int cx_check_name(const char *name);
/* cx_raise_result() for a call on segment `name`: an OSError carries the name as its filename. */
PyObject *cx_raise_for_name(int r, const char *name);

/* PyArg "O&" converters: an unsigned int of 64 or 32 bits; a timeout in ms (None, <0: no limit). */
int cx_conv_u64(PyObject *o, void *out);
int cx_conv_u32(PyObject *o, void *out);
int cx_conv_timeout(PyObject *o, void *out);

/* A writable, C-contiguous buffer over o, or an optional one (None: *have = 0). 0 or -1. */
int cx_opt_writable(PyObject *o, Py_buffer *b, int *have, Py_ssize_t need, const char *what);

/* A row of a metas array: (sample_id, sim_id, time_step). */
void cx_put_meta(uint64_t *row, const struct cistern_meta *m);

/* The optional outputs of a draw by priority: each id and weight of n. */
struct cx_draw_outs {
	Py_buffer ids, weights;
	int have_ids, have_weights;
};

/* Take ids (n uint64) and weights (n float64), each None or a buffer. 0 or -1. */
int cx_draw_outs_get(struct cx_draw_outs *d, PyObject *ids, PyObject *weights, Py_ssize_t n);

/* Give back the buffers cx_draw_outs_get() took (also after it failed). */
void cx_draw_outs_release(struct cx_draw_outs *d);

int64_t cx_now_ms(void);
typedef int (*cx_attempt_fn)(void *ctx, int timeout_ms);
/*
 * Call fn(ctx, t) without the GIL until it returns something other than a timeout,
 * with t never above WAIT_SLICE_MS, for at most timeout_ms overall (negative: no
 * limit; 0: one try). Called and returns with the GIL held.
 */
int cx_wait_sliced(cx_attempt_fn fn, void *ctx, int timeout_ms);

/* ------------------------------------------------------------ records.c */

/* d[k] = v as a Python int, float or bool. 0, or -1 with an exception set. */
int cx_dict_set_u64(PyObject *d, const char *k, uint64_t v);
int cx_dict_set_f64(PyObject *d, const char *k, double v);
int cx_dict_set_bool(PyObject *d, const char *k, bool v);
/* d[k] = v, stealing the reference to v (NULL: an exception is set). */
int cx_dict_set_steal(PyObject *d, const char *k, PyObject *v);
/* A list of n uint64 counts. */
PyObject *cx_u64_list(const uint64_t *v, size_t n);
/* (sample_id, sim_id, time_step) */
PyObject *cx_meta_tuple(const struct cistern_meta *m);
PyObject *cx_stats_dict(const struct cistern_stats *st);
PyObject *cx_config_dict(const struct cistern_config *cfg);
PyObject *cx_schema_dict(const char *text, const struct cistern_field *f, int n, uint64_t size);
PyObject *cx_proc_dict(const struct cistern_proc_info *p);

/* ------------------------------------------------------------- handle.c */

struct sample_obj;
struct slot_obj;

typedef struct {
	PyObject_HEAD struct cistern *c; /* NULL once really detached */
	pid_t pid;                       /* process that opened it */
	int busy;                        /* a call is in flight (GIL released) */
	int detached;                    /* detach() was called: unusable, maybe not yet unmapped */
	uint64_t slot_size;
	int policy;                 /* enum cistern_policy, or -1 if unknown */
	struct sample_obj *samples; /* every live Sample object of this handle */
	struct slot_obj *slots;     /* every live Slot object (reservation) of this handle */
	/* Releases that came while busy (a Sample freed meanwhile): done on leave. */
	struct cistern_sample *pending;
	size_t npending, cap_pending;
	/* get_batch_into()'s and put_batch()'s lengths and metadata, kept from call to call. */
	struct cistern_meta *scratch_meta;
	size_t *scratch_len;
	size_t scratch_cap;
	/* Samples of another size that get_many() and get_batch() skipped. */
	unsigned long long skipped;
} HandleObject;

extern PyTypeObject cx_HandleType;

/* A Handle over c; on failure c is detached and NULL returned. */
HandleObject *cx_handle_new(struct cistern *c);
/* Check the handle is usable from here and mark it busy. 0 on success. */
int cx_handle_enter(HandleObject *h);
/* Unmark it, doing the releases deferred meanwhile. */
void cx_handle_leave(HandleObject *h);
/* Queue a release for cx_handle_leave(); if memory runs out, detach gives it back. */
void cx_handle_defer_release(HandleObject *h, const struct cistern_sample *ss, size_t n);
/* Detach for real, if asked to and nothing maps the segment any more. */
void cx_handle_finish_detach(HandleObject *h);

/* ------------------------------------------------------------- sample.c */

enum sample_kind {
	KIND_ONE,    /* cistern_acquire() */
	KIND_PAIR,   /* cistern_acquire_pair(): ss[0], ss[1] */
	KIND_BATCH,  /* cistern_acquire_batch(): ss[0 .. n-1] */
	KIND_MEMBER, /* one member of a pair or batch: exports parent->ss[index] */
	KIND_MANY,   /* cistern_acquire() n times: ss[0 .. n-1], released one by one */
};

/* A pair or batch of members, rather than one payload. */
static inline int cx_kind_is_group(enum sample_kind k)
{
	return k == KIND_PAIR || k == KIND_BATCH || k == KIND_MANY;
}

typedef struct sample_obj {
	PyObject_HEAD HandleObject *h; /* strong reference (NULL for a member) */
	struct sample_obj *parent;     /* KIND_MEMBER: the pair or batch (strong reference) */
	enum sample_kind kind;
	size_t n;                  /* samples held: 1, 2 or the batch size */
	size_t index;              /* KIND_MEMBER: which one */
	struct cistern_sample *ss; /* the n samples (inline_ or PyMem_Malloc) */
	struct cistern_sample inline_[2];
	int held;                       /* acquired and not yet released */
	Py_ssize_t exports;             /* live buffer exports (diagnostics only) */
	struct sample_obj *prev, *next; /* in h->samples (not members) */
} SampleObject;

extern PyTypeObject cx_SampleType;

/* A new Sample of `kind` with room for n samples, not yet held. */
SampleObject *cx_sample_alloc(enum sample_kind kind, size_t n);
/* The acquisition succeeded: link the sample to its handle. */
PyObject *cx_sample_attach(SampleObject *so, HandleObject *h);
/* Copy the n members of ss into out (row i at i * item) and their metadata into metas. */
void cx_copy_rows(const struct cistern_sample *ss, size_t n, char *out, size_t item,
		  uint64_t *metas);
/* Release what the sample holds, now or when its handle's call ends. */
void cx_sample_do_release(SampleObject *s);

/* -------------------------------------------------------- prioritized.c */

/* Handle methods: put_prioritized, get_prioritized, update_priorities, set_beta, prio_info. */
PyObject *cx_handle_put_prioritized(PyObject *self, PyObject *args, PyObject *kw);
PyObject *cx_handle_get_prioritized(PyObject *self, PyObject *args, PyObject *kw);
PyObject *cx_handle_update_priorities(PyObject *self, PyObject *args, PyObject *kw);
PyObject *cx_handle_set_beta(PyObject *self, PyObject *arg);
PyObject *cx_handle_prio_info(PyObject *self, PyObject *ignored);

/* --------------------------------------------------------------- slot.c */

typedef struct slot_obj {
	PyObject_HEAD HandleObject *h; /* strong reference */
	struct cistern_slot slot;
	int live;                     /* reserved, not yet committed or aborted */
	struct slot_obj *prev, *next; /* in h->slots */
} SlotObject;

extern PyTypeObject cx_SlotType;

/* Give back every open reservation of h. */
void cx_slots_abort_all(HandleObject *h);

/* ---------------------------------------------------------------- put.c */

/*
 * What put() and put_batch() need of the object they are called on, so that
 * Handle and Remote run the same body. enter() checks the object is usable
 * from here, marks it busy and returns the target passed to the put calls;
 * leave() unmarks it. scratch() gives room for n metas, kept from call to call.
 */
struct cx_put_ops {
	void *(*enter)(PyObject *self);
	void (*leave)(PyObject *self);
	struct cistern_meta *(*scratch)(PyObject *self, size_t n);
	/* Largest payload the target takes, checked before putting; 0: no check here. */
	uint64_t (*room)(PyObject *self);
	/* One sample, or up to n rows; as cistern_put() and cistern_put_batch() answer. */
	int (*put)(void *target, const void *buf, size_t len, struct cistern_meta *m, int t);
	int (*put_batch)(void *target, const void *buf, size_t item, size_t n,
			 struct cistern_meta *m, int t);
	/* put() returns the sample id and put_batch() writes the ids into metas. */
	bool ids;
};

/* put(data, sim_id=0, time_step=0, timeout_ms=-1) on self. */
PyObject *cx_put(PyObject *self, const struct cx_put_ops *ops, PyObject *args, PyObject *kw);
/* put_batch(data, item_size, count, metas, timeout_ms=-1) on self. */
PyObject *cx_put_batch(PyObject *self, const struct cx_put_ops *ops, PyObject *args, PyObject *kw);
/*
 * Put count rows of item bytes from buf, with metas m, waiting up to timeout_ms
 * in slices, on an entered target. Sets *done to the rows put; returns 0 or
 * the result that stopped it.
 */
int cx_put_rows(const struct cx_put_ops *ops, void *target, const char *buf, size_t item,
		size_t count, struct cistern_meta *m, int timeout_ms, size_t *done);

/* ------------------------------------------------------- module functions */

/* Each file's module functions, which module.c adds to the module. */
extern PyMethodDef cx_segment_functions[];
extern PyMethodDef cx_admin_functions[];
extern PyMethodDef cx_remote_functions[];

/* remote.c's type, for module.c to ready and add. */
extern PyTypeObject cx_RemoteType;

#endif
