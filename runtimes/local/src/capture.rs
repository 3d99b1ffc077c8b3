//! Bounded capture of a job's output pipes: the head of stdout and the tail
//! of stderr. Pipes are read to the end whatever the limits, so a chatty
//! process never blocks on a full pipe, and bytes are turned into text
//! without ever splitting a UTF-8 character.

use tokio::io::{AsyncRead, AsyncReadExt};

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

/// At most the first `limit` bytes of `bytes` as text. A character cut by
/// the limit is left out; invalid bytes become U+FFFD.
pub(crate) fn head_text(bytes: &[u8], limit: usize) -> String {
    let bytes = &bytes[..bytes.len().min(limit)];
    let bytes = &bytes[..bytes.len() - incomplete_suffix_len(bytes)];
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    // Replacement characters are longer than the bytes they replace.
    text.truncate(floor_char_boundary(&text, limit));
    text
}

/// At most the last `limit` bytes of `bytes` as text. A character cut by the
/// limit is left out; invalid bytes become U+FFFD.
pub(crate) fn tail_text(bytes: &[u8], limit: usize) -> String {
    let start = bytes.len().saturating_sub(limit);
    let mut bytes = &bytes[start..];
    if start > 0 {
        // Continuation bytes at the cut belong to a character that was cut.
        let cut = bytes
            .iter()
            .take(3)
            .take_while(|b| is_continuation(**b))
            .count();
        bytes = &bytes[cut..];
    }
    let text = String::from_utf8_lossy(bytes);
    let keep_from = ceil_char_boundary(&text, text.len().saturating_sub(limit));
    text[keep_from..].to_owned()
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
        assert_eq!(tail_text(&tail.into_bytes(), 4), "jklm");
    }

    #[test]
    fn head_text_never_splits_a_character() {
        let text = "a€€";
        // Cut after the first byte of the second euro sign.
        assert_eq!(head_text(text.as_bytes(), 5), "a€");
        assert_eq!(head_text(text.as_bytes(), 7), "a€€");
        assert_eq!(head_text("€".as_bytes(), 1), "");
    }

    #[test]
    fn tail_text_never_splits_a_character() {
        let text = "€€b";
        // The last 6 bytes start inside the first euro sign.
        assert_eq!(tail_text(text.as_bytes(), 6), "€b");
        assert_eq!(tail_text(text.as_bytes(), 7), "€€b");
        assert_eq!(tail_text("€".as_bytes(), 1), "");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters_within_the_limit() {
        let bytes = [b'a', 0xFF, 0xFF, 0xFF, b'b'];
        let head = head_text(&bytes, 4);
        assert!(head.len() <= 4, "{head:?}");
        assert!(head.starts_with("a\u{FFFD}"));
        let tail = tail_text(&bytes, 4);
        assert!(tail.len() <= 4, "{tail:?}");
        assert!(tail.ends_with("\u{FFFD}b"));
    }
}
