//! Server-side apply: merges an applied configuration into the live object
//! with per-manager field ownership. A manager's fields that it applied
//! before and no longer applies are removed (unless someone else owns
//! them); a field another manager owns with a different value is a
//! conflict unless the apply is forced, which takes the field over.

use serde_json::{Map, Value};

use super::fieldset::{self, Element, FieldPath, FieldSet, Scope};
use super::managed::{self, Actor, Entry, Operation};
use super::merge::list_key;
use crate::meta;

/// A conflicting field: the manager that owns it and the field path as
/// the real server prints it.
pub(crate) type Conflict = (String, String);

/// Applies `config` for `actor` over `live` (absent on create). Answers
/// the new object, or every conflict when not forced.
pub(crate) fn server_side_apply(
    live: Option<&Value>,
    config: &Value,
    actor: &Actor<'_>,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = managed::read(live);
    let applied = FieldSet::of(config, actor.scope);
    let mut object = live.cloned().unwrap_or_else(|| Value::Object(Map::new()));

    let conflicts = take_or_report_conflicts(&mut entries, &applied, config, &object, actor, force);
    if !conflicts.is_empty() {
        return Err(conflicts);
    }

    let previously_applied = entries
        .iter()
        .find(|e| e.is(actor, Operation::Apply))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: Vec<&FieldSet> = entries
        .iter()
        .filter(|e| e.scope == actor.scope && !e.is(actor, Operation::Apply))
        .map(|e| &e.fields)
        .collect();
    prune(&mut object, &previously_applied, &applied, &others);
    merge_scope(&mut object, config, actor.scope);

    let changed = live.is_none_or(|l| strip_managed(l) != strip_managed(&object))
        || previously_applied != applied;
    if changed {
        set_apply_entry(&mut entries, actor, applied);
    }
    managed::write(&mut object, &entries);
    Ok(object)
}

fn strip_managed(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    obj
}

/// Reports (or, when forced, takes over) the applied fields that another
/// manager owns with a different value.
fn take_or_report_conflicts(
    entries: &mut [Entry],
    applied: &FieldSet,
    config: &Value,
    live: &Value,
    actor: &Actor<'_>,
    force: bool,
) -> Vec<Conflict> {
    let mut conflicts = Vec::new();
    for entry in entries
        .iter_mut()
        .filter(|e| e.scope == actor.scope && e.manager != actor.manager)
    {
        let contested: Vec<FieldPath> = applied
            .0
            .iter()
            .filter(|path| !matches!(path.last(), Some(Element::Key(_))))
            .filter(|path| entry.fields.contains(path))
            .filter(|path| fieldset::value_at(config, path) != fieldset::value_at(live, path))
            .cloned()
            .collect();
        for path in contested {
            if force {
                entry.fields.0.remove(&path);
            } else {
                conflicts.push((entry.manager.clone(), fieldset::display(&path)));
            }
        }
    }
    conflicts
}

/// Removes what the manager applied before and no longer applies, unless
/// another manager owns it; then tidies maps the removal left empty.
fn prune(object: &mut Value, before: &FieldSet, now: &FieldSet, others: &[&FieldSet]) {
    let owned_by_others = |path: &FieldPath| others.iter().any(|o| o.contains(path));
    let mut dropped: Vec<&FieldPath> = before
        .0
        .iter()
        .filter(|path| !now.contains(path) && !owned_by_others(path))
        .collect();
    // Deepest first, so an item's own fields go before the item.
    dropped.sort_by_key(|path| std::cmp::Reverse(path.len()));
    for path in dropped {
        if fieldset::is_item_key(path) {
            continue;
        }
        let item_kept_by_others = matches!(path.last(), Some(Element::Key(_)))
            && others.iter().any(|o| o.has_below(path));
        if item_kept_by_others {
            continue;
        }
        if fieldset::remove_at(object, path) {
            remove_emptied_parents(object, path, now, others);
        }
    }
}

fn remove_emptied_parents(
    object: &mut Value,
    path: &[Element],
    now: &FieldSet,
    others: &[&FieldSet],
) {
    let mut parent = &path[..path.len().saturating_sub(1)];
    while parent.len() > 1 && matches!(parent.last(), Some(Element::Field(_))) {
        let owned =
            now.contains(&parent.to_vec()) || others.iter().any(|o| o.contains(&parent.to_vec()));
        let empty = fieldset::value_at(object, parent)
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty);
        if owned || !empty {
            return;
        }
        fieldset::remove_at(object, parent);
        parent = &parent[..parent.len() - 1];
    }
}

