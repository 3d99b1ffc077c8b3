//! The metric protections against real systems: a real Prometheus
//! (Debian's package) scraping an exporter the test controls, and moto's
//! CloudWatch with the real AWS SDK. One test binary, a module per source.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cloudwatch;
mod prometheus;
