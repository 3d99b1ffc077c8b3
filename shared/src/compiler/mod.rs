//! The Compiler: user config (YAML) plus a service's latest release becomes
//! one [`CompiledInstance`](crate::model::CompiledInstance) per service and
//! release channel. Pure: no I/O beyond what the caller hands in.

mod check;
pub mod model;
mod render;
pub mod template;

pub use check::{check, check_docker_image, upstream_channels};
pub use model::ConfigModel;
pub use render::{instance_ids, promotion_order};

#[cfg(test)]
pub(crate) mod tests;
