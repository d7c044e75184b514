/* SPDX-License-Identifier: MIT */
/*
 * put.c - put() and put_batch() of Handle and Remote: one body, which turns
 * the Python arguments into bytes, lengths and metadata and hands them to the
 * object's put calls through its struct cx_put_ops.
 */
#include "cistern_ext.h"

struct put_ctx {
	const struct cx_put_ops *ops;
	void *target;
	const void *buf;
	size_t len;
	struct cistern_meta meta;
};

static int put_attempt(void *p, int t)
{
	struct put_ctx *x = p;
	return x->ops->put(x->target, x->buf, x->len, &x->meta, t);
}

PyObject *cx_put(PyObject *self, const struct cx_put_ops *ops, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data",       "sim_id",         "time_step",
				 "timeout_ms", "end_of_episode", NULL};
	Py_buffer view;
	struct put_ctx x = {.ops = ops};
	int timeout = -1, end = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|O&O&O&p:put", kwlist, &view, cx_conv_u32,
					 &x.meta.sim_id, cx_conv_u32, &x.meta.time_step,
					 cx_conv_timeout, &timeout, &end))
		return NULL;
	x.meta.flags = end ? CISTERN_META_END_OF_EPISODE : 0;
	x.target = ops->enter(self);
	if (!x.target) {
		PyBuffer_Release(&view);
		return NULL;
	}
	uint64_t room = ops->room ? ops->room(self) : 0;
	if (room && (uint64_t)view.len > room) {
		PyErr_Format(PyExc_ValueError,
			     "sample of %zd bytes does not fit a slot of %llu bytes", view.len,
			     (unsigned long long)room);
		ops->leave(self);
		PyBuffer_Release(&view);
		return NULL;
	}
	x.buf = view.buf;
	x.len = (size_t)view.len;
	/* The exporter cannot move or free the buffer while we hold the view. */
	int r = cx_wait_sliced(put_attempt, &x, timeout);
	ops->leave(self);
	PyBuffer_Release(&view);
	if (r < 0)
		return cx_raise_result(r);
	if (!ops->ids)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(x.meta.sample_id);
}

/* The largest batch copied while holding the GIL (see cx_put_rows()). */
#define CX_PUT_GIL_BYTES ((size_t)256 << 10)

struct rows_ctx {
	const struct cx_put_ops *ops;
	void *target;
	const char *buf;
	size_t item, count, done;
	struct cistern_meta *m;
};

static int rows_attempt(void *p, int t)
{
	struct rows_ctx *x = p;
	while (x->done < x->count) {
		size_t n = x->count - x->done;
		int r = x->ops->put_batch(x->target, x->buf + x->done * x->item, x->item,
					  n < INT_MAX ? n : INT_MAX, x->m + x->done, t);
		if (r < 0)
			return r;
		x->done += (size_t)r;
	}
	return 0;
}

int cx_put_rows(const struct cx_put_ops *ops, void *target, const char *buf, size_t item,
		size_t count, struct cistern_meta *m, int timeout_ms, size_t *done)
{
	struct rows_ctx x = {ops, target, buf, item, count, 0, m};
	/*
	 * A small batch gets one quick try with the GIL held: one that fits
	 * needs no wait, and releasing the GIL would cost more than the copy.
	 * A large one is copied with the GIL released from the first attempt,
	 * so that the caller's other threads run meanwhile.
	 */
	int r;
	if (item * count > CX_PUT_GIL_BYTES)
		r = cx_wait_sliced(rows_attempt, &x, timeout_ms);
	else if ((r = rows_attempt(&x, 0)) == -EAGAIN && timeout_ms != 0)
		r = cx_wait_sliced(rows_attempt, &x, timeout_ms);
	*done = x.done;
	return r;
}

/*
 * put_batch()'s buffers: `data` must hold count rows of item bytes and `metas`
 * count rows of three uint64. 0, or -1 with ValueError set.
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

/*
 * put_batch(data, item_size, count, metas, timeout_ms=-1) -> n
 * Put `count` samples of item_size bytes each from the buffer `data` (row i
 * at offset i * item_size), in order, waiting for room as put() does. metas
 * is a buffer of count * 3 uint64: each row's sim_id and time_step are read
 * from columns 1 and 2; with ops->ids, metas must be writable and each row's
 * sample id is written to column 0. Returns how many were put: fewer than
 * count only when the timeout (or an error) came after the first; with none
 * put, the timeout or error is raised.
 */
PyObject *cx_put_batch(PyObject *self, const struct cx_put_ops *ops, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data", "item_size", "count", "metas", "timeout_ms", NULL};
	Py_buffer data, metas;
	Py_ssize_t item, count;
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(
		    args, kw, ops->ids ? "y*nnw*|O&:put_batch" : "y*nny*|O&:put_batch", kwlist,
		    &data, &item, &count, &metas, cx_conv_timeout, &timeout))
		return NULL;
	PyObject *res = NULL;
	if (batch_shape_ok(&data, item, count, &metas) < 0)
		goto out;
	uint64_t room = ops->room ? ops->room(self) : 0;
	if (room && (uint64_t)item > room) {
		PyErr_Format(PyExc_ValueError,
			     "samples of %zd bytes do not fit a slot of %llu bytes", item,
			     (unsigned long long)room);
		goto out;
	}
	void *target = ops->enter(self);
	if (!target)
		goto out;
	struct cistern_meta *m = ops->scratch(self, (size_t)count);
	if (!m || batch_metas(&metas, count, m) < 0) {
		ops->leave(self);
		goto out;
	}
	size_t done;
	/* The exporter cannot move or free the buffer while we hold the view. */
	int r = cx_put_rows(ops, target, data.buf, (size_t)item, (size_t)count, m, timeout, &done);
	if (ops->ids)
		for (size_t i = 0; i < done; i++)
			((uint64_t *)metas.buf)[3 * i] = m[i].sample_id;
	ops->leave(self);
	if (done == 0) {
		cx_raise_result(r);
		goto out;
	}
	if (r == PYERR_SET) /* a signal handler raised after some rows: the exception wins */
		goto out;
	res = PyLong_FromSize_t(done);
out:
	PyBuffer_Release(&data);
	PyBuffer_Release(&metas);
	return res;
}
