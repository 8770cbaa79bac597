#!/usr/bin/env bash
# Benchmarks Ordo against etcd, side by side, on this machine.
#
#   scripts/bench-vs-etcd.sh
#
# Starts a three-member etcd and a three-node Ordo, both on 127.0.0.1 and
# both fsyncing every commit (etcd by default; Ordo's raft log through
# raft-boltdb), runs the same workloads against each with `ordo bench`, one
# after the other, and prints a markdown table. For etcd every number is
# one Put and its revision is the sequence number; the revisions go through
# the same order check as Ordo's IDs. Right after each Ordo run it measures
# that run's floor on an Ordo node (`--target floor` for unary calls,
# `--target stream-floor` for the default client's stream), and prints
# Ordo / floor: how far Ordo is from what the machine allows. Exits
# non-zero if any run's numbers break the order.
#
# Environment:
#   DURATION           length of each run (default 10s)
#   ETCD_CLIENT_PORTS  etcd client ports, three, space-separated (default "12379 12479 12579")
#   ETCD_PEER_PORTS    etcd peer ports, three, space-separated (default "12380 12480 12580")
#   BENCH_DIR          parent of the temporary data directory (default $TMPDIR or /tmp);
#                      it must be on a real disk, or fsync costs nothing
#
# The etcd ports default away from 2379/2380 because installing Debian's
# etcd-server starts a system etcd there on machines with systemd. Ordo
# uses 127.0.0.1:7001-7003 (gRPC), 7101-7103 (raft) and 8001-8003 (HTTP), see cluster.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin/ordo
duration=${DURATION:-10s}
read -r -a cports <<<"${ETCD_CLIENT_PORTS:-12379 12479 12579}"
read -r -a pports <<<"${ETCD_PEER_PORTS:-12380 12480 12580}"
ordo_addrs=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003

die() { echo "bench-vs-etcd: $*" >&2; exit 1; }

if [ "${#cports[@]}" -ne 3 ] || [ "${#pports[@]}" -ne 3 ]; then
  die "ETCD_CLIENT_PORTS and ETCD_PEER_PORTS must list three ports each"
fi

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else echo "bench-vs-etcd: need root to run: $*" >&2; return 1
  fi
}

apt_install() {
  echo "installing $1 with apt..." >&2
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$1" >/dev/null; then
    as_root apt-get update >/dev/null
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$1" >/dev/null
  fi
}

command -v etcd >/dev/null || apt_install etcd-server || die "could not install etcd-server"
command -v etcd >/dev/null || die "etcd is still not on PATH after installing etcd-server"
# jq reads the results; python3 does if jq cannot be had.
command -v jq >/dev/null || apt_install jq || true
if command -v jq >/dev/null; then
  jget() { jq -r "$2" "$1"; }
else
  command -v python3 >/dev/null || die "need jq or python3 to read the results"
  # $2 is a jq path of the form .a.b; python3 follows it the same way.
  jget() { python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].strip(".").split("."):
    v = v[k]
print(str(v).lower() if isinstance(v, bool) else v)' "$1" "$2"; }
fi

# A port something already listens on would make a run measure the wrong
# server (for Ordo: whatever cluster is up on 7001), so refuse up front.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "${cports[@]}" "${pports[@]}"; do
  if port_busy "$p"; then
    die "127.0.0.1:$p is already in use (stop what runs there, or set ETCD_CLIENT_PORTS / ETCD_PEER_PORTS)"
  fi
done
for p in 7001 7002 7003 7101 7102 7103 8001 8002 8003; do
  if port_busy "$p"; then
    die "127.0.0.1:$p (Ordo's, fixed in scripts/cluster.sh) is already in use: another Ordo cluster is up; stop it first (scripts/cluster.sh down)"
  fi
done

