//! Reading a task's output back from Cloud Logging with the real client.

use std::time::Duration;

use google_cloud_gax::error::rpc::Code;
use google_cloud_lro::Poller;
use vergence_fake_cloud_run::FakeCloudRun;

use crate::{PARENT, PROJECT, job_name, shell_job};

/// Runs a job whose task prints three lines to stdout and one to stderr;
/// returns the execution's id.
async fn run_chatty_job(fake: &FakeCloudRun) -> String {
    let jobs = fake.jobs_client().await.unwrap();
    jobs.create_job()
        .set_parent(PARENT)
        .set_job_id("migrate")
        .set_job(shell_job("echo one; echo two; echo oops >&2; echo three"))
        .poller()
        .until_done()
        .await
        .unwrap();
    let execution = jobs
        .run_job()
        .set_name(job_name("migrate"))
        .poller()
        .until_done()
        .await
        .unwrap();
    execution.name.rsplit('/').next().unwrap().to_owned()
}

fn stdout_of(execution: &str) -> String {
    format!(
        r#"resource.type="cloud_run_job" AND resource.labels.job_name=migrate
           labels."run.googleapis.com/execution_name"="{execution}"
           logName="projects/{PROJECT}/logs/run.googleapis.com%2Fstdout""#
    )
}

#[tokio::test]
async fn task_stdout_is_listed_from_cloud_logging_by_execution_label() {
    let fake = FakeCloudRun::start().await.unwrap();
    let execution = run_chatty_job(&fake).await;
    let logging = fake.logging_client().await.unwrap();

    let listed = logging
        .list_log_entries()
        .set_resource_names([format!("projects/{PROJECT}")])
        .set_filter(stdout_of(&execution))
        .set_order_by("timestamp asc")
        .send()
        .await
        .unwrap();

    let lines: Vec<&str> = listed
        .entries
        .iter()
        .filter_map(|e| e.text_payload().map(String::as_str))
        .collect();
    assert_eq!(lines, ["one", "two", "three"]);
    let entry = &listed.entries[0];
    assert_eq!(entry.resource.as_ref().unwrap().r#type, "cloud_run_job");
    assert_eq!(
        entry.resource.as_ref().unwrap().labels["location"],
        "europe-west1"
    );
    assert_eq!(entry.labels["run.googleapis.com/task_index"], "0");
    assert_eq!(entry.labels["run.googleapis.com/task_attempt"], "0");
    assert!(entry.timestamp.is_some() && !entry.insert_id.is_empty());
    assert!(listed.next_page_token.is_empty());
}

#[tokio::test]
async fn entries_come_newest_first_in_pages_when_asked() {
    let fake = FakeCloudRun::start().await.unwrap();
    let execution = run_chatty_job(&fake).await;
    let logging = fake.logging_client().await.unwrap();
    let page = |token: String| {
        logging
            .list_log_entries()
            .set_resource_names([format!("projects/{PROJECT}")])
            .set_filter(stdout_of(&execution))
            .set_order_by("timestamp desc")
            .set_page_size(2)
            .set_page_token(token)
            .send()
    };

    let first = page(String::new()).await.unwrap();
    let second = page(first.next_page_token.clone()).await.unwrap();

    let text = |entries: &[google_cloud_logging_v2::model::LogEntry]| -> Vec<String> {
        entries
            .iter()
            .filter_map(|e| e.text_payload().cloned())
            .collect()
    };
    assert_eq!(text(&first.entries), ["three", "two"]);
    assert_eq!(text(&second.entries), ["one"]);
    assert!(second.next_page_token.is_empty());
}

#[tokio::test]
async fn stderr_lines_have_their_own_log_and_other_projects_see_nothing() {
    let fake = FakeCloudRun::start().await.unwrap();
    run_chatty_job(&fake).await;
    let logging = fake.logging_client().await.unwrap();

    let stderr = logging
        .list_log_entries()
        .set_resource_names([format!("projects/{PROJECT}")])
        .set_filter(format!(
            r#"logName="projects/{PROJECT}/logs/run.googleapis.com%2Fstderr""#
        ))
        .send()
        .await
        .unwrap();
    let elsewhere = logging
        .list_log_entries()
        .set_resource_names(["projects/other"])
        .send()
        .await
        .unwrap();

    assert_eq!(stderr.entries.len(), 1);
    assert_eq!(stderr.entries[0].text_payload().unwrap(), "oops");
    assert!(elsewhere.entries.is_empty());
}

#[tokio::test]
async fn a_filter_the_fake_cannot_parse_is_invalid_argument_naming_it() {
    let fake = FakeCloudRun::start().await.unwrap();
    let logging = fake.logging_client().await.unwrap();

    let error = logging
        .list_log_entries()
        .set_resource_names([format!("projects/{PROJECT}")])
        .set_filter(r#"severity>=ERROR OR textPayload:"x""#)
        .send()
        .await
        .unwrap_err();

    assert_eq!(error.status().map(|s| s.code), Some(Code::InvalidArgument));
    assert!(error.to_string().contains("'OR'"), "{error}");
}

#[tokio::test]
async fn lines_are_listed_only_once_the_log_delay_has_passed() {
    let fake = FakeCloudRun::builder()
        .log_delay(Duration::from_millis(800))
        .start()
        .await
        .unwrap();
    let execution = run_chatty_job(&fake).await;
    let logging = fake.logging_client().await.unwrap();
    let list = || {
        logging
            .list_log_entries()
            .set_resource_names([format!("projects/{PROJECT}")])
            .set_filter(stdout_of(&execution))
            .send()
    };

    let early = list().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    let later = list().await.unwrap();

    assert!(early.entries.is_empty(), "{:?}", early.entries);
    assert_eq!(later.entries.len(), 3);
    let entry = &later.entries[0];
    let lag = entry.receive_timestamp.as_ref().unwrap().seconds() * 1000
        + i64::from(entry.receive_timestamp.as_ref().unwrap().nanos()) / 1_000_000
        - (entry.timestamp.as_ref().unwrap().seconds() * 1000
            + i64::from(entry.timestamp.as_ref().unwrap().nanos()) / 1_000_000);
    assert!(
        (799..=801).contains(&lag),
        "received {lag} ms after it was written"
    );
    assert_eq!(
        fake.log_entries().len(),
        4,
        "the test's view is not delayed"
    );
}
