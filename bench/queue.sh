#!/usr/bin/env bash
# Refine-job queue throughput (issue 17, item 3): sustained builtin jobs/s (4
# assignments per job, default settings: 4 workers) on Postgres and SQLite, and where
# the time goes per job on Postgres: statements and transactions, rows written, what
# the server's connections wait on, CPU of the server next to its Postgres backends.
#
#   bash bench/queue.sh                    # JOBS=5000 submitted by oha at CONCURRENCY=32
#   JOBS=2000 bash bench/queue.sh
#   BASE_BIN=path/to/plangate bash bench/queue.sh   # a second binary, run side by side
#                                                   # (default target/bench-base/plangate
#                                                   # when it exists)
#   COUNT_JOBS=200 ...   jobs of the statement-counting run (sqlx statement log)
#   NO_BUILD=1 ...       use target/release/plangate (or NEW_BIN) as it is
#
# Load generator: oha (crates.io, pinned), installed once under target/bench-tools; it
# only POSTs the jobs (no client polling). Completion is read from the server's
# /metrics; jobs/s = jobs / (last finished_at − first created_at), the server's own
# timestamps. Statements per job come from a separate, smaller run with sqlx's
# statement log on (it costs CPU, so the timed run has it off); transactions and rows
# from `pg_stat_database` deltas of the run's own database, read after the server
# stopped (its backends flush their counters on exit). Wait events are sampled from
# `pg_stat_activity` every 100 ms during the timed run. Machines are noisy: compare
# the binaries within one run, and note the load average printed.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
PG_BASE="${PG_ADMIN%/*}"
JOBS=${JOBS:-5000}
CONCURRENCY=${CONCURRENCY:-32}
COUNT_JOBS=${COUNT_JOBS:-200}
PREFIX=plangate_queue_$$

if [ -z "${NO_BUILD:-}" ]; then
  cargo build --release --quiet --locked --bin plangate
fi
BIN=${NEW_BIN:-$PWD/target/release/plangate}
BASE_BIN=${BASE_BIN:-$PWD/target/bench-base/plangate}

tmp=$(mktemp -d)
pids=()
source bench/lib.sh
dbs=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for d in "${dbs[@]}"; do
    psql "$PG_ADMIN" -qc "drop database if exists $d with (force)" >/dev/null 2>&1 || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

write_job_body "$tmp/job.json"

stop() { kill -TERM "$1"; wait "$1" 2>/dev/null || true; }
ticks() { # pid -> utime+stime in clock ticks (0 once gone)
  awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0
}
pg_backends() { # db -> "pid ticks" per server backend
  psql "$PG_ADMIN" -Atc "select pid from pg_stat_activity where datname = '$1' and pid <> pg_backend_pid()" |
    while read -r p; do echo "$p $(ticks "$p")"; done
}
pg_counters() { # db -> commits rollbacks inserted updated deleted returned fetched
  psql "$PG_ADMIN" -AtF' ' -c "select xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, tup_returned, tup_fetched from pg_stat_database where datname = '$1'"
}
HZ=$(getconf CLK_TCK)

# Submits JOBS jobs with oha and waits for the last to finish; prints jobs/s.
# Sets SERVER_MS, CLIENT_MS (CPU ms) and WALL.
drive() { # port jobs concurrency label
  local port=$1 n=$2 c=$3 label=$4
  local before_server
  before_server=$(ticks "$PID")
  local t0
  t0=$(date +%s.%N)
  (
    "$OHA" -n "$n" -c "$c" -m POST -H 'content-type: application/json' -D "$tmp/job.json" \
      --no-tui "http://127.0.0.1:$port/v1/refine-jobs" >"$tmp/oha-$label.txt" 2>&1
    times >"$tmp/oha-times-$label.txt"
  )
  local t_submitted
  t_submitted=$(date +%s.%N)
  local deadline=$((SECONDS + 600))
  until [ "$(finished "$port")" -ge "$n" ]; do
    [ $SECONDS -lt $deadline ] || { echo "  timed out waiting for jobs"; break; }
    sleep 0.1
  done
  WALL=$(echo "$(date +%s.%N) - $t0" | bc)
  SERVER_MS=$(( ($(ticks "$PID") - before_server) * 1000 / HZ ))
  # `times` prints the children's user and system time on its second line.
  CLIENT_MS=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } print int(t * 1000) }' "$tmp/oha-times-$label.txt")
  local codes
  codes=$(grep -E '^\s*\[[0-9]{3}\]' "$tmp/oha-$label.txt" | tr -s ' ' | tr '\n' ' ')
  SUBMIT_S=$(echo "$t_submitted - $t0" | bc)
  printf '    submitted %d in %.2f s (%s), all finished after %.2f s wall\n' "$n" "$SUBMIT_S" "$codes" "$WALL"
}

