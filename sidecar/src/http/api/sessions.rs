//! Seed sessions: the same `agentos_core_sessions` rows and event log as the
//! host door's, linked to a Seed agent, driven by the same turn engine.
//! `MessageSession` waits behind a live turn in arrival order (several
//! writers at once) and names its acting account and exact signer in the
//! events it appends.

use agentos_protocol::seed::ApiCode;
use std::collections::BTreeMap;

use agentos_protocol::seed::event::{event_id, session_event};
use agentos_protocol::seed::response::{
    CreateSessionResponse, DeleteSessionResponse, GetSessionResponse, ListSessionsResponse,
    MessageSessionResponse, RetrySessionResponse, SessionEvent, SessionInfo, StopSessionResponse,
    UpdateSessionResponse,
};
use agentos_protocol::seed::{
    encode_response, Action, ContentPart, Ipld, SessionListCursor, SystemPrompt,
};
use agentos_protocol::session::Actor;
use serde_json::{json, Value};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::config::ControlLimits;
use crate::control::{authz, AccessRole, SessionCursor, SessionLink, SessionListRow, SessionScope};
use crate::http::ws::reason;
use crate::sessions::{CancelStatus, OpenSession, SessionError};
use crate::space::attachments::valid_id;
use crate::space::AttachmentInfo;
use crate::work::{TurnAnswer, TurnOwner, TurnRequest, WhenBusy};

const DEFAULT_PAGE: u64 = 50;
/// Payload bytes one `GetSession` answer carries at most (a single larger
/// event still goes alone).
const MAX_PAGE_PAYLOAD_BYTES: usize = 8 * 1024 * 1024;
const MAX_PAGE: u64 = 200;
/// A client message id, as the part of the turn's idempotency key.
const MAX_CLIENT_ID_BYTES: usize = 128;

/// A message's parts, read.
struct MessageParts {
    /// One ACP text block per text part.
    blocks: Vec<Value>,
    /// The first text part's own id.
    part_id: Option<String>,
    /// Every context part's lines, in order: they go with the first text.
    context: Vec<String>,
    /// The attachments named, distinct, in order: with the first text too.
    attachments: Vec<String>,
}

/// The reference's `resolveMessageText`: a text part with rich blocks is
/// read by the model as the blocks' resolved markdown, unless that is empty.
async fn resolve_rich(block: &mut Value, hypermedia: &crate::hypermedia::Hypermedia) {
    let Some(rich) = block["_meta"]["seed"]["blocks"]
        .as_array()
        .filter(|b| !b.is_empty())
    else {
        return;
    };
    let resolved = hypermedia.prompt_markdown(rich).await;
    if !resolved.is_empty() {
        block["text"] = Value::String(resolved);
    }
}

fn bad(message: &str) -> ApiError {
    ApiError::bad_request(ApiCode::BadRequest, message)
}

/// Reads a message's parts with the reference's rules and words. The first
/// text part without an id of its own echoes the action's (`action_id`).
fn content_blocks(
    parts: Vec<ContentPart>,
    action_id: Option<&str>,
    limits: &ControlLimits,
) -> Result<MessageParts, ApiError> {
    let max_lines = usize::try_from(limits.max_context_lines).unwrap_or(usize::MAX);
    let max_line_bytes = usize::try_from(limits.max_context_line_bytes).unwrap_or(usize::MAX);
    let max_attachments = usize::try_from(limits.max_attachments_per_message).unwrap_or(usize::MAX);
    let mut read = MessageParts {
        blocks: Vec::new(),
        part_id: None,
        context: Vec::new(),
        attachments: Vec::new(),
    };
    let mut action_id = action_id.map(str::to_owned);
    for part in parts {
        match part {
            ContentPart::Text {
                text,
                blocks: rich,
                client_message_id,
            } => {
                // What the reference keeps on the user's event besides the
                // words: the part's id, echoed so the sender can match its
                // pending row, and its rich blocks as sent.
                let mut seed = serde_json::Map::new();
                // Only the first text part may stand for the whole action.
                let echoed = client_message_id.clone().or(action_id.take());
                if let Some(id) = echoed {
                    seed.insert("clientMessageId".into(), json!(id));
                }
                if let Some(rich) = rich.filter(|b| !b.is_empty()) {
                    let plain = agentos_protocol::seed::JsonForm::Plain;
                    let rich = agentos_protocol::seed::ipld_to_json(&Ipld::List(rich), plain)
                        .map_err(|e| {
                            ApiError::bad_request(
                                ApiCode::BadRequest,
                                format!("MessageSession: blocks must be plain data ({e})"),
                            )
                        })?;
                    seed.insert("blocks".into(), rich);
                }
                read.blocks
                    .push(json!({"type": "text", "text": text, "_meta": {"seed": seed}}));
                read.part_id = read.part_id.or(client_message_id);
            }
            ContentPart::Context { lines } => {
                if lines.len() > max_lines {
                    return Err(bad("Too many context lines"));
                }
                if lines.iter().any(|l| l.len() > max_line_bytes) {
                    return Err(bad("Context line is too large"));
                }
                read.context.extend(lines);
            }
            ContentPart::Attachment { id } => {
                if !valid_id(&id) {
                    return Err(bad("Invalid attachment id"));
                }
                if !read.attachments.contains(&id) {
                    read.attachments.push(id);
                }
                if read.attachments.len() > max_attachments {
                    return Err(bad(&format!(
                        "A message can reference at most {max_attachments} attachments"
                    )));
                }
            }
        }
    }
    if read.blocks.is_empty() {
        return Err(bad("Message content is required"));
    }
    Ok(read)
}

