//! Delivery policies end to end through the binary with real scripts: a
//! BLOCK protection holding prod, an automatic rollback after a failed
//! post-deployment check, a plan-bound approval invalidated by a new plan.

use crate::common::Project;
use vergence_testkit::prometheus::{Exporter, Prometheus};

/// staging → prod; the apply writes "<version>" to deployed/<channel>.txt
/// and appends to deployed.log. Extra YAML for prod and the service is
/// spliced in.
fn two_channels(prod_extra: &str, service_extra: &str, protections: &str) -> Project {
    let project = Project::empty();
    project.write(
        "scripts/apply.sh",
        "#!/bin/sh\nset -eu\nmkdir -p deployed\necho \"$VERGENCE_SERVICE_VERSION\" > \"deployed/$VERGENCE_RELEASE_CHANNEL.txt\"\necho \"$VERGENCE_RELEASE_CHANNEL $VERGENCE_SERVICE_VERSION\" >> deployed.log\n",
    );
    project.write(
        "config.yaml",
        &format!(
            r#"runtime:
  name: files
  apply:
    taskConfig:
      program:
        cmd: [sh, ./scripts/apply.sh]
---
application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{{runtime: files}}]
    - name: prod
      runtimes: [{{runtime: files}}]
      preconditions:
        - releaseChannelStable: {{releaseChannel: staging}}
{prod_extra}
---
service:
  name: api
  runtime: files
{service_extra}
{protections}"#
        ),
    );
    project
}

#[test]
fn a_firing_alert_blocks_prod_and_resolving_it_lets_the_release_through() {
    let project = two_channels(
        "      protections:\n        - ref: {name: no-firing-alerts}\n          lifecycle: [{deployment: {failureBehavior: BLOCK}}]",
        "",
        "---\nprotection:\n  name: no-firing-alerts\n  alert: high-errors\n",
    );
    project.up(0);
    project.vergence(&["release", "api", "v2"]);
    let run = project.vergence(&[
        "alert",
        "set",
        "high-errors",
        "firing",
        "--summary",
        "5xx above 2%",
    ]);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("1 instance(s)"), "{run}");

    project.up(3);
    assert_eq!(project.instance("api", "staging")["currentVersion"], "v2");
    let prod = project.instance("api", "prod");
    assert_eq!(prod["status"], "BLOCKED", "{prod}");
    let reason = prod["reason"].as_str().unwrap();
    assert!(reason.contains("high-errors is firing"), "{reason}");
    assert!(reason.contains("5xx above 2%"), "{reason}");
    assert_eq!(
        project.read("deployed/prod.txt").trim(),
        project.instance("api", "prod")["currentVersion"]
            .as_str()
            .unwrap()
    );
    assert!(!project.read("deployed.log").contains("prod v2"));

    let explain = project.vergence(&["explain", "api", "--release-channel", "prod"]);
    assert_eq!(explain.code, 0, "{explain}");
    assert!(
        explain.stdout.contains("✓ releaseChannelStable staging"),
        "{explain}"
    );
    assert!(
        explain.stdout.contains("✗ protection no-firing-alerts"),
        "{explain}"
    );

    let run = project.vergence(&["alert", "set", "high-errors", "resolved"]);
    assert_eq!(run.code, 0, "{run}");
    project.up(0);
    assert_eq!(project.read("deployed/prod.txt").trim(), "v2");
    let events = project.events(&["--release-channel", "prod"]);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "alertChanged" && e["firing"] == true)
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "alertChanged" && e["firing"] == false)
    );
}

