//! An agent's Space over the signed API, end to end through the real
//! binary: its tools (builtins with their grants, authored lambdas saved,
//! edited, renamed and deleted, and what a bad one gets), its memory (text
//! and bytes written, listed, read and deleted), who may do which, and the
//! change an `agents/<id>` subscriber hears.

#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
mod common;

use std::collections::BTreeMap;

use agentos_protocol::seed::{ActionMap, Envelope, Ipld};
use agentos_tests::http::Target;
use agentos_tests::seed::{call, field, fresh_ts, post, Answer, Signer};
use client::Ws;
use common::{data_code, Backend, Options, Sidecar};
use serde_json::{json, Value};

async fn start(backend: Backend) -> (Sidecar, Target, String) {
    let sc = Sidecar::start_with(
        backend,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0"}}),
            ..Options::default()
        },
    )
    .await;
    let addr = sc.ready["http"].as_str().expect("http").to_owned();
    (sc, Target::from_ready(&addr), addr)
}

fn definition(tools: Option<Value>) -> Value {
    let mut d = json!({
        "name": "Helper",
        "systemPrompt": "Be brief.",
        "modelProvider": "openai",
        "model": "gpt-5-mini",
    });
    if let Some(tools) = tools {
        d["tools"] = tools;
    }
    d
}

async fn create_agent(t: &Target, owner: &Signer) -> String {
    let created = call(
        t,
        owner,
        json!({"_": "CreateAgent", "definition": definition(None)}),
    )
    .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    created.text("agentId")
}

fn list(value: &Ipld) -> &[Ipld] {
    match value {
        Ipld::List(items) => items,
        other => panic!("not a list: {other:?}"),
    }
}

fn text(value: &Ipld, name: &str) -> String {
    match field(value, name) {
        Ipld::String(s) => s.clone(),
        other => panic!("{name} is not a string: {other:?} in {value:?}"),
    }
}

fn by_name<'a>(tools: &'a [Ipld], name: &str) -> &'a Ipld {
    tools
        .iter()
        .find(|t| text(t, "name") == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools:?}"))
}

fn lambda(name: &str, source: &str) -> Value {
    json!({
        "name": name,
        "description": "Counts the words of a text. Whitespace separates them.",
        "input": {"type": "object", "properties": {"text": {"type": "string"}},
                  "required": ["text"]},
        "source": source,
    })
}

/// Signs an action given as IPLD (for bytes that are not UTF-8 text).
fn sign_map(signer: &Signer, map: ActionMap) -> Vec<u8> {
    let mut envelope = Envelope::unsigned(map, signer.account, signer.principal(), fresh_ts());
    envelope.protocol = signer.protocol;
    envelope.sign_with(&signer.key).expect("sign");
    envelope.encode().expect("encode")
}

fn refused(answer: &Answer, status: u16, code: &str, says: &str) {
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (status, code),
        "{:?}",
        answer.body
    );
    let message = answer.text("message");
    assert!(message.contains(says), "{says:?} not in {message:?}");
}

