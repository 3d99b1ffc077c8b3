//! The first-class Cloud Run runtime against the in-repo fake Cloud Run
//! Admin API with the real google-cloud-run-v2 client: apply creates, then
//! updates the service without waiting for its operation; fetch reports
//! the version annotated on the service's revision, PENDING while Cloud
//! Run reconciles (forever for a revision that never gets Ready), FAILED
//! for a revision that failed, and a revision made by hand as another
//! version; the engine's own reading of structured fetches says what each
//! means.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use google_cloud_auth::credentials::anonymous;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use vergence_fake_cloud_run::FakeCloudRun;
use vergence_model::ports::{JobResultSink, Runner};
use vergence_model::{
    BuiltinJob, CloudRunRunnerSpec, CloudRunService, FetchVerdict, InstanceIds, InstanceKey, JobId,
    JobKind, JobRecord, JobResult, JobSpec, JobState, RunnerSpec,
};
use vergence_runner_cloud_run::{CloudRunClients, CloudRunServices};

const PROJECT: &str = "shop-prod";
const REGION: &str = "europe-west1";
const SERVICE: &str = "projects/shop-prod/locations/europe-west1/services/web";

#[derive(Default)]
struct Reported(Mutex<Vec<JobResult>>);

#[async_trait]
impl JobResultSink for Reported {
    async fn job_finished(&self, _: &JobRecord, result: JobResult) -> vergence_model::Result<()> {
        self.0.lock().unwrap().push(result);
        Ok(())
    }
}

struct Bed {
    fake: FakeCloudRun,
    services: CloudRunServices,
    reported: Arc<Reported>,
}

async fn bed() -> Bed {
    let fake = FakeCloudRun::start().await.unwrap();
    let clients = CloudRunClients::at_endpoint(fake.url(), anonymous::Builder::new().build())
        .await
        .unwrap();
    let reported = Arc::new(Reported::default());
    let services = CloudRunServices::new(clients, reported.clone());
    Bed {
        fake,
        services,
        reported,
    }
}

fn wanted(version: &str, image: &str) -> CloudRunService {
    let spec = json!({
        "labels": {"team": "shop"},
        "template": {"containers": [{"image": image, "ports": [{"containerPort": 8080}]}]},
    });
    CloudRunService {
        project: PROJECT.into(),
        region: REGION.into(),
        service_name: "web".into(),
        spec: spec.to_string(),
        service_id: "svc-0123456789".into(),
        version: version.into(),
        file: "run/web.yaml".into(),
        adopt: Default::default(),
        traffic_percent: None,
    }
}

fn job(kind: JobKind, service: &CloudRunService) -> JobRecord {
    let key = InstanceKey::parse_storage_id("shop/web/prod").unwrap();
    let now = Timestamp::now();
    JobRecord {
        id: JobId(
            format!(
                "{}-{:020x}",
                kind.as_str().to_lowercase(),
                fastrand::u128(..1 << 80)
            )
            .into(),
        ),
        ids: InstanceIds::of(&key),
        instance: key,
        kind,
        version: service.version.parse().unwrap(),
        attempt: 1,
        spec: JobSpec {
            runner: RunnerSpec::CloudRun(CloudRunRunnerSpec {
                project: PROJECT.into(),
                region: REGION.into(),
                service_account: None,
                cpu: None,
                memory: None,
            }),
            image: None,
            cmd: Vec::new(),
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            working_dir: String::new(),
            timeout: SignedDuration::from_mins(5),
            outputs: Vec::new(),
            builtin: Some(match kind {
                JobKind::Apply => BuiltinJob::CloudRunApply(service.clone()),
                _ => BuiltinJob::CloudRunFetch(service.clone()),
            }),
        }
        .into(),
        workspace_root: None,
        inputs: Vec::new(),
        created_at: now,
        deadline: now + SignedDuration::from_mins(10),
        state: JobState::Created,
    }
}

impl Bed {
    async fn apply(&self, service: &CloudRunService) -> String {
        let result = self.services.carry_out(&job(JobKind::Apply, service)).await;
        assert!(result.exited_with(0), "{}", result.describe());
        result.stdout
    }