#[test]
fn a_failing_check_job_blocks_prod_until_it_passes() {
    let project = two_channels(
        "      protections:\n        - ref: {name: healthy}\n          lifecycle: [{deployment: {}}]",
        "",
        "---\nprotection:\n  name: healthy\n  taskConfig:\n    program:\n      cmd: [sh, -c, 'if [ -f alerts-firing ]; then echo \"alerts are firing\" >&2; exit 1; fi']\n  pollInterval: 1s\n",
    );
    project.write("alerts-firing", "");
    project.up(3);
    assert_eq!(project.instance("api", "staging")["status"], "CONVERGED");
    let prod = project.instance("api", "prod");
    assert_eq!(prod["status"], "BLOCKED", "{prod}");
    assert!(
        prod["reason"]
            .as_str()
            .unwrap()
            .contains("alerts are firing"),
        "{prod}"
    );
    assert!(!project.file("deployed/prod.txt").exists());

    std::fs::remove_file(project.file("alerts-firing")).unwrap();
    project.up(0);
    assert!(project.file("deployed/prod.txt").exists());
}

/// prod guarded by a `prometheus` protection reading the exporter's error
/// ratio, with `failure` as its failure behaviour, at `url`.
fn guarded_by_prometheus(url: &str, failure: &str) -> Project {
    two_channels(
        &format!(
            "      protections:\n        - ref: {{name: error-ratio}}\n          lifecycle: [{{deployment: {{failureBehavior: {failure}}}}}]"
        ),
        "",
        &format!(
            "---\nprotection:\n  name: error-ratio\n  prometheus:\n    url: {url}\n    query: 'shop_error_ratio{{service=\"web\"}}'\n    threshold: {{max: 0.05}}\n  pollInterval: 1s\n"
        ),
    )
}

#[test]
fn a_prometheus_protection_holds_prod_while_the_error_ratio_is_high() {
    let exporter = Exporter::start(0.4);
    let Some(prometheus) = Prometheus::start(&exporter) else {
        return;
    };
    exporter.wait_scraped();
    let project = guarded_by_prometheus(&prometheus.url, "BLOCK");
    project.up(3);
    assert_eq!(project.instance("api", "staging")["status"], "CONVERGED");
    let prod = project.instance("api", "prod");
    assert_eq!(prod["status"], "BLOCKED", "{prod}");
    let reason = prod["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "protection error-ratio (deployment, BLOCK of release channel prod) is failing"
        ) && reason.contains("= 0.4 is above max 0.05"),
        "{reason}"
    );
    assert!(!project.file("deployed/prod.txt").exists());

    exporter.set(0.01);
    exporter.wait_scraped();
    project.up(0);
    assert!(project.file("deployed/prod.txt").exists());
}

#[test]
fn a_prometheus_that_cannot_be_reached_blocks_and_fails_nothing() {
    // A FAIL protection whose server is not there: BLOCKED, not FAILED.
    let down = format!("http://127.0.0.1:{}", vergence_testkit::free_port());
    let project = guarded_by_prometheus(&down, "FAIL");
    project.up(3);
    let prod = project.instance("api", "prod");
    assert_eq!(prod["status"], "BLOCKED", "{prod}");
    let reason = prod["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "protection error-ratio (deployment, of release channel prod) cannot be evaluated: inconclusive: cannot reach Prometheus at {down}"
        )),
        "{reason}"
    );
    assert!(!project.file("deployed/prod.txt").exists());
    let changed: Vec<_> = project
        .events(&[])
        .into_iter()
        .filter(|e| e["type"] == "protectionChanged")
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(
        changed[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("protection error-ratio@deployment cannot be evaluated: "),
        "{changed:?}"
    );
}

