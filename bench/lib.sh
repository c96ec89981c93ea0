# Sourced by the bench scripts (from the repository root, after `pids=()`).

# OHA: the load generator oha (crates.io), pinned and installed once under
# target/bench-tools (unless the script sets NO_OHA=1: it drives no load with it).
OHA_VERSION=1.16.0
OHA=$PWD/target/bench-tools/bin/oha
if [ -z "${NO_OHA:-}" ] && ! "$OHA" --version 2>/dev/null | grep -q "$OHA_VERSION"; then
  echo "installing oha $OHA_VERSION (once)"
  cargo install --locked --quiet oha --version "$OHA_VERSION" --root target/bench-tools
fi

# Starts a plangate server on a free port and waits until it is ready; sets PORT and
# PID and adds PID to `pids`.
start_server() { # bin database-url log [VAR=value...]
  local bin=$1 url=$2 log=$3
  shift 3
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  env DATABASE_URL="$url" PLANGATE_BIND="127.0.0.1:$PORT" PLANGATE_LOG_FORMAT=json \
    RUST_LOG=warn "$@" "$bin" >"$log" 2>&1 &
  PID=$!
  pids+=("$PID")
  until curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do
    kill -0 "$PID" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.05
  done
}

# Writes the body of a refine job with 4 assignments of the builtin executor.
write_job_body() { # file
  python3 - "$1" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from refine_load import context
json.dump(context(4), open(sys.argv[1], "w"))
PY
}

# Jobs finished so far (any status), from the server's /metrics.
finished() { # port
  curl -fs "http://127.0.0.1:$1/metrics" |
    awk '/^refine_jobs_finished_total/ { n += $NF } END { print n + 0 }'
}
