//! The ChatGPT Codex backend (a subscription signed in with ChatGPT): the
//! OpenAI Responses API at `<base>/codex/responses`, with the headers and
//! body the reference's SDK sends (the access token as bearer, the ChatGPT
//! account in `chatgpt-account-id`, `OpenAI-Beta: responses=experimental`,
//! `store:false`, `stream:true`, the system prompt as `instructions`, the
//! conversation as `input` items, the verbs as function tools), and its
//! server-sent events read back: text deltas, function calls assembled
//! from their argument deltas, usage and status at `response.completed`.

use std::collections::BTreeMap;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use super::openai::arguments_text;
use super::transport::{plain_header, secret_header, EventStream, Transport};
use super::{
    parse_arguments, parse_event, u64_at, Endpoint, Message, ModelRequest, ProviderError, StopKind,
    StreamEvent, ToolCall, Usage,
};

pub(super) async fn stream(
    transport: &Transport,
    endpoint: &Endpoint,
    request: &ModelRequest,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<StopKind, ProviderError> {
    let url = transport.url(endpoint, codex_path(&endpoint.base_url))?;
    let body = request_body(request);
    let mut events = transport
        .post_stream(url, headers(endpoint, request)?, &body)
        .await
        .map_err(|e| usage_limit(e, agentos_base::clock::unix_ms()))?;
    read_stream(&mut events, on_event).await
}

/// A ChatGPT plan's limit, worded as the reference words it: `You have hit
/// your ChatGPT usage limit (plus plan). Try again in ~42 min.` (a 429, or
/// an error whose code names the limit).
fn usage_limit(mut e: ProviderError, now_ms: i64) -> ProviderError {
    let Some(error) = e
        .body
        .as_ref()
        .map(|b| &b["error"])
        .filter(|v| v.is_object())
    else {
        return e;
    };
    let code = error["code"]
        .as_str()
        .or(error["type"].as_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let limited = [
        "usage_limit_reached",
        "usage_not_included",
        "rate_limit_exceeded",
    ]
    .iter()
    .any(|c| code.contains(c));
    if !limited && e.status != Some(429) {
        return e;
    }
    let mut message = "You have hit your ChatGPT usage limit".to_owned();
    if let Some(plan) = error["plan_type"].as_str() {
        message.push_str(&format!(" ({} plan)", plan.to_ascii_lowercase()));
    }
    message.push('.');
    if let Some(resets_at) = error["resets_at"].as_f64() {
        let minutes = ((resets_at * 1000.0 - now_ms as f64) / 60_000.0)
            .round()
            .max(0.0);
        message.push_str(&format!(" Try again in ~{minutes} min."));
    }
    e.message = message;
    e
}

/// What follows the base, as the reference resolves it: a base that
/// already ends in `/codex/responses` or `/codex` is completed, not
/// repeated.
fn codex_path(base: &str) -> &'static str {
    let base = base.trim_end_matches('/');
    if base.ends_with("/codex/responses") {
        ""
    } else if base.ends_with("/codex") {
        "/responses"
    } else {
        "/codex/responses"
    }
}

fn headers(endpoint: &Endpoint, request: &ModelRequest) -> Result<HeaderMap, ProviderError> {
    let mut headers = HeaderMap::new();
    let Some(token) = endpoint.api_key.as_deref().filter(|k| !k.is_empty()) else {
        return Err(ProviderError::bad_request(
            "the subscription has no access token: sign in with ChatGPT again",
        ));
    };
    secret_header(&mut headers, "authorization", &format!("Bearer {token}"))?;
    if let Some(account) = &endpoint.account_id {
        secret_header(&mut headers, "chatgpt-account-id", account)?;
    }
    plain_header(&mut headers, "originator", "pi");
    // The reference's client names itself so; the backend reads it.
    secret_header(
        &mut headers,
        "user-agent",
        &format!(
            "pi ({} {}; {})",
            std::env::consts::OS,
            os_release(),
            node_arch()
        ),
    )?;
    plain_header(&mut headers, "openai-beta", "responses=experimental");
    plain_header(&mut headers, "accept", "text/event-stream");
    if let Some(session) = &request.cache_key {
        secret_header(&mut headers, "session_id", session)?;
        secret_header(&mut headers, "x-client-request-id", session)?;
    }
    Ok(headers)
}

/// The kernel release, as Node's `os.release()` reads it (empty if unknown).
fn os_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_owned())
        .unwrap_or_default()
}

