/* SPDX-License-Identifier: MIT */
/*
 * _cistern.c - the CPython extension module under the `cistern` package.
 *
 * It stays thin: argument conversion, error mapping, GIL handling and object
 * lifetimes. Everything a user sees (Segment, numpy views, iteration, the torch
 * dataset) is written in Python on top of it, in cistern/__init__.py.
 *
 * Two types:
 *  - Handle: one struct cistern. Used by one thread at a time (the library's rule);
 *    a second thread entering while a call is in flight gets RuntimeError instead of
 *    undefined behaviour. It belongs to the process that opened it: after fork() the
 *    child must attach again.
 *  - Sample: one acquired sample, exporting its payload read-only through the buffer
 *    protocol (numpy.frombuffer(sample) is a zero-copy view). The mapping must outlive
 *    every view, and numpy drops its buffer export right away but keeps the Sample
 *    as the array's base, so lifetimes follow references, not exports: a Sample holds
 *    its Handle, and a Handle defers the real cistern_detach() until its last Sample
 *    object is gone. A view read after release therefore never faults; it just sees
 *    whatever the slot holds by then. New buffer requests on a released Sample fail.
 *
 * Blocking calls run without the GIL, in slices of at most WAIT_SLICE_MS, checking
 * for signals (Ctrl-C) between slices.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cistern.h>
#include <cistern/admin.h>
#include <cistern/remote.h>

/* Longest single wait without looking at signals. */
#define WAIT_SLICE_MS 200

/* Returned by the sliced waiters when a Python exception is set (a signal handler raised). */
#define PYERR_SET INT_MIN

static PyObject *EndOfData;

/* ------------------------------------------------------------------ errors */

/* Set the Python exception for a negative result `r` of the C API. Returns NULL. */
static PyObject *raise_result(int r)
{
	if (r == PYERR_SET)
		return NULL;
	const char *msg = cistern_strerror(r);
	int e = -r;
	PyObject *type;
	if (r == CISTERN_EOD) {
		PyErr_SetString(EndOfData, msg);
		return NULL;
	}
	switch (e) {
	case ETIMEDOUT:
	case EAGAIN:
		type = PyExc_TimeoutError;
		break;
	case EINVAL:
	case ERANGE:
	case EMSGSIZE:
	case ENAMETOOLONG:
		PyErr_SetString(PyExc_ValueError, msg);
		return NULL;
	default:
		type = PyExc_OSError; /* OSError(errno, msg) picks the subclass by errno */
		break;
	}
	PyObject *args = Py_BuildValue("(is)", e, msg);
	if (args) {
		PyErr_SetObject(type, args);
		Py_DECREF(args);
	}
	return NULL;
}

/* Room for cistern_read_problem()'s sentence. */
#define RW_WHY 400

/*
 * A read the rate limiter could never admit (-EDEADLK): a ValueError, with
 * cistern_read_problem()'s sentence naming the parameters. Returns NULL.
 */
static PyObject *raise_refused_read(const char *why)
{
	PyErr_SetString(PyExc_ValueError, why);
	return NULL;
}

/* A bad segment name as ValueError, saying what a name may be; 0 if the name is good. */
static int check_name(const char *name)
{
	int r = cistern_name_valid(name);
	if (r == 0)
		return 0;
	PyErr_Format(PyExc_ValueError,
		     "bad segment name '%s': %s; a name is 1 to %d characters from "
		     "[A-Za-z0-9._-], starting with a letter or digit",
		     name, r == -ENAMETOOLONG ? "too long" : "not allowed", CISTERN_NAME_MAX);
	return -1;
}

/* raise_result() for a call on segment `name`: an OSError carries the name as its filename. */
static PyObject *raise_for_name(int r, const char *name)
{
	int e = -r;
	if (e != ENOENT && e != EEXIST && e != EACCES && e != EPERM && e != EAGAIN && e != EPROTO &&
	    e != EPROTONOSUPPORT && e != EUSERS)
		return raise_result(r);
	/* EAGAIN here is "still being created", not a timeout: BlockingIOError. */
	PyObject *a = Py_BuildValue("(iss)", e, cistern_strerror(r), name);
	if (a) {
		PyErr_SetObject(PyExc_OSError, a);
		Py_DECREF(a);
	}
	return NULL;
}

/* ---------------------------------------------------------- int converters */

static int conv_u64(PyObject *o, void *out)
{
	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "expected an int, got %.100s", Py_TYPE(o)->tp_name);
		return 0;
	}
	unsigned long long v = PyLong_AsUnsignedLongLong(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_SetString(PyExc_ValueError,
				"value out of range for an unsigned 64-bit integer");
		return 0;
	}
	*(uint64_t *)out = (uint64_t)v;
	return 1;
}

static int conv_u32(PyObject *o, void *out)
{
	uint64_t v;
	if (!conv_u64(o, &v))
		return 0;
	if (v > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError,
				"value out of range for an unsigned 32-bit integer");
		return 0;
	}
	*(uint32_t *)out = (uint32_t)v;
	return 1;
}

/* A timeout in milliseconds: negative waits forever. */
static int conv_timeout(PyObject *o, void *out)
{
	if (o == Py_None) {
		*(int *)out = -1;
		return 1;
	}
	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "timeout_ms must be an int or None, got %.100s",
			     Py_TYPE(o)->tp_name);
		return 0;
	}
	long long v = PyLong_AsLongLong(o);
	if (v == -1 && PyErr_Occurred()) {
		PyErr_Clear();
		v = LLONG_MAX;
	}
	if (v < 0)
		v = -1;
	else if (v > INT_MAX)
		v = INT_MAX;
	*(int *)out = (int)v;
	return 1;
}

/* ------------------------------------------------------------ sliced waits */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef int (*attempt_fn)(void *ctx, int timeout_ms);

/*
 * Call fn(ctx, t) without the GIL until it returns something other than a timeout,
 * with t never above WAIT_SLICE_MS, for at most timeout_ms overall (negative: no
 * limit; 0: one try). Called and returns with the GIL held.
 */
static int wait_sliced(attempt_fn fn, void *ctx, int timeout_ms)
{
	int r;
	if (timeout_ms >= 0 && timeout_ms <= WAIT_SLICE_MS) {
		Py_BEGIN_ALLOW_THREADS r = fn(ctx, timeout_ms);
		Py_END_ALLOW_THREADS return r;
	}
	int64_t deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
	for (;;) {
		int t = WAIT_SLICE_MS;
		if (timeout_ms > 0) {
			int64_t left = deadline - now_ms();
			if (left <= 0)
				return -ETIMEDOUT;
			if (left < t)
				t = (int)left;
		}
		Py_BEGIN_ALLOW_THREADS r = fn(ctx, t);
		Py_END_ALLOW_THREADS if (r != -ETIMEDOUT) return r;
		if (PyErr_CheckSignals() < 0)
			return PYERR_SET;
	}
}

/* --------------------------------------------------------------- processes */

/*
 * This process's pid, set at import and by a fork handler in each child.
 * Every call on a handle checks that it runs in the process that opened the
 * handle; getpid() is a system call, which costs more than a whole get on
 * some virtual machines, so the check reads this instead.
 */
static pid_t self_pid;

static void on_fork_child(void)
{
	self_pid = getpid();
}

/* ------------------------------------------------------------------ Handle */

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
	/* get_batch_into()'s lengths and metadata, kept from call to call. */
	struct cistern_meta *scratch_meta;
	size_t *scratch_len;
	size_t scratch_cap;
	/* Samples of another size that get_many() and get_batch() skipped. */
	unsigned long long skipped;
} HandleObject;

enum sample_kind {
	KIND_ONE,    /* cistern_acquire() */
	KIND_PAIR,   /* cistern_acquire_pair(): ss[0], ss[1] */
	KIND_BATCH,  /* cistern_acquire_batch(): ss[0 .. n-1] */
	KIND_MEMBER, /* one member of a pair or batch: exports parent->ss[index] */
	KIND_MANY,   /* cistern_acquire() n times: ss[0 .. n-1], released one by one */
};

/* A pair or batch of members, rather than one payload. */
static int kind_is_group(enum sample_kind k)
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

static PyTypeObject HandleType;
static PyTypeObject SampleType;

/* Detach for real, if asked to and nothing maps the segment any more. */
static void handle_finish_detach(HandleObject *h)
{
	if (h->c && h->detached && !h->samples && !h->slots) {
		/*
		 * In a forked child too: there the library has already let go of
		 * the handle's locks, and detaching only unmaps and frees the
		 * child's copy, leaving the parent's attachment alone.
		 */
		cistern_detach(h->c);
		h->c = NULL;
	}
}

/* Check the handle is usable from here and mark it busy. 0 on success. */
static int handle_enter(HandleObject *h)
{
	if (h->detached || !h->c) {
		PyErr_SetString(PyExc_ValueError, "segment handle is detached");
		return -1;
	}
	if (h->pid != self_pid) {
		PyErr_SetString(
			PyExc_RuntimeError,
			"segment handle was opened by another process (fork): attach again");
		return -1;
	}
	if (h->busy) {
		PyErr_SetString(
			PyExc_RuntimeError,
			"segment handle is in use by another thread: attach one handle per thread");
		return -1;
	}
	h->busy = 1;
	return 0;
}

static void handle_leave(HandleObject *h)
{
	h->busy = 0;
	/* Called with the GIL held, in the thread that made the call. */
	for (size_t i = 0; i < h->npending; i++)
		cistern_release(h->c, &h->pending[i]);
	h->npending = 0;
}

/* Queue a release for handle_leave(); if memory runs out, detach gives it back. */
static void handle_defer_release(HandleObject *h, const struct cistern_sample *ss, size_t n)
{
	if (h->npending + n > h->cap_pending) {
		size_t cap = (h->npending + n) * 2;
		struct cistern_sample *p = PyMem_Realloc(h->pending, cap * sizeof(*p));
		if (!p)
			return;
		h->pending = p;
		h->cap_pending = cap;
	}
	memcpy(h->pending + h->npending, ss, n * sizeof(*ss));
	h->npending += n;
}

static HandleObject *handle_new(struct cistern *c)
{
	HandleObject *h = PyObject_New(HandleObject, &HandleType);
	if (!h) {
		cistern_detach(c);
		return NULL;
	}
	h->c = c;
	h->pid = self_pid;
	h->busy = 0;
	h->detached = 0;
	h->samples = NULL;
	h->slots = NULL;
	h->pending = NULL;
	h->npending = h->cap_pending = 0;
	h->scratch_meta = NULL;
	h->scratch_len = NULL;
	h->scratch_cap = 0;
	h->skipped = 0;
	struct cistern_config cfg;
	int cr = cistern_config_get(c, &cfg);
	h->slot_size = cr == 0 ? cfg.slot_size : 0;
	h->policy = cr == 0 ? (int)cfg.policy : -1;
	return h;
}

static void sample_do_release(SampleObject *s);
static void slots_abort_all(HandleObject *h);

static PyObject *Handle_detach(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (h->detached)
		Py_RETURN_NONE;
	if (h->busy) {
		PyErr_SetString(PyExc_RuntimeError, "segment handle is in use by another thread");
		return NULL;
	}
	/* Samples still held were read by the user: release them (consumed), not handed back. */
	for (SampleObject *s = h->samples; s; s = s->next)
		sample_do_release(s);
	/* Reservations still open can never be committed now: give them back. */
	slots_abort_all(h);
	h->detached = 1;
	handle_finish_detach(h);
	Py_RETURN_NONE;
}

static void Handle_dealloc(HandleObject *h)
{
	/* Samples hold a reference: none is left here. */
	h->detached = 1;
	handle_finish_detach(h);
	PyMem_Free(h->pending);
	PyMem_Free(h->scratch_meta);
	PyMem_Free(h->scratch_len);
	PyObject_Free(h);
}

/* put */

struct put_ctx {
	struct cistern *c;
	const void *buf;
	size_t len;
	struct cistern_meta meta;
};

static int put_attempt(void *p, int t)
{
	struct put_ctx *x = p;
	return cistern_put(x->c, x->buf, x->len, &x->meta, t);
}

static PyObject *Handle_put(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data", "sim_id", "time_step", "timeout_ms", NULL};
	Py_buffer view;
	struct put_ctx x = {0};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|O&O&O&:put", kwlist, &view, conv_u32,
					 &x.meta.sim_id, conv_u32, &x.meta.time_step, conv_timeout,
					 &timeout))
		return NULL;
	if (handle_enter(h) < 0) {
		PyBuffer_Release(&view);
		return NULL;
	}
	if ((uint64_t)view.len > h->slot_size) {
		PyErr_Format(PyExc_ValueError,
			     "sample of %zd bytes does not fit a slot of %llu bytes", view.len,
			     (unsigned long long)h->slot_size);
		handle_leave(h);
		PyBuffer_Release(&view);
		return NULL;
	}
	x.c = h->c;
	x.buf = view.buf;
	x.len = (size_t)view.len;
	/* The exporter cannot move or free the buffer while we hold the view. */
	int r = wait_sliced(put_attempt, &x, timeout);
	handle_leave(h);
	PyBuffer_Release(&view);
	if (r < 0)
		return raise_result(r);
	return PyLong_FromUnsignedLongLong(x.meta.sample_id);
}

/*
 * put_batch(data, item_size, count, metas, timeout_ms=-1) -> n
 * Put `count` samples of item_size bytes each from the buffer `data` (row i
 * at offset i * item_size), in order, with cistern_put_batch(), waiting for
 * room as put() does. metas is a writable buffer of count * 3 uint64: each
 * row's sim_id and time_step are read from columns 1 and 2, and its sample
 * id is written to column 0. Returns how many were put: fewer than count only
 * when the timeout (or an error) came after the first; with none put, the
 * timeout or error is raised.
 */
/*
 * put_batch()'s buffers, as Handle.put_batch and Remote.put_batch take them:
 * `data` must hold count rows of item bytes and `metas` count rows of three
 * uint64. 0, or -1 with ValueError set.
 */
static int batch_shape_ok(const Py_buffer *data, Py_ssize_t item, Py_ssize_t count,
			  const Py_buffer *metas)
{
	if (item <= 0 || count <= 0 || item > PY_SSIZE_T_MAX / count || data->len < item * count) {
		PyErr_SetString(PyExc_ValueError, "put_batch: data smaller than item_size * count");
		return -1;
	}
	if (metas->len < count * 3 * (Py_ssize_t)sizeof(uint64_t)) {
		PyErr_SetString(PyExc_ValueError,
				"put_batch: metas buffer smaller than count * 3 uint64");
		return -1;
	}
	return 0;
}

/*
 * Each row's sim_id and time_step (columns 1 and 2 of metas) into m[0..count).
 * 0, or -1 with ValueError set if one does not fit 32 bits.
 */
static int batch_metas(const Py_buffer *metas, Py_ssize_t count, struct cistern_meta *m)
{
	const uint64_t *mv = metas->buf;
	for (Py_ssize_t i = 0; i < count; i++) {
		if (mv[3 * i + 1] > UINT32_MAX || mv[3 * i + 2] > UINT32_MAX) {
			PyErr_SetString(PyExc_ValueError,
					"put_batch: sim_id and time_step must fit 32 bits");
			return -1;
		}
		m[i] = (struct cistern_meta){.sim_id = (uint32_t)mv[3 * i + 1],
					     .time_step = (uint32_t)mv[3 * i + 2]};
	}
	return 0;
}

struct put_batch_ctx {
	struct cistern *c;
	const char *buf;
	size_t item, count, done;
	struct cistern_meta *m;
};

static int put_batch_attempt(void *p, int t)
{
	struct put_batch_ctx *x = p;
	while (x->done < x->count) {
		size_t n = x->count - x->done;
		int r = cistern_put_batch(x->c, x->buf + x->done * x->item, x->item,
					  n < INT_MAX ? n : INT_MAX, NULL, x->m + x->done, t);
		if (r < 0)
			return r;
		x->done += (size_t)r;
	}
	return 0;
}

static PyObject *Handle_put_batch(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data", "item_size", "count", "metas", "timeout_ms", NULL};
	Py_buffer data, metas;
	Py_ssize_t item, count;
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*nnw*|O&:put_batch", kwlist, &data, &item,
					 &count, &metas, conv_timeout, &timeout))
		return NULL;
	PyObject *res = NULL;
	struct cistern_meta *m = NULL;
	if (batch_shape_ok(&data, item, count, &metas) < 0)
		goto out_buf;
	if ((uint64_t)item > h->slot_size) {
		PyErr_Format(PyExc_ValueError,
			     "samples of %zd bytes do not fit a slot of %llu bytes", item,
			     (unsigned long long)h->slot_size);
		goto out_buf;
	}
	m = PyMem_Calloc((size_t)count, sizeof(*m));
	if (!m) {
		PyErr_NoMemory();
		goto out_buf;
	}
	if (batch_metas(&metas, count, m) < 0)
		goto out_buf;
	if (handle_enter(h) < 0)
		goto out_buf;
	struct put_batch_ctx x = {h->c, data.buf, (size_t)item, (size_t)count, 0, m};
	/* The exporter cannot move or free the buffer while we hold the view. */
	int r = wait_sliced(put_batch_attempt, &x, timeout);
	handle_leave(h);
	uint64_t *mv = metas.buf;
	for (size_t i = 0; i < x.done; i++)
		mv[3 * i] = m[i].sample_id;
	if (x.done == 0) {
		raise_result(r);
		goto out_buf;
	}
	if (r == PYERR_SET) /* a signal handler raised after some rows: the exception wins */
		goto out_buf;
	res = PyLong_FromSize_t(x.done);
