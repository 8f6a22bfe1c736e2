//! The session vocabulary both doors and the session service share: a
//! stored event and who caused it (`event`), how a session answers its
//! agent's permission requests, what a cancel found, and why a permission
//! answer found nothing to answer. Each door renders these in its own wire
//! form (`host`, `seed`); the service speaks only these.

mod event;

use serde::{Deserialize, Serialize};

pub use event::*;

/// How a session answers its agent's permission requests: allow, reject,
/// or ask a person (a durable request the caller answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionPolicy {
    AllowAll,
    RejectAll,
    Ask,
}

impl PermissionPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionPolicy::AllowAll => "allow_all",
            PermissionPolicy::RejectAll => "reject_all",
            PermissionPolicy::Ask => "ask",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "allow_all" => Some(PermissionPolicy::AllowAll),
            "reject_all" => Some(PermissionPolicy::RejectAll),
            "ask" => Some(PermissionPolicy::Ask),
            _ => None,
        }
    }
}

/// What a cancel found (`sessions/cancel`'s `status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelStatus {
    /// A turn was running; the agent was asked to stop and its pending
    /// permission requests were cancelled.
    Cancelled,
    /// Nothing was running.
    NoActivePrompt,
}

/// Why a permission answer found nothing to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotPendingReason {
    RequestNotFound,
    AlreadyResolved,
    PromptCancelled,
    SessionDeleted,
    VmShutdown,
    AdapterExited,
}

impl NotPendingReason {
    /// The reason as stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            NotPendingReason::RequestNotFound => "request_not_found",
            NotPendingReason::AlreadyResolved => "already_resolved",
            NotPendingReason::PromptCancelled => "prompt_cancelled",
            NotPendingReason::SessionDeleted => "session_deleted",
            NotPendingReason::VmShutdown => "vm_shutdown",
            NotPendingReason::AdapterExited => "adapter_exited",
        }
    }

    pub fn parse(text: &str) -> Option<NotPendingReason> {
        [
            NotPendingReason::RequestNotFound,
            NotPendingReason::AlreadyResolved,
            NotPendingReason::PromptCancelled,
            NotPendingReason::SessionDeleted,
            NotPendingReason::VmShutdown,
            NotPendingReason::AdapterExited,
        ]
        .into_iter()
        .find(|r| r.as_str() == text)
    }
}
