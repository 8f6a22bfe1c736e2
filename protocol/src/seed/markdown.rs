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
//! tables built once per text (see the inline section), and the tree is
//! built and walked without recursion. The tree is at most about 2,000
//! levels deep for 256 KiB of markdown (nesting needs indentation, about
//! a tab per six levels); only dropping it recurses that deep.

use serde_json::{Map, Value};
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::TScalarStyle;

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

// ─── UTF-16 helpers (JavaScript string semantics) ───────────────────────────

/// The ASCII byte at `i`, or 0x80 (matches no pattern) past the end or for
/// any non-ASCII unit.
fn at(s: &[u16], i: usize) -> u8 {
    match s.get(i) {
        Some(&c) if c < 0x80 => c as u8,
        _ => 0x80,
    }
}

/// JavaScript's `\s` (and what `trim` removes).
fn is_space(c: u16) -> bool {
    matches!(
        c,
        0x09..=0x0d
            | 0x20
            | 0xa0
            | 0x1680
            | 0x2000..=0x200a
            | 0x2028
            | 0x2029
            | 0x202f
            | 0x205f
            | 0x3000
            | 0xfeff
    )
}

/// What a JavaScript `.` does not match.
fn is_line_terminator(c: u16) -> bool {
    matches!(c, 0x0a | 0x0d | 0x2028 | 0x2029)
}

