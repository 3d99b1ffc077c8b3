//! Notifications, end to end: `vergence up` on a quickstart copy tells a
//! receiver started here (a real HTTP server on 127.0.0.1) about the
//! events people act on, signed, with the dedup key and the instance's
//! link; retries a receiver that fails; and never waits on one that hangs.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{Project, Run};
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

const SECRET: &str = "notify-test-signing-secret";
const PUBLIC_URL: &str = "https://vergence.example.com";

/// One request the receiver got, and when.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: Vec<u8>,
    at: Instant,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header in {self:?}"))
            .to_str()
            .expect("a text header")
    }
}

/// An HTTP server recording every request, answering the first
/// `failures` with 500 and the rest with 200.
struct Receiver {
    address: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start(failures: usize) -> Self {
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let record = received.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let address = listener.local_addr().expect("address");
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let app = axum::Router::new().fallback(
                    move |uri: axum::http::Uri, headers: HeaderMap, body: axum::body::Bytes| {
                        let record = record.clone();
                        async move {
                            let mut all = record.lock().unwrap();
                            all.push(Received {
                                path: uri.path().to_owned(),
                                headers,
                                body: body.to_vec(),
                                at: Instant::now(),
                            });
                            if all.len() <= failures {
                                StatusCode::INTERNAL_SERVER_ERROR
                            } else {
                                StatusCode::OK
                            }
                        }
                    },
                );
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                axum::serve(listener, app).await.expect("serve");
            });
        });
        Self { address, received }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Runs `vergence ARGS` on the project with the receiver's URLs and the
/// signing secret in its environment.
fn vergence(project: &Project, args: &[&str], env: &[(&str, String)]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_vergence"))
        .args(args)
        .arg("--config")
        .arg(project.path())
        .current_dir(project.path())
        .env_remove("RUST_LOG")
        .env_remove("VERGENCE_ENDPOINT")
        .env_remove("VERGENCE_TOKEN")
        .env("VERGENCE_PUBLIC_URL", PUBLIC_URL)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run vergence");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The quickstart with `notifications` added to its application.
fn quickstart_notifying(notifications: &str) -> Project {
    let project = Project::quickstart();
    let app = project.read("application.yaml");
    project.write(
        "application.yaml",
        &format!("{app}\n  notifications:\n{notifications}"),
    );
    project
}

fn signature_of(request: &Received) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(request.header("x-vergence-timestamp").as_bytes());
    mac.update(b".");
    mac.update(&request.body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Every request to `path` whose body's event is `event`, by service.
fn about<'r>(received: &'r [Received], path: &str, event: &str) -> Vec<&'r Received> {
    received
        .iter()
        .filter(|r| r.path == path && r.json()["event"] == event)
        .collect()
}

