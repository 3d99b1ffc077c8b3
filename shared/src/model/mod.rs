//! The domain model shared by the compiler, the engine and every adapter.

pub mod compiled;
pub mod event;
pub mod instance;
pub mod job;
pub mod names;
pub mod policy;
pub mod release;
pub mod token;

pub use compiled::*;
pub use event::*;
pub use instance::*;
pub use job::*;
pub use names::*;
pub use policy::*;
pub use release::*;
pub use token::*;
pub mod window;
pub use window::*;
