//! The pieces of the end-to-end tests: the server as `vergence serve` wires
//! it, an agent process, and waiting for things to happen.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vergence_api::{ApiConfig, ApiState, create_token, router};
use vergence_compiler::YamlCompiler;
use vergence_embedded::{DirArtifactStore, DriveMode, Driver, LocalQueue, Progress, SqliteStore};
use vergence_engine::control::Control;
use vergence_engine::{Engine, JobCompletion, RunnerRouter};
use vergence_model::agent::protocol::{AgentReport, PollRequest, ReportAnswer, Task};
use vergence_model::ports::{AgentDesk, ArtifactStore, Clock, StateStore, SystemClock};
use vergence_model::{AgentName, Event, InstanceKey, RunnerKind, Scope, TokenSubject};
use vergence_runner_kubernetes::{AgentJobs, AgentRunner};
use vergence_runner_local::LocalRunner;

/// Retries `probe` every 200 ms until it answers, or panics after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(started.elapsed() < limit, "nothing after {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A kubeconfig for the fake cluster, as a user's would point at theirs.
pub fn kubeconfig(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: \"{url}\"}}}}]
users: [{{name: fake, user: {{}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: fake, namespace: default}}}}]
current-context: fake
"
    );
    std::fs::write(&path, text).unwrap();
    path
}

struct Quiet;

impl Progress for Quiet {
    fn events(&self, _: &[Event]) {}
    fn step_failed(&self, key: &InstanceKey, error: &vergence_model::Error) {
        eprintln!("step of {key} failed: {error}");
    }
}

/// What the API's agent routes were asked, as the agents' desk saw it.
#[derive(Debug, Default)]
pub struct Polls {
    /// When each poll checked in.
    pub check_ins: Vec<Instant>,
    /// Looks for work: one per poll answered at once, one a second more
    /// for a poll the API holds.
    pub looks: usize,
    /// When tasks were handed out.
    pub handed_out: Vec<Instant>,
}

/// The real desk, with every call noted in `polls`.
struct CountingDesk {
    inner: AgentJobs,
    polls: Arc<Mutex<Polls>>,
}

#[async_trait::async_trait]
impl AgentDesk for CountingDesk {
    async fn check_in(&self, agent: &AgentName, poll: &PollRequest) -> vergence_model::Result<()> {
        self.polls.lock().unwrap().check_ins.push(Instant::now());
        self.inner.check_in(agent, poll).await
    }

    async fn hand_out(&self, agent: &AgentName, limit: usize) -> vergence_model::Result<Vec<Task>> {
        let tasks = self.inner.hand_out(agent, limit).await?;
        let mut polls = self.polls.lock().unwrap();
        polls.looks += 1;
        if !tasks.is_empty() {
            polls.handed_out.push(Instant::now());
        }
        Ok(tasks)
    }

    async fn take_report(
        &self,
        agent: &AgentName,
        report: AgentReport,
    ) -> vergence_model::Result<Option<ReportAnswer>> {
        self.inner.take_report(agent, report).await
    }
}

