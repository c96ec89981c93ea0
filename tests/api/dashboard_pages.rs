//! The dashboard's pages as served (docs/architecture.md, "The dashboard's
//! task-list page" and "Live pages"): a list of more than 300 tasks shows its waves
//! counted and its tasks 200 a page, with a link to the next page; the list pages'
//! live markers follow what their viewer may see; the overview counts each list's
//! tasks by status; a job's or run's cancel page confirms, or says it has ended.

use crate::common::{
    ADMIN, Backend, TOKEN_A, TOKEN_B, TestApp, spawn_app_with_project_tokens, sse,
};
use serde_json::{Value, json};

/// Three waves of 150: wave 2's task `t{i}` needs wave 1's `t{i - 150}`.
fn list() -> Value {
    let tasks: Vec<Value> = (0..450)
        .map(|i| {
            let deps: Vec<String> = if (150..300).contains(&i) {
                vec![format!("t{}", i - 150)]
            } else {
                vec![]
            };
            json!({
                "task_id": format!("t{i}"), "assigned_persona": "dev",
                "parallel_group": 1 + i / 150, "depends_on": deps, "reads": [],
                "writes": [format!("t{i}.rs")], "description": format!("task {i}"),
            })
        })
        .collect();
    json!({"project_id": "big", "created_by": "pm", "tasks": tasks})
}

fn server_id(list: &Value, local: &str) -> String {
    list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == local)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn page(app: &TestApp, path: &str) -> String {
    let response = app.get(path).await;
    let status = response.status();
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// The summary drawing's box of `wave`, up to its end.
fn wave_box(html: &str, wave: i64) -> &str {
    let at = html
        .find(&format!("data-wave=\"{wave}\" transform="))
        .unwrap_or_else(|| panic!("no box for wave {wave}"));
    let end = at + html[at..].find("</g>").unwrap();
    &html[at..end]
}

/// The `href` of the next-page link, if any.
fn next_link(html: &str) -> Option<String> {
    let at = html.find("href=\"?cursor=")? + "href=\"".len();
    let end = at + html[at..].find('"').unwrap();
    Some(html[at..end].to_owned())
}

fn rows(html: &str) -> Vec<String> {
    html.match_indices("<tr id=\"task-")
        .map(|(at, _)| {
            let from = at + html[at..].find("data-task=\"").unwrap() + "data-task=\"".len();
            let to = from + html[from..].find('"').unwrap();
            html[from..to].to_owned()
        })
        .collect()
}

async fn a_large_list_is_summarised_per_wave_and_paged(app: TestApp) {
    let response = app.post_json("/v1/task-lists", &list()).await;
    assert_eq!(response.status(), 201);
    let list: Value = response.json().await.unwrap();
    let id = list["id"].as_str().unwrap().to_owned();
    // Wave 1: two done, one failed (abandoning its dependent t152), one running.
    for (task, end) in [("t0", "done"), ("t1", "done"), ("t2", "failed"), ("t3", "")] {
        let task = server_id(&list, task);
        for status in ["running", end].into_iter().filter(|s| !s.is_empty()) {
            let r = app
                .patch_json(&format!("/v1/tasks/{task}"), &json!({"status": status}))
                .await;
            assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        }
    }

    let first = page(&app, &format!("/ui/task-lists/{id}")).await;
    let wave1 = wave_box(&first, 1);
    for count in [
        "150 tasks",
        "pending: 146",
        "running: 1",
        "done: 2",
        "failed: 1",
        "abandoned: 0",
    ] {
        assert!(wave1.contains(count), "wave 1 lacks {count}: {wave1}");
    }
    let wave2 = wave_box(&first, 2);
    assert!(
        wave2.contains("pending: 149") && wave2.contains("abandoned: 1"),
        "{wave2}"
    );
    assert!(wave_box(&first, 3).contains("pending: 150"));
    assert!(
        first.contains("<dd id=\"active-wave\" aria-live=\"polite\">1</dd>"),
        "{first}"
    );
    assert!(first.contains("<dt>Tasks</dt><dd>450</dd>"));
    let shown = rows(&first);
    let expected: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
    assert_eq!(shown, expected);
    // A cascade's cause is named and linked.
    assert!(first.contains(&format!(
        "blocked by <a href=\"/ui/task-lists/{id}/tasks/t2\">"
    )));

    let next = next_link(&first).expect("a link to the next page");
    let second = page(&app, &format!("/ui/task-lists/{id}{next}")).await;
    let expected: Vec<String> = (200..400).map(|i| format!("t{i}")).collect();
    assert_eq!(rows(&second), expected);
    assert!(
        wave_box(&second, 1).contains("done: 2"),
        "the waves stay summarised"
    );
    assert!(second.contains(&format!("data-events=\"/ui/task-lists/{id}/events{next}\"")));
    let third = page(
        &app,
        &format!("/ui/task-lists/{id}{}", next_link(&second).unwrap()),
    )
    .await;
    let expected: Vec<String> = (400..450).map(|i| format!("t{i}")).collect();
    assert_eq!(rows(&third), expected);
    assert_eq!(next_link(&third), None);

    // The second page's live stream starts with its own tasks only.
    let seen = sse::first_frame(&app, &format!("/ui/task-lists/{id}/events{next}")).await;
    assert!(seen.contains("[\"t200\",\"pending\",null]"), "{seen}");
    assert!(!seen.contains("\"t0\""), "{seen}");

    // A cursor that is not one is refused, naming it.
    let response = app.get(&format!("/ui/task-lists/{id}?cursor=zz")).await;
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("cursor"));
}

