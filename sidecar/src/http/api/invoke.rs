//! `InvokeSessionTool`: a user runs `read`, `write` or `call` on a session's
//! shared log, as themself. The same verb implementation the builtin agent
//! uses runs here, and the call and its result are appended as durable
//! `tool_call` / `tool_call_update` events stamped with the user (account
//! and exact signer), so the agent reads them on its next turn; there is no
//! side channel.
//!
//! Only problems before execution are refused: no such session or no write
//! access (404 as everywhere), and a live turn (409). The call is appended
//! first, so a turn that is live refuses it before anything runs; its
//! result is appended even when a turn began while the verb ran. A verb
//! that fails is a logged result, answered in `error`.

use agentos_protocol::agent_ext::{
    cut_with_notice, output_text, stored_output, tool_kind, MODEL_RESULT_BYTES,
};
use agentos_protocol::host::Actor;
use agentos_protocol::seed::event::event_id;
use agentos_protocol::seed::response::InvokeSessionToolResponse;
use agentos_protocol::seed::{ipld_to_json, json_to_ipld_clipped, JsonForm};
use agentos_protocol::seed::{Action, ApiCode};
use serde_json::{json, Value};

use super::{ok, ApiError, Caller, SignedApi};
use crate::builtin::verbs::VerbScope;
use crate::control::{authz, AccessRole};
use crate::sessions::SessionError;

impl SignedApi {
    pub(super) async fn invoke_session_tool(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let Action::InvokeSessionTool {
            session_id,
            verb,
            input,
        } = action
        else {
            return Err(ApiError::bad_request(
                ApiCode::BadRequest,
                "not InvokeSessionTool",
            ));
        };
        let account = caller.account.as_str();
        let (_, access) =
            authz::require_session(&self.control, account, &session_id, AccessRole::Writer).await?;
        if access.agent.adapter != crate::config::BUILTIN_AGENT {
            return Err(ApiError::bad_request(
                ApiCode::InvalidArgument,
                "InvokeSessionTool runs the verbs of the builtin agent; this session's agent is an external adapter",
            ));
        }
        let Some(builtin) = &self.builtin else {
            return Err(SessionError::BuiltinAgentUnavailable.into());
        };
        let resolved = builtin
            .host
            .resolve(&session_id)
            .await
            .map_err(|e| ApiError::new(404, ApiCode::NotFound, e.message))?;
        let verb = verb.as_str();
        let input: Value = ipld_to_json(&input, JsonForm::Plain).map_err(|e| {
            ApiError::bad_request(
                ApiCode::BadRequest,
                format!("InvokeSessionTool: the input must be plain data ({e})"),
            )
        })?;
        let actor = Actor::User {
            account: Some(caller.account.clone()),
            signer: Some(caller.signer.clone()),
        };
        let call_id = format!("user-{}", uuid::Uuid::new_v4());
        // A live turn is `session_busy` (409).
        let busy = ApiError::from;
        self.sessions
            .append(
                &session_id,
                actor.clone(),
                vec![json!({
                    "sessionUpdate": "tool_call",
                    "toolCallId": call_id,
                    "title": verb,
                    "kind": tool_kind(verb),
                    "status": "in_progress",
                    "rawInput": input,
                })],
                false,
            )
            .await
            .map_err(busy)?;
        // A user's own verb: its result goes to no model, so an attached
        // image is described, not shown (as the reference).
        let mut scope = VerbScope::new(&resolved, &session_id, actor.clone());
        scope.image_input = false;
        let result = builtin.verbs.run(&scope, verb, input).await;
        let text = output_text(&result.output);
        let stored = stored_output(&result.output);
        let sequence = self
            .sessions
            .append(
                &session_id,
                actor,
                vec![json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call_id,
                    "title": verb,
                    "status": if result.is_error { "failed" } else { "completed" },
                    "rawOutput": stored,
                })],
                // The call is logged and ran: its result goes in even if a
                // turn began meanwhile.
                true,
            )
            .await
            .map_err(busy)?;
        let (output, error) = if result.is_error {
            (None, Some(cut_with_notice(&text, MODEL_RESULT_BYTES)))
        } else {
            (Some(json_to_ipld_clipped(&stored)), None)
        };
        ok(&InvokeSessionToolResponse {
            session_id: session_id.clone(),
            result_event_id: event_id(&session_id, sequence),
            output,
            error,
        })
    }
}
