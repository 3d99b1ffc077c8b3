//! `vergence release`: a new version of a service, with its parameters.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow, bail};

use super::{Context, apply_summary, compile, load_bundle, name, optional_name};
use crate::args::ReleaseArgs;
use crate::backend::{Access, Backend, ConfigPush, NoState, Place, Pushed};

pub async fn run(ctx: &Context<'_>, args: &ReleaseArgs) -> Result<u8> {
    let params = parse_params(&args.params)?;
    let version = args
        .version
        .as_ref()
        .or(args.version_flag.as_ref())
        .ok_or_else(|| anyhow!("give the version: vergence release SERVICE VERSION"))?;
    let service = name(&args.service, "SERVICE")?;
    let application = optional_name(args.application.as_deref(), "--app")?;
    let backend = match ctx.backend(Access::Existing) {
        Ok(backend) => backend,
        // Before the first `up`, a config given with --config is stored
        // first, as `configs push` would, so that CI can release into a
        // fresh state.
        Err(e) if e.is::<NoState>() && ctx.global.config_given => {
            match store_config_first(ctx).await? {
                Some(backend) => backend,
                None => return Ok(1),
            }
        }
        Err(e) if e.is::<NoState>() => bail!(
            "no Vergence state at {}; pass --config DIR to store that config first, or run `vergence up` in the config directory first (or pass --state)",
            ctx.global.state_path().display()
        ),
        Err(e) => return Err(e),
    };
    let release = backend
        .release(application, &service, version, &params)
        .await?;
    let (app, service, version) = (&release.application, &release.service, &release.version);
    match backend.place() {
        Place::Local => println!(
            "release {version} of {app}/{service} recorded; run `vergence up` (or keep `vergence up --watch` running) to roll it out"
        ),
        Place::Server => println!(
            "release {version} of {app}/{service} recorded; the server rolls it out (follow it with `vergence status --app {app}`)"
        ),
    }
    Ok(0)
}

/// `--param NAME=VALUE`, each name at most once.
fn parse_params(raw: &[String]) -> Result<BTreeMap<String, String>> {
    let mut params = BTreeMap::new();
    for pair in raw {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| anyhow!("--param {pair:?}: write NAME=VALUE"))?;
        if params.insert(name.to_owned(), value.to_owned()).is_some() {
            bail!("--param {name} is given twice");
        }
    }
    Ok(params)
}

/// Stores the config in `--config` into a new state; `None` when the
/// config has errors (printed).
async fn store_config_first(ctx: &Context<'_>) -> Result<Option<Box<dyn Backend>>> {
    let bundle = load_bundle(ctx.global, &ctx.global.config)?;
    let Some(model) = compile(&bundle)? else {
        return Ok(None);
    };
    let backend = ctx.backend(Access::Create)?;
    let pushed = backend
        .push_config(ConfigPush {
            bundle,
            application: None,
            validate_only: false,
            compiled: Some(model),
        })
        .await?;
    if let Pushed::Applied(report) = pushed {
        println!(
            "no Vergence state yet: stored the config in {} ({})",
            ctx.global.config.display(),
            apply_summary(&report)
        );
    }
    Ok(Some(backend))
}
