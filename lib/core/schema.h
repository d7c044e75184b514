/* SPDX-License-Identifier: MIT */
/*
 * schema.h - checking a schema's text and parsing a segment's (schema.c)
 * (internal).
 */
#ifndef CISTERN_SCHEMA_H
#define CISTERN_SCHEMA_H

#include "core/handle.h"

/*
 * Check a schema's text (see there), giving the first `cap` fields,
 * their count, the sample size and the canonical text (out pointers may be
 * NULL); NULL if it is good, else why not, in a per-thread buffer.
 */
const char *cistern__schema_scan(const char *text, struct cistern_field *out, size_t cap,
				 size_t *count, uint64_t *size, char canon[CISTERN_SCHEMA_MAX]);
/* Copy and parse c->fixed.schema into the handle: 0, -ENOMEM or -EPROTO. */
int cistern__schema_load(struct cistern *c);
void cistern__schema_free(struct cistern *c);

#endif
