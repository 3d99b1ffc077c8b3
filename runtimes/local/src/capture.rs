//! Bounded capture of a job's output pipes: the head of stdout and the tail
//! of stderr. Pipes are read to the end whatever the limits, so a chatty
//! process never blocks on a full pipe, and bytes are turned into text
//! without ever splitting a UTF-8 character.

use tokio::io::{AsyncRead, AsyncReadExt};
use vergence_model::SecretMask;

/// Where the bytes read from a pipe go.
pub(crate) trait Capture {
    fn push(&mut self, chunk: &[u8]);
}

/// Keeps the first `limit` bytes; later bytes are read and dropped.
#[derive(Debug)]
pub(crate) struct Head {
    bytes: Vec<u8>,
    limit: usize,
}

impl Head {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
        }
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl Capture for Head {
    fn push(&mut self, chunk: &[u8]) {
        let room = self.limit.saturating_sub(self.bytes.len());
        self.bytes
            .extend_from_slice(&chunk[..room.min(chunk.len())]);
    }
}

/// Keeps the last `limit` bytes.
#[derive(Debug)]
pub(crate) struct Tail {
    bytes: Vec<u8>,
    limit: usize,
}

impl Tail {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
        }
    }

    /// The kept bytes; a few more than `limit` may remain, [`tail_text`]
    /// cuts them when the text is made.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl Capture for Tail {
    fn push(&mut self, chunk: &[u8]) {
        if chunk.len() >= self.limit {
            self.bytes.clear();
            self.bytes
                .extend_from_slice(&chunk[chunk.len() - self.limit..]);
            return;
        }
        self.bytes.extend_from_slice(chunk);
        // Dropping the front only once the buffer holds twice the limit keeps
        // the cost linear in the bytes read, however small the chunks.
        if self.bytes.len() >= 2 * self.limit {
            let excess = self.bytes.len() - self.limit;
            self.bytes.drain(..excess);
        }
    }
}

/// Reads `reader` to its end (or first error) into `capture`.
pub(crate) async fn pump<R>(reader: Option<R>, capture: &mut impl Capture)
where
    R: AsyncRead + Unpin,
{
    let Some(mut reader) = reader else {
        return;
    };
    let mut buffer = vec![0_u8; 16 * 1024];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) => return,
            Ok(n) => capture.push(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(error = %e, "reading a job's output failed");
                return;
            }
        }
    }
}

/// At most the first `limit` bytes of `bytes` as text, its secrets masked.
/// A character cut by the limit is left out; invalid bytes become U+FFFD.
/// `bytes` may hold more than `limit` (a [`Head`] keeps
/// [`SecretMask::longest`] more): a secret the cut goes through is then
/// seen whole and masked, not kept in part.
pub(crate) fn head_text(bytes: &[u8], limit: usize, secrets: &SecretMask) -> String {
    let bytes = &bytes[..bytes.len() - incomplete_suffix_len(bytes)];
    let text = String::from_utf8_lossy(bytes);
    // Replacement characters are longer than the bytes they replace.
    let end = floor_char_boundary(&text, limit);
    let mut masked = secrets.apply_within(&text, 0..end);
    // A mask at the cut may be a byte or two longer than what it covers.
    masked.truncate(floor_char_boundary(&masked, limit));
    masked
}

/// At most the last `limit` bytes of `bytes` as text, its secrets masked.
/// A character cut by the limit is left out; invalid bytes become U+FFFD.
/// `bytes` may hold more than `limit` (a [`Tail`] keeps
/// [`SecretMask::longest`] more): a secret the cut goes through is then
/// seen whole and masked, not kept in part.
pub(crate) fn tail_text(bytes: &[u8], limit: usize, secrets: &SecretMask) -> String {
    // Continuation bytes at the start belong to a character that was cut
    // (by the limit, or by the tail's buffer).
    let cut = bytes
        .iter()
        .take(3)
        .take_while(|b| is_continuation(**b))
        .count();
    let text = String::from_utf8_lossy(&bytes[cut..]);
    let start = ceil_char_boundary(&text, text.len().saturating_sub(limit));
    let masked = secrets.apply_within(&text, start..text.len());
    let keep_from = ceil_char_boundary(&masked, masked.len().saturating_sub(limit));
    masked[keep_from..].to_owned()
}

fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// How many bytes at the end of `bytes` are the start of a character whose
/// remaining bytes are missing.
fn incomplete_suffix_len(bytes: &[u8]) -> usize {
    let window = bytes.len().saturating_sub(4);
    for start in (window..bytes.len()).rev() {
        let byte = bytes[start];
        if is_continuation(byte) {
            continue;
        }
        let needed = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        let present = bytes.len() - start;
        return if present < needed { present } else { 0 };
    }
    0
}

