-- SQLite twin of migrations/postgres/0010: dashboard sessions, hashed, with
-- their expiry in Unix seconds.
CREATE TABLE ui_sessions (
    id_hash       TEXT PRIMARY KEY,
    token_digest  TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL
);
CREATE INDEX ui_sessions_expiry ON ui_sessions (expires_at);
