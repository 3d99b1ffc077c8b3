//! How serde walks into a node: the items of a list, the entries of a
//! mapping and the variant of an enum, each handed on as a child
//! deserializer with its field path and line.

use saphyr::MarkedYamlOwned;
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::{DeError, NodeDeserializer, child_path, line_of};

pub(super) struct SeqAccess<'p, 'a, I> {
    pub(super) parent: &'p NodeDeserializer<'a>,
    pub(super) items: I,
}

impl<'de, 'a, I> de::SeqAccess<'de> for SeqAccess<'_, 'a, I>
where
    I: Iterator<Item = (usize, &'a MarkedYamlOwned)>,
{
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some((index, node)) = self.items.next() else {
            return Ok(None);
        };
        let path = format!("{}[{index}]", self.parent.path);
        let child = self.parent.child(node, path.clone(), line_of(node));
        seed.deserialize(child)
            .map(Some)
            .map_err(|e: DeError| e.locate(&path, line_of(node)))
    }
}

pub(super) struct MapAccess<'p, 'a, I> {
    pub(super) parent: &'p NodeDeserializer<'a>,
    pub(super) entries: I,
    pub(super) pending: Option<(String, usize, &'a MarkedYamlOwned)>,
}

impl<'de, 'a, I> de::MapAccess<'de> for MapAccess<'_, 'a, I>
where
    I: Iterator<Item = (String, usize, &'a MarkedYamlOwned)>,
{
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, line, value)) = self.entries.next() else {
            return Ok(None);
        };
        let parsed = seed
            .deserialize(key.as_str().into_deserializer())
            .map_err(|e: DeError| e.locate(&child_path(&self.parent.path, &key), line))?;
        self.pending = Some((key, line, value));
        Ok(Some(parsed))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let (key, line, node) = self.pending.take().ok_or_else(|| {
            self.parent
                .fail("internal error: value requested before key")
        })?;
        let path = child_path(&self.parent.path, &key);
        let child = self.parent.child(node, path.clone(), line);
        seed.deserialize(child)
            .map_err(|e: DeError| e.locate(&path, line))
    }
}

pub(super) struct EnumAccess<'a> {
    pub(super) variant: String,
    pub(super) content: NodeDeserializer<'a>,
}

impl<'de, 'a> de::EnumAccess<'de> for EnumAccess<'a> {
    type Error = DeError;
    type Variant = NodeDeserializer<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), DeError> {
        let variant = seed.deserialize(self.variant.as_str().into_deserializer())?;
        Ok((variant, self.content))
    }
}

impl<'de> de::VariantAccess<'de> for NodeDeserializer<'_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.mapping()? {
            Some(map) if !map.is_empty() => Err(self.fail("this option takes no settings")),
            _ => Ok(()),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_struct(self, "", fields, visitor)
    }
}
