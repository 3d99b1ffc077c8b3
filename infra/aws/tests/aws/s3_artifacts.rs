//! The S3 artifact store against moto, with the DynamoDB store against
//! DynamoDB Local: the files of jobs the state no longer has are deleted,
//! those a kept job or an instance's plan still needs are not.

use std::collections::BTreeSet;
use std::sync::Arc;

use vergence_aws::S3ArtifactStore;
use vergence_model::conformance::{job, record, t};
use vergence_model::ports::{ArtifactStore, InstanceChange, InstanceCommit, StateStore};
use vergence_model::{Artifact, InstanceKey, JobId, PlanRecord};

#[tokio::test]
async fn the_files_of_jobs_the_state_no_longer_has_are_deleted_and_no_others() {
    let (Some(dynamo), Some(moto)) = (
        crate::common::endpoint(crate::common::DYNAMODB_URL),
        crate::common::endpoint(crate::common::SQS_URL),
    ) else {
        return;
    };
    let store: Arc<dyn StateStore> = crate::common::fresh_store(dynamo).await;
    let (s3, bucket) = crate::common::fresh_bucket(&moto).await;
    let artifacts = S3ArtifactStore::new(s3, bucket, "artifacts/");

    // Three kept jobs; the instance's plan was made by a job already gone,
    // for an apply still waiting (on an approval, say).
    let key = InstanceKey::new(
        "shop".parse().unwrap(),
        "web".parse().unwrap(),
        "prod".parse().unwrap(),
    );
    let plan_key = Artifact::output_key(&JobId("fetch-old-0".into()), "plan");
    let mut instance = record(&key, None);
    instance.state.plan = Some(PlanRecord::new(
        "v1".parse().unwrap(),
        1,
        t(0),
        vec![Artifact::of("plan", plan_key.clone(), b"plan 0")],
    ));
    let kept: Vec<String> = (1..=3).map(|n| format!("fetch-kept-{n}")).collect();
    store
        .commit(InstanceCommit {
            change: InstanceChange::Put(Box::new(instance)),
            expected_revision: None,
            new_jobs: kept.iter().map(|id| job(id, &key)).collect(),
            finished_jobs: Vec::new(),
            events: Vec::new(),
        })
        .await
        .unwrap();

    // Files of 15 jobs, two each: the 3 kept and 12 the state pruned.
    let gone: Vec<String> = (0..12).map(|n| format!("fetch-old-{n}")).collect();
    for id in kept.iter().chain(&gone) {
        let id = JobId(id.clone().into());
        for name in ["plan", "plan.json"] {
            artifacts
                .put(&Artifact::output_key(&id, name), b"content")
                .await
                .unwrap();
        }
    }
    assert_eq!(artifacts.job_ids().await.unwrap().len(), 15);

    let deleted = vergence_engine::prune_artifacts(store.as_ref(), &artifacts)
        .await
        .unwrap();

    assert_eq!(deleted, 11, "the pruned jobs but the plan's maker");
    let left: BTreeSet<String> = artifacts
        .job_ids()
        .await
        .unwrap()
        .into_iter()
        .map(|id| id.to_string())
        .collect();
    let mut expected: BTreeSet<String> = kept.iter().cloned().collect();
    expected.insert("fetch-old-0".into());
    assert_eq!(left, expected, "one folder per job still needed");
    assert!(artifacts.get(&plan_key).await.unwrap().is_some());
    let pruned = Artifact::output_key(&JobId("fetch-old-5".into()), "plan.json");
    assert!(artifacts.get(&pruned).await.unwrap().is_none());
    // Nothing left to delete.
    assert_eq!(
        vergence_engine::prune_artifacts(store.as_ref(), &artifacts)
            .await
            .unwrap(),
        0
    );
}