    async fn fetch(&self, service: &CloudRunService) -> (Value, FetchVerdict, String) {
        let result = self.services.carry_out(&job(JobKind::Fetch, service)).await;
        assert!(result.exited_with(0), "{}", result.describe());
        let (verdict, summary) =
            vergence_engine::fetch::structured(&result.stdout, &service.version);
        (
            serde_json::from_str(&result.stdout).unwrap(),
            verdict,
            summary,
        )
    }

    /// Fetches until the verdict is not "in progress" (the fake settles a
    /// change after a couple of reads).
    async fn settled(&self, service: &CloudRunService) -> (Value, FetchVerdict, String) {
        for _ in 0..5 {
            let seen = self.fetch(service).await;
            if seen.1 != FetchVerdict::InProgress {
                return seen;
            }
        }
        panic!("still in progress");
    }
}

#[tokio::test]
async fn apply_creates_then_updates_the_service_and_fetch_follows_the_rollout() {
    let bed = bed().await;
    let v1 = wanted("v1", "europe-docker.pkg.dev/shop/web:1");
    let (output, verdict, _) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::NeedsApply, "{output}");
    // The design's object type, for a missing service as for a running one.
    assert_eq!(output["objects"][0]["objectType"], "CloudRun", "{output}");

    let done = bed.apply(&v1).await;
    assert!(done.starts_with("started creating service projects/shop-prod/locations/europe-west1/services/web with revision web-v"), "{done}");
    // The apply returned before the operation finished: Cloud Run reconciles.
    let (_, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::InProgress, "{summary}");
    let (output, verdict, summary) = bed.settled(&v1).await;
    assert_eq!(verdict, FetchVerdict::Converged, "{summary}: {output}");
    assert_eq!(output["objects"][0]["objectType"], "CloudRun", "{output}");
    let service = bed.fake.service(SERVICE).unwrap();
    assert_eq!(service["annotations"]["vergence.dev/version"], "v1");
    assert_eq!(
        service["annotations"]["vergence.dev/service-id"],
        "svc-0123456789"
    );
    assert_eq!(
        service["template"]["annotations"]["vergence.dev/version"],
        "v1"
    );
    assert_eq!(service["labels"]["team"], "shop");
    assert!(
        output["objects"][0]["message"]
            .as_str()
            .unwrap()
            .contains("traffic: 100% to"),
        "{output}"
    );

    // The same apply again changes nothing.
    let again = bed.apply(&v1).await;
    assert!(again.contains("already names revision"), "{again}");

    let v2 = wanted("v2", "europe-docker.pkg.dev/shop/web:2");
    let (_, verdict, summary) = bed.fetch(&v2).await;
    assert_eq!(
        (verdict, summary.as_str()),
        (FetchVerdict::NeedsApply, "web runs v1 (desired v2)")
    );
    let done = bed.apply(&v2).await;
    assert!(done.starts_with("started updating service"), "{done}");
    assert_eq!(bed.settled(&v2).await.1, FetchVerdict::Converged);
    assert_eq!(
        bed.fake.service(SERVICE).unwrap()["template"]["containers"][0]["image"],
        "europe-docker.pkg.dev/shop/web:2"
    );

    // Dispatch reports through the engine's sink.
    bed.services
        .dispatch(&job(JobKind::Fetch, &v2))
        .await
        .unwrap();
    assert_eq!(bed.reported.0.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_revision_that_never_gets_ready_stays_pending() {
    let bed = bed().await;
    let v1 = wanted("v1", "europe-docker.pkg.dev/shop/web:1");
    bed.apply(&v1).await;
    assert_eq!(bed.settled(&v1).await.1, FetchVerdict::Converged);

    let v2 = wanted("v2", "europe-docker.pkg.dev/shop/web:2");
    bed.fake.never_ready("web");
    bed.apply(&v2).await;
    for _ in 0..5 {
        let (_, verdict, summary) = bed.fetch(&v2).await;
        assert_eq!(verdict, FetchVerdict::InProgress, "{summary}");
        assert!(summary.contains("is not ready yet"), "{summary}");
    }
}

#[tokio::test]
async fn a_revision_that_fails_is_a_failed_rollout() {
    let bed = bed().await;
    let v1 = wanted("v1", "europe-docker.pkg.dev/shop/web:1");
    bed.apply(&v1).await;
    assert_eq!(bed.settled(&v1).await.1, FetchVerdict::Converged);

    let v2 = wanted("v2", "europe-docker.pkg.dev/shop/web:2");
    bed.fake.fail_next_revision(
        "web",
        "The user-provided container failed to start and listen on the port",
    );
    bed.apply(&v2).await;
    let (output, verdict, summary) = bed.settled(&v2).await;
    assert_eq!(verdict, FetchVerdict::Failed, "{summary}: {output}");
    assert!(summary.contains("failed to start"), "{summary}");
}

#[tokio::test]
async fn a_revision_deployed_by_hand_is_drift_and_the_next_apply_heals_it() {
    let bed = bed().await;
    let v1 = wanted("v1", "europe-docker.pkg.dev/shop/web:1");
    bed.apply(&v1).await;
    assert_eq!(bed.settled(&v1).await.1, FetchVerdict::Converged);

    // As `gcloud run deploy --image …` would: a new, generated revision.
    bed.fake
        .edit_service_out_of_band("web", |spec| {
            spec["template"]["containers"][0]["image"] =
                json!("europe-docker.pkg.dev/shop/web:hotfix");
            if let Some(template) = spec["template"].as_object_mut() {
                template.remove("revision");
            }
        })
        .unwrap();
    let (_, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::NeedsApply, "{summary}");
    assert!(summary.contains("not made by Vergence"), "{summary}");
    bed.apply(&v1).await;
    assert_eq!(bed.settled(&v1).await.1, FetchVerdict::Converged);
    assert_eq!(
        bed.fake.service(SERVICE).unwrap()["template"]["containers"][0]["image"],
        "europe-docker.pkg.dev/shop/web:1"
    );
}

impl Bed {
    /// A Cloud Run service someone else made (brownfield): the file's spec
    /// running `image`, without Vergence's annotations, settled; the
    /// requests it took are forgotten.
    async fn made_by_someone_else(&self, image: &str) {
        let spec: google_cloud_run_v2::model::Service = serde_json::from_value(json!({
            "labels": {"team": "shop"},
            "template": {"containers": [{"image": image, "ports": [{"containerPort": 8080}]}]},
        }))
        .unwrap();
        let client = self.fake.services_client().await.unwrap();
        client
            .create_service()
            .set_parent(format!("projects/{PROJECT}/locations/{REGION}"))
            .set_service_id("web")
            .set_service(spec)
            .send()
            .await
            .unwrap();
        for _ in 0..5 {
            client.get_service().set_name(SERVICE).send().await.unwrap();
        }
        self.fake.reset_requests();
    }

    /// Writes to the service: creates and updates.
    fn writes(&self) -> usize {
        self.fake
            .count_matching(|r| r.method != "GET" && r.path.contains("/services"))
    }
}

#[tokio::test]
async fn a_service_someone_else_made_that_runs_the_file_is_adopted_without_a_revision() {
    let bed = bed().await;
    bed.made_by_someone_else("europe-docker.pkg.dev/shop/web:1")
        .await;
    let before = bed.fake.service(SERVICE).unwrap();
    let v1 = wanted("v1", "europe-docker.pkg.dev/shop/web:1");

    let (output, verdict, summary) = bed.settled(&v1).await;
    assert_eq!(verdict, FetchVerdict::Converged, "{summary}: {output}");
    assert_eq!(output["objects"][0]["adopted"], json!(true), "{output}");
    assert_eq!(
        bed.fake.count("PATCH", &format!("/v2/{SERVICE}")),
        1,
        "one write: the marks"
    );
    let after = bed.fake.service(SERVICE).unwrap();
    assert_eq!(
        after["annotations"]["vergence.dev/service-id"],
        "svc-0123456789"
    );
    assert_eq!(after["annotations"]["vergence.dev/version"], "v1");
    assert_eq!(
        after["latestCreatedRevision"], before["latestCreatedRevision"],
        "no revision is made"
    );
    assert_eq!(after["template"], before["template"]);

    // Vergence's from now on: nothing more is written.
    let (output, verdict, summary) = bed.settled(&v1).await;
    assert_eq!(verdict, FetchVerdict::Converged, "{summary}");
    assert_eq!(output["objects"][0]["adopted"], json!(false));
    assert_eq!(bed.writes(), 1);
}

#[tokio::test]
async fn a_service_someone_else_made_that_differs_is_a_takeover_unless_adopt_apply() {
    let bed = bed().await;
    bed.made_by_someone_else("europe-docker.pkg.dev/shop/web:0")
        .await;
    let mut v1 = wanted("v1", "europe-docker.pkg.dev/shop/web:1");

    let (output, verdict, summary) = bed.settled(&v1).await;
    assert_eq!(verdict, FetchVerdict::NeedsApply, "{summary}");
    assert_eq!(
        output["objects"][0]["takeover"],
        json!({
            "object": "Cloud Run service web",
            "differences": ["template.containers[0].image: europe-docker.pkg.dev/shop/web:0 live, europe-docker.pkg.dev/shop/web:1 wanted"],
        }),
        "{output}"
    );
    assert_eq!(bed.writes(), 0, "nothing is marked");

    v1.adopt = vergence_model::adoption::Adopt::Apply;
    let (output, verdict, _) = bed.settled(&v1).await;
    assert_eq!(verdict, FetchVerdict::NeedsApply);
    assert_eq!(output["objects"][0]["takeover"], Value::Null, "{output}");

    // One apply takes it over.
    bed.apply(&v1).await;
    let (output, verdict, summary) = bed.settled(&v1).await;
    assert_eq!(verdict, FetchVerdict::Converged, "{summary}");
    assert_eq!(output["objects"][0]["takeover"], Value::Null);
    assert_eq!(bed.writes(), 1);
}

/// The traffic the engine's reading of the fetch gives `service`'s version.
fn share(output: &Value, version: &str) -> Option<u8> {
    let result = JobResult::of_call(
        Ok(output.to_string()),
        std::time::Duration::ZERO,
        Timestamp::now(),
    );
    vergence_engine::fetch::traffic_percent(
        vergence_model::FetchMode::Structured,
        &result,
        &version.parse().unwrap(),
    )
}

#[tokio::test]
async fn a_rollout_step_splits_the_traffic_with_the_revision_before_and_takes_it_back() {
    let bed = bed().await;
    let v1 = wanted("v1", "europe-docker.pkg.dev/shop/web:1");
    bed.apply(&v1).await;
    let (output, _, _) = bed.settled(&v1).await;
    assert_eq!(share(&output, "v1"), Some(100), "{output}");
    let v1_revision = bed.fake.service(SERVICE).unwrap()["latestReadyRevision"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();

    // The first step: a new revision with 30%, the one before keeps 70%.
    let mut v2 = wanted("v2", "europe-docker.pkg.dev/shop/web:2");
    v2.traffic_percent = Some(30);
    let done = bed.apply(&v2).await;
    assert!(
        done.contains(&format!(
            "with 30% of the traffic, 70% staying on {v1_revision}"
        )),
        "{done}"
    );
    let (output, verdict, summary) = bed.settled(&v2).await;
    assert_eq!(verdict, FetchVerdict::Converged, "{summary}");
    assert_eq!(share(&output, "v2"), Some(30), "{output}");
    let service = bed.fake.service(SERVICE).unwrap();
    let routes: Vec<(String, i64, String)> = service["traffic"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["revision"].as_str().unwrap().to_owned(),
                t["percent"].as_i64().unwrap(),
                t["tag"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let v2_revision = service["template"]["revision"].as_str().unwrap().to_owned();
    assert_eq!(
        routes,
        [
            (v2_revision.clone(), 30, "canary".to_owned()),
            (v1_revision.clone(), 70, "stable".to_owned())
        ]
    );
    // The same step again changes nothing.
    assert!(bed.apply(&v2).await.contains("already names revision"));

    // A failed check: all the traffic back to the revision before.
    v2.traffic_percent = Some(0);
    bed.apply(&v2).await;
    let (output, _, _) = bed.settled(&v2).await;
    assert_eq!(share(&output, "v2"), Some(0), "{output}");

    // The last step: the spec's own traffic, all of it to the latest.
    v2.traffic_percent = None;
    let done = bed.apply(&v2).await;
    assert!(done.starts_with("started updating"), "{done}");
    let (output, _, _) = bed.settled(&v2).await;
    assert_eq!(share(&output, "v2"), Some(100), "{output}");
}
