//! The Terraform runtime end to end with the real `terraform` binary and
//! the built-in `terraform_data` resource on a local backend: the example
//! converges two channels; an approval binds to the plan's changes, so
//! `approve` then `up` (and `up --watch`) applies the approved plan; a
//! state changed by hand after an approval makes the plan stale and asks
//! again; a lock held by another terraform run is waited out; a rollback
//! on an approval-gated runtime waits for an approval.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::server::{Server, create_app_token, instances, remote};
use crate::common::{Project, wait_for};
use serde_json::Value;

/// A copy of examples/terraform without state.
fn example() -> Project {
    let project = Project::example("terraform");
    let _ = std::fs::remove_dir_all(project.file("state"));
    project
}

/// A module whose `terraform_data` is replaced at every image change, with
/// a provisioner that can hold the state lock (`hold_seconds`) and that
/// fails for the image `broken`.
const MODULE: &str = r#"terraform {
  backend "local" {}
}

variable "image" {
  type = string
}

variable "hold_seconds" {
  type    = string
  default = "0"
}

resource "terraform_data" "app" {
  input            = var.image
  triggers_replace = var.image

  provisioner "local-exec" {
    command = "sleep ${var.hold_seconds} && test '${var.image}' != broken"
  }
}
"#;

/// Application `infra`, one channel `prod`, service `app` on runtime `tf`.
fn infra(approval: bool, poll: &str) -> Project {
    let project = Project::empty();
    project.write("module/main.tf", MODULE);
    project.write(
        "vergence.yaml",
        &format!(
            r#"application:
  name: infra
  releaseChannels:
    - name: prod
      runtimes: [{{runtime: tf}}]
---
runtime:
  name: tf
  requireApprovalBeforeApply: {approval}
  terraform:
    module: ./module
    backend: {{workspace_dir: ../state}}
    variables: {{image: "{{{{.Params.image}}}}"}}
    pollInterval: {poll}
    retryPolicy: {{baseInterval: 1s, maxInterval: 4s, maxAttempts: 1}}
  parameters: [{{name: image, string: {{}}, required: true}}]
---
service:
  name: app
  runtime: tf
  parameters: [{{name: image, string: {{}}, required: true}}]
  custom:
    parameterValues: [{{name: image, string: "{{{{.Params.image}}}}"}}]
"#
        ),
    );
    project
}

/// `terraform ARGS` run by hand in the module, on the instance's state.
fn terraform(project: &Project, args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut command = Command::new("terraform");
    command
        .args(args)
        .current_dir(project.file("module"))
        .env("TF_WORKSPACE", "infra-app-prod")
        .env("TF_DATA_DIR", project.file(".terraform-by-hand"))
        .env("TF_IN_AUTOMATION", "1")
        .env("TF_INPUT", "0");
    for (name, value) in vars {
        command.env(format!("TF_VAR_{name}"), value);
    }
    command
}

