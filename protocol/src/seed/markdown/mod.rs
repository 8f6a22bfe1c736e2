//! Seed's markdown dialect, read into document blocks: the Rust side of
//! `parseMarkdown`, `markdownBlockNodesToHMBlockNodes` and
//! `flattenToOperations` from Seed's published client
//! (`@seed-hypermedia/client@0.0.83`, `markdown-to-blocks`), so a document an
//! agent writes as markdown becomes the same blocks, metadata and
//! ReplaceBlock/MoveBlocks operations Seed's own server makes of it. Also
//! [`hm_block_nodes_to_operations`], the agents server's operations for
//! content given as JSON block nodes. Pure: no I/O, no clock, no randomness
//! (block ids the markdown does not give come from the caller), and no
//! errors: like the JavaScript, every input reads as some document.
//!
//! Text is measured as JavaScript measures it: annotation `starts`/`ends`
//! are UTF-16 code-unit offsets (the client counts `text.length`), so a
//! character outside the Basic Multilingual Plane counts two. The parser
//! works on UTF-16 units throughout, as the JavaScript does, and only cuts
//! where the JavaScript cuts (always beside an ASCII character).
//!
//! Frontmatter is YAML read as the JavaScript `yaml` package (2.x, YAML 1.2
//! core schema) reads it: `yaml-rust2` supplies the events, and scalars,
//! duplicate keys, anchors and the alias budget are resolved here by that
//! package's rules. Invalid frontmatter means no metadata and the whole
//! input read as markdown.
//!
//! Known differences, all in input nobody writes on purpose: a
//! `<span style="constructor:…">` (the JavaScript looks the property up on
//! a plain object and makes an annotation with no type; here it is text);
//! in frontmatter, `!!binary`, `!!set`, `!!omap` and `!!pairs` tags (read
//! as plain values), a `%YAML`/`%TAG` directive, an explicit `? key`
//! followed by a sequence, tabs in whitespace-only lines and some
//! tab-before-content indentation (the package's rules there follow its
//! syntax tree; `tab_indentation` approximates them), and some lone
//! carriage returns (taken as text, as the package takes them, except
//! after an indicator such as `:`). Frontmatter whose values, aliases
//! copied out, nest deeper than 500 or number more than a million is
//! invalid here (the package shares an aliased value where this port
//! copies it; such YAML would otherwise cost unbounded memory or stack).
//!
//! Hostile input costs about linear time, and memory and stack bounded by
//! its size: every look-ahead the JavaScript repeats is answered from
//! tables built once per text (`scan.rs`), and the tree is
//! built and walked without recursion. The tree is at most about 2,000
//! levels deep for 256 KiB of markdown (nesting needs indentation, about
//! a tab per six levels); only dropping it recurses that deep.
//!
//! The parts, in the order a document goes through them: `frontmatter.rs`
//! (with `yaml.rs` and `numbers.rs`) takes the metadata off the top;
//! `blocks.rs` reads the lines into the block tree, with `comments.rs` for
//! the id comments and `inline.rs` (over `scan.rs`'s tables and `text.rs`'s
//! UTF-16 helpers) for each block's text; this file turns the tree into
//! Seed's block nodes and operations.

use serde_json::{Map, Value};

mod blocks;
mod comments;
mod frontmatter;
mod inline;
mod numbers;
mod scan;
#[cfg(test)]
mod tests;
mod text;
mod yaml;

use blocks::*;
use comments::*;
use frontmatter::*;
use inline::*;
use numbers::*;
use scan::*;
use text::*;
use yaml::*;

// ─── Public shapes ──────────────────────────────────────────────────────────

/// An inline annotation (`Bold`, `Link`, `Embed`, …) over `text`; offsets
/// are UTF-16 code units, as in Seed's JavaScript.
#[derive(Clone, Debug, PartialEq)]
pub struct Annotation {
    pub kind: String,
    pub starts: Vec<usize>,
    pub ends: Vec<usize>,
    pub link: Option<String>,
    pub attributes: Option<Map<String, Value>>,
}