fn trim(s: &[u16]) -> &[u16] {
    let start = s.iter().position(|&c| !is_space(c)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&c| !is_space(c))
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

fn starts_with(s: &[u16], prefix: &str) -> bool {
    starts_with_at(s, 0, prefix)
}

fn starts_with_at(s: &[u16], i: usize, prefix: &str) -> bool {
    let p = prefix.as_bytes();
    s.len() >= i + p.len()
        && s[i..i + p.len()]
            .iter()
            .zip(p)
            .all(|(&a, &b)| a == u16::from(b))
}

fn index_of(s: &[u16], unit: u8, from: usize) -> Option<usize> {
    s.get(from..)?
        .iter()
        .position(|&c| c == u16::from(unit))
        .map(|p| p + from)
}

fn skip_spaces(s: &[u16], mut i: usize) -> usize {
    while i < s.len() && is_space(s[i]) {
        i += 1;
    }
    i
}

fn units(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

fn string(s: &[u16]) -> String {
    String::from_utf16_lossy(s)
}

fn is_id_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

/// The end of the run of id characters (`[A-Za-z0-9_-]`) from `i`.
fn id_run_end(s: &[u16], mut i: usize) -> usize {
    while is_id_char(at(s, i)) {
        i += 1;
    }
    i
}

/// `^[a-zA-Z][a-zA-Z0-9+.-]*:` at the start of `s`: the index of the colon.
fn scheme_colon(s: &[u16]) -> Option<usize> {
    if !at(s, 0).is_ascii_alphabetic() {
        return None;
    }
    let mut i = 1;
    while matches!(at(s, i), c if c.is_ascii_alphanumeric() || c == b'+' || c == b'.' || c == b'-')
    {
        i += 1;
    }
    (at(s, i) == b':').then_some(i)
}

// ─── Inline formatting ──────────────────────────────────────────────────────
//
// `parseInlineFormatting` reads its text once, but looks ahead from many
// places (the `]` matching a `[`, the `)` ending a URL, the backtick run
// closing a code span, the next `>` or `"`), each time as far as the text
// goes; it parses a link label by calling itself on the label, and every
// enclosing call merges the label's annotations again. On hostile text
// (256 KiB of `[`, say) that is quadratic. Here every look-ahead is
// answered from tables built once per text ([`Scan`]), a label is a frame
// over the same text (positions stay those of the whole text; a frame's
// end hides what lies past it), and all frames write one text and one list
// of annotations, merged once at the end into the order the nested merges
// would leave ([`Ties`]).

#[derive(Clone, Debug)]
struct Ann {
    kind: &'static str,
    start: usize,
    end: usize,
    link: Option<String>,
    attributes: Option<Map<String, Value>>,
}

struct Inline {
    text: Vec<u16>,
    annotations: Vec<Ann>,
}

impl Inline {
    fn into_parts(self) -> (String, Vec<Annotation>) {
        let annotations = self
            .annotations
            .into_iter()
            .map(|a| Annotation {
                kind: a.kind.to_owned(),
                starts: vec![a.start],
                ends: vec![a.end],
                link: a.link,
                attributes: a.attributes,
            })
            .collect();
        (string(&self.text), annotations)
    }
}

const SPAN_STYLES: [(&str, &str); 4] = [
    ("color", "TextColor"),
    ("background-color", "BackgroundColor"),
    ("font-size", "TextSize"),
    ("font-family", "TextFamily"),
];

/// `<br\s*\/?>` at `i`: its length.
fn match_br(s: &[u16], i: usize) -> Option<usize> {
    if !starts_with_at(s, i, "<br") {
        return None;
    }
    let mut j = skip_spaces(s, i + 3);
    if at(s, j) == b'/' {
        j += 1;
    }
    (at(s, j) == b'>').then_some(j + 1 - i)
}

fn replace_br(s: &[u16]) -> Vec<u16> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if let Some(len) = match_br(s, i) {
            out.push(u16::from(b'\n'));
            i += len;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

fn run_len(s: &[u16], i: usize, unit: u8) -> usize {
    s.get(i..).map_or(0, |r| {
        r.iter().take_while(|&&c| c == u16::from(unit)).count()
    })
}

/// No position, in the scanning tables.
const NO: u32 = u32::MAX;

/// A position as the tables hold it (texts stay far below 4 Gi units).
fn pos32(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(NO)
}

fn opt(x: u32) -> Option<usize> {
    (x != NO).then_some(x as usize)
}

/// The positions of one unit in a text, ascending.
struct Occurrences(Vec<u32>);

impl Occurrences {
    fn new(s: &[u16], unit: u8) -> Occurrences {
        Occurrences(
            (0..s.len())
                .filter(|&k| s[k] == u16::from(unit))
                .map(pos32)
                .collect(),
        )
    }

    /// The first at or after `from`, if it is before `to`.
    fn first(&self, from: usize, to: usize) -> Option<usize> {
        let k = self.0.partition_point(|&p| (p as usize) < from);
        self.0.get(k).map(|&p| p as usize).filter(|&p| p < to)
    }
}

/// The maximal backtick runs of a text, by length.
struct Backticks {
    by_len: std::collections::HashMap<usize, Vec<u32>>,
}

impl Backticks {
    fn new(s: &[u16]) -> Backticks {
        let mut by_len: std::collections::HashMap<usize, Vec<u32>> =
            std::collections::HashMap::new();
        let mut i = 0;
        while i < s.len() {
            if at(s, i) == b'`' {
                let n = run_len(s, i, b'`');
                by_len.entry(n).or_default().push(pos32(i));
                i += n;
            } else {
                i += 1;
            }
        }
        Backticks { by_len }
    }

    /// `findBacktickRun(s, from, n)` where `from` ends a run: the first run
    /// of exactly `n` backticks starting in `from..to`. (A frame's text
    /// ends before a `]`, so its runs are runs of the whole text.)
    fn closer(&self, n: usize, from: usize, to: usize) -> Option<usize> {
        let starts = self.by_len.get(&n)?;
        let k = starts.partition_point(|&p| (p as usize) < from);
        starts.get(k).map(|&p| p as usize).filter(|&p| p < to)
    }
}

/// `readLink`'s walks over a whole text, from every position at once.
///
/// From a `[` the label walk steps one unit, two after a `\`, and from a
/// backtick run past the run closing it (past itself when none does);
/// every position has one next step, so the walks form a tree, and the
/// `]` matching a `[` is where the bracket count along its path first
/// comes back to zero. Over the whole text that is [`Walk::close`]. In a
/// frame ending at `b` the walk differs only where the whole text's walk
/// jumps from a backtick run before `b` to a closer after it (the frame
/// sees no closer there and steps past the run): a `[` whose path crosses
/// `b` otherwise has no match in the frame, found by a jump-pointer search
/// for the path's last position before `b`; only past such a jump is the
/// frame's walk followed step by step, remembering each `[`'s match.
struct Walk {
    /// The label walk's next position from each position (`n` is past
    /// the end).
    next: Vec<u32>,
    /// A jump pointer (skew binary) further along each position's path.
    jump: Vec<u32>,
    /// For each position, where the walk from it first closes one more
    /// bracket than it opens (`NO`: never); `close[p + 1]` matches the `[`
    /// at `p`.
    close: Vec<u32>,
    /// The same for the URL's walk (`(`, `)`, a `\` skipping a unit):
    /// the `)` ending a URL that starts at each position.
    paren: Vec<u32>,
    /// The first `[`, `]`, `\` or backtick at or after each position.
    special: Vec<u32>,
    /// Matches found in frames: (the `]` or `NO`, the frame's end; 0 when
    /// none is known). A frame's end is that of no other frame.
    memo: Vec<(u32, u32)>,
}

impl Walk {
    fn new(s: &[u16], ticks: &Backticks) -> Walk {
        let n = s.len();
        let end = pos32(n);
        let mut next = vec![end; n + 1];
        // Steps from each position to the end.
        let mut depth = vec![0u32; n + 1];
        let mut jump = vec![end; n + 1];
        let mut close = vec![NO; n + 1];
        let mut paren = vec![NO; n + 1];
        let mut special = vec![end; n + 1];
        // The end of the backtick run holding `x`, while `x` is in one.
        let mut run_end = n;
        for x in (0..n).rev() {
            let c = at(s, x);
            if c == b'`' && at(s, x + 1) != b'`' {
                run_end = x + 1;
            }
            let nx = match c {
                b'\\' => (x + 2).min(n),
                b'`' => {
                    let len = run_end - x;
                    ticks.closer(len, run_end, n).map_or(run_end, |c| c + len)
                }
                _ => x + 1,
            };
            next[x] = pos32(nx);
            depth[x] = depth[nx] + 1;
            let j = jump[nx] as usize;
            jump[x] = if depth[nx] - depth[j] == depth[j] - depth[jump[j] as usize] {
                jump[j]
            } else {
                pos32(nx)
            };
            close[x] = match c {
                b']' => pos32(x),
                b'[' => opt(close[x + 1]).map_or(NO, |m| close[m + 1]),
                _ => close[nx],
            };
            paren[x] = match c {
                b')' => pos32(x),
                b'(' => opt(paren[x + 1]).map_or(NO, |m| paren[m + 1]),
                b'\\' => paren[(x + 2).min(n)],
                _ => paren[x + 1],
            };
            special[x] = if matches!(c, b'[' | b']' | b'\\' | b'`') {
                pos32(x)
            } else {
                special[x + 1]
            };
        }
        Walk {
            next,
            jump,
            close,
            paren,
            special,
            memo: vec![(NO, 0); n],
        }
    }

    /// The last position before `b` on the whole text's walk from `x`
    /// (`x < b`).
    fn last_before(&self, mut x: usize, b: usize) -> usize {
        loop {
            let next = self.next[x] as usize;
            if next >= b {
                return x;
            }
            let jump = self.jump[x] as usize;
            x = if jump < b { jump } else { next };
        }
    }

    /// The match of the `[` at `p` in a frame ending at `b`, when known
    /// without following the frame's walk.
    fn known(&self, s: &[u16], p: usize, b: usize) -> Option<Option<usize>> {
        let (m, bound) = self.memo[p];
        if bound as usize == b {
            return Some(opt(m));
        }
        // Found in an enclosing frame, before this one ends: the walk
        // there never looked past it, so it is this frame's walk too.
        if bound != 0 && m != NO && (m as usize) < b {
            return Some(Some(m as usize));
        }
        if let Some(m) = opt(self.close[p + 1]).filter(|&m| m < b) {
            return Some(Some(m));
        }
        // The whole text's own walk (no jump leaves it).
        if b >= s.len() {
            return Some(None);
        }
        let y = self.last_before(p, b);
        let jumps_out = at(s, y) == b'`' && self.next[y] as usize > b;
        (!jumps_out).then_some(None)
    }

    /// `readLink`'s `]` for the `[` at `p` in a frame ending at `b`.
    fn bracket_close(&mut self, s: &[u16], ticks: &Backticks, p: usize, b: usize) -> Option<usize> {
        if let Some(known) = self.known(s, p, b) {
            return known;
        }
        // Follow the frame's walk; `open` holds the `[`s not matched yet.
        let mut open = vec![p];
        let mut q = p + 1;
        loop {
            q = self.special[q.min(s.len())] as usize;
            if q >= b {
                break;
            }
            match at(s, q) {
                b']' => {
                    let Some(o) = open.pop() else { break };
                    self.memo[o] = (pos32(q), pos32(b));
                    if open.is_empty() {
                        return Some(q);
                    }
                    q += 1;
                }
                b'[' => match self.known(s, q, b) {
                    Some(Some(m)) => q = m + 1,
                    Some(None) => break,
                    None => {
                        open.push(q);
                        q += 1;
                    }
                },
                b'\\' => q += 2,
                _ => {
                    let n = run_len(s, q, b'`');
                    q = ticks.closer(n, q + n, b).map_or(q + n, |c| c + n);
                }
            }
        }
        for o in open {
            self.memo[o] = (NO, pos32(b));
        }
        None
    }
}

/// The look-ahead tables of one text, each built when first needed.
struct Scan<'a> {
    s: &'a [u16],
    greater: Option<Occurrences>,
    quote: Option<Occurrences>,
    ticks: Option<Backticks>,
    walk: Option<Walk>,
}

impl<'a> Scan<'a> {
    fn new(s: &'a [u16]) -> Scan<'a> {
        Scan {
            s,
            greater: None,
            quote: None,
            ticks: None,
            walk: None,
        }
    }

    /// `indexOf('>', from)` in a frame ending at `to`.
    fn greater(&mut self, from: usize, to: usize) -> Option<usize> {
        let s = self.s;
        self.greater
            .get_or_insert_with(|| Occurrences::new(s, b'>'))
            .first(from, to)
    }

    /// `indexOf('"', from)` in a frame ending at `to`.
    fn quote(&mut self, from: usize, to: usize) -> Option<usize> {
        let s = self.s;
        self.quote
            .get_or_insert_with(|| Occurrences::new(s, b'"'))
            .first(from, to)
    }

    /// `findBacktickRun(s, from, n)` in a frame ending at `to`.
    fn backtick_run(&mut self, n: usize, from: usize, to: usize) -> Option<usize> {
        let s = self.s;
        self.ticks
            .get_or_insert_with(|| Backticks::new(s))
            .closer(n, from, to)
    }

    /// `readLink(s, open)` in a frame ending at `to`: `[label](url)` or
    /// `[label](<url>)` with the `[` at `open`.
    fn read_link(&mut self, open: usize, to: usize) -> Option<LinkAt> {
        let s = self.s;
        if self.walk.is_none() {
            let ticks = self.ticks.get_or_insert_with(|| Backticks::new(s));
            self.walk = Some(Walk::new(s, ticks));
        }
        let (walk, ticks) = (self.walk.as_mut()?, self.ticks.as_ref()?);
        let close = walk.bracket_close(s, ticks, open, to)?;
        let t = &s[..to];
        if at(t, close + 1) != b'(' {
            return None;
        }
        let label = (open + 1, close);
        let j = close + 2;
        if at(t, j) == b'<' {
            let gt = self.greater(j + 1, to)?;
            if at(t, gt + 1) != b')' {
                return None;
            }
            return Some(LinkAt {
                label,
                url: (j + 1, gt),
                end: gt + 2,
            });
        }
        let paren = opt(self.walk.as_ref()?.paren[j]).filter(|&p| p < to)?;
        Some(LinkAt {
            label,
            url: (close + 2, paren),
            end: paren + 1,
        })
    }
}

struct LinkAt {
    label: (usize, usize),
    url: (usize, usize),
    end: usize,
}

/// `readLink(s, open)` over all of `s`.
fn read_link(s: &[u16], open: usize) -> Option<LinkAt> {
    Scan::new(s).read_link(open, s.len())
}

/// `<span style="prop:value">` at `i` (`s` ends where the frame does):
/// the annotation type, the value's range and the tag's length.
fn match_span(
    s: &[u16],
    i: usize,
    scan: &mut Scan,
) -> Option<(&'static str, (usize, usize), usize)> {
    let open = "<span style=\"";
    if !starts_with_at(s, i, open) {
        return None;
    }
    let p0 = i + open.len();
    let mut p = p0;
    while matches!(at(s, p), c if c.is_ascii_lowercase() || c == b'-') {
        p += 1;
    }
    if p == p0 || at(s, p) != b':' {
        return None;
    }
    let v0 = p + 1;
    let quote = scan.quote(v0, s.len())?;
    if at(s, quote + 1) != b'>' {
        return None;
    }
    let prop = string(&s[p0..p]);
    let kind = SPAN_STYLES.iter().find(|(k, _)| *k == prop)?.1;
    Some((kind, (v0, quote), quote + 2 - i))
}

fn decode_html_attr(s: &[u16]) -> String {
    string(s)
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// An autolink's inside: `^[a-zA-Z][a-zA-Z0-9+.-]*:\S*$` with no `<`/`>`.
fn is_autolink(inner: &[u16]) -> bool {
    match scheme_colon(inner) {
        Some(colon) => inner[colon + 1..]
            .iter()
            .all(|&c| !is_space(c) && c != u16::from(b'<') && c != u16::from(b'>')),
        None => false,
    }
}

/// One annotation as the scan makes it, in the order the JavaScript
/// pushes annotations (the first piece of each, see [`Spans`]): its merge
/// key, range and frame. An open span's `end` moves as the text grows.
struct Item {
    key: u32,
    start: u32,
    end: u32,
    frame: u32,
}

/// What an annotation carries besides its range.
type Proto = (&'static str, Option<String>, Option<Map<String, Value>>);

/// The annotations' merge keys (type, link, attributes), each with what
/// its annotations carry; the first six are those with only a type.
struct Keys {
    index: std::collections::HashMap<(&'static str, String, String), u32>,
    protos: Vec<Proto>,
}

const BOLD: u32 = 0;
const ITALIC: u32 = 1;
const STRIKE: u32 = 2;
const UNDERLINE: u32 = 3;
const RANGE: u32 = 4;
const CODE: u32 = 5;

impl Keys {
    fn new() -> Keys {
        let plain = ["Bold", "Italic", "Strike", "Underline", "Range", "Code"];
        Keys {
            index: std::collections::HashMap::new(),
            protos: plain.iter().map(|&kind| (kind, None, None)).collect(),
        }
    }

    /// The key of a link or of a styled span.
    fn id(
        &mut self,
        kind: &'static str,
        link: Option<String>,
        attributes: Option<Map<String, Value>>,
    ) -> u32 {
        let key = (
            kind,
            link.clone().unwrap_or_default(),
            attributes
                .as_ref()
                .map(|m| serde_json::to_string(m).unwrap_or_default())
                .unwrap_or_default(),
        );
        if let Some(&k) = self.index.get(&key) {
            return k;
        }
        let k = pos32(self.protos.len());
        self.index.insert(key, k);
        self.protos.push((kind, link, attributes));
        k
    }
}

/// The kinds of open span `toggle` and `closeType` look for: bold and
/// italic by `*` and by `_`, strike, underline, mark, styled spans.
const SPAN_KINDS: usize = 8;
const STYLED: usize = 7;

struct OpenSpan {
    key: u32,
    start: u32,
    /// Its annotation once the first piece is emitted, else `NO`.
    item: u32,
}

/// One frame's open spans (`stack` in `parseInlineFormatting`).
///
/// Closing a span below others closes and reopens those above it: the
/// JavaScript emits a piece of each (when not empty) and merging joins the
/// pieces again. Here a span stays one annotation from where it opened to
/// where it finally closes, emitted where its first piece would be, which
/// is all the final order depends on; so a close costs only the spans
/// above it that emit their first piece then.
#[derive(Default)]
struct Spans {
    /// Every span opened, in order (the stack's order); `None` once closed.
    list: Vec<Option<OpenSpan>>,
    /// The open spans of each kind, in order.
    by_kind: [Vec<u32>; SPAN_KINDS],
    /// Spans with no piece emitted yet, opened before the text last grew
    /// (a close above would emit their first piece), in order.
    older: Vec<u32>,
    /// Spans with no piece emitted yet, opened at the text's current
    /// length `fresh_len` (a close above emits nothing of them), in order.
    fresh: Vec<u32>,
    fresh_len: usize,
}

impl Spans {
    fn sync(&mut self, len: usize) {
        if len != self.fresh_len {
            for k in std::mem::take(&mut self.fresh) {
                if self.list[k as usize]
                    .as_ref()
                    .is_some_and(|span| span.item == NO)
                {
                    self.older.push(k);
                }
            }
            self.fresh_len = len;
        }
    }

    fn open(&mut self, key: u32, kind: usize, len: usize) {
        self.sync(len);
        let k = pos32(self.list.len());
        self.list.push(Some(OpenSpan {
            key,
            start: pos32(len),
            item: NO,
        }));
        self.by_kind[kind].push(k);
        self.fresh.push(k);
    }

    fn emit(span: &mut OpenSpan, out: &mut Vec<Item>, len: usize, frame: u32) {
        span.item = pos32(out.len());
        out.push(Item {
            key: span.key,
            start: span.start,
            end: pos32(len),
            frame,
        });
    }

    /// Closes the last open span of `kind`; whether there was one.
    fn close(&mut self, kind: usize, out: &mut Vec<Item>, len: usize, frame: u32) -> bool {
        let Some(&k) = self.by_kind[kind].last() else {
            return false;
        };
        self.sync(len);
        // Those above it that emit their first piece now, topmost first.
        while let Some(&above) = self.older.last() {
            if above <= k {
                break;
            }
            self.older.pop();
            if let Some(span) = self.list[above as usize].as_mut() {
                if span.item == NO {
                    Self::emit(span, out, len, frame);
                }
            }
        }
        if self.older.last() == Some(&k) {
            self.older.pop();
        }
        self.by_kind[kind].pop();
        if let Some(span) = self.list[k as usize].take() {
            Self::finish(span, out, len, frame);
        }
        true
    }

    /// A span's close: its annotation ends here, or is emitted now when
    /// this is its first piece (none when it is empty).
    fn finish(mut span: OpenSpan, out: &mut Vec<Item>, len: usize, frame: u32) {
        match opt(span.item) {
            Some(item) => out[item].end = pos32(len),
            None if len > span.start as usize => Self::emit(&mut span, out, len, frame),
            None => {}
        }
    }

    /// Closes every span still open, topmost first.
    fn close_all(&mut self, out: &mut Vec<Item>, len: usize, frame: u32) {
        self.sync(len);
        for slot in self.list.iter_mut().rev() {
            if let Some(span) = slot.take() {
                Self::finish(span, out, len, frame);
            }
        }
    }
}

/// What to do with a link label's text once it is parsed: an image's alt
/// text is appended as it is, a link's gets a `Link` annotation over it.
struct LabelUse {
    /// Where the parent resumes.
    end: usize,
    /// The link's URL; `None` for an image.
    url: Option<String>,
}

/// One text being parsed: the whole input, or a link label inside it
/// (positions are the input's; the frame ends at `to`).
struct InlineFrame {
    id: u32,
    to: usize,
    i: usize,
    spans: Spans,
    then: Option<LabelUse>,
    /// The text's length when the frame began.
    text_start: usize,
}

struct InlineParse<'a> {
    raw: &'a [u16],
    scan: Scan<'a>,
    text: Vec<u16>,
    keys: Keys,
    items: Vec<Item>,
    /// Each frame's parent (the whole input, frame 0, is its own).
    frame_parent: Vec<u32>,
}

/// Inline markdown into text and annotations (`parseInlineFormatting`).
///
/// The JavaScript parses a link label by calling itself; here a label is a
/// frame on an explicit stack, so nesting depth costs heap, not stack.
fn parse_inline(raw: &[u16]) -> Inline {
    // Text with nothing the scan acts on is its own text.
    if !raw.iter().any(|&c| b"\\`*_~<![".contains(&at(&[c], 0))) {
        return Inline {
            text: raw.to_vec(),
            annotations: Vec::new(),
        };
    }
    let mut p = InlineParse {
        raw,
        scan: Scan::new(raw),
        text: Vec::new(),
        keys: Keys::new(),
        items: Vec::new(),
        frame_parent: vec![0],
    };
    let mut frames = vec![InlineFrame {
        id: 0,
        to: raw.len(),
        i: 0,
        spans: Spans::default(),
        then: None,
        text_start: 0,
    }];
    while let Some(top) = frames.last_mut() {
        if let Some(((a, b), then)) = p.until_label(top) {
            let id = pos32(p.frame_parent.len());
            p.frame_parent.push(top.id);
            frames.push(InlineFrame {
                id,
                to: b,
                i: a,
                spans: Spans::default(),
                then: Some(then),
                text_start: p.text.len(),
            });
            continue;
        }
        let Some(mut done) = frames.pop() else { break };
        done.spans.close_all(&mut p.items, p.text.len(), done.id);
        let (Some(parent), Some(then)) = (frames.last_mut(), done.then) else {
            break;
        };
        if let Some(url) = then.url {
            if p.text.len() > done.text_start {
                let key = p.keys.id("Link", Some(url), None);
                p.items.push(Item {
                    key,
                    start: pos32(done.text_start),
                    end: pos32(p.text.len()),
                    frame: parent.id,
                });
            }
        }
        parent.i = then.end;
    }
    let annotations = p.merged();
    Inline {
        text: p.text,
        annotations,
    }
}

impl InlineParse<'_> {
    fn toggle(&mut self, f: &mut InlineFrame, key: u32, kind: usize) {
        let len = self.text.len();
        if !f.spans.close(kind, &mut self.items, len, f.id) {
            f.spans.open(key, kind, len);
        }
    }

    /// Runs `parseInlineFormatting`'s loop over the frame from `f.i` until
    /// its end (`None`) or a link or image whose label must be parsed
    /// first: then the label's range and what to do with it.
    fn until_label(&mut self, f: &mut InlineFrame) -> Option<((usize, usize), LabelUse)> {
        let whole = self.raw;
        let raw = &whole[..f.to];
        let n = raw.len();
        while f.i < n {
            let i = f.i;
            let ch = at(raw, i);
            if ch == b'\\' && i + 1 < n {
                self.text.push(raw[i + 1]);
                f.i += 2;
                continue;
            }
            if ch == b'`' {
                let run = run_len(raw, i, b'`');
                if let Some(closer) = self.scan.backtick_run(run, i + run, n) {
                    let mut inner = &raw[i + run..closer];
                    if inner.len() >= 2
                        && at(inner, 0) == b' '
                        && at(inner, inner.len() - 1) == b' '
                        && !trim(inner).is_empty()
                    {
                        inner = &inner[1..inner.len() - 1];
                    }
                    let inner = replace_br(inner);
                    let start = self.text.len();
                    self.text.extend_from_slice(&inner);
                    if !inner.is_empty() {
                        self.items.push(Item {
                            key: CODE,
                            start: pos32(start),
                            end: pos32(self.text.len()),
                            frame: f.id,
                        });
                    }
                    f.i = closer + run;
                    continue;
                }
                self.text.extend_from_slice(&raw[i..i + run]);
                f.i += run;
                continue;
            }
            if ch == b'*' || ch == b'_' {
                let mut run = run_len(raw, i, ch);
                f.i += run;
                let star = usize::from(ch == b'_') * 2;
                while run > 0 {
                    if run >= 2 {
                        self.toggle(f, BOLD, star);
                        run -= 2;
                    } else {
                        self.toggle(f, ITALIC, star + 1);
                        run -= 1;
                    }
                }
                continue;
            }
            if ch == b'~' && at(raw, i + 1) == b'~' {
                self.toggle(f, STRIKE, 4);
                f.i += 2;
                continue;
            }
            if ch == b'<' && self.inline_tag(raw, f) {
                continue;
            }
            if ch == b'!' && at(raw, i + 1) == b'[' {
                if let Some(link) = self.scan.read_link(i + 1, n) {
                    return Some((
                        link.label,
                        LabelUse {
                            end: link.end,
                            url: None,
                        },
                    ));
                }
            }
            if ch == b'[' {
                if let Some(link) = self.scan.read_link(i, n) {
                    return Some((
                        link.label,
                        LabelUse {
                            end: link.end,
                            url: Some(string(&raw[link.url.0..link.url.1])),
                        },
                    ));
                }
            }
            self.text.push(raw[i]);
            f.i += 1;
        }
        None
    }

    /// What starts with `<` at `f.i` (`raw` ends with the frame): a line
    /// break, `<u>`/`<mark>` and their closers, a styled `<span>` or its
    /// closer, or an autolink. Whether it was one (and `f.i` moved past
    /// it).
    fn inline_tag(&mut self, raw: &[u16], f: &mut InlineFrame) -> bool {
        let i = f.i;
        let len = self.text.len();
        if let Some(n) = match_br(raw, i) {
            self.text.push(u16::from(b'\n'));
            f.i += n;
            return true;
        }
        let closing = at(raw, i + 1) == b'/';
        let name_at = i + 1 + usize::from(closing);
        let tag = if starts_with_at(raw, name_at, "u>") {
            Some((UNDERLINE, 5, 2))
        } else if starts_with_at(raw, name_at, "mark>") {
            Some((RANGE, 6, 5))
        } else {
            None
        };
        if let Some((key, kind, n)) = tag {
            if closing {
                f.spans.close(kind, &mut self.items, len, f.id);
            } else {
                f.spans.open(key, kind, len);
            }
            f.i = name_at + n;
            return true;
        }
        if let Some((kind, (v0, v1), n)) = match_span(raw, i, &mut self.scan) {
            let mut attributes = Map::new();
            attributes.insert(
                "value".into(),
                Value::String(decode_html_attr(&raw[v0..v1])),
            );
            let key = self.keys.id(kind, None, Some(attributes));
            f.spans.open(key, STYLED, len);
            f.i += n;
            return true;
        }
        if starts_with_at(raw, i, "</span>") {
            f.spans.close(STYLED, &mut self.items, len, f.id);
            f.i += 7;
            return true;
        }
        if let Some(end) = self.scan.greater(i + 1, raw.len()) {
            let inner = &raw[i + 1..end];
            if is_autolink(inner) {
                let link = string(inner);
                let kind = if starts_with(inner, "hm://") {
                    self.text.push(0xfffc);
                    "Embed"
                } else {
                    self.text.extend_from_slice(inner);
                    "Link"
                };
                let key = self.keys.id(kind, Some(link), None);
                self.items.push(Item {
                    key,
                    start: pos32(len),
                    end: pos32(self.text.len()),
                    frame: f.id,
                });
                f.i = end + 1;
                return true;
            }
        }
        false
    }

    /// The annotations as the JavaScript returns them: each key's ranges
    /// merged where they touch or overlap (`mergeAdjacentAnnotations`),
    /// ordered by start, then end (longest first), then type, then as the
    /// nested merges leave them ([`Ties`]).
    fn merged(&self) -> Vec<Ann> {
        let mut by_key: Vec<Vec<u32>> = vec![Vec::new(); self.keys.protos.len()];
        for (t, item) in self.items.iter().enumerate() {
            if item.end > item.start {
                by_key[item.key as usize].push(pos32(t));
            }
        }
        let mut out: Vec<(u32, u32, u32)> = Vec::new();
        for (key, times) in by_key.iter().enumerate() {
            let mut ranges: Vec<(u32, u32)> = times
                .iter()
                .map(|&t| {
                    let item = &self.items[t as usize];
                    (item.start, item.end)
                })
                .collect();
            ranges.sort_unstable();
            let mut merged: Vec<(u32, u32)> = Vec::new();
            for (s, e) in ranges {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            out.extend(merged.into_iter().map(|(s, e)| (pos32(key), s, e)));
        }
        let protos = &self.keys.protos;
        let mut ties = Ties::new(&self.items, &by_key, &self.frame_parent);
        out.sort_by(|a, b| {
            a.1.cmp(&b.1)
                .then(b.2.cmp(&a.2))
                .then_with(|| locale_compare(protos[a.0 as usize].0, protos[b.0 as usize].0))
                .then_with(|| ties.order(a.0, b.0))
        });
        out.into_iter()
            .map(|(key, start, end)| {
                let (kind, link, attributes) = &protos[key as usize];
                Ann {
                    kind,
                    start: start as usize,
                    end: end as usize,
                    link: link.clone(),
                    attributes: attributes.clone(),
                }
            })
            .collect()
    }
}

/// The frames of one text as a tree, for lowest common ancestors.
struct FrameTree {
    depth: Vec<u32>,
    /// `up[j][f]`: the ancestor of `f` 2^j levels up (the root its own).
    up: Vec<Vec<u32>>,
}

impl FrameTree {
    fn new(parent: &[u32]) -> FrameTree {
        let mut depth = vec![0u32; parent.len()];
        for f in 1..parent.len() {
            depth[f] = depth[parent[f] as usize] + 1;
        }
        let mut up = vec![parent.to_vec()];
        while 1usize << up.len() < parent.len() {
            let last = &up[up.len() - 1];
            let next = last.iter().map(|&a| last[a as usize]).collect();
            up.push(next);
        }
        FrameTree { depth, up }
    }

    fn lca(&self, mut a: u32, mut b: u32) -> u32 {
        if self.depth[a as usize] < self.depth[b as usize] {
            std::mem::swap(&mut a, &mut b);
        }
        let diff = self.depth[a as usize] - self.depth[b as usize];
        for (j, level) in self.up.iter().enumerate() {
            if diff >> j & 1 == 1 {
                a = level[a as usize];
            }
        }
        if a == b {
            return a;
        }
        for level in self.up.iter().rev() {
            if level[a as usize] != level[b as usize] {
                a = level[a as usize];
                b = level[b as usize];
            }
        }
        self.up[0][a as usize]
    }
}

/// The order `mergeAdjacentAnnotations`' stable sort leaves two
/// annotations of one type on one range in: their keys' order of first
/// appearance in the list the outermost call merges.
///
/// That list holds the frame's own annotations in the order pushed, and
/// each label's merged annotations, sorted, where the label ended. Keys
/// first met in different entries keep the entries' order, which is the
/// order of their first annotations as pushed anywhere. Keys first met in
/// one label come in that label's sorted order: by their first range in
/// it (start, then end, longest first), then by their order of first
/// appearance there, and so on down. So two keys compare by their first
/// ranges within each frame on the way down to the frame where their first
/// annotations part, then by which was pushed first. The annotations of a
/// key within a frame are a prefix of its annotations in push order (the
/// frame runs in one stretch and holds the first), so its first range per
/// depth on that path is a short step function.
struct Ties<'a> {
    items: &'a [Item],
    by_key: &'a [Vec<u32>],
    tree: Option<FrameTree>,
    /// Per key: (from depth, first range's start and end), depth ascending.
    steps: std::collections::HashMap<u32, Vec<(u32, u32, u32)>>,
    memo: std::collections::HashMap<(u32, u32), std::cmp::Ordering>,
}

impl<'a> Ties<'a> {
    fn new(items: &'a [Item], by_key: &'a [Vec<u32>], frame_parent: &[u32]) -> Ties<'a> {
        Ties {
            items,
            by_key,
            tree: (frame_parent.len() > 1).then(|| FrameTree::new(frame_parent)),
            steps: std::collections::HashMap::new(),
            memo: std::collections::HashMap::new(),
        }
    }

    fn order(&mut self, a: u32, b: u32) -> std::cmp::Ordering {
        let first = |k: u32| self.by_key[k as usize].first().copied().unwrap_or(NO);
        let (ja, jb) = (first(a), first(b));
        if a == b || self.tree.is_none() {
            return ja.cmp(&jb);
        }
        if let Some(&o) = self.memo.get(&(a, b)) {
            return o;
        }
        let (o, walked) = self.compare(a, b).unwrap_or((ja.cmp(&jb), 0));
        // Worth keeping when it walked far (a pair can tie on many ranges).
        if walked > 8 {
            self.memo.insert((a, b), o);
            self.memo.insert((b, a), o.reverse());
        }
        o
    }

    /// The order, and how many steps it took to find.
    fn compare(&mut self, a: u32, b: u32) -> Option<(std::cmp::Ordering, usize)> {
        let (items, by_key) = (self.items, self.by_key);
        let ja = *by_key[a as usize].first()?;
        let jb = *by_key[b as usize].first()?;
        let parted = {
            let tree = self.tree.as_ref()?;
            let lca = tree.lca(items[ja as usize].frame, items[jb as usize].frame);
            tree.depth[lca as usize]
        };
        if parted > 0 {
            self.fill_steps(a);
            self.fill_steps(b);
            let (sa, sb) = (self.steps.get(&a)?, self.steps.get(&b)?);
            let (mut ia, mut ib) = (0, 0);
            loop {
                let (va, vb) = (sa.get(ia)?, sb.get(ib)?);
                let o = va.1.cmp(&vb.1).then(vb.2.cmp(&va.2));
                if o.is_ne() {
                    return Some((o, ia + ib));
                }
                let (na, nb) = (sa.get(ia + 1).map(|s| s.0), sb.get(ib + 1).map(|s| s.0));
                let Some(next) = na.into_iter().chain(nb).min() else {
                    break;
                };
                if next > parted {
                    break;
                }
                ia += usize::from(na == Some(next));
                ib += usize::from(nb == Some(next));
            }
            return Some((ja.cmp(&jb), ia + ib));
        }
        Some((ja.cmp(&jb), 0))
    }

    /// The first range of key `k` in each frame on the path to the frame of
    /// its first annotation, as steps by depth.
    fn fill_steps(&mut self, k: u32) {
        if self.steps.contains_key(&k) {
            return;
        }
        let (items, by_key) = (self.items, self.by_key);
        let (Some(tree), Some(times)) = (self.tree.as_ref(), by_key.get(k as usize)) else {
            return;
        };
        let Some(&j0) = times.first() else { return };
        let home = items[j0 as usize].frame;
        // Annotation `i` is in the frames of the path down to depth `d[i]`.
        let d: Vec<u32> = times
            .iter()
            .map(|&t| tree.depth[tree.lca(items[t as usize].frame, home) as usize])
            .collect();
        let mut union: std::collections::BTreeMap<u32, u32> = std::collections::BTreeMap::new();
        let mut firsts = Vec::with_capacity(times.len());
        for &t in times {
            let item = &items[t as usize];
            insert_range(&mut union, item.start, item.end);
            firsts.push(union.first_key_value().map_or((0, 0), |(&s, &e)| (s, e)));
        }
        let mut steps: Vec<(u32, u32, u32)> = Vec::new();
        for i in (0..times.len()).rev() {
            let from = d.get(i + 1).copied().unwrap_or(0) + 1;
            if from > d[i] {
                continue;
            }
            let (s, e) = firsts[i];
            if steps.last().map(|x| (x.1, x.2)) != Some((s, e)) {
                steps.push((from, s, e));
            }
        }
        self.steps.insert(k, steps);
    }
}

/// Adds `[s, e]` to disjoint ranges that merge where they touch.
fn insert_range(union: &mut std::collections::BTreeMap<u32, u32>, s: u32, e: u32) {
    let (mut s, mut e) = (s, e);
    if let Some((&ps, &pe)) = union.range(..=s).next_back() {
        if pe >= s {
            s = ps;
            e = e.max(pe);
            union.remove(&ps);
        }
    }
    while let Some((&qs, &qe)) = union.range(s..=e).next() {
        e = e.max(qe);
        union.remove(&qs);
    }
    union.insert(s, e);
}

/// `localeCompare` for the annotation type names (ASCII words): letters
/// first by their lower case, then lower case before upper.
fn locale_compare(a: &str, b: &str) -> std::cmp::Ordering {
    a.to_ascii_lowercase()
        .cmp(&b.to_ascii_lowercase())
        .then_with(|| b.cmp(a))
}

// ─── Block comments ─────────────────────────────────────────────────────────

/// A `<!-- id:… type:… attrs:{…} -->` comment.
#[derive(Clone, Debug)]
struct Comment {
    id: String,
    kind: Option<String>,
    attrs: Option<Map<String, Value>>,
}

struct CommentCaps {
    id: (usize, usize),
    kind: Option<(usize, usize)>,
    attrs: Option<(usize, usize)>,
}

/// How `s` ends, when it ends as every comment regex that runs to the end
/// needs it: `-->` then white space. Answers `\s*-->\s*$` from any
/// position at once (a scan per position made a line of many comment
/// openers quadratic).
struct ArrowEnd {
    /// Where the final `-->` starts.
    arrow: usize,
    /// The last non-space before it.
    before: Option<usize>,
    /// The last line terminator at or before `before`.
    terminator: Option<usize>,
}

impl ArrowEnd {
    fn of(s: &[u16]) -> Option<ArrowEnd> {
        let end = s.iter().rposition(|&c| !is_space(c))? + 1;
        if end < 3 || !starts_with_at(s, end - 3, "-->") {
            return None;
        }
        let arrow = end - 3;
        let before = s[..arrow].iter().rposition(|&c| !is_space(c));
        let terminator = before.and_then(|b| s[..=b].iter().rposition(|&c| is_line_terminator(c)));
        Some(ArrowEnd {
            arrow,
            before,
            terminator,
        })
    }

    /// `\s*-->\s*$` from `q`: only white space between `q` and the final
    /// arrow (no other `-->` has only white space after it).
    fn from(&self, q: usize) -> bool {
        q <= self.arrow && self.before.is_none_or(|b| q > b)
    }
}

/// After the id (and type): `(?:\s+attrs:(\{.*\}))?\s*-->\s*$` from `q`,
/// with the attrs group when it takes part.
fn attrs_then_end(s: &[u16], q: usize, end: &ArrowEnd) -> Option<Option<(usize, usize)>> {
    let w = skip_spaces(s, q);
    if w > q && starts_with_at(s, w, "attrs:{") {
        let brace = w + 6;
        // `.*` takes the last `}` that has `\s*-->\s*$` after it and no
        // line terminator before it: that `}` can only be the last
        // non-space before the arrow.
        if let Some(k) = end.before {
            if k > brace && at(s, k) == b'}' && end.terminator.is_none_or(|t| t <= brace) {
                return Some(Some((brace, k + 1)));
            }
        }
    }
    end.from(q).then_some(None)
}

/// COMMENT_BODY followed by `\s*$`, starting exactly at `p`, explored in the
/// order a backtracking regex explores it.
fn comment_body_to_end(s: &[u16], p: usize, end: &ArrowEnd) -> Option<CommentCaps> {
    if !starts_with_at(s, p, "<!--") {
        return None;
    }
    let q = skip_spaces(s, p + 4);
    if !starts_with_at(s, q, "id:") {
        return None;
    }
    let id0 = q + 3;
    let id_max = id_run_end(s, id0);
    for id_end in (id0 + 1..=id_max).rev() {
        let w = skip_spaces(s, id_end);
        if w > id_end && starts_with_at(s, w, "type:") {
            let t0 = w + 5;
            let t_max = id_run_end(s, t0);
            for t_end in (t0 + 1..=t_max).rev() {
                if let Some(attrs) = attrs_then_end(s, t_end, end) {
                    return Some(CommentCaps {
                        id: (id0, id_end),
                        kind: Some((t0, t_end)),
                        attrs,
                    });
                }
            }
        }
        if let Some(attrs) = attrs_then_end(s, id_end, end) {
            return Some(CommentCaps {
                id: (id0, id_end),
                kind: None,
                attrs,
            });
        }
    }
    None
}

/// TRAILING_COMMENT_RE: ` ?<!--…-->\s*$` anywhere; the match's index.
fn match_trailing_comment(s: &[u16]) -> Option<(usize, CommentCaps)> {
    let end = ArrowEnd::of(s)?;
    for p in 0..s.len() {
        if at(s, p) == b' ' {
            if let Some(c) = comment_body_to_end(s, p + 1, &end) {
                return Some((p, c));
            }
        } else if at(s, p) == b'<' {
            if let Some(c) = comment_body_to_end(s, p, &end) {
                return Some((p, c));
            }
        }
    }
    None
}

/// STANDALONE_COMMENT_RE: the whole line is the comment.
fn match_standalone_comment(s: &[u16]) -> Option<CommentCaps> {
    let end = ArrowEnd::of(s)?;
    comment_body_to_end(s, skip_spaces(s, 0), &end)
}

/// END_RE: `^\s*<!--\s*end:(id)\s*-->\s*$`.
fn match_end_comment(s: &[u16]) -> Option<String> {
    let end = ArrowEnd::of(s)?;
    let p = skip_spaces(s, 0);
    if !starts_with_at(s, p, "<!--") {
        return None;
    }
    let q = skip_spaces(s, p + 4);
    if !starts_with_at(s, q, "end:") {
        return None;
    }
    let id0 = q + 4;
    let id_max = id_run_end(s, id0);
    (id0 + 1..=id_max)
        .rev()
        .find(|&e| end.from(e))
        .map(|e| string(&s[id0..e]))
}

/// JSON.parse of a comment's `attrs`, kept when it is an object; numbers
/// as JavaScript would hold them.
fn parse_attrs(s: &[u16]) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(&string(s)) {
        Ok(Value::Object(map)) => Some(js_numbers_map(map)),
        _ => None,
    }
}

fn comment_from(s: &[u16], caps: &CommentCaps) -> Comment {
    Comment {
        id: string(&s[caps.id.0..caps.id.1]),
        kind: caps.kind.map(|(a, b)| string(&s[a..b])),
        attrs: caps.attrs.and_then(|(a, b)| parse_attrs(&s[a..b])),
    }
}

/// The text before a trailing block comment, and the comment.
fn strip_block_comment(s: &[u16]) -> (&[u16], Option<Comment>) {
    match match_trailing_comment(s) {
        Some((idx, caps)) => (&s[..idx], Some(comment_from(s, &caps))),
        None => (s, None),
    }
}

/// CELL_ID_RE `<!--\s*id:(id)\s*-->` anywhere: the match range and the id.
fn match_cell_id(s: &[u16]) -> Option<((usize, usize), String)> {
    for p in 0..s.len() {
        if !starts_with_at(s, p, "<!--") {
            continue;
        }
        let q = skip_spaces(s, p + 4);
        if !starts_with_at(s, q, "id:") {
            continue;
        }
        let id0 = q + 3;
        let id_max = id_run_end(s, id0);
        for id_end in (id0 + 1..=id_max).rev() {
            let r = skip_spaces(s, id_end);
            if starts_with_at(s, r, "-->") {
                return Some(((p, r + 3), string(&s[id0..id_end])));
            }
        }
    }
    None
}

/// A column comment in a header cell: where it is, the column id and the
/// range of its attrs.
struct ColMatch {
    range: (usize, usize),
    id: String,
    attrs: Option<(usize, usize)>,
}

/// COL_ID_RE `<!--\s*col:(id)(?:\s+attrs:(\{.*?\}))?\s*-->` anywhere.
fn match_col_id(s: &[u16]) -> Option<ColMatch> {
    // For each position, the first `}` at or after it with `\s*-->` next,
    // and the first line terminator: found once, when an attrs group is
    // first tried (a scan per comment made a cell of many quadratic).
    let mut closers: Option<(Vec<u32>, Vec<u32>)> = None;
    for p in 0..s.len() {
        if !starts_with_at(s, p, "<!--") {
            continue;
        }
        let q = skip_spaces(s, p + 4);
        if !starts_with_at(s, q, "col:") {
            continue;
        }
        let id0 = q + 4;
        let id_max = id_run_end(s, id0);
        for id_end in (id0 + 1..=id_max).rev() {
            let id = || string(&s[id0..id_end]);
            let w = skip_spaces(s, id_end);
            if w > id_end && starts_with_at(s, w, "attrs:{") {
                let brace = w + 6;
                let (close, terminator) = closers.get_or_insert_with(|| col_attrs_closers(s));
                if let Some(k) =
                    opt(close[brace + 1]).filter(|&k| k < terminator[brace + 1] as usize)
                {
                    let r = skip_spaces(s, k + 1);
                    return Some(ColMatch {
                        range: (p, r + 3),
                        id: id(),
                        attrs: Some((brace, k + 1)),
                    });
                }
            }
            let r = skip_spaces(s, id_end);
            if starts_with_at(s, r, "-->") {
                return Some(ColMatch {
                    range: (p, r + 3),
                    id: id(),
                    attrs: None,
                });
            }
        }
    }
    None
}

/// For each position of `s` (and its end): the first `}` at or after it
/// followed by `\s*-->` (`NO`: none), and the first line terminator at or
/// after it (`s.len()`: none).
fn col_attrs_closers(s: &[u16]) -> (Vec<u32>, Vec<u32>) {
    let n = s.len();
    let mut close = vec![NO; n + 1];
    let mut terminator = vec![pos32(n); n + 1];
    // The first non-space after the position being looked at.
    let mut non_space = n;
    for k in (0..n).rev() {
        close[k] = if at(s, k) == b'}' && starts_with_at(s, non_space, "-->") {
            pos32(k)
        } else {
            close[k + 1]
        };
        terminator[k] = if is_line_terminator(s[k]) {
            pos32(k)
        } else {
            terminator[k + 1]
        };
        if !is_space(s[k]) {
            non_space = k;
        }
    }
    (close, terminator)
}

// ─── Lines ──────────────────────────────────────────────────────────────────

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListKind {
    Unordered,
    Ordered,
    Blockquote,
}

impl ListKind {
    fn as_str(self) -> &'static str {
        match self {
            ListKind::Unordered => "Unordered",
            ListKind::Ordered => "Ordered",
            ListKind::Blockquote => "Blockquote",
        }
    }
}

fn is_list_type(t: Option<&str>) -> bool {
    matches!(t, Some("Unordered" | "Ordered" | "Blockquote"))
}

#[derive(Clone, Copy, Debug)]
struct LineInfo {
    start: usize,
    end: usize,
    indent: usize,
    marker_len: usize,
    kind: Option<ListKind>,
    content_col: usize,
    rest: usize,
    blank: bool,
}

/// MARKER_RE `^([-*+] |\d+[.)] |> )`: the marker's length and kind.
fn match_marker(s: &[u16]) -> Option<(usize, ListKind)> {
    let c = at(s, 0);
    if matches!(c, b'-' | b'*' | b'+') && at(s, 1) == b' ' {
        return Some((2, ListKind::Unordered));
    }
    if c.is_ascii_digit() {
        let mut i = 1;
        while at(s, i).is_ascii_digit() {
            i += 1;
        }
        if matches!(at(s, i), b'.' | b')') && at(s, i + 1) == b' ' {
            return Some((i + 2, ListKind::Ordered));
        }
        return None;
    }
    if c == b'>' && at(s, 1) == b' ' {
        return Some((2, ListKind::Blockquote));
    }
    None
}

fn analyze_line(content: &[u16], start: usize, end: usize) -> LineInfo {
    let raw = &content[start..end];
    let lead = raw
        .iter()
        .take_while(|&&c| c == u16::from(b' ') || c == u16::from(b'\t'))
        .count();
    let indent = raw[..lead]
        .iter()
        .map(|&c| if c == u16::from(b'\t') { 2 } else { 1 })
        .sum::<usize>();
    let rest = &raw[lead..];
    let blank = trim(rest).is_empty();
    let (marker_len, kind) = match match_marker(rest) {
        Some((len, kind)) if !blank => (len, Some(kind)),
        _ => (0, None),
    };
    LineInfo {
        start,
        end,
        indent,
        marker_len,
        kind,
        content_col: indent + marker_len,
        rest: start + lead + marker_len,
        blank,
    }
}

/// HEADING_RE `^(#{1,6})\s+(.*)$`: the level and the text's range in `s`.
fn match_heading(s: &[u16]) -> Option<(usize, usize)> {
    let hashes = run_len(s, 0, b'#');
    if hashes == 0 || hashes > 6 {
        return None;
    }
    let w = skip_spaces(s, hashes);
    if w == hashes || s[w..].iter().any(|&c| is_line_terminator(c)) {
        return None;
    }
    Some((hashes, w))
}

/// FENCE_RE ``^(`{3,})(.*)$``: the fence's length.
fn match_fence(s: &[u16]) -> Option<usize> {
    let n = run_len(s, 0, b'`');
    (n >= 3 && !s[n..].iter().any(|&c| is_line_terminator(c))).then_some(n)
}

fn starts_special_block(rest: &[u16]) -> bool {
    match_heading(rest).is_some()
        || match_fence(rest).is_some()
        || starts_with(rest, "$$")
        || starts_with(rest, "![")
        || starts_with(rest, "|")
        || match_standalone_comment(rest).is_some()
        || match_end_comment(rest).is_some()
}

fn strip_indent(line: &[u16], n: usize) -> &[u16] {
    let k = line
        .iter()
        .take(n)
        .take_while(|&&c| c == u16::from(b' '))
        .count();
    &line[k..]
}

// ─── Tables ─────────────────────────────────────────────────────────────────

struct Cell {
    text: Vec<u16>,
    col_id: Option<String>,
    col_attrs: Option<Map<String, Value>>,
}

struct Row {
    cells: Vec<Cell>,
    id: Option<String>,
}

fn split_table_row(line: &[u16]) -> Row {
    let (text, comment) = strip_block_comment(trim(line));
    let mut row_id = comment.map(|c| c.id);
    let mut s = trim(text);
    if at(s, 0) == b'|' {
        s = &s[1..];
    }
    let mut raw_cells: Vec<Vec<u16>> = Vec::new();
    let mut cur: Vec<u16> = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if at(s, i) == b'\\' && at(s, i + 1) == b'|' {
            cur.push(u16::from(b'|'));
            i += 1;
        } else if at(s, i) == b'|' {
            raw_cells.push(trim(&cur).to_vec());
            cur.clear();
        } else {
            cur.push(s[i]);
        }
        i += 1;
    }
    let last = trim(&cur);
    if !last.is_empty() || raw_cells.is_empty() {
        raw_cells.push(last.to_vec());
    }
    let cells = raw_cells
        .into_iter()
        .map(|mut cell| {
            if let Some(((a, b), id)) = match_cell_id(&cell) {
                row_id = Some(id);
                cell.drain(a..b);
            }
            let mut col_id = None;
            let mut col_attrs = None;
            if let Some(m) = match_col_id(&cell) {
                col_id = Some(m.id);
                col_attrs = m.attrs.and_then(|(x, y)| parse_attrs(&cell[x..y]));
                cell.drain(m.range.0..m.range.1);
            }
            Cell {
                text: trim(&cell).to_vec(),
                col_id,
                col_attrs,
            }
        })
        .collect();
    Row { cells, id: row_id }
}

