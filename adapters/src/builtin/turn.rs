//! One prompt of the builtin agent: the model loop.
//!
//! The turn asks its client for the context (`_agentos/context`; a client
//! that does not know the method gets the local configuration instead),
//! saying what it holds of the session's conversation from the last turn so
//! that the client sends only what follows (`held.rs`), then calls
//! the model until it stops asking for tools, at most `max_steps` times. Text and reasoning stream out as
//! `agent_message_chunk` / `agent_thought_chunk` (one `messageId` per model
//! call); every tool call is reported as `tool_call` then `tool_call_update`
//! with its result (up to [`STORED_RESULT_BYTES`] kept), and the model gets
//! at most [`MODEL_RESULT_BYTES`] of it. A provider failure, or a context or
//! key the client could not give, answers the prompt with an error naming
//! its class, so the client decides whether to retry; to the sidecar it is
//! also an `_agentos/error` update (a plain ACP client gets no update of a
//! kind ACP does not define). A call the provider refused as busy (429,
//! 503, 529, overloaded) before any of its answer went out is made again
//! after the pause it asked for, at most the turn's retries; each wait is
//! an `_agentos/activity` update to the sidecar. A provider's signature on
//! a call (Gemini's) is kept in the call's `tool_call` update, so a turn
//! rebuilt from the log sends it back. Cancellation drops the
//! provider stream at once and answers `cancelled`.

use std::time::Duration;

