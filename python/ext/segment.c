/* SPDX-License-Identifier: MIT */
/*
 * segment.c - the module functions that create, attach and name segments and
 * parse schemas and policies.
 */
#include <pwd.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cistern_ext.h"

/* ------------------------------------------------------------------ module */

/*
 * The fields of struct cistern_config that create() and config_problem() take,
 * as keywords, PyArg formats and targets, in one place so that both stay alike.
 */
#define CFG_KWLIST                                                                                 \
	"policy", "slot_size", "slot_count", "mode", "watermark", "pseudo_epochs", "sweep_size",   \
		"nb_time_steps", "batch_size", "seed", "max_procs", "expected_producers", "flags", \
		"reads_per_put", "rate_slack", "schema", "alpha", "beta", "epsilon", "cold_slots", \
		"cold_dir", "max_times_sampled"
#define CFG_FORMAT "O&O&O&O&O&O&O&O&O&O&O&O&O&ddzdddO&zO&"
#define CFG_TARGETS(cfg, policy)                                                                   \
	cx_conv_u32, &(policy), cx_conv_u64, &(cfg).slot_size, cx_conv_u64, &(cfg).slot_count,     \
		cx_conv_u32, &(cfg).mode, cx_conv_u64, &(cfg).watermark, cx_conv_u32,              \
		&(cfg).pseudo_epochs, cx_conv_u32, &(cfg).sweep_size, cx_conv_u32,                 \
		&(cfg).nb_time_steps, cx_conv_u32, &(cfg).batch_size, cx_conv_u64, &(cfg).seed,    \
		cx_conv_u32, &(cfg).max_procs, cx_conv_u32, &(cfg).expected_producers,             \
		cx_conv_u32, &(cfg).flags, &(cfg).reads_per_put, &(cfg).rate_slack, &(cfg).schema, \
		&(cfg).alpha, &(cfg).beta, &(cfg).epsilon, cx_conv_u64, &(cfg).cold_slots,         \
		&(cfg).cold_dir, cx_conv_u32, &(cfg).max_times_sampled

/* Store the parsed policy number in cfg; ValueError if it names no policy. */
static int cfg_set_policy(struct cistern_config *cfg, uint32_t policy)
{
	if (policy >= CISTERN_POLICY_COUNT) {
		PyErr_Format(PyExc_ValueError, "unknown policy number %u", (unsigned int)policy);
		return -1;
	}
	cfg->policy = (enum cistern_policy)policy;
	return 0;
}

static PyObject *mod_create(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", CFG_KWLIST, NULL};
	const char *name;
	struct cistern_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	uint32_t policy = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|" CFG_FORMAT ":create", kwlist, &name,
					 CFG_TARGETS(cfg, policy)))
		return NULL;
	if (cx_check_name(name) < 0 || cfg_set_policy(&cfg, policy) < 0)
		return NULL;
	struct cistern *c = NULL;
	int r;
	Py_BEGIN_ALLOW_THREADS r = cistern_create(name, &cfg, &c);
	Py_END_ALLOW_THREADS const char *why = r == -EINVAL ? cistern_config_problem(&cfg) : NULL;
	if (why) {
		PyErr_Format(PyExc_ValueError, "parameters refused: %s", why);
		return NULL;
	}
	if (r < 0)
		return cx_raise_for_name(r, name);
	return (PyObject *)cx_handle_new(c);
}

static PyObject *mod_config_problem(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {CFG_KWLIST, NULL};
	struct cistern_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	uint32_t policy = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|" CFG_FORMAT ":config_problem", kwlist,
					 CFG_TARGETS(cfg, policy)))
		return NULL;
	if (cfg_set_policy(&cfg, policy) < 0)
		return NULL;
	const char *why = cistern_config_problem(&cfg);
	if (!why)
		Py_RETURN_NONE;
	return PyUnicode_FromString(why);
}

/* The canonical text of parsed fields, as the library writes it into a segment. */
static void canonical(const struct cistern_field *f, int n, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = '\0';
	for (int i = 0; i < n && o < cap; i++) {
		o += (size_t)snprintf(buf + o, cap - o, "%s%s:%s[", i ? ";" : "", f[i].name,
				      cistern_dtype_name(f[i].dtype));
		for (uint32_t d = 0; d < f[i].ndim && o < cap; d++)
			o += (size_t)snprintf(buf + o, cap - o, "%s%llu", d ? "," : "",
					      (unsigned long long)f[i].shape[d]);
		if (o < cap)
			o += (size_t)snprintf(buf + o, cap - o, "]");
	}
}

