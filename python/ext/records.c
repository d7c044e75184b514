/* SPDX-License-Identifier: MIT */
/*
 * records.c - the C structs as the dicts that the Python records
 * (cistern/records.py) wrap. A field added here is added to its record there
 * and to its TypedDict in cistern/_cistern.pyi: python/tests/test_typing.py
 * compares the three.
 */
#include "cistern_ext.h"

PyObject *cx_meta_tuple(const struct cistern_meta *m)
{
	return Py_BuildValue("(KII)", (unsigned long long)m->sample_id, (unsigned int)m->sim_id,
			     (unsigned int)m->time_step);
}

int cx_dict_set_u64(PyObject *d, const char *k, uint64_t v)
{
	PyObject *o = PyLong_FromUnsignedLongLong(v);
	if (!o)
		return -1;
	int r = PyDict_SetItemString(d, k, o);
	Py_DECREF(o);
	return r;
}

int cx_dict_set_f64(PyObject *d, const char *k, double v)
{
	PyObject *o = PyFloat_FromDouble(v);
	if (!o)
		return -1;
	int r = PyDict_SetItemString(d, k, o);
	Py_DECREF(o);
	return r;
}

int cx_dict_set_bool(PyObject *d, const char *k, bool v)
{
	return PyDict_SetItemString(d, k, v ? Py_True : Py_False);
}

/* A list of n uint64 counts. */
PyObject *cx_u64_list(const uint64_t *v, size_t n)
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
int cx_dict_set_steal(PyObject *d, const char *k, PyObject *v)
{
	if (!v)
		return -1;
	int r = PyDict_SetItemString(d, k, v);
	Py_DECREF(v);
	return r;
}

