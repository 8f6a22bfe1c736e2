//! Who may do what to which agent: one function per rule, called by both
//! front doors before they call a service.
//!
//! The owner has every right; an accepted collaborator has its role
//! (reader or writer); a public-read agent makes every signed account at
//! least a reader; a pending invitation gives nothing. An account with no
//! access hears `not_found`, exactly as for an agent that does not exist,
//! so existence never leaks; one with too little hears `forbidden`.

use super::error::ControlError;
use super::types::{
    AccessRole, AgentAccess, AgentRecord, CollaboratorRole, CollaboratorStatus, SessionLink,
    SignerRole,
};
use super::Control;

/// The role `account` has on `agent`, given its collaboration (if any).
pub fn role_for(
    account: &str,
    agent: &AgentRecord,
    collaboration: Option<(CollaboratorRole, CollaboratorStatus)>,
) -> Option<AccessRole> {
    if agent.account_id == account {
        return Some(AccessRole::Owner);
    }
    let granted = match collaboration {
        Some((role, CollaboratorStatus::Accepted)) => Some(AccessRole::from(role)),
        Some((_, CollaboratorStatus::Pending)) | None => None,
    };
    let public = agent.public_read.then_some(AccessRole::Reader);
    granted.max(public)
}

/// The agent and the role `account` has on it; `None` when the account
/// has no access (or the agent does not exist). One read.
pub async fn access(
    control: &Control,
    account: &str,
    agent_id: &str,
) -> Result<Option<AgentAccess>, ControlError> {
    let Some((agent, collaboration)) = control.agent_with_access(agent_id, account).await? else {
        return Ok(None);
    };
    Ok(role_for(account, &agent, collaboration)
        .map(|access_role| AgentAccess { agent, access_role }))
}

async fn require(
    control: &Control,
    account: &str,
    agent_id: &str,
    needed: AccessRole,
) -> Result<AgentAccess, ControlError> {
    match access(control, account, agent_id).await? {
        None => Err(ControlError::NotFound(format!("agent {agent_id}"))),
        Some(granted) if granted.access_role >= needed => Ok(granted),
        Some(granted) => Err(ControlError::Forbidden(format!(
            "{} access to agent {agent_id} is needed; the account is a {}",
            needed.as_str(),
            granted.access_role.as_str()
        ))),
    }
}

/// Reading an agent (its definition, sessions, collaborators).
pub async fn require_read(
    control: &Control,
    account: &str,
    agent_id: &str,
) -> Result<AgentAccess, ControlError> {
    require(control, account, agent_id, AccessRole::Reader).await
}

/// Changing an agent's definition, or working in its sessions.
pub async fn require_write(
    control: &Control,
    account: &str,
    agent_id: &str,
) -> Result<AgentAccess, ControlError> {
    require(control, account, agent_id, AccessRole::Writer).await
}

/// Deleting an agent, inviting or removing collaborators, public read.
pub async fn require_owner(
    control: &Control,
    account: &str,
    agent_id: &str,
) -> Result<AgentAccess, ControlError> {
    require(control, account, agent_id, AccessRole::Owner).await
}

/// A session's agent with at least `needed` access: a session that serves
/// no agent, or one the account cannot read, is `not_found`.
pub async fn require_session(
    control: &Control,
    account: &str,
    session_id: &str,
    needed: AccessRole,
) -> Result<(SessionLink, AgentAccess), ControlError> {
    let not_found = || ControlError::NotFound(format!("session {session_id}"));
    let link = control
        .session_agent(session_id)
        .await?
        .ok_or_else(not_found)?;
    match require(control, account, &link.agent_id, needed).await {
        Ok(granted) => Ok((link, granted)),
        Err(ControlError::NotFound(_)) => Err(not_found()),
        Err(e) => Err(e),
    }
}

/// A run with at least `needed` access: through its agent, or, for a run
/// of no agent, by being its account. A run the account cannot read (a
/// host turn has no account) is `not_found`.
pub async fn require_run(
    control: &Control,
    account: &str,
    run_id: &str,
    agent_id: Option<&str>,
    run_account: Option<&str>,
    needed: AccessRole,
) -> Result<(), ControlError> {
    let not_found = || ControlError::NotFound(format!("run {run_id}"));
    match (agent_id, run_account) {
        (Some(agent_id), _) => match require(control, account, agent_id, needed).await {
            Ok(_) => Ok(()),
            Err(ControlError::NotFound(_)) => Err(not_found()),
            Err(e) => Err(e),
        },
        (None, Some(owner)) if owner == account => Ok(()),
        _ => Err(not_found()),
    }
}

/// A signer may act for the account: its own key, or an unrevoked signer.
/// Anything else is `forbidden`.
pub async fn require_signer(
    control: &Control,
    account: &str,
    signer: &str,
) -> Result<SignerRole, ControlError> {
    control
        .signer_role(account, signer)
        .await?
        .ok_or_else(|| ControlError::Forbidden("signer is not authorized for account".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::types::AgentStatus;

    fn agent(public_read: bool) -> AgentRecord {
        AgentRecord {
            agent_id: "a".into(),
            account_id: "zOwner".into(),
            definition: vec![1],
            name: "n".into(),
            adapter: "builtin".into(),
            status: AgentStatus::Idle,
            public_read,
            created_at_ms: 1,
            updated_at_ms: 1,
        }
    }

    #[test]
    fn roles_combine_ownership_collaboration_and_public_read() {
        use CollaboratorRole::*;
        use CollaboratorStatus::*;
        let private = agent(false);
        let public = agent(true);
        assert_eq!(role_for("zOwner", &private, None), Some(AccessRole::Owner));
        assert_eq!(
            role_for("zW", &private, Some((Writer, Accepted))),
            Some(AccessRole::Writer)
        );
        assert_eq!(
            role_for("zR", &private, Some((Reader, Accepted))),
            Some(AccessRole::Reader)
        );
        assert_eq!(role_for("zP", &private, Some((Writer, Pending))), None);
        assert_eq!(role_for("zS", &private, None), None);
        assert_eq!(role_for("zS", &public, None), Some(AccessRole::Reader));
        assert_eq!(
            role_for("zP", &public, Some((Writer, Pending))),
            Some(AccessRole::Reader)
        );
        assert_eq!(
            role_for("zW", &public, Some((Writer, Accepted))),
            Some(AccessRole::Writer)
        );
    }
}
