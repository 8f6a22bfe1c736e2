//! Actor hosting metadata (`agentos_actor_*`): preview tokens, dynamic mounts
//! and linked software. The sidecar only migrates these so a host can run the
//! same runner on the same handle; it never reads or writes them itself.

use crate::migrate::Migration;

pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    statements: &[
        "CREATE TABLE agentos_actor_preview_tokens (
            token TEXT PRIMARY KEY CHECK (length(token) = 48 AND token NOT GLOB '*[^0-9a-f]*'),
            port INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
            created_at_ms INTEGER NOT NULL,
            expires_at_ms INTEGER NOT NULL CHECK (expires_at_ms >= created_at_ms)
        ) STRICT",
        "CREATE INDEX agentos_actor_preview_tokens_by_expiry
            ON agentos_actor_preview_tokens (expires_at_ms)",
        "CREATE TABLE agentos_actor_dynamic_mounts (
            path TEXT PRIMARY KEY CHECK (substr(path, 1, 1) = '/'),
            descriptor_json TEXT NOT NULL CHECK (json_valid(descriptor_json))
        ) STRICT",
        "CREATE TABLE agentos_actor_linked_software (
            path TEXT PRIMARY KEY CHECK (substr(path, 1, 1) = '/'),
            descriptor_json TEXT NOT NULL CHECK (json_valid(descriptor_json))
        ) STRICT",
    ],
}];
