//! After a successful write, the handlers tell `/agents/ws` what changed
//! (see `http::ws::changes`). The write stands whatever happens here: a
//! failure to read what to announce is logged, never answered. With no
//! socket subscribed to anything, nothing is read at all.

use super::{render, SignedApi};
use crate::http::ws::audience;

impl SignedApi {
    /// `agents/<id>` subscribers are re-checked and told the agent; its
    /// owner's and accepted collaborators' accounts, and `extra`, are told
    /// `reason`.
    pub(super) async fn announce_agent(&self, agent_id: &str, reason: &str, extra: &[String]) {
        // Who may see it may have changed: the account feed reads it again.
        self.sockets.audiences_changed();
        if self.sockets.is_quiet() {
            return;
        }
        let read = async {
            let agent = self.control.get_agent(agent_id).await?;
            let collaborators = self.control.list_collaborators(agent_id).await?;
            Ok::<_, crate::control::ControlError>(agent.map(|agent| (agent, collaborators)))
        };
        let (agent, collaborators) = match read.await {
            Ok(Some(found)) => found,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(agent = %agent_id, error = %e, "cannot announce an agent's change");
                return;
            }
        };
        self.sockets.agent_changed(&agent, &collaborators, |role| {
            render::agent(&agent, Some(role)).ok()
        });
        let mut accounts = audience(&agent, &collaborators);
        for account in extra {
            if !accounts.contains(account) {
                accounts.push(account.clone());
            }
        }
        self.sockets
            .account_changed(&accounts, reason, Some(agent_id), None);
    }

    /// The accounts to tell about `agent_id` (read before it is deleted).
    pub(super) async fn audience_of(&self, agent_id: &str) -> Vec<String> {
        if self.sockets.is_quiet() {
            return Vec::new();
        }
        let read = async {
            let agent = self.control.get_agent(agent_id).await?;
            let collaborators = self.control.list_collaborators(agent_id).await?;
            Ok::<_, crate::control::ControlError>(agent.map(|a| audience(&a, &collaborators)))
        };
        match read.await {
            Ok(accounts) => accounts.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(agent = %agent_id, error = %e, "cannot read an agent's audience");
                Vec::new()
            }
        }
    }

    /// A session of `agent_id` was created, updated or deleted: the
    /// agent's accounts are told, and a new or updated session's state goes
    /// to its subscribers, its agent's and its accounts'.
    pub(crate) async fn announce_session(&self, agent_id: &str, session_id: &str, reason: &str) {
        if self.sockets.is_quiet() {
            return;
        }
        let accounts = self.audience_of(agent_id).await;
        self.sockets
            .account_changed(&accounts, reason, Some(agent_id), Some(session_id));
        if reason != crate::http::ws::reason::SESSION_DELETED {
            match self.sessions.get(session_id).await {
                Ok(info) => self.sockets.session_changed(info),
                Err(e) => {
                    tracing::debug!(session = %session_id, error = %e, "no state to announce")
                }
            }
        }
    }
}
