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

/// [`hash_fields`] a field at a time, for fields that come in parts (an
/// instance's names) or as numbers: the same digest, without building a
/// string for each field. A job id is hashed on every decision that starts
/// a job.
#[derive(Clone, Default)]
pub struct FieldHasher(Sha256);

impl std::fmt::Debug for FieldHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FieldHasher")
    }
}

impl FieldHasher {
    /// One field: `parts` one after another, as [`hash_fields`] hashes
    /// their concatenation.
    pub fn field(&mut self, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.0.update((len as u64).to_be_bytes());
        for part in parts {
            self.0.update(part);
        }
    }

    /// One field: `n` in decimal, as `n.to_string()` spells it.
    pub fn number(&mut self, n: impl Into<i128>) {
        use std::io::Write;
        // An i128 is at most 40 characters with its sign.
        let mut digits = [0u8; 40];
        let mut cursor = std::io::Cursor::new(&mut digits[..]);
        // Cannot fail: the buffer holds any i128.
        let _ = write!(cursor, "{}", n.into());
        let len = usize::try_from(cursor.position()).unwrap_or(0);
        self.field(&[&digits[..len]]);
    }

    /// The digest in lowercase hex, one ASCII digit at a time.
    pub fn hex(self) -> impl Iterator<Item = u8> {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let digest: [u8; 32] = self.0.finalize().into();
        digest.into_iter().flat_map(|byte| {
            [
                DIGITS[usize::from(byte >> 4)],
                DIGITS[usize::from(byte & 0xf)],
            ]
        })
    }
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
    fn a_field_hasher_gives_hash_fields_digest() {
        let whole = hash_fields([
            b"shop/web/prod".as_slice(),
            b"v1.4.2",
            b"apply",
            7u64.to_string().as_bytes(),
            (-1_800_000_000_123i64).to_string().as_bytes(),
        ]);
        let mut hasher = FieldHasher::default();
        hasher.field(&[b"shop", b"/", b"web", b"/", b"prod"]);
        hasher.field(&[b"v1.4.2"]);
        hasher.field(&[b"apply"]);
        hasher.number(7u64);
        hasher.number(-1_800_000_000_123i64);
        let hex: Vec<u8> = hasher.hex().collect();
        assert_eq!(String::from_utf8(hex).ok(), Some(whole));
    }

    #[test]
    fn stable_ids_are_uuid_shaped_and_deterministic() {
        let id = stable_id("service", "shop/web");
        assert_eq!(id.len(), 36);
        assert_eq!(id, stable_id("service", "shop/web"));
        assert_ne!(id, stable_id("service", "shop/api"));
    }
}