/// The architecture as Node names it.
fn node_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub(super) fn request_body(request: &ModelRequest) -> Value {
    let mut input = Vec::with_capacity(request.messages.len());
    for (at, message) in request.messages.iter().enumerate() {
        match message {
            Message::User { text } => {
                if !text.is_empty() {
                    input.push(json!({"role": "user",
                                      "content": [{"type": "input_text", "text": text}]}));
                }
            }
            Message::Assistant {
                text, tool_calls, ..
            } => {
                if !text.is_empty() {
                    input.push(json!({
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                        "status": "completed",
                        "id": format!("msg_{at}"),
                    }));
                }
                for call in tool_calls {
                    input.push(json!({
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": arguments_text(&call.arguments),
                    }));
                }
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
                images,
                ..
            } => {
                let text = if *is_error {
                    format!("Error: {content}")
                } else {
                    content.clone()
                };
                let output = if images.is_empty() {
                    json!(text)
                } else {
                    let mut parts = vec![json!({"type": "input_text", "text": text})];
                    parts.extend(images.iter().map(|image| {
                        json!({"type": "input_image", "detail": "auto",
                               "image_url": format!("data:{};base64,{}", image.mime_type, image.data)})
                    }));
                    Value::Array(parts)
                };
                input.push(json!({"type": "function_call_output", "call_id": call_id,
                                  "output": output}));
            }
        }
    }
    let mut body = json!({
        "model": request.model,
        "store": false,
        "stream": true,
        "instructions": request.system,
        "input": input,
        "text": {"verbosity": "low"},
        "include": ["reasoning.encrypted_content"],
    });
    if let Some(key) = &request.cache_key {
        body["prompt_cache_key"] = json!(key);
    }
    body["tool_choice"] = json!("auto");
    body["parallel_tool_calls"] = json!(true);
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "name": tool.name, "description": tool.description,
                       "parameters": tool.parameters, "strict": null})
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    body
}

