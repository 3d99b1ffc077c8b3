//! Query parameters of a request, decoded, with the typed reads handlers
//! need (`kube` starts its queries with `?&`, which decodes to nothing).

use std::collections::HashMap;

use axum::extract::Query;
use axum::http::Uri;

use crate::status::ApiError;

/// Decoded query parameters (the last value wins).
#[derive(Debug, Clone, Default)]
pub(crate) struct Params(HashMap<String, String>);

impl Params {
    pub(crate) fn from_uri(uri: &Uri) -> Result<Self, ApiError> {
        Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map(|Query(pairs)| Self(pairs.into_iter().collect()))
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A boolean flag: `true` or `1`.
    pub(crate) fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("true" | "1"))
    }

    pub(crate) fn u64(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.get(name)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid {name} {v:?}: not a number"))
                })
            })
            .transpose()
    }

    /// `dryRun=All` (the only value the real server accepts).
    pub(crate) fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "unsupported dryRun value {other:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_style_queries_decode() {
        let uri: Uri = "/api/v1/pods?&watch=true&labelSelector=app%3Dweb&timeoutSeconds=290"
            .parse()
            .unwrap();
        let params = Params::from_uri(&uri).unwrap();
        assert!(params.flag("watch"));
        assert_eq!(params.get("labelSelector"), Some("app=web"));
        assert_eq!(params.u64("timeoutSeconds").unwrap(), Some(290));
        assert_eq!(params.u64("limit").unwrap(), None);
    }
}
