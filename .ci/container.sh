#!/usr/bin/env bash
# The container stage of CI (issue 12): build plangate's image from the unchanged
# docker/Dockerfile with podman and prove what docker/Dockerfile, docker/k8s/ and
# docker/compose.yaml promise against running containers. Loopback only: every
# container uses the host network (there is no bridge networking on these
# machines) and binds 127.0.0.1 on this stage's fixed ports (18200-18299).
#
#   bash .ci/container.sh            # every step below
#   bash .ci/container.sh build      # setup and build only (.ci/run starts it early, in
#                                    # the background: it is CI's release-compile check)
#   bash .ci/container.sh test       # every step but the build, on the image built above
#
# Steps (each prints what it checked; the stage fails on the first failed check):
#   setup    podman + runc (.ci/container-setup.sh), stand-in base images when no
#            registry is reachable (docker/local-bases.sh, skipped when they exist)
#   build    podman build --format docker -f docker/Dockerfile . (podman's default OCI
#            format has no HEALTHCHECK): image size (goal <= 110 MB), the
#            first build's time (cold when no layer was cached), and a warm rebuild
#            after a change to src/ (the dependency layer reused)
#   l0       the derived image docker/l0-agent/Dockerfile (an L0 program + profile)
#   oneoff   `plangate --help` and `plangate migrate` (Postgres) as one-off containers
#   sqlite   every container runs with docker/security.flags (the Deployment's
#            securityContext): /readyz 200 within 10 s on a named volume; UID/GID
#            10001, no capabilities, no_new_privs, seccomp on; the root filesystem
#            refuses writes (only /tmp and /data take them) and no error is logged;
#            `podman healthcheck run` healthy on a moved port (PLANGATE_BIND);
#            a task list survives `podman stop`, `podman rm` and a new container on
#            the volume; stop time and exit status 0
#   drain    `podman stop` while a refine job's slow L0s (12 s) run: exit 0 within
#            the grace, no L0 process left on the host, the job handed back
#            uncharged (attempt 1 after the next container finishes it)
#   replicas two containers on the machine's Postgres share 100 refine jobs; one is
#            SIGKILLed (podman kill) and restarted, one stopped and restarted: the
#            invariants of .ci/fault.sh (its container mode) hold
# Figures are printed at the end.
#
# Environment:
#   PLANGATE_CONTAINER_TIMEOUT     hard limit for the whole stage, seconds [3600]
#   PLANGATE_CONTAINER_SKIP_WARM   1 = no warm rebuild (saves a release compile) [off]
#   PLANGATE_CONTAINER_IMAGE       test this already built image instead of building
#                                  (while working on the checks; CI builds) [unset]
#   PLANGATE_TEST_PG_URL           admin URL [postgres://postgres@127.0.0.1:5432/postgres]
set -euo pipefail

TIMEOUT_SECS="${PLANGATE_CONTAINER_TIMEOUT:-3600}"
if [[ -z "${PLANGATE_CONTAINER_INNER:-}" ]]; then
    export PLANGATE_CONTAINER_INNER=1
    exec timeout --kill-after=30 "$TIMEOUT_SECS" bash "$0" "$@"
fi