static PyObject *mod_schema_parse(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *text;
	if (!PyArg_ParseTuple(args, "s:schema_parse", &text))
		return NULL;
	uint64_t size = 0;
	int n = cistern_schema_parse(text, NULL, 0, &size);
	if (n < 0) {
		/* The library's sentence, judged on its own: the largest slot holds any schema. */
		struct cistern_config cfg = {
			.slot_size = CISTERN_SLOT_SIZE_MAX, .slot_count = 1, .schema = text};
		const char *why = cistern_config_problem(&cfg);
		PyErr_SetString(PyExc_ValueError, why ? why : cistern_strerror(n));
		return NULL;
	}
	if (n == 0) {
		PyErr_SetString(PyExc_ValueError, "schema has no field");
		return NULL;
	}
	struct cistern_field *f = PyMem_Calloc((size_t)n, sizeof(*f));
	if (!f)
		return PyErr_NoMemory();
	cistern_schema_parse(text, f, (size_t)n, &size);
	char canon[CISTERN_SCHEMA_MAX + 16];
	canonical(f, n, canon, sizeof(canon));
	PyObject *res = cx_schema_dict(canon, f, n, size);
	PyMem_Free(f);
	return res;
}

static PyObject *mod_dtype_name(PyObject *Py_UNUSED(m), PyObject *args)
{
	int t;
	if (!PyArg_ParseTuple(args, "i:dtype_name", &t))
		return NULL;
	const char *n = t >= 0 ? cistern_dtype_name((enum cistern_dtype)t) : NULL;
	if (!n) {
		PyErr_Format(PyExc_ValueError, "unknown dtype number %d", t);
		return NULL;
	}
	return PyUnicode_FromString(n);
}

/*
 * An attach refused with -EACCES for an object of another user than ours or
 * root: PermissionError naming the owner and the way to allow it. NULL with
 * nothing raised if that is not why (the segment's mode refused us).
 */
static PyObject *raise_not_owner(const char *name)
{
	char path[160];
	struct stat st;
	snprintf(path, sizeof(path), "/dev/shm/cistern.%s", name);
	if (lstat(path, &st) < 0 || st.st_uid == 0 || st.st_uid == geteuid())
		return NULL;
	char who[96];
	struct passwd *pw = getpwuid(st.st_uid);
	if (pw)
		snprintf(who, sizeof(who), "user %s (uid %u)", pw->pw_name, (unsigned)st.st_uid);
	else
		snprintf(who, sizeof(who), "uid %u", (unsigned)st.st_uid);
	PyObject *msg = PyUnicode_FromFormat(
		"segment owned by %s, not by this process's user or root: refused (anyone may "
		"create a segment's name first, to collect what is put into it); to share a "
		"segment between users on purpose, attach with any_owner=True",
		who);
	PyObject *a = msg ? Py_BuildValue("(iOs)", EACCES, msg, name) : NULL;
	if (a)
		PyErr_SetObject(PyExc_PermissionError, a);
	Py_XDECREF(a);
	Py_XDECREF(msg);
	return NULL;
}

static PyObject *mod_attach(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "any_owner", "populate", "producer", NULL};
	const char *name;
	int any_owner = 0, populate = 0, producer = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ppp:attach", kwlist, &name, &any_owner,
					 &populate, &producer) ||
	    cx_check_name(name) < 0)
		return NULL;
	struct cistern *c = NULL;
	int r;
	uint32_t flags = (any_owner ? CISTERN_ATTACH_ANY_OWNER : 0u) |
			 (populate ? CISTERN_ATTACH_POPULATE : 0u) |
			 (producer ? CISTERN_ATTACH_PRODUCER : 0u);
	Py_BEGIN_ALLOW_THREADS r = cistern_attach_flags(name, flags, &c);
	Py_END_ALLOW_THREADS if (r == -EACCES && !any_owner)
	{
		raise_not_owner(name);
		if (PyErr_Occurred())
			return NULL;
	}
	if (r < 0)
		return cx_raise_for_name(r, name);
	return (PyObject *)cx_handle_new(c);
}

static PyObject *mod_unlink(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *name;
	if (!PyArg_ParseTuple(args, "s:unlink", &name) || cx_check_name(name) < 0)
		return NULL;
	int r = cistern_unlink(name);
	if (r < 0)
		return cx_raise_for_name(r, name);
	Py_RETURN_NONE;
}

static PyObject *mod_strerror(PyObject *Py_UNUSED(m), PyObject *args)
{
	int code;
	if (!PyArg_ParseTuple(args, "i:strerror", &code))
		return NULL;
	return PyUnicode_FromString(cistern_strerror(code));
}

static PyObject *mod_policy_parse(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *s;
	if (!PyArg_ParseTuple(args, "s:policy_parse", &s))
		return NULL;
	enum cistern_policy p;
	if (cistern_policy_parse(s, &p) < 0) {
		PyErr_Format(PyExc_ValueError, "unknown policy %R", PyTuple_GET_ITEM(args, 0));
		return NULL;
	}
	return PyLong_FromLong((long)p);
}

