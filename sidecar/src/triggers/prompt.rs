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

// ─── JavaScript semantics ───────────────────────────────────────────────────

/// White space as JavaScript's `trim` and `\s` know it: Unicode's spaces and
/// line terminators and the byte-order mark, but not NEL (U+0085).
fn is_js_space(c: char) -> bool {
    const OTHERS: [char; 8] = [
        '\u{a0}', '\u{1680}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}',
        '\u{feff}',
    ];
    matches!(c, '\t'..='\r' | ' ' | '\u{2000}'..='\u{200a}') || OTHERS.contains(&c)
}

fn is_js_space_unit(unit: u16) -> bool {
    char::from_u32(u32::from(unit)).is_some_and(is_js_space)
}

/// What a regex `.` doesn't match.
fn is_line_terminator(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

fn js_trim(text: &str) -> &str {
    text.trim_matches(is_js_space)
}

fn js_trim_start(text: &str) -> &str {
    text.trim_start_matches(is_js_space)
}

fn js_trim_end(text: &str) -> &str {
    text.trim_end_matches(is_js_space)
}

/// Whether JavaScript would take the value (absent = `undefined`) as true.
fn js_truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(_) | Value::Object(_)) => true,
    }
}

/// `String(value)`, with an absent value being `undefined`.
fn js_display(value: Option<&Value>) -> String {
    value.map_or_else(|| "undefined".to_owned(), |v| js_string(v, 0))
}

/// `value || ''` as a template literal prints it.
fn js_or_empty(value: Option<&Value>) -> String {
    if js_truthy(value) {
        js_display(value)
    } else {
        String::new()
    }
}

/// `String(value)` for JSON. Arrays nested deeper than `MAX_NESTING` print
/// as nothing.
fn js_string(value: &Value, depth: usize) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), js_number),
        Value::String(s) => s.clone(),
        Value::Array(items) if depth < MAX_NESTING => items
            .iter()
            .map(|item| match item {
                Value::Null => String::new(),
                item => js_string(item, depth + 1),
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Array(_) => String::new(),
        Value::Object(_) => "[object Object]".to_owned(),
    }
}

/// `Number.prototype.toString()`: the shortest round-trip digits, written
/// out between 1e-7 and 1e21 and in exponent form beyond.
fn js_number(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value == 0.0 {
        return "0".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if value < 0.0 {
        return format!("-{}", js_number(-value));
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let count = digits.len() as i64;
    let point = exponent.parse::<i64>().unwrap_or(0) + 1;
    if count <= point && point <= 21 {
        format!("{digits}{}", "0".repeat((point - count) as usize))
    } else if 0 < point && point <= 21 {
        let (whole, fraction) = digits
            .split_at_checked(point as usize)
            .unwrap_or((&digits, ""));
        format!("{whole}.{fraction}")
    } else if -6 < point && point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else {
        let (first, rest) = digits.split_at_checked(1).unwrap_or((&digits, ""));
        let sign = if point > 0 { '+' } else { '-' };
        let exponent = (point - 1).unsigned_abs();
        if rest.is_empty() {
            format!("{first}e{sign}{exponent}")
        } else {
            format!("{first}.{rest}e{sign}{exponent}")
        }
    }
}

/// `text.slice(start, end)` on UTF-16 units: positions are truncated toward
/// zero, negative ones count from the end, and everything is clamped.
fn js_slice(units: &[u16], start: f64, end: f64) -> &[u16] {
    let index = |position: f64| {
        let length = units.len() as f64;
        let position = if position.is_nan() {
            0.0
        } else {
            position.trunc()
        };
        let position = if position < 0.0 {
            (length + position).max(0.0)
        } else {
            position.min(length)
        };
        position as usize
    };
    units.get(index(start)..index(end)).unwrap_or_default()
}

// ─── Markdown → blocks: frontmatter ─────────────────────────────────────────

/// The markdown without its frontmatter, as [`from_markdown`] describes.
fn without_frontmatter(markdown: &str) -> &str {
    let Some(after_fence) = js_trim_start(markdown).strip_prefix("---") else {
        return markdown;
    };
    match after_fence.split_once("\n---") {
        Some((yaml, rest)) if looks_like_mapping(js_trim(yaml)) => rest,
        _ => markdown,
    }
}

/// Whether frontmatter text reads as a plain YAML mapping the reference's
/// parser would accept: empty, or lines that are blank, `#` comments,
/// indented (under a key), or `key: value` / `key:` with a distinct key of
/// letters, digits, `_`, `-` and `.`, and a value that is a closed quoted
/// string, a closed `[..]` / `{..}`, or plain text without `": "`.
fn looks_like_mapping(yaml: &str) -> bool {
    let mut keys: Vec<&str> = Vec::new();
    for line in yaml.split('\n') {
        let line = js_trim_end(line);
        if line.is_empty() || js_trim_start(line).starts_with('#') {
            continue;
        }
        if line.starts_with(' ') {
            if keys.is_empty() {
                return false;
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return false;
        };
        let plain_key = key.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !plain_key || keys.contains(&key) {
            return false;
        }
        if !(value.is_empty() || value.starts_with([' ', '\t']))
            || !plausible_yaml_value(js_trim(value))
        {
            return false;
        }
        keys.push(key);
    }
    true
}

fn plausible_yaml_value(value: &str) -> bool {
    let closed = |open: char, close: char| {
        value
            .strip_prefix(open)
            .is_some_and(|rest| rest.ends_with(close))
    };
    match value.chars().next() {
        None => true,
        Some('"') => closed('"', '"'),
        Some('\'') => closed('\'', '\''),
        Some('[') => closed('[', ']'),
        Some('{') => closed('{', '}'),
        Some('@' | '`' | '%' | '*') => false,
        Some(_) => !value.contains(": "),
    }
}

// ─── Markdown → blocks: lines into tokens ───────────────────────────────────

/// A block of markdown as the line tokenizer sees it; texts are still raw.
enum Token<'a> {
    Heading {
        level: usize,
        text: &'a str,
        id: Option<&'a str>,
    },
    Paragraph {
        text: String,
        id: Option<&'a str>,
    },
    Code {
        language: &'a str,
        text: String,
        id: Option<&'a str>,
    },
    Math {
        text: String,
        id: Option<&'a str>,
    },
    Image {
        alt: &'a str,
        url: String,
        id: Option<&'a str>,
    },
    List {
        list_type: &'static str,
        items: Vec<ListItem<'a>>,
        container_id: Option<&'a str>,
    },
    Table {
        lines: Vec<&'a str>,
        container_id: Option<&'a str>,
    },
}

/// A list item's raw text and explicit id.
type ListItem<'a> = (&'a str, Option<&'a str>);

/// The reference's `tokenize`: one pass over `\n`-separated lines (a `\r`
/// stays in the text). Blank lines only separate; a line holding nothing but
/// an id comment names the next list or table (any other block forgets it).
fn tokenize(content: &str) -> Vec<Token<'_>> {
    let lines: Vec<&str> = content.split('\n').collect();
    let mut tokens = Vec::new();
    let mut pending_container = None;
    let mut i = 0;
    while let Some(&line) = lines.get(i) {
        let trimmed = js_trim(line);
        if trimmed.is_empty() {
            i += 1;
            continue;
        }
        if let Some(id) = standalone_id(line) {
            pending_container = Some(id);
            i += 1;
            continue;
        }
        let container_id = pending_container.take();
        let rest = lines.get(i..).unwrap_or_default();
        let (token, consumed) = if let Some(info) = trimmed.strip_prefix("```") {
            let (language, id) = strip_block_id(js_trim(info));
            let (text, consumed) = fenced(rest, "```");
            (Token::Code { language, text, id }, consumed)
        } else if let Some(info) = trimmed.strip_prefix("$$") {
            let (_, id) = strip_block_id(js_trim(info));
            let (text, consumed) = fenced(rest, "$$");
            (Token::Math { text, id }, consumed)
        } else if let Some((level, text)) = heading(trimmed) {
            let (text, id) = strip_block_id(text);
            (Token::Heading { level, text, id }, 1)
        } else if let Some(image) =
            image_line(trimmed).filter(|image| !image.trailing.contains(is_line_terminator))
        {
            let (_, id) = strip_block_id(image.trailing);
            (
                Token::Image {
                    alt: image.alt,
                    url: image_url(image.url),
                    id,
                },
                1,
            )
        } else if trimmed.starts_with('|') {
            let lines: Vec<&str> = rest
                .iter()
                .copied()
                .take_while(|l| js_trim(l).starts_with('|'))
                .collect();
            let consumed = lines.len();
            (
                Token::Table {
                    lines,
                    container_id,
                },
                consumed,
            )
        } else if let Some((list_type, _)) = list_item(trimmed) {
            let items: Vec<ListItem> = rest
                .iter()
                .map_while(|l| list_item(js_trim(l)).filter(|(kind, _)| *kind == list_type))
                .map(|(_, item)| strip_block_id(item))
                .collect();
            let consumed = items.len();
            (
                Token::List {
                    list_type,
                    items,
                    container_id,
                },
                consumed,
            )
        } else {
            let mut paragraph: Vec<&str> = rest
                .iter()
                .copied()
                .take_while(|l| continues_paragraph(l))
                .map(js_trim_start)
                .collect();
            if paragraph.is_empty() {
                // A line that looked special (`#tag`, `####### x`) but made no block.
                paragraph.push(js_trim_start(line));
            }
            let consumed = paragraph.len();
            let (first, id) = paragraph
                .first()
                .map_or(("", None), |first| strip_block_id(first));
            let text = std::iter::once(first)
                .chain(paragraph.iter().skip(1).copied())
                .collect::<Vec<_>>()
                .join("\n");
            (Token::Paragraph { text, id }, consumed)
        };
        tokens.push(token);
        i += consumed.max(1);
    }
    tokens
}

/// The lines after a fence opener up to the next line starting with `fence`
/// (or the end), kept verbatim, and how many lines the block takes.
fn fenced(lines: &[&str], fence: &str) -> (String, usize) {
    let body: Vec<&str> = lines
        .iter()
        .skip(1)
        .copied()
        .take_while(|l| !js_trim(l).starts_with(fence))
        .collect();
    let consumed = body.len() + 2;
    (body.join("\n"), consumed)
}

/// `/^(#{1,6})\s+(.+)$/` on a trimmed line: the level and the text.
fn heading(trimmed: &str) -> Option<(usize, &str)> {
    let level = trimmed.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let after = trimmed.get(level..)?;
    if !after.starts_with(is_js_space) {
        return None;
    }
    let text = js_trim_start(after);
    (!text.is_empty() && !text.contains(is_line_terminator)).then_some((level, text))
}

/// A line starting `![alt](url)`.
struct ImageLine<'a> {
    alt: &'a str,
    url: &'a str,
    trailing: &'a str,
}

/// `/^!\[([^\]]*)\]\(([^)]+)\)/` on a trimmed line.
fn image_line(trimmed: &str) -> Option<ImageLine<'_>> {
    let (alt, rest) = trimmed.strip_prefix("![")?.split_once(']')?;
    let (url, trailing) = rest.strip_prefix('(')?.split_once(')')?;
    (!url.is_empty()).then_some(ImageLine { alt, url, trailing })
}

