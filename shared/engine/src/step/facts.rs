//! The facts a step decides on: what the store holds about the instance's
//! upstream channels, approvals and alerts, its job in flight if it has
//! finished (with the plan a Terraform fetch made), and which of its
//! runners cannot take jobs now.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::Engine;
use crate::{Facts, UpstreamView};
use vergence_model::error::Result;
use vergence_model::ports::{Availability, Runner, StateStore};
use vergence_model::terraform::{self, PlanContent};
use vergence_model::{
    InstanceRecord, JobRecord, Precondition, ProtectionCheck, ReleaseChannelName,
};

impl Engine {
    /// The facts of a decision about `record`, whose job in flight is `job`.
    /// `upstream`, when given, is what this step read of the upstream
    /// channels for its decision before: the decision on a job that ended
    /// inline is taken within the same step, and reading them again would
    /// cost a request per channel for a view milliseconds newer.
    pub(super) async fn facts(
        &self,
        record: &InstanceRecord,
        job: Option<JobRecord>,
        now: Timestamp,
        upstream: Option<Upstream>,
    ) -> Result<Facts> {
        let mut facts = load(self.store.as_ref(), record, now, upstream).await?;
        if let (Some(flight), Some(job)) = (&record.state.in_flight, job) {
            facts.finished_job = self.finished_job(job, flight.stop.as_deref(), now).await?;
            if let Some(job) = &facts.finished_job {
                facts.plan = self.terraform_plan(job).await;
            }
        }
        if let Some(spec) = record.desired.compiled() {
            for runner in spec.runners() {
                if let Availability::Unavailable(reason) = self.runners.availability(&runner).await
                {
                    facts.unavailable_runners.push((runner, reason));
                }
            }
        }
        Ok(facts)
    }

    /// The changes of the plan a finished Terraform fetch made, read from
    /// the `plan.json` it kept (the plan file itself is binary); `None` for
    /// any other job.
    async fn terraform_plan(
        &self,
        job: &JobRecord,
    ) -> Option<std::result::Result<PlanContent, String>> {
        let result = job.result().filter(|r| r.exited_with(2))?;
        let json = result
            .outputs
            .iter()
            .find(|a| a.name == terraform::PLAN_JSON)?;
        let artifacts = self.artifacts.as_ref()?;
        Some(match artifacts.get(&json.key).await {
            Ok(Some(content)) => terraform::plan_content(&content),
            Ok(None) => Err(format!("its {} is gone from the artifact store", json.name)),
            Err(e) => Err(format!("its {} could not be read: {e}", json.name)),
        })
    }
}

/// The facts a decision about `record` depends on, from the store: the
/// upstream channels, approvals and alerts it refers to (not its finished job).
pub async fn load_facts(
    store: &dyn StateStore,
    record: &InstanceRecord,
    now: Timestamp,
) -> Result<Facts> {
    load(store, record, now, None).await
}

/// What a step read of an instance's upstream channels.
pub(super) type Upstream = BTreeMap<ReleaseChannelName, UpstreamView>;

/// [`load_facts`], with the upstream channels as read before if given.
async fn load(
    store: &dyn StateStore,
    record: &InstanceRecord,
    now: Timestamp,
    upstream: Option<Upstream>,
) -> Result<Facts> {
    let mut facts = Facts::at(now);
    let Some(spec) = record.desired.compiled() else {
        return Ok(facts);
    };
    match upstream {
        Some(upstream) => facts.upstream = upstream,
        None => {
            for channel in Precondition::upstream_channels(&spec.preconditions) {
                let key = record.key.in_channel(channel);
                if let Some(upstream) = store.get_instance(&key).await? {
                    facts
                        .upstream
                        .insert(channel.clone(), UpstreamView::of(&upstream));
                }
            }
        }
    }
    let needs_approvals = spec.require_approval_before_apply
        || spec
            .preconditions
            .iter()
            .any(|p| matches!(p, Precondition::ManualApproval { .. }))
        || crate::gates::takeovers(spec, &record.state).is_some();
    if needs_approvals {
        facts.approvals = store.list_approvals(&record.key).await?;
    }
    for protection in &spec.protections {
        if let ProtectionCheck::Alert { alert } = &protection.check
            && !facts.alerts.contains_key(alert)
            && let Some(state) = store.get_alert(alert).await?
        {
            facts.alerts.insert(alert.clone(), state);
        }
    }
    Ok(facts)
}