out_buf:
	PyMem_Free(m);
	PyBuffer_Release(&data);
	PyBuffer_Release(&metas);
	return res;
}

/* acquire */

struct acq_ctx {
	struct cistern *c;
	struct cistern_sample *s;
};

static int acq_attempt(void *p, int t)
{
	struct acq_ctx *x = p;
	return cistern_acquire(x->c, x->s, t);
}

/* Acquire into *s: a quick try with the GIL held, then a sliced wait. */
static int acquire_one(HandleObject *h, struct cistern_sample *s, int timeout)
{
	int r = cistern_acquire(h->c, s, 0);
	if (r != -EAGAIN || timeout == 0)
		return r;
	struct acq_ctx x = {h->c, s};
	return wait_sliced(acq_attempt, &x, timeout);
}

static PyObject *meta_tuple(const struct cistern_meta *m)
{
	return Py_BuildValue("(KII)", (unsigned long long)m->sample_id, (unsigned int)m->sim_id,
			     (unsigned int)m->time_step);
}

static PyObject *Handle_get(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout_ms", NULL};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:get", kwlist, conv_timeout, &timeout))
		return NULL;
	if (handle_enter(h) < 0)
		return NULL;
	struct cistern_sample s;
	memset(&s, 0, sizeof(s));
	int r = acquire_one(h, &s, timeout);
	if (r < 0) {
		handle_leave(h);
		return raise_result(r);
	}
	PyObject *bytes = PyBytes_FromStringAndSize(s.data, (Py_ssize_t)s.len);
	struct cistern_meta meta = s.meta;
	cistern_release(h->c, &s);
	handle_leave(h);
	if (!bytes)
		return NULL;
	PyObject *m = meta_tuple(&meta);
	if (!m) {
		Py_DECREF(bytes);
		return NULL;
	}
	PyObject *res = PyTuple_Pack(2, bytes, m);
	Py_DECREF(bytes);
	Py_DECREF(m);
	return res;
}

/*
 * get_many(out, item_size, count, timeout_ms, metas=None, skip=False) -> n
 * Gather up to `count` samples of exactly item_size bytes each into the writable
 * buffer `out` (row i at offset i * item_size); metas, if given, is a writable
 * buffer of count * 3 uint64 (sample_id, sim_id, time_step). Returns how many rows
 * were filled: fewer than count only when end of data or the timeout came after
 * the first row; with no row at all, the end of data or timeout is raised. A
 * sample of another size raises ValueError and goes back unread; with skip, it
 * is read and dropped instead (counted in `skipped`) and the call goes on.
 */
static PyObject *Handle_get_many(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"out", "item_size", "count", "timeout_ms", "metas", "skip", NULL};
	Py_buffer out, metas = {0};
	Py_ssize_t item, count;
	int timeout = -1, skip = 0;
	PyObject *metas_obj = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "w*nn|O&Op:get_many", kwlist, &out, &item,
					 &count, conv_timeout, &timeout, &metas_obj, &skip))
		return NULL;
	PyObject *res = NULL;
	int have_metas = 0;
	if (item <= 0 || count < 0 || item > PY_SSIZE_T_MAX / (count ? count : 1) ||
	    out.len < item * count) {
		PyErr_SetString(PyExc_ValueError,
				"get_many: output buffer smaller than item_size * count");
		goto out_buf;
	}
	if (metas_obj != Py_None) {
		if (PyObject_GetBuffer(metas_obj, &metas, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
			goto out_buf;
		have_metas = 1;
		if (metas.len < count * 3 * (Py_ssize_t)sizeof(uint64_t)) {
			PyErr_SetString(PyExc_ValueError,
					"get_many: metas buffer smaller than count * 3 uint64");
			goto out_buf;
		}
	}
	if (handle_enter(h) < 0)
		goto out_buf;
	int64_t deadline = timeout > 0 ? now_ms() + timeout : 0;
	Py_ssize_t n = 0;
	int r = 0;
	while (n < count) {
		int t = timeout;
		if (timeout > 0) {
			int64_t left = deadline - now_ms();
			t = left > 0 ? (int)left : 0;
		}
		struct cistern_sample s;
		memset(&s, 0, sizeof(s));
		r = acquire_one(h, &s, t);
		if (r < 0)
			break;
		if ((Py_ssize_t)s.len != item && skip) {
			/* The caller chose to go past it: read (under FIFO, gone) and dropped. */
			cistern_release(h->c, &s);
			h->skipped++;
			continue;
		}
		if ((Py_ssize_t)s.len != item) {
			/* Bad input loses nothing: the sample goes back unread. */
			size_t len = s.len;
			int u = cistern_unacquire(h->c, &s);
			handle_leave(h);
			PyErr_Format(PyExc_ValueError,
				     "a sample of %zu bytes where samples of %zd were asked for%s",
				     len, item, u == 0 ? " (it stays in the segment)" : "");
			goto out_buf;
		}
		memcpy((char *)out.buf + n * item, s.data, s.len);
		if (have_metas) {
			uint64_t *m = (uint64_t *)metas.buf + 3 * n;
			m[0] = s.meta.sample_id;
			m[1] = s.meta.sim_id;
			m[2] = s.meta.time_step;
		}
		cistern_release(h->c, &s);
		n++;
	}
	handle_leave(h);
	if (n == 0 && count > 0) {
		raise_result(r);
		goto out_buf;
	}
	if (r == PYERR_SET) /* a signal handler raised after some rows: the exception wins */
		goto out_buf;
	res = PyLong_FromSsize_t(n);
out_buf:
	if (have_metas)
		PyBuffer_Release(&metas);
	PyBuffer_Release(&out);
	return res;
}

static SampleObject *sample_alloc(enum sample_kind kind, size_t n)
{
	SampleObject *so = PyObject_New(SampleObject, &SampleType);
	if (!so)
		return NULL;
	so->h = NULL;
	so->parent = NULL;
	so->kind = kind;
	so->n = n;
	so->index = 0;
	so->held = 0;
	so->exports = 0;
	so->prev = so->next = NULL;
	memset(so->inline_, 0, sizeof(so->inline_));
	so->ss = so->inline_;
	if (n > 2) {
		so->ss = PyMem_Calloc(n, sizeof(*so->ss));
		if (!so->ss) {
			so->ss = so->inline_;
			Py_DECREF(so);
			PyErr_NoMemory();
			return NULL;
		}
	}
	return so;
}

/* The acquisition succeeded: link the sample to its handle. */
static PyObject *sample_attach(SampleObject *so, HandleObject *h)
{
	Py_INCREF(h);
	so->h = h;
	so->held = 1;
	so->next = h->samples;
	if (h->samples)
		h->samples->prev = so;
	h->samples = so;
	return (PyObject *)so;
}

static PyObject *Handle_acquire(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout_ms", NULL};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:acquire", kwlist, conv_timeout, &timeout))
		return NULL;
	SampleObject *so = sample_alloc(KIND_ONE, 1);
	if (!so)
		return NULL;
	if (handle_enter(h) < 0) {
		Py_DECREF(so);
		return NULL;
	}
	int r = acquire_one(h, &so->ss[0], timeout);
	handle_leave(h);
	if (r < 0) {
		Py_DECREF(so);
		return raise_result(r);
	}
	return sample_attach(so, h);
}

static int pair_attempt(void *p, int t)
{
	struct acq_ctx *x = p;
	return cistern_acquire_pair(x->c, x->s, t);
}

static PyObject *Handle_acquire_pair(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout_ms", NULL};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:acquire_pair", kwlist, conv_timeout,
					 &timeout))
		return NULL;
	SampleObject *so = sample_alloc(KIND_PAIR, 2);
	if (!so)
		return NULL;
	if (handle_enter(h) < 0) {
		Py_DECREF(so);
		return NULL;
	}
	struct acq_ctx x = {h->c, so->ss};
	int r = wait_sliced(pair_attempt, &x, timeout);
	handle_leave(h);
	if (r < 0) {
		Py_DECREF(so);
		return raise_result(r);
	}
	return sample_attach(so, h);
}

struct batch_ctx {
	struct cistern *c;
	struct cistern_sample *s;
	size_t n;
};

static int batch_attempt(void *p, int t)
{
	struct batch_ctx *x = p;
	return cistern_acquire_batch(x->c, x->s, x->n, t);
}

/* acquire_batch(n=0, timeout_ms=-1) -> a batch Sample of the samples acquired */
static PyObject *Handle_acquire_batch(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"n", "timeout_ms", NULL};
	Py_ssize_t n = 0;
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|nO&:acquire_batch", kwlist, &n, conv_timeout,
					 &timeout))
		return NULL;
	if (n < 0) {
		PyErr_SetString(PyExc_ValueError, "acquire_batch: n must be >= 0");
		return NULL;
	}
	if (handle_enter(h) < 0)
		return NULL;
	if (n == 0) {
		struct cistern_config cfg;
		if (cistern_config_get(h->c, &cfg) == 0)
			n = (Py_ssize_t)cfg.batch_size;
	}
	handle_leave(h);
	if (n == 0) {
		PyErr_SetString(PyExc_ValueError,
				"acquire_batch: n is 0 and the segment has no batch_size");
		return NULL;
	}
	SampleObject *so = sample_alloc(KIND_BATCH, (size_t)n);
	if (!so)
		return NULL;
	if (handle_enter(h) < 0) {
		Py_DECREF(so);
		return NULL;
	}
	struct batch_ctx x = {h->c, so->ss, (size_t)n};
	int r = wait_sliced(batch_attempt, &x, timeout);
	char why[RW_WHY];
	if (r == -EDEADLK)
		cistern_read_problem(h->c, (size_t)n, why, sizeof(why));
	handle_leave(h);
	if (r < 0) {
		Py_DECREF(so);
		return r == -EDEADLK ? raise_refused_read(why) : raise_result(r);
	}
	so->n = (size_t)r;
	return sample_attach(so, h);
}

/* Copy the n members of ss into out (row i at i * item) and their metadata into metas. */
static void copy_rows(const struct cistern_sample *ss, size_t n, char *out, size_t item,
		      uint64_t *metas)
{
	/* The members sit in random places: fetch a few rows ahead of the copy. */
	enum { AHEAD = 8 };
	for (size_t i = 0; i < n; i++) {
		if (i + AHEAD < n)
			for (size_t off = 0; off < item && off < 512; off += 64)
				__builtin_prefetch((const char *)ss[i + AHEAD].data + off, 0, 3);
		memcpy(out + i * item, ss[i].data, item);
		if (metas) {
			metas[3 * i] = ss[i].meta.sample_id;
			metas[3 * i + 1] = ss[i].meta.sim_id;
			metas[3 * i + 2] = ss[i].meta.time_step;
		}
	}
}

/*
 * get_batch(out, item_size, n, timeout_ms=-1, metas=None, skip=False) -> k
 * k distinct samples drawn together (cistern_acquire_batch()), copied into out
 * (row i at i * item_size) and released. Every one must be exactly item_size
 * bytes; if one is not, the whole batch is handed back unread
 * (cistern_unacquire()), so a wrong dtype or shape costs no sample. With skip,
 * the members of another size are read and dropped instead (counted in
 * `skipped`) and the batch is the others, drawn again if none is left.
 */
