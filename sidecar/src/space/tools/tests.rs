use std::sync::Arc;

use agentos_protocol::seed::{AgentDefinition, SystemPrompt};
use agentos_schema::{migrate_all, SharedDatabase};
use serde_json::json;

use super::*;
use crate::control::{AgentRecord, AgentStatus};
use agentos_storage::testing::{all_backends, sqlite_file, CountingDatabase, TestDb};

const OWNER: &str = "z6MkOwner";
const AGENT: &str = "agent-1";

async fn fresh() -> TestDb {
    let test = sqlite_file().await;
    migrate_all(test.db.as_ref()).await.expect("migrate");
    test
}

async fn add_agent(db: &SharedDatabase, tools: Option<Vec<String>>) {
    let definition = AgentDefinition {
        name: "Helper".into(),
        system_prompt: SystemPrompt::Text("Be brief.".into()),
        model_provider: "openai".into(),
        model: "m".into(),
        reasoning_level: None,
        tools,
        mcp_servers: None,
        signing_key: None,
        signing_keys: None,
        metadata: None,
        adapter: None,
    };
    let record = AgentRecord {
        agent_id: AGENT.into(),
        account_id: OWNER.into(),
        definition: cbor::to_canonical(&definition).expect("encode"),
        name: "Helper".into(),
        adapter: "builtin".into(),
        status: AgentStatus::Idle,
        public_read: false,
        created_at_ms: 1,
        updated_at_ms: 1,
    };
    let written = ControlStore::new(db.clone())
        .insert_agent(&record, 10)
        .await
        .expect("agent");
    assert!(matches!(written, Guarded::Done { .. }));
}

/// A test's schema as IPLD.
fn to_ipld(value: &Value) -> Ipld {
    json_to_ipld(value, JsonForm::Plain).expect("a test schema converts")
}

fn lambda(name: &str) -> LambdaInput {
    LambdaInput {
        name: name.into(),
        summary: None,
        description: "Counts the words of a text. Spaces separate words.".into(),
        input: to_ipld(&json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"]
        })),
        output: Some(to_ipld(&json!({"type": "object",
            "properties": {"count": {"type": "integer"}}}))),
        source: "export default ({text}) => ({count: text.split(/\\s+/).length})".into(),
        runtime: None,
        enabled: None,
    }
}

fn names(records: &[ToolRecord]) -> Vec<&str> {
    records.iter().map(|r| r.document.name.as_str()).collect()
}

#[tokio::test]
async fn listing_materialises_builtins_once_and_grants_follow_the_definition() {
    for test in all_backends().await {
        migrate_all(test.db.as_ref()).await.expect("migrate");
        let counting = CountingDatabase::new(test.db.clone());
        let db: SharedDatabase = counting.clone();
        let tools = ToolDocuments::new(db, 200).expect("tools");
        let listed = tools.list(OWNER, AGENT, None).await.expect("list");
        assert_eq!(
            names(&listed),
            ["memory_search", "search", "web_fetch"],
            "{}",
            test.name
        );
        assert_eq!(counting.take().transactions, 1, "{}", test.name);
        assert!(listed[0].granted && listed[1].granted && !listed[2].granted);
        assert_eq!(listed[0].cid, registry::builtins()[0].cid().expect("cid"));
        assert_eq!(listed[0].document.binding.as_deref(), Some("memory_search"));

        // Unchanged builtins are not written again: one read, no transaction.
        let grants = vec![
            "memory_search".to_owned(),
            "search".to_owned(),
            "web_fetch".to_owned(),
        ];
        let again = tools.list(OWNER, AGENT, Some(&grants)).await.expect("list");
        let counts = counting.take();
        assert_eq!(
            (counts.queries, counts.transactions),
            (1, 0),
            "{}",
            test.name
        );
        assert!(again.iter().all(|r| r.granted));
        assert_eq!(again[0].created_at_ms, listed[0].created_at_ms);
        test.shutdown().await;
    }
}

#[tokio::test]
async fn a_changed_builtin_rewrites_its_row_and_a_retired_one_goes() {
    let test = fresh().await;
    let old = ToolDocuments::new(test.db.clone(), 200).expect("tools");
    let first = old.list(OWNER, AGENT, None).await.expect("list");

    let mut shipped = registry::builtins();
    shipped[0]
        .description
        .push_str(" (now also searches attachments)");
    shipped.truncate(1);
    let counting = CountingDatabase::new(test.db.clone());
    let new = ToolDocuments::with_builtins(counting.clone(), 200, shipped.clone()).expect("tools");
    let listed = new.list(OWNER, AGENT, None).await.expect("list");
    assert_eq!(counting.take().transactions, 1);
    assert_eq!(names(&listed), ["memory_search"]);
    assert_eq!(listed[0].document, shipped[0]);
    assert_ne!(listed[0].cid, first[0].cid);
    assert_eq!(listed[0].created_at_ms, first[0].created_at_ms);
    assert!(listed[0].updated_at_ms >= first[0].updated_at_ms);
    new.list(OWNER, AGENT, None).await.expect("list");
    assert_eq!(counting.take().transactions, 0);
}

