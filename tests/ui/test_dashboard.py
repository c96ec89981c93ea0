"""The dashboard in a real browser (Debian's chromium through Playwright).

Each test starts the real server on a fresh database, drives pages as a person
would and saves a screenshot of every page it looks at in its output folder.
"""

from __future__ import annotations

import http.server
import re
import threading
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from conftest import Watched, start_server, stop_server, watched_page
from plangate_server import task

XSS_DESCRIPTION = "<img src=x onerror=alert(1)>"
XSS_TEAM = '"><script>alert(1)</script>'


TASKS = [
    task("T1", 1),
    task("T2", 1),
    task("T3", 2, ["T1"]),
    task("R3", 3, ["T3"], reviews="T3", persona="reviewer"),
    task("T4", 2, ["T2"], description=XSS_DESCRIPTION),
]


def create_list(server, project="proj-a", team="cycle-1", tasks=TASKS):
    return server.ok(
        "POST",
        "/v1/task-lists",
        {"project_id": project, "team_pk": team, "created_by": "planner", "tasks": tasks},
    )


def task_ids(listing):
    return {t["task_id"]: t["id"] for t in listing["tasks"]}


def phase_body(ids, executor=None, project="proj-a"):
    assignments = [
        {
            "id": a,
            "phase_id": "P1",
            "name": f"Assignment {a}",
            "goal": "Do one thing well.",
            "technical_approach": "Small steps.",
            "dependency_notes": "",
            "overlap_notes": "",
            "proposed_work_packages": [
                {"id_suffix": "WP1", "name": "first", "estimated_files": [f"src/f{i}.rs"]}
            ],
        }
        for i, a in enumerate(ids)
    ]
    body = {
        "context": {
            "schema_version": 1,
            "phase_id": "P1",
            "assignments": assignments,
            "peer_summaries": [{"id": "P2-A1", "name": "Peer", "goal": "Other"}],
        },
        "refined_plan": {
            "task": "Ship it",
            "phases": [
                {"id": "P1", "name": "Phase one", "goal": "g", "scope": "s",
                 "technical_approach": "t", "relationship_notes": "", "ordering": 1}
            ],
        },
        "task_text": "The task: ship it.",
        "project_id": project,
    }
    if executor:
        body["executor"] = executor
    return body


def run_plan():
    phases = [
        {"id": p, "name": f"Phase {p}", "goal": "g", "scope": ["code"],
         "technical_approach": "t", "relationship_notes": "", "ordering": 1}
        for p in ("P1", "P2")
    ]
    assignments = [
        {"id": f"{p}-A1", "phase_id": p, "name": f"Name {p}", "goal": "Goal.",
         "technical_approach": "Plain.", "dependency_notes": "", "overlap_notes": "",
         "proposed_work_packages": [{"id_suffix": "WP1", "name": "w", "scope": "s",
                                     "estimated_files": ["src/shared.rs"]}]}
        for p in ("P1", "P2")
    ]
    return {"task": "Build it.", "phases": phases, "assignments": assignments}


def new_track(server, track_id, **fields):
    """PUT a new feature track `track_id`, with `fields` (a description, say)."""
    server.ok("PUT", f"/v1/tracks/{track_id}", {
        "track_id": track_id, "type": "feature", "status": "new", **fields,
        "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z"})


def run_step(server, track_id, step, agent, outcome, notes=None):
    """Start a track's `step` as `agent`, then complete it with `outcome` (and `notes`)."""
    server.ok("POST", f"/v1/tracks/{track_id}/steps/{step}/start", {"agent": agent})
    body = {"outcome": outcome}
    if notes:
        body["notes"] = notes
    server.ok("POST", f"/v1/tracks/{track_id}/steps/{step}/complete", body)


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def shot(page, output: Path, name: str):
    page.screenshot(path=str(output / f"{name}.png"), full_page=True)


@pytest.fixture
def server(backend):
    s = start_server(backend)
    yield s
    stop_server(s)


@pytest.fixture
def sqlite_server():
    s = start_server("sqlite")
    yield s
    stop_server(s)


# ---------------------------------------------------------------------------


