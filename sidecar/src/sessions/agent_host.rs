//! The seam between a route and whoever answers the builtin model agent's
//! `_agentos/*` requests (the composition root plugs in `builtin::Host`).
//! A route calls it only when it runs the builtin agent, so no other
//! adapter can ask for a provider key or run a verb.

use agentos_adapters::RpcError;
use serde_json::Value;

/// What the route knows of the request's turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnScope<'a> {
    pub session_id: &'a str,
    /// The sequence of the running prompt's first input event: the user's
    /// words from it on belong to this prompt (or to prompts queued behind
    /// it), not to the conversation before it. `None` outside a turn.
    pub input_floor: Option<u64>,
    /// The running prompt retries a failed one: what the agent did from the
    /// floor on was that failed attempt.
    pub retry: bool,
    /// The run the turn works, which a delegated child hangs from.
    pub run_id: Option<&'a str>,
    /// The turn resumes its run after its children answered: the whole log
    /// is the conversation, and no new words follow it.
    pub resume: bool,
}

#[async_trait::async_trait]
pub trait AgentHost: Send + Sync {
    /// Answers one `_agentos/*` request of the builtin agent.
    async fn serve(
        &self,
        turn: TurnScope<'_>,
        method: &str,
        params: Value,
    ) -> Result<Value, RpcError>;
}
