/* SPDX-License-Identifier: MIT */
/*
 * schema.c - a segment's schema: its text form parsed, checked and laid out,
 * and the handle's copy of it.
 *
 * The text form (docs/SCHEMA.md), with spaces, tabs and newlines allowed
 * around every token:
 *
 *   schema := field { ';' field }
 *   field  := name ':' dtype [ '[' [ dim { ',' dim } ] ']' ]
 *   name   := [A-Za-z_][A-Za-z0-9_]*     1 to CISTERN_FIELD_NAME_MAX bytes, unique
 *   dtype  := int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64
 *           | float16 | float32 | float64 | bool
 *   dim    := a decimal number from 1 up
 *
 * No brackets, or empty ones, make a scalar; at most CISTERN_FIELD_DIMS
 * dimensions. The canonical form, the one a segment stores, drops the white
 * space and leading zeros and writes every shape in brackets.
 *
 * Layout: a C struct's. Fields in order, each at the next offset that is a
 * multiple of its item size; the sample's size rounded up to a multiple of
 * the largest item size, so that samples side by side in a batch keep every
 * field aligned. numpy.dtype(..., align=True) lays a structured dtype out the
 * same way, so a record array of that dtype is a run of samples as they are.
 *
 * Sizes stay far from overflow: a field's product of dimensions is checked
 * against CISTERN_SLOT_SIZE_MAX dimension by dimension, and so is the sum.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/open.h"

static const struct {
	const char *name;
	uint32_t size;
} dtypes[CISTERN_DTYPE_COUNT] = {
	[CISTERN_INT8] = {"int8", 1},       [CISTERN_INT16] = {"int16", 2},
	[CISTERN_INT32] = {"int32", 4},     [CISTERN_INT64] = {"int64", 8},
	[CISTERN_UINT8] = {"uint8", 1},     [CISTERN_UINT16] = {"uint16", 2},
	[CISTERN_UINT32] = {"uint32", 4},   [CISTERN_UINT64] = {"uint64", 8},
	[CISTERN_FLOAT16] = {"float16", 2}, [CISTERN_FLOAT32] = {"float32", 4},
	[CISTERN_FLOAT64] = {"float64", 8}, [CISTERN_BOOL] = {"bool", 1},
};

const char *cistern_dtype_name(enum cistern_dtype t)
{
	return (unsigned)t < CISTERN_DTYPE_COUNT ? dtypes[t].name : NULL;
}

/*
 * The sentence about a bad schema: it names the field, so it cannot be a
 * static string; one buffer per thread, overwritten by the next call.
 */
static _Thread_local char problem[320];

static const char *say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(problem, sizeof(problem), fmt, ap);
	va_end(ap);
	return problem;
}

/*
 * A character of the text, for a message: 'c' when it is printable ASCII,
 * else "the byte 0xNN", so that what the text holds (a control byte, an
 * escape sequence) never reaches a terminal through the message.
 */
