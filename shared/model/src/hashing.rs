//! Content hashes and derived ids. Everything that must be stable across
//! runs (config snapshots, versions, job ids) is hashed the same way here.

use sha2::{Digest, Sha256};

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Hashes a sequence of fields without ambiguity (each is length-prefixed,
/// so ("ab","c") and ("a","bc") differ).
pub fn hash_fields<'a>(fields: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut hasher = Sha256::new();
    for field in fields {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field);
    }
    hex_string(&hasher.finalize())
}

/// Lowercase hex, as `hex::encode` spells it, without its per-character
/// iterator: a job id is hashed on every decision that starts a job.
fn hex_string(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

/// A UUID-shaped id derived from a name, so ids are stable without storage.
pub fn stable_id(kind: &str, name: &str) -> String {
    let h = hash_fields([b"vergence-id".as_slice(), kind.as_bytes(), name.as_bytes()]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_spelled_like_the_hex_crate() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_string(&bytes), hex::encode(&bytes));
    }

    #[test]
    fn fields_are_length_prefixed() {
        assert_ne!(
            hash_fields([b"ab".as_slice(), b"c"]),
            hash_fields([b"a".as_slice(), b"bc"])
        );
    }

    #[test]
    fn stable_ids_are_uuid_shaped_and_deterministic() {
        let id = stable_id("service", "shop/web");
        assert_eq!(id.len(), 36);
        assert_eq!(id, stable_id("service", "shop/web"));
        assert_ne!(id, stable_id("service", "shop/api"));
    }
}
