#!/usr/bin/env bash
# Runs a three-node Ordo cluster on 127.0.0.1 in the background.
#
#   scripts/cluster.sh up [--tls] [--layout L]
#                               build bin/ordo, start three nodes, wait until all three serve
#   scripts/cluster.sh down     stop the nodes (data is kept; `up` again restarts them)
#   scripts/cluster.sh status   show the cluster
#   scripts/cluster.sh clean    stop the nodes and delete their data
#
# Nodes n1..n3 listen for gRPC on 127.0.0.1:7001-7003, for raft on
# 127.0.0.1:7101-7103 and for HTTP (health, IDs, status, metrics) on
# 127.0.0.1:8001-8003 ($ORDO_CLUSTER_GRPC_PORTS, $ORDO_CLUSTER_RAFT_PORTS and
# $ORDO_CLUSTER_HTTP_PORTS, three comma-separated ports each, move them).
# Data and logs go to $ORDO_CLUSTER_DIR (default .cluster/ in the
# repository). $ORDO_CLUSTER_BIN runs that ordo binary instead of building
# bin/ordo.
#
# --layout L (default: the default layout) creates the cluster with ID
# layout L (ordo serve --layout). The first `up` records it in the data
# dir, and later `up`s start the nodes with it; another --layout is refused
# until `clean`.
#
# With --tls, scripts/gen-certs.sh makes the certificates in certs/ there
# if they are missing, and every node serves node.pem with
# --admin-subject CN=ordo-admin and admin.token. The cluster then stays TLS
# (`up` and `status` use it) until `clean`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${ORDO_CLUSTER_DIR:-$root/.cluster}
bin=${ORDO_CLUSTER_BIN:-$root/bin/ordo}
certs=$dir/certs
# The TLS settings of this script's nodes and calls are its own (the flags
# below), not those exported for clients, as `up --tls` suggests.
unset ORDO_TLS_CERT ORDO_TLS_KEY ORDO_TLS_CA ORDO_ADMIN_SUBJECT ORDO_ADMIN_TOKEN_FILE

