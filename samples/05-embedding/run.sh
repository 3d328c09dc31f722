#!/usr/bin/env bash
# Installs Courier from a build tree and moves the install elsewhere (nothing in it may depend
# on where it was installed), then builds this sample against it three ways: with CMake and
# clang-22, with CMake and g++, and with g++ and pkg-config alone; and runtime-only/, a C
# program, three times: linking Courier::Runtime alone, found without MLIR or prometheus-cpp,
# and again with gcc and courier-runtime.pc, both linked without the executor library,
# libseccomp or prometheus-cpp, which open a session on the moved tree's courier-executor (the
# first is refused "local"); and with Courier::Executor too, which opens one on "local". Runs each build and prints its output, each line after the name
# of the build; prints nothing unless every step passed. Also checks that
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
# Courier::Runtime alone, from C: the C ABI host code compiled ahead of time links. Its
# component asks for neither MLIR nor prometheus-cpp (found, either would fail the build).
cmake_build runtime-only "$here/runtime-only" -DCMAKE_C_COMPILER=gcc \
  -DCMAKE_DISABLE_FIND_PACKAGE_MLIR=ON -DCMAKE_DISABLE_FIND_PACKAGE_prometheus-cpp=ON
cmake_build runtime-local "$here/runtime-only" -DCMAKE_C_COMPILER=gcc -DWITH_IN_PROCESS_EXECUTOR=ON
# The same program with gcc and courier-runtime.pc alone.
mkdir -p "$work/runtime-pc"
quietly bash -c "gcc -O1 '$here/runtime-only/main.c' -o '$work/runtime-pc/runtime-only' \
  \$(PKG_CONFIG_PATH='$prefix/lib/pkgconfig' pkg-config --cflags --libs courier-runtime)"

# What a program holds: the libraries it loads, and whether the executor is linked in.
holds() {
  readelf -d "$1" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'
  nm -C "$1" | grep -o 'courier::executor::ObjectHost::create' | sort -u || true
}
alone=$(holds "$work/runtime-only/runtime-only"; holds "$work/runtime-pc/runtime-only")
if grep -E 'seccomp|prometheus|ObjectHost' <<< "$alone" > /dev/null; then
  echo "run.sh: the runtime alone links more than it needs:" >&2
  echo "$alone" >&2
  exit 1
fi
# The same check finds the executor where it is linked.
if ! grep -E 'ObjectHost' <<< "$(holds "$work/runtime-local/runtime-only")" > /dev/null; then
  echo "run.sh: the runtime with Courier::Executor holds no executor" >&2
  exit 1
fi
# The in-process executor is kernel hosts and sessions, not the executor server's core.
if nm -C "$work/runtime-local/runtime-only" | grep -q 'courier::executor::ExecutorCore::'; then
  echo "run.sh: the in-process executor links the executor server's core" >&2
  exit 1
fi
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
# The runtime alone reaches the moved tree's executor over a unix socket, and has no "local".
"$prefix/bin/courier-executor" --listen "unix:$work/executor.sock" > "$work/executor.log" 2>&1 &
executor=$!
trap 'kill $executor 2> /dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -S "$work/executor.sock" ] && break; sleep 0.1; done
output+="runtime-only: $("$work/runtime-only/runtime-only" "unix:$work/executor.sock")"$'\n'
output+="runtime-only: $("$work/runtime-only/runtime-only" local 2>&1 || true)"$'\n'
output+="runtime-pc: $("$work/runtime-pc/runtime-only" "unix:$work/executor.sock")"$'\n'
output+="runtime-local: $("$work/runtime-local/runtime-only" local)"$'\n'
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
