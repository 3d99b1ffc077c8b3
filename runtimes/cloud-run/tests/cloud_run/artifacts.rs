//! An artifact store that hands out real URLs: objects in memory, served
//! over HTTP on 127.0.0.1. Each presigned URL carries a random token that
//! allows one method on one key (GET to read, PUT to write) — what an S3
//! presigned URL allows — so a job can reach its files only through the
//! URLs in its environment.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::routing::any;
use jiff::SignedDuration;
use tokio::task::JoinHandle;
use vergence_model::ports::{ArtifactStore, UrlAccess};

#[derive(Debug, Default)]
struct Objects {
    content: BTreeMap<String, Vec<u8>>,
    /// Token → the key and access it grants.
    grants: BTreeMap<String, (String, UrlAccess)>,
    /// Every request made through a URL: method and key.
    requests: Vec<(String, String)>,
}

/// The store; stops serving when dropped.
#[derive(Debug)]
pub struct HttpArtifacts {
    objects: Arc<Mutex<Objects>>,
    url: String,
    server: JoinHandle<()>,
}

impl Drop for HttpArtifacts {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl HttpArtifacts {
    pub async fn start() -> Self {
        let objects = Arc::new(Mutex::new(Objects::default()));
        let router = Router::new()
            .route("/objects/{token}", any(serve))
            .with_state(Arc::clone(&objects));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Self {
            objects,
            url,
            server,
        }
    }

    /// The requests made through URLs so far: (method, key).
    pub fn url_requests(&self) -> Vec<(String, String)> {
        self.objects.lock().unwrap().requests.clone()
    }
}

async fn serve(
    State(objects): State<Arc<Mutex<Objects>>>,
    Path(token): Path<String>,
    method: Method,
    body: Bytes,
) -> Result<Vec<u8>, StatusCode> {
    let mut objects = objects.lock().unwrap();
    let (key, access) = objects
        .grants
        .get(&token)
        .cloned()
        .ok_or(StatusCode::FORBIDDEN)?;
    objects.requests.push((method.to_string(), key.clone()));
    match (method, access) {
        (Method::GET, UrlAccess::Read) => objects
            .content
            .get(&key)
            .cloned()
            .ok_or(StatusCode::NOT_FOUND),
        (Method::PUT, UrlAccess::Write) => {
            objects.content.insert(key, body.to_vec());
            Ok(Vec::new())
        }
        _ => Err(StatusCode::FORBIDDEN),
    }
}

#[async_trait]
impl ArtifactStore for HttpArtifacts {
    async fn put(&self, key: &str, content: &[u8]) -> vergence_model::Result<()> {
        let mut objects = self.objects.lock().unwrap();
        objects.content.insert(key.to_owned(), content.to_vec());
        Ok(())
    }

    async fn get(&self, key: &str) -> vergence_model::Result<Option<Vec<u8>>> {
        Ok(self.objects.lock().unwrap().content.get(key).cloned())
    }

    async fn presign(
        &self,
        key: &str,
        access: UrlAccess,
        _ttl: SignedDuration,
    ) -> vergence_model::Result<Option<String>> {
        let token = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let mut objects = self.objects.lock().unwrap();
        objects
            .grants
            .insert(token.clone(), (key.to_owned(), access));
        Ok(Some(format!("{}/objects/{token}", self.url)))
    }
}
