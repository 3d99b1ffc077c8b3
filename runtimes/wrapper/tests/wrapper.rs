//! The built `vergence-wrapper` against a small artifact server on
//! 127.0.0.1 that serves inputs and records uploads, running real commands.

// Helpers outside #[test] functions unwrap too; a panic is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, put};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// An upload as the server received it.
#[derive(Clone, Debug)]
struct Upload {
    name: String,
    body: Vec<u8>,
    content_length: Option<String>,
}

#[derive(Default)]
struct Store {
    inputs: BTreeMap<String, Vec<u8>>,
    uploads: Vec<Upload>,
}

/// The artifact server: `GET /in/{name}` serves inputs (404 for others),
/// `PUT /out/{name}` records uploads, `PUT /forbidden/{name}` refuses them
/// as S3 does.
struct Server {
    url: String,
    store: Arc<Mutex<Store>>,
}

impl Server {
    async fn start(inputs: &[(&str, &[u8])]) -> Self {
        let store = Arc::new(Mutex::new(Store {
            inputs: inputs
                .iter()
                .map(|(name, content)| ((*name).to_owned(), content.to_vec()))
                .collect(),
            uploads: Vec::new(),
        }));
        let app = Router::new()
            .route("/in/{name}", get(serve))
            .route("/out/{name}", put(record))
            .route("/forbidden/{name}", put(forbid))
            .with_state(Arc::clone(&store));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, store }
    }

    /// A presigned-looking URL: the query string is a credential.
    fn url(&self, path: &str) -> String {
        format!("{}/{path}?X-Amz-Signature=sekrit", self.url)
    }

    fn uploads(&self) -> Vec<Upload> {
        self.store.lock().unwrap().uploads.clone()
    }

    fn uploaded(&self, name: &str) -> Option<Vec<u8>> {
        let uploads = self.uploads();
        let found: Vec<&Upload> = uploads.iter().filter(|u| u.name == name).collect();
        assert!(found.len() <= 1, "{name} uploaded twice");
        found.first().map(|u| u.body.clone())
    }
}

async fn serve(
    State(store): State<Arc<Mutex<Store>>>,
    UrlPath(name): UrlPath<String>,
) -> Result<Vec<u8>, StatusCode> {
    store
        .lock()
        .unwrap()
        .inputs
        .get(&name)
        .cloned()
        .ok_or(StatusCode::NOT_FOUND)
}

async fn record(
    State(store): State<Arc<Mutex<Store>>>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let content_length = headers
        .get("content-length")
        .map(|v| v.to_str().unwrap().to_owned());
    store.lock().unwrap().uploads.push(Upload {
        name,
        body: body.to_vec(),
        content_length,
    });
    StatusCode::OK
}

async fn forbid() -> (StatusCode, &'static str) {
    (
        StatusCode::FORBIDDEN,
        "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
    )
}

/// The wrapper, with nothing of the protocol, and no proxy (the server is
/// on 127.0.0.1), inherited from the test's own environment.
fn bare_wrapper() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vergence-wrapper"));
    for (name, _) in std::env::vars().filter(|(name, _)| {
        name.starts_with("VERGENCE_") || name.to_ascii_lowercase().ends_with("_proxy")
    }) {
        command.env_remove(name);
    }
    command.stdin(Stdio::null()).kill_on_drop(true);
    command
}

/// The wrapper running `sh -c script` with `vars`.
fn wrapper(script: &str, vars: &[(&str, String)]) -> Command {
    let mut command = bare_wrapper();
    command.args(["--", "sh", "-c", script]);
    command.envs(vars.iter().map(|(k, v)| (k, v)));
    command
}

async fn run(script: &str, vars: &[(&str, String)]) -> Output {
    tokio::time::timeout(Duration::from_secs(30), wrapper(script, vars).output())
        .await
        .expect("the wrapper did not finish")
        .unwrap()
}

