/* SPDX-License-Identifier: MIT */
/*
 * tier.h - what every policy's cold tier does alike with a segment's cold
 * file (tier.c): make it at create, open it on a handle's first use, remove
 * it with the segment, give it a restored segment's name (internal). The
 * policies' tiers (policy/reservoir/tiered.c, policy/fifo/fifo_tier.c)
 * keep their own index and protocol on top.
 */
#ifndef CISTERN_TIER_TIER_H
#define CISTERN_TIER_TIER_H

#include "core/segment.h"
#include "tier/cold.h"

/* Make the cold file of the segment being created (f set): 0 and *open, or -errno, nothing left. */
/* What is wrong with cfg's cold tier, every policy alike (cold_slots > 0), or NULL. */
const char *cistern__tier_config_problem(const struct cistern_config *cfg);
int cistern__tier_file_create(struct cistern__cold *cold, bool *open,
			      const struct cistern_fixed *f);
/* Open the segment's cold file unless *open: 0, or -errno (-ESTALE: another segment's file). */
int cistern__tier_file_open(struct cistern__cold *cold, bool *open, const struct cistern_fixed *f);
/* Close it if *open. */
void cistern__tier_file_close(struct cistern__cold *cold, bool *open);
/* Remove the cold file of segment `name` whose cold_dir is dir: 0 if none is there. */
int cistern__tier_unlink(const char *dir, const char *name);
/* Give the open cold file of a restore, under `from`, the final name `to` (cold.h). */
int cistern__tier_rename(struct cistern__cold *cold, bool open, const char *dir, const char *from,
			 const char *to);

#endif
