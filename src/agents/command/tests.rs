use super::*;
use std::sync::Arc;

use crate::domain::refine::{Assignment, L0Packet};

fn request() -> L0Request {
    L0Request {
        job_id: uuid::Uuid::nil(),
        phase_id: "P1".into(),
        assignment_id: "P1-A1".into(),
        task_file: None,
        prompt: String::new(),
        packet: Arc::new(L0Packet {
            target_assignment_id: "P1-A1".into(),
            phase_id: "P1".into(),
            assignment: Assignment::new("P1-A1"),
            peer_summaries: vec![],
            phase: None,
            task_file_path: None,
            instructions: String::new(),
        }),
        phase_assignments: Arc::from(Vec::new()),
        rate_feedback: None,
    }
}

#[test]
fn program_resolution_uses_the_server_path() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("tool");
    std::fs::write(&exe, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "").unwrap();
    let path = std::env::join_paths(["/nonexistent", dir.path().to_str().unwrap()]).unwrap();

    assert_eq!(resolve_program("tool", Some(&path)).unwrap(), exe);
    assert!(
        resolve_program("plain", Some(&path))
            .unwrap_err()
            .contains("not found")
    );
    assert!(
        resolve_program("tool", None)
            .unwrap_err()
            .contains("no PATH")
    );
    assert_eq!(
        resolve_program("./x/tool", None).unwrap(),
        PathBuf::from("./x/tool")
    );
    assert!(resolve_program("", Some(&path)).is_err());
}

#[test]
fn child_env_is_the_allowed_variables_and_plangate_ones() {
    let mut req = request();
    req.task_file = Some("/w/task.md".into());
    let env = child_env(
        &["HOME".into(), "MISSING".into(), "PLANGATE_JOB_ID".into()],
        &req,
        |name| match name {
            "HOME" => Some("/home/x".into()),
            "PLANGATE_JOB_ID" => Some("spoofed".into()),
            _ => None,
        },
    );
    let get = |k: &str| {
        env.iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.to_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(get("HOME"), ["/home/x"]);
    assert!(get("MISSING").is_empty());
    assert_eq!(get("PLANGATE_JOB_ID"), [uuid::Uuid::nil().to_string()]);
    assert_eq!(get("PLANGATE_PHASE_ID"), ["P1"]);
    assert_eq!(get("PLANGATE_ASSIGNMENT_ID"), ["P1-A1"]);
    assert_eq!(get("PLANGATE_TASK_FILE"), ["/w/task.md"]);

    req.task_file = None;
    let env = child_env(&[], &req, |_| None);
    assert_eq!(env.len(), 4);
    assert!(
        env.iter()
            .any(|(n, v)| n == "PLANGATE_TASK_FILE" && v.is_empty())
    );
}

#[test]
fn tail_keeps_the_last_bytes() {
    let mut t = Tail::new(10);
    for _ in 0..1000 {
        t.push(b"0123456789");
    }
    t.push(b"abc");
    let (text, dropped) = t.finish();
    assert_eq!(text, "3456789abc");
    assert_eq!(dropped, 10_003 - 10);

    let mut t = Tail::new(10);
    t.push(b"short");
    assert_eq!(t.finish(), ("short".to_owned(), 0));
}

#[test]
fn short_tail_is_one_line() {
    assert_eq!(short_tail("  a\nb  \n", 10), "a b");
    assert_eq!(short_tail("0123456789abc", 3), "…abc");
    assert_eq!(short_tail("", 3), "");
}
