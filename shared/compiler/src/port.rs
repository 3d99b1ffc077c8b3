//! The compiler behind the [`Compiler`] port, for the engine's control
//! operations and every binary that wires them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use vergence_model::ports::{CompiledConfig, Compiler};
use vergence_model::{
    ApplicationName, ConfigBundle, ConfigErrors, DeploymentTarget, Desired, Error, InstanceKey,
    LocalProgram, ParamValue, Release, ReleaseChannelName, Result, RunnerUse, ServiceName,
};

use crate::model::ConfigModel;
use crate::render::promotion_order;

/// Compiles YAML config bundles.
#[derive(Clone, Copy, Debug, Default)]
pub struct YamlCompiler;

impl Compiler for YamlCompiler {
    fn compile(&self, bundle: &ConfigBundle) -> Result<Arc<dyn CompiledConfig>> {
        let model = crate::check(bundle).map_err(Error::Config)?;
        Ok(Arc::new(model))
    }
}

impl CompiledConfig for ConfigModel {
    fn hash(&self) -> &str {
        &self.hash
    }

    fn applications(&self) -> Vec<ApplicationName> {
        self.applications.keys().cloned().collect()
    }

    fn runtime_count(&self) -> usize {
        self.runtimes.len()
    }

    fn services(&self) -> Vec<(ApplicationName, ServiceName)> {
        self.applications
            .values()
            .flat_map(|app| app.services.keys().map(|s| (app.name.clone(), s.clone())))
            .collect()
    }

    fn instance_keys(&self) -> Vec<InstanceKey> {
        ConfigModel::instance_keys(self)
    }

    fn promotion_order(&self, application: &ApplicationName) -> Vec<ReleaseChannelName> {
        self.applications
            .get(application)
            .map(promotion_order)
            .unwrap_or_default()
    }

    fn application_of(&self, service: &ServiceName) -> Result<ApplicationName> {
        ConfigModel::application_of(self, service)
    }

    fn release_params(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        raw: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, ParamValue>> {
        ConfigModel::release_params(self, application, service, raw)
    }

    fn fingerprint(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        params: &BTreeMap<String, ParamValue>,
    ) -> Result<String> {
        ConfigModel::fingerprint(self, application, service, params)
    }

    fn runner_uses(&self) -> Vec<RunnerUse> {
        self.runner_uses.clone()
    }

    fn target_errors(&self, target: DeploymentTarget) -> ConfigErrors {
        match target {
            DeploymentTarget::Local => ConfigErrors::default(),
            DeploymentTarget::Serverless => self.serverless_errors.clone(),
        }
    }

    fn local_programs(&self) -> Vec<LocalProgram> {
        self.local_programs.clone()
    }

    fn file_applications(&self) -> BTreeMap<String, BTreeSet<ApplicationName>> {
        self.file_applications.clone()
    }

    fn notifications(&self) -> Vec<vergence_model::notification::NotificationRule> {
        self.applications
            .values()
            .flat_map(|app| app.notifications.iter().cloned())
            .collect()
    }

    fn trust(&self) -> Vec<vergence_model::trust::TrustRule> {
        self.applications
            .values()
            .flat_map(|app| app.trust.iter().cloned())
            .collect()
    }

    fn compile_service(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        release: Option<&Release>,
    ) -> Result<Vec<(InstanceKey, Desired)>> {
        ConfigModel::compile_service(self, application, service, release)
    }
}