fn is_separator_row(cells: &[Cell]) -> bool {
    !cells.is_empty()
        && cells.iter().all(|c| {
            let t = &c.text[..];
            let t = if at(t, 0) == b':' { &t[1..] } else { t };
            let t = if at(t, t.len().wrapping_sub(1)) == b':' {
                &t[..t.len() - 1]
            } else {
                t
            };
            !t.is_empty() && t.iter().all(|&c| c == u16::from(b'-'))
        })
}

// ─── The block parser ───────────────────────────────────────────────────────

struct ArenaNode {
    block: Block,
    /// Children the block came with (a table's columns and rows), before
    /// those added since; they change no more, so they stay as they are.
    done: Vec<BlockNode>,
    children: Vec<usize>,
}

struct Frame {
    node: Option<usize>,
    child_indent: usize,
    shorthand: Option<ListKind>,
    heading_level: Option<usize>,
    marker_run: Option<ListKind>,
}

impl Frame {
    fn new(node: usize, child_indent: usize) -> Frame {
        Frame {
            node: Some(node),
            child_indent,
            shorthand: None,
            heading_level: None,
            marker_run: None,
        }
    }
}

struct BlockAt {
    node: BlockNode,
    next: usize,
    standalone: bool,
}

struct BlockParser<'a> {
    content: &'a [u16],
    lines: Vec<LineInfo>,
    ids: &'a mut dyn FnMut() -> String,
    arena: Vec<ArenaNode>,
    root: Vec<usize>,
}