/// One block as the markdown parser makes it (the client's `SeedBlock`):
/// `children_type`, `language` and `link` are the legacy top-level fields,
/// `attributes` everything else (`columnId`, `isHeader`, comment `attrs`).
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub kind: String,
    pub id: String,
    pub text: String,
    pub annotations: Vec<Annotation>,
    pub children_type: Option<String>,
    pub language: Option<String>,
    pub link: Option<String>,
    pub attributes: Option<Map<String, Value>>,
}

/// A block and its children.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockNode {
    pub block: Block,
    pub children: Vec<BlockNode>,
}

/// What [`parse_markdown`] reads: the block tree, and the frontmatter's
/// metadata in the order JavaScript would list its keys (array-index keys
/// ascending, then the rest as written; values nested inside are
/// `serde_json` maps, ordered by key).
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    pub tree: Vec<BlockNode>,
    pub metadata: Vec<(String, Value)>,
}

impl Parsed {
    /// The metadata as one JSON object (its keys then in `serde_json`'s
    /// order, not the frontmatter's).
    pub fn metadata_json(&self) -> Value {
        Value::Object(self.metadata.iter().cloned().collect())
    }
}

impl Annotation {
    /// The annotation as JSON, `{type, starts, ends, link?, attributes?}`.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), Value::String(self.kind.clone()));
        out.insert("starts".into(), self.starts.iter().copied().collect());
        out.insert("ends".into(), self.ends.iter().copied().collect());
        if let Some(link) = &self.link {
            out.insert("link".into(), Value::String(link.clone()));
        }
        if let Some(attributes) = &self.attributes {
            out.insert("attributes".into(), Value::Object(attributes.clone()));
        }
        Value::Object(out)
    }
}

impl Block {
    fn new(kind: &str, id: String) -> Block {
        Block {
            kind: kind.to_owned(),
            id,
            text: String::new(),
            annotations: Vec::new(),
            children_type: None,
            language: None,
            link: None,
            attributes: None,
        }
    }

    /// The block as the client's `SeedBlock` JSON (legacy fields at the top
    /// level, `attributes` nested).
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), Value::String(self.kind.clone()));
        out.insert("id".into(), Value::String(self.id.clone()));
        out.insert("text".into(), Value::String(self.text.clone()));
        out.insert("annotations".into(), annotations_json(&self.annotations));
        if let Some(v) = &self.children_type {
            out.insert("childrenType".into(), Value::String(v.clone()));
        }
        if let Some(v) = &self.language {
            out.insert("language".into(), Value::String(v.clone()));
        }
        if let Some(v) = &self.link {
            out.insert("link".into(), Value::String(v.clone()));
        }
        if let Some(v) = &self.attributes {
            out.insert("attributes".into(), Value::Object(v.clone()));
        }
        Value::Object(out)
    }
}

impl BlockNode {
    /// The node as the client's `BlockNode` JSON, `{block, children}`.
    pub fn to_json(&self) -> Value {
        let open = |node: &BlockNode| {
            let mut out = Map::new();
            out.insert("block".into(), node.block.to_json());
            if node.children.is_empty() {
                out.insert("children".into(), Value::Array(Vec::new()));
                Err(out)
            } else {
                Ok(out)
            }
        };
        let mut values = map_tree(std::slice::from_ref(self), open, |mut out, children| {
            out.insert("children".into(), Value::Array(children));
            out
        });
        values.pop().unwrap_or(Value::Null)
    }
}

/// Each node of a tree as a JSON object, the children's objects put in
/// their parent's by `close`; without recursion, so no depth of nesting
/// runs out of stack. `open` makes a node's object: `Ok` when it has
/// children (to come), `Err` when it is done.
fn map_tree(
    tree: &[BlockNode],
    open: impl Fn(&BlockNode) -> Result<Map<String, Value>, Map<String, Value>>,
    close: impl Fn(Map<String, Value>, Vec<Value>) -> Map<String, Value>,
) -> Vec<Value> {
    // Per level: the nodes left, the objects made, the parent's object.
    type Level<'t> = (
        std::slice::Iter<'t, BlockNode>,
        Vec<Value>,
        Option<Map<String, Value>>,
    );
    let mut levels: Vec<Level> = vec![(tree.iter(), Vec::new(), None)];
    loop {
        let Some((nodes, made, _)) = levels.last_mut() else {
            return Vec::new();
        };
        if let Some(node) = nodes.next() {
            match open(node) {
                Ok(parent) => levels.push((node.children.iter(), Vec::new(), Some(parent))),
                Err(done) => made.push(Value::Object(done)),
            }
            continue;
        }
        let Some((_, made, parent)) = levels.pop() else {
            return Vec::new();
        };
        match (parent, levels.last_mut()) {
            (Some(parent), Some((_, siblings, _))) => {
                siblings.push(Value::Object(close(parent, made)))
            }
            _ => return made,
        }
    }
}