# What the server's Postgres connections are doing, every 100 ms, until killed.
sample_waits() { # db out
  psql "$PG_ADMIN" -At >"$2" 2>/dev/null <<SQL &
select 'sample', count(*) filter (where not granted) from pg_locks \\watch 0.1
SQL
  SAMPLER_LOCKS=$!
  psql "$PG_ADMIN" -At >>"$2.activity" 2>/dev/null <<SQL &
select state || ' ' || coalesce(wait_event_type || ':' || wait_event, 'on-cpu')
  from pg_stat_activity where datname = '$1' and pid <> pg_backend_pid() and query not like 'LISTEN%' \\watch 0.1
SQL
  SAMPLER=$!
}

report_waits() { # out
  local f=$1.activity
  local samples
  samples=$(grep -c '^sample' "$1" || true)
  echo "    connection states, sampled every 100 ms ($samples samples; share of connection-samples):"
  awk '{ n[$0]++; t++ } END { for (k in n) printf "      %5.1f%%  %s\n", 100 * n[k] / t, k }' "$f" | sort -rn | head -8
  awk -F'|' '$1 == "sample" { s++; if ($2 > 0) w++; l += $2 } END { if (s) printf "    ungranted locks: in %.1f%% of samples, %.2f on average (the whole cluster: other databases too)\n", 100 * w / s, l / s }' "$1"
}

postgres_run() { # label bin
  local label=$1 bin=$2 db="${PREFIX}_$1"
  psql "$PG_ADMIN" -qc "create database $db"
  dbs+=("$db")
  start_server "$bin" "$PG_BASE/$db" "$tmp/server-pg-$label.log"
  local c0 b0
  c0=$(pg_counters "$db")
  b0=$(pg_backends "$db")
  sample_waits "$db" "$tmp/waits-$label"
  echo "  $label:"
  drive "$PORT" "$JOBS" "$CONCURRENCY" "pg-$label"
  kill "$SAMPLER" "$SAMPLER_LOCKS" 2>/dev/null || true
  local b1
  b1=$(pg_backends "$db")
  stop "$PID"
  local span ok
  read -r ok span < <(psql "$PG_BASE/$db" -AtF' ' -c "select count(*) filter (where status = 'succeeded'), extract(epoch from max(finished_at) - min(created_at)) from refine_jobs")
  local c1
  sleep 0.5
  c1=$(pg_counters "$db")
  local pg_ms
  pg_ms=$(join -a2 -e0 -o 0,1.2,2.2 <(echo "$b0" | sort) <(echo "$b1" | sort) |
    awk -v hz="$HZ" '{ t += $3 - $2 } END { print int(t * 1000 / hz) }')
  printf '    %s: %.0f jobs/s (%d succeeded; first created_at to last finished_at %.2f s)\n' \
    "postgres" "$(echo "$JOBS / $span" | bc -l)" "$ok" "$span"
  echo "$c0 $c1" | awk -v n="$JOBS" '{
    printf "    per job: %.1f transactions (commits %.1f, rollbacks %.1f), rows inserted %.1f, updated %.1f, deleted %.1f\n",
      ($8 - $1 + $9 - $2) / n, ($8 - $1) / n, ($9 - $2) / n, ($10 - $3) / n, ($11 - $4) / n, ($12 - $5) / n }'
  printf '    CPU per job: server %.2f ms, its Postgres backends %.2f ms, oha %.2f ms (over %.1f s wall: server %.0f%%, postgres %.0f%% of one core)\n' \
    "$(echo "$SERVER_MS / $JOBS" | bc -l)" "$(echo "$pg_ms / $JOBS" | bc -l)" "$(echo "$CLIENT_MS / $JOBS" | bc -l)" \
    "$WALL" "$(echo "$SERVER_MS / 10 / $WALL" | bc -l)" "$(echo "$pg_ms / 10 / $WALL" | bc -l)"
  report_waits "$tmp/waits-$label"
}

