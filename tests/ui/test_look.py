"""Every page in both themes and on a phone, the job and run lists at 1440 px,
and the DAG at real sizes (12, 80 and 2,000 tasks).

One server per database serves the whole module: the pages are only read here,
except for the statuses each test sets on its own task list.
"""

from __future__ import annotations

import re

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from conftest import Watched, start_server, stop_server, watched_page
from test_dashboard import new_track, phase_body, run_plan, run_step, shot, task, task_ids, wait_for

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def create(server, tasks, team):
    return server.ok(
        "POST",
        "/v1/task-lists",
        {"project_id": "proj-look", "team_pk": team, "created_by": "planner", "tasks": tasks},
    )


def set_status(server, ids, task_id, *statuses, notes=None):
    for status in statuses:
        body = {"status": status}
        if notes and status == "failed":
            body["notes"] = notes
        server.ok("PATCH", f"/v1/tasks/{ids[task_id]}", body)


def tasks_12():
    return [
        task("a1", 1), task("a2", 1), task("a3", 1),
        task("b1", 2, ["a1"]), task("b2", 2, ["a2"]), task("b3", 2, ["a3"]),
        task("c1", 3, ["b1", "b2"]), task("c2", 3, ["b3"]), task("rc1", 4, ["c1"], reviews="c1", persona="reviewer"),
        task("d1", 4, ["c2", "a1"]), task("d2", 4, ["c1"]), task("d3", 4, ["b2"]),
    ]


def tasks_80():
    """10 waves of 8; each task needs its neighbour in the wave before and, from
    wave 3 on, one task two waves back (edges that cross a whole column)."""
    out = []
    for w in range(1, 11):
        for i in range(8):
            deps = []
            if w > 1:
                deps.append(f"w{w-1}-{i}")
                deps.append(f"w{w-1}-{(i + 3) % 8}")
            if w > 2 and i % 3 == 0:
                deps.append(f"w{w-2}-{(i + 5) % 8}")
            out.append(task(f"w{w}-{i}", w, sorted(set(deps))))
    return out


LARGE_WAVE = 67


def tasks_2000():
    """2,000 tasks in 30 waves of 67 (the last shorter); each needs the task at
    its place and the one after it in the wave before."""
    out = []
    for k in range(2000):
        w, i = k // LARGE_WAVE + 1, k % LARGE_WAVE
        deps = []
        if w > 1:
            deps.append(f"t{k - LARGE_WAVE}")
            if i + 1 < LARGE_WAVE:
                deps.append(f"t{k - LARGE_WAVE + 1}")
        out.append(task(f"t{k}", w, deps))
    return out


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def world(request):
    """A server with every kind of page to look at; yields (server, pages)."""
    server = start_server(request.param)
    try:
        yield server, build_world(server)
    finally:
        stop_server(server)


def build_world(server) -> dict[str, str]:
    """Task lists of 12, 80 and 2,000 tasks, jobs, a run and a track; returns
    the pages to look at, by name."""
    small = create(server, tasks_12(), "small")
    ids = task_ids(small)
    set_status(server, ids, "a1", "running", "done")
    set_status(server, ids, "a2", "running", "done")
    set_status(server, ids, "a3", "running", "failed", notes="cargo test: 3 failures")
    set_status(server, ids, "b1", "running")
    medium = create(server, tasks_80(), "medium")
    ids80 = task_ids(medium)
    for i in range(8):
        set_status(server, ids80, f"w1-{i}", "running", "done")
    set_status(server, ids80, "w2-1", "running")
    large = create(server, tasks_2000(), "large")
    job = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1", "P1-A2"], project="proj-look"))
    costed = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1"], executor="cj", project="proj-look"))
    # For the job list's columns: a failed job with a long error, and plain-text
    # agents' calls, whose cost reads "unknown".
    stopped = server.ok("POST", "/v1/refine-jobs", {
        **phase_body(["P1-A1", "P1-A2", "P1-A3"], executor="cj", project="proj-look"), "max_cost_usd": 0.01})
    plain = server.ok("POST", "/v1/refine-jobs", phase_body(["P1-A1"], executor="slow", project="proj-look"))
    run = server.ok("POST", "/v1/refine-runs", {"plan": run_plan(), "project_id": "proj-look"})
    for j in (stopped, plain):
        wait_for(lambda: server.ok("GET", f"/v1/refine-jobs/{j['id']}")["status"] in ("succeeded", "failed"),
                 what="a job to end", timeout=90)
    for j in (job, costed):
        wait_for(lambda: server.ok("GET", f"/v1/refine-jobs/{j['id']}")["status"] == "succeeded",
                 what="a job to finish")
    wait_for(lambda: server.ok("GET", f"/v1/refine-runs/{run['id']}")["status"] in ("succeeded", "failed"),
             what="the run to merge")
    new_track(server, "look-track", description="Dark mode and small screens")
    run_step(server, "look-track", "PLAN", "planner", "PASSED")
    pages = {
        "overview": "/ui/",
        "tasks-12": f"/ui/task-lists/{small['id']}",
        "tasks-80": f"/ui/task-lists/{medium['id']}",
        "tasks-2000": f"/ui/task-lists/{large['id']}",
        "tasks-2000-wave": f"/ui/task-lists/{large['id']}?wave=5",
        "task": f"/ui/task-lists/{small['id']}/tasks/a3",
        "jobs": "/ui/jobs",
        "job": f"/ui/jobs/{job['id']}",
        "job-usage": f"/ui/jobs/{costed['id']}",
        "runs": "/ui/runs",
        "run": f"/ui/runs/{run['id']}",
        "tracks": "/ui/tracks",
        "track": "/ui/tracks/look-track",
        "login": "/ui/login",
    }
    return pages


