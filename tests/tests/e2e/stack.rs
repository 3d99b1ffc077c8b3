//! The stack as deployed (docs/serverless.md, "What the deployed stack is
//! tested against"): template.yaml expanded by aws-sam-translator and
//! created in one moto server with IAM enforced, the three functions each
//! behind a Lambda runtime API with only its own role's credentials, API
//! Gateway's HTTP API, the worker's event source mapping and the
//! schedule's ticks ([`vergence_e2e::stack`]). The flows are the user's,
//! driven by the `vergence` CLI through `--endpoint` as a CI job and an
//! operator run it; every AWS call the functions make is judged by the
//! roles the template gives them, and none may be refused.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use vergence_e2e::stack::{Stack, WEBHOOK_SECRET};

/// One application, staging then prod (prod behind an approval), one
/// service whose runtime "deploys" by writing `<deployed>/<channel>.txt`
/// and whose exit-code fetch says whether that file still holds the
/// version: jobs the worker runs itself, with nothing from the config
/// directory (the serverless worker has none of it).
fn write_config(dir: &Path, deployed: &Path) {
    let deployed = deployed.display();
    std::fs::write(
        dir.join("shop.yaml"),
        format!(
            r#"application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{{runtime: files}}]
    - name: prod
      runtimes: [{{runtime: files}}]
      preconditions:
        - releaseChannelStable: {{releaseChannel: staging}}
        - manualApproval: {{name: prod-gate}}
---
runtime:
  name: files
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'mkdir -p {deployed} && printf %s "$VERGENCE_SERVICE_VERSION" > {deployed}/$VERGENCE_RELEASE_CHANNEL.txt']
  fetch:
    mode: exitCode
    pollInterval: 1s
    steadyStatePollInterval: 2s
    taskConfig:
      program:
        cmd: [sh, -c, 'test "$(cat {deployed}/$VERGENCE_RELEASE_CHANNEL.txt 2>/dev/null)" = "$VERGENCE_SERVICE_VERSION" || exit 2']
---
service:
  name: web
  runtime: files
"#
        ),
    )
    .unwrap();
}

/// `vergence --output json status` through the API.
fn status(stack: &Stack, dir: &Path, token: &str) -> Vec<Value> {
    let output = stack.vergence(dir, token, &["status", "--app", "shop", "--output", "json"]);
    assert!(output.status.success(), "status: {output:?}");
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    json["instances"].as_array().unwrap().clone()
}

fn instance<'a>(instances: &'a [Value], channel: &str) -> &'a Value {
    instances
        .iter()
        .find(|i| i["releaseChannel"] == channel)
        .unwrap_or_else(|| panic!("no instance in {channel}: {instances:?}"))
}

/// Ticks the schedule every second until `done` holds for the instances.
async fn until(
    stack: &Stack,
    dir: &Path,
    token: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let started = Instant::now();
    loop {
        stack.tick().await;
        let instances = status(stack, dir, token);
        if done(&instances) {
            return instances;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{what}: still {instances:#?}\nworker:\n{}",
            stack.worker.logs().join("\n")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn succeeded(output: &std::process::Output, what: &str) -> String {
    assert!(output.status.success(), "{what}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ci_pushes_a_release_the_schedule_rolls_it_out_an_approval_promotes_it_and_drift_is_healed()
{
    let Some(stack) = Stack::deploy(&[]).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let deployed = tempfile::tempdir().unwrap();
    write_config(dir.path(), deployed.path());
    let admin = stack.create_token(&["--app", "shop", "--scope", "admin"]);
    let ci = stack.create_token(&["--app", "shop", "--scope", "release"]);

    // CI: the config, then a release through the signed webhook.
    let pushed = stack.vergence(dir.path(), &admin, &["configs", "push", "."]);
    succeeded(&pushed, "configs push");
    let release = stack.vergence(
        dir.path(),
        &ci,
        &[
            "--webhook-secret",
            WEBHOOK_SECRET,
            "release",
            "web",
            "v1",
            "--app",
            "shop",
        ],
    );
    succeeded(&release, "release");

    // The schedule finds the instances; staging converges, prod waits.
    let instances = until(&stack, dir.path(), &admin, "staging converges on v1", |i| {
        instance(i, "staging")["status"] == "CONVERGED"
            && instance(i, "prod")["status"] == "WAITING_APPROVAL"
    })
    .await;
    assert_eq!(instance(&instances, "staging")["currentVersion"], "v1");
    assert_eq!(
        std::fs::read_to_string(deployed.path().join("staging.txt")).unwrap(),
        "v1"
    );

    // An operator approves prod through the API.
    let approved = stack.vergence(
        dir.path(),
        &admin,
        &[
            "approve",
            "--app",
            "shop",
            "--release-channel",
            "prod",
            "--service",
            "web",
        ],
    );
    succeeded(&approved, "approve");
    until(&stack, dir.path(), &admin, "prod converges on v1", |i| {
        instance(i, "prod")["status"] == "CONVERGED"
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(deployed.path().join("prod.txt")).unwrap(),
        "v1"
    );

    // Someone changes staging by hand: the scheduled checks find the
    // drift and the worker heals it.
    std::fs::write(deployed.path().join("staging.txt"), "by hand").unwrap();
    until(&stack, dir.path(), &admin, "staging healed", |_| {
        std::fs::read_to_string(deployed.path().join("staging.txt")).unwrap_or_default() == "v1"
    })
    .await;
    let events = succeeded(
        &stack.vergence(
            dir.path(),
            &admin,
            &[
                "events",
                "--app",
                "shop",
                "--service",
                "web",
                "--output",
                "json",
            ],
        ),
        "events",
    );
    assert!(events.contains("drift"), "{events}");

    let permissions = stack.permissions().await;
    for (function, used) in &permissions {
        assert!(
            used.denied.is_empty(),
            "{function} was refused: {:?}",
            used.denied
        );
    }
}
