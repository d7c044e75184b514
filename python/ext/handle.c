/* SPDX-License-Identifier: MIT */
/*
 * handle.c - the Handle type: one struct cistern, used by one thread at a time.
 */
#include "cistern_ext.h"

/* Detach for real, if asked to and nothing maps the segment any more. */
void cx_handle_finish_detach(HandleObject *h)
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
int cx_handle_enter(HandleObject *h)
{
	if (h->detached || !h->c) {
		PyErr_SetString(PyExc_ValueError, "segment handle is detached");
		return -1;
	}
	if (h->pid != cx_self_pid) {
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

void cx_handle_leave(HandleObject *h)
{
	h->busy = 0;
	/* Called with the GIL held, in the thread that made the call. */
	for (size_t i = 0; i < h->npending; i++)
		cistern_release(h->c, &h->pending[i]);
	h->npending = 0;
}

/* Queue a release for cx_handle_leave(); if memory runs out, detach gives it back. */
void cx_handle_defer_release(HandleObject *h, const struct cistern_sample *ss, size_t n)
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

HandleObject *cx_handle_new(struct cistern *c)
{
	HandleObject *h = PyObject_New(HandleObject, &cx_HandleType);
	if (!h) {
		cistern_detach(c);
		return NULL;
	}
	h->c = c;
	h->pid = cx_self_pid;
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
		cx_sample_do_release(s);
	/* Reservations still open can never be committed now: give them back. */
	cx_slots_abort_all(h);
	h->detached = 1;
	cx_handle_finish_detach(h);
	Py_RETURN_NONE;
}

static void Handle_dealloc(HandleObject *h)
{
	/* Samples hold a reference: none is left here. */
	h->detached = 1;
	cx_handle_finish_detach(h);
	PyMem_Free(h->pending);
	PyMem_Free(h->scratch_meta);
	PyMem_Free(h->scratch_len);
	PyObject_Free(h);
}

/* acquire and get */

struct acq_ctx {
	struct cistern *c;
	struct cistern_sample *s;
};

static int acq_attempt(void *p, int t)
{
	struct acq_ctx *x = p;
	return cistern_acquire(x->c, x->s, t);
}

/*
 * Wait on the handle for fn to fill `into`, a new object the caller owns.
 * Returns fn's count, or -1 with an exception set and `into` released, so a
 * failed call leaves no half-filled object behind.
 */
static int handle_wait_into(HandleObject *h, PyObject *into, cx_attempt_fn fn, void *ctx,
			    int timeout)
{
	if (cx_handle_enter(h) < 0) {
		Py_DECREF(into);
		return -1;
	}
	int r = cx_wait_sliced(fn, ctx, timeout);
	cx_handle_leave(h);
	if (r < 0) {
		Py_DECREF(into);
		cx_raise_result(r);
		return -1;
	}
	return r;
}

/* Acquire into *s: a quick try with the GIL held, then a sliced wait. */
static int acquire_one(HandleObject *h, struct cistern_sample *s, int timeout)
{
	int r = cistern_acquire(h->c, s, 0);
	if (r != -EAGAIN || timeout == 0)
		return r;
	struct acq_ctx x = {h->c, s};
	return cx_wait_sliced(acq_attempt, &x, timeout);
}

static PyObject *Handle_get(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout_ms", NULL};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:get", kwlist, cx_conv_timeout, &timeout))
		return NULL;
	if (cx_handle_enter(h) < 0)
		return NULL;
	struct cistern_sample s;
	memset(&s, 0, sizeof(s));
	int r = acquire_one(h, &s, timeout);
	if (r < 0) {
		cx_handle_leave(h);
		return cx_raise_result(r);
	}
	PyObject *bytes = PyBytes_FromStringAndSize(s.data, (Py_ssize_t)s.len);
	struct cistern_meta meta = s.meta;
	cistern_release(h->c, &s);
	cx_handle_leave(h);
	if (!bytes)
		return NULL;
	PyObject *m = cx_meta_tuple(&meta);
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
					 &count, cx_conv_timeout, &timeout, &metas_obj, &skip))
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
	if (cx_handle_enter(h) < 0)
		goto out_buf;
	int64_t deadline = timeout > 0 ? cx_now_ms() + timeout : 0;
	Py_ssize_t n = 0;
	int r = 0;
	while (n < count) {
		int t = timeout;
		if (timeout > 0) {
			int64_t left = deadline - cx_now_ms();
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
			cx_handle_leave(h);
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
	cx_handle_leave(h);
	if (n == 0 && count > 0) {
		cx_raise_result(r);
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

static PyObject *Handle_acquire(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout_ms", NULL};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:acquire", kwlist, cx_conv_timeout,
					 &timeout))
		return NULL;
	SampleObject *so = cx_sample_alloc(KIND_ONE, 1);
	if (!so)
		return NULL;
	if (cx_handle_enter(h) < 0) {
		Py_DECREF(so);
		return NULL;
	}
	int r = acquire_one(h, &so->ss[0], timeout);
	cx_handle_leave(h);
	if (r < 0) {
		Py_DECREF(so);
		return cx_raise_result(r);
	}
	return cx_sample_attach(so, h);
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
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:acquire_pair", kwlist, cx_conv_timeout,
					 &timeout))
		return NULL;
	SampleObject *so = cx_sample_alloc(KIND_PAIR, 2);
	if (!so)
		return NULL;
	struct acq_ctx x = {h->c, so->ss};
	if (handle_wait_into(h, (PyObject *)so, pair_attempt, &x, timeout) < 0)
		return NULL;
	return cx_sample_attach(so, h);
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
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|nO&:acquire_batch", kwlist, &n,
					 cx_conv_timeout, &timeout))
		return NULL;
	if (n < 0) {
		PyErr_SetString(PyExc_ValueError, "acquire_batch: n must be >= 0");
		return NULL;
	}
	if (cx_handle_enter(h) < 0)
		return NULL;
	if (n == 0) {
		struct cistern_config cfg;
		if (cistern_config_get(h->c, &cfg) == 0)
			n = (Py_ssize_t)cfg.batch_size;
	}
	cx_handle_leave(h);
	if (n == 0) {
		PyErr_SetString(PyExc_ValueError,
				"acquire_batch: n is 0 and the segment has no batch_size");
		return NULL;
	}
	SampleObject *so = cx_sample_alloc(KIND_BATCH, (size_t)n);
	if (!so)
		return NULL;
	if (cx_handle_enter(h) < 0) {
		Py_DECREF(so);
		return NULL;
	}
	struct batch_ctx x = {h->c, so->ss, (size_t)n};
	int r = cx_wait_sliced(batch_attempt, &x, timeout);
	char why[RW_WHY];
	if (r == -EDEADLK)
		cistern_read_problem(h->c, (size_t)n, why, sizeof(why));
	cx_handle_leave(h);
	if (r < 0) {
		Py_DECREF(so);
		return r == -EDEADLK ? cx_raise_refused_read(why) : cx_raise_result(r);
	}
	so->n = (size_t)r;
	return cx_sample_attach(so, h);
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
					 cx_conv_timeout, &timeout, &metas_obj, &skip))
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
	if (cx_handle_enter(h) < 0)
		goto out_buf;
	struct batch_ctx x = {h->c, ss, (size_t)n};
	int64_t deadline = timeout > 0 ? cx_now_ms() + timeout : 0;
	int r;
