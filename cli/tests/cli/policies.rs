//! Delivery policies end to end through the binary with real scripts: a
//! BLOCK protection holding prod, an automatic rollback after a failed
//! post-deployment check, a plan-bound approval invalidated by a new plan.

use crate::common::Project;

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
