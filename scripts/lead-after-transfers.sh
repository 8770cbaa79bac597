#!/usr/bin/env bash
# How far ahead of the wall clock the time field runs after many leader
# changes in quick succession:
#
#   scripts/lead-after-transfers.sh [BIN] [TRANSFERS] [PAUSE]
#
# starts three nodes of BIN (default bin/ordo) on 127.0.0.1:7001-7003 (the
# ports of scripts/cluster.sh: stop that cluster first), keeps one client
# asking for IDs, runs `ordo transfer-leader` TRANSFERS times (default 30)
# with PAUSE seconds between (default 0.5), then prints how far the time
# field of a fresh ID is ahead of this host's clock. Data goes to a
# temporary directory, removed at the end.
#
# The nodes and calls are the script's own: no ORDO_ variable of the
# caller's environment reaches them (ordo serve would read every one, the
# default layout is what ordo decode assumes, and transfer-leader without
# --id must mean any voter).
set -euo pipefail
while read -r v; do unset "$v"; done < <(compgen -e | grep '^ORDO_' || true)
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/bin/ordo}
transfers=${2:-30}
pause=${3:-0.5}
dir=$(mktemp -d)
addrs=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
peers=n1=127.0.0.1:7101@127.0.0.1:7001,n2=127.0.0.1:7102@127.0.0.1:7002,n3=127.0.0.1:7103@127.0.0.1:7003
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for i in 1 2 3; do
  "$bin" serve --id n$i --data-dir "$dir/n$i" --raft-addr 127.0.0.1:710$i --grpc-addr 127.0.0.1:700$i \
    --bootstrap "$peers" >"$dir/n$i.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 1 100); do "$bin" next --addrs $addrs --timeout 1s >/dev/null 2>&1 && break; sleep 0.1; done
(while :; do "$bin" next --addrs $addrs >/dev/null 2>&1 || true; done) &
pids+=($!)
done_transfers=0
for _ in $(seq 1 "$transfers"); do
  "$bin" transfer-leader --addrs $addrs >/dev/null 2>&1 && done_transfers=$((done_transfers + 1))
  sleep "$pause"
done
id=$("$bin" next --addrs $addrs)
now_ms=$(date +%s%3N)
id_ms=$("$bin" decode --json "$id" | python3 -c 'import json, sys, datetime
t = json.load(sys.stdin)[0]["time"].replace("Z", "+00:00")
print(int(datetime.datetime.fromisoformat(t).timestamp() * 1000))')
echo "transfers=$done_transfers lead_ms=$((id_ms - now_ms))"
