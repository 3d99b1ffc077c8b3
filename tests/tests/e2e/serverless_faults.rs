//! The serverless shape under faults: every request the scheduler, the
//! worker and the API send to DynamoDB Local and moto (SQS, S3) goes
//! through a seeded proxy that throttles, fails with 500/503, delays, or
//! forwards and then drops the connection for 10% of them. Releases and
//! approvals are pushed through the API while the worker runs, one instance
//! is poisoned (its steps always fail), and the test checks what must hold
//! anyway: every instance converges, no (instance, version) is applied
//! twice, no release or approval is lost, and every poison message ends in
//! the dead-letter queue with an event naming its instance.
//!
//! `VERGENCE_FAULT_INSTANCES` (default 200) sets the number of instances,
//! `VERGENCE_FAULT_SEED` the seed (printed, so a failing run can be
//! replayed), `VERGENCE_FAULT_RATE` the share of faulted requests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::MessageSystemAttributeName;
use vergence_e2e::faults::{Fault, FaultPlan, Poison};
use vergence_e2e::{Harness, MAX_RECEIVE_COUNT, applies_started, endpoints};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::{ApprovalStore, ManualClock, ReleaseStore};
use vergence_model::{EventKind, InstanceKey, InstanceRecord, Status};

const APPLICATION: &str = "shop";
const VERSION: &str = "v2";
/// The service whose prod instance cannot be stepped while the poison rule
/// is on: every query of its approvals is throttled.
const POISONED: &str = "poisoned";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Services `svc-0000`… plus the poisoned one, each in staging and prod;
/// prod waits for staging to be stable and for a manual approval. The one
/// runtime is apply-only: its apply appends a line to `applies.log`, the
/// side effect the test counts (an apply-only runtime cannot tell that an
/// apply already ran, so a repeated apply shows there).
fn write_config(dir: &Path, services: usize) -> Vec<String> {
    let log = dir.join("applies.log");
    let mut yaml = format!(
        "runtime:\n  name: touch\n  apply:\n    taskConfig:\n      program:\n        cmd: [sh, -c, 'echo \"$VERGENCE_SERVICE $VERGENCE_RELEASE_CHANNEL $VERGENCE_SERVICE_VERSION\" >> {}']\n---\n\
         application:\n  name: {APPLICATION}\n  releaseChannels:\n    - name: staging\n      runtimes: [{{runtime: touch}}]\n    - name: prod\n      runtimes: [{{runtime: touch}}]\n      preconditions:\n        - releaseChannelStable: {{releaseChannel: staging}}\n        - manualApproval: {{name: prod-gate}}\n",
        log.display()
    );
    let mut names: Vec<String> = (0..services).map(|i| format!("svc-{i:04}")).collect();
    names.push(POISONED.to_owned());
    for name in &names {
        yaml.push_str(&format!(
            "---\nservice:\n  name: {name}\n  runtime: touch\n"
        ));
    }
    std::fs::write(dir.join("vergence.yaml"), yaml).unwrap();
    names
}

/// Applies that actually ran, per (service@channel, version), from the
/// jobs' own side effect.
fn applies_run(dir: &Path) -> BTreeMap<(String, String), usize> {
    let log = std::fs::read_to_string(dir.join("applies.log")).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for line in log.lines() {
        let mut words = line.split_whitespace();
        let (Some(service), Some(channel), Some(version)) =
            (words.next(), words.next(), words.next())
        else {
            panic!("garbled line in applies.log: {line:?}");
        };
        *counts
            .entry((format!("{service}@{channel}"), version.to_owned()))
            .or_default() += 1;
    }
    counts
}

/// Applies started per (service@channel, version), from the audit trail,
/// leaving out attempts that ended lost (see `applies_started`).
async fn applies_recorded(h: &Harness) -> BTreeMap<(String, String), usize> {
    applies_started(h.events().await, true)
}

