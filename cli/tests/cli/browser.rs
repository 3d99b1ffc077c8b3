//! The web status page in a real browser: `vergence serve` on a copy of the
//! quickstart with prod behind a manual approval, and
//! `tests/browser/status_page.mjs` driving Debian's chromium headless with
//! playwright-core (both installed by scripts/test.sh). The script checks
//! the matrix, approves prod in the page, watches it converge live, reads
//! an instance page, and writes `target/artifacts/status-page.png`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Project;
use crate::common::server::{instances, remote, serve_pushed};

/// The node script may take this long: prod converges after staging, on a
/// loaded two-core machine.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

/// The release pushed to every service before the page is opened.
const RELEASE: &str = "v2";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The browser, node and playwright-core, or why the test cannot run.
fn tools() -> Result<(PathBuf, PathBuf), String> {
    let chromium = PathBuf::from("/usr/bin/chromium");
    if !chromium.exists() {
        return Err("chromium is not installed (scripts/test.sh installs it)".into());
    }
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    if !node.is_ok_and(|s| s.success()) {
        return Err("node is not installed".into());
    }
    let prefix = workspace().join(".tools/node");
    if !prefix
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        return Err(format!(
            "playwright-core is not installed under {} (scripts/test.sh installs it)",
            prefix.display()
        ));
    }
    Ok((chromium, prefix))
}

#[test]
fn an_operator_approves_prod_in_the_status_page_and_watches_it_converge() {
    let (chromium, playwright) = match tools() {
        Ok(found) => found,
        Err(why) if std::env::var_os("VERGENCE_REQUIRE_SERVICES").is_some() => {
            panic!("the browser test cannot run: {why}")
        }
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let project = Project::quickstart();
    project.replace(
        "application.yaml",
        "# - manualApproval: {name: prod-gate}",
        "- manualApproval: {name: prod-gate}",
    );
    // web's runtime reports a console link as getInfo prints it, with
    // markup in it that the page must show as text.
    project.write(
        "scripts/info.sh",
        "#!/bin/sh\necho \"Console: https://console.example.com/services/$SERVICE?env=$VERGENCE_RELEASE_CHANNEL.\"\necho '<b>not bold</b> <img src=x onerror=alert(1)> javascript:alert(2)'\n",
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            project.file("scripts/info.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    project.replace(
        "runtimes.yaml",
        "  fetch:\n    mode: structured\n",
        "  getInfo:\n    taskConfig:\n      program:\n        cmd: [./scripts/info.sh]\n        env:\n          SERVICE: \"{{.Params.service}}\"\n  fetch:\n    mode: structured\n",
    );
    let (server, admin, _) = serve_pushed(&project);
    for service in ["migrations", "api", "web"] {
        let released = remote(
            &project,
            &server,
            &admin,
            &["release", service, RELEASE, "--app", "shop"],
        );
        assert_eq!(released.code, 0, "{released}");
    }

    let screenshot = workspace().join("target/artifacts/status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let log = std::fs::File::create(project.file("node.log")).unwrap();
    let mut child = Command::new("node")
        .arg(workspace().join("tests/browser/status_page.mjs"))
        .env("VERGENCE_URL", &server.url)
        .env("VERGENCE_TOKEN", &admin)
        .env("VERSION", RELEASE)
        .env("CHROMIUM", &chromium)
        .env("PLAYWRIGHT_DIR", &playwright)
        .env("SCREENSHOT", &screenshot)
        .current_dir(workspace())
        // One file description for both, so their lines interleave in order.
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start node");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > SCRIPT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "tests/browser/status_page.mjs did not finish in {SCRIPT_TIMEOUT:?}:\n{}",
                project.read("node.log")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = project.read("node.log");
    assert!(
        status.success(),
        "tests/browser/status_page.mjs failed ({status}):\n{output}"
    );
    println!("{output}");

    // What the page did is in the state: every instance converged, prod by
    // approvals the page recorded.
    let status = instances(&remote(
        &project,
        &server,
        &admin,
        &["status", "--app", "shop", "--output", "json"],
    ));
    assert_eq!(status.len(), 6, "{status:#?}");
    for instance in &status {
        assert_eq!(instance["status"], "CONVERGED", "{instance}");
        assert_eq!(instance["currentVersion"], RELEASE, "{instance}");
    }
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let (stopped, _) = server.stop();
    assert!(stopped.success(), "serve exited with {stopped}");
}
