/* SPDX-License-Identifier: MIT */
/* The table of policies (lib/core/policy.c): one descriptor per enum cistern_policy value. */
#include <criterion/criterion.h>

#include "helpers.h"
#include "core/handle.h"
#include "core/policy.h"

TestSuite(policy_table, .fini = seg_fini);

Test(policy_table, every_policy_value_has_its_own_complete_descriptor)
{
	for (uint32_t i = 0; i < CISTERN_POLICY_COUNT; i++) {
		const struct cistern__policy *d = cistern__policy_of(i);
		cr_assert_not_null(d, "policy %u has no line in cistern__policies[]", i);
		cr_assert_eq(d, cistern__policies[i]);
		cr_assert_eq((uint32_t)d->value, i, "policy %u's descriptor says %d", i, d->value);
		cr_assert_not_null(d->name);
		cr_assert_not_null(d->snap, "%s: the tools could not read its slots", d->name);
		const struct cistern_ops *o = d->ops;
		cr_assert_not_null(o, "%s has no ops", d->name);
		cr_assert(o->init && o->try_reserve && o->commit && o->abort && o->try_acquire &&
				  o->release && o->unacquire && o->drained && o->reclaim &&
				  o->population,
			  "%s lacks a hook every policy has", d->name);
		/* Pins live in the handle: a clean detach drops them, the handle's free frees them. */
		if (d->readers_pin)
			cr_assert(d->reclaim_idle && d->free_state,
				  "%s pins but would keep its pins past a detach", d->name);
		/* api/prioritized.c calls every one of these once it finds a prio. */
		if (d->prio)
			cr_assert(d->prio->draw && d->prio->set_reserved && d->prio->update &&
					  d->prio->set_beta && d->prio->info,
				  "%s draws by priority but lacks a hook of it", d->name);
		for (uint32_t j = 0; j < i; j++)
			cr_assert_neq(cistern__policies[j], d, "%s is in the table twice", d->name);
	}
}

Test(policy_table, prioritized_calls_refuse_a_policy_without_priorities)
{
	for (uint32_t i = 0; i < CISTERN_POLICY_COUNT; i++) {
		const struct cistern__policy *d = cistern__policies[i];
		if (d->prio)
			continue;
		struct cistern_config cfg = {.policy = (enum cistern_policy)i,
					     .slot_size = 64,
					     .slot_count = 16,
					     .watermark = 2};
		if (d->has_pairs)
			cfg.sweep_size = cfg.nb_time_steps = 4;
		if (d->reads_whole_batches)
			cfg.batch_size = 2;
		struct cistern *c = NULL;
		cr_assert_eq(cistern_create(seg_name("pt-noprio"), &cfg, &c), 0, "%s: %s", d->name,
			     cistern_config_problem(&cfg));
		double q = 1;
		uint64_t id = 0;
		char buf[64];
		cr_assert_eq(cistern_put_prioritized(c, "x", 1, NULL, 1.0, 0), -EINVAL, "%s",
			     d->name);
		cr_assert_eq(
			cistern_get_prioritized(c, buf, sizeof(buf), 1, NULL, NULL, NULL, NULL, 0),
			-EINVAL, "%s", d->name);
		cr_assert_eq(cistern_update_priorities(c, &id, &q, 1), -EINVAL, "%s", d->name);
		cr_assert_eq(cistern_set_beta(c, 0.5), -EINVAL, "%s", d->name);
		struct cistern_prio_info info;
		cr_assert_eq(cistern_prio_info_get(c, &info), -EINVAL, "%s", d->name);
		cistern_detach(c);
		cistern_unlink(seg_name("pt-noprio"));
	}
}

Test(policy_table, a_value_past_the_enum_has_no_descriptor)
{
	cr_assert_null(cistern__policy_of(CISTERN_POLICY_COUNT));
	cr_assert_null(cistern__policy_of(UINT32_MAX));
}

Test(policy_table, each_name_is_the_descriptors_and_parses_back_to_its_value)
{
	for (uint32_t i = 0; i < CISTERN_POLICY_COUNT; i++) {
		const struct cistern__policy *d = cistern__policies[i];
		cr_assert_not_null(d, "policy %u has no line in cistern__policies[]", i);
		cr_assert_str_eq(cistern_policy_name((enum cistern_policy)i), d->name);
		enum cistern_policy p;
		cr_assert_eq(cistern_policy_parse(d->name, &p), 0, "%s does not parse", d->name);
		cr_assert_eq((uint32_t)p, i, "%s parses to %d", d->name, p);
	}
}

Test(policy_table, an_unknown_policy_is_refused_at_create)
{
	struct cistern_config cfg = {.policy = (enum cistern_policy)CISTERN_POLICY_COUNT};
	struct cistern *c = NULL;
	cr_assert_eq(cistern_create(seg_name("pt-create"), &cfg, &c), -EINVAL);
	cr_assert_null(c);
	cr_assert_str_eq(cistern_config_problem(&cfg), "unknown policy");
}

Test(policy_table, an_unknown_policy_in_a_header_is_refused_at_attach)
{
	struct cistern *c = seg_create("pt-attach", (struct cistern_config){.slot_count = 4});
	c->hdr->policy = CISTERN_POLICY_COUNT;
	struct cistern *other = NULL;
	cr_assert_eq(cistern_attach(seg_name("pt-attach"), &other), -EPROTO);
	cr_assert_null(other);
}