/// A CI job or an operator calling the API: a failed call (the API's own
/// store or queue faulted) is tried again, up to a limit.
#[derive(Clone)]
struct Caller {
    api: axum::Router,
    token: String,
}

impl Caller {
    /// The number of tries it took to get a 200.
    async fn call_until_ok(&self, path: &str, body: serde_json::Value) -> usize {
        use tower::ServiceExt;
        for attempt in 1..=20 {
            let request = axum::http::Request::builder()
                .method("POST")
                .uri(path)
                .header("authorization", format!("Bearer {}", self.token))
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body.to_string()))
                .unwrap();
            let response = self.api.clone().oneshot(request).await.unwrap();
            let status = response.status();
            if status.is_success() {
                return attempt;
            }
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            assert!(
                status.is_server_error() || status.as_u16() == 429,
                "{path} answered {status}, which a retry cannot fix: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        panic!("{path} still failing after 20 tries");
    }

    /// Pushes the release of every service in `services`, then approves
    /// its prod instance for it; returns the extra tries the faults cost.
    async fn release_and_approve(&self, services: Vec<String>) -> usize {
        let mut retries = 0;
        for service in services {
            retries += self
                .call_until_ok(
                    &format!("/v1/applications/{APPLICATION}/services/{service}/releases"),
                    serde_json::json!({"version": VERSION, "params": {}}),
                )
                .await
                - 1;
            retries += self
                .call_until_ok(
                    &format!(
                        "/v1/applications/{APPLICATION}/services/{service}/release-channels/prod/approvals"
                    ),
                    serde_json::json!({"version": VERSION}),
                )
                .await
                - 1;
        }
        retries
    }
}

fn converged(r: &InstanceRecord) -> bool {
    r.state.status == Status::Converged
        && r.state.current_version.as_ref().map(ToString::to_string) == Some(VERSION.to_owned())
        && r.desired.version().map(ToString::to_string) == Some(VERSION.to_owned())
}

fn is_poisoned(key: &InstanceKey) -> bool {
    key.service.as_str() == POISONED && key.release_channel.as_str() == "prod"
}

/// An instance's audit trail, to explain a failed assertion.
async fn history(h: &Harness, instance: &str) -> String {
    let lines: Vec<String> = h
        .events()
        .await
        .into_iter()
        .filter(|e| {
            format!(
                "{}@{}",
                e.service
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                e.release_channel
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ) == instance
        })
        .map(|e| format!("  {} {} {}: {}", e.id, e.actor, e.kind.name(), e.message))
        .collect();
    format!("events of {instance}:\n{}", lines.join("\n"))
}

/// Instances given up on, from `stepFailed` events that say the message
/// went to the dead-letter queue.
async fn dead_lettered(h: &Harness) -> BTreeSet<String> {
    h.events()
        .await
        .into_iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::StepFailed {
                    dead_lettered: true
                }
            )
        })
        .map(|e| format!("{}/{}", e.service.unwrap(), e.release_channel.unwrap()))
        .collect()
}

/// Delivers what the queue holds to `worker` until `done` says so; when
/// the queue is empty, time moves on and the scheduler runs (which may fail
/// under faults: EventBridge invokes it again).
async fn run(
    h: &mut Harness,
    worker: &Worker,
    timeout: Duration,
    what: &str,
    mut done: impl AsyncFnMut(&Harness) -> bool,
) -> usize {
    let start = Instant::now();
    let mut scheduler_failures = 0;
    let mut batches = 0usize;
    loop {
        let event = h.receive(Duration::ZERO).await;
        if event.records.is_empty() || batches % 20 == 19 {
            if done(&*h).await {
                return scheduler_failures;
            }
            let states: BTreeMap<String, usize> =
                h.instances()
                    .await
                    .iter()
                    .fold(BTreeMap::new(), |mut m, r| {
                        if !converged(r) {
                            *m.entry(format!("{} ({})", r.state.status, r.state.reason))
                                .or_default() += 1;
                        }
                        m
                    });
            assert!(
                start.elapsed() < timeout,
                "{what}: not done after {timeout:?}; instances not converged: {states:#?}"
            );
        }
        if event.records.is_empty() {
            if let Some(clock) = &h.manual {
                clock.advance(jiff::SignedDuration::from_secs(20));
            }
            if h.try_schedule().await.is_err() {
                scheduler_failures += 1;
            }
            continue;
        }
        batches += 1;
        h.deliver(worker, event).await;
    }
}

