/* SPDX-License-Identifier: MIT */
/*
 * client.c - the simulation client (cistern_sim.h): a segment or a server
 * connection, the schema's fields a simulation declared, and one staged
 * sample that each send puts as a time step.
 */
#include "cistern_sim.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cistern/remote.h"

/* The schema's fields a client can hold; a schema text of 1023 bytes has fewer. */
#define SIM_FIELDS_MAX 256
#define PROBLEM_MAX 256

struct cistern_sim {
	struct cistern *seg;         /* a local segment, or NULL */
	struct cistern_remote *conn; /* a server connection, or NULL */
	uint32_t sim_id;
	bool done;
	unsigned char *sample; /* the staged sample, sample_size bytes */
	uint64_t sample_size;
	int nfields;                  /* the schema's fields */
	struct cistern_field *fields; /* nfields of them */
	/* declared[i] is the schema index of the i-th declared field */
	int ndeclared;
	int declared[SIM_FIELDS_MAX];
	bool written[SIM_FIELDS_MAX];
	/* written in place through cistern_sim_field_data(): counts as written at every send */
	bool in_place[SIM_FIELDS_MAX];
	char problem[PROBLEM_MAX];
};

/* Why this thread's last cistern_sim_open() failed: no handle exists to keep it. */
static _Thread_local char open_problem[PROBLEM_MAX];

__attribute__((format(printf, 3, 4))) static int fail(char *buf, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, PROBLEM_MAX, fmt, ap);
	va_end(ap);
	return err;
}

static bool is_endpoint(const char *target)
{
	return strncmp(target, "tcp://", 6) == 0 || strncmp(target, "ipc://", 6) == 0;
}

static int load_schema(struct cistern_sim *s, const char *target, const char *text)
{
	int n = cistern_schema_parse(text, NULL, 0, NULL);
	if (n == 0)
		return fail(open_problem, -EINVAL,
			    "%s has no schema: a simulation client needs one to declare its fields",
			    target);
	if (n < 0)
		return fail(open_problem, n, "the schema of %s does not parse", target);
	s->fields = calloc((size_t)n, sizeof(*s->fields));
	if (!s->fields)
		return fail(open_problem, -ENOMEM, "out of memory for the schema of %s", target);
	s->nfields = cistern_schema_parse(text, s->fields, (size_t)n, &s->sample_size);
	s->sample = calloc(1, (size_t)s->sample_size);
	if (!s->sample)
		return fail(open_problem, -ENOMEM, "out of memory for a sample of %s", target);
	return 0;
}

static int open_segment(struct cistern_sim *s, const char *target)
{
	int rc = cistern_attach(target, &s->seg);
	if (rc < 0)
		return fail(open_problem, rc, "cannot attach segment %s: %s", target,
			    cistern_strerror(rc));
	char text[CISTERN_SCHEMA_MAX];
	ssize_t len = cistern_schema_get(s->seg, text, sizeof(text));
	if (len < 0)
		return fail(open_problem, (int)len, "cannot read the schema of %s", target);
	return load_schema(s, target, text);
}

static int open_remote(struct cistern_sim *s, const char *target)
{
	int rc = cistern_remote_connect(target, NULL, &s->conn);
	if (rc < 0)
		return fail(open_problem, rc, "cannot connect to %s: %s", target,
			    cistern_strerror(rc));
	char text[CISTERN_SCHEMA_MAX];
	ssize_t len = cistern_remote_schema_get(s->conn, text, sizeof(text));
	if (len < 0)
		return fail(open_problem, (int)len, "cannot read the schema of %s", target);
	return load_schema(s, target, text);
}

