//! The fake driven through the real `google-cloud-run-v2` and
//! `google-cloud-logging-v2` clients, as a runner would drive Cloud Run.
//! One test binary, so the clients are linked once.

// Helpers unwrap like the tests that call them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod jobs;
mod logging;
mod requests;
mod services;

use google_cloud_gax::error::rpc::Code;
use google_cloud_run_v2::model::{
    Container, EnvVar, ExecutionTemplate, Job, RevisionTemplate, Service, TaskTemplate,
};

pub const PROJECT: &str = "test-project";
pub const PARENT: &str = "projects/test-project/locations/europe-west1";

pub fn service_name(id: &str) -> String {
    format!("{PARENT}/services/{id}")
}

pub fn job_name(id: &str) -> String {
    format!("{PARENT}/jobs/{id}")
}

/// A service running `image`, labelled and annotated as Vergence would.
pub fn service(image: &str) -> Service {
    Service::new()
        .set_labels([("vergence-service", "web")])
        .set_annotations([("vergence.dev/version", "v1")])
        .set_template(
            RevisionTemplate::new()
                .set_annotations([("vergence.dev/version", "v1")])
                .set_containers([Container::new().set_image(image)]),
        )
}

/// A job whose one task runs `command` in a shell, without retries.
pub fn shell_job(command: &str) -> Job {
    job_with(TaskTemplate::new().set_max_retries(0), command)
}

/// A job whose task template is `template`, running `command` in a shell.
pub fn job_with(template: TaskTemplate, command: &str) -> Job {
    let container = Container::new()
        .set_name("main")
        .set_image("europe-docker.pkg.dev/p/r/tool:1")
        .set_command(["sh", "-c"])
        .set_args([command])
        .set_env([EnvVar::new().set_name("GREETING").set_value("hi")]);
    Job::new().set_template(
        ExecutionTemplate::new()
            .set_labels([("vergence-job", "j-1")])
            .set_template(template.set_containers([container])),
    )
}

/// The code of a client error that carries a `google.rpc.Status`.
pub fn code_of(error: &google_cloud_run_v2::Error) -> Option<Code> {
    error.status().map(|s| s.code)
}
