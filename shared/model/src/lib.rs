//! Vergence's domain model, shared by the compiler, the engine and every
//! adapter: validated names, service instances and their state, jobs,
//! events, delivery policies, the [`ports`] adapters implement, the one
//! [`Error`] type of the core, and config [`diagnostics`].
//!
//! This crate depends on no YAML, cloud, Kubernetes or HTTP library; the
//! compiler (`vergence-compiler`) and the engine (`vergence-engine`) build
//! on it, and neither sees the other.

// The core stays readable: no function over 80 lines (clippy.toml).
#![warn(clippy::too_many_lines)]

pub mod adoption;
pub mod agent;
pub mod bundle;
pub mod checks;
pub mod cloud_run;
pub mod compiled;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod diagnostics;
pub mod ecs;
pub mod error;
pub mod event;
pub mod hashing;
pub mod instance;
pub mod job;
pub mod manifests;
pub mod names;
pub mod notification;
pub mod policy;
pub mod ports;
pub mod release;
pub mod rollout;
pub mod runner;
pub mod secrets;
pub mod terraform;
pub mod text;
pub mod token;
pub mod trust;
pub mod window;

pub use agent::{AGENT_LEASE, AGENT_STALE_AFTER, AgentState, AgentTask, AgentWork};
pub use bundle::{ConfigBundle, ConfigPart, MAX_BUNDLE_PATH_BYTES, PartOf, check_bundle_path};
pub use checks::{Bound, CloudwatchAlarmCheck, PrometheusCheck, Threshold};
pub use cloud_run::CloudRunService;
pub use compiled::*;
pub use diagnostics::{
    ConfigError, ConfigErrors, ConfigLocation, MAX_LISTED_ERRORS, Positions, Source,
};
pub use ecs::EcsService;
pub use error::{Error, Result};
pub use event::*;
pub use instance::*;
pub use job::*;
pub use manifests::{BuiltinJob, BuiltinPlatform, KubernetesObjects};
pub use names::*;
pub use policy::*;
pub use release::*;
pub use rollout::{Rollout, RolloutProgress};
pub use runner::*;
pub use secrets::SecretMask;
pub use token::*;
pub use window::*;