#[tokio::test]
async fn tools_are_listed_with_their_grants_and_lambdas_are_authored() {
    let (_sc, t, _) = start(Backend::SqliteFile).await;
    let owner = Signer::new();
    let agent_id = create_agent(&t, &owner).await;

    let listed = call(
        &t,
        &owner,
        json!({"_": "ListAgentTools", "agentId": agent_id}),
    )
    .await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    assert_eq!(listed.text("_"), "ListAgentToolsResponse");
    assert_eq!(listed.text("agentId"), agent_id);
    let tools = list(listed.field("tools"));
    let names: Vec<String> = tools.iter().map(|t| text(t, "name")).collect();
    assert_eq!(names, ["memory_search", "search", "web_fetch"]);
    let search = by_name(tools, "search");
    assert_eq!(text(search, "kind"), "builtin");
    assert!(text(search, "cid").starts_with("bafyrei"));
    assert_eq!(field(search, "granted"), &Ipld::Bool(true));
    assert_eq!(field(search, "enabled"), &Ipld::Bool(true));
    assert_eq!(field(search, "source"), &Ipld::Null);
    assert_eq!(text(field(search, "input"), "type"), "object");
    assert_eq!(
        field(by_name(tools, "web_fetch"), "granted"),
        &Ipld::Bool(false)
    );

    // Granting web_fetch in the definition is what offers it.
    let updated = call(
        &t,
        &owner,
        json!({"_": "UpdateAgent", "agentId": agent_id,
               "definition": definition(Some(json!(["search", "web_fetch"])))}),
    )
    .await;
    assert_eq!(updated.status, 200, "{:?}", updated.body);
    let listed = call(
        &t,
        &owner,
        json!({"_": "ListAgentTools", "agentId": agent_id}),
    )
    .await;
    let tools = list(listed.field("tools"));
    assert_eq!(
        field(by_name(tools, "web_fetch"), "granted"),
        &Ipld::Bool(true)
    );

    // An authored tool: saved, edited (a new CID), renamed, deleted.
    let saved = call(
        &t,
        &owner,
        json!({"_": "SaveAgentTool", "agentId": agent_id,
               "tool": lambda("word_count", "export default () => 1")}),
    )
    .await;
    assert_eq!(saved.status, 200, "{:?}", saved.body);
    assert_eq!(saved.text("_"), "SaveAgentToolResponse");
    let tool = saved.field("tool");
    assert_eq!(text(tool, "kind"), "lambda");
    assert_eq!(text(tool, "runtime"), "typescript");
    assert_eq!(text(tool, "summary"), "Counts the words of a text.");
    assert_eq!(field(tool, "granted"), &Ipld::Bool(true));
    let first_cid = text(tool, "cid");
    let created_at = field(tool, "createdAt").clone();

    let edited = call(
        &t,
        &owner,
        json!({"_": "SaveAgentTool", "agentId": agent_id, "previousName": "word_count",
               "tool": lambda("word_count", "export default () => 2")}),
    )
    .await;
    assert_eq!(edited.status, 200, "{:?}", edited.body);
    let edited_cid = text(edited.field("tool"), "cid");
    assert_ne!(edited_cid, first_cid);
    assert_eq!(field(edited.field("tool"), "createdAt"), &created_at);

    let renamed = call(
        &t,
        &owner,
        json!({"_": "SaveAgentTool", "agentId": agent_id, "previousName": "word_count",
               "tool": lambda("token_count", "export default () => 2")}),
    )
    .await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    assert_eq!(field(renamed.field("tool"), "createdAt"), &created_at);
    let listed = call(
        &t,
        &owner,
        json!({"_": "ListAgentTools", "agentId": agent_id}),
    )
    .await;
    let names: Vec<String> = list(listed.field("tools"))
        .iter()
        .map(|t| text(t, "name"))
        .collect();
    assert_eq!(
        names,
        ["memory_search", "search", "web_fetch", "token_count"]
    );
    let source = text(
        by_name(list(listed.field("tools")), "token_count"),
        "source",
    );
    assert_eq!(source, "export default () => 2");

    // What a bad tool gets: 400, saying why.
    let long_source = "x".repeat(256 * 1024 + 1);
    for (tool, says) in [
        (lambda("Word Count", "s"), "tool name \"Word Count\""),
        (lambda("plan", "s"), "a verb's name"),
        (lambda("web_fetch", "s"), "a builtin tool's name"),
        (
            lambda("long_one", &long_source),
            "the source is 262145 bytes",
        ),
        (
            json!({"name": "arrays", "description": "d", "source": "s",
                   "input": {"type": "array", "items": {"type": "string"}}}),
            "the input schema: /type: the root must be",
        ),
        (
            json!({"name": "typos", "description": "d", "source": "s",
                   "input": {"type": "object", "properties": {"n": {"type": "integr"}}}}),
            "/properties/n/type: unknown type",
        ),
    ] {
        let answer = call(
            &t,
            &owner,
            json!({"_": "SaveAgentTool", "agentId": agent_id, "tool": tool}),
        )
        .await;
        refused(&answer, 400, "invalid_argument", says);
    }
    // A field the reference does not have is the action's shape.
    let mut extra = lambda("extra_field", "s");
    extra["binding"] = json!("search");
    let answer = call(
        &t,
        &owner,
        json!({"_": "SaveAgentTool", "agentId": agent_id, "tool": extra}),
    )
    .await;
    refused(&answer, 400, "bad_request", "tool.binding");

    let deleted = call(
        &t,
        &owner,
        json!({"_": "DeleteAgentTool", "agentId": agent_id, "name": "token_count"}),
    )
    .await;
    assert_eq!(deleted.status, 200, "{:?}", deleted.body);
    assert_eq!(deleted.field("deleted"), &Ipld::Bool(true));
    let again = call(
        &t,
        &owner,
        json!({"_": "DeleteAgentTool", "agentId": agent_id, "name": "token_count"}),
    )
    .await;
    assert_eq!(again.field("deleted"), &Ipld::Bool(false));
    let builtin = call(
        &t,
        &owner,
        json!({"_": "DeleteAgentTool", "agentId": agent_id, "name": "search"}),
    )
    .await;
    refused(&builtin, 400, "invalid_argument", "cannot be deleted");

    // Running verbs as the user needs a session the caller may write.
    let invoke = call(
        &t,
        &owner,
        json!({"_": "InvokeSessionTool", "sessionId": "s", "verb": "read",
               "input": {"address": "~/memory/"}}),
    )
    .await;
    refused(&invoke, 404, "not_found", "session s");
    let bad_verb = call(
        &t,
        &owner,
        json!({"_": "InvokeSessionTool", "sessionId": "s", "verb": "delegate", "input": {}}),
    )
    .await;
    refused(&bad_verb, 400, "bad_request", "`verb`");
}

