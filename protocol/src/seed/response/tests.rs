use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;

use super::*;
use crate::seed::action::{AgentDefinition, SystemPrompt};
use crate::seed::vocab::{AgentStatus, SessionStatus};

fn decode_map(bytes: &[u8]) -> BTreeMap<String, Ipld> {
    cbor::from_slice(bytes, 1 << 20).unwrap()
}

fn agent() -> AgentInfo {
    AgentInfo {
        id: "a1".into(),
        account: "z6MkOwner".into(),
        definition: AgentDefinition {
            name: "Helper".into(),
            system_prompt: SystemPrompt::Text("Be brief.".into()),
            model_provider: "openai".into(),
            model: "gpt-5-mini".into(),
            reasoning_level: None,
            tools: None,
            mcp_servers: None,
            signing_key: None,
            signing_keys: None,
            metadata: None,
            adapter: None,
        },
        state_dir: "/agents/a1".into(),
        status: AgentStatus::Idle,
        created_at: 1,
        updated_at: 2,
        access_role: None,
        public_read: None,
        public_chat: None,
    }
}

fn session() -> SessionInfo {
    SessionInfo {
        id: "s1".into(),
        account: "z6MkOwner".into(),
        agent_id: "a1".into(),
        title: None,
        status: SessionStatus::Idle,
        created_at: 1,
        updated_at: 2,
        parent_session_id: None,
        run_id: None,
        child_session_count: None,
        model_override: None,
        description: None,
        plan: None,
        started_by_trigger: None,
    }
}

#[test]
fn responses_carry_their_name_and_omit_absent_fields() {
    let response = ListSessionsResponse {
        sessions: vec![session()],
        agents: vec![agent()],
        next_cursor: None,
    };
    let map = decode_map(&encode_response(&response));
    assert_eq!(
        map.get("_"),
        Some(&Ipld::String("ListSessionsResponse".into()))
    );
    assert!(!map.contains_key("nextCursor"));
    let Some(Ipld::List(sessions)) = map.get("sessions") else {
        panic!("no sessions");
    };
    let Ipld::Map(first) = &sessions[0] else {
        panic!("not a map");
    };
    assert_eq!(first.get("agentId"), Some(&Ipld::String("a1".into())));
    assert!(!first.contains_key("title"));
    assert!(!first.contains_key("parentSessionId"));
    let Some(Ipld::List(agents)) = map.get("agents") else {
        panic!("no agents");
    };
    let Ipld::Map(agent) = &agents[0] else {
        panic!("not a map");
    };
    let Some(Ipld::Map(definition)) = agent.get("definition") else {
        panic!("no definition");
    };
    assert!(!definition.contains_key("adapter"));
    assert!(!definition.contains_key("tools"));
    assert_eq!(
        agent.get("stateDir"),
        Some(&Ipld::String("/agents/a1".into()))
    );
    assert!(!agent.contains_key("accessRole"));

    let back: ListSessionsResponse =
        cbor::from_slice(&encode_response(&response), 1 << 20).unwrap();
    assert_eq!(back, response);
}

#[test]
fn present_optionals_are_written() {
    let response = ListSessionsResponse {
        sessions: vec![],
        agents: vec![],
        next_cursor: Some(SessionListCursor {
            updated_before: 10,
            id_before: "s9".into(),
        }),
    };
    let map = decode_map(&encode_response(&response));
    let Some(Ipld::Map(cursor)) = map.get("nextCursor") else {
        panic!("no cursor");
    };
    assert_eq!(cursor.get("updatedBefore"), Some(&Ipld::Integer(10)));
    assert_eq!(cursor.get("idBefore"), Some(&Ipld::String("s9".into())));
}

#[test]
fn error_response_has_code_and_message() {
    let error = ErrorResponse::from(&SeedError::BadSignature);
    let map = decode_map(&encode_response(&error));
    assert_eq!(map.get("_"), Some(&Ipld::String("Error".into())));
    assert_eq!(map.get("code"), Some(&Ipld::String("bad_signature".into())));
    assert_eq!(
        map.get("message"),
        Some(&Ipld::String("invalid signature".into()))
    );
    assert_eq!(map.len(), 3);
}

#[test]
fn the_encode_failed_fallback_is_canonical() {
    let expected = ErrorResponse::new("encode_failed", "response could not be encoded");
    assert_eq!(
        cbor::to_canonical(&expected).unwrap(),
        ENCODE_FAILED_RESPONSE
    );

    let mut poisoned = session();
    poisoned.plan = Some(Ipld::Float(f64::NAN));
    let response = UpdateSessionResponse { session: poisoned };
    assert_eq!(encode_response(&response), ENCODE_FAILED_RESPONSE);
    assert_eq!(
        try_encode_response(&response).unwrap_err().code(),
        "encode_failed"
    );
}

