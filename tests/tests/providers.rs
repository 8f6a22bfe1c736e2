//! The builtin model agent's provider layer against scripted servers that
//! speak each provider's wire format over real loopback HTTP: streaming,
//! tool calls in both directions, reasoning, model lists, and every way a
//! call fails and how it is classified.

use std::time::Duration;

use agentos_adapters::builtin::provider::{
    Endpoint, ErrorClass, Message, ModelInfo, ModelRequest, Provider, ProviderError, ProviderKind,
    ProviderOptions, StopKind, StreamEvent, ToolCall, ToolSpec, Usage,
};
use agentos_tests::provider_server::{
    google_call_signature, Flavor, RecordedRequest, Reply, ScriptedProvider, GOOGLE_TEXT_SIGNATURE,
    INPUT_TOKENS,
};
use serde_json::{json, Value};

const KEY: &str = "sk-test-0123456789";
const SYSTEM: &str = "You are terse.";
const MODEL: &str = "test-model";

fn kind(flavor: Flavor) -> ProviderKind {
    match flavor {
        Flavor::OpenAi => ProviderKind::OpenAi,
        Flavor::Anthropic => ProviderKind::Anthropic,
        Flavor::Google => ProviderKind::Google,
    }
}

fn endpoint(server: &ScriptedProvider) -> Endpoint {
    Endpoint {
        kind: kind(server.flavor()),
        base_url: server.base_url(),
        api_key: Some(KEY.to_owned()),
        public_only: false,
        account_id: None,
    }
}

fn provider() -> Provider {
    Provider::new(ProviderOptions::default()).expect("a provider")
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "read".into(),
        description: "Reads an address.".into(),
        parameters: json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"address": {"type": "string"}},
            "required": ["address"],
            "additionalProperties": false,
        }),
    }]
}

fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> ModelRequest {
    ModelRequest {
        model: MODEL.into(),
        system: SYSTEM.into(),
        messages,
        tools,
        max_tokens: 256,
        cache_key: None,
        rendered: Default::default(),
    }
}

fn hello() -> ModelRequest {
    request(
        vec![Message::User {
            text: "Hello".into(),
        }],
        Vec::new(),
    )
}

async fn run(
    provider: &Provider,
    endpoint: &Endpoint,
    request: &ModelRequest,
) -> (Result<StopKind, ProviderError>, Vec<StreamEvent>) {
    let mut seen = Vec::new();
    // A signature on the text (Gemini's) is checked by its own test.
    let mut sink = |event: StreamEvent| {
        if !matches!(event, StreamEvent::TextSignature(_)) {
            seen.push(event)
        }
    };
    let result = provider.stream(endpoint, request, &mut sink).await;
    (result, seen)
}

fn text(event: &str) -> StreamEvent {
    StreamEvent::TextDelta(event.into())
}

fn only_request(server: &ScriptedProvider) -> RecordedRequest {
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    requests.into_iter().next().expect("one request")
}

/// The auth header each API uses, as it must arrive.
fn assert_auth(flavor: Flavor, request: &RecordedRequest) {
    match flavor {
        Flavor::OpenAi => {
            assert_eq!(
                request.header("authorization"),
                Some(&*format!("Bearer {KEY}"))
            )
        }
        Flavor::Anthropic => {
            assert_eq!(request.header("x-api-key"), Some(KEY));
            assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
        }
        Flavor::Google => {
            assert_eq!(request.header("x-goog-api-key"), Some(KEY));
            assert!(!request.path.contains(KEY), "{}", request.path);
        }
    }
}

/// One test per flavor from one body.
macro_rules! per_flavor {
    ($($name:ident => $body:ident;)*) => {
        $(mod $name {
            use super::*;
            #[tokio::test]
            async fn openai() { $body(Flavor::OpenAi).await }
            #[tokio::test]
            async fn anthropic() { $body(Flavor::Anthropic).await }
            #[tokio::test]
            async fn google() { $body(Flavor::Google).await }
        })*
    };
}