both_backends!(a_large_list_is_summarised_per_wave_and_paged);

/// The names of tasks on other pages come in the order asked, ids of no task left
/// out, over more ids than one statement binds.
async fn task_names_follow_the_order_asked(app: TestApp) {
    let response = app.post_json("/v1/task-lists", &list()).await;
    assert_eq!(response.status(), 201);
    let list: Value = response.json().await.unwrap();
    let known: Vec<(uuid::Uuid, String)> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().parse().unwrap(),
                t["task_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // 901 ids: the list's backwards, an unknown one, the list's again.
    let mut ids: Vec<uuid::Uuid> = known.iter().rev().map(|(id, _)| *id).collect();
    ids.insert(7, uuid::Uuid::new_v4());
    ids.extend(known.iter().map(|(id, _)| *id));
    let expected: Vec<(uuid::Uuid, String)> =
        known.iter().rev().chain(known.iter()).cloned().collect();
    assert_eq!(app.db.task_names(&ids).await.unwrap(), expected);
    assert!(app.db.task_names(&[]).await.unwrap().is_empty());
}

both_backends!(task_names_follow_the_order_asked);

/// 450 tasks in three waves, interleaved in list order: wave 2 holds the 250
/// tasks `t{i}` with `i % 9 < 5`, wave 1 those with 5 or 6, wave 3 the rest;
/// wave 2's `t9` needs wave 1's `t5`.
fn interleaved() -> Value {
    let tasks: Vec<Value> = (0..450)
        .map(|i| {
            let wave = match i % 9 {
                0..5 => 2,
                5 | 6 => 1,
                _ => 3,
            };
            let deps: Vec<&str> = if i == 9 { vec!["t5"] } else { vec![] };
            json!({
                "task_id": format!("t{i}"), "assigned_persona": "dev",
                "parallel_group": wave, "depends_on": deps, "reads": [],
                "writes": [format!("t{i}.rs")], "description": format!("task {i}"),
            })
        })
        .collect();
    json!({"project_id": "big", "created_by": "pm", "tasks": tasks})
}

/// The `href` of the pager's link `rel` (`next`, `first`), unescaped.
fn pager_link(html: &str, rel: &str) -> Option<String> {
    let end = html.find(&format!("\" rel=\"{rel}\""))?;
    let at = html[..end].rfind("href=\"").unwrap() + "href=\"".len();
    Some(html[at..end].replace("&amp;", "&"))
}

async fn a_large_lists_wave_is_listed_a_page_at_a_time(app: TestApp) {
    let response = app.post_json("/v1/task-lists", &interleaved()).await;
    assert_eq!(response.status(), 201);
    let list: Value = response.json().await.unwrap();
    let id = list["id"].as_str().unwrap().to_owned();
    // Wave 1's t5 fails (abandoning wave 2's t9); t6 is done.
    for (task, end) in [("t5", "failed"), ("t6", "done")] {
        let task = server_id(&list, task);
        for status in ["running", end] {
            let r = app
                .patch_json(&format!("/v1/tasks/{task}"), &json!({"status": status}))
                .await;
            assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        }
    }
    let wave2: Vec<String> = (0..450)
        .filter(|i| i % 9 < 5)
        .map(|i| format!("t{i}"))
        .collect();

    let first = page(&app, &format!("/ui/task-lists/{id}?wave=2")).await;
    assert_eq!(rows(&first), wave2[..200]);
    assert!(first.contains("<dt>Tasks</dt><dd>450</dd>"), "{first}");
    // The opened wave's card is marked; the active one stays wave 1.
    assert!(
        first.contains("class=\"wave-card opened\" data-wave=\"2\""),
        "{first}"
    );
    assert!(first.contains("class=\"wave-card active\" data-wave=\"1\""));
    assert!(first.contains("<dd id=\"active-wave\" aria-live=\"polite\">1</dd>"));
    // Listed, not drawn: the wave's box only, no node per task.
    assert!(first.contains("not drawn task by task"), "{first}");
    assert!(wave_box(&first, 2).contains("250 tasks"));
    assert!(!first.contains("data-wave=\"1\" transform="));
    assert_eq!(first.matches("data-task=").count(), 200);
    // A dependency on another wave is named; so is a cascade's cause.
    let at = first.find("data-task=\"t9\"").unwrap();
    let row = &first[at..at + first[at..].find("</tr>").unwrap()];
    assert!(row.contains("t5</"), "{row}");
    assert!(first.contains(&format!(
        "blocked by <a href=\"/ui/task-lists/{id}/tasks/t5\">"
    )));
    assert_eq!(pager_link(&first, "first"), None);
    let next = pager_link(&first, "next").expect("a link to the wave's next page");
    assert!(next.starts_with("?wave=2&cursor=p"), "{next}");
    assert!(first.contains(&format!(
        "data-events=\"/ui/task-lists/{id}/events?wave=2\""
    )));

    let second = page(&app, &format!("/ui/task-lists/{id}{next}")).await;
    assert_eq!(rows(&second), wave2[200..]);
    assert_eq!(pager_link(&second, "next"), None);
    assert_eq!(pager_link(&second, "first").as_deref(), Some("?wave=2"));

    // The second page's live stream starts with its own tasks only.
    let seen = sse::first_frame(&app, &format!("/ui/task-lists/{id}/events{next}")).await;
    let last = wave2.last().unwrap();
    assert!(
        seen.contains(&format!("[\"{last}\",\"pending\",null]")),
        "{seen}"
    );
    assert!(!seen.contains("\"t0\""), "{seen}");

    // A status filters the wave; the next link keeps both.
    let abandoned = page(
        &app,
        &format!("/ui/task-lists/{id}?wave=2&status=abandoned"),
    )
    .await;
    assert_eq!(rows(&abandoned), ["t9"]);
    let pending = page(&app, &format!("/ui/task-lists/{id}?wave=2&status=pending")).await;
    let waiting: Vec<String> = wave2.iter().filter(|t| *t != "t9").cloned().collect();
    assert_eq!(rows(&pending), waiting[..200]);
    let next = pager_link(&pending, "next").unwrap();
    assert!(
        next.starts_with("?wave=2&status=pending&cursor=p"),
        "{next}"
    );
    let rest = page(&app, &format!("/ui/task-lists/{id}{next}")).await;
    assert_eq!(rows(&rest), waiting[200..]);
    assert_eq!(
        pager_link(&rest, "first").as_deref(),
        Some("?wave=2&status=pending")
    );

    // An unknown wave lists nothing; a cursor that is not one is refused.
    let none = page(&app, &format!("/ui/task-lists/{id}?wave=7")).await;
    assert!(rows(&none).is_empty());
    let response = app
        .get(&format!("/ui/task-lists/{id}?wave=2&cursor=zz"))
        .await;
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("cursor"));
}

