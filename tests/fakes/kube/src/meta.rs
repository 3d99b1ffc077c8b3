//! Small helpers over objects held as JSON: metadata accessors, the
//! timestamp format of the API, uids and generated-name suffixes.

use jiff::{Timestamp, Unit};
use serde_json::{Map, Value};

/// `metadata.name`, or "" when missing.
pub(crate) fn name(obj: &Value) -> &str {
    str_at(obj, &["metadata", "name"]).unwrap_or_default()
}

/// `metadata.namespace`, or "" when missing.
pub(crate) fn namespace(obj: &Value) -> &str {
    str_at(obj, &["metadata", "namespace"]).unwrap_or_default()
}

/// `metadata.uid`, or "" when missing.
pub(crate) fn uid(obj: &Value) -> &str {
    str_at(obj, &["metadata", "uid"]).unwrap_or_default()
}

/// The string at a path of object keys.
pub(crate) fn str_at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(obj, path).and_then(Value::as_str)
}

/// The value at a path of object keys.
pub(crate) fn at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, key| v.get(*key))
}

/// The object at a path, created (replacing non-objects) on the way.
pub(crate) fn object_at<'a>(obj: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut current = obj;
    for key in path {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        current = match current {
            Value::Object(map) => map.entry((*key).to_owned()).or_insert(Value::Null),
            _ => unreachable!("made an object just above"),
        };
    }
    if !current.is_object() {
        *current = Value::Object(Map::new());
    }
    match current {
        Value::Object(map) => map,
        _ => unreachable!("made an object just above"),
    }
}

/// `metadata`, created when missing.
pub(crate) fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    object_at(obj, &["metadata"])
}

/// Sets a key of an object at a path, creating the path.
pub(crate) fn set(obj: &mut Value, path: &[&str], key: &str, value: Value) {
    object_at(obj, path).insert(key.to_owned(), value);
}

/// Sets a key unless it is present (and not null): API defaulting.
pub(crate) fn default_key(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_owned(), value);
    }
}

/// An integer at a path of object keys.
pub(crate) fn i64_at(obj: &Value, path: &[&str]) -> Option<i64> {
    at(obj, path).and_then(Value::as_i64)
}

/// The labels of an object (empty when none).
pub(crate) fn labels(obj: &Value) -> Map<String, Value> {
    at(obj, &["metadata", "labels"])
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Now, to the second, in the API's RFC 3339 form (`2024-05-01T10:00:00Z`).
pub(crate) fn now() -> String {
    Timestamp::now()
        .round(Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| Timestamp::now().to_string())
}

/// A random version-4 UUID, as object uids look.
pub(crate) fn new_uid() -> String {
    let hex: String = (0..32)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
        .collect();
    // Version 4, variant 10xx: the fixed nibbles of a random UUID.
    let variant = char::from_digit(8 + fastrand::u32(0..4), 16).unwrap_or('8');
    format!(
        "{}-{}-4{}-{}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        variant,
        &hex[17..20],
        &hex[20..32]
    )
}

/// The alphabet the real server draws `generateName` suffixes from (no
/// vowels, so no words; no look-alike digits).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Five random characters, as appended to a `generateName`.
pub(crate) fn name_suffix() -> String {
    (0..5)
        .map(|_| char::from(SUFFIX_ALPHABET[fastrand::usize(0..SUFFIX_ALPHABET.len())]))
        .collect()
}

/// A short stable hash, for revision names such as `web-5d8f7c9b4`.
pub(crate) fn short_hash(value: &Value) -> String {
    // FNV-1a: stable across runs, unlike the std hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in value.to_string().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let chars: String = (0..10)
        .map(|i| char::from(SUFFIX_ALPHABET[((hash >> (i * 6)) % 27) as usize]))
        .collect();
    chars
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn uids_look_like_uuids() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert_ne!(uid, new_uid());
    }

    #[test]
    fn timestamps_have_seconds_precision() {
        let now = now();
        assert!(now.ends_with('Z'), "{now}");
        assert_eq!(now.len(), "2024-05-01T10:00:00Z".len(), "{now}");
    }

    #[test]
    fn object_at_creates_the_path() {
        let mut obj = json!({"metadata": {"name": "a"}});
        object_at(&mut obj, &["status", "x"]).insert("y".into(), json!(1));
        assert_eq!(obj["status"]["x"]["y"], 1);
        assert_eq!(name(&obj), "a");
    }
}
