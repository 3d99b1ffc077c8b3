//! `vergence token create|list|revoke`: API tokens, in the local state, a
//! deployment's table (`--dynamodb-table`), or through the API.

use anyhow::{Result, anyhow, bail};
use vergence_model::TokenSubject;

use super::Context;
use crate::args::{TokenCommand, TokenSubjectArgs};
use crate::backend::Access;
use crate::output;

pub async fn run(ctx: &Context<'_>, command: &TokenCommand) -> Result<u8> {
    match command {
        TokenCommand::Create(args) => {
            let subject = token_subject(&args.subject)?;
            // Tokens may come before any config: creating one creates the state.
            let backend = ctx.token_backend(Access::Create).await?;
            let (token, full) = backend
                .create_token(&subject, &args.scopes, args.description.clone())
                .await?;
            // Only the token on stdout, so `TOKEN=$(vergence token create …)` works.
            println!("{full}");
            let can = match &subject {
                TokenSubject::Application(_) => {
                    format!("with scope(s) {}", output::scope_list(&token.scopes))
                }
                TokenSubject::Agent(_) => "that can do only that agent's work".to_owned(),
                TokenSubject::Platform => {
                    "that pushes and rolls back configs, shared parts included, and nothing else"
                        .to_owned()
                }
            };
            eprintln!(
                "created token {} for {subject} {can}; store it now: it cannot be shown again",
                token.id,
            );
        }
        TokenCommand::List(args) => {
            let subject = token_subject(&args.subject)?;
            let backend = ctx.token_backend(Access::Existing).await?;
            let tokens = backend.list_tokens(&subject).await?;
            output::tokens_table(&mut std::io::stdout().lock(), &tokens)?;
        }
        TokenCommand::Revoke(args) => {
            let backend = ctx.token_backend(Access::Existing).await?;
            backend.revoke_token(&args.id).await?;
            println!(
                "revoked token {}; requests with it are refused from now on",
                args.id
            );
        }
    }
    Ok(0)
}

/// The application or agent a token command names.
fn token_subject(args: &TokenSubjectArgs) -> Result<TokenSubject> {
    match (&args.application, &args.agent) {
        (Some(application), _) => Ok(TokenSubject::Application(
            application.parse().map_err(|e| anyhow!("--app: {e}"))?,
        )),
        (None, Some(agent)) => Ok(TokenSubject::Agent(
            agent.parse().map_err(|e| anyhow!("--agent: {e}"))?,
        )),
        (None, None) if args.platform => Ok(TokenSubject::Platform),
        (None, None) => bail!("name whose token it is: --app APP, --agent NAME or --platform"),
    }
}