static PyObject *Handle_get_batch(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"out", "item_size", "n", "timeout_ms", "metas", "skip", NULL};
	Py_buffer out, metas = {0};
	Py_ssize_t item, n;
	int timeout = -1, skip = 0;
	PyObject *metas_obj = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "w*nn|O&Op:get_batch", kwlist, &out, &item, &n,
					 conv_timeout, &timeout, &metas_obj, &skip))
		return NULL;
	PyObject *res = NULL;
	int have_metas = 0;
	struct cistern_sample *ss = NULL;
	if (item <= 0 || n <= 0 || item > PY_SSIZE_T_MAX / n || out.len < item * n) {
		PyErr_SetString(PyExc_ValueError,
				"get_batch: output buffer smaller than item_size * n");
		goto out_buf;
	}
	if (metas_obj != Py_None) {
		if (PyObject_GetBuffer(metas_obj, &metas, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
			goto out_buf;
		have_metas = 1;
		if (metas.len < n * 3 * (Py_ssize_t)sizeof(uint64_t)) {
			PyErr_SetString(PyExc_ValueError,
					"get_batch: metas buffer smaller than n * 3 uint64");
			goto out_buf;
		}
	}
	ss = PyMem_Calloc((size_t)n, sizeof(*ss));
	if (!ss) {
		PyErr_NoMemory();
		goto out_buf;
	}
	if (handle_enter(h) < 0)
		goto out_buf;
	struct batch_ctx x = {h->c, ss, (size_t)n};
	int64_t deadline = timeout > 0 ? now_ms() + timeout : 0;
	int r;
draw:
	r = wait_sliced(batch_attempt, &x, timeout);
	if (r > 0 && skip) {
		/* The members that fit first, the others read and dropped. */
		size_t good = 0;
		for (size_t i = 0; i < (size_t)r; i++) {
			if (ss[i].len != (size_t)item)
				continue;
			struct cistern_sample tmp = ss[good];
			ss[good++] = ss[i];
			ss[i] = tmp;
		}
		if (good < (size_t)r) {
			cistern_release_batch(h->c, ss + good, (size_t)r - good);
			h->skipped += (size_t)r - good;
		}
		r = (int)good;
		if (r == 0) {
			if (timeout > 0) {
				int64_t left = deadline - now_ms();
				timeout = left > 0 ? (int)left : 0;
			}
			if (timeout == 0)
				r = deadline ? -ETIMEDOUT : -EAGAIN;
			else
				goto draw;
		}
	}
	if (r < 0) {
		char why[RW_WHY];
		if (r == -EDEADLK)
			cistern_read_problem(h->c, (size_t)n, why, sizeof(why));
		handle_leave(h);
		if (r == -EDEADLK)
			raise_refused_read(why);
		else
			raise_result(r);
		goto out_buf;
	}
	size_t bad = (size_t)r;
	for (size_t i = 0; i < (size_t)r && bad == (size_t)r; i++)
		if (ss[i].len != (size_t)item)
			bad = i;
	if (bad < (size_t)r) {
		/* Bad input loses nothing: every member goes back unread. */
		size_t len = ss[bad].len;
		int u = 0;
		for (int i = 0; i < r; i++) {
			int e = cistern_unacquire(h->c, &ss[i]);
			if (e < 0 && u == 0)
				u = e;
		}
		handle_leave(h);
		PyErr_Format(PyExc_ValueError,
			     "a sample of %zu bytes where samples of %zd were asked for%s", len,
			     item, u == 0 ? " (the batch stays in the segment)" : "");
		goto out_buf;
	}
	Py_BEGIN_ALLOW_THREADS copy_rows(ss, (size_t)r, out.buf, (size_t)item,
					 have_metas ? metas.buf : NULL);
	Py_END_ALLOW_THREADS int rel = cistern_release_batch(h->c, ss, (size_t)r);
	handle_leave(h);
	if (rel < 0) {
		raise_result(rel);
		goto out_buf;
	}
	res = PyLong_FromLong(r);
out_buf:
	PyMem_Free(ss);
	if (have_metas)
		PyBuffer_Release(&metas);
	PyBuffer_Release(&out);
	return res;
}

/* ------------------------------------------- reads into the caller's memory */

/*
 * These calls serve loops that move many samples from Python: positional
 * arguments only (METH_FASTCALL, no keyword parsing), the payload copied into
 * a buffer the caller reuses (no bytes object, no tuple), one quick try with
 * the GIL held before a sliced wait without it.
 */

/* Positional argument i of nargs, or def when it was not given. */
static PyObject *arg_or(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t i, PyObject *def)
{
	return i < nargs ? args[i] : def;
}

/* A writable, C-contiguous buffer over o, or an optional one (None: *have = 0). 0 or -1. */
static int opt_writable(PyObject *o, Py_buffer *b, int *have, Py_ssize_t need, const char *what)
{
	*have = 0;
	if (o == Py_None)
		return 0;
	if (PyObject_GetBuffer(o, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
		return -1;
	*have = 1;
	if (b->len < need) {
		PyErr_Format(PyExc_ValueError, "%s buffer of %zd bytes where %zd are needed", what,
			     b->len, need);
		return -1;
	}
	return 0;
}

/* Room for n metas and lengths in the handle's scratch arrays. 0, or -1 (MemoryError). */
static int handle_scratch(HandleObject *h, size_t n)
{
	if (n <= h->scratch_cap)
		return 0;
	struct cistern_meta *m = PyMem_Realloc(h->scratch_meta, n * sizeof(*m));
	if (!m) {
		PyErr_NoMemory();
		return -1;
	}
	h->scratch_meta = m;
	size_t *l = PyMem_Realloc(h->scratch_len, n * sizeof(*l));
	if (!l) {
		PyErr_NoMemory();
		return -1;
	}
	h->scratch_len = l;
	h->scratch_cap = n;
	return 0;
}

static void put_meta(uint64_t *row, const struct cistern_meta *m)
{
	row[0] = m->sample_id;
	row[1] = m->sim_id;
	row[2] = m->time_step;
}

struct get_ctx {
	struct cistern *c;
	void *buf;
	size_t cap, len;
	struct cistern_meta meta;
};

static int get_attempt(void *p, int t)
{
	struct get_ctx *x = p;
	ssize_t r = cistern_get(x->c, x->buf, x->cap, &x->meta, t);
	if (r < 0)
		return (int)r;
	x->len = (size_t)r;
	return 0;
}

/*
 * get_into(out, timeout_ms=-1, metas=None) -> payload length
 * Copy one sample (cistern_get()) into the writable buffer `out`; metas, if
 * given, receives (sample_id, sim_id, time_step) as 3 uint64. A sample longer
 * than `out` raises ValueError and stays in the segment.
 */
static PyObject *Handle_get_into(HandleObject *h, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs < 1 || nargs > 3) {
		PyErr_SetString(PyExc_TypeError, "get_into(out, timeout_ms=-1, metas=None)");
		return NULL;
	}
	int timeout = -1;
	if (nargs > 1 && !conv_timeout(args[1], &timeout))
		return NULL;
	Py_buffer out, metas;
	int have_metas = 0;
	PyObject *res = NULL;
	if (PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
		return NULL;
	if (opt_writable(arg_or(args, nargs, 2, Py_None), &metas, &have_metas,
			 3 * (Py_ssize_t)sizeof(uint64_t), "get_into: metas") < 0)
		goto out_buf;
	if (handle_enter(h) < 0)
		goto out_buf;
	struct get_ctx x = {h->c, out.buf, (size_t)out.len, 0, {0, 0, 0}};
	int r = get_attempt(&x, 0);
	if (r == -EAGAIN && timeout != 0)
		r = wait_sliced(get_attempt, &x, timeout);
	handle_leave(h);
	if (r == -EMSGSIZE) {
		PyErr_Format(PyExc_ValueError,
			     "get_into: the next sample is larger than the %zd-byte buffer "
			     "(it stays in the segment)",
			     out.len);
		goto out_buf;
	}
	if (r < 0) {
		raise_result(r);
		goto out_buf;
	}
	if (have_metas)
		put_meta(metas.buf, &x.meta);
	res = PyLong_FromSize_t(x.len);
out_buf:
	if (have_metas)
		PyBuffer_Release(&metas);
	PyBuffer_Release(&out);
	return res;
}

struct gbi_ctx {
	HandleObject *h;
	char *buf;
	size_t stride, n, done;
	size_t *len;
	struct cistern_meta *meta;
	int batch; /* the policy serves cistern_get_batch() */
};

static int gbi_attempt(void *p, int t)
{
	struct gbi_ctx *x = p;
	if (x->batch)
		return cistern_get_batch(x->h->c, x->buf, x->stride, x->n, x->len, x->meta, t);
	/* FIRO: the first sample waited for, then those there now, as the FIFO's batch does. */
	size_t k = 0;
	while (k < x->n) {
		ssize_t r = cistern_get(x->h->c, x->buf + k * x->stride, x->stride, &x->meta[k],
					k == 0 ? t : 0);
		if (r < 0) {
			/* After the first, an error ends the batch: what was read is kept. */
			if (k > 0)
				break;
			return (int)r;
		}
		x->len[k++] = (size_t)r;
	}
	return (int)k;
}

/*
 * get_batch_into(out, stride, n, timeout_ms=-1, metas=None, lens=None) -> k
 * Up to n samples into `out`, sample i at offset i * stride (each at most
 * stride bytes), in one call: FIFO and FIRO the next ones there now, or the
 * first one waited for (cistern_get_batch()'s FIFO rule); the batch-capable
 * reservoirs a batch of n drawn together. metas (n * 3 uint64) and lens
 * (n uint64) receive each sample's metadata and length. A sample longer than
 * stride raises ValueError and stays in the segment.
 */
static PyObject *Handle_get_batch_into(HandleObject *h, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs < 3 || nargs > 6) {
		PyErr_SetString(
			PyExc_TypeError,
			"get_batch_into(out, stride, n, timeout_ms=-1, metas=None, lens=None)");
		return NULL;
	}
	Py_ssize_t stride = PyLong_AsSsize_t(args[1]);
	if (stride == -1 && PyErr_Occurred())
		return NULL;
	Py_ssize_t n = PyLong_AsSsize_t(args[2]);
	if (n == -1 && PyErr_Occurred())
		return NULL;
	int timeout = -1;
	if (nargs > 3 && !conv_timeout(args[3], &timeout))
		return NULL;
	if (stride <= 0 || n <= 0 || n > INT_MAX) {
		PyErr_SetString(PyExc_ValueError, "get_batch_into: stride and n must be positive");
		return NULL;
	}
	if (h->policy == CISTERN_SIM_PAIRED_RESERVOIR) {
		PyErr_SetString(
			PyExc_ValueError,
			"sim-paired-reservoir reads pairs: use get_pair() or acquire_pair()");
		return NULL;
	}
	Py_buffer out, metas, lens;
	int have_metas = 0, have_lens = 0;
	PyObject *res = NULL;
	if (PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
		return NULL;
	if (stride > PY_SSIZE_T_MAX / n || out.len < stride * n) {
		PyErr_SetString(PyExc_ValueError,
				"get_batch_into: output buffer smaller than stride * n");
		goto out_buf;
	}
	if (opt_writable(arg_or(args, nargs, 4, Py_None), &metas, &have_metas,
			 n * 3 * (Py_ssize_t)sizeof(uint64_t), "get_batch_into: metas") < 0 ||
	    opt_writable(arg_or(args, nargs, 5, Py_None), &lens, &have_lens,
			 n * (Py_ssize_t)sizeof(uint64_t), "get_batch_into: lens") < 0)
		goto out_buf;
	if (handle_enter(h) < 0)
		goto out_buf;
	int firo = h->policy == CISTERN_FIRO;
	if ((have_metas || have_lens || firo) && handle_scratch(h, (size_t)n) < 0) {
		handle_leave(h);
		goto out_buf;
	}
	struct gbi_ctx x = {
		h,
		out.buf,
		(size_t)stride,
		(size_t)n,
		0,
		have_lens || firo ? h->scratch_len : NULL,
		have_metas || firo ? h->scratch_meta : NULL,
		!firo,
	};
	int r = gbi_attempt(&x, 0);
	if (r == -EAGAIN && timeout != 0)
		r = wait_sliced(gbi_attempt, &x, timeout);
	handle_leave(h);
	if (r == -EMSGSIZE) {
		PyErr_Format(
			PyExc_ValueError,
			"get_batch_into: the next sample is longer than the stride of %zd bytes "
			"(it stays in the segment)",
			stride);
		goto out_buf;
	}
	if (r < 0) {
		raise_result(r);
		goto out_buf;
	}
	for (int i = 0; i < r; i++) {
		if (have_metas)
			put_meta((uint64_t *)metas.buf + 3 * i, &x.meta[i]);
		if (have_lens)
			((uint64_t *)lens.buf)[i] = x.len[i];
	}
	res = PyLong_FromLong(r);
out_buf:
	if (have_lens)
		PyBuffer_Release(&lens);
	if (have_metas)
		PyBuffer_Release(&metas);
	PyBuffer_Release(&out);
	return res;
}

/*
 * acquire_many(n, timeout_ms=-1, skip_size=-1) -> Sample of kind "many"
 * Acquire up to n samples one by one with cistern_acquire(), waiting for each
 * (within timeout_ms overall), and hold them all until the Sample is released
 * (each released) or handed back (each unacquired). Fewer than n only when end
 * of data or the timeout came after the first; with none, that is raised. For
 * a reader that must keep samples in the segment until it has passed them on.
 * With skip_size >= 0, a sample of another length is read and dropped
 * (counted in `skipped`) instead of held.
 */
static PyObject *Handle_acquire_many(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"n", "timeout_ms", "skip_size", NULL};
	Py_ssize_t n, skip_size = -1;
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O&n:acquire_many", kwlist, &n, conv_timeout,
					 &timeout, &skip_size))
		return NULL;
	if (n <= 0) {
		PyErr_SetString(PyExc_ValueError, "acquire_many: n must be positive");
		return NULL;
	}
	SampleObject *so = sample_alloc(KIND_MANY, (size_t)n);
	if (!so)
		return NULL;
	if (handle_enter(h) < 0) {
		Py_DECREF(so);
		return NULL;
	}
	int64_t deadline = timeout > 0 ? now_ms() + timeout : 0;
	size_t k = 0;
	int r = 0;
	while (k < (size_t)n) {
		int t = timeout;
		if (timeout > 0) {
			int64_t left = deadline - now_ms();
			t = left > 0 ? (int)left : 0;
		}
		r = acquire_one(h, &so->ss[k], t);
		if (r < 0)
			break;
		if (skip_size >= 0 && so->ss[k].len != (size_t)skip_size) {
			/* The caller goes past samples of another size: read and dropped. */
			cistern_release(h->c, &so->ss[k]);
			memset(&so->ss[k], 0, sizeof(so->ss[k]));
			h->skipped++;
			continue;
		}
		k++;
	}
	if (k > 0 && r == PYERR_SET) {
		/* A signal handler raised: give back what was taken, as if never acquired. */
		for (size_t i = 0; i < k; i++)
			cistern_unacquire(h->c, &so->ss[i]);
		k = 0;
	}
	handle_leave(h);
	if (k == 0) {
		Py_DECREF(so);
		return raise_result(r);
	}
	so->n = k;
	return sample_attach(so, h);
}

/*
 * put_many(data, stride, n, sim_id=0, time_step=0, timeout_ms=-1, ids=None) -> k
 * Put n samples of stride bytes each from the buffer `data` (sample i at
 * offset i * stride), in order, all with the same sim_id and time_step, with
 * cistern_put_batch(), waiting for room as put() does; ids (n uint64), if
 * given, receives their sample ids. Returns how many were put: fewer than n
 * only when the timeout (or an error) came after the first; with none put,
 * that is raised. Positional arguments only, no allocation once warm.
 */
static PyObject *Handle_put_many(HandleObject *h, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs < 3 || nargs > 7) {
		PyErr_SetString(PyExc_TypeError, "put_many(data, stride, n, sim_id=0, time_step=0, "
						 "timeout_ms=-1, ids=None)");
		return NULL;
	}
	Py_ssize_t stride = PyLong_AsSsize_t(args[1]);
	if (stride == -1 && PyErr_Occurred())
		return NULL;
	Py_ssize_t n = PyLong_AsSsize_t(args[2]);
	if (n == -1 && PyErr_Occurred())
		return NULL;
	uint32_t sim_id = 0, time_step = 0;
	int timeout = -1;
	if ((nargs > 3 && !conv_u32(args[3], &sim_id)) ||
	    (nargs > 4 && !conv_u32(args[4], &time_step)) ||
	    (nargs > 5 && !conv_timeout(args[5], &timeout)))
		return NULL;
	if (stride <= 0 || n <= 0) {
		PyErr_SetString(PyExc_ValueError, "put_many: stride and n must be positive");
		return NULL;
	}
	if ((uint64_t)stride > h->slot_size) {
		PyErr_Format(PyExc_ValueError,
			     "samples of %zd bytes do not fit a slot of %llu bytes", stride,
			     (unsigned long long)h->slot_size);
		return NULL;
	}
	Py_buffer data, ids;
	int have_ids = 0;
	PyObject *res = NULL;
	if (PyObject_GetBuffer(args[0], &data, PyBUF_C_CONTIGUOUS) < 0)
		return NULL;
	if (stride > PY_SSIZE_T_MAX / n || data.len < stride * n) {
		PyErr_SetString(PyExc_ValueError, "put_many: data smaller than stride * n");
		goto out_buf;
	}
	if (opt_writable(arg_or(args, nargs, 6, Py_None), &ids, &have_ids,
			 n * (Py_ssize_t)sizeof(uint64_t), "put_many: ids") < 0)
		goto out_buf;
	if (handle_enter(h) < 0)
		goto out_buf;
	if (handle_scratch(h, (size_t)n) < 0) {
		handle_leave(h);
		goto out_buf;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		h->scratch_meta[i].sim_id = sim_id;
		h->scratch_meta[i].time_step = time_step;
	}
	struct put_batch_ctx x = {h->c, data.buf, (size_t)stride, (size_t)n, 0, h->scratch_meta};
	/* The exporter cannot move or free the buffer while we hold the view. */
	int r = put_batch_attempt(&x, 0);
	if (r == -EAGAIN && timeout != 0)
		r = wait_sliced(put_batch_attempt, &x, timeout);
	handle_leave(h);
	if (have_ids)
		for (size_t i = 0; i < x.done; i++)
			((uint64_t *)ids.buf)[i] = h->scratch_meta[i].sample_id;
	if (x.done == 0) {
		raise_result(r);
		goto out_buf;
	}
	if (r == PYERR_SET) /* a signal handler raised after some rows: the exception wins */
		goto out_buf;
	res = PyLong_FromSize_t(x.done);
out_buf:
	if (have_ids)
		PyBuffer_Release(&ids);
	PyBuffer_Release(&data);
	return res;
}

/*
 * waiting_for_room() -> n
 * How many live attachments wait for room to put (cistern_procs_get()). A
 * reader that holds samples while it waits for more asks it when it gets
 * nothing: under FIFO a producer waits for the slots in ring order, so a
 * held sample can be the one it waits for.
 */
static PyObject *Handle_waiting_for_room(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (handle_enter(h) < 0)
		return NULL;
	struct cistern_proc_info small[64], *info = small;
	size_t cap = 64;
	int r;
	for (;;) {
		r = cistern_procs_get(h->c, info, cap);
		if (r < 0 || (size_t)r <= cap)
			break;
		/* More entries than room: ask again with room for them all. */
		cap = (size_t)r;
		struct cistern_proc_info *more = PyMem_Realloc(info == small ? NULL : info,
							       cap * sizeof(*info));
		if (!more) {
			if (info != small)
				PyMem_Free(info);
			handle_leave(h);
			return PyErr_NoMemory();
		}
		info = more;
	}
	handle_leave(h);
	long n = 0;
	for (int i = 0; i < r; i++)
		n += info[i].alive && info[i].waiting == 2;
	if (info != small)
		PyMem_Free(info);
	if (r < 0)
		return raise_result(r);
	return PyLong_FromLong(n);
}

static PyObject *Handle_close_reception(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (handle_enter(h) < 0)
		return NULL;
	int r = cistern_close_reception(h->c);
	handle_leave(h);
	if (r < 0)
		return raise_result(r);
	Py_RETURN_NONE;
}

static PyObject *Handle_producer_done(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (handle_enter(h) < 0)
		return NULL;
	int r = cistern_producer_done(h->c);
	handle_leave(h);
	if (r < 0)
		return raise_result(r);
	return PyLong_FromLong(r);
}

static int dict_set_u64(PyObject *d, const char *k, uint64_t v)
{
	PyObject *o = PyLong_FromUnsignedLongLong(v);
	if (!o)
		return -1;
	int r = PyDict_SetItemString(d, k, o);
	Py_DECREF(o);
	return r;
}

static int dict_set_f64(PyObject *d, const char *k, double v)
{
	PyObject *o = PyFloat_FromDouble(v);
	if (!o)
		return -1;
	int r = PyDict_SetItemString(d, k, o);
	Py_DECREF(o);
	return r;
}

static int dict_set_bool(PyObject *d, const char *k, bool v)
{
	return PyDict_SetItemString(d, k, v ? Py_True : Py_False);
}

/* A list of n uint64 counts. */
static PyObject *u64_list(const uint64_t *v, size_t n)
{
	PyObject *l = PyList_New((Py_ssize_t)n);
	if (!l)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		PyObject *o = PyLong_FromUnsignedLongLong(v[i]);
		if (!o) {
			Py_DECREF(l);
			return NULL;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, o);
	}
	return l;
}