def test_every_page_loads_cleanly(server, browser, output, backend):
    """Every page loads with no console error, no failed request, no HTTP error."""
    listing = create_list(server)
    job = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1", "P1-A2"]))
    run = server.ok("POST", "/v1/refine-runs", {"plan": run_plan(), "project_id": "proj-a"})
    wait_for(lambda: server.ok("GET", f"/v1/refine-jobs/{job['id']}")["status"] == "succeeded",
             what="the builtin job to finish")
    wait_for(lambda: server.ok("GET", f"/v1/refine-runs/{run['id']}")["status"] in ("succeeded", "failed"),
             what="the run to merge")
    new_track(server, "auth-cache")
    run_step(server, "auth-cache", "PLAN", "planner", "PASSED")

    context = browser.new_context()
    page = context.new_page()
    watched = Watched(page)
    pages = {
        "overview": "/ui/",
        "task-list": f"/ui/task-lists/{listing['id']}",
        "task-list-wave": f"/ui/task-lists/{listing['id']}?wave=2",
        "jobs": "/ui/jobs",
        "jobs-filtered": "/ui/jobs?status=succeeded&project=proj-a",
        "job": f"/ui/jobs/{job['id']}",
        "runs": "/ui/runs",
        "run": f"/ui/runs/{run['id']}",
        "tracks": "/ui/tracks",
        "track": "/ui/tracks/auth-cache",
        "login": "/ui/login",
    }
    for name, path in pages.items():
        response = page.goto(server.base + path)
        assert response.status == 200, f"{path}: {response.status}"
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        page.wait_for_load_state("networkidle") if name not in ("task-list", "task-list-wave", "job") else page.wait_for_timeout(500)
        shot(page, output, name)
    watched.assert_clean()

    # What the pages say.
    page.goto(server.base + "/ui/")
    expect(page.locator("main")).to_contain_text("proj-a")
    expect(page.locator("main")).to_contain_text("cycle-1")
    expect(page.locator("main")).to_contain_text("pending")
    page.goto(server.base + "/ui/tracks/auth-cache")
    current = page.locator('[aria-current="step"]')
    expect(current).to_have_count(1)
    expect(current).to_contain_text("EVALUATE_PLAN")
    expect(page.locator("#fix-cycles")).to_have_text("0 of 3 used")
    page.goto(server.base + f"/ui/runs/{run['id']}")
    expect(page.locator("main")).to_contain_text("P1")
    expect(page.locator("main")).to_contain_text("P2")
    expect(page.locator("#conflict-count")).to_contain_text("file conflicts")
    page.goto(server.base + f"/ui/jobs/{job['id']}")
    for assignment in ("P1-A1", "P1-A2"):
        row = page.locator(f'tr[data-assignment="{assignment}"]')
        expect(row.locator("td.l0-input")).to_have_text("0")
        expect(row.locator("td.l0-output")).to_have_text("0")
        expect(row.locator("td.l0-cost")).to_have_text("$0.00")
        expect(row.locator("td.l0-model")).to_have_text("none")
        expect(row.locator("td.l0-source")).to_have_text("reported")
    expect(page.locator("#usage-cost")).to_have_text("$0.00")
    expect(page.locator("#usage-unpriced")).to_have_text("0")
    page.goto(server.base + "/ui/jobs?status=failed")
    expect(page.locator("table.jobs tbody")).to_contain_text("No refine jobs match")
    page.goto(server.base + "/ui/jobs?status=succeeded")
    expect(page.locator(f'tr[data-job="{job["id"]}"]')).to_have_count(1)

    # Keyboard: the skip link is the first stop and leads to the content.
    page.goto(server.base + "/ui/")
    page.keyboard.press("Tab")
    expect(page.locator("a.skip")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    context.close()


def test_dag_follows_status_changes_live(server, browser, output, backend):
    listing = create_list(server)
    ids = task_ids(listing)
    with watched_page(browser) as (page, watched):
        page.goto(server.base + f"/ui/task-lists/{listing['id']}")
        nodes = page.locator("svg.dag g.node")
        expect(nodes).to_have_count(len(TASKS))
        for t in TASKS:
            node = page.locator(f'svg.dag g.node[data-task="{t["task_id"]}"]')
            expect(node).to_have_class(re.compile(r"\bst-pending\b"))
            expect(node.locator("text.st")).to_have_text("pending")
        expect(page.locator(f'svg.dag g.node[data-task="R3"] text.review')).to_have_text("review")
        expect(page.locator("#active-wave")).to_have_text("1")
        shot(page, output, "task-list-before")

        # A marker that a reload would wipe.
        page.evaluate("window.__still_here = true")
        page.wait_for_function("document.getElementById('task-list').dataset.live === '1'")
        server.ok("PATCH", f"/v1/tasks/{ids['T1']}", {"status": "running"})
        t1 = page.locator(f'svg.dag g.node[data-task="T1"]')
        expect(t1).to_have_class(re.compile(r"\bst-running\b"))
        expect(t1.locator("text.st")).to_have_text("running")

        server.ok("PATCH", f"/v1/tasks/{ids['T1']}", {"status": "failed"})
        server.ok("PATCH", f"/v1/tasks/{ids['T2']}", {"status": "running"})
        server.ok("PATCH", f"/v1/tasks/{ids['T2']}", {"status": "done"})
        expect(t1.locator("text.st")).to_have_text("failed")
        # T1's failure cascades: T3 and its review R3 are abandoned, category blocked.
        for dependent in ("T3", "R3"):
            node = page.locator(f'svg.dag g.node[data-task="{dependent}"]')
            expect(node).to_have_class(re.compile(r"\bst-abandoned\b"))
            expect(node.locator("text.st")).to_have_text("abandoned: blocked")
        expect(page.locator(f'svg.dag g.node[data-task="T2"] text.st')).to_have_text("done")
        expect(page.locator('tr[data-task="T2"] .st')).to_have_text("done")
        expect(page.locator("#active-wave")).to_have_text("2")
        expect(page.locator(f'svg.dag g.wave[data-wave="2"]')).to_have_class(re.compile(r"\bactive\b"))
        expect(page.locator('#waves li[data-wave="1"]')).to_contain_text("failed")
        expect(page.locator('#waves li[data-wave="1"]')).to_contain_text("done")
        assert page.evaluate("window.__still_here === true"), "the page reloaded"
        shot(page, output, "task-list-after")


def test_large_list_is_summarised_per_wave(sqlite_server, browser, output):
    server = sqlite_server
    tasks = [task(f"W{w}-T{i}", w, [f"W{w-1}-T{i}"] if w > 1 else []) for w in range(1, 5) for i in range(100)]
    listing = create_list(server, tasks=tasks)
    with watched_page(browser) as (page, watched):
        page.goto(server.base + f"/ui/task-lists/{listing['id']}")
        expect(page.locator("svg.dag g.node")).to_have_count(0)
        expect(page.locator("svg.dag.summary g.wave-box")).to_have_count(4)
        expect(page.locator(f'svg.dag g.wave-box[data-wave="3"]')).to_contain_text("pending: 100")
        shot(page, output, "summary")
        page.locator(f'svg.dag g.wave-box[data-wave="3"]').click()
        expect(page).to_have_url(re.compile(r"\?wave=3$"))
        # A wave of a list this large is listed, not drawn task by task.
        expect(page.locator("svg.dag g.node")).to_have_count(0)
        expect(page.locator("#wave-listed")).to_contain_text("not drawn")
        expect(page.locator("table.tasks tbody tr")).to_have_count(100)
        expect(page.locator("table.tasks tbody tr").first).to_have_attribute("data-task", "W3-T0")
        shot(page, output, "wave-3")


def test_job_page_shows_the_log_live_and_cancels(server, browser, output, backend):
    # Both back-ends: on Postgres the live log and the cancel travel through LISTEN/NOTIFY.
    with watched_page(browser) as (page, watched):
        # A slow fixture L0 (1.2 s each, one at a time): the page must follow it.
        job = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1", "P1-A2", "P1-A3"], executor="slow"))
        page.goto(server.base + f"/ui/jobs/{job['id']}")
        page.evaluate("window.__still_here = true")
        first_state = page.locator("#job-state").inner_text()
        assert first_state in ("queued", "running"), first_state
        expect(page.locator("#log li").first).to_be_visible(timeout=20_000)
        seen_running = page.locator("#job-state").inner_text()
        expect(page.locator("#job-state")).to_have_text("succeeded", timeout=60_000)
        final = server.ok("GET", f"/v1/refine-jobs/{job['id']}")
        assert final["status"] == "succeeded"
        expect(page.locator("#log li")).to_have_count(len(final["log"]))
        assert page.locator("#log li .line").all_inner_texts() == final["log"], "log lines verbatim and in order"
        expect(page.locator("pre.result")).to_contain_text('"schema_version"')
        assert page.evaluate("window.__still_here === true"), "the page reloaded"
        assert seen_running in ("queued", "running", "succeeded")
        shot(page, output, "job-succeeded")
        # The page re-reads its details once the job ends; let that finish first.
        page.wait_for_load_state("networkidle")
        expect(page.locator("#log li")).to_have_count(len(final["log"]))
        # Plain-text L0 output reports no usage: every figure says "unknown" (the
        # details were re-read live, without a reload), the totals count 3 unpriced.
        assert final["usage"]["cost_usd"] is None and final["usage"]["unpriced_calls"] == 3
        for assignment in ("P1-A1", "P1-A2", "P1-A3"):
            row = page.locator(f'tr[data-assignment="{assignment}"]')
            for cell in ("l0-input", "l0-output", "l0-cost", "l0-model", "l0-source"):
                expect(row.locator(f"td.{cell}")).to_have_text("unknown")
        expect(page.locator("#usage-cost")).to_have_text("unknown ($0.00 known)")
        expect(page.locator("#usage-unpriced")).to_have_text("3")
        expect(page.locator("#usage-tokens")).to_contain_text("over 3 L0 calls; 3 reported no tokens")
        assert page.evaluate("window.__still_here === true"), "the page reloaded"

        # Cancel from the page.
        hang = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1"], executor="hang"))
        wait_for(lambda: server.ok("GET", f"/v1/refine-jobs/{hang['id']}")["status"] == "running",
                 what="the hanging job to run")
        page.goto(server.base + f"/ui/jobs/{hang['id']}")
        expect(page.locator("#job-state")).to_have_text("running")
        shot(page, output, "job-running")
        page.get_by_role("button", name="Cancel this job…").click()
        page.get_by_role("button", name="Yes, cancel this job").click()
        expect(page.locator("#job-state")).to_have_text(re.compile("cancelling|cancelled"))
        expect(page.locator("#job-state")).to_have_text("cancelled", timeout=30_000)
        assert server.ok("GET", f"/v1/refine-jobs/{hang['id']}")["status"] == "cancelled"
        shot(page, output, "job-cancelled")


def test_job_and_run_pages_show_usage_and_cost(server, browser, output, backend):
    """Per-L0 tokens, cost, model and source, and the totals of a job and a run, as
    the API reports them; a cost nobody reported or priced reads "unknown"."""
    def finished_job(executor, ids):
        job = server.ok("POST", "/v1/refine-jobs", phase_body(ids, executor=executor))
        return wait_for(lambda: (lambda j: j if j["status"] == "succeeded" else None)(
            server.ok("GET", f"/v1/refine-jobs/{job['id']}")), what=f"the {executor} job")

    reported = finished_job("cj", ["P1-A1", "P1-A2"])
    priced = finished_job("cj-priced", ["P1-A1"])
    unpriced = finished_job("cj-unpriced", ["P1-A1"])
    run = server.ok("POST", "/v1/refine-runs", {"plan": run_plan(), "project_id": "proj-a", "executor": "cj"})
    run = wait_for(lambda: (lambda r: r if r["status"] in ("succeeded", "failed") else None)(
        server.ok("GET", f"/v1/refine-runs/{run['id']}")), what="the cj run to merge")

    with watched_page(browser) as (page, watched):
        def row(assignment):
            return page.locator(f'tr[data-assignment="{assignment}"]')

        def expect_row(assignment, input_tokens, output_tokens, cost, model, source):
            r = row(assignment)
            expect(r.locator("td.l0-input")).to_have_text(input_tokens)
            expect(r.locator("td.l0-output")).to_have_text(output_tokens)
            expect(r.locator("td.l0-cost")).to_have_text(cost)
            expect(r.locator("td.l0-model")).to_have_text(model)
            expect(r.locator("td.l0-source")).to_have_text(source)

        # Reported by the agent: $0.0123 a call, 1000 in / 200 out (+5 / 7 cache).
        page.goto(server.base + f"/ui/jobs/{reported['id']}")
        assignments = server.ok("GET", f"/v1/refine-jobs/{reported['id']}/assignments")
        assert [(a["assignment_id"], a["usage"]["cost_usd"], a["usage"]["source"]) for a in assignments] == [
            ("P1-A1", 0.0123, "reported"), ("P1-A2", 0.0123, "reported")], "the API says what the page shows"
        for assignment in ("P1-A1", "P1-A2"):
            expect_row(assignment, "1,000", "200", "$0.0123", "claude-fake", "reported")
            expect(row(assignment).locator("td.l0-input")).to_have_attribute("title", "cache: 5 read, 7 written")
        assert reported["usage"]["cost_usd"] == pytest.approx(0.0246)
        expect(page.locator("#usage-tokens")).to_have_text(
            "2,000 input, 400 output (cache: 10 read, 14 written) over 2 L0 calls")
        expect(page.locator("#usage-cost")).to_have_text("$0.0246")
        expect(page.locator("#usage-unpriced")).to_have_text("0")
        shot(page, output, "job-usage-reported")

        # No cost reported, the model is in the price table: 1 M in at $1 + 100 k out at $2.
        page.goto(server.base + f"/ui/jobs/{priced['id']}")
        expect_row("P1-A1", "1,000,000", "100,000", "$1.20", "claude-fake", "priced")
        expect(page.locator("#usage-cost")).to_have_text("$1.20")
        expect(page.locator("#usage-unpriced")).to_have_text("0")

        # No cost reported, no price for the model: unknown, not $0.
        page.goto(server.base + f"/ui/jobs/{unpriced['id']}")
        assert unpriced["usage"]["cost_usd"] is None and unpriced["usage"]["unpriced_calls"] == 1
        expect_row("P1-A1", "1,000", "200", "unknown", "claude-unpriced", "reported")
        expect(page.locator("#usage-cost")).to_have_text("unknown ($0.00 known)")
        expect(page.locator("#usage-unpriced")).to_have_text("1")
        shot(page, output, "job-usage-unpriced")

        # The run: its totals over both phases, and each phase job's cost.
        page.goto(server.base + f"/ui/runs/{run['id']}")
        assert run["usage"]["calls"] == 2, run["usage"]
        expect(page.locator("#usage-tokens")).to_have_text(
            "2,000 input, 400 output (cache: 10 read, 14 written) over 2 L0 calls")
        expect(page.locator("#usage-cost")).to_have_text("$0.0246")
        expect(page.locator("#usage-unpriced")).to_have_text("0")
        expect(page.locator("td.phase-cost")).to_have_text(["$0.0123", "$0.0123"])
        shot(page, output, "run-usage")


def test_hostile_values_render_as_text(server, browser, output, backend):
    # Both back-ends: each stores and returns the text its own way.
    listing = create_list(server, team=XSS_TEAM)
    with watched_page(browser) as (page, watched):
        for name, path in (("overview", "/ui/"), ("task-list", f"/ui/task-lists/{listing['id']}")):
            page.goto(server.base + path)
            page.wait_for_timeout(300)
            shot(page, output, name)
            expect(page.locator("main")).to_contain_text(XSS_TEAM)
            assert page.locator("main img").count() == 0
            assert page.locator("main script").count() == 0
        expect(page.locator('tr[data-task="T4"] td.desc')).to_have_text(XSS_DESCRIPTION)


class EvilSite(http.server.BaseHTTPRequestHandler):
    """Another site: a form that posts to the dashboard."""

    target = ""

    def do_GET(self):  # noqa: N802
        body = (
            f'<form method="post" action="{self.target}">'
            '<input type="hidden" name="csrf" value="anything">'
            '<button type="submit">win a prize</button></form>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_tokens_limit_what_the_dashboard_shows(browser, output):
    admin = "admin-" + "a" * 24
    limited = "limited-" + "b" * 24
    server = start_server("sqlite", tokens=f"{admin},{limited}:proj-a", admin_token=admin)
    try:
        mine = create_list(server, project="proj-a", team="alpha-cycle")
        theirs = create_list(server, project="proj-b", team="beta-cycle")
        their_job = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1"], executor="hang", project="proj-b"))
        wait_for(lambda: server.ok("GET", f"/v1/refine-jobs/{their_job['id']}")["status"] == "running",
                 what="proj-b's job to run")

        context = browser.new_context()
        page = context.new_page()
        watched = Watched(page, expected_statuses={401, 403})

        # No data without a token.
        page.goto(server.base + "/ui/")
        expect(page).to_have_url(re.compile(r"/ui/login\?next="))
        assert "proj-a" not in page.content() and "proj-b" not in page.content()
        response = page.goto(server.base + f"/ui/task-lists/{mine['id']}")
        assert "/ui/login" in page.url and "alpha-cycle" not in page.content()
        status = page.evaluate(
            "url => fetch(url).then(r => r.status)", server.base + f"/ui/task-lists/{mine['id']}/events")
        assert status == 401
        status = page.evaluate(
            "url => fetch(url).then(r => r.status)", server.base + f"/v1/refine-jobs/{their_job['id']}/events")
        assert status == 401
        expect(page.locator('input[type="password"][name="token"]')).to_have_count(1)
        shot(page, output, "login")

        # A wrong token is refused; the limited one signs in.
        page.fill("#token", "not-a-real-token-at-all")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator(".problem")).to_contain_text("not valid")
        page.fill("#token", limited)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(re.compile(r"/ui/task-lists/"))
        cookies = {c["name"]: c for c in context.cookies()}
        session = cookies["plangate_session"]
        assert session["httpOnly"] and session["sameSite"] == "Strict"
        assert limited not in session["value"]
        assert limited not in page.content(), "the token must never appear in a page"

        page.goto(server.base + "/ui/")
        expect(page.locator("main")).to_contain_text("alpha-cycle")
        assert "beta-cycle" not in page.content() and "proj-b" not in page.content()
        shot(page, output, "limited-overview")
        response = page.goto(server.base + f"/ui/task-lists/{theirs['id']}")
        assert response.status == 403 and "beta-cycle" not in page.content()
        response = page.goto(server.base + f"/ui/jobs/{their_job['id']}")
        assert response.status == 403
        page.goto(server.base + "/ui/jobs")
        assert their_job["id"] not in page.content()

        # Acting on another project's job is refused, even from the dashboard itself.
        refused = page.request.post(
            server.base + f"/ui/jobs/{their_job['id']}/cancel", headers={"Origin": server.base})
        assert refused.status == 403
        assert server.ok("GET", f"/v1/refine-jobs/{their_job['id']}")["status"] == "running"
        # Retry and bulk actions go through the same checks.
        refused = page.request.post(
            server.base + f"/ui/jobs/{their_job['id']}/retry", headers={"Origin": server.base})
        assert refused.status == 403
        bulk = page.request.post(
            server.base + "/ui/jobs/bulk", headers={"Origin": server.base},
            form={"action": "cancel", "id": their_job["id"]})
        assert bulk.status == 200 and "0 of 1 jobs: cancel done; 1 refused" in bulk.text()
        assert server.ok("GET", f"/v1/refine-jobs/{their_job['id']}")["status"] == "running"
        watched.assert_clean()
        context.close()

        # Cross-site form post (with a "CSRF token" field): refused, nothing changes.
        admin_context = browser.new_context()
        admin_page = admin_context.new_page()
        admin_page.goto(server.base + "/ui/login")
        admin_page.fill("#token", admin)
        admin_page.get_by_role("button", name="Sign in").click()
        expect(admin_page.locator("main")).to_contain_text("beta-cycle")
        EvilSite.target = server.base + f"/ui/jobs/{their_job['id']}/cancel"
        evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EvilSite)
        threading.Thread(target=evil.serve_forever, daemon=True).start()
        try:
            admin_page.goto(f"http://localhost:{evil.server_address[1]}/")
            with admin_page.expect_navigation():
                admin_page.get_by_role("button", name="win a prize").click()
            expect(admin_page.locator("main")).to_contain_text("another site")
            shot(admin_page, output, "cross-site-refused")
        finally:
            evil.shutdown()
        assert server.ok("GET", f"/v1/refine-jobs/{their_job['id']}")["status"] == "running"
        # The same form from the dashboard's own page works.
        admin_page.goto(server.base + f"/ui/jobs/{their_job['id']}")
        admin_page.get_by_role("button", name="Cancel this job…").click()
        admin_page.get_by_role("button", name="Yes, cancel this job").click()
        expect(admin_page.locator("#job-state")).to_have_text("cancelled", timeout=30_000)
        admin_context.close()
    finally:
        stop_server(server)