both_backends!(a_large_lists_wave_is_listed_a_page_at_a_time);

/// The change marker a live list page was drawn from (its live region's `data-since`).
fn since_of(html: &str) -> String {
    html.split("data-since=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the live region carries its marker")
        .to_owned()
}

/// A live list's stream starts from the marker its page was drawn from
/// (`?since=`), or from the last event the browser saw (`Last-Event-ID`): a change
/// made before the stream opened comes as `changed` right after `ready`.
async fn a_live_list_hears_of_a_change_made_before_its_stream(app: TestApp) {
    let since = since_of(&page(&app, "/ui/tracks").await);
    let events = format!("/ui/live/tracks/events?since={since}");
    // Nothing changed: `ready` carries the same marker.
    let ready = sse::frames(&app, &events, None, 1).await;
    assert_eq!(
        sse::field(&ready[0], "event").as_deref(),
        Some("ready"),
        "{ready:?}"
    );
    assert_eq!(sse::field(&ready[0], "id").as_deref(), Some(since.as_str()));

    let track = json!({"track_id": "live-1", "type": "feature", "status": "new",
        "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z",
        "description": "watched live"});
    let response = app
        .send_json(reqwest::Method::PUT, "/v1/tracks/live-1", &track)
        .await;
    assert!(response.status().is_success(), "{}", response.status());

    // The page's marker is behind: `changed` follows `ready` at once, with the new one.
    let missed = sse::frames(&app, &events, None, 2).await;
    assert_eq!(
        sse::field(&missed[0], "event").as_deref(),
        Some("ready"),
        "{missed:?}"
    );
    assert_eq!(
        sse::field(&missed[1], "event").as_deref(),
        Some("changed"),
        "{missed:?}"
    );
    let now = sse::field(&missed[1], "id").expect("an id");
    assert_ne!(now, since);
    // A reconnect names the last event seen, which wins over the page's marker:
    // caught up, the stream sends `ready` and nothing more (the next frame would
    // be a keep-alive comment, 15 s later).
    let resumed = sse::frames(&app, &events, Some(&now), 2);
    let resumed = tokio::time::timeout(std::time::Duration::from_secs(2), resumed).await;
    assert!(resumed.is_err(), "a caught-up stream sent {resumed:?}");
    assert!(
        page(&app, "/ui/tracks")
            .await
            .contains(&format!("data-since=\"{now}\""))
    );
}