per_flavor! {
    text_streams_in_order => text_streams_in_order_;
    tool_calls_round_trip => tool_calls_round_trip_;
    reasoning_deltas => reasoning_deltas_;
    model_listing => model_listing_;
    unauthorized_is_configuration => unauthorized_is_configuration_;
    rate_limit_and_unavailable_are_retryable => rate_limit_and_unavailable_are_retryable_;
    mid_stream_failure => mid_stream_failure_;
    stalled_stream_times_out => stalled_stream_times_out_;
    oversized_event_is_a_protocol_error => oversized_event_is_a_protocol_error_;
    closed_connection_is_retryable => closed_connection_is_retryable_;
    empty_script_answers_500 => empty_script_answers_500_;
    slow_stream_keeps_order => slow_stream_keeps_order_;
    a_long_answer_is_cut_at_the_stream_bound => a_long_answer_is_cut_at_the_stream_bound_;
    a_trickling_answer_meets_the_call_deadline => a_trickling_answer_meets_the_call_deadline_;
}

async fn a_long_answer_is_cut_at_the_stream_bound_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    server.push(Reply::Text(vec!["x".repeat(1024); 64]));
    let provider = Provider::new(ProviderOptions {
        max_stream_bytes: 16 * 1024,
        ..ProviderOptions::default()
    })
    .expect("a provider");
    let (result, _) = run(&provider, &endpoint(&server), &hello()).await;
    let error = result.expect_err("an answer over the bound fails");
    assert_eq!(error.code, "provider_response_too_large", "{error}");
}

async fn a_trickling_answer_meets_the_call_deadline_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    // Each delta well within the idle timeout, the whole far past the deadline.
    server.push(Reply::Slow {
        deltas: vec!["tick".into(); 1000],
        gap: Duration::from_millis(50),
    });
    let provider = Provider::new(ProviderOptions {
        idle_timeout: Duration::from_secs(5),
        call_deadline: Duration::from_millis(400),
        ..ProviderOptions::default()
    })
    .expect("a provider");
    let (result, _) = run(&provider, &endpoint(&server), &hello()).await;
    let error = result.expect_err("a call past its deadline fails");
    assert_eq!(
        (error.class, error.code),
        (ErrorClass::Retryable, "provider_timeout"),
        "{error}"
    );
}

