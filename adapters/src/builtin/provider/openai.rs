//! OpenAI chat completions, which OpenAI and every OpenAI-compatible
//! server (Ollama, OpenRouter, vLLM, …) speak: the request body, the chunk
//! stream read back (tool calls arrive as fragments keyed by index and are
//! handed over whole at the finish), and the model list.

use std::collections::BTreeMap;

use agentos_protocol::agent_ext::ImagePart;
use reqwest::header::HeaderMap;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::transport::{secret_header, EventStream, Transport};
use super::{
    parse_arguments, parse_event, u64_at, Endpoint, Message, ModelInfo, ModelRequest,
    ProviderError, ProviderKind, StopKind, StreamEvent, ToolCall, Usage,
};

pub(super) async fn stream(
    transport: &Transport,
    endpoint: &Endpoint,
    request: &ModelRequest,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<StopKind, ProviderError> {
    let url = transport.url(endpoint, "/chat/completions")?;
    let mut events = transport
        .post_stream(url, headers(endpoint)?, &body(endpoint.kind, request))
        .await?;
    read_stream(&mut events, on_event).await
}

pub(super) async fn list_models(
    transport: &Transport,
    endpoint: &Endpoint,
) -> Result<Vec<ModelInfo>, ProviderError> {
    let url = transport.url(endpoint, "/models")?;
    let body = transport.get_json(url, headers(endpoint)?).await?;
    parse_models(&body)
}

fn headers(endpoint: &Endpoint) -> Result<HeaderMap, ProviderError> {
    let mut headers = HeaderMap::new();
    // Local servers (Ollama, vLLM) take no key; an empty one is none.
    if let Some(key) = endpoint.api_key.as_deref().filter(|k| !k.is_empty()) {
        secret_header(&mut headers, "authorization", &format!("Bearer {key}"))?;
    }
    Ok(headers)
}

/// The request body. It is written straight from the request, without a
/// JSON tree in between: a long conversation costs one pass over it.
pub(super) struct Body<'a> {
    kind: ProviderKind,
    request: &'a ModelRequest,
}

pub(super) fn body(kind: ProviderKind, request: &ModelRequest) -> Body<'_> {
    Body { kind, request }
}

/// The body as a JSON value, for the tests that read it.
#[cfg(test)]
pub(super) fn request_body(kind: ProviderKind, request: &ModelRequest) -> Value {
    serde_json::to_value(body(kind, request)).unwrap_or(Value::Null)
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = self.request;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("model", &request.model)?;
        map.serialize_entry("messages", &Messages(request))?;
        map.serialize_entry("stream", &true)?;
        map.serialize_entry("stream_options", &StreamOptions)?;
        // OpenAI's reasoning models refuse `max_tokens`; compatible servers
        // mostly know only `max_tokens`.
        let max_tokens_field = match self.kind {
            ProviderKind::OpenAi => "max_completion_tokens",
            _ => "max_tokens",
        };
        map.serialize_entry(max_tokens_field, &request.max_tokens)?;
        if !request.tools.is_empty() {
            map.serialize_entry("tools", &Tools(&request.tools))?;
        }
        map.end()
    }
}

struct StreamOptions;

impl Serialize for StreamOptions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("include_usage", &true)?;
        map.end()
    }
}

struct Tools<'a>(&'a [super::ToolSpec]);

/// Each tool as a function, written from the spec (its schema is not
/// copied into a new JSON tree at every call).
impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(Function))
    }
}

struct Function<'a>(&'a super::ToolSpec);

impl Serialize for Function<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Spec<'a>(&'a super::ToolSpec);
        impl Serialize for Spec<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("description", &self.0.description)?;
                map.serialize_entry("name", &self.0.name)?;
                map.serialize_entry("parameters", &self.0.parameters)?;
                map.end()
            }
        }
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("function", &Spec(self.0))?;
        map.serialize_entry("type", "function")?;
        map.end()
    }
}

