#!/usr/bin/env bash
# check.sh BUILDDIR - `meson install` into a scratch root, then build and run a
# program against the installed header, library and pkg-config file.
set -euo pipefail
build=$(cd "$1" && pwd)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root" >/dev/null
pc=$(dirname "$(find "$root" -name cistern.pc | head -n 1)")
export PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$root"
cat > "$root/hello.c" <<'C'
#include <cistern.h>
#include <stdio.h>
#include <unistd.h>
int main(void)
{
	char name[64];
	snprintf(name, sizeof(name), "install-check-%d", (int)getpid());
	struct cistern *c;
	if (cistern_create(name, NULL, &c) < 0)
		return 1;
	char out[8];
	int ok = cistern_put(c, "ok", 2, NULL, 0) == 0 && cistern_get(c, out, sizeof(out), NULL, 0) == 2;
	cistern_detach(c);
	cistern_unlink(name);
	return ok ? 0 : 1;
}
C
cc -std=c11 -Wall -Wextra -Werror "$root/hello.c" -o "$root/hello" $(pkg-config --cflags --static --libs cistern) -static-libgcc
libdir=$(dirname "$(find "$root" -name 'libcistern.so' | head -n 1)")
LD_LIBRARY_PATH="$libdir" "$root/hello"
# The shared library exports the public API and nothing else.
extra=$(nm -D --defined-only "$libdir/libcistern.so" | awk '{print $3}' | grep -v '^cistern_[a-z]' || true)
if [ -n "$extra" ]; then
  echo "install check: internal symbols exported: $extra" >&2
  exit 1
fi
# The static library exports no name outside cistern's: internal functions carry
# cistern__, so a program that links libcistern.a keeps its own names to itself.
archive=$(find "$root" -name 'libcistern.a' | head -n 1)
foreign=$(nm -g --defined-only "$archive" | awk 'NF == 3 {print $3}' | grep -v '^cistern_' || true)
if [ -n "$foreign" ]; then
  echo "install check: libcistern.a defines names without the cistern prefix: $foreign" >&2
  exit 1
fi
echo "install check: header, library and pkg-config file work from an installed tree; only cistern_* is exported, and libcistern.a defines only cistern_ names"
