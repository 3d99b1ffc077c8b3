//! The job's output as the awslogs driver kept it: one CloudWatch Logs
//! stream per task, `vergence/job/<task id>` in the runner's log group,
//! one event per line. awslogs does not keep stdout and stderr apart, so
//! everything is stdout, and the last lines stand in for stderr's tail
//! (what failure reasons quote). Images that run `vergence-wrapper` upload
//! the exact streams instead; those are read first (see `runner`).

use aws_sdk_cloudwatchlogs::Client;
use aws_sdk_cloudwatchlogs::types::OutputLogEvent;
use vergence_container::{PlatformLogs, tail};
use vergence_model::JobResult;

use crate::error::{EcsError, describe};
use crate::task_definition::{CONTAINER, STREAM_PREFIX};

/// Most pages of one stream read before giving up on reaching its end
/// (GetLogEvents may answer empty pages before the end).
const MAX_PAGES: usize = 1000;

/// Events read from the end of a stream too long to read whole.
const TAIL_EVENTS: i32 = 200;

/// The stream awslogs writes a task's container output to.
pub fn stream_name(task_id: &str) -> String {
    format!("{STREAM_PREFIX}/{CONTAINER}/{task_id}")
}

/// The task's output: at most `limit` bytes from the start as stdout, and
/// the end of the stream as stderr. A stream that does not exist (the task
/// never started) is empty output.
pub async fn read(
    client: &Client,
    group: &str,
    stream: &str,
    limit: usize,
) -> Result<PlatformLogs, EcsError> {
    let mut stdout = String::new();
    let mut token: Option<String> = None;
    let mut truncated = false;
    for _ in 0..MAX_PAGES {
        let Some(page) = page(client, group, stream, token.clone(), true, None).await? else {
            return Ok(PlatformLogs::default());
        };
        append(&mut stdout, page.events());
        if stdout.len() >= limit {
            truncated = true;
            break;
        }
        // At the end, GetLogEvents hands back the token it was given.
        let next = page.next_forward_token().map(str::to_owned);
        if next.is_none() || next == token {
            break;
        }
        token = next;
    }
    let stderr = if truncated {
        let mut end = String::new();
        if let Some(page) = page(client, group, stream, None, false, Some(TAIL_EVENTS)).await? {
            append(&mut end, page.events());
        }
        end
    } else {
        tail(&stdout, JobResult::STDERR_TAIL)
    };
    Ok(PlatformLogs {
        stdout: vergence_container::head(&stdout, limit),
        stderr,
    })
}

/// One page of events, `None` when the group or the stream does not exist.
async fn page(
    client: &Client,
    group: &str,
    stream: &str,
    token: Option<String>,
    from_head: bool,
    limit: Option<i32>,
) -> Result<Option<aws_sdk_cloudwatchlogs::operation::get_log_events::GetLogEventsOutput>, EcsError>
{
    match client
        .get_log_events()
        .log_group_name(group)
        .log_stream_name(stream)
        .start_from_head(from_head)
        .set_next_token(token)
        .set_limit(limit)
        .send()
        .await
    {
        Ok(page) => Ok(Some(page)),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(EcsError::GetLogEvents {
            group: group.to_owned(),
            stream: stream.to_owned(),
            detail: describe(&e),
            source: Box::new(e),
        }),
    }
}

/// Each event is a line without its newline.
fn append(text: &mut String, events: &[OutputLogEvent]) {
    for event in events {
        text.push_str(event.message().unwrap_or_default());
        text.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_stream_is_named_by_prefix_container_and_task_id() {
        assert_eq!(
            stream_name("0f3c6a6b2b8d4c4e9d1e2f3a4b5c6d7e"),
            "vergence/job/0f3c6a6b2b8d4c4e9d1e2f3a4b5c6d7e"
        );
    }

    #[test]
    fn events_become_lines() {
        let mut text = String::new();
        let events = [
            OutputLogEvent::builder().message("one").build(),
            OutputLogEvent::builder()
                .message("{\"objects\":[]}")
                .build(),
        ];
        append(&mut text, &events);
        assert_eq!(text, "one\n{\"objects\":[]}\n");
    }
}
