#!/usr/bin/env bash
# Cross-builds courier-executor and courier-worker for aarch64 Linux (and the `call` test
# plugin) into ./build-aarch64, or COURIER_AARCH64_BUILD_DIR, with cmake/aarch64-linux-gnu.cmake
# and the packages `scripts/install-deps.sh --aarch64` installs. Arguments, when given,
# configure the directory again with them. Copy bin/courier-executor and bin/courier-worker
# to an ARM board (docs/deploy.md, "An executor on an ARM board"), or run them here under
# qemu: with binfmt_misc's qemu-aarch64 entry they run as any program does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${COURIER_AARCH64_BUILD_DIR:-$root/build-aarch64}
for needed in /usr/lib/aarch64-linux-gnu/libLLVM-22.so /usr/lib/aarch64-linux-gnu/crt1.o \
    /usr/lib/aarch64-linux-gnu/libcpp-httplib.so; do
  if [ ! -e "$needed" ]; then
    echo "build-aarch64-executor: $needed is missing; scripts/install-deps.sh --aarch64" \
      "installs the arm64 libraries" >&2
    exit 1
  fi
done
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_TOOLCHAIN_FILE=$root/cmake/aarch64-linux-gnu.cmake" "$@"
elif [ $# -gt 0 ]; then
  cmake -S "$root" -B "$build" "$@"
fi
cmake --build "$build"
