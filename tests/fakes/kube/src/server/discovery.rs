//! Discovery documents: `/api`, `/api/v1`, `/apis`, `/apis/{group}`,
//! `/apis/{group}/{version}`, and the aggregated (v2) form of `/api` and
//! `/apis` that `Discovery::run_aggregated` asks for, all generated from
//! the resource table.

use serde_json::{Value, json};

use crate::resources::{self, ResourceType};

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Whether the `Accept` header asks for aggregated discovery.
pub(crate) fn wants_aggregated(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("as=APIGroupDiscoveryList"))
}

pub(crate) fn version() -> Value {
    json!({
        "major": "1", "minor": "37", "gitVersion": "v1.37.0-vergence-fake",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64"
    })
}

pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_version(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

pub(crate) fn group(group: &str) -> Value {
    let version = resources::groups()
        .into_iter()
        .find(|(g, _)| *g == group)
        .map(|(_, v)| v)
        .unwrap_or("v1");
    json!({
        "kind": "APIGroup", "apiVersion": "v1", "name": group,
        "versions": [group_version(group, version)],
        "preferredVersion": group_version(group, version),
    })
}

pub(crate) fn groups() -> Value {
    let groups: Vec<Value> = resources::groups()
        .into_iter()
        .map(|(g, v)| {
            json!({"name": g, "versions": [group_version(g, v)], "preferredVersion": group_version(g, v)})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn verbs(rt: &ResourceType) -> Vec<&'static str> {
    VERBS
        .iter()
        .copied()
        .filter(|v| !(rt.kind == "Namespace" && *v == "deletecollection"))
        .collect()
}

/// The APIResourceList of one group/version, subresources included.
pub(crate) fn resource_list(group: &str, version: &str) -> Value {
    let mut list = Vec::new();
    for rt in resources::in_group_version(group, version) {
        list.push(json!({
            "name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
            "kind": rt.kind, "verbs": verbs(rt), "shortNames": rt.short_names,
            "storageVersionHash": crate::meta::short_hash(&json!(rt.group_resource())),
        }));
        for sub in rt.subresources {
            let (kind, verbs): (&str, &[&str]) = match *sub {
                "log" => ("Pod", &["get"]),
                _ => (rt.kind, &["get", "patch", "update"]),
            };
            list.push(json!({
                "name": format!("{}/{sub}", rt.plural), "singularName": "", "namespaced": rt.namespaced,
                "kind": kind, "verbs": verbs,
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": list})
}

fn aggregated_group(group: &str, version: &str) -> Value {
    let resources: Vec<Value> = resources::in_group_version(group, version)
        .map(|rt| {
            let subresources: Vec<Value> = rt
                .subresources
                .iter()
                .map(|sub| {
                    let verbs: &[&str] = if *sub == "log" { &["get"] } else { &["get", "patch", "update"] };
                    json!({"subresource": sub, "verbs": verbs,
                           "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind}})
                })
                .collect();
            json!({
                "resource": rt.plural, "singularResource": rt.singular,
                "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
                "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                "verbs": verbs(rt), "shortNames": rt.short_names, "subresources": subresources,
            })
        })
        .collect();
    json!({
        "metadata": {"name": group, "creationTimestamp": null},
        "versions": [{"version": version, "resources": resources, "freshness": "Current"}]
    })
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2`) of the core group
/// (`core = true`) or of every other group.
pub(crate) fn aggregated(core: bool) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group("", "v1")]
    } else {
        resources::groups()
            .into_iter()
            .map(|(g, v)| aggregated_group(g, v))
            .collect()
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// The content type aggregated discovery answers with.
pub(crate) const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
