//! The state store conformance suite, against DynamoDB Local: every check
//! gets a table of its own.

// Helpers outside #[test] functions unwrap too; a panic is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

vergence_model::store_conformance_tests!(match common::endpoint(common::DYNAMODB_URL) {
    Some(url) => common::fresh_store(url),
    None => return,
});