#[test]
fn a_failed_post_deployment_check_rolls_back_and_is_not_promoted() {
    let project = two_channels(
        "",
        "  protections:\n    - ref: {name: smoke}\n      lifecycle: [{postDeployment: {checkDuration: 2s}}]",
        "---\nprotection:\n  name: smoke\n  taskConfig:\n    program:\n      cmd: [sh, -c, 'if grep -q bad \"deployed/$VERGENCE_RELEASE_CHANNEL.txt\"; then echo \"smoke test failed: 500 on /health\" >&2; exit 1; fi']\n  pollInterval: 1s\n",
    );
    project.vergence(&["up"]);
    let run = project.vergence(&["release", "api", "v1"]);
    assert_eq!(run.code, 0, "{run}");
    project.up(0);
    assert_eq!(project.read("deployed/prod.txt").trim(), "v1");

    project.vergence(&["release", "api", "v2-bad"]);
    // The release failed and was rolled back: a failure for CI.
    project.up(2);
    let staging = project.instance("api", "staging");
    assert_eq!(staging["status"], "ROLLED_BACK", "{staging}");
    assert_eq!(staging["currentVersion"], "v1");
    let reason = staging["reason"].as_str().unwrap();
    assert!(reason.contains("500 on /health"), "{reason}");
    assert_eq!(
        project.read("deployed/staging.txt").trim(),
        "v1",
        "the previous version is back"
    );
    let prod = project.instance("api", "prod");
    assert_eq!(prod["currentVersion"], "v1");
    assert!(
        prod["reason"]
            .as_str()
            .unwrap()
            .contains("will not be promoted"),
        "{prod}"
    );
    assert!(!project.read("deployed.log").contains("prod v2-bad"));
    let kinds: Vec<String> = project
        .events(&["--release-channel", "staging"])
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    for kind in ["rollbackStarted", "rolledBack", "protectionChanged"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} missing: {kinds:?}");
    }

    // A fixed version moves on from the rollback.
    project.vergence(&["release", "api", "v3"]);
    project.up(0);
    assert_eq!(project.read("deployed/prod.txt").trim(), "v3");
}

#[test]
fn a_version_that_failed_is_held_until_it_is_released_or_approved_again() {
    let project = two_channels(
        "",
        "  protections:\n    - ref: {name: smoke}\n      lifecycle: [{postDeployment: {checkDuration: 1s}}]",
        "---\nprotection:\n  name: smoke\n  taskConfig:\n    program:\n      cmd: [sh, -c, 'if grep -q bad \"deployed/$VERGENCE_RELEASE_CHANNEL.txt\"; then echo \"smoke test failed\" >&2; exit 1; fi']\n  pollInterval: 1s\n",
    );
    project.vergence(&["release", "api", "v1"]);
    project.up(0);
    project.vergence(&["release", "api", "v2-bad"]);
    project.up(2);
    let applied = |project: &Project| {
        project
            .read("deployed.log")
            .matches("staging v2-bad")
            .count()
    };
    assert_eq!(applied(&project), 1);

    // Held: another `up` (which retries failed versions) leaves it alone.
    project.up(2);
    assert_eq!(applied(&project), 1, "held through another up");
    assert_eq!(project.instance("api", "staging")["status"], "ROLLED_BACK");
    let explain = project.vergence(&["explain", "api", "--release-channel", "staging"]);
    assert!(
        explain.stdout.contains("held: v2-bad is held here (no check or config push applies it again) until it is released again, approved with --version v2-bad"),
        "{explain}"
    );

    // Released again: applied again (and, failing again, rolled back again).
    let again = project.vergence(&["release", "api", "v2-bad"]);
    assert_eq!(again.code, 0, "{again}");
    project.up(2);
    assert_eq!(applied(&project), 2, "released again");
    assert_eq!(project.read("deployed/staging.txt").trim(), "v1");

    // Approved by name: applied again.
    let approve = project.vergence(&[
        "approve",
        "--app",
        "shop",
        "--service",
        "api",
        "--release-channel",
        "staging",
        "--version",
        "v2-bad",
    ]);
    assert_eq!(approve.code, 0, "{approve}");
    project.up(2);
    assert_eq!(applied(&project), 3, "approved by name");
    let asked: Vec<String> = project
        .events(&["--release-channel", "staging"])
        .iter()
        .filter(|e| e["type"] == "checksRequested")
        .map(|e| e["message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked.iter().all(|m| m
            .ends_with("asked for v2-bad again in staging, where it failed: it is applied again")),
        "{asked:?}"
    );
}

