"""Webhooks end to end (docs/api.md, "Webhooks"), against the real server binary and a
real receiver (tests/webhooks/receiver.py) that verifies every delivery with the
PyPI `standardwebhooks` library.

    python driver.py --binary target/debug/plangate --backend sqlite|postgres

Checks, on one back-end: every event type arrives, verified, with the documented
data; a receiver failing half its attempts gets every event (same id, fresh
signatures); Retry-After is a minimum; 410 disables the webhook; a redirect is not
followed; after a rotation both secrets verify on their own; a webhook of project B
never receives project A's events and a limited token cannot touch A's webhooks;
replay re-sends with the same id; a request that causes an event answers within 2 s
while its delivery hangs; one event's retries do not hold back another's; and a
SIGKILL during an attempt loses nothing (SQLite: the restarted server delivers;
Postgres: another replica does), with the same webhook-id.
"""

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plangate_server import (  # noqa: E402
    L0, CheckFailed, Plangate, call, check, drop_database, free_port, new_database, start,
)

ADMIN = "admin-token-aaaaaaaaaaaa"
TOKEN_A = "token-a-bbbbbbbbbbbbbbbb"
TOKEN_B = "token-b-cccccccccccccccc"
SCHEDULE = "2,2,2"  # > 1 s after jitter: each retry has a new whole-second timestamp
EVENT_TYPES = ["refine_job.succeeded", "refine_job.failed", "refine_job.cancelled",
               "refine_run.finished", "task_list.finished", "task.failed", "budget.exceeded"]


def http(method: str, url: str, body=None, token=ADMIN):
    """(status, parsed JSON, text, or None for an empty body) of one request."""
    status, answer = call(method, url, body, {"Authorization": f"Bearer {token}"} if token else None)
    return status, None if answer == "" else answer


