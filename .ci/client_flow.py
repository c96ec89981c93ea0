"""An orchestrator's flow through the Python client generated from openapi/openapi.json
(.ci/client.sh generates it as `plangate_client`): validate, create, ready, a status
change that cascades, project status, a refine job to its result, a track step; and an
agent's loop (claim, heartbeat, complete naming the holder, history, `next`) with an
idempotent create replayed.

Usage: python client_flow.py BASE_URL TOKEN
"""

import sys
import time

from plangate_client import AuthenticatedClient
from plangate_client.api.loop_plans import parse_loop_plan
from plangate_client.api.projects import project_status
from plangate_client.api.refine_jobs import create_refine_job, get_refine_job, refine_job_result
from plangate_client.api.task_lists import (
    claim_task,
    create_task_list,
    heartbeat_task,
    heartbeat_task_in_list,
    ready_tasks,
    task_history,
    task_history_in_list,
    update_task,
    update_task_in_list,
    validate_task_list,
)
from plangate_client.api.tracks import complete_track_step, put_track, start_track_step
from plangate_client.models import (
    ClaimRequest,
    ClaimResponse,
    Completion,
    CreateRefineJobRequest,
    CreateTaskListRequestWithTasks,
    GatingProblem,
    HeartbeatRequest,
    Next,
    ParsePlanRequest,
    Problem,
    PutTrackBody,
    ReadyResponse,
    StepOutcome,
    StepStart,
    StoredJob,
    StoredTaskList,
    TaskHistory,
    TaskInput,
    TaskUpdated,
    Transition,
    TransitionStatus,
    ValidateRequestWithTasks,
    ValidationReport,
)


def check(response, status, model=None):
    """The answer has `status` and parses into `model`; returns the parsed body."""
    body = response.content.decode(errors="replace")
    assert response.status_code == status, f"expected {status}, got {response.status_code}: {body}"
    if model is not None:
        assert isinstance(response.parsed, model), f"not a {model.__name__}: {response.parsed!r}"
    return response.parsed


def tasks():
    return [
        TaskInput(
            task_id="t-1",
            assigned_persona="backend",
            parallel_group=1,
            description="Write the client",
            writes=["src/client.py"],
        ),
        TaskInput(
            task_id="t-2",
            assigned_persona="reviewer",
            parallel_group=2,
            description="Review the client",
            depends_on=["t-1"],
            reads=["src/client.py"],
            reviews="t-1",
        ),
    ]


def main(base, token):
    client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)

    # Validate (dry run), then a list with a cycle: the gate's verdict, not an error.
    report = check(
        validate_task_list.sync_detailed(client=client, body=ValidateRequestWithTasks(tasks=tasks())),
        200,
        ValidationReport,
    )
    assert report.valid and report.waves == [["t-1"], ["t-2"]], report
    cyclic = tasks()
    cyclic[0].depends_on = ["t-2"]
    report = check(
        validate_task_list.sync_detailed(client=client, body=ValidateRequestWithTasks(tasks=cyclic)),
        200,
        ValidationReport,
    )
    assert not report.valid and report.errors[0].code == "cycle", report
    assert report.errors[0].cycle == ["t-1", "t-2"], report.errors[0]

    # Create, then the ready tasks of the first wave.
    created = check(
        create_task_list.sync_detailed(
            client=client,
            body=CreateTaskListRequestWithTasks(
                project_id="demo", team_pk="cycle-1", created_by="planner", tasks=tasks()
            ),
        ),
        201,
    )
    ready = check(ready_tasks.sync_detailed(created.id, client=client), 200)
    assert [t.task_id for t in ready.tasks] == ["t-1"], ready

    # t-1 runs and fails: its reviewer t-2 is abandoned in cascade.
    first = ready.tasks[0]
    check(update_task.sync_detailed(first.id, client=client, body=Transition(status=TransitionStatus.RUNNING)), 200)
    failed = check(
        update_task.sync_detailed(
            first.id, client=client, body=Transition(status=TransitionStatus.FAILED, notes="tests red")
        ),
        200,
    )
    second = next(t for t in created.tasks if t.task_id == "t-2")
    assert failed.cascaded == [second.id], failed

    status = check(project_status.sync_detailed("demo", client=client, team_pk="cycle-1"), 200)
    counts = status.counts.to_dict()
    assert counts.get("failed") == 1 and counts.get("abandoned") == 1, counts

    # A refine job on the builtin executor, to its result.
    assignment = {
        "id": "P1-A1",
        "phase_id": "P1",
        "name": "Client",
        "goal": "Ship the client.",
        "technical_approach": "Small steps.",
        "dependency_notes": "",
        "overlap_notes": "",
        "proposed_work_packages": [{"id_suffix": "WP1", "name": "w", "estimated_files": ["src/client.py"]}],
    }
    plan = {
        "task": "Ship the client",
        "phases": [
            {"id": "P1", "name": "One", "goal": "g", "scope": ["code"], "technical_approach": "t",
             "relationship_notes": "", "ordering": 1}
        ],
    }
    job = check(
        create_refine_job.sync_detailed(
            client=client,
            body=CreateRefineJobRequest.from_dict(
                {"context": {"schema_version": 1, "phase_id": "P1", "assignments": [assignment]},
                 "refined_plan": plan, "project_id": "demo"}
            ),
        ),
        202,
        StoredJob,
    )
    deadline = time.monotonic() + 60
    while str(job.status) not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"job stuck: {job}"
        job = check(get_refine_job.sync_detailed(job.id, client=client, wait=5), 200, StoredJob)
    assert str(job.status) == "succeeded", job
    result = check(refine_job_result.sync_detailed(job.id, client=client), 200).to_dict()
    assert [a["id"] for a in result["assignments"]] == ["P1-A1"], result

    # A track: import its metadata, run the PLAN step.
    metadata = PutTrackBody.from_dict(
        {"track_id": "client_20261201", "type": "feature", "status": "new",
         "created_at": "2026-12-01T09:00:00Z", "updated_at": "2026-12-01T09:00:00Z",
         "description": "Generated client"}
    )
    check(put_track.sync_detailed("client_20261201", client=client, body=metadata), 201)
    started = check(
        start_track_step.sync_detailed("client_20261201", "PLAN", client=client, body=StepStart(agent="planner")),
        200,
    )
    assert str(started.loop_state.step_status) == "IN_PROGRESS", started.loop_state
    done = check(
        complete_track_step.sync_detailed(
            "client_20261201", "PLAN", client=client, body=Completion(outcome=StepOutcome.PASSED)
        ),
        200,
    )
    assert str(done.loop_state.current_step) != "PLAN", done.loop_state

    # The JSON form of a plan.md parse (the generated client sends JSON only).
    problem = parse_loop_plan.sync_detailed(client=client, body=ParsePlanRequest(markdown="no plan here"))
    assert problem.status_code == 422, problem.content

    agent_loop(client)

    print("client flow passed: validate, create, ready, cascade, status, refine job, track step, "
          "claim, heartbeat, complete, history, next, idempotent create")


