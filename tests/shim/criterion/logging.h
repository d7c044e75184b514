/* SPDX-License-Identifier: MIT */
/* Part of the ThreadSanitizer stand-in for Criterion: see criterion.h beside it. */
#include "criterion.h"
