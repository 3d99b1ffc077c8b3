//! The HTTP client of a Vergence API: the endpoint, the token, signed
//! bodies, and answers other than 2xx turned into one clear error.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use vergence_api::wire::{ErrorBody, ErrorResponse};
use vergence_api::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_webhook};

use crate::args::Global;
use crate::backend::InvalidConfig;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A config upload on a cold Lambda can take a while; nothing takes longer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// An answer other than 2xx, as the API described it; printed as
/// `403 forbidden: token … lacks scope approve`.
#[derive(Debug)]
pub struct ApiFailure {
    pub status: StatusCode,
    pub error: ErrorBody,
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

pub struct Client {
    http: reqwest::Client,
    /// The endpoint without a trailing '/'; may include a path (an API
    /// Gateway stage).
    base: String,
    token: Option<String>,
    webhook_secret: Option<String>,
}

impl Client {
    pub fn new(global: &Global) -> Result<Self> {
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

    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, format!("{}{path}", self.base))
    }

    /// A JSON body, signed when a webhook secret is given and `sign` asks.
    pub fn json_body(
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

    /// `method path` with a JSON body.
    pub async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T> {
        let request = self.json_body(self.request(method, path), body, false)?;
        self.call(request).await
    }

    /// `GET path?query`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T> {
        self.call(self.request(Method::GET, path).query(query))
            .await
    }

    /// Sends with the token; a 2xx answer is decoded, anything else becomes
    /// an [`ApiFailure`] (or, for a config with errors, [`InvalidConfig`]).
    pub async fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T> {
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
                more_errors: 0,
            },
        };
        // Like `vergence validate`: every error on its own line, exit 1.
        if error.code == "invalidConfig" {
            return Err(InvalidConfig {
                errors: error.errors,
                more: error.more_errors,
            }
            .into());
        }
        Err(ApiFailure { status, error }.into())
    }
}