#[test]
fn redacted_secret_and_provider_use_reference_names() {
    let secret = SetSecretResponse {
        secret: RedactedSecret {
            id: "sec1".into(),
            name: "openai-key".into(),
            metadata: None,
            has_value: true,
            created_at: 1,
            updated_at: 1,
        },
    };
    let map = decode_map(&encode_response(&secret));
    let Some(Ipld::Map(secret)) = map.get("secret") else {
        panic!("no secret");
    };
    assert_eq!(secret.get("hasValue"), Some(&Ipld::Bool(true)));
    assert!(!secret.contains_key("metadata"));

    let provider = SetModelProviderResponse {
        provider: RedactedModelProvider {
            id: "p1".into(),
            name: "openai".into(),
            provider_type: "openai".into(),
            has_secrets: true,
            auth_mode: None,
            auth_status: None,
            created_at: 1,
            updated_at: 1,
        },
    };
    let map = decode_map(&encode_response(&provider));
    let Some(Ipld::Map(provider)) = map.get("provider") else {
        panic!("no provider");
    };
    assert_eq!(provider.get("type"), Some(&Ipld::String("openai".into())));
    assert_eq!(provider.get("hasSecrets"), Some(&Ipld::Bool(true)));
    assert!(!provider.contains_key("authMode"));
}

#[test]
fn response_keys_are_in_canonical_order() {
    let response = StopSessionResponse {
        session_id: "s1".into(),
        stopped: true,
    };
    let bytes = encode_response(&response);
    // {_, stopped, sessionId}: lengths 1, 7, 9.
    let underscore = bytes.windows(2).position(|w| w == b"\x61_").unwrap();
    let stopped = bytes.windows(7).position(|w| w == b"stopped").unwrap();
    let session_id = bytes.windows(9).position(|w| w == b"sessionId").unwrap();
    assert!(underscore < stopped && stopped < session_id);
}

#[test]
fn space_records_use_reference_names_and_bytes_stay_bytes() {
    use crate::seed::vocab::{MemoryEncoding, MemoryEntryType, ToolKind};
    let binary = ReadAgentMemoryFileResponse {
        agent_id: "a1".into(),
        file: AgentMemoryFile {
            path: "pic.png".into(),
            size: 3,
            updated_at: 5,
            mime_type: Some("image/png".into()),
            encoding: MemoryEncoding::Binary,
            content: None,
            data: Some(vec![0, 159, 255]),
        },
    };
    let bytes = encode_response(&binary);
    let map = decode_map(&bytes);
    let Some(Ipld::Map(file)) = map.get("file") else {
        panic!("no file");
    };
    assert_eq!(file.get("data"), Some(&Ipld::Bytes(vec![0, 159, 255])));
    assert_eq!(file.get("encoding"), Some(&Ipld::String("binary".into())));
    assert_eq!(
        file.get("mimeType"),
        Some(&Ipld::String("image/png".into()))
    );
    assert!(!file.contains_key("content"));
    let back: ReadAgentMemoryFileResponse = cbor::from_slice(&bytes, 1 << 20).unwrap();
    assert_eq!(back, binary);

    let listed = ListAgentMemoryResponse {
        agent_id: "a1".into(),
        entries: vec![AgentMemoryEntry {
            path: "notes".into(),
            entry_type: MemoryEntryType::Dir,
            size: 0,
            updated_at: 5,
            mime_type: None,
        }],
        total_bytes: 0,
    };
    let map = decode_map(&encode_response(&listed));
    assert_eq!(map.get("totalBytes"), Some(&Ipld::Integer(0)));
    let Some(Ipld::List(entries)) = map.get("entries") else {
        panic!("no entries");
    };
    let Ipld::Map(entry) = &entries[0] else {
        panic!("not a map");
    };
    assert_eq!(entry.get("type"), Some(&Ipld::String("dir".into())));

    let tools = ListAgentToolsResponse {
        agent_id: "a1".into(),
        mcp_servers: Vec::new(),
        tools: vec![AgentToolInfo {
            name: "search".into(),
            kind: ToolKind::Builtin,
            summary: "s".into(),
            description: "d".into(),
            input: Ipld::Map(BTreeMap::new()),
            output: None,
            source: None,
            runtime: None,
            cid: "bafy".into(),
            enabled: true,
            granted: false,
            created_at: 1,
            updated_at: 2,
        }],
    };
    let bytes = encode_response(&tools);
    let map = decode_map(&bytes);
    let Some(Ipld::List(tools_out)) = map.get("tools") else {
        panic!("no tools");
    };
    let Ipld::Map(tool) = &tools_out[0] else {
        panic!("not a map");
    };
    assert_eq!(tool.get("kind"), Some(&Ipld::String("builtin".into())));
    assert_eq!(tool.get("granted"), Some(&Ipld::Bool(false)));
    assert!(!tool.contains_key("source") && !tool.contains_key("output"));
    let back: ListAgentToolsResponse = cbor::from_slice(&bytes, 1 << 20).unwrap();
    assert_eq!(back, tools);
}
