//! Checks the Terraform runtime (`runtime: {terraform: {module, backend,
//! variables, workspace, image, runner}}`) and compiles it into the fetch
//! and apply Vergence runs itself on the runtime's runner. The fetch runs
//! `init`, `plan -detailed-exitcode -out` and `show -json` (the plan and
//! its JSON are kept); the apply runs `init` and `apply` of that plan.

use std::collections::BTreeMap;

use jiff::SignedDuration;

use super::Checker;
use super::field_path::FieldPath;
use super::job::{ConstantUse, TemplateScope};
use super::parameters::SecretParams;
use super::runtime::{DEFAULT_GRACE_PERIOD, RuntimeSource};
use crate::config::ParsedDocument;
use crate::config::manifests_dir;
use crate::config::schema::{RunnerDoc, RuntimeDoc, TerraformRuntimeDoc};
use crate::model::{FetchTemplate, JobTemplate, Runtime};
use crate::template::Template;
use vergence_model::terraform::{PLAN_FILE, PLAN_JSON};
use vergence_model::{FetchMode, RunnerKind, RunnerSpec, RunnerUser, Source};

/// One plan or one apply; a refresh of a large state takes a while.
const DEFAULT_TIMEOUT: SignedDuration = SignedDuration::from_mins(30);
/// Until converged: each fetch is a plan, which refreshes every resource.
const DEFAULT_POLL_INTERVAL: SignedDuration = SignedDuration::from_secs(30);
/// Drift detection once converged.
const DEFAULT_STEADY_STATE_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(15);
/// One state per service instance unless the config says otherwise.
const DEFAULT_WORKSPACE: &str =
    "{{.Builtins.Application.Name}}-{{.Builtins.Service.Name}}-{{.Builtins.ReleaseChannel.Name}}";

/// The program of both jobs: `sh -c SCRIPT vergence-terraform plan|apply
/// [-backend-config=…]`. Terraform's own output goes to stdout (kept for
/// `status`), its errors to stderr (quoted in reasons). `.terraform` lives
/// in a directory of the job's own, so instances sharing a module never
/// share an init; providers come from a plugin cache shared by all jobs on
/// the machine (unless `TF_PLUGIN_CACHE_DIR` says where), so a plan does
/// not download them again. The workspace is selected (created the first time) after
/// init rather than through `TF_WORKSPACE`, which refuses a workspace that
/// does not exist yet once the backend has any other.
const SCRIPT: &str = r#"set -eu
action="$1"; shift
scratch="$(mktemp -d "${TMPDIR:-/tmp}/vergence-terraform.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
export TF_DATA_DIR="$scratch/data"
if [ -z "${TF_PLUGIN_CACHE_DIR:-}" ] && [ -n "${HOME:-}" ]; then
  export TF_PLUGIN_CACHE_DIR="$HOME/.cache/vergence/terraform-plugins"
fi
if [ -n "${TF_PLUGIN_CACHE_DIR:-}" ]; then mkdir -p "$TF_PLUGIN_CACHE_DIR"; fi
if [ "$VERGENCE_TF_MODULE_KIND" = source ]; then
  mkdir "$scratch/module" && cd "$scratch/module"
  terraform init -input=false -no-color -from-module="$VERGENCE_TF_MODULE" "$@" >/dev/null
else
  cd "$VERGENCE_TF_MODULE"
  terraform init -input=false -no-color "$@" >/dev/null
fi
terraform workspace select -or-create=true -no-color "$VERGENCE_TF_WORKSPACE" >/dev/null
case "$action" in
plan)
  out="${VERGENCE_OUTPUT_DIR:-$scratch}"
  rm -f "$out/tfplan" "$out/plan.json"
  set +e
  terraform plan -input=false -no-color -detailed-exitcode -out="$out/tfplan"
  code=$?
  set -e
  if [ "$code" = 0 ]; then rm -f "$out/tfplan"; fi
  if [ "$code" = 2 ]; then terraform show -json "$out/tfplan" >"$out/plan.json"; fi
  exit "$code"
  ;;
apply)
  plan="${VERGENCE_INPUT_DIR:-$scratch}/tfplan"
  if [ ! -f "$plan" ]; then
    echo "Error: no plan was handed to this apply ($plan is missing)" >&2
    exit 1
  fi
  terraform apply -input=false -no-color "$plan"
  ;;
esac
"#;

/// What the fetch and the apply share: they differ only in what they do.
struct TerraformJobs {
    module: Module,
    env: BTreeMap<String, Template>,
    backend_args: Vec<Template>,
    image: Option<Template>,
    timeout: SignedDuration,
}

