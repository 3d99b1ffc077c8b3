//! Embedded adapters.
