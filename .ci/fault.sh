#!/usr/bin/env bash
# Fault-injection run of plangate's durable refine jobs (issue #7), on loopback only.
#
#   bash .ci/fault.sh                                # what .ci/run calls after its test step
#   PLANGATE_FAULT_PG_RESTART=1 bash .ci/fault.sh    # CI: also restart Postgres mid-run
#
# Three `target/debug/plangate` replicas (built by the test step of .ci/run; built
# here if missing) share one fresh Postgres database (`plangate_fault_*`) and 500
# refine jobs of 8 assignments each (two L0 batches), whose fixture L0s
# (`tests/fixtures/l0/l0.sh --record DIR sleep-rand 50 500`) take a random 50–500 ms.
# While they run, driven by progress (share of jobs ended):
#   10 %  SIGKILL replica r1, restart it          (its leases expire; others resume)
#   25 %  SIGTERM replica r2, restart it once it has exited (hand-back, not charged)
#   40 %  restart Postgres (`pg_ctlcluster … restart`) — ONLY with
#         PLANGATE_FAULT_PG_RESTART=1, because other test runs may share the server;
#         /readyz of every replica must turn 503 and back to 200, same processes
#   55 %  SIGKILL replica r1 again, restart it
# Then every invariant is checked and the figures are printed:
#   - every job ended `succeeded`, with exactly one terminal `state` event, which is
#     its last event; event seqs are 1..version without a gap;
#   - no L0 that had finished was run again: no fixture `start` of an assignment
#     after its outcome was first stored, no `running` progress event after its
#     first terminal one, and `refine_l0_runs.starts` = its `running` events ≥ its
#     fixture starts (a kill between the `starts` write and the spawn may leave
#     the fixture one short);
#   - attempts within the limit: `attempt` ≤ `max_attempts`, and `attempt` = claims
#     − uncharged hand-backs (from the state events);
#   - no stale-lease write accepted: every worker write (progress, log) lies inside
#     a lease, i.e. after a `running` state event and before the next state event;
#     no L0 row's `attempt` exceeds its job's; the job log holds `--- next batch ---`
#     exactly once (as line and as `log` event): two writers would repeat it.
# Figures: jobs, faults, L0 runs, re-runs of interrupted L0s, duplicate runs of
# finished L0s (must be 0), stale writes refused (server logs), max attempt, max
# time to recover (fault → every job the faulty replica held is claimed again or
# ended; Postgres restart → every /readyz back to 200), runtime.
#
# Environment:
#   PLANGATE_TEST_PG_URL       admin URL [postgres://postgres@127.0.0.1:5432/postgres]
#   PLANGATE_FAULT_PG_RESTART  1 = restart the Postgres cluster mid-run [off]
#   PLANGATE_FAULT_JOBS        jobs [500]
#   PLANGATE_FAULT_TIMEOUT     hard limit for the whole script, seconds [600]
#   PLANGATE_FAULT_KEEP        1 = keep the database and the temp dir [off]
#   PLANGATE_FAULT_MODE        process (default) or container: the replicas are
#                              containers of PLANGATE_FAULT_IMAGE (.ci/container.sh)
#
# Container mode (issue 12): the replicas are `podman run` containers of an image
# with the test L0 and its profile baked in (docker/l0-agent/Dockerfile; its
# default executor records into /record, mounted from the temp dir), started with
# docker/security.flags on the host network at 127.0.0.1:PORT_BASE+i; SIGKILL is
# `podman kill --signal KILL`, SIGTERM `podman stop` (exit status 0 required). The
# Postgres restart is not offered. Its variables:
#   PLANGATE_FAULT_IMAGE       the image (required in container mode)
#   PLANGATE_FAULT_REPLICAS    replicas [3; container mode: 2]
#   PLANGATE_FAULT_PORT_BASE   first fixed port [18220]
#   PLANGATE_FAULT_DB_PREFIX   database name prefix [plangate_fault; container: container_fault]
# Exit status 0 when every invariant holds. Children are killed on any exit.
set -euo pipefail