# A smaller run with sqlx's statement log: statements per job by kind.
count_statements() { # label bin
  local label=$1 bin=$2 db="${PREFIX}_count_$1"
  psql "$PG_ADMIN" -qc "create database $db"
  dbs+=("$db")
  start_server "$bin" "$PG_BASE/$db" "$tmp/count-$label.log" RUST_LOG=warn,sqlx::query=debug
  # Statements of start-up (migrations, readiness) are not the queue's.
  local skip
  skip=$(grep -c '"sqlx::query"' "$tmp/count-$label.log" || true)
  "$OHA" -n "$COUNT_JOBS" -c 8 -m POST -H 'content-type: application/json' -D "$tmp/job.json" \
    --no-tui "http://127.0.0.1:$PORT/v1/refine-jobs" >/dev/null 2>&1
  until [ "$(finished "$PORT")" -ge "$COUNT_JOBS" ]; do sleep 0.1; done
  stop "$PID"
  echo "  $label: statements per job (sqlx statement log, $COUNT_JOBS jobs, 8 clients):"
  tail -n +"$((skip + 1))" "$tmp/count-$label.log" | grep '"sqlx::query"' | python3 -c '
import json, re, sys
n = int(sys.argv[1])
kinds, idle = {}, [0, 0.0]
for line in sys.stdin:
    rec = json.loads(line)
    text = re.sub(r"\s+", " ", rec.get("db.statement") or rec.get("summary") or "").strip()
    secs = float(rec.get("elapsed_secs") or 0)
    # A claim that found the queue empty is the idle worker polling, not a job.
    if "status = \x27queued\x27" in text and rec.get("rows_returned") == 0:
        idle[0] += 1
        idle[1] += secs
        continue
    k = kinds.setdefault(text[:90], [0, 0.0])
    k[0] += 1
    k[1] += secs
total = sum(k[0] for k in kinds.values())
commits = sum(k[0] for t, k in kinds.items() if t == "COMMIT")
busy = sum(k[1] for k in kinds.values())
print(f"    {total / n:.1f} statements per job as sqlx logs them (it does not log BEGIN: add one per "
      f"COMMIT, {commits / n:.1f}, for the round trips); the server waits {busy / n * 1000:.2f} ms per job on them")
print(f"    (plus {idle[0]} claims that found the queue empty)")
print("    per job   ms/job  statement")
for head, (k, secs) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
    if k / n >= 0.05:
        print(f"    {k / n:7.2f}  {secs / n * 1000:6.3f}  {head}")
' "$COUNT_JOBS"
}

sqlite_run() { # label bin
  local label=$1 bin=$2
  start_server "$bin" "sqlite://$tmp/queue-$label.db" "$tmp/server-sqlite-$label.log"
  echo "  $label:"
  drive "$PORT" "$JOBS" "$CONCURRENCY" "sqlite-$label"
  stop "$PID"
  local ok span
  read -r ok span < <(sqlite3 -separator ' ' "$tmp/queue-$label.db" \
    "select sum(status = 'succeeded'), (julianday(max(finished_at)) - julianday(min(created_at))) * 86400 from refine_jobs")
  printf '    %s: %.0f jobs/s (%d succeeded; first created_at to last finished_at %.2f s); server CPU %.2f ms per job\n' \
    "sqlite" "$(echo "$JOBS / $span" | bc -l)" "$ok" "$span" "$(echo "$SERVER_MS / $JOBS" | bc -l)"
}

binaries=()
[ -x "$BASE_BIN" ] && binaries+=("base:$BASE_BIN")
binaries+=("new:$BIN")
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); oha, the servers and Postgres share them"
echo "release profile: lto=${CARGO_PROFILE_RELEASE_LTO:-Cargo.toml} codegen-units=${CARGO_PROFILE_RELEASE_CODEGEN_UNITS:-Cargo.toml}"
for b in "${binaries[@]}"; do echo "  ${b%%:*}: ${b#*:} ($(stat -c %y "${b#*:}" | cut -d. -f1))"; done
echo "== $JOBS builtin jobs (4 assignments each), $CONCURRENCY oha connections, default settings (4 workers)"
echo "postgres:"
for b in "${binaries[@]}"; do postgres_run "${b%%:*}" "${b#*:}"; done
echo "sqlite:"
for b in "${binaries[@]}"; do sqlite_run "${b%%:*}" "${b#*:}"; done
echo "== where the statements go (Postgres)"
for b in "${binaries[@]}"; do count_statements "${b%%:*}" "${b#*:}"; done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
