//! Blocks to markdown: the plain and the resolved renderings and the strip
//! step.

use super::*;

use super::js::*;

// ─── Blocks → markdown ──────────────────────────────────────────────────────

/// Which of the reference's two emitters to follow.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// `blocksToMarkdown`, for listings.
    Plain,
    /// `contentToResolvedMarkdown` with every lookup failing, for the model.
    Resolved,
}

pub(super) struct Rendering {
    pub(super) markdown: String,
    /// False when the output budget ran out and `markdown` is cut short.
    pub(super) complete: bool,
}

/// The blocks as prompt markdown: the emitter's output, then `strip_artifacts`.
pub(super) fn render(blocks: &[Value], mode: Mode) -> Rendering {
    let mut renderer = Renderer {
        mode,
        budget: RENDER_BUDGET,
        exhausted: false,
        lookups: None,
        embed_depth: 0,
    };
    let raw = renderer.document(blocks);
    Rendering {
        markdown: strip_artifacts(&raw),
        complete: !renderer.exhausted,
    }
}

/// The service's `stripPromptMarkdownArtifacts`: no empty frontmatter, no
/// `[ \t]*<!-- id:… -->` comments, trimmed.
pub(super) fn strip_artifacts(markdown: &str) -> String {
    let markdown = match markdown.strip_prefix(EMPTY_FRONTMATTER) {
        Some(rest) => rest.strip_prefix('\n').unwrap_or(rest),
        None => markdown,
    };
    js_trim(&remove_id_comments(markdown)).to_owned()
}

/// Every match of `/[ \t]*<!-- id:[^>]+ -->/g` removed: a comment runs to the
/// first `>` after `<!-- id:`, and counts only if that `>` ends ` -->` with
/// something between.
pub(super) fn remove_id_comments(markdown: &str) -> String {
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
pub(super) struct RowView<'a> {
    pub(super) id: Option<&'a Value>,
    pub(super) is_header: bool,
    pub(super) cells: HashMap<&'a str, &'a Map<String, Value>>,
}

pub(super) struct Renderer<'a> {
    pub(super) mode: Mode,
    pub(super) budget: usize,
    pub(super) exhausted: bool,
    /// What the hypermedia server answered, for a resolved rendering that
    /// has a client; without, every lookup fails.
    pub(super) lookups: Option<&'a Lookups>,
    /// Embeds the block being rendered sits inside.
    pub(super) embed_depth: usize,
}

impl Renderer<'_> {
    /// Takes `bytes` of the budget; false (from then on) once it runs out.
    pub(super) fn spend(&mut self, bytes: usize) -> bool {
        if !self.exhausted && bytes <= self.budget {
            self.budget -= bytes;
            return true;
        }
        self.exhausted = true;
        false
    }

    /// Top-level blocks: after empty frontmatter and one newline apart
    /// (plain), or a blank line apart (resolved).
    pub(super) fn document(&mut self, blocks: &[Value]) -> String {
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
    pub(super) fn node(&mut self, node: &Value, depth: usize) -> String {
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
    pub(super) fn block(&mut self, block: &Map<String, Value>, kind: &str, depth: usize) -> String {
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
                match (self.mode, self.lookups) {
                    (Mode::Plain, _) => format!("{embed} {id}"),
                    (Mode::Resolved, Some(lookups)) if self.embed_depth < MAX_EMBED_DEPTH => {
                        let resolved = self.resolved_embed(lookups, &link, depth, &ind);
                        append_id(resolved.unwrap_or(embed), &id)
                    }
                    (Mode::Resolved, _) => append_id(embed, &id),
                }
            }
            "WebEmbed" => format!("{ind}[Web Embed]({link}) {id}"),
            "Button" => format!("{ind}[{}]({link}) {id}", or(&text, "Button")),
            "Query" => match (self.mode, self.lookups) {
                (Mode::Plain, _) => format!("{ind}<!-- Query block --> {id}"),
                (Mode::Resolved, None) => {
                    append_id(format!("{ind}{}", query_without_client(block)), &id)
                }
                (Mode::Resolved, Some(lookups)) => {
                    append_id(resolved_query(block, lookups, &ind), &id)
                }
            },
            "Nostr" => format!("{ind}[Nostr: {link}]({link}) {id}"),
            _ if text.is_empty() => String::new(),
            _ => append_id(format!("{ind}{text}"), &id),
        }
    }

    /// `resolveBlockEmbed`: the embedded resource's content (or the block
    /// the link names) between two comments, its blocks at this block's
    /// depth; `> [Embed: LABEL](LINK)` when it has none; `None` when the
    /// lookup failed (the caller shows the link).
    fn resolved_embed(
        &mut self,
        lookups: &Lookups,
        link: &str,
        depth: usize,
        ind: &str,
    ) -> Option<String> {
        use agentos_protocol::seed::hm_id::{BlockRange, HmId};
        let id = HmId::unpack(link)?;
        let embed = lookups.embeds.get(link)?;
        let content = select_embedded(&embed.content, &id);
        if content.is_empty() {
            return Some(format!("{ind}> [Embed: {}]({link})", embed.label));
        }
        let mut opening = vec![format!("embed: {link}"), format!("title: {}", embed.label)];
        if let Some(version) = &id.version {
            opening.push(format!("version: {version}"));
        }
        if let Some(block) = &id.block_ref {
            let range = match &id.block_range {
                Some(BlockRange::Expanded(true)) => "+".to_owned(),
                Some(BlockRange::Span { start, end }) => format!("[{start}:{end}]"),
                _ => String::new(),
            };
            opening.push(format!("block: {block}{range}"));
        }
        let mut lines = vec![format!("{ind}<!-- {} -->", opening.join("; "))];
        self.embed_depth += 1;
        for node in &content {
            let markdown = self.node(node, depth);
            if !markdown.is_empty() {
                lines.push(markdown);
            }
        }
        self.embed_depth -= 1;
        lines.push(format!("{ind}<!-- /embed: {link} -->"));
        Some(lines.join("\n"))
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
    pub(super) fn annotate(&mut self, text: &str, annotations: Option<&Value>) -> String {
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
    pub(super) fn marker(&self, annotation: &Map<String, Value>, open: bool) -> Cow<'static, str> {
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
                    link => match self.lookups.and_then(|l| l.references.get(&link)) {
                        Some(reference) => format!(
                            "[{}{}",
                            if reference.account { "@" } else { "" },
                            reference.label
                        )
                        .into(),
                        None => format!("[↗ {}", fallback_label(&link)).into(),
                    },
                },
            },
            _ => "".into(),
        }
    }

    /// A Table node as GFM with identity comments (`<!-- col:… -->` stays
    /// in the prompt: the strip step only knows `id:` comments). Cells are
    /// found by column id; only the first row may be the header.
    pub(super) fn table(
        &mut self,
        node: &Value,
        block: &Map<String, Value>,
        depth: usize,
    ) -> String {
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
    pub(super) fn row_cells(
        &mut self,
        row: Option<&RowView>,
        columns: &[Option<&Value>],
    ) -> Vec<String> {
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

pub(super) fn str_field<'a>(map: &'a Map<String, Value>, key: &str) -> &'a str {
    map.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `block.attributes?.[key]`.
pub(super) fn attribute<'a>(block: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    block
        .get("attributes")
        .and_then(Value::as_object)
        .and_then(|attributes| attributes.get(key))
}

