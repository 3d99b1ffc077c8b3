//! Steady-state checks that find nothing, kept cheap.
//!
//! Most of a converged instance's life is spent being checked for drift
//! and found as it should be. Recording such a check the way every other
//! decision is recorded (the fetch job created, claimed, its result
//! written with the next decision) costs a serverless deployment two
//! transactions and a claim per check, for nothing a person will read.
//! When the fetch can run inside the step, it runs before anything is
//! written: a fetch changes nothing, so running it twice (a duplicate
//! message) or not at all (a step that dies) loses nothing. If it found
//! nothing, only [`QuietCheck`]'s few fields are stored, apart from the
//! instance ([`StateStore::record_check`]), and the next check goes out as a
//! delayed message. If it found anything (drift, a failure, a changed
//! state), the step records the job and its result as it always has.
//!
//! The due index is not moved by a quiet check: a full write of the
//! instance sets it to a watchdog time behind the chained check, and the
//! check that would pass the watchdog writes the instance in full again.
//!
//! [`StateStore::record_check`]: vergence_model::ports::InstanceStore::record_check

use jiff::{SignedDuration, Timestamp};
use tracing::debug;

use super::facts::Upstream;
use super::{Engine, Progress, StepReport, ended_with};
use crate::{Decision, decide, settled};
use vergence_model::error::Result;
use vergence_model::ports::{Runner, Started, write_unchanged};
use vergence_model::{
    InstanceKey, InstanceRecord, JobKind, JobRecord, JobResult, QuietCheck, Status,
};

/// Checks kept cheap: the queue carries the next check as a delayed
/// message, and the due index only watches for a chain that broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuietChecks {
    /// The longest the queue delays a message (SQS: 15 minutes). A next
    /// check further out is left to the due index, as every wait is.
    pub longest_delay: SignedDuration,
    /// How long after a chained check the due index looks at the instance
    /// anyway. Each full write of the instance moves it; the longer it is,
    /// the rarer those writes, and the later a broken chain is found.
    pub watchdog: SignedDuration,
}

impl QuietChecks {
    /// The due index's time for a record about to be written in full: a
    /// watchdog behind a converged instance's next check when the queue
    /// carries that check, else none (the index holds the check itself).
    pub(super) fn watchdog_for(
        &self,
        record: &InstanceRecord,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let at = record.next_check_at?;
        let carried = record.state.status == Status::Converged
            && record.state.in_flight.is_none()
            && self.carries(at, now);
        carried.then(|| at.saturating_add(self.watchdog).unwrap_or(at))
    }

    /// Whether the queue can carry a check due `at` (sent `now`).
    fn carries(&self, at: Timestamp, now: Timestamp) -> bool {
        at.duration_since(now) <= self.longest_delay
    }
}

/// What became of a check tried quietly.
pub(super) enum Quietly {
    /// Not a check that can be quiet: decide as always.
    Not,
    /// Recorded, or dropped as a duplicate; the step is over.
    Done(Box<StepReport>),
    /// The fetch ran and found something; its job is recorded and the
    /// instance as stored, with the fetch ended, is decided on next
    /// (`None`: someone else wrote the instance first).
    Found(Option<Box<(InstanceRecord, JobRecord)>>),
}