fn annotations_json(annotations: &[Annotation]) -> Value {
    Value::Array(annotations.iter().map(Annotation::to_json).collect())
}

/// Cells a table is padded to at most (columns × rows); a larger grid
/// keeps only the cells its rows write.
pub const MAX_DENSE_TABLE_CELLS: usize = 21_845;

/// The characters of a generated block id, as the client draws them:
/// `ID_CHARS[floor(Math.random() * 64)]`, eight times.
pub const BLOCK_ID_CHARS: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

/// A block id as the client's `generateBlockId` makes it from eight random
/// draws in [0, 1).
pub fn block_id_from_draws(mut draw: impl FnMut() -> f64) -> String {
    (0..8)
        .map(|_| {
            let x = draw();
            let idx = if x.is_finite() && x > 0.0 {
                ((x * 64.0).floor() as usize).min(63)
            } else {
                0
            };
            char::from(BLOCK_ID_CHARS[idx])
        })
        .collect()
}

/// Reads markdown in Seed's dialect (`parseMarkdown`): frontmatter into
/// metadata, the rest into a block tree. Ids the markdown gives with
/// `<!-- id:… -->` comments are kept; every other block's id is `ids()`,
/// called in the order the JavaScript calls `generateBlockId`.
pub fn parse_markdown(markdown: &str, ids: &mut impl FnMut() -> String) -> Parsed {
    let source: Vec<u16> = markdown.encode_utf16().collect();
    let (content, metadata) = parse_frontmatter_units(&source);
    let tree = {
        let ids: &mut dyn FnMut() -> String = ids;
        let mut parser = BlockParser::new(content, ids);
        parser.run();
        parser.into_tree()
    };
    Parsed { tree, metadata }
}

/// The frontmatter of `markdown` (`parseFrontmatter`): the content after it
/// and its metadata. Without valid frontmatter the content is all of
/// `markdown` and the metadata is empty.
pub fn parse_frontmatter(markdown: &str) -> (String, Vec<(String, Value)>) {
    let source: Vec<u16> = markdown.encode_utf16().collect();
    let (content, metadata) = parse_frontmatter_units(&source);
    (String::from_utf16_lossy(content), metadata)
}

/// The tree as Seed's `HMBlockNode`s (`markdownBlockNodesToHMBlockNodes`):
/// `{block: {type, id, text, annotations, attributes, link?}, children?}`,
/// with `childrenType` and `language` moved into `attributes` and
/// `children` left out when there are none.
pub fn to_hm_block_nodes(tree: &[BlockNode]) -> Vec<Value> {
    let open = |node: &BlockNode| {
        let block = &node.block;
        let mut attributes = block.attributes.clone().unwrap_or_default();
        if let Some(v) = &block.children_type {
            attributes.insert("childrenType".into(), Value::String(v.clone()));
        }
        if let Some(v) = &block.language {
            attributes.insert("language".into(), Value::String(v.clone()));
        }
        let mut hm = Map::new();
        hm.insert("type".into(), Value::String(block.kind.clone()));
        hm.insert("id".into(), Value::String(block.id.clone()));
        hm.insert("text".into(), Value::String(block.text.clone()));
        hm.insert("annotations".into(), annotations_json(&block.annotations));
        hm.insert("attributes".into(), Value::Object(attributes));
        if let Some(link) = &block.link {
            hm.insert("link".into(), Value::String(link.clone()));
        }
        let mut out = Map::new();
        out.insert("block".into(), Value::Object(hm));
        if node.children.is_empty() {
            Err(out)
        } else {
            Ok(out)
        }
    };
    map_tree(tree, open, |mut out, children| {
        out.insert("children".into(), Value::Array(children));
        out
    })
}

