//! `vergence up --endpoint`: the config pushed to `vergence serve`, whose
//! engine converges it, and `up` following until the rollout settles, with
//! the exit codes and the final table a local `up` of the same config has:
//! 0 all converged, 2 a failure, 3 waiting on a person (or, after
//! `--timeout`, on the server).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::server::{Server, create_app_token, create_token, remote};
use crate::common::{Project, Run, vergence_bin, wait_for};

/// One apply-only service in staging → prod; the apply appends to
/// deployed.log, sleeps `SLEEP` seconds and exits with `fail`.
fn project(fail: u8, gate: bool, sleep: u8) -> Project {
    let project = Project::empty();
    let gate = if gate {
        "        - manualApproval: {name: prod-gate}\n"
    } else {
        ""
    };
    project.write(
        "config.yaml",
        &format!(
            r#"runtime:
  name: shell
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'echo "$VERGENCE_RELEASE_CHANNEL $VERGENCE_SERVICE_VERSION" >> deployed.log; sleep {sleep}; exit {fail}']
    retryPolicy: {{baseInterval: 1s, maxInterval: 1s, maxAttempts: 2}}
---
application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{{runtime: shell}}]
    - name: prod
      runtimes: [{{runtime: shell}}]
      preconditions:
        - releaseChannelStable: {{releaseChannel: staging}}
{gate}---
service:
  name: api
  runtime: shell
"#
        ),
    );
    project
}

/// The table `up` ends with (after its event lines).
fn table(run: &Run) -> &str {
    run.stdout
        .rsplit_once("\n\n")
        .map_or(run.stdout.as_str(), |(_, table)| table)
}

/// `up` of the same config locally and through a server: the same exit
/// code and final table.
fn up_both_ways(make: impl Fn() -> Project, code: i32) -> (Project, Server, String) {
    let local = make();
    let here = local.vergence(&["up"]);
    assert_eq!(here.code, code, "local up:\n{here}");

    let project = make();
    let admin = create_token(&project, &["admin"]);
    let server = Server::start(&project, &[]);
    let there = remote(&project, &server, &admin, &["up"]);
    assert_eq!(there.code, code, "up --endpoint:\n{there}");
    assert_eq!(table(&there), table(&here), "{there}\n{here}");
    assert!(
        there.stdout.starts_with("config "),
        "the push's summary first:\n{there}"
    );
    // Then the server engine's events, as a local `up` prints its own.
    assert!(
        there.stdout.contains("  shop/api@staging  ") && there.stdout.contains("apply of"),
        "{there}"
    );
    assert!(
        !there.stdout.contains("added by config"),
        "not its own push: {there}"
    );
    (project, server, admin)
}

#[test]
fn up_endpoint_exits_0_when_every_instance_converged_on_the_server() {
    let (project, server, admin) = up_both_ways(|| project(0, false, 0), 0);
    // The server ran the jobs; `up` printed what the engine did.
    let log = project.read("deployed.log");
    assert_eq!(log.lines().count(), 2, "{log}");
    let status = remote(&project, &server, &admin, &["status"]);
    assert_eq!(status.stdout.matches("CONVERGED").count(), 2, "{status}");
    // Again, with nothing to do: settled at once, nothing applied again.
    let again = remote(&project, &server, &admin, &["up"]);
    assert_eq!(again.code, 0, "{again}");
    assert_eq!(project.read("deployed.log").lines().count(), 2);
    let (exit, output) = server.stop();
    assert!(exit.success(), "{output}");
}

#[test]
fn up_endpoint_exits_2_when_an_apply_fails_on_the_server() {
    let (project, server, _) = up_both_ways(|| project(3, false, 0), 2);
    let log = project.read("deployed.log");
    assert_eq!(log.lines().count(), 2, "two attempts in staging: {log}");
    assert!(!log.contains("prod"), "{log}");
    let (exit, output) = server.stop();
    assert!(exit.success(), "{output}");
}

#[test]
fn up_endpoint_exits_3_while_prod_waits_for_an_approval_then_0() {
    let (project, server, admin) = up_both_ways(|| project(0, true, 0), 3);
    let approve = [
        "approve",
        "--app",
        "shop",
        "--release-channel",
        "prod",
        "--service",
        "api",
    ];
    assert_eq!(remote(&project, &server, &admin, &approve).code, 0);
    let after = remote(&project, &server, &admin, &["up"]);
    assert_eq!(after.code, 0, "{after}");
    // The approval woke prod: by the time `up` looks it may have converged.
    let prod = table(&after)
        .lines()
        .find(|l| l.contains(" prod "))
        .unwrap_or_default();
    assert!(prod.contains("CONVERGED"), "{after}");
    let (exit, output) = server.stop();
    assert!(exit.success(), "{output}");
}

#[test]
fn up_endpoint_gives_up_after_its_timeout_without_stopping_the_server() {
    let project = project(0, false, 30);
    let admin = create_token(&project, &["admin"]);
    let server = Server::start(&project, &[]);
    let run = remote(&project, &server, &admin, &["up", "--timeout", "2s"]);
    assert_eq!(run.code, 3, "{run}");
    assert!(run.stderr.contains("timed out after 2s"), "{run}");
    assert!(run.stderr.contains("shop/api@staging APPLYING"), "{run}");
    assert!(table(&run).contains("APPLYING"), "{run}");
    // A local `up` runs its jobs itself: it has no --timeout.
    let local = project.vergence(&["up", "--timeout", "2s"]);
    assert_eq!(local.code, 1, "{local}");
    assert!(local.stderr.contains("--timeout"), "{local}");
    let (exit, output) = server.stop();
    assert!(exit.success(), "{output}");
}

#[test]
fn up_endpoint_watch_follows_until_interrupted() {
    let project = project(0, false, 0);
    let admin = create_token(&project, &["admin"]);
    let server = Server::start(&project, &[]);
    let out = project.file("watch.out");
    let child = Command::new(vergence_bin())
        .args([
            "--endpoint",
            &server.url,
            "--token",
            &admin,
            "up",
            "--watch",
        ])
        .arg("--config")
        .arg(project.path())
        .current_dir(project.path())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("prod converged", Duration::from_secs(60), || {
        std::fs::read_to_string(&out)
            .is_ok_and(|text| text.contains("shop/api@prod") && text.contains("→ CONVERGED"))
    });
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted: stopped following"),
        "{stderr}"
    );
    let printed = std::fs::read_to_string(&out).unwrap();
    assert!(
        printed.contains("APPLICATION"),
        "the table at the end:\n{printed}"
    );
    let (exit, output) = server.stop();
    assert!(exit.success(), "{output}");
}

#[test]
fn up_endpoint_refuses_a_token_it_cannot_follow_with_before_pushing() {
    let project = project(0, false, 0);
    let server = Server::start(&project, &[]);
    let platform = project.vergence(&["token", "create", "--platform"]);
    let platform = platform.stdout.trim().to_owned();
    let run = remote(&project, &server, &platform, &["up"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("belongs to the platform"), "{run}");
    let blog = create_app_token(&project, "blog", &["admin"]);
    let run = remote(&project, &server, &blog, &["up"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("no application blog"), "{run}");
    // Nothing was pushed either time.
    let admin = create_token(&project, &["admin"]);
    let status = remote(&project, &server, &admin, &["status"]);
    assert!(status.stderr.contains("404 notFound"), "{status}");
    let (exit, output) = server.stop();
    assert!(exit.success(), "{output}");
}
