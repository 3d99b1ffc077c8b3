//! The resource types the fake serves: one static table that drives URL
//! routing, discovery documents, Status details and per-kind behaviour.

/// One served resource (a group/version/plural), as discovery describes it.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// `kind` of the objects.
    pub kind: &'static str,
    /// Lower-case plural used in URLs.
    pub plural: &'static str,
    /// Lower-case singular name.
    pub singular: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// `kubectl` short names, as the real server lists them.
    pub short_names: &'static [&'static str],
    /// Served subresources (`status`, `log`).
    pub subresources: &'static [&'static str],
}

impl ResourceType {
    /// `apiVersion` of the objects: `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` (or just `plural` in the core group), the name the
    /// real server uses in messages such as `jobs.batch "x" not found`.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Kind.group` as used in 422 Invalid messages (`Job.batch "x" is invalid`).
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_owned()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Whether writes to the main resource leave `.status` alone (and a
    /// `/status` subresource exists), as for every kind with a status.
    pub fn has_status(&self) -> bool {
        self.subresources.contains(&"status")
    }

    pub(crate) fn is(&self, group: &str, kind: &str) -> bool {
        self.group == group && self.kind == kind
    }
}

const STATUS: &[&str] = &["status"];
const NONE: &[&str] = &[];

macro_rules! resource {
    ($group:literal, $version:literal, $kind:literal, $plural:literal, $singular:literal,
     $namespaced:literal, $short:expr, $sub:expr) => {
        ResourceType {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $namespaced,
            short_names: $short,
            subresources: $sub,
        }
    };
}

/// Every resource the fake serves, in discovery order.
pub static RESOURCES: &[ResourceType] = &[
    resource!(
        "",
        "v1",
        "Pod",
        "pods",
        "pod",
        true,
        &["po"],
        &["status", "log"]
    ),
    resource!(
        "",
        "v1",
        "Service",
        "services",
        "service",
        true,
        &["svc"],
        STATUS
    ),
    resource!(
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        "configmap",
        true,
        &["cm"],
        NONE
    ),
    resource!("", "v1", "Secret", "secrets", "secret", true, &[], NONE),
    resource!(
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        "serviceaccount",
        true,
        &["sa"],
        NONE
    ),
    resource!(
        "",
        "v1",
        "Namespace",
        "namespaces",
        "namespace",
        false,
        &["ns"],
        STATUS
    ),
    resource!("", "v1", "Event", "events", "event", true, &["ev"], NONE),
    resource!(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        "deployment",
        true,
        &["deploy"],
        STATUS
    ),
    resource!(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        "statefulset",
        true,
        &["sts"],
        STATUS
    ),
    resource!(
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        "daemonset",
        true,
        &["ds"],
        STATUS
    ),
    resource!(
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        "replicaset",
        true,
        &["rs"],
        STATUS
    ),
    resource!("batch", "v1", "Job", "jobs", "job", true, &[], STATUS),
    resource!(
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        "ingress",
        true,
        &["ing"],
        STATUS
    ),
    resource!(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        true,
        &["pdb"],
        STATUS
    ),
    resource!(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        true,
        &["hpa"],
        STATUS
    ),
    resource!(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        "role",
        true,
        &[],
        NONE
    ),
    resource!(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        "rolebinding",
        true,
        &[],
        NONE
    ),
];

/// The resource served at `group/version/plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of a `kind` (each kind is served in exactly one version here).
pub fn by_kind(kind: &str) -> Option<&'static ResourceType> {
    RESOURCES.iter().find(|r| r.kind == kind)
}

/// Groups other than core, each with its single served version, in
/// discovery order.
pub fn groups() -> Vec<(&'static str, &'static str)> {
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !groups.iter().any(|(g, _)| *g == r.group) {
            groups.push((r.group, r.version));
        }
    }
    groups
}

/// Resources of one group/version.
pub fn in_group_version<'a>(
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static ResourceType> + 'a {
    RESOURCES
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_like_the_real_servers_messages() {
        let jobs = find("batch", "v1", "jobs").unwrap();
        assert_eq!(jobs.group_resource(), "jobs.batch");
        assert_eq!(jobs.group_kind(), "Job.batch");
        assert_eq!(jobs.api_version(), "batch/v1");
        let pods = by_kind("Pod").unwrap();
        assert_eq!(pods.group_resource(), "pods");
        assert_eq!(pods.api_version(), "v1");
        assert!(!by_kind("ConfigMap").unwrap().has_status());
    }

    #[test]
    fn every_group_is_listed_once() {
        let groups = groups();
        assert_eq!(groups.len(), 6);
        assert!(groups.contains(&("autoscaling", "v2")));
    }
}
