//! The lambda runner (docs/runners/lambda.md) through the `vergence`
//! binary: its config checks, and jobs run as invocations of a function
//! served by `cargo lambda watch` — the real Lambda runtime and Invoke
//! APIs — running this build's `vergence-wrapper` in its Lambda mode, with
//! the job's files in a moto S3 bucket. `vergence` calls both with the
//! real AWS SDK (`AWS_ENDPOINT_URL_LAMBDA`, `AWS_ENDPOINT_URL`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use vergence_testkit::{CARGO_LAMBDA, WrapperFunction, free_port};

use crate::common::{Project, Run, finish, vergence_bin};

/// The function `cargo lambda watch` serves.
const FUNCTION: &str = WrapperFunction::NAME;

fn validate(config: &str) -> Run {
    let project = Project::empty();
    project.write("config.yaml", config);
    project.vergence(&["validate"])
}

fn runtime_on_lambda(runner: &str, apply_extra: &str) -> String {
    format!(
        r#"runtime:
  name: fn
  runner:
{runner}
  apply:
{apply_extra}    taskConfig:
      program:
        cmd: [./deploy.sh]
---
application:
  name: demo
  releaseChannels:
    - name: staging
      runtimes: [{{runtime: fn}}]
---
service:
  name: web
  runtime: fn
"#
    )
}

#[test]
fn a_job_timeout_over_fifteen_minutes_on_the_lambda_runner_is_refused_pointing_to_ecs_or_cloud_run()
{
    let run = validate(&runtime_on_lambda(
        "    lambda: {function: deployer, region: eu-west-1}",
        "    timeout: 20m\n",
    ));
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("runtime.apply.timeout"), "{run}");
    assert!(
        run.stderr
            .contains("longer than a Lambda invocation can run (15 minutes)"),
        "{run}"
    );
    assert!(run.stderr.contains("ecs or cloudRun runner"), "{run}");
    // Fifteen minutes is allowed, and is the default of an apply there
    // (30 minutes elsewhere, which would be refused).
    let run = validate(&runtime_on_lambda(
        "    lambda: {function: deployer, region: eu-west-1}",
        "    timeout: 15m\n",
    ));
    assert_eq!(run.code, 0, "{run}");
    let run = validate(&runtime_on_lambda(
        "    lambda: {function: deployer, region: eu-west-1}",
        "",
    ));
    assert_eq!(run.code, 0, "{run}");
}

#[test]
fn the_lambda_runner_block_refuses_unknown_keys_an_image_and_a_missing_function() {
    let run = validate(&runtime_on_lambda(
        "    lambda: {function: deployer, regoin: eu-west-1, memory: 512}",
        "",
    ));
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr
            .contains("unknown key 'regoin'; did you mean 'region'?"),
        "{run}"
    );
    assert!(run.stderr.contains("unknown key 'memory'"), "{run}");
    let run = validate(&runtime_on_lambda("    lambda: {region: eu-west-1}", ""));
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr
            .contains("runtime.runner.lambda.function: the lambda runner needs function"),
        "{run}"
    );
    let run = validate(&runtime_on_lambda(
        "    lambda: {function: 'arn:aws:lambda:eu-west-1:123456789012:function:deployer', region: us-east-1}",
        "",
    ));
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr
            .contains("differs from the region of the function's ARN (eu-west-1)"),
        "{run}"
    );
    let with_image = runtime_on_lambda("    lambda: {function: deployer}", "").replace(
        "        cmd: [./deploy.sh]",
        "        image: deploy:1\n        cmd: [./deploy.sh]",
    );
    let run = validate(&with_image);
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr
            .contains("runtime.apply.taskConfig.program.image"),
        "{run}"
    );
    assert!(run.stderr.contains("remove image"), "{run}");
    let with_secret = runtime_on_lambda("    lambda: {function: deployer}", "")
        .replace(
            "---\napplication:",
            "  parameters:\n    - name: token\n      secret: {}\n---\napplication:",
        )
        .replace(
            "  runtime: fn\n",
            "  runtime: fn\n  custom:\n    parameterValues:\n      - name: token\n        secret: {fromEnv: TOKEN}\n",
        );
    let run = validate(&with_secret);
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr
            .contains("the lambda runner, which reads no secret sources"),
        "{run}"
    );
}

