//! Which applications each file of a config concerns, so a config can be
//! split into parts that are pushed on their own (see
//! docs/per-application-configs.md): an application's documents and
//! services concern it; a runtime or protection concerns the applications
//! that use it; a file a service names (its manifests, its ECS or Cloud Run
//! files) concerns the service's application.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::ParsedDocument;
use crate::config::schema::DocumentBody;
use crate::model::ConfigModel;
use vergence_model::{ApplicationName, ConfigBundle, ProtectionName, RuntimeName, ServiceName};

/// A document, reduced to what decides whom it concerns.
enum Placed {
    Application(ApplicationName),
    Service(ServiceName, Option<ApplicationName>),
    Runtime(RuntimeName),
    Protection(ProtectionName),
}

fn placed(document: &ParsedDocument) -> Placed {
    // Every kind must say whom it concerns: a new kind added here without a
    // decision would silently land in the platform's part.
    match &document.body {
        DocumentBody::Application(doc) => Placed::Application(doc.name.clone()),
        DocumentBody::Service(doc) => Placed::Service(doc.name.clone(), doc.application.clone()),
        DocumentBody::Runtime(doc) => Placed::Runtime(doc.name.clone()),
        DocumentBody::Protection(doc) => Placed::Protection(doc.name.clone()),
    }
}

/// Every file of `bundle` with the applications it concerns (none for an
/// unused runtime, several for a shared one).
pub(super) fn file_applications(
    bundle: &ConfigBundle,
    documents: &[ParsedDocument],
    model: &ConfigModel,
) -> BTreeMap<String, BTreeSet<ApplicationName>> {
    let mut runtime_users: BTreeMap<&RuntimeName, BTreeSet<ApplicationName>> = BTreeMap::new();
    let mut protection_users: BTreeMap<&ProtectionName, BTreeSet<ApplicationName>> =
        BTreeMap::new();
    let mut files: BTreeMap<String, BTreeSet<ApplicationName>> = bundle
        .files
        .keys()
        .map(|file| (file.clone(), BTreeSet::new()))
        .collect();
    let mut concern = |file: &str, application: &ApplicationName| {
        if let Some(applications) = files.get_mut(file) {
            applications.insert(application.clone());
        }
    };
    for app in model.applications.values() {
        for channel in &app.release_channels {
            for runtime in &channel.runtimes {
                runtime_users
                    .entry(runtime)
                    .or_default()
                    .insert(app.name.clone());
            }
            for protection in &channel.protections {
                protection_users
                    .entry(&protection.name)
                    .or_default()
                    .insert(app.name.clone());
            }
        }
        for service in app.services.values() {
            for protection in &service.protections {
                protection_users
                    .entry(&protection.name)
                    .or_default()
                    .insert(app.name.clone());
            }
            for channel in service.channels.values() {
                runtime_users
                    .entry(&channel.runtime)
                    .or_default()
                    .insert(app.name.clone());
                let named = channel
                    .manifests
                    .iter()
                    .flat_map(|m| m.files.iter().map(|(path, _)| path))
                    .chain(
                        channel
                            .ecs
                            .iter()
                            .flat_map(|e| [&e.task_definition.0, &e.service.0]),
                    )
                    .chain(channel.cloud_run.iter().map(|(path, _)| path));
                for path in named {
                    concern(path, &app.name);
                }
            }
        }
    }
    for document in documents {
        let file = document.source.file.as_str();
        match placed(document) {
            Placed::Application(name) => concern(file, &name),
            Placed::Service(name, application) => {
                let application = application.or_else(|| model.application_of(&name).ok());
                if let Some(application) = application {
                    concern(file, &application);
                }
            }
            Placed::Runtime(name) => {
                for application in runtime_users.get(&name).into_iter().flatten() {
                    concern(file, application);
                }
            }
            Placed::Protection(name) => {
                for application in protection_users.get(&name).into_iter().flatten() {
                    concern(file, application);
                }
            }
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use vergence_model::ConfigBundle;

    const SHOP: &str = "application:\n  name: shop\n  releaseChannels:\n    - {name: prod, runtimes: [{runtime: cluster}, {runtime: notify}]}\n---\nruntime:\n  name: cluster\n  kubernetes: {agent: prod-eu, namespace: shop, pollInterval: 2s}\n";
    const WEB: &str = "service:\n  application: shop\n  name: web\n  runtime: cluster\n  kubernetes: {manifests: k8s/web}\n";
    const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n";
    const BLOG: &str = "application:\n  name: blog\n  releaseChannels:\n    - {name: live, runtimes: [{runtime: notify}]}\n---\nservice:\n  application: blog\n  name: site\n  runtime: notify\n";
    const NOTIFY: &str =
        "runtime:\n  name: notify\n  apply: {taskConfig: {program: {cmd: [./notify.sh]}}}\n";
    const UNUSED: &str =
        "runtime:\n  name: spare\n  apply: {taskConfig: {program: {cmd: [./spare.sh]}}}\n";

    #[test]
    fn each_file_concerns_the_applications_that_use_what_it_defines() {
        let files: BTreeMap<String, String> = [
            ("shop.yaml", SHOP),
            ("web.yaml", WEB),
            ("k8s/web/deployment.yaml", DEPLOYMENT),
            ("blog.yaml", BLOG),
            ("shared/notify.yaml", NOTIFY),
            ("shared/spare.yaml", UNUSED),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let model = crate::check(&ConfigBundle::from_files(files)).unwrap();
        let of = |file: &str| -> Vec<String> {
            model.file_applications[file]
                .iter()
                .map(|a| a.as_str().to_owned())
                .collect()
        };
        assert_eq!(of("shop.yaml"), ["shop"]);
        assert_eq!(of("web.yaml"), ["shop"]);
        // A file a service names is its application's, though it holds no
        // config document.
        assert_eq!(of("k8s/web/deployment.yaml"), ["shop"]);
        assert_eq!(of("blog.yaml"), ["blog"]);
        assert_eq!(of("shared/notify.yaml"), ["blog", "shop"]);
        assert_eq!(of("shared/spare.yaml"), Vec::<String>::new());
        let every: BTreeSet<&String> = model.file_applications.keys().collect();
        assert_eq!(every.len(), 6, "every file is listed: {every:?}");
    }
}