def settle(page):
    """Waits until the page's live parts (event streams) have spoken once."""
    page.wait_for_load_state("load")
    if page.locator("#task-list").count():
        expect(page.locator("#task-list")).to_have_attribute("data-live", "1")


# Contrast of every text in the DAG drawings against the shape it sits on,
# computed here because axe-core skips much SVG text.
SVG_CONTRAST = """() => {
    const rgb = (c) => (c.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
    const lum = ([r, g, b]) => [r, g, b].map((v) => {
        v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    }).reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
    const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
    const page = rgb(getComputedStyle(document.documentElement).backgroundColor);
    const out = [];
    document.querySelectorAll("svg.dag text").forEach((t) => {
        let back = page;
        for (let g = t.parentElement; g && g.tagName !== "svg"; g = g.parentElement) {
            const rect = Array.from(g.children).find((c) => c.tagName === "rect");
            if (rect) { back = rgb(getComputedStyle(rect).fill); break; }
        }
        const r = ratio(rgb(getComputedStyle(t).fill), back);
        if (r < 4.5) out.push(`${t.textContent.slice(0, 40)}: ${r.toFixed(2)}:1`);
    });
    return out;
}"""


def serious(page) -> list[str]:
    results = Axe().run(page)
    found = []
    for v in results.response["violations"]:
        if v["impact"] in ("serious", "critical"):
            targets = [n["target"] for n in v["nodes"][:3]]
            found.append(f"{v['id']} ({v['impact']}) on {len(v['nodes'])} nodes, e.g. {targets}")
    return found


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_nothing_serious_in_either_theme(world, browser, output, scheme):
    server, pages = world
    with watched_page(browser, viewport=DESKTOP, color_scheme=scheme) as (page, watched):
        problems = {}
        for name, path in pages.items():
            page.goto(server.base + path)
            settle(page)
            background = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
            assert (background == "rgb(13, 17, 23)") == (scheme == "dark"), (name, background)
            found = serious(page) + page.evaluate(SVG_CONTRAST)
            if found:
                problems[name] = found
            shot(page, output, name)
        assert not problems, problems


def test_no_page_is_wider_than_a_phone(world, browser, output):
    server, pages = world
    with watched_page(browser, viewport=PHONE) as (page, watched):
        wide = {}
        for name, path in pages.items():
            page.goto(server.base + path)
            settle(page)
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > PHONE["width"]:
                wide[name] = width
            page.screenshot(path=str(output / f"{name}.png"))
        assert not wide, wide
        # Tables scroll inside focusable, named regions; long ids are cut, whole in
        # their title and whole again while focused.
        page.goto(server.base + pages["jobs"])
        region = page.locator(".table-scroll").first
        expect(region).to_have_attribute("tabindex", "0")
        expect(region).to_have_attribute("role", "region")
        expect(region).to_have_attribute("aria-label", "Refine jobs")
        assert region.evaluate("r => r.scrollWidth > r.clientWidth"), "the table does not scroll inside"
        job_id = page.locator("table.jobs tbody tr").first.get_attribute("data-job")
        code = page.locator("table.jobs tbody tr").first.locator("code.id")
        expect(code).to_have_attribute("title", job_id)
        cut = code.evaluate("c => c.scrollWidth > c.clientWidth")
        assert cut, "a 36-character id should be cut at 390 px"
        # From the region, Tab reaches the first row's link (after its bulk-selection
        # checkbox): its id shows whole.
        region.focus()
        link = code.locator("xpath=ancestor::a")
        for _ in range(3):
            page.keyboard.press("Tab")
            if link.evaluate("a => a === document.activeElement"):
                break
        expect(link).to_be_focused()
        assert code.evaluate("c => c.scrollWidth <= c.clientWidth"), "the focused id is still cut"
        page.goto(server.base + pages["job"])
        expect(page.locator("pre.result")).to_have_attribute("tabindex", "0")
        expect(page.locator("ol.log")).to_have_attribute("tabindex", "0")


