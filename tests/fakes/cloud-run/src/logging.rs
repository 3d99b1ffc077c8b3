//! The piece of Cloud Logging a runner needs: tasks' stdout and stderr as
//! log entries, the way Cloud Run writes them, and `POST /v2/entries:list`
//! to read them back (resource names, filter, order, pages) once they have
//! been received: with a configured log delay, a line is listable only that
//! long after it was written, as ingestion lags on the platform.

use std::cmp::Ordering;
use std::time::Duration;

use jiff::SignedDuration;

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::executor::LogLabels;
use crate::filter::Filter;
use crate::wire;

/// The API's default and largest page sizes.
const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 1000;

/// Every entry written so far, in the order written.
#[derive(Debug, Default)]
pub(crate) struct LogStore {
    entries: Vec<Value>,
}

impl LogStore {
    /// Stores one line a task wrote to `stream` (`stdout` or `stderr`),
    /// received (listable) `delay` later.
    pub(crate) fn append_task_line(
        &mut self,
        labels: &LogLabels<'_>,
        stream: &str,
        line: &str,
        delay: Duration,
    ) {
        let written = jiff::Timestamp::now();
        let received = SignedDuration::try_from(delay)
            .ok()
            .and_then(|d| written.checked_add(d).ok())
            .unwrap_or(written);
        let entry = json!({
            "logName": format!("projects/{}/logs/run.googleapis.com%2F{stream}", labels.project),
            "resource": {
                "type": "cloud_run_job",
                "labels": {
                    "job_name": labels.job,
                    "location": labels.location,
                    "project_id": labels.project,
                },
            },
            "labels": {
                "run.googleapis.com/execution_name": labels.execution,
                "run.googleapis.com/task_index": labels.task_index.to_string(),
                "run.googleapis.com/task_attempt": labels.task_attempt.to_string(),
            },
            "textPayload": line,
            "timestamp": written.to_string(),
            "receiveTimestamp": received.to_string(),
            "insertId": format!("{:08x}{}", self.entries.len(), wire::random_suffix(8)),
        });
        self.entries.push(entry);
    }

    /// All entries, oldest first.
    pub(crate) fn all(&self) -> &[Value] {
        &self.entries
    }

    /// `POST /v2/entries:list`.
    pub(crate) fn list(&self, request: &Value) -> ApiResult {
        let projects = projects_of(request)?;
        let filter = Filter::parse(wire::str_field(request, "filter"))?;
        let newest_first = order(wire::str_field(request, "orderBy"))?;
        let page_size = match request["pageSize"].as_u64().unwrap_or(0) {
            0 => DEFAULT_PAGE_SIZE,
            n => usize::try_from(n)
                .unwrap_or(MAX_PAGE_SIZE)
                .min(MAX_PAGE_SIZE),
        };
        let offset = match wire::str_field(request, "pageToken") {
            "" => 0,
            token => token
                .parse::<usize>()
                .map_err(|_| ApiError::invalid(format!("Invalid page token '{token}'.")))?,
        };
        let mut matching: Vec<(usize, &Value)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                received(e) && projects.iter().any(|p| in_project(e, p)) && filter.matches(e)
            })
            .collect();
        // By timestamp; entries written in the same instant keep their order.
        matching.sort_by(|(a_seq, a), (b_seq, b)| by_time(a, b).then(a_seq.cmp(b_seq)));
        if newest_first {
            matching.reverse();
        }
        let page: Vec<Value> = matching
            .iter()
            .skip(offset)
            .take(page_size)
            .map(|(_, e)| (*e).clone())
            .collect();
        let mut response = json!({"entries": page});
        if offset + page_size < matching.len() {
            response["nextPageToken"] = Value::from((offset + page_size).to_string());
        }
        Ok(response)
    }
}

/// The projects `resourceNames` names; only `projects/{p}` is supported.
fn projects_of(request: &Value) -> Result<Vec<String>, ApiError> {
    let names = request["resourceNames"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if names.is_empty() {
        return Err(ApiError::invalid(
            "resourceNames: at least one resource name is required.",
        ));
    }
    names
        .iter()
        .map(|name| match name.as_str().and_then(|n| n.strip_prefix("projects/")) {
            Some(project) if !project.is_empty() && !project.contains('/') => {
                Ok(project.to_owned())
            }
            _ => Err(ApiError::invalid(format!(
                "resourceNames: '{name}' is not supported; the fake knows 'projects/{{project}}' only."
            ))),
        })
        .collect()
}

/// Whether Cloud Logging has received the entry yet.
fn received(entry: &Value) -> bool {
    wire::str_field(entry, "receiveTimestamp")
        .parse::<jiff::Timestamp>()
        .is_ok_and(|at| at <= jiff::Timestamp::now())
}

fn in_project(entry: &Value, project: &str) -> bool {
    wire::str_field(entry, "logName").starts_with(&format!("projects/{project}/logs/"))
}

/// Whether `orderBy` asks for newest first.
fn order(order_by: &str) -> Result<bool, ApiError> {
    match order_by.split_whitespace().collect::<Vec<_>>().as_slice() {
        [] | ["timestamp"] | ["timestamp", "asc"] => Ok(false),
        ["timestamp", "desc"] => Ok(true),
        _ => Err(ApiError::invalid(format!(
            "orderBy: '{order_by}' is not supported; use 'timestamp asc' or 'timestamp desc'."
        ))),
    }
}

fn by_time(a: &Value, b: &Value) -> Ordering {
    let time = |e: &Value| {
        wire::str_field(e, "timestamp")
            .parse::<jiff::Timestamp>()
            .ok()
    };
    time(a).cmp(&time(b))
}
