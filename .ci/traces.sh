#!/usr/bin/env bash
# plangate's OpenTelemetry traces checked against a real Arize Phoenix (issue #28,
# docs/observability.md): Phoenix (PyPI, pinned, in target/traces-venv) runs offline
# on a free port with its SQLite data in target/traces-phoenix/; on SQLite and on
# Postgres, tests/traces/check_phoenix.py starts the debug server exporting OTLP/HTTP
# to it, stores a task list and runs a refine job with priced fake L0s under its own
# traceparent, and reads back through Phoenix's REST API the request -> job -> L0
# spans with the GenAI attributes and the job's token counts.
#
#   bash .ci/traces.sh                       # after a debug build (.ci/run's test step)
#   TRACES_SCREENSHOT=docs/images/phoenix-refine-trace.png bash .ci/traces.sh
#                                            # also re-make the docs' screenshot (SQLite run)
#
# Idempotent: the venv is installed only when its stamp differs from the pins (the
# install takes minutes); chromium comes from apt only for a screenshot.
set -euo pipefail
cd "$(dirname "$0")/.."

PINS=(arize-phoenix==20.26.1 opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2 playwright==1.65.2)
VENV=target/traces-venv
STAMP="$VENV/.installed-traces"
PYTHON="${PYTHON:-python3}"
BIN="${PLANGATE_BIN:-target/debug/plangate}"
DATA="$PWD/target/traces-phoenix"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

step() { printf '\n== %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

step "tools: ${PINS[*]} in $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
if [[ "$(cat "$STAMP" 2>/dev/null)" != "${PINS[*]}" ]]; then
    t=$SECONDS
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
    echo "${PINS[*]}" > "$STAMP"
    echo "installed in $(( SECONDS - t )) s"
fi
"$VENV/bin/python" -c 'import importlib.metadata as m
for name in ("arize-phoenix", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http", "playwright"):
    print(name, m.version(name))'
[[ "${1:-}" == --install-only ]] && exit 0

if [[ -n "${TRACES_SCREENSHOT:-}" ]]; then
    export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
    if [[ ! -x "$CHROMIUM" ]]; then
        as_root apt-get update -q
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q chromium
    fi
    "$CHROMIUM" --version
fi

if [[ ! -x "$BIN" ]]; then
    step "building $BIN (not found)"
    cargo build --locked --bin plangate
fi

step "Phoenix: offline, data in $DATA"
rm -rf "$DATA"
mkdir -p "$DATA"
PORT=$(free_port)
GRPC_PORT=$(free_port)
PHOENIX="http://127.0.0.1:$PORT"
# Everything local: SQLite under PHOENIX_WORKING_DIR, no telemetry pixels, no web
# fonts or sandbox download, no assistant or MCP endpoint, gRPC on a free port
# (its default, 4317, may be taken).
env PHOENIX_WORKING_DIR="$DATA" PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$PORT" \
    PHOENIX_GRPC_PORT="$GRPC_PORT" PHOENIX_TELEMETRY_ENABLED=false \
    PHOENIX_ALLOW_EXTERNAL_RESOURCES=false PHOENIX_DISABLE_AGENT_ASSISTANT=true \
    PHOENIX_ENABLE_MCP_SERVER=false PHOENIX_DISABLE_RATE_LIMIT=true \
    "$VENV/bin/phoenix" serve >"$DATA/phoenix.log" 2>&1 </dev/null &
PHOENIX_PID=$!
stop_phoenix() {
    kill "$PHOENIX_PID" 2>/dev/null || true
    wait "$PHOENIX_PID" 2>/dev/null || true
}
trap stop_phoenix EXIT
t=$SECONDS
until curl -fsS "$PHOENIX/healthz" >/dev/null 2>&1; do
    if ! kill -0 "$PHOENIX_PID" 2>/dev/null; then
        tail -n 40 "$DATA/phoenix.log"
        echo "Phoenix exited before it was ready (log above: $DATA/phoenix.log)" >&2
        exit 1
    fi
    if (( SECONDS - t > 180 )); then
        tail -n 40 "$DATA/phoenix.log"
        echo "Phoenix not ready after 180 s" >&2
        exit 1
    fi
    sleep 0.5
done
echo "Phoenix $(curl -fsS "$PHOENIX/arize_phoenix_version") ready at $PHOENIX in $(( SECONDS - t )) s"

for backend in sqlite postgres; do
    step "traces on $backend: request -> job -> L0 spans read back from Phoenix"
    shot=()
    if [[ -n "${TRACES_SCREENSHOT:-}" && $backend == sqlite ]]; then
        shot=(--screenshot "$TRACES_SCREENSHOT")
    fi
    "$VENV/bin/python" tests/traces/check_phoenix.py --binary "$BIN" --backend "$backend" \
        --phoenix "$PHOENIX" "${shot[@]}"
done
