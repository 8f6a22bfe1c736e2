//! Anthropic's messages API: the request body (system prompt at the top,
//! tool calls and results as content blocks, consecutive turns of one role
//! merged because the API wants them to alternate), the typed event stream
//! read back, and the model list.

use std::collections::BTreeMap;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use super::transport::{plain_header, secret_header, EventStream, Transport};
use super::{
    parse_arguments, parse_event, u64_at, Endpoint, Message, ModelInfo, ModelRequest,
    ProviderError, StopKind, StreamEvent, ToolCall, Usage,
};

const API_VERSION: &str = "2023-06-01";

pub(super) async fn stream(
    transport: &Transport,
    endpoint: &Endpoint,
    request: &ModelRequest,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<StopKind, ProviderError> {
    let url = transport.url(endpoint, "/v1/messages")?;
    let body = request_body(request);
    let mut events = transport
        .post_stream(url, headers(endpoint)?, &body)
        .await?;
    read_stream(&mut events, on_event).await
}

pub(super) async fn list_models(
    transport: &Transport,
    endpoint: &Endpoint,
) -> Result<Vec<ModelInfo>, ProviderError> {
    // The API pages by 20 unless asked for more; 1000 is its maximum and
    // far more models than it offers.
    let url = transport.url(endpoint, "/v1/models?limit=1000")?;
    let body = transport.get_json(url, headers(endpoint)?).await?;
    parse_models(&body)
}

fn headers(endpoint: &Endpoint) -> Result<HeaderMap, ProviderError> {
    let mut headers = HeaderMap::new();
    if let Some(key) = endpoint.api_key.as_deref().filter(|k| !k.is_empty()) {
        secret_header(&mut headers, "x-api-key", key)?;
    }
    plain_header(&mut headers, "anthropic-version", API_VERSION);
    Ok(headers)
}

pub(super) fn request_body(request: &ModelRequest) -> Value {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in &request.messages {
        let (role, blocks) = match message {
            Message::User { text } => ("user", text_block(text).into_iter().collect()),
            Message::Assistant {
                text, tool_calls, ..
            } => {
                let mut blocks: Vec<Value> = text_block(text).into_iter().collect();
                for call in tool_calls {
                    // `input` must be an object; arguments kept as text
                    // because they did not parse cannot be one.
                    let input = match &call.arguments {
                        Value::Object(_) => call.arguments.clone(),
                        _ => json!({}),
                    };
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": input,
                    }));
                }
                ("assistant", blocks)
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
                images,
                ..
            } => {
                // Images go inside the result, after its text.
                let content = if images.is_empty() {
                    json!(content)
                } else {
                    let mut blocks = vec![json!({"type": "text", "text": content})];
                    blocks.extend(images.iter().map(|image| {
                        json!({"type": "image", "source": {
                            "type": "base64",
                            "media_type": image.mime_type,
                            "data": image.data,
                        }})
                    }));
                    Value::Array(blocks)
                };
                (
                    "user",
                    vec![json!({
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": content,
                        "is_error": is_error,
                    })],
                )
            }
        };
        // The API refuses an empty turn; an empty message adds nothing.
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "stream": true,
        "messages": messages,
    });
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                })
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    body
}

/// The API refuses empty text blocks.
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

