//! `vergence serve` and remote mode, end to end: the real server on a free
//! port, tokens from `vergence token create`, the quickstart config and a
//! release pushed over HTTP, status read back, scopes enforced.

use std::time::{Duration, Instant};

use crate::common::Project;
use crate::common::server::{Server, create_token, instances, remote, serve_pushed, status_until};
use serde_json::Value;

#[test]
fn ci_pushes_config_and_release_to_a_served_api_and_reads_status_back() {
    let project = Project::quickstart();
    let (server, admin, pushed) = serve_pushed(&project);
    let ci = create_token(&project, &["release"]);
    assert!(pushed.stdout.contains("6 instance(s) added"), "{pushed}");

    let released = remote(
        &project,
        &server,
        &ci,
        &["release", "web", "v2", "--app", "shop"],
    );
    assert_eq!(released.code, 0, "{released}");
    assert!(
        released.stdout.contains("release v2 of shop/web recorded"),
        "{released}"
    );

    // The engine in the server converges staging, then prod.
    let converged = status_until(
        (&project, &server, &ci),
        "shop",
        ("not converged in time", Duration::from_secs(90)),
        |status| {
            status.len() == 6
                && status.iter().all(|i| {
                    i["status"] == "CONVERGED" && i["desiredVersion"] == i["currentVersion"]
                })
        },
    );
    for channel in ["staging", "prod"] {
        let web = converged
            .iter()
            .find(|i| i["service"] == "web" && i["releaseChannel"] == channel)
            .unwrap();
        assert_eq!(web["currentVersion"], "v2", "{web}");
        let deployed = project.read(&format!("deployed/{channel}/web.txt"));
        assert!(deployed.contains("version=v2"), "{deployed}");
    }
    // Remote and local status are one shape, field for field.
    let local = instances(&project.vergence(&["status", "--app", "shop", "--output", "json"]));
    let fields = |i: &Value| {
        let mut keys: Vec<String> = i.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(fields(&local[0]), fields(&converged[0]));
    assert_eq!(local.len(), converged.len());

    // A release token cannot approve: one clear line, non-zero exit.
    let refused = remote(
        &project,
        &server,
        &ci,
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
    assert_ne!(refused.code, 0, "{refused}");
    let line = refused.stderr.trim();
    assert!(
        line.starts_with("error: 403 forbidden: token "),
        "{refused}"
    );
    assert!(line.contains("lacks scope approve"), "{refused}");
    assert_eq!(line.lines().count(), 1, "{refused}");

    // The audit trail names the token that pushed the release.
    let events = remote(
        &project,
        &server,
        &ci,
        &[
            "events",
            "--app",
            "shop",
            "--output",
            "json",
            "--service",
            "web",
        ],
    );
    assert_eq!(events.code, 0, "{events}");
    let events: Value = serde_json::from_str(&events.stdout).unwrap();
    let release = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "releaseCreated")
        .expect("releaseCreated event");
    assert!(
        release["actor"].as_str().unwrap().starts_with("api:token-"),
        "{release}"
    );

    // `serve` is local by nature: it refuses an endpoint instead of
    // doing something else.
    let serve = remote(&project, &server, &admin, &["serve"]);
    assert_ne!(serve.code, 0, "{serve}");
    assert!(
        serve.stderr.contains("does not run against --endpoint"),
        "{serve}"
    );

    let (status, output) = server.stop();
    assert!(
        status.success(),
        "serve exited with {status}; output:\n{output}"
    );
}

#[test]
fn a_rejected_config_push_prints_every_error_and_stores_nothing() {
    let project = Project::quickstart();
    let server = Server::start(&project, &[]);
    let admin = create_token(&project, &["admin"]);
    project.replace(
        "services.yaml",
        "runtime: files-structured",
        "runtime: nope",
    );
    let pushed = remote(
        &project,
        &server,
        &admin,
        &["configs", "push", project.path().to_str().unwrap()],
    );
    assert_eq!(pushed.code, 1, "{pushed}");
    assert!(pushed.stderr.contains("services.yaml:"), "{pushed}");
    assert!(pushed.stderr.contains("nothing was stored"), "{pushed}");
    let status = remote(&project, &server, &admin, &["status", "--app", "shop"]);
    assert_ne!(status.code, 0, "{status}");
    assert!(status.stderr.contains("404 notFound"), "{status}");
    let (exit, output) = server.stop();
    assert!(exit.success(), "{output}");
}

#[test]
fn with_a_webhook_secret_the_cli_signs_releases_and_unsigned_ones_are_refused() {
    let project = Project::quickstart();
    let server = Server::start(&project, &["--webhook-secret", "ci-signing-secret"]);
    let admin = create_token(&project, &["admin"]);
    let dir = project.path().to_str().unwrap().to_owned();
    let pushed = remote(&project, &server, &admin, &["configs", "push", &dir]);
    assert_eq!(pushed.code, 0, "{pushed}");

    let release = ["release", "web", "v3", "--app", "shop"];
    let unsigned = remote(&project, &server, &admin, &release);
    assert_ne!(unsigned.code, 0, "{unsigned}");
    assert!(unsigned.stderr.contains("401 unauthorized"), "{unsigned}");
    assert!(
        unsigned.stderr.contains("requires signed webhooks"),
        "{unsigned}"
    );
    let mut wrong = vec!["--webhook-secret", "not-the-secret"];
    wrong.extend(release);
    let refused = remote(&project, &server, &admin, &wrong);
    assert!(
        refused.stderr.contains("signature does not match"),
        "{refused}"
    );

    let mut signed = vec!["--webhook-secret", "ci-signing-secret"];
    signed.extend(release);
    let accepted = remote(&project, &server, &admin, &signed);
    assert_eq!(accepted.code, 0, "{accepted}");
    let (exit, output) = server.stop();
    assert!(exit.success(), "{output}");
}

#[test]
fn an_agent_token_is_made_for_one_agent_and_can_do_no_application_work() {
    let project = Project::quickstart();
    let refused = project.vergence(&["token", "create", "--agent", "prod-eu", "--scope", "admin"]);
    assert_ne!(refused.code, 0, "{refused}");
    assert!(
        refused.stderr.contains("scopes are for application tokens"),
        "{refused}"
    );
    let created = project.vergence(&["token", "create", "--agent", "prod-eu"]);
    assert_eq!(created.code, 0, "{created}");
    assert!(
        created
            .stderr
            .contains("for agent prod-eu that can do only that agent's work"),
        "{created}"
    );
    let token = created.stdout.trim().to_owned();
    let id = token.split('_').nth(1).expect("vgt_<id>_<secret>");
    let listed = project.vergence(&["token", "list", "--agent", "prod-eu"]);
    assert!(listed.stdout.contains(id), "{listed}");
    let apps = project.vergence(&["token", "list", "--app", "shop"]);
    assert!(!apps.stdout.contains(id), "{apps}");

    let server = Server::start(&project, &[]);
    let status = remote(&project, &server, &token, &["status", "--app", "shop"]);
    assert_ne!(status.code, 0, "{status}");
    assert!(status.stderr.contains("not shop"), "{status}");
    let release = remote(
        &project,
        &server,
        &token,
        &["release", "web", "v2", "--app", "shop"],
    );
    assert_ne!(release.code, 0, "{release}");
    assert!(
        release.stderr.contains("belongs to agent prod-eu"),
        "{release}"
    );
}

/// A real Prometheus evaluates an alerting rule on an exporter the test
/// controls and a real Alertmanager delivers it to `vergence serve`'s
/// webhook with an admin token: the alert fires, then resolves, as
/// Alertmanager says, and the instance it guards is held meanwhile.
#[test]
fn a_real_alertmanager_fires_and_resolves_an_alert_through_the_webhook() {
    use vergence_testkit::prometheus::{Alertmanager, Exporter, Prometheus};

    let project = Project::empty();
    project.write(
        "config.yaml",
        "runtime:\n  name: files\n  apply:\n    taskConfig:\n      program:\n        cmd: [sh, -c, 'echo $VERGENCE_SERVICE_VERSION > $VERGENCE_RELEASE_CHANNEL.txt']\n---\napplication:\n  name: shop\n  releaseChannels:\n    - name: prod\n      runtimes: [{runtime: files}]\n      protections:\n        - ref: {name: no-high-errors}\n          lifecycle: [{deployment: {}}]\n---\nservice:\n  name: web\n  runtime: files\n---\nprotection:\n  name: no-high-errors\n  alert: higherrors\n",
    );
    let (server, admin, _) = serve_pushed(&project);

    let exporter = Exporter::start(0.01);
    let Some(alertmanager) = Alertmanager::start(&format!(
        "route: {{receiver: vergence, group_by: [alertname], group_wait: 1s, group_interval: 1s, repeat_interval: 1h}}\n\
         receivers:\n  - name: vergence\n    webhook_configs:\n      - url: {}/v1/alerts/alertmanager\n        send_resolved: true\n        http_config: {{authorization: {{type: Bearer, credentials: {admin}}}}}\n",
        server.url
    )) else {
        return;
    };
    let rules = "groups:\n  - name: shop\n    rules:\n      - alert: HighErrors\n        expr: shop_error_ratio > 0.05\n        annotations: {summary: error ratio above 5%}\n";
    let Some(_prometheus) = Prometheus::start_alerting(&exporter, Some((rules, &alertmanager.url)))
    else {
        return;
    };

    let alert = |firing: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let listed = remote(&project, &server, &admin, &["alert", "list"]);
            assert_eq!(listed.code, 0, "{listed}");
            let line = listed.stdout.lines().find(|l| l.starts_with("higherrors "));
            if line.is_some_and(|l| l.split_whitespace().nth(1) == Some(firing)) {
                return line.unwrap().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "higherrors never {firing}: {listed}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    exporter.set(0.4);
    let fired = alert("firing");
    assert!(fired.contains("error ratio above 5%"), "{fired}");
    // Released while it fires, prod is held by the protection.
    let released = remote(
        &project,
        &server,
        &admin,
        &["release", "web", "v2", "--app", "shop"],
    );
    assert_eq!(released.code, 0, "{released}");
    let served = (&project, &server, admin.as_str());
    let status = status_until(
        served,
        "shop",
        ("prod never BLOCKED", Duration::from_secs(60)),
        |status| status[0]["status"] == "BLOCKED",
    );
    let reason = status[0]["reason"].as_str().unwrap();
    assert!(reason.contains("alert higherrors is firing"), "{reason}");

    exporter.set(0.01);
    alert("resolved");
    status_until(
        served,
        "shop",
        (
            "prod never got v2 once the alert resolved",
            Duration::from_secs(60),
        ),
        |status| status[0]["status"] == "CONVERGED" && status[0]["currentVersion"] == "v2",
    );
}