/* d[k] = v, stealing the reference to v (NULL: an exception is set). */
static int dict_set_steal(PyObject *d, const char *k, PyObject *v)
{
	if (!v)
		return -1;
	int r = PyDict_SetItemString(d, k, v);
	Py_DECREF(v);
	return r;
}

/* struct cistern_stats as the dict that Handle.stats() returns. */
static PyObject *stats_dict(const struct cistern_stats *st)
{
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	if (dict_set_steal(d, "seen_hist", u64_list(st->seen_hist, CISTERN_SEEN_BUCKETS)) < 0 ||
	    dict_set_u64(d, "population", st->population) < 0 ||
	    dict_set_u64(d, "puts", st->puts) < 0 || dict_set_u64(d, "gets", st->gets) < 0 ||
	    dict_set_u64(d, "evictions", st->evictions) < 0 ||
	    dict_set_u64(d, "evicted_unseen", st->evicted_unseen) < 0 ||
	    dict_set_u64(d, "redeliveries", st->redeliveries) < 0 ||
	    dict_set_u64(d, "reclaimed", st->reclaimed) < 0 ||
	    dict_set_u64(d, "producer_waits", st->producer_waits) < 0 ||
	    dict_set_u64(d, "producer_wait_ns", st->producer_wait_ns) < 0 ||
	    dict_set_u64(d, "reader_waits", st->reader_waits) < 0 ||
	    dict_set_u64(d, "reader_wait_ns", st->reader_wait_ns) < 0 ||
	    dict_set_u64(d, "unpaired", st->unpaired) < 0 ||
	    dict_set_u64(d, "procs_attached", st->procs_attached) < 0 ||
	    dict_set_u64(d, "producers_expected", st->producers_expected) < 0 ||
	    dict_set_u64(d, "producers_done", st->producers_done) < 0 ||
	    dict_set_u64(d, "producers_died", st->producers_died) < 0 ||
	    dict_set_u64(d, "cold_slots", st->cold_slots) < 0 ||
	    dict_set_u64(d, "cold_population", st->cold_population) < 0 ||
	    dict_set_u64(d, "cold_disk_bytes", st->cold_disk_bytes) < 0 ||
	    dict_set_u64(d, "cold_spilled", st->cold_spilled) < 0 ||
	    dict_set_u64(d, "cold_reads", st->cold_reads) < 0 ||
	    dict_set_u64(d, "cold_evictions", st->cold_evictions) < 0 ||
	    dict_set_bool(d, "reception_closed", st->reception_closed) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

static PyObject *Handle_stats(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (handle_enter(h) < 0)
		return NULL;
	struct cistern_stats st;
	memset(&st, 0, sizeof(st));
	int r = cistern_stats_get(h->c, &st);
	handle_leave(h);
	if (r < 0)
		return raise_result(r);
	return stats_dict(&st);
}

/* struct cistern_config as the dict that Handle.config() returns, in create()'s words. */
static PyObject *config_dict(const struct cistern_config *cfg)
{
	const char *pname = cistern_policy_name(cfg->policy);
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	PyObject *pn = pname ? PyUnicode_FromString(pname) : PyLong_FromLong((long)cfg->policy);
	if (dict_set_steal(d, "policy", pn) < 0 || dict_set_u64(d, "slots", cfg->slot_count) < 0 ||
	    dict_set_u64(d, "slot_size", cfg->slot_size) < 0 ||
	    dict_set_u64(d, "mode", cfg->mode) < 0 ||
	    dict_set_u64(d, "watermark", cfg->watermark) < 0 ||
	    dict_set_u64(d, "pseudo_epochs", cfg->pseudo_epochs) < 0 ||
	    dict_set_u64(d, "sweep_size", cfg->sweep_size) < 0 ||
	    dict_set_u64(d, "time_steps", cfg->nb_time_steps) < 0 ||
	    dict_set_u64(d, "batch_size", cfg->batch_size) < 0 ||
	    dict_set_u64(d, "seed", cfg->seed) < 0 ||
	    dict_set_u64(d, "max_procs", cfg->max_procs) < 0 ||
	    dict_set_u64(d, "expected_producers", cfg->expected_producers) < 0 ||
	    dict_set_u64(d, "flags", cfg->flags) < 0 ||
	    dict_set_bool(d, "lossy", cfg->flags & CISTERN_LOSSY) < 0 ||
	    dict_set_bool(d, "single_producer", cfg->flags & CISTERN_SINGLE_PRODUCER) < 0 ||
	    dict_set_bool(d, "single_reader", cfg->flags & CISTERN_SINGLE_READER) < 0 ||
	    dict_set_bool(d, "dead_producer_done", cfg->flags & CISTERN_DEAD_PRODUCER_DONE) < 0 ||
	    dict_set_f64(d, "reads_per_put", cfg->reads_per_put) < 0 ||
	    dict_set_f64(d, "rate_slack", cfg->rate_slack) < 0 ||
	    dict_set_steal(d, "schema",
			   cfg->schema ? PyUnicode_FromString(cfg->schema)
				       : (Py_INCREF(Py_None), Py_None)) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

/* A schema's fields, size and canonical text as the dict Handle.schema() returns. */
static PyObject *schema_dict(const char *text, const struct cistern_field *f, int n, uint64_t size)
{
	PyObject *d = PyDict_New(), *l = PyList_New(n);
	if (!d || !l)
		goto fail;
	for (int i = 0; i < n; i++) {
		PyObject *shape = PyTuple_New((Py_ssize_t)f[i].ndim);
		PyObject *fd = PyDict_New();
		if (!shape || !fd) {
			Py_XDECREF(shape);
			Py_XDECREF(fd);
			goto fail;
		}
		PyList_SET_ITEM(l, i, fd);
		for (uint32_t k = 0; k < f[i].ndim; k++) {
			PyObject *v = PyLong_FromUnsignedLongLong(f[i].shape[k]);
			if (!v) {
				Py_DECREF(shape);
				goto fail;
			}
			PyTuple_SET_ITEM(shape, (Py_ssize_t)k, v);
		}
		if (dict_set_steal(fd, "name", PyUnicode_FromString(f[i].name)) < 0 ||
		    dict_set_steal(fd, "dtype",
				   PyUnicode_FromString(cistern_dtype_name(f[i].dtype))) < 0 ||
		    dict_set_steal(fd, "shape", shape) < 0 ||
		    dict_set_u64(fd, "offset", f[i].offset) < 0 ||
		    dict_set_u64(fd, "size", f[i].size) < 0 ||
		    dict_set_u64(fd, "itemsize", f[i].itemsize) < 0)
			goto fail;
	}
	if (dict_set_steal(d, "text", PyUnicode_FromString(text)) < 0 ||
	    dict_set_u64(d, "size", size) < 0 || PyDict_SetItemString(d, "fields", l) < 0)
		goto fail;
	Py_DECREF(l);
	return d;
fail:
	Py_XDECREF(l);
	Py_XDECREF(d);
	return NULL;
}

static PyObject *Handle_config(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (handle_enter(h) < 0)
		return NULL;
	struct cistern_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	int r = cistern_config_get(h->c, &cfg);
	handle_leave(h);
	if (r < 0)
		return raise_result(r);
	return config_dict(&cfg);
}

static PyObject *Handle_schema(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (handle_enter(h) < 0)
		return NULL;
	char text[CISTERN_SCHEMA_MAX];
	struct cistern_field *f = NULL;
	uint64_t size = 0;
	ssize_t len = cistern_schema_get(h->c, text, sizeof(text));
	int n = len > 0 ? cistern_schema_fields(h->c, NULL, 0, &size) : (int)len;
	if (n > 0) {
		f = PyMem_Calloc((size_t)n, sizeof(*f));
		if (!f) {
			handle_leave(h);
			return PyErr_NoMemory();
		}
		n = cistern_schema_fields(h->c, f, (size_t)n, &size);
	}
	handle_leave(h);
	PyObject *res;
	if (n < 0)
		res = raise_result(n);
	else if (n == 0)
		res = (Py_INCREF(Py_None), Py_None);
	else
		res = schema_dict(text, f, n, size);
	PyMem_Free(f);
	return res;
}

static PyObject *Handle_get_detached(HandleObject *h, void *Py_UNUSED(closure))
{
	return PyBool_FromLong(h->detached);
}

static PyObject *Handle_get_slot_size(HandleObject *h, void *Py_UNUSED(closure))
{
	return PyLong_FromUnsignedLongLong(h->slot_size);
}

static PyObject *Handle_get_live_samples(HandleObject *h, void *Py_UNUSED(closure))
{
	long n = 0;
	for (SampleObject *s = h->samples; s; s = s->next)
		n++;
	return PyLong_FromLong(n);
}

/* -------------------------------------------------------- Slot (reserve) */

/*
 * A reservation from cistern_reserve(): a writable buffer over the slot
 * (numpy.frombuffer(slot, ...) writes the payload in place), then commit() or
 * abort(). It holds its Handle, which defers the real detach while any Slot
 * object lives, as for Samples: a numpy view kept after the end of the
 * reservation never faults. New buffer requests on an ended reservation fail.
 */
typedef struct slot_obj {
	PyObject_HEAD HandleObject *h; /* strong reference */
	struct cistern_slot slot;
	int live;                     /* reserved, not yet committed or aborted */
	struct slot_obj *prev, *next; /* in h->slots */
} SlotObject;

static PyTypeObject SlotType;

/* Give the reservation back, if it is open and the handle can take it now. */
static void slot_do_abort(SlotObject *so)
{
	if (!so->live)
		return;
	so->live = 0;
	HandleObject *h = so->h;
	/*
	 * A handle busy in another call (the garbage collector freeing the Slot
	 * meanwhile) or inherited through fork() cannot take it: cistern_detach()
	 * gives the reservation back then, and a dead process's is reclaimed.
	 */
	if (h && h->c && !h->detached && !h->busy && h->pid == getpid())
		cistern_abort(h->c, &so->slot);
}

static void slots_abort_all(HandleObject *h)
{
	for (SlotObject *so = h->slots; so; so = so->next)
		slot_do_abort(so);
}

/* Check the reservation can be ended from here and enter its handle. 0 on success. */
static int slot_enter(SlotObject *so)
{
	if (!so->live) {
		PyErr_SetString(PyExc_ValueError, "reservation already committed or aborted");
		return -1;
	}
	return handle_enter(so->h);
}

static PyObject *Slot_commit(SlotObject *so, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"length", "sim_id", "time_step", NULL};
	Py_ssize_t len;
	struct cistern_meta meta = {0};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O&O&:commit", kwlist, &len, conv_u32,
					 &meta.sim_id, conv_u32, &meta.time_step))
		return NULL;
	if (len < 0) {
		PyErr_SetString(PyExc_ValueError, "commit: length must be >= 0");
		return NULL;
	}
	if (slot_enter(so) < 0)
		return NULL;
	int r = cistern_commit(so->h->c, &so->slot, (size_t)len, &meta);
	handle_leave(so->h);
	if (r < 0)
		return raise_result(r); /* still reserved: the caller may abort */
	so->live = 0;
	return PyLong_FromUnsignedLongLong(meta.sample_id);
}

static PyObject *Slot_abort(SlotObject *so, PyObject *Py_UNUSED(ignored))
{
	if (!so->live)
		Py_RETURN_NONE;
	if (slot_enter(so) < 0)
		return NULL;
	int r = cistern_abort(so->h->c, &so->slot);
	handle_leave(so->h);
	so->live = 0;
	if (r < 0)
		return raise_result(r);
	Py_RETURN_NONE;
}

static void Slot_dealloc(SlotObject *so)
{
	HandleObject *h = so->h;
	if (h) {
		slot_do_abort(so);
		if (so->prev)
			so->prev->next = so->next;
		else
			h->slots = so->next;
		if (so->next)
			so->next->prev = so->prev;
		handle_finish_detach(h);
		Py_DECREF(h);
	}
	PyObject_Free(so);
}

static int Slot_getbuffer(SlotObject *so, Py_buffer *view, int flags)
{
	if (!so->live) {
		PyErr_SetString(PyExc_ValueError, "reservation already committed or aborted");
		view->obj = NULL;
		return -1;
	}
	return PyBuffer_FillInfo(view, (PyObject *)so, so->slot.data, (Py_ssize_t)so->slot.capacity,
				 0, flags);
}

static PyBufferProcs Slot_as_buffer = {
	.bf_getbuffer = (getbufferproc)Slot_getbuffer,
};

static PyObject *Slot_get_live(SlotObject *so, void *Py_UNUSED(closure))
{
	return PyBool_FromLong(so->live);
}

static PyObject *Slot_get_capacity(SlotObject *so, void *Py_UNUSED(closure))
{
	return PyLong_FromSize_t(so->slot.capacity);
}

static Py_ssize_t Slot_len(SlotObject *so)
{
	return (Py_ssize_t)so->slot.capacity;
}

static PySequenceMethods Slot_as_sequence = {
	.sq_length = (lenfunc)Slot_len,
};

static PyMethodDef Slot_methods[] = {
	{"commit", (PyCFunction)(void (*)(void))Slot_commit, METH_VARARGS | METH_KEYWORDS,
	 "commit($self, /, length, sim_id=0, time_step=0)\n--\n\n"
	 "Publish the first `length` bytes of the slot as a sample (cistern_commit());\n"
	 "returns its sample id. On ValueError (too long, sim_id or time_step out of\n"
	 "the policy's bounds) the slot stays reserved."},
	{"abort", (PyCFunction)Slot_abort, METH_NOARGS,
	 "abort($self, /)\n--\n\n"
	 "Give the slot back unpublished (cistern_abort()): that sample never existed.\n"
	 "Does nothing once the reservation has ended."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef Slot_getset[] = {
	{"live", (getter)Slot_get_live, NULL, "reserved and not yet committed or aborted", NULL},
	{"capacity", (getter)Slot_get_capacity, NULL, "bytes the slot can hold (the slot_size)",
	 NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SlotType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cistern._cistern.Slot",
	.tp_basicsize = sizeof(SlotObject),
	.tp_dealloc = (destructor)Slot_dealloc,
	.tp_as_sequence = &Slot_as_sequence,
	.tp_as_buffer = &Slot_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A reserved slot: a writable buffer of `capacity` bytes until commit() or "
		  "abort();\n"
		  "dropped while still reserved, it is aborted.",
	.tp_methods = Slot_methods,
	.tp_getset = Slot_getset,
};

struct reserve_ctx {
	struct cistern *c;
	struct cistern_slot *slot;
};

static int reserve_attempt(void *p, int t)
{
	struct reserve_ctx *x = p;
	return cistern_reserve(x->c, x->slot, t);
}

static PyObject *Handle_reserve(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout_ms", NULL};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:reserve", kwlist, conv_timeout, &timeout))
		return NULL;
	SlotObject *so = PyObject_New(SlotObject, &SlotType);
	if (!so)
		return NULL;
	so->h = NULL;
	so->live = 0;
	so->prev = so->next = NULL;
	memset(&so->slot, 0, sizeof(so->slot));
	if (handle_enter(h) < 0) {
		Py_DECREF(so);
		return NULL;
	}
	struct reserve_ctx x = {h->c, &so->slot};
	int r = wait_sliced(reserve_attempt, &x, timeout);
	handle_leave(h);
	if (r < 0) {
		Py_DECREF(so);
		return raise_result(r);
	}
	Py_INCREF(h);
	so->h = h;
	so->live = 1;
	so->next = h->slots;
	if (h->slots)
		h->slots->prev = so;
	h->slots = so;
	return (PyObject *)so;
}

/* -------------------------------------------- inspection: occupancy, procs */

static PyObject *Handle_occupancy(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (handle_enter(h) < 0)
		return NULL;
	struct cistern_occupancy occ;
	memset(&occ, 0, sizeof(occ));
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_occupancy_get(h->c, &occ);
	Py_END_ALLOW_THREADS handle_leave(h);
	if (r < 0)
		return raise_result(r);
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	if (dict_set_steal(d, "slots", u64_list(occ.slots, CISTERN_SLOT_CLASSES)) < 0 ||
	    dict_set_u64(d, "pinned", occ.pinned) < 0 || dict_set_u64(d, "held", occ.held) < 0 ||
	    dict_set_u64(d, "held_bytes", occ.held_bytes) < 0 ||
	    dict_set_steal(d, "held_seen_hist",
			   u64_list(occ.held_seen_hist, CISTERN_SEEN_BUCKETS)) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

static PyObject *proc_dict(const struct cistern_proc_info *p)
{
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	/* The kernel's comm is any bytes: undecodable ones become U+FFFD. */
	if (dict_set_u64(d, "index", p->index) < 0 || dict_set_u64(d, "pid", p->pid) < 0 ||
	    dict_set_u64(d, "uid", p->uid) < 0 || dict_set_u64(d, "role", p->role) < 0 ||
	    dict_set_bool(d, "alive", p->alive) < 0 || dict_set_u64(d, "waiting", p->waiting) < 0 ||
	    dict_set_u64(d, "attached_ns", p->attached_ns) < 0 ||
	    dict_set_u64(d, "puts", p->puts) < 0 || dict_set_u64(d, "gets", p->gets) < 0 ||
	    dict_set_steal(d, "comm",
			   PyUnicode_DecodeUTF8(p->comm,
						(Py_ssize_t)strnlen(p->comm, sizeof(p->comm)),
						"replace")) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

static PyObject *Handle_procs(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (handle_enter(h) < 0)
		return NULL;
	struct cistern_proc_info *v = NULL;
	size_t cap = 16;
	int r;
	for (;;) {
		struct cistern_proc_info *nv = PyMem_Realloc(v, cap * sizeof(*v));
		if (!nv) {
			handle_leave(h);
			PyMem_Free(v);
			return PyErr_NoMemory();
		}
		v = nv;
		Py_BEGIN_ALLOW_THREADS r = cistern_procs_get(h->c, v, cap);
		Py_END_ALLOW_THREADS if (r < 0 || (size_t)r <= cap) break;
		cap = (size_t)r; /* more entries than room: ask again with room for all */
	}
	handle_leave(h);
	PyObject *l = r < 0 ? raise_result(r) : PyList_New(r);
	for (int i = 0; l && i < r; i++) {
		PyObject *d = proc_dict(&v[i]);
		if (!d)
			Py_CLEAR(l);
		else
			PyList_SET_ITEM(l, i, d);
	}
	PyMem_Free(v);
	return l;
}

static PyMethodDef Handle_methods[] = {
	{"put", (PyCFunction)(void (*)(void))Handle_put, METH_VARARGS | METH_KEYWORDS,
	 "put($self, /, data, sim_id=0, time_step=0, timeout_ms=-1)\n--\n\n"
	 "Copy the bytes of a C-contiguous buffer in as one sample (cistern_put());\n"
	 "returns its sample id."},
	{"put_batch", (PyCFunction)(void (*)(void))Handle_put_batch, METH_VARARGS | METH_KEYWORDS,
	 "put_batch($self, /, data, item_size, count, metas, timeout_ms=-1)\n--\n\n"
	 "Put `count` samples of item_size bytes each, row i of `data` at i * item_size\n"
	 "(cistern_put_batch()). `metas` is a writable buffer of count * 3 uint64: sim_id\n"
	 "and time_step are read from columns 1 and 2, the sample id written to column 0.\n"
	 "Returns how many were put (fewer only when the wait ended after the first)."},
	{"reserve", (PyCFunction)(void (*)(void))Handle_reserve, METH_VARARGS | METH_KEYWORDS,
	 "reserve($self, /, timeout_ms=-1)\n--\n\n"
	 "Reserve a slot to write in place (cistern_reserve()), waiting for room as put()\n"
	 "does; returns a Slot, a writable buffer until its commit() or abort()."},
	{"get", (PyCFunction)(void (*)(void))Handle_get, METH_VARARGS | METH_KEYWORDS,
	 "get($self, /, timeout_ms=-1)\n--\n\n"
	 "Copy one sample out: (payload bytes, (sample_id, sim_id, time_step))."},
	{"get_many", (PyCFunction)(void (*)(void))Handle_get_many, METH_VARARGS | METH_KEYWORDS,
	 "get_many($self, /, out, item_size, count, timeout_ms=-1, metas=None, skip=False)\n"
	 "--\n\n"
	 "Gather up to `count` successive samples of exactly item_size bytes into the\n"
	 "writable buffer `out` (row i at i * item_size), metadata into `metas` (count * 3\n"
	 "uint64) if given. Returns the rows filled; a sample of another size is handed\n"
	 "back unread and raises ValueError, or with skip is read and dropped."},
	{"acquire", (PyCFunction)(void (*)(void))Handle_acquire, METH_VARARGS | METH_KEYWORDS,
	 "acquire($self, /, timeout_ms=-1)\n--\n\n"
	 "Acquire one sample to read in place (cistern_acquire()); returns a Sample."},
	{"acquire_pair", (PyCFunction)(void (*)(void))Handle_acquire_pair,
	 METH_VARARGS | METH_KEYWORDS,
	 "acquire_pair($self, /, timeout_ms=-1)\n--\n\n"
	 "Acquire a pair (x_t, x_t+1) of one simulation (cistern_acquire_pair());\n"
	 "returns a Sample of kind 'pair'."},
	{"acquire_batch", (PyCFunction)(void (*)(void))Handle_acquire_batch,
	 METH_VARARGS | METH_KEYWORDS,
	 "acquire_batch($self, /, n=0, timeout_ms=-1)\n--\n\n"
	 "Acquire n distinct samples drawn together (cistern_acquire_batch(); n 0 = the\n"
	 "segment's batch_size); returns a Sample of kind 'batch'."},
	{"get_batch", (PyCFunction)(void (*)(void))Handle_get_batch, METH_VARARGS | METH_KEYWORDS,
	 "get_batch($self, /, out, item_size, n, timeout_ms=-1, metas=None, skip=False)\n"
	 "--\n\n"
	 "Acquire a batch, copy its samples into `out` (row i at i * item_size) and\n"
	 "metadata into `metas` if given, release it; returns the rows filled. A member\n"
	 "of another size sends the whole batch back unread and raises ValueError; with\n"
	 "skip, the members of another size are read and dropped, the others returned."},
	{"put_many", (PyCFunction)(void (*)(void))Handle_put_many, METH_FASTCALL,
	 "put_many($self, data, stride, n, sim_id=0, time_step=0, timeout_ms=-1, ids=None, "
	 "/)\n--\n\n"
	 "Put n samples of stride bytes each from data (sample i at offset i * stride), in\n"
	 "order, all with this sim_id and time_step, with cistern_put_batch(), waiting for\n"
	 "room as put() does; ids (n uint64) receives their sample ids. Fewer than n only\n"
	 "when the timeout came after the first. Positional arguments only."},
	{"get_into", (PyCFunction)(void (*)(void))Handle_get_into, METH_FASTCALL,
	 "get_into($self, out, timeout_ms=-1, metas=None, /)\n--\n\n"
	 "Returns the payload length. "
	 "Copy one sample (cistern_get()) into the writable buffer out; metas, if given,\n"
	 "receives (sample_id, sim_id, time_step) as 3 uint64. A sample longer than out\n"
	 "raises ValueError and stays in the segment. Positional arguments only."},
	{"get_batch_into", (PyCFunction)(void (*)(void))Handle_get_batch_into, METH_FASTCALL,
	 "get_batch_into($self, out, stride, n, timeout_ms=-1, metas=None, lens=None, /)\n--\n\n"
	 "Returns k, the samples copied. "
	 "Up to n samples into out, sample i at offset i * stride: under FIFO and FIRO the\n"
	 "next ones there now, or the first one waited for; under the batch-capable\n"
	 "reservoirs a batch of n drawn together. metas (n * 3 uint64) and lens (n uint64)\n"
	 "receive metadata and lengths. A sample longer than stride raises ValueError and\n"
	 "stays in the segment. Positional arguments only."},
	{"acquire_many", (PyCFunction)(void (*)(void))Handle_acquire_many,
	 METH_VARARGS | METH_KEYWORDS,
	 "acquire_many($self, /, n, timeout_ms=-1, skip_size=-1)\n--\n\n"
	 "Returns a Sample of kind 'many'. "
	 "Acquire up to n samples one by one (cistern_acquire()), waiting for each, and\n"
	 "hold them until release() (each released) or unacquire() (each handed back).\n"
	 "Fewer than n only at end of data or when the timeout came after the first.\n"
	 "skip_size >= 0: a sample of another length is read and dropped, not held."},
	{"waiting_for_room", (PyCFunction)Handle_waiting_for_room, METH_NOARGS,
	 "waiting_for_room($self, /)\n--\n\n"
	 "How many live attachments wait for room to put (cistern_procs_get()): a reader\n"
	 "holding FIFO samples while it waits for more may be holding the slot one waits for."},
	{"close_reception", (PyCFunction)Handle_close_reception, METH_NOARGS,
	 "close_reception($self, /)\n--\n\n"
	 "Close reception (cistern_close_reception()): puts fail from now on, readers\n"
	 "drain and then get end of data. Idempotent."},
	{"producer_done", (PyCFunction)Handle_producer_done, METH_NOARGS,
	 "producer_done($self, /)\n--\n\n"
	 "Declare one of the expected producers done (cistern_producer_done()); returns\n"
	 "how many are still expected. The last one closes reception."},
	{"stats", (PyCFunction)Handle_stats, METH_NOARGS,
	 "stats($self, /)\n--\n\n"
	 "The segment's statistics (cistern_stats_get()) as a dict."},
	{"config", (PyCFunction)Handle_config, METH_NOARGS,
	 "config($self, /)\n--\n\n"
	 "The segment's parameters as created, defaults filled in (cistern_config_get()),\n"
	 "as a dict keyed by create()'s argument names."},
	{"schema", (PyCFunction)Handle_schema, METH_NOARGS,
	 "schema($self, /)\n--\n\n"
	 "The segment's schema (cistern_schema_get() and cistern_schema_fields()) as a\n"
	 "dict of its canonical text, sample size and fields, or None without one."},
	{"occupancy", (PyCFunction)Handle_occupancy, METH_NOARGS,
	 "occupancy($self, /)\n--\n\n"
	 "Slots counted by class (cistern_occupancy_get()) as a dict: 'slots' is a list\n"
	 "indexed by slot class (see slot_class_name())."},
	{"procs", (PyCFunction)Handle_procs, METH_NOARGS,
	 "procs($self, /)\n--\n\n"
	 "The attachment entries in use, live or dead (cistern_procs_get()), as a list of\n"
	 "dicts."},
	{"detach", (PyCFunction)Handle_detach, METH_NOARGS,
	 "detach($self, /)\n--\n\n"
	 "Detach (cistern_detach()), once the last Sample and Slot object of the handle is\n"
	 "gone; held samples are released and open reservations aborted now. Idempotent."},
	{NULL, NULL, 0, NULL},
};

static PyObject *Handle_get_skipped(HandleObject *h, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(h->skipped);
}

static PyGetSetDef Handle_getset[] = {
	{"detached", (getter)Handle_get_detached, NULL, "detach() was called", NULL},
	{"skipped", (getter)Handle_get_skipped, NULL,
	 "samples of another size that get_many() and get_batch() skipped (skip=True)", NULL},
	{"slot_size", (getter)Handle_get_slot_size, NULL, "largest payload in bytes", NULL},
	{"live_samples", (getter)Handle_get_live_samples, NULL,
	 "Sample objects of this handle still alive (held or not)", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HandleType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cistern._cistern.Handle",
	.tp_basicsize = sizeof(HandleObject),
	.tp_dealloc = (destructor)Handle_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "An attachment to a cistern segment (one thread at a time).",
	.tp_methods = Handle_methods,
	.tp_getset = Handle_getset,
};

/* ------------------------------------------------------------------ Sample */

static void sample_do_release(SampleObject *s)
{
	if (!s->held)
		return;
	s->held = 0;
	HandleObject *h = s->h;
	if (!h || !h->c || h->detached || h->pid != self_pid)
		return;
	/*
	 * Not while a call on this handle is in flight (the garbage collector freeing
	 * a sample during it, in this thread or another): the call's end does it.
	 */
	if (h->busy) {
		if (s->kind != KIND_MEMBER)
			handle_defer_release(h, s->ss, s->n);
		return;
	}
	switch (s->kind) {
	case KIND_ONE:
		cistern_release(h->c, &s->ss[0]);
		break;
	case KIND_PAIR:
		cistern_release_pair(h->c, s->ss);
		break;
	case KIND_BATCH:
		cistern_release_batch(h->c, s->ss, s->n);
		break;
	case KIND_MANY:
		for (size_t i = 0; i < s->n; i++)
			cistern_release(h->c, &s->ss[i]);
		break;
	default:
		break;
	}
}

static int sample_is_held(const SampleObject *s)
{
	return s->kind == KIND_MEMBER ? s->parent->held : s->held;
}

/* The sample whose payload this object exposes, or NULL (exception set). */
static const struct cistern_sample *sample_target(SampleObject *s)
{
	if (kind_is_group(s->kind)) {
		PyErr_SetString(PyExc_TypeError,
				"a pair or batch has no single payload: use member(i)");
		return NULL;
	}
	if (!sample_is_held(s)) {
		PyErr_SetString(PyExc_ValueError, "sample already released");
		return NULL;
	}
	return s->kind == KIND_MEMBER ? &s->parent->ss[s->index] : &s->ss[0];
}

static PyObject *Sample_release(SampleObject *s, PyObject *Py_UNUSED(ignored))
{
	if (s->kind == KIND_MEMBER) {
		PyErr_SetString(PyExc_TypeError, "release the whole pair or batch, not one member");
		return NULL;
	}
	if (s->held && s->h->busy) {
		PyErr_SetString(PyExc_RuntimeError, "segment handle is in use by another thread");
		return NULL;
	}
	sample_do_release(s);
	Py_RETURN_NONE;
}

static PyObject *Sample_unacquire(SampleObject *s, PyObject *Py_UNUSED(ignored))
{
	if (s->kind == KIND_MEMBER) {
		PyErr_SetString(PyExc_TypeError,
				"hand back the whole pair or batch, not one member");
		return NULL;
	}
	HandleObject *h = s->h;
	if (!s->held || !h || !h->c || h->detached || h->pid != self_pid) {
		PyErr_SetString(PyExc_ValueError, "sample already released");
		return NULL;
	}
	if (h->busy) {
		PyErr_SetString(PyExc_RuntimeError, "segment handle is in use by another thread");
		return NULL;
	}
	s->held = 0;
	/* Every member, so that none is left pinned or taken if one fails. */
	int first = 0;
	for (size_t i = 0; i < s->n; i++) {
		int r = cistern_unacquire(h->c, &s->ss[i]);
		if (r < 0 && first == 0)
			first = r;
	}
	if (first < 0)
		return raise_result(first);
	Py_RETURN_NONE;
}

/*
 * copy_into(out, item_size, metas=None) -> n
 * Copy every member of a pair, batch or many into `out` (member i at offset
 * i * item_size) and, if given, their metadata into metas (n * 3 uint64).
 * Every member must be exactly item_size bytes; if one is not, ValueError and
 * nothing is copied (the sample stays held: hand it back with unacquire()).
 */
static PyObject *Sample_copy_into(SampleObject *s, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"out", "item_size", "metas", NULL};
	Py_buffer out, metas;
	Py_ssize_t item;
	PyObject *metas_obj = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "w*n|O:copy_into", kwlist, &out, &item,
					 &metas_obj))
		return NULL;
	PyObject *res = NULL;
	int have_metas = 0;
	if (!kind_is_group(s->kind)) {
		PyErr_SetString(PyExc_TypeError, "copy_into() is for pairs, batches and many");
		goto out_buf;
	}
	if (!s->held) {
		PyErr_SetString(PyExc_ValueError, "sample already released");
		goto out_buf;
	}
	Py_ssize_t n = (Py_ssize_t)s->n;
	if (item <= 0 || item > PY_SSIZE_T_MAX / n || out.len < item * n) {
		PyErr_SetString(PyExc_ValueError,
				"copy_into: output buffer smaller than item_size * members");
		goto out_buf;
	}
	if (opt_writable(metas_obj, &metas, &have_metas, n * 3 * (Py_ssize_t)sizeof(uint64_t),
			 "copy_into: metas") < 0)
		goto out_buf;
	for (size_t i = 0; i < s->n; i++)
		if (s->ss[i].len != (size_t)item) {
			PyErr_Format(PyExc_ValueError,
				     "member %zu is a sample of %zu bytes where %zd were asked for",
				     i, s->ss[i].len, item);
			goto out_buf;
		}
	/* With the GIL held: no other thread can release the members meanwhile. */
	copy_rows(s->ss, s->n, out.buf, (size_t)item, have_metas ? metas.buf : NULL);
	res = PyLong_FromSsize_t(n);
out_buf:
	if (have_metas)
		PyBuffer_Release(&metas);
	PyBuffer_Release(&out);
	return res;
}

static PyObject *Sample_member(SampleObject *s, PyObject *arg)
{
	if (!kind_is_group(s->kind)) {
		PyErr_SetString(PyExc_TypeError, "member() is for pairs and batches");
		return NULL;
	}
	Py_ssize_t i = PyLong_AsSsize_t(arg);
	if (i == -1 && PyErr_Occurred())
		return NULL;
	if (i < 0 || (size_t)i >= s->n) {
		PyErr_SetString(PyExc_IndexError, "member index out of range");
		return NULL;
	}
	if (!s->held) {
		PyErr_SetString(PyExc_ValueError, "sample already released");
		return NULL;
	}
	SampleObject *m = sample_alloc(KIND_MEMBER, 1);
	if (!m)
		return NULL;
	Py_INCREF(s);
	m->parent = s;
	m->index = (size_t)i;
	return (PyObject *)m;
}

static void Sample_dealloc(SampleObject *s)
{
	HandleObject *h = s->h;
	if (s->kind == KIND_MEMBER) {
		Py_XDECREF(s->parent);
	} else if (h) {
		sample_do_release(s);
		if (s->prev)
			s->prev->next = s->next;
		else
			h->samples = s->next;
		if (s->next)
			s->next->prev = s->prev;
		handle_finish_detach(h);
		Py_DECREF(h);
	}
	if (s->ss != s->inline_)
		PyMem_Free(s->ss);
	PyObject_Free(s);
}

static int Sample_getbuffer(SampleObject *s, Py_buffer *view, int flags)
{
	const struct cistern_sample *t = sample_target(s);
	if (!t) {
		view->obj = NULL;
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)s, (void *)(uintptr_t)t->data, (Py_ssize_t)t->len,
			      1, flags) < 0)
		return -1;
	s->exports++;
	return 0;
}

static void Sample_releasebuffer(SampleObject *s, Py_buffer *Py_UNUSED(view))
{
	s->exports--;
}

static PyBufferProcs Sample_as_buffer = {
	.bf_getbuffer = (getbufferproc)Sample_getbuffer,
	.bf_releasebuffer = (releasebufferproc)Sample_releasebuffer,
};

static PyObject *Sample_get_meta(SampleObject *s, void *Py_UNUSED(closure))
{
	if (kind_is_group(s->kind)) {
		PyObject *l = PyList_New((Py_ssize_t)s->n);
		if (!l)
			return NULL;
		for (size_t i = 0; i < s->n; i++) {
			PyObject *m = meta_tuple(&s->ss[i].meta);
			if (!m) {
				Py_DECREF(l);
				return NULL;
			}
			PyList_SET_ITEM(l, (Py_ssize_t)i, m);
		}
		return l;
	}
	return meta_tuple(s->kind == KIND_MEMBER ? &s->parent->ss[s->index].meta : &s->ss[0].meta);
}

static PyObject *Sample_get_held(SampleObject *s, void *Py_UNUSED(closure))
{
	return PyBool_FromLong(sample_is_held(s));
}

static PyObject *Sample_get_kind(SampleObject *s, void *Py_UNUSED(closure))
{
	static const char *names[] = {"one", "pair", "batch", "member", "many"};
	return PyUnicode_FromString(names[s->kind]);
}

static PyObject *Sample_get_address(SampleObject *s, void *Py_UNUSED(closure))
{
	const struct cistern_sample *t = sample_target(s);
	return t ? PyLong_FromVoidPtr((void *)(uintptr_t)t->data) : NULL;
}

static PyObject *Sample_get_exports(SampleObject *s, void *Py_UNUSED(closure))
{
	return PyLong_FromSsize_t(s->exports);
}

/* Payload length for a sample or member; number of members for a pair or batch. */
static Py_ssize_t Sample_len(SampleObject *s)
{
	if (kind_is_group(s->kind))
		return (Py_ssize_t)s->n;
	return (Py_ssize_t)(s->kind == KIND_MEMBER ? s->parent->ss[s->index].len : s->ss[0].len);
}

static PySequenceMethods Sample_as_sequence = {
	.sq_length = (lenfunc)Sample_len,
};

static PyMethodDef Sample_methods[] = {
	{"release", (PyCFunction)Sample_release, METH_NOARGS,
	 "release($self, /)\n--\n\n"
	 "Release the sample, pair or batch (cistern_release() and its pair and batch\n"
	 "forms). Idempotent; payloads must not be read afterwards."},
	{"unacquire", (PyCFunction)Sample_unacquire, METH_NOARGS,
	 "unacquire($self, /)\n--\n\n"
	 "Hand the sample, pair or batch back unread, as if it had not been acquired\n"
	 "(cistern_unacquire() on every member)."},
	{"copy_into", (PyCFunction)(void (*)(void))Sample_copy_into, METH_VARARGS | METH_KEYWORDS,
	 "copy_into($self, /, out, item_size, metas=None)\n--\n\n"
	 "Returns the members copied. "
	 "Copy every member of a pair, batch or many into out (member i at offset\n"
	 "i * item_size) and their (sample_id, sim_id, time_step) into metas (n * 3\n"
	 "uint64). Every member must be exactly item_size bytes, else ValueError and\n"
	 "nothing is copied; the sample stays held either way."},
	{"member", (PyCFunction)Sample_member, METH_O,
	 "member($self, i, /)\n--\n\n"
	 "An object exporting the payload of member i of a pair or batch."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef Sample_getset[] = {
	{"meta", (getter)Sample_get_meta, NULL,
	 "(sample_id, sim_id, time_step); a list of them for a pair or batch", NULL},
	{"held", (getter)Sample_get_held, NULL, "acquired and not released", NULL},
	{"kind", (getter)Sample_get_kind, NULL, "one, pair, batch or member", NULL},
	{"address", (getter)Sample_get_address, NULL, "address of the payload in this process",
	 NULL},
	{"exports", (getter)Sample_get_exports, NULL, "live buffer exports", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SampleType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cistern._cistern.Sample",
	.tp_basicsize = sizeof(SampleObject),
	.tp_dealloc = (destructor)Sample_dealloc,
	.tp_as_sequence = &Sample_as_sequence,
	.tp_as_buffer = &Sample_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "An acquired sample; read-only buffer over the payload until release().",
	.tp_methods = Sample_methods,
	.tp_getset = Sample_getset,
};

/* ------------------------------------------------------------------ module */

/*
 * The fields of struct cistern_config that create() and config_problem() take,
 * as keywords, PyArg formats and targets, in one place so that both stay alike.
 */
#define CFG_KWLIST                                                                                 \
	"policy", "slot_size", "slot_count", "mode", "watermark", "pseudo_epochs", "sweep_size",   \
		"nb_time_steps", "batch_size", "seed", "max_procs", "expected_producers", "flags", \
		"reads_per_put", "rate_slack", "schema", "cold_slots", "cold_dir"
#define CFG_FORMAT "O&O&O&O&O&O&O&O&O&O&O&O&O&ddzO&z"
#define CFG_TARGETS(cfg, policy)                                                                   \
	conv_u32, &(policy), conv_u64, &(cfg).slot_size, conv_u64, &(cfg).slot_count, conv_u32,    \
		&(cfg).mode, conv_u64, &(cfg).watermark, conv_u32, &(cfg).pseudo_epochs, conv_u32, \
		&(cfg).sweep_size, conv_u32, &(cfg).nb_time_steps, conv_u32, &(cfg).batch_size,    \
		conv_u64, &(cfg).seed, conv_u32, &(cfg).max_procs, conv_u32,                       \
		&(cfg).expected_producers, conv_u32, &(cfg).flags, &(cfg).reads_per_put,           \
		&(cfg).rate_slack, &(cfg).schema, conv_u64, &(cfg).cold_slots, &(cfg).cold_dir

/* Store the parsed policy number in cfg; ValueError if it names no policy. */
static int cfg_set_policy(struct cistern_config *cfg, uint32_t policy)
{
	if (policy >= CISTERN_POLICY_COUNT) {
		PyErr_Format(PyExc_ValueError, "unknown policy number %u", (unsigned int)policy);
		return -1;
	}
	cfg->policy = (enum cistern_policy)policy;
	return 0;
}

static PyObject *mod_create(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", CFG_KWLIST, NULL};
	const char *name;
	struct cistern_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	uint32_t policy = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|" CFG_FORMAT ":create", kwlist, &name,
					 CFG_TARGETS(cfg, policy)))
		return NULL;
	if (check_name(name) < 0 || cfg_set_policy(&cfg, policy) < 0)
		return NULL;
	struct cistern *c = NULL;
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_create(name, &cfg, &c);
	Py_END_ALLOW_THREADS const char *why = r == -EINVAL ? cistern_config_problem(&cfg) : NULL;
	if (why) {
		PyErr_Format(PyExc_ValueError, "parameters refused: %s", why);
		return NULL;
	}
	if (r < 0)
		return raise_for_name(r, name);
	return (PyObject *)handle_new(c);
}

static PyObject *mod_config_problem(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {CFG_KWLIST, NULL};
	struct cistern_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	uint32_t policy = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|" CFG_FORMAT ":config_problem", kwlist,
					 CFG_TARGETS(cfg, policy)))
		return NULL;
	if (cfg_set_policy(&cfg, policy) < 0)
		return NULL;
	const char *why = cistern_config_problem(&cfg);
	if (!why)
		Py_RETURN_NONE;
	return PyUnicode_FromString(why);
}

/* The canonical text of parsed fields, as the library writes it into a segment. */
static void canonical(const struct cistern_field *f, int n, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = '\0';
	for (int i = 0; i < n && o < cap; i++) {
		o += (size_t)snprintf(buf + o, cap - o, "%s%s:%s[", i ? ";" : "", f[i].name,
				      cistern_dtype_name(f[i].dtype));
		for (uint32_t d = 0; d < f[i].ndim && o < cap; d++)
			o += (size_t)snprintf(buf + o, cap - o, "%s%llu", d ? "," : "",
					      (unsigned long long)f[i].shape[d]);
		if (o < cap)
			o += (size_t)snprintf(buf + o, cap - o, "]");
	}
}

static PyObject *mod_schema_parse(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *text;
	if (!PyArg_ParseTuple(args, "s:schema_parse", &text))
		return NULL;
	uint64_t size = 0;
	int n = cistern_schema_parse(text, NULL, 0, &size);
	if (n < 0) {
		/* The library's sentence, judged on its own: the largest slot holds any schema. */
		struct cistern_config cfg = {
			.slot_size = CISTERN_SLOT_SIZE_MAX, .slot_count = 1, .schema = text};
		const char *why = cistern_config_problem(&cfg);
		PyErr_SetString(PyExc_ValueError, why ? why : cistern_strerror(n));
		return NULL;
	}
	if (n == 0) {
		PyErr_SetString(PyExc_ValueError, "schema has no field");
		return NULL;
	}
	struct cistern_field *f = PyMem_Calloc((size_t)n, sizeof(*f));
	if (!f)
		return PyErr_NoMemory();
	cistern_schema_parse(text, f, (size_t)n, &size);
	char canon[CISTERN_SCHEMA_MAX + 16];
	canonical(f, n, canon, sizeof(canon));
	PyObject *res = schema_dict(canon, f, n, size);
	PyMem_Free(f);
	return res;
}

static PyObject *mod_dtype_name(PyObject *Py_UNUSED(m), PyObject *args)
{
	int t;
	if (!PyArg_ParseTuple(args, "i:dtype_name", &t))
		return NULL;
	const char *n = t >= 0 ? cistern_dtype_name((enum cistern_dtype)t) : NULL;
	if (!n) {
		PyErr_Format(PyExc_ValueError, "unknown dtype number %d", t);
		return NULL;
	}
	return PyUnicode_FromString(n);
}

/*
 * An attach refused with -EACCES for an object of another user than ours or
 * root: PermissionError naming the owner and the way to allow it. NULL with
 * nothing raised if that is not why (the segment's mode refused us).
 */
static PyObject *raise_not_owner(const char *name)
{
	char path[160];
	struct stat st;
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	if (lstat(path, &st) < 0 || st.st_uid == 0 || st.st_uid == geteuid())
		return NULL;
	char who[96];
	struct passwd *pw = getpwuid(st.st_uid);
	if (pw)
		snprintf(who, sizeof(who), "user %s (uid %u)", pw->pw_name, (unsigned)st.st_uid);
	else
		snprintf(who, sizeof(who), "uid %u", (unsigned)st.st_uid);
	PyObject *msg = PyUnicode_FromFormat(
		"segment owned by %s, not by this process's user or root: refused (anyone may "
		"create a segment's name first, to collect what is put into it); to share a "
		"segment between users on purpose, attach with any_owner=True",
		who);
	PyObject *a = msg ? Py_BuildValue("(iOs)", EACCES, msg, name) : NULL;
	if (a)
		PyErr_SetObject(PyExc_PermissionError, a);
	Py_XDECREF(a);
	Py_XDECREF(msg);
	return NULL;
}

static PyObject *mod_attach(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "any_owner", "populate", "producer", NULL};
	const char *name;
	int any_owner = 0, populate = 0, producer = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ppp:attach", kwlist, &name, &any_owner,
					 &populate, &producer) ||
	    check_name(name) < 0)
		return NULL;
	struct cistern *c = NULL;
	int r;
	uint32_t flags = (any_owner ? CISTERN_ATTACH_ANY_OWNER : 0u) |
			 (populate ? CISTERN_ATTACH_POPULATE : 0u) |
			 (producer ? CISTERN_ATTACH_PRODUCER : 0u);
	Py_BEGIN_ALLOW_THREADS r = cistern_attach_flags(name, flags, &c);
	Py_END_ALLOW_THREADS if (r == -EACCES && !any_owner)
	{
		raise_not_owner(name);
		if (PyErr_Occurred())
			return NULL;
	}
	if (r < 0)
		return raise_for_name(r, name);
	return (PyObject *)handle_new(c);
}

