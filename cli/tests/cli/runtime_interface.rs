//! The custom runtime interface as the design describes it, through the
//! `vergence` binary: a config written from the design's own examples
//! (`examples/custom-runtime`: a structured fetch whose objects report only
//! their versions, a getInfo that prints a console link as plain text)
//! converges unchanged, and what getInfo printed is shown as printed in
//! `status`, `explain` and the JSON: secrets masked, control characters
//! escaped in the terminal, a failure shown with the output.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{Project, Run, finish};

/// What getInfo is handed as a secret and prints; never shown.
const SECRET: &str = "c0nsole-T0ken-9b2e71";

/// Apply writes the version, the structured fetch prints the seed's object
/// without `status`, getInfo prints a link and, carelessly, its token and
/// an escape sequence, and fails when `info-fails` exists.
fn project() -> Project {
    let project = Project::empty();
    project.write(
        "runtimes.yaml",
        r#"runtime:
  name: custom
  apply:
    taskConfig:
      program:
        cmd: [./apply.sh]
  fetch:
    mode: structured
    taskConfig:
      program:
        cmd: [./fetch.sh]
    pollInterval: 1s
  getInfo:
    taskConfig:
      program:
        cmd: [./info.sh]
        env:
          CONSOLE_TOKEN: "{{.Params.token}}"
    pollInterval: 1s
  parameters:
    - {name: token, required: true, secret: {}}
"#,
    );
    project.write(
        "application.yaml",
        "application:\n  name: shop\n  releaseChannels:\n    - name: staging\n      runtimes: [{runtime: custom}]\n",
    );
    project.write(
        "services.yaml",
        "service:\n  name: my-service\n  runtime: custom\n  custom:\n    parameterValues:\n      - {name: token, secret: {fromEnv: CONSOLE_TOKEN}}\n",
    );
    project.write(
        "apply.sh",
        "#!/bin/sh\nset -eu\nprintf '%s' \"$VERGENCE_SERVICE_VERSION\" > \"deployed-$VERGENCE_RELEASE_CHANNEL\"\n",
    );
    // The seed's structured output, as a runtime that only knows which
    // version runs prints it: no status.
    project.write(
        "fetch.sh",
        r#"#!/bin/sh
set -eu
file="deployed-$VERGENCE_RELEASE_CHANNEL"
if [ ! -f "$file" ]; then echo '{"objects":[]}'; exit 0; fi
printf '{"objects": [{"name": "my-service", "objectType": "my-type", "versions": [{"version": "%s", "active": true}]}]}\n' "$(cat "$file")"
"#,
    );
    project.write(
        "info.sh",
        r#"#!/bin/sh
echo "Console: https://console.example.com/services/$VERGENCE_SERVICE?env=$VERGENCE_RELEASE_CHANNEL"
printf 'signed in with %s \033]0;owned\007\n' "$CONSOLE_TOKEN"
if [ -f info-fails ]; then echo "console API: 503" >&2; exit 3; fi
"#,
    );
    for script in ["apply.sh", "fetch.sh", "info.sh"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(project.file(script), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    project
}

/// `vergence ARGS` with the token in its environment.
fn vergence(project: &Project, args: &[&str]) -> Run {
    let child = Command::new(crate::common::vergence_bin())
        .args(args)
        .arg("--config")
        .arg(project.path())
        .current_dir(project.path())
        .env("CONSOLE_TOKEN", SECRET)
        .env_remove("RUST_LOG")
        .env_remove("VERGENCE_ENDPOINT")
        .env_remove("VERGENCE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start vergence");
    finish(
        child,
        Duration::from_secs(120),
        &format!("vergence {}", args.join(" ")),
    )
}

const LINK: &str = "Console: https://console.example.com/services/my-service?env=staging";

/// Runs `up` until getInfo (which runs when nothing else does) reported
/// something for which `done` holds; the instance as `status --output json`
/// shows it.
fn info_until(project: &Project, channel: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut instance = Value::Null;
    for _ in 0..10 {
        let up = vergence(project, &["up"]);
        assert_eq!(up.code, 0, "vergence up:\n{up}");
        instance = project.instance("my-service", channel);
        if done(&instance) {
            return instance;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("getInfo never reported what was expected: {instance:#}");
}

#[test]
fn the_custom_runtime_example_converges_unchanged_and_shows_its_console_link() {
    let project = Project::example("custom-runtime");
    let release = vergence(
        &project,
        &["release", "my-service", "svc-1", "--app", "shop"],
    );
    assert_eq!(release.code, 0, "{release}");
    let up = vergence(&project, &["up"]);
    assert_eq!(up.code, 0, "{up}");
    for channel in ["staging", "prod"] {
        let instance = info_until(&project, channel, |i| i["infoText"].is_string());
        assert_eq!(instance["status"], "CONVERGED", "{instance:#}");
        assert_eq!(instance["currentVersion"], "svc-1", "{instance:#}");
        let link =
            format!("Console: https://console.example.com/services/my-service?env={channel}");
        assert_eq!(instance["infoText"], link.as_str(), "{instance:#}");
        let status = vergence(&project, &["status", "--service", "my-service"]);
        assert!(
            status.stdout.contains(&format!("  info:\n    {link}\n")),
            "{status}"
        );
        let explain = vergence(
            &project,
            &["explain", "my-service", "--release-channel", channel],
        );
        assert!(
            explain.stdout.contains(&format!("    | {link}\n")),
            "{explain}"
        );
    }
}

#[test]
fn get_info_is_shown_as_printed_masked_escaped_and_with_its_failure() {
    let project = project();
    let release = vergence(
        &project,
        &["release", "my-service", "svc-1", "--app", "shop"],
    );
    assert_eq!(release.code, 0, "{release}");
    let up = vergence(&project, &["up"]);
    assert_eq!(
        up.code, 0,
        "the seed's fetch without status converges:\n{up}"
    );
    let instance = project.instance("my-service", "staging");
    assert_eq!(instance["status"], "CONVERGED", "{instance:#}");
    assert_eq!(instance["currentVersion"], "svc-1", "{instance:#}");

    let instance = info_until(&project, "staging", |i| i["infoText"].is_string());
    // As printed, the secret masked; the JSON keeps the escape as it was.
    assert_eq!(
        instance["infoText"],
        format!("{LINK}\nsigned in with *** \u{1b}]0;owned\u{7}"),
        "{instance:#}"
    );
    assert_eq!(instance["info"], serde_json::json!([]), "{instance:#}");
    assert!(instance.get("infoFailure").is_none(), "{instance:#}");
    assert_eq!(instance["status"], "CONVERGED", "{instance:#}");

    let status = vergence(&project, &["status", "--service", "my-service"]);
    assert_eq!(status.code, 0, "{status}");
    assert!(
        status.stdout.contains(&format!(
            "  info:\n    {LINK}\n    signed in with *** \\x1b]0;owned\\x07\n"
        )),
        "status shows the link as printed, indented and escaped:\n{status}"
    );
    let explain = vergence(
        &project,
        &["explain", "my-service", "--release-channel", "staging"],
    );
    assert_eq!(explain.code, 0, "{explain}");
    assert!(
        explain.stdout.contains(&format!("    | {LINK}\n"))
            && explain
                .stdout
                .contains("    | signed in with *** \\x1b]0;owned\\x07\n"),
        "explain quotes what getInfo printed:\n{explain}"
    );
    for run in [&status, &explain] {
        assert!(!run.stdout.contains(SECRET), "{run}");
        assert!(!run.stdout.contains('\u{1b}'), "{run}");
    }

    // A getInfo that fails: its output is shown with the failure, and the
    // instance stays converged.
    project.write("info-fails", "");
    let instance = info_until(&project, "staging", |i| i["infoFailure"].is_string());
    assert_eq!(
        instance["infoFailure"], "getInfo exited with 3: console API: 503",
        "{instance:#}"
    );
    assert!(
        instance["infoText"].as_str().unwrap().starts_with(LINK),
        "{instance:#}"
    );
    assert_eq!(instance["status"], "CONVERGED", "{instance:#}");
    let status = vergence(&project, &["status", "--service", "my-service"]);
    assert!(
        status.stdout.contains(&format!(
            "  getInfo exited with 3: console API: 503\n  info:\n    {LINK}\n"
        )),
        "{status}"
    );
}

#[test]
fn a_fetch_status_vergence_does_not_know_is_an_error_naming_the_object() {
    let project = project();
    project.write(
        "fetch.sh",
        "#!/bin/sh\necho '{\"objects\":[{\"name\":\"web\",\"versions\":[],\"status\":\"DONE\"}]}'\n",
    );
    // Fetch errors are retried under the apply's retry policy: two, soon.
    project.replace(
        "runtimes.yaml",
        "        cmd: [./apply.sh]\n",
        "        cmd: [./apply.sh]\n    retryPolicy: {baseInterval: 1s, maxInterval: 1s, maxAttempts: 2}\n",
    );
    let release = vergence(
        &project,
        &["release", "my-service", "svc-1", "--app", "shop"],
    );
    assert_eq!(release.code, 0, "{release}");
    let up = vergence(&project, &["up"]);
    assert_eq!(
        up.code, 2,
        "the fetch fails, never reads as progress:\n{up}"
    );
    let instance = project.instance("my-service", "staging");
    assert_eq!(instance["status"], "FAILED", "{instance:#}");
    let reason = instance["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            r#"fetch output: object "web": unknown status "DONE" (expected PENDING, SUCCEEDED or FAILED)"#
        ),
        "{instance:#}"
    );
    assert!(
        !project.file("deployed-staging").exists(),
        "nothing applied"
    );
}

/// `GET path` on the server with `token`: the body of a 200 answer.
fn get(server: &crate::common::server::Server, token: &str, path: &str) -> Value {
    use std::io::{Read, Write};
    let address = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{answer}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

#[test]
fn the_api_serves_what_get_info_printed() {
    use crate::common::server::{Server, create_token, remote};
    let project = Project::example("custom-runtime");
    let server = Server::start(&project, &[]);
    let admin = create_token(&project, &["admin"]);
    let config = project.path().to_str().unwrap().to_owned();
    let pushed = remote(&project, &server, &admin, &["configs", "push", &config]);
    assert_eq!(pushed.code, 0, "{pushed}");
    let released = remote(
        &project,
        &server,
        &admin,
        &["release", "my-service", "svc-1", "--app", "shop"],
    );
    assert_eq!(released.code, 0, "{released}");
    let path = "/v1/applications/shop/services/my-service/release-channels/staging";
    let mut seen = Value::Null;
    crate::common::wait_for(
        "getInfo's output in the API",
        Duration::from_secs(120),
        || {
            seen = get(&server, &admin, path);
            seen["instance"]["infoText"].is_string()
        },
    );
    assert_eq!(
        seen["instance"]["infoText"],
        "Console: https://console.example.com/services/my-service?env=staging",
        "{seen:#}"
    );
    assert_eq!(seen["instance"]["info"], serde_json::json!([]), "{seen:#}");
    assert!(
        seen["explain"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l
                == "    | Console: https://console.example.com/services/my-service?env=staging"),
        "{seen:#}"
    );
    // The same through the CLI's remote mode, which reads the API's view.
    let status = remote(
        &project,
        &server,
        &admin,
        &["status", "--service", "my-service"],
    );
    assert!(
        status.stdout.contains(
            "  info:\n    Console: https://console.example.com/services/my-service?env=staging\n"
        ),
        "{status}"
    );
}
