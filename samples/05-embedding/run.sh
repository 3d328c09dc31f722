#!/usr/bin/env bash
# Installs Courier from a build tree, builds this sample against the install with
# find_package(Courier), and runs it.
set -euo pipefail
build=${1:?usage: run.sh COURIER_BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/install" > /dev/null
cmake -G Ninja -S "$here" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER=clang++-22 -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld \
  -DCourier_DIR="$work/install/lib/cmake/Courier" > /dev/null
cmake --build "$work/build" > /dev/null
XDG_CACHE_HOME="$work/cache" "$work/build/embedding"