fn leaf(block: Block) -> BlockNode {
    BlockNode {
        block,
        children: Vec::new(),
    }
}

impl<'a> BlockParser<'a> {
    fn new(content: &'a [u16], ids: &'a mut dyn FnMut() -> String) -> BlockParser<'a> {
        let mut lines = Vec::new();
        let mut start = 0;
        for (k, &c) in content.iter().enumerate() {
            if c == u16::from(b'\n') {
                lines.push(analyze_line(content, start, k));
                start = k + 1;
            }
        }
        lines.push(analyze_line(content, start, content.len()));
        BlockParser {
            content,
            lines,
            ids,
            arena: Vec::new(),
            root: Vec::new(),
        }
    }

    fn gen_id(&mut self) -> String {
        (self.ids)()
    }

    fn raw(&self, i: usize) -> &'a [u16] {
        let l = self.lines[i];
        &self.content[l.start..l.end]
    }

    fn rest(&self, i: usize) -> &'a [u16] {
        let l = self.lines[i];
        &self.content[l.rest..l.end]
    }

    fn next_non_blank(&self, from: usize) -> Option<usize> {
        (from..self.lines.len()).find(|&j| !self.lines[j].blank)
    }

    fn base_block(&mut self, kind: &str, comment: Option<&Comment>) -> Block {
        let id = match comment {
            Some(c) if !c.id.is_empty() => c.id.clone(),
            _ => self.gen_id(),
        };
        let mut block = Block::new(kind, id);
        if let Some(attrs) = comment.and_then(|c| c.attrs.as_ref()) {
            if !attrs.is_empty() {
                block.attributes = Some(attrs.clone());
            }
        }
        block
    }

    fn text_block(&mut self, kind: &str, raw: &[u16], comment: Option<&Comment>) -> BlockNode {
        let (text, annotations) = parse_inline(raw).into_parts();
        let mut block = self.base_block(kind, comment);
        block.text = text;
        block.annotations = annotations;
        leaf(block)
    }

    fn typed_node(&mut self, visible: &[u16], comment: &Comment) -> BlockNode {
        let kind = comment.kind.clone().unwrap_or_default();
        let mut block = self.base_block(&kind, Some(comment));
        let v = trim(visible);
        let link_only = v.len() >= 2
            && at(v, 0) == b'<'
            && at(v, v.len() - 1) == b'>'
            && is_autolink(&v[1..v.len() - 1]);
        let labeled = if at(v, 0) == b'[' {
            read_link(v, 0)
        } else {
            None
        };
        if link_only {
            block.link = Some(string(&v[1..v.len() - 1]));
        } else if let Some(link) = labeled.filter(|l| l.end == v.len()) {
            let (text, annotations) = parse_inline(&v[link.label.0..link.label.1]).into_parts();
            block.text = text;
            block.annotations = annotations;
            block.link = Some(string(&v[link.url.0..link.url.1]));
        } else if !v.is_empty() {
            let (text, annotations) = parse_inline(v).into_parts();
            block.text = text;
            block.annotations = annotations;
        }
        leaf(block)
    }

    fn table_cell(&mut self, raw: &[u16], column_id: &str) -> BlockNode {
        let (text, annotations) = parse_inline(raw).into_parts();
        let mut block = Block::new("Paragraph", self.gen_id());
        block.text = text;
        block.annotations = annotations;
        let mut attributes = Map::new();
        attributes.insert("columnId".into(), Value::String(column_id.to_owned()));
        block.attributes = Some(attributes);
        leaf(block)
    }

    fn table_node(&mut self, lines: &[&[u16]], comment: Option<&Comment>) -> BlockNode {
        let mut raw_rows: Vec<Row> = lines.iter().map(|l| split_table_row(l)).collect();
        let (header, body): (Option<Row>, Vec<Row>) =
            if raw_rows.len() >= 2 && is_separator_row(&raw_rows[1].cells) {
                let rest = raw_rows.split_off(2);
                let header = raw_rows.into_iter().next();
                (
                    header,
                    rest.into_iter()
                        .filter(|r| !is_separator_row(&r.cells))
                        .collect(),
                )
            } else {
                (
                    None,
                    raw_rows
                        .into_iter()
                        .filter(|r| !is_separator_row(&r.cells))
                        .collect(),
                )
            };
        let no_cells: Vec<Cell> = Vec::new();
        let header_cells = header.as_ref().map_or(&no_cells, |h| &h.cells);
        let col_count = body
            .iter()
            .map(|r| r.cells.len())
            .chain([header_cells.len()])
            .max()
            .unwrap_or(0);
        let mut column_ids = Vec::with_capacity(col_count);
        for idx in 0..col_count {
            let id = match header_cells.get(idx).and_then(|c| c.col_id.clone()) {
                Some(id) if !id.is_empty() => id,
                _ => self.gen_id(),
            };
            column_ids.push(id);
        }
        let mut children: Vec<BlockNode> = Vec::with_capacity(col_count + body.len() + 1);
        children.extend(column_ids.iter().enumerate().map(|(idx, id)| {
            let mut block = Block::new("TableColumn", id.clone());
            if let Some(attrs) = header_cells.get(idx).and_then(|c| c.col_attrs.as_ref()) {
                if !attrs.is_empty() {
                    block.attributes = Some(attrs.clone());
                }
            }
            leaf(block)
        }));
        let has_header_row = header_cells.iter().any(|c| !c.text.is_empty());
        // A grid Seed would pad to more cells than any sane table has is
        // given only the cells its rows write (the markdown is the same):
        // a few hundred KiB of `|` could otherwise ask for billions.
        let rows = body.len() + usize::from(has_header_row);
        let dense = col_count.saturating_mul(rows) <= MAX_DENSE_TABLE_CELLS;
        if let Some(header) = header.as_ref().filter(|_| has_header_row) {
            let cells = self.row_cells(&column_ids, &header.cells, dense);
            let id = match &header.id {
                Some(id) => id.clone(),
                None => self.gen_id(),
            };
            let mut block = Block::new("TableRow", id);
            let mut attributes = Map::new();
            attributes.insert("isHeader".into(), Value::Bool(true));
            block.attributes = Some(attributes);
            children.push(BlockNode {
                block,
                children: cells,
            });
        }
        for row in &body {
            let cells = self.row_cells(&column_ids, &row.cells, dense);
            let id = match &row.id {
                Some(id) => id.clone(),
                None => self.gen_id(),
            };
            children.push(BlockNode {
                block: Block::new("TableRow", id),
                children: cells,
            });
        }
        BlockNode {
            block: self.base_block("Table", comment),
            children,
        }
    }

    /// A row's cells: one per column when `dense`, else only those it
    /// writes.
    fn row_cells(&mut self, column_ids: &[String], cells: &[Cell], dense: bool) -> Vec<BlockNode> {
        let columns = if dense {
            column_ids
        } else {
            &column_ids[..cells.len().min(column_ids.len())]
        };
        columns
            .iter()
            .enumerate()
            .map(|(idx, column_id)| {
                let text = cells.get(idx).map_or(&[][..], |c| &c.text[..]);
                self.table_cell(text, column_id)
            })
            .collect()
    }

    fn table_lines_from(&self, mut j: usize) -> (Vec<&'a [u16]>, usize) {
        let mut out = Vec::new();
        while j < self.lines.len() && starts_with(self.rest(j), "|") && !self.lines[j].blank {
            out.push(self.rest(j));
            j += 1;
        }
        (out, j)
    }

    fn parse_block_at(&mut self, start: usize) -> BlockAt {
        let info = self.lines[start];
        let rest = self.rest(start);
        if let Some(caps) = match_standalone_comment(rest) {
            let comment = comment_from(rest, &caps);
            let following = self.next_non_blank(start + 1).map(|j| (j, self.lines[j]));
            if let Some((j, f)) = following {
                if f.indent >= info.indent && starts_with(self.rest(j), "|") && f.marker_len == 0 {
                    let (lines, next) = self.table_lines_from(start + 1);
                    let node = self.table_node(&lines, Some(&comment));
                    return BlockAt {
                        node,
                        next,
                        standalone: false,
                    };
                }
            }
            let kind = comment.kind.clone().unwrap_or_else(|| "Paragraph".into());
            let block = self.base_block(&kind, Some(&comment));
            return BlockAt {
                node: leaf(block),
                next: start + 1,
                standalone: true,
            };
        }
        if let Some(fence_len) = match_fence(rest) {
            let (language, comment) = strip_block_comment(trim(&rest[fence_len..]));
            let language = string(trim(language));
            let mut body: Vec<&[u16]> = Vec::new();
            let mut j = start + 1;
            while j < self.lines.len() {
                let l = self.lines[j];
                let closing = trim(self.raw(j));
                if closing.len() >= 3
                    && closing.iter().all(|&c| c == u16::from(b'`'))
                    && closing.len() >= fence_len
                    && l.indent <= info.content_col
                {
                    break;
                }
                body.push(strip_indent(self.raw(j), info.content_col));
                j += 1;
            }
            let mut block = self.base_block("Code", comment.as_ref());
            block.text = string(&body.join(&u16::from(b'\n')));
            if !language.is_empty() {
                block.language = Some(language);
            }
            return BlockAt {
                node: leaf(block),
                next: j + 1,
                standalone: false,
            };
        }
        if starts_with(rest, "$$") {
            let (_, comment) = strip_block_comment(trim(&rest[2..]));
            let mut body: Vec<&[u16]> = Vec::new();
            let mut j = start + 1;
            while j < self.lines.len() && trim(self.raw(j)) != units("$$").as_slice() {
                body.push(strip_indent(self.raw(j), info.content_col));
                j += 1;
            }
            let mut block = self.base_block("Math", comment.as_ref());
            block.text = string(&body.join(&u16::from(b'\n')));
            return BlockAt {
                node: leaf(block),
                next: j + 1,
                standalone: false,
            };
        }
        if let Some((_, text_at)) = match_heading(rest) {
            let (text, comment) = strip_block_comment(&rest[text_at..]);
            let node = match comment.as_ref().filter(|c| c.kind.is_some()) {
                Some(c) => self.typed_node(text, c),
                None => self.text_block("Heading", text, comment.as_ref()),
            };
            return BlockAt {
                node,
                next: start + 1,
                standalone: false,
            };
        }
        if starts_with(rest, "|") {
            let (lines, next) = self.table_lines_from(start);
            let node = self.table_node(&lines, None);
            return BlockAt {
                node,
                next,
                standalone: false,
            };
        }
        let (visible, comment) = strip_block_comment(rest);
        if let Some(c) = comment.as_ref().filter(|c| c.kind.is_some()) {
            let node = self.typed_node(visible, c);
            return BlockAt {
                node,
                next: start + 1,
                standalone: false,
            };
        }
        if starts_with(visible, "![") {
            if let Some(link) = read_link(visible, 1) {
                if trim(&visible[link.end..]).is_empty() {
                    let mut url = visible[link.url.0..link.url.1].to_vec();
                    if !url.is_empty() && scheme_colon(&url).is_none() {
                        let mut full = units("file://");
                        full.append(&mut url);
                        url = full;
                    }
                    let mut node = self.text_block(
                        "Image",
                        &visible[link.label.0..link.label.1],
                        comment.as_ref(),
                    );
                    node.block.link = Some(string(&url));
                    return BlockAt {
                        node,
                        next: start + 1,
                        standalone: false,
                    };
                }
            }
        }
        let mut text = visible.to_vec();
        let mut j = start + 1;
        if comment.is_none() {
            while j < self.lines.len() {
                let l = self.lines[j];
                let r = self.rest(j);
                if l.blank
                    || l.marker_len > 0
                    || l.indent != info.content_col
                    || starts_special_block(r)
                {
                    break;
                }
                let (more, c) = strip_block_comment(r);
                if c.is_some() {
                    break;
                }
                text.push(u16::from(b' '));
                text.extend_from_slice(more);
                j += 1;
            }
        }
        let node = self.text_block("Paragraph", &text, comment.as_ref());
        BlockAt {
            node,
            next: j,
            standalone: false,
        }
    }

    fn add(&mut self, node: BlockNode) -> usize {
        self.arena.push(ArenaNode {
            block: node.block,
            done: node.children,
            children: Vec::new(),
        });
        self.arena.len() - 1
    }

    fn list_mut(&mut self, node: Option<usize>) -> &mut Vec<usize> {
        match node {
            Some(n) => &mut self.arena[n].children,
            None => &mut self.root,
        }
    }

    fn list_len(&self, node: Option<usize>) -> usize {
        match node {
            Some(n) => self.arena[n].done.len() + self.arena[n].children.len(),
            None => self.root.len(),
        }
    }

    fn is_implicit_list_start(&self, frame: &Frame, kind: ListKind) -> bool {
        let Some(n) = frame.node else {
            return true;
        };
        if let Some(t) = self.arena[n].block.children_type.as_deref() {
            if !t.is_empty() && t != kind.as_str() {
                return true;
            }
        }
        self.list_len(frame.node) > 0 && frame.marker_run != Some(kind)
    }

    fn run(&mut self) {
        let mut stack: Vec<Frame> = vec![Frame {
            node: None,
            child_indent: 0,
            shorthand: None,
            heading_level: None,
            marker_run: None,
        }];
        let mut i = 0;
        while i < self.lines.len() {
            let info = self.lines[i];
            if info.blank {
                i += 1;
                continue;
            }
            let rest = self.rest(i);
            if let Some(end_id) = match_end_comment(rest) {
                if info.marker_len == 0 {
                    let found = stack
                        .iter()
                        .rposition(|f| f.node.is_some_and(|n| self.arena[n].block.id == end_id));
                    if let Some(idx) = found.filter(|&idx| idx > 0) {
                        stack.truncate(idx);
                    }
                    i += 1;
                    continue;
                }
            }
            let heading = match_heading(rest).map(|(level, _)| level);
            adjust_stack(&mut stack, &info, heading);

            let top = stack.len() - 1;
            if info.kind.is_none() && stack[top].shorthand.is_none() {
                if let Some(n) = stack[top].node {
                    let children_type = self.arena[n].block.children_type.clone();
                    if self.arena[n].block.kind == "Heading"
                        && !self.arena[n].children.is_empty()
                        && is_list_type(children_type.as_deref())
                    {
                        let id = self.gen_id();
                        let moved = std::mem::take(&mut self.arena[n].children);
                        let mut block = Block::new("Paragraph", id);
                        block.children_type = children_type;
                        self.arena.push(ArenaNode {
                            block,
                            done: Vec::new(),
                            children: moved,
                        });
                        let container = self.arena.len() - 1;
                        self.arena[n].children.push(container);
                        self.arena[n].block.children_type = Some("Group".into());
                        stack[top].marker_run = None;
                    }
                }
            }

            if let Some(kind) = info.kind {
                if stack[top].shorthand.is_none() && self.is_implicit_list_start(&stack[top], kind)
                {
                    let frame_node = stack[top].node;
                    let prev = self.list_mut(frame_node).last().copied();
                    let can_nest = prev.is_some_and(|p| {
                        let b = &self.arena[p].block;
                        b.kind == "Paragraph"
                            && !b.text.is_empty()
                            && self.arena[p].done.is_empty()
                            && self.arena[p].children.is_empty()
                            && b.children_type.as_deref().is_none_or(str::is_empty)
                    });
                    let target = match prev.filter(|_| can_nest) {
                        Some(p) => p,
                        None => {
                            let id = self.gen_id();
                            self.arena.push(ArenaNode {
                                block: Block::new("Paragraph", id),
                                done: Vec::new(),
                                children: Vec::new(),
                            });
                            let t = self.arena.len() - 1;
                            self.list_mut(frame_node).push(t);
                            stack[top].marker_run = None;
                            t
                        }
                    };
                    self.arena[target].block.children_type = Some(kind.as_str().into());
                    if stack.len() > 1 && stack.last().is_some_and(|f| f.node == Some(target)) {
                        stack.pop();
                    }
                    stack.push(Frame {
                        node: Some(target),
                        child_indent: info.indent,
                        shorthand: Some(kind),
                        heading_level: None,
                        marker_run: None,
                    });
                }
            }

            let parsed = self.parse_block_at(i);
            i = parsed.next;
            let node = self.add(parsed.node);
            let top = stack.len() - 1;
            let frame_node = stack[top].node;
            self.list_mut(frame_node).push(node);
            stack[top].marker_run = info.kind;
            if let (Some(kind), Some(p)) = (info.kind, frame_node) {
                let ct = &mut self.arena[p].block.children_type;
                if ct.as_deref().is_none_or(str::is_empty) {
                    *ct = Some(kind.as_str().into());
                }
            }
            if let Some(level) = heading {
                stack.push(Frame {
                    heading_level: Some(level),
                    ..Frame::new(node, info.content_col)
                });
            } else if parsed.standalone && info.marker_len == 0 {
                let following = self.next_non_blank(i).map(|j| self.lines[j]);
                match following {
                    Some(f) if f.indent == info.indent && f.kind.is_some() => {
                        stack.push(Frame {
                            shorthand: f.kind,
                            ..Frame::new(node, info.indent)
                        });
                    }
                    _ => stack.push(Frame::new(node, info.indent + 2)),
                }
            } else {
                let child_indent = if info.marker_len > 0 {
                    info.content_col
                } else {
                    info.indent + 2
                };
                stack.push(Frame::new(node, child_indent));
            }
        }
    }

    /// The finished tree, with `childrenType: Group` on every block with
    /// children and no type (tables and rows excepted). Without recursion:
    /// the tree is as deep as the markdown's nesting.
    fn into_tree(mut self) -> Vec<BlockNode> {
        // Each open node: its block, its children so far, and the arena
        // children still to take (reversed).
        type Open = (Block, Vec<BlockNode>, Vec<usize>);
        let mut root: Vec<BlockNode> = Vec::with_capacity(self.root.len());
        let mut open: Vec<Open> = Vec::new();
        let mut todo: Vec<usize> = std::mem::take(&mut self.root);
        todo.reverse();
        loop {
            let next = match open.last_mut() {
                Some((_, _, pending)) => pending.pop(),
                None => todo.pop(),
            };
            if let Some(n) = next {
                let mut pending = std::mem::take(&mut self.arena[n].children);
                let done = std::mem::take(&mut self.arena[n].done);
                let mut block =
                    std::mem::replace(&mut self.arena[n].block, Block::new("", String::new()));
                // (Blocks made with children are tables, rows and their
                // cells, which the rule leaves as they are.)
                if !(done.is_empty() && pending.is_empty())
                    && block.children_type.as_deref().is_none_or(str::is_empty)
                    && block.kind != "Table"
                    && block.kind != "TableRow"
                {
                    block.children_type = Some("Group".into());
                }
                pending.reverse();
                open.push((block, done, pending));
                continue;
            }
            let Some((block, children, _)) = open.pop() else {
                break;
            };
            let node = BlockNode { block, children };
            match open.last_mut() {
                Some((_, siblings, _)) => siblings.push(node),
                None => root.push(node),
            }
        }
        root
    }
}

