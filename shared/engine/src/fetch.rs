//! What a fetch job's result says: the exit-code tier (0 = converged,
//! 2 = drift, anything else = error) and the structured tier (JSON objects
//! with versions and statuses).

use serde::Deserialize;

use vergence_model::terraform::{PLAN_JSON, PlanContent};
use vergence_model::{FetchMode, FetchVerdict, JobResult, Version, last_line};

/// Interprets a finished fetch for the desired `version`.
pub fn interpret(mode: FetchMode, result: &JobResult, version: &Version) -> (FetchVerdict, String) {
    match mode {
        FetchMode::ExitCode => exit_code(result),
        FetchMode::Structured => {
            if !result.exited_with(0) {
                return (FetchVerdict::Error, format!("fetch {}", result.describe()));
            }
            structured(&result.stdout, version.as_str())
        }
        FetchMode::TerraformPlan => terraform_plan(result, None),
    }
}

/// Interprets Vergence's Terraform fetch: `plan -detailed-exitcode`, whose
/// plan's changes the step read from its `plan.json` (`plan`).
pub fn terraform_plan(
    result: &JobResult,
    plan: Option<&Result<PlanContent, String>>,
) -> (FetchVerdict, String) {
    if result.exited_with(0) {
        return (
            FetchVerdict::Converged,
            "terraform plan: no changes".to_owned(),
        );
    }
    if !result.exited_with(2) {
        return (
            FetchVerdict::Error,
            format!("terraform plan {}", result.describe()),
        );
    }
    match plan {
        Some(Ok(content)) => (
            FetchVerdict::NeedsApply,
            format!("terraform plan {}", content.summary()),
        ),
        Some(Err(why)) => (
            FetchVerdict::Error,
            format!("terraform plan has changes, but {why}"),
        ),
        None => (
            FetchVerdict::Error,
            format!(
                "terraform plan has changes, but its {PLAN_JSON} was not kept (job files over 4 MiB are dropped, and a deployment without a job-file store keeps none), so its changes cannot be shown or approved"
            ),
        ),
    }
}

fn exit_code(result: &JobResult) -> (FetchVerdict, String) {
    if result.exited_with(0) {
        (
            FetchVerdict::Converged,
            "fetch exited 0: no changes needed".to_owned(),
        )
    } else if result.exited_with(2) {
        let detail = last_line(&result.stdout)
            .or_else(|| last_line(&result.stderr_tail))
            .map(|l| format!(": {l}"))
            .unwrap_or_default();
        (
            FetchVerdict::NeedsApply,
            format!("fetch exited 2 (changes needed){detail}"),
        )
    } else {
        (FetchVerdict::Error, format!("fetch {}", result.describe()))
    }
}

/// The share of the traffic `version` has by a structured fetch's
/// `trafficPercent`: the smallest over the objects that report one, so a
/// step is reached only where every object reached it; `None` when no
/// object says (the runtime does not split traffic) or the fetch failed.
pub fn traffic_percent(mode: FetchMode, result: &JobResult, version: &Version) -> Option<u8> {
    if mode != FetchMode::Structured || !result.exited_with(0) {
        return None;
    }
    let output = parse_output(&result.stdout).ok()?;
    output
        .objects
        .iter()
        .flat_map(|o| &o.versions)
        .filter(|v| v.active && v.version == version.as_str())
        .filter_map(|v| v.traffic_percent)
        .min()
}