draw:
	r = cx_wait_sliced(batch_attempt, &x, timeout);
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
				int64_t left = deadline - cx_now_ms();
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
		cx_handle_leave(h);
		if (r == -EDEADLK)
			cx_raise_refused_read(why);
		else
			cx_raise_result(r);
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
		cx_handle_leave(h);
		PyErr_Format(PyExc_ValueError,
			     "a sample of %zu bytes where samples of %zd were asked for%s", len,
			     item, u == 0 ? " (the batch stays in the segment)" : "");
		goto out_buf;
	}
	Py_BEGIN_ALLOW_THREADS cx_copy_rows(ss, (size_t)r, out.buf, (size_t)item,
					    have_metas ? metas.buf : NULL);
	Py_END_ALLOW_THREADS int rel = cistern_release_batch(h->c, ss, (size_t)r);
	cx_handle_leave(h);
	if (rel < 0) {
		cx_raise_result(rel);
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
	if (nargs > 1 && !cx_conv_timeout(args[1], &timeout))
		return NULL;
	Py_buffer out, metas;
	int have_metas = 0;
	PyObject *res = NULL;
	if (PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
		return NULL;
	if (cx_opt_writable(arg_or(args, nargs, 2, Py_None), &metas, &have_metas,
			    3 * (Py_ssize_t)sizeof(uint64_t), "get_into: metas") < 0)
		goto out_buf;
	if (cx_handle_enter(h) < 0)
		goto out_buf;
	struct get_ctx x = {h->c, out.buf, (size_t)out.len, 0, {0, 0, 0, 0}};
	int r = get_attempt(&x, 0);
	if (r == -EAGAIN && timeout != 0)
		r = cx_wait_sliced(get_attempt, &x, timeout);
	cx_handle_leave(h);
	if (r == -EMSGSIZE) {
		PyErr_Format(PyExc_ValueError,
			     "get_into: the next sample is larger than the %zd-byte buffer "
			     "(it stays in the segment)",
			     out.len);
		goto out_buf;
	}
	if (r < 0) {
		cx_raise_result(r);
		goto out_buf;
	}
	if (have_metas)
		cx_put_meta(metas.buf, &x.meta);
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
	if (nargs > 3 && !cx_conv_timeout(args[3], &timeout))
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
	if (cx_opt_writable(arg_or(args, nargs, 4, Py_None), &metas, &have_metas,
			    n * 3 * (Py_ssize_t)sizeof(uint64_t), "get_batch_into: metas") < 0 ||
	    cx_opt_writable(arg_or(args, nargs, 5, Py_None), &lens, &have_lens,
			    n * (Py_ssize_t)sizeof(uint64_t), "get_batch_into: lens") < 0)
		goto out_buf;
	if (cx_handle_enter(h) < 0)
		goto out_buf;
	int firo = h->policy == CISTERN_FIRO;
	if ((have_metas || have_lens || firo) && handle_scratch(h, (size_t)n) < 0) {
		cx_handle_leave(h);
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
		r = cx_wait_sliced(gbi_attempt, &x, timeout);
	cx_handle_leave(h);
	if (r == -EMSGSIZE) {
		PyErr_Format(
			PyExc_ValueError,
			"get_batch_into: the next sample is longer than the stride of %zd bytes "
			"(it stays in the segment)",
			stride);
		goto out_buf;
	}
	if (r < 0) {
		cx_raise_result(r);
		goto out_buf;
	}
	for (int i = 0; i < r; i++) {
		if (have_metas)
			cx_put_meta((uint64_t *)metas.buf + 3 * i, &x.meta[i]);
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

struct win_ctx {
	struct cistern *c;
	char *buf;
	size_t item, n, length, step;
	size_t *len;
	struct cistern_meta *meta;
	bool prioritized;
	uint64_t *ids;
	double *weights;
};

static int win_attempt(void *p, int t)
{
	struct win_ctx *x = p;
	if (x->prioritized)
		return cistern_get_prioritized_windows(x->c, x->buf, x->item, x->n, x->length,
						       x->step, x->len, x->meta, x->ids, x->weights,
						       t);
	return cistern_get_windows(x->c, x->buf, x->item, x->n, x->length, x->step, x->len, x->meta,
				   t);
}

/*
 * get_windows(out, item_size, n, length, step, timeout_ms=-1, metas=None,
 *             ids=None, weights=None) -> k
 * Up to n windows of `length` members `step` time steps apart
 * (cistern_get_windows()) into out, member j of window i at offset
 * (i * length + j) * item_size; metas (n * length * 4 uint64) receives each
 * member's (sample_id, sim_id, time_step, flags). Every member must be
 * exactly item_size bytes: a longer one sends its window back unread, a
 * shorter one raises ValueError after the read. With ids (n uint64) or
 * weights (n float64), the windows are drawn by priority
 * (cistern_get_prioritized_windows()) and each window's id and weight go
 * there.
 */
static PyObject *Handle_get_windows(HandleObject *h, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"out",        "item_size", "n",   "length",  "step",
				 "timeout_ms", "metas",     "ids", "weights", NULL};
	Py_buffer out, metas = {0};
	struct cx_draw_outs d = {0};
	Py_ssize_t item, n, length, step;
	int timeout = -1, have_metas = 0;
	PyObject *metas_obj = Py_None, *ids_obj = Py_None, *weights_obj = Py_None, *res = NULL;
	size_t *lens = NULL;
	struct cistern_meta *ms = NULL;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "w*nnnn|O&OOO:get_windows", kwlist, &out, &item,
					 &n, &length, &step, cx_conv_timeout, &timeout, &metas_obj,
					 &ids_obj, &weights_obj))
		return NULL;
	if (item <= 0 || n <= 0 || n > INT_MAX || length <= 0 || step <= 0 ||
	    length > PY_SSIZE_T_MAX / n || item > PY_SSIZE_T_MAX / (n * length) ||
	    out.len < item * n * length) {
		PyErr_SetString(PyExc_ValueError, "get_windows: n, length and step must be "
						  "positive, out at least n * length * item_size");
		goto out_buf;
	}
	size_t members = (size_t)n * (size_t)length;
	if (metas_obj != Py_None) {
		if (PyObject_GetBuffer(metas_obj, &metas, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
			goto out_buf;
		have_metas = 1;
		if ((size_t)metas.len < members * 4 * sizeof(uint64_t)) {
			PyErr_SetString(PyExc_ValueError,
					"get_windows: metas smaller than n * length * 4 uint64");
			goto out_buf;
		}
	}
	if (cx_draw_outs_get(&d, ids_obj, weights_obj, n) < 0)
		goto out_buf;
	lens = PyMem_Calloc(members, sizeof(*lens));
	ms = PyMem_Calloc(members, sizeof(*ms));
	if (!lens || !ms) {
		PyErr_NoMemory();
		goto out_buf;
	}
	if (cx_handle_enter(h) < 0)
		goto out_buf;
	struct win_ctx x = {h->c,
			    out.buf,
			    (size_t)item,
			    (size_t)n,
			    (size_t)length,
			    (size_t)step,
			    lens,
			    ms,
			    d.have_ids || d.have_weights,
			    d.have_ids ? d.ids.buf : NULL,
			    d.have_weights ? d.weights.buf : NULL};
	int r = cx_wait_sliced(win_attempt, &x, timeout);
	char why[RW_WHY];
	if (r == -EDEADLK)
		cistern_read_problem(h->c, (size_t)length, why, sizeof(why));
	cx_handle_leave(h);
	if (r == -EMSGSIZE) {
		PyErr_Format(PyExc_ValueError,
			     "get_windows: a member is longer than %zd bytes (its window stays in "
			     "the segment)",
			     item);
		goto out_buf;
	}
	if (r == -EDEADLK) {
		cx_raise_refused_read(why);
		goto out_buf;
	}
	if (r < 0) {
		cx_raise_result(r);
		goto out_buf;
	}
	for (size_t i = 0; i < (size_t)r * (size_t)length; i++) {
		if (have_metas) {
			uint64_t *row = (uint64_t *)metas.buf + 4 * i;
			cx_put_meta(row, &ms[i]);
			row[3] = ms[i].flags;
		}
		if (lens[i] != (size_t)item) {
			PyErr_Format(PyExc_ValueError,
				     "get_windows: a member of %zu bytes where item_size is %zd",
				     lens[i], item);
			goto out_buf;
		}
	}
	res = PyLong_FromLong(r);
out_buf:
	PyMem_Free(lens);
	PyMem_Free(ms);
	if (have_metas)
		PyBuffer_Release(&metas);
	cx_draw_outs_release(&d);
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
	if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O&n:acquire_many", kwlist, &n,
					 cx_conv_timeout, &timeout, &skip_size))
		return NULL;
	if (n <= 0) {
		PyErr_SetString(PyExc_ValueError, "acquire_many: n must be positive");
		return NULL;
	}
	SampleObject *so = cx_sample_alloc(KIND_MANY, (size_t)n);
	if (!so)
		return NULL;
	if (cx_handle_enter(h) < 0) {
		Py_DECREF(so);
		return NULL;
	}
	int64_t deadline = timeout > 0 ? cx_now_ms() + timeout : 0;
	size_t k = 0;
	int r = 0;
	while (k < (size_t)n) {
		int t = timeout;
		if (timeout > 0) {
			int64_t left = deadline - cx_now_ms();
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
	cx_handle_leave(h);
	if (k == 0) {
		Py_DECREF(so);
		return cx_raise_result(r);
	}
	so->n = k;
	return cx_sample_attach(so, h);
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
/* put, put_batch and put_many: put.c's body, on this handle's struct cistern */

static void *handle_put_enter(PyObject *self)
{
	HandleObject *h = (HandleObject *)self;
	return cx_handle_enter(h) < 0 ? NULL : h->c;
}

static void handle_put_leave(PyObject *self)
{
	cx_handle_leave((HandleObject *)self);
}

static struct cistern_meta *handle_put_scratch(PyObject *self, size_t n)
{
	HandleObject *h = (HandleObject *)self;
	return handle_scratch(h, n) < 0 ? NULL : h->scratch_meta;
}

static uint64_t handle_room(PyObject *self)
{
	return ((HandleObject *)self)->slot_size;
}

static int handle_put_one(void *c, const void *buf, size_t len, struct cistern_meta *m, int t)
{
	return cistern_put(c, buf, len, m, t);
}

static int handle_put_rows(void *c, const void *buf, size_t item, size_t n, struct cistern_meta *m,
			   int t)
{
	return cistern_put_batch(c, buf, item, n, NULL, m, t);
}

static const struct cx_put_ops handle_put_ops = {
	.enter = handle_put_enter,
	.leave = handle_put_leave,
	.scratch = handle_put_scratch,
	.room = handle_room,
	.put = handle_put_one,
	.put_batch = handle_put_rows,
	.ids = true,
};

static PyObject *Handle_put(HandleObject *h, PyObject *args, PyObject *kw)
{
	return cx_put((PyObject *)h, &handle_put_ops, args, kw);
}

static PyObject *Handle_put_batch(HandleObject *h, PyObject *args, PyObject *kw)
{
	return cx_put_batch((PyObject *)h, &handle_put_ops, args, kw);
}

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
	if ((nargs > 3 && !cx_conv_u32(args[3], &sim_id)) ||
	    (nargs > 4 && !cx_conv_u32(args[4], &time_step)) ||
	    (nargs > 5 && !cx_conv_timeout(args[5], &timeout)))
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
	if (cx_opt_writable(arg_or(args, nargs, 6, Py_None), &ids, &have_ids,
			    n * (Py_ssize_t)sizeof(uint64_t), "put_many: ids") < 0)
		goto out_buf;
	if (cx_handle_enter(h) < 0)
		goto out_buf;
	if (handle_scratch(h, (size_t)n) < 0) {
		cx_handle_leave(h);
		goto out_buf;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		h->scratch_meta[i].sim_id = sim_id;
		h->scratch_meta[i].time_step = time_step;
	}
	size_t done;
	/* The exporter cannot move or free the buffer while we hold the view. */
	int r = cx_put_rows(&handle_put_ops, h->c, data.buf, (size_t)stride, (size_t)n,
			    h->scratch_meta, timeout, &done);
	cx_handle_leave(h);
	if (have_ids)
		for (size_t i = 0; i < done; i++)
			((uint64_t *)ids.buf)[i] = h->scratch_meta[i].sample_id;
	if (done == 0) {
		cx_raise_result(r);
		goto out_buf;
	}
	if (r == PYERR_SET) /* a signal handler raised after some rows: the exception wins */
		goto out_buf;
	res = PyLong_FromSize_t(done);
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
	if (cx_handle_enter(h) < 0)
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
			cx_handle_leave(h);
			return PyErr_NoMemory();
		}
		info = more;
	}
	cx_handle_leave(h);
	long n = 0;
	for (int i = 0; i < r; i++)
		n += info[i].alive && info[i].waiting == 2;
	if (info != small)
		PyMem_Free(info);
	if (r < 0)
		return cx_raise_result(r);
	return PyLong_FromLong(n);
}

static PyObject *Handle_close_reception(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (cx_handle_enter(h) < 0)
		return NULL;
	int r = cistern_close_reception(h->c);
	cx_handle_leave(h);
	if (r < 0)
		return cx_raise_result(r);
	Py_RETURN_NONE;
}

static PyObject *Handle_producer_done(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (cx_handle_enter(h) < 0)
		return NULL;
	int r = cistern_producer_done(h->c);
	cx_handle_leave(h);
	if (r < 0)
		return cx_raise_result(r);
	return PyLong_FromLong(r);
}

static PyObject *Handle_stats(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (cx_handle_enter(h) < 0)
		return NULL;
	struct cistern_stats st;
	memset(&st, 0, sizeof(st));
	int r = cistern_stats_get(h->c, &st);
	cx_handle_leave(h);
	if (r < 0)
		return cx_raise_result(r);
	return cx_stats_dict(&st);
}

/* struct cistern_config as the dict that Handle.config() returns, in create()'s words. */
static PyObject *Handle_config(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (cx_handle_enter(h) < 0)
		return NULL;
	struct cistern_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	int r = cistern_config_get(h->c, &cfg);
	cx_handle_leave(h);
	if (r < 0)
		return cx_raise_result(r);
	return cx_config_dict(&cfg);
}

static PyObject *Handle_schema(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (cx_handle_enter(h) < 0)
		return NULL;
	char text[CISTERN_SCHEMA_MAX];
	struct cistern_field *f = NULL;
	uint64_t size = 0;
	ssize_t len = cistern_schema_get(h->c, text, sizeof(text));
	int n = len > 0 ? cistern_schema_fields(h->c, NULL, 0, &size) : (int)len;
	if (n > 0) {
		f = PyMem_Calloc((size_t)n, sizeof(*f));
		if (!f) {
			cx_handle_leave(h);
			return PyErr_NoMemory();
		}
		n = cistern_schema_fields(h->c, f, (size_t)n, &size);
	}
	cx_handle_leave(h);
	PyObject *res;
	if (n < 0)
		res = cx_raise_result(n);
	else if (n == 0)
		res = (Py_INCREF(Py_None), Py_None);
	else
		res = cx_schema_dict(text, f, n, size);
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
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:reserve", kwlist, cx_conv_timeout,
					 &timeout))
		return NULL;
	SlotObject *so = PyObject_New(SlotObject, &cx_SlotType);
	if (!so)
		return NULL;
	so->h = NULL;
	so->live = 0;
	so->prev = so->next = NULL;
	memset(&so->slot, 0, sizeof(so->slot));
	struct reserve_ctx x = {h->c, &so->slot};
	if (handle_wait_into(h, (PyObject *)so, reserve_attempt, &x, timeout) < 0)
		return NULL;
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
	if (cx_handle_enter(h) < 0)
		return NULL;
	struct cistern_occupancy occ;
	memset(&occ, 0, sizeof(occ));
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_occupancy_get(h->c, &occ);
	Py_END_ALLOW_THREADS cx_handle_leave(h);
	if (r < 0)
		return cx_raise_result(r);
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	if (cx_dict_set_steal(d, "slots", cx_u64_list(occ.slots, CISTERN_SLOT_CLASSES)) < 0 ||
	    cx_dict_set_u64(d, "pinned", occ.pinned) < 0 ||
	    cx_dict_set_u64(d, "held", occ.held) < 0 ||
	    cx_dict_set_u64(d, "held_bytes", occ.held_bytes) < 0 ||
	    cx_dict_set_steal(d, "held_seen_hist",
			      cx_u64_list(occ.held_seen_hist, CISTERN_SEEN_BUCKETS)) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

static PyObject *Handle_procs(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
	if (cx_handle_enter(h) < 0)
		return NULL;
	struct cistern_proc_info *v = NULL;
	size_t cap = 16;
	int r;
	for (;;) {
		struct cistern_proc_info *nv = PyMem_Realloc(v, cap * sizeof(*v));
		if (!nv) {
			cx_handle_leave(h);
			PyMem_Free(v);
			return PyErr_NoMemory();
		}
		v = nv;
		Py_BEGIN_ALLOW_THREADS r = cistern_procs_get(h->c, v, cap);
		Py_END_ALLOW_THREADS if (r < 0 || (size_t)r <= cap) break;
		cap = (size_t)r; /* more entries than room: ask again with room for all */
	}
	cx_handle_leave(h);
	PyObject *l = r < 0 ? cx_raise_result(r) : PyList_New(r);
	for (int i = 0; l && i < r; i++) {
		PyObject *d = cx_proc_dict(&v[i]);
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
	 "put($self, /, data, sim_id=0, time_step=0, timeout_ms=-1, end_of_episode=False)\n--\n\n"
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
	{"get_windows", (PyCFunction)(void (*)(void))Handle_get_windows,
	 METH_VARARGS | METH_KEYWORDS,
	 "get_windows($self, /, out, item_size, n, length, step, timeout_ms=-1, metas=None, "
	 "ids=None, weights=None)\n"
	 "--\n\n"
	 "Copy up to n windows of one simulation (cistern_get_windows()) into `out`,\n"
	 "member j of window i at (i * length + j) * item_size, their (sample_id,\n"
	 "sim_id, time_step, flags) into `metas` if given; returns the windows copied.\n"
	 "With ids (n uint64) or weights (n float64), draws them by priority\n"
	 "(cistern_get_prioritized_windows()), each window's id and weight there."},
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
	{"put_prioritized", (PyCFunction)(void (*)(void))cx_handle_put_prioritized,
	 METH_VARARGS | METH_KEYWORDS,
	 "put_prioritized($self, /, data, priority, sim_id=0, time_step=0, timeout_ms=-1, "
	 "end_of_episode=False)\n--\n\n"
	 "Copy the bytes of a C-contiguous buffer in as one sample with a priority\n"
	 "(cistern_put_prioritized()); returns its sample id. ValueError for a priority\n"
	 "that is NaN, infinite or negative. end_of_episode=True marks the last step\n"
	 "of an episode (CISTERN_META_END_OF_EPISODE)."},
	{"get_prioritized", (PyCFunction)(void (*)(void))cx_handle_get_prioritized,
	 METH_VARARGS | METH_KEYWORDS,
	 "get_prioritized($self, /, out, item_size, n, timeout_ms=-1, metas=None, ids=None,\n"
	 "                weights=None)\n--\n\n"
	 "Draw n samples by priority (cistern_get_prioritized()) into out (row i at\n"
	 "i * item_size), their (sample_id, sim_id, time_step) into metas (n * 3 uint64),\n"
	 "their ids into ids (n uint64) and their importance weights into weights\n"
	 "(n float64). Returns how many were drawn."},
	{"update_priorities", (PyCFunction)(void (*)(void))cx_handle_update_priorities,
	 METH_VARARGS | METH_KEYWORDS,
	 "update_priorities($self, /, ids, priorities)\n--\n\n"
	 "Set the priorities of the samples that a prioritized draw gave these ids\n"
	 "(cistern_update_priorities()): uint64 and float64 buffers or sequences of\n"
	 "numbers, one priority per id. Returns how many were applied; ids of samples\n"
	 "that left are counted in prio_info()['stale_updates']."},
	{"set_beta", (PyCFunction)cx_handle_set_beta, METH_O,
	 "set_beta($self, beta, /)\n--\n\n"
	 "Change beta, the exponent of the importance weights, from 0 to 1\n"
	 "(cistern_set_beta())."},
	{"prio_info", (PyCFunction)cx_handle_prio_info, METH_NOARGS,
	 "prio_info($self, /)\n--\n\n"
	 "A prioritized segment's parameters and totals (cistern_prio_info_get())."},
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

PyTypeObject cx_HandleType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cistern._cistern.Handle",
	.tp_basicsize = sizeof(HandleObject),
	.tp_dealloc = (destructor)Handle_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "An attachment to a cistern segment (one thread at a time).",
	.tp_methods = Handle_methods,
	.tp_getset = Handle_getset,
};
