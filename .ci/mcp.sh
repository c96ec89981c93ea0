#!/usr/bin/env bash
# The MCP endpoint through a real client nobody here wrote: the official MCP Python
# SDK drives the whole flow (validate, create, ready, statuses with a cascade,
# project status, a loop plan, a track step, a builtin refine job to its result)
# over Streamable HTTP (/mcp, /mcp/readonly) and over stdio (`plangate mcp`), on
# SQLite and on Postgres (docs/mcp.md). Prints the largest tool answer in bytes.
# tests/mcp_client/agents.py adds issue #24's agents at work through the SDK (next,
# long-poll, 16 concurrent claimers, idempotent creates, the holder check), and
# .ci/claude.sh has the Claude Code CLI report plangate connected.
#
#   bash .ci/mcp.sh            # after a debug build (.ci/run's test step)
#
# The SDK comes from PyPI, pinned, into its own venv (target/mcp-venv).
set -euo pipefail
cd "$(dirname "$0")/.."

MCP_PIN="mcp==2.3.0"
BIN="${PLANGATE_BIN:-target/debug/plangate}"
VENV=target/mcp-venv
STAMP="$VENV/.installed"
PYTHON="${PYTHON:-python3}"

step() { printf '\n== %s\n' "$*"; }

step "tools: $MCP_PIN in $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
if [[ "$(cat "$STAMP" 2>/dev/null)" != "$MCP_PIN" ]]; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$MCP_PIN"
    echo "$MCP_PIN" > "$STAMP"
fi
"$VENV/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))'
[[ "${1:-}" == --install-only ]] && exit 0

if [[ ! -x "$BIN" ]]; then
    step "building $BIN (not found)"
    cargo build --locked --bin plangate
fi

for backend in sqlite postgres; do
    step "MCP flow on $backend (Streamable HTTP and stdio)"
    "$VENV/bin/python" tests/mcp_client/flow.py --binary "$BIN" --backend "$backend"
done

step "Claude Code CLI: claude mcp list over HTTP and stdio (.ci/claude.sh)"
PLANGATE_BIN="$BIN" bash .ci/claude.sh
