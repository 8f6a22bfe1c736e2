//! `_agentos/*`: the ACP extension requests the builtin model agent sends to
//! its client, the sidecar, for what only the sidecar holds.
//!
//! The builtin agent keeps no state of its own. At the start of every turn it
//! asks for the turn's context (the system prompt with the agent's
//! instructions and its `<space>` index, the provider to call, the tools the
//! provider may see, and the transcript rebuilt from the session's durable
//! events), right before each provider call for the provider's key, and for
//! every tool call the model makes, that the sidecar run the verb. A key
//! therefore never travels in argv or the environment, and a restarted agent
//! resumes any session from the log alone.
//!
//! The sidecar answers these methods only on a route it started for the
//! builtin agent; any other adapter that sends them hears "method not found".

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Method names.
pub mod methods {
    /// [`ContextParams`] → [`TurnContext`].
    pub const CONTEXT: &str = "_agentos/context";
    /// [`ProviderKeyParams`] → [`ProviderKey`].
    pub const PROVIDER_KEY: &str = "_agentos/provider_key";
    /// [`VerbParams`] → [`VerbResult`].
    pub const VERB: &str = "_agentos/verb";
}

/// The `sessionUpdate` kind of a turn's failure, stored like any update and
/// shown to a Seed client as `{type:"error", message}`.
pub const ERROR_UPDATE: &str = "_agentos/error";

/// The key under a `tool_call` update's `_meta.agentos` that keeps the
/// provider's signature on the call, so a rebuilt transcript sends it back.
pub const SIGNATURE_META: &str = "thoughtSignature";

/// The key under an update's `_meta.agentos` for what the reference keeps
/// as an event's `meta` (`SessionEventMeta`): on the empty chunk that closes
/// an assistant message, `{model, provider, usage, durationMs}`; on a tool
/// call's end, `{durationMs}`.
pub const MESSAGE_META: &str = "meta";

/// The `sessionUpdate` kind, to the sidecar only, of what the agent is
/// doing between its other updates (waiting out a busy provider):
/// `{phase, detail}` as a Seed `activity`, published live and never stored.
pub const ACTIVITY_UPDATE: &str = "_agentos/activity";

/// Bytes of one tool result the model receives; the rest is cut on a UTF-8
/// boundary with a notice.
pub const MODEL_RESULT_BYTES: usize = 8 * 1024;
/// Bytes of one tool result the durable event keeps.
pub const STORED_RESULT_BYTES: usize = 256 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextParams {
    pub session_id: String,
    /// The conversation the agent holds from its last turn of this
    /// session: the sidecar may then send only what follows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldTranscript>,
}

/// The conversation an agent holds: the leading `items` of the transcript
/// the sidecar sent under `id` (which its [`TranscriptBasis`] said stay).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldTranscript {
    pub id: String,
    pub items: u32,
}

/// How a turn's transcript stands to the one the agent holds. The whole
/// conversation is the `keep` items the agent holds under `id` (none when
/// `keep` is 0, whatever it holds), then the turn's `transcript`; its
/// leading `stable` items read the same at every later turn, so the agent
/// may hold them under `id` and say so at its next turn. `keep` is 0 or
/// all of what the agent said it holds (`HeldTranscript::items`): the
/// builtin agent holds them folded into provider messages, which it cannot
/// cut back to fewer items, and fails a turn that keeps any other number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptBasis {
    pub id: String,
    pub keep: u32,
    pub stable: u32,
}

fn yes() -> bool {
    true
}

