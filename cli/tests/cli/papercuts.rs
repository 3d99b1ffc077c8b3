//! Small things that got in the way of people trying Vergence (issue 15):
//! each test drives the real binary through what tripped someone up.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Project, wait_for};

/// One channel; the apply writes the version to deployed.txt and fails for
/// v2 (one attempt only); the exit-code fetch compares deployed.txt with
/// the desired version, every second.
fn breaks_on_v2() -> Project {
    let project = Project::empty();
    project.write(
        "config.yaml",
        r#"runtime:
  name: files
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'if [ "$VERGENCE_SERVICE_VERSION" = v2 ]; then echo "v2 is broken" >&2; exit 1; fi; echo "$VERGENCE_SERVICE_VERSION" > deployed.txt']
    retryPolicy: {baseInterval: 1s, maxInterval: 1s, maxAttempts: 1}
  fetch:
    mode: exitCode
    taskConfig:
      program:
        cmd: [sh, -c, 'test "$(cat deployed.txt 2>/dev/null)" = "$VERGENCE_SERVICE_VERSION" || exit 2']
    pollInterval: 1s
    steadyStatePollInterval: 1s
---
application:
  name: demo
  releaseChannels:
    - name: staging
      runtimes: [{runtime: files}]
---
service:
  name: web
  runtime: files
"#,
    );
    project
}

/// v1 converged, then v2 failed and was rolled back to v1.
fn rolled_back() -> Project {
    let project = breaks_on_v2();
    project.up(0);
    assert_eq!(project.vergence(&["release", "web", "v1"]).code, 0);
    project.up(0);
    assert_eq!(project.vergence(&["release", "web", "v2"]).code, 0);
    project
}

fn converged_events(project: &Project) -> usize {
    project
        .events(&[])
        .iter()
        .filter(|e| e["type"] == "converged")
        .count()
}

#[test]
fn a_release_that_failed_and_was_rolled_back_makes_up_exit_2() {
    let project = rolled_back();
    let run = project.vergence(&["up"]);
    let web = project.instance("web", "staging");
    assert_eq!(web["status"], "ROLLED_BACK", "{run}");
    assert_eq!(web["currentVersion"], "v1");
    assert_eq!(run.code, 2, "a failed release is a failure for CI:\n{run}");
    // And stays one for every later run until a new release moves on.
    project.up(2);
}

#[test]
fn a_rolled_back_instance_records_no_converged_event_per_routine_fetch() {
    let project = rolled_back();
    project.vergence(&["up"]);
    let before = converged_events(&project);
    // Each `up` fetches again and finds the runtime still on v1.
    project.vergence(&["up"]);
    project.vergence(&["up"]);
    assert_eq!(
        converged_events(&project),
        before,
        "{:#?}",
        project.events(&[])
    );
}

#[test]
fn plan_says_a_rolled_back_instance_stays_where_up_leaves_it() {
    let project = rolled_back();
    project.vergence(&["up"]);
    let run = project.vergence(&["plan"]);
    assert_eq!(run.code, 0, "{run}");
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("demo/web@staging"))
        .unwrap_or_else(|| panic!("{run}"));
    assert!(!line.contains("update"), "{line}");
    assert!(line.contains("rolled back to v1"), "{line}");
    assert!(line.contains("v2 failed"), "{line}");
    assert!(line.contains("push a new release"), "{line}");
}

#[test]
fn release_with_config_stores_the_config_when_there_is_no_state_yet() {
    let project = breaks_on_v2();
    let run = project.vergence(&["release", "web", "v1"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.contains("release v1 of demo/web recorded"),
        "{run}"
    );
    assert!(run.stdout.contains("stored the config"), "{run}");
    let web = project.instance("web", "staging");
    assert_eq!(web["desiredVersion"], "v1");
    project.up(0);
    assert_eq!(project.read("deployed.txt").trim(), "v1");
}

#[test]
fn release_without_state_or_config_says_how_to_get_one() {
    let project = Project::empty();
    let output = Command::new(crate::common::vergence_bin())
        .args(["release", "web", "v1"])
        .current_dir(project.path())
        .env_remove("VERGENCE_ENDPOINT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no Vergence state"), "{stderr}");
    assert!(stderr.contains("--config"), "{stderr}");
}

