//! Post-deployment checks, decided: after a version converges, each check
//! runs from its `delay`, at its poll interval, until its `duration` has
//! passed without a failure. From the checks, the progress record, the
//! protection observations and the moment, [`verdict`] says whether the
//! version failed, passed, or is still being checked (which checks to run
//! now, when to look again). Pure, like the gates: `decide()` applies it.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::decide::{after, moment};
use crate::gates::human;
use vergence_model::{
    CompiledProtection, Lifecycle, LifecycleKind, PostDeployment, ProtectionKey,
    ProtectionObservation, Version,
};

/// Where the post-deployment checks of a converged version stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A check failed: the version fails here (and may roll back).
    Failed { reason: String },
    /// Every check passed for its whole duration: the version is good here.
    Passed { notes: Vec<String> },
    /// Checks are still running.
    Running {
        /// Checks due now, in order; one runs at a time.
        run: Vec<ProtectionKey>,
        /// When a check starts or is due next, if not now.
        look_again_at: Option<Timestamp>,
        /// One note per check, for the instance's reason.
        notes: Vec<String>,
    },
}

/// The verdict on `checks` (the version's post-deployment protections) of
/// the version `progress` is for, at `now`. Only observations of that
/// version made since a check's start count for it.
pub(crate) fn verdict(
    checks: &[&CompiledProtection],
    progress: &PostDeployment,
    observations: &BTreeMap<ProtectionKey, ProtectionObservation>,
    now: Timestamp,
) -> Verdict {
    let windows = checks.iter().filter_map(|check| {
        let Lifecycle::PostDeployment { delay, duration } = check.lifecycle else {
            return None;
        };
        let start = after(progress.converged_at, delay);
        Some((*check, start, after(start, duration)))
    });
    combine(windows, &progress.version, observations, now)
}

/// The verdict on a rollout step's bake: every check (the deployment and
/// post-deployment protections) runs from `start`, when the step was
/// reached, until `end`, at its poll interval; the step passes only once
/// `end` is past, checks or none.
pub(crate) fn bake_verdict(
    checks: &[&CompiledProtection],
    version: &Version,
    (start, end): (Timestamp, Timestamp),
    observations: &BTreeMap<ProtectionKey, ProtectionObservation>,
    now: Timestamp,
) -> Verdict {
    let windows = checks.iter().map(|check| (*check, start, end));
    match combine(windows, version, observations, now) {
        Verdict::Passed { notes } if now < end => Verdict::Running {
            run: Vec::new(),
            look_again_at: Some(end),
            notes,
        },
        other => other,
    }
}

/// The verdict on checks, each with the window it runs in.
fn combine<'c>(
    checks: impl Iterator<Item = (&'c CompiledProtection, Timestamp, Timestamp)>,
    version: &Version,
    observations: &BTreeMap<ProtectionKey, ProtectionObservation>,
    now: Timestamp,
) -> Verdict {
    let mut notes = Vec::new();
    let mut run = Vec::new();
    let mut look_again_at: Option<Timestamp> = None;
    let mut all_done = true;
    for (check, start, end) in checks {
        match standing(check, version, (start, end), observations, now) {
            // The first failure decides; nothing else is scheduled beside it.
            Standing::Failed(reason) => return Verdict::Failed { reason },
            Standing::Done(note) => notes.push(note),
            Standing::Next { note, at } => {
                all_done = false;
                notes.push(note);
                if now >= at {
                    run.push(check.key());
                } else {
                    look_again_at = Some(look_again_at.map_or(at, |t| t.min(at)));
                }
            }
        }
    }
    if all_done {
        Verdict::Passed { notes }
    } else {
        Verdict::Running {
            run,
            look_again_at,
            notes,
        }
    }
}

/// Where one check stands, with a note for people.
enum Standing {
    /// It failed: why the version fails.
    Failed(String),
    /// It passed for its whole duration.
    Done(String),
    /// It runs at `at`: now when it has no result yet, at its next poll
    /// (the last one at its end) while it passes, or when it starts.
    Next { note: String, at: Timestamp },
}