/// A node's children, when they are an array.
pub(super) fn child_nodes(node: &Value) -> impl Iterator<Item = &Value> {
    node.get("children")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

pub(super) fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

pub(super) fn id_comment(id: Option<&Value>) -> String {
    format!("<!-- id:{} -->", js_display(id))
}

/// The id comment after the first line of `markdown` (alone if it is empty).
pub(super) fn append_id(markdown: String, comment: &str) -> String {
    match markdown.split_once('\n') {
        Some((first, rest)) => format!("{first} {comment}\n{rest}"),
        None if markdown.is_empty() => comment.to_owned(),
        None => format!("{markdown} {comment}"),
    }
}

/// Media urls on IPFS go through the public gateway.
pub(super) fn media_url(url: &str) -> String {
    match url.strip_prefix("ipfs://") {
        Some(cid) => format!("https://ipfs.io/ipfs/{cid}"),
        None => url.to_owned(),
    }
}

/// What the resolved emitter shows for a Query block whose request fails:
/// a query with `includes` (or a `space`) would be requested, one without
/// names no space. (`query.includes` is a truthy method on strings and
/// arrays, which sends those down the request path too.)
pub(super) fn query_without_client(block: &Map<String, Value>) -> &'static str {
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

/// How many embeds deep a resolved rendering inlines content; deeper ones
/// show their link.
pub const MAX_EMBED_DEPTH: usize = 2;

/// `selectEmbeddedContent`: everything, or the block the link names (found
/// depth first): with its children for `#blk+`, without them for `#blk`,
/// and for `#blk[s:e]` that span of its text (UTF-16 units) without them.
pub fn select_embedded(content: &[Value], id: &agentos_protocol::seed::hm_id::HmId) -> Vec<Value> {
    use agentos_protocol::seed::hm_id::BlockRange;
    fn find<'v>(nodes: &'v [Value], block: &str, depth: usize) -> Option<&'v Value> {
        if depth > MAX_NESTING {
            return None;
        }
        nodes.iter().find_map(|node| {
            if node["block"]["id"].as_str() == Some(block) {
                return Some(node);
            }
            find(
                node["children"].as_array().map_or(&[], Vec::as_slice),
                block,
                depth + 1,
            )
        })
    }
    let Some(block) = &id.block_ref else {
        return content.to_vec();
    };
    let Some(found) = find(content, block, 0) else {
        return Vec::new();
    };
    let mut node = found.clone();
    match &id.block_range {
        Some(BlockRange::Expanded(true)) => {}
        Some(BlockRange::Span { start, end }) => {
            if let Some(map) = node.as_object_mut() {
                map.remove("children");
            }
            if let Some(text) = node["block"]["text"].as_str() {
                let units: Vec<u16> = text.encode_utf16().collect();
                let cut = js_slice(&units, *start as f64, *end as f64);
                node["block"]["text"] = Value::String(String::from_utf16_lossy(cut));
            }
        }
        _ => {
            if let Some(map) = node.as_object_mut() {
                map.remove("children");
            }
        }
    }
    vec![node]
}