TIMEOUT_SECS="${PLANGATE_FAULT_TIMEOUT:-600}"
MODE="${PLANGATE_FAULT_MODE:-process}"
if [[ -z "${PLANGATE_FAULT_INNER:-}" ]]; then
    # The hard overall limit: SIGTERM at the limit (the trap cleans up), SIGKILL 20 s later.
    export PLANGATE_FAULT_INNER=1
    exec timeout --kill-after=20 "$TIMEOUT_SECS" bash "$0" "$@"
fi

cd "$(dirname "$0")/.."
ROOT="$PWD"
T0=$(date +%s.%N)
JOBS="${PLANGATE_FAULT_JOBS:-500}"
ASSIGNMENTS=8
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
PG_BASE="${PG_ADMIN%/*}"
if [[ "$MODE" == container ]]; then
    IMAGE="${PLANGATE_FAULT_IMAGE:?container mode needs PLANGATE_FAULT_IMAGE}"
    DB_PREFIX="${PLANGATE_FAULT_DB_PREFIX:-container_fault}"
    REPLICA_COUNT="${PLANGATE_FAULT_REPLICAS:-2}"
    PORT_BASE="${PLANGATE_FAULT_PORT_BASE:-18220}"
    mapfile -t SECURITY_FLAGS < <(sed 's/#.*//; /^[[:space:]]*$/d' "$ROOT/docker/security.flags")
elif [[ "$MODE" == process ]]; then
    DB_PREFIX="${PLANGATE_FAULT_DB_PREFIX:-plangate_fault}"
    REPLICA_COUNT="${PLANGATE_FAULT_REPLICAS:-3}"
else
    echo "PLANGATE_FAULT_MODE must be process or container, not $MODE" >&2
    exit 2