async fn text_streams_in_order_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    server.push(Reply::Text(vec![
        "Hel".into(),
        "lo".into(),
        ", world".into(),
    ]));
    let (result, seen) = run(&provider(), &endpoint(&server), &hello()).await;
    assert_eq!(result, Ok(StopKind::EndTurn));
    assert_eq!(
        seen,
        vec![
            text("Hel"),
            text("lo"),
            text(", world"),
            StreamEvent::Usage(Usage {
                input_tokens: INPUT_TOKENS,
                output_tokens: 3
            }),
        ]
    );
    let sent = only_request(&server);
    assert_eq!(sent.method, "POST");
    assert_auth(flavor, &sent);
    let body = &sent.body;
    match flavor {
        Flavor::OpenAi => {
            assert_eq!(sent.path, "/v1/chat/completions");
            assert_eq!(body["model"], MODEL);
            assert_eq!(body["stream"], true);
            assert_eq!(body["stream_options"]["include_usage"], true);
            assert_eq!(body["max_completion_tokens"], 256);
            assert_eq!(
                body["messages"],
                json!([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello"}])
            );
            assert!(body.get("tools").is_none());
        }
        Flavor::Anthropic => {
            assert_eq!(sent.path, "/v1/messages");
            assert_eq!(body["model"], MODEL);
            assert_eq!(body["stream"], true);
            assert_eq!(body["max_tokens"], 256);
            assert_eq!(body["system"], SYSTEM);
            assert_eq!(
                body["messages"],
                json!([{"role": "user", "content": [{"type": "text", "text": "Hello"}]}])
            );
        }
        Flavor::Google => {
            assert_eq!(
                sent.path,
                format!("/v1beta/models/{MODEL}:streamGenerateContent?alt=sse")
            );
            assert_eq!(
                body["systemInstruction"],
                json!({"parts": [{"text": SYSTEM}]})
            );
            assert_eq!(
                body["contents"],
                json!([{"role": "user", "parts": [{"text": "Hello"}]}])
            );
            assert_eq!(body["generationConfig"]["maxOutputTokens"], 256);
        }
    }
}

async fn tool_calls_round_trip_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    let first_args =
        json!({"address": "/notes/today.md", "options": {"lines": [1, 20], "note": "é→ü"}});
    let second_args = json!({"address": "/notes/other.md"});
    server.push(Reply::ToolCalls(vec![
        ("call_a".into(), "read".into(), first_args.clone()),
        ("call_b".into(), "read".into(), second_args.clone()),
    ]));
    let provider = provider();
    let endpoint = endpoint(&server);
    let mut first = request(
        vec![Message::User {
            text: "Read my notes".into(),
        }],
        tools(),
    );
    let (result, seen) = run(&provider, &endpoint, &first).await;
    assert_eq!(result, Ok(StopKind::ToolUse));
    let calls: Vec<ToolCall> = seen
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 2, "{seen:?}");
    assert_eq!(calls[0].name, "read");
    assert_eq!(calls[0].arguments, first_args);
    assert_eq!(calls[1].arguments, second_args);
    match flavor {
        // Google gives no ids: the client makes unique ones.
        Flavor::Google => {
            assert!(calls.iter().all(|c| c.id.starts_with("call_")), "{calls:?}");
            assert_ne!(calls[0].id, calls[1].id);
        }
        _ => assert_eq!((&*calls[0].id, &*calls[1].id), ("call_a", "call_b")),
    }
    assert!(
        matches!(seen.last(), Some(StreamEvent::Usage(_))),
        "{seen:?}"
    );

    // The tools went out in this API's shape.
    let sent = only_request(&server);
    match flavor {
        Flavor::OpenAi => assert_eq!(
            sent.body["tools"],
            json!([{"type": "function", "function": {
                "name": "read", "description": "Reads an address.",
                "parameters": tools()[0].parameters,
            }}])
        ),
        Flavor::Anthropic => assert_eq!(
            sent.body["tools"],
            json!([{"name": "read", "description": "Reads an address.",
                    "input_schema": tools()[0].parameters}])
        ),
        Flavor::Google => assert_eq!(
            sent.body["tools"],
            json!([{"functionDeclarations": [{
                "name": "read", "description": "Reads an address.",
                "parameters": {"type": "object",
                               "properties": {"address": {"type": "string"}},
                               "required": ["address"]},
            }]}])
        ),
    }

    // The follow-up carries the calls and their results.
    server.push(Reply::Text(vec!["Both read.".into()]));
    match flavor {
        // Gemini signs the first call of an answer, and wants it back.
        Flavor::Google => {
            assert_eq!(
                calls[0].signature.as_deref(),
                Some(&*google_call_signature("call_a"))
            );
            assert_eq!(calls[1].signature, None);
        }
        _ => assert!(calls.iter().all(|c| c.signature.is_none()), "{calls:?}"),
    }
    first.messages.push(Message::Assistant {
        text: "Reading.".into(),
        tool_calls: calls.clone(),
        signature: None,
    });
    first.messages.push(Message::ToolResult {
        call_id: calls[0].id.clone(),
        name: "read".into(),
        content: "# Today".into(),
        is_error: false,
        images: vec![],
    });
    first.messages.push(Message::ToolResult {
        call_id: calls[1].id.clone(),
        name: "read".into(),
        content: "not found".into(),
        is_error: true,
        images: vec![],
    });
    let (result, seen) = run(&provider, &endpoint, &first).await;
    assert_eq!(result, Ok(StopKind::EndTurn));
    assert_eq!(seen[0], text("Both read."));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let body = &requests[1].body;
    match flavor {
        Flavor::OpenAi => {
            let messages = body["messages"].as_array().expect("messages");
            assert_eq!(messages.len(), 5, "{messages:#?}");
            assert_eq!(messages[2]["role"], "assistant");
            assert_eq!(messages[2]["content"], "Reading.");
            assert_eq!(messages[2]["tool_calls"][0]["id"], "call_a");
            assert_eq!(messages[2]["tool_calls"][0]["type"], "function");
            let arguments = messages[2]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .expect("arguments as text");
            assert_eq!(
                serde_json::from_str::<Value>(arguments).ok(),
                Some(first_args)
            );
            assert_eq!(
                messages[3],
                json!({"role": "tool", "tool_call_id": "call_a", "content": "# Today"})
            );
            assert_eq!(messages[4]["tool_call_id"], "call_b");
            assert!(messages[4]["content"]
                .as_str()
                .is_some_and(|c| c.contains("not found")));
        }
        Flavor::Anthropic => {
            let messages = body["messages"].as_array().expect("messages");
            assert_eq!(messages.len(), 3, "{messages:#?}");
            assert_eq!(
                messages[1],
                json!({"role": "assistant", "content": [
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "call_a", "name": "read", "input": first_args},
                    {"type": "tool_use", "id": "call_b", "name": "read", "input": second_args},
                ]})
            );
            assert_eq!(
                messages[2],
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_a", "content": "# Today", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "call_b", "content": "not found", "is_error": true},
                ]})
            );
        }
        Flavor::Google => {
            let contents = body["contents"].as_array().expect("contents");
            assert_eq!(contents.len(), 3, "{contents:#?}");
            assert_eq!(
                contents[1],
                json!({"role": "model", "parts": [
                    {"text": "Reading."},
                    {"functionCall": {"name": "read", "args": first_args},
                     "thoughtSignature": google_call_signature("call_a")},
                    {"functionCall": {"name": "read", "args": second_args}},
                ]})
            );
            assert_eq!(
                contents[2],
                json!({"role": "user", "parts": [
                    {"functionResponse": {"name": "read", "response": {"content": "# Today"}}},
                    {"functionResponse": {"name": "read", "response": {"error": "not found"}}},
                ]})
            );
        }
    }
}