# ports VAR DEFAULT: the three ports VAR names (DEFAULT without it), one a
# line; anything but three port numbers is refused.
ports() {
  local v=${!1:-$2} p n=0
  local -a list
  IFS=, read -r -a list <<<"$v"
  for p in "${list[@]}"; do
    if ! [[ $p =~ ^[0-9]+$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then n=-1; break; fi
    n=$((n + 1))
  done
  if [ $n != 3 ]; then
    echo "\$$1=$v: want three comma-separated ports (1-65535), one for each of n1, n2, n3" >&2
    exit 2
  fi
  printf '%s\n' "${list[@]}"
}
mapfile -t grpc_ports < <(ports ORDO_CLUSTER_GRPC_PORTS 7001,7002,7003)
mapfile -t raft_ports < <(ports ORDO_CLUSTER_RAFT_PORTS 7101,7102,7103)
mapfile -t http_ports < <(ports ORDO_CLUSTER_HTTP_PORTS 8001,8002,8003)
[ ${#grpc_ports[@]} = 3 ] && [ ${#raft_ports[@]} = 3 ] && [ ${#http_ports[@]} = 3 ] || exit 2
addrs=127.0.0.1:${grpc_ports[0]},127.0.0.1:${grpc_ports[1]},127.0.0.1:${grpc_ports[2]}
peers=
for i in 1 2 3; do
  peers=${peers:+$peers,}n$i=127.0.0.1:${raft_ports[i-1]}@127.0.0.1:${grpc_ports[i-1]}
done

running() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }

# is_tls: whether the cluster is TLS (marked by `up --tls`). The flags of the
# nodes and of this script's own calls are then set; status and readiness
# need only the client certificate.
is_tls() { [ -f "$dir/tls" ]; }
serve_tls=()
client_tls=()
use_tls() {
  serve_tls=(--tls-cert "$certs/node.pem" --tls-key "$certs/node-key.pem" --tls-ca "$certs/ca.pem"
    --admin-subject CN=ordo-admin --admin-token-file "$certs/admin.token")
  client_tls=(--tls-ca "$certs/ca.pem" --tls-cert "$certs/client.pem" --tls-key "$certs/client-key.pem")
}

# certificates: makes the certificates if there are none, and checks that
# every file the nodes and clients need is there.
certificates() {
  if [ ! -e "$certs/ca.pem" ]; then "$root/scripts/gen-certs.sh" "$certs"; fi
  for f in ca.pem node.pem node-key.pem client.pem client-key.pem admin.pem admin-key.pem admin.token; do
    if [ ! -f "$certs/$f" ]; then
      echo "$certs/$f is missing: delete $certs, or run scripts/gen-certs.sh --force $certs" >&2
      return 1
    fi
  done
}

# node_error N: why node N exited: the error ordo printed last, else the
# end of its log.
node_error() {
  local why
  why=$(grep '^ordo ' "$dir/$1.log" 2>/dev/null | tail -n 3) || why=$(tail -n 5 "$dir/$1.log" 2>/dev/null) || true
  sed 's/^/  /' <<<"$why" >&2
}

# serving: whether the cluster's status lists three nodes, each a leader
# or a follower; it leaves the layout the cluster reports in
# cluster_layout.
cluster_layout=
serving() {
  local st
  st=$("$bin" status --json --addrs "$addrs" --timeout 2s ${client_tls[@]+"${client_tls[@]}"} 2>/dev/null) || return 1
  cluster_layout=$(sed -n 's/^  "layout": "\(.*\)",\{0,1\}$/\1/p' <<<"$st")
  [ "$(grep -c '"role": "\(leader\|follower\)"' <<<"$st")" = 3 ] && [ "$(grep -c '"role":' <<<"$st")" = 3 ]
}

up() {
  local want_tls=0 want_layout=${ORDO_LAYOUT:-} recorded= layout fresh=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --tls) want_tls=1 ;;
      --layout) [ $# -ge 2 ] && [ -n "$2" ] || usage; want_layout=$2; shift ;;
      --layout=?*) want_layout=${1#--layout=} ;;
      *) usage ;;
    esac
    shift
  done
  if [ -z "${ORDO_CLUSTER_BIN:-}" ]; then
    (cd "$root" && go build -o "$bin" ./cmd/ordo)
  fi
  mkdir -p "$dir"
  if [ -f "$dir/layout" ]; then recorded=$(cat "$dir/layout"); fi
  if [ -n "$recorded" ] && [ -n "$want_layout" ] && [ "$want_layout" != "$recorded" ]; then
    echo "the cluster in $dir has layout $recorded, not $want_layout: 'scripts/cluster.sh clean' deletes it, then 'up --layout $want_layout' creates a new one" >&2
    return 1
  fi
  layout=${want_layout:-${recorded:-default}}
  if [ $want_tls = 1 ] && ! is_tls; then
    for i in 1 2 3; do
      if running n$i; then
        echo "n$i is running without TLS; 'scripts/cluster.sh down' first" >&2
        return 1
      fi
    done
  fi
  if [ $want_tls = 1 ] || is_tls; then
    case "$("$bin" serve -h 2>&1)" in
      *-tls-cert*) ;;
      *) echo "$bin has no --tls-cert: this build cannot serve TLS" >&2; return 1 ;;
    esac
    certificates
    touch "$dir/tls"
    use_tls
  fi
  # A cluster created now is created with this layout: record it, so that
  # later `up`s start the nodes with it.
  if [ -z "$recorded" ] && ! [ -e "$dir/n1" ] && ! [ -e "$dir/n2" ] && ! [ -e "$dir/n3" ]; then
    echo "$layout" >"$dir/layout"
    fresh=1
  fi
  local started=()
  for i in 1 2 3; do
    n=n$i
    if running $n; then echo "$n already running (pid $(cat "$dir/$n.pid"))"; continue; fi
    started+=($n)
    nohup "$bin" serve --id $n --data-dir "$dir/$n" --layout "$layout" \
      --raft-addr 127.0.0.1:${raft_ports[i-1]} --grpc-addr 127.0.0.1:${grpc_ports[i-1]} --http-addr 127.0.0.1:${http_ports[i-1]} \
      --bootstrap "$peers" ${serve_tls[@]+"${serve_tls[@]}"} >"$dir/$n.log" 2>&1 &
    echo $! >"$dir/$n.pid"
  done
  for _ in $(seq 1 60); do
    for i in 1 2 3; do
      if ! running n$i; then
        echo "n$i exited while the cluster started (its log: $dir/n$i.log):" >&2
        node_error n$i
        if [ -z "$recorded" ] && [ $fresh = 0 ] && grep -q layout "$dir/n$i.log"; then
          echo "this cluster's layout is not recorded (made before 'up --layout'): give the one it was created with, 'scripts/cluster.sh up --layout L'" >&2
        fi
        failed_up
        return 1
      fi
    done
    if "$bin" next --addrs "$addrs" --timeout 1s ${client_tls[@]+"${client_tls[@]}"} >/dev/null 2>&1 && serving; then
      layout=${cluster_layout:-$layout}
      [ -f "$dir/layout" ] || echo "$layout" >"$dir/layout"
      if is_tls; then
        echo "Ordo is up with mutual TLS: three nodes, layout $layout, gRPC on $addrs; data, logs and certificates in $dir"
        echo
        echo "  export ORDO_TLS_CA=$certs/ca.pem ORDO_TLS_CERT=$certs/client.pem ORDO_TLS_KEY=$certs/client-key.pem"
      else
        echo "Ordo is up: three nodes, layout $layout, gRPC on $addrs; data and logs in $dir"
        echo
      fi
      local decode=""
      if [ "$addrs" != 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 ]; then
        echo "  export ORDO_ADDRS=$addrs"
      fi
      if [ "$layout" != default ]; then decode=" --layout '$layout'"; fi
      echo "  $bin next --count 5          # five IDs"
      echo "  $bin status                  # every node's role, term and high-water mark"
      echo "  $bin decode$decode \$($bin next)     # time, group and sequence of an ID"
      if is_tls; then
        echo "  ORDO_TLS_CERT=$certs/admin.pem ORDO_TLS_KEY=$certs/admin-key.pem \\"
        echo "    $bin transfer-leader      # admin calls (join, remove, transfer-leader): admin certificate or admin.token"
      fi
      echo "  scripts/cluster.sh down      # stop (data kept); 'clean' also deletes it"
      return 0
    fi
    sleep 0.5
  done
  echo "the three nodes did not all serve within 30 s; see $dir/n*.log. Their status:" >&2
  "$bin" status --addrs "$addrs" --timeout 2s ${client_tls[@]+"${client_tls[@]}"} >&2 || true
  failed_up
  return 1
}

