#!/usr/bin/env bash
# Runs a three-node Ordo cluster on 127.0.0.1 in the background.
#
#   scripts/cluster.sh up       build bin/ordo, start three nodes, wait until IDs are served
#   scripts/cluster.sh down     stop the nodes (data is kept; `up` again restarts them)
#   scripts/cluster.sh status   show the cluster
#   scripts/cluster.sh clean    stop the nodes and delete their data
#
# Nodes n1..n3 listen for gRPC on 127.0.0.1:7001-7003 and for raft on
# 127.0.0.1:7101-7103. Data and logs go to $ORDO_CLUSTER_DIR (default
# .cluster/ in the repository).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${ORDO_CLUSTER_DIR:-$root/.cluster}
bin=$root/bin/ordo
addrs=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
peers=n1=127.0.0.1:7101@127.0.0.1:7001,n2=127.0.0.1:7102@127.0.0.1:7002,n3=127.0.0.1:7103@127.0.0.1:7003

running() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }

up() {
  (cd "$root" && go build -o "$bin" ./cmd/ordo)
  mkdir -p "$dir"
  for i in 1 2 3; do
    n=n$i
    if running $n; then echo "$n already running (pid $(cat "$dir/$n.pid"))"; continue; fi
    nohup "$bin" serve --id $n --data-dir "$dir/$n" \
      --raft-addr 127.0.0.1:710$i --grpc-addr 127.0.0.1:700$i \
      --bootstrap "$peers" >"$dir/$n.log" 2>&1 &
    echo $! >"$dir/$n.pid"
  done
  for _ in $(seq 1 60); do
    if "$bin" next --addrs "$addrs" --timeout 1s >/dev/null 2>&1; then
      echo "Ordo is up: three nodes, gRPC on $addrs; data and logs in $dir"
      echo
      echo "  $bin next --count 5          # five IDs"
      echo "  $bin status                  # every node's role, term and high-water mark"
      echo "  $bin decode \$($bin next)     # time, group and sequence of an ID"
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

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) "$bin" status --addrs "$addrs" ;;
  clean) down; rm -rf "$dir"; echo "deleted $dir" ;;
  *) echo "usage: $0 up|down|status|clean" >&2; exit 2 ;;
esac
