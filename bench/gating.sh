#!/usr/bin/env bash
# Gating figures (issue: task-list gating), each measured side by side in one run:
#  1. `plangate validate` on a generated 100,000-task list vs python's json.load of
#     the same file: wall time, ratio, peak RSS vs file size.
#  2. wrk: POST /v1/task-lists/validate (50 tasks) vs GET /healthz, same server, and
#     the server's RSS idle and after that load; with BASE=path/to/plangate an older
#     build is measured before and after this one in the same run.
#  3. Persisting 10,000 tasks on Postgres through POST /v1/task-lists: tasks/s.
# Needs Postgres as for the tests; installs wrk with apt if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
cargo build --release --quiet --bin plangate --example gen_tasks
BIN=target/release/plangate
GEN=target/release/examples/gen_tasks
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== 1. plangate validate vs python json.load ($N tasks)"
"$GEN" "$N" > "$out/tasks.json"
size=$(stat -c %s "$out/tasks.json")
echo "file: $size bytes"
timed() { # label, command...: prints wall seconds and max RSS kB
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$out/time" "$@" >/dev/null 2>&1 || true
  read -r secs rss < "$out/time"
  echo "$label: ${secs}s, max RSS ${rss} kB"
  eval "${label}_secs=$secs ${label}_rss=$rss"
}
# Warm the page cache, then take the best of three of each.
cat "$out/tasks.json" > /dev/null
best_p=999; best_v=999
for _ in 1 2 3; do
  timed python python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$out/tasks.json"
  best_p=$(python3 -c "print(min($best_p, $python_secs))")
  timed plangate "$BIN" validate "$out/tasks.json" --format json
  best_v=$(python3 -c "print(min($best_v, $plangate_secs))")
done
"$BIN" validate "$out/tasks.json" | tail -n 1
python3 -c "print(f'validate/python wall-time ratio: {$best_v/$best_p:.2f} (best of 3: {$best_v}s vs {$best_p}s; < 1 means plangate is faster)')"
python3 -c "print(f'validate peak RSS / file size: {$plangate_rss*1024/$size:.2f}x')"

