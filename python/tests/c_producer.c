/* SPDX-License-Identifier: MIT */
/*
 * c_producer - a C producer for the Python binding's cross-language test.
 *
 *   c_producer NAME COUNT FLOATS SIM_ID
 *
 * Attaches to segment NAME and writes COUNT samples in place (reserve + commit),
 * each FLOATS floats where sample t holds t * FLOATS + j at index j, with meta
 * (SIM_ID, time_step t). Then declares itself done (cistern_producer_done), or
 * closes reception if the segment expects no producers. Exit status 0 on success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cistern.h>

static int fail(const char *what, int r)
{
	fprintf(stderr, "c_producer: %s: %s\n", what, cistern_strerror(r));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: c_producer NAME COUNT FLOATS SIM_ID\n");
		return 2;
	}
	const char *name = argv[1];
	unsigned long count = strtoul(argv[2], NULL, 10);
	unsigned long floats = strtoul(argv[3], NULL, 10);
	unsigned long sim_id = strtoul(argv[4], NULL, 10);

	struct cistern *c;
	int r = cistern_attach(name, &c);
	if (r < 0)
		return fail("attach", r);
	for (unsigned long t = 0; t < count; t++) {
		struct cistern_slot slot;
		r = cistern_reserve(c, &slot, 10000);
		if (r < 0)
			return fail("reserve", r);
		size_t len = floats * sizeof(float);
		if (len > slot.capacity) {
			cistern_abort(c, &slot);
			fprintf(stderr, "c_producer: %zu bytes do not fit a slot of %zu\n", len,
				slot.capacity);
			return 1;
		}
		float *p = slot.data;
		for (unsigned long j = 0; j < floats; j++)
			p[j] = (float)(t * floats + j);
		struct cistern_meta meta = {.sim_id = (uint32_t)sim_id, .time_step = (uint32_t)t};
		r = cistern_commit(c, &slot, len, &meta);
		if (r < 0)
			return fail("commit", r);
	}
	r = cistern_producer_done(c);
	if (r == -EINVAL)
		r = cistern_close_reception(c);
	if (r < 0)
		return fail("done", r);
	cistern_detach(c);
	return 0;
}