use agentos_protocol::acp::{methods, RpcError};
use agentos_protocol::agent_ext::{
    self, cut_with_notice, output_text, ContextParams, HeldTranscript, ProviderKey, TurnContext,
    VerbResult, MODEL_RESULT_BYTES,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::held::Turn;
use super::provider::{
    Endpoint, Message, ModelRequest, ProviderError, ProviderKind, StopKind, StreamEvent, ToolCall,
    ToolSpec, Usage,
};
use super::state::{lock, Agent, Cancel};

/// The JSON-RPC error code of a failed turn; `data.code` says why.
pub const TURN_FAILED: i64 = -32000;
/// Tool calls run from one model answer, at most; the rest are answered
/// as not run.
const MAX_CALLS_PER_STEP: usize = 32;

/// An id every provider accepts back: 1 to 64 of `[A-Za-z0-9_-]`.
fn usable_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn skipped(why: &str) -> VerbResult {
    VerbResult {
        output: Value::String(why.to_owned()),
        is_error: true,
        ends_turn: false,
        parked: false,
        images: Vec::new(),
    }
}

/// Where the turn's context came from.
enum Source {
    /// The sidecar: context, key and verbs through `_agentos/*`.
    Sidecar(Box<TurnContext>),
    /// A plain ACP client: the local configuration.
    Local,
}

pub(super) async fn run(
    agent: &Agent,
    session: &str,
    prompt: Vec<Value>,
    cancel: &Cancel,
) -> Result<Value, RpcError> {
    let text = prompt_text(&prompt);
    let held = lock(&agent.sessions)
        .get(session)
        .and_then(|state| state.held.as_ref())
        .map(|held| {
            let (id, items) = held.basis();
            HeldTranscript {
                id,
                items: u32::try_from(items).unwrap_or(u32::MAX),
            }
        });
    let params = ContextParams {
        session_id: session.to_owned(),
        held,
    };
    let mut conversation = None;
    let mut source = match agent
        .peer
        .request(agent_ext::methods::CONTEXT, json!(params))
        .await
    {
        Ok(value) => match serde_json::from_value::<TurnContext>(value)
            .map_err(|e| format!("the client's turn context is malformed: {e}"))
            .and_then(|mut context| {
                // What it held is let go either way; a session closed
                // meanwhile holds nothing and is not brought back.
                let held = lock(&agent.sessions)
                    .get_mut(session)
                    .and_then(|state| state.held.take());
                let items = std::mem::take(&mut context.transcript);
                conversation = Some(Turn::of(held, items, context.basis.as_ref())?);
                Ok(context)
            }) {
            Ok(context) => Source::Sidecar(Box::new(context)),
            Err(e) => {
                let e = RpcError::internal(e);
                return Err(client_failed(agent, session, Client::Sidecar, e).await);
            }
        },
        Err(e) if e.code == agentos_protocol::acp::error_codes::METHOD_NOT_FOUND => {
            if agent.options.local.is_none() {
                return Err(fail(
                    agent,
                    session,
                    Client::Plain,
                    "agent_unconfigured",
                    false,
                    "this agent has no model provider: run it with --provider-type, --model and \
                     --key-file, or through the agentos sidecar"
                        .into(),
                )
                .await);
            }
            Source::Local
        }
        // It knows the method: the sidecar, which could not give one.
        Err(e) => return Err(client_failed(agent, session, Client::Sidecar, e).await),
    };
    let (system, tools, mut conversation, max_tokens) = match (&mut source, conversation) {
        (Source::Sidecar(ctx), Some(conversation)) => (
            std::mem::take(&mut ctx.system_prompt),
            std::mem::take(&mut ctx.tools)
                .into_iter()
                .map(|t| ToolSpec {
                    name: t.name,
                    description: t.description,
                    parameters: t.parameters,
                })
                .collect::<Vec<_>>(),
            conversation,
            ctx.max_tokens,
        ),
        _ => {
            let local = agent.options.local.as_ref().map(|l| l.system_prompt());
            let history = lock(&agent.sessions)
                .get(session)
                .map(|s| s.local_transcript.clone())
                .unwrap_or_default();
            let client_fs = *lock(&agent.client_fs);
            (
                local.unwrap_or_default(),
                super::local::tools(client_fs),
                Turn::plain(history),
                16_384,
            )
        }
    };
    let mut request = ModelRequest {
        model: String::new(),
        system,
        messages: std::mem::take(&mut conversation.messages),
        tools,
        max_tokens,
        cache_key: Some(session.to_owned()),
        rendered: std::mem::take(&mut conversation.rendered),
    };
    let settled = conversation.settled;
    let outcome = steps(agent, session, &source, text, &mut request, settled, cancel).await;
    let ModelRequest {
        messages, rendered, ..
    } = request;
    // A plain client's conversation goes on from a turn that ended well;
    // the held part of the sidecar's is kept whatever the outcome. What is
    // let go is dropped outside the sessions' lock.
    match source {
        Source::Local if outcome.is_ok() => {
            let replaced = lock(&agent.sessions)
                .get_mut(session)
                .map(|state| std::mem::replace(&mut state.local_transcript, messages));
            drop(replaced);
        }
        Source::Local => {}
        Source::Sidecar(_) => {
            let held = conversation.held(messages, rendered, &agent.options.held);
            // What it held was taken out when the turn began.
            if let Some(state) = lock(&agent.sessions).get_mut(session) {
                state.held = held;
            }
        }
    }
    outcome
}

/// The model loop of a turn whose conversation is `request.messages`: the
/// prompt goes last (unless the turn resumes), then each model call's
/// answer and the results of the tools it called. The first `settled`
/// messages stay as they are and are written once, for a family that takes
/// them so (`Rendered`).
async fn steps(
    agent: &Agent,
    session: &str,
    source: &Source,
    text: String,
    request: &mut ModelRequest,
    settled: usize,
    cancel: &Cancel,
) -> Result<Value, RpcError> {
    // A resumed turn continues from the log, which already ends where the
    // delegated work answered: no new user message.
    let resume = matches!(source, Source::Sidecar(ctx) if ctx.resume);
    if !resume {
        let text = match source {
            Source::Sidecar(ctx) => match &ctx.prompt_sender {
                Some(sender) => agent_ext::sender_prefixed(sender, &text),
                None => text,
            },
            Source::Local => text,
        };
        request.messages.push(Message::User { text });
    }
    // Every tool call id this conversation already holds, read once the
    // model first calls a tool.
    let mut used_ids: Option<std::collections::HashSet<String>> = None;
    let mut usage = Usage {
        input_tokens: 0,
        output_tokens: 0,
    };
    let mut stop = "max_turn_requests";
    for _ in 0..agent.options.max_steps.max(1) {
        if cancel.is_cancelled() {
            stop = "cancelled";
            break;
        }
        let endpoint = match endpoint(agent, session, source).await {
            Ok(endpoint) => endpoint,
            Err(e) => return Err(client_failed(agent, session, source.client(), e).await),
        };
        request.model = model(agent, source);
        if endpoint.kind.writes_messages_alone() {
            request.rendered.extend(&request.messages[..settled]);
        }
        let started = std::time::Instant::now();
        let step = match call_with_retries(agent, session, source, &endpoint, request, cancel).await
        {
            Step::Done(step) => step,
            Step::Cancelled => {
                stop = "cancelled";
                break;
            }
            Step::Failed { error: e, .. } => {
                return Err(fail(
                    agent,
                    session,
                    source.client(),
                    e.code,
                    e.is_retryable(),
                    e.message,
                )
                .await);
            }
        };
        let mut step = step;
        if let (Source::Sidecar(ctx), false) = (source, step.text.is_empty()) {
            // Where the message came from, what it cost and how long it
            // took, closing it: an empty chunk of the same message whose
            // `_meta` the sidecar keeps with the stored message.
            let meta = json!({
                "model": ctx.provider.model,
                "provider": ctx.provider.provider_type,
                "usage": usage_json(step.usage),
                "durationMs": elapsed_ms(started),
            });
            let mut closing = chunk(
                session,
                "agent_message_chunk",
                &step.message_id,
                String::new(),
            );
            closing["update"]["_meta"] = json!({"agentos": {agent_ext::MESSAGE_META: meta}});
            agent.peer.notify(methods::SESSION_UPDATE, closing).await;
        }
        if !step.calls.is_empty() {
            let used_ids = used_ids.get_or_insert_with(|| call_ids(&request.messages));
            for call in &mut step.calls {
                if !usable_id(&call.id) || !used_ids.insert(call.id.clone()) {
                    // A provider may repeat ids across calls (`call_0` every
                    // time) or send none; the log needs each one unique.
                    call.id = format!("call_{}", uuid::Uuid::new_v4().simple());
                    used_ids.insert(call.id.clone());
                }
            }
        }
        usage.input_tokens = usage.input_tokens.saturating_add(step.usage.input_tokens);
        usage.output_tokens = usage.output_tokens.saturating_add(step.usage.output_tokens);
        request.messages.push(Message::Assistant {
            text: step.text.clone(),
            tool_calls: step.calls.clone(),
            signature: step.signature.clone(),
        });
        if step.calls.is_empty() {
            stop = match step.stop {
                StopKind::EndTurn | StopKind::ToolUse => "end_turn",
                StopKind::MaxTokens => "max_tokens",
                StopKind::Refusal => "refusal",
            };
            break;
        }
        let mut ends = false;
        let mut parked = false;
        for (n, call) in step.calls.iter().enumerate() {
            let result = if cancel.is_cancelled() || ends {
                // Every call gets a result, so the next request is whole.
                skipped(if ends {
                    "not run: an earlier call ended the turn"
                } else {
                    "not run: the turn was cancelled"
                })
            } else if n >= MAX_CALLS_PER_STEP {
                skipped("not run: more tool calls in one step than this agent runs")
            } else {
                // Not raced with the cancel: a verb the client already ran
                // must get its result logged (the sidecar refuses verbs once
                // the turn is cancelled).
                run_tool(agent, session, source, call).await
            };
            ends |= result.ends_turn;
            parked |= result.parked;
            request.messages.push(Message::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: cut_with_notice(&output_text(&result.output), MODEL_RESULT_BYTES),
                is_error: result.is_error,
                images: result.images,
            });
            keep_images_within_budget(&mut request.messages);
        }
        if cancel.is_cancelled() {
            stop = "cancelled";
            break;
        }
        // Delegated work the turn waits for: the calls of this step were
        // all made, and the next model call waits for the children's
        // results, which a resumed turn reads from the log.
        if ends || parked {
            stop = "end_turn";
            break;
        }
    }
    Ok(json!({
        "stopReason": stop,
        "_meta": {"agentos": {"usage": {
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
        }}},
    }))
}

