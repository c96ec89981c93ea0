#!/usr/bin/env bash
# Horizontal scaling of the gating endpoint: wrk on POST /v1/task-lists/validate
# (a generated 50-task list) against one plangate replica, then against two replicas
# of the same database (a fresh Postgres database, dropped at the end), one wrk per
# replica in parallel, summed, then one replica again. Prints req/s for 1 replica
# (mean of the runs before and after) and 2 replicas, and their ratio.
#
#   bash bench/replicas.sh            # DURATION=10 CONNECTIONS=32 by default
#
# The client side is the same in both runs: 2 wrk threads and CONNECTIONS
# connections in total (one wrk with 2 threads, or two wrks with 1 thread and half
# the connections each). Everything runs on this machine, so servers and clients
# share its cores: the ratio is bounded by the core count, not by plangate (replicas
# share nothing but Postgres, and validate does not touch the database).
# Needs Postgres as for the tests (PLANGATE_TEST_PG_URL) and wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-32}
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

if ! command -v wrk >/dev/null 2>&1; then
  echo "wrk is not installed: 'apt-get install -y wrk' (Debian/Ubuntu), 'brew install wrk' (macOS)," >&2
  echo "or build it from its source repository (make; no configure step)." >&2
  exit 2
fi
command -v psql >/dev/null || { echo "psql is needed to create the bench database" >&2; exit 2; }

# A no-op when target/release is up to date.
cargo build --release --quiet --locked --bin plangate --example gen_tasks
BIN=target/release/plangate
GEN=target/release/examples/gen_tasks

out=$(mktemp -d)
db="plangate_bench_$$"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  psql "$PG_ADMIN" -qc "drop database if exists $db with (force)" >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT

psql "$PG_ADMIN" -qc "create database $db"
DB_URL="${PG_ADMIN%/*}/$db"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
start_replica() { # port
  DATABASE_URL="$DB_URL" PLANGATE_BIND="127.0.0.1:$1" PLANGATE_LOG_FORMAT=json RUST_LOG=warn \
    "$BIN" serve > "$out/replica-$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 500); do
    curl -fs "http://127.0.0.1:$1/readyz" > /dev/null 2>&1 && return 0
    sleep 0.02
  done
  echo "replica on port $1 did not become ready:" >&2
  cat "$out/replica-$1.log" >&2
  exit 1
}
rps() { awk '/Requests\/sec/ {print $2}' "$1"; }

"$GEN" 50 7 > "$out/body50.json"
cat > "$out/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$out/body50.json", "r"); wrk.body = f:read("*a"); f:close()
LUA

port1=$(free_port)
start_replica "$port1"
url1="http://127.0.0.1:$port1/v1/task-lists/validate"
curl -fs "$url1" -H 'content-type: application/json' --data-binary @"$out/body50.json" |
  python3 -c "import json,sys; r=json.load(sys.stdin); assert r['valid'], r; print('50-task body is valid')"

echo "== warm-up (2 s)"
wrk -t2 -c"$CONNECTIONS" -d2s -s "$out/post.lua" "$url1" > /dev/null

echo "== 1 replica: wrk -t2 -c$CONNECTIONS -d${DURATION}s"
wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" -s "$out/post.lua" "$url1" > "$out/one.txt"
one=$(rps "$out/one.txt")
echo "replica 1: $one req/s"

port2=$(free_port)
start_replica "$port2"
url2="http://127.0.0.1:$port2/v1/task-lists/validate"
wrk -t1 -c"$CONNECTIONS" -d2s -s "$out/post.lua" "$url2" > /dev/null

half=$((CONNECTIONS / 2))
echo "== 2 replicas, same database: two wrk -t1 -c$half -d${DURATION}s in parallel"
wrk -t1 -c"$half" -d"${DURATION}s" -s "$out/post.lua" "$url1" > "$out/two-a.txt" &
wa=$!
wrk -t1 -c"$half" -d"${DURATION}s" -s "$out/post.lua" "$url2" > "$out/two-b.txt" &
wb=$!
wait "$wa" "$wb"
a=$(rps "$out/two-a.txt")
b=$(rps "$out/two-b.txt")
# The single-replica run again (replica 2 idles), so that a change in the machine's
# other load between the runs shows, and the ratio uses the mean of both.
echo "== 1 replica again: wrk -t2 -c$CONNECTIONS -d${DURATION}s"
wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" -s "$out/post.lua" "$url1" > "$out/one-again.txt"
again=$(rps "$out/one-again.txt")
echo "replica 1: $again req/s"
for f in "$out/two-a.txt" "$out/two-b.txt" "$out/one.txt" "$out/one-again.txt"; do
  if grep -q "Non-2xx" "$f"; then echo "non-2xx answers in $f:" >&2; cat "$f" >&2; exit 1; fi
done

cores=$(nproc)
load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
python3 - "$one" "$again" "$a" "$b" "$cores" "$load" <<'PY'
import sys
first, again, a, b = map(float, sys.argv[1:5])
cores, load = int(sys.argv[5]), sys.argv[6]
one = (first + again) / 2
two = a + b
print(f"1 replica:  {one:.0f} req/s (mean of {first:.0f} before and {again:.0f} after)")
print(f"2 replicas: {two:.0f} req/s ({a:.0f} + {b:.0f})")
print(f"ratio 2/1:  {two / one:.2f}")
print(f"machine: {cores} cores, shared by both replicas, the wrk clients and anything else "
      f"running. One replica's runtime already uses every core, so on an idle machine a "
      f"second replica adds no CPU and ~1.0 is the ceiling; a higher ratio means other "
      f"processes were competing and two replicas (more runnable threads) won a larger "
      f"share of the cores. Replicas share nothing but Postgres (validate does not use "
      f"it), so on separate machines the throughput adds up.")
print(f"load average (1 min) at the end: {load} (other processes on the machine skew both runs)")
PY
