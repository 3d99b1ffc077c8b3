//! The commands with no state: `validate`, `schema` and `completions`.

use std::io::Write;

use anyhow::Result;

use super::{compile, load_bundle, print_config_errors, valid_summary, warn_of_bare_scripts};
use crate::args::{CompletionsArgs, Global, ValidateArgs};

/// `vergence validate`: checks the config in `--config` for the deployment
/// `--target` names, stores nothing. A serverless API refuses the same
/// configs, with the same errors.
pub fn validate(global: &Global, args: &ValidateArgs) -> Result<u8> {
    let bundle = load_bundle(global, &global.config)?;
    let Some(model) = compile(&bundle)? else {
        return Ok(1);
    };
    let target = args.target.into();
    let refused = model.target_errors(target);
    if !refused.is_empty() {
        print_config_errors(&refused.0, 0);
        return Ok(1);
    }
    warn_of_bare_scripts(model.as_ref(), &global.config, target);
    println!(
        "{}",
        valid_summary(
            model.applications().len(),
            model.runtime_count(),
            model.instance_keys().len()
        )
    );
    Ok(0)
}

/// `vergence schema`: the config's JSON Schema, generated from its types.
pub fn schema() -> Result<u8> {
    let schema = vergence_compiler::config_json_schema();
    let text = serde_json::to_string_pretty(&schema)?;
    println!("{text}");
    Ok(0)
}

/// `vergence completions SHELL`: the shell's completion script, from the
/// same command definition that parses arguments.
pub fn completions(args: &CompletionsArgs) -> Result<u8> {
    let mut command = <crate::args::Cli as clap::CommandFactory>::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "vergence", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(0)
}