fn adjust_stack(stack: &mut Vec<Frame>, info: &LineInfo, heading_level: Option<usize>) {
    while stack.len() > 1 {
        let Some(frame) = stack.last() else { break };
        if info.indent < frame.child_indent {
            stack.pop();
            continue;
        }
        if info.indent == frame.child_indent {
            if let Some(shorthand) = frame.shorthand {
                if info.kind == Some(shorthand) {
                    break;
                }
                stack.pop();
                continue;
            }
            if let (Some(fl), Some(hl)) = (frame.heading_level, heading_level) {
                if hl <= fl {
                    stack.pop();
                    continue;
                }
            }
            break;
        }
        break;
    }
}

// ─── JavaScript numbers ─────────────────────────────────────────────────────

/// `Number.prototype.toString()` (radix 10).
fn js_number_to_string(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x == 0.0 {
        return "0".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x < 0.0 {
        return format!("-{}", js_number_to_string(-x));
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = digits.len() as i64;
    let n = exp + 1;
    if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        let (a, b) = digits.split_at(n as usize);
        format!("{a}.{b}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let sign = if e >= 0 { '+' } else { '-' };
        let (first, tail) = digits.split_at(1);
        if tail.is_empty() {
            format!("{first}e{sign}{}", e.abs())
        } else {
            format!("{first}.{tail}e{sign}{}", e.abs())
        }
    }
}

/// A JavaScript number as the JSON value `JSON.stringify` would make of it,
/// read back (`null` for NaN and the infinities).
fn js_number_value(x: f64) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    serde_json::from_str(&js_number_to_string(x)).unwrap_or(Value::Null)
}

/// Numbers as JavaScript holds them after `JSON.parse` (doubles).
fn js_numbers(v: Value) -> Value {
    match v {
        Value::Number(n) => js_number_value(n.as_f64().unwrap_or(f64::NAN)),
        Value::Array(items) => Value::Array(items.into_iter().map(js_numbers).collect()),
        Value::Object(map) => Value::Object(js_numbers_map(map)),
        other => other,
    }
}

fn js_numbers_map(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter().map(|(k, v)| (k, js_numbers(v))).collect()
}

// ─── Frontmatter ────────────────────────────────────────────────────────────

/// A JavaScript value as the `yaml` package makes them.
#[derive(Clone, Debug)]
enum Js {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    /// A `Date` (an explicit `!!timestamp`), as its time value in ms.
    Date(f64),
    Arr(Vec<Js>),
    /// Own properties in insertion order (see [`js_key_order`]).
    Obj(Vec<(String, Js)>),
}

impl Js {
    /// `String(value)`.
    fn to_js_string(&self) -> String {
        match self {
            Js::Null => "null".into(),
            Js::Bool(b) => b.to_string(),
            Js::Num(x) => js_number_to_string(*x),
            Js::Str(s) => s.clone(),
            Js::Date(t) => date_to_string(*t),
            Js::Arr(items) => items
                .iter()
                .map(|v| match v {
                    Js::Null => String::new(),
                    v => v.to_js_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            Js::Obj(_) => "[object Object]".into(),
        }
    }

    /// `Boolean(value)`.
    fn truthy(&self) -> bool {
        match self {
            Js::Null => false,
            Js::Bool(b) => *b,
            Js::Num(x) => *x != 0.0 && !x.is_nan(),
            Js::Str(s) => !s.is_empty(),
            Js::Date(_) | Js::Arr(_) | Js::Obj(_) => true,
        }
    }

    /// The value after `JSON.stringify` and a read back.
    fn to_json(&self) -> Value {
        match self {
            Js::Null => Value::Null,
            Js::Bool(b) => Value::Bool(*b),
            Js::Num(x) => js_number_value(*x),
            Js::Str(s) => Value::String(s.clone()),
            Js::Date(t) => iso_string(*t).map_or(Value::Null, Value::String),
            Js::Arr(items) => Value::Array(items.iter().map(Js::to_json).collect()),
            Js::Obj(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// Whether `key` is an array index, which JavaScript objects list first.
fn array_index(key: &str) -> Option<u32> {
    if key.is_empty() || (key.len() > 1 && key.starts_with('0')) {
        return None;
    }
    if !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    key.parse::<u32>().ok().filter(|&n| n != u32::MAX)
}

/// Object keys in JavaScript's own-property order: array indices
/// ascending, then the rest in insertion order.
fn js_key_order<T>(entries: Vec<(String, T)>) -> Vec<(String, T)> {
    let (mut indices, rest): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .partition(|(k, _)| array_index(k).is_some());
    indices.sort_by_key(|(k, _)| array_index(k));
    indices.extend(rest);
    indices
}

/// The string keys `parseFrontmatter` coerces to strings.
const METADATA_STRING_KEYS: [&str; 14] = [
    "name",
    "summary",
    "displayAuthor",
    "displayPublishTime",
    "icon",
    "cover",
    "siteUrl",
    "layout",
    "seedExperimentalLogo",
    "importCategories",
    "importTags",
    "seedExperimentalHomeOrder",
    "contentWidth",
    "childrenType",
];
const METADATA_BOOLEAN_KEYS: [&str; 2] = ["showOutline", "showActivity"];

/// `parseFrontmatter` over UTF-16 units: the content after the frontmatter
/// (all of `source` when there is none or it is invalid) and the metadata.
fn parse_frontmatter_units(source: &[u16]) -> (&[u16], Vec<(String, Value)>) {
    let none = (source, Vec::new());
    let trimmed = if source.first() == Some(&0xfeff) {
        &source[1..]
    } else {
        source
    };
    if !starts_with(trimmed, "---") {
        return none;
    }
    let Some(first_line_end) = index_of(trimmed, b'\n', 0) else {
        return none;
    };
    if trim(&trimmed[..first_line_end]) != units("---").as_slice() {
        return none;
    }
    // `\n---[ \t]*(?:\n|$)` from the first line's end.
    let mut close = None;
    let mut p = first_line_end;
    while let Some(nl) = index_of(trimmed, b'\n', p) {
        if starts_with_at(trimmed, nl + 1, "---") {
            let mut q = nl + 4;
            while matches!(at(trimmed, q), b' ' | b'\t') {
                q += 1;
            }
            if q == trimmed.len() {
                close = Some((nl, q));
                break;
            }
            if at(trimmed, q) == b'\n' {
                close = Some((nl, q + 1));
                break;
            }
        }
        p = nl + 1;
    }
    let Some((close_at, rest_at)) = close else {
        return none;
    };
    let yaml = trimmed.get(first_line_end + 1..close_at).unwrap_or(&[]);
    let rest = &trimmed[rest_at..];
    if trim(yaml).is_empty() {
        return (rest, Vec::new());
    }
    let yaml = string(yaml);
    let parsed = std::panic::catch_unwind(|| yaml_to_js(&yaml)).unwrap_or(Err(()));
    let parsed = match parsed {
        Ok(v) => v,
        Err(()) => return none,
    };
    let entries: Vec<(String, Js)> = match parsed {
        Js::Obj(entries) => js_key_order(entries),
        Js::Arr(items) => items
            .into_iter()
            .enumerate()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        _ => return (rest, Vec::new()),
    };
    (rest, metadata_from(entries))
}

/// The metadata object `parseFrontmatter` builds from the YAML's entries,
/// as own properties (`None` is a property set to `undefined`).
fn metadata_from(entries: Vec<(String, Js)>) -> Vec<(String, Value)> {
    let title = entries
        .iter()
        .find(|(k, _)| k == "title")
        .map(|(_, v)| v.clone());
    let mut own = OwnProperties::default();
    // `metadata.__proto__ = object` sets the prototype: its properties are
    // then what reads of absent keys see.
    let mut proto: Vec<(String, Js)> = Vec::new();
    for (key, value) in entries {
        if key == "title" {
            continue;
        }
        if key == "__proto__" {
            match value {
                Js::Obj(e) => proto = e,
                Js::Arr(_) | Js::Null => proto = Vec::new(),
                _ => {}
            }
            continue;
        }
        own.set(key, Some(value));
    }
    let get = |own: &OwnProperties, key: &str| -> Option<Js> {
        match own.get(key) {
            Some(v) => v.clone(),
            None => proto
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone()),
        }
    };
    if get(&own, "name").is_none() {
        if let Some(title) = title.filter(|t| !matches!(t, Js::Null)) {
            own.set("name".into(), Some(coerce_string(&title)));
        }
    }
    for key in METADATA_STRING_KEYS {
        if let Some(v) = get(&own, key) {
            if !matches!(v, Js::Str(_)) {
                let coerced = match v {
                    Js::Null => None,
                    v => Some(coerce_string(&v)),
                };
                own.set(key.into(), coerced);
            }
        }
    }
    for key in METADATA_BOOLEAN_KEYS {
        if let Some(v) = get(&own, key) {
            if !matches!(v, Js::Bool(_)) {
                own.set(key.into(), Some(Js::Bool(v.truthy())));
            }
        }
    }
    js_key_order(own.entries)
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v.to_json())))
        .collect()
}

fn coerce_string(v: &Js) -> Js {
    match v {
        Js::Str(s) => Js::Str(s.clone()),
        Js::Date(t) => {
            let iso = iso_string(*t).unwrap_or_default();
            Js::Str(iso.split('T').next().unwrap_or_default().to_owned())
        }
        v => Js::Str(v.to_js_string()),
    }
}

/// An object's own properties in the order set (`None`: set to
/// `undefined`).
#[derive(Default)]
struct OwnProperties {
    entries: Vec<(String, Option<Js>)>,
    index: std::collections::HashMap<String, usize>,
}

impl OwnProperties {
    fn get(&self, key: &str) -> Option<&Option<Js>> {
        self.index.get(key).map(|&k| &self.entries[k].1)
    }

    fn set(&mut self, key: String, value: Option<Js>) {
        match self.index.get(&key) {
            Some(&k) => self.entries[k].1 = value,
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
            }
        }
    }
}

// ─── YAML, as the `yaml` package reads it ───────────────────────────────────

/// The `yaml` package's `maxAliasCount`.
const MAX_ALIAS_COUNT: u64 = 100;
/// How deep YAML collections nest before the frontmatter counts as invalid.
const MAX_YAML_DEPTH: usize = 500;
/// How many values (scalars and collections, each alias counted as the
/// values it copies) the YAML may make before the frontmatter counts as
/// invalid: the `yaml` package shares an aliased value where this port
/// copies it, and aliases of collections holding no scalar escape the
/// alias count, so a few hundred KiB could otherwise ask for billions.
const MAX_YAML_VALUES: u64 = 1_000_000;

#[derive(Clone, Debug)]
enum Scalar {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Date(f64),
}

#[derive(Debug)]
enum YNode {
    Scalar(Scalar),
    Seq(Vec<usize>),
    Map(Vec<(usize, usize)>),
    Alias(usize),
}

struct Composer {
    nodes: Vec<YNode>,
    anchored: Vec<bool>,
    /// yaml-rust2 anchor id → node.
    anchors: std::collections::HashMap<usize, usize>,
}

/// How many times a tab after a mapping's `:` is made a space and the YAML
/// read again (see [`yaml_events`]).
const MAX_TAB_RETRIES: usize = 64;

/// The YAML's events. The `yaml` package takes a tab after a mapping's `:`
/// as separation, as YAML 1.2 does, where yaml-rust2 refuses one before
/// a plain scalar; such a tab (found where the scanner stops) is read as
/// the space it stands for.
fn yaml_events(src: &str) -> Result<Vec<Event>, ()> {
    let mut error = match events_of(src)? {
        Ok(events) => return Ok(events),
        Err(e) => e,
    };
    let mut chars: Vec<char> = src.chars().collect();
    if !is_tab_error(&error) {
        return Err(());
    }
    if let Some(events) = tab_runs_patched(&chars) {
        return events;
    }
    for _ in 0..MAX_TAB_RETRIES {
        let mut j = error.marker().index().min(chars.len());
        let mut patched = false;
        while j > 0 && matches!(chars[j - 1], ' ' | '\t') {
            if chars[j - 1] == '\t' {
                chars[j - 1] = ' ';
                patched = true;
            }
            j -= 1;
        }
        if !patched || j == 0 || chars[j - 1] != ':' {
            return Err(());
        }
        let text: String = chars.iter().collect();
        error = match events_of(&text)? {
            Ok(events) => return Ok(events),
            Err(e) => e,
        };
        if !is_tab_error(&error) {
            return Err(());
        }
    }
    Err(())
}

fn is_tab_error(error: &yaml_rust2::ScanError) -> bool {
    error.info() == "':' must be followed by a valid YAML whitespace"
}

/// The tab runs yaml-rust2 stops at, all made spaces at once: those after
/// a `:` that is a mapping's value indicator, tabs only, then `-`, `_` or
/// an ASCII letter or digit. Each stop made a read of the whole YAML, up to
/// [`MAX_TAB_RETRIES`] of them; the events are the same when a read with
/// every such run made spaces finds each of their `:`s a value indicator
/// (the text before each run is then read as before, so the retries stop
/// at each run in turn). `None` when that does not hold.
fn tab_runs_patched(chars: &[char]) -> Option<Result<Vec<Event>, ()>> {
    let is_alpha = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut patched = chars.to_vec();
    let mut colons = Vec::new();
    for k in 0..chars.len() {
        if chars[k] == ':' && chars.get(k + 1) == Some(&'\t') {
            let mut e = k + 1;
            while chars.get(e) == Some(&'\t') {
                e += 1;
            }
            if chars.get(e).is_some_and(|&c| is_alpha(c)) {
                colons.push(k);
                patched[k + 1..e].fill(' ');
            }
        }
    }
    let text: String = patched.iter().collect();
    let mut scanner = yaml_rust2::scanner::Scanner::new(text.chars());
    let values: std::collections::HashSet<usize> = scanner
        .by_ref()
        .filter(|token| matches!(token.1, yaml_rust2::scanner::TokenType::Value))
        .map(|token| token.0.index())
        .collect();
    if scanner.get_error().is_some() || !colons.iter().all(|k| values.contains(k)) {
        return None;
    }
    if colons.len() > MAX_TAB_RETRIES {
        return Some(Err(()));
    }
    match events_of(&text) {
        Ok(Ok(events)) => Some(Ok(events)),
        Ok(Err(_)) => None,
        Err(()) => Some(Err(())),
    }
}

/// One read of the YAML by yaml-rust2: its events, or where it stopped;
/// `Err` when collections nest past [`MAX_YAML_DEPTH`] (the composer
/// refuses those, and yaml-rust2 slows with nesting, so reading on is
/// waste).
fn events_of(text: &str) -> Result<Result<Vec<Event>, yaml_rust2::ScanError>, ()> {
    let mut parser = Parser::new_from_str(text);
    let mut events = Vec::new();
    let mut open = 0usize;
    let mut offsets = CharOffsets::default();
    loop {
        match parser.next_token() {
            Ok((Event::StreamEnd, _)) => return Ok(Ok(events)),
            Ok((Event::Scalar(value, style, anchor, tag), mark)) => {
                let value = empty_block_scalar_at_end(text, &mut offsets, mark.index(), &style)
                    .unwrap_or(value);
                events.push(Event::Scalar(value, style, anchor, tag));
            }
            Ok((event, _)) => {
                match event {
                    Event::SequenceStart(..) | Event::MappingStart(..) => {
                        open += 1;
                        if open > MAX_YAML_DEPTH {
                            return Err(());
                        }
                    }
                    Event::SequenceEnd | Event::MappingEnd => open = open.saturating_sub(1),
                    _ => {}
                }
                events.push(event);
            }
            Err(e) => return Ok(Err(e)),
        }
    }
}

/// A block scalar with no content that runs to the end of the YAML:
/// yaml-rust2 reads it as one line break whatever its chomping, where the
/// `yaml` package reads `""`, or with `+` (keep) the line breaks after
/// the header (one at least when anything follows it). `at` is the scalar's mark (a character index), which
/// for such a scalar is its `|` or `>` indicator.
fn empty_block_scalar_at_end(
    src: &str,
    offsets: &mut CharOffsets,
    at: usize,
    style: &TScalarStyle,
) -> Option<String> {
    if !matches!(style, TScalarStyle::Literal | TScalarStyle::Folded) {
        return None;
    }
    let offset = offsets.byte_offset(src, at)?;
    let indicator = src[offset..].chars().next()?;
    if indicator != '|' && indicator != '>' {
        return None;
    }
    let after = &src[offset + 1..];
    let (header, body) = after.split_once('\n').unwrap_or((after, ""));
    if !body.chars().all(|c| matches!(c, ' ' | '\t' | '\n' | '\r')) {
        return None;
    }
    let keep = header
        .chars()
        .take_while(|c| matches!(c, '+' | '-' | '1'..='9'))
        .any(|c| c == '+');
    Some(if keep {
        let breaks = body.matches('\n').count();
        "\n".repeat(if breaks == 0 && !body.is_empty() {
            1
        } else {
            breaks
        })
    } else {
        String::new()
    })
}

/// Byte offsets of character indices in one text, found walking on from the
/// last one asked for (marks come in order, so all of them cost one walk).
#[derive(Default)]
struct CharOffsets {
    chars: usize,
    bytes: usize,
}

impl CharOffsets {
    fn byte_offset(&mut self, src: &str, at: usize) -> Option<usize> {
        if at < self.chars {
            *self = CharOffsets::default();
        }
        let (k, _) = src[self.bytes..].char_indices().nth(at - self.chars)?;
        self.bytes += k;
        self.chars = at;
        Some(self.bytes)
    }
}

/// Whether the `yaml` package finds more than one document in `src`: it
/// counts a `...` end marker with no document open as an empty document,
/// where yaml-rust2 gives no events for it.
fn more_than_one_document(src: &str) -> bool {
    let mut documents = 0;
    let mut open = false;
    for line in src.split('\n') {
        let end_marker = line
            .strip_prefix("...")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']));
        if end_marker {
            if !open {
                documents += 1;
            }
            open = false;
        } else {
            let t = line.trim_start_matches([' ', '\t', '\r']);
            if !open && !t.is_empty() && !t.starts_with('#') {
                documents += 1;
                open = true;
            }
        }
        if documents > 1 {
            return true;
        }
    }
    false
}

/// Tabs the `yaml` package refuses as indentation where yaml-rust2 takes
/// them: a line starting with a tab, or with spaces then a tab before a
/// block mapping key or sequence entry (comment and blank lines aside).
/// An approximation of its rule, which depends on the node the line is in.
fn tab_indentation(src: &str) -> bool {
    src.split('\n').any(|line| {
        let content = line.trim_start_matches([' ', '\t']);
        let lead = &line[..line.len() - content.len()];
        if !lead.contains('\t') || content.trim().is_empty() || content.starts_with('#') {
            return false;
        }
        if line.starts_with('\t') {
            return true;
        }
        let entry = |rest: &str| rest.is_empty() || rest.starts_with([' ', '\t', '\r']);
        content.strip_prefix('-').is_some_and(entry)
            || content.strip_prefix('?').is_some_and(entry)
            || content
                .find(':')
                .is_some_and(|colon| entry(&content[colon + 1..]))
    })
}

/// A character the text does not hold, to stand in for lone carriage
/// returns.
fn unused_char(src: &str) -> Option<char> {
    let mut used = vec![false; 0x1900];
    for c in src.chars() {
        if let Some(k) = (c as usize).checked_sub(0xe000).filter(|&k| k < used.len()) {
            used[k] = true;
        }
    }
    ('\u{e000}'..='\u{f8ff}').find(|&c| !used[c as usize - 0xe000])
}

/// The `yaml` package's `parse(src)`, as a JavaScript value; `Err` where it
/// throws.
///
/// A carriage return not followed by a line feed is no line break to the
/// `yaml` package but text (in scalars and comments alike), where
/// yaml-rust2 breaks the line: such returns are read as a private-use
/// character and put back in the values.
fn yaml_to_js(src: &str) -> Result<Js, ()> {
    if more_than_one_document(src) || tab_indentation(src) {
        return Err(());
    }
    let lone_cr = src
        .char_indices()
        .any(|(k, c)| c == '\r' && !src[k + 1..].starts_with('\n'));
    let stand_in = if lone_cr { unused_char(src) } else { None };
    let replaced;
    let src = match stand_in {
        Some(x) => {
            let mut out = String::with_capacity(src.len());
            let mut chars = src.chars().peekable();
            while let Some(c) = chars.next() {
                if c == '\r' && chars.peek() != Some(&'\n') {
                    out.push(x);
                } else {
                    out.push(c);
                }
            }
            replaced = out;
            replaced.as_str()
        }
        None => src,
    };
    let mut events = yaml_events(src)?;
    if let Some(x) = stand_in {
        for event in &mut events {
            if let Event::Scalar(value, ..) = event {
                if value.contains(x) {
                    *value = value.replace(x, "\r");
                }
            }
        }
    }
    let mut c = Composer {
        nodes: Vec::new(),
        anchored: Vec::new(),
        anchors: std::collections::HashMap::new(),
    };
    // Open collections: the node, for a map the key waiting for its value,
    // and the scalar keys it has (`uniqueKeys` compares them with `===`).
    let mut open: Vec<(usize, Option<usize>, ScalarKeys)> = Vec::new();
    let mut root = None;
    let mut documents = 0;
    for event in events {
        let node = match event {
            Event::StreamEnd => break,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err(());
                }
                continue;
            }
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => continue,
            Event::Alias(id) => {
                let target = *c.anchors.get(&id).ok_or(())?;
                c.push(YNode::Alias(target), 0)
            }
            Event::Scalar(value, style, anchor, tag) => {
                let scalar = resolve_scalar(value, style, tag.as_ref())?;
                c.push(YNode::Scalar(scalar), anchor)
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                let node = if matches!(event, Event::SequenceStart(..)) {
                    YNode::Seq(Vec::new())
                } else {
                    YNode::Map(Vec::new())
                };
                let n = c.push(node, anchor);
                open.push((n, None, ScalarKeys::default()));
                if open.len() > MAX_YAML_DEPTH {
                    return Err(());
                }
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match open.pop() {
                Some((n, ..)) => n,
                None => return Err(()),
            },
        };
        match open.last_mut() {
            None => root = Some(node),
            Some((parent, pending, keys)) => {
                let parent = *parent;
                match pending.take() {
                    Some(key) => {
                        if let YNode::Map(pairs) = &mut c.nodes[parent] {
                            pairs.push((key, node));
                        }
                        if let YNode::Scalar(k) = &c.nodes[key] {
                            keys.insert(k);
                        }
                    }
                    None if matches!(c.nodes[parent], YNode::Map(_)) => {
                        if matches!(&c.nodes[node], YNode::Scalar(k) if keys.has(k)) {
                            return Err(()); // "Map keys must be unique"
                        }
                        *pending = Some(node);
                    }
                    None => {
                        if let YNode::Seq(items) = &mut c.nodes[parent] {
                            items.push(node);
                        }
                    }
                }
            }
        }
    }
    let Some(root) = root else {
        return Ok(Js::Null);
    };
    let mut conv = ToJs {
        c: &c,
        data: std::collections::HashMap::new(),
        made: 0,
    };
    conv.convert(root, 0).map(|(value, ..)| value)
}

impl Composer {
    fn push(&mut self, node: YNode, anchor: usize) -> usize {
        self.nodes.push(node);
        self.anchored.push(anchor != 0);
        let n = self.nodes.len() - 1;
        if anchor != 0 {
            self.anchors.insert(anchor, n);
        }
        n
    }
}

/// The scalar keys of one map, as `===` tells them apart (`NaN` equals
/// nothing, `-0` equals `0`).
#[derive(Default)]
struct ScalarKeys {
    seen: std::collections::HashSet<ScalarKey>,
}

#[derive(PartialEq, Eq, Hash)]
enum ScalarKey {
    Null,
    Bool(bool),
    Num(u64),
    Str(String),
}

impl ScalarKeys {
    fn key(k: &Scalar) -> Option<ScalarKey> {
        match k {
            Scalar::Null => Some(ScalarKey::Null),
            Scalar::Bool(b) => Some(ScalarKey::Bool(*b)),
            Scalar::Num(x) if x.is_nan() => None,
            Scalar::Num(x) => Some(ScalarKey::Num(if *x == 0.0 { 0 } else { x.to_bits() })),
            Scalar::Str(s) => Some(ScalarKey::Str(s.clone())),
            Scalar::Date(_) => None,
        }
    }

    fn insert(&mut self, k: &Scalar) {
        if let Some(key) = Self::key(k) {
            self.seen.insert(key);
        }
    }

    fn has(&self, k: &Scalar) -> bool {
        Self::key(k).is_some_and(|key| self.seen.contains(&key))
    }
}

struct AnchorData {
    count: u64,
    alias_count: u64,
    /// Whether `alias_count` was worked out (the package works it out
    /// again while it is 0, always to 0 again: a value with no scalar
    /// anywhere under it stays so).
    counted: bool,
    res: Option<Js>,
    /// The values `res` holds, and how deep they nest.
    size: u64,
    height: usize,
}

struct ToJs<'c> {
    c: &'c Composer,
    data: std::collections::HashMap<usize, AnchorData>,
    /// Values made so far (see [`MAX_YAML_VALUES`]).
    made: u64,
}

