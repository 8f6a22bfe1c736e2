//! How the scripted provider writes a reply in each API's format: which
//! paths each API serves, the chunk objects, the event names and the exact
//! SSE framing (`data: …\n\n` for OpenAI, `event: …\ndata: …\n\n` for
//! Anthropic, `data: …\r\n\r\n` for Google), the model lists and the error
//! bodies.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};

use super::{Flavor, Reply, INPUT_TOKENS};

/// One write of a response body.
pub(super) struct Chunk {
    pub bytes: Bytes,
    /// A text or reasoning delta (its send instant is recorded).
    pub delta: bool,
    /// A pause before it is handed over.
    pub gap_before: Duration,
}

enum Step {
    Reasoning(String),
    Text(String),
    Call {
        id: String,
        name: String,
        arguments: Value,
    },
}

enum Ending {
    Finish,
    Fail,
    /// Nothing more, and the body never ends.
    Hang,
}

/// A streamed reply as steps, before any API's format.
pub(super) struct Script {
    steps: Vec<(Step, Duration)>,
    ending: Ending,
    pub hang: bool,
}

impl Script {
    pub(super) fn from_reply(reply: &Reply) -> Script {
        let text = |deltas: &[String]| -> Vec<(Step, Duration)> {
            deltas
                .iter()
                .map(|d| (Step::Text(d.clone()), Duration::ZERO))
                .collect()
        };
        let (steps, ending) = match reply {
            Reply::Text(deltas) => (text(deltas), Ending::Finish),
            Reply::Reasoning { reasoning, text: t } => {
                let mut steps: Vec<(Step, Duration)> = reasoning
                    .iter()
                    .map(|d| (Step::Reasoning(d.clone()), Duration::ZERO))
                    .collect();
                steps.extend(text(t));
                (steps, Ending::Finish)
            }
            Reply::ToolCalls(calls) => (
                calls
                    .iter()
                    .map(|(id, name, arguments)| {
                        (
                            Step::Call {
                                id: id.clone(),
                                name: name.clone(),
                                arguments: arguments.clone(),
                            },
                            Duration::ZERO,
                        )
                    })
                    .collect(),
                Ending::Finish,
            ),
            Reply::Slow { deltas, gap } => (
                deltas
                    .iter()
                    .enumerate()
                    .map(|(i, d)| {
                        let pause = if i == 0 { Duration::ZERO } else { *gap };
                        (Step::Text(d.clone()), pause)
                    })
                    .collect(),
                Ending::Finish,
            ),
            Reply::Oversized(bytes) => (
                vec![(Step::Text("x".repeat(*bytes)), Duration::ZERO)],
                Ending::Finish,
            ),
            Reply::StreamError => (
                vec![(Step::Text("partial".to_owned()), Duration::ZERO)],
                Ending::Fail,
            ),
            Reply::Hang => (Vec::new(), Ending::Hang),
            // Answered without a stream before a script is made.
            Reply::Status(..) | Reply::RetryAfter(..) | Reply::Disconnect | Reply::Models(_) => {
                (Vec::new(), Ending::Finish)
            }
        };
        let hang = matches!(ending, Ending::Hang);
        Script {
            steps,
            ending,
            hang,
        }
    }

    fn output_tokens(&self) -> u64 {
        self.steps.len() as u64
    }

    fn has_calls(&self) -> bool {
        self.steps
            .iter()
            .any(|(step, _)| matches!(step, Step::Call { .. }))
    }
}

/// Whether `method path` is one of the API's endpoints.
pub(super) fn is_route(flavor: Flavor, method: &str, path: &str) -> bool {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    match (flavor, method) {
        (Flavor::OpenAi, "POST") => path == "/v1/chat/completions",
        (Flavor::OpenAi, "GET") => path == "/v1/models",
        (Flavor::Anthropic, "POST") => path == "/v1/messages",
        (Flavor::Anthropic, "GET") => path == "/v1/models",
        (Flavor::Google, "POST") => {
            path.strip_prefix("/v1beta/models/")
                .and_then(|rest| rest.strip_suffix(":streamGenerateContent"))
                .is_some_and(|model| !model.is_empty() && !model.contains('/'))
                && query.split('&').any(|p| p == "alt=sse")
        }
        (Flavor::Google, "GET") => path == "/v1beta/models",
        _ => false,
    }
}