/// The conversation as chat messages. Chat completions take images only in
/// user messages: those a run of tool results showed follow it in one.
/// A message the request holds already written (`Rendered`) is copied in.
struct Messages<'a>(&'a ModelRequest);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = self.0;
        let mut seq = serializer.serialize_seq(None)?;
        if !request.system.is_empty() {
            seq.serialize_element(&Plain {
                role: "system",
                content: &request.system,
            })?;
        }
        let written = request.rendered.0.as_slice();
        let mut shown: Vec<&ImagePart> = Vec::new();
        for (at, message) in request.messages.iter().enumerate() {
            if !matches!(message, Message::ToolResult { .. }) && !shown.is_empty() {
                seq.serialize_element(&Shown(&std::mem::take(&mut shown)))?;
            }
            match written.get(at) {
                Some(value) => seq.serialize_element(value)?,
                None => seq.serialize_element(&Element(message))?,
            }
            if let Message::ToolResult { images, .. } = message {
                shown.extend(images);
            }
        }
        if !shown.is_empty() {
            seq.serialize_element(&Shown(&shown))?;
        }
        seq.end()
    }
}

/// The leading messages of a conversation in chat completions' form, one
/// JSON value each, written once and copied into every request that
/// resends them: a session's turns resend its whole conversation, which
/// would otherwise be escaped and written again at every model call.
///
/// It holds the form of `messages[..len]` of the request it goes with; the
/// builtin agent extends it only over messages no later turn changes (the
/// held part of the conversation), and never over one that shows images,
/// whose text depends on them while the turn may drop them.
#[derive(Clone, Default)]
pub struct Rendered(Vec<Box<RawValue>>, usize);

impl Rendered {
    /// Writes the messages after those already written, up to the end of
    /// `messages` or the first that shows images.
    pub fn extend(&mut self, messages: &[Message]) {
        for message in messages.iter().skip(self.0.len()) {
            if matches!(message, Message::ToolResult { images, .. } if !images.is_empty()) {
                return;
            }
            match serde_json::value::to_raw_value(&Element(message)) {
                Ok(value) => {
                    self.1 += value.get().len();
                    self.0.push(value);
                }
                Err(_) => return,
            }
        }
    }

    /// How many leading messages are written.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes of the written form.
    pub fn bytes(&self) -> usize {
        self.1
    }

    /// Forgets the written form of messages from `len` on.
    pub fn truncate(&mut self, len: usize) {
        for value in self.0.iter().skip(len) {
            self.1 -= value.get().len();
        }
        self.0.truncate(len);
    }
}

impl std::fmt::Debug for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rendered({} messages)", self.0.len())
    }
}

/// One message as its chat completions value.
struct Element<'a>(&'a Message);

impl Serialize for Element<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Message::User { text } => Plain {
                role: "user",
                content: text,
            }
            .serialize(serializer),
            Message::Assistant {
                text, tool_calls, ..
            } => Assistant { text, tool_calls }.serialize(serializer),
            Message::ToolResult {
                call_id,
                content,
                is_error,
                images,
                ..
            } => ToolMessage {
                call_id,
                content,
                is_error: *is_error,
                with_images: !images.is_empty(),
            }
            .serialize(serializer),
        }
    }
}

struct Plain<'a> {
    role: &'static str,
    content: &'a str,
}

impl Serialize for Plain<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", self.role)?;
        map.serialize_entry("content", self.content)?;
        map.end()
    }
}

struct Assistant<'a> {
    text: &'a str,
    tool_calls: &'a [ToolCall],
}

impl Serialize for Assistant<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("role", "assistant")?;
        if self.text.is_empty() && !self.tool_calls.is_empty() {
            map.serialize_entry("content", &())?;
        } else {
            map.serialize_entry("content", self.text)?;
        }
        if !self.tool_calls.is_empty() {
            map.serialize_entry("tool_calls", &Calls(self.tool_calls))?;
        }
        map.end()
    }
}

struct Calls<'a>(&'a [ToolCall]);

impl Serialize for Calls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(Call))
    }
}

struct Call<'a>(&'a ToolCall);

