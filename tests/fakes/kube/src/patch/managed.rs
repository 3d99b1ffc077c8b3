//! `metadata.managedFields`: who owns which fields. Non-apply writes
//! (create, update, patch) give their manager the fields they changed and
//! take those fields from everyone else, as the real server records them.

use serde_json::{Value, json};

use super::fieldset::{FieldSet, Scope, value_at};
use crate::meta;

/// Who writes, and where: the identity of a managedFields entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Actor<'a> {
    /// `fieldManager` of the request.
    pub manager: &'a str,
    /// `/status` writes are recorded apart from main-resource writes.
    pub scope: Scope,
    /// `apiVersion` the write was made in.
    pub api_version: &'a str,
}

/// `Apply` (server-side apply) or `Update` (every other write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// One managedFields entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: String,
    pub scope: Scope,
    pub fields: FieldSet,
}

impl Entry {
    pub(crate) fn is(&self, actor: &Actor<'_>, operation: Operation) -> bool {
        self.manager == actor.manager && self.operation == operation && self.scope == actor.scope
    }
}

/// The entries of an object (none when it has no managedFields).
pub(crate) fn read(obj: Option<&Value>) -> Vec<Entry> {
    let Some(entries) = obj
        .and_then(|o| meta::at(o, &["metadata", "managedFields"]))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_owned(),
            operation: if e["operation"] == "Apply" {
                Operation::Apply
            } else {
                Operation::Update
            },
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_owned(),
            time: e["time"].as_str().unwrap_or_default().to_owned(),
            scope: if e["subresource"] == "status" {
                Scope::Status
            } else {
                Scope::Main
            },
            fields: FieldSet::from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

/// Writes the entries (dropping empty ones) into `metadata.managedFields`.
pub(crate) fn write(obj: &mut Value, entries: &[Entry]) {
    let rendered: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut entry = json!({
                "manager": e.manager,
                "operation": e.operation.as_str(),
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": e.fields.to_fields_v1(),
            });
            if e.scope == Scope::Status {
                entry["subresource"] = "status".into();
            }
            entry
        })
        .collect();
    let metadata = meta::metadata_mut(obj);
    if rendered.is_empty() {
        metadata.remove("managedFields");
    } else {
        metadata.insert("managedFields".into(), Value::Array(rendered));
    }
}

/// Records a non-apply write of `next` over `previous`: the actor's Update
/// entry gains the fields whose value it changed, other managers lose them,
/// and removed fields leave every entry.
pub(crate) fn record_update(previous: Option<&Value>, next: &mut Value, actor: &Actor<'_>) {
    let mut entries = read(previous);
    let before = previous
        .map(|p| FieldSet::of(p, actor.scope))
        .unwrap_or_default();
    let after = FieldSet::of(next, actor.scope);
    let changed: Vec<_> = after
        .0
        .iter()
        .filter(|path| previous.and_then(|p| value_at(p, path)) != value_at(next, path))
        .cloned()
        .collect();
    let removed: Vec<_> = before.0.difference(&after.0).cloned().collect();
    for entry in entries.iter_mut().filter(|e| e.scope == actor.scope) {
        for path in &removed {
            entry.fields.0.remove(path);
        }
        if !entry.is(actor, Operation::Update) {
            for path in &changed {
                entry.fields.0.remove(path);
            }
        }
    }
    if !changed.is_empty() {
        let now = meta::now();
        match entries.iter_mut().find(|e| e.is(actor, Operation::Update)) {
            Some(entry) => {
                entry.fields.0.extend(changed);
                entry.time = now;
                entry.api_version = actor.api_version.to_owned();
            }
            None => entries.push(Entry {
                manager: actor.manager.to_owned(),
                operation: Operation::Update,
                api_version: actor.api_version.to_owned(),
                time: now,
                scope: actor.scope,
                fields: FieldSet(changed.into_iter().collect()),
            }),
        }
    }
    write(next, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    const EDIT: Actor<'static> = Actor {
        manager: "kubectl-edit",
        scope: Scope::Main,
        api_version: "v1",
    };

    #[test]
    fn an_update_takes_the_changed_fields_from_their_owner() {
        let creator = Actor {
            manager: "creator",
            ..EDIT
        };
        let mut created = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "1"}});
        record_update(None, &mut created, &creator);
        let mut edited = created.clone();
        edited["data"]["a"] = "2".into();
        record_update(Some(&created), &mut edited, &EDIT);
        let entries = read(Some(&edited));
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[0].fields.to_fields_v1(),
            json!({"f:data": {"f:b": {}}})
        );
        assert_eq!(entries[1].manager, "kubectl-edit");
        assert_eq!(
            entries[1].fields.to_fields_v1(),
            json!({"f:data": {"f:a": {}}})
        );
    }

    #[test]
    fn an_unchanged_write_records_nothing_new() {
        let mut created = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        record_update(None, &mut created, &EDIT);
        let mut again = created.clone();
        record_update(Some(&created), &mut again, &EDIT);
        assert_eq!(again, created);
    }
}
