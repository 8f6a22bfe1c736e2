//! The builtin model agent's test world, shared by its end-to-end tests: a
//! real sidecar whose provider type is pinned to a scripted provider on
//! loopback, an account with a key secret and a provider record, a builtin
//! agent using them, and readers for what the provider was sent in each
//! API's own shape (system prompt, tools, tool results, user messages).

#![allow(dead_code)]

use std::time::Duration;

use agentos_protocol::seed::{ipld_to_json, Ipld, JsonForm};
use agentos_tests::http::Target;
use agentos_tests::provider_server::{Flavor, RecordedRequest, Reply, ScriptedProvider};
use agentos_tests::seed::{bytes, call, field, Answer, Signer};
use serde_json::{json, Value};

/// The verbs a signed message's turn (a run) offers, in order: a turn
/// is a run, so `delegate` is offered with the others.
pub const VERBS: [&str; 7] = [
    "read",
    "write",
    "call",
    "status",
    "continue_session",
    "delegate",
    "plan",
];

use crate::common::{eventually, Backend, Options, Sidecar, PATIENCE};

/// The key the account's secret holds.
pub const KEY: &str = "sk-scripted";

pub struct World {
    pub sc: Sidecar,
    pub target: Target,
    pub provider: ScriptedProvider,
    pub owner: Signer,
    pub agent_id: String,
    pub flavor: Flavor,
    /// Merged into the config's limits, at every start.
    pub limits: Value,
    /// Whether the sidecar names sessions (`builtin.sessionTitles`).
    pub titles: bool,
    /// More of the config's `builtin` section, at every start.
    pub builtin: Value,
    /// Other sections merged into the config's top level, at every start.
    pub sections: Value,
}

pub fn flavor_type(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::OpenAi => "openai",
        Flavor::Anthropic => "anthropic",
        Flavor::Google => "google",
    }
}

fn options(
    provider: &ScriptedProvider,
    titles: bool,
    builtin: &Value,
    sections: &Value,
) -> Options {
    let mut config = json!({
        "http": {"listen": "127.0.0.1:0"},
        // Sessions keep their names unless a test asks for titles: a
        // title call would be one more request to the scripted provider.
        "builtin": {"providerEndpoints": {flavor_type(provider.flavor()): provider.base_url()},
                    "sessionTitles": titles},
    });
    if let Some(extra) = builtin.as_object() {
        for (k, v) in extra {
            config["builtin"][k] = v.clone();
        }
    }
    if let Some(extra) = sections.as_object() {
        for (k, v) in extra {
            config[k] = v.clone();
        }
    }
    Options {
        config,
        ..Options::default()
    }
}

/// The agent's definition; `tools` is its grant list when given.
pub fn definition(tools: Option<Value>) -> Value {
    let mut definition = json!({
        "name": "Scribe", "systemPrompt": "Be brief.",
        "modelProvider": "main", "model": "scripted-model"});
    if let Some(tools) = tools {
        definition["tools"] = tools;
    }
    definition
}

pub fn ok(a: &Answer) {
    assert_eq!(a.status, 200, "{:?}", a.body);
}

/// A sidecar whose `flavor` provider is the scripted server, an account
/// with a key and a provider, and a builtin agent using it.
pub async fn world(flavor: Flavor) -> World {
    world_on(flavor, Backend::SqliteFile).await
}

pub async fn world_on(flavor: Flavor, backend: Backend) -> World {
    world_with(flavor, backend, json!({})).await
}

/// [`world_on`] with `limits` merged into the sidecar's config.
pub async fn world_with(flavor: Flavor, backend: Backend, limits: Value) -> World {
    world_of(flavor, backend, limits, false, json!({}), json!({}), vec![]).await
}

/// [`world`] with `env` set for the sidecar's process.
pub async fn world_with_env(flavor: Flavor, env: Vec<(String, String)>) -> World {
    world_of(
        flavor,
        Backend::SqliteFile,
        json!({}),
        false,
        json!({}),
        json!({}),
        env,
    )
    .await
}

/// A world whose config also holds `sections` at its top level.
pub async fn world_sections(flavor: Flavor, sections: Value) -> World {
    world_of(
        flavor,
        Backend::SqliteFile,
        json!({}),
        false,
        json!({}),
        sections,
        vec![],
    )
    .await
}

