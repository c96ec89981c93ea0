#!/usr/bin/env bash
# The Claude Code plugin (integrations/claude-code, docs/claude-code.md) with the real
# CLI: it validates, installs from this repository's marketplace and connects (stdio and
# HTTP), and a headless `claude -p` session runs a whole planning cycle through the
# plugin's skills and MCP tools on SQLite and on Postgres; the end state is then read
# from the database. Only the model is scripted (tests/plugin/scripted_model.py, a
# stand-in of the Messages API: CI cannot reach the real one).
#
#   bash .ci/plugin.sh         # after a debug build (PLANGATE_BIN to use another binary)
#
# HOME is a fresh temp dir: nothing of the user's is read or written.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

source .ci/claude-code.sh  # CLAUDE_PIN, CLAUDE_PREFIX, install_claude
BIN="${PLANGATE_BIN:-target/debug/plangate}"
PREFIX=$CLAUDE_PREFIX
PYTHON="${PYTHON:-python3}"
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

work=$(mktemp -d)
pids=()
pg_db=""
cleanup() {
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [[ -n "$pg_db" ]]; then
        psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

export HOME="$work/home" DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
unset ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN CLAUDE_CODE_OAUTH_TOKEN ANTHROPIC_BASE_URL CLAUDE_CONFIG_DIR \
    PLANGATE_URL PLANGATE_TOKEN PLANGATE_DATABASE_URL DATABASE_URL
mkdir -p "$HOME" "$work/ws" "$work/bin"

step "tools: @anthropic-ai/claude-code@$CLAUDE_PIN in $PREFIX, sqlite3, psql"
command -v sqlite3 > /dev/null || { sudo=""; [[ $(id -u) == 0 ]] || sudo=sudo
    $sudo apt-get update -qq && $sudo apt-get install -y -qq sqlite3 > /dev/null; }
command -v psql > /dev/null || bash .ci/test-env.sh
claude="$root/$PREFIX/node_modules/.bin/claude"
install_claude
echo "node $(node --version), claude $("$claude" --version)"
if [[ ! -x "$BIN" ]]; then
    step "building $BIN (not found)"
    cargo build --locked --bin plangate
fi
bin_abs=$(realpath "$BIN")
free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

step "claude plugin validate --strict (plugin, marketplace)"
"$claude" plugin validate --strict integrations/claude-code
"$claude" plugin validate --strict .
# plangate-remote shares the skills and command by symlink: the validator warns that it
# does not read through links (install copies them), so it is validated without --strict
# and must have no other warning.
"$claude" plugin validate --json integrations/claude-code-remote > "$work/remote.json" || true
"$PYTHON" - "$work/remote.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
found = [(part["file"], w["message"]) for part in [report["manifest"], *report["contents"]]
         for w in part["errors"] + part["warnings"]]
others = [f for f in found if "is a symlink" not in f[1]]
assert report["success"] and not others, others or report
print(f"plangate-remote: valid; {len(found)} warnings, all about its symlinked skills and commands")
PY

step "install from this repository's marketplace (fresh HOME)"
cd "$work/ws"
"$claude" plugin marketplace add "$root"
"$claude" plugin install plangate@plangate
"$claude" plugin install plangate-remote@plangate
"$claude" plugin list

mcp_list() { # -> $work/list.txt
    "$claude" mcp list < /dev/null > "$work/list.txt" 2>&1 || true
    cat "$work/list.txt"
}
expect_line() { # server, pattern
    grep -E "^plugin:$1:plangate: .* - $2" "$work/list.txt" > /dev/null ||
        fail "plugin:$1:plangate should match '$2'"
}

step "stdio with plangate not on PATH: fails, says what to do, and is remembered"
PATH="$(dirname "$(command -v node)"):/usr/bin:/bin" mcp_list
expect_line plangate "✘ Failed to connect"
# The launcher's message is the server's stderr, which the CLI keeps in its MCP logs.
grep -rhos "plangate-mcp: .plangate. is not on PATH[^\"]*" "$HOME/.cache/claude-cli-nodejs" | head -1 |
    grep . || fail "the launcher's message is in no MCP log (docs/claude-code.md says where to find it)"
cache="$HOME/.claude/mcp-needs-auth-cache.json"
[[ -f "$cache" ]] || fail "this CLI version no longer remembers failed servers in $cache: update docs/claude-code.md"
cat "$cache"; echo

# The scripted model: one process per headless session.
model_port=$(free_port)
model_log="$work/model.log"
plugin=plangate   # the installed plugin the sessions use

headless() { # label [keep-tool-search]: one `claude -p` against a fresh scripted model
    : > "$model_log"
    # A new scripted model per session: it reports each skill body once.
    "$PYTHON" "$root/tests/plugin/scripted_model.py" "$model_port" "$model_log" "$plugin" &
    local model=$!
    pids+=("$model")
    for _ in $(seq 1 50); do
        curl -fs "http://127.0.0.1:$model_port/v1/models" > /dev/null 2>&1 && break
        sleep 0.1
    done
    # ENABLE_TOOL_SEARCH=false: this version would otherwise defer MCP tools behind a
    # search tool, and a scripted model calls them by name (docs/claude-code.md).
    local search=(ENABLE_TOOL_SEARCH=false)
    [[ "${2:-}" == keep-tool-search ]] && search=(-u ENABLE_TOOL_SEARCH)
    env "${search[@]}" ANTHROPIC_BASE_URL="http://127.0.0.1:$model_port" ANTHROPIC_API_KEY="sk-ant-scripted" \
        "$claude" -p "Plan cycle-1 of the atelier project with plangate and dispatch it." \
        --allowedTools "mcp__plugin_${plugin}_plangate Skill" --output-format json \
        < /dev/null > "$work/session-$1.json" 2> "$work/session-$1.err" || {
            cat "$work/session-$1.err" "$model_log" >&2; fail "claude -p ($1)"; }
    kill "$model"; wait "$model" 2>/dev/null || true
}
session() { # label; the database is the plugin's (PLANGATE_DATABASE_URL or its data dir)
    headless "$1"
    if grep -q script_error "$model_log"; then grep script_error "$model_log" >&2; fail "the script ($1)"; fi
    grep -q '"event": "project_status"' "$model_log" || { cat "$model_log" >&2; fail "no status at the end ($1)"; }
    for skill in plan-tasks dispatch-waves; do
        grep -q "\"skill_loaded\", \"skill\": \"$skill\"" "$model_log" || fail "skill $skill not loaded ($1)"
    done
    grep -o '"validation_errors", "codes": [^]]*]' "$model_log"
    grep -o '"end_of_list", "next": "[a-z]*"' "$model_log"
    echo "$1: $(grep -c '"event": "turn"' "$model_log") model turns, result: $("$PYTHON" -c \
        'import json,sys; print(json.load(open(sys.argv[1]))["result"])' "$work/session-$1.json")"
}
step "plangate on PATH (the debug build), a shared server for HTTP"
ln -s "$bin_abs" "$work/bin/plangate"
export PATH="$work/bin:$PATH"
port=$(free_port)
token="plugin-$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')"
PLANGATE_API_TOKENS="$token" DATABASE_URL="sqlite://$work/http.db" PLANGATE_BIND="127.0.0.1:$port" \
    RUST_LOG=warn "$bin_abs" serve > "$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 150); do
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$work/server.log" >&2; fail "plangate serve"; }
    curl -fs "http://127.0.0.1:$port/readyz" > /dev/null 2>&1 && break
    sleep 0.2
done
PLANGATE_URL="http://127.0.0.1:$port" PLANGATE_TOKEN="$token" mcp_list
expect_line plangate "✔ Connected"
expect_line plangate-remote "✔ Connected"

step "HTTP: a wrong token is refused, the right one is written nowhere"
PLANGATE_URL="http://127.0.0.1:$port" PLANGATE_TOKEN="wrong-token-0123456789" mcp_list
expect_line plangate-remote "✘ Failed to connect.*401"
if grep -rqs "$token" "$HOME" "$root/integrations"; then fail "the token was written to a file"; fi
# The sessions below use the stdio server only.
"$claude" plugin disable plangate-remote@plangate

step "the remembered failure: mcp list connects, but a headless session still skips the server"
[[ -f "$cache" ]] || fail "mcp list cleared $cache: update docs/claude-code.md"
headless remembered-failure
if grep -q '"scripted": true' "$model_log"; then
    fail "a headless session used the server despite $cache: update docs/claude-code.md"
fi
echo "no plangate tools offered to the model; clearing $cache as docs/claude-code.md says"
rm "$cache"

step "tool search: by default this version defers MCP tools"
headless default-tool-search keep-tool-search
if grep -q '"scripted": true' "$model_log"; then
    echo "MCP tools offered up front: ENABLE_TOOL_SEARCH=false is no longer needed"
else
    grep -o '"ToolSearch"' "$model_log" | head -1
    echo "plangate tools deferred behind ToolSearch; the sessions set ENABLE_TOOL_SEARCH=false"
fi

expected="t-1|done|cycle-1
t-2|failed|cycle-1
t-3|done|cycle-1
t-4|abandoned|cycle-1
t-5|abandoned|cycle-1"
end_state="SELECT t.task_id, t.status, l.team_pk FROM tasks t JOIN task_lists l ON l.id = t.task_list_id
           WHERE l.project_id = 'atelier' ORDER BY t.task_id"
check_state() { # label, rows
    echo "$2"
    [[ "$2" == "$expected" ]] || fail "$1: end state in the database is not the expected one"
}

step "session on SQLite (the plugin's data directory)"
session sqlite
db="$HOME/.claude/plugins/data/plangate-plangate/plangate.db"
[[ -s "$db" ]] || fail "no database at $db"
check_state sqlite "$(sqlite3 "$db" "$end_state")"

step "session on Postgres (PLANGATE_DATABASE_URL)"
pg_db="plangate_test_plugin_$("$PYTHON" -c 'import uuid; print(uuid.uuid4().hex)')"
psql "$PG_ADMIN" -qc "CREATE DATABASE $pg_db"
pg_url="${PG_ADMIN%/*}/$pg_db"
PLANGATE_DATABASE_URL="$pg_url" session postgres
check_state postgres "$(psql "$pg_url" -AtF '|' -c "$end_state")"

step "session over HTTP (plangate-remote, the shared server's SQLite database)"
"$claude" plugin disable plangate@plangate
"$claude" plugin enable plangate-remote@plangate
plugin=plangate-remote PLANGATE_URL="http://127.0.0.1:$port" PLANGATE_TOKEN="$token" session http
check_state http "$(sqlite3 "$work/http.db" "$end_state")"
if grep -rqs "$token" "$HOME" "$root/integrations"; then fail "the session wrote the token to a file"; fi

step "claude code $CLAUDE_PIN: the plugin validated, installed, connected (stdio, HTTP) and ran a cycle on SQLite and Postgres (stdio) and over HTTP"