impl TerraformJobs {
    /// `sh -c SCRIPT vergence-terraform ACTION -backend-config=…`.
    fn job(&self, action: &str, outputs: Vec<String>) -> JobTemplate {
        let mut env = self.env.clone();
        env.insert("VERGENCE_TF_MODULE".into(), literal(&self.module.location));
        env.insert("VERGENCE_TF_MODULE_KIND".into(), literal(self.module.kind));
        let mut cmd = ["sh", "-c", SCRIPT, "vergence-terraform", action]
            .map(literal)
            .to_vec();
        cmd.extend(self.backend_args.iter().cloned());
        JobTemplate {
            image: self.image.clone(),
            cmd,
            env,
            working_dir: self.module.working_dir.clone(),
            timeout: self.timeout,
            outputs,
        }
    }
}

/// Where the module is, as the job finds it.
struct Module {
    /// Where the job runs, relative to the config root.
    working_dir: String,
    /// `VERGENCE_TF_MODULE`: the directory to `cd` to, or the source.
    location: String,
    /// `dir` or `source` (`terraform init -from-module`).
    kind: &'static str,
}

impl<'a> Checker<'a> {
    /// Checks a runtime with a `terraform` block; `None` when it has
    /// errors, all reported.
    pub(super) fn terraform_runtime(
        &mut self,
        document: &'a ParsedDocument,
        doc: &RuntimeDoc,
        tf: &TerraformRuntimeDoc,
    ) -> Option<Runtime> {
        let source = &document.source;
        let root = FieldPath::root("runtime");
        let path = root.key("terraform");
        let before = self.errors.len();
        // Its jobs are Vergence's: commands of its own would not run.
        self.keys_without_effect(
            source,
            doc,
            "a terraform",
            "plans and applies its module itself",
            &["runner", "parameters"],
        );
        let (runner, kind) = self.terraform_runner(source, &root, doc, tf);
        let params = self.params(source, &root, &doc.parameters, SecretParams::Allowed);
        let module = self.terraform_module_of(source, &path, tf, kind, doc.name.as_ref());
        let written = [("module", &tf.module), ("path", &tf.path)]
            .into_iter()
            .find_map(|(key, raw)| Some((path.key(key), raw.as_deref()?)));
        if let (RunnerKind::Local, Some((at, raw))) = (kind, &written) {
            let image = tf.image.as_deref();
            self.local_terraform(source, &doc.name, (at, raw), image, &document.dir);
        }
        let owner = format!("runtime {}", doc.name);
        let scope = TemplateScope {
            params: &params,
            owner: &owner,
        };
        let mut uses = Vec::new();
        let env = self.terraform_env(source, &path, tf, &scope, &mut uses);
        let backend = self.one_of(
            source,
            &path,
            ("backend", &tf.backend),
            ("backendConfig", &tf.backend_config),
        );
        let backend_args = self.backend_args(source, &path, backend, &scope, &mut uses);
        let image = tf.image.as_ref().and_then(|raw| {
            self.job_template(source, &scope, &path.key("image"), raw, false, &mut uses)
        });
        let retry_policy =
            self.retry_policy(source, &path.key("retryPolicy"), tf.retry_policy.as_ref());
        self.runtime_sources
            .insert(doc.name.clone(), RuntimeSource::new(source, uses));
        if self.errors.len() != before {
            return None;
        }
        let jobs = TerraformJobs {
            module: module?,
            env: env?,
            backend_args,
            image,
            timeout: tf.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        };
        Some(Runtime {
            name: doc.name.clone(),
            runner: runner?,
            params,
            apply: jobs.job("apply", Vec::new()),
            retryable_exit_codes: Vec::new(),
            retry_policy,
            fetch: Some(FetchTemplate {
                job: jobs.job("plan", vec![PLAN_FILE.to_owned(), PLAN_JSON.to_owned()]),
                mode: FetchMode::TerraformPlan,
                poll_interval: tf.poll_interval.map_or(DEFAULT_POLL_INTERVAL, |d| d.0),
                steady_state_poll_interval: tf
                    .steady_state_poll_interval
                    .map_or(DEFAULT_STEADY_STATE_POLL_INTERVAL, |d| d.0),
            }),
            get_info: None,
            convergence_grace_period: doc
                .convergence_grace_period
                .map_or(DEFAULT_GRACE_PERIOD, |d| d.0),
            require_approval_before_apply: doc.require_approval_before_apply.unwrap_or(false),
            kubernetes: None,
            ecs: None,
            cloud_run: None,
        })
    }

