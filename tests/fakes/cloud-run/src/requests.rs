//! Request accounting: every request the fake receives, as it arrived, so
//! tests can assert what a runner sent and how often (a poll loop that
//! polls too much shows up here).

use serde_json::Value;

/// One request as received.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    /// `GET`, `POST`, `PATCH`, `DELETE`.
    pub method: String,
    /// The path, percent-decoded, without the query: `/v2/projects/p/…`.
    pub path: String,
    /// The query parameters in order, decoded.
    pub query: Vec<(String, String)>,
    /// The JSON body, if there was one.
    pub body: Option<Value>,
}

impl RecordedRequest {
    /// The first value of a query parameter.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether this is a `method` request for `path` (exact, without query).
    pub fn is(&self, method: &str, path: &str) -> bool {
        self.method.eq_ignore_ascii_case(method) && self.path == path
    }
}
