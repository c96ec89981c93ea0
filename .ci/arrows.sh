#!/usr/bin/env bash
# The layer arrows (docs/architecture.md): fails when a layer names a crate module
# it must not. `domain` imports nothing of the crate; `db` only `domain`; the
# transports (`http`, `mcp`, `ui`) never `db`. Paths are read from `crate::x`
# (also inside `use crate::{x, y}` groups) and `super::super::…` is not used to
# climb out of a layer.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
# Modules of the crate a file under src/$1 names (one per line).
named_modules() {
  local dir="src/$1"
  [ -d "$dir" ] || return 0
  # crate::x and $crate::x
  grep -rhoP '(?<![A-Za-z0-9_])\$?crate::[a-z_]+' "$dir" --include='*.rs' \
    | sed -E 's/.*crate:://' || true
  # use crate::{x, y::z, ...} (possibly over several lines)
  find "$dir" -name '*.rs' -print0 \
    | xargs -0 perl -0777 -ne 'while (/crate::\{([^}]*)\}/g) { for (split /,/, $1) { print "$1\n" if /^\s*([a-z_]+)/ } }' || true
}

check() { # layer, allowed-regex, rule [, denied-regex]
  local layer=$1 allowed=$2 rule=$3 denied=${4:-} bad
  if [ -n "$denied" ]; then
    bad=$(named_modules "$layer" | sort -u | grep -Ex "$denied" || true)
  else
    bad=$(named_modules "$layer" | sort -u | grep -Ev "^($allowed)$" || true)
  fi
  if [ -n "$bad" ]; then
    echo "arrows: src/$layer names crate::{$(echo "$bad" | paste -sd, -)}: $rule" >&2
    for m in $bad; do
      grep -rnP "crate::($m\b|\{[^}]*\b$m\b)" "src/$layer" --include='*.rs' | sed 's/^/  /' >&2 || true
    done
    fail=1
  fi
}

check domain 'domain' 'domain imports nothing of the crate'
check db 'db|domain' 'db imports only domain'
for transport in http mcp ui; do
  check "$transport" '' "$transport never imports db (go through service/)" 'db|open_database'
done
if grep -rn 'super::super::super' src --include='*.rs' >/dev/null; then
  echo "arrows: super::super::super climbs out of a layer; name the module with crate::" >&2
  fail=1
fi
if [ "$fail" = 0 ]; then
  echo "arrows: domain → ∅, db → domain, http/mcp/ui ↛ db: ok"
fi
exit $fail
