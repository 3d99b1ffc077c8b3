//! `vergence serve` under a low descriptor limit: idle and slow clients
//! are cut off and capped, the API keeps answering, and a job that cannot
//! start for lack of descriptors waits instead of failing.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::server::Server;
use crate::common::{Project, vergence_bin, wait_for};

/// One service in one channel: its apply writes the version to
/// applied.txt; with `fetch`, a fetch checks it every second. One failed
/// attempt gives the version up.
fn one_instance(fetch: bool) -> Project {
    let project = Project::empty();
    let fetch = if fetch {
        r#"  fetch:
    mode: exitCode
    taskConfig:
      program:
        cmd: [sh, -c, 'test "$(cat applied.txt 2>/dev/null)" = "$VERGENCE_SERVICE_VERSION" || exit 2']
    pollInterval: 1s
    steadyStatePollInterval: 1s
"#
    } else {
        ""
    };
    project.write(
        "config.yaml",
        &(r#"runtime:
  name: shell
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'echo "$VERGENCE_SERVICE_VERSION" > applied.txt']
    retryPolicy: {baseInterval: 1s, maxInterval: 1s, maxAttempts: 1}
"#
        .to_owned()
            + fetch
            + r#"---
application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: shell}]
---
service:
  name: api
  runtime: shell
"#),
    );
    project
}

/// Reads until the server closes the connection; false if it is still
/// open after `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0_u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            // An answer (an error page) is read past; the close follows.
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// Sends a header line one byte every 200 ms and never ends it; true once
/// the server closed the connection, false if it still had it after 60 s.
fn trickle(address: &str) -> std::thread::JoinHandle<bool> {
    let mut stream = TcpStream::connect(address).unwrap();
    std::thread::spawn(move || {
        if stream
            .write_all(b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .is_err()
        {
            return true;
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if stream.write_all(b"a").is_err()
                || closed_within(&mut stream, Duration::from_millis(200))
            {
                return true;
            }
        }
        false
    })
}

/// `GET path` on a connection of its own; the whole answer.
fn get(address: &str, path: &str, within: Duration) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(within)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    match stream.read_to_end(&mut answer) {
        Ok(_) => String::from_utf8_lossy(&answer).into_owned(),
        Err(e) => panic!("no answer to GET {path} within {within:?}: {e}"),
    }
}

fn events_text(project: &Project) -> String {
    project
        .events(&[])
        .iter()
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn idle_and_slow_connections_are_cut_off_and_never_starve_the_api_or_the_jobs() {
    let project = one_instance(true);
    // 100 descriptors, as a small container or a service manager might give.
    let mut command = Command::new("sh");
    command
        .args(["-c", r#"ulimit -n 100 && exec "$0" "$@""#])
        .arg(vergence_bin())
        // Through the environment, so that a build without the flags can
        // be run by this test too (VERGENCE_TEST_BIN).
        .env("VERGENCE_IDLE_TIMEOUT", "2s")
        .env("VERGENCE_HEADER_READ_TIMEOUT", "4s");
    let server = Server::start_command(
        command,
        &project,
        &["--config", project.path().to_str().unwrap()],
    );
    let address = server.url.strip_prefix("http://").unwrap().to_owned();
    let released = project.vergence(&["release", "api", "v1", "--app", "shop"]);
    assert_eq!(released.code, 0, "{released}");
    wait_for("v1 to converge", Duration::from_secs(60), || {
        project.instance("api", "staging")["currentVersion"] == "v1"
    });

    // 5 clients trickling a header line, then 150 that connect and say
    // nothing: more sockets than the process may open.
    let slow: Vec<_> = (0..5).map(|_| trickle(&address)).collect();
    let mut idle: Vec<TcpStream> = (0..150)
        .map(|_| TcpStream::connect(&address).unwrap())
        .collect();

    let health = get(&address, "/v1/healthz", Duration::from_secs(60));
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    for (n, stream) in idle.iter_mut().enumerate() {
        assert!(
            closed_within(stream, Duration::from_secs(60)),
            "idle connection {n} is still open"
        );
    }
    for (n, slow) in slow.into_iter().enumerate() {
        assert!(
            slow.join().unwrap(),
            "the connection trickling a header ({n}) was never cut off"
        );
    }
    // The fetch kept running every second meanwhile: none of its jobs
    // was refused a descriptor, and the instance is as it was.
    let events = events_text(&project);
    assert!(!events.contains("not started"), "{events}");
    let api = project.instance("api", "staging");
    assert_eq!(api["status"], "CONVERGED", "{api:#}");
    assert_eq!(api["currentVersion"], "v1", "{api:#}");
    let (status, _) = server.stop();
    assert!(status.success(), "{status:?}");
}

/// Sets the soft descriptor limit of a running process.
fn set_descriptor_limit(pid: u32, soft: &str) {
    let set = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={soft}:"))
        .output()
        .expect("run prlimit");
    assert!(set.status.success(), "{set:?}");
}

fn soft_descriptor_limit(pid: u32) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().to_owned()
}

#[test]
fn a_job_that_cannot_start_for_lack_of_descriptors_waits_and_is_not_a_failed_attempt() {
    // Without a fetch, a release is applied at once: the apply is the job
    // that cannot start.
    let project = one_instance(false);
    let server = Server::start_command(
        Command::new(vergence_bin()),
        &project,
        &["--config", project.path().to_str().unwrap()],
    );
    let pid = server.pid();
    let released = project.vergence(&["release", "api", "v1", "--app", "shop"]);
    assert_eq!(released.code, 0, "{released}");
    wait_for("v1 to converge", Duration::from_secs(60), || {
        project.instance("api", "staging")["currentVersion"] == "v1"
    });

    // The server may open two more descriptors than it has: not enough
    // for a job's pipes.
    let normal = soft_descriptor_limit(pid);
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    set_descriptor_limit(pid, &(open + 2).to_string());
    let released = project.vergence(&["release", "api", "v2", "--app", "shop"]);
    assert_eq!(released.code, 0, "{released}");
    wait_for(
        "the apply of v2 to be refused descriptors",
        Duration::from_secs(60),
        || events_text(&project).contains("not started"),
    );
    let waiting: Value = project.instance("api", "staging");
    let events = events_text(&project);
    assert!(events.contains("Too many open files"), "{events}");
    assert!(events.contains("not a failed attempt"), "{events}");
    assert!(!events.contains("gave up"), "{events}");
    assert_ne!(waiting["status"], "FAILED", "{waiting:#}");
    assert_eq!(waiting["desiredVersion"], "v2", "{waiting:#}");

    // Descriptors back: v2 converges, without a rollback.
    set_descriptor_limit(pid, &normal);
    wait_for("v2 to converge", Duration::from_secs(60), || {
        project.instance("api", "staging")["currentVersion"] == "v2"
    });
    let api = project.instance("api", "staging");
    assert_eq!(api["status"], "CONVERGED", "{api:#}");
    assert_eq!(api["desiredVersion"], "v2", "{api:#}");
    assert_eq!(project.read("applied.txt").trim(), "v2");
    let events = events_text(&project);
    assert!(!events.contains("gave up"), "{events}");
    assert!(!events.contains("rolled back"), "{events}");
    let (status, _) = server.stop();
    assert!(status.success(), "{status:?}");
}
