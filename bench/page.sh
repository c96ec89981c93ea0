#!/usr/bin/env bash
# The dashboard's page of a 100,000-task list in Chromium (docs/architecture.md,
# "The dashboard's task-list page"): the server's answer, DOMContentLoaded and
# load, for the list's page and one wave's, on SQLite and Postgres. Needs the UI
# test venv (bash .ci/ui.sh --install-only) and Debian's chromium.
#
#   bash bench/page.sh                      # the release build
#   BIN=target/debug/plangate bash bench/page.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
BIN="${BIN:-target/release/plangate}"
TASKS="${TASKS:-100000}"
[ -x "$BIN" ] || cargo build --release --quiet
PY=target/ui-venv/bin/python
[ -x "$PY" ] || bash .ci/ui.sh --install-only
out=$(mktemp -d)
pid=""
db=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  [ -n "$db" ] && psql "$PG_ADMIN" -qc "drop database if exists $db with (force)" >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
for backend in sqlite postgres; do
  if [ "$backend" = postgres ]; then
    db="plangate_page_$$"
    psql "$PG_ADMIN" -qc "create database $db"
    url="${PG_ADMIN%/*}/$db"
  else
    url="sqlite://$out/page.db"
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  env DATABASE_URL="$url" PLANGATE_BIND="127.0.0.1:$port" PLANGATE_LOG_FORMAT=json RUST_LOG=warn \
    PLANGATE_BODY_LIMIT_BYTES=67108864 "$BIN" >"$out/server.log" 2>&1 &
  pid=$!
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do sleep 0.1; done
  read -r id secs < <(python3 bench/claims.py create "http://127.0.0.1:$port" "$TASKS")
  echo "$backend: created $TASKS tasks in $secs s"
  "$PY" bench/page_timing.py "http://127.0.0.1:$port" "$id" 5 | sed "s/^/$backend: /"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
