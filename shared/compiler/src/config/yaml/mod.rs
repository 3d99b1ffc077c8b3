//! Reads YAML documents (parsed by `saphyr`, with positions) into the typed
//! config schema through serde.
//!
//! A serde deserializer of our own sits between the parsed tree and the
//! schema because serde's stock behaviour does not fit the contract:
//! unknown keys must all be reported (with the nearest valid key) instead of
//! stopping at the first, `snake_case` keys are accepted beside `camelCase`,
//! scalars are typed by the field that receives them (so `version: 1.10`
//! stays "1.10"), and every error carries a field path and a line.

mod access;
mod error;

use std::borrow::Cow;
use std::cell::RefCell;

use saphyr::{MarkedYamlOwned, ScalarStyle, YamlDataOwned, YamlLoader};
use serde::de::{self, IntoDeserializer, Visitor};

use vergence_model::diagnostics::suggest;
use vergence_model::{ConfigError, Positions};

use access::{EnumAccess, MapAccess, SeqAccess};

pub use error::DeError;

/// One YAML document of a file.
#[derive(Debug)]
pub struct YamlDocument {
    pub node: MarkedYamlOwned,
    /// 1-based line where the document starts.
    pub line: usize,
}

/// Splits a file into its documents. Empty documents (a trailing `---`) are
/// dropped. A syntax error is reported with its line.
pub fn parse_documents(text: &str) -> Result<Vec<YamlDocument>, (usize, String)> {
    let mut loader: YamlLoader<MarkedYamlOwned> = YamlLoader::default();
    // Scalars stay as written; the schema decides their type.
    loader.early_parse(false);
    let protected = protect_templates(text);
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

struct NodeDeserializer<'a> {
    node: &'a MarkedYamlOwned,
    path: String,
    collector: &'a Collector,
}

impl<'a> NodeDeserializer<'a> {
    /// A deserializer for a child node; `line` is where the child is written
    /// (its key's line for mapping entries), recorded for later errors.
    fn child(&self, node: &'a MarkedYamlOwned, path: String, line: usize) -> NodeDeserializer<'a> {
        self.collector.positions.borrow_mut().record(&path, line);
        NodeDeserializer {
            node,
            path,
            collector: self.collector,
        }
    }

    fn line(&self) -> usize {
        line_of(self.node)
    }

    fn fail(&self, message: impl Into<String>) -> DeError {
        DeError::at(&self.path, self.line(), message)
    }

    fn kind(&self) -> String {
        let node = strip_tags(self.node);
        match &node.data {
            YamlDataOwned::Mapping(_) => "a mapping".to_owned(),
            YamlDataOwned::Sequence(_) => "a list".to_owned(),
            _ if is_null(node) => "nothing".to_owned(),
            _ => match scalar(node) {
                Some((raw, _)) => format!("{raw:?}"),
                None => "an unreadable value".to_owned(),
            },
        }
    }

    fn expect_scalar(&self, what: &str) -> Result<(Cow<'a, str>, bool), DeError> {
        if is_null(self.node) {
            return Err(self.fail(format!("expected {what}, found nothing")));
        }
        scalar(self.node)
            .ok_or_else(|| self.fail(format!("expected {what}, found {}", self.kind())))
    }

    fn integer(&self) -> Result<i64, DeError> {
        let (raw, _) = self.expect_scalar("an integer")?;
        parse_int(&raw).ok_or_else(|| self.fail(format!("expected an integer, found {raw:?}")))
    }

    fn mapping(
        &self,
    ) -> Result<Option<&'a saphyr::AnnotatedMappingOwned<MarkedYamlOwned>>, DeError> {
        let node = strip_tags(self.node);
        match &node.data {
            YamlDataOwned::Mapping(map) => Ok(Some(map)),
            _ if is_null(node) => Ok(None),
            _ => Err(self.fail(format!("expected a mapping, found {}", self.kind()))),
        }
    }

