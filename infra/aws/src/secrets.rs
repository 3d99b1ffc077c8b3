//! Reads the secrets notifications name, when a message is sent: SSM
//! Parameter Store parameters (SecureString decrypted) and Secrets Manager
//! secrets (ECS's `:json-key:version-stage:version-id` after the ARN
//! selects a key of a JSON secret and a version, as it does for tasks).
//! The values are handed to the notifier and never stored or logged;
//! failures say what kind (not found, access denied, unavailable) in the
//! service's own words.

use std::sync::Arc;

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use tokio::sync::OnceCell;
use vergence_model::SecretRef;
use vergence_model::notification::{SecretFailure, SecretFailureKind, SecretReader};

use crate::error::is_retryable;

/// The clients secrets are read with, in the deployment's own region; an
/// ARN in another region gets a client for that region.
#[derive(Clone, Debug)]
struct Clients {
    ssm: aws_sdk_ssm::Client,
    secrets_manager: aws_sdk_secretsmanager::Client,
}

/// Reads `awsSsmParameter` and `awsSecretsManager` references with the
/// identity of the process (the scheduler function's role; the user's
/// credentials for `vergence up`/`serve`).
#[derive(Clone)]
pub struct AwsSecretReader {
    clients: Arc<OnceCell<Clients>>,
    /// Added to an access-denied failure: where the reader's rights are
    /// granted (the stack parameters, for the scheduler function).
    access_denied_hint: Option<String>,
}

impl std::fmt::Debug for AwsSecretReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsSecretReader")
            .field("loaded", &self.clients.initialized())
            .finish_non_exhaustive()
    }
}

impl AwsSecretReader {
    pub fn new(ssm: aws_sdk_ssm::Client, secrets_manager: aws_sdk_secretsmanager::Client) -> Self {
        Self {
            clients: Arc::new(OnceCell::new_with(Some(Clients {
                ssm,
                secrets_manager,
            }))),
            access_denied_hint: None,
        }
    }

    /// Clients from the standard AWS environment (region, credentials),
    /// loaded when the first secret is read: a `vergence up` whose
    /// notifications read only `fromEnv` never touches AWS.
    pub fn from_environment() -> Self {
        Self {
            clients: Arc::new(OnceCell::new()),
            access_denied_hint: None,
        }
    }

    /// Says where the reader's rights come from when it is denied.
    pub fn with_access_denied_hint(mut self, hint: impl Into<String>) -> Self {
        self.access_denied_hint = Some(hint.into());
        self
    }

    async fn clients(&self) -> &Clients {
        self.clients
            .get_or_init(|| async {
                let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
                Clients {
                    ssm: aws_sdk_ssm::Client::new(&sdk),
                    secrets_manager: aws_sdk_secretsmanager::Client::new(&sdk),
                }
            })
            .await
    }

    async fn ssm_parameter(&self, name: &str) -> Result<String, SecretFailure> {
        let mut client = self.clients().await.ssm.clone();
        if let Some(region) =
            arn_region(name).filter(|r| Some(*r) != region_of(client.config().region()))
        {
            let config = client
                .config()
                .to_builder()
                .region(aws_sdk_ssm::config::Region::new(region.to_owned()))
                .build();
            client = aws_sdk_ssm::Client::from_conf(config);
        }
        // GetParameter takes the name or, for a parameter of another
        // account, the ARN.
        let answer = client
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await
            .map_err(|e| self.failure(e))?;
        answer
            .parameter()
            .and_then(|p| p.value())
            .map(str::to_owned)
            .ok_or_else(|| {
                SecretFailure::new(
                    SecretFailureKind::Invalid,
                    "GetParameter answered without a value",
                )
            })
    }

    async fn secrets_manager_secret(&self, reference: &str) -> Result<String, SecretFailure> {
        let secret = SecretsManagerRef::parse(reference)?;
        let mut client = self.clients().await.secrets_manager.clone();
        if Some(secret.region.as_str()) != region_of(client.config().region()) {
            let config = client
                .config()
                .to_builder()
                .region(aws_sdk_secretsmanager::config::Region::new(
                    secret.region.clone(),
                ))
                .build();
            client = aws_sdk_secretsmanager::Client::from_conf(config);
        }
        let answer = client
            .get_secret_value()
            .secret_id(&secret.arn)
            .set_version_stage(secret.version_stage.clone())
            .set_version_id(secret.version_id.clone())
            .send()
            .await
            .map_err(|e| self.failure(e))?;
        let Some(text) = answer.secret_string() else {
            return Err(SecretFailure::new(
                SecretFailureKind::Invalid,
                "it holds binary data (SecretBinary); notifications need text (SecretString)",
            ));
        };
        match &secret.json_key {
            None => Ok(text.to_owned()),
            Some(key) => json_key(text, key),
        }
    }