impl Serialize for Call<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Named<'a>(&'a ToolCall);
        impl Serialize for Named<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("arguments", &arguments_text(&self.0.arguments))?;
                map.serialize_entry("name", &self.0.name)?;
                map.end()
            }
        }
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("function", &Named(self.0))?;
        map.serialize_entry("id", &self.0.id)?;
        map.serialize_entry("type", "function")?;
        map.end()
    }
}

struct ToolMessage<'a> {
    call_id: &'a str,
    content: &'a str,
    is_error: bool,
    with_images: bool,
}

impl Serialize for ToolMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("role", "tool")?;
        map.serialize_entry("tool_call_id", self.call_id)?;
        // The API has no error flag on a tool message; the model learns of
        // the failure from the text.
        if self.is_error {
            map.serialize_entry("content", &format_args!("Error: {}", self.content))?;
        } else if self.content.is_empty() && self.with_images {
            map.serialize_entry("content", "(see attached image)")?;
        } else {
            map.serialize_entry("content", self.content)?;
        }
        map.end()
    }
}

/// The images tool results showed, as the user message that follows them.
struct Shown<'a>(&'a [&'a ImagePart]);

impl Serialize for Shown<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut content =
            vec![json!({"type": "text", "text": "Attached image(s) from tool result:"})];
        content.extend(self.0.iter().map(|image| {
            json!({"type": "image_url", "image_url": {
                "url": format!("data:{};base64,{}", image.mime_type, image.data),
            }})
        }));
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", "user")?;
        map.serialize_entry("content", &content)?;
        map.end()
    }
}

/// Arguments as the API carries them: a JSON text. Text kept because it
/// did not parse goes back as the model wrote it.
pub(super) fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

async fn read_stream(
    events: &mut EventStream,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<StopKind, ProviderError> {
    let mut state = StreamState::default();
    loop {
        match events.next().await? {
            Some(event) => {
                if state.on_data(&event.data, on_event)? {
                    return state.finish(on_event);
                }
            }
            // Some compatible servers end the body after the finish
            // without `[DONE]`; without a finish the answer was cut.
            None if state.finish_reason.is_some() => return state.finish(on_event),
            None => return Err(events.truncated()),
        }
    }
}

/// The members of a chunk that are read, each as its text in the event
/// (`null` reads as absent, as it does on values).
#[derive(serde::Deserialize)]
struct RawChunk<'a> {
    #[serde(borrow, default)]
    error: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    usage: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    choices: Option<Vec<RawChoice<'a>>>,
}

#[derive(serde::Deserialize)]
struct RawChoice<'a> {
    #[serde(borrow, default)]
    index: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    delta: Option<RawDelta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<&'a serde_json::value::RawValue>,
}

#[derive(serde::Deserialize)]
struct RawDelta<'a> {
    #[serde(borrow, default)]
    reasoning_content: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    reasoning: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    content: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    refusal: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a serde_json::value::RawValue>,
}

/// A member's text when it is a non-empty string (anything else is no text,
/// as on values).
fn text_of(raw: &serde_json::value::RawValue) -> Option<String> {
    serde_json::from_str::<String>(raw.get())
        .ok()
        .filter(|text| !text.is_empty())
}

/// A tool call being assembled from its fragments.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
pub(super) struct StreamState {
    calls: BTreeMap<u64, PartialCall>,
    calls_emitted: bool,
    finish_reason: Option<String>,
    refused: bool,
    usage: Option<Usage>,
}

impl StreamState {
    /// Reads one event's data; true once `[DONE]` ends the stream.
    pub(super) fn on_data(
        &mut self,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<bool, ProviderError> {
        if data.trim() == "[DONE]" {
            return Ok(true);
        }
        // Most chunks carry one text delta: their members are read in place,
        // each decoded only when it is used. A chunk that shape does not
        // take (a duplicate member, a `choices` that is no list of objects)
        // is read whole, as before.
        if let Ok(chunk) = serde_json::from_str::<RawChunk<'_>>(data) {
            return self.on_raw(&chunk, on_event).map(|()| false);
        }
        let chunk = parse_event(data)?;
        self.on_chunk(&chunk, on_event).map(|()| false)
    }