def test_failure_reason_and_cause_within_two_clicks(server, browser, output, backend):
    # Issue 27, item 1: a failed task's notes and an abandoned task's cause.
    listing = create_list(server)
    ids = task_ids(listing)
    reason = "cargo test: 3 failures in parser::tests"
    claimed = server.ok(
        "POST", f"/v1/task-lists/{listing['id']}/claim", {"holder": "agent-7", "persona": "coder"}
    )
    assert claimed["task"]["task_id"] == "T1"
    server.ok(
        "PATCH", f"/v1/tasks/{ids['T1']}", {"status": "failed", "notes": reason, "holder": "agent-7"}
    )
    with watched_page(browser) as (page, watched):
        page.goto(server.base + f"/ui/task-lists/{listing['id']}")
        # Zero clicks: the reason is in T1's row; T3's row names its cause.
        expect(page.locator('tr[data-task="T1"] td.why')).to_contain_text(reason)
        expect(page.locator('tr[data-task="T3"] td.why')).to_contain_text("blocked by T1")
        shot(page, output, "task-list-with-reasons")

        # One click: the failed task's own page shows the reason and its history.
        page.locator('tr[data-task="T1"] th a').click()
        expect(page.locator("h1")).to_have_text("Task T1")
        expect(page.locator("#task-facts dd.notes")).to_have_text(reason)
        expect(page.locator("#task-facts dd.abandoned-by")).to_contain_text("T3")
        history = page.locator("table.history tbody tr")
        expect(history.first).to_contain_text("claimed")
        expect(history.first).to_contain_text("agent-7")
        expect(history.last).to_contain_text("failed")
        expect(page.locator('table.history tr[data-kind="status_changed"]').first).to_be_visible()
        shot(page, output, "failed-task")

        # From an abandoned task: two clicks reach its cause and the cause's reason.
        page.goto(server.base + f"/ui/task-lists/{listing['id']}")
        page.locator('tr[data-task="R3"] th a').click()
        expect(page.locator("h1")).to_have_text("Task R3")
        expect(page.locator("#task-facts dd.cause")).to_contain_text(reason)
        page.locator("#task-facts dd.cause a").click()
        expect(page.locator("h1")).to_have_text("Task T1")
        expect(page.locator("#task-facts dd.notes")).to_have_text(reason)
        shot(page, output, "cause-of-abandoned")


