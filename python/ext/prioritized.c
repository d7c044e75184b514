/* SPDX-License-Identifier: MIT */
/*
 * prioritized.c - the Handle methods of prioritized sampling
 * (docs/protocol/priorities.md): put with a priority, draw with ids and
 * weights, send priorities back, change beta, read the tree's totals.
 *
 * The library answers a bad priority with -EINVAL alone; these methods check
 * priorities first, so that the ValueError names the one that is wrong.
 */
#include <math.h>

#include "cistern_ext.h"

/* ValueError naming priority v (index i, or -1 for a single one) if it is not finite and >= 0. */
static int check_priority(double v, Py_ssize_t i)
{
	if (isfinite(v) && v >= 0)
		return 0;
	PyObject *f = PyFloat_FromDouble(v);
	if (!f)
		return -1;
	if (i < 0)
		PyErr_Format(PyExc_ValueError,
			     "priority %R refused: a priority must be finite and >= 0", f);
	else
		PyErr_Format(PyExc_ValueError,
			     "priorities[%zd] is %R: a priority must be finite and >= 0 "
			     "(nothing was updated)",
			     i, f);
	Py_DECREF(f);
	return -1;
}

/* ------------------------------------------------------------------- put */

struct prio_put_ctx {
	struct cistern *c;
	const void *buf;
	size_t len;
	struct cistern_meta meta;
	double priority;
};

static int prio_put_attempt(void *p, int t)
{
	struct prio_put_ctx *x = p;
	return cistern_put_prioritized(x->c, x->buf, x->len, &x->meta, x->priority, t);
}

PyObject *cx_handle_put_prioritized(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data",       "priority",       "sim_id", "time_step",
				 "timeout_ms", "end_of_episode", NULL};
	HandleObject *h = (HandleObject *)self;
	Py_buffer view;
	struct prio_put_ctx x = {0};
	int timeout = -1, end = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*d|O&O&O&p:put_prioritized", kwlist, &view,
					 &x.priority, cx_conv_u32, &x.meta.sim_id, cx_conv_u32,
					 &x.meta.time_step, cx_conv_timeout, &timeout, &end))
		return NULL;
	x.meta.flags = end ? CISTERN_META_END_OF_EPISODE : 0;
	PyObject *res = NULL;
	if (check_priority(x.priority, -1) < 0)
		goto out;
	if ((uint64_t)view.len > h->slot_size) {
		PyErr_Format(PyExc_ValueError,
			     "sample of %zd bytes does not fit a slot of %llu bytes", view.len,
			     (unsigned long long)h->slot_size);
		goto out;
	}
	if (cx_handle_enter(h) < 0)
		goto out;
	x.c = h->c;
	x.buf = view.buf;
	x.len = (size_t)view.len;
	/* The exporter cannot move or free the buffer while we hold the view. */
	int r = cx_wait_sliced(prio_put_attempt, &x, timeout);
	cx_handle_leave(h);
	if (r < 0) {
		if (r == -EINVAL && h->policy != CISTERN_PRIORITIZED)
			PyErr_SetString(PyExc_ValueError,
					"put_prioritized: the segment's policy is not prioritized");
		else
			cx_raise_result(r);
		goto out;
	}
	res = PyLong_FromUnsignedLongLong(x.meta.sample_id);
out:
	PyBuffer_Release(&view);
	return res;
}

/* ------------------------------------------------------------------ draw */

struct draw_ctx {
	struct cistern *c;
	void *buf;
	size_t stride, n;
	size_t *len;
	struct cistern_meta *meta;
	uint64_t *ids;
	double *weights;
};

static int draw_attempt(void *p, int t)
{
	struct draw_ctx *x = p;
	return cistern_get_prioritized(x->c, x->buf, x->stride, x->n, x->len, x->meta, x->ids,
				       x->weights, t);
}

/*
 * get_prioritized(out, item_size, n, timeout_ms=-1, metas=None, ids=None,
 * weights=None) -> k
 */
