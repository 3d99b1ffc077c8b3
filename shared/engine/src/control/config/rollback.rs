//! `vergence configs rollback`: an application's part back to an earlier
//! version, pushed like any other part push.

use vergence_model::error::Error;
use vergence_model::{ApplicationName, ConfigBundle, ConfigPart};

use super::apply::ApplyReport;
use super::parts::PartVersion;
use super::push::PreparedPush;
use crate::control::Control;

/// How many versions of a part are listed (and searched for a rollback).
const MAX_HISTORY: usize = 1000;

/// The shortest hash prefix a rollback accepts.
const MIN_HASH_PREFIX: usize = 7;

impl Control {
    /// Rolls an application's part back to an earlier version (`to`, a hash
    /// or its prefix as `part_versions` lists it; default the one before
    /// the current), as a push of that version's files: the other parts
    /// stay, and `authorize` decides as for any push.
    pub async fn rollback_config<E: From<Error>>(
        &self,
        application: &ApplicationName,
        to: Option<&str>,
        actor: &str,
        authorize: impl Fn(&PreparedPush) -> Result<(), E>,
    ) -> Result<ApplyReport, E> {
        let part = ConfigPart::Application(application.clone());
        let versions = self.part_versions(&part, MAX_HISTORY).await?;
        let list = format!("see `vergence configs list --app {application}`");
        let target = match to {
            None => versions.get(1).ok_or_else(|| {
                Error::invalid(
                    "to",
                    format!(
                        "application {application} has no earlier config version to roll back to ({list})"
                    ),
                )
            })?,
            Some(wanted) => {
                let wanted = wanted.trim();
                if wanted.len() < MIN_HASH_PREFIX {
                    return Err(E::from(Error::invalid(
                        "to",
                        format!(
                            "give at least {MIN_HASH_PREFIX} characters of a version's hash ({list})"
                        ),
                    )));
                }
                let matching: Vec<&PartVersion> = versions
                    .iter()
                    .filter(|v| v.hash.starts_with(wanted))
                    .collect();
                match matching.as_slice() {
                    [one] if one.current => {
                        return Err(E::from(Error::invalid(
                            "to",
                            format!(
                                "{wanted} is application {application}'s current config version; name an earlier one ({list})"
                            ),
                        )));
                    }
                    [one] => *one,
                    [] => {
                        return Err(E::from(Error::not_found(format!(
                            "config version {wanted} of application {application} ({list})"
                        ))));
                    }
                    _ => {
                        return Err(E::from(Error::invalid(
                            "to",
                            format!("{wanted} matches several versions; give more of the hash"),
                        )));
                    }
                }
            }
        };
        let files = self.snapshot(&target.hash).await?.bundle.files;
        self.push_config(
            &ConfigBundle::from_files(files),
            Some(application),
            actor,
            None,
            authorize,
        )
        .await
    }
}
