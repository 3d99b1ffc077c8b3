//! What Vergence reads from Terraform: a plan's changes, reduced to a
//! digest that is the same for every plan of the same changes (the plan
//! file's bytes differ at every `terraform plan`, so an approval bound to
//! them would never survive a re-plan) and a summary people can read; and
//! which failures say "try again" rather than "this version is broken".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hashing::sha256_hex;

/// The plan file a Terraform fetch writes and its apply is handed.
pub const PLAN_FILE: &str = "tfplan";
/// `terraform show -json` of that plan: what the digest and summary are
/// made from.
pub const PLAN_JSON: &str = "plan.json";

/// Most resource addresses a summary lists.
const LISTED_CHANGES: usize = 20;

/// A plan's changes: what an approval binds to, and what people read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanContent {
    /// Hex SHA-256 over the changes only (address, actions, before, after,
    /// unknowns; outputs likewise), in a canonical encoding.
    pub digest: String,
    /// `+1 ~2 -0`, as Terraform counts them (a replacement adds and destroys).
    pub counts: String,
    /// One line per changed resource: `+ terraform_data.app`,
    /// `~ aws_s3_bucket.logs`, `-/+ terraform_data.seed`; at most
    /// [`LISTED_CHANGES`], then `… and N more`.
    pub changes: Vec<String>,
}

impl PlanContent {
    /// `+1 ~0 -0: + terraform_data.app`.
    pub fn summary(&self) -> String {
        if self.changes.is_empty() {
            return self.counts.clone();
        }
        format!("{}: {}", self.counts, self.changes.join(", "))
    }
}

#[derive(Deserialize)]
struct PlanJson {
    #[serde(default)]
    resource_changes: Vec<ResourceChange>,
    #[serde(default)]
    output_changes: BTreeMap<String, Change>,
}

#[derive(Deserialize)]
struct ResourceChange {
    address: String,
    change: Change,
}

#[derive(Deserialize)]
struct Change {
    actions: Vec<String>,
    #[serde(default)]
    before: Value,
    #[serde(default)]
    after: Value,
    #[serde(default)]
    after_unknown: Value,
}

impl Change {
    fn is_noop(&self) -> bool {
        self.actions.iter().all(|a| a == "no-op")
    }

    /// The symbol Terraform's own plan output uses.
    fn symbol(&self) -> &'static str {
        let has = |a: &str| self.actions.iter().any(|x| x == a);
        match (has("create"), has("delete"), has("update"), has("read")) {
            (true, true, _, _) if self.actions[0] == "delete" => "-/+",
            (true, true, _, _) => "+/-",
            (true, false, _, _) => "+",
            (false, true, _, _) => "-",
            (_, _, true, _) => "~",
            (_, _, _, true) => "<=",
            _ => "?",
        }
    }
}

/// Reads `terraform show -json PLAN`. Only what would change counts:
/// timestamps, Terraform's version, prior state and the configuration are
/// left out, so two plans of the same changes have the same digest.
pub fn plan_content(json: &[u8]) -> Result<PlanContent, String> {
    let plan: PlanJson = serde_json::from_slice(json)
        .map_err(|e| format!("the plan's JSON (terraform show -json) is not readable: {e}"))?;
    let (mut add, mut change, mut destroy) = (0usize, 0usize, 0usize);
    let mut lines = Vec::new();
    let mut canonical = Vec::new();
    for rc in plan
        .resource_changes
        .iter()
        .filter(|rc| !rc.change.is_noop())
    {
        let c = &rc.change;
        let has = |a: &str| c.actions.iter().any(|x| x == a);
        add += usize::from(has("create"));
        destroy += usize::from(has("delete"));
        change += usize::from(has("update"));
        lines.push(format!("{} {}", c.symbol(), rc.address));
        canonical.push(canonical_change("resource", &rc.address, c));
    }
    let mut outputs = Vec::new();
    for (name, c) in plan.output_changes.iter().filter(|(_, c)| !c.is_noop()) {
        outputs.push(name.as_str());
        canonical.push(canonical_change("output", name, c));
    }
    // serde_json's maps are ordered (no preserve_order), so this encoding
    // of the same values is always the same bytes.
    let encoded = serde_json::to_vec(&canonical).map_err(|e| e.to_string())?;
    let mut changes: Vec<String> = lines.iter().take(LISTED_CHANGES).cloned().collect();
    if lines.len() > LISTED_CHANGES {
        changes.push(format!("… and {} more", lines.len() - LISTED_CHANGES));
    }
    if lines.is_empty() && !outputs.is_empty() {
        changes.push(format!("outputs only: {}", outputs.join(", ")));
    }
    Ok(PlanContent {
        digest: sha256_hex(&encoded),
        counts: format!("+{add} ~{change} -{destroy}"),
        changes,
    })
}