async fn reasoning_deltas_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    server.push(Reply::Reasoning {
        reasoning: vec!["Let me ".into(), "think.".into()],
        text: vec!["42".into()],
    });
    let (result, seen) = run(&provider(), &endpoint(&server), &hello()).await;
    assert_eq!(result, Ok(StopKind::EndTurn));
    assert_eq!(
        seen,
        vec![
            StreamEvent::ReasoningDelta("Let me ".into()),
            StreamEvent::ReasoningDelta("think.".into()),
            text("42"),
            StreamEvent::Usage(Usage {
                input_tokens: INPUT_TOKENS,
                output_tokens: 3
            }),
        ]
    );
}

async fn model_listing_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    server.push(Reply::Models(vec![
        ("model-a".into(), "Model A".into()),
        ("model-b".into(), "Model B".into()),
    ]));
    let models = provider()
        .list_models(&endpoint(&server))
        .await
        .expect("the model list");
    let named = |id: &str, name: &str| ModelInfo {
        id: id.into(),
        name: name.into(),
    };
    let expected = match flavor {
        // The API has ids only.
        Flavor::OpenAi => vec![named("model-a", "model-a"), named("model-b", "model-b")],
        _ => vec![named("model-a", "Model A"), named("model-b", "Model B")],
    };
    assert_eq!(models, expected);
    let sent = only_request(&server);
    assert_eq!(sent.method, "GET");
    assert_auth(flavor, &sent);
    let path = sent.path.split('?').next().unwrap_or("");
    let expected_path = match flavor {
        Flavor::OpenAi => "/v1/models",
        Flavor::Anthropic => "/v1/models",
        Flavor::Google => "/v1beta/models",
    };
    assert_eq!(path, expected_path);
}

async fn unauthorized_is_configuration_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    let body = json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}});
    server.push(Reply::Status(401, body.to_string()));
    let (result, seen) = run(&provider(), &endpoint(&server), &hello()).await;
    let error = result.expect_err("a 401 fails");
    assert_eq!(error.class, ErrorClass::Configuration);
    assert_eq!(error.code, "provider_auth");
    assert_eq!(error.status, Some(401));
    assert!(error.message.contains("invalid x-api-key"), "{error}");
    assert!(seen.is_empty());

    // The list fails the same way.
    server.push(Reply::Status(403, body.to_string()));
    let error = provider()
        .list_models(&endpoint(&server))
        .await
        .expect_err("a 403 fails");
    assert_eq!(
        (error.class, error.code),
        (ErrorClass::Configuration, "provider_auth")
    );
}

async fn rate_limit_and_unavailable_are_retryable_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    server.push(Reply::Status(
        429,
        json!({"error": {"message": "Rate limit reached"}}).to_string(),
    ));
    server.push(Reply::Status(503, "upstream unavailable".into()));
    server.push(Reply::Status(
        404,
        json!({"error": {"message": "model not found"}}).to_string(),
    ));
    server.push(Reply::Status(
        400,
        json!({"error": {"message": "max_tokens too large"}}).to_string(),
    ));
    let provider = provider();
    let endpoint = endpoint(&server);
    let expected = [
        (
            ErrorClass::Retryable,
            "provider_rate_limited",
            "Rate limit reached",
        ),
        (
            ErrorClass::Retryable,
            "provider_server_error",
            "upstream unavailable",
        ),
        (
            ErrorClass::Configuration,
            "provider_not_found",
            "model not found",
        ),
        (
            ErrorClass::Configuration,
            "provider_bad_request",
            "max_tokens too large",
        ),
    ];
    for (class, code, words) in expected {
        let (result, _) = run(&provider, &endpoint, &hello()).await;
        let error = result.expect_err("an error status fails");
        assert_eq!((error.class, error.code), (class, code), "{error}");
        assert!(error.message.contains(words), "{error}");
    }
}