#[tokio::test]
async fn lambdas_are_saved_edited_renamed_and_deleted() {
    let test = fresh().await;
    add_agent(&test.db, None).await;
    let tools = ToolDocuments::new(test.db.clone(), 200).expect("tools");
    let saved = tools
        .save_lambda(OWNER, AGENT, lambda("word_count"), None)
        .await
        .expect("save");
    assert_eq!(saved.document.kind, ToolKind::Lambda);
    assert_eq!(saved.document.runtime.as_deref(), Some("typescript"));
    assert_eq!(saved.document.summary, "Counts the words of a text.");
    assert!(saved.enabled && saved.granted);
    assert_eq!(saved.cid, saved.document.cid().expect("cid"));

    // An edit changes the CID and keeps the creation time and the flag.
    let mut edited = lambda("word_count");
    edited.source = "export default () => ({count: 0})".into();
    edited.enabled = Some(false);
    let edited = tools
        .save_lambda(OWNER, AGENT, edited, Some("word_count"))
        .await
        .expect("edit");
    assert_ne!(edited.cid, saved.cid);
    assert_eq!(edited.created_at_ms, saved.created_at_ms);
    assert!(!edited.enabled);
    let kept = tools
        .save_lambda(OWNER, AGENT, lambda("word_count"), None)
        .await
        .expect("edit");
    assert!(!kept.enabled, "an absent flag keeps what was set");

    // A rename is one write, keeping the creation time.
    let mut renamed = lambda("token_count");
    renamed.runtime = Some("python".into());
    renamed.source = "def main(input):\n    return {'count': 1}".into();
    let renamed = tools
        .save_lambda(OWNER, AGENT, renamed, Some("word_count"))
        .await
        .expect("rename");
    assert_eq!(renamed.created_at_ms, saved.created_at_ms);
    assert!(tools
        .get(OWNER, AGENT, "word_count")
        .await
        .expect("get")
        .is_none());
    let got = tools.get(OWNER, AGENT, "token_count").await.expect("get");
    assert_eq!(got.as_ref().map(|r| &r.cid), Some(&renamed.cid));

    // A rename onto a taken name, or of a missing tool, writes nothing.
    tools
        .save_lambda(OWNER, AGENT, lambda("other_count"), None)
        .await
        .expect("save");
    let taken = tools
        .save_lambda(OWNER, AGENT, lambda("other_count"), Some("token_count"))
        .await
        .expect_err("taken");
    assert_eq!(taken.code(), "conflict");
    let missing = tools
        .save_lambda(OWNER, AGENT, lambda("fresh"), Some("nothing_here"))
        .await
        .expect_err("missing");
    assert_eq!(missing.code(), "not_found");
    let listed = tools.list(OWNER, AGENT, None).await.expect("list");
    assert_eq!(
        names(&listed),
        [
            "memory_search",
            "search",
            "web_fetch",
            "other_count",
            "token_count"
        ]
    );

    assert!(tools
        .delete_lambda(OWNER, AGENT, "token_count")
        .await
        .expect("delete"));
    assert!(!tools
        .delete_lambda(OWNER, AGENT, "token_count")
        .await
        .expect("again"));
    let builtin = tools
        .delete_lambda(OWNER, AGENT, "search")
        .await
        .expect_err("builtin");
    assert_eq!(builtin.code(), "invalid_argument");
    assert!(
        builtin.to_string().contains("definition.tools"),
        "{builtin}"
    );

    // Another account reaches none of them.
    assert!(tools
        .get("z6MkOther", AGENT, "other_count")
        .await
        .expect("get")
        .is_none());
    assert_eq!(tools.delete_agent(AGENT).await.expect("delete agent"), 4);
}

#[tokio::test]
async fn get_materialises_a_builtin_and_reads_grants_from_the_definition() {
    let test = fresh().await;
    add_agent(&test.db, Some(vec!["web_fetch".into()])).await;
    let tools = ToolDocuments::new(test.db.clone(), 200).expect("tools");
    let fetch = tools.get(OWNER, AGENT, "web_fetch").await.expect("get");
    let fetch = fetch.expect("materialised");
    assert!(fetch.granted);
    let search = tools.get(OWNER, AGENT, "search").await.expect("get");
    assert!(!search.expect("search").granted);
    let contract = fetch.contract_markdown();
    assert!(contract.starts_with("# web_fetch\n"), "{contract}");
    assert!(contract.contains(&fetch.cid));
    assert!(contract.contains("\"url\""), "{contract}");
    assert!(!contract.contains("## Output schema"));
    assert!(tools
        .get(OWNER, AGENT, "nothing")
        .await
        .expect("get")
        .is_none());
}