static PyObject *mod_unlink(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *name;
	if (!PyArg_ParseTuple(args, "s:unlink", &name) || check_name(name) < 0)
		return NULL;
	int r = cistern_unlink(name);
	if (r < 0)
		return raise_for_name(r, name);
	Py_RETURN_NONE;
}

static PyObject *mod_strerror(PyObject *Py_UNUSED(m), PyObject *args)
{
	int code;
	if (!PyArg_ParseTuple(args, "i:strerror", &code))
		return NULL;
	return PyUnicode_FromString(cistern_strerror(code));
}

static PyObject *mod_policy_parse(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *s;
	if (!PyArg_ParseTuple(args, "s:policy_parse", &s))
		return NULL;
	enum cistern_policy p;
	if (cistern_policy_parse(s, &p) < 0) {
		PyErr_Format(PyExc_ValueError, "unknown policy %R", PyTuple_GET_ITEM(args, 0));
		return NULL;
	}
	return PyLong_FromLong((long)p);
}

static PyObject *mod_policy_name(PyObject *Py_UNUSED(m), PyObject *args)
{
	int p;
	if (!PyArg_ParseTuple(args, "i:policy_name", &p))
		return NULL;
	const char *n = p >= 0 ? cistern_policy_name((enum cistern_policy)p) : NULL;
	if (!n) {
		PyErr_Format(PyExc_ValueError, "unknown policy number %d", p);
		return NULL;
	}
	return PyUnicode_FromString(n);
}

