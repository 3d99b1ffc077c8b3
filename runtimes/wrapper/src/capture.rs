//! Bounded copies of the command's streams: the head of stdout and the
//! tail of stderr, cut so that no UTF-8 character is split.

/// Keeps the first `limit` bytes.
#[derive(Debug)]
pub struct Head {
    bytes: Vec<u8>,
    limit: usize,
}

impl Head {
    pub fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        let room = self.limit.saturating_sub(self.bytes.len());
        self.bytes
            .extend_from_slice(&chunk[..room.min(chunk.len())]);
    }

    /// The bytes kept, without a character cut at the limit.
    pub fn bytes(&self) -> Vec<u8> {
        let mut bytes = self.bytes.clone();
        if bytes.len() == self.limit {
            bytes.truncate(bytes.len() - incomplete_suffix_len(&bytes));
        }
        bytes
    }
}

/// Keeps the last `limit` bytes.
#[derive(Debug)]
pub struct Tail {
    bytes: Vec<u8>,
    limit: usize,
    /// Whether bytes were dropped from the front.
    cut: bool,
}

impl Tail {
    pub fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
            cut: false,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        // Dropping the front only once the buffer holds twice the limit
        // keeps the cost linear in the bytes read, however small the chunks.
        if self.bytes.len() >= 2 * self.limit.max(1) {
            self.drop_front();
        }
    }

    /// The last `limit` bytes kept, without a character cut at the front.
    pub fn bytes(&self) -> Vec<u8> {
        let start = self.bytes.len().saturating_sub(self.limit);
        let mut bytes = &self.bytes[start..];
        if start > 0 || self.cut {
            let continuation = bytes
                .iter()
                .take(3)
                .take_while(|b| is_continuation(**b))
                .count();
            bytes = &bytes[continuation..];
        }
        bytes.to_vec()
    }

    fn drop_front(&mut self) {
        let excess = self.bytes.len().saturating_sub(self.limit);
        self.bytes.drain(..excess);
        self.cut = true;
    }
}

fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// How many bytes at the end of `bytes` start a character whose remaining
/// bytes are missing.
fn incomplete_suffix_len(bytes: &[u8]) -> usize {
    for start in (bytes.len().saturating_sub(4)..bytes.len()).rev() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_keeps_the_first_bytes_without_a_cut_character() {
        let mut head = Head::new(5);
        head.push("a€".as_bytes());
        head.push("€".as_bytes());
        assert_eq!(head.bytes(), "a€".as_bytes(), "the second € was cut");
        let mut exact = Head::new(7);
        exact.push("a€€x".as_bytes());
        assert_eq!(exact.bytes(), "a€€".as_bytes());
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_without_a_cut_character() {
        let mut tail = Tail::new(4);
        for chunk in ["ab", "cdefghij", "k", "l€"] {
            tail.push(chunk.as_bytes());
        }
        assert_eq!(tail.bytes(), "l€".as_bytes());
        let mut short = Tail::new(4);
        short.push(b"ab");
        assert_eq!(short.bytes(), b"ab");
    }
}