/// A world whose config's `builtin` section also holds `builtin`.
pub async fn world_configured(flavor: Flavor, builtin: Value) -> World {
    world_of(
        flavor,
        Backend::SqliteFile,
        json!({}),
        false,
        builtin,
        json!({}),
        vec![],
    )
    .await
}

/// [`world`] on a sidecar that names its sessions after their first turn.
#[allow(dead_code)]
pub async fn world_titled(flavor: Flavor) -> World {
    world_of(
        flavor,
        Backend::SqliteFile,
        json!({}),
        true,
        json!({}),
        json!({}),
        vec![],
    )
    .await
}

async fn world_of(
    flavor: Flavor,
    backend: Backend,
    limits: Value,
    titles: bool,
    builtin: Value,
    sections: Value,
    env: Vec<(String, String)>,
) -> World {
    let provider = ScriptedProvider::start(flavor).await;
    let sc = Sidecar::start_with(
        backend,
        Options {
            limits: limits.clone(),
            env,
            ..options(&provider, titles, &builtin, &sections)
        },
    )
    .await;
    let target = sc.api();
    let owner = Signer::new();
    ok(&call(
        &target,
        &owner,
        json!({"_": "SetSecret", "name": "key", "value": bytes(KEY)}),
    )
    .await);
    ok(&call(
        &target,
        &owner,
        json!({"_": "SetModelProvider", "name": "main",
               "provider": {"type": flavor_type(flavor), "secretRefs": {"apiKey": "key"}}}),
    )
    .await);
    let created = call(
        &target,
        &owner,
        json!({"_": "CreateAgent", "definition": definition(None)}),
    )
    .await;
    ok(&created);
    World {
        agent_id: created.text("agentId"),
        sc,
        target,
        provider,
        owner,
        flavor,
        limits,
        titles,
        builtin,
        sections,
    }
}

impl World {
    /// Signs `action` as the owner and sends it.
    pub async fn act(&self, action: Value) -> Answer {
        call(&self.target, &self.owner, action).await
    }

    /// A new account invited to the agent with `role`, the invitation
    /// accepted.
    pub async fn collaborator(&self, role: &str) -> Signer {
        let who = Signer::new();
        ok(&self
            .act(
                json!({"_": "InviteAgentCollaborator", "agentId": self.agent_id,
                        "accountId": who.id(), "role": role}),
            )
            .await);
        ok(&call(
            &self.target,
            &who,
            json!({"_": "AcceptAgentInvite", "agentId": self.agent_id}),
        )
        .await);
        who
    }

    pub async fn session(&self) -> String {
        let created = self
            .act(json!({"_": "CreateSession", "agentId": self.agent_id}))
            .await;
        ok(&created);
        created.text("sessionId")
    }

    pub async fn message(&self, session: &str, text: &str) -> Answer {
        self.act(json!({"_": "MessageSession", "sessionId": session,
                        "content": [{"type": "text", "text": text}]}))
            .await
    }

    /// Subscribes to `session` and starts a turn on `text` whose reply
    /// streams far longer than `PATIENCE` (only a stop, a restart or a kill
    /// ends it in time); answers once a delta of it has come through, the
    /// turn mid-stream.
    pub async fn endless_turn(
        &mut self,
        session: &str,
        text: &str,
    ) -> tokio::task::JoinHandle<Answer> {
        self.sc
            .ok("sessions/subscribe", json!({"sessionId": session}))
            .await;
        let (deltas, gap) = endless(1000);
        self.provider.push(Reply::Slow { deltas, gap });
        let turn = self.message_in_background(session, text);
        self.sc
            .next_note(|m, p| {
                m == "sessions/update" && p["update"]["sessionUpdate"] == "agent_message_chunk"
            })
            .await;
        turn
    }

    /// A `MessageSession` sent from a task, for turns that stream while the
    /// test acts; the answer comes within `PATIENCE` or the task panics.
    pub fn message_in_background(
        &self,
        session: &str,
        text: &str,
    ) -> tokio::task::JoinHandle<Answer> {
        let (target, owner) = (self.target.clone(), self.owner.clone());
        let action = json!({"_": "MessageSession", "sessionId": session,
                            "content": [{"type": "text", "text": text}]});
        tokio::spawn(async move {
            tokio::time::timeout(PATIENCE, call(&target, &owner, action))
                .await
                .expect("the turn ended in time")
        })
    }

    pub async fn stop(&self, session: &str) -> Answer {
        self.act(json!({"_": "StopSession", "sessionId": session}))
            .await
    }

