//! Pushing a release from a control that compiled an older config (an api
//! container that stayed warm while another applied a new one): the push
//! is refused by the store, or by the old config, and done on the config in
//! force, never on the one the control remembered.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use vergence_compiler::YamlCompiler;
use vergence_embedded::{LocalQueue, SqliteStore};
use vergence_engine::control::Control;
use vergence_model::ports::{ConfigStore, InstanceStore, ManualClock, ReleaseStore};
use vergence_model::{ConfigBundle, InstanceKey};

const RUNTIME: &str =
    "runtime:\n  name: touch\n  apply:\n    taskConfig:\n      program:\n        cmd: [\"true\"]\n";

fn bundle(channels: &[&str], services: &[&str]) -> ConfigBundle {
    let mut yaml = format!("{RUNTIME}---\napplication:\n  name: shop\n  releaseChannels:\n");
    for channel in channels {
        yaml.push_str(&format!(
            "    - {{name: {channel}, runtimes: [{{runtime: touch}}]}}\n"
        ));
    }
    for service in services {
        yaml.push_str(&format!(
            "---\nservice:\n  name: {service}\n  runtime: touch\n"
        ));
    }
    ConfigBundle::from_files([("vergence.yaml".to_owned(), yaml)].into())
}

/// Two controls over one store, as two api containers are.
fn controls() -> (Arc<SqliteStore>, Control, Control) {
    let clock = Arc::new(ManualClock::new(
        Timestamp::from_second(1_900_000_000).unwrap(),
    ));
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let queue = Arc::new(LocalQueue::new(clock.clone()));
    let control = || {
        Control::new(
            store.clone(),
            queue.clone(),
            clock.clone(),
            Arc::new(YamlCompiler),
        )
    };
    (store.clone(), control(), control())
}

async fn push(control: &Control, service: &str, version: &str) -> vergence_model::Result<()> {
    control
        .push_release(
            None,
            &service.parse().unwrap(),
            &version.parse().unwrap(),
            &BTreeMap::new(),
            "ci",
        )
        .await
        .map(drop)
}

#[tokio::test]
async fn a_push_compiled_from_a_config_no_longer_in_force_is_done_again_on_the_one_in_force() {
    let (store, warm, other) = controls();
    warm.apply_config(bundle(&["staging"], &["web"]), "ci")
        .await
        .unwrap();
    push(&warm, "web", "v1").await.unwrap();
    // Another container applies a config with a second channel.
    other
        .apply_config(bundle(&["staging", "prod"], &["web"]), "ci")
        .await
        .unwrap();
    let in_force = store.current_config().await.unwrap().unwrap().hash;

    push(&warm, "web", "v2").await.unwrap();
    for channel in ["staging", "prod"] {
        let key = InstanceKey::parse_storage_id(&format!("shop/web/{channel}")).unwrap();
        let record = store.get_instance(&key).await.unwrap().unwrap();
        assert_eq!(
            record.desired.version().map(|v| v.as_str()),
            Some("v2"),
            "{key}"
        );
        assert_eq!(
            record.config_hash, in_force,
            "{key} compiled from the config in force"
        );
    }
    let (app, web) = ("shop".parse().unwrap(), "web".parse().unwrap());
    let latest = store.latest_release(&app, &web).await.unwrap().unwrap();
    assert_eq!(latest.version, "v2");
}

#[tokio::test]
async fn a_push_the_remembered_config_rejects_is_judged_by_the_one_in_force() {
    let (store, warm, other) = controls();
    warm.apply_config(bundle(&["staging"], &["web"]), "ci")
        .await
        .unwrap();
    // Another container adds a service the warm one has never compiled.
    other
        .apply_config(bundle(&["staging"], &["web", "api"]), "ci")
        .await
        .unwrap();
    push(&warm, "api", "v1").await.unwrap();
    let key = InstanceKey::parse_storage_id("shop/api/staging").unwrap();
    let record = store.get_instance(&key).await.unwrap().unwrap();
    assert_eq!(record.desired.version().map(|v| v.as_str()), Some("v1"));
    // A service no config has is still refused, saying so.
    let unknown = push(&warm, "nope", "v1").await.unwrap_err();
    assert!(unknown.to_string().contains("nope"), "{unknown}");
}
