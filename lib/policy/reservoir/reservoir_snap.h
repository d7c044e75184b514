/* SPDX-License-Identifier: MIT */
/*
 * reservoir_snap.h - what inspect, dump and restore need of FIRO and the
 * four reservoirs (reservoir_snap.c) (internal).
 */
#ifndef CISTERN_RESERVOIR_SNAP_H
#define CISTERN_RESERVOIR_SNAP_H

#include "core/policy.h"

extern const struct cistern_snap_ops cistern__reservoir_snap_ops;

#endif
