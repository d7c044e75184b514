#!/usr/bin/env bash
# check-edges.sh - check that the ordering labels in lib/ and the table of
# edges in docs/protocol/ (README.md, "Ordering edges") agree.
#
#   bash scripts/check-edges.sh          # exit 0 when they agree, 1 (and why) if not
#   bash scripts/check-edges.sh --list   # print each label and where lib/ uses it
#
# A label is a lower-case word with hyphens in square brackets, e.g.
# [rs-held], written in a comment of a .c or .h file under lib/ at each end of an
# ordering edge (the release or seq_cst side that publishes, and every side
# that observes), and in the first column of exactly one table row among
# docs/protocol/*.md (the edges table of docs/protocol/README.md). It fails on:
#   - a label in lib/ comments that no table row names;
#   - a table row whose label no lib/ comment uses;
#   - a label that two table rows name;
#   - a label used at one place in lib/ only, unless that comment is a
#     fence's that says what it "pairs with".
set -uo pipefail
cd "$(dirname "$0")/.."

exec /usr/bin/env python3 - "$@" <<'PY'
import glob
import re
import sys

LABEL = re.compile(r"(?<![A-Za-z0-9_\])])\[([a-z][a-z0-9]*(?:-[a-z0-9]+)*)\]")
DOC = "docs/protocol/*.md"


def comments(text):
    """Yield (first line, comment text) for each comment of a C source."""
    i, n, line = 0, len(text), 1
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            yield line, text[i:j]
            line += text.count("\n", i, j)
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            yield line, text[i:j]
            i = j
        elif ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            line += text.count("\n", i, j)
            i = j + 1
        else:
            i += 1


# label -> list of (file:line, comment text)
code = {}
for path in sorted(glob.glob("lib/**/*.c", recursive=True) + glob.glob("lib/**/*.h", recursive=True)):
    with open(path, encoding="utf-8") as f:
        src = f.read()
    for line, text in comments(src):
        for m in LABEL.finditer(text):
            where = f"{path}:{line + text.count(chr(10), 0, m.start())}"
            code.setdefault(m.group(1), []).append((where, text))

# label -> list of "file:line" of table rows naming it in the first column
table = {}
for doc in sorted(glob.glob(DOC)):
    with open(doc, encoding="utf-8") as f:
        for k, row in enumerate(f, 1):
            if not row.startswith("|"):
                continue
            cells = row.split("|")
            if len(cells) < 3:
                continue
            for m in LABEL.finditer(cells[1]):
                table.setdefault(m.group(1), []).append(f"{doc}:{k}")

if sys.argv[1:] == ["--list"]:
    for label in sorted(set(code) | set(table)):
        sites = sorted({w for w, _ in code.get(label, [])})
        rows = ", ".join(table.get(label, [])) or "no table row"
        print(f"[{label}]  ({rows})")
        for w in sites:
            print(f"    {w}")
    sys.exit(0)

problems = []
for label in sorted(set(code) - set(table)):
    sites = ", ".join(sorted({w for w, _ in code[label]}))
    problems.append(f"[{label}] is used in lib/ ({sites}) but no table row of {DOC} names it")
for label in sorted(set(table) - set(code)):
    rows = ", ".join(table[label])
    problems.append(f"[{label}] has a table row ({rows}) but no lib/ comment uses it")
for label, rows in sorted(table.items()):
    if len(rows) > 1:
        problems.append(f"[{label}] is named by {len(rows)} table rows ("
                        + ", ".join(rows) + "): one row per label")
for label, uses in sorted(code.items()):
    sites = {w for w, _ in uses}
    if len(sites) == 1 and not any("pairs with" in t for _, t in uses):
        problems.append(f"[{label}] is used at one place in lib/ only ({uses[0][0]}): "
                        "label the other end of the edge too, or, for a fence, "
                        "say in its comment what it pairs with")

if problems:
    for p in problems:
        print("check-edges: " + p)
    print(f"""check-edges: {len(problems)} problem(s).
  Every ordering label must sit in lib/ comments at both ends of its edge and
  in the first column of exactly one table row in {DOC}: the edges table
  of docs/protocol/README.md, whose row names the page that describes the
  edge under a heading of its name (fifo.md for lib/policy/fifo/fifo.h, fifo.c,
  fifo_copy.c, roles.c and roles.h; reservoirs.md, liveness.md and waits.md
  for the rest). After merging branches that label lib/: add a row and a
  description for each label above that no table names, and where two branches spelled one edge differently
  (for instance a FIFO caller of cistern__publish_word() and wait.h), keep
  one spelling in both files and in the table. `bash scripts/check-edges.sh --list`
  shows every label and where it is used.""")
    sys.exit(1)
print(f"check-edges: {len(code)} labels, each in lib/ at both ends and in one table row")
PY
