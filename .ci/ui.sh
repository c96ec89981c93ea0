#!/usr/bin/env bash
# Browser tests of the dashboard (/ui/): Playwright for Python (PyPI, pinned, in a
# venv under target/) driving Debian's chromium through executable_path, against
# the real debug server on SQLite and Postgres. Screenshots of every page land in
# target/ui-tests/<test>/ (UI_TEST_OUTPUT to change).
#
#   bash .ci/ui.sh            # after a debug build (.ci/run's test step); builds one if missing
#
# Idempotent: installs chromium with apt and the Python tools only when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# axe-playwright-python bundles axe-core (tests/ui/test_look.py: 0 serious findings in either theme).
PINS=(playwright==1.65.2 pytest==9.2.0 axe-playwright-python==0.1.8)
VENV=target/ui-venv
STAMP="$VENV/.installed-ui"
PYTHON="${PYTHON:-python3}"
export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
export UI_TEST_OUTPUT="${UI_TEST_OUTPUT:-$PWD/target/ui-tests}"
export PLANGATE_BIN="${PLANGATE_BIN:-$PWD/target/debug/plangate}"
# Playwright's own browser download is unreachable and not wanted.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

step() { printf '\n== %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

step "tools: ${PINS[*]} in $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
if [[ "$(cat "$STAMP" 2>/dev/null)" != "${PINS[*]}" ]]; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
    echo "${PINS[*]}" > "$STAMP"
fi
# .ci/prepare.sh installs the Python tools early; the browser comes with its apt step.
[[ "${1:-}" == --install-only ]] && exit 0

step "browser: Debian's chromium"
if [[ ! -x "$CHROMIUM" ]]; then
    as_root apt-get update -q
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q chromium
fi
"$CHROMIUM" --version

step "server binary"
cargo build --locked --bin plangate

step "browser tests (tests/ui), screenshots in $UI_TEST_OUTPUT"
rm -rf "$UI_TEST_OUTPUT"
mkdir -p "$UI_TEST_OUTPUT"
"$VENV/bin/python" -m pytest tests/ui -p no:cacheprovider -ra \
    --junitxml "$UI_TEST_OUTPUT/junit.xml" "$@"
