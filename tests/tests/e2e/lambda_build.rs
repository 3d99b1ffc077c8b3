//! The Lambda functions are built size first and the CLI speed first, from
//! one `[profile.release]`: SAM's `rust-cargolambda` builder always runs
//! `cargo lambda build --release --bin <Binary>` (aws-lambda-builders,
//! workflows/rust_cargo/actions.py), so the functions' settings reach cargo
//! through cargo-lambda as `--config` flags (Cargo.toml,
//! `[workspace.metadata.lambda.build]`). This runs the real cargo-lambda as
//! SAM does, with a `cargo` that records the build it is asked for instead
//! of compiling (a release build of a function takes many minutes).

use std::path::{Path, PathBuf};
use std::process::Command;
use vergence_testkit::CARGO_LAMBDA;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `key = value` lines of one `[section]` of the workspace's Cargo.toml.
fn section(manifest: &str, name: &str) -> Vec<(String, String)> {
    let header = format!("[{name}]");
    let mut lines = manifest.lines().skip_while(|l| l.trim() != header).skip(1);
    let mut out = Vec::new();
    for line in lines.by_ref() {
        let line = line.trim();
        if line.starts_with('[') {
            break;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').unwrap();
        out.push((key.trim().to_string(), value.trim().to_string()));
    }
    assert!(!out.is_empty(), "Cargo.toml has no {header} section");
    out
}

#[test]
fn sam_builds_the_functions_with_the_lambda_profile_and_cargo_install_the_speed_first_release() {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();

    // What `cargo install --path cli` builds: speed first.
    let release = section(&manifest, "profile.release");
    assert!(
        release.contains(&("opt-level".into(), "3".into())),
        "[profile.release] is what `cargo install` builds and must be speed first: {release:?}"
    );

    let Some(cargo_lambda) = vergence_testkit::endpoint(CARGO_LAMBDA) else {
        return;
    };
    let real_cargo = std::env::var("CARGO").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let recorded = dir.path().join("build-args");
    let fake = dir.path().join("cargo");
    // `cargo metadata` (cargo-lambda reads the workspace with it) goes to
    // the real cargo; the build is recorded, one argument a line.
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n\
             for a in \"$@\"; do case \"$a\" in\n\
               build) printf '%s\\n' \"$@\" > '{}'; exit 0;;\n\
               metadata) break;;\n\
             esac; done\n\
             exec '{real_cargo}' \"$@\"\n",
            recorded.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();

    // cargo-lambda's default compiler is cargo-zigbuild; its venv holds zig.
    let venv_bin = Path::new(&cargo_lambda).parent().unwrap();
    let path = format!(
        "{}:{}:{}",
        dir.path().display(),
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Exactly the builder's command for `BuildProperties: Binary: worker`.
    let out = Command::new(&cargo_lambda)
        .args(["lambda", "build", "--release", "--bin", "worker"])
        .current_dir(&root)
        .env("PATH", path)
        .env("CARGO", &fake)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo lambda build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let args: Vec<String> = std::fs::read_to_string(&recorded)
        .unwrap_or_else(|e| panic!("cargo-lambda ran no build ({e})"))
        .lines()
        .map(String::from)
        .collect();
    assert!(args.contains(&"--release".to_string()), "{args:?}");
    let configs: Vec<&str> = args
        .windows(2)
        .filter(|w| w[0] == "--config")
        .map(|w| w[1].as_str())
        .collect();

    // Every setting of [profile.lambda] reaches cargo as an override of
    // `release`; cargo applies `--config` over the manifest's profile.
    for (key, value) in section(&manifest, "profile.lambda") {
        if key == "inherits" {
            continue;
        }
        let flag = format!("profile.release.{key}={value}");
        assert!(
            configs.contains(&flag.as_str()),
            "`cargo lambda build --release` does not pass `--config {flag}` \
             ([profile.lambda] and [workspace.metadata.lambda.build] differ?): {configs:?}"
        );
    }
    // Nothing else overrides them afterwards with another value.
    for config in &configs {
        if let Some((key, value)) = config
            .strip_prefix("profile.release.")
            .and_then(|c| c.split_once('='))
        {
            let lambda = section(&manifest, "profile.lambda");
            let want = lambda.iter().find(|(k, _)| k == key);
            assert_eq!(
                want.map(|(_, v)| v.as_str()),
                Some(value),
                "--config {config} is not [profile.lambda]'s"
            );
        }
    }
}
