//! Google's Generative Language API (`streamGenerateContent?alt=sse`): the
//! request body (roles `user` and `model`, function calls and responses as
//! parts, tool schemas cut down to the subset the API accepts), the
//! response stream read back (calls come whole and without ids, so ids are
//! made here), and the model list.

use reqwest::header::HeaderMap;
use serde_json::{json, Map, Value};

use super::transport::{secret_header, EventStream, Transport};
use super::{
    parse_event, u64_at, Endpoint, ErrorClass, Message, ModelInfo, ModelRequest, ProviderError,
    StopKind, StreamEvent, ToolCall, Usage, PROVIDER_SERVER_ERROR,
};

pub(super) async fn stream(
    transport: &Transport,
    endpoint: &Endpoint,
    request: &ModelRequest,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<StopKind, ProviderError> {
    let path = format!(
        "/models/{}:streamGenerateContent?alt=sse",
        model_path(&request.model)?
    );
    let url = transport.url(endpoint, &path)?;
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
    // 1000 is the API's largest page, far more than it offers.
    let url = transport.url(endpoint, "/models?pageSize=1000")?;
    let body = transport.get_json(url, headers(endpoint)?).await?;
    parse_models(&body)
}

fn headers(endpoint: &Endpoint) -> Result<HeaderMap, ProviderError> {
    let mut headers = HeaderMap::new();
    // In a header rather than `?key=`, so the key is in no URL that an
    // error or a proxy log could show.
    if let Some(key) = endpoint.api_key.as_deref().filter(|k| !k.is_empty()) {
        secret_header(&mut headers, "x-goog-api-key", key)?;
    }
    Ok(headers)
}

/// The model as a path segment: `models/` dropped when the caller kept it,
/// anything outside the characters model ids use percent-encoded so a
/// model name cannot reach another path.
fn model_path(model: &str) -> Result<String, ProviderError> {
    let model = model.strip_prefix("models/").unwrap_or(model);
    if model.is_empty() {
        return Err(ProviderError::bad_request("the request names no model"));
    }
    let mut path = String::with_capacity(model.len());
    for byte in model.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'_') {
            path.push(char::from(byte));
        } else {
            path.push_str(&format!("%{byte:02X}"));
        }
    }
    Ok(path)
}

