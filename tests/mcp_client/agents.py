"""Agents at work (docs/mcp.md, "An agent's loop") through the official MCP Python SDK, called from flow.py
once per transport: `next` through whole lists (dispatch, wait, done, blocked) with
`remaining`, a `wait_seconds` long-poll woken by another client, idempotent creates,
the holder check, and 16 concurrent claimers, each its own MCP client, sharing a
200-task list while one holder lets its lease run out.

Over Streamable HTTP the 16 are 16 SDK clients of one server; over stdio they are 16
`plangate mcp` processes on the one database (SQLite file or Postgres), so the claim
races run across processes, not inside one. Task histories are REST-only (`GET
/v1/tasks/{id}/history`): read from the running server, or over stdio from a
`plangate serve` started on the same database once the claimers are done.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from contextlib import contextmanager
from typing import Callable

CLAIMERS = 16
TASKS = 200


class AgentsFailure(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AgentsFailure(message)


RETRIES = Counter()


async def call(client, name: str, arguments: dict, expect_error: bool = False):
    for _ in range(30):
        result = await client.call_tool(name, arguments)
        text = "".join(block.text for block in result.content if block.type == "text")
        # `database_unavailable` changed nothing and says when to retry
        # (docs/architecture.md): an agent waits and retries, as here (a shared
        # Postgres can run out of connections while other suites run on it).
        if result.is_error and '"database_unavailable"' in text:
            RETRIES[name] += 1
            await asyncio.sleep(json.loads(text).get("retry_after_secs", 1))
            continue
        break
    check(bool(result.is_error) == expect_error, f"{name}: is_error={result.is_error}: {text[:500]}")
    return json.loads(text)


def rest_history(base: str, token: str) -> Callable[[list[str]], dict[str, list]]:
    """Histories of tasks from a running server."""

    def fetch(task_ids: list[str]) -> dict[str, list]:
        out = {}
        for task_id in task_ids:
            request = urllib.request.Request(f"{base}/v1/tasks/{task_id}/history",
                                             headers={"authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request) as response:
                body = json.loads(response.read())
            out[task_id] = body["events"]
        return out

    return fetch


def history_by_serving(binary: str, env: dict[str, str]) -> Callable[[list[str]], dict[str, list]]:
    """Histories read through a `plangate serve` started for the purpose on the same
    database (over stdio no server runs during the check)."""

    def fetch(task_ids: list[str]) -> dict[str, list]:
        with serving(binary, env) as base:
            return rest_history(base, "agents-history-0123456789")(task_ids)

    return fetch


@contextmanager
def serving(binary: str, env: dict[str, str]):
    process = subprocess.Popen(
        [binary, "serve"],
        env=env | {"PLANGATE_BIND": "127.0.0.1:0", "PLANGATE_LOG_FORMAT": "json",
                   "PLANGATE_API_TOKENS": "agents-history-0123456789"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = None
        for line in process.stderr:
            if "plangate listening" in line:
                base = "http://" + json.loads(line)["address"]
                break
        check(base is not None, "history server did not start")
        threading.Thread(target=process.stderr.read, daemon=True).start()
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def kinds(entries: list) -> list[str]:
    return [entry["kind"] for entry in entries]


async def check_agents(label: str, open_client: Callable, history: Callable[[list[str]], dict],
                       project: str | None = None) -> None:
    """`open_client()` gives a new, unopened SDK client (its own session or process)."""
    project = project or f"agents-{label}"
    started = time.monotonic()
    async with open_client() as client:
        await next_through_a_list(client, open_client, label, project)
        await blocked_and_failed_lists(client, label, project)
        await idempotent_create(client, label, project)
        await holder_check(client, label, project, history)
        await sixteen_claimers(client, open_client, label, project, history)
    print(f"agents over {label}: ok in {time.monotonic() - started:.1f} s; "
          f"retried after database_unavailable: {dict(RETRIES) or 'never'}")
    RETRIES.clear()


async def create(client, project: str, team: str, tasks: list[dict], **extra) -> dict:
    return await call(client, "create_task_list", {"project_id": project, "team_pk": team,
                                                   "created_by": "pm", "tasks": tasks} | extra)


def remaining(**counts) -> dict:
    return {"pending": 0, "running": 0, "done": 0, "failed": 0, "abandoned": 0} | counts


async def next_through_a_list(client, open_client, label: str, project: str) -> None:
    """dispatch → (pipeline, a task running, nothing else ready) wait with in_flight
    and retry_after_s → a long-poll woken by another client's completion → done."""
    created = await create(client, project, "next", [
        {"task_id": "a", "assigned_persona": "dev", "parallel_group": 1, "description": "a"},
        {"task_id": "b", "assigned_persona": "dev", "parallel_group": 2, "depends_on": ["a"],
         "description": "b"},
    ])
    list_id = created["task_list_id"]
    ids = {t["task_id"]: t["id"] for t in created["tasks"]}
    pipeline = {"task_list_id": list_id, "mode": "pipeline"}

    ready = await call(client, "ready_tasks", pipeline)
    check(ready["next"] == "dispatch" and [t["task_id"] for t in ready["tasks"]] == ["a"]
          and ready["in_flight"] == 0 and ready["remaining"] == remaining(pending=2),
          f"{label}: first ready {ready}")

    claimed = await call(client, "claim_task", pipeline | {"holder": "walker", "lease_s": 60})
    check(claimed["task"]["id"] == ids["a"] and claimed["task"]["claim"]["holder"] == "walker",
          f"{label}: claim a {claimed}")
    # A claim that hands out a task says `dispatch` (work on it) whatever else is ready.
    check(claimed["next"] == "dispatch" and claimed["in_flight"] == 1
          and claimed["remaining"] == remaining(pending=1, running=1), f"{label}: after claim {claimed}")

    waiting = await call(client, "ready_tasks", pipeline)
    check(waiting["next"] == "wait" and waiting["tasks"] == [] and waiting["in_flight"] == 1
          and 1 <= waiting["retry_after_s"] <= 5, f"{label}: wait {waiting}")
    empty = await call(client, "claim_task", pipeline | {"holder": "other"})
    check(empty["task"] is None and empty["next"] == "wait", f"{label}: empty claim {empty}")

    # A long-poll on a second client, answered as soon as this client completes `a`.
    async with open_client() as poller:
        begun = time.monotonic()
        poll = asyncio.create_task(call(poller, "ready_tasks", pipeline | {"wait_seconds": 20}))
        await asyncio.sleep(1.0)
        check(not poll.done(), f"{label}: the long-poll answered before any change")
        await call(client, "set_task_status", {"task_id": ids["a"], "status": "done", "holder": "walker"})
        woken = await poll
        elapsed = time.monotonic() - begun
    check(woken["next"] == "dispatch" and [t["task_id"] for t in woken["tasks"]] == ["b"],
          f"{label}: woken {woken}")
    check(elapsed < 10, f"{label}: the long-poll took {elapsed:.1f} s, not woken by the completion")

    claimed = await call(client, "claim_task", pipeline | {"holder": "walker"})
    check(claimed["task"]["task_id"] == "b", f"{label}: claim b {claimed}")
    await call(client, "set_task_status", {"task_id": ids["b"], "status": "done", "holder": "walker"})
    done = await call(client, "ready_tasks", pipeline)
    check(done["next"] == "done" and done["in_flight"] == 0 and "blocked" not in done
          and done["remaining"] == remaining(done=2), f"{label}: done {done}")
    after = await call(client, "claim_task", pipeline | {"holder": "walker"})
    check(after["task"] is None and after["next"] == "done", f"{label}: claim when done {after}")


