//! An in-process fake Kubernetes API server for tests. It speaks the wire
//! protocol the real `kube` client uses — discovery, CRUD, the four patch
//! types with server-side-apply field ownership, list and watch with
//! resourceVersions, bookmarks and 410 Expired, Status error bodies, pod
//! logs — and runs the controllers a deployment tool depends on: a Job
//! controller, a kubelet stand-in that runs containers through a
//! pluggable [`Executor`] (local processes by default), and workload
//! rollout simulation. Objects are plain JSON; the fake knows no typed API.
//!
//! ```no_run
//! # async fn demo() -> Result<(), vergence_fake_kube::Error> {
//! let cluster = vergence_fake_kube::FakeCluster::start().await?;
//! let client = cluster.client();
//! # let _ = client;
//! # Ok(()) }
//! ```

mod cluster;
mod controllers;
mod defaults;
mod executor;
mod gc;
mod logs;
mod meta;
mod objects;
mod patch;
mod requests;
mod resources;
mod selectors;
mod server;
mod shared;
mod status;
mod store;
mod validation;

pub use cluster::{Error, FakeCluster, FakeClusterBuilder};
pub use controllers::rollout::Rollout;
pub use executor::{
    Cancellation, Canned, ExecOutcome, Executor, FnExecutor, NeverFinishes, Output, PodRun,
    ProcessExecutor,
};
pub use logs::PodLogs;
pub use requests::RecordedRequest;
pub use resources::{RESOURCES, ResourceType};
pub use status::ApiError;