/// What Google documents for a function call of the current turn that
/// has no signature of its own (history another model wrote): Gemini 3
/// refuses such a call without one.
pub(super) const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// The images a run of tool results showed, as a user content of their
/// own; returns the new seal (nothing merges into that content).
fn flush_images(
    contents: &mut Vec<(&'static str, Vec<Value>)>,
    shown: &mut Vec<Value>,
    sealed: usize,
) -> usize {
    if shown.is_empty() {
        return sealed;
    }
    let mut parts = vec![json!({"text": "Tool result image:"})];
    parts.append(shown);
    contents.push(("user", parts));
    contents.len()
}

pub(super) fn request_body(request: &ModelRequest) -> Value {
    // The current turn: everything after the last message the user wrote.
    // Its model steps must carry their signatures (Gemini 3 validates them).
    let turn_starts = request
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .map_or(0, |at| at + 1);
    // Gemini 3 takes a result's images inside its function response;
    // earlier models only in user content, which follows the run of
    // results that showed them, on its own.
    let images_inside = request.model.contains("gemini-3");
    let mut shown: Vec<Value> = Vec::new();
    // Contents before this index take no more parts.
    let mut sealed = 0;
    let mut contents: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (at, message) in request.messages.iter().enumerate() {
        if !matches!(message, Message::ToolResult { .. }) {
            sealed = flush_images(&mut contents, &mut shown, sealed);
        }
        let (role, parts) = match message {
            Message::User { text } => ("user", text_part(text).into_iter().collect()),
            Message::Assistant {
                text,
                tool_calls,
                signature,
            } => {
                let mut parts: Vec<Value> = text_part(text).into_iter().collect();
                if let (Some(part), Some(signature)) = (parts.first_mut(), signature) {
                    part["thoughtSignature"] = json!(signature);
                }
                for (n, call) in tool_calls.iter().enumerate() {
                    let args = match &call.arguments {
                        Value::Object(_) => call.arguments.clone(),
                        _ => json!({}),
                    };
                    let mut part = json!({"functionCall": {"name": call.name, "args": args}});
                    // Sent back in the part that carried it; the first call
                    // of a step in this turn must have one.
                    match &call.signature {
                        Some(signature) => part["thoughtSignature"] = json!(signature),
                        None if n == 0 && at >= turn_starts => {
                            part["thoughtSignature"] = json!(SKIP_SIGNATURE);
                        }
                        None => {}
                    }
                    parts.push(part);
                }
                ("model", parts)
            }
            Message::ToolResult {
                name,
                content,
                is_error,
                images,
                ..
            } => {
                // `response` must be an object; the key tells the model
                // whether the call failed.
                let key = if *is_error { "error" } else { "content" };
                let response = json!({ key: content });
                let mut part = json!({"functionResponse": {"name": name, "response": response}});
                let inline = images.iter().map(|image| {
                    json!({"inlineData": {"mimeType": image.mime_type, "data": image.data}})
                });
                if images_inside && !images.is_empty() {
                    part["functionResponse"]["parts"] = Value::Array(inline.collect());
                } else {
                    shown.extend(inline);
                }
                ("user", vec![part])
            }
        };
        if parts.is_empty() {
            continue;
        }
        let open = contents.len() > sealed;
        match contents.last_mut() {
            Some((last_role, last_parts)) if *last_role == role && open => last_parts.extend(parts),
            _ => contents.push((role, parts)),
        }
    }
    flush_images(&mut contents, &mut shown, sealed);
    let contents: Vec<Value> = contents
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect();
    let mut body = json!({
        "contents": contents,
        "generationConfig": {"maxOutputTokens": request.max_tokens},
    });
    if !request.system.is_empty() {
        body["systemInstruction"] = json!({"parts": [{"text": request.system}]});
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": sanitize_schema(&tool.parameters),
                })
            })
            .collect();
        body["tools"] = json!([{"functionDeclarations": declarations}]);
    }
    body
}

fn text_part(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"text": text}))
}

/// The formats the API accepts; it refuses a schema with any other.
const FORMATS: [&str; 6] = ["enum", "date-time", "int32", "int64", "float", "double"];

/// A JSON Schema cut down to the OpenAPI subset the API accepts: unknown
/// keywords (`additionalProperties`, `$schema`, `$ref`, `default`, …) are
/// dropped, a type list becomes one type plus `nullable`, `oneOf` becomes
/// `anyOf` and `const` a one-value `enum`. Property names are never taken
/// for keywords.
pub(super) fn sanitize_schema(schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        // `true` and the like: any value, which the API says as no schema.
        return json!({});
    };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "type" => match value {
                Value::String(_) => {
                    out.insert(key.clone(), value.clone());
                }
                Value::Array(types) => {
                    let named: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
                    if let Some(first) = named.iter().find(|t| **t != "null") {
                        out.insert("type".into(), json!(first));
                    }
                    if named.contains(&"null") {
                        out.insert("nullable".into(), json!(true));
                    }
                }
                _ => {}
            },
            "properties" => {
                if let Value::Object(properties) = value {
                    let cleaned: Map<String, Value> = properties
                        .iter()
                        .map(|(name, schema)| (name.clone(), sanitize_schema(schema)))
                        .collect();
                    out.insert(key.clone(), Value::Object(cleaned));
                }
            }
            "items" => {
                let item = match value {
                    // A tuple: the API has one item schema.
                    Value::Array(items) => items.first().cloned().unwrap_or(json!({})),
                    other => other.clone(),
                };
                out.insert(key.clone(), sanitize_schema(&item));
            }
            "anyOf" | "oneOf" => {
                if let Value::Array(options) = value {
                    out.insert(
                        "anyOf".into(),
                        Value::Array(options.iter().map(sanitize_schema).collect()),
                    );
                }
            }
            "allOf" => {
                // One schema wrapped in `allOf` is common output of schema
                // generators; a real intersection cannot be said.
                if let Some([only]) = value.as_array().map(Vec::as_slice) {
                    if let Value::Object(inner) = sanitize_schema(only) {
                        for (k, v) in inner {
                            out.entry(k).or_insert(v);
                        }
                    }
                }
            }
            "const" if value.is_string() => {
                out.insert("enum".into(), json!([value]));
            }
            "enum"
                if value
                    .as_array()
                    .is_some_and(|v| v.iter().all(Value::is_string)) =>
            {
                out.insert(key.clone(), value.clone());
            }
            "format" if value.as_str().is_some_and(|f| FORMATS.contains(&f)) => {
                out.insert(key.clone(), value.clone());
            }
            "description" | "title" | "nullable" | "required" | "minItems" | "maxItems"
            | "minimum" | "maximum" | "minLength" | "maxLength" | "pattern" | "minProperties"
            | "maxProperties" | "propertyOrdering" => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    Value::Object(out)
}