    /// `InvokeSessionTool` as `who`.
    pub async fn invoke_as(&self, who: &Signer, session: &str, verb: &str, input: Value) -> Answer {
        call(
            &self.target,
            who,
            json!({"_": "InvokeSessionTool", "sessionId": session, "verb": verb, "input": input}),
        )
        .await
    }

    pub async fn invoke(&self, session: &str, verb: &str, input: Value) -> Answer {
        self.invoke_as(&self.owner, session, verb, input).await
    }

    pub async fn get_session(&self, session: &str) -> Answer {
        let got = self
            .act(json!({"_": "GetSession", "sessionId": session}))
            .await;
        ok(&got);
        got
    }

    /// The session's Seed events (`event` of each), as JSON.
    pub async fn events(&self, session: &str) -> Vec<Value> {
        self.event_records(session)
            .await
            .into_iter()
            .map(|e| e["event"].clone())
            .collect()
    }

    /// The session's whole event records (`id`, `seq`, `event`, …).
    pub async fn event_records(&self, session: &str) -> Vec<Value> {
        let got = self.get_session(session).await;
        match json_of(got.field("events")) {
            Value::Array(events) => events,
            other => panic!("events: {other}"),
        }
    }

    /// Waits until the provider has received `n` requests.
    pub async fn provider_called(&self, n: usize) {
        eventually(&format!("{n} provider requests"), || async {
            self.provider.requests().len() >= n
        })
        .await;
    }

    /// The body of the provider's latest request.
    pub fn last_body(&self) -> Value {
        self.last_request().body
    }

    pub fn last_request(&self) -> RecordedRequest {
        self.provider
            .requests()
            .pop()
            .expect("the provider was called")
    }

    /// Kills the sidecar (SIGKILL) and starts it again on the same store.
    pub async fn crash(self) -> World {
        self.again(true).await
    }

    /// Stops the sidecar and starts it again on the same store, pinned to
    /// the same scripted provider.
    pub async fn restart(self) -> World {
        self.again(false).await
    }

    /// A new sidecar on this world's store, after a SIGKILL (`crash`) or a
    /// graceful stop.
    async fn again(self, crash: bool) -> World {
        let World {
            sc,
            provider,
            owner,
            agent_id,
            flavor,
            limits,
            titles,
            builtin,
            sections,
            ..
        } = self;
        let options = Options {
            limits: limits.clone(),
            ..options(&provider, titles, &builtin, &sections)
        };
        let sc = if crash {
            sc.crash(options).await
        } else {
            sc.restart(options).await
        };
        let target = sc.api();
        World {
            sc,
            target,
            provider,
            owner,
            agent_id,
            flavor,
            limits,
            titles,
            builtin,
            sections,
        }
    }
}

/// IPLD as JSON; null when it holds what plain JSON cannot (bytes, links),
/// which the answers read this way do not.
pub fn json_of(value: &Ipld) -> Value {
    ipld_to_json(value, JsonForm::Plain).unwrap_or(Value::Null)
}

/// A text field of an answer's body.
pub fn answer_text(answer: &Answer, name: &str) -> String {
    match field(&answer.body, name) {
        Ipld::String(s) => s.clone(),
        other => panic!("{name}: {other:?} in {:?}", answer.body),
    }
}

/// A compact view of Seed events: `role:content` for messages,
/// `tool_call:name` / `tool_result:name`, else the type.
pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let kind = e["type"].as_str().unwrap_or_default();
            match kind {
                "message" => format!(
                    "{}:{}",
                    e["role"].as_str().unwrap_or_default(),
                    e["content"].as_str().unwrap_or_default()
                ),
                "tool_call" | "tool_result" => {
                    format!("{kind}:{}", e["name"].as_str().unwrap_or_default())
                }
                other => other.to_owned(),
            }
        })
        .collect()
}

/// What the provider was sent, read in `flavor`'s API shape.
pub struct Sent<'a> {
    pub flavor: Flavor,
    pub body: &'a Value,
}

fn strings(values: impl Iterator<Item = Option<String>>) -> Vec<String> {
    values.flatten().collect()
}

