//! Reads YAML documents (parsed by `saphyr`, with positions) into the typed
//! config schema through serde.
//!
//! A serde deserializer of our own sits between the parsed tree and the
//! schema because serde's stock behaviour does not fit the contract:
//! unknown keys must all be reported (with the nearest valid key) instead of
//! stopping at the first, `snake_case` keys are accepted beside `camelCase`,
//! scalars are typed by the field that receives them (so `version: 1.10`
//! stays "1.10"), and every error carries a field path and a line.
//!
//! Here: splitting a file into documents and reading scalars as written.
//! The deserializer is in `node`, how it walks into lists, mappings and
//! enums in `access`, and its errors in `error`.

mod access;
mod error;
mod node;

use std::borrow::Cow;
use std::cell::RefCell;

use saphyr::{MarkedYamlOwned, ScalarStyle, YamlDataOwned, YamlLoader};
use serde::de;

use vergence_model::{ConfigError, Positions};

use node::NodeDeserializer;

pub use error::DeError;

/// One YAML document of a file.
#[derive(Debug)]
pub struct YamlDocument {
    pub node: MarkedYamlOwned,
    /// 1-based line where the document starts.
    pub line: usize,
}

/// How deeply lists and mappings may nest. The config's deepest legitimate
/// nesting is about 10; a file nested thousands deep is an attack on the
/// stack (the tree is built, read and dropped recursively), refused before
/// any tree is built.
pub const MAX_DEPTH: usize = 64;

/// Splits a file into its documents. Empty documents (a trailing `---`) are
/// dropped. A syntax error, or nesting deeper than [`MAX_DEPTH`], is
/// reported with its line.
pub fn parse_documents(text: &str) -> Result<Vec<YamlDocument>, (usize, String)> {
    let protected = protect_templates(text);
    check_depth(&protected)?;
    let mut loader: YamlLoader<MarkedYamlOwned> = YamlLoader::default();
    // Scalars stay as written; the schema decides their type.
    loader.early_parse(false);
    let mut parser = saphyr_parser::Parser::new_from_str(&protected);
    let loaded = parser.load(&mut loader, true);
    let scan_error = loaded.err().or_else(|| loader.error().cloned());
    if let Some(error) = scan_error {
        return Err((error.marker().line(), error.info().to_owned()));
    }
    Ok(loader
        .into_documents()
        .into_iter()
        .filter(|node| !is_null(node) && !matches!(node.data, YamlDataOwned::BadValue))
        .map(|node| YamlDocument {
            line: node.span.start.line(),
            node,
        })
        .collect())
}

/// Walks the parser's events, without building anything, and refuses
/// nesting deeper than [`MAX_DEPTH`] at the line where it goes too deep.
/// Syntax errors are left to the real parse, which reports them.
fn check_depth(text: &str) -> Result<(), (usize, String)> {
    let mut depth = 0usize;
    for event in saphyr_parser::Parser::new_from_str(text) {
        let Ok((event, span)) = event else {
            return Ok(());
        };
        match event {
            saphyr_parser::Event::SequenceStart(..) | saphyr_parser::Event::MappingStart(..) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err((
                        span.start.line(),
                        format!(
                            "lists and mappings nest more than {MAX_DEPTH} levels deep here; a config never needs that"
                        ),
                    ));
                }
            }
            saphyr_parser::Event::SequenceEnd | saphyr_parser::Event::MappingEnd => {
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Stand-ins for the braces of `{{.Params.x}}`-style templates while parsing.
const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';

/// Hides the braces of template expressions from the YAML parser.
///
/// The config contract writes templates unquoted inside flow sequences
/// (`cmd: [./do-apply, --service={{.Params.service}}]`), where strict YAML
/// reads `{` as the start of a mapping. A `{{` followed by `.` and closed by
/// `}}` on the same line is never valid YAML structure, so it is safe to
/// swap those braces for private-use characters (one for one, keeping
/// columns) and swap them back in every scalar read.
fn protect_templates(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            let after = &rest[start + 2..];
            let is_template = after.trim_start().starts_with('.');
            match after.find("}}") {
                Some(end) if is_template => {
                    out.push_str(&rest[..start]);
                    out.extend([OPEN, OPEN]);
                    out.push_str(&after[..end]);
                    out.extend([CLOSE, CLOSE]);
                    rest = &after[end + 2..];
                }
                _ => {
                    out.push_str(&rest[..start + 2]);
                    rest = after;
                }
            }
        }
        out.push_str(rest);
    }
    out
}

fn restore_templates(raw: &str) -> Cow<'_, str> {
    if raw.contains([OPEN, CLOSE]) {
        Cow::Owned(raw.replace(OPEN, "{").replace(CLOSE, "}"))
    } else {
        Cow::Borrowed(raw)
    }
}

/// Errors and positions gathered while reading one document.
#[derive(Debug, Default)]
pub struct Collector {
    pub unknown_keys: RefCell<Vec<(String, usize, String)>>,
    pub positions: RefCell<Positions>,
}

