//! `explain`: the chain of reasons a service instance is where it is, as
//! lines for people (the CLI prints them as they are). Each part of the
//! explanation is its own function over the stored record, so what a line
//! says can be read next to where it comes from.

use vergence_model::error::Result;
use vergence_model::{
    CompiledInstance, InstanceKey, InstanceRecord, InstanceState, LifecycleKind, Version,
};

use super::Control;
use crate::{Facts, Gate, gates, load_facts, moment};

impl Control {
    /// The chain of reasons an instance is where it is: status, versions,
    /// operator controls, every gate in order, post-deployment checks, the
    /// last job of each kind and when the engine looks next.
    pub async fn explain(&self, key: &InstanceKey) -> Result<Vec<String>> {
        let record = self.instance(key).await?;
        let now = self.clock.now();
        let mut lines = header(key, &record);
        lines.extend(controls(&record));
        if let Some(desired) = record.desired.compiled() {
            let facts = load_facts(self.store.as_ref(), &record, now).await?;
            // The gates of what runs now: during a rollback, its own.
            let spec = crate::decide::effective(desired, &record.state, &record.controls);
            lines.extend(gates(&spec, &facts, &record));
            lines.extend(rollout(desired, &record.state, now));
            lines.extend(post_deployment(desired, &record.state));
        }
        lines.extend(plan(&record.state));
        lines.extend(info(&record.state));
        lines.extend(last_jobs(&record.state));
        lines.extend(running_job(&record.state));
        lines.push(next_check(&record, now));
        Ok(lines)
    }
}

/// Status and since when, the reason, and the desired and current versions.
fn header(key: &InstanceKey, record: &InstanceRecord) -> Vec<String> {
    let state = &record.state;
    vec![
        format!(
            "{key}: {}{}",
            state.status,
            state
                .since
                .map(|s| format!(" since {}", moment(s)))
                .unwrap_or_default()
        ),
        format!("  reason: {}", state.reason),
        format!(
            "  desired: {}   current: {}",
            record.desired.version().map_or("-", Version::as_str),
            state.current_version.as_ref().map_or("-", Version::as_str)
        ),
    ]
}

/// The configured rollout, and where the desired version is in it.
fn rollout(desired: &CompiledInstance, state: &InstanceState, now: jiff::Timestamp) -> Vec<String> {
    let Some(rollout) = &desired.rollout else {
        return Vec::new();
    };
    let mut lines = vec![format!("  rollout: {}", rollout.describe())];
    let target = state
        .target
        .as_ref()
        .filter(|t| t.version == desired.version);
    let Some(progress) = target.and_then(|t| t.rollout.as_ref()) else {
        return lines;
    };
    let percent = rollout.percent(progress.step);
    let step = format!("step {} of {}", progress.step + 1, rollout.steps.len());
    lines.push(match (progress.traffic_back_at, progress.reached_at) {
        (Some(at), _) => format!(
            "    {} failed at {percent}%; the traffic was sent back at {}",
            desired.version,
            moment(at)
        ),
        (None, Some(at)) => format!(
            "    {} at {percent}% ({step}) since {}: held {} of {}",
            desired.version,
            moment(at),
            gates::human(now.duration_since(at)),
            gates::human(rollout.bake)
        ),
        (None, None) => format!("    {} going to {percent}% ({step})", desired.version),
    });
    lines
}

/// What operators did to the instance (pause, pin) and a rollback under way.
fn controls(record: &InstanceRecord) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(p) = &record.controls.paused {
        lines.push(format!("  paused by {} at {}", p.actor, moment(p.at)));
    }
    if let Some(p) = &record.controls.pinned {
        lines.push(format!(
            "  pinned to {} by {} at {}",
            p.version,
            p.actor,
            moment(p.at)
        ));
    }
    if let Some(o) = &record.controls.window_override {
        lines.push(format!(
            "  freezes and windows overridden for {} by {} at {} until {} (or until it converges): {}",
            o.version,
            o.actor,
            moment(o.at),
            moment(o.expires_at),
            o.reason
        ));
    }
    if let Some(r) = &record.state.rollback {
        lines.push(format!(
            "  rollback: {} → {} since {} ({})",
            r.failed_version,
            r.to.version,
            moment(r.started_at),
            r.reason
        ));
        lines.push(format!("  held: {}", crate::rollback::held(r)));
    }
    lines
}

