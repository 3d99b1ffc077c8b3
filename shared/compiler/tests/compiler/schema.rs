//! The config's JSON Schema against the compiler: every example validates
//! against it, the published copy is the generated one, and a document the
//! schema rejects is rejected by the compiler too (what `vergence validate`
//! runs), over thousands of mutations of the examples.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use vergence_compiler::config::{parse_bundle, yaml};
use vergence_compiler::{Compiler, ConfigBundle, YamlCompiler, config_json_schema, read_dir};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn examples() -> Vec<(PathBuf, ConfigBundle)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 2, "examples: {dirs:?}");
    dirs.into_iter()
        .map(|dir| {
            let bundle = read_dir(&dir).expect("example reads");
            (dir, bundle)
        })
        .collect()
}

fn validator() -> jsonschema::Validator {
    jsonschema::draft7::new(&config_json_schema())
        .expect("the generated schema is a valid draft-07 schema")
}

/// The config documents of a bundle's file as JSON, read the way the
/// compiler reads YAML (so `3` is a number and `"3"` text).
fn documents_as_json(text: &str) -> Vec<Value> {
    yaml::parse_documents(text)
        .expect("YAML parses")
        .iter()
        .map(|document| {
            yaml::from_document::<Value>(document, &yaml::Collector::default())
                .expect("any YAML reads as JSON")
        })
        .collect()
}

/// Files of the bundle that hold config documents (not manifests, JSON
/// request files or other YAML a service names).
fn config_files(bundle: &ConfigBundle) -> Vec<String> {
    let (documents, errors) = parse_bundle(bundle);
    assert!(errors.is_empty(), "{errors:?}");
    let mut files: Vec<String> = documents.into_iter().map(|d| d.source.file).collect();
    files.dedup();
    files
}

#[test]
fn every_example_validates_against_the_schema_and_names_it() {
    let validator = validator();
    let mut checked = 0;
    for (dir, bundle) in examples() {
        for file in config_files(&bundle) {
            let text = &bundle.files[&file];
            let first = text.lines().next().unwrap_or("");
            assert!(
                first.starts_with("# yaml-language-server: $schema="),
                "{}/{file} starts with the yaml-language-server line, not {first:?}",
                dir.display()
            );
            let target = first.trim_start_matches("# yaml-language-server: $schema=");
            let schema_file = dir
                .join(Path::new(&file).parent().unwrap_or(Path::new("")))
                .join(target);
            assert!(
                schema_file.exists(),
                "{} does not exist",
                schema_file.display()
            );
            for document in documents_as_json(text) {
                let errors: Vec<String> = validator
                    .iter_errors(&document)
                    .map(|e| format!("{} at {}", e, e.instance_path()))
                    .collect();
                assert!(errors.is_empty(), "{}/{file}: {errors:#?}", dir.display());
                checked += 1;
            }
        }
    }
    assert!(checked >= 8, "only {checked} documents checked");
}

#[test]
fn the_published_schema_is_the_generated_one() {
    let path = repo().join("docs/config.schema.json");
    let generated = serde_json::to_string_pretty(&config_json_schema()).expect("json") + "\n";
    if std::env::var_os("VERGENCE_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).expect("write docs/config.schema.json");
    }
    let published = std::fs::read_to_string(&path).expect("docs/config.schema.json");
    assert!(
        published == generated,
        "docs/config.schema.json is stale: run `vergence schema > docs/config.schema.json` (or this test with VERGENCE_UPDATE_SCHEMA=1)"
    );
}

#[derive(Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

/// One change to a document: where, and what.
type Change = (Vec<PathStep>, Box<dyn Fn(&mut Value)>);

/// Every change tried on a document: at each mapping an unknown key, each
/// key dropped and misspelt; every value replaced by a value of another
/// shape, an out-of-range number, an unknown word and nothing.
fn mutations(document: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    mutate_at(document, &mut Vec::new(), &mut out);
    out
}

