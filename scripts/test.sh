#!/usr/bin/env bash
# Builds Courier and runs every test (lit and Catch2, through ctest).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
ctest --test-dir "${COURIER_BUILD_DIR:-$root/build}" --output-on-failure -j2