    /// A chunk read in place: the same steps as [`StreamState::on_chunk`].
    fn on_raw(
        &mut self,
        chunk: &RawChunk<'_>,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError> {
        if chunk.error.is_some() || chunk.usage.is_some() {
            // Once a stream at most: the whole chunk's rules, on values.
            let mut whole = serde_json::Map::new();
            for (key, raw) in [("error", chunk.error), ("usage", chunk.usage)] {
                if let Some(raw) = raw {
                    whole.insert(key.to_owned(), parse_event(raw.get())?);
                }
            }
            self.on_chunk(&Value::Object(whole), on_event)?;
        }
        let Some(choices) = &chunk.choices else {
            return Ok(());
        };
        let index = |choice: &RawChoice<'_>| {
            choice
                .index
                .map_or(0, |raw| raw.get().parse::<u64>().unwrap_or(0))
        };
        let Some(choice) = choices.iter().find(|choice| index(choice) == 0) else {
            return Ok(());
        };
        if let Some(delta) = &choice.delta {
            for raw in [delta.reasoning_content, delta.reasoning]
                .into_iter()
                .flatten()
            {
                if let Some(text) = text_of(raw) {
                    on_event(StreamEvent::ReasoningDelta(text));
                }
            }
            if let Some(text) = delta.content.and_then(text_of) {
                on_event(StreamEvent::TextDelta(text));
            }
            if let Some(text) = delta.refusal.and_then(text_of) {
                self.refused = true;
                on_event(StreamEvent::TextDelta(text));
            }
            if let Some(raw) = delta.tool_calls {
                self.on_tool_calls(&parse_event(raw.get())?);
            }
        }
        if let Some(reason) = choice
            .finish_reason
            .and_then(|raw| serde_json::from_str::<std::borrow::Cow<'_, str>>(raw.get()).ok())
        {
            self.finish_reason = Some(reason.into_owned());
            self.emit_calls(on_event)?;
        }
        Ok(())
    }