PyObject *cx_handle_get_prioritized(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"out",   "item_size", "n",       "timeout_ms",
				 "metas", "ids",       "weights", NULL};
	HandleObject *h = (HandleObject *)self;
	Py_buffer out, metas = {0};
	struct cx_draw_outs d = {0};
	int have_metas = 0;
	Py_ssize_t item, n;
	int timeout = -1;
	PyObject *metas_obj = Py_None, *ids_obj = Py_None, *weights_obj = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "w*nn|O&OOO:get_prioritized", kwlist, &out,
					 &item, &n, cx_conv_timeout, &timeout, &metas_obj, &ids_obj,
					 &weights_obj))
		return NULL;
	PyObject *res = NULL;
	size_t *lens = NULL;
	struct cistern_meta *m = NULL;
	if (item <= 0 || n <= 0 || item > PY_SSIZE_T_MAX / n || out.len < item * n) {
		PyErr_SetString(PyExc_ValueError,
				"get_prioritized: output buffer smaller than item_size * n");
		goto out;
	}
	if (cx_opt_writable(metas_obj, &metas, &have_metas, n * 3 * (Py_ssize_t)sizeof(uint64_t),
			    "metas (n * 3 uint64)") < 0 ||
	    cx_draw_outs_get(&d, ids_obj, weights_obj, n) < 0)
		goto out;
	lens = PyMem_Calloc((size_t)n, sizeof(*lens));
	m = PyMem_Calloc((size_t)n, sizeof(*m));
	if (!lens || !m) {
		PyErr_NoMemory();
		goto out;
	}
	if (cx_handle_enter(h) < 0)
		goto out;
	struct draw_ctx x = {h->c,
			     out.buf,
			     (size_t)item,
			     (size_t)n,
			     lens,
			     m,
			     d.have_ids ? d.ids.buf : NULL,
			     d.have_weights ? d.weights.buf : NULL};
	int r = cx_wait_sliced(draw_attempt, &x, timeout);
	cx_handle_leave(h);
	if (r == -EMSGSIZE) {
		PyErr_Format(PyExc_ValueError,
			     "a sample longer than the %zd bytes asked for (the batch stays in "
			     "the segment)",
			     item);
		goto out;
	}
	if (r == -EINVAL && h->policy != CISTERN_PRIORITIZED) {
		PyErr_SetString(PyExc_ValueError,
				"get_prioritized: the segment's policy is not prioritized");
		goto out;
	}
	if (r < 0) {
		cx_raise_result(r);
		goto out;
	}
	for (int i = 0; i < r; i++)
		if (lens[i] != (size_t)item) {
			/* The library copies what fits: a shorter sample is read already. */
			PyErr_Format(PyExc_ValueError,
				     "a sample of %zu bytes where samples of %zd were asked for",
				     lens[i], item);
			goto out;
		}
	if (have_metas)
		for (int i = 0; i < r; i++)
			cx_put_meta((uint64_t *)metas.buf + 3 * i, &m[i]);
	res = PyLong_FromLong(r);
out:
	PyMem_Free(lens);
	PyMem_Free(m);
	if (have_metas)
		PyBuffer_Release(&metas);
	cx_draw_outs_release(&d);
	PyBuffer_Release(&out);
	return res;
}

/* ---------------------------------------------------------------- update */

/* Whether a buffer's format is one 8-byte item of the kind `kinds` lists ("QLK" or "d"). */
static int format_is(const Py_buffer *b, const char *kinds)
{
	const char *f = b->format ? b->format : "B";
	if (*f == '@' || *f == '=' || *f == '<')
		f++;
	return b->itemsize == 8 && f[0] && !f[1] && strchr(kinds, f[0]) != NULL;
}

/*
 * The n values of o as a PyMem array of 8-byte items: copied from a
 * contiguous buffer of that format, else converted one by one from a
 * sequence (conv). NULL with an exception set.
 */
static void *values_of(PyObject *o, const char *kinds, int (*conv)(PyObject *, void *),
		       const char *what, Py_ssize_t *n)
{
	Py_buffer b;
	if (PyObject_CheckBuffer(o) &&
	    PyObject_GetBuffer(o, &b, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) {
		if (format_is(&b, kinds)) {
			void *v = PyMem_Malloc(b.len ? (size_t)b.len : 1);
			if (v)
				memcpy(v, b.buf, (size_t)b.len);
			else
				PyErr_NoMemory();
			*n = b.len / 8;
			PyBuffer_Release(&b);
			return v;
		}
		PyBuffer_Release(&b);
	}
	PyErr_Clear();
	PyObject *seq = PySequence_Fast(o, what);
	if (!seq)
		return NULL;
	Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
	char *v = PyMem_Malloc(k ? (size_t)k * 8 : 1);
	if (!v) {
		Py_DECREF(seq);
		return PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < k; i++)
		if (conv(PySequence_Fast_GET_ITEM(seq, i), v + 8 * i) < 0) {
			PyMem_Free(v);
			Py_DECREF(seq);
			return NULL;
		}
	Py_DECREF(seq);
	*n = k;
	return v;
}

static int conv_id(PyObject *o, void *out)
{
	PyObject *i = PyNumber_Index(o);
	if (!i)
		return -1;
	unsigned long long v = PyLong_AsUnsignedLongLong(i);
	Py_DECREF(i);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_SetString(PyExc_ValueError, "ids must be ints from 0 to 2**64 - 1");
		return -1;
	}
	*(uint64_t *)out = v;
	return 0;
}