def test_track_keeps_failed_evaluation_and_description(server, browser, output, backend):
    # Issue 27, item 8: the track's history keeps the FAILED evaluation and its
    # notes after FIX and after the evaluation starts again; the description shows.
    description = "Per-tenant token cache with eviction"
    verdict = "integration tests red: cache never evicts"
    new_track(server, "cache-fix", description=description)
    steps = [("PLAN", "PASSED", None), ("EVALUATE_PLAN", "PASSED", None), ("EXECUTE", "PASSED", None),
             ("EVALUATE_EXECUTION", "FAILED", verdict), ("FIX", "PASSED", "evict on write")]
    for step, outcome, notes in steps:
        run_step(server, "cache-fix", step, "agent-1", outcome, notes)
    with watched_page(browser) as (page, watched):
        page.goto(server.base + "/ui/tracks")
        expect(page.locator("table.tracks")).to_contain_text(description)
        page.goto(server.base + "/ui/tracks/cache-fix")
        expect(page.locator("#track-description")).to_have_text(description)
        expect(page.locator("#fix-cycles")).to_have_text("1 of 3 used")
        row = page.locator("table.checkpoints tr", has_text="EVALUATE_EXECUTION")
        expect(row.locator("td.notes")).to_contain_text(verdict)
        expect(row.locator("td.notes")).to_contain_text("previous attempt")
        history = page.locator("#track-history tbody tr")
        # Newest first: FIX completed, FIX started, the FAILED verdict, ...
        expect(history).to_have_count(11)
        expect(page.locator("#history-missing")).to_have_count(0)
        shot(page, output, "track-after-fix")

        # Starting the evaluation again replaces the verdict in the document: the
        # history still has it, with its notes, two clicks from the track list.
        server.ok("POST", "/v1/tracks/cache-fix/steps/EVALUATE_EXECUTION/start", {"agent": "agent-2"})
        page.goto(server.base + "/ui/tracks")
        page.get_by_role("link", name="cache-fix").click()
        expect(row.locator("td.notes")).not_to_contain_text(verdict)
        expect(history).to_have_count(12)
        expect(history.nth(0)).to_contain_text("started EVALUATE_EXECUTION")
        expect(history.nth(0)).to_contain_text("agent-2")
        failed = page.locator("#track-history tr.ev-completed", has_text="FAILED")
        expect(failed).to_have_count(1)
        expect(failed.locator("td.notes")).to_have_text(verdict)
        expect(failed).to_contain_text("FIX, in_progress")
        shot(page, output, "track-re-evaluating")


