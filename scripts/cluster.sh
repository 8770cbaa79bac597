#!/usr/bin/env bash
# Runs a three-node Ordo cluster on 127.0.0.1 in the background.
#
#   scripts/cluster.sh up       build bin/ordo, start three nodes, wait until IDs are served
#   scripts/cluster.sh up --tls the same with mutual TLS (certificates from scripts/gen-certs.sh)
#   scripts/cluster.sh down     stop the nodes (data is kept; `up` again restarts them)
#   scripts/cluster.sh status   show the cluster
#   scripts/cluster.sh clean    stop the nodes and delete their data
#
# Nodes n1..n3 listen for gRPC on 127.0.0.1:7001-7003, for raft on
# 127.0.0.1:7101-7103 and for HTTP (health, IDs, status, metrics) on
# 127.0.0.1:8001-8003. Data and logs go to $ORDO_CLUSTER_DIR (default
# .cluster/ in the repository).
#
# With --tls, scripts/gen-certs.sh makes the certificates in certs/ there
# if they are missing, and every node serves node.pem with
# --admin-subject CN=ordo-admin and admin.token. The cluster then stays TLS
# (`up` and `status` use it) until `clean`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${ORDO_CLUSTER_DIR:-$root/.cluster}
bin=$root/bin/ordo
addrs=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
peers=n1=127.0.0.1:7101@127.0.0.1:7001,n2=127.0.0.1:7102@127.0.0.1:7002,n3=127.0.0.1:7103@127.0.0.1:7003
certs=$dir/certs
# The TLS settings of this script's nodes and calls are its own (the flags
# below), not those exported for clients, as `up --tls` suggests.
unset ORDO_TLS_CERT ORDO_TLS_KEY ORDO_TLS_CA ORDO_ADMIN_SUBJECT ORDO_ADMIN_TOKEN_FILE

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

up() {
  local want_tls=0
  case "${1:-}" in
    --tls) want_tls=1 ;;
    "") ;;
    *) usage ;;
  esac
  (cd "$root" && go build -o "$bin" ./cmd/ordo)
  mkdir -p "$dir"
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
  for i in 1 2 3; do
    n=n$i
    if running $n; then echo "$n already running (pid $(cat "$dir/$n.pid"))"; continue; fi
    nohup "$bin" serve --id $n --data-dir "$dir/$n" \
      --raft-addr 127.0.0.1:710$i --grpc-addr 127.0.0.1:700$i --http-addr 127.0.0.1:800$i \
      --bootstrap "$peers" ${serve_tls[@]+"${serve_tls[@]}"} >"$dir/$n.log" 2>&1 &
    echo $! >"$dir/$n.pid"
  done
  for _ in $(seq 1 60); do
    if "$bin" next --addrs "$addrs" --timeout 1s ${client_tls[@]+"${client_tls[@]}"} >/dev/null 2>&1; then
      if is_tls; then
        echo "Ordo is up with mutual TLS: three nodes, gRPC on $addrs; data, logs and certificates in $dir"
        echo
        echo "  export ORDO_TLS_CA=$certs/ca.pem ORDO_TLS_CERT=$certs/client.pem ORDO_TLS_KEY=$certs/client-key.pem"
      else
        echo "Ordo is up: three nodes, gRPC on $addrs; data and logs in $dir"
        echo
      fi
      echo "  $bin next --count 5          # five IDs"
      echo "  $bin status                  # every node's role, term and high-water mark"
      echo "  $bin decode \$($bin next)     # time, group and sequence of an ID"
      if is_tls; then
        echo "  ORDO_TLS_CERT=$certs/admin.pem ORDO_TLS_KEY=$certs/admin-key.pem \\"
        echo "    $bin transfer-leader      # admin calls (join, remove, transfer-leader): admin certificate or admin.token"
      fi
      echo "  scripts/cluster.sh down      # stop (data kept); 'clean' also deletes it"
      return 0
    fi
    sleep 0.5
  done
  echo "cluster did not serve IDs within 30 s; see $dir/n*.log" >&2
  return 1
}

down() {
  for i in 1 2 3; do
    n=n$i
    if running $n; then
      kill "$(cat "$dir/$n.pid")" 2>/dev/null || true
    fi
  done
  for i in 1 2 3; do
    n=n$i
    for _ in $(seq 1 50); do running $n || break; sleep 0.1; done
    if running $n; then kill -9 "$(cat "$dir/$n.pid")" 2>/dev/null || true; fi
    rm -f "$dir/$n.pid"
  done
  echo "stopped"
}

status() {
  if is_tls; then use_tls; fi
  "$bin" status --addrs "$addrs" ${client_tls[@]+"${client_tls[@]}"}
}

usage() { echo "usage: $0 up [--tls]|down|status|clean" >&2; exit 2; }

case "${1:-}" in
  up) shift; [ $# -le 1 ] || usage; up "$@" ;;
  down) down ;;
  status) status ;;
  clean) down; rm -rf "$dir"; echo "deleted $dir" ;;
  *) usage ;;
esac