static int conv_priority(PyObject *o, void *out)
{
	double v = PyFloat_AsDouble(o);
	if (v == -1.0 && PyErr_Occurred())
		return -1;
	*(double *)out = v;
	return 0;
}

/* update_priorities(ids, priorities) -> applied */
PyObject *cx_handle_update_priorities(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"ids", "priorities", NULL};
	HandleObject *h = (HandleObject *)self;
	PyObject *ids_obj, *prio_obj;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:update_priorities", kwlist, &ids_obj,
					 &prio_obj))
		return NULL;
	Py_ssize_t ni = 0, np = 0;
	PyObject *res = NULL;
	double *prio = NULL;
	uint64_t *ids = values_of(ids_obj, "QLK", conv_id, "ids must be a sequence of ints", &ni);
	if (!ids)
		return NULL;
	prio = values_of(prio_obj, "d", conv_priority, "priorities must be a sequence of numbers",
			 &np);
	if (!prio)
		goto out;
	if (ni != np) {
		PyErr_Format(PyExc_ValueError,
			     "update_priorities: %zd ids but %zd priorities (one each)", ni, np);
		goto out;
	}
	for (Py_ssize_t i = 0; i < np; i++)
		if (check_priority(prio[i], i) < 0)
			goto out;
	if (cx_handle_enter(h) < 0)
		goto out;
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_update_priorities(h->c, ids, prio, (size_t)ni);
	Py_END_ALLOW_THREADS cx_handle_leave(h);
	if (r == -EINVAL && h->policy != CISTERN_PRIORITIZED)
		PyErr_SetString(PyExc_ValueError,
				"update_priorities: the segment's policy is not prioritized");
	else if (r < 0)
		cx_raise_result(r);
	else
		res = PyLong_FromLong(r);
out:
	PyMem_Free(ids);
	PyMem_Free(prio);
	return res;
}

/* ------------------------------------------------------------ beta, info */

PyObject *cx_handle_set_beta(PyObject *self, PyObject *arg)
{
	HandleObject *h = (HandleObject *)self;
	double beta = PyFloat_AsDouble(arg);
	if (beta == -1.0 && PyErr_Occurred())
		return NULL;
	if (!(beta >= 0 && beta <= 1)) {
		PyErr_Format(PyExc_ValueError, "beta %R refused: beta must be from 0 to 1", arg);
		return NULL;
	}
	if (cx_handle_enter(h) < 0)
		return NULL;
	int r = cistern_set_beta(h->c, beta);
	cx_handle_leave(h);
	if (r == -EINVAL) {
		PyErr_SetString(PyExc_ValueError,
				"set_beta: the segment's policy is not prioritized");
		return NULL;
	}
	if (r < 0)
		return cx_raise_result(r);
	Py_RETURN_NONE;
}

PyObject *cx_handle_prio_info(PyObject *self, PyObject *Py_UNUSED(ignored))
{
	HandleObject *h = (HandleObject *)self;
	if (cx_handle_enter(h) < 0)
		return NULL;
	struct cistern_prio_info pi;
	memset(&pi, 0, sizeof(pi));
	int r = cistern_prio_info_get(h->c, &pi);
	cx_handle_leave(h);
	if (r == -EINVAL) {
		PyErr_SetString(PyExc_ValueError,
				"prio_info: the segment's policy is not prioritized");
		return NULL;
	}
	if (r < 0)
		return cx_raise_result(r);
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	if (cx_dict_set_f64(d, "alpha", pi.alpha) < 0 || cx_dict_set_f64(d, "beta", pi.beta) < 0 ||
	    cx_dict_set_f64(d, "epsilon", pi.epsilon) < 0 ||
	    cx_dict_set_f64(d, "total", pi.total) < 0 ||
	    cx_dict_set_f64(d, "least", pi.least) < 0 ||
	    cx_dict_set_f64(d, "max_priority", pi.max_priority) < 0 ||
	    cx_dict_set_u64(d, "updates", pi.updates) < 0 ||
	    cx_dict_set_u64(d, "stale_updates", pi.stale_updates) < 0 ||
	    cx_dict_set_u64(d, "rebuilds", pi.rebuilds) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}
