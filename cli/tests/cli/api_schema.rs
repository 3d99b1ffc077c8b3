//! schemathesis against the real `vergence serve`: generated requests for
//! every operation of `docs/openapi.json`, valid and invalid, once with an
//! admin token and once with none. Any 5xx, any answer the document does
//! not describe (status, content type, headers, body schema) and a server
//! that dies fail the test.
//!
//! Short and seeded here, so a failure replays; a longer run is the same
//! command with a larger `--max-examples` and other seeds.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::Project;
use crate::common::server::{Server, remote, serve_pushed};

/// Pinned in scripts/test.sh, which installs it into `.tools/py`.
const SCHEMATHESIS_VERSION: &str = "4.32.5";

/// Test cases per operation and phase: enough to reach every operation's
/// error paths in well under a minute per run on two cores.
const MAX_EXAMPLES: &str = "25";

/// The seed, so a failure here replays exactly.
const SEED: &str = "1";

/// Every check schemathesis has but two: `negative_data_rejection` and
/// `positive_data_acceptance` judge whether the server's validation is
/// exactly the schema's, and here it is deliberately not: a release with a
/// parameter the service does not declare, or a config that is not valid
/// YAML, matches the schema and is still a 400; a header the server only
/// reads when a webhook secret is configured is ignored without one.
const EXCLUDED_CHECKS: &str = "negative_data_rejection,positive_data_acceptance";

/// Path parameters name the quickstart's application, services and
/// release channels most of the time, so generated bodies reach the
/// handlers instead of stopping at 403 (another application) or 404;
/// the rest of the time they are generated like any string.
const CONFIG: &str = r#"
[dictionaries.applications]
values = ["shop"]
[dictionaries.services]
values = ["web", "api", "migrations"]
[dictionaries.channels]
values = ["staging", "prod"]

[parameters]
"path.app" = { dictionary = "applications", probability = 0.8 }
"path.service" = { dictionary = "services", probability = 0.8 }
"path.rc" = { dictionary = "channels", probability = 0.8 }
"#;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The schemathesis binary: `.tools/py`'s (scripts/test.sh), else PATH's.
/// Missing is a failure where services are required (the test command),
/// a skip elsewhere.
fn schemathesis() -> Option<PathBuf> {
    let candidates = [
        workspace().join(".tools/py/bin/schemathesis"),
        PathBuf::from("schemathesis"),
    ];
    let found = candidates.into_iter().find(|binary| {
        Command::new(binary)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        if std::env::var("VERGENCE_REQUIRE_SERVICES").as_deref() == Ok("1") {
            panic!(
                "schemathesis is not installed: run scripts/test.sh, which installs \
                 schemathesis=={SCHEMATHESIS_VERSION} into .tools/py"
            );
        }
        println!("skipped: schemathesis is not installed (scripts/test.sh installs it)");
    }
    found
}

/// `GET /v1/healthz` over a plain socket: whether the server still answers.
fn healthy(url: &str) -> bool {
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let Ok(mut stream) = TcpStream::connect(address) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request =
        format!("GET /v1/healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Runs schemathesis on the documented operations `filter` selects (all
/// when empty); panics with its output when it finds anything.
fn run_schemathesis(
    binary: &Path,
    server: &Server,
    token: Option<&str>,
    filter: &[&str],
    scratch: &Path,
) {
    let config = scratch.join("schemathesis.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut command = Command::new(binary);
    command
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(workspace().join("docs/openapi.json"))
        .args(["--url", &server.url])
        .args(["--checks", "all", "--exclude-checks", EXCLUDED_CHECKS])
        .args(["--max-examples", MAX_EXAMPLES, "--seed", SEED])
        // One worker: the answers then do not depend on interleaving, so
        // the seed replays the run.
        .args(["--workers", "1", "--request-timeout", "30"])
        .args(["--no-color", "--generation-database", "none"])
        .args(filter)
        // A folder of its own, so no other schemathesis.toml is found.
        .current_dir(scratch);
    if let Some(token) = token {
        command.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    let started = Instant::now();
    let output = command.output().expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let who = format!(
        "{} {}",
        if token.is_some() { "admin" } else { "no token" },
        filter.join(" ")
    )
    .trim_end()
    .to_owned();
    println!(
        "schemathesis ({who}) took {:.1}s:\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        output.status.success(),
        "schemathesis ({who}) found problems, exit {}:\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        healthy(&server.url),
        "vergence serve no longer answers after schemathesis ({who})"
    );
}

#[test]
fn the_served_api_answers_generated_requests_as_its_openapi_document_says() {
    let Some(binary) = schemathesis() else {
        return;
    };
    let project = Project::quickstart();
    // With the quickstart in force and a release pushed, status, events
    // and approvals answer with real instances, not only 404s.
    let (server, admin, _) = serve_pushed(&project);
    let released = remote(
        &project,
        &server,
        &admin,
        &["release", "web", "v2", "--app", "shop"],
    );
    assert_eq!(released.code, 0, "{released}");

    let scratch = tempfile::tempdir().unwrap();
    // Config pushes last: schemathesis finds that a bundle of one empty
    // file is a valid (empty) config, and applying it removes the
    // quickstart the other operations need.
    let configs = ["--exclude-path", "/v1/configs"];
    run_schemathesis(&binary, &server, Some(&admin), &configs, scratch.path());
    let configs = ["--include-path", "/v1/configs"];
    run_schemathesis(&binary, &server, Some(&admin), &configs, scratch.path());
    run_schemathesis(&binary, &server, None, &[], scratch.path());

    let (status, output) = server.stop();
    assert!(
        status.success(),
        "vergence serve exited with {status}; output:\n{output}"
    );
}
