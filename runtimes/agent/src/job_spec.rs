//! A task's Kubernetes Job: everything the job runs with, and the settings
//! that keep it from running twice or forever — one pod and no retries
//! (`backoffLimit: 0`; Vergence's retry policy decides about retries), the
//! job's timeout as `activeDeadlineSeconds`, and a TTL so finished Jobs do
//! not pile up.

use k8s_openapi::api::batch::v1::Job;
use serde_json::{Map, Value, json};
use vergence_model::agent::protocol::{RunJob, labels};

use crate::error::AgentError;

/// The container's name in every Job's pod.
pub const CONTAINER: &str = "job";

/// The Job for `run`, in `namespace`, removed `ttl_seconds` after it ends.
pub fn job_for(
    run: &RunJob,
    agent: &str,
    namespace: &str,
    ttl_seconds: u32,
) -> Result<Job, AgentError> {
    let mut env: Vec<Value> = run
        .env
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    env.extend(run.secret_env.iter().map(|(name, secret)| {
        json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}})
    }));
    let mut object_labels: Map<String, Value> = run
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    // The agent's own labels win: it finds its Jobs again by them.
    object_labels.insert(labels::AGENT.into(), agent.into());
    object_labels.insert(labels::JOB_ID.into(), run.job_id.as_str().into());
    object_labels.insert(labels::MANAGED_BY.into(), "vergence-agent".into());
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "containers": [{
            "name": CONTAINER,
            "image": run.image,
            "command": run.command,
            "env": env,
        }],
    });
    if let Some(account) = &run.service_account {
        pod_spec["serviceAccountName"] = account.as_str().into();
    }
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": run.job_name,
            "namespace": namespace,
            "labels": object_labels,
            "annotations": {labels::JOB_ID_ANNOTATION: run.job_id.as_str()},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": run.active_deadline_seconds,
            "ttlSecondsAfterFinished": ttl_seconds,
            "template": {
                "metadata": {"labels": object_labels},
                "spec": pod_spec,
            },
        },
    });
    serde_json::from_value(job).map_err(|source| AgentError::BuildJob {
        job: run.job_id.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use vergence_model::JobId;
    use vergence_model::agent::protocol::SecretKeyRef;

    use super::*;

    #[test]
    fn the_job_runs_once_within_its_deadline_with_env_and_secret_references() {
        let run = RunJob {
            job_id: JobId("apply-1".into()),
            job_name: "vergence-apply-1".into(),
            namespace: None,
            service_account: Some("deployer".into()),
            image: "registry/app:1".into(),
            command: vec!["./apply".into()],
            env: BTreeMap::from([("VERGENCE_SERVICE".into(), "web".into())]),
            secret_env: BTreeMap::from([(
                "DB_PASSWORD".into(),
                SecretKeyRef {
                    name: "db".into(),
                    key: "password".into(),
                },
            )]),
            active_deadline_seconds: 600,
            labels: BTreeMap::new(),
        };
        let job = job_for(&run, "prod-eu", "jobs", 3600).unwrap();
        let value = serde_json::to_value(&job).unwrap();
        assert_eq!(value["metadata"]["namespace"], "jobs");
        assert_eq!(value["metadata"]["labels"][labels::AGENT], "prod-eu");
        assert_eq!(value["spec"]["backoffLimit"], 0);
        assert_eq!(value["spec"]["activeDeadlineSeconds"], 600);
        assert_eq!(value["spec"]["ttlSecondsAfterFinished"], 3600);
        let pod = &value["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "deployer");
        assert_eq!(pod["restartPolicy"], "Never");
        let env = &pod["containers"][0]["env"];
        assert_eq!(env[0], json!({"name": "VERGENCE_SERVICE", "value": "web"}));
        assert_eq!(
            env[1]["valueFrom"]["secretKeyRef"],
            json!({"name": "db", "key": "password"})
        );
    }
}