both_backends!(a_live_list_hears_of_a_change_made_before_its_stream);

/// A live page's marker moves with what its viewer may see, and with nothing else:
/// a viewer limited to one project is not woken by another project's tracks and
/// lists, and the overview hears a new list and a claim in one of its lists (its
/// counts moved). Each part is read per allowed project (docs/architecture.md,
/// "Live pages").
async fn live_markers_follow_the_viewers_projects(backend: Backend) {
    let app = spawn_app_with_project_tokens(backend, |_| {}).await;
    let (viewer_a, admin) = (app.sign_in(TOKEN_A).await, app.sign_in(ADMIN).await);
    let marker = async |cookie: &str, path: &str| {
        let response = app
            .client
            .get(app.url(path))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        since_of(&response.text().await.unwrap())
    };
    let track = |id: &str| {
        json!({"track_id": id, "type": "feature", "status": "new",
            "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z",
            "description": "watched live"})
    };
    let list = |project: &str| {
        json!({"project_id": project, "created_by": "pm", "tasks": [{"task_id": "t1",
            "assigned_persona": "dev", "parallel_group": 1, "depends_on": [], "reads": [],
            "writes": ["a.rs"], "description": "one task"}]})
    };
    let send = async |token: &str, method: reqwest::Method, path: &str, body: Value| {
        let response = app.send_as(token, method, path, Some(&body)).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    };
    let (tracks_a, overview_a) = (
        marker(&viewer_a, "/ui/tracks").await,
        marker(&viewer_a, "/ui/").await,
    );
    let overview_all = marker(&admin, "/ui/").await;

    // Another project's track and list: nothing the viewer may see changed.
    let put = reqwest::Method::PUT;
    send(
        TOKEN_B,
        put.clone(),
        "/v1/tracks/b-1?project_id=proj-b",
        track("b-1"),
    )
    .await;
    send(
        TOKEN_B,
        reqwest::Method::POST,
        "/v1/task-lists",
        list("proj-b"),
    )
    .await;
    assert_eq!(marker(&viewer_a, "/ui/tracks").await, tracks_a);
    assert_eq!(marker(&viewer_a, "/ui/").await, overview_a);
    assert_ne!(
        marker(&admin, "/ui/").await,
        overview_all,
        "a viewer of every project sees the new list"
    );

    // The viewer's own project: its track moves the track list's marker only.
    send(
        TOKEN_A,
        put,
        "/v1/tracks/a-1?project_id=proj-a",
        track("a-1"),
    )
    .await;
    let tracks_now = marker(&viewer_a, "/ui/tracks").await;
    assert_ne!(tracks_now, tracks_a);
    assert_eq!(marker(&viewer_a, "/ui/").await, overview_a);

    // Its new list, then a claim of its task, each move the overview's marker.
    let created = send(
        TOKEN_A,
        reqwest::Method::POST,
        "/v1/task-lists",
        list("proj-a"),
    )
    .await;
    let with_list = marker(&viewer_a, "/ui/").await;
    assert_ne!(with_list, overview_a);
    let id = created["id"].as_str().expect("a list id");
    let claim = json!({"holder": "agent-1"});
    send(
        TOKEN_A,
        reqwest::Method::POST,
        &format!("/v1/task-lists/{id}/claim"),
        claim,
    )
    .await;
    let claimed = marker(&viewer_a, "/ui/").await;
    assert_ne!(claimed, with_list, "a claim moves the list's counts");
    // Nothing changed since: the marker is the same on every read.
    assert_eq!(marker(&viewer_a, "/ui/").await, claimed);
    assert_eq!(marker(&viewer_a, "/ui/tracks").await, tracks_now);
    app.shutdown().await;
}

