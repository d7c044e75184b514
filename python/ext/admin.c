/* SPDX-License-Identifier: MIT */
/*
 * admin.c - the module functions that inspect, list, collect, remove, dump and
 * restore segments.
 */
#include "cistern_ext.h"

/* ------------------------------------------ inspection, gc, dump, restore */

static PyObject *mod_open_readonly(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *name;
	if (!PyArg_ParseTuple(args, "s:open_readonly", &name) || cx_check_name(name) < 0)
		return NULL;
	struct cistern *c = NULL;
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_open_readonly(name, &c);
	Py_END_ALLOW_THREADS if (r < 0) return cx_raise_for_name(r, name);
	return (PyObject *)cx_handle_new(c);
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
		cfg = cx_config_dict(&si->config);
	else
		Py_INCREF(cfg);
	if (cx_dict_set_steal(d, "name", PyUnicode_FromString(si->name)) < 0 ||
	    cx_dict_set_steal(d, "status", PyLong_FromLong(si->status)) < 0 ||
	    cx_dict_set_steal(d, "config", cfg) < 0 ||
	    cx_dict_set_u64(d, "file_size", si->file_size) < 0 ||
	    cx_dict_set_u64(d, "created_ns", si->created_ns) < 0 ||
	    cx_dict_set_u64(d, "uid", si->uid) < 0 || cx_dict_set_u64(d, "mode", si->mode) < 0 ||
	    cx_dict_set_u64(d, "population", si->population) < 0 ||
	    cx_dict_set_u64(d, "procs_live", si->procs_live) < 0 ||
	    cx_dict_set_u64(d, "procs_dead", si->procs_dead) < 0 ||
	    cx_dict_set_bool(d, "closed", si->closed) < 0) {
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
	Py_END_ALLOW_THREADS if (r < 0) return cx_raise_result(r);
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
	    cx_check_name(name) < 0)
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
		return cx_raise_for_name(r, name);
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
	    cx_check_name(name) < 0)
		return NULL;
	unsigned flags = (dry ? CISTERN_GC_DRY_RUN : 0) | (any_owner ? CISTERN_GC_ANY_OWNER : 0) |
			 (discard ? CISTERN_GC_DISCARD : 0);
	struct cistern_gc_report rep;
	memset(&rep, 0, sizeof(rep));
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_gc_dump_to(name, dir, flags, &rep);
	Py_END_ALLOW_THREADS if (r < 0) return cx_raise_for_name(r, name);
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	if (cx_dict_set_u64(d, "dead_procs", rep.dead_procs) < 0 ||
	    cx_dict_set_u64(d, "reservations", rep.reservations) < 0 ||
	    cx_dict_set_u64(d, "redelivered", rep.redelivered) < 0 ||
	    cx_dict_set_u64(d, "pins", rep.pins) < 0 ||
	    cx_dict_set_u64(d, "live_procs", rep.live_procs) < 0 ||
	    cx_dict_set_steal(d, "removed", PyLong_FromLong(rep.removed)) < 0 ||
	    cx_dict_set_u64(d, "unread", rep.unread) < 0 ||
	    cx_dict_set_u64(d, "dumped", rep.dumped) < 0 ||
	    cx_dict_set_bool(d, "kept", rep.kept) < 0) {
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
	if (cx_dict_set_steal(d, "name", PyUnicode_FromString(di->name)) < 0 ||
	    cx_dict_set_steal(d, "config", cx_config_dict(&di->config)) < 0 ||
	    cx_dict_set_steal(d, "stats", cx_stats_dict(&di->stats)) < 0 ||
	    cx_dict_set_u64(d, "samples", di->samples) < 0 ||
	    cx_dict_set_u64(d, "payload_bytes", di->payload_bytes) < 0 ||
	    cx_dict_set_u64(d, "skipped", di->skipped) < 0 ||
	    cx_dict_set_u64(d, "next_id", di->next_id) < 0 ||
	    cx_dict_set_u64(d, "created_ns", di->created_ns) < 0 ||
	    cx_dict_set_u64(d, "dumped_ns", di->dumped_ns) < 0 ||
	    cx_dict_set_u64(d, "file_size", di->file_size) < 0 ||
	    cx_dict_set_u64(d, "format_version", di->format_version) < 0 ||
	    cx_dict_set_bool(d, "closed", di->closed) < 0 ||
	    cx_dict_set_u64(d, "cold_samples", di->cold_samples) < 0) {
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
	return cx_raise_result(r);
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
	if (cx_check_name(name) < 0 || check_progress(progress) < 0)
		goto out;
	struct cistern_dump_info di;
	memset(&di, 0, sizeof(di));
	int r;
	const char *p = PyBytes_AS_STRING(path);
	Py_BEGIN_ALLOW_THREADS r = cistern_dump(name, p, progress != Py_None ? progress_call : NULL,
						progress, &di);
	Py_END_ALLOW_THREADS if (r == -ENOENT || r == -EACCES || r == -EPROTO ||
				 r == -EPROTONOSUPPORT || r == -EAGAIN)
		res = cx_raise_for_name(r, name); /* the errors of cistern_open_readonly() */
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
	if ((name && cx_check_name(name) < 0) || check_progress(progress) < 0)
		goto out;
	struct cistern_dump_info di;
	memset(&di, 0, sizeof(di));
	int r;
	const char *p = PyBytes_AS_STRING(path);
	Py_BEGIN_ALLOW_THREADS r = cistern_restore(
		p, name, progress != Py_None ? progress_call : NULL, progress, &di);
	Py_END_ALLOW_THREADS if (r == -EEXIST) res = cx_raise_for_name(r, name ? name : di.name);
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

PyMethodDef cx_admin_functions[] = {
	{"open_readonly", mod_open_readonly, METH_VARARGS,
	 "open_readonly(name, /)\n--\n\n"
	 "Open segment `name` for inspection only (cistern_open_readonly()): a Handle on\n"
	 "which config(), stats(), occupancy() and procs() work and calls that move\n"
	 "samples raise OSError(EBADF). It takes no attachment entry."},
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
	{"slot_class_name", mod_slot_class_name, METH_VARARGS,
	 "slot_class_name(number, /)\n--\n\n"
	 "The name of slot class `number` (cistern_slot_class_name()), as occupancy()\n"
	 "counts them."},
	{NULL, NULL, 0, NULL},
};