/// Everything one turn needs from the sidecar.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnContext {
    pub agent_id: String,
    /// The agent's instructions, the shared runtime prompt and the
    /// `<space>` index, assembled.
    pub system_prompt: String,
    pub provider: ProviderRef,
    /// The verbs and the callables this thread has promoted, in the order
    /// the provider should see them.
    pub tools: Vec<ToolSpec>,
    /// The session's conversation before this turn's prompt, oldest first
    /// (after what `basis` says the agent keeps).
    pub transcript: Vec<TranscriptItem>,
    /// Absent: `transcript` is the whole conversation and nothing of it is
    /// to be held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<TranscriptBasis>,
    /// Most output tokens per model call.
    pub max_tokens: u32,
    /// The turn resumes after delegated work answered: the transcript is
    /// the whole conversation and the prompt adds no user message.
    #[serde(default)]
    pub resume: bool,
    /// How many times a model call refused as rate limited or overloaded is
    /// made again before the turn fails (`builtin.providerRetries`); absent,
    /// the agent's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_retries: Option<u32>,
    /// The signed account that sent this turn's prompt: its words reach
    /// the model after a `<message_sender>` block naming it
    /// ([`sender_prefixed`]), as every signed message of the transcript
    /// does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_sender: Option<String>,
}

/// A signed user's words as the model reads them: after a
/// `<message_sender>` block holding the sender's account id as JSON (so
/// words that imitate the framing cannot forge it).
pub fn sender_prefixed(account_id: &str, text: &str) -> String {
    let sender = serde_json::json!({ "accountId": account_id });
    format!("<message_sender>\n{sender}\n</message_sender>\n\n{text}")
}

/// The provider a turn calls: its Seed `type`, the endpoint the sidecar
/// resolved for it (pinned per type, except for custom endpoints), and the
/// model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRef {
    pub name: String,
    #[serde(rename = "type")]
    pub provider_type: String,
    pub base_url: String,
    pub model: String,
    /// The base URL is a client's choice (a custom provider's `baseUrl`):
    /// the agent may call it only at a public address. Absent means yes:
    /// only an explicit `false` (an operator's endpoint) lifts the check.
    #[serde(default = "yes")]
    pub public_only: bool,
}

/// A tool as the provider sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema with an object root.
    pub parameters: Value,
}

