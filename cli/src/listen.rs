//! The HTTP server of `vergence serve`: hyper's HTTP/1 connections with a
//! header-read timeout, an idle timeout and a cap on connections, so that
//! idle or slow clients can neither hold the API nor take the descriptors
//! the engine's jobs need (axum's own `serve` has none of the three).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{Result, bail};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

/// Most connections served at once when `--max-connections` is not given,
/// however many descriptors there are.
const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Most connections `--max-connections` may ask for.
const MAX_ASKED: usize = 1 << 20;

/// Descriptors always left to everything but the API (the state file, the
/// engine's jobs, notifications) when `--max-connections` is given.
const MIN_RESERVE: u64 = 16;

/// How long the accept loop pauses after an error other than a refused
/// connection (out of descriptors): retrying at once would spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(200);

/// How a served connection is bounded.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A request's headers must have arrived within this long of the
    /// server starting to wait for them.
    pub header_read_timeout: Duration,
    /// A connection on which nothing is read or written for this long,
    /// while none of its requests is being answered, is closed.
    pub idle_timeout: Duration,
    /// Most connections open at once; further ones wait in the listen
    /// queue until one closes.
    pub max_connections: usize,
}

/// The descriptors this process may still open: its soft limit
/// (`ulimit -n`) less those open now. `None` where that cannot be read.
fn free_descriptors() -> Option<(u64, u64)> {
    use nix::sys::resource::{Resource, getrlimit};
    let (soft, _hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let open = ["/proc/self/fd", "/dev/fd"]
        .iter()
        .find_map(|dir| std::fs::read_dir(dir).ok())?
        .count() as u64;
    Some((soft, open))
}

/// The connection cap: the one asked for, if the descriptor limit leaves
/// room for it and for the jobs; otherwise half of the free descriptors
/// (the other half stays for the engine's jobs and the state), at most
/// [`DEFAULT_MAX_CONNECTIONS`].
pub fn max_connections(asked: Option<usize>) -> Result<usize> {
    let free = free_descriptors();
    match (asked, free) {
        (Some(asked), _) if !(1..=MAX_ASKED).contains(&asked) => {
            bail!("--max-connections {asked} is not from 1 to {MAX_ASKED}")
        }
        (Some(asked), Some((limit, open))) => {
            let room = limit.saturating_sub(open).saturating_sub(MIN_RESERVE);
            if asked as u64 > room {
                bail!(
                    "--max-connections {asked} leaves no descriptors for jobs: this process may open {limit} (ulimit -n) and has {open} open, so at most {room} connections fit beside a reserve of {MIN_RESERVE}; give a lower number or raise the limit"
                );
            }
            Ok(asked)
        }
        (Some(asked), None) => Ok(asked),
        (None, Some((limit, open))) => {
            let half = limit.saturating_sub(open) / 2;
            Ok(usize::try_from(half)
                .unwrap_or(usize::MAX)
                .clamp(1, DEFAULT_MAX_CONNECTIONS))
        }
        (None, None) => Ok(DEFAULT_MAX_CONNECTIONS / 4),
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets the
/// open connections finish their requests and close.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (closing, closed) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A slot first: at the cap, connections wait in the kernel's listen
        // queue (no descriptor of ours) until one of ours closes.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot,
            () = &mut shutdown => break,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                if !refused_by_peer(&e) {
                    // Out of descriptors (EMFILE): the connection stays
                    // queued; pausing lets jobs and closing connections
                    // give some back.
                    tracing::warn!(error = %e, "cannot accept a connection; trying again shortly");
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                }
                continue;
            }
        };
        let app = app.clone();
        let mut closed = closed.clone();
        tokio::spawn(async move {
            let answering = Arc::new(AtomicUsize::new(0));
            let io = TokioIo::new(Watched::new(stream, limits.idle_timeout, answering.clone()));
            let service = hyper::service::service_fn(move |request| {
                let app = app.clone();
                let answering = Answering::start(&answering);
                async move {
                    let response = app.oneshot(request).await;
                    drop(answering);
                    response
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            let connection = builder.serve_connection(io, service);
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = async { let _ = closed.wait_for(|closed| *closed).await; } => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection closed");
            }
            drop(slot);
        });
    }
    // Idle connections close at once; the others after their request.
    closing.send_replace(true);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _all = slots.acquire_many(all).await;
}

/// Errors of one connection that the peer caused: nothing to wait out.
fn refused_by_peer(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Counts a request being answered for as long as it lives.
struct Answering(Arc<AtomicUsize>);

impl Answering {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(count))
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection that fails with `TimedOut` once nothing was read or
/// written on it for the idle timeout while none of its requests is being
/// answered (an agent's poll waits up to 20 s without a byte).
struct Watched<S> {
    inner: S,
    idle_timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    answering: Arc<AtomicUsize>,
}

impl<S> Watched<S> {
    fn new(inner: S, idle_timeout: Duration, answering: Arc<AtomicUsize>) -> Self {
        Self {
            inner,
            idle_timeout,
            deadline: Box::pin(tokio::time::sleep(idle_timeout)),
            answering,
        }
    }

    fn moved(&mut self) {
        let next = Instant::now() + self.idle_timeout;
        self.deadline.as_mut().reset(next);
    }

    /// Called when the socket has nothing for us: an error once idle too
    /// long, otherwise pending, woken at the deadline.
    fn waiting<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if self.answering.load(Ordering::SeqCst) > 0 {
            // The clock starts when the answer is written.
            self.moved();
            return Poll::Pending;
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection was idle past --idle-timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Pending => self.waiting(cx),
            ready => {
                self.moved();
                ready
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.waiting(cx),
            ready => {
                self.moved();
                ready
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.waiting(cx),
            ready => ready,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.waiting(cx),
            ready => {
                self.moved();
                ready
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
