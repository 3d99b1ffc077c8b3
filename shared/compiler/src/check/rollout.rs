//! Checks `rollout`, on a release channel or a runtime: the shares of the
//! traffic a new version goes through and how long each is held. Traffic
//! can only be split where two versions serve side by side and the share
//! of each can be set: Cloud Run's revisions. Everywhere else a rollout is
//! an error that says what that kind of runtime does instead, so nobody
//! believes a channel is rolled out in steps when it is not.

use jiff::SignedDuration;

use super::Checker;
use super::field_path::FieldPath;
use crate::config::schema::{ReleaseChannelDoc, RolloutDoc, RolloutStepDoc, RuntimeDoc};
use vergence_model::{Rollout, RuntimeName, Source};

/// Long enough for a metric protection to see a step's errors.
const DEFAULT_BAKE: SignedDuration = SignedDuration::from_mins(5);

/// The kind of a runtime, as [`Checker::runtime`] takes it: by its first
/// first-class block, else custom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RuntimeKind {
    Custom,
    CloudRun,
    Ecs,
    Kubernetes,
    Terraform,
}

impl RuntimeKind {
    pub(super) fn of(doc: &RuntimeDoc) -> Self {
        // The order `Checker::runtime` looks at the blocks in; a runtime
        // with several is an error of its own.
        if doc.kubernetes.is_some() {
            RuntimeKind::Kubernetes
        } else if doc.terraform.is_some() {
            RuntimeKind::Terraform
        } else if doc.ecs.is_some() {
            RuntimeKind::Ecs
        } else if doc.cloud_run.is_some() {
            RuntimeKind::CloudRun
        } else {
            RuntimeKind::Custom
        }
    }

    /// "an ecs runtime", for messages.
    fn described(self) -> &'static str {
        match self {
            RuntimeKind::Custom => "a custom runtime",
            RuntimeKind::CloudRun => "a cloudRun runtime",
            RuntimeKind::Ecs => "an ecs runtime",
            RuntimeKind::Kubernetes => "a kubernetes runtime",
            RuntimeKind::Terraform => "a terraform runtime",
        }
    }

    /// What a runtime of this kind offers instead of Vergence's steps.
    fn instead(self) -> &'static str {
        match self {
            RuntimeKind::Ecs => {
                "ECS shifts traffic itself: set `deploymentConfiguration.strategy` (CANARY, LINEAR or BLUE_GREEN, with its bake time) in the service's ECS service file, and Vergence reads the deployment back as ECS runs it"
            }
            RuntimeKind::Kubernetes => {
                "Kubernetes rolls a Deployment out itself: set `spec.strategy.rollingUpdate` (maxSurge, maxUnavailable) in the Deployment's manifest, and Vergence reads the rollout back as it goes"
            }
            RuntimeKind::Terraform => {
                "Terraform applies a plan, with no traffic to split: guard the release channel with deployment and postDeployment protections instead"
            }
            RuntimeKind::Custom => {
                "Your own commands deploy it, with no traffic Vergence can split: guard the release channel with deployment and postDeployment protections instead"
            }
            // Never asked: a cloudRun runtime takes a rollout.
            RuntimeKind::CloudRun => "",
        }
    }
}