async fn mid_stream_failure_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    server.push(Reply::StreamError);
    let (result, seen) = run(&provider(), &endpoint(&server), &hello()).await;
    // What came before the failure was delivered.
    assert_eq!(seen, vec![text("partial")]);
    let error = result.expect_err("the stream fails");
    assert_eq!(error.class, ErrorClass::Retryable, "{error}");
    match flavor {
        Flavor::OpenAi => assert_eq!(error.code, "provider_network"),
        Flavor::Anthropic => {
            assert_eq!(error.code, "provider_server_error");
            assert!(error.message.contains("Overloaded"), "{error}");
        }
        Flavor::Google => {
            assert_eq!(error.code, "provider_server_error");
            assert!(error.message.contains("overloaded"), "{error}");
        }
    }
}

async fn stalled_stream_times_out_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    server.push(Reply::Hang);
    let provider = Provider::new(ProviderOptions {
        idle_timeout: Duration::from_millis(300),
        ..ProviderOptions::default()
    })
    .expect("a provider");
    let (result, _) = run(&provider, &endpoint(&server), &hello()).await;
    let error = result.expect_err("a silent stream fails");
    assert_eq!(
        (error.class, error.code),
        (ErrorClass::Retryable, "provider_timeout"),
        "{error}"
    );
}

async fn oversized_event_is_a_protocol_error_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    server.push(Reply::Oversized(8 * 1024));
    let provider = Provider::new(ProviderOptions {
        max_event_bytes: 4 * 1024,
        ..ProviderOptions::default()
    })
    .expect("a provider");
    let (result, seen) = run(&provider, &endpoint(&server), &hello()).await;
    let error = result.expect_err("an oversized event fails");
    assert_eq!(
        (error.class, error.code),
        (ErrorClass::Configuration, "provider_protocol"),
        "{error}"
    );
    assert!(!seen.iter().any(|e| matches!(e, StreamEvent::TextDelta(_))));
}

async fn closed_connection_is_retryable_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    server.push(Reply::Disconnect);
    let (result, _) = run(&provider(), &endpoint(&server), &hello()).await;
    let error = result.expect_err("a closed connection fails");
    assert_eq!(
        (error.class, error.code),
        (ErrorClass::Retryable, "provider_network"),
        "{error}"
    );
    assert!(!error.message.contains(KEY));

    // Nothing listening at all is the same.
    let endpoint = endpoint(&server);
    drop(server);
    let (result, _) = run(&provider(), &endpoint, &hello()).await;
    let error = result.expect_err("a refused connection fails");
    assert_eq!(
        (error.class, error.code),
        (ErrorClass::Retryable, "provider_network"),
        "{error}"
    );
}

async fn empty_script_answers_500_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    let (result, _) = run(&provider(), &endpoint(&server), &hello()).await;
    let error = result.expect_err("nothing queued fails");
    assert_eq!(error.code, "provider_server_error");
    assert!(error.message.contains("no reply queued"), "{error}");
}

async fn slow_stream_keeps_order_(flavor: Flavor) {
    let server = ScriptedProvider::start(flavor).await;
    let deltas: Vec<String> = (0..4).map(|i| format!("d{i} ")).collect();
    server.push(Reply::Slow {
        deltas: deltas.clone(),
        gap: Duration::from_millis(20),
    });
    let (result, seen) = run(&provider(), &endpoint(&server), &hello()).await;
    assert_eq!(result, Ok(StopKind::EndTurn));
    let texts: Vec<StreamEvent> = seen
        .into_iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
        .collect();
    assert_eq!(texts, deltas.iter().map(|d| text(d)).collect::<Vec<_>>());
    let sent_at = server.delta_sent_at();
    assert_eq!(sent_at.len(), deltas.len());
    assert!(sent_at.windows(2).all(|w| w[0] <= w[1]));
}

