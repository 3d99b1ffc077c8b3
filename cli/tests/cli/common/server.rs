//! `vergence serve` on a free port, and the CLI in remote mode against it.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Project, Run};

/// A running `vergence serve`, killed if a test fails before stopping it.
pub struct Server {
    child: Child,
    pub url: String,
    output: Option<JoinHandle<String>>,
}

impl Server {
    /// Starts on port 0 and reads the URL from the first line of stdout.
    /// The project's state is given, not its config: `serve --config DIR`
    /// would apply DIR on start, and these tests push configs themselves.
    pub fn start(project: &Project, extra_args: &[&str]) -> Self {
        Self::start_command(
            Command::new(env!("CARGO_BIN_EXE_vergence")),
            project,
            extra_args,
        )
    }

    /// [`Server::start`] through `command`, which runs `vergence` (or a
    /// shell that execs it, to set limits) with the arguments appended.
    pub fn start_command(mut command: Command, project: &Project, extra_args: &[&str]) -> Self {
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--state"])
            .arg(project.file(".vergence/state.db"))
            .args(extra_args)
            .current_dir(project.path())
            .env_remove("RUST_LOG")
            .env_remove("VERGENCE_ENDPOINT")
            .env_remove("VERGENCE_WEBHOOK_SECRET")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start vergence serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        stdout.read_line(&mut first).expect("read the first line");
        let url = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line of serve: {first:?}"))
            .to_owned();
        // Keep reading, so the server never blocks on a full pipe.
        let output = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stdout.read_to_string(&mut rest);
            rest
        });
        Self {
            child,
            url,
            output: Some(output),
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops with SIGTERM, as a service manager would; returns how it
    /// exited and what it printed.
    pub fn stop(mut self) -> (ExitStatus, String) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(100));
        };
        let output = self.output.take().unwrap().join().unwrap();
        (status, output)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `vergence serve` for `project` with its config pushed by an admin
/// token: the server, that token and what the push printed.
pub fn serve_pushed(project: &Project) -> (Server, String, Run) {
    let server = Server::start(project, &[]);
    let admin = create_token(project, &["admin"]);
    let pushed = remote(
        project,
        &server,
        &admin,
        &["configs", "push", project.path().to_str().unwrap()],
    );
    assert_eq!(pushed.code, 0, "{pushed}");
    (server, admin, pushed)
}

/// `vergence --endpoint URL --token TOKEN ARGS`.
pub fn remote(project: &Project, server: &Server, token: &str, args: &[&str]) -> Run {
    let mut all = vec!["--endpoint", server.url.as_str(), "--token", token];
    all.extend_from_slice(args);
    project.vergence(&all)
}

pub fn create_token(project: &Project, scopes: &[&str]) -> String {
    create_app_token(project, "shop", scopes)
}

/// A token of application `app` with `scopes`, made with the local CLI.
pub fn create_app_token(project: &Project, app: &str, scopes: &[&str]) -> String {
    let mut args = vec!["token", "create", "--app", app];
    for scope in scopes {
        args.extend(["--scope", scope]);
    }
    let run = project.vergence(&args);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stderr.contains("cannot be shown again"), "{run}");
    let token = run.stdout.trim().to_owned();
    assert!(token.starts_with("vgt_"), "{run}");
    token
}

/// The server's `status --app APP --output json`, read every 500 ms
/// until `done` accepts it; after `timeout` the test fails with `what`
/// and the last answer.
pub fn status_until(
    (project, server, token): (&Project, &Server, &str),
    app: &str,
    (what, timeout): (&str, Duration),
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let status = instances(&remote(
            project,
            server,
            token,
            &["status", "--app", app, "--output", "json"],
        ));
        if done(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "{what}: still {status:#?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub fn instances(run: &Run) -> Vec<Value> {
    assert_eq!(run.code, 0, "{run}");
    let json: Value = serde_json::from_str(&run.stdout).expect("status JSON");
    json["instances"].as_array().expect("instances").clone()
}