async fn memory_is_written_listed_read_and_deleted(backend: Backend) {
    let (sc, t, _) = start(backend).await;
    let owner = Signer::new();
    let agent_id = create_agent(&t, &owner).await;

    let empty = call(
        &t,
        &owner,
        json!({"_": "ListAgentMemory", "agentId": agent_id}),
    )
    .await;
    assert_eq!(empty.status, 200, "{:?}", empty.body);
    assert!(list(empty.field("entries")).is_empty());
    assert_eq!(empty.field("totalBytes"), &Ipld::Integer(0));

    let wrote = call(
        &t,
        &owner,
        json!({"_": "WriteAgentMemoryFile", "agentId": agent_id,
               "path": "notes//today.md", "content": "# Today\nwalk the dog\n"}),
    )
    .await;
    assert_eq!(wrote.status, 200, "{:?}", wrote.body);
    let entry = wrote.field("entry");
    assert_eq!(text(entry, "path"), "notes/today.md");
    assert_eq!(text(entry, "type"), "file");
    assert_eq!(text(entry, "mimeType"), "text/markdown");
    assert_eq!(field(entry, "size"), &Ipld::Integer(21));

    let bytes = vec![0x89, b'P', b'N', b'G', 0xff, 0x00, 0xfe];
    let map: ActionMap = BTreeMap::from([
        ("_".to_owned(), Ipld::String("WriteAgentMemoryFile".into())),
        ("agentId".to_owned(), Ipld::String(agent_id.clone())),
        ("path".to_owned(), Ipld::String("pics/logo.png".into())),
        ("content".to_owned(), Ipld::Bytes(bytes.clone())),
    ]);
    let wrote = post(&t, &sign_map(&owner, map)).await;
    assert_eq!(wrote.status, 200, "{:?}", wrote.body);

    let listed = call(
        &t,
        &owner,
        json!({"_": "ListAgentMemory", "agentId": agent_id}),
    )
    .await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let entries: Vec<(String, String)> = list(listed.field("entries"))
        .iter()
        .map(|e| (text(e, "path"), text(e, "type")))
        .collect();
    let expected = [
        ("notes", "dir"),
        ("notes/today.md", "file"),
        ("pics", "dir"),
        ("pics/logo.png", "file"),
    ];
    assert_eq!(entries, expected.map(|(p, k)| (p.to_owned(), k.to_owned())));
    assert_eq!(listed.field("totalBytes"), &Ipld::Integer(28));

    let read = call(
        &t,
        &owner,
        json!({"_": "ReadAgentMemoryFile", "agentId": agent_id, "path": "notes/today.md"}),
    )
    .await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    let file = read.field("file");
    assert_eq!(text(file, "encoding"), "utf8");
    assert_eq!(text(file, "content"), "# Today\nwalk the dog\n");
    assert_eq!(field(file, "data"), &Ipld::Null);

    let read = call(
        &t,
        &owner,
        json!({"_": "ReadAgentMemoryFile", "agentId": agent_id, "path": "pics/logo.png"}),
    )
    .await;
    let file = read.field("file");
    assert_eq!(text(file, "encoding"), "binary");
    assert_eq!(field(file, "data"), &Ipld::Bytes(bytes));
    assert_eq!(text(file, "mimeType"), "image/png");
    assert_eq!(field(file, "content"), &Ipld::Null);

    // The memory is a file tree of the VM: the host sees it where it lives.
    let on_disk = sc
        .ok(
            "fs/stat",
            json!({"path": format!("/.agentos/agents/{agent_id}/memory/notes/today.md")}),
        )
        .await;
    assert_eq!(on_disk["size"], 21);

    for (path, status, code) in [
        ("../escape.md", 400, "invalid_path"),
        // As the reference: a leading `/` is inside memory too.
        ("/etc/passwd", 404, "not_found"),
        ("notes/missing.md", 404, "not_found"),
        ("notes", 409, "conflict"),
    ] {
        let answer = call(
            &t,
            &owner,
            json!({"_": "ReadAgentMemoryFile", "agentId": agent_id, "path": path}),
        )
        .await;
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (status, code),
            "{path}: {:?}",
            answer.body
        );
    }

    let deleted = call(
        &t,
        &owner,
        json!({"_": "DeleteAgentMemoryFile", "agentId": agent_id, "path": "notes/"}),
    )
    .await;
    assert_eq!(deleted.status, 200, "{:?}", deleted.body);
    assert_eq!(deleted.field("deleted"), &Ipld::Bool(true));
    assert_eq!(deleted.text("path"), "notes");
    let again = call(
        &t,
        &owner,
        json!({"_": "DeleteAgentMemoryFile", "agentId": agent_id, "path": "notes"}),
    )
    .await;
    assert_eq!(again.field("deleted"), &Ipld::Bool(false));
    let listed = call(
        &t,
        &owner,
        json!({"_": "ListAgentMemory", "agentId": agent_id}),
    )
    .await;
    assert_eq!(list(listed.field("entries")).len(), 2);

    // Deleting the agent takes its memory and its tools with it.
    let gone = call(&t, &owner, json!({"_": "DeleteAgent", "agentId": agent_id})).await;
    assert_eq!(gone.status, 200, "{:?}", gone.body);
    let error = sc
        .err(
            "fs/stat",
            json!({"path": format!("/.agentos/agents/{agent_id}")}),
        )
        .await;
    assert_eq!(data_code(&error), "ENOENT");
    let answer = call(
        &t,
        &owner,
        json!({"_": "ListAgentMemory", "agentId": agent_id}),
    )
    .await;
    assert_eq!(answer.status, 404);
}

