#!/usr/bin/env bash
# format.sh - apply cistern's style: clang-format (.clang-format) to the C and
# C++ sources that git tracks, and .editorconfig's rules (no trailing
# whitespace, a final newline) to its other text files.
#
#   bash scripts/format.sh            # rewrite what differs
#   bash scripts/format.sh --check    # change nothing; name what differs, exit 1 if anything does
#   bash scripts/format.sh FILE...    # only these files (either way)
#
# Needs clang-format 14 (Debian 12's clang-format package): other versions
# format some code differently. CLANG_FORMAT names the binary to use.
set -uo pipefail
cd "$(dirname "$0")/.."

check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  cf=clang-format
  command -v clang-format-14 >/dev/null && cf=clang-format-14
fi
if ! version=$("$cf" --version 2>/dev/null); then
  echo "format: $cf not found; install clang-format (version 14)"
  exit 1
fi
if ! grep -q 'version 14\.' <<<"$version"; then
  echo "format: needs clang-format 14, found: $version"
  exit 1
fi

# The files: those given, or every tracked one of each kind.
if [ $# -gt 0 ]; then
  files=("$@")
elif git rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.c' '*.h' '*.cpp' '*.md' '*.sh' '*.py' '*.build' \
    '*.pml' '*.1' '*.txt' '.ci/run' '.clang-format' '.editorconfig' '.gitignore')
else
  mapfile -t files < <(find . -path './build*' -prune -o -type f \( -name '*.[ch]' -o -name '*.cpp' \
    -o -name '*.md' -o -name '*.sh' -o -name '*.py' -o -name meson.build -o -name '*.pml' \) -print |
    sed 's|^\./||' | sort)
fi
c_files=() text_files=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  case $f in
    *.c | *.h | *.cpp) c_files+=("$f") ;;
    *) text_files+=("$f") ;;
  esac
done

differ=0
if [ $check = 1 ]; then
  if ((${#c_files[@]})); then
    out=$("$cf" --dry-run --Werror "${c_files[@]}" 2>&1)
    if [ $? -ne 0 ]; then
      # clang-format names each place as FILE:LINE:COL: error: ...
      while read -r n f; do
        echo "format: $f: $n places differ from .clang-format's layout"
        differ=1
      done < <(grep -oE '^[^:]+:[0-9]+:[0-9]+: error' <<<"$out" | cut -d: -f1 | sort | uniq -c)
      [ $differ = 1 ] || { printf '%s\n' "$out" | head -n 5; differ=1; }
    fi
  fi
  for f in ${text_files[@]+"${text_files[@]}"}; do
    if grep -qE '[[:space:]]+$' "$f"; then
      echo "format: $f: trailing whitespace (line $(grep -nE '[[:space:]]+$' "$f" | head -n 1 | cut -d: -f1))"
      differ=1
    fi
    if [ -s "$f" ] && [ -n "$(tail -c 1 "$f")" ]; then
      echo "format: $f: no newline at the end"
      differ=1
    fi
  done
  if [ $differ = 1 ]; then
    echo "format: bash scripts/format.sh rewrites them"
    exit 1
  fi
  echo "format: clean (${#c_files[@]} C sources, ${#text_files[@]} other files)"
  exit 0
fi

if ((${#c_files[@]})); then
  "$cf" -i "${c_files[@]}" || exit 1
fi
for f in ${text_files[@]+"${text_files[@]}"}; do
  if grep -qE '[[:space:]]+$' "$f"; then sed -i -E 's/[[:space:]]+$//' "$f"; fi
  if [ -s "$f" ] && [ -n "$(tail -c 1 "$f")" ]; then echo >>"$f"; fi
done
echo "format: applied to ${#c_files[@]} C sources and ${#text_files[@]} other files"