/// Where `check` of `version`, run from `start` to `end`, stands at `now`.
fn standing(
    check: &CompiledProtection,
    version: &Version,
    (start, end): (Timestamp, Timestamp),
    observations: &BTreeMap<ProtectionKey, ProtectionObservation>,
    now: Timestamp,
) -> Standing {
    if now < start {
        let note = format!("{} starts at {}", check.name, moment(start));
        return Standing::Next { note, at: start };
    }
    let seen = observations
        .get(&check.key())
        .filter(|o| &o.version == version && o.at >= start);
    match seen {
        // Not read at all is neither a pass nor a failure: look again at
        // the next poll, and do not finish on it.
        Some(o) if o.inconclusive => Standing::Next {
            note: format!("{} cannot be evaluated: {}", check.name, o.summary),
            at: after(o.at, check.poll_interval),
        },
        Some(o) if !o.passed => Standing::Failed(format!(
            "{} check {} of {version} failed: {}",
            match check.lifecycle.kind() {
                LifecycleKind::PreApproval => "pre-approval",
                LifecycleKind::Deployment => "deployment",
                LifecycleKind::PostDeployment => "post-deployment",
            },
            check.name,
            o.summary
        )),
        Some(o) if o.at >= end => Standing::Done(format!("{} passed", check.name)),
        Some(o) => Standing::Next {
            note: format!(
                "{} passing for {} of {}",
                check.name,
                human(o.at.duration_since(start)),
                human(end.duration_since(start))
            ),
            at: after(o.at, check.poll_interval).min(end),
        },
        None => Standing::Next {
            note: format!("{} running", check.name),
            at: now,
        },
    }
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;

    use super::*;
    use crate::tests::{job_spec, n};

    const T0: &str = "2027-01-15T10:00:00Z";

    fn at(offset_secs: i64) -> Timestamp {
        n::<Timestamp>(T0) + SignedDuration::from_secs(offset_secs)
    }

    /// A check from `delay_secs` after converging, for `duration_secs`,
    /// every minute.
    fn check(name: &str, delay_secs: i64, duration_secs: i64) -> CompiledProtection {
        CompiledProtection {
            name: n(name),
            lifecycle: Lifecycle::PostDeployment {
                delay: SignedDuration::from_secs(delay_secs),
                duration: SignedDuration::from_secs(duration_secs),
            },
            check: vergence_model::ProtectionCheck::Job {
                job: std::sync::Arc::new(job_spec(&format!("./{name}"))),
            },
            poll_interval: SignedDuration::from_mins(1),
            attached_to: "release channel prod".into(),
        }
    }

    /// v2 converged at T0.
    fn progress() -> PostDeployment {
        PostDeployment {
            version: n("v2"),
            converged_at: at(0),
            passed_at: None,
        }
    }

    fn seen(
        check: &CompiledProtection,
        version: &str,
        secs: i64,
        passed: bool,
    ) -> (ProtectionKey, ProtectionObservation) {
        let observation = ProtectionObservation {
            at: at(secs),
            version: n(version),
            passed,
            summary: if passed { "passed" } else { "exited with 1" }.into(),
            inconclusive: false,
        };
        (check.key(), observation)
    }

    #[test]
    fn a_check_before_its_delay_is_looked_at_when_it_starts() {
        let smoke = check("smoke", 30, 300);
        let verdict = verdict(&[&smoke], &progress(), &BTreeMap::new(), at(10));
        assert_eq!(
            verdict,
            Verdict::Running {
                run: vec![],
                look_again_at: Some(at(30)),
                notes: vec!["smoke starts at 2027-01-15T10:00:30Z".into()],
            }
        );
    }

    #[test]
    fn a_started_check_without_a_result_runs_now() {
        let smoke = check("smoke", 0, 300);
        // A result for another version, or from before the start, does not count.
        let observations = [seen(&smoke, "v1", 10, true)].into();
        assert_eq!(
            verdict(&[&smoke], &progress(), &observations, at(10)),
            Verdict::Running {
                run: vec![smoke.key()],
                look_again_at: None,
                notes: vec!["smoke running".into()],
            }
        );
    }

    #[test]
    fn a_passing_check_runs_again_at_its_poll_interval_until_its_end() {
        let smoke = check("smoke", 0, 90);
        let observations = [seen(&smoke, "v2", 20, true)].into();
        assert_eq!(
            verdict(&[&smoke], &progress(), &observations, at(30)),
            Verdict::Running {
                run: vec![],
                look_again_at: Some(at(80)),
                notes: vec!["smoke passing for 20s of 1m 30s".into()],
            }
        );
        // The last run is at the end of the duration, not a poll past it.
        let observations = [seen(&smoke, "v2", 60, true)].into();
        let Verdict::Running { look_again_at, .. } =
            verdict(&[&smoke], &progress(), &observations, at(61))
        else {
            panic!("still running");
        };
        assert_eq!(look_again_at, Some(at(90)));
    }

    #[test]
    fn every_check_passing_its_whole_duration_passes() {
        let smoke = check("smoke", 0, 60);
        let soak = check("soak", 30, 60);
        let observations = [seen(&smoke, "v2", 60, true), seen(&soak, "v2", 90, true)].into();
        assert_eq!(
            verdict(&[&smoke, &soak], &progress(), &observations, at(90)),
            Verdict::Passed {
                notes: vec!["smoke passed".into(), "soak passed".into()],
            }
        );
    }

    #[test]
    fn a_failed_check_fails_the_version_and_schedules_nothing_else() {
        let smoke = check("smoke", 0, 600);
        let canary = check("canary", 0, 600);
        // smoke is due again (last pass 2m ago); canary failed.
        let observations = [seen(&smoke, "v2", 0, true), seen(&canary, "v2", 120, false)].into();
        assert_eq!(
            verdict(&[&smoke, &canary], &progress(), &observations, at(120)),
            Verdict::Failed {
                reason: "post-deployment check canary of v2 failed: exited with 1".into(),
            }
        );
    }

    #[test]
    fn checks_due_now_are_listed_in_order_and_the_earliest_later_time_is_kept() {
        let first = check("first", 0, 600);
        let second = check("second", 0, 600);
        let later = check("later", 300, 600);
        let observations = [seen(&second, "v2", 100, true)].into();
        assert_eq!(
            verdict(
                &[&first, &second, &later],
                &progress(),
                &observations,
                at(120)
            ),
            Verdict::Running {
                run: vec![first.key()],
                look_again_at: Some(at(160)),
                notes: vec![
                    "first running".into(),
                    "second passing for 1m 40s of 10m".into(),
                    "later starts at 2027-01-15T10:05:00Z".into(),
                ],
            }
        );
    }

    #[test]
    fn a_check_that_cannot_read_its_source_neither_fails_nor_finishes() {
        let errors = check("errors", 0, 60);
        let (key, mut unread) = seen(&errors, "v2", 60, false);
        unread.inconclusive = true;
        unread.summary = "inconclusive: cannot reach Prometheus at http://prom:9090".into();
        // At the end of its duration, with no conclusive pass: it runs
        // again at its next poll instead of passing or failing.
        assert_eq!(
            verdict(&[&errors], &progress(), &[(key, unread)].into(), at(61)),
            Verdict::Running {
                run: vec![],
                look_again_at: Some(at(120)),
                notes: vec![
                    "errors cannot be evaluated: inconclusive: cannot reach Prometheus at http://prom:9090"
                        .into()
                ],
            }
        );
    }
}
