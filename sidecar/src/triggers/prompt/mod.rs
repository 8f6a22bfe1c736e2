//! Trigger prompts as Seed hypermedia blocks.
//!
//! A client sends an agent trigger's prompt either as markdown or as an array
//! of hypermedia block nodes (`{"block": {...}, "children": [...]}`). Both
//! become block nodes here ([`normalize`]); the database keeps them as JSON
//! ([`to_stored`], [`from_stored`]); and they turn back into markdown when the
//! prompt is listed ([`to_markdown`]) or handed to the model
//! ([`to_resolved_markdown`]).
//!
//! The rules are the Seed agents service's (TypeScript) and those of the block
//! ⇄ markdown converters it uses, quirks included: a small hand-written
//! markdown dialect (no CommonMark), JavaScript's idea of white space, and
//! annotation offsets counted in UTF-16 code units. Where this module departs
//! from the reference, the item concerned says so. Nothing here panics on any
//! input, and no input makes the work grow faster than its size would suggest:
//! block nesting is bounded (64 levels), and rendering stops after a fixed
//! budget of output that a single input byte could be repeated into.
//!
//! This file is the public surface and the checks of client blocks;
//! `js.rs` JavaScript's semantics, `parse.rs` markdown into the block tree
//! (frontmatter, lines, id comments, headings and lists, tables),
//! `inline.rs` the inline scanner, `render.rs` blocks back into markdown.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::ops::Range;

use rand::Rng;
use serde_json::{Map, Value};

/// A refused prompt: the message is what the client reads (HTTP 400), e.g.
/// "Trigger prompt is required".
pub use super::validate::Invalid;

/// The most UTF-8 bytes a prompt may hold, as sent text and as markdown.
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// How deep block nodes may nest. [`normalize`] refuses deeper client arrays
/// ("… blocks are invalid", a limit the reference doesn't have), and the
/// renderers don't descend further, so no input can exhaust the stack.
const MAX_NESTING: usize = 64;

/// The `type` of a stored prompt row.
const STORED_TYPE: &str = "seed-prompt-blocks";

/// What the reference's `blocksToMarkdown` emits for empty metadata.
const EMPTY_FRONTMATTER: &str = "---\n---\n";

/// The placeholder character an inline embed annotation covers.
const OBJECT_REPLACEMENT: char = '\u{fffc}';

/// Output a renderer may produce from repeating its input: annotation
/// markers (a link printed once per range) and table cells (one per column
/// and row). Past it, rendering stops; see [`to_markdown`].
const RENDER_BUDGET: usize = 64 * MAX_PROMPT_BYTES;

/// The largest table grid the parser fills densely. Every cell of a rendered
/// row takes at least 3 bytes (`" | "`), so a table with more cells can never
/// be part of a valid prompt.
const MAX_TABLE_CELLS: usize = MAX_PROMPT_BYTES / 3;

/// The error message of a Query block when no hypermedia client can run it.
const QUERY_WITHOUT_CLIENT: &str = "<!-- Query error: no hypermedia client -->";

// ─── The public surface ─────────────────────────────────────────────────────

/// The service's `normalizePromptBlocks`: a prompt as block nodes, or the
/// reason it is refused.
///
/// A string is trimmed (JavaScript's `trim`), must be non-empty ("<label> is
/// required") and at most [`MAX_PROMPT_BYTES`] ("<label> is too large"), and
/// is parsed as markdown. An array is checked node by node: each must be an
/// object whose `block` is an object with non-empty string `id` and `type`
/// ("<label> blocks are invalid"), whose `children`, if neither absent nor
/// null, is an array ("<label> block children are invalid"), nested at most
/// 64 levels deep. Blocks are kept as they are (unknown keys too);
/// other node keys are dropped and `children: []` stays. Anything else is
/// "<label> must be blocks". Finally the prompt's markdown ([`to_markdown`])
/// must be non-empty and at most [`MAX_PROMPT_BYTES`].
pub fn normalize(raw: Option<&Value>, label: &str) -> Result<Vec<Value>, Invalid> {
    let blocks = match raw {
        Some(Value::String(text)) => {
            let prompt = js_trim(text);
            if prompt.is_empty() {
                return Err(required(label));
            }
            if prompt.len() > MAX_PROMPT_BYTES {
                return Err(too_large(label));
            }
            from_markdown(prompt)
        }
        Some(Value::Array(nodes)) => nodes
            .iter()
            .map(|node| normalize_node(node, label, 1))
            .collect::<Result<_, _>>()?,
        _ => return Err(Invalid(format!("{label} must be blocks"))),
    };
    let rendering = render(&blocks, Mode::Plain);
    if !rendering.complete {
        return Err(too_large(label));
    }
    if rendering.markdown.is_empty() {
        return Err(required(label));
    }
    if rendering.markdown.len() > MAX_PROMPT_BYTES {
        return Err(too_large(label));
    }
    Ok(blocks)
}

