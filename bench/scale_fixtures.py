#!/usr/bin/env python3
"""Fixtures for bench/scale.sh (stdlib only; setup, not load: oha drives the load).

  scale_fixtures.py BASE OUT_DIR SEEDED_DB_URL|-

Creates through the API, identically on the empty and the seeded server:
  - one 100-task list (10 waves) in project-3 / cycle-9: ready, list get, cycle status;
  - 40 lists of 100 tasks in their own projects: PATCH targets (waves 1-5, each
    `abandoned` cascades over its dependents);
  - 20 builtin refine jobs and 2 refine runs in project-3 (waited for): job/run get;
  - TRACKS tracks (env, default 2000) unless the database already has them: steps.
Writes URL files (one URL a line) and a PATCH body into OUT_DIR. On the seeded
database (its URL given), job and run URLs are 1,000 random rows of the history.
"""
import http.client
import json
import os
import random
import subprocess
import sys
from urllib.parse import urlparse


class Client:
    def __init__(self, base):
        u = urlparse(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)

    def call(self, method, path, body=None, expect=(200, 201, 202)):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"} if data else {}
        self.conn.request(method, path, body=data, headers=headers)
        r = self.conn.getresponse()
        payload = r.read()
        if r.status not in expect:
            raise SystemExit(f"{method} {path}: {r.status} {payload[:300]!r}")
        return json.loads(payload or b"null")


def task_list(project, team, n=100):
    tasks = []
    for p in range(n):
        wave = p // 10 + 1
        deps = [] if wave == 1 else [f"T{wave - 1}.{(p + k) % 10 + 1}" for k in range(3)]
        tasks.append({
            "task_id": f"T{wave}.{p % 10 + 1}", "assigned_persona": "backend",
            "parallel_group": wave, "depends_on": deps,
            "reads": [f"src/mod{p % 10}.rs"], "writes": [f"src/part{p}.rs"],
            "description": f"Implement part {p} of the feature.",
        })
    return {"project_id": project, "team_pk": team, "created_by": "bench", "tasks": tasks,
            "existing_files": [f"src/mod{i}.rs" for i in range(10)]}


def refine_job():
    assignments = [{
        "id": f"P1-A{i}", "phase_id": "P1", "name": f"Assignment {i}", "goal": "g",
        "technical_approach": f"Touch src/mod{i}.rs.", "dependency_notes": "", "overlap_notes": "",
        "proposed_work_packages": [{"id_suffix": "WP1", "name": "code", "estimated_files": [f"src/mod{i}.rs"]}],
    } for i in range(1, 5)]
    return {"context": {"phase_id": "P1", "assignments": assignments, "peer_summaries": []},
            "refined_plan": {"phases": [{"id": "P1", "name": "Phase", "goal": "g"}]},
            "task_text": "Bench.", "project_id": "project-3"}


def refine_run():
    phase = lambda i: {"id": i, "name": i, "goal": "g", "scope": ["code"], "technical_approach": "t",
                       "relationship_notes": "", "ordering": 1}
    assignment = lambda i, p: {"id": i, "phase_id": p, "name": i, "goal": "g", "technical_approach": "t",
                               "dependency_notes": "", "overlap_notes": "",
                               "proposed_work_packages": [{"id_suffix": "WP1", "name": "w", "scope": "s",
                                                           "estimated_files": [f"src/{i}.rs"]}]}
    return {"plan": {"task": "Bench.", "source_dir": "/srv/app", "phases": [phase("P1"), phase("P2")],
                     "assignments": [assignment("P1-A1", "P1"), assignment("P2-A1", "P2")]},
            "project_id": "project-3"}


def wait(c, path):
    while True:
        body = c.call("GET", f"{path}?wait=10")
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body


def psql(url, sql):
    out = subprocess.run(["psql", url, "-Atqc", sql], check=True, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line]


def main():
    base, out, seeded = sys.argv[1], sys.argv[2], sys.argv[3]
    c = Client(base)
    urls = {}
    lst = c.call("POST", "/v1/task-lists", task_list("project-3", "cycle-9"))
    urls["ready"] = [f"{base}/v1/task-lists/{lst['id']}/ready"]
    patch = []
    for k in range(40):
        made = c.call("POST", "/v1/task-lists", task_list(f"patch-{k}", "cycle-0"))
        patch += [f"{base}/v1/tasks/{t['id']}" for t in made["tasks"] if t["parallel_group"] <= 5]
    urls["patch_cascade"] = patch
    jobs = [c.call("POST", "/v1/refine-jobs", refine_job(), expect=(202,))["id"] for _ in range(20)]
    for j in jobs:
        wait(c, f"/v1/refine-jobs/{j}")
    runs = [c.call("POST", "/v1/refine-runs", refine_run(), expect=(202,))["id"] for _ in range(2)]
    for r in runs:
        wait(c, f"/v1/refine-runs/{r}")
    if seeded != "-":
        jobs = psql(seeded, "SELECT id FROM refine_jobs TABLESAMPLE SYSTEM (5) LIMIT 1000")
        runs = psql(seeded, "SELECT id FROM refine_runs ORDER BY random() LIMIT 1000")
        tracks = psql(seeded, "SELECT track_id FROM tracks WHERE track_id <> 'seed-template'")
    else:
        tracks = []
        for t in range(int(os.environ.get("TRACKS", "2000"))):
            doc = {"track_id": f"track-{t}", "type": "feature", "status": "new",
                   "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z",
                   "description": "Bench track"}
            c.call("PUT", f"/v1/tracks/track-{t}", doc)
            tracks.append(f"track-{t}")
    urls["job_get"] = [f"{base}/v1/refine-jobs/{j}" for j in jobs]
    urls["run_get"] = [f"{base}/v1/refine-runs/{r}" for r in runs]
    urls["track_step"] = [f"{base}/v1/tracks/{t}/steps/PLAN/start" for t in tracks]
    urls["status_cycle"] = [f"{base}/v1/projects/project-3/status?team_pk=cycle-9"]
    urls["status_project"] = [f"{base}/v1/projects/project-3/status"]
    urls["job_list"] = [f"{base}/v1/refine-jobs?page_size=20"]
    urls["job_list_filtered"] = [f"{base}/v1/refine-jobs?page_size=20&project_id=project-3&status=succeeded"]
    random.seed(7)
    for name, lines in urls.items():
        with open(os.path.join(out, f"{name}.urls"), "w") as f:
            f.write("\n".join(lines) + "\n")
    print(f"fixtures: {len(patch)} PATCH targets, {len(jobs)} jobs, {len(runs)} runs, {len(tracks)} tracks")


if __name__ == "__main__":
    main()
