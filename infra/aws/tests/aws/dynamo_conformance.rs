//! The state store conformance suite, against DynamoDB Local: every check
//! gets a table of its own.

vergence_model::store_conformance_tests!(
    match crate::common::endpoint(crate::common::DYNAMODB_URL) {
        Some(url) => crate::common::fresh_store(url),
        None => return,
    }
);
