//! The container engine that runs jobs whose program names an image:
//! `docker` or `podman`, chosen by a setting and looked up on PATH.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Which container engine runs jobs whose program has an `image:`.
///
/// The CLI reads it from `--container-engine` or `VERGENCE_CONTAINER_ENGINE`
/// (`auto`, `docker`, `podman`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ContainerEngine {
    /// `docker` when it is on PATH, else `podman`.
    #[default]
    Auto,
    Docker,
    Podman,
}

impl ContainerEngine {
    /// The names accepted by [`FromStr`], for help texts.
    pub const CHOICES: [&'static str; 3] = ["auto", "docker", "podman"];

    pub fn as_str(self) -> &'static str {
        match self {
            ContainerEngine::Auto => "auto",
            ContainerEngine::Docker => "docker",
            ContainerEngine::Podman => "podman",
        }
    }

    /// The programs tried, in order.
    fn candidates(self) -> &'static [&'static str] {
        match self {
            ContainerEngine::Auto => &["docker", "podman"],
            ContainerEngine::Docker => &["docker"],
            ContainerEngine::Podman => &["podman"],
        }
    }
}

impl fmt::Display for ContainerEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A container engine setting that is none of [`ContainerEngine::CHOICES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown container engine {0:?}: choose auto, docker or podman")]
pub struct UnknownContainerEngine(pub String);

impl FromStr for ContainerEngine {
    type Err = UnknownContainerEngine;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(ContainerEngine::Auto),
            "docker" => Ok(ContainerEngine::Docker),
            "podman" => Ok(ContainerEngine::Podman),
            _ => Err(UnknownContainerEngine(s.to_owned())),
        }
    }
}

/// Where the local runner looks for its container engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EngineLookup {
    pub(crate) engine: ContainerEngine,
    /// A PATH-style list of directories; this process's PATH when `None`.
    pub(crate) search_path: Option<OsString>,
}

/// An engine found on PATH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Engine {
    /// `docker` or `podman`, for messages.
    pub(crate) name: &'static str,
    pub(crate) program: PathBuf,
}

impl EngineLookup {
    /// The engine to run `image` with, or why there is none, in a sentence
    /// that says what to do (`program` names the job's program).
    pub(crate) fn find(&self, program: &str, image: &str) -> Result<Engine, String> {
        let path = match &self.search_path {
            Some(path) => Some(path.clone()),
            None => std::env::var_os("PATH"),
        };
        let found = self.engine.candidates().iter().find_map(|name| {
            executable_on(path.as_deref(), name).map(|program| Engine { name, program })
        });
        found.ok_or_else(|| match self.engine {
            ContainerEngine::Auto => format!(
                "the {program} program has image {image}, which runs in a container, but neither docker nor podman is on PATH; install one, or remove image: to run the command directly"
            ),
            chosen => format!(
                "the {program} program has image {image}, which runs in a container, but {chosen} (the container engine this runner is set to use, VERGENCE_CONTAINER_ENGINE) is not on PATH; install it, choose another engine, or remove image: to run the command directly"
            ),
        })
    }
}

/// The first executable file called `name` in the directories of `path`.
fn executable_on(path: Option<&OsStr>, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path?)
        // An empty entry means the current directory, which is not where
        // anyone expects a container engine to come from.
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn executable(dir: &Path, name: &str) {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn lookup(engine: ContainerEngine, dirs: &[&Path]) -> EngineLookup {
        EngineLookup {
            engine,
            search_path: Some(std::env::join_paths(dirs).unwrap()),
        }
    }

    #[test]
    fn auto_prefers_docker_and_falls_back_to_podman() {
        let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        executable(first.path(), "podman");
        executable(second.path(), "docker");
        let dirs = [first.path(), second.path()];

        let auto = lookup(ContainerEngine::Auto, &dirs)
            .find("apply", "x")
            .unwrap();
        assert_eq!(auto.name, "docker");
        assert_eq!(auto.program, second.path().join("docker"));

        std::fs::remove_file(second.path().join("docker")).unwrap();
        let auto = lookup(ContainerEngine::Auto, &dirs)
            .find("apply", "x")
            .unwrap();
        assert_eq!(auto.name, "podman");
    }

    #[test]
    fn a_chosen_engine_is_the_only_one_tried() {
        let dir = tempfile::tempdir().unwrap();
        executable(dir.path(), "docker");
        std::fs::write(dir.path().join("podman"), "not executable").unwrap();

        let message = lookup(ContainerEngine::Podman, &[dir.path()])
            .find("fetch", "hashicorp/terraform:1.9")
            .unwrap_err();
        assert!(
            message.starts_with("the fetch program has image hashicorp/terraform:1.9, which runs in a container, but podman"),
            "{message}"
        );
        assert!(message.contains("VERGENCE_CONTAINER_ENGINE"), "{message}");
    }

    #[test]
    fn settings_are_read_case_insensitively_and_unknown_ones_are_refused() {
        assert_eq!("Docker".parse(), Ok(ContainerEngine::Docker));
        assert_eq!(" podman ".parse(), Ok(ContainerEngine::Podman));
        assert_eq!("auto".parse(), Ok(ContainerEngine::Auto));
        let error = "nerdctl".parse::<ContainerEngine>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown container engine \"nerdctl\": choose auto, docker or podman"
        );
    }
}