/// Every message in the dead-letter queue: (message id, instance it names).
async fn dead_letter_queue(h: &Harness) -> Vec<(String, String)> {
    let url = h.dead_letter_queue_url.clone().unwrap();
    let mut found = Vec::new();
    loop {
        let received = h
            .sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        if received.messages().is_empty() {
            return found;
        }
        for m in received.messages() {
            let body: serde_json::Value = serde_json::from_str(m.body().unwrap()).unwrap();
            let instance = &body["instance"];
            found.push((
                m.message_id().unwrap().to_owned(),
                format!(
                    "{}/{}",
                    instance["service"].as_str().unwrap_or("?"),
                    instance["releaseChannel"].as_str().unwrap_or("?")
                ),
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_converge_once_each_under_injected_faults() {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let instances: usize = env_or("VERGENCE_FAULT_INSTANCES", 200);
    let seed: u64 = env_or("VERGENCE_FAULT_SEED", 20_261_126);
    let rate: f64 = env_or("VERGENCE_FAULT_RATE", 0.10);
    let services = instances.div_ceil(2).saturating_sub(1).max(1);
    println!(
        "fault run: seed {seed}, rate {rate}, {} instances",
        2 * (services + 1)
    );
    let started = Instant::now();
    // One worker steps messages one at a time (debug build, ~10 steps a
    // second on 2 cores): the time allowed grows with the instances.
    let timeout = Duration::from_secs(120 + 2 * instances as u64);

    let clock = std::sync::Arc::new(ManualClock::new(jiff::Timestamp::now()));
    let mut h =
        Harness::start_with_faults(&dynamodb, &sqs, Some(clock), FaultPlan::new(seed, rate)).await;
    let dir = tempfile::tempdir().unwrap();
    let names = write_config(dir.path(), services);
    // Setup goes through the faults too; an operator would retry it.
    let bundle = vergence_compiler::read_dir(dir.path()).unwrap();
    let mut tries = 0;
    while let Err(e) = h.control().apply_config(bundle.clone(), "ci").await {
        tries += 1;
        assert!(e.is_retryable() && tries < 10, "applying the config: {e}");
    }
    // What `vergence token create` does, with direct access to the table.
    let token = vergence_api::create_token(
        h.observer_store().as_ref(),
        &vergence_model::TokenSubject::Application(APPLICATION.parse().unwrap()),
        &[vergence_model::Scope::Admin],
        None,
        "cli:test",
        &vergence_model::ports::SystemClock,
    )
    .await
    .unwrap()
    .1;
    let caller = Caller {
        api: vergence_lambda::api_router(&h.deployment),
        token,
    };
    let faults = h.faults.as_ref().unwrap();
    faults.dynamodb.set_poison(Some(Poison {
        operation: "DynamoDB.Query".into(),
        marker: format!("approvals#{APPLICATION}/{POISONED}/prod"),
        fault: Fault::Throttle,
        limit: None,
    }));

    // Half the releases and approvals before the worker starts, the other
    // half while it runs: API writes race the worker's steps.
    let (first, second) = names.split_at(names.len() / 2);
    let mut api_retries = caller.release_and_approve(first.to_vec()).await;
    let pushing = tokio::spawn({
        let caller = caller.clone();
        let second = second.to_vec();
        async move { caller.release_and_approve(second).await }
    });
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    let mut scheduler_failures = run(&mut h, &worker, timeout, "poisoned run", async |h| {
        // Every instance but the poisoned one converged, and the poisoned
        // one has been given up on at least once.
        let all = h.instances().await;
        all.iter().filter(|r| !is_poisoned(&r.key)).all(converged)
            && all.iter().filter(|r| !is_poisoned(&r.key)).count() == all.len() - 1
            && !dead_lettered(h).await.is_empty()
    })
    .await;
    api_retries += pushing.await.unwrap();

    // What is left in the queue is delivered (no new work is scheduled):
    // poison messages go round until SQS moves them to the dead-letter queue.
    loop {
        let event = h.receive(Duration::ZERO).await;
        if event.records.is_empty() {
            break;
        }
        h.deliver(&worker, event).await;
    }
    let report_poisoned = h.faults.as_ref().unwrap().report();
    // Poison: failed on every delivery up to the last before the
    // dead-letter queue.
    let poison_messages: BTreeSet<String> = h
        .failed_deliveries
        .iter()
        .filter(|(_, n)| **n >= MAX_RECEIVE_COUNT as usize)
        .map(|(id, _)| id.clone())
        .collect();
    let dlq = dead_letter_queue(&h).await;
    let given_up = dead_lettered(&h).await;
    assert!(
        !poison_messages.is_empty(),
        "the poisoned instance produced poison messages"
    );
    let in_dlq: BTreeSet<String> = dlq.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(
        poison_messages, in_dlq,
        "every message that failed {MAX_RECEIVE_COUNT} times is in the dead-letter queue, and only those"
    );
    for (id, instance) in &dlq {
        assert!(
            given_up.contains(instance),
            "dead-lettered message {id} for {instance} has a stepFailed event naming it: {given_up:?}"
        );
    }

    // The poison is lifted; an operator asks for the failed instance to be
    // checked again, and it converges like the rest.
    h.faults.as_ref().unwrap().dynamodb.set_poison(None);
    let filter = vergence_model::ports::InstanceFilter {
        application: Some(APPLICATION.parse().unwrap()),
        service: Some(POISONED.parse().unwrap()),
        release_channel: Some("prod".parse().unwrap()),
    };
    let mut tries = 0;
    while let Err(e) = h.control().request_checks(&filter, "cli:operator").await {
        tries += 1;
        assert!(e.is_retryable() && tries < 10, "asking for checks: {e}");
    }
    scheduler_failures += run(&mut h, &worker, timeout, "healing", async |h| {
        h.instances().await.iter().all(converged)
    })
    .await;

    // No release or approval lost: each one the API accepted is stored.
    let store = h.observer_store();
    for name in &names {
        let service = name.parse().unwrap();
        let releases = store
            .list_releases(&APPLICATION.parse().unwrap(), &service, 10)
            .await
            .unwrap();
        assert!(
            releases.iter().any(|r| r.version == VERSION),
            "release {VERSION} of {name} is stored: {releases:?}"
        );
        let key = InstanceKey::new(
            APPLICATION.parse().unwrap(),
            service,
            "prod".parse().unwrap(),
        );
        let approvals = store.list_approvals(&key).await.unwrap();
        assert!(
            approvals.iter().any(|a| a.version == VERSION),
            "the approval of {VERSION} for {key} is stored"
        );
    }

    // Every instance converged on the release, each (instance, version)
    // applied once: by the side effects and by the audit trail.
    let records = h.instances().await;
    assert_eq!(records.len(), names.len() * 2);
    let run_counts = applies_run(dir.path());
    let recorded = applies_recorded(&h).await;
    let doubles: Vec<_> = run_counts.iter().filter(|(_, n)| **n > 1).collect();
    let recorded_doubles: Vec<_> = recorded.iter().filter(|(_, n)| **n > 1).collect();
    let report = h.faults.as_ref().unwrap().report();
    println!("requests seen: {}", report.total_requests());
    println!(
        "faults injected: {} {:?} (+{} by the poison rule)",
        report.total_faults(),
        report.faults,
        report.poisoned
    );
    println!("requests by operation: {:?}", report.requests);
    println!(
        "instances converged: {}/{}",
        records.iter().filter(|r| converged(r)).count(),
        records.len()
    );
    println!(
        "double applies: {} by side effect, {} by the audit trail",
        doubles.len(),
        recorded_doubles.len()
    );
    println!(
        "poison messages: {} (all in the dead-letter queue; {} requests poisoned before healing)",
        poison_messages.len(),
        report_poisoned.poisoned
    );
    println!(
        "API calls tried again: {api_retries}; scheduler invocations failed: {scheduler_failures}"
    );
    println!("run time: {:.1?}", started.elapsed());
    assert!(report.total_faults() > 0, "faults were injected: {report}");
    // The audit trail of each instance applied twice, to tell how.
    let twice: BTreeSet<&String> = doubles
        .iter()
        .chain(&recorded_doubles)
        .map(|((instance, _), _)| instance)
        .collect();
    for instance in twice {
        println!("{}", history(&h, instance).await);
    }
    assert!(doubles.is_empty(), "applied more than once: {doubles:?}");
    assert!(
        recorded_doubles.is_empty(),
        "apply started more than once: {recorded_doubles:?}"
    );
    for name in &names {
        for channel in ["staging", "prod"] {
            let instance = format!("{name}@{channel}");
            let key = (instance.clone(), VERSION.to_owned());
            assert_eq!(
                run_counts.get(&key),
                Some(&1),
                "{key:?} applied once; {}",
                history(&h, &instance).await
            );
        }
    }
}

/// The nasty case at one precise call: the worker's claim of an apply job
/// (the commit that records the job claimed) reaches DynamoDB, but its
/// answer is lost, and the SDK sends it again. The retry must count as the
/// write it is (the SDK sends a transaction with an idempotency token), so
/// the job runs at once; read as someone else's write, the job would wait,
/// unrun, until its deadline and then be started again as a lost job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_answer_is_lost_runs_its_job_once_without_waiting_for_the_deadline() {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let clock = std::sync::Arc::new(ManualClock::new(jiff::Timestamp::now()));
    let mut h =
        Harness::start_with_faults(&dynamodb, &sqs, Some(clock), FaultPlan::new(1, 0.0)).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("applies.log");
    std::fs::write(
        dir.path().join("vergence.yaml"),
        format!(
            "runtime:\n  name: touch\n  apply:\n    taskConfig:\n      program:\n        cmd: [sh, -c, 'echo \"$VERGENCE_SERVICE $VERGENCE_RELEASE_CHANNEL $VERGENCE_SERVICE_VERSION\" >> {}']\n---\napplication:\n  name: {APPLICATION}\n  releaseChannels:\n    - name: staging\n      runtimes: [{{runtime: touch}}]\n---\nservice:\n  name: api\n  runtime: touch\n",
            log.display()
        ),
    )
    .unwrap();
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    // The claim is the one write that sets when the job was dispatched.
    h.faults.as_ref().unwrap().dynamodb.set_poison(Some(Poison {
        operation: "DynamoDB.TransactWriteItems".into(),
        marker: "dispatched_at".into(),
        fault: Fault::DropAfterForward,
        limit: Some(1),
    }));
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    h.converge(Duration::from_secs(120), async |h, event| {
        h.deliver(&worker, event).await;
    })
    .await;
    assert_eq!(
        h.faults.as_ref().unwrap().report().poisoned,
        1,
        "the claim's answer was dropped"
    );
    let runs = applies_run(dir.path());
    let recorded = applies_recorded(&h).await;
    assert_eq!(runs.values().sum::<usize>(), 1, "{runs:?}");
    assert_eq!(
        recorded.values().sum::<usize>(),
        1,
        "one attempt, not a second one after the first was taken for lost; {}",
        history(&h, "api@staging").await
    );
}
