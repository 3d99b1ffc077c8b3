//! The Compiler: user config (YAML) plus each service's latest release
//! becomes one [`CompiledInstance`](vergence_model::CompiledInstance) per
//! service and release channel.
//!
//! [`read_dir`] turns a directory into a [`ConfigBundle`]; [`check`] parses
//! and checks every document, collecting all errors with file, line and
//! field path; [`ConfigModel`] renders desired states. [`YamlCompiler`] is
//! the [`Compiler`] port the engine's control operations are given. Pure:
//! no I/O beyond reading the config directory.

// Functions stay short enough to read in one go; the threshold is in the
// workspace clippy.toml.
#![warn(clippy::too_many_lines)]

mod check;
pub mod config;
pub mod model;
mod port;
mod render;
pub mod template;

pub use check::{check, check_docker_image};
pub use config::json_schema::{SCHEMA_URL, config_json_schema};
pub use config::{ReadOptions, read_dir, read_dir_with};
pub use model::ConfigModel;
pub use port::YamlCompiler;
pub use render::promotion_order;
pub use vergence_model::ConfigBundle;
pub use vergence_model::ports::Compiler;

#[cfg(test)]
pub(crate) mod tests;
