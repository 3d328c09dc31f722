#!/usr/bin/env bash
# Configures (once) and builds Courier into ./build with clang-22, lld and Ninja. Arguments, when
# given, configure the directory again with them (-DCOURIER_SANITIZE=ON ...);
# COURIER_BUILD_TARGET builds one target instead of everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${COURIER_BUILD_DIR:-$root/build}
if [ ! -f "$build/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 -DLLVM_USE_LINKER=lld "$@"
fi
cmake --build "$build" ${COURIER_BUILD_TARGET:+--target "$COURIER_BUILD_TARGET"}
