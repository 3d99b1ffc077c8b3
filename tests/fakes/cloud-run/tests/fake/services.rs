//! Services, revisions and their long-running operations.

use google_cloud_gax::error::rpc::Code;
use google_cloud_lro::Poller;
use google_cloud_run_v2::model::condition::State;
use google_cloud_run_v2::model::{Container, Service, TrafficTarget, TrafficTargetAllocationType};
use vergence_fake_cloud_run::FakeCloudRun;

use crate::{PARENT, code_of, service, service_name};

async fn create_ready(fake: &FakeCloudRun, id: &str, image: &str) -> Service {
    let services = fake.services_client().await.unwrap();
    services
        .create_service()
        .set_parent(PARENT)
        .set_service_id(id)
        .set_service(service(image))
        .poller()
        .until_done()
        .await
        .unwrap()
}

#[tokio::test]
async fn creating_a_service_returns_an_operation_that_finishes_on_a_later_poll() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();

    let started = services
        .create_service()
        .set_parent(PARENT)
        .set_service_id("web")
        .set_service(service("europe-docker.pkg.dev/p/r/web:1"))
        .send()
        .await
        .unwrap();
    assert!(!started.done);
    let reconciling = services
        .get_operation()
        .set_name(&started.name)
        .send()
        .await
        .unwrap();
    assert!(!reconciling.done, "done on the first poll");
    let pending: Service = reconciling.metadata.unwrap().to_msg().unwrap();
    assert!(pending.reconciling);
    assert_eq!(
        pending.terminal_condition.unwrap().state,
        State::ConditionReconciling
    );

    let finished = services
        .get_operation()
        .set_name(&started.name)
        .send()
        .await
        .unwrap();
    assert!(finished.done, "not done on the second poll");
    let created: Service = finished.response().unwrap().to_msg().unwrap();
    assert_eq!(created.name, service_name("web"));
    assert!(!created.reconciling);
    assert_eq!(created.generation, 1);
    assert_eq!(created.observed_generation, 1);
    assert_eq!(created.terminal_condition.as_ref().unwrap().r#type, "Ready");
    assert_eq!(
        created.terminal_condition.unwrap().state,
        State::ConditionSucceeded
    );
    assert_eq!(
        created.latest_ready_revision,
        created.latest_created_revision
    );
    let revision = created.latest_ready_revision.rsplit('/').next().unwrap();
    assert!(revision.starts_with("web-00001-") && revision.len() == "web-00001-abc".len());
    assert_eq!(created.traffic_statuses[0].percent, 100);
    assert_eq!(created.traffic_statuses[0].revision, revision);
    assert!(created.uri.starts_with("https://web-"), "{}", created.uri);
    let conditions: Vec<_> = created
        .conditions
        .iter()
        .map(|c| c.r#type.as_str())
        .collect();
    assert_eq!(conditions, ["RoutesReady", "ConfigurationsReady"]);
}

#[tokio::test]
async fn updating_a_service_creates_a_new_ready_revision_and_keeps_annotations() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();
    let first = create_ready(&fake, "web", "europe-docker.pkg.dev/p/r/web:1").await;

    let mut changed = first.clone();
    changed
        .annotations
        .insert("vergence.dev/version".into(), "v2".into());
    let template = changed.template.as_mut().unwrap();
    template
        .annotations
        .insert("vergence.dev/version".into(), "v2".into());
    template.containers[0].image = "europe-docker.pkg.dev/p/r/web:2".into();
    let updated = services
        .update_service()
        .set_service(changed)
        .poller()
        .until_done()
        .await
        .unwrap();

    assert_eq!(updated.generation, 2);
    assert_ne!(updated.latest_ready_revision, first.latest_ready_revision);
    assert!(
        updated
            .latest_ready_revision
            .contains("/revisions/web-00002-")
    );
    assert_eq!(updated.annotations["vergence.dev/version"], "v2");
    assert_eq!(updated.labels["vergence-service"], "web");
    assert_eq!(
        updated.template.unwrap().annotations["vergence.dev/version"],
        "v2"
    );
    let revisions = fake.revisions_client().await.unwrap();
    let revision = revisions
        .get_revision()
        .set_name(&updated.latest_ready_revision)
        .send()
        .await
        .unwrap();
    assert_eq!(revision.annotations["vergence.dev/version"], "v2");
    assert_eq!(
        revision.containers[0].image,
        "europe-docker.pkg.dev/p/r/web:2"
    );
    assert_eq!(revision.service, service_name("web"));
    let listed = revisions
        .list_revisions()
        .set_parent(service_name("web"))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.revisions.len(), 2);
}