/// A value made, with how many values it holds (itself included) and how
/// deep they nest (a scalar is 1).
type Made = (Js, u64, usize);

impl ToJs<'_> {
    /// The node's value; `Err` where the package throws, and where values
    /// nest deeper than [`MAX_YAML_DEPTH`] (counting through aliases) or
    /// outnumber [`MAX_YAML_VALUES`].
    fn convert(&mut self, n: usize, depth: usize) -> Result<Made, ()> {
        if depth > MAX_YAML_DEPTH {
            return Err(());
        }
        if let YNode::Alias(target) = self.c.nodes[n] {
            let alias_count = if self.data.get(&target).is_some_and(|d| !d.counted) {
                Some(self.alias_count(target))
            } else {
                None
            };
            let data = self.data.get_mut(&target).ok_or(())?;
            if data.res.is_none() {
                return Err(());
            }
            data.count += 1;
            if let Some(a) = alias_count {
                data.alias_count = a;
                data.counted = true;
            }
            if data.count.saturating_mul(data.alias_count) > MAX_ALIAS_COUNT {
                return Err(()); // "Excessive alias count …"
            }
            self.made = self.made.saturating_add(data.size);
            if self.made > MAX_YAML_VALUES {
                return Err(());
            }
            let res = data.res.clone().ok_or(())?;
            return Ok((res, data.size, data.height));
        }
        self.made += 1;
        if self.made > MAX_YAML_VALUES {
            return Err(());
        }
        if self.c.anchored[n] {
            self.data.insert(
                n,
                AnchorData {
                    count: 1,
                    alias_count: 0,
                    counted: false,
                    res: None,
                    size: 0,
                    height: 0,
                },
            );
        }
        let mut size = 1u64;
        let mut below = 0usize;
        let value = match &self.c.nodes[n] {
            YNode::Scalar(s) => match s {
                Scalar::Null => Js::Null,
                Scalar::Bool(b) => Js::Bool(*b),
                Scalar::Num(x) => Js::Num(*x),
                Scalar::Str(s) => Js::Str(s.clone()),
                Scalar::Date(t) => Js::Date(*t),
            },
            YNode::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for &item in items {
                    let (value, n, h) = self.convert(item, depth + 1)?;
                    size += n;
                    below = below.max(h);
                    out.push(value);
                }
                Js::Arr(out)
            }
            YNode::Map(pairs) => {
                let mut out: Vec<(String, Js)> = Vec::new();
                let mut index: std::collections::HashMap<String, usize> =
                    std::collections::HashMap::new();
                for &(k, v) in pairs {
                    let (key, nk, hk) = self.convert(k, depth + 1)?;
                    let key = self.string_key(k, &key);
                    let (value, nv, hv) = self.convert(v, depth + 1)?;
                    size += nk + nv;
                    below = below.max(hk).max(hv);
                    match index.get(&key) {
                        Some(&slot) => out[slot].1 = value,
                        None => {
                            index.insert(key.clone(), out.len());
                            out.push((key, value));
                        }
                    }
                }
                Js::Obj(js_key_order(out))
            }
            YNode::Alias(_) => return Err(()),
        };
        let height = below + 1;
        if height > MAX_YAML_DEPTH + 1 {
            return Err(());
        }
        if let Some(d) = self.data.get_mut(&n) {
            d.res = Some(value.clone());
            d.size = size;
            d.height = height;
        }
        Ok((value, size, height))
    }

    /// `getAliasCount`.
    fn alias_count(&self, n: usize) -> u64 {
        match &self.c.nodes[n] {
            YNode::Alias(target) => self
                .data
                .get(target)
                .map_or(0, |d| d.count.saturating_mul(d.alias_count)),
            YNode::Seq(items) => items
                .iter()
                .map(|&i| self.alias_count(i))
                .max()
                .unwrap_or(0),
            YNode::Map(pairs) => pairs
                .iter()
                .map(|&(k, v)| self.alias_count(k).max(self.alias_count(v)))
                .max()
                .unwrap_or(0),
            YNode::Scalar(_) => 1,
        }
    }

    /// `stringifyKey`: a key as a JavaScript property name.
    fn string_key(&self, n: usize, key: &Js) -> String {
        match key {
            Js::Null => String::new(),
            Js::Arr(_) | Js::Obj(_) => flow_string(self.c, n),
            other => other.to_js_string(),
        }
    }
}

