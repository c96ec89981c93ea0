#!/usr/bin/env bash
# Webhooks end to end (docs/api.md, "Webhooks"): on SQLite and on Postgres,
# tests/webhooks/driver.py runs the debug server with a short retry schedule
# (PLANGATE_WEBHOOK_RETRY_SCHEDULE=2,2,2) against tests/webhooks/receiver.py, a real
# receiver that verifies every delivery with the PyPI `standardwebhooks` library
# (pinned, in target/webhooks-venv): every event type, retries through a receiver
# failing half its attempts, Retry-After, 410, no redirect, rotation, project
# scoping, replay, and a SIGKILL during an attempt (Postgres: another replica
# delivers; SQLite: the restarted server), with the same webhook-id.
#
#   bash .ci/webhooks.sh        # after a debug build (.ci/run's test step)
#
# Idempotent: the venv is installed only when its stamp differs from the pins.
set -euo pipefail
cd "$(dirname "$0")/.."

PINS=(standardwebhooks==1.3.0)
VENV=target/webhooks-venv
STAMP="$VENV/.installed-webhooks"
PYTHON="${PYTHON:-python3}"
BIN="${PLANGATE_BIN:-target/debug/plangate}"

step() { printf '\n== %s\n' "$*"; }

step "tools: ${PINS[*]} in $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
if [[ "$(cat "$STAMP" 2>/dev/null)" != "${PINS[*]}" ]]; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
    echo "${PINS[*]}" > "$STAMP"
fi
[[ "${1:-}" == --install-only ]] && exit 0

if [[ ! -x "$BIN" ]]; then
    step "building $BIN (not found)"
    cargo build --locked --bin plangate
fi

t=$SECONDS
for backend in sqlite postgres; do
    step "webhooks on $backend"
    "$VENV/bin/python" tests/webhooks/driver.py --binary "$BIN" --backend "$backend"
done
echo "webhooks checked on both back-ends in $(( SECONDS - t )) s"