/* struct cistern_stats as the dict that Handle.stats() returns. */
PyObject *cx_stats_dict(const struct cistern_stats *st)
{
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	if (cx_dict_set_steal(d, "seen_hist", cx_u64_list(st->seen_hist, CISTERN_SEEN_BUCKETS)) <
		    0 ||
	    cx_dict_set_u64(d, "population", st->population) < 0 ||
	    cx_dict_set_u64(d, "puts", st->puts) < 0 || cx_dict_set_u64(d, "gets", st->gets) < 0 ||
	    cx_dict_set_u64(d, "evictions", st->evictions) < 0 ||
	    cx_dict_set_u64(d, "evicted_unseen", st->evicted_unseen) < 0 ||
	    cx_dict_set_u64(d, "redeliveries", st->redeliveries) < 0 ||
	    cx_dict_set_u64(d, "reclaimed", st->reclaimed) < 0 ||
	    cx_dict_set_u64(d, "producer_waits", st->producer_waits) < 0 ||
	    cx_dict_set_u64(d, "producer_wait_ns", st->producer_wait_ns) < 0 ||
	    cx_dict_set_u64(d, "reader_waits", st->reader_waits) < 0 ||
	    cx_dict_set_u64(d, "reader_wait_ns", st->reader_wait_ns) < 0 ||
	    cx_dict_set_u64(d, "unpaired", st->unpaired) < 0 ||
	    cx_dict_set_u64(d, "procs_attached", st->procs_attached) < 0 ||
	    cx_dict_set_u64(d, "producers_expected", st->producers_expected) < 0 ||
	    cx_dict_set_u64(d, "producers_done", st->producers_done) < 0 ||
	    cx_dict_set_u64(d, "producers_died", st->producers_died) < 0 ||
	    cx_dict_set_u64(d, "cold_slots", st->cold_slots) < 0 ||
	    cx_dict_set_u64(d, "cold_population", st->cold_population) < 0 ||
	    cx_dict_set_u64(d, "cold_disk_bytes", st->cold_disk_bytes) < 0 ||
	    cx_dict_set_u64(d, "cold_spilled", st->cold_spilled) < 0 ||
	    cx_dict_set_u64(d, "cold_reads", st->cold_reads) < 0 ||
	    cx_dict_set_u64(d, "cold_evictions", st->cold_evictions) < 0 ||
	    cx_dict_set_u64(d, "cold_bytes_written", st->cold_bytes_written) < 0 ||
	    cx_dict_set_u64(d, "cold_bytes_read", st->cold_bytes_read) < 0 ||
	    cx_dict_set_u64(d, "cold_write_wait_ns", st->cold_write_wait_ns) < 0 ||
	    cx_dict_set_u64(d, "cold_read_wait_ns", st->cold_read_wait_ns) < 0 ||
	    cx_dict_set_u64(d, "cold_stage_bytes", st->cold_stage_bytes) < 0 ||
	    cx_dict_set_u64(d, "cold_groups_staged", st->cold_groups_staged) < 0 ||
	    cx_dict_set_u64(d, "cold_groups_writing", st->cold_groups_writing) < 0 ||
	    cx_dict_set_u64(d, "cold_write_waits", st->cold_write_waits) < 0 ||
	    cx_dict_set_bool(d, "reception_closed", st->reception_closed) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

PyObject *cx_config_dict(const struct cistern_config *cfg)
{
	const char *pname = cistern_policy_name(cfg->policy);
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	PyObject *pn = pname ? PyUnicode_FromString(pname) : PyLong_FromLong((long)cfg->policy);
	if (cx_dict_set_steal(d, "policy", pn) < 0 ||
	    cx_dict_set_u64(d, "slots", cfg->slot_count) < 0 ||
	    cx_dict_set_u64(d, "slot_size", cfg->slot_size) < 0 ||
	    cx_dict_set_u64(d, "mode", cfg->mode) < 0 ||
	    cx_dict_set_u64(d, "watermark", cfg->watermark) < 0 ||
	    cx_dict_set_u64(d, "pseudo_epochs", cfg->pseudo_epochs) < 0 ||
	    cx_dict_set_u64(d, "sweep_size", cfg->sweep_size) < 0 ||
	    cx_dict_set_u64(d, "time_steps", cfg->nb_time_steps) < 0 ||
	    cx_dict_set_u64(d, "batch_size", cfg->batch_size) < 0 ||
	    cx_dict_set_u64(d, "max_times_sampled", cfg->max_times_sampled) < 0 ||
	    cx_dict_set_u64(d, "seed", cfg->seed) < 0 ||
	    cx_dict_set_u64(d, "max_procs", cfg->max_procs) < 0 ||
	    cx_dict_set_u64(d, "expected_producers", cfg->expected_producers) < 0 ||
	    cx_dict_set_u64(d, "flags", cfg->flags) < 0 ||
	    cx_dict_set_bool(d, "lossy", cfg->flags & CISTERN_LOSSY) < 0 ||
	    cx_dict_set_bool(d, "single_producer", cfg->flags & CISTERN_SINGLE_PRODUCER) < 0 ||
	    cx_dict_set_bool(d, "single_reader", cfg->flags & CISTERN_SINGLE_READER) < 0 ||
	    cx_dict_set_bool(d, "dead_producer_done", cfg->flags & CISTERN_DEAD_PRODUCER_DONE) <
		    0 ||
	    cx_dict_set_f64(d, "reads_per_put", cfg->reads_per_put) < 0 ||
	    cx_dict_set_f64(d, "rate_slack", cfg->rate_slack) < 0 ||
	    cx_dict_set_f64(d, "alpha", cfg->alpha) < 0 ||
	    cx_dict_set_f64(d, "beta", cfg->beta) < 0 ||
	    cx_dict_set_f64(d, "epsilon", cfg->epsilon) < 0 ||
	    cx_dict_set_steal(d, "schema",
			      cfg->schema ? PyUnicode_FromString(cfg->schema)
					  : (Py_INCREF(Py_None), Py_None)) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

/* A schema's fields, size and canonical text as the dict Handle.schema() returns. */
PyObject *cx_schema_dict(const char *text, const struct cistern_field *f, int n, uint64_t size)
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
		if (cx_dict_set_steal(fd, "name", PyUnicode_FromString(f[i].name)) < 0 ||
		    cx_dict_set_steal(fd, "dtype",
				      PyUnicode_FromString(cistern_dtype_name(f[i].dtype))) < 0 ||
		    cx_dict_set_steal(fd, "shape", shape) < 0 ||
		    cx_dict_set_u64(fd, "offset", f[i].offset) < 0 ||
		    cx_dict_set_u64(fd, "size", f[i].size) < 0 ||
		    cx_dict_set_u64(fd, "itemsize", f[i].itemsize) < 0)
			goto fail;
	}
	if (cx_dict_set_steal(d, "text", PyUnicode_FromString(text)) < 0 ||
	    cx_dict_set_u64(d, "size", size) < 0 || PyDict_SetItemString(d, "fields", l) < 0)
		goto fail;
	Py_DECREF(l);
	return d;
fail:
	Py_XDECREF(l);
	Py_XDECREF(d);
	return NULL;
}

PyObject *cx_proc_dict(const struct cistern_proc_info *p)
{
	PyObject *d = PyDict_New();
	if (!d)
		return NULL;
	/* The kernel's comm is any bytes: undecodable ones become U+FFFD. */
	if (cx_dict_set_u64(d, "index", p->index) < 0 || cx_dict_set_u64(d, "pid", p->pid) < 0 ||
	    cx_dict_set_u64(d, "uid", p->uid) < 0 || cx_dict_set_u64(d, "role", p->role) < 0 ||
	    cx_dict_set_bool(d, "alive", p->alive) < 0 ||
	    cx_dict_set_u64(d, "waiting", p->waiting) < 0 ||
	    cx_dict_set_u64(d, "attached_ns", p->attached_ns) < 0 ||
	    cx_dict_set_u64(d, "puts", p->puts) < 0 || cx_dict_set_u64(d, "gets", p->gets) < 0 ||
	    cx_dict_set_steal(d, "comm",
			      PyUnicode_DecodeUTF8(p->comm,
						   (Py_ssize_t)strnlen(p->comm, sizeof(p->comm)),
						   "replace")) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}
