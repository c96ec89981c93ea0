#!/usr/bin/env bash
# What traces cost (docs/observability.md), side by side in one run, on SQLite:
#  - off: no OTEL_* variable (no OpenTelemetry layer is installed);
#  - on: OTEL_EXPORTER_OTLP_ENDPOINT pointed at a local OTLP/HTTP sink (a small
#    python server answering 200 to every POST /v1/traces, counting the bytes);
#  - with BASE=path/to/plangate, an older build (before traces existed) first, off.
# Loads (wrk, 2 threads, 32 connections): GET /healthz, POST /v1/task-lists/validate
# (50 tasks: one request span and one gating span when on), and 200 refine jobs of 4
# builtin L0s each (request, job and 4 L0 spans per job when on). Prints req/s, the
# server's CPU per request (user + system) and jobs/s.
set -euo pipefail
cd "$(dirname "$0")/.."
# BIN=path/to/plangate (and GEN=path/to/gen_tasks) measure a build made elsewhere.
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --bin plangate --example gen_tasks
fi
BIN=${BIN:-target/release/plangate}
GEN=${GEN:-target/release/examples/gen_tasks}
out=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$out"' EXIT
command -v wrk >/dev/null || { apt-get install -y -q wrk >/dev/null; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The OTLP sink.
SINK_PORT=$(free_port)
python3 - "$SINK_PORT" "$out/sink.count" <<'PY' &
import http.server, sys
port, count = int(sys.argv[1]), sys.argv[2]
total = [0, 0]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        self.rfile.read(n)
        total[0] += 1; total[1] += n
        open(count, "w").write(f"{total[0]} exports, {total[1]} bytes\n")
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
pids+=($!)

"$GEN" 50 7 > "$out/body50.json"
cat > "$out/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$out/body50.json", "r"); wrk.body = f:read("*a"); f:close()
LUA
python3 - "$out/job.json" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from refine_load import context
json.dump(context(4), open(sys.argv[1], "w"))
PY

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
wrk_rate() { # server-pid wrk-args...: "req/s µs-of-server-CPU-per-request"
  local pid=$1 t0 t1; shift
  t0=$(cpu_ticks "$pid")
  wrk -t2 -c32 -d"${WRK_SECONDS:-8}s" "$@" > "$out/wrk.txt"
  t1=$(cpu_ticks "$pid")
  awk -v ticks=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" '/requests in/ {n = $1}
    /Requests\/sec/ {r = $2} END {printf "%s %.0f\n", r, ticks / hz / n * 1e6}' "$out/wrk.txt"
}
jobs_done() { curl -fs "http://127.0.0.1:$1/metrics" | awk '/^refine_jobs_finished_total/ { n += $NF } END { print n + 0 }'; }

figures() { # label binary [VAR=value...]
  local label=$1 bin=$2 port srv
  shift 2
  port=$(free_port)
  env DATABASE_URL="sqlite://$out/$label.db" PLANGATE_BIND="127.0.0.1:$port" \
    PLANGATE_LOG_FORMAT=json RUST_LOG=warn "$@" "$bin" >"$out/$label.log" 2>&1 &
  srv=$!
  pids+=("$srv")
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    kill -0 "$srv" 2>/dev/null || { cat "$out/$label.log"; exit 1; }
    sleep 0.05
  done
  read -r health health_us < <(wrk_rate "$srv" "http://127.0.0.1:$port/healthz")
  read -r valid valid_us < <(wrk_rate "$srv" -s "$out/post.lua" "http://127.0.0.1:$port/v1/task-lists/validate")
  local t0 c0 t1 c1 jobs=${JOBS:-200}
  t0=$(date +%s.%N); c0=$(cpu_ticks "$srv")
  for _ in $(seq "$jobs"); do
    curl -fs -o /dev/null "http://127.0.0.1:$port/v1/refine-jobs" -H 'content-type: application/json' --data-binary @"$out/job.json"
  done
  until [ "$(jobs_done "$port")" -ge "$jobs" ]; do sleep 0.05; done
  t1=$(date +%s.%N); c1=$(cpu_ticks "$srv")
  echo "$label: healthz $health req/s ($health_us µs CPU each); validate(50 tasks) $valid req/s ($valid_us µs CPU each)"
  python3 -c "print(f'$label: $jobs refine jobs of 4 builtin L0s: {$jobs/($t1-$t0):.1f} jobs/s, {($c1-$c0)/$(getconf CLK_TCK)/$jobs*1e3:.2f} ms server CPU per job')"
  echo "$label: RSS after the loads $(awk '/VmRSS/ {print $2 " kB"}' "/proc/$srv/status")"
  kill -TERM "$srv"; wait "$srv" || true
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "${BASE:-}" ] && figures base-off "$BASE"
figures off "$BIN"
figures on "$BIN" OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$SINK_PORT"
[ -n "${BASE:-}" ] && figures base-off-again "$BASE"
figures off-again "$BIN"
echo "sink received: $(cat "$out/sink.count" 2>/dev/null || echo nothing)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