/// A collection key written back in flow style, as the `yaml` package
/// names such keys (plain scalars only; close enough for keys nobody
/// writes in frontmatter).
fn flow_string(c: &Composer, n: usize) -> String {
    match &c.nodes[n] {
        YNode::Scalar(Scalar::Null) => "null".into(),
        YNode::Scalar(Scalar::Bool(b)) => b.to_string(),
        YNode::Scalar(Scalar::Num(x)) => js_number_to_string(*x),
        YNode::Scalar(Scalar::Str(s)) => s.clone(),
        YNode::Scalar(Scalar::Date(t)) => iso_string(*t).unwrap_or_default(),
        YNode::Seq(items) if items.is_empty() => "[]".into(),
        YNode::Seq(items) => format!(
            "[ {} ]",
            items
                .iter()
                .map(|&i| flow_string(c, i))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        YNode::Map(pairs) if pairs.is_empty() => "{}".into(),
        YNode::Map(pairs) => format!(
            "{{ {} }}",
            pairs
                .iter()
                .map(|&(k, v)| format!("{}: {}", flow_string(c, k), flow_string(c, v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        YNode::Alias(target) => flow_string(c, *target),
    }
}

/// A scalar by the YAML 1.2 core schema as the `yaml` package applies it:
/// plain scalars by their form, quoted and block scalars as strings, an
/// explicit `!!null`/`!!bool`/`!!int`/`!!float` tag when the text fits it.
/// `Err` where the package fails to resolve a tag (a `!!timestamp` that is
/// not a date).
fn resolve_scalar(value: String, style: TScalarStyle, tag: Option<&Tag>) -> Result<Scalar, ()> {
    Ok(match tag {
        Some(tag) => {
            let name = format!("{}{}", tag.handle, tag.suffix);
            let resolved = match name.strip_prefix("tag:yaml.org,2002:") {
                Some("null") => resolve_null(&value),
                Some("bool") => resolve_bool(&value),
                Some("int") => resolve_int(&value),
                Some("float") => resolve_float(&value),
                Some("timestamp") => Some(Scalar::Date(resolve_timestamp(&value).ok_or(())?)),
                _ => None,
            };
            resolved.unwrap_or(Scalar::Str(value))
        }
        None if matches!(style, TScalarStyle::Plain) => resolve_null(&value)
            .or_else(|| resolve_bool(&value))
            .or_else(|| resolve_int(&value))
            .or_else(|| resolve_float(&value))
            .unwrap_or(Scalar::Str(value)),
        None => Scalar::Str(value),
    })
}

/// The YAML 1.1 timestamp the package resolves an explicit `!!timestamp`
/// with: `yyyy-m-d`, optionally a time (`t`, `T` or blanks, then
/// `h:m:s(.fraction)`) and a zone (`Z`, `±h`, `±hh:mm`); the time value
/// `Date.UTC` gives, in ms.
fn resolve_timestamp(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut p = 0;
    let digits = |p: &mut usize, min: usize, max: usize| -> Option<f64> {
        let start = *p;
        while *p < b.len() && *p - start < max && b[*p].is_ascii_digit() {
            *p += 1;
        }
        if *p - start < min {
            return None;
        }
        s[start..*p].parse::<f64>().ok()
    };
    let year = digits(&mut p, 4, 4)?;
    (b.get(p) == Some(&b'-')).then_some(())?;
    p += 1;
    let month = digits(&mut p, 1, 2)?;
    (b.get(p) == Some(&b'-')).then_some(())?;
    p += 1;
    let day = digits(&mut p, 1, 2)?;
    let (mut hour, mut minute, mut second, mut millis, mut offset_min) = (0.0, 0.0, 0.0, 0.0, 0.0);
    if p < b.len() {
        match b[p] {
            b't' | b'T' => p += 1,
            b' ' | b'\t' => {
                while matches!(b.get(p), Some(b' ' | b'\t')) {
                    p += 1;
                }
            }
            _ => return None,
        }
        hour = digits(&mut p, 1, 2)?;
        (b.get(p) == Some(&b':')).then_some(())?;
        p += 1;
        minute = digits(&mut p, 1, 2)?;
        (b.get(p) == Some(&b':')).then_some(())?;
        p += 1;
        second = digits(&mut p, 1, 2)?;
        if b.get(p) == Some(&b'.') {
            let start = p + 1;
            p = start;
            while p < b.len() && b[p].is_ascii_digit() {
                p += 1;
            }
            if p == start {
                return None;
            }
            // `Number((".123456" + "00").substr(1, 3))`
            let frac = format!("{}00", &s[start..p]);
            millis = frac[..3].parse::<f64>().ok()?;
        }
        let mut zone = p;
        while matches!(b.get(zone), Some(b' ' | b'\t')) {
            zone += 1;
        }
        if matches!(b.get(zone), Some(b'Z' | b'+' | b'-')) {
            p = zone;
            if b[p] == b'Z' {
                p += 1;
            } else if matches!(b[p], b'+' | b'-') {
                let negative = b[p] == b'-';
                p += 1;
                // `[012]?[0-9]`
                let start = p;
                if matches!(b.get(p), Some(b'0'..=b'2'))
                    && b.get(p + 1).is_some_and(u8::is_ascii_digit)
                {
                    p += 2;
                } else if b.get(p).is_some_and(u8::is_ascii_digit) {
                    p += 1;
                } else {
                    return None;
                }
                let mut total: f64 = s[start..p].parse().ok()?;
                if b.get(p) == Some(&b':') {
                    let m0 = p + 1;
                    if b.len() >= m0 + 2 && b[m0..m0 + 2].iter().all(u8::is_ascii_digit) {
                        total = total * 60.0 + s[m0..m0 + 2].parse::<f64>().ok()?;
                        p = m0 + 2;
                    } else {
                        return None;
                    }
                }
                if total.abs() < 30.0 {
                    total *= 60.0;
                }
                offset_min = if negative { -total } else { total };
            } else {
                return None;
            }
        }
        if p != b.len() {
            return None;
        }
    } else if p != b.len() {
        return None;
    }
    let t = date_utc(year, month - 1.0, day, hour, minute, second, millis);
    Some(t - 60000.0 * offset_min)
}

/// `Date.UTC(year, month, day, h, min, s, ms)` (two-digit years are 19xx;
/// months past 11 carry into the year).
#[allow(clippy::too_many_arguments)]
fn date_utc(year: f64, month: f64, day: f64, h: f64, min: f64, s: f64, ms: f64) -> f64 {
    let year = if (0.0..=99.0).contains(&year) {
        1900.0 + year
    } else {
        year
    };
    let ym = year + (month / 12.0).floor();
    let mn = month.rem_euclid(12.0);
    let days = days_from_civil(ym as i64, mn as i64 + 1, 1) as f64 + day - 1.0;
    let t = days * 86_400_000.0 + h * 3_600_000.0 + min * 60_000.0 + s * 1000.0 + ms;
    if t.abs() > 8.64e15 {
        f64::NAN
    } else {
        t
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of a day count from 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The parts of a time value: (year, month, day, weekday, h, min, s, ms).
fn date_parts(t: f64) -> (i64, i64, i64, i64, i64, i64, i64, i64) {
    let t = t as i64;
    let days = t.div_euclid(86_400_000);
    let ms_of_day = t.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let weekday = (days + 4).rem_euclid(7);
    (
        y,
        m,
        d,
        weekday,
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    )
}

/// `Date.prototype.toISOString` (`None` for an invalid date, where it
/// throws).
fn iso_string(t: f64) -> Option<String> {
    if !t.is_finite() {
        return None;
    }
    let (y, m, d, _, h, min, s, ms) = date_parts(t);
    let year = if (0..=9999).contains(&y) {
        format!("{y:04}")
    } else if y < 0 {
        format!("-{:06}", -y)
    } else {
        format!("+{y:06}")
    };
    Some(format!(
        "{year}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{ms:03}Z"
    ))
}

/// `String(date)`, as a runtime in UTC prints it.
fn date_to_string(t: f64) -> String {
    if !t.is_finite() {
        return "Invalid Date".into();
    }
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, m, d, wd, h, min, s, _) = date_parts(t);
    let year = if y < 0 {
        format!("-{:06}", -y)
    } else {
        format!("{y:04}")
    };
    format!(
        "{} {} {d:02} {year} {h:02}:{min:02}:{s:02} GMT+0000 (Coordinated Universal Time)",
        DAYS[wd as usize % 7],
        MONTHS[(m as usize + 11) % 12],
    )
}

fn resolve_null(s: &str) -> Option<Scalar> {
    matches!(s, "" | "~" | "null" | "Null" | "NULL").then_some(Scalar::Null)
}

fn resolve_bool(s: &str) -> Option<Scalar> {
    match s {
        "true" | "True" | "TRUE" => Some(Scalar::Bool(true)),
        "false" | "False" | "FALSE" => Some(Scalar::Bool(false)),
        _ => None,
    }
}

fn all_digits(s: &str, radix: u32) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_digit(radix))
}

/// `parseInt(digits, radix)` for a non-empty run of digits.
fn parse_int(digits: &str, radix: u32) -> f64 {
    if radix == 10 {
        return digits.parse::<f64>().unwrap_or(f64::NAN);
    }
    match u128::from_str_radix(digits, radix) {
        Ok(n) => n as f64,
        Err(_) => digits
            .chars()
            .filter_map(|c| c.to_digit(radix))
            .fold(0.0, |acc, d| acc * f64::from(radix) + f64::from(d)),
    }
}

fn resolve_int(s: &str) -> Option<Scalar> {
    if let Some(oct) = s.strip_prefix("0o") {
        if all_digits(oct, 8) {
            return Some(Scalar::Num(parse_int(oct, 8)));
        }
    }
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if all_digits(digits, 10) {
        let x = parse_int(digits, 10);
        return Some(Scalar::Num(if negative { -x } else { x }));
    }
    if let Some(hex) = s.strip_prefix("0x") {
        if all_digits(hex, 16) {
            return Some(Scalar::Num(parse_int(hex, 16)));
        }
    }
    None
}

fn resolve_float(s: &str) -> Option<Scalar> {
    match s {
        ".nan" | ".NaN" | ".NAN" => return Some(Scalar::Num(f64::NAN)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Some(Scalar::Num(f64::INFINITY))
        }
        "-.inf" | "-.Inf" | "-.INF" => return Some(Scalar::Num(f64::NEG_INFINITY)),
        _ => {}
    }
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(e) => (&body[..e], Some(&body[e + 1..])),
        None => (body, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (int.is_empty() && all_digits(frac, 10))
                || (all_digits(int, 10) && (frac.is_empty() || all_digits(frac, 10)))
        }
        // Without a dot only the exponent form is a float.
        None => exponent.is_some() && all_digits(mantissa, 10),
    };
    let exponent_ok =
        exponent.is_none_or(|e| all_digits(e.strip_prefix(['-', '+']).unwrap_or(e), 10));
    if !(mantissa_ok && exponent_ok) {
        return None;
    }
    s.parse::<f64>().ok().map(Scalar::Num)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn counter_ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("id{n:05}")
        }
    }

    fn parse(md: &str) -> Parsed {
        parse_markdown(md, &mut counter_ids())
    }

    #[test]
    fn a_hostile_table_is_not_padded_into_billions_of_cells() {
        // 60,000 columns in the header, 60,000 one-cell rows: padded, that
        // would be 3.6 billion cells.
        let mut md = format!("{}\n", "|a".repeat(60_000));
        md.push_str(&"|-".repeat(2));
        md.push('\n');
        md.push_str(&"|x\n".repeat(60_000));
        let p = parse(&md);
        let table = &p.tree[0];
        let rows = table.children.iter().filter(|c| c.block.kind == "TableRow");
        let cells: usize = rows.map(|r| r.children.len()).sum();
        assert_eq!(cells, 60_000 + 60_000, "the header's cells and one per row");
        // A small table is padded as Seed pads it.
        let p = parse("| a | b |\n|---|---|\n| x |\n");
        let row = &p.tree[0].children.last().expect("a row");
        assert_eq!(row.children.len(), 2);
    }

    #[test]
    fn headings_nest_their_content() {
        let p = parse("# Title\n\nIntro **bold** text\n\n## Sub\n\nBody");
        let hm = to_hm_block_nodes(&p.tree);
        assert_eq!(
            Value::Array(hm),
            json!([{
                "block": {"type": "Heading", "id": "id00001", "text": "Title", "annotations": [],
                          "attributes": {"childrenType": "Group"}},
                "children": [
                    {"block": {"type": "Paragraph", "id": "id00002", "text": "Intro bold text",
                               "annotations": [{"type": "Bold", "starts": [6], "ends": [10]}],
                               "attributes": {}}},
                    {"block": {"type": "Heading", "id": "id00003", "text": "Sub", "annotations": [],
                               "attributes": {"childrenType": "Group"}},
                     "children": [{"block": {"type": "Paragraph", "id": "id00004", "text": "Body",
                                             "annotations": [], "attributes": {}}}]}
                ]
            }])
        );
    }

    #[test]
    fn lists_and_operations() {
        let p = parse("- one\n- two\n  1. inner");
        let ops = flatten_to_operations(&p.tree, "");
        assert_eq!(
            Value::Array(ops),
            json!([
                {"type": "ReplaceBlock", "block": {"type": "Paragraph", "id": "id00001", "text": "",
                  "annotations": [], "childrenType": "Unordered"}},
                {"type": "ReplaceBlock", "block": {"type": "Paragraph", "id": "id00002", "text": "one",
                  "annotations": []}},
                {"type": "ReplaceBlock", "block": {"type": "Paragraph", "id": "id00003", "text": "two",
                  "annotations": [], "childrenType": "Ordered"}},
                {"type": "ReplaceBlock", "block": {"type": "Paragraph", "id": "id00004", "text": "inner",
                  "annotations": []}},
                {"type": "MoveBlocks", "blocks": ["id00004"], "parent": "id00003"},
                {"type": "MoveBlocks", "blocks": ["id00002", "id00003"], "parent": "id00001"},
                {"type": "MoveBlocks", "blocks": ["id00001"], "parent": ""}
            ])
        );
    }

    #[test]
    fn offsets_count_utf16_units() {
        let p = parse("😀 **b** <hm://z123>");
        let b = &p.tree[0].block;
        assert_eq!(b.text, "😀 b \u{fffc}");
        assert_eq!(b.annotations[0].kind, "Bold");
        assert_eq!(
            (b.annotations[0].starts[0], b.annotations[0].ends[0]),
            (3, 4)
        );
        assert_eq!(b.annotations[1].kind, "Embed");
        assert_eq!(
            (b.annotations[1].starts[0], b.annotations[1].ends[0]),
            (5, 6)
        );
    }

    #[test]
    fn block_ids_code_and_tables() {
        let md = "```rust <!-- id:code1 -->\nfn x() {}\n```\n\n<!-- id:tbl -->\n| A <!-- col:c1 --> | B |\n|---|---|\n| 1 | 2 | <!-- id:row1 -->";
        let p = parse(md);
        assert_eq!(p.tree[0].block.id, "code1");
        assert_eq!(p.tree[0].block.language.as_deref(), Some("rust"));
        assert_eq!(p.tree[0].block.text, "fn x() {}");
        let table = &p.tree[1];
        assert_eq!(table.block.kind, "Table");
        assert_eq!(table.block.id, "tbl");
        let kinds: Vec<_> = table
            .children
            .iter()
            .map(|c| c.block.kind.as_str())
            .collect();
        assert_eq!(
            kinds,
            ["TableColumn", "TableColumn", "TableRow", "TableRow"]
        );
        assert_eq!(table.children[0].block.id, "c1");
        assert_eq!(table.children[3].block.id, "row1");
        assert_eq!(table.children[3].children[0].block.text, "1");
        assert_eq!(
            table.children[3].children[0].block.attributes,
            Some(
                json!({"columnId": "c1"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
            )
        );
    }

    #[test]
    fn frontmatter_metadata() {
        let md = "---\ntitle: Hello\nshowOutline: yes\ncount: 3\ntheme:\n  headerLayout: Center\n---\nBody";
        let p = parse(md);
        assert_eq!(
            p.metadata,
            vec![
                ("showOutline".to_owned(), json!(true)),
                ("count".to_owned(), json!(3)),
                ("theme".to_owned(), json!({"headerLayout": "Center"})),
                ("name".to_owned(), json!("Hello")),
            ]
        );
        assert_eq!(p.tree.len(), 1);
        // Invalid YAML: no metadata, and the frontmatter is read as markdown.
        let p = parse("---\na: [1\n---\nBody");
        assert!(p.metadata.is_empty());
        assert_eq!(p.tree.len(), 1);
        assert_eq!(p.tree[0].block.text, "--- a: [1 --- Body");
    }

    #[test]
    fn json_block_nodes_to_operations() {
        let nodes = vec![json!({
            "block": {"type": "Paragraph", "id": "a", "text": "x", "annotations": [],
                      "attributes": {"childrenType": "Ordered"}},
            "children": [{"block": {"type": "Paragraph", "id": "b", "text": "y",
                                    "annotations": [], "attributes": {}}}]
        })];
        assert_eq!(
            Value::Array(hm_block_nodes_to_operations(&nodes)),
            json!([
                {"type": "ReplaceBlock", "block": nodes[0]["block"]},
                {"type": "ReplaceBlock", "block": nodes[0]["children"][0]["block"]},
                {"type": "MoveBlocks", "blocks": ["b"], "parent": "a"},
                {"type": "MoveBlocks", "blocks": ["a"], "parent": ""}
            ])
        );
    }

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        for (x, s) in [
            (1.0, "1"),
            (-0.0, "0"),
            (0.1, "0.1"),
            (1e21, "1e+21"),
            (123456789012345680000.0, "123456789012345680000"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(js_number_to_string(x), s);
        }
    }

    #[test]
    fn no_panics_on_odd_input() {
        for md in [
            "",
            "\n",
            "---",
            "---\n",
            "[",
            "![",
            "`",
            "<",
            "<!--",
            "<!-- id:",
            "| ",
            "|\\",
            "* ** *** **** _ __",
            "[[[](",
            "# ",
            "```",
            "$$",
            "\u{feff}---\n---\n",
            "😀\\",
            "<span style=\"color:red\">x",
            "- \n  - \n    - x",
            "<!-- end:x -->",
            "\r\n\r\n",
        ] {
            let p = parse(md);
            let _ = to_hm_block_nodes(&p.tree);
            let _ = flatten_to_operations(&p.tree, "");
        }
    }

    // Hostile shapes: each made the JavaScript's way quadratic (or worse);
    // these pin what they parse to (at sizes a debug build runs quickly;
    // `examples/markdown_hostile.rs` times them at 256 KiB).

    type Spanned = (String, usize, usize, Option<String>);

    /// The only block's text, and its annotations as (type, start, end,
    /// link).
    fn inline(md: &str) -> (String, Vec<Spanned>) {
        let p = parse(md);
        assert_eq!(
            p.tree.len(),
            1,
            "one block for {:?}",
            &md[..md.len().min(40)]
        );
        let b = &p.tree[0].block;
        let annotations = b
            .annotations
            .iter()
            .map(|a| (a.kind.clone(), a.starts[0], a.ends[0], a.link.clone()))
            .collect();
        (b.text.clone(), annotations)
    }

    fn ann(kind: &str, start: usize, end: usize, link: Option<&str>) -> Spanned {
        (kind.into(), start, end, link.map(str::to_owned))
    }

    #[test]
    fn unclosed_openers_stay_text() {
        for unit in [
            "[",
            "![",
            "[a](",
            "[a](<",
            "[a](b",
            "(",
            "<",
            "<a:",
            "<aaaa",
            "<br",
            "<!-- id:",
            "<span style=\"color:",
        ] {
            let md = unit.repeat(20_000 / unit.len());
            let (text, annotations) = inline(&md);
            assert!(text == md && annotations.is_empty(), "{unit:?}");
        }
        // Escaped brackets after a `[`: the walk skips each.
        let (text, annotations) = inline(&"[\\".repeat(10_000));
        assert!(text == format!("{}\\", "[".repeat(10_000)) && annotations.is_empty());
        // Backtick runs of every length, none closed, after a `[`.
        let md: String = std::iter::once("[".to_owned())
            .chain((1..150).map(|k| format!("{}a", "`".repeat(k))))
            .collect();
        assert_eq!(inline(&md), (md.clone(), vec![]));
    }

    #[test]
    fn deeply_nested_links_merge_as_the_javascript_merges_them() {
        let n = 3000;
        let md = format!("{}a{}", "[".repeat(n), "](u)".repeat(n));
        assert_eq!(
            inline(&md),
            ("a".into(), vec![ann("Link", 0, 1, Some("u"))])
        );
        // A link per level, all over the same text: the innermost first.
        let n = 500;
        let urls: String = (0..n).map(|k| format!("]({k})")).collect();
        let (text, annotations) = inline(&format!("{}a{urls}", "[".repeat(n)));
        assert_eq!(text, "a");
        let expected: Vec<_> = (0..n)
            .map(|k| ann("Link", 0, 1, Some(&k.to_string())))
            .collect();
        assert_eq!(annotations, expected);
        // Images nest the same way, with no annotation of their own.
        let md = format!("{}a{}", "![".repeat(n), "](u)".repeat(n));
        assert_eq!(inline(&md), ("a".into(), vec![]));
    }

    #[test]
    fn a_label_orders_what_ties_as_its_own_merge_left_it() {
        let colors = |value: &str| -> Map<String, Value> {
            json!({"value": value})
                .as_object()
                .cloned()
                .unwrap_or_default()
        };
        let order = |md: &str| -> Vec<(String, usize, usize, Option<String>)> {
            let p = parse(md);
            p.tree[0]
                .block
                .annotations
                .iter()
                .filter(|a| a.kind == "TextColor")
                .map(|a| {
                    let value = a
                        .attributes
                        .as_ref()
                        .and_then(|m| m["value"].as_str())
                        .unwrap_or("");
                    (value.to_owned(), a.starts[0], a.ends[0], None)
                })
                .collect()
        };
        let spans = r#"<span style="color:a">x<span style="color:b">y</span></span> <span style="color:a"><span style="color:b">z</span></span>"#;
        let tie = |first: &str, second: &str| {
            vec![
                ("a".to_owned(), 0, 2, None),
                ("b".to_owned(), 1, 2, None),
                (first.to_owned(), 3, 4, None),
                (second.to_owned(), 3, 4, None),
            ]
        };
        // Unlabelled: b's annotation was pushed first.
        assert_eq!(order(spans), tie("b", "a"));
        // In a label, the label's merge sorted a (from 0) before b.
        assert_eq!(order(&format!("[{spans}](u)")), tie("a", "b"));
        assert!(colors("a").contains_key("value"));
        // A span split by a close under it is pushed there, first.
        let md = r#"<mark><span style="color:b">y</mark><span style="color:a">w</span></span> <span style="color:a"><span style="color:b">z</span></span>"#;
        assert_eq!(
            order(md),
            vec![
                ("b".to_owned(), 0, 2, None),
                ("a".to_owned(), 1, 2, None),
                ("b".to_owned(), 3, 4, None),
                ("a".to_owned(), 3, 4, None),
            ]
        );
    }

    #[test]
    fn a_label_ends_its_code_spans_where_it_ends() {
        // The label `[](`)`[`[`]()` holds a backtick whose closer lies past
        // the label, so there it closes nothing (checked against Seed's
        // client).
        assert_eq!(
            inline("[[](`)`[`[`]()]()`"),
            (
                "[``".into(),
                vec![ann("Link", 0, 2, Some("")), ann("Code", 0, 1, None)]
            )
        );
    }

    #[test]
    fn closing_under_many_spans_does_not_multiply_annotations() {
        // Each `</u>` closes and reopens every `<mark>` above it.
        let k = 5000;
        let md = format!(
            "{}{}{}y",
            "<u>".repeat(k),
            "<mark>".repeat(k),
            "x</u>".repeat(k)
        );
        assert_eq!(
            inline(&md),
            (
                format!("{}y", "x".repeat(k)),
                vec![ann("Range", 0, k + 1, None), ann("Underline", 0, k, None)]
            )
        );
        let md = format!("{}{}", "<mark>".repeat(k), "</u>*a".repeat(k));
        let (text, annotations) = inline(&md);
        assert_eq!(text, "a".repeat(k));
        assert_eq!(annotations.len(), k / 2 + 1, "italics, and the marks");
    }

    #[test]
    fn many_comment_openers_on_a_line() {
        let k = 5000;
        // The first opener's attrs run to the last `}`: not JSON.
        let md = format!("x{}}} -->", " <!-- id:a attrs:{".repeat(k));
        let p = parse(&md);
        assert_eq!(
            (p.tree[0].block.id.as_str(), p.tree[0].block.text.as_str()),
            ("a", "x")
        );
        assert_eq!(p.tree[0].block.attributes, None);
        // Only the last opener is a comment to the end of the line.
        let md = format!("x{} -->", " <!-- id:a".repeat(k));
        let p = parse(&md);
        assert_eq!(p.tree[0].block.id, "a");
        assert_eq!(
            p.tree[0].block.text,
            format!("x{}", " <!-- id:a".repeat(k - 1))
        );
        // In a table cell.
        let cell = "<!-- col:a attrs:{".repeat(k);
        let p = parse(&format!("| {cell} |\n|---|\n| x |"));
        assert_eq!(p.tree[0].children[1].children[0].block.text, cell);
        let p = parse(&format!("| {cell}}} --> |\n|---|\n| x |"));
        assert_eq!(p.tree[0].children[0].block.id, "a");
        assert_eq!(p.tree[0].children[0].block.attributes, None);
    }

    #[test]
    fn hostile_frontmatter() {
        let keys = |md: &str| parse(md).metadata.len();
        let many: String = (0..5000).map(|k| format!("k{k}: {k}\n")).collect();
        assert_eq!(keys(&format!("---\n{many}---\nbody")), 5000);
        assert_eq!(
            keys(&format!("---\n{many}k7: again\n---\nbody")),
            0,
            "a duplicate key"
        );
        let blocks: String = (0..3000).map(|k| format!("k{k}: |\n  x\n")).collect();
        let p = parse(&format!("---\n{blocks}---\nbody"));
        assert_eq!(p.metadata.len(), 3000);
        assert_eq!(p.metadata[0].1, json!("x\n"));
        // Tabs after a `:` read as spaces, in one read or one at a time.
        let tabs: String = (0..60).map(|k| format!("t{k}:\tv{k}\n")).collect();
        let p = parse(&format!("---\n{tabs}q: \"x:\ty\"\n---\nbody"));
        assert_eq!(p.metadata.len(), 61);
        assert_eq!(p.metadata[59].1, json!("v59"));
        assert_eq!(p.metadata[60].1, json!("x:\ty"));
        let tabs: String = (0..65).map(|k| format!("t{k}:\tv\n")).collect();
        assert_eq!(keys(&format!("---\n{tabs}---\nbody")), 0, "more than 64");
        // Aliases of collections with no scalar escape the alias count;
        // copied out they would make millions of values.
        let n = 2000;
        let md = format!(
            "---\na: &a [{}]\nb: [{}]\n---\nbody",
            "[],".repeat(n),
            "*a,".repeat(n)
        );
        assert_eq!(keys(&md), 0);
        let md = format!(
            "---\na: &a [{}]\nb: [{}]\n---\nbody",
            "[],".repeat(50),
            "*a,".repeat(50)
        );
        assert_eq!(keys(&md), 2);
        // Nesting deeper than 500 through aliases.
        let mut md = String::from("---\na0: &a0 x\n");
        for k in 1..=3 {
            md.push_str(&format!(
                "a{k}: &a{k} {}*a{}{}\n",
                "[".repeat(200),
                k - 1,
                "]".repeat(200)
            ));
        }
        assert_eq!(keys(&format!("{md}---\nbody")), 0);
        md.truncate(md.rfind("a3:").unwrap_or(0));
        assert_eq!(keys(&format!("{md}---\nbody")), 3);
    }

    #[test]
    fn deep_nesting_needs_no_deep_stack() {
        // The deepest nesting 256 KiB makes: six heading levels per tab.
        let mut md = String::new();
        let mut k = 0;
        while md.len() < 256 * 1024 {
            for level in 1..=6 {
                md.push_str(&"\t".repeat(k));
                md.push_str(&"#".repeat(level));
                md.push_str(" h\n");
            }
            k += 1;
        }
        let run = move || {
            let p = parse(&md);
            let mut depth = 0;
            let mut nodes: Vec<(&BlockNode, usize)> = p.tree.iter().map(|n| (n, 1)).collect();
            while let Some((n, d)) = nodes.pop() {
                depth = depth.max(d);
                nodes.extend(n.children.iter().map(|c| (c, d + 1)));
            }
            let hm = to_hm_block_nodes(&p.tree);
            let ops = flatten_to_operations(&p.tree, "");
            let json: Vec<Value> = p.tree.iter().map(BlockNode::to_json).collect();
            // Only dropping the trees recurses (with little per level).
            (depth, hm.len(), ops.len(), json.len())
        };
        let done = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(run)
            .map(|t| t.join());
        let Ok(Ok((depth, hm, ops, json))) = done else {
            panic!("the deep tree did not convert");
        };
        assert!(depth > 1500, "{depth}");
        assert_eq!((hm, json), (1, 1));
        assert!(ops > depth);
    }
}