fi
REPLICAS=()
for i in $(seq 1 "$REPLICA_COUNT"); do REPLICAS+=("r$i"); done
DB="${DB_PREFIX}_$(date +%s)_$$"
DB_URL="$PG_BASE/$DB"
BIN="$ROOT/target/debug/plangate"
LEASE=3
GRACE=2
MAX_ATTEMPTS=3

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
log() { printf '[fault %6ss] %s\n' "$(elapsed "$T0" "$(date +%s.%N)")" "$*"; }
die() { log "FAILED: $*"; exit 1; }
now() { date +%s.%N; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/plangate-fault.XXXXXX")
REC="$WORK/record"
mkdir -p "$REC"
declare -A PID=() ADDR=() WORKER=() GEN=() LOGGER=()
POLLERS=()
DB_CREATED=
OK=

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    for p in "${POLLERS[@]}"; do kill "$p" 2>/dev/null || true; done
    for name in "${!PID[@]}"; do
        if [[ -n "${PID[$name]}" ]]; then replica_signal "$name" KILL 2>/dev/null || true; fi
    done
    for name in "${!PID[@]}"; do
        if [[ -n "${PID[$name]}" ]]; then replica_wait "$name" 2>/dev/null || true; fi
    done
    if [[ -n "$DB_CREATED" && "${PLANGATE_FAULT_KEEP:-}" != 1 ]]; then
        psql "$PG_ADMIN" -qXc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    fi
    if [[ "${PLANGATE_FAULT_KEEP:-}" == 1 ]]; then
        echo "kept: $WORK (database $DB)"
    elif [[ -n "$OK" ]]; then
        rm -rf "$WORK"
    else
        rm -f "$REC"/*.prompt "$REC"/*.pid "$REC"/*.l0pid 2>/dev/null || true
        echo "logs kept in $WORK"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'log "interrupted (signal or the ${TIMEOUT_SECS} s limit)"; exit 124' INT TERM

sql() { psql "$DB_URL" -AtqX -v ON_ERROR_STOP=1 -c "$1"; }

# ---------------------------------------------------------------------------
log "setup: $WORK, database $DB"
if [[ "$MODE" == process && ! -x "$BIN" ]]; then
    log "building target/debug/plangate"
    SQLX_OFFLINE=true cargo build --quiet --bin plangate
fi
if [[ "$MODE" == container ]]; then
    podman image exists "$IMAGE" || die "no image $IMAGE (build it with .ci/container.sh)"
    # The containers' user (UID 10001) records its L0 runs here.
    chmod 755 "$WORK"
    chmod 1777 "$REC"
fi
pg_isready -q -h 127.0.0.1 -p 5432 || die "Postgres is not running on 127.0.0.1:5432"
psql "$PG_ADMIN" -qXc "CREATE DATABASE $DB" >/dev/null
DB_CREATED=1
cat >"$WORK/plangate.toml" <<EOF
default_executor = "fixture"

[executors.fixture]
kind = "command"
argv = ["$ROOT/tests/fixtures/l0/l0.sh", "--record", "$REC", "sleep-rand", "50", "500"]
timeout_secs = 60
EOF
: >"$WORK/faults.tsv"

# The replica primitives, per mode. PID[NAME] is the process id or the container name.
ENV_SETTINGS=(
    DATABASE_URL="$DB_URL" PLANGATE_LEASE_SECS=$LEASE PLANGATE_HEARTBEAT_SECS=1
    PLANGATE_REAPER_INTERVAL_SECS=1 PLANGATE_MAX_ATTEMPTS=$MAX_ATTEMPTS
    PLANGATE_SHUTDOWN_GRACE_SECS=$GRACE PLANGATE_WORKERS=4 PLANGATE_LOG_FORMAT=json RUST_LOG=info
)
replica_launch() { # NAME LOGFILE: start it in the background, set PID[NAME]
    local name=$1 logf=$2
    if [[ "$MODE" == process ]]; then
        env -i PATH="$PATH" HOME="${HOME:-/tmp}" "${ENV_SETTINGS[@]}" \
            PLANGATE_BIND=127.0.0.1:0 PLANGATE_CONFIG="$WORK/plangate.toml" \
            "$BIN" serve >"$logf" 2>&1 &
        PID[$name]=$!
    else
        local idx=${name#r} ctr="plangate-fault-$name-${GEN[$name]}-$$" envs=() kv
        for kv in "${ENV_SETTINGS[@]}"; do envs+=(-e "$kv"); done
        podman run -d --name "$ctr" --network=host "${SECURITY_FLAGS[@]}" \
            -v "$REC:/record" "${envs[@]}" \
            -e PLANGATE_BIND="127.0.0.1:$(( PORT_BASE + idx - 1 ))" \
            "$IMAGE" serve >/dev/null 2>>"$WORK/podman.err"
        PID[$name]=$ctr
        # The container's output as it comes; `podman logs -f` ends when it exits.
        podman logs -f "$ctr" >"$logf" 2>&1 &
        LOGGER[$name]=$!
    fi
}
replica_alive() { # NAME
    if [[ "$MODE" == process ]]; then
        kill -0 "${PID[$1]}" 2>/dev/null
    else
        [[ "$(podman inspect --format '{{.State.Running}}' "${PID[$1]}" 2>/dev/null)" == true ]]
    fi
}
replica_signal() { # NAME KILL|TERM
    if [[ "$MODE" == process ]]; then
        kill -"$2" "${PID[$1]}"
    elif [[ "$2" == KILL ]]; then
        podman kill --signal KILL "${PID[$1]}" >/dev/null
    else
        # podman stop: SIGTERM (the image's STOPSIGNAL), SIGKILL after --stop-timeout.
        podman stop "${PID[$1]}" >/dev/null
    fi
}
replica_wait() { # NAME: wait for the exit, print nothing, return its status
    local status=0
    if [[ "$MODE" == process ]]; then
        wait "${PID[$1]}" || status=$?
    else
        status=$(podman wait "${PID[$1]}" 2>/dev/null | tail -n 1)
        # Let the log follower write the last lines before the container goes.
        for _ in $(seq 1 50); do kill -0 "${LOGGER[$1]}" 2>/dev/null || break; sleep 0.1; done
        kill "${LOGGER[$1]}" 2>/dev/null || true
        podman rm -f "${PID[$1]}" >/dev/null 2>&1 || true
    fi
    return "${status:-1}"
}

# start_replica NAME: a fresh process (127.0.0.1:0) or container (127.0.0.1:PORT);
# waits for its address and /readyz.
start_replica() {
    local name=$1 gen=$(( ${GEN[$1]:-0} + 1 ))
    GEN[$name]=$gen
    local logf="$WORK/$name.$gen.log"
    : >"$logf"
    replica_launch "$name" "$logf"
    local addr= worker=
    for _ in $(seq 1 600); do
        addr=$(grep -m1 -o '"message":"plangate listening","address":"[^"]*"' "$logf" | sed 's/.*"address":"//; s/"$//' || true)
        worker=$(grep -m1 -o '"message":"job workers starting","worker_id":"[^"]*"' "$logf" | sed 's/.*"worker_id":"//; s/"$//' || true)
        [[ -n "$addr" && -n "$worker" ]] && break
        replica_alive "$name" || die "$name exited at start: $(tail -n 5 "$logf")"
        sleep 0.1
    done
    [[ -n "$addr" ]] || die "$name did not start"
    for _ in $(seq 1 300); do
        [[ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://$addr/readyz")" == 200 ]] && break
        sleep 0.1
    done
    ADDR[$name]=$addr
    WORKER[$name]=$worker
    log "$name started (${PID[$name]}, $addr, worker $worker)"
}

ended_jobs() { sql "SELECT count(*) FROM refine_jobs WHERE status IN ('succeeded','failed','cancelled')" 2>/dev/null || echo -1; }
held_by() { sql "SELECT coalesce(string_agg(id::text, ','), '') FROM refine_jobs WHERE status IN ('running','cancelling') AND worker_id = '$1'" 2>/dev/null || true; }

wait_progress() { # wait until at least $1 % of the jobs ended
    local want=$(( JOBS * $1 / 100 )) n
    while :; do
        n=$(ended_jobs)
        (( n >= want )) && return
        sleep 0.3
    done
}

fault_kill() {
    local name=$1 worker=${WORKER[$1]} t held
    t=$(now)
    replica_signal "$name" KILL
    replica_wait "$name" || true
    PID[$name]=
    held=$(held_by "$worker")
    printf 'sigkill\t%s\t%s\t%s\t%s\n' "$name" "$t" "$worker" "$held" >>"$WORK/faults.tsv"
    log "SIGKILL $name: it held $(awk -F, '{print NF}' <<<"$held") running jobs"
    sleep 1
    start_replica "$name"
}

fault_term() {
    local name=$1 worker=${WORKER[$1]} t held t_exit
    # t before the snapshot: a held job that ends before the signal lands still
    # ends after t (read after the signal, a graceful stop's hand-back would hide it).
    t=$(now)
    held=$(held_by "$worker")
    replica_signal "$name" TERM
    local status=0
    replica_wait "$name" || status=$?
    t_exit=$(now)
    PID[$name]=
    (( status == 0 )) || die "$name exited with status $status after SIGTERM"
    printf 'sigterm\t%s\t%s\t%s\t%s\n' "$name" "$t" "$worker" "$held" >>"$WORK/faults.tsv"
    log "SIGTERM $name: exited after $(elapsed "$t" "$t_exit") s, held $(awk -F, '{print NF}' <<<"$held") jobs"
    start_replica "$name"
}

fault_pg_restart() {
    local line ver cluster t t_up
    line=$(pg_lsclusters --no-header | awk '$3 == 5432 {print $1, $2; exit}')
    read -r ver cluster <<<"$line"
    [[ -n "$ver" ]] || die "no Postgres cluster on port 5432 in pg_lsclusters"
    declare -A before=()
    for name in "${REPLICAS[@]}"; do
        before[$name]=${PID[$name]}
        ( while :; do
              printf '%s %s\n' "$(now)" "$(curl -s -o /dev/null -w '%{http_code}' -m 3 "http://${ADDR[$name]}/readyz")"
              sleep 0.05
          done ) >"$WORK/readyz.$name" 2>/dev/null &
        POLLERS+=($!)
    done
    sleep 0.5
    t=$(now)
    log "restarting Postgres $ver/$cluster (stopped for 2 s)"
    # Stop, stay down, start: a bare `restart` can be quicker than the probes' 0.5 s
    # database timeout on an idle machine, and then no replica ever sees it down.
    pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" stop ||
        pg_ctlcluster "$ver" "$cluster" stop
    sleep 2
    pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" start ||
        pg_ctlcluster "$ver" "$cluster" start
    for _ in $(seq 1 300); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.1; done
    t_up=$(now)
    log "Postgres back after $(elapsed "$t" "$t_up") s"
    # Every replica's /readyz back to 200 (same processes).
    local deadline=$(( $(date +%s) + 60 ))
    for name in "${REPLICAS[@]}"; do
        until [[ "$(tail -n 1 "$WORK/readyz.$name" | awk '{print $2}')" == 200 ]]; do
            (( $(date +%s) < deadline )) || die "$name /readyz not 200 again within 60 s"
            sleep 0.1
        done
    done
    sleep 0.3
    for p in "${POLLERS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    POLLERS=()
    for name in "${REPLICAS[@]}"; do
        [[ "${PID[$name]}" == "${before[$name]}" ]] && replica_alive "$name" ||
            die "$name was restarted or died during the Postgres restart"
        awk -v t="$t" '$1 >= t && $2 == 503 {found=1} END {exit !found}' "$WORK/readyz.$name" ||
            die "$name: /readyz never answered 503 during the Postgres restart ($(awk '{print $2}' "$WORK/readyz.$name" | sort | uniq -c | tr '\n' ' '))"
    done
    printf 'pg_restart\tpostgres\t%s\t\t\n' "$t" >>"$WORK/faults.tsv"
    log "/readyz: 503 during the restart, 200 after, on every replica (no process restart)"
}

# ---------------------------------------------------------------------------
for name in "${REPLICAS[@]}"; do start_replica "$name"; done

log "submitting $JOBS jobs × $ASSIGNMENTS assignments"
addrs=()
for name in "${REPLICAS[@]}"; do addrs+=("${ADDR[$name]}"); done
python3 - "$JOBS" "$ASSIGNMENTS" "${addrs[@]}" <<'EOF'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
jobs, n, addrs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
def body(j):
    a = [{"id": f"F{j}-A{i}", "phase_id": "P1", "name": f"assignment {i}", "goal": "g",
          "technical_approach": "t", "dependency_notes": "", "overlap_notes": "",
          "proposed_work_packages": [{"id_suffix": "WP1", "name": "w",
                                      "estimated_files": [f"src/f{j}_{i}.rs"]}]}
         for i in range(1, n + 1)]
    return {"context": {"phase_id": "P1", "assignments": a, "peer_summaries": []},
            "refined_plan": {"phases": [{"id": "P1", "name": "p", "goal": "g"}]},
            "task_text": "fault run", "idempotency_key": f"fault-{j}"}
def submit(j):
    req = urllib.request.Request(f"http://{addrs[j % len(addrs)]}/v1/refine-jobs",
                                 data=json.dumps(body(j)).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 202, r.status
with ThreadPoolExecutor(4) as pool:
    list(pool.map(submit, range(1, jobs + 1)))
EOF
log "submitted"

wait_progress 10; fault_kill r1
wait_progress 25; fault_term r2
if [[ "${PLANGATE_FAULT_PG_RESTART:-}" == 1 && "$MODE" == container ]]; then
    die "PLANGATE_FAULT_PG_RESTART is not offered in container mode"
elif [[ "${PLANGATE_FAULT_PG_RESTART:-}" == 1 ]]; then
    wait_progress 40; fault_pg_restart
else
    log "Postgres restart skipped (set PLANGATE_FAULT_PG_RESTART=1; other runs may share the server)"
fi
wait_progress 55; fault_kill r1

log "waiting for every job to end"
while (( $(ended_jobs) < JOBS )); do sleep 0.5; done
log "all $JOBS jobs ended"
for name in "${REPLICAS[@]}"; do
    replica_signal "$name" TERM
    replica_wait "$name" || die "$name did not stop cleanly"
    PID[$name]=
done

# ---------------------------------------------------------------------------
log "checking the invariants"
sql "SELECT json_agg(json_build_object('id', id, 'status', status, 'attempt', attempt,
       'max_attempts', max_attempts, 'version', version, 'log', log))
     FROM refine_jobs" >"$WORK/jobs.json"
sql "SELECT json_agg(json_build_object('job', job_id, 'seq', seq, 'event', event, 'data', data,
       'at', extract(epoch FROM created_at)) ORDER BY job_id, seq)
     FROM refine_job_events" >"$WORK/events.json"
sql "SELECT json_agg(json_build_object('job', job_id, 'id', assignment_id, 'status', status,
       'attempt', attempt, 'starts', starts, 'has_outcome', outcome IS NOT NULL))
     FROM refine_l0_runs" >"$WORK/l0.json"
cat "$WORK"/r*.log >"$WORK/all-servers.log"

python3 - "$WORK" "$JOBS" "$ASSIGNMENTS" "$T0" <<'EOF'
import collections, glob, json, sys, time
work, jobs_expected, n_assign, t0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
jobs = json.load(open(f"{work}/jobs.json")) or []
events = json.load(open(f"{work}/events.json")) or []
l0s = json.load(open(f"{work}/l0.json")) or []
problems = []
def bad(msg):
    if len(problems) < 30:
        print("  VIOLATION:", msg)
    problems.append(msg)

by_job = collections.defaultdict(list)
for e in events:
    by_job[e["job"]].append(e)
TERMINAL = {"succeeded", "failed", "cancelled"}
NEXT_BATCH = "--- next batch ---"

# Jobs: terminal, succeeded, exactly one terminal state (the last event), seqs 1..version.
if len(jobs) != jobs_expected:
    bad(f"{len(jobs)} jobs in the database, expected {jobs_expected}")
first_outcome = {}      # (job, assignment) -> time its outcome was first stored
running_events = collections.Counter()
max_attempt = 0
resumed = 0
for job in jobs:
    jid, evs = job["id"], by_job[job["id"]]
    max_attempt = max(max_attempt, job["attempt"])
    if job["status"] != "succeeded":
        bad(f"job {jid} ended {job['status']}")
    seqs = [e["seq"] for e in evs]
    if seqs != list(range(1, job["version"] + 1)):
        bad(f"job {jid}: event seqs are not 1..{job['version']}")
    states = [e for e in evs if e["event"] == "state"]
    terminal = [e for e in states if e["data"]["status"] in TERMINAL]
    if len(terminal) != 1:
        bad(f"job {jid}: {len(terminal)} terminal state events")
    elif evs[-1] is not terminal[0]:
        bad(f"job {jid}: events after the terminal state")
    # Attempts: within the limit, and = claims − uncharged hand-backs.
    claims = sum(1 for e in states if e["data"]["status"] == "running")
    handbacks = sum(1 for e in states if e["data"].get("reason") == "handed back at shutdown")
    if claims > 1:
        resumed += 1
    if job["attempt"] > job["max_attempts"]:
        bad(f"job {jid}: attempt {job['attempt']} > max {job['max_attempts']}")
    if job["attempt"] != claims - handbacks:
        bad(f"job {jid}: attempt {job['attempt']} but {claims} claims, {handbacks} hand-backs")
    # Stale writes: every worker write inside a lease (after `running`, before the
    # next state event).
    leased = False
    seen_terminal = set()
    for e in evs:
        if e["event"] == "state":
            leased = e["data"]["status"] in ("running", "cancelling")
            continue
        if not leased:
            bad(f"job {jid}: {e['event']} event seq {e['seq']} written without a lease")
        if e["event"] == "progress":
            a, st = e["data"]["assignment_id"], e["data"]["status"]
            if st == "running":
                running_events[(jid, a)] += 1
                if a in seen_terminal:
                    bad(f"job {jid}: finished L0 {a} started again (seq {e['seq']})")
            else:
                seen_terminal.add(a)
                first_outcome.setdefault((jid, a), e["at"])
    batch_lines = sum(1 for e in evs if e["event"] == "log" and e["data"].get("line") == NEXT_BATCH)
    if job["log"] != [NEXT_BATCH] or batch_lines != 1:
        bad(f"job {jid}: log {job['log']} with {batch_lines} next-batch events")

# L0 rows against the events and the fixture's record of process starts.
job_attempt = {j["id"]: j["attempt"] for j in jobs}
assignment_job = {}
for r in l0s:
    key = (r["job"], r["id"])
    assignment_job[r["id"]] = r["job"]
    if r["status"] != "valid" or not r["has_outcome"]:
        bad(f"L0 {r['id']}: {r['status']}, outcome stored: {r['has_outcome']}")
    if r["attempt"] > job_attempt.get(r["job"], 0):
        bad(f"L0 {r['id']}: attempt {r['attempt']} > its job's {job_attempt.get(r['job'])}")
    if r["starts"] != running_events[key]:
        bad(f"L0 {r['id']}: starts {r['starts']} but {running_events[key]} running events")
if len(l0s) != jobs_expected * n_assign:
    bad(f"{len(l0s)} L0 rows, expected {jobs_expected * n_assign}")
fixture_starts = collections.Counter()
duplicates = 0
for line in open(f"{work}/record/events"):
    kind, aid, ns = line.split()
    if kind != "start":
        continue
    fixture_starts[aid] += 1
    stored = first_outcome.get((assignment_job.get(aid), aid))
    if stored is not None and int(ns) / 1e9 > stored:
        duplicates += 1
        bad(f"L0 {aid} started at {int(ns)/1e9:.3f} after its outcome was stored at {stored:.3f}")
for r in l0s:
    if fixture_starts[r["id"]] > r["starts"]:
        bad(f"L0 {r['id']}: {fixture_starts[r['id']]} processes but starts = {r['starts']}")
    if fixture_starts[r["id"]] < 1:
        bad(f"L0 {r['id']}: never started")

# Recovery: fault → every job the replica held is claimed again (or ended).
recoveries = []
faults = [l.rstrip("\n").split("\t") for l in open(f"{work}/faults.tsv") if l.strip()]
for kind, name, t, worker, held in faults:
    t = float(t)
    if kind == "pg_restart":
        ready = []
        for r in sorted(p.rsplit(".", 1)[1] for p in glob.glob(f"{work}/readyz.*")):
            back = [float(ts) for ts, code in (l.split() for l in open(f"{work}/readyz.{r}"))
                    if float(ts) > t and code == "200"]
            down = [float(ts) for ts, code in (l.split() for l in open(f"{work}/readyz.{r}"))
                    if float(ts) > t and code != "200"]
            if down:
                ready.append(min(ts for ts in back if ts > max(down)) - t)
        took = max(ready) if ready else 0.0
        recoveries.append((kind, name, took, "every /readyz 200 again after its 503s"))
        continue
    worst = 0.0
    held_ids = [h for h in held.split(",") if h]
    for jid in held_ids:
        later = [e["at"] for e in by_job[jid] if e["at"] > t and e["event"] == "state"
                 and e["data"]["status"] in ("running", "succeeded", "failed", "cancelled")]
        if not later:
            bad(f"job {jid} held by {name} never resumed after the {kind}")
            continue
        worst = max(worst, min(later) - t)
    recoveries.append((kind, name, worst, f"{len(held_ids)} held jobs claimed again"))

refused = sum(1 for l in open(f"{work}/all-servers.log")
              if "lease lost" in l or "lease was lost" in l)
total_starts = sum(fixture_starts.values())
print()
print("== fault run figures")
print(f"jobs                          {len(jobs)} ({sum(j['status'] == 'succeeded' for j in jobs)} succeeded)")
print(f"L0 assignments                {len(l0s)}")
print(f"faults                        " + ", ".join(f"{k} {n}" for k, n, *_ in faults))
print(f"  SIGKILLs                    {sum(f[0] == 'sigkill' for f in faults)}")
print(f"  SIGTERMs                    {sum(f[0] == 'sigterm' for f in faults)}")
print(f"  Postgres restarts           {sum(f[0] == 'pg_restart' for f in faults)}")
print(f"L0 process starts             {total_starts}")
print(f"re-runs of interrupted L0s    {total_starts - len(fixture_starts)}")
print(f"duplicate runs of finished L0s {duplicates}")
print(f"jobs resumed (>1 claim)       {resumed}")
print(f"max attempt                   {max_attempt} (limit {jobs[0]['max_attempts'] if jobs else '?'})")
print(f"stale writes refused (log)    {refused}")
for kind, name, took, what in recoveries:
    print(f"recovery {kind:<11} {name:<8} {took:6.2f} s  ({what})")
print(f"max time to recover           {max((r[2] for r in recoveries), default=0.0):.2f} s")
print(f"runtime                       {time.time() - t0:.1f} s")
if problems:
    print(f"\n{len(problems)} invariant violations")
    sys.exit(1)
print("\nall invariants hold")
EOF
OK=1