/// The variables of a job with its files under `dir`.
fn protocol(
    server: &Server,
    dir: &Path,
    inputs: &str,
    outputs: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("VERGENCE_INPUT_DIR", dir.join("in").display().to_string()),
        ("VERGENCE_OUTPUT_DIR", dir.join("out").display().to_string()),
        ("VERGENCE_INPUT_URLS", inputs.to_owned()),
        ("VERGENCE_OUTPUT_URLS", outputs.to_owned()),
        ("VERGENCE_STDOUT_URL", server.url("out/stdout")),
        ("VERGENCE_STDERR_URL", server.url("out/stderr")),
    ]
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn inputs_land_in_the_input_dir_and_outputs_and_streams_are_uploaded_byte_exact() {
    let plan: Vec<u8> = (0..=255).cycle().take(70_000).collect();
    let server = Server::start(&[("plan.bin", &plan), ("notes.txt", b"hello")]).await;
    let dir = tempfile::tempdir().unwrap();
    let inputs = format!(
        r#"{{"plan.bin": "{}", "notes.txt": "{}"}}"#,
        server.url("in/plan.bin"),
        server.url("in/notes.txt")
    );
    let outputs = format!(
        r#"{{"plan": "{}", "env": "{}", "never-written": "{}"}}"#,
        server.url("out/plan"),
        server.url("out/env"),
        server.url("out/never-written")
    );
    let script = r#"cp "$VERGENCE_INPUT_DIR/plan.bin" "$VERGENCE_OUTPUT_DIR/plan"
env > "$VERGENCE_OUTPUT_DIR/env"
echo undeclared > "$VERGENCE_OUTPUT_DIR/other"
printf 'out \342\202\254 %s\n' "$(cat "$VERGENCE_INPUT_DIR/notes.txt")"
printf 'no newline at the end' >&2
exit 3"#;

    let output = run(script, &protocol(&server, dir.path(), &inputs, &outputs)).await;

    assert_eq!(output.status.code(), Some(3), "{}", text(&output.stderr));
    assert_eq!(server.uploaded("plan").unwrap(), plan);
    assert_eq!(
        server.uploaded("stdout").unwrap(),
        "out € hello\n".as_bytes()
    );
    assert_eq!(server.uploaded("stderr").unwrap(), b"no newline at the end");
    assert_eq!(server.uploaded("never-written"), None);
    assert_eq!(server.uploaded("other"), None);
    // The command's output still reaches the wrapper's own, for platform logs.
    assert_eq!(text(&output.stdout), "out € hello\n");
    assert_eq!(text(&output.stderr), "no newline at the end");
    // The command never sees the URLs, which are credentials.
    let env = text(&server.uploaded("env").unwrap());
    assert!(!env.contains("sekrit"), "{env}");
    assert!(!env.contains("VERGENCE_OUTPUT_URLS"), "{env}");
    assert!(env.contains(&format!(
        "VERGENCE_INPUT_DIR={}",
        dir.path().join("in").display()
    )));
    // Stdout last: its presence tells the runner the streams are complete.
    let uploads = server.uploads();
    assert_eq!(uploads.last().unwrap().name, "stdout");
    for upload in &uploads {
        assert_eq!(
            upload.content_length.as_deref(),
            Some(upload.body.len().to_string().as_str()),
            "{} was not sent with its length (S3 refuses chunked uploads)",
            upload.name
        );
    }
}

#[tokio::test]
async fn a_failed_download_exits_70_without_running_the_command() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let inputs = format!(r#"{{"plan.bin": "{}"}}"#, server.url("in/plan.bin"));
    let ran = dir.path().join("ran");

    let output = run(
        &format!("touch {}", ran.display()),
        &protocol(&server, dir.path(), &inputs, ""),
    )
    .await;

    assert_eq!(output.status.code(), Some(70));
    assert!(!ran.exists(), "the command ran");
    let expected = format!(
        "vergence-wrapper: cannot download input plan.bin from {}/in/plan.bin: the server answered 404 Not Found; the command was not run\n",
        server.url
    );
    assert_eq!(text(&output.stderr), expected);
    // The reason is also the job's stderr, for the runner to report.
    assert_eq!(text(&server.uploaded("stderr").unwrap()), expected);
    assert_eq!(server.uploaded("stdout").unwrap(), b"");
}

