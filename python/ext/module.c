/* SPDX-License-Identifier: MIT */
/*
 * module.c - the `_cistern` extension module under the `cistern` package: its
 * types, functions and constants, and the fork handler. cistern_ext.h says
 * which file holds what.
 */
#include <pthread.h>

#include "cistern_ext.h"

PyObject *cx_EndOfData;

pid_t cx_self_pid;

static void on_fork_child(void)
{
	cx_self_pid = getpid();
}

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "_cistern",
	.m_doc = "Low-level binding of libcistern; use the `cistern` package.",
	.m_size = -1,
};

PyMODINIT_FUNC PyInit__cistern(void);

PyMODINIT_FUNC PyInit__cistern(void)
{
	if (PyType_Ready(&cx_HandleType) < 0 || PyType_Ready(&cx_SampleType) < 0 ||
	    PyType_Ready(&cx_SlotType) < 0 || PyType_Ready(&cx_RemoteType) < 0)
		return NULL;
	cx_self_pid = getpid();
	if (pthread_atfork(NULL, NULL, on_fork_child) != 0) {
		PyErr_SetString(PyExc_ImportError, "_cistern: pthread_atfork failed");
		return NULL;
	}
	PyObject *m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	if (PyModule_AddFunctions(m, cx_segment_functions) < 0 ||
	    PyModule_AddFunctions(m, cx_admin_functions) < 0 ||
	    PyModule_AddFunctions(m, cx_remote_functions) < 0)
		goto fail;
	cx_EndOfData = PyErr_NewExceptionWithDoc(
		"cistern.EndOfData",
		"Reception is closed and the policy has nothing left to hand out.", NULL, NULL);
	if (!cx_EndOfData)
		goto fail;
	Py_INCREF(cx_EndOfData);
	if (PyModule_AddObject(m, "EndOfData", cx_EndOfData) < 0) {
		Py_DECREF(cx_EndOfData);
		goto fail;
	}
	Py_INCREF(&cx_HandleType);
	if (PyModule_AddObject(m, "Handle", (PyObject *)&cx_HandleType) < 0) {
		Py_DECREF(&cx_HandleType);
		goto fail;
	}
	Py_INCREF(&cx_SampleType);
	if (PyModule_AddObject(m, "Sample", (PyObject *)&cx_SampleType) < 0) {
		Py_DECREF(&cx_SampleType);
		goto fail;
	}
	Py_INCREF(&cx_SlotType);
	if (PyModule_AddObject(m, "Slot", (PyObject *)&cx_SlotType) < 0) {
		Py_DECREF(&cx_SlotType);
		goto fail;
	}
	Py_INCREF(&cx_RemoteType);
	if (PyModule_AddObject(m, "Remote", (PyObject *)&cx_RemoteType) < 0) {
		Py_DECREF(&cx_RemoteType);
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
	    PyModule_AddIntConstant(m, "META_END_OF_EPISODE", CISTERN_META_END_OF_EPISODE) < 0 ||
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
