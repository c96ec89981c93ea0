#!/usr/bin/env bash
# A live list page's change marker at two sizes of history (docs/architecture.md,
# "Live pages"): how long each live page's stream (overview, jobs, runs, tracks)
# takes to send its first event, which waits for one read of the page's marker (an
# open page reads it again twice a second), and how long a draw of the overview and
# the job list takes (a live page is drawn again whenever its marker moves; the job
# counts are counter rows since migration 0026), on Postgres databases seeded with a
# small and a 20 times larger history (bench/seed_postgres.sql); then what the
# change indexes cost a job queue (HOT updates of `refine_jobs`). With BASE=path to
# an older plangate binary, that build is measured first on the same databases.
#
#   bash bench/live.sh                                  # this build (release)
#   BASE=/tmp/base/plangate BIN=target/debug/plangate bash bench/live.sh
#   COUNT=50 DRAWS=20 bash bench/live.sh                # streams opened, draws per page
#
# The older build runs first on each database: it does not know this build's
# migrations, and a database this build migrated is newer than it accepts.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
PG_BASE="${PG_ADMIN%/*}"
BIN="${BIN:-target/release/plangate}"
BASE="${BASE:-}"
COUNT="${COUNT:-30}"
DRAWS="${DRAWS:-10}"
[ -x "$BIN" ] || cargo build --release --quiet --bin plangate
tmp=$(mktemp -d)
pids=()
dbs=()
NO_OHA=1 source bench/lib.sh
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for db in "${dbs[@]}"; do
    psql "$PG_ADMIN" -qc "drop database if exists $db with (force)" >/dev/null 2>&1 || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

stop() { kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# name: lists (100 tasks each), jobs, tracks
for size in "small 200 2000 200" "large 4000 40000 4000"; do
  read -r name lists jobs tracks <<<"$size"
  db="plangate_live_${name}_$$"
  dbs+=("$db")
  psql "$PG_ADMIN" -qc "create database $db"
  url="$PG_BASE/$db"
  start_server "${BASE:-$BIN}" "$url" "$tmp/seed-$name.log"
  curl -fs -X PUT "http://127.0.0.1:$PORT/v1/tracks/seed-template" -H 'content-type: application/json' \
    -d '{"track_id": "seed-template", "type": "feature", "status": "new", "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z", "description": "Seed template"}' >/dev/null
  stop
  psql "$url" -v ON_ERROR_STOP=1 -q -c "set seed.projects = 200" -c "set seed.lists = $lists" \
    -c "set seed.tasks_per_list = 100" -c "set seed.jobs = $jobs" -c "set seed.tracks = $tracks" \
    -c "set seed.run_every = 40" -f bench/seed_postgres.sql
  psql "$url" -qc "vacuum analyze"
  echo "== $name: $(psql "$url" -Atqc "select string_agg(relname || ' ' || n_live_tup, ', ' order by relname) from pg_stat_user_tables where relname in ('tasks', 'task_lists', 'refine_jobs', 'refine_runs', 'tracks')")"
  printf '%-10s %-20s %10s %10s %10s\n' build page "p50 ms" "p95 ms" "max ms"
  for build in ${BASE:+base} this; do
    bin=$BIN
    [ "$build" = base ] && bin=$BASE
    start_server "$bin" "$url" "$tmp/$build-$name.log"
    { python3 bench/live_marker.py "http://127.0.0.1:$PORT" "$COUNT" | sed 's/^/marker:/'
      python3 bench/page_draw.py "http://127.0.0.1:$PORT" "$DRAWS" | sed 's/^/draw:/'; } |
      while read -r page p50 p95 max; do
        printf '%-10s %-20s %10s %10s %10s\n' "$build" "$page" "$p50" "$p95" "$max"
      done
    stop
  done
done
# What the change indexes cost the job queue: a job write that moves `updated_at`
# can no longer be a HOT update. 300 builtin jobs on an empty database per build.
echo "== refine_jobs updates during 300 builtin jobs (8 clients)"
for build in ${BASE:+base} this; do
  bin=$BIN
  [ "$build" = base ] && bin=$BASE
  db="plangate_live_jobs_${build}_$$"
  dbs+=("$db")
  psql "$PG_ADMIN" -qc "create database $db"
  start_server "$bin" "$PG_BASE/$db" "$tmp/jobs-$build.log"
  rate=$(python3 bench/refine_load.py throughput "http://127.0.0.1:$PORT" 300 8 | grep 'throughput:')
  stop
  sleep 1 # the statistics of the server's last transactions
  echo "$build: $(psql "$PG_BASE/$db" -Atqc "select n_tup_upd || ' updates, ' || n_tup_hot_upd || ' HOT' from pg_stat_user_tables where relname = 'refine_jobs'");$rate"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
