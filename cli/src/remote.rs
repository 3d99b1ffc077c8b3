//! Remote mode: with `--endpoint`, `status`, `release`, `approve`, `events`
//! and `configs push` talk to a Vergence API (deployed, or `vergence serve`)
//! instead of the local state, and print exactly what local mode prints.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use vergence_api::wire::{
    ApprovalRequest, ConfigPushRequest, ErrorBody, ErrorResponse, EventsResponse, ReleaseRequest,
    StatusResponse, ValidationReport,
};
use vergence_api::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_webhook};
use vergence_engine::control::ApplyReport;
use vergence_model::{ApplicationName, Approval, Release, ReleaseChannelName, ServiceName};

use crate::args::{
    ApproveArgs, Command, ConfigsCommand, ConfigsPushArgs, EventsArgs, Filter, Global, Output,
    ReleaseArgs, StatusArgs,
};
use crate::{commands, output};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A config upload on a cold Lambda can take a while; nothing takes longer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `command` against the API at `--endpoint`.
pub async fn run(global: &Global, command: &Command) -> Result<u8> {
    let remote = Remote::new(global)?;
    match command {
        Command::Status(args) => status(&remote, args).await,
        Command::Release(args) => release(&remote, args).await,
        Command::Approve(args) => approve(&remote, args).await,
        Command::Events(args) => events(&remote, args).await,
        Command::Configs(ConfigsCommand::Push(args)) => push_config(global, &remote, args).await,
        Command::Configs(ConfigsCommand::List(args)) => {
            crate::configs::list_remote(&remote, args).await
        }
        Command::Configs(ConfigsCommand::Rollback(args)) => {
            crate::configs::rollback_remote(&remote, args).await
        }
        // Validation only reads the config files; no state is involved.
        Command::Validate => commands::validate(global),
        Command::Schema => commands::schema(),
        Command::Completions(args) => commands::completions(args),
        other => bail!(
            "`vergence {}` works on local state only; run it without --endpoint (and without VERGENCE_ENDPOINT)",
            local_only_name(other)
        ),
    }
}

fn local_only_name(command: &Command) -> &'static str {
    match command {
        Command::Up(_) => "up",
        Command::Plan => "plan",
        Command::Serve(_) => "serve",
        Command::Token(_) => "token",
        Command::Alert(_) => "alert",
        Command::Pause(_) => "pause",
        Command::Resume(_) => "resume",
        Command::Pin(_) => "pin",
        Command::Unpin(_) => "unpin",
        Command::Rollback(_) => "rollback",
        Command::Explain(_) => "explain",
        _ => "this command",
    }
}

/// An answer other than 2xx, as the API described it; printed as
/// `403 forbidden: token … lacks scope approve`.
#[derive(Debug)]
struct ApiFailure {
    status: StatusCode,
    error: ErrorBody,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.error.code,
            self.error.message
        )
    }
}

impl std::error::Error for ApiFailure {}

pub(crate) struct Remote {
    http: reqwest::Client,
    /// The endpoint without a trailing '/'; may include a path (an API
    /// Gateway stage).
    base: String,
    token: Option<String>,
    webhook_secret: Option<String>,
}