/// The first text block carries the message's context and attachments: the
/// model (the builtin agent's, told how to read them; a registry adapter's,
/// told only what they are) reads them after the words (`<window_context>`, `<attachments>`,
/// as the reference writes them), while the Seed event keeps the words
/// (`_meta.seed.text`) with `contextLines` and `attachments` beside them.
fn with_context(
    first: &mut Value,
    context: &[String],
    attachments: &[AttachmentInfo],
    builtin: bool,
) {
    if context.is_empty() && attachments.is_empty() {
        return;
    }
    let raw = first["text"].as_str().unwrap_or_default().to_owned();
    let mut model = raw.clone();
    if !context.is_empty() {
        model.push_str(&format!(
            "\n\n<window_context>\n{}\n</window_context>",
            context.join("\n")
        ));
    }
    if !attachments.is_empty() {
        let lines: Vec<String> = attachments
            .iter()
            .map(|a| {
                format!(
                    "- \"{}\" ({}, {} bytes) — attachment id {}",
                    a.name,
                    a.mime_type.as_deref().unwrap_or("unknown type"),
                    a.size,
                    a.id
                )
            })
            .collect();
        // A registry adapter has no `read` verb: it is told what was
        // attached, not how the builtin agent would read it.
        let note = if builtin {
            ATTACHMENTS_NOTE
        } else {
            "The user attached these session-private files."
        };
        model.push_str(&format!(
            "\n\n<attachments>\n{note}\n{}\n</attachments>",
            lines.join("\n")
        ));
    }
    first["text"] = json!(model);
    let seed = &mut first["_meta"]["seed"];
    seed["text"] = json!(raw);
    if !context.is_empty() {
        seed["contextLines"] = json!(context);
    }
    if !attachments.is_empty() {
        seed["attachments"] = json!(attachments);
    }
}

/// What the model is told of a message's attachments: the reference's
/// words for what this server offers (publishing one to IPFS comes with the
/// hypermedia work).
const ATTACHMENTS_NOTE: &str = "The user attached these session-private files. Use `read attachment:<id>` to see an image or read a text file; use `write ~/memory/<path>` with {fromAttachment} to keep one across sessions. Only read what you need.";

impl SignedApi {
    /// Sessions of list rows, skipping any deleted meanwhile.
    pub(super) async fn render_sessions(
        &self,
        rows: &[SessionListRow],
    ) -> Result<Vec<SessionInfo>, ApiError> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let info = match self.sessions.get(&row.session_id).await {
                Ok(info) => info,
                Err(SessionError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            let link = SessionLink {
                session_id: row.session_id.clone(),
                agent_id: row.agent_id.clone(),
                account_id: row.account_id.clone(),
                created_at_ms: row.created_at_ms,
                parent_session_id: row.parent_session_id.clone(),
                run_id: row.run_id.clone(),
            };
            let mut session = render::session(&info, &link);
            session.started_by_trigger = self.started_by_trigger(&row.session_id).await?;
            out.push(session);
        }
        Ok(out)
    }

    /// `startedByTrigger` of a session a firing started.
    async fn started_by_trigger(&self, session_id: &str) -> Result<Option<Box<Ipld>>, ApiError> {
        Ok(self
            .triggers
            .started_by(session_id)
            .await?
            .map(|v| Box::new(agentos_protocol::seed::json_to_ipld_clipped(&v))))
    }