#[test]
fn approvals_and_prod_convergence_reach_a_signed_webhook_and_slack_once_each() {
    let receiver = Receiver::start(0);
    let project = quickstart_notifying(
        r#"    - name: deploy-hook
      webhook: {url: {fromEnv: HOOK_URL}, signingSecret: {fromEnv: HOOK_SECRET}}
      on: [approvalNeeded, converged, failed, rolledBack, driftDetected, blocked]
    - name: team-chat
      slack: {webhookUrl: {fromEnv: CHAT_URL}}
      on: [converged]
      releaseChannels: [prod]
"#,
    );
    project.replace(
        "application.yaml",
        "# - manualApproval: {name: prod-gate}",
        "- manualApproval: {name: prod-gate}",
    );
    let env = [
        ("HOOK_URL", receiver.url("/hook")),
        ("HOOK_SECRET", SECRET.to_owned()),
        ("CHAT_URL", receiver.url("/slack")),
    ];

    let run = vergence(&project, &["up"], &env);
    assert_eq!(run.code, 3, "prod waits for approval:\n{run}");
    let received = receiver.received();
    let approvals = about(&received, "/hook", "approvalNeeded");
    let mut services: Vec<String> = approvals
        .iter()
        .map(|r| {
            let body = r.json();
            assert_eq!(body["releaseChannel"], "prod", "{body}");
            let service = body["service"].as_str().unwrap().to_owned();
            assert_eq!(
                body["link"],
                format!("{PUBLIC_URL}/ui/instances/shop/prod/{service}"),
            );
            assert_eq!(body["notification"], "deploy-hook");
            assert_eq!(r.header("x-vergence-delivery"), body["deliveryId"]);
            assert_eq!(r.header("x-vergence-signature"), signature_of(r));
            service
        })
        .collect();
    services.sort_unstable();
    assert_eq!(
        services,
        ["api", "migrations", "web"],
        "one per prod service"
    );
    assert!(
        about(&received, "/hook", "converged").is_empty(),
        "nothing converged in prod yet: {received:#?}"
    );

    for service in ["api", "migrations", "web"] {
        let run = vergence(
            &project,
            &[
                "approve",
                "--app",
                "shop",
                "--release-channel",
                "prod",
                "--service",
                service,
            ],
            &env,
        );
        assert_eq!(run.code, 0, "{run}");
    }
    let run = vergence(&project, &["up"], &env);
    assert_eq!(run.code, 0, "{run}");

    let received = receiver.received();
    let converged = about(&received, "/hook", "converged");
    assert_eq!(converged.len(), 3, "prod's three services: {received:#?}");
    for request in &converged {
        assert_eq!(
            request.header("x-vergence-signature"),
            signature_of(request)
        );
        assert_eq!(request.json()["releaseChannel"], "prod");
    }
    let slack: Vec<&Received> = received.iter().filter(|r| r.path == "/slack").collect();
    assert_eq!(slack.len(), 3, "{slack:#?}");
    for message in &slack {
        let body = message.json();
        let text = body["text"].as_str().unwrap();
        assert!(text.starts_with("shop/"), "{text}");
        assert!(text.contains("@prod: converged"), "{text}");
        assert!(
            text.contains(&format!("<{PUBLIC_URL}/ui/instances/shop/prod/")),
            "{text}"
        );
        assert!(body["blocks"].is_array(), "{body}");
    }
    // The second `up` sent nothing the first one had sent (the dedup keys
    // are all different: each event was delivered once).
    let mut keys: Vec<String> = received
        .iter()
        .map(|r| format!("{} {}", r.path, r.header("x-vergence-delivery")))
        .collect();
    let all = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), all, "a message was sent twice: {keys:#?}");
}

#[test]
fn a_receiver_that_fails_twice_gets_the_message_on_the_third_attempt() {
    let receiver = Receiver::start(2);
    let project = quickstart_notifying(
        r#"    - name: deploy-hook
      webhook: {url: {fromEnv: HOOK_URL}, signingSecret: {fromEnv: HOOK_SECRET}}
      on: [converged]
"#,
    );
    let env = [
        ("HOOK_URL", receiver.url("/hook")),
        ("HOOK_SECRET", SECRET.to_owned()),
    ];
    let run = vergence(&project, &["up"], &env);
    assert_eq!(run.code, 0, "{run}");

    let received = receiver.received();
    let first = received[0].header("x-vergence-delivery").to_owned();
    let attempts: Vec<&Received> = received
        .iter()
        .filter(|r| r.header("x-vergence-delivery") == first)
        .collect();
    assert_eq!(attempts.len(), 3, "500, 500, then 200: {received:#?}");
    // Backed off: about 0.5 s, then about 1 s between attempts.
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(gaps[0] >= Duration::from_millis(400), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(900), "{gaps:?}");
    assert!(gaps[1] > gaps[0], "{gaps:?}");
    let delivered: std::collections::BTreeSet<&str> = received
        .iter()
        .map(|r| r.header("x-vergence-delivery"))
        .collect();
    assert_eq!(delivered.len(), 3, "prod's three services converged");
    let events = project.events(&[]);
    assert!(
        events.iter().all(|e| e["type"] != "notificationFailed"),
        "nothing was given up on"
    );
}

#[test]
fn a_receiver_that_hangs_does_not_hold_up_convergence_or_the_exit() {
    // Accepts connections and never answers.
    let hanging = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", hanging.local_addr().unwrap());
    let held: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    let hold = held.clone();
    std::thread::spawn(move || {
        for stream in hanging.incoming().flatten() {
            hold.lock().unwrap().push(stream);
        }
    });

    let baseline = Project::quickstart();
    let start = Instant::now();
    let run = vergence(&baseline, &["up"], &[]);
    assert_eq!(run.code, 0, "{run}");
    let without = start.elapsed();

    let project = quickstart_notifying(
        r#"    - name: deploy-hook
      webhook: {url: {fromEnv: HOOK_URL}, signingSecret: {fromEnv: HOOK_SECRET}}
      on: [approvalNeeded, converged, failed, rolledBack, driftDetected, blocked]
"#,
    );
    let env = [("HOOK_URL", url), ("HOOK_SECRET", SECRET.to_owned())];
    let start = Instant::now();
    let run = vergence(&project, &["up"], &env);
    let with = start.elapsed();
    assert_eq!(run.code, 0, "converged all the same:\n{run}");
    assert!(
        with < without + Duration::from_secs(8),
        "up took {with:?} with a hanging receiver, {without:?} without"
    );
    assert!(
        run.stderr.contains("notifications not sent within 5s"),
        "{run}"
    );
    assert!(!held.lock().unwrap().is_empty(), "the receiver was called");
}