/// The `Query` request a resolved Query block makes: the block's query
/// (`includes`, `sort`, `limit`) or its legacy flat attributes (`space`,
/// `path`, `mode`, `limit`), sorted by update time, newest first, and 10
/// results unless it says otherwise. `None` when it names no space.
pub fn query_request(block: &Map<String, Value>) -> Option<Value> {
    use serde_json::json;
    let mut request = Map::new();
    let (includes, sort, limit) = match attribute(block, "query") {
        Some(Value::Object(query)) if js_truthy(query.get("includes")) => {
            let includes: Vec<Value> = match query.get("includes") {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|include| {
                        let mut one = Map::new();
                        one.insert(
                            "space".into(),
                            include.get("space").cloned().unwrap_or_default(),
                        );
                        if let Some(path) = include.get("path").filter(|p| !p.is_null()) {
                            one.insert("path".into(), path.clone());
                        }
                        let mode = include
                            .get("mode")
                            .filter(|m| js_truthy(Some(m)))
                            .cloned()
                            .unwrap_or_else(|| json!("Children"));
                        one.insert("mode".into(), mode);
                        Value::Object(one)
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let sort = query.get("sort").and_then(Value::as_array).map(|sorts| {
                sorts
                    .iter()
                    .map(|s| {
                        json!({"reverse": s.get("reverse").and_then(Value::as_bool).unwrap_or(false),
                               "term": s.get("term").cloned().unwrap_or_default()})
                    })
                    .collect::<Vec<_>>()
            });
            (includes, sort, query.get("limit").and_then(Value::as_f64))
        }
        _ => {
            let space = js_or_empty(attribute(block, "space"));
            if space.is_empty() {
                return None;
            }
            let mut one = Map::new();
            one.insert("space".into(), json!(space));
            if let Some(path) = attribute(block, "path").filter(|p| !p.is_null()) {
                one.insert("path".into(), path.clone());
            }
            let mode = attribute(block, "mode")
                .filter(|m| js_truthy(Some(m)))
                .cloned()
                .unwrap_or_else(|| json!("Children"));
            one.insert("mode".into(), mode);
            (
                vec![Value::Object(one)],
                None,
                attribute(block, "limit").and_then(Value::as_f64),
            )
        }
    };
    request.insert("includes".into(), Value::Array(includes));
    request.insert(
        "sort".into(),
        match sort {
            Some(sort) => Value::Array(sort),
            None => json!([{"reverse": true, "term": "UpdateTime"}]),
        },
    );
    let limit = limit.filter(|l| *l != 0.0).unwrap_or(10.0);
    request.insert("limit".into(), json!(limit as i64));
    Some(Value::Object(request))
}

/// A Query block with the server's answer: one line per result, or why
/// there is none.
fn resolved_query(block: &Map<String, Value>, lookups: &Lookups, ind: &str) -> String {
    let Some(request) = query_request(block) else {
        return format!("{ind}<!-- Query: no space specified -->");
    };
    match lookups.queries.get(&request.to_string()) {
        None => format!("{ind}{QUERY_WITHOUT_CLIENT}"),
        Some(Err(message)) => format!("{ind}<!-- Query error: {message} -->"),
        Some(Ok(lines)) if lines.is_empty() => format!("{ind}<!-- Query: no results -->"),
        Some(Ok(lines)) => lines
            .iter()
            .map(|line| format!("{ind}{line}"))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// The reference's `fallbackLabel`: a hypermedia link's path, or its account
/// id shortened to 12 characters, or the link itself.
pub(super) fn fallback_label(link: &str) -> String {
    match agentos_protocol::seed::hm_id::HmId::unpack(link) {
        Some(id) => fallback_doc_label(&id),
        None => link.to_owned(),
    }
}

/// `fallbackDocLabel`: the id's path, or its account id shortened.
pub fn fallback_doc_label(id: &agentos_protocol::seed::hm_id::HmId) -> String {
    if id.path.is_empty() {
        fallback_uid(&id.uid)
    } else {
        id.path.join("/")
    }
}

/// `fallbackUid`: an account id cut to 12 UTF-16 units and `...`.
pub fn fallback_uid(uid: &str) -> String {
    let units: Vec<u16> = uid.encode_utf16().collect();
    match units.get(..12) {
        Some(head) if units.len() > 12 => format!("{}...", String::from_utf16_lossy(head)),
        _ => uid.to_owned(),
    }
}