static PyObject *mod_name_valid(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *s;
	if (!PyArg_ParseTuple(args, "s:name_valid", &s))
		return NULL;
	return PyLong_FromLong(cistern_name_valid(s));
}

/* ------------------------------------------ inspection, gc, dump, restore */

static PyObject *mod_open_readonly(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *name;
	if (!PyArg_ParseTuple(args, "s:open_readonly", &name) || check_name(name) < 0)
		return NULL;
	struct cistern *c = NULL;
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_open_readonly(name, &c);
	Py_END_ALLOW_THREADS if (r < 0) return raise_for_name(r, name);
	return (PyObject *)handle_new(c);
}

static PyObject *mod_slot_class_name(PyObject *Py_UNUSED(m), PyObject *args)
{
	int cls;
	if (!PyArg_ParseTuple(args, "i:slot_class_name", &cls))
		return NULL;
	const char *n = cls >= 0 ? cistern_slot_class_name((enum cistern_slot_class)cls) : NULL;
	if (!n) {
		PyErr_Format(PyExc_ValueError, "unknown slot class %d", cls);
		return NULL;
	}
	return PyUnicode_FromString(n);
}

static PyObject *segment_info_dict(const struct cistern_segment_info *si)
{
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	PyObject *cfg = Py_None;
	if (si->status == 0)
		cfg = config_dict(&si->config);
	else
		Py_INCREF(cfg);
	if (dict_set_steal(d, "name", PyUnicode_FromString(si->name)) < 0 ||
	    dict_set_steal(d, "status", PyLong_FromLong(si->status)) < 0 ||
	    dict_set_steal(d, "config", cfg) < 0 ||
	    dict_set_u64(d, "file_size", si->file_size) < 0 ||
	    dict_set_u64(d, "created_ns", si->created_ns) < 0 ||
	    dict_set_u64(d, "uid", si->uid) < 0 || dict_set_u64(d, "mode", si->mode) < 0 ||
	    dict_set_u64(d, "population", si->population) < 0 ||
	    dict_set_u64(d, "procs_live", si->procs_live) < 0 ||
	    dict_set_u64(d, "procs_dead", si->procs_dead) < 0 ||
	    dict_set_bool(d, "closed", si->closed) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

static PyObject *mod_list_segments(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
	struct cistern_segment_info *v = NULL;
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_list(&v);
	Py_END_ALLOW_THREADS if (r < 0) return raise_result(r);
	PyObject *l = PyList_New(r);
	for (int i = 0; l && i < r; i++) {
		PyObject *d = segment_info_dict(&v[i]);
		if (!d)
			Py_CLEAR(l);
		else
			PyList_SET_ITEM(l, i, d);
	}
	free(v); /* cistern_list() allocates with malloc() */
	return l;
}

static PyObject *mod_remove(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "force", "any_owner", NULL};
	const char *name;
	int force = 0, any_owner = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|pp:remove", kwlist, &name, &force,
					 &any_owner) ||
	    check_name(name) < 0)
		return NULL;
	unsigned flags = (force ? CISTERN_REMOVE_FORCE : 0) |
			 (any_owner ? CISTERN_REMOVE_ANY_OWNER : 0);
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_remove(name, flags);
	Py_END_ALLOW_THREADS if (r == -EBUSY)
	{
		PyObject *a = Py_BuildValue(
			"(iss)", EBUSY,
			"live processes are attached (force=True removes it anyway)", name);
		if (a) {
			PyErr_SetObject(PyExc_OSError, a);
			Py_DECREF(a);
		}
		return NULL;
	}
	if (r < 0)
		return raise_for_name(r, name);
	Py_RETURN_NONE;
}