/// The ids of the tool calls a conversation holds.
fn call_ids(messages: &[Message]) -> std::collections::HashSet<String> {
    messages
        .iter()
        .flat_map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.as_slice(),
            _ => &[],
        })
        .map(|call| call.id.clone())
        .collect()
}

/// Images a turn's requests carry at most, in base64 bytes: every model
/// call resends them, and providers bound a request (Anthropic's at 32 MB).
const MAX_TURN_IMAGE_BYTES: usize = 16 * 1024 * 1024;

/// Drops the images of the oldest results until the rest fit the budget
/// (their text still says what was shown).
fn keep_images_within_budget(messages: &mut [Message]) {
    let held = |messages: &[Message]| -> usize {
        messages
            .iter()
            .map(|m| match m {
                Message::ToolResult { images, .. } => images.iter().map(|i| i.data.len()).sum(),
                _ => 0,
            })
            .sum()
    };
    let mut total = held(messages);
    for message in messages.iter_mut() {
        if total <= MAX_TURN_IMAGE_BYTES {
            return;
        }
        if let Message::ToolResult { images, .. } = message {
            total -= images.iter().map(|i| i.data.len()).sum::<usize>();
            images.clear();
        }
    }
}

/// Builds the prompt's error for a failure and, to the sidecar (`to`), also
/// reports it as a durable `_agentos/error` update. A plain ACP client gets
/// only the prompt's error: `sessionUpdate` is a closed set there, and the
/// ACP SDK refuses a notification with a kind it does not know.
async fn fail(
    agent: &Agent,
    session: &str,
    to: Client,
    code: &str,
    retryable: bool,
    message: String,
) -> RpcError {
    if to == Client::Sidecar {
        let update = json!({
            "sessionUpdate": agent_ext::ERROR_UPDATE,
            "message": message,
            "code": code,
            "retryable": retryable,
        });
        agent.peer.session_update(session, update).await;
    }
    RpcError::new(TURN_FAILED, message).with_data(json!({ "code": code, "retryable": retryable }))
}

