//! Metric protections, carried out in-process by whoever runs the engine
//! (the worker function, `vergence up`, `vergence serve`), the way the
//! first-class ECS and Cloud Run runtimes' jobs are:
//!
//! - [`PrometheusChecks`]: a PromQL query against the Prometheus HTTP API,
//!   every series of which must stay within the protection's threshold
//!   (for `for`, when given);
//! - [`CloudwatchAlarms`] (feature `cloudwatch`): CloudWatch alarms, none of
//!   which may be in ALARM.
//!
//! A check's result is a job result: exit 0 with what it read when it
//! passes, exit 1 with why when it fails, and
//! [`JobOutcome::Inconclusive`](vergence_model::JobOutcome::Inconclusive)
//! when the source could not be read (down, refusing the query, an alarm
//! that does not exist, no series). The engine holds applies on an
//! inconclusive result and never fails a version for one.

#[cfg(feature = "cloudwatch")]
mod cloudwatch;
mod prometheus;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use jiff::Timestamp;
use tracing::warn;
use vergence_model::ports::{JobProgress, JobResultSink, Runner};
use vergence_model::{JobHandle, JobOutcome, JobRecord, JobResult};

#[cfg(feature = "cloudwatch")]
pub use cloudwatch::CloudwatchAlarms;
pub use prometheus::PrometheusChecks;

/// The runner of `prometheus` protections: queries through `http`,
/// results reported to `sink`.
pub fn prometheus_runner(http: reqwest::Client, sink: Arc<dyn JobResultSink>) -> Arc<dyn Runner> {
    Arc::new(Reporting {
        check: PrometheusChecks::new(http),
        sink,
    })
}

/// The runner of `cloudwatchAlarm` protections: alarms read by `alarms`,
/// results reported to `sink`.
#[cfg(feature = "cloudwatch")]
pub fn cloudwatch_runner(
    alarms: Arc<CloudwatchAlarms>,
    sink: Arc<dyn JobResultSink>,
) -> Arc<dyn Runner> {
    Arc::new(Reporting {
        check: alarms,
        sink,
    })
}

/// What went wrong inside this crate: a job routed to the wrong checker.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("job {job} is not a {expected} check")]
    WrongJob { job: String, expected: &'static str },
}

/// What a metric check read, before it becomes a job result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// Within bounds; what was read, for people.
    Pass(String),
    /// Outside bounds: why the protection fails.
    Fail(String),
    /// The source could not be read: why.
    Inconclusive(String),
}

impl Reading {
    /// The job result a program's check would give: exit 0 with what it
    /// read on stdout, exit 1 with why on stderr, or no exit at all.
    pub fn into_result(self, took: std::time::Duration, at: Timestamp) -> JobResult {
        let done = match self {
            Reading::Pass(read) => Ok(read),
            Reading::Fail(why) => Err(why),
            Reading::Inconclusive(message) => {
                let mut result =
                    JobResult::without_output(JobOutcome::Inconclusive { message }, at);
                result.duration_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
                return result;
            }
        };
        JobResult::of_call(done, took, at)
    }
}

/// A check that reads something and says what it read.
#[async_trait]
trait Check: Send + Sync {
    async fn read(&self, job: &JobRecord) -> Reading;
}

#[async_trait]
impl<C: Check> Check for Arc<C> {
    async fn read(&self, job: &JobRecord) -> Reading {
        C::read(self, job).await
    }
}

/// Runs a [`Check`] as a runner: the result is reported through the sink
/// at once (the same path a local process's result takes), and `poll`
/// reads again, which a read-only check allows, for a result that was lost.
struct Reporting<C> {
    check: C,
    sink: Arc<dyn JobResultSink>,
}

impl<C: Check> Reporting<C> {
    async fn carry_out(&self, job: &JobRecord) -> JobResult {
        let started = Instant::now();
        let reading = self.check.read(job).await;
        reading.into_result(started.elapsed(), Timestamp::now())
    }
}

#[async_trait]
impl<C: Check> Runner for Reporting<C> {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        let result = self.carry_out(job).await;
        if let Err(e) = self.sink.job_finished(job, result).await {
            warn!(job = %job.id, error = %e, "recording a metric check's result failed; it is read again when polled");
        }
        Ok(None)
    }

    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        Ok(JobProgress::Finished(self.carry_out(job).await))
    }
}

/// How long a check may take: the protection's `timeout`, at least 1 s.
fn time_limit(job: &JobRecord) -> std::time::Duration {
    std::time::Duration::try_from(job.spec.timeout)
        .unwrap_or_default()
        .max(std::time::Duration::from_secs(1))
}
