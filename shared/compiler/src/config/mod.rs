//! Loading the user's config: a directory of YAML files becomes a content
//! hashed [`ConfigBundle`], and each document in it a typed
//! [`ParsedDocument`] with positions for error messages.

pub mod json_schema;
mod read;
pub mod schema;
pub mod yaml;

pub use read::{ReadOptions, read_dir, read_dir_with};

use std::path::Path;

use schema::DocumentBody;
use vergence_model::{ConfigBundle, ConfigError, Source};

/// Config files larger than this are refused; they are almost certainly not
/// hand-written config.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// One document of the config, typed, with where it came from.
#[derive(Debug)]
pub struct ParsedDocument {
    pub source: Source,
    pub body: DocumentBody,
    /// Directory of the file, relative to the config root ("" at the root);
    /// jobs of runtimes defined here run in it.
    pub dir: String,
}

/// Parses every document of the bundle, collecting all errors. Files in a
/// directory a service names as its Kubernetes manifests, the files it
/// names for an ECS runtime, and `*.json` files are not config documents:
/// they are left out here and read by the checker.
pub fn parse_bundle(bundle: &ConfigBundle) -> (Vec<ParsedDocument>, Vec<ConfigError>) {
    let mut documents = Vec::new();
    let mut errors = Vec::new();
    for (file, text) in &bundle.files {
        // A pushed bundle never went through `read_dir`: held to the same
        // limit here, so the API parses no more than the CLI would.
        if text.len() as u64 > MAX_FILE_BYTES {
            errors.push(ConfigError {
                file: file.clone(),
                line: None,
                path: String::new(),
                message: format!(
                    "is {} bytes; config files are limited to {MAX_FILE_BYTES} bytes",
                    text.len()
                ),
            });
            continue;
        }
        if !file.ends_with(".json") {
            parse_file(file, text, &mut documents, &mut errors);
        }
    }
    // What services name for their content: directories and files.
    let manifest_dirs: Vec<String> = documents
        .iter()
        .flat_map(|document| match &document.body {
            DocumentBody::Service(service) => {
                let file = &document.source.file;
                let manifests = service.kubernetes.iter().map(|k| k.manifests.as_str());
                let ecs = service
                    .ecs
                    .iter()
                    .flat_map(|e| [e.task_definition.as_str(), e.service.as_str()]);
                let cloud_run = service.cloud_run.iter().map(|c| c.service.as_str());
                manifests
                    .chain(ecs)
                    .chain(cloud_run)
                    .filter_map(|raw| manifests_dir(file, raw))
                    .collect()
            }
            _ => Vec::new(),
        })
        .collect();
    let is_manifest = |file: &str| {
        manifest_dirs
            .iter()
            .any(|named| file == named || is_inside(file, named))
    };
    documents.retain(|document| !is_manifest(&document.source.file));
    errors.retain(|error| !is_manifest(&error.file));
    (documents, errors)
}

fn parse_file(
    file: &str,
    text: &str,
    documents: &mut Vec<ParsedDocument>,
    errors: &mut Vec<ConfigError>,
) {
    let dir = Path::new(file)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parsed = match yaml::parse_documents(text) {
        Ok(parsed) => parsed,
        Err((line, message)) => {
            errors.push(ConfigError {
                file: file.to_owned(),
                line: Some(line),
                path: String::new(),
                message: format!("invalid YAML: {message}"),
            });
            return;
        }
    };
    for document in &parsed {
        let collector = yaml::Collector::default();
        let result = yaml::from_document::<DocumentBody>(document, &collector);
        let (unknown, positions) = collector.into_parts(file);
        errors.extend(unknown);
        match result {
            Ok(body) => documents.push(ParsedDocument {
                source: Source {
                    file: file.to_owned(),
                    line: document.line,
                    positions,
                },
                body,
                dir: dir.clone(),
            }),
            Err(e) => errors.push(ConfigError {
                file: file.to_owned(),
                line: e.line.or(Some(document.line)),
                path: e.path.unwrap_or_default(),
                message: document_error_message(&e.message),
            }),
        }
    }
}

