/* SPDX-License-Identifier: MIT */
/*
 * fields.c - samples of a segment with a schema, as the `cistern` command
 * reads and writes them: field values parsed from options and JSON lines,
 * and printed as JSON.
 *
 * A value is a number, true or false for a scalar field, and nested arrays of
 * them in C order for one with a shape (a flat array of every element is
 * taken too). Integers must be whole and in range for their dtype; floats
 * take anything strtod() reads, NaN and Infinity included, and are printed
 * with enough digits to read back the same value (non-finite ones as NaN,
 * Infinity and -Infinity, as Python's json module writes them).
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int schema_load(struct cistern *c, struct schema *s)
{
	memset(s, 0, sizeof(*s));
	int n = cistern_schema_fields(c, NULL, 0, &s->size);
	if (n <= 0)
		return n;
	s->f = calloc((size_t)n, sizeof(*s->f));
	if (!s->f)
		return -ENOMEM;
	s->n = cistern_schema_fields(c, s->f, (size_t)n, &s->size);
	cistern_schema_get(c, s->text, sizeof(s->text));
	return s->n;
}

void schema_free(struct schema *s)
{
	free(s->f);
	s->f = NULL;
	s->n = 0;
}

const struct cistern_field *schema_find(const struct schema *s, const char *name, size_t len)
{
	for (int i = 0; i < s->n; i++)
		if (strlen(s->f[i].name) == len && strncmp(s->f[i].name, name, len) == 0)
			return &s->f[i];
	return NULL;
}

char *field_type(const struct cistern_field *f, char *buf, size_t size)
{
	int o = snprintf(buf, size, "%s[", cistern_dtype_name(f->dtype));
	for (uint32_t d = 0; d < f->ndim && o > 0 && (size_t)o < size; d++)
		o += snprintf(buf + o, size - (size_t)o, "%s%" PRIu64, d ? "," : "", f->shape[d]);
	if (o > 0 && (size_t)o < size)
		snprintf(buf + o, size - (size_t)o, "]");
	return buf;
}

uint64_t field_count(const struct cistern_field *f)
{
	uint64_t n = 1;
	for (uint32_t d = 0; d < f->ndim; d++)
		n *= f->shape[d];
	return n;
}

/* IEEE 754 binary16, both ways, rounding to nearest even. */
static double from_half(uint16_t h)
{
	int e = (h >> 10) & 0x1f;
	double m = h & 0x3ff;
	double v = e == 0    ? ldexp(m, -24)
		   : e == 31 ? (m != 0 ? NAN : INFINITY)
			     : ldexp(m + 1024, e - 25);
	return h & 0x8000 ? -v : v;
}

static uint16_t to_half(double d)
{
	uint16_t sign = signbit(d) ? 0x8000 : 0;
	double a = fabs(d);
	if (isnan(d))
		return sign | 0x7e00;
	if (a >= 65520.0) /* the first value that rounds past the largest half, 65504 */
		return sign | 0x7c00;
	if (a < 0x1p-14) /* subnormal: a multiple of 2^-24, rounded */
		return sign | (uint16_t)rint(a * 0x1p24);
	int e;
	double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
	uint32_t mant = (uint32_t)rint((m * 2 - 1) * 1024);
	e -= 1;
	if (mant == 1024) {
		mant = 0;
		e++;
	}
	return sign | (uint16_t)((e + 15) << 10) | (uint16_t)mant;
}

/* ---- printing ---------------------------------------------------------------- */

static void print_float(FILE *out, double v, int digits)
{
	if (isnan(v))
		fputs("NaN", out);
	else if (isinf(v))
		fputs(v < 0 ? "-Infinity" : "Infinity", out);
	else
		fprintf(out, "%.*g", digits, v);
}

