//! Vergence's domain: the config model and its [`compiler`], the
//! convergence [`engine`], and the [`ports`] that storage, queues and runners
//! implement. This crate depends on no cloud, Kubernetes or HTTP library;
//! adapters live in `infra/` and `runtimes/`.

pub mod compiler;
pub mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod control;
pub mod engine;
pub mod error;
pub mod hashing;
pub mod model;
pub mod ports;

pub use error::{Error, Result};
