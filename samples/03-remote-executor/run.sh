#!/usr/bin/env bash
# Runs sample 2's program on a courier-executor process started here, instead of in process.
set -euo pipefail
bin=${1:?usage: run.sh BUILD/bin}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../start-executor.sh"

start_executor address
"$bin/courier-run" "$here/../02-local-kernel/app.mlir" --entry main --arg '[1, 2, 3, 4]' \
  --executor "$address" --cache-dir "$executor_fifos/cache"
# The kernel ran there, not here.
curl -sf "http://$address/metrics" | grep '^courier_launches_total'
