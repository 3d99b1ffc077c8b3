//! API tokens, one row per token id, found by id (every authenticated
//! request) or listed per subject: an application, an agent or the
//! platform.

use async_trait::async_trait;
use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use vergence_model::ports::TokenStore;
use vergence_model::{ApiToken, TokenSubject};

use super::{Result, SqliteStore, cached_execute, cached_query_row, from_json, to_json};
use crate::error::EmbeddedError;

/// What the tokens table's `application` column holds for a subject: an
/// application's name, `agent:<name>` or `platform:` (`:` is never part
/// of a name).
fn subject_key(subject: &TokenSubject) -> String {
    match subject {
        TokenSubject::Application(application) => application.as_str().to_owned(),
        TokenSubject::Agent(agent) => format!("agent:{agent}"),
        TokenSubject::Platform => "platform:".to_owned(),
    }
}

#[async_trait]
impl TokenStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_token", level = "debug", skip_all)]
    async fn put_token(&self, token: &ApiToken) -> Result<()> {
        let body = to_json("put_token", token)?;
        self.write("put_token", |tx| {
            let inserted = cached_execute(
                tx,
                "INSERT INTO tokens (id, application, body) VALUES (?1, ?2, ?3)
                     ON CONFLICT (id) DO NOTHING",
                params![token.id, subject_key(&token.subject), body],
            )
            .map_err(|e| EmbeddedError::sql("put_token", e))?;
            if inserted == 0 {
                return Err(EmbeddedError::Conflict {
                    what: format!("token {}", token.id),
                });
            }
            Ok(())
        })
    }

    #[tracing::instrument(name = "sqlite.get_token", level = "debug", skip_all, fields(id = %id))]
    async fn get_token(&self, id: &str) -> Result<Option<ApiToken>> {
        let conn = self.conn();
        let body: Option<String> =
            cached_query_row(&conn, "SELECT body FROM tokens WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| EmbeddedError::sql("get_token", e))?;
        Ok(body.map(|b| from_json("get_token", &b)).transpose()?)
    }

    #[tracing::instrument(name = "sqlite.list_tokens", level = "debug", skip_all, fields(subject = %subject))]
    async fn list_tokens(&self, subject: &TokenSubject) -> Result<Vec<ApiToken>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT body FROM tokens WHERE application = ?1 ORDER BY id")
            .map_err(|e| EmbeddedError::sql("list_tokens", e))?;
        let rows = stmt
            .query_map([subject_key(subject)], |r| r.get::<_, String>(0))
            .map_err(|e| EmbeddedError::sql("list_tokens", e))?;
        let mut tokens = Vec::new();
        for row in rows {
            let body = row.map_err(|e| EmbeddedError::sql("list_tokens", e))?;
            tokens.push(from_json("list_tokens", &body)?);
        }
        Ok(tokens)
    }

    #[tracing::instrument(name = "sqlite.delete_token", level = "debug", skip_all, fields(id = %id))]
    async fn delete_token(&self, id: &str) -> Result<bool> {
        self.write("delete_token", |tx| {
            let n = cached_execute(tx, "DELETE FROM tokens WHERE id = ?1", [id])
                .map_err(|e| EmbeddedError::sql("delete_token", e))?;
            Ok(n > 0)
        })
    }

    #[tracing::instrument(name = "sqlite.use_webhook_signature", level = "debug", skip_all)]
    async fn use_webhook_signature(
        &self,
        signature: &str,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<bool> {
        self.write("use_webhook_signature", |tx| {
            cached_execute(
                tx,
                "DELETE FROM webhook_signatures WHERE expires_at <= ?1",
                [now.as_second()],
            )
            .map_err(|e| EmbeddedError::sql("use_webhook_signature", e))?;
            let inserted = cached_execute(
                tx,
                "INSERT INTO webhook_signatures (signature, expires_at) VALUES (?1, ?2)
                     ON CONFLICT (signature) DO NOTHING",
                params![signature, expires_at.as_second()],
            )
            .map_err(|e| EmbeddedError::sql("use_webhook_signature", e))?;
            Ok(inserted == 1)
        })
    }
}
