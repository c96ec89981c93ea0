//! `plangate health`: the container HEALTHCHECK without an HTTP client in the image.
//! One `GET /healthz` over loopback, bounded by a deadline; exit 0 on a 200 answer,
//! 1 otherwise (Docker's and podman's "unhealthy"), with one line saying why.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The liveness path (docs/operations: no database round trip).
const PATH: &str = "/healthz";
/// Enough for the status line and headers of the small JSON answer.
const MAX_ANSWER: usize = 16 * 1024;

/// Why a probe failed, as printed by `plangate health`.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("no answer from {addr} within {secs} s")]
    Timeout { addr: SocketAddr, secs: u64 },
    #[error("cannot reach {addr}: {source}")]
    Io {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{addr} answered {status_line:?}, not 200")]
    Status {
        addr: SocketAddr,
        status_line: String,
    },
}

/// GET /healthz on `addr`; everything (connect, write, read) within `timeout`.
pub fn probe(addr: SocketAddr, timeout: Duration) -> Result<(), ProbeError> {
    let deadline = Instant::now() + timeout;
    let io = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => ProbeError::Timeout {
            addr,
            secs: timeout.as_secs(),
        },
        _ => ProbeError::Io { addr, source },
    };
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(ProbeError::Timeout {
                addr,
                secs: timeout.as_secs(),
            })
    };
    let mut stream = TcpStream::connect_timeout(&addr, left()?).map_err(io)?;
    stream.set_write_timeout(Some(left()?)).map_err(io)?;
    let request = format!(
        "GET {PATH} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: plangate-health\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(io)?;

    // Read until the status line is complete (or the server closes).
    let mut answer = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    while !answer.contains(&b'\n') && answer.len() < MAX_ANSWER {
        stream.set_read_timeout(Some(left()?)).map_err(io)?;
        match stream.read(&mut chunk).map_err(io)? {
            0 => break,
            n => answer.extend_from_slice(&chunk[..n]),
        }
    }
    let status_line = String::from_utf8_lossy(answer.split(|b| *b == b'\n').next().unwrap_or(&[]))
        .trim_end()
        .to_owned();
    let mut words = status_line.split(' ');
    match (words.next(), words.next()) {
        (Some(version), Some("200")) if version.starts_with("HTTP/1.") => Ok(()),
        _ => Err(ProbeError::Status { addr, status_line }),
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::thread;

    use super::*;

    /// A one-shot server that answers `reply` (or nothing) to the first request.
    fn serve_once(reply: Option<&'static str>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        thread::spawn(move || {
            let (mut socket, _) = listener.accept().expect("accept");
            let mut request = [0u8; 1024];
            let n = socket.read(&mut request).expect("read the request");
            assert!(request[..n].starts_with(b"GET /healthz HTTP/1.1\r\n"));
            match reply {
                Some(text) => socket.write_all(text.as_bytes()).expect("answer"),
                // Hold the connection open past the probe's deadline.
                None => thread::sleep(Duration::from_secs(3)),
            }
        });
        addr
    }

    #[test]
    fn a_200_is_healthy() {
        let addr = serve_once(Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"));
        probe(addr, Duration::from_secs(2)).expect("healthy");
    }

    #[test]
    fn another_status_is_unhealthy_and_named() {
        let addr = serve_once(Some("HTTP/1.1 503 Service Unavailable\r\n\r\n"));
        let err = probe(addr, Duration::from_secs(2)).expect_err("unhealthy");
        assert!(err.to_string().contains("HTTP/1.1 503"), "{err}");
    }

    #[test]
    fn garbage_is_unhealthy() {
        let addr = serve_once(Some("SSH-2.0-OpenSSH\r\n"));
        assert!(matches!(
            probe(addr, Duration::from_secs(2)),
            Err(ProbeError::Status { .. })
        ));
    }

    #[test]
    fn a_silent_server_times_out_within_the_deadline() {
        let addr = serve_once(None);
        let started = Instant::now();
        let err = probe(addr, Duration::from_secs(1)).expect_err("no answer");
        assert!(matches!(err, ProbeError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_millis(2500));
    }

    #[test]
    fn a_closed_port_is_unhealthy() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        assert!(matches!(
            probe(addr, Duration::from_secs(2)),
            Err(ProbeError::Io { .. })
        ));
    }
}
