//! Lines, tables and the block parser: the markdown's lines into the block tree, nested by list markers, headings and indentation.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ListKind {
    Unordered,
    Ordered,
    Blockquote,
}

impl ListKind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ListKind::Unordered => "Unordered",
            ListKind::Ordered => "Ordered",
            ListKind::Blockquote => "Blockquote",
        }
    }
}

pub(super) fn is_list_type(t: Option<&str>) -> bool {
    matches!(t, Some("Unordered" | "Ordered" | "Blockquote"))
}

#[derive(Clone, Copy, Debug)]
pub(super) struct LineInfo {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) indent: usize,
    pub(super) marker_len: usize,
    pub(super) kind: Option<ListKind>,
    pub(super) content_col: usize,
    pub(super) rest: usize,
    pub(super) blank: bool,
}

/// MARKER_RE `^([-*+] |\d+[.)] |> )`: the marker's length and kind.
pub(super) fn match_marker(s: &[u16]) -> Option<(usize, ListKind)> {
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

pub(super) fn analyze_line(content: &[u16], start: usize, end: usize) -> LineInfo {
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
pub(super) fn match_heading(s: &[u16]) -> Option<(usize, usize)> {
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
pub(super) fn match_fence(s: &[u16]) -> Option<usize> {
    let n = run_len(s, 0, b'`');
    (n >= 3 && !s[n..].iter().any(|&c| is_line_terminator(c))).then_some(n)
}

pub(super) fn starts_special_block(rest: &[u16]) -> bool {
    match_heading(rest).is_some()
        || match_fence(rest).is_some()
        || starts_with(rest, "$$")
        || starts_with(rest, "![")
        || starts_with(rest, "|")
        || match_standalone_comment(rest).is_some()
        || match_end_comment(rest).is_some()
}

pub(super) fn strip_indent(line: &[u16], n: usize) -> &[u16] {
    let k = line
        .iter()
        .take(n)
        .take_while(|&&c| c == u16::from(b' '))
        .count();
    &line[k..]
}

// ─── Tables ─────────────────────────────────────────────────────────────────

pub(super) struct Cell {
    pub(super) text: Vec<u16>,
    pub(super) col_id: Option<String>,
    pub(super) col_attrs: Option<Map<String, Value>>,
}

pub(super) struct Row {
    pub(super) cells: Vec<Cell>,
    pub(super) id: Option<String>,
}

pub(super) fn split_table_row(line: &[u16]) -> Row {
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

pub(super) fn is_separator_row(cells: &[Cell]) -> bool {
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

pub(super) struct ArenaNode {
    pub(super) block: Block,
    /// Children the block came with (a table's columns and rows), before
    /// those added since; they change no more, so they stay as they are.
    pub(super) done: Vec<BlockNode>,
    pub(super) children: Vec<usize>,
}

pub(super) struct Frame {
    pub(super) node: Option<usize>,
    pub(super) child_indent: usize,
    pub(super) shorthand: Option<ListKind>,
    pub(super) heading_level: Option<usize>,
    pub(super) marker_run: Option<ListKind>,
}

impl Frame {
    pub(super) fn new(node: usize, child_indent: usize) -> Frame {
        Frame {
            node: Some(node),
            child_indent,
            shorthand: None,
            heading_level: None,
            marker_run: None,
        }
    }
}

pub(super) struct BlockAt {
    pub(super) node: BlockNode,
    pub(super) next: usize,
    pub(super) standalone: bool,
}

pub(super) struct BlockParser<'a> {
    pub(super) content: &'a [u16],
    pub(super) lines: Vec<LineInfo>,
    pub(super) ids: &'a mut dyn FnMut() -> String,
    pub(super) arena: Vec<ArenaNode>,
    pub(super) root: Vec<usize>,
}

pub(super) fn leaf(block: Block) -> BlockNode {
    BlockNode {
        block,
        children: Vec::new(),
    }
}

impl<'a> BlockParser<'a> {
    pub(super) fn new(content: &'a [u16], ids: &'a mut dyn FnMut() -> String) -> BlockParser<'a> {
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

    pub(super) fn gen_id(&mut self) -> String {
        (self.ids)()
    }

    pub(super) fn raw(&self, i: usize) -> &'a [u16] {
        let l = self.lines[i];
        &self.content[l.start..l.end]
    }

    pub(super) fn rest(&self, i: usize) -> &'a [u16] {
        let l = self.lines[i];
        &self.content[l.rest..l.end]
    }

    pub(super) fn next_non_blank(&self, from: usize) -> Option<usize> {
        (from..self.lines.len()).find(|&j| !self.lines[j].blank)
    }

    pub(super) fn base_block(&mut self, kind: &str, comment: Option<&Comment>) -> Block {
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

    pub(super) fn text_block(
        &mut self,
        kind: &str,
        raw: &[u16],
        comment: Option<&Comment>,
    ) -> BlockNode {
        let (text, annotations) = parse_inline(raw).into_parts();
        let mut block = self.base_block(kind, comment);
        block.text = text;
        block.annotations = annotations;
        leaf(block)
    }

    pub(super) fn typed_node(&mut self, visible: &[u16], comment: &Comment) -> BlockNode {
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

    pub(super) fn table_cell(&mut self, raw: &[u16], column_id: &str) -> BlockNode {
        let (text, annotations) = parse_inline(raw).into_parts();
        let mut block = Block::new("Paragraph", self.gen_id());
        block.text = text;
        block.annotations = annotations;
        let mut attributes = Map::new();
        attributes.insert("columnId".into(), Value::String(column_id.to_owned()));
        block.attributes = Some(attributes);
        leaf(block)
    }

    pub(super) fn table_node(&mut self, lines: &[&[u16]], comment: Option<&Comment>) -> BlockNode {
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
    pub(super) fn row_cells(
        &mut self,
        column_ids: &[String],
        cells: &[Cell],
        dense: bool,
    ) -> Vec<BlockNode> {
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

    pub(super) fn table_lines_from(&self, mut j: usize) -> (Vec<&'a [u16]>, usize) {
        let mut out = Vec::new();
        while j < self.lines.len() && starts_with(self.rest(j), "|") && !self.lines[j].blank {
            out.push(self.rest(j));
            j += 1;
        }
        (out, j)
    }

    pub(super) fn parse_block_at(&mut self, start: usize) -> BlockAt {
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

    pub(super) fn add(&mut self, node: BlockNode) -> usize {
        self.arena.push(ArenaNode {
            block: node.block,
            done: node.children,
            children: Vec::new(),
        });
        self.arena.len() - 1
    }

    pub(super) fn list_mut(&mut self, node: Option<usize>) -> &mut Vec<usize> {
        match node {
            Some(n) => &mut self.arena[n].children,
            None => &mut self.root,
        }
    }

    pub(super) fn list_len(&self, node: Option<usize>) -> usize {
        match node {
            Some(n) => self.arena[n].done.len() + self.arena[n].children.len(),
            None => self.root.len(),
        }
    }

    pub(super) fn is_implicit_list_start(&self, frame: &Frame, kind: ListKind) -> bool {
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

    pub(super) fn run(&mut self) {
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
    pub(super) fn into_tree(mut self) -> Vec<BlockNode> {
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

pub(super) fn adjust_stack(stack: &mut Vec<Frame>, info: &LineInfo, heading_level: Option<usize>) {
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
