//! The state file's faults: an emptied file is never taken for a fresh
//! start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use vergence_embedded::SqliteStore;

#[test]
fn an_empty_state_file_is_refused_not_opened_as_a_fresh_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    std::fs::write(&path, b"").unwrap();
    let Err(error) = SqliteStore::open(&path) else {
        panic!("an empty file must not open");
    };
    let message = error.to_string();
    assert!(message.contains("is empty (0 bytes)"), "{message}");
    assert!(message.contains("delete it to start over"), "{message}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "nothing written"
    );
}

#[test]
fn a_missing_state_file_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deeper/state.db");
    SqliteStore::open(&path).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() > 0);
}
