//! The fleet of `bench/claims.sh` driven from Rust: N agents loop claim → `PATCH
//! done` (or, with `cascade`, half of them abandon random tasks) over keep-alive
//! HTTP/1.1, all on one thread. `bench/claims.py` does the same in Python, whose
//! threads took a large share of the two cores the server and Postgres share
//! (bench/README.md, "Claims at scale": the figures of both drivers).
//!
//! ```text
//! cargo bench --bench claims_load -- claims  BASE LIST CLAIMERS SECONDS
//! cargo bench --bench claims_load -- cascade BASE LIST WRITERS SECONDS
//! ```
//! Prints the same `key=value` line as `claims.py`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One keep-alive connection: writes a request, reads the status line, the
/// `content-length` and the body; nothing else of HTTP is needed here.
struct Client {
    addr: String,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

impl Client {
    fn new(addr: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            stream: None,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    async fn call(&mut self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let data = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{data}",
            self.addr,
            data.len()
        );
        for attempt in 0..2 {
            match self.exchange(request.as_bytes()).await {
                Ok(answer) => return answer,
                Err(e) if attempt == 1 => panic!("{method} {path}: {e}"),
                Err(_) => self.stream = None,
            }
        }
        unreachable!()
    }

    async fn exchange(&mut self, request: &[u8]) -> std::io::Result<(u16, Value)> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(&self.addr).await?;
            stream.set_nodelay(true)?;
            self.stream = Some(stream);
            self.buf.clear();
        }
        let stream = self.stream.as_mut().expect("connected above");
        stream.write_all(request).await?;
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            read_more(stream, &mut self.buf).await?;
        };
        let head = std::str::from_utf8(&self.buf[..end]).map_err(std::io::Error::other)?;
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("no status line"))?;
        let length: usize = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        let start = end + 4;
        while self.buf.len() < start + length {
            read_more(stream, &mut self.buf).await?;
        }
        let body = serde_json::from_slice(&self.buf[start..start + length]).unwrap_or(Value::Null);
        self.buf.drain(..start + length);
        Ok((status, body))
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = [0u8; 16 * 1024];
    let n = stream.read(&mut chunk).await?;
    if n == 0 {
        return Err(std::io::Error::other("the server closed the connection"));
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

#[derive(Default)]
struct Tally {
    claim_ms: Vec<f64>,
    other_ms: Vec<f64>,
    done: u64,
    errors: u64,
    finished: bool,
}

fn pct(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let i = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[i.min(values.len() - 1)]
}

/// One agent: claim → `PATCH done` until the deadline or the list's end.
async fn claimer(
    addr: String,
    list: String,
    i: usize,
    pipeline: bool,
    deadline: Instant,
    tally: Rc<RefCell<Tally>>,
) {
    let mut c = Client::new(&addr);
    let holder = format!("agent-{i}");
    let mut ask = serde_json::json!({ "holder": holder });
    if pipeline {
        ask["mode"] = "pipeline".into();
    }
    let done = serde_json::json!({ "status": "done", "holder": holder });
    while Instant::now() < deadline && !tally.borrow().finished {
        let t0 = Instant::now();
        let (status, answer) = c
            .call("POST", &format!("/v1/task-lists/{list}/claim"), &ask)
            .await;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        if status != 200 {
            tally.borrow_mut().errors += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        if !pipeline {
            tally.borrow_mut().claim_ms.push(ms);
        }
        let Some(id) = answer["task"]["id"].as_str() else {
            if matches!(answer["next"].as_str(), Some("done" | "blocked")) {
                tally.borrow_mut().finished = !pipeline;
                return;
            }
            tokio::time::sleep(Duration::from_millis(if pipeline { 10 } else { 5 })).await;
            continue;
        };
        let (status, _) = c.call("PATCH", &format!("/v1/tasks/{id}"), &done).await;
        let mut t = tally.borrow_mut();
        if pipeline {
            t.other_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        match status {
            200 => t.done += 1,
            // A cascade abandoned the task between the claim and the PATCH.
            409 if pipeline => {}
            _ => t.errors += 1,
        }
    }
}

/// One abandoner: forces a random task `abandoned`, cascading over its descendants.
async fn abandoner(
    addr: String,
    ids: Rc<Vec<String>>,
    i: usize,
    deadline: Instant,
    tally: Rc<RefCell<Tally>>,
) {
    let mut c = Client::new(&addr);
    let mut rng = plangate::domain::xorshift::XorShift::new(i as u64 + 1);
    let body =
        serde_json::json!({ "status": "abandoned", "abandon_category": "scope", "force": true });
    while Instant::now() < deadline {
        let id = &ids[rng.below(ids.len())];
        let t0 = Instant::now();
        let (status, _) = c.call("PATCH", &format!("/v1/tasks/{id}"), &body).await;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        match status {
            200 => tally.borrow_mut().claim_ms.push(ms),
            409 => {} // already terminal
            _ => tally.borrow_mut().errors += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.is_empty() || args[0].starts_with("--") {
        // A plain `cargo bench` runs every bench target, and a test runner lists
        // them (`--list`); this one needs a server (bench/claims.sh starts it), so
        // it has nothing to do or list alone.
        eprintln!("claims_load: driven by bench/claims.sh; nothing to run without arguments");
        return;
    }
    let [mode, base, list, agents, seconds] = args.as_slice() else {
        eprintln!("usage: claims_load claims|cascade BASE LIST AGENTS SECONDS");
        std::process::exit(2);
    };
    let addr = base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let agents: usize = agents.parse().expect("AGENTS is a number");
    let seconds: f64 = seconds.parse().expect("SECONDS is a number");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    let tally = Rc::new(RefCell::new(Tally::default()));
    local.block_on(&runtime, async {
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        let t0 = Instant::now();
        let mut agents_running = Vec::new();
        if mode == "claims" {
            for i in 0..agents {
                let f = claimer(addr.clone(), list.clone(), i, false, deadline, tally.clone());
                agents_running.push(tokio::task::spawn_local(f));
            }
        } else {
            let (_, whole) = Client::new(&addr).call("GET", &format!("/v1/task-lists/{list}"), &Value::Null).await;
            let ids: Rc<Vec<String>> = Rc::new(
                whole["tasks"].as_array().expect("tasks").iter().map(|t| t["id"].as_str().expect("id").to_owned()).collect(),
            );
            for i in 0..agents {
                let (a, l, t) = (addr.clone(), list.clone(), tally.clone());
                agents_running.push(if i % 2 == 1 {
                    tokio::task::spawn_local(claimer(a, l, i, true, deadline, t))
                } else {
                    tokio::task::spawn_local(abandoner(a, ids.clone(), i, deadline, t))
                });
            }
        }
        for a in agents_running {
            a.await.expect("agent");
        }
        let elapsed = t0.elapsed().as_secs_f64();
        let mut t = tally.borrow_mut();
        let (p50, p99) = (pct(&mut t.claim_ms, 50.0), pct(&mut t.claim_ms, 99.0));
        if mode == "claims" {
            println!(
                "tasks_per_s={:.1} done={} claims={} claim_p50_ms={p50:.1} claim_p99_ms={p99:.1} errors={} seconds={elapsed:.1}",
                t.done as f64 / elapsed,
                t.done,
                t.claim_ms.len(),
                t.errors
            );
        } else {
            let other = pct(&mut t.other_ms, 99.0);
            println!(
                "cascades={} cascade_p50_ms={p50:.1} cascade_p99_ms={p99:.1} claim_done_p99_ms={other:.1} errors={}",
                t.claim_ms.len(),
                t.errors
            );
        }
    });
}
