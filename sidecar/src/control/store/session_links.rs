//! Which Seed agent each session serves. The session rows belong to the
//! sessions service; a link is made only for a session row that exists,
//! reads join the session rows (so a link whose session is gone is never
//! seen), and listing pages on the session's `(updated_at_ms, session_id)`,
//! both descending.

use agentos_schema::{DbError, SqlValue, Statement};

use super::decode::{count, texts, Row};
use super::{guarded, now_ms, nth, ControlStore, SESSION_LINKS};
use crate::control::types::{SessionCursor, SessionLink, SessionListRow, SessionScope};

const LINK_COLUMNS: &str =
    "l.session_id, l.agent_id, l.account_id, l.created_at_ms, l.parent_session_id, l.run_id";
const LINK_WIDTH: usize = 6;
const LIST_WIDTH: usize = 7;

fn decode_link(mut r: Row) -> Result<SessionLink, DbError> {
    Ok(SessionLink {
        session_id: r.text(0)?,
        agent_id: r.text(1)?,
        account_id: r.text(2)?,
        created_at_ms: r.int(3)?,
        parent_session_id: r.opt_text(4)?,
        run_id: r.opt_text(5)?,
    })
}

/// Records that a linked session works for `parent_session_id` and `run_id`
/// (a delegated child's), with the link.
pub(crate) fn child_link_statement(
    session_id: &str,
    parent_session_id: Option<&str>,
    run_id: &str,
) -> Statement {
    Statement::new(
        "UPDATE agentos_core_agent_sessions SET parent_session_id = ?2, run_id = ?3 \
         WHERE session_id = ?1",
        vec![
            session_id.into(),
            parent_session_id.map(str::to_owned).into(),
            run_id.into(),
        ],
    )
    .expect_changes(1)
}

/// Links a session inserted in the same transaction to an existing agent
/// (and its owner); changes nothing, failing the transaction, when the
/// agent is gone.
pub(crate) fn link_statement(session_id: &str, agent_id: &str, now: i64) -> Statement {
    Statement::new(
        "INSERT INTO agentos_core_agent_sessions (session_id, agent_id, account_id, created_at_ms) \
         SELECT ?1, agent_id, account_id, ?3 FROM agentos_core_agents WHERE agent_id = ?2",
        vec![session_id.into(), agent_id.into(), now.into()],
    )
    .expect_changes(1)
}

fn select_link(session_id: &str) -> Statement {
    Statement::new(
        format!(
            "SELECT {LINK_COLUMNS} FROM agentos_core_agent_sessions l \
             JOIN agentos_core_sessions s ON s.session_id = l.session_id \
             WHERE l.session_id = ?1"
        ),
        vec![session_id.into()],
    )
}

/// Why a link was not made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkRefusal {
    NoAgent,
    NoSession,
    AlreadyLinked,
}

impl ControlStore {
    /// Links an existing session to an existing agent (and its owner).
    /// Links of the same agent whose sessions are gone are dropped in the
    /// same transaction, so links never outnumber sessions for long.
    /// `with` are statements that commit with the link or not at all (an
    /// idempotency record).
    pub async fn link_session(
        &self,
        session_id: &str,
        agent_id: &str,
        with: Vec<Statement>,
    ) -> Result<Result<SessionLink, LinkRefusal>, DbError> {
        let mut statements = vec![
            Statement::new(
                "DELETE FROM agentos_core_agent_sessions WHERE agent_id = ?1 \
                   AND NOT EXISTS (SELECT 1 FROM agentos_core_sessions s \
                                   WHERE s.session_id = agentos_core_agent_sessions.session_id)",
                vec![agent_id.into()],
            ),
            Statement::new(
                "INSERT INTO agentos_core_agent_sessions \
                   (session_id, agent_id, account_id, created_at_ms) \
                 SELECT ?1, agent_id, account_id, ?3 FROM agentos_core_agents \
                 WHERE agent_id = ?2 \
                   AND EXISTS (SELECT 1 FROM agentos_core_sessions WHERE session_id = ?1) \
                 ON CONFLICT (session_id) DO NOTHING",
                vec![session_id.into(), agent_id.into(), now_ms().into()],
            )
            .expect_changes(1),
            select_link(session_id),
        ];
        statements.extend(with);
        match guarded(&self.db, statements, 1).await? {
            Some(mut results) => {
                let row = Row::first(
                    nth(&mut results, 2, SESSION_LINKS)?,
                    SESSION_LINKS,
                    LINK_WIDTH,
                )?;
                Ok(Ok(decode_link(row)?))
            }
            None => {
                let rows = self
                    .db
                    .query(
                        "SELECT EXISTS (SELECT 1 FROM agentos_core_agents WHERE agent_id = ?2), \
                           EXISTS (SELECT 1 FROM agentos_core_sessions WHERE session_id = ?1)",
                        vec![session_id.into(), agent_id.into()],
                    )
                    .await?;
                let mut r = Row::first(rows, SESSION_LINKS, 2)?;
                Ok(Err(match (r.flag(0)?, r.flag(1)?) {
                    (false, _) => LinkRefusal::NoAgent,
                    (true, false) => LinkRefusal::NoSession,
                    (true, true) => LinkRefusal::AlreadyLinked,
                }))
            }
        }
    }

