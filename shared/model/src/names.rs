//! Validated names: the identifiers users write in config (applications,
//! release channels, services, runtimes, protections, agents).
//!
//! Names are parsed at the boundary (config loading, CLI, API) so the rest of
//! the code can rely on them being well-formed.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest name accepted, so names fit in DNS labels and Kubernetes objects.
pub const MAX_NAME_LEN: usize = 63;

/// Checks the config contract for names: `^[a-z]([a-z0-9-]*[a-z0-9])?$`, at
/// most 63 characters. Returns a sentence saying what is wrong.
pub fn check_name(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("a name cannot be empty".to_owned());
    }
    if value.len() > MAX_NAME_LEN {
        // Its start is enough to find it; echoing a 5,000-character name
        // back in full helps no one.
        let start: String = value.chars().take(MAX_NAME_LEN).collect();
        return Err(format!(
            "name {start:?}… is {} characters long; at most {MAX_NAME_LEN} are allowed",
            value.chars().count()
        ));
    }
    let bytes = value.as_bytes();
    if !bytes[0].is_ascii_lowercase() {
        return Err(format!(
            "name {value:?} must start with a lowercase letter (a-z)"
        ));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!(
            "name {value:?} contains {bad:?}; only lowercase letters, digits and '-' are allowed"
        ));
    }
    if value.ends_with('-') {
        return Err(format!("name {value:?} must not end with '-'"));
    }
    Ok(())
}

/// What [`check_name`] accepts, for the config's JSON Schema: editors flag a
/// bad name as it is typed.
fn name_schema() -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "pattern": "^[a-z]([a-z0-9-]*[a-z0-9])?$",
        "maxLength": MAX_NAME_LEN,
    })
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident) => {
        $(#[$doc])*
        ///
        /// Shared, not copied: a name never changes once parsed, and every
        /// key, event and job of an instance carries its names.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $ty(Arc<str>);

        impl $ty {
            /// Parses a name, saying what is wrong when it is not valid.
            pub fn parse(value: impl Into<String>) -> Result<Self, String> {
                let value = value.into();
                check_name(&value)?;
                Ok(Self(value.into()))
            }

            /// The name as written.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(deserializer)?;
                Self::parse(raw).map_err(serde::de::Error::custom)
            }
        }

        impl schemars::JsonSchema for $ty {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($ty).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                name_schema()
            }
        }
    };
}

name_type!(
    /// The name of an application.
    ApplicationName
);
name_type!(
    /// The name of a release channel within an application (staging, prod-us, …).
    ReleaseChannelName
);
name_type!(
    /// The name of a service within an application.
    ServiceName
);
name_type!(
    /// The name of a runtime.
    RuntimeName
);
name_type!(
    /// The name of a protection.
    ProtectionName
);
name_type!(
    /// The name of a `vergence-agent`: one per cluster it runs jobs in
    /// (`prod-eu`), named by `runner: {kubernetes: {agent: …}}`.
    AgentName
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_names_of_the_contract() {
        for ok in ["a", "shop", "prod-us", "a1", "web-2", &"a".repeat(63)] {
            assert!(check_name(ok).is_ok(), "{ok} should be valid");
        }
    }

    #[test]
    fn a_huge_name_is_not_echoed_back_in_full() {
        let error = check_name(&"a".repeat(5_000)).unwrap_err();
        assert!(error.contains("5000 characters"), "{error}");
        assert!(error.len() < 200, "{error}");
    }

    #[test]
    fn rejects_names_outside_the_contract_with_a_reason() {
        let cases = [
            ("", "empty"),
            ("Shop", "lowercase letter"),
            ("1shop", "lowercase letter"),
            ("shop_x", "'_'"),
            ("shop-", "end with"),
            (&"a".repeat(64), "64 characters"),
        ];
        for (bad, why) in cases {
            let err = check_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn names_deserialize_only_when_valid() {
        let ok: ServiceName = serde_json::from_str("\"web\"").unwrap();
        assert_eq!(ok.as_str(), "web");
        assert!(serde_json::from_str::<ServiceName>("\"Web\"").is_err());
    }

    #[test]
    fn names_and_versions_are_stored_as_plain_strings() {
        let name: ServiceName = "web".parse().unwrap();
        assert_eq!(serde_json::to_string(&name).unwrap(), "\"web\"");
        let version: crate::Version = "v1.2.3".parse().unwrap();
        let json = serde_json::to_string(&version).unwrap();
        assert_eq!(json, "\"v1.2.3\"");
        assert_eq!(
            serde_json::from_str::<crate::Version>(&json).unwrap(),
            version
        );
    }
}
