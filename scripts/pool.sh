#!/usr/bin/env bash
# Runs a pool of courier-executors (or, with --serve, courier-serve instances) on unix sockets
# in a run directory, behind nginx on one TCP address; stops them all on SIGINT or SIGTERM.
set -euo pipefail

# `wait -n -p`, which the pool's last loop waits with, is bash 5.1's; older bash would spin.
if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
  echo "pool.sh: needs bash 5.1 or later (for wait -n -p), not $BASH_VERSION" >&2
  exit 2
fi

usage() {
  cat <<'EOF'
usage: pool.sh --executors N --listen HOST:PORT [--serve] [--token-file FILE]
               [--tls-cert FILE --tls-key FILE] [--insecure-plaintext] [--run-dir DIR]
               [--bin-dir DIR] [-- SERVER-ARG...]
  --executors   how many servers to start (1-64)
  --listen      the front door's address: an IPv4 HOST:PORT (port 0 picks a free one)
  --serve       start courier-serve instances instead of courier-executors
  --token-file  bearer token every server requires (required beyond loopback)
  --tls-cert, --tls-key  the front door speaks TLS with this certificate and key
  --insecure-plaintext   allow a non-loopback --listen without TLS
  --run-dir     where sockets, logs, pid files and nginx's files go (default: a new
                directory under ${TMPDIR:-/tmp}, removed on exit)
  --bin-dir     where courier-executor and courier-serve are (default $COURIER_BIN_DIR,
                else the build tree's bin/)
  after --       arguments passed to every server
Prints "listening on HOST:PORT" (https://HOST:PORT with TLS) once every server is ready
and nginx answers.
EOF
}

fail() {
  echo "pool.sh: $*" >&2
  exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
count=""
listen=""
serve=0
token_file=""
tls_cert=""
tls_key=""
insecure_plaintext=0
run_dir=""
bin_dir=${COURIER_BIN_DIR:-$root/build/bin}
extra=()

need_value() {
  [ $# -ge 2 ] || fail "$1 needs a value"
}
while [ $# -gt 0 ]; do
  case $1 in
    --executors) need_value "$@"; count=$2; shift 2 ;;
    --listen) need_value "$@"; listen=$2; shift 2 ;;
    --serve) serve=1; shift ;;
    --token-file) need_value "$@"; token_file=$2; shift 2 ;;
    --tls-cert) need_value "$@"; tls_cert=$2; shift 2 ;;
    --tls-key) need_value "$@"; tls_key=$2; shift 2 ;;
    --insecure-plaintext) insecure_plaintext=1; shift ;;
    --run-dir) need_value "$@"; run_dir=$2; shift 2 ;;
    --bin-dir) need_value "$@"; bin_dir=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) usage >&2; fail "unknown argument '$1'" ;;
  esac
done

[ -n "$count" ] || fail "--executors N is required"
if ! [[ $count =~ ^[0-9]+$ ]] || [ "$count" -lt 1 ] || [ "$count" -gt 64 ]; then
  fail "--executors must be a number from 1 to 64, not '$count'"
fi
[ -n "$listen" ] || fail "--listen HOST:PORT is required"
[[ $listen =~ ^([0-9]{1,3}(\.[0-9]{1,3}){3}):([0-9]{1,5})$ ]] ||
  fail "--listen must be an IPv4 HOST:PORT such as 127.0.0.1:8000, not '$listen'"
host=${BASH_REMATCH[1]}
port=${BASH_REMATCH[3]}
[ "$port" -le 65535 ] || fail "--listen's port must be at most 65535, not $port"
if [ -n "$tls_cert$tls_key" ]; then
  if [ -z "$tls_cert" ] || [ -z "$tls_key" ]; then
    fail "--tls-cert and --tls-key go together"
  fi
  for f in "$tls_cert" "$tls_key"; do
    [ -r "$f" ] || fail "cannot read TLS file '$f'"
  done
  tls_cert=$(realpath "$tls_cert")
  tls_key=$(realpath "$tls_key")
