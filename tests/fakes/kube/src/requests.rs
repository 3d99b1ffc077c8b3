//! A record of every request the fake served, so tests can assert what a
//! client costs (for example: a steady state costs watches, not lists).

use std::sync::{Mutex, MutexGuard};

/// One request as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// HTTP method (`GET`, `PATCH`, ...).
    pub method: String,
    /// URL path.
    pub path: String,
    /// Raw query string ("" when none).
    pub query: String,
    /// Whether it was a watch (`watch=true` or `watch=1`).
    pub watch: bool,
    /// `Content-Type`, if sent.
    pub content_type: Option<String>,
}

impl RecordedRequest {
    /// Whether the query has `name=value` (values compared decoded).
    pub fn has_param(&self, name: &str, value: &str) -> bool {
        self.param(name).as_deref() == Some(value)
    }

    /// The decoded value of a query parameter.
    pub fn param(&self, name: &str) -> Option<String> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find_map(|(k, v)| (k == name).then(|| percent_decode(v)))
    }

    /// A list call: GET of a collection without `watch`.
    pub fn is_list(&self) -> bool {
        self.method == "GET" && !self.watch && self.path_is_collection()
    }

    fn path_is_collection(&self) -> bool {
        let segments: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        // /api/v1/R, /api/v1/namespaces/N/R, /apis/G/V/R, /apis/G/V/namespaces/N/R
        let rest = match segments.as_slice() {
            ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
            _ => return false,
        };
        match rest {
            [_] => true,
            ["namespaces", _, resource] => *resource != "status" && *resource != "finalize",
            _ => false,
        }
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.replace('+', " ").into_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every request since the start or the last reset.
#[derive(Debug, Default)]
pub(crate) struct RequestLog(Mutex<Vec<RecordedRequest>>);

impl RequestLog {
    fn lock(&self) -> MutexGuard<'_, Vec<RecordedRequest>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn record(&self, request: RecordedRequest) {
        self.lock().push(request);
    }

    pub(crate) fn all(&self) -> Vec<RecordedRequest> {
        self.lock().clone()
    }

    pub(crate) fn reset(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str, query: &str) -> RecordedRequest {
        RecordedRequest {
            method: "GET".into(),
            path: path.into(),
            query: query.into(),
            watch: query.contains("watch=true"),
            content_type: None,
        }
    }

    #[test]
    fn lists_are_told_apart_from_gets_and_watches() {
        assert!(get("/apis/batch/v1/namespaces/ns/jobs", "limit=500").is_list());
        assert!(get("/api/v1/pods", "").is_list());
        assert!(!get("/apis/batch/v1/namespaces/ns/jobs/x", "").is_list());
        assert!(!get("/api/v1/namespaces/ns/pods", "&watch=true").is_list());
        assert!(!get("/api/v1/namespaces/ns/status", "").is_list());
    }

    #[test]
    fn params_are_decoded() {
        let r = get("/api/v1/pods", "&labelSelector=app%3Dweb&limit=5");
        assert_eq!(r.param("labelSelector").as_deref(), Some("app=web"));
        assert!(r.has_param("limit", "5"));
    }
}