/// An image url as stored: `file://` unless it names a scheme.
fn image_url(url: &str) -> String {
    let scheme = url
        .find("://")
        .and_then(|end| url.get(..end))
        .is_some_and(|scheme| {
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
        });
    if scheme {
        url.to_owned()
    } else {
        format!("file://{url}")
    }
}

/// `/^[-*+]\s+/` or `/^\d+\.\s+/` on a trimmed line: the list type and the
/// item text after the marker.
fn list_item(trimmed: &str) -> Option<(&'static str, &str)> {
    let (list_type, rest) = match trimmed.strip_prefix(['-', '*', '+']) {
        Some(rest) => ("Unordered", rest),
        None => {
            let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            ("Ordered", trimmed.get(digits..)?.strip_prefix('.')?)
        }
    };
    rest.starts_with(is_js_space)
        .then(|| (list_type, js_trim_start(rest)))
}

/// Whether a line joins the paragraph being collected.
fn continues_paragraph(line: &str) -> bool {
    let trimmed = js_trim(line);
    !trimmed.is_empty()
        && !trimmed.starts_with("```")
        && !trimmed.starts_with("$$")
        && !trimmed.starts_with(['#', '|'])
        && standalone_id(line).is_none()
        && image_line(trimmed).is_none()
        && list_item(trimmed).is_none()
}

// ─── Markdown → blocks: id comments ─────────────────────────────────────────

/// `<!--\s*KEY([A-Za-z0-9_-]+)\s*-->` at the start of `text`, matched the way
/// a backtracking regex does: the id and the length of the match.
fn comment_at<'a>(text: &'a str, key: &str) -> Option<(&'a str, usize)> {
    let body = js_trim_start(text.strip_prefix("<!--")?).strip_prefix(key)?;
    let run = body
        .bytes()
        .take_while(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        .count();
    let (ids, after) = body.split_at_checked(run)?;
    // The greedy id may have taken the dashes of `-->`; give them back.
    for (given_back, closing) in ["-->", "->", ">"].into_iter().enumerate() {
        let Some(length) = run.checked_sub(given_back).filter(|&n| n > 0) else {
            break;
        };
        let (id, dashes) = ids.split_at_checked(length)?;
        if !dashes.bytes().all(|b| b == b'-') {
            break;
        }
        let rest = if given_back == 0 {
            js_trim_start(after)
        } else {
            after
        };
        if let Some(tail) = rest.strip_prefix(closing) {
            return Some((id, text.len() - tail.len()));
        }
    }
    None
}

/// The first `<!-- KEYid -->` comment anywhere in `text`: the id and where
/// the comment is.
fn find_comment<'a>(text: &'a str, key: &str) -> Option<(&'a str, Range<usize>)> {
    text.match_indices("<!--").find_map(|(at, _)| {
        let (id, length) = comment_at(text.get(at..)?, key)?;
        Some((id, at..at + length))
    })
}

/// A trailing `<!-- id:X -->` split off: the text before it (end-trimmed)
/// and the id. The comment can't contain `<`, so it starts at the last one.
fn strip_block_id(text: &str) -> (&str, Option<&str>) {
    let found = text.rfind('<').and_then(|at| {
        let (before, comment) = text.split_at_checked(at)?;
        let (id, length) = comment_at(comment, "id:")?;
        js_trim(comment.get(length..)?)
            .is_empty()
            .then_some((before, id))
    });
    match found {
        Some((before, id)) => (js_trim_end(before), Some(id)),
        None => (text, None),
    }
}

/// The id of a line that holds nothing but an id comment.
fn standalone_id(line: &str) -> Option<&str> {
    let text = js_trim_start(line);
    let (id, length) = comment_at(text, "id:")?;
    js_trim(text.get(length..)?).is_empty().then_some(id)
}

// ─── Markdown → blocks: the tree ────────────────────────────────────────────

/// A parsed block, before it becomes JSON.
#[derive(Default)]
struct Block {
    kind: &'static str,
    id: String,
    text: String,
    annotations: Vec<Annotation>,
    children_type: Option<&'static str>,
    language: Option<String>,
    link: Option<String>,
    attributes: Vec<(&'static str, Value)>,
}

/// A parsed annotation: always one range, in UTF-16 units.
struct Annotation {
    kind: &'static str,
    start: usize,
    end: usize,
    link: Option<String>,
}

impl Block {
    fn new(kind: &'static str, id: Option<&str>) -> Self {
        let id = id.map_or_else(generate_id, str::to_owned);
        Block {
            kind,
            id,
            ..Block::default()
        }
    }

    fn with_inline(mut self, raw: &str) -> Self {
        let (text, annotations) = parse_inline(raw);
        self.text = text;
        self.annotations = annotations;
        self
    }

    /// The `block` of an HM block node, keys inserted in the reference's
    /// order (which serde_json keeps only with its `preserve_order` feature).
    fn to_value(&self) -> Value {
        let annotations = self
            .annotations
            .iter()
            .map(|a| {
                let mut annotation = Map::new();
                annotation.insert("type".into(), a.kind.into());
                annotation.insert("starts".into(), Value::from(vec![a.start]));
                annotation.insert("ends".into(), Value::from(vec![a.end]));
                if let Some(link) = &a.link {
                    annotation.insert("link".into(), link.as_str().into());
                }
                Value::Object(annotation)
            })
            .collect();
        let mut attributes: Map<String, Value> = self
            .attributes
            .iter()
            .map(|(key, value)| ((*key).to_owned(), value.clone()))
            .collect();
        if let Some(children_type) = self.children_type {
            attributes.insert("childrenType".into(), children_type.into());
        }
        if let Some(language) = &self.language {
            attributes.insert("language".into(), language.as_str().into());
        }
        let mut block = Map::new();
        block.insert("type".into(), self.kind.into());
        block.insert("id".into(), self.id.as_str().into());
        block.insert("text".into(), self.text.as_str().into());
        block.insert("annotations".into(), Value::Array(annotations));
        block.insert("attributes".into(), Value::Object(attributes));
        if let Some(link) = &self.link {
            block.insert("link".into(), link.as_str().into());
        }
        Value::Object(block)
    }
}

/// 8 random characters from the reference's id alphabet.
fn generate_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    let mut rng = rand::thread_rng();
    (0..8)
        .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
        .collect()
}

fn paragraph(raw: &str, id: Option<&str>) -> Block {
    Block::new("Paragraph", id).with_inline(raw)
}

/// An invisible paragraph holding list items.
fn list_container(list_type: &'static str, id: Option<&str>) -> Block {
    let mut container = Block::new("Paragraph", id);
    container.children_type = Some(list_type);
    container
}

fn is_list_type(children_type: Option<&str>) -> bool {
    matches!(children_type, Some("Unordered" | "Ordered"))
}

struct TreeNode {
    block: Block,
    children: Vec<usize>,
}

/// The block tree being built: nodes in an arena, and the chain of open
/// headings that new content goes under.
#[derive(Default)]
struct Tree {
    nodes: Vec<TreeNode>,
    roots: Vec<usize>,
    headings: Vec<(usize, usize)>,
}

impl Tree {
    fn create(&mut self, block: Block, children: Vec<usize>) -> usize {
        self.nodes.push(TreeNode { block, children });
        self.nodes.len() - 1
    }

    /// The innermost open heading.
    fn parent(&self) -> Option<usize> {
        self.headings.last().map(|&(_, node)| node)
    }

    fn children_of(&self, parent: Option<usize>) -> &[usize] {
        match parent.and_then(|p| self.nodes.get(p)) {
            Some(node) => &node.children,
            None => &self.roots,
        }
    }

    /// `addToCurrentParent`.
    fn add(&mut self, node: usize) {
        self.unmerge_heading_list();
        match self.parent().and_then(|p| self.nodes.get_mut(p)) {
            Some(parent) => parent.children.push(node),
            None => self.roots.push(node),
        }
    }

    /// A heading whose list items were merged into it gets other content:
    /// the items move into a list container and the heading is a group again.
    fn unmerge_heading_list(&mut self) {
        let Some(parent) = self.parent() else { return };
        let Some(node) = self.nodes.get_mut(parent) else {
            return;
        };
        let list_type = match node.block.children_type {
            Some(list_type @ ("Unordered" | "Ordered")) if node.block.kind == "Heading" => {
                list_type
            }
            _ => return,
        };
        node.block.children_type = Some("Group");
        let items = std::mem::take(&mut node.children);
        let container = self.create(list_container(list_type, None), items);
        if let Some(node) = self.nodes.get_mut(parent) {
            node.children = vec![container];
        }
    }

    /// `findListTarget`: the previous sibling when it is a childless text
    /// paragraph, the enclosing heading when the list is its first content.
    fn list_target(&self) -> Option<usize> {
        let parent = self.parent();
        if parent
            .and_then(|p| self.nodes.get(p))
            .is_some_and(|p| is_list_type(p.block.children_type))
        {
            return None;
        }
        match self.children_of(parent).last() {
            Some(&previous) => self
                .nodes
                .get(previous)
                .filter(|node| {
                    node.block.kind == "Paragraph"
                        && !node.block.text.is_empty()
                        && node.children.is_empty()
                        && node.block.children_type.is_none()
                })
                .map(|_| previous),
            None => parent,
        }
    }

    fn list(&mut self, items: &[ListItem], list_type: &'static str, container_id: Option<&str>) {
        let items: Vec<usize> = items
            .iter()
            .map(|&(text, id)| self.create(paragraph(text, id), Vec::new()))
            .collect();
        if container_id.is_none() {
            if let Some(target) = self.list_target().and_then(|t| self.nodes.get_mut(t)) {
                target.block.children_type = Some(list_type);
                target.children.extend(items);
                return;
            }
        }
        let container = self.create(list_container(list_type, container_id), items);
        self.add(container);
    }

    fn heading(&mut self, level: usize, text: &str, id: Option<&str>) {
        let mut heading = Block::new("Heading", id).with_inline(text);
        heading.children_type = Some("Group");
        let node = self.create(heading, Vec::new());
        while self.headings.last().is_some_and(|&(open, _)| open >= level) {
            self.headings.pop();
        }
        self.add(node);
        self.headings.push((level, node));
    }

    fn into_values(self) -> Vec<Value> {
        self.values(&self.roots)
    }

    /// HM block nodes; the tree is at most a few levels deep (six heading
    /// levels, a list, a table), so recursion is fine.
    fn values(&self, nodes: &[usize]) -> Vec<Value> {
        nodes
            .iter()
            .filter_map(|&n| self.nodes.get(n))
            .map(|node| {
                let mut value = Map::new();
                value.insert("block".into(), node.block.to_value());
                if !node.children.is_empty() {
                    value.insert("children".into(), Value::Array(self.values(&node.children)));
                }
                Value::Object(value)
            })
            .collect()
    }
}

// ─── Markdown → blocks: tables ──────────────────────────────────────────────

struct SourceRow {
    cells: Vec<SourceCell>,
    id: Option<String>,
}

struct SourceCell {
    text: String,
    column_id: Option<String>,
}

