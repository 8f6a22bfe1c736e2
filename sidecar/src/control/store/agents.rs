//! Agent rows: creation against the per-account limit, lookup (with the
//! asking account's collaboration in the same read), listing for an
//! account, updates, and deletion with everything that hangs off an agent.

use agentos_schema::{DbError, SqlValue, Statement};

use super::decode::{count, texts, Row};
use super::{bound, guarded, now_ms, nth, ControlStore, Guarded, AGENTS, SESSION_LINKS};
use crate::control::types::{
    AccessRole, AgentAccess, AgentRecord, AgentStatus, CollaboratorRole, CollaboratorStatus,
};

const AGENT_COLUMNS: &str = "agent_id, account_id, definition, name, adapter, status, \
    public_read, created_at_ms, updated_at_ms";
const AGENT_WIDTH: usize = 9;

fn qualified(alias: &str) -> String {
    AGENT_COLUMNS
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Decodes the first `AGENT_WIDTH` columns of `r`.
fn decode_agent(r: &mut Row) -> Result<AgentRecord, DbError> {
    Ok(AgentRecord {
        agent_id: r.text(0)?,
        account_id: r.text(1)?,
        definition: r.blob(2)?,
        name: r.text(3)?,
        adapter: r.text(4)?,
        status: r.parse(5, AgentStatus::parse)?,
        public_read: r.flag(6)?,
        created_at_ms: r.int(7)?,
        updated_at_ms: r.int(8)?,
    })
}

/// The statements that insert an agent while its owner has fewer than
/// `max`, read it back and count the owner's agents: a guard at index 0.
pub(crate) fn insert_agent_statements(record: &AgentRecord, max: u64) -> Vec<Statement> {
    vec![
        Statement::new(
            "INSERT INTO agentos_core_agents (agent_id, account_id, definition, name, adapter, \
               status, public_read, created_at_ms, updated_at_ms) \
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9 \
             WHERE (SELECT COUNT(*) FROM agentos_core_agents WHERE account_id = ?2) < ?10",
            vec![
                record.agent_id.as_str().into(),
                record.account_id.as_str().into(),
                SqlValue::Blob(record.definition.clone()),
                record.name.as_str().into(),
                record.adapter.as_str().into(),
                record.status.as_str().into(),
                record.public_read.into(),
                record.created_at_ms.into(),
                record.updated_at_ms.into(),
                bound(max),
            ],
        )
        .expect_changes(1),
        select_agent(&record.agent_id),
        Statement::new(
            "SELECT COUNT(*) FROM agentos_core_agents WHERE account_id = ?1",
            vec![record.account_id.as_str().into()],
        ),
    ]
}

fn select_agent(agent_id: &str) -> Statement {
    Statement::new(
        format!("SELECT {AGENT_COLUMNS} FROM agentos_core_agents WHERE agent_id = ?1"),
        vec![agent_id.into()],
    )
}

/// Reads back what [`insert_agent_statements`] wrote (results 1 and 2).
pub(crate) fn inserted_agent(
    results: &mut [agentos_schema::Rows],
) -> Result<(AgentRecord, u64), DbError> {
    let mut row = Row::first(nth(results, 1, AGENTS)?, AGENTS, AGENT_WIDTH)?;
    let agent = decode_agent(&mut row)?;
    Ok((agent, count(nth(results, 2, AGENTS)?, AGENTS)?))
}

impl ControlStore {
    pub async fn get_agent(&self, agent_id: &str) -> Result<Option<AgentRecord>, DbError> {
        let select = select_agent(agent_id);
        let rows = self.db.query(&select.sql, select.params).await?;
        Row::optional(rows, AGENTS, AGENT_WIDTH)?
            .map(|mut r| decode_agent(&mut r))
            .transpose()
    }

    /// The agent and, in the same read, the account's collaboration on it.
    #[allow(clippy::type_complexity)]
    pub async fn agent_with_access(
        &self,
        agent_id: &str,
        account: &str,
    ) -> Result<Option<(AgentRecord, Option<(CollaboratorRole, CollaboratorStatus)>)>, DbError>
    {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {}, c.role, c.status FROM agentos_core_agents a \
                     LEFT JOIN agentos_core_agent_collaborators c \
                       ON c.agent_id = a.agent_id AND c.account_id = ?2 \
                     WHERE a.agent_id = ?1",
                    qualified("a")
                ),
                vec![agent_id.into(), account.into()],
            )
            .await?;
        let Some(mut r) = Row::optional(rows, AGENTS, AGENT_WIDTH + 2)? else {
            return Ok(None);
        };
        let agent = decode_agent(&mut r)?;
        let role = r.opt_parse(AGENT_WIDTH, CollaboratorRole::parse)?;
        let status = r.opt_parse(AGENT_WIDTH + 1, CollaboratorStatus::parse)?;
        let collaboration = match (role, status) {
            (Some(role), Some(status)) => Some((role, status)),
            (None, None) => None,
            _ => {
                return Err(super::decode::corrupt(
                    AGENTS,
                    "a collaboration with a role but no status, or the reverse",
                ))
            }
        };
        Ok(Some((agent, collaboration)))
    }

    /// Owned agents, then accepted collaborations, each oldest first.
    pub async fn list_agents_for(&self, account: &str) -> Result<Vec<AgentAccess>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {owned}, 'owner', 0 FROM agentos_core_agents a \
                     WHERE a.account_id = ?1 \
                     UNION ALL \
                     SELECT {shared}, c.role, 1 FROM agentos_core_agent_collaborators c \
                     JOIN agentos_core_agents a ON a.agent_id = c.agent_id \
                     WHERE c.account_id = ?1 AND c.status = 'accepted' \
                     ORDER BY {group}, {created}, 1",
                    owned = qualified("a"),
                    shared = qualified("a"),
                    group = AGENT_WIDTH + 2,
                    created = 8,
                ),
                vec![account.into()],
            )
            .await?;
        Row::all(rows, AGENTS, AGENT_WIDTH + 2, |mut r| {
            let agent = decode_agent(&mut r)?;
            let access_role = r.parse(AGENT_WIDTH, AccessRole::parse)?;
            r.int(AGENT_WIDTH + 1)?;
            Ok(AgentAccess { agent, access_role })
        })
    }

    pub async fn insert_agent(
        &self,
        record: &AgentRecord,
        max: u64,
    ) -> Result<Guarded<AgentRecord>, DbError> {
        let statements = insert_agent_statements(record, max);
        let Some(mut results) = guarded(&self.db, statements, 0).await? else {
            return Ok(Guarded::Refused);
        };
        let (value, count) = inserted_agent(&mut results)?;
        Ok(Guarded::Done { value, count })
    }

    /// Applies `set` (SQL assignments over `?2…`) to the agent and reads
    /// it back; `None` when there is no such agent.
    async fn update_agent_with(
        &self,
        agent_id: &str,
        set: &str,
        mut params: Vec<SqlValue>,
    ) -> Result<Option<AgentRecord>, DbError> {
        let now_param = params.len() + 2;
        params.insert(0, agent_id.into());
        params.push(now_ms().into());
        let statements = vec![
            Statement::new(
                format!(
                    "UPDATE agentos_core_agents SET {set}, \
                       updated_at_ms = max(updated_at_ms, ?{now_param}) WHERE agent_id = ?1"
                ),
                params,
            )
            .expect_changes(1),
            select_agent(agent_id),
        ];
        let Some(mut results) = guarded(&self.db, statements, 0).await? else {
            return Ok(None);
        };
        let mut row = Row::first(nth(&mut results, 1, AGENTS)?, AGENTS, AGENT_WIDTH)?;
        decode_agent(&mut row).map(Some)
    }

    pub async fn update_agent(
        &self,
        agent_id: &str,
        definition: &[u8],
        name: &str,
        adapter: &str,
    ) -> Result<Option<AgentRecord>, DbError> {
        self.update_agent_with(
            agent_id,
            "definition = ?2, name = ?3, adapter = ?4",
            vec![definition.into(), name.into(), adapter.into()],
        )
        .await
    }

    pub async fn set_agent_status(
        &self,
        agent_id: &str,
        status: AgentStatus,
    ) -> Result<Option<AgentRecord>, DbError> {
        self.update_agent_with(agent_id, "status = ?2", vec![status.as_str().into()])
            .await
    }

    pub async fn set_public_read(
        &self,
        agent_id: &str,
        public_read: bool,
    ) -> Result<Option<AgentRecord>, DbError> {
        self.update_agent_with(agent_id, "public_read = ?2", vec![public_read.into()])
            .await
    }

    /// Deletes the agent, its collaborators, its session links, its tool
    /// documents and its hypermedia drafts in one transaction; answers the ids of its sessions
    /// that still exist, or `None` when there was no such agent.
    pub async fn delete_agent(&self, agent_id: &str) -> Result<Option<Vec<String>>, DbError> {
        let id = SqlValue::from(agent_id);
        let statements = vec![
            // Only sessions that still exist: the caller deletes these.
            Statement::new(
                "SELECT l.session_id FROM agentos_core_agent_sessions l \
                 JOIN agentos_core_sessions s ON s.session_id = l.session_id \
                 WHERE l.agent_id = ?1 ORDER BY l.session_id",
                vec![id.clone()],
            ),
            Statement::new(
                "DELETE FROM agentos_core_agent_collaborators WHERE agent_id = ?1",
                vec![id.clone()],
            ),
            Statement::new(
                "DELETE FROM agentos_core_agent_sessions WHERE agent_id = ?1",
                vec![id.clone()],
            ),
            Statement::new(
                "DELETE FROM agentos_core_agents WHERE agent_id = ?1",
                vec![id],
            )
            .expect_changes(1),
            super::tool_documents::delete_agent_tools_statement(agent_id),
            crate::hypermedia::drafts::delete_agent_drafts_statement(agent_id),
        ];
        let Some(mut results) = guarded(&self.db, statements, 3).await? else {
            return Ok(None);
        };
        texts(nth(&mut results, 0, SESSION_LINKS)?, SESSION_LINKS).map(Some)
    }

    pub async fn agent_count(&self, account: &str) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(
                "SELECT COUNT(*) FROM agentos_core_agents WHERE account_id = ?1",
                vec![account.into()],
            )
            .await?;
        count(rows, AGENTS)
    }
}
