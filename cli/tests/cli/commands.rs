//! The CLI contract users' scripts rely on: exit codes, JSON shapes, errors.

use crate::common::Project;

/// One apply-only service in staging → prod, prod gated by an approval.
/// The apply appends "<channel> <version> <param>" to deployed.log.
fn gated_project() -> Project {
    let project = Project::empty();
    project.write(
        "config.yaml",
        r#"runtime:
  name: shell
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'echo "$VERGENCE_RELEASE_CHANNEL $VERGENCE_SERVICE_VERSION {{.Params.flavor}}" >> deployed.log; exit ${FAIL_WITH:-0}']
        env:
          FAIL_WITH: "{{.Params.fail}}"
    retryPolicy: {baseInterval: 1s, maxInterval: 1s, maxAttempts: 2}
  parameters:
    - name: flavor
      string: {defaultValue: plain}
    - name: fail
      int: {defaultValue: 0}
---
application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: shell}]
    - name: prod
      runtimes: [{runtime: shell}]
      preconditions:
        - releaseChannelStable: {releaseChannel: staging}
        - manualApproval: {name: prod-gate}
---
service:
  name: api
  runtime: shell
  parameters:
    - name: flavor
      string: {defaultValue: plain}
"#,
    );
    project
}

#[test]
fn release_waits_for_approval_in_prod_then_converges_on_that_version() {
    let project = gated_project();
    // v1 first, so that approving it (another version than the desired
    // one) below approves a released version. No state yet: given
    // --config (as every run here is), the release stores that config
    // first (tests/papercuts.rs covers it).
    let run = project.vergence(&["release", "api", "v1", "--app", "shop"]);
    assert_eq!(run.code, 0, "{run}");
    let run = project.vergence(&[
        "release",
        "api",
        "v2",
        "--app",
        "shop",
        "--param",
        "flavor=spicy",
    ]);
    assert_eq!(run.code, 0, "{run}");

    project.up(3);
    let prod = project.instance("api", "prod");
    assert_eq!(prod["status"], "WAITING_APPROVAL", "{prod}");
    assert!(
        prod["reason"].as_str().unwrap().contains("prod-gate"),
        "{prod}"
    );

    let run = project.vergence(&[
        "release",
        "api",
        "--version",
        "v2",
        "--param",
        "flavor=spicy",
    ]);
    assert_eq!(run.code, 0, "{run}");
    project.up(3);
    let staging = project.instance("api", "staging");
    assert_eq!(staging["currentVersion"], "v2");
    assert!(project.read("deployed.log").contains("staging v2 spicy"));
    assert!(!project.read("deployed.log").contains("prod"));

    // An approval of another version does not count.
    let run = project.vergence(&[
        "approve",
        "--app",
        "shop",
        "--release-channel",
        "prod",
        "--service",
        "api",
        "--version",
        "v1",
    ]);
    assert_eq!(run.code, 0, "{run}");
    project.up(3);
    assert_eq!(
        project.instance("api", "prod")["status"],
        "WAITING_APPROVAL"
    );

    let run = project.vergence(&[
        "approve",
        "--app",
        "shop",
        "--release-channel",
        "prod",
        "--service",
        "api",
    ]);
    assert_eq!(run.code, 0, "{run}");
    project.up(0);
    let prod = project.instance("api", "prod");
    assert_eq!(prod["currentVersion"], "v2");
    assert!(project.read("deployed.log").contains("prod v2 spicy"));
    let approvals: Vec<_> = project
        .events(&["--release-channel", "prod"])
        .into_iter()
        .filter(|e| e["type"] == "approvalRecorded")
        .collect();
    assert_eq!(approvals.len(), 2, "both approvals are in the audit trail");
}

#[test]
fn a_failing_apply_exits_2_with_the_reason_and_keeps_prod_untouched() {
    let project = gated_project();
    project.replace(
        "config.yaml",
        "name: fail\n      int: {defaultValue: 0}",
        "name: fail\n      int: {defaultValue: 3}",
    );
    let run = project.up(2);
    assert!(run.stdout.contains("FAILED"), "{run}");
    let staging = project.instance("api", "staging");
    assert_eq!(staging["status"], "FAILED");
    let reason = staging["reason"].as_str().unwrap();
    assert!(reason.contains("exited with 3"), "{reason}");
    assert!(reason.contains("maxAttempts"), "{reason}");
    let log = project.read("deployed.log");
    assert_eq!(log.lines().count(), 2, "two attempts: {log}");
    assert!(!log.contains("prod"));
    assert_ne!(project.instance("api", "prod")["status"], "CONVERGED");
}

