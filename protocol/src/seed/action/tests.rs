use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;

use super::fields::FromField;
use super::*;
use crate::seed::vocab::ToolVerb;

fn s(text: &str) -> Ipld {
    Ipld::String(text.to_string())
}

fn map(entries: &[(&str, Ipld)]) -> BTreeMap<String, Ipld> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn action(name: &str, fields: &[(&str, Ipld)]) -> ActionMap {
    let mut m = map(fields);
    m.insert("_".into(), s(name));
    m.insert("ts".into(), Ipld::Integer(1_700_000_000_000));
    m
}

fn definition() -> Ipld {
    Ipld::Map(map(&[
        ("name", s("Helper")),
        ("systemPrompt", s("Be brief.")),
        ("modelProvider", s("openai")),
        ("model", s("gpt-5-mini")),
    ]))
}

fn tool_input() -> AgentToolInput {
    AgentToolInput {
        name: "word_count".into(),
        summary: None,
        description: "Counts words.".into(),
        input: Ipld::Map(map(&[("type", s("object"))])),
        output: None,
        source: "export default () => 1".into(),
        runtime: None,
        enabled: None,
    }
}

fn message(error: SeedError) -> String {
    assert_eq!(error.code(), "bad_request", "{error:?}");
    error.to_string()
}

#[test]
fn every_implemented_action_round_trips() {
    let principal = Principal::from_public_key([3; 32]);
    let actions = vec![
        Action::ListAgentInvites,
        Action::ListAgentCollaborators {
            agent_id: "a".into(),
        },
        Action::InviteAgentCollaborator {
            agent_id: "a".into(),
            account_id: principal.to_string(),
            role: CollaboratorRole::Writer,
        },
        Action::RemoveAgentCollaborator {
            agent_id: "a".into(),
            account_id: "z6Mk".into(),
        },
        Action::SetAgentPublicRead {
            agent_id: "a".into(),
            public_read: true,
        },
        Action::AcceptAgentInvite {
            agent_id: "a".into(),
        },
        Action::DeclineAgentInvite {
            agent_id: "a".into(),
        },
        Action::ListAgents,
        Action::CreateAgent {
            definition: AgentDefinition {
                name: "n".into(),
                system_prompt: SystemPrompt::Blocks(vec![Ipld::Map(map(&[(
                    "block",
                    Ipld::Map(map(&[("id", s("b1"))])),
                )]))]),
                model_provider: "p".into(),
                model: "m".into(),
                reasoning_level: Some("low".into()),
                tools: Some(vec!["read".into()]),
                mcp_servers: None,
                signing_key: None,
                signing_keys: Some(vec![]),
                metadata: Some(Ipld::Map(map(&[("k", Ipld::Integer(1))]))),
                adapter: Some("claude".into()),
            },
            client_request_id: Some("r1".into()),
        },
        Action::GetAgent {
            agent_id: "a".into(),
        },
        Action::UpdateAgent {
            agent_id: "a".into(),
            definition: AgentDefinition::from_field(definition(), "definition").unwrap(),
        },
        Action::DeleteAgent {
            agent_id: "a".into(),
        },
        Action::SetSecret {
            name: "k".into(),
            value: vec![0, 1, 255],
            metadata: None,
        },
        Action::ListSecrets,
        Action::DeleteSecret { name: "k".into() },
        Action::SetModelProvider {
            name: "openai".into(),
            provider: ModelProviderConfig {
                provider_type: "openai".into(),
                model_defaults: None,
                secret_refs: Some([("apiKey".to_string(), "k".to_string())].into()),
                base_url: None,
                auth_mode: Some(crate::seed::vocab::AuthMode::ApiKey),
            },
        },
        Action::ListModelProviders { agent_id: None },
        Action::DeleteModelProvider {
            name: "openai".into(),
        },
        Action::ListProviderModels {
            provider: "openai".into(),
            agent_id: Some("a".into()),
        },
        Action::CreateSession {
            agent_id: "a".into(),
            title: None,
            client_request_id: None,
        },
        Action::ListSessions {
            agent_id: None,
            limit: Some(50),
            cursor: Some(SessionListCursor {
                updated_before: 5,
                id_before: "s".into(),
            }),
            parent_session_id: None,
            include_children: Some(false),
        },
        Action::GetSession {
            session_id: "s".into(),
            after_seq: Some(0),
        },
        Action::UpdateSession {
            session_id: "s".into(),
            title: Some("t".into()),
            model_override: Some(Ipld::Null),
        },
        Action::DeleteSession {
            session_id: "s".into(),
        },
        Action::MessageSession {
            session_id: "s".into(),
            content: vec![
                ContentPart::Text {
                    text: "hi".into(),
                    blocks: None,
                    client_message_id: Some("c1".into()),
                },
                ContentPart::Context {
                    lines: vec!["viewing hm://z6Mk/doc".into()],
                },
                ContentPart::Attachment { id: "ab12".into() },
            ],
            client_message_id: None,
        },
        Action::StopSession {
            session_id: "s".into(),
        },
        Action::RetrySession {
            session_id: "s".into(),
        },
        Action::Subscribe {
            key: "sessions/s".into(),
            after_seq: None,
        },
        Action::Unsubscribe {
            key: "sessions/s".into(),
        },
        Action::AuthorizeSigner {
            signer: principal,
            role: Role::Agent,
        },
        Action::RevokeSigner { signer: principal },
        Action::ListSigners,
        Action::ListAgentTools {
            agent_id: "a".into(),
        },
        Action::SaveAgentTool {
            agent_id: "a".into(),
            tool: tool_input(),
            previous_name: Some("old_name".into()),
        },
        Action::SaveAgentTool {
            agent_id: "a".into(),
            tool: AgentToolInput {
                summary: Some("Counts.".into()),
                output: Some(Ipld::Map(map(&[("type", s("integer"))]))),
                runtime: Some("python".into()),
                enabled: Some(false),
                ..tool_input()
            },
            previous_name: None,
        },
        Action::DeleteAgentTool {
            agent_id: "a".into(),
            name: "word_count".into(),
        },
        Action::ListAgentMemory {
            agent_id: "a".into(),
        },
        Action::ReadAgentMemoryFile {
            agent_id: "a".into(),
            path: "notes/today.md".into(),
        },
        Action::WriteAgentMemoryFile {
            agent_id: "a".into(),
            path: "notes/today.md".into(),
            content: MemoryContent::Text("hello".into()),
        },
        Action::WriteAgentMemoryFile {
            agent_id: "a".into(),
            path: "pic.png".into(),
            content: MemoryContent::Bytes(vec![0x89, b'P', 0, 255]),
        },
        Action::DeleteAgentMemoryFile {
            agent_id: "a".into(),
            path: "notes".into(),
        },
        Action::InvokeSessionTool {
            session_id: "s".into(),
            verb: ToolVerb::Call,
            input: Ipld::Map(map(&[("tool", s("search"))])),
        },
    ];
    for original in actions {
        let mut encoded = original.to_map().unwrap();
        assert_eq!(encoded.get("_"), Some(&s(original.name())));
        // Absent fields are left out, never written as null (except the
        // deliberate null that clears a model override).
        if !matches!(original, Action::UpdateSession { .. }) {
            assert!(!encoded.values().any(|v| *v == Ipld::Null), "{encoded:?}");
        }
        encoded.insert("ts".into(), Ipld::Integer(1));
        let decoded = Action::from_map(&encoded).unwrap();
        assert_eq!(decoded, original);
    }
}

