#!/usr/bin/env bash
# Schema fuzzing: schemathesis (every check) against a live debug server's
# /openapi.json, with a fresh SQLite database and an API token. Fails on any finding:
# a 5xx, an undocumented status code, a response that does not match its schema, a
# schema-valid request refused or an invalid one accepted, ... (docs/testing.md: "Fuzzing
# findings").
#
#   bash .ci/schemathesis.sh            # after a debug build (.ci/run's test step)
#
# Bounded: SCHEMATHESIS_MAX_EXAMPLES test cases per operation and phase (default 40)
# and a hard stop after SCHEMATHESIS_TIMEOUT seconds (default 240) for the fuzzer;
# a fixed SCHEMATHESIS_SEED keeps CI reproducible (override it to explore).
# The tool comes from PyPI into the venv .ci/lint-deploy uses (target/ci-venv).
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_PIN="schemathesis==4.32.5"
MAX_EXAMPLES="${SCHEMATHESIS_MAX_EXAMPLES:-40}"
SEED="${SCHEMATHESIS_SEED:-20261130}"
TIMEOUT="${SCHEMATHESIS_TIMEOUT:-240}"
BIN="${PLANGATE_BIN:-target/debug/plangate}"
VENV=target/ci-venv
STAMP="$VENV/.installed-schemathesis"
PYTHON="${PYTHON:-python3}"

step() { printf '\n== %s\n' "$*"; }

step "tools: $SCHEMATHESIS_PIN in $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
if [[ "$(cat "$STAMP" 2>/dev/null)" != "$SCHEMATHESIS_PIN" ]] || ! "$VENV/bin/schemathesis" --version >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$SCHEMATHESIS_PIN"
    echo "$SCHEMATHESIS_PIN" > "$STAMP"
fi
"$VENV/bin/schemathesis" --version
[[ "${1:-}" == --install-only ]] && exit 0

if [[ ! -x "$BIN" ]]; then
    step "building $BIN (not found)"
    cargo build --locked --bin plangate
fi

step "server: $BIN on a fresh SQLite database"
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
port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token="fuzz-$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')"
base="http://127.0.0.1:$port"
PLANGATE_API_TOKENS="$token" \
    DATABASE_URL="sqlite://$work/fuzz.db" \
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
curl -fsS "$base/readyz"; echo

step "schemathesis run $base/openapi.json --checks all (seed $SEED, $MAX_EXAMPLES examples)"
# One worker: schemathesis's workers are threads, and CPython 3.11.7 (this machine's)
# keeps the ast module's recursion counter in shared state (CPython gh-106905, fixed
# in 3.11.8), so two threads describing hypothesis lambdas at once can fail the run
# with "SystemError: AST constructor recursion depth mismatch" -- a CI run did.
status=0
timeout --signal=INT --kill-after=10 "$TIMEOUT" \
    "$VENV/bin/schemathesis" --config-file .ci/schemathesis.toml run "$base/openapi.json" \
    --checks all \
    --header "Authorization: Bearer $token" \
    --max-examples "$MAX_EXAMPLES" \
    --seed "$SEED" \
    --workers 1 \
    --no-color \
    --output-sanitize true \
    || status=$?

# Storage errors and panics are logged at ERROR: fail on them even where the
# answer looked fine to schemathesis.
if grep -E '"level":"ERROR"|panicked' "$work/server.log" > "$work/errors.log"; then
    echo "the server logged errors:" >&2
    head -n 20 "$work/errors.log" >&2
    status=1
fi
if (( status != 0 )); then
    echo "schema fuzzing FAILED (exit $status); see docs/testing.md 'Fuzzing findings'" >&2
    exit "$status"
fi
step "schema fuzzing passed: no server errors, no schema violations"
