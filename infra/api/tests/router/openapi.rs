//! `docs/openapi.json` describes exactly the routes the router serves.

use std::collections::BTreeSet;
use std::path::Path;

use axum::http::{Method, StatusCode};
use serde_json::Value;

use crate::common::{Api, request};

fn document() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const METHODS: [&str; 7] = ["get", "put", "post", "delete", "patch", "head", "options"];

/// (METHOD, path template) of every documented operation.
fn documented() -> BTreeSet<(String, String)> {
    let doc = document();
    let mut operations = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.as_str()) {
                operations.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    operations
}

#[test]
fn the_document_lists_every_served_route_and_nothing_else() {
    let served: BTreeSet<(String, String)> = vergence_api::endpoints()
        .into_iter()
        .map(|(method, path)| (method.to_string(), path.to_owned()))
        .collect();
    let documented = documented();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "served but not in docs/openapi.json: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "in docs/openapi.json but not served: {unserved:?}"
    );
}

#[tokio::test]
async fn every_documented_operation_reaches_a_handler() {
    // Without a token, a routed request is answered by its handler (200 for
    // health, 401 otherwise); an unrouted one by the 404/405 fallbacks.
    let api = Api::new();
    for (method, path) in documented() {
        let uri = path
            .replace("{app}", "shop")
            .replace("{service}", "web")
            .replace("{rc}", "prod")
            .replace("{name}", "high-error-rate")
            .replace("{agent}", "prod-eu")
            .replace("{id}", "0123456789abcdef0123456789abcdef");
        let method: Method = method.parse().unwrap();
        let reply = api.send(request(method.clone(), &uri, None, None)).await;
        let expected = if path == "/v1/healthz" {
            StatusCode::OK
        } else {
            StatusCode::UNAUTHORIZED
        };
        assert_eq!(reply.status, expected, "{method} {uri}: {reply:?}");
    }
}

#[test]
fn the_document_is_openapi_3_1_with_resolvable_references() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut references = Vec::new();
    collect_refs(&doc, &mut references);
    assert!(!references.is_empty());
    for reference in references {
        let pointer = reference
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("only local references: {reference}"));
        assert!(doc.pointer(pointer).is_some(), "dangling $ref {reference}");
    }
    // Every operation says how it fails, and has an id for generated clients.
    for (path, item) in doc["paths"].as_object().unwrap() {
        let operations = item.as_object().unwrap().iter();
        for (method, operation) in operations.filter(|(k, _)| METHODS.contains(&k.as_str())) {
            assert!(
                operation["operationId"].is_string(),
                "{method} {path}: operationId"
            );
            let responses = operation["responses"].as_object().unwrap();
            if path != "/v1/healthz" {
                for status in ["400", "401", "403"] {
                    assert!(responses.contains_key(status), "{method} {path}: {status}");
                }
            }
        }
    }
}

fn collect_refs(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("$ref", Value::String(r)) => into.push(r.clone()),
                    _ => collect_refs(v, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, into)),
        _ => {}
    }
}
