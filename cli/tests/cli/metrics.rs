//! `vergence metrics` through the binary, on the local state and through
//! `vergence serve`'s API: every number checked against the times of the
//! events the same run recorded (`vergence events`).

use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use crate::common::server::{create_token, remote, serve_pushed, status_until};
use crate::common::{Project, Run};

/// staging → prod; the apply writes the version to deployed-<channel>.txt
/// and fails for v2 (one attempt only), whose rollback then goes back to
/// the version before; the exit-code fetch compares the file with the
/// desired version.
fn breaks_on_v2() -> Project {
    let project = Project::empty();
    project.write(
        "config.yaml",
        r#"runtime:
  name: files
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'if [ "$VERGENCE_SERVICE_VERSION" = v2 ]; then echo "v2 is broken" >&2; exit 1; fi; echo "$VERGENCE_SERVICE_VERSION" > "deployed-$VERGENCE_RELEASE_CHANNEL.txt"']
    retryPolicy: {baseInterval: 1s, maxInterval: 1s, maxAttempts: 1}
  fetch:
    mode: exitCode
    taskConfig:
      program:
        cmd: [sh, -c, 'test "$(cat "deployed-$VERGENCE_RELEASE_CHANNEL.txt" 2>/dev/null)" = "$VERGENCE_SERVICE_VERSION" || exit 2']
    pollInterval: 1s
    steadyStatePollInterval: 1s
---
application:
  name: demo
  releaseChannels:
    - name: staging
      runtimes: [{runtime: files}]
    - name: prod
      runtimes: [{runtime: files}]
      preconditions: [{releaseChannelStable: {releaseChannel: staging}}]
---
service:
  name: web
  runtime: files
"#,
    );
    project
}

fn json_of(run: &Run) -> Value {
    assert_eq!(run.code, 0, "{run}");
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {run}"))
}

fn at(event: &Value) -> Timestamp {
    event["at"].as_str().unwrap().parse().unwrap()
}

/// Seconds from `from` to `to`, to the millisecond, as the metrics count.
fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_millis() as f64 / 1000.0
}

/// The first event of `events` that `matches`.
fn first<'a>(events: &'a [Value], what: &str, matches: impl Fn(&Value) -> bool) -> &'a Value {
    events
        .iter()
        .find(|e| matches(e))
        .unwrap_or_else(|| panic!("no {what} in {events:#?}"))
}

fn pushed(events: &[Value], version: &str) -> Timestamp {
    at(first(events, "release", |e| {
        e["type"] == "releaseCreated" && e["version"] == version
    }))
}

fn converged(events: &[Value], channel: &str, version: &str) -> Timestamp {
    at(first(events, "convergence", |e| {
        e["type"] == "converged" && e["releaseChannel"] == channel && e["version"] == version
    }))
}

