//! Test support every test binary may use, whatever it links: it depends
//! on no cloud SDK and on no crate of Vergence's, so a test of the CLI
//! (which runs the `vergence` binary) links only what it calls.

// Test support: a failure to copy a fixture is the test's failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "prometheus")]
pub mod prometheus;

use std::path::{Path, PathBuf};

/// The workspace's root folder.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Copies `from` into `to`, leaving out what running an example leaves
/// behind (its `.vergence/` state and `deployed/` files).
pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".vergence" || name == "deployed" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of `examples/<name>` in a new temporary folder, without state or
/// deployed files.
pub fn example_copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_dir(&workspace().join("examples").join(name), dir.path());
    dir
}

/// The variable naming DynamoDB Local's URL (`scripts/services.sh`).
pub const DYNAMODB_URL: &str = "VERGENCE_TEST_DYNAMODB_URL";
/// The variable naming moto's URL (SQS, ECS, S3, Logs, …).
pub const SQS_URL: &str = "VERGENCE_TEST_SQS_URL";

/// The endpoint in `var`; `None` (the test skips) when it is not set,
/// unless `VERGENCE_REQUIRE_SERVICES=1` makes a missing service a failure.
pub fn endpoint(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("VERGENCE_REQUIRE_SERVICES").as_deref() == Ok("1") => panic!(
            "{var} is not set and VERGENCE_REQUIRE_SERVICES=1: run \
             `scripts/services.sh start && . .tools/services.env` first"
        ),
        _ => {
            println!("skipped: set {var}");
            None
        }
    }
}

/// `prefix` and 16 random hex digits: a table, queue or bucket of one's
/// own, so tests run in parallel against one server.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{:016x}", fastrand::u64(..))
}

/// A binary of the workspace (`vergence`, `worker`, `vergence-agent`, …)
/// as cargo built it beside this test's own executable
/// (`target/<profile>/<name>`). Tests of one crate that run another
/// crate's binary find it here: `scripts/test.sh` builds every binary
/// (`cargo build --workspace --all-targets`) before it runs the tests.
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own executable");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/<name>
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test executable in target/<profile>/deps");
    let binary = profile.join(name);
    assert!(
        binary.is_file(),
        "{} is not built: run `cargo build --workspace --all-targets` first (scripts/test.sh does)",
        binary.display()
    );
    binary
}

/// The rows of the Markdown table in the workspace file `path` whose
/// header line starts with `header`, each as its trimmed cells; for tests
/// that hold the docs to the code.
pub fn doc_table(path: &str, header: &str) -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(workspace().join(path)).unwrap();
    let rows: Vec<Vec<String>> = doc
        .lines()
        .skip_while(|line| !line.starts_with(header))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            line.trim()
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect();
    assert!(
        !rows.is_empty(),
        "{path} has a table headed {header:?}, with rows"
    );
    rows
}

/// Polls `done` every 100 ms until it holds; fails the test, naming
/// `what`, after `timeout`.
pub fn wait_for(what: &str, timeout: std::time::Duration, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A TCP port free on 127.0.0.1 when asked.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The variable naming the cargo-lambda binary `scripts/services.sh`
/// installed (`.tools/cargo-lambda`).
pub const CARGO_LAMBDA: &str = "VERGENCE_TEST_CARGO_LAMBDA";

/// A Lambda function running this build's `vergence-wrapper` in its
/// Lambda mode behind `cargo lambda watch --only-lambda-apis` — the real
/// Lambda runtime and Invoke APIs — for tests of the lambda runner. Both
/// processes stop when it is dropped.
#[derive(Debug)]
pub struct WrapperFunction {
    watch: std::process::Child,
    wrapper: std::process::Child,
    /// The Invoke API's endpoint (`AWS_ENDPOINT_URL_LAMBDA`).
    pub url: String,
}

impl WrapperFunction {
    /// The function's name: `cargo lambda watch` serves only the names of
    /// the workspace's binaries, and this is the one it runs.
    pub const NAME: &str = "vergence-wrapper";

    /// Starts both, with `cargo_lambda` (from [`CARGO_LAMBDA`]); the
    /// wrapper runs jobs in `workdir`.
    pub fn start(cargo_lambda: &str, workdir: &Path) -> Self {
        use std::process::{Command, Stdio};
        let port = free_port();
        // --only-lambda-apis: no cargo build; the function is started
        // below, from the binary this build made. It must run in the
        // workspace, whose binaries are the function names it serves.
        let watch = Command::new(cargo_lambda)
            .args(["lambda", "watch", "--only-lambda-apis", "-A", "127.0.0.1"])
            .args(["-P", &port.to_string()])
            .current_dir(workspace())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start cargo lambda watch");
        let url = format!("http://127.0.0.1:{port}");
        wait_for(
            "cargo lambda watch",
            std::time::Duration::from_secs(30),
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        );
        let wrapper = Command::new(workspace_binary("vergence-wrapper"))
            .env(
                "AWS_LAMBDA_RUNTIME_API",
                format!("{url}/.rt/{}", Self::NAME),
            )
            .env("AWS_LAMBDA_FUNCTION_NAME", Self::NAME)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .current_dir(workdir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start vergence-wrapper");
        Self {
            watch,
            wrapper,
            url,
        }
    }
}

impl Drop for WrapperFunction {
    fn drop(&mut self) {
        for child in [&mut self.wrapper, &mut self.watch] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
