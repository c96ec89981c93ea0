#!/usr/bin/env bash
# What the Claude Code plugin saves, in tokens: its always-on context (tool definitions,
# skill frontmatter) and invoked skill bodies, against the prompt sections of the public
# workflows it replaces (bench/fixtures/, with their sources and licences) and the model
# output no longer written. Prints the Markdown table of docs/claude-code.md.
#
#   bash bench/tokens.sh       # needs node/npm and a debug build (PLANGATE_BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${PLANGATE_BIN:-target/debug/plangate}"
TOKENIZER=target/bench-tokenizer   # npm @anthropic-ai/tokenizer, pinned
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[[ -d "$TOKENIZER/node_modules/@anthropic-ai/tokenizer" ]] ||
    npm install --prefix "$TOKENIZER" --no-fund --no-audit --no-save --loglevel=error \
        @anthropic-ai/tokenizer@0.0.4
[[ -x "$BIN" ]] || cargo build --locked --bin plangate

"$BIN" plan examples/loop_plan_request.json > "$work/plan.md"
# tools/list exactly as an agent gets it, from `plangate mcp` on a throwaway database.
printf '%s\n' \
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
    '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' |
    DATABASE_URL="sqlite://$work/bench.db" RUST_LOG=error "$BIN" mcp 2> /dev/null |
    grep '"id":2' > "$work/tools.json"

node bench/tokens.js "$(realpath "$TOKENIZER")" "$work/plan.md" "$work/tools.json" > "$work/rows.json"
python3 - "$work/rows.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
total = lambda g: sum(r["tokens"] for r in rows if r["group"] == g)
print("| | tokens |\n| --- | ---: |")
group = None
for r in rows:
    if r["group"] != group:
        group = r["group"]
        print(f"| **{group}** | **{total(group):,}** |")
    print(f"| {r['what']} | {r['tokens']:,} |")
PY
