//! Runs the real `vergence` binary against configs in temporary folders.

pub mod server;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn of(output: Output) -> Self {
        Self {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// The `vergence` binary under test: this build's, or the one
/// `VERGENCE_TEST_BIN` names (to run a test against another build, such as
/// the one before a fix).
pub fn vergence_bin() -> PathBuf {
    std::env::var_os("VERGENCE_TEST_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_vergence")),
        PathBuf::from,
    )
}

/// A config folder of one's own and the binary to run on it.
pub struct Project {
    pub dir: tempfile::TempDir,
}

impl Project {
    /// A copy of examples/quickstart without any state or deployed files.
    pub fn quickstart() -> Self {
        Self::example("quickstart")
    }

    /// A copy of `examples/<name>` without any state or deployed files.
    pub fn example(name: &str) -> Self {
        Self {
            dir: vergence_testkit::example_copy(name),
        }
    }

    pub fn empty() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn file(&self, relative: &str) -> PathBuf {
        self.path().join(relative)
    }

    pub fn write(&self, relative: &str, text: &str) {
        let path = self.file(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }

    pub fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.file(relative))
            .unwrap_or_else(|e| panic!("reading {relative}: {e}"))
    }

    pub fn replace(&self, relative: &str, from: &str, to: &str) {
        let text = self.read(relative);
        assert!(text.contains(from), "{relative} does not contain {from:?}");
        self.write(relative, &text.replacen(from, to, 1));
    }

    /// Runs `vergence ARGS --config <project>`.
    pub fn vergence(&self, args: &[&str]) -> Run {
        let output = Command::new(vergence_bin())
            .args(args)
            .arg("--config")
            .arg(self.path())
            .current_dir(self.path())
            .env_remove("RUST_LOG")
            // Remote mode only when a test asks for it.
            .env_remove("VERGENCE_ENDPOINT")
            .env_remove("VERGENCE_TOKEN")
            .env_remove("VERGENCE_WEBHOOK_SECRET")
            .output()
            .expect("run vergence");
        Run::of(output)
    }

    /// `vergence up`, asserting its exit code.
    pub fn up(&self, expect: i32) -> Run {
        let run = self.vergence(&["up"]);
        assert_eq!(run.code, expect, "vergence up:\n{run}");
        run
    }

    /// Instances from `vergence status --output json`.
    pub fn status(&self) -> Vec<Value> {
        let run = self.vergence(&["status", "--output", "json"]);
        assert_eq!(run.code, 0, "vergence status:\n{run}");
        let json: Value = serde_json::from_str(&run.stdout).expect("status JSON");
        json["instances"].as_array().expect("instances").clone()
    }

    pub fn instance(&self, service: &str, channel: &str) -> Value {
        self.status()
            .into_iter()
            .find(|i| i["service"] == service && i["releaseChannel"] == channel)
            .unwrap_or_else(|| panic!("no instance {service}@{channel}"))
    }

    /// Events from `vergence events --output json`, oldest first.
    pub fn events(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["events", "--output", "json", "--limit", "10000"];
        args.extend_from_slice(extra);
        let run = self.vergence(&args);
        assert_eq!(run.code, 0, "vergence events:\n{run}");
        let json: Value = serde_json::from_str(&run.stdout).expect("events JSON");
        json["events"].as_array().expect("events").clone()
    }

    /// How many applies were started, from the events.
    pub fn applies(&self) -> usize {
        self.events(&[])
            .iter()
            .filter(|e| e["type"] == "jobStarted" && e["job"] == "apply")
            .count()
    }
}

/// Polls `done` until it holds, failing the test after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for `child` at most `timeout`, reading its output as it comes (a
/// child blocked on a full pipe would look like a hang); kills it and
/// fails the test, naming `what`, when it does not end in time.
pub fn finish(mut child: Child, timeout: Duration, what: &str) -> Run {
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).unwrap();
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr piped")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > timeout {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let run = Run {
        code: status.and_then(|s| s.code()).unwrap_or(-1),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    assert!(
        status.is_some(),
        "{what} did not end within {timeout:?}\n{run}"
    );
    run
}