#[tokio::test]
async fn a_failed_upload_exits_70_after_the_command_ran_and_says_why() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let outputs = format!(r#"{{"plan": "{}"}}"#, server.url("forbidden/plan"));

    let output = run(
        r#"echo planned > "$VERGENCE_OUTPUT_DIR/plan"; echo done"#,
        &protocol(&server, dir.path(), "", &outputs),
    )
    .await;

    assert_eq!(output.status.code(), Some(70));
    let stderr = text(&output.stderr);
    let failure = format!(
        "cannot upload output plan to {}/forbidden/plan: the server answered 403 Forbidden: <Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
        server.url
    );
    assert!(
        stderr.contains(&format!(
            "(the command exited with 0): output plan to {}/forbidden/plan",
            server.url
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("sekrit"), "{stderr}");
    assert_eq!(
        text(&server.uploaded("stderr").unwrap()),
        format!("vergence-wrapper: {failure}\n")
    );
    assert_eq!(server.uploaded("stdout").unwrap(), b"done\n");
}

#[tokio::test]
async fn sigterm_reaches_the_command_whose_exit_code_is_passed_through() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let script = r#"trap 'echo terminated; exit 42' TERM
echo ready
while :; do sleep 0.1; done"#;
    let mut child = wrapper(script, &protocol(&server, dir.path(), "", ""))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("ready"));

    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();

    assert_eq!(status.code(), Some(42));
    assert_eq!(server.uploaded("stdout").unwrap(), b"ready\nterminated\n");
}

#[tokio::test]
async fn a_command_killed_by_a_signal_exits_128_plus_the_signal() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();

    let output = run(
        "echo bye >&2; kill -9 $$",
        &protocol(&server, dir.path(), "", ""),
    )
    .await;

    assert_eq!(output.status.code(), Some(137));
    assert_eq!(
        text(&server.uploaded("stderr").unwrap()),
        "bye\nkilled by signal 9 (SIGKILL)\n"
    );
}

#[tokio::test]
async fn a_command_that_cannot_run_exits_127_and_says_so() {
    let server = Server::start(&[]).await;
    let mut command = bare_wrapper();
    command
        .arg("vergence-no-such-program")
        .env("VERGENCE_STDOUT_URL", server.url("out/stdout"))
        .env("VERGENCE_STDERR_URL", server.url("out/stderr"));

    let output = command.output().await.unwrap();

    assert_eq!(output.status.code(), Some(127));
    let stderr = text(&server.uploaded("stderr").unwrap());
    assert!(
        stderr.starts_with("vergence-wrapper: cannot run vergence-no-such-program: "),
        "{stderr}"
    );
    assert_eq!(server.uploaded("stdout").unwrap(), b"");
}

#[tokio::test]
async fn without_a_command_it_exits_64_with_its_usage() {
    for args in [&[][..], &["--"][..], &["--frobnicate"][..]] {
        let output = bare_wrapper().args(args).output().await.unwrap();
        assert_eq!(output.status.code(), Some(64), "{args:?}");
        assert!(
            text(&output.stderr).contains("usage: vergence-wrapper"),
            "{args:?}"
        );
    }
}

/// A Lambda runtime API that hands out one invocation and records the
/// function's answers; later `next` calls wait (as Lambda's do).
struct RuntimeApi {
    url: String,
    answers: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
}