static PyObject *mod_gc(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "dry_run", "any_owner", "dump_to", "discard", NULL};
	const char *name;
	const char *dir = NULL;
	int dry = 0, any_owner = 0, discard = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ppzp:gc", kwlist, &name, &dry, &any_owner,
					 &dir, &discard) ||
	    check_name(name) < 0)
		return NULL;
	unsigned flags = (dry ? CISTERN_GC_DRY_RUN : 0) | (any_owner ? CISTERN_GC_ANY_OWNER : 0) |
			 (discard ? CISTERN_GC_DISCARD : 0);
	struct cistern_gc_report rep;
	memset(&rep, 0, sizeof(rep));
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_gc_dump_to(name, dir, flags, &rep);
	Py_END_ALLOW_THREADS if (r < 0) return raise_for_name(r, name);
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	if (dict_set_u64(d, "dead_procs", rep.dead_procs) < 0 ||
	    dict_set_u64(d, "reservations", rep.reservations) < 0 ||
	    dict_set_u64(d, "redelivered", rep.redelivered) < 0 ||
	    dict_set_u64(d, "pins", rep.pins) < 0 ||
	    dict_set_u64(d, "live_procs", rep.live_procs) < 0 ||
	    dict_set_steal(d, "removed", PyLong_FromLong(rep.removed)) < 0 ||
	    dict_set_u64(d, "unread", rep.unread) < 0 ||
	    dict_set_u64(d, "dumped", rep.dumped) < 0 || dict_set_bool(d, "kept", rep.kept) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

static PyObject *dump_info_dict(const struct cistern_dump_info *di)
{
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	if (dict_set_steal(d, "name", PyUnicode_FromString(di->name)) < 0 ||
	    dict_set_steal(d, "config", config_dict(&di->config)) < 0 ||
	    dict_set_steal(d, "stats", stats_dict(&di->stats)) < 0 ||
	    dict_set_u64(d, "samples", di->samples) < 0 ||
	    dict_set_u64(d, "payload_bytes", di->payload_bytes) < 0 ||
	    dict_set_u64(d, "skipped", di->skipped) < 0 ||
	    dict_set_u64(d, "next_id", di->next_id) < 0 ||
	    dict_set_u64(d, "created_ns", di->created_ns) < 0 ||
	    dict_set_u64(d, "dumped_ns", di->dumped_ns) < 0 ||
	    dict_set_u64(d, "file_size", di->file_size) < 0 ||
	    dict_set_u64(d, "format_version", di->format_version) < 0 ||
	    dict_set_bool(d, "closed", di->closed) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

/*
 * The progress callback of dump and restore. The library calls it from the
 * calling thread, which runs without the GIL: take it for the Python call. A
 * callback that raises cannot stop the library's work, so its exception is
 * reported as unraisable (printed) and the work goes on.
 */
static void progress_call(uint64_t done, uint64_t total, void *arg)
{
	PyGILState_STATE g = PyGILState_Ensure();
	PyObject *r = PyObject_CallFunction((PyObject *)arg, "KK", (unsigned long long)done,
					    (unsigned long long)total);
	if (r)
		Py_DECREF(r);
	else
		PyErr_WriteUnraisable((PyObject *)arg);
	PyGILState_Release(g);
}

/* A progress argument: None or a callable. 0 on success. */
static int check_progress(PyObject *progress)
{
	if (progress != Py_None && !PyCallable_Check(progress)) {
		PyErr_SetString(PyExc_TypeError,
				"progress must be a callable(done, total) or None");
		return -1;
	}
	return 0;
}

/* An OSError for a file operation on `path` (a bytes object from PyUnicode_FSConverter). */
static PyObject *raise_for_path(int r, PyObject *path)
{
	if (r == -EBADMSG || r == -EPROTONOSUPPORT || r == -ENOENT || r == -EACCES || r == -EPERM ||
	    r == -EISDIR || r == -ENOTDIR || r == -ENOSPC || r == -EIO) {
		PyObject *a = Py_BuildValue("(isN)", -r, cistern_strerror(r),
					    PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path)));
		if (a) {
			PyErr_SetObject(PyExc_OSError, a);
			Py_DECREF(a);
		}
		return NULL;
	}
	return raise_result(r);
}

static PyObject *mod_dump(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "path", "progress", NULL};
	const char *name;
	PyObject *path = NULL, *progress = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "sO&|O:dump", kwlist, &name,
					 PyUnicode_FSConverter, &path, &progress))
		return NULL;
	PyObject *res = NULL;
	if (check_name(name) < 0 || check_progress(progress) < 0)
		goto out;
	struct cistern_dump_info di;
	memset(&di, 0, sizeof(di));
	int r;
	const char *p = PyBytes_AS_STRING(path);
	Py_BEGIN_ALLOW_THREADS r = cistern_dump(name, p, progress != Py_None ? progress_call : NULL,
						progress, &di);
	Py_END_ALLOW_THREADS if (r == -ENOENT || r == -EACCES || r == -EPROTO ||
				 r == -EPROTONOSUPPORT || r == -EAGAIN)
		res = raise_for_name(r, name); /* the errors of cistern_open_readonly() */
	else if (r < 0) res = raise_for_path(r, path);
	else res = dump_info_dict(&di);
out:
	Py_DECREF(path);
	return res;
}

static PyObject *mod_restore(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"path", "name", "progress", NULL};
	const char *name = NULL;
	PyObject *path = NULL, *progress = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|zO:restore", kwlist, PyUnicode_FSConverter,
					 &path, &name, &progress))
		return NULL;
	PyObject *res = NULL;
	if ((name && check_name(name) < 0) || check_progress(progress) < 0)
		goto out;
	struct cistern_dump_info di;
	memset(&di, 0, sizeof(di));
	int r;
	const char *p = PyBytes_AS_STRING(path);
	Py_BEGIN_ALLOW_THREADS r = cistern_restore(
		p, name, progress != Py_None ? progress_call : NULL, progress, &di);
	Py_END_ALLOW_THREADS if (r == -EEXIST) res = raise_for_name(r, name ? name : di.name);
	else if (r < 0) res = raise_for_path(r, path);
	else res = dump_info_dict(&di);
out:
	Py_DECREF(path);
	return res;
}

static PyObject *mod_dump_verify(PyObject *Py_UNUSED(m), PyObject *args)
{
	PyObject *path = NULL;
	if (!PyArg_ParseTuple(args, "O&:dump_verify", PyUnicode_FSConverter, &path))
		return NULL;
	struct cistern_dump_info di;
	memset(&di, 0, sizeof(di));
	int r;
	const char *p = PyBytes_AS_STRING(path);
	Py_BEGIN_ALLOW_THREADS r = cistern_dump_verify(p, &di);
	Py_END_ALLOW_THREADS PyObject *res = r < 0 ? raise_for_path(r, path) : dump_info_dict(&di);
	Py_DECREF(path);
	return res;
}

/* ------------------------------------------------------------------ Remote */

/*
 * Remote: one connection of a remote producer to a server (cistern_remote_*(),
 * docs/REMOTE.md). Like a Handle it belongs to one thread at a time and to the
 * process that made it; blocking calls run without the GIL in slices.
 */
typedef struct {
	PyObject_HEAD struct cistern_remote *r; /* NULL once closed */
	pid_t pid;
	int busy;
	struct cistern_meta *scratch; /* put_batch's metas, reused */
	size_t scratch_cap;
} RemoteObject;

static PyTypeObject RemoteType;

static int remote_enter(RemoteObject *ro)
{
	if (!ro->r) {
		PyErr_SetString(PyExc_ValueError, "remote connection is closed");
		return -1;
	}
	if (ro->pid != self_pid) {
		PyErr_SetString(PyExc_RuntimeError, "remote connection was made by another "
						    "process (fork): connect again");
		return -1;
	}
	if (ro->busy) {
		PyErr_SetString(PyExc_RuntimeError, "remote connection is in use by another "
						    "thread: connect once per thread");
		return -1;
	}
	ro->busy = 1;
	return 0;
}

/*
 * A wait that ended without a result: the remote calls say -EAGAIN or
 * -ETIMEDOUT for it, wait_sliced() goes on only after -ETIMEDOUT.
 */
static int remote_wait_result(int r, int t)
{
	return r == -EAGAIN && t != 0 ? -ETIMEDOUT : r;
}

struct rput_ctx {
	struct cistern_remote *r;
	const void *buf;
	size_t len;
	struct cistern_meta meta;
};

static int rput_attempt(void *p, int t)
{
	struct rput_ctx *x = p;
	return remote_wait_result(cistern_remote_put(x->r, x->buf, x->len, &x->meta, t), t);
}

static PyObject *Remote_put(RemoteObject *ro, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data", "sim_id", "time_step", "timeout_ms", NULL};
	Py_buffer view;
	struct rput_ctx x = {0};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|O&O&O&:put", kwlist, &view, conv_u32,
					 &x.meta.sim_id, conv_u32, &x.meta.time_step, conv_timeout,
					 &timeout))
		return NULL;
	if (remote_enter(ro) < 0) {
		PyBuffer_Release(&view);
		return NULL;
	}
	x.r = ro->r;
	x.buf = view.buf;
	x.len = (size_t)view.len;
	/* The exporter cannot move or free the buffer while we hold the view. */
	int r = wait_sliced(rput_attempt, &x, timeout);
	ro->busy = 0;
	PyBuffer_Release(&view);
	if (r < 0)
		return raise_result(r);
	Py_RETURN_NONE;
}

struct rbatch_ctx {
	struct cistern_remote *r;
	const char *buf;
	size_t item, count, done;
	const struct cistern_meta *m;
};

static int rbatch_attempt(void *p, int t)
{
	struct rbatch_ctx *x = p;
	while (x->done < x->count) {
		size_t n = x->count - x->done;
		int r = cistern_remote_put_batch(x->r, x->buf + x->done * x->item, x->item,
						 n < INT_MAX ? n : INT_MAX, NULL, x->m + x->done,
						 t);
		if (r < 0)
			return remote_wait_result(r, t);
		x->done += (size_t)r;
	}
	return 0;
}

static PyObject *Remote_put_batch(RemoteObject *ro, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data", "item_size", "count", "metas", "timeout_ms", NULL};
	Py_buffer data, metas;
	Py_ssize_t item, count;
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*nny*|O&:put_batch", kwlist, &data, &item,
					 &count, &metas, conv_timeout, &timeout))
		return NULL;
	PyObject *res = NULL;
	if (batch_shape_ok(&data, item, count, &metas) < 0)
		goto out;
	if (remote_enter(ro) < 0)
		goto out;
	if ((size_t)count > ro->scratch_cap) {
		struct cistern_meta *m = PyMem_Realloc(ro->scratch, (size_t)count * sizeof(*m));
		if (!m) {
			ro->busy = 0;
			PyErr_NoMemory();
			goto out;
		}
		ro->scratch = m;
		ro->scratch_cap = (size_t)count;
	}
	if (batch_metas(&metas, count, ro->scratch) < 0) {
		ro->busy = 0;
		goto out;
	}
	struct rbatch_ctx x = {ro->r, data.buf, (size_t)item, (size_t)count, 0, ro->scratch};
	/* The exporter cannot move or free the buffer while we hold the view. */
	int r = rbatch_attempt(&x, 0);
	if (r == -EAGAIN && timeout != 0)
		r = wait_sliced(rbatch_attempt, &x, timeout);
	ro->busy = 0;
	if (x.done == 0) {
		raise_result(r);
		goto out;
	}
	if (r == PYERR_SET) /* a signal handler raised after some rows: the exception wins */
		goto out;
	res = PyLong_FromSize_t(x.done);
out:
	PyBuffer_Release(&data);
	PyBuffer_Release(&metas);
	return res;
}

static int rflush_attempt(void *p, int t)
{
	return remote_wait_result(cistern_remote_flush(p, t), t);
}

static int rdone_attempt(void *p, int t)
{
	return remote_wait_result(cistern_remote_producer_done(p, t), t);
}

static PyObject *remote_wait_call(RemoteObject *ro, PyObject *args, PyObject *kw, attempt_fn fn,
				  const char *fmt)
{
	static char *kwlist[] = {"timeout_ms", NULL};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, conv_timeout, &timeout))
		return NULL;
	if (remote_enter(ro) < 0)
		return NULL;
	int r = wait_sliced(fn, ro->r, timeout);
	ro->busy = 0;
	if (r < 0)
		return raise_result(r);
	Py_RETURN_NONE;
}

static PyObject *Remote_flush(RemoteObject *ro, PyObject *args, PyObject *kw)
{
	return remote_wait_call(ro, args, kw, rflush_attempt, "|O&:flush");
}

static PyObject *Remote_producer_done(RemoteObject *ro, PyObject *args, PyObject *kw)
{
	return remote_wait_call(ro, args, kw, rdone_attempt, "|O&:producer_done");
}

static PyObject *Remote_info(RemoteObject *ro, PyObject *Py_UNUSED(ignored))
{
	if (remote_enter(ro) < 0)
		return NULL;
	struct cistern_remote_info in;
	int r = cistern_remote_info_get(ro->r, &in);
	ro->busy = 0;
	if (r < 0)
		return raise_result(r);
	return Py_BuildValue("{s:K,s:K,s:I,s:I,s:K,s:K,s:K}", "slot_size",
			     (unsigned long long)in.slot_size, "producer_id",
			     (unsigned long long)in.producer_id, "ranks", in.ranks, "window",
			     in.window, "sent", (unsigned long long)in.sent, "acked",
			     (unsigned long long)in.acked, "failed", (unsigned long long)in.failed);
}

static PyObject *Remote_schema(RemoteObject *ro, PyObject *Py_UNUSED(ignored))
{
	if (remote_enter(ro) < 0)
		return NULL;
	char buf[CISTERN_SCHEMA_MAX + 16];
	ssize_t n = cistern_remote_schema_get(ro->r, buf, sizeof buf);
	ro->busy = 0;
	if (n < 0)
		return raise_result((int)n);
	if (n == 0)
		Py_RETURN_NONE;
	return PyUnicode_DecodeUTF8(buf, n, "strict");
}

