//! Delegation: a run starts a child, a model child in a session of its own
//! (the brief, exactly, as its first user message; the parent's
//! conversation stays with the parent) or a script child, within the
//! tree's bounds (depth, children per run). When an awaited child ends, its
//! result reaches the parent once: for a turn, as the result of the
//! `delegate` call in the parent's log, committed with the child's
//! resolution and, when it was the last one the parent waited for, the
//! parent's requeue; for a script parent, which awaits its child in the
//! resident VM, as the resolution alone. A canceled child still gets its
//! result, so the parent's next provider request never holds a call with
//! no answer.

use std::sync::Arc;

use agentos_protocol::agent_ext::stored_output;
use agentos_protocol::session::Actor;
use serde_json::{json, Map, Value};

use super::TurnError;
use crate::control::Control;
use crate::runs::store::RunStore;
use crate::runs::{
    NewRun, Origin, ParentLink, Queue, Run, RunError, RunKind, RunStatus, Runs,
    BACKGROUND_MAX_ATTEMPTS,
};
use crate::sessions::{input_hash, OpenSession, SessionError, Sessions};
use agentos_base::clock::unix_ms;
use agentos_scripts::ScriptEngine;

/// The longest brief or script a delegate call may carry.
pub const MAX_BRIEF_BYTES: usize = 256 * 1024;
/// The largest output schema a typed child may be given.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
const MAX_TITLE_CHARS: usize = 80;

/// What a `delegate` call asks for, read strictly.
#[derive(Clone, Debug, PartialEq)]
pub enum ChildSpec {
    Model {
        brief: String,
        title: Option<String>,
        /// Instructions for the child, instead of another agent's.
        prompt: Option<String>,
        agent_id: Option<String>,
        tools: Option<Vec<String>>,
        output: Option<Value>,
        awaits: bool,
        plan_step_id: Option<String>,
    },
    Script {
        script: String,
        input: Value,
        title: Option<String>,
        plan_step_id: Option<String>,
    },
}

/// A refused delegation: a stable code and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

fn refuse(code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

fn text_field(map: &Map<String, Value>, key: &str) -> Result<Option<String>, Refusal> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(refuse(
            "invalid_argument",
            format!("`{key}` must be a string"),
        )),
    }
}

