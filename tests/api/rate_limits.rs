//! Provider rate limits shared by every replica (docs/jobs.md, "Rate limits"):
//! admissions from two database handles (two replicas) against one limit, the
//! fair shares, a newcomer behind a backlog, `max_wait_secs`, a provider's pause,
//! `GET`/`PUT /v1/rate-limits`, the typed `error_code` of an L0 that ended
//! `rate_limited` or `quota_exhausted`, and the job page's waiting calls — on
//! both back-ends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plangate::db::Database;
use plangate::db::rate_limits::{RateAsk, RateVerdict};
use plangate::domain::rate_limit::{Cost, Limits, ProviderSignal};
use serde_json::json;
use uuid::Uuid;

use crate::common::{Backend, TestApp, expect_problem, spawn_app_with};
use crate::usage::job_body;

fn ask(executor: &str, limits: &Limits, project: &str, n: usize) -> RateAsk {
    RateAsk {
        executor: executor.to_owned(),
        configured: limits.clone(),
        project_id: project.to_owned(),
        job_id: Uuid::from_u128(0xfeed),
        assignment_id: format!("{project}-{n}"),
        cost: Cost {
            input_tokens: 100,
            output_tokens: 200,
        },
        running_ttl_ms: 60_000,
    }
}

async fn second_handle(app: &TestApp) -> Database {
    Database::connect_with(&app.database.url, plangate::config::SqliteSync::Normal)
        .await
        .expect("a second handle on the test database")
}

/// Settings with one executor `name` of `profile` (TOML) limited by `limits`.
fn limited_executor(s: &mut plangate::config::Settings, name: &str, profile: &str, limits: Limits) {
    let profile: plangate::config::ExecutorProfile =
        toml::from_str(profile).expect("an executor profile");
    s.executors.insert(name.into(), profile);
    s.rate_limits.insert(name.into(), limits);
}

/// An Anthropic profile at `base_url`.
fn anthropic_at(base_url: &str) -> String {
    format!("kind = \"anthropic\"\nmodel = \"m\"\nbase_url = \"{base_url}\"")
}