cd "$(dirname "$0")/.."
ROOT="$PWD"
PHASE="${1:-all}"
case "$PHASE" in all|build|test) ;; *) echo "usage: $0 [all|build|test]" >&2; exit 2 ;; esac
T0=$(date +%s.%N)
IMAGE=localhost/plangate:ci
L0_IMAGE=localhost/plangate-l0:ci
PORT_SQLITE=18201
PORT_DRAIN=18202
PORT_FAULT_BASE=18220
PG_ADMIN="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
PG_BASE="${PG_ADMIN%/*}"
TAG="plangate-ci-$$"          # label and name prefix of everything this run creates
MIGRATE_DB="container_ci_migrate_$$"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
log() { printf '[container %6ss] %s\n' "$(elapsed "$T0" "$(now)")" "$*"; }
die() { log "FAILED: $*"; exit 1; }
ok() { log "ok: $*"; }
declare -A FIG=()
figure() { FIG[$1]=$2; log "figure: $1 = $2"; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/plangate-container.XXXXXX")
chmod 755 "$WORK"
OK=
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    local ids
    ids=$(podman ps -aq --filter "label=$TAG" 2>/dev/null || true)
    if [[ -n "$ids" ]]; then
        if [[ -z "$OK" ]]; then
            for id in $ids; do
                echo "--- logs of $(podman inspect --format '{{.Name}}' "$id")"
                podman logs --tail 20 "$id" 2>&1 || true
            done
        fi
        # shellcheck disable=SC2086
        podman rm -f -t 0 $ids >/dev/null 2>&1 || true
    fi
    for vol in $(podman volume ls -q --filter "label=$TAG" 2>/dev/null || true); do
        podman volume rm -f "$vol" >/dev/null 2>&1 || true
    done
    psql "$PG_ADMIN" -qXc "DROP DATABASE IF EXISTS $MIGRATE_DB WITH (FORCE)" >/dev/null 2>&1 || true
    if [[ -n "$OK" ]]; then rm -rf "$WORK"; else echo "logs kept in $WORK"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'log "interrupted (signal or the ${TIMEOUT_SECS} s limit)"; exit 124' INT TERM

# The Deployment's security settings as run flags (tests/api/deploy.rs checks they
# agree with docker/k8s/deployment.yaml); every test container gets all of them.
mapfile -t SECURITY_FLAGS < <(sed 's/#.*//; /^[[:space:]]*$/d' docker/security.flags)
(( ${#SECURITY_FLAGS[@]} > 0 )) || die "docker/security.flags lists no flag"
run_flags=(--network=host --label "$TAG" "${SECURITY_FLAGS[@]}")

# podman without systemd logs that it cannot schedule the periodic healthchecks on
# every start of a container that has one: drop that noise, keep everything else.
prun() { podman run "$@" 2> >(grep -v 'systemd connection' >&2); }

http_code() { curl -s -o /dev/null -w '%{http_code}' -m 3 "$1" || true; }
# wait_ready PORT LIMIT_SECS: until /readyz answers 200; prints the seconds taken.
wait_ready() {
    local port=$1 limit=$2 t=$(now)
    while [[ "$(http_code "http://127.0.0.1:$port/readyz")" != 200 ]]; do
        if awk -v a="$t" -v b="$(now)" -v l="$limit" 'BEGIN {exit !(b - a > l)}'; then
            return 1
        fi
        sleep 0.05
    done
    elapsed "$t" "$(now)"
}
exit_code() { podman inspect --format '{{.State.ExitCode}}' "$1"; }

# ---------------------------------------------------------------------------
log "setup: podman, base images"
bash .ci/container-setup.sh
bash docker/local-bases.sh
podman image ls --format '{{.Repository}}:{{.Tag}}' | grep -q 'debian:bookworm-slim' ||
    die "no debian:bookworm-slim base image"

# ---------------------------------------------------------------------------
if [[ -n "${PLANGATE_CONTAINER_IMAGE:-}" ]]; then
    IMAGE=$PLANGATE_CONTAINER_IMAGE
    log "build: skipped, testing $IMAGE (PLANGATE_CONTAINER_IMAGE)"
elif [[ "$PHASE" == test ]]; then
    podman image exists "$IMAGE" || die "no $IMAGE: run '.ci/container.sh build' first"
    log "build: skipped, testing $IMAGE (built by '.ci/container.sh build')"
else
log "build: podman build --format docker -f docker/Dockerfile -t $IMAGE ."
t=$(now)
podman build --format docker --network=host -f docker/Dockerfile -t "$IMAGE" . >"$WORK/build.log" 2>&1 ||
    { tail -n 40 "$WORK/build.log"; die "podman build failed"; }
build_s=$(elapsed "$t" "$(now)")
# A cold build compiles every dependency; a cached one reuses that layer.
if grep -q 'Compiling tokio ' "$WORK/build.log"; then
    figure "build (cold: every dependency compiled)" "$build_s s"
else
    figure "build (dependency layer cached)" "$build_s s"
fi
fi
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
base=$(podman image inspect --format '{{.Size}}' docker.io/library/debian:bookworm-slim)
binary=$(prun --rm --network=host --entrypoint /usr/bin/stat "$IMAGE" -c %s /usr/local/bin/plangate)
mb() { awk -v b="$1" 'BEGIN {printf "%.1f MB", b / 1e6}'; }
figure "image size" "$(mb "$size") (base $(mb "$base"), binary $(mb "$binary"), goal <= 110 MB: $(
    awk -v b="$size" 'BEGIN {print (b <= 110e6 ? "met" : "NOT met")}'))"
# No HTTP client in the runtime image: the HEALTHCHECK is the binary.
for tool in curl wget; do
    if prun --rm --network=host --entrypoint /bin/sh "$IMAGE" -c "command -v $tool" >/dev/null; then
        die "the runtime image ships $tool"
    fi
done
[[ "$(podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$IMAGE")" == '["CMD","/usr/local/bin/plangate","health"]' ]] ||
    die "the image's HEALTHCHECK is not plangate health: $(podman image inspect --format '{{json .Config.Healthcheck}}' "$IMAGE")"
ok "image built; no curl or wget; HEALTHCHECK runs plangate health"

if [[ "${PLANGATE_CONTAINER_SKIP_WARM:-}" != 1 && -z "${PLANGATE_CONTAINER_IMAGE:-}" && "$PHASE" != test ]]; then
    # Warm: a copy of the build context with one line of src/ changed, so every
    # layer up to the dependency build is reused and plangate alone recompiles.
    mkdir -p "$WORK/context"
    cp -r Cargo.toml Cargo.lock src migrations templates "$WORK/context/"
    echo "// warm rebuild check $(date +%s)" >>"$WORK/context/src/main.rs"
    t=$(now)
    podman build --format docker --network=host -f docker/Dockerfile -t "$IMAGE-warm" "$WORK/context" >"$WORK/build-warm.log" 2>&1 ||
        { tail -n 40 "$WORK/build-warm.log"; die "warm podman build failed"; }
    figure "build (warm: src/ changed, dependencies cached)" "$(elapsed "$t" "$(now)") s"
    grep -q 'Compiling tokio ' "$WORK/build-warm.log" && die "the warm build recompiled the dependencies"
    podman rmi "$IMAGE-warm" >/dev/null
    rm -rf "$WORK/context"
fi

if [[ "$PHASE" == build ]]; then
    OK=1
    echo "== container build figures"
    for key in "${!FIG[@]}"; do printf '%-55s %s\n' "$key" "${FIG[$key]}"; done | sort
    exit 0
fi

# ---------------------------------------------------------------------------
log "l0: the derived image docker/l0-agent/Dockerfile"
t=$(now)
podman build --format docker --network=host -f docker/l0-agent/Dockerfile --build-arg "PLANGATE_IMAGE=$IMAGE" \
    -t "$L0_IMAGE" . >"$WORK/build-l0.log" 2>&1 ||
    { tail -n 40 "$WORK/build-l0.log"; die "podman build of the derived image failed"; }
figure "derived L0 image build" "$(elapsed "$t" "$(now)") s, +$(mb $(( $(podman image inspect --format '{{.Size}}' "$L0_IMAGE") - size )))"
[[ "$(podman image inspect --format '{{.Config.User}}' "$L0_IMAGE")" == 10001:10001 ]] ||
    die "the derived image does not run as 10001:10001"

# ---------------------------------------------------------------------------
log "oneoff: --help and migrate as one-off containers"
prun --rm "${run_flags[@]}" "$IMAGE" --help >"$WORK/help.txt" || die "plangate --help failed"
grep -q '^Usage: plangate' "$WORK/help.txt" && grep -q 'health' "$WORK/help.txt" ||
    die "plangate --help: $(head -n 3 "$WORK/help.txt")"
psql "$PG_ADMIN" -qXc "CREATE DATABASE $MIGRATE_DB" >/dev/null
prun --rm "${run_flags[@]}" -e DATABASE_URL="$PG_BASE/$MIGRATE_DB" "$IMAGE" migrate \
    >"$WORK/migrate.txt" 2>&1 || { cat "$WORK/migrate.txt"; die "plangate migrate failed"; }
applied=$(psql "$PG_BASE/$MIGRATE_DB" -AtqXc "SELECT count(*) FROM _sqlx_migrations WHERE success")
shipped=$(find migrations/postgres -name "*.sql" | wc -l)
[[ "$applied" == "$shipped" ]] || die "migrate applied $applied of $shipped migrations"
# A second run (another replica starting) is a no-op.
prun --rm "${run_flags[@]}" -e DATABASE_URL="$PG_BASE/$MIGRATE_DB" "$IMAGE" migrate >/dev/null 2>&1 ||
    die "a second plangate migrate failed"
ok "--help prints the usage; migrate applied $applied/$shipped migrations, twice"

# ---------------------------------------------------------------------------
log "sqlite: a server on a named volume, started as docker/k8s/deployment.yaml runs it"
podman volume create --label "$TAG" "$TAG-data" >/dev/null
start_sqlite() { # NAME: prints seconds to /readyz 200
    local t
    t=$(now)
    # stderr: without systemd podman logs that it cannot schedule the checks.
    podman run -d --name "$1" "${run_flags[@]}" -v "$TAG-data:/data" \
        -e PLANGATE_BIND="127.0.0.1:$PORT_SQLITE" "$IMAGE" >/dev/null 2>>"$WORK/podman.err"
    wait_ready "$PORT_SQLITE" 10 >/dev/null || die "$1: /readyz not 200 within 10 s"
    elapsed "$t" "$(now)"
}
ready_s=$(start_sqlite "$TAG-a")
figure "start to ready (podman run to /readyz 200, SQLite)" "$ready_s s"

# The process tree, identity and restrictions, from /proc inside the container.
podman exec "$TAG-a" /bin/sh -c '
    for d in /proc/[0-9]*; do
        printf "%s %s %s\n" "${d#/proc/}" "$(cat "$d/comm")" "$(grep -E "^(PPid|Uid|Gid|CapEff|NoNewPrivs|Seccomp|State):" "$d/status" | tr -s "\t " " " | tr "\n" " ")"
    done 2>/dev/null' >"$WORK/procs.txt"
grep -E '^1 tini ' "$WORK/procs.txt" >/dev/null || die "PID 1 is not tini: $(cat "$WORK/procs.txt")"
server=$(grep -E '^[0-9]+ plangate .*PPid: 1 ' "$WORK/procs.txt") || die "no plangate child of tini: $(cat "$WORK/procs.txt")"
for want in 'Uid: 10001 10001 10001 10001' 'Gid: 10001 10001 10001 10001' \
            'CapEff: 0000000000000000' 'NoNewPrivs: 1' 'Seccomp: 2'; do
    grep -E '^(1 tini|[0-9]+ plangate) ' "$WORK/procs.txt" | grep -qv "$want" &&
        die "tini or plangate lacks '$want': $(cat "$WORK/procs.txt")"
done
if grep -q ' State: Z' "$WORK/procs.txt"; then die "zombie processes: $(cat "$WORK/procs.txt")"; fi
ok "tini is PID 1, plangate its child ($(awk '{print $1}' <<<"$server")); both UID/GID 10001, CapEff 0, no_new_privs, seccomp filter"

[[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$TAG-a")" == true ]] || die "root filesystem not read-only"
for path in /usr/local/bin/plangate-was-here /etc/plangate-was-here /var/tmp/x /run/x /x; do
    if out=$(podman exec "$TAG-a" /bin/sh -c "touch $path" 2>&1); then
        die "$path was writable"
    fi
    grep -q 'Read-only file system' <<<"$out" || die "writing $path failed otherwise: $out"
done
podman exec "$TAG-a" /bin/sh -c 'touch /tmp/x && rm /tmp/x && test -w /data/plangate.db' ||
    die "/tmp or the database on /data is not writable"
ok "root filesystem read-only (/, /usr, /etc, /var/tmp, /run refuse writes); /tmp and /data/plangate.db writable"

# The HEALTHCHECK, on a port that is not the image's 8080: it follows PLANGATE_BIND.
health=$(podman healthcheck run "$TAG-a" 2>&1) || die "podman healthcheck run: $health"
status=$(podman inspect --format '{{.State.Health.Status}}' "$TAG-a" 2>/dev/null ||
         podman inspect --format '{{.State.Healthcheck.Status}}' "$TAG-a")
[[ "$status" == healthy ]] || die "health status '$status' after a passing check ($health)"
podman exec "$TAG-a" /usr/local/bin/plangate health --bind 127.0.0.1:18299 >/dev/null 2>&1 &&
    die "plangate health passed against a port nothing listens on"
ok "podman healthcheck run: healthy on 127.0.0.1:$PORT_SQLITE; a closed port is unhealthy"

base_url="http://127.0.0.1:$PORT_SQLITE"
code=$(curl -s -m 10 -o "$WORK/list.json" -w '%{http_code}' -H 'content-type: application/json' \
    -X POST "$base_url/v1/task-lists" -d '{
  "project_id": "container-ci", "created_by": "ci",
  "tasks": [
    {"task_id": "a", "assigned_persona": "p1", "parallel_group": 1, "depends_on": [],
     "reads": [], "writes": ["a.py"], "description": "do a"},
    {"task_id": "b", "assigned_persona": "p2", "parallel_group": 2, "depends_on": ["a"],
     "reads": ["a.py"], "writes": ["b.py"], "description": "do b"}]}') || true
[[ "$code" == 201 ]] || die "creating a task list: $code $(cat "$WORK/list.json")"
list_id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <"$WORK/list.json")
before=$(curl -sf -m 5 "$base_url/v1/task-lists/$list_id") || die "reading the task list failed"

t=$(now)
podman stop "$TAG-a" >/dev/null
stop_s=$(elapsed "$t" "$(now)")
[[ "$(exit_code "$TAG-a")" == 0 ]] || die "exit status $(exit_code "$TAG-a") after podman stop"
figure "stop time (podman stop, idle server)" "$stop_s s"
podman logs "$TAG-a" >"$WORK/sqlite-a.log" 2>&1
if grep -E '"level":"(ERROR|error)"' "$WORK/sqlite-a.log"; then die "errors logged (above)"; fi
podman rm "$TAG-a" >/dev/null

ready2_s=$(start_sqlite "$TAG-b")
after=$(curl -sf -m 5 "http://127.0.0.1:$PORT_SQLITE/v1/task-lists/$list_id") ||
    die "the task list is gone after podman rm and a new container"
python3 - "$before" "$after" <<'PY' || die "the task list changed across containers"
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
assert a == b, (a, b)
assert [t["task_id"] for t in b["tasks"]] == ["a", "b"], b
PY
podman stop "$TAG-b" >/dev/null
[[ "$(exit_code "$TAG-b")" == 0 ]] || die "exit status $(exit_code "$TAG-b") after podman stop"
podman rm "$TAG-b" >/dev/null
ok "task list $list_id identical after podman rm and a new container on the volume (ready in $ready2_s s)"

# ---------------------------------------------------------------------------
log "drain: podman stop while a refine job's slow L0s run (derived image)"
REC="$WORK/record"
mkdir -p "$REC"
chmod 1777 "$REC"
podman volume create --label "$TAG" "$TAG-drain" >/dev/null
start_drain() {
    podman run -d --name "$1" "${run_flags[@]}" -v "$TAG-drain:/data" -v "$REC:/record" \
        -e PLANGATE_BIND="127.0.0.1:$PORT_DRAIN" -e PLANGATE_SHUTDOWN_GRACE_SECS=3 \
        "$L0_IMAGE" >/dev/null 2>>"$WORK/podman.err"
    wait_ready "$PORT_DRAIN" 10 >/dev/null || die "$1: /readyz not 200 within 10 s"
}
start_drain "$TAG-c"
drain_url="http://127.0.0.1:$PORT_DRAIN"
job=$(python3 - "$drain_url" <<'PY'
import json, sys, urllib.request
a = [{"id": f"D-A{i}", "phase_id": "P1", "name": f"assignment {i}", "goal": "g",
      "technical_approach": "t", "dependency_notes": "", "overlap_notes": "",
      "proposed_work_packages": [{"id_suffix": "WP1", "name": "w", "estimated_files": [f"src/d{i}.rs"]}]}
     for i in (1, 2)]
body = {"context": {"phase_id": "P1", "assignments": a, "peer_summaries": []},
        "refined_plan": {"phases": [{"id": "P1", "name": "p", "goal": "g"}]},
        "task_text": "drain check", "executor": "slow"}
req = urllib.request.Request(f"{sys.argv[1]}/v1/refine-jobs", data=json.dumps(body).encode(),
                             headers={"content-type": "application/json"})
with urllib.request.urlopen(req, timeout=10) as r:
    assert r.status == 202, r.status
    print(json.load(r)["id"])
PY
) || die "submitting the refine job failed"
l0_starts() { local n; n=$(grep -c '^start ' "$REC/events" 2>/dev/null) || true; echo "${n:-0}"; }
for _ in $(seq 1 200); do
    (( $(l0_starts) >= 2 )) && break
    sleep 0.05
done
(( $(l0_starts) >= 2 )) || die "the two L0s did not start"
sleep 0.5   # their child `sleep 12` too
# Host PIDs of the L0 processes (the fixture and its child sleep).
podman top "$TAG-c" hpid args >"$WORK/top.txt"
l0_pids=$(awk '/plangate-l0|sleep 12/ {print $1}' "$WORK/top.txt")
(( $(wc -w <<<"$l0_pids") >= 4 )) || die "expected 2 L0s and their sleeps: $(cat "$WORK/top.txt")"
t=$(now)
podman stop "$TAG-c" >/dev/null
drain_stop_s=$(elapsed "$t" "$(now)")
code=$(exit_code "$TAG-c")
[[ "$code" == 0 ]] || die "exit status $code after podman stop (137: SIGKILLed after --stop-timeout)"
figure "stop time (podman stop, 2 L0s running, grace 3 s)" "$drain_stop_s s"
for pid in $l0_pids; do
    if [[ -e /proc/$pid ]] && grep -qa 'plangate-l0\|sleep' "/proc/$pid/cmdline" 2>/dev/null; then
        die "L0 process $pid outlived the container"
    fi
done
podman logs "$TAG-c" >"$WORK/drain-c.log" 2>&1
grep -q 'job handed back at shutdown' "$WORK/drain-c.log" || die "no hand-back logged: $(tail -n 5 "$WORK/drain-c.log")"
podman rm "$TAG-c" >/dev/null
ok "exit 0 after $drain_stop_s s; $(wc -w <<<"$l0_pids") L0 processes gone from the host; hand-back logged"

start_drain "$TAG-d"
python3 - "$drain_url" "$job" <<'PY' || die "the handed-back job did not finish as expected"
import json, sys, time, urllib.request
base, job = sys.argv[1], sys.argv[2]
deadline = time.time() + 60
while True:
    with urllib.request.urlopen(f"{base}/v1/refine-jobs/{job}?wait=20", timeout=30) as r:
        j = json.load(r)
    if j["status"] in ("succeeded", "failed", "cancelled") or time.time() > deadline:
        break
assert j["status"] == "succeeded", j
# The hand-back did not charge the attempt: two claims, one of them handed back.
assert j["attempt"] == 1, f"attempt {j['attempt']} (the hand-back was charged)"
claims = handbacks = 0
with urllib.request.urlopen(f"{base}/v1/refine-jobs/{job}/events", timeout=10) as r:
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data:"):
            continue
        data = json.loads(line[5:])
        status = data.get("status")
        if status == "running" and "assignment_id" not in data:
            claims += 1
        if data.get("reason") == "handed back at shutdown":
            handbacks += 1
        if status == "succeeded" and "assignment_id" not in data:
            break
assert (claims, handbacks) == (2, 1), f"{claims} claims, {handbacks} hand-backs"
print(f"job {job}: succeeded, attempt 1, 2 claims, 1 hand-back")
PY
podman stop "$TAG-d" >/dev/null
podman rm "$TAG-d" >/dev/null
ok "after the next start the job succeeded with attempt 1 (the stop was not charged)"

# ---------------------------------------------------------------------------
log "replicas: two containers on Postgres, 100 refine jobs, SIGKILL + stop (.ci/fault.sh container mode)"
t=$(now)
PLANGATE_FAULT_MODE=container PLANGATE_FAULT_IMAGE="$L0_IMAGE" PLANGATE_FAULT_REPLICAS=2 \
    PLANGATE_FAULT_JOBS=100 PLANGATE_FAULT_PORT_BASE=$PORT_FAULT_BASE PLANGATE_FAULT_TIMEOUT=600 \
    bash .ci/fault.sh 2>&1 | tee "$WORK/fault.log"
(( PIPESTATUS[0] == 0 )) || die "the replicated container run failed"
figure "replicated run (2 containers, 100 jobs)" "$(elapsed "$t" "$(now)") s"

# docker/compose.yaml is linted (.ci/lint-deploy, tests/api/deploy.rs), not run here:
# Debian's podman-compose 1.0.3 does not run it as Docker Compose does (see
# docker/README.md, "Compose").

OK=1
echo
echo "== container stage figures"
for key in "${!FIG[@]}"; do printf '%-55s %s\n' "$key" "${FIG[$key]}"; done | sort
echo "container stage: $(elapsed "$T0" "$(now)") s"
