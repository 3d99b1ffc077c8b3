//! Local runner.