#[test]
fn metrics_measure_releases_a_failure_and_its_rollback_as_the_events_record_them() {
    let project = breaks_on_v2();
    // The config's own version first, then v1; v2 fails in staging and is
    // rolled back; v3 reaches prod.
    project.up(0);
    for (version, exit) in [("v1", 0), ("v2", 2), ("v3", 0)] {
        assert_eq!(project.vergence(&["release", "web", version]).code, 0);
        let run = project.vergence(&["up"]);
        assert_eq!(run.code, exit, "up after {version}:\n{run}");
    }

    let metrics = json_of(&project.vergence(&["metrics", "--output", "json"]));
    let events = project.events(&[]);

    assert_eq!(metrics["application"], Value::Null, "{metrics:#}");
    assert_eq!(
        metrics["lastReleaseChannels"],
        serde_json::json!({"demo": "prod"})
    );
    assert_eq!(metrics["windowDays"], 30.0);
    let since: Timestamp = metrics["since"].as_str().unwrap().parse().unwrap();
    let until: Timestamp = metrics["until"].as_str().unwrap().parse().unwrap();
    assert_eq!(seconds(since, until), 30.0 * 86_400.0);
    // The config's version, v1 and v3 reached prod; v2 never did.
    assert_eq!(metrics["deployments"], 3, "{metrics:#}");
    assert_eq!(metrics["deploymentFrequencyPerDay"], 3.0 / 30.0);
    // Lead times: v1's and v3's, from their push to prod.
    let v1 = seconds(pushed(&events, "v1"), converged(&events, "prod", "v1"));
    let v3 = seconds(pushed(&events, "v3"), converged(&events, "prod", "v3"));
    let lead = &metrics["leadTimeSeconds"];
    assert_eq!(lead["count"], 2, "{metrics:#}");
    let median = lead["median"].as_f64().unwrap();
    assert!(
        (median - (v1 + v3) / 2.0).abs() < 1e-9,
        "{median} of {v1}, {v3}"
    );
    assert_eq!(lead["p90"].as_f64().unwrap(), v1.max(v3), "the 2nd of 2");
    // v2 failed: one of three releases.
    assert_eq!(metrics["releases"], 3);
    assert_eq!(metrics["failedReleases"], 1);
    assert_eq!(metrics["changeFailureRate"], 1.0 / 3.0);
    // Restored when staging converged on v1 again, from the failure.
    let failed = at(first(&events, "failure", |e| {
        e["releaseChannel"] == "staging"
            && (e["type"] == "rollbackStarted"
                || (e["type"] == "statusChanged" && e["to"] == "FAILED"))
    }));
    let back = at(first(&events, "restore", |e| {
        e["type"] == "converged" && e["releaseChannel"] == "staging" && at(e) > failed
    }));
    let restore = &metrics["timeToRestoreSeconds"];
    assert_eq!(restore["count"], 1, "{metrics:#}");
    assert_eq!(restore["median"].as_f64().unwrap(), seconds(failed, back));

    // The same for people, and for the application by name.
    let run = project.vergence(&["metrics", "--app", "demo"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.starts_with("demo, the last 30 days (")
            && run.stdout.contains("converged in prod"),
        "{run}"
    );
    for row in [
        "0.10 per day",
        "3 deployment(s)",
        "2 release(s) deployed",
        "33.3%",
        "1 of 3 release(s) failed",
        "1 failure(s) restored",
    ] {
        assert!(run.stdout.contains(row), "no {row:?}:\n{run}");
    }
}

#[test]
fn metrics_refuse_a_window_that_is_not_a_duration_and_an_unknown_application() {
    let project = breaks_on_v2();
    project.up(0);
    let run = project.vergence(&["metrics", "--since", "1mo"]);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("not months or years"), "{run}");
    let run = project.vergence(&["metrics", "--app", "shop"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("application shop not found"), "{run}");
    // Nothing released yet: measures without data are null, not NaN.
    let metrics = json_of(&project.vergence(&["metrics", "--since", "1d", "--output", "json"]));
    assert_eq!(metrics["windowDays"], 1.0);
    assert_eq!(metrics["releases"], 0);
    assert_eq!(metrics["changeFailureRate"], Value::Null);
    assert_eq!(metrics["leadTimeSeconds"]["median"], Value::Null);
    assert_eq!(metrics["leadTimeSeconds"]["p90"], Value::Null);
    assert_eq!(metrics["timeToRestoreSeconds"]["median"], Value::Null);
    assert_eq!(metrics["deployments"], 1, "the config's own version");
}

#[test]
fn a_served_api_answers_metrics_as_the_local_state_does() {
    let project = Project::quickstart();
    let (server, _admin, _) = serve_pushed(&project);
    let ci = create_token(&project, &["release"]);
    let all_converged = |status: &[Value]| {
        status.len() == 6
            && status
                .iter()
                .all(|i| i["status"] == "CONVERGED" && i["desiredVersion"] == i["currentVersion"])
    };
    let serving = (&project, &server, ci.as_str());
    // The config's versions first, so that each service deploys it to prod.
    let timeout = Duration::from_secs(90);
    status_until(
        serving,
        "shop",
        ("config not converged", timeout),
        all_converged,
    );
    let released = remote(
        &project,
        &server,
        &ci,
        &["release", "web", "v2", "--app", "shop"],
    );
    assert_eq!(released.code, 0, "{released}");
    status_until(serving, "shop", ("v2 not converged", timeout), |status| {
        all_converged(status)
            && status
                .iter()
                .any(|i| i["service"] == "web" && i["currentVersion"] == "v2")
            && status
                .iter()
                .filter(|i| i["service"] == "web")
                .all(|i| i["currentVersion"] == "v2")
    });

    // Without --app, the token's application.
    let served = json_of(&remote(
        &project,
        &server,
        &ci,
        &["metrics", "--output", "json", "--since", "7d"],
    ));
    let events = project.events(&["--app", "shop"]);
    assert_eq!(served["application"], "shop", "{served:#}");
    assert_eq!(served["windowDays"], 7.0);
    assert_eq!(
        served["deployments"], 4,
        "three config versions and v2: {served:#}"
    );
    assert_eq!(served["deploymentFrequencyPerDay"], 4.0 / 7.0);
    let lead = seconds(pushed(&events, "v2"), converged(&events, "prod", "v2"));
    assert_eq!(served["leadTimeSeconds"]["median"].as_f64().unwrap(), lead);
    assert_eq!(served["leadTimeSeconds"]["p90"].as_f64().unwrap(), lead);
    assert_eq!(served["leadTimeSeconds"]["count"], 1);
    assert_eq!(
        (&served["releases"], &served["failedReleases"]),
        (&1.into(), &0.into())
    );
    assert_eq!(served["changeFailureRate"], 0.0);
    assert_eq!(served["timeToRestoreSeconds"]["count"], 0);

    // The local state measures the same, but for the moment it was asked.
    let local = json_of(&project.vergence(&[
        "metrics", "--app", "shop", "--since", "7d", "--output", "json",
    ]));
    let without_times = |metrics: &Value| {
        let mut metrics = metrics.clone();
        let object = metrics.as_object_mut().unwrap();
        object.remove("since");
        object.remove("until");
        metrics
    };
    assert_eq!(without_times(&local), without_times(&served));

    let (status, output) = server.stop();
    assert!(
        status.success(),
        "serve exited with {status}; output:\n{output}"
    );
}
