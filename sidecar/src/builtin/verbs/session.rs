//! The session verbs: `status` names the session (a title the user set is
//! never overwritten) and `continue_session` hands the work to a successor
//! session of the same agent that starts from the handoff, then ends the
//! turn.

use agentos_protocol::agent_ext::VerbResult;
use agentos_protocol::session::Actor;
use serde_json::{json, Value};

use super::{failure, success, VerbScope, Verbs};
use crate::config::BUILTIN_AGENT;
use crate::sessions::OpenSession;
use crate::work::{TurnOwner, TurnRequest, WhenBusy};

/// Bytes of a title or a description the agent may set.
const MAX_TITLE_BYTES: usize = 1024;
const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Bytes of a handoff.
const MAX_HANDOFF_BYTES: usize = 64 * 1024;
/// How a successor's first message begins.
const CONTINUED_FROM: &str = "[continued from thread:";
/// Events read to tell a successor that has not heard from a user yet.
const LOOP_GUARD_EVENTS: u64 = 256;

/// Whether the session is a successor whose only user message so far is
/// the copied handoff: continuing it again would loop.
async fn only_a_handoff(verbs: &Verbs, session_id: &str) -> bool {
    let Ok(page) = verbs
        .store
        .history(session_id, None, Some(0), LOOP_GUARD_EVENTS)
        .await
    else {
        return false;
    };
    let mut users = page.events.iter().filter_map(|event| {
        let update: Value = serde_json::from_str(&event.payload_json).ok()?;
        (update["sessionUpdate"] == "user_message_chunk").then(|| {
            update["content"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
    });
    let first_is_handoff = users
        .next()
        .is_some_and(|text| text.starts_with(CONTINUED_FROM));
    first_is_handoff && users.next().is_none()
}

fn bounded<'a>(input: &'a Value, field: &str, max: usize) -> Result<Option<&'a str>, VerbResult> {
    match &input[field] {
        Value::Null => Ok(None),
        Value::String(text) if text.len() <= max => Ok(Some(text.trim())),
        Value::String(_) => Err(failure(
            "invalid_argument",
            format!("`{field}` is longer than {max} bytes"),
        )),
        _ => Err(failure(
            "invalid_argument",
            format!("`{field}` must be a string"),
        )),
    }
}

pub(super) async fn status(verbs: &Verbs, scope: &VerbScope, input: &Value) -> VerbResult {
    let title = match bounded(input, "title", MAX_TITLE_BYTES) {
        Ok(title) => title.filter(|t| !t.is_empty()),
        Err(refused) => return refused,
    };
    let description = match bounded(input, "description", MAX_DESCRIPTION_BYTES) {
        Ok(description) => description,
        Err(refused) => return refused,
    };
    if title.is_none() && description.is_none() {
        return failure("invalid_argument", "give a title, a description or both");
    }
    let now = crate::sessions::store::clock_ms();
    match verbs
        .store
        .set_agent_status(&scope.session_id, title, description, now)
        .await
    {
        Ok(Some(kept_user_title)) => {
            // The session's watchers see its new name and description.
            if let Some((sessions, _)) = verbs.sessions.get() {
                sessions.announce_renamed(&scope.session_id);
            }
            success(json!({
                "title": if kept_user_title { Value::String("kept: the user set this session's title".into()) } else { json!(title) },
                "description": description,
            }))
        }
        Ok(None) => failure("not_found", "the session no longer exists"),
        Err(_) => failure("storage", "the session's status could not be saved"),
    }
}

pub(super) async fn continue_session(
    verbs: &Verbs,
    scope: &VerbScope,
    input: &Value,
) -> VerbResult {
    let (reason, title, handoff) = match (
        bounded(input, "reason", MAX_DESCRIPTION_BYTES),
        bounded(input, "title", MAX_TITLE_BYTES),
        bounded(input, "handoff", MAX_HANDOFF_BYTES),
    ) {
        (Ok(Some(reason)), Ok(Some(title)), Ok(Some(handoff)))
            if !title.is_empty() && !handoff.is_empty() =>
        {
            (reason, title, handoff)
        }
        (Err(refused), _, _) | (_, Err(refused), _) | (_, _, Err(refused)) => return refused,
        _ => {
            return failure(
                "invalid_argument",
                "`reason`, `title` and `handoff` are required",
            )
        }
    };
    let Some((sessions, turns)) = verbs.sessions.get() else {
        return failure("unavailable", "sessions cannot be started here");
    };
    if only_a_handoff(verbs, &scope.session_id).await {
        return failure(
            "loop_guard",
            "this session was itself just continued from another; work in it first",
        );
    }
    let successor = uuid::Uuid::new_v4().to_string();
    if let Err(e) = sessions
        .open(OpenSession {
            session_id: Some(successor.clone()),
            agent: BUILTIN_AGENT.to_owned(),
            title: Some(title.to_owned()),
            ..OpenSession::default()
        })
        .await
    {
        return failure(e.code().as_str(), e);
    }
    if let Err(e) = verbs
        .control
        .link_session(&successor, &scope.agent_id)
        .await
    {
        let _ = sessions.delete(&successor).await;
        return failure(e.code(), "the successor session could not be linked");
    }
    let text = format!(
        "{CONTINUED_FROM}{} — {reason}]\n\n{handoff}",
        scope.session_id
    );
    let background = turns.clone();
    let id = successor.clone();
    let owner = TurnOwner {
        account_id: Some(scope.account_id.clone()),
        agent_id: Some(scope.agent_id.clone()),
    };
    tokio::spawn(async move {
        let request = TurnRequest {
            content: vec![json!({"type": "text", "text": text})],
            key: None,
            actor: Actor::System,
            owner,
            when_busy: WhenBusy::Queue,
        };
        if let Err(e) = background.submit(&id, request).await {
            tracing::warn!(session = %id, error = %e, "the continued session's first turn failed");
        }
    });
    VerbResult {
        output: json!({ "sessionId": successor, "title": title }),
        is_error: false,
        ends_turn: true,
        parked: false,
        images: Vec::new(),
    }
}
