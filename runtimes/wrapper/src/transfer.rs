//! Moving files over presigned URLs: GET an input into a file, PUT bytes.
//! A URL is a credential, so messages name it without its query string.
//! Transient failures (no connection, a 5xx) are tried again twice.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ureq::http::Response;
use ureq::tls::{RootCerts, TlsConfig, TlsProvider};
use ureq::{Agent, Body};

/// How long one request may take, from connecting to the last byte.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Waits before the second and third attempts.
const BACKOFF: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];
/// How much of an error response's body a message quotes (S3 says why in it).
const ERROR_BODY_BYTES: u64 = 300;

/// An HTTP client for presigned URLs.
#[derive(Debug)]
pub struct Transfer {
    agent: Agent,
}

/// Why a request failed, and whether trying again may help.
struct Failure {
    message: String,
    transient: bool,
}

impl Transfer {
    pub fn new() -> Self {
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(RootCerts::WebPki)
            .unversioned_rustls_crypto_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .build();
        let config = Agent::config_builder()
            .tls_config(tls)
            .timeout_global(Some(REQUEST_TIMEOUT))
            // Statuses are read here, to quote the body of an error.
            .http_status_as_error(false)
            .build();
        Self {
            agent: config.into(),
        }
    }

    /// Downloads `url` into a new file at `path`.
    pub fn download(&self, url: &str, path: &Path) -> Result<(), String> {
        self.with_retries(url, || {
            let mut response = successful(self.agent.get(url).call().map_err(transport)?)?;
            let mut file = File::create(path).map_err(|e| Failure {
                message: format!("cannot create {}: {e}", path.display()),
                transient: false,
            })?;
            let mut body = response.body_mut().as_reader();
            std::io::copy(&mut body, &mut file).map_err(|e| Failure {
                message: format!("reading the response failed: {e}"),
                transient: true,
            })?;
            Ok(())
        })
    }

    /// Uploads `content` to `url`.
    pub fn upload(&self, url: &str, content: &[u8]) -> Result<(), String> {
        self.with_retries(url, || {
            successful(self.agent.put(url).send(content).map_err(transport)?).map(drop)
        })
    }

    fn with_retries(
        &self,
        url: &str,
        attempt: impl Fn() -> Result<(), Failure>,
    ) -> Result<(), String> {
        let mut waits = BACKOFF.iter();
        loop {
            match attempt() {
                Ok(()) => return Ok(()),
                Err(failure) => match waits.next() {
                    Some(wait) if failure.transient => std::thread::sleep(*wait),
                    _ => return Err(format!("{}: {}", redact(url), failure.message)),
                },
            }
        }
    }
}

fn transport(e: ureq::Error) -> Failure {
    let transient = match &e {
        // A corrupt TLS stream or a malformed request does not heal.
        ureq::Error::Io(io) => !matches!(
            io.kind(),
            std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
        ),
        ureq::Error::ConnectionFailed | ureq::Error::Timeout(_) => true,
        _ => false,
    };
    Failure {
        message: e.to_string(),
        transient,
    }
}

/// The response when its status is a success, else why not, with the
/// start of the body the server sent.
fn successful(mut response: Response<Body>) -> Result<Response<Body>, Failure> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let mut body = Vec::new();
    // Whatever the body holds, the status says enough on its own.
    let _unread = response
        .body_mut()
        .as_reader()
        .take(ERROR_BODY_BYTES)
        .read_to_end(&mut body);
    let body = String::from_utf8_lossy(&body);
    let body = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let message = if body.is_empty() {
        format!("the server answered {status}")
    } else {
        format!("the server answered {status}: {body}")
    };
    Err(Failure {
        message,
        transient: status.is_server_error(),
    })
}

/// `url` without its query string, where presigned URLs keep signatures.
pub fn redact(url: &str) -> &str {
    url.split_once('?').map_or(url, |(base, _)| base)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn https_goes_through_rustls_with_the_aws_lc_provider() {
        // A server that answers a TLS handshake with plain HTTP: the client
        // must get as far as TLS (a provider is configured) and fail there,
        // at once, as for any non-transient failure.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let _ = stream
                    .unwrap()
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
            }
        });
        let started = std::time::Instant::now();
        let error = Transfer::new()
            .upload(
                &format!("https://127.0.0.1:{port}/jobs/1/stdout?sig=x"),
                b"out",
            )
            .unwrap_err();
        assert!(
            error.starts_with(&format!("https://127.0.0.1:{port}/jobs/1/stdout: ")),
            "{error}"
        );
        // rustls's own words for a record that is not TLS.
        assert!(error.contains("received corrupt message"), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "retried: {error}"
        );
    }

    #[test]
    fn redacted_urls_keep_no_signature() {
        assert_eq!(
            redact("https://b.s3.amazonaws.com/jobs/1/plan?X-Amz-Signature=abc"),
            "https://b.s3.amazonaws.com/jobs/1/plan"
        );
        assert_eq!(redact("http://h/p"), "http://h/p");
    }
}