/// A turn that cannot start or call out because its context or key could
/// not be had (a missing provider or secret, a key file that cannot be
/// read): reported as durably as a provider failure, so a client watching
/// the log sees why, with the code the client gave when it gave one.
async fn client_failed(agent: &Agent, session: &str, to: Client, e: RpcError) -> RpcError {
    let data = e.data.as_ref();
    let code = data
        .and_then(|d| d["code"].as_str())
        .unwrap_or("turn_unavailable")
        .to_owned();
    let retryable = data.and_then(|d| d["retryable"].as_bool()).unwrap_or(false);
    fail(agent, session, to, &code, retryable, e.message).await
}

/// Who the turn's client is, as far as failures are reported.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Client {
    /// It answered `_agentos/context`: the sidecar, which keeps failures
    /// in the session's log.
    Sidecar,
    /// A plain ACP client.
    Plain,
}

impl Source {
    fn client(&self) -> Client {
        match self {
            Source::Sidecar(_) => Client::Sidecar,
            Source::Local => Client::Plain,
        }
    }
}

fn model(agent: &Agent, source: &Source) -> String {
    match source {
        Source::Sidecar(ctx) => ctx.provider.model.clone(),
        Source::Local => agent
            .options
            .local
            .as_ref()
            .map(|l| l.model.clone())
            .unwrap_or_default(),
    }
}

/// The endpoint with its key, asked for right before the call.
async fn endpoint(agent: &Agent, session: &str, source: &Source) -> Result<Endpoint, RpcError> {
    match source {
        Source::Sidecar(ctx) => {
            let key = agent
                .peer
                .request(
                    agent_ext::methods::PROVIDER_KEY,
                    json!({ "sessionId": session }),
                )
                .await?;
            let key: ProviderKey = serde_json::from_value(key)
                .map_err(|e| RpcError::internal(format!("malformed provider key answer: {e}")))?;
            Ok(Endpoint {
                kind: ProviderKind::from_type(&ctx.provider.provider_type),
                base_url: ctx.provider.base_url.clone(),
                api_key: key.api_key,
                public_only: ctx.provider.public_only,
                account_id: key.account_id,
            })
        }
        Source::Local => {
            let Some(local) = &agent.options.local else {
                return Err(RpcError::internal("no local provider"));
            };
            let api_key = local.read_key().map_err(|e| {
                RpcError::new(TURN_FAILED, e.clone())
                    .with_data(json!({"code": "agent_unconfigured", "retryable": false}))
            })?;
            Ok(Endpoint {
                kind: ProviderKind::from_type(&local.provider_type),
                base_url: local.base_url.clone(),
                api_key,
                // The operator named it on the command line.
                public_only: false,
                account_id: None,
            })
        }
    }
}