# failed_up: after an `up` that failed, stops the nodes it started (their
# logs stay), and forgets the layout it recorded if no node holds data.
failed_up() {
  if [ ${#started[@]} -gt 0 ]; then
    echo "stopping what this 'up' started: ${started[*]}" >&2
    stop "${started[@]}"
  fi
  if [ $fresh = 1 ] && ! [ -e "$dir/n1" ] && ! [ -e "$dir/n2" ] && ! [ -e "$dir/n3" ]; then rm -f "$dir/layout"; fi
}

# stop N...: stops nodes N (SIGTERM, then SIGKILL after 5 s).
stop() {
  local n
  for n in "$@"; do
    if running $n; then kill "$(cat "$dir/$n.pid")" 2>/dev/null || true; fi
  done
  for n in "$@"; do
    for _ in $(seq 1 50); do running $n || break; sleep 0.1; done
    if running $n; then kill -9 "$(cat "$dir/$n.pid")" 2>/dev/null || true; fi
    rm -f "$dir/$n.pid"
  done
}

down() {
  stop n1 n2 n3
  echo "stopped"
}

status() {
  if is_tls; then use_tls; fi
  "$bin" status --addrs "$addrs" ${client_tls[@]+"${client_tls[@]}"}
}

usage() { echo "usage: $0 up [--tls] [--layout L]|down|status|clean" >&2; exit 2; }

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  clean) down; rm -rf "$dir"; echo "deleted $dir" ;;
  *) usage ;;
esac
