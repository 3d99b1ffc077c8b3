//! Break-glass through the binary: a freeze holds prod; `vergence
//! override` with a reason lets the one version through, on the record;
//! without a reason, or from a token without the `override` scope, nothing
//! changes. Locally and through `vergence serve`'s API alike.

use std::time::Duration;

use serde_json::Value;

use crate::common::Project;
use crate::common::server::{create_token, remote, serve_pushed, status_until};

/// shop/api in prod, frozen from 2020 to 2100; the apply writes the
/// version to deployed/prod.txt.
fn frozen() -> Project {
    let project = Project::empty();
    project.write(
        "scripts/apply.sh",
        "#!/bin/sh\nset -eu\nmkdir -p deployed\necho \"$VERGENCE_SERVICE_VERSION\" > \"deployed/$VERGENCE_RELEASE_CHANNEL.txt\"\n",
    );
    project.write(
        "config.yaml",
        r#"runtime:
  name: files
  apply:
    taskConfig:
      program:
        cmd: [sh, ./scripts/apply.sh]
---
application:
  name: shop
  releaseChannels:
    - name: prod
      runtimes: [{runtime: files}]
      deniedTimes:
        - {name: change-freeze, start: "2020-01-01T00:00:00Z", end: "2100-01-01T00:00:00Z"}
---
service:
  name: api
  runtime: files
"#,
    );
    project
}

/// `vergence override api --release-channel prod ARGS`.
fn override_prod(project: &Project, args: &[&str]) -> crate::common::Run {
    let mut all = vec!["override", "api", "--release-channel", "prod"];
    all.extend_from_slice(args);
    project.vergence(&all)
}

fn overridden_events(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "overridden")
        .map(|e| format!("{}: {}", e["actor"], e["message"]))
        .collect()
}

#[test]
fn an_override_lets_one_version_through_a_freeze_with_its_reason_on_the_record() {
    let project = frozen();
    // 3: something waits for a person (here, the freeze to end).
    project.up(3);
    let prod = project.instance("api", "prod");
    assert_eq!(prod["status"], "BLOCKED", "{prod}");
    assert!(!project.file("deployed/prod.txt").exists());

    // No reason: refused, nothing stored.
    let run = override_prod(&project, &["--reason", " "]);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("needs a reason"), "{run}");
    // Another version than the one headed for: refused.
    let run = override_prod(&project, &["--reason", "x", "--version", "v9"]);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("not v9"), "{run}");
    assert!(overridden_events(&project.events(&[])).is_empty());
    project.up(3);
    assert!(!project.file("deployed/prod.txt").exists());

    let run = override_prod(&project, &["--reason", "incident 4711", "--for", "1h"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .contains("recorded with the reason \"incident 4711\""),
        "{run}"
    );
    let shown = project.instance("api", "prod");
    assert_eq!(
        shown["windowOverride"]["reason"], "incident 4711",
        "{shown}"
    );
    let explain = project.vergence(&["explain", "api", "--release-channel", "prod"]);
    assert!(
        explain
            .stdout
            .contains("freezes and windows overridden for"),
        "{explain}"
    );
    project.up(0);
    let prod = project.instance("api", "prod");
    assert_eq!(prod["status"], "CONVERGED", "{prod}");
    assert!(project.file("deployed/prod.txt").exists());
    // Converged, it is spent: no longer shown.
    assert!(prod.get("windowOverride").is_none(), "{prod}");
    let events = overridden_events(&project.events(&[]));
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains("incident 4711"), "{events:?}");
    // Converged, there is nothing left to let through.
    let run = override_prod(&project, &["--reason", "again"]);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("already converged on"), "{run}");

    // The next version waits for the freeze again.
    let run = project.vergence(&["release", "api", "v2"]);
    assert_eq!(run.code, 0, "{run}");
    project.up(3);
    assert_eq!(project.instance("api", "prod")["status"], "BLOCKED");
}

#[test]
fn through_the_api_only_an_override_token_breaks_the_glass() {
    let project = frozen();
    let (server, admin, _) = serve_pushed(&project);
    status_until(
        (&project, &server, &admin),
        "shop",
        ("prod blocked by the freeze", Duration::from_secs(30)),
        |s| s.iter().any(|i| i["status"] == "BLOCKED"),
    );
    let args = [
        "override",
        "api",
        "--app",
        "shop",
        "--release-channel",
        "prod",
        "--reason",
        "incident 4711",
    ];
    let release = create_token(&project, &["release"]);
    let run = remote(&project, &server, &release, &args);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("lacks scope override"), "{run}");
    let on_call = create_token(&project, &["override"]);
    let run = remote(&project, &server, &on_call, &args);
    assert_eq!(run.code, 0, "{run}");
    status_until(
        (&project, &server, &admin),
        "shop",
        ("prod converged through the freeze", Duration::from_secs(30)),
        |s| s.iter().any(|i| i["status"] == "CONVERGED"),
    );
    let events = remote(
        &project,
        &server,
        &admin,
        &[
            "events", "--app", "shop", "--output", "json", "--limit", "1000",
        ],
    );
    let events: Value = serde_json::from_str(&events.stdout).unwrap();
    let overridden = overridden_events(events["events"].as_array().unwrap());
    assert_eq!(overridden.len(), 1, "{overridden:?}");
    assert!(overridden[0].starts_with("\"api:"), "{overridden:?}");
    drop(server);
}