    /// What kind of failure an SDK error is, in the service's own words.
    fn failure<E>(&self, error: SdkError<E, HttpResponse>) -> SecretFailure
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let kind = failure_kind(&error);
        let mut detail = match (error.code(), error.message()) {
            (Some(code), Some(message)) if !message.is_empty() => format!("{code}: {message}"),
            (Some(code), _) => code.to_owned(),
            _ => DisplayErrorContext(&error).to_string(),
        };
        if let (SecretFailureKind::AccessDenied, Some(hint)) = (kind, &self.access_denied_hint) {
            detail = format!("{detail} ({hint})");
        }
        SecretFailure::new(kind, detail)
    }
}

/// Codes that mean the secret (or the version asked for) is not there.
const NOT_FOUND: &[&str] = &[
    "ParameterNotFound",
    "ParameterVersionNotFound",
    "ResourceNotFoundException",
];

/// Codes that mean the reader may not read it: its policy, the key's
/// policy, or credentials that are not (or no longer) valid.
const DENIED: &[&str] = &[
    "AccessDeniedException",
    "AccessDenied",
    "DecryptionFailure",
    "KMSAccessDeniedException",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "MissingAuthenticationTokenException",
];

fn failure_kind<E: ProvideErrorMetadata>(error: &SdkError<E, HttpResponse>) -> SecretFailureKind {
    let code = error.code().unwrap_or_default();
    if NOT_FOUND.contains(&code) {
        SecretFailureKind::NotFound
    } else if DENIED.contains(&code) {
        SecretFailureKind::AccessDenied
    } else if is_retryable(error) {
        SecretFailureKind::Unavailable
    } else {
        SecretFailureKind::Invalid
    }
}

#[async_trait]
impl SecretReader for AwsSecretReader {
    async fn read(&self, secret: &SecretRef) -> Result<String, SecretFailure> {
        match secret {
            SecretRef::AwsSsmParameter(name) => self.ssm_parameter(name).await,
            SecretRef::AwsSecretsManager(reference) => self.secrets_manager_secret(reference).await,
            other => Err(SecretFailure::new(
                SecretFailureKind::NoReader,
                format!("{} is not read from AWS", other.describe()),
            )),
        }
    }
}

/// `arn:PARTITION:secretsmanager:REGION:ACCOUNT:secret:NAME`, and ECS's
/// optional `:json-key:version-stage:version-id` after it (each may be
/// empty).
#[derive(Clone, Debug, PartialEq, Eq)]
struct SecretsManagerRef {
    arn: String,
    region: String,
    json_key: Option<String>,
    version_stage: Option<String>,
    version_id: Option<String>,
}

impl SecretsManagerRef {
    fn parse(reference: &str) -> Result<Self, SecretFailure> {
        let parts: Vec<&str> = reference.split(':').collect();
        let valid = parts.len() >= 7
            && parts.len() <= 10
            && parts[0] == "arn"
            && parts[2] == "secretsmanager"
            && !parts[3].is_empty()
            && parts[5] == "secret"
            && !parts[6].is_empty();
        if !valid {
            return Err(SecretFailure::new(
                SecretFailureKind::Invalid,
                "not a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME, \
                 optionally :json-key:version-stage:version-id)",
            ));
        }
        let part = |i: usize| {
            parts
                .get(i)
                .filter(|p| !p.is_empty())
                .map(|p| (*p).to_owned())
        };
        Ok(Self {
            arn: parts[..7].join(":"),
            region: parts[3].to_owned(),
            json_key: part(7),
            version_stage: part(8),
            version_id: part(9),
        })
    }
}

