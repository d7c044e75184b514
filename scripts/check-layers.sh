#!/usr/bin/env bash
# check-layers.sh - check that lib/ keeps its layers (docs/ARCHITECTURE.md):
# a file includes and calls only its own layer and the layers below it.
#
#   bash scripts/check-layers.sh [BUILDDIR]     # default: build
#
# The layers, lowest first: sys, core, tier, the policies (policy/fifo,
# policy/reservoir, ...), api, admin. Two policies are siblings: neither
# includes nor calls the other. remote/ uses the public headers (include/)
# and the public calls (cistern_*) alone. Nothing in sys/ names struct cistern.
# One exception: core/policy.c, the registry, names each policy's descriptor
# (cistern__*_policy) in its table. api/ and admin/ may include a policy's
# header but reach its code only through the descriptor's hooks: a call by
# name of a cistern__ function defined under lib/policy/ fails.
#
# Includes are read from the sources; calls (and any other reference to a
# symbol) from the objects of BUILDDIR/lib/libcistern.a and
# BUILDDIR/lib/libcistern-remote.a with nm. It fails, naming the file and the
# include or symbol, on each reference that goes up a layer or across
# policies; exit 0 when there is none, 1 otherwise, 2 if it cannot run.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

exec /usr/bin/env python3 - "$build" <<'PY'
import glob
import os
import re
import subprocess
import sys

build = sys.argv[1]
RANK = {"sys": 0, "core": 1, "tier": 2, "policy": 3, "api": 4, "admin": 5}
REGISTRY = "lib/core/policy.c"
DESCRIPTOR = re.compile(r"^cistern__[a-z0-9_]+_policy$")


def layer(path):
    """(rank, name) of a file under lib/; name is e.g. 'policy/fifo'. None: not layered."""
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "lib":
        return None
    top = parts[1]
    if top == "policy":
        return (RANK["policy"], "policy/" + parts[2]) if len(parts) > 3 else None
    if top in RANK:
        return (RANK[top], top)
    if top == "remote":
        return (None, "remote")
    return None


def allowed(src, dst):
    """May a file of layer src reach one of layer dst?"""
    if src[1] == "remote":
        return dst[1] == "remote"
    if dst[1] == "remote":
        return False
    if src[0] == dst[0]:
        return src[1] == dst[1]  # the same layer, or the same policy
    return dst[0] < src[0]


# api/ and admin/ reach a policy only through its descriptor (core/policy.h):
# no reference by name to a cistern__ symbol defined under lib/policy/.
THROUGH_DESCRIPTORS = ("api", "admin")

problems = []
sources = sorted(glob.glob("lib/**/*.c", recursive=True) + glob.glob("lib/**/*.h", recursive=True))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
for path in sources:
    me = layer(path)
    if me is None:
        continue
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for m in INCLUDE.finditer(text):
        inc = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        if os.path.exists(os.path.join("include", inc)):
            continue  # a public header: every layer may use it
        target = os.path.normpath(os.path.join("lib", inc))
        if not os.path.exists(target):
            target = os.path.normpath(os.path.join(os.path.dirname(path), inc))
        to = layer(target)
        if to is None:
            if me[1] == "remote":
                problems.append(f"{path}:{line}: includes \"{inc}\", not a public header")
            continue
        if not allowed(me, to):
            problems.append(f"{path}:{line}: includes \"{inc}\" ({me[1]} may not use {to[1]})")
    if me[1] == "sys":
        for m in re.finditer(r"\bstruct cistern\b(?!_)", text):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{path}:{line}: names struct cistern (sys/ knows nothing of it)")

# Object member name (meson's: the path under lib/ with / as _) -> source path.
member_of = {}
for path in sources:
    if path.endswith(".c"):
        member_of[path[len("lib/"):].replace("/", "_") + ".o"] = path


# nm -A: "ARCHIVE:MEMBER: U name" or "ARCHIVE:MEMBER:0000000000000000 T name".
NM_ROW = re.compile(r"^.*:([^:/]+\.o):\s*(?:[0-9a-f]+\s+)?([A-Za-z])\s+(\S+)$")


def symbols(archive):
    """{source: (defined, undefined)} of the archive's members that come from lib/."""
    out = subprocess.run(["nm", "-A", archive], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check-layers: nm {archive}: {out.stderr.strip()}")
    table = {}
    for row in out.stdout.splitlines():
        m = NM_ROW.match(row)
        if not m:
            continue
        src = member_of.get(m.group(1))
        if src is None:
            continue
        d, u = table.setdefault(src, (set(), set()))
        kind, name = m.group(2), m.group(3)
        if kind == "U":
            u.add(name)
        elif kind in "TDRBCV":
            d.add(name)
    return table


archives = [os.path.join(build, "lib", "libcistern.a"), os.path.join(build, "lib", "libcistern-remote.a")]
for a in archives:
    if not os.path.exists(a):
        sys.stderr.write(f"check-layers: no {a}: build first (ninja -C {build})\n")
        sys.exit(2)
table = {}
for a in archives:
    table.update(symbols(a))
where = {}
for src, (d, _) in table.items():
    for s in d:
        where.setdefault(s, src)
for src, (_, u) in sorted(table.items()):
    me = layer(src)
    for s in sorted(u):
        if me[1] == "remote":
            if s.startswith("cistern__") and where.get(s, "").startswith("lib/") and layer(where[s])[1] != "remote":
                problems.append(f"{src}: uses {s}, not public API")
            continue
        dst = where.get(s)
        if dst is None or dst == src:
            continue
        if src == REGISTRY and DESCRIPTOR.match(s):
            continue
        to = layer(dst)
        if not allowed(me, to):
            problems.append(f"{src}: uses {s} of {dst} ({me[1]} may not use {to[1]})")
        elif me[1] in THROUGH_DESCRIPTORS and to[1].startswith("policy/") and s.startswith("cistern__"):
            problems.append(f"{src}: calls {s} of {dst} by name ({me[1]} reaches a policy through its descriptor)")

for p in problems:
    print(p)
if problems:
    print(f"check-layers: {len(problems)} reference(s) up a layer or across policies")
    sys.exit(1)
print(f"check-layers: {len(table)} objects and {len(sources)} sources keep their layers")
PY