impl<'a> Sent<'a> {
    pub fn new(flavor: Flavor, body: &'a Value) -> Sent<'a> {
        Sent { flavor, body }
    }

    fn items(value: &Value) -> impl Iterator<Item = &Value> {
        value.as_array().into_iter().flatten()
    }

    /// The system prompt.
    pub fn system(&self) -> String {
        let b = self.body;
        let text = match self.flavor {
            Flavor::OpenAi => Self::items(&b["messages"])
                .find(|m| m["role"] == "system")
                .and_then(|m| m["content"].as_str()),
            Flavor::Anthropic => b["system"].as_str(),
            Flavor::Google => b["systemInstruction"]["parts"][0]["text"].as_str(),
        };
        text.unwrap_or_default().to_owned()
    }

    /// The tools' names, in order.
    pub fn tools(&self) -> Vec<String> {
        let b = self.body;
        let own = |v: &Value| v.as_str().map(str::to_owned);
        match self.flavor {
            Flavor::OpenAi => strings(Self::items(&b["tools"]).map(|t| {
                assert_eq!(t["type"], "function", "{t}");
                assert_eq!(t["function"]["parameters"]["type"], "object", "{t}");
                own(&t["function"]["name"])
            })),
            Flavor::Anthropic => strings(Self::items(&b["tools"]).map(|t| {
                assert_eq!(t["input_schema"]["type"], "object", "{t}");
                own(&t["name"])
            })),
            Flavor::Google => strings(Self::items(&b["tools"][0]["functionDeclarations"]).map(
                |t| {
                    assert!(t["parameters"].is_object(), "{t}");
                    own(&t["name"])
                },
            )),
        }
    }

    /// Each tool result sent back: (call id, or the tool's name for Google,
    /// which has no ids; the result text).
    pub fn tool_results(&self) -> Vec<(String, String)> {
        let b = self.body;
        let mut out = Vec::new();
        match self.flavor {
            Flavor::OpenAi => {
                for m in Self::items(&b["messages"]).filter(|m| m["role"] == "tool") {
                    out.push((
                        m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                        m["content"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
            Flavor::Anthropic => {
                for m in Self::items(&b["messages"]).filter(|m| m["role"] == "user") {
                    for block in Self::items(&m["content"]).filter(|c| c["type"] == "tool_result") {
                        out.push((
                            block["tool_use_id"].as_str().unwrap_or_default().to_owned(),
                            block["content"].as_str().unwrap_or_default().to_owned(),
                        ));
                    }
                }
            }
            Flavor::Google => {
                for m in Self::items(&b["contents"]).filter(|m| m["role"] == "user") {
                    for part in Self::items(&m["parts"]) {
                        let response = &part["functionResponse"];
                        if response.is_object() {
                            let text = response["response"]["content"]
                                .as_str()
                                .or_else(|| response["response"]["error"].as_str());
                            out.push((
                                response["name"].as_str().unwrap_or_default().to_owned(),
                                text.unwrap_or_default().to_owned(),
                            ));
                        }
                    }
                }
            }
        }
        out
    }

    /// Every image the request shows the model, as (type, base64), read
    /// where each family's API takes them: OpenAI's `image_url` data URLs
    /// in user messages, Anthropic's base64 `image` blocks in tool
    /// results, Gemini's `inlineData` in user parts or function responses.
    pub fn images(&self) -> Vec<(String, String)> {
        let b = self.body;
        let own = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let mut out = Vec::new();
        match self.flavor {
            Flavor::OpenAi => {
                for m in Self::items(&b["messages"]).filter(|m| m["role"] == "user") {
                    for part in Self::items(&m["content"]).filter(|p| p["type"] == "image_url") {
                        let url = own(&part["image_url"]["url"]);
                        let (head, data) = url.split_once(";base64,").expect("a data URL");
                        let mime = head.strip_prefix("data:").expect("a data URL");
                        out.push((mime.to_owned(), data.to_owned()));
                    }
                }
            }
            Flavor::Anthropic => {
                for m in Self::items(&b["messages"]).filter(|m| m["role"] == "user") {
                    for block in Self::items(&m["content"]).filter(|c| c["type"] == "tool_result") {
                        for image in Self::items(&block["content"]).filter(|c| c["type"] == "image")
                        {
                            assert_eq!(image["source"]["type"], "base64", "{image}");
                            out.push((
                                own(&image["source"]["media_type"]),
                                own(&image["source"]["data"]),
                            ));
                        }
                    }
                }
            }
            Flavor::Google => {
                for m in Self::items(&b["contents"]).filter(|m| m["role"] == "user") {
                    for part in Self::items(&m["parts"]) {
                        let inner = Self::items(&part["functionResponse"]["parts"]);
                        for inline in std::iter::once(part).chain(inner) {
                            let data = &inline["inlineData"];
                            if data.is_object() {
                                out.push((own(&data["mimeType"]), own(&data["data"])));
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// The words of the user's messages (tool results excluded), without
    /// the `<message_sender>` block a signed message opens with.
    pub fn user_texts(&self) -> Vec<String> {
        self.raw_user_texts()
            .into_iter()
            .map(|text| match text.strip_prefix("<message_sender>\n") {
                Some(rest) => rest
                    .split_once("\n</message_sender>\n\n")
                    .map_or(text.clone(), |(_, words)| words.to_owned()),
                None => text,
            })
            .collect()
    }

    /// The texts of the user's messages (tool results excluded), as sent.
    pub fn raw_user_texts(&self) -> Vec<String> {
        let b = self.body;
        let mut out = Vec::new();
        match self.flavor {
            Flavor::OpenAi => {
                for m in Self::items(&b["messages"]).filter(|m| m["role"] == "user") {
                    out.extend(m["content"].as_str().map(str::to_owned));
                }
            }
            Flavor::Anthropic => {
                for m in Self::items(&b["messages"]).filter(|m| m["role"] == "user") {
                    match &m["content"] {
                        Value::String(text) => out.push(text.clone()),
                        content => out.extend(
                            Self::items(content)
                                .filter(|c| c["type"] == "text")
                                .filter_map(|c| c["text"].as_str().map(str::to_owned)),
                        ),
                    }
                }
            }
            Flavor::Google => {
                for m in Self::items(&b["contents"]).filter(|m| m["role"] == "user") {
                    out.extend(
                        Self::items(&m["parts"])
                            .filter_map(|p| p["text"].as_str().map(str::to_owned)),
                    );
                }
            }
        }
        out
    }

    /// The roles of the conversation, in the API's own words.
    pub fn roles(&self) -> Vec<String> {
        let list = match self.flavor {
            Flavor::Google => &self.body["contents"],
            _ => &self.body["messages"],
        };
        strings(Self::items(list).map(|m| m["role"].as_str().map(str::to_owned)))
    }
}

/// The header that carries the key, and its expected value.
pub fn key_header(flavor: Flavor) -> (&'static str, String) {
    match flavor {
        Flavor::OpenAi => ("authorization", format!("Bearer {KEY}")),
        Flavor::Anthropic => ("x-api-key", KEY.to_owned()),
        Flavor::Google => ("x-goog-api-key", KEY.to_owned()),
    }
}

/// Long enough that a test never waits for a slow stream to end by itself.
pub fn endless(deltas: usize) -> (Vec<String>, Duration) {
    (
        (0..deltas).map(|i| format!("d{i} ")).collect(),
        Duration::from_millis(250),
    )
}

/// A provider answer of tool calls `(id, name, input)`.
pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Reply {
    Reply::ToolCalls(
        calls
            .iter()
            .map(|(id, name, input)| ((*id).to_owned(), (*name).to_owned(), input.clone()))
            .collect(),
    )
}

/// A provider answer of one text delta.
pub fn text(t: &str) -> Reply {
    Reply::Text(vec![t.to_owned()])
}

/// `ListRuns` with `scope` (`{rootRunId}`, `{sessionId}` or `{agentId}`,
/// plus any filter), as JSON.
pub async fn runs_of(w: &World, scope: Value) -> Vec<Value> {
    let mut action = json!({"_": "ListRuns"});
    for (k, v) in scope.as_object().expect("a scope") {
        action[k] = v.clone();
    }
    let listed = w.act(action).await;
    ok(&listed);
    json_of(&listed.body)["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// `GetRun`, as JSON.
pub async fn run(w: &World, run_id: &str) -> Value {
    let got = w.act(json!({"_": "GetRun", "runId": run_id})).await;
    ok(&got);
    json_of(&got.body)["run"].clone()
}

/// Polls `GetRun` until the run has `status` (at most `PATIENCE`).
pub async fn until_status(w: &World, run_id: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let last = run(w, run_id).await;
        if last["status"] == status {
            return last;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{run_id} never became {status}: {last}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `GetRunJournal`'s entries, as JSON.
pub async fn journal(w: &World, run_id: &str) -> Vec<Value> {
    let got = w.act(json!({"_": "GetRunJournal", "runId": run_id})).await;
    ok(&got);
    json_of(&got.body)["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
