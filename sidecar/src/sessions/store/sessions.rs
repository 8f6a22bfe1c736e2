//! The session rows: creation (against the VM session limit), lookup,
//! keyset listing, deletion with everything the session owns, and what a
//! route negotiates with its adapter (private session id, capabilities,
//! config options, a pending continuation).

use std::collections::BTreeMap;

use agentos_protocol::session::PermissionPolicy;
use agentos_schema::{DbError, SqlValue, Statement};
use serde_json::Value;

use super::decode::{count, decode_session, Row, SESSIONS, VM_COUNTERS};
use super::{json_text, now_ms, SessionStore};

const SESSION_COLUMNS: &str = "session_id, agent, acp_session_id, cwd, permission_policy, \
    additional_directories_json, env_json, mcp_servers_json, capabilities_json, agent_info_json, \
    config_revision, config_options_json, pending_preamble, title, metadata_json, state, \
    state_prompt_id, state_started_at_ms, state_error_json, latest_sequence, \
    oldest_retained_sequence, retained_event_count, retained_event_bytes, prompt_count, \
    pending_permission_count, outcome_count, created_at_ms, updated_at_ms, description, plan_json";

/// A session's status: the `state` column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStatus {
    Idle,
    Running,
    /// Running, with at least one pending `ask` permission.
    Waiting,
    /// The last turn failed in a way that concerns the session; usable.
    Failed,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Idle => "idle",
            SessionStatus::Running => "running",
            SessionStatus::Waiting => "waiting",
            SessionStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<SessionStatus> {
        match s {
            "idle" => Some(SessionStatus::Idle),
            "running" => Some(SessionStatus::Running),
            "waiting" => Some(SessionStatus::Waiting),
            "failed" => Some(SessionStatus::Failed),
            _ => None,
        }
    }
}

/// A session's stored state, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRow {
    pub session_id: String,
    pub agent: String,
    pub acp_session_id: Option<String>,
    pub cwd: String,
    pub permission_policy: PermissionPolicy,
    pub additional_directories: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub mcp_servers: Vec<Value>,
    pub capabilities: Option<Value>,
    pub agent_info: Option<Value>,
    pub config_revision: u64,
    pub config_options: Vec<Value>,
    pub pending_preamble: Option<String>,
    pub title: Option<String>,
    /// The agent's account of what the session is doing (`status`).
    pub description: Option<String>,
    /// The agent's plan (`plan`), on the session for clients to show.
    pub plan: Option<Value>,
    pub metadata: Option<Value>,
    pub state: SessionStatus,
    pub state_prompt_id: Option<String>,
    pub state_started_at_ms: Option<i64>,
    pub state_error: Option<Value>,
    pub latest_sequence: u64,
    pub oldest_retained_sequence: u64,
    pub retained_event_count: u64,
    pub retained_event_bytes: u64,
    pub prompt_count: u64,
    pub pending_permission_count: u64,
    pub outcome_count: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// The immutable creation options of a new session.
#[derive(Clone, Debug, PartialEq)]
pub struct NewSession {
    pub session_id: String,
    pub agent: String,
    pub cwd: String,
    pub permission_policy: PermissionPolicy,
    pub additional_directories: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub mcp_servers: Vec<Value>,
    pub title: Option<String>,
    pub metadata: Option<Value>,
}

impl SessionStore {
    /// A session's metadata (the inner `None` when it has none), read
    /// without decoding the rest of its row; `None` when there is no such
    /// session.
    pub async fn metadata(&self, session_id: &str) -> Result<Option<Option<Value>>, DbError> {
        self.one_column(
            "SELECT metadata_json FROM agentos_core_sessions WHERE session_id = ?1",
            session_id,
        )
        .await?
        .map(|mut row| row.opt_json(0))
        .transpose()
    }

    /// The row `sql` (one column of a session's row, by `?1`) reads.
    async fn one_column(&self, sql: &str, session_id: &str) -> Result<Option<Row>, DbError> {
        let rows = self.db.query(sql, vec![session_id.into()]).await?;
        Row::optional(rows, SESSIONS, 1)
    }

