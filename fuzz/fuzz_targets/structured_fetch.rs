//! Fuzzes the structured fetch tier with a fetch job's stdout: what a
//! runtime's program prints is read by `interpret` after it exits 0.
//! Beyond not panicking: the summary is never empty, converged means no
//! object needed a note, the summary grows at most linearly with stdout,
//! and once clipped as the engine stores it it stays within the sentence
//! bound.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vergence_engine::fetch::interpret;
use vergence_model::text::{MAX_SENTENCE_CHARS, sentence};
use vergence_model::{FetchMode, FetchVerdict, JobOutcome, JobResult, Version};

/// Room for the clipped sentence's "… (N more characters)" suffix.
const SUFFIX_CHARS: usize = 40;

fuzz_target!(|data: &[u8]| {
    let stdout = String::from_utf8_lossy(data).into_owned();
    let mut result = JobResult::without_output(JobOutcome::Exited, jiff::Timestamp::UNIX_EPOCH);
    result.exit_code = Some(0);
    result.stdout = stdout;
    let version = Version::parse("svc-1").expect("a valid version");
    let (verdict, summary) = interpret(FetchMode::Structured, &result, &version);

    assert!(!summary.trim().is_empty(), "empty summary, {verdict:?}");
    if verdict == FetchVerdict::Converged {
        assert!(
            summary.starts_with("all "),
            "converged with notes: {summary}"
        );
    }
    // Each object or version costs a few bytes of JSON and adds a clause of
    // bounded size, so the summary is within a constant factor of stdout.
    let chars = summary.chars().count();
    assert!(
        chars <= 8 * result.stdout.len() + 512,
        "{chars} characters of summary from {} bytes",
        result.stdout.len()
    );
    let stored = sentence(summary);
    assert!(stored.chars().count() <= MAX_SENTENCE_CHARS + SUFFIX_CHARS);
});
