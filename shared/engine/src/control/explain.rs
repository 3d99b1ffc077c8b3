//! `explain`: the chain of reasons a service instance is where it is, as
//! lines for people (the CLI prints them as they are).

use vergence_model::error::Result;
use vergence_model::{InstanceKey, Version};

use super::Control;

impl Control {
    /// The chain of reasons an instance is where it is: status, versions,
    /// operator controls, every gate in order, post-deployment checks, the
    /// last job of each kind and when the engine looks next.
    pub async fn explain(&self, key: &InstanceKey) -> Result<Vec<String>> {
        use crate::{Gate, gates, load_facts, moment};
        let record = self.instance(key).await?;
        let state = &record.state;
        let now = self.clock.now();
        let mut lines = vec![format!(
            "{key}: {}{}",
            state.status,
            state
                .since
                .map(|s| format!(" since {}", moment(s)))
                .unwrap_or_default()
        )];
        lines.push(format!("  reason: {}", state.reason));
        lines.push(format!(
            "  desired: {}   current: {}",
            record.desired.version().map_or("-", Version::as_str),
            state.current_version.as_ref().map_or("-", Version::as_str)
        ));
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
        if let Some(r) = &state.rollback {
            lines.push(format!(
                "  rollback: {} → {} since {} ({})",
                r.failed_version,
                r.to.version,
                moment(r.started_at),
                r.reason
            ));
        }
        if let Some(spec) = record.desired.compiled() {
            let facts = load_facts(self.store.as_ref(), &record, now).await?;
            lines.push("  gates, in order:".to_owned());
            for (name, gate) in gates::all(spec, &facts, state, &record.controls) {
                let line = match gate {
                    Gate::Open => format!("    ✓ {name}"),
                    Gate::Closed { reason, .. } => format!("    ✗ {name}: {reason}"),
                    Gate::Fail { reason } => format!("    ✗ {name}: {reason}"),
                    Gate::Check { .. } => {
                        format!("    ? {name}: no recent result; runs before the next apply")
                    }
                };
                lines.push(line);
            }
            for check in spec.protections_at(vergence_model::LifecycleKind::PostDeployment) {
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
        }
        if !state.last_jobs.is_empty() {
            lines.push("  last jobs:".to_owned());
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
        }
        if let Some(flight) = &state.in_flight {
            lines.push(format!(
                "  running: {} of {} since {}",
                flight.kind,
                flight.version,
                moment(flight.dispatched_at)
            ));
        }
        lines.push(format!(
            "  next check: {}",
            record
                .next_check_at
                .map(moment)
                .unwrap_or_else(|| "none (waits for a change)".to_owned())
        ));
        Ok(lines)
    }
}
