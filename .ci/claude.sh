#!/usr/bin/env bash
# Claude Code, the real CLI, connects to plangate (docs/mcp.md, "Adding plangate to an
# agent"): `claude mcp add` over Streamable HTTP (bearer token) and over stdio
# (`plangate mcp`, on a SQLite file and on a Postgres database), then `claude mcp list`
# must report each one connected; a wrong token must not connect. No API key is
# needed: `mcp list` only starts the servers and runs the MCP handshake.
#
#   bash .ci/claude.sh         # after a debug build; .ci/mcp.sh calls it at its end
#
# The CLI comes from npm, pinned, into target/claude-code. Versions from 2.1.1xx on
# declare node >=22 but ship a native binary (bin/claude.exe, from the platform
# package) that does not run on node at all, so they run on this Node 20 too (npm
# only warns EBADENGINE). HOME is a fresh temp dir per run: nothing of the user's is
# read or written, and no failure is remembered across runs
# (~/.claude/mcp-needs-auth-cache.json).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

source .ci/claude-code.sh  # CLAUDE_PIN, CLAUDE_PREFIX, install_claude
BIN="${PLANGATE_BIN:-target/debug/plangate}"
PREFIX=$CLAUDE_PREFIX
PYTHON="${PYTHON:-python3}"
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

step() { printf '\n== %s\n' "$*"; }

work=$(mktemp -d)
server=""
pg_db=""
cleanup() {
    if [[ -n "$server" ]] && kill -0 "$server" 2>/dev/null; then
        kill -TERM "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    if [[ -n "$pg_db" ]]; then
        psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

export HOME="$work/home" DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
unset ANTHROPIC_API_KEY CLAUDE_CODE_OAUTH_TOKEN
mkdir -p "$HOME"

step "tools: @anthropic-ai/claude-code@$CLAUDE_PIN in $PREFIX"
claude="$PREFIX/node_modules/.bin/claude"
install_claude
echo "node $(node --version), npm $(npm --version), claude $("$claude" --version)"

if [[ ! -x "$BIN" ]]; then
    step "building $BIN (not found)"
    cargo build --locked --bin plangate
fi
bin_abs="$root/$BIN"

step "server: $BIN serve on a fresh SQLite database"
port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token="claude-$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')"
PLANGATE_API_TOKENS="$token" DATABASE_URL="sqlite://$work/http.db" PLANGATE_BIND="127.0.0.1:$port" \
    RUST_LOG=warn "$BIN" serve > "$work/server.log" 2>&1 &
server=$!
for _ in $(seq 1 150); do
    curl -fs "http://127.0.0.1:$port/readyz" > /dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.2
done

step "a Postgres database for stdio"
pg_db="plangate_test_claude_$("$PYTHON" -c 'import uuid; print(uuid.uuid4().hex)')"
psql "$PG_ADMIN" -qc "CREATE DATABASE $pg_db"
pg_url="${PG_ADMIN%/*}/$pg_db"

step "claude mcp add (user scope, in the temp HOME)"
cd "$work"
(
    set -x
    "$root/$claude" mcp add --scope user --transport http plangate-http \
        "http://127.0.0.1:$port/mcp" --header "Authorization: Bearer $token"
    "$root/$claude" mcp add --scope user --transport http plangate-wrong-token \
        "http://127.0.0.1:$port/mcp" --header "Authorization: Bearer wrong-token-0123456789"
    # -e takes several values: it goes after the name, ended by `--`.
    "$root/$claude" mcp add --scope user plangate-stdio-sqlite \
        -e "DATABASE_URL=sqlite://$work/stdio.db" -- "$bin_abs" mcp
    "$root/$claude" mcp add --scope user plangate-stdio-postgres \
        -e "DATABASE_URL=$pg_url" -- "$bin_abs" mcp
)

step "claude mcp list"
"$root/$claude" mcp list > "$work/list.txt" 2>&1 || true
cat "$work/list.txt"

failed=0
# The exact words of 2.1.332: "NAME: URL (HTTP) - ✔ Connected", "NAME: COMMAND - ✔
# Connected", and "NAME: URL (HTTP) - ✘ Failed to connect — Server rejected the
# configured Authorization header (HTTP 401). …".
expect() { # name, wanted ("connected" | "refused")
    local line
    line=$(grep -E "^$1: " "$work/list.txt" || true)
    case "$2" in
        connected) [[ "$line" == *" - ✔ Connected" ]] ;;
        refused) [[ "$line" == *" - ✘ Failed to connect"*"(HTTP 401)"* ]] ;;
    esac || { echo "FAILED: $1 should be $2: '${line}'" >&2; failed=1; }
}
expect plangate-http connected
expect plangate-stdio-sqlite connected
expect plangate-stdio-postgres connected
expect plangate-wrong-token refused
[[ "$failed" == 0 ]] || exit 1
[[ -s "$work/stdio.db" ]] || { echo "FAILED: stdio made no SQLite database" >&2; exit 1; }
step "claude code $CLAUDE_PIN: plangate connected over HTTP and stdio (SQLite, Postgres); a wrong token not"
