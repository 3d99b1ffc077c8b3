//! A rollout within a release channel: a new version takes a growing share
//! of the traffic in steps, each held for a bake time while the channel's
//! protections are checked, before the next. Only runtimes that can split
//! traffic between two versions carry one (Cloud Run's revisions); the
//! compiler refuses it elsewhere.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::text::human;

/// `rollout: {steps: [10, 50, 100], bake: 5m}`, as compiled.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// Percentages of the traffic, increasing, each 1-100, the last 100.
    pub steps: Vec<u8>,
    /// How long each step short of 100% is held, its checks passing,
    /// before the next.
    pub bake: SignedDuration,
}

impl Rollout {
    /// The share of the traffic step `step` gives the new version (the
    /// last step's for a step past the end).
    pub fn percent(&self, step: usize) -> u8 {
        self.steps
            .get(step)
            .or(self.steps.last())
            .copied()
            .unwrap_or(100)
    }

    /// Whether `step` is the last one (all the traffic).
    pub fn is_last(&self, step: usize) -> bool {
        step + 1 >= self.steps.len()
    }

    /// `10% → 50% → 100%, 5m bake`, for people.
    pub fn describe(&self) -> String {
        let steps: Vec<String> = self.steps.iter().map(|p| format!("{p}%")).collect();
        format!("{}, each held {}", steps.join(" → "), human(self.bake))
    }
}

/// Where a version's rollout stands on an instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutProgress {
    /// The index of the step being applied or held.
    pub step: usize,
    /// When the runtime was first seen giving the version this step's
    /// share: its bake runs from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_at: Option<Timestamp>,
    /// When a failed check sent the traffic back to the version before
    /// (the apply that does it was started then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_back_at: Option<Timestamp>,
}

impl RolloutProgress {
    pub fn start() -> Self {
        Self {
            step: 0,
            reached_at: None,
            traffic_back_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_read_and_described_as_written() {
        let rollout = Rollout {
            steps: vec![10, 50, 100],
            bake: SignedDuration::from_secs(330),
        };
        assert_eq!(rollout.percent(0), 10);
        assert_eq!(rollout.percent(2), 100);
        assert_eq!(rollout.percent(7), 100);
        assert!(!rollout.is_last(1));
        assert!(rollout.is_last(2));
        assert_eq!(rollout.describe(), "10% → 50% → 100%, each held 5m 30s");
    }
}
