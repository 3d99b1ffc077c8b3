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

    /// The length in bytes of the longest value (0 without any): how much
    /// more than it keeps a cut capture must hold for [`Self::apply_within`]
    /// to see whole every value that straddles its cut.
    pub fn longest(&self) -> usize {
        self.values.first().map_or(0, String::len)
    }

    /// `text` with every occurrence of a value replaced by [`MASK`].
    pub fn apply(&self, text: &str) -> String {
        self.apply_within(text, 0..text.len())
    }

    pub fn apply_in_place(&self, text: &mut String) {
        if self.values.iter().any(|v| text.contains(v.as_str())) {
            *text = self.apply(text);
        }
    }

    /// The part `keep` of `text` (byte offsets on character boundaries),
    /// masked as a whole: a value that straddles an edge of `keep` becomes
    /// [`MASK`] inside it, so no piece of it survives the cut. Output is
    /// cut this way because masking only the part kept would leave the
    /// piece of a value the cut went through; `text` must hold at least
    /// [`Self::longest`] bytes beyond each edge that is a cut, so that such
    /// a value is whole in it. The result can be up to two bytes longer
    /// than `keep` (a mask for a value with one or two bytes inside).
    pub fn apply_within(&self, text: &str, keep: std::ops::Range<usize>) -> String {
        let found = self.occurrences(text);
        let mut masked = String::with_capacity(keep.len());
        let mut at = keep.start;
        for value in found
            .iter()
            .filter(|v| v.start < keep.end && v.end > keep.start)
        {
            if value.start > at {
                masked.push_str(&text[at..value.start]);
            }
            masked.push_str(MASK);
            at = at.max(value.end);
        }
        if at < keep.end {
            masked.push_str(&text[at..keep.end]);
        }
        masked
    }

    /// Where values occur in `text`, in order and without overlaps; a longer
    /// value wins over a shorter one it overlaps.
    fn occurrences(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let mut found: Vec<std::ops::Range<usize>> = Vec::new();
        for value in &self.values {
            for (start, _) in text.match_indices(value.as_str()) {
                let range = start..start + value.len();
                if !found
                    .iter()
                    .any(|f| f.start < range.end && range.start < f.end)
                {
                    found.push(range);
                }
            }
        }
        found.sort_by_key(|r| r.start);
        found
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
    fn a_value_straddling_a_cut_is_masked_whole_inside_the_part_kept() {
        let mask = SecretMask::new(["hunter2-token"]);
        let text = "aaaa hunter2-token bbbb hunter2-token cccc";
        // The kept part starts in the first value and ends in the second.
        let start = text.find("2-token").unwrap();
        let end = text.rfind("hunter2").unwrap() + 4;
        assert_eq!(mask.apply_within(text, start..end), "*** bbbb ***");
        // Cut in ordinary text: nothing changes but the values.
        assert_eq!(mask.apply_within(text, 0..4), "aaaa");
        assert_eq!(mask.apply_within(text, 2..24), "aa *** bbbb ");
        assert_eq!(mask.longest(), "hunter2-token".len());
        assert_eq!(SecretMask::default().longest(), 0);
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