/// The API and the engine over one state file, wired as `vergence serve`
/// wires them; stops when dropped.
pub struct Server {
    pub url: String,
    /// The agent routes' calls so far.
    pub polls: Arc<Mutex<Polls>>,
    store: Arc<dyn StateStore>,
    http: reqwest::Client,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

impl Server {
    pub async fn start(dir: &Path) -> Self {
        let store: Arc<dyn StateStore> =
            Arc::new(SqliteStore::open(&dir.join("state.db")).unwrap());
        let artifacts: Arc<dyn ArtifactStore> =
            Arc::new(DirArtifactStore::new(dir.join("artifacts")));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let queue = Arc::new(LocalQueue::new(clock.clone()));
        let control = Control::new(
            store.clone(),
            queue.clone(),
            clock.clone(),
            Arc::new(YamlCompiler),
        );
        let sink = Arc::new(JobCompletion::new(
            store.clone(),
            queue.clone(),
            clock.clone(),
        ));
        let runners = RunnerRouter::new("the test server")
            .with(
                RunnerKind::Local,
                Arc::new(LocalRunner::new(sink.clone(), artifacts.clone(), 2)),
            )
            .with(
                RunnerKind::Kubernetes,
                Arc::new(AgentRunner::new(store.clone(), clock.clone())),
            );
        let engine = Engine::new(store.clone(), queue.clone(), runners, clock.clone());
        let driver = Driver::new(engine, store.clone(), queue.clone(), clock.clone(), 4);
        let agents = AgentJobs::new(store.clone(), artifacts, sink, queue.clone(), clock.clone());
        let polls = Arc::new(Mutex::new(Polls::default()));
        let api = router(
            ApiState::new(
                Arc::new(control),
                store.clone(),
                clock,
                ApiConfig::default(),
            )
            .with_agents(Arc::new(CountingDesk {
                inner: agents,
                polls: polls.clone(),
            })),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let wait = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        let serving = wait(stopped.clone());
        tokio::spawn(async move {
            axum::serve(listener, api)
                .with_graceful_shutdown(serving)
                .await
                .unwrap();
        });
        let driving = wait(stopped);
        tokio::spawn(async move {
            driver
                .run(DriveMode::Forever, Arc::new(Quiet), driving)
                .await
                .unwrap();
        });
        Self {
            url,
            polls,
            store,
            http: reqwest::Client::new(),
            stop,
        }
    }

    pub async fn agent_token(&self, agent: &str) -> String {
        let subject = TokenSubject::Agent(agent.parse().unwrap());
        create_token(
            self.store.as_ref(),
            &subject,
            &[],
            None,
            "test",
            &SystemClock,
        )
        .await
        .unwrap()
        .1
    }

    pub async fn admin_token(&self) -> String {
        let subject = TokenSubject::Application("shop".parse().unwrap());
        create_token(
            self.store.as_ref(),
            &subject,
            &[Scope::Admin],
            None,
            "test",
            &SystemClock,
        )
        .await
        .unwrap()
        .1
    }

    /// Calls the API; answers the status and the JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.url))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn push_config(&self, yaml: &str) {
        let token = self.admin_token().await;
        let body = json!({"files": {"shop.yaml": yaml}});
        let (status, answer) = self.call("POST", "/v1/configs", &token, Some(&body)).await;
        assert_eq!(status, 200, "{answer}");
    }

    pub async fn status(&self) -> Value {
        let token = self.admin_token().await;
        let (status, answer) = self
            .call("GET", "/v1/applications/shop/status", &token, None)
            .await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// The application's events, as the API serves them.
    pub async fn events(&self) -> Vec<Value> {
        let token = self.admin_token().await;
        let (status, answer) = self
            .call(
                "GET",
                "/v1/applications/shop/events?limit=1000",
                &token,
                None,
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        answer["events"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `count` instances are converged.
    pub async fn await_converged(&self, count: usize, limit: Duration) {
        let started = Instant::now();
        loop {
            let status = self.status().await;
            let instances = status["instances"].as_array().unwrap();
            if instances.len() == count && instances.iter().all(|i| i["status"] == "CONVERGED") {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "not converged after {limit:?}: {status:#}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// A `vergence-agent` process; killed (SIGKILL, as a node failure would)
/// when dropped.
pub struct Agent(Child);

impl Agent {
    pub fn start(server: &Server, kubeconfig: &Path, name: &str, token: &str) -> Self {
        Self::start_with(
            server,
            kubeconfig,
            name,
            token,
            &["--poll-wait-seconds", "2"],
        )
    }

    /// With these flags besides the API's URL and the agent's name.
    pub fn start_with(
        server: &Server,
        kubeconfig: &Path,
        name: &str,
        token: &str,
        flags: &[&str],
    ) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_vergence-agent"))
            .args(["--api-url", &server.url, "--agent", name])
            .args(flags)
            .env("VERGENCE_AGENT_TOKEN", token)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("RUST_LOG", "vergence_agent=debug,info")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Self(child)
    }

    pub fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