fi
if [[ $host != 127.* ]]; then
  [ -n "$token_file" ] ||
    fail "--listen $listen is beyond loopback: give --token-file (the servers run shipped code)"
  [ -n "$tls_cert" ] || [ "$insecure_plaintext" -eq 1 ] ||
    fail "--listen $listen is beyond loopback: give --tls-cert/--tls-key, or --insecure-plaintext"
fi
if [ -n "$token_file" ]; then
  [ -r "$token_file" ] || fail "cannot read --token-file '$token_file'"
  token_file=$(realpath "$token_file")
fi

if [ "$serve" -eq 1 ]; then
  kind=serve
  program=$bin_dir/courier-serve
  site="serve-pool"
  max_body=268435456 # courier-serve's default --max-body-bytes
else
  kind=executor
  program=$bin_dir/courier-executor
  site="executor-pool"
  max_body=4096m # courier-executor's default --max-body-mib
fi
[ -x "$program" ] || fail "no executable $program (set COURIER_BIN_DIR or --bin-dir)"
# The front door's body limit is the servers' own.
for ((i = 0; i < ${#extra[@]}; i++)); do
  case ${extra[i]} in
    --listen | --token-file) fail "${extra[i]} after -- is the pool's to set" ;;
    --max-body-mib) [ "$kind" = executor ] && max_body="${extra[i + 1]:-}m" ;;
    --max-body-bytes) [ "$kind" = serve ] && max_body="${extra[i + 1]:-}" ;;
  esac
done
[[ $max_body =~ ^[0-9]+m?$ ]] || fail "the servers' body limit '$max_body' is not a number"

nginx=$(command -v nginx || true)
[ -n "$nginx" ] || [ ! -x /usr/sbin/nginx ] || nginx=/usr/sbin/nginx
[ -n "$nginx" ] || fail "nginx is not installed (Debian: apt-get install nginx)"

pids=()     # the servers' process ids, by index; 0 once known to have exited
names=()    # "executor-1", ...
nginx_pid=""
header_file="" # curl's Authorization header, kept off its command line
stopped=0
remove_run_dir=0