/// A table line split on unescaped `|`. A row id may sit in any cell (or
/// after the last pipe); column ids sit in header cells.
fn split_table_row(line: &str) -> SourceRow {
    let (text, after_pipe_id) = strip_block_id(js_trim(line));
    let text = js_trim(text);
    let text = text.strip_prefix('|').unwrap_or(text);
    let mut raw_cells = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                current.push('|');
            }
            '|' => {
                raw_cells.push(js_trim(&current).to_owned());
                current.clear();
            }
            c => current.push(c),
        }
    }
    let last = js_trim(&current);
    if !last.is_empty() || raw_cells.is_empty() {
        raw_cells.push(last.to_owned());
    }
    let mut id = after_pipe_id.map(str::to_owned);
    let cells = raw_cells
        .into_iter()
        .map(|mut cell| {
            if let Some((row_id, at)) = find_comment(&cell, "id:").map(|(i, at)| (i.to_owned(), at))
            {
                id = Some(row_id);
                cell.replace_range(at, "");
            }
            let mut column_id = None;
            if let Some((col, at)) = find_comment(&cell, "col:").map(|(c, at)| (c.to_owned(), at)) {
                column_id = Some(col);
                cell.replace_range(at, "");
            }
            SourceCell {
                text: js_trim(&cell).to_owned(),
                column_id,
            }
        })
        .collect();
    SourceRow { cells, id }
}

/// A GFM delimiter row: every cell `/^:?-+:?$/`.
fn is_separator_row(row: &SourceRow) -> bool {
    !row.cells.is_empty()
        && row.cells.iter().all(|cell| {
            let text = cell.text.strip_prefix(':').unwrap_or(&cell.text);
            let text = text.strip_suffix(':').unwrap_or(text);
            !text.is_empty() && text.bytes().all(|b| b == b'-')
        })
}

/// A Table node: TableColumn children, then TableRows whose cells are
/// paragraphs naming their column. The header row counts only when some
/// header cell has text.
fn table(tree: &mut Tree, lines: &[&str], container_id: Option<&str>) -> usize {
    let rows: Vec<SourceRow> = lines.iter().map(|line| split_table_row(line)).collect();
    let has_delimiter = rows.get(1).is_some_and(is_separator_row);
    let (header, body_rows) = match rows.split_first() {
        Some((first, rest)) if has_delimiter => (Some(first), rest.get(1..).unwrap_or_default()),
        _ => (None, rows.as_slice()),
    };
    let body: Vec<&SourceRow> = body_rows
        .iter()
        .filter(|row| !is_separator_row(row))
        .collect();
    let header_cells = header.map_or(&[][..], |row| row.cells.as_slice());
    let column_count = body
        .iter()
        .map(|row| row.cells.len())
        .fold(header_cells.len(), usize::max);
    let column_ids: Vec<String> = (0..column_count)
        .map(|i| {
            header_cells
                .get(i)
                .and_then(|cell| cell.column_id.clone())
                .unwrap_or_else(generate_id)
        })
        .collect();
    let header = header.filter(|_| header_cells.iter().any(|cell| !cell.text.is_empty()));
    let grid = column_count.saturating_mul(body.len() + usize::from(header.is_some()));
    let dense = grid <= MAX_TABLE_CELLS;

    let mut children: Vec<usize> = column_ids
        .iter()
        .map(|id| tree.create(Block::new("TableColumn", Some(id.as_str())), Vec::new()))
        .collect();
    let mut add_row = |tree: &mut Tree, row: &SourceRow, is_header: bool| {
        let width = if dense {
            column_ids.len()
        } else {
            row.cells.len()
        };
        let cells = column_ids
            .iter()
            .take(width)
            .enumerate()
            .map(|(i, column)| {
                let text = row.cells.get(i).map_or("", |cell| cell.text.as_str());
                let mut cell = paragraph(&replace_br(text), None);
                cell.attributes.push(("columnId", column.as_str().into()));
                tree.create(cell, Vec::new())
            })
            .collect();
        let mut block = Block::new("TableRow", row.id.as_deref());
        if is_header {
            block.attributes.push(("isHeader", true.into()));
        }
        children.push(tree.create(block, cells));
    };
    if let Some(header) = header {
        add_row(tree, header, true);
    }
    for row in body {
        add_row(tree, row, false);
    }
    tree.create(Block::new("Table", container_id), children)
}