async def blocked_and_failed_lists(client, label: str, project: str) -> None:
    """A failure with dependents cascades: the list ends `blocked`, naming each
    abandoned task and the failure; a failure with no dependents still ends `done`."""
    created = await create(client, project, "blocked", [
        {"task_id": "x", "assigned_persona": "dev", "parallel_group": 1, "description": "x"},
        {"task_id": "y", "assigned_persona": "dev", "parallel_group": 2, "depends_on": ["x"],
         "description": "y"},
        {"task_id": "z", "assigned_persona": "dev", "parallel_group": 3, "depends_on": ["y"],
         "description": "z"},
    ])
    list_id = created["task_list_id"]
    ids = {t["task_id"]: t["id"] for t in created["tasks"]}
    claimed = await call(client, "claim_task", {"task_list_id": list_id, "holder": "breaker"})
    check(claimed["task"]["id"] == ids["x"], f"{label}: claim x {claimed}")
    failed = await call(client, "set_task_status", {"task_id": ids["x"], "status": "failed",
                                                    "holder": "breaker", "notes": "tests red"})
    check(sorted(failed["cascaded"]) == sorted([ids["y"], ids["z"]]), f"{label}: cascade {failed}")
    for mode in ("barrier", "pipeline"):
        blocked = await call(client, "ready_tasks", {"task_list_id": list_id, "mode": mode})
        check(blocked["next"] == "blocked" and blocked["tasks"] == [] and blocked["in_flight"] == 0
              and blocked["remaining"] == remaining(failed=1, abandoned=2), f"{label}: blocked {blocked}")
        check([(b["task_id"], b["status"], b["because_of"]) for b in blocked["blocked"]]
              == [("y", "abandoned", "x"), ("z", "abandoned", "x")]
              and all('"x"' in b["reason"] for b in blocked["blocked"]), f"{label}: why {blocked}")
        check("retry_after_s" not in blocked, f"{label}: blocked with a retry {blocked}")

    alone = await create(client, project, "alone", [
        {"task_id": "solo", "assigned_persona": "dev", "parallel_group": 1, "description": "solo"}])
    solo = alone["tasks"][0]["id"]
    await call(client, "claim_task", {"task_list_id": alone["task_list_id"], "holder": "breaker"})
    await call(client, "set_task_status", {"task_id": solo, "status": "failed", "holder": "breaker"})
    ended = await call(client, "ready_tasks", {"task_list_id": alone["task_list_id"]})
    check(ended["next"] == "done" and ended["remaining"] == remaining(failed=1),
          f"{label}: a lone failure {ended}")


