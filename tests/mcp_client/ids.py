"""Naming tasks and projects (docs/mcp.md, "The tools"), through the official MCP Python SDK (called from flow.py).

One meaning per id: set_task_status takes the planner's task_id with task_list_id,
and a planner id without its list is a tool error naming task_list_id. Refusals that
explain themselves: a write tool on the read-only surface says where writes go; a
wrong token's reason reaches the SDK's exception (not only the HTTP status); an
unknown project or cycle is a tool error naming it.
"""

from __future__ import annotations

import json


class IdsFailure(Exception):
    pass


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise IdsFailure(message)


async def _call(client, name: str, arguments: dict, expect_error: bool):
    result = await client.call_tool(name, arguments)
    text = "".join(block.text for block in result.content if block.type == "text")
    _check(bool(result.is_error) == expect_error, f"{name}: is_error={result.is_error}: {text[:500]}")
    return json.loads(text)


def _reason(error: BaseException) -> str:
    """The text the SDK shows for an exception, its causes and group members included."""
    parts, seen, stack = [], set(), [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        stack.extend(getattr(current, "exceptions", ()))
        stack.extend([current.__cause__, current.__context__])
    return " | ".join(parts)


async def check_ids(label: str, open_client, open_readonly, open_wrong_token=None) -> None:
    """open_*: callables answering a fresh SDK client (an async context manager)."""
    project = f"proj-ids-{label}"
    async with open_client() as client:
        created = await _call(client, "create_task_list", {
            "project_id": project, "team_pk": "cycle-1", "created_by": "pm",
            "tasks": [
                {"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1,
                 "writes": ["a.py"], "description": "write a"},
                {"task_id": "t-2", "assigned_persona": "dev", "parallel_group": 2,
                 "depends_on": ["t-1"], "reads": ["a.py"], "description": "use a"},
            ]}, False)
        list_id = created["task_list_id"]
        # The planner's id with its list, as an agent knows it.
        moved = await _call(client, "set_task_status",
                            {"task_id": "t-1", "task_list_id": list_id, "status": "running"}, False)
        _check(moved["task"]["task_id"] == "t-1" and moved["task"]["status"] == "running",
               f"{label}: planner-id set_task_status: {moved}")
        # A planner id alone: the error names task_list_id and where to get it.
        refused = await _call(client, "set_task_status", {"task_id": "t-1", "status": "done"}, True)
        _check(refused.get("field") == "task_list_id" and "create_task_list" in refused["detail"],
               f"{label}: planner id without its list: {refused}")
        # The server id alone still works.
        done = await _call(client, "set_task_status",
                           {"task_id": created["tasks"][0]["id"], "status": "done"}, False)
        _check(done["task"]["status"] == "done", f"{label}: server-id set_task_status: {done}")
        # Unknown project, unknown cycle: named, not zeros.
        ghost = await _call(client, "project_status", {"project_id": f"{project}-ghost"}, True)
        _check(ghost["code"] == "project_not_found", f"{label}: unknown project: {ghost}")
        cycle = await _call(client, "project_status", {"project_id": project, "team_pk": "nope"}, True)
        _check(cycle["code"] == "team_not_found", f"{label}: unknown cycle: {cycle}")

    async with open_readonly() as readonly:
        try:
            await readonly.call_tool("create_task_list", {"project_id": project, "created_by": "pm",
                                                          "tasks": []})
            raise IdsFailure(f"{label}: a write tool ran on the read-only surface")
        except IdsFailure:
            raise
        except Exception as error:  # the SDK raises the JSON-RPC error
            text = _reason(error)
            _check("read-only" in text and "call create_task_list on" in text,
                   f"{label}: read-only refusal does not say where writes go: {text}")

    if open_wrong_token is not None:
        try:
            async with open_wrong_token() as client:
                await client.list_tools()
            raise IdsFailure(f"{label}: a wrong token was accepted")
        except IdsFailure:
            raise
        except Exception as error:
            text = _reason(error)
            _check("the bearer token is not valid" in text,
                   f"{label}: the SDK does not show why the token was refused: {text}")