fn floor_char_boundary(text: &str, index: usize) -> usize {
    let mut index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn ceil_char_boundary(text: &str, index: usize) -> usize {
    let mut index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index += 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> SecretMask {
        SecretMask::default()
    }

    const SECRET: &str = "Qz8xWv3kJ7mN5pLr";

    #[test]
    fn a_secret_the_tail_cut_goes_through_is_masked_not_kept_in_part() {
        let mask = SecretMask::new([SECRET]);
        let limit = 20;
        // The last 20 bytes hold the secret's last 6 characters.
        let stderr = format!("auth failed: {SECRET}, then 9 more.");
        for chunk_size in [1, 3, 7, stderr.len()] {
            let mut tail = Tail::new(limit + mask.longest());
            for chunk in stderr.as_bytes().chunks(chunk_size) {
                tail.push(chunk);
            }
            let text = tail_text(&tail.into_bytes(), limit, &mask);
            assert_eq!(text, "***, then 9 more.", "chunks of {chunk_size}");
        }
        // A cut two bytes before the secret's end keeps a mask within the limit.
        let text = tail_text(format!("{SECRET}ab").as_bytes(), 4, &mask);
        assert_eq!(text, "**ab");
    }

    #[test]
    fn a_secret_the_head_cut_goes_through_is_masked_not_kept_in_part() {
        let mask = SecretMask::new([SECRET]);
        let limit = 12;
        // The first 12 bytes end 5 characters into the secret.
        let stdout = format!("token: {SECRET} and more");
        let mut head = Head::new(limit + mask.longest());
        head.push(&stdout.as_bytes()[..3]);
        head.push(&stdout.as_bytes()[3..]);
        assert_eq!(head_text(&head.into_bytes(), limit, &mask), "token: ***");
        // A cut one byte into it: the mask is cut to the limit.
        assert_eq!(
            head_text(format!("1234{SECRET}").as_bytes(), 5, &mask),
            "1234*"
        );
        // Without the margin the rest of the secret is not there to be seen:
        // what the runner's margin is for.
        assert_eq!(
            head_text(&stdout.as_bytes()[..limit], limit, &mask),
            "token: Qz8xW"
        );
    }

    #[test]
    fn secrets_inside_the_limits_are_masked_and_the_limits_hold() {
        let mask = SecretMask::new([SECRET]);
        let text = format!("a {SECRET} b {SECRET} c");
        assert_eq!(head_text(text.as_bytes(), 1000, &mask), "a *** b *** c");
        assert_eq!(tail_text(text.as_bytes(), 1000, &mask), "a *** b *** c");
        for limit in 0..text.len() {
            assert!(head_text(text.as_bytes(), limit, &mask).len() <= limit);
            assert!(tail_text(text.as_bytes(), limit, &mask).len() <= limit);
        }
    }

    #[test]
    fn head_keeps_the_first_bytes_and_drops_the_rest() {
        let mut head = Head::new(5);
        head.push(b"abc");
        head.push(b"defgh");
        head.push(b"ijk");
        assert_eq!(head.into_bytes(), b"abcde");
    }

    #[test]
    fn tail_keeps_the_last_bytes_whatever_the_chunk_sizes() {
        let mut tail = Tail::new(4);
        for chunk in [&b"ab"[..], b"cdefghij", b"k", b"l", b"m"] {
            tail.push(chunk);
        }
        assert_eq!(tail_text(&tail.into_bytes(), 4, &none()), "jklm");
    }

    #[test]
    fn head_text_never_splits_a_character() {
        let text = "a€€";
        // Cut after the first byte of the second euro sign.
        assert_eq!(head_text(text.as_bytes(), 5, &none()), "a€");
        assert_eq!(head_text(text.as_bytes(), 7, &none()), "a€€");
        assert_eq!(head_text("€".as_bytes(), 1, &none()), "");
    }

    #[test]
    fn tail_text_never_splits_a_character() {
        let text = "€€b";
        // The last 6 bytes start inside the first euro sign.
        assert_eq!(tail_text(text.as_bytes(), 6, &none()), "€b");
        assert_eq!(tail_text(text.as_bytes(), 7, &none()), "€€b");
        assert_eq!(tail_text("€".as_bytes(), 1, &none()), "");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters_within_the_limit() {
        let bytes = [b'a', 0xFF, 0xFF, 0xFF, b'b'];
        let head = head_text(&bytes, 4, &none());
        assert!(head.len() <= 4, "{head:?}");
        assert!(head.starts_with("a\u{FFFD}"));
        let tail = tail_text(&bytes, 4, &none());
        assert!(tail.len() <= 4, "{tail:?}");
        assert!(tail.ends_with("\u{FFFD}b"));
    }
}