async fn read_stream(
    events: &mut EventStream,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<StopKind, ProviderError> {
    let mut state = StreamState::default();
    while let Some(event) = events.next().await? {
        if state.on_event(&event.event, &event.data, on_event)? {
            return Ok(state.finish(on_event));
        }
    }
    Err(events.truncated())
}

enum Block {
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
    /// Text and thinking are forwarded delta by delta; nothing is kept.
    Streamed,
}

#[derive(Default)]
pub(super) struct StreamState {
    blocks: BTreeMap<u64, Block>,
    called: bool,
    stop_reason: Option<String>,
    usage: Usage,
    saw_usage: bool,
}

impl StreamState {
    /// Reads one event; true at `message_stop`.
    pub(super) fn on_event(
        &mut self,
        name: &str,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<bool, ProviderError> {
        let value = parse_event(data)?;
        // Each event's data names its own type; the SSE name is the same
        // word and only a fallback.
        let kind = value.get("type").and_then(Value::as_str).unwrap_or(name);
        match kind {
            "message_start" => {
                if let Some(usage) = value.pointer("/message/usage") {
                    self.read_usage(usage);
                }
            }
            "content_block_start" => {
                let index = u64_at(&value, "/index");
                let block = value.get("content_block").unwrap_or(&Value::Null);
                let entry = match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => Block::ToolUse {
                        id: str_at(block, "id"),
                        name: str_at(block, "name"),
                        input: String::new(),
                    },
                    _ => Block::Streamed,
                };
                self.blocks.insert(index, entry);
            }
            "content_block_delta" => {
                let index = u64_at(&value, "/index");
                let delta = value.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = str_at(delta, "text");
                        if !text.is_empty() {
                            on_event(StreamEvent::TextDelta(text));
                        }
                    }
                    Some("thinking_delta") => {
                        let text = str_at(delta, "thinking");
                        if !text.is_empty() {
                            on_event(StreamEvent::ReasoningDelta(text));
                        }
                    }
                    Some("input_json_delta") => match self.blocks.get_mut(&index) {
                        Some(Block::ToolUse { input, .. }) => {
                            input.push_str(
                                delta
                                    .get("partial_json")
                                    .and_then(Value::as_str)
                                    .unwrap_or(""),
                            );
                        }
                        _ => {
                            return Err(ProviderError::protocol(format!(
                                "tool input for block {index}, which is not a tool call"
                            )))
                        }
                    },
                    // Signatures and citations do not reach the agent.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = u64_at(&value, "/index");
                if let Some(Block::ToolUse { id, name, input }) = self.blocks.remove(&index) {
                    if name.is_empty() || id.is_empty() {
                        return Err(ProviderError::protocol(format!(
                            "tool call block {index} has no id or name"
                        )));
                    }
                    self.called = true;
                    on_event(StreamEvent::ToolCall(ToolCall {
                        id,
                        name,
                        arguments: parse_arguments(&input),
                        signature: None,
                    }));
                }
            }
            "message_delta" => {
                if let Some(reason) = value.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = value.get("usage") {
                    self.read_usage(usage);
                }
            }
            "message_stop" => return Ok(true),
            "error" => return Err(stream_error(&value)),
            // `ping`, and event types added later.
            _ => {}
        }
        Ok(false)
    }

    /// Usage counts are running totals: the largest of each wins (a later
    /// event may leave a count out or report it as zero). Input
    /// read from or written to the prompt cache is input all the same.
    fn read_usage(&mut self, usage: &Value) {
        let input: Option<u64> = [
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ]
        .iter()
        .filter_map(|field| usage.get(field).and_then(Value::as_u64))
        .reduce(|a, b| a + b);
        if let Some(input) = input {
            self.usage.input_tokens = self.usage.input_tokens.max(input);
            self.saw_usage = true;
        }
        if let Some(output) = usage.get("output_tokens").and_then(Value::as_u64) {
            self.usage.output_tokens = self.usage.output_tokens.max(output);
            self.saw_usage = true;
        }
    }

    pub(super) fn finish(self, on_event: &mut (dyn FnMut(StreamEvent) + Send)) -> StopKind {
        if self.saw_usage {
            on_event(StreamEvent::Usage(self.usage));
        }
        match self.stop_reason.as_deref() {
            Some("max_tokens") | Some("model_context_window_exceeded") => StopKind::MaxTokens,
            Some("refusal") => StopKind::Refusal,
            Some("tool_use") => StopKind::ToolUse,
            _ if self.called => StopKind::ToolUse,
            _ => StopKind::EndTurn,
        }
    }
}

