"""The whole plangate flow through the official MCP Python SDK (docs/mcp.md).

A real client nobody here wrote drives the real binary: over Streamable HTTP
(`plangate serve`, `/mcp` and `/mcp/readonly`, bearer token, both the handshake-era
`initialize` and the modern per-request negotiation) and over stdio (`plangate mcp`,
with no server running while the refine job runs), on SQLite or Postgres.

    python flow.py --binary target/debug/plangate --backend sqlite|postgres

Prints the largest tool answer of the flow in bytes; exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from stdio_tracks import check_stdio_tracks

from agents import AgentsFailure, check_agents, history_by_serving, rest_history

from ids import check_ids

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
TOKEN = "mcp-flow-token-0123456789"
LIMITED = "mcp-flow-limited-0123456789"
ALL_TOOLS = {
    "validate_task_list", "create_task_list", "ready_tasks", "set_task_status",
    "project_status", "plan_loop", "import_track", "track_step", "start_refine", "refine_status",
    "cancel_refine", "claim_task", "heartbeat_task", "track_history", "retry_refine_job",
}
READ_ONLY_TOOLS = {"validate_task_list", "ready_tasks", "project_status", "plan_loop", "refine_status",
                   "track_history"}

TASKS = [
    {"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1,
     "writes": ["src/a.py"], "description": "write a"},
    {"task_id": "t-2", "assigned_persona": "dev", "parallel_group": 1,
     "writes": ["src/b.py"], "description": "write b"},
    {"task_id": "t-3", "assigned_persona": "rev", "parallel_group": 2, "depends_on": ["t-1"],
     "reads": ["src/a.py"], "writes": ["docs/a.md"], "description": "document a"},
    {"task_id": "t-4", "assigned_persona": "rev", "parallel_group": 3, "depends_on": ["t-3"],
     "reads": ["docs/a.md"], "description": "review the docs"},
]


class Failure(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Failure(message)


class Recorder:
    """Calls tools and remembers the size of every answer."""

    def __init__(self, client: Client, label: str) -> None:
        self.client = client
        self.label = label
        self.largest = (0, "")

    async def call(self, name: str, arguments: dict, expect_error: bool = False):
        result = await self.client.call_tool(name, arguments)
        text = "".join(block.text for block in result.content if block.type == "text")
        size = len(text.encode())
        if size > self.largest[0]:
            self.largest = (size, f"{self.label} {name}")
        check(bool(result.is_error) == expect_error,
              f"{self.label} {name}: is_error={result.is_error}: {text[:500]}")
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text


TOOLSNAPS = Path(__file__).resolve().parent.parent / "fixtures" / "toolsnaps"


async def tool_names(client: Client) -> set[str]:
    """The tools the SDK lists; each as the reviewed snapshot has it (docs/testing.md)."""
    listed = await client.list_tools()
    for tool in listed.tools:
        schema = tool.input_schema
        snapshot = json.loads((TOOLSNAPS / f"{tool.name}.json").read_text())
        check(schema == snapshot["inputSchema"], f"{tool.name}: input schema differs from its snapshot")
        check(tool.description == snapshot["description"], f"{tool.name}: description differs from its snapshot")
        check(schema.get("type") == "object", f"{tool.name}: schema type")
        for field, prop in schema.get("properties", {}).items():
            check(bool(prop.get("description")), f"{tool.name}.{field} has no description")
    return {tool.name for tool in listed.tools}


async def flow(client: Client, label: str, project: str, track_id: str, server_running) -> Recorder:
    """validate, create, ready, set status with a cascade, status, plan a loop, a
    track step, a refine job with the builtin executor to its result."""
    calls = Recorder(client, label)
    check(await tool_names(client) == ALL_TOOLS, f"{label}: tools")

    report = await calls.call("validate_task_list", {"tasks": TASKS})
    check(report["valid"] is True and report["waves"] == [["t-1", "t-2"], ["t-3"], ["t-4"]],
          f"{label}: validate {report}")
    cyclic = [dict(TASKS[0], depends_on=["t-1"])]
    report = await calls.call("validate_task_list", {"tasks": cyclic})
    check(report["valid"] is False and report["errors"][0]["task_ids"] == ["t-1"],
          f"{label}: cyclic {report}")

    rejected = await calls.call(
        "create_task_list",
        {"project_id": project, "team_pk": "cycle-1", "created_by": "pm", "tasks": cyclic},
        expect_error=True)
    check(rejected["code"] == "dag_invalid" and rejected["attempt"] == 1
          and rejected["escalate"] is False and rejected["reprompt"], f"{label}: rejected {rejected}")
    created = await calls.call(
        "create_task_list",
        {"project_id": project, "team_pk": "cycle-1", "created_by": "pm", "tasks": TASKS})
    ids = {task["task_id"]: task["id"] for task in created["tasks"]}
    check(set(ids) == {"t-1", "t-2", "t-3", "t-4"} and created["waves"][0] == ["t-1", "t-2"],
          f"{label}: created {created}")
    list_id = created["task_list_id"]

    ready = await calls.call("ready_tasks", {"task_list_id": list_id})
    check(ready["wave"] == 1 and {t["task_id"] for t in ready["tasks"]} == {"t-1", "t-2"},
          f"{label}: ready {ready}")
    check(set(ready["tasks"][0]) == {"id", "task_id", "assigned_persona", "description", "writes", "reads"},
          f"{label}: ready fields {ready}")

    for task, status in [("t-1", "running"), ("t-1", "done"), ("t-2", "running"), ("t-3", "running")]:
        moved = await calls.call("set_task_status", {"task_id": ids[task], "status": status})
        check(moved["task"]["status"] == status, f"{label}: {task} {moved}")
    illegal = await calls.call("set_task_status", {"task_id": ids["t-1"], "status": "running"},
                               expect_error=True)
    check(illegal["code"] == "illegal_transition", f"{label}: illegal {illegal}")
    failed = await calls.call("set_task_status",
                              {"task_id": ids["t-3"], "status": "failed", "notes": "tests red"})
    check(failed["cascaded"] == [ids["t-4"]], f"{label}: cascade {failed}")

    status = await calls.call("project_status", {"project_id": project, "team_pk": "cycle-1"})
    check(status["counts"]["done"] == 1 and status["counts"]["running"] == 1
          and status["counts"]["failed"] == 1 and status["counts"]["abandoned"] == 1
          and status["in_flight"] == 1, f"{label}: status {status}")

    request = json.loads((EXAMPLES / "loop_plan_request.json").read_text())
    plan = await calls.call("plan_loop", request)
    check(isinstance(plan, dict) and plan.get("dag"), f"{label}: plan {str(plan)[:300]}")
    markdown = await calls.call("plan_loop", dict(request, format="markdown"))
    check(isinstance(markdown, str) and "```yaml" in markdown, f"{label}: plan.md {markdown[:300]}")
    bad = await calls.call("plan_loop", dict(request, tasks=[{"id": "1.1", "name": "x", "phase": 1,
                                                              "depends_on": ["9.9"]}]),
                           expect_error=True)
    check(bad["code"] == "dag_invalid", f"{label}: bad plan {bad}")

    started = await calls.call("track_step", {"track_id": track_id, "step": "PLAN",
                                              "action": "start", "agent": "planner"})
    check(started["current_step"] == "PLAN" and started["step_status"] == "IN_PROGRESS"
          and started["legal_next"] == ["complete PLAN"], f"{label}: start {started}")
    stale = await calls.call("track_step", {"track_id": track_id, "step": "PLAN", "action": "complete",
                                            "outcome": "PASSED", "if_match": started["revision"] - 1},
                             expect_error=True)
    check(stale["code"] == "stale_etag", f"{label}: stale {stale}")
    done = await calls.call("track_step", {"track_id": track_id, "step": "PLAN", "action": "complete",
                                           "outcome": "PASSED", "if_match": started["revision"]})
    check(done["current_step"] == "EVALUATE_PLAN" and done["revision"] > started["revision"],
          f"{label}: complete {done}")
    wrong = await calls.call("track_step", {"track_id": track_id, "step": "EXECUTE", "action": "start",
                                            "agent": "dev"}, expect_error=True)
    check(wrong["code"] == "illegal_transition" and wrong["legal"] == ["start EVALUATE_PLAN"],
          f"{label}: wrong step {wrong}")

    # The refine job: over stdio nothing but the `plangate mcp` process runs it.
    check(server_running() == (not label.startswith("stdio")), f"{label}: server state")
    context = json.loads((EXAMPLES / "context_P2.json").read_text())
    context.pop("task_file_path", None)
    refined_plan = json.loads((EXAMPLES / "refined_plan.json").read_text())
    task_text = (EXAMPLES / "task_input.md").read_text()
    submission = {"context": context, "refined_plan": refined_plan, "task_text": task_text,
                  "executor": "builtin", "project_id": project, "idempotency_key": f"k-{label}"}
    job = await calls.call("start_refine", submission)
    check(job["status"] in ("queued", "running", "succeeded"), f"{label}: job {job}")
    again = await calls.call("start_refine", submission)
    check(again["job_id"] == job["job_id"], f"{label}: idempotent {again}")
    for _ in range(30):
        state = await calls.call("refine_status", {"job_id": job["job_id"], "wait_seconds": 10})
        if state["status"] in ("succeeded", "failed", "cancelled"):
            break
    check(state["status"] == "succeeded", f"{label}: refine {state}")
    result = state["result"]
    check(result["schema_version"] == 1 and {a["id"] for a in result["assignments"]}
          == {a["id"] for a in context["assignments"]}, f"{label}: result {str(result)[:300]}")
    check(state["progress"]["l0_total"] == len(context["assignments"]), f"{label}: progress {state}")
    cancelled = await calls.call("cancel_refine", {"job_id": job["job_id"]})
    check(cancelled["status"] == "succeeded", f"{label}: cancel after success {cancelled}")

    # Wrong argument types are tool errors with the REST code, never a crash.
    wrong_type = await calls.call("ready_tasks", {"task_list_id": 42}, expect_error=True)
    check(wrong_type["code"] == "invalid_field" and wrong_type["field"] == "task_list_id",
          f"{label}: wrong type {wrong_type}")
    return calls


@contextmanager
def database(backend: str, scratch: Path):
    if backend == "sqlite":
        yield f"sqlite://{scratch / 'plangate.db'}"
        return
    admin = os.environ.get("PLANGATE_TEST_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    name = f"plangate_test_mcp_{uuid.uuid4().hex}"
    subprocess.run(["psql", admin, "-qc", f"CREATE DATABASE {name}"], check=True)
    try:
        yield f"{admin.rsplit('/', 1)[0]}/{name}"
    finally:
        subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"],
                       check=False)


class Server:
    """`plangate serve` on a free port; its address is read from its log."""

    def __init__(self, binary: str, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [binary, "serve"], env=env | {"PLANGATE_BIND": "127.0.0.1:0", "PLANGATE_LOG_FORMAT": "json"},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.base = None
        for line in self.process.stderr:
            if "plangate listening" in line:
                self.base = "http://" + json.loads(line)["address"]
                break
        check(self.base is not None, "the server did not start")
        # Keep draining its log so it never blocks on a full pipe.
        threading.Thread(target=self.process.stderr.read, daemon=True).start()

    def running(self) -> bool:
        return self.process.poll() is None

    def put_track(self, track_id: str) -> None:
        document = json.loads((EXAMPLES / "metadata_v1.json").read_text())
        document["track_id"] = track_id
        request = urllib.request.Request(
            f"{self.base}/v1/tracks/{track_id}", data=json.dumps(document).encode(), method="PUT",
            headers={"content-type": "application/json", "authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request) as response:
            check(response.status == 201, f"track import: {response.status}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def http_client(base: str, path: str, token: str, mode: str) -> Client:
    headers = {"Authorization": f"Bearer {token}"}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120))
    return Client(streamable_http_client(f"{base}{path}", http_client=http), mode=mode, cache=None)


async def run(binary: str, backend: str) -> int:
    largest = (0, "")
    with tempfile.TemporaryDirectory(prefix="plangate-mcp-") as scratch, \
            database(backend, Path(scratch)) as url:
        env = dict(os.environ, DATABASE_URL=url, PLANGATE_API_TOKENS=f"{TOKEN},{LIMITED}:other-project",
                   RUST_LOG="info")

        server = Server(binary, env)
        try:
            for mode in ("legacy", "auto"):
                label = f"http-{mode}"
                server.put_track(f"track-{label}")
                async with http_client(server.base, "/mcp", TOKEN, mode) as client:
                    calls = await flow(client, label, f"proj-{label}", f"track-{label}", server.running)
                    largest = max(largest, calls.largest)
            async with http_client(server.base, "/mcp/readonly", TOKEN, "legacy") as client:
                check(await tool_names(client) == READ_ONLY_TOOLS, "readonly tools")
            await check_ids("http", lambda: http_client(server.base, "/mcp", TOKEN, "legacy"), lambda: http_client(server.base, "/mcp/readonly", TOKEN, "legacy"), lambda: http_client(server.base, "/mcp", "wrong-token-0123456789", "legacy"))
            async with http_client(server.base, "/mcp", LIMITED, "legacy") as client:
                check(await tool_names(client) == ALL_TOOLS, "limited tools")
                calls = Recorder(client, "limited")
                refused = await calls.call("project_status", {"project_id": "proj-http-legacy"},
                                           expect_error=True)
                check(refused["code"] == "forbidden_project", f"limited: {refused}")
            # A wrong token is refused before any MCP message is read.
            try:
                async with http_client(server.base, "/mcp", "wrong-token-0123456789", "legacy") as client:
                    await client.list_tools()
                raise Failure("a wrong token was accepted")
            except Failure:
                raise
            except Exception:  # the SDK reports the 401 its own way; see it on the wire
                async with httpx2.AsyncClient() as raw:
                    answer = await raw.post(
                        f"{server.base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                        headers={"Authorization": "Bearer wrong-token-0123456789",
                                 "Accept": "application/json, text/event-stream"})
                check(answer.status_code == 401
                      and answer.headers.get("www-authenticate", "").startswith('Bearer realm="plangate"'),
                      f"wrong token: {answer.status_code} {answer.headers}")
            await check_agents("http", lambda: http_client(server.base, "/mcp", TOKEN, "auto"), rest_history(server.base, TOKEN))
            server.put_track("track-stdio")
        finally:
            server.stop()

        # stdio: no server runs; the refine workers are those of `plangate mcp`.
        stdio_env = {k: v for k, v in env.items() if k != "PLANGATE_API_TOKENS"}
        params = StdioServerParameters(command=binary, args=["mcp"], env=stdio_env)
        async with Client(params, mode="legacy", cache=None) as client:
            calls = await flow(client, "stdio", "proj-stdio", "track-stdio", lambda: False)
            largest = max(largest, calls.largest)
        await check_agents("stdio", lambda: Client(StdioServerParameters(command=binary, args=["mcp"], env=stdio_env | {"RUST_LOG": "warn", "PLANGATE_WORKERS": "1"}), mode="legacy", cache=None), history_by_serving(binary, env))
        await check_ids("stdio", lambda: Client(StdioServerParameters(command=binary, args=["mcp"], env=stdio_env), mode="legacy", cache=None), lambda: Client(StdioServerParameters(command=binary, args=["mcp", "--read-only"], env=stdio_env), cache=None))
        params = StdioServerParameters(command=binary, args=["mcp", "--read-only"], env=stdio_env)
        async with Client(params, cache=None) as client:
            check(await tool_names(client) == READ_ONLY_TOOLS, "stdio readonly tools")
            calls = Recorder(client, "stdio-readonly")
            status = await calls.call("project_status", {"project_id": "proj-stdio",
                                                         "team_pk": "cycle-1"})
            check(status["counts"]["done"] == 1, f"stdio readonly status {status}")
        await check_stdio_tracks(binary, stdio_env)
    print(f"mcp flow on {backend}: ok; largest tool answer {largest[0]} bytes ({largest[1]})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], required=True)
    args = parser.parse_args()
    try:
        return asyncio.run(run(os.path.abspath(args.binary), args.backend))
    except (Failure, AgentsFailure) as failure:
        print(f"mcp flow on {args.backend}: FAILED: {failure}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