/// Callers that ask, start (settling at once) and ask again, for `secs`: the
/// start times by project.
async fn offer(
    dbs: &[Database],
    limits: &Limits,
    callers: &[(&'static str, usize)],
    secs: f64,
) -> BTreeMap<&'static str, Vec<f64>> {
    let started: Arc<Mutex<BTreeMap<&'static str, Vec<f64>>>> = Arc::default();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    let mut k = 0;
    for (project, count) in callers {
        for _ in 0..*count {
            k += 1;
            let db = dbs[k % dbs.len()].clone();
            let (limits, started, project) = (limits.clone(), started.clone(), *project);
            tasks.push(tokio::spawn(async move {
                let mut n = k * 100_000;
                while t0.elapsed().as_secs_f64() < secs {
                    let a = ask("claude", &limits, project, n);
                    match db.rate_admit(&a).await.expect("admission") {
                        RateVerdict::Start => {
                            started
                                .lock()
                                .unwrap()
                                .entry(project)
                                .or_default()
                                .push(t0.elapsed().as_secs_f64());
                            db.rate_settle("claude", &limits, &a.call_id(), Cost::default())
                                .await
                                .expect("settle");
                            n += 1;
                        }
                        RateVerdict::Wait(d) => tokio::time::sleep(d).await,
                        RateVerdict::TimedOut { .. } => panic!("nothing waits 600 s here"),
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(started).unwrap().into_inner().unwrap()
}

/// Two replicas, two projects at shares 3:1, twelve callers all wanting to start
/// at once: the starts never beat the limit and split 3:1.
async fn two_replicas_share_one_limit_by_weight(backend: Backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    let other = second_handle(&app).await;
    let limits = Limits {
        requests_per_minute: Some(600),
        shares: [("team-a".to_owned(), 3), ("team-b".to_owned(), 1)].into(),
        ..Limits::default()
    };
    let secs = 6.0;
    let started = offer(
        &[app.db.clone(), other],
        &limits,
        &[("team-a", 6), ("team-b", 6)],
        secs,
    )
    .await;
    let a = started.get("team-a").map_or(0, Vec::len);
    let b = started.get("team-b").map_or(0, Vec::len);
    let all: Vec<f64> = started.values().flatten().copied().collect();
    // At most one second's worth (10) at once plus 10 a second in any window.
    let worst_second = all
        .iter()
        .map(|s| all.iter().filter(|t| **t >= *s && **t < s + 1.0).count())
        .max()
        .unwrap_or(0);
    assert!(worst_second <= 20, "{worst_second} starts in one second");
    assert!(
        (a + b) as f64 <= 10.0 + 10.0 * secs,
        "{} starts in {secs} s",
        a + b
    );
    // Liveness only: how much of the limit is used is a figure of the CI stage
    // (.ci/ratelimits.sh), not a timed assertion on a shared machine.
    assert!(
        (a + b) as f64 >= 0.3 * 10.0 * secs,
        "only {} starts in {secs} s",
        a + b
    );
    let share = a as f64 / (a + b) as f64;
    assert!((share - 0.75).abs() <= 0.075, "split {a}:{b}");
    app.shutdown().await;
}

/// A project alone gets the whole limit; one that arrives behind another's
/// backlog of waiting calls starts within the next few admissions.
async fn a_newcomer_starts_behind_a_backlog_at_once(backend: Backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    let limits = Limits {
        requests_per_minute: Some(60),
        ..Limits::default()
    };
    // The bucket's one request goes to the first call; 200 more of team-a wait.
    // Each waits unless a refill came due (a second on): a loaded machine can take
    // that long over the 200 asks.
    let started = Instant::now();
    assert_eq!(
        app.db
            .rate_admit(&ask("claude", &limits, "team-a", 0))
            .await
            .unwrap(),
        RateVerdict::Start
    );
    let waits_or_refilled = |v: &RateVerdict| {
        matches!(v, RateVerdict::Wait(_))
            || (*v == RateVerdict::Start && started.elapsed() >= Duration::from_secs(1))
    };
    for n in 1..=200 {
        let v = app
            .db
            .rate_admit(&ask("claude", &limits, "team-a", n))
            .await
            .unwrap();
        assert!(waits_or_refilled(&v), "{v:?} after {:?}", started.elapsed());
    }
    let newcomer = ask("claude", &limits, "team-c", 0);
    let first = app.db.rate_admit(&newcomer).await.unwrap();
    assert!(
        waits_or_refilled(&first),
        "{first:?} after {:?}",
        started.elapsed()
    );
    if first == RateVerdict::Start {
        app.shutdown().await;
        return;
    }
    // Within two refills (one a second at 60/min) the newcomer has started.
    let t0 = Instant::now();
    loop {
        match app.db.rate_admit(&newcomer).await.unwrap() {
            RateVerdict::Start => break,
            RateVerdict::Wait(d) => tokio::time::sleep(d.min(Duration::from_millis(100))).await,
            v => panic!("{v:?}"),
        }
        // team-a's head keeps asking too (it may go first: one call per project).
        let _ = app
            .db
            .rate_admit(&ask("claude", &limits, "team-a", 1))
            .await;
        assert!(
            t0.elapsed() < Duration::from_millis(2_500),
            "the newcomer waits behind the backlog"
        );
    }
    app.shutdown().await;
}

/// A grant its call does not pick up within the grant's time gives its room
/// back: the call, asking late, starts at once instead of waiting a refill.
async fn a_lapsed_grant_gives_its_room_back(backend: Backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    let other = second_handle(&app).await;
    // One request a second, one at a time.
    let limits = Limits {
        requests_per_minute: Some(60),
        ..Limits::default()
    };
    let first = ask("claude", &limits, "p", 0);
    let late = ask("claude", &limits, "p", 1);
    let asker = ask("claude", &limits, "p", 2);
    assert_eq!(app.db.rate_admit(&first).await.unwrap(), RateVerdict::Start);
    for a in [&late, &asker] {
        assert!(matches!(
            app.db.rate_admit(a).await.unwrap(),
            RateVerdict::Wait(_)
        ));
    }
    // The other replica's asks grant `late` (the queue's head) its start at the
    // next refill; `late` does not ask in time.
    let t0 = Instant::now();
    loop {
        assert!(matches!(
            other.rate_admit(&asker).await.unwrap(),
            RateVerdict::Wait(_)
        ));
        let granted = app.db.rate_waiting_calls(10).await.unwrap();
        if granted
            .iter()
            .any(|c| c.granted && c.assignment_id == late.assignment_id)
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no grant: {granted:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let granted_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(
        plangate::db::rate_limits::GRANT_TTL_MS as u64 + 80,
    ))
    .await;
    // The bucket has refilled about 0.7 of a request since the grant: only the
    // lapsed grant's request, given back, lets `late` start now.
    let verdict = app.db.rate_admit(&late).await.unwrap();
    if granted_at.elapsed() < Duration::from_millis(1_000) {
        assert_eq!(
            verdict,
            RateVerdict::Start,
            "the lapsed grant's room was lost"
        );
    }
    // Given back once: the next call waits for the refill.
    assert!(matches!(
        other.rate_admit(&asker).await.unwrap(),
        RateVerdict::Wait(_)
    ));
    app.shutdown().await;
}

/// `max_wait_secs` ends a waiting call `rate_limited`; a provider's `retry-after`
/// pauses every replica; both show in `GET /v1/rate-limits`.
async fn waits_end_and_pauses_hold_every_replica(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        let limits = Limits {
            requests_per_minute: Some(1),
            max_wait_secs: Some(1),
            ..Limits::default()
        };
        limited_executor(s, "claude", &anthropic_at("http://127.0.0.1:9"), limits);
    })
    .await;
    let other = second_handle(&app).await;
    let limits = Limits {
        requests_per_minute: Some(1),
        max_wait_secs: Some(1),
        ..Limits::default()
    };
    assert_eq!(
        app.db
            .rate_admit(&ask("claude", &limits, "p", 0))
            .await
            .unwrap(),
        RateVerdict::Start
    );
    let second = ask("claude", &limits, "p", 1);
    assert!(matches!(
        other.rate_admit(&second).await.unwrap(),
        RateVerdict::Wait(_)
    ));
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    match other.rate_admit(&second).await.unwrap() {
        RateVerdict::TimedOut { waited, .. } => assert!(waited >= Duration::from_secs(1)),
        v => panic!("{v:?}"),
    }

    // A 429 with retry-after 3 s on one replica: the other holds off too.
    let roomy = Limits {
        requests_per_minute: Some(6000),
        ..Limits::default()
    };
    let put = app
        .client
        .put(app.url("/v1/rate-limits/claude"))
        .json(&json!({"requests_per_minute": 6000}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    app.db
        .rate_observe(
            "claude",
            &roomy,
            &ProviderSignal {
                retry_after: Some(Duration::from_secs(3)),
                too_many: true,
                ..ProviderSignal::default()
            },
        )
        .await
        .unwrap();
    match other
        .rate_admit(&ask("claude", &roomy, "p", 2))
        .await
        .unwrap()
    {
        RateVerdict::Wait(_) => {}
        v => panic!("a paused executor admitted {v:?}"),
    }
    let view: serde_json::Value = app.get_json("/v1/rate-limits").await;
    let entry = &view["executors"][0];
    assert_eq!(entry["executor"], "claude");
    assert_eq!(entry["requests_per_minute"], 6000);
    assert_eq!(entry["max_wait_secs"], 1);
    assert!(entry["paused_until"].is_string(), "{entry}");
    assert_eq!(entry["projects"]["p"]["share"], 1);
    app.shutdown().await;
}

/// `PUT /v1/rate-limits/{executor}`: 404 for an executor no limit applies to,
/// 422 naming the field, and a change any replica's next admission follows.
async fn runtime_changes_are_checked_and_followed(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        let limits = Limits {
            requests_per_minute: Some(600),
            ..Limits::default()
        };
        limited_executor(s, "agent", "kind = \"command\"\nargv = [\"true\"]", limits);
    })
    .await;
    let put = |path: &'static str, body: serde_json::Value| {
        app.client.put(app.url(path)).json(&body).send()
    };
    expect_problem(
        put("/v1/rate-limits/nope", json!({})).await.unwrap(),
        404,
        "not_found",
    )
    .await;
    expect_problem(
        put("/v1/rate-limits/builtin", json!({})).await.unwrap(),
        404,
        "not_found",
    )
    .await;
    for (body, field) in [
        (json!({"requests_per_minute": -5}), "requests_per_minute"),
        (json!({"max_wait_secs": 2.5}), "max_wait_secs"),
        (json!({"shares": {"x": 0}}), "shares.x"),
    ] {
        let p = expect_problem(
            put("/v1/rate-limits/agent", body).await.unwrap(),
            422,
            "invalid_field",
        )
        .await;
        assert_eq!(p["field"], field);
    }
    let r = put(
        "/v1/rate-limits/agent",
        json!({"requests_per_minute": 60, "shares": {"team-a": 2}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let entry: serde_json::Value = r.json().await.unwrap();
    assert_eq!(entry["requests_per_minute"], 60);
    assert_eq!(entry["projects"]["team-a"]["share"], 2);
    // The other replica's next admissions follow 60/min: after one start, 300 ms
    // bring 0.3 of a request (at the configured 600/min they would bring 3).
    let other = second_handle(&app).await;
    let configured = Limits {
        requests_per_minute: Some(600),
        ..Limits::default()
    };
    let first = other
        .rate_admit(&ask("agent", &configured, "team-a", 0))
        .await
        .unwrap();
    assert_eq!(first, RateVerdict::Start);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = other
        .rate_admit(&ask("agent", &configured, "team-a", 1))
        .await
        .unwrap();
    assert!(
        matches!(next, RateVerdict::Wait(_)),
        "{next:?}: the change was not followed"
    );
    app.shutdown().await;
}

/// A scripted Anthropic-speaking provider whose every answer is a spend-limit
/// 429 (no `retry-after`): the answer of an account whose credit is spent.
/// Returns its base URL and how many requests it got.
async fn spent_provider() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            (
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                [("content-type", "application/json")],
                "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\
                 \"You have reached your specified API usage limits. You will regain access on \
                 2027-01-01 at 00:00 UTC.\"}}",
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), hits)
}

/// docs/jobs.md, "Rate limits", "Errors": an L0 that waited `max_wait_secs` and
/// one the provider refused for its spend limit end `failed` with the error text
/// clients read, and with a typed `error_code` in the record and the log line.
async fn l0_records_carry_their_error_code(backend: Backend) {
    let (base, hits) = spent_provider().await;
    let app = spawn_app_with(backend, |s| {
        // One request a minute: the first L0 starts, the second waits 1 s and ends.
        let limits = Limits {
            requests_per_minute: Some(1),
            max_wait_secs: Some(1),
            ..Limits::default()
        };
        limited_executor(s, "claude", &anthropic_at(&base), limits);
    })
    .await;
    let job = app
        .submit_refine_job(&job_body(
            &["P1-A1", "P1-A2"],
            "claude",
            json!({"project_id": "team-a"}),
        ))
        .await;
    let id = job["id"].as_str().unwrap();
    let job = app.wait_job(id).await;
    // Tried once: no retry brings a spent account through.
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1, "{job}");
    let records = app.refine_job_assignments(id).await;
    let by_id = |a: &str| {
        records
            .iter()
            .find(|r| r["assignment_id"] == a)
            .unwrap_or_else(|| panic!("no record of {a}: {records:?}"))
            .clone()
    };
    let quota = by_id("P1-A1");
    assert_eq!(quota["status"], "failed", "{quota}");
    assert_eq!(quota["error_code"], "quota_exhausted", "{quota}");
    let text = quota["error"].as_str().unwrap();
    assert!(text.starts_with("quota_exhausted: HTTP 429"), "{text}");
    let limited = by_id("P1-A2");
    assert_eq!(limited["status"], "failed", "{limited}");
    assert_eq!(limited["error_code"], "rate_limited", "{limited}");
    let text = limited["error"].as_str().unwrap();
    assert!(
        text.starts_with("rate_limited: waited 1 s for room on executor claude"),
        "{text}"
    );
    assert_eq!(limited["starts"], 0, "it never started: {limited}");
    let log: Vec<&str> = job["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    for (a, code) in [("P1-A1", "quota_exhausted"), ("P1-A2", "rate_limited")] {
        let line =
            format!("CRITICAL: L0 for {a} failed ({code}) — proceeding with N-1 suggestions");
        assert!(log.contains(&line.as_str()), "{line} not in {log:?}");
    }
    app.shutdown().await;
}

/// The dashboard's job page lists the job's L0 calls waiting for room, read by
/// job (docs/jobs.md, "Rate limits", "Seeing it"); another job's page does not.
async fn the_job_page_lists_its_waiting_calls(backend: Backend) {
    let limits = Limits {
        requests_per_minute: Some(1),
        ..Limits::default()
    };
    let configured = limits.clone();
    let app = spawn_app_with(backend, |s| {
        limited_executor(s, "claude", &anthropic_at("http://127.0.0.1:9"), configured);
        // No worker: the test asks for room as the job's worker would.
        s.workers = 0;
    })
    .await;
    let body = job_body(
        &["P1-A1", "P1-A2"],
        "claude",
        json!({"project_id": "team-a"}),
    );
    let job = app.submit_refine_job(&body).await;
    let id = job["id"].as_str().unwrap();
    let other = app.submit_refine_job(&body).await;
    let other_id = other["id"].as_str().unwrap();
    let job_id: Uuid = id.parse().unwrap();
    let as_job = |assignment: &str| RateAsk {
        job_id,
        assignment_id: assignment.to_owned(),
        ..ask("claude", &limits, "team-a", 0)
    };
    // P1-A1 takes the one request; P1-A2 waits for room.
    assert_eq!(
        app.db.rate_admit(&as_job("P1-A1")).await.unwrap(),
        RateVerdict::Start
    );
    assert!(matches!(
        app.db.rate_admit(&as_job("P1-A2")).await.unwrap(),
        RateVerdict::Wait(_)
    ));
    let page = app
        .get(&format!("/ui/jobs/{id}"))
        .await
        .text()
        .await
        .unwrap();
    let section = page
        .split("id=\"job-waiting\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no waiting calls on the job page: {page}"));
    let section = &section[..section.find("</section>").unwrap()];
    assert!(section.contains("data-assignment=\"P1-A2\""), "{section}");
    assert!(
        !section.contains("P1-A1"),
        "a running call is not waiting: {section}"
    );
    assert!(
        section.contains("claude") && section.contains("team-a"),
        "{section}"
    );
    assert!(section.contains("<time"), "waiting since: {section}");
    let other_page = app
        .get(&format!("/ui/jobs/{other_id}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(!other_page.contains("job-waiting"), "{other_page}");
    app.shutdown().await;
}

both_backends!(
    two_replicas_share_one_limit_by_weight,
    a_newcomer_starts_behind_a_backlog_at_once,
    a_lapsed_grant_gives_its_room_back,
    waits_end_and_pauses_hold_every_replica,
    runtime_changes_are_checked_and_followed,
    l0_records_carry_their_error_code,
    the_job_page_lists_its_waiting_calls,
);
