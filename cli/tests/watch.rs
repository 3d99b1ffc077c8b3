//! `vergence up --watch`: keeps converging, heals drift at the fetch
//! interval without a rerun, and stops cleanly on Ctrl-C.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Project, wait_for};

#[test]
fn watch_heals_drift_at_the_steady_state_interval_and_stops_on_interrupt() {
    let project = Project::quickstart();
    project.replace(
        "runtimes.yaml",
        "    pollInterval: 2s\n    steadyStatePollInterval: 30s\n  parameters:\n    - name: service\n      required: true\n      string: {}\n    - name: replicas\n      int: {defaultValue: 1}\n---",
        "    pollInterval: 1s\n    steadyStatePollInterval: 1s\n  parameters:\n    - name: service\n      required: true\n      string: {}\n    - name: replicas\n      int: {defaultValue: 1}\n---",
    );
    let child = Command::new(env!("CARGO_BIN_EXE_vergence"))
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