/// Markdown parsed into hypermedia block nodes, each shaped
/// `{"block": {type, id, text, annotations, attributes, link?}, "children"?: [...]}`
/// (the reference's `parseMarkdown` followed by
/// `markdownBlockNodesToHMBlockNodes`). Ids come from `<!-- id:X -->`
/// comments, or are 8 random characters from `A-Za-z0-9_-`.
///
/// Frontmatter: the reference reads the text between a leading `---` and the
/// next line starting `---` as YAML and drops it unless the YAML is
/// malformed. Without a YAML parser, this drops it only when it is empty or
/// looks like a plain mapping (`key: value` lines with simple keys and values),
/// and otherwise keeps the whole text, as the reference does for malformed
/// YAML. So `---\nHello\n---\nWorld`, whose YAML is a scalar the reference
/// drops, stays whole here.
///
/// Tables whose dense grid (columns × rows) exceeds 21,845 cells get
/// only the cells their rows actually have, instead of empty padding: the
/// markdown is the same, such a table can never be a valid prompt, and
/// padding it could take gigabytes.
pub fn from_markdown(markdown: &str) -> Vec<Value> {
    let mut tree = Tree::default();
    for token in tokenize(without_frontmatter(markdown)) {
        match token {
            Token::Heading { level, text, id } => tree.heading(level, text, id),
            Token::Paragraph { text, id } => {
                let node = tree.create(paragraph(&text, id), Vec::new());
                tree.add(node);
            }
            Token::Code { language, text, id } => {
                let mut code = Block::new("Code", id);
                code.text = text;
                code.language = (!language.is_empty()).then(|| language.to_owned());
                let node = tree.create(code, Vec::new());
                tree.add(node);
            }
            Token::Math { text, id } => {
                let mut math = Block::new("Math", id);
                math.text = text;
                let node = tree.create(math, Vec::new());
                tree.add(node);
            }
            Token::Image { alt, url, id } => {
                let mut image = Block::new("Image", id);
                image.text = alt.to_owned();
                image.link = Some(url);
                let node = tree.create(image, Vec::new());
                tree.add(node);
            }
            Token::List {
                list_type,
                items,
                container_id,
            } => {
                tree.list(&items, list_type, container_id);
            }
            Token::Table {
                lines,
                container_id,
            } => {
                let node = table(&mut tree, &lines, container_id);
                tree.add(node);
            }
        }
    }
    tree.into_values()
}

/// The JSON text the database keeps: `{"type":"seed-prompt-blocks","blocks":[...]}`.
pub fn to_stored(blocks: &[Value]) -> String {
    // Serializing `Value`s cannot fail: their map keys are strings.
    let blocks = serde_json::to_string(blocks).unwrap_or_else(|_| String::from("[]"));
    format!(r#"{{"type":"{STORED_TYPE}","blocks":{blocks}}}"#)
}

/// The service's `parseStoredPromptBlocks`: a stored row back to blocks.
///
/// A row holding `{"type":"seed-prompt-blocks","blocks":[...]}` whose blocks
/// pass [`normalize`] gives those blocks, unchanged. Anything else — legacy
/// plain text, other JSON, and (as in the reference, whose `catch` covers the
/// validation too) a blocks row that fails validation — is parsed as markdown
/// after trimming, so each read of such a row brings new random ids. Where the
/// reference would then refuse (empty or over-long text) and fail the read,
/// this returns the parse anyway: `[]` for empty text.
pub fn from_stored(stored: &str) -> Vec<Value> {
    if let Ok(Value::Object(row)) = serde_json::from_str::<Value>(stored) {
        if row.get("type").and_then(Value::as_str) == Some(STORED_TYPE) {
            if let Some(blocks @ Value::Array(_)) = row.get("blocks") {
                if let Ok(blocks) = normalize(Some(blocks), "Prompt") {
                    return blocks;
                }
            }
        }
    }
    from_markdown(js_trim(stored))
}

/// The service's `promptBlocksToMarkdown`: the blocks as markdown (top-level
/// blocks joined by one newline) without frontmatter and id comments.
///
/// Blocks that would repeat themselves into more than 4 MiB of markdown (a
/// long link over thousands of ranges, a table of thousands of duplicate
/// columns) are rendered only up to there; [`normalize`] refuses them as too
/// large, so stored prompts never get cut.
pub fn to_markdown(blocks: &[Value]) -> String {
    render(blocks, Mode::Plain).markdown
}

/// The service's `promptBlocksToResolvedMarkdown` without a hypermedia
/// client: the markdown the model reads. Top-level blocks are joined by a
/// blank line, and what needs a lookup takes the reference's fallback:
/// an Embed block is `> [Embed: LINK](LINK)`, an inline embed is
/// `[↗ LABEL](LINK)` with LABEL the link's path or shortened account id (or
/// the link itself when it is no hypermedia link), and a Query block is
/// `<!-- Query: no space specified -->` when it names no space and otherwise
/// `<!-- Query error: no hypermedia client -->` (the reference shows the
/// failed request's error message there).
pub fn to_resolved_markdown(blocks: &[Value]) -> String {
    render(blocks, Mode::Resolved).markdown
}

/// The service's `stripPromptMarkdownArtifacts`: no empty frontmatter, no
/// id comments, trimmed.
pub fn strip(markdown: &str) -> String {
    strip_artifacts(markdown)
}

/// A resolved inline embed: the label the server gave it, and whether it
/// names an account (shown as `@label`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub label: String,
    pub account: bool,
}

