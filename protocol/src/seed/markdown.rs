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
//! after an indicator such as `:`).

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
        let mut out = Map::new();
        out.insert("block".into(), self.block.to_json());
        out.insert(
            "children".into(),
            Value::Array(self.children.iter().map(BlockNode::to_json).collect()),
        );
        Value::Object(out)
    }
}

fn annotations_json(annotations: &[Annotation]) -> Value {
    Value::Array(annotations.iter().map(Annotation::to_json).collect())
}

/// The characters of a generated block id, as the client draws them:
/// `ID_CHARS[floor(Math.random() * 64)]`, eight times.
/// Cells a table is padded to at most (columns × rows); a larger grid
/// keeps only the cells its rows write.
pub const MAX_DENSE_TABLE_CELLS: usize = 21_845;

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
    tree.iter()
        .map(|node| {
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
            if !node.children.is_empty() {
                out.insert(
                    "children".into(),
                    Value::Array(to_hm_block_nodes(&node.children)),
                );
            }
            Value::Object(out)
        })
        .collect()
}

/// The tree as document operations (`flattenToOperations`): per level, a
/// `ReplaceBlock` per block (attributes inlined at the top level of the
/// block, then `type`, `id`, `text`, `annotations`, `language`,
/// `childrenType`, `link`), each block's children's operations after it,
/// and one `MoveBlocks` placing the level's blocks under `parent_id` (`""`
/// for the document root). JSON values; [`super::json_to_ipld`] with
/// `JsonForm::Plain` makes them IPLD.
pub fn flatten_to_operations(tree: &[BlockNode], parent_id: &str) -> Vec<Value> {
    let mut ops = Vec::new();
    let mut block_ids = Vec::new();
    for node in tree {
        let b = &node.block;
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
        ops.push(operation("ReplaceBlock", "block", Value::Object(block)));
        block_ids.push(Value::String(b.id.clone()));
        if !node.children.is_empty() {
            ops.extend(flatten_to_operations(&node.children, &b.id));
        }
    }
    if !block_ids.is_empty() {
        ops.push(move_blocks(block_ids, Value::String(parent_id.to_owned())));
    }
    ops
}

/// Operations for content given as `HMBlockNode` JSON (the agents server's
/// `hmBlockNodesToOperations`): per level, a `ReplaceBlock` carrying each
/// node's `block` as it is (attributes stay nested), its children's
/// operations after it, then one `MoveBlocks` under the parent (`""` at the
/// root). Lenient: a node without `block` or `id` gives `null` there.
pub fn hm_block_nodes_to_operations(nodes: &[Value]) -> Vec<Value> {
    hm_nodes_ops(nodes, Value::String(String::new()))
}