#[test]
fn typed_fields_keep_their_wire_types() {
    let encoded = Action::SetSecret {
        name: "k".into(),
        value: vec![1, 2],
        metadata: None,
    }
    .to_map()
    .unwrap();
    assert_eq!(encoded.get("value"), Some(&Ipld::Bytes(vec![1, 2])));
    let signer = Principal::from_public_key([4; 32]);
    let encoded = Action::RevokeSigner { signer }.to_map().unwrap();
    assert_eq!(encoded.get("signer"), Some(&s(&signer.to_string())));
    let encoded = Action::ListAgents.to_map().unwrap();
    assert_eq!(encoded, map(&[("_", s("ListAgents"))]));
}

#[test]
fn missing_required_fields_are_named() {
    let error = Action::from_map(&action("GetAgent", &[])).unwrap_err();
    assert_eq!(message(error), "GetAgent: missing field `agentId`");
    // Null is not a value for a required field.
    let error = Action::from_map(&action("GetAgent", &[("agentId", Ipld::Null)])).unwrap_err();
    assert_eq!(message(error), "GetAgent: missing field `agentId`");
    let mut incomplete = definition();
    if let Ipld::Map(m) = &mut incomplete {
        m.remove("name");
    }
    let error =
        Action::from_map(&action("CreateAgent", &[("definition", incomplete)])).unwrap_err();
    assert_eq!(
        message(error),
        "CreateAgent: missing field `definition.name`"
    );
    // A registry adapter's definition may leave the model out (the signed
    // API requires it for the builtin agent only): it reads as empty.
    let mut no_model = definition();
    if let Ipld::Map(m) = &mut no_model {
        m.remove("model");
        m.remove("modelProvider");
        m.insert("adapter".into(), s("echo"));
    }
    let Action::CreateAgent { definition, .. } =
        Action::from_map(&action("CreateAgent", &[("definition", no_model)])).expect("decodes")
    else {
        panic!("not a CreateAgent")
    };
    assert_eq!(
        (
            definition.model_provider.as_str(),
            definition.model.as_str()
        ),
        ("", "")
    );
}