    fn key_text(&self, key: &'a MarkedYamlOwned) -> Result<Cow<'a, str>, DeError> {
        scalar(key)
            .map(|(raw, _)| raw)
            .ok_or_else(|| DeError::at(&self.path, line_of(key), "mapping keys must be plain text"))
    }
}

macro_rules! deserialize_integer {
    ($($method:ident => $visit:ident: $ty:ty),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
                let value = self.integer()?;
                let narrowed = <$ty>::try_from(value).map_err(|_| {
                    self.fail(format!("{value} is out of range for this field"))
                })?;
                visitor.$visit(narrowed).map_err(|e: DeError| e.locate(&self.path, self.line()))
            }
        )*
    };
}

impl<'de, 'a> de::Deserializer<'de> for NodeDeserializer<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let node = strip_tags(self.node);
        let result = match &node.data {
            YamlDataOwned::Mapping(_) => return self.deserialize_map(visitor),
            YamlDataOwned::Sequence(_) => return self.deserialize_seq(visitor),
            _ if is_null(node) => visitor.visit_unit(),
            _ => match scalar(node) {
                Some((raw, true)) => {
                    if let Some(b) = parse_bool(&raw) {
                        visitor.visit_bool(b)
                    } else if let Some(i) = parse_int(&raw) {
                        visitor.visit_i64(i)
                    } else if let Ok(f) = raw.parse::<f64>() {
                        visitor.visit_f64(f)
                    } else {
                        visitor.visit_str(&raw)
                    }
                }
                Some((raw, false)) => visitor.visit_str(&raw),
                None => return Err(self.fail("this value cannot be read")),
            },
        };
        result.map_err(|e: DeError| e.locate(&self.path, self.line()))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let (raw, _) = self.expect_scalar("true or false")?;
        let value = parse_bool(&raw)
            .ok_or_else(|| self.fail(format!("expected true or false, found {raw:?}")))?;
        visitor
            .visit_bool(value)
            .map_err(|e: DeError| e.locate(&self.path, self.line()))
    }

    deserialize_integer! {
        deserialize_i8 => visit_i8: i8,
        deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32,
        deserialize_i64 => visit_i64: i64,
        deserialize_u8 => visit_u8: u8,
        deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32,
        deserialize_u64 => visit_u64: u64,
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let (raw, _) = self.expect_scalar("a number")?;
        let value: f64 = raw
            .parse()
            .map_err(|_| self.fail(format!("expected a number, found {raw:?}")))?;
        visitor
            .visit_f64(value)
            .map_err(|e: DeError| e.locate(&self.path, self.line()))
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let (raw, _) = self.expect_scalar("text")?;
        visitor
            .visit_str(&raw)
            .map_err(|e: DeError| e.locate(&self.path, self.line()))
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, DeError> {
        Err(self.fail("binary values are not supported"))
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if is_null(self.node) {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if is_null(self.node) {
            visitor.visit_unit()
        } else {
            Err(self.fail(format!("expected nothing, found {}", self.kind())))
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let node = strip_tags(self.node);
        let items: &[MarkedYamlOwned] = match &node.data {
            YamlDataOwned::Sequence(items) => items,
            // An empty value reads as an empty list: `parameters:` with nothing under it.
            _ if is_null(node) => &[],
            _ => return Err(self.fail(format!("expected a list, found {}", self.kind()))),
        };
        let access = SeqAccess {
            parent: &self,
            items: items.iter().enumerate(),
        };
        visitor
            .visit_seq(access)
            .map_err(|e: DeError| e.locate(&self.path, self.line()))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let entries = match self.mapping()? {
            Some(map) => map
                .iter()
                .map(|(k, v)| Ok((self.key_text(k)?.into_owned(), line_of(k), v)))
                .collect::<Result<Vec<_>, DeError>>()?,
            None => Vec::new(),
        };
        let access = MapAccess {
            parent: &self,
            entries: entries.into_iter(),
            pending: None,
        };
        visitor
            .visit_map(access)
            .map_err(|e: DeError| e.locate(&self.path, self.line()))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let mut entries: Vec<(String, usize, &MarkedYamlOwned)> = Vec::new();
        if let Some(map) = self.mapping()? {
            for (key_node, value) in map {
                let raw = self.key_text(key_node)?;
                let key = if fields.contains(&raw.as_ref()) {
                    raw.into_owned()
                } else {
                    let camel = snake_to_camel(&raw);
                    if !fields.contains(&camel.as_str()) {
                        self.report_unknown_key(&raw, line_of(key_node), fields);
                        continue;
                    }
                    camel
                };
                if entries.iter().any(|(k, _, _)| *k == key) {
                    return Err(DeError::at(
                        &child_path(&self.path, &key),
                        line_of(key_node),
                        format!("'{key}' is given twice (once in snake_case)"),
                    ));
                }
                entries.push((key, line_of(key_node), value));
            }
        }
        let access = MapAccess {
            parent: &self,
            entries: entries.into_iter(),
            pending: None,
        };
        visitor
            .visit_map(access)
            .map_err(|e: DeError| e.locate(&self.path, self.line()))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let resolve = |raw: &str, line: usize| -> Result<String, DeError> {
            if variants.contains(&raw) {
                return Ok(raw.to_owned());
            }
            let camel = snake_to_camel(raw);
            if variants.contains(&camel.as_str()) {
                return Ok(camel);
            }
            let hint = suggest(raw, variants.iter().copied())
                .map(|s| format!(" (did you mean '{s}'?)"))
                .unwrap_or_default();
            Err(DeError::at(
                &self.path,
                line,
                format!(
                    "unknown value '{raw}'{hint}; expected one of: {}",
                    variants.join(", ")
                ),
            ))
        };
        if let Some(map) = self.mapping().ok().flatten() {
            let keys: Vec<&MarkedYamlOwned> = map.keys().collect();
            if keys.len() != 1 {
                let found: Vec<String> = keys
                    .iter()
                    .filter_map(|k| scalar(k).map(|s| s.0.into_owned()))
                    .collect();
                return Err(self.fail(format!(
                    "expected exactly one of: {}; found {}",
                    variants.join(", "),
                    if found.is_empty() {
                        "none".to_owned()
                    } else {
                        found.join(", ")
                    }
                )));
            }
            let Some((key_node, value)) = map.iter().next() else {
                return Err(self.fail("expected a value"));
            };
            let variant = resolve(&self.key_text(key_node)?, line_of(key_node))?;
            let path = child_path(&self.path, &variant);
            let content = self.child(value, path, line_of(key_node));
            return visitor
                .visit_enum(EnumAccess { variant, content })
                .map_err(|e: DeError| e.locate(&self.path, self.line()));
        }
        let (raw, _) = self.expect_scalar(&format!("one of: {}", variants.join(", ")))?;
        let variant = resolve(&raw, self.line())?;
        visitor
            .visit_enum(variant.into_deserializer())
            .map_err(|e: DeError| e.locate(&self.path, self.line()))
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }
}

impl NodeDeserializer<'_> {
    fn report_unknown_key(&self, key: &str, line: usize, fields: &[&str]) {
        let hint = suggest(key, fields.iter().copied())
            .map(|s| format!("; did you mean '{s}'?"))
            .unwrap_or_else(|| {
                if fields.is_empty() {
                    "; this mapping takes no keys".to_owned()
                } else {
                    format!("; valid keys here: {}", fields.join(", "))
                }
            });
        self.collector.unknown_keys.borrow_mut().push((
            child_path(&self.path, key),
            line,
            format!("unknown key '{key}'{hint}"),
        ));
    }
}

#[cfg(test)]
mod tests;