impl ChildSpec {
    /// Reads a `delegate` input: `{script, input?, title?}` for a script
    /// child, else `{brief, title?, prompt?, agentId?, tools?, output?,
    /// await?}` (with `input` accepted for `brief`, and a lone `prompt`
    /// taken as the brief).
    pub fn parse(input: &Value) -> Result<ChildSpec, Refusal> {
        let Some(map) = input.as_object() else {
            return Err(refuse("invalid_argument", "delegate takes an object"));
        };
        let awaits = match map.get("await") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(refuse("invalid_argument", "`await` must be a boolean")),
        };
        let title = text_field(map, "title")?;
        let plan_step_id = text_field(map, "planStepId")?;
        if let Some(script) = text_field(map, "script")? {
            for key in map.keys() {
                if !["script", "input", "title", "await", "planStepId"].contains(&key.as_str()) {
                    return Err(refuse(
                        "invalid_argument",
                        format!("a script child takes script, input and title; not `{key}`"),
                    ));
                }
            }
            if !awaits {
                return Err(refuse(
                    "invalid_argument",
                    "a script child cannot be detached (await:false)",
                ));
            }
            if script.len() > MAX_BRIEF_BYTES {
                return Err(refuse("too_large", "the script exceeds 256 KiB"));
            }
            return Ok(ChildSpec::Script {
                script,
                input: map.get("input").cloned().unwrap_or(Value::Null),
                title,
                plan_step_id,
            });
        }
        for key in map.keys() {
            let known = [
                "brief",
                "input",
                "title",
                "prompt",
                "agentId",
                "tools",
                "output",
                "await",
                "planStepId",
            ];
            if !known.contains(&key.as_str()) {
                return Err(refuse(
                    "invalid_argument",
                    format!("delegate has no field `{key}`"),
                ));
            }
        }
        let mut prompt = text_field(map, "prompt")?;
        let brief = match (text_field(map, "brief")?, map.get("input")) {
            (Some(brief), _) => Some(brief),
            (None, Some(Value::String(input))) => Some(input.clone()),
            (None, Some(Value::Null) | None) => None,
            (None, Some(_)) => {
                return Err(refuse(
                    "invalid_argument",
                    "`input` must be the brief, a string",
                ))
            }
        };
        let brief = match brief {
            Some(brief) => brief,
            // A lone prompt is the brief.
            None => match prompt.take() {
                Some(p) => p,
                None => {
                    return Err(refuse(
                        "invalid_argument",
                        "delegate needs a `brief` (or a `script`)",
                    ))
                }
            },
        };
        if brief.trim().is_empty() {
            return Err(refuse("invalid_argument", "the brief is empty"));
        }
        if brief.len() > MAX_BRIEF_BYTES {
            return Err(refuse("too_large", "the brief exceeds 256 KiB"));
        }
        let agent_id = text_field(map, "agentId")?;
        if prompt.is_some() && agent_id.is_some() {
            return Err(refuse(
                "invalid_argument",
                "`prompt` and `agentId` are exclusive: instructions for this agent's child, or another agent",
            ));
        }
        let tools = match map.get("tools") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|t| t.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| refuse("invalid_argument", "`tools` must be strings"))?,
            ),
            Some(_) => return Err(refuse("invalid_argument", "`tools` must be an array")),
        };
        let output = match map.get("output") {
            None | Some(Value::Null) => None,
            Some(schema @ Value::Object(o)) if o.get("type") == Some(&json!("object")) => {
                if schema.to_string().len() > MAX_SCHEMA_BYTES {
                    return Err(refuse("too_large", "the output schema exceeds 64 KiB"));
                }
                crate::space::schema::shape_check(schema).map_err(|e| {
                    refuse(
                        "invalid_argument",
                        format!("`output` is not a schema this runtime checks: {e}"),
                    )
                })?;
                Some(schema.clone())
            }
            Some(_) => {
                return Err(refuse(
                    "invalid_argument",
                    "`output` must be a JSON Schema with an object root",
                ))
            }
        };
        if !awaits && (agent_id.is_some() || output.is_some() || tools.is_some()) {
            return Err(refuse(
                "invalid_argument",
                "a detached child (await:false) takes no agentId, output or tools",
            ));
        }
        Ok(ChildSpec::Model {
            brief,
            title,
            prompt,
            agent_id,
            tools,
            output,
            awaits,
            plan_step_id,
        })
    }
}

fn default_title(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    let mut title: String = line.chars().take(MAX_TITLE_CHARS).collect();
    if line.chars().count() > MAX_TITLE_CHARS {
        title.push('…');
    }
    if title.is_empty() {
        "delegated work".to_owned()
    } else {
        title
    }
}

/// Stamps a plan's `settledAt` when no step can move any more, and clears
/// it when a step reopened.
pub fn settle_plan(plan: &mut Value, now: i64) {
    let settled = plan["steps"].as_array().is_some_and(|steps| {
        !steps.is_empty()
            && steps
                .iter()
                .all(|s| matches!(s["status"].as_str(), Some("done" | "failed" | "skipped")))
    });
    match (settled, plan.get("settledAt").is_some()) {
        (true, false) => plan["settledAt"] = json!(now),
        (false, true) => {
            if let Some(map) = plan.as_object_mut() {
                map.remove("settledAt");
            }
        }
        _ => {}
    }
}

/// A started child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub run_id: String,
    pub session_id: Option<String>,
    pub awaits: bool,
}

/// Starts children and brings their results back.
#[derive(Clone)]
pub struct Delegation {
    runs: Runs,
    sessions: Sessions,
    control: Control,
    engine: ScriptEngine,
}

impl Delegation {
    pub fn new(
        runs: Runs,
        sessions: Sessions,
        control: Control,
        engine: ScriptEngine,
    ) -> Arc<Delegation> {
        Arc::new(Delegation {
            runs,
            sessions,
            control,
            engine,
        })
    }

    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    pub fn engine(&self) -> &ScriptEngine {
        &self.engine
    }

