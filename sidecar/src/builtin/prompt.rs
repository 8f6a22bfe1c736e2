//! The builtin agent's system prompt: the agent's own instructions (plain
//! text, or Seed's block tree flattened to its text), the runtime prompt
//! every builtin agent shares, and the `<space>` index.

use agentos_protocol::seed::{Ipld, SystemPrompt};

/// What every builtin agent is told about its world.
pub const RUNTIME_PROMPT: &str = "\
You work inside a durable session: everything you say and every tool you use is recorded in \
the session's log, which the user can read and act on too (the user's own tool uses appear as \
<user_action> messages). Your tools are a few verbs over one address space:
- read{address}: `~/memory/<path>` (your memory files; a directory gives a listing), \
`~/tools/` and `~/tools/<name>` (tool contracts), `~/self`, `thread:` (the account's threads) \
and `thread:<id>`, and `https://…` pages when your grants allow.
- write{address, content}: `~/memory/<path>` files (options.delete removes one), \
`~/tools/<name>` authored tools.
- call{tool, input}: a callable tool. The first call of a tool you have not read returns its \
contract; call it again with input that fits. Once you have read a tool it is offered to you \
directly.
- status{title?, description?}: name the session.
- continue_session{reason, title, handoff}: hand the work over to a fresh session when this one \
is too long.
Be concise. Do not repeat a tool call whose result you already have.";

/// Blocks nested deeper than this are not read.
const MAX_BLOCK_DEPTH: usize = 32;

/// The system prompt of one turn.
pub fn system_prompt(instructions: &SystemPrompt, space_index: &str) -> String {
    let mut prompt = match instructions {
        SystemPrompt::Text(text) => text.trim().to_owned(),
        SystemPrompt::Blocks(blocks) => {
            let mut lines = Vec::new();
            for block in blocks {
                block_text(block, 0, &mut lines);
            }
            lines.join("\n")
        }
    };
    if !prompt.is_empty() {
        prompt.push_str("\n\n");
    }
    prompt.push_str(RUNTIME_PROMPT);
    if !space_index.is_empty() {
        prompt.push_str("\n\n");
        prompt.push_str(space_index);
    }
    prompt
}

/// Collects the `text` of a block and its children, in order.
fn block_text(block: &Ipld, depth: usize, lines: &mut Vec<String>) {
    if depth > MAX_BLOCK_DEPTH {
        return;
    }
    let Ipld::Map(map) = block else {
        return;
    };
    if let Some(Ipld::String(text)) = map.get("text") {
        if !text.trim().is_empty() {
            lines.push(text.trim().to_owned());
        }
    }
    if let Some(Ipld::Map(inner)) = map.get("block") {
        if let Some(Ipld::String(text)) = inner.get("text") {
            if !text.trim().is_empty() {
                lines.push(text.trim().to_owned());
            }
        }
    }
    if let Some(Ipld::List(children)) = map.get("children") {
        for child in children {
            block_text(child, depth + 1, lines);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn instructions_runtime_and_index_in_that_order() {
        let prompt = system_prompt(&SystemPrompt::Text("Be brief.".into()), "<space>x</space>");
        let a = prompt.find("Be brief.").unwrap();
        let b = prompt.find("durable session").unwrap();
        let c = prompt.find("<space>").unwrap();
        assert!(a < b && b < c);
    }

    #[test]
    fn blocks_are_flattened_to_their_text() {
        let leaf = |t: &str| {
            Ipld::Map(BTreeMap::from([(
                "block".to_owned(),
                Ipld::Map(BTreeMap::from([(
                    "text".to_owned(),
                    Ipld::String(t.into()),
                )])),
            )]))
        };
        let mut parent = BTreeMap::from([(
            "block".to_owned(),
            Ipld::Map(BTreeMap::from([(
                "text".to_owned(),
                Ipld::String("Rules".into()),
            )])),
        )]);
        parent.insert(
            "children".into(),
            Ipld::List(vec![leaf("one"), leaf("two")]),
        );
        let prompt = system_prompt(&SystemPrompt::Blocks(vec![Ipld::Map(parent)]), "");
        assert!(prompt.starts_with("Rules\none\ntwo\n\n"));
    }
}