def test_theme_toggle_persists(world, browser, output):
    server, pages = world
    context = browser.new_context(viewport=DESKTOP, color_scheme="light")
    page = context.new_page()
    other = context.new_page()
    watched = Watched(page)
    page.goto(server.base + pages["tasks-12"])
    other.goto(server.base + "/ui/jobs")
    dark_bg = "rgb(13, 17, 23)"
    background = "getComputedStyle(document.documentElement).backgroundColor"
    toggle = page.locator("#theme-toggle")
    expect(toggle).to_be_visible()
    # The button says what it will do: switch to the other theme.
    expect(toggle).to_have_text("Dark theme")
    assert page.evaluate(background) == "rgb(255, 255, 255)"
    toggle.focus()
    page.keyboard.press("Enter")
    expect(toggle).to_have_text("Light theme")
    assert page.evaluate(background) == dark_bg
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    # Node text stays readable on its fill after the switch.
    assert page.evaluate(SVG_CONTRAST) == []
    shot(page, output, "toggled-dark")
    # The other open tab follows; a reload and a new tab start dark.
    expect(other.locator("html")).to_have_attribute("data-theme", "dark")
    page.reload()
    expect(page.locator("#theme-toggle")).to_have_text("Light theme")
    assert page.evaluate(background) == dark_bg
    third = context.new_page()
    third.goto(server.base + "/ui/runs")
    assert third.evaluate(background) == dark_bg
    # Back to light: chosen light wins over a dark system setting too.
    page.locator("#theme-toggle").click()
    dark_system = browser.new_context(viewport=DESKTOP, color_scheme="dark", storage_state=context.storage_state())
    fourth = dark_system.new_page()
    fourth.goto(server.base + "/ui/")
    expect(fourth.locator("#theme-toggle")).to_have_text("Dark theme")
    assert fourth.evaluate(background) == "rgb(255, 255, 255)"
    watched.assert_clean()
    dark_system.close()
    context.close()


WIDE = {"width": 1440, "height": 900}

# The words of the cells `selector` finds that stand on more than one line: each
# word of each text node (a hyphen ends a word, as the browser's line breaking
# has it), measured as a range (one client rect per line it is on).
BROKEN_WORDS = """(selector) => {
    const broken = [];
    for (const cell of document.querySelectorAll(selector)) {
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (const m of node.data.matchAll(/[^\\s-]+/g)) {
                const range = document.createRange();
                range.setStart(node, m.index);
                range.setEnd(node, m.index + m[0].length);
                const lines = new Set(Array.from(range.getClientRects(), (r) => Math.round(r.top)));
                if (lines.size > 1) broken.push(`${cell.className || cell.tagName}: ${m[0]}`);
            }
        }
    }
    return broken;
}"""

OVERFLOWING = """(selector) => Array.from(document.querySelectorAll(selector))
    .filter((cell) => cell.scrollWidth > cell.clientWidth).map((cell) => cell.textContent)"""


