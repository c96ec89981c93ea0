//! The accept loop (docs/configuration.md, "Perimeter"): what idle, silent or
//! half-sent connections may hold, and for how long.
//!
//! `axum::serve` gives hyper no timer and keeps every connection it accepts, so
//! 600 silent sockets against a 512 file limit left `/healthz` unanswered
//! ("accept error: Too many open files", then a one-second sleep per retry), and a
//! half-sent request head held its socket forever. Here every connection is
//! tracked with what it is doing:
//! - **owing a request head** (just accepted, or bytes of a head arrived): closed
//!   when the head is not complete within `header_read_timeout`;
//! - **idle** (keep-alive, its last response sent): closed after `idle_timeout`;
//! - **serving** (a request in flight, until its response body is sent): never
//!   closed here (`request_timeout` bounds the handler).
//!
//! At `max_connections` (default: the file-descriptor limit minus what the
//! database pool, the L0 processes and the rest of the process need) a new
//! connection evicts the oldest one that is not serving, so the newest client is
//! served and a crowd of idle sockets cannot lock everyone out; when all are
//! serving the newcomer is closed. An accept error such as EMFILE evicts one too
//! and retries after 10 ms, not a second.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::config::Settings;

/// File descriptors the process needs besides connections, database pool and L0s:
/// stdio, the listener, epoll and event fds, the LISTEN connection, the
/// prompt-template and output files, HTTP executors' sockets' slack.
const RESERVED_FDS: u64 = 64;
/// The database pool at its largest: 16 Postgres connections, or 8 SQLite ones of
/// three files each (database, WAL, shared memory).
const DATABASE_FDS: u64 = 24;
/// One L0 child process: its stdin, stdout and stderr pipes and a spare.
const FDS_PER_L0: u64 = 4;
/// The cap never goes below this, however low the file limit.
const MIN_CONNECTIONS: usize = 16;
/// After an accept error (EMFILE …): long enough not to spin, short enough that a
/// freed descriptor is used at once.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// The limits one server applies, fixed at start.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl ConnectionLimits {
    pub fn from_settings(settings: &Settings) -> Self {
        ConnectionLimits {
            header_read_timeout: settings.perimeter.header_read_timeout,
            idle_timeout: settings.perimeter.idle_timeout,
            max_connections: settings
                .perimeter
                .max_connections
                .unwrap_or_else(|| default_max_connections(open_file_limit(), settings)),
        }
    }
}

/// The soft `RLIMIT_NOFILE`, or 1024 where it cannot be read.
fn open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    if read { limit.rlim_cur } else { 1024 }
}

/// What is left of `file_limit` for connections once the rest of the process
/// has its share (see the constants above).
pub fn default_max_connections(file_limit: u64, settings: &Settings) -> usize {
    let l0s = u64::from(settings.workers).saturating_mul(settings.l0_concurrency as u64);
    let headroom = RESERVED_FDS + DATABASE_FDS + l0s.saturating_mul(FDS_PER_L0);
    usize::try_from(file_limit.saturating_sub(headroom))
        .unwrap_or(usize::MAX)
        .max(MIN_CONNECTIONS)
}

/// What one connection is doing, shared by its task, its I/O and its requests.
struct Connection {
    /// Requests whose response body is not yet sent.
    serving: AtomicUsize,
    /// Milliseconds since [`Table::epoch`] when the connection started owing a
    /// request head; `u64::MAX` when it owes none (idle or serving).
    head_since: AtomicU64,
    /// Milliseconds since [`Table::epoch`] when its last response was sent.
    idle_since: AtomicU64,
    changed: tokio::sync::Notify,
    evicted: CancellationToken,
    epoch: Instant,
}

const NO_HEAD: u64 = u64::MAX;