static PyObject *mod_policy_name(PyObject *Py_UNUSED(m), PyObject *args)
{
	int p;
	if (!PyArg_ParseTuple(args, "i:policy_name", &p))
		return NULL;
	const char *n = p >= 0 ? cistern_policy_name((enum cistern_policy)p) : NULL;
	if (!n) {
		PyErr_Format(PyExc_ValueError, "unknown policy number %d", p);
		return NULL;
	}
	return PyUnicode_FromString(n);
}

static PyObject *mod_name_valid(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *s;
	if (!PyArg_ParseTuple(args, "s:name_valid", &s))
		return NULL;
	return PyLong_FromLong(cistern_name_valid(s));
}

PyMethodDef cx_segment_functions[] = {
	{"create", (PyCFunction)(void (*)(void))mod_create, METH_VARARGS | METH_KEYWORDS,
	 "create(name, policy=0, slot_size=0, slot_count=0, mode=0, watermark=0, "
	 "pseudo_epochs=0, sweep_size=0, nb_time_steps=0, batch_size=0, seed=0, max_procs=0, "
	 "expected_producers=0, flags=0, reads_per_put=0.0, rate_slack=0.0, schema=None, "
	 "alpha=0.0, beta=0.0, epsilon=0.0, cold_slots=0, cold_dir=None, "
	 "max_times_sampled=0)\n--\n\n"
	 "Create segment `name` and attach to it (cistern_create()); the keywords are the\n"
	 "fields of struct cistern_config. Returns a Handle."},
	{"config_problem", (PyCFunction)(void (*)(void))mod_config_problem,
	 METH_VARARGS | METH_KEYWORDS,
	 "config_problem(policy=0, slot_size=0, slot_count=0, mode=0, watermark=0, "
	 "pseudo_epochs=0, sweep_size=0, nb_time_steps=0, batch_size=0, seed=0, max_procs=0, "
	 "expected_producers=0, flags=0, reads_per_put=0.0, rate_slack=0.0, schema=None, "
	 "alpha=0.0, beta=0.0, epsilon=0.0, cold_slots=0, cold_dir=None, "
	 "max_times_sampled=0)\n--\n\n"
	 "Why create() would refuse these parameters (cistern_config_problem()), or None."},
	{"schema_parse", mod_schema_parse, METH_VARARGS,
	 "schema_parse(text, /)\n--\n\n"
	 "Parse and lay out a schema's text (cistern_schema_parse()): a dict of its\n"
	 "canonical text, sample size and fields. ValueError, naming the field that is\n"
	 "wrong, for a bad text (or one with no field)."},
	{"dtype_name", mod_dtype_name, METH_VARARGS,
	 "dtype_name(number, /)\n--\n\n"
	 "The name of dtype `number` (cistern_dtype_name()), as schemas write it."},
	{"attach", (PyCFunction)(void (*)(void))mod_attach, METH_VARARGS | METH_KEYWORDS,
	 "attach(name, any_owner=False, populate=False, producer=False)\n--\n\n"
	 "Attach to the existing segment `name` (cistern_attach_flags()); returns a Handle.\n"
	 "A segment owned by another user than ours or root raises PermissionError\n"
	 "unless any_owner=True (CISTERN_ATTACH_ANY_OWNER). populate=True maps every\n"
	 "page now (CISTERN_ATTACH_POPULATE); producer=True counts the process as one\n"
	 "of the expected producers from the attach on (CISTERN_ATTACH_PRODUCER)."},
	{"unlink", mod_unlink, METH_VARARGS,
	 "unlink(name, /)\n--\n\n"
	 "Remove a segment's name (cistern_unlink()); attached processes keep working."},
	{"strerror", mod_strerror, METH_VARARGS,
	 "strerror(code, /)\n--\n\n"
	 "A sentence for a result code: 0 or a negative errno (cistern_strerror())."},
	{"policy_parse", mod_policy_parse, METH_VARARGS,
	 "policy_parse(name, /)\n--\n\n"
	 "The number of the policy named `name` (cistern_policy_parse())."},
	{"policy_name", mod_policy_name, METH_VARARGS,
	 "policy_name(number, /)\n--\n\n"
	 "The name of policy `number` (cistern_policy_name())."},
	{"name_valid", mod_name_valid, METH_VARARGS,
	 "name_valid(name, /)\n--\n\n"
	 "0 if `name` is a valid segment name, else a negative errno\n"
	 "(cistern_name_valid())."},
	{NULL, NULL, 0, NULL},
};
