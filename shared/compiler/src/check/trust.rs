//! Checks an application's `trust:` entries: each names an `https://`
//! issuer (plain `http://` only to this machine, for tests), an audience,
//! at least one claim to match, and application scopes only — a CI job's
//! token never gets the platform's scope, which no application's config
//! may hand out.

use std::collections::BTreeMap;

use super::Checker;
use super::field_path::FieldPath;
use crate::config::schema::TrustDoc;
use vergence_model::trust::TrustRule;
use vergence_model::{ApplicationName, Scope, Source};

impl Checker<'_> {
    /// The application's trust rules; those with errors are left out (and
    /// reported).
    pub(super) fn trust(
        &mut self,
        source: &Source,
        application: &ApplicationName,
        docs: &[TrustDoc],
    ) -> Vec<TrustRule> {
        let list = FieldPath::root("application").key("trust");
        let mut rules = Vec::new();
        for (i, doc) in docs.iter().enumerate() {
            let path = list.index(i);
            let errors_before = self.errors.len();
            let issuer = self.trust_issuer(source, &path.key("issuer"), doc.issuer.as_deref());
            let audience = match doc.audience.as_deref().map(str::trim) {
                Some(audience) if !audience.is_empty() => Some(audience.to_owned()),
                _ => {
                    self.err(
                        source,
                        &path.key("audience"),
                        "a trust entry needs an audience: the `aud` the job asks its token for, e.g. vergence",
                    );
                    None
                }
            };
            self.trust_claims(source, &path.key("claims"), &doc.claims);
            let scopes = self.trust_scopes(source, &path.key("scopes"), &doc.scopes);
            if let (Some(issuer), Some(audience)) = (issuer, audience)
                && self.errors.len() == errors_before
            {
                rules.push(TrustRule {
                    application: application.clone(),
                    issuer,
                    audience,
                    claims: doc.claims.clone(),
                    scopes,
                });
            }
        }
        rules
    }

    fn trust_issuer(
        &mut self,
        source: &Source,
        path: &FieldPath,
        issuer: Option<&str>,
    ) -> Option<String> {
        let Some(issuer) = issuer.map(str::trim).filter(|i| !i.is_empty()) else {
            self.err(
                source,
                path,
                "a trust entry needs an issuer: the token's iss, e.g. https://token.actions.githubusercontent.com",
            );
            return None;
        };
        if issuer_is_allowed(issuer) {
            return Some(issuer.to_owned());
        }
        self.err(
            source,
            path,
            format!(
                "issuer {issuer:?} must be an https:// URL with a host (its keys are fetched from it); \
                 plain http:// is accepted only for 127.0.0.1 or localhost, in tests"
            ),
        );
        None
    }

    fn trust_claims(
        &mut self,
        source: &Source,
        path: &FieldPath,
        claims: &BTreeMap<String, String>,
    ) {
        if claims.is_empty() {
            self.err(
                source,
                path,
                "a trust entry needs at least one claim to match, e.g. {repository: org/repo}: \
                 without one, every job the issuer signs tokens for would be trusted",
            );
        }
        for (name, value) in claims {
            if value.trim().is_empty() {
                let message = format!("claim {name} needs a value to match");
                self.err(source, &path.key(name), message);
            }
        }
    }

    fn trust_scopes(&mut self, source: &Source, path: &FieldPath, raw: &[String]) -> Vec<Scope> {
        if raw.is_empty() {
            self.err(
                source,
                path,
                "a trust entry needs scopes: what a matching job may do (release, approve, admin)",
            );
        }
        let mut scopes = Vec::new();
        for (i, name) in raw.iter().enumerate() {
            match Scope::parse(name) {
                Ok(Scope::Platform) => self.err(
                    source,
                    &path.index(i),
                    "scope platform cannot be trusted to a CI job's token: an application's config \
                     grants only release, approve or admin on that application",
                ),
                Ok(scope) if !scopes.contains(&scope) => scopes.push(scope),
                Ok(_) => {}
                Err(_) => self.err(
                    source,
                    &path.index(i),
                    format!("unknown scope {name:?}; use release, approve or admin"),
                ),
            }
        }
        scopes
    }
}

/// `https://HOST…`, or `http://` to this machine (a test's own issuer).
fn issuer_is_allowed(issuer: &str) -> bool {
    if let Some(rest) = issuer.strip_prefix("https://") {
        return rest
            .split(['/', ':'])
            .next()
            .is_some_and(|host| !host.is_empty());
    }
    let Some(rest) = issuer.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    matches!(host, "127.0.0.1" | "localhost")
}

#[cfg(test)]
mod tests {
    use super::issuer_is_allowed;

    #[test]
    fn issuers_are_https_or_this_machine() {
        assert!(issuer_is_allowed(
            "https://token.actions.githubusercontent.com"
        ));
        assert!(issuer_is_allowed("https://gitlab.example.com/oidc"));
        assert!(issuer_is_allowed("http://127.0.0.1:4000"));
        assert!(issuer_is_allowed("http://localhost"));
        assert!(!issuer_is_allowed(
            "http://token.actions.githubusercontent.com"
        ));
        assert!(!issuer_is_allowed("http://localhost.evil.example"));
        assert!(!issuer_is_allowed("https://"));
        assert!(!issuer_is_allowed("token.actions.githubusercontent.com"));
    }
}