struct StepOutput {
    /// The `messageId` its chunks went out under.
    message_id: String,
    text: String,
    /// The provider's signature on the text, if it gave one.
    signature: Option<String>,
    calls: Vec<ToolCall>,
    stop: StopKind,
    usage: Usage,
}

enum Step {
    Done(StepOutput),
    Cancelled,
    /// `streamed`: text or reasoning of this call already went out.
    Failed {
        error: ProviderError,
        streamed: bool,
    },
}

/// Retries of a busy provider when the client names none (a plain ACP
/// client).
const DEFAULT_RETRIES: u32 = 3;
/// The first pause when the provider names none; it doubles each time.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest pause waited out; a provider asking for more fails the turn
/// at once, with its own words.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// One model call, made again while the provider answers that it is rate
/// limited or overloaded and nothing of the answer has gone out yet: after
/// the pause it asked for (`retry-after`), or a doubling backoff, at most
/// the turn's number of retries. Each wait is reported to the sidecar as
/// the turn's activity.
async fn call_with_retries(
    agent: &Agent,
    session: &str,
    source: &Source,
    endpoint: &Endpoint,
    request: &ModelRequest,
    cancel: &Cancel,
) -> Step {
    let retries = match source {
        Source::Sidecar(ctx) => ctx.provider_retries.unwrap_or(DEFAULT_RETRIES),
        Source::Local => DEFAULT_RETRIES,
    };
    let mut attempt = 0u32;
    loop {
        let step = call_model(agent, session, endpoint, request, cancel).await;
        let Step::Failed {
            error,
            streamed: false,
        } = &step
        else {
            return step;
        };
        if !error.is_busy() || attempt >= retries {
            return step;
        }
        let wait = error
            .retry_after
            .unwrap_or_else(|| FIRST_BACKOFF.saturating_mul(1 << attempt.min(16)));
        if wait > MAX_RETRY_WAIT {
            return step;
        }
        attempt += 1;
        if source.client() == Client::Sidecar {
            let detail = format!(
                "the provider is busy ({}); trying again in {} s ({attempt} of {retries})",
                error
                    .status
                    .map_or_else(|| error.code.to_owned(), |s| format!("HTTP {s}")),
                wait.as_secs_f64().ceil(),
            );
            let update = json!({
                "sessionUpdate": agent_ext::ACTIVITY_UPDATE,
                "phase": "thinking",
                "detail": detail,
            });
            agent.peer.session_update(session, update).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancel.cancelled() => return Step::Cancelled,
        }
    }
}