@pytest.mark.parametrize("name, table", [("jobs", "table.jobs"), ("runs", "table.runs")])
def test_list_columns_break_between_words_only(world, browser, output, name, table):
    """At 1440 px a heading or a short value (a state, a phase, "unknown") never
    breaks inside a word: columns size to their content, and only the error text
    wraps anywhere."""
    server, pages = world
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    watched = Watched(page)
    page.goto(server.base + pages[name])
    settle(page)
    assert page.locator(f"{table} thead th").count() >= 8
    assert page.locator(f"{table} tbody tr").count() >= (3 if name == "jobs" else 1)
    if name == "jobs":
        expect(page.locator(f"{table} td.error code").first).to_have_text("budget_exceeded")
        expect(page.locator(f"{table} td.cost .unknown").first).to_have_text("unknown")
    assert page.evaluate(BROKEN_WORDS, f"{table} thead th") == []
    assert page.evaluate(OVERFLOWING, f"{table} thead th") == []
    assert page.evaluate(BROKEN_WORDS, f"{table} tbody td:not(.error)") == []
    # The check sees a break: with every cell allowed to wrap anywhere again (as
    # before), the squeezed columns break their words.
    if name == "jobs":
        page.evaluate("""document.querySelectorAll("th, td, .status, .unknown")
            .forEach((e) => { e.style.overflowWrap = "anywhere"; })""")
        assert page.evaluate(BROKEN_WORDS, f"{table} thead th, {table} tbody td:not(.error)") != []
        page.reload()
        settle(page)
    shot(page, output, f"{name}-1440")
    watched.assert_clean()
    context.close()


# ---------------------------------------------------------------------------
# The DAG at real sizes.

SEGMENTS = """() => {
    const rects = Array.from(document.querySelectorAll("svg.dag g[data-i]")).map((g) => {
        const [x, y] = g.getAttribute("transform").match(/-?[\\d.]+/g).map(Number);
        const r = g.querySelector("rect");
        return { task: g.dataset.task, x, y, w: Number(r.getAttribute("width")), h: Number(r.getAttribute("height")) };
    });
    const crossings = [];
    const paths = Array.from(document.querySelectorAll("svg.dag .edges path"));
    for (const p of paths) {
        let x = 0, y = 0;
        const points = [];
        for (const [, cmd, arg] of p.getAttribute("d").matchAll(/([MLHV])\\s*([-\\d.,\\s]+)/g)) {
            const n = arg.trim().split(/[\\s,]+/).map(Number);
            if (cmd === "M" || cmd === "L") { [x, y] = n; }
            else if (cmd === "H") { x = n[0]; }
            else if (cmd === "V") { y = n[0]; }
            else { crossings.push("unexpected command " + cmd); }
            points.push([x, y]);
        }
        for (let k = 1; k < points.length; k++) {
            const [[ax, ay], [bx, by]] = [points[k - 1], points[k]];
            if (ax !== bx && ay !== by) { crossings.push("diagonal segment in " + p.getAttribute("d")); continue; }
            for (const r of rects) {
                // Strictly inside: a segment may start or end on a node's side.
                const e = 0.5;
                const overlapX = Math.min(ax, bx) < r.x + r.w - e && Math.max(ax, bx) > r.x + e;
                const overlapY = Math.min(ay, by) < r.y + r.h - e && Math.max(ay, by) > r.y + e;
                if (overlapX && overlapY) crossings.push(`${p.dataset.from}->${p.dataset.to} crosses ${r.task}`);
            }
        }
    }
    return { edges: paths.length, nodes: rects.length, crossings };
}"""


def edge_count(tasks, keep=lambda t: True):
    return sum(len(t["depends_on"]) for t in tasks if keep(t))