/// What a resolved rendering learned from a hypermedia server beforehand.
#[derive(Clone, Debug, Default)]
pub struct Lookups {
    /// Inline embeds that resolved, by link; one that did not takes the
    /// fallback label.
    pub references: HashMap<String, Reference>,
    /// Query blocks' results as markdown lines (`- [name](id)`), or the
    /// failed request's message, by the request ([`query_request`], as
    /// JSON text).
    pub queries: HashMap<String, Result<Vec<String>, String>>,
    /// Embed blocks' resources, by link; a link that is missing failed.
    pub embeds: HashMap<String, Embedded>,
}

/// An embedded resource: its label and its content (empty when it has
/// none: not found, a redirect, deleted).
#[derive(Clone, Debug, Default)]
pub struct Embedded {
    pub label: String,
    pub content: Vec<Value>,
}

pub use render::{
    fallback_doc_label, fallback_uid, query_request, select_embedded, MAX_EMBED_DEPTH,
};

/// The reference's `contentToResolvedMarkdown` with what `lookups` knows:
/// top-level blocks a blank line apart, id comments kept.
pub fn resolved_content(blocks: &[Value], lookups: &Lookups) -> String {
    Renderer {
        mode: Mode::Resolved,
        budget: RENDER_BUDGET,
        exhausted: false,
        lookups: Some(lookups),
        embed_depth: 0,
    }
    .document(blocks)
}

/// Calls `visit` with every block of `blocks`, children included, in
/// order, as deep as the renderers go.
fn each_block(blocks: &[Value], visit: &mut impl FnMut(&Map<String, Value>)) {
    fn walk(nodes: &[Value], depth: usize, visit: &mut impl FnMut(&Map<String, Value>)) {
        if depth > MAX_NESTING {
            return;
        }
        for node in nodes {
            if let Some(block) = node.get("block").and_then(Value::as_object) {
                visit(block);
            }
            if let Some(children) = node.get("children").and_then(Value::as_array) {
                walk(children, depth + 1, visit);
            }
        }
    }
    walk(blocks, 0, visit);
}

/// Appends `item` unless it is there already.
fn push_new<T: PartialEq>(out: &mut Vec<T>, item: T) {
    if !out.contains(&item) {
        out.push(item);
    }
}

/// The Embed annotations' links in `blocks`, children included, in order.
pub fn embed_links(blocks: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    each_block(blocks, &mut |block| {
        for annotation in block
            .get("annotations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if annotation.get("type").and_then(Value::as_str) == Some("Embed") {
                match annotation.get("link").and_then(Value::as_str) {
                    Some(link) if !link.is_empty() => push_new(&mut out, link.to_owned()),
                    _ => {}
                }
            }
        }
    });
    out
}

/// The Embed blocks' links in `blocks`, children included, in order.
pub fn embed_block_links(blocks: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    each_block(blocks, &mut |block| {
        if block.get("type").and_then(Value::as_str) == Some("Embed") {
            match block.get("link").and_then(Value::as_str) {
                Some(link) if !link.is_empty() => push_new(&mut out, link.to_owned()),
                _ => {}
            }
        }
    });
    out
}

/// The Query blocks' requests in `blocks`, children included.
pub fn query_requests(blocks: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    each_block(blocks, &mut |block| {
        if block.get("type").and_then(Value::as_str) == Some("Query") {
            if let Some(request) = query_request(block) {
                push_new(&mut out, request);
            }
        }
    });
    out
}

fn required(label: &str) -> Invalid {
    Invalid(format!("{label} is required"))
}

fn too_large(label: &str) -> Invalid {
    Invalid(format!("{label} is too large"))
}

/// One client node checked; `depth` counts from 1 for top-level nodes.
fn normalize_node(raw: &Value, label: &str, depth: usize) -> Result<Value, Invalid> {
    let invalid = || Invalid(format!("{label} blocks are invalid"));
    if depth > MAX_NESTING {
        return Err(invalid());
    }
    let Value::Object(node) = raw else {
        return Err(invalid());
    };
    let Some(Value::Object(block)) = node.get("block") else {
        return Err(invalid());
    };
    let non_empty = |key: &str| {
        block
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if !non_empty("id") || !non_empty("type") {
        return Err(invalid());
    }
    let children = match node.get("children") {
        None | Some(Value::Null) => None,
        Some(Value::Array(children)) => Some(children),
        Some(_) => return Err(Invalid(format!("{label} block children are invalid"))),
    };
    let mut normalized = Map::new();
    normalized.insert("block".into(), Value::Object(block.clone()));
    if let Some(children) = children {
        let children = children
            .iter()
            .map(|child| normalize_node(child, label, depth + 1))
            .collect::<Result<_, _>>()?;
        normalized.insert("children".into(), Value::Array(children));
    }
    Ok(Value::Object(normalized))
}

mod inline;
mod js;
mod parse;
mod render;
#[cfg(test)]
mod tests;

use inline::*;
use js::*;
use parse::*;
use render::*;
