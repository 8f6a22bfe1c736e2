//! Prompt records: lookup by id, the statements that accept a
//! prompt (session to running, one accepted prompt per session) and those
//! that end it (terminal state, session back to idle or failed).

use agentos_schema::{DbError, SqlValue, Statement};
use serde_json::Value;

use super::decode::{Row, PROMPTS};
use super::SessionStore;

/// A prompt record's state: accepted until its terminal commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptState {
    Accepted,
    Completed,
    Failed,
    Cancelled,
}

impl PromptState {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptState::Accepted => "accepted",
            PromptState::Completed => "completed",
            PromptState::Failed => "failed",
            PromptState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<PromptState> {
        match s {
            "accepted" => Some(PromptState::Accepted),
            "completed" => Some(PromptState::Completed),
            "failed" => Some(PromptState::Failed),
            "cancelled" => Some(PromptState::Cancelled),
            _ => None,
        }
    }
}

/// A stored prompt record.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptRow {
    pub prompt_id: String,
    pub input_hash: Vec<u8>,
    pub state: PromptState,
    pub result: Option<Value>,
    pub error: Option<Value>,
    /// Where the prompt's words start in the log.
    pub first_input: Option<u64>,
}

impl SessionStore {
    pub async fn find_prompt(
        &self,
        session_id: &str,
        prompt_id: &str,
    ) -> Result<Option<PromptRow>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT prompt_id, input_hash, state, result_json, error_json, \
                 first_input_sequence \
                 FROM agentos_core_prompts WHERE session_id = ?1 AND prompt_id = ?2",
                vec![session_id.into(), prompt_id.into()],
            )
            .await?;
        let Some(values) = rows.rows.into_iter().next() else {
            return Ok(None);
        };
        let mut r = Row::new(PROMPTS, values, 6)?;
        Ok(Some(PromptRow {
            prompt_id: r.text(0)?,
            input_hash: r.blob(1)?,
            state: r.parse(2, PromptState::parse)?,
            result: r.opt_json(3)?,
            error: r.opt_json(4)?,
            first_input: r.opt_int(5)?.and_then(|s| u64::try_from(s).ok()),
        }))
    }

    /// The session's latest prompt: its id, state and where its input
    /// starts in the log.
    pub async fn latest_prompt(
        &self,
        session_id: &str,
    ) -> Result<Option<(String, PromptState, Option<u64>)>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT prompt_id, state, first_input_sequence FROM agentos_core_prompts \
                 WHERE session_id = ?1 ORDER BY created_at_ms DESC, rowid DESC LIMIT 1",
                vec![session_id.into()],
            )
            .await?;
        let Some(values) = rows.rows.into_iter().next() else {
            return Ok(None);
        };
        let mut r = Row::new(PROMPTS, values, 3)?;
        Ok(Some((
            r.text(0)?,
            r.parse(1, PromptState::parse)?,
            r.opt_int(2)?.and_then(|s| u64::try_from(s).ok()),
        )))
    }

    /// The last sequence a prompt's turn wrote, if it wrote any.
    pub async fn prompt_last_output(
        &self,
        session_id: &str,
        prompt_id: &str,
    ) -> Result<Option<u64>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT last_output_sequence FROM agentos_core_prompts \
                 WHERE session_id = ?1 AND prompt_id = ?2",
                vec![session_id.into(), prompt_id.into()],
            )
            .await?;
        let Some(values) = rows.rows.into_iter().next() else {
            return Ok(None);
        };
        let mut r = Row::new(PROMPTS, values, 1)?;
        Ok(r.opt_int(0)?.and_then(|s| u64::try_from(s).ok()))
    }

    /// The last event the agent wrote for prompts whose input starts before
    /// `floor` (their answers may follow a later prompt's words, which were
    /// queued while they ran); `None` when no such record is retained.
    pub async fn output_before(
        &self,
        session_id: &str,
        floor: u64,
    ) -> Result<Option<u64>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT max(last_output_sequence) FROM agentos_core_prompts \
                 WHERE session_id = ?1 AND first_input_sequence < ?2",
                vec![
                    session_id.into(),
                    SqlValue::Integer(i64::try_from(floor).unwrap_or(i64::MAX)),
                ],
            )
            .await?;
        let Some(values) = rows.rows.into_iter().next() else {
            return Ok(None);
        };
        let mut r = Row::new(PROMPTS, values, 1)?;
        Ok(r.opt_int(0)?.and_then(|s| u64::try_from(s).ok()))
    }

    /// Statements accepting a prompt: session → running (only from idle or
    /// failed), prompt row `accepted` (the partial unique index allows one),
    /// and the counters.
    pub fn accept_prompt_statements(
        session_id: &str,
        prompt_id: &str,
        input_hash: &[u8],
        first_input_sequence: u64,
        now: i64,
    ) -> Vec<Statement> {
        vec![
            Statement::new(
                "UPDATE agentos_core_sessions SET state = 'running', state_prompt_id = ?2, \
                   state_started_at_ms = ?3, state_error_json = NULL, \
                   prompt_count = prompt_count + 1, updated_at_ms = max(updated_at_ms, ?3) \
                 WHERE session_id = ?1 AND state IN ('idle', 'failed')",
                vec![session_id.into(), prompt_id.into(), now.into()],
            )
            .expect_changes(1),
            Statement::new(
                "INSERT INTO agentos_core_prompts (session_id, prompt_id, \
                   input_hash, state, first_input_sequence, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, 'accepted', ?4, ?5, ?5)",
                vec![
                    session_id.into(),
                    prompt_id.into(),
                    input_hash.into(),
                    SqlValue::Integer(first_input_sequence as i64),
                    now.into(),
                ],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_vm_counters SET prompt_count = prompt_count + 1 \
                 WHERE singleton = 1",
                vec![],
            )
            .expect_changes(1),
        ]
    }

    /// Statements ending a prompt: its terminal state and the session back
    /// to idle (or failed with `session_error`). The route ends the prompt's
    /// pending permissions first, with the events that say so.
    #[allow(clippy::too_many_arguments)]
    pub fn finish_prompt_statements(
        session_id: &str,
        prompt_id: &str,
        state: PromptState,
        result: Option<&Value>,
        error: Option<&Value>,
        session_error: Option<&Value>,
        last_output_sequence: u64,
        now: i64,
    ) -> Vec<Statement> {
        let mut statements = vec![Statement::new(
            "UPDATE agentos_core_prompts SET state = ?3, result_json = ?4, error_json = ?5, \
                   last_output_sequence = ?6, updated_at_ms = ?7, completed_at_ms = ?7 \
                 WHERE session_id = ?1 AND prompt_id = ?2 AND state = 'accepted'",
            vec![
                session_id.into(),
                prompt_id.into(),
                state.as_str().into(),
                result.map(Value::to_string).into(),
                error.map(Value::to_string).into(),
                SqlValue::Integer(last_output_sequence as i64),
                now.into(),
            ],
        )
        .expect_changes(1)];
        statements.push(match session_error {
            None => Statement::new(
                "UPDATE agentos_core_sessions SET state = 'idle', state_prompt_id = NULL, \
                   state_started_at_ms = NULL, state_error_json = NULL, \
                   updated_at_ms = max(updated_at_ms, ?2) \
                 WHERE session_id = ?1",
                vec![session_id.into(), now.into()],
            ),
            Some(error) => Statement::new(
                "UPDATE agentos_core_sessions SET state = 'failed', state_error_json = ?2, \
                   updated_at_ms = max(updated_at_ms, ?3) \
                 WHERE session_id = ?1",
                vec![session_id.into(), error.to_string().into(), now.into()],
            ),
        });
        statements
    }
}
