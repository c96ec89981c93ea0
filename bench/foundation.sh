#!/usr/bin/env bash
# Foundation figures: release binary size, startup-to-ready time and idle RSS of the
# server on SQLite and on Postgres. Prints one line per figure.
#   bash bench/foundation.sh        (needs Postgres as for the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN=target/release/plangate
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
echo "binary size: $(stat -c %s "$BIN") bytes ($(du -h "$BIN" | cut -f1))"

measure() { # name url
  local name=$1 url=$2 port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  local start end pid
  start=$(date +%s%N)
  DATABASE_URL="$url" PLANGATE_BIND="127.0.0.1:$port" PLANGATE_LOG_FORMAT=json "$BIN" >/dev/null 2>&1 &
  pid=$!
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do sleep 0.005; done
  end=$(date +%s%N)
  echo "$name: startup to ready $(( (end - start) / 1000000 )) ms (fresh database, migrations included)"
  for _ in 1 2 3 4 5; do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null; done
  sleep 2
  echo "$name: idle RSS $(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status)"
  kill -TERM $pid; wait $pid || true
}

tmp=$(mktemp -d)
measure sqlite "sqlite://$tmp/bench.db"
db="plangate_bench_$$"
psql "$PG_ADMIN" -qc "create database $db"
measure postgres "${PG_ADMIN%/*}/$db"
psql "$PG_ADMIN" -qc "drop database $db with (force)"
rm -rf "$tmp"