impl Engine {
    /// Runs the decision's fetch and records it quietly when it found
    /// nothing; see the module's documentation.
    pub(super) async fn check_quietly(
        &self,
        key: &InstanceKey,
        record: &InstanceRecord,
        (decision, upstream): (&Decision, &Upstream),
        now: Timestamp,
        progress: &mut Progress,
    ) -> Result<Quietly> {
        let Some(quiet) = self.quiet else {
            return Ok(Quietly::Not);
        };
        let [job] = decision.jobs.as_slice() else {
            return Ok(Quietly::Not);
        };
        let steady = record.state.status == Status::Converged
            && record.state.in_flight.is_none()
            && job.kind == JobKind::Fetch
            && decision.events.is_empty()
            && decision.wake.is_empty()
            && decision.state.in_flight.as_ref().map(|f| &f.job_id) == Some(&job.id);
        if !steady || !self.runners.runs_inline(job) {
            return Ok(Quietly::Not);
        }
        let result = match self.runners.start(job).await {
            Ok(Started::Finished(result)) => result,
            // The same check is running in this process (a duplicate
            // message in the same batch): that one records it.
            Ok(Started::Running(_)) => return Ok(Quietly::Done(Box::new(report(record, None)))),
            // Recorded and started the usual way, a job that cannot start
            // says why in its result.
            Err(e) => {
                debug!(error = %e, "a quiet check could not start; checking in full");
                return Ok(Quietly::Not);
            }
        };
        let mut ran = record.clone();
        ran.state = decision.state.clone();
        ran.next_check_at = decision.next_check_at;
        let facts = self
            .facts(
                &ran,
                Some(ended_with(job, result.clone())),
                now,
                Some(upstream.clone()),
            )
            .await?;
        let after = decide(&ran, &facts);
        let check = (after.jobs.is_empty() && after.events.is_empty() && after.wake.is_empty())
            .then(|| QuietCheck::between(record, &after.state, after.next_check_at, now))
            .flatten();
        let Some(check) = check else {
            let found = self.record_found(record, decision, job.clone(), result, now, progress);
            return Ok(Quietly::Found(found.await?.map(Box::new)));
        };
        // A next check further out than the queue carries is the due
        // index's to find, so the index moves with every such check: the
        // whole instance is written (still one write, no job record).
        let watched = quiet.carries(check.next_check_at, now)
            && record
                .watchdog_at
                .is_some_and(|watchdog| watchdog > check.next_check_at);
        let recorded = if watched {
            self.store.record_check(record, &check).await?
        } else {
            self.rearm(record, &check, quiet, now).await?
        };
        if recorded {
            self.schedule(key, Some(check.next_check_at), &[]).await?;
        } else {
            // A duplicate message, or the instance changed: whoever wrote
            // first asked for what comes next.
            debug!("a quiet check lost to another write; not scheduling");
        }
        let mut stored = record.clone();
        stored.take_check(&check);
        Ok(Quietly::Done(Box::new(report(&stored, Some(job)))))
    }

    /// Stores the decision that started a fetch which ran quietly and
    /// found something, and hands back the instance as stored with the
    /// fetch ended, for the next decision to take its result up; `None`
    /// when someone else wrote the instance first.
    async fn record_found(
        &self,
        record: &InstanceRecord,
        decision: &Decision,
        job: JobRecord,
        result: JobResult,
        now: Timestamp,
        progress: &mut Progress,
    ) -> Result<Option<(InstanceRecord, JobRecord)>> {
        match self.persist(record, decision, &[], now).await {
            Ok((recorded, stored)) => {
                progress.events.extend(recorded);
                progress.dispatched.push(job.id.clone());
                progress.absorbed += 1;
                let ended = ended_with(&job, result.clone());
                progress.unrecorded.push((job, result));
                Ok(Some((stored, ended)))
            }
            Err(vergence_model::Error::Conflict { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes the instance in full with `check` taken up and the watchdog
    /// moved past its next check: one conditional write, no job record.
    async fn rearm(
        &self,
        record: &InstanceRecord,
        check: &QuietCheck,
        quiet: QuietChecks,
        now: Timestamp,
    ) -> Result<bool> {
        let mut next = record.clone();
        next.take_check(check);
        next.watchdog_at = quiet.watchdog_for(&next, now);
        write_unchanged(self.store.as_ref(), next, record.revision).await
    }
}

fn report(record: &InstanceRecord, ran: Option<&JobRecord>) -> StepReport {
    StepReport {
        status: Some(record.state.status),
        events: Vec::new(),
        dispatched: ran.map(|job| job.id.clone()).into_iter().collect(),
        next_check_at: record.next_check_at,
        settled: Some(settled(record)),
        quiet: true,
    }
}