/// Applies `image` by hand, as someone outside Vergence would.
fn apply_by_hand(project: &Project, image: &str, hold_seconds: &str) -> Child {
    let init = terraform(
        project,
        &[
            "init",
            "-no-color",
            "-backend-config=workspace_dir=../state",
        ],
        &[],
    )
    .output()
    .unwrap();
    assert!(init.status.success(), "{init:?}");
    terraform(
        project,
        &[
            "apply",
            "-auto-approve",
            "-no-color",
            "-replace=terraform_data.app",
        ],
        &[("image", image), ("hold_seconds", hold_seconds)],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

/// The image the state holds.
fn state_image(project: &Project) -> String {
    let text = project.read("state/infra-app-prod/terraform.tfstate");
    let state: Value = serde_json::from_str(&text).unwrap();
    state["resources"][0]["instances"][0]["attributes"]["input"]["value"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn approve(project: &Project, app: &str, channel: &str, service: &str) {
    let run = project.vergence(&[
        "approve",
        "--app",
        app,
        "--release-channel",
        channel,
        "--service",
        service,
    ]);
    assert_eq!(run.code, 0, "{run}");
}

fn release(project: &Project, version: &str, image: &str) {
    let param = format!("image={image}");
    let run = project.vergence(&["release", "app", version, "--param", &param]);
    assert_eq!(run.code, 0, "{run}");
}

/// Status of `service` in `channel`, once there is any state.
fn status_of(project: &Project, service: &str, channel: &str) -> Option<String> {
    let run = project.vergence(&["status", "--output", "json"]);
    let json: Value = serde_json::from_str(&run.stdout).ok()?;
    json["instances"]
        .as_array()?
        .iter()
        .find(|i| i["service"] == service && i["releaseChannel"] == channel)
        .and_then(|i| i["status"].as_str().map(str::to_owned))
}

fn fetch_messages(project: &Project) -> Vec<String> {
    project
        .events(&[])
        .iter()
        .filter(|e| e["type"] == "jobFinished")
        .map(|e| e["message"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_example_converges_staging_and_prod_applies_exactly_the_approved_plan() {
    let project = example();
    project.up(3);
    assert_eq!(project.instance("site", "staging")["status"], "CONVERGED");
    let prod = project.instance("site", "prod");
    assert_eq!(prod["status"], "WAITING_APPROVAL", "{prod}");
    assert!(
        prod["reason"].as_str().unwrap().contains("with plan "),
        "{prod}"
    );
    // The API's shape (local status is the same): counts and addresses.
    assert_eq!(prod["plan"]["counts"], "+3 ~0 -0", "{prod}");
    assert_eq!(
        prod["plan"]["changes"][2], "+ terraform_data.site",
        "{prod}"
    );

    // The plan is shown as its changes, never as the binary plan file.
    let status = project.vergence(&["status", "--service", "site"]);
    assert_eq!(status.code, 0, "{status}");
    assert!(status.stdout.contains("changes +3 ~0 -0"), "{status}");
    assert!(status.stdout.contains("+ terraform_data.site"), "{status}");
    assert!(status.stdout.contains("tfplan ("), "{status}");
    assert!(
        !status.stdout.contains('\0') && !status.stdout.contains("PK\u{3}\u{4}"),
        "{status}"
    );
    assert!(
        !status.stdout.contains("\"resource_changes\""),
        "the JSON is not dumped: {status}"
    );
    let explain = project.vergence(&["explain", "site", "--release-channel", "prod"]);
    assert!(
        explain
            .stdout
            .contains("+3 ~0 -0: + terraform_data.replica[0]"),
        "{explain}"
    );
    assert!(
        fetch_messages(&project)
            .iter()
            .any(|m| m.starts_with("fetch: terraform plan +3 ~0 -0")),
        "{:?}",
        fetch_messages(&project)
    );

    // `up` plans again before applying: a byte-different plan file of the
    // same changes, which the approval still covers.
    approve(&project, "platform", "prod", "site");
    project.up(0);
    assert_eq!(project.instance("site", "prod")["status"], "CONVERGED");
    let state = project.read("state/platform-site-prod/terraform.tfstate");
    assert!(state.contains("site-large-1"), "{state}");
    assert_eq!(project.applies(), 2, "one apply per channel");

    // Nothing changed: every plan says so, nothing is applied.
    project.up(0);
    assert_eq!(project.applies(), 2);
}

#[test]
fn up_watch_applies_the_plan_approved_from_another_terminal() {
    let project = example();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vergence"))
        .args(["up", "--watch", "--config"])
        .arg(project.path())
        .current_dir(project.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("prod to wait for approval", Duration::from_secs(60), || {
        status_of(&project, "site", "prod").as_deref() == Some("WAITING_APPROVAL")
    });
    approve(&project, "platform", "prod", "site");
    // The watcher plans again every 2s; each plan makes the same changes,
    // so the approval holds and the plan is applied.
    wait_for("prod to converge", Duration::from_secs(60), || {
        status_of(&project, "site", "prod").as_deref() == Some("CONVERGED")
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        project
            .read("state/platform-site-prod/terraform.tfstate")
            .contains("site-large-0")
    );
}

#[test]
fn a_lock_held_by_another_terraform_run_is_waited_out_without_failing() {
    let project = infra(false, "2s");
    project.up(3);
    release(&project, "v1", "v1");
    project.up(0);
    assert_eq!(state_image(&project), "v1");

    // Someone's apply holds the state lock for 8 seconds.
    let mut holder = apply_by_hand(&project, "v1", "8");
    let lock = project.file("state/infra-app-prod/.terraform.tfstate.lock.info");
    wait_for("the lock to be taken", Duration::from_secs(20), || {
        lock.exists()
    });
    release(&project, "v2", "v2");
    let run = project.up(0);
    assert!(holder.wait().unwrap().success());
    assert_eq!(state_image(&project), "v2", "{run}");
    let messages = fetch_messages(&project);
    assert!(
        messages
            .iter()
            .any(|m| m.contains("Error acquiring the state lock")
                && m.contains("not counted as a failure")),
        "{messages:?}"
    );
    assert_eq!(project.instance("app", "prod")["status"], "CONVERGED");
}

#[test]
fn a_rollback_on_an_approval_gated_runtime_waits_for_an_approval() {
    let project = infra(true, "2s");
    project.up(3);
    release(&project, "v1", "v1");
    project.up(3);
    approve(&project, "infra", "prod", "app");
    project.up(0);
    assert_eq!(state_image(&project), "v1");

    // v2's apply fails (its provisioner refuses the image): the version
    // fails and the rollback to v1 plans, then waits for a person.
    release(&project, "v2", "broken");
    project.up(3);
    approve(&project, "infra", "prod", "app");
    project.up(3);
    let prod = project.instance("app", "prod");
    assert_eq!(prod["status"], "WAITING_APPROVAL", "{prod}");
    let reason = prod["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("rollback to v1 after v2 failed"),
        "{reason}"
    );
    assert!(
        reason.contains("requires approval before applying v1"),
        "{reason}"
    );
    let explain = project.vergence(&["explain", "app", "--release-channel", "prod"]);
    assert!(
        explain.stdout.contains(
            "✗ requireApprovalBeforeApply: runtime tf requires approval before applying v1"
        ),
        "the rollback's own gates: {explain}"
    );
    let applies_before = project.applies();

    // The approval for the rollback (`approve` names v1 by itself).
    approve(&project, "infra", "prod", "app");
    // Rolled back because v2 failed: a failure for CI.
    project.up(2);
    assert_eq!(project.applies(), applies_before + 1);
    assert_eq!(project.instance("app", "prod")["status"], "ROLLED_BACK");
    assert_eq!(state_image(&project), "v1");
}

#[test]
fn a_state_changed_after_the_approval_makes_the_plan_stale_and_asks_again() {
    // With `serve` the approval is acted on at once, without planning again
    // first: the approved plan is applied, and found stale.
    let project = infra(true, "10m");
    let server = Server::start(&project, &[]);
    let admin = create_app_token(&project, "infra", &["admin"]);
    let path = project.path().to_str().unwrap().to_owned();
    let pushed = remote(&project, &server, &admin, &["configs", "push", &path]);
    assert_eq!(pushed.code, 0, "{pushed}");
    let released = remote(
        &project,
        &server,
        &admin,
        &[
            "release", "app", "v1", "--app", "infra", "--param", "image=v1",
        ],
    );
    assert_eq!(released.code, 0, "{released}");
    let prod = || {
        instances(&remote(
            &project,
            &server,
            &admin,
            &["status", "--app", "infra", "--output", "json"],
        ))
        .remove(0)
    };
    wait_for(
        "the plan to wait for approval",
        Duration::from_secs(60),
        || prod()["status"] == "WAITING_APPROVAL",
    );

    // Someone applies another image by hand, then v1's plan is approved.
    assert!(
        apply_by_hand(&project, "by-hand", "0")
            .wait()
            .unwrap()
            .success()
    );
    let approve = [
        "approve",
        "--app",
        "infra",
        "--release-channel",
        "prod",
        "--service",
        "app",
    ];
    assert_eq!(remote(&project, &server, &admin, &approve).code, 0);
    wait_for(
        "the stale plan to be noticed",
        Duration::from_secs(60),
        || {
            let events = remote(
                &project,
                &server,
                &admin,
                &["events", "--app", "infra", "--output", "json"],
            );
            events
                .stdout
                .contains("is stale (the state changed since it was made)")
        },
    );
    wait_for(
        "a new approval to be asked",
        Duration::from_secs(60),
        || {
            let now = prod();
            now["status"] == "WAITING_APPROVAL"
                && now["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("requires approval"))
        },
    );
    // The new plan replaces what was applied by hand.
    assert_eq!(prod()["plan"]["changes"][0], "-/+ terraform_data.app");
    assert_eq!(
        state_image(&project),
        "by-hand",
        "the stale plan applied nothing"
    );

    // The new plan (from by-hand to v1) is approved and applied.
    assert_eq!(remote(&project, &server, &admin, &approve).code, 0);
    wait_for("v1 to converge", Duration::from_secs(60), || {
        prod()["status"] == "CONVERGED"
    });
    assert_eq!(state_image(&project), "v1");
    let _ = server.stop();
}

/// `module: modules/site` (no `./`) would validate and then fail every
/// fetch with Terraform's "Invalid module source address": validate says
/// how to write the directory beside the config, and a bare word is never
/// a source.
#[test]
fn validate_says_to_write_a_module_directory_with_dot_slash() {
    let project = example();
    project.replace(
        "vergence.yaml",
        "module: ./modules/site",
        "module: modules/site",
    );
    let run = project.vergence(&["validate"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr.contains(
            "runtime.terraform.module: runtime terraform: \"modules/site\" is not a module source Terraform reads; the directory modules/site of the config is written \"./modules/site\""
        ),
        "{run}"
    );
    std::fs::rename(project.file("modules/site"), project.file("site")).unwrap();
    project.replace("vergence.yaml", "module: modules/site", "module: site");
    let run = project.vergence(&["validate"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr.contains("\"site\" is not a module source Terraform reads; the directory site of the config is written \"./site\""),
        "{run}"
    );
    project.replace("vergence.yaml", "module: site", "module: ./site");
    let run = project.vergence(&["validate"]);
    assert_eq!(run.code, 0, "{run}");
}
