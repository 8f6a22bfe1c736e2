//! Shared scaffolding of the control-plane tests: a `Control` over a
//! migrated database on each backend, principals, and session rows made
//! the way the sessions service would leave them. Each test file uses
//! part of it.
#![allow(dead_code, unused_imports)]

pub use agentos_schema::{migrate_all, SharedDatabase, SqlValue, Statement};
pub use agentos_sidecar::control::authz;
pub use agentos_sidecar::control::secrets::{self, KEY_BYTES, MAX_SECRET_BYTES};
pub use agentos_sidecar::control::*;
pub use agentos_storage::testing::{all_backends, CapturedLog, FaultyDatabase, TestDb};

/// One backend with a control service over its migrated database.
pub struct Env {
    pub control: Control,
    pub backend: TestDb,
}

impl Env {
    pub fn name(&self) -> &'static str {
        self.backend.name
    }

    pub fn db(&self) -> &SharedDatabase {
        &self.backend.db
    }

    /// Another service over the same database with another key (a
    /// restart with a different key file).
    pub fn reopen(&self, key: SecretKey) -> Control {
        self.reopen_with(SecretBox::new(key))
    }

    /// Another service over the same database with `vault`.
    pub fn reopen_with(&self, vault: SecretBox) -> Control {
        Control::new(
            self.backend.db.clone(),
            self.control.limits().clone(),
            vault,
        )
    }

    pub async fn done(self) {
        self.backend.shutdown().await;
    }
}

pub fn key(byte: u8) -> SecretKey {
    SecretKey::from_bytes([byte; KEY_BYTES])
}

pub async fn envs() -> Vec<Env> {
    envs_with(ControlLimits::default()).await
}

pub async fn envs_with(limits: ControlLimits) -> Vec<Env> {
    let mut envs = Vec::new();
    for backend in all_backends().await {
        migrate_all(backend.db.as_ref()).await.expect("migrate");
        let control = Control::new(backend.db.clone(), limits.clone(), SecretBox::new(key(1)));
        envs.push(Env { control, backend });
    }
    envs
}

/// A distinct real principal for each `seed`: the Ed25519 key derived
/// from it.
pub fn principal(seed: u32) -> String {
    let mut bytes = [0u8; 32];
    bytes[..4].copy_from_slice(&seed.to_le_bytes());
    let key = agentos_protocol::seed::SigningKey::from_bytes(&bytes);
    agentos_protocol::seed::Principal::of_key(&key).to_string()
}

pub fn new_agent(name: &str) -> NewAgent {
    NewAgent {
        definition: format!("definition of {name}").into_bytes(),
        name: name.to_owned(),
        adapter: "builtin".to_owned(),
    }
}

/// A session row as the sessions service would create it, with chosen
/// times.
pub async fn insert_session(db: &SharedDatabase, session_id: &str, updated_at_ms: i64) {
    db.transaction(vec![Statement::new(
        "INSERT INTO agentos_core_sessions (session_id, agent, cwd, permission_policy, \
           created_at_ms, updated_at_ms) VALUES (?1, 'builtin', '/', 'ask', ?2, ?2)",
        vec![session_id.into(), updated_at_ms.into()],
    )])
    .await
    .expect("insert session");
}

pub async fn delete_session_row(db: &SharedDatabase, session_id: &str) {
    db.transaction(vec![Statement::new(
        "DELETE FROM agentos_core_sessions WHERE session_id = ?1",
        vec![session_id.into()],
    )])
    .await
    .expect("delete session");
}

pub async fn count_rows(
    db: &SharedDatabase,
    table: &str,
    filter: &str,
    params: Vec<SqlValue>,
) -> i64 {
    db.query(
        &format!("SELECT COUNT(*) FROM {table} WHERE {filter}"),
        params,
    )
    .await
    .expect("count")
    .scalar_i64()
    .expect("integer")
}
