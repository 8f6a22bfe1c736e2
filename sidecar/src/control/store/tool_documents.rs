//! Tool document rows (`agentos_core_tool_documents`): an agent's
//! `~/tools`, one row per agent and name, holding the canonical document,
//! its CID, whether it is enabled, and when it was made and last changed.
//! The Space's `ToolDocuments` service decides what a document is; this
//! file only writes and reads rows.
//!
//! Writes are single statements whose guards carry the rules: the
//! per-agent bound on authored tools is counted inside the insert; a rename
//! moves the row (keeping its creation time) only when the new name is
//! free; only lambda rows are ever deleted one by one.

use agentos_schema::{DbError, SqlValue, Statement};

use super::decode::{count, Row};
use super::{bound, guarded, nth, ControlStore, Guarded, TOOL_DOCUMENTS};

const COLUMNS: &str =
    "account_id, agent_id, name, kind, cid, document, enabled, created_at_ms, updated_at_ms";
const WIDTH: usize = 9;

/// What a stored document is; the document itself says the same (checked
/// when it is read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredToolKind {
    Builtin,
    Lambda,
}

impl StoredToolKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StoredToolKind::Builtin => "builtin",
            StoredToolKind::Lambda => "lambda",
        }
    }

    pub fn parse(text: &str) -> Option<StoredToolKind> {
        match text {
            "builtin" => Some(StoredToolKind::Builtin),
            "lambda" => Some(StoredToolKind::Lambda),
            _ => None,
        }
    }
}

/// One row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredTool {
    pub account_id: String,
    pub agent_id: String,
    pub name: String,
    pub kind: StoredToolKind,
    pub cid: String,
    /// The canonical DAG-CBOR document.
    pub document: Vec<u8>,
    pub enabled: bool,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A document to write: a builtin's, or an authored one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolRow<'a> {
    pub account_id: &'a str,
    pub agent_id: &'a str,
    pub name: &'a str,
    pub cid: &'a str,
    pub document: &'a [u8],
    /// `None`: a new row is enabled, an existing one keeps its flag.
    pub enabled: Option<bool>,
    pub now_ms: i64,
}

impl ToolRow<'_> {
    /// `?1`..`?7` of a lambda write (account, agent, name, CID, document,
    /// enabled, time), then `last` as `?8`.
    fn lambda_params(&self, last: SqlValue) -> Vec<SqlValue> {
        vec![
            self.account_id.into(),
            self.agent_id.into(),
            self.name.into(),
            self.cid.into(),
            self.document.into(),
            self.enabled.into(),
            self.now_ms.into(),
            last,
        ]
    }
}

fn decode(mut r: Row) -> Result<StoredTool, DbError> {
    Ok(StoredTool {
        account_id: r.text(0)?,
        agent_id: r.text(1)?,
        name: r.text(2)?,
        kind: r.parse(3, StoredToolKind::parse)?,
        cid: r.text(4)?,
        document: r.blob(5)?,
        enabled: r.flag(6)?,
        created_at_ms: r.int(7)?,
        updated_at_ms: r.int(8)?,
    })
}

/// Builtins first, then lambdas, each by name.
fn select_all(account_id: &str, agent_id: &str) -> Statement {
    Statement::new(
        format!(
            "SELECT {COLUMNS} FROM agentos_core_tool_documents \
             WHERE agent_id = ?1 AND account_id = ?2 ORDER BY kind = 'lambda', name"
        ),
        vec![agent_id.into(), account_id.into()],
    )
}

fn select_one(account_id: &str, agent_id: &str, name: &str) -> Statement {
    Statement::new(
        format!(
            "SELECT {COLUMNS} FROM agentos_core_tool_documents \
             WHERE agent_id = ?1 AND name = ?2 AND account_id = ?3"
        ),
        vec![agent_id.into(), name.into(), account_id.into()],
    )
}

fn count_lambdas(agent_id: &str) -> Statement {
    Statement::new(
        "SELECT COUNT(*) FROM agentos_core_tool_documents \
         WHERE agent_id = ?1 AND kind = 'lambda'",
        vec![agent_id.into()],
    )
}

/// Deletes every tool document of an agent; the agent's own deletion runs
/// it in the transaction that deletes the agent row.
pub(crate) fn delete_agent_tools_statement(agent_id: &str) -> Statement {
    Statement::new(
        "DELETE FROM agentos_core_tool_documents WHERE agent_id = ?1",
        vec![agent_id.into()],
    )
}

fn decode_all(rows: agentos_schema::Rows) -> Result<Vec<StoredTool>, DbError> {
    Row::all(rows, TOOL_DOCUMENTS, WIDTH, decode)
}

impl ControlStore {
    /// An agent's documents, builtins first, then lambdas, each by name.
    pub async fn list_tool_documents(
        &self,
        account_id: &str,
        agent_id: &str,
    ) -> Result<Vec<StoredTool>, DbError> {
        let select = select_all(account_id, agent_id);
        decode_all(self.db.query(&select.sql, select.params).await?)
    }

