/* SPDX-License-Identifier: MIT */
/*
 * tier.c - the cold file as every policy's tier uses it (tier.h).
 */
#include <errno.h>

#include "tier/tier.h"

int cistern__tier_file_create(struct cistern__cold *cold, bool *open, const struct cistern_fixed *f)
{
	int r = cistern__cold_create(cold, f->cold_dir, f->name,
				     cistern__cold_slot_bytes(f->slot_size), f->cold_slots,
				     f->cold_nonce);
	*open = r == 0;
	return r;
}

int cistern__tier_file_open(struct cistern__cold *cold, bool *open, const struct cistern_fixed *f)
{
	if (*open)
		return 0;
	int r = cistern__cold_open(cold, f->cold_dir, f->name, f->cold_nonce);
	*open = r == 0;
	return r;
}

void cistern__tier_file_close(struct cistern__cold *cold, bool *open)
{
	if (*open)
		cistern__cold_close(cold);
	*open = false;
}

int cistern__tier_unlink(const char *dir, const char *name)
{
	if (!dir || !dir[0])
		return 0;
	int r = cistern__cold_unlink(dir, name);
	return r == -ENOENT ? 0 : r;
}

int cistern__tier_rename(struct cistern__cold *cold, bool open, const char *dir, const char *from,
			 const char *to)
{
	return open ? cistern__cold_rename(cold, dir, from, to) : -EINVAL;
}

const char *cistern__tier_config_problem(const struct cistern_config *cfg)
{
	if (cistern__cold_slot_bytes(cfg->slot_size) == 0)
		return "slot_size is too large for a cold tier";
	return NULL;
}
