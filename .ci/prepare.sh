#!/usr/bin/env bash
# What the later CI stages need, installed while the Rust stages compile (.ci/run
# starts both parts in the background). Each install is the stage script's own
# (`--install-only`), so the stage later finds it done and skips it.
#
#   bash .ci/prepare.sh tools   # the pip venvs and Claude Code's CLI (npm)
#   bash .ci/prepare.sh image   # apt packages, then the container image: podman set-up,
#                               # stand-in base images and the release build in the image
#                               # (CI's release-compile check; .ci/container.sh build)
#
# apt runs in one part only (dpkg has one lock); pip and npm write their own folders.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
timed() { local t=$SECONDS; "$@"; echo "-- prepared: $* in $(( SECONDS - t )) s"; }

case "${1:-}" in
tools)
    # Separate venvs: these run side by side.
    pids=()
    for script in schemathesis client mcp traces ui webhooks; do
        timed bash ".ci/$script.sh" --install-only &
        pids+=($!)
    done
    # shellcheck source=.ci/claude-code.sh
    source .ci/claude-code.sh
    timed install_claude
    for pid in "${pids[@]}"; do wait "$pid"; done
    ;;
image)
    missing=()
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3)
    if (( ${#missing[@]} )); then
        timed as_root apt-get update -q
        DEBIAN_FRONTEND=noninteractive timed as_root apt-get install -y -q "${missing[@]}"
    fi
    timed bash .ci/container.sh build
    ;;
*)
    echo "usage: $0 tools|image" >&2
    exit 2
    ;;
esac
