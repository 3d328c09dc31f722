# Sourced by the samples' scripts: start_executor VAR [ARGS...] starts a courier-executor on
# a free loopback port, waits until it is bound (it prints "listening on HOST:PORT" then)
# and stores its address in VAR. Executors are stopped when the script exits.
executor_pids=()
executor_fifos=$(mktemp -d)
trap 'kill "${executor_pids[@]}" 2>/dev/null || true; rm -rf "$executor_fifos"' EXIT

start_executor() {
  local var=$1
  shift
  local fifo="$executor_fifos/${#executor_pids[@]}"
  mkfifo "$fifo"
  "$bin/courier-executor" --listen 127.0.0.1:0 --quiet "$@" > "$fifo" &
  executor_pids+=($!)
  # Keep the pipe open for the executor's lifetime; the read blocks until it is bound.
  local fd
  exec {fd}<"$fifo"
  local line
  read -r line <&"$fd"
  printf -v "$var" '%s' "${line#listening on }"
}
