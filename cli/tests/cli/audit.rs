//! The audit trail keeps every write that succeeded, however many land at
//! once: real `vergence` processes on one state file.

use std::process::{Command, Stdio};

use crate::common::{Project, vergence_bin};

/// One service whose apply waits for an approval.
fn gated() -> Project {
    let project = Project::empty();
    project.write(
        "config.yaml",
        r#"runtime:
  name: gated
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'exit 0']
  requireApprovalBeforeApply: true
---
application:
  name: infra
  releaseChannels:
    - name: prod
      runtimes: [{runtime: gated}]
---
service:
  name: net
  runtime: gated
"#,
    );
    project
}

/// Starts 30 `vergence approve` of the service at once and waits for all.
fn approve_thirty_at_once(project: &Project) {
    let approvers: Vec<_> = (0..30)
        .map(|_| {
            Command::new(vergence_bin())
                .args(["approve", "--app", "infra", "--release-channel", "prod"])
                .args(["--service", "net", "--config"])
                .arg(project.path())
                .current_dir(project.path())
                .env_remove("RUST_LOG")
                .env_remove("VERGENCE_ENDPOINT")
                .env_remove("VERGENCE_TOKEN")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start vergence approve")
        })
        .collect();
    for approver in approvers {
        let output = approver.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn thirty_approvals_at_once_record_thirty_approval_events() {
    let project = gated();
    project.up(3);
    // Before ids were unique by construction, approvals in the same
    // millisecond shared one: each round lost one to three events, most
    // rounds. Three rounds make a loss all but certain to show.
    for round in 1..=3 {
        approve_thirty_at_once(&project);
        let recorded = project
            .events(&[])
            .into_iter()
            .filter(|e| e["type"] == "approvalRecorded")
            .count();
        assert_eq!(recorded, 30 * round, "every approval is in the audit trail");
    }
}