def wait_until(what: str, probe, timeout: float = 30.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CheckFailed(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


class Receiver:
    def __init__(self, python: str, work: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = work / "receiver.log"
        self.process = subprocess.Popen([python, str(Path(__file__).with_name("receiver.py")), str(self.port)],
                                        stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        wait_until("the receiver", lambda: self._up(), 20)

    def _up(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/_log", timeout=2):
                return True
        except (urllib.error.URLError, ConnectionError):
            if self.process.poll() is not None:
                raise CheckFailed(f"receiver exited:\n{self.log.read_text()}")
            return False

    def url(self, mode: str, name: str) -> str:
        return f"{self.base}/{mode}/{name}"

    def secrets(self, name: str, values: list[str]) -> None:
        status, _ = http("POST", f"{self.base}/_secrets/{name}", {"secrets": values}, token=None)
        check(status == 204, "receiver took the secrets")

    def entries(self, name: str | None = None) -> list[dict]:
        _, log = http("GET", self.base + "/_log", token=None)
        return [e for e in log if name is None or e["name"] == name]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class Server(Plangate):
    """The real binary on a free port, on the shared database."""

    def api(self, method: str, path: str, body=None, token=ADMIN):
        return http(method, self.base + path, body, token)

    def ok(self, method: str, path: str, body=None, token=ADMIN):
        status, answer = self.api(method, path, body, token)
        check(200 <= status < 300, f"{method} {path}: {status} {answer}")
        return answer

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def start_server(binary: Path, url: str, work: Path, name: str, timeout_secs: int = 5) -> Server:
    config = (
        f'[executors.ok]\nkind = "command"\nargv = ["{L0}", "valid"]\ntimeout_secs = 60\n'
        f'[executors.slow]\nkind = "command"\nargv = ["{L0}", "sleep", "60"]\ntimeout_secs = 120\n'
        f'[executors.cj]\nkind = "command"\noutput = "claude-json"\n'
        f'argv = ["{L0}", "claude-json", "0.01", "100", "50"]\ntimeout_secs = 60\n'
    )
    env = dict(
        PLANGATE_API_TOKENS=f"{ADMIN},{TOKEN_A}:proj-a,{TOKEN_B}:proj-b",
        PLANGATE_WEBHOOK_ALLOW_PRIVATE="true",
        PLANGATE_WEBHOOK_RETRY_SCHEDULE=SCHEDULE,
        PLANGATE_WEBHOOK_TIMEOUT_SECS=str(timeout_secs),
        PLANGATE_L0_CONCURRENCY="1",
        PLANGATE_TASK_DIR=str(work / f"tasks-{name}"),
    )
    started = start(binary, "", config, env, prefix=f"plangate-webhooks-{name}-", database_url=url)
    return Server(**vars(started))


# ------------------------------------------------------------------ workloads

def assignment(aid: str) -> dict:
    return {"id": aid, "phase_id": "P1", "name": f"A {aid}", "goal": "Do one thing.",
            "technical_approach": "Small steps.", "dependency_notes": "", "overlap_notes": "",
            "proposed_work_packages": [{"id_suffix": "WP1", "name": "w", "estimated_files": [f"src/{aid}.rs"]}]}


PLAN = {"task": "Ship it", "phases": [{"id": "P1", "name": "Phase one", "goal": "g", "scope": ["code"],
                                       "technical_approach": "t", "relationship_notes": "", "ordering": 1}],
        "assignments": [assignment("P1-A1")]}


def job(project: str, executor: str, ids=("P1-A1",), **extra) -> dict:
    body = {"context": {"schema_version": 1, "phase_id": "P1", "assignments": [assignment(i) for i in ids],
                        "peer_summaries": []},
            "refined_plan": PLAN, "task_text": "SECRET TASK TEXT", "project_id": project, "executor": executor}
    body.update(extra)
    return body


def task_list(project: str, tasks: list[tuple[str, list[str]]]) -> dict:
    return {"project_id": project, "created_by": "pm", "tasks": [
        {"task_id": t, "assigned_persona": "p", "parallel_group": i + 1, "depends_on": deps,
         "reads": [], "writes": [f"{t}.py"], "description": f"SECRET TASK TEXT {t}"}
        for i, (t, deps) in enumerate(tasks)]}


def wait_job(server: Server, jid: str) -> dict:
    return wait_until(f"job {jid} to end", lambda: (lambda j: j if j["status"] in
                      ("succeeded", "failed", "cancelled") else None)(server.ok("GET", f"/v1/refine-jobs/{jid}?wait=5")),
                      90, 0)


def create_hook(server: Server, receiver: Receiver, mode: str, name: str, events, project="proj-a", token=ADMIN):
    body = {"url": receiver.url(mode, name), "events": events, "description": name}
    if project:
        body["project_id"] = project
    status, hook = server.api("POST", "/v1/webhooks", body, token)
    check(status == 201, f"create {name}: {status} {hook}")
    check(hook["secret"].startswith("whsec_"), f"secret of {name}")
    receiver.secrets(name, [hook["secret"]])
    return hook


def deliveries(server: Server, hook: dict) -> list[dict]:
    return server.ok("GET", f"/v1/webhooks/{hook['id']}/deliveries")


def by_id(entries: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for e in entries:
        out.setdefault(e["id"], []).append(e)
    return out


def run(binary: Path, backend: str, python: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="plangate-webhooks-"))
    url, drop = new_database(backend, work, "plangate_test_webhooks")
    receiver = Receiver(python, work)
    servers: list[Server] = []
    started = time.monotonic()

    def step(text: str) -> None:
        print(f"  [{time.monotonic() - started:5.1f} s] {text}", flush=True)

    try:
        server = start_server(binary, url, work, "a")
        servers.append(server)
        step("webhooks: one per receiver behaviour")
        every = create_hook(server, receiver, "ok", "all", ["*"])
        flaky = create_hook(server, receiver, "flaky", "flaky", ["*"])
        ra = create_hook(server, receiver, "retry-after", "ra", ["task_list.finished"])
        gone = create_hook(server, receiver, "gone", "gone", ["task.failed"])
        redirect = create_hook(server, receiver, "redirect", "redir", ["task.failed"])
        hang = create_hook(server, receiver, "hang", "hang", ["task.failed"])
        rot = create_hook(server, receiver, "ok", "rot", ["task.failed"])
        projb = create_hook(server, receiver, "ok", "projb", ["*"], project="proj-b", token=TOKEN_B)

        step("scoping: a token of project A cannot touch B's webhook nor a project-less one")
        glob = create_hook(server, receiver, "ok", "global", ["refine_run.finished"], project=None)
        for other in (projb, glob):
            for method, path in [("GET", f"/v1/webhooks/{other['id']}"),
                                 ("DELETE", f"/v1/webhooks/{other['id']}"),
                                 ("POST", f"/v1/webhooks/{other['id']}/rotate-secret"),
                                 ("GET", f"/v1/webhooks/{other['id']}/deliveries")]:
                status, problem = server.api(method, path, token=TOKEN_A)
                check(status == 403 and problem["code"] == "forbidden_project", f"{method} {path}: {status}")
        status, _ = server.api("POST", "/v1/webhooks", {"url": receiver.url("ok", "x"), "events": ["*"]}, TOKEN_A)
        check(status == 403, "a limited token cannot create a project-less webhook")
        listed = server.ok("GET", "/v1/webhooks", token=TOKEN_A)
        check(all(w["project_id"] == "proj-a" for w in listed) and len(listed) == 7, f"A's list: {listed}")

        step("rotation: both secrets verify on their own")
        old = rot["secret"]
        new = server.ok("POST", f"/v1/webhooks/{rot['id']}/rotate-secret")["secret"]
        check(new != old and new.startswith("whsec_"), "a new secret")
        receiver.secrets("rot", [old, new])

        step("events: jobs (succeeded, failed by budget, cancelled), a run, task lists")
        ok_job = server.ok("POST", "/v1/refine-jobs", job("proj-a", "ok"))["id"]
        budget_job = server.ok("POST", "/v1/refine-jobs",
                               job("proj-a", "cj", ids=("P1-A1", "P1-A2"), max_cost_usd=0.015))["id"]
        slow_job = server.ok("POST", "/v1/refine-jobs", job("proj-a", "slow"))["id"]
        run_id = server.ok("POST", "/v1/refine-runs", {"plan": PLAN, "project_id": "proj-a", "executor": "ok"})["id"]
        wait_until("the slow job to run", lambda: server.ok("GET", f"/v1/refine-jobs/{slow_job}")["status"] == "running", 30)
        server.ok("POST", f"/v1/refine-jobs/{slow_job}/cancel")
        lst = server.ok("POST", "/v1/task-lists", task_list("proj-a", [("a", []), ("b", ["a"])]))
        a_id, b_id = lst["tasks"][0]["id"], lst["tasks"][1]["id"]
        server.ok("PATCH", f"/v1/tasks/{a_id}", {"status": "running"})
        t = time.monotonic()
        server.ok("PATCH", f"/v1/tasks/{a_id}", {"status": "failed"})
        took = time.monotonic() - t
        check(took < 2.0, f"the request that caused a hanging delivery answered in {took:.2f} s")
        done = server.ok("POST", "/v1/task-lists", task_list("proj-a", [("c", [])]))
        c_id = done["tasks"][0]["id"]
        server.ok("PATCH", f"/v1/tasks/{c_id}", {"status": "running"})
        server.ok("PATCH", f"/v1/tasks/{c_id}", {"status": "done"})
        # Project B's failure reaches only B's webhook.
        lb = server.ok("POST", "/v1/task-lists", task_list("proj-b", [("x", [])]), token=TOKEN_B)
        x_id = lb["tasks"][0]["id"]
        server.ok("PATCH", f"/v1/tasks/{x_id}", {"status": "running"}, token=TOKEN_B)
        server.ok("PATCH", f"/v1/tasks/{x_id}", {"status": "failed"}, token=TOKEN_B)
        jobs = {j: wait_job(server, j) for j in (ok_job, budget_job, slow_job)}
        check(jobs[ok_job]["status"] == "succeeded", f"ok job: {jobs[ok_job]['status']}")
        check(jobs[budget_job]["error"]["code"] == "budget_exceeded", f"budget job: {jobs[budget_job]}")
        check(jobs[slow_job]["status"] == "cancelled", "slow job cancelled")
        wait_until("the run to finish", lambda: server.ok("GET", f"/v1/refine-runs/{run_id}")["status"]
                   in ("succeeded", "failed", "cancelled"), 60)

        step("every event type reaches the '*' webhook, verified, with its data")
        want = 9  # 3 jobs + the run's phase job + budget + run + task.failed + 2 list ends
        got = wait_until("9 events at 'all'", lambda: (lambda e: e if len(e) >= want else None)(receiver.entries("all")), 30)
        bodies = [json.loads(e["body"]) for e in got]
        types = sorted(b["type"] for b in bodies)
        check(sorted(set(types)) == sorted(EVENT_TYPES), f"types at 'all': {types}")
        check(len(got) == want, f"exactly {want} deliveries at 'all', got {types}")
        for e, b in zip(got, bodies):
            check(e["verified_with"] == [0], f"unverified delivery: {e}")
            check(e["content_type"] == "application/json", "content type")
            check(len(e["body"]) < 20 * 1024 and "SECRET TASK TEXT" not in e["body"], "no task text, under 20 KB")
            check(b["data"]["project_id"] == "proj-a", f"project of {b}")
            check(e["timestamp"].isdigit(), "whole-second timestamp")
        one = {b["type"]: b for b in bodies if b["type"] != "refine_job.succeeded" or b["data"]["id"] == ok_job}
        d = one["refine_job.succeeded"]["data"]
        check(d["id"] == ok_job and d["status"] == "succeeded" and d["path"] == f"/v1/refine-jobs/{ok_job}"
              and d["progress"]["l0_total"] == 1 and d["progress"]["l0_succeeded"] == 1, f"succeeded data {d}")
        d = one["refine_job.failed"]["data"]
        check(d["id"] == budget_job and d["error_code"] == "budget_exceeded", f"failed data {d}")
        d = one["budget.exceeded"]["data"]
        check(d["id"] == budget_job and d["project_id"] == "proj-a", f"budget data {d}")
        d = one["refine_job.cancelled"]["data"]
        check(d["id"] == slow_job and d["status"] == "cancelled", f"cancelled data {d}")
        d = one["refine_run.finished"]["data"]
        check(d["id"] == run_id and d["path"] == f"/v1/refine-runs/{run_id}", f"run data {d}")
        d = one["task.failed"]["data"]
        check(d["id"] == a_id and d["task_list_id"] == lst["id"] and d["path"] == f"/v1/tasks/{a_id}"
              and d["status"] == "failed", f"task data {d}")
        check(not any(b["type"] == "task.failed" and b["data"]["id"] == b_id for b in bodies),
              "the cascade-abandoned task sent no task.failed")
        ends = {b["data"]["id"]: b["data"]["next"] for b in bodies if b["type"] == "task_list.finished"}
        check(ends == {lst["id"]: "blocked", done["id"]: "done"}, f"list ends {ends}")
        globals_ = wait_until("the run at 'global'", lambda: receiver.entries("global"), 20)
        time.sleep(0.5)
        globals_ = receiver.entries("global")
        check(len(globals_) == 1 and json.loads(globals_[0]["body"])["data"]["id"] == run_id,
              "the project-less webhook gets the run")

        step("project B's webhook got only B's event")
        wait_until("B's events", lambda: len(receiver.entries("projb")) >= 2, 20)
        time.sleep(1)
        b_got = receiver.entries("projb")
        b_bodies = sorted((json.loads(e["body"]) for e in b_got), key=lambda b: b["type"])
        check([b["type"] for b in b_bodies] == ["task.failed", "task_list.finished"]
              and b_bodies[0]["data"]["id"] == x_id and all(b["data"]["project_id"] == "proj-b" for b in b_bodies),
              f"projb got {b_got}")

        step("a receiver failing half its attempts: all delivered, same id, fresh signatures")
        def flaky_done():
            ds = deliveries(server, flaky)
            return ds if len(ds) == want and all(x["state"] == "delivered" for x in ds) else None
        fds = wait_until("flaky deliveries", flaky_done, 40)
        attempts = by_id(receiver.entries("flaky"))
        check(set(attempts) == {x["event_id"] for x in fds}, "the attempts carry the events' ids")
        for eid, tries in attempts.items():
            check(len(tries) == 2 and [t["answered"] for t in tries] == [500, 200], f"{eid}: {tries}")
            check(all(t["verified_with"] == [0] for t in tries), f"verified {eid}")
            check(tries[0]["signature"] != tries[1]["signature"] and tries[0]["timestamp"] != tries[1]["timestamp"],
                  f"fresh signature per attempt {eid}")
            check(tries[0]["body"] == tries[1]["body"], "the same body")
        check(all(x["attempts"] == 2 and x["last_status_code"] == 200 and x["delivered_at"] for x in fds),
              f"flaky deliveries listed {fds}")

        step("one event's retries do not hold back the others (the same webhook)")
        first_tries = sorted(t[0]["received_at"] for t in attempts.values())
        check(first_tries[-1] - first_tries[0] < 30, "first attempts of all events came without waiting")

        step("Retry-After is a minimum")
        wait_until("the Retry-After deliveries", lambda: (lambda ds: len(ds) == 2 and all(
            x["state"] == "delivered" for x in ds))(deliveries(server, ra)), 30)
        ra_tries = by_id(receiver.entries("ra"))
        check(len(ra_tries) == 2, f"two list ends at 'ra': {ra_tries}")
        for eid, tries in ra_tries.items():
            check([t["answered"] for t in tries] == [503, 200], f"ra {tries}")
            gap = tries[1]["received_at"] - tries[0]["received_at"]
            # The schedule alone would retry within 2.8 s (2 s + 40 %).
            check(gap >= 4.5, f"the retry came {gap:.2f} s after a Retry-After: 5: {tries}")

        step("410 disables the webhook; a redirect is not followed; a hanging receiver times out")
        def disabled():
            w = server.ok("GET", f"/v1/webhooks/{gone['id']}")
            return w if w["disabled"] else None
        w = wait_until("the 410 webhook disabled", disabled, 20)
        check(w["disabled_reason"] and "410" in w["disabled_reason"], f"reason {w}")
        rd = wait_until("the redirect attempts to end", lambda: (lambda ds: ds if ds and ds[0]["state"] == "failed" else None)(deliveries(server, redirect)), 30)
        check(rd[0]["attempts"] == 4 and rd[0]["last_status_code"] == 302, f"redirect delivery {rd}")
        check(not receiver.entries("redir-redirected"), "the redirect was followed")
        hd = wait_until("a hanging attempt to time out", lambda: (lambda ds: ds if ds and ds[0]["attempts"] >= 1 else None)(deliveries(server, hang)), 20)
        check("timed out" in (hd[0]["last_error"] or ""), f"hang delivery {hd}")

        step("rotation: the delivery carries two signatures, each verifies alone")
        rot_got = receiver.entries("rot")
        check(len(rot_got) == 1 and rot_got[0]["verified_with"] == [0, 1], f"rot {rot_got}")
        check(len(rot_got[0]["signature"].split(" ")) == 2, "two signatures, one space")

        step("replay: same webhook-id again within 10 s; 404 for an unknown delivery")
        ds = deliveries(server, every)
        target = next(x for x in ds if x["type"] == "task.failed")
        status, _ = server.api("POST", f"/v1/webhooks/{every['id']}/deliveries/{target['id']}/replay")
        check(status == 202, f"replay {status}")
        wait_until("the replay", lambda: len([e for e in receiver.entries("all") if e["id"] == target["event_id"]]) == 2, 10)
        status, _ = server.api("POST", f"/v1/webhooks/{every['id']}/deliveries/{uuid_like()}/replay")
        check(status == 404, f"unknown delivery {status}")
        # A disabled webhook's later events are not delivered.
        l2 = server.ok("POST", "/v1/task-lists", task_list("proj-a", [("z", [])]))
        z = l2["tasks"][0]["id"]
        server.ok("PATCH", f"/v1/tasks/{z}", {"status": "running"})
        server.ok("PATCH", f"/v1/tasks/{z}", {"status": "failed"})
        wait_until("z's failure at 'all'", lambda: any(json.loads(e["body"])["data"]["id"] == z for e in receiver.entries("all")), 20)
        check(len(receiver.entries("gone")) == 1, "nothing sent to a disabled webhook")

        step("metrics count deliveries by outcome")
        with urllib.request.urlopen(server.base + "/metrics", timeout=10) as r:
            metrics = r.read().decode()
        for outcome in ("delivered", "retrying", "failed", "gone"):
            check(f'webhook_deliveries_total{{outcome="{outcome}"}}' in metrics, f"metric {outcome}")

        step("kill -9 during an attempt: " + ("another replica delivers" if backend == "postgres" else "the restarted server delivers"))
        kill = create_hook(server, receiver, "slow-first", "kill", ["refine_job.succeeded"])
        kjob = server.ok("POST", "/v1/refine-jobs", job("proj-a", "ok"))["id"]
        wait_job(server, kjob)
        first = wait_until("the first attempt to arrive", lambda: receiver_arrivals(receiver, "kill"), 20)
        cut_id = first[0]
        if backend == "postgres":
            other = start_server(binary, url, work, "b")
            servers.append(other)
        server.kill9()
        t_kill = time.monotonic()
        if backend == "sqlite":
            other = start_server(binary, url, work, "b")
            servers.append(other)
        ready = time.monotonic()
        done_entries = wait_until("the delivery after the kill",
                                  lambda: [e for e in receiver.entries("kill") if e["answered"] < 300 and not e["held"]], 60)
        check(time.monotonic() - ready < 60, "delivered within 60 s of being ready")
        check(done_entries[0]["id"] == cut_id, f"same webhook-id {done_entries[0]['id']} vs {cut_id}")
        check(json.loads(done_entries[0]["body"])["data"]["id"] == kjob, "the killed job's event")
        check(done_entries[0]["verified_with"] == [0], "verified")
        step(f"delivered {time.monotonic() - t_kill:.1f} s after the kill")
        final = deliveries(other, kill)
        check(final[0]["state"] == "delivered" and final[0]["event_id"] == cut_id, f"listed {final}")

        step("no delivery failed verification; no server logged an error")
        bad = [e for e in receiver.entries() if not e["verified_with"]]
        check(not bad, f"unverified deliveries: {bad}")
        for s in servers:
            errors = s.errors()
            check(not errors, f"server log errors: {errors[:5]}")
        print(f"OK {backend}: {len(receiver.entries())} deliveries verified in {time.monotonic() - started:.1f} s")
    except CheckFailed:
        for s in servers:
            lines = [x for x in s.log.read_text().splitlines()
                     if "webhook" in x or '"level":"WARN"' in x or '"level":"ERROR"' in x]
            print(f"--- webhook, warning and error lines of {s.log}:", *lines[-15:], sep="\n", file=sys.stderr)
        raise
    finally:
        for s in servers:
            s.stop()
        receiver.stop()
        if drop:
            drop_database(drop)


def uuid_like() -> str:
    import uuid
    return str(uuid.uuid4())


def receiver_arrivals(receiver: Receiver, name: str):
    """Ids of attempts that reached the receiver, answered or still held."""
    _, arrivals = http("GET", receiver.base + "/_arrivals", token=None)
    ids = [a["id"] for a in arrivals if a["name"] == name]
    return ids or None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], required=True)
    args = parser.parse_args()
    try:
        run(args.binary, args.backend, sys.executable)
    except CheckFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