async def idempotent_create(client, label: str, project: str) -> None:
    """The same key twice is one list (`replayed`); the key with other arguments is refused."""
    tasks = [{"task_id": "i-1", "assigned_persona": "dev", "parallel_group": 1, "description": "one"},
             {"task_id": "i-2", "assigned_persona": "dev", "parallel_group": 1, "description": "two"}]
    key = f"create-{label}"
    first = await create(client, project, "idem", tasks, idempotency_key=key)
    check(not first.get("replayed"), f"{label}: first create {first}")
    again = await create(client, project, "idem", tasks, idempotency_key=key)
    check(again["task_list_id"] == first["task_list_id"] and again["replayed"] is True
          and again["tasks"] == first["tasks"], f"{label}: replay {again}")
    status = await call(client, "project_status", {"project_id": project, "team_pk": "idem"})
    check(sum(status["counts"].values()) == len(tasks), f"{label}: counted twice {status}")
    other = await call(client, "create_task_list",
                       {"project_id": project, "team_pk": "idem", "created_by": "pm",
                        "tasks": tasks[:1], "idempotency_key": key}, expect_error=True)
    check(other["code"] == "idempotency_key_reused", f"{label}: reused key {other}")


async def holder_check(client, label: str, project: str, history) -> None:
    """A claimed task refuses a status change that does not name its holder; `force` overrides."""
    created = await create(client, project, "holder", [
        {"task_id": "h", "assigned_persona": "dev", "parallel_group": 1, "description": "h"}])
    task = created["tasks"][0]["id"]
    await call(client, "claim_task", {"task_list_id": created["task_list_id"], "holder": "owner"})
    refused = await call(client, "set_task_status", {"task_id": task, "status": "done"},
                         expect_error=True)
    check(refused["code"] == "task_claimed" and refused["holder"] == "owner", f"{label}: no holder {refused}")
    refused = await call(client, "set_task_status", {"task_id": task, "status": "done", "holder": "boss"},
                         expect_error=True)
    check(refused["code"] == "task_claimed" and refused["holder"] == "owner", f"{label}: other {refused}")
    forced = await call(client, "set_task_status",
                        {"task_id": task, "status": "done", "holder": "boss", "force": True})
    check(forced["task"]["status"] == "done", f"{label}: force {forced}")
    entries = history([task])[task]
    last = entries[-1]
    check(kinds(entries) == ["claimed", "status_changed"] and last.get("forced") is True
          and last.get("overrode") == "owner", f"{label}: forced history {entries}")


