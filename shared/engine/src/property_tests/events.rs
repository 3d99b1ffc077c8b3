//! Events: what can happen between decisions, and what a job's run reports
//! on the small runtime model (the version applied last is what runs).

use std::fmt;

use jiff::SignedDuration;

use super::setup::{Ch, Tier};
use crate::human;
use vergence_model::*;

/// How the in-flight job ends; what that means depends on the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// apply/check exit 0; fetch: the truth, converged if and only if the
    /// last successful apply here was of the version fetched.
    Ok,
    /// apply/check exit 1; exitCode fetch: error (3); structured: FAILED.
    Fail,
    /// apply exit 75 (retryable); fetch exit 75 (an error).
    Retryable,
    /// exitCode fetch exit 2; structured: the desired version, drifted.
    Drift,
    /// exitCode fetch exit 2; structured: another version is active.
    OtherVersion,
    /// exitCode fetch exit 2; structured: the desired version, PENDING.
    Rolling,
    /// exitCode fetch exit 3; structured: malformed output.
    Error,
    /// Only in the good world: like `Ok`, but a fetch finds the version it
    /// looks for running (whoever put it there), so nothing is polled for
    /// hours while a gate holds.
    Converged,
}

#[derive(Clone, Copy)]
pub(super) enum Action {
    /// A step with nothing new.
    Step(Ch),
    /// The in-flight job finishes (a plain step when nothing is in flight).
    Finish(Ch, Outcome),
    /// Shorthand for up to 8 `Finish(ch, Ok)` in a row, until nothing is in
    /// flight: the instance works as far as its gates let it right now.
    Run(Ch),
    Advance(SignedDuration),
    /// Alert `errors` fires (true) or resolves (false).
    Alert(bool),
    /// Someone approves prod's desired version.
    Approve,
    /// A new version for both channels.
    Push,
    /// Pause (true) or resume (false) an instance.
    Pause(Ch, bool),
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Step(ch) => write!(f, "step {}", ch.name()),
            Action::Finish(ch, outcome) => write!(f, "finish {} {outcome:?}", ch.name()),
            Action::Run(ch) => write!(f, "run {}", ch.name()),
            Action::Advance(by) => write!(f, "advance {}", human(*by)),
            Action::Alert(true) => f.write_str("alert fires"),
            Action::Alert(false) => f.write_str("alert resolves"),
            Action::Approve => f.write_str("approve prod"),
            Action::Push => f.write_str("push a new version"),
            Action::Pause(ch, true) => write!(f, "pause {}", ch.name()),
            Action::Pause(ch, false) => write!(f, "resume {}", ch.name()),
        }
    }
}

/// Exit code and stdout for a job of `kind` at `version` ending with
/// `outcome`, on a runtime where `running` was applied last.
pub(super) fn job_output(
    tier: Tier,
    kind: JobKind,
    version: &str,
    running: Option<&str>,
    outcome: Outcome,
) -> (i32, String) {
    let json = |version: &str, status: &str, drifted: bool| {
        format!(
            r#"{{"objects":[{{"name":"web","objectType":"Deployment","versions":[{{"version":"{version}","active":true,"drifted":{drifted}}}],"status":"{status}"}}]}}"#
        )
    };
    match (kind, tier, outcome) {
        (JobKind::Apply, _, Outcome::Ok | Outcome::Converged) => (0, String::new()),
        (JobKind::Apply, _, Outcome::Retryable) => (75, String::new()),
        (JobKind::Apply, _, _) => (1, String::new()),
        (JobKind::Fetch, Tier::Structured, outcome) => match outcome {
            Outcome::Converged => (0, json(version, "SUCCEEDED", false)),
            Outcome::Ok => match running {
                Some(running) => (0, json(running, "SUCCEEDED", false)),
                None => (0, r#"{"objects":[]}"#.to_owned()),
            },
            Outcome::Fail => (0, json(version, "FAILED", false)),
            Outcome::Retryable => (75, String::new()),
            Outcome::Drift => (0, json(version, "SUCCEEDED", true)),
            Outcome::OtherVersion => (0, json("v0", "SUCCEEDED", false)),
            Outcome::Rolling => (0, json(version, "PENDING", false)),
            Outcome::Error => (0, "deploying... done".to_owned()),
        },
        (JobKind::Fetch, _, outcome) => match outcome {
            Outcome::Converged => (0, String::new()),
            Outcome::Ok if running == Some(version) => (0, String::new()),
            Outcome::Ok => (2, format!("web runs {}", running.unwrap_or("nothing"))),
            Outcome::Drift | Outcome::OtherVersion | Outcome::Rolling => {
                (2, "web differs".to_owned())
            }
            Outcome::Retryable => (75, String::new()),
            Outcome::Fail | Outcome::Error => (3, String::new()),
        },
        (JobKind::Protection | JobKind::GetInfo, _, Outcome::Ok | Outcome::Converged) => {
            (0, String::new())
        }
        (JobKind::Protection | JobKind::GetInfo, _, _) => (1, String::new()),
    }
}