both_backends!(live_markers_follow_the_viewers_projects);

/// The overview's row of list `id` as text: tags dropped, blanks collapsed.
fn overview_row(html: &str, id: &str) -> String {
    let link = format!("/ui/task-lists/{id}");
    let at = html.find(&link).expect("the list is on the overview");
    let start = html[..at].rfind("<tr").expect("in a row");
    let end = at + html[at..].find("</tr>").expect("a closed row");
    let mut text = String::new();
    let mut in_tag = false;
    for c in html[start..end].chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                text.push(' ');
            }
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The overview counts each list's tasks by status from the list's counters: a
/// claim, a failure and the abandons it cascades to show as they are stored.
async fn the_overview_counts_a_lists_tasks_by_status(app: TestApp) {
    let task = |id: &str, deps: &[&str]| {
        json!({"task_id": id, "assigned_persona": "dev", "parallel_group": 1 + deps.len(),
            "depends_on": deps, "reads": [], "writes": [format!("{id}.rs")],
            "description": "counted"})
    };
    let body = json!({"project_id": "counted", "created_by": "pm", "tasks": [
        task("T1", &[]), task("T2", &["T1"]), task("T3", &[]), task("T4", &["T1", "T2"])]});
    let response = app.post_json("/v1/task-lists", &body).await;
    assert_eq!(response.status(), 201);
    let list: Value = response.json().await.unwrap();
    let id = list["id"].as_str().unwrap().to_owned();
    let row = overview_row(&page(&app, "/ui/").await, &id);
    assert!(row.contains(" 4 pending 4"), "{row}");

    // T1 runs and fails: T2 and T4 are abandoned; T3 is claimed.
    for status in ["running", "failed"] {
        let path = format!("/v1/tasks/{}", server_id(&list, "T1"));
        let changed = app.patch_json(&path, &json!({"status": status})).await;
        assert_eq!(changed.status(), 200, "{status}");
    }
    let claimed = app.claim(&id, &json!({"holder": "agent-1"})).await;
    assert_eq!(claimed.status(), 200);
    let claimed: Value = claimed.json().await.unwrap();
    assert_eq!(claimed["task"]["task_id"], "T3", "{claimed}");
    let row = overview_row(&page(&app, "/ui/").await, &id);
    assert!(row.contains(" 4 running 1 failed 1 abandoned 2"), "{row}");
}