both_backends!(memory_is_written_listed_read_and_deleted);

#[tokio::test]
async fn readers_read_writers_write_and_strangers_find_nothing() {
    let (_sc, t, _) = start(Backend::SqliteFile).await;
    let owner = Signer::new();
    let agent_id = create_agent(&t, &owner).await;
    let reader = Signer::new();
    let writer = Signer::new();
    let stranger = Signer::new();
    for (who, role) in [(&reader, "reader"), (&writer, "writer")] {
        let invited = call(
            &t,
            &owner,
            json!({"_": "InviteAgentCollaborator", "agentId": agent_id,
                   "accountId": who.id(), "role": role}),
        )
        .await;
        assert_eq!(invited.status, 200, "{:?}", invited.body);
        let accepted = call(
            &t,
            who,
            json!({"_": "AcceptAgentInvite", "agentId": agent_id}),
        )
        .await;
        assert_eq!(accepted.status, 200, "{:?}", accepted.body);
    }

    let write = |path: &str| {
        json!({"_": "WriteAgentMemoryFile", "agentId": agent_id, "path": path,
               "content": "shared"})
    };
    let save = json!({"_": "SaveAgentTool", "agentId": agent_id,
                      "tool": lambda("shared_tool", "export default () => 0")});
    // A writer writes, into the owner's Space.
    let wrote = call(&t, &writer, write("from-writer.md")).await;
    assert_eq!(wrote.status, 200, "{:?}", wrote.body);
    let saved = call(&t, &writer, save.clone()).await;
    assert_eq!(saved.status, 200, "{:?}", saved.body);
    // The grants are the owner's: a writer may edit the agent but not them.
    let regrant = |tools: Option<Value>| json!({"_": "UpdateAgent", "agentId": agent_id, "definition": definition(tools)});
    let kept = call(&t, &writer, regrant(None)).await;
    assert_eq!(kept.status, 200, "{:?}", kept.body);
    let widened = call(&t, &writer, regrant(Some(json!(["search", "web_fetch"])))).await;
    assert_eq!(
        (widened.status, widened.code().as_str()),
        (403, "forbidden"),
        "{:?}",
        widened.body
    );
    // The same grants spelled differently are no change.
    let same = call(
        &t,
        &writer,
        regrant(Some(json!(["search", "memory_search"]))),
    )
    .await;
    assert_eq!(same.status, 200, "{:?}", same.body);
    let mut moved = definition(None);
    moved["adapter"] = json!("echo");
    let moved = call(
        &t,
        &writer,
        json!({"_": "UpdateAgent", "agentId": agent_id, "definition": moved}),
    )
    .await;
    assert_eq!(
        (moved.status, moved.code().as_str()),
        (403, "forbidden"),
        "{:?}",
        moved.body
    );
    let widened = call(&t, &owner, regrant(Some(json!(["search", "web_fetch"])))).await;
    assert_eq!(widened.status, 200, "{:?}", widened.body);

    // A reader reads and may not write.
    let reads = [
        json!({"_": "ListAgentMemory", "agentId": agent_id}),
        json!({"_": "ListAgentTools", "agentId": agent_id}),
        json!({"_": "ReadAgentMemoryFile", "agentId": agent_id, "path": "from-writer.md"}),
    ];
    for action in &reads {
        let answer = call(&t, &reader, action.clone()).await;
        assert_eq!(answer.status, 200, "{action}: {:?}", answer.body);
    }
    let read = call(&t, &reader, reads[2].clone()).await;
    assert_eq!(text(read.field("file"), "content"), "shared");
    let writes = [
        write("from-reader.md"),
        save.clone(),
        json!({"_": "DeleteAgentMemoryFile", "agentId": agent_id, "path": "from-writer.md"}),
        json!({"_": "DeleteAgentTool", "agentId": agent_id, "name": "shared_tool"}),
    ];
    for action in &writes {
        let answer = call(&t, &reader, action.clone()).await;
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (403, "forbidden"),
            "{action}"
        );
    }

    // A stranger hears what it would for an agent that does not exist.
    for action in reads.iter().chain(writes.iter()) {
        let answer = call(&t, &stranger, action.clone()).await;
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (404, "not_found"),
            "{action}"
        );
        let mut missing = action.clone();
        missing["agentId"] = json!("no-such-agent");
        let nothing = call(&t, &owner, missing).await;
        assert_eq!(nothing.status, 404);
        assert_eq!(
            answer.text("message").replace(&agent_id, "no-such-agent"),
            nothing.text("message")
        );
    }
}

