#!/usr/bin/env python3
"""plangate's traces as a real Arize Phoenix receives them (docs/observability.md).

An orchestrator (this script, traced with the OpenTelemetry Python SDK and exporting
its own span to the same Phoenix) opens a span, then under its W3C `traceparent`
stores a task list and starts a refine job whose L0s are fake priced agents
(tests/fixtures/l0/l0.sh in `claude-json` mode, priced from the config's table). The
real plangate binary exports its spans over OTLP/HTTP to Phoenix. Once the job has
succeeded and the server has stopped (which flushes its batch), the trace is read back
through Phoenix's REST API (`GET /v1/projects/{project}/spans?trace_id=`) and must hold:

    orchestrator span
    ├── POST /v1/task-lists        http.route, http.response.status_code
    │   └── gate task list         plangate.tasks, plangate.waves, plangate.violations
    └── POST /v1/refine-jobs       http.route, http.response.status_code
        └── refine job             plangate.job_id, plangate.phase_id, plangate.project_id
            └── chat {model}  ×N   gen_ai.*, llm.*, plangate.cost_usd, plangate.attempt

with the tokens and cost of each L0 span equal to what GET /v1/refine-jobs/{id} and
/assignments report. A missing span or attribute fails with a message naming it.

Spans land in the Phoenix project named by the resource attribute
`openinference.project.name` (set here through OTEL_RESOURCE_ATTRIBUTES); without it
Phoenix files them under "default".

    python tests/traces/check_phoenix.py --phoenix http://127.0.0.1:6006 --backend sqlite
    ... --screenshot docs/images/phoenix-refine-trace.png   # also photograph the trace

Environment: PLANGATE_TEST_PG_URL (Postgres admin URL), CHROMIUM (for --screenshot).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import urllib.parse
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import format_span_id, format_trace_id, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plangate_server import L0, ROOT, CheckFailed, Plangate, StartFailed, check, start, task  # noqa: E402
from plangate_server import call as http  # noqa: E402

# The fake agent's answer per call (l0.sh claude-json): tokens as reported, no cost,
# so plangate prices it from the table below (docs/jobs.md, "Where the numbers come from").
MODEL = "claude-fake"
INPUT_TOKENS, OUTPUT_TOKENS = 1234, 567
PRICE_IN, PRICE_OUT = 3.0, 15.0
ASSIGNMENTS = ["P1-A1", "P1-A2"]
PROJECT_ID = "traces-demo"


def ok(method: str, url: str, body=None, headers=None):
    status, answer = http(method, url, body, headers)
    check(200 <= status < 300, f"{method} {url}: {status} {answer}")
    return status, answer


TASKS = [task("T1", 1), task("T2", 1), task("T3", 2, ["T1"]), task("R3", 3, ["T3"], reviews="T3", persona="reviewer")]


def phase_body():
    assignments = [
        {
            "id": a, "phase_id": "P1", "name": f"Assignment {a}", "goal": "Do one thing well.",
            "technical_approach": "Small steps.", "dependency_notes": "", "overlap_notes": "",
            "proposed_work_packages": [{"id_suffix": "WP1", "name": "first", "estimated_files": [f"src/f{i}.rs"]}],
        }
        for i, a in enumerate(ASSIGNMENTS)
    ]
    return {
        "context": {"schema_version": 1, "phase_id": "P1", "assignments": assignments,
                    "peer_summaries": [{"id": "P2-A1", "name": "Peer", "goal": "Other"}]},
        "refined_plan": {"task": "Ship it", "phases": [
            {"id": "P1", "name": "Phase one", "goal": "g", "scope": "s", "technical_approach": "t",
             "relationship_notes": "", "ordering": 1}]},
        "task_text": "The task: ship it.",
        "project_id": PROJECT_ID,
        "executor": "priced",
    }


def start_plangate(binary: Path, backend: str, phoenix: str, project: str) -> Plangate:
    """The real server binary, exporting its spans to Phoenix (and only there: the
    caller's own OTEL_* variables are not passed on)."""
    config = (
        "[executors.priced]\nkind = \"command\"\noutput = \"claude-json\"\n"
        f"model = \"{MODEL}\"\n"
        f"argv = [\"{L0}\", \"claude-json\", \"none\", \"{INPUT_TOKENS}\", \"{OUTPUT_TOKENS}\", \"{MODEL}\"]\n"
        "timeout_secs = 60\n"
        f"[prices.\"{MODEL}\"]\ninput_per_mtok = {PRICE_IN}\noutput_per_mtok = {PRICE_OUT}\n"
    )
    env = dict(
        PLANGATE_API_TOKENS="",
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix,
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
    )
    try:
        return start(binary, backend, config, env, prefix="plangate-traces-", drop_env=("OTEL_",))
    except StartFailed as failure:
        raise CheckFailed(str(failure)) from None


def phoenix_spans(phoenix: str, project: str, trace_id: str) -> list[dict]:
    spans, cursor = [], None
    while True:
        query = {"trace_id": trace_id, "limit": 1000}
        if cursor:
            query["cursor"] = cursor
        url = f"{phoenix}/v1/projects/{urllib.parse.quote(project)}/spans?{urllib.parse.urlencode(query)}"
        status, answer = http("GET", url)
        if status == 404:  # the project appears with its first span
            return []
        check(status == 200, f"Phoenix GET {url}: {status} {answer}")
        spans += answer["data"]
        cursor = answer.get("next_cursor")
        if not cursor:
            return spans


def wait_for_trace(phoenix: str, project: str, trace_id: str, complete, timeout: float = 60.0) -> list[dict]:
    """Phoenix ingests OTLP in the background: poll until `complete(spans)` or time out,
    then return what is there (the checks below say what is missing)."""
    deadline = time.monotonic() + timeout
    while True:
        spans = phoenix_spans(phoenix, project, trace_id)
        if complete(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


def describe(spans: list[dict]) -> str:
    return "\n".join(
        f"  {s['name']!r} span={s['context']['span_id']} parent={s.get('parent_id')} kind={s.get('span_kind')}"
        for s in sorted(spans, key=lambda s: s["start_time"])
    ) or "  (no spans)"


def one(spans: list[dict], name: str, parent: str | None, what: str) -> dict:
    found = [s for s in spans if s["name"] == name]
    check(found, f"no span named {name!r} ({what}) in the trace; Phoenix holds:\n{describe(spans)}")
    children = [s for s in found if s.get("parent_id") == parent]
    check(len(children) == 1,
          f"expected one {name!r} span ({what}) whose parent is {parent}, found "
          f"{[(s['context']['span_id'], s.get('parent_id')) for s in found]}; trace:\n{describe(spans)}")
    return children[0]


def attribute(span: dict, key: str, expected=None, *, approx: bool = False):
    attrs = span.get("attributes") or {}
    check(key in attrs, f"span {span['name']!r} lacks attribute {key!r}; it has {sorted(attrs)}")
    value = attrs[key]
    # Numbers must arrive as numbers (the semantic conventions type them; Phoenix's
    # filters and sums compare numbers), not as their text.
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        check(isinstance(value, (int, float)) and not isinstance(value, bool),
              f"span {span['name']!r}: {key} is {value!r} ({type(value).__name__}), expected the number {expected!r}")
    if expected is not None:
        same = math.isclose(float(value), float(expected), rel_tol=1e-9, abs_tol=1e-12) if approx else value == expected
        check(same, f"span {span['name']!r}: {key} = {value!r}, expected {expected!r}")
    return value


def run_once(binary: Path, backend: str, phoenix: str, screenshot: Path | None) -> None:
    project = f"plangate-ci-{backend}"
    provider = TracerProvider(resource=Resource.create(
        {"service.name": "orchestrator", "openinference.project.name": project}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces")))
    tracer = provider.get_tracer("check_phoenix")

    server = start_plangate(binary, backend, phoenix, project)
    try:
        _, report = ok("POST", server.base + "/v1/task-lists/validate", {"tasks": TASKS})
        check(report["valid"], f"the example task list does not pass the gate: {report}")
        caller = tracer.start_span("orchestrator: plan and refine", attributes={"orchestrator.backend": backend})
        headers: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(headers, context=set_span_in_context(caller))
        trace_id = format_trace_id(caller.get_span_context().trace_id)
        caller_id = format_span_id(caller.get_span_context().span_id)

        list_status, _ = ok("POST", server.base + "/v1/task-lists",
                            {"project_id": PROJECT_ID, "team_pk": "cycle-1", "created_by": "planner",
                             "tasks": TASKS}, headers)
        job_status, job = ok("POST", server.base + "/v1/refine-jobs", phase_body(), headers)
        deadline = time.monotonic() + 120
        while True:
            _, state = ok("GET", f"{server.base}/v1/refine-jobs/{job['id']}")
            if state["status"] not in ("queued", "running"):
                break
            check(time.monotonic() < deadline, f"the refine job is still {state['status']} after 120 s")
            time.sleep(0.2)
        check(state["status"] == "succeeded", f"the refine job ended {state['status']}: {state}")
        _, assignments = ok("GET", f"{server.base}/v1/refine-jobs/{job['id']}/assignments")
        caller.end()
        server.stop(timeout=60)
        check(not server.errors(), "the server logged errors:\n" + "\n".join(server.errors()[:20]))
    finally:
        server.cleanup(timeout=60)
        provider.shutdown()

    usage = state["usage"]
    expected_llm = len(ASSIGNMENTS)
    spans = wait_for_trace(
        phoenix, project, trace_id,
        lambda found: sum(s["name"] == f"chat {MODEL}" for s in found) >= expected_llm
        and any(s["name"] == "gate task list" for s in found),
    )
    print(f"{backend}: Phoenix project {project!r}, trace {trace_id}, {len(spans)} spans:\n{describe(spans)}")

    one(spans, "orchestrator: plan and refine", None, "the caller's own span")
    create = one(spans, "POST /v1/task-lists", caller_id, "the task-list create, child of the caller's traceparent")
    attribute(create, "http.route", "/v1/task-lists")
    attribute(create, "http.response.status_code", list_status)
    gate = next((s for s in spans if s["name"] == "gate task list"
                 and s.get("parent_id") == create["context"]["span_id"]), None)
    check(gate, f"no 'gate task list' span under the task-list create; trace:\n{describe(spans)}")
    attribute(gate, "plangate.tasks", len(TASKS))
    attribute(gate, "plangate.waves", len(report["waves"]))
    attribute(gate, "plangate.violations", 0)

    start = one(spans, "POST /v1/refine-jobs", caller_id, "the refine-job create, child of the caller's traceparent")
    attribute(start, "http.route", "/v1/refine-jobs")
    attribute(start, "http.response.status_code", job_status)
    job_span = one(spans, "refine job", start["context"]["span_id"], "the job, child of the request that created it")
    attribute(job_span, "plangate.job_id", job["id"])
    attribute(job_span, "plangate.phase_id", "P1")
    attribute(job_span, "plangate.project_id", PROJECT_ID)

    calls = [s for s in spans if s["name"] == f"chat {MODEL}"]
    check(all(s.get("parent_id") == job_span["context"]["span_id"] for s in calls),
          f"an L0 span is not a child of the job span; trace:\n{describe(spans)}")
    check(len(calls) == len(assignments) == usage["calls"],
          f"{len(calls)} L0 spans, {len(assignments)} assignments, the job reports {usage['calls']} calls")
    for call in calls:
        check(call.get("span_kind") == "LLM" or (call.get("attributes") or {}).get("openinference.span.kind") == "LLM",
              f"L0 span kind is {call.get('span_kind')!r}, not LLM (openinference.span.kind)")
        attribute(call, "gen_ai.operation.name", "chat")
        attribute(call, "gen_ai.system", "command")
        attribute(call, "gen_ai.provider.name", "command")
        attribute(call, "gen_ai.request.model", MODEL)
        attribute(call, "gen_ai.response.model", MODEL)
        attribute(call, "llm.model_name", MODEL)
        attribute(call, "plangate.attempt")
        prompt = attribute(call, "gen_ai.usage.input_tokens")
        completion = attribute(call, "gen_ai.usage.output_tokens")
        attribute(call, "llm.token_count.prompt", prompt)
        attribute(call, "llm.token_count.completion", completion)
        attribute(call, "llm.token_count.total", prompt + completion)

    reported = sorted((a["usage"]["input_tokens"], a["usage"]["output_tokens"], a["usage"]["cost_usd"])
                      for a in assignments)
    traced = sorted((c["attributes"]["gen_ai.usage.input_tokens"], c["attributes"]["gen_ai.usage.output_tokens"],
                     attribute(c, "plangate.cost_usd")) for c in calls)
    check([r[:2] for r in reported] == [t[:2] for t in traced],
          f"tokens per L0: the API reports {reported}, the spans carry {traced}")
    for r, t in zip(reported, traced):
        check(math.isclose(r[2], t[2], rel_tol=1e-9), f"cost per L0: the API reports {r[2]}, a span carries {t[2]}")
    check(sum(t[0] for t in traced) == usage["input_tokens"] and sum(t[1] for t in traced) == usage["output_tokens"],
          f"the job reports {usage['input_tokens']} in / {usage['output_tokens']} out, "
          f"the spans add up to {sum(t[0] for t in traced)} / {sum(t[1] for t in traced)}")
    check(math.isclose(sum(t[2] for t in traced), usage["cost_usd"], rel_tol=1e-9),
          f"the job costs {usage['cost_usd']}, the spans add up to {sum(t[2] for t in traced)}")
    print(f"{backend}: request -> job -> {len(calls)} L0 spans in the caller's trace; "
          f"{usage['input_tokens']} in / {usage['output_tokens']} out tokens, ${usage['cost_usd']:.6f}, as the job reports")

    if screenshot:
        photograph(phoenix, project, trace_id, min(calls, key=lambda c: c["start_time"]), screenshot)


def photograph(phoenix: str, project: str, trace_id: str, call: dict, path: Path) -> None:
    """Phoenix's page of the caller's trace, its first L0 span selected (docs/observability.md)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    _, answer = ok("GET", f"{phoenix}/v1/projects/{urllib.parse.quote(project)}")
    project_gid = answer["data"]["id"]
    url = f"{phoenix}/projects/{project_gid}/traces/{trace_id}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1400, "height": 1050})
        page.goto(url)
        # The span tree renders in steps: a click that lands before it settles may
        # select nothing, so click again until the span's attribute table shows
        # (other copies of the text on the page are hidden).
        # The detail panel names the selected span by its id; the attribute table
        # renders only the rows in view, so no attribute is a reliable sign.
        selected = page.locator(f"text={call['context']['span_id']} >> visible=true").first
        for attempt in range(5):
            page.locator(f"text={call['name']} >> visible=true").first.click()
            try:
                selected.wait_for(timeout=5000)
                break
            except PlaywrightTimeout:
                if attempt == 4:
                    raise
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(path))
        browser.close()
    print(f"screenshot of {url}: {path} ({path.stat().st_size // 1024} KiB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, default=ROOT / "target/debug/plangate")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--phoenix", required=True, help="Phoenix base URL, e.g. http://127.0.0.1:6006")
    parser.add_argument("--screenshot", type=Path,
                        help="also save a PNG of Phoenix's page of the trace (.ci/traces.sh: TRACES_SCREENSHOT)")
    args = parser.parse_args()
    try:
        run_once(args.binary, args.backend, args.phoenix.rstrip("/"), args.screenshot)
    except CheckFailed as failure:
        print(f"FAILED ({args.backend}): {failure}", file=sys.stderr)
        return 1
    print(f"{args.backend}: Phoenix holds the trace as docs/observability.md describes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