# Forgets the servers (and nginx) that bash has reaped: such a pid may belong to another
# process by now. One that exited but is not yet reaped is a zombie, whose pid is not reused.
forget_exited() {
  local running i
  running=" $(jobs -rp | tr '\n' ' ') "
  for ((i = 0; i < ${#pids[@]}; i++)); do
    [[ $running == *" ${pids[i]} "* ]] || pids[i]=0
  done
  [[ -z $nginx_pid || $running == *" $nginx_pid "* ]] || nginx_pid=""
}

signal_servers() {
  forget_exited
  local pid
  for pid in "${pids[@]}"; do
    [ "$pid" -eq 0 ] || kill -TERM "$pid" 2>/dev/null || true
  done
}

stop_all() {
  [ "$stopped" -eq 0 ] || return 0
  stopped=1
  # Servers first, with SIGTERM: each drains what it is doing while nginx still passes it
  # the requests of its sessions; nginx goes once nothing is left behind it.
  # A second SIGINT or SIGTERM is passed on: it cuts the servers' drains short.
  trap 'signal_servers' TERM INT
  signal_servers
  local pid
  for pid in "${pids[@]}"; do
    while [ "$pid" -ne 0 ] && kill -0 "$pid" 2>/dev/null; do
      wait "$pid" 2>/dev/null || true
    done
  done
  if [ -n "$nginx_pid" ]; then
    kill -QUIT "$nginx_pid" 2>/dev/null || true
    while kill -0 "$nginx_pid" 2>/dev/null; do
      wait "$nginx_pid" 2>/dev/null || true
    done
  fi
  trap - TERM INT
  [ -z "$header_file" ] || rm -f "$header_file"
  if [ "$remove_run_dir" -eq 1 ]; then
    rm -rf "$run_dir"
  fi
}

# Whatever ends the script once it has started something (a failing command under set -e
# included) stops the servers and nginx and removes what it made.
on_exit() {
  local status=$?
  [ "$stopped" -eq 0 ] || return 0
  if [ "$status" -ne 0 ] && [ ${#pids[@]} -gt 0 ]; then
    echo "pool.sh: stopping the pool after a failure (exit status $status)" >&2
  fi
  stop_all
}
trap on_exit EXIT

if [ -z "$run_dir" ]; then
  run_dir=$(mktemp -d "${TMPDIR:-/tmp}/courier-pool-XXXXXX")
  remove_run_dir=1
fi
mkdir -p "$run_dir"
run_dir=$(realpath "$run_dir")
mkdir -p "$run_dir/nginx-temp"
# A socket's path must fit in sun_path (108 bytes).
[ ${#run_dir} -le 80 ] || fail "--run-dir '$run_dir' is too long for unix socket paths"

# Called with the reason; stops what started and exits 1.
abort() {
  echo "pool.sh: $*" >&2
  stop_all
  exit 1
}

stopping=0
trap 'stopping=1' TERM INT

# The token goes to curl in a file only its owner reads: on curl's command line any local user
# could read it in /proc/PID/cmdline.
token_header=()
if [ -n "$token_file" ]; then
  header_file=$run_dir/curl-authorization.header
  (
    umask 077
    printf 'Authorization: Bearer %s\n' "$(head -n1 "$token_file")" >"$header_file"
  )
  token_header=(-H "@$header_file")
fi

# Starts server $1 (1-based) in its own process group, so a terminal's Ctrl-C reaches only
# this script, which then stops the servers in order.
start_server() {
  local name=$kind-$1
  local args=(--listen "unix:$run_dir/$name.sock")
  [ -z "$token_file" ] || args+=(--token-file "$token_file")
  [ "$kind" = executor ] || args+=(--cache-dir "$run_dir/$name-cache")
  # Every client of a server is nginx, by one uid: nginx's limit_conn is the per-client limit.
  args+=(--max-connections-per-client 0)
  rm -f "$run_dir/$name.sock"
  setsid "$program" "${args[@]}" "${extra[@]}" >"$run_dir/$name.out" 2>>"$run_dir/$name.log" &
  pids+=($!)
  names+=("$name")
  echo $! >"$run_dir/$name.pid"
}

# Waits until server $1 (0-based index) printed its address and /v1/ready answers 200.
await_server() {
  local pid=${pids[$1]} name=${names[$1]}
  local deadline=$((SECONDS + 60))
  until grep -q '^listening on ' "$run_dir/$name.out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || abort "$name exited before listening: $(tail -n 5 "$run_dir/$name.log")"
    [ $SECONDS -lt $deadline ] || abort "$name printed no address within 60 s"
    [ $stopping -eq 0 ] || abort "stopped while starting"
    sleep 0.05
  done
  until [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "${token_header[@]}" \
    --unix-socket "$run_dir/$name.sock" http://localhost/v1/ready)" = 200 ]; do
    kill -0 "$pid" 2>/dev/null || abort "$name exited before it was ready: $(tail -n 5 "$run_dir/$name.log")"
    [ $SECONDS -lt $deadline ] || abort "$name was not ready within 60 s"
    [ $stopping -eq 0 ] || abort "stopped while starting"
    sleep 0.05
  done
}

for ((i = 1; i <= count; i++)); do
  start_server "$i"
done
for ((i = 0; i < count; i++)); do
  await_server "$i"
done

# The configuration: every file in the run directory, so what runs is there to read.
upstreams=$run_dir/$kind-upstreams.conf
: >"$upstreams"
for name in "${names[@]}"; do
  echo "server unix:$run_dir/$name.sock max_fails=1 fail_timeout=5s;" >>"$upstreams"
done
if [ -n "$tls_cert" ]; then
  # TLS 1.3 with AES-128-GCM first, as the servers' own TLS prefers: the cheapest per byte.
  printf 'ssl_certificate %s;\nssl_certificate_key %s;\nssl_protocols TLSv1.2 TLSv1.3;\nssl_prefer_server_ciphers on;\nssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256;\n' \
    "$tls_cert" "$tls_key" >"$run_dir/tls.conf"
else
  : >"$run_dir/tls.conf"
fi
cp "$root/deploy/nginx/courier-limits.conf" "$root/deploy/nginx/courier-errors.conf" "$run_dir/"
user_line=""
# Only a master running as root switches users; its workers must reach the root-owned
# (0600) sockets.
[ "$(id -u)" -ne 0 ] || user_line="user root;"

# Descriptors an nginx worker may open: the hard RLIMIT_NOFILE (nginx raises its soft limit
# to worker_rlimit_nofile; past the hard one only root may), at most 131072; and connections
# per worker half of that, a proxied request holding two.
worker_nofile=$(ulimit -Hn)
[[ $worker_nofile =~ ^[0-9]+$ ]] || worker_nofile=131072
[ "$worker_nofile" -le 131072 ] || worker_nofile=131072
worker_connections=$((worker_nofile / 2))

render() { # template, port
  local listen_line="$host:$2"
  [ -z "$tls_cert" ] || listen_line="$listen_line ssl"
  sed -e "s|@RUN_DIR@|$run_dir|g" -e "s|@CONF_DIR@|$run_dir|g" -e "s|@USER@|$user_line|g" \
    -e "s|@LISTEN@|$listen_line|g" -e "s|@MAX_BODY@|$max_body|g" \
    -e "s|@WORKER_NOFILE@|$worker_nofile|g" -e "s|@WORKER_CONNECTIONS@|$worker_connections|g" "$1"
}

free_port() {
  python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$host"
}

scheme=http
[ -z "$tls_cert" ] || scheme=https
# Port 0: pick a free one; should another process take it first, nginx fails to bind and
# the next attempt picks again.
for _ in 1 2 3 4 5; do
  front_port=$port
  [ "$port" -ne 0 ] || front_port=$(free_port)
  render "$root/deploy/nginx/$site.conf.in" "$front_port" >"$run_dir/site.conf"
  render "$root/deploy/nginx/nginx.conf.in" "$front_port" >"$run_dir/nginx.conf"
  # What nginx cannot write to its error log (it fails before opening it) goes to stderr.
  setsid "$nginx" -p "$run_dir/" -c "$run_dir/nginx.conf" -e "$run_dir/nginx-error.log" \
    2>"$run_dir/nginx.stderr" &
  nginx_pid=$!
  deadline=$((SECONDS + 30))
  up=0
  while kill -0 "$nginx_pid" 2>/dev/null && [ $SECONDS -lt $deadline ] && [ $stopping -eq 0 ]; do
    if [ "$(curl -sk -o /dev/null -w '%{http_code}' --max-time 5 "${token_header[@]}" \
      "$scheme://$host:$front_port/v1/health")" = 200 ]; then
      up=1
      break
    fi
    sleep 0.05
  done
  [ $up -eq 0 ] || break
  [ $stopping -eq 0 ] || abort "stopped while starting"
  if kill -0 "$nginx_pid" 2>/dev/null; then
    abort "nginx did not answer on $host:$front_port within 30 s"
  fi
  wait "$nginx_pid" 2>/dev/null || true
  nginx_pid=""
  if [ "$port" -ne 0 ] || ! grep -q 'Address already in use' "$run_dir/nginx.stderr"; then
    abort "nginx did not start: $(tail -n 5 "$run_dir/nginx.stderr")"
  fi
done
[ "$up" -eq 1 ] || abort "found no free port for nginx in 5 attempts"

# As the servers announce themselves: a TLS address with its scheme.
if [ -n "$tls_cert" ]; then
  echo "listening on https://$host:$front_port"
else
  echo "listening on $host:$front_port"
fi

# Nothing restarts a server that dies: that is reported, and nginx sends its sessions on.
while [ $stopping -eq 0 ]; do
  exited=""
  wait -n -p exited || true
  [ $stopping -eq 0 ] || break
  [ -n "$exited" ] || continue
  if [ "$exited" = "$nginx_pid" ]; then
    nginx_pid=""
    abort "nginx exited: $(tail -n 5 "$run_dir/nginx-error.log")"
  fi
  for ((i = 0; i < ${#pids[@]}; i++)); do
    if [ "${pids[i]}" = "$exited" ]; then
      echo "pool.sh: ${names[i]} (pid $exited) exited on its own; its sessions move to the others" >&2
      pids[i]=0 # Reaped: its pid may be another process's by the time the pool stops.
    fi
  done
done
stop_all
exit 0
