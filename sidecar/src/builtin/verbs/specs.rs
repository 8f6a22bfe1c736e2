//! The verbs as the provider sees them: names, model-facing descriptions
//! and input schemas. `delegate` is offered only to a turn that is a run
//! (there is a run to wait in); `return_result` only to a typed child.

use agentos_protocol::agent_ext::ToolSpec;
use serde_json::{json, Value};

/// The verbs offered to the provider, in this order; `delegate` only
/// when the turn is a run, `return_result` (whose parameters are the
/// schema) only when the run is a child asked for a typed `output`.
pub fn offered(in_run: bool, output: Option<Value>) -> Vec<ToolSpec> {
    let mut verbs = base();
    if in_run {
        verbs.push(delegate());
    }
    verbs.push(plan());
    if let (true, Some(schema)) = (in_run, output) {
        verbs.push(return_result(schema));
    }
    verbs
}

fn return_result(schema: Value) -> ToolSpec {
    ToolSpec {
        name: "return_result".into(),
        description: "Deliver your result to the run that delegated this work: its parameters                       are the result, which must match this schema. A result that does not                       match is refused with the reasons; a valid one ends your turn."
            .into(),
        parameters: schema,
    }
}

fn delegate() -> ToolSpec {
    ToolSpec {
        name: "delegate".into(),
        description: "Hand a piece of work to a child and wait for its result, which comes back \
                      as this call's result: a model child gets `brief` (exactly its first \
                      message, it does not see this conversation) and works in its own session; \
                      a script child runs `script`, an ES module exporting one `default async \
                      function (input, ctx)`, with `input`. `await:false` starts a model child \
                      without waiting. Several delegate calls in one step run in parallel."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "brief": {"type": "string"},
                "title": {"type": "string"},
                "prompt": {"type": "string"},
                "tools": {"type": "array", "items": {"type": "string"}},
                "output": {"type": "object"},
                "await": {"type": "boolean"},
                "script": {"type": "string"},
                "input": {},
                "planStepId": {"type": "string"},
            },
        }),
    }
}

fn plan() -> ToolSpec {
    ToolSpec {
        name: "plan".into(),
        description: "Replace this session's plan: a title and the steps with their status \
                      (pending, running, done, failed, skipped). A step whose delegated \
                      children all succeeded is marked done for you."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "steps": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "label": {"type": "string"},
                        "status": {"type": "string",
                                   "enum": ["pending", "running", "done", "failed", "skipped"]},
                    },
                    "required": ["label"],
                }},
            },
            "required": ["steps"],
        }),
    }
}

fn base() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read".into(),
            description: "Read an address: `~/memory/<path>` (a file, or a directory's listing), \
                          `~/tools/` (the tool listing) or `~/tools/<name>` (a contract), `~/triggers/` (this \
                          agent's triggers) or `~/triggers/<name>` (one, with its latest firings), `attachment:<id>` \
                          (a file attached to this conversation; images are shown to you when the model supports it), `~/self`, \
                          `thread:` (this account's threads; options.query filters by title), \
                          `thread:<id>` (its latest events), `https://…` (a web page, when granted), \
                          `hm://<account>/<path>` (a Seed hypermedia document or comment, as markdown \
                          or with format json; `:profile`, `:directory`, `:attributes` views), \
                          `activity:` (the hypermedia activity feed), `ipfs://<cid>` (a file, saved \
                          into memory)."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "address": {"type": "string"},
                    "format": {"type": "string", "enum": ["markdown", "json"]},
                    "options": {"type": "object"},
                },
                "required": ["address"],
            }),
        },
        ToolSpec {
            name: "write".into(),
            description: "Write an address: `~/memory/<path>` with `content` (creates parents; \
                          options.delete removes the file or directory; options.fromUrl \
                          downloads a web file there (binary media too), by default at \
                          `downloads/<name>`; options.fromAttachment \
                          saves one of this conversation's attachments there, by default at \
                          `attachments/<name>`), or `~/tools/<name>` with \
                          `content` a JSON tool document {description, input, output?, source, \
                          runtime?}; or publish: `hm://<account>/<path>` with markdown `content` \
                          and options {name, signer?: {publicKey}} creates a document (options.action: \
                          update, comment with replyTo, or a raw command), `ipfs://` with \
                          options.fromPath (a memory file) or options.fromAttachment uploads a file. \
                          dryRun reports what would happen (for hm://, validates without publishing)."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "address": {"type": "string"},
                    "content": {"type": "string"},
                    "options": {"type": "object"},
                    "dryRun": {"type": "boolean"},
                },
                "required": ["address"],
            }),
        },
        ToolSpec {
            name: "call".into(),
            description: "Call a callable tool by name with its input. A tool you have not read \
                          yet answers with its contract first; `read ~/tools/` lists them."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "tool": {"type": "string"},
                    "input": {"type": "object"},
                },
                "required": ["tool"],
            }),
        },
        ToolSpec {
            name: "status".into(),
            description: "Set this session's title (and a one-line description of what it is \
                          doing). A title the user set is kept."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "description": {"type": "string"},
                },
            }),
        },
        ToolSpec {
            name: "continue_session".into(),
            description: "Hand this work to a fresh session when this one grows too long: the \
                          successor starts from your handoff. Ends this turn."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "reason": {"type": "string"},
                    "title": {"type": "string"},
                    "description": {"type": "string"},
                    "handoff": {"type": "string"},
                },
                "required": ["reason", "title", "handoff"],
            }),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_offered_verb_has_an_object_schema() {
        assert_eq!(
            offered(false, None)
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            [
                "read",
                "write",
                "call",
                "status",
                "continue_session",
                "plan"
            ]
        );
        // A typed output is offered only inside a run.
        assert!(offered(false, Some(json!({"type": "object"})))
            .iter()
            .all(|s| s.name != "return_result"));
        let typed = offered(true, Some(json!({"type": "object", "required": ["n"]})));
        let last = typed.last().expect("verbs");
        assert_eq!(
            (last.name.as_str(), &last.parameters["required"]),
            ("return_result", &json!(["n"]))
        );
        let specs = offered(true, None);
        assert_eq!(
            specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            [
                "read",
                "write",
                "call",
                "status",
                "continue_session",
                "delegate",
                "plan"
            ]
        );
        for spec in specs {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        }
    }
}