impl Connection {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(NO_HEAD - 1)
    }

    /// When the connection must be closed, unless something happens first;
    /// `None` while it serves.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        if self.serving.load(Ordering::Acquire) > 0 {
            return None;
        }
        let at = |ms: u64, after: Duration| self.epoch + Duration::from_millis(ms) + after;
        match self.head_since.load(Ordering::Acquire) {
            NO_HEAD => Some(at(
                self.idle_since.load(Ordering::Acquire),
                limits.idle_timeout,
            )),
            since => Some(at(since, limits.header_read_timeout)),
        }
    }

    /// Bytes arrived: while idle, they begin a request head.
    fn on_bytes(&self) {
        if self.serving.load(Ordering::Acquire) == 0
            && self.head_since.load(Ordering::Acquire) == NO_HEAD
        {
            self.head_since.store(self.now_ms(), Ordering::Release);
            self.changed.notify_waiters();
        }
    }

    /// Closes the connection when its deadline passes; never returns otherwise.
    async fn watch(&self, limits: ConnectionLimits) {
        loop {
            let changed = self.changed.notified();
            match self.deadline(&limits) {
                None => changed.await,
                Some(deadline) => {
                    tokio::select! {
                        _ = changed => {}
                        _ = tokio::time::sleep_until(deadline.into()) => {
                            if self.deadline(&limits).is_some_and(|d| d <= Instant::now()) {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Marks a request in flight until its response body is sent or dropped.
struct Serving(Arc<Connection>);

impl Serving {
    fn begin(connection: &Arc<Connection>) -> Self {
        connection.serving.fetch_add(1, Ordering::AcqRel);
        connection.head_since.store(NO_HEAD, Ordering::Release);
        connection.changed.notify_waiters();
        Serving(connection.clone())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let connection = &self.0;
        connection
            .idle_since
            .store(connection.now_ms(), Ordering::Release);
        connection.serving.fetch_sub(1, Ordering::AcqRel);
        connection.changed.notify_waiters();
    }
}

/// A response body that keeps its request counted as in flight until it is done.
struct CountedBody {
    inner: Body,
    _serving: Serving,
}

impl HttpBody for CountedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The socket, telling its connection when bytes arrive.
struct WatchedIo {
    stream: TcpStream,
    connection: Arc<Connection>,
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.connection.on_bytes();
        }
        polled
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The live connections, oldest first.
struct Table {
    epoch: Instant,
    next_id: AtomicU64,
    live: Mutex<BTreeMap<u64, Arc<Connection>>>,
}

impl Table {
    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Connection>>> {
        // A panic while holding the lock leaves the map itself intact.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn register(&self) -> (u64, Arc<Connection>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(Connection {
            serving: AtomicUsize::new(0),
            head_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            changed: tokio::sync::Notify::new(),
            evicted: CancellationToken::new(),
            epoch: self.epoch,
        });
        // It owes its first request head from now.
        connection
            .head_since
            .store(connection.now_ms(), Ordering::Release);
        let mut live = self.live();
        live.insert(id, connection.clone());
        metrics::gauge!("http_open_connections").set(live.len() as f64);
        (id, connection)
    }

    fn remove(&self, id: u64) {
        let mut live = self.live();
        live.remove(&id);
        metrics::gauge!("http_open_connections").set(live.len() as f64);
    }

    fn len(&self) -> usize {
        self.live().len()
    }

    /// Close the oldest connection that serves no request; `false` if all serve.
    fn evict_oldest_idle(&self) -> bool {
        let mut live = self.live();
        let oldest = live
            .iter()
            .find(|(_, c)| c.serving.load(Ordering::Acquire) == 0)
            .map(|(id, _)| *id);
        let Some(id) = oldest else {
            return false;
        };
        if let Some(connection) = live.remove(&id) {
            connection.evicted.cancel();
        }
        metrics::counter!("http_connections_evicted_total").increment(1);
        true
    }
}

/// Serve `app` on `listener` until `shutdown` resolves, then stop accepting, let
/// in-flight requests finish, close idle connections, and return when all are
/// closed (the caller bounds that wait with the shutdown grace).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(
        max_connections = limits.max_connections,
        header_read_timeout_secs = limits.header_read_timeout.as_secs(),
        idle_timeout_secs = limits.idle_timeout.as_secs(),
        "connection limits"
    );
    let table = Arc::new(Table {
        epoch: Instant::now(),
        next_id: AtomicU64::new(0),
        live: Mutex::new(BTreeMap::new()),
    });
    let tasks = TaskTracker::new();
    let draining = CancellationToken::new();
    let mut last_accept_warning: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            // The peer gave up before we took it: nothing to do.
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of descriptors (or memory): free one if we can and retry soon.
                if last_accept_warning.is_none_or(|at| at.elapsed() > Duration::from_secs(1)) {
                    tracing::warn!(error = %e, open = table.len(), "accept failed; evicting an idle connection");
                    last_accept_warning = Some(Instant::now());
                }
                table.evict_oldest_idle();
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        if table.len() >= limits.max_connections && !table.evict_oldest_idle() {
            // Every connection is serving a request: this one waits for none.
            metrics::counter!("http_connections_refused_total").increment(1);
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let (id, connection) = table.register();
        let table = table.clone();
        let app = app.clone();
        let draining = draining.clone();
        tasks.spawn(async move {
            serve_connection(stream, app, connection, limits, draining).await;
            table.remove(id);
        });
    }
    // Stop accepting now: new clients get "connection refused", not a wait.
    drop(listener);
    draining.cancel();
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// Errors of one connection that leave the listener fine.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted | WouldBlock
    )
}

async fn serve_connection(
    stream: TcpStream,
    app: Router,
    connection: Arc<Connection>,
    limits: ConnectionLimits,
    draining: CancellationToken,
) {
    let io = TokioIo::new(WatchedIo {
        stream,
        connection: connection.clone(),
    });
    let service = hyper::service::service_fn({
        let connection = connection.clone();
        move |request: hyper::Request<Incoming>| {
            let serving = Serving::begin(&connection);
            let app = app.clone();
            async move {
                let response = match app.oneshot(request.map(Body::new)).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(response.map(|inner| CountedBody {
                    inner,
                    _serving: serving,
                }))
            }
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The deadlines are `Connection::watch`'s; hyper's own header timer would
    // also run while a keep-alive connection is idle.
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    let served = builder.serve_connection(io, service);
    tokio::pin!(served);
    let watch = connection.watch(limits);
    tokio::pin!(watch);
    let mut shutting_down = false;
    loop {
        tokio::select! {
            result = served.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut watch => {
                metrics::counter!("http_connections_timed_out_total").increment(1);
                return;
            }
            () = connection.evicted.cancelled() => return,
            () = draining.cancelled(), if !shutting_down => {
                // Finish the request in flight, if any, then close.
                shutting_down = true;
                served.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FileConfig, ServeArgs};

    #[test]
    fn the_default_cap_leaves_room_for_the_rest_of_the_process() {
        let settings = Settings::merge(&ServeArgs::default(), FileConfig::default()).unwrap();
        // 4 workers × 6 L0s × 4 descriptors + the database pool + the reserve.
        assert_eq!(default_max_connections(512, &settings), 512 - 96 - 24 - 64);
        assert_eq!(default_max_connections(100, &settings), MIN_CONNECTIONS);
        assert!(default_max_connections(1 << 20, &settings) > 1_000_000);
    }
}
