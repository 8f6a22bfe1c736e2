//! Block comments: the `<!-- id:… -->`, `<!-- end:… -->` and table cell and column comments the dialect carries block ids and attributes in.

use super::*;

/// A `<!-- id:… type:… attrs:{…} -->` comment.
#[derive(Clone, Debug)]
pub(super) struct Comment {
    pub(super) id: String,
    pub(super) kind: Option<String>,
    pub(super) attrs: Option<Map<String, Value>>,
}

pub(super) struct CommentCaps {
    pub(super) id: (usize, usize),
    pub(super) kind: Option<(usize, usize)>,
    pub(super) attrs: Option<(usize, usize)>,
}

/// How `s` ends, when it ends as every comment regex that runs to the end
/// needs it: `-->` then white space. Answers `\s*-->\s*$` from any
/// position at once (a scan per position made a line of many comment
/// openers quadratic).
pub(super) struct ArrowEnd {
    /// Where the final `-->` starts.
    pub(super) arrow: usize,
    /// The last non-space before it.
    pub(super) before: Option<usize>,
    /// The last line terminator at or before `before`.
    pub(super) terminator: Option<usize>,
}

impl ArrowEnd {
    pub(super) fn of(s: &[u16]) -> Option<ArrowEnd> {
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
    pub(super) fn from(&self, q: usize) -> bool {
        q <= self.arrow && self.before.is_none_or(|b| q > b)
    }
}

/// After the id (and type): `(?:\s+attrs:(\{.*\}))?\s*-->\s*$` from `q`,
/// with the attrs group when it takes part.
pub(super) fn attrs_then_end(
    s: &[u16],
    q: usize,
    end: &ArrowEnd,
) -> Option<Option<(usize, usize)>> {
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
pub(super) fn comment_body_to_end(s: &[u16], p: usize, end: &ArrowEnd) -> Option<CommentCaps> {
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
pub(super) fn match_trailing_comment(s: &[u16]) -> Option<(usize, CommentCaps)> {
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
pub(super) fn match_standalone_comment(s: &[u16]) -> Option<CommentCaps> {
    let end = ArrowEnd::of(s)?;
    comment_body_to_end(s, skip_spaces(s, 0), &end)
}

/// END_RE: `^\s*<!--\s*end:(id)\s*-->\s*$`.
pub(super) fn match_end_comment(s: &[u16]) -> Option<String> {
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
pub(super) fn parse_attrs(s: &[u16]) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(&string(s)) {
        Ok(Value::Object(map)) => Some(js_numbers_map(map)),
        _ => None,
    }
}

pub(super) fn comment_from(s: &[u16], caps: &CommentCaps) -> Comment {
    Comment {
        id: string(&s[caps.id.0..caps.id.1]),
        kind: caps.kind.map(|(a, b)| string(&s[a..b])),
        attrs: caps.attrs.and_then(|(a, b)| parse_attrs(&s[a..b])),
    }
}

/// The text before a trailing block comment, and the comment.
pub(super) fn strip_block_comment(s: &[u16]) -> (&[u16], Option<Comment>) {
    match match_trailing_comment(s) {
        Some((idx, caps)) => (&s[..idx], Some(comment_from(s, &caps))),
        None => (s, None),
    }
}

/// CELL_ID_RE `<!--\s*id:(id)\s*-->` anywhere: the match range and the id.
pub(super) fn match_cell_id(s: &[u16]) -> Option<((usize, usize), String)> {
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
pub(super) struct ColMatch {
    pub(super) range: (usize, usize),
    pub(super) id: String,
    pub(super) attrs: Option<(usize, usize)>,
}

/// COL_ID_RE `<!--\s*col:(id)(?:\s+attrs:(\{.*?\}))?\s*-->` anywhere.
pub(super) fn match_col_id(s: &[u16]) -> Option<ColMatch> {
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
pub(super) fn col_attrs_closers(s: &[u16]) -> (Vec<u32>, Vec<u32>) {
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
