//! The AWS clients the runner calls: ECS (task definitions, tasks) and
//! CloudWatch Logs (the tasks' output), built once by the caller and
//! copied to another region for runtimes whose cluster is elsewhere.

use aws_sdk_cloudwatchlogs::config::Region;

/// An ECS client and a CloudWatch Logs client of the same region.
#[derive(Clone, Debug)]
pub struct EcsClients {
    pub ecs: aws_sdk_ecs::Client,
    pub logs: aws_sdk_cloudwatchlogs::Client,
}

impl EcsClients {
    pub fn new(ecs: aws_sdk_ecs::Client, logs: aws_sdk_cloudwatchlogs::Client) -> Self {
        Self { ecs, logs }
    }

    /// The region the clients call, when they were given one.
    pub fn region(&self) -> Option<String> {
        self.ecs.config().region().map(|r| r.as_ref().to_owned())
    }

    /// The same clients (credentials, retries, endpoint override) calling
    /// `region`.
    pub fn in_region(&self, region: &str) -> Self {
        let ecs = self
            .ecs
            .config()
            .to_builder()
            .region(Region::new(region.to_owned()))
            .build();
        let logs = self
            .logs
            .config()
            .to_builder()
            .region(Region::new(region.to_owned()))
            .build();
        Self {
            ecs: aws_sdk_ecs::Client::from_conf(ecs),
            logs: aws_sdk_cloudwatchlogs::Client::from_conf(logs),
        }
    }
}
