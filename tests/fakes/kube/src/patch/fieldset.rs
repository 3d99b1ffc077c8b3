//! Sets of field paths, the unit of server-side-apply ownership, and their
//! `FieldsV1` form in `metadata.managedFields` (`f:` fields, `k:` list-map
//! keys, `.` for an item owned as a whole).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::merge::list_key;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Element {
    /// A key of an object.
    Field(String),
    /// An item of an associative list, by its key: `{"name":"main"}`.
    Key(String),
}

/// A path from the object root.
pub(crate) type FieldPath = Vec<Element>;

/// Which part of an object a write covers: the main resource (everything
/// but status) or the `/status` subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Main,
    Status,
}

/// The metadata fields users own; the rest of metadata is the server's.
const OWNED_METADATA: &[&str] = &["labels", "annotations", "ownerReferences", "finalizers"];

/// A set of owned field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSet(pub(crate) BTreeSet<FieldPath>);

impl FieldSet {
    /// Every field an object sets within a scope: leaves (scalars, atomic
    /// lists, empty objects) and the items of associative lists.
    pub(crate) fn of(obj: &Value, scope: Scope) -> Self {
        let mut out = BTreeSet::new();
        let Some(map) = obj.as_object() else {
            return Self(out);
        };
        for (key, value) in map {
            let in_scope = match scope {
                Scope::Status => key == "status",
                Scope::Main => !matches!(key.as_str(), "status" | "apiVersion" | "kind"),
            };
            if !in_scope {
                continue;
            }
            let mut path = vec![Element::Field(key.clone())];
            if key == "metadata" {
                for (mkey, mvalue) in value.as_object().into_iter().flatten() {
                    if OWNED_METADATA.contains(&mkey.as_str()) {
                        path.push(Element::Field(mkey.clone()));
                        collect(mvalue, mkey, &mut path, &mut out);
                        path.pop();
                    }
                }
            } else {
                collect(value, key, &mut path, &mut out);
            }
        }
        Self(out)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn contains(&self, path: &FieldPath) -> bool {
        self.0.contains(path)
    }

    /// Whether a path below `prefix` is in the set.
    pub(crate) fn has_below(&self, prefix: &FieldPath) -> bool {
        self.0
            .iter()
            .any(|p| p.len() > prefix.len() && p.starts_with(prefix))
    }

    /// The `fieldsV1` document of this set.
    pub(crate) fn to_fields_v1(&self) -> Value {
        #[derive(Default)]
        struct Node {
            member: bool,
            children: BTreeMap<String, Node>,
        }
        fn render(node: &Node) -> Value {
            let mut map = Map::new();
            if node.member && !node.children.is_empty() {
                map.insert(".".into(), Value::Object(Map::new()));
            }
            for (key, child) in &node.children {
                map.insert(key.clone(), render(child));
            }
            Value::Object(map)
        }
        let mut root = Node::default();
        for path in &self.0 {
            let mut node = &mut root;
            for element in path {
                node = node.children.entry(element_key(element)).or_default();
            }
            node.member = true;
        }
        render(&root)
    }

    /// Reads a `fieldsV1` document (unknown entries are ignored).
    pub(crate) fn from_fields_v1(doc: &Value) -> Self {
        fn walk(doc: &Value, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
            let Some(map) = doc.as_object() else { return };
            if (map.is_empty() || map.contains_key(".")) && !path.is_empty() {
                out.insert(path.clone());
            }
            for (key, child) in map {
                let element = if let Some(f) = key.strip_prefix("f:") {
                    Element::Field(f.to_owned())
                } else if let Some(k) = key.strip_prefix("k:") {
                    Element::Key(k.to_owned())
                } else {
                    continue;
                };
                path.push(element);
                walk(child, path, out);
                path.pop();
            }
        }
        let mut out = BTreeSet::new();
        walk(doc, &mut Vec::new(), &mut out);
        Self(out)
    }
}

fn element_key(element: &Element) -> String {
    match element {
        Element::Field(f) => format!("f:{f}"),
        Element::Key(k) => format!("k:{k}"),
    }
}

fn collect(value: &Value, field: &str, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match value {
        Value::Null => {}
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                path.push(Element::Field(key.clone()));
                collect(child, key, path, out);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_object) => {
            match list_key(field, items.iter()) {
                Some(key) => {
                    for item in items {
                        path.push(item_element(key, item));
                        out.insert(path.clone());
                        collect(item, "", path, out);
                        path.pop();
                    }
                }
                None => {
                    out.insert(path.clone());
                }
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The `k:` element of an associative list item.
pub(crate) fn item_element(key: &str, item: &Value) -> Element {
    let mut id = Map::new();
    id.insert(
        key.to_owned(),
        item.get(key).cloned().unwrap_or(Value::Null),
    );
    Element::Key(Value::Object(id).to_string())
}

fn parse_key(key: &str) -> Option<(String, Value)> {
    let map: Map<String, Value> = serde_json::from_str(key).ok()?;
    map.into_iter().next()
}

/// The value at a path, if the object has it.
pub(crate) fn value_at<'a>(obj: &'a Value, path: &[Element]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |current, element| match element {
        Element::Field(f) => current.get(f),
        Element::Key(k) => {
            let (key, id) = parse_key(k)?;
            current
                .as_array()?
                .iter()
                .find(|item| item.get(&key) == Some(&id))
        }
    })
}

/// Removes the value at a path; answers whether something was removed.
pub(crate) fn remove_at(obj: &mut Value, path: &[Element]) -> bool {
    let Some((last, init)) = path.split_last() else {
        return false;
    };
    let mut current = obj;
    for element in init {
        let next = match element {
            Element::Field(f) => current.get_mut(f),
            Element::Key(k) => match parse_key(k) {
                Some((key, id)) => current
                    .as_array_mut()
                    .and_then(|items| items.iter_mut().find(|item| item.get(&key) == Some(&id))),
                None => None,
            },
        };
        match next {
            Some(next) => current = next,
            None => return false,
        }
    }
    match last {
        Element::Field(f) => current
            .as_object_mut()
            .is_some_and(|m| m.remove(f).is_some()),
        Element::Key(k) => match (parse_key(k), current.as_array_mut()) {
            (Some((key, id)), Some(items)) => {
                let before = items.len();
                items.retain(|item| item.get(&key) != Some(&id));
                items.len() != before
            }
            _ => false,
        },
    }
}

/// Whether the path ends in the key field of an associative list item
/// (`containers[name="x"].name`), which only goes with the item itself.
pub(crate) fn is_item_key(path: &[Element]) -> bool {
    match path {
        [.., Element::Key(k), Element::Field(f)] => parse_key(k).is_some_and(|(key, _)| &key == f),
        _ => false,
    }
}

/// A path as the real server prints it in conflicts:
/// `.spec.template.spec.containers[name="main"].image`.
pub(crate) fn display(path: &[Element]) -> String {
    path.iter()
        .map(|element| match element {
            Element::Field(f) => format!(".{f}"),
            Element::Key(k) => match parse_key(k) {
                Some((key, Value::String(id))) => format!("[{key}=\"{id}\"]"),
                Some((key, id)) => format!("[{key}={id}]"),
                None => format!("[{k}]"),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}, "uid": "u"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "main", "image": "web:1", "args": ["serve"]}
            ]}}},
            "status": {"replicas": 2}
        })
    }

    #[test]
    fn a_field_set_round_trips_through_fields_v1() {
        let set = FieldSet::of(&deployment(), Scope::Main);
        let doc = set.to_fields_v1();
        assert_eq!(
            doc,
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"main\"}": {".": {}, "f:args": {}, "f:image": {}, "f:name": {}}
                }}}}
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&doc), set);
    }

    #[test]
    fn paths_navigate_list_items_by_key() {
        let mut obj = deployment();
        let image = vec![
            Element::Field("spec".into()),
            Element::Field("template".into()),
            Element::Field("spec".into()),
            Element::Field("containers".into()),
            item_element("name", &json!({"name": "main"})),
            Element::Field("image".into()),
        ];
        assert_eq!(value_at(&obj, &image), Some(&json!("web:1")));
        assert_eq!(
            display(&image),
            ".spec.template.spec.containers[name=\"main\"].image"
        );
        assert!(remove_at(&mut obj, &image));
        assert_eq!(value_at(&obj, &image), None);
        assert!(is_item_key(&[
            item_element("name", &json!({"name": "x"})),
            Element::Field("name".into())
        ]));
    }

    #[test]
    fn the_status_scope_sees_only_status() {
        let set = FieldSet::of(&deployment(), Scope::Status);
        assert_eq!(set.to_fields_v1(), json!({"f:status": {"f:replicas": {}}}));
    }
}
