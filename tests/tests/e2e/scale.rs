//! Scale in the serverless harness (docs/performance.md, "Scale"): N
//! instances (one application, N services, one channel, an exit-code fetch
//! that finds nothing) pushed through the worker until all are CONVERGED,
//! then held in the steady state until every instance has been checked
//! `CHECKS` times, with the scheduler run as its schedule would run it.
//! What each instance costs, counted at the wire, must not grow with N.
//!
//! Not part of the default run (minutes at N = 1,000): run it with
//! `VERGENCE_SCALE_N=1000 cargo test --workspace --test e2e -- --ignored
//! --nocapture scale::` (scripts/bench.py's `scale` row does), after
//! `scripts/services.sh start-scale; . .tools/scale.env` for 10,000.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::SqsEvent;
use vergence_e2e::wire::{Capacity, RequestCounter};
use vergence_e2e::{Harness, endpoints};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::{InstanceKey, Status};

/// Checks of every instance in the steady state.
const CHECKS: usize = 3;

/// N when `VERGENCE_SCALE_N` does not say.
const DEFAULT_N: usize = 50;

/// What the config push costs per instance: the instance read, and its
/// desired state written with its event.
const PUSH_PER_INSTANCE: &[(&str, usize)] =
    &[("DynamoDB.Query", 1), ("DynamoDB.TransactWriteItems", 1)];

/// What the push costs once, whatever the number of instances (the
/// config's own records).
const PUSH_FIXED: &[(&str, usize)] = &[
    ("DynamoDB.BatchWriteItem", 1),
    ("DynamoDB.GetItem", 2),
    ("DynamoDB.PutItem", 3),
    ("DynamoDB.UpdateItem", 1),
];

/// What one instance's convergence costs in the worker, by request: one
/// step reads the instance, commits the apply job claimed, runs it inline
/// and commits CONVERGED with its result.
const CONVERGE_PER_INSTANCE: &[(&str, usize)] =
    &[("DynamoDB.Query", 1), ("DynamoDB.TransactWriteItems", 2)];

/// What one quiet check costs in the worker: one read, one small write
/// (the next check goes out with the batch's, counted apart).
const CHECK_PER_INSTANCE: &[(&str, usize)] = &[("DynamoDB.PutItem", 1), ("DynamoDB.Query", 1)];

/// A scheduler run with nothing due: one query per due-index shard.
const SCHEDULER_IDLE: &[(&str, usize)] = &[("DynamoDB.Query", 8)];

/// One application, one channel, `n` services of a runtime whose apply and
/// exit-code fetch both do nothing (the fetch finds nothing), checked
/// every second: the checks travel as 1 s delayed messages.
fn scale_config(dir: &std::path::Path, n: usize) {
    let mut yaml = String::from(
        "runtime:\n  name: quiet\n  apply:\n    taskConfig:\n      program:\n        cmd: ['true']\n  fetch:\n    mode: exitCode\n    taskConfig:\n      program:\n        cmd: ['true']\n    pollInterval: 2s\n    steadyStatePollInterval: 1s\n---\napplication:\n  name: shop\n  releaseChannels:\n    - name: prod\n      runtimes: [{runtime: quiet}]\n",
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "---\nservice:\n  name: svc-{i:05}\n  runtime: quiet\n"
        ));
    }
    std::fs::write(dir.join("vergence.yaml"), yaml).unwrap();
}

/// Requests, capacity and handler time of one phase.
#[derive(Default, Debug)]
struct Phase {
    counts: BTreeMap<String, usize>,
    capacity: Capacity,
    handler: Duration,
    /// Of `handler`, waiting for DynamoDB's and SQS's answers.
    waited: BTreeMap<&'static str, Duration>,
    deliveries: usize,
}

impl Phase {
    /// Adds what `counter` counted since its last reset, and resets it.
    fn take(&mut self, counter: &RequestCounter, handler: Duration) {
        for (op, n) in counter.snapshot() {
            *self.counts.entry(op).or_default() += n;
        }
        let capacity = counter.capacity();
        self.capacity.read += capacity.read;
        self.capacity.write += capacity.write;
        self.handler += handler;
        for (service, time) in counter.waited() {
            *self.waited.entry(service).or_default() += time;
        }
        counter.reset();
    }

