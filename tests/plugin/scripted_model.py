#!/usr/bin/env python3
"""A scripted stand-in of the Anthropic Messages API for `.ci/plugin.sh`.

Claude Code (`claude -p`, ANTHROPIC_BASE_URL pointed here) runs for real; only the model
is replaced. Each /v1/messages request is answered from the conversation it carries:
the script below walks an atelier-shaped cycle through the plugin's MCP tools (skills,
an invalid list, the fixed list, create with team_pk, claim/complete with one failure,
status), choosing each call from the tool results it has read so far. Stateless, so
side requests (titles, count_tokens, retries) need no bookkeeping.

    python3 scripted_model.py PORT LOG_FILE [PLUGIN]     # PLUGIN: whose skills (plangate)
"""

import json
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROJECT = "atelier"
TEAM_PK = "cycle-1"
HOLDER = "pm-1"
FAILING = "t-2"

# Wave 1: t-1 and t-2 (t-2 wrongly in wave 1 after t-1 in the invalid list); t-4 and
# t-5 depend on t-2, so its failure must abandon them; t-3 depends on t-1 only.
FIXED = [
    {"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1, "writes": ["src/a.py"], "description": "write a"},
    {"task_id": "t-2", "assigned_persona": "dev", "parallel_group": 1, "writes": ["src/b.py"], "description": "write b"},
    {"task_id": "t-3", "assigned_persona": "qa", "parallel_group": 2, "depends_on": ["t-1"], "reads": ["src/a.py"], "writes": ["tests/test_a.py"], "description": "test a"},
    {"task_id": "t-4", "assigned_persona": "qa", "parallel_group": 2, "depends_on": ["t-2"], "reads": ["src/b.py"], "writes": ["tests/test_b.py"], "description": "test b"},
    {"task_id": "t-5", "assigned_persona": "rev", "parallel_group": 3, "depends_on": ["t-4"], "reviews": "t-4", "description": "review the tests of b"},
]
INVALID = [dict(t) for t in FIXED]
INVALID[3] = dict(INVALID[3], parallel_group=1)  # t-4 in the wave of t-2, which it depends on

LOG = None
PLUGIN = "plangate"
LOGGED_SKILLS = set()


def log(event, **fields):
    with open(LOG, "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")


def text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for block in content or []:
        if block.get("type") == "text":
            out.append(block.get("text", ""))
        elif block.get("type") == "tool_result":
            out.append(text_of(block.get("content")))
    return "\n".join(out)


def history(messages):
    """[(tool name, input, result text, is_error)] in call order, and all user text."""
    calls, results, user_text = [], {}, []
    for m in messages:
        content = m.get("content")
        if m["role"] == "assistant" and isinstance(content, list):
            calls += [b for b in content if b.get("type") == "tool_use"]
        if m["role"] == "user":
            user_text.append(text_of(content))
            if isinstance(content, list):
                for b in content:
                    if b.get("type") == "tool_result":
                        results[b["tool_use_id"]] = (text_of(b.get("content")), bool(b.get("is_error")))
    hist = [(c["name"], c.get("input", {}), *results.get(c["id"], ("", False))) for c in calls]
    return hist, "\n".join(user_text)


def short(name):
    return name.rsplit("__", 1)[-1]


def payload(result_text):
    try:
        return json.loads(result_text)
    except ValueError:
        start = result_text.find("{")
        return json.loads(result_text[start:]) if start >= 0 else {}


def decide(tools, messages):
    """The next assistant turn: ("tool", name, input) or ("text", words)."""
    names = {short(t["name"]): t["name"] for t in tools if "name" in t}
    hist, user_text = history(messages)
    done = [short(n) for n, *_ in hist]

    def call(tool, args):
        if tool not in names:
            raise RuntimeError(f"tool {tool} not offered; tools: {sorted(names)}")
        return ("tool", names[tool], args)

    def skill(name, marker):
        if f"{PLUGIN}:{name}" in json.dumps([i for n, i, *_ in hist if n == "Skill"]):
            if marker not in user_text:
                raise RuntimeError(f"skill {name} was invoked but its body never arrived")
            if name not in LOGGED_SKILLS:  # once per process: one process per session
                LOGGED_SKILLS.add(name)
                log("skill_loaded", skill=name)
            return None
        return call("Skill", {"skill": f"{PLUGIN}:{name}"}) if "Skill" in names else None

    step = skill("plan-tasks", "Plan tasks through plangate")
    if step:
        return step
    if done.count("validate_task_list") == 0:
        return call("validate_task_list", {"tasks": INVALID})
    if done.count("validate_task_list") == 1:
        first = payload([r for n, _, r, _ in hist if short(n) == "validate_task_list"][0])
        assert first.get("valid") is False, first
        log("validation_errors", codes=[e["code"] for e in first["errors"]])
        return call("validate_task_list", {"tasks": FIXED})
    if "create_task_list" not in done:
        second = payload([r for n, _, r, _ in hist if short(n) == "validate_task_list"][1])
        assert second.get("valid") is True, second
        return call("create_task_list", {
            "project_id": PROJECT, "team_pk": TEAM_PK, "created_by": "pm",
            "tasks": FIXED, "idempotency_key": f"plan-{TEAM_PK}"})
    step = skill("dispatch-waves", "Dispatch a task list")
    if step:
        return step
    created = payload([r for n, _, r, _ in hist if short(n) == "create_task_list"][0])
    list_id = created["task_list_id"]
    name, args, result, is_error = hist[-1]
    last = short(name)
    if is_error:
        raise RuntimeError(f"{last} failed: {result}")
    if last in ("create_task_list", "Skill", "set_task_status", "ready_tasks"):
        if last == "set_task_status":
            log("status", task=args["task_id"], answer=payload(result))
        return call("claim_task", {"task_list_id": list_id, "holder": HOLDER, "lease_s": 300})
    if last == "claim_task":
        claim = payload(result)
        task = claim.get("task")
        if task:
            failed = task["task_id"] == FAILING
            log("claimed", task=task["task_id"])
            return call("set_task_status", {
                "task_id": task["id"], "holder": HOLDER, "status": "failed" if failed else "done",
                **({"notes": "scripted failure"} if failed else {})})
        if claim["next"] == "wait":
            return call("ready_tasks", {"task_list_id": list_id, "wait_seconds": 5})
        log("end_of_list", next=claim["next"], blocked=claim.get("blocked"))
        return call("project_status", {"project_id": PROJECT, "team_pk": TEAM_PK})
    if last == "project_status":
        log("project_status", answer=payload(result))
        return ("text", f"Cycle {TEAM_PK} of {PROJECT}: list {list_id} ended; see project_status.")
    raise RuntimeError(f"no script step after {last}")


def sse(events):
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def message(model, turn):
    msg_id = "msg_" + uuid.uuid4().hex[:20]
    usage = {"input_tokens": 10, "output_tokens": 10,
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    if turn[0] == "tool":
        block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20], "name": turn[1], "input": turn[2]}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": turn[1]}
        stop = "end_turn"
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage}