#[tokio::test]
async fn an_update_that_changes_nothing_makes_no_revision() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();
    let first = create_ready(&fake, "web", "europe-docker.pkg.dev/p/r/web:1").await;

    let same = services
        .update_service()
        .set_service(first.clone())
        .poller()
        .until_done()
        .await
        .unwrap();

    assert_eq!(same.generation, 1);
    assert_eq!(same.latest_created_revision, first.latest_created_revision);
}

#[tokio::test]
async fn a_revision_that_never_gets_ready_reports_a_failed_terminal_condition() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();
    let first = create_ready(&fake, "web", "europe-docker.pkg.dev/p/r/web:1").await;
    fake.fail_next_revision("web", "The user-provided container failed to start.");

    let mut changed = first.clone();
    changed.template.as_mut().unwrap().containers[0].image =
        "europe-docker.pkg.dev/p/r/web:2".into();
    let error = services
        .update_service()
        .set_service(changed)
        .poller()
        .until_done()
        .await
        .unwrap_err();

    assert_eq!(code_of(&error), Some(Code::FailedPrecondition));
    assert!(error.to_string().contains("failed to start"), "{error}");
    let current = services
        .get_service()
        .set_name(service_name("web"))
        .send()
        .await
        .unwrap();
    let terminal = current.terminal_condition.unwrap();
    assert_eq!(terminal.state, State::ConditionFailed);
    assert!(
        terminal
            .message
            .contains("is not ready and cannot serve traffic")
    );
    assert!(terminal.message.contains("failed to start"));
    assert_eq!(current.latest_ready_revision, first.latest_ready_revision);
    assert_ne!(
        current.latest_created_revision,
        first.latest_created_revision
    );
    assert!(!current.reconciling);
}

#[tokio::test]
async fn a_revision_held_back_keeps_the_service_reconciling_and_its_operation_running() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();
    fake.never_ready("web");

    let started = services
        .create_service()
        .set_parent(PARENT)
        .set_service_id("web")
        .set_service(service("europe-docker.pkg.dev/p/r/web:1"))
        .send()
        .await
        .unwrap();
    for _ in 0..5 {
        let polled = services
            .get_operation()
            .set_name(&started.name)
            .send()
            .await
            .unwrap();
        assert!(!polled.done);
    }

    let current = services
        .get_service()
        .set_name(service_name("web"))
        .send()
        .await
        .unwrap();
    assert!(current.reconciling);
    assert_eq!(
        current.terminal_condition.unwrap().state,
        State::ConditionReconciling
    );
    assert!(current.latest_ready_revision.is_empty());
}

#[tokio::test]
async fn a_missing_image_fails_the_revision_with_image_not_found() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();

    let error = services
        .create_service()
        .set_parent(PARENT)
        .set_service_id("web")
        .set_service(service("missing/web:1"))
        .poller()
        .until_done()
        .await
        .unwrap_err();

    assert!(
        error
            .to_string()
            .contains("Image 'missing/web:1' not found."),
        "{error}"
    );
}

#[tokio::test]
async fn duplicate_service_is_already_exists() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();
    create_ready(&fake, "web", "europe-docker.pkg.dev/p/r/web:1").await;

    let error = services
        .create_service()
        .set_parent(PARENT)
        .set_service_id("web")
        .set_service(service("europe-docker.pkg.dev/p/r/web:1"))
        .send()
        .await
        .unwrap_err();

    assert_eq!(code_of(&error), Some(Code::AlreadyExists));
    assert!(error.to_string().contains(&service_name("web")), "{error}");
}

