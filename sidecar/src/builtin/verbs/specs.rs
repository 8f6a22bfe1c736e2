//! The verbs as the provider sees them: names, model-facing descriptions
//! and input schemas. `delegate` is offered only to a turn that is a run
//! (there is a run to wait in); `return_result` only to a typed child.

use agentos_protocol::agent_ext::ToolSpec;
use serde_json::json;

/// The verbs offered to the provider, in this order; `delegate` only
/// when the turn is a run.
pub fn offered(in_run: bool) -> Vec<ToolSpec> {
    let mut verbs = base();
    if in_run {
        verbs.push(delegate());
    }
    verbs.push(plan());
    verbs
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
                          `~/tools/` (the tool listing) or `~/tools/<name>` (a contract), `~/self`, \
                          `thread:` (this account's threads; options.query filters by title), \
                          `thread:<id>` (its latest events), `https://…` (a web page, when granted)."
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
                          options.delete removes the file or directory), or `~/tools/<name>` with \
                          `content` a JSON tool document {description, input, output?, source, \
                          runtime?}. dryRun reports what would happen."
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
            offered(false)
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
        let specs = offered(true);
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