    /// Starts the child `spec` asks for under `parent`, answering it or why
    /// not. `tool_call_id` is the parent's call that asked.
    pub async fn start(
        &self,
        parent: &Run,
        tool_call_id: &str,
        spec: ChildSpec,
    ) -> Result<Started, Refusal> {
        let limits = self.runs.config();
        if parent.depth + 1 > limits.max_depth {
            return Err(refuse(
                "depth_limit",
                format!(
                    "children may nest {} deep (limits.runs.maxDepth)",
                    limits.max_depth
                ),
            ));
        }
        if parent.child_count >= u64::from(limits.max_children) {
            return Err(refuse(
                "children_limit",
                format!(
                    "a run may start {} children (limits.runs.maxChildrenPerRun)",
                    limits.max_children
                ),
            ));
        }
        let link = |awaits: bool| ParentLink {
            run_id: parent.run_id.clone(),
            root_run_id: parent.root_run_id.clone(),
            tool_call_id: Some(tool_call_id.to_owned()),
            depth: parent.depth + 1,
            awaits,
        };
        let storage = |e: RunError| refuse("storage", e.to_string());
        match spec {
            ChildSpec::Script {
                script,
                input,
                title,
                plan_step_id,
            } => {
                let engine = self.engine.clone();
                let source = script.clone();
                let checked = tokio::task::spawn_blocking(move || engine.check(&source))
                    .await
                    .map_err(|_| refuse("invalid_script", "the script check failed"))?;
                if let Err(e) = checked {
                    return Err(refuse("invalid_script", e.to_string()));
                }
                let mut run =
                    NewRun::root(RunKind::Script, Origin::Agent, Queue::Background, input);
                run.parent = Some(link(true));
                run.account_id = parent.account_id.clone();
                run.agent_id = parent.agent_id.clone();
                run.title = Some(title.unwrap_or_else(|| "script".to_owned()));
                run.source_cid = Some(format!(
                    "sha256:{}",
                    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(script.as_bytes()))
                ));
                run.source_text = Some(script);
                run.plan_step_id = plan_step_id;
                let started = self.runs.submit(&run).await.map_err(storage)?;
                Ok(Started {
                    run_id: started.run_id,
                    session_id: None,
                    awaits: true,
                })
            }
            ChildSpec::Model {
                brief,
                title,
                prompt,
                agent_id,
                tools,
                output,
                awaits,
                plan_step_id,
            } => {
                let account = parent.account_id.clone().ok_or_else(|| {
                    refuse("invalid_argument", "only a run of an account may delegate")
                })?;
                let agent_id = match (agent_id, &parent.agent_id) {
                    (Some(other), _) => {
                        crate::control::authz::require_write(&self.control, &account, &other)
                            .await
                            .map_err(|e| refuse(e.code(), e.to_string()))?;
                        other
                    }
                    (None, Some(own)) => own.clone(),
                    (None, None) => {
                        return Err(refuse("invalid_argument", "this run belongs to no agent"))
                    }
                };
                let agent = self
                    .control
                    .get_agent(&agent_id)
                    .await
                    .map_err(|e| refuse("storage", e.to_string()))?
                    .ok_or_else(|| refuse("not_found", format!("agent {agent_id}")))?;
                let title = title.unwrap_or_else(|| default_title(&brief));
                let session_id = uuid::Uuid::new_v4().to_string();
                let mut run = NewRun::root(
                    RunKind::Agent,
                    Origin::Agent,
                    Queue::Background,
                    Value::Null,
                );
                run.parent = Some(link(awaits));
                run.account_id = Some(account);
                run.agent_id = Some(agent_id.clone());
                run.session_id = Some(session_id.clone());
                run.title = Some(title.clone());
                run.max_attempts = BACKGROUND_MAX_ATTEMPTS;
                run.plan_step_id = plan_step_id;
                self.sessions
                    .open(OpenSession {
                        session_id: Some(session_id.clone()),
                        agent: agent.adapter.clone(),
                        title: Some(title),
                        // The child's own instructions, which its agent's
                        // system prompt carries, and the tools it was
                        // given, which narrow its grants at every verb.
                        metadata: child_metadata(prompt.as_deref(), tools.as_deref()),
                        ..OpenSession::default()
                    })
                    .await
                    .map_err(|e| refuse(e.code().as_str(), e.to_string()))?;
                if let Err(e) = self
                    .control
                    .link_child_session(
                        &session_id,
                        &agent_id,
                        parent.session_id.as_deref(),
                        &run.run_id,
                    )
                    .await
                {
                    let _ = self.sessions.delete(&session_id).await;
                    return Err(refuse("storage", e.to_string()));
                }
                let content = vec![json!({"type": "text", "text": brief})];
                let mut input = json!({
                    "content": content,
                    "inputHash": hex::encode(input_hash(&content)),
                });
                if let Some(tools) = tools {
                    input["tools"] = json!(tools);
                }
                if let Some(output) = output {
                    input["output"] = output;
                }
                run.input = input;
                let run_id = run.run_id.clone();
                if let Err(e) = self
                    .sessions
                    .enqueue(&session_id, content, Actor::Agent, run)
                    .await
                {
                    let _ = self.sessions.delete(&session_id).await;
                    return Err(refuse(e.code().as_str(), e.to_string()));
                }
                if let Ok(run) = self.runs.get(&run_id).await {
                    self.runs.publish(run);
                }
                self.runs.wake();
                Ok(Started {
                    run_id,
                    session_id: Some(session_id),
                    awaits,
                })
            }
        }
    }

    /// A child's result as its parent reads it: `{status, runId, sessionId,
    /// output | error}`; a model child's output is its final reply
    /// (`{text}`), a typed child's the result it delivered.
    pub async fn child_result(&self, child: &Run) -> Value {
        let session = child.session_id.clone().map_or(Value::Null, Value::String);
        let mut result = json!({
            "status": child.status.as_str(),
            "runId": child.run_id,
            "sessionId": session,
        });
        match child.status {
            RunStatus::Succeeded => {
                let typed = child.input.get("output").is_some_and(Value::is_object);
                result["output"] = match (child.kind, &child.session_id) {
                    // A typed child answers with the result it delivered.
                    (RunKind::Agent, _) if typed => child.result.clone().unwrap_or(Value::Null),
                    (RunKind::Agent, Some(session_id)) => json!({
                        "text": self.final_text(session_id, child).await,
                    }),
                    _ => child.output.clone().unwrap_or(Value::Null),
                };
            }
            RunStatus::Failed => {
                let error = child.error.clone().unwrap_or(Value::Null);
                result["error"] = json!({
                    "code": error["code"].as_str().unwrap_or("run_failed"),
                    "message": error["message"].as_str().unwrap_or_default(),
                });
            }
            _ => {}
        }
        result
    }

    async fn final_text(&self, session_id: &str, child: &Run) -> String {
        let prompt_id = child.output.as_ref().and_then(|o| o["promptId"].as_str());
        let Some(prompt_id) = prompt_id else {
            return String::new();
        };
        match self.sessions.prompt_result(session_id, prompt_id).await {
            Ok(Some(Ok(outcome))) => outcome
                .message
                .content
                .iter()
                .filter_map(|block| block["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        }
    }

    /// Brings an ended awaited child's result to its parent, at most once.
    pub async fn resolve(&self, child: &Run) -> Result<(), TurnError> {
        if !child.parent_awaits || child.resolved || !child.status.is_terminal() {
            return Ok(());
        }
        let Some(parent_id) = child.parent_run_id.clone() else {
            return Ok(());
        };
        let now = unix_ms();
        let parent = self.runs.store().get(&parent_id).await?;
        let session = parent
            .as_ref()
            .filter(|p| p.kind == RunKind::Agent)
            .and_then(|p| p.session_id.clone());
        let resolved = match session {
            Some(session_id) => {
                let result = self.child_result(child).await;
                let update = json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": child.parent_tool_call_id,
                    "title": "delegate",
                    // The call completed; its result says how the child ended.
                    "status": "completed",
                    "rawOutput": stored_output(&result),
                });
                match self
                    .sessions
                    .append_with(
                        &session_id,
                        Actor::Agent,
                        vec![update],
                        true,
                        RunStore::resolve_child_statements(child, now),
                    )
                    .await
                {
                    Ok(_) => true,
                    Err(SessionError::Storage(agentos_schema::DbError::ExpectedChanges {
                        ..
                    })) => false,
                    // The parent's session is gone: the result has nowhere to go.
                    Err(SessionError::NotFound(_)) => {
                        self.runs.store().resolve_child(child, now).await?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            None => self.runs.store().resolve_child(child, now).await?,
        };
        if resolved {
            if let (Some(step), Some(parent)) = (&child.plan_step_id, &parent) {
                self.settle_step(parent, step, now).await?;
            }
            if let Ok(parent) = self.runs.get(&parent_id).await {
                self.runs.publish(parent);
            }
            self.runs.wake();
        }
        Ok(())
    }

    /// Marks plan step `step` of the parent's session done, as the
    /// runtime's doing, when every child attached to it succeeded. A
    /// failure is never inferred: that step stays the model's to judge.
    async fn settle_step(&self, parent: &Run, step: &str, now: i64) -> Result<(), RunError> {
        let Some(session_id) = &parent.session_id else {
            return Ok(());
        };
        let statuses = self
            .runs
            .store()
            .step_children(&parent.run_id, step)
            .await?;
        if statuses.is_empty() || statuses.iter().any(|s| *s != RunStatus::Succeeded) {
            return Ok(());
        }
        let store = self.sessions.store();
        let Some(mut plan) = store.plan(session_id).await? else {
            return Ok(());
        };
        let Some(steps) = plan["steps"].as_array_mut() else {
            return Ok(());
        };
        let mut changed = false;
        for entry in steps.iter_mut() {
            if entry["id"] == json!(step) && entry["status"] != "done" {
                entry["status"] = json!("done");
                entry["resolvedBy"] = json!("runtime");
                changed = true;
            }
        }
        if changed {
            settle_plan(&mut plan, now);
            store.set_plan(session_id, &plan).await?;
            self.runs
                .store()
                .set_plan(&parent.run_id, &plan, now)
                .await?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl crate::runs::Resolver for Delegation {
    async fn resolve(&self, child: &Run) {
        if let Err(e) = Delegation::resolve(self, child).await {
            tracing::warn!(run = %child.run_id, error = %e, "a child's result could not reach its parent yet");
        }
    }
}

/// A delegated child's session metadata: `{delegate: {instructions?,
/// tools?}}` (none when it was given neither).
fn child_metadata(instructions: Option<&str>, tools: Option<&[String]>) -> Option<Value> {
    if instructions.is_none() && tools.is_none() {
        return None;
    }
    let mut delegate = serde_json::Map::new();
    if let Some(instructions) = instructions {
        delegate.insert("instructions".into(), json!(instructions));
    }
    if let Some(tools) = tools {
        delegate.insert("tools".into(), json!(tools));
    }
    Some(json!({"delegate": delegate}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delegate_inputs_are_read_as_the_reference_takes_them() {
        let model = |v: Value| ChildSpec::parse(&v);
        assert!(matches!(
            model(json!({"brief": "b", "title": "t"})),
            Ok(ChildSpec::Model { ref brief, awaits: true, .. }) if brief == "b"
        ));
        assert!(matches!(
            model(json!({"input": "from input"})),
            Ok(ChildSpec::Model { ref brief, .. }) if brief == "from input"
        ));
        assert!(matches!(
            model(json!({"prompt": "lone"})),
            Ok(ChildSpec::Model { ref brief, prompt: None, .. }) if brief == "lone"
        ));
        assert_eq!(
            model(json!({"brief": "b", "prompt": "p", "agentId": "a"}))
                .unwrap_err()
                .code,
            "invalid_argument"
        );
        for field in [
            json!({"agentId": "a"}),
            json!({"tools": ["search"]}),
            json!({"output": {"type": "object"}}),
        ] {
            let mut v = json!({"brief": "b", "await": false});
            for (k, x) in field.as_object().unwrap() {
                v[k] = x.clone();
            }
            assert!(model(v).is_err(), "await:false refuses {field}");
        }
        assert!(model(json!({"brief": "b", "output": {"type": "array"}})).is_err());
        assert!(model(json!({"brief": "b", "unknown": 1})).is_err());
        assert!(model(json!({})).is_err());
        assert!(matches!(
            model(json!({"script": "export default async function(){}", "input": {"x": 1}})),
            Ok(ChildSpec::Script { ref input, .. }) if input["x"] == 1
        ));
        assert!(model(json!({"script": "s", "await": false})).is_err());
        assert!(model(json!({"script": "s", "brief": "b"})).is_err());
    }
}