#[tokio::test]
async fn a_compatible_server_without_key_gets_no_auth_and_max_tokens() {
    let server = ScriptedProvider::start(Flavor::OpenAi).await;
    server.push(Reply::Text(vec!["ok".into()]));
    let endpoint = Endpoint {
        kind: ProviderKind::from_type("ollama"),
        base_url: format!("{}/", server.base_url()),
        api_key: None,
        public_only: false,
        account_id: None,
    };
    let (result, _) = run(&provider(), &endpoint, &hello()).await;
    assert_eq!(result, Ok(StopKind::EndTurn));
    let sent = only_request(&server);
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.body["max_tokens"], 256);
    assert!(sent.body.get("max_completion_tokens").is_none());
}

/// Messages a request carries already written (the builtin agent's held
/// conversation) reach the server as the same body as messages written at
/// the call, and a family that writes whole turns ignores them.
#[tokio::test]
async fn written_messages_reach_the_server_as_written_ones_do() {
    let conversation = vec![
        Message::User {
            text: "Read \"my\" notes\n".into(),
        },
        Message::Assistant {
            text: "Looking é→ü".into(),
            tool_calls: vec![ToolCall {
                id: "call_a".into(),
                name: "read".into(),
                arguments: json!({"address": "/notes/today.md"}),
                signature: None,
            }],
            signature: None,
        },
        Message::ToolResult {
            call_id: "call_a".into(),
            name: "read".into(),
            content: "milk\teggs".into(),
            is_error: false,
            images: Vec::new(),
        },
        Message::Assistant {
            text: "You need milk.".into(),
            tool_calls: Vec::new(),
            signature: None,
        },
        Message::User {
            text: "And?".into(),
        },
    ];
    for flavor in [Flavor::OpenAi, Flavor::Anthropic, Flavor::Google] {
        let server = ScriptedProvider::start(flavor).await;
        let provider = provider();
        let endpoint = endpoint(&server);
        let plain = request(conversation.clone(), tools());
        let mut written = request(conversation.clone(), tools());
        written.rendered.extend(&conversation[..4]);
        for request in [&plain, &written] {
            server.push(Reply::Text(vec!["ok".into()]));
            let (result, _) = run(&provider, &endpoint, request).await;
            assert_eq!(result, Ok(StopKind::EndTurn), "{flavor:?}");
        }
        let sent = server.requests();
        assert_eq!(sent.len(), 2, "{flavor:?}");
        assert_eq!(sent[0].body, sent[1].body, "{flavor:?}");
    }
}

#[tokio::test]
async fn the_key_never_appears_in_an_error() {
    let server = ScriptedProvider::start(Flavor::OpenAi).await;
    let body = json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}});
    server.push(Reply::Status(401, body.to_string()));
    let (result, _) = run(&provider(), &endpoint(&server), &hello()).await;
    let error = result.expect_err("a 401 fails");
    assert!(!error.message.contains(KEY), "{error}");
    assert!(
        error.message.contains("Incorrect API key provided"),
        "{error}"
    );
    assert!(!format!("{error:?}").contains(KEY));
}