    pub async fn get_tool_document(
        &self,
        account_id: &str,
        agent_id: &str,
        name: &str,
    ) -> Result<Option<StoredTool>, DbError> {
        let select = select_one(account_id, agent_id, name);
        let rows = self.db.query(&select.sql, select.params).await?;
        Row::optional(rows, TOOL_DOCUMENTS, WIDTH)?
            .map(decode)
            .transpose()
    }

    /// In one transaction: writes each of `builtins` whose row is missing
    /// or holds another CID (a row already holding that CID is left
    /// untouched), deletes the builtin rows named in `retired`, and reads
    /// the agent's documents back.
    pub async fn refresh_builtin_tools(
        &self,
        account_id: &str,
        agent_id: &str,
        builtins: &[ToolRow<'_>],
        retired: &[String],
    ) -> Result<Vec<StoredTool>, DbError> {
        let mut statements: Vec<Statement> = builtins
            .iter()
            .map(|row| {
                Statement::new(
                    "INSERT INTO agentos_core_tool_documents (account_id, agent_id, name, kind, \
                       cid, document, enabled, created_at_ms, updated_at_ms) \
                     VALUES (?1, ?2, ?3, 'builtin', ?4, ?5, 1, ?6, ?6) \
                     ON CONFLICT (agent_id, name) DO UPDATE SET kind = 'builtin', \
                       cid = excluded.cid, document = excluded.document, \
                       updated_at_ms = max(updated_at_ms, excluded.updated_at_ms) \
                     WHERE cid <> excluded.cid OR kind <> 'builtin'",
                    vec![
                        row.account_id.into(),
                        row.agent_id.into(),
                        row.name.into(),
                        row.cid.into(),
                        row.document.into(),
                        row.now_ms.into(),
                    ],
                )
            })
            .collect();
        statements.extend(retired.iter().map(|name| {
            Statement::new(
                "DELETE FROM agentos_core_tool_documents \
                 WHERE agent_id = ?1 AND name = ?2 AND kind = 'builtin'",
                vec![agent_id.into(), name.into()],
            )
        }));
        statements.push(select_all(account_id, agent_id));
        let last = statements.len() - 1;
        let mut results = self.db.transaction(statements).await?;
        decode_all(nth(&mut results, last, TOOL_DOCUMENTS)?)
    }

    /// Creates or replaces the lambda `row.name`. A new name is refused
    /// (nothing written) when the agent already has `max` lambdas; a name
    /// held by a builtin row is refused too. Answers the row and the
    /// agent's lambda count afterwards.
    pub async fn save_lambda_tool(
        &self,
        row: &ToolRow<'_>,
        max: u64,
    ) -> Result<Guarded<StoredTool>, DbError> {
        let statements = vec![
            // The SELECT's WHERE also keeps `ON CONFLICT` from being read
            // as a join constraint.
            Statement::new(
                "INSERT INTO agentos_core_tool_documents (account_id, agent_id, name, kind, \
                   cid, document, enabled, created_at_ms, updated_at_ms) \
                 SELECT ?1, ?2, ?3, 'lambda', ?4, ?5, coalesce(?6, 1), ?7, ?7 \
                 WHERE (SELECT COUNT(*) FROM agentos_core_tool_documents \
                          WHERE agent_id = ?2 AND kind = 'lambda') < ?8 \
                    OR EXISTS (SELECT 1 FROM agentos_core_tool_documents \
                                 WHERE agent_id = ?2 AND name = ?3) \
                 ON CONFLICT (agent_id, name) DO UPDATE SET cid = excluded.cid, \
                   document = excluded.document, enabled = coalesce(?6, enabled), \
                   updated_at_ms = max(updated_at_ms, excluded.updated_at_ms) \
                 WHERE kind = 'lambda'",
                row.lambda_params(bound(max)),
            )
            .expect_changes(1),
            select_one(row.account_id, row.agent_id, row.name),
            count_lambdas(row.agent_id),
        ];
        let Some(mut results) = guarded(&self.db, statements, 0).await? else {
            return Ok(Guarded::Refused);
        };
        let value = Row::first(nth(&mut results, 1, TOOL_DOCUMENTS)?, TOOL_DOCUMENTS, WIDTH)
            .and_then(decode)?;
        let count = count(nth(&mut results, 2, TOOL_DOCUMENTS)?, TOOL_DOCUMENTS)?;
        Ok(Guarded::Done { value, count })
    }

    /// Renames the lambda `previous` to `row.name` and replaces its
    /// document in one statement, keeping its creation time. `None` (and
    /// nothing written) when there is no such lambda or the new name is
    /// taken.
    pub async fn rename_lambda_tool(
        &self,
        previous: &str,
        row: &ToolRow<'_>,
    ) -> Result<Option<StoredTool>, DbError> {
        let statements = vec![
            Statement::new(
                "UPDATE agentos_core_tool_documents SET name = ?3, cid = ?4, document = ?5, \
                   enabled = coalesce(?6, enabled), updated_at_ms = max(updated_at_ms, ?7) \
                 WHERE agent_id = ?2 AND account_id = ?1 AND name = ?8 AND kind = 'lambda' \
                   AND NOT EXISTS (SELECT 1 FROM agentos_core_tool_documents \
                                     WHERE agent_id = ?2 AND name = ?3)",
                row.lambda_params(previous.into()),
            )
            .expect_changes(1),
            select_one(row.account_id, row.agent_id, row.name),
        ];
        let Some(mut results) = guarded(&self.db, statements, 0).await? else {
            return Ok(None);
        };
        Row::first(nth(&mut results, 1, TOOL_DOCUMENTS)?, TOOL_DOCUMENTS, WIDTH)
            .and_then(decode)
            .map(Some)
    }

    /// Deletes the lambda `name`; false when there was none (a builtin row
    /// is never deleted here).
    pub async fn delete_lambda_tool(
        &self,
        account_id: &str,
        agent_id: &str,
        name: &str,
    ) -> Result<bool, DbError> {
        let results = self
            .db
            .transaction(vec![Statement::new(
                "DELETE FROM agentos_core_tool_documents \
                 WHERE agent_id = ?1 AND name = ?2 AND account_id = ?3 AND kind = 'lambda'",
                vec![agent_id.into(), name.into(), account_id.into()],
            )])
            .await?;
        Ok(results.first().is_some_and(|r| r.changes > 0))
    }

    /// Deletes every document of an agent; answers how many there were.
    pub async fn delete_agent_tools(&self, agent_id: &str) -> Result<u64, DbError> {
        let results = self
            .db
            .transaction(vec![delete_agent_tools_statement(agent_id)])
            .await?;
        Ok(results.first().map_or(0, |r| r.changes))
    }

    /// How many lambdas the agent has.
    pub async fn lambda_tool_count(&self, agent_id: &str) -> Result<u64, DbError> {
        let select = count_lambdas(agent_id);
        count(
            self.db.query(&select.sql, select.params).await?,
            TOOL_DOCUMENTS,
        )
    }
}

#[cfg(test)]
mod tests {
    use agentos_schema::{ladders, migrate, migrate_all, Owner, Statement};

