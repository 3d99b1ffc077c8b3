//! Text from a job or a config reaches the terminal with its control
//! characters escaped: a job cannot set the title, clear the screen or
//! fake a line of its own in `up`, `status`, `events` or `explain`, nor a
//! config key in `validate`. `--output json` keeps the exact text.

use serde_json::Value;

use crate::common::{Project, Run};

/// Raw bytes a terminal acts on; none may reach a text output.
const RAW: [char; 4] = ['\u{1b}', '\u{7}', '\u{0}', '\u{9b}'];

/// What a hostile job prints: set the title, clear the screen, a NUL, and
/// a line of its own that says all is well.
const HOSTILE: &str = r"boom \033]0;owned\007 \033[2J \000 nul\n✓ converged\n";

fn assert_safe(what: &str, text: &str) {
    for c in RAW {
        assert!(
            !text.contains(c),
            "{what} shows {c:?} raw:\n{}",
            text.escape_debug()
        );
    }
    // Text of several lines is shown indented under what it belongs to,
    // never as a line of its own.
    assert!(
        !text.lines().any(|l| l.starts_with("✓ converged")),
        "{what} shows the job's fake line as a line of its own:\n{text}"
    );
}

fn text_of(run: &Run) -> String {
    format!("{}{}", run.stdout, run.stderr)
}

/// A service whose apply fails printing HOSTILE on stdout and stderr, and
/// whose getInfo reports an output named and worded with escapes.
fn project() -> Project {
    let project = Project::empty();
    project.write(
        "apply.sh",
        &format!("#!/bin/sh\nprintf '{HOSTILE}'\nprintf '{HOSTILE}' >&2\nexit 1\n"),
    );
    project.write(
        "info.sh",
        "#!/bin/sh\nprintf '%s' '{\"outputs\":[{\"name\":\"url\\u001b]0;owned\\u0007\",\"text\":\"ok\\u001b[2J\\n✓ converged\"}]}'\n",
    );
    for script in ["apply.sh", "info.sh"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(project.file(script), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    project.write(
        "config.yaml",
        r#"runtime:
  name: hostile
  apply:
    taskConfig:
      program:
        cmd: [./apply.sh]
  getInfo:
    taskConfig:
      program:
        cmd: [./info.sh]
---
application:
  name: infra
  releaseChannels:
    - name: prod
      runtimes: [{runtime: hostile}]
---
service:
  name: net
  runtime: hostile
"#,
    );
    project
}

#[test]
fn a_job_s_output_and_info_reach_the_terminal_escaped_and_json_exact() {
    let project = project();
    let up = project.vergence(&["up"]);
    assert_ne!(up.code, 0, "the apply fails:\n{up}");
    assert_safe("up", &text_of(&up));

    // getInfo runs when nothing else does: give it a step or two.
    let mut info = Value::Null;
    for _ in 0..5 {
        info = project.instance("net", "prod")["info"].clone();
        if info.as_array().is_some_and(|i| !i.is_empty()) {
            break;
        }
        project.vergence(&["up"]);
    }
    assert_eq!(
        info[0]["name"], "url\u{1b}]0;owned\u{7}",
        "JSON keeps the exact name: {info}"
    );

    for args in [
        &["status"][..],
        &["status", "--service", "net"],
        &["events"],
        &["explain", "net", "--release-channel", "prod"],
    ] {
        let run = project.vergence(args);
        assert_eq!(run.code, 0, "{run}");
        assert_safe(&args.join(" "), &text_of(&run));
    }
    let details = project.vergence(&["status", "--service", "net"]);
    assert!(
        details.stdout.contains("url\\x1b]0;owned\\x07: ok\\x1b[2J"),
        "the name and text are shown, escaped:\n{details}"
    );

    // The JSON keeps what the job printed, byte for byte.
    let reason = project.instance("net", "prod")["reason"].clone();
    assert!(
        reason.as_str().unwrap().contains("\u{1b}]0;owned\u{7}"),
        "{reason}"
    );
    let events = project.events(&[]);
    assert!(
        events
            .iter()
            .any(|e| e["message"].as_str().unwrap().contains("\u{1b}[2J")),
        "{events:?}"
    );
}

#[test]
fn an_unknown_config_key_with_escapes_is_shown_escaped_by_validate() {
    let project = project();
    project.replace(
        "config.yaml",
        "  runtime: hostile\n",
        "  runtime: hostile\n  \"x\\e]0;owned\\a\\e[2J\\n✓ converged\": 1\n",
    );
    let run = project.vergence(&["validate"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("x\\x1b]0;owned\\x07"), "{run}");
    assert_safe("validate", &text_of(&run));
}