echo "== 2. wrk: validate (50 tasks) vs healthz, RSS"
# BASE=path/to/plangate runs an older binary too, side by side (same load, same run).
command -v wrk >/dev/null || { apt-get install -y -q wrk >/dev/null; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$GEN" 50 7 > "$out/body50.json"
cat > "$out/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$out/body50.json", "r"); wrk.body = f:read("*a"); f:close()
LUA
# Two more loads place the 50-task validate between healthz and its own parts: a
# one-task validate (the POST path, extractor, gates, answer and metrics, almost
# nothing to parse) and the 12 KB body refused at once (415, wrong content type:
# the cost of receiving the body alone).
cat > "$out/tiny.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"tasks": [{"task_id": "a", "assigned_persona": "p", "parallel_group": 1, "depends_on": [], "reads": [], "writes": ["x"], "description": "d"}]}'
LUA
cat > "$out/refused.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "text/plain"
local f = io.open("$out/body50.json", "r"); wrk.body = f:read("*a"); f:close()
LUA
rss() { awk '/VmRSS/ {print $2 " kB"}' "/proc/$1/status"; }
# Prints the rate and the server's CPU time per request (user + system, µs): the
# rate depends on what else the two cores run, the CPU per request much less.
wrk_rate() { # server-pid wrk-args...
  local pid=$1 t0 t1; shift
  t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  wrk -t2 -c32 -d"${WRK_SECONDS:-8}s" "$@" > "$out/wrk.txt"
  t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  awk -v ticks=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" '/requests in/ {n = $1}
    /Requests\/sec/ {r = $2} END {printf "%s %.0f\n", r, ticks / hz / n * 1e6}' "$out/wrk.txt"
}
http_figures() { # label binary
  local port srv health valid idle after
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  DATABASE_URL="sqlite://$out/wrk-$1.db" PLANGATE_BIND="127.0.0.1:$port" PLANGATE_LOG_FORMAT=json RUST_LOG=warn "$2" >/dev/null 2>&1 &
  srv=$!
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do sleep 0.01; done
  curl -fs "http://127.0.0.1:$port/v1/task-lists/validate" -H 'content-type: application/json' --data-binary @"$out/body50.json" | python3 -c "import json,sys; r=json.load(sys.stdin); assert r['valid'], r"
  sleep 2
  idle=$(rss $srv)
  read -r health health_us < <(wrk_rate $srv "http://127.0.0.1:$port/healthz")
  read -r valid valid_us < <(wrk_rate $srv -s "$out/post.lua" "http://127.0.0.1:$port/v1/task-lists/validate")
  after=$(rss $srv)
  read -r valid2 valid2_us < <(wrk_rate $srv -s "$out/post.lua" "http://127.0.0.1:$port/v1/task-lists/validate")
  read -r tiny tiny_us < <(wrk_rate $srv -s "$out/tiny.lua" "http://127.0.0.1:$port/v1/task-lists/validate")
  read -r refused refused_us < <(wrk_rate $srv -s "$out/refused.lua" "http://127.0.0.1:$port/v1/task-lists/validate")
  sleep 6 # past the purge delay and one metrics drain
  echo "$1: healthz $health req/s; validate(50 tasks) $valid, again $valid2 req/s; ratio $(python3 -c "print(f'{$valid/$health:.2f}')")"
  echo "$1: server CPU per request: healthz $health_us µs, validate $valid_us µs, again $valid2_us µs"
  echo "$1: parts: one-task validate $tiny req/s ($tiny_us µs), 12 KB body refused (415) $refused req/s ($refused_us µs)"
  # wrk shares the two cores: the CPU a request costs in all is cores / rate.
  python3 -c "
c = $(nproc)
h, v, t, r = (c / x * 1e6 for x in ($health, $valid, $tiny, $refused))
print(f'$1: CPU per request in all (server and wrk, {c} cores / rate): healthz {h:.0f} µs, validate {v:.0f} µs, one-task validate {t:.0f} µs, 12 KB refused {r:.0f} µs')
print(f'$1: for validate/healthz >= 0.5, a validate may cost {2 * h:.0f} µs in all; the one-task validate plus the 12 KB body already cost {t + r - h:.0f} µs, leaving {2 * h - (t + r - h):.0f} µs to parse and gate 50 tasks')"
  echo "$1: RSS idle $idle, after validate load $after, after a second load and 6 s idle $(rss $srv)"
  kill -TERM $srv; wait $srv || true
}
[ -n "${BASE:-}" ] && http_figures base "$BASE"
http_figures this "$BIN"
[ -n "${BASE:-}" ] && http_figures base-again "$BASE"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== 3. persisting 10,000 tasks on Postgres"
db="plangate_bench_$$"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
psql "$PG_ADMIN" -qc "create database $db"
DATABASE_URL="${PG_ADMIN%/*}/$db" PLANGATE_BIND="127.0.0.1:$port" PLANGATE_LOG_FORMAT=json RUST_LOG=warn "$BIN" >/dev/null 2>&1 &
srv=$!
until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do sleep 0.01; done
"$GEN" 10000 3 | python3 -c "import json,sys; b=json.load(sys.stdin); b.update(project_id='bench', created_by='bench'); json.dump(b, sys.stdout)" > "$out/body10k.json"
for run in 1 2 3; do
  t=$(curl -s -o "$out/created.json" -w '%{http_code} %{time_total}' "http://127.0.0.1:$port/v1/task-lists" -H 'content-type: application/json' --data-binary @"$out/body10k.json")
  code=${t% *}; secs=${t#* }
  [ "$code" = 201 ] || { echo "unexpected $code"; head -c 500 "$out/created.json"; exit 1; }
  python3 -c "print(f'run $run: 10000 tasks stored in {$secs:.3f}s over HTTP (parse + gate + batched insert + answer): {10000/$secs:.0f} tasks/s')"
done
psql "${PG_ADMIN%/*}/$db" -Atqc "select count(*) || ' tasks, ' || (select count(*) from task_dependencies) || ' edges stored' from tasks"
kill -TERM $srv; wait $srv || true
psql "$PG_ADMIN" -qc "drop database $db with (force)"
