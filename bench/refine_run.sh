#!/usr/bin/env bash
# Refine-run figures (issue #5): end-to-end time of
#   (a) one 5-assignment phase job   (POST /v1/refine-jobs), and
#   (b) a 12-phase × 5-assignment run (POST /v1/refine-runs),
# both with the builtin executor, submitted over HTTP and polled with `?wait=` until
# terminal; the ratio run/single; and, from the phase jobs' started_at/finished_at,
# how many phase jobs really ran at once. On SQLite (temp dir) and on Postgres (a
# fresh database, dropped after), with PLANGATE_WORKERS=4 (the default) and 12.
# The same two figures again with L0s that take 1 s each (a `command` executor
# running tests/fixtures/l0/l0.sh sleep 1), where the phases' own work, not the
# database, dominates: that shows the parallel speed-up a real agent would see.
#   bash bench/refine_run.sh            (needs Postgres as for the tests)
#   REPS=9 bash bench/refine_run.sh     (repetitions per figure, median reported)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-7}
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
cargo build --release --quiet --bin plangate
BIN=$PWD/target/release/plangate
tmp=$(mktemp -d)
pid=
db=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$db" ]; then psql "$PG_ADMIN" -qc "drop database if exists $db with (force)" >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The measuring client: stdlib only.
cat > "$tmp/bench.toml" <<TOML
[executors.sleep1]
kind = "command"
argv = ["$PWD/tests/fixtures/l0/l0.sh", "sleep", "1"]
timeout_secs = 60
TOML

cat > "$tmp/measure.py" <<'PY'
import json, statistics, sys, time, urllib.request
from datetime import datetime

base, reps = sys.argv[1], int(sys.argv[2])
executor = sys.argv[3] if len(sys.argv) > 3 else None
PHASES, PER_PHASE = 12, 5

def phase(p):
    return {"id": p, "name": f"Phase {p}", "goal": f"Deliver {p}.", "scope": ["code"],
            "technical_approach": "Small steps.", "relationship_notes": "", "ordering": 1}

def assignment(p, a):
    i = f"{p}-A{a}"
    # A realistic-ish assignment: two WPs, one file shared with the next assignment
    # of the phase (the builtin reviewer and the WP conflict pass have work to do).
    return {"id": i, "phase_id": p, "name": f"Name {i}", "goal": f"Goal {i}.",
            "technical_approach": f"Touch the {p.lower()} module.",
            "proposed_work_packages": [
                {"id_suffix": "WP1", "name": "Core", "estimated_files": [f"src/{p.lower()}/a{a}.rs"]},
                {"id_suffix": "WP2", "name": "Glue", "estimated_files": [f"src/{p.lower()}/glue{a // 2}.rs"]}],
            "dependency_notes": "", "overlap_notes": ""}

phase_ids = [f"P{n}" for n in range(1, PHASES + 1)]
plan = {"task": "Benchmark plan.", "phases": [phase(p) for p in phase_ids],
        "assignments": [assignment(p, a) for p in phase_ids for a in range(1, PER_PHASE + 1)]}
single = {"context": {"phase_id": "P1",
                      "assignments": [a for a in plan["assignments"] if a["phase_id"] == "P1"],
                      "peer_summaries": [{"id": a["id"], "name": a["name"], "goal": a["goal"]}
                                         for a in plan["assignments"] if a["phase_id"] != "P1"]},
          "refined_plan": {"task": plan["task"], "phases": plan["phases"]},
          "task_text": plan["task"]}
run_body = {"plan": plan}
if executor:
    single["executor"] = executor
    run_body["executor"] = executor

def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)

TERMINAL = {"succeeded", "failed", "cancelled"}

def until_terminal(path, doc):
    while doc["status"] not in TERMINAL:
        doc = call("GET", f"{path}/{doc['id']}?wait=30")
    return doc

def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

def max_overlap(jobs):
    events = sorted([(ts(j["started_at"]), 1) for j in jobs] + [(ts(j["finished_at"]), -1) for j in jobs],
                    key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best

def one_single():
    t0 = time.perf_counter()
    job = until_terminal("/v1/refine-jobs", call("POST", "/v1/refine-jobs", single))
    dt = time.perf_counter() - t0
    assert job["status"] == "succeeded", job
    return dt, ts(job["finished_at"]) - ts(job["started_at"])

def one_run():
    t0 = time.perf_counter()
    run = until_terminal("/v1/refine-runs", call("POST", "/v1/refine-runs", run_body))
    dt = time.perf_counter() - t0
    assert run["status"] == "succeeded", run
    assert len(run["result"]["assignments"]) == PHASES * PER_PHASE
    jobs = call("GET", f"/v1/refine-jobs?run_id={run['id']}&page_size=100")["jobs"]
    assert len(jobs) == PHASES and all(j["status"] == "succeeded" for j in jobs)
    busy = sum(ts(j["finished_at"]) - ts(j["started_at"]) for j in jobs)
    return dt, max_overlap(jobs), busy

if not executor:
    one_single(); one_run()  # warm-up (connections, caches)
singles, job_times, runs, overlaps, busies = [], [], [], [], []
for _ in range(reps):
    s, j = one_single(); singles.append(s); job_times.append(j)
    r, o, b = one_run(); runs.append(r); overlaps.append(o); busies.append(b)
ms = lambda x: f"{statistics.median(x) * 1000:.1f} ms"
label = f"executor {executor}" if executor else "builtin executor"
print(f"  [{label}]")
print(f"  (a) single 5-assignment phase job: median {ms(singles)} end to end "
      f"(min {min(singles) * 1000:.1f}); worker time {ms(job_times)}")
print(f"  (b) 12-phase x 5-assignment run:   median {ms(runs)} end to end "
      f"(min {min(runs) * 1000:.1f}); sum of phase-job times {ms(busies)}")
print(f"  ratio run/single: {statistics.median(runs) / statistics.median(singles):.2f} "
      f"(12 phases; serial would be ~12)")
print(f"  phase jobs running at once (from started_at/finished_at): max {max(overlaps)}, "
      f"per run {sorted(overlaps)}")
PY

bench() { # label database-url workers
  local label=$1 url=$2 workers=$3 port
  port=$(free_port)
  PLANGATE_CONFIG="$tmp/bench.toml" DATABASE_URL="$url" PLANGATE_BIND="127.0.0.1:$port" PLANGATE_WORKERS="$workers" \
    PLANGATE_LOG_FORMAT=json RUST_LOG=warn "$BIN" >"$tmp/server.log" 2>&1 &
  pid=$!
  local tries=0
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    sleep 0.05
    tries=$((tries + 1))
    if [ $tries -gt 400 ]; then echo "server did not get ready"; cat "$tmp/server.log"; exit 1; fi
  done
  echo "== $label, PLANGATE_WORKERS=$workers ($REPS repetitions)"
  python3 "$tmp/measure.py" "http://127.0.0.1:$port" "$REPS"
  python3 "$tmp/measure.py" "http://127.0.0.1:$port" "${SLEEP_REPS:-2}" sleep1
  kill -TERM "$pid"; wait "$pid" || true
  pid=
}

for workers in 4 12; do
  rm -f "$tmp"/bench.db*
  bench sqlite "sqlite://$tmp/bench.db" "$workers"
done
for workers in 4 12; do
  db="plangate_bench_run_$$_$workers"
  createdb -h 127.0.0.1 -U postgres "$db"
  bench postgres "${PG_ADMIN%/*}/$db" "$workers"
  psql "$PG_ADMIN" -qc "drop database $db with (force)"
  db=
done