/// `<br>`, `<br/>`, `<BR />`… as newlines.
fn replace_br(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((before, after)) = rest.split_once('<') {
        out.push_str(before);
        match after_br_tag(after) {
            Some(tail) => {
                out.push('\n');
                rest = tail;
            }
            None => {
                out.push('<');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The text after `br\s*\/?>` (case-insensitive), when `text` starts so.
fn after_br_tag(text: &str) -> Option<&str> {
    let rest = js_trim_start(text.strip_prefix(['b', 'B'])?.strip_prefix(['r', 'R'])?);
    rest.strip_prefix('/').unwrap_or(rest).strip_prefix('>')
}

// ─── Markdown → blocks: inline formatting ───────────────────────────────────

const BACKSLASH: u16 = b'\\' as u16;
const BANG: u16 = b'!' as u16;
const LESS: u16 = b'<' as u16;
const GREATER: u16 = b'>' as u16;
const OPEN_BRACKET: u16 = b'[' as u16;
const CLOSE_BRACKET: u16 = b']' as u16;
const OPEN_PAREN: u16 = b'(' as u16;
const CLOSE_PAREN: u16 = b')' as u16;
const STAR: u16 = b'*' as u16;
const BACKTICK: u16 = b'`' as u16;
const COLON: u16 = b':' as u16;

/// Where the inline delimiters of one text are, found in one pass so that
/// every lookup the scanner makes is a binary search. The scanner works on
/// nested spans of the text; a span sees the same delimiters as the whole
/// text, except that its end hides what lies beyond (see the lookups).
#[derive(Default)]
struct Delimiters {
    close_parens: Vec<usize>,
    greaters: Vec<usize>,
    backticks: Vec<usize>,
    /// `**` starts.
    double_stars: Vec<usize>,
    /// `*` with no `*` on either side.
    lone_stars: Vec<usize>,
    /// Each `[` and the `]` that balances it, by bracket counting.
    brackets: Vec<(usize, Option<usize>)>,
}

impl Delimiters {
    fn new(src: &[u16]) -> Self {
        let mut found = Delimiters::default();
        let mut open = Vec::new();
        for (i, &unit) in src.iter().enumerate() {
            let before = i.checked_sub(1).and_then(|j| src.get(j)).copied();
            let after = src.get(i + 1).copied();
            match unit {
                CLOSE_PAREN => found.close_parens.push(i),
                GREATER => found.greaters.push(i),
                BACKTICK => found.backticks.push(i),
                STAR => {
                    if after == Some(STAR) {
                        found.double_stars.push(i);
                    } else if before != Some(STAR) {
                        found.lone_stars.push(i);
                    }
                }
                OPEN_BRACKET => {
                    open.push(found.brackets.len());
                    found.brackets.push((i, None));
                }
                CLOSE_BRACKET => {
                    if let Some(entry) = open.pop().and_then(|k| found.brackets.get_mut(k)) {
                        entry.1 = Some(i);
                    }
                }
                _ => {}
            }
        }
        found
    }

    /// `findClosingBracket` from the `[` at `open`, within a span ending at `end`.
    fn closing_bracket(&self, open: usize, end: usize) -> Option<usize> {
        let k = self
            .brackets
            .binary_search_by_key(&open, |&(at, _)| at)
            .ok()?;
        self.brackets
            .get(k)
            .and_then(|&(_, close)| close)
            .filter(|&close| close < end)
    }

    /// `indexOf('**', from)` within a span ending at `end`.
    fn double_star(&self, from: usize, end: usize) -> Option<usize> {
        first_in(&self.double_stars, from, end.saturating_sub(1))
    }

    /// `findSingleDelimiter('*', from)` within a span ending at `end`: its
    /// last unit has nothing to its right inside the span.
    fn lone_star(&self, src: &[u16], from: usize, end: usize) -> Option<usize> {
        let last = end.checked_sub(1)?;
        first_in(&self.lone_stars, from, last).or_else(|| {
            let lone = last >= from
                && src.get(last) == Some(&STAR)
                && last.checked_sub(1).and_then(|j| src.get(j)) != Some(&STAR);
            lone.then_some(last)
        })
    }
}

/// The first of the sorted `positions` in `from..until`.
fn first_in(positions: &[usize], from: usize, until: usize) -> Option<usize> {
    let at = positions.partition_point(|&p| p < from);
    positions.get(at).copied().filter(|&p| p < until)
}

/// What the scanner makes of the text at one position.
enum Piece {
    /// Copied as is (an escaped unit, an inline image's alt text, or one unit).
    Literal(Range<usize>),
    /// `<scheme:…>`: the range inside the angle brackets.
    Autolink(Range<usize>),
    /// `` `code` ``: the range inside the backticks.
    Code(Range<usize>),
    /// Bold, italic or a link: its inner range is scanned in turn.
    Nested {
        kind: &'static str,
        inner: Range<usize>,
        link: Option<String>,
    },
}

/// A span of the source being scanned, and the annotation to close over it.
struct Span {
    pos: usize,
    end: usize,
    close: Option<Pending>,
}

/// An annotation whose end is not known yet.
struct Pending {
    kind: &'static str,
    start: usize,
    link: Option<String>,
}

/// The reference's `parseInlineFormatting`: the plain text and its
/// annotations (offsets in UTF-16 units; nested annotations come before the
/// one enclosing them). Nesting is followed with an explicit stack, so deeply
/// nested links cost no recursion.
fn parse_inline(raw: &str) -> (String, Vec<Annotation>) {
    let src: Vec<u16> = raw.encode_utf16().collect();
    let delimiters = Delimiters::new(&src);
    let mut text: Vec<u16> = Vec::with_capacity(src.len());
    let mut annotations = Vec::new();
    let mut spans = vec![Span {
        pos: 0,
        end: src.len(),
        close: None,
    }];
    while let Some(span) = spans.last_mut() {
        if span.pos >= span.end {
            if let Some(Pending { kind, start, link }) = spans.pop().and_then(|span| span.close) {
                annotations.push(Annotation {
                    kind,
                    start,
                    end: text.len(),
                    link,
                });
            }
            continue;
        }
        let (piece, resume) = scan(&src, &delimiters, span.pos, span.end);
        span.pos = resume;
        let units = |range: Range<usize>| src.get(range).unwrap_or_default();
        match piece {
            Piece::Literal(range) => text.extend_from_slice(units(range)),
            Piece::Code(range) => {
                let start = text.len();
                text.extend_from_slice(units(range));
                annotations.push(Annotation {
                    kind: "Code",
                    start,
                    end: text.len(),
                    link: None,
                });
            }
            Piece::Autolink(range) => {
                let inner = units(range);
                let link = String::from_utf16_lossy(inner);
                let start = text.len();
                let kind = if link.starts_with("hm://") {
                    text.extend(OBJECT_REPLACEMENT.encode_utf16(&mut [0; 2]).iter());
                    "Embed"
                } else {
                    text.extend_from_slice(inner);
                    "Link"
                };
                annotations.push(Annotation {
                    kind,
                    start,
                    end: text.len(),
                    link: Some(link),
                });
            }
            Piece::Nested { kind, inner, link } => spans.push(Span {
                pos: inner.start,
                end: inner.end,
                close: Some(Pending {
                    kind,
                    start: text.len(),
                    link,
                }),
            }),
        }
    }
    (String::from_utf16_lossy(&text), annotations)
}

/// The first rule that applies at `i` in a span ending at `end`, and where
/// scanning resumes after it.
fn scan(src: &[u16], delimiters: &Delimiters, i: usize, end: usize) -> (Piece, usize) {
    let at = |k: usize| if k < end { src.get(k).copied() } else { None };
    let next = at(i + 1);
    match at(i) {
        Some(BACKSLASH) if next.is_some() => return (Piece::Literal(i + 1..i + 2), i + 2),
        Some(BANG) if next == Some(OPEN_BRACKET) => {
            if let Some(close) = delimiters
                .closing_bracket(i + 1, end)
                .filter(|&c| at(c + 1) == Some(OPEN_PAREN))
            {
                if let Some(paren) = first_in(&delimiters.close_parens, close + 2, end) {
                    return (Piece::Literal(i + 2..close), paren + 1);
                }
            }
        }
        Some(LESS) => {
            if let Some(greater) = first_in(&delimiters.greaters, i + 1, end) {
                if is_autolink(src.get(i + 1..greater).unwrap_or_default()) {
                    return (Piece::Autolink(i + 1..greater), greater + 1);
                }
            }
        }
        Some(OPEN_BRACKET) => {
            if let Some(close) = delimiters
                .closing_bracket(i, end)
                .filter(|&c| at(c + 1) == Some(OPEN_PAREN))
            {
                if let Some(paren) = first_in(&delimiters.close_parens, close + 2, end) {
                    let link =
                        String::from_utf16_lossy(src.get(close + 2..paren).unwrap_or_default());
                    let piece = Piece::Nested {
                        kind: "Link",
                        inner: i + 1..close,
                        link: Some(link),
                    };
                    return (piece, paren + 1);
                }
            }
        }
        Some(STAR) if next == Some(STAR) => {
            if let Some(close) = delimiters.double_star(i + 2, end) {
                return (
                    Piece::Nested {
                        kind: "Bold",
                        inner: i + 2..close,
                        link: None,
                    },
                    close + 2,
                );
            }
        }
        Some(STAR) => {
            if let Some(close) = delimiters.lone_star(src, i + 1, end) {
                return (
                    Piece::Nested {
                        kind: "Italic",
                        inner: i + 1..close,
                        link: None,
                    },
                    close + 1,
                );
            }
        }
        Some(BACKTICK) => {
            if let Some(close) = first_in(&delimiters.backticks, i + 1, end) {
                return (Piece::Code(i + 1..close), close + 1);
            }
        }
        _ => {}
    }
    (Piece::Literal(i..i + 1), i + 1)
}

/// `/^[a-zA-Z][a-zA-Z0-9+.-]*:\S*$/` and no `<`: an autolink's inside.
fn is_autolink(inner: &[u16]) -> bool {
    let is_letter = |u: u16| u8::try_from(u).is_ok_and(|b| b.is_ascii_alphabetic());
    let is_scheme =
        |u: u16| u8::try_from(u).is_ok_and(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b));
    let Some((&first, rest)) = inner.split_first() else {
        return false;
    };
    let scheme = rest.iter().take_while(|&&u| is_scheme(u)).count();
    match rest.get(scheme..).and_then(<[u16]>::split_first) {
        Some((&COLON, tail)) => {
            is_letter(first) && tail.iter().all(|&u| u != LESS && !is_js_space_unit(u))
        }
        _ => false,
    }
}

// ─── Blocks → markdown ──────────────────────────────────────────────────────

/// Which of the reference's two emitters to follow.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `blocksToMarkdown`, for listings.
    Plain,
    /// `contentToResolvedMarkdown` with every lookup failing, for the model.
    Resolved,
}

struct Rendering {
    markdown: String,
    /// False when the output budget ran out and `markdown` is cut short.
    complete: bool,
}

/// The blocks as prompt markdown: the emitter's output, then `strip_artifacts`.
fn render(blocks: &[Value], mode: Mode) -> Rendering {
    let mut renderer = Renderer {
        mode,
        budget: RENDER_BUDGET,
        exhausted: false,
    };
    let raw = renderer.document(blocks);
    Rendering {
        markdown: strip_artifacts(&raw),
        complete: !renderer.exhausted,
    }
}

/// The service's `stripPromptMarkdownArtifacts`: no empty frontmatter, no
/// `[ \t]*<!-- id:… -->` comments, trimmed.
fn strip_artifacts(markdown: &str) -> String {
    let markdown = match markdown.strip_prefix(EMPTY_FRONTMATTER) {
        Some(rest) => rest.strip_prefix('\n').unwrap_or(rest),
        None => markdown,
    };
    js_trim(&remove_id_comments(markdown)).to_owned()
}

/// Every match of `/[ \t]*<!-- id:[^>]+ -->/g` removed: a comment runs to the
/// first `>` after `<!-- id:`, and counts only if that `>` ends ` -->` with
/// something between.
fn remove_id_comments(markdown: &str) -> String {
    const OPEN: &str = "<!-- id:";
    let mut out = String::with_capacity(markdown.len());
    let mut kept_until = 0;
    let mut search_from = 0;
    // The first `>` at or after some position, remembered so that a text
    // full of unclosed comments is still read once.
    let mut greater: Option<usize> = None;
    while let Some(at) = markdown
        .get(search_from..)
        .and_then(|rest| rest.find(OPEN))
        .map(|i| i + search_from)
    {
        let body = at + OPEN.len();
        if greater.is_none_or(|g| g < body) {
            greater = markdown
                .get(body..)
                .and_then(|rest| rest.find('>'))
                .map(|i| i + body);
        }
        let Some(close) = greater else { break };
        let closes = close >= body + 4
            && markdown.as_bytes().get(close - 3..close) == Some(b" --".as_slice());
        if !closes {
            search_from = at + 1;
            continue;
        }
        let kept = markdown.get(kept_until..at).unwrap_or_default();
        out.push_str(kept.trim_end_matches([' ', '\t']));
        kept_until = close + 1;
        search_from = close + 1;
    }
    out.push_str(markdown.get(kept_until..).unwrap_or_default());
    out
}

/// A table row as the emitter reads it: cells by column id, first one wins.
struct RowView<'a> {
    id: Option<&'a Value>,
    is_header: bool,
    cells: HashMap<&'a str, &'a Map<String, Value>>,
}

struct Renderer {
    mode: Mode,
    budget: usize,
    exhausted: bool,
}

impl Renderer {
    /// Takes `bytes` of the budget; false (from then on) once it runs out.
    fn spend(&mut self, bytes: usize) -> bool {
        if !self.exhausted && bytes <= self.budget {
            self.budget -= bytes;
            return true;
        }
        self.exhausted = true;
        false
    }

    /// Top-level blocks: after empty frontmatter and one newline apart
    /// (plain), or a blank line apart (resolved).
    fn document(&mut self, blocks: &[Value]) -> String {
        let mode = self.mode;
        let parts = blocks
            .iter()
            .map(|node| self.node(node, 0))
            .filter(|md| !md.is_empty());
        match mode {
            Mode::Plain => std::iter::once(EMPTY_FRONTMATTER.to_owned())
                .chain(parts)
                .collect::<Vec<_>>()
                .join("\n"),
            Mode::Resolved => parts.collect::<Vec<_>>().join("\n\n"),
        }
    }

    /// `blockNodeToMarkdown`. Malformed nodes (no object `block`) and nodes
    /// deeper than `MAX_NESTING` render as nothing.
    fn node(&mut self, node: &Value, depth: usize) -> String {
        if depth >= MAX_NESTING || self.exhausted {
            return String::new();
        }
        let Some(block) = node.get("block").and_then(Value::as_object) else {
            return String::new();
        };
        let kind = str_field(block, "type");
        if kind == "Table" {
            return self.table(node, block, depth);
        }
        let bullet = match attribute(block, "childrenType").and_then(Value::as_str) {
            Some("Ordered") => Some("1. "),
            Some("Unordered") => Some("- "),
            Some("Blockquote") => Some("> "),
            _ => None,
        };
        let is_list_container =
            kind == "Paragraph" && !js_truthy(block.get("text")) && bullet.is_some();
        let mut out = if is_list_container {
            id_comment(block.get("id"))
        } else {
            self.block(block, kind, depth)
        };
        for child in child_nodes(node) {
            let child = self.node(child, depth + 1);
            if child.is_empty() {
                continue;
            }
            match bullet {
                Some(bullet) => {
                    out.push('\n');
                    out.push_str(&indent(depth + 1));
                    out.push_str(bullet);
                    out.push_str(js_trim(&child));
                }
                None => {
                    out.push_str("\n\n");
                    out.push_str(&child);
                }
            }
        }
        out
    }

    /// `blockToMarkdown` / `resolvedBlockToMarkdown` for one block.
    fn block(&mut self, block: &Map<String, Value>, kind: &str, depth: usize) -> String {
        let ind = indent(depth);
        let id = id_comment(block.get("id"));
        let text = js_or_empty(block.get("text"));
        let link = js_or_empty(block.get("link"));
        let or = |value: &str, fallback: &str| {
            if value.is_empty() {
                fallback.to_owned()
            } else {
                value.to_owned()
            }
        };
        match kind {
            "Paragraph" => {
                let text = self.annotate(&text, block.get("annotations"));
                append_id(format!("{ind}{text}"), &id)
            }
            "Heading" => {
                let hashes = "#".repeat((depth + 1).min(6));
                let text = self.annotate(&text, block.get("annotations"));
                append_id(format!("{hashes} {text}"), &id)
            }
            "Code" => {
                let language = js_or_empty(attribute(block, "language"));
                format!("{ind}```{language} {id}\n{ind}{text}\n{ind}```")
            }
            "Math" => format!("{ind}$$ {id}\n{ind}{text}\n{ind}$$"),
            "Image" => format!("{ind}![{}]({}) {id}", or(&text, "image"), media_url(&link)),
            "Video" => format!("{ind}[Video]({}) {id}", media_url(&link)),
            "File" => {
                let name = js_or_empty(attribute(block, "name"));
                format!("{ind}[{}]({}) {id}", or(&name, "file"), media_url(&link))
            }
            "Embed" => {
                let embed = format!("{ind}> [Embed: {link}]({link})");
                match self.mode {
                    Mode::Plain => format!("{embed} {id}"),
                    Mode::Resolved => append_id(embed, &id),
                }
            }
            "WebEmbed" => format!("{ind}[Web Embed]({link}) {id}"),
            "Button" => format!("{ind}[{}]({link}) {id}", or(&text, "Button")),
            "Query" => match self.mode {
                Mode::Plain => format!("{ind}<!-- Query block --> {id}"),
                Mode::Resolved => append_id(format!("{ind}{}", query_without_client(block)), &id),
            },
            "Nostr" => format!("{ind}[Nostr: {link}]({link}) {id}"),
            _ if text.is_empty() => String::new(),
            _ => append_id(format!("{ind}{text}"), &id),
        }
    }

    /// `applyAnnotations`: markdown markers put into the text.
    ///
    /// Markers sort by position, opening ones first, openings at one position
    /// in reverse order of appearance and closings in order (what the
    /// reference's comparator yields in V8 and JavaScriptCore). Positions are
    /// UTF-16 offsets with JavaScript `slice` semantics (truncated, negative
    /// from the end, clamped); a position that is not a number is skipped
    /// (the reference would coerce it). A marker inside a surrogate pair
    /// splits the character, whose halves become U+FFFD. With any
    /// annotations, U+FFFC characters are dropped.
    fn annotate(&mut self, text: &str, annotations: Option<&Value>) -> String {
        let annotations = match annotations {
            Some(Value::Array(annotations)) if !annotations.is_empty() => annotations,
            _ => return text.to_owned(),
        };
        struct Marker<'a> {
            pos: f64,
            open: bool,
            seq: usize,
            annotation: &'a Map<String, Value>,
        }
        let mut markers = Vec::new();
        for annotation in annotations.iter().filter_map(Value::as_object) {
            let positions = |key| {
                annotation
                    .get(key)
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice)
            };
            let ends = positions("ends");
            for (i, start) in positions("starts").iter().enumerate() {
                if let Some(pos) = start.as_f64() {
                    markers.push(Marker {
                        pos,
                        open: true,
                        seq: markers.len(),
                        annotation,
                    });
                }
                if let Some(pos) = ends.get(i).and_then(Value::as_f64) {
                    markers.push(Marker {
                        pos,
                        open: false,
                        seq: markers.len(),
                        annotation,
                    });
                }
            }
        }
        markers.sort_by(|a, b| {
            let order = if a.open {
                b.seq.cmp(&a.seq)
            } else {
                a.seq.cmp(&b.seq)
            };
            a.pos
                .partial_cmp(&b.pos)
                .unwrap_or(Ordering::Equal)
                .then(b.open.cmp(&a.open))
                .then(order)
        });

        let units: Vec<u16> = text.encode_utf16().collect();
        let mut out: Vec<u16> = Vec::with_capacity(units.len() + 4 * markers.len());
        let mut last = 0.0;
        for marker in &markers {
            out.extend_from_slice(js_slice(&units, last, marker.pos));
            last = marker.pos;
            let tag = self.marker(marker.annotation, marker.open);
            if !self.spend(tag.len()) {
                break;
            }
            out.extend(tag.encode_utf16());
        }
        out.extend_from_slice(js_slice(&units, last, f64::INFINITY));
        String::from_utf16_lossy(&out).replace(OBJECT_REPLACEMENT, "")
    }

    /// The markdown for one end of an annotation.
    fn marker(&self, annotation: &Map<String, Value>, open: bool) -> Cow<'static, str> {
        let link = || js_or_empty(annotation.get("link"));
        match (str_field(annotation, "type"), open) {
            ("Bold", _) => "**".into(),
            ("Italic", _) => "_".into(),
            ("Strike", _) => "~~".into(),
            ("Code", _) => "`".into(),
            ("Underline", true) => "<u>".into(),
            ("Underline", false) => "</u>".into(),
            ("Link", true) => "[".into(),
            ("Link", false) => format!("]({})", link()).into(),
            ("Embed", open) => match (self.mode, open) {
                (Mode::Plain, true) => format!("<{}", link()).into(),
                (Mode::Plain, false) => ">".into(),
                (Mode::Resolved, false) => format!("]({})", link()).into(),
                (Mode::Resolved, true) => match link() {
                    link if link.is_empty() => "[↗ embed".into(),
                    link => format!("[↗ {}", fallback_label(&link)).into(),
                },
            },
            _ => "".into(),
        }
    }

    /// A Table node as GFM with identity comments (`<!-- col:… -->` stays
    /// in the prompt: the strip step only knows `id:` comments). Cells are
    /// found by column id; only the first row may be the header.
    fn table(&mut self, node: &Value, block: &Map<String, Value>, depth: usize) -> String {
        let mut columns: Vec<Option<&Value>> = Vec::new();
        let mut rows: Vec<RowView> = Vec::new();
        for child in child_nodes(node) {
            let Some(child_block) = child.get("block").and_then(Value::as_object) else {
                continue;
            };
            match str_field(child_block, "type") {
                "TableColumn" => columns.push(child_block.get("id")),
                "TableRow" => {
                    let mut cells = HashMap::new();
                    for cell in
                        child_nodes(child).filter_map(|c| c.get("block").and_then(Value::as_object))
                    {
                        if let Some(column) = attribute(cell, "columnId").and_then(Value::as_str) {
                            if !column.is_empty() {
                                cells.entry(column).or_insert(cell);
                            }
                        }
                    }
                    let is_header = rows.is_empty()
                        && attribute(child_block, "isHeader") == Some(&Value::Bool(true));
                    rows.push(RowView {
                        id: child_block.get("id"),
                        is_header,
                        cells,
                    });
                }
                _ => {}
            }
        }
        if columns.is_empty() {
            return String::new();
        }
        let (header, body) = match rows.split_first() {
            Some((first, rest)) if first.is_header => (Some(first), rest),
            _ => (None, rows.as_slice()),
        };
        if !self.spend(
            columns
                .len()
                .saturating_mul(body.len() + 1)
                .saturating_mul(3),
        ) {
            return String::new();
        }

        let ind = indent(depth);
        let mut lines = vec![format!("{ind}{}", id_comment(block.get("id")))];
        let mut header_cells: Vec<String> = self
            .row_cells(header, &columns)
            .into_iter()
            .zip(&columns)
            .map(|(text, column)| {
                let text = if text.is_empty() {
                    text
                } else {
                    format!("{text} ")
                };
                format!("{text}<!-- col:{} -->", js_display(*column))
            })
            .collect();
        if let Some(row) = header.filter(|row| js_truthy(row.id)) {
            if let Some(last) = header_cells.last_mut() {
                last.push(' ');
                last.push_str(&id_comment(row.id));
            }
        }
        lines.push(format!("{ind}| {} |", header_cells.join(" | ")));
        lines.push(format!("{ind}|{}|", vec![" --- "; columns.len()].join("|")));
        for row in body {
            let mut cells = self.row_cells(Some(row), &columns);
            if let Some(last) = cells.last_mut() {
                let id = id_comment(row.id);
                *last = if last.is_empty() {
                    id
                } else {
                    format!("{last} {id}")
                };
            }
            lines.push(format!("{ind}| {} |", cells.join(" | ")));
        }
        lines.join("\n")
    }

    /// One rendered, escaped cell per column (empty where the row has none).
    fn row_cells(&mut self, row: Option<&RowView>, columns: &[Option<&Value>]) -> Vec<String> {
        columns
            .iter()
            .map(|column| {
                let cell = row
                    .zip(column.and_then(Value::as_str))
                    .and_then(|(row, id)| row.cells.get(id));
                let Some(cell) = cell else {
                    return String::new();
                };
                let text = self.annotate(&js_or_empty(cell.get("text")), cell.get("annotations"));
                if !self.spend(text.len()) {
                    return String::new();
                }
                text.replace('|', "\\|").replace('\n', "<br>")
            })
            .collect()
    }
}

