//! Container output as a kubelet keeps it: lines tagged with their stream
//! and the time they were written, in write order, so the log endpoint can
//! interleave stdout and stderr, tail, timestamp and follow, and tests can
//! still read the two streams apart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use tokio::sync::watch;

/// Which output stream a line was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One line of output (the last may lack its newline).
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub stream: Stream,
    pub at: Timestamp,
    pub text: Vec<u8>,
}

#[derive(Debug, Default)]
struct LogState {
    lines: Vec<Line>,
    partial_stdout: Vec<u8>,
    partial_stderr: Vec<u8>,
    finished: bool,
}

/// The output of one container run.
#[derive(Debug)]
pub(crate) struct ContainerLog {
    state: Mutex<LogState>,
    /// Bumped on every new line and on finish, for `follow`.
    changed: watch::Sender<usize>,
}

impl ContainerLog {
    fn new() -> Self {
        Self {
            state: Mutex::new(LogState::default()),
            changed: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LogState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends output; complete lines become visible at once.
    pub(crate) fn write(&self, stream: Stream, bytes: &[u8]) {
        let mut state = self.lock();
        let at = Timestamp::now();
        let mut pending = match stream {
            Stream::Stdout => std::mem::take(&mut state.partial_stdout),
            Stream::Stderr => std::mem::take(&mut state.partial_stderr),
        };
        pending.extend_from_slice(bytes);
        let mut rest = pending.as_slice();
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            state.lines.push(Line {
                stream,
                at,
                text: rest[..=end].to_vec(),
            });
            rest = &rest[end + 1..];
        }
        let rest = rest.to_vec();
        match stream {
            Stream::Stdout => state.partial_stdout = rest,
            Stream::Stderr => state.partial_stderr = rest,
        }
        let count = state.lines.len();
        drop(state);
        self.changed.send_replace(count);
    }

    /// The container ended: unterminated last lines are flushed.
    pub(crate) fn finish(&self) {
        let mut state = self.lock();
        let at = Timestamp::now();
        for stream in [Stream::Stdout, Stream::Stderr] {
            let partial = match stream {
                Stream::Stdout => std::mem::take(&mut state.partial_stdout),
                Stream::Stderr => std::mem::take(&mut state.partial_stderr),
            };
            if !partial.is_empty() {
                state.lines.push(Line {
                    stream,
                    at,
                    text: partial,
                });
            }
        }
        state.finished = true;
        let count = state.lines.len();
        drop(state);
        self.changed.send_replace(count + 1);
    }

    /// Lines from index `from` on, and whether the container has ended.
    pub(crate) fn lines_from(&self, from: usize) -> (Vec<Line>, bool) {
        let state = self.lock();
        (
            state.lines.get(from..).unwrap_or_default().to_vec(),
            state.finished,
        )
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<usize> {
        self.changed.subscribe()
    }

    fn text(&self, stream: Option<Stream>) -> String {
        let (lines, _) = self.lines_from(0);
        let bytes: Vec<u8> = lines
            .into_iter()
            .filter(|l| stream.is_none_or(|s| s == l.stream))
            .flat_map(|l| l.text)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// What a container printed, for test assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLogs {
    /// Standard output only.
    pub stdout: String,
    /// Standard error only.
    pub stderr: String,
    /// Both, interleaved in the order written: what the log endpoint serves.
    pub combined: String,
}

type LogKey = (String, String, String);

/// The logs of every container run, by namespace, pod and container.
#[derive(Debug, Default)]
pub(crate) struct LogStore {
    logs: Mutex<HashMap<LogKey, Arc<ContainerLog>>>,
}

impl LogStore {
    fn lock(&self) -> MutexGuard<'_, HashMap<LogKey, Arc<ContainerLog>>> {
        self.logs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A fresh log for a container that is starting.
    pub(crate) fn start(&self, namespace: &str, pod: &str, container: &str) -> Arc<ContainerLog> {
        let log = Arc::new(ContainerLog::new());
        let key = (namespace.to_owned(), pod.to_owned(), container.to_owned());
        self.lock().insert(key, log.clone());
        log
    }

    pub(crate) fn get(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Option<Arc<ContainerLog>> {
        self.lock()
            .get(&(namespace.to_owned(), pod.to_owned(), container.to_owned()))
            .cloned()
    }

    pub(crate) fn pod_logs(&self, namespace: &str, pod: &str, container: &str) -> Option<PodLogs> {
        let log = self.get(namespace, pod, container)?;
        Some(PodLogs {
            stdout: log.text(Some(Stream::Stdout)),
            stderr: log.text(Some(Stream::Stderr)),
            combined: log.text(None),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_interleave_by_line_in_write_order() {
        let store = LogStore::default();
        let log = store.start("ns", "p", "c");
        log.write(Stream::Stdout, b"one\ntw");
        log.write(Stream::Stderr, b"oops\n");
        log.write(Stream::Stdout, b"o\n");
        log.write(Stream::Stdout, b"tail");
        log.finish();
        let logs = store.pod_logs("ns", "p", "c").unwrap();
        assert_eq!(logs.combined, "one\noops\ntwo\ntail");
        assert_eq!(logs.stdout, "one\ntwo\ntail");
        assert_eq!(logs.stderr, "oops\n");
        assert!(log.lines_from(0).1);
    }
}
