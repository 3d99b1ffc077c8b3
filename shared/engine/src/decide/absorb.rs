//! Absorbing a finished job into the service instance's state: the apply's
//! outcome against the retry policy, what a fetch saw, getInfo's outputs
//! and a protection's result. Runs before anything is evaluated, so the
//! rest of the decision sees the job's effect.

use jiff::SignedDuration;

use super::{Decider, after, moment};
use crate::fetch;
use crate::gates::human;
use vergence_model::terraform::{self, Failure};
use vergence_model::{
    CompiledInstance, EventKind, FetchMode, FetchObservation, FetchVerdict, InFlightJob,
    InfoOutput, JobKind, JobOutcome, JobResult, JobSpec, JobSummary, PlanRecord,
    ProtectionObservation,
};

/// Applies lost in a row that are applied again without counting a failed
/// attempt; each one after them counts.
const LOSSES_NOT_COUNTED: u32 = 2;

fn ordinal(n: u32) -> String {
    match n {
        1 => "first".to_owned(),
        2 => "second".to_owned(),
        3 => "third".to_owned(),
        n => format!("{n}th"),
    }
}

impl Decider<'_> {
    pub(super) fn absorb(
        &mut self,
        spec: &CompiledInstance,
        flight: &InFlightJob,
        result: &JobResult,
    ) {
        self.state.in_flight = None;
        let summary = JobSummary {
            job_id: flight.job_id.clone(),
            kind: flight.kind,
            version: flight.version.clone(),
            attempt: flight.attempt,
            outcome: result.outcome.clone(),
            exit_code: result.exit_code,
            finished_at: result.finished_at,
            duration_ms: result.duration_ms,
            stderr_tail: result.stderr_tail.clone(),
        };
        self.state.last_jobs.retain(|j| j.kind != flight.kind);
        self.state.last_jobs.push(summary);
        if let JobOutcome::Stopped { reason } = &result.outcome {
            // Superseded: what it would have said is about a version that
            // is no longer wanted.
            let message = format!("{} of {} stopped: {reason}", flight.kind, flight.version);
            self.event(
                EventKind::JobFinished {
                    job_id: flight.job_id.clone(),
                    job: flight.kind,
                    outcome: result.outcome.clone(),
                    exit_code: result.exit_code,
                },
                message,
            );
            return;
        }
        // Stale: of another version than the one wanted now. The target
        // is only moved to a newly desired version after this, so a job
        // that finishes after a release was pushed is checked against the
        // spec too; else its success would count as the new version's.
        let stale = flight.version != spec.version
            || self
                .state
                .target
                .as_ref()
                .is_none_or(|t| t.version != flight.version);
        match flight.kind {
            JobKind::Apply => self.absorb_apply(spec, flight, result, stale),
            JobKind::Fetch => self.absorb_fetch(spec, flight, result, stale),
            JobKind::GetInfo => self.absorb_info(result),
            JobKind::Protection => self.absorb_protection(flight, result),
        }
    }

    fn absorb_protection(&mut self, flight: &InFlightJob, result: &JobResult) {
        let Some(key) = flight.protection.clone() else {
            return;
        };
        let passed = result.exited_with(0);
        let inconclusive = matches!(result.outcome, JobOutcome::Inconclusive { .. });
        let summary = if passed {
            "passed".to_owned()
        } else {
            result.describe()
        };
        let before = self
            .state
            .protections
            .get(&key)
            .map(|o| (o.passed, o.inconclusive));
        self.state.protections.insert(
            key.clone(),
            ProtectionObservation {
                at: self.now,
                version: flight.version.clone(),
                passed,
                summary: summary.clone(),
                inconclusive,
            },
        );
        // Routine passing checks would flood the audit trail; changes do not.
        if before != Some((passed, inconclusive)) {
            self.event(
                EventKind::ProtectionChanged {
                    protection: key.clone(),
                    passed,
                },
                format!(
                    "protection {key} {}",
                    if passed {
                        "passes".to_owned()
                    } else if inconclusive {
                        format!("cannot be evaluated: {summary}")
                    } else {
                        format!("fails: {summary}")
                    }
                ),
            );
        }
    }

    /// getInfo's output is for people and never changes convergence:
    /// the structured form (`{"outputs":[{"name","text"}]}`) is kept as
    /// outputs, anything else as printed (bounded), and a failure beside
    /// what it printed, as a job's output would be shown.
    fn absorb_info(&mut self, result: &JobResult) {
        #[derive(serde::Deserialize)]
        struct InfoDoc {
            outputs: Vec<InfoOutput>,
        }
        self.state.info_at = Some(self.now);
        // Larger structured output is shown as printed (cut), so what is
        // kept stays bounded either way.
        let structured = (result.stdout.len() <= vergence_model::INFO_MAX)
            .then(|| serde_json::from_str::<InfoDoc>(&result.stdout).ok())
            .flatten();
        (self.state.info, self.state.info_text) = match structured {
            Some(doc) => (doc.outputs, None),
            None if result.stdout.trim().is_empty() => (Vec::new(), None),
            None => (Vec::new(), Some(vergence_model::info_text(&result.stdout))),
        };
        self.state.info_failure =
            (!result.exited_with(0)).then(|| format!("getInfo {}", result.describe()));
    }

    fn job_finished_event(&mut self, flight: &InFlightJob, result: &JobResult, message: String) {
        self.event(
            EventKind::JobFinished {
                job_id: flight.job_id.clone(),
                job: flight.kind,
                outcome: result.outcome.clone(),
                exit_code: result.exit_code,
            },
            message,
        );
    }

    fn absorb_apply(
        &mut self,
        spec: &CompiledInstance,
        flight: &InFlightJob,
        result: &JobResult,
        stale: bool,
    ) {
        let took = human(SignedDuration::from_millis(result.duration_ms as i64));
        let what = format!("apply of {} (attempt {})", flight.version, flight.attempt);
        if self.lost_not_counted(spec, flight, result, &what, stale) {
            return;
        }
        if result.exited_with(0) {
            self.job_finished_event(flight, result, format!("{what} succeeded in {took}"));
            if stale {
                // An older version finished while a newer one was pushed;
                // without a fetch, applying is all we know of the runtime.
                if spec.fetch.is_none() {
                    self.state.current_version = Some(flight.version.clone());
                }
                return;
            }
            let target = self.target();
            target.applied_at = Some(result.finished_at);
            target.applied_seq = Some(flight.seq);
            target.retry_at = None;
            target.retryable_exits = 0;
            if spec.fetch.is_none() {
                self.converged(spec);
            }
            return;
        }
        let terraform = spec
            .fetch
            .as_ref()
            .is_some_and(|f| f.mode == FetchMode::TerraformPlan);
        let failure = classify_failure(terraform, FetchVerdict::Error, result);
        let retryable = result.outcome == JobOutcome::Exited
            && result
                .exit_code
                .is_some_and(|c| spec.apply.retryable_exit_codes.contains(&c));
        if stale {
            self.job_finished_event(flight, result, format!("{what} {}", result.describe()));
            return;
        }
        if failure == Failure::StalePlan {
            return self.stale_plan(flight, result, &what);
        }
        let transient = match failure {
            Failure::Transient(why) => Some(why),
            _ => None,
        };
        if retryable || transient.is_some() {
            let marks = match transient {
                Some(why) => format!("{why}, which is not a failed attempt"),
                None => format!("which runtime {} marks retryable", spec.runtime),
            };
            let policy = spec.apply.retry_policy;
            let now = self.now;
            let target = self.target();
            target.retryable_exits += 1;
            let retry_at = after(now, policy.backoff(target.retryable_exits));
            target.retry_at = Some(retry_at);
            target.last_failure = Some(format!("{what} {} (retryable)", result.describe()));
            self.job_finished_event(
                flight,
                result,
                format!(
                    "{what} {}, {marks}; retrying at {}",
                    result.describe(),
                    moment(retry_at)
                ),
            );
            return;
        }
        let failure = format!(
            "{what} {}{}",
            result.describe(),
            bare_program_hint(&spec.apply.job, result)
        );
        self.job_finished_event(flight, result, failure.clone());
        self.count_failure(spec, failure);
        // A lost apply may well have run: look before applying again.
        if result.outcome == JobOutcome::Lost && spec.fetch.is_some() {
            self.state.checks_requested = true;
            if let Some(target) = self.state.target.as_mut() {
                target.retry_at = None;
            }
        }
    }

    /// A lost apply says nothing about the deploy: the process or worker
    /// that ran it died (`kill -9`, OOM, a reboot), or nothing reported by
    /// its deadline. It may well have run, so a runtime with a fetch looks
    /// first; then it is applied again at once, without counting a failed
    /// attempt, which could fail the version or roll it back. Only an
    /// apply lost [`LOSSES_NOT_COUNTED`] times in a row and again counts.
    /// Returns whether it was taken as not counted. Any other result of
    /// the version wanted ends a run of losses.
    fn lost_not_counted(
        &mut self,
        spec: &CompiledInstance,
        flight: &InFlightJob,
        result: &JobResult,
        what: &str,
        stale: bool,
    ) -> bool {
        if stale {
            return false;
        }
        let target = self.target();
        if result.outcome != JobOutcome::Lost {
            target.lost_applies = 0;
            return false;
        }
        target.lost_applies += 1;
        let lost = target.lost_applies;
        if lost > LOSSES_NOT_COUNTED {
            return false;
        }
        target.retry_at = None;
        target.applied_seq = None;
        target.last_failure = Some(format!("{what} {} (not counted)", result.describe()));
        let next = if spec.fetch.is_some() {
            self.state.checks_requested = true;
            "fetching to see whether it ran, then applying if needed"
        } else {
            "applying again"
        };
        self.job_finished_event(
            flight,
            result,
            format!(
                "{what} {}; a lost apply is not a failed attempt ({lost} lost in a row; from the {} on they count): {next}",
                result.describe(),
                ordinal(LOSSES_NOT_COUNTED + 1)
            ),
        );
        true
    }

    /// The apply's plan no longer matches the state (someone changed it
    /// since the plan was made). Not a failed attempt: plan again. The new
    /// plan is applied without asking again only when it makes the same
    /// changes, because the approval binds to the digest of the changes.
    fn stale_plan(&mut self, flight: &InFlightJob, result: &JobResult, what: &str) {
        let approved = self.state.plan.take().map(|p| p.short().to_owned());
        self.state.checks_requested = true;
        let target = self.target();
        target.applied_seq = None;
        target.retry_at = None;
        let plan = approved.map(|p| format!(" {p}")).unwrap_or_default();
        self.job_finished_event(
            flight,
            result,
            format!(
                "{what}: its plan{plan} is stale (the state changed since it was made); planning again, and a plan with other changes needs a new approval"
            ),
        );
    }

    /// Counts a failed attempt against the retry policy: wait and retry, or
    /// give up on this version.
    pub(super) fn count_failure(&mut self, spec: &CompiledInstance, failure: String) {
        let failure = vergence_model::text::sentence(failure);
        let policy = spec.apply.retry_policy;
        let now = self.now;
        let target = self.target();
        target.apply_failures += 1;
        target.applied_seq = None;
        target.last_failure = Some(failure.clone());
        if target.apply_failures >= policy.max_attempts {
            target.failed = Some(format!(
                "{failure}; gave up after {} failed attempt(s) (retryPolicy.maxAttempts); \
                 a new version, a config change or `vergence up` retries",
                target.apply_failures
            ));
            target.retry_at = None;
        } else {
            target.retry_at = Some(after(now, policy.backoff(target.apply_failures)));
        }
    }

    fn absorb_fetch(
        &mut self,
        spec: &CompiledInstance,
        flight: &InFlightJob,
        result: &JobResult,
        stale: bool,
    ) {
        let Some(fetch) = &spec.fetch else { return };
        let terraform = fetch.mode == FetchMode::TerraformPlan;
        let (verdict, summary) = if terraform {
            fetch::terraform_plan(result, self.facts.plan.as_ref())
        } else {
            fetch::interpret(fetch.mode, result, &flight.version)
        };
        // One clause per fetched object can make it any size.
        let summary = vergence_model::text::sentence(format!(
            "{summary}{}",
            bare_program_hint(&fetch.job, result)
        ));
        let previous = self.state.last_fetch.as_ref().map(|o| o.verdict);
        let previous_plan = self.state.plan.as_ref().map(|p| p.sha256.clone());
        self.state.last_fetch = Some(FetchObservation {
            at: self.now,
            seq: flight.seq,
            version: flight.version.clone(),
            verdict,
            summary: summary.clone(),
            takeovers: Vec::new(),
            traffic_percent: fetch::traffic_percent(fetch.mode, result, &flight.version),
        });
        self.absorb_adoption(fetch.mode, flight, result, stale);
        // A plan is handed to the apply of the same version; an approval
        // binds to its digest, so a new plan needs a new approval.
        if terraform {
            if verdict != FetchVerdict::Error {
                self.state.plan = match &self.facts.plan {
                    Some(Ok(content)) if verdict == FetchVerdict::NeedsApply => {
                        Some(PlanRecord::terraform(
                            flight.version.clone(),
                            flight.seq,
                            self.now,
                            result.outputs.clone(),
                            content.clone(),
                        ))
                    }
                    _ => None,
                };
            }
        } else if !fetch.job.outputs.is_empty() && result.outcome == JobOutcome::Exited {
            self.state.plan = (!result.outputs.is_empty()).then(|| {
                PlanRecord::new(
                    flight.version.clone(),
                    flight.seq,
                    self.now,
                    result.outputs.clone(),
                )
            });
        }
        if stale {
            return;
        }
        let transient = match classify_failure(terraform, verdict, result) {
            Failure::Transient(why) => Some(why),
            _ => None,
        };
        let target = self.target();
        if transient.is_some() {
            // Spaced out like a failure, never counted as one.
            target.retryable_exits += 1;
        } else if verdict == FetchVerdict::Error {
            target.fetch_failures += 1;
        } else {
            target.fetch_failures = 0;
            target.retryable_exits = 0;
        }
        let rollout_failed = verdict == FetchVerdict::Failed && target.applied_seq.is_some();
        let plan_changed = self.state.plan.as_ref().map(|p| &p.sha256) != previous_plan.as_ref();
        // Steady-state checks that see nothing new would flood the audit
        // trail; record fetches that change the picture or fail.
        if let Some(why) = transient {
            let message = format!("fetch: {summary} ({why}; not counted as a failure)");
            self.job_finished_event(flight, result, message);
        } else if verdict == FetchVerdict::Error || previous != Some(verdict) || plan_changed {
            self.job_finished_event(flight, result, format!("fetch: {summary}"));
        }
        if rollout_failed {
            self.count_failure(
                spec,
                format!("the rollout of {} failed: {summary}", flight.version),
            );
        }
    }
}

/// What a failed job means: a job its runner could not start for now (out
/// of descriptors) and a failed Terraform run with a known cause (a stale
/// plan, a lock held by someone else) are not failed attempts; any other
/// failure is one.
fn classify_failure(terraform: bool, verdict: FetchVerdict, result: &JobResult) -> Failure {
    if result.is_transient_not_started() {
        return Failure::Transient("its runner could not start it for now");
    }
    if terraform && verdict == FetchVerdict::Error && result.outcome == JobOutcome::Exited {
        terraform::classify(&result.stderr_tail)
    } else {
        Failure::Other
    }
}

/// A job whose program is a bare name that could not be found: a script
/// of the config directory written without `./` is looked up on PATH, and
/// "No such file or directory" alone does not say so.
fn bare_program_hint(job: &JobSpec, result: &JobResult) -> String {
    let JobOutcome::NotStarted { message, .. } = &result.outcome else {
        return String::new();
    };
    match job.cmd.first() {
        Some(program)
            if job.image.is_none()
                && !program.contains('/')
                && message.contains("(os error 2)") =>
        {
            format!(
                "; a program named without a directory is looked up on PATH: if {program} is a script in the config directory, write ./{program}"
            )
        }
        _ => String::new(),
    }
}