#[test]
fn serve_with_config_applies_it_on_start() {
    let project = Project::quickstart();
    // `Server::start` starts serve without --config; here it is given.
    let mut child = Command::new(crate::common::vergence_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(project.path())
        .current_dir(project.path())
        .env_remove("VERGENCE_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        "serve to converge the quickstart",
        Duration::from_secs(30),
        || {
            project.file(".vergence/state.db").exists()
                && project.vergence(&["status"]).code == 0
                && project
                    .status()
                    .iter()
                    .filter(|i| i["status"] == "CONVERGED")
                    .count()
                    == 6
        },
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// A fetch that hands a plan file of these bytes to apply.
fn plan_file_project(plan_bytes: &str) -> Project {
    let project = Project::empty();
    project.write(
        "config.yaml",
        &format!(
            r#"runtime:
  name: planned
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'exit 0']
  fetch:
    mode: exitCode
    taskConfig:
      program:
        cmd: [sh, -c, 'printf "{plan_bytes}" > "$VERGENCE_OUTPUT_DIR/plan.bin"; exit 2']
    outputs: [plan.bin]
  requireApprovalBeforeApply: true
---
application:
  name: infra
  releaseChannels:
    - name: prod
      runtimes: [{{runtime: planned}}]
---
service:
  name: net
  runtime: planned
"#
        ),
    );
    project
}

#[test]
fn status_shows_a_binary_plan_file_by_size_and_digest_not_its_bytes() {
    // A Terraform plan is a zip: bytes a terminal would act on.
    let project = plan_file_project("PK\\003\\004\\033[2J\\033]0;owned\\007\\001\\002binary");
    project.up(3);
    let run = project.vergence(&["status", "--service", "net"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("plan.bin ("), "{run}");
    assert!(run.stdout.contains("bytes, sha256 "), "{run}");
    assert!(
        !run.stdout.contains('\u{1b}'),
        "raw escape codes: {:?}",
        run.stdout
    );
    assert!(!run.stdout.contains('\u{7}'), "{:?}", run.stdout);
    assert!(!run.stdout.contains("owned"), "{run}");
}

#[test]
fn status_still_shows_a_text_plan_file() {
    let project = plan_file_project("+ bucket logs\\n~ bucket data\\n");
    project.up(3);
    let run = project.vergence(&["status", "--service", "net"]);
    assert!(run.stdout.contains("      + bucket logs"), "{run}");
    assert!(run.stdout.contains("      ~ bucket data"), "{run}");
}

#[test]
fn explain_without_an_engine_running_says_the_check_is_overdue_and_how_to_run_it() {
    let project = breaks_on_v2();
    project.up(0);
    // The next steady-state fetch was due a second after `up` ended;
    // nothing runs it now.
    std::thread::sleep(Duration::from_secs(12));
    let run = project.vergence(&["explain", "web", "--release-channel", "staging"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("overdue"), "{run}");
    assert!(run.stdout.contains("nothing is running"), "{run}");
    assert!(run.stdout.contains("vergence up --config"), "{run}");
    assert!(run.stdout.contains("vergence serve --config"), "{run}");
}

#[test]
fn explain_while_nothing_is_due_says_nothing_about_overdue() {
    let project = breaks_on_v2();
    project.up(0);
    let run = project.vergence(&["explain", "web", "--release-channel", "staging"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(!run.stdout.contains("overdue"), "{run}");
}

/// `cmd: [apply.sh]` names a script in the config directory without `./`.
fn bare_script_project() -> Project {
    let project = Project::empty();
    project.write("apply.sh", "#!/bin/sh\necho applied > applied.txt\n");
    let mut perms = std::fs::metadata(project.file("apply.sh"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(project.file("apply.sh"), perms).unwrap();
    project.write(
        "config.yaml",
        r#"runtime:
  name: script
  apply:
    taskConfig:
      program:
        cmd: [apply.sh]
    retryPolicy: {baseInterval: 1s, maxInterval: 1s, maxAttempts: 1}
---
application:
  name: demo
  releaseChannels:
    - name: staging
      runtimes: [{runtime: script}]
---
service:
  name: job
  runtime: script
"#,
    );
    project
}

#[test]
fn validate_suggests_dot_slash_for_a_bare_script_name_in_the_config_dir() {
    let project = bare_script_project();
    let run = project.vergence(&["validate"]);
    assert!(run.stderr.contains("./apply.sh"), "{run}");
    assert!(run.stderr.contains("config.yaml"), "{run}");
}

#[test]
fn the_failed_jobs_reason_suggests_dot_slash_for_a_bare_script_name() {
    let project = bare_script_project();
    let run = project.up(2);
    let job = project.instance("job", "staging");
    let reason = job["reason"].as_str().unwrap();
    assert!(reason.contains("./apply.sh"), "{reason}\n{run}");
}

/// Runs vergence with a stdout whose reader is gone, as `| head` leaves it.
fn into_closed_pipe(project: &Project, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    let output = Command::new(crate::common::vergence_bin())
        .args(args)
        .arg("--config")
        .arg(project.path())
        .current_dir(project.path())
        .env_remove("VERGENCE_ENDPOINT")
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let project = Project::quickstart();
    project.up(0);
    for args in [
        &["validate"][..],
        &["status"],
        &["events"],
        &["status", "--output", "json"],
        &["explain", "web", "--release-channel", "prod"],
        &["plan"],
    ] {
        let (code, stderr) = into_closed_pipe(&project, args);
        assert_eq!(stderr, "", "vergence {args:?}");
        assert_eq!(code, Some(0), "vergence {args:?}: {stderr}");
    }
}

#[test]
fn up_into_a_pipe_prints_event_lines_only() {
    let project = Project::quickstart();
    let run = project.up(0);
    assert!(!run.stdout.contains('\u{1b}'), "{:?}", run.stdout);
    assert!(!run.stdout.contains("converged 6 ·"), "{run}");
    assert!(run.stdout.contains("VERIFYING → CONVERGED"), "{run}");
}

#[test]
fn up_on_a_terminal_keeps_a_summary_line_under_the_events() {
    let project = Project::quickstart();
    let command = format!(
        "{} up --config {}",
        crate::common::vergence_bin().display(),
        project.path().display()
    );
    // `script` runs the command on a pseudo-terminal and copies what it
    // writes there to our stdout.
    let output = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .current_dir(project.path())
        .env("TERM", "xterm")
        .env("COLUMNS", "200")
        .env_remove("VERGENCE_ENDPOINT")
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("\r\u{1b}[2K"), "{stdout:?}");
    assert!(
        stdout.contains("converged 6 · waiting 0 · running 0 · failed 0 of 6"),
        "{stdout:?}"
    );
    assert!(stdout.contains("| now: shop/"), "{stdout:?}");
    assert!(stdout.contains("VERIFYING → CONVERGED"), "{stdout:?}");
}

#[test]
fn completions_for_bash_know_the_subcommands() {
    let project = Project::empty();
    let run = project.vergence(&["completions", "bash"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("_vergence()"), "{run}");
    for command in ["validate", "up", "release", "approve", "explain", "serve"] {
        assert!(
            run.stdout.contains(&format!("vergence__subcmd__{command}"))
                || run.stdout.contains(&format!("vergence__{command}")),
            "{command}: {run}"
        );
    }
    let zsh = project.vergence(&["completions", "zsh"]);
    assert_eq!(zsh.code, 0, "{zsh}");
    assert!(zsh.stdout.contains("#compdef vergence"), "{zsh}");
}
