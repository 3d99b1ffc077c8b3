//! What `vergence release` and `vergence approve` refuse, and how they
//! say it: oversized parameters, a version pushed again with other
//! parameters, an approval for a version never released.

use crate::common::{Project, Run};

/// One service in staging → prod (gated by an approval) with five string
/// parameters.
fn project() -> Project {
    let project = Project::empty();
    project.write(
        "config.yaml",
        r#"runtime:
  name: shell
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'echo "$VERGENCE_SERVICE_VERSION {{.Params.a}}" >> deployed.log']
  parameters:
    - {name: a, string: {defaultValue: plain}}
    - {name: b, string: {defaultValue: plain}}
    - {name: c, string: {defaultValue: plain}}
    - {name: d, string: {defaultValue: plain}}
    - {name: e, string: {defaultValue: plain}}
---
application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: shell}]
    - name: prod
      runtimes: [{runtime: shell}]
      preconditions:
        - manualApproval: {name: prod-gate}
---
service:
  name: api
  runtime: shell
  parameters:
    - {name: a, string: {defaultValue: plain}}
    - {name: b, string: {defaultValue: plain}}
    - {name: c, string: {defaultValue: plain}}
    - {name: d, string: {defaultValue: plain}}
    - {name: e, string: {defaultValue: plain}}
"#,
    );
    project
}

fn release(project: &Project, version: &str, params: &[String]) -> Run {
    let mut args = vec!["release", "api", version, "--app", "shop"];
    for param in params {
        args.extend(["--param", param.as_str()]);
    }
    project.vergence(&args)
}

/// The versions ever pushed, from the events.
fn pushed(project: &Project) -> Vec<String> {
    project
        .events(&[])
        .iter()
        .filter(|e| e["type"] == "releaseCreated")
        .map(|e| e["version"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn an_oversized_release_parameter_is_refused_naming_it_and_nothing_is_stored() {
    let project = project();
    let ok = release(&project, "v1", &["a=small".to_owned()]);
    assert_eq!(ok.code, 0, "{ok}");

    // One value over 32 KiB.
    let big = format!("b={}", "x".repeat(40 * 1024));
    let run = release(&project, "v2", &[big]);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("param b"), "{run}");
    assert!(run.stderr.contains("32768 bytes"), "{run}");
    // Five values within the limit, over 128 KiB together.
    let many: Vec<String> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|name| format!("{name}={}", "y".repeat(30 * 1024)))
        .collect();
    let run = release(&project, "v3", &many);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("params"), "{run}");
    assert!(run.stderr.contains("131072 bytes"), "{run}");

    assert_eq!(pushed(&project), ["v1"]);
    let staging = project.instance("api", "staging");
    assert_eq!(staging["desiredVersion"], "v1", "{staging:#}");
}

#[test]
fn pushing_a_version_again_with_other_parameters_says_so_and_how_to_release_them() {
    let project = project();
    let first = release(&project, "v2", &["a=spicy".to_owned(), "b=one".to_owned()]);
    assert_eq!(first.code, 0, "{first}");
    // The same parameters again: fine, it is the same release.
    let same = release(&project, "v2", &["a=spicy".to_owned(), "b=one".to_owned()]);
    assert_eq!(same.code, 0, "{same}");

    let other = release(&project, "v2", &["a=mild".to_owned(), "b=one".to_owned()]);
    assert_ne!(other.code, 0, "{other}");
    assert!(!other.stderr.contains("concurrently"), "{other}");
    assert!(other.stderr.contains("already pushed"), "{other}");
    assert!(
        other.stderr.contains(r#"a (released "spicy", now "mild")"#),
        "{other}"
    );
    assert!(!other.stderr.contains("b (released"), "{other}");
    assert!(other.stderr.contains("as a new version"), "{other}");
}

#[test]
fn approve_refuses_a_version_never_released_as_rollback_and_pin_do() {
    let project = project();
    let ok = release(&project, "v2", &[]);
    assert_eq!(ok.code, 0, "{ok}");
    let channel = ["--app", "shop", "--release-channel", "prod"];
    let mut args = vec!["approve", "--service", "api", "--version", "nope"];
    args.extend(channel);
    let approve = project.vergence(&args);
    assert_ne!(approve.code, 0, "{approve}");
    assert!(approve.stderr.contains("release nope of api"), "{approve}");
    let mut args = vec!["rollback", "api", "--version", "nope"];
    args.extend(channel);
    let rollback = project.vergence(&args);
    assert_eq!(rollback.code, approve.code, "{rollback}\n{approve}");
    assert!(
        rollback.stderr.contains("release nope of api"),
        "{rollback}"
    );
    let mut args = vec!["pin", "api", "nope"];
    args.extend(channel);
    let pin = project.vergence(&args);
    assert_eq!(pin.code, approve.code, "{pin}\n{approve}");
    assert!(pin.stderr.contains("release nope of api"), "{pin}");
    assert!(
        !project
            .events(&[])
            .iter()
            .any(|e| e["type"] == "approvalRecorded"),
        "an approval was recorded"
    );

    // A released version is approved.
    let mut args = vec!["approve", "--service", "api", "--version", "v2"];
    args.extend(channel);
    let approved = project.vergence(&args);
    assert_eq!(approved.code, 0, "{approved}");
}
