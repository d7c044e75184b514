/* SPDX-License-Identifier: MIT */
/*
 * restore.h - the marks of a restore under way (restore.c) (internal).
 */
#ifndef CISTERN_RESTORE_H
#define CISTERN_RESTORE_H

#include "core/handle.h"

/*
 * The restore-in-progress mark of an object named `name`
 * (cistern_hdr.restore_mark): a tag in the high half, the CRC-32C of the
 * name in the low half, so never 0.
 */
uint64_t cistern__restore_mark(const char *name);
/* Whether the header mapped or copied from object `name` is an unfinished restore's. */
bool cistern__restore_unfinished(const struct cistern_hdr *h, const char *name);

#endif
