//! Dashboard sessions (docs/configuration.md, "Dashboard sessions"): stored by the
//! SHA-256 of their id, so every replica on the database knows them and a restart
//! keeps them.

use super::{Database, DbResult};

impl Database {
    /// Store a new session, and forget the expired ones (a login is rare enough to
    /// carry that sweep, and it keeps the table as small as the live sessions).
    pub async fn insert_ui_session(
        &self,
        id_hash: &str,
        token_digest: &str,
        created_at: i64,
        expires_at: i64,
    ) -> DbResult<()> {
        let _turn = self.writer_turn().await;
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM ui_sessions WHERE expires_at <= $1")
                .bind(created_at)
                .execute(pool)
                .await?;
            sqlx::query(
                "INSERT INTO ui_sessions (id_hash, token_digest, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(id_hash)
            .bind(token_digest)
            .bind(created_at)
            .bind(expires_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// The token digest of the session, if it exists and has not expired at `now`.
    pub async fn ui_session_token(&self, id_hash: &str, now: i64) -> DbResult<Option<String>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar(
                "SELECT token_digest FROM ui_sessions WHERE id_hash = $1 AND expires_at > $2",
            )
            .bind(id_hash)
            .bind(now)
            .fetch_optional(pool)
            .await?
        }))
    }

    pub async fn delete_ui_session(&self, id_hash: &str) -> DbResult<()> {
        let _turn = self.writer_turn().await;
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM ui_sessions WHERE id_hash = $1")
                .bind(id_hash)
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}
