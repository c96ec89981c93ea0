#!/usr/bin/env bash
# Memory over a long job history (issue 17 item 5): one server on a fresh Postgres
# database, default settings; prints its RSS idle, then after every ROUND jobs until
# JOBS jobs have run (builtin executor, 4 assignments each, submitted by oha).
# Flat after warm-up is the goal: a rising line is a leak or an unbounded cache.
#   bash bench/rss.sh                       # 100,000 jobs in rounds of 10,000
#   JOBS=20000 ROUND=5000 bash bench/rss.sh
#   NO_BUILD=1 NEW_BIN=path/to/plangate bash bench/rss.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
PG_BASE="${PG_ADMIN%/*}"
JOBS=${JOBS:-100000}
ROUND=${ROUND:-10000}
CONCURRENCY=${CONCURRENCY:-32}

if [ -z "${NO_BUILD:-}" ]; then
  cargo build --release --quiet --bin plangate
fi
BIN=${NEW_BIN:-$PWD/target/release/plangate}

tmp=$(mktemp -d)
pids=()
source bench/lib.sh
DB="plangate_bench_rss_$$"
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  psql "$PG_ADMIN" -qc "drop database if exists $DB with (force)" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

write_job_body "$tmp/job.json"
rss() { awk '/VmRSS/ {printf "%.1f MB", $2 / 1024}' "/proc/$1/status"; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
psql "$PG_ADMIN" -qc "create database $DB"
start_server "$BIN" "$PG_BASE/$DB" "$tmp/server.log"
sleep 2
echo "idle: $(rss "$PID")"
done_jobs=0
t0=$SECONDS
while [ "$done_jobs" -lt "$JOBS" ]; do
  "$OHA" -n "$ROUND" -c "$CONCURRENCY" -m POST -H 'content-type: application/json' \
    -D "$tmp/job.json" --no-tui "http://127.0.0.1:$PORT/v1/refine-jobs" >"$tmp/oha.txt" 2>&1
  done_jobs=$((done_jobs + ROUND))
  until [ "$(finished "$PORT")" -ge "$done_jobs" ]; do sleep 0.2; done
  echo "after $done_jobs jobs ($((SECONDS - t0)) s): $(rss "$PID")"
done
sleep 6
echo "6 s idle after $done_jobs jobs: $(rss "$PID")"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
