#!/usr/bin/env bash
# Runs a libFuzzer target of tests/fuzz (docs/reliability.md) for SECONDS. Builds the fuzz
# targets first, in the sanitized build test.sh --sanitize uses (build-asan, or
# COURIER_SANITIZE_BUILD_DIR; scripts/build-sanitized.sh), replays every input that once broke
# the target (tests/fuzz/regressions/TARGET), then fuzzes from its seeds with a fixed seed
# (COURIER_FUZZ_SEED, default 1), keeping what it finds in build-asan/fuzz-corpus/TARGET for
# the next run. A crash, a leak, an input that takes over 10 s or more than 4 GiB fails the
# run and leaves the input in build-asan/fuzz-artifacts/TARGET/. TARGET "all" runs every
# target for SECONDS each, COURIER_FUZZ_JOBS at once (default: the CPUs this process may run
# on), each target's output kept in build-asan/fuzz-logs/TARGET.log and printed whole when it
# ends. Flags after SECONDS go to libFuzzer.
#   usage: fuzz.sh TARGET|all SECONDS [libFuzzer flags...]
set -euo pipefail
# One function, called on the last line: bash reads the whole script before running any of it,
# so a checkout that rewrites this file during a long run cannot change what runs.
main() {
  root=$(cd "$(dirname "$0")/.." && pwd)
  targets=(frame-header json-tensors serve-requests kserve-requests executor-requests
    object-intake mlir-intake worker-messages shared-memory)
  usage() {
    echo "usage: fuzz.sh TARGET|all SECONDS [libFuzzer flags...]; targets: ${targets[*]}" >&2
    exit 2
  }
  [ $# -ge 2 ] || usage
  target=$1 seconds=$2
  shift 2
  [[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive number, got '$seconds'" >&2; exit 2; }
  if [ "$target" = all ]; then
    chosen=("${targets[@]}")
  elif [[ " ${targets[*]} " == *" $target "* ]]; then
    chosen=("$target")
  else
    echo "fuzz.sh: unknown target '$target'" >&2
    usage
  fi

  build=${COURIER_SANITIZE_BUILD_DIR:-$root/build-asan}
  seed=${COURIER_FUZZ_SEED:-1}
  start=$(date +%s)
  COURIER_SANITIZE_BUILD_DIR=$build COURIER_BUILD_TARGET=courier-fuzzers \
    "$root/scripts/build-sanitized.sh"
  echo "fuzz.sh: fuzz targets built in $(($(date +%s) - start)) s"

  # One target: replays its regressions, then fuzzes from its seeds.
  run_target() {
    local name=$1
    shift
    local binary=$build/bin/courier-fuzz-$name
    local artifacts=$build/fuzz-artifacts/$name
    local corpus=$build/fuzz-corpus/$name
    mkdir -p "$artifacts" "$corpus"
    local regressions=("$root/tests/fuzz/regressions/$name"/*)
    if [ -e "${regressions[0]}" ]; then
      echo "fuzz.sh: $name: replaying ${#regressions[@]} regression inputs"
      "$binary" -artifact_prefix="$artifacts/" "${regressions[@]}"
    fi
    local seeds=() dir
    for dir in "$root/tests/fuzz/corpus/$name" "$build/tests/fuzz/corpus/$name"; do
      [ -d "$dir" ] && seeds+=("$dir")
    done
    local dictionary=()
    [ -f "$root/tests/fuzz/dicts/$name.dict" ] && dictionary=(-dict="$root/tests/fuzz/dicts/$name.dict")
    echo "fuzz.sh: $name: fuzzing for $seconds s with seed $seed"
    "$binary" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "${dictionary[@]}" "$@" \
      "$corpus" "${seeds[@]}"
  }

  if [ ${#chosen[@]} -eq 1 ]; then
    run_target "${chosen[0]}" "$@"
    return
  fi
  # Several targets: COURIER_FUZZ_JOBS at a time, each into its own log, printed as it ends.
  jobs=${COURIER_FUZZ_JOBS:-$(nproc)}
  [[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: COURIER_FUZZ_JOBS must be a positive number, got '$jobs'" >&2; exit 2; }
  logs=$build/fuzz-logs
  mkdir -p "$logs"
  declare -A running=()
  failed=()
  finish_one() {
    local pid status=0
    wait -n -p pid "${!running[@]}" || status=$?
    local name=${running[$pid]}
    unset "running[$pid]"
    cat "$logs/$name.log"
    if [ "$status" -ne 0 ]; then
      echo "fuzz.sh: $name failed (exit $status); its output is above and in $logs/$name.log" >&2
      failed+=("$name")
    fi
  }
  echo "fuzz.sh: ${#chosen[@]} targets, $jobs at a time"
  for name in "${chosen[@]}"; do
    [ ${#running[@]} -lt "$jobs" ] || finish_one
    run_target "$name" "$@" >"$logs/$name.log" 2>&1 &
    running[$!]=$name
  done
  while [ ${#running[@]} -gt 0 ]; do finish_one; done
  echo "fuzz.sh: built and fuzzed in $(($(date +%s) - start)) s"
  if [ ${#failed[@]} -gt 0 ]; then
    # Each failure's end again, last: where a log is cut to its tail, the cause stays in it.
    for name in "${failed[@]}"; do
      echo "fuzz.sh: the end of $name's output ($logs/$name.log):" >&2
      grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' "$logs/$name.log" | tail -n 60 >&2
    done
    echo "fuzz.sh: failed: ${failed[*]}" >&2
    exit 1
  fi
}
main "$@"