#[test]
fn validate_names_file_line_and_unknown_template_parameter() {
    let project = Project::quickstart();
    project.replace(
        "runtimes.yaml",
        "cmd: [./scripts/check.sh, \"--replicas={{.Params.replicas}}\"",
        "cmd: [./scripts/check.sh, \"--replicas={{.Params.replicaz}}\"",
    );
    let line = project
        .read("runtimes.yaml")
        .lines()
        .position(|l| l.contains("replicaz"))
        .unwrap()
        + 1;
    let run = project.vergence(&["validate"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr.contains(&format!("runtimes.yaml:{line}")),
        "{run}"
    );
    assert!(run.stderr.contains("replicaz"), "{run}");

    // `up` rejects it the same way and stores nothing.
    let run = project.vergence(&["up"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(
        !project.file(".vergence").exists(),
        "a rejected config stores nothing"
    );
    assert!(!project.file("deployed").exists());
}

#[test]
fn validate_reports_every_error_at_once() {
    let project = Project::quickstart();
    project.replace(
        "services.yaml",
        "runtime: files-apply-only",
        "runtime: files-apply-onyl",
    );
    project.replace(
        "services.yaml",
        "  name: web\n",
        "  name: web\n  colour: blue\n",
    );
    project.replace(
        "application.yaml",
        "releaseChannel: staging}",
        "releaseChannel: stagin}",
    );
    let run = project.vergence(&["validate"]);
    assert_eq!(run.code, 1, "{run}");
    for expected in [
        "files-apply-onyl",
        "colour",
        "stagin",
        "services.yaml:",
        "application.yaml:",
    ] {
        assert!(
            run.stderr.contains(expected),
            "missing {expected:?}:\n{run}"
        );
    }
    let ok = Project::quickstart().vergence(&["validate"]);
    assert_eq!(ok.code, 0, "{ok}");
}

#[test]
fn errors_are_one_clear_line_never_a_panic() {
    let project = Project::empty();
    let run = project.vergence(&["status"]);
    assert_ne!(run.code, 0, "{run}");
    assert!(!run.stderr.contains("panicked"), "{run}");
    assert_eq!(run.stderr.trim().lines().count(), 1, "{run}");

    let run = project.vergence(&["validate"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("no"), "{run}");

    let quick = Project::quickstart();
    quick.up(0);
    let run = quick.vergence(&[
        "approve",
        "--app",
        "shop",
        "--release-channel",
        "nope",
        "--service",
        "api",
    ]);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("nope"), "{run}");
    assert!(!run.stderr.contains("panicked"), "{run}");
    let run = quick.vergence(&["release", "api", "v1", "--param", "novalue"]);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("novalue"), "{run}");
}

#[test]
fn status_json_has_the_documented_shape() {
    let project = Project::quickstart();
    project.up(0);
    let run = project.vergence(&["status", "--output", "json", "--service", "web"]);
    assert_eq!(run.code, 0, "{run}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let instances = json["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 2);
    for instance in instances {
        for field in [
            "application",
            "service",
            "releaseChannel",
            "desiredVersion",
            "currentVersion",
            "status",
            "reason",
        ] {
            assert!(
                instance.get(field).is_some(),
                "{field} missing in {instance}"
            );
        }
    }
}

#[test]
fn up_returns_3_while_an_instance_waits_for_a_release_parameter() {
    let project = gated_project();
    // The service's own release parameter (the last one in the file).
    let text = project.read("config.yaml");
    let at = text.rfind("      string: {defaultValue: plain}").unwrap();
    project.write(
        "config.yaml",
        &format!("{}      required: true\n      string: {{}}\n", &text[..at]),
    );
    let run = project.vergence(&["up"]);
    assert_eq!(run.code, 3, "{run}");
    let staging = project.instance("api", "staging");
    assert_eq!(staging["status"], "PENDING");
    assert!(
        staging["reason"]
            .as_str()
            .unwrap()
            .contains("waiting for a release"),
        "{staging}"
    );
    assert!(!project.file("deployed.log").exists());
}

#[test]
fn a_config_nested_thousands_deep_is_an_error_with_its_line_not_a_crash() {
    let project = Project::quickstart();
    project.write("bomb.yaml", &format!("{}x\n", "- ".repeat(20_000)));
    for command in [&["validate"][..], &["plan"], &["up"]] {
        let run = project.vergence(command);
        assert_eq!(run.code, 1, "{command:?}: {run}");
        assert!(
            run.stderr.contains("bomb.yaml:1:") && run.stderr.contains("levels deep"),
            "{command:?}: {run}"
        );
    }
    assert!(
        !project.file(".vergence/state.db").exists(),
        "a rejected config stores nothing"
    );
}

#[test]
fn an_emptied_state_file_is_an_error_for_every_command_never_a_fresh_start() {
    let project = Project::quickstart();
    project.up(0);
    std::fs::write(project.file(".vergence/state.db"), b"").unwrap();
    for command in [&["status"][..], &["events"], &["up"]] {
        let run = project.vergence(command);
        assert_ne!(run.code, 0, "{command:?}: {run}");
        assert!(
            run.stderr.contains("is empty (0 bytes)"),
            "{command:?}: {run}"
        );
        assert!(!run.stdout.contains("no instances match"), "{run}");
    }
    assert_eq!(
        std::fs::metadata(project.file(".vergence/state.db"))
            .unwrap()
            .len(),
        0,
        "nothing was re-created over it"
    );
}

#[test]
fn schema_prints_the_published_schema_and_what_it_rejects_validate_rejects() {
    let project = Project::quickstart();
    let run = project.vergence(&["schema"]);
    assert_eq!(run.code, 0, "{run}");
    let published = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/config.schema.json"),
    )
    .expect("docs/config.schema.json");
    assert_eq!(
        run.stdout, published,
        "vergence schema prints docs/config.schema.json"
    );

    // A misspelt key and a wrong enum value: the schema refuses both (see
    // shared/compiler/tests/compiler/schema.rs), and so does `validate`, naming them.
    project.replace("runtimes.yaml", "pollInterval:", "pollIntervall:");
    project.replace("runtimes.yaml", "mode: structured", "mode: structural");
    let run = project.vergence(&["validate"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("pollIntervall"), "{run}");
    assert!(run.stderr.contains("structural"), "{run}");
}
