//! Retention of a session's prompt records and permission outcomes: before
//! one more is added, the oldest ones go so both the per-session and the
//! per-VM bound hold; a prompt that cannot fit is refused with the limit it
//! hit.

use agentos_protocol::ErrorCode;
use agentos_schema::Statement;

use super::Route;
use crate::sessions::store::{Retained, SessionStore};
use crate::sessions::SessionError;

/// A collection's use and limits, per session and per VM.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    pub(super) session_used: u64,
    pub(super) session_limit: u64,
    pub(super) vm_used: u64,
    pub(super) vm_limit: u64,
}

/// Which bound retention could not satisfy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Session,
    Vm,
}

/// What a retention step removed.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pruned {
    /// Records of this route's own session.
    pub(super) own: u64,
    /// Whether anything was removed at all.
    pub(super) any: bool,
}

impl Route {
    /// Picks the oldest terminal prompt records to drop so one more prompt
    /// fits both bounds; a bound that cannot be met is a hard error.
    pub(super) async fn prompt_retention(&self) -> Result<(Vec<Statement>, Pruned), SessionError> {
        let limits = &self.shared.limits;
        let vm_now = self.shared.vm_prompts();
        let bounds = Bounds {
            session_used: self.prompt_count,
            session_limit: limits.max_prompts_per_session,
            vm_used: vm_now,
            vm_limit: limits.max_prompts_per_vm,
        };
        self.shared.warn_session(
            &self.session_id,
            "limits.acp.maxPromptsPerSession",
            bounds.session_used + 1,
            bounds.session_limit,
        );
        self.shared
            .warn_near_limit("limits.acp.maxPromptsPerVm", vm_now + 1, bounds.vm_limit);
        let (victims, short) = self.victims(Retained::Prompts, bounds).await?;
        match short {
            Some(Side::Session) => Err(SessionError::Limit {
                code: ErrorCode::AcpPromptsPerSessionLimit,
                setting: "limits.acp.maxPromptsPerSession",
                used: bounds.session_used,
                limit: bounds.session_limit,
            }),
            Some(Side::Vm) => Err(SessionError::Limit {
                code: ErrorCode::AcpPromptsPerVmLimit,
                setting: "limits.acp.maxPromptsPerVm",
                used: bounds.vm_used,
                limit: bounds.vm_limit,
            }),
            None => Ok(self.pruning(Retained::Prompts, victims)),
        }
    }

    /// Picks the oldest permission outcomes to drop so one more fits.
    pub(super) async fn outcome_retention(&self) -> Result<(Vec<Statement>, Pruned), SessionError> {
        let limits = &self.shared.limits;
        let bounds = Bounds {
            session_used: self.outcome_count,
            session_limit: limits.max_permission_outcomes_per_session,
            vm_used: self.shared.vm_outcomes(),
            vm_limit: limits.max_permission_outcomes_per_vm,
        };
        self.shared.warn_session(
            &self.session_id,
            "limits.acp.maxPermissionOutcomesPerSession",
            bounds.session_used + 1,
            bounds.session_limit,
        );
        self.shared.warn_near_limit(
            "limits.acp.maxPermissionOutcomesPerVm",
            bounds.vm_used + 1,
            bounds.vm_limit,
        );
        let (victims, _) = self.victims(Retained::Outcomes, bounds).await?;
        Ok(self.pruning(Retained::Outcomes, victims))
    }

    /// The oldest records that must go for one more to fit both bounds, and
    /// which bound could not be met, if any.
    async fn victims(
        &self,
        what: Retained,
        bounds: Bounds,
    ) -> Result<(Vec<(String, String)>, Option<Side>), SessionError> {
        let store = &self.shared.store;
        let session_excess = (bounds.session_used + 1).saturating_sub(bounds.session_limit);
        let vm_excess = (bounds.vm_used + 1).saturating_sub(bounds.vm_limit);
        let mut victims = Vec::new();
        if session_excess > 0 {
            victims = store
                .oldest(what, Some(&self.session_id), session_excess)
                .await?;
            if (victims.len() as u64) < session_excess {
                return Ok((victims, Some(Side::Session)));
            }
        }
        if vm_excess > victims.len() as u64 {
            let more = store
                .oldest(what, None, vm_excess + victims.len() as u64)
                .await?;
            for victim in more {
                if victims.len() as u64 >= vm_excess {
                    break;
                }
                if !victims.contains(&victim) {
                    victims.push(victim);
                }
            }
            if (victims.len() as u64) < vm_excess {
                return Ok((victims, Some(Side::Vm)));
            }
        }
        Ok((victims, None))
    }

    fn pruning(&self, what: Retained, victims: Vec<(String, String)>) -> (Vec<Statement>, Pruned) {
        if victims.is_empty() {
            return (Vec::new(), Pruned::default());
        }
        let own = victims
            .iter()
            .filter(|(s, _)| *s == self.session_id)
            .count() as u64;
        (
            SessionStore::delete_statements(what, &victims),
            Pruned { own, any: true },
        )
    }
}