async def sixteen_claimers(client, open_client, label: str, project: str, history) -> None:
    """16 clients claim and complete a 200-task list until `next` is done. A 17th
    holder claims one task first with a 1 s lease and never renews it: the task comes
    back (lease_expired) and one of the 16 completes it; the late holder is refused."""
    tasks = [{"task_id": f"w-{i:03}", "assigned_persona": "dev", "parallel_group": 1,
              "writes": [f"src/w{i:03}.py"], "description": f"work {i}"} for i in range(TASKS)]
    created = await create(client, project, "swarm", tasks)
    list_id = created["task_list_id"]
    all_ids = {t["id"] for t in created["tasks"]}

    dropped = await call(client, "claim_task", {"task_list_id": list_id, "holder": "dropper", "lease_s": 1})
    dropped_id = dropped["task"]["id"]

    waits = Counter()

    async def claimer(n: int) -> list[str]:
        holder = f"agent-{n:02}"
        mine = []
        async with open_client() as own:
            while True:
                answer = await call(own, "claim_task", {"task_list_id": list_id, "holder": holder,
                                                        "lease_s": 120})
                task = answer["task"]
                if task is not None:
                    check(task["claim"]["holder"] == holder, f"{holder}: {answer}")
                    mine.append(task["id"])
                    await call(own, "set_task_status", {"task_id": task["id"], "status": "done",
                                                        "holder": holder})
                elif answer["next"] == "wait":
                    check(answer["in_flight"] >= 1 and 1 <= answer["retry_after_s"] <= 5,
                          f"{holder}: wait {answer}")
                    waits[holder] += 1
                    await call(own, "ready_tasks", {"task_list_id": list_id,
                                                    "wait_seconds": answer["retry_after_s"]})
                else:
                    check(answer["next"] == "done" and answer["remaining"] == remaining(done=TASKS),
                          f"{holder}: end {answer}")
                    return mine

    begun = time.monotonic()
    results = await asyncio.gather(*(claimer(n) for n in range(CLAIMERS)))
    elapsed = time.monotonic() - begun
    claimed = [task for mine in results for task in mine]
    check(len(claimed) == len(set(claimed)) == TASKS and set(claimed) == all_ids,
          f"{label}: {len(claimed)} claims, {len(set(claimed))} distinct of {TASKS}")
    check(sum(1 for mine in results if mine) > 1, f"{label}: one claimer did all the work")

    # The lapsed holder can neither renew nor complete: its task went to another.
    late = await call(client, "heartbeat_task", {"task_id": dropped_id, "holder": "dropper"},
                      expect_error=True)
    check(late["code"] in ("task_not_claimed", "task_claimed"), f"{label}: late heartbeat {late}")
    late = await call(client, "set_task_status", {"task_id": dropped_id, "status": "done",
                                                  "holder": "dropper"}, expect_error=True)
    check(late["code"] in ("task_not_claimed", "task_claimed", "illegal_transition"),
          f"{label}: late completion {late}")

    histories = history(sorted(all_ids))
    for task_id, entries in histories.items():
        claims = [e["holder"] for e in entries if e["kind"] == "claimed"]
        done = [e for e in entries if e["kind"] == "status_changed" and e.get("to_status") == "done"]
        check(len(done) == 1, f"{label}: {task_id} completed {len(done)} times: {entries}")
        if task_id == dropped_id:
            check(kinds(entries)[:3] == ["claimed", "lease_expired", "claimed"]
                  and claims[0] == "dropper" and claims[1].startswith("agent-")
                  and entries[1].get("holder") == "dropper", f"{label}: expiry history {entries}")
        else:
            check(len(claims) == 1 and claims[0].startswith("agent-"),
                  f"{label}: {task_id} claimed {claims}")
    busiest = max(len(mine) for mine in results)
    print(f"agents over {label}: {CLAIMERS} claimers, {TASKS} tasks in {elapsed:.1f} s "
          f"(busiest {busiest}, {sum(waits.values())} waits); {dropped_id[:8]} expired from "
          f"'dropper' and went to {[e['holder'] for e in histories[dropped_id] if e['kind'] == 'claimed'][1]}")
