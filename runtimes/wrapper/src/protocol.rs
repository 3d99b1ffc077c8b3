//! The container protocol as the wrapper reads it from its environment:
//! where inputs and outputs go, and the URLs to fetch and keep them.
//!
//! The names and limits are `vergence-container`'s and `vergence-model`'s,
//! repeated here so the binary depends on neither; the tests check that
//! they are equal.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::WrapperError;

/// Where the job finds its input files.
pub const INPUT_DIR: &str = "VERGENCE_INPUT_DIR";
/// Where the job writes its declared output files.
pub const OUTPUT_DIR: &str = "VERGENCE_OUTPUT_DIR";
/// JSON object: input file name → URL to GET it from.
pub const INPUT_URLS: &str = "VERGENCE_INPUT_URLS";
/// JSON object: declared output name → URL to PUT it to.
pub const OUTPUT_URLS: &str = "VERGENCE_OUTPUT_URLS";
/// URL to PUT the command's standard output to.
pub const STDOUT_URL: &str = "VERGENCE_STDOUT_URL";
/// URL to PUT the command's standard error to.
pub const STDERR_URL: &str = "VERGENCE_STDERR_URL";

/// URL to PUT how the command ended to, last (the Lambda runner's).
pub const RESULT_URL: &str = "VERGENCE_RESULT_URL";

/// The variables holding URLs: credentials, which the command never sees.
pub const URL_VARIABLES: [&str; 5] = [INPUT_URLS, OUTPUT_URLS, STDOUT_URL, STDERR_URL, RESULT_URL];

/// Where inputs and outputs are when the runner did not say.
pub const DEFAULT_INPUT_DIR: &str = "/tmp/vergence/input";
pub const DEFAULT_OUTPUT_DIR: &str = "/tmp/vergence/output";

/// Most of stdout kept: what a result holds (`JobResult::MAX_STDOUT`).
pub const MAX_STDOUT: usize = 1024 * 1024;
/// The end of stderr kept (`JobResult::STDERR_TAIL`).
pub const STDERR_TAIL: usize = 4096;
/// Largest output uploaded: a plan, not a build artifact (as locally).
pub const MAX_OUTPUT_BYTES: u64 = 4 * 1024 * 1024;

/// What the runner asked of the wrapper.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Protocol {
    /// Set when there is an input directory to create.
    pub input_dir: Option<PathBuf>,
    pub output_dir: Option<PathBuf>,
    pub input_urls: BTreeMap<String, String>,
    pub output_urls: BTreeMap<String, String>,
    pub stdout_url: Option<String>,
    pub stderr_url: Option<String>,
    pub result_url: Option<String>,
}

impl std::fmt::Debug for Protocol {
    // The URLs are credentials; only the file names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protocol")
            .field("input_dir", &self.input_dir)
            .field("output_dir", &self.output_dir)
            .field("inputs", &self.input_urls.keys().collect::<Vec<_>>())
            .field("outputs", &self.output_urls.keys().collect::<Vec<_>>())
            .field("stdout", &self.stdout_url.is_some())
            .field("stderr", &self.stderr_url.is_some())
            .field("result", &self.result_url.is_some())
            .finish()
    }
}

impl Protocol {
    /// Reads the protocol from `var` (the environment, in the binary).
    pub fn read(var: impl Fn(&str) -> Option<String>) -> Result<Self, WrapperError> {
        let input_urls = url_map(INPUT_URLS, var(INPUT_URLS))?;
        let output_urls = url_map(OUTPUT_URLS, var(OUTPUT_URLS))?;
        let dir = |name: &str, default: &str, needed: bool| {
            var(name)
                .filter(|dir| !dir.is_empty())
                .or_else(|| needed.then(|| default.to_owned()))
                .map(PathBuf::from)
        };
        Ok(Self {
            input_dir: dir(INPUT_DIR, DEFAULT_INPUT_DIR, !input_urls.is_empty()),
            output_dir: dir(OUTPUT_DIR, DEFAULT_OUTPUT_DIR, !output_urls.is_empty()),
            input_urls,
            output_urls,
            stdout_url: var(STDOUT_URL).filter(|url| !url.is_empty()),
            stderr_url: var(STDERR_URL).filter(|url| !url.is_empty()),
            result_url: var(RESULT_URL).filter(|url| !url.is_empty()),
        })
    }
}

