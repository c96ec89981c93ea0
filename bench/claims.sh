#!/usr/bin/env bash
# A fleet of agents on one task list (docs/architecture.md, "Claims at scale"):
# N claimers loop claim -> PATCH done over keep-alive HTTP against the release
# build; prints tasks/s and claim p50/p99 per list size and database, the p99 of a
# cascading PATCH on a 2,000-task list under 32 writers, the time to create a
# 100,000-task list, and how soon a long-poll on one replica hears of a `done` on
# another (Postgres, two replicas). With BASE=path/to/plangate an older build runs first, in the
# same run, and both tables are printed.
#
#   bash bench/claims.sh                       # this build only
#   BASE=/tmp/plangate-main bash bench/claims.sh
#   SECONDS_PER_RUN=10 bash bench/claims.sh    # seconds of load per figure (15)
#   DRIVER=python bash bench/claims.sh         # the fleet from claims.py, not benches/claims_load.rs
#
# The fleet (claims and cascade) is driven from Rust by default: Python's 64
# threads took a fifth of a core of the two the server and Postgres share, which
# showed as 10 % fewer tasks/s (bench/README.md, "Claims at scale").
set -euo pipefail
cd "$(dirname "$0")/.."
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
RUN_S="${SECONDS_PER_RUN:-15}"
BIN="${BIN:-target/release/plangate}"
[ -x "$BIN" ] || cargo build --release --quiet
out=$(mktemp -d)
D=bench/claims.py
if [ "${DRIVER:-rust}" = rust ]; then
  FLEET=$(CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 \
    cargo bench --quiet --bench claims_load --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for m in map(json.loads, sys.stdin):
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "claims_load" and m.get("executable"):
        print(m["executable"])')
  [ -x "$FLEET" ] || { echo "could not build benches/claims_load.rs" >&2; exit 1; }
else
  FLEET="python3 $D"
fi
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # By name: `fresh_url` runs in a command substitution (a subshell), so a list it
  # appended to would not reach this shell.
  for d in $(psql "$PG_ADMIN" -Atc "select datname from pg_database where datname like 'plangate_claims_$$_%'" 2>/dev/null); do
    psql "$PG_ADMIN" -qc "drop database if exists $d with (force)" >/dev/null 2>&1 || true
  done
  rm -rf "$out"
}
trap cleanup EXIT

start() { # bin url
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  env DATABASE_URL="$2" PLANGATE_BIND="127.0.0.1:$PORT" PLANGATE_LOG_FORMAT=json RUST_LOG=warn \
    PLANGATE_BODY_LIMIT_BYTES=67108864 "$1" >"$out/server.log" 2>&1 &
  PID=$!
  pids+=("$PID")
  until curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do
    kill -0 "$PID" 2>/dev/null || { cat "$out/server.log"; exit 1; }
    sleep 0.05
  done
}
stop() { kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; }

fresh_url() { # db -> a new empty database's URL
  if [ "$1" = postgres ]; then
    local name="plangate_claims_$$_$RANDOM"
    psql "$PG_ADMIN" -qc "create database $name" >/dev/null
    echo "${PG_ADMIN%/*}/$name"
  else
    echo "sqlite://$out/claims-$RANDOM.db"
  fi
}

row() { printf '| %-6s | %-8s | %-34s | %s |\n' "$1" "$2" "$3" "$4" | tee -a "$out/table.$1"; }

measure() { # label bin
  local label=$1 bin=$2 url id secs line
  for case in "postgres 10000 64" "postgres 100000 64" "postgres 10000 32" "sqlite 10000 32"; do
    set -- $case
    url=$(fresh_url "$1"); start "$bin" "$url"
    read -r id secs < <(python3 $D create "http://127.0.0.1:$PORT" "$2")
    line=$($FLEET claims "http://127.0.0.1:$PORT" "$id" "$3" "$RUN_S")
    row "$label" "$1" "$2 tasks, $3 claimers" "$line"
    [ "$2" = 100000 ] && row "$label" "$1" "create 100,000 tasks" "seconds=$secs"
    stop
  done
  url=$(fresh_url postgres); start "$bin" "$url"; local first=$PID a=$PORT
  start "$bin" "$url"
  line=$(python3 $D wakeup "http://127.0.0.1:$a" "http://127.0.0.1:$PORT" 40)
  row "$label" postgres "wake-up across two replicas" "$line"
  if [ "$label" = after ]; then
    line=$(python3 $D wakeup "http://127.0.0.1:$a" "http://127.0.0.1:$PORT" 40 stream)
    row "$label" postgres "wake-up across replicas, event stream" "$line"
  fi
  stop; PID=$first; stop
  for db in postgres sqlite; do
    url=$(fresh_url "$db"); start "$bin" "$url"
    read -r id secs < <(python3 $D create "http://127.0.0.1:$PORT" 2000)
    line=$($FLEET cascade "http://127.0.0.1:$PORT" "$id" 32 "$RUN_S")
    row "$label" "$db" "cascade, 2,000 tasks, 32 writers" "$line"
    stop
  done
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; fleet: $FLEET"
[ -n "${BASE:-}" ] && measure before "$BASE"
measure after "$BIN"
echo
echo "| build  | database | case                               | figures |"
echo "|---|---|---|---|"
cat "$out"/table.* 2>/dev/null
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