#[tokio::test]
async fn an_agents_subscribers_hear_its_space_change() {
    let (_sc, t, addr) = start(Backend::SqliteFile).await;
    let owner = Signer::new();
    let agent_id = create_agent(&t, &owner).await;
    let agent_key = format!("agents/{agent_id}");
    let account_key = format!("account/{}", owner.id());
    let mut ws = Ws::open(&addr).await;
    ws.subscribed(&owner, &agent_key, None).await;
    ws.subscribed(&owner, &account_key, None).await;

    let wrote = call(
        &t,
        &owner,
        json!({"_": "WriteAgentMemoryFile", "agentId": agent_id, "path": "a.md",
               "content": "x"}),
    )
    .await;
    assert_eq!(wrote.status, 200, "{:?}", wrote.body);
    let agent = ws.next_where(|e| e["key"] == agent_key.as_str()).await;
    assert_eq!(agent["_"], "change");
    assert_eq!(agent["value"]["id"], agent_id.as_str());
    let change = ws.next_where(|e| e["key"] == account_key.as_str()).await;
    assert_eq!(change["value"]["reason"], "agent-memory-changed");
    assert_eq!(change["value"]["agentId"], agent_id.as_str());

    let saved = call(
        &t,
        &owner,
        json!({"_": "SaveAgentTool", "agentId": agent_id,
               "tool": lambda("word_count", "export default () => 1")}),
    )
    .await;
    assert_eq!(saved.status, 200, "{:?}", saved.body);
    let change = ws.next_where(|e| e["key"] == account_key.as_str()).await;
    assert_eq!(change["value"]["reason"], "agent-tools-changed");
}
