//! One Cloud Run job per image and settings: created once, reused, put back
//! when edited by hand, and run later when it is slow to settle.

use std::time::Duration;

use google_cloud_lro::Poller;
use google_cloud_run_v2::model::EnvVar;
use vergence_fake_cloud_run::FakeCloudRun;

use crate::*;

#[tokio::test]
async fn a_job_per_image_is_created_once_and_reused_across_runs() {
    let h = Harness::start().await;

    let fetch = dispatch(&h.runner, &shell_job("fetch-1", "echo fetch")).await;
    let apply = dispatch(&h.runner, &shell_job("apply-1", "echo apply")).await;
    let other_image = job(
        "fetch-2",
        "europe-docker.pkg.dev/test-project/tools/other:1",
        &["sh", "-c", "true"],
    );
    let other = dispatch(&h.runner, &other_image).await;

    let cloud_run_job = cloud_run_job_of(&handle_of(&fetch));
    assert_eq!(
        cloud_run_job_of(&handle_of(&apply)),
        cloud_run_job,
        "same image, same program"
    );
    assert_ne!(cloud_run_job_of(&handle_of(&other)), cloud_run_job);
    assert_eq!(
        h.requests_ending("POST", "/jobs").len(),
        2,
        "one create per image"
    );
    assert_eq!(
        h.requests_ending("POST", ":run").len(),
        3,
        "one run per Vergence job"
    );
    assert_eq!(
        h.fake.count("GET", &format!("/v2/{cloud_run_job}")),
        1,
        "a job found ready is not looked up again by the same process"
    );
    for job in [&fetch, &apply, &other] {
        assert!(finish(&h.runner, job).await.exited_with(0));
    }

    // A new worker process finds the job with one look and creates nothing.
    let cold = h.another_runner(settings()).await;
    let later = dispatch(&cold, &shell_job("fetch-3", "echo again")).await;
    assert_eq!(cloud_run_job_of(&handle_of(&later)), cloud_run_job);
    assert_eq!(h.requests_ending("POST", "/jobs").len(), 2);
    assert_eq!(h.fake.count("GET", &format!("/v2/{cloud_run_job}")), 2);
    assert!(
        h.requests_ending("PATCH", "").is_empty(),
        "nothing to put back"
    );
}

#[tokio::test]
async fn a_job_edited_by_hand_is_put_back_before_it_runs_again() {
    let h = Harness::start().await;
    let first = dispatch(&h.runner, &shell_job("fetch-1", "true")).await;
    let name = cloud_run_job_of(&handle_of(&first));
    // Someone changes the image and adds a variable in the console.
    let jobs = h.fake.jobs_client().await.unwrap();
    let mut edited = jobs.get_job().set_name(&name).send().await.unwrap();
    let task = edited.template.as_mut().unwrap().template.as_mut().unwrap();
    task.containers[0].image = "europe-docker.pkg.dev/test-project/tools/evil:1".into();
    task.containers[0]
        .env
        .push(EnvVar::new().set_name("DEBUG").set_value("1"));
    jobs.update_job()
        .set_job(edited)
        .poller()
        .until_done()
        .await
        .unwrap();

    let cold = h.another_runner(settings()).await;
    let second = dispatch(&cold, &shell_job("fetch-2", "true")).await;

    assert_eq!(cloud_run_job_of(&handle_of(&second)), name);
    assert_eq!(
        h.requests_ending("PATCH", "").len(),
        2,
        "the edit, then the repair"
    );
    assert!(finish(&cold, &second).await.exited_with(0));
    let run = h.fake.task_runs().into_iter().last().unwrap();
    assert_eq!(run.image, IMAGE);
    assert_eq!(run.env_var("DEBUG"), None);
}

#[tokio::test]
async fn a_job_still_settling_is_started_by_a_later_poll() {
    let slow = FakeCloudRun::builder().polls_to_settle(12);
    let h = Harness::with(
        slow,
        CloudRunSettings {
            settle_polls: 2,
            ..settings()
        },
    )
    .await;

    let job = dispatch(&h.runner, &shell_job("fetch-1", "echo late")).await;

    let handle = handle_of(&job);
    assert!(!handle.contains("/executions/"), "not run yet: {handle}");
    assert!(h.requests_ending("POST", ":run").is_empty());
    let result = finish(&h.runner, &job).await;
    assert!(result.exited_with(0), "{result:?}");
    assert_eq!(result.stdout, "late\n");
    assert_eq!(h.requests_ending("POST", ":run").len(), 1);
    // Polled again after the result (a duplicate step): no second run.
    assert!(matches!(
        h.runner.poll(&job).await.unwrap(),
        JobProgress::Finished(_)
    ));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(h.requests_ending("POST", ":run").len(), 1);
}
