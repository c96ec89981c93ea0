//! `plangate health`, the image's HEALTHCHECK: the real binary against the real
//! server on a real port. It must find the server wherever `PLANGATE_BIND` (or the
//! config file's `bind`) puts it, probe 0.0.0.0 on loopback, and fail with exit 1
//! and one line when nothing healthy answers.

use std::process::{Command, Output};

use crate::common::TestApp;

fn health(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plangate"));
    // The caller's environment must not leak settings into these runs.
    for (key, _) in std::env::vars() {
        if key.starts_with("PLANGATE_") || key == "DATABASE_URL" {
            cmd.env_remove(key);
        }
    }
    cmd.arg("health").args(args).envs(env.iter().copied());
    cmd.output().expect("run plangate health")
}

fn assert_healthy(output: &Output, port: u16) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "exit {:?}, stdout {stdout}, stderr {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout.trim(),
        format!("plangate health: http://127.0.0.1:{port}/healthz 200")
    );
}

async fn follows_the_bind_setting(app: TestApp) {
    let port = app.addr.port();
    let exact = app.addr.to_string();
    // The variable, as in the image (blocking child processes off the runtime).
    let wildcard = format!("0.0.0.0:{port}");
    let (by_env, by_wildcard, by_flag, by_file) = tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("plangate.toml");
        std::fs::write(&config, format!("bind = \"0.0.0.0:{port}\"\n")).expect("write config");
        (
            health(&[], &[("PLANGATE_BIND", &exact)]),
            health(&[], &[("PLANGATE_BIND", &wildcard)]),
            health(&["--bind", &exact], &[("PLANGATE_BIND", "127.0.0.1:1")]),
            health(
                &[],
                &[("PLANGATE_CONFIG", config.to_str().expect("utf-8 path"))],
            ),
        )
    })
    .await
    .expect("probe thread");
    assert_healthy(&by_env, port);
    assert_healthy(&by_wildcard, port);
    assert_healthy(&by_flag, port);
    assert_healthy(&by_file, port);
    app.shutdown().await;
}

both_backends!(follows_the_bind_setting);

#[test]
fn nothing_listening_is_unhealthy_with_one_line() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let output = health(&[], &[("PLANGATE_BIND", &format!("0.0.0.0:{port}"))]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "plangate: unhealthy: cannot reach 127.0.0.1:{port}"
        )),
        "{stderr}"
    );
}

#[test]
fn an_unprobeable_bind_setting_is_named() {
    for (bind, expected) in [
        ("127.0.0.1:0", "port 0 picks a random port"),
        ("localhost:8080", "is not an address like 127.0.0.1:8080"),
    ] {
        let output = health(&[], &[("PLANGATE_BIND", bind)]);
        assert_eq!(output.status.code(), Some(1), "{bind}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("invalid PLANGATE_BIND") && stderr.contains(expected),
            "{bind}: {stderr}"
        );
    }
}