#[tokio::test]
async fn bad_lambdas_are_refused_naming_why() {
    let test = fresh().await;
    let tools = ToolDocuments::new(test.db.clone(), 200).expect("tools");
    let cases: Vec<(LambdaInput, &str)> = vec![
        (lambda("Bad"), "must be 2 to 64 characters"),
        (lambda("x"), "must be 2 to 64 characters"),
        (lambda(&"a".repeat(65)), "must be 2 to 64 characters"),
        (lambda("search"), "builtin tool's name"),
        (lambda("continue_session"), "a verb's name"),
        (
            LambdaInput {
                description: "  ".into(),
                ..lambda("ok_name")
            },
            "needs a description",
        ),
        (
            LambdaInput {
                description: "d".repeat(MAX_DESCRIPTION_BYTES + 1),
                ..lambda("ok_name")
            },
            "the description is 16385 bytes",
        ),
        (
            LambdaInput {
                source: "s".repeat(MAX_SOURCE_BYTES + 1),
                ..lambda("ok_name")
            },
            "the source is 262145 bytes",
        ),
        (
            LambdaInput {
                source: "\n".into(),
                ..lambda("ok_name")
            },
            "needs its source",
        ),
        (
            LambdaInput {
                runtime: Some("ruby".into()),
                ..lambda("ok_name")
            },
            "runtime \"ruby\"",
        ),
        (
            LambdaInput {
                summary: Some("two\nlines".into()),
                ..lambda("ok_name")
            },
            "one line",
        ),
        (
            LambdaInput {
                input: to_ipld(&json!({"type": "array"})),
                ..lambda("ok_name")
            },
            "the input schema: /type: the root must be",
        ),
        (
            LambdaInput {
                output: Some(to_ipld(&json!({"properties": {"x": {"oneOf": []}}}))),
                ..lambda("ok_name")
            },
            "the output schema: /properties/x/oneOf: unsupported keyword",
        ),
    ];
    for (input, expected) in cases {
        let error = tools
            .save_lambda(OWNER, AGENT, input, None)
            .await
            .expect_err(expected);
        assert_eq!(error.code(), "invalid_argument", "{error}");
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
    assert!(tools.list(OWNER, AGENT, None).await.expect("list").len() == 3);
}

#[tokio::test]
async fn the_per_agent_bound_is_checked_in_the_write() {
    let test = fresh().await;
    let tools = ToolDocuments::new(test.db.clone(), 2).expect("tools");
    tools
        .list(OWNER, AGENT, None)
        .await
        .expect("builtins do not count");
    for name in ["one_tool", "two_tool"] {
        tools
            .save_lambda(OWNER, AGENT, lambda(name), None)
            .await
            .expect(name);
    }
    let full = tools
        .save_lambda(OWNER, AGENT, lambda("three_tool"), None)
        .await
        .expect_err("full");
    assert_eq!(full.code(), "limit");
    assert_eq!(full.setting(), Some(MAX_TOOLS_SETTING));
    // Editing one that exists is not adding one.
    tools
        .save_lambda(OWNER, AGENT, lambda("two_tool"), None)
        .await
        .expect("edit at the bound");
    // Another agent has its own bound.
    tools
        .save_lambda(OWNER, "agent-2", lambda("three_tool"), None)
        .await
        .expect("other agent");
}

#[tokio::test]
async fn a_damaged_row_is_corrupt_not_a_panic() {
    let test = fresh().await;
    let tools = ToolDocuments::new(test.db.clone(), 200).expect("tools");
    tools
        .save_lambda(OWNER, AGENT, lambda("word_count"), None)
        .await
        .expect("save");
    test.db
        .transaction(vec![agentos_schema::Statement::new(
            "UPDATE agentos_core_tool_documents SET document = x'a0' WHERE name = 'word_count'",
            vec![],
        )])
        .await
        .expect("damage");
    let error = tools.list(OWNER, AGENT, None).await.expect_err("corrupt");
    assert_eq!(error.code(), "corrupt_row");
    let error = ToolDocuments::new(Arc::new(agentos_storage::testing::OddRows), 200)
        .expect("tools")
        .list(OWNER, AGENT, None)
        .await
        .expect_err("odd rows");
    assert_eq!(error.code(), "corrupt_row");
}

#[test]
fn write_verb_json_becomes_a_lambda_input_strictly() {
    let input = LambdaInput::from_json(
        "word_count",
        &json!({"description": "Counts.", "source": "x", "runtime": "python"}),
    )
    .expect("json");
    assert_eq!(input.input, to_ipld(&json!({"type": "object"})));
    assert_eq!(input.runtime.as_deref(), Some("python"));
    let error = LambdaInput::from_json("n", &json!({"description": "d", "source": "x", "code": 1}))
        .expect_err("unknown key");
    assert!(
        error.to_string().contains("unknown key \"code\""),
        "{error}"
    );
    let error =
        LambdaInput::from_json("n", &json!({"description": 3, "source": "x"})).expect_err("type");
    assert!(error.to_string().contains("description must be a string"));
    assert!(LambdaInput::from_json("n", &json!("text")).is_err());
}

#[test]
fn derived_summaries_are_one_bounded_sentence() {
    assert_eq!(summary_of("Counts words. Then more."), "Counts words.");
    assert_eq!(summary_of("First line\nsecond"), "First line");
    let long = "é".repeat(300);
    let summary = summary_of(&long);
    assert_eq!(summary.chars().count(), 140);
    assert!(summary.ends_with('…'));
}