    /// A subscription agent's sign-in before its message is taken: an
    /// expired or revoked one is logged in the session as an error and
    /// refused 401, asking for a new sign-in; nothing else is appended.
    async fn check_subscription(&self, session_id: &str, agent_id: &str) -> Result<(), ApiError> {
        let Some(builtin) = &self.builtin else {
            return Ok(());
        };
        use crate::builtin::oauth::CredentialError;
        match builtin.host.check_subscription(agent_id).await {
            Ok(()) => Ok(()),
            Err(e @ CredentialError::NeedsLogin) => {
                let logged = self
                    .sessions
                    .append(
                        session_id,
                        Actor::Agent,
                        vec![
                            json!({"sessionUpdate": agentos_protocol::agent_ext::ERROR_UPDATE,
                                    "message": e.to_string(), "code": "provider_needs_login"}),
                        ],
                        false,
                    )
                    .await;
                if let Err(why) = logged {
                    tracing::warn!(session = %session_id, error = %why, "a sign-in failure was not logged");
                }
                Err(ApiError::new(
                    401,
                    ApiCode::ProviderNeedsLogin,
                    e.to_string(),
                ))
            }
            Err(e @ CredentialError::Unconfigured(_)) => {
                Err(ApiError::bad_request(ApiCode::BadRequest, e.to_string()))
            }
            Err(CredentialError::Storage(why)) => {
                tracing::error!(error = %why, "a subscription's credentials could not be read");
                Err(ApiError::new(
                    500,
                    ApiCode::CorruptRow,
                    "Internal server error",
                ))
            }
        }
    }

    /// The id of a turn's final assistant event: empty when the turn
    /// parked, was canceled before it ran, or ended without a reply.
    async fn assistant_event(
        &self,
        session_id: &str,
        answer: TurnAnswer,
    ) -> Result<String, ApiError> {
        let TurnAnswer::Done(outcome) = answer else {
            return Ok(String::new());
        };
        let last = self
            .sessions
            .prompt_last_output(session_id, &outcome.prompt_id)
            .await?;
        // A cancelled turn keeps no final assistant message.
        let has_reply = !outcome.message.content.is_empty() && outcome.stop_reason != "cancelled";
        Ok(match last {
            Some(seq) if has_reply => event_id(session_id, seq),
            _ => String::new(),
        })
    }

    async fn session_info(&self, link: &SessionLink) -> Result<SessionInfo, ApiError> {
        let info = self.sessions.get(&link.session_id).await?;
        let mut session = render::session(&info, link);
        session.started_by_trigger = self.started_by_trigger(&link.session_id).await?;
        Ok(session)
    }

    /// The retained events after `after`: one page of at most
    /// `limits.acp.maxHistoryPageEntries` events and about
    /// `MAX_PAGE_PAYLOAD_BYTES` of payload (at least one event), and whether
    /// more follow (the caller continues from the last `seq`).
    pub(crate) async fn events_after(
        &self,
        session_id: &str,
        after: u64,
    ) -> Result<(Vec<SessionEvent>, bool), ApiError> {
        let info = self.sessions.get(session_id).await?;
        let cursor = after.max(info.oldest_retained_sequence.saturating_sub(1));
        let page = self.sessions.limits().max_history_page_entries;
        let history = self
            .sessions
            .history(session_id, None, Some(cursor), Some(page))
            .await?;
        let mut events = Vec::with_capacity(history.events.len());
        let mut bytes = 0usize;
        for event in &history.events {
            if !events.is_empty() && bytes + event.payload_json.len() > MAX_PAGE_PAYLOAD_BYTES {
                return Ok((events, true));
            }
            bytes += event.payload_json.len();
            events.push(session_event(event));
        }
        Ok((events, history.has_more_after))
    }

