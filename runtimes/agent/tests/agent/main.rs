//! End to end: the API and engine as `vergence serve` wires them (in this
//! process), `vergence-agent` as a real process, and the fake Kubernetes
//! API (the only fake) running the Jobs' commands as local processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod first_class;
mod harness;

use std::time::Duration;

use harness::{Agent, Server, eventually, kubeconfig};
use serde_json::json;
use vergence_fake_kube::FakeCluster;

fn config(marker: &std::path::Path, seconds: u32) -> String {
    format!(
        r#"
application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{{runtime: cluster-jobs}}]
    - name: prod
      runtimes: [{{runtime: cluster-jobs}}]
      preconditions:
        - releaseChannelStable: {{releaseChannel: staging}}
---
runtime:
  name: cluster-jobs
  runner:
    kubernetes: {{agent: prod-eu}}
  apply:
    taskConfig:
      program:
        image: registry.example/deployer:1
        cmd:
          - sh
          - -c
          - 'echo "$VERGENCE_RELEASE_CHANNEL $PVN_SERVICE_VERSION" >> "$MARKER"; sleep {seconds}; echo applied'
        env:
          MARKER: {marker}
---
service:
  name: web
  custom: {{}}
"#,
        marker = marker.display()
    )
}

fn marker_lines(marker: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(marker)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').next().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_runtime_on_kubernetes_waits_for_its_agent_then_converges_staging_then_prod() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = FakeCluster::start().await.unwrap();
    let server = Server::start(dir.path()).await;
    let marker = dir.path().join("applied");
    server.push_config(&config(&marker, 0)).await;

    // No agent yet: the instance waits and says why, no attempt is spent.
    let reason = eventually(Duration::from_secs(20), || async {
        let status = server.status().await;
        let staging = &status["instances"][0];
        (staging["status"] == "BLOCKED").then(|| staging["reason"].as_str().unwrap().to_owned())
    })
    .await;
    assert!(
        reason.contains("agent prod-eu has never connected"),
        "{reason}"
    );

    let kubeconfig = kubeconfig(dir.path(), cluster.url());
    let _agent = Agent::start(
        &server,
        &kubeconfig,
        "prod-eu",
        &server.agent_token("prod-eu").await,
    );
    server.await_converged(2, Duration::from_secs(60)).await;

    assert_eq!(
        marker_lines(&marker),
        vec!["staging", "prod"],
        "each channel applied once, in order"
    );
    let jobs = cluster.objects("Job", Some("default")).unwrap();
    assert_eq!(jobs.len(), 2, "one Kubernetes Job per apply");
    for job in &jobs {
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_eq!(job["metadata"]["labels"]["vergence.dev/agent"], "prod-eu");
        let env = job["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap();
        for name in ["VERGENCE_SERVICE", "PVN_SERVICE", "VERGENCE_JOB_ID"] {
            assert!(env.iter().any(|v| v["name"] == name), "{name} in {env:?}");
        }
    }
    let status = server.status().await;
    assert_eq!(status["agents"][0]["name"], "prod-eu");
    assert_eq!(status["agents"][0]["alive"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_token_can_do_only_its_own_agents_work() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;
    server
        .push_config(&config(&dir.path().join("applied"), 0))
        .await;
    let token = server.agent_token("prod-eu").await;
    let poll = json!({"version": "test", "waitSeconds": 0});
    let (status, _) = server
        .call("POST", "/v1/agents/prod-eu/poll", &token, Some(&poll))
        .await;
    assert_eq!(status, 200, "its own agent's work");
    for (method, path, body) in [
        ("POST", "/v1/agents/prod-us/poll", Some(&poll)),
        (
            "POST",
            "/v1/applications/shop/services/web/releases",
            Some(&json!({"version": "v2"})),
        ),
        (
            "POST",
            "/v1/applications/shop/services/web/release-channels/prod/approvals",
            Some(&json!({})),
        ),
        ("GET", "/v1/applications/shop/status", None),
        ("GET", "/v1/agents", None),
    ] {
        let (status, answer) = server.call(method, path, &token, body).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
    }
    let admin = server.admin_token().await;
    let (status, answer) = server
        .call("POST", "/v1/agents/prod-eu/poll", &admin, Some(&poll))
        .await;
    assert_eq!(
        status, 403,
        "an application token polls no agent's work: {answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_while_its_job_runs_is_replaced_and_the_job_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = FakeCluster::start().await.unwrap();
    let server = Server::start(dir.path()).await;
    let marker = dir.path().join("applied");
    server.push_config(&config(&marker, 6)).await;
    let kubeconfig = kubeconfig(dir.path(), cluster.url());
    let token = server.agent_token("prod-eu").await;

    let first = Agent::start(&server, &kubeconfig, "prod-eu", &token);
    // The staging Job's command is running: kill the agent under it.
    eventually(Duration::from_secs(30), || async {
        (marker_lines(&marker) == ["staging"]).then_some(())
    })
    .await;
    first.kill();
    let _second = Agent::start(&server, &kubeconfig, "prod-eu", &token);
    server.await_converged(2, Duration::from_secs(90)).await;

    assert_eq!(
        marker_lines(&marker),
        vec!["staging", "prod"],
        "staging's apply ran once"
    );
    assert_eq!(cluster.objects("Job", Some("default")).unwrap().len(), 2);
}

/// An idle agent costs what its polls cost (docs/cost.md): with the
/// defaults each poll is answered at once, one look for work instead of one
/// a second for 20 s that keeps an api function busy, and polls start every
/// 2 s, so a job queued for an idle agent reaches it within about 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_is_answered_at_once_polls_every_two_seconds_and_takes_a_job_within_them() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = FakeCluster::start().await.unwrap();
    let server = Server::start(dir.path()).await;
    let kubeconfig = kubeconfig(dir.path(), cluster.url());
    let token = server.agent_token("prod-eu").await;
    let _agent = Agent::start_with(&server, &kubeconfig, "prod-eu", &token, &[]);
    eventually(Duration::from_secs(20), || async {
        (!server.polls.lock().unwrap().check_ins.is_empty()).then_some(())
    })
    .await;
    // Idle for 9 s: polls at 0, 2, 4, 6 and 8 s.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let (check_ins, looks) = {
        let polls = server.polls.lock().unwrap();
        (polls.check_ins.clone(), polls.looks)
    };
    assert_eq!(
        looks,
        check_ins.len(),
        "every idle poll is answered at once, after one look for work"
    );
    assert!(
        (4..=6).contains(&check_ins.len()),
        "one poll every 2 s: {} in 9 s",
        check_ins.len()
    );
    let longest = check_ins.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(
        longest <= Duration::from_millis(3500),
        "a job waits at most one interval for the next poll: {longest:?} between polls"
    );

    // A job for it now is handed out at its next poll.
    let marker = dir.path().join("applied");
    let pushed = std::time::Instant::now();
    server.push_config(&config(&marker, 0)).await;
    let handed = eventually(Duration::from_secs(20), || async {
        server.polls.lock().unwrap().handed_out.first().copied()
    })
    .await;
    assert!(
        handed - pushed <= Duration::from_secs(4),
        "handed out {:?} after the push",
        handed - pushed
    );
    server.await_converged(2, Duration::from_secs(60)).await;
    assert_eq!(marker_lines(&marker), vec!["staging", "prod"]);
}
