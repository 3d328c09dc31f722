#!/usr/bin/env bash
# Starts two executors (the second with the sample's plugin), points the program at them and
# runs it.
set -euo pipefail
bin=${1:?usage: run.sh BUILD/bin PLUGIN.so}
plugin=${2:?usage: run.sh BUILD/bin PLUGIN.so}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../start-executor.sh"

start_executor address_a
start_executor address_b --plugin "$plugin"
sed -e "s/EXECUTOR_A/$address_a/g" -e "s/EXECUTOR_B/$address_b/g" "$here/app.mlir" \
  > "$executor_fifos/app.mlir"
"$bin/courier-run" "$executor_fifos/app.mlir" --entry main --arg '[1, 2, 3, 4]' --arg 0.5 \
  --cache-dir "$executor_fifos/cache"