static const char *shown(char ch, char buf[16])
{
	unsigned char b = (unsigned char)ch;
	if (b > 0x20 && b < 0x7f)
		snprintf(buf, 16, "'%c'", ch);
	else
		snprintf(buf, 16, "the byte 0x%02x", b);
	return buf;
}

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static bool is_alpha(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static const char *skip(const char *p)
{
	while (is_space(*p))
		p++;
	return p;
}

/*
 * How much of the text at p a message quotes as the token there: up to white
 * space or a shape's punctuation, at least one character (none at the end),
 * at most 24.
 */
static int token_len(const char *p)
{
	size_t n = 0;
	while (p[n] && !is_space(p[n]) && !strchr(",;[]", p[n]))
		n++;
	if (n == 0 && *p)
		n = 1;
	return (int)(n > 24 ? 24 : n);
}

/* The canonical text being written; `full` once something did not fit. */
struct canon {
	char text[CISTERN_SCHEMA_MAX];
	size_t len;
	bool full;
};

static void put(struct canon *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct canon *k, const char *fmt, ...)
{
	if (k->full)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(k->text + k->len, sizeof(k->text) - k->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(k->text) - k->len)
		k->full = true;
	else
		k->len += (size_t)n;
}

/* Whether the canonical text so far has a field called name (n bytes). */
static bool has_field(const struct canon *k, const char *name, size_t n)
{
	for (const char *p = k->text; p < k->text + k->len;) {
		/* Every field starts the text or follows a ';', and its name ends at ':'. */
		if (strncmp(p, name, n) == 0 && p[n] == ':')
			return true;
		p = strchr(p, ';');
		if (!p)
			break;
		p++;
	}
	return false;
}

/*
 * Parse one field at p, in the terms of field number `no` (1-based), into f;
 * *end gets where it stops. NULL, or why the text is wrong.
 */
static const char *parse_field(const char *p, unsigned no, const struct canon *k,
			       struct cistern_field *f, const char **end)
{
	memset(f, 0, sizeof(*f));
	p = skip(p);
	const char *name = p;
	while (is_alpha(*p) || is_digit(*p))
		p++;
	size_t n = (size_t)(p - name);
	char ch[16];
	if (n == 0)
		return *name == ';' || *name == '\0'
			       ? say("schema: field %u is empty (a field is name:dtype[shape])", no)
			       : say("schema: field %u: a name starts with a letter or '_' and has "
				     "only letters, digits and '_', not %s",
				     no, shown(*name, ch));
	if (*p && !is_space(*p) && *p != ':' && *p != ';')
		return say("schema: field %u: a name has only letters, digits and '_', not %s", no,
			   shown(*p, ch));
	if (is_digit(*name))
		return say("schema: field %u: the name '%.*s' starts with a digit", no,
			   (int)(n > 32 ? 32 : n), name);
	if (n > CISTERN_FIELD_NAME_MAX)
		return say("schema: field %u: the name '%.32s...' is longer than %d characters", no,
			   name, CISTERN_FIELD_NAME_MAX);
	memcpy(f->name, name, n);
	if (has_field(k, f->name, n))
		return say("schema: field '%s' appears twice", f->name);
	p = skip(p);
	if (*p != ':')
		return say("schema: field '%s': expected ':' and a dtype after the name", f->name);
	p = skip(p + 1);
	const char *t = p;
	while (is_alpha(*p) || is_digit(*p))
		p++;
	size_t tn = (size_t)(p - t);
	int dt = -1;
	for (int i = 0; i < CISTERN_DTYPE_COUNT; i++)
		if (strlen(dtypes[i].name) == tn && strncmp(dtypes[i].name, t, tn) == 0)
			dt = i;
	if (dt < 0)
		return say("schema: field '%s': unknown dtype '%.*s' (int8, int16, int32, int64, "
			   "uint8, uint16, uint32, uint64, float16, float32, float64 or bool)",
			   f->name, (int)(tn > 24 ? 24 : tn), t);
	f->dtype = (enum cistern_dtype)dt;
	f->itemsize = dtypes[dt].size;
	uint64_t count = 1;
	p = skip(p);
	if (*p == '[') {
		p = skip(p + 1);
		while (*p != ']') {
			if (f->ndim == CISTERN_FIELD_DIMS)
				return say("schema: field '%s' has more than %d dimensions",
					   f->name, CISTERN_FIELD_DIMS);
			const char *dim = p;
			if (!*p)
				return say("schema: field '%s': its shape has no closing ']'",
					   f->name);
			if (!is_digit(*p))
				return say("schema: field '%s': a dimension is a number from 1 up, "
					   "not '%.*s', in a shape such as [84,84] or []",
					   f->name, token_len(dim), dim);
			uint64_t d = 0;
			while (is_digit(*p)) {
				/* Any dimension above the largest slot is refused below: stop there. */
				if (d <= CISTERN_SLOT_SIZE_MAX)
					d = d * 10 + (uint64_t)(*p - '0');
				p++;
			}
			/* Digits that run into more of a token ("0x10", "1.5") are no decimal number. */
			if (*p && !is_space(*p) && !strchr(",;]", *p))
				return say("schema: field '%s': a dimension is a decimal "
					   "number from 1 up, not '%.*s'",
					   f->name, token_len(dim), dim);
			if (d == 0)
				return say("schema: field '%s': a dimension of 0", f->name);
			if (d > CISTERN_SLOT_SIZE_MAX || count * d > CISTERN_SLOT_SIZE_MAX)
				return say(
					"schema: field '%s' is larger than CISTERN_SLOT_SIZE_MAX "
					"(1 GiB)",
					f->name);
			count *= d;
			f->shape[f->ndim++] = d;
			p = skip(p);
			if (*p == ',') {
				p = skip(p + 1);
				/* The grammar has no trailing comma: [1,] is refused, not read as [1]. */
				if (*p == ']')
					return say("schema: field '%s': expected a dimension "
						   "after ',' in its shape, not ']'",
						   f->name);
			} else if (*p != ']') {
				return *p ? say("schema: field '%s': expected ',' or ']' in its "
						"shape, not '%.*s'",
						f->name, token_len(p), p)
					  : say("schema: field '%s': its shape has no closing ']'",
						f->name);
			}
		}
		p++;
	}
	if (count * f->itemsize > CISTERN_SLOT_SIZE_MAX)
		return say("schema: field '%s' is larger than CISTERN_SLOT_SIZE_MAX (1 GiB)",
			   f->name);
	f->size = count * f->itemsize;
	*end = skip(p);
	return NULL;
}

/*
 * The one parser behind everything here: check `text`, give the first `cap`
 * fields, the count, the sample size and the canonical text (each out
 * pointer may be NULL). NULL if the text is good, else why not. An empty
 * text is a good one with no field.
 */
const char *cistern__schema_scan(const char *text, struct cistern_field *out, size_t cap,
				 size_t *count, uint64_t *size, char canon[CISTERN_SCHEMA_MAX])
{
	struct canon k = {.len = 0, .full = false};
	k.text[0] = '\0';
	size_t n = 0;
	uint64_t off = 0, align = 1;
	if (strnlen(text, CISTERN_SCHEMA_MAX) >= CISTERN_SCHEMA_MAX)
		return say("schema is longer than %d bytes", CISTERN_SCHEMA_MAX - 1);
	const char *p = text;
	if (*p) {
		for (;;) {
			struct cistern_field f;
			const char *end = p;
			const char *why = parse_field(p, (unsigned)n + 1, &k, &f, &end);
			if (why)
				return why;
			f.offset = cistern__align_up(off, f.itemsize);
			off = f.offset + f.size;
			if (off > CISTERN_SLOT_SIZE_MAX)
				return say("schema: the fields up to '%s' are larger than "
					   "CISTERN_SLOT_SIZE_MAX (1 GiB)",
					   f.name);
			if (f.itemsize > align)
				align = f.itemsize;
			put(&k, "%s%s:%s[", n ? ";" : "", f.name, dtypes[f.dtype].name);
			for (uint32_t d = 0; d < f.ndim; d++)
				put(&k, "%s%llu", d ? "," : "", (unsigned long long)f.shape[d]);
			put(&k, "]");
			if (n < cap)
				out[n] = f;
			n++;
			if (*end == '\0')
				break;
			if (*end != ';')
				return say("schema: expected ';' after field '%s'", f.name);
			p = end + 1;
		}
	}
	/* The canonical form writes "[]" that the text may have left out. */
	if (k.full)
		return say("schema is longer than %d bytes once written as name:dtype[shape]",
			   CISTERN_SCHEMA_MAX - 1);
	if (count)
		*count = n;
	if (size)
		*size = cistern__align_up(off, align);
	if (canon)
		memcpy(canon, k.text, k.len + 1);
	return NULL;
}

int cistern_schema_parse(const char *text, struct cistern_field *fields, size_t cap, uint64_t *size)
{
	if (!text || (!fields && cap))
		return -EINVAL;
	size_t n;
	if (cistern__schema_scan(text, fields, cap, &n, size, NULL))
		return -EINVAL;
	return (int)n;
}

int cistern__schema_load(struct cistern *c)
{
	/* The validated private copy (segment.h), never the shared header. */
	const char *s = c->fixed.schema;
	size_t len = strnlen(s, CISTERN_SCHEMA_MAX);
	if (len == 0)
		return 0;
	if (len == CISTERN_SCHEMA_MAX)
		return -EPROTO;
	char *copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, s, len);
	copy[len] = '\0';
	size_t n;
	uint64_t size;
	/* A sample that would not fit its slot: only a damaged header says so. */
	if (cistern__schema_scan(copy, NULL, 0, &n, &size, NULL) || n == 0 || size > c->slot_size) {
		free(copy);
		return -EPROTO;
	}
	struct cistern_field *f = calloc(n, sizeof(*f));
	if (!f) {
		free(copy);
		return -ENOMEM;
	}
	cistern__schema_scan(copy, f, n, NULL, NULL, NULL);
	c->schema = copy;
	c->fields = f;
	c->nfields = (uint32_t)n;
	c->sample_size = size;
	/* A put must give exactly one sample of the schema (handle.h). */
	c->put_len_min = size;
	c->put_len_span = 0;
	return 0;
}

void cistern__schema_free(struct cistern *c)
{
	free(c->schema);
	free(c->fields);
	c->schema = NULL;
	c->fields = NULL;
	c->nfields = 0;
}

ssize_t cistern_schema_get(const struct cistern *c, char *buf, size_t cap)
{
	if (!c || (!buf && cap))
		return -EINVAL;
	size_t len = c->schema ? strlen(c->schema) : 0;
	if (len >= cap)
		return len == 0 && cap == 0 ? 0 : -ERANGE;
	memcpy(buf, c->schema ? c->schema : "", len + 1);
	return (ssize_t)len;
}

int cistern_schema_fields(const struct cistern *c, struct cistern_field *fields, size_t cap,
			  uint64_t *size)
{
	if (!c || (!fields && cap))
		return -EINVAL;
	for (size_t i = 0; i < cap && i < c->nfields; i++)
		fields[i] = c->fields[i];
	if (size)
		*size = c->schema ? c->sample_size : 0;
	return (int)c->nfields;
}
