//! What a script's `ctx.call` reaches: the same verbs the builtin agent
//! runs, as the script run's agent (its grants, its memory, its tools), in
//! the session of the nearest turn above the script in its tree. `read`,
//! `write` and `call` are the verbs; any other name is a callable, called
//! directly (a script names what it calls: no touch-expand). A verb that
//! fails is an effect error with the verb's code.

use std::sync::Arc;

use agentos_protocol::agent_ext::output_text;
use agentos_protocol::host::Actor;
use serde_json::Value;

use super::host::Host;
use super::verbs::Verbs;
use crate::runs::{Run, Runs};
use crate::work::ScriptTools;
use agentos_scripts::EffectError;

/// How far up the tree a script looks for the session it works in.
const MAX_ANCESTORS: usize = 8;

pub struct BuiltinScriptTools {
    pub host: Arc<Host>,
    pub verbs: Verbs,
    pub runs: Runs,
}

impl BuiltinScriptTools {
    /// The session of the nearest agent run at or above `run`.
    async fn session_of(&self, run: &Run) -> Option<String> {
        let mut current = run.clone();
        for _ in 0..MAX_ANCESTORS {
            if let Some(session) = &current.session_id {
                return Some(session.clone());
            }
            current = self
                .runs
                .get(current.parent_run_id.as_deref()?)
                .await
                .ok()?;
        }
        None
    }
}

#[async_trait::async_trait]
impl ScriptTools for BuiltinScriptTools {
    async fn call(&self, run: &Run, tool: &str, input: Value) -> Result<Value, EffectError> {
        let Some(agent_id) = &run.agent_id else {
            return Err(EffectError::new(
                "invalid_argument",
                "a script of no agent has no tools to call",
            ));
        };
        let resolved = self
            .host
            .resolve_agent(agent_id)
            .await
            .map_err(|e| EffectError::new("agent_unavailable", e.message))?;
        let session = self.session_of(run).await.unwrap_or_default();
        let mut scope = self
            .host
            .verb_scope(&resolved, &session, Actor::Agent, Some(&run.run_id), None)
            .await
            .map_err(|e| EffectError::new("agent_unavailable", e.message))?;
        // A script reads results as JSON: an attached image is described.
        scope.image_input = false;
        let result = match tool {
            "read" | "write" | "call" => self.verbs.run(&scope, tool, input).await,
            "delegate" | "plan" | "status" | "continue_session" => {
                return Err(EffectError::new(
                    "invalid_argument",
                    format!("{tool} is not called from a script: use ctx.delegate or ctx.plan"),
                ))
            }
            callable => self.verbs.run_direct(&scope, callable, input).await,
        };
        if !result.is_error {
            return Ok(result.output);
        }
        // A failed verb says `code: message`.
        let text = output_text(&result.output);
        Err(match text.split_once(": ") {
            Some((code, message))
                if !code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_') =>
            {
                EffectError::new(code, message)
            }
            _ => EffectError::new("tool_failed", text),
        })
    }
}
