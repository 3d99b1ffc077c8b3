//! The first-class Cloud Run runtime's apply and fetch against the fake
//! Admin API with the real `Services` client: an apply returns as soon as
//! Cloud Run accepted the change, and the fetches follow the rollout (the
//! Ready condition, the latest ready revision, the traffic); a change made
//! outside Vergence is drift; a revision that fails, or never gets Ready,
//! is reported as such.

use serde_json::{Value, json};
use vergence_fake_cloud_run::FakeCloudRun;
use vergence_model::cloud_run::CloudRunService;
use vergence_runner_cloud_run::CloudRunServices;

use crate::{PROJECT, REGION};

fn service(version: &str, image: &str) -> CloudRunService {
    let spec = json!({
        "annotations": {"vergence.dev/version": version, "vergence.dev/service-id": "svc-1"},
        "labels": {"team": "shop"},
        "template": {
            "containers": [{"image": image, "ports": [{"containerPort": 8080}]}],
            "maxInstanceRequestConcurrency": 80,
        },
    });
    CloudRunService {
        project: PROJECT.into(),
        region: REGION.into(),
        name: "web-prod".into(),
        spec: spec.to_string(),
        version: version.into(),
        source: "run/web.yaml".into(),
    }
}

async fn started(polls_to_settle: u32) -> (FakeCloudRun, CloudRunServices) {
    let fake = FakeCloudRun::builder()
        .polls_to_settle(polls_to_settle)
        .start()
        .await
        .unwrap();
    let services = CloudRunServices::new(fake.services_client().await.unwrap());
    (fake, services)
}

/// The one object of a fetch's output.
async fn fetched(services: &CloudRunServices, wanted: &CloudRunService) -> Value {
    let result = services.fetch(wanted).await;
    assert!(result.exited_with(0), "{result:?}");
    let output: Value = serde_json::from_str(&result.stdout).unwrap();
    let objects = output["objects"].as_array().unwrap();
    assert!(objects.len() <= 1, "{output}");
    objects.first().cloned().unwrap_or(Value::Null)
}

#[tokio::test]
async fn an_apply_returns_at_once_and_the_fetches_follow_the_rollout() {
    let (fake, services) = started(2).await;
    let v1 = service("v1", "europe-docker.pkg.dev/p/shop/web:1");
    assert_eq!(
        fetched(&services, &v1).await,
        Value::Null,
        "nothing deployed yet"
    );

    let result = services.apply(&v1).await;
    assert!(result.exited_with(0), "{result:?}");
    assert!(
        result.stdout.contains("Cloud Run accepted v1"),
        "{}",
        result.stdout
    );
    // The operation was started, not awaited.
    let name = v1.full_name();
    assert_eq!(fake.count("PATCH", &format!("/v2/{name}")), 1);
    assert_eq!(fake.count_matching(|r| r.path.contains("/operations/")), 0);

    let rolling = fetched(&services, &v1).await;
    assert_eq!(rolling["status"], "PENDING", "{rolling}");
    assert_eq!(rolling["versions"][0]["version"], "v1");
    assert!(
        rolling["message"]
            .as_str()
            .unwrap()
            .starts_with("rolling out"),
        "{rolling}"
    );
    let ready = fetched(&services, &v1).await;
    assert_eq!(ready["status"], "SUCCEEDED", "{ready}");
    assert_eq!(ready["versions"][0]["drifted"], false, "{ready}");
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.starts_with("Ready; latest ready revision web-prod-"),
        "{message}"
    );
    assert!(message.ends_with("100%"), "{message}");

    // The next version updates the same service.
    let v2 = service("v2", "europe-docker.pkg.dev/p/shop/web:2");
    assert!(services.apply(&v2).await.exited_with(0));
    fetched(&services, &v2).await;
    let ready = fetched(&services, &v2).await;
    assert_eq!(
        (
            ready["status"].as_str(),
            ready["versions"][0]["version"].as_str()
        ),
        (Some("SUCCEEDED"), Some("v2"))
    );
    let live = fake.service(&name).unwrap();
    assert_eq!(
        live["template"]["containers"][0]["image"],
        "europe-docker.pkg.dev/p/shop/web:2"
    );
    assert_eq!(live["annotations"]["vergence.dev/version"], "v2");

    // Applying what is there again changes nothing.
    let generation = live["generation"].clone();
    assert!(services.apply(&v2).await.exited_with(0));
    assert_eq!(fake.service(&name).unwrap()["generation"], generation);
}

#[tokio::test]
async fn an_image_changed_outside_vergence_is_drift() {
    let (fake, services) = started(0).await;
    let v1 = service("v1", "europe-docker.pkg.dev/p/shop/web:1");
    assert!(services.apply(&v1).await.exited_with(0));
    assert_eq!(fetched(&services, &v1).await["status"], "SUCCEEDED");
    fake.set_service_image_out_of_band("web-prod", "europe-docker.pkg.dev/p/shop/web:hotfix")
        .unwrap();
    let seen = fetched(&services, &v1).await;
    assert_eq!(seen["versions"][0]["drifted"], true, "{seen}");
    let message = seen["message"].as_str().unwrap();
    assert!(
        message.starts_with("template.containers[0].image was changed outside Vergence"),
        "{message}"
    );
    // The apply puts it back.
    assert!(services.apply(&v1).await.exited_with(0));
    assert_eq!(
        fetched(&services, &v1).await["versions"][0]["drifted"],
        false
    );
}

#[tokio::test]
async fn a_failed_revision_is_failed_and_one_never_ready_stays_pending() {
    let (fake, services) = started(1).await;
    let v1 = service("v1", "europe-docker.pkg.dev/p/shop/web:1");
    fake.fail_next_revision(
        "web-prod",
        "Container failed to start and listen on port 8080.",
    );
    assert!(services.apply(&v1).await.exited_with(0));
    let failed = fetched(&services, &v1).await;
    assert_eq!(failed["status"], "FAILED", "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("failed to start and listen on port 8080"),
        "{failed}"
    );

    let v2 = service("v2", "europe-docker.pkg.dev/p/shop/web:2");
    fake.never_ready("web-prod");
    assert!(services.apply(&v2).await.exited_with(0));
    for _ in 0..5 {
        let seen = fetched(&services, &v2).await;
        assert_eq!(seen["status"], "PENDING", "{seen}");
    }
}

#[tokio::test]
async fn a_spec_cloud_run_would_refuse_is_the_apply_s_error() {
    let (_fake, services) = started(0).await;
    let mut broken = service("v1", "europe-docker.pkg.dev/p/shop/web:1");
    broken.spec = json!({"template": {"containers": "not a list"}}).to_string();
    let result = services.apply(&broken).await;
    assert!(result.exited_with(1), "{result:?}");
    assert!(
        result
            .stderr_tail
            .starts_with("Error: the spec rendered from run/web.yaml is not a Cloud Run service"),
        "{}",
        result.stderr_tail
    );
}
