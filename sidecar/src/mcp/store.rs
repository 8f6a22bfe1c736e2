//! All SQL of MCP servers (`agentos_core_mcp_servers`): an account's
//! records, what their last discovery found, and deleting one with the
//! header secrets it owns in one transaction.

use agentos_schema::row::Row;
use agentos_schema::{DbError, SharedDatabase, SqlValue, Statement};
use serde_json::Value;

const SERVERS: &str = "agentos_core_mcp_servers";
const COLUMNS: &str = "account_id, name, server_id, config_json, tools_json, last_error, \
     discovered_at_ms, created_at_ms, updated_at_ms";
const WIDTH: usize = 9;

/// A server record as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerRow {
    pub account_id: String,
    pub name: String,
    pub server_id: String,
    /// The checked `McpServerConfig` as JSON.
    pub config: Value,
    /// The last discovery's tool descriptors (absent before any, or when
    /// it failed).
    pub tools: Option<Value>,
    pub last_error: Option<String>,
    pub discovered_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

fn decode(mut r: Row) -> Result<ServerRow, DbError> {
    Ok(ServerRow {
        account_id: r.text(0)?,
        name: r.text(1)?,
        server_id: r.text(2)?,
        config: r.json(3)?,
        tools: r.opt_json(4)?,
        last_error: r.opt_text(5)?,
        discovered_at_ms: r.opt_int(6)?,
        created_at_ms: r.int(7)?,
        updated_at_ms: r.int(8)?,
    })
}

fn bound(n: u64) -> SqlValue {
    SqlValue::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

#[derive(Clone)]
pub struct McpStore {
    db: SharedDatabase,
}

impl McpStore {
    pub fn new(db: SharedDatabase) -> McpStore {
        McpStore { db }
    }

    /// Creates or replaces the named server's config (keeping its id and
    /// creation time, forgetting the old discovery); a new name needs room
    /// under `max`. `None` when there is none.
    pub async fn upsert(
        &self,
        account: &str,
        name: &str,
        new_id: &str,
        config: &Value,
        now_ms: i64,
        max: u64,
    ) -> Result<Option<ServerRow>, DbError> {
        let statements = vec![
            Statement::new(
                format!(
                    "INSERT INTO {SERVERS} ({COLUMNS}) \
                     SELECT ?1, ?2, ?3, ?4, NULL, NULL, NULL, ?5, ?5 \
                     WHERE (SELECT count(*) FROM {SERVERS} WHERE account_id = ?1) < ?6 \
                        OR EXISTS (SELECT 1 FROM {SERVERS} WHERE account_id = ?1 AND name = ?2) \
                     ON CONFLICT (account_id, name) DO UPDATE SET \
                       config_json = excluded.config_json, tools_json = NULL, \
                       last_error = NULL, discovered_at_ms = NULL, \
                       updated_at_ms = max(updated_at_ms, excluded.updated_at_ms)"
                ),
                vec![
                    account.into(),
                    name.into(),
                    new_id.into(),
                    config.to_string().into(),
                    now_ms.into(),
                    bound(max),
                ],
            )
            .expect_changes(1),
            Statement::new(
                format!("SELECT {COLUMNS} FROM {SERVERS} WHERE account_id = ?1 AND name = ?2"),
                vec![account.into(), name.into()],
            ),
        ];
        match self.db.transaction(statements).await {
            Ok(mut results) => {
                let rows = results.pop().unwrap_or_default();
                Row::optional(rows, SERVERS, WIDTH)?.map(decode).transpose()
            }
            Err(DbError::ExpectedChanges {
                statement_index: 0, ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn get(&self, account: &str, name: &str) -> Result<Option<ServerRow>, DbError> {
        let rows = self
            .db
            .read(
                &format!("SELECT {COLUMNS} FROM {SERVERS} WHERE account_id = ?1 AND name = ?2"),
                vec![account.into(), name.into()],
            )
            .await?;
        Row::optional(rows, SERVERS, WIDTH)?.map(decode).transpose()
    }

    /// The account's servers, the latest changed first (as the reference).
    pub async fn list(&self, account: &str) -> Result<Vec<ServerRow>, DbError> {
        let rows = self
            .db
            .read(
                &format!(
                    "SELECT {COLUMNS} FROM {SERVERS} WHERE account_id = ?1 \
                     ORDER BY updated_at_ms DESC, name"
                ),
                vec![account.into()],
            )
            .await?;
        Row::all(rows, SERVERS, WIDTH, decode)
    }

    /// Keeps what a discovery of `config` found, unless the config changed
    /// meanwhile (that config's own discovery is the one to keep).
    pub async fn discovered(
        &self,
        account: &str,
        name: &str,
        config: &Value,
        outcome: Result<&Value, &str>,
        at_ms: i64,
    ) -> Result<(), DbError> {
        let (tools, error) = match outcome {
            Ok(tools) => (Some(tools.to_string()), None),
            Err(error) => (None, Some(error.to_owned())),
        };
        self.db
            .query(
                &format!(
                    "UPDATE {SERVERS} SET tools_json = ?4, last_error = ?5, discovered_at_ms = ?6 \
                     WHERE account_id = ?1 AND name = ?2 AND config_json = ?3"
                ),
                vec![
                    account.into(),
                    name.into(),
                    config.to_string().into(),
                    tools.into(),
                    error.into(),
                    at_ms.into(),
                ],
            )
            .await?;
        Ok(())
    }

    /// Deletes the server and, in the same transaction, the account
    /// secrets named in `owned_secrets`; `false` when there was none.
    pub async fn delete(
        &self,
        account: &str,
        name: &str,
        owned_secrets: &[String],
    ) -> Result<bool, DbError> {
        let mut statements = vec![Statement::new(
            format!("DELETE FROM {SERVERS} WHERE account_id = ?1 AND name = ?2"),
            vec![account.into(), name.into()],
        )
        .expect_changes(1)];
        for secret in owned_secrets {
            statements.push(Statement::new(
                "DELETE FROM agentos_core_secrets WHERE account_id = ?1 AND name = ?2",
                vec![account.into(), secret.as_str().into()],
            ));
        }
        match self.db.transaction(statements).await {
            Ok(_) => Ok(true),
            Err(DbError::ExpectedChanges {
                statement_index: 0, ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
