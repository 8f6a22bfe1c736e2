//! Retention of the bounded record collections (terminal prompt records and
//! permission outcome tombstones): the oldest retained records, and the
//! statements that drop them with their counters.

use agentos_schema::{DbError, SqlValue, Statement};

use super::decode::pairs;
use super::SessionStore;

/// The bounded collections whose oldest records are pruned to admit new ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retained {
    /// Terminal prompt records (an active prompt is never pruned).
    Prompts,
    /// Permission outcome tombstones.
    Outcomes,
}

impl Retained {
    /// Table, key column, age column and row filter.
    fn columns(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Retained::Prompts => (
                "agentos_core_prompts",
                "prompt_id",
                "completed_at_ms",
                "AND state <> 'accepted'",
            ),
            Retained::Outcomes => (
                "agentos_core_permission_outcomes",
                "request_id",
                "terminal_at_ms",
                "",
            ),
        }
    }

    /// The counter column on the session and VM rows.
    fn counter(self) -> &'static str {
        match self {
            Retained::Prompts => "prompt_count",
            Retained::Outcomes => "outcome_count",
        }
    }
}

impl SessionStore {
    /// The oldest retained records of a bounded collection (of one session,
    /// or VM-wide), oldest first: what retention drops to admit a new one.
    pub async fn oldest(
        &self,
        what: Retained,
        session_id: Option<&str>,
        n: u64,
    ) -> Result<Vec<(String, String)>, DbError> {
        let (table, key, age, filter) = what.columns();
        let rows = match session_id {
            Some(id) => {
                self.db
                    .query(
                        &format!(
                            "SELECT session_id, {key} FROM {table} WHERE session_id = ?1 {filter} \
                             ORDER BY {age}, {key} LIMIT ?2"
                        ),
                        vec![id.into(), SqlValue::Integer(n as i64)],
                    )
                    .await?
            }
            None => {
                self.db
                    .query(
                        &format!(
                            "SELECT session_id, {key} FROM {table} WHERE true {filter} \
                             ORDER BY {age}, session_id, {key} LIMIT ?1"
                        ),
                        vec![SqlValue::Integer(n as i64)],
                    )
                    .await?
            }
        };
        pairs(rows, table)
    }

    /// Statements dropping retained records (for outcomes, with their
    /// terminal permission records: a late answer then gets
    /// `request_not_found`). Counters move by what is actually there, so two
    /// writers pruning the same record stay exact.
    pub fn delete_statements(what: Retained, victims: &[(String, String)]) -> Vec<Statement> {
        let (table, key, _, filter) = what.columns();
        let counter = what.counter();
        let mut statements = Vec::with_capacity(victims.len() * 4);
        for (session_id, id) in victims {
            let exists = format!(
                "(SELECT count(*) FROM {table} WHERE session_id = ?1 AND {key} = ?2 {filter})"
            );
            let params = vec![session_id.as_str().into(), id.as_str().into()];
            statements.push(Statement::new(
                format!(
                    "UPDATE agentos_core_vm_counters SET {counter} = {counter} - {exists} \
                     WHERE singleton = 1"
                ),
                params.clone(),
            ));
            statements.push(Statement::new(
                format!(
                    "UPDATE agentos_core_sessions SET {counter} = {counter} - {exists} \
                     WHERE session_id = ?1"
                ),
                params.clone(),
            ));
            statements.push(Statement::new(
                format!("DELETE FROM {table} WHERE session_id = ?1 AND {key} = ?2 {filter}"),
                params.clone(),
            ));
            if what == Retained::Prompts {
                // A turn's key is remembered as long as its prompt record.
                statements.push(crate::runs::store::RunStore::forget_key_statement(
                    session_id, id,
                ));
            }
            if what == Retained::Outcomes {
                statements.push(Statement::new(
                    "DELETE FROM agentos_core_permission_records \
                     WHERE session_id = ?1 AND request_id = ?2 AND state <> 'pending'",
                    params,
                ));
            }
        }
        statements
    }
}
