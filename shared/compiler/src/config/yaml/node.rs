//! The deserializer over one parsed YAML node: scalars are typed by the
//! field that receives them, keys are matched in camelCase or snake_case,
//! unknown keys are collected (not fatal) and every error is located.

use std::borrow::Cow;

use saphyr::{MarkedYamlOwned, YamlDataOwned};
use serde::de::{self, IntoDeserializer, Visitor};

use super::access::{EnumAccess, MapAccess, SeqAccess};
use super::{
    Collector, DeError, child_path, is_null, line_of, parse_bool, parse_int, scalar,
    snake_to_camel, strip_tags,
};
use vergence_model::diagnostics::suggest;

/// A serde deserializer over one node of a document, at `path`.
pub(super) struct NodeDeserializer<'a> {
    pub(super) node: &'a MarkedYamlOwned,
    pub(super) path: String,
    pub(super) collector: &'a Collector,
}

impl<'a> NodeDeserializer<'a> {
    /// A deserializer for a child node; `line` is where the child is written
    /// (its key's line for mapping entries), recorded for later errors.
    pub(super) fn child(
        &self,
        node: &'a MarkedYamlOwned,
        path: String,
        line: usize,
    ) -> NodeDeserializer<'a> {
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

    pub(super) fn fail(&self, message: impl Into<String>) -> DeError {
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

    pub(super) fn mapping(
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
