/* SPDX-License-Identifier: MIT */
/*
 * remote.c - the Remote type: one connection of a remote producer to a
 * server (cistern_remote_*(), docs/REMOTE.md). Like a Handle it belongs to one thread at a time and to the
 * process that made it; blocking calls run without the GIL in slices.
 */
#include <math.h>

#include "cistern_ext.h"

typedef struct {
	PyObject_HEAD struct cistern_remote *r; /* NULL once closed */
	pid_t pid;
	int busy;
	struct cistern_meta *scratch; /* put_batch's metas, reused */
	size_t scratch_cap;
} RemoteObject;

static int remote_enter(RemoteObject *ro)
{
	if (!ro->r) {
		PyErr_SetString(PyExc_ValueError, "remote connection is closed");
		return -1;
	}
	if (ro->pid != cx_self_pid) {
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
 * -ETIMEDOUT for it, cx_wait_sliced() goes on only after -ETIMEDOUT.
 */
static int remote_wait_result(int r, int t)
{
	return r == -EAGAIN && t != 0 ? -ETIMEDOUT : r;
}

/* put and put_batch: put.c's body, on this connection */

static void *remote_put_enter(PyObject *self)
{
	RemoteObject *ro = (RemoteObject *)self;
	return remote_enter(ro) < 0 ? NULL : ro->r;
}

static void remote_put_leave(PyObject *self)
{
	((RemoteObject *)self)->busy = 0;
}

static struct cistern_meta *remote_put_scratch(PyObject *self, size_t n)
{
	RemoteObject *ro = (RemoteObject *)self;
	if (n > ro->scratch_cap) {
		struct cistern_meta *m = PyMem_Realloc(ro->scratch, n * sizeof(*m));
		if (!m) {
			PyErr_NoMemory();
			return NULL;
		}
		ro->scratch = m;
		ro->scratch_cap = n;
	}
	return ro->scratch;
}

static int remote_put_one(void *r, const void *buf, size_t len, struct cistern_meta *m, int t)
{
	return remote_wait_result(cistern_remote_put(r, buf, len, m, t), t);
}

static int remote_put_rows(void *r, const void *buf, size_t item, size_t n, struct cistern_meta *m,
			   int t)
{
	return remote_wait_result(cistern_remote_put_batch(r, buf, item, n, NULL, m, t), t);
}

/* The server checks the size; a remote put returns no sample id. */
static const struct cx_put_ops remote_put_ops = {
	.enter = remote_put_enter,
	.leave = remote_put_leave,
	.scratch = remote_put_scratch,
	.room = NULL,
	.put = remote_put_one,
	.put_batch = remote_put_rows,
	.ids = false,
};

static PyObject *Remote_put(RemoteObject *ro, PyObject *args, PyObject *kw)
{
	return cx_put((PyObject *)ro, &remote_put_ops, args, kw);
}

struct remote_prio_ctx {
	struct cistern_remote *r;
	const void *buf;
	size_t len;
	struct cistern_meta meta;
	double priority;
};

static int remote_prio_attempt(void *p, int t)
{
	struct remote_prio_ctx *x = p;
	return remote_wait_result(
		cistern_remote_put_prioritized(x->r, x->buf, x->len, &x->meta, x->priority, t), t);
}

static PyObject *Remote_put_prioritized(RemoteObject *ro, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data",       "priority",       "sim_id", "time_step",
				 "timeout_ms", "end_of_episode", NULL};
	Py_buffer view;
	struct remote_prio_ctx x = {0};
	int timeout = -1, end = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*d|O&O&O&p:put_prioritized", kwlist, &view,
					 &x.priority, cx_conv_u32, &x.meta.sim_id, cx_conv_u32,
					 &x.meta.time_step, cx_conv_timeout, &timeout, &end))
		return NULL;
	PyObject *res = NULL;
	if (!isfinite(x.priority) || x.priority < 0) {
		PyObject *f = PyFloat_FromDouble(x.priority);
		if (f) {
			PyErr_Format(PyExc_ValueError,
				     "priority %R refused: a priority must be finite and >= 0", f);
			Py_DECREF(f);
		}
		goto out;
	}
	x.meta.flags = end ? CISTERN_META_END_OF_EPISODE : 0;
	if (remote_enter(ro) < 0)
		goto out;
	x.r = ro->r;
	x.buf = view.buf;
	x.len = (size_t)view.len;
	int r = cx_wait_sliced(remote_prio_attempt, &x, timeout);
	ro->busy = 0;
	if (r == -ENOTSUP)
		PyErr_SetString(PyExc_ValueError, "priority refused: none of the server's "
						  "segments is prioritized (nothing was sent)");
	else if (r < 0)
		cx_raise_result(r);
	else {
		Py_INCREF(Py_None);
		res = Py_None;
	}
