#!/usr/bin/env bash
# Builds Courier and runs every test (lit and Catch2, through ctest). With --sanitize, builds
# into its own directory (build-asan, or COURIER_SANITIZE_BUILD_DIR) with AddressSanitizer,
# UndefinedBehaviorSanitizer and LeakSanitizer (scripts/build-sanitized.sh, the build the fuzz
# targets share) and runs the suite there, leaving out by label only the tests that measure
# memory or link uninstrumented code, the benchmarks' smoke runs and the checks of printed text
# against the documentation (docs/reliability.md).
set -euo pipefail
# One function, called on the last line: bash reads all of it before running any, so a
# checkout that rewrites this file during a long run cannot change what runs.
main() {
  root=$(cd "$(dirname "$0")/.." && pwd)
  case "${1:-}" in
    "") sanitize=false ;;
    --sanitize) sanitize=true ;;
    *) echo "test.sh: unknown option '$1' (usage: test.sh [--sanitize])" >&2; exit 2 ;;
  esac
  "$root/scripts/install-deps.sh"
  if ! $sanitize; then
    "$root/scripts/build.sh"
    exec ctest --test-dir "${COURIER_BUILD_DIR:-$root/build}" --output-on-failure -j2
  fi

  build=${COURIER_SANITIZE_BUILD_DIR:-$root/build-asan}
  start=$(date +%s)
  COURIER_SANITIZE_BUILD_DIR=$build "$root/scripts/build-sanitized.sh"
  built=$(date +%s)
  # The runtime options are built into every executable (tests/sanitizers/SanitizerOptions.c).
  # Reports go to files, one per process, so that a server or worker a test started and stopped
  # cannot leak, or touch memory it does not own, without failing the run.
  reports=$build/sanitizer-reports
  rm -rf "$reports"
  mkdir -p "$reports"
  export ASAN_OPTIONS="log_path=$reports/report${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export UBSAN_OPTIONS="log_path=$reports/report${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
  status=0
  ctest --test-dir "$build" --output-on-failure -j2 -LE '^(memory|uninstrumented|bench|text)$' || status=$?
  echo "test.sh --sanitize: built in $((built - start)) s, tested in $(($(date +%s) - built)) s"
  found=("$reports"/report*)
  if [ -e "${found[0]}" ]; then
    echo "test.sh --sanitize: ${#found[@]} processes wrote sanitizer reports:" >&2
    for report in "${found[@]}"; do
      echo "== $report" >&2
      cat "$report" >&2
    done
    status=1
  fi
  exit $status
}
main "$@"