async fn read_stream(
    events: &mut EventStream,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<StopKind, ProviderError> {
    let mut state = StreamState::default();
    loop {
        match events.next().await? {
            Some(event) => {
                if let Some(stop) = state.on_data(&event.data, on_event)? {
                    return Ok(stop);
                }
            }
            None => return Err(events.truncated()),
        }
    }
}

/// A function call being assembled.
#[derive(Default)]
struct PartialCall {
    call_id: String,
    name: String,
    arguments: String,
    /// `response.function_call_arguments.done` or the item's end gave
    /// them whole.
    whole: Option<String>,
}

#[derive(Default)]
pub(super) struct StreamState {
    /// By output index.
    calls: BTreeMap<u64, PartialCall>,
    /// Output indexes whose text streamed as deltas (a message item's
    /// end repeats it; one that streamed none carries it only there).
    streamed: std::collections::BTreeSet<u64>,
}

impl StreamState {
    /// Reads one event; the stop kind once the response is complete.
    pub(super) fn on_data(
        &mut self,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<Option<StopKind>, ProviderError> {
        if data.trim() == "[DONE]" || data.trim().is_empty() {
            return Ok(None);
        }
        // An event that is not JSON is skipped, as the reference skips it.
        let Ok(event) = parse_event(data) else {
            return Ok(None);
        };
        let index = event
            .get("output_index")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let text = |field: &str| event.get(field).and_then(Value::as_str).unwrap_or_default();
        match text("type") {
            "error" => {
                let message = event
                    .get("message")
                    .or_else(|| event.get("code"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| event.to_string());
                return Err(ProviderError::in_stream(
                    None,
                    &format!("Codex error: {message}"),
                ));
            }
            "response.failed" => {
                let message = event
                    .pointer("/response/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("Codex response failed");
                return Err(ProviderError::in_stream(None, message));
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let delta = text("delta");
                if !delta.is_empty() {
                    self.streamed.insert(index);
                    on_event(StreamEvent::TextDelta(delta.to_owned()));
                }
            }
            "response.reasoning_summary_text.delta" => {
                let delta = text("delta");
                if !delta.is_empty() {
                    on_event(StreamEvent::ReasoningDelta(delta.to_owned()));
                }
            }
            "response.reasoning_summary_part.done" => {
                on_event(StreamEvent::ReasoningDelta("\n\n".to_owned()));
            }
            "response.output_item.added" | "response.output_item.done" => {
                let item = &event["item"];
                let done = text("type") == "response.output_item.done";
                if done && item["type"] == "message" && !self.streamed.contains(&index) {
                    // The message's text came only whole.
                    let whole: String = item["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|part| part["text"].as_str().or(part["refusal"].as_str()))
                        .collect();
                    if !whole.is_empty() {
                        self.streamed.insert(index);
                        on_event(StreamEvent::TextDelta(whole));
                    }
                }
                if item["type"] == "function_call" {
                    let call = self.calls.entry(index).or_default();
                    let field = |name: &str| item[name].as_str().unwrap_or_default().to_owned();
                    if call.call_id.is_empty() {
                        call.call_id = field("call_id");
                    }
                    if call.name.is_empty() {
                        call.name = field("name");
                    }
                    if text("type") == "response.output_item.done" {
                        if let Some(args) = item["arguments"].as_str() {
                            call.whole = Some(args.to_owned());
                        }
                    }
                }
            }
            "response.function_call_arguments.delta" => {
                self.calls
                    .entry(index)
                    .or_default()
                    .arguments
                    .push_str(text("delta"));
            }
            "response.function_call_arguments.done" => {
                if let Some(args) = event.get("arguments").and_then(Value::as_str) {
                    self.calls.entry(index).or_default().whole = Some(args.to_owned());
                }
            }
            "response.completed" | "response.done" | "response.incomplete" => {
                return self.complete(&event["response"], on_event).map(Some);
            }
            _ => {}
        }
        Ok(None)
    }

    fn complete(
        &mut self,
        response: &Value,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<StopKind, ProviderError> {
        let calls = std::mem::take(&mut self.calls);
        for (index, call) in &calls {
            if call.name.is_empty() {
                return Err(ProviderError::protocol(format!(
                    "function call {index} of the response has no name"
                )));
            }
        }
        for call in calls.into_values() {
            let arguments = call.whole.unwrap_or(call.arguments);
            let id = if call.call_id.is_empty() {
                format!("call_{}", uuid::Uuid::new_v4().simple())
            } else {
                call.call_id
            };
            on_event(StreamEvent::ToolCall(ToolCall {
                id,
                name: call.name,
                arguments: parse_arguments(&arguments),
                signature: None,
            }));
        }
        if response.get("usage").is_some_and(Value::is_object) {
            let cached = u64_at(response, "/usage/input_tokens_details/cached_tokens");
            on_event(StreamEvent::Usage(Usage {
                input_tokens: u64_at(response, "/usage/input_tokens").saturating_sub(cached),
                output_tokens: u64_at(response, "/usage/output_tokens"),
            }));
        }
        Ok(match response["status"].as_str() {
            Some("incomplete") => StopKind::MaxTokens,
            Some("failed") | Some("cancelled") => {
                return Err(ProviderError::in_stream(None, "Codex response failed"))
            }
            _ => StopKind::EndTurn,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::provider::ToolSpec;

    #[test]
    fn the_body_is_the_references_responses_request() {
        let mut request = crate::builtin::provider::image_conversation("gpt-5.5");
        request.system = "Be brief.".into();
        request.cache_key = Some("session-1".into());
        request.tools = vec![ToolSpec {
            name: "read".into(),
            description: "reads".into(),
            parameters: json!({"type": "object"}),
        }];
        let body = request_body(&request);
        assert_eq!(body["store"], false);
        assert_eq!(body["stream"], true);
        assert_eq!(body["instructions"], "Be brief.");
        assert_eq!(body["prompt_cache_key"], "session-1");
        assert_eq!(body["text"], json!({"verbosity": "low"}));
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(
            body["tools"][0],
            json!({"type": "function", "name": "read", "description": "reads",
                   "parameters": {"type": "object"}, "strict": null})
        );
        let input = body["input"].as_array().unwrap();
        assert_eq!(
            input[0],
            json!({"role": "user", "content": [{"type": "input_text", "text": "look"}]})
        );
        assert_eq!(input[1]["type"], "function_call");
        assert_eq!(input[1]["call_id"], "a");
        assert_eq!(input[1]["arguments"], "{\"address\":\"attachment:x\"}");
        assert_eq!(
            input[3]["output"],
            json!([{"type": "input_text", "text": "result a"},
                   {"type": "input_image", "detail": "auto",
                    "image_url": "data:image/png;base64,iVBORw0K"}])
        );
        assert_eq!(input[4]["output"], "result b");
    }

    #[test]
    fn a_plans_limit_is_worded_as_the_reference_words_it() {
        let body =
            br#"{"error":{"code":"usage_limit_reached","plan_type":"PLUS","resets_at":1000}}"#;
        let e = usage_limit(
            ProviderError::from_status(429, body),
            1000 * 1000 - 42 * 60_000,
        );
        assert_eq!(
            e.message,
            "You have hit your ChatGPT usage limit (plus plan). Try again in ~42 min."
        );
        let other = usage_limit(
            ProviderError::from_status(400, br#"{"error":{"message":"bad"}}"#),
            0,
        );
        assert!(other.message.contains("bad"), "{}", other.message);
    }

    #[test]
    fn the_path_completes_the_base_as_the_reference_does() {
        assert_eq!(
            codex_path("https://chatgpt.com/backend-api"),
            "/codex/responses"
        );
        assert_eq!(codex_path("https://x/backend-api/codex/"), "/responses");
        assert_eq!(codex_path("https://x/codex/responses"), "");
    }

    #[test]
    fn text_that_comes_only_whole_is_read_and_bad_events_are_skipped() {
        let mut state = StreamState::default();
        let mut seen = Vec::new();
        let mut sink = |e: StreamEvent| seen.push(e);
        let sink: &mut (dyn FnMut(StreamEvent) + Send) = &mut sink;
        assert_eq!(state.on_data("not json", sink).unwrap(), None);
        let done = json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"type": "message", "content": [{"type": "output_text", "text": "Whole"}]}});
        assert_eq!(state.on_data(&done.to_string(), sink).unwrap(), None);
        assert_eq!(seen, vec![StreamEvent::TextDelta("Whole".into())]);
    }

    #[test]
    fn events_become_text_calls_usage_and_a_stop() {
        let mut state = StreamState::default();
        let mut seen = Vec::new();
        let mut sink = |e: StreamEvent| seen.push(e);
        let sink: &mut (dyn FnMut(StreamEvent) + Send) = &mut sink;
        let events = [
            json!({"type": "response.created", "response": {"id": "r"}}),
            json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Hi"}),
            json!({"type": "response.output_item.added", "output_index": 1,
                   "item": {"type": "function_call", "call_id": "c1", "name": "read", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{\"a\""}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": ":1}"}),
        ];
        for event in events {
            assert_eq!(state.on_data(&event.to_string(), sink).unwrap(), None);
        }
        let done = json!({"type": "response.completed", "response": {"status": "completed",
            "usage": {"input_tokens": 20, "output_tokens": 4,
                      "input_tokens_details": {"cached_tokens": 5}}}});
        assert_eq!(
            state.on_data(&done.to_string(), sink).unwrap(),
            Some(StopKind::EndTurn)
        );
        let failed = json!({"type": "response.failed", "response": {"error": {"message": "nope"}}});
        assert!(StreamState::default()
            .on_data(&failed.to_string(), sink)
            .is_err());
        assert_eq!(seen[0], StreamEvent::TextDelta("Hi".into()));
        assert_eq!(
            seen[1],
            StreamEvent::ToolCall(ToolCall {
                id: "c1".into(),
                name: "read".into(),
                arguments: json!({"a": 1}),
                signature: None,
            })
        );
        assert_eq!(
            seen[2],
            StreamEvent::Usage(Usage {
                input_tokens: 15,
                output_tokens: 4
            })
        );
    }
}