/// One item of a rebuilt conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TranscriptItem {
    User {
        text: String,
    },
    Assistant {
        text: String,
    },
    ToolCall {
        id: String,
        name: String,
        input: Value,
        /// The provider's signature on the call (Gemini's
        /// `thoughtSignature`), read back from the call's event.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// At most [`MODEL_RESULT_BYTES`] of the result.
    ToolResult {
        id: String,
        name: String,
        output: String,
        #[serde(rename = "isError")]
        is_error: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderKeyParams {
    pub session_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderKey {
    /// `None` for a provider configured without a key (a local endpoint);
    /// a subscription's access token.
    pub api_key: Option<String>,
    /// A subscription's ChatGPT account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerbParams {
    pub session_id: String,
    pub tool_call_id: String,
    /// A verb (`read`, `write`, `call`, …) or a promoted callable's name.
    pub name: String,
    #[serde(default)]
    pub input: Value,
}

/// What a tool call produced. A failed verb is a result the model reads
/// (`is_error`), not a JSON-RPC error; those are kept for a broken request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerbResult {
    pub output: Value,
    #[serde(default)]
    pub is_error: bool,
    /// The verb ended the turn (`continue_session` handed the work to a
    /// successor session): the agent stops after reporting the result.
    #[serde(default)]
    pub ends_turn: bool,
    /// The verb handed work to a child whose result the turn waits for
    /// (`delegate`): the agent reports no result for this call (the
    /// sidecar logs the child's when it ends) and ends the turn after the
    /// step; the next turn resumes from the log.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parked: bool,
    /// Images the model is shown with the result (an attached image read
    /// with `read attachment:<id>`, for a model that takes images). They
    /// reach the model within the turn only: the durable result is
    /// `output`, which says what was shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
}

/// An image for the model: its type and its bytes in standard, padded
/// base64, as every provider API takes them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagePart {
    pub mime_type: String,
    pub data: String,
}

/// The largest image shown to the model, in bytes before encoding (the
/// reference's bound; larger ones are described instead).
pub const MAX_IMAGE_BYTES: u64 = 4_500_000;

/// The largest text attachment given whole (to the builtin agent's `read`,
/// or embedded in a registry adapter's prompt).
pub const MAX_TEXT_ATTACHMENT_BYTES: u64 = 256 * 1024;

/// About what a parsed JSON value holds in memory: each node's slot, each
/// string's bytes, each object member's key and map entry. The sidecar and
/// the builtin agent count a call's input with it in what they hold of a
/// conversation.
pub fn value_bytes(value: &Value) -> usize {
    const NODE: usize = std::mem::size_of::<Value>();
    NODE + match value {
        Value::String(text) => text.len(),
        Value::Array(items) => items.iter().map(value_bytes).sum(),
        Value::Object(members) => members
            .iter()
            .map(|(key, value)| key.len() + 2 * NODE + value_bytes(value))
            .sum(),
        _ => 0,
    }
}

/// `text` cut to at most `max` bytes on a UTF-8 boundary, with a notice
/// saying how much was left out.
pub fn cut_with_notice(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let notice_room = 96.min(max);
    let mut end = max - notice_room;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(max);
    out.push_str(&text[..end]);
    let notice = format!("\n[truncated: {} of {} bytes shown]", end, text.len());
    if out.len() + notice.len() <= max {
        out.push_str(&notice);
    }
    out
}

/// One ACP content block as the text a model reads: text as it is, an
/// embedded resource by its text, a resource link by its URI; `None` for
/// what has no text (an image).
pub fn block_text(block: &Value) -> Option<String> {
    match block.get("type").and_then(Value::as_str) {
        Some("text") => block.get("text").and_then(Value::as_str).map(str::to_owned),
        Some("resource") => {
            let resource = block.get("resource")?;
            let uri = resource
                .get("uri")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let text = resource.get("text").and_then(Value::as_str)?;
            Some(format!("<resource uri=\"{uri}\">\n{text}\n</resource>"))
        }
        Some("resource_link") => block
            .get("uri")
            .and_then(Value::as_str)
            .map(|uri| format!("[resource: {uri}]")),
        _ => None,
    }
}

/// A tool result as the durable event keeps it: the output itself when
/// its text fits [`STORED_RESULT_BYTES`], else that text cut with a notice.
pub fn stored_output(output: &Value) -> Value {
    let text = output_text(output);
    if text.len() <= STORED_RESULT_BYTES {
        output.clone()
    } else {
        Value::String(cut_with_notice(&text, STORED_RESULT_BYTES))
    }
}

/// The ACP `kind` of a tool call, for clients that draw them.
pub fn tool_kind(name: &str) -> &'static str {
    match name {
        "read" => "read",
        "write" => "edit",
        "status" | "plan" => "think",
        _ => "other",
    }
}

/// A tool output as text: strings as they are, anything else as JSON.
pub fn output_text(output: &Value) -> String {
    match output {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutting_keeps_utf8_and_says_so() {
        let text = "é".repeat(10_000);
        let cut = cut_with_notice(&text, MODEL_RESULT_BYTES);
        assert!(cut.len() <= MODEL_RESULT_BYTES);
        assert!(cut.contains("[truncated:"));
        assert!(cut.starts_with("éé"));
        assert_eq!(cut_with_notice("short", 10), "short");
        // A bound smaller than the notice still never exceeds itself.
        assert!(cut_with_notice(&text, 50).len() <= 50);
    }

    #[test]
    fn transcript_items_are_tagged() {
        let item = TranscriptItem::ToolResult {
            id: "c1".into(),
            name: "read".into(),
            output: "x".into(),
            is_error: false,
        };
        let json = serde_json::to_value(&item).unwrap();
        assert_eq!(json["type"], "tool_result");
        assert_eq!(json["isError"], false);
        let back: TranscriptItem = serde_json::from_value(json).unwrap();
        assert_eq!(back, item);
    }
}
