/* SPDX-License-Identifier: MIT */
/*
 * common.c - what every type and module function uses: the mapping of results
 * to Python exceptions, the int converters and the sliced waits.
 */
#include <time.h>

#include "cistern_ext.h"

/* A writable, C-contiguous buffer over o, or an optional one (None: *have = 0). 0 or -1. */
int cx_opt_writable(PyObject *o, Py_buffer *b, int *have, Py_ssize_t need, const char *what)
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

void cx_put_meta(uint64_t *row, const struct cistern_meta *m)
{
	row[0] = m->sample_id;
	row[1] = m->sim_id;
	row[2] = m->time_step;
}

int cx_draw_outs_get(struct cx_draw_outs *d, PyObject *ids, PyObject *weights, Py_ssize_t n)
{
	d->have_ids = d->have_weights = 0;
	if (cx_opt_writable(ids, &d->ids, &d->have_ids, n * (Py_ssize_t)sizeof(uint64_t),
			    "ids (n uint64)") < 0)
		return -1;
	return cx_opt_writable(weights, &d->weights, &d->have_weights,
			       n * (Py_ssize_t)sizeof(double), "weights (n float64)");
}

void cx_draw_outs_release(struct cx_draw_outs *d)
{
	if (d->have_ids)
		PyBuffer_Release(&d->ids);
	if (d->have_weights)
		PyBuffer_Release(&d->weights);
	d->have_ids = d->have_weights = 0;
}

/* ------------------------------------------------------------------ errors */

/* Set the Python exception for a negative result `r` of the C API. Returns NULL. */
PyObject *cx_raise_result(int r)
{
	if (r == PYERR_SET)
		return NULL;
	const char *msg = cistern_strerror(r);
	int e = -r;
	PyObject *type;
	if (r == CISTERN_EOD) {
		PyErr_SetString(cx_EndOfData, msg);
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
PyObject *cx_raise_refused_read(const char *why)
{
	PyErr_SetString(PyExc_ValueError, why);
	return NULL;
}

/* A bad segment name as ValueError, saying what a name may be; 0 if the name is good. */
int cx_check_name(const char *name)
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

/* cx_raise_result() for a call on segment `name`: an OSError carries the name as its filename. */
PyObject *cx_raise_for_name(int r, const char *name)
{
	int e = -r;
	if (e != ENOENT && e != EEXIST && e != EACCES && e != EPERM && e != EAGAIN && e != EPROTO &&
	    e != EPROTONOSUPPORT && e != EUSERS)
		return cx_raise_result(r);
	/* EAGAIN here is "still being created", not a timeout: BlockingIOError. */
	PyObject *a = Py_BuildValue("(iss)", e, cistern_strerror(r), name);
	if (a) {
		PyErr_SetObject(PyExc_OSError, a);
		Py_DECREF(a);
	}
	return NULL;
}

/* ---------------------------------------------------------- int converters */

int cx_conv_u64(PyObject *o, void *out)
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

int cx_conv_u32(PyObject *o, void *out)
{
	uint64_t v;
	if (!cx_conv_u64(o, &v))
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
int cx_conv_timeout(PyObject *o, void *out)
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

int64_t cx_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef int (*cx_attempt_fn)(void *ctx, int timeout_ms);

/*
 * Call fn(ctx, t) without the GIL until it returns something other than a timeout,
 * with t never above WAIT_SLICE_MS, for at most timeout_ms overall (negative: no
 * limit; 0: one try). Called and returns with the GIL held.
 */
int cx_wait_sliced(cx_attempt_fn fn, void *ctx, int timeout_ms)
{
	int r;
	if (timeout_ms >= 0 && timeout_ms <= WAIT_SLICE_MS) {
		Py_BEGIN_ALLOW_THREADS r = fn(ctx, timeout_ms);
		Py_END_ALLOW_THREADS return r;
	}
	int64_t deadline = timeout_ms > 0 ? cx_now_ms() + timeout_ms : 0;
	for (;;) {
		int t = WAIT_SLICE_MS;
		if (timeout_ms > 0) {
			int64_t left = deadline - cx_now_ms();
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
