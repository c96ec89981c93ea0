#!/usr/bin/env bash
# Refine-job figures (issue #4): L0 fan-out latency, sustained builtin jobs/s with
# p50/p99 submit-to-succeeded latency on SQLite and Postgres, idle RSS and RSS after
# 10,000 jobs. Prints one line per figure.
#   bash bench/refine_jobs.sh            (needs Postgres as for the tests)
#   JOBS=2000 bash bench/refine_jobs.sh  (throughput run size; default 2000)
#   PLANGATE_WORKERS=8 bash bench/refine_jobs.sh   (the servers inherit the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN=$PWD/target/release/plangate
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
JOBS=${JOBS:-2000}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

cat >"$tmp/plangate.toml" <<TOML
[executors.sleep1]
kind = "command"
argv = ["$PWD/tests/fixtures/l0/l0.sh", "sleep", "1"]
timeout_secs = 30
TOML

start() { # url -> sets PORT, PID
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  DATABASE_URL="$1" PLANGATE_BIND="127.0.0.1:$PORT" PLANGATE_LOG_FORMAT=json \
    PLANGATE_CONFIG="$tmp/plangate.toml" RUST_LOG=warn "$BIN" >"$tmp/server-$PORT.log" 2>&1 &
  PID=$!
  pids+=("$PID")
  until curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do sleep 0.01; done
}
rss() { awk '/VmRSS/ {print $2, $3}' "/proc/$1/status"; }

run_backend() { # name url
  local name=$1 url=$2
  start "$url"
  local base="http://127.0.0.1:$PORT"
  echo "$name:"
  echo "  idle RSS: $(rss "$PID")"
  python3 bench/refine_load.py fanout "$base" 6 sleep1
  python3 bench/refine_load.py fanout "$base" 12 sleep1
  python3 bench/refine_load.py latency "$base" 200
  python3 bench/refine_load.py throughput "$base" "$JOBS" 16
  echo "  RSS after $((JOBS + 2)) jobs: $(rss "$PID")"
  if [ "${RSS_JOBS:-0}" -gt 0 ]; then
    python3 bench/refine_load.py throughput "$base" "$RSS_JOBS" 16 >/dev/null
    echo "  RSS after $((JOBS + RSS_JOBS + 2)) jobs: $(rss "$PID")"
  fi
  kill -TERM "$PID"; wait "$PID" || true
}

echo "machine: $(nproc) cores; client and server share them"
run_backend sqlite "sqlite://$tmp/bench.db"
db="plangate_bench_$$"
psql "$PG_ADMIN" -qc "create database $db"
run_backend postgres "${PG_ADMIN%/*}/$db"
psql "$PG_ADMIN" -qc "drop database $db with (force)"