    use agentos_storage::testing::all_backends;

    /// Core migration 5 on both backends: a store at 4 with a session in it
    /// gains the tool documents table and the session's `title_source`, and
    /// the new columns refuse what their checks forbid.
    #[tokio::test]
    async fn migration_5_adds_tool_documents_and_a_title_source() {
        for backend in all_backends().await {
            let db = backend.db.clone();
            let core = ladders::core::MIGRATIONS;
            migrate(db.as_ref(), Owner::Core, &core[..4])
                .await
                .expect("to 4");
            db.transaction(vec![Statement::new(
                "INSERT INTO agentos_core_sessions (session_id, agent, cwd, permission_policy, \
                   created_at_ms, updated_at_ms) VALUES ('kept', 'echo', '/', 'ask', 1, 1)",
                vec![],
            )])
            .await
            .expect("a session at 4");
            let outcome = migrate(db.as_ref(), Owner::Core, &core[..5])
                .await
                .expect("to 5");
            assert_eq!((outcome.from, outcome.to), (4, 5), "{}", backend.name);
            migrate_all(db.as_ref()).await.expect("the rest");
            let source = db
                .query(
                    "SELECT title_source FROM agentos_core_sessions WHERE session_id = 'kept'",
                    vec![],
                )
                .await
                .expect("read");
            assert_eq!(
                source.scalar().and_then(|v| v.as_str()),
                Some("none"),
                "{}",
                backend.name
            );
            for refused in [
                "UPDATE agentos_core_sessions SET title_source = 'robot'",
                "INSERT INTO agentos_core_tool_documents (account_id, agent_id, name, kind, cid, \
                   document, enabled, created_at_ms, updated_at_ms) \
                 VALUES ('z1', 'a', 'n', 'macro', 'b', x'a0', 1, 1, 1)",
                "INSERT INTO agentos_core_tool_documents (account_id, agent_id, name, kind, cid, \
                   document, enabled, created_at_ms, updated_at_ms) \
                 VALUES ('z1', 'a', 'n', 'lambda', 'b', x'a0', 2, 1, 1)",
                "INSERT INTO agentos_core_tool_documents (account_id, agent_id, name, kind, cid, \
                   document, enabled, created_at_ms, updated_at_ms) \
                 VALUES ('z1', 'a', 'n', 'lambda', 'b', 'text', 1, 1, 1)",
            ] {
                let error = db
                    .transaction(vec![Statement::new(refused, vec![])])
                    .await
                    .expect_err(refused);
                assert!(error.is_constraint(), "{refused}: {error:?}");
            }
            backend.shutdown().await;
        }
    }
}