#[test]
fn a_public_url_that_is_not_one_stops_up_before_anything_is_applied() {
    let project = Project::quickstart();
    let run = vergence(
        &project,
        &["up", "--public-url", "vergence.example.com"],
        &[],
    );
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr.contains(
            "public URL \"vergence.example.com\": write the address people open, such as https://vergence.example.com"
        ),
        "{run}"
    );
    assert!(!project.file("deployed").exists(), "nothing ran: {run}");
}

#[test]
fn serve_notifies_as_it_converges_and_links_to_its_own_address() {
    use std::io::BufRead;
    let receiver = Receiver::start(0);
    let project = quickstart_notifying(
        r#"    - name: deploy-hook
      webhook: {url: {fromEnv: HOOK_URL}, signingSecret: {fromEnv: HOOK_SECRET}}
      on: [converged]
"#,
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_vergence"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(project.path())
        .current_dir(project.path())
        .env_remove("RUST_LOG")
        .env_remove("VERGENCE_PUBLIC_URL")
        .env_remove("VERGENCE_WEBHOOK_SECRET")
        .env("HOOK_URL", receiver.url("/hook"))
        .env("HOOK_SECRET", SECRET)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start vergence serve");
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let url = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    // Keep reading, so serve never writes to a closed or full pipe.
    let output = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut rest);
        rest
    });

    crate::common::wait_for("prod's three services", Duration::from_secs(60), || {
        about(&receiver.received(), "/hook", "converged").len() >= 3
    });
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    let output = output.join().unwrap();
    assert!(status.success(), "{status}\n{output}");

    let received = receiver.received();
    let converged = about(&received, "/hook", "converged");
    assert_eq!(converged.len(), 3, "{received:#?}");
    for request in converged {
        let body = request.json();
        assert_eq!(
            body["link"],
            format!(
                "{url}/ui/instances/shop/prod/{}",
                body["service"].as_str().unwrap()
            )
        );
        assert_eq!(
            request.header("x-vergence-signature"),
            signature_of(request)
        );
    }
}

#[test]
fn a_break_glass_override_is_sent_to_the_rules_that_ask_for_it() {
    let receiver = Receiver::start(0);
    let project = quickstart_notifying(
        r#"    - name: security-hook
      webhook: {url: {fromEnv: HOOK_URL}, signingSecret: {fromEnv: HOOK_SECRET}}
      on: [overridden]
"#,
    );
    let env = [
        ("HOOK_URL", receiver.url("/hook")),
        ("HOOK_SECRET", SECRET.to_owned()),
    ];
    let run = vergence(&project, &["up"], &env);
    assert_eq!(run.code, 0, "{run}");
    assert!(receiver.received().is_empty(), "nothing was overridden yet");
    // A new version, not yet applied in prod, is what an override lets through.
    let run = vergence(&project, &["release", "web", "v2", "--app", "shop"], &env);
    assert_eq!(run.code, 0, "{run}");
    let run = vergence(
        &project,
        &[
            "override",
            "web",
            "--app",
            "shop",
            "--release-channel",
            "prod",
            "--reason",
            "incident 4711",
        ],
        &env,
    );
    assert_eq!(run.code, 0, "{run}");
    let run = vergence(&project, &["up"], &env);
    assert_eq!(run.code, 0, "{run}");
    let received = receiver.received();
    let sent = about(&received, "/hook", "overridden");
    assert_eq!(sent.len(), 1, "{received:#?}");
    let body = sent[0].json();
    assert_eq!(body["service"], "web", "{body}");
    assert!(
        body.to_string().contains("incident 4711"),
        "the reason goes with it: {body}"
    );
    assert_eq!(
        sent[0].header("x-vergence-signature"),
        signature_of(sent[0])
    );
}
