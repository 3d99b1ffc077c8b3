//! `GET .../pods/{name}/log`: a container's stdout and stderr interleaved
//! in write order, as `text/plain`, with `container`, `tailLines`,
//! `limitBytes`, `timestamps`, `sinceSeconds`/`sinceTime` and `follow`
//! (which streams until the container ends).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::params::Params;
use super::path::ResourcePath;
use crate::logs::{ContainerLog, Line};
use crate::meta;
use crate::shared::Shared;
use crate::status::ApiError;

struct LogQuery {
    tail_lines: Option<usize>,
    limit_bytes: Option<usize>,
    timestamps: bool,
    since: Option<Timestamp>,
}

impl LogQuery {
    fn from_params(params: &Params) -> Result<Self, ApiError> {
        let since =
            match (params.u64("sinceSeconds")?, params.get("sinceTime")) {
                (Some(seconds), _) => {
                    let seconds = i64::try_from(seconds).unwrap_or(i64::MAX);
                    Timestamp::now()
                        .checked_sub(SignedDuration::from_secs(seconds))
                        .ok()
                }
                (None, Some(time)) => Some(time.parse::<Timestamp>().map_err(|e| {
                    ApiError::bad_request(format!("invalid sinceTime {time:?}: {e}"))
                })?),
                (None, None) => None,
            };
        Ok(Self {
            tail_lines: params.u64("tailLines")?.map(|n| n as usize),
            limit_bytes: params.u64("limitBytes")?.map(|n| n as usize),
            timestamps: params.flag("timestamps"),
            since,
        })
    }

    fn render(&self, lines: &[Line]) -> Vec<u8> {
        let mut out = Vec::new();
        for line in lines {
            if self.timestamps {
                out.extend_from_slice(format!("{} ", line.at).as_bytes());
            }
            out.extend_from_slice(&line.text);
        }
        out
    }

    fn selected<'a>(&self, lines: &'a [Line]) -> &'a [Line] {
        let first = self.since.map_or(0, |since| {
            lines
                .iter()
                .position(|l| l.at >= since)
                .unwrap_or(lines.len())
        });
        let lines = &lines[first..];
        match self.tail_lines {
            Some(n) => &lines[lines.len().saturating_sub(n)..],
            None => lines,
        }
    }
}

pub(crate) fn logs(
    shared: &Arc<Shared>,
    rp: &ResourcePath,
    params: &Params,
) -> Result<Response, ApiError> {
    let namespace = rp.namespace.as_deref().unwrap_or_default();
    let name = rp.name.as_deref().unwrap_or_default();
    let pod = shared
        .store
        .get(rp.rt, namespace, name)
        .ok_or_else(|| ApiError::not_found(rp.rt, name))?;
    let container = container_name(&pod, params.get("container"))?;
    let Some(log) = shared.logs.get(namespace, name, &container) else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {}",
            waiting_reason(&pod)
        )));
    };
    let query = LogQuery::from_params(params)?;
    let (lines, _) = log.lines_from(0);
    let mut first = query.render(query.selected(&lines));
    let budget = query
        .limit_bytes
        .map(|limit| limit.saturating_sub(first.len()));
    if let Some(limit) = query.limit_bytes {
        first.truncate(limit);
    }
    let headers = [(CONTENT_TYPE, "text/plain")];
    if !params.flag("follow") {
        return Ok((headers, first).into_response());
    }
    let follow = Follow {
        log,
        query,
        next_line: lines.len(),
        budget,
        first: Some(first),
    };
    Ok((
        headers,
        Body::from_stream(futures::stream::unfold(follow, Follow::next)),
    )
        .into_response())
}

/// A followed log: what exists now, then each new line until the end.
struct Follow {
    log: Arc<ContainerLog>,
    query: LogQuery,
    next_line: usize,
    budget: Option<usize>,
    first: Option<Vec<u8>>,
}

impl Follow {
    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Self)> {
        if let Some(first) = self.first.take().filter(|f| !f.is_empty()) {
            return Some((Ok(Bytes::from(first)), self));
        }
        let mut changes = self.log.subscribe();
        loop {
            if self.budget == Some(0) {
                return None;
            }
            let (lines, finished) = self.log.lines_from(self.next_line);
            if !lines.is_empty() {
                self.next_line += lines.len();
                let mut chunk = self.query.render(&lines);
                if let Some(budget) = self.budget.as_mut() {
                    chunk.truncate(*budget);
                    *budget -= chunk.len();
                }
                return Some((Ok(Bytes::from(chunk)), self));
            }
            if finished {
                return None;
            }
            changes.changed().await.ok()?;
        }
    }
}

fn container_name(pod: &Value, wanted: Option<&str>) -> Result<String, ApiError> {
    let names: Vec<&str> = meta::at(pod, &["spec", "containers"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let pod_name = meta::name(pod);
    match (wanted.filter(|w| !w.is_empty()), names.as_slice()) {
        (Some(wanted), _) if names.contains(&wanted) => Ok(wanted.to_owned()),
        (Some(wanted), _) => Err(ApiError::bad_request(format!(
            "container {wanted} is not valid for pod {pod_name}"
        ))),
        (None, [only]) => Ok((*only).to_owned()),
        (None, _) => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {pod_name}, choose one of: [{}]",
            names.join(" ")
        ))),
    }
}

fn waiting_reason(pod: &Value) -> String {
    meta::at(pod, &["status", "containerStatuses"])
        .and_then(|s| s.get(0))
        .and_then(|s| meta::str_at(s, &["state", "waiting", "reason"]))
        .unwrap_or("ContainerCreating")
        .to_owned()
}