def stream_events(msg):
    block = msg["content"][0]
    start = dict(msg, content=[], stop_reason=None)
    if block["type"] == "tool_use":
        first = dict(block, input={})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        first = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": first},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
         "usage": {"output_tokens": msg["usage"]["output_tokens"]}},
        {"type": "message_stop"},
    ]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:12])
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # model lists, health probes: nothing to offer
        log("get", path=self.path)
        self.answer(200, json.dumps({"data": [], "has_more": False}).encode())

    def do_HEAD(self):
        self.answer(200, b"")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        path = self.path.split("?")[0]
        if path.endswith("/count_tokens"):
            return self.answer(200, b'{"input_tokens": 1000}')
        if not path.endswith("/v1/messages"):
            log("other", path=path)
            return self.answer(404, b'{"type":"error","error":{"type":"not_found_error","message":"scripted model"}}')
        tools = body.get("tools") or []
        scripted = any(short(t.get("name", "")) == "claim_task" for t in tools)
        try:
            turn = decide(tools, body["messages"]) if scripted else ("text", "plangate cycle")
        except Exception as err:  # a broken script must fail the run loudly
            log("script_error", error=repr(err), tools=[t.get("name") for t in tools])
            turn = ("text", f"SCRIPT ERROR: {err!r}")
        log("turn", scripted=scripted, tools=len(tools) if scripted else [t.get("name") for t in tools],
            answer=turn[:2],
            input=turn[2] if turn[0] == "tool" else None)
        msg = message(body.get("model", "claude-scripted"), turn)
        if body.get("stream"):
            return self.answer(200, sse(stream_events(msg)), "text/event-stream")
        self.answer(200, json.dumps(msg).encode())


if __name__ == "__main__":
    LOG = sys.argv[2]
    PLUGIN = sys.argv[3] if len(sys.argv) > 3 else PLUGIN
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.serve_forever()