/// The string value of `key` in a JSON object secret. Errors never quote
/// the secret.
fn json_key(text: &str, key: &str) -> Result<String, SecretFailure> {
    let invalid = |why: String| SecretFailure::new(SecretFailureKind::Invalid, why);
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|_| {
            invalid(format!(
                "the reference names the JSON key {key:?}, but the secret is not a JSON object"
            ))
        })?;
    match object.get(key) {
        Some(serde_json::Value::String(value)) => Ok(value.clone()),
        Some(_) => Err(invalid(format!(
            "the JSON key {key:?} of the secret is not a string"
        ))),
        None => Err(invalid(format!("the secret has no JSON key {key:?}"))),
    }
}

/// The region of an ARN (`arn:PARTITION:SERVICE:REGION:…`).
fn arn_region(name: &str) -> Option<&str> {
    let mut parts = name.strip_prefix("arn:")?.split(':');
    parts.nth(2).filter(|r| !r.is_empty())
}

fn region_of(region: Option<&aws_sdk_ssm::config::Region>) -> Option<&str> {
    region.map(|r| r.as_ref())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use aws_sdk_ssm::error::ErrorMetadata;
    use aws_sdk_ssm::operation::get_parameter::GetParameterError;
    use aws_smithy_types::body::SdkBody;

    use super::*;

    fn service_error(status: u16, code: &str) -> SdkError<GetParameterError, HttpResponse> {
        let meta = ErrorMetadata::builder()
            .code(code)
            .message("the service's words")
            .build();
        SdkError::service_error(
            GetParameterError::generic(meta),
            HttpResponse::new(status.try_into().unwrap(), SdkBody::empty()),
        )
    }

    #[test]
    fn service_errors_are_classified_by_their_code() {
        for (status, code, kind) in [
            (400, "ParameterNotFound", SecretFailureKind::NotFound),
            (
                400,
                "ResourceNotFoundException",
                SecretFailureKind::NotFound,
            ),
            (
                400,
                "AccessDeniedException",
                SecretFailureKind::AccessDenied,
            ),
            (400, "DecryptionFailure", SecretFailureKind::AccessDenied),
            (400, "ThrottlingException", SecretFailureKind::Unavailable),
            (500, "InternalServerError", SecretFailureKind::Unavailable),
            (400, "ValidationException", SecretFailureKind::Invalid),
        ] {
            assert_eq!(failure_kind(&service_error(status, code)), kind, "{code}");
        }
        let reader = AwsSecretReader::from_environment()
            .with_access_denied_hint("granted by the stack parameter NotificationParameterPaths");
        assert_eq!(
            reader
                .failure(service_error(400, "AccessDeniedException"))
                .detail,
            "AccessDeniedException: the service's words (granted by the stack parameter NotificationParameterPaths)"
        );
    }

    #[test]
    fn a_secrets_manager_reference_may_name_a_json_key_and_a_version() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hook-AbCdEf";
        let plain = SecretsManagerRef::parse(arn).unwrap();
        assert_eq!(
            (plain.arn.as_str(), plain.region.as_str()),
            (arn, "eu-west-1")
        );
        assert_eq!(plain.json_key, None);
        let keyed = SecretsManagerRef::parse(&format!("{arn}:signing:AWSPREVIOUS:")).unwrap();
        assert_eq!(keyed.arn, arn);
        assert_eq!(keyed.json_key.as_deref(), Some("signing"));
        assert_eq!(keyed.version_stage.as_deref(), Some("AWSPREVIOUS"));
        assert_eq!(keyed.version_id, None);
        assert!(SecretsManagerRef::parse("hook-secret").is_err());
        assert!(SecretsManagerRef::parse(&format!("{arn}:a:b:c:d")).is_err());
    }

    #[test]
    fn a_json_key_is_read_from_an_object_without_quoting_the_secret() {
        let text = r#"{"url":"https://hooks.example.com/T0/B0/s3cret","n":1}"#;
        assert_eq!(
            json_key(text, "url").unwrap(),
            "https://hooks.example.com/T0/B0/s3cret"
        );
        for (text, key) in [(text, "n"), (text, "missing"), ("s3cret-plain", "url")] {
            let failure = json_key(text, key).unwrap_err();
            assert_eq!(failure.kind, SecretFailureKind::Invalid);
            assert!(!failure.detail.contains("s3cret"), "{failure}");
        }
    }

    #[test]
    fn the_region_of_an_arn_is_its_fourth_part() {
        assert_eq!(
            arn_region("arn:aws:ssm:eu-west-1:1:parameter/x"),
            Some("eu-west-1")
        );
        assert_eq!(arn_region("/vergence/hook-url"), None);
    }
}