/// The tree as document operations (`flattenToOperations`): per level, a
/// `ReplaceBlock` per block (attributes inlined at the top level of the
/// block, then `type`, `id`, `text`, `annotations`, `language`,
/// `childrenType`, `link`), each block's children's operations after it,
/// and one `MoveBlocks` placing the level's blocks under `parent_id` (`""`
/// for the document root). JSON values; [`super::json_to_ipld`] with
/// `JsonForm::Plain` makes them IPLD.
pub fn flatten_to_operations(tree: &[BlockNode], parent_id: &str) -> Vec<Value> {
    let replace = |b: &Block| {
        let mut block = b.attributes.clone().unwrap_or_default();
        block.insert("type".into(), Value::String(b.kind.clone()));
        block.insert("id".into(), Value::String(b.id.clone()));
        block.insert("text".into(), Value::String(b.text.clone()));
        block.insert("annotations".into(), annotations_json(&b.annotations));
        if let Some(v) = &b.language {
            block.insert("language".into(), Value::String(v.clone()));
        }
        if let Some(v) = &b.children_type {
            block.insert("childrenType".into(), Value::String(v.clone()));
        }
        if let Some(v) = &b.link {
            block.insert("link".into(), Value::String(v.clone()));
        }
        operation("ReplaceBlock", "block", Value::Object(block))
    };
    let mut ops = Vec::new();
    // Per level (without recursion): the nodes left, their ids so far, the
    // parent's id.
    let mut levels = vec![(tree.iter(), Vec::new(), parent_id)];
    while let Some((nodes, block_ids, _)) = levels.last_mut() {
        if let Some(node) = nodes.next() {
            ops.push(replace(&node.block));
            block_ids.push(Value::String(node.block.id.clone()));
            if !node.children.is_empty() {
                levels.push((node.children.iter(), Vec::new(), &node.block.id));
            }
            continue;
        }
        if let Some((_, block_ids, parent)) = levels.pop() {
            if !block_ids.is_empty() {
                ops.push(move_blocks(block_ids, Value::String(parent.to_owned())));
            }
        }
    }
    ops
}

/// Operations for content given as `HMBlockNode` JSON (the agents server's
/// `hmBlockNodesToOperations`): per level, a `ReplaceBlock` carrying each
/// node's `block` as it is (attributes stay nested), its children's
/// operations after it, then one `MoveBlocks` under the parent (`""` at the
/// root). Lenient: a node without `block` or `id` gives `null` there.
pub fn hm_block_nodes_to_operations(nodes: &[Value]) -> Vec<Value> {
    let mut ops = Vec::new();
    // Per level (without recursion): the nodes left, their ids so far, the
    // parent's id.
    let mut levels = vec![(nodes.iter(), Vec::new(), Value::String(String::new()))];
    while let Some((nodes, block_ids, _)) = levels.last_mut() {
        if let Some(node) = nodes.next() {
            let block = node.get("block").cloned().unwrap_or(Value::Null);
            let id = block.get("id").cloned().unwrap_or(Value::Null);
            ops.push(operation("ReplaceBlock", "block", block));
            block_ids.push(id.clone());
            if let Some(children) = node.get("children").and_then(Value::as_array) {
                if !children.is_empty() {
                    levels.push((children.iter(), Vec::new(), id));
                }
            }
            continue;
        }
        if let Some((_, block_ids, parent)) = levels.pop() {
            if !block_ids.is_empty() {
                ops.push(move_blocks(block_ids, parent));
            }
        }
    }
    ops
}

fn operation(kind: &str, key: &str, value: Value) -> Value {
    let mut op = Map::new();
    op.insert("type".into(), Value::String(kind.to_owned()));
    op.insert(key.to_owned(), value);
    Value::Object(op)
}

fn move_blocks(blocks: Vec<Value>, parent: Value) -> Value {
    let mut op = Map::new();
    op.insert("type".into(), Value::String("MoveBlocks".into()));
    op.insert("blocks".into(), Value::Array(blocks));
    op.insert("parent".into(), parent);
    Value::Object(op)
}