/// A service's manifests directory relative to the config root, resolved
/// from the directory of the service's `file`; `None` when it leaves the
/// config directory (only what is inside is pushed with the config).
pub(crate) fn manifests_dir(file: &str, raw: &str) -> Option<String> {
    resolve_in(file.rsplit_once('/').map_or("", |(dir, _)| dir), raw)
}

/// A relative path written in a document, resolved from `base` (a
/// directory relative to the config root, `""` at the top) as the local
/// runner resolves it; `None` when it is absolute, empty or leaves the
/// config directory.
pub(crate) fn resolve_in(base: &str, raw: &str) -> Option<String> {
    if raw.starts_with('/') || raw.trim().is_empty() {
        return None;
    }
    let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(parts.join("/"))
}

/// Whether `file` (relative to the config root) is in `dir` or below it.
pub(crate) fn is_inside(file: &str, dir: &str) -> bool {
    dir.is_empty()
        || file
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The enum error for a top-level document reads better with the kinds spelled out.
fn document_error_message(message: &str) -> String {
    if message.starts_with("expected exactly one of: application, runtime") {
        format!(
            "a document has exactly one top-level key (application, runtime, service or protection); {}",
            message.split("; ").nth(1).unwrap_or(message)
        )
    } else {
        message.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_directories_resolve_from_the_service_file_and_stay_inside() {
        let svc = "services/web.yaml";
        assert_eq!(
            manifests_dir(svc, "k8s/web").as_deref(),
            Some("services/k8s/web")
        );
        assert_eq!(
            manifests_dir(svc, "../k8s/./web/").as_deref(),
            Some("k8s/web")
        );
        assert_eq!(manifests_dir(svc, "../../k8s"), None);
        assert_eq!(manifests_dir(svc, "/etc"), None);
        assert!(is_inside("k8s/web/deploy.yaml", "k8s/web"));
        assert!(is_inside("k8s/web/sub/x.yaml", "k8s/web"));
        assert!(!is_inside("k8s/website/x.yaml", "k8s/web"));
    }

    fn bundle(files: &[(&str, &str)]) -> ConfigBundle {
        ConfigBundle::from_files(
            files
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn parses_every_kind_and_remembers_directories() {
        let b = bundle(&[
            (
                "app.yaml",
                "application:\n  name: shop\n  releaseChannels: [{name: staging}]\n",
            ),
            (
                "runtimes/rt.yaml",
                "runtime:\n  name: rt\n  apply: {taskConfig: {program: {cmd: [./x]}}}\n---\nservice:\n  name: web\n",
            ),
        ]);
        let (docs, errors) = parse_bundle(&b);
        assert!(errors.is_empty(), "{errors:?}");
        let kinds: Vec<(&str, &str, &str)> = docs
            .iter()
            .map(|d| (d.body.kind(), d.body.name(), d.dir.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("application", "shop", ""),
                ("runtime", "rt", "runtimes"),
                ("service", "web", "runtimes")
            ]
        );
    }

    #[test]
    fn reports_errors_from_all_files_and_documents() {
        let b = bundle(&[
            ("a.yaml", "service:\n  name: web\n  drift: x\n"),
            (
                "b.yaml",
                "servce:\n  name: api\n---\nservice: {name: Bad}\n",
            ),
            ("c.yaml", "a: [\n"),
        ]);
        let (_, errors) = parse_bundle(&b);
        let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(rendered.len(), 4, "{rendered:#?}");
        assert!(rendered[0].starts_with("a.yaml:3: service.drift: unknown key 'drift'"));
        assert!(rendered[1].contains("b.yaml:1"), "{}", rendered[1]);
        assert!(
            rendered[1].contains("did you mean 'service'"),
            "{}",
            rendered[1]
        );
        assert!(
            rendered[2].starts_with("b.yaml:4: service.name: name \"Bad\""),
            "{}",
            rendered[2]
        );
        assert!(rendered[3].starts_with("c.yaml:"), "{}", rendered[3]);
    }

    #[test]
    fn two_kinds_in_one_document_is_an_error() {
        let b = bundle(&[("a.yaml", "service: {name: a}\nruntime: {name: b}\n")]);
        let (_, errors) = parse_bundle(&b);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].message.contains("exactly one top-level key"),
            "{}",
            errors[0].message
        );
    }
}
