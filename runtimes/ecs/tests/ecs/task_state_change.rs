//! The "ECS Task State Change" event as EventBridge delivers it to the
//! work queue, from a fixture in the shape of the ECS documentation's
//! example (a Fargate task of a Vergence task definition that stopped).

use serde_json::Value;
use vergence_model::{JobHandle, JobId};
use vergence_runner_ecs::task_state_change;

const STOPPED: &str = include_str!("fixtures/task-state-change-stopped.json");

fn edited(edit: impl FnOnce(&mut Value)) -> String {
    let mut event: Value = serde_json::from_str(STOPPED).unwrap();
    edit(&mut event);
    event.to_string()
}

#[test]
fn the_task_state_change_event_names_the_job_and_the_task() {
    let change = task_state_change(STOPPED)
        .unwrap()
        .expect("a Vergence task");
    assert_eq!(change.job, JobId("fetch-5b1e0f6c3a9d2e7b4c81".into()));
    assert_eq!(
        change.task,
        JobHandle(
            "arn:aws:ecs:eu-west-1:111122223333:task/vergence-jobs/7c0b4d4f1e2a4c1f9a51d2b3e6f80a17"
                .into()
        )
    );
    assert_eq!(
        change.cluster_arn,
        "arn:aws:ecs:eu-west-1:111122223333:cluster/vergence-jobs"
    );
    assert!(change.is_stopped());
}

#[test]
fn a_task_still_on_its_way_is_not_stopped() {
    let running = edited(|e| {
        e["detail"]["lastStatus"] = "RUNNING".into();
        e["detail"]["desiredStatus"] = "RUNNING".into();
    });
    let change = task_state_change(&running).unwrap().unwrap();
    assert_eq!(change.last_status, "RUNNING");
    assert!(!change.is_stopped());
}

#[test]
fn tasks_vergence_did_not_start_are_passed_over() {
    let service_task = edited(|e| {
        e["detail"]["taskDefinitionArn"] =
            "arn:aws:ecs:eu-west-1:111122223333:task-definition/web:12".into();
        e["detail"]["startedBy"] = "ecs-svc/1234567890123456789".into();
    });
    assert_eq!(task_state_change(&service_task).unwrap(), None);
    let unstarted = edited(|e| {
        e["detail"].as_object_mut().unwrap().remove("startedBy");
    });
    assert_eq!(task_state_change(&unstarted).unwrap(), None);
}

#[test]
fn other_events_and_garbage_are_errors_that_say_what_they_are() {
    let other = edited(|e| {
        e["source"] = "aws.ecs".into();
        e["detail-type"] = "ECS Container Instance State Change".into();
    });
    let err = task_state_change(&other).unwrap_err().to_string();
    assert!(
        err.contains("\"ECS Container Instance State Change\" event from \"aws.ecs\""),
        "{err}"
    );
    let err = task_state_change("{\"Records\":[]}")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("not an ECS task state change event"),
        "{err}"
    );
}
