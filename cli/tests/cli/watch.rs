//! `vergence up --watch`: keeps converging, heals drift at the fetch
//! interval without a rerun, and stops cleanly on Ctrl-C.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Project, wait_for};

#[test]
fn watch_heals_drift_at_the_steady_state_interval_and_stops_on_interrupt() {
    let project = Project::quickstart();
    project.replace(
        "runtimes.yaml",
        "    pollInterval: 2s\n    steadyStatePollInterval: 30s\n  parameters:\n    - name: service\n      required: true\n      string: {}\n    - name: replicas\n      int: {defaultValue: 1}\n---",
        "    pollInterval: 1s\n    steadyStatePollInterval: 1s\n  parameters:\n    - name: service\n      required: true\n      string: {}\n    - name: replicas\n      int: {defaultValue: 1}\n---",
    );
    let child = Command::new(crate::common::vergence_bin())
        .args(["up", "--watch", "--config"])
        .arg(project.path())
        .current_dir(project.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let api = project.file("deployed/prod/api.txt");
    wait_for("prod to converge", Duration::from_secs(30), || {
        api.exists() && project.status().iter().all(|i| i["status"] == "CONVERGED")
    });
    let good = project.read("deployed/prod/api.txt");
    std::fs::write(&api, "tampered\n").unwrap();
    wait_for(
        "the watcher to heal the drift",
        Duration::from_secs(30),
        || std::fs::read_to_string(&api).is_ok_and(|text| text == good),
    );

    // SIGINT, as Ctrl-C would send.
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(130), "{stdout}");
    assert!(stdout.contains("drift detected"), "{stdout}");
    let drift = project.events(&["--service", "api", "--release-channel", "prod"]);
    assert!(drift.iter().any(|e| e["type"] == "driftDetected"));
}

/// `up --watch` on the quickstart with a prod approval gate and an alert
/// protection, until stopped; its fetches are a minute apart, so only a
/// wake-up explains a quick reaction.
struct Watching {
    project: Project,
    child: std::process::Child,
}

impl Watching {
    fn start(project: Project) -> Self {
        let child = Command::new(crate::common::vergence_bin())
            .args(["up", "--watch", "--config"])
            .arg(project.path())
            .current_dir(project.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self { project, child }
    }

    fn status_of(&self, service: &str, channel: &str) -> String {
        self.project.instance(service, channel)["status"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Waits at most 10 s: two store polls of the watcher, and the apply.
    fn expect(&self, service: &str, channel: &str, status: &str, after: &str) {
        wait_for(
            &format!("{service}@{channel} to be {status} {after}"),
            Duration::from_secs(10),
            || self.status_of(service, channel) == status,
        );
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The quickstart with prod guarded by the alert `error-rate` (and a
/// manual approval gate when `approval`), and steady-state fetches a
/// minute apart.
fn gated_quickstart(approval: bool) -> Project {
    let project = Project::quickstart();
    let gate = if approval {
        "        - manualApproval: {name: prod-gate}\n"
    } else {
        ""
    };
    project.replace(
        "application.yaml",
        "        # - manualApproval: {name: prod-gate}",
        &format!(
            "{gate}      protections:\n        - ref: {{name: quiet}}\n          lifecycle: [{{deployment: {{failureBehavior: BLOCK}}}}]"
        ),
    );
    project.write(
        "protections.yaml",
        "protection:\n  name: quiet\n  alert: error-rate\n",
    );
    let runtimes = project.read("runtimes.yaml");
    project.write(
        "runtimes.yaml",
        &runtimes.replace(
            "steadyStatePollInterval: 30s",
            "steadyStatePollInterval: 60s",
        ),
    );
    project
}

/// Waits for every prod instance to have `status`.
fn all_prod(project: &Project, status: &str) {
    wait_for(
        &format!("every prod instance to be {status}"),
        Duration::from_secs(60),
        || {
            project.file(".vergence/state.db").exists()
                && project
                    .status()
                    .iter()
                    .filter(|i| i["releaseChannel"] == "prod" && i["status"] == status)
                    .count()
                    == 3
        },
    );
}

#[test]
fn an_approval_from_another_terminal_is_acted_on_within_seconds() {
    let watching = Watching::start(gated_quickstart(true));
    let project = &watching.project;
    all_prod(project, "WAITING_APPROVAL");
    let run = project.vergence(&[
        "approve",
        "--app",
        "shop",
        "--release-channel",
        "prod",
        "--service",
        "migrations",
    ]);
    assert_eq!(run.code, 0, "{run}");
    watching.expect("migrations", "prod", "CONVERGED", "after the approval");
}

#[test]
fn an_alert_or_a_resume_from_another_terminal_is_acted_on_within_seconds() {
    let project = gated_quickstart(false);
    let ok = |args: &[&str]| {
        let run = project.vergence(args);
        assert_eq!(run.code, 0, "{run}");
    };
    ok(&["configs", "push"]);
    ok(&["alert", "set", "error-rate", "firing"]);
    let watching = Watching::start(project);
    let project = &watching.project;
    let ok = |args: &[&str]| {
        let run = project.vergence(args);
        assert_eq!(run.code, 0, "{run}");
    };
    all_prod(project, "BLOCKED");
    ok(&["alert", "set", "error-rate", "resolved"]);
    // migrations has no fetch: only a wake-up steps it again.
    watching.expect("migrations", "prod", "CONVERGED", "once the alert resolved");

    let prod = ["--app", "shop", "--release-channel", "prod"];
    ok(&[&["pause", "--service", "api"][..], &prod].concat());
    ok(&["release", "api", "v2"]);
    watching.expect("api", "prod", "PAUSED", "after the release");
    ok(&[&["resume", "--service", "api"][..], &prod].concat());
    watching.expect("api", "prod", "CONVERGED", "after the resume");
}
