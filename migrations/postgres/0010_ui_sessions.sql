-- Dashboard sign-in sessions (docs/configuration.md, "Dashboard sessions"). The
-- cookie carries a random id; only its SHA-256 is stored, so the table holds no
-- usable cookie. `token_digest` is the digest of the API token signed in with
-- (never the token): a token removed from the configuration ends its sessions.
-- Times are Unix seconds, compared as numbers on both back-ends.
CREATE TABLE ui_sessions (
    id_hash       text PRIMARY KEY,
    token_digest  text NOT NULL,
    created_at    bigint NOT NULL,
    expires_at    bigint NOT NULL
);
CREATE INDEX ui_sessions_expiry ON ui_sessions (expires_at);
