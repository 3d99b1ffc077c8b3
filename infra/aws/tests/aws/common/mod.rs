//! The adapter tests' helpers live in `vergence_aws::testing`.
pub use vergence_aws::testing::*;
