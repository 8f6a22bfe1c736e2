//! Collaborator rows: invitations (bounded per agent and per invitee),
//! acceptance, removal, and the listings both sides see.

use agentos_schema::{DbError, Statement};

use super::decode::{count, Row};
use super::{bound, guarded, now_ms, nth, ControlStore, Guarded, COLLABORATORS};
use crate::control::types::{CollaboratorRecord, CollaboratorRole, CollaboratorStatus, Invite};

const COLLABORATOR_COLUMNS: &str =
    "agent_id, account_id, role, status, created_at_ms, updated_at_ms, accepted_at_ms";
const COLLABORATOR_WIDTH: usize = 7;

fn decode_collaborator(mut r: Row) -> Result<CollaboratorRecord, DbError> {
    Ok(CollaboratorRecord {
        agent_id: r.text(0)?,
        account_id: r.text(1)?,
        role: r.parse(2, CollaboratorRole::parse)?,
        status: r.parse(3, CollaboratorStatus::parse)?,
        created_at_ms: r.int(4)?,
        updated_at_ms: r.int(5)?,
        accepted_at_ms: r.opt_int(6)?,
    })
}

fn select_collaborator(agent_id: &str, account: &str) -> Statement {
    Statement::new(
        format!(
            "SELECT {COLLABORATOR_COLUMNS} FROM agentos_core_agent_collaborators \
             WHERE agent_id = ?1 AND account_id = ?2"
        ),
        vec![agent_id.into(), account.into()],
    )
}

impl ControlStore {
    /// Invites `account` (not the owner) to the agent, or changes the role
    /// of an existing collaborator (keeping its status). A new row needs
    /// room under both bounds. `Refused` when the agent is missing, the
    /// invitee owns it, or a bound is reached.
    pub async fn invite(
        &self,
        agent_id: &str,
        account: &str,
        role: CollaboratorRole,
        max_per_agent: u64,
        max_per_account: u64,
    ) -> Result<Guarded<CollaboratorRecord>, DbError> {
        let statements = vec![
            Statement::new(
                "INSERT INTO agentos_core_agent_collaborators \
                   (agent_id, account_id, role, status, created_at_ms, updated_at_ms) \
                 SELECT ?1, ?2, ?3, 'pending', ?4, ?4 \
                 WHERE EXISTS (SELECT 1 FROM agentos_core_agents \
                               WHERE agent_id = ?1 AND account_id <> ?2) \
                   AND (EXISTS (SELECT 1 FROM agentos_core_agent_collaborators \
                                WHERE agent_id = ?1 AND account_id = ?2) \
                        OR ((SELECT COUNT(*) FROM agentos_core_agent_collaborators \
                             WHERE agent_id = ?1) < ?5 \
                            AND (SELECT COUNT(*) FROM agentos_core_agent_collaborators \
                                 WHERE account_id = ?2) < ?6)) \
                 ON CONFLICT (agent_id, account_id) DO UPDATE SET role = excluded.role, \
                   updated_at_ms = max(updated_at_ms, excluded.updated_at_ms)",
                vec![
                    agent_id.into(),
                    account.into(),
                    role.as_str().into(),
                    now_ms().into(),
                    bound(max_per_agent),
                    bound(max_per_account),
                ],
            )
            .expect_changes(1),
            select_collaborator(agent_id, account),
            Statement::new(
                "SELECT COUNT(*) FROM agentos_core_agent_collaborators WHERE agent_id = ?1",
                vec![agent_id.into()],
            ),
        ];
        let Some(mut results) = guarded(&self.db, statements, 0).await? else {
            return Ok(Guarded::Refused);
        };
        let value = decode_collaborator(Row::first(
            nth(&mut results, 1, COLLABORATORS)?,
            COLLABORATORS,
            COLLABORATOR_WIDTH,
        )?)?;
        let count = count(nth(&mut results, 2, COLLABORATORS)?, COLLABORATORS)?;
        Ok(Guarded::Done { value, count })
    }

    /// Rows of the agent and of the invitee: what a refused invite is
    /// measured against.
    pub async fn collaborator_counts(
        &self,
        agent_id: &str,
        account: &str,
    ) -> Result<(u64, u64), DbError> {
        let rows = self
            .db
            .query(
                "SELECT (SELECT COUNT(*) FROM agentos_core_agent_collaborators \
                         WHERE agent_id = ?1), \
                        (SELECT COUNT(*) FROM agentos_core_agent_collaborators \
                         WHERE account_id = ?2)",
                vec![agent_id.into(), account.into()],
            )
            .await?;
        let mut r = Row::first(rows, COLLABORATORS, 2)?;
        Ok((r.uint(0)?, r.uint(1)?))
    }

    /// Accepts the account's invitation (accepting twice is harmless);
    /// `false` when there is none.
    pub async fn accept_invite(&self, agent_id: &str, account: &str) -> Result<bool, DbError> {
        let statements = vec![Statement::new(
            "UPDATE agentos_core_agent_collaborators SET status = 'accepted', \
               accepted_at_ms = COALESCE(accepted_at_ms, max(created_at_ms, ?3)), \
               updated_at_ms = max(updated_at_ms, ?3) \
             WHERE agent_id = ?1 AND account_id = ?2",
            vec![agent_id.into(), account.into(), now_ms().into()],
        )
        .expect_changes(1)];
        Ok(guarded(&self.db, statements, 0).await?.is_some())
    }

    /// Deletes the collaboration; with `pending_only`, only an unaccepted
    /// one. `false` when there was none.
    pub async fn delete_collaborator(
        &self,
        agent_id: &str,
        account: &str,
        pending_only: bool,
    ) -> Result<bool, DbError> {
        let sql = if pending_only {
            "DELETE FROM agentos_core_agent_collaborators \
             WHERE agent_id = ?1 AND account_id = ?2 AND status = 'pending'"
        } else {
            "DELETE FROM agentos_core_agent_collaborators WHERE agent_id = ?1 AND account_id = ?2"
        };
        let statements =
            vec![Statement::new(sql, vec![agent_id.into(), account.into()]).expect_changes(1)];
        Ok(guarded(&self.db, statements, 0).await?.is_some())
    }

    pub async fn list_collaborators(
        &self,
        agent_id: &str,
    ) -> Result<Vec<CollaboratorRecord>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLLABORATOR_COLUMNS} FROM agentos_core_agent_collaborators \
                     WHERE agent_id = ?1 ORDER BY created_at_ms, account_id"
                ),
                vec![agent_id.into()],
            )
            .await?;
        Row::all(rows, COLLABORATORS, COLLABORATOR_WIDTH, decode_collaborator)
    }

    /// The account's pending invitations, oldest first, with the agent's
    /// name and owner.
    pub async fn list_invites_for(&self, account: &str) -> Result<Vec<Invite>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT c.agent_id, a.name, a.account_id, c.role, c.created_at_ms, \
                   c.updated_at_ms \
                 FROM agentos_core_agent_collaborators c \
                 JOIN agentos_core_agents a ON a.agent_id = c.agent_id \
                 WHERE c.account_id = ?1 AND c.status = 'pending' \
                 ORDER BY c.created_at_ms, c.agent_id",
                vec![account.into()],
            )
            .await?;
        Row::all(rows, COLLABORATORS, 6, |mut r| {
            Ok(Invite {
                agent_id: r.text(0)?,
                agent_name: r.text(1)?,
                owner_account_id: r.text(2)?,
                role: r.parse(3, CollaboratorRole::parse)?,
                created_at_ms: r.int(4)?,
                updated_at_ms: r.int(5)?,
            })
        })
    }
}