def agent_loop(client):
    """Claim → heartbeat → complete naming the holder → history → `next`, on a list
    created with an Idempotency-Key that a retry replays (docs/api.md "Claims")."""
    body = CreateTaskListRequestWithTasks(
        project_id="demo", team_pk="agents", created_by="planner", tasks=tasks()
    )
    created = check(create_task_list.sync_detailed(client=client, body=body, idempotency_key="agents-1"),
                    201, StoredTaskList)
    retried = create_task_list.sync_detailed(client=client, body=body, idempotency_key="agents-1")
    again = check(retried, 201, StoredTaskList)
    assert retried.headers.get("idempotent-replayed") == "true", retried.headers
    assert again.id == created.id and [t.id for t in again.tasks] == [t.id for t in created.tasks], again
    other = CreateTaskListRequestWithTasks(
        project_id="demo", team_pk="agents", created_by="planner", tasks=tasks()[:1]
    )
    reused = check(create_task_list.sync_detailed(client=client, body=other, idempotency_key="agents-1"),
                   422, GatingProblem)  # the create's 422 schema, whatever the code
    assert reused.code == "idempotency_key_reused", reused

    ids = {t.task_id: t.id for t in created.tasks}
    for task_id, persona in (("t-1", "backend"), ("t-2", "reviewer")):
        # t-1 by its server id, t-2 by the planner's id in its list (the same calls).
        if task_id == "t-1":
            heartbeat = lambda **kw: heartbeat_task.sync_detailed(ids["t-1"], client=client, **kw)
            update = lambda **kw: update_task.sync_detailed(ids["t-1"], client=client, **kw)
            history_of = lambda: task_history.sync_detailed(ids["t-1"], client=client)
        else:
            heartbeat = lambda **kw: heartbeat_task_in_list.sync_detailed(created.id, "t-2", client=client, **kw)
            update = lambda **kw: update_task_in_list.sync_detailed(created.id, "t-2", client=client, **kw)
            history_of = lambda: task_history_in_list.sync_detailed(created.id, "t-2", client=client)
        claimed = check(
            claim_task.sync_detailed(created.id, client=client,
                                     body=ClaimRequest(holder="agent-7", persona=persona, lease_s=60)),
            200, ClaimResponse,
        )
        assert claimed.task.id == ids[task_id] and claimed.task.claim.holder == "agent-7", claimed
        assert claimed.next_ == Next.DISPATCH and claimed.in_flight == 1, claimed
        waiting = check(ready_tasks.sync_detailed(created.id, client=client), 200, ReadyResponse)
        assert waiting.next_ == Next.WAIT and waiting.tasks == [] and 1 <= waiting.retry_after_s <= 5, waiting
        renewed = check(
            heartbeat(body=HeartbeatRequest(holder="agent-7", lease_s=120)),
            200,
        )
        assert renewed.claim.lease_expires_at > claimed.task.claim.lease_expires_at, renewed
        refused = check(
            update(body=Transition(status=TransitionStatus.DONE)),
            409, Problem,
        )
        assert refused.code == "task_claimed" and refused.additional_properties["holder"] == "agent-7", refused
        done = check(
            update(body=Transition(status=TransitionStatus.DONE, holder="agent-7")),
            200, TaskUpdated,
        )
        assert str(done.status) == "done" and not done.claim, done  # leaving running ends the claim
        history = check(history_of(), 200, TaskHistory)
        assert [str(e.kind) for e in history.events] == ["claimed", "renewed", "status_changed"], history
        assert all(e.holder == "agent-7" for e in history.events), history
        ready = check(ready_tasks.sync_detailed(created.id, client=client), 200, ReadyResponse)
        if task_id == "t-1":
            assert ready.next_ == Next.DISPATCH and [t.task_id for t in ready.tasks] == ["t-2"], ready
    assert ready.next_ == Next.DONE and ready.tasks == [] and ready.remaining.done == 2, ready
    last = check(claim_task.sync_detailed(created.id, client=client, body=ClaimRequest(holder="agent-7")),
                 200, ClaimResponse)
    assert last.task is None and last.next_ == Next.DONE, last


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
