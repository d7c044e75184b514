#!/usr/bin/env bash
# cmake.sh BUILDDIR - `meson install` into a scratch root, then build a small
# CMake project against it with find_package(cistern) and run its programs:
# a core-only C program through cistern::cistern (which must not need
# libzmq), the simulation client through cistern::remote and
# cistern::remote_static (and cistern::remote with cistern_USE_STATIC_LIBS),
# C++ through
# cistern.hpp, Fortran through cistern::fortran and the MPI gather through
# cistern::mpi (the last two where cistern was built with them).
set -euo pipefail
build=$(cd "$1" && pwd)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root" >/dev/null
config=$(find "$root" -name cistern-config.cmake | head -n 1)
if [ -z "$config" ]; then
  echo "cmake check: meson install wrote no cistern-config.cmake" >&2
  exit 1
fi
prefix=$(cd "$(dirname "$config")/../../.." && pwd)
case $prefix in */lib) prefix=$(dirname "$prefix") ;; esac
src=$root/consumer
mkdir -p "$src"
cat > "$src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(consumer C CXX)
find_package(cistern 0.1 REQUIRED)
add_compile_options(-Wall -Wextra -Werror)
add_executable(core_c core.c)
target_link_libraries(core_c cistern::cistern)
add_executable(sim_c sim.c)
target_link_libraries(sim_c cistern::remote)
add_executable(sim_static sim.c)
target_link_libraries(sim_static cistern::remote_static)
add_executable(sim_cxx sim.cpp)
set_target_properties(sim_cxx PROPERTIES CXX_STANDARD 20)
target_link_libraries(sim_cxx cistern::cistern)
if(cistern_FORTRAN_FOUND)
  enable_language(Fortran)
  set(CMAKE_Fortran_FLAGS "-Wall -Werror")
  add_executable(sim_f sim.f90)
  target_link_libraries(sim_f cistern::fortran)
endif()
if(cistern_MPI_FOUND)
  find_package(MPI REQUIRED COMPONENTS C)
  add_executable(sim_mpi mpi.c)
  target_link_libraries(sim_mpi cistern::mpi MPI::MPI_C)
