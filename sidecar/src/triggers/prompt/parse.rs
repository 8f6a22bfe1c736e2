//! Markdown to blocks: frontmatter, the line tokenizer, id comments, the
//! tree of headings and lists, tables and the inline scanner.

use super::*;

use super::js::*;

// ─── Markdown → blocks: frontmatter ─────────────────────────────────────────

/// The markdown without its frontmatter, as [`from_markdown`] describes.
pub(super) fn without_frontmatter(markdown: &str) -> &str {
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
pub(super) fn looks_like_mapping(yaml: &str) -> bool {
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

pub(super) fn plausible_yaml_value(value: &str) -> bool {
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
pub(super) enum Token<'a> {
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
pub(super) type ListItem<'a> = (&'a str, Option<&'a str>);

/// The reference's `tokenize`: one pass over `\n`-separated lines (a `\r`
/// stays in the text). Blank lines only separate; a line holding nothing but
/// an id comment names the next list or table (any other block forgets it).
pub(super) fn tokenize(content: &str) -> Vec<Token<'_>> {
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
pub(super) fn fenced(lines: &[&str], fence: &str) -> (String, usize) {
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
pub(super) fn heading(trimmed: &str) -> Option<(usize, &str)> {
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
pub(super) struct ImageLine<'a> {
    pub(super) alt: &'a str,
    pub(super) url: &'a str,
    pub(super) trailing: &'a str,
}

/// `/^!\[([^\]]*)\]\(([^)]+)\)/` on a trimmed line.
pub(super) fn image_line(trimmed: &str) -> Option<ImageLine<'_>> {
    let (alt, rest) = trimmed.strip_prefix("![")?.split_once(']')?;
    let (url, trailing) = rest.strip_prefix('(')?.split_once(')')?;
    (!url.is_empty()).then_some(ImageLine { alt, url, trailing })
}

/// An image url as stored: `file://` unless it names a scheme.
pub(super) fn image_url(url: &str) -> String {
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
pub(super) fn list_item(trimmed: &str) -> Option<(&'static str, &str)> {
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
pub(super) fn continues_paragraph(line: &str) -> bool {
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
pub(super) fn comment_at<'a>(text: &'a str, key: &str) -> Option<(&'a str, usize)> {
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
pub(super) fn find_comment<'a>(text: &'a str, key: &str) -> Option<(&'a str, Range<usize>)> {
    text.match_indices("<!--").find_map(|(at, _)| {
        let (id, length) = comment_at(text.get(at..)?, key)?;
        Some((id, at..at + length))
    })
}

/// A trailing `<!-- id:X -->` split off: the text before it (end-trimmed)
/// and the id. The comment can't contain `<`, so it starts at the last one.
pub(super) fn strip_block_id(text: &str) -> (&str, Option<&str>) {
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
pub(super) fn standalone_id(line: &str) -> Option<&str> {
    let text = js_trim_start(line);
    let (id, length) = comment_at(text, "id:")?;
    js_trim(text.get(length..)?).is_empty().then_some(id)
}

// ─── Markdown → blocks: the tree ────────────────────────────────────────────

/// A parsed block, before it becomes JSON.
#[derive(Default)]
pub(super) struct Block {
    pub(super) kind: &'static str,
    pub(super) id: String,
    pub(super) text: String,
    pub(super) annotations: Vec<Annotation>,
    pub(super) children_type: Option<&'static str>,
    pub(super) language: Option<String>,
    pub(super) link: Option<String>,
    pub(super) attributes: Vec<(&'static str, Value)>,
}

/// A parsed annotation: always one range, in UTF-16 units.
pub(super) struct Annotation {
    pub(super) kind: &'static str,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) link: Option<String>,
}

impl Block {
    pub(super) fn new(kind: &'static str, id: Option<&str>) -> Self {
        let id = id.map_or_else(generate_id, str::to_owned);
        Block {
            kind,
            id,
            ..Block::default()
        }
    }

    pub(super) fn with_inline(mut self, raw: &str) -> Self {
        let (text, annotations) = parse_inline(raw);
        self.text = text;
        self.annotations = annotations;
        self
    }

    /// The `block` of an HM block node, keys inserted in the reference's
    /// order (which serde_json keeps only with its `preserve_order` feature).
    pub(super) fn to_value(&self) -> Value {
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
pub(super) fn generate_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    let mut rng = rand::thread_rng();
    (0..8)
        .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
        .collect()
}

pub(super) fn paragraph(raw: &str, id: Option<&str>) -> Block {
    Block::new("Paragraph", id).with_inline(raw)
}

/// An invisible paragraph holding list items.
pub(super) fn list_container(list_type: &'static str, id: Option<&str>) -> Block {
    let mut container = Block::new("Paragraph", id);
    container.children_type = Some(list_type);
    container
}

pub(super) fn is_list_type(children_type: Option<&str>) -> bool {
    matches!(children_type, Some("Unordered" | "Ordered"))
}

pub(super) struct TreeNode {
    pub(super) block: Block,
    pub(super) children: Vec<usize>,
}

/// The block tree being built: nodes in an arena, and the chain of open
/// headings that new content goes under.
#[derive(Default)]
pub(super) struct Tree {
    pub(super) nodes: Vec<TreeNode>,
    pub(super) roots: Vec<usize>,
    pub(super) headings: Vec<(usize, usize)>,
}

impl Tree {
    pub(super) fn create(&mut self, block: Block, children: Vec<usize>) -> usize {
        self.nodes.push(TreeNode { block, children });
        self.nodes.len() - 1
    }

    /// The innermost open heading.
    pub(super) fn parent(&self) -> Option<usize> {
        self.headings.last().map(|&(_, node)| node)
    }

    pub(super) fn children_of(&self, parent: Option<usize>) -> &[usize] {
        match parent.and_then(|p| self.nodes.get(p)) {
            Some(node) => &node.children,
            None => &self.roots,
        }
    }

    /// `addToCurrentParent`.
    pub(super) fn add(&mut self, node: usize) {
        self.unmerge_heading_list();
        match self.parent().and_then(|p| self.nodes.get_mut(p)) {
            Some(parent) => parent.children.push(node),
            None => self.roots.push(node),
        }
    }

    /// A heading whose list items were merged into it gets other content:
    /// the items move into a list container and the heading is a group again.
    pub(super) fn unmerge_heading_list(&mut self) {
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
    pub(super) fn list_target(&self) -> Option<usize> {
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

    pub(super) fn list(
        &mut self,
        items: &[ListItem],
        list_type: &'static str,
        container_id: Option<&str>,
    ) {
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

    pub(super) fn heading(&mut self, level: usize, text: &str, id: Option<&str>) {
        let mut heading = Block::new("Heading", id).with_inline(text);
        heading.children_type = Some("Group");
        let node = self.create(heading, Vec::new());
        while self.headings.last().is_some_and(|&(open, _)| open >= level) {
            self.headings.pop();
        }
        self.add(node);
        self.headings.push((level, node));
    }

    pub(super) fn into_values(self) -> Vec<Value> {
        self.values(&self.roots)
    }

    /// HM block nodes; the tree is at most a few levels deep (six heading
    /// levels, a list, a table), so recursion is fine.
    pub(super) fn values(&self, nodes: &[usize]) -> Vec<Value> {
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

pub(super) struct SourceRow {
    pub(super) cells: Vec<SourceCell>,
    pub(super) id: Option<String>,
}

pub(super) struct SourceCell {
    pub(super) text: String,
    pub(super) column_id: Option<String>,
}

/// A table line split on unescaped `|`. A row id may sit in any cell (or
/// after the last pipe); column ids sit in header cells.
pub(super) fn split_table_row(line: &str) -> SourceRow {
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
pub(super) fn is_separator_row(row: &SourceRow) -> bool {
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
pub(super) fn table(tree: &mut Tree, lines: &[&str], container_id: Option<&str>) -> usize {
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
pub(super) fn replace_br(text: &str) -> String {
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
pub(super) fn after_br_tag(text: &str) -> Option<&str> {
    let rest = js_trim_start(text.strip_prefix(['b', 'B'])?.strip_prefix(['r', 'R'])?);
    rest.strip_prefix('/').unwrap_or(rest).strip_prefix('>')
}