fn str_field<'a>(map: &'a Map<String, Value>, key: &str) -> &'a str {
    map.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `block.attributes?.[key]`.
fn attribute<'a>(block: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    block
        .get("attributes")
        .and_then(Value::as_object)
        .and_then(|attributes| attributes.get(key))
}

/// A node's children, when they are an array.
fn child_nodes(node: &Value) -> impl Iterator<Item = &Value> {
    node.get("children")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

fn id_comment(id: Option<&Value>) -> String {
    format!("<!-- id:{} -->", js_display(id))
}

/// The id comment after the first line of `markdown` (alone if it is empty).
fn append_id(markdown: String, comment: &str) -> String {
    match markdown.split_once('\n') {
        Some((first, rest)) => format!("{first} {comment}\n{rest}"),
        None if markdown.is_empty() => comment.to_owned(),
        None => format!("{markdown} {comment}"),
    }
}

/// Media urls on IPFS go through the public gateway.
fn media_url(url: &str) -> String {
    match url.strip_prefix("ipfs://") {
        Some(cid) => format!("https://ipfs.io/ipfs/{cid}"),
        None => url.to_owned(),
    }
}

/// What the resolved emitter shows for a Query block whose request fails:
/// a query with `includes` (or a `space`) would be requested, one without
/// names no space. (`query.includes` is a truthy method on strings and
/// arrays, which sends those down the request path too.)
fn query_without_client(block: &Map<String, Value>) -> &'static str {
    let would_request = match attribute(block, "query") {
        Some(Value::Object(query)) => js_truthy(query.get("includes")),
        Some(Value::String(_) | Value::Array(_)) => true,
        _ => false,
    };
    if would_request || js_truthy(attribute(block, "space")) {
        QUERY_WITHOUT_CLIENT
    } else {
        "<!-- Query: no space specified -->"
    }
}

/// The reference's `fallbackLabel`: a hypermedia link's path, or its account
/// id shortened to 12 characters, or the link itself.
fn fallback_label(link: &str) -> String {
    let Some((uid, path)) = unpack_hm_id(link) else {
        return link.to_owned();
    };
    if !path.is_empty() {
        return path.join("/");
    }
    let units: Vec<u16> = uid.encode_utf16().collect();
    match units.get(..12) {
        Some(head) if units.len() > 12 => format!("{}...", String::from_utf16_lossy(head)),
        _ => uid.to_owned(),
    }
}

