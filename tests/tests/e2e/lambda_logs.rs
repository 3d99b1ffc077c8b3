//! The worker's JSON logs carry the instance they are about: every line
//! logged while a message is handled has the application, service and
//! release channel in its spans, and job lines name the job, so CloudWatch
//! Logs Insights can follow one instance or one job.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vergence_aws::testing::endpoint;
use vergence_e2e::{Harness, quickstart_copy};
use vergence_lambda::json_logs;
use vergence_lambda::worker::{Worker, WorkerConfig};

/// Log output captured in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// The value of `field` in any span of a log line.
fn span_field<'a>(line: &'a serde_json::Value, field: &str) -> Option<&'a str> {
    line["spans"]
        .as_array()?
        .iter()
        .find_map(|span| span[field].as_str())
}

// current_thread: the subscriber set for this thread sees every task.
#[tokio::test]
async fn worker_log_lines_carry_the_instance_and_the_job() {
    let (Some(dynamodb), Some(sqs)) = (
        endpoint("VERGENCE_TEST_DYNAMODB_URL"),
        endpoint("VERGENCE_TEST_SQS_URL"),
    ) else {
        return;
    };
    let mut h = Harness::start(&dynamodb, &sqs).await;
    let dir = quickstart_copy();
    let bundle = vergence_compiler::read_dir(dir.path()).unwrap();
    h.control().apply_config(bundle, "test").await.unwrap();
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = json_logs(
        move || writer.clone(),
        "info,vergence_engine=debug,vergence_runner_local=debug",
    )
    .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    assert!(h.schedule().await > 0, "the new instances are due");
    let event = h.receive(Duration::from_secs(2)).await;
    assert!(!event.records.is_empty());
    h.deliver(&worker, event).await;

    let lines = captured.lines();
    let stepped: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "stepped")
        .collect();
    assert!(!stepped.is_empty(), "{lines:#?}");
    for line in &stepped {
        assert_eq!(span_field(line, "application"), Some("shop"), "{line}");
        assert!(span_field(line, "service").is_some(), "{line}");
        assert!(span_field(line, "release_channel").is_some(), "{line}");
        assert!(span_field(line, "message_id").is_some(), "{line}");
    }
    let job_lines: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| span_field(l, "job").is_some())
        .collect();
    assert!(
        !job_lines.is_empty(),
        "a job was dispatched and logged with its id: {lines:#?}"
    );
    for line in job_lines {
        assert!(span_field(line, "kind").is_some(), "{line}");
        assert_eq!(span_field(line, "application"), Some("shop"), "{line}");
    }
}