/// The YAML blocks of docs/runners/lambda.md under its "Example" heading.
fn docs_example() -> String {
    let doc = std::fs::read_to_string(vergence_testkit::workspace().join("docs/runners/lambda.md"))
        .unwrap();
    let example = doc
        .split("\n## ")
        .find(|section| section.starts_with("Example"))
        .expect("an Example section in docs/runners/lambda.md");
    let blocks: Vec<&str> = example
        .split("```yaml\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap())
        .collect();
    assert!(!blocks.is_empty(), "no yaml block in the Example section");
    blocks.join("---\n")
}

#[test]
fn the_example_of_the_lambda_runner_docs_validates() {
    let run = validate(&docs_example());
    assert_eq!(run.code, 0, "docs/runners/lambda.md's example:\n{run}");
}

/// Creates `bucket` in moto (an unsigned PUT, which moto takes).
fn create_bucket(moto: &str, bucket: &str) {
    let address = moto.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "PUT /{bucket} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// One channel on `function`: the apply records the version and prints
/// it, failing for v2 with a message on stderr; the exit-code fetch
/// compares the record with the desired version.
fn lambda_project(function: &str) -> Project {
    let project = Project::empty();
    let deployed = project.file("deployed.txt");
    let deployed = deployed.display();
    project.write(
        "config.yaml",
        &format!(
            r#"runtime:
  name: fn
  runner:
    lambda: {{function: {function}, region: us-east-1}}
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'if [ "$PVN_SERVICE_VERSION" = v2 ]; then echo "v2 cannot start: port 8080 in use" >&2; exit 3; fi; echo "$PVN_SERVICE_VERSION" > {deployed}; echo "applied $PVN_SERVICE_VERSION of $PVN_SERVICE"']
    retryPolicy: {{baseInterval: 1s, maxInterval: 1s, maxAttempts: 1}}
  fetch:
    mode: exitCode
    taskConfig:
      program:
        cmd: [sh, -c, 'test "$(cat {deployed} 2>/dev/null)" = "$VERGENCE_SERVICE_VERSION" || exit 2']
---
application:
  name: demo
  releaseChannels:
    - name: staging
      runtimes: [{{runtime: fn}}]
---
service:
  name: web
  runtime: fn
"#
        ),
    );
    project
}

/// `vergence ARGS` with the SDK pointed at moto (S3) and at the function.
fn vergence_on(project: &Project, function: &WrapperFunction, moto: &str, args: &[&str]) -> Run {
    let child = Command::new(vergence_bin())
        .args(args)
        .arg("--config")
        .arg(project.path())
        .current_dir(project.path())
        .env_remove("RUST_LOG")
        .env_remove("VERGENCE_ENDPOINT")
        .env_remove("VERGENCE_TOKEN")
        .env("AWS_ENDPOINT_URL", moto)
        .env("AWS_ENDPOINT_URL_LAMBDA", &function.url)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_PROFILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vergence");
    finish(child, Duration::from_secs(240), "vergence")
}

/// What `vergence explain` says of the instance: its last job of each
/// kind, with exit code and the end of stderr, among the rest.
fn explain(project: &Project) -> String {
    let run = project.vergence(&["explain", "web", "--release-channel", "staging"]);
    assert_eq!(run.code, 0, "{run}");
    run.stdout
}

#[test]
fn a_custom_runtime_on_the_lambda_runner_converges_and_a_failing_apply_reports_its_exit_code_and_stderr()
 {
    let Some(moto) = vergence_testkit::endpoint(vergence_testkit::SQS_URL) else {
        return;
    };
    let Some(cargo_lambda) = vergence_testkit::endpoint(CARGO_LAMBDA) else {
        return;
    };
    let project = lambda_project(FUNCTION);
    let function = WrapperFunction::start(&cargo_lambda, project.path());
    let bucket = vergence_testkit::unique_name("vergence-lambda");
    create_bucket(&moto, &bucket);
    let up = ["up", "--artifact-bucket", bucket.as_str()];

    assert_eq!(project.vergence(&["release", "web", "v1"]).code, 0);
    let run = vergence_on(&project, &function, &moto, &up);
    assert_eq!(run.code, 0, "{run}");
    let web = project.instance("web", "staging");
    assert_eq!(web["status"], "CONVERGED", "{run}\n{web}");
    assert_eq!(
        project.read("deployed.txt"),
        "v1\n",
        "the apply ran in the function"
    );
    let explained = explain(&project);
    assert!(
        explained.contains("apply of v1 (attempt 1): exited 0 at"),
        "{explained}"
    );
    // The fetches ran there too: the last found v1 (where the first found
    // nothing and exited 2, or there would have been no apply).
    assert!(
        explained.contains("fetch of v1 (attempt 1): exited 0 at"),
        "{explained}"
    );

    assert_eq!(project.vergence(&["release", "web", "v2"]).code, 0);
    let run = vergence_on(&project, &function, &moto, &up);
    let explained = explain(&project);
    assert!(
        explained.contains("apply of v2 (attempt 1): exited 3 at"),
        "{explained}\n{run}"
    );
    assert!(
        explained.contains("| v2 cannot start: port 8080 in use"),
        "the stderr tail: {explained}"
    );
    assert_eq!(project.read("deployed.txt"), "v1\n");
}

#[test]
fn without_an_artifact_bucket_a_lambda_job_does_not_start_and_says_to_give_one() {
    let project = Project::empty();
    project.write(
        "config.yaml",
        &runtime_on_lambda("    lambda: {function: deployer, region: us-east-1}", "")
            .replace("cmd: [./deploy.sh]", "cmd: [sh, -c, 'exit 0']"),
    );
    assert_eq!(project.vergence(&["release", "web", "v1"]).code, 0);
    // Nothing answers here: the job must fail before any call to AWS.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let child = Command::new(vergence_bin())
        .args(["up", "--config"])
        .arg(project.path())
        .current_dir(project.path())
        .env_remove("VERGENCE_ARTIFACT_BUCKET")
        .env("AWS_ENDPOINT_URL", &nowhere)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = finish(child, Duration::from_secs(120), "vergence up");
    let web = project.instance("web", "staging");
    assert_eq!(web["status"], "FAILED", "{run}");
    assert!(
        web["reason"]
            .as_str()
            .unwrap()
            .contains("the lambda runner needs an S3 artifact bucket"),
        "{web}"
    );
    assert!(
        web["reason"]
            .as_str()
            .unwrap()
            .contains("--artifact-bucket"),
        "{web}"
    );
}