/// An error body in the shape all three APIs share.
pub(super) fn error_body(message: &str) -> String {
    json!({"error": {"message": message, "type": "scripted_error"}}).to_string()
}

pub(super) fn models_body(flavor: Flavor, models: &[(String, String)]) -> String {
    match flavor {
        Flavor::OpenAi => json!({
            "object": "list",
            "data": models.iter().map(|(id, _)| json!({
                "id": id, "object": "model", "created": 0, "owned_by": "scripted",
            })).collect::<Vec<_>>(),
        }),
        Flavor::Anthropic => json!({
            "data": models.iter().map(|(id, name)| json!({
                "type": "model", "id": id, "display_name": name,
                "created_at": "2025-01-01T00:00:00Z",
            })).collect::<Vec<_>>(),
            "has_more": false,
            "first_id": models.first().map(|m| m.0.clone()),
            "last_id": models.last().map(|m| m.0.clone()),
        }),
        Flavor::Google => json!({
            "models": models.iter().map(|(id, name)| json!({
                "name": format!("models/{id}"),
                "displayName": name,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            })).collect::<Vec<_>>(),
        }),
    }
    .to_string()
}

pub(super) fn render(flavor: Flavor, model: &str, script: &Script) -> Vec<Chunk> {
    if script.hang {
        return Vec::new();
    }
    match flavor {
        Flavor::OpenAi => openai(model, script),
        Flavor::Anthropic => anthropic(model, script),
        Flavor::Google => google(script),
    }
}

fn chunk(bytes: String, delta: bool, gap_before: Duration) -> Chunk {
    Chunk {
        bytes: Bytes::from(bytes),
        delta,
        gap_before,
    }
}

