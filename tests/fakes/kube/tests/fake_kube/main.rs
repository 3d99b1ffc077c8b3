//! The fake Kubernetes API driven by the real `kube` client: the REST API,
//! server-side apply, discovery, Jobs and watches. One test binary, a module
//! per area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod apply;
mod common;
mod discovery;
mod jobs;
mod watch;
