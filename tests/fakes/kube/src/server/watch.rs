//! Watch calls: a chunked stream of newline-delimited JSON events that
//! starts after the requested resourceVersion (or with the current state as
//! synthetic ADDED events), interleaves BOOKMARKs carrying the latest
//! resourceVersion, ends at `timeoutSeconds`, and answers a too-old
//! resourceVersion with one ERROR event holding a 410 Expired Status.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::{Instant, Interval, interval_at};

use super::list::Filter;
use super::params::Params;
use super::path::ResourcePath;
use crate::resources::ResourceType;
use crate::shared::Shared;
use crate::status::ApiError;
use crate::store::{EventType, Receiver, StoreEvent};

/// Without `timeoutSeconds` the real server picks 30–60 minutes.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Starts a watch; errors before the stream starts are plain responses.
pub(crate) fn watch(
    shared: &Arc<Shared>,
    rp: &ResourcePath,
    params: &Params,
) -> Result<Response, ApiError> {
    let filter = Filter::from_params(rp, params)?;
    let bookmarks = params.flag("allowWatchBookmarks");
    let send_initial = params.flag("sendInitialEvents");
    if send_initial && params.get("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::bad_request(
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    let timeout = params
        .u64("timeoutSeconds")?
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    let rt = rp.rt;
    let mut stream = WatchStream {
        rt,
        filter,
        backlog: VecDeque::new(),
        receiver: None,
        seen_rv: 0,
        bookmarks: bookmarks.then(|| {
            let period = shared.settings.bookmark_interval;
            interval_at(Instant::now() + period, period)
        }),
        deadline: Instant::now() + timeout,
        shutdown: shared.shutdown.subscribe(),
    };
    match params
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
    {
        Some(text) => {
            let rv: u64 = text
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {text:?}")))?;
            stream.start_after(shared, rv);
        }
        None => stream.start_with_current_state(shared, rp, send_initial && bookmarks),
    }
    let body = Body::from_stream(futures::stream::unfold(stream, WatchStream::next));
    Ok(([(CONTENT_TYPE, "application/json")], body).into_response())
}

/// What woke a waiting watch.
enum Wake {
    End,
    Event(Arc<StoreEvent>),
    Bookmark,
}

struct WatchStream {
    rt: &'static ResourceType,
    filter: Filter,
    backlog: VecDeque<Bytes>,
    /// `None` after an ERROR: the stream ends once the backlog is sent.
    receiver: Option<Receiver>,
    /// Every change up to this version has been considered for this watch.
    seen_rv: u64,
    bookmarks: Option<Interval>,
    deadline: Instant,
    shutdown: watch::Receiver<bool>,
}

impl WatchStream {
    /// Replays the kept events after `rv`, then follows live changes.
    fn start_after(&mut self, shared: &Shared, rv: u64) {
        match shared.store.watch_from(rv) {
            Ok((backlog, receiver)) => {
                self.seen_rv = rv.max(backlog.last().map_or(0, |e| e.rv));
                for event in backlog {
                    self.push_event(&event);
                }
                self.receiver = Some(receiver);
            }
            // The real server answers 200 and one ERROR event, so the
            // client learns it must re-list.
            Err(expired) => self.backlog.push_back(line("ERROR", &expired.to_status())),
        }
    }

    /// Sends the current objects as ADDED (and, for a streaming list, the
    /// bookmark that ends them), then follows live changes.
    fn start_with_current_state(&mut self, shared: &Shared, rp: &ResourcePath, mark_end: bool) {
        let (objects, rv, receiver) = shared.store.watch_now(self.rt, rp.namespace.as_deref());
        for obj in objects.iter().filter(|o| self.filter.matches(o)) {
            self.backlog.push_back(line("ADDED", obj));
        }
        self.seen_rv = rv;
        if mark_end {
            self.backlog
                .push_back(line("BOOKMARK", &bookmark(self.rt, rv, true)));
        }
        self.receiver = Some(receiver);
    }

    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Self)> {
        if let Some(line) = self.backlog.pop_front() {
            return Some((Ok(line), self));
        }
        loop {
            let wake = {
                let receiver = self.receiver.as_mut()?;
                let bookmarks = self.bookmarks.as_mut();
                let tick = async {
                    match bookmarks {
                        Some(interval) => interval.tick().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep_until(self.deadline) => Wake::End,
                    _ = self.shutdown.wait_for(|stop| *stop) => Wake::End,
                    event = receiver.recv() => event.map_or(Wake::End, Wake::Event),
                    _ = tick => Wake::Bookmark,
                }
            };
            match wake {
                Wake::End => return None,
                Wake::Event(event) => {
                    self.seen_rv = event.rv;
                    self.push_event(&event);
                    if let Some(line) = self.backlog.pop_front() {
                        return Some((Ok(line), self));
                    }
                }
                Wake::Bookmark => {
                    let mark = bookmark(self.rt, self.seen_rv, false);
                    return Some((Ok(line("BOOKMARK", &mark)), self));
                }
            }
        }
    }

    /// Queues what this watch sees of one change. An update that moves an
    /// object into or out of the selection is an ADDED or DELETED, as the
    /// real watch cache reports it.
    fn push_event(&mut self, event: &StoreEvent) {
        if event.resource != self.rt {
            return;
        }
        let now = self.filter.matches(&event.object);
        let before = event
            .previous
            .as_deref()
            .is_some_and(|p| self.filter.matches(p));
        let kind = match event.kind {
            EventType::Added if now => "ADDED",
            EventType::Modified if now && before => "MODIFIED",
            EventType::Modified if now => "ADDED",
            EventType::Modified if before => "DELETED",
            EventType::Deleted if now => "DELETED",
            _ => return,
        };
        self.backlog.push_back(line(kind, &event.object));
    }
}

fn bookmark(rt: &ResourceType, rv: u64, initial_events_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": metadata})
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}
