//! A job's stdout and stderr as Cloud Run wrote them to Cloud Logging: one
//! entry per line, in the `run.googleapis.com/stdout` and `…/stderr` logs,
//! labelled with the execution. Stdout is read oldest first up to
//! [`JobResult::MAX_STDOUT`]; stderr newest first up to its tail
//! ([`JobResult::STDERR_TAIL`]), so neither reads more than it keeps.
//!
//! Cloud Run turns a line that is a JSON object into a structured entry;
//! such a line comes back as that JSON (same content, not necessarily the
//! same bytes). Images that run `vergence-wrapper` give exact streams and
//! are not read from here.

use google_cloud_logging_v2::model::LogEntry;
use vergence_container::PlatformLogs;
use vergence_model::JobResult;

use crate::CloudRunSettings;
use crate::clients::CloudRunClients;
use crate::error::CloudRunError;

/// Entries asked for per page: the API's largest page.
const PAGE_SIZE: i32 = 1000;

/// Where an execution's entries are.
#[derive(Debug)]
pub(crate) struct ExecutionLogs<'a> {
    pub(crate) project: &'a str,
    pub(crate) region: &'a str,
    /// The Cloud Run job's id.
    pub(crate) job: &'a str,
    /// The execution's id.
    pub(crate) execution: &'a str,
    /// No entry is older than this (the execution's creation, RFC 3339):
    /// it keeps the search to the execution's own time.
    pub(crate) since: String,
}

impl ExecutionLogs<'_> {
    /// Both streams, bounded.
    pub(crate) async fn read(
        &self,
        clients: &CloudRunClients,
        settings: &CloudRunSettings,
    ) -> Result<PlatformLogs, CloudRunError> {
        let stdout = self
            .stream(clients, settings, "stdout", JobResult::MAX_STDOUT, false)
            .await?;
        let stderr = self
            .stream(clients, settings, "stderr", JobResult::STDERR_TAIL, true)
            .await?;
        Ok(PlatformLogs { stdout, stderr })
    }

    /// The filter for one stream of the execution.
    pub(crate) fn filter(&self, stream: &str) -> String {
        format!(
            r#"resource.type="cloud_run_job" AND resource.labels.location="{region}" AND resource.labels.job_name="{job}" AND labels."run.googleapis.com/execution_name"="{execution}" AND logName="projects/{project}/logs/run.googleapis.com%2F{stream}" AND timestamp>="{since}""#,
            region = self.region,
            job = self.job,
            execution = self.execution,
            project = self.project,
            since = self.since,
        )
    }

    /// At least `max` bytes of one stream (when it has that many), from its
    /// start, or from its end when `tail`; each line ends with a newline.
    async fn stream(
        &self,
        clients: &CloudRunClients,
        settings: &CloudRunSettings,
        stream: &str,
        max: usize,
        tail: bool,
    ) -> Result<String, CloudRunError> {
        let order = if tail {
            "timestamp desc"
        } else {
            "timestamp asc"
        };
        let mut lines: Vec<String> = Vec::new();
        let mut size = 0;
        let mut token = String::new();
        for _ in 0..settings.max_log_pages {
            let page = clients
                .logging
                .list_log_entries()
                .set_resource_names([format!("projects/{}", self.project)])
                .set_filter(self.filter(stream))
                .set_order_by(order)
                .set_page_size(PAGE_SIZE)
                .set_page_token(&token)
                .send()
                .await
                .map_err(CloudRunError::api(
                    "listing log entries of execution",
                    self.execution,
                ))?;
            for entry in &page.entries {
                let line = line_of(entry);
                size += line.len() + 1;
                lines.push(line);
                if size > max {
                    return Ok(joined(lines, tail));
                }
            }
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        Ok(joined(lines, tail))
    }
}

/// Lines read newest first (`tail`) are put back in order.
fn joined(mut lines: Vec<String>, tail: bool) -> String {
    if tail {
        lines.reverse();
    }
    lines.into_iter().map(|line| line + "\n").collect()
}

/// The line an entry holds: its text, or its JSON when Cloud Run parsed
/// the line as a structured entry.
pub(crate) fn line_of(entry: &LogEntry) -> String {
    if let Some(text) = entry.text_payload() {
        return text.clone();
    }
    entry
        .json_payload()
        .and_then(|json| serde_json::to_string(json.as_ref()).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn a_structured_entry_comes_back_as_its_json_line() {
        let entry: LogEntry = serde_json::from_value(json!({
            "jsonPayload": {"objects": [{"name": "web", "status": "SUCCEEDED"}]},
        }))
        .unwrap();
        let line: serde_json::Value = serde_json::from_str(&line_of(&entry)).unwrap();
        assert_eq!(line["objects"][0]["status"], "SUCCEEDED");
        let text: LogEntry = serde_json::from_value(json!({"textPayload": "plain"})).unwrap();
        assert_eq!(line_of(&text), "plain");
    }

    #[test]
    fn the_filter_names_the_execution_its_stream_and_its_time() {
        let logs = ExecutionLogs {
            project: "p",
            region: "europe-west1",
            job: "vg-0123456789ab",
            execution: "vg-0123456789ab-x7k2p",
            since: "2026-01-02T03:04:05Z".into(),
        };
        let filter = logs.filter("stderr");
        assert!(
            filter
                .contains(r#"labels."run.googleapis.com/execution_name"="vg-0123456789ab-x7k2p""#)
        );
        assert!(filter.contains(r#"logName="projects/p/logs/run.googleapis.com%2Fstderr""#));
        assert!(filter.contains(r#"timestamp>="2026-01-02T03:04:05Z""#));
        assert_eq!(joined(vec!["b".into(), "a".into()], true), "a\nb\n");
    }
}