static void print_element(FILE *out, enum cistern_dtype t, uint32_t size, const unsigned char *p)
{
	union {
		int8_t i8;
		int16_t i16;
		int32_t i32;
		int64_t i64;
		uint8_t u8;
		uint16_t u16;
		uint32_t u32;
		uint64_t u64;
		float f32;
		double f64;
	} v;
	memcpy(&v, p, size);
	switch (t) {
	case CISTERN_INT8:
		fprintf(out, "%" PRId8, v.i8);
		break;
	case CISTERN_INT16:
		fprintf(out, "%" PRId16, v.i16);
		break;
	case CISTERN_INT32:
		fprintf(out, "%" PRId32, v.i32);
		break;
	case CISTERN_INT64:
		fprintf(out, "%" PRId64, v.i64);
		break;
	case CISTERN_UINT8:
		fprintf(out, "%" PRIu8, v.u8);
		break;
	case CISTERN_UINT16:
		fprintf(out, "%" PRIu16, v.u16);
		break;
	case CISTERN_UINT32:
		fprintf(out, "%" PRIu32, v.u32);
		break;
	case CISTERN_UINT64:
		fprintf(out, "%" PRIu64, v.u64);
		break;
	/* The digits that read back the same value: 5, 9 and 17. */
	case CISTERN_FLOAT16:
		print_float(out, from_half(v.u16), 5);
		break;
	case CISTERN_FLOAT32:
		print_float(out, v.f32, 9);
		break;
	case CISTERN_FLOAT64:
		print_float(out, v.f64, 17);
		break;
	case CISTERN_BOOL:
		fputs(v.u8 ? "true" : "false", out);
		break;
	}
}

/* Dimensions d.. of the elements at *p, in brackets. */
static void print_dims(FILE *out, const struct cistern_field *f, uint32_t d,
		       const unsigned char **p)
{
	if (d == f->ndim) {
		print_element(out, f->dtype, f->itemsize, *p);
		*p += f->itemsize;
		return;
	}
	fputc('[', out);
	for (uint64_t i = 0; i < f->shape[d]; i++) {
		if (i)
			fputc(',', out);
		print_dims(out, f, d + 1, p);
	}
	fputc(']', out);
}

void field_print(FILE *out, const struct cistern_field *f, const void *sample)
{
	const unsigned char *p = (const unsigned char *)sample + f->offset;
	print_dims(out, f, 0, &p);
}

/* ---- parsing ----------------------------------------------------------------- */

static _Thread_local char problem[256];

static const char *say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(problem, sizeof(problem), fmt, ap);
	va_end(ap);
	return problem;
}