#[test]
fn extra_fields_are_refused() {
    let error = Action::from_map(&action(
        "GetAgent",
        &[("agentId", s("a")), ("force", Ipld::Bool(true))],
    ))
    .unwrap_err();
    assert_eq!(message(error), "GetAgent: unknown field `force`");
    let error = Action::from_map(&action("ListAgents", &[("page", Ipld::Integer(2))])).unwrap_err();
    assert_eq!(message(error), "ListAgents: unknown field `page`");
    let mut extended = definition();
    if let Ipld::Map(m) = &mut extended {
        m.insert("enabledModels".into(), Ipld::List(vec![]));
    }
    let error = Action::from_map(&action("CreateAgent", &[("definition", extended)])).unwrap_err();
    assert_eq!(
        message(error),
        "CreateAgent: unknown field `definition.enabledModels`"
    );
    let part = Ipld::Map(map(&[
        ("type", s("attachment")),
        ("id", s("x")),
        ("name", s("y")),
    ]));
    let error = Action::from_map(&action(
        "MessageSession",
        &[("sessionId", s("s")), ("content", Ipld::List(vec![part]))],
    ))
    .unwrap_err();
    assert_eq!(
        message(error),
        "MessageSession: unknown field `content[0].name`"
    );
}

#[test]
fn wrong_types_are_named() {
    let cases: Vec<(ActionMap, &str)> = vec![
        (
            action("GetAgent", &[("agentId", Ipld::Integer(7))]),
            "GetAgent: `agentId` must be a string",
        ),
        (
            action("SetAgentPublicRead", &[("agentId", s("a")), ("publicRead", s("yes"))]),
            "SetAgentPublicRead: `publicRead` must be a boolean",
        ),
        (
            action("GetSession", &[("sessionId", s("s")), ("afterSeq", Ipld::Integer(-1))]),
            "GetSession: `afterSeq` must be a non-negative integer",
        ),
        (
            action("GetSession", &[("sessionId", s("s")), ("afterSeq", Ipld::Float(1.5))]),
            "GetSession: `afterSeq` must be a non-negative integer",
        ),
        (
            action("SetSecret", &[("name", s("k")), ("value", s("plaintext"))]),
            "SetSecret: `value` must be bytes",
        ),
        (
            action("SetSecret", &[("name", s("k")), ("value", Ipld::Bytes(vec![1])), ("metadata", Ipld::List(vec![]))]),
            "SetSecret: `metadata` must be a map",
        ),
        (
            action(
                "InviteAgentCollaborator",
                &[("agentId", s("a")), ("accountId", s("z")), ("role", s("owner"))],
            ),
            "InviteAgentCollaborator: `role` must be one of \"reader\", \"writer\"",
        ),
        (
            action("MessageSession", &[("sessionId", s("s")), ("content", s("hi"))]),
            "MessageSession: `content` must be a list",
        ),
        (
            action(
                "MessageSession",
                &[("sessionId", s("s")), ("content", Ipld::List(vec![Ipld::Map(map(&[("type", s("image"))]))]))],
            ),
            "MessageSession: `content[0].type` must be one of \"text\", \"context\", \"attachment\"",
        ),
        (
            action("UpdateSession", &[("sessionId", s("s")), ("modelOverride", s("gpt"))]),
            "UpdateSession: `modelOverride` must be a map or null",
        ),
        (
            action(
                "SetModelProvider",
                &[("name", s("p")), ("provider", Ipld::Map(map(&[("type", s("openai")), ("secretRefs", Ipld::Map(map(&[("apiKey", Ipld::Integer(1))])))])))],
            ),
            "SetModelProvider: `provider.secretRefs.apiKey` must be a string",
        ),
        (
            action("ListSessions", &[("cursor", Ipld::Map(map(&[("updatedBefore", s("x")), ("idBefore", s("s"))])))]),
            "ListSessions: `cursor.updatedBefore` must be an integer",
        ),
        (
            action("CreateAgent", &[("definition", s("agent"))]),
            "CreateAgent: `definition` must be a map",
        ),
        (
            action("AuthorizeSigner", &[("signer", s("not-a-principal")), ("role", s("AGENT"))]),
            "AuthorizeSigner: `signer`: bad principal: expected base58btc multibase (a leading 'z')",
        ),
        (
            action("InvokeSessionTool", &[("sessionId", s("s")), ("verb", s("delegate")), ("input", Ipld::Null)]),
            "InvokeSessionTool: `verb` must be one of \"read\", \"write\", \"call\"",
        ),
        (
            action("WriteAgentMemoryFile", &[("agentId", s("a")), ("path", s("p")), ("content", Ipld::Integer(1))]),
            "WriteAgentMemoryFile: `content` must be a string or bytes",
        ),
        (
            action("SaveAgentTool", &[("agentId", s("a")), ("tool", Ipld::Map(map(&[("name", s("n")), ("description", s("d")), ("input", s("{}")), ("source", s("x"))])))]),
            "SaveAgentTool: `tool.input` must be a map",
        ),
        (
            action("SaveAgentTool", &[("agentId", s("a")), ("tool", Ipld::Map(map(&[("name", s("n")), ("description", s("d")), ("input", Ipld::Map(map(&[]))), ("source", s("x")), ("enabled", s("yes"))])))]),
            "SaveAgentTool: `tool.enabled` must be a boolean",
        ),
    ];
    for (map, expected) in cases {
        assert_eq!(message(Action::from_map(&map).unwrap_err()), expected);
    }
}

