//! The layering of docs/architecture.md, checked against the Cargo.toml
//! files: the core crates depend on nothing of ours they must not, and
//! never on a YAML, HTTP or cloud library; and the local CLI, built without
//! its cloud features, compiles no cloud SDK (checked with `cargo tree`).

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
fn the_notifier_sees_only_the_model() {
    // The compiler is injected (the Compiler port), as for the API.
    assert_none(
        "infra/notify/Cargo.toml",
        &[
            "vergence-engine",
            "vergence-compiler",
            "vergence-embedded",
            "vergence-aws",
            "vergence-api",
            "vergence-runner",
        ],
    );
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

/// The crates of `vergence-cli`'s build (not its tests) with `features`
/// (cargo arguments), from `cargo tree`: resolved, nothing compiled.
fn cli_crates(features: &[&str]) -> std::collections::BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = std::process::Command::new(cargo)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["tree", "-p", "vergence-cli", "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .args(features)
        .output()
        .unwrap_or_else(|e| panic!("cargo tree does not run: {e}"));
    assert!(
        output.status.success(),
        "cargo tree {features:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The cloud SDKs and the crates built on them, by name prefix.
const CLOUD_SDKS: &[&str] = &[
    "aws-",
    "google-",
    "kube",
    "k8s-openapi",
    "vergence-aws",
    "vergence-runner-ecs",
    "vergence-runner-cloud-run",
];

/// Cloud crates among `crates`. aws-lc is no SDK: it is rustls's crypto,
/// which reqwest (the `--endpoint` client) brings to every build.
fn cloud_crates(crates: &std::collections::BTreeSet<String>) -> Vec<&String> {
    crates
        .iter()
        .filter(|c| CLOUD_SDKS.iter().any(|sdk| c.starts_with(sdk)))
        .filter(|c| !c.starts_with("aws-lc-"))
        .collect()
}

#[test]
fn the_local_cli_builds_without_any_cloud_sdk() {
    let local = cli_crates(&["--no-default-features"]);
    assert!(local.contains("vergence-runner-local"), "{local:?}");
    assert_eq!(
        cloud_crates(&local),
        Vec::<&String>::new(),
        "`cargo build -p vergence-cli --no-default-features` compiles a cloud SDK"
    );
    // aws-lc-sys alone is a minute of a newcomer's first build: the local
    // CLI's TLS is rustls over ring.
    let aws_lc: Vec<&String> = local.iter().filter(|c| c.starts_with("aws-lc")).collect();
    assert!(aws_lc.is_empty(), "the local CLI builds {aws_lc:?}");
}

#[test]
fn each_cloud_feature_brings_only_its_own_sdk() {
    let aws = cli_crates(&["--no-default-features", "--features", "aws"]);
    assert!(aws.contains("aws-sdk-ecs") && aws.contains("vergence-runner-ecs"));
    assert!(!aws.iter().any(|c| c.starts_with("google-")), "{aws:?}");
    let cloud_run = cli_crates(&["--no-default-features", "--features", "cloud-run"]);
    assert!(cloud_run.contains("vergence-runner-cloud-run"));
    assert!(
        !cloud_run
            .iter()
            .any(|c| c.starts_with("aws-sdk-") || c.starts_with("aws-config")),
        "{cloud_run:?}"
    );
}

#[test]
fn the_default_cli_is_the_whole_product() {
    let full = cli_crates(&[]);
    for sdk in [
        "aws-config",
        "aws-sdk-dynamodb",
        "aws-sdk-ecs",
        "aws-sdk-s3",
        "vergence-aws",
        "vergence-runner-ecs",
        "vergence-runner-cloud-run",
    ] {
        assert!(full.contains(sdk), "the default build lacks {sdk}");
    }
}