/// One streamed model call; deltas go out as they arrive.
async fn call_model(
    agent: &Agent,
    session: &str,
    endpoint: &Endpoint,
    request: &ModelRequest,
    cancel: &Cancel,
) -> Step {
    let message_id = uuid::Uuid::new_v4().to_string();
    // The provider layer bounds what one response may hold, so this queue is
    // bounded by it too.
    let (tx, mut rx) = mpsc::unbounded_channel::<StreamEvent>();
    let peer = agent.peer.clone();
    let session_id = session.to_owned();
    let chunk_id = message_id.clone();
    let forward = async move {
        let mut streamed = false;
        let mut text = String::new();
        let mut signature = None;
        let mut calls = Vec::new();
        let mut usage = Usage {
            input_tokens: 0,
            output_tokens: 0,
        };
        while let Some(event) = rx.recv().await {
            match event {
                StreamEvent::TextDelta(delta) => {
                    streamed = true;
                    text.push_str(&delta);
                    peer.notify_typed(
                        methods::SESSION_UPDATE,
                        &Chunk::new(&session_id, "agent_message_chunk", &chunk_id, &delta),
                    )
                    .await;
                }
                StreamEvent::ReasoningDelta(delta) => {
                    streamed = true;
                    peer.notify_typed(
                        methods::SESSION_UPDATE,
                        &Chunk::new(&session_id, "agent_thought_chunk", &chunk_id, &delta),
                    )
                    .await;
                }
                StreamEvent::ToolCall(call) => calls.push(call),
                StreamEvent::Usage(u) => usage = u,
                StreamEvent::TextSignature(s) => signature = Some(s),
            }
        }
        (text, signature, calls, usage, streamed)
    };
    let call = async {
        let mut on_event = |event: StreamEvent| {
            let _ = tx.send(event);
        };
        let result = agent
            .provider
            .stream(endpoint, request, &mut on_event)
            .await;
        drop(tx);
        result
    };
    let both = async { tokio::join!(call, forward) };
    tokio::select! {
        (result, (text, signature, mut calls, usage, streamed)) = both => match result {
            Ok(stop) => {
                // Calls past twice what a step runs are dropped unseen
                // (a hostile stream of tiny calls), not answered one by one.
                calls.truncate(2 * MAX_CALLS_PER_STEP);
                Step::Done(StepOutput { message_id, text, signature, calls, stop, usage })
            }
            Err(error) => Step::Failed { error, streamed },
        },
        _ = cancel.cancelled() => Step::Cancelled,
    }
}

fn elapsed_ms(since: std::time::Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// One model call's tokens as the reference's `AgentRunUsage`.
fn usage_json(usage: Usage) -> Value {
    json!({
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "cacheRead": 0,
        "cacheWrite": 0,
        "total": usage.input_tokens.saturating_add(usage.output_tokens),
    })
}

/// A streamed text chunk's `session/update` params, as [`chunk`] writes
/// them, serialized without building them as a JSON tree first.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    session_id: &'a str,
    update: ChunkUpdate<'a>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ChunkUpdate<'a> {
    session_update: &'a str,
    message_id: &'a str,
    content: TextBlock<'a>,
}

#[derive(serde::Serialize)]
struct TextBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

impl<'a> Chunk<'a> {
    fn new(session: &'a str, kind: &'a str, message_id: &'a str, text: &'a str) -> Chunk<'a> {
        Chunk {
            session_id: session,
            update: ChunkUpdate {
                session_update: kind,
                message_id,
                content: TextBlock { kind: "text", text },
            },
        }
    }
}

fn chunk(session: &str, kind: &str, message_id: &str, text: String) -> Value {
    json!({
        "sessionId": session,
        "update": {
            "sessionUpdate": kind,
            "messageId": message_id,
            "content": {"type": "text", "text": text},
        },
    })
}

/// Reports the call, runs it (through the sidecar or locally), reports the
/// result.
async fn run_tool(agent: &Agent, session: &str, source: &Source, call: &ToolCall) -> VerbResult {
    let mut started = json!({
        "sessionUpdate": "tool_call",
        "toolCallId": call.id,
        "title": call.name,
        "kind": agent_ext::tool_kind(&call.name),
        "status": "in_progress",
        "rawInput": call.arguments,
    });
    if let Some(signature) = &call.signature {
        // Kept with the call in the log, so a turn rebuilt from it (one
        // resumed after its children) sends the call back signed.
        started["_meta"] = json!({"agentos": {agent_ext::SIGNATURE_META: signature}});
    }
    agent.peer.session_update(session, started).await;
    let began = std::time::Instant::now();
    let result = match source {
        Source::Sidecar(_) => match agent
            .peer
            .request(
                agent_ext::methods::VERB,
                json!({
                    "sessionId": session,
                    "toolCallId": call.id,
                    "name": call.name,
                    "input": call.arguments,
                }),
            )
            .await
        {
            Ok(value) => serde_json::from_value(value).unwrap_or_else(|e| VerbResult {
                output: Value::String(format!("the client's verb answer is malformed: {e}")),
                is_error: true,
                ends_turn: false,
                parked: false,
                images: Vec::new(),
            }),
            Err(e) => VerbResult {
                output: Value::String(e.message),
                is_error: true,
                ends_turn: false,
                parked: false,
                images: Vec::new(),
            },
        },
        Source::Local => {
            let cwd = lock(&agent.sessions)
                .get(session)
                .and_then(|s| s.cwd.clone());
            super::local::run_verb(&agent.peer, cwd.as_deref(), session, call).await
        }
    };
    if result.parked {
        // The child's result is this call's, logged when the child ends.
        return result;
    }
    let stored = agent_ext::stored_output(&result.output);
    let ended = json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call.id,
        "title": call.name,
        "status": if result.is_error { "failed" } else { "completed" },
        "rawOutput": stored,
        "_meta": {"agentos": {agent_ext::MESSAGE_META: {"durationMs": elapsed_ms(began)}}},
    });
    agent.peer.session_update(session, ended).await;
    result
}

