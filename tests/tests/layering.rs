//! The layering of docs/architecture.md, checked against the Cargo.toml
//! files: the core crates depend on nothing of ours they must not, and
//! never on a YAML, HTTP or cloud library.

use std::path::Path;

/// The `[dependencies]` (not dev-dependencies) of a crate's Cargo.toml.
fn dependencies(manifest: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(manifest);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{manifest}: {e}"));
    let mut in_dependencies = false;
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['.', '=', ' ']).next().unwrap_or_default();
            names.push(name.to_owned());
        }
    }
    names
}

fn assert_none(manifest: &str, forbidden: &[&str]) {
    let deps = dependencies(manifest);
    for dep in &deps {
        assert!(
            !forbidden.iter().any(|f| dep.starts_with(f)),
            "{manifest} depends on {dep}, which its layer must not (docs/architecture.md)"
        );
    }
}

const OUTSIDE_WORLD: &[&str] = &[
    "saphyr",
    "serde_yaml",
    "aws-",
    "kube",
    "k8s-openapi",
    "google-",
    "axum",
    "hyper",
    "reqwest",
    "rusqlite",
    "lambda",
];

#[test]
fn the_model_depends_on_nothing_of_ours_and_no_outside_world() {
    assert_none("shared/model/Cargo.toml", &["vergence-"]);
    assert_none("shared/model/Cargo.toml", OUTSIDE_WORLD);
}

#[test]
fn the_engine_sees_neither_the_compiler_nor_any_adapter() {
    assert_none(
        "shared/engine/Cargo.toml",
        &[
            "vergence-compiler",
            "vergence-embedded",
            "vergence-aws",
            "vergence-api",
            "vergence-runner",
        ],
    );
    assert_none("shared/engine/Cargo.toml", OUTSIDE_WORLD);
}

#[test]
fn the_compiler_sees_only_the_model_and_its_yaml_reader() {
    assert_none(
        "shared/compiler/Cargo.toml",
        &[
            "vergence-engine",
            "vergence-embedded",
            "vergence-aws",
            "vergence-api",
            "vergence-runner",
        ],
    );
    let outside: Vec<&str> = OUTSIDE_WORLD
        .iter()
        .copied()
        .filter(|d| *d != "saphyr")
        .collect();
    assert_none("shared/compiler/Cargo.toml", &outside);
}

#[test]
fn runners_and_the_api_do_not_depend_on_the_compiler() {
    for manifest in [
        "runtimes/local/Cargo.toml",
        "runtimes/container/Cargo.toml",
        "runtimes/kubernetes/Cargo.toml",
        "runtimes/agent/Cargo.toml",
        "infra/api/Cargo.toml",
    ] {
        assert_none(manifest, &["vergence-compiler"]);
    }
}

#[test]
fn only_the_agent_talks_to_kubernetes() {
    // The Vergence side of the kubernetes runner holds no cluster client:
    // every call to a cluster is the agent's, made from inside it.
    assert_none("runtimes/kubernetes/Cargo.toml", OUTSIDE_WORLD);
    assert_none("runtimes/kubernetes/Cargo.toml", &["vergence-engine"]);
    // The agent knows the protocol (the model), not Vergence's insides.
    assert_none(
        "runtimes/agent/Cargo.toml",
        &[
            "vergence-engine",
            "vergence-embedded",
            "vergence-aws",
            "vergence-api",
            "vergence-runner",
            "vergence-container",
        ],
    );
}
