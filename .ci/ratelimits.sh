#!/usr/bin/env bash
# The rate-limit stage (docs/jobs.md, "Rate limits"): plangate against a scripted
# provider with Anthropic's rate-limit semantics (.ci/ratelimits/provider.py, the
# one stand-in allowed), offering twice the limit:
#   1. 3 replicas on Postgres × 4 workers × 6 L0s, [rate_limits] 600/min with shares
#      team-a 3 : team-b 1, 90 s: ≤ 1 % 429s, any 60 s window ≤ 601 requests,
#      utilisation ≥ 85 %, no L0 failed for rate reasons, split 3:1 within ±10 %;
#      then PUT 300/min, followed within 2 s (30 s more).
#   2. the same with no [rate_limits]: the provider's headers alone, ≤ 5 % 429s.
#   3. SQLite, one server, as 1, with 8 workers: a job runs its L0s in batches of 6,
#      so one server of 4 workers (3 jobs of team-a, 1 of team-b) leaves a project
#      without waiting calls between batches most of the time, and the shares are
#      promised (and counted) while both projects are backlogged.
# Prints one JSON line of figures per run; fails when one misses its goal.
#   bash .ci/ratelimits.sh          # about 2 minutes (the three runs side by side)
# BIN=path/to/plangate runs another build than the debug one (e.g. main's, for the before figures;
# NO_CHECK=1 then just prints figures).
set -euo pipefail
cd "$(dirname "$0")/.."
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
# The debug build .ci/run's test stage made (the figures hold for it too: the
# provider's limit, not plangate's speed, bounds these runs).
BIN="${BIN:-target/debug/plangate}"
[ -x "$BIN" ] || cargo build --quiet --locked --bin plangate
CHECK=--check
[ -n "${NO_CHECK:-}" ] && CHECK=
SECS=${SECS:-90}
out=$(mktemp -d)
cleanup() {
  # By name: `fresh_pg` runs in a command substitution (a subshell), so a list it
  # appended to would not reach this shell.
  for db in $(psql "$PG_ADMIN" -Atc "select datname from pg_database where datname like 'plangate_ratelimits_$$_%'" 2>/dev/null); do
    psql "$PG_ADMIN" -qc "drop database if exists $db with (force)" >/dev/null 2>&1 || true
  done
  rm -rf "$out"
}
trap cleanup EXIT
fresh_pg() {
  local db="plangate_ratelimits_$$_$1"
  psql "$PG_ADMIN" -qc "create database $db"
  echo "${PG_ADMIN%/*}/$db"
}

# The three runs are bound by the provider's limit, not by the machine (a few
# requests a second each, answered by Python), and each has its own provider,
# database and servers: they run side by side, and their output is printed in
# order once all three have ended.
run() {
  local name=$1 title=$2; shift 2
  { echo "== $title"; python3 .ci/ratelimits/drive.py "$@"; } >"$out/$name.out" 2>&1 &
  pids+=($!); names+=("$name")
}
pids=(); names=()
run limited "1. limited: 3 replicas on Postgres, ${SECS} s at twice 600/min, shares 3:1, then a runtime change" \
  limited "$BIN" "$out/limited" --db "$(fresh_pg limited)" --replicas 3 \
  --secs "$SECS" ${NO_CONFIG:+--no-config} $CHECK
run headers "2. headers only: 3 replicas on Postgres, no [rate_limits]" \
  headers "$BIN" "$out/headers" --db "$(fresh_pg headers)" --replicas 3 --secs 45 $CHECK
run sqlite "3. limited: SQLite, one server of 8 workers" \
  limited "$BIN" "$out/sqlite" --replicas 1 --workers 8 --secs "$SECS" ${NO_CONFIG:+--no-config} $CHECK
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || status=1
  cat "$out/${names[$i]}.out"
done
exit $status