endif()
CMAKE
# The core alone: a segment, one put and one get, with cistern.h only.
cat > "$src/core.c" <<'C'
#include <cistern.h>
#include <stdio.h>
#include <unistd.h>
int main(void)
{
	char name[64];
	snprintf(name, sizeof(name), "cmake-check-core-%d", (int)getpid());
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
# Each program makes its own segment with a schema, sends one step and reads it back.
cat > "$src/sim.c" <<'C'
#include <cistern_sim.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(void)
{
	char name[64];
	snprintf(name, sizeof(name), "cmake-check-c-%d", (int)getpid());
	struct cistern_config cfg = {.slot_count = 4, .schema = "u:float64[3]"};
	struct cistern *c;
	if (cistern_create(name, &cfg, &c) < 0)
		return 1;
	struct cistern_sim *sim;
	double u[3] = {1, 2, 3}, back[3] = {0};
	int ok = cistern_sim_open(name, 4, &sim) == 0;
	int f = ok ? cistern_sim_field(sim, "u", CISTERN_FLOAT64, 3) : -1;
	ok = ok && f >= 0 && cistern_sim_write(sim, f, u) == 0 && cistern_sim_send(sim, 0, 0) == 0;
	cistern_sim_close(sim);
	ok = ok && cistern_get(c, back, sizeof(back), NULL, 0) == sizeof(back) && memcmp(u, back, sizeof(u)) == 0;
	cistern_detach(c);
	cistern_unlink(name);
	return ok ? 0 : 1;
}
C
cat > "$src/sim.cpp" <<'CXX'
#include <cistern.hpp>
#include <cstdio>
#include <cstring>
#include <unistd.h>
int main()
{
	char name[64];
	std::snprintf(name, sizeof(name), "cmake-check-cxx-%d", (int)getpid());
	cistern_config cfg{};
	cfg.slot_count = 4;
	cfg.slot_size = 64;
	struct cistern *c;
	if (cistern_create(name, &cfg, &c) < 0)
		return 1;
	bool ok = false;
	try {
		cistern_cpp::segment seg(name);
		auto r = seg.reserve(0);
		std::span<double> d = r.span<double>();
		d[0] = 2.5;
		r.commit(sizeof(double), 1, 2);
		double back = 0;
		ok = d.size() == 8 && cistern_get(c, &back, sizeof(back), nullptr, 0) == sizeof(back) && back == 2.5;
	} catch (const std::system_error &e) {
		std::fprintf(stderr, "%s\n", e.what());
	}
	cistern_detach(c);
	cistern_unlink(name);
	return ok ? 0 : 1;
}
CXX
cat > "$src/sim.f90" <<'F90'
program sim_f
  use cistern
  implicit none
  type(cistern_segment) :: seg
  ! No such segment: the call must say so with a code the program can test.
  if (cistern_attach('cmake-check-fortran-none', seg) /= CISTERN_ENOENT) stop 1
end program
F90
cat > "$src/mpi.c" <<'C'
#include <cistern_mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	char name[64];
	snprintf(name, sizeof(name), "cmake-check-mpi-%d", (int)getpid());
	struct cistern_config cfg = {.slot_count = 4, .schema = "u:int32[2]"};
	struct cistern *c;
	struct cistern_sim *sim;
	int ok = cistern_create(name, &cfg, &c) == 0 && cistern_sim_open(name, 0, &sim) == 0;
	int part[2] = {5, 6}, back[2] = {0};
	int f = ok ? cistern_sim_field(sim, "u", CISTERN_INT32, 2) : -1;
	ok = ok && cistern_mpi_gather(sim, f, part, 2, MPI_COMM_WORLD, 0) == 0 && cistern_sim_send(sim, 0, 0) == 0;
	ok = ok && cistern_get(c, back, sizeof(back), NULL, 0) == sizeof(back) && back[1] == 6;
	if (ok) {
		cistern_sim_close(sim);
		cistern_detach(c);
	}
	cistern_unlink(name);
	MPI_Finalize();
	return ok ? 0 : 1;
}
C
cmake -S "$src" -B "$root/b" -DCMAKE_PREFIX_PATH="$prefix" >"$root/cmake.log" 2>&1 &&
  cmake --build "$root/b" >>"$root/cmake.log" 2>&1 || { cat "$root/cmake.log" >&2; exit 1; }
# cistern_USE_STATIC_LIBS makes cistern::cistern the static library, with its
# private libraries: the program then needs no libcistern.so to run.
mkdir -p "$root/static"
cat > "$root/static/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(consumer_static C)
set(cistern_USE_STATIC_LIBS ON)
find_package(cistern REQUIRED)
add_executable(sim_c_static_switch $src/sim.c)
target_link_libraries(sim_c_static_switch cistern::remote)
CMAKE
cmake -S "$root/static" -B "$root/bs" -DCMAKE_PREFIX_PATH="$prefix" >"$root/cmake.log" 2>&1 &&
  cmake --build "$root/bs" >>"$root/cmake.log" 2>&1 || { cat "$root/cmake.log" >&2; exit 1; }
if ldd "$root/bs/sim_c_static_switch" | grep -q libcistern; then
  echo "cmake check: cistern_USE_STATIC_LIBS still linked libcistern.so" >&2
  exit 1
fi
"$root/bs/sim_c_static_switch" || { echo "cmake check: sim_c_static_switch failed" >&2; exit 1; }
libdir=$(dirname "$(find "$root" -name 'libcistern.so' | head -n 1)")
export LD_LIBRARY_PATH=$libdir OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# cistern::cistern is the core: ZeroMQ comes only with cistern::remote.
if readelf -d "$root/b/core_c" | grep -q 'libzmq'; then
  echo "cmake check: core_c, linked with cistern::cistern only, needs libzmq" >&2
  exit 1
fi
if ! readelf -d "$root/b/sim_c" | grep -q 'libcistern-remote'; then
  echo "cmake check: sim_c, linked with cistern::remote, does not need libcistern-remote" >&2
  exit 1
fi
ran=""
for p in core_c sim_c sim_static sim_cxx sim_f sim_mpi; do
  [ -x "$root/b/$p" ] || continue
  "$root/b/$p" || { echo "cmake check: $p failed" >&2; exit 1; }
  ran="$ran $p"
done
echo "cmake check: find_package(cistern) from an installed tree built and ran:$ran, and with cistern_USE_STATIC_LIBS sim_c_static_switch"