    /// The runner, written in the terraform block or at `runtime.runner`
    /// (not both), and its kind.
    fn terraform_runner(
        &mut self,
        source: &Source,
        root: &FieldPath,
        doc: &RuntimeDoc,
        tf: &TerraformRuntimeDoc,
    ) -> (Option<RunnerSpec>, RunnerKind) {
        let path = root.key("terraform");
        let (owner, runner) = match (&doc.runner, &tf.runner) {
            (Some(_), Some(_)) => {
                self.err(
                    source,
                    &path.key("runner"),
                    "the runner is given twice: here and at runtime.runner; keep one",
                );
                (root, doc.runner.as_ref())
            }
            (None, Some(r)) => (&path, Some(r)),
            (r, None) => (root, r.as_ref()),
        };
        let by = RunnerUser::Runtime(doc.name.clone());
        let spec = self.runner(source, owner, runner, by);
        (spec, runner.map_or(RunnerKind::Local, RunnerDoc::kind))
    }

    /// The module (required), and an image where the runner runs containers.
    fn terraform_module_of(
        &mut self,
        source: &Source,
        path: &FieldPath,
        tf: &TerraformRuntimeDoc,
        kind: RunnerKind,
        runtime: &str,
    ) -> Option<Module> {
        if kind != RunnerKind::Local && tf.image.is_none() {
            self.err(
                source,
                &path.key("image"),
                format!(
                    "the {kind} runner runs a container: set image to one with terraform and vergence-wrapper (the plan goes from fetch to apply as a file)"
                ),
            );
        }
        match self.one_of(source, path, ("module", &tf.module), ("path", &tf.path)) {
            Some((key, raw)) => self.terraform_module(source, &path.key(key), raw, kind, runtime),
            None => {
                if tf.module.is_none() && tf.path.is_none() {
                    self.err(
                        source,
                        &path.key("module"),
                        "required: the module to plan and apply: ./dir (a directory of the config, relative to this file), /dir on the runner, or a module source (git::https://…)",
                    );
                }
                None
            }
        }
    }