def test_dag_highlights_dependencies_and_routes_edges(world, browser, output):
    server, _ = world
    tasks = tasks_80()
    listing = create(server, tasks, "dag-80")
    ids = task_ids(listing)
    # Waves 1-6 done: the active wave (7) starts off-screen to the right.
    for t in tasks:
        if t["parallel_group"] <= 6:
            set_status(server, ids, t["task_id"], "running", "done")
    with watched_page(browser, viewport=DESKTOP) as (page, watched):
        page.goto(server.base + f"/ui/task-lists/{listing['id']}")
        settle(page)
        geometry = page.evaluate(SEGMENTS)
        assert geometry["nodes"] == 80
        assert geometry["edges"] == edge_count(tasks)
        assert geometry["crossings"] == [], geometry["crossings"][:10]

        # The active wave is scrolled into view; the waves beside it are named.
        expect(page.locator("#active-wave")).to_have_text("7")
        scroller = page.locator("#dag-scroll")
        active = page.locator('svg.dag g.wave[data-wave="7"] rect.wave-bg')
        view, box = scroller.bounding_box(), active.bounding_box()
        assert view["x"] <= box["x"] and box["x"] + box["width"] <= view["x"] + view["width"], (view, box)
        expect(page.locator("#dag-offscreen")).to_contain_text(re.compile(r"waves 1–\d+ are to the left"))
        shot(page, output, "active-wave-in-view")
        scroller.evaluate("s => { s.scrollLeft = 0; }")
        expect(page.locator("#dag-offscreen")).to_have_text(
            re.compile(r"^waves \d+–10 are to the right: scroll the graph to see them\.$"))

        # Hover: w5-0 needs w4-0, w4-3 and w3-5; w6-0, w6-5 and w7-3 need it.
        node = page.locator('svg.dag g.node[data-task="w5-0"]')
        node.scroll_into_view_if_needed()
        node.hover()
        trace = page.locator("#dag-trace")
        expect(trace).to_have_text("w5-0 depends on w3-5, w4-0, w4-3; needed by w6-0, w6-5, w7-3")
        for dep in ("w4-0", "w4-3", "w3-5"):
            expect(page.locator(f'svg.dag g.node[data-task="{dep}"]')).to_have_class(re.compile(r"\bhl-dep\b"))
        for needed in ("w6-0", "w6-5", "w7-3"):
            expect(page.locator(f'svg.dag g.node[data-task="{needed}"]')).to_have_class(re.compile(r"\bhl-needed\b"))
        expect(page.locator("svg.dag .edges path.hl")).to_have_count(6)
        expect(page.locator('svg.dag g.node[data-task="w5-1"]')).not_to_have_class(re.compile(r"\bhl-"))
        shot(page, output, "hover-highlight")

        # Keyboard: focusing a node's link traces it too; the first wave needs nothing.
        page.mouse.move(0, 0)
        page.locator('svg.dag a:has(g[data-task="w1-2"])').focus()
        expect(trace).to_have_text("w1-2 depends on nothing; needed by w2-2, w2-7")
        expect(page.locator('svg.dag g.node[data-task="w2-7"]')).to_have_class(re.compile(r"\bhl-needed\b"))


def test_opened_wave_of_a_large_list_is_listed_with_a_status_filter(world, browser, output):
    server, pages = world
    tasks = tasks_2000()
    listing = create(server, tasks, "dag-2000")
    ids = task_ids(listing)
    wave5 = [t for t in tasks if t["parallel_group"] == 5]
    failed = [t["task_id"] for t in wave5[:3]]
    for t in failed:
        set_status(server, ids, t, "running", "failed", notes="broke")
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    watched = Watched(page, expected_statuses=(400,))
    base = server.base + f"/ui/task-lists/{listing['id']}"
    page.goto(base)
    settle(page)
    expect(page.locator("svg.dag.summary g.wave-box")).to_have_count(30)
    expect(page.locator("#dag-offscreen")).to_contain_text("are to the right")
    page.locator('svg.dag g.wave-box[data-wave="5"]').click()
    expect(page).to_have_url(re.compile(r"\?wave=5$"))
    settle(page)

    # A list this large lists its opened wave, not drawn task by task: the
    # wave's box, its card marked, and its tasks in the table.
    expect(page.locator("#wave-listed")).to_contain_text("not drawn")
    expect(page.locator("svg.dag g.node")).to_have_count(0)
    expect(page.locator("svg.dag.summary g.wave-box")).to_have_count(1)
    expect(page.locator('svg.dag g.wave-box[data-wave="5"]')).to_contain_text(f"{LARGE_WAVE} tasks")
    expect(page.locator('#waves li[data-wave="5"]')).to_have_class(re.compile(r"\bopened\b"))
    expect(page.locator("table.tasks tbody tr")).to_have_count(LARGE_WAVE)
    expect(page.locator("#tasks-h")).to_have_text("Tasks of wave 5")
    shot(page, output, "wave-5")

    # The status filter is the server's: failed only.
    page.locator("#f-status").select_option("failed")
    page.locator("#wave-filter button").click()
    expect(page).to_have_url(re.compile(r"\?wave=5&status=failed$"))
    expect(page.locator("table.tasks tbody tr")).to_have_count(len(failed))
    for t in failed:
        expect(page.locator(f'table.tasks tr[data-task="{t}"] .st')).to_have_text("failed")
    expect(page.locator("#tasks-h")).to_have_text("Tasks of wave 5 that are failed")
    shot(page, output, "wave-5-failed")

    # A status that is no status: 400, naming the field, nothing drawn.
    response = page.goto(base + "?wave=5&status=exploded")
    assert response.status == 400
    expect(page.locator("main")).to_contain_text("status")
    watched.assert_clean()
    context.close()
