//! Parses the Kubernetes URL space: discovery paths and resource paths
//! (`/api/v1/namespaces/{ns}/{plural}/{name}/{subresource}` and the
//! `/apis/{group}/{version}/...` equivalents).

use crate::resources::{self, ResourceType};
use crate::status::ApiError;

/// What a URL path addresses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Route {
    /// `/version`
    Version,
    /// `/api`
    CoreVersions,
    /// `/api/v1`
    CoreResources,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(String),
    /// `/apis/{group}/{version}`
    GroupResources(String, String),
    /// A collection, an object or an object's subresource.
    Resource(ResourcePath),
}

/// A resource URL, decomposed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourcePath {
    pub rt: &'static ResourceType,
    /// `None` for cluster-scoped kinds and for all-namespace lists.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

pub(crate) fn parse(path: &str) -> Result<Route, ApiError> {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let not_found = || ApiError::path_not_found(path);
    match segments.as_slice() {
        ["version"] => Ok(Route::Version),
        ["api"] => Ok(Route::CoreVersions),
        ["api", "v1"] => Ok(Route::CoreResources),
        ["apis"] => Ok(Route::Groups),
        ["apis", group] if resources::groups().iter().any(|(g, _)| g == group) => {
            Ok(Route::Group((*group).to_owned()))
        }
        ["apis", group, version]
            if resources::in_group_version(group, version).next().is_some() =>
        {
            Ok(Route::GroupResources(
                (*group).to_owned(),
                (*version).to_owned(),
            ))
        }
        ["api", "v1", rest @ ..] => resource_path("", "v1", rest)
            .map(Route::Resource)
            .ok_or_else(not_found),
        ["apis", group, version, rest @ ..] => resource_path(group, version, rest)
            .map(Route::Resource)
            .ok_or_else(not_found),
        _ => Err(not_found()),
    }
}

fn resource_path(group: &str, version: &str, rest: &[&str]) -> Option<ResourcePath> {
    let namespaced = match rest {
        ["namespaces", ns, plural, tail @ ..] => resources::find(group, version, plural)
            .filter(|rt| rt.namespaced)
            .map(|rt| (rt, Some((*ns).to_owned()), tail)),
        _ => None,
    };
    let (rt, namespace, tail) = match namespaced {
        Some(found) => found,
        None => {
            let (plural, tail) = rest.split_first()?;
            (resources::find(group, version, plural)?, None, tail)
        }
    };
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some(*name), None),
        [name, sub] if rt.subresources.contains(sub) => (Some(*name), Some(*sub)),
        _ => return None,
    };
    // Namespaced objects are only addressable inside their namespace.
    if rt.namespaced && namespace.is_none() && name.is_some() {
        return None;
    }
    Some(ResourcePath {
        rt,
        namespace,
        name: name.map(str::to_owned),
        subresource: subresource.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(path: &str) -> ResourcePath {
        match parse(path).unwrap() {
            Route::Resource(r) => r,
            other => panic!("{path} parsed as {other:?}"),
        }
    }

    #[test]
    fn namespaced_paths_are_told_apart_from_namespace_objects() {
        let pods = resource("/api/v1/namespaces/ns/pods");
        assert_eq!(
            (pods.rt.kind, pods.namespace.as_deref(), pods.name),
            ("Pod", Some("ns"), None)
        );
        let ns = resource("/api/v1/namespaces/ns");
        assert_eq!((ns.rt.kind, ns.name.as_deref()), ("Namespace", Some("ns")));
        let status = resource("/api/v1/namespaces/ns/status");
        assert_eq!(
            (status.rt.kind, status.subresource.as_deref()),
            ("Namespace", Some("status"))
        );
        let log = resource("/api/v1/namespaces/ns/pods/p/log");
        assert_eq!(
            (log.name.as_deref(), log.subresource.as_deref()),
            (Some("p"), Some("log"))
        );
    }

    #[test]
    fn group_paths_and_misses() {
        let jobs = resource("/apis/batch/v1/namespaces/ns/jobs/j/status");
        assert_eq!(
            (jobs.rt.kind, jobs.subresource.as_deref()),
            ("Job", Some("status"))
        );
        let all = resource("/apis/apps/v1/deployments");
        assert_eq!((all.rt.kind, all.namespace), ("Deployment", None));
        assert_eq!(
            parse("/apis/batch/v1").unwrap(),
            Route::GroupResources("batch".into(), "v1".into())
        );
        for missing in [
            "/apis/batch/v2/jobs",
            "/api/v1/pods/p",
            "/apis/batch/v1/namespaces/ns/jobs/j/log",
            "/nope",
        ] {
            assert_eq!(parse(missing).unwrap_err().code, 404, "{missing}");
        }
    }
}