#[test]
fn an_approval_binds_to_the_plan_and_a_changed_plan_needs_a_new_one() {
    let project = Project::empty();
    project.write("desired.txt", "bucket: logs\n");
    project.write(
        "config.yaml",
        r#"runtime:
  name: planned
  fetch:
    mode: exitCode
    outputs: [plan]
    taskConfig:
      program:
        cmd: [sh, -c, 'cp desired.txt "$VERGENCE_OUTPUT_DIR/plan"; cmp -s desired.txt deployed.txt && exit 0; exit 2']
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'cp "$VERGENCE_INPUT_DIR/plan" deployed.txt']
  requireApprovalBeforeApply: true
---
application:
  name: infra
  releaseChannels:
    - name: prod
      runtimes: [{runtime: planned}]
---
service:
  name: buckets
  runtime: planned
"#,
    );
    project.up(3);
    let instance = project.instance("buckets", "prod");
    assert_eq!(instance["status"], "WAITING_APPROVAL", "{instance}");
    let run = project.vergence(&["status", "--service", "buckets"]);
    assert!(
        run.stdout.contains("bucket: logs"),
        "the plan is shown:\n{run}"
    );
    let run = project.vergence(&[
        "approve",
        "--app",
        "infra",
        "--release-channel",
        "prod",
        "--service",
        "buckets",
    ]);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("plan"), "{run}");

    // Before the next run the desired state changes: a different plan.
    project.write("desired.txt", "bucket: logs\nbucket: backups\n");
    project.up(3);
    let instance = project.instance("buckets", "prod");
    assert_eq!(
        instance["status"], "WAITING_APPROVAL",
        "the old approval does not count: {instance}"
    );
    assert!(!project.file("deployed.txt").exists(), "nothing applied");
    let run = project.vergence(&["status", "--service", "buckets"]);
    assert!(run.stdout.contains("bucket: backups"), "{run}");

    project.vergence(&[
        "approve",
        "--app",
        "infra",
        "--release-channel",
        "prod",
        "--service",
        "buckets",
    ]);
    project.up(0);
    assert_eq!(
        project.read("deployed.txt"),
        "bucket: logs\nbucket: backups\n",
        "the approved plan was applied"
    );
}

#[test]
fn pause_holds_applies_and_pin_holds_a_version() {
    let project = two_channels("", "", "");
    project.vergence(&["up"]);
    let run = project.vergence(&["release", "api", "v1"]);
    assert_eq!(run.code, 0, "{run}");
    project.up(0);

    let run = project.vergence(&["pause", "--app", "shop", "--release-channel", "prod"]);
    assert_eq!(run.code, 0, "{run}");
    project.vergence(&["release", "api", "v2"]);
    project.up(3);
    assert_eq!(project.instance("api", "prod")["status"], "PAUSED");
    assert_eq!(project.read("deployed/prod.txt").trim(), "v1");
    project.vergence(&["resume", "--app", "shop", "--release-channel", "prod"]);
    project.up(0);
    assert_eq!(project.read("deployed/prod.txt").trim(), "v2");

    let run = project.vergence(&["pin", "api", "--release-channel", "prod", "v1"]);
    assert_eq!(run.code, 0, "{run}");
    project.up(0);
    assert_eq!(project.read("deployed/prod.txt").trim(), "v1");
    project.vergence(&["release", "api", "v3"]);
    project.up(0);
    assert_eq!(project.read("deployed/staging.txt").trim(), "v3");
    assert_eq!(project.read("deployed/prod.txt").trim(), "v1", "pinned");
    project.vergence(&["unpin", "api", "--release-channel", "prod"]);
    project.up(0);
    assert_eq!(project.read("deployed/prod.txt").trim(), "v3");

    let run = project.vergence(&[
        "rollback",
        "api",
        "--release-channel",
        "prod",
        "--version",
        "v2",
    ]);
    assert_eq!(run.code, 0, "{run}");
    project.up(3);
    assert_eq!(project.read("deployed/prod.txt").trim(), "v2");
    assert_eq!(project.instance("api", "prod")["status"], "ROLLED_BACK");
}