#[tokio::test]
async fn missing_services_are_not_found_and_bad_bodies_invalid() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();

    let missing = services
        .get_service()
        .set_name(service_name("nope"))
        .send()
        .await
        .unwrap_err();
    let no_image = services
        .create_service()
        .set_parent(PARENT)
        .set_service_id("web")
        .set_service(Service::new().set_template(
            google_cloud_run_v2::model::RevisionTemplate::new().set_containers([Container::new()]),
        ))
        .send()
        .await
        .unwrap_err();
    let bad_id = services
        .create_service()
        .set_parent(PARENT)
        .set_service_id("Web_1")
        .set_service(service("europe-docker.pkg.dev/p/r/web:1"))
        .send()
        .await
        .unwrap_err();

    assert_eq!(code_of(&missing), Some(Code::NotFound));
    assert_eq!(code_of(&no_image), Some(Code::InvalidArgument));
    assert!(
        no_image.to_string().contains("containers[0].image"),
        "{no_image}"
    );
    assert_eq!(code_of(&bad_id), Some(Code::InvalidArgument));
}

#[tokio::test]
async fn traffic_pinned_to_a_revision_is_reported_in_traffic_statuses() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();
    let first = create_ready(&fake, "web", "europe-docker.pkg.dev/p/r/web:1").await;
    let pinned = first
        .latest_ready_revision
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();

    let mut changed = first.clone();
    changed.template.as_mut().unwrap().containers[0].image =
        "europe-docker.pkg.dev/p/r/web:2".into();
    changed.traffic = vec![
        TrafficTarget::new()
            .set_type(TrafficTargetAllocationType::Revision)
            .set_revision(&pinned)
            .set_percent(90),
        TrafficTarget::new()
            .set_type(TrafficTargetAllocationType::Latest)
            .set_percent(10)
            .set_tag("canary"),
    ];
    let updated = services
        .update_service()
        .set_service(changed)
        .poller()
        .until_done()
        .await
        .unwrap();

    let latest = updated.latest_ready_revision.rsplit('/').next().unwrap();
    let statuses: Vec<_> = updated
        .traffic_statuses
        .iter()
        .map(|s| (s.r#type.clone(), s.revision.as_str(), s.percent))
        .collect();
    assert_eq!(
        statuses,
        [
            (TrafficTargetAllocationType::Revision, pinned.as_str(), 90),
            (TrafficTargetAllocationType::Latest, latest, 10),
        ]
    );
    assert!(
        updated.traffic_statuses[1]
            .uri
            .starts_with("https://canary---web-")
    );
}

#[tokio::test]
async fn an_out_of_band_image_change_shows_up_as_a_new_ready_revision() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();
    let first = create_ready(&fake, "web", "europe-docker.pkg.dev/p/r/web:1").await;

    fake.set_service_image_out_of_band("web", "europe-docker.pkg.dev/p/r/web:hotfix")
        .unwrap();

    let drifted = services
        .get_service()
        .set_name(service_name("web"))
        .send()
        .await
        .unwrap();
    assert_eq!(drifted.generation, 2);
    assert!(!drifted.reconciling);
    assert_ne!(drifted.latest_ready_revision, first.latest_ready_revision);
    assert_eq!(
        drifted.template.unwrap().containers[0].image,
        "europe-docker.pkg.dev/p/r/web:hotfix"
    );
    assert_eq!(drifted.annotations["vergence.dev/version"], "v1");
}

#[tokio::test]
async fn deleting_a_service_makes_it_not_found() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();
    create_ready(&fake, "web", "europe-docker.pkg.dev/p/r/web:1").await;

    let deleted = services
        .delete_service()
        .set_name(service_name("web"))
        .poller()
        .until_done()
        .await
        .unwrap();

    assert_eq!(deleted.name, service_name("web"));
    let error = services
        .get_service()
        .set_name(service_name("web"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), Some(Code::NotFound));
    let listed = services
        .list_services()
        .set_parent(PARENT)
        .send()
        .await
        .unwrap();
    assert!(listed.services.is_empty());
}

#[tokio::test]
async fn updating_a_missing_service_with_allow_missing_creates_it() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();

    let created = services
        .update_service()
        .set_service(service("europe-docker.pkg.dev/p/r/web:1").set_name(service_name("web")))
        .set_allow_missing(true)
        .poller()
        .until_done()
        .await
        .unwrap();

    assert_eq!(created.generation, 1);
    assert_eq!(
        created.terminal_condition.unwrap().state,
        State::ConditionSucceeded
    );
    let without = services
        .update_service()
        .set_service(service("europe-docker.pkg.dev/p/r/web:1").set_name(service_name("api")))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&without), Some(Code::NotFound));
}