/// The structured fetch output. Keys are accepted in camelCase or snake_case.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchOutput {
    pub objects: Vec<ObjectState>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectState {
    pub name: String,
    #[serde(default, alias = "object_type")]
    pub object_type: Option<String>,
    #[serde(default)]
    pub versions: Vec<VersionState>,
    /// As written: read by [`ObjectStatus::parse`], so that an unknown
    /// value is an error naming its object rather than a parse error of
    /// the whole output.
    #[serde(default)]
    pub status: Option<serde_json::Value>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default, alias = "external_links")]
    pub external_links: Vec<serde_json::Value>,
    /// The runtime just marked this live object, which it did not make,
    /// as its own: it already ran the desired state (brownfield adoption).
    #[serde(default)]
    pub adopted: bool,
    /// The live object is not the runtime's and differs from the desired
    /// state: applying takes it over, which waits for an approval.
    #[serde(default)]
    pub takeover: Option<vergence_model::adoption::Takeover>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionState {
    pub version: String,
    #[serde(default)]
    pub active: bool,
    #[serde(default)]
    pub replicas: Option<i64>,
    #[serde(default, alias = "available_replicas")]
    pub available_replicas: Option<i64>,
    #[serde(default, alias = "target_replicas")]
    pub target_replicas: Option<i64>,
    #[serde(default)]
    pub drifted: bool,
    /// The share of the traffic this version has, 0-100, from a runtime
    /// that splits traffic between versions (a rollout's steps).
    #[serde(default, alias = "traffic_percent")]
    pub traffic_percent: Option<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectStatus {
    Pending,
    Succeeded,
    Failed,
}

impl ObjectStatus {
    /// An object's `status` as written: upper case, lower case or
    /// capitalised. A missing status means the object reports no rollout
    /// of its own: its versions decide, as for SUCCEEDED.
    fn parse(written: Option<&serde_json::Value>) -> Result<Self, String> {
        use serde_json::Value;
        let text = match written {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.as_str()),
            Some(other) => {
                return Err(format!(
                    "unknown status {} (expected PENDING, SUCCEEDED or FAILED)",
                    vergence_model::text::clip(other.to_string(), 80)
                ));
            }
        };
        match text {
            None => Ok(ObjectStatus::Succeeded),
            Some("PENDING" | "pending" | "Pending") => Ok(ObjectStatus::Pending),
            Some("SUCCEEDED" | "succeeded" | "Succeeded") => Ok(ObjectStatus::Succeeded),
            Some("FAILED" | "failed" | "Failed") => Ok(ObjectStatus::Failed),
            Some(other) => Err(format!(
                "unknown status {:?} (expected PENDING, SUCCEEDED or FAILED)",
                vergence_model::text::clip(other.to_owned(), 80)
            )),
        }
    }
}

/// The fetch's JSON: all of stdout, or else its last line that is a JSON
/// object — platforms whose logs mix stderr into stdout (awslogs, pod logs)
/// put the program's other lines around it. The error is the whole
/// output's, which says best what went wrong.
pub(crate) fn parse_output(stdout: &str) -> Result<FetchOutput, serde_json::Error> {
    serde_json::from_str(stdout.trim()).or_else(|whole| {
        stdout
            .lines()
            .rev()
            .map(str::trim)
            .filter(|line| line.starts_with('{'))
            .find_map(|line| serde_json::from_str(line).ok())
            .ok_or(whole)
    })
}

/// Converged when every object is SUCCEEDED and has exactly one active
/// version, equal to the desired one and not drifted. A missing status
/// leaves it to the versions (as SUCCEEDED). Malformed output, or an
/// unknown status, is an error that says what is wrong (and where).
pub fn structured(stdout: &str, version: &str) -> (FetchVerdict, String) {
    let output: FetchOutput = match parse_output(stdout) {
        Ok(output) => output,
        Err(e) => {
            let shown: String = stdout.trim().chars().take(120).collect();
            // The parser's message quotes what it could not read (a whole
            // string value, escaped): clipped like the quote of stdout, so
            // the summary stays a sentence however odd the output.
            let why = vergence_model::text::clip(e.to_string(), 200);
            return (
                FetchVerdict::Error,
                format!(
                    "fetch printed malformed output ({why}); expected {{\"objects\":[{{\"name\",\"versions\":[{{\"version\",\"active\"}}],\"status\"}}]}}, got {shown:?}"
                ),
            );
        }
    };
    if output.objects.is_empty() {
        return (
            FetchVerdict::NeedsApply,
            "fetch reported no objects: nothing is deployed".to_owned(),
        );
    }
    // An unknown status is the runtime saying something Vergence does not
    // understand: never read as progress or success.
    for object in &output.objects {
        if let Err(why) = ObjectStatus::parse(object.status.as_ref()) {
            let name = vergence_model::text::clip(object.name.clone(), 120);
            return (
                FetchVerdict::Error,
                format!("fetch output: object {name:?}: {why}"),
            );
        }
    }
    let mut verdict = FetchVerdict::Converged;
    let mut notes = Vec::new();
    for object in &output.objects {
        let (seen, note) = object_verdict(object, version);
        verdict = worst(verdict, seen);
        if !note.is_empty() {
            notes.push(note);
        }
    }
    let summary = if notes.is_empty() {
        format!("all {} object(s) run {version}", output.objects.len())
    } else {
        notes.join("; ")
    };
    (verdict, summary)
}