    pub(super) async fn session_action(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let account = caller.account.as_str();
        let control = &self.control;
        match action {
            Action::CreateSession {
                agent_id,
                title,
                client_request_id,
            } => {
                let access = authz::require_write(control, account, &agent_id).await?;
                let key = match &client_request_id {
                    Some(id) => {
                        let mut fields = BTreeMap::from([(
                            "agentId".to_owned(),
                            Ipld::String(agent_id.clone()),
                        )]);
                        if let Some(title) = &title {
                            fields.insert("title".into(), Ipld::String(title.clone()));
                        }
                        Some(Self::idempotency_key(
                            caller,
                            "CreateSession",
                            id,
                            Ipld::Map(fields),
                        )?)
                    }
                    None => None,
                };
                let _turn = match &key {
                    Some(k) => Some(
                        control
                            .one_at_a_time(&k.account_id, &k.action, &k.client_id)
                            .await?,
                    ),
                    None => None,
                };
                if let Some(k) = &key {
                    if let Some(stored) = control.stored_answer(k).await? {
                        return Ok(stored);
                    }
                }
                let session_id = uuid::Uuid::new_v4().to_string();
                self.sessions
                    .open(OpenSession {
                        session_id: Some(session_id.clone()),
                        agent: access.agent.adapter.clone(),
                        title: title.clone(),
                        ..OpenSession::default()
                    })
                    .await?;
                let response = encode_response(&CreateSessionResponse {
                    session_id: session_id.clone(),
                });
                // The link makes it a Seed session; with a client id, the
                // record commits with it.
                let linked = match &key {
                    Some(k) => {
                        control
                            .link_session_recorded(&session_id, &agent_id, k, &response)
                            .await
                    }
                    None => control.link_session(&session_id, &agent_id).await,
                };
                if let Err(e) = linked {
                    let _ = self.sessions.delete(&session_id).await;
                    return Err(e.into());
                }
                self.announce_session(&agent_id, &session_id, reason::SESSION_CREATED)
                    .await;
                Ok(response)
            }
            Action::ListSessions {
                agent_id,
                limit,
                cursor,
                parent_session_id,
                ..
            } => {
                let scope = match &agent_id {
                    Some(agent_id) => {
                        authz::require_read(control, account, agent_id).await?;
                        SessionScope::Agent(agent_id.clone())
                    }
                    None => SessionScope::Account(account.to_owned()),
                };
                if parent_session_id.is_some() {
                    // No session here has children.
                    return ok(&ListSessionsResponse {
                        sessions: vec![],
                        agents: vec![],
                        next_cursor: None,
                    });
                }
                let limit = limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE) as u32;
                let cursor = cursor.map(|c| SessionCursor {
                    updated_before: c.updated_before,
                    id_before: c.id_before,
                });
                let page = control
                    .list_sessions_page(&scope, cursor.as_ref(), limit)
                    .await?;
                let sessions = self.render_sessions(&page.sessions).await?;
                let mut agents = Vec::new();
                let mut seen = std::collections::BTreeSet::new();
                for row in &page.sessions {
                    if seen.insert(row.agent_id.clone()) {
                        if let Some(a) = authz::access(control, account, &row.agent_id).await? {
                            agents.push(render::agent(&a.agent, Some(a.access_role))?);
                        }
                    }
                }
                ok(&ListSessionsResponse {
                    sessions,
                    agents,
                    next_cursor: page.next_cursor.map(|c| SessionListCursor {
                        updated_before: c.updated_before,
                        id_before: c.id_before,
                    }),
                })
            }
            Action::GetSession {
                session_id,
                after_seq,
            } => {
                let (link, access) =
                    authz::require_session(control, account, &session_id, AccessRole::Reader)
                        .await?;
                let session = self.session_info(&link).await?;
                let (events, more) = self
                    .events_after(&session_id, after_seq.unwrap_or(0))
                    .await?;
                let system_prompt_markdown =
                    match render::definition(&access.agent.definition)?.system_prompt {
                        SystemPrompt::Text(text) => text,
                        blocks => {
                            let hypermedia = self
                                .builtin
                                .as_ref()
                                .and_then(|b| b.verbs.hypermedia.as_ref());
                            crate::builtin::prompt::instructions(&blocks, hypermedia).await
                        }
                    };
                let trigger_context = self
                    .triggers
                    .context(&session_id)
                    .await?
                    .map(|v| agentos_protocol::seed::json_to_ipld_clipped(&v));
                ok(&GetSessionResponse {
                    session,
                    events,
                    system_prompt_markdown,
                    has_more_before: None,
                    has_more_after: more.then_some(true),
                    trigger_context,
                })
            }
            Action::UpdateSession {
                session_id,
                title,
                model_override,
            } => {
                let (link, _) =
                    authz::require_session(control, account, &session_id, AccessRole::Writer)
                        .await?;
                if model_override.is_some() {
                    return Err(ApiError::bad_request(
                        ApiCode::UnsupportedField,
                        "modelOverride needs the builtin model agent, which this server does not run yet",
                    ));
                }
                if let Some(title) = title {
                    self.sessions.set_title(&session_id, &title).await?;
                    self.announce_session(&link.agent_id, &session_id, reason::SESSION_UPDATED)
                        .await;
                }
                ok(&UpdateSessionResponse {
                    session: self.session_info(&link).await?,
                })
            }
            Action::DeleteSession { session_id } => {
                let (link, _) =
                    authz::require_session(control, account, &session_id, AccessRole::Writer)
                        .await?;
                self.turns.runs().cancel_session(&session_id).await?;
                match self.sessions.delete(&session_id).await {
                    Ok(()) | Err(SessionError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                control.unlink_session(&session_id).await?;
                self.triggers.session_deleted(&session_id).await?;
                let now = agentos_base::clock::unix_ms();
                self.space.uploads.delete_session(&session_id, now).await?;
                self.space.attachments.delete_session(&session_id).await?;
                self.announce_session(&link.agent_id, &session_id, reason::SESSION_DELETED)
                    .await;
                ok(&DeleteSessionResponse {
                    session_id,
                    agent_id: link.agent_id,
                })
            }
            Action::MessageSession {
                session_id,
                content,
                client_message_id,
            } => {
                let (link, access) =
                    authz::require_session(control, account, &session_id, AccessRole::Writer)
                        .await?;
                let builtin = access.agent.adapter == crate::config::BUILTIN_AGENT;
                let parts =
                    content_blocks(content, client_message_id.as_deref(), control.limits())?;
                if builtin {
                    self.check_subscription(&session_id, &link.agent_id).await?;
                }
                let mut attached = Vec::with_capacity(parts.attachments.len());
                for id in &parts.attachments {
                    attached.push(self.space.attachments.info(&session_id, id).await?);
                }
                let mut blocks = parts.blocks;
                // What the model reads of rich blocks is their resolved
                // markdown (embeds and mentions looked up); the event keeps
                // the blocks as sent.
                if let Some(hypermedia) = self
                    .builtin
                    .as_ref()
                    .and_then(|b| b.verbs.hypermedia.as_ref())
                {
                    for block in &mut blocks {
                        resolve_rich(block, hypermedia).await;
                    }
                }
                if let Some(first) = blocks.first_mut() {
                    with_context(first, &parts.context, &attached, builtin);
                }
                let client_id = client_message_id.or(parts.part_id);
                if client_id
                    .as_ref()
                    .is_some_and(|id| id.is_empty() || id.len() > MAX_CLIENT_ID_BYTES)
                {
                    return Err(ApiError::bad_request(
                        ApiCode::BadRequest,
                        format!("clientMessageId must be 1..={MAX_CLIENT_ID_BYTES} bytes"),
                    ));
                }
                // A duplicate sent while the first still runs waits for it
                // and replays its answer rather than hearing it is in
                // progress. The turn's run is the idempotency record: it
                // commits with the message's words.
                // Keyed by the acting account: two accounts never collide.
                let key = client_id.map(|id| format!("seed:{account}:{id}"));
                let actor = Actor::User {
                    account: Some(caller.account.clone()),
                    signer: Some(caller.signer.clone()),
                };
                let owner = TurnOwner {
                    account_id: Some(link.account_id.clone()),
                    agent_id: Some(link.agent_id.clone()),
                };
                let request = TurnRequest {
                    content: blocks,
                    key,
                    actor,
                    owner,
                    when_busy: WhenBusy::Queue,
                };
                let answer = self.turns.submit(&session_id, request).await?;
                ok(&MessageSessionResponse {
                    assistant_event_id: self.assistant_event(&session_id, answer).await?,
                    session_id,
                })
            }
            Action::StopSession { session_id } => {
                authz::require_session(control, account, &session_id, AccessRole::Writer).await?;
                // The session's queued and parked runs go with its live turn.
                let canceled = self.turns.runs().cancel_session(&session_id).await?;
                let status = self.sessions.cancel(&session_id).await?;
                ok(&StopSessionResponse {
                    session_id,
                    stopped: canceled || status == CancelStatus::Cancelled,
                })
            }
            Action::RetrySession { session_id } => {
                let (link, _) =
                    authz::require_session(control, account, &session_id, AccessRole::Writer)
                        .await?;
                let owner = TurnOwner {
                    account_id: Some(link.account_id.clone()),
                    agent_id: Some(link.agent_id.clone()),
                };
                let answer = self.turns.retry(&session_id, owner).await?;
                ok(&RetrySessionResponse {
                    assistant_event_id: self.assistant_event(&session_id, answer).await?,
                    session_id,
                })
            }
            other => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                format!(
                    "the action {} is not supported by this server",
                    other.name()
                ),
            )),
        }
    }
}