/// The prompt's blocks as the user's text.
fn prompt_text(blocks: &[Value]) -> String {
    blocks
        .iter()
        .filter_map(agent_ext::block_text)
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentos_protocol::agent_ext::TranscriptItem;

    #[test]
    fn a_streamed_chunk_is_written_as_the_json_tree_would_be() {
        for text in ["plain", "quote \" and \\ and \n and \u{1}", ""] {
            let typed = serde_json::to_value(Chunk::new("s1", "agent_message_chunk", "m1", text))
                .expect("serializes");
            assert_eq!(
                typed,
                chunk("s1", "agent_message_chunk", "m1", text.to_owned())
            );
        }
    }

    #[test]
    fn images_past_the_turns_budget_go_from_the_oldest_results() {
        let image = |n: usize| agentos_protocol::agent_ext::ImagePart {
            mime_type: "image/png".into(),
            data: "A".repeat(n),
        };
        let result = |id: &str, images| Message::ToolResult {
            call_id: id.into(),
            name: "read".into(),
            content: String::new(),
            is_error: false,
            images,
        };
        let half = MAX_TURN_IMAGE_BYTES / 2 + 1;
        let mut messages = vec![
            result("a", vec![image(half)]),
            result("b", vec![image(half)]),
        ];
        keep_images_within_budget(&mut messages);
        let kept: Vec<usize> = messages
            .iter()
            .map(|m| match m {
                Message::ToolResult { images, .. } => images.len(),
                _ => 0,
            })
            .collect();
        assert_eq!(kept, vec![0, 1]);
    }

    #[test]
    fn a_transcript_groups_text_and_calls_into_one_assistant_message() {
        let items = vec![
            TranscriptItem::User { text: "hi".into() },
            TranscriptItem::Assistant {
                text: "let me look".into(),
            },
            TranscriptItem::ToolCall {
                id: "c1".into(),
                name: "read".into(),
                input: json!({"address": "~/memory/a"}),
                signature: None,
            },
            TranscriptItem::ToolResult {
                id: "c1".into(),
                name: "read".into(),
                output: "x".into(),
                is_error: false,
            },
            TranscriptItem::Assistant {
                text: "done".into(),
            },
            TranscriptItem::User { text: "a".into() },
            TranscriptItem::User { text: "b".into() },
        ];
        let mut messages = Vec::new();
        super::super::held::fold(&mut messages, items);
        assert_eq!(messages.len(), 5);
        assert!(
            matches!(&messages[1], Message::Assistant { text, tool_calls, .. } if text == "let me look" && tool_calls.len() == 1)
        );
        assert!(matches!(&messages[2], Message::ToolResult { call_id, .. } if call_id == "c1"));
        assert!(matches!(&messages[4], Message::User { text } if text == "a\n\nb"));
    }

    #[test]
    fn prompt_blocks_become_text() {
        let text = prompt_text(&[
            json!({"type": "text", "text": "look at"}),
            json!({"type": "resource_link", "uri": "file:///a", "name": "a"}),
            json!({"type": "resource", "resource": {"uri": "file:///b", "text": "B"}}),
            json!({"type": "image", "data": "..."}),
        ]);
        assert_eq!(
            text,
            "look at\n\n[resource: file:///a]\n\n<resource uri=\"file:///b\">\nB\n</resource>"
        );
    }
}