out:
	PyBuffer_Release(&view);
	return res;
}

static PyObject *Remote_put_batch(RemoteObject *ro, PyObject *args, PyObject *kw)
{
	return cx_put_batch((PyObject *)ro, &remote_put_ops, args, kw);
}

static int rflush_attempt(void *p, int t)
{
	return remote_wait_result(cistern_remote_flush(p, t), t);
}

static int rdone_attempt(void *p, int t)
{
	return remote_wait_result(cistern_remote_producer_done(p, t), t);
}

static PyObject *remote_wait_call(RemoteObject *ro, PyObject *args, PyObject *kw, cx_attempt_fn fn,
				  const char *fmt)
{
	static char *kwlist[] = {"timeout_ms", NULL};
	int timeout = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, cx_conv_timeout, &timeout))
		return NULL;
	if (remote_enter(ro) < 0)
		return NULL;
	int r = cx_wait_sliced(fn, ro->r, timeout);
	ro->busy = 0;
	if (r < 0)
		return cx_raise_result(r);
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
		return cx_raise_result(r);
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
		return cx_raise_result((int)n);
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
	if (ro->pid != cx_self_pid)
		Py_RETURN_NONE;
	Py_BEGIN_ALLOW_THREADS cistern_remote_close(r);
	Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static void Remote_dealloc(RemoteObject *ro)
{
	/* Not in a forked child: see Remote_close(). */
	if (ro->r && ro->pid == cx_self_pid)
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
	 "put($self, /, data, sim_id=0, time_step=0, timeout_ms=-1, end_of_episode=False)\n"
	 "--\n\n"
	 "Send the bytes of a C-contiguous buffer as one sample (cistern_remote_put()),\n"
	 "waiting while the window of samples in flight is full. end_of_episode=True\n"
	 "marks it as the last step of its episode (CISTERN_META_END_OF_EPISODE)."},
	{"put_prioritized", (PyCFunction)(void (*)(void))Remote_put_prioritized,
	 METH_VARARGS | METH_KEYWORDS,
	 "put_prioritized($self, /, data, priority, sim_id=0, time_step=0, timeout_ms=-1,\n"
	 "                end_of_episode=False)\n"
	 "--\n\n"
	 "Send one sample with a priority (cistern_remote_put_prioritized()), as put().\n"
	 "ValueError for a priority that is not finite and >= 0, or when none of the\n"
	 "server's segments is prioritized (nothing is sent)."},
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

PyTypeObject cx_RemoteType = {
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
					 cx_conv_u32, &x.opts.window, &x.opts.linger_us))
		return NULL;
	RemoteObject *ro = PyObject_New(RemoteObject, &cx_RemoteType);
	if (!ro)
		return NULL;
	ro->r = NULL;
	ro->pid = cx_self_pid;
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
		return cx_raise_result(r);
	}
	ro->r = x.r;
	return (PyObject *)ro;
}

static PyObject *mod_remote_keygen(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
	char pub[CISTERN_KEY_LEN + 1], sec[CISTERN_KEY_LEN + 1];
	int r = cistern_remote_keygen(pub, sec);
	if (r < 0)
		return cx_raise_result(r);
	return Py_BuildValue("(ss)", pub, sec);
}

PyMethodDef cx_remote_functions[] = {
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
	{NULL, NULL, 0, NULL},
};