/// One object's verdict, with a note unless it runs the desired version.
fn object_verdict(object: &ObjectState, version: &str) -> (FetchVerdict, String) {
    let status = ObjectStatus::parse(object.status.as_ref()).unwrap_or(ObjectStatus::Pending);
    let active: Vec<&VersionState> = object.versions.iter().filter(|v| v.active).collect();
    let message = object
        .message
        .as_deref()
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    match (status, active.as_slice()) {
        (ObjectStatus::Failed, _) => (
            FetchVerdict::Failed,
            format!("{} FAILED{message}", object.name),
        ),
        (_, [one]) if one.version == version && one.drifted => (
            FetchVerdict::NeedsApply,
            format!("{} drifted from {version}{message}", object.name),
        ),
        (ObjectStatus::Succeeded, [one]) if one.version == version => {
            (FetchVerdict::Converged, String::new())
        }
        (ObjectStatus::Pending, [one]) if one.version == version => (
            FetchVerdict::InProgress,
            format!("{} is rolling out {version}{message}", object.name),
        ),
        (_, []) => (
            FetchVerdict::NeedsApply,
            format!("{} has no active version (desired {version})", object.name),
        ),
        (_, [one]) => (
            FetchVerdict::NeedsApply,
            format!("{} runs {} (desired {version})", object.name, one.version),
        ),
        (_, several) => (
            FetchVerdict::NeedsApply,
            format!(
                "{} has {} active versions ({}), desired only {version}",
                object.name,
                several.len(),
                several
                    .iter()
                    .map(|v| v.version.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

/// Combines verdicts of several objects: failure beats change beats progress.
fn worst(a: FetchVerdict, b: FetchVerdict) -> FetchVerdict {
    fn rank(v: FetchVerdict) -> u8 {
        match v {
            FetchVerdict::Converged => 0,
            FetchVerdict::InProgress => 1,
            FetchVerdict::NeedsApply => 2,
            FetchVerdict::Failed => 3,
            FetchVerdict::Error => 4,
        }
    }
    if rank(b) > rank(a) { b } else { a }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = r#"{"objects": [{"name": "my-service", "objectType": "my-type",
  "versions": [{"version": "svc-1", "active": true}], "status": "SUCCEEDED"}]}"#;

    #[test]
    fn the_seed_output_is_converged_on_svc_1_and_drift_on_svc_2() {
        assert_eq!(structured(SEED, "svc-1").0, FetchVerdict::Converged);
        let (verdict, summary) = structured(SEED, "svc-2");
        assert_eq!(verdict, FetchVerdict::NeedsApply);
        assert_eq!(summary, "my-service runs svc-1 (desired svc-2)");
    }

    #[test]
    fn snake_case_keys_and_missing_status_are_accepted() {
        let out = r#"{"objects":[{"name":"a","object_type":"x","versions":[{"version":"v","active":true,"available_replicas":1}]}]}"#;
        assert_eq!(
            structured(out, "v"),
            (FetchVerdict::Converged, "all 1 object(s) run v".to_owned()),
            "without a status, the versions decide"
        );
        let camel = r#"{"objects":[{"name":"a","objectType":"x","versions":[{"version":"v","active":true,"availableReplicas":1}],"status":"pending"}]}"#;
        assert_eq!(structured(camel, "v").0, FetchVerdict::InProgress);
        assert_eq!(
            structured(out, "w"),
            (FetchVerdict::NeedsApply, "a runs v (desired w)".to_owned())
        );
        let null = r#"{"objects":[{"name":"a","versions":[{"version":"v","active":true}],"status":null}]}"#;
        assert_eq!(structured(null, "v").0, FetchVerdict::Converged);
    }

    #[test]
    fn an_unknown_status_is_an_error_naming_the_object_and_the_value() {
        let out = r#"{"objects":[{"name":"db","versions":[{"version":"v","active":true}],"status":"SUCCEEDED"},{"name":"web","versions":[{"version":"v","active":true}],"status":"DONE"}]}"#;
        assert_eq!(
            structured(out, "v"),
            (
                FetchVerdict::Error,
                r#"fetch output: object "web": unknown status "DONE" (expected PENDING, SUCCEEDED or FAILED)"#
                    .to_owned()
            )
        );
    }

    #[test]
    fn the_json_line_is_found_among_other_log_lines() {
        let mixed = "Pulling state...\nwarning: slow API\n{\"objects\":[{\"name\":\"a\",\"versions\":[{\"version\":\"v\",\"active\":true}],\"status\":\"SUCCEEDED\"}]}\ndone\n";
        assert_eq!(structured(mixed, "v").0, FetchVerdict::Converged);
        let (verdict, summary) = structured("no json here\n{not json\n", "v");
        assert_eq!(verdict, FetchVerdict::Error);
        assert!(summary.contains("malformed"), "{summary}");
    }

    #[test]
    fn drifted_failed_and_multiple_active_versions() {
        let drifted = r#"{"objects":[{"name":"a","versions":[{"version":"v","active":true,"drifted":true}],"status":"SUCCEEDED"}]}"#;
        assert_eq!(structured(drifted, "v").0, FetchVerdict::NeedsApply);
        let failed = r#"{"objects":[{"name":"a","versions":[{"version":"v","active":true}],"status":"FAILED","message":"crashloop"}]}"#;
        assert_eq!(
            structured(failed, "v"),
            (FetchVerdict::Failed, "a FAILED (crashloop)".to_owned())
        );
        let two = r#"{"objects":[{"name":"a","versions":[{"version":"v","active":true},{"version":"u","active":true}],"status":"SUCCEEDED"}]}"#;
        assert!(structured(two, "v").1.contains("2 active versions"));
    }

    #[test]
    fn malformed_output_is_summarised_within_a_constant_factor_of_its_size() {
        // Found by the structured_fetch fuzz target: a string of DEL
        // characters is quoted escaped (six characters each) both by the
        // parser's message and by the quote of stdout.
        let stdout = format!("\"objec{}tType\"", "\u{7f}".repeat(114));
        let (verdict, summary) = structured(&stdout, "svc-1");
        assert_eq!(verdict, FetchVerdict::Error);
        assert!(
            summary.chars().count() <= 8 * stdout.len() + 512,
            "{} characters of summary from {} bytes: {summary}",
            summary.chars().count(),
            stdout.len()
        );
    }

    #[test]
    fn malformed_output_is_an_error_that_says_what_was_expected() {
        let (verdict, summary) = structured("deploying... done", "v");
        assert_eq!(verdict, FetchVerdict::Error);
        assert!(
            summary.starts_with("fetch printed malformed output"),
            "{summary}"
        );
        assert!(summary.contains("\"deploying... done\""), "{summary}");
        let (verdict, summary) = structured(r#"{"objects":[{"versions":[]}]}"#, "v");
        assert_eq!(verdict, FetchVerdict::Error);
        assert!(summary.contains("missing field `name`"), "{summary}");
    }
}