fn str_at(value: &Value, field: &str) -> String {
    value
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// An `error` event, classified by its type as the matching HTTP status
/// would be.
fn stream_error(value: &Value) -> ProviderError {
    let kind = value
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let message = value
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("no message");
    let status = match kind {
        "invalid_request_error" => Some(400),
        "authentication_error" => Some(401),
        "billing_error" => Some(402),
        "permission_error" => Some(403),
        "not_found_error" => Some(404),
        "request_too_large" => Some(413),
        "rate_limit_error" => Some(429),
        "api_error" => Some(500),
        "timeout_error" => Some(504),
        "overloaded_error" => Some(529),
        _ => None,
    };
    let message = if kind.is_empty() {
        message.to_owned()
    } else {
        format!("{kind}: {message}")
    };
    ProviderError::in_stream(status, &message)
}

pub(super) fn parse_models(body: &Value) -> Result<Vec<ModelInfo>, ProviderError> {
    let data = body
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::protocol("the model list has no `data` array".to_owned()))?;
    Ok(data
        .iter()
        .filter_map(|model| {
            let id = model.get("id").and_then(Value::as_str)?;
            let name = model
                .get("display_name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(id);
            Some(ModelInfo {
                id: id.to_owned(),
                name: name.to_owned(),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_image_goes_inside_its_tool_result() {
        let body = request_body(&crate::builtin::provider::image_conversation(
            "claude-sonnet-4-5",
        ));
        let user = &body["messages"][2];
        assert_eq!(user["role"], "user");
        assert_eq!(
            user["content"][0]["content"],
            json!([
                {"type": "text", "text": "result a"},
                {"type": "image", "source": {
                    "type": "base64", "media_type": "image/png", "data": "iVBORw0K",
                }},
            ])
        );
        assert_eq!(user["content"][1]["content"], "result b");
        assert_eq!(user["content"][2], json!({"type": "text", "text": "and?"}));
    }
    use crate::builtin::provider::{ErrorClass, PROVIDER_AUTH};

    #[test]
    fn consecutive_turns_of_one_role_are_merged() {
        let request = ModelRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![
                Message::User { text: "go".into() },
                Message::Assistant {
                    text: "calling".into(),
                    tool_calls: vec![
                        ToolCall {
                            id: "a".into(),
                            name: "x".into(),
                            arguments: json!({}),
                            signature: None,
                        },
                        ToolCall {
                            id: "b".into(),
                            name: "y".into(),
                            arguments: json!("{bad"),
                            signature: None,
                        },
                    ],
                    signature: None,
                },
                Message::ToolResult {
                    call_id: "a".into(),
                    name: "x".into(),
                    content: "1".into(),
                    is_error: false,
                    images: vec![],
                },
                Message::ToolResult {
                    call_id: "b".into(),
                    name: "y".into(),
                    content: "2".into(),
                    is_error: true,
                    images: vec![],
                },
                Message::User {
                    text: "and?".into(),
                },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![],
                    signature: None,
                },
            ],
            tools: vec![],
            max_tokens: 10,
            cache_key: None,
            rendered: Default::default(),
        };
        let body = request_body(&request);
        assert!(body.get("system").is_none());
        assert!(body.get("tools").is_none());
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][2]["input"], json!({}));
        assert_eq!(messages[2]["role"], "user");
        let blocks = messages[2]["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[1]["is_error"], true);
        assert_eq!(blocks[2], json!({"type": "text", "text": "and?"}));
    }

    #[test]
    fn error_events_are_classified_by_type() {
        let overloaded = stream_error(
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        );
        assert_eq!(overloaded.class, ErrorClass::Retryable);
        assert!(overloaded.message.contains("Overloaded"));
        let api = stream_error(&json!({"error": {"type": "api_error", "message": "x"}}));
        assert_eq!(api.class, ErrorClass::Retryable);
        let auth =
            stream_error(&json!({"error": {"type": "authentication_error", "message": "x"}}));
        assert_eq!(
            (auth.class, auth.code),
            (ErrorClass::Configuration, PROVIDER_AUTH)
        );
    }

    #[test]
    fn input_json_for_a_text_block_is_a_protocol_error() {
        let mut state = StreamState::default();
        let mut sink = |_e: StreamEvent| {};
        state
            .on_event("", r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#, &mut sink)
            .unwrap();
        let error = state
            .on_event("", r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#, &mut sink)
            .unwrap_err();
        assert_eq!(error.code, crate::builtin::provider::PROVIDER_PROTOCOL);
    }

    #[test]
    fn model_list_uses_display_names() {
        let models = parse_models(
            &json!({"data": [{"id": "claude-x", "display_name": "Claude X"}, {"id": "y"}]}),
        )
        .unwrap();
        assert_eq!(
            models[0],
            ModelInfo {
                id: "claude-x".into(),
                name: "Claude X".into()
            }
        );
        assert_eq!(models[1].name, "y");
    }
}
