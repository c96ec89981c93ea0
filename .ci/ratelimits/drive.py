#!/usr/bin/env python3
"""The rate-limit CI stage's driver (stdlib only): starts the scripted provider
(provider.py) and plangate replicas, offers L0 calls, and checks the figures.

  drive.py SCENARIO BIN OUTDIR [--db URL] [--replicas N] [--secs S] [--check]

Scenarios:
  limited  [rate_limits.claude] requests_per_minute = RPM, shares team-a 3 : team-b 1;
           the provider enforces RPM too. Two projects submit jobs of 6 L0s all the
           time, at twice the limit. Then a runtime change (PUT rpm = RPM/2) must be
           followed within 2 s.
  headers  no [rate_limits]: the provider's headers alone are the limit.
  spend    the provider answers every call with a spend-limit 429 (no retry-after).
Prints one JSON line of figures; with --check, exits 1 when one misses its goal.
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "ratelimits-ci-token-0123456789"
# L0s per job: 20 batches of 6.
JOB_L0S = 120


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def call(port, method, path, body=None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    headers = {"authorization": f"Bearer {TOKEN}"}
    if data is not None:
        headers["content-type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    return r.status, (json.loads(raw) if raw else None)


def job_body(project, n=6, phase="P1"):
    assignments = [{
        "id": f"{phase}-A{i}", "phase_id": phase, "name": f"Assignment {i}",
        "goal": "Refine one part of the plan.",
        "technical_approach": f"Touch src/mod{i}.rs.", "dependency_notes": "", "overlap_notes": "",
        "proposed_work_packages": [{"id_suffix": "WP1", "name": "code", "estimated_files": [f"src/mod{i}.rs"]}],
    } for i in range(1, n + 1)]
    return {
        "context": {"phase_id": phase, "assignments": assignments, "peer_summaries": []},
        "refined_plan": {"phases": [{"id": phase, "name": "Phase", "goal": "g"}]},
        "task_text": "Rate-limit CI task.",
        "project_id": project,
    }


def windows(times, span=60.0):
    """The most requests in any `span`-second window."""
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] < t - span + 1e-9:
            j += 1
        best = max(best, i - j + 1)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["limited", "headers", "spend"])
    p.add_argument("bin")
    p.add_argument("out")
    p.add_argument("--db", default=None)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--secs", type=float, default=90)
    p.add_argument("--rpm", type=int, default=600)
    p.add_argument("--no-config", action="store_true", help="a build that knows no [rate_limits]")
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    procs = []

    def stop_all():
        for pr in procs:
            if pr.poll() is None:
                pr.send_signal(signal.SIGTERM)
        for pr in procs:
            try:
                pr.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pr.kill()

    try:
        slots = a.replicas * a.workers * 6
        rate = a.rpm / 60.0
        # Twice the limit: slots / latency = 2 × rate.
        latency = slots / (2 * rate)
        pport = free_port()
        pargs = [sys.executable, os.path.join(HERE, "provider.py"), str(pport), os.path.join(a.out, "provider.log"),
                 "--rpm", str(a.rpm), "--latency", f"{latency:.3f}"]
        if a.scenario == "spend":
            pargs.append("--spend-limit")
        procs.append(subprocess.Popen(pargs))
        config = os.path.join(a.out, "plangate.toml")
        with open(config, "w") as f:
            f.write(f"""workers = {a.workers}
l0_concurrency = 6
default_executor = "claude"
lease_secs = 15
heartbeat_secs = 3
[executors.claude]
kind = "anthropic"
base_url = "http://127.0.0.1:{pport}"
model = "claude-scripted"
timeout_secs = 120
""")
            if a.scenario == "limited" and not a.no_config:
                f.write(f"""[rate_limits.claude]