both_backends!(the_overview_counts_a_lists_tasks_by_status);

/// A cancel's confirmation page, for a job and for a run: while it is open, what
/// the cancel will do and the form that does it, posting to the page's own
/// `/cancel`; once it has ended, that there is nothing to cancel and a way back.
async fn cancel_pages_confirm_or_say_there_is_nothing_to_do(backend: Backend) {
    let app = crate::common::spawn_app_with(backend, |s| s.workers = 0).await;
    let job = app
        .submit_refine_job(&crate::refine_jobs::body(&["P1-A1"]))
        .await;
    let job = job["id"].as_str().unwrap().to_owned();
    let run = app
        .post_json(
            "/v1/refine-runs",
            &json!({"plan": crate::common::one_phase_plan()}),
        )
        .await;
    assert_eq!(run.status(), 202);
    let run: Value = run.json().await.unwrap();
    let run = run["id"].as_str().unwrap().to_owned();

    // Open (no worker takes them): what the cancel does, and the form.
    for (noun, id, what) in [
        ("job", &job, "The job has not started"),
        (
            "run",
            &run,
            "Its 1 phase jobs not yet ended will be cancelled",
        ),
    ] {
        let open = page(&app, &format!("/ui/{noun}s/{id}/cancel")).await;
        assert!(
            open.contains(&format!("<title>Cancel refine {noun}")),
            "{open}"
        );
        assert!(open.contains(what), "{open}");
        assert!(open.contains(&format!("action=\"/ui/{noun}s/{id}/cancel\"")));
        assert!(open.contains(&format!("Yes, cancel this {noun}")));
    }

    // Ended: nothing to cancel, and the way back to its page.
    for path in [
        format!("/v1/refine-jobs/{job}/cancel"),
        format!("/v1/refine-runs/{run}/cancel"),
    ] {
        let cancelled = app.post_json(&path, &json!({})).await;
        assert!(
            cancelled.status().is_success(),
            "{path}: {}",
            cancelled.status()
        );
    }
    for (noun, id) in [("job", &job), ("run", &run)] {
        let ended = page(&app, &format!("/ui/{noun}s/{id}/cancel")).await;
        assert!(
            ended.contains(&format!(
                "This {noun} has ended (cancelled): there is nothing to cancel."
            )),
            "{ended}"
        );
        assert!(ended.contains(&format!("href=\"/ui/{noun}s/{id}\">Back to the {noun}")));
        assert!(!ended.contains("Yes, cancel"));
    }
    app.shutdown().await;
}

both_backends!(cancel_pages_confirm_or_say_there_is_nothing_to_do);