impl Remote {
    fn new(global: &Global) -> Result<Self> {
        let endpoint = global.endpoint.as_deref().unwrap_or_default();
        let url =
            reqwest::Url::parse(endpoint).map_err(|e| anyhow!("--endpoint {endpoint:?}: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            bail!("--endpoint {endpoint:?}: use an http:// or https:// URL");
        }
        let http = reqwest::Client::builder()
            .user_agent(concat!("vergence/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("setting up the HTTP client")?;
        Ok(Self {
            http,
            base: endpoint.trim_end_matches('/').to_owned(),
            token: global.token.clone(),
            webhook_secret: global.webhook_secret.clone(),
        })
    }

    pub(crate) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, format!("{}{path}", self.base))
    }

    /// A JSON body, signed when a webhook secret is given.
    pub(crate) fn json_body(
        &self,
        request: RequestBuilder,
        body: &impl Serialize,
        sign: bool,
    ) -> Result<RequestBuilder> {
        let bytes = serde_json::to_vec(body).context("encoding the request")?;
        let mut request =
            request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let (true, Some(secret)) = (sign, self.webhook_secret.as_deref()) {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .context("the system clock is before 1970")?
                .as_secs();
            let timestamp = i64::try_from(now).context("the system clock is out of range")?;
            let signature = sign_webhook(secret, timestamp, &bytes)?;
            request = request
                .header(TIMESTAMP_HEADER, timestamp.to_string())
                .header(SIGNATURE_HEADER, signature);
        }
        Ok(request.body(bytes))
    }

    /// Sends with the token; a 2xx answer is decoded, anything else becomes
    /// an [`ApiFailure`].
    pub(crate) async fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T> {
        let token = self.token.as_deref().ok_or_else(|| {
            anyhow!("--endpoint needs a token: pass --token or set VERGENCE_TOKEN")
        })?;
        let response = request
            .bearer_auth(token)
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.base))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("reading the answer of {}", self.base))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .with_context(|| format!("unexpected answer from {} ({status})", self.base));
        }
        let error = match serde_json::from_slice::<ErrorResponse>(&bytes) {
            Ok(answer) => answer.error,
            // Not our API (a proxy or gateway page): show the start of it.
            Err(_) => ErrorBody {
                code: status.canonical_reason().unwrap_or("error").to_lowercase(),
                message: String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                    .trim()
                    .to_owned(),
                field: None,
                errors: Vec::new(),
            },
        };
        Err(ApiFailure { status, error }.into())
    }
}

fn required_app(application: Option<&str>) -> Result<ApplicationName> {
    let raw = application.ok_or_else(|| {
        anyhow!("--app is required with --endpoint: the API serves one application at a time")
    })?;
    raw.parse().map_err(|e| anyhow!("--app: {e}"))
}

/// The query of a status or events request, with names checked here so a
/// typo is reported like in local mode.
fn filter_query(filter: &Filter) -> Result<Vec<(&'static str, String)>> {
    let mut query = Vec::new();
    if let Some(service) = &filter.service {
        let service: ServiceName = service.parse().map_err(|e| anyhow!("--service: {e}"))?;
        query.push(("service", service.to_string()));
    }
    if let Some(channel) = &filter.release_channel {
        let channel: ReleaseChannelName = channel
            .parse()
            .map_err(|e| anyhow!("--release-channel: {e}"))?;
        query.push(("releaseChannel", channel.to_string()));
    }
    Ok(query)
}

async fn status(remote: &Remote, args: &StatusArgs) -> Result<u8> {
    let app = required_app(args.filter.application.as_deref())?;
    let query = filter_query(&args.filter)?;
    let status: StatusResponse = remote
        .call(
            remote
                .request(Method::GET, &format!("/v1/applications/{app}/status"))
                .query(&query),
        )
        .await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Json => output::views_json(&mut out, status)?,
        Output::Table if status.instances.is_empty() => writeln!(out, "no instances match")?,
        Output::Table => {
            output::views_table(&mut out, &status.instances)?;
            output::agents_table(&mut out, &status.agents)?;
        }
    }
    Ok(0)
}

async fn events(remote: &Remote, args: &EventsArgs) -> Result<u8> {
    let app = required_app(args.filter.application.as_deref())?;
    let mut query = filter_query(&args.filter)?;
    query.push(("limit", args.limit.to_string()));
    let answer: EventsResponse = remote
        .call(
            remote
                .request(Method::GET, &format!("/v1/applications/{app}/events"))
                .query(&query),
        )
        .await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Json => {
            serde_json::to_writer_pretty(&mut out, &answer)?;
            writeln!(out)?;
        }
        Output::Table => output::events_table(&mut out, &answer.events)?,
    }
    Ok(0)
}