fn mutate_at(node: &Value, path: &mut Vec<PathStep>, out: &mut Vec<Change>) {
    let mut push = |f: Box<dyn Fn(&mut Value)>| out.push((path.clone(), f));
    match node {
        Value::Object(map) => {
            push(Box::new(|v| {
                v.as_object_mut()
                    .expect("map")
                    .insert("bogusKey".into(), json!(1));
            }));
            push(Box::new(|v| *v = json!("text")));
            push(Box::new(|v| *v = json!([1])));
            for key in map.keys() {
                let (dropped, misspelt, snake) = (key.clone(), key.clone(), key.clone());
                // The reader takes snake_case keys: the schema must too.
                push(Box::new(move |v| {
                    let map = v.as_object_mut().expect("map");
                    let moved = map.remove(&snake).expect("key");
                    map.insert(camel_to_snake(&snake), moved);
                }));
                push(Box::new(move |v| {
                    v.as_object_mut().expect("map").remove(&dropped);
                }));
                push(Box::new(move |v| {
                    let map = v.as_object_mut().expect("map");
                    let moved = map.remove(&misspelt).expect("key");
                    map.insert(format!("{misspelt}x"), moved);
                }));
            }
        }
        Value::Array(_) => {
            push(Box::new(|v| *v = json!("text")));
            push(Box::new(|v| *v = json!({"x": 1})));
        }
        _ => {
            push(Box::new(|v| *v = json!({"x": 1})));
            push(Box::new(|v| *v = json!([1])));
            push(Box::new(|v| *v = json!(-1)));
            push(Box::new(|v| *v = json!(3)));
            push(Box::new(|v| *v = json!(true)));
            push(Box::new(|v| *v = json!("3")));
            push(Box::new(|v| *v = json!("no such value")));
            push(Box::new(|v| *v = Value::Null));
        }
    }
    match node {
        Value::Object(map) => {
            for (key, child) in map {
                path.push(PathStep::Key(key.clone()));
                mutate_at(child, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                path.push(PathStep::Index(index));
                mutate_at(child, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn camel_to_snake(key: &str) -> String {
    key.chars()
        .flat_map(|c| {
            if c.is_ascii_uppercase() {
                vec!['_', c.to_ascii_lowercase()]
            } else {
                vec![c]
            }
        })
        .collect()
}

fn apply(document: &Value, (path, edit): &Change) -> Value {
    let mut copy = document.clone();
    let mut at = &mut copy;
    for step in path {
        at = match step {
            PathStep::Key(key) => at.get_mut(key.as_str()).expect("key on path"),
            PathStep::Index(index) => at.get_mut(*index).expect("index on path"),
        };
    }
    edit(at);
    copy
}

fn rejected_by_compiler(bundle: &ConfigBundle) -> bool {
    YamlCompiler.compile(bundle).is_err()
}

#[test]
fn a_document_the_schema_rejects_is_rejected_by_validate() {
    let validator = validator();
    let (mut schema_rejected, mut accepted) = (0, 0);
    for (dir, bundle) in examples() {
        assert!(!rejected_by_compiler(&bundle), "{} compiles", dir.display());
        for file in config_files(&bundle) {
            let documents = documents_as_json(&bundle.files[&file]);
            for (index, document) in documents.iter().enumerate() {
                for change in &mutations(document) {
                    let mutated = apply(document, change);
                    if validator.is_valid(&mutated) {
                        accepted += 1;
                        continue;
                    }
                    schema_rejected += 1;
                    // JSON is YAML: the mutated document replaces the
                    // original in its file, the other documents stay.
                    let text = documents
                        .iter()
                        .enumerate()
                        .map(|(i, d)| {
                            if i == index {
                                mutated.to_string()
                            } else {
                                d.to_string()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join("\n---\n");
                    let mut changed = bundle.clone();
                    changed.files.insert(file.clone(), text);
                    assert!(
                        rejected_by_compiler(&changed),
                        "{}/{file} document {index}: the schema rejects\n{}\nbut the compiler accepts it",
                        dir.display(),
                        serde_json::to_string_pretty(&mutated).expect("json")
                    );
                }
            }
        }
    }
    // The test means something only if the schema rejects much of what is
    // thrown at it, and accepts some (loosened where the reader is).
    assert!(
        schema_rejected > 500,
        "only {schema_rejected} mutations rejected by the schema"
    );
    assert!(
        accepted > 50,
        "only {accepted} mutations accepted by the schema"
    );
    eprintln!(
        "schema rejected {schema_rejected} mutations, all rejected by the compiler; accepted {accepted}"
    );
}
