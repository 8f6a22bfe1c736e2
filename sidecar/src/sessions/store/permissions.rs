//! Permission records and outcome tombstones: the statements that record a
//! pending `ask` request and resolve it, the stored verdict on a request
//! (record first, then tombstone) and a session's pending requests.

use agentos_schema::{DbError, SqlValue, Statement};

use super::decode::{texts, Row, PERMISSION_OUTCOMES, PERMISSION_RECORDS};
use super::SessionStore;

/// A permission record's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermissionState {
    Pending,
    /// Answered by the host (`terminal_reason` is `accepted`).
    Responded,
    /// Ended without an answer, with its reason.
    Terminal,
}

impl PermissionState {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionState::Pending => "pending",
            PermissionState::Responded => "responded",
            PermissionState::Terminal => "terminal",
        }
    }

    pub fn parse(s: &str) -> Option<PermissionState> {
        match s {
            "pending" => Some(PermissionState::Pending),
            "responded" => Some(PermissionState::Responded),
            "terminal" => Some(PermissionState::Terminal),
            _ => None,
        }
    }
}

/// A stored permission record.
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionRow {
    pub request_id: String,
    pub prompt_id: String,
    pub state: PermissionState,
    pub terminal_reason: Option<String>,
}

impl SessionStore {
    /// Statements recording a new pending `ask` permission; the session goes
    /// to `waiting`.
    pub fn pending_permission_statements(
        session_id: &str,
        request_id: &str,
        prompt_id: &str,
        request_json: &str,
        request_sequence: u64,
        now: i64,
    ) -> Vec<Statement> {
        vec![
            Statement::new(
                "INSERT INTO agentos_core_permission_records (session_id, request_id, prompt_id, \
                   state, request_json, request_sequence, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?6)",
                vec![
                    session_id.into(),
                    request_id.into(),
                    prompt_id.into(),
                    request_json.into(),
                    SqlValue::Integer(request_sequence as i64),
                    now.into(),
                ],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_sessions SET state = 'waiting', \
                   pending_permission_count = pending_permission_count + 1 \
                 WHERE session_id = ?1 AND state IN ('running', 'waiting')",
                vec![session_id.into()],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_vm_counters SET pending_permission_count = pending_permission_count + 1 \
                 WHERE singleton = 1",
                vec![],
            )
            .expect_changes(1),
        ]
    }

    /// Statements resolving one pending permission with `reason`
    /// (`accepted` for an answer); the session returns to `running` when it
    /// was the last pending one.
    pub fn resolve_permission_statements(
        session_id: &str,
        request_id: &str,
        reason: &str,
        response_json: Option<&str>,
        terminal_sequence: u64,
        now: i64,
    ) -> Vec<Statement> {
        let state = if reason == "accepted" {
            PermissionState::Responded
        } else {
            PermissionState::Terminal
        };
        vec![
            Statement::new(
                "UPDATE agentos_core_permission_records SET state = ?3, terminal_reason = ?4, \
                   response_json = ?5, terminal_sequence = ?6, updated_at_ms = ?7 \
                 WHERE session_id = ?1 AND request_id = ?2 AND state = 'pending'",
                vec![
                    session_id.into(),
                    request_id.into(),
                    state.as_str().into(),
                    reason.into(),
                    response_json.into(),
                    SqlValue::Integer(terminal_sequence as i64),
                    now.into(),
                ],
            )
            .expect_changes(1),
            Statement::new(
                "INSERT INTO agentos_core_permission_outcomes (session_id, request_id, terminal_reason, terminal_at_ms) \
                 VALUES (?1, ?2, ?3, ?4)",
                vec![session_id.into(), request_id.into(), reason.into(), now.into()],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_sessions SET \
                   pending_permission_count = pending_permission_count - 1, \
                   outcome_count = outcome_count + 1, \
                   state = CASE WHEN state = 'waiting' AND pending_permission_count = 1 THEN 'running' ELSE state END \
                 WHERE session_id = ?1",
                vec![session_id.into()],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_vm_counters SET \
                   pending_permission_count = pending_permission_count - 1, \
                   outcome_count = outcome_count + 1 \
                 WHERE singleton = 1",
                vec![],
            )
            .expect_changes(1),
        ]
    }

    /// The stored verdict on a permission request: the record first, then the
    /// tombstone. `None` when neither is retained.
    pub async fn permission_status(
        &self,
        session_id: &str,
        request_id: &str,
    ) -> Result<Option<PermissionRow>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT request_id, prompt_id, state, terminal_reason \
                 FROM agentos_core_permission_records WHERE session_id = ?1 AND request_id = ?2",
                vec![session_id.into(), request_id.into()],
            )
            .await?;
        if let Some(values) = rows.rows.into_iter().next() {
            let mut r = Row::new(PERMISSION_RECORDS, values, 4)?;
            return Ok(Some(PermissionRow {
                request_id: r.text(0)?,
                prompt_id: r.text(1)?,
                state: r.parse(2, PermissionState::parse)?,
                terminal_reason: r.opt_text(3)?,
            }));
        }
        let rows = self
            .db
            .query(
                "SELECT terminal_reason FROM agentos_core_permission_outcomes \
                 WHERE session_id = ?1 AND request_id = ?2",
                vec![session_id.into(), request_id.into()],
            )
            .await?;
        let Some(values) = rows.rows.into_iter().next() else {
            return Ok(None);
        };
        let mut r = Row::new(PERMISSION_OUTCOMES, values, 1)?;
        Ok(Some(PermissionRow {
            request_id: request_id.to_owned(),
            prompt_id: String::new(),
            state: PermissionState::Terminal,
            terminal_reason: Some(r.text(0)?),
        }))
    }

    /// Pending permission requests of a session, for `state.requests`.
    pub async fn pending_permissions(&self, session_id: &str) -> Result<Vec<String>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT request_id FROM agentos_core_permission_records \
                 WHERE session_id = ?1 AND state = 'pending' ORDER BY request_sequence",
                vec![session_id.into()],
            )
            .await?;
        texts(rows, PERMISSION_RECORDS)
    }
}