async fn release(remote: &Remote, args: &ReleaseArgs) -> Result<u8> {
    let params = commands::parse_params(&args.params)?;
    let version = args
        .version
        .as_deref()
        .or(args.version_flag.as_deref())
        .ok_or_else(|| anyhow!("give the version: vergence release SERVICE VERSION"))?;
    let service: ServiceName = args.service.parse().map_err(|e| anyhow!("SERVICE: {e}"))?;
    let app = required_app(args.application.as_deref())?;
    let body = ReleaseRequest {
        version: Some(version.to_owned()),
        params,
    };
    let path = format!("/v1/applications/{app}/services/{service}/releases");
    let request = remote.json_body(remote.request(Method::POST, &path), &body, true)?;
    let release: Release = remote.call(request).await?;
    println!(
        "release {} of {}/{} recorded; the server rolls it out (follow it with `vergence status --app {}`)",
        release.version, release.application, release.service, release.application
    );
    Ok(0)
}

async fn approve(remote: &Remote, args: &ApproveArgs) -> Result<u8> {
    let app = required_app(Some(&args.application))?;
    let service: ServiceName = args
        .service
        .parse()
        .map_err(|e| anyhow!("--service: {e}"))?;
    let channel: ReleaseChannelName = args
        .release_channel
        .parse()
        .map_err(|e| anyhow!("--release-channel: {e}"))?;
    let path =
        format!("/v1/applications/{app}/services/{service}/release-channels/{channel}/approvals");
    let body = ApprovalRequest {
        version: args.version.as_ref().map(ToString::to_string),
    };
    let request = remote.json_body(remote.request(Method::POST, &path), &body, false)?;
    let approval: Approval = remote.call(request).await?;
    match &approval.plan_sha256 {
        Some(plan) => println!(
            "approved {} of {service} for {channel}, bound to plan {} (a different plan needs a new approval)",
            approval.version,
            &plan[..12.min(plan.len())]
        ),
        None => println!("approved {} of {service} for {channel}", approval.version),
    }
    Ok(0)
}

async fn push_config(global: &Global, remote: &Remote, args: &ConfigsPushArgs) -> Result<u8> {
    let bundle = commands::load_bundle(args.dir.as_deref().unwrap_or(&global.config))?;
    let body = ConfigPushRequest {
        files: Some(bundle.files),
    };
    let mut query = Vec::new();
    if args.validate_only {
        query.push("validateOnly=true".to_owned());
    }
    if let Some(application) = args.application.as_deref() {
        let application: ApplicationName = application
            .parse()
            .map_err(|e| anyhow!("--app {application:?}: {e}"))?;
        query.push(format!("application={application}"));
    }
    let path = if query.is_empty() {
        "/v1/configs".to_owned()
    } else {
        format!("/v1/configs?{}", query.join("&"))
    };
    let request = remote.json_body(remote.request(Method::POST, &path), &body, false)?;
    let result = if args.validate_only {
        remote
            .call::<ValidationReport>(request)
            .await
            .map(|report| {
                format!(
                    "config is valid: {} application(s), {} runtime(s), {} service instance(s)",
                    report.applications.len(),
                    report.runtimes,
                    report.instances
                )
            })
    } else {
        remote
            .call::<ApplyReport>(request)
            .await
            .map(|report| crate::configs::push_summary(&report))
    };
    match result {
        Ok(line) => {
            println!("{line}");
            Ok(0)
        }
        Err(e) => match e.downcast_ref::<ApiFailure>() {
            // Like `vergence validate`: every error on its own line, exit 1.
            Some(failure) if failure.error.code == "invalidConfig" => {
                for error in &failure.error.errors {
                    eprintln!("{error}");
                }
                eprintln!("{}", failure.error.message);
                Ok(1)
            }
            _ => Err(e),
        },
    }
}