static PyObject *Remote_close(RemoteObject *ro, PyObject *Py_UNUSED(ignored))
{
	if (!ro->r)
		Py_RETURN_NONE;
	if (ro->busy) {
		PyErr_SetString(PyExc_RuntimeError,
				"remote connection is in use by another thread");
		return NULL;
	}
	struct cistern_remote *r = ro->r;
	ro->r = NULL;
	/*
	 * A forked child leaves its copy alone: the ZeroMQ context it shares
	 * with the parent must not be touched after fork(), and the parent's
	 * connection goes on.
	 */
	if (ro->pid != self_pid)
		Py_RETURN_NONE;
	Py_BEGIN_ALLOW_THREADS cistern_remote_close(r);
	Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static void Remote_dealloc(RemoteObject *ro)
{
	/* Not in a forked child: see Remote_close(). */
	if (ro->r && ro->pid == self_pid)
		cistern_remote_close(ro->r);
	PyMem_Free(ro->scratch);
	PyObject_Free(ro);
}

static PyObject *Remote_get_closed(RemoteObject *ro, void *Py_UNUSED(closure))
{
	return PyBool_FromLong(ro->r == NULL);
}

static PyMethodDef Remote_methods[] = {
	{"put", (PyCFunction)(void (*)(void))Remote_put, METH_VARARGS | METH_KEYWORDS,
	 "put($self, /, data, sim_id=0, time_step=0, timeout_ms=-1)\n--\n\n"
	 "Send the bytes of a C-contiguous buffer as one sample (cistern_remote_put()),\n"
	 "waiting while the window of samples in flight is full."},
	{"put_batch", (PyCFunction)(void (*)(void))Remote_put_batch, METH_VARARGS | METH_KEYWORDS,
	 "put_batch($self, /, data, item_size, count, metas, timeout_ms=-1)\n--\n\n"
	 "Send `count` samples of item_size bytes each, row i of `data` at i * item_size\n"
	 "(cistern_remote_put_batch()). `metas` is a buffer of count * 3 uint64 whose\n"
	 "columns 1 and 2 are each row's sim_id and time_step. Returns how many were sent\n"
	 "(fewer only when the wait ended after the first)."},
	{"flush", (PyCFunction)(void (*)(void))Remote_flush, METH_VARARGS | METH_KEYWORDS,
	 "flush($self, /, timeout_ms=-1)\n--\n\n"
	 "Wait until every sample sent is acknowledged or failed (cistern_remote_flush())."},
	{"producer_done", (PyCFunction)(void (*)(void))Remote_producer_done,
	 METH_VARARGS | METH_KEYWORDS,
	 "producer_done($self, /, timeout_ms=-1)\n--\n\n"
	 "Flush, then declare this producer done (cistern_remote_producer_done())."},
	{"info", (PyCFunction)Remote_info, METH_NOARGS,
	 "info($self, /)\n--\n\n"
	 "The server's parameters and this connection's counts (cistern_remote_info_get()),\n"
	 "as a dict."},
	{"schema", (PyCFunction)Remote_schema, METH_NOARGS,
	 "schema($self, /)\n--\n\n"
	 "The text of the server's segments' schema (cistern_remote_schema_get()), or None."},
	{"close", (PyCFunction)Remote_close, METH_NOARGS,
	 "close($self, /)\n--\n\n"
	 "Say goodbye and free the connection (cistern_remote_close()); again is a no-op."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef Remote_getset[] = {
	{"closed", (getter)Remote_get_closed, NULL, "close() was called", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RemoteType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cistern._cistern.Remote",
	.tp_basicsize = sizeof(RemoteObject),
	.tp_dealloc = (destructor)Remote_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A remote producer's connection to a server (one thread at a time).",
	.tp_methods = Remote_methods,
	.tp_getset = Remote_getset,
};

struct rconnect_ctx {
	const char *endpoint;
	struct cistern_remote_opts opts;
	struct cistern_remote *r;
};

static PyObject *mod_remote_connect(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"endpoint",
				 "server_key",
				 "public_key",
				 "secret_key",
				 "connect_timeout_ms",
				 "heartbeat_ivl_ms",
				 "heartbeat_timeout_ms",
				 "window",
				 "linger_us",
				 NULL};
	struct rconnect_ctx x = {0};
	x.opts.size = sizeof x.opts;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzziiiO&i:remote_connect", kwlist,
					 &x.endpoint, &x.opts.server_key, &x.opts.public_key,
					 &x.opts.secret_key, &x.opts.connect_timeout_ms,
					 &x.opts.heartbeat_ivl_ms, &x.opts.heartbeat_timeout_ms,
					 conv_u32, &x.opts.window, &x.opts.linger_us))
		return NULL;
	RemoteObject *ro = PyObject_New(RemoteObject, &RemoteType);
	if (!ro)
		return NULL;
	ro->r = NULL;
	ro->pid = self_pid;
	ro->busy = 0;
	ro->scratch = NULL;
	ro->scratch_cap = 0;
	int r;
	/* The strings belong to args and kw, which live until this call returns. */
	Py_BEGIN_ALLOW_THREADS r = cistern_remote_connect(x.endpoint, &x.opts, &x.r);
	Py_END_ALLOW_THREADS if (r < 0)
	{
		Py_DECREF(ro);
		if (r == -ETIMEDOUT) {
			PyErr_Format(PyExc_TimeoutError,
				     "no answer from a cistern server at %s (not running, or "
				     "it refused this client's key)",
				     x.endpoint);
			return NULL;
		}
		return raise_result(r);
	}
	ro->r = x.r;
	return (PyObject *)ro;
}

static PyObject *mod_remote_keygen(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
	char pub[CISTERN_KEY_LEN + 1], sec[CISTERN_KEY_LEN + 1];
	int r = cistern_remote_keygen(pub, sec);
	if (r < 0)
		return raise_result(r);
	return Py_BuildValue("(ss)", pub, sec);
}

static PyMethodDef module_methods[] = {
	{"create", (PyCFunction)(void (*)(void))mod_create, METH_VARARGS | METH_KEYWORDS,
	 "create(name, policy=0, slot_size=0, slot_count=0, mode=0, watermark=0, "
	 "pseudo_epochs=0, sweep_size=0, nb_time_steps=0, batch_size=0, seed=0, max_procs=0, "
	 "expected_producers=0, flags=0, reads_per_put=0.0, rate_slack=0.0, schema=None, "
	 "cold_slots=0, cold_dir=None)\n--\n\n"
	 "Create segment `name` and attach to it (cistern_create()); the keywords are the\n"
	 "fields of struct cistern_config. Returns a Handle."},
	{"config_problem", (PyCFunction)(void (*)(void))mod_config_problem,
	 METH_VARARGS | METH_KEYWORDS,
	 "config_problem(policy=0, slot_size=0, slot_count=0, mode=0, watermark=0, "
	 "pseudo_epochs=0, sweep_size=0, nb_time_steps=0, batch_size=0, seed=0, max_procs=0, "
	 "expected_producers=0, flags=0, reads_per_put=0.0, rate_slack=0.0, schema=None, "
	 "cold_slots=0, cold_dir=None)\n--\n\n"
	 "Why create() would refuse these parameters (cistern_config_problem()), or None."},
	{"remote_connect", (PyCFunction)(void (*)(void))mod_remote_connect,
	 METH_VARARGS | METH_KEYWORDS,
	 "remote_connect(endpoint, server_key=None, public_key=None, secret_key=None, "
	 "connect_timeout_ms=0, heartbeat_ivl_ms=0, heartbeat_timeout_ms=0, window=0, "
	 "linger_us=0)\n--\n\n"
	 "Connect a remote producer to a cistern server (cistern_remote_connect()); the\n"
	 "keywords are the fields of struct cistern_remote_opts. Returns a Remote."},
	{"remote_keygen", mod_remote_keygen, METH_NOARGS,
	 "remote_keygen()\n--\n\n"
	 "A fresh CurveZMQ key pair (cistern_remote_keygen()): (public, secret), Z85 text."},
	{"schema_parse", mod_schema_parse, METH_VARARGS,
	 "schema_parse(text, /)\n--\n\n"
	 "Parse and lay out a schema's text (cistern_schema_parse()): a dict of its\n"
	 "canonical text, sample size and fields. ValueError, naming the field that is\n"
	 "wrong, for a bad text (or one with no field)."},
	{"dtype_name", mod_dtype_name, METH_VARARGS,
	 "dtype_name(number, /)\n--\n\n"
	 "The name of dtype `number` (cistern_dtype_name()), as schemas write it."},
	{"attach", (PyCFunction)(void (*)(void))mod_attach, METH_VARARGS | METH_KEYWORDS,
	 "attach(name, any_owner=False, populate=False, producer=False)\n--\n\n"
	 "Attach to the existing segment `name` (cistern_attach_flags()); returns a Handle.\n"
	 "A segment owned by another user than ours or root raises PermissionError\n"
	 "unless any_owner=True (CISTERN_ATTACH_ANY_OWNER). populate=True maps every\n"
	 "page now (CISTERN_ATTACH_POPULATE); producer=True counts the process as one\n"
	 "of the expected producers from the attach on (CISTERN_ATTACH_PRODUCER)."},
	{"open_readonly", mod_open_readonly, METH_VARARGS,
	 "open_readonly(name, /)\n--\n\n"
	 "Open segment `name` for inspection only (cistern_open_readonly()): a Handle on\n"
	 "which config(), stats(), occupancy() and procs() work and calls that move\n"
	 "samples raise OSError(EBADF). It takes no attachment entry."},
	{"unlink", mod_unlink, METH_VARARGS,
	 "unlink(name, /)\n--\n\n"
	 "Remove a segment's name (cistern_unlink()); attached processes keep working."},
	{"remove", (PyCFunction)(void (*)(void))mod_remove, METH_VARARGS | METH_KEYWORDS,
	 "remove(name, force=False, any_owner=False)\n--\n\n"
	 "Remove a segment's name, refusing with OSError(EBUSY) while live processes are\n"
	 "attached (cistern_remove()); force=True removes it anyway, and removes damaged\n"
	 "or foreign objects named cistern.NAME too."},
	{"gc", (PyCFunction)(void (*)(void))mod_gc, METH_VARARGS | METH_KEYWORDS,
	 "gc(name, dry_run=False, any_owner=False, dump_to=None, discard=False)\n--\n\n"
	 "Collect one segment's garbage (cistern_gc_dump_to()): reclaim what dead processes\n"
	 "left and remove the segment if it is garbage. A stale segment holding unread\n"
	 "samples is kept, unless dump_to (a directory) dumps it first or discard=True.\n"
	 "Returns the report as a dict."},
	{"list_segments", mod_list_segments, METH_NOARGS,
	 "list_segments()\n--\n\n"
	 "Every cistern segment on the machine, sorted by name (cistern_list()), as a list\n"
	 "of dicts; 'status' is 0 or why the segment cannot be read (a negative errno)."},
	{"dump", (PyCFunction)(void (*)(void))mod_dump, METH_VARARGS | METH_KEYWORDS,
	 "dump(name, path, progress=None)\n--\n\n"
	 "Write a snapshot of segment `name` to `path` (cistern_dump()), without\n"
	 "disturbing it. progress(done, total) is called now and then. Returns what the\n"
	 "dump holds, as a dict."},
	{"restore", (PyCFunction)(void (*)(void))mod_restore, METH_VARARGS | METH_KEYWORDS,
	 "restore(path, name=None, progress=None)\n--\n\n"
	 "Check the dump at `path` whole and restore it as segment `name` (None: the name\n"
	 "in the dump), which must not exist (cistern_restore()). Returns what the dump\n"
	 "holds, as a dict."},
	{"dump_verify", mod_dump_verify, METH_VARARGS,
	 "dump_verify(path, /)\n--\n\n"
	 "Read and check the dump at `path` as restore() would, restoring nothing\n"
	 "(cistern_dump_verify()). Returns what it holds, as a dict."},
	{"strerror", mod_strerror, METH_VARARGS,
	 "strerror(code, /)\n--\n\n"
	 "A sentence for a result code: 0 or a negative errno (cistern_strerror())."},
	{"policy_parse", mod_policy_parse, METH_VARARGS,
	 "policy_parse(name, /)\n--\n\n"
	 "The number of the policy named `name` (cistern_policy_parse())."},
	{"policy_name", mod_policy_name, METH_VARARGS,
	 "policy_name(number, /)\n--\n\n"
	 "The name of policy `number` (cistern_policy_name())."},
	{"slot_class_name", mod_slot_class_name, METH_VARARGS,
	 "slot_class_name(number, /)\n--\n\n"
	 "The name of slot class `number` (cistern_slot_class_name()), as occupancy()\n"
	 "counts them."},
	{"name_valid", mod_name_valid, METH_VARARGS,
	 "name_valid(name, /)\n--\n\n"
	 "0 if `name` is a valid segment name, else a negative errno\n"
	 "(cistern_name_valid())."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "_cistern",
	.m_doc = "Low-level binding of libcistern; use the `cistern` package.",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__cistern(void);

PyMODINIT_FUNC PyInit__cistern(void)
{
	if (PyType_Ready(&HandleType) < 0 || PyType_Ready(&SampleType) < 0 ||
	    PyType_Ready(&SlotType) < 0 || PyType_Ready(&RemoteType) < 0)
		return NULL;
	self_pid = getpid();
	if (pthread_atfork(NULL, NULL, on_fork_child) != 0) {
		PyErr_SetString(PyExc_ImportError, "_cistern: pthread_atfork failed");
		return NULL;
	}
	PyObject *m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	EndOfData = PyErr_NewExceptionWithDoc(
		"cistern.EndOfData",
		"Reception is closed and the policy has nothing left to hand out.", NULL, NULL);
	if (!EndOfData)
		goto fail;
	Py_INCREF(EndOfData);
	if (PyModule_AddObject(m, "EndOfData", EndOfData) < 0) {
		Py_DECREF(EndOfData);
		goto fail;
	}
	Py_INCREF(&HandleType);
	if (PyModule_AddObject(m, "Handle", (PyObject *)&HandleType) < 0) {
		Py_DECREF(&HandleType);
		goto fail;
	}
	Py_INCREF(&SampleType);
	if (PyModule_AddObject(m, "Sample", (PyObject *)&SampleType) < 0) {
		Py_DECREF(&SampleType);
		goto fail;
	}
	Py_INCREF(&SlotType);
	if (PyModule_AddObject(m, "Slot", (PyObject *)&SlotType) < 0) {
		Py_DECREF(&SlotType);
		goto fail;
	}
	Py_INCREF(&RemoteType);
	if (PyModule_AddObject(m, "Remote", (PyObject *)&RemoteType) < 0) {
		Py_DECREF(&RemoteType);
		goto fail;
	}
	if (PyModule_AddIntConstant(m, "EOD", CISTERN_EOD) < 0 ||
	    PyModule_AddIntConstant(m, "NAME_MAX", CISTERN_NAME_MAX) < 0 ||
	    PyModule_AddIntConstant(m, "POLICY_COUNT", CISTERN_POLICY_COUNT) < 0 ||
	    PyModule_AddIntConstant(m, "LOSSY", CISTERN_LOSSY) < 0 ||
	    PyModule_AddIntConstant(m, "SINGLE_PRODUCER", CISTERN_SINGLE_PRODUCER) < 0 ||
	    PyModule_AddIntConstant(m, "SINGLE_READER", CISTERN_SINGLE_READER) < 0 ||
	    PyModule_AddIntConstant(m, "DEAD_PRODUCER_DONE", CISTERN_DEAD_PRODUCER_DONE) < 0 ||
	    PyModule_AddIntConstant(m, "SEEN_BUCKETS", CISTERN_SEEN_BUCKETS) < 0 ||
	    PyModule_AddIntConstant(m, "SLOT_CLASSES", CISTERN_SLOT_CLASSES) < 0 ||
	    PyModule_AddIntConstant(m, "PROC_PRODUCER", CISTERN_PROC_PRODUCER) < 0 ||
	    PyModule_AddIntConstant(m, "PROC_READER", CISTERN_PROC_READER) < 0 ||
	    PyModule_AddIntConstant(m, "DUMP_VERSION", CISTERN_DUMP_VERSION) < 0 ||
	    PyModule_AddIntConstant(m, "SCHEMA_MAX", CISTERN_SCHEMA_MAX) < 0 ||
	    PyModule_AddIntConstant(m, "FIELD_DIMS", CISTERN_FIELD_DIMS) < 0 ||
	    PyModule_AddIntConstant(m, "DTYPE_COUNT", CISTERN_DTYPE_COUNT) < 0 ||
	    PyModule_AddIntConstant(m, "DEFAULT_SLOT_SIZE", CISTERN_DEFAULT_SLOT_SIZE) < 0 ||
	    PyModule_AddIntConstant(m, "DEFAULT_SLOT_COUNT", CISTERN_DEFAULT_SLOT_COUNT) < 0 ||
	    PyModule_AddObject(m, "SLOT_SIZE_MAX",
			       PyLong_FromUnsignedLongLong(CISTERN_SLOT_SIZE_MAX)) < 0 ||
	    PyModule_AddObject(m, "SLOT_COUNT_MAX",
			       PyLong_FromUnsignedLongLong(CISTERN_SLOT_COUNT_MAX)) < 0 ||
	    PyModule_AddIntConstant(m, "WAIT_SLICE_MS", WAIT_SLICE_MS) < 0 ||
	    PyModule_AddIntConstant(m, "REMOTE_WINDOW", CISTERN_REMOTE_WINDOW) < 0 ||
	    PyModule_AddIntConstant(m, "REMOTE_PROTOCOL", CISTERN_REMOTE_PROTOCOL) < 0)
		goto fail;
	PyObject *ver = Py_BuildValue("(iii)", CISTERN_VERSION_MAJOR, CISTERN_VERSION_MINOR,
				      CISTERN_VERSION_PATCH);
	if (!ver || PyModule_AddObject(m, "VERSION", ver) < 0) {
		Py_XDECREF(ver);
		goto fail;
	}
	/* The project's version, from meson.build (python/meson.build defines it). */
	if (PyModule_AddStringConstant(m, "__version__", CISTERN_PROJECT_VERSION) < 0)
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
