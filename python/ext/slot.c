/* SPDX-License-Identifier: MIT */
/*
 * slot.c - the Slot type: a reservation from cistern_reserve(), a writable
 * buffer over the slot (numpy.frombuffer(slot, ...) writes the payload in
 * place), then commit() or abort(). It holds its Handle, which defers the real detach while any Slot
 * object lives, as for Samples: a numpy view kept after the end of the
 * reservation never faults. New buffer requests on an ended reservation fail.
 */
#include "cistern_ext.h"

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

void cx_slots_abort_all(HandleObject *h)
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
	return cx_handle_enter(so->h);
}

static PyObject *Slot_commit(SlotObject *so, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"length", "sim_id", "time_step", "end_of_episode", NULL};
	Py_ssize_t len;
	struct cistern_meta meta = {0};
	int end = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O&O&p:commit", kwlist, &len, cx_conv_u32,
					 &meta.sim_id, cx_conv_u32, &meta.time_step, &end))
		return NULL;
	meta.flags = end ? CISTERN_META_END_OF_EPISODE : 0;
	if (len < 0) {
		PyErr_SetString(PyExc_ValueError, "commit: length must be >= 0");
		return NULL;
	}
	if (slot_enter(so) < 0)
		return NULL;
	int r = cistern_commit(so->h->c, &so->slot, (size_t)len, &meta);
	cx_handle_leave(so->h);
	if (r < 0)
		return cx_raise_result(r); /* still reserved: the caller may abort */
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
	cx_handle_leave(so->h);
	so->live = 0;
	if (r < 0)
		return cx_raise_result(r);
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
		cx_handle_finish_detach(h);
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
	 "commit($self, /, length, sim_id=0, time_step=0, end_of_episode=False)\n--\n\n"
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

PyTypeObject cx_SlotType = {
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
