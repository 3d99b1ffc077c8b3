//! The job's files around the command: its inputs downloaded before, its
//! declared outputs and its streams uploaded after.

use std::io::Read;
use std::path::Path;

use crate::WrapperError;
use crate::capture::Tail;
use crate::child::Finished;
use crate::protocol::{MAX_OUTPUT_BYTES, Protocol, STDERR_TAIL};
use crate::transfer::Transfer;

/// Creates the input and output directories and downloads every input.
pub fn prepare(protocol: &Protocol, transfer: &Transfer) -> Result<(), WrapperError> {
    for dir in [&protocol.input_dir, &protocol.output_dir]
        .into_iter()
        .flatten()
    {
        std::fs::create_dir_all(dir).map_err(|source| WrapperError::CreateDir {
            path: dir.display().to_string(),
            source,
        })?;
    }
    let Some(input_dir) = &protocol.input_dir else {
        return Ok(());
    };
    for (name, url) in &protocol.input_urls {
        transfer
            .download(url, &input_dir.join(name))
            .map_err(|reason| WrapperError::Download {
                name: name.clone(),
                reason,
            })?;
    }
    Ok(())
}

/// Uploads `error` as the job's stderr (and an empty stdout, which tells
/// the runner the streams came from the wrapper), best effort: the wrapper
/// fails anyway, and its own stderr has the message.
pub fn report_early_failure(protocol: &Protocol, transfer: &Transfer, error: &WrapperError) {
    let (Some(stdout_url), Some(stderr_url)) = (&protocol.stdout_url, &protocol.stderr_url) else {
        return;
    };
    let message = format!("vergence-wrapper: {error}\n");
    if transfer.upload(stderr_url, message.as_bytes()).is_ok() {
        let _ = transfer.upload(stdout_url, b"");
    }
}

/// Uploads the declared outputs found in the output directory, then
/// stderr (with the wrapper's notes at its end), then stdout: stdout last,
/// because the runner takes its presence to mean that the streams are the
/// wrapper's, complete. Every upload is tried; any failure fails the job.
pub fn upload(
    protocol: &Protocol,
    transfer: &Transfer,
    finished: Finished,
) -> Result<(), WrapperError> {
    let Finished {
        exit_code,
        stdout,
        stderr,
        mut notes,
    } = finished;
    let mut failures = Vec::new();
    if let Some(dir) = &protocol.output_dir {
        for (name, url) in &protocol.output_urls {
            match read_capped(&dir.join(name)) {
                Ok(Some(content)) => {
                    if let Err(e) = transfer.upload(url, &content) {
                        failures.push(format!("output {name} to {e}"));
                    }
                }
                Ok(None) => notes.push(format!(
                    "vergence-wrapper: output {name} is larger than 4 MiB; it was not kept"
                )),
                // A declared output the command did not write is simply absent.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => notes.push(format!(
                    "vergence-wrapper: output {name} could not be read: {e}"
                )),
            }
        }
    }
    notes.extend(
        failures
            .iter()
            .map(|failure| format!("vergence-wrapper: cannot upload {failure}")),
    );
    let stderr = with_notes(&stderr, &notes);
    let mut streams_complete = true;
    if let Some(url) = &protocol.stderr_url
        && let Err(e) = transfer.upload(url, &stderr)
    {
        failures.push(format!("stderr to {e}"));
        streams_complete = false;
    }
    // Without its stderr, the runner is better off reading the platform's logs.
    if let Some(url) = &protocol.stdout_url
        && streams_complete
        && let Err(e) = transfer.upload(url, &stdout.bytes())
    {
        failures.push(format!("stdout to {e}"));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(WrapperError::Upload {
            exit_code,
            failures,
        })
    }
}

/// The tail of stderr with each note as a line of its own at its end,
/// where a job's failure reason is looked for. Notes also go to the
/// wrapper's own stderr, for the platform's logs.
fn with_notes(stderr: &Tail, notes: &[String]) -> Vec<u8> {
    let mut bytes = stderr.bytes();
    if notes.is_empty() {
        return bytes;
    }
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        bytes.push(b'\n');
    }
    for note in notes {
        eprintln!("{note}");
        bytes.extend_from_slice(note.as_bytes());
        bytes.push(b'\n');
    }
    let mut tail = Tail::new(STDERR_TAIL);
    tail.push(&bytes);
    tail.bytes()
}

/// The file's content, or `None` when it is larger than [`MAX_OUTPUT_BYTES`].
fn read_capped(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let mut content = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_OUTPUT_BYTES + 1)
        .read_to_end(&mut content)?;
    let too_large = u64::try_from(content.len()).map_or(true, |len| len > MAX_OUTPUT_BYTES);
    Ok((!too_large).then_some(content))
}