impl RuntimeApi {
    async fn start(event: serde_json::Value, deadline_ms: u128) -> Self {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let pending = Arc::new(Mutex::new(Some(event)));
        let next = move || {
            let pending = Arc::clone(&pending);
            async move {
                let Some(event) = pending.lock().unwrap().take() else {
                    return std::future::pending().await;
                };
                (
                    [
                        ("lambda-runtime-aws-request-id", "req-1".to_owned()),
                        ("lambda-runtime-deadline-ms", deadline_ms.to_string()),
                        (
                            "lambda-runtime-invoked-function-arn",
                            "arn:aws:lambda:us-east-1:123456789012:function:jobs".to_owned(),
                        ),
                    ],
                    event.to_string(),
                )
            }
        };
        let recorded = Arc::clone(&answers);
        let answer = move |UrlPath((id, kind)): UrlPath<(String, String)>, body: Bytes| {
            let recorded = Arc::clone(&recorded);
            async move {
                let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                recorded
                    .lock()
                    .unwrap()
                    .push((format!("{id}/{kind}"), body));
                StatusCode::ACCEPTED
            }
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/{kind}",
                axum::routing::post(answer),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, answers }
    }
}

#[tokio::test]
async fn the_lambda_mode_runs_the_job_of_an_invocation_and_stops_it_before_the_deadline() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let env = serde_json::json!({
        "PVN_SERVICE_VERSION": "v7",
        "VERGENCE_INPUT_DIR": dir.path().join("in").display().to_string(),
        "VERGENCE_OUTPUT_DIR": dir.path().join("out").display().to_string(),
        "VERGENCE_STDOUT_URL": server.url("out/stdout"),
        "VERGENCE_STDERR_URL": server.url("out/stderr"),
        "VERGENCE_RESULT_URL": server.url("out/result"),
    });
    // A leftover of an earlier job in a warm sandbox's output directory.
    std::fs::create_dir_all(dir.path().join("out")).unwrap();
    std::fs::write(dir.path().join("out/stale"), "from the last job").unwrap();
    let event = serde_json::json!({"vergenceJob": {
        "id": "apply-1",
        "command": ["sh", "-c", "ls \"$VERGENCE_OUTPUT_DIR\"; echo \"deploying $PVN_SERVICE_VERSION\"; echo \"url: ${VERGENCE_RESULT_URL:-hidden}\" >&2; exec sleep 60"],
        "env": env,
    }});
    // 21 s ahead: the wrapper stops the command 20 s before, at once.
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 21_000;
    let api = RuntimeApi::start(event, deadline).await;
    let _function = bare_wrapper()
        .arg("--lambda")
        .env("AWS_LAMBDA_RUNTIME_API", &api.url)
        .env("AWS_LAMBDA_FUNCTION_NAME", "jobs")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Bounded wait for the outcome (the command would sleep 60 s).
    let mut waited = Duration::ZERO;
    while api.answers.lock().unwrap().is_empty() {
        assert!(
            waited < Duration::from_secs(30),
            "no answer to the invocation"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    let answers = api.answers.lock().unwrap().clone();
    let (path, response) = &answers[0];
    // A response, never an error: Lambda would invoke a failed one again.
    assert_eq!(path, "req-1/response", "{answers:?}");
    assert_eq!(response["job"], "apply-1", "{response}");
    assert_eq!(response["exitCode"], 143, "SIGTERM: {response}");
    assert_eq!(response["timedOut"], true, "{response}");
    let result: serde_json::Value =
        serde_json::from_slice(&server.uploaded("result").expect("the result uploaded")).unwrap();
    assert_eq!(result["exitCode"], 143);
    assert_eq!(result["timedOut"], true);
    // The job's environment reached the command, the stale file did not,
    // and the URLs (credentials) were kept from it.
    assert_eq!(text(&server.uploaded("stdout").unwrap()), "deploying v7\n");
    let stderr = text(&server.uploaded("stderr").unwrap());
    assert!(stderr.starts_with("url: hidden\n"), "{stderr}");
    assert!(stderr.contains("killed by signal 15"), "{stderr}");
}
