#!/usr/bin/env python3
"""Load driver for bench/refine_jobs.sh (stdlib only).

  refine_load.py throughput BASE N CONCURRENCY   builtin jobs of 4 assignments
  refine_load.py fanout BASE ASSIGNMENTS EXECUTOR one job, end-to-end seconds
  refine_load.py latency BASE N                  N builtin jobs one after another
                                                 (no backlog): client-seen latency

Throughput: N jobs are submitted by CONCURRENCY client threads (keep-alive
connections), then every job is awaited with `?wait=`. Submit-to-succeeded latency
comes from the server's own timestamps (created_at → finished_at), so the client's
polling does not inflate it; jobs/s = N / (last finished_at − first created_at).
"""
import http.client
import json
import sys
import threading
import time
from datetime import datetime
from urllib.parse import urlparse


def context(n, phase="P1"):
    assignments = [
        {
            "id": f"{phase}-A{i}",
            "phase_id": phase,
            "name": f"Assignment {i}",
            "goal": "Refine one part of the plan.",
            "technical_approach": f"Touch src/mod{i}.rs and depend on {phase}-A{max(i - 1, 1)}.",
            "dependency_notes": "",
            "overlap_notes": "",
            "proposed_work_packages": [
                {"id_suffix": "WP1", "name": "code", "estimated_files": [f"src/mod{i}.rs", "src/shared.rs"]}
            ],
        }
        for i in range(1, n + 1)
    ]
    return {
        "context": {"phase_id": phase, "assignments": assignments, "peer_summaries": []},
        "refined_plan": {"phases": [{"id": phase, "name": "Phase", "goal": "g"}]},
        "task_text": "Benchmark task.",
    }


class Client:
    def __init__(self, base):
        u = urlparse(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"} if data else {}
        for attempt in range(3):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                return r.status, json.loads(r.read() or b"null")
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                if attempt == 2:
                    raise


def ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def wait_done(client, job_id):
    while True:
        status, job = client.call("GET", f"/v1/refine-jobs/{job_id}?wait=10")
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job


def throughput(base, n, concurrency):
    body = context(4)
    ids, lock = [], threading.Lock()
    per_thread = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]

    def submit(k):
        c = Client(base)
        mine = []
        for _ in range(k):
            status, job = c.call("POST", "/v1/refine-jobs", body)
            assert status == 202, (status, job)
            mine.append(job["id"])
        with lock:
            ids.extend(mine)

    started = time.time()
    threads = [threading.Thread(target=submit, args=(k,)) for k in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    submitted = time.time()
    jobs, jobs_lock = [], threading.Lock()

    def await_some(chunk):
        c = Client(base)
        done = [wait_done(c, i) for i in chunk]
        with jobs_lock:
            jobs.extend(done)

    chunks = [ids[i::concurrency] for i in range(concurrency)]
    threads = [threading.Thread(target=await_some, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - started
    ok = sum(1 for j in jobs if j["status"] == "succeeded")
    lat = sorted(ts(j["finished_at"]) - ts(j["created_at"]) for j in jobs)
    span = max(ts(j["finished_at"]) for j in jobs) - min(ts(j["created_at"]) for j in jobs)
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
    print(f"  jobs: {n} submitted by {concurrency} clients, {ok} succeeded")
    print(f"  submit phase: {submitted - started:.2f} s ({n / (submitted - started):.0f} submits/s)")
    print(f"  throughput: {n / span:.0f} jobs/s (first created_at to last finished_at, {span:.2f} s; wall {wall:.2f} s)")
    print(f"  submit-to-succeeded latency: p50 {pct(0.50):.0f} ms, p99 {pct(0.99):.0f} ms, max {lat[-1] * 1000:.0f} ms")


def fanout(base, n, executor):
    c = Client(base)
    body = context(n)
    body["executor"] = executor
    t0 = time.time()
    status, job = c.call("POST", "/v1/refine-jobs", body)
    assert status == 202, job
    job = wait_done(c, job["id"])
    elapsed = time.time() - t0
    batches = job["log"].count("--- next batch ---") + 1
    print(f"  {n} assignments, L0 sleeps 1 s: {elapsed:.2f} s end to end, {batches} batch(es), status {job['status']}, "
          f"{job['progress']['l0_succeeded']} valid")


def latency(base, n):
    c = Client(base)
    body = context(4)
    seen = []
    for _ in range(n):
        t0 = time.time()
        status, job = c.call("POST", "/v1/refine-jobs", body)
        assert status == 202, job
        job = wait_done(c, job["id"])
        assert job["status"] == "succeeded", job
        seen.append(time.time() - t0)
    seen.sort()
    pct = lambda p: seen[min(len(seen) - 1, int(p * len(seen)))] * 1000
    print(f"  unloaded submit-to-succeeded ({n} jobs one at a time, as the client sees it): "
          f"p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms")


if __name__ == "__main__":
    mode, base = sys.argv[1], sys.argv[2]
    if mode == "throughput":
        throughput(base, int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "latency":
        latency(base, int(sys.argv[3]))
    else:
        fanout(base, int(sys.argv[3]), sys.argv[4])