/// The account id and path of `hm://UID/PATH` or `http(s)://HOST/hm/UID/PATH`
/// (the reference's `unpackHmId`, as far as labels need it).
fn unpack_hm_id(link: &str) -> Option<(&str, Vec<&str>)> {
    const STATIC_PATHS: [&str; 5] = ["download", "connect", "register", "profile", "contact"];
    let mut parts = link.split("://");
    let scheme = parts.next().unwrap_or_default();
    let rest = parts.next().filter(|rest| !rest.is_empty())?;
    let path = rest
        .split('#')
        .next()
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    let (uid, path) = match scheme {
        "https" | "http" => {
            if segments.get(1) != Some(&"hm") {
                return None;
            }
            let uid = segments.get(2).copied().unwrap_or_default();
            if STATIC_PATHS.contains(&uid) {
                return None;
            }
            (uid, segments.get(3..).unwrap_or_default())
        }
        "hm" => (
            segments.first().copied().unwrap_or_default(),
            segments.get(1..).unwrap_or_default(),
        ),
        _ => return None,
    };
    Some((uid, path.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The blocks with every block id replaced by `#`.
    fn masked(blocks: &[Value]) -> Vec<Value> {
        fn mask(node: &mut Value) {
            if let Some(Value::Object(block)) = node.get_mut("block") {
                block.insert("id".into(), "#".into());
            }
            if let Some(Value::Array(children)) = node.get_mut("children") {
                children.iter_mut().for_each(mask);
            }
        }
        let mut blocks = blocks.to_vec();
        blocks.iter_mut().for_each(mask);
        blocks
    }

    /// A masked node as the parser makes it.
    fn node(kind: &str, text: &str, attributes: Value, children: Vec<Value>) -> Value {
        let mut node = json!({"block": {"type": kind, "id": "#", "text": text, "annotations": [], "attributes": attributes}});
        if !children.is_empty() {
            node["children"] = Value::Array(children);
        }
        node
    }

    fn item(text: &str) -> Value {
        node("Paragraph", text, json!({}), vec![])
    }

    fn parse(markdown: &str) -> Vec<Value> {
        normalize(Some(&json!(markdown)), "Prompt").expect("a valid prompt")
    }

    fn prompt_markdown(markdown: &str) -> String {
        to_markdown(&parse(markdown))
    }

    /// `blocksToMarkdown` before the strip step.
    fn emitted(blocks: &[Value]) -> String {
        Renderer {
            mode: Mode::Plain,
            budget: RENDER_BUDGET,
            exhausted: false,
        }
        .document(blocks)
    }

    fn refusal(raw: Value) -> String {
        normalize(Some(&raw), "Trigger prompt")
            .expect_err("a refused prompt")
            .0
    }

    fn paragraph_with(text: &str, annotations: Value) -> Vec<Value> {
        vec![
            json!({"block": {"type": "Paragraph", "id": "p", "text": text, "annotations": annotations}}),
        ]
    }

    // ── The spec's worked examples ──

    #[test]
    fn example_a_a_sentence() {
        let blocks = masked(&parse("Summarize today's news"));
        assert_eq!(json!(blocks), json!([item("Summarize today's news")]));
        assert_eq!(
            emitted(&blocks),
            "---\n---\n\nSummarize today's news <!-- id:# -->"
        );
        assert_eq!(to_markdown(&blocks), "Summarize today's news");
        assert_eq!(to_resolved_markdown(&blocks), "Summarize today's news");
    }

    #[test]
    fn example_b_heading_paragraph_and_list() {
        let input =
            "# Daily\n\nCheck **open** issues and [file](https://x.y) them.\n\n- one\n- two";
        let blocks = masked(&parse(input));
        let expected = json!([{
            "block": {"type": "Heading", "id": "#", "text": "Daily", "annotations": [], "attributes": {"childrenType": "Group"}},
            "children": [{
                "block": {"type": "Paragraph", "id": "#", "text": "Check open issues and file them.",
                    "annotations": [{"type": "Bold", "starts": [6], "ends": [10]},
                                    {"type": "Link", "starts": [22], "ends": [26], "link": "https://x.y"}],
                    "attributes": {"childrenType": "Unordered"}},
                "children": [item("one"), item("two")]
            }]
        }]);
        assert_eq!(json!(blocks), expected);
        assert_eq!(
            emitted(&blocks),
            "---\n---\n\n# Daily <!-- id:# -->\n\n  Check **open** issues and [file](https://x.y) them. <!-- id:# -->\n    - one <!-- id:# -->\n    - two <!-- id:# -->"
        );
        let markdown = "# Daily\n\n  Check **open** issues and [file](https://x.y) them.\n    - one\n    - two";
        assert_eq!(to_markdown(&blocks), markdown);
        assert_eq!(to_resolved_markdown(&blocks), markdown);
    }

    #[test]
    fn example_c_code_fence() {
        let blocks = masked(&parse("```js\nlet x = 1\n```"));
        assert_eq!(
            json!(blocks),
            json!([node("Code", "let x = 1", json!({"language": "js"}), vec![])])
        );
        assert_eq!(
            emitted(&blocks),
            "---\n---\n\n```js <!-- id:# -->\nlet x = 1\n```"
        );
        assert_eq!(to_markdown(&blocks), "```js\nlet x = 1\n```");
    }

    #[test]
    fn example_stored_row() {
        let row = r#"{"type":"seed-prompt-blocks","blocks":[{"block":{"type":"Paragraph","id":"TkvmNbwZ","text":"Summarize today's news","annotations":[],"attributes":{}}}]}"#;
        let blocks = from_stored(row);
        assert_eq!(
            json!(blocks),
            json!([{"block": {"type": "Paragraph", "id": "TkvmNbwZ", "text": "Summarize today's news", "annotations": [], "attributes": {}}}])
        );
        let stored = to_stored(&blocks);
        assert!(stored.starts_with(r#"{"type":"seed-prompt-blocks","blocks":[{"block":"#));
        assert!(!stored.contains("children"));
        let reparsed: Value = serde_json::from_str(&stored).expect("JSON");
        assert_eq!(reparsed, serde_json::from_str::<Value>(row).expect("JSON"));
    }

    #[test]
    fn more_verified_pairs() {
        let pairs = [
            ("- one\n- two", "- one\n  - two"),
            ("Para1\n\nPara2", "Para1\nPara2"),
            ("line1\nline2", "line1\nline2"),
            ("*a* _b_ ~~c~~", "_a_ _b_ ~~c~~"),
            ("# A\n## B\ntext\n# C", "# A\n\n## B\n\n    text\n# C"),
            ("## B only\n\ntext", "# B only\n\n  text"),
            ("![](x)", "![image](file://x)"),
            ("<https://a.b>", "[https://a.b](https://a.b)"),
            ("<hm://z/p>", "<hm://z/p>"),
            ("---\nname: X\n---\nBody", "Body"),
            ("hard  \nbreak", "hard\nbreak"),
            ("* * *", "- _ _"),
            (
                "# H\n- a\n- b\n\nafter",
                "# H\n\n\n    - a\n    - b\n\n  after",
            ),
            ("> quoted", "> quoted"),
            ("#tag", "#tag"),
        ];
        for (input, expected) in pairs {
            assert_eq!(prompt_markdown(input), expected, "for {input:?}");
        }
        assert_eq!(
            refusal(json!("<!-- id:abc -->")),
            "Trigger prompt is required"
        );
    }

    // ── Inline formatting ──

    #[test]
    fn nested_annotations_come_before_the_enclosing_one() {
        let blocks = parse("**[a](u)**");
        assert_eq!(
            blocks[0]["block"]["annotations"],
            json!([{"type": "Link", "starts": [0], "ends": [1], "link": "u"}, {"type": "Bold", "starts": [0], "ends": [1]}])
        );
        assert_eq!(to_markdown(&blocks), "**[a](u)**");

        let blocks = parse("[**a**](u)");
        assert_eq!(
            blocks[0]["block"]["annotations"],
            json!([{"type": "Bold", "starts": [0], "ends": [1]}, {"type": "Link", "starts": [0], "ends": [1], "link": "u"}])
        );
        assert_eq!(to_markdown(&blocks), "[**a**](u)");

        let blocks = parse("***e***");
        assert_eq!(blocks[0]["block"]["text"], "*e*");
        assert_eq!(
            blocks[0]["block"]["annotations"],
            json!([{"type": "Bold", "starts": [0], "ends": [2]}])
        );
    }

    #[test]
    fn markers_at_one_position_nest() {
        // Openings in reverse order of appearance, closings in order.
        let blocks = paragraph_with(
            "ab",
            json!([{"type": "Bold", "starts": [0], "ends": [2]}, {"type": "Italic", "starts": [0], "ends": [2]}]),
        );
        assert_eq!(to_markdown(&blocks), "_**ab**_");
        let blocks = paragraph_with(
            "abc",
            json!([{"type": "Code", "starts": [1], "ends": [2]}, {"type": "Underline", "starts": [0, 2], "ends": [1, 3]}]),
        );
        // At one position every opening comes before every closing, even when
        // that interleaves touching ranges (as the reference does).
        assert_eq!(to_markdown(&blocks), "<u>a`</u>b<u>`c</u>");
    }

    #[test]
    fn offsets_are_utf16_units() {
        let blocks = parse("😀 **b**");
        assert_eq!(blocks[0]["block"]["text"], "😀 b");
        assert_eq!(
            blocks[0]["block"]["annotations"],
            json!([{"type": "Bold", "starts": [3], "ends": [4]}])
        );
        assert_eq!(to_markdown(&blocks), "😀 **b**");
    }

    #[test]
    fn inline_rules() {
        let text = |markdown: &str| parse(markdown)[0]["block"]["text"].clone();
        assert_eq!(text(r"C:\Users\x"), r"C:Usersx");
        assert_eq!(text("trailing \\"), "trailing \\");
        for literal in ["a **b", "`b", "[x]", "[x](y", "<u>x</u>", "_x_", "__x__"] {
            let blocks = parse(literal);
            assert_eq!(blocks[0]["block"]["text"], literal);
            assert_eq!(
                blocks[0]["block"]["annotations"],
                json!([]),
                "for {literal:?}"
            );
        }
        assert_eq!(text("see ![alt](u) here"), "see alt here");
        let blocks = parse("[a](u \"t\")");
        assert_eq!(blocks[0]["block"]["annotations"][0]["link"], "u \"t\"");
        let blocks = parse("a `**x**` b");
        assert_eq!(blocks[0]["block"]["text"], "a **x** b");
        assert_eq!(
            blocks[0]["block"]["annotations"],
            json!([{"type": "Code", "starts": [2], "ends": [7]}])
        );
        let blocks = parse("x <hm://z/p> y");
        assert_eq!(blocks[0]["block"]["text"], "x \u{fffc} y");
        assert_eq!(
            blocks[0]["block"]["annotations"],
            json!([{"type": "Embed", "starts": [2], "ends": [3], "link": "hm://z/p"}])
        );
    }

    // ── Blocks ──

    #[test]
    fn lists_attach_to_the_preceding_text() {
        let container = |list_type: &str, items| {
            node("Paragraph", "", json!({"childrenType": list_type}), items)
        };
        assert_eq!(
            json!(masked(&parse("P\n- a\n\n- b"))),
            json!([
                node(
                    "Paragraph",
                    "P",
                    json!({"childrenType": "Unordered"}),
                    vec![item("a")]
                ),
                container("Unordered", vec![item("b")])
            ])
        );
        assert_eq!(
            json!(masked(&parse("1. x\n2) y\n10. z"))),
            json!([
                container("Ordered", vec![item("x")]),
                node(
                    "Paragraph",
                    "2) y",
                    json!({"childrenType": "Ordered"}),
                    vec![item("z")]
                )
            ])
        );
        assert_eq!(
            json!(masked(&parse("# H\n- a\n- b"))),
            json!([node(
                "Heading",
                "H",
                json!({"childrenType": "Unordered"}),
                vec![item("a"), item("b")]
            )])
        );
        assert_eq!(prompt_markdown("# H\n- a\n- b"), "# H\n  - a\n  - b");
        assert_eq!(
            json!(masked(&parse("# H\n- a\n- b\n\nafter"))),
            json!([node(
                "Heading",
                "H",
                json!({"childrenType": "Group"}),
                vec![
                    container("Unordered", vec![item("a"), item("b")]),
                    item("after")
                ]
            )])
        );
        // Mixed markers and indented sub-items make one flat list.
        assert_eq!(
            json!(masked(&parse("- a\n  * b\n+ c"))),
            json!([container(
                "Unordered",
                vec![item("a"), item("b"), item("c")]
            )])
        );
    }

    #[test]
    fn headings_nest_by_level() {
        let group = || json!({"childrenType": "Group"});
        assert_eq!(
            json!(masked(&parse("# A\n## B\ntext\n# C"))),
            json!([
                node(
                    "Heading",
                    "A",
                    group(),
                    vec![node("Heading", "B", group(), vec![item("text")])]
                ),
                node("Heading", "C", group(), vec![])
            ])
        );
        assert_eq!(
            json!(masked(&parse("#### Deep\n##### Deeper"))),
            json!([node(
                "Heading",
                "Deep",
                group(),
                vec![node("Heading", "Deeper", group(), vec![])]
            )])
        );
        assert_eq!(
            json!(masked(&parse("## Lead\n# Top"))),
            json!([
                node("Heading", "Lead", group(), vec![]),
                node("Heading", "Top", group(), vec![])
            ])
        );
        assert_eq!(
            parse("#  Spaced  Title  #")[0]["block"]["text"],
            "Spaced  Title  #"
        );
        assert_eq!(parse("####### seven")[0]["block"]["type"], "Paragraph");
    }

    #[test]
    fn code_and_math_fences() {
        let blocks = parse("```js title=x\n  indented\n\n```\nafter");
        assert_eq!(blocks[0]["block"]["text"], "  indented\n");
        assert_eq!(
            blocks[0]["block"]["attributes"],
            json!({"language": "js title=x"})
        );
        assert_eq!(blocks[1]["block"]["text"], "after");

        let blocks = parse("```\nunclosed\n# not a heading");
        assert_eq!(
            json!(masked(&blocks)),
            json!([node("Code", "unclosed\n# not a heading", json!({}), vec![])])
        );

        let blocks = parse("```js <!-- id:c1 -->\nlet x\n```");
        assert_eq!(blocks[0]["block"]["id"], "c1");
        assert_eq!(blocks[0]["block"]["attributes"], json!({"language": "js"}));

        let blocks = parse("$$ dropped <!-- id:m1 -->\nx^2\n$$");
        assert_eq!(
            json!(blocks),
            json!([{"block": {"type": "Math", "id": "m1", "text": "x^2", "annotations": [], "attributes": {}}}])
        );
        assert_eq!(to_markdown(&blocks), "$$\nx^2\n$$");

        assert_eq!(parse("~~~\nx\n~~~")[0]["block"]["text"], "~~~\nx\n~~~");
    }

    #[test]
    fn id_comments() {
        assert_eq!(parse("# Title <!-- id:abc -->")[0]["block"]["id"], "abc");
        let blocks = parse("Para <!-- id:p1 -->\nsecond <!-- id:p2 -->");
        assert_eq!(blocks[0]["block"]["id"], "p1");
        assert_eq!(blocks[0]["block"]["text"], "Para\nsecond <!-- id:p2 -->");
        // The id's greedy run gives back the dashes of `-->`.
        assert_eq!(parse("Text <!-- id:abc-->")[0]["block"]["id"], "abc");
        assert_eq!(parse("Text <!-- id:abc--->")[0]["block"]["id"], "abc-");
        let blocks = parse("<!-- id:list1 -->\n- a <!-- id:i1 -->");
        assert_eq!(blocks[0]["block"]["id"], "list1");
        assert_eq!(blocks[0]["children"][0]["block"]["id"], "i1");
        let generated = parse("x")[0]["block"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(generated.len(), 8);
        assert!(generated
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
    }

    #[test]
    fn images() {
        let blocks = parse("![Logo](https://a/b.png) trailing <!-- id:i1 -->");
        assert_eq!(
            json!(blocks),
            json!([{"block": {"type": "Image", "id": "i1", "text": "Logo", "annotations": [], "attributes": {}, "link": "https://a/b.png"}}])
        );
        let ipfs = vec![json!({"block": {"type": "Image", "id": "i", "link": "ipfs://cid"}})];
        assert_eq!(to_markdown(&ipfs), "![image](https://ipfs.io/ipfs/cid)");
    }

    #[test]
    fn tables() {
        let markdown = "<!-- id:t1 -->\n| Name <!-- col:c1 --> | Age <!-- col:c2 --> |\n| --- | --- |\n| Al\\|ice | **30** | <!-- id:r1 -->";
        let blocks = parse(markdown);
        assert_eq!(blocks.len(), 1);
        let table = &blocks[0];
        assert_eq!(table["block"]["type"], "Table");
        assert_eq!(table["block"]["id"], "t1");
        let children = table["children"].as_array().cloned().unwrap_or_default();
        let kinds: Vec<&str> = children
            .iter()
            .map(|c| c["block"]["type"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            kinds,
            ["TableColumn", "TableColumn", "TableRow", "TableRow"]
        );
        assert_eq!(children[0]["block"]["id"], "c1");
        assert_eq!(
            children[2]["block"]["attributes"],
            json!({"isHeader": true})
        );
        assert_eq!(children[3]["block"]["id"], "r1");
        let cell = &children[3]["children"][1]["block"];
        assert_eq!(cell["text"], "30");
        assert_eq!(cell["attributes"], json!({"columnId": "c2"}));
        assert_eq!(
            cell["annotations"],
            json!([{"type": "Bold", "starts": [0], "ends": [2]}])
        );
        assert_eq!(children[3]["children"][0]["block"]["text"], "Al|ice");
        assert_eq!(
            to_markdown(&blocks),
            "| Name <!-- col:c1 --> | Age <!-- col:c2 --> |\n| --- | --- |\n| Al\\|ice | **30** |"
        );
        // The emitted markdown reads back to the same table.
        let again = from_markdown(&emitted(&blocks));
        assert_eq!(masked(&again), masked(&blocks));
        assert_eq!(again[0]["children"][3]["block"]["id"], "r1");
    }

    // ── normalize ──

    #[test]
    fn refusals() {
        assert_eq!(
            normalize(None, "Trigger prompt"),
            Err(Invalid("Trigger prompt must be blocks".into()))
        );
        for raw in [json!(5), json!({}), json!(null), json!(true)] {
            assert_eq!(refusal(raw), "Trigger prompt must be blocks");
        }
        for raw in [
            json!(""),
            json!(" \n\t\u{feff}"),
            json!("<!-- id:abc -->"),
            json!([]),
        ] {
            assert_eq!(refusal(raw), "Trigger prompt is required");
        }
        assert_eq!(
            refusal(json!([{"block": {"id": "a", "type": "Paragraph", "text": ""}}])),
            "Trigger prompt is required"
        );
        assert_eq!(
            refusal(json!("x".repeat(MAX_PROMPT_BYTES + 1))),
            "Trigger prompt is too large"
        );
        assert!(normalize(
            Some(&json!(format!(" {} ", "x".repeat(MAX_PROMPT_BYTES)))),
            "P"
        )
        .is_ok());
        assert_eq!(
            refusal(
                json!([{"block": {"id": "a", "type": "Paragraph", "text": "x".repeat(70_000)}}])
            ),
            "Trigger prompt is too large"
        );
        let invalid_nodes = [
            json!([1]),
            json!([null]),
            json!([[]]),
            json!([{}]),
            json!([{"block": []}]),
            json!([{"block": {"id": "", "type": "Paragraph"}}]),
            json!([{"block": {"id": "a", "type": 5}}]),
            json!([{"block": {"id": "a", "type": "Paragraph", "text": "x"}, "children": [{"block": null}]}]),
            json!([{"block": {"type": "Paragraph"}, "children": "x"}]),
        ];
        for raw in invalid_nodes {
            assert_eq!(
                refusal(raw.clone()),
                "Trigger prompt blocks are invalid",
                "for {raw}"
            );
        }
        for children in [json!("x"), json!({}), json!(0)] {
            let raw = json!([{"block": {"id": "a", "type": "Paragraph", "text": "x"}, "children": children}]);
            assert_eq!(refusal(raw), "Trigger prompt block children are invalid");
        }
    }

    /// A chain of `depth` paragraphs, each the only child of the one before.
    fn chain(depth: usize) -> Vec<Value> {
        let mut node = json!({"block": {"id": "leaf", "type": "Paragraph", "text": "leaf"}});
        for level in 1..depth {
            node = json!({"block": {"id": format!("n{level}"), "type": "Paragraph", "text": "x"}, "children": [node]});
        }
        vec![node]
    }

    #[test]
    fn nesting_is_bounded() {
        assert!(normalize(Some(&Value::Array(chain(64))), "P").is_ok());
        assert_eq!(
            refusal(Value::Array(chain(65))),
            "Trigger prompt blocks are invalid"
        );
        // The renderer stops at the same depth on blocks nobody checked.
        let deep = to_markdown(&chain(300));
        assert_eq!(deep.matches('x').count(), 64);
        assert!(!deep.contains("leaf"));
    }

    #[test]
    fn blocks_are_kept_as_sent() {
        let raw = json!([
            {"block": {"id": "a", "type": "Paragraph", "text": "x", "custom": {"k": 1}}, "children": [], "extra": 1},
            {"block": {"id": "b", "type": "Heading", "text": "h"}, "children": null}
        ]);
        let blocks = normalize(Some(&raw), "P").expect("valid");
        assert_eq!(
            json!(blocks),
            json!([
                {"block": {"id": "a", "type": "Paragraph", "text": "x", "custom": {"k": 1}}, "children": []},
                {"block": {"id": "b", "type": "Heading", "text": "h"}}
            ])
        );
    }

    #[test]
    fn js_trim_semantics() {
        let blocks = parse(" \u{feff}\u{a0}x\u{85}\u{3000}");
        assert_eq!(blocks[0]["block"]["text"], "x\u{85}");
        assert!(normalize(Some(&json!("\u{85}")), "P").is_ok());
    }

    // ── Storage ──

    #[test]
    fn storage_round_trip_is_the_identity() {
        let raw = json!([
            {"block": {"id": "a", "type": "Paragraph", "text": "x", "annotations": [{"type": "Bold", "starts": [0], "ends": [1]}], "z": [1.5, null]},
             "children": [{"block": {"id": "b", "type": "Paragraph", "text": "y"}, "children": []}]},
            {"block": {"id": "c", "type": "Unknown", "text": "z"}}
        ]);
        let blocks = normalize(Some(&raw), "Prompt").expect("valid");
        assert_eq!(from_stored(&to_stored(&blocks)), blocks);
        let parsed = parse(
            "# Daily\n\nCheck **open** issues.\n\n- one\n- two\n\n| a | b |\n| - | - |\n| 1 | 2 |",
        );
        assert_eq!(from_stored(&to_stored(&parsed)), parsed);
    }

    #[test]
    fn legacy_and_invalid_rows_read_as_markdown() {
        let blocks = from_stored("  Plain **old** prompt\n");
        assert_eq!(blocks[0]["block"]["text"], "Plain old prompt");
        assert_eq!(
            blocks[0]["block"]["annotations"],
            json!([{"type": "Bold", "starts": [6], "ends": [9]}])
        );
        assert!(from_stored("").is_empty());
        assert!(from_stored("<!-- id:x -->").is_empty());
        let row = r#"{"type":"seed-prompt-blocks","blocks":[{"block":{}}]}"#;
        assert_eq!(json!(masked(&from_stored(row))), json!([item(row)]));
        assert_eq!(from_stored("42")[0]["block"]["text"], "42");
    }

    // ── Markdown out ──

    #[test]
    fn resolved_joins_top_level_blocks_with_a_blank_line() {
        let blocks = parse("Para1\n\nPara2");
        assert_eq!(to_markdown(&blocks), "Para1\nPara2");
        assert_eq!(to_resolved_markdown(&blocks), "Para1\n\nPara2");
    }

    #[test]
    fn resolved_fallbacks_without_a_client() {
        assert_eq!(
            to_resolved_markdown(&parse("<hm://z/p>")),
            "[↗ p](hm://z/p)"
        );
        assert_eq!(
            to_resolved_markdown(&parse("see <hm://z1234567890123>")),
            "see [↗ z12345678901...](hm://z1234567890123)"
        );
        assert_eq!(
            to_resolved_markdown(&parse("<https://seed.hyper.media/hm/uid/a/b>")),
            "[https://seed.hyper.media/hm/uid/a/b](https://seed.hyper.media/hm/uid/a/b)"
        );
        let embeds = paragraph_with(
            "\u{fffc} \u{fffc} \u{fffc}",
            json!([
                {"type": "Embed", "starts": [0], "ends": [1], "link": "https://seed.hyper.media/hm/uid/a/b?v=1#blk"},
                {"type": "Embed", "starts": [2], "ends": [3], "link": "mailto:x"},
                {"type": "Embed", "starts": [4], "ends": [5]}
            ]),
        );
        assert_eq!(
            to_resolved_markdown(&embeds),
            "[↗ a/b](https://seed.hyper.media/hm/uid/a/b?v=1#blk) [↗ mailto:x](mailto:x) [↗ embed]()"
        );
        assert_eq!(
            to_markdown(&embeds),
            "<https://seed.hyper.media/hm/uid/a/b?v=1#blk> <mailto:x> <>"
        );

        let embed = vec![json!({"block": {"type": "Embed", "id": "e", "link": "hm://abc/doc"}})];
        assert_eq!(to_markdown(&embed), "> [Embed: hm://abc/doc](hm://abc/doc)");
        assert_eq!(
            to_resolved_markdown(&embed),
            "> [Embed: hm://abc/doc](hm://abc/doc)"
        );

        let query = |attributes: Value| {
            vec![json!({"block": {"type": "Query", "id": "q", "attributes": attributes}})]
        };
        assert_eq!(to_markdown(&query(json!({}))), "<!-- Query block -->");
        assert_eq!(
            to_resolved_markdown(&query(json!({}))),
            "<!-- Query: no space specified -->"
        );
        assert_eq!(
            to_resolved_markdown(&query(json!({"space": "abc"}))),
            QUERY_WITHOUT_CLIENT
        );
        assert_eq!(
            to_resolved_markdown(&query(json!({"query": {"includes": []}}))),
            QUERY_WITHOUT_CLIENT
        );
        assert_eq!(
            to_resolved_markdown(&query(json!({"query": {"includes": null}}))),
            "<!-- Query: no space specified -->"
        );
    }

    #[test]
    fn other_block_types() {
        let blocks = vec![
            json!({"block": {"type": "Video", "id": "v", "link": "ipfs://vid"}}),
            json!({"block": {"type": "File", "id": "f", "link": "https://f", "attributes": {"name": "report.pdf"}}}),
            json!({"block": {"type": "Button", "id": "b", "link": "https://b"}}),
            json!({"block": {"type": "WebEmbed", "id": "w", "link": "https://w"}}),
            json!({"block": {"type": "Nostr", "id": "n", "link": "nostr:x"}}),
            json!({"block": {"type": "Mystery", "id": "m", "text": "plain **kept**", "annotations": [{"type": "Bold", "starts": [0], "ends": [1]}]}}),
            json!({"block": {"type": "Mystery", "id": "m2"}}),
            json!({"block": {"type": "Paragraph", "id": "q", "text": "quote", "attributes": {"childrenType": "Blockquote"}},
                   "children": [{"block": {"type": "Paragraph", "id": "q1", "text": "inner"}}]}),
        ];
        assert_eq!(
            to_markdown(&blocks),
            "[Video](https://ipfs.io/ipfs/vid)\n[report.pdf](https://f)\n[Button](https://b)\n[Web Embed](https://w)\n[Nostr: nostr:x](nostr:x)\nplain **kept**\nquote\n  > inner"
        );
    }

    #[test]
    fn hostile_annotation_positions() {
        let bold = |starts: Value, ends: Value| {
            to_markdown(&paragraph_with(
                "abc",
                json!([{"type": "Bold", "starts": starts, "ends": ends}]),
            ))
        };
        assert_eq!(bold(json!([1.5]), json!([2.9])), "a**b**c");
        assert_eq!(bold(json!([-1]), json!([3])), "ab**c**");
        assert_eq!(bold(json!(["x"]), json!([2])), "ab**c");
        assert_eq!(bold(json!([1e300]), json!([-1e300])), "**abc**");
        assert_eq!(bold(json!([null, 1]), json!({})), "a**bc");
        assert_eq!(bold(json!("01"), json!([1])), "abc");
        let split = paragraph_with("😀", json!([{"type": "Bold", "starts": [1], "ends": [2]}]));
        assert_eq!(to_markdown(&split), "\u{fffd}**\u{fffd}**");
        // U+FFFC is dropped only when there are annotations.
        assert_eq!(
            to_markdown(&paragraph_with("a\u{fffc}b", json!([]))),
            "a\u{fffc}b"
        );
        assert_eq!(
            to_markdown(&paragraph_with(
                "a\u{fffc}b",
                json!([null, 3, {"type": "Bold"}])
            )),
            "ab"
        );
        assert_eq!(
            to_markdown(&paragraph_with("abc", json!("not a list"))),
            "abc"
        );
    }

    #[test]
    fn non_string_fields_print_as_javascript_would() {
        let blocks = vec![
            json!({"block": {"type": "Paragraph", "id": 7, "text": 1.5}}),
            json!({"block": {"type": "Paragraph", "id": "b", "text": ["a", null, ["b", 2]]}}),
            json!({"block": {"type": "Heading", "text": true}}),
        ];
        assert_eq!(to_markdown(&blocks), "1.5\na,,b,2\n# true");
        assert_eq!(emitted(&blocks[..1]), "---\n---\n\n1.5 <!-- id:7 -->");
        for (number, printed) in [
            (0.0, "0"),
            (-0.0, "0"),
            (123.0, "123"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (1e21, "1e+21"),
            (1.25e22, "1.25e+22"),
            (123456789012345680000.0, "123456789012345680000"),
            (-2.5, "-2.5"),
        ] {
            assert_eq!(js_number(number), printed);
        }
    }

    #[test]
    fn frontmatter() {
        assert_eq!(prompt_markdown("---\nname: X\n---\nBody"), "Body");
        assert_eq!(prompt_markdown("---\n---\nBody"), "Body");
        assert_eq!(prompt_markdown("  \n---\nname: X\n---\nBody"), "Body");
        let mapping = "---\ntitle: \"Daily: news\"\ntags: [a, b]\n# note\ntheme:\n  headerLayout: Center\n---\nBody";
        assert_eq!(prompt_markdown(mapping), "Body");
        // Deviation: the reference drops scalar YAML too; this keeps it.
        assert_eq!(
            prompt_markdown("---\nHello\n---\nWorld"),
            "---\nHello\n---\nWorld"
        );
        // Malformed YAML keeps the text, as in the reference.
        for kept in [
            "---\nname: a: b\n---\nBody",
            "---\nname: a\nname: b\n---\nBody",
            "---\nname: \"open\n---\nBody",
        ] {
            assert_eq!(prompt_markdown(kept), kept);
        }
        assert_eq!(
            prompt_markdown("---\nno closing fence"),
            "---\nno closing fence"
        );
    }

    #[test]
    fn strip_step() {
        assert_eq!(strip_artifacts("---\n---\n\nx <!-- id:a -->"), "x");
        assert_eq!(
            strip_artifacts("a\t <!-- id:x y -->b <!-- id: -->c"),
            "ab <!-- id: -->c"
        );
        assert_eq!(strip_artifacts("<!-- id:a <!-- id:b -->z"), "z");
        assert_eq!(strip_artifacts("<!-- id:a>b -->"), "<!-- id:a>b -->");
        assert_eq!(
            strip_artifacts("| a <!-- col:c --> |"),
            "| a <!-- col:c --> |"
        );
    }

    // ── Hostile input ──

    #[test]
    fn hostile_markdown_terminates() {
        let big = MAX_PROMPT_BYTES;
        let inputs = [
            "[".repeat(big),
            "**".repeat(big / 2),
            "*a".repeat(big / 2),
            "*".repeat(big),
            "<".repeat(big),
            "<a:".repeat(big / 3),
            "[a](".repeat(big / 4),
            "![".repeat(big / 2),
            "`".repeat(big),
            "\\".repeat(big),
            "*[<`!".repeat(big / 5),
            "# a\n".repeat(big / 4),
            "- a\n".repeat(big / 4),
            "|\n".repeat(big / 2),
            "<!-- id:".repeat(big / 8),
            format!("{} -->", " <!-- id:a".repeat(big / 11)),
            format!("{}a{}", "[".repeat(big / 5), "](u)".repeat(big / 5)),
            format!("{}x{}", "*[".repeat(big / 6), "](u)*".repeat(big / 6)),
        ];
        for input in &inputs {
            let blocks = from_markdown(input);
            let _ = to_markdown(&blocks);
            let _ = to_resolved_markdown(&blocks);
            let _ = normalize(Some(&json!(input)), "P");
        }
        // Deeply nested links parse without recursion.
        let depth = big / 5;
        let blocks = from_markdown(&format!("{}a{}", "[".repeat(depth), "](u)".repeat(depth)));
        assert_eq!(blocks[0]["block"]["text"], "a");
        assert_eq!(
            blocks[0]["block"]["annotations"].as_array().map(Vec::len),
            Some(depth)
        );
    }

    #[test]
    fn oversized_tables_stay_sparse_and_are_too_large() {
        let markdown = format!("{}\n{}", "|".repeat(20_000), "|x\n".repeat(10_000));
        let blocks = from_markdown(&markdown);
        let rows = blocks[0]["children"].as_array().map_or(0, Vec::len);
        assert_eq!(rows, 19_999 + 10_001);
        assert_eq!(refusal(json!(markdown)), "Trigger prompt is too large");
    }

    #[test]
    fn repetition_is_budgeted() {
        let link = "x".repeat(10_000);
        let many = paragraph_with(
            "abc",
            json!([{"type": "Link", "link": link, "starts": vec![0; 20_000], "ends": vec![1; 20_000]}]),
        );
        assert!(to_markdown(&many).len() <= RENDER_BUDGET + 3);
        assert_eq!(refusal(Value::Array(many)), "Trigger prompt is too large");

        let columns = (0..3_000).map(|_| json!({"block": {"type": "TableColumn", "id": "c"}}));
        let rows = (0..3_000).map(|i| {
            json!({"block": {"type": "TableRow", "id": format!("r{i}")},
                   "children": [{"block": {"type": "Paragraph", "id": "x", "text": "cell", "attributes": {"columnId": "c"}}}]})
        });
        let table = vec![
            json!({"block": {"type": "Table", "id": "t"}, "children": columns.chain(rows).collect::<Vec<_>>()}),
        ];
        assert!(to_markdown(&table).is_empty());
        assert_eq!(refusal(Value::Array(table)), "Trigger prompt is too large");
    }
}