/// Merges the applied configuration's in-scope fields into the object.
fn merge_scope(object: &mut Value, config: &Value, scope: Scope) {
    let Some(config) = config.as_object() else {
        return;
    };
    for (key, value) in config {
        match (scope, key.as_str()) {
            (Scope::Status, "status") => merge_into(meta_entry(object, key), value, key),
            (Scope::Main, "metadata") => {
                for field in ["labels", "annotations", "ownerReferences", "finalizers"] {
                    if let Some(v) = value.get(field) {
                        let target = meta::metadata_mut(object)
                            .entry(field.to_owned())
                            .or_insert(Value::Null);
                        merge_into(target, v, field);
                    }
                }
            }
            (Scope::Main, "status" | "apiVersion" | "kind") | (Scope::Status, _) => {}
            (Scope::Main, _) => merge_into(meta_entry(object, key), value, key),
        }
    }
}

fn meta_entry<'a>(object: &'a mut Value, key: &str) -> &'a mut Value {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    match object {
        Value::Object(map) => map.entry(key.to_owned()).or_insert(Value::Null),
        _ => unreachable!("made an object just above"),
    }
}

/// Apply semantics of one value: objects merge key by key, associative
/// lists merge item by item, everything else is replaced. `null` in the
/// configuration sets nothing.
fn merge_into(target: &mut Value, config: &Value, field: &str) {
    match (target, config) {
        (_, Value::Null) => {}
        (target @ Value::Object(_), Value::Object(config)) => {
            for (key, value) in config {
                merge_into(meta_entry(target, key), value, key);
            }
        }
        (Value::Array(live), Value::Array(items))
            if items.iter().chain(live.iter()).all(Value::is_object)
                && list_key(field, live.iter().chain(items.iter())).is_some() =>
        {
            let key = list_key(field, live.iter().chain(items.iter())).unwrap_or("name");
            for item in items {
                match live.iter_mut().find(|l| l.get(key) == item.get(key)) {
                    Some(existing) => merge_into(existing, item, ""),
                    None => live.push(without_nulls(item)),
                }
            }
        }
        (target, config) => *target = without_nulls(config),
    }
}

fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

fn set_apply_entry(entries: &mut Vec<Entry>, actor: &Actor<'_>, applied: FieldSet) {
    let now = meta::now();
    match entries.iter_mut().find(|e| e.is(actor, Operation::Apply)) {
        Some(entry) => {
            entry.fields = applied;
            entry.time = now;
            entry.api_version = actor.api_version.to_owned();
        }
        None => entries.push(Entry {
            manager: actor.manager.to_owned(),
            operation: Operation::Apply,
            api_version: actor.api_version.to_owned(),
            time: now,
            scope: actor.scope,
            fields: applied,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn actor(manager: &str) -> Actor<'_> {
        Actor {
            manager,
            scope: Scope::Main,
            api_version: "apps/v1",
        }
    }

    fn config(replicas: i64, image: &str, with_label: bool) -> Value {
        let mut c = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "main", "image": image}]}}}
        });
        if with_label {
            c["metadata"]["labels"] = json!({"team": "a"});
        }
        c
    }

    #[test]
    fn fields_no_longer_applied_are_pruned() {
        let first =
            server_side_apply(None, &config(2, "web:1", true), &actor("vergence"), false).unwrap();
        assert_eq!(first["metadata"]["labels"]["team"], "a");
        let second = server_side_apply(
            Some(&first),
            &config(2, "web:2", false),
            &actor("vergence"),
            false,
        )
        .unwrap();
        assert_eq!(
            second["spec"]["template"]["spec"]["containers"][0]["image"],
            "web:2"
        );
        assert!(second["metadata"].get("labels").is_none(), "{second}");
    }

    #[test]
    fn another_managers_field_conflicts_unless_forced() {
        let first =
            server_side_apply(None, &config(2, "web:1", false), &actor("vergence"), false).unwrap();
        let conflicts = server_side_apply(
            Some(&first),
            &config(5, "web:1", false),
            &actor("hpa"),
            false,
        )
        .unwrap_err();
        assert_eq!(
            conflicts,
            vec![("vergence".to_owned(), ".spec.replicas".to_owned())]
        );
        let forced = server_side_apply(
            Some(&first),
            &config(5, "web:1", false),
            &actor("hpa"),
            true,
        )
        .unwrap();
        assert_eq!(forced["spec"]["replicas"], 5);
        // The first manager lost replicas but still shares the image it set.
        let again = server_side_apply(
            Some(&forced),
            &config(2, "web:1", false),
            &actor("vergence"),
            false,
        );
        assert_eq!(again.unwrap_err()[0].0, "hpa");
    }

    #[test]
    fn the_same_value_is_shared_not_a_conflict() {
        let first =
            server_side_apply(None, &config(2, "web:1", false), &actor("a"), false).unwrap();
        let shared =
            server_side_apply(Some(&first), &config(2, "web:1", false), &actor("b"), false)
                .unwrap();
        // "a" stops applying the container; "b" still owns it, so it stays.
        let mut without = config(2, "web:1", false);
        without["spec"].as_object_mut().unwrap().remove("template");
        let after = server_side_apply(Some(&shared), &without, &actor("a"), false).unwrap();
        assert_eq!(
            after["spec"]["template"]["spec"]["containers"][0]["image"],
            "web:1"
        );
    }
}