fn hm_nodes_ops(nodes: &[Value], parent: Value) -> Vec<Value> {
    let mut ops = Vec::new();
    let mut block_ids = Vec::new();
    for node in nodes {
        let block = node.get("block").cloned().unwrap_or(Value::Null);
        let id = block.get("id").cloned().unwrap_or(Value::Null);
        ops.push(operation("ReplaceBlock", "block", block));
        block_ids.push(id.clone());
        if let Some(children) = node.get("children").and_then(Value::as_array) {
            if !children.is_empty() {
                ops.extend(hm_nodes_ops(children, id));
            }
        }
    }
    if !block_ids.is_empty() {
        ops.push(move_blocks(block_ids, parent));
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

#[derive(Clone, Debug)]
struct Ann {
    kind: &'static str,
    start: usize,
    end: usize,
    link: Option<String>,
    attributes: Option<Map<String, Value>>,
}

#[derive(Clone)]
struct Span {
    kind: &'static str,
    start: usize,
    family: u8,
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

fn is_span_type(kind: &str) -> bool {
    SPAN_STYLES.iter().any(|(_, t)| *t == kind)
}

struct InlineState {
    text: Vec<u16>,
    annotations: Vec<Ann>,
    stack: Vec<Span>,
}

impl InlineState {
    fn close(&mut self, span: &Span) {
        if self.text.len() > span.start {
            self.annotations.push(Ann {
                kind: span.kind,
                start: span.start,
                end: self.text.len(),
                link: None,
                attributes: span.attributes.clone(),
            });
        }
    }

    /// Closes the span at `idx`, closing and reopening the spans above it.
    fn close_at(&mut self, idx: usize) {
        let above = self.stack.split_off(idx + 1);
        for s in above.iter().rev() {
            self.close(s);
        }
        if let Some(s) = self.stack.pop() {
            self.close(&s);
        }
        let start = self.text.len();
        for s in above {
            self.stack.push(Span { start, ..s });
        }
    }

    fn toggle(&mut self, kind: &'static str, family: u8) {
        match self
            .stack
            .iter()
            .rposition(|s| s.kind == kind && s.family == family)
        {
            Some(idx) => self.close_at(idx),
            None => self.stack.push(Span {
                kind,
                start: self.text.len(),
                family,
                attributes: None,
            }),
        }
    }

    fn close_type(&mut self, pred: impl Fn(&Span) -> bool) {
        if let Some(idx) = self.stack.iter().rposition(pred) {
            self.close_at(idx);
        }
    }

    fn append(&mut self, parsed: Inline) {
        let offset = self.text.len();
        self.text.extend_from_slice(&parsed.text);
        for a in parsed.annotations {
            self.annotations.push(Ann {
                start: a.start + offset,
                end: a.end + offset,
                ..a
            });
        }
    }
}

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

/// The start of the next run of exactly `n` backticks from `from`.
fn find_backtick_run(s: &[u16], from: usize, n: usize) -> Option<usize> {
    let mut i = from;
    while i < s.len() {
        if at(s, i) == b'`' {
            let k = run_len(s, i, b'`');
            if k == n {
                return Some(i);
            }
            i += k;
        } else {
            i += 1;
        }
    }
    None
}

struct LinkAt {
    label: (usize, usize),
    url: (usize, usize),
    end: usize,
}

/// `[label](url)` or `[label](<url>)` with the `[` at `open`.
fn read_link(s: &[u16], open: usize) -> Option<LinkAt> {
    let mut depth: i64 = 0;
    let mut i = open;
    let mut close = None;
    while i < s.len() {
        match at(s, i) {
            b'\\' => {
                i += 2;
                continue;
            }
            b'`' => {
                let n = run_len(s, i, b'`');
                i = match find_backtick_run(s, i + n, n) {
                    Some(closer) => closer + n,
                    None => i + n,
                };
                continue;
            }
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let close = close?;
    if at(s, close + 1) != b'(' {
        return None;
    }
    let label = (open + 1, close);
    let mut j = close + 2;
    if at(s, j) == b'<' {
        let gt = index_of(s, b'>', j + 1)?;
        if at(s, gt + 1) != b')' {
            return None;
        }
        return Some(LinkAt {
            label,
            url: (j + 1, gt),
            end: gt + 2,
        });
    }
    let mut parens = 0usize;
    while j < s.len() {
        match at(s, j) {
            b'\\' => {
                j += 2;
                continue;
            }
            b'(' => parens += 1,
            b')' => {
                if parens == 0 {
                    return Some(LinkAt {
                        label,
                        url: (close + 2, j),
                        end: j + 1,
                    });
                }
                parens -= 1;
            }
            _ => {}
        }
        j += 1;
    }
    None
}

/// `<span style="prop:value">` at `i`: the annotation type, the value and
/// the tag's length.
fn match_span(s: &[u16], i: usize) -> Option<(&'static str, Vec<u16>, usize)> {
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
    let prop = string(&s[p0..p]);
    let v0 = p + 1;
    let quote = index_of(s, b'"', v0)?;
    if at(s, quote + 1) != b'>' {
        return None;
    }
    let kind = SPAN_STYLES.iter().find(|(k, _)| *k == prop)?.1;
    Some((kind, s[v0..quote].to_vec(), quote + 2 - i))
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

/// What to do with a link label's text once it is parsed: an image's alt
/// text is appended as it is, a link's gets a `Link` annotation over it.
struct LabelUse {
    /// Where the parent resumes.
    end: usize,
    /// The link's URL; `None` for an image.
    url: Option<String>,
}

/// One text being parsed: the whole input, or a link label inside it.
struct InlineFrame {
    from: usize,
    to: usize,
    i: usize,
    st: InlineState,
    then: Option<LabelUse>,
}

/// Inline markdown into text and annotations (`parseInlineFormatting`).
///
/// The JavaScript parses a link label by calling itself; here a label is a
/// frame on an explicit stack, so nesting depth costs heap, not stack.
fn parse_inline(raw: &[u16]) -> Inline {
    let new_state = || InlineState {
        text: Vec::new(),
        annotations: Vec::new(),
        stack: Vec::new(),
    };
    let mut frames = vec![InlineFrame {
        from: 0,
        to: raw.len(),
        i: 0,
        st: new_state(),
        then: None,
    }];
    loop {
        let Some(top) = frames.last_mut() else {
            return Inline {
                text: Vec::new(),
                annotations: Vec::new(),
            };
        };
        let text = &raw[top.from..top.to];
        if let Some(((a, b), then)) = inline_until_label(text, &mut top.i, &mut top.st) {
            let from = top.from;
            frames.push(InlineFrame {
                from: from + a,
                to: from + b,
                i: 0,
                st: new_state(),
                then: Some(then),
            });
            continue;
        }
        let Some(done) = frames.pop() else { continue };
        let mut st = done.st;
        while let Some(s) = st.stack.pop() {
            st.close(&s);
        }
        let parsed = Inline {
            text: st.text,
            annotations: merge_adjacent(st.annotations),
        };
        let (Some(parent), Some(then)) = (frames.last_mut(), done.then) else {
            return parsed;
        };
        let start = parent.st.text.len();
        parent.st.append(parsed);
        if let Some(url) = then.url {
            if parent.st.text.len() > start {
                parent.st.annotations.push(Ann {
                    kind: "Link",
                    start,
                    end: parent.st.text.len(),
                    link: Some(url),
                    attributes: None,
                });
            }
        }
        parent.i = then.end;
    }
}

/// Runs `parseInlineFormatting`'s loop over `raw` from `*i` until the end
/// (`None`) or a link or image whose label must be parsed first: then the
/// label's range and what to do with it.
fn inline_until_label(
    raw: &[u16],
    i: &mut usize,
    st: &mut InlineState,
) -> Option<((usize, usize), LabelUse)> {
    let n = raw.len();
    while *i < n {
        let ch = at(raw, *i);
        if ch == b'\\' && *i + 1 < n {
            st.text.push(raw[*i + 1]);
            *i += 2;
            continue;
        }
        if ch == b'`' {
            let run = run_len(raw, *i, b'`');
            if let Some(closer) = find_backtick_run(raw, *i + run, run) {
                let mut inner = &raw[*i + run..closer];
                if inner.len() >= 2
                    && at(inner, 0) == b' '
                    && at(inner, inner.len() - 1) == b' '
                    && !trim(inner).is_empty()
                {
                    inner = &inner[1..inner.len() - 1];
                }
                let inner = replace_br(inner);
                let start = st.text.len();
                st.text.extend_from_slice(&inner);
                if !inner.is_empty() {
                    st.annotations.push(Ann {
                        kind: "Code",
                        start,
                        end: st.text.len(),
                        link: None,
                        attributes: None,
                    });
                }
                *i = closer + run;
                continue;
            }
            st.text.extend_from_slice(&raw[*i..*i + run]);
            *i += run;
            continue;
        }
        if ch == b'*' || ch == b'_' {
            let mut run = run_len(raw, *i, ch);
            *i += run;
            while run > 0 {
                if run >= 2 {
                    st.toggle("Bold", ch);
                    run -= 2;
                } else {
                    st.toggle("Italic", ch);
                    run -= 1;
                }
            }
            continue;
        }
        if ch == b'~' && at(raw, *i + 1) == b'~' {
            st.toggle("Strike", b'~');
            *i += 2;
            continue;
        }
        if ch == b'<' && inline_tag(raw, i, st) {
            continue;
        }
        if ch == b'!' && at(raw, *i + 1) == b'[' {
            if let Some(link) = read_link(raw, *i + 1) {
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
            if let Some(link) = read_link(raw, *i) {
                return Some((
                    link.label,
                    LabelUse {
                        end: link.end,
                        url: Some(string(&raw[link.url.0..link.url.1])),
                    },
                ));
            }
        }
        st.text.push(raw[*i]);
        *i += 1;
    }
    None
}

/// What starts with `<` at `*i`: a line break, `<u>`/`<mark>` and their
/// closers, a styled `<span>` or its closer, or an autolink. Whether it
/// was one (and `*i` moved past it).
fn inline_tag(raw: &[u16], i: &mut usize, st: &mut InlineState) -> bool {
    if let Some(len) = match_br(raw, *i) {
        st.text.push(u16::from(b'\n'));
        *i += len;
        return true;
    }
    let closing = at(raw, *i + 1) == b'/';
    let name_at = *i + 1 + usize::from(closing);
    let tag = if starts_with_at(raw, name_at, "u>") {
        Some(("Underline", 2))
    } else if starts_with_at(raw, name_at, "mark>") {
        Some(("Range", 5))
    } else {
        None
    };
    if let Some((kind, len)) = tag {
        if closing {
            st.close_type(|s| s.kind == kind);
        } else {
            st.stack.push(Span {
                kind,
                start: st.text.len(),
                family: b'h',
                attributes: None,
            });
        }
        *i = name_at + len;
        return true;
    }
    if let Some((kind, value, len)) = match_span(raw, *i) {
        let mut attributes = Map::new();
        attributes.insert("value".into(), Value::String(decode_html_attr(&value)));
        st.stack.push(Span {
            kind,
            start: st.text.len(),
            family: b'h',
            attributes: Some(attributes),
        });
        *i += len;
        return true;
    }
    if starts_with_at(raw, *i, "</span>") {
        st.close_type(|s| is_span_type(s.kind));
        *i += 7;
        return true;
    }
    if let Some(end) = index_of(raw, b'>', *i + 1) {
        let inner = &raw[*i + 1..end];
        if is_autolink(inner) {
            let start = st.text.len();
            let link = Some(string(inner));
            let kind = if starts_with(inner, "hm://") {
                st.text.push(0xfffc);
                "Embed"
            } else {
                st.text.extend_from_slice(inner);
                "Link"
            };
            st.annotations.push(Ann {
                kind,
                start,
                end: st.text.len(),
                link,
                attributes: None,
            });
            *i = end + 1;
            return true;
        }
    }
    false
}

/// Merges annotations of one kind (type, link, attributes) whose ranges
/// touch or overlap, and orders them (`mergeAdjacentAnnotations`).
fn merge_adjacent(annotations: Vec<Ann>) -> Vec<Ann> {
    type Key = (&'static str, String, String);
    /// A kind, its first annotation and its ranges.
    type Group = (Key, Ann, Vec<(usize, usize)>);
    let mut groups: Vec<Group> = Vec::new();
    let mut index: std::collections::HashMap<Key, usize> = std::collections::HashMap::new();
    for a in annotations {
        let key: Key = (
            a.kind,
            a.link.clone().unwrap_or_default(),
            a.attributes
                .as_ref()
                .map(|m| serde_json::to_string(m).unwrap_or_default())
                .unwrap_or_default(),
        );
        let g = match index.get(&key) {
            Some(&g) => g,
            None => {
                index.insert(key.clone(), groups.len());
                groups.push((key, a.clone(), Vec::new()));
                groups.len() - 1
            }
        };
        if a.end > a.start {
            groups[g].2.push((a.start, a.end));
        }
    }
    let mut out = Vec::new();
    for (_, proto, mut ranges) in groups {
        ranges.sort();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (s, e) in ranges {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        for (s, e) in merged {
            out.push(Ann {
                start: s,
                end: e,
                ..proto.clone()
            });
        }
    }
    out.sort_by(|a, b| {
        a.start
            .cmp(&b.start)
            .then(b.end.cmp(&a.end))
            .then_with(|| locale_compare(a.kind, b.kind))
    });
    out
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

/// `\s*-->\s*$` from `q`.
fn arrow_to_end(s: &[u16], q: usize) -> bool {
    let r = skip_spaces(s, q);
    starts_with_at(s, r, "-->") && s[r + 3..].iter().all(|&c| is_space(c))
}

/// After the id (and type): `(?:\s+attrs:(\{.*\}))?\s*-->\s*$` from `q`,
/// with the attrs group when it takes part.
fn attrs_then_end(s: &[u16], q: usize) -> Option<Option<(usize, usize)>> {
    let w = skip_spaces(s, q);
    if w > q && starts_with_at(s, w, "attrs:{") {
        let brace = w + 6;
        let limit = (brace + 1..s.len())
            .find(|&k| is_line_terminator(s[k]))
            .unwrap_or(s.len());
        for k in (brace + 1..limit).rev() {
            if at(s, k) == b'}' && arrow_to_end(s, k + 1) {
                return Some(Some((brace, k + 1)));
            }
        }
    }
    arrow_to_end(s, q).then_some(None)
}

/// COMMENT_BODY followed by `\s*$`, starting exactly at `p`, explored in the
/// order a backtracking regex explores it.
fn comment_body_to_end(s: &[u16], p: usize) -> Option<CommentCaps> {
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
                if let Some(attrs) = attrs_then_end(s, t_end) {
                    return Some(CommentCaps {
                        id: (id0, id_end),
                        kind: Some((t0, t_end)),
                        attrs,
                    });
                }
            }
        }
        if let Some(attrs) = attrs_then_end(s, id_end) {
            return Some(CommentCaps {
                id: (id0, id_end),
                kind: None,
                attrs,
            });
        }
    }
    None
}

/// Whether `s` ends with `-->` and white space (every comment regex that
/// runs to the end needs it).
fn ends_with_arrow(s: &[u16]) -> bool {
    let t = trim(s);
    t.len() >= 3 && starts_with_at(t, t.len() - 3, "-->")
}

/// TRAILING_COMMENT_RE: ` ?<!--…-->\s*$` anywhere; the match's index.
fn match_trailing_comment(s: &[u16]) -> Option<(usize, CommentCaps)> {
    if !ends_with_arrow(s) {
        return None;
    }
    for p in 0..s.len() {
        if at(s, p) == b' ' {
            if let Some(c) = comment_body_to_end(s, p + 1) {
                return Some((p, c));
            }
        } else if at(s, p) == b'<' {
            if let Some(c) = comment_body_to_end(s, p) {
                return Some((p, c));
            }
        }
    }
    None
}

/// STANDALONE_COMMENT_RE: the whole line is the comment.
fn match_standalone_comment(s: &[u16]) -> Option<CommentCaps> {
    if !ends_with_arrow(s) {
        return None;
    }
    comment_body_to_end(s, skip_spaces(s, 0))
}

/// END_RE: `^\s*<!--\s*end:(id)\s*-->\s*$`.
fn match_end_comment(s: &[u16]) -> Option<String> {
    if !ends_with_arrow(s) {
        return None;
    }
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
        .find(|&e| arrow_to_end(s, e))
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
                let mut k = brace + 1;
                while k < s.len() && !is_line_terminator(s[k]) {
                    if at(s, k) == b'}' {
                        let r = skip_spaces(s, k + 1);
                        if starts_with_at(s, r, "-->") {
                            return Some(ColMatch {
                                range: (p, r + 3),
                                id: id(),
                                attrs: Some((brace, k + 1)),
                            });
                        }
                    }
                    k += 1;
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
        let mut children: Vec<BlockNode> = column_ids
            .iter()
            .enumerate()
            .map(|(idx, id)| {
                let mut block = Block::new("TableColumn", id.clone());
                if let Some(attrs) = header_cells.get(idx).and_then(|c| c.col_attrs.as_ref()) {
                    if !attrs.is_empty() {
                        block.attributes = Some(attrs.clone());
                    }
                }
                leaf(block)
            })
            .collect();
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
        let children = node.children.into_iter().map(|c| self.add(c)).collect();
        self.arena.push(ArenaNode {
            block: node.block,
            children,
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
            Some(n) => self.arena[n].children.len(),
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
                            && self.arena[p].children.is_empty()
                            && b.children_type.as_deref().is_none_or(str::is_empty)
                    });
                    let target = match prev.filter(|_| can_nest) {
                        Some(p) => p,
                        None => {
                            let id = self.gen_id();
                            self.arena.push(ArenaNode {
                                block: Block::new("Paragraph", id),
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
    /// children and no type (tables and rows excepted).
    fn into_tree(mut self) -> Vec<BlockNode> {
        let root = std::mem::take(&mut self.root);
        root.into_iter().map(|n| self.take_node(n)).collect()
    }

    fn take_node(&mut self, n: usize) -> BlockNode {
        let children_ids = std::mem::take(&mut self.arena[n].children);
        let mut block = std::mem::replace(&mut self.arena[n].block, Block::new("", String::new()));
        if !children_ids.is_empty()
            && block.children_type.as_deref().is_none_or(str::is_empty)
            && block.kind != "Table"
            && block.kind != "TableRow"
        {
            block.children_type = Some("Group".into());
        }
        let children = children_ids
            .into_iter()
            .map(|c| self.take_node(c))
            .collect();
        BlockNode { block, children }
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
    let mut own: Vec<(String, Option<Js>)> = Vec::new();
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
        set_own(&mut own, key, Some(value));
    }
    let get = |own: &Vec<(String, Option<Js>)>, key: &str| -> Option<Js> {
        match own.iter().find(|(k, _)| k == key) {
            Some((_, v)) => v.clone(),
            None => proto
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone()),
        }
    };
    if get(&own, "name").is_none() {
        if let Some(title) = title.filter(|t| !matches!(t, Js::Null)) {
            set_own(&mut own, "name".into(), Some(coerce_string(&title)));
        }
    }
    for key in METADATA_STRING_KEYS {
        if let Some(v) = get(&own, key) {
            if !matches!(v, Js::Str(_)) {
                let coerced = match v {
                    Js::Null => None,
                    v => Some(coerce_string(&v)),
                };
                set_own(&mut own, key.into(), coerced);
            }
        }
    }
    for key in METADATA_BOOLEAN_KEYS {
        if let Some(v) = get(&own, key) {
            if !matches!(v, Js::Bool(_)) {
                set_own(&mut own, key.into(), Some(Js::Bool(v.truthy())));
            }
        }
    }
    js_key_order(own)
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

fn set_own(own: &mut Vec<(String, Option<Js>)>, key: String, value: Option<Js>) {
    match own.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => own.push((key, value)),
    }
}

// ─── YAML, as the `yaml` package reads it ───────────────────────────────────

/// The `yaml` package's `maxAliasCount`.
const MAX_ALIAS_COUNT: u64 = 100;
/// How deep YAML collections nest before the frontmatter counts as invalid.
const MAX_YAML_DEPTH: usize = 500;

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
    let mut chars: Option<Vec<char>> = None;
    for _ in 0..=MAX_TAB_RETRIES {
        let text: String = match &chars {
            Some(c) => c.iter().collect(),
            None => src.to_owned(),
        };
        let mut parser = Parser::new_from_str(&text);
        let mut events = Vec::new();
        let error = loop {
            match parser.next_token() {
                Ok((Event::StreamEnd, _)) => return Ok(events),
                Ok((Event::Scalar(value, style, anchor, tag), mark)) => {
                    let value =
                        empty_block_scalar_at_end(&text, mark.index(), &style).unwrap_or(value);
                    events.push(Event::Scalar(value, style, anchor, tag));
                }
                Ok((event, _)) => events.push(event),
                Err(e) => break e,
            }
        };
        if error.info() != "':' must be followed by a valid YAML whitespace" {
            return Err(());
        }
        let c = chars.get_or_insert_with(|| src.chars().collect());
        let mut j = error.marker().index().min(c.len());
        let mut patched = false;
        while j > 0 && matches!(c[j - 1], ' ' | '\t') {
            if c[j - 1] == '\t' {
                c[j - 1] = ' ';
                patched = true;
            }
            j -= 1;
        }
        if !patched || j == 0 || c[j - 1] != ':' {
            return Err(());
        }
    }
    Err(())
}

/// A block scalar with no content that runs to the end of the YAML:
/// yaml-rust2 reads it as one line break whatever its chomping, where the
/// `yaml` package reads `""`, or with `+` (keep) the line breaks after
/// the header (one at least when anything follows it). `at` is the scalar's mark (a character index), which
/// for such a scalar is its `|` or `>` indicator.
fn empty_block_scalar_at_end(src: &str, at: usize, style: &TScalarStyle) -> Option<String> {
    if !matches!(style, TScalarStyle::Literal | TScalarStyle::Folded) {
        return None;
    }
    let (offset, indicator) = src.char_indices().nth(at)?;
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
    ('\u{e000}'..='\u{f8ff}').find(|&c| !src.contains(c))
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
    // Open collections: the node and, for a map, the key waiting for its
    // value.
    let mut open: Vec<(usize, Option<usize>)> = Vec::new();
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
                open.push((n, None));
                if open.len() > MAX_YAML_DEPTH {
                    return Err(());
                }
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match open.pop() {
                Some((n, _)) => n,
                None => return Err(()),
            },
        };
        match open.last_mut() {
            None => root = Some(node),
            Some((parent, pending)) => {
                let parent = *parent;
                match pending.take() {
                    Some(key) => {
                        if let YNode::Map(pairs) = &mut c.nodes[parent] {
                            pairs.push((key, node));
                        }
                    }
                    None if matches!(c.nodes[parent], YNode::Map(_)) => {
                        if c.has_key(parent, node) {
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
    };
    conv.convert(root, 0)
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

    /// Whether map `map` already has `key` (`uniqueKeys`: scalar values
    /// compared with `===`).
    fn has_key(&self, map: usize, key: usize) -> bool {
        let YNode::Map(pairs) = &self.nodes[map] else {
            return false;
        };
        let YNode::Scalar(k) = &self.nodes[key] else {
            return false;
        };
        pairs.iter().any(|&(other, _)| match &self.nodes[other] {
            YNode::Scalar(o) => match (k, o) {
                (Scalar::Null, Scalar::Null) => true,
                (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
                (Scalar::Num(a), Scalar::Num(b)) => a == b,
                (Scalar::Str(a), Scalar::Str(b)) => a == b,
                _ => false,
            },
            _ => false,
        })
    }
}

struct AnchorData {
    count: u64,
    alias_count: u64,
    res: Option<Js>,
}

struct ToJs<'c> {
    c: &'c Composer,
    data: std::collections::HashMap<usize, AnchorData>,
}

impl ToJs<'_> {
    fn convert(&mut self, n: usize, depth: usize) -> Result<Js, ()> {
        if depth > MAX_YAML_DEPTH {
            return Err(());
        }
        if let YNode::Alias(target) = self.c.nodes[n] {
            let alias_count = if self.data.get(&target).is_some_and(|d| d.alias_count == 0) {
                Some(self.alias_count(target))
            } else {
                None
            };
            let data = self.data.get_mut(&target).ok_or(())?;
            let res = data.res.clone().ok_or(())?;
            data.count += 1;
            if let Some(a) = alias_count {
                data.alias_count = a;
            }
            if data.count.saturating_mul(data.alias_count) > MAX_ALIAS_COUNT {
                return Err(()); // "Excessive alias count …"
            }
            return Ok(res);
        }
        if self.c.anchored[n] {
            self.data.insert(
                n,
                AnchorData {
                    count: 1,
                    alias_count: 0,
                    res: None,
                },
            );
        }
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
                    out.push(self.convert(item, depth + 1)?);
                }
                Js::Arr(out)
            }
            YNode::Map(pairs) => {
                let mut out: Vec<(String, Js)> = Vec::new();
                for &(k, v) in pairs {
                    let key = self.convert(k, depth + 1)?;
                    let key = self.string_key(k, &key);
                    let value = self.convert(v, depth + 1)?;
                    match out.iter_mut().find(|(existing, _)| *existing == key) {
                        Some(slot) => slot.1 = value,
                        None => out.push((key, value)),
                    }
                }
                Js::Obj(js_key_order(out))
            }
            YNode::Alias(_) => return Err(()),
        };
        if let Some(d) = self.data.get_mut(&n) {
            d.res = Some(value.clone());
        }
        Ok(value)
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
}