requests_per_minute = {a.rpm}
max_wait_secs = 600
[rate_limits.claude.shares]
"team-a" = 3
"team-b" = 1
""")
        db = a.db or f"sqlite://{os.path.join(a.out, 'plangate.db')}"
        ports = []
        for i in range(a.replicas):
            port = free_port()
            env = dict(os.environ, DATABASE_URL=db, PLANGATE_BIND=f"127.0.0.1:{port}", PLANGATE_CONFIG=config,
                       PLANGATE_API_TOKENS=TOKEN, RUST_LOG="warn", PLANGATE_LOG_FORMAT="json",
                       PLANGATE_TASK_DIR=os.path.join(a.out, f"tasks-{i}"))
            log = open(os.path.join(a.out, f"replica-{i}.log"), "w")
            procs.append(subprocess.Popen([a.bin, "serve"], env=env, stdout=log, stderr=log))
            ports.append(port)
            for _ in range(600):
                try:
                    if call(port, "GET", "/readyz", timeout=2)[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            else:
                raise SystemExit(f"replica {i} did not become ready; see {a.out}/replica-{i}.log")

        projects = ["team-a", "team-b"] if a.scenario == "limited" else ["team-a"]
        jobs = []  # (job_id, project)
        lock = threading.Lock()
        stop = threading.Event()

        # Long jobs (many batches of 6 L0s), each project holding a fixed share of
        # the workers: a project gets a new job only when one of its own ends, so no
        # free worker can take the other project's queued job and the split of the
        # workers never drifts (jobs are claimed first-come, not by shares). Workers
        # in proportion to the shares (3 : 1): each project then has more L0 slots
        # than its share of the limit needs, so both stay backlogged and the split
        # of starts is the limiter's.
        weights = {"team-a": 3, "team-b": 1} if len(projects) == 2 else {"team-a": 1}
        total = a.replicas * a.workers

        def live_jobs(port, project):
            n = 0
            for status in ("queued", "running"):
                code, listing = call(port, "GET", f"/v1/refine-jobs?project_id={project}&status={status}&page_size=100")
                n += len(listing["jobs"]) if code == 200 else 0
            return n

        def submitter(project, k):
            port = ports[k % len(ports)]
            per_project = max(1, round(total * weights[project] / sum(weights.values())))
            while not stop.is_set():
                if live_jobs(port, project) < per_project:
                    status, job = call(port, "POST", "/v1/refine-jobs", job_body(project, JOB_L0S))
                    if status in (200, 201, 202):
                        with lock:
                            jobs.append((job["id"], project))
                        continue
                    print("submit failed", status, job, file=sys.stderr)
                time.sleep(0.2)

        # When every project had calls waiting (sampled from GET /v1/rate-limits):
        # the shares are promised while all are backlogged, so the split is
        # counted over those intervals only.
        samples = []  # (time, every project waiting)

        def sample_backlog():
            code, view = call(ports[0], "GET", "/v1/rate-limits")
            if code != 200:
                return
            waiting = {}
            for entry in view.get("executors", []):
                for name, p in (entry.get("projects") or {}).items():
                    waiting[name] = waiting.get(name, 0) + p.get("waiting", 0)
            samples.append((time.time(), all(waiting.get(pr, 0) > 0 for pr in projects)))

        threads = [threading.Thread(target=submitter, args=(pr, k), daemon=True) for k, pr in enumerate(projects)]
        t0 = time.time()
        for t in threads:
            t.start()
        change_at = None
        run_secs = a.secs
        if a.scenario == "limited" and not a.no_config:
            run_secs += 30
        while time.time() - t0 < run_secs:
            if a.scenario == "limited" and not a.no_config and change_at is None and time.time() - t0 >= a.secs:
                status, entry = call(ports[-1], "PUT", "/v1/rate-limits/claude", {"requests_per_minute": a.rpm // 2})
                assert status == 200, (status, entry)
                change_at = time.time()
            if a.scenario == "limited" and not a.no_config and len(projects) == 2:
                sample_backlog()
            time.sleep(0.5)
        t_end = time.time()
        stop.set()
        limits_view = call(ports[0], "GET", "/v1/rate-limits")[1] if not a.no_config else None
        # Figures from the provider's own record of every request.
        _, stats = call_provider(pport)
        seen = [(t, s) for t, s in stats["requests"] if t0 <= t <= t_end]
        before_change = [(t, s) for t, s in seen if change_at is None or t < change_at]
        n = len(before_change)
        n429 = sum(1 for _, s in before_change if s == 429)
        worst = windows([t for t, _ in before_change])
        # Utilisation over the steady part (after the first 10 s).
        steady = [t for t, s in before_change if s == 200 and t >= t0 + 10]
        steady_secs = (min(t_end, change_at or t_end) - (t0 + 10))
        util = len(steady) / (rate * steady_secs) if steady_secs > 0 else 0
        figures = {"scenario": a.scenario, "replicas": a.replicas, "db": "postgres" if a.db else "sqlite",
                   "requests": n, "429": n429, "share_429": round(n429 / n, 4) if n else None,
                   "worst_60s_window": worst, "limit": a.rpm, "utilisation": round(util, 3)}
        if change_at is not None:
            after = [t for t, s in seen if t >= change_at + 2 and s == 200]
            secs = t_end - (change_at + 2)
            figures["after_change_rpm"] = round(len(after) / secs * 60, 1) if secs > 0 else None
            figures["after_change_limit"] = a.rpm // 2
        # L0 outcomes and the share split from plangate's records.
        rate_failures, failed, started = 0, 0, {pr: [] for pr in projects}
        statuses = {}
        for job_id, project in list(jobs):
            status, job = call(ports[0], "GET", f"/v1/refine-jobs/{job_id}")
            statuses[job["status"]] = statuses.get(job["status"], 0) + 1
            status, assigns = call(ports[0], "GET", f"/v1/refine-jobs/{job_id}/assignments")
            for r in assigns:
                if r.get("started_at"):
                    started[project].append(ts(r["started_at"]))
                err = r.get("error") or ""
                if r.get("status") == "failed":
                    failed += 1
                    if "429" in err or "rate_limited" in err or "rate limit" in err:
                        rate_failures += 1
        figures["l0_failed"] = failed
        figures["l0_failed_rate"] = rate_failures
        figures["jobs"] = statuses
        if len(projects) == 2:
            lo, hi = t0 + 15, min(t_end, change_at or t_end)
            # Intervals between two samples that both saw every project waiting.
            spans = [(t1, t2) for (t1, b1), (t2, b2) in zip(samples, samples[1:])
                     if b1 and b2 and lo <= t1 and t2 <= hi]

            def counted(t):
                return lo <= t <= hi and (not samples or any(t1 <= t < t2 for t1, t2 in spans))

            a_n = sum(1 for t in started["team-a"] if counted(t))
            b_n = sum(1 for t in started["team-b"] if counted(t))
            figures["share_split"] = f"{a_n}:{b_n}"
            all_a = sum(1 for t in started["team-a"] if lo <= t <= hi)
            all_b = sum(1 for t in started["team-b"] if lo <= t <= hi)
            figures["share_split_whole_run"] = f"{all_a}:{all_b}"
            figures["share_a"] = round(a_n / (a_n + b_n), 3) if a_n + b_n else None
            if samples:
                figures["backlogged_secs"] = round(sum(t2 - t1 for t1, t2 in spans), 1)
                figures["measured_secs"] = round(hi - lo, 1)
        if limits_view:
            figures["rate_limits_view"] = limits_view
        print(json.dumps(figures))
        if a.check:
            bad = []
            if a.scenario == "limited":
                if figures["share_429"] is None or figures["share_429"] > 0.01:
                    bad.append("429 share above 1 %")
                if worst > a.rpm + 1:
                    bad.append(f"a 60 s window held {worst} > {a.rpm + 1}")
                if util < 0.85:
                    bad.append(f"utilisation {util:.2f} < 0.85")
                if rate_failures:
                    bad.append(f"{rate_failures} L0s failed for rate reasons")
                if len(projects) == 2 and samples and figures["backlogged_secs"] < 30:
                    bad.append(f"both projects were backlogged only {figures['backlogged_secs']} s of "
                               f"{figures['measured_secs']} s: the split says nothing")
                if len(projects) == 2 and figures.get("share_a") is not None and abs(figures["share_a"] - 0.75) > 0.075:
                    bad.append(f"share split {figures['share_split']} not within ±10 % of 3:1")
                if change_at is not None and figures["after_change_rpm"] > a.rpm // 2 * 1.05 + 1:
                    bad.append(f"after the change {figures['after_change_rpm']}/min > {a.rpm // 2}")
            elif a.scenario == "headers":
                if figures["share_429"] is None or figures["share_429"] > 0.05:
                    bad.append("429 share above 5 %")
                if rate_failures:
                    bad.append(f"{rate_failures} L0s failed for rate reasons")
            if bad:
                print("FAILED: " + "; ".join(bad), file=sys.stderr)
                sys.exit(1)
    finally:
        stop_all()


def call_provider(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/stats")
    r = conn.getresponse()
    return r.status, json.loads(r.read())


if __name__ == "__main__":
    main()
