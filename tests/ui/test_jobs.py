"""The refine-job pages for the person on call (docs/jobs.md), in a real
browser on both databases: honest job states, retry / cancel / bulk actions,
and job lists with counts, search and live refresh.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from conftest import start_server, stop_server, watched_page
from test_dashboard import phase_body, run_plan, shot, wait_for

TIME = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}$")


@pytest.fixture
def server(backend):
    s = start_server(backend)
    yield s
    stop_server(s)


def in_phase(phase, ids, executor=None, project="proj-a", **extra):
    """`phase_body` for phase `phase` (its ids P1-… become {phase}-…)."""
    body = json.loads(json.dumps(phase_body(ids, executor, project)).replace('"P1', f'"{phase}'))
    body.update(extra)
    return body


def ended(server, job_id):
    return wait_for(
        lambda: (lambda j: j if j["status"] in ("succeeded", "failed", "cancelled") else None)(
            server.ok("GET", f"/v1/refine-jobs/{job_id}?wait=5")),
        timeout=90, what=f"job {job_id} to end")


def running(server, job_id):
    wait_for(lambda: server.ok("GET", f"/v1/refine-jobs/{job_id}")["status"] == "running",
             what=f"job {job_id} to run")


def test_job_states_are_honest(server, browser, output, backend):
    with watched_page(browser) as (page, watched):
        # Every L0 call fails: REST still says succeeded; the dashboard says degraded.
        degraded = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1", "P1-A2", "P1-A3"], executor="fail"))
        final = ended(server, degraded["id"])
        assert final["status"] == "succeeded"
        page.goto(server.base + f"/ui/jobs/{degraded['id']}")
        state = page.locator("#job-state .status")
        expect(state).to_have_text("succeeded — 3 of 3 L0 calls failed")
        expect(state).to_have_class(re.compile(r"\bst-degraded\b"))
        expect(page.locator("#job-took")).to_be_visible()
        times = page.locator("#log li time.at")
        expect(times).to_have_count(len(final["log"]))
        for text in times.all_inner_texts():
            assert TIME.match(text), text
        assert page.locator("#log li .line").all_inner_texts() == final["log"]
        shot(page, output, "job-degraded")

        # The lists count it as degraded; "succeeded" means clean successes only.
        clean = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1"], executor="slow"))
        assert ended(server, clean["id"])["status"] == "succeeded"
        page.goto(server.base + "/ui/jobs?status=degraded")
        expect(page.locator(f'tr[data-job="{degraded["id"]}"]')).to_have_count(1)
        expect(page.locator(f'tr[data-job="{clean["id"]}"]')).to_have_count(0)
        page.goto(server.base + "/ui/jobs?status=succeeded")
        expect(page.locator(f'tr[data-job="{clean["id"]}"]')).to_have_count(1)
        expect(page.locator(f'tr[data-job="{degraded["id"]}"]')).to_have_count(0)
        page.goto(server.base + "/ui/")
        expect(page.locator('a[href="/ui/jobs?status=degraded"] .n')).to_have_text("1")
        expect(page.locator('a[href="/ui/jobs?status=succeeded"] .n')).to_have_text("1")
        shot(page, output, "overview-degraded")

        # A budget stop: the L0s it kept from starting are "not started", and the log
        # says so instead of claiming they failed.
        body = phase_body(["P1-A1", "P1-A2", "P1-A3"], executor="cj")
        body["max_cost_usd"] = 0.01
        stopped = server.ok("POST", "/v1/refine-jobs", body)
        final = ended(server, stopped["id"])
        assert final["status"] == "failed" and final["error"]["code"] == "budget_exceeded", final
        page.goto(server.base + f"/ui/jobs/{stopped['id']}")
        for assignment in ("P1-A2", "P1-A3"):
            expect(page.locator(f'tr[data-assignment="{assignment}"] td.l0-status')).to_have_text("not started")
        expect(page.locator("#log")).to_contain_text("NOT STARTED: L0 for P1-A2 was not started:")
        expect(page.locator("#log")).not_to_contain_text("failed — proceeding")
        expect(page.locator(".problem")).to_contain_text("the job's budget of $0.01")
        shot(page, output, "job-budget-stopped")

        # A running job shows how long it has run; cancelled, its L0s read cancelled
        # and not started, never failed.
        hang = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1", "P1-A2"], executor="hang"))
        running(server, hang["id"])
        page.goto(server.base + f"/ui/jobs/{hang['id']}")
        expect(page.locator("#job-elapsed")).to_contain_text("running since")
        shot(page, output, "job-elapsed")
        server.ok("POST", f"/v1/refine-jobs/{hang['id']}/cancel", {})
        assert ended(server, hang["id"])["status"] == "cancelled"
        page.goto(server.base + f"/ui/jobs/{hang['id']}")
        expect(page.locator('tr[data-assignment="P1-A1"] td.l0-status')).to_have_text("cancelled")
        expect(page.locator('tr[data-assignment="P1-A2"] td.l0-status')).to_have_text("not started")
        expect(page.locator("table.l0s .st-failed")).to_have_count(0)
        expect(page.locator("#job-took")).to_be_visible()
        shot(page, output, "job-cancelled-l0s")


def test_retry_and_bulk_actions(server, browser, output, backend):
    with watched_page(browser) as (page, watched):
        # Cancel asks first, on a page of its own (no script needed), then cancels.
        hang = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1"], executor="hang"))
        running(server, hang["id"])
        page.goto(server.base + f"/ui/jobs/{hang['id']}")
        page.get_by_role("button", name="Cancel this job…").click()
        expect(page).to_have_url(re.compile(rf"/ui/jobs/{hang['id']}/cancel\??$"))
        expect(page.locator("#confirm-what")).to_contain_text("will be stopped")
        assert server.ok("GET", f"/v1/refine-jobs/{hang['id']}")["status"] == "running", "nothing changes before yes"
        shot(page, output, "cancel-confirm")
        page.get_by_role("button", name="Yes, cancel this job").click()
        expect(page.locator("#job-state")).to_have_text("cancelled", timeout=30_000)

        # Retry: a new job from the same request; each links to the other.
        page.get_by_role("button", name="Retry this job").click()
        expect(page.locator("#retry-of a")).to_have_text(hang["id"])
        retry_id = page.url.rsplit("/", 1)[1]
        assert retry_id != hang["id"]
        assert server.ok("GET", f"/v1/refine-jobs/{retry_id}")["retry_of"] == hang["id"]
        shot(page, output, "retry-new-job")
        page.locator("#retry-of a").click()
        expect(page.locator("#retried-by a")).to_have_text(retry_id)
        expect(page.get_by_role("button", name="Retry this job")).to_have_count(0)
        shot(page, output, "retry-original")

        # Bulk cancel from the filtered list: the confirmation says what will happen
        # to each selected job, the result what was done and what was refused.
        other = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1"], executor="hang"))
        page.goto(server.base + "/ui/jobs?q=proj-a")
        for job_id in (retry_id, other["id"], hang["id"]):
            page.locator(f'tr[data-job="{job_id}"] input[type="checkbox"]').check()
        page.get_by_role("button", name="Cancel selected…").click()
        expect(page.locator("#bulk-summary")).to_contain_text("2 of 3 jobs will be affected; 1 will be refused")
        expect(page.locator(f'tr[data-job="{hang["id"]}"] td.outcome')).to_contain_text("nothing to cancel")
        shot(page, output, "bulk-cancel-confirm")
        page.get_by_role("button", name="Yes, cancel 2 jobs").click()
        expect(page.locator("#bulk-summary")).to_contain_text("2 of 3 jobs: cancel done; 1 refused.")
        expect(page.locator(f'tr[data-job="{hang["id"]}"] td.outcome')).to_contain_text("refused")
        shot(page, output, "bulk-cancel-result")
        for job_id in (retry_id, other["id"]):
            assert ended(server, job_id)["status"] == "cancelled"

        # Bulk retry: the two cancelled jobs are retried; the one retried already is refused.
        page.goto(server.base + "/ui/jobs?status=cancelled")
        for job_id in (retry_id, other["id"], hang["id"]):
            page.locator(f'tr[data-job="{job_id}"] input[type="checkbox"]').check()
        page.get_by_role("button", name="Retry selected…").click()
        expect(page.locator(f'tr[data-job="{hang["id"]}"] td.outcome')).to_contain_text("retried already")
        page.get_by_role("button", name="Yes, retry 2 jobs").click()
        expect(page.locator("#bulk-summary")).to_contain_text("2 of 3 jobs: retry done; 1 refused.")
        shot(page, output, "bulk-retry-result")
        new_ids = []
        for job_id in (retry_id, other["id"]):
            link = page.locator(f'tr[data-job="{job_id}"] td.outcome a')
            expect(link).to_have_count(1)
            new_ids.append(link.inner_text())
            assert server.ok("GET", f"/v1/refine-jobs/{job_id}")["retried_by"] == new_ids[-1]
        for job_id in new_ids:
            server.ok("POST", f"/v1/refine-jobs/{job_id}/cancel", {})



def test_bulk_cancel_of_runs(server, browser, output, backend):
    """Runs are cancelled together as jobs are: a confirmation first, saying what
    will be refused, then the cancel of the others."""
    with watched_page(browser) as (page, watched):
        hanging = server.ok("POST", "/v1/refine-runs", {"plan": run_plan(), "project_id": "proj-a", "executor": "hang"})
        merged = server.ok("POST", "/v1/refine-runs", {"plan": run_plan(), "project_id": "proj-a"})
        wait_for(lambda: server.ok("GET", f"/v1/refine-runs/{merged['id']}")["status"] in ("succeeded", "failed"),
                 what="the builtin run to merge")
        page.goto(server.base + "/ui/runs")
        for run in (hanging, merged):
            page.locator(f'tr[data-run="{run["id"]}"] input[type="checkbox"]').check()
        expect(page.get_by_role("button", name="Retry selected…")).to_have_count(0)
        page.get_by_role("button", name="Cancel selected…").click()
        expect(page.locator("#bulk-summary")).to_contain_text("1 of 2 runs will be affected; 1 will be refused")
        expect(page.locator(f'tr[data-run="{merged["id"]}"] td.outcome')).to_contain_text("nothing to cancel")
        assert server.ok("GET", f"/v1/refine-runs/{hanging['id']}")["status"] == "running", "nothing changes before yes"
        shot(page, output, "bulk-cancel-runs-confirm")
        page.get_by_role("button", name="Yes, cancel 1 run").click()
        expect(page.locator("#bulk-summary")).to_contain_text("1 of 2 runs: cancel done; 1 refused.")
        expect(page.locator(f'tr[data-run="{hanging["id"]}"] td.outcome')).to_contain_text("cancel requested")
        shot(page, output, "bulk-cancel-runs-result")
        wait_for(lambda: server.ok("GET", f"/v1/refine-runs/{hanging['id']}")["status"] == "cancelled",
                 timeout=60, what="the run to end cancelled")
        watched.expected.add(400)
        page.goto(server.base + "/ui/runs/bulk?action=retry&id=" + hanging["id"])
        expect(page.locator(".problem")).to_contain_text("action: must be cancel")


def test_lists_count_search_and_refresh_live(server, browser, output, backend):
    with watched_page(browser) as (page, watched):
        a = server.ok("POST", "/v1/refine-jobs", in_phase("P7", ["P7-A1"], executor="slow"))
        b = server.ok("POST", "/v1/refine-jobs", in_phase("P8", ["P8-A1"], executor="fail", project="proj-b"))
        ended(server, a["id"])
        ended(server, b["id"])

        # Counts per state beside the list, each a link that filters.
        page.goto(server.base + "/ui/jobs")
        expect(page.locator('#job-counts li[data-state="succeeded"] .n')).to_have_text("1")
        expect(page.locator('#job-counts li[data-state="degraded"] .n')).to_have_text("1")
        row = page.locator(f'tr[data-job="{b["id"]}"]')
        expect(row.locator("td.error")).to_have_text("—")
        expect(row.locator("td.duration")).to_have_text(re.compile(r"\d+(\.\d)? m?s"))
        expect(row.locator("td.cost")).not_to_be_empty()
        page.locator('#job-counts li[data-state="degraded"] a').click()
        expect(page).to_have_url(re.compile(r"status=degraded"))
        expect(page.locator("table.jobs tbody tr[data-job]")).to_have_count(1)
        shot(page, output, "jobs-counts")

        # Search by phase, project and id.
        for query, shown, hidden in (("P7", a, b), ("proj-b", b, a), (a["id"], a, b)):
            page.goto(server.base + "/ui/jobs")
            page.fill("#f-q", query)
            page.get_by_role("button", name="Filter").click()
            expect(page.locator(f'tr[data-job="{shown["id"]}"]')).to_have_count(1)
            expect(page.locator(f'tr[data-job="{hidden["id"]}"]')).to_have_count(0)
        shot(page, output, "jobs-search")

        # Live: a job created through REST appears without a reload; the badge says live.
        page.goto(server.base + "/ui/jobs")
        page.evaluate("window.__still_here = true")
        expect(page.locator("#live-badge")).to_have_text("live")
        fresh = server.ok("POST", "/v1/refine-jobs", in_phase("P9", ["P9-A1"], executor="slow"))
        expect(page.locator(f'tr[data-job="{fresh["id"]}"]')).to_have_count(1, timeout=15_000)
        assert page.evaluate("window.__still_here === true"), "the page reloaded"
        shot(page, output, "jobs-live")

        # Overview, runs and tracks are live too.
        page.goto(server.base + "/ui/")
        page.evaluate("window.__still_here = true")
        expect(page.locator("#live-badge")).to_have_text("live")
        ended(server, fresh["id"])
        expect(page.locator('a[href="/ui/jobs?status=succeeded"] .n')).to_have_text("2", timeout=15_000)
        assert page.evaluate("window.__still_here === true"), "the page reloaded"
        for path in ("/ui/runs", "/ui/tracks"):
            page.goto(server.base + path)
            expect(page.locator("#live-badge")).to_have_text("live")
        shot(page, output, "tracks-live")


def test_live_list_catches_up_on_what_changed_before_its_stream(server, browser, backend):
    # A change between a page's render and its stream's first look (a slow
    # start, a lost connection) is never a "changed": the page must still show it.
    with watched_page(browser) as (page, watched):
        stream_open = {"allowed": False, "refused": 0}

        def hold_the_stream(route):
            if stream_open["allowed"]:
                route.continue_()
            else:
                # An empty stream that ends at once, as a lost connection does:
                # the browser reconnects (after 200 ms, as `retry` asks).
                stream_open["refused"] += 1
                route.fulfill(status=200, content_type="text/event-stream", body="retry: 200\n\n")

        page.route(re.compile(r"/ui/live/overview/events(\?|$)"), hold_the_stream)
        page.goto(server.base + "/ui/")
        # (page.wait_for_timeout, not a sleep: Playwright runs route handlers only
        # while the test waits on it.)
        wait_for(lambda: stream_open["refused"] > 0 or page.wait_for_timeout(100),
                 what="the overview to open its stream")
        expect(page.locator('a[href="/ui/jobs?status=succeeded"]')).to_have_count(0)
        ended(server, server.ok("POST", "/v1/refine-jobs", in_phase("P5", ["P5-A1"]))["id"])
        stream_open["allowed"] = True
        expect(page.locator('a[href="/ui/jobs?status=succeeded"] .n')).to_have_text("1", timeout=15_000)