/// Splits a call's argument text in three at character boundaries, so a
/// client must join fragments.
fn fragments(arguments: &Value) -> Vec<String> {
    let text = arguments.to_string();
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn openai(model: &str, script: &Script) -> Vec<Chunk> {
    let data = |delta: Value, finish: Value| {
        let object = json!({
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        format!("data: {object}\n\n")
    };
    let mut out = vec![chunk(
        data(json!({"role": "assistant", "content": ""}), Value::Null),
        false,
        Duration::ZERO,
    )];
    let mut call_index = 0;
    for (step, gap) in &script.steps {
        match step {
            Step::Text(text) => out.push(chunk(
                data(json!({"content": text}), Value::Null),
                true,
                *gap,
            )),
            Step::Reasoning(text) => out.push(chunk(
                data(json!({"reasoning_content": text}), Value::Null),
                true,
                *gap,
            )),
            Step::Call {
                id,
                name,
                arguments,
            } => {
                let head = json!({"tool_calls": [{
                    "index": call_index, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""},
                }]});
                out.push(chunk(data(head, Value::Null), false, *gap));
                for piece in fragments(arguments) {
                    let body = json!({"tool_calls": [{
                        "index": call_index, "function": {"arguments": piece},
                    }]});
                    out.push(chunk(data(body, Value::Null), false, Duration::ZERO));
                }
                call_index += 1;
            }
        }
    }
    match script.ending {
        Ending::Finish => {
            let reason = if script.has_calls() {
                "tool_calls"
            } else {
                "stop"
            };
            out.push(chunk(data(json!({}), json!(reason)), false, Duration::ZERO));
            let output = script.output_tokens();
            let usage = json!({
                "id": "chatcmpl-scripted",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": {
                    "prompt_tokens": INPUT_TOKENS,
                    "completion_tokens": output,
                    "total_tokens": INPUT_TOKENS + output,
                },
            });
            out.push(chunk(format!("data: {usage}\n\n"), false, Duration::ZERO));
            out.push(chunk("data: [DONE]\n\n".to_owned(), false, Duration::ZERO));
        }
        // The body ends here, with neither a finish nor `[DONE]`.
        Ending::Fail | Ending::Hang => {}
    }
    out
}

fn anthropic(model: &str, script: &Script) -> Vec<Chunk> {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut out = vec![
        chunk(
            event(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": "msg_scripted", "type": "message", "role": "assistant",
                    "content": [], "model": model, "stop_reason": null,
                    "stop_sequence": null,
                    "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1},
                }}),
            ),
            false,
            Duration::ZERO,
        ),
        chunk(
            event("ping", json!({"type": "ping"})),
            false,
            Duration::ZERO,
        ),
    ];
    // The block open, if any: its index and whether it is thinking.
    let mut open: Option<(usize, bool)> = None;
    let mut next_index = 0;
    let close = |out: &mut Vec<Chunk>, open: &mut Option<(usize, bool)>| {
        if let Some((index, thinking)) = open.take() {
            if thinking {
                out.push(chunk(
                    event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "signature_delta", "signature": "c2NyaXB0ZWQ="}}),
                    ),
                    false,
                    Duration::ZERO,
                ));
            }
            out.push(chunk(
                event(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": index}),
                ),
                false,
                Duration::ZERO,
            ));
        }
    };
    for (step, gap) in &script.steps {
        match step {
            Step::Text(text) | Step::Reasoning(text) => {
                let thinking = matches!(step, Step::Reasoning(_));
                if open.map(|(_, t)| t) != Some(thinking) {
                    close(&mut out, &mut open);
                    let block = if thinking {
                        json!({"type": "thinking", "thinking": ""})
                    } else {
                        json!({"type": "text", "text": ""})
                    };
                    out.push(chunk(
                        event(
                            "content_block_start",
                            json!({"type": "content_block_start", "index": next_index,
                                   "content_block": block}),
                        ),
                        false,
                        Duration::ZERO,
                    ));
                    open = Some((next_index, thinking));
                    next_index += 1;
                }
                let index = open.map_or(0, |(i, _)| i);
                let delta = if thinking {
                    json!({"type": "thinking_delta", "thinking": text})
                } else {
                    json!({"type": "text_delta", "text": text})
                };
                out.push(chunk(
                    event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": delta}),
                    ),
                    true,
                    *gap,
                ));
            }
            Step::Call {
                id,
                name,
                arguments,
            } => {
                close(&mut out, &mut open);
                let index = next_index;
                next_index += 1;
                out.push(chunk(
                    event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                    ),
                    false,
                    *gap,
                ));
                for piece in fragments(arguments) {
                    out.push(chunk(
                        event(
                            "content_block_delta",
                            json!({"type": "content_block_delta", "index": index,
                                   "delta": {"type": "input_json_delta", "partial_json": piece}}),
                        ),
                        false,
                        Duration::ZERO,
                    ));
                }
                out.push(chunk(
                    event(
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": index}),
                    ),
                    false,
                    Duration::ZERO,
                ));
            }
        }
    }
    match script.ending {
        Ending::Finish => {
            close(&mut out, &mut open);
            let reason = if script.has_calls() {
                "tool_use"
            } else {
                "end_turn"
            };
            out.push(chunk(
                event(
                    "message_delta",
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": reason, "stop_sequence": null},
                           "usage": {"output_tokens": script.output_tokens()}}),
                ),
                false,
                Duration::ZERO,
            ));
            out.push(chunk(
                event("message_stop", json!({"type": "message_stop"})),
                false,
                Duration::ZERO,
            ));
        }
        Ending::Fail => out.push(chunk(
            event(
                "error",
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
            false,
            Duration::ZERO,
        )),
        Ending::Hang => {}
    }
    out
}

/// The `thoughtSignature` the Google flavor puts on a call it makes, as
/// Gemini does on the first call of an answer.
pub fn google_call_signature(id: &str) -> String {
    format!("scripted-signature/{id}")
}

/// The signature the Google flavor puts on the last part of an answer that
/// makes no call.
pub const GOOGLE_TEXT_SIGNATURE: &str = "scripted-text-signature";

