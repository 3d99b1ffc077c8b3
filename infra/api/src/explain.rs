//! The lines of `vergence explain`, as the instance route and the CLI's
//! local state both give them: the engine's chain of reasons, then, for an
//! instance whose jobs go through an agent, when that agent last called.

use jiff::Timestamp;
use vergence_engine::control::Control;
use vergence_model::ports::StateStore;
use vergence_model::{Desired, InstanceKey, RunnerSpec};

/// The explanation of one instance, one line each.
pub async fn explain_instance(
    control: &Control,
    store: &dyn StateStore,
    now: Timestamp,
    key: &InstanceKey,
) -> Result<Vec<String>, vergence_model::Error> {
    let mut lines = control.explain(key).await?;
    if let Some(line) = agent_line(store, now, key).await? {
        lines.push(line);
    }
    Ok(lines)
}

/// For an instance whose jobs go through an agent: when it last called.
async fn agent_line(
    store: &dyn StateStore,
    now: Timestamp,
    key: &InstanceKey,
) -> Result<Option<String>, vergence_model::Error> {
    let Some(record) = store.get_instance(key).await? else {
        return Ok(None);
    };
    let Desired::Ready(compiled) = &record.desired else {
        return Ok(None);
    };
    let RunnerSpec::Kubernetes(spec) = &compiled.apply.job.runner else {
        return Ok(None);
    };
    let Ok(name) = spec.agent.parse() else {
        return Ok(None);
    };
    Ok(Some(match store.get_agent(&name).await? {
        Some(agent) => format!(
            "agent {name}: {}, {} (vergence-agent {})",
            if agent.is_alive(now) {
                "connected"
            } else {
                "silent"
            },
            agent.last_contact(now),
            agent.version
        ),
        None => format!("agent {name}: has never connected"),
    }))
}