/// A JSON object of file names to URLs; absent or empty is no files.
fn url_map(name: &str, json: Option<String>) -> Result<BTreeMap<String, String>, WrapperError> {
    let Some(json) = json.filter(|json| !json.trim().is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let invalid = |reason: String| WrapperError::Protocol {
        variable: name.to_owned(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_str(&json).map_err(|e| invalid(format!("not JSON ({e})")))?;
    let object = value
        .as_object()
        .ok_or_else(|| invalid("not a JSON object".to_owned()))?;
    let mut urls = BTreeMap::new();
    for (file, url) in object {
        check_file_name(file).map_err(&invalid)?;
        let url = url
            .as_str()
            .ok_or_else(|| invalid(format!("the URL of {file} is not a string")))?;
        urls.insert(file.clone(), url.to_owned());
    }
    Ok(urls)
}

/// File names come from the runner, but a name with a path in it would
/// read or write outside the job's directories all the same.
pub fn check_file_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        Err(format!("file name {name:?} is not a plain file name"))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Protocol, WrapperError> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Protocol::read(|name| vars.get(name).cloned())
    }

    #[test]
    fn names_and_limits_are_those_of_vergence_container_and_the_model() {
        use vergence_container::env;
        assert_eq!(INPUT_DIR, env::INPUT_DIR);
        assert_eq!(OUTPUT_DIR, env::OUTPUT_DIR);
        assert_eq!(INPUT_URLS, env::INPUT_URLS);
        assert_eq!(OUTPUT_URLS, env::OUTPUT_URLS);
        assert_eq!(STDOUT_URL, env::STDOUT_URL);
        assert_eq!(STDERR_URL, env::STDERR_URL);
        assert_eq!(RESULT_URL, env::RESULT_URL);
        assert_eq!(DEFAULT_INPUT_DIR, vergence_container::CONTAINER_INPUT_DIR);
        assert_eq!(DEFAULT_OUTPUT_DIR, vergence_container::CONTAINER_OUTPUT_DIR);
        assert_eq!(MAX_STDOUT, vergence_model::JobResult::MAX_STDOUT);
        assert_eq!(STDERR_TAIL, vergence_model::JobResult::STDERR_TAIL);
    }

    #[test]
    fn urls_without_directories_use_the_container_defaults() {
        let protocol = read(&[
            (INPUT_URLS, r#"{"plan.bin": "http://store/in"}"#),
            (STDOUT_URL, "http://store/out"),
        ])
        .unwrap();
        assert_eq!(protocol.input_dir, Some(PathBuf::from(DEFAULT_INPUT_DIR)));
        assert_eq!(protocol.output_dir, None);
        assert_eq!(protocol.input_urls["plan.bin"], "http://store/in");
        assert_eq!(protocol.stdout_url.as_deref(), Some("http://store/out"));
        assert_eq!(read(&[]).unwrap(), Protocol::default());
    }

    #[test]
    fn malformed_url_maps_are_refused_naming_the_variable() {
        for (json, reason) in [
            ("[1]", "not a JSON object"),
            (r#"{"../x": "http://a"}"#, "not a plain file name"),
            (r#"{"x": 1}"#, "the URL of x is not a string"),
            ("{", "not JSON"),
        ] {
            let error = read(&[(OUTPUT_URLS, json)]).unwrap_err().to_string();
            assert!(error.starts_with("VERGENCE_OUTPUT_URLS is "), "{error}");
            assert!(error.contains(reason), "{error}");
        }
    }
}