fn canonical_change(kind: &str, address: &str, c: &Change) -> Value {
    serde_json::json!([kind, address, c.actions, c.before, c.after, c.after_unknown])
}

/// What a failed Terraform run means for what comes next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The saved plan no longer matches the state: plan again.
    StalePlan,
    /// Nothing is wrong with the change: a lock held by someone else, a
    /// throttled or unreachable backend. Try again later; it is not a
    /// failed attempt. Carries what Terraform said.
    Transient(&'static str),
    /// Anything else: a failed attempt.
    Other,
}

/// Terraform's messages for failures that pass by themselves.
const TRANSIENT: [(&str, &str); 8] = [
    (
        "Error acquiring the state lock",
        "the state is locked by another Terraform run",
    ),
    (
        "Error locking state",
        "the state is locked by another Terraform run",
    ),
    (
        "ConditionalCheckFailedException",
        "the state lock table refused the lock",
    ),
    ("ThrottlingException", "the backend throttled the request"),
    ("RequestLimitExceeded", "the backend throttled the request"),
    (
        "TLS handshake timeout",
        "the backend did not answer in time",
    ),
    (
        "connection reset by peer",
        "the connection to the backend was reset",
    ),
    ("i/o timeout", "the backend did not answer in time"),
];

/// Classifies a failed run by its stderr.
pub fn classify(stderr: &str) -> Failure {
    if stderr.contains("Saved plan is stale") {
        return Failure::StalePlan;
    }
    TRANSIENT
        .iter()
        .find(|(needle, _)| stderr.contains(needle))
        .map_or(Failure::Other, |(_, why)| Failure::Transient(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(input: &str, timestamp: &str, before: &str) -> String {
        format!(
            r#"{{"format_version":"1.2","terraform_version":"1.11.4","timestamp":"{timestamp}",
            "resource_changes":[
              {{"address":"terraform_data.app","change":{{"actions":["update"],"before":{{"input":"{before}"}},"after":{{"input":"{input}"}},"after_unknown":{{"output":true}}}}}},
              {{"address":"terraform_data.same","change":{{"actions":["no-op"],"before":{{}},"after":{{}}}}}},
              {{"address":"terraform_data.seed","change":{{"actions":["delete","create"],"before":{{}},"after":{{"input":"x"}}}}}}
            ],
            "output_changes":{{"image":{{"actions":["update"],"before":"{before}","after_unknown":true}}}},
            "prior_state":{{"serial":{}}}}}"#,
            timestamp.len()
        )
    }

    #[test]
    fn the_digest_depends_on_the_changes_not_on_when_or_how_the_plan_was_made() {
        let first = plan_content(plan("v2", "2026-11-23T10:00:00Z", "v1").as_bytes()).unwrap();
        let again = plan_content(plan("v2", "2026-11-23T10:05:00.123Z", "v1").as_bytes()).unwrap();
        assert_eq!(first.digest, again.digest);
        let other_after =
            plan_content(plan("v3", "2026-11-23T10:00:00Z", "v1").as_bytes()).unwrap();
        assert_ne!(first.digest, other_after.digest);
        // The same target from another starting point is another change.
        let other_before =
            plan_content(plan("v2", "2026-11-23T10:00:00Z", "hand").as_bytes()).unwrap();
        assert_ne!(first.digest, other_before.digest);
    }

    #[test]
    fn the_summary_counts_like_terraform_and_lists_addresses() {
        let content = plan_content(plan("v2", "t", "v1").as_bytes()).unwrap();
        assert_eq!(content.counts, "+1 ~1 -1");
        assert_eq!(
            content.summary(),
            "+1 ~1 -1: ~ terraform_data.app, -/+ terraform_data.seed"
        );
        let outputs_only = r#"{"resource_changes":[],"output_changes":{"url":{"actions":["create"],"after":"x"}}}"#;
        assert_eq!(
            plan_content(outputs_only.as_bytes()).unwrap().summary(),
            "+0 ~0 -0: outputs only: url"
        );
        let err = plan_content(b"\x00\x01binary").unwrap_err();
        assert!(err.starts_with("the plan's JSON"), "{err}");
    }

    #[test]
    fn stale_plans_and_locks_are_told_apart_from_failures() {
        assert_eq!(
            classify(
                "\nError: Saved plan is stale\n\nThe given plan file can no longer be applied"
            ),
            Failure::StalePlan
        );
        assert_eq!(
            classify("│ Error: Error acquiring the state lock\n│ Lock Info:"),
            Failure::Transient("the state is locked by another Terraform run")
        );
        assert_eq!(classify("Error: Invalid reference"), Failure::Other);
    }
}