RTL = "rtl-\u202egnp.exe"


def isolated(page, selector: str, text: str) -> bool:
    """Whether `text` is shown inside `selector` by an element that isolates it."""
    return page.evaluate(
        """([selector, text]) => {
            const walker = document.createTreeWalker(document.querySelector(selector), NodeFilter.SHOW_TEXT);
            for (let n = walker.nextNode(); n; n = walker.nextNode()) {
                if (!n.data.includes(text)) continue;
                for (let el = n.parentElement; el; el = el.parentElement) {
                    if (el.tagName === 'BDI' || getComputedStyle(el).unicodeBidi === 'isolate') return true;
                }
                return false;
            }
            return false;
        }""",
        [selector, text],
    )


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_long_and_hostile_strings_keep_the_layout(server, browser, output, backend):
    # Issue 27, item 6: a 10 KB word, a 245-character id and a bidi override.
    long_id = "L" + "x" * 243 + "Z"
    long_review = "R" + "y" * 244
    assert len(long_id) == 245
    tasks = [
        task(long_id, 1, description="A" * 10_240),
        task("rtl", 1, description=RTL, persona=RTL),
        task(long_review, 2, [long_id], reviews=long_id, persona="reviewer"),
    ]
    listing = create_list(server, tasks=tasks)
    ids = task_ids(listing)
    server.ok("PATCH", f"/v1/tasks/{ids['rtl']}", {"status": "running"})
    server.ok("PATCH", f"/v1/tasks/{ids['rtl']}", {"status": "failed", "notes": RTL})
    with watched_page(browser, viewport={"width": 1280, "height": 900}) as (page, watched):
        page.goto(server.base + f"/ui/task-lists/{listing['id']}")
        expect(page.locator("#task-list")).to_have_attribute("data-live", "1")
        assert fits(page), page.evaluate("document.documentElement.scrollWidth")
        page.screenshot(path=str(output / "task-list.png"))  # the 10 KB word makes full pages slow
        # The long id is cut inside its node and whole in the node's title.
        for task_id in (long_id, long_review):
            node = page.locator(f'svg.dag g.node[data-task="{task_id}"]')
            box = node.locator("rect").bounding_box()
            tid = node.locator("text.tid").bounding_box()
            assert tid["x"] + tid["width"] <= box["x"] + box["width"], (task_id, tid, box)
        long_node = page.locator(f'svg.dag g.node[data-task="{long_id}"]')
        assert long_id in long_node.locator("title").text_content()
        assert long_node.locator("text.tid").text_content().endswith("…")
        review = page.locator(f'svg.dag g.node[data-task="{long_review}"]')
        tid, label = review.locator("text.tid").bounding_box(), review.locator("text.review").bounding_box()
        assert tid["x"] + tid["width"] <= label["x"], (tid, label)
        # Every place the override is shown isolates it.
        for selector in ('tr[data-task="rtl"] td.desc', 'tr[data-task="rtl"] td.why'):
            assert isolated(page, selector, RTL), selector
        assert isolated(page, "table.tasks", RTL)

        page.locator(f'tr[data-task="{long_id}"] th a').click()
        expect(page.locator("#task-facts dd.desc")).to_contain_text("AAAA")
        assert fits(page), page.evaluate("document.documentElement.scrollWidth")
        page.screenshot(path=str(output / "long-task.png"))  # the 10 KB word makes full pages slow
        page.goto(server.base + f"/ui/task-lists/{listing['id']}")
        page.locator('tr[data-task="rtl"] th a').click()
        # The task page, not the list still on screen before the navigation ends.
        expect(page.locator("#task-facts dd.notes")).to_be_visible()
        for selector in ("#task-facts dd.notes", "#task-facts dd.desc"):
            assert isolated(page, selector, RTL), selector
        assert fits(page)
        page.screenshot(path=str(output / "rtl-task.png"))  # the 10 KB word makes full pages slow
