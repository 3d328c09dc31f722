#!/usr/bin/env bash
# Installs what Courier needs, builds it, and runs the main sample on the in-process
# executor.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
"$root/build/bin/courier-run" "$root/samples/02-local-kernel/app.mlir" --entry main \
  --arg '[1, 2, 3, 4]' --time
