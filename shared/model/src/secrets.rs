//! Masking of known secret values in what a job printed. Vergence never
//! stores a secret it reads, but a job may print one (a failing script
//! echoing its token); like CI systems, whoever knows the values replaces
//! them with `***` before the output is stored, quoted in a reason or shown.

/// What replaces a secret value.
pub const MASK: &str = "***";

/// Values shorter than this are not masked: masking `1` or `on` would
/// garble every line without hiding anything worth hiding. Secrets that
/// short are not secrets; docs/reliability.md says so.
pub const MIN_MASKED_LEN: usize = 4;

/// The secret values of one job, longest first, so a value that contains
/// another is masked whole.
#[derive(Clone, Default)]
pub struct SecretMask {
    values: Vec<String>,
}

impl std::fmt::Debug for SecretMask {
    // Never the values themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretMask({} value(s))", self.values.len())
    }
}

impl SecretMask {
    /// Masks `values` and, for a value of several lines, each line on its
    /// own too: output often quotes a key file or a JSON credential one
    /// line at a time.
    pub fn new<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut kept: Vec<String> = Vec::new();
        for value in values {
            let value = value.as_ref();
            let lines = value.lines().map(str::trim).filter(|l| *l != value.trim());
            for candidate in std::iter::once(value).chain(lines) {
                if candidate.len() >= MIN_MASKED_LEN && !kept.iter().any(|k| k == candidate) {
                    kept.push(candidate.to_owned());
                }
            }
        }
        kept.sort_by_key(|v| std::cmp::Reverse(v.len()));
        Self { values: kept }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every occurrence of a value replaced by [`MASK`].
    pub fn apply(&self, text: &str) -> String {
        let mut masked = text.to_owned();
        self.apply_in_place(&mut masked);
        masked
    }

    pub fn apply_in_place(&self, text: &mut String) {
        for value in &self.values {
            if text.contains(value.as_str()) {
                *text = text.replace(value.as_str(), MASK);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_every_occurrence_longest_value_first() {
        let mask = SecretMask::new(["hunter2-token", "hunter2"]);
        assert_eq!(
            mask.apply("auth hunter2-token failed; retrying with hunter2, hunter2"),
            "auth *** failed; retrying with ***, ***"
        );
    }

    #[test]
    fn masks_each_line_of_a_multi_line_value_and_skips_trivial_values() {
        let mask = SecretMask::new([
            "-----BEGIN KEY-----\nAAAAsecretline\n-----END KEY-----",
            "on",
        ]);
        assert_eq!(
            mask.apply("read AAAAsecretline from it on purpose"),
            "read *** from it on purpose"
        );
        assert!(
            !format!("{mask:?}").contains("AAAA"),
            "Debug never shows a value"
        );
    }
}
