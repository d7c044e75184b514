/* SPDX-License-Identifier: MIT */
/*
 * sample.c - the Sample type: one acquired sample, a pair, a batch or a member.
 */
#include "cistern_ext.h"

/* Copy the n members of ss into out (row i at i * item) and their metadata into metas. */
void cx_copy_rows(const struct cistern_sample *ss, size_t n, char *out, size_t item,
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

SampleObject *cx_sample_alloc(enum sample_kind kind, size_t n)
{
	SampleObject *so = PyObject_New(SampleObject, &cx_SampleType);
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
PyObject *cx_sample_attach(SampleObject *so, HandleObject *h)
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

/* ------------------------------------------------------------------ Sample */

void cx_sample_do_release(SampleObject *s)
{
	if (!s->held)
		return;
	s->held = 0;
	HandleObject *h = s->h;
	if (!h || !h->c || h->detached || h->pid != cx_self_pid)
		return;
	/*
	 * Not while a call on this handle is in flight (the garbage collector freeing
	 * a sample during it, in this thread or another): the call's end does it.
	 */
	if (h->busy) {
		if (s->kind != KIND_MEMBER)
			cx_handle_defer_release(h, s->ss, s->n);
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
	if (cx_kind_is_group(s->kind)) {
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
	cx_sample_do_release(s);
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
	if (!s->held || !h || !h->c || h->detached || h->pid != cx_self_pid) {
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
		return cx_raise_result(first);
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
	if (!cx_kind_is_group(s->kind)) {
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
	if (cx_opt_writable(metas_obj, &metas, &have_metas, n * 3 * (Py_ssize_t)sizeof(uint64_t),
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
	cx_copy_rows(s->ss, s->n, out.buf, (size_t)item, have_metas ? metas.buf : NULL);
	res = PyLong_FromSsize_t(n);
out_buf:
	if (have_metas)
		PyBuffer_Release(&metas);
	PyBuffer_Release(&out);
	return res;
}

static PyObject *Sample_member(SampleObject *s, PyObject *arg)
{
	if (!cx_kind_is_group(s->kind)) {
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
	SampleObject *m = cx_sample_alloc(KIND_MEMBER, 1);
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
		cx_sample_do_release(s);
		if (s->prev)
			s->prev->next = s->next;
		else
			h->samples = s->next;
		if (s->next)
			s->next->prev = s->prev;
		cx_handle_finish_detach(h);
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
	if (cx_kind_is_group(s->kind)) {
		PyObject *l = PyList_New((Py_ssize_t)s->n);
		if (!l)
			return NULL;
		for (size_t i = 0; i < s->n; i++) {
			PyObject *m = cx_meta_tuple(&s->ss[i].meta);
			if (!m) {
				Py_DECREF(l);
				return NULL;
			}
			PyList_SET_ITEM(l, (Py_ssize_t)i, m);
		}
		return l;
	}
	return cx_meta_tuple(s->kind == KIND_MEMBER ? &s->parent->ss[s->index].meta
						    : &s->ss[0].meta);
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
	if (cx_kind_is_group(s->kind))
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

PyTypeObject cx_SampleType = {
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
