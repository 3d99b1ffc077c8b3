//! What a `vergence` built without a cloud feature (`cargo build
//! --no-default-features`) does with the parts of a config or command line
//! that need it: it keeps the options, and says which build runs them
//! instead of ignoring them.

use crate::common::Project;

/// An ECS runtime and a Cloud Run runtime, one service on each.
#[cfg(not(all(feature = "aws", feature = "cloud-run")))]
const CLOUD_RUNNERS: &str = r#"
application:
  name: shop
  releaseChannels:
    - name: prod
      runtimes: [{runtime: on-ecs}, {runtime: on-cloud-run}]
---
runtime:
  name: on-ecs
  runner:
    ecs: {cluster: jobs, region: eu-west-1, subnets: [subnet-0a1b2c3d]}
  apply:
    taskConfig:
      program: {image: "deploy-tools:1.4.0", cmd: [./deploy.sh]}
---
runtime:
  name: on-cloud-run
  runner:
    cloudRun: {project: acme-prod, region: europe-west1}
  apply:
    taskConfig:
      program: {image: "deploy-tools:1.4.0", cmd: [./deploy.sh]}
---
service: {name: web, runtime: on-ecs}
---
service: {name: batch, runtime: on-cloud-run}
"#;

#[test]
fn every_build_keeps_the_cloud_options_so_scripts_parse_the_same() {
    let project = Project::empty();
    let up = project.vergence(&["up", "--help"]);
    assert!(up.stdout.contains("--artifact-bucket"), "{up}");
    let token = project.vergence(&["token", "create", "--help"]);
    assert!(token.stdout.contains("--dynamodb-table"), "{token}");
}

#[cfg(not(feature = "aws"))]
#[test]
fn without_aws_an_ecs_job_waits_saying_which_build_runs_it() {
    let project = Project::empty();
    project.write("shop.yaml", CLOUD_RUNNERS);
    let run = project.up(3);
    let web = project.instance("web", "prod");
    let reason = web["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("built without the `aws` feature"),
        "{web}\n{run}"
    );
}

#[cfg(not(feature = "cloud-run"))]
#[test]
fn without_cloud_run_a_cloud_run_job_waits_saying_which_build_runs_it() {
    let project = Project::empty();
    project.write("shop.yaml", CLOUD_RUNNERS);
    let run = project.up(3);
    let batch = project.instance("batch", "prod");
    let reason = batch["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("built without the `cloud-run` feature"),
        "{batch}\n{run}"
    );
}

#[cfg(not(feature = "aws"))]
#[test]
fn without_aws_an_artifact_bucket_is_refused_before_anything_runs() {
    let project = Project::quickstart();
    let run = project.vergence(&["up", "--artifact-bucket", "plans"]);
    assert_eq!(run.code, 64, "{run}");
    assert!(run.stderr.contains("--artifact-bucket"), "{run}");
    assert!(run.stderr.contains("without the `aws` feature"), "{run}");
    assert!(!project.file(".vergence").exists(), "no state was made");
}

#[cfg(not(feature = "aws"))]
#[test]
fn without_aws_a_token_for_a_dynamodb_table_is_refused_not_made_locally() {
    let project = Project::empty();
    let run = project.vergence(&[
        "token",
        "create",
        "--app",
        "shop",
        "--scope",
        "release",
        "--dynamodb-table",
        "vergence-state",
    ]);
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stdout.is_empty(), "no token: {run}");
    assert!(
        run.stderr
            .contains("--dynamodb-table: this vergence was built without the `aws` feature"),
        "{run}"
    );
    assert!(!project.file(".vergence").exists(), "no local state");
}