static const char *skip(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

/*
 * Store v as an integer of `size` bytes at dst: its low bytes, which for a
 * signed value in range are its two's complement form.
 */
static void store_int(unsigned char *dst, uint64_t v, uint32_t size)
{
	uint8_t a = (uint8_t)v;
	uint16_t b = (uint16_t)v;
	uint32_t c = (uint32_t)v;
	memcpy(dst,
	       size == 1   ? (void *)&a
	       : size == 2 ? (void *)&b
	       : size == 4 ? (void *)&c
			   : (void *)&v,
	       size);
}

/* Store the number or boolean `tok` (n bytes) as element `i` of field f in the sample. */
static const char *store(const struct cistern_field *f, const char *tok, size_t n, uint64_t i,
			 void *sample)
{
	char s[64];
	if (n == 0)
		return say("field '%s': expected a value", f->name);
	if (n >= sizeof(s))
		return say("field '%s': '%.20s...' is not a number", f->name, tok);
	memcpy(s, tok, n);
	s[n] = '\0';
	unsigned char *dst = (unsigned char *)sample + f->offset + i * f->itemsize;
	char *end;
	errno = 0;
	switch (f->dtype) {
	case CISTERN_BOOL: {
		int b = strcmp(s, "true") == 0 || strcmp(s, "1") == 0    ? 1
			: strcmp(s, "false") == 0 || strcmp(s, "0") == 0 ? 0
									 : -1;
		if (b < 0)
			return say("field '%s': '%s' is not true or false", f->name, s);
		*dst = (unsigned char)b;
		return NULL;
	}
	case CISTERN_INT8:
	case CISTERN_INT16:
	case CISTERN_INT32:
	case CISTERN_INT64: {
		long long v = strtoll(s, &end, 10);
		int bits = (int)f->itemsize * 8;
		long long lo = bits == 64 ? LLONG_MIN : -(1LL << (bits - 1));
		long long hi = bits == 64 ? LLONG_MAX : (1LL << (bits - 1)) - 1;
		if (*end || end == s)
			return say("field '%s': '%s' is not a whole number", f->name, s);
		if (errno || v < lo || v > hi)
			return say("field '%s': %s is out of range for %s", f->name, s,
				   cistern_dtype_name(f->dtype));
		store_int(dst, (uint64_t)v, f->itemsize);
		return NULL;
	}
	case CISTERN_UINT8:
	case CISTERN_UINT16:
	case CISTERN_UINT32:
	case CISTERN_UINT64: {
		unsigned long long v = s[0] == '-' ? 0 : strtoull(s, &end, 10);
		int bits = (int)f->itemsize * 8;
		unsigned long long hi = bits == 64 ? ULLONG_MAX : (1ULL << bits) - 1;
		if (s[0] == '-' || *end || end == s)
			return say("field '%s': '%s' is not a whole number from 0 up", f->name, s);
		if (errno || v > hi)
			return say("field '%s': %s is out of range for %s", f->name, s,
				   cistern_dtype_name(f->dtype));
		store_int(dst, (uint64_t)v, f->itemsize);
		return NULL;
	}
	case CISTERN_FLOAT16:
	case CISTERN_FLOAT32:
	case CISTERN_FLOAT64: {
		double v = strtod(s, &end);
		if (*end || end == s)
			return say("field '%s': '%s' is not a number", f->name, s);
		/* strtod's ERANGE for a tiny value underflows to 0 or a subnormal: fine. */
		double max = f->dtype == CISTERN_FLOAT16   ? 65504.0
			     : f->dtype == CISTERN_FLOAT32 ? (double)FLT_MAX
							   : DBL_MAX;
		if (isfinite(v) && fabs(v) > max &&
		    !(f->dtype == CISTERN_FLOAT16 && fabs(v) < 65520.0))
			return say("field '%s': %s is out of range for %s", f->name, s,
				   cistern_dtype_name(f->dtype));
		if (f->dtype == CISTERN_FLOAT16) {
			uint16_t h = to_half(v);
			memcpy(dst, &h, 2);
		} else if (f->dtype == CISTERN_FLOAT32) {
			float x = (float)v;
			memcpy(dst, &x, 4);
		} else {
			memcpy(dst, &v, 8);
		}
		return NULL;
	}
	}
	return say("field '%s': unknown dtype", f->name);
}

/* The token of a number or a word at p: its length. */
static size_t token(const char *p)
{
	size_t n = 0;
	while ((p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'z') ||
	       (p[n] >= 'A' && p[n] <= 'Z') || p[n] == '-' || p[n] == '+' || p[n] == '.')
		n++;
	return n;
}

/* Dimension d of field f at *pp: nested arrays, down to element values. */
static const char *parse_dims(const char **pp, const struct cistern_field *f, uint32_t d,
			      uint64_t *i, void *sample)
{
	const char *p = skip(*pp);
	if (d == f->ndim) {
		if (*p == '[')
			return say("field '%s': more nested arrays than its %u dimension%s",
				   f->name, f->ndim, f->ndim == 1 ? "" : "s");
		size_t n = token(p);
		const char *why = store(f, p, n, (*i)++, sample);
		*pp = p + n;
		return why;
	}
	if (*p != '[')
		return say("field '%s': expected an array of %" PRIu64 " along dimension %u",
			   f->name, f->shape[d], d + 1);
	p = skip(p + 1);
	/* One flat array of every element, for a field of several dimensions. */
	bool flat = d == 0 && f->ndim > 1 && *p != '[';
	uint64_t want = flat ? field_count(f) : f->shape[d];
	for (uint64_t k = 0; k < want; k++) {
		if (k) {
			p = skip(p);
			if (*p != ',')
				return say("field '%s': %" PRIu64 " value%s where %" PRIu64
					   " belong%s",
					   f->name, k, k == 1 ? "" : "s", want,
					   flat ? " (every element, flat)" : "");
			p++;
		}
		const char *why = flat ? parse_dims(&p, f, f->ndim, i, sample)
				       : parse_dims(&p, f, d + 1, i, sample);
		if (why)
			return why;
	}
	p = skip(p);
	if (*p != ']')
		return say("field '%s': more than %" PRIu64 " values along dimension %u%s", f->name,
			   want, d + 1, flat ? " (or every element, flat)" : "");
	*pp = p + 1;
	return NULL;
}

const char *field_parse(const char **pp, const struct cistern_field *f, void *sample)
{
	uint64_t i = 0;
	return parse_dims(pp, f, 0, &i, sample);
}

const char *field_parse_text(const char *text, const struct cistern_field *f, void *sample)
{
	/* "1,2,3" for a field with a shape: the brackets may be left out. */
	char *wrapped = NULL;
	const char *p = skip(text);
	if (f->ndim && *p != '[') {
		size_t n = strlen(p);
		wrapped = malloc(n + 3);
		if (!wrapped)
			return say("out of memory");
		wrapped[0] = '[';
		memcpy(wrapped + 1, p, n);
		wrapped[n + 1] = ']';
		wrapped[n + 2] = '\0';
		p = wrapped;
	}
	const char *why = field_parse(&p, f, sample);
	if (!why && *skip(p))
		why = say("field '%s': '%.20s' after its value", f->name, skip(p));
	free(wrapped);
	return why;
}

/* A JSON string at *pp (the quote): its bytes, unescaped, into out (cap). */
static const char *parse_key(const char **pp, char *out, size_t cap)
{
	const char *p = *pp;
	size_t n = 0;
	for (p++; *p != '"'; p++) {
		if (!*p)
			return say("a key without its closing quote");
		char ch = *p;
		if (ch == '\\') {
			p++;
			ch = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
			if (!ch || *p == 'u')
				return say("a key with an escape this reader does not take");
		}
		if (n + 1 >= cap)
			return say("a key longer than any field name");
		out[n++] = ch;
	}
	out[n] = '\0';
	*pp = p + 1;
	return NULL;
}

/* Skip any JSON value at *pp (to look past what is not a field). */
static const char *skip_value(const char **pp, int depth)
{
	const char *p = skip(*pp);
	if (depth > 64)
		return say("values nested too deep");
	if (*p == '[' || *p == '{') {
		char close = *p == '[' ? ']' : '}';
		p = skip(p + 1);
		if (*p == close) {
			*pp = p + 1;
			return NULL;
		}
		for (;;) {
			if (close == '}') {
				char key[128];
				if (*p != '"')
					return say("expected a quoted key");
				const char *why = parse_key(&p, key, sizeof(key));
				if (why)
					return why;
				p = skip(p);
				if (*p != ':')
					return say("expected ':' after a key");
				p++;
			}
			const char *why = skip_value(&p, depth + 1);
			if (why)
				return why;
			p = skip(p);
			if (*p == close) {
				*pp = p + 1;
				return NULL;
			}
			if (*p != ',')
				return say("expected ',' or '%c'", close);
			p = skip(p + 1);
		}
	}
	if (*p == '"') {
		char s[128];
		return parse_key(pp, s, sizeof(s)) ? problem : NULL;
	}
	size_t n = token(p);
	if (!n)
		return say("expected a value at '%.12s'", p);
	*pp = p + n;
	return NULL;
}

/* The fields of an object at *pp into the sample; seen[i] marks field i given. */
static const char *parse_fields(const char **pp, const struct schema *s, void *sample, bool *seen)
{
	const char *p = skip(*pp);
	if (*p != '{')
		return say("expected an object of fields");
	p = skip(p + 1);
	while (*p != '}') {
		char key[128];
		if (*p != '"')
			return say("expected a quoted field name");
		const char *why = parse_key(&p, key, sizeof(key));
		if (why)
			return why;
		const struct cistern_field *f = schema_find(s, key, strlen(key));
		if (!f)
			return say("'%s' is not a field of the schema (%s)", key, s->text);
		if (seen[f - s->f])
			return say("field '%s' is given twice", key);
		seen[f - s->f] = true;
		p = skip(p);
		if (*p != ':')
			return say("expected ':' after \"%s\"", key);
		p++;
		why = field_parse(&p, f, sample);
		if (why)
			return why;
		p = skip(p);
		if (*p == ',')
			p = skip(p + 1);
		else if (*p != '}')
			return say("field '%s': expected ',' or '}' after its value", key);
	}
	*pp = p + 1;
	return NULL;
}

const char *schema_missing(const struct schema *s, const bool *seen)
{
	for (int i = 0; i < s->n; i++)
		if (!seen[i])
			return say(
				"field '%s' is missing (every field of the schema is needed: %s)",
				s->f[i].name, s->text);
	return NULL;
}

static const char *meta_number(const char **pp, const char *key, uint32_t *out)
{
	const char *p = skip(*pp);
	size_t n = token(p);
	char num[24];
	if (n == 0 || n >= sizeof(num))
		return say("'%s' must be a whole number", key);
	memcpy(num, p, n);
	num[n] = '\0';
	if (parse_u32(num, out) < 0)
		return say("'%s' must be a whole number below 2^32", key);
	*pp = p + n;
	return NULL;
}

const char *sample_parse_json(const char *line, const struct schema *s, void *sample,
			      struct cistern_meta *meta, bool *seen)
{
	memset(seen, 0, (size_t)s->n * sizeof(*seen));
	/* The wrapped form (what `cistern get --json` prints) has an object under "fields". */
	const char *p = skip(line);
	if (*p != '{')
		return say("expected a JSON object");
	bool wrapped = false;
	const char *q = skip(p + 1);
	while (*q == '"') {
		char key[128];
		if (parse_key(&q, key, sizeof(key)))
			return problem;
		q = skip(q);
		if (*q != ':')
			return say("expected ':' after \"%s\"", key);
		q = skip(q + 1);
		if (strcmp(key, "fields") == 0 && *q == '{')
			wrapped = true;
		if (skip_value(&q, 0))
			return problem;
		q = skip(q);
		if (*q == ',')
			q = skip(q + 1);
	}
	const char *why;
	if (!wrapped) {
		why = parse_fields(&p, s, sample, seen);
	} else {
		p = skip(p + 1);
		why = NULL;
		while (!why && *p != '}') {
			char key[128];
			if (*p != '"' || parse_key(&p, key, sizeof(key)))
				return say("expected a quoted key");
			p = skip(p);
			if (*p != ':')
				return say("expected ':' after \"%s\"", key);
			p = skip(p + 1);
			if (strcmp(key, "fields") == 0)
				why = parse_fields(&p, s, sample, seen);
			else if (strcmp(key, "sim_id") == 0)
				why = meta_number(&p, key, &meta->sim_id);
			else if (strcmp(key, "time_step") == 0)
				why = meta_number(&p, key, &meta->time_step);
			else if (strcmp(key, "sample_id") == 0)
				why = skip_value(&p, 0); /* the segment gives ids */
			else
				why = say("'%s' is not fields, sim_id, time_step or sample_id",
					  key);
			p = skip(p);
			if (!why && *p == ',')
				p = skip(p + 1);
			else if (!why && *p != '}')
				why = say("expected ',' or '}' after \"%s\"", key);
		}
		if (!why)
			p++;
	}
	if (!why && *skip(p))
		why = say("'%.20s' after the object", skip(p));
	return why ? why : schema_missing(s, seen);
}