    /// A session's oldest retained event sequence and its metadata, in one
    /// read (a builtin turn needs both), if there is such a session.
    pub async fn floor_and_metadata(
        &self,
        session_id: &str,
    ) -> Result<Option<(u64, Option<Value>)>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT oldest_retained_sequence, metadata_json FROM agentos_core_sessions \
                 WHERE session_id = ?1",
                vec![session_id.into()],
            )
            .await?;
        Row::optional(rows, SESSIONS, 2)?
            .map(|mut row| Ok((row.uint(0)?, row.opt_json(1)?)))
            .transpose()
    }

    /// A session's plan (the agent's `plan`), if it has one.
    pub async fn plan(&self, session_id: &str) -> Result<Option<Value>, DbError> {
        match self
            .one_column(
                "SELECT plan_json FROM agentos_core_sessions WHERE session_id = ?1",
                session_id,
            )
            .await?
        {
            Some(mut row) => row.opt_json(0),
            None => Ok(None),
        }
    }

    /// Replaces a session's plan; false when there is no such session.
    pub async fn set_plan(&self, session_id: &str, plan: &Value) -> Result<bool, DbError> {
        let results = self
            .db
            .transaction(vec![Statement::new(
                "UPDATE agentos_core_sessions SET plan_json = ?2 WHERE session_id = ?1",
                vec![session_id.into(), plan.to_string().into()],
            )])
            .await?;
        Ok(results.first().is_some_and(|r| r.changes == 1))
    }

    /// Sets a session's title; false when there is no such session.
    pub async fn set_title(
        &self,
        session_id: &str,
        title: &str,
        now: i64,
    ) -> Result<bool, DbError> {
        let results = self
            .db
            .transaction(vec![Statement::new(
                "UPDATE agentos_core_sessions SET title = ?2, title_source = 'user', \
                   updated_at_ms = max(updated_at_ms, ?3) WHERE session_id = ?1",
                vec![session_id.into(), title.into(), now.into()],
            )])
            .await?;
        Ok(results.first().is_some_and(|r| r.changes == 1))
    }

    /// Who named the session (`none`, `agent`, `user`); `None` when there
    /// is no such session.
    pub async fn title_source(&self, session_id: &str) -> Result<Option<String>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT title_source FROM agentos_core_sessions WHERE session_id = ?1",
                vec![session_id.into()],
            )
            .await?;
        Ok(match rows.rows.first().and_then(|r| r.first()) {
            Some(SqlValue::Text(source)) => Some(source.clone()),
            _ => None,
        })
    }

    /// A generated name: the title only while nobody named the session,
    /// then as the agent's; the description only where there is none.
    /// Answers whether the title was set.
    pub async fn set_generated_title(
        &self,
        session_id: &str,
        title: &str,
        description: Option<&str>,
        now: i64,
    ) -> Result<bool, DbError> {
        let results = self
            .db
            .transaction(vec![Statement::new(
                "UPDATE agentos_core_sessions SET title = ?2, title_source = 'agent', \
                   description = CASE WHEN description IS NULL OR description = '' \
                     THEN ?3 ELSE description END, \
                   updated_at_ms = max(updated_at_ms, ?4) \
                 WHERE session_id = ?1 AND title_source = 'none'",
                vec![
                    session_id.into(),
                    title.into(),
                    description.map_or(SqlValue::Null, |d| d.into()),
                    now.into(),
                ],
            )])
            .await?;
        Ok(results.first().is_some_and(|r| r.changes == 1))
    }

    /// The agent's `status`: its title replaces any title but the user's,
    /// and its description replaces the last one. `None` when the session
    /// does not exist; otherwise whether a user-set title was kept.
    pub async fn set_agent_status(
        &self,
        session_id: &str,
        title: Option<&str>,
        description: Option<&str>,
        now: i64,
    ) -> Result<Option<bool>, DbError> {
        let text = |v: Option<&str>| v.map_or(SqlValue::Null, |t| t.into());
        let results = self
            .db
            .transaction(vec![Statement::new(
                "UPDATE agentos_core_sessions SET \
                   title = CASE WHEN title_source = 'user' OR ?2 IS NULL THEN title ELSE ?2 END, \
                   title_source = CASE WHEN title_source = 'user' OR ?2 IS NULL \
                     THEN title_source ELSE 'agent' END, \
                   description = coalesce(?3, description), \
                   updated_at_ms = max(updated_at_ms, ?4) WHERE session_id = ?1",
                vec![
                    session_id.into(),
                    text(title),
                    text(description),
                    now.into(),
                ],
            )])
            .await?;
        if results.first().is_none_or(|r| r.changes != 1) {
            return Ok(None);
        }
        let user = self.title_source(session_id).await?.as_deref() == Some("user");
        Ok(Some(title.is_some() && user))
    }

    pub async fn get_session(&self, session_id: &str) -> Result<Option<SessionRow>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM agentos_core_sessions WHERE session_id = ?1"
                ),
                vec![session_id.into()],
            )
            .await?;
        rows.rows.into_iter().next().map(decode_session).transpose()
    }

    /// Statements that insert a session and bump the VM session count;
    /// the first changes nothing (failing its transaction at that index)
    /// when the count has reached `max_sessions`. The third reads the count
    /// after the insert.
    pub fn insert_session_statements(
        new: &NewSession,
        max_sessions: u64,
        now: i64,
    ) -> Vec<Statement> {
        vec![
            Statement::new(
                "UPDATE agentos_core_vm_counters SET session_count = session_count + 1 \
                 WHERE singleton = 1 AND session_count < ?1",
                vec![SqlValue::Integer(max_sessions as i64)],
            )
            .expect_changes(1),
            Statement::new(
                "INSERT INTO agentos_core_sessions (session_id, agent, cwd, permission_policy, \
                 additional_directories_json, env_json, mcp_servers_json, title, metadata_json, \
                 created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
                vec![
                    new.session_id.as_str().into(),
                    new.agent.as_str().into(),
                    new.cwd.as_str().into(),
                    new.permission_policy.as_str().into(),
                    json_text(&new.additional_directories).into(),
                    json_text(&new.env).into(),
                    json_text(&new.mcp_servers).into(),
                    new.title.clone().into(),
                    new.metadata.as_ref().map(json_text).into(),
                    now.into(),
                ],
            )
            .expect_changes(1),
            Statement::new(
                "SELECT session_count FROM agentos_core_vm_counters WHERE singleton = 1",
                vec![],
            ),
            // A session opened again under a deleted one's id is new.
            Statement::new(
                "DELETE FROM agentos_core_session_tombstones WHERE session_id = ?1",
                vec![new.session_id.as_str().into()],
            ),
        ]
    }

    /// Inserts a session and bumps the VM session count, refusing when the
    /// count has reached `max_sessions` (compare-and-set on the counter row).
    /// Returns the VM session count after the insert, or `None` at the limit.
    pub async fn insert_session(
        &self,
        new: &NewSession,
        max_sessions: u64,
    ) -> Result<Option<u64>, DbError> {
        let outcome = self
            .db
            .transaction(Self::insert_session_statements(new, max_sessions, now_ms()))
            .await;
        match outcome {
            Ok(results) => {
                let counters = results.into_iter().nth(2).unwrap_or_default();
                Ok(Some(count(counters, VM_COUNTERS)?))
            }
            Err(DbError::ExpectedChanges {
                statement_index: 0, ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Keyset page on (updated_at_ms DESC, session_id ASC): one query.
    pub async fn list_sessions(
        &self,
        cursor: Option<(i64, String)>,
        limit: u64,
    ) -> Result<(Vec<SessionRow>, bool), DbError> {
        let rows = match cursor {
            Some((updated, id)) => {
                self.db
                    .query(
                        &format!(
                            "SELECT {SESSION_COLUMNS} FROM agentos_core_sessions \
                             WHERE updated_at_ms < ?1 OR (updated_at_ms = ?1 AND session_id > ?2) \
                             ORDER BY updated_at_ms DESC, session_id ASC LIMIT ?3"
                        ),
                        vec![
                            updated.into(),
                            id.into(),
                            SqlValue::Integer(limit as i64 + 1),
                        ],
                    )
                    .await?
            }
            None => {
                self.db
                    .query(
                        &format!(
                            "SELECT {SESSION_COLUMNS} FROM agentos_core_sessions \
                             ORDER BY updated_at_ms DESC, session_id ASC LIMIT ?1"
                        ),
                        vec![SqlValue::Integer(limit as i64 + 1)],
                    )
                    .await?
            }
        };
        let mut sessions = rows
            .rows
            .into_iter()
            .map(decode_session)
            .collect::<Result<Vec<SessionRow>, DbError>>()?;
        let more = sessions.len() as u64 > limit;
        sessions.truncate(limit as usize);
        Ok((sessions, more))
    }

    /// Deletes a session and everything it owns, adjusting the VM counters by
    /// the session's own counters (read in the same transaction).
    /// Deletes a session and everything of it, leaving a tombstone; at most
    /// `max_tombstones` are kept, the oldest going first.
    pub async fn delete_session(
        &self,
        session_id: &str,
        max_tombstones: u64,
    ) -> Result<bool, DbError> {
        let id = SqlValue::from(session_id);
        let results = self
            .db
            .transaction(vec![
                Statement::new(
                    "UPDATE agentos_core_vm_counters SET \
                       session_count = session_count - 1, \
                       prompt_count = prompt_count - s.prompts, \
                       pending_permission_count = pending_permission_count - s.pending, \
                       outcome_count = outcome_count - s.outcomes \
                     FROM (SELECT prompt_count AS prompts, pending_permission_count AS pending, \
                                  outcome_count AS outcomes \
                           FROM agentos_core_sessions WHERE session_id = ?1) AS s \
                     WHERE singleton = 1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_events WHERE session_id = ?1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_prompts WHERE session_id = ?1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_permission_records WHERE session_id = ?1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_permission_outcomes WHERE session_id = ?1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_sessions WHERE session_id = ?1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "INSERT INTO agentos_core_session_tombstones (session_id, deleted_at_ms) \
                     VALUES (?1, ?2) \
                     ON CONFLICT (session_id) DO UPDATE SET deleted_at_ms = excluded.deleted_at_ms",
                    vec![id, now_ms().into()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_session_tombstones WHERE rowid IN \
                     (SELECT rowid FROM agentos_core_session_tombstones \
                      ORDER BY deleted_at_ms DESC, session_id DESC LIMIT -1 OFFSET ?1)",
                    vec![SqlValue::Integer(
                        i64::try_from(max_tombstones).unwrap_or(i64::MAX),
                    )],
                ),
            ])
            .await?;
        Ok(results[5].changes == 1)
    }

    /// Whether a session of this id was deleted (and is still remembered).
    pub async fn was_deleted(&self, session_id: &str) -> Result<bool, DbError> {
        let rows = self
            .db
            .query(
                "SELECT 1 FROM agentos_core_session_tombstones WHERE session_id = ?1",
                vec![session_id.into()],
            )
            .await?;
        Ok(!rows.rows.is_empty())
    }

    /// Stores what an adapter negotiated: its private session id, capabilities,
    /// agent info and config options; clears a consumed continuation.
    pub async fn update_negotiated(
        &self,
        session_id: &str,
        acp_session_id: &str,
        capabilities: &Value,
        agent_info: Option<&Value>,
        config_options: Option<&Value>,
        pending_preamble: Option<&str>,
    ) -> Result<(), DbError> {
        self.db
            .transaction(vec![Statement::new(
                "UPDATE agentos_core_sessions SET acp_session_id = ?2, capabilities_json = ?3, \
                   agent_info_json = ?4, \
                   config_options_json = COALESCE(?5, config_options_json), \
                   pending_preamble = ?6, updated_at_ms = max(updated_at_ms, ?7) \
                 WHERE session_id = ?1",
                vec![
                    session_id.into(),
                    acp_session_id.into(),
                    capabilities.to_string().into(),
                    agent_info.map(Value::to_string).into(),
                    config_options.map(Value::to_string).into(),
                    pending_preamble.into(),
                    now_ms().into(),
                ],
            )
            .expect_changes(1)])
            .await?;
        Ok(())
    }

    pub async fn set_config_options(
        &self,
        session_id: &str,
        options: &[Value],
    ) -> Result<u64, DbError> {
        let results = self
            .db
            .transaction(vec![
                Statement::new(
                    "UPDATE agentos_core_sessions SET config_options_json = ?2, \
                       config_revision = config_revision + 1, updated_at_ms = max(updated_at_ms, ?3) \
                     WHERE session_id = ?1",
                    vec![
                        session_id.into(),
                        json_text(&options).into(),
                        now_ms().into(),
                    ],
                )
                .expect_changes(1),
                Statement::new(
                    "SELECT config_revision FROM agentos_core_sessions WHERE session_id = ?1",
                    vec![session_id.into()],
                ),
            ])
            .await?;
        count(results.into_iter().nth(1).unwrap_or_default(), SESSIONS)
    }

    /// The statement that drops a session's pending continuation once a
    /// prompt has carried it; part of that prompt's accept transaction.
    pub fn clear_preamble_statement(session_id: &str) -> Statement {
        Statement::new(
            "UPDATE agentos_core_sessions SET pending_preamble = NULL WHERE session_id = ?1",
            vec![session_id.into()],
        )
    }
}
