#!/usr/bin/env bash
# A generated Python client works: openapi-python-client (pinned, from PyPI, in a
# venv under target/) generates a client from openapi/openapi.json, with no endpoint
# or schema left out, and .ci/client_flow.py drives the orchestrator's flow with it
# against the debug server on a fresh SQLite file: validate, create, ready, a status
# change that cascades, project status, a refine job to its result, a track step.
#
#   bash .ci/client.sh        # after a debug build (.ci/run's test step)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

GENERATOR_PIN="openapi-python-client==0.29.1"
RUNTIME_PINS=(httpx==0.28.1 attrs==26.1.0 python-dateutil==2.9.0.post0)
BIN="${PLANGATE_BIN:-target/debug/plangate}"
VENV=target/client-venv
STAMP="$VENV/.installed"
PYTHON="${PYTHON:-python3}"

step() { printf '\n== %s\n' "$*"; }

step "tools: $GENERATOR_PIN in $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
wanted="$GENERATOR_PIN ${RUNTIME_PINS[*]}"
if [[ "$(cat "$STAMP" 2>/dev/null)" != "$wanted" ]]; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$GENERATOR_PIN" "${RUNTIME_PINS[@]}"
    echo "$wanted" > "$STAMP"
fi
[[ "${1:-}" == --install-only ]] && exit 0

if [[ ! -x "$BIN" ]]; then
    step "building $BIN (not found)"
    cargo build --locked --bin plangate
fi

work=$(mktemp -d)
server=""
cleanup() {
    if [[ -n "$server" ]] && kill -0 "$server" 2>/dev/null; then
        kill -TERM "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

step "generate the client from openapi/openapi.json"
# Every operation and schema must come through: the only warning allowed is the
# YAML body of POST /v1/loop-plans/generate, skipped next to its JSON form.
(cd "$work" && "$root/$VENV/bin/openapi-python-client" generate \
    --path "$root/openapi/openapi.json" --meta none --output-path plangate_client) \
    > "$work/generate.log" 2>&1 || { cat "$work/generate.log" >&2; exit 1; }
if grep -E "will not be generated|Unable to parse|Could not find" "$work/generate.log" >&2; then
    echo "the generator left parts of the API out (log above)" >&2
    exit 1
fi
grep -E "^WARNING|Unsupported" "$work/generate.log" || true

step "server: $BIN on a fresh SQLite database"
port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token="client-$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')"
base="http://127.0.0.1:$port"
PLANGATE_API_TOKENS="$token" \
    DATABASE_URL="sqlite://$work/client.db" \
    PLANGATE_BIND="127.0.0.1:$port" \
    PLANGATE_LOG_FORMAT=json \
    RUST_LOG=warn \
    "$BIN" serve > "$work/server.log" 2>&1 &
server=$!
for _ in $(seq 1 150); do
    curl -fs "$base/readyz" > /dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.2
done

step "the orchestrator's flow through the generated client"
PYTHONPATH="$work" "$VENV/bin/python" .ci/client_flow.py "$base" "$token"
if grep -E '"level":"ERROR"|panicked' "$work/server.log" >&2; then
    echo "the server logged errors (above)" >&2
    exit 1
fi
step "generated client: every operation generated, flow passed"