impl Collector {
    /// Turns what was gathered into config errors for `file`.
    pub fn into_parts(self, file: &str) -> (Vec<ConfigError>, Positions) {
        let mut unknown = self.unknown_keys.into_inner();
        unknown.sort_by_key(|(_, line, _)| *line);
        let errors = unknown
            .into_iter()
            .map(|(path, line, message)| ConfigError {
                file: file.to_owned(),
                line: Some(line),
                path,
                message,
            })
            .collect();
        (errors, self.positions.into_inner())
    }
}

/// Deserializes `T` from a document; unknown keys and positions go to the
/// collector, the first hard error (wrong type, missing key) is returned.
pub fn from_document<'de, T: de::Deserialize<'de>>(
    document: &YamlDocument,
    collector: &Collector,
) -> Result<T, DeError> {
    let de = NodeDeserializer {
        node: &document.node,
        path: String::new(),
        collector,
    };
    T::deserialize(de).map_err(|e: DeError| e.locate("", document.line))
}

/// Converts `snake_case` to `camelCase`; keys written either way are accepted.
pub fn snake_to_camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn is_null(node: &MarkedYamlOwned) -> bool {
    match &node.data {
        YamlDataOwned::Representation(raw, ScalarStyle::Plain, _) => {
            matches!(raw.as_str(), "" | "~" | "null" | "Null" | "NULL")
        }
        YamlDataOwned::Tagged(_, inner) => is_null(inner),
        _ => false,
    }
}

/// A scalar as written, with whether it was plain (unquoted).
fn scalar(node: &MarkedYamlOwned) -> Option<(Cow<'_, str>, bool)> {
    match &node.data {
        YamlDataOwned::Representation(raw, style, _) => {
            Some((restore_templates(raw), *style == ScalarStyle::Plain))
        }
        YamlDataOwned::Tagged(_, inner) => scalar(inner),
        _ => None,
    }
}

fn strip_tags(node: &MarkedYamlOwned) -> &MarkedYamlOwned {
    match &node.data {
        YamlDataOwned::Tagged(_, inner) => strip_tags(inner),
        _ => node,
    }
}

fn line_of(node: &MarkedYamlOwned) -> usize {
    node.span.start.line()
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

fn parse_bool(raw: &str) -> Option<bool> {
    match raw {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

fn parse_int(raw: &str) -> Option<i64> {
    let cleaned = raw.strip_prefix('+').unwrap_or(raw);
    if let Some(hex) = cleaned.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    if let Some(oct) = cleaned.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok();
    }
    cleaned.parse().ok()
}

#[cfg(test)]
mod tests;

/// Reads a file of Kubernetes manifests into JSON values, scalars typed as
/// YAML 1.2 types them (`replicas: 2` is a number, `"2"` a string). Empty
/// documents are dropped. A syntax error, too deep a nesting or a key that
/// is not a string is reported with its line.
pub fn parse_json_documents(text: &str) -> Result<Vec<serde_json::Value>, (usize, String)> {
    use saphyr::LoadableYamlNode;
    check_depth(text)?;
    let documents = MarkedYamlOwned::load_from_str(text)
        .map_err(|e| (e.marker().line(), e.info().to_owned()))?;
    documents
        .iter()
        .filter(|node| {
            !is_null(node)
                && !matches!(
                    node.data,
                    YamlDataOwned::Value(saphyr::ScalarOwned::Null) | YamlDataOwned::BadValue
                )
        })
        .map(to_json)
        .collect()
}

fn to_json(node: &MarkedYamlOwned) -> Result<serde_json::Value, (usize, String)> {
    use saphyr::ScalarOwned;
    use serde_json::Value;
    let line = node.span.start.line();
    Ok(match &node.data {
        YamlDataOwned::Value(scalar) => match scalar {
            ScalarOwned::Null => Value::Null,
            ScalarOwned::Boolean(b) => Value::Bool(*b),
            ScalarOwned::Integer(i) => Value::from(*i),
            ScalarOwned::FloatingPoint(f) => serde_json::Number::from_f64(f.into_inner())
                .map(Value::Number)
                .ok_or_else(|| (line, format!("{} is not a number JSON can carry", f)))?,
            ScalarOwned::String(s) => Value::String(s.clone()),
        },
        YamlDataOwned::Representation(raw, _, _) => Value::String(raw.clone()),
        YamlDataOwned::Sequence(items) => {
            Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?)
        }
        YamlDataOwned::Mapping(entries) => {
            let mut map = serde_json::Map::new();
            for (key, value) in entries {
                let key_line = key.span.start.line();
                let Value::String(key) = to_json(key)? else {
                    return Err((key_line, "mapping keys must be strings".to_owned()));
                };
                map.insert(key, to_json(value)?);
            }
            Value::Object(map)
        }
        YamlDataOwned::Tagged(_, inner) => to_json(inner)?,
        YamlDataOwned::Alias(_) | YamlDataOwned::BadValue => {
            return Err((
                line,
                "a value YAML cannot resolve (a bad alias?)".to_owned(),
            ));
        }
    })
}
