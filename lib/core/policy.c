/* SPDX-License-Identifier: MIT */
/*
 * policy.c - the table of policies: each policy's descriptor (defined in its
 * own file) at its enum cistern_policy value, and the names of the policies.
 */
#include <errno.h>
#include <string.h>

#include "core/policy.h"

/* A value with no line here is an unknown policy: create and attach refuse it. */
const struct cistern__policy *const cistern__policies[CISTERN_POLICY_COUNT] = {
	[CISTERN_FIFO] = &cistern__fifo_policy,
	[CISTERN_FIRO] = &cistern__firo_policy,
	[CISTERN_RESERVOIR] = &cistern__reservoir_policy,
	[CISTERN_FIFO_EVICT_RESERVOIR] = &cistern__fifo_evict_policy,
	[CISTERN_SIM_PAIRED_RESERVOIR] = &cistern__sim_paired_policy,
	[CISTERN_BATCH_RESERVOIR] = &cistern__batch_policy,
	[CISTERN_PRIORITIZED] = &cistern__prioritized_policy,
};

const struct cistern__policy *cistern__policy_of(uint32_t value)
{
	return value < CISTERN_POLICY_COUNT ? cistern__policies[value] : NULL;
}

void cistern__set_steps(struct cistern *c)
{
	c->put_step = NULL;
	c->get_step = NULL;
	if (c->policy->set_steps)
		c->policy->set_steps(c);
}

const char *cistern_policy_name(enum cistern_policy p)
{
	const struct cistern__policy *d = cistern__policy_of((uint32_t)p);
	return d ? d->name : NULL;
}

int cistern_policy_parse(const char *s, enum cistern_policy *out)
{
	if (!s || !out)
		return -EINVAL;
	for (uint32_t i = 0; i < CISTERN_POLICY_COUNT; i++) {
		const struct cistern__policy *d = cistern__policies[i];
		if (d && strcmp(s, d->name) == 0) {
			*out = d->value;
			return 0;
		}
	}
	return -EINVAL;
}
