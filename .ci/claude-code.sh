# Sourced by .ci/claude.sh and .ci/plugin.sh: the one pin of Claude Code's CLI and its
# install (npm, into target/claude-code). Versions from 2.1.1xx on declare node >=22
# but ship a native binary, so they run on Debian's Node 20 too (npm only warns
# EBADENGINE).
CLAUDE_PIN="2.1.332"
CLAUDE_PREFIX=target/claude-code

# install_claude: installs the pin under $CLAUDE_PREFIX unless it is there already.
install_claude() {
    local claude="$CLAUDE_PREFIX/node_modules/.bin/claude"
    if [[ "$("$claude" --version 2>/dev/null || true)" != "$CLAUDE_PIN (Claude Code)" ]]; then
        npm install --prefix "$CLAUDE_PREFIX" --no-fund --no-audit --no-save --loglevel=error \
            "@anthropic-ai/claude-code@$CLAUDE_PIN"
    fi
}
