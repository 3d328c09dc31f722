#!/usr/bin/env bash
# Configures and builds the sanitized build (build-asan, or COURIER_SANITIZE_BUILD_DIR):
# AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer, with libFuzzer's coverage
# instrumentation, so that one build holds both the suite test.sh --sanitize runs and the fuzz
# targets fuzz.sh runs (docs/reliability.md). COURIER_BUILD_TARGET builds one target instead of
# everything (fuzz.sh builds courier-fuzzers).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# -O1 with line tables: the sanitizers' usual trade of build and run time against reports that
# still name file and line.
flags="-O1 -gline-tables-only -DNDEBUG"
COURIER_BUILD_DIR=${COURIER_SANITIZE_BUILD_DIR:-$root/build-asan} exec "$root/scripts/build.sh" \
  -DCOURIER_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$flags" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$flags"
