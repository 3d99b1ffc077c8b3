//! Fuzzes the config compiler with the bytes of one YAML file of a bundle,
//! as `vergence validate`/`up` compile it: parse, check, and on success
//! render every service's instances. Beyond not panicking: a rejected
//! config says why in every error and names the file, and an accepted one
//! has a complete promotion order and renders each service on every
//! release channel.

#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use vergence_compiler::{Compiler, YamlCompiler};
use vergence_model::ports::CompiledConfig;
use vergence_model::{ConfigBundle, Error};

const FILE: &str = "fuzz.yaml";

fuzz_target!(|data: &[u8]| {
    // Files are read as UTF-8; lossy decoding keeps byte-level mutations
    // useful instead of discarding every input that breaks the encoding.
    let yaml = String::from_utf8_lossy(data).into_owned();
    let bundle = ConfigBundle::from_files(BTreeMap::from([(FILE.to_owned(), yaml)]));
    match YamlCompiler.compile(&bundle) {
        Ok(model) => check_accepted(model.as_ref()),
        Err(Error::Config(errors)) => {
            assert!(!errors.is_empty(), "a rejected config reports no error");
            for error in errors.iter() {
                assert!(!error.message.trim().is_empty(), "empty message: {error:?}");
                assert_eq!(error.file, FILE, "error names another file: {error:?}");
            }
        }
        Err(other) => panic!("compile failed with a non-config error: {other}"),
    }
});

fn check_accepted(model: &dyn CompiledConfig) {
    for app in model.applications() {
        let order = model.promotion_order(&app);
        let mut unique = order.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            order.len(),
            "{app}: channel twice in {order:?}"
        );
        for (service_app, service) in model.services() {
            if service_app != app {
                continue;
            }
            let instances = model
                .compile_service(&app, &service, None)
                .unwrap_or_else(|e| panic!("{app}/{service} of a valid config: {e}"));
            // Every channel is in the promotion order (no cycle slipped past
            // the checker) and gets exactly one instance of the service.
            assert_eq!(instances.len(), order.len(), "{app}/{service}: {order:?}");
        }
    }
}