/// Every gate an apply passes, in the order the engine evaluates them.
fn gates(spec: &CompiledInstance, facts: &Facts, record: &InstanceRecord) -> Vec<String> {
    let mut lines = vec!["  gates, in order:".to_owned()];
    for (name, gate) in gates::all(spec, facts, &record.state, &record.controls) {
        lines.push(match gate {
            Gate::Open => format!("    ✓ {name}"),
            Gate::Closed { reason, .. } | Gate::Fail { reason } => {
                format!("    ✗ {name}: {reason}")
            }
            Gate::Check { .. } => {
                format!("    ? {name}: no recent result; runs before the next apply")
            }
        });
    }
    lines
}

/// The latest result of each post-deployment check, and whether the checks
/// of the converged version have passed.
fn post_deployment(spec: &CompiledInstance, state: &InstanceState) -> Vec<String> {
    let mut lines = Vec::new();
    for check in spec.protections_at(LifecycleKind::PostDeployment) {
        let seen = state.protections.get(&check.key());
        lines.push(format!(
            "    post-deployment {}: {}",
            check.name,
            seen.map(|o| format!(
                "{} at {} for {}",
                if o.passed { "passed" } else { "failed" },
                moment(o.at),
                o.version
            ))
            .unwrap_or_else(|| "not run yet".to_owned())
        ));
    }
    if let Some(p) = &state.post_deployment {
        lines.push(format!(
            "    post-deployment checks of {}: {}",
            p.version,
            p.passed_at
                .map(|t| format!("passed at {}", moment(t)))
                .unwrap_or_else(|| "running".to_owned())
        ));
    }
    lines
}

/// The plan an apply would use and what an approval binds to.
fn plan(state: &InstanceState) -> Option<String> {
    state.plan.as_ref().map(|plan| {
        let what = plan.summary().unwrap_or_else(|| plan.files().join(", "));
        format!(
            "  plan {} for {} (from the fetch at {}): {what}",
            plan.short(),
            plan.version,
            moment(plan.at)
        )
    })
}

/// What getInfo last reported: its failure, its structured outputs, or
/// what it printed, quoted line by line (`| `) as job output is.
fn info(state: &InstanceState) -> Vec<String> {
    if state.info.is_empty() && state.info_text.is_none() && state.info_failure.is_none() {
        return Vec::new();
    }
    let at = state
        .info_at
        .map(|at| format!(" (getInfo at {})", moment(at)))
        .unwrap_or_default();
    let mut lines = vec![format!("  info{at}:")];
    if let Some(failure) = &state.info_failure {
        lines.push(format!("    {failure}"));
    }
    for output in &state.info {
        lines.push(format!("    {}: {}", output.name, output.text));
    }
    if let Some(text) = &state.info_text {
        lines.extend(text.lines().map(|line| format!("    | {line}")));
    }
    lines
}

/// The last job of each kind, with the end of its stderr.
fn last_jobs(state: &InstanceState) -> Vec<String> {
    if state.last_jobs.is_empty() {
        return Vec::new();
    }
    let mut lines = vec!["  last jobs:".to_owned()];
    for job in &state.last_jobs {
        lines.push(format!(
            "    {} of {} (attempt {}): {}{} at {}, took {}ms",
            job.kind,
            job.version,
            job.attempt,
            job.outcome,
            job.exit_code.map(|c| format!(" {c}")).unwrap_or_default(),
            moment(job.finished_at),
            job.duration_ms
        ));
        let tail: Vec<&str> = job.stderr_tail.trim_end().lines().collect();
        for line in &tail[tail.len().saturating_sub(5)..] {
            lines.push(format!("      | {line}"));
        }
    }
    lines
}

/// The job running now, if any.
fn running_job(state: &InstanceState) -> Option<String> {
    state.in_flight.as_ref().map(|flight| {
        format!(
            "  running: {} of {} since {}",
            flight.kind,
            flight.version,
            moment(flight.dispatched_at)
        )
    })
}

/// How late a check may be before nothing is taken to be running the
/// engine: a running `up --watch` or `serve` looks for due instances every
/// 2 s, and a busy one takes a few more to get to each.
const OVERDUE_AFTER: jiff::SignedDuration = jiff::SignedDuration::from_secs(10);

/// When the engine looks at the instance again by itself; a check long
/// past means no engine runs on this state.
fn next_check(record: &InstanceRecord, now: jiff::Timestamp) -> String {
    let Some(at) = record.next_check_at else {
        return "  next check: none (waits for a change)".to_owned();
    };
    let late = now.duration_since(at);
    if late <= OVERDUE_AFTER {
        return format!("  next check: {}", moment(at));
    }
    format!(
        "  next check: {}, overdue by {}: nothing is running the engine on this state",
        moment(at),
        crate::human(late)
    )
}