/// `(name, args, signature)` of each call this script signs (Gemini signs
/// the first call of an answer).
pub(super) fn google_signed_calls(script: &Script) -> Vec<(String, Value, String)> {
    script
        .steps
        .iter()
        .find_map(|(step, _)| match step {
            Step::Call {
                id,
                name,
                arguments,
            } => Some((name.clone(), arguments.clone(), google_call_signature(id))),
            _ => None,
        })
        .into_iter()
        .collect()
}

/// Gemini 3's check on a request: every call it signed comes back in a
/// `model` part carrying that same signature. Answers the refusal's
/// message, or `None` when the request passes.
pub(super) fn google_missing_signature(
    body: &Value,
    signed: &[(String, Value, String)],
) -> Option<String> {
    let contents = body.get("contents")?.as_array()?;
    for content in contents {
        if content.get("role").and_then(Value::as_str) != Some("model") {
            continue;
        }
        let parts = content.get("parts").and_then(Value::as_array)?;
        for part in parts {
            let Some(call) = part.get("functionCall") else {
                continue;
            };
            let name = call.get("name").and_then(Value::as_str).unwrap_or("");
            let args = call.get("args").cloned().unwrap_or(Value::Null);
            let issued: Vec<&str> = signed
                .iter()
                .filter(|(n, a, _)| n == name && *a == args)
                .map(|(_, _, sig)| sig.as_str())
                .collect();
            if issued.is_empty() {
                continue;
            }
            let sent = part.get("thoughtSignature").and_then(Value::as_str);
            if !sent.is_some_and(|sent| issued.contains(&sent)) {
                return Some(format!(
                    "Function call is missing a thought_signature in functionCall parts. \
                     This is required for tools to work correctly (call `{name}`)."
                ));
            }
        }
    }
    None
}

/// Google's error body.
pub(super) fn google_error_body(code: u16, status: &str, message: &str) -> String {
    json!({"error": {"code": code, "message": message, "status": status}}).to_string()
}

fn google(script: &Script) -> Vec<Chunk> {
    let data = |object: Value| format!("data: {object}\r\n\r\n");
    let usage = |output: u64| {
        json!({
            "promptTokenCount": INPUT_TOKENS,
            "candidatesTokenCount": output,
            "totalTokenCount": INPUT_TOKENS + output,
        })
    };
    let candidate = |part: Value, output: u64| {
        json!({
            "candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}],
            "usageMetadata": usage(output),
            "modelVersion": "scripted",
        })
    };
    let mut out = Vec::new();
    let mut signed = false;
    for (sent, (step, gap)) in script.steps.iter().enumerate() {
        let so_far = sent as u64 + 1;
        let (part, delta) = match step {
            Step::Text(text) => (json!({"text": text}), true),
            Step::Reasoning(text) => (json!({"text": text, "thought": true}), true),
            Step::Call {
                id,
                name,
                arguments,
            } => {
                let mut part = json!({"functionCall": {"name": name, "args": arguments}});
                if !std::mem::replace(&mut signed, true) {
                    part["thoughtSignature"] = json!(google_call_signature(id));
                }
                (part, false)
            }
        };
        out.push(chunk(data(candidate(part, so_far)), delta, *gap));
    }
    match script.ending {
        Ending::Finish => out.push(chunk(
            data(json!({
                "candidates": [{
                    "content": {"parts": [if signed {
                        json!({"text": ""})
                    } else {
                        json!({"text": "", "thoughtSignature": GOOGLE_TEXT_SIGNATURE})
                    }], "role": "model"},
                    "finishReason": "STOP",
                    "index": 0,
                }],
                "usageMetadata": usage(script.output_tokens()),
                "modelVersion": "scripted",
            })),
            false,
            Duration::ZERO,
        )),
        Ending::Fail => out.push(chunk(
            data(json!({"error": {
                "code": 503,
                "message": "The model is overloaded. Please try again later.",
                "status": "UNAVAILABLE",
            }})),
            false,
            Duration::ZERO,
        )),
        Ending::Hang => {}
    }
    out
}
