//! A CI job pushing a release to `vergence serve` with its own OIDC token,
//! no stored secret: shop's `trust:` entry names a local issuer (discovery
//! and keys served by a thread of this test), and the token is signed here
//! with the API tests' checked-in RSA key.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::common::Project;
use crate::common::server::{remote, serve_pushed};

const RSA_A: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../infra/api/tests/router/oidc_keys/rsa-a.pem"
));

/// Serves the discovery document and key `a` on 127.0.0.1 for as long as
/// the test process runs; returns the issuer URL.
fn start_issuer() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut jwk =
        Jwk::from_encoding_key(&EncodingKey::from_rsa_pem(RSA_A).unwrap(), Algorithm::RS256)
            .unwrap();
    jwk.common.key_id = Some("a".to_owned());
    let discovery = json!({"issuer": url, "jwks_uri": format!("{url}/keys")}).to_string();
    let keys = json!({ "keys": [jwk] }).to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            let _ = reader.read_line(&mut request_line);
            // The rest of the head: a GET has no body.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let body = if request_line.contains("/.well-known/openid-configuration") {
                &discovery
            } else {
                &keys
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

fn job_token(issuer: &str, repository: &str) -> String {
    let now = jiff::Timestamp::now().as_second();
    let claims = json!({
        "iss": issuer,
        "aud": "vergence",
        "sub": format!("repo:{repository}:ref:refs/heads/main"),
        "repository": repository,
        "ref": "refs/heads/main",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
    });
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("a".to_owned());
    jsonwebtoken::encode(&header, &claims, &EncodingKey::from_rsa_pem(RSA_A).unwrap()).unwrap()
}

#[test]
fn a_ci_job_pushes_a_release_with_its_own_oidc_token() {
    let issuer = start_issuer();
    let project = Project::quickstart();
    project.replace(
        "application.yaml",
        "application:\n  name: shop\n",
        &format!(
            "application:\n  name: shop\n  trust:\n    - issuer: {issuer}\n      audience: vergence\n      claims: {{repository: org/shop, ref: refs/heads/main}}\n      scopes: [release]\n"
        ),
    );
    let (server, admin, _) = serve_pushed(&project);

    // No --app: the identity is trusted by shop alone.
    let token = job_token(&issuer, "org/shop");
    let released = remote(&project, &server, &token, &["release", "web", "v2"]);
    assert_eq!(released.code, 0, "{released}");
    assert!(
        released.stdout.contains("release v2 of shop/web recorded"),
        "{released}"
    );

    let foreign = job_token(&issuer, "org/elsewhere");
    let refused = remote(&project, &server, &foreign, &["release", "web", "v3"]);
    assert_ne!(refused.code, 0, "{refused}");
    assert!(
        refused.stderr.contains("its claims match no trust entry"),
        "{refused}"
    );

    // The audit trail names the job (issuer host, subject), never the token.
    let events = remote(
        &project,
        &server,
        &admin,
        &[
            "events",
            "--app",
            "shop",
            "--service",
            "web",
            "--output",
            "json",
        ],
    );
    assert_eq!(events.code, 0, "{events}");
    assert!(!events.stdout.contains(&token));
    let events: Value = serde_json::from_str(&events.stdout).unwrap();
    let release = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "releaseCreated")
        .expect("releaseCreated event");
    let host = issuer.trim_start_matches("http://");
    assert_eq!(
        release["actor"],
        format!("oidc:{host}:repo:org/shop:ref:refs/heads/main"),
        "{release}"
    );
    let (status, output) = server.stop();
    assert!(status.success(), "serve exited with {status}:\n{output}");
    assert!(!output.contains(&token), "serve printed the token");
}