#[test]
fn absent_and_null_optionals_read_as_none_but_a_null_override_clears() {
    let decoded = Action::from_map(&action(
        "CreateSession",
        &[("agentId", s("a")), ("title", Ipld::Null)],
    ))
    .unwrap();
    assert_eq!(
        decoded,
        Action::CreateSession {
            agent_id: "a".into(),
            title: None,
            client_request_id: None
        }
    );
    let cleared = Action::from_map(&action(
        "UpdateSession",
        &[("sessionId", s("s")), ("modelOverride", Ipld::Null)],
    ))
    .unwrap();
    let untouched = Action::from_map(&action("UpdateSession", &[("sessionId", s("s"))])).unwrap();
    assert!(matches!(
        cleared,
        Action::UpdateSession {
            model_override: Some(Ipld::Null),
            ..
        }
    ));
    assert!(matches!(
        untouched,
        Action::UpdateSession {
            model_override: None,
            ..
        }
    ));
}

#[test]
fn unknown_and_reference_only_actions_are_unsupported() {
    for name in ["NoSuchThing", "PrepareDocumentChange"] {
        let decoded = Action::from_map(&action(name, &[("anything", Ipld::Integer(1))])).unwrap();
        assert_eq!(decoded, Action::Unsupported(name.to_string()));
        assert_eq!(decoded.name(), name);
        assert_eq!(decoded.to_map().unwrap_err().code(), "bad_request");
    }
}

#[test]
fn a_map_without_a_string_name_is_refused() {
    let mut nameless = action("ListAgents", &[]);
    nameless.insert("_".into(), Ipld::Integer(1));
    assert_eq!(
        Action::from_map(&nameless).unwrap_err().code(),
        "bad_request"
    );
}

#[test]
fn definitions_read_through_serde_as_strictly() {
    let bytes = crate::seed::cbor::to_canonical(&definition()).unwrap();
    let read: AgentDefinition = crate::seed::cbor::from_slice(&bytes, 1 << 16).unwrap();
    assert_eq!(read.adapter, None);
    assert_eq!(read.system_prompt, SystemPrompt::Text("Be brief.".into()));
    let mut extended = definition();
    if let Ipld::Map(m) = &mut extended {
        m.insert("extra".into(), Ipld::Bool(true));
    }
    let bytes = crate::seed::cbor::to_canonical(&extended).unwrap();
    assert!(crate::seed::cbor::from_slice::<AgentDefinition>(&bytes, 1 << 16).is_err());
}

#[test]
fn space_actions_name_what_is_missing_or_unknown() {
    let error = Action::from_map(&action(
        "InvokeSessionTool",
        &[("sessionId", s("s")), ("verb", s("read"))],
    ))
    .unwrap_err();
    assert_eq!(message(error), "InvokeSessionTool: missing field `input`");
    // `input` is any value, null included.
    let decoded = Action::from_map(&action(
        "InvokeSessionTool",
        &[
            ("sessionId", s("s")),
            ("verb", s("read")),
            ("input", Ipld::Null),
        ],
    ))
    .unwrap();
    assert!(matches!(
        decoded,
        Action::InvokeSessionTool {
            verb: ToolVerb::Read,
            input: Ipld::Null,
            ..
        }
    ));
    let tool = Ipld::Map(map(&[
        ("name", s("n")),
        ("description", s("d")),
        ("input", Ipld::Map(map(&[]))),
        ("source", s("x")),
        ("binding", s("search")),
    ]));
    let error = Action::from_map(&action(
        "SaveAgentTool",
        &[("agentId", s("a")), ("tool", tool)],
    ))
    .unwrap_err();
    assert_eq!(
        message(error),
        "SaveAgentTool: unknown field `tool.binding`"
    );
    let error =
        Action::from_map(&action("ReadAgentMemoryFile", &[("agentId", s("a"))])).unwrap_err();
    assert_eq!(message(error), "ReadAgentMemoryFile: missing field `path`");
}