    /// A chunk read whole.
    fn on_chunk(
        &mut self,
        chunk: &Value,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError> {
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| error.as_str())
                .unwrap_or("no message");
            let status = error
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok());
            return Err(ProviderError::in_stream(status, message));
        }
        if chunk.get("usage").is_some_and(Value::is_object) {
            self.usage = Some(Usage {
                input_tokens: u64_at(chunk, "/usage/prompt_tokens"),
                output_tokens: u64_at(chunk, "/usage/completion_tokens"),
            });
        }
        let choices = chunk.get("choices").and_then(Value::as_array);
        // One completion is asked for: the choice of index 0.
        let Some(choice) = choices.and_then(|c| {
            c.iter()
                .find(|choice| choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        }) else {
            return Ok(());
        };
        if let Some(delta) = choice.get("delta") {
            self.on_delta(delta, on_event)?;
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
            self.emit_calls(on_event)?;
        }
        Ok(())
    }

    fn on_delta(
        &mut self,
        delta: &Value,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError> {
        for field in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta.get(field).and_then(Value::as_str) {
                if !text.is_empty() {
                    on_event(StreamEvent::ReasoningDelta(text.to_owned()));
                }
            }
        }
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            if !text.is_empty() {
                on_event(StreamEvent::TextDelta(text.to_owned()));
            }
        }
        if let Some(text) = delta.get("refusal").and_then(Value::as_str) {
            if !text.is_empty() {
                self.refused = true;
                on_event(StreamEvent::TextDelta(text.to_owned()));
            }
        }
        if let Some(calls) = delta.get("tool_calls") {
            self.on_tool_calls(calls);
        }
        Ok(())
    }

    /// A delta's `tool_calls` fragments, added to the calls being built.
    fn on_tool_calls(&mut self, calls: &Value) {
        let Some(fragments) = calls.as_array() else {
            return;
        };
        for fragment in fragments {
            let index = match fragment.get("index").and_then(Value::as_u64) {
                Some(index) => index,
                // Servers that omit the index send each call whole, or
                // continue the last one without an id.
                None => {
                    let last = self.calls.keys().next_back().copied();
                    match (fragment.get("id").and_then(Value::as_str), last) {
                        (None, Some(last)) => last,
                        (Some(id), Some(last)) if self.calls[&last].id == id => last,
                        (_, last) => last.map_or(0, |l| l.saturating_add(1)),
                    }
                }
            };
            let call = self.calls.entry(index).or_default();
            if let Some(id) = fragment.get("id").and_then(Value::as_str) {
                if !id.is_empty() {
                    call.id = id.to_owned();
                }
            }
            if let Some(function) = fragment.get("function") {
                if let Some(name) = function.get("name").and_then(Value::as_str) {
                    call.name.push_str(name);
                }
                if let Some(arguments) = function.get("arguments") {
                    match arguments {
                        Value::String(text) => call.arguments.push_str(text),
                        // A few servers send the arguments as an object.
                        Value::Object(_) => call.arguments.push_str(&arguments.to_string()),
                        _ => {}
                    }
                }
            }
        }
    }

    fn emit_calls(
        &mut self,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError> {
        if self.calls_emitted {
            return Ok(());
        }
        self.calls_emitted = true;
        for (index, call) in &self.calls {
            if call.name.is_empty() {
                return Err(ProviderError::protocol(format!(
                    "tool call {index} of the stream has no name"
                )));
            }
        }
        for call in self.calls.values() {
            let id = if call.id.is_empty() {
                format!("call_{}", uuid::Uuid::new_v4().simple())
            } else {
                call.id.clone()
            };
            on_event(StreamEvent::ToolCall(ToolCall {
                id,
                name: call.name.clone(),
                arguments: parse_arguments(&call.arguments),
                signature: None,
            }));
        }
        Ok(())
    }

    pub(super) fn finish(
        mut self,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<StopKind, ProviderError> {
        // A stream ended by `[DONE]` without a finish reason: the calls that
        // came are complete, since nothing more will.
        self.emit_calls(on_event)?;
        if let Some(usage) = self.usage {
            on_event(StreamEvent::Usage(usage));
        }
        Ok(match self.finish_reason.as_deref() {
            Some("length") => StopKind::MaxTokens,
            Some("content_filter") => StopKind::Refusal,
            _ if self.refused => StopKind::Refusal,
            // Some servers finish with `stop` after calling tools: the calls
            // decide.
            _ if !self.calls.is_empty() => StopKind::ToolUse,
            _ => StopKind::EndTurn,
        })
    }
}

pub(super) fn parse_models(body: &Value) -> Result<Vec<ModelInfo>, ProviderError> {
    let data = body
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::protocol("the model list has no `data` array".to_owned()))?;
    Ok(data
        .iter()
        .filter_map(|model| model.get("id").and_then(Value::as_str))
        .map(|id| ModelInfo {
            id: id.to_owned(),
            name: id.to_owned(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_image_follows_the_tool_results_as_a_user_message() {
        let body = request_body(
            ProviderKind::OpenAi,
            &crate::builtin::provider::image_conversation("gpt-4o"),
        );
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 6, "{messages:?}");
        assert_eq!(messages[2]["role"], "tool");
        assert_eq!(messages[2]["content"], "result a");
        assert_eq!(messages[3]["role"], "tool");
        assert_eq!(
            messages[4],
            json!({"role": "user", "content": [
                {"type": "text", "text": "Attached image(s) from tool result:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            ]})
        );
        assert_eq!(messages[5], json!({"role": "user", "content": "and?"}));
    }
    use crate::builtin::provider::ToolSpec;

    fn collect(datas: &[&str]) -> (Result<Option<StopKind>, ProviderError>, Vec<StreamEvent>) {
        let mut state = StreamState::default();
        let mut seen = Vec::new();
        let mut sink = |e: StreamEvent| seen.push(e);
        for data in datas {
            match state.on_data(data, &mut sink) {
                Ok(true) => {
                    let stop = state.finish(&mut sink);
                    return (stop.map(Some), seen);
                }
                Ok(false) => {}
                Err(e) => return (Err(e), seen),
            }
        }
        (Ok(None), seen)
    }

    /// Messages written once are copied into the body as they would have
    /// been written, byte for byte; the writing stops at one that shows
    /// images, whose text depends on them.
    #[test]
    fn written_messages_make_the_body_they_would_have_made() {
        let mut request = crate::builtin::provider::image_conversation("gpt-4o");
        request.system = "be \"brief\"\n".into();
        request.messages.insert(
            0,
            Message::Assistant {
                text: "quote \" and \\ and \u{1} and é".into(),
                tool_calls: Vec::new(),
                signature: None,
            },
        );
        let text = |request: &ModelRequest| {
            serde_json::to_string(&body(ProviderKind::OpenAi, request)).expect("body")
        };
        let plain = text(&request);
        request.rendered.extend(&request.messages);
        // The first three messages; the fourth shows an image.
        assert_eq!(request.rendered.len(), 3);
        assert_eq!(text(&request), plain);
        // A request with more messages than were written.
        request.rendered.truncate(1);
        assert_eq!(text(&request), plain);
    }

    #[test]
    fn body_carries_system_tools_and_history() {
        let request = ModelRequest {
            model: "m".into(),
            system: "be brief".into(),
            messages: vec![
                Message::User { text: "hi".into() },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "read".into(),
                        arguments: json!({"address": "/a"}),
                        signature: None,
                    }],
                    signature: None,
                },
                Message::ToolResult {
                    call_id: "c1".into(),
                    name: "read".into(),
                    content: "nope".into(),
                    is_error: true,
                    images: vec![],
                },
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                parameters: json!({"type": "object"}),
            }],
            max_tokens: 100,
            cache_key: None,
            rendered: Default::default(),
        };
        let body = request_body(ProviderKind::OpenAi, &request);
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["arguments"],
            json!("{\"address\":\"/a\"}")
        );
        assert_eq!(
            body["messages"][3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "Error: nope"})
        );
        assert_eq!(body["tools"][0]["function"]["name"], "read");
        assert_eq!(body["max_completion_tokens"], 100);
        let body = request_body(ProviderKind::OpenAiCompatible, &request);
        assert_eq!(body["max_tokens"], 100);
    }

    #[test]
    fn fragments_without_index_are_assembled() {
        let (stop, seen) = collect(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"x","arguments":"{\"k\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"y","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(stop, Ok(Some(StopKind::ToolUse)));
        assert_eq!(
            seen,
            vec![
                StreamEvent::ToolCall(ToolCall {
                    id: "a".into(),
                    name: "x".into(),
                    arguments: json!({"k": 1}),
                    signature: None,
                }),
                StreamEvent::ToolCall(ToolCall {
                    id: "b".into(),
                    name: "y".into(),
                    arguments: json!({}),
                    signature: None,
                }),
            ]
        );
    }

    #[test]
    fn finish_reasons_map_to_stop_kinds() {
        for (reason, kind) in [
            ("stop", StopKind::EndTurn),
            ("length", StopKind::MaxTokens),
            ("content_filter", StopKind::Refusal),
            ("tool_calls", StopKind::EndTurn),
        ] {
            let finish = format!(r#"{{"choices":[{{"delta":{{}},"finish_reason":"{reason}"}}]}}"#);
            let (stop, _) = collect(&[&finish, "[DONE]"]);
            assert_eq!(stop, Ok(Some(kind)), "{reason}");
        }
    }

    #[test]
    fn an_error_chunk_is_classified() {
        let (stop, _) = collect(&[r#"{"error":{"message":"upstream overloaded","code":502}}"#]);
        let error = stop.unwrap_err();
        assert!(error.is_retryable());
        assert!(error.message.contains("upstream overloaded"));
        let (stop, _) = collect(&["{not json"]);
        assert_eq!(stop.unwrap_err().code, super::super::PROVIDER_PROTOCOL);
    }

    #[test]
    fn model_list() {
        let models = parse_models(&json!({"data": [{"id": "a"}, {"id": "b"}, {"x": 1}]})).unwrap();
        assert_eq!(models.len(), 2);
        assert_eq!(
            models[1],
            ModelInfo {
                id: "b".into(),
                name: "b".into()
            }
        );
        assert!(parse_models(&json!({"models": []})).is_err());
    }

    /// What a state made of `datas` emitted and holds at the end, read on
    /// the in-place path (`on_data`) or whole (`on_chunk`).
    fn outcome(datas: &[&str], in_place: bool) -> String {
        let mut state = StreamState::default();
        let mut seen = Vec::new();
        let mut sink = |e: StreamEvent| seen.push(e);
        let mut results = Vec::new();
        for data in datas {
            let result = if in_place {
                state.on_data(data, &mut sink).map(drop)
            } else {
                parse_event(data).and_then(|chunk| state.on_chunk(&chunk, &mut sink))
            };
            results.push(format!("{result:?}"));
        }
        // Ids made up for calls that came without one are random.
        for event in &mut seen {
            if let StreamEvent::ToolCall(call) = event {
                if call.id.len() == 37 && call.id.starts_with("call_") {
                    call.id = "call_*".into();
                }
            }
        }
        let calls: Vec<_> = state
            .calls
            .iter()
            .map(|(i, c)| format!("{i}:{}:{}:{}", c.id, c.name, c.arguments))
            .collect();
        format!(
            "{results:?} {seen:?} {:?} {} {:?} {calls:?}",
            state.finish_reason, state.refused, state.usage
        )
    }

    #[test]
    fn a_chunk_read_in_place_is_read_as_the_whole_value_is() {
        let cases: &[&[&str]] = &[
            &[
                r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"w1 "},"finish_reason":null}]}"#,
            ],
            &[r#"{"choices":[{"index":0,"delta":{"content":"a\"b\u00e9\n"}}]}"#],
            &[r#"{"choices":[{"index":0,"delta":{"content":""}}]}"#],
            &[
                r#"{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"think","reasoning":"more"}}]}"#,
            ],
            &[r#"{"choices":[{"index":0,"delta":{"content":5}}]}"#],
            &[r#"{"choices":[{"index":0,"delta":{"refusal":"no"}}]}"#],
            &[
                r#"{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"mine"}}]}"#,
            ],
            &[r#"{"choices":[{"delta":{"content":"no index"}}]}"#],
            &[r#"{"choices":[{"index":"0","delta":{"content":"text index"}}]}"#],
            &[r#"{"choices":[{"index":0.0,"delta":{"content":"float index"}}]}"#],
            &[r#"{"choices":[{"index":-1,"delta":{"content":"negative"}}]}"#],
            &[r#"{"choices":[{"index":null,"delta":{"content":"null index"}}]}"#],
            &[r#"{"choices":[{"index":0,"delta":null}]}"#],
            &[r#"{"choices":[{"index":0,"delta":"text"}]}"#],
            &[r#"{"choices":"none"}"#],
            &[r#"{"choices":[1]}"#],
            &[r#"{"choices":null}"#],
            &[r#"{"choices":[]}"#],
            &[r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#],
            &[r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"choices":[]}"#],
            &[r#"{"error":null,"choices":[{"index":0,"delta":{"content":"ok"}}]}"#],
            &[r#"{"error":{"message":"overloaded","code":529}}"#],
            &[r#"{"error":"plain"}"#],
            &[r#"{"usage":{"prompt_tokens":7,"completion_tokens":3},"choices":[]}"#],
            &[
                r#"{"usage":null,"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
            ],
            &[r#"{"usage":"odd"}"#],
            &[
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"re","arguments":"{\"a\""}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"ad","arguments":":1}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            ],
            &[r#"{"choices":[{"index":0,"delta":{"tool_calls":{"not":"a list"}}}]}"#],
            &[
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"x","arguments":{"k":1}}}]},"finish_reason":"stop"}]}"#,
            ],
            &[r#"{"choices":[{"index":0,"finish_reason":5}]}"#],
            &[r#"{"choices":[{"index":0,"delta":{"content":"x"}}]} trailing"#],
            &[r#"not json"#],
            &[r#"  {"choices":[{"index":0,"delta":{"content":"spaced"}}]}  "#],
        ];
        for datas in cases {
            assert_eq!(outcome(datas, true), outcome(datas, false), "{datas:?}");
        }
    }
}
