//! Secrets a job writes where Vergence keeps or shows what it wrote: its
//! plan file, and the edges where its output is cut (the stdout head at
//! 1 MiB, the stderr tail at 4 KiB). Real jobs through the `vergence`
//! binary; the state, the files beside it and every command's output are
//! searched for the value and for any piece of it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Project, Run, vergence_bin};

/// No four characters of it in a row occur in ordinary text (or in
/// Vergence's own files), so any piece of it found is a leak.
const SECRET: &str = "Qz8xWv3kJ7mN5pLr";

/// `vergence ARGS` with the secret in the environment the job reads it from.
fn vergence_with_secret(project: &Project, args: &[&str]) -> Run {
    let output = Command::new(vergence_bin())
        .args(args)
        .arg("--config")
        .arg(project.path())
        .current_dir(project.path())
        .env("DEPLOY_TOKEN", SECRET)
        .env_remove("RUST_LOG")
        .env_remove("VERGENCE_ENDPOINT")
        .env_remove("VERGENCE_TOKEN")
        .output()
        .expect("run vergence");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A runtime whose fetch and apply run these shell scripts with the secret
/// in `DEPLOY_TOKEN`; the fetch declares a plan file.
fn project(fetch: &str, apply: &str) -> Project {
    let project = Project::empty();
    project.write("fetch.sh", &format!("#!/bin/sh\n{fetch}\n"));
    project.write("apply.sh", &format!("#!/bin/sh\n{apply}\n"));
    for script in ["fetch.sh", "apply.sh"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(project.file(script), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    project.write(
        "config.yaml",
        r#"runtime:
  name: planned
  fetch:
    mode: exitCode
    outputs: [plan]
    taskConfig:
      program:
        cmd: [./fetch.sh]
        env:
          DEPLOY_TOKEN: "{{.Params.token}}"
  apply:
    taskConfig:
      program:
        cmd: [./apply.sh]
        env:
          DEPLOY_TOKEN: "{{.Params.token}}"
  requireApprovalBeforeApply: true
  parameters:
    - {name: token, required: true, secret: {}}
---
application:
  name: infra
  releaseChannels:
    - name: prod
      runtimes: [{runtime: planned}]
---
service:
  name: net
  runtime: planned
  custom:
    parameterValues:
      - {name: token, secret: {fromEnv: DEPLOY_TOKEN}}
"#,
    );
    project
}

/// Every piece of four characters or more of the secret found in `text`.
fn pieces_in(text: &str) -> Vec<&'static str> {
    let mut found = Vec::new();
    for len in (4..=SECRET.len()).rev() {
        for start in 0..=SECRET.len() - len {
            let piece = &SECRET[start..start + len];
            if text.contains(piece) && !found.iter().any(|f: &&str| f.contains(piece)) {
                found.push(piece);
            }
        }
    }
    found
}

/// What the reading commands show, text and JSON.
fn everything_shown(project: &Project) -> String {
    let mut shown = String::new();
    for args in [
        &["status", "--output", "json"][..],
        &["status"],
        &["status", "--service", "net"],
        &["events", "--output", "json", "--limit", "10000"],
        &["events"],
        &["explain", "net", "--release-channel", "prod"],
        &[
            "explain",
            "net",
            "--release-channel",
            "prod",
            "--output",
            "json",
        ],
    ] {
        let run = project.vergence(args);
        shown.push_str(&run.stdout);
        shown.push_str(&run.stderr);
    }
    shown
}

/// Files Vergence wrote: the state and anything beside it, not the
/// project's own scripts.
fn files_written(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_written(&path));
        } else if !path.ends_with("fetch.sh") && !path.ends_with("apply.sh") {
            files.push(path);
        }
    }
    files
}

fn assert_no_piece_kept(project: &Project) {
    for file in files_written(project.path()) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        let found = pieces_in(&text);
        assert!(found.is_empty(), "{} holds {found:?}", file.display());
    }
}

#[test]
fn a_secret_a_fetch_writes_into_its_plan_file_is_never_stored_or_shown() {
    let project = project(
        r#"echo "plan uses token $DEPLOY_TOKEN" > "$VERGENCE_OUTPUT_DIR/plan"; exit 2"#,
        "exit 0",
    );
    let up = vergence_with_secret(&project, &["up"]);
    let instance = project.instance("net", "prod");
    assert_eq!(instance["status"], "WAITING_APPROVAL", "{instance}\n{up}");

    let details = project.vergence(&["status", "--service", "net"]);
    assert!(
        details.stdout.contains("plan uses token ***"),
        "the plan is shown, masked:\n{details}"
    );
    let shown = format!("{up}{}", everything_shown(&project));
    assert!(
        pieces_in(&shown).is_empty(),
        "{:?} in\n{shown}",
        pieces_in(&shown)
    );
    assert_no_piece_kept(&project);
}

#[test]
fn a_secret_straddling_the_cut_of_stderr_or_stdout_leaves_no_piece_behind() {
    // stderr: the secret, then 4,085 bytes, so the 4 KiB tail starts five
    // characters into it. stdout:
    // 1 MiB less five bytes, then the secret, so the head's cut falls
    // after its first five characters.
    let project = project(
        r#"printf 'fetch failed with %s' "$DEPLOY_TOKEN" >&2
head -c 4067 /dev/zero | tr '\0' '.' >&2
printf '\nend of the story\n' >&2
head -c 1048571 /dev/zero | tr '\0' '-'
printf '%s and more' "$DEPLOY_TOKEN"
exit 1"#,
        "exit 0",
    );
    let up = vergence_with_secret(&project, &["up"]);
    assert_ne!(up.code, 0, "the fetch fails:\n{up}");
    let instance = project.instance("net", "prod");
    assert_eq!(instance["status"], "FAILED", "{instance}\n{up}");

    let shown = format!("{up}{}", everything_shown(&project));
    assert!(
        pieces_in(&shown).is_empty(),
        "{:?} shown",
        pieces_in(&shown)
    );
    assert_no_piece_kept(&project);
}
