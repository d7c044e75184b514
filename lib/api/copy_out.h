/* SPDX-License-Identifier: MIT */
/*
 * copy_out.h - the last step of the calls that copy samples out (internal):
 * cistern_get_batch() and cistern_get_windows() in api.c, and their
 * prioritized forms in prioritized.c. One place, so that each copies, and
 * refuses a sample too long for its place, the same way.
 */
#ifndef CISTERN_API_COPY_OUT_H
#define CISTERN_API_COPY_OUT_H

#include <stddef.h>

#include <cistern.h>

/*
 * Copy the n samples s[0..n) that this handle holds to buf, one every stride
 * bytes, their lengths to len[0..n) and their metadata to meta[0..n) (either
 * may be NULL); they stay held, for the caller to release. If any is longer
 * than stride (or than a slot, which only a damaged segment says), nothing
 * is copied: every one goes back to the segment as if never read, and the
 * call returns -EMSGSIZE. Else 0.
 */
int cistern__copy_out(struct cistern *c, struct cistern_sample *s, size_t n, void *buf,
		      size_t stride, size_t *len, struct cistern_meta *meta);

#endif
