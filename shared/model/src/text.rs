//! Bounds on the sentences Vergence keeps and shows. A reason or an event
//! message is built from what a job reported (one clause per fetched
//! object, a tool's error text) and is copied into the instance, its
//! events, `status`, `explain` and the API: without a bound, one runtime
//! printing a huge report makes every one of those huge.

/// The most characters kept of an instance's reason or an event's message.
pub const MAX_SENTENCE_CHARS: usize = 2_000;

/// `text` cut to at most `max` characters (never inside one), saying how
/// much was left out. Text within the bound is returned as it is.
pub fn clip(text: String, max: usize) -> String {
    // No more bytes than `max` means no more characters either: nearly
    // every sentence, and none of them needs walking character by character.
    if text.len() <= max {
        return text;
    }
    let Some((cut, _)) = text.char_indices().nth(max) else {
        return text;
    };
    let dropped = text[cut..].chars().count();
    let mut kept = text;
    kept.truncate(cut);
    kept.push_str(&format!("… ({dropped} more characters)"));
    kept
}

/// [`clip`] at [`MAX_SENTENCE_CHARS`].
pub fn sentence(text: impl Into<String>) -> String {
    clip(text.into(), MAX_SENTENCE_CHARS)
}

/// Durations as people say them: `4m`, `1h 30m`, `45s`.
pub fn human(duration: jiff::SignedDuration) -> String {
    let secs = duration.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

/// An error and its sources, `: `-separated: an HTTP client's own message
/// ("error sending request") does not say that the connection was refused.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_as_it_is() {
        assert_eq!(clip("abc".into(), 3), "abc");
        assert_eq!(sentence("waiting for approval"), "waiting for approval");
    }

    #[test]
    fn long_text_is_cut_and_says_how_much_was_left_out() {
        assert_eq!(clip("abcdef".into(), 2), "ab… (4 more characters)");
        let long = sentence("x".repeat(244_924));
        assert!(long.starts_with(&"x".repeat(MAX_SENTENCE_CHARS)));
        assert!(long.ends_with("… (242924 more characters)"), "{long}");
    }

    #[test]
    fn never_cuts_inside_a_character() {
        assert_eq!(clip("ééé".into(), 1), "é… (2 more characters)");
    }
}