impl Checker<'_> {
    /// Refuses `rollout` on a runtime that cannot split traffic; a
    /// cloudRun runtime's is checked with the runtime.
    pub(super) fn refuse_runtime_rollout(&mut self, source: &Source, doc: &RuntimeDoc) {
        let kind = RuntimeKind::of(doc);
        if doc.rollout.is_none() || kind == RuntimeKind::CloudRun {
            return;
        }
        self.err(
            source,
            &FieldPath::root("runtime").key("rollout"),
            format!(
                "{} cannot take a rollout (only cloudRun splits traffic between revisions); remove it. {}",
                kind.described(),
                kind.instead()
            ),
        );
    }

    /// A release channel's `rollout` (at `path.rollout`): every runtime
    /// the channel lists must be a cloudRun one. `None` when there is
    /// none or it is wrong (reported).
    pub(super) fn channel_rollout(
        &mut self,
        source: &Source,
        path: &FieldPath,
        channel: &ReleaseChannelDoc,
        runtimes: &[RuntimeName],
    ) -> Option<Rollout> {
        let doc = channel.rollout.as_ref()?;
        let path = path.key("rollout");
        for name in runtimes {
            let Some(kind) = self.runtime_kinds.get(name).copied() else {
                continue;
            };
            if kind != RuntimeKind::CloudRun {
                self.err(
                    source,
                    &path,
                    format!(
                        "runtime '{name}' of release channel '{}' is {}, which cannot take a rollout (only cloudRun splits traffic between revisions); remove `rollout` here, or give it to the cloudRun runtimes themselves. {}",
                        channel.name,
                        kind.described(),
                        kind.instead()
                    ),
                );
            }
        }
        self.rollout(source, &path, doc)
    }

    /// The rollout written at `path`; `None` when anything in it is wrong,
    /// all of it reported.
    pub(super) fn rollout(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &RolloutDoc,
    ) -> Option<Rollout> {
        let before = self.errors.len();
        let steps = self.rollout_steps(source, &path.key("steps"), &doc.steps);
        let bake = match &doc.bake {
            None => DEFAULT_BAKE,
            Some(raw) => parse_bake(&raw.0).unwrap_or_else(|e| {
                self.err(source, &path.key("bake"), e);
                DEFAULT_BAKE
            }),
        };
        (self.errors.len() == before).then_some(Rollout { steps, bake })
    }

    /// The steps as percentages: at least one, each 1 to 100, each above
    /// the one before, the last 100 (the new version ends with all the
    /// traffic, or it would never be the one that serves).
    fn rollout_steps(
        &mut self,
        source: &Source,
        path: &FieldPath,
        docs: &[RolloutStepDoc],
    ) -> Vec<u8> {
        if docs.is_empty() {
            self.err(
                source,
                path,
                "a rollout needs steps: the new version's share of the traffic at each, in percent, ending at 100, e.g. `steps: [10, 50, 100]`",
            );
            return Vec::new();
        }
        let before = self.errors.len();
        let mut steps: Vec<u8> = Vec::new();
        for (i, RolloutStepDoc(raw)) in docs.iter().enumerate() {
            let percent = raw.trim().parse::<u8>().ok();
            let Some(percent) = percent.filter(|p| (1..=100).contains(p)) else {
                self.err(
                    source,
                    &path.index(i),
                    format!(
                        "step {raw:?} is not a whole percentage from 1 to 100: write the new version's share of the traffic, like 10 or 50"
                    ),
                );
                continue;
            };
            if let Some(&last) = steps.last()
                && percent <= last
            {
                self.err(
                    source,
                    &path.index(i),
                    format!(
                        "step {percent} is not above the step before it ({last}): each step gives the new version more of the traffic, e.g. `steps: [10, 50, 100]`"
                    ),
                );
                continue;
            }
            steps.push(percent);
        }
        if self.errors.len() == before
            && let Some(&last) = steps.last()
            && last != 100
        {
            let written: Vec<String> = steps.iter().map(u8::to_string).collect();
            self.err(
                source,
                &path.index(docs.len() - 1),
                format!(
                    "the last step is {last}, not 100: a rollout ends with the new version taking all the traffic; add it: `steps: [{}, 100]`",
                    written.join(", ")
                ),
            );
        }
        steps
    }
}

/// A bake time: a duration, zero included (a step moves on as soon as
/// its checks pass).
fn parse_bake(raw: &str) -> Result<SignedDuration, String> {
    let bake: SignedDuration = raw.trim().parse().map_err(|_| {
        format!(
            "bake {raw:?} is not a duration: write a number and a unit, like 5m or 30s (0s moves on as soon as the checks pass)"
        )
    })?;
    if bake.is_negative() {
        return Err(format!(
            "bake {raw:?} is negative: write how long each step is held, like 5m, or 0s"
        ));
    }
    Ok(bake)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bake_may_be_zero_but_not_negative_or_unitless() {
        assert_eq!(parse_bake("0s"), Ok(SignedDuration::ZERO));
        assert_eq!(parse_bake("1h30m"), Ok(SignedDuration::from_mins(90)));
        assert!(parse_bake("-5m").unwrap_err().contains("is negative"));
        assert!(parse_bake("5").unwrap_err().contains("is not a duration"));
        assert!(
            parse_bake("soon")
                .unwrap_err()
                .contains("is not a duration")
        );
    }
}