async fn read_stream(
    events: &mut EventStream,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<StopKind, ProviderError> {
    let mut state = StreamState::default();
    while let Some(event) = events.next().await? {
        state.on_data(&event.data, on_event)?;
    }
    // The API has no end marker: the body ends after the chunk carrying
    // the finish reason, and without one the answer was cut.
    if state.finish_reason.is_none() && !state.blocked {
        return Err(events.truncated());
    }
    state.finish(on_event)
}

#[derive(Default)]
pub(super) struct StreamState {
    called: bool,
    blocked: bool,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl StreamState {
    pub(super) fn on_data(
        &mut self,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError> {
        let chunk = parse_event(data)?;
        if let Some(error) = chunk.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            let status = error
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok());
            return Err(ProviderError::in_stream(status, message));
        }
        if let Some(usage) = chunk.get("usageMetadata") {
            // Totals so far: the last chunk's are the call's.
            self.usage = Some(Usage {
                input_tokens: u64_at(usage, "/promptTokenCount"),
                output_tokens: u64_at(usage, "/candidatesTokenCount")
                    + u64_at(usage, "/thoughtsTokenCount"),
            });
        }
        if chunk.pointer("/promptFeedback/blockReason").is_some() {
            self.blocked = true;
        }
        let Some(candidate) = chunk.pointer("/candidates/0") else {
            return Ok(());
        };
        let parts = candidate
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for part in parts {
            // Gemini's signature of its reasoning, on the part it belongs
            // to: a call keeps its own, any other part's goes with the text.
            let signature = part
                .get("thoughtSignature")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned);
            if let Some(call) = part.get("functionCall") {
                let name = call.get("name").and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    return Err(ProviderError::protocol("a function call has no name"));
                }
                let id = match call.get("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => id.to_owned(),
                    // Ids must be unique within the session, and the API
                    // gives none to number from.
                    _ => format!("call_{}", uuid::Uuid::new_v4().simple()),
                };
                self.called = true;
                on_event(StreamEvent::ToolCall(ToolCall {
                    id,
                    name: name.to_owned(),
                    arguments: call.get("args").cloned().unwrap_or_else(|| json!({})),
                    signature,
                }));
                continue;
            }
            let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
            if let Some(signature) = signature.filter(|_| !thought) {
                on_event(StreamEvent::TextSignature(signature));
            }
            let Some(text) = part.get("text").and_then(Value::as_str) else {
                continue;
            };
            if text.is_empty() {
                continue;
            }
            if thought {
                on_event(StreamEvent::ReasoningDelta(text.to_owned()));
            } else {
                on_event(StreamEvent::TextDelta(text.to_owned()));
            }
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(())
    }

    pub(super) fn finish(
        self,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<StopKind, ProviderError> {
        if let Some(usage) = self.usage {
            on_event(StreamEvent::Usage(usage));
        }
        if self.blocked {
            return Ok(StopKind::Refusal);
        }
        Ok(match self.finish_reason.as_deref() {
            Some("MAX_TOKENS") => StopKind::MaxTokens,
            Some(
                "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
                | "IMAGE_SAFETY" | "LANGUAGE",
            ) => StopKind::Refusal,
            Some(reason @ ("MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL")) => {
                // The model wrote a call that could not be read; another
                // sampling of the same request usually does better.
                return Err(ProviderError {
                    class: ErrorClass::Retryable,
                    status: None,
                    code: PROVIDER_SERVER_ERROR,
                    message: format!("the model's answer ended with {reason}"),
                    retry_after: None,
                    body: None,
                });
            }
            _ if self.called => StopKind::ToolUse,
            _ => StopKind::EndTurn,
        })
    }
}

pub(super) fn parse_models(body: &Value) -> Result<Vec<ModelInfo>, ProviderError> {
    let models = body
        .get("models")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ProviderError::protocol("the model list has no `models` array".to_owned())
        })?;
    Ok(models
        .iter()
        .filter(|model| {
            // Embedding and other models that cannot answer a chat.
            match model
                .get("supportedGenerationMethods")
                .and_then(Value::as_array)
            {
                Some(methods) => methods.iter().any(|m| m == "generateContent"),
                None => true,
            }
        })
        .filter_map(|model| {
            let full = model.get("name").and_then(Value::as_str)?;
            let id = full.strip_prefix("models/").unwrap_or(full);
            let name = model
                .get("displayName")
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
    fn a_shown_image_follows_the_results_or_goes_inside_for_gemini_3() {
        let body = request_body(&crate::builtin::provider::image_conversation(
            "gemini-2.5-flash",
        ));
        let contents = body["contents"].as_array().unwrap();
        assert_eq!(contents.len(), 5, "{contents:?}");
        assert_eq!(contents[2]["parts"].as_array().unwrap().len(), 2);
        assert!(contents[2]["parts"][0]["functionResponse"]
            .get("parts")
            .is_none());
        assert_eq!(
            contents[3],
            json!({"role": "user", "parts": [
                {"text": "Tool result image:"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}},
            ]})
        );
        assert_eq!(
            contents[4],
            json!({"role": "user", "parts": [{"text": "and?"}]})
        );

        let body = request_body(&crate::builtin::provider::image_conversation(
            "gemini-3-pro-preview",
        ));
        let contents = body["contents"].as_array().unwrap();
        assert_eq!(contents.len(), 3, "{contents:?}");
        assert_eq!(
            contents[2]["parts"][0]["functionResponse"]["parts"],
            json!([{"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}}])
        );
        assert_eq!(contents[2]["parts"][2], json!({"text": "and?"}));
    }

    #[test]
    fn schemas_lose_what_the_api_refuses_but_keep_property_names() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "additionalProperties": {"type": "string", "format": "uri"},
                "when": {"type": "string", "format": "date-time", "default": "now"},
                "maybe": {"type": ["integer", "null"]},
                "kind": {"const": "a"},
                "list": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string"}}},
                "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            },
            "required": ["when"],
        });
        let cleaned = sanitize_schema(&schema);
        assert_eq!(
            cleaned,
            json!({
                "type": "object",
                "properties": {
                    "additionalProperties": {"type": "string"},
                    "when": {"type": "string", "format": "date-time"},
                    "maybe": {"type": "integer", "nullable": true},
                    "kind": {"enum": ["a"]},
                    "list": {"type": "array", "items": {"type": "object"}},
                    "either": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                },
                "required": ["when"],
            })
        );
    }

    #[test]
    fn an_unsigned_first_call_of_this_turn_says_so_and_older_ones_go_as_they_are() {
        let call = |id: &str, signature: Option<&str>| ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: json!({"address": id}),
            signature: signature.map(str::to_owned),
        };
        let step = |calls: Vec<ToolCall>| Message::Assistant {
            text: String::new(),
            tool_calls: calls,
            signature: None,
        };
        let result = |id: &str| Message::ToolResult {
            call_id: id.into(),
            name: "read".into(),
            content: "x".into(),
            is_error: false,
            images: vec![],
        };
        let user = |text: &str| Message::User { text: text.into() };
        let request = ModelRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![
                user("earlier"),
                step(vec![call("old", None)]),
                result("old"),
                user("now"),
                step(vec![call("a", None), call("b", None)]),
                result("a"),
                result("b"),
                step(vec![call("c", Some("sig-c"))]),
                result("c"),
            ],
            tools: vec![],
            max_tokens: 10,
            cache_key: None,
            rendered: Default::default(),
        };
        let body = request_body(&request);
        let signature_of = |content: usize, part: usize| {
            body["contents"][content]["parts"][part]
                .get("thoughtSignature")
                .cloned()
        };
        // Contents: the user, the old call, its result and "now" (one
        // user content), this turn's steps and their results.
        assert_eq!(signature_of(1, 0), None, "a call of an earlier turn");
        assert_eq!(signature_of(3, 0), Some(json!(SKIP_SIGNATURE)));
        assert_eq!(signature_of(3, 1), None, "only a step's first call");
        assert_eq!(signature_of(5, 0), Some(json!("sig-c")));
    }

    #[test]
    fn signatures_are_read_from_the_parts_that_carry_them() {
        let mut state = StreamState::default();
        let mut seen = Vec::new();
        let mut sink = |e: StreamEvent| seen.push(e);
        let data = r#"{"candidates":[{"content":{"parts":[
            {"text":"thinking","thought":true,"thoughtSignature":"ignored"},
            {"functionCall":{"name":"read","args":{}},"thoughtSignature":"sig-1"},
            {"functionCall":{"name":"read","args":{"b":1}}},
            {"text":"","thoughtSignature":"sig-text"}
        ]},"finishReason":"STOP"}]}"#;
        state.on_data(data, &mut sink).unwrap();
        let signatures: Vec<Option<String>> = seen
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCall(c) => Some(c.signature.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(signatures, [Some("sig-1".into()), None]);
        assert!(seen.contains(&StreamEvent::TextSignature("sig-text".into())));
        assert!(!seen.contains(&StreamEvent::TextSignature("ignored".into())));
    }

    #[test]
    fn model_path_is_one_segment() {
        assert_eq!(
            model_path("models/gemini-2.5-flash").unwrap(),
            "gemini-2.5-flash"
        );
        assert_eq!(model_path("a/../b?x").unwrap(), "a%2F..%2Fb%3Fx");
        assert!(model_path("").is_err());
    }

    #[test]
    fn finish_reasons_map_to_stop_kinds() {
        for (reason, expected) in [
            ("STOP", Ok(StopKind::EndTurn)),
            ("MAX_TOKENS", Ok(StopKind::MaxTokens)),
            ("SAFETY", Ok(StopKind::Refusal)),
            ("MALFORMED_FUNCTION_CALL", Err(ErrorClass::Retryable)),
        ] {
            let mut state = StreamState::default();
            let mut sink = |_e: StreamEvent| {};
            let data = format!(
                r#"{{"candidates":[{{"content":{{"parts":[{{"text":"x"}}]}},"finishReason":"{reason}"}}]}}"#
            );
            state.on_data(&data, &mut sink).unwrap();
            assert_eq!(
                state.finish(&mut sink).map_err(|e| e.class),
                expected,
                "{reason}"
            );
        }
    }

    #[test]
    fn a_blocked_prompt_is_a_refusal() {
        let mut state = StreamState::default();
        let mut sink = |_e: StreamEvent| {};
        state
            .on_data(r#"{"promptFeedback":{"blockReason":"SAFETY"}}"#, &mut sink)
            .unwrap();
        assert_eq!(state.finish(&mut sink), Ok(StopKind::Refusal));
    }

    #[test]
    fn model_list_drops_the_prefix_and_non_chat_models() {
        let body = json!({"models": [
            {"name": "models/gemini-x", "displayName": "Gemini X", "supportedGenerationMethods": ["generateContent"]},
            {"name": "models/embed", "supportedGenerationMethods": ["embedContent"]},
        ]});
        assert_eq!(
            parse_models(&body).unwrap(),
            vec![ModelInfo {
                id: "gemini-x".into(),
                name: "Gemini X".into()
            }]
        );
    }
}