int cistern_sim_open(const char *target, uint32_t sim_id, struct cistern_sim **out)
{
	open_problem[0] = '\0';
	if (!target || !out)
		return fail(open_problem, -EINVAL, "cistern_sim_open() needs a target and an out");
	*out = NULL;
	struct cistern_sim *s = calloc(1, sizeof(*s));
	if (!s)
		return fail(open_problem, -ENOMEM, "out of memory for a simulation client");
	s->sim_id = sim_id;
	int rc = is_endpoint(target) ? open_remote(s, target) : open_segment(s, target);
	if (rc < 0) {
		cistern_sim_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

int cistern_sim_field(struct cistern_sim *s, const char *name, enum cistern_dtype dtype,
		      uint64_t count)
{
	if (!s || !name)
		return -EINVAL;
	int f = -1;
	for (int i = 0; i < s->nfields; i++)
		if (strcmp(s->fields[i].name, name) == 0)
			f = i;
	if (f < 0)
		return fail(s->problem, -ENOENT, "the schema has no field named %s", name);
	const struct cistern_field *fd = &s->fields[f];
	if (fd->dtype != dtype) {
		const char *want = cistern_dtype_name(dtype);
		return fail(s->problem, -EPROTOTYPE, "field %s is %s in the schema, not %s", name,
			    cistern_dtype_name(fd->dtype), want ? want : "an unknown dtype");
	}
	if (fd->size / fd->itemsize != count)
		return fail(s->problem, -EMSGSIZE,
			    "field %s holds %llu elements in the schema, not %llu", name,
			    (unsigned long long)(fd->size / fd->itemsize),
			    (unsigned long long)count);
	for (int i = 0; i < s->ndeclared; i++)
		if (s->declared[i] == f)
			return i;
	/* nfields <= SIM_FIELDS_MAX is not promised by the schema text's limit alone. */
	if (s->ndeclared == SIM_FIELDS_MAX)
		return fail(s->problem, -ENOSPC, "a client declares at most %d fields",
			    SIM_FIELDS_MAX);
	s->declared[s->ndeclared] = f;
	s->written[s->ndeclared] = false;
	s->in_place[s->ndeclared] = false;
	return s->ndeclared++;
}

static const struct cistern_field *declared(const struct cistern_sim *s, int field)
{
	if (field < 0 || field >= s->ndeclared)
		return NULL;
	return &s->fields[s->declared[field]];
}

static unsigned char *field_at(struct cistern_sim *s, int field)
{
	const struct cistern_field *fd = declared(s, field);
	if (!fd) {
		fail(s->problem, -EINVAL, "field index %d was not declared", field);
		return NULL;
	}
	return s->sample + fd->offset;
}

void *cistern_sim_field_data(struct cistern_sim *s, int field)
{
	if (!s)
		return NULL;
	unsigned char *at = field_at(s, field);
	if (at)
		s->in_place[field] = true; /* the client cannot see writes through the pointer */
	return at;
}

int64_t cistern_sim_field_bytes(const struct cistern_sim *s, int field, uint32_t *itemsize)
{
	const struct cistern_field *fd = s ? declared(s, field) : NULL;
	if (!fd)
		return -EINVAL;
	if (itemsize)
		*itemsize = fd->itemsize;
	return (int64_t)fd->size;
}

int cistern_sim_write(struct cistern_sim *s, int field, const void *data)
{
	if (!s)
		return -EINVAL;
	if (!data)
		return fail(s->problem, -EINVAL, "cistern_sim_write() needs data");
	unsigned char *to = field_at(s, field);
	if (!to)
		return -EINVAL;
	memcpy(to, data, (size_t)declared(s, field)->size);
	s->written[field] = true;
	return 0;
}

int cistern_sim_send(struct cistern_sim *s, uint32_t time_step, int timeout_ms)
{
	if (!s)
		return -EINVAL;
	if (s->done)
		return fail(s->problem, -EPIPE, "this simulation said it was done");
	for (int i = 0; i < s->ndeclared; i++)
		if (!s->written[i] && !s->in_place[i])
			return fail(s->problem, -ENODATA,
				    "field %s was not written since the last step was sent",
				    s->fields[s->declared[i]].name);
	struct cistern_meta meta = {.sim_id = s->sim_id, .time_step = time_step};
	int rc = s->seg ? cistern_put(s->seg, s->sample, (size_t)s->sample_size, &meta, timeout_ms)
			: cistern_remote_put(s->conn, s->sample, (size_t)s->sample_size, &meta,
					     timeout_ms);
	if (rc < 0)
		return fail(s->problem, rc, "step %u was not sent: %s", time_step,
			    cistern_strerror(rc));
	for (int i = 0; i < s->ndeclared; i++)
		s->written[i] = false;
	return 0;
}

int cistern_sim_done(struct cistern_sim *s, int timeout_ms)
{
	if (!s)
		return -EINVAL;
	if (s->done)
		return 0;
	int rc;
	if (s->seg) {
		struct cistern_config cfg;
		rc = cistern_config_get(s->seg, &cfg);
		if (rc == 0 && cfg.expected_producers > 0)
			rc = cistern_producer_done(s->seg);
		rc = rc < 0 ? rc : 0;
	} else {
		rc = cistern_remote_producer_done(s->conn, timeout_ms);
	}
	if (rc < 0)
		return fail(s->problem, rc, "the simulation could not say it was done: %s",
			    cistern_strerror(rc));
	s->done = true;
	return 0;
}

int cistern_sim_close(struct cistern_sim *s)
{
	if (!s)
		return 0;
	if (s->seg)
		cistern_detach(s->seg);
	if (s->conn)
		cistern_remote_close(s->conn);
	free(s->fields);
	free(s->sample);
	free(s);
	return 0;
}

uint64_t cistern_sim_sample_size(const struct cistern_sim *s)
{
	return s ? s->sample_size : 0;
}

const char *cistern_sim_problem(const struct cistern_sim *s)
{
	return s ? s->problem : open_problem;
}

struct cistern_sim_slot {
	struct cistern_slot slot;
};

int cistern_sim_reserve(struct cistern *c, struct cistern_sim_slot **slot, void **data,
			uint64_t *capacity, int timeout_ms)
{
	if (!c || !slot || !data || !capacity)
		return -EINVAL;
	struct cistern_sim_slot *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = cistern_reserve(c, &s->slot, timeout_ms);
	if (rc < 0) {
		free(s);
		return rc;
	}
	*slot = s;
	*data = s->slot.data;
	*capacity = s->slot.capacity;
	return 0;
}

int cistern_sim_commit(struct cistern *c, struct cistern_sim_slot *slot, uint64_t len,
		       uint32_t sim_id, uint32_t time_step)
{
	if (!c || !slot)
		return -EINVAL;
	if (len > slot->slot.capacity)
		return -EMSGSIZE;
	struct cistern_meta meta = {.sim_id = sim_id, .time_step = time_step};
	int rc = cistern_commit(c, &slot->slot, (size_t)len, &meta);
	if (rc == 0)
		free(slot);
	return rc;
}

int cistern_sim_abort(struct cistern *c, struct cistern_sim_slot *slot)
{
	if (!c || !slot)
		return -EINVAL;
	int rc = cistern_abort(c, &slot->slot);
	if (rc == 0)
		free(slot);
	return rc;
}
