#!/usr/bin/env bash
# Seeded-volume benchmark (issue 17): p50/p99 per endpoint at a fixed request rate,
# on a Postgres database holding a year of history next to an empty one, in one run
# (each endpoint is driven against the empty server, then the seeded one, so both see
# the same machine load). Also prints the server's RSS idle and after the load.
#
#   bash bench/scale.sh                      # full size: 10,000 lists (1,000,000 tasks,
#                                            # ~2,700,000 edges), 200,000 jobs, 2,000 tracks
#   LISTS=1000 JOBS=20000 bash bench/scale.sh   # a tenth
#   KEEP=1 bash bench/scale.sh               # keep the seeded database and reuse it next time
#   RATE=200 DURATION=10 ...                 # requests/s and seconds per endpoint
#
# Load generator: oha (crates.io, pinned), installed once under target/bench-tools.
# Needs Postgres as for the tests. Absolute times on a shared machine are noisy; the
# seeded/empty ratio of each endpoint is the figure to read.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
PG_BASE="${PG_ADMIN%/*}"
PREFIX=${DB_PREFIX:-plangate_bench}
RATE=${RATE:-200}
DURATION=${DURATION:-10}
PROJECTS=${PROJECTS:-200}
LISTS=${LISTS:-10000}
TASKS_PER_LIST=${TASKS_PER_LIST:-100}
JOBS=${JOBS:-200000}
TRACKS=${TRACKS:-2000}
SEEDED_DB="${PREFIX}_seeded_${LISTS}_${JOBS}"
EMPTY_DB="${PREFIX}_empty_$$"

cargo build --release --quiet --bin plangate
BIN=$PWD/target/release/plangate

tmp=$(mktemp -d)
pids=()
source bench/lib.sh
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  psql "$PG_ADMIN" -qc "drop database if exists $EMPTY_DB with (force)" >/dev/null 2>&1 || true
  if [ -z "${KEEP:-}" ]; then
    psql "$PG_ADMIN" -qc "drop database if exists $SEEDED_DB with (force)" >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

start() { # name url -> sets PORT, PID; keeps a server log in $tmp
  start_server "$BIN" "$2" "$tmp/server-$1.log"
}
rss() { awk '/VmRSS/ {print $2 " kB"}' "/proc/$1/status"; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); oha, both servers and Postgres share them"

# The seeded database: migrated by the server, a template track, then the history.
exists=$(psql "$PG_ADMIN" -Atqc "select 1 from pg_database where datname = '$SEEDED_DB'")
if [ -z "$exists" ]; then
  psql "$PG_ADMIN" -qc "create database $SEEDED_DB"
  start seeded "$PG_BASE/$SEEDED_DB"
  curl -fs -X PUT "http://127.0.0.1:$PORT/v1/tracks/seed-template" -H 'content-type: application/json' \
    -d '{"track_id": "seed-template", "type": "feature", "status": "new", "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z", "description": "Seed template"}' >/dev/null
  echo "== seeding $SEEDED_DB: $LISTS lists x $TASKS_PER_LIST tasks, $JOBS jobs, $TRACKS tracks"
  start_s=$(date +%s.%N)
  psql "$PG_BASE/$SEEDED_DB" -v ON_ERROR_STOP=1 -q \
    -c "set seed.projects = $PROJECTS" -c "set seed.lists = $LISTS" \
    -c "set seed.tasks_per_list = $TASKS_PER_LIST" -c "set seed.jobs = $JOBS" \
    -c "set seed.tracks = $TRACKS" -c "set seed.run_every = 40" -f bench/seed_postgres.sql
  psql "$PG_BASE/$SEEDED_DB" -qc "vacuum analyze"
  python3 -c "import time; print(f'seeded in {time.time() - $start_s:.0f} s (server-side generate_series, then VACUUM ANALYZE)')"
  kill -TERM "$PID"; wait "$PID" || true
else
  echo "== reusing $SEEDED_DB (KEEP=1 run before)"
fi
psql "$PG_BASE/$SEEDED_DB" -Atqc "select string_agg(relname || ' ' || n_live_tup, ', ' order by n_live_tup desc) from pg_stat_user_tables where n_live_tup > 0"
echo "seeded database size: $(psql "$PG_BASE/$SEEDED_DB" -Atqc "select pg_size_pretty(pg_database_size(current_database()))")"

psql "$PG_ADMIN" -qc "create database $EMPTY_DB"
start empty "$PG_BASE/$EMPTY_DB"; EMPTY_PORT=$PORT; EMPTY_PID=$PID
start seeded "$PG_BASE/$SEEDED_DB"; SEEDED_PORT=$PORT; SEEDED_PID=$PID
sleep 1
echo "idle RSS: empty $(rss $EMPTY_PID), seeded $(rss $SEEDED_PID)"
mkdir -p "$tmp/empty" "$tmp/seeded"
python3 bench/scale_fixtures.py "http://127.0.0.1:$EMPTY_PORT" "$tmp/empty" -
python3 bench/scale_fixtures.py "http://127.0.0.1:$SEEDED_PORT" "$tmp/seeded" "$PG_BASE/$SEEDED_DB"

# One endpoint at RATE req/s for DURATION s; prints p50 p99 (ms) and the 2xx share.
drive() { # which endpoint method
  local dir=$tmp/$1 args=()
  case $3 in
    PATCH) args=(-m PATCH -T application/json -d '{"status": "abandoned", "abandon_category": "scope"}') ;;
    POST) args=(-m POST -T application/json -d '{"agent": "bench"}') ;;
  esac
  "$OHA" --no-tui --output-format json -q "$RATE" -z "${DURATION}s" -c 16 --latency-correction \
    --urls-from-file "${args[@]}" "$dir/$2.urls" >"$dir/$2.json"
  python3 - "$dir/$2.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["latencyPercentiles"]
codes = r.get("statusCodeDistribution", {})
total = sum(codes.values()) or 1
ok = sum(n for c, n in codes.items() if c.startswith("2"))
print(f"{p['p50'] * 1000:.2f} {p['p99'] * 1000:.2f} {100 * ok / total:.0f} {r['summary']['requestsPerSec']:.0f}")
PY
}

echo "== $RATE req/s for ${DURATION}s per endpoint (oha, 16 connections, latency-corrected)"
printf '%-18s %22s %22s %12s\n' endpoint "empty p50/p99 ms" "seeded p50/p99 ms" "p99 ratio"
for spec in ready:GET status_cycle:GET status_project:GET patch_cascade:PATCH job_get:GET \
            job_list:GET job_list_filtered:GET run_get:GET track_step:POST; do
  name=${spec%%:*}; method=${spec#*:}
  read -r e50 e99 eok erps < <(drive empty "$name" "$method")
  read -r s50 s99 sok srps < <(drive seeded "$name" "$method")
  printf '%-18s %14s (%3s%% 2xx) %14s (%3s%% 2xx) %10s\n' "$name" "$e50/$e99" "$eok" "$s50/$s99" "$sok" \
    "$(python3 -c "print(f'{$s99 / max($e99, 0.001):.2f}x')")"
done
echo "RSS after the load: empty $(rss $EMPTY_PID), seeded $(rss $SEEDED_PID)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