    /// `false` when the session had no link.
    pub async fn unlink_session(&self, session_id: &str) -> Result<bool, DbError> {
        let rows = self
            .db
            .transaction(vec![Statement::new(
                "DELETE FROM agentos_core_agent_sessions WHERE session_id = ?1",
                vec![session_id.into()],
            )])
            .await?;
        Ok(rows.first().map(|r| r.changes) == Some(1))
    }

    pub async fn session_agent(&self, session_id: &str) -> Result<Option<SessionLink>, DbError> {
        let select = select_link(session_id);
        let rows = self.db.query(&select.sql, select.params).await?;
        Row::optional(rows, SESSION_LINKS, LINK_WIDTH)?
            .map(decode_link)
            .transpose()
    }

    /// The ids of the agent's live sessions.
    pub async fn session_ids_of(&self, agent_id: &str) -> Result<Vec<String>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT l.session_id FROM agentos_core_agent_sessions l \
                 JOIN agentos_core_sessions s ON s.session_id = l.session_id \
                 WHERE l.agent_id = ?1 ORDER BY l.session_id",
                vec![agent_id.into()],
            )
            .await?;
        texts(rows, SESSION_LINKS)
    }

    pub async fn session_count_of(&self, agent_id: &str) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(
                "SELECT COUNT(*) FROM agentos_core_agent_sessions l \
                 JOIN agentos_core_sessions s ON s.session_id = l.session_id \
                 WHERE l.agent_id = ?1",
                vec![agent_id.into()],
            )
            .await?;
        count(rows, SESSION_LINKS)
    }

    /// Up to `limit` sessions of the scope after `cursor`, newest first on
    /// `(updated_at_ms, session_id)`.
    pub async fn list_sessions_page(
        &self,
        scope: &SessionScope,
        cursor: Option<&SessionCursor>,
        limit: u64,
    ) -> Result<Vec<SessionListRow>, DbError> {
        let (scope_sql, scope_param) = match scope {
            SessionScope::Agent(agent_id) => ("l.agent_id = ?1", agent_id),
            SessionScope::Account(account) => (
                "(l.account_id = ?1 OR l.agent_id IN \
                   (SELECT agent_id FROM agentos_core_agent_collaborators \
                    WHERE account_id = ?1 AND status = 'accepted'))",
                account,
            ),
        };
        let mut params = vec![
            SqlValue::from(scope_param.as_str()),
            SqlValue::Integer(i64::try_from(limit).unwrap_or(i64::MAX)),
        ];
        let cursor_sql = match cursor {
            None => "",
            Some(c) => {
                params.push(c.updated_before.into());
                params.push(c.id_before.as_str().into());
                "AND (s.updated_at_ms < ?3 OR (s.updated_at_ms = ?3 AND s.session_id < ?4))"
            }
        };
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT s.session_id, l.agent_id, l.account_id, s.created_at_ms, \
                       s.updated_at_ms, l.parent_session_id, l.run_id \
                     FROM agentos_core_agent_sessions l \
                     JOIN agentos_core_sessions s ON s.session_id = l.session_id \
                     WHERE {scope_sql} {cursor_sql} \
                     ORDER BY s.updated_at_ms DESC, s.session_id DESC LIMIT ?2"
                ),
                params,
            )
            .await?;
        Row::all(rows, SESSION_LINKS, LIST_WIDTH, |mut r| {
            Ok(SessionListRow {
                session_id: r.text(0)?,
                agent_id: r.text(1)?,
                account_id: r.text(2)?,
                created_at_ms: r.int(3)?,
                updated_at_ms: r.int(4)?,
                parent_session_id: r.opt_text(5)?,
                run_id: r.opt_text(6)?,
            })
        })
    }
}