    fn of(&self, prefix: &str) -> usize {
        self.counts
            .iter()
            .filter(|(op, _)| op.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }

    /// The phase's DynamoDB requests, as `per` times `each`.
    fn assert_dynamodb(&self, what: &str, each: &[(&str, usize)], per: usize) {
        self.assert_dynamodb_plus(what, each, per, &[]);
    }

    /// The same plus `fixed`, what the phase costs once whatever `per`.
    fn assert_dynamodb_plus(
        &self,
        what: &str,
        each: &[(&str, usize)],
        per: usize,
        fixed: &[(&str, usize)],
    ) {
        let dynamodb: BTreeMap<String, usize> = self
            .counts
            .iter()
            .filter(|(op, _)| op.starts_with("DynamoDB."))
            .map(|(op, n)| (op.clone(), *n))
            .collect();
        let mut expected: BTreeMap<String, usize> = each
            .iter()
            .map(|(op, n)| ((*op).to_owned(), n * per))
            .collect();
        for (op, n) in fixed {
            *expected.entry((*op).to_owned()).or_default() += n;
        }
        assert_eq!(
            dynamodb, expected,
            "DynamoDB requests of {what} ({per} of them)"
        );
    }

    /// `BENCH scale_<name> n=… per=… dynamodb=… rru=… wru=… sqs_sends=…
    /// sqs_requests=… ms=…`, every figure per `per` (instance, check or run).
    fn bench(&self, name: &str, n: usize, per: usize, wall: Duration) {
        let each = |x: f64| x / per as f64;
        let ops: Vec<String> = self
            .counts
            .iter()
            .map(|(op, c)| format!("{op}={:.4}", each(*c as f64)))
            .collect();
        println!(
            "BENCH scale_{name} n={n} per={per} dynamodb={:.4} rru={:.4} wru={:.4} sqs_sends={:.4} sqs_requests={:.4} handler_ms={:.4} dynamodb_ms={:.4} sqs_ms={:.4} wall_ms={:.4} deliveries={} {}",
            each(self.of("DynamoDB.") as f64),
            each(self.capacity.read),
            each(self.capacity.write),
            each(self.of("SQS.SendMessage") as f64),
            each(self.of("SQS.") as f64),
            each(self.handler.as_secs_f64() * 1e3),
            each(
                self.waited
                    .get("DynamoDB")
                    .map_or(0.0, |t| t.as_secs_f64() * 1e3)
            ),
            each(
                self.waited
                    .get("SQS")
                    .map_or(0.0, |t| t.as_secs_f64() * 1e3)
            ),
            each(wall.as_secs_f64() * 1e3),
            self.deliveries,
            ops.join(" ")
        );
    }
}

/// Hands `records` to the worker as one batch and adds what it cost to
/// `phase`.
async fn deliver(
    h: &mut Harness,
    worker: &Worker,
    counter: &RequestCounter,
    phase: &mut Phase,
    records: Vec<aws_lambda_events::event::sqs::SqsMessage>,
) {
    if records.is_empty() {
        return;
    }
    counter.reset();
    let started = Instant::now();
    let mut event = SqsEvent::default();
    event.records = records;
    let response = h.deliver(worker, event).await;
    phase.take(counter, started.elapsed());
    phase.deliveries += 1;
    assert!(
        response.batch_item_failures.is_empty(),
        "a step failed: {:?}",
        response.batch_item_failures
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes at scale: VERGENCE_SCALE_N=1000 cargo test --workspace --test e2e -- --ignored scale::"]
async fn requests_and_time_per_instance_stay_flat_with_the_number_of_instances() {
    let Some((dynamodb, sqs)) = endpoints() else {
        panic!(
            "scale needs DynamoDB Local and moto (scripts/services.sh start; . .tools/services.env)"
        );
    };
    let n: usize = std::env::var("VERGENCE_SCALE_N")
        .map(|v| v.parse().expect("VERGENCE_SCALE_N: a number of instances"))
        .unwrap_or(DEFAULT_N);
    // moto's SQS is linear in a queue's length: past a few thousand
    // messages it, not Vergence, sets the pace. `scripts/services.sh
    // start-scale` starts LocalStack's SQS, which is not, and names it.
    let queue = std::env::var("VERGENCE_SCALE_SQS_URL").unwrap_or_else(|_| sqs.clone());
    println!("scale: n={n}, the work queue at {queue}");
    let counter = RequestCounter::default();
    let mut h = Harness::start_with_queue_on(&dynamodb, &sqs, &queue, counter.clone()).await;
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    let dir = tempfile::tempdir().unwrap();
    scale_config(dir.path(), n);

    // The config, compiled and written with a message per instance (what
    // `vergence push` does through the API).
    let started = Instant::now();
    counter.reset();
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    let mut push = Phase::default();
    push.take(&counter, started.elapsed());
    push.bench("push", n, n, started.elapsed());
    push.assert_dynamodb_plus("the push", PUSH_PER_INSTANCE, n, PUSH_FIXED);
    assert_eq!(
        push.of("SQS.SendMessage"),
        n.div_ceil(100),
        "the push's messages name 10 instances each and go out 10 to a request"
    );

    // To CONVERGED: an instance's first message is its convergence (one
    // step, asserted below); a later one is its next check, already of
    // the steady state, and is delivered as a batch of its own so that
    // the two are counted apart.
    let mut converge = Phase::default();
    let mut hold = Phase::default();
    let mut checks: HashMap<String, usize> = HashMap::new();
    let started = Instant::now();
    while checks.len() < n {
        let event = h.receive(Duration::from_secs(1)).await;
        // A message names up to 10 instances due together: those of the
        // push, or the next checks of one batch.
        let (first, later): (Vec<_>, Vec<_>) = event
            .records
            .into_iter()
            .partition(|r| named(r).iter().all(|i| !checks.contains_key(i)));
        for record in &first {
            for instance in named(record) {
                checks.insert(instance, 0);
            }
        }
        for record in &later {
            for instance in named(record) {
                *checks.entry(instance).or_default() += 1;
            }
        }
        deliver(&mut h, &worker, &counter, &mut converge, first).await;
        deliver(&mut h, &worker, &counter, &mut hold, later).await;
    }
    let converge_wall = started.elapsed();
    let instances = h.instances().await;
    assert_eq!(instances.len(), n);
    for instance in &instances {
        assert_eq!(
            instance.state.status,
            Status::Converged,
            "{}: {}",
            instance.key,
            instance.state.reason
        );
    }
    converge.bench("converge", n, n, converge_wall);
    converge.assert_dynamodb("convergence", CONVERGE_PER_INSTANCE, n);

    // The steady state: every instance checked CHECKS times, the messages
    // taken 10 at a time as Lambda's event source mapping does. A message
    // of an instance checked enough ends its chain. The scheduler runs
    // once a minute, and at least once per round of checks, and finds
    // nothing due: the chains of messages carry every check.
    let mut scheduler = Phase::default();
    let mut scheduler_runs = 0;
    let mut round = 0;
    let mut last_run: Option<Instant> = None;
    let started = Instant::now();
    loop {
        let least = checks.values().copied().min().unwrap();
        if last_run.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) || least > round {
            round = least;
            counter.reset();
            let at = Instant::now();
            assert_eq!(h.schedule().await, 0, "nothing is due in the steady state");
            scheduler.take(&counter, at.elapsed());
            scheduler_runs += 1;
            last_run = Some(Instant::now());
        }
        if least >= CHECKS {
            break;
        }
        let event = h.receive(Duration::from_secs(1)).await;
        let (due, done): (Vec<_>, Vec<_>) = event
            .records
            .into_iter()
            .partition(|r| named(r).iter().any(|i| checks[i] < CHECKS));
        for record in &due {
            for instance in named(record) {
                *checks.get_mut(&instance).unwrap() += 1;
            }
        }
        for record in done {
            h.sqs
                .delete_message()
                .queue_url(&h.queue_url)
                .receipt_handle(record.receipt_handle.unwrap())
                .send()
                .await
                .unwrap();
        }
        deliver(&mut h, &worker, &counter, &mut hold, due).await;
    }
    let hold_wall = started.elapsed();
    assert!(
        checks.values().all(|c| *c >= CHECKS),
        "each instance checked {CHECKS} times"
    );
    // An instance may be checked once more when a message also names one
    // that was not checked enough yet.
    let total: usize = checks.values().sum();
    hold.bench("check", n, total, hold_wall);
    scheduler.bench("scheduler", n, scheduler_runs, Duration::ZERO);
    hold.assert_dynamodb("the quiet checks", CHECK_PER_INSTANCE, total);
    assert_eq!(
        hold.counts
            .get("SQS.SendMessageBatch")
            .copied()
            .unwrap_or(0),
        hold.deliveries,
        "one send of the next checks per batch"
    );
    assert!(
        hold.capacity.read <= total as f64 && hold.capacity.write <= total as f64,
        "a quiet check costs at most one read and one write unit: {:?}",
        hold.capacity
    );
    scheduler.assert_dynamodb("the scheduler's runs", SCHEDULER_IDLE, scheduler_runs);
    assert_eq!(scheduler.of("SQS."), 0, "the scheduler sent nothing");
    for instance in h.instances().await {
        assert_eq!(instance.state.status, Status::Converged, "{}", instance.key);
    }
}

/// The instances a message names (their storage ids).
fn named(record: &aws_lambda_events::event::sqs::SqsMessage) -> Vec<String> {
    vergence_e2e::instances_named(record)
        .iter()
        .map(InstanceKey::storage_id)
        .collect()
}
