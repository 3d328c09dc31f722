#!/usr/bin/env bash
# Installs Courier from a build tree and moves the install elsewhere (nothing in it may depend
# on where it was installed), then builds this sample against it three ways: with CMake and
# clang-22, with CMake and g++, and with g++ and pkg-config alone; and runtime-only/, a C
# program linking Courier::Runtime alone. Runs each build and prints its output, each line
# after the name of the build; prints nothing unless every step passed. Also checks that
# find_package(Courier 1) refuses this 0.x install. Then runs the moved tree's own courier-run,
# and, when it holds the Python package (given its interpreter as the second argument), the
# package with process isolation: its libraries and its courier-module-worker are found from
# where the tree now is.
set -euo pipefail
build=${1:?usage: run.sh COURIER_BUILD_DIR [PYTHON]}
python=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs a step quietly; on failure shows its output and stops.
quietly() {
  local log=$work/step.log
  if ! "$@" > "$log" 2>&1; then
    echo "run.sh: failed: $*" >&2
    cat "$log" >&2
    exit 1
  fi
}

quietly cmake --install "$build" --prefix "$work/staged"
mv "$work/staged" "$work/courier"
prefix=$work/courier

# Each build: a name, its source directory, then the configure flags for the compiler.
cmake_build() {
  local name=$1 source=$2
  shift 2
  quietly cmake -G Ninja -S "$source" -B "$work/$name" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" "$@"
  quietly cmake --build "$work/$name"
}
cmake_build clang-22 "$here" -DCMAKE_CXX_COMPILER=clang++-22 -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld
cmake_build g++ "$here" -DCMAKE_CXX_COMPILER=g++
# Courier::Runtime alone, from C: the C ABI host code compiled ahead of time links.
cmake_build runtime-only "$here/runtime-only" -DCMAKE_C_COMPILER=gcc
mkdir -p "$work/pkg-config"
quietly bash -c "g++ -std=c++17 -O1 '$here/main.cpp' -o '$work/pkg-config/embedding' \
  \$(PKG_CONFIG_PATH='$prefix/lib/pkgconfig' pkg-config --cflags --libs courier)"

# A request for another major version finds nothing.
mkdir -p "$work/major"
cat > "$work/major/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(WantsCourier1 NONE)
find_package(Courier 1 CONFIG QUIET)
if(Courier_FOUND)
  message(FATAL_ERROR "find_package(Courier 1) accepted Courier ${Courier_VERSION}")
endif()
CMAKE
quietly cmake -S "$work/major" -B "$work/major/build" -DCMAKE_PREFIX_PATH="$prefix"

output=""
for name in clang-22 g++ pkg-config; do
  run=$(cd "$here" && XDG_CACHE_HOME="$work/cache" "$work/$name/embedding" square.mlir)
  output+=$(sed "s/^/$name: /" <<< "$run")$'\n'
done
output+="runtime-only: $(XDG_CACHE_HOME="$work/cache" "$work/runtime-only/runtime-only")"$'\n'
output+="courier-run: $(cd "$here" && XDG_CACHE_HOME="$work/cache" "$prefix/bin/courier-run" \
  square.mlir --arg '[1.5, 2, 3]')"$'\n'
if [ -n "$python" ]; then
  site=$(echo "$prefix"/lib/python3*/dist-packages)
  output+="python: $(cd "$here" && XDG_CACHE_HOME="$work/cache" PYTHONPATH="$site" \
    PYTHONDONTWRITEBYTECODE=1 env -u COURIER_MODULE_WORKER "$python" -c '
import courier, numpy as np
module = courier.Engine(isolation="process").compile_file("square.mlir")
print(courier.__file__.startswith("'"$site"'"), module.main(np.array([1.5, 2, 3], np.float32)))')"$'\n'
fi
printf '%s' "$output"