work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/ordo-vs-etcd.XXXXXX")
etcd_pids=()
cleanup() {
  local rc=$?
  set +e
  for pid in "${etcd_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${etcd_pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [ -d "$work/ordo" ]; then
    ORDO_CLUSTER_DIR=$work/ordo "$root/scripts/cluster.sh" clean >/dev/null 2>&1
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fstype=$(df -PT "$work" | awk 'NR == 2 { print $2 }')
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "# Ordo vs etcd"
echo
echo "- machine: $(nproc) CPUs, ${cpu:-unknown CPU}, Linux $(uname -r)"
echo "- data: $work ($fstype); both fsync every commit"
echo "- etcd $(etcd --version | awk '/^etcd Version/ { print $3 }'), three members; Ordo, three nodes; all on 127.0.0.1"
echo "- each run: $duration"
if [ "$fstype" = tmpfs ] || [ "$fstype" = ramfs ]; then
  echo "- WARNING: $work is in memory, so fsync is free; set BENCH_DIR to a directory on disk for a fair number"
fi
echo

(cd "$root" && go build -o "$bin" ./cmd/ordo)

# etcd: three members, fsync on (the default; --unsafe-no-fsync is not given).
cluster=""
for i in 0 1 2; do
  cluster+="${cluster:+,}e$i=http://127.0.0.1:${pports[$i]}"
done
etcd_addrs=""
for i in 0 1 2; do
  c=http://127.0.0.1:${cports[$i]}
  etcd_addrs+="${etcd_addrs:+,}127.0.0.1:${cports[$i]}"
  etcd --name "e$i" --data-dir "$work/etcd/e$i" \
    --listen-client-urls "$c" --advertise-client-urls "$c" \
    --listen-peer-urls "http://127.0.0.1:${pports[$i]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${pports[$i]}" \
    --initial-cluster "$cluster" --initial-cluster-token "ordo-vs-etcd-$$" \
    --initial-cluster-state new --logger zap --log-outputs stderr \
    >"$work/etcd-e$i.log" 2>&1 &
  etcd_pids+=($!)
done

# Ordo: a fresh three-node cluster in the same temporary directory, so
# both systems write to the same disk.
if ! ORDO_CLUSTER_DIR=$work/ordo "$root/scripts/cluster.sh" up >"$work/cluster-up.log" 2>&1; then
  cat "$work/cluster-up.log" >&2
  tail -n 20 "$work"/ordo/n*.log >&2 || true
  die "the Ordo cluster did not start"
fi

etcd_healthy() {
  local p
  for p in "${cports[@]}"; do
    curl -fsS --max-time 1 "http://127.0.0.1:$p/health" 2>/dev/null | grep -q '"health":"true"' || return 1
  done
}
for _ in $(seq 1 60); do
  etcd_healthy && break
  for pid in "${etcd_pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$work"/etcd-e*.log >&2
      die "an etcd member exited during startup (logs above)"
    fi
  done
  sleep 0.5
done
if ! etcd_healthy; then
  tail -n 20 "$work"/etcd-e*.log >&2
  die "etcd did not become healthy within 30 s (logs above)"
fi

broken=0
# run NAME TARGET ADDRS FLAGS...: one `ordo bench --json`, result in
# $work/NAME.json, progress in $work/NAME.log.
run() {
  local name=$1 target=$2 addrs=$3
  shift 3
  local out=$work/$name.json rc=0
  "$bin" bench --json --target "$target" --addrs "$addrs" --duration "$duration" "$@" \
    >"$out" 2>"$work/$name.log" || rc=$?
  if [ "$rc" -ne 0 ] && ! [ -s "$out" ]; then
    cat "$work/$name.log" >&2
    die "$name: ordo bench failed (exit $rc)"
  fi
  local ok
  ok=$(jget "$out" .ok)
  printf '%-28s %10.0f calls/s %12.0f numbers/s  p50 %s  errors %s  order %s\n' "$name" \
    "$(jget "$out" .requests_per_sec)" "$(jget "$out" .ids_per_sec)" "$(ms "$(jget "$out" .p50)")" "$(jget "$out" .errors)" \
    "$([ "$ok" = true ] && echo OK || echo BROKEN)" >&2
  if [ "$ok" != true ]; then
    broken=1
    echo "$name: the numbers received break the order:" >&2
    jget "$out" .check >&2
  fi
}
# ms NANOSECONDS prints milliseconds.
ms() { awk -v ns="$1" 'BEGIN { printf "%.2f ms", ns / 1e6 }'; }
rate() { printf '%.0f' "$(jget "$work/$1.json" .ids_per_sec)"; }
calls() { printf '%.0f' "$(jget "$work/$1.json" .requests_per_sec)"; }
p50() { ms "$(jget "$work/$1.json" .p50)"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "n/a" }'; }

# Unary, one number per call, on both systems; then, at the same
# concurrency, Ordo's default client (every call on one shared stream), and
# right after each Ordo run its floor: what the machine allows for such
# calls with nothing behind them, independent of either system. The floor
# of a unary call is a bare gRPC health check to an Ordo node; that of the
# default client is the stream floor, one stream to an Ordo node that
# echoes every call at once, the calls sent as the default client sends
# them. An Ordo call costs one such round trip plus a round to the
# followers.
workloads=(1 64 256)
for c in "${workloads[@]}"; do
  run "etcd-$c" etcd "$etcd_addrs" --concurrency "$c"
  run "ordo-$c" ordo "$ordo_addrs" --concurrency "$c" --unary
  run "floor-$c" floor 127.0.0.1:7001 --concurrency "$c"
  run "ordo-stream-$c" ordo "$ordo_addrs" --concurrency "$c"
  run "stream-floor-$c" stream-floor 127.0.0.1:7001 --concurrency "$c"
done
# Ordo's other modes; etcd has no equivalent, so they are compared with
# etcd's best unary number.
run ordo-coalesce ordo "$ordo_addrs" --concurrency 256 --coalesce 1
run ordo-batch ordo "$ordo_addrs" --concurrency 16 --count 1000

best=""
for c in "${workloads[@]}"; do
  if [ -z "$best" ] || awk -v a="$(rate "etcd-$c")" -v b="$(rate "etcd-$best")" 'BEGIN { exit !(a > b) }'; then
    best=$c
  fi
done

echo
echo "| workload | etcd Puts/s | etcd p50 | Ordo IDs/s | Ordo p50 | ratio (Ordo / etcd) |"
echo "|---|--:|--:|--:|--:|--:|"
for c in "${workloads[@]}"; do
  label="$c caller$([ "$c" -eq 1 ] || echo s), 1 ID per call, unary"
  echo "| $label | $(rate "etcd-$c") | $(p50 "etcd-$c") | $(rate "ordo-$c") | $(p50 "ordo-$c") | $(ratio "$(rate "ordo-$c")" "$(rate "etcd-$c")") |"
done
etcd_best="best: $(rate "etcd-$best") ($best callers)"
for row in "ordo-coalesce|Ordo coalesced: 256 callers, --coalesce 1" \
  "ordo-stream-64|Ordo streamed: 64 callers, the default client" \
  "ordo-batch|Ordo batched: 16 callers × 1000 IDs per call"; do
  name=${row%%|*}
  echo "| ${row#*|} (vs etcd's best) | $etcd_best | $(p50 "etcd-$best") | $(rate "$name") | $(p50 "$name") | $(ratio "$(rate "$name")" "$(rate "etcd-$best")") |"
done
echo
echo "The gRPC floors on this machine, each run right after the Ordo run beside it: for unary calls a bare"
echo "health check to one Ordo node, for the default client's stream one stream to an Ordo node that echoes"
echo "every call at once; nothing behind either:"
echo
echo "| callers | calls | floor calls/s | floor p50 | Ordo IDs/s | Ordo p50 | Ordo / floor |"
echo "|--:|---|--:|--:|--:|--:|--:|"
for c in "${workloads[@]}"; do
  echo "| $c | unary | $(calls "floor-$c") | $(p50 "floor-$c") | $(rate "ordo-$c") | $(p50 "ordo-$c") | $(ratio "$(rate "ordo-$c")" "$(calls "floor-$c")") |"
  echo "| $c | default client (stream) | $(calls "stream-floor-$c") | $(p50 "stream-floor-$c") | $(rate "ordo-stream-$c") | $(p50 "ordo-stream-$c") | $(ratio "$(rate "ordo-stream-$c")" "$(calls "stream-floor-$c")") |"
done
echo
echo "Every run's numbers passed the order check unless reported above. Ratio > 1: Ordo hands out more numbers per second."

errors=0
for f in "$work"/*.json; do
  errors=$((errors + $(jget "$f" .errors)))
done
if [ "$errors" -gt 0 ]; then
  echo "Note: $errors requests failed during the runs; see the per-run lines above."
fi
if [ "$broken" -ne 0 ]; then
  die "some run's numbers broke the order (see above)"
fi
