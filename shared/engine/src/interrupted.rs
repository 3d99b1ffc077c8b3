//! A job that ended while the process running the engine was stopping
//! (Ctrl-C, SIGTERM): its result is recorded, but no step takes it up
//! before the next run. Left alone, the instance would say APPLYING for a
//! job that no longer runs.

use jiff::Timestamp;
use vergence_model::error::Result;
use vergence_model::ports::{InstanceChange, InstanceCommit, MAX_CONFLICT_RETRIES, StateStore};
use vergence_model::{Event, EventKind, JobId, JobKind, JobOutcome, Status};

use crate::ACTOR;

/// Says on the job's instance what became of the job, when the instance
/// still shows it running (APPLYING, ROLLING_BACK): PENDING, with the job's
/// end and what the next run does. The job stays in flight, so the next
/// step takes its result up as any other. `stopping` says what was
/// stopping, as "`vergence up` was stopping (SIGINT)". Returns whether the
/// instance was changed.
pub async fn note_interrupted(
    store: &dyn StateStore,
    job: &JobId,
    stopping: &str,
    now: Timestamp,
) -> Result<bool> {
    let Some(job) = store.get_job(job).await? else {
        return Ok(false);
    };
    let Some(result) = job.result() else {
        return Ok(false);
    };
    for _ in 0..MAX_CONFLICT_RETRIES {
        let Some(record) = store.get_instance(&job.instance).await? else {
            return Ok(false);
        };
        let shows_it_running = record
            .state
            .in_flight
            .as_ref()
            .is_some_and(|flight| flight.job_id == job.id)
            && matches!(record.state.status, Status::Applying | Status::RollingBack);
        if !shows_it_running {
            return Ok(false);
        }
        let what = format!("{} of {} (attempt {})", job.kind, job.version, job.attempt);
        let reason = match &result.outcome {
            JobOutcome::Stopped { .. } => format!(
                "{what} {}; the next `vergence up` {}",
                result.describe(),
                if job.kind == JobKind::Apply {
                    "applies again"
                } else {
                    "runs it again"
                }
            ),
            _ => format!(
                "{what} {} while {stopping}; the next `vergence up` takes its result up",
                result.describe()
            ),
        };
        let reason = vergence_model::text::sentence(reason);
        let mut next = record.clone();
        next.state.status = Status::Pending;
        next.state.reason = reason.clone();
        next.state.since = Some(now);
        next.state.wait = None;
        next.watchdog_at = None;
        next.updated_at = now;
        let mut events = vec![Event::for_instance(
            &record.key,
            now,
            ACTOR,
            EventKind::StatusChanged {
                from: record.state.status,
                to: Status::Pending,
            },
            reason,
        )];
        let scope = format!("{}@{}", record.key.storage_id(), record.revision + 1);
        Event::assign_ids(&mut events, &scope);
        let commit = InstanceCommit {
            change: InstanceChange::Put(Box::new(next)),
            expected_revision: Some(record.revision),
            new_jobs: Vec::new(),
            finished_jobs: Vec::new(),
            events,
        };
        match store.commit(commit).await {
            Ok(_) => return Ok(true),
            // Someone stepped it meanwhile: look again.
            Err(vergence_model::Error::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}