#[tokio::test]
async fn a_bad_base_url_is_configuration() {
    for base_url in ["not a url", "ftp://example.com/v1"] {
        let endpoint = Endpoint {
            kind: ProviderKind::OpenAiCompatible,
            base_url: base_url.into(),
            api_key: None,
            public_only: false,
            account_id: None,
        };
        let (result, _) = run(&provider(), &endpoint, &hello()).await;
        let error = result.expect_err("a bad URL fails");
        assert_eq!(
            (error.class, error.code),
            (ErrorClass::Configuration, "provider_bad_request"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_is_a_protocol_error() {
    let server = ScriptedProvider::start(Flavor::OpenAi).await;
    server.push(Reply::Models(vec![("m".into(), "m".into())]));
    let (result, _) = run(&provider(), &endpoint(&server), &hello()).await;
    let error = result.expect_err("JSON is not a stream");
    assert_eq!(error.code, "provider_protocol", "{error}");
}

#[tokio::test]
async fn the_default_reply_serves_every_call() {
    let server = ScriptedProvider::start(Flavor::Anthropic).await;
    server.set_recording(false);
    server.set_default(Reply::Text(vec!["a".into(), "b".into()]));
    let provider = provider();
    let endpoint = endpoint(&server);
    for _ in 0..200 {
        let (result, seen) = run(&provider, &endpoint, &hello()).await;
        assert_eq!(result, Ok(StopKind::EndTurn));
        assert_eq!(&seen[..2], &[text("a"), text("b")]);
    }
    assert!(server.requests().is_empty());
    assert_eq!(server.pending(), 0);
}

/// Gemini's thought signatures: each goes back in the part that carried
/// it, a call's and the text's; a request that drops a call's signature is
/// refused, as Gemini 3 refuses it.
#[tokio::test]
async fn gemini_signatures_go_back_in_the_parts_that_carried_them() {
    let server = ScriptedProvider::start(Flavor::Google).await;
    let provider = provider();
    let endpoint = endpoint(&server);
    server.push(Reply::Text(vec!["Hi.".into()]));
    let mut signatures = Vec::new();
    let mut sink = |event: StreamEvent| {
        if let StreamEvent::TextSignature(s) = event {
            signatures.push(s);
        }
    };
    let result = provider.stream(&endpoint, &hello(), &mut sink).await;
    assert_eq!(result, Ok(StopKind::EndTurn));
    assert_eq!(signatures, [GOOGLE_TEXT_SIGNATURE]);

    let args = json!({"address": "/a"});
    server.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "read".into(),
        args.clone(),
    )]));
    let mut turn = request(
        vec![
            Message::User {
                text: "Hello".into(),
            },
            Message::Assistant {
                text: "Hi.".into(),
                tool_calls: vec![],
                signature: Some(GOOGLE_TEXT_SIGNATURE.into()),
            },
            Message::User {
                text: "Read /a".into(),
            },
        ],
        tools(),
    );
    let (result, seen) = run(&provider, &endpoint, &turn).await;
    assert_eq!(result, Ok(StopKind::ToolUse));
    let sent = &server.requests()[1].body;
    assert_eq!(
        sent["contents"][1]["parts"],
        json!([{"text": "Hi.", "thoughtSignature": GOOGLE_TEXT_SIGNATURE}])
    );
    let Some(StreamEvent::ToolCall(call)) = seen.first().cloned() else {
        panic!("a call: {seen:?}");
    };
    let result_of = |call: &ToolCall| Message::ToolResult {
        call_id: call.id.clone(),
        name: "read".into(),
        content: "A".into(),
        is_error: false,
        images: vec![],
    };

    // The call without its signature: refused, as Gemini 3 refuses it.
    let mut unsigned = call.clone();
    unsigned.signature = None;
    let mut dropped = turn.clone();
    dropped.messages.push(Message::Assistant {
        text: String::new(),
        tool_calls: vec![unsigned.clone()],
        signature: None,
    });
    dropped.messages.push(result_of(&unsigned));
    server.push(Reply::Text(vec!["A it is.".into()]));
    let (result, _) = run(&provider, &endpoint, &dropped).await;
    let error = result.expect_err("refused without the signature");
    assert_eq!(
        (error.class, error.code, error.status),
        (ErrorClass::Configuration, "provider_bad_request", Some(400)),
        "{error}"
    );
    assert!(error.message.contains("thought_signature"), "{error}");

    // With it: answered, the call sent back signed.
    turn.messages.push(Message::Assistant {
        text: String::new(),
        tool_calls: vec![call.clone()],
        signature: None,
    });
    turn.messages.push(result_of(&call));
    let (result, seen) = run(&provider, &endpoint, &turn).await;
    assert_eq!(result, Ok(StopKind::EndTurn));
    assert_eq!(seen[0], text("A it is."));
    let requests = server.requests();
    let sent = &requests.last().expect("sent").body;
    assert_eq!(
        sent["contents"][3]["parts"][0]["thoughtSignature"],
        json!(google_call_signature("c1"))
    );
}

#[tokio::test]
async fn a_wrong_path_is_404_and_consumes_nothing() {
    let server = ScriptedProvider::start(Flavor::Anthropic).await;
    server.push(Reply::Text(vec!["kept".into()]));
    // The Anthropic server at an OpenAI-style address.
    let endpoint = Endpoint {
        kind: ProviderKind::OpenAiCompatible,
        base_url: server.base_url(),
        api_key: Some(KEY.into()),
        public_only: false,
        account_id: None,
    };
    let (result, _) = run(&provider(), &endpoint, &hello()).await;
    let error = result.expect_err("no such route");
    assert_eq!(
        (error.class, error.code),
        (ErrorClass::Configuration, "provider_not_found"),
        "{error}"
    );
    assert_eq!(server.pending(), 1);
}