    /// The one of two keys that mean the same that is given; both is an error.
    fn one_of<'v, T>(
        &mut self,
        source: &Source,
        path: &FieldPath,
        first: (&'static str, &'v Option<T>),
        second: (&'static str, &'v Option<T>),
    ) -> Option<(&'static str, &'v T)> {
        match (first.1, second.1) {
            (Some(_), Some(_)) => {
                self.err(
                    source,
                    &path.key(second.0),
                    format!(
                        "'{}' and '{}' are the same setting; keep one",
                        first.0, second.0
                    ),
                );
                None
            }
            (Some(v), None) => Some((first.0, v)),
            (None, Some(v)) => Some((second.0, v)),
            (None, None) => None,
        }
    }

    /// Where the module is: `./dir` is a directory of the config (pushed
    /// with it, so only the local runner reaches it), `/dir` a directory on
    /// the runner, anything else a source `terraform init -from-module`
    /// downloads.
    fn terraform_module(
        &mut self,
        source: &Source,
        path: &FieldPath,
        raw: &str,
        runner: RunnerKind,
        runtime: &str,
    ) -> Option<Module> {
        let document_dir = source
            .file
            .rsplit_once('/')
            .map_or("", |(d, _)| d)
            .to_owned();
        if let Some(why) = self.not_a_module_source(&document_dir, raw) {
            self.err(source, path, format!("runtime {runtime}: {why}"));
            return None;
        }
        if raw.starts_with("./") || raw.starts_with("../") || raw == "." {
            let Some(dir) = manifests_dir(&source.file, raw) else {
                self.err(
                    source,
                    path,
                    format!("{raw:?} must be a directory inside the config directory"),
                );
                return None;
            };
            if runner != RunnerKind::Local {
                self.err(
                    source,
                    path,
                    format!(
                        "{raw:?} is a directory of the config, which only the local runner reaches; on the {runner} runner give a path in the image (/module) or a module source terraform can download (git::https://…)"
                    ),
                );
                return None;
            }
            return Some(Module {
                working_dir: dir,
                location: ".".into(),
                kind: "dir",
            });
        }
        if raw.trim().is_empty() {
            self.err(source, path, "must not be empty");
            return None;
        }
        let kind = if raw.starts_with('/') {
            "dir"
        } else {
            "source"
        };
        Some(Module {
            working_dir: document_dir,
            location: raw.to_owned(),
            kind,
        })
    }

    /// Why `raw` is no module source Terraform reads, for what a config
    /// means by a relative path written without `./` (`network`,
    /// `modules/network`): Terraform reads a local directory only from
    /// `./` or `../`, and fails every fetch with "Invalid module source
    /// address" otherwise. A single bare word is never a source; a path of
    /// two words is one only as a bucket's address (`bucket.s3…/key`), and
    /// is refused only when the config has such a directory. Registry
    /// addresses (`hashicorp/consul/aws`), URLs, `git::…`, `github.com/…`
    /// and absolute paths are left to Terraform.
    fn not_a_module_source(&self, document_dir: &str, raw: &str) -> Option<String> {
        let address = raw.trim();
        if address.is_empty()
            || address.starts_with(['.', '/', '{'])
            || address.contains(':')
            || address.contains("//")
        {
            return None;
        }
        let words = address.trim_end_matches('/').split('/').count();
        let local = crate::config::resolve_in(document_dir, address)?;
        let exists = self.config_has_dir(&local);
        let written = format!("./{}", address.trim_end_matches('/'));
        match (words, exists) {
            (1 | 2, true) => Some(format!(
                "{raw:?} is not a module source Terraform reads; the directory {local} of the config is written {written:?} (Terraform reads a local directory only from ./ or ../)"
            )),
            (1, false) => Some(format!(
                "{raw:?} is not a module source Terraform reads: a directory of the config is written with ./ ({written:?}, relative to this file), a registry module as NAMESPACE/NAME/PROVIDER, other sources as git::https://…"
            )),
            _ => None,
        }
    }

    /// Whether the config has the directory `dir` (relative to its root):
    /// on disk beside the config when it was read from a directory, or as
    /// the folder of one of its files (all a pushed config has).
    fn config_has_dir(&self, dir: &str) -> bool {
        let prefix = format!("{dir}/");
        if self.bundle.files.keys().any(|f| f.starts_with(&prefix)) {
            return true;
        }
        self.bundle
            .root
            .as_ref()
            .is_some_and(|root| std::path::Path::new(root).join(dir).is_dir())
    }

    /// The job's environment: Terraform's automation settings, the
    /// workspace and `TF_VAR_` per variable. `None` when a template is
    /// wrong (reported).
    fn terraform_env(
        &mut self,
        source: &Source,
        path: &FieldPath,
        tf: &TerraformRuntimeDoc,
        scope: &TemplateScope<'_>,
        uses: &mut Vec<ConstantUse>,
    ) -> Option<BTreeMap<String, Template>> {
        let before = self.errors.len();
        let mut env = BTreeMap::from([
            ("TF_IN_AUTOMATION".to_owned(), literal("1")),
            ("TF_INPUT".to_owned(), literal("0")),
        ]);
        let workspace_path = path.key("workspace");
        let workspace = tf.workspace.as_deref().unwrap_or(DEFAULT_WORKSPACE);
        if let Some(t) = self.job_template(source, scope, &workspace_path, workspace, false, uses) {
            env.insert("VERGENCE_TF_WORKSPACE".into(), t);
        }
        for (name, raw) in &tf.variables {
            let var_path = path.key("variables").key(name);
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                self.err(
                    source,
                    &var_path,
                    format!("{name:?} is not a variable name Vergence can pass (letters, digits and _; it becomes TF_VAR_{name})"),
                );
                continue;
            }
            if let Some(t) = self.job_template(source, scope, &var_path, raw, true, uses) {
                env.insert(format!("TF_VAR_{name}"), t);
            }
        }
        (self.errors.len() == before).then_some(env)
    }

    /// `-backend-config=KEY=VALUE` arguments of `terraform init`.
    fn backend_args(
        &mut self,
        source: &Source,
        path: &FieldPath,
        backend: Option<(&'static str, &BTreeMap<String, String>)>,
        scope: &TemplateScope<'_>,
        uses: &mut Vec<ConstantUse>,
    ) -> Vec<Template> {
        let Some((key, settings)) = backend else {
            return Vec::new();
        };
        settings
            .iter()
            .filter_map(|(name, value)| {
                let at = path.key(key).key(name);
                let arg = format!("-backend-config={name}={value}");
                self.job_template(source, scope, &at, &arg, false, uses)
            })
            .collect()
    }
}

fn literal(text: &str) -> Template {
    Template::literal(text)
}
